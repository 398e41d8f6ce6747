// gdn_chunk.c — the gated delta rule chunk by chunk (DESIGN 3.1), float64: the algorithm of the
// CUDA kernel, written plainly so that it can be checked against the token recurrence
// (src/fwd/gdn_token.c) and the kernel against it. Per (b, h) and chunk of c <= C tokens with
// rows Q, K (c,Dk), V (c,Dv), gates g, beta (c), start state H (Dk,Dv):
//   G_r = g_1 + .. + g_r,  gamma_r = exp(G_r),  Gam_ij = exp(G_i - G_j) (j <= i, else 0)
//   A   = strictLower(diag(beta) (Gam ⊙ K K^T))
//   T   = (I + A)^{-1} diag(beta)           forward substitution, T lower triangular
//   W   = T diag(gamma) K,  U = T V,  Δ = U - W H     (delta off: Δ = V)
//   O   = diag(gamma) Q H + (Q K^T ⊙ Gam) Δ
//   H'  = gamma_c H + (diag(gamma_c / gamma) K)^T Δ
// Gam is formed from the differences G_i - G_j with the mask applied before exp, so nothing
// overflows when gates are strong (exp(-G_j) alone would). Gate off: G = 0, Gam = causal mask.
#include "fwd_cpu.h"
#include <math.h>
#include "../core/common.h"
#include "cpu_threads.h"

