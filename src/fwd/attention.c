// attention.c — float64 CPU forward of causal sliding-window softmax attention (DESIGN 2.2):
// the oracle for src/fwd/attention.cu.
//   s_ij = scale * q_i . k_j  for  i - window < j <= i  (window >= T: full causal)
//   lse_i = log sum_j exp(s_ij),  p_ij = exp(s_ij - lse_i),  o_i = sum_j p_ij v_j
// With documents (doc_start, fwd_cpu.h) query i also sees no key before its document's start s_i:
// j0 = max(i - window + 1, s_i).
// q, k, v, o (B,T,H,D) token-major; lse (B,H,T) head-major (read by attention_bwd_cpu to
// recompute p without a second max/sum pass).
#include "fwd_cpu.h"
#include <math.h>
#include "../core/common.h"
#include "cpu_threads.h"

double attention_row_cpu(double *o, const double *q, const double *k, const double *v,
                         size_t stride, int cap, int j0, int j1, int D, double scale, double *s) {
    double m = -INFINITY;
    for (int j = j0; j <= j1; j++) {
        const double *kj = k + (size_t)(cap ? j % cap : j) * stride;
        double d = 0;
        for (int e = 0; e < D; e++) d += q[e] * kj[e];
        s[j - j0] = scale * d;
        if (s[j - j0] > m) m = s[j - j0];
    }
    double z = 0;
    for (int j = j0; j <= j1; j++) z += exp(s[j - j0] - m);
    double l = m + log(z);
    for (int e = 0; e < D; e++) o[e] = 0;
    for (int j = j0; j <= j1; j++) {
        double p = exp(s[j - j0] - l);
        const double *vj = v + (size_t)(cap ? j % cap : j) * stride;
        for (int e = 0; e < D; e++) o[e] += p * vj[e];
    }
    return l;
}

void attention_fwd_docs_cpu(double *o, double *lse, const double *q, const double *k,
                            const double *v, int B, int T, int H, int D, int window, double scale,
                            const int32_t *doc_start) {
    if (window < 1) gdn_die("attention_fwd_cpu: window %d < 1", window);
    const size_t rs = (size_t)H * D;  // stride between tokens
    // (b, h) pairs are independent: split over the threads, each with its own score row s
    GDN_OMP(parallel)
    {
        double *s = gdn_malloc((size_t)GDN_MAX(GDN_MIN(window, T), 1) * sizeof(double));
        GDN_OMP(for schedule(static))
        for (int bh = 0; bh < B * H; bh++) {
            const int b = bh / H, h = bh % H;
            for (int i = 0; i < T; i++) {
                const double *qi = q + ((size_t)b * T + i) * rs + (size_t)h * D;
                const size_t head = (size_t)b * T * rs + (size_t)h * D;  // token 0 of (b, h)
                const int s0 = doc_start ? doc_start[(size_t)b * T + i] : 0;
                int j0 = i - window + 1 > s0 ? i - window + 1 : s0;
                lse[((size_t)b * H + h) * T + i] =
                    attention_row_cpu(o + head + (size_t)i * rs, qi, k + head, v + head, rs, 0, j0, i, D,
                                      scale, s);
            }
        }
        free(s);
    }
}

void attention_fwd_cpu(double *o, double *lse, const double *q, const double *k, const double *v,
                       int B, int T, int H, int D, int window, double scale) {
    attention_fwd_docs_cpu(o, lse, q, k, v, B, T, H, D, window, scale, NULL);
}
