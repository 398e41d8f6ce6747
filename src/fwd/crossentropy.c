// crossentropy.c — CPU float64 softmax cross-entropy per row, max-subtracted:
//   losses[n] = log sum_v exp(logits[n,v] - m) - (logits[n, tgt[n]] - m),  m = max_v logits[n,v]
// (m never enters the sum with the O(1) log term: no cancellation at large logits).
// tgt[n] < 0: ignored (loss 0). Returns the mean over non-ignored rows (0 when none).
// Rows are split over the threads; the mean sums the row losses on one thread in row order,
// so the result does not depend on the thread count.
#include <math.h>
#include "../core/common.h"
#include "fwd_cpu.h"
#include "cpu_threads.h"

enum { CE_ROWS = 1024 };  // rows per parallel block: their losses wait in a stack buffer

static double crossentropy_row(const double *l, int t, int V) {
    if (t < 0) return 0.0;
    double m = l[0];
    for (int v = 1; v < V; v++) m = fmax(m, l[v]);
    double s = 0;
    for (int v = 0; v < V; v++) s += exp(l[v] - m);
    return log(s) - (l[t] - m);
}

double crossentropy_fwd_cpu(double *losses, const double *logits, const int32_t *tgt, int N,
                            int V) {
    for (int n = 0; n < N; n++)
        if (tgt[n] >= V) gdn_die("crossentropy: target %d of row %d is >= vocab size %d",
                                 (int)tgt[n], n, V);
    double sum = 0;
    int count = 0;
    for (int n0 = 0; n0 < N; n0 += CE_ROWS) {
        const int nb = GDN_MIN(CE_ROWS, N - n0);
        double buf[CE_ROWS];
        GDN_OMP(parallel for schedule(static) if ((size_t)nb * V >= cpu_min_work_exp))
        for (int r = 0; r < nb; r++)
            buf[r] = crossentropy_row(logits + (size_t)(n0 + r) * V, tgt[n0 + r], V);
        for (int r = 0; r < nb; r++) {
            if (tgt[n0 + r] >= 0) {
                sum += buf[r];
                count++;
            }
            if (losses) losses[n0 + r] = buf[r];
        }
    }
    return count ? sum / count : 0.0;
}
