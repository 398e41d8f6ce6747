// train.c — gdn-train: config -> model -> data -> loop -> checkpoints (DESIGN 2, 4-7).
//
//   gdn-train CONFIG.ini [--set section.key=value ...] [--resume CKPT.h5] [--gradcheck]
//   gdn-train --resume CKPT.h5 [--set ...]          (the config stored in the checkpoint)
//   --stop-after N: leave after step N with a checkpoint, as if interrupted (the schedule still
//   spans train.steps), so a later --resume continues the same run.
//   GDN_FAULT_NAN_STEP=N (environment, for tests): the loss of step N is made NaN.
//   --timeline N: spans of N steps per stream (forward, backward per gradient range, all-reduce
//   buckets, wait, update) into <out_dir>/timeline.csv (rank R > 0: timeline.rankR.csv); see
//   timeline_window and src/diag/timeline.h. It changes no bit of the run.
//   GDN_NO_OVERLAP=1 (environment, for tests): all-reduce the gradients after the backward
//   instead of overlapped with it (the same sums, so the same bits on 2 ranks).
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
// summed across ranks in buckets of dist.bucket_mb, overlapped with the backward (the model's
// gradient-ready hook, model.h: a bucket goes out as soon as the layers it holds are done), and
// every rank applies the same update; with dist.zero1 each bucket piece is summed to the rank
// whose shard holds it instead, which updates its shard and all-gathers the weights, on the CPU
// and the GPU. Rank 0 alone logs and writes checkpoints.
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
#include "dist/dist.h"
#include "fwd/cpu_threads.h"
#include "fwd/fwd_cpu.h"
#include "model/checkpoint.h"
#include "diag/compare.h"
#if GDN_HAVE_CUDA
#include "model/backend_cuda.h"
#include "cuda/ops.h"
#endif
#include "model/model.h"
#include "diag/profile.h"
#include "diag/timeline.h"
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
            "               timeline.rankR.csv); tools/plot-timeline draws it. Same weights, bit for bit\n");
}

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

// ---- data parallel: gradient sums overlapped with the backward ---------------------------------
// The model hands over final gradient ranges during the backward of the last micro-batch
// (model_grad_hook: lm_head, norm_f, layers L-1..0, embedding). Consecutive ranges that touch
// (each new one ends where the pending bucket starts, or starts where it ends) are coalesced
// into one bucket; a bucket of >= bucket_mb, or a range that does not touch it, sends it. A
// send sums its elements over the ranks in pieces of at most bucket_mb: CPU float64 grads with
// the blocking MPI all-reduce; GPU fp32 grads (device) with an NCCL all-reduce enqueued on the
// communicator's stream behind the kernels enqueued so far on the compute stream (the legacy
// default stream), so it runs while the backward of the earlier layers goes on.
// grad_sync_finish sends what is pending and makes the compute stream wait for the sums before
// the gradient norm reads them. Each element is summed once, as one element of some piece,
// so the result does not depend on the bucketing: on 2 ranks (a + b, commutative) it is the
// same bits as one all-reduce after the backward (GDN_NO_OVERLAP=1).
// ZeRO-1 (shard > 0): a piece is not all-reduced but summed to the rank whose shard holds it
// (split at shard boundaries: one reduce per owner), so after the wait each rank holds the
// sums of its own shard in the gradient arena (the rest of its arena is its local gradient) and
// the reduce-scatter after the backward is gone: only the all-gather of the weights is left.
typedef struct {
    dist *d;
    size_t shard;         // ZeRO-1: elements per rank's shard (dist_shard_capacity / world); 0: off
    size_t bucket;        // elements per all-reduce, >= 1
    size_t lo, hi;        // pending bucket [lo, hi); empty when lo == hi
    size_t covered;       // elements handed over this step; n_elems at the finish
    long sends;           // all-reduces issued so far
    timeline *tl;         // --timeline (NULL: none): a comm span per all-reduce, the wait
} grad_sync;

// One sum of grads [off, off + len) (all-reduce, or with ZeRO-1 a reduce to rank `root`), with
// its comm span when the step is recorded.
static void grad_sync_sum(grad_sync *g, model *m, size_t off, size_t len, int root) {
    size_t es = m->be->elem[BE_GRAD];
    void *ev[2] = {NULL, NULL};
    int span = -1;
    if (timeline_recording(g->tl)) {
        char name[40];
        if (root < 0) snprintf(name, sizeof name, "allreduce %.3g MB", (double)(len * es) / 1048576.0);
        else snprintf(name, sizeof name, "reduce %.3g MB to %d", (double)(len * es) / 1048576.0, root);
        span = timeline_comm_begin(g->tl, name, &ev[0], &ev[1]);
    }
    bool timed = ev[0] == NULL;  // host clock: read around the blocking call
    if (es == sizeof(double)) {
        if (root < 0) dist_allreduce_sum_f64(g->d, (double *)m->grad_mem + off, len);
        else dist_reduce_sum_f64(g->d, (double *)m->grad_mem + off, len, root);
    } else {
        if (ev[0]) timed = dist_time_next_async(g->d, ev[0], ev[1]);
        if (root < 0) dist_allreduce_sum_f32_async(g->d, (float *)m->grad_mem + off, len, NULL);
        else dist_reduce_sum_f32_async(g->d, (float *)m->grad_mem + off, len, root, NULL);
    }
    timeline_comm_end(g->tl, span, timed);
    g->sends++;
}

