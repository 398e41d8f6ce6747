// attention.c — float64 CPU backward of causal sliding-window softmax attention (the oracle
// for src/bwd/attention.cu). Probabilities are recomputed from the saved lse:
//   p_ij  = exp(scale q_i.k_j - lse_i)              (i - window < j <= i)
//   D_i   = dO_i . o_i                              (= sum_j p_ij dO_i.v_j)
//   dv_j  = sum_i p_ij dO_i
//   ds_ij = p_ij (dO_i.v_j - D_i)
//   dq_i  = scale sum_j ds_ij k_j,   dk_j = scale sum_i ds_ij q_i
// With documents (doc_start, fwd_cpu.h): j >= s_i as well, the forward's key range.
// All three gradients are activation gradients: overwritten (=).
#include "bwd_cpu.h"
#include <math.h>
#include "../core/common.h"
#include "../fwd/cpu_threads.h"

void attention_bwd_docs_cpu(double *dq, double *dk, double *dv, const double *dout,
                            const double *q, const double *k, const double *v, const double *o,
                            const double *lse, int B, int T, int H, int D, int window, double scale,
                            const int32_t *doc_start) {
    if (window < 1) gdn_die("attention_bwd_cpu: window %d < 1", window);
    const size_t rs = (size_t)H * D;
    // (b, h) pairs are independent (dk_j, dv_j of a pair sum over its own queries i, in order):
    // split over the threads
    GDN_OMP(parallel for schedule(static))
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        for (int t = 0; t < T; t++) {
            const size_t ot = ((size_t)b * T + t) * rs + (size_t)h * D;
            memset(dq + ot, 0, D * sizeof(double));
            memset(dk + ot, 0, D * sizeof(double));
            memset(dv + ot, 0, D * sizeof(double));
        }
        for (int i = 0; i < T; i++) {
            size_t oi = ((size_t)b * T + i) * rs + (size_t)h * D;
            const double *qi = q + oi, *doi = dout + oi;
            double l = lse[((size_t)b * H + h) * T + i];
            double Di = 0;
            for (int e = 0; e < D; e++) Di += doi[e] * o[oi + e];
            const int s0 = doc_start ? doc_start[(size_t)b * T + i] : 0;
            int j0 = i - window + 1 > s0 ? i - window + 1 : s0;
            for (int j = j0; j <= i; j++) {
                size_t oj = ((size_t)b * T + j) * rs + (size_t)h * D;
                const double *kj = k + oj, *vj = v + oj;
                double s = 0, dp = 0;
                for (int e = 0; e < D; e++) {
                    s += qi[e] * kj[e];
                    dp += doi[e] * vj[e];
                }
                double p = exp(scale * s - l);
                double ds = p * (dp - Di) * scale;
                for (int e = 0; e < D; e++) {
                    dv[oj + e] += p * doi[e];
                    dq[oi + e] += ds * kj[e];
                    dk[oj + e] += ds * qi[e];
                }
            }
        }
    }
}

void attention_bwd_cpu(double *dq, double *dk, double *dv, const double *dout, const double *q,
                       const double *k, const double *v, const double *o, const double *lse,
                       int B, int T, int H, int D, int window, double scale) {
    attention_bwd_docs_cpu(dq, dk, dv, dout, q, k, v, o, lse, B, T, H, D, window, scale, NULL);
}
