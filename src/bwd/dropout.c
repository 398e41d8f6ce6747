// dropout.c — CPU float64 dropout backward: the mask is redrawn from (seed, i), nothing saved:
//   dx_i = dy_i * [rng_uniform_at(seed, i) >= p] / (1 - p)     (p == 0: dx = dy)
#include "bwd_cpu.h"
#include "../fwd/fwd_cpu.h"

void dropout_bwd_cpu(double *dx, const double *dy, size_t n, double p, uint64_t seed) {
    dropout_fwd_cpu(dx, dy, n, p, seed);  // the same mask and scale: the map is diagonal
}
