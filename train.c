// train.c — gdn-train: config -> model -> data -> loop -> checkpoints (DESIGN 2, 4-7).
//
//   gdn-train CONFIG.ini [--set section.key=value ...] [--resume CKPT.h5] [--gradcheck]
//   gdn-train --resume CKPT.h5 [--set ...]          (the config stored in the checkpoint)
//   --init-from DIR: a new run whose parameters start from a gdn-export directory (hf.h).
//   --stop-after N: leave after step N with a checkpoint, as if interrupted (the schedule still
//   spans train.steps), so a later --resume continues the same run.
//   --timeline N: spans of N steps per stream (forward, backward per gradient range, all-reduce
//   buckets, wait, update) into <out_dir>/timeline.csv (rank R > 0: timeline.rankR.csv); see
//   timeline_window and src/diag/timeline.h. It changes no bit of the run.
//   --test-fault-nan-step N (for tests): the loss of step N is made NaN.
//   --test-fault-grad-scale STEP[-LAST]:FACTOR (for tests): the summed gradients of step STEP (to
//   LAST) are multiplied by FACTOR before their norm is taken (an outlier, or inf / nan, norm).
//
// Each step: grad_accum micro-batches of batch_size x seq_len tokens (forward, fused loss,
// backward, gradients accumulated), global-norm clipping, AdamW, the LR schedule. A progress
// line every log.every steps, JSON lines in <out_dir>/metrics.jsonl, validation every
// train.eval_every steps, an atomic HDF5 checkpoint every train.ckpt_every steps and at the end
// (train.keep_checkpoints: the last N and the best by validation loss; docs/checkpoints.md).
// SIGINT/SIGTERM: the step in flight finishes, a checkpoint is written, exit 0. A metrics or
// progress line that cannot be written (a full disk) stops the run naming the file and the step.
//
// Blow-ups. A loss is bad when it is not finite or above the blow-up bound: twice the larger of
// a uniform guess's loss, ln(vocab_size), and this run's first loss (the loss of the weights it
// started from). No sound run gets there: its loss starts near ln(vocab_size) and falls, while
// weights thrown far off (optim.lr = 1e6) give losses of 1e12 that stay finite in float64. So:
//  - a step whose loss is bad stops the run (exit 3) before its update;
//  - a step whose gradient norm is bad (not finite, or more than train.skip_zscore standard
//    deviations above the mean of the last train.skip_window updated steps) is skipped: no
//    update, a logged line and a metrics record, its data consumed all the same (so a resume
//    stays bitwise; the skip counts and the window are checkpointed); the train.max_skips-th
//    skipped step in a row stops the run (exit 3);
//  - weights are checkpointed only when their loss is not bad: the step's validation loss when
//    it has one, else the loss of one validation batch (probe_loss); a bad one stops the run
//    (exit 3) without writing, and so does a bad validation loss on a step without checkpoint.
// The message names the step and the last good checkpoint (the last written or resumed from,
// with its step), whose weights passed the same test.
//
// Before anything in the run directory changes (config.ini, metrics, checkpoint), the config,
// the data and, with --resume, the checkpoint are validated, and the ranks agree:
//  - the run directory belongs to one run: a new run into an out_dir that holds a checkpoint
//    or a metrics file with lines is refused unless train.overwrite = true, and so is a resume
//    into an out_dir holding another checkpoint than the one resumed (claim_run_dir);
//  - --resume: the effective config agrees with the checkpoint's stored one except in the keys
//    config_key_resumable lists (src/core/config.c), and the checkpoint's step is at most
//    train.steps; at train.steps exactly there is nothing to do (a message, exit 0);
//  - ranks: the config text and the data file's identity hash alike on every rank before the
//    first collective whose size depends on them, and the parameters and loop state after the
//    start (src/dist/agree.h); a rank that differs names the key, data field or tensor.
// Any refusal stops every rank with exit 1.
//
// Data parallel (DESIGN 8, src/dist): under mpirun / torchrun / srun every rank runs this loop
// on batch_size sequences of its own (micro-batch m of rank r takes windows
// [(m world + r) B, (m world + r + 1) B) of each step's batch: data/dataset.h), gradients are
// summed across ranks in buckets of dist.bucket_mb, overlapped with the backward unless
// dist.overlap = false (src/dist/grad_sync.h: a bucket goes out as soon as the layers it holds
// are done), and every rank applies the same update; with dist.zero1 each bucket piece is summed
// to the rank whose shard holds it instead, which updates its shard and all-gathers the weights
// (src/dist/zero1.h), on the CPU and the GPU. Rank 0 alone logs and writes checkpoints.
//
// main() runs the phases in order: the command line, the config, the communicator and the
// backend, the data, the checks before any write (ranks agree, --resume fits, out_dir is free),
// the model (with ZeRO-1's shards), the start (resume or init) and its agreement across ranks,
// the run directory's config.ini, then either the evaluation of a checkpoint (--eval) or the
// training loop, and the end of the run.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/common.h"
#include "core/config.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "diag/compare.h"
#include "diag/profile.h"
#include "diag/timeline.h"
#include "dist/agree.h"
#include "dist/dist.h"
#include "dist/grad_sync.h"
#include "dist/zero1.h"
#include "eval/eval.h"
#include "fwd/cpu_threads.h"
#include "fwd/fwd_cpu.h"
#include "model/backend_gpu.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/hf.h"
#include "model/model.h"
#include "optim/optim.h"

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) { g_stop = sig; }

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn-train CONFIG.ini [--set section.key=value ...] [--resume CKPT.h5]\n"
            "                 [--gradcheck [--device cpu|cuda]] [--stop-after N] [--gpus N] [--profile N]\n"
            "                 [--profile-events] [--timeline N]\n"
            "       gdn-train --resume CKPT.h5 [--set ...]   (uses the config saved in the checkpoint)\n"
            "       gdn-train --resume CKPT.h5 --eval [--set ...]   (the validation loss, then exit)\n"
            "  --set        override one config key (repeatable), e.g. --set train.steps=200\n"
            "  --resume     continue from a checkpoint, bit for bit; the config must be the checkpoint's\n"
            "               but for steps, cadences, devices, batch split, lr schedule (src/core/config.c)\n"
            "               (a new run refuses an out_dir that holds a run; train.overwrite=true starts over)\n"
            "  --init-from DIR  a new run starting from the parameters of a gdn-export (Hugging Face)\n"
            "               directory; its config.json must match the run's model (docs/export.md)\n"
            "  --eval       with --resume: evaluate the checkpoint's weights on the validation split\n"
            "               (train.eval_batches; 0 = the whole split) and exit; writes nothing\n"
            "  --gradcheck  finite-difference check of the configured model on the CPU (float64);\n"
            "               with --device cuda: the GPU backend (fp32 and bf16) against the CPU\n"
            "               float64 gradients, per parameter tensor\n"
            "  --stop-after N  stop after step N with a checkpoint, as if interrupted\n"
            "  --gpus N     run N local data-parallel workers, one per GPU (NCCL)\n"
            "  --profile N  2 warm-up steps, then N steps with every op timed between device syncs;\n"
            "               prints the per-op table (also <out_dir>/profile.txt); no eval, no checkpoint\n"
            "  --profile-events  with --profile: time each op by two CUDA events instead of syncs, so the\n"
            "               step runs as unprofiled (GPU only); the table adds the time between ops\n"
            "  --timeline N record N steps (after 2 warm-up steps; from the first step when the run\n"
            "               is shorter) on a per-stream timeline: forward, backward of each gradient\n"
            "               range (lm_head, norm_f, layer L-1..0, embed), each all-reduce bucket, the\n"
            "               wait for the sums, norm + update. CSV step,rank,stream,name,start_ms,end_ms\n"
            "               (ms from the step's start) in <out_dir>/timeline.csv (rank R > 0:\n"
            "               timeline.rankR.csv); tools/plot-timeline draws it. Same weights, bit for bit\n"
            "testing (fault injection for the test suite, not for runs):\n"
            "  --test-fault-nan-step N  make the loss of step N NaN (the run stops there, exit 3)\n"
            "  --test-fault-grad-scale STEP[-LAST]:FACTOR  multiply the gradients of step STEP (to LAST)\n"
            "               by FACTOR before their norm is taken (an outlier or non-finite norm)\n");
}

// ---- helpers: directories, times, the MFU's peak, evaluation, checkpoints, numbers -------------

static void mkdir_p(const char *dir) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) gdn_die("cannot create directory '%s': %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) gdn_die("cannot create directory '%s': %s", buf, strerror(errno));
}

