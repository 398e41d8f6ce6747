// test_ops_cpu.c — the float64 CPU ops other than attention and the gated delta rule:
// embedding, rmsnorm (and backend_cpu's residual add + rmsnorm: bitwise the separate ops),
// linear (OpenBLAS path and loop path), conv1d, conv_silu (fused; also bitwise the unfused
// pair), silu, swiglu, l2norm, gdn_gates, gated_rmsnorm, crossentropy, dropout, rope.
// For every op and variant: a central finite-difference check of every input and parameter
// gradient (loss L = sum(out * R), R random; tol 1e-6 norm-wise and per element), then
// forward values against hand-computed numbers, the += rule for parameter gradients, the
// in-place forms (crossentropy backward, rope), and the "untouched" contracts of gdn_gates.
#include "testutil.h"
#include "../src/bwd/bwd_cpu.h"
#include "../src/model/backend.h"

// ---- the loop path of linear, compiled here a second time with GDN_HAVE_CBLAS off and the
// public names renamed, so both paths are checked whatever the library was built with. -------
#ifdef GDN_HAVE_CBLAS
#define LIB_LINEAR_PATH "cblas_dgemm"
#undef GDN_HAVE_CBLAS
#else
#define LIB_LINEAR_PATH "loops"
#endif
#define linear_fwd_cpu linear_fwd_loops_cpu
#define linear_bwd_cpu linear_bwd_loops_cpu
#define linear_bwd_acc_cpu linear_bwd_acc_loops_cpu
#include "../src/fwd/linear.c"
#include "../src/bwd/linear.c"
#undef linear_fwd_cpu
#undef linear_bwd_cpu
#undef linear_bwd_acc_cpu

#define TOL 1e-6
#define SENTINEL 777.0

static rng_t R_;  // every random fill and every gc_check sample

static double *copy_of(const double *x, size_t n) {
    double *y = dalloc(n);
    memcpy(y, x, n * sizeof(double));
    return y;
}
static double *rnd(size_t n, double scale) {
    double *x = dalloc(n);
    fill_normal(x, n, &R_, scale);
    return x;
}
static void fill_const(double *x, size_t n, double v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}
// one pass/FAIL line for a condition that is not a relative error
static void check_true(const char *what, int ok) {
    printf("  %-60s %s\n", what, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}
static int all_equal(const double *x, size_t n, double v) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != v) return 0;
    return 1;
}
static double *zeros(size_t n) { return dalloc(n); }  // gdn_malloc zero-fills
// the gradient rule after a second identical backward: a parameter gradient doubled (+=),
// `once` is its value after the first call
static void check_doubled(const char *op, const char *name, const double *after,
                          const double *once, size_t n) {
    double *want = copy_of(once, n);
    for (size_t i = 0; i < n; i++) want[i] *= 2;
    char what[160];
    snprintf(what, sizeof what, "%s: backward twice -> d%s doubled (+=)", op, name);
    check_close(what, after, want, n, 1e-15);
    free(want);
}

// ================================= embedding =================================================
typedef struct { double *out, *wte, *R; const int32_t *tok; int N, d; } emb_ctx;
static double emb_loss(void *p) {
    emb_ctx *c = p;
    embedding_fwd_cpu(c->out, c->tok, c->wte, c->N, c->d);
    return dot(c->out, c->R, (size_t)c->N * c->d);
}
static void test_embedding(void) {
    gc_header("embedding");
    enum { V = 7, d = 5, N = 9 };
    const int32_t tok[N] = {3, 0, 6, 3, 3, 1, 6, 2, 5};  // repeats: dwte must accumulate
    emb_ctx c = {dalloc(N * d), rnd(V * d, 1), rnd(N * d, 1), tok, N, d};
    double *dwte = zeros(V * d);
    embedding_bwd_cpu(dwte, c.R, tok, N, d);
    gc_check("embedding", "wte", c.wte, V * d, dwte, emb_loss, &c, 0, TOL, &R_);
    double *once = copy_of(dwte, V * d);
    embedding_bwd_cpu(dwte, c.R, tok, N, d);
    check_doubled("embedding", "wte", dwte, once, V * d);
    free(once);
    embedding_fwd_cpu(c.out, tok, c.wte, N, d);
    int ok = 1;
    for (int n = 0; n < N; n++) ok &= memcmp(c.out + n * d, c.wte + tok[n] * d, d * sizeof(double)) == 0;
    check_true("embedding rows are copies of wte[tok]", ok);
    free(c.out); free(c.wte); free(c.R); free(dwte);
}

// ================================= rmsnorm ===================================================
typedef struct { double *y, *rstd, *x, *w, *R; int N, d; } rms_ctx;
static double rms_loss(void *p) {
    rms_ctx *c = p;
    rmsnorm_fwd_cpu(c->y, c->rstd, c->x, c->w, c->N, c->d, 1e-6);
    return dot(c->y, c->R, (size_t)c->N * c->d);
}
// acc = true: dx pre-filled with random values ends as prefill[i] + (the acc = false dx)[i], bit
// for bit (what a separate y += x add gave), and dw accumulates as with acc = false.
static void check_rmsnorm_acc(int N, int d) {
    const size_t n = (size_t)N * d;
    double *x = rnd(n, 1), *w = rnd(d, 1), *g = rnd(n, 1), *y = dalloc(n), *rstd = dalloc(N);
    for (int i = 0; i < d; i++) w[i] += 1.0;
    rmsnorm_fwd_cpu(y, rstd, x, w, N, d, 1e-6);
    double *dx = dalloc(n), *dw = zeros(d), *want = rnd(n, 1), *got = copy_of(want, n);
    double *dw_acc = zeros(d);
    rmsnorm_bwd_cpu(dx, dw, g, x, w, rstd, N, d, false);
    rmsnorm_bwd_cpu(got, dw_acc, g, x, w, rstd, N, d, true);
    for (size_t i = 0; i < n; i++) want[i] += dx[i];
    char what[96];
    snprintf(what, sizeof what, "rmsnorm N%d d%d acc: dx = prefill + (acc off) dx, bitwise", N, d);
    check_true(what, memcmp(got, want, n * sizeof(double)) == 0);
    snprintf(what, sizeof what, "rmsnorm N%d d%d acc: dw as with acc off, bitwise", N, d);
    check_true(what, memcmp(dw_acc, dw, d * sizeof(double)) == 0);
    free(x); free(w); free(g); free(y); free(rstd);
    free(dx); free(dw); free(want); free(got); free(dw_acc);
}

