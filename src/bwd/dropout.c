// dropout.c — CPU float64 dropout backward: the mask is redrawn from (seed, i), nothing saved:
//   dx_i = dy_i * [rng_uniform_at(seed, i) >= p] / (1 - p)     (p == 0: dx = dy)
#include "../core/common.h"
#include "../core/rng.h"
#include "bwd_cpu.h"
#include "../fwd/cpu_threads.h"

void dropout_bwd_cpu(double *dx, const double *dy, size_t n, double p, uint64_t seed) {
    if (!(p >= 0.0 && p <= 1.0)) gdn_die("dropout: p = %g is outside [0, 1]", p);
    if (p == 0.0) {
        if (dx != dy) memcpy(dx, dy, n * sizeof(double));
        return;
    }
    double s = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    GDN_OMP(parallel for schedule(static) if (n >= cpu_min_work_exp))
    for (size_t i = 0; i < n; i++) dx[i] = rng_uniform_at(seed, i) >= p ? dy[i] * s : 0.0;
}
