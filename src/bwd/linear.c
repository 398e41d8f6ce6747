// linear.c — CPU float64 linear backward for y = x W^T + b:
//   dx  = dy W        (N,out)(out,in)   (=, skipped when dx is NULL; += in linear_bwd_acc_cpu)
//   dW += dy^T x      (out,N)(N,in)     (+=, skipped when dW is NULL)
//   db += sum_n dy[n,:]                 (+=, skipped when db is NULL)
// With OpenBLAS (GDN_HAVE_CBLAS) two cblas_dgemm; otherwise plain loops. Both paths are
// checked by tests/test_ops_cpu.c (it compiles this file a second time without GDN_HAVE_CBLAS).
#include "bwd_cpu.h"
#ifdef GDN_HAVE_CBLAS
#include <cblas.h>
#endif

// dx = dy W + beta_dx dx (beta_dx 0: dx is overwritten and may hold anything)
static void linear_bwd_beta(double *dx, double beta_dx, double *dW, double *db, const double *dy,
                            const double *x, const double *W, int N, int in, int out) {
#ifdef GDN_HAVE_CBLAS
    if (dx)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0, dy, out, W, in,
                    beta_dx, dx, in);
    if (dW)
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0, dy, out, x, in, 1.0,
                    dW, in);
#else
    if (dx)
        for (int n = 0; n < N; n++)
            for (int i = 0; i < in; i++) {
                double s = 0;
                for (int o = 0; o < out; o++) s += dy[(size_t)n * out + o] * W[(size_t)o * in + i];
                double *d = &dx[(size_t)n * in + i];
                *d = beta_dx != 0.0 ? s + beta_dx * *d : s;
            }
    for (int o = 0; o < out && dW; o++)
        for (int i = 0; i < in; i++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += dy[(size_t)n * out + o] * x[(size_t)n * in + i];
            dW[(size_t)o * in + i] += s;
        }
#endif
    if (db)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += dy[(size_t)n * out + o];
            db[o] += s;
        }
}

void linear_bwd_cpu(double *dx, double *dW, double *db, const double *dy, const double *x,
                    const double *W, int N, int in, int out) {
    linear_bwd_beta(dx, 0.0, dW, db, dy, x, W, N, in, out);
}

void linear_bwd_acc_cpu(double *dx, double *dW, double *db, const double *dy, const double *x,
                        const double *W, int N, int in, int out) {
    linear_bwd_beta(dx, 1.0, dW, db, dy, x, W, N, in, out);
}