static void fmt_eta(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    else
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

// Dense float64 matrix-product rate of this CPU (the op the model spends its time in): the
// denominator of the CPU MFU. Measured once at start on 384^3 products for ~0.15 s; the fastest
// product counts, so a moment of other load on the machine does not lower the peak (and lift
// the MFU above what the hardware gives).
static double cpu_peak_flops(void) {
    int n = 384;
    double *a = gdn_malloc(sizeof(double) * n * n), *b = gdn_malloc(sizeof(double) * n * n),
           *c = gdn_malloc(sizeof(double) * n * n);
    for (int i = 0; i < n * n; i++) a[i] = b[i] = 1e-3 * (i % 97);
    linear_fwd_cpu(c, a, b, NULL, n, n, n);
    double t0 = gdn_now(), best = INFINITY;
    do {
        double t = gdn_now();
        linear_fwd_cpu(c, a, b, NULL, n, n, n);
        best = fmin(best, gdn_now() - t);
    } while (gdn_now() - t0 < 0.15);
    double rate = 2.0 * n * n * (double)n / best;
    free(a);
    free(b);
    free(c);
    return rate;
}

// data.sampling = documents: rows of packed documents whose starts travel with the batch.
static bool data_documents(const gdn_config *c) { return !strcmp(c->data_sampling, "documents"); }

// eval_batches = 0 (the messages): the window count W of the whole-split tiling
// (sampler_tile_split, data/dataset.h) and in *batches the global batches W / G that cover it.
static uint64_t full_eval_windows(const data_source *src, const gdn_config *c, const dist *d,
                                  uint64_t *batches) {
    uint64_t G = (uint64_t)c->grad_accum * (uint64_t)d->world * (uint64_t)c->batch_size;
    uint64_t W = eval_full_windows(src->set[0].n_tokens[DATA_SPLIT_VAL], (uint64_t)c->seq_len, G);
    if (batches) *batches = W / G;
    return W;
}

// Mean loss over eval_batches validation batches (0: the batches that tile the whole split,
// independent of train.seed). Like the training batches, each global batch of grad_accum x
// world x B windows is split over the micro-batches and the ranks, so N ranks of batch B/N, or
// one rank with N micro-batches of B/N, evaluate the windows one rank of batch B does (each
// rank 1/N of the work); every rank returns the same mean. doc: (B*T) the rows' document starts
// (data.sampling = documents).
static double evaluate(model *m, const data_source *src, const gdn_config *c, int32_t *x,
                       int32_t *y, int32_t *doc, dist *d) {
    batch_sampler vs;
    char err[1024];
    const sampler_params sp = {.src = src, .split = DATA_SPLIT_VAL, .documents = data_documents(c),
                               .B = c->batch_size, .T = c->seq_len, .seed = c->seed ^ 0x5A17u,
                               .rank = d->rank, .world = d->world, .n_mb = c->grad_accum};
    if (!sampler_init(&vs, &sp, err, sizeof err)) gdn_die("validation data: %s", err);
    long nb = c->eval_batches > 0 ? c->eval_batches : (long)sampler_tile_split(&vs);
    double s = 0;
    const long n = nb * c->grad_accum;
    for (long i = 0; i < n; i++) {
        sampler_next(&vs, x, y, doc);
        model_set_doc_starts(m, vs.documents ? doc : NULL);
        s += model_eval_loss(m, x, y);
    }
    sampler_free(&vs);
    return dist_scalar_sum_f64(d, s) / ((double)n * d->world);
}

// A whole number in [lo, hi] for option `opt`; else a message naming what it takes, false.
static bool count_arg(const char *opt, const char *what, const char *text, long lo, long hi,
                      long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < lo || v > hi) {
        if (hi == LONG_MAX) fprintf(stderr, "error: %s takes %s >= %ld, got '%s'\n", opt, what, lo, text);
        else fprintf(stderr, "error: %s takes %s in [%ld, %ld], got '%s'\n", opt, what, lo, hi, text);
        return false;
    }
    *out = v;
    return true;
}

// ---- the command line --------------------------------------------------------------------------

enum { MAX_SETS = 256 };

typedef struct {
    const char *cfg_path, *resume;  // CONFIG.ini and --resume (either may be NULL, not both)
    const char *init_from;          // --init-from DIR (a new run only), or NULL
    const char *sets[MAX_SETS];     // --set section.key=value, in order
    int nset;
    bool gradcheck, eval_only, profile_events;
    const char *gc_device;          // --device for --gradcheck: "cpu" or "cuda"
    int gpus;                       // --gpus: local workers to spawn (1: none)
    long stop_after;                // --stop-after (-1: none)
    long profile_steps;             // --profile (0: off)
    long timeline_steps;            // --timeline (0: off)
    long fault_nan_step;            // --test-fault-nan-step (-1: none)
    long fault_grad_step;           // --test-fault-grad-scale STEP (-1: none) ...
    long fault_grad_last;           // ... LAST (= STEP when not given) ...
    double fault_grad_scale;        // ... and FACTOR
} train_args;

// -1 when the run goes on, else the exit code (0 after --help, 2 after a usage error).
static int parse_args(int argc, char **argv, train_args *a) {
    *a = (train_args){.gc_device = "cpu", .gpus = 1, .stop_after = -1, .fault_nan_step = -1,
                      .fault_grad_step = -1, .fault_grad_last = -1};
    if (argc > MAX_SETS) {
        fprintf(stderr, "error: too many arguments (%d)\n", argc);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc)
            a->sets[a->nset++] = argv[++i];
        else if (!strncmp(argv[i], "--set=", 6))
            a->sets[a->nset++] = argv[i] + 6;
        else if (!strcmp(argv[i], "--resume") && i + 1 < argc)
            a->resume = argv[++i];
        else if (!strcmp(argv[i], "--init-from") && i + 1 < argc)
            a->init_from = argv[++i];
        else if (!strcmp(argv[i], "--stop-after") && i + 1 < argc) {
            if (!count_arg("--stop-after", "a step number", argv[++i], 1, LONG_MAX, &a->stop_after))
                return 2;
        } else if (!strcmp(argv[i], "--profile") && i + 1 < argc) {
            if (!count_arg("--profile", "a step count", argv[++i], 1, LONG_MAX, &a->profile_steps))
                return 2;
        } else if (!strcmp(argv[i], "--profile-events")) {
            a->profile_events = true;
        } else if (!strcmp(argv[i], "--timeline") && i + 1 < argc) {
            if (!count_arg("--timeline", "a step count", argv[++i], 1, LONG_MAX, &a->timeline_steps))
                return 2;
        } else if (!strcmp(argv[i], "--test-fault-nan-step") && i + 1 < argc) {
            if (!count_arg("--test-fault-nan-step", "a step number", argv[++i], 1, LONG_MAX,
                           &a->fault_nan_step))
                return 2;
        } else if (!strcmp(argv[i], "--test-fault-grad-scale") && i + 1 < argc) {
            const char *v = argv[++i];
            char *end = NULL;
            errno = 0;
            long first = strtol(v, &end, 10), last = first;
            if (end != v && *end == '-') last = strtol(end + 1, &end, 10);
            bool ok = end != v && *end == ':' && errno == 0 && first >= 1 && last >= first;
            if (ok) {
                const char *f = end + 1;
                a->fault_grad_scale = strtod(f, &end);
                ok = end != f && *end == '\0';
            }
            if (!ok) {
                fprintf(stderr, "error: --test-fault-grad-scale takes STEP[-LAST]:FACTOR (step "
                                "numbers 1 <= STEP <= LAST and a number), got '%s'\n", v);
                return 2;
            }
            a->fault_grad_step = first;
            a->fault_grad_last = last;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            a->gc_device = argv[++i];
            if (strcmp(a->gc_device, "cpu") && strcmp(a->gc_device, "cuda")) {
                fprintf(stderr, "error: --device takes cpu or cuda, got '%s'\n", a->gc_device);
                return 2;
            }
        } else if (!strcmp(argv[i], "--gpus") && i + 1 < argc) {
            long g;
            if (!count_arg("--gpus", "a count", argv[++i], 1, 64, &g)) return 2;
            a->gpus = (int)g;
        } else if (!strcmp(argv[i], "--gradcheck"))
            a->gradcheck = true;
        else if (!strcmp(argv[i], "--eval"))
            a->eval_only = true;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || a->cfg_path) {
            fprintf(stderr, "error: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else
            a->cfg_path = argv[i];
    }
    if (!a->cfg_path && !a->resume) {
        usage(stderr);
        return 2;
    }
    if (a->init_from && (a->resume || !a->cfg_path)) {
        fprintf(stderr, "error: --init-from starts a new run from exported parameters: it needs "
                        "CONFIG.ini and takes no --resume\n");
        return 2;
    }
    if (a->profile_events && a->profile_steps == 0) {
        fprintf(stderr, "error: --profile-events changes how --profile N times the ops: give "
                        "--profile N too\n");
        return 2;
    }
    if (a->eval_only && (!a->resume || a->gradcheck || a->stop_after > 0 || a->profile_steps > 0 ||
                         a->timeline_steps > 0)) {
        fprintf(stderr, "error: --eval evaluates a checkpoint: it needs --resume CKPT.h5 and takes "
                        "no --gradcheck, --stop-after, --profile or --timeline\n");
        return 2;
    }
    return -1;
}

// The config file with the --set overrides, or the config stored in the --resume checkpoint
// with them. false (the message printed) on a bad file or value.
static bool load_config(gdn_config *cfg, const train_args *a) {
    config_defaults(cfg);
    if (a->cfg_path) return config_load(cfg, a->cfg_path, a->sets, a->nset);
    char err[1024];
    char *text = checkpoint_read_config(a->resume, err, sizeof err);
    if (!text) gdn_die("%s", err);
    bool ok = config_load_string_sets(cfg, text, a->resume, a->sets, a->nset);
    free(text);
    return ok;
}

// --gradcheck: the exit code (0: every tensor within tolerance).
static int run_gradcheck(gdn_config *cfg, const char *device) {
    if (!strcmp(device, "cpu")) {
        // and with model.doc_reset, again with documents whose starts cut the 4-token chunks
        static const int32_t docs[2 * 9] = {0, 0, 0, 3, 3, 3, 3, 3, 8, 0, 0, 0, 0, 0, 5, 6, 6, 6};
        int fails = model_gradcheck(cfg, 2, 9, 12, 1e-6, cfg->seed, stdout);
        if (cfg->doc_reset) fails += model_gradcheck_docs(cfg, 2, 9, 12, 1e-6, cfg->seed, docs, stdout);
        return fails ? 1 : 0;
    }
    if (!backend_gpu_built())
        gdn_die("--device cuda: this build has no CUDA backend (configure where nvcc is found)");
    char why[256];
    if (!model_gpu_check(cfg, why, sizeof why))
        gdn_die("--gradcheck --device cuda: %s\nHINT: set the key to a value the GPU kernels are built "
                "for, or --device cpu", why);
    if (cfg->vocab_size == 0) {  // the tokens of the check are random: any vocabulary works
        char err[1024];
        token_set probe;
        bool opened = tokset_open(&probe, cfg->data_path, err, sizeof err);
        cfg->vocab_size = opened ? probe.vocab_size : 256;
        if (opened) tokset_close(&probe);
    }
    int T = GDN_MIN(cfg->seq_len, 256), fails = 0;
    printf("== GPU fp32 vs CPU float64 (tolerance 1e-4)\n");
    fails += model_compare_backends(cfg, backend_gpu_get(false), 2, T, 1e-4, cfg->seed, stdout);
    printf("== GPU bf16 vs CPU float64 (tolerance 5e-2: bf16 keeps 8 bits)\n");
    fails += model_compare_backends(cfg, backend_gpu_get(true), 2, T, 5e-2, cfg->seed, stdout);
    return fails ? 1 : 0;
}

