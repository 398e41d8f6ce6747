// l2norm.c — CPU float64 per-row L2 norm backward, from the forward's output. y = scale x rn,
// rn = (sum x^2 + eps)^(-1/2) saved by the forward, drn/dx_j = -rn^3 x_j:
//   dx_j = scale (rn dy_j - rn^3 x_j sum_i x_i dy_i)
//        = rn (scale dy_j - y_j (sum_i y_i dy_i) / scale)        (x = y / (scale rn))      (=)
// so the backward reads y and rn, not x: GDN keeps q and k only normalised (model.c).
#include "bwd_cpu.h"
#include "../fwd/cpu_threads.h"

void l2norm_bwd_cpu(double *dx, const double *dy, const double *y, const double *rnorm,
                    size_t rows, int D, double scale) {
    GDN_OMP(parallel for schedule(static) if (rows * D >= cpu_min_work_flat))  // rows
    for (size_t r = 0; r < rows; r++) {
        const double *yr = y + r * D, *gr = dy + r * D;
        double *dxr = dx + r * D;
        double rn = rnorm[r], yg = 0;
        for (int i = 0; i < D; i++) yg += yr[i] * gr[i];
        double c = yg / scale;
        for (int i = 0; i < D; i++) dxr[i] = rn * (scale * gr[i] - c * yr[i]);
    }
}
