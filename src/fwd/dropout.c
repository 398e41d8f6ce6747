// dropout.c — CPU float64 dropout with a stateless counter-based mask:
//   keep_i = rng_uniform_at(seed, i) >= p,   y_i = x_i * keep_i / (1 - p).
// The mask is a pure function of (seed, i): the backward and the GPU kernel redraw it, nothing
// is saved. p == 0 is the identity (no draws); p == 1 drops everything.
#include "../core/common.h"
#include "../core/rng.h"
#include "fwd_cpu.h"
#include "cpu_threads.h"

void dropout_fwd_cpu(double *y, const double *x, size_t n, double p, uint64_t seed) {
    if (!(p >= 0.0 && p <= 1.0)) gdn_die("dropout: p = %g is outside [0, 1]", p);
    if (p == 0.0) {
        if (y != x) memcpy(y, x, n * sizeof(double));
        return;
    }
    double s = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    GDN_OMP(parallel for schedule(static) if (n >= cpu_min_work_exp))
    for (size_t i = 0; i < n; i++) y[i] = rng_uniform_at(seed, i) >= p ? x[i] * s : 0.0;
}
