// rmsnorm.c — CPU float64 RMSNorm over the last dim:
//   rstd_n = 1/sqrt(mean_i x[n,i]^2 + eps),  y[n,i] = x[n,i] * rstd_n * w[i].
// rstd (N) is saved: rmsnorm_bwd_cpu reads it instead of recomputing the row norm, and
// rmsnorm_apply_cpu redoes y from it (the same row code: the same bits).
#include <math.h>
#include "fwd_cpu.h"
#include "cpu_threads.h"

// y of one row from its 1/rms r
static void rmsnorm_scale_row(double *yr, const double *xr, const double *w, double r, int d) {
    for (int i = 0; i < d; i++) yr[i] = xr[i] * r * w[i];
}

void rmsnorm_fwd_cpu(double *y, double *rstd, const double *x, const double *w, int N, int d,
                     double eps) {
    GDN_OMP(parallel for schedule(static) if ((size_t)N * d >= cpu_min_work_flat))  // rows
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * d;
        double *yr = y + (size_t)n * d;
        double ss = 0;
        for (int i = 0; i < d; i++) ss += xr[i] * xr[i];
        double r = 1.0 / sqrt(ss / d + eps);
        rmsnorm_scale_row(yr, xr, w, r, d);
        rstd[n] = r;
    }
}

void rmsnorm_apply_cpu(double *y, const double *x, const double *w, const double *rstd, int N,
                       int d) {
    GDN_OMP(parallel for schedule(static) if ((size_t)N * d >= cpu_min_work_flat))  // rows
    for (int n = 0; n < N; n++)
        rmsnorm_scale_row(y + (size_t)n * d, x + (size_t)n * d, w, rstd[n], d);
}
