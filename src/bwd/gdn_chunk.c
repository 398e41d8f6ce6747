// gdn_chunk.c — backward of the chunkwise gated delta rule (DESIGN 3.2), float64: the algorithm
// of the CUDA backward, checked against the token-level backward (gdn_token.c). All gradients =.
// Per (b, h) a forward scan recomputes the chunk-start states H_[t] (or they are read from p->hs
// when the forward saved them), then the reverse scan recomputes per chunk (rows Q, K (c,Dk), V,
// dO (c,Dv)):
//   G, gamma, Gam, T = (I + A)^{-1} diag(beta) (as L^{-1} diag(beta), L = I + A),
//   W = T diag(gamma) K,  Δ = T V - W H        (src/fwd/gdn_chunk.c for the definitions)
// and, with P = Q K^T ⊙ Gam, hdec_r = gamma_c / gamma_r, dH' the gradient of the next start state:
//   dΔ  = P^T dO + diag(hdec) K dH'
//   dQ  = diag(gamma) dO H^T + (dO Δ^T ⊙ Gam) K
//   dK  = (dO Δ^T ⊙ Gam)^T Q + diag(hdec) Δ dH'^T + diag(gamma) T^T dW + (X + X^T) K
//   dH  = (diag(gamma) Q)^T dO + gamma_c dH' - W^T dΔ                (to the previous chunk)
//   dW  = -dΔ H^T,  dV = T^T dΔ,  dT = dΔ V^T + dW (diag(gamma) K)^T
//   dA  = -strictLower(L^{-T} dT T^T),   dbeta_i = (L^{-T} dT)_ii + sum_j dA_ij Gam_ij (k_i.k_j)
//   X   = diag(beta) (dA ⊙ Gam)            (the gradient of K K^T through A)
// dg, cancellation-free: with dGam = dO Δ^T ⊙ Q K^T + diag(beta) dA ⊙ K K^T (strictly lower
// part; the diagonal of Gam is 1 for any G), dg_s = dL/dG summed over r >= s collects
//   pos_r = gamma_r q_r.(H dO_r) + gamma_r k_r.(T^T dW)_r (+ gamma_c <H, dH'> at r = c)  r >= s
//   t_r   = hdec_r k_r.(dH' Δ_r)    (hdec_r = exp(G_c - G_r): + at c, - at r; nets to r < s)
//   cross = sum_{i >= s > j} dGam_ij Gam_ij     (pairs inside [s, c] cancel and are not formed)
// so no O(1) terms are added and subtracted again when the gates decay strongly.
// Delta off: Δ = V, no T, W, A (dV = dΔ, no dbeta). Gate off: G = 0, dg is not written.
#include "bwd_cpu.h"
#include <math.h>
#include "../core/common.h"
#include "../fwd/cpu_threads.h"

// Scratch of one thread (C = chunk size), allocated once per call. Shapes in rows x cols.
typedef struct {
    double *Q, *K, *dO;       // (C,Dk) (C,Dk) (C,Dv) gathered rows of the chunk
    double *V;                // (C,Dv)
    double *beta;             // (C)
    double *G, *gam, *hdec;   // (C) G_r, exp(G_r), exp(G_c - G_r)
    double *Gam, *KK, *QK;    // (C,C) lower: Gam, k_i.k_j, q_i.k_j
    double *Linv, *Tm;        // (C,C) lower: (I + A)^{-1}, T = Linv diag(beta)
    double *Kg, *W;           // (C,Dk) diag(gamma) K, T Kg
    double *D;                // (C,Dv) Δ
    double *dD, *dV;          // (C,Dv)
    double *dQ, *dK, *dOH, *dKh, *dW, *dKg;  // (C,Dk)
    double *dP, *dGam, *dTm, *Y, *dA;        // (C,C) lower
    double *pos, *tr, *dB;    // (C)
    double *Hst;              // (nch,Dk,Dv) chunk-start states of the head
    double *dHn, *dHp;        // (Dk,Dv) gradients of the next / this chunk's start state
} gdn_chunk_ws;