// ---- the run: what the phases set up for the loop ----------------------------------------------

typedef struct {
    train_args args;
    gdn_config cfg;
    double t_launch;          // "startup:" in the header: what a user waits before step 1
    // communicator and backend
    dist *d;
    bool r0;                  // rank 0: logs and writes checkpoints
    bool collectives;         // sums over ranks: world > 1, or dist.backend named at world 1
    bool on_gpu;
    const backend *be;
    // data and model
    data_source data;         // data.path, or data.mix's sets
    model *m;
    zero1 *z;                 // dist.zero1 with collectives, else NULL
    evaluator *ev;            // the [eval] section, NULL when it asks for nothing
    int32_t *x, *y;           // (m->N) one micro-batch's inputs and targets
    int32_t *doc;             // (m->N) its document starts (data.sampling = documents)
    train_state st;
    ckpt_tokenizer tok;       // the tokenizer checkpoints carry (ckpt_set_tokenizer)
    char ckpt[1200];          // <out_dir>/checkpoint.h5: the latest checkpoint
    // the loop
    batch_sampler ts;
    FILE *metrics;
    char metrics_path[1200];  // <out_dir>/<log.metrics_file> (rank > 0: /dev/null)
    timeline *tl;             // --timeline, else NULL
    grad_sync *gs;
    long tokens_per_step;
    double peak;              // FLOP/s of all ranks: the MFU's denominator
    int peak_retries;         // CPU: times the matmul rate was timed again (log_progress)
    double t_start, t_win;    // the loop's start; the start of the current log window
    double t_aside;           // seconds of the window spent evaluating or checkpointing
    long win_steps;           // steps in the window
    double last_val;          // the last validation loss (NAN: none yet)
    double loss_bound;        // the blow-up bound on losses (INFINITY until the first step)
    char last_good[1200];     // the last checkpoint written or resumed from ("none")
    long last_good_step;      // its step (-1: none)
    bool new_best;            // the last validation improved st.best_val
    double last_z;            // the last step's gradient-norm z-score (NAN: not judged)
    long prof_done;           // --profile: steps run so far
    double t_prof;            // --profile: wall seconds of the profiled steps
} run;

// Rank and world from the launcher (mpirun, torchrun, srun) or 1; the communicator; the device.
static void setup_dist(run *r) {
    const gdn_config *c = &r->cfg;
    const char *cfg_name = r->args.cfg_path ? r->args.cfg_path : r->args.resume;
    char err[1024];
    dist_env env;
    if (!dist_env_read(&env, err, sizeof err)) gdn_die("%s", err);
    if (!strcmp(c->device, "cuda") && !backend_gpu_built())
        gdn_die("train.device = cuda: this build has no CUDA backend (configure where nvcc is found)");
    // cuda refuses a model the GPU kernels do not cover; auto picks the GPU when this build has
    // CUDA, a device is there and the kernels cover the model (else the CPU, saying why)
    char why[256];
    const bool gpu_ok = model_gpu_check(c, why, sizeof why);
    if (!strcmp(c->device, "cuda") && !gpu_ok)
        gdn_die("%s: train.device = cuda: %s\nHINT: set the key to a value the GPU kernels are "
                "built for, or train.device = cpu", cfg_name, why);
    r->on_gpu = backend_gpu_built() &&
                (!strcmp(c->device, "cuda") || (!strcmp(c->device, "auto") && backend_gpu_devices() > 0));
    if (r->on_gpu && !gpu_ok) {
        r->on_gpu = false;
        if (env.rank == 0)
            printf("note: train.device = auto: %s; running on the CPU\n", why);
    }
    // dist.backend: auto = NCCL across GPUs, MPI across CPU ranks; nccl or mpi at world 1 runs
    // the whole data-parallel path (buckets, collectives, ZeRO-1) over one rank, as a check
    const char *want = r->on_gpu && env.world > 1 ? "nccl" : env.mpi_launcher ? "mpi" : "none";
    if (strcmp(c->dist_backend, "auto")) {
        want = c->dist_backend;
        if (!strcmp(want, "nccl") && !r->on_gpu)
            gdn_die("%s: [dist] backend = nccl needs the GPU (train.device = %s picks the CPU)",
                    cfg_name, c->device);
        if (!strcmp(want, "mpi") && r->on_gpu)
            gdn_die("%s: [dist] backend = mpi carries CPU ranks only; on GPUs use nccl (or auto)",
                    cfg_name);
    }
    r->d = dist_init(want, c->timeout_s, c->nccl_id_path, err, sizeof err);
    if (!r->d) gdn_die("%s", err);
    r->r0 = r->d->rank == 0;
    if (!r->r0 && !freopen("/dev/null", "w", stdout)) gdn_die("cannot silence rank %d's stdout", r->d->rank);
    r->collectives = r->d->world > 1 || (r->d->backend != DIST_NONE && strcmp(c->dist_backend, "auto"));
}

// The float64 CPU backend or the GPU's (on dist_init's device); --profile wraps it.
static void setup_backend(run *r) {
    r->be = &backend_cpu;
    if (r->on_gpu) {
        r->be = backend_gpu_get(!strcmp(r->cfg.precision, "bf16"));
        backend_gpu_set_attention_deterministic(r->cfg.swa_deterministic);
        backend_gpu_set_gemm_tune(r->cfg.gemm_tune);
        backend_gpu_set_gdn_bwd_segment_chunks(r->cfg.gdn_bwd_segment_chunks);
    }
    if (r->args.profile_steps > 0) r->be = backend_profiled(r->be);  // a decorator: same name, same sizes
    if (r->args.profile_events) {
        if (!r->on_gpu) gdn_die("--profile-events: device events need the GPU backend (train.device = "
                                "cuda or auto with a GPU); on the CPU use --profile alone");
        profile_use_clock(timeline_device_clock());
    }
}

// The tokenizer every checkpoint of this run stores (kind "bytes" | "bpe" | "spm" and its blob,
// tokenizer.h; copied). open_data sets it from the token set.
static void ckpt_set_tokenizer(run *r, const char *kind, const void *blob, size_t n) {
    ckpt_tokenizer_set(&r->tok, kind, blob, n);
}

// The token set (data.path) or sets (data.mix); model.vocab_size = 0 takes theirs. Their
// tokenizer (one for all sets of a mix) goes into checkpoints.
static void open_data(run *r) {
    gdn_config *c = &r->cfg;
    char err[2048];
    if (!data_source_open(&r->data, c->data_path, c->data_mix, err, sizeof err))
        gdn_die("%s\nHINT: make it with gdn-prepare (see README.md), or set data.path", err);
    const token_set *ts = &r->data.set[0];  // a mix's sets share one vocabulary
    if (c->vocab_size == 0) c->vocab_size = ts->vocab_size;
    if (c->vocab_size < ts->vocab_size)
        gdn_die("model.vocab_size = %d but '%s' has vocab_size %d: its tokens would index past "
                "the embedding\nHINT: set model.vocab_size = 0 (take the data's) or >= %d",
                c->vocab_size, ts->index, ts->vocab_size, ts->vocab_size);
    if (r->data.n > 1 && c->eval_batches == 0)
        gdn_die("train.eval_batches = 0 evaluates the whole validation split of one token set; "
                "with data.mix (%d sets) set train.eval_batches >= 1", r->data.n);
    if (ts->sharded) {
        ckpt_set_tokenizer(r, ts->tokenizer_kind, ts->tokenizer_blob, ts->tokenizer_blob_len);
    } else {  // a v1 file names its tokenizer: "bytes" or "spm:<model file>"
        ckpt_tokenizer t = {.kind = ""};
        if (ckpt_tokenizer_from_spec(&t, ts->tokenizer, err, sizeof err))
            ckpt_set_tokenizer(r, t.kind, t.blob, t.n);
        else if (r->r0)
            printf("note: checkpoints will carry no tokenizer: '%s': %s\n", c->data_path, err);
        ckpt_tokenizer_free(&t);
    }
}

// The [eval] section checked against the run, its sets and files opened (eval.h).
static void open_eval(run *r) {
    char err[4096];
    r->ev = evaluator_open(&r->cfg, &r->data, err, sizeof err);
    if (!r->ev && err[0]) gdn_die("%s", err);
}

// The effective config on stdout (write_config puts it in the run directory once the run has
// been validated).
static void print_config(const run *r) {
    char *text = config_to_string(&r->cfg);
    errno = 0;
    bool ok = (r->args.eval_only ? printf("effective config:\n")
                                 : printf("effective config (also in %s/config.ini):\n",
                                          r->cfg.out_dir)) >= 0;
    ok = fputs(text, stdout) != EOF && ok;
    free(text);
    if (fflush(stdout) != 0 || !ok)
        gdn_die("cannot write the effective config to stdout: %s", errno ? strerror(errno) : "write error");
}

// ---- validation before anything in the run directory changes --------------------------------

// Every rank stops (exit 1) when any rank's `ok` is false; a rank that found a problem has said
// which. Collective, so that no rank is left waiting in a later collective.
static void stop_unless_all_ok(run *r, bool ok) {
    if (dist_scalar_max_f64(r->d, ok ? 0.0 : 1.0) == 0.0) return;
    fflush(stdout);
    dist_free(r->d);
    exit(1);
}

// Rank 0 prints each rank's msg ("" = nothing to say), the first 8 of them: the other ranks'
// messages reach the user through rank 0, as a launcher that stops the job on a failed rank may
// drop the output of the ranks it stops. Collective.
static void say_from_rank0(dist *d, const char *msg) {
    int shown = 0, more = 0;
    for (int k = 0; k < d->world; k++) {
        char *m = k == 0 ? gdn_strdup(msg) : dist_bcast_string(d, msg, k);
        if (d->rank == 0 && m[0] && shown < 8) shown++, fprintf(stderr, "%s\n", m);
        else if (m[0]) more++;
        free(m);
    }
    if (d->rank == 0 && more) fprintf(stderr, "(and %d more ranks)\n", more);
}