static void test_rmsnorm(void) {
    gc_header("rmsnorm");
    enum { N = 5, d = 7 };
    rms_ctx c = {dalloc(N * d), dalloc(N), rnd(N * d, 1), rnd(d, 1), rnd(N * d, 1), N, d};
    for (int i = 0; i < d; i++) c.w[i] += 1.0;
    double *rstd = dalloc(N), *dx = dalloc(N * d), *dw = zeros(d);
    rmsnorm_fwd_cpu(c.y, rstd, c.x, c.w, N, d, 1e-6);
    rmsnorm_bwd_cpu(dx, dw, c.R, c.x, c.w, rstd, N, d, false);
    gc_check("rmsnorm", "x", c.x, N * d, dx, rms_loss, &c, 0, TOL, &R_);
    gc_check("rmsnorm", "w", c.w, d, dw, rms_loss, &c, 0, TOL, &R_);
    double *once = copy_of(dw, d), *dx_once = copy_of(dx, N * d);
    rmsnorm_bwd_cpu(dx, dw, c.R, c.x, c.w, rstd, N, d, false);
    check_doubled("rmsnorm", "w", dw, once, d);
    check_close("rmsnorm: backward twice -> dx unchanged (=)", dx, dx_once, N * d, 0);
    free(once); free(dx_once);
    check_rmsnorm_acc(N, d);
    check_rmsnorm_acc(600, 1000);  // N d >= cpu_min_work_flat: the threaded path

    // constant row c, eps = 0: rstd = 1/|c|, y = sign(c) w exactly
    double xc[2 * d], y[2 * d], want[2 * d], rs[2];
    for (int i = 0; i < d; i++) {
        xc[i] = 0.5; xc[d + i] = -3.0;
        want[i] = c.w[i]; want[d + i] = -c.w[i];
    }
    rmsnorm_fwd_cpu(y, rs, xc, c.w, 2, d, 0.0);
    check_close("rmsnorm of constant rows 0.5, -3 (eps 0) = +-w", y, want, 2 * d, 1e-15);
    double rs_want[2] = {2.0, 1.0 / 3.0};
    check_close("rmsnorm rstd of those rows = 2, 1/3", rs, rs_want, 2, 1e-15);
    free(c.y); free(c.rstd); free(c.x); free(c.w); free(c.R); free(rstd); free(dx); free(dw);
}

// ============================ add + rmsnorm (backend_cpu) =====================================
// x_out = x_in + branch, then y, rstd = rmsnorm(x_out): bitwise the sum x_in[i] + branch[i]
// (what copy then add stored) and rmsnorm_fwd_cpu of it, out of place (x_in untouched) and in
// place (x_out == x_in). The model's CPU checkpoints depend on it.
static void check_add_rmsnorm(int N, int d) {
    const size_t n = (size_t)N * d;
    double *x = rnd(n, 1), *br = rnd(n, 1), *w = rnd(d, 1);
    for (int i = 0; i < d; i++) w[i] += 1.0;
    double *sum = dalloc(n), *y = dalloc(n), *rstd = dalloc(N);
    for (size_t i = 0; i < n; i++) sum[i] = x[i] + br[i];
    rmsnorm_fwd_cpu(y, rstd, sum, w, N, d, 1e-6);
    double *x0 = copy_of(x, n), *xo = dalloc(n), *y2 = dalloc(n), *r2 = dalloc(N);
    fill_const(xo, n, SENTINEL);
    fill_const(y2, n, SENTINEL);
    fill_const(r2, N, SENTINEL);
    backend_cpu.add_rmsnorm_fwd(xo, y2, r2, x, br, w, N, d, 1e-6);
    char what[96];
    snprintf(what, sizeof what, "add_rmsnorm N%d d%d = add, then rmsnorm (bitwise)", N, d);
    check_true(what, memcmp(xo, sum, n * sizeof(double)) == 0 &&
                         memcmp(y2, y, n * sizeof(double)) == 0 &&
                         memcmp(r2, rstd, N * sizeof(double)) == 0 &&
                         memcmp(x, x0, n * sizeof(double)) == 0);
    fill_const(y2, n, SENTINEL);
    fill_const(r2, N, SENTINEL);
    backend_cpu.add_rmsnorm_fwd(x, y2, r2, x, br, w, N, d, 1e-6);  // in place
    snprintf(what, sizeof what, "add_rmsnorm N%d d%d in place (x_out == x_in), bitwise", N, d);
    check_true(what, memcmp(x, sum, n * sizeof(double)) == 0 &&
                         memcmp(y2, y, n * sizeof(double)) == 0 &&
                         memcmp(r2, rstd, N * sizeof(double)) == 0);
    free(x); free(br); free(w); free(sum); free(y); free(rstd);
    free(x0); free(xo); free(y2); free(r2);
}

static void test_add_rmsnorm(void) {
    gc_header("add + rmsnorm (backend_cpu)");
    check_add_rmsnorm(5, 7);
    check_add_rmsnorm(600, 1000);  // N d >= cpu_min_work_flat: the threaded add
}

// ================================= linear ====================================================
typedef void (*lin_fwd_fn)(double *, const double *, const double *, const double *, int, int, int);
typedef void (*lin_bwd_fn)(double *, double *, double *, const double *, const double *,
                           const double *, int, int, int);