// Gather the chunk [s, s+c) of head (b, h) and its gates.
static void gdn_chunk_load(gdn_chunk_ws *w, const gdn_cpu_params *p, int b, int h, int s, int c,
                           bool with_dO) {
    const int NH = p->H, Dk = p->Dk, Dv = p->Dv;
    double acc = 0;
    for (int r = 0; r < c; r++) {
        const size_t n = ((size_t)b * p->T + s + r) * NH + h;
        memcpy(w->Q + (size_t)r * Dk, p->q + n * Dk, Dk * sizeof(double));
        memcpy(w->K + (size_t)r * Dk, p->k + n * Dk, Dk * sizeof(double));
        memcpy(w->V + (size_t)r * Dv, p->v + n * Dv, Dv * sizeof(double));
        if (with_dO) memcpy(w->dO + (size_t)r * Dv, p->dO + n * Dv, Dv * sizeof(double));
        w->beta[r] = p->mode.delta ? p->beta[n] : 1.0;
        if (p->mode.gate) acc += p->g[n];
        w->G[r] = acc;
    }
    for (int r = 0; r < c; r++) {
        w->gam[r] = exp(w->G[r]);
        w->hdec[r] = exp(w->G[c - 1] - w->G[r]);
    }
}

// Recompute Gam, KK, Linv, T, Kg, W and Δ of a loaded chunk from its start state H (Dk,Dv).
static void gdn_chunk_prep(gdn_chunk_ws *w, const double *H, int c, int C, int Dk, int Dv,
                           bool delta) {
    for (int i = 0; i < c; i++)
        for (int j = 0; j <= i; j++) w->Gam[(size_t)i * C + j] = exp(w->G[i] - w->G[j]);
    if (!delta) {
        memcpy(w->D, w->V, (size_t)c * Dv * sizeof(double));
        return;
    }
    for (int i = 0; i < c; i++)
        for (int j = 0; j < i; j++) {
            double kk = 0;
            for (int e = 0; e < Dk; e++) kk += w->K[(size_t)i * Dk + e] * w->K[(size_t)j * Dk + e];
            w->KK[(size_t)i * C + j] = kk;
        }
    // (I + A) Linv = I with A_im = beta_i Gam_im KK_im (m < i): forward substitution
    for (int i = 0; i < c; i++)
        for (int j = 0; j <= i; j++) {
            double t = i == j ? 1.0 : 0.0;
            for (int m = j; m < i; m++)
                t -= w->beta[i] * w->Gam[(size_t)i * C + m] * w->KK[(size_t)i * C + m] *
                     w->Linv[(size_t)m * C + j];
            w->Linv[(size_t)i * C + j] = t;
            w->Tm[(size_t)i * C + j] = t * w->beta[j];
        }
    for (int r = 0; r < c; r++)
        for (int e = 0; e < Dk; e++) w->Kg[(size_t)r * Dk + e] = w->gam[r] * w->K[(size_t)r * Dk + e];
    // W = T Kg;  Δ = T V - W H
    for (int i = 0; i < c; i++) {
        double *Wi = w->W + (size_t)i * Dk, *Di = w->D + (size_t)i * Dv;
        memset(Wi, 0, Dk * sizeof(double));
        memset(Di, 0, Dv * sizeof(double));
        for (int j = 0; j <= i; j++) {
            const double t = w->Tm[(size_t)i * C + j];
            const double *Kgj = w->Kg + (size_t)j * Dk, *Vj = w->V + (size_t)j * Dv;
            for (int e = 0; e < Dk; e++) Wi[e] += t * Kgj[e];
            for (int e = 0; e < Dv; e++) Di[e] += t * Vj[e];
        }
        for (int m = 0; m < Dk; m++) {
            const double *Hm = H + (size_t)m * Dv;
            for (int e = 0; e < Dv; e++) Di[e] -= Wi[m] * Hm[e];
        }
    }
}