// The identity of one token set, as text: the file that defines it (a v1 file or index.json),
// its size, splits, vocabulary, tokenizer, and an FNV-1a hash of its first and last 64 KiB
// (cheap, and it changes with any re-preparation).
static void describe_set(const token_set *tf, char *buf, size_t n) {
    unsigned char bytes[65536];
    uint64_t h = AGREE_HASH_INIT;
    long long size = -1;
    int fd = open(tf->index, O_RDONLY);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        size = (long long)st.st_size;
        ssize_t got = pread(fd, bytes, sizeof bytes, 0);
        if (got > 0) h = agree_hash(h, bytes, (size_t)got);
        off_t tail = st.st_size > (off_t)sizeof bytes ? st.st_size - (off_t)sizeof bytes : 0;
        got = pread(fd, bytes, sizeof bytes, tail);
        if (got > 0) h = agree_hash(h, bytes, (size_t)got);
    }
    if (fd >= 0) close(fd);
    snprintf(buf, n, "'%s': %lld bytes, %llu + %llu tokens, vocab_size %d, tokenizer %s, "
             "eot_token %d, head/tail hash %016llx", tf->index, size,
             (unsigned long long)tf->n_tokens[DATA_SPLIT_TRAIN],
             (unsigned long long)tf->n_tokens[DATA_SPLIT_VAL], tf->vocab_size, tf->tokenizer,
             tf->eot_token, (unsigned long long)h);
}

// The data's identity: every set's (with its weight in a mix).
static void describe_data(const data_source *src, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k < src->n && used + 1 < n; k++) {
        describe_set(&src->set[k], buf + used, n - used);
        used += strlen(buf + used);
        if (src->n > 1)
            snprintf(buf + used, n - used, " (weight %.6g)%s", src->weight[k],
                     k + 1 < src->n ? "; " : "");
        used += strlen(buf + used);
    }
}

// The ranks run one config on one data file: their effective configs (the text) and data
// identities hash alike; else each rank that differs names the first key (rank 0's value and
// its own) or both data identities, and every rank stops. Before build_model: ZeRO-1's shards
// and the gradient buckets are sized by the config.
static void agree_config_and_data(run *r) {
    dist *d = r->d;
    if (d->world == 1) return;
    char *text = config_to_string(&r->cfg), data[2048];
    describe_data(&r->data, data, sizeof data);
    uint64_t mine[2] = {agree_hash(AGREE_HASH_INIT, text, strlen(text)),
                        agree_hash(AGREE_HASH_INIT, data, strlen(data))}, root[2];
    int differ = dist_agree_u64(d, mine, root, 2);
    if (differ > 0) {
        char *text0 = dist_bcast_string(d, text, 0), *data0 = dist_bcast_string(d, data, 0);
        char msg[4096] = "";
        gdn_config c0;
        config_difference diff;
        config_defaults(&c0);
        if (mine[0] != root[0] && config_load_string(&c0, text0, "rank 0's config") &&
            config_first_difference(&c0, &r->cfg, 0, false, &diff) >= 0)
            snprintf(msg, sizeof msg, "error: rank %d: [%s] %s = %s on this rank, %s on rank 0: "
                     "every rank must run the same config", d->rank, diff.section, diff.key,
                     diff.b, diff.a);
        else if (mine[0] != root[0])
            snprintf(msg, sizeof msg, "error: rank %d: the config differs from rank 0's", d->rank);
        else if (mine[1] != root[1])
            snprintf(msg, sizeof msg, "error: rank %d: the data file differs from rank 0's: %s on "
                     "this rank, %s on rank 0", d->rank, data, data0);
        say_from_rank0(d, msg);
        if (d->rank == 0)
            fprintf(stderr, "error: %d of %d ranks run another config or data file than rank 0; "
                    "stopping every rank\n", differ, d->world);
        free(text0);
        free(data0);
    }
    free(text);
    stop_unless_all_ok(r, differ == 0);
}

// --resume: the effective config against the one stored in the checkpoint. Keys outside the
// list of config_key_resumable must agree; the first that does not is named with both values.
static void check_resume_config(run *r) {
    const char *resume = r->args.resume;
    if (!resume) return;
    char err[1024];
    char *text = checkpoint_read_config(resume, err, sizeof err);
    bool ok = text != NULL;
    if (!ok) fprintf(stderr, "error: %s\n", err);
    gdn_config stored;
    config_defaults(&stored);
    ok = ok && config_load_string(&stored, text, resume);
    config_difference diff;
    if (ok && config_first_difference(&stored, &r->cfg, 0, true, &diff) >= 0) {
        fprintf(stderr, "error: --resume '%s': [%s] %s is %s in the checkpoint's config, %s here; "
                "it may not change on resume (the model, its data, train.seed and AdamW's betas, "
                "eps and weight decay stay as the checkpoint has them)\n"
                "HINT: resume with %s.%s = %s, or start a new run\n", resume, diff.section,
                diff.key, diff.a, diff.b, diff.section, diff.key, diff.a);
        ok = false;
    }
    free(text);
    stop_unless_all_ok(r, ok);
}

// A run directory belongs to one run (rank 0 looks: it alone writes there). A new run is refused
// when out_dir holds a checkpoint or a metrics file that is not empty; a resumed one when out_dir
// holds another checkpoint than the one resumed (the run would replace it). train.overwrite =
// true allows both.
static void claim_run_dir(run *r) {
    const gdn_config *c = &r->cfg;
    const char *resume = r->args.resume;
    bool ok = true;
    if (r->r0 && !c->overwrite && !r->args.eval_only) {
        char ckpt[1200], metrics[1200];
        snprintf(ckpt, sizeof ckpt, "%s/checkpoint.h5", c->out_dir);
        snprintf(metrics, sizeof metrics, "%s/%s", c->out_dir, c->metrics_file);
        struct stat sc, sm, sr;
        bool has_ckpt = stat(ckpt, &sc) == 0;
        bool has_metrics = lstat(metrics, &sm) == 0 && !(S_ISREG(sm.st_mode) && sm.st_size == 0);
        if (!resume && (has_ckpt || has_metrics)) {
            fprintf(stderr, "error: train.out_dir '%s' holds a run (%s%s%s): a new run there would "
                    "replace it\nHINT: resume it (--resume %s), choose another train.out_dir, or "
                    "set train.overwrite = true to start over in it\n", c->out_dir,
                    has_ckpt ? "checkpoint.h5" : "", has_ckpt && has_metrics ? ", " : "",
                    has_metrics ? c->metrics_file : "", has_ckpt ? ckpt : "CHECKPOINT.h5");
            ok = false;
        } else if (resume && has_ckpt && stat(resume, &sr) == 0 &&
                   (sr.st_dev != sc.st_dev || sr.st_ino != sc.st_ino)) {
            fprintf(stderr, "error: train.out_dir '%s' holds another checkpoint than the one "
                    "resumed ('%s'): the resumed run would replace it\nHINT: choose another "
                    "train.out_dir, or set train.overwrite = true\n", c->out_dir, resume);
            ok = false;
        }
    }
    stop_unless_all_ok(r, ok);
}

// The effective config in <out_dir>/config.ini (rank 0; not with --eval, which writes nothing).
static void write_config(const run *r) {
    const gdn_config *c = &r->cfg;
    if (!r->r0 || r->args.eval_only) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/config.ini", c->out_dir);
    mkdir_p(c->out_dir);
    FILE *cf = fopen(path, "w");
    if (!cf) gdn_die("cannot write '%s': %s", path, strerror(errno));
    char *text = config_to_string(c);
    bool ok = fputs(text, cf) != EOF;
    free(text);
    if (fclose(cf) != 0 || !ok) gdn_die("cannot write '%s': %s", path, strerror(errno));
}

// The model and its arenas; with ZeRO-1 this rank's shard of the optimizer state.
static void build_model(run *r) {
    const gdn_config *c = &r->cfg;
    r->m = model_create(c, r->be, c->batch_size, c->seq_len);
    if (c->zero1 && r->collectives) r->z = zero1_create(r->d, r->m, r->on_gpu);
    model_print_summary(r->m, stdout);
    r->x = gdn_malloc(sizeof(int32_t) * r->m->N);
    r->y = gdn_malloc(sizeof(int32_t) * r->m->N);
    r->doc = gdn_malloc(sizeof(int32_t) * r->m->N);
    r->st = (train_state){.step = 0, .tokens_seen = 0, .sampler_pos = 0, .seed = c->seed,
                          .best_val = INFINITY, .world_size = r->d->world};
    snprintf(r->ckpt, sizeof r->ckpt, "%s/checkpoint.h5", c->out_dir);
    snprintf(r->last_good, sizeof r->last_good, "none");
    r->last_good_step = -1;
    r->loss_bound = INFINITY;
}

