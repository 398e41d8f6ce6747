// gated_rmsnorm.c — CPU float64 GDN output norm per head row with SiLU output gate:
//   rstd_r = 1/sqrt(mean_i x[r,i]^2 + eps),  y[r,i] = x[r,i] * rstd_r * w[i] * silu(z[r,i])
// (z NULL: no gate, plain RMSNorm). rstd (rows) is saved for gated_rmsnorm_bwd_cpu, and
// gated_rmsnorm_apply_cpu redoes y from it (the same row code: the same bits).
#include <math.h>
#include "fwd_cpu.h"
#include "cpu_threads.h"

static inline double silu(double x) {
    if (x >= 0) return x / (1.0 + exp(-x));
    double e = exp(x);
    return x * e / (1.0 + e);
}

// y of row r from its 1/rms rs (zr: z's row, or NULL)
static void gated_scale_row(double *yr, const double *xr, const double *zr, const double *w,
                            double rs, int D) {
    for (int i = 0; i < D; i++) {
        double v = xr[i] * rs * w[i];
        yr[i] = zr ? v * silu(zr[i]) : v;
    }
}

void gated_rmsnorm_fwd_cpu(double *y, double *rstd, const double *x, const double *z,
                           const double *w, size_t rows, int D, int zh, size_t zld, double eps) {
    const size_t min_work = z ? cpu_min_work_exp : cpu_min_work_flat;  // silu(z) has an exp
    (void)min_work;  // read by the pragma only (none without OpenMP)
    GDN_OMP(parallel for schedule(static) if (rows * D >= min_work))  // rows
    for (size_t r = 0; r < rows; r++) {
        const double *xr = x + r * D;
        double *yr = y + r * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += xr[i] * xr[i];
        double rs = 1.0 / sqrt(ss / D + eps);
        gated_scale_row(yr, xr, z ? z + (r / zh) * zld + (r % zh) * D : NULL, w, rs, D);
        rstd[r] = rs;
    }
}

void gated_rmsnorm_apply_cpu(double *y, const double *x, const double *z, const double *w,
                             const double *rstd, size_t rows, int D, int zh, size_t zld) {
    const size_t min_work = z ? cpu_min_work_exp : cpu_min_work_flat;
    (void)min_work;  // read by the pragma only (none without OpenMP)
    GDN_OMP(parallel for schedule(static) if (rows * D >= min_work))  // rows
    for (size_t r = 0; r < rows; r++)
        gated_scale_row(y + r * D, x + r * D, z ? z + (r / zh) * zld + (r % zh) * D : NULL, w,
                        rstd[r], D);
}
