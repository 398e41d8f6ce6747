// gated_rmsnorm.c — CPU float64 backward of y = x rstd w silu(z) (z NULL: silu(z) := 1).
// With q_i = silu(z_i), u_i = dy_i w_i q_i and the saved rstd r (dr/dx_j = -r^3 x_j / D):
//   dx_j  = r u_j - (r^3 / D) x_j sum_i u_i x_i            (=)
//   dz_i  = dy_i x_i r w_i silu'(z_i),  silu' = s (1 + z (1 - s))   (=, only with z and dz)
//   dw_i += sum_rows dy_i x_i r q_i                          (+=)
// Threads: dx, dz by rows; dw by columns, each column summing its rows in order (so dw is the
// same for any thread count).
#include <math.h>
#include "bwd_cpu.h"
#include "../core/common.h"
#include "../fwd/cpu_threads.h"

static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void gated_rmsnorm_bwd_cpu(double *dx, double *dz, double *dw, const double *dy, const double *x,
                           const double *z, const double *w, const double *rstd, size_t rows,
                           int D, int zh, size_t zld) {
    const bool par = rows * D >= (z ? cpu_min_work_exp : cpu_min_work_flat);  // silu(z): an exp
    (void)par;  // read by the pragma only (none without OpenMP)
    GDN_OMP(parallel if (par))
    {
        double *sg = gdn_malloc((size_t)D * sizeof(double));  // this thread's sigmoid(z) of a row
        GDN_OMP(for schedule(static))
        for (size_t r = 0; r < rows; r++) {
            const size_t zo = (r / zh) * zld + (r % zh) * D;
            const double *xr = x + r * D, *gr = dy + r * D, *zr = z ? z + zo : NULL;
            double *dxr = dx + r * D;
            double rs = rstd[r], ux = 0;
            for (int i = 0; i < D; i++) {
                double q = 1.0;
                if (zr) {
                    sg[i] = sigmoid(zr[i]);
                    q = zr[i] * sg[i];
                }
                ux += gr[i] * w[i] * q * xr[i];
            }
            double c = rs * rs * rs * ux / D;
            for (int i = 0; i < D; i++) {
                double q = 1.0;
                if (zr) {
                    double s = sg[i];
                    q = zr[i] * s;
                    if (dz)
                        dz[zo + i] = gr[i] * xr[i] * rs * w[i] * s * (1.0 + zr[i] * (1.0 - s));
                }
                dxr[i] = rs * gr[i] * w[i] * q - c * xr[i];
            }
        }
        free(sg);
        // columns in blocks of 8 (one cache line of dw); q = silu(z) recomputed, as above
        GDN_OMP(for schedule(static))
        for (int i0 = 0; i0 < D; i0 += 8) {
            const int i1 = GDN_MIN(i0 + 8, D);
            for (size_t r = 0; r < rows; r++) {
                const double *xr = x + r * D, *gr = dy + r * D;
                const double *zr = z ? z + (r / zh) * zld + (r % zh) * D : NULL;
                const double rs = rstd[r];
                for (int i = i0; i < i1; i++) {
                    const double q = zr ? zr[i] * sigmoid(zr[i]) : 1.0;
                    dw[i] += gr[i] * xr[i] * rs * q;
                }
            }
        }
    }
}
