// conv1d.c — CPU float64 causal depthwise conv1d (the GDN short convolution), no bias:
//   y[b,t,c] = sum_{j<K} w[c,j] * x[b, t-(K-1)+j, c],   x at negative time = 0,
// so tap j = K-1 multiplies the current token. Sequences never see each other; with documents
// (doc_start, fwd_cpu.h) x before the start s of token t's document is 0 as well (ts >= s below).
// Output rows (b, t) are split over the threads. conv_silu_fwd_cpu: the conv then SiLU in place.
#include "fwd_cpu.h"
#include "cpu_threads.h"
#include <string.h>
#include "../core/common.h"

void conv1d_fwd_docs_cpu(double *y, const double *x, const double *w, int B, int T, int C, int K,
                         const int32_t *doc_start) {
    GDN_OMP(parallel for schedule(static) if ((size_t)B * T * C * K >= cpu_min_work_flat))
    for (int bt = 0; bt < B * T; bt++) {
        const int b = bt / T, t = bt % T, s0 = doc_start ? doc_start[bt] : 0;
        double *yr = y + ((size_t)b * T + t) * C;
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < K; j++) {
                int ts = t - (K - 1) + j;
                if (ts >= s0) s += w[(size_t)c * K + j] * x[((size_t)b * T + ts) * C + c];
            }
            yr[c] = s;
        }
    }
}

void conv1d_fwd_cpu(double *y, const double *x, const double *w, int B, int T, int C, int K) {
    conv1d_fwd_docs_cpu(y, x, w, B, T, C, K, NULL);
}

// y = silu(conv1d(x, w)), by the two ops in turn (silu_fwd_cpu reads each element before it
// writes it, so in place is safe): the same bits as the unfused pair. Strided x (ld > C) is
// packed into a scratch first: the same values, so the same bits.
void conv_silu_fwd_docs_cpu(double *y, const double *x, const double *w, int B, int T, int C,
                            int K, size_t ld, const int32_t *doc_start) {
    const size_t rows = (size_t)B * T;
    double *xp = NULL;
    if (ld != (size_t)C) {
        xp = gdn_malloc(GDN_MAX(rows * C, (size_t)1) * sizeof(double));
        for (size_t r = 0; r < rows; r++) memcpy(xp + r * C, x + r * ld, (size_t)C * sizeof(double));
    }
    conv1d_fwd_docs_cpu(y, xp ? xp : x, w, B, T, C, K, doc_start);
    silu_fwd_cpu(y, y, rows * C);
    free(xp);
}

void conv_silu_fwd_cpu(double *y, const double *x, const double *w, int B, int T, int C, int K,
                       size_t ld) {
    conv_silu_fwd_docs_cpu(y, x, w, B, T, C, K, ld, NULL);
}
