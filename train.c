// train.c — gdn-train: config -> model -> data -> loop -> checkpoints (DESIGN 2, 4-7).
//
//   gdn-train CONFIG.ini [--set section.key=value ...] [--resume CKPT.h5] [--gradcheck]
//   gdn-train --resume CKPT.h5 [--set ...]          (the config stored in the checkpoint)
//   --stop-after N: leave after step N with a checkpoint, as if interrupted (the schedule still
//   spans train.steps), so a later --resume continues the same run.
//   --timeline N: spans of N steps per stream (forward, backward per gradient range, all-reduce
//   buckets, wait, update) into <out_dir>/timeline.csv (rank R > 0: timeline.rankR.csv); see
//   timeline_window and src/diag/timeline.h. It changes no bit of the run.
//   --test-fault-nan-step N (for tests): the loss of step N is made NaN.
//
// Each step: grad_accum micro-batches of batch_size x seq_len tokens (forward, fused loss,
// backward, gradients accumulated), global-norm clipping, AdamW, the LR schedule. A progress
// line every log.every steps, JSON lines in <out_dir>/metrics.jsonl, validation every
// train.eval_every steps, an atomic HDF5 checkpoint every train.ckpt_every steps and at the end.
// SIGINT/SIGTERM: the step in flight finishes, a checkpoint is written, exit 0. A NaN/inf loss
// or gradient stops the run (exit 3) naming the step and the last good checkpoint.
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
// backend, the data, the model (with ZeRO-1's shards), the start (resume or init), then either
// the evaluation of a checkpoint (--eval) or the training loop, and the end of the run.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/common.h"
#include "core/config.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "diag/compare.h"
#include "diag/profile.h"
#include "diag/timeline.h"
#include "dist/dist.h"
#include "dist/grad_sync.h"
#include "dist/zero1.h"
#include "fwd/cpu_threads.h"
#include "fwd/fwd_cpu.h"
#include "model/backend_gpu.h"
#include "model/checkpoint.h"
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
            "  --resume     continue from a checkpoint, bit for bit (same config, same world size)\n"
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
            "testing:\n"
            "  --test-fault-nan-step N  make the loss of step N NaN (the run stops there, exit 3)\n");
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

// eval_batches = 0 (the messages): the window count W of the whole-split tiling
// (sampler_tile_split, data/dataset.h) and in *batches the global batches W / G that cover it.
static uint64_t full_eval_windows(const token_file *tf, const gdn_config *c, const dist *d,
                                  uint64_t *batches) {
    uint64_t G = (uint64_t)c->grad_accum * (uint64_t)d->world * (uint64_t)c->batch_size;
    uint64_t W = eval_full_windows(tf->n_tokens[DATA_SPLIT_VAL], (uint64_t)c->seq_len, G);
    if (batches) *batches = W / G;
    return W;
}

// Mean loss over eval_batches validation batches (0: the batches that tile the whole split,
// independent of train.seed). Like the training batches, each global batch of grad_accum x
// world x B windows is split over the micro-batches and the ranks, so N ranks of batch B/N, or
// one rank with N micro-batches of B/N, evaluate the windows one rank of batch B does (each
// rank 1/N of the work); every rank returns the same mean.
static double evaluate(model *m, token_file *tf, const gdn_config *c, int32_t *x, int32_t *y,
                       dist *d) {
    batch_sampler vs;
    char err[512];
    if (!sampler_init(&vs, tf, DATA_SPLIT_VAL, c->batch_size, c->seq_len, c->seed ^ 0x5A17u,
                      d->rank, d->world, c->grad_accum, 0, false, err, sizeof err))
        gdn_die("validation data: %s", err);
    long nb = c->eval_batches > 0 ? c->eval_batches : (long)sampler_tile_split(&vs);
    double s = 0;
    const long n = nb * c->grad_accum;
    for (long i = 0; i < n; i++) {
        sampler_next(&vs, x, y);
        s += model_eval_loss(m, x, y);
    }
    sampler_free(&vs);
    return dist_scalar_sum_f64(d, s) / ((double)n * d->world);
}

