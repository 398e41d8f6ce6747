// profile.c — the profiling decorator of profile.h: one slot per op name (calls, seconds,
// FLOPs). Two clocks:
//   sync (default): each op timed as  sync; t0 = now; op; sync; slot += now - t0.  The sync
//     before the op makes sure the clock does not charge earlier queued work to it; the sync
//     after it makes the op's device work finish inside the interval.
//   events (profile_use_clock): two events of a device clock recorded on the compute stream
//     around each op, no sync; the intervals are read when the table is printed or the counters
//     reset (one wait for the last event), so the ops run as in a normal step.
#include "profile.h"
#include "../core/common.h"
#include <stdlib.h>

// X-macro: every timed op of backend.h, in struct order.
#define PROFILE_OPS(X)                                                                     \
    X(zero) X(add) X(copy) X(sumsq) X(embedding_fwd) X(embedding_bwd) X(rmsnorm_fwd)       \
    X(add_rmsnorm_fwd) X(rmsnorm_bwd) X(linear_fwd) X(linear_bwd) X(conv1d_fwd)            \
    X(conv1d_bwd) X(silu_fwd) X(silu_bwd) X(conv_silu_fwd) X(conv_silu_bwd) X(conv_silu3_fwd) \
    X(conv_silu3_bwd) X(conv_silu3_l2_fwd) X(l2norm_fwd) X(l2norm_bwd) X(gdn_gates_fwd)        \
    X(gdn_gates_bwd) X(gated_rmsnorm_fwd)                                                  \
    X(gated_rmsnorm_bwd) X(swiglu_fwd) X(swiglu_bwd) X(crossentropy) X(loss_collect)      \
    X(dropout_fwd) X(dropout_bwd) X(rope_fwd) X(rope_bwd) X(attention_fwd) X(attention_bwd) \
    X(gdn_fwd)                                                                             \
    X(gdn_bwd) X(adamw) X(adamw_multi)

#define SLOT_ENUM(n) SLOT_##n,
#define SLOT_NAME(n) #n,
enum { PROFILE_OPS(SLOT_ENUM) SLOT_COUNT };
static const char *const slot_name[SLOT_COUNT] = {PROFILE_OPS(SLOT_NAME)};

typedef struct {
    long calls;
    double seconds;  // sum of the synced intervals
    double flops;    // 0 where not counted
} slot;

// Process-wide state (profile.h): the wrapped backend, its decorated copy, the counters.
static const backend *inner;
static backend profiled;
static slot slots[SLOT_COUNT];

// The matmul ops again, per (op, N, in, out): which shapes fall short of the GEMM peak.
enum { MAX_SHAPES = 96 };
typedef struct {
    int slot, N, in, out;
    long calls;
    double seconds, flops;
} shape_slot;
static shape_slot shapes[MAX_SHAPES];
static int n_shapes;

// Events mode (clk set): every op's pair of events, in call order, until resolve() reads them.
// A record keeps its two events after resolve(), for the op that takes its place next.
typedef struct {
    int slot, shape;  // shape: index in shapes[] or -1
    void *e0, *e1;
} ev_rec;
static const timeline_clock *clk;
static ev_rec *recs;
static size_t n_recs, n_made, cap_recs;  // recorded, with events created, allocated
static bool op_open;                     // events: op_begin recorded recs[n_recs].e0
static double gap_seconds;  // events: from one op's end event to the next op's start event