typedef struct { lin_fwd_fn fwd; double *y, *x, *W, *b, *R; int N, in, out; } lin_ctx;
static double lin_loss(void *p) {
    lin_ctx *c = p;
    c->fwd(c->y, c->x, c->W, c->b, c->N, c->in, c->out);
    return dot(c->y, c->R, (size_t)c->N * c->out);
}
static void test_linear(void) {
    gc_header("linear (library path: " LIB_LINEAR_PATH "; loop path compiled into this test)");
    enum { N = 5, in = 6, out = 4 };
    const struct { const char *name; lin_fwd_fn f; lin_bwd_fn b; } path[2] = {
        {"linear[lib:" LIB_LINEAR_PATH "]", linear_fwd_cpu, linear_bwd_cpu},
        {"linear[copy:loops]", linear_fwd_loops_cpu, linear_bwd_loops_cpu}};
    double *x = rnd(N * in, 1), *W = rnd(out * in, 1), *b = rnd(out, 1), *R = rnd(N * out, 1);
    double *y = dalloc(N * out);
    for (int pi = 0; pi < 2; pi++)
        for (int hb = 0; hb < 2; hb++) {
            char op[64];
            snprintf(op, sizeof op, "%s %s", path[pi].name, hb ? "bias" : "nobias");
            lin_ctx c = {path[pi].f, y, x, W, hb ? b : NULL, R, N, in, out};
            double *dx = dalloc(N * in), *dW = zeros(out * in), *db = zeros(out);
            path[pi].b(dx, dW, hb ? db : NULL, R, x, W, N, in, out);
            gc_check(op, "x", x, N * in, dx, lin_loss, &c, 0, TOL, &R_);
            gc_check(op, "W", W, out * in, dW, lin_loss, &c, 0, TOL, &R_);
            if (hb) gc_check(op, "b", b, out, db, lin_loss, &c, 0, TOL, &R_);
            free(dx); free(dW); free(db);
        }

    // both paths agree with each other
    double *y2 = dalloc(N * out), *dx1 = dalloc(N * in), *dx2 = dalloc(N * in);
    double *dW1 = zeros(out * in), *dW2 = zeros(out * in), *db1 = zeros(out), *db2 = zeros(out);
    linear_fwd_cpu(y, x, W, b, N, in, out);
    linear_fwd_loops_cpu(y2, x, W, b, N, in, out);
    check_close("linear y: library path vs loop path", y, y2, N * out, 1e-14);
    linear_bwd_cpu(dx1, dW1, db1, R, x, W, N, in, out);
    linear_bwd_loops_cpu(dx2, dW2, db2, R, x, W, N, in, out);
    check_close("linear dx: library path vs loop path", dx1, dx2, N * in, 1e-14);
    check_close("linear dW: library path vs loop path", dW1, dW2, out * in, 1e-14);
    check_close("linear db: library path vs loop path", db1, db2, out, 1e-14);

    // the gradient rule: a second backward adds to dW, db (+=) and overwrites dx (=)
    for (int pi = 0; pi < 2; pi++) {
        double *dxa = dalloc(N * in), *dWa = zeros(out * in), *dba = zeros(out);
        path[pi].b(dxa, dWa, dba, R, x, W, N, in, out);
        double *dx_once = copy_of(dxa, N * in), *dW2x = copy_of(dWa, out * in), *db2x = copy_of(dba, out);
        for (int i = 0; i < out * in; i++) dW2x[i] *= 2;
        for (int i = 0; i < out; i++) db2x[i] *= 2;
        path[pi].b(dxa, dWa, dba, R, x, W, N, in, out);
        char what[96];
        snprintf(what, sizeof what, "%s: backward twice -> dW doubled (+=)", path[pi].name);
        check_close(what, dWa, dW2x, out * in, 1e-15);
        snprintf(what, sizeof what, "%s: backward twice -> db doubled (+=)", path[pi].name);
        check_close(what, dba, db2x, out, 1e-15);
        snprintf(what, sizeof what, "%s: backward twice -> dx unchanged (=)", path[pi].name);
        check_close(what, dxa, dx_once, N * in, 0);
        free(dxa); free(dWa); free(dba); free(dx_once); free(dW2x); free(db2x);
    }

    // the accumulating backward: dx += dy W (what the model uses for q/k/v/... reading one input)
    lin_bwd_fn acc[2] = {linear_bwd_acc_cpu, linear_bwd_acc_loops_cpu};
    for (int pi = 0; pi < 2; pi++) {
        double *dx0 = rnd(N * in, 1.0), *dWa = zeros(out * in), *dWb = zeros(out * in);  // dx0: a running sum
        double *dxo = dalloc(N * in);
        double *dxa = copy_of(dx0, N * in);
        acc[pi](dxa, dWa, NULL, R, x, W, N, in, out);
        path[pi].b(dxo, dWb, NULL, R, x, W, N, in, out);
        for (int i = 0; i < N * in; i++) dxo[i] += dx0[i];
        char what[96];
        snprintf(what, sizeof what, "%s: accumulating backward, dx == dx0 + dy W", path[pi].name);
        check_close(what, dxa, dxo, N * in, 1e-14);
        snprintf(what, sizeof what, "%s: accumulating backward, dW as the plain one", path[pi].name);
        check_close(what, dWa, dWb, out * in, 0);
        free(dx0); free(dWa); free(dWb); free(dxo); free(dxa);
    }

    // hand value: x = (1, 2), W = [[1,0],[0,1],[1,1]], b = (0.5, 0, -1) -> y = (1.5, 2, 2)
    const double hx[2] = {1, 2}, hW[6] = {1, 0, 0, 1, 1, 1}, hbias[3] = {0.5, 0, -1};
    const double hy[3] = {1.5, 2, 2};
    double yy[3];
    linear_fwd_cpu(yy, hx, hW, hbias, 1, 2, 3);
    check_close("linear hand example, library path", yy, hy, 3, 1e-15);
    linear_fwd_loops_cpu(yy, hx, hW, hbias, 1, 2, 3);
    check_close("linear hand example, loop path", yy, hy, 3, 1e-15);
    free(x); free(W); free(b); free(R); free(y); free(y2); free(dx1); free(dx2);
    free(dW1); free(dW2); free(db1); free(db2);
}

// ================================= conv1d ====================================================
typedef struct { double *y, *x, *w, *R; int B, T, C, K; } conv_ctx;
static double conv_loss(void *p) {
    conv_ctx *c = p;
    conv1d_fwd_cpu(c->y, c->x, c->w, c->B, c->T, c->C, c->K);
    return dot(c->y, c->R, (size_t)c->B * c->T * c->C);
}
static void test_conv1d(void) {
    gc_header("conv1d (causal depthwise)");
    const int shapes[][4] = {{2, 7, 3, 4}, {2, 1, 3, 4}, {2, 3, 3, 4}, {2, 7, 3, 1}, {1, 1, 2, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], K = shapes[s][3];
        size_t n = (size_t)B * T * C;
        conv_ctx c = {dalloc(n), rnd(n, 1), rnd(C * K, 1), rnd(n, 1), B, T, C, K};
        double *dx = dalloc(n), *dw = zeros(C * K);
        conv1d_bwd_cpu(dx, dw, c.R, c.x, c.w, B, T, C, K);
        char op[64];
        snprintf(op, sizeof op, "conv1d B%d T%d C%d K%d", B, T, C, K);
        gc_check(op, "x", c.x, n, dx, conv_loss, &c, 0, TOL, &R_);
        gc_check(op, "w", c.w, C * K, dw, conv_loss, &c, 0, TOL, &R_);
        if (s == 0) {
            double *once = copy_of(dw, C * K), *dx_once = copy_of(dx, n);
            conv1d_bwd_cpu(dx, dw, c.R, c.x, c.w, B, T, C, K);
            check_doubled(op, "w", dw, once, C * K);
            check_close("conv1d: backward twice -> dx unchanged (=)", dx, dx_once, n, 0);
            free(once); free(dx_once);
        }
        free(c.y); free(c.x); free(c.w); free(c.R); free(dx); free(dw);
    }
    // hand value, one channel, x = 1,2,3, w = (1,10,100,1000): tap K-1 is the current token
    const double x[3] = {1, 2, 3}, w[4] = {1, 10, 100, 1000}, want[3] = {1000, 2100, 3210};
    double y[3];
    conv1d_fwd_cpu(y, x, w, 1, 3, 1, 4);
    check_close("conv1d K4 on (1,2,3), w (1,10,100,1000) = (1000,2100,3210)", y, want, 3, 0);
    // two sequences never mix: the second starts from zero history
    const double x2[4] = {1, 2, 5, 7}, w2[2] = {10, 1}, want2[4] = {1, 12, 5, 57};
    double y2[4];
    conv1d_fwd_cpu(y2, x2, w2, 2, 2, 1, 2);
    check_close("conv1d B2 T2 K2: no leak across sequences", y2, want2, 4, 0);
}