static void save_or_die(const char *path, const model *m, const train_state *st, dist *d) {
    char err[1024];
    bool ok = true;
    if (d->rank == 0) ok = checkpoint_save(path, m, st, err, sizeof err);
    if (dist_scalar_max_f64(d, ok ? 0.0 : 1.0) != 0.0) {
        if (d->rank == 0) gdn_die("step %ld: %s", st->step, err);
        gdn_die("step %ld: rank 0 could not write the checkpoint", st->step);
    }
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
    const char *sets[MAX_SETS];     // --set section.key=value, in order
    int nset;
    bool gradcheck, eval_only, profile_events;
    const char *gc_device;          // --device for --gradcheck: "cpu" or "cuda"
    int gpus;                       // --gpus: local workers to spawn (1: none)
    long stop_after;                // --stop-after (-1: none)
    long profile_steps;             // --profile (0: off)
    long timeline_steps;            // --timeline (0: off)
    long fault_nan_step;            // --test-fault-nan-step (-1: none)
} train_args;

// -1 when the run goes on, else the exit code (0 after --help, 2 after a usage error).
static int parse_args(int argc, char **argv, train_args *a) {
    *a = (train_args){.gc_device = "cpu", .gpus = 1, .stop_after = -1, .fault_nan_step = -1};
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
    if (!strcmp(device, "cpu")) return model_gradcheck(cfg, 2, 9, 12, 1e-6, cfg->seed, stdout) ? 1 : 0;
    if (!backend_gpu_built())
        gdn_die("--device cuda: this build has no CUDA backend (configure where nvcc is found)");
    if (cfg->vocab_size == 0) {  // the tokens of the check are random: any vocabulary works
        char err[1024];
        token_file probe;
        cfg->vocab_size = tokfile_open(&probe, cfg->data_path, err, sizeof err) ? probe.vocab_size : 256;
        if (cfg->vocab_size == probe.vocab_size) tokfile_close(&probe);
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
    token_file tf;
    model *m;
    zero1 *z;                 // dist.zero1 with collectives, else NULL
    int32_t *x, *y;           // (m->N) one micro-batch's inputs and targets
    train_state st;
    char ckpt[1200];          // <out_dir>/checkpoint.h5
    // the loop
    batch_sampler ts;
    FILE *metrics;
    timeline *tl;             // --timeline, else NULL
    grad_sync *gs;
    long tokens_per_step;
    double peak;              // FLOP/s of all ranks: the MFU's denominator
    int peak_retries;         // CPU: times the matmul rate was timed again (log_progress)
    double t_start, t_win;    // the loop's start; the start of the current log window
    double t_aside;           // seconds of the window spent evaluating or checkpointing
    long win_steps;           // steps in the window
    double last_val;          // the last validation loss (NAN: none yet)
    const char *last_good;    // the last checkpoint written or resumed from
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
    // auto picks the GPU when this build has CUDA and a device is there
    r->on_gpu = backend_gpu_built() &&
                (!strcmp(c->device, "cuda") || (!strcmp(c->device, "auto") && backend_gpu_devices() > 0));
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
    }
    if (r->args.profile_steps > 0) r->be = backend_profiled(r->be);  // a decorator: same name, same sizes
    if (r->args.profile_events) {
        if (!r->on_gpu) gdn_die("--profile-events: device events need the GPU backend (train.device = "
                                "cuda or auto with a GPU); on the CPU use --profile alone");
        profile_use_clock(timeline_device_clock());
    }
}