static double op_begin(void) {
    if (clk) {
        if (n_recs == cap_recs) {
            cap_recs = cap_recs ? 2 * cap_recs : 4096;
            recs = realloc(recs, cap_recs * sizeof *recs);
            if (!recs) gdn_die("profile: out of host memory for %zu op records", cap_recs);
        }
        if (n_recs == n_made) {
            recs[n_made].e0 = clk->create();
            recs[n_made++].e1 = clk->create();
        }
        clk->record(recs[n_recs].e0);
        op_open = true;
        return 0;
    }
    inner->sync();
    return gdn_now();
}
// The shapes[] row of (slot, N, in, out), added when new; -1 when the table is full.
static int shape_index(int s, int N, int in, int out) {
    int i = 0;
    while (i < n_shapes && !(shapes[i].slot == s && shapes[i].N == N && shapes[i].in == in &&
                             shapes[i].out == out))
        i++;
    if (i == MAX_SHAPES) return -1;  // more distinct shapes than any model here has: not listed
    if (i == n_shapes) shapes[n_shapes++] = (shape_slot){.slot = s, .N = N, .in = in, .out = out};
    return i;
}
// Close the interval opened by op_begin (t0) for slot s (and shapes[shape] when >= 0). Sync
// clock: its seconds now; events: recorded, the seconds added by resolve().
static void op_end(int s, double t0, double flops, int shape) {
    slots[s].calls++;
    slots[s].flops += flops;
    if (shape >= 0) {
        shapes[shape].calls++;
        shapes[shape].flops += flops;
    }
    if (clk) {
        ev_rec *r = &recs[n_recs++];
        clk->record(r->e1);
        r->slot = s;
        r->shape = shape;
        op_open = false;
        return;
    }
    inner->sync();
    double dt = gdn_now() - t0;
    slots[s].seconds += dt;
    if (shape >= 0) shapes[shape].seconds += dt;
}
// Events: wait for the last one, add every recorded interval and the gaps between consecutive
// ops to the counters; the records (and their events) are free for the next ops.
static void resolve(void) {
    if (!clk || n_recs == 0) return;
    clk->wait(recs[n_recs - 1].e1);
    for (size_t i = 0; i < n_recs; i++) {
        const ev_rec *r = &recs[i];
        double dt = clk->elapsed_ms(r->e0, r->e1) / 1e3;
        slots[r->slot].seconds += dt;
        if (r->shape >= 0) shapes[r->shape].seconds += dt;
        if (i > 0) gap_seconds += clk->elapsed_ms(recs[i - 1].e1, r->e0) / 1e3;
    }
    n_recs = 0;
}