// ================================= conv_silu (conv1d then SiLU, fused) =======================
static double conv_silu_loss(void *p) {
    conv_ctx *c = p;
    conv_silu_fwd_cpu(c->y, c->x, c->w, c->B, c->T, c->C, c->K, c->C);
    return dot(c->y, c->R, (size_t)c->B * c->T * c->C);
}
static void test_conv_silu(void) {
    gc_header("conv_silu (causal depthwise conv1d then SiLU, fused)");
    const int shapes[][4] = {{2, 7, 3, 4}, {2, 1, 3, 4}, {2, 3, 3, 4}, {1, 6, 2, 3},
                             {2, 7, 3, 2}, {2, 7, 3, 1}, {1, 1, 2, 1}, {3, 5, 4, 4}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], K = shapes[s][3];
        size_t n = (size_t)B * T * C, nw = (size_t)C * K;
        conv_ctx c = {dalloc(n), rnd(n, 1), rnd(nw, 1), rnd(n, 1), B, T, C, K};
        char op[64], what[128];
        snprintf(op, sizeof op, "conv_silu B%d T%d C%d K%d", B, T, C, K);
        // the unfused pair: conv1d, silu; silu_bwd, conv1d_bwd
        double *pre = dalloc(n), *y_ref = dalloc(n), *dpre = dalloc(n), *dx_ref = dalloc(n);
        double *dw_ref = rnd(nw, 1), *dw = copy_of(dw_ref, nw), *dx = dalloc(n);
        conv1d_fwd_cpu(pre, c.x, c.w, B, T, C, K);
        silu_fwd_cpu(y_ref, pre, n);
        silu_bwd_cpu(dpre, c.R, pre, n);
        conv1d_bwd_cpu(dx_ref, dw_ref, dpre, c.x, c.w, B, T, C, K);
        conv_silu_fwd_cpu(c.y, c.x, c.w, B, T, C, K, C);
        conv_silu_bwd_cpu(dx, dw, c.R, c.x, c.w, B, T, C, K, C);
        snprintf(what, sizeof what, "%s: y, dx, dw (+=) bitwise the unfused ops", op);
        check_true(what, memcmp(c.y, y_ref, n * sizeof(double)) == 0 &&
                             memcmp(dx, dx_ref, n * sizeof(double)) == 0 &&
                             memcmp(dw, dw_ref, nw * sizeof(double)) == 0);
        memset(dw, 0, nw * sizeof(double));
        conv_silu_bwd_cpu(dx, dw, c.R, c.x, c.w, B, T, C, K, C);
        gc_check(op, "x", c.x, n, dx, conv_silu_loss, &c, 0, TOL, &R_);
        gc_check(op, "w", c.w, nw, dw, conv_silu_loss, &c, 0, TOL, &R_);
        if (s == 0) {
            double *once = copy_of(dw, nw), *dx_once = copy_of(dx, n), *io = copy_of(c.R, n);
            conv_silu_bwd_cpu(dx, dw, c.R, c.x, c.w, B, T, C, K, C);
            check_doubled(op, "w", dw, once, nw);
            check_close("conv_silu: backward twice -> dx unchanged (=)", dx, dx_once, n, 0);
            memset(dw, 0, nw * sizeof(double));
            conv_silu_bwd_cpu(io, dw, io, c.x, c.w, B, T, C, K, C);  // dx over dy
            check_true("conv_silu: backward with dx == dy gives the same dx",
                       memcmp(io, dx_once, n * sizeof(double)) == 0);
            free(once); free(dx_once); free(io);
        }
        {
            // x, dx as columns [2, 2 + C) of rows of ld = C + 5 (the model's fused input
            // projection): y, dx, dw bitwise the packed ones, dx's other columns untouched
            const size_t ld = (size_t)C + 5, rows = (size_t)B * T;
            double *xw = dalloc(rows * ld), *dxw = dalloc(rows * ld), *y2 = dalloc(n), *dw2 = zeros(nw);
            double *dw1 = zeros(nw);
            fill_const(xw, rows * ld, SENTINEL);
            fill_const(dxw, rows * ld, SENTINEL);
            for (size_t r = 0; r < rows; r++)
                memcpy(xw + r * ld + 2, c.x + r * C, (size_t)C * sizeof(double));
            conv_silu_fwd_cpu(y2, xw + 2, c.w, B, T, C, K, ld);
            conv_silu_bwd_cpu(dxw + 2, dw2, c.R, xw + 2, c.w, B, T, C, K, ld);
            conv_silu_bwd_cpu(dx, dw1, c.R, c.x, c.w, B, T, C, K, C);
            bool same = memcmp(y2, y_ref, n * sizeof(double)) == 0 && memcmp(dw2, dw1, nw * sizeof(double)) == 0;
            bool untouched = true;
            for (size_t r = 0; r < rows; r++)
                for (size_t j = 0; j < ld; j++) {
                    if (j >= 2 && j < 2 + (size_t)C)
                        same &= dxw[r * ld + j] == dx[r * C + j - 2];
                    else
                        untouched &= dxw[r * ld + j] == SENTINEL;
                }
            snprintf(what, sizeof what, "%s: strided x, dx (ld C+5) = packed, bitwise", op);
            check_true(what, same);
            snprintf(what, sizeof what, "%s: strided dx writes only its columns", op);
            check_true(what, untouched);
            free(xw); free(dxw); free(y2); free(dw2); free(dw1);
        }
        free(c.y); free(c.x); free(c.w); free(c.R); free(pre); free(y_ref); free(dpre);
        free(dx_ref); free(dw_ref); free(dw); free(dx);
    }
}

// ================================= silu, swiglu ==============================================
typedef struct { double *y, *x, *u, *R; size_t n; } ew_ctx;
static double silu_loss(void *p) {
    ew_ctx *c = p;
    silu_fwd_cpu(c->y, c->x, c->n);
    return dot(c->y, c->R, c->n);
}
static double swiglu_loss(void *p) {
    ew_ctx *c = p;
    swiglu_fwd_cpu(c->y, c->x, c->u, 1, (int)c->n, c->n);
    return dot(c->y, c->R, c->n);
}
// The row-strided form (model.c's fused gate/up projection: gate = columns [0, C) and up =
// [C, 2C) of rows of stride ld, here 2C + 1 with a spare column): bitwise the packed form on
// copies of the same values, dgate and dup in the same columns, the other columns untouched.
static void test_swiglu_strided(void) {
    enum { R = 5, C = 7, LD = 2 * C + 1 };
    rng_t r;
    rng_init(&r, 17, 0);
    double *gu = dalloc(R * LD), *g = dalloc(R * C), *u = dalloc(R * C), *dh = dalloc(R * C);
    double *h0 = dalloc(R * C), *h1 = dalloc(R * C), *dg0 = dalloc(R * C), *du0 = dalloc(R * C);
    double *dgu = dalloc(R * LD);
    fill_normal(gu, R * LD, &r, 3.0);
    fill_normal(dh, R * C, &r, 1.0);
    for (int i = 0; i < R * LD; i++) dgu[i] = 1e300;  // sentinels: only 2C columns a row written
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) g[i * C + j] = gu[i * LD + j], u[i * C + j] = gu[i * LD + C + j];
    swiglu_fwd_cpu(h0, g, u, R, C, C);
    swiglu_fwd_cpu(h1, gu, gu + C, R, C, LD);
    swiglu_bwd_cpu(dg0, du0, dh, g, u, R, C, C);
    swiglu_bwd_cpu(dgu, dgu + C, dh, gu, gu + C, R, C, LD);
    size_t nh = 0, nd = 0, nt = 0;
    for (int i = 0; i < R; i++) {
        for (int j = 0; j < C; j++) {
            nh += memcmp(&h0[i * C + j], &h1[i * C + j], sizeof(double)) != 0;
            nd += memcmp(&dg0[i * C + j], &dgu[i * LD + j], sizeof(double)) != 0;
            nd += memcmp(&du0[i * C + j], &dgu[i * LD + C + j], sizeof(double)) != 0;
        }
        nt += dgu[i * LD + 2 * C] != 1e300;
    }
    char det[64];
    snprintf(det, sizeof det, "%zu of %d differ", nh, R * C);
    check_row(nh == 0, "swiglu strided (ld 2C+1): h bitwise the packed form", det);
    snprintf(det, sizeof det, "%zu of %d differ", nd, 2 * R * C);
    check_row(nd == 0, "swiglu strided: dgate, dup bitwise the packed form", det);
    snprintf(det, sizeof det, "%zu of %d written", nt, R);
    check_row(nt == 0, "swiglu strided: the spare column untouched", det);
    free(gu); free(g); free(u); free(dh); free(h0); free(h1); free(dg0); free(du0); free(dgu);
}

