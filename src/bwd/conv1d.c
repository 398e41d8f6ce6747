// conv1d.c — CPU float64 causal depthwise conv1d backward (forward: y[b,t,c] =
// sum_j w[c,j] x[b, t-K+1+j, c]). Output t reads input s = t-K+1+j, so
//   dx[b,s,c]  = sum_{j: s+K-1-j < T} w[c,j] dy[b, s+K-1-j, c]          (=)
//   dw[c,j]   += sum_{b, t >= K-1-j} dy[b,t,c] x[b, t-K+1+j, c]          (+=)
// Threads: dx by rows (b, s); dw by blocks of 16 channels, each dw[c,j] summed over (b, t) in
// order on one thread (so dw is the same for any thread count). A block walks the rows once,
// every tap's sums side by side (rows read along the channels, not down one column per tap):
// each sum still adds its terms in the order b, then t.
// With documents (doc_start, fwd_cpu.h) output t reads only inputs s >= its document's start
// s_t: the terms above are kept where s_t <= s (dx: doc_start[t] <= s; dw: j >= K-1-(t-s_t)).
// conv_silu_bwd_cpu: the backward of silu(conv1d(x, w)) through the same two ops.
#include <stdlib.h>
#include <string.h>
#include "bwd_cpu.h"
#include "../core/common.h"
#include "../fwd/cpu_threads.h"

void conv1d_bwd_docs_cpu(double *dx, double *dw, const double *dy, const double *x,
                         const double *w, int B, int T, int C, int K, const int32_t *doc_start) {
    const bool par = 2 * (size_t)B * T * C * K >= cpu_min_work_flat;  // dx and dw
    (void)par;  // read by the pragma only (none without OpenMP)
    GDN_OMP(parallel if (par))
    {
        GDN_OMP(for schedule(static))
        for (int bs = 0; bs < B * T; bs++) {
            const int b = bs / T, s = bs % T;
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int j = 0; j < K; j++) {
                    int t = s + K - 1 - j;
                    if (t < T && (!doc_start || doc_start[(size_t)b * T + t] <= s)) acc += w[(size_t)c * K + j] * dy[((size_t)b * T + t) * C + c];
                }
                dx[((size_t)b * T + s) * C + c] = acc;
            }
        }
        double *acc = gdn_malloc((size_t)K * 16 * sizeof(double));  // [j][c - c0]
        GDN_OMP(for schedule(static))
        for (int c0 = 0; c0 < C; c0 += 16) {
            const int nc = GDN_MIN(16, C - c0);
            for (int i = 0; i < K * nc; i++) acc[i] = 0;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    const double *gr = dy + ((size_t)b * T + t) * C + c0;
                    const int u = t - (doc_start ? doc_start[(size_t)b * T + t] : 0);
                    for (int j = GDN_MAX(0, K - 1 - u); j < K; j++) {  // t - s_t >= K - 1 - j
                        const double *xr = x + ((size_t)b * T + t - K + 1 + j) * C + c0;
                        double *a = acc + (size_t)j * nc;
                        for (int c = 0; c < nc; c++) a[c] += gr[c] * xr[c];
                    }
                }
            for (int c = 0; c < nc; c++)
                for (int j = 0; j < K; j++) dw[(size_t)(c0 + c) * K + j] += acc[(size_t)j * nc + c];
        }
        free(acc);
    }
}

void conv1d_bwd_cpu(double *dx, double *dw, const double *dy, const double *x, const double *w,
                    int B, int T, int C, int K) {
    conv1d_bwd_docs_cpu(dx, dw, dy, x, w, B, T, C, K, NULL);
}

// d_pre = dy silu'(pre) with pre = conv1d(x, w) recomputed into a scratch (silu_bwd_cpu reads
// pre[i] before it writes d_pre[i]: in place is safe), then conv1d_bwd_cpu(d_pre): the same
// calls on the same values as the unfused silu_bwd + conv1d_bwd, so the same bits.
// Strided x, dx (ld > C): x packed into a scratch, dx formed packed and copied to its rows.
void conv_silu_bwd_docs_cpu(double *dx, double *dw, const double *dy, const double *x,
                            const double *w, int B, int T, int C, int K, size_t ld,
                            const int32_t *doc_start) {
    const size_t rows = (size_t)B * T, n = rows * C;
    const bool strided = ld != (size_t)C;
    double *dpre = gdn_malloc(GDN_MAX(n, (size_t)1) * sizeof(double));
    double *xp = strided ? gdn_malloc(GDN_MAX(n, (size_t)1) * sizeof(double)) : NULL;
    double *dxp = strided ? gdn_malloc(GDN_MAX(n, (size_t)1) * sizeof(double)) : NULL;
    if (strided)
        for (size_t r = 0; r < rows; r++) memcpy(xp + r * C, x + r * ld, (size_t)C * sizeof(double));
    const double *xs = strided ? xp : x;
    conv1d_fwd_docs_cpu(dpre, xs, w, B, T, C, K, doc_start);
    silu_bwd_cpu(dpre, dy, dpre, n);
    conv1d_bwd_docs_cpu(strided ? dxp : dx, dw, dpre, xs, w, B, T, C, K, doc_start);
    if (strided)
        for (size_t r = 0; r < rows; r++) memcpy(dx + r * ld, dxp + r * C, (size_t)C * sizeof(double));
    free(dpre);
    free(xp);
    free(dxp);
}

void conv_silu_bwd_cpu(double *dx, double *dw, const double *dy, const double *x, const double *w,
                       int B, int T, int C, int K, size_t ld) {
    conv_silu_bwd_docs_cpu(dx, dw, dy, x, w, B, T, C, K, ld, NULL);
}