// Time one void call of inner's op `name`, counting `fl` FLOPs.
#define TIMED(name, fl, ...)                 \
    do {                                     \
        double t0_ = op_begin();             \
        inner->name(__VA_ARGS__);            \
        op_end(SLOT_##name, t0_, (fl), -1);  \
    } while (0)

static void p_zero(void *p, size_t n, be_class c) { TIMED(zero, 0, p, n, c); }
static void p_add(void *y, const void *x, size_t n) { TIMED(add, 0, y, x, n); }
static void p_copy(void *y, const void *x, size_t n) { TIMED(copy, 0, y, x, n); }
static double p_sumsq(const void *x, size_t n) {
    double t0 = op_begin(), r = inner->sumsq(x, n);
    op_end(SLOT_sumsq, t0, 0, -1);
    return r;
}
static void p_embedding_fwd(void *out, const int32_t *tok, const void *wte, int N, int d) {
    TIMED(embedding_fwd, 0, out, tok, wte, N, d);
}
static void p_embedding_bwd(void *dwte, const void *dout, const int32_t *tok, int N, int d) {
    TIMED(embedding_bwd, 0, dwte, dout, tok, N, d);
}
static void p_rmsnorm_fwd(void *y, void *rstd, const void *x, const void *w, int N, int d,
                          double eps) {
    TIMED(rmsnorm_fwd, 0, y, rstd, x, w, N, d, eps);
}
static void p_add_rmsnorm_fwd(void *x_out, void *y, void *rstd, const void *x_in,
                              const void *branch, const void *w, int N, int d, double eps) {
    TIMED(add_rmsnorm_fwd, 0, x_out, y, rstd, x_in, branch, w, N, d, eps);
}
static void p_rmsnorm_bwd(void *dx, void *dw, void *y, const void *dy, const void *x,
                          const void *w, const void *rstd, int N, int d, bool acc) {
    TIMED(rmsnorm_bwd, 0, dx, dw, y, dy, x, w, rstd, N, d, acc);
}
// A matmul op: timed as TIMED, and also per shape.
#define TIMED_MM(name, N, in, out, fl, ...)                   \
    do {                                                      \
        int sh_ = shape_index(SLOT_##name, N, in, out);       \
        double t0_ = op_begin();                              \
        inner->name(__VA_ARGS__);                             \
        op_end(SLOT_##name, t0_, (fl), sh_);                  \
    } while (0)

// y = x W^T: 2 N in out FLOPs; backward dx = dy W and dW += dy^T x: as much each (either may
// be NULL: train.recompute = light takes them in two calls).
static void p_linear_fwd(void *y, const void *x, const void *W, int N, int in, int out) {
    TIMED_MM(linear_fwd, N, in, out, 2.0 * N * in * out, y, x, W, N, in, out);
}
static void p_linear_bwd(void *dx, void *dW, const void *dy, const void *x, const void *W, int N,
                         int in, int out, bool acc) {
    TIMED_MM(linear_bwd, N, in, out, 2.0 * N * in * out * ((dx != NULL) + (dW != NULL)), dx, dW, dy,
             x, W, N, in, out, acc);
}
static void p_conv1d_fwd(void *y, const void *x, const void *w, int B, int T, int C, int K,
                         const int32_t *ds) {
    TIMED(conv1d_fwd, 0, y, x, w, B, T, C, K, ds);
}
static void p_conv1d_bwd(void *dx, void *dw, const void *dy, const void *x, const void *w, int B,
                         int T, int C, int K, const int32_t *ds) {
    TIMED(conv1d_bwd, 0, dx, dw, dy, x, w, B, T, C, K, ds);
}
static void p_silu_fwd(void *y, const void *x, size_t n) { TIMED(silu_fwd, 0, y, x, n); }
static void p_silu_bwd(void *dx, const void *dy, const void *x, size_t n) {
    TIMED(silu_bwd, 0, dx, dy, x, n);
}
static void p_conv_silu_fwd(void *y, const void *x, const void *w, int B, int T, int C, int K,
                            size_t ld, const int32_t *ds) {
    TIMED(conv_silu_fwd, 0, y, x, w, B, T, C, K, ld, ds);
}
static void p_conv_silu_bwd(void *dx, void *dw, const void *dy, const void *x, const void *w,
                            int B, int T, int C, int K, size_t ld, const int32_t *ds) {
    TIMED(conv_silu_bwd, 0, dx, dw, dy, x, w, B, T, C, K, ld, ds);
}
static void p_conv_silu3_fwd(void *y0, void *y1, void *y2, const void *x, const void *w, int B,
                             int T, int C0, int C1, int C2, int K, size_t ld, const int32_t *ds) {
    TIMED(conv_silu3_fwd, 0, y0, y1, y2, x, w, B, T, C0, C1, C2, K, ld, ds);
}
static void p_conv_silu3_bwd(void *dx, void *dw, const void *dy0, const void *dy1,
                             const void *dy2, const void *x, const void *w, int B, int T, int C0,
                             int C1, int C2, int K, size_t ld, const int32_t *ds) {
    TIMED(conv_silu3_bwd, 0, dx, dw, dy0, dy1, dy2, x, w, B, T, C0, C1, C2, K, ld, ds);
}
static void p_conv_silu3_l2_fwd(void *y0, void *y1, void *y2, void *rn0, void *rn1,
                                const void *x, const void *w, int B, int T, int C0, int C1,
                                int C2, int K, size_t ld, int nd, double eps, double s0,
                                double s1, const int32_t *ds) {
    TIMED(conv_silu3_l2_fwd, 0, y0, y1, y2, rn0, rn1, x, w, B, T, C0, C1, C2, K, ld, nd, eps, s0,
          s1, ds);
}
static void p_l2norm_fwd(void *y, void *rnorm, const void *x, size_t rows, int D, double eps,
                         double scale) {
    TIMED(l2norm_fwd, 0, y, rnorm, x, rows, D, eps, scale);
}
static void p_l2norm_bwd(void *dx, const void *dy, const void *x, const void *rnorm, size_t rows,
                         int D, double scale) {
    TIMED(l2norm_bwd, 0, dx, dy, x, rnorm, rows, D, scale);
}
static void p_gdn_gates_fwd(void *g, void *beta, const void *a, const void *b, const void *A_log,
                            const void *dt_bias, int N, int H, size_t ld, gdn_mode mode) {
    TIMED(gdn_gates_fwd, 0, g, beta, a, b, A_log, dt_bias, N, H, ld, mode);
}
static void p_gdn_gates_bwd(void *da, void *db, void *dA_log, void *ddt_bias, const void *dg,
                            const void *dbeta, const void *a, const void *b, const void *A_log,
                            const void *dt_bias, int N, int H, size_t ld, gdn_mode mode) {
    TIMED(gdn_gates_bwd, 0, da, db, dA_log, ddt_bias, dg, dbeta, a, b, A_log, dt_bias, N, H, ld,
          mode);
}
static void p_gated_rmsnorm_fwd(void *y, void *rstd, const void *x, const void *z, const void *w,
                                size_t rows, int D, int zh, size_t zld, double eps) {
    TIMED(gated_rmsnorm_fwd, 0, y, rstd, x, z, w, rows, D, zh, zld, eps);
}
static void p_gated_rmsnorm_bwd(void *dx, void *dz, void *dw, void *y, const void *dy,
                                const void *x, const void *z, const void *w, const void *rstd,
                                size_t rows, int D, int zh, size_t zld) {
    TIMED(gated_rmsnorm_bwd, 0, dx, dz, dw, y, dy, x, z, w, rstd, rows, D, zh, zld);
}
static void p_swiglu_fwd(void *h, const void *gate, const void *up, size_t rows, int cols,
                         size_t ld) {
    TIMED(swiglu_fwd, 0, h, gate, up, rows, cols, ld);
}
static void p_swiglu_bwd(void *dgate, void *dup, void *h, const void *dh, const void *gate,
                         const void *up, size_t rows, int cols, size_t ld) {
    TIMED(swiglu_bwd, 0, dgate, dup, h, dh, gate, up, rows, cols, ld);
}
static double p_crossentropy(void *logits, const int32_t *tgt, int N, int V, double scale) {
    double t0 = op_begin(), r = inner->crossentropy(logits, tgt, N, V, scale);
    op_end(SLOT_crossentropy, t0, 0, -1);
    return r;
}
static void p_crossentropy_defer(void *logits, const int32_t *tgt, int N, int V, double scale) {
    double t0 = op_begin();
    inner->crossentropy_defer(logits, tgt, N, V, scale);
    op_end(SLOT_crossentropy, t0, 0, -1);  // the same row as crossentropy
}
static double p_loss_collect(void) {
    double t0 = op_begin(), r = inner->loss_collect();
    op_end(SLOT_loss_collect, t0, 0, -1);
    return r;
}
static void p_dropout_fwd(void *y, const void *x, size_t n, double p, uint64_t seed) {
    TIMED(dropout_fwd, 0, y, x, n, p, seed);
}
static void p_dropout_bwd(void *dx, const void *dy, size_t n, double p, uint64_t seed) {
    TIMED(dropout_bwd, 0, dx, dy, n, p, seed);
}
static void p_rope_fwd(void *y, const void *x, int B, int T, int H, int D, double base,
                       const int32_t *ds) {
    TIMED(rope_fwd, 0, y, x, B, T, H, D, base, ds);
}
static void p_rope_bwd(void *dx, const void *dy, int B, int T, int H, int D, double base,
                       const int32_t *ds) {
    TIMED(rope_bwd, 0, dx, dy, B, T, H, D, base, ds);
}
static void p_attention_fwd(void *o, void *lse, const void *q, const void *k, const void *v, int B,
                            int T, int H, int D, int window, double scale, const int32_t *ds) {
    TIMED(attention_fwd, 0, o, lse, q, k, v, B, T, H, D, window, scale, ds);
}
static void p_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
                            const void *k, const void *v, const void *o, const void *lse, int B,
                            int T, int H, int D, int window, double scale, const int32_t *ds) {
    TIMED(attention_bwd, 0, dq, dk, dv, dout, q, k, v, o, lse, B, T, H, D, window, scale, ds);
}
static void p_gdn_fwd(const gdn_op *op) { TIMED(gdn_fwd, 0, op); }
static void p_gdn_bwd(const gdn_op *op) { TIMED(gdn_bwd, 0, op); }
static void p_adamw(void *p, void *master, const void *g, void *m, void *v, size_t n, double lr,
                    double b1, double b2, double eps, double wd, double bc1, double bc2,
                    double gscale) {
    TIMED(adamw, 0, p, master, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2, gscale);
}

static void p_adamw_multi(void *p, void *master, const void *g, void *m, void *v, size_t m_lo,
                          const be_adamw_seg *seg, int nseg, double lr, double b1, double b2,
                          double eps, double bc1, double bc2, double gscale) {
    TIMED(adamw_multi, 0, p, master, g, m, v, m_lo, seg, nseg, lr, b1, b2, eps, bc1, bc2, gscale);
}

const backend *backend_profiled(const backend *b) {
    if (inner == b) return &profiled;
    if (inner)
        gdn_die("backend_profiled: already wraps backend '%s' (one per process)", inner->name);
    if (!b->sync) gdn_die("backend_profiled: backend '%s' has no sync", b->name);
    inner = b;
    profiled = *b;  // name, elem, master, alloc/release/download/upload/sync pass through
#define WRAP(n) profiled.n = p_##n;
    PROFILE_OPS(WRAP)
#undef WRAP
    if (!b->adamw_multi) profiled.adamw_multi = NULL;  // optional: optim.c checks for NULL
    // optional, both or neither (model.c head_loss checks)
    profiled.crossentropy_defer = b->crossentropy_defer && b->loss_collect ? p_crossentropy_defer : NULL;
    if (!profiled.crossentropy_defer) profiled.loss_collect = NULL;
    return &profiled;
}

void profile_use_clock(const timeline_clock *c) {
    if (n_recs || op_open) gdn_die("profile_use_clock: called with ops in flight");
    for (size_t i = 0; i < n_made; i++) {
        clk->destroy(recs[i].e0);
        clk->destroy(recs[i].e1);
    }
    n_made = 0;
    clk = c;
}

void profile_reset(void) {
    resolve();  // the recorded times go with the counters below
    memset(slots, 0, sizeof slots);
    n_shapes = 0;
    gap_seconds = 0;
}

static int shape_by_time(const void *pa, const void *pb) {
    const shape_slot *a = pa, *b = pb;
    if (a->seconds != b->seconds) return a->seconds < b->seconds ? 1 : -1;
    if (a->slot != b->slot) return a->slot - b->slot;
    if (a->in != b->in) return a->in - b->in;
    return a->out != b->out ? a->out - b->out : a->N - b->N;
}

static int by_time(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    if (slots[a].seconds != slots[b].seconds) return slots[a].seconds < slots[b].seconds ? 1 : -1;
    return a - b;
}

void profile_print(FILE *f, double step_seconds, int steps) {
    resolve();
    int order[SLOT_COUNT], n = 0;
    double total = 0;
    for (int s = 0; s < SLOT_COUNT; s++) {
        if (slots[s].calls == 0) continue;
        order[n++] = s;
        total += slots[s].seconds;
    }
    qsort(order, (size_t)n, sizeof order[0], by_time);
    double ps = steps > 0 ? steps : 1;
    if (clk)
        fprintf(f, "profile: %d step%s on backend %s; each op timed by two device events on the "
                   "compute stream, no syncs:\nper-op times are the ops' device time inside a normal "
                   "step (an op that waits for the host\nwithin itself carries the wait).\n",
                steps, steps == 1 ? "" : "s", inner ? inner->name : "(none)");
    else
        fprintf(f, "profile: %d step%s on backend %s; each op timed between two syncs, so the device "
                   "runs serialised\n(no overlap between ops, launch latency included): per-op times "
                   "are what each op costs alone.\n",
                steps, steps == 1 ? "" : "s", inner ? inner->name : "(none)");
    fprintf(f, "%-18s %8s %11s %10s %7s %11s %10s\n", "op", "calls", "total ms", "ms/step",
            "% ops", "GFLOP/step", "GFLOP/s");
    for (int i = 0; i < n; i++) {
        const slot *s = &slots[order[i]];
        double pct = total > 0 ? 100 * s->seconds / total : 0.0;
        fprintf(f, "%-18s %8ld %11.3f %10.3f %6.1f%%", slot_name[order[i]], s->calls,
                1e3 * s->seconds, 1e3 * s->seconds / ps, pct);
        if (s->flops > 0)
            fprintf(f, " %11.6g %10.1f\n", s->flops / ps / 1e9,
                    s->seconds > 0 ? s->flops / s->seconds / 1e9 : 0.0);
        else
            fprintf(f, " %11s %10s\n", "-", "-");
    }
    fprintf(f, "%-18s %8s %11.3f %10.3f\n", "sum of ops", "", 1e3 * total, 1e3 * total / ps);
    if (clk)
        fprintf(f, "%-18s %8s %11.3f %10.3f  (one op's end to the next one's start)\n", "between ops",
                "", 1e3 * gap_seconds, 1e3 * gap_seconds / ps);
    if (step_seconds > 0) {
        double ops = total / ps;
        fprintf(f, "measured step %.3f ms: ops %.3f ms (%.1f%%), outside ops %.3f ms (%.1f%%: host "
                   "code, data, syncs, communication)\n",
                1e3 * step_seconds, 1e3 * ops, 100 * ops / step_seconds, 1e3 * (step_seconds - ops),
                100 * (step_seconds - ops) / step_seconds);
    }
    if (n_shapes == 0) return;
    shape_slot sorted[MAX_SHAPES];
    memcpy(sorted, shapes, (size_t)n_shapes * sizeof sorted[0]);
    qsort(sorted, (size_t)n_shapes, sizeof sorted[0], shape_by_time);
    fprintf(f, "\nmatmuls by shape (N x in -> out; linear_bwd = dx and dW):\n%-15s %8s %7s %8s %8s %10s %10s\n",
            "matmul", "N", "in", "out", "calls", "ms/step", "GFLOP/s");
    for (int i = 0; i < n_shapes; i++) {
        const shape_slot *s = &sorted[i];
        fprintf(f, "%-15s %8d %7d %8d %8ld %10.3f %10.1f\n", slot_name[s->slot], s->N, s->in, s->out,
                s->calls, 1e3 * s->seconds / ps, s->seconds > 0 ? s->flops / s->seconds / 1e9 : 0.0);
    }
}