static void test_activations(void) {
    gc_header("silu, swiglu");
    enum { n = 13 };
    ew_ctx c = {dalloc(n), rnd(n, 3), rnd(n, 1), rnd(n, 1), n};
    c.x[0] = -40; c.x[1] = 35;  // far tails of the sigmoid
    double *dx = dalloc(n), *du = dalloc(n);
    silu_bwd_cpu(dx, c.R, c.x, n);
    gc_check("silu", "x", c.x, n, dx, silu_loss, &c, 0, TOL, &R_);
    swiglu_bwd_cpu(dx, du, c.R, c.x, c.u, 1, n, n);
    gc_check("swiglu", "gate", c.x, n, dx, swiglu_loss, &c, 0, TOL, &R_);
    gc_check("swiglu", "up", c.u, n, du, swiglu_loss, &c, 0, TOL, &R_);

    const double hx[4] = {0, 1, -1, -800};
    const double want[4] = {0, 0.7310585786300049, -0.2689414213699951, 0};
    double y[4];
    silu_fwd_cpu(y, hx, 4);
    check_close("silu(0, 1, -1, -800) = (0, 0.73106, -0.26894, -0)", y, want, 4, 1e-15);
    const double g[2] = {1, -1}, up[2] = {2, -3}, hwant[2] = {1.4621171572600098, 0.8068242641099853};
    swiglu_fwd_cpu(y, g, up, 2, 1, 1);
    check_close("swiglu(gate 1, up 2), (gate -1, up -3)", y, hwant, 2, 1e-15);
    free(c.y); free(c.x); free(c.u); free(c.R); free(dx); free(du);
    test_swiglu_strided();
}

// ================================= l2norm ====================================================
typedef struct { double *y, *rn, *x, *R; size_t rows; int D; double scale; } l2_ctx;
static double l2_loss(void *p) {
    l2_ctx *c = p;
    l2norm_fwd_cpu(c->y, c->rn, c->x, c->rows, c->D, 1e-6, c->scale);
    return dot(c->y, c->R, c->rows * c->D);
}
static void test_l2norm(void) {
    gc_header("l2norm");
    enum { rows = 6, D = 5 };
    const double scales[2] = {1.0, 1.0 / sqrt(5.0)};
    for (int s = 0; s < 2; s++) {
        l2_ctx c = {dalloc(rows * D), dalloc(rows), rnd(rows * D, 1), rnd(rows * D, 1), rows, D, scales[s]};
        double *rn = dalloc(rows), *y = dalloc(rows * D), *dx = dalloc(rows * D);
        l2norm_fwd_cpu(y, rn, c.x, rows, D, 1e-6, c.scale);
        l2norm_bwd_cpu(dx, c.R, y, rn, rows, D, c.scale);  // from the output y
        char op[64];
        snprintf(op, sizeof op, "l2norm scale %.4f", c.scale);
        gc_check(op, "x", c.x, rows * D, dx, l2_loss, &c, 0, TOL, &R_);
        free(c.y); free(c.rn); free(c.x); free(c.R); free(rn); free(y); free(dx);
    }
    const double x[2] = {3, 4}, want[2] = {0.3, 0.4};
    double y[2], rn;
    l2norm_fwd_cpu(y, &rn, x, 1, 2, 0.0, 0.5);
    check_close("l2norm (3,4), eps 0, scale 0.5 = (0.3, 0.4)", y, want, 2, 1e-15);
    const double rn_want = 0.2;
    check_close("l2norm rnorm of (3,4) = 1/5", &rn, &rn_want, 1, 1e-15);
}

