// embedding.c — CPU float64 token embedding lookup: out[n, :] = wte[tok[n], :].
#include <string.h>
#include "fwd_cpu.h"

void embedding_fwd_cpu(double *out, const int32_t *tok, const double *wte, int N, int d) {
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * d, wte + (size_t)tok[n] * d, (size_t)d * sizeof(double));
}
