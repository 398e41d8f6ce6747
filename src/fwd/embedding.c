// embedding.c — CPU float64 token embedding lookup: out[n, :] = wte[tok[n], :].
#include <string.h>
#include "fwd_cpu.h"
#include "cpu_threads.h"

void embedding_fwd_cpu(double *out, const int32_t *tok, const double *wte, int N, int d) {
    GDN_OMP(parallel for schedule(static) if ((size_t)N * d >= cpu_min_work_flat))
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * d, wte + (size_t)tok[n] * d, (size_t)d * sizeof(double));
}
