// activations.c — CPU float64 backward of SiLU and SwiGLU, with s = sigmoid(x):
//   silu'(x) = s (1 + x (1 - s))
//   SiLU:   dx = dy silu'(x)
//   SwiGLU: h = silu(gate) up  ->  dgate = dh up silu'(gate),  dup = dh silu(gate)
#include <math.h>
#include "bwd_cpu.h"
#include "../fwd/cpu_threads.h"

static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

// Elementwise: split over the threads when n is large enough (cpu_threads.h).
void silu_bwd_cpu(double *dx, const double *dy, const double *x, size_t n) {
    GDN_OMP(parallel for schedule(static) if (n >= cpu_min_work_exp))
    for (size_t i = 0; i < n; i++) {
        double s = sigmoid(x[i]);
        dx[i] = dy[i] * s * (1.0 + x[i] * (1.0 - s));
    }
}

// gate, up, dgate, dup: row r at r ld (swiglu_fwd_cpu); dh packed (rows, cols)
void swiglu_bwd_cpu(double *dgate, double *dup, const double *dh, const double *gate,
                    const double *up, size_t rows, int cols, size_t ld) {
    GDN_OMP(parallel for schedule(static) if (rows * (size_t)cols >= cpu_min_work_exp))
    for (size_t r = 0; r < rows; r++) {
        const size_t o = r * ld, od = r * (size_t)cols;
        for (int c = 0; c < cols; c++) {
            double g = gate[o + c], s = sigmoid(g), d = dh[od + c], u = up[o + c];
            dgate[o + c] = d * u * s * (1.0 + g * (1.0 - s));
            dup[o + c] = d * g * s;
        }
    }
}