// Weights, optimizer state and loop state from --resume; else parameters drawn from train.seed.
static void start_run(run *r) {
    const gdn_config *c = &r->cfg;
    const char *resume = r->args.resume;
    if (!resume) {
        double t_init = gdn_now();
        model_init_params(r->m, c->seed);
        printf("init: parameters drawn in %.2f s\n", gdn_now() - t_init);
        if (r->args.init_from) {
            char e[2048];
            bool ok = hf_import(r->m, r->args.init_from, e, sizeof e);
            if (!ok) fprintf(stderr, "error: --init-from: %s\n", e);
            stop_unless_all_ok(r, ok);
            printf("init: parameters from %s\n", r->args.init_from);
        }
        return;
    }
    char err[1024];
    int world = r->d->world;
    bool loaded = checkpoint_load(resume, r->m, &r->st, err, sizeof err);
    if (!loaded) fprintf(stderr, "error: %s\n", err);
    stop_unless_all_ok(r, loaded);
    if (r->st.world_size != world)
        printf("note: checkpoint written by %d ranks, resuming on %d: weights and optimizer "
               "state continue exactly; the data continues exactly when batch_size x grad_accum "
               "x ranks is what it was (now %d x %d x %d; train.grad_accum can keep it)\n",
               r->st.world_size, world, c->batch_size, c->grad_accum, world);
    static const char *const what[3] = {"parameters", "AdamW m", "AdamW v"};
    for (int g = 0; g < 3; g++) {
        int live = checkpoint_group_bits(r->m, g), stored = r->st.stored_bits[g];
        if (stored == live) continue;
        printf("note: %s: the checkpoint holds the %s in float%d, this backend keeps them in "
               "float%d: %s; the run continues from them, not bit for bit as on a backend of "
               "float%d\n", resume, what[g], stored, live,
               stored < live ? "widened exactly" : "rounded to nearest", stored);
    }
    printf("resumed from %s at step %ld (%llu tokens seen", resume, r->st.step,
           (unsigned long long)r->st.tokens_seen);
    if (r->st.skips) printf(", %ld steps skipped", r->st.skips);
    printf(")\n");
    if (r->st.gnorm_n > c->skip_window) {  // the newest skip_window norms
        int drop = r->st.gnorm_n - c->skip_window;
        memmove(r->st.gnorm, r->st.gnorm + drop, (size_t)c->skip_window * sizeof(double));
        r->st.gnorm_n = c->skip_window;
    }
    r->st.world_size = world;
    snprintf(r->last_good, sizeof r->last_good, "%s", resume);
    r->last_good_step = r->st.step;
}

// After start_run: every rank holds the same parameters and loop state (each drew them from
// train.seed or read them from its --resume checkpoint); else each rank that differs names the
// loop state or the first tensor in which it differs, and every rank stops.
static void agree_parameters(run *r) {
    dist *d = r->d;
    const model *m = r->m;
    if (d->world == 1) return;
    const int n = m->n_params;
    size_t maxn = 0;
    for (int i = 0; i < n; i++) maxn = GDN_MAX(maxn, m->params[i].numel);
    double *h = gdn_malloc(maxn * sizeof(double));
    uint64_t *mine = gdn_malloc((size_t)(n + 1) * sizeof(uint64_t));
    uint64_t *root = gdn_malloc((size_t)(n + 1) * sizeof(uint64_t));
    for (int i = 0; i < n; i++) {
        model_param_download(m, i, h);
        mine[i] = agree_hash(AGREE_HASH_INIT, h, m->params[i].numel * sizeof(double));
    }
    char state[256];
    snprintf(state, sizeof state, "step %ld, %llu tokens seen, data position %llu, seed %llu, "
             "best val %.17g", r->st.step, (unsigned long long)r->st.tokens_seen,
             (unsigned long long)r->st.sampler_pos, (unsigned long long)r->st.seed,
             r->st.best_val);
    mine[n] = agree_hash(AGREE_HASH_INIT, state, strlen(state));
    int differ = dist_agree_u64(d, mine, root, (size_t)n + 1);
    if (differ > 0) {
        char *state0 = dist_bcast_string(d, state, 0), msg[1024] = "";
        int first = 0;
        while (first < n && mine[first] == root[first]) first++;
        if (mine[n] != root[n])
            snprintf(msg, sizeof msg, "error: rank %d: the loop state differs from rank 0's: %s on "
                     "this rank, %s on rank 0", d->rank, state, state0);
        else if (first < n)
            snprintf(msg, sizeof msg, "error: rank %d: the parameters differ from rank 0's, first "
                     "in '%s'", d->rank, m->params[first].name);
        say_from_rank0(d, msg);
        if (d->rank == 0)
            fprintf(stderr, "error: %d of %d ranks start from other parameters or another step "
                    "than rank 0%s; stopping every rank\n", differ, d->world,
                    r->args.resume ? " (is --resume the same checkpoint on every rank?)" : "");
        free(state0);
    }
    free(h);
    free(mine);
    free(root);
    stop_unless_all_ok(r, differ == 0);
}

// --resume: the checkpoint's step against train.steps. Beyond it: refused (exit 1). At it: the
// run is complete; true, and main() says so and exits 0 with nothing written.
static bool run_is_complete(run *r) {
    const gdn_config *c = &r->cfg;
    if (!r->args.resume || r->args.eval_only) return false;
    if (r->st.step > c->steps) {
        fprintf(stderr, "error: --resume '%s': the checkpoint is at step %ld, beyond train.steps = "
                "%d\nHINT: --set train.steps=N with N > %ld to train on\n", r->args.resume,
                r->st.step, c->steps, r->st.step);
        stop_unless_all_ok(r, false);
    }
    if (r->st.step < c->steps) return false;
    printf("nothing to do: '%s' is at step %ld = train.steps, the run is complete (to train on: "
           "--set train.steps=N with N > %ld); nothing written\n", r->args.resume, r->st.step,
           r->st.step);
    return true;
}

// --eval: the validation loss of the weights; the exit code (1 when it is not finite).
static int eval_checkpoint(run *r) {
    const gdn_config *c = &r->cfg;
    double t0 = gdn_now(), v = evaluate(r->m, &r->data, c, r->x, r->y, r->doc, r->d);
    if (c->eval_batches == 0) {
        uint64_t nb, w = full_eval_windows(&r->data, c, r->d, &nb);
        printf("eval: val loss %.6f over the whole split (%llu windows of %d), %.1f s\n", v,
               (unsigned long long)w, c->seq_len + 1, gdn_now() - t0);
    } else {
        printf("eval: val loss %.6f over %d batches of %lld windows of %d, %.1f s\n", v,
               c->eval_batches, (long long)c->batch_size * c->grad_accum * r->d->world, c->seq_len + 1,
               gdn_now() - t0);
    }
    if (r->ev) {  // the [eval] section's values too, printed
        eval_value ev[EVAL_MAX_NAMED * 3 + EVAL_MAX_PROBES];
        char line[8192];
        eval_values_line(ev, evaluator_run(r->ev, r->m, r->d, ev), line, sizeof line);
        printf("eval: %s\n", line);
    }
    return isfinite(v) ? 0 : 1;
}

// --timeline: this rank's file, the device clock (CUDA events) on the GPU.
static timeline *open_timeline(const run *r) {
    const gdn_config *c = &r->cfg;
    const train_args *a = &r->args;
    long end = c->steps, first, count;
    if (a->stop_after > 0) end = GDN_MIN(end, a->stop_after);
    if (a->profile_steps > 0) end = GDN_MIN(end, r->st.step + 2 + a->profile_steps);
    timeline_window(a->timeline_steps, r->st.step, end, &first, &count);
    if (count < 1) gdn_die("--timeline %ld: no step left to run (at step %ld of %d)",
                           a->timeline_steps, r->st.step, c->steps);
    const timeline_clock *clk = r->on_gpu ? timeline_device_clock() : NULL;
    char path[1200];
    mkdir_p(c->out_dir);  // rank 0 made it; the others may get there first
    if (r->r0) snprintf(path, sizeof path, "%s/timeline.csv", c->out_dir);
    else snprintf(path, sizeof path, "%s/timeline.rank%d.csv", c->out_dir, r->d->rank);
    timeline *tl = timeline_create(path, r->d->rank, first, count, clk);
    printf("timeline: steps %ld..%ld (%s clock) -> %s\n", first, first + count - 1,
           clk ? "CUDA event" : "host", path);
    return tl;
}

// SIGINT/SIGTERM finish the step (g_stop); SIGXFSZ is ignored.
static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C kills at once
    CHECK_SYS(sigaction(SIGINT, &sa, NULL));
    CHECK_SYS(sigaction(SIGTERM, &sa, NULL));
    // A file-size limit (or a full quota) makes write() fail with EFBIG instead of killing
    // the process, so the checkpoint writer reports it and keeps the previous checkpoint.
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    CHECK_SYS(sigaction(SIGXFSZ, &ign, NULL));
}

// What the loop needs beside the model: the training batches (a check that the validation
// split is long enough), the metrics file, the timeline, the gradient sums and their hooks.
static void open_training(run *r) {
    const gdn_config *c = &r->cfg;
    dist *d = r->d;
    char err[1024];
    sampler_params sp = {.src = &r->data, .split = DATA_SPLIT_TRAIN, .documents = data_documents(c),
                         .B = c->batch_size, .T = c->seq_len, .seed = c->seed, .rank = d->rank,
                         .world = d->world, .n_mb = c->grad_accum,
                         .pos = r->st.sampler_pos * (uint64_t)c->grad_accum, .prefetch = true};
    batch_sampler vcheck;  // fail early when the validation split is too short
    sampler_params vp = {.src = &r->data, .split = DATA_SPLIT_VAL, .documents = sp.documents,
                         .B = c->batch_size, .T = c->seq_len, .seed = c->seed, .rank = 0,
                         .world = 1, .n_mb = 1};
    if (!sampler_init(&vcheck, &vp, err, sizeof err)) gdn_die("validation data: %s", err);
    sampler_free(&vcheck);
    if (!sampler_init(&r->ts, &sp, err, sizeof err)) gdn_die("training data: %s", err);

    if (r->r0) snprintf(r->metrics_path, sizeof r->metrics_path, "%s/%s", c->out_dir, c->metrics_file);
    else snprintf(r->metrics_path, sizeof r->metrics_path, "/dev/null");
    r->metrics = fopen(r->metrics_path, r->args.resume ? "a" : "w");
    if (!r->metrics) gdn_die("cannot open metrics file '%s': %s", r->metrics_path, strerror(errno));
    if (r->args.timeline_steps > 0) r->tl = open_timeline(r);
    // ZeRO-1 too: each piece summed to its shard's owner
    r->gs = grad_sync_create(d, r->m, r->collectives, c->overlap, r->z ? zero1_shard_elems(r->z) : 0,
                             c->bucket_mb, c->grad_accum, r->tl);
    install_signals();
}