// ================================= gdn_gates =================================================
typedef struct { double *g, *beta, *a, *b, *A_log, *dt_bias, *Rg, *Rb; int N, H; gdn_mode m; } gate_ctx;
static double gate_loss(void *p) {
    gate_ctx *c = p;
    size_t n = (size_t)c->N * c->H;
    gdn_gates_fwd_cpu(c->g, c->beta, c->a, c->b, c->A_log, c->dt_bias, c->N, c->H, c->H, c->m);
    return dot(c->g, c->Rg, n) + (c->m.delta ? dot(c->beta, c->Rb, n) : 0.0);
}
static void test_gdn_gates(void) {
    gc_header("gdn_gates");
    enum { N = 6, H = 3, NH = N * H };
    double *zero = zeros(NH);
    for (int v = 0; v < 8; v++) {
        gdn_mode m = {.gate = v & 1, .delta = (v >> 1) & 1, .neg_eigval = (v >> 2) & 1};
        gate_ctx c = {dalloc(NH), dalloc(NH), rnd(NH, 2), rnd(NH, 2), dalloc(H), rnd(H, 1),
                      rnd(NH, 1), rnd(NH, 1), N, H, m};
        fill_uniform(c.A_log, H, &R_, 1, 16);
        for (int h = 0; h < H; h++) c.A_log[h] = log(c.A_log[h]);
        c.a[0] = 30.0 - c.dt_bias[0];   // u = 30 > 20: softplus(u) = u, slope 1
        c.a[1] = -40.0 - c.dt_bias[1];  // u = -40: softplus ~ 4e-18
        double *da = dalloc(NH), *db = dalloc(NH), *dA = dalloc(H), *ddt = dalloc(H);
        fill_const(da, NH, SENTINEL);
        fill_const(db, NH, SENTINEL);
        fill_const(c.beta, NH, SENTINEL);
        fill_const(dA, H, m.gate ? 0.0 : SENTINEL);
        fill_const(ddt, H, m.gate ? 0.0 : SENTINEL);
        // beta, dbeta and db are real buffers even with delta off: "not written" is tested
        gdn_gates_fwd_cpu(c.g, c.beta, c.a, c.b, c.A_log, c.dt_bias, N, H, H, m);
        gdn_gates_bwd_cpu(da, db, dA, ddt, c.Rg, c.Rb, c.a, c.b, c.A_log, c.dt_bias, N, H, H, m);
        char op[64];
        snprintf(op, sizeof op, "gdn_gates gate%d delta%d neg%d", m.gate, m.delta, m.neg_eigval);
        // with the gate off (delta off) the loss does not depend on a, A_log, dt_bias (b):
        // their finite differences must be exactly the zero the untouched buffers stand for
        gc_check(op, "a", c.a, NH, m.gate ? da : zero, gate_loss, &c, 0, TOL, &R_);
        gc_check(op, "A_log", c.A_log, H, m.gate ? dA : zero, gate_loss, &c, 0, TOL, &R_);
        gc_check(op, "dt_bias", c.dt_bias, H, m.gate ? ddt : zero, gate_loss, &c, 0, TOL, &R_);
        gc_check(op, "b", c.b, NH, m.delta ? db : zero, gate_loss, &c, 0, TOL, &R_);
        if (m.gate) {
            double *dA1 = copy_of(dA, H), *ddt1 = copy_of(ddt, H);
            gdn_gates_bwd_cpu(da, db, dA, ddt, c.Rg, c.Rb, c.a, c.b, c.A_log, c.dt_bias, N, H, H, m);
            check_doubled(op, "A_log", dA, dA1, H);
            check_doubled(op, "dt_bias", ddt, ddt1, H);
            free(dA1); free(ddt1);
        }
        if (!m.gate) {
            check_true("gate off: g = 0", all_equal(c.g, NH, 0.0));
            check_true("gate off: da, dA_log, ddt_bias untouched",
                       all_equal(da, NH, SENTINEL) && all_equal(dA, H, SENTINEL) &&
                           all_equal(ddt, H, SENTINEL));
        } else {
            double want = -exp(c.A_log[0]) * 30.0, want1 = -exp(c.A_log[1]) * log1p(exp(-40.0));
            check_true("gate on: g at u = 30 is -exp(A_log) * 30, at u = -40 ~ -4e-18*exp(A_log)",
                       fabs(c.g[0] - want) <= 1e-15 * fabs(want) && fabs(c.g[1] - want1) <= 1e-15 * fabs(want1));
        }
        if (!m.delta) {
            check_true("delta off: beta not written, db untouched",
                       all_equal(c.beta, NH, SENTINEL) && all_equal(db, NH, SENTINEL));
        } else {
            const double bb[2] = {0.0, 1.0};
            double beta2[2], g2[2];
            const double aa[2] = {0, 0}, Al[2] = {0, 0}, dtb[2] = {0, 0};
            gdn_gates_fwd_cpu(g2, beta2, aa, bb, Al, dtb, 1, 2, 2, m);
            double c2 = m.neg_eigval ? 2.0 : 1.0;
            const double want[2] = {c2 * 0.5, c2 * 0.7310585786300049};
            check_close(m.neg_eigval ? "beta(b = 0, 1) = 2 sigmoid = (1, 1.46212)"
                                     : "beta(b = 0, 1) = sigmoid = (0.5, 0.73106)",
                        beta2, want, 2, 1e-15);
        }
        {
            // a, b (and da, db) as columns of a wider row (ld = 2H + 5, the model's fused
            // projection): the same numbers as packed, the other columns untouched
            const int ld = 2 * H + 5;
            double *wide = dalloc((size_t)N * ld), *dwide = dalloc((size_t)N * ld);
            double *g2 = dalloc(NH), *beta2 = dalloc(NH), *dA2 = zeros(H), *ddt2 = zeros(H);
            double *dA0 = zeros(H), *ddt0 = zeros(H);
            fill_const(wide, (size_t)N * ld, SENTINEL);
            fill_const(dwide, (size_t)N * ld, SENTINEL);
            for (int n = 0; n < N; n++)
                for (int h = 0; h < H; h++) {
                    wide[n * ld + 1 + h] = c.a[n * H + h];
                    wide[n * ld + 1 + H + h] = c.b[n * H + h];
                }
            gdn_gates_fwd_cpu(g2, beta2, wide + 1, wide + 1 + H, c.A_log, c.dt_bias, N, H, ld, m);
            gdn_gates_fwd_cpu(c.g, c.beta, c.a, c.b, c.A_log, c.dt_bias, N, H, H, m);
            gdn_gates_bwd_cpu(m.gate ? dwide + 1 : NULL, m.delta ? dwide + 1 + H : NULL, dA2, ddt2,
                              c.Rg, c.Rb, wide + 1, wide + 1 + H, c.A_log, c.dt_bias, N, H, ld, m);
            gdn_gates_bwd_cpu(da, db, dA0, ddt0, c.Rg, c.Rb, c.a, c.b, c.A_log, c.dt_bias, N, H, H, m);
            bool same = all_equal(g2, NH, 0.0) == all_equal(c.g, NH, 0.0), untouched = true;
            for (int i = 0; i < NH; i++) {
                same &= g2[i] == c.g[i] && (!m.delta || beta2[i] == c.beta[i]);
                int n = i / H, h = i % H;
                same &= !m.gate || dwide[n * ld + 1 + h] == da[i];
                same &= !m.delta || dwide[n * ld + 1 + H + h] == db[i];
            }
            for (int h = 0; h < H; h++) same &= dA2[h] == dA0[h] && ddt2[h] == ddt0[h];
            for (int n = 0; n < N; n++)
                for (int j = 0; j < ld; j++) {
                    bool mine = (m.gate && j >= 1 && j < 1 + H) || (m.delta && j >= 1 + H && j < 1 + 2 * H);
                    if (!mine) untouched &= dwide[n * ld + j] == SENTINEL;
                }
            char what[160];
            snprintf(what, sizeof what, "%s: strided a, b, da, db (ld %d) = packed, bitwise", op, ld);
            check_true(what, same);
            snprintf(what, sizeof what, "%s: strided da, db write only their columns", op);
            check_true(what, untouched);
            free(wide); free(dwide); free(g2); free(beta2); free(dA2); free(ddt2); free(dA0); free(ddt0);
        }
        free(c.g); free(c.beta); free(c.a); free(c.b); free(c.A_log); free(c.dt_bias);
        free(c.Rg); free(c.Rb); free(da); free(db); free(dA); free(ddt);
    }
    free(zero);
}