// Grads [off, off + len): one all-reduce, or with ZeRO-1 one reduce per owning shard.
static void grad_sync_piece(grad_sync *g, model *m, size_t off, size_t len) {
    if (!g->shard) {
        grad_sync_sum(g, m, off, len, -1);
        return;
    }
    for (size_t a = off, end = off + len; a < end;) {
        size_t owner = a / g->shard, b = GDN_MIN(end, (owner + 1) * g->shard);
        grad_sync_sum(g, m, a, b - a, (int)owner);
        a = b;
    }
}

static void grad_sync_send(grad_sync *g, model *m) {
    for (size_t off = g->lo; off < g->hi; off += g->bucket)
        grad_sync_piece(g, m, off, GDN_MIN(g->bucket, g->hi - off));
    g->lo = g->hi = 0;
}

// model_grad_hook: [lo, hi) of the gradient arena is final.
static void grad_sync_hook(model *m, size_t lo, size_t hi, void *ctx) {
    grad_sync *g = ctx;
    g->covered += hi - lo;
    if (g->lo == g->hi) g->lo = lo, g->hi = hi;
    else if (hi == g->lo) g->lo = lo;
    else if (lo == g->hi) g->hi = hi;
    else {
        grad_sync_send(g, m);
        g->lo = lo, g->hi = hi;
    }
    if (g->hi - g->lo >= g->bucket) grad_sync_send(g, m);
}

// The compute row's "wait" span: from the end of the backward to the sums being there (the
// last bucket's blocking sum on the host clock; the compute stream's wait on the device).
static void grad_sync_finish(grad_sync *g, model *m) {
    grad_sync_send(g, m);
    if (g->covered != m->n_elems)
        gdn_die("internal: the gradient hook handed over %zu of %zu elements this step",
                g->covered, m->n_elems);
    g->covered = 0;
    dist_wait_async(g->d, NULL);  // the compute stream waits for the sums (NCCL; else nothing)
    timeline_compute(g->tl, "wait");
}

// ---- the model's hooks in the loop: gradient sums and the timeline -----------------------------
typedef struct {
    grad_sync *sync;
    bool overlap;         // the sums go out from the gradient hook
    int mb, n_mb;         // the micro-batch in flight, of n_mb per step
} step_hooks;

// "forward", or "forward mb K" with gradient accumulation (K from 0)
static void mb_label(char *buf, size_t n, const char *what, const step_hooks *h) {
    if (h->n_mb == 1) snprintf(buf, n, "%s", what);
    else snprintf(buf, n, "%s mb %d", what, h->mb);
}

// model_fwd_hook: the forward (with the fused loss of the first LM-head chunk) ends here.
static void step_fwd_hook(model *m, void *ctx) {
    step_hooks *h = ctx;
    (void)m;
    if (!timeline_recording(h->sync->tl)) return;
    char name[32];
    mb_label(name, sizeof name, "forward", h);
    timeline_compute(h->sync->tl, name);
}

// "bwd lm_head", "bwd norm_f", "bwd layer L", "bwd embed": the gradient range beginning at
// element lo (model.h: each range starts at the first tensor of its group). With tied
// embeddings the LM head's backward has no range of its own: it ends in norm_f's span.
static void grad_range_name(const model *m, size_t lo, char *buf, size_t n) {
    if (m->lm_head == m->wte && lo == m->params[m->norm_f].offset) {
        snprintf(buf, n, "bwd lm_head+norm_f");
        return;
    }
    for (int i = 0; i < m->n_params; i++) {
        if (m->params[i].offset != lo) continue;
        int l;
        if (sscanf(m->params[i].name, "layers.%d.", &l) == 1) snprintf(buf, n, "bwd layer %d", l);
        else snprintf(buf, n, "bwd %s", m->params[i].name);
        return;
    }
    snprintf(buf, n, "bwd [%zu..)", lo);
}

// model_grad_hook: the span of the backward that finished this range, then its bucket. On the
// host clock a blocking all-reduce issued here stalls the backward: a "wait (hook)" span.
static void step_grad_hook(model *m, size_t lo, size_t hi, void *ctx) {
    step_hooks *h = ctx;
    grad_sync *g = h->sync;
    if (timeline_recording(g->tl)) {
        char name[40];
        grad_range_name(m, lo, name, sizeof name);
        timeline_compute(g->tl, name);
    }
    if (!h->overlap) return;
    long sends = g->sends;
    grad_sync_hook(m, lo, hi, g);
    if (g->sends != sends) timeline_compute_blocked(g->tl, "wait (hook)");
}

// --timeline N: the steps [*first, *first + *count) (1-based) to record: after 2 warm-up steps
// (the first steps also pay for lazy allocations and plans), earlier when the run (to its end,
// --stop-after or the end of --profile) is too short for that, all of it when shorter than N.
static void timeline_window(long n, long done, long end, long *first, long *count) {
    long left = GDN_MAX(end - done, 0);
    long warm = GDN_MIN(2, GDN_MAX(left - n, 0));
    *first = done + 1 + warm;
    *count = GDN_MIN(n, left - warm);
}

