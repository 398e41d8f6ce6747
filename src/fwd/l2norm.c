// l2norm.c — CPU float64 per-row L2 normalisation (GDN q and k, per head):
//   rnorm_r = 1/sqrt(sum_i x[r,i]^2 + eps),  y[r,i] = scale * x[r,i] * rnorm_r.
// rnorm (rows) is saved for l2norm_bwd_cpu.
#include <math.h>
#include "fwd_cpu.h"
#include "cpu_threads.h"

void l2norm_fwd_cpu(double *y, double *rnorm, const double *x, size_t rows, int D, double eps,
                    double scale) {
    GDN_OMP(parallel for schedule(static) if (rows * D >= cpu_min_work_flat))  // rows
    for (size_t r = 0; r < rows; r++) {
        const double *xr = x + r * D;
        double *yr = y + r * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += xr[i] * xr[i];
        double rn = 1.0 / sqrt(ss + eps);
        for (int i = 0; i < D; i++) yr[i] = scale * xr[i] * rn;
        rnorm[r] = rn;
    }
}