// ================================= gated_rmsnorm =============================================
typedef struct { double *y, *rstd, *x, *z, *w, *R; size_t rows; int D; } grms_ctx;
static double grms_loss(void *p) {
    grms_ctx *c = p;
    gated_rmsnorm_fwd_cpu(c->y, c->rstd, c->x, c->z, c->w, c->rows, c->D, 1, c->D, 1e-6);
    return dot(c->y, c->R, c->rows * c->D);
}
static void test_gated_rmsnorm(void) {
    gc_header("gated_rmsnorm");
    enum { rows = 6, D = 8 };
    for (int gated = 0; gated < 2; gated++) {
        grms_ctx c = {dalloc(rows * D), dalloc(rows), rnd(rows * D, 1), gated ? rnd(rows * D, 2) : NULL,
                      rnd(D, 0.5), rnd(rows * D, 1), rows, D};
        for (int i = 0; i < D; i++) c.w[i] += 1.0;
        double *rstd = dalloc(rows), *dx = dalloc(rows * D), *dz = dalloc(rows * D), *dw = zeros(D);
        gated_rmsnorm_fwd_cpu(c.y, rstd, c.x, c.z, c.w, rows, D, 1, D, 1e-6);
        gated_rmsnorm_bwd_cpu(dx, gated ? dz : NULL, dw, c.R, c.x, c.z, c.w, rstd, rows, D, 1, D);
        const char *op = gated ? "gated_rmsnorm z" : "gated_rmsnorm z=NULL";
        gc_check(op, "x", c.x, rows * D, dx, grms_loss, &c, 0, TOL, &R_);
        if (gated) gc_check(op, "z", c.z, rows * D, dz, grms_loss, &c, 0, TOL, &R_);
        gc_check(op, "w", c.w, D, dw, grms_loss, &c, 0, TOL, &R_);
        double *once = copy_of(dw, D);
        gated_rmsnorm_bwd_cpu(dx, gated ? dz : NULL, dw, c.R, c.x, c.z, c.w, rstd, rows, D, 1, D);
        check_doubled(op, "w", dw, once, D);
        free(once);
        if (!gated) {
            // z = NULL is exactly rmsnorm
            double *y2 = dalloc(rows * D), *r2 = dalloc(rows);
            gated_rmsnorm_fwd_cpu(c.y, rstd, c.x, NULL, c.w, rows, D, 1, D, 1e-6);
            rmsnorm_fwd_cpu(y2, r2, c.x, c.w, rows, D, 1e-6);
            check_close("gated_rmsnorm z=NULL equals rmsnorm", c.y, y2, rows * D, 0);
            free(y2); free(r2);
        } else {
            // constant row 2 (eps 0) with z = 1: y = w * silu(1)
            double xc[D], zc[D], y[D], want[D], rs;
            for (int i = 0; i < D; i++) {
                xc[i] = 2.0; zc[i] = 1.0; want[i] = c.w[i] * 0.7310585786300049;
            }
            gated_rmsnorm_fwd_cpu(y, &rs, xc, zc, c.w, 1, D, 1, D, 0.0);
            check_close("gated_rmsnorm constant row, z = 1, eps 0 = w silu(1)", y, want, D, 1e-15);
        }
        if (gated) {
            // z (and dz) as zh = 2 heads of a token inside a wider row (zld = 2D + 3): the same
            // numbers as packed, the other columns untouched
            const int zh = 2, zld = 2 * D + 3, ntok = rows / zh;
            double *zw = dalloc((size_t)ntok * zld), *dzw = dalloc((size_t)ntok * zld);
            double *y2 = dalloc(rows * D), *r2 = dalloc(rows), *dx2 = dalloc(rows * D);
            double *dw2 = zeros(D), *dw1 = zeros(D);
            fill_const(zw, (size_t)ntok * zld, SENTINEL);
            fill_const(dzw, (size_t)ntok * zld, SENTINEL);
            for (int r = 0; r < rows; r++)
                for (int i = 0; i < D; i++) zw[(r / zh) * zld + 3 + (r % zh) * D + i] = c.z[r * D + i];
            gated_rmsnorm_fwd_cpu(y2, r2, c.x, zw + 3, c.w, rows, D, zh, zld, 1e-6);
            gated_rmsnorm_fwd_cpu(c.y, rstd, c.x, c.z, c.w, rows, D, 1, D, 1e-6);
            gated_rmsnorm_bwd_cpu(dx2, dzw + 3, dw2, c.R, c.x, zw + 3, c.w, rstd, rows, D, zh, zld);
            gated_rmsnorm_bwd_cpu(dx, dz, dw1, c.R, c.x, c.z, c.w, rstd, rows, D, 1, D);
            bool same = true, untouched = true;
            for (int i = 0; i < rows * D; i++) {
                int r = i / D, j = i % D;
                same &= y2[i] == c.y[i] && dx2[i] == dx[i] &&
                        dzw[(r / zh) * zld + 3 + (r % zh) * D + j] == dz[i];
            }
            for (int r = 0; r < rows; r++) same &= r2[r] == rstd[r];
            for (int i = 0; i < D; i++) same &= dw2[i] == dw1[i];
            for (int t = 0; t < ntok; t++)
                for (int j = 0; j < zld; j++)
                    if (j < 3 || j >= 3 + zh * D) untouched &= dzw[t * zld + j] == SENTINEL;
            check_true("gated_rmsnorm strided z, dz (2 heads, zld 2D + 3) = packed, bitwise", same);
            check_true("gated_rmsnorm strided dz writes only its columns", untouched);
            free(zw); free(dzw); free(y2); free(r2); free(dx2); free(dw2); free(dw1);
        }
        free(c.y); free(c.rstd); free(c.x); free(c.z); free(c.w); free(c.R);
        free(rstd); free(dx); free(dz); free(dw);
    }
}

// ================================= crossentropy ==============================================
typedef struct { double *logits; const int32_t *tgt; int N, V; double r; } ce_ctx;
static double ce_loss(void *p) {
    ce_ctx *c = p;
    return c->r * crossentropy_fwd_cpu(NULL, c->logits, c->tgt, c->N, c->V);
}
static void test_crossentropy(void) {
    gc_header("crossentropy");
    enum { N = 7, V = 9 };
    const int32_t tgt[N] = {3, -1, 0, 8, -1, 5, 3};  // two ignored rows
    const int32_t none[N] = {-1, -1, -1, -1, -1, -1, -1};
    double r;
    fill_normal(&r, 1, &R_, 1);
    ce_ctx c = {rnd(N * V, 2), tgt, N, V, r};
    c.logits[2 * V + 4] = 40.0;  // a dominant logit: p ~ 1 there
    double *dl = dalloc(N * V), *losses = dalloc(N);
    const int n_valid = 5;
    crossentropy_bwd_cpu(dl, c.logits, tgt, N, V, r / n_valid);
    gc_check("crossentropy 2 of 7 ignored", "logits", c.logits, N * V, dl, ce_loss, &c, 0, TOL, &R_);
    ce_ctx c0 = {c.logits, none, N, V, r};
    double *dl0 = dalloc(N * V);
    fill_const(dl0, N * V, SENTINEL);
    crossentropy_bwd_cpu(dl0, c.logits, none, N, V, r);
    gc_check("crossentropy all ignored", "logits", c.logits, N * V, dl0, ce_loss, &c0, 0, TOL, &R_);

    double mean = crossentropy_fwd_cpu(losses, c.logits, tgt, N, V);
    double s = 0;
    for (int n = 0; n < N; n++) s += losses[n];
    check_true("crossentropy returns the mean over the 5 non-ignored rows",
               fabs(mean - s / n_valid) <= 1e-15 * fabs(mean) && losses[1] == 0 && losses[4] == 0);
    int zero_rows = 1;
    for (int v = 0; v < V; v++) zero_rows &= dl[V + v] == 0 && dl[4 * V + v] == 0;
    check_true("crossentropy ignored rows get a zero gradient", zero_rows);
    check_true("crossentropy with every row ignored: mean 0",
               crossentropy_fwd_cpu(NULL, c.logits, none, N, V) == 0.0);

    // in place: dlogits == logits gives the same gradient as the out-of-place call
    double *inplace = copy_of(c.logits, N * V);
    crossentropy_bwd_cpu(inplace, inplace, tgt, N, V, r / n_valid);
    check_close("crossentropy backward in place (dlogits == logits)", inplace, dl, N * V, 0);

    // uniform logits: every loss is log V, also at a huge offset (max subtraction)
    double uni[2 * V], ul[2], want[2] = {log(V), log(V)};
    const int32_t ut[2] = {2, 7};
    for (int v = 0; v < V; v++) {
        uni[v] = 0.3; uni[V + v] = 1e4;
    }
    double um = crossentropy_fwd_cpu(ul, uni, ut, 2, V);
    check_close("crossentropy of uniform logits (0.3 and 1e4) = log V", ul, want, 2, 1e-15);
    check_close("crossentropy mean of those rows = log V", &um, want, 1, 1e-15);
    // hand value: logits (0, log 3), target 0 -> log(1 + 3) = log 4
    const double two[2] = {0, log(3.0)}, l4 = log(4.0);
    const int32_t t0 = 0;
    double lv = crossentropy_fwd_cpu(NULL, two, &t0, 1, 2);
    check_close("crossentropy of (0, log 3), target 0 = log 4", &lv, &l4, 1, 1e-15);
    free(c.logits); free(dl); free(dl0); free(losses); free(inplace);
}

