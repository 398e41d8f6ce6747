// linear.c — CPU float64 linear layer y = x W^T (+ b), W (out, in) as in PyTorch.
// With OpenBLAS (GDN_HAVE_CBLAS) one cblas_dgemm; otherwise plain loops. Both paths are
// checked by tests/test_ops_cpu.c (it compiles this file a second time without GDN_HAVE_CBLAS).
#include "fwd_cpu.h"
#ifdef GDN_HAVE_CBLAS
#include <cblas.h>
#endif

#ifndef GDN_HAVE_CBLAS
// y[n,o] = b[o] + sum_i x[n,i] W[o,i]
static void linear_fwd_loops(double *y, const double *x, const double *W, const double *b, int N,
                             int in, int out) {
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * in;
        for (int o = 0; o < out; o++) {
            const double *wr = W + (size_t)o * in;
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < in; i++) s += xr[i] * wr[i];
            y[(size_t)n * out + o] = s;
        }
    }
}
#endif

void linear_fwd_cpu(double *y, const double *x, const double *W, const double *b, int N, int in,
                    int out) {
#ifdef GDN_HAVE_CBLAS
    // y = b broadcast over rows (beta = 1), or beta = 0 (y not read)
    if (b)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < out; o++) y[(size_t)n * out + o] = b[o];
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0, x, in, W, in,
                b ? 1.0 : 0.0, y, out);
#else
    linear_fwd_loops(y, x, W, b, N, in, out);
#endif
}
