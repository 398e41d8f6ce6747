// backend_cpu.c — the float64 reference backend: every op of backend.h is the CPU function of
// src/fwd/*.c and src/bwd/*.c, with the void pointers read as double.
#include <math.h>
#include "backend.h"
#include "../bwd/bwd_cpu.h"
#include "../core/common.h"
#include "../fwd/cpu_threads.h"

static void *cpu_alloc(size_t bytes) { return gdn_malloc(bytes); }
static void cpu_release(void *p) { free(p); }
static void cpu_download(double *dst, const void *src, size_t n, be_class c) {
    (void)c;
    memcpy(dst, src, n * sizeof(double));
}
static void cpu_upload(void *dst, const double *src, size_t n, be_class c) {
    (void)c;
    memcpy(dst, src, n * sizeof(double));
}
static void cpu_upload_index(int32_t *dst, const int32_t *src, size_t n) {
    memcpy(dst, src, n * sizeof(int32_t));
}
static void cpu_zero(void *p, size_t n, be_class c) {
    (void)c;
    memset(p, 0, n * sizeof(double));
}
static void cpu_add(void *y, const void *x, size_t n) {
    double *a = y;
    const double *b = x;
    GDN_OMP(parallel for schedule(static) if (n >= cpu_min_work_flat))
    for (size_t i = 0; i < n; i++) a[i] += b[i];
}
static void cpu_copy(void *y, const void *x, size_t n) { memmove(y, x, n * sizeof(double)); }
static double cpu_sumsq(const void *x, size_t n) {
    const double *a = x;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * a[i];
    return s;
}
// The unfused copy, add and rmsnorm_fwd_cpu in sequence: the bits of the separate ops.
static void cpu_add_rmsnorm_fwd(void *x_out, void *y, void *rstd, const void *x_in,
                                const void *branch, const void *w, int N, int d, double eps) {
    size_t n = (size_t)N * d;
    if (x_out != x_in) cpu_copy(x_out, x_in, n);
    cpu_add(x_out, branch, n);
    rmsnorm_fwd_cpu(y, rstd, x_out, w, N, d, eps);
}
// conv_silu3: the three channel ranges by three conv_silu calls (the CUDA kernel's values)
static void cpu_conv_silu3_fwd(void *y0, void *y1, void *y2, const void *x, const void *w, int B,
                               int T, int C0, int C1, int C2, int K, size_t ld,
                               const int32_t *ds) {
    const double *xd = x, *wd = w;
    conv_silu_fwd_docs_cpu(y0, xd, wd, B, T, C0, K, ld, ds);
    conv_silu_fwd_docs_cpu(y1, xd + C0, wd + (size_t)C0 * K, B, T, C1, K, ld, ds);
    conv_silu_fwd_docs_cpu(y2, xd + C0 + C1, wd + (size_t)(C0 + C1) * K, B, T, C2, K, ld, ds);
}
// conv_silu3_l2: conv_silu3, then l2norm_fwd in place on outputs 0 and 1 (the values of
// conv_silu3_fwd followed by l2norm_fwd into another buffer: the norm reads x[i] before it
// writes y[i])
static void cpu_conv_silu3_l2_fwd(void *y0, void *y1, void *y2, void *rn0, void *rn1,
                                  const void *x, const void *w, int B, int T, int C0, int C1,
                                  int C2, int K, size_t ld, int nd, double eps, double s0,
                                  double s1, const int32_t *ds) {
    const size_t N = (size_t)B * T;
    if (nd < 1 || C0 % nd || C1 % nd)
        gdn_die("conv_silu3_l2_fwd: heads of %d channels do not tile %d, %d", nd, C0, C1);
    cpu_conv_silu3_fwd(y0, y1, y2, x, w, B, T, C0, C1, C2, K, ld, ds);
    l2norm_fwd_cpu(y0, rn0, y0, N * (C0 / nd), nd, eps, s0);
    l2norm_fwd_cpu(y1, rn1, y1, N * (C1 / nd), nd, eps, s1);
}
static void cpu_conv_silu3_bwd(void *dx, void *dw, const void *dy0, const void *dy1,
                               const void *dy2, const void *x, const void *w, int B, int T, int C0,
                               int C1, int C2, int K, size_t ld, const int32_t *ds) {
    double *dxd = dx, *dwd = dw;
    const double *xd = x, *wd = w;
    conv_silu_bwd_docs_cpu(dxd, dwd, dy0, xd, wd, B, T, C0, K, ld, ds);
    conv_silu_bwd_docs_cpu(dxd + C0, dwd + (size_t)C0 * K, dy1, xd + C0, wd + (size_t)C0 * K, B,
                           T, C1, K, ld, ds);
    conv_silu_bwd_docs_cpu(dxd + C0 + C1, dwd + (size_t)(C0 + C1) * K, dy2, xd + C0 + C1,
                           wd + (size_t)(C0 + C1) * K, B, T, C2, K, ld, ds);
}
// The backwards with the forward's output as an optional extra (backend.h, train.recompute =
// light): the CPU twin, then the forward's own row code on the saved statistic (bitwise its y).
static void cpu_rmsnorm_bwd(void *dx, void *dw, void *y, const void *dy, const void *x,
                            const void *w, const void *rstd, int N, int d, bool acc) {
    rmsnorm_bwd_cpu(dx, dw, dy, x, w, rstd, N, d, acc);
    if (y) rmsnorm_apply_cpu(y, x, w, rstd, N, d);
}
static void cpu_gated_rmsnorm_bwd(void *dx, void *dz, void *dw, void *y, const void *dy,
                                  const void *x, const void *z, const void *w, const void *rstd,
                                  size_t rows, int D, int zh, size_t zld) {
    gated_rmsnorm_bwd_cpu(dx, dz, dw, dy, x, z, w, rstd, rows, D, zh, zld);
    if (y) gated_rmsnorm_apply_cpu(y, x, z, w, rstd, rows, D, zh, zld);
}
static void cpu_swiglu_bwd(void *dgate, void *dup, void *h, const void *dh, const void *gate,
                           const void *up, size_t rows, int cols, size_t ld) {
    swiglu_bwd_cpu(dgate, dup, dh, gate, up, rows, cols, ld);
    if (h) swiglu_fwd_cpu(h, gate, up, rows, cols, ld);
}
static void cpu_sync(void) {}  // every CPU op has finished when it returns
static void cpu_linear_fwd(void *y, const void *x, const void *W, int N, int in, int out) {
    linear_fwd_cpu(y, x, W, NULL, N, in, out);
}
static void cpu_linear_bwd(void *dx, void *dW, const void *dy, const void *x, const void *W,
                           int N, int in, int out, bool acc) {
    (acc ? linear_bwd_acc_cpu : linear_bwd_cpu)(dx, dW, NULL, dy, x, W, N, in, out);
}
static double cpu_crossentropy(void *logits, const int32_t *tgt, int N, int V, double scale) {
    double mean = crossentropy_fwd_cpu(NULL, logits, tgt, N, V);
    int valid = 0;
    for (int i = 0; i < N; i++) valid += tgt[i] >= 0;
    if (scale != 0) crossentropy_bwd_cpu(logits, logits, tgt, N, V, scale);
    return mean * valid;
}
static gdn_cpu_params gdn_params_of(const gdn_op *op) {
    gdn_cpu_params p = {
        .B = op->B, .T = op->T, .H = op->H, .Dk = op->Dk, .Dv = op->Dv, .chunk = op->chunk,
        .mode = op->mode, .q = op->q, .k = op->k, .v = op->v, .g = op->g, .beta = op->beta,
        .o = op->o, .dO = op->dO, .dq = op->dq, .dk = op->dk, .dv = op->dv, .dg = op->dg,
        .dbeta = op->dbeta, .hs = op->hs, .doc_start = op->doc_start,
    };
    return p;
}
static void cpu_gdn_fwd(const gdn_op *op) {
    gdn_cpu_params p = gdn_params_of(op);
    gdn_chunk_fwd_cpu(&p);
}
static void cpu_gdn_bwd(const gdn_op *op) {
    gdn_cpu_params p = gdn_params_of(op);
    gdn_chunk_bwd_cpu(&p);
}
static void cpu_adamw(void *pp, void *master, const void *gg, void *mm, void *vv, size_t n,
                      double lr, double b1, double b2, double eps, double wd, double bc1,
                      double bc2, double gscale) {
    (void)master;  // float64 parameters are their own master weights
    double *p = pp, *m = mm, *v = vv;
    const double *g = gg;
    // elementwise (independent outputs): any thread count gives the same bits
    GDN_OMP(parallel for schedule(static) if (n >= cpu_min_work_exp))
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] * gscale;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double mh = m[i] / bc1, vh = v[i] / bc2;
        p[i] -= lr * (mh / (sqrt(vh) + eps) + wd * p[i]);
    }
}

