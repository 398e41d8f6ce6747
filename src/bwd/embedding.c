// embedding.c — CPU float64 embedding backward: dwte[tok[n], :] += dout[n, :] (a repeated
// token accumulates every occurrence; dwte follows the += rule of bwd_cpu.h).
#include "bwd_cpu.h"

void embedding_bwd_cpu(double *dwte, const double *dout, const int32_t *tok, int N, int d) {
    for (int n = 0; n < N; n++) {
        double *dw = dwte + (size_t)tok[n] * d;
        const double *g = dout + (size_t)n * d;
        for (int i = 0; i < d; i++) dw[i] += g[i];
    }
}
