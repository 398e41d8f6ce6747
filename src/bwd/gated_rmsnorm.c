// gated_rmsnorm.c — CPU float64 backward of y = x rstd w silu(z) (z NULL: silu(z) := 1).
// With q_i = silu(z_i), u_i = dy_i w_i q_i and the saved rstd r (dr/dx_j = -r^3 x_j / D):
//   dx_j  = r u_j - (r^3 / D) x_j sum_i u_i x_i            (=)
//   dz_i  = dy_i x_i r w_i silu'(z_i),  silu' = s (1 + z (1 - s))   (=, only with z and dz)
//   dw_i += sum_rows dy_i x_i r q_i                          (+=)
#include <math.h>
#include "bwd_cpu.h"

static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void gated_rmsnorm_bwd_cpu(double *dx, double *dz, double *dw, const double *dy, const double *x,
                           const double *z, const double *w, const double *rstd, size_t rows,
                           int D) {
    for (size_t r = 0; r < rows; r++) {
        const double *xr = x + r * D, *gr = dy + r * D, *zr = z ? z + r * D : NULL;
        double *dxr = dx + r * D;
        double rs = rstd[r], ux = 0;
        for (int i = 0; i < D; i++) {
            double q = zr ? zr[i] * sigmoid(zr[i]) : 1.0;
            ux += gr[i] * w[i] * q * xr[i];
        }
        double c = rs * rs * rs * ux / D;
        for (int i = 0; i < D; i++) {
            double q = 1.0;
            if (zr) {
                double s = sigmoid(zr[i]);
                q = zr[i] * s;
                if (dz) dz[r * D + i] = gr[i] * xr[i] * rs * w[i] * s * (1.0 + zr[i] * (1.0 - s));
            }
            dxr[i] = rs * gr[i] * w[i] * q - c * xr[i];
            dw[i] += gr[i] * xr[i] * rs * q;
        }
    }
}