// The casts below only change pointer types (void* <-> double*): same ABI, same arguments.
#define F(fn) ((void *)(fn))
const backend backend_cpu = {
    .name = "cpu",
    .elem = {8, 8, 8, 8, 8},
    .master = false,
    .doc_reset = true,
    .fuse_projections = false,  // the reference keeps one GEMM per weight (tests can set it)
    .alloc = cpu_alloc,
    .release = cpu_release,
    .download = cpu_download,
    .upload = cpu_upload,
    .upload_index = cpu_upload_index,
    .zero = cpu_zero,
    .add = cpu_add,
    .copy = cpu_copy,
    .sumsq = cpu_sumsq,
    .sync = cpu_sync,
    .embedding_fwd = F(embedding_fwd_cpu),
    .embedding_bwd = F(embedding_bwd_cpu),
    .rmsnorm_fwd = F(rmsnorm_fwd_cpu),
    .add_rmsnorm_fwd = cpu_add_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .conv1d_fwd = F(conv1d_fwd_docs_cpu),
    .conv1d_bwd = F(conv1d_bwd_docs_cpu),
    .silu_fwd = F(silu_fwd_cpu),
    .silu_bwd = F(silu_bwd_cpu),
    .conv_silu_fwd = F(conv_silu_fwd_docs_cpu),
    .conv_silu_bwd = F(conv_silu_bwd_docs_cpu),
    .conv_silu3_fwd = cpu_conv_silu3_fwd,
    .conv_silu3_bwd = cpu_conv_silu3_bwd,
    .conv_silu3_l2_fwd = cpu_conv_silu3_l2_fwd,
    .l2norm_fwd = F(l2norm_fwd_cpu),
    .l2norm_bwd = F(l2norm_bwd_cpu),
    .gdn_gates_fwd = F(gdn_gates_fwd_cpu),
    .gdn_gates_bwd = F(gdn_gates_bwd_cpu),
    .gated_rmsnorm_fwd = F(gated_rmsnorm_fwd_cpu),
    .gated_rmsnorm_bwd = cpu_gated_rmsnorm_bwd,
    .swiglu_fwd = F(swiglu_fwd_cpu),
    .swiglu_bwd = cpu_swiglu_bwd,
    .crossentropy = cpu_crossentropy,
    .dropout_fwd = F(dropout_fwd_cpu),
    .dropout_bwd = F(dropout_bwd_cpu),
    .rope_fwd = F(rope_fwd_docs_cpu),
    .rope_bwd = F(rope_bwd_docs_cpu),
    .attention_fwd = F(attention_fwd_docs_cpu),
    .attention_bwd = F(attention_bwd_docs_cpu),
    .gdn_fwd = cpu_gdn_fwd,
    .gdn_bwd = cpu_gdn_bwd,
    .adamw = cpu_adamw,
};
