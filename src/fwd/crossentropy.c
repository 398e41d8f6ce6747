// crossentropy.c — CPU float64 softmax cross-entropy per row, max-subtracted:
//   losses[n] = log sum_v exp(logits[n,v] - m) - (logits[n, tgt[n]] - m),  m = max_v logits[n,v]
// (m never enters the sum with the O(1) log term: no cancellation at large logits).
// tgt[n] < 0: ignored (loss 0). Returns the mean over non-ignored rows (0 when none).
#include <math.h>
#include "../core/common.h"
#include "fwd_cpu.h"

double crossentropy_fwd_cpu(double *losses, const double *logits, const int32_t *tgt, int N,
                            int V) {
    double sum = 0;
    int count = 0;
    for (int n = 0; n < N; n++) {
        double loss = 0;
        if (tgt[n] >= 0) {
            if (tgt[n] >= V) gdn_die("crossentropy: target %d of row %d is >= vocab size %d",
                                     (int)tgt[n], n, V);
            const double *l = logits + (size_t)n * V;
            double m = l[0];
            for (int v = 1; v < V; v++) m = fmax(m, l[v]);
            double s = 0;
            for (int v = 0; v < V; v++) s += exp(l[v] - m);
            loss = log(s) - (l[tgt[n]] - m);
            sum += loss;
            count++;
        }
        if (losses) losses[n] = loss;
    }
    return count ? sum / count : 0.0;
}