// The backward of head h of sequence b with one thread's scratch w (the struct of pointers is
// copied): writes the head's rows of dq, dk, dv, dg, dbeta and its dh0.
static void gdn_chunk_bwd_head(const gdn_cpu_params *p, gdn_chunk_ws w, int b, int h) {
    const int T = p->T, NH = p->H, Dk = p->Dk, Dv = p->Dv, C = p->chunk;
    const bool gate = p->mode.gate, delta = p->mode.delta;
    const size_t SS = (size_t)Dk * Dv;
    const int nch = T > 0 ? GDN_CDIV(T, C) : 0;
    double *Hst = w.Hst, *dHn = w.dHn, *dHp = w.dHp;
    const size_t sh = ((size_t)b * NH + h) * SS;
    // ---- forward scan: H_[0..nch), or the forward's (p->hs; h0 is already their first) ----
    if (p->hs) memcpy(Hst, p->hs + ((size_t)b * NH + h) * nch * SS, (size_t)nch * SS * sizeof(double));
    else if (p->h0) memcpy(Hst, p->h0 + sh, SS * sizeof(double));
    else memset(Hst, 0, SS * sizeof(double));
    for (int ci = 0; !p->hs && ci + 1 < nch; ci++) {
        const int s = ci * C, c = GDN_MIN(C, T - s);
        const double *H = Hst + (size_t)ci * SS;
        double *Hn = Hst + (size_t)(ci + 1) * SS;
        gdn_chunk_load(&w, p, b, h, s, c, false);
        gdn_chunk_prep(&w, H, c, C, Dk, Dv, delta);
        // H' = gamma_c H + sum_r hdec_r k_r Δ_r^T
        const double gc = w.gam[c - 1];
        for (int m = 0; m < Dk; m++) {
            double *Hnm = Hn + (size_t)m * Dv;
            const double *Hm = H + (size_t)m * Dv;
            for (int e = 0; e < Dv; e++) Hnm[e] = gc * Hm[e];
            for (int r = 0; r < c; r++) {
                const double kr = w.hdec[r] * w.K[(size_t)r * Dk + m];
                const double *Dr = w.D + (size_t)r * Dv;
                for (int e = 0; e < Dv; e++) Hnm[e] += kr * Dr[e];
            }
        }
    }
    // ---- reverse scan ----
    if (p->dht) memcpy(dHn, p->dht + sh, SS * sizeof(double));
    else memset(dHn, 0, SS * sizeof(double));
    for (int ci = nch - 1; ci >= 0; ci--) {
        const int s = ci * C, c = GDN_MIN(C, T - s);
        const double *H = Hst + (size_t)ci * SS;
        gdn_chunk_load(&w, p, b, h, s, c, true);
        gdn_chunk_prep(&w, H, c, C, Dk, Dv, delta);
        const double gc = w.gam[c - 1];
#define M2(X, i, j) (w.X[(size_t)(i) * C + (j)])
#define RK(X, r) (w.X + (size_t)(r) * Dk)
#define RV(X, r) (w.X + (size_t)(r) * Dv)
        // QK_ij = q_i.k_j (j <= i);  dP_ij = dO_i.Δ_j (j <= i)
        for (int i = 0; i < c; i++)
            for (int j = 0; j <= i; j++) {
                double qk = 0, dp = 0;
                for (int e = 0; e < Dk; e++) qk += RK(Q, i)[e] * RK(K, j)[e];
                for (int e = 0; e < Dv; e++) dp += RV(dO, i)[e] * RV(D, j)[e];
                M2(QK, i, j) = qk;
                M2(dP, i, j) = dp;
            }
        // dΔ_j = sum_{i>=j} QK_ij Gam_ij dO_i + hdec_j dH'^T k_j
        for (int j = 0; j < c; j++) {
            double *dDj = RV(dD, j);
            memset(dDj, 0, Dv * sizeof(double));
            for (int i = j; i < c; i++) {
                const double a = M2(QK, i, j) * M2(Gam, i, j);
                for (int e = 0; e < Dv; e++) dDj[e] += a * RV(dO, i)[e];
            }
            for (int m = 0; m < Dk; m++) {
                const double a = w.hdec[j] * RK(K, j)[m];
                const double *dHm = dHn + (size_t)m * Dv;
                for (int e = 0; e < Dv; e++) dDj[e] += a * dHm[e];
            }
        }
        // dOH_r = H dO_r, dKh_r = dH' Δ_r  (Dk each)
        for (int r = 0; r < c; r++)
            for (int m = 0; m < Dk; m++) {
                const double *Hm = H + (size_t)m * Dv, *dHm = dHn + (size_t)m * Dv;
                double s1 = 0, s2 = 0;
                for (int e = 0; e < Dv; e++) {
                    s1 += Hm[e] * RV(dO, r)[e];
                    s2 += dHm[e] * RV(D, r)[e];
                }
                RK(dOH, r)[m] = s1;
                RK(dKh, r)[m] = s2;
            }
        // dQ_i = gamma_i dOH_i + sum_{j<=i} dP_ij Gam_ij k_j
        // dK_j = sum_{i>=j} dP_ij Gam_ij q_i + hdec_j dKh_j
        for (int i = 0; i < c; i++) {
            double *dQi = RK(dQ, i), *dKi = RK(dK, i);
            for (int e = 0; e < Dk; e++) {
                dQi[e] = w.gam[i] * RK(dOH, i)[e];
                dKi[e] = w.hdec[i] * RK(dKh, i)[e];
            }
            for (int j = 0; j <= i; j++) {
                const double a = M2(dP, i, j) * M2(Gam, i, j);
                for (int e = 0; e < Dk; e++) dQi[e] += a * RK(K, j)[e];
            }
            for (int i2 = i; i2 < c; i2++) {
                const double a = M2(dP, i2, i) * M2(Gam, i2, i);
                for (int e = 0; e < Dk; e++) dKi[e] += a * RK(Q, i2)[e];
            }
        }
        // per-position and t_r terms of dG; dGam from P
        double HdH = 0;
        for (size_t e = 0; e < SS; e++) HdH += H[e] * dHn[e];
        for (int r = 0; r < c; r++) {
            double s1 = 0, s2 = 0;
            for (int e = 0; e < Dk; e++) {
                s1 += RK(Q, r)[e] * RK(dOH, r)[e];
                s2 += RK(K, r)[e] * RK(dKh, r)[e];
            }
            w.pos[r] = w.gam[r] * s1;
            w.tr[r] = w.hdec[r] * s2;
            for (int j = 0; j < r; j++) M2(dGam, r, j) = M2(dP, r, j) * M2(QK, r, j);
        }
        w.pos[c - 1] += gc * HdH;
        // dH_prev = (diag(gamma) Q)^T dO + gamma_c dH' - W^T dΔ
        for (int m = 0; m < Dk; m++) {
            double *dHpm = dHp + (size_t)m * Dv;
            const double *dHm = dHn + (size_t)m * Dv;
            for (int e = 0; e < Dv; e++) dHpm[e] = gc * dHm[e];
            for (int r = 0; r < c; r++) {
                const double a = w.gam[r] * RK(Q, r)[m];
                const double wr = delta ? RK(W, r)[m] : 0.0;
                for (int e = 0; e < Dv; e++) dHpm[e] += a * RV(dO, r)[e] - wr * RV(dD, r)[e];
            }
        }
        if (delta) {
            // dW_r = -H dΔ_r
            for (int r = 0; r < c; r++)
                for (int m = 0; m < Dk; m++) {
                    const double *Hm = H + (size_t)m * Dv;
                    double s1 = 0;
                    for (int e = 0; e < Dv; e++) s1 += Hm[e] * RV(dD, r)[e];
                    RK(dW, r)[m] = -s1;
                }
            // dV_j = sum_{i>=j} T_ij dΔ_i;  dKg_j = sum_{i>=j} T_ij dW_i
            for (int j = 0; j < c; j++) {
                double *dVj = RV(dV, j), *dKgj = RK(dKg, j);
                memset(dVj, 0, Dv * sizeof(double));
                memset(dKgj, 0, Dk * sizeof(double));
                for (int i = j; i < c; i++) {
                    const double t = M2(Tm, i, j);
                    for (int e = 0; e < Dv; e++) dVj[e] += t * RV(dD, i)[e];
                    for (int e = 0; e < Dk; e++) dKgj[e] += t * RK(dW, i)[e];
                }
            }
            // dT_ij = dΔ_i.V_j + dW_i.Kg_j  (j <= i; the upper part never reaches dA, dbeta)
            for (int i = 0; i < c; i++)
                for (int j = 0; j <= i; j++) {
                    double s1 = 0;
                    for (int e = 0; e < Dv; e++) s1 += RV(dD, i)[e] * RV(V, j)[e];
                    for (int e = 0; e < Dk; e++) s1 += RK(dW, i)[e] * RK(Kg, j)[e];
                    M2(dTm, i, j) = s1;
                }
            // Y = dT T^T (m > j);  dA_ij = -sum_{m>=i} Linv_mi Y_mj (j < i)
            for (int m = 0; m < c; m++)
                for (int j = 0; j < m; j++) {
                    double s1 = 0;
                    for (int n = 0; n <= j; n++) s1 += M2(dTm, m, n) * M2(Tm, j, n);
                    M2(Y, m, j) = s1;
                }
            for (int i = 0; i < c; i++) {
                double db = 0;
                for (int m = i; m < c; m++) db += M2(Linv, m, i) * M2(dTm, m, i);
                for (int j = 0; j < i; j++) {
                    double s1 = 0;
                    for (int m = i; m < c; m++) s1 += M2(Linv, m, i) * M2(Y, m, j);
                    const double dA = -s1, gk = M2(Gam, i, j) * M2(KK, i, j);
                    M2(dA, i, j) = dA;
                    db += dA * gk;
                    M2(dGam, i, j) += dA * w.beta[i] * M2(KK, i, j);
                }
                w.dB[i] = db;
            }
            // dK += X K + X^T K, X_ij = beta_i dA_ij Gam_ij (j < i); dK += gamma dKg
            for (int i = 0; i < c; i++) {
                double *dKi = RK(dK, i);
                for (int j = 0; j < i; j++) {
                    const double x = w.beta[i] * M2(dA, i, j) * M2(Gam, i, j);
                    double *dKj = RK(dK, j);
                    for (int e = 0; e < Dk; e++) {
                        dKi[e] += x * RK(K, j)[e];
                        dKj[e] += x * RK(K, i)[e];
                    }
                }
            }
            for (int r = 0; r < c; r++) {
                double s1 = 0;
                for (int e = 0; e < Dk; e++) {
                    RK(dK, r)[e] += w.gam[r] * RK(dKg, r)[e];
                    s1 += RK(K, r)[e] * RK(dKg, r)[e];
                }
                w.pos[r] += w.gam[r] * s1;
            }
        } else {
            memcpy(w.dV, w.dD, (size_t)c * Dv * sizeof(double));
        }
        // scatter
        for (int r = 0; r < c; r++) {
            const size_t n = ((size_t)b * T + s + r) * NH + h;
            memcpy(p->dq + n * Dk, RK(dQ, r), Dk * sizeof(double));
            memcpy(p->dk + n * Dk, RK(dK, r), Dk * sizeof(double));
            memcpy(p->dv + n * Dv, RV(dV, r), Dv * sizeof(double));
            if (delta) p->dbeta[n] = w.dB[r];
        }
        if (gate) {
            // dg_s = sum_{r>=s} pos_r + sum_{r<s} t_r + sum_{i>=s>j} dGam_ij Gam_ij
            // (sums by additions only: pos becomes its reverse cumulative sum)
            for (int r = c - 2; r >= 0; r--) w.pos[r] += w.pos[r + 1];
            double pre = 0;
            for (int sx = 0; sx < c; sx++) {
                double cross = 0;
                for (int i = sx; i < c; i++)
                    for (int j = 0; j < sx; j++) cross += M2(dGam, i, j) * M2(Gam, i, j);
                p->dg[((size_t)b * T + s + sx) * NH + h] = w.pos[sx] + pre + cross;
                pre += w.tr[sx];
            }
        }
#undef M2
#undef RK
#undef RV
        double *tmp = dHn;
        dHn = dHp;
        dHp = tmp;
    }
    if (p->dh0) memcpy(p->dh0 + sh, dHn, SS * sizeof(double));
}