// The token file; model.vocab_size = 0 takes the file's.
static void open_data(run *r) {
    gdn_config *c = &r->cfg;
    char err[1024];
    if (!tokfile_open(&r->tf, c->data_path, err, sizeof err))
        gdn_die("%s\nHINT: make it with gdn-prepare (see README.md), or set data.path", err);
    if (c->vocab_size == 0) c->vocab_size = r->tf.vocab_size;
    if (c->vocab_size < r->tf.vocab_size)
        gdn_die("model.vocab_size = %d but '%s' has vocab_size %d", c->vocab_size, c->data_path,
                r->tf.vocab_size);
}

// The effective config on stdout and (not with --eval) in <out_dir>/config.ini.
static void write_config(const run *r) {
    const gdn_config *c = &r->cfg;
    char path[1200];
    snprintf(path, sizeof path, "%s/config.ini", c->out_dir);
    if (r->r0 && !r->args.eval_only) {  // --eval leaves the run directory as it is
        mkdir_p(c->out_dir);
        FILE *cf = fopen(path, "w");
        if (!cf) gdn_die("cannot write '%s': %s", path, strerror(errno));
        config_write(c, cf);
        if (fclose(cf) != 0) gdn_die("cannot write '%s': %s", path, strerror(errno));
    }
    if (r->args.eval_only) printf("effective config:\n");
    else printf("effective config (also in %s):\n", path);
    config_write(c, stdout);
}

// The model and its arenas; with ZeRO-1 this rank's shard of the optimizer state.
static void build_model(run *r) {
    const gdn_config *c = &r->cfg;
    r->m = model_create(c, r->be, c->batch_size, c->seq_len);
    if (c->zero1 && r->collectives) r->z = zero1_create(r->d, r->m, r->on_gpu);
    model_print_summary(r->m, stdout);
    r->x = gdn_malloc(sizeof(int32_t) * r->m->N);
    r->y = gdn_malloc(sizeof(int32_t) * r->m->N);
    r->st = (train_state){.step = 0, .tokens_seen = 0, .sampler_pos = 0, .seed = c->seed,
                          .best_val = INFINITY, .world_size = r->d->world};
    snprintf(r->ckpt, sizeof r->ckpt, "%s/checkpoint.h5", c->out_dir);
    r->last_good = "none";
}

// Weights, optimizer state and loop state from --resume; else parameters drawn from train.seed.
static void start_run(run *r) {
    const gdn_config *c = &r->cfg;
    const char *resume = r->args.resume;
    if (!resume) {
        double t_init = gdn_now();
        model_init_params(r->m, c->seed);
        printf("init: parameters drawn in %.2f s\n", gdn_now() - t_init);
        return;
    }
    char err[1024];
    int world = r->d->world;
    if (!checkpoint_load(resume, r->m, &r->st, err, sizeof err)) gdn_die("%s", err);
    if (r->st.world_size != world)
        printf("note: checkpoint written by %d ranks, resuming on %d: weights and optimizer "
               "state continue exactly; the data continues exactly when batch_size x grad_accum "
               "x ranks is what it was (now %d x %d x %d; train.grad_accum can keep it)\n",
               r->st.world_size, world, c->batch_size, c->grad_accum, world);
    printf("resumed from %s at step %ld (%llu tokens seen)\n", resume, r->st.step,
           (unsigned long long)r->st.tokens_seen);
    r->st.world_size = world;
    r->last_good = resume;
}