// ================================= dropout ===================================================
typedef struct { double *y, *x, *R; size_t n; double p; uint64_t seed; } drop_ctx;
static double drop_loss(void *p) {
    drop_ctx *c = p;
    dropout_fwd_cpu(c->y, c->x, c->n, c->p, c->seed);
    return dot(c->y, c->R, c->n);
}
static void test_dropout(void) {
    gc_header("dropout");
    enum { n = 50 };
    const double ps[2] = {0.0, 0.3};
    for (int k = 0; k < 2; k++) {
        drop_ctx c = {dalloc(n), rnd(n, 1), rnd(n, 1), n, ps[k], 1234};
        double *dx = dalloc(n);
        dropout_bwd_cpu(dx, c.R, n, c.p, c.seed);
        char op[64];
        snprintf(op, sizeof op, "dropout p=%.1f", c.p);
        gc_check(op, "x", c.x, n, dx, drop_loss, &c, 0, TOL, &R_);
        dropout_fwd_cpu(c.y, c.x, n, c.p, c.seed);
        if (c.p == 0) {
            check_close("dropout p=0 is the identity", c.y, c.x, n, 0);
        } else {
            int ok = 1;
            for (size_t i = 0; i < n; i++) {
                int keep = rng_uniform_at(c.seed, i) >= c.p;
                ok &= c.y[i] == (keep ? c.x[i] * (1.0 / (1.0 - c.p)) : 0.0);
            }
            check_true("dropout p=0.3: y = x keep / 0.7, keep = rng_uniform_at(seed, i) >= p", ok);
        }
        free(c.y); free(c.x); free(c.R); free(dx);
    }
    // kept fraction over 100000 elements: 0.7 within 5 sigma (sigma = 0.00145)
    enum { big = 100000 };
    double *x = dalloc(big), *y = dalloc(big);
    fill_const(x, big, 1.0);
    dropout_fwd_cpu(y, x, big, 0.3, 99);
    size_t kept = 0;
    for (size_t i = 0; i < big; i++) kept += y[i] != 0;
    char what[96];
    snprintf(what, sizeof what, "dropout p=0.3 keeps %.4f of 1e5 (0.7 +- 0.0073)", (double)kept / big);
    check_true(what, fabs((double)kept / big - 0.7) < 5 * sqrt(0.21 / big));
    // the backward redraws the same mask: dropout_bwd(ones) == dropout_fwd(ones), all 1e5
    double *dx = dalloc(big);
    dropout_bwd_cpu(dx, x, big, 0.3, 99);
    check_close("dropout p=0.3: backward mask = forward mask (1e5 elements)", dx, y, big, 0);
    free(x); free(y); free(dx);
}

// ================================= rope ======================================================
typedef struct { double *y, *x, *R; int B, T, H, D; double base; } rope_ctx;
static double rope_loss(void *p) {
    rope_ctx *c = p;
    rope_fwd_cpu(c->y, c->x, c->B, c->T, c->H, c->D, c->base);
    return dot(c->y, c->R, (size_t)c->B * c->T * c->H * c->D);
}
static void test_rope(void) {
    gc_header("rope");
    enum { B = 2, T = 5, H = 2, D = 8, n = B * T * H * D };
    const double bases[2] = {10000.0, 10.0};
    for (int k = 0; k < 2; k++) {
        rope_ctx c = {dalloc(n), rnd(n, 1), rnd(n, 1), B, T, H, D, bases[k]};
        double *dx = dalloc(n);
        rope_bwd_cpu(dx, c.R, B, T, H, D, c.base);
        char op[64];
        snprintf(op, sizeof op, "rope base %g", c.base);
        gc_check(op, "x", c.x, n, dx, rope_loss, &c, 0, TOL, &R_);
        rope_fwd_cpu(c.y, c.x, B, T, H, D, c.base);
        double *ip = copy_of(c.x, n);
        rope_fwd_cpu(ip, ip, B, T, H, D, c.base);
        check_close("rope forward in place (y == x)", ip, c.y, n, 0);
        memcpy(ip, c.R, n * sizeof(double));
        rope_bwd_cpu(ip, ip, B, T, H, D, c.base);
        check_close("rope backward in place (dx == dy)", ip, dx, n, 0);
        check_close("rope at t = 0 is the identity", c.y, c.x, H * D, 0);
        free(c.y); free(c.x); free(c.R); free(dx); free(ip);
    }
    // hand values, D = 4, base 100: theta = (1, 0.1); token t = 3 rotates pair (0,2) by 3 rad
    // and pair (1,3) by 0.3 rad. x = (1, 2, 0, -1) at t = 3:
    //   y0 = cos 3, y2 = sin 3, y1 = 2 cos .3 + sin .3, y3 = -cos .3 + 2 sin .3
    double x[4 * 4] = {0}, y[4 * 4];
    x[12] = 1; x[13] = 2; x[14] = 0; x[15] = -1;
    rope_fwd_cpu(y, x, 1, 4, 1, 4, 100.0);
    const double want[4] = {cos(3.0), 2 * cos(0.3) + sin(0.3), sin(3.0), -cos(0.3) + 2 * sin(0.3)};
    check_close("rope D4 base 100, t = 3, x = (1, 2, 0, -1)", y + 12, want, 4, 1e-15);
}

int main(void) {
    rng_init(&R_, 20240601, 0);
    double t0 = gdn_now();
    test_embedding();
    test_rmsnorm();
    test_add_rmsnorm();
    test_linear();
    test_conv1d();
    test_conv_silu();
    test_activations();
    test_l2norm();
    test_gdn_gates();
    test_gated_rmsnorm();
    test_crossentropy();
    test_dropout();
    test_rope();
    printf("\n(%.2f s)", gdn_now() - t0);
    return gc_finish("test_ops_cpu");
}