// ---- ZeRO-1 (dist.zero1) on either backend -----------------------------------------------------
// z: dist_shard_capacity(n) elements of the gradient / optimizer class (host float64 on the CPU,
// device fp32 on the GPU), allocated once with the backend's alloc. Each rank keeps AdamW's m and
// v for its shard only (model_shard_optimizer: 2/world of their memory) and updates its shard of
// the master weights (the parameters themselves without a master copy); the weights are then
// all-gathered. A checkpoint gathers m and v through z onto rank 0's host (zero1_gather_moments).

// dst[0, n) <- src[0, n) in the gradient / optimizer class; to_bf16: dst is the GPU's bf16
// parameter arena (rounded to nearest, as cuda_adamw writes it).
static void flat_copy(const model *m, bool gpu, void *dst, bool to_bf16, const void *src, size_t n) {
#if GDN_HAVE_CUDA
    if (gpu) {
        cuda_convert(dst, to_bf16 ? CUDA_BF16 : CUDA_F32, src, CUDA_F32, n, NULL);
        return;
    }
#endif
    (void)gpu;
    if (to_bf16) gdn_die("internal: bf16 parameters on the CPU");
    memcpy(dst, src, n * m->be->elem[BE_GRAD]);
}

// In place over z[0, n): every rank's shard, from its owner.
static void zero1_allgather(dist *d, const model *m, void *z, size_t n) {
    if (m->be->elem[BE_GRAD] == sizeof(double)) dist_allgather_f64(d, z, n);
    else dist_allgather_f32(d, z, n, NULL);
}

// One step, after the gradient sums (grad_sync with shard > 0: this rank's shard of the gradient
// arena holds the sums over ranks): the global norm from the shards, AdamW on this rank's shard
// of the flat arenas (optim_adamw_range: runs of same-decay tensors cut to the shard),
// all-gather the weights through z. No update when the norm is not finite (*gnorm_out says so).
// On the timeline's compute row (tl may be NULL): "norm+update"; the caller's next point ends
// "all-gather".
static void zero1_step(dist *d, model *m, void *z, bool gpu, long step, double lr,
                       double *gnorm_out, timeline *tl) {
    const backend *be = m->be;
    const gdn_config *c = &m->cfg;
    size_t n = m->n_elems, lo, hi;
    size_t eg = be->elem[BE_GRAD], ep = be->elem[BE_PARAM];
    char *gb = m->grad_mem, *p = m->param_mem, *w = m->master;
    dist_shard_range(d, n, &lo, &hi);
    double gnorm = sqrt(dist_scalar_sum_f64(d, be->sumsq(gb + lo * eg, hi - lo)));
    *gnorm_out = gnorm;
    if (!isfinite(gnorm)) return;
    double scale = (c->grad_clip > 0 && gnorm > c->grad_clip) ? c->grad_clip / gnorm : 1.0;
    optim_adamw_range(m, lo, hi, step, lr, scale);
    // every rank's shard of the weights: the master copy when there is one, then the bf16
    // parameters from it; else the parameters themselves
    timeline_compute(tl, "norm+update");
    void *truth = w ? (void *)w : (void *)p;
    flat_copy(m, gpu, z, false, truth, n);
    zero1_allgather(d, m, z, n);
    flat_copy(m, gpu, truth, false, z, n);
    if (w) flat_copy(m, gpu, p, ep == 2, z, n);
}

