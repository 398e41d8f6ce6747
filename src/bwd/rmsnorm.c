// rmsnorm.c — CPU float64 RMSNorm backward. With u_i = w_i dy_i and the saved rstd r
// (r = (mean x^2 + eps)^(-1/2), dr/dx_j = -r^3 x_j / d):
//   dx_j  = r u_j - (r^3 / d) x_j sum_i u_i x_i       (=; acc: dx_j = dx_j + that, the sum of
//                                                       several branches taken in place)
//   dw_i += sum_n dy[n,i] x[n,i] r_n                   (+=)
// Threads: dx by rows; dw by columns, each column summing its rows in order n = 0..N-1 (so
// dw is the same for any thread count). On one thread, one pass over the rows does both.
#include "bwd_cpu.h"
#include "../core/common.h"
#include "../fwd/cpu_threads.h"

// dx of one row (d); acc adds the gradient to dxr (dxr[i] + g: the bits of a separate add)
static void rmsnorm_bwd_row(double *dxr, const double *gr, const double *xr, const double *w,
                            double r, int d, bool acc) {
    double ux = 0;
    for (int i = 0; i < d; i++) ux += w[i] * gr[i] * xr[i];
    double c = r * r * r * ux / d;
    for (int i = 0; i < d; i++) {
        const double g = r * w[i] * gr[i] - c * xr[i];
        dxr[i] = acc ? dxr[i] + g : g;
    }
}

void rmsnorm_bwd_cpu(double *dx, double *dw, const double *dy, const double *x, const double *w,
                     const double *rstd, int N, int d, bool acc) {
    if ((size_t)N * d < cpu_min_work_flat || cpu_threads() == 1) {
        for (int n = 0; n < N; n++) {
            const double *xr = x + (size_t)n * d, *gr = dy + (size_t)n * d;
            const double r = rstd[n];
            rmsnorm_bwd_row(dx + (size_t)n * d, gr, xr, w, r, d, acc);
            for (int i = 0; i < d; i++) dw[i] += gr[i] * xr[i] * r;
        }
        return;
    }
    GDN_OMP(parallel)
    {
        GDN_OMP(for schedule(static))
        for (int n = 0; n < N; n++)
            rmsnorm_bwd_row(dx + (size_t)n * d, dy + (size_t)n * d, x + (size_t)n * d, w, rstd[n],
                            d, acc);
        // columns in blocks of 8 (one cache line of dw)
        GDN_OMP(for schedule(static))
        for (int i0 = 0; i0 < d; i0 += 8) {
            const int i1 = GDN_MIN(i0 + 8, d);
            for (int n = 0; n < N; n++) {
                const double *xr = x + (size_t)n * d, *gr = dy + (size_t)n * d;
                const double r = rstd[n];
                for (int i = i0; i < i1; i++) dw[i] += gr[i] * xr[i] * r;
            }
        }
    }
}