// The run's header: steps, tokens, ranks, the MFU's peak, validation, gradient sums, startup.
static void print_header(run *r) {
    const gdn_config *c = &r->cfg;
    dist *d = r->d;
    char peak_what[256];
    if (!r->on_gpu) {
        r->peak = cpu_peak_flops();
        snprintf(peak_what, sizeof peak_what, "this CPU's measured float64 matmul rate %.1f GFLOP/s",
                 r->peak / 1e9);
    } else {
        char name[128];
        r->peak = backend_gpu_peak_flops(!strcmp(c->precision, "bf16"), name, sizeof name);
        snprintf(peak_what, sizeof peak_what, "the %s datasheet %s peak %.0f TFLOP/s", name,
                 c->precision, r->peak / 1e12);
    }
    r->tokens_per_step = (long)c->batch_size * c->seq_len * c->grad_accum * d->world;
    printf("training: %d steps of %ld tokens (%d rank%s, %s%s), device %s, MFU against %s\n",
           c->steps, r->tokens_per_step, d->world, d->world > 1 ? "s" : "",
           dist_backend_name(d->backend), c->zero1 ? ", ZeRO-1" : "", r->be->name, peak_what);
    if (c->eval_batches == 0) {
        uint64_t nb, w = full_eval_windows(&r->data, c, d, &nb);
        printf("validation: the whole split, %llu tokens in %llu windows of %d (%llu batches)\n",
               (unsigned long long)r->data.set[0].n_tokens[DATA_SPLIT_VAL], (unsigned long long)w,
               c->seq_len + 1, (unsigned long long)nb);
    }
    if (r->gs->sum)
        printf("gradients: %s in %g MB buckets, %s%s\n",
               r->z ? "reduce to each shard's owner" : "all-reduce", c->bucket_mb,
               r->gs->overlap ? "overlapped with the backward" : "after the backward (dist.overlap = false)",
               r->z ? "; AdamW on this rank's shard, all-gather of the weights" : "");
    printf("startup: %.1f s from launch to the first step\n", gdn_now() - r->t_launch);
    fflush(stdout);  // the header is there before the first step's line, also through a pipe
    r->peak *= d->world;
}

// ---- the loop ------------------------------------------------------------------------------------

// The bad-step rule's bound on the gradient norm: mean + skip_zscore x std of the norms of the
// last skip_window updated steps (oldest first, population std), once the window is full and
// skip_zscore > 0; else INFINITY. A norm above it (z > skip_zscore) or not finite is skipped.
// *mean, *sd: the window's (NAN when not judged).
static double skip_bound(const run *r, double *mean, double *sd) {
    const gdn_config *c = &r->cfg;
    const train_state *st = &r->st;
    *mean = *sd = NAN;
    if (c->skip_zscore <= 0 || st->gnorm_n < c->skip_window) return INFINITY;
    double s = 0, q = 0;
    for (int i = 0; i < st->gnorm_n; i++) s += st->gnorm[i];
    *mean = s / st->gnorm_n;
    for (int i = 0; i < st->gnorm_n; i++) q += (st->gnorm[i] - *mean) * (st->gnorm[i] - *mean);
    *sd = sqrt(q / st->gnorm_n);
    return *mean + c->skip_zscore * *sd;
}

// --test-fault-grad-scale: the summed gradient arena times `factor` (through the host: a test
// of small models).
static void fault_scale_grads(model *m, double factor) {
    const be_class gc = BE_GRAD;
    double *h = gdn_malloc(m->n_elems * sizeof(double));
    m->be->download(h, m->grad_mem, m->n_elems, gc);
    for (size_t i = 0; i < m->n_elems; i++) h[i] *= factor;
    m->be->upload(m->grad_mem, h, m->n_elems, gc);
    free(h);
}

typedef enum {
    STEP_UPDATED,   // the weights took the step's update
    STEP_SKIPPED,   // the gradient norm was bad: no update, the step and its data consumed
    STEP_BAD_LOSS,  // the loss was bad: nothing changed, the run stops
} step_result;

// One step: grad_accum micro-batches (forward, fused loss, backward; the gradient sums over the
// ranks go out from the model's hook), the global norm, AdamW (ZeRO-1: on this rank's shard, then
// the all-gather). STEP_BAD_LOSS, with the weights and the loop state as they were, when the loss
// is bad (not finite or above r->loss_bound, which the first step sets). STEP_SKIPPED when the
// norm is bad (skip_bound): no update, but the step counts and its batches are consumed.
static step_result train_step(run *r, double *loss_out, double *lr_out, double *gnorm_out) {
    const gdn_config *c = &r->cfg;
    model *m = r->m;
    dist *d = r->d;
    timeline *tl = r->tl;
    long step = r->st.step;
    int N = m->N;
    timeline_step_begin(tl, step + 1);
    model_zero_grads(m);
    double loss_sum = 0;
    for (int mb = 0; mb < c->grad_accum; mb++) {
        sampler_next(&r->ts, r->x, r->y, r->doc);
        model_set_doc_starts(m, r->ts.documents ? r->doc : NULL);
        m->dropout_key = c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)step * 1024 + (uint64_t)mb +
                         ((uint64_t)d->rank << 40);
        grad_sync_microbatch(r->gs, m, mb);
        loss_sum += model_forward_backward(m, r->x, r->y, 1.0 / ((double)N * c->grad_accum * d->world), true);
        grad_sync_microbatch_end(r->gs, m);
    }
    grad_sync_step_end(r->gs, m);
    if (step + 1 >= r->args.fault_grad_step && step + 1 <= r->args.fault_grad_last)
        fault_scale_grads(m, r->args.fault_grad_scale);
    double loss = dist_scalar_sum_f64(d, loss_sum) / ((double)N * c->grad_accum * d->world);
    if (step + 1 == r->args.fault_nan_step) loss = NAN;
    if (isinf(r->loss_bound) && isfinite(loss))  // this run's first loss
        r->loss_bound = 2.0 * fmax(log((double)c->vocab_size), loss);
    const bool loss_ok = isfinite(loss) && loss <= r->loss_bound;
    double lr = optim_lr(c, step), gnorm, mean, sd;
    const double bound = skip_bound(r, &mean, &sd);
    bool updated = false;
    if (r->z) {
        gnorm = NAN;
        if (loss_ok) {
            gnorm = zero1_step(r->z, step, lr, bound, tl);  // no update when gnorm is bad
            updated = isfinite(gnorm) && gnorm <= bound;
        }
    } else {
        gnorm = optim_grad_norm(m);
    }
    *loss_out = loss, *lr_out = lr, *gnorm_out = gnorm;
    r->last_z = isfinite(mean) && sd > 0 ? (gnorm - mean) / sd : NAN;
    if (!loss_ok) return STEP_BAD_LOSS;
    const bool skip = !isfinite(gnorm) || gnorm > bound;
    if (!skip && !r->z) optim_step(m, step, lr, gnorm);
    timeline_compute(tl, updated ? "all-gather" : "norm+update");  // ZeRO-1: see zero1_step
    timeline_step_end(tl);
    timeline_collect(tl);  // the earlier steps: their events preceded this step's norm sync
    train_state *st = &r->st;
    st->step++;
    st->tokens_seen += (uint64_t)r->tokens_per_step;
    st->sampler_pos = r->ts.pos / (uint64_t)c->grad_accum;  // steps: independent of the split
    r->win_steps++;
    if (skip) {
        st->skips++;
        st->skips_in_row++;
        return STEP_SKIPPED;
    }
    st->skips_in_row = 0;
    if (st->gnorm_n == c->skip_window) {  // the window: the newest skip_window norms
        memmove(st->gnorm, st->gnorm + 1, (size_t)(st->gnorm_n - 1) * sizeof(double));
        st->gnorm_n--;
    }
    st->gnorm[st->gnorm_n++] = gnorm;
    return STEP_UPDATED;
}

// --profile: count the step; true when the profiled steps are done. The 2 warm-up steps (plans,
// lazy buffers) are not counted.
static bool profile_tick(run *r) {
    if (++r->prof_done == 2) {
        profile_reset();
        r->t_prof = gdn_now();
    }
    if (r->prof_done == 2 + r->args.profile_steps) {
        r->t_prof = gdn_now() - r->t_prof;
        return true;
    }
    return false;
}

// x as a JSON number with `prec` digits after the point ("%.*f"; 0: "%.17g"), or null when x is
// not finite (JSON has no nan or inf).
static const char *json_num(char *buf, size_t n, double x, int prec) {
    if (!isfinite(x)) snprintf(buf, n, "null");
    else if (prec > 0) snprintf(buf, n, "%.*f", prec, x);
    else snprintf(buf, n, "%.17g", x);
    return buf;
}

// One line into the metrics file, written through: a failed write (a full disk) stops the run
// naming the file and the step.
__attribute__((format(printf, 2, 3)))
static void metrics_line(run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    bool ok = vfprintf(r->metrics, fmt, ap) >= 0;
    va_end(ap);
    ok = fflush(r->metrics) == 0 && ok && !ferror(r->metrics);
    if (!ok) gdn_die("step %ld: cannot write metrics file '%s': %s", r->st.step, r->metrics_path,
                     errno ? strerror(errno) : "write error");
}

// The validation loss (every rank takes part), logged; its time is left out of the step times.
static void validate(run *r) {
    double t_eval = gdn_now();
    r->last_val = evaluate(r->m, &r->data, &r->cfg, r->x, r->y, r->doc, r->d);
    r->t_aside += gdn_now() - t_eval;
    r->new_best = r->last_val < r->st.best_val;
    if (r->new_best) r->st.best_val = r->last_val;
    metrics_line(r, "{\"step\": %ld, \"tokens\": %llu, \"val_loss\": %.17g, \"time\": %.3f}\n",
                 r->st.step, (unsigned long long)r->st.tokens_seen, r->last_val, gdn_now() - r->t_start);
}

// The [eval] section's values (every rank takes part), printed and logged as one metrics line;
// their time is left out of the step times. Changes no bit of the training (eval.h).
static void run_eval(run *r) {
    double t_eval = gdn_now();
    eval_value v[EVAL_MAX_NAMED * 3 + EVAL_MAX_PROBES];
    int n = evaluator_run(r->ev, r->m, r->d, v);
    char json[16384], line[8192];
    eval_values_json(v, n, json, sizeof json);
    eval_values_line(v, n, line, sizeof line);
    printf("eval step %ld | %s\n", r->st.step, line);
    r->t_aside += gdn_now() - t_eval;
    metrics_line(r, "{\"step\": %ld, \"tokens\": %llu, \"eval\": %s, \"time\": %.3f}\n",
                 r->st.step, (unsigned long long)r->st.tokens_seen, json, gdn_now() - r->t_start);
}

