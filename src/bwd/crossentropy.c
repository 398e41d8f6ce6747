// crossentropy.c — CPU float64 fused softmax cross-entropy backward:
//   dlogits[n,v] = scale * (softmax(logits[n])_v - [v == tgt[n]]),   0 for ignored rows (tgt < 0).
// The row max and sum of exp are taken first; then each element is read once and overwritten,
// so dlogits == logits (in place, no probability buffer) is allowed. Rows are split over the
// threads.
#include <math.h>
#include "../core/common.h"
#include "bwd_cpu.h"
#include "../fwd/cpu_threads.h"

void crossentropy_bwd_cpu(double *dlogits, const double *logits, const int32_t *tgt, int N, int V,
                          double scale) {
    for (int n = 0; n < N; n++)
        if (tgt[n] >= V) gdn_die("crossentropy: target %d of row %d is >= vocab size %d",
                                 (int)tgt[n], n, V);
    GDN_OMP(parallel for schedule(static) if ((size_t)N * V >= cpu_min_work_exp))
    for (int n = 0; n < N; n++) {
        const double *l = logits + (size_t)n * V;
        double *d = dlogits + (size_t)n * V;
        if (tgt[n] < 0) {
            for (int v = 0; v < V; v++) d[v] = 0.0;
            continue;
        }
        double m = l[0];
        for (int v = 1; v < V; v++) m = fmax(m, l[v]);
        double s = 0;
        for (int v = 0; v < V; v++) s += exp(l[v] - m);
        double k = scale / s;
        for (int v = 0; v < V; v++) d[v] = k * exp(l[v] - m);
        d[tgt[n]] -= scale;
    }
}