void gdn_chunk_fwd_cpu(const gdn_cpu_params *p) {
    if (p->doc_start) {  // each document on its own (src/fwd/docs.c)
        gdn_docs_run_cpu(p, gdn_chunk_fwd_cpu);
        return;
    }
    const int B = p->B, T = p->T, NH = p->H, Dk = p->Dk, Dv = p->Dv, C = p->chunk;
    if (B < 1 || T < 0 || NH < 1 || Dk < 1 || Dv < 1 || C < 1)
        gdn_die("gdn_chunk_fwd_cpu: bad shape B=%d T=%d H=%d Dk=%d Dv=%d chunk=%d", B, T, NH, Dk,
                Dv, C);
    const bool gate = p->mode.gate, delta = p->mode.delta;
    const size_t SS = (size_t)Dk * Dv, CC = (size_t)C * C;
    const size_t rk = (size_t)NH * Dk, rv = (size_t)NH * Dv;  // token strides of q/k and v/o
    // (b, h) pairs are independent: one per loop iteration, split over the threads; each
    // thread's chunk scratch is its own, allocated once per call.
    GDN_OMP(parallel)
    {
        double *H = gdn_malloc(SS * sizeof(double));              // (Dk,Dv) state
        double *G = gdn_malloc((size_t)C * sizeof(double));       // (c) cumulative log gate
        double *gam = gdn_malloc((size_t)C * sizeof(double));     // (c) gamma_r = exp(G_r)
        double *hdec = gdn_malloc((size_t)C * sizeof(double));    // (c) exp(G_c - G_r)
        double *Gam = gdn_malloc(CC * sizeof(double));            // (c,c) lower incl. diagonal
        double *A = gdn_malloc(CC * sizeof(double));              // (c,c) strict lower
        double *Tm = gdn_malloc(CC * sizeof(double));             // (c,c) lower
        double *W = gdn_malloc((size_t)C * Dk * sizeof(double));  // (c,Dk)
        double *D = gdn_malloc((size_t)C * Dv * sizeof(double));  // (c,Dv) Δ
        GDN_OMP(for schedule(static))
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const size_t sh = ((size_t)b * NH + h) * SS;
            if (p->h0) memcpy(H, p->h0 + sh, SS * sizeof(double));
            else memset(H, 0, SS * sizeof(double));
            for (int s = 0; s < T; s += C) {
                const int c = GDN_MIN(C, T - s);
                const size_t n0 = ((size_t)b * T + s) * NH + h;  // row of the chunk's first token
                const double *Q = p->q + n0 * Dk, *K = p->k + n0 * Dk, *V = p->v + n0 * Dv;
                double *O = p->o + n0 * Dv;
                if (p->hs) memcpy(p->hs + (((size_t)b * NH + h) * GDN_CDIV(T, C) + s / C) * SS, H, SS * sizeof(double));
#define KR(r) (K + (size_t)(r) * rk)
#define QR(r) (Q + (size_t)(r) * rk)
#define VR(r) (V + (size_t)(r) * rv)
                double acc = 0;
                for (int r = 0; r < c; r++) {
                    if (gate) acc += p->g[n0 + (size_t)r * NH];
                    G[r] = acc;
                }
                for (int r = 0; r < c; r++) {
                    gam[r] = exp(G[r]);
                    hdec[r] = exp(G[c - 1] - G[r]);
                }
                for (int i = 0; i < c; i++)
                    for (int j = 0; j < c; j++)
                        Gam[(size_t)i * C + j] = j <= i ? exp(G[i] - G[j]) : 0.0;
                if (delta) {
                    // A_ij = beta_i Gam_ij k_i.k_j (j < i)
                    for (int i = 0; i < c; i++) {
                        double bi = p->beta[n0 + (size_t)i * NH];
                        for (int j = 0; j < i; j++) {
                            double kk = 0;
                            for (int e = 0; e < Dk; e++) kk += KR(i)[e] * KR(j)[e];
                            A[(size_t)i * C + j] = bi * Gam[(size_t)i * C + j] * kk;
                        }
                    }
                    // (I + A) T = diag(beta): T_ij = beta_i [i==j] - sum_{j<=m<i} A_im T_mj
                    for (int i = 0; i < c; i++) {
                        for (int j = 0; j <= i; j++) {
                            double t = i == j ? p->beta[n0 + (size_t)i * NH] : 0.0;
                            for (int m = j; m < i; m++) t -= A[(size_t)i * C + m] * Tm[(size_t)m * C + j];
                            Tm[(size_t)i * C + j] = t;
                        }
                    }
                    // W = T diag(gamma) K;  Δ = T V - W H
                    for (int i = 0; i < c; i++) {
                        double *Wi = W + (size_t)i * Dk, *Di = D + (size_t)i * Dv;
                        for (int e = 0; e < Dk; e++) Wi[e] = 0;
                        for (int e = 0; e < Dv; e++) Di[e] = 0;
                        for (int j = 0; j <= i; j++) {
                            double t = Tm[(size_t)i * C + j], tg = t * gam[j];
                            for (int e = 0; e < Dk; e++) Wi[e] += tg * KR(j)[e];
                            for (int e = 0; e < Dv; e++) Di[e] += t * VR(j)[e];
                        }
                        for (int m = 0; m < Dk; m++) {
                            const double *Hm = H + (size_t)m * Dv;
                            for (int e = 0; e < Dv; e++) Di[e] -= Wi[m] * Hm[e];
                        }
                    }
                } else {
                    for (int i = 0; i < c; i++) memcpy(D + (size_t)i * Dv, VR(i), Dv * sizeof(double));
                }
                // O_i = gamma_i Q_i H + sum_{j<=i} (q_i.k_j) Gam_ij Δ_j
                for (int i = 0; i < c; i++) {
                    double *Oi = O + (size_t)i * rv;
                    const double gi = gam[i];
                    for (int e = 0; e < Dv; e++) Oi[e] = 0;
                    for (int m = 0; m < Dk; m++) {
                        const double *Hm = H + (size_t)m * Dv;
                        double qm = gi * QR(i)[m];
                        for (int e = 0; e < Dv; e++) Oi[e] += qm * Hm[e];
                    }
                    for (int j = 0; j <= i; j++) {
                        double qk = 0;
                        for (int e = 0; e < Dk; e++) qk += QR(i)[e] * KR(j)[e];
                        qk *= Gam[(size_t)i * C + j];
                        const double *Dj = D + (size_t)j * Dv;
                        for (int e = 0; e < Dv; e++) Oi[e] += qk * Dj[e];
                    }
                }
                // H' = gamma_c H + sum_r exp(G_c - G_r) k_r Δ_r^T   (after O, which reads H)
                const double gc = gam[c - 1];
                for (int m = 0; m < Dk; m++) {
                    double *Hm = H + (size_t)m * Dv;
                    for (int e = 0; e < Dv; e++) Hm[e] *= gc;
                    for (int r = 0; r < c; r++) {
                        double kr = hdec[r] * KR(r)[m];
                        const double *Dr = D + (size_t)r * Dv;
                        for (int e = 0; e < Dv; e++) Hm[e] += kr * Dr[e];
                    }
                }
#undef KR
#undef QR
#undef VR
            }
            if (p->ht) memcpy(p->ht + sh, H, SS * sizeof(double));
        }
        free(D);
        free(W);
        free(Tm);
        free(A);
        free(Gam);
        free(hdec);
        free(gam);
        free(G);
        free(H);
    }
}
