// activations.c — CPU float64 elementwise activations: SiLU y = x sigmoid(x) and
// SwiGLU h = silu(gate) * up. sigmoid never evaluates exp of a large positive number.
#include <math.h>
#include "fwd_cpu.h"
#include "cpu_threads.h"

static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

// Elementwise: split over the threads when n is large enough (cpu_threads.h).
void silu_fwd_cpu(double *y, const double *x, size_t n) {
    GDN_OMP(parallel for schedule(static) if (n >= cpu_min_work_exp))
    for (size_t i = 0; i < n; i++) y[i] = x[i] * sigmoid(x[i]);
}

// gate, up: row r at r ld (ld = cols: packed; 2 cols: the halves of the fused gate/up projection,
// model.c mlp_fused); h packed. Split over rows (each element on its own: the same bits).
void swiglu_fwd_cpu(double *h, const double *gate, const double *up, size_t rows, int cols,
                    size_t ld) {
    GDN_OMP(parallel for schedule(static) if (rows * (size_t)cols >= cpu_min_work_exp))
    for (size_t r = 0; r < rows; r++) {
        const double *g = gate + r * ld, *u = up + r * ld;
        double *hr = h + r * (size_t)cols;
        for (int c = 0; c < cols; c++) hr[c] = g[c] * sigmoid(g[c]) * u[c];
    }
}