// The progress line and its metrics record over the window since the last one.
static void log_progress(run *r, double loss, double lr, double gnorm, bool validated) {
    const gdn_config *c = &r->cfg;
    const train_state *st = &r->st;
    int world = r->d->world;
    // time per training step: evaluations and checkpoints in the window left out
    double now = gdn_now(), dt = (now - r->t_win - r->t_aside) / (double)GDN_MAX(r->win_steps, 1);
    double tps = r->tokens_per_step / dt, fl = tps * r->m->flops_per_token;
    // CPU: an MFU above 100% means the matmul rate was timed on a busy machine (say,
    // a build beside the run): time it again, at most 3 times a run, keeping the best
    double t_peak = 0;
    if (!r->on_gpu && fl > r->peak && r->peak_retries < 3) {
        r->peak_retries++;
        const double t0 = gdn_now(), again = cpu_peak_flops() * world;
        t_peak = gdn_now() - t0;
        if (again > r->peak) {
            printf("mfu: this CPU's float64 matmul rate timed again: %.1f GFLOP/s (%.1f at "
                   "start, when the machine was busier)\n", again / world / 1e9,
                   r->peak / world / 1e9);
            r->peak = again;
        }
    }
    char eta[32], val[32] = "";
    fmt_eta(eta, sizeof eta, dt * (double)(c->steps - st->step));
    if (validated) snprintf(val, sizeof val, " | val %.4f", r->last_val);
    errno = 0;
    bool out = printf("step %6ld/%d | loss %.4f%s | lr %.2e | gnorm %.3f | %.0f tok/s | MFU %.1f%% | "
                      "%.1f ms/step | ETA %s\n", st->step, c->steps, loss, val, lr, gnorm, tps,
                      100.0 * fl / r->peak, 1e3 * dt, eta) >= 0;
    if (fflush(stdout) != 0 || !out || ferror(stdout))
        gdn_die("step %ld: cannot write the progress line to stdout: %s", st->step,
                errno ? strerror(errno) : "write error");
    char gn[40];
    metrics_line(r, "{\"step\": %ld, \"tokens\": %llu, \"loss\": %.17g, \"lr\": %.6e, "
                    "\"grad_norm\": %s, \"tok_s\": %.1f, \"mfu\": %.5f, \"time\": %.3f}\n",
                 st->step, (unsigned long long)st->tokens_seen, loss, lr,
                 json_num(gn, sizeof gn, gnorm, 6), tps, fl / r->peak, now - r->t_start);
    r->t_win = now + t_peak;  // the re-timing is not a training step's time
    r->t_aside = 0;
    r->win_steps = 0;
}

// The loss of the weights as they are on one validation micro-batch per rank (the first windows
// of the split's seeded draw; every rank takes part, every rank gets the mean). It changes no bit
// of the training: like evaluate, its own sampler and no dropout.
static double probe_loss(run *r) {
    const gdn_config *c = &r->cfg;
    dist *d = r->d;
    batch_sampler vs;
    char err[1024];
    const sampler_params sp = {.src = &r->data, .split = DATA_SPLIT_VAL, .documents = data_documents(c),
                               .B = c->batch_size, .T = c->seq_len, .seed = c->seed ^ 0x5A17u,
                               .rank = d->rank, .world = d->world, .n_mb = 1};
    if (!sampler_init(&vs, &sp, err, sizeof err)) gdn_die("validation data: %s", err);
    sampler_next(&vs, r->x, r->y, r->doc);
    model_set_doc_starts(r->m, vs.documents ? r->doc : NULL);
    double loss = model_eval_loss(r->m, r->x, r->y);
    sampler_free(&vs);
    return dist_scalar_sum_f64(d, loss) / d->world;
}

// A loss that is not bad: finite and at most the blow-up bound (see the top of the file).
static bool loss_good(const run *r, double loss) { return isfinite(loss) && loss <= r->loss_bound; }

// ---- checkpoint files (train.keep_checkpoints; docs/checkpoints.md) -----------------------------
// keep_checkpoints = 1: <out_dir>/checkpoint.h5, replaced by each checkpoint. N > 1: each
// checkpoint is written as <out_dir>/checkpoint-STEP.h5 (STEP 8 digits or more) and
// checkpoint.h5 is made another name (a hard link) of the newest; the N newest step files are
// kept, older ones of this run's past (steps <= the new one) deleted once the new one is in
// place; checkpoint-best.h5 is the checkpoint of the best validation loss so far (a link to the
// step file when the best step has a checkpoint, else a checkpoint written for it). Every name
// appears atomically: checkpoint_save writes a temporary name, verifies and renames; a link is
// made under a temporary name and renamed.

static void step_ckpt_path(const run *r, long step, char *buf, size_t n) {
    snprintf(buf, n, "%s/checkpoint-%08ld.h5", r->cfg.out_dir, step);
}

static void best_ckpt_path(const run *r, char *buf, size_t n) {
    snprintf(buf, n, "%s/checkpoint-best.h5", r->cfg.out_dir);
}

// `to` becomes another name of the checkpoint `from`, atomically: a hard link under a temporary
// name renamed over `to`; on a filesystem without hard links, the checkpoint written again.
static bool ckpt_alias(const run *r, const char *from, const char *to, char *err, size_t n) {
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", to, (int)getpid());
    (void)unlink(tmp);  // a leftover of a killed run (ENOENT otherwise)
    if (link(from, tmp) != 0) {
        if (errno == EPERM || errno == EXDEV || errno == ENOTSUP || errno == EOPNOTSUPP ||
            errno == EMLINK || errno == ENOSYS)
            return checkpoint_save(to, r->m, &r->st, &r->tok, err, n);
        snprintf(err, n, "cannot link checkpoint '%s' as '%s': %s; '%s' is written and sound", from,
                 tmp, strerror(errno), from);
        return false;
    }
    if (rename(tmp, to) != 0) {
        snprintf(err, n, "cannot rename '%s' to '%s': %s; '%s' is written and sound", tmp, to,
                 strerror(errno), from);
        (void)unlink(tmp);  // failing already: the message says why
        return false;
    }
    return true;
}

// Deletes this run's step files beyond the keep_checkpoints newest with steps <= st.step.
static bool ckpt_rotate(const run *r, char *err, size_t n) {
    const gdn_config *c = &r->cfg;
    DIR *dir = opendir(c->out_dir);
    if (!dir) {
        snprintf(err, n, "cannot list '%s' to rotate the checkpoints: %s", c->out_dir, strerror(errno));
        return false;
    }
    long *steps = NULL;
    size_t ns = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        long step;
        int len = 0;
        if (sscanf(e->d_name, "checkpoint-%ld.h5%n", &step, &len) != 1 || e->d_name[len] != '\0' ||
            e->d_name[11] < '0' || e->d_name[11] > '9' || step > r->st.step)
            continue;
        if (ns == cap) steps = gdn_realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
        steps[ns++] = step;
    }
    closedir(dir);
    bool ok = true;
    for (size_t i = 0; i < ns && ok; i++) {  // delete steps[i] when >= N files are newer
        size_t newer = 0;
        for (size_t j = 0; j < ns; j++) newer += steps[j] > steps[i];
        if (newer < (size_t)c->keep_checkpoints) continue;
        char path[1200];
        step_ckpt_path(r, steps[i], path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT) {
            snprintf(err, n, "cannot delete the old checkpoint '%s': %s", path, strerror(errno));
            ok = false;
        }
    }
    free(steps);
    return ok;
}

// Rank 0's files of a checkpoint at this step (best: its validation loss is the best so far;
// best_only: only checkpoint-best.h5). false + err on a failure.
static bool ckpt_write_files(run *r, bool best, bool best_only, char *err, size_t n) {
    char path[1200], bpath[1200];
    best_ckpt_path(r, bpath, sizeof bpath);
    if (best_only) return checkpoint_save(bpath, r->m, &r->st, &r->tok, err, n);
    if (r->cfg.keep_checkpoints == 1) return checkpoint_save(r->ckpt, r->m, &r->st, &r->tok, err, n);
    step_ckpt_path(r, r->st.step, path, sizeof path);
    return checkpoint_save(path, r->m, &r->st, &r->tok, err, n) &&
           ckpt_alias(r, path, r->ckpt, err, n) && (!best || ckpt_alias(r, path, bpath, err, n)) &&
           ckpt_rotate(r, err, n);
}

// ckpt_write_files on rank 0 (with ZeRO-1 every rank sends its shard of the moments first);
// every rank stops when rank 0 failed.
static void save_or_die(run *r, bool best, bool best_only) {
    char err[4096];
    bool ok = true;
    if (r->z) zero1_gather_moments(r->z);
    if (r->r0) ok = ckpt_write_files(r, best, best_only, err, sizeof err);
    if (r->z) zero1_release_moments(r->z);
    if (dist_scalar_max_f64(r->d, ok ? 0.0 : 1.0) != 0.0) {
        if (r->r0) gdn_die("step %ld: %s", r->st.step, err);
        gdn_die("step %ld: rank 0 could not write the checkpoint", r->st.step);
    }
}

// The checkpoint, when the weights' loss is good: the step's validation loss when `validated`,
// else probe_loss. Rank 0 writes. Its time is left out of the step times. false, with nothing
// written and the loss in *bad, otherwise.
static bool save_checkpoint(run *r, bool validated, double *bad) {
    double t_ckpt = gdn_now();
    double fit = validated ? r->last_val : probe_loss(r);
    if (!loss_good(r, fit)) {
        *bad = fit;
        return false;
    }
    save_or_die(r, validated && r->new_best, false);
    r->t_aside += gdn_now() - t_ckpt;
    if (r->cfg.keep_checkpoints == 1) snprintf(r->last_good, sizeof r->last_good, "%s", r->ckpt);
    else step_ckpt_path(r, r->st.step, r->last_good, sizeof r->last_good);
    r->last_good_step = r->st.step;
    return true;
}

