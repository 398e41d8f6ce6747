// gdn_gates.c — CPU float64 GDN gates (DESIGN 2.1), per token n and head h:
//   g    = -exp(A_log[h]) * softplus(a[n,h] + dt_bias[h])     (log of the decay alpha)
//   beta = c * sigmoid(b[n,h]),  c = 2 with neg_eigval else 1
// softplus(u) = u for u > 20 (PyTorch's threshold; log1p(exp(u)) = u there to 2e-9), else
// log1p(exp(u)). Gate off: g = 0. Delta off: beta is not written. a and b: token n's row at
// n * ld (ld = H: packed (N,H); larger: columns of a wider projection output).
#include <math.h>
#include "fwd_cpu.h"

static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}
static inline double softplus(double u) { return u > 20.0 ? u : log1p(exp(u)); }

void gdn_gates_fwd_cpu(double *g, double *beta, const double *a, const double *b,
                       const double *A_log, const double *dt_bias, int N, int H, size_t ld,
                       gdn_mode mode) {
    double c = mode.neg_eigval ? 2.0 : 1.0;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            size_t i = (size_t)n * H + h, j = (size_t)n * ld + h;
            g[i] = mode.gate ? -exp(A_log[h]) * softplus(a[j] + dt_bias[h]) : 0.0;
            if (mode.delta) beta[i] = c * sigmoid(b[j]);
        }
}