void gdn_chunk_bwd_cpu(const gdn_cpu_params *p) {
    if (p->doc_start) {  // each document on its own (src/fwd/docs.c)
        gdn_docs_run_cpu(p, gdn_chunk_bwd_cpu);
        return;
    }
    const int B = p->B, T = p->T, NH = p->H, Dk = p->Dk, Dv = p->Dv, C = p->chunk;
    if (B < 1 || T < 0 || NH < 1 || Dk < 1 || Dv < 1 || C < 1)
        gdn_die("gdn_chunk_bwd_cpu: bad shape B=%d T=%d H=%d Dk=%d Dv=%d chunk=%d", B, T, NH, Dk,
                Dv, C);
    const size_t SS = (size_t)Dk * Dv, CC = (size_t)C * C, CK = (size_t)C * Dk, CV = (size_t)C * Dv;
    const int nch = T > 0 ? GDN_CDIV(T, C) : 0;
    // (b, h) pairs are independent: one per loop iteration, split over the threads, each with
    // its own scratch.
    GDN_OMP(parallel)
    {
        gdn_chunk_ws w;
        struct { double **ptr; size_t n; } tab[] = {
            {&w.Q, CK}, {&w.K, CK}, {&w.dO, CV}, {&w.V, CV}, {&w.beta, C}, {&w.G, C},
            {&w.gam, C}, {&w.hdec, C}, {&w.Gam, CC}, {&w.KK, CC}, {&w.QK, CC}, {&w.Linv, CC},
            {&w.Tm, CC}, {&w.Kg, CK}, {&w.W, CK}, {&w.D, CV}, {&w.dD, CV}, {&w.dV, CV},
            {&w.dQ, CK}, {&w.dK, CK}, {&w.dOH, CK}, {&w.dKh, CK}, {&w.dW, CK}, {&w.dKg, CK},
            {&w.dP, CC}, {&w.dGam, CC}, {&w.dTm, CC}, {&w.Y, CC}, {&w.dA, CC}, {&w.pos, C},
            {&w.tr, C}, {&w.dB, C}, {&w.Hst, (size_t)(nch > 0 ? nch : 1) * SS}, {&w.dHn, SS},
            {&w.dHp, SS},
        };
        const int ntab = (int)(sizeof tab / sizeof tab[0]);
        for (int i = 0; i < ntab; i++) *tab[i].ptr = gdn_malloc(tab[i].n * sizeof(double));
        GDN_OMP(for schedule(static))
        for (int bh = 0; bh < B * NH; bh++) gdn_chunk_bwd_head(p, w, bh / NH, bh % NH);
        for (int i = 0; i < ntab; i++) free(*tab[i].ptr);
    }
}