// keep_checkpoints > 1: a validation loss better than any before, on a step without a regular
// checkpoint (its loss was found good): checkpoint-best.h5 of these weights.
static void save_best(run *r) {
    double t_ckpt = gdn_now();
    save_or_die(r, true, true);
    r->t_aside += gdn_now() - t_ckpt;
}

// A skipped step (bad gradient norm): the logged line and its metrics record.
static void log_skip(run *r, double loss, double gnorm) {
    const gdn_config *c = &r->cfg;
    const train_state *st = &r->st;
    char z[40], g[40], l[40];
    if (isfinite(r->last_z)) snprintf(z, sizeof z, "z %.2f > %g", r->last_z, c->skip_zscore);
    else snprintf(z, sizeof z, "%s", isfinite(gnorm) ? "z -" : "not finite");
    errno = 0;
    bool out = printf("step %6ld/%d | skipped: loss %.4f | grad norm %.4g (%s) | no update; %ld in "
                      "a row (train.max_skips = %d), %ld in the run\n", st->step, c->steps, loss,
                      gnorm, z, st->skips_in_row, c->max_skips, st->skips) >= 0;
    if (fflush(stdout) != 0 || !out || ferror(stdout))
        gdn_die("step %ld: cannot write the progress line to stdout: %s", st->step,
                errno ? strerror(errno) : "write error");
    metrics_line(r, "{\"step\": %ld, \"tokens\": %llu, \"skipped\": true, \"loss\": %s, "
                    "\"grad_norm\": %s, \"grad_z\": %s, \"skips_in_row\": %ld, \"skips\": %ld, "
                    "\"time\": %.3f}\n", st->step, (unsigned long long)st->tokens_seen,
                 json_num(l, sizeof l, loss, 0), json_num(g, sizeof g, gnorm, 6),
                 json_num(z, sizeof z, r->last_z, 4), st->skips_in_row, st->skips,
                 gdn_now() - r->t_start);
}

// A blow-up: what was bad, the last good checkpoint, the hint; the exit code, 3.
// by_loss: a loss, judged by the blow-up bound (else a gradient norm, by the skip rule).
static int blowup(const run *r, long step, const char *what, double value, bool by_loss,
                  const char *then) {
    char bound[160] = "";
    if (isfinite(value) && by_loss)
        snprintf(bound, sizeof bound, ", above the blow-up bound %.4g (twice the larger of "
                 "ln(vocab_size) and this run's first loss)", r->loss_bound);
    char good[1300];
    if (r->last_good_step < 0) snprintf(good, sizeof good, "none");
    else snprintf(good, sizeof good, "%s (step %ld)", r->last_good, r->last_good_step);
    fprintf(stderr, "error: step %ld: %s is %g%s; stopping %s.\n  last good checkpoint: %s\n"
                    "HINT: lower optim.lr or set optim.grad_clip, then --resume from it\n",
            step, what, value, bound, then, good);
    return 3;
}

// Steps until train.steps, --stop-after, a signal, the end of --profile or a blow-up (exit code
// 3: see the top of the file); the exit code.
static int train_loop(run *r) {
    const gdn_config *c = &r->cfg;
    const train_args *a = &r->args;
    train_state *st = &r->st;
    if (a->profile_steps > 0 && st->step + 2 + a->profile_steps > c->steps)
        gdn_die("--profile %ld needs %ld more steps, train.steps = %d leaves %ld", a->profile_steps,
                2 + a->profile_steps, c->steps, c->steps - st->step);
    r->t_start = r->t_win = gdn_now();
    r->last_val = NAN;
    while (st->step < c->steps) {
        double loss, lr, gnorm, bad;
        step_result sr = train_step(r, &loss, &lr, &gnorm);
        if (sr == STEP_BAD_LOSS)
            return blowup(r, st->step + 1, "loss", loss, true, "without updating the weights");
        if (sr == STEP_SKIPPED) {
            log_skip(r, loss, gnorm);
            if (st->skips_in_row >= c->max_skips) {
                char what[96];
                snprintf(what, sizeof what, "the gradient norm (skipped step %ld in a row of "
                         "train.max_skips = %d)", st->skips_in_row, c->max_skips);
                return blowup(r, st->step, what, gnorm, false, "without updating the weights");
            }
        }
        if (a->profile_steps > 0) {  // no log, eval or checkpoint inside the measurement
            if (profile_tick(r)) break;
            continue;
        }
        bool last = st->step == c->steps;
        bool do_eval = last || (c->eval_every > 0 && st->step % c->eval_every == 0);
        if (do_eval) validate(r);
        if (evaluator_due(r->ev, st->step, last)) run_eval(r);
        if (c->sample_every > 0 && st->step % c->sample_every == 0 && r->r0)
            generate_print_sample(r->m, &r->data.set[0], c->sample_tokens, c->seed, st->step, stdout);
        if (st->step % c->log_every == 0 || last || do_eval) log_progress(r, loss, lr, gnorm, do_eval);
        bool stop_here = st->step == a->stop_after;
        if (r->d->world > 1 && dist_scalar_max_f64(r->d, (double)g_stop) > 0 && !g_stop) g_stop = SIGTERM;
        bool ckpt = last || g_stop || stop_here || (c->ckpt_every > 0 && st->step % c->ckpt_every == 0);
        if ((do_eval && !loss_good(r, r->last_val)) || (ckpt && !save_checkpoint(r, do_eval, &bad)))
            return blowup(r, st->step, do_eval ? "the validation loss of the updated weights"
                                               : "the updated weights' loss on a validation batch",
                          do_eval ? r->last_val : bad, true, "without a checkpoint of them");
        if (!ckpt && do_eval && r->new_best && c->keep_checkpoints > 1) save_best(r);
        if (g_stop) {
            printf("signal %d: stopped after step %ld, checkpoint written to %s\n", (int)g_stop,
                   st->step, r->ckpt);
            break;
        }
        if (stop_here) {
            printf("--stop-after %ld: stopped, checkpoint written to %s\n", a->stop_after, r->ckpt);
            break;
        }
    }
    return 0;
}

// --profile's table (stdout and <out_dir>/profile.txt), the "done:" line of a finished run.
static void report_end(const run *r, int rc) {
    const gdn_config *c = &r->cfg;
    long steps = r->args.profile_steps;
    if (steps > 0 && r->prof_done == 2 + steps) {
        char path[1200];
        snprintf(path, sizeof path, "%s/profile.txt", c->out_dir);
        FILE *pf = fopen(r->r0 ? path : "/dev/null", "w");
        if (!pf) gdn_die("cannot write '%s': %s", path, strerror(errno));
        profile_print(stdout, r->t_prof / (double)steps, (int)steps);
        profile_print(pf, r->t_prof / (double)steps, (int)steps);
        if (fclose(pf) != 0) gdn_die("cannot write '%s': %s", path, strerror(errno));
        printf("profile written to %s\n", path);
    }
    if (rc == 0 && r->st.step == c->steps)
        printf("done: %ld steps, %.1f s, final val loss %.4f, best %.4f, checkpoint %s\n",
               r->st.step, gdn_now() - r->t_start, r->last_val, r->st.best_val, r->ckpt);
}

// What open_training opened, in reverse.
static void close_training(run *r) {
    timeline_free(r->tl);  // waits for the device, writes the last recorded steps
    if (fclose(r->metrics) != 0)
        gdn_die("cannot write metrics file '%s': %s", r->metrics_path, strerror(errno));
    sampler_free(&r->ts);
    grad_sync_free(r->gs);
}

// What the phases before the loop opened, in reverse; the communicator last (collective).
static void close_run(run *r) {
    evaluator_free(r->ev);
    data_source_close(&r->data);
    ckpt_tokenizer_free(&r->tok);
    zero1_free(r->z);
    model_free(r->m);
    dist_free(r->d);
    free(r->x);
    free(r->y);
    free(r->doc);
}

int main(int argc, char **argv) {
    run r = {.t_launch = gdn_now()};
    cpu_threads_env(argv);  // first: idle thread pools must sleep, not spin (cpu_threads.h)
    int rc = parse_args(argc, argv, &r.args);
    if (rc >= 0) return rc;
    if (r.args.gpus > 1) {  // the parent forks one worker per GPU and waits; workers go on below
        rc = dist_spawn_local(r.args.gpus, argc, argv);
        if (rc >= 0) return rc;
    }
    if (!load_config(&r.cfg, &r.args)) return 2;
    cpu_set_threads(r.cfg.threads);
    if (r.args.gradcheck) return run_gradcheck(&r.cfg, r.args.gc_device);

    setup_dist(&r);         // rank and world, the communicator, CPU or GPU
    setup_backend(&r);      // the ops: float64 CPU or the GPU's (--profile: timed)
    open_data(&r);          // the token file
    open_eval(&r);          // the [eval] section's sets, tasks and probes
    print_config(&r);       // the effective config on stdout
    agree_config_and_data(&r);  // every rank: the same config and data (before sized collectives)
    check_resume_config(&r);    // --resume: only the resumable keys differ from the checkpoint's
    claim_run_dir(&r);      // out_dir holds no other run
    build_model(&r);        // the model's arenas, ZeRO-1's shards
    start_run(&r);          // --resume, or parameters drawn from train.seed
    agree_parameters(&r);   // every rank: the same parameters and loop state
    if (run_is_complete(&r)) {  // --resume of a checkpoint at train.steps: nothing to do
        close_run(&r);
        return 0;
    }
    write_config(&r);       // all validated: <out_dir>/config.ini, the first write there
    if (r.args.eval_only) {
        rc = eval_checkpoint(&r);
    } else {
        open_training(&r);  // batches, metrics file, timeline, gradient sums, signals
        print_header(&r);
        rc = train_loop(&r);
        report_end(&r, rc);  // --profile's table, the "done:" line
        close_training(&r);
    }
    close_run(&r);
    return rc;
}
