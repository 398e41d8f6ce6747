// rmsnorm.c — CPU float64 RMSNorm backward. With u_i = w_i dy_i and the saved rstd r
// (r = (mean x^2 + eps)^(-1/2), dr/dx_j = -r^3 x_j / d):
//   dx_j  = r u_j - (r^3 / d) x_j sum_i u_i x_i       (=)
//   dw_i += sum_n dy[n,i] x[n,i] r_n                   (+=)
#include "bwd_cpu.h"

void rmsnorm_bwd_cpu(double *dx, double *dw, const double *dy, const double *x, const double *w,
                     const double *rstd, int N, int d) {
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * d, *gr = dy + (size_t)n * d;
        double *dxr = dx + (size_t)n * d;
        double r = rstd[n], ux = 0;
        for (int i = 0; i < d; i++) ux += w[i] * gr[i] * xr[i];
        double c = r * r * r * ux / d;
        for (int i = 0; i < d; i++) {
            dxr[i] = r * w[i] * gr[i] - c * xr[i];
            dw[i] += gr[i] * xr[i] * r;
        }
    }
}