// Before a checkpoint: the full AdamW m and v, gathered through z from every rank's shard, as
// host float64 arrays on rank 0 (m->ckpt_moments, which checkpoint_save writes); every rank takes
// part. zero1_release_moments frees them after the save.
static void zero1_gather_moments(dist *d, model *m, void *z, bool gpu) {
    const backend *be = m->be;
    size_t n = m->n_elems, eg = be->elem[BE_GRAD];
    void *arr[2] = {m->opt_m, m->opt_v};
    for (int k = 0; k < 2; k++) {
        flat_copy(m, gpu, (char *)z + m->opt_lo * eg, false, arr[k], m->opt_n);
        zero1_allgather(d, m, z, n);
        if (d->rank != 0) continue;
        double *h = gdn_malloc(n * sizeof(double));
        be->download(h, z, n, BE_GRAD);
        m->ckpt_moments[k] = h;
    }
}
static void zero1_release_moments(model *m) {
    for (int k = 0; k < 2; k++) {
        free((void *)m->ckpt_moments[k]);
        m->ckpt_moments[k] = NULL;
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

int main(int argc, char **argv) {
    const double t_launch = gdn_now();  // "startup:" below: what a user waits before step 1
    cpu_threads_env(argv);  // first: idle thread pools must sleep, not spin (cpu_threads.h)
    const char *cfg_path = NULL, *resume = NULL;
    enum { MAX_SETS = 256 };
    const char *sets[MAX_SETS];
    int nset = 0;
    if (argc > MAX_SETS) {
        fprintf(stderr, "error: too many arguments (%d)\n", argc);
        return 2;
    }
    bool gradcheck = false, eval_only = false;
    int gpus = 1;
    const char *gc_device = "cpu";
    long stop_after = -1, profile_steps = 0, timeline_steps = 0;
    bool profile_events = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc)
            sets[nset++] = argv[++i];
        else if (!strncmp(argv[i], "--set=", 6))
            sets[nset++] = argv[i] + 6;
        else if (!strcmp(argv[i], "--resume") && i + 1 < argc)
            resume = argv[++i];
        else if (!strcmp(argv[i], "--stop-after") && i + 1 < argc) {
            if (!count_arg("--stop-after", "a step number", argv[++i], 1, LONG_MAX, &stop_after))
                return 2;
        } else if (!strcmp(argv[i], "--profile") && i + 1 < argc) {
            if (!count_arg("--profile", "a step count", argv[++i], 1, LONG_MAX, &profile_steps))
                return 2;
        } else if (!strcmp(argv[i], "--profile-events")) {
            profile_events = true;
        } else if (!strcmp(argv[i], "--timeline") && i + 1 < argc) {
            if (!count_arg("--timeline", "a step count", argv[++i], 1, LONG_MAX, &timeline_steps))
                return 2;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            gc_device = argv[++i];
            if (strcmp(gc_device, "cpu") && strcmp(gc_device, "cuda")) {
                fprintf(stderr, "error: --device takes cpu or cuda, got '%s'\n", gc_device);
                return 2;
            }
        } else if (!strcmp(argv[i], "--gpus") && i + 1 < argc) {
            long g;
            if (!count_arg("--gpus", "a count", argv[++i], 1, 64, &g)) return 2;
            gpus = (int)g;
        } else if (!strcmp(argv[i], "--gradcheck"))
            gradcheck = true;
        else if (!strcmp(argv[i], "--eval"))
            eval_only = true;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || cfg_path) {
            fprintf(stderr, "error: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else
            cfg_path = argv[i];
    }
    if (!cfg_path && !resume) {
        usage(stderr);
        return 2;
    }
    if (profile_events && profile_steps == 0) {
        fprintf(stderr, "error: --profile-events changes how --profile N times the ops: give "
                        "--profile N too\n");
        return 2;
    }
    if (eval_only && (!resume || gradcheck || stop_after > 0 || profile_steps > 0 || timeline_steps > 0)) {
        fprintf(stderr, "error: --eval evaluates a checkpoint: it needs --resume CKPT.h5 and takes "
                        "no --gradcheck, --stop-after, --profile or --timeline\n");
        return 2;
    }
    if (gpus > 1) {  // the parent forks one worker per GPU and waits; workers go on below
        int rc = dist_spawn_local(gpus, argc, argv);
        if (rc >= 0) return rc;
    }

    gdn_config cfg;
    config_defaults(&cfg);
    char err[1024];
    if (cfg_path) {
        if (!config_load(&cfg, cfg_path, sets, nset)) return 2;
    } else {
        char *text = checkpoint_read_config(resume, err, sizeof err);
        if (!text) gdn_die("%s", err);
        bool ok = config_load_string_sets(&cfg, text, resume, sets, nset);
        free(text);
        if (!ok) return 2;
    }

    cpu_set_threads(cfg.threads);
    if (gradcheck) {
        if (!strcmp(gc_device, "cpu")) return model_gradcheck(&cfg, 2, 9, 12, 1e-6, cfg.seed, stdout) ? 1 : 0;
#if GDN_HAVE_CUDA
        if (cfg.vocab_size == 0) {  // the tokens of the check are random: any vocabulary works
            token_file probe;
            cfg.vocab_size = tokfile_open(&probe, cfg.data_path, err, sizeof err) ? probe.vocab_size : 256;
            if (cfg.vocab_size == probe.vocab_size) tokfile_close(&probe);
        }
        int T = GDN_MIN(cfg.seq_len, 256), fails = 0;
        printf("== GPU fp32 vs CPU float64 (tolerance 1e-4)\n");
        fails += model_compare_backends(&cfg, backend_cuda_get(false), 2, T, 1e-4, cfg.seed, stdout);
        printf("== GPU bf16 vs CPU float64 (tolerance 5e-2: bf16 keeps 8 bits)\n");
        fails += model_compare_backends(&cfg, backend_cuda_get(true), 2, T, 5e-2, cfg.seed, stdout);
        return fails ? 1 : 0;
#else
        gdn_die("--device cuda: this build has no CUDA backend (configure where nvcc is found)");
#endif
    }

    // data parallel: rank and world from the launcher (mpirun, torchrun, srun) or 1
    dist_env env;
    if (!dist_env_read(&env, err, sizeof err)) gdn_die("%s", err);
    bool want_gpu = false;
#if GDN_HAVE_CUDA
    want_gpu = !strcmp(cfg.device, "cuda") || (!strcmp(cfg.device, "auto") && backend_cuda_devices() > 0);
#else
    if (!strcmp(cfg.device, "cuda"))
        gdn_die("train.device = cuda: this build has no CUDA backend (configure where nvcc is found)");
#endif
    // dist.backend: auto = NCCL across GPUs, MPI across CPU ranks; nccl or mpi at world 1 runs
    // the whole data-parallel path (buckets, collectives, ZeRO-1) over one rank, as a check
    const char *want = want_gpu && env.world > 1 ? "nccl" : env.mpi_launcher ? "mpi" : "none";
    if (strcmp(cfg.dist_backend, "auto")) {
        want = cfg.dist_backend;
        if (!strcmp(want, "nccl") && !want_gpu)
            gdn_die("%s: [dist] backend = nccl needs the GPU (train.device = %s picks the CPU)",
                    cfg_path ? cfg_path : resume, cfg.device);
        if (!strcmp(want, "mpi") && want_gpu)
            gdn_die("%s: [dist] backend = mpi carries CPU ranks only; on GPUs use nccl (or auto)",
                    cfg_path ? cfg_path : resume);
    }
    dist *dd = dist_init(want, cfg.timeout_s, cfg.nccl_id_path, err, sizeof err);
    if (!dd) gdn_die("%s", err);
    bool r0 = dd->rank == 0;
    if (!r0 && !freopen("/dev/null", "w", stdout)) gdn_die("cannot silence rank %d's stdout", dd->rank);

    // backend: auto picks the GPU when this build has CUDA and a device is there
    const backend *be = &backend_cpu;
#if GDN_HAVE_CUDA
    if (want_gpu) {
        be = backend_cuda_get(!strcmp(cfg.precision, "bf16"));  // on dist_init's device
        backend_cuda_set_attention_deterministic(cfg.swa_deterministic);
        backend_cuda_set_gemm_tune(cfg.gemm_tune);
    }
#endif
    bool on_gpu = be != &backend_cpu;
    if (profile_steps > 0) be = backend_profiled(be);  // a decorator: same name, same sizes
    if (profile_events) {
        if (!on_gpu) gdn_die("--profile-events: device events need the GPU backend (train.device = "
                             "cuda or auto with a GPU); on the CPU use --profile alone");
#if GDN_HAVE_CUDA
        profile_use_clock(timeline_cuda_clock());
#endif
    }
    // ZeRO-1 and the flat copies treat gradients, optimizer state and (without a master copy)
    // parameters as arrays of one element type
    if (be->elem[BE_GRAD] != be->elem[BE_OPT] ||
        (!be->master && be->elem[BE_PARAM] != be->elem[BE_GRAD]))
        gdn_die("internal: backend %s: gradient, optimizer and parameter element sizes differ",
                be->name);

    // data
    token_file tf;
    if (!tokfile_open(&tf, cfg.data_path, err, sizeof err))
        gdn_die("%s\nHINT: make it with gdn-prepare (see README.md), or set data.path", err);
    if (cfg.vocab_size == 0) cfg.vocab_size = tf.vocab_size;
    if (cfg.vocab_size < tf.vocab_size)
        gdn_die("model.vocab_size = %d but '%s' has vocab_size %d", cfg.vocab_size, cfg.data_path,
                tf.vocab_size);

    char path[1200];
    snprintf(path, sizeof path, "%s/config.ini", cfg.out_dir);
    if (r0 && !eval_only) {  // --eval leaves the run directory as it is
        mkdir_p(cfg.out_dir);
        FILE *cf = fopen(path, "w");
        if (!cf) gdn_die("cannot write '%s': %s", path, strerror(errno));
        config_write(&cfg, cf);
        if (fclose(cf) != 0) gdn_die("cannot write '%s': %s", path, strerror(errno));
    }
    if (eval_only) printf("effective config:\n");
    else printf("effective config (also in %s):\n", path);
    config_write(&cfg, stdout);

    model *m = model_create(&cfg, be, cfg.batch_size, cfg.seq_len);
    // collectives at world 1 only when dist.backend names a backend (a check of the path)
    bool collectives = dd->world > 1 || (dd->backend != DIST_NONE && strcmp(cfg.dist_backend, "auto"));
    bool zero1 = cfg.zero1 && collectives;
    if (zero1) {  // this rank keeps AdamW's m and v for its shard only
        size_t lo, hi;
        dist_shard_range(dd, m->n_elems, &lo, &hi);
        model_shard_optimizer(m, lo, hi);
    }
    model_print_summary(m, stdout);
    train_state st = {.step = 0, .tokens_seen = 0, .sampler_pos = 0, .seed = cfg.seed,
                      .best_val = INFINITY, .world_size = dd->world};
    char ckpt[1200];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.h5", cfg.out_dir);
    if (resume) {
        if (!checkpoint_load(resume, m, &st, err, sizeof err)) gdn_die("%s", err);
        if (st.world_size != dd->world)
            printf("note: checkpoint written by %d ranks, resuming on %d: weights and optimizer "
                   "state continue exactly; the data continues exactly when batch_size x grad_accum "
                   "x ranks is what it was (now %d x %d x %d; train.grad_accum can keep it)\n",
                   st.world_size, dd->world, cfg.batch_size, cfg.grad_accum, dd->world);
        printf("resumed from %s at step %ld (%llu tokens seen)\n", resume, st.step,
               (unsigned long long)st.tokens_seen);
        st.world_size = dd->world;
        if (eval_only) {
            int32_t *ex = gdn_malloc(sizeof(int32_t) * m->N), *ey = gdn_malloc(sizeof(int32_t) * m->N);
            double t0 = gdn_now(), v = evaluate(m, &tf, &cfg, ex, ey, dd);
            if (cfg.eval_batches == 0) {
                uint64_t nb, w = full_eval_windows(&tf, &cfg, dd, &nb);
                printf("eval: val loss %.6f over the whole split (%llu windows of %d), %.1f s\n", v,
                       (unsigned long long)w, cfg.seq_len + 1, gdn_now() - t0);
            } else {
                printf("eval: val loss %.6f over %d batches of %d windows of %d, %.1f s\n", v,
                       cfg.eval_batches, cfg.batch_size * cfg.grad_accum * dd->world,
                       cfg.seq_len + 1, gdn_now() - t0);
            }
            free(ex);
            free(ey);
            model_free(m);
            tokfile_close(&tf);
            dist_free(dd);
            return isfinite(v) ? 0 : 1;
        }
    } else {
        double t_init = gdn_now();
        model_init_params(m, cfg.seed);
        printf("init: parameters drawn in %.2f s\n", gdn_now() - t_init);
    }

    batch_sampler ts;
    if (!sampler_init(&ts, &tf, DATA_SPLIT_TRAIN, cfg.batch_size, cfg.seq_len, cfg.seed, dd->rank,
                      dd->world, cfg.grad_accum, st.sampler_pos * (uint64_t)cfg.grad_accum, true,
                      err, sizeof err))
        gdn_die("training data: %s", err);
    batch_sampler vcheck;  // fail early when the validation split is too short
    if (!sampler_init(&vcheck, &tf, DATA_SPLIT_VAL, cfg.batch_size, cfg.seq_len, cfg.seed, 0, 1,
                      1, 0, false, err, sizeof err))
        gdn_die("validation data: %s", err);
    sampler_free(&vcheck);

    snprintf(path, sizeof path, "%s/%s", cfg.out_dir, cfg.metrics_file);
    FILE *mf = fopen(r0 ? path : "/dev/null", resume ? "a" : "w");
    if (!mf) gdn_die("cannot open metrics file '%s': %s", path, strerror(errno));
    void *zbuf = zero1 ? be->alloc(dist_shard_capacity(dd, m->n_elems) * be->elem[BE_GRAD]) : NULL;
    // gradient sums: overlapped with the backward through the hook, or (GDN_NO_OVERLAP) after it
    const char *no_overlap = getenv("GDN_NO_OVERLAP");
    bool sync_grads = collectives;  // ZeRO-1 too: each piece summed to its shard's owner
    bool overlap = sync_grads && !(no_overlap && *no_overlap && strcmp(no_overlap, "0") != 0);
    grad_sync gsync = {.d = dd,
                       .shard = zero1 ? dist_shard_capacity(dd, m->n_elems) / (size_t)dd->world : 0,
                       .bucket = GDN_MAX((size_t)1, (size_t)(cfg.bucket_mb * 1048576.0 /
                                                             (double)be->elem[BE_GRAD]))};
    // --timeline: this rank's file, the device clock (CUDA events) on the GPU
    if (timeline_steps > 0) {
        long end = cfg.steps, first, count;
        if (stop_after > 0) end = GDN_MIN(end, stop_after);
        if (profile_steps > 0) end = GDN_MIN(end, st.step + 2 + profile_steps);
        timeline_window(timeline_steps, st.step, end, &first, &count);
        if (count < 1) gdn_die("--timeline %ld: no step left to run (at step %ld of %d)",
                               timeline_steps, st.step, cfg.steps);
        const timeline_clock *clk = NULL;
#if GDN_HAVE_CUDA
        if (on_gpu) clk = timeline_cuda_clock();
#endif
        mkdir_p(cfg.out_dir);  // rank 0 made it; the others may get there first
        if (r0) snprintf(path, sizeof path, "%s/timeline.csv", cfg.out_dir);
        else snprintf(path, sizeof path, "%s/timeline.rank%d.csv", cfg.out_dir, dd->rank);
        gsync.tl = timeline_create(path, dd->rank, first, count, clk);
        printf("timeline: steps %ld..%ld (%s clock) -> %s\n", first, first + count - 1,
               clk ? "CUDA event" : "host", path);
    }
    step_hooks hooks = {.sync = &gsync, .overlap = overlap, .n_mb = cfg.grad_accum};
    if (overlap || gsync.tl) {
        m->grad_hook = step_grad_hook;
        m->grad_hook_ctx = &hooks;
    }
    if (gsync.tl) m->fwd_hook = step_fwd_hook;

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

    double peak;
    char peak_what[256];
    if (!on_gpu) {
        peak = cpu_peak_flops();
        snprintf(peak_what, sizeof peak_what, "this CPU's measured float64 matmul rate %.1f GFLOP/s",
                 peak / 1e9);
    } else {
#if GDN_HAVE_CUDA
        char name[128];
        peak = backend_cuda_peak_flops(!strcmp(cfg.precision, "bf16"), name, sizeof name);
        snprintf(peak_what, sizeof peak_what, "the %s datasheet %s peak %.0f TFLOP/s", name,
                 cfg.precision, peak / 1e12);
#endif
    }
    long tokens_per_step = (long)cfg.batch_size * cfg.seq_len * cfg.grad_accum * dd->world;
    printf("training: %d steps of %ld tokens (%d rank%s, %s%s), device %s, MFU against %s\n",
           cfg.steps, tokens_per_step, dd->world, dd->world > 1 ? "s" : "",
           dist_backend_name(dd->backend), cfg.zero1 ? ", ZeRO-1" : "", be->name, peak_what);
    if (cfg.eval_batches == 0) {
        uint64_t nb, w = full_eval_windows(&tf, &cfg, dd, &nb);
        printf("validation: the whole split, %llu tokens in %llu windows of %d (%llu batches)\n",
               (unsigned long long)tf.n_tokens[DATA_SPLIT_VAL], (unsigned long long)w,
               cfg.seq_len + 1, (unsigned long long)nb);
    }
    if (sync_grads)
        printf("gradients: %s in %g MB buckets, %s%s\n",
               zero1 ? "reduce to each shard's owner" : "all-reduce", cfg.bucket_mb,
               overlap ? "overlapped with the backward" : "after the backward (GDN_NO_OVERLAP)",
               zero1 ? "; AdamW on this rank's shard, all-gather of the weights" : "");
    printf("startup: %.1f s from launch to the first step\n", gdn_now() - t_launch);
    fflush(stdout);  // the header is there before the first step's line, also through a pipe
    peak *= dd->world;
    int peak_retries = 0;  // CPU: times the matmul rate was timed again (the log below)
    int N = m->N;
    int32_t *x = gdn_malloc(sizeof(int32_t) * N), *y = gdn_malloc(sizeof(int32_t) * N);
    double t_start = gdn_now(), t_win = t_start, last_val = NAN;
    double t_aside = 0;  // seconds of the window spent evaluating or checkpointing: not training
    long win_steps = 0;
    const char *last_good = resume ? resume : "none";
    int rc = 0;
    const char *fault = getenv("GDN_FAULT_NAN_STEP");
    long nan_step = fault ? atol(fault) : -1;
    long prof_done = 0;  // --profile: steps run so far
    double t_prof = 0;   // --profile: wall seconds of the profiled steps
    if (profile_steps > 0 && st.step + 2 + profile_steps > cfg.steps)
        gdn_die("--profile %ld needs %ld more steps, train.steps = %d leaves %ld", profile_steps,
                2 + profile_steps, cfg.steps, cfg.steps - st.step);
    while (st.step < cfg.steps) {
        long step = st.step;
        timeline *tl = gsync.tl;
        bool rec = timeline_step_begin(tl, step + 1);
        model_zero_grads(m);
        double loss_sum = 0;
        for (int mb = 0; mb < cfg.grad_accum; mb++) {
            sampler_next(&ts, x, y);
            m->dropout_key = cfg.seed * 0x9E3779B97F4A7C15ull + (uint64_t)step * 1024 + (uint64_t)mb +
                             ((uint64_t)dd->rank << 40);
            m->grad_hook_armed = mb == cfg.grad_accum - 1;  // the sums go out with the last one
            hooks.mb = mb;
            loss_sum += model_forward_backward(m, x, y, 1.0 / ((double)N * cfg.grad_accum * dd->world), true);
            if (rec && !m->grad_hook_armed) {  // unarmed: no ranges, the backward in one span
                char name[32];
                mb_label(name, sizeof name, "backward", &hooks);
                timeline_compute(tl, name);
            }
        }
        m->grad_hook_armed = false;
        if (sync_grads) {
            if (!overlap) grad_sync_hook(m, 0, m->n_elems, &gsync);
            grad_sync_finish(&gsync, m);
        }
        double loss = dist_scalar_sum_f64(dd, loss_sum) / ((double)N * cfg.grad_accum * dd->world);
        if (step + 1 == nan_step) loss = NAN;
        double lr = optim_lr(&cfg, step), gnorm;
        bool updated = false;
        if (zero1) {
            if (isfinite(loss)) {
                zero1_step(dd, m, zbuf, on_gpu, step, lr, &gnorm, tl);  // no update when gnorm is not finite
                updated = isfinite(gnorm);
            } else
                gnorm = NAN;
        } else {
            gnorm = optim_grad_norm(m);
        }
        if (!isfinite(loss) || !isfinite(gnorm)) {
            fprintf(stderr, "error: step %ld: %s is %g; stopping without updating the weights.\n"
                            "  last good checkpoint: %s\n"
                            "HINT: lower optim.lr or set optim.grad_clip, then --resume from it\n",
                    step + 1, isfinite(loss) ? "gradient norm" : "loss", isfinite(loss) ? gnorm : loss,
                    last_good);
            rc = 3;
            break;
        }
        if (!updated) optim_step(m, step, lr, gnorm);
        timeline_compute(tl, updated ? "all-gather" : "norm+update");  // ZeRO-1: see zero1_step
        timeline_step_end(tl);
        timeline_collect(tl);  // the earlier steps: their events preceded this step's norm sync
        st.step++;
        st.tokens_seen += (uint64_t)tokens_per_step;
        st.sampler_pos = ts.pos / (uint64_t)cfg.grad_accum;  // steps: independent of the split
        win_steps++;
        if (profile_steps > 0) {  // no log, eval or checkpoint inside the measurement
            if (++prof_done == 2) {  // the warm-up (plans, lazy buffers) is not counted
                profile_reset();
                t_prof = gdn_now();
            }
            if (prof_done == 2 + profile_steps) {
                t_prof = gdn_now() - t_prof;
                break;
            }
            continue;
        }

        bool last = st.step == cfg.steps;
        bool do_eval = last || (cfg.eval_every > 0 && st.step % cfg.eval_every == 0);
        if (do_eval) {
            double t_eval = gdn_now();
            last_val = evaluate(m, &tf, &cfg, x, y, dd);  // every rank takes part
            t_aside += gdn_now() - t_eval;
            if (last_val < st.best_val) st.best_val = last_val;
            fprintf(mf, "{\"step\": %ld, \"tokens\": %llu, \"val_loss\": %.17g, \"time\": %.3f}\n",
                    st.step, (unsigned long long)st.tokens_seen, last_val, gdn_now() - t_start);
        }
        if (st.step % cfg.log_every == 0 || last || do_eval) {
            // time per training step: evaluations and checkpoints in the window left out
            double now = gdn_now(), dt = (now - t_win - t_aside) / (double)GDN_MAX(win_steps, 1);
            double tps = tokens_per_step / dt, fl = tps * m->flops_per_token;
            // CPU: an MFU above 100% means the matmul rate was timed on a busy machine (say,
            // a build beside the run): time it again, at most 3 times a run, keeping the best
            double t_peak = 0;
            if (!on_gpu && fl > peak && peak_retries < 3) {
                peak_retries++;
                const double t0 = gdn_now(), again = cpu_peak_flops() * dd->world;
                t_peak = gdn_now() - t0;
                if (again > peak) {
                    printf("mfu: this CPU's float64 matmul rate timed again: %.1f GFLOP/s (%.1f at "
                           "start, when the machine was busier)\n", again / dd->world / 1e9,
                           peak / dd->world / 1e9);
                    peak = again;
                }
            }
            char eta[32], val[32] = "";
            fmt_eta(eta, sizeof eta, dt * (double)(cfg.steps - st.step));
            if (do_eval) snprintf(val, sizeof val, " | val %.4f", last_val);
            printf("step %6ld/%d | loss %.4f%s | lr %.2e | gnorm %.3f | %.0f tok/s | MFU %.1f%% | "
                   "%.1f ms/step | ETA %s\n",
                   st.step, cfg.steps, loss, val, lr, gnorm, tps, 100.0 * fl / peak, 1e3 * dt, eta);
            fflush(stdout);
            fprintf(mf, "{\"step\": %ld, \"tokens\": %llu, \"loss\": %.17g, \"lr\": %.6e, "
                        "\"grad_norm\": %.6f, \"tok_s\": %.1f, \"mfu\": %.5f, \"time\": %.3f}\n",
                    st.step, (unsigned long long)st.tokens_seen, loss, lr, gnorm, tps, fl / peak,
                    now - t_start);
            fflush(mf);
            t_win = now + t_peak;  // the re-timing is not a training step's time
            t_aside = 0;
            win_steps = 0;
        }
        bool stop_here = st.step == stop_after;
        if (dd->world > 1 && dist_scalar_max_f64(dd, (double)g_stop) > 0 && !g_stop) g_stop = SIGTERM;
        bool do_ckpt = last || g_stop || stop_here ||
                       (cfg.ckpt_every > 0 && st.step % cfg.ckpt_every == 0);
        if (do_ckpt) {
            double t_ckpt = gdn_now();
            if (zbuf) zero1_gather_moments(dd, m, zbuf, on_gpu);
            save_or_die(ckpt, m, &st, dd);
            zero1_release_moments(m);
            t_aside += gdn_now() - t_ckpt;
            last_good = ckpt;
        }
        if (g_stop) {
            printf("signal %d: stopped after step %ld, checkpoint written to %s\n", (int)g_stop,
                   st.step, ckpt);
            break;
        }
        if (stop_here) {
            printf("--stop-after %ld: stopped, checkpoint written to %s\n", stop_after, ckpt);
            break;
        }
    }
    if (profile_steps > 0 && prof_done == 2 + profile_steps) {
        snprintf(path, sizeof path, "%s/profile.txt", cfg.out_dir);
        FILE *pf = fopen(r0 ? path : "/dev/null", "w");
        if (!pf) gdn_die("cannot write '%s': %s", path, strerror(errno));
        profile_print(stdout, t_prof / (double)profile_steps, (int)profile_steps);
        profile_print(pf, t_prof / (double)profile_steps, (int)profile_steps);
        if (fclose(pf) != 0) gdn_die("cannot write '%s': %s", path, strerror(errno));
        printf("profile written to %s\n", path);
    }
    if (rc == 0 && st.step == cfg.steps)
        printf("done: %ld steps, %.1f s, final val loss %.4f, best %.4f, checkpoint %s\n", st.step,
               gdn_now() - t_start, last_val, st.best_val, ckpt);
    timeline_free(gsync.tl);  // waits for the device, writes the last recorded steps
    if (fclose(mf) != 0) gdn_die("cannot write metrics file: %s", strerror(errno));
    sampler_free(&ts);
    tokfile_close(&tf);
    if (zbuf) be->release(zbuf);
    model_free(m);
    dist_free(dd);
    free(x);
    free(y);
    return rc;
}
