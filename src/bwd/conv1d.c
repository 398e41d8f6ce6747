// conv1d.c — CPU float64 causal depthwise conv1d backward (forward: y[b,t,c] =
// sum_j w[c,j] x[b, t-K+1+j, c]). Output t reads input s = t-K+1+j, so
//   dx[b,s,c]  = sum_{j: s+K-1-j < T} w[c,j] dy[b, s+K-1-j, c]          (=)
//   dw[c,j]   += sum_{b, t >= K-1-j} dy[b,t,c] x[b, t-K+1+j, c]          (+=)
#include "bwd_cpu.h"

void conv1d_bwd_cpu(double *dx, double *dw, const double *dy, const double *x, const double *w,
                    int B, int T, int C, int K) {
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T; s++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int j = 0; j < K; j++) {
                    int t = s + K - 1 - j;
                    if (t < T) acc += w[(size_t)c * K + j] * dy[((size_t)b * T + t) * C + c];
                }
                dx[((size_t)b * T + s) * C + c] = acc;
            }
    for (int c = 0; c < C; c++)
        for (int j = 0; j < K; j++) {
            double acc = 0;
            for (int b = 0; b < B; b++)
                for (int t = K - 1 - j; t < T; t++)
                    acc += dy[((size_t)b * T + t) * C + c] * x[((size_t)b * T + t - K + 1 + j) * C + c];
            dw[(size_t)c * K + j] += acc;
        }
}