// --eval: the validation loss of the weights; the exit code (1 when it is not finite).
static int eval_checkpoint(run *r) {
    const gdn_config *c = &r->cfg;
    double t0 = gdn_now(), v = evaluate(r->m, &r->tf, c, r->x, r->y, r->d);
    if (c->eval_batches == 0) {
        uint64_t nb, w = full_eval_windows(&r->tf, c, r->d, &nb);
        printf("eval: val loss %.6f over the whole split (%llu windows of %d), %.1f s\n", v,
               (unsigned long long)w, c->seq_len + 1, gdn_now() - t0);
    } else {
        printf("eval: val loss %.6f over %d batches of %d windows of %d, %.1f s\n", v,
               c->eval_batches, c->batch_size * c->grad_accum * r->d->world, c->seq_len + 1,
               gdn_now() - t0);
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
    char err[1024], path[1200];
    if (!sampler_init(&r->ts, &r->tf, DATA_SPLIT_TRAIN, c->batch_size, c->seq_len, c->seed, d->rank,
                      d->world, c->grad_accum, r->st.sampler_pos * (uint64_t)c->grad_accum, true,
                      err, sizeof err))
        gdn_die("training data: %s", err);
    batch_sampler vcheck;  // fail early when the validation split is too short
    if (!sampler_init(&vcheck, &r->tf, DATA_SPLIT_VAL, c->batch_size, c->seq_len, c->seed, 0, 1,
                      1, 0, false, err, sizeof err))
        gdn_die("validation data: %s", err);
    sampler_free(&vcheck);

    snprintf(path, sizeof path, "%s/%s", c->out_dir, c->metrics_file);
    r->metrics = fopen(r->r0 ? path : "/dev/null", r->args.resume ? "a" : "w");
    if (!r->metrics) gdn_die("cannot open metrics file '%s': %s", path, strerror(errno));
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
        uint64_t nb, w = full_eval_windows(&r->tf, c, d, &nb);
        printf("validation: the whole split, %llu tokens in %llu windows of %d (%llu batches)\n",
               (unsigned long long)r->tf.n_tokens[DATA_SPLIT_VAL], (unsigned long long)w,
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

// One step: grad_accum micro-batches (forward, fused loss, backward; the gradient sums over the
// ranks go out from the model's hook), the global norm, AdamW (ZeRO-1: on this rank's shard, then
// the all-gather). false, with the weights as they were, when the loss or the norm is not finite.
static bool train_step(run *r, double *loss_out, double *lr_out, double *gnorm_out) {
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
        sampler_next(&r->ts, r->x, r->y);
        m->dropout_key = c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)step * 1024 + (uint64_t)mb +
                         ((uint64_t)d->rank << 40);
        grad_sync_microbatch(r->gs, m, mb);
        loss_sum += model_forward_backward(m, r->x, r->y, 1.0 / ((double)N * c->grad_accum * d->world), true);
        grad_sync_microbatch_end(r->gs, m);
    }
    grad_sync_step_end(r->gs, m);
    double loss = dist_scalar_sum_f64(d, loss_sum) / ((double)N * c->grad_accum * d->world);
    if (step + 1 == r->args.fault_nan_step) loss = NAN;
    double lr = optim_lr(c, step), gnorm;
    bool updated = false;
    if (r->z) {
        gnorm = NAN;
        if (isfinite(loss)) {
            gnorm = zero1_step(r->z, step, lr, tl);  // no update when gnorm is not finite
            updated = isfinite(gnorm);
        }
    } else {
        gnorm = optim_grad_norm(m);
    }
    *loss_out = loss, *lr_out = lr, *gnorm_out = gnorm;
    if (!isfinite(loss) || !isfinite(gnorm)) return false;
    if (!updated) optim_step(m, step, lr, gnorm);
    timeline_compute(tl, updated ? "all-gather" : "norm+update");  // ZeRO-1: see zero1_step
    timeline_step_end(tl);
    timeline_collect(tl);  // the earlier steps: their events preceded this step's norm sync
    r->st.step++;
    r->st.tokens_seen += (uint64_t)r->tokens_per_step;
    r->st.sampler_pos = r->ts.pos / (uint64_t)c->grad_accum;  // steps: independent of the split
    r->win_steps++;
    return true;
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

// The validation loss (every rank takes part), logged; its time is left out of the step times.
static void validate(run *r) {
    double t_eval = gdn_now();
    r->last_val = evaluate(r->m, &r->tf, &r->cfg, r->x, r->y, r->d);
    r->t_aside += gdn_now() - t_eval;
    if (r->last_val < r->st.best_val) r->st.best_val = r->last_val;
    fprintf(r->metrics, "{\"step\": %ld, \"tokens\": %llu, \"val_loss\": %.17g, \"time\": %.3f}\n",
            r->st.step, (unsigned long long)r->st.tokens_seen, r->last_val, gdn_now() - r->t_start);
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
    printf("step %6ld/%d | loss %.4f%s | lr %.2e | gnorm %.3f | %.0f tok/s | MFU %.1f%% | "
           "%.1f ms/step | ETA %s\n",
           st->step, c->steps, loss, val, lr, gnorm, tps, 100.0 * fl / r->peak, 1e3 * dt, eta);
    fflush(stdout);
    fprintf(r->metrics, "{\"step\": %ld, \"tokens\": %llu, \"loss\": %.17g, \"lr\": %.6e, "
                        "\"grad_norm\": %.6f, \"tok_s\": %.1f, \"mfu\": %.5f, \"time\": %.3f}\n",
            st->step, (unsigned long long)st->tokens_seen, loss, lr, gnorm, tps, fl / r->peak,
            now - r->t_start);
    fflush(r->metrics);
    r->t_win = now + t_peak;  // the re-timing is not a training step's time
    r->t_aside = 0;
    r->win_steps = 0;
}

// The checkpoint (rank 0 writes; with ZeRO-1 every rank sends its shard of the moments); its
// time is left out of the step times.
static void save_checkpoint(run *r) {
    double t_ckpt = gdn_now();
    if (r->z) zero1_gather_moments(r->z);
    save_or_die(r->ckpt, r->m, &r->st, r->d);
    if (r->z) zero1_release_moments(r->z);
    r->t_aside += gdn_now() - t_ckpt;
    r->last_good = r->ckpt;
}

// Steps until train.steps, --stop-after, a signal, the end of --profile or a non-finite loss
// (exit code 3); the exit code.
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
        double loss, lr, gnorm;
        if (!train_step(r, &loss, &lr, &gnorm)) {
            fprintf(stderr, "error: step %ld: %s is %g; stopping without updating the weights.\n"
                            "  last good checkpoint: %s\n"
                            "HINT: lower optim.lr or set optim.grad_clip, then --resume from it\n",
                    st->step + 1, isfinite(loss) ? "gradient norm" : "loss",
                    isfinite(loss) ? gnorm : loss, r->last_good);
            return 3;
        }
        if (a->profile_steps > 0) {  // no log, eval or checkpoint inside the measurement
            if (profile_tick(r)) break;
            continue;
        }
        bool last = st->step == c->steps;
        bool do_eval = last || (c->eval_every > 0 && st->step % c->eval_every == 0);
        if (do_eval) validate(r);
        if (st->step % c->log_every == 0 || last || do_eval) log_progress(r, loss, lr, gnorm, do_eval);
        bool stop_here = st->step == a->stop_after;
        if (r->d->world > 1 && dist_scalar_max_f64(r->d, (double)g_stop) > 0 && !g_stop) g_stop = SIGTERM;
        if (last || g_stop || stop_here || (c->ckpt_every > 0 && st->step % c->ckpt_every == 0))
            save_checkpoint(r);
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
    if (fclose(r->metrics) != 0) gdn_die("cannot write metrics file: %s", strerror(errno));
    sampler_free(&r->ts);
    grad_sync_free(r->gs);
}

// What the phases before the loop opened, in reverse; the communicator last (collective).
static void close_run(run *r) {
    tokfile_close(&r->tf);
    zero1_free(r->z);
    model_free(r->m);
    dist_free(r->d);
    free(r->x);
    free(r->y);
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
    write_config(&r);       // the effective config: stdout and <out_dir>/config.ini
    build_model(&r);        // the model's arenas, ZeRO-1's shards
    start_run(&r);          // --resume, or parameters drawn from train.seed
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
