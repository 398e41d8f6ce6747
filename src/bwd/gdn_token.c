// gdn_token.c — backward of the gated delta rule token by token (DESIGN 3.3), float64: the
// ground truth for the chunkwise backward (gdn_chunk.c) and the GPU kernels. All gradients =.
// On H = S^T (Dk x Dv), with bd = beta_t, bi = beta_t (delta off: bd = 0, bi = 1) so that
//   H_t = alpha_t (I - bd k_t k_t^T) H_{t-1} + bi k_t v_t^T,   o_t = H_t^T q_t,
// walking t = T..1 with dH = dH_T + sum_{t' >= t} (propagated) q_t' do_t'^T:
//   dH   += q_t do_t^T                 dq_t = H_t do_t
//   u     = H_{t-1}^T k_t  (Dv)        y = dH^T k_t  (Dv)
//   dv_t  = bi y                       dbeta_t = (v_t - alpha_t u) . y
//   dalpha_t = <dH, H_{t-1}> - bd u . y,   dg_t = alpha_t dalpha_t
//   dk_t  = dH (bi v_t - alpha_t bd u) - alpha_t bd H_{t-1} y
//   dH   <- alpha_t (dH - bd k_t y^T)          ... dH_0 = dH at the end
// The states H_{t-1}, H_t are recomputed: the forward scan keeps one state every L = ceil(sqrt T)
// tokens, and each segment is re-run from its checkpoint (memory ~2 sqrt(T) states per head,
// the same float64 operations as the forward, so the recomputed states are bit-identical).
#include "bwd_cpu.h"
#include <math.h>
#include "../core/common.h"
#include "../fwd/cpu_threads.h"

void gdn_token_bwd_cpu(const gdn_cpu_params *p) {
    if (p->doc_start) {  // each document on its own (src/fwd/docs.c)
        gdn_docs_run_cpu(p, gdn_token_bwd_cpu);
        return;
    }
    const int B = p->B, T = p->T, NH = p->H, Dk = p->Dk, Dv = p->Dv;
    if (B < 1 || T < 0 || NH < 1 || Dk < 1 || Dv < 1)
        gdn_die("gdn_token_bwd_cpu: bad shape B=%d T=%d H=%d Dk=%d Dv=%d", B, T, NH, Dk, Dv);
    const bool gate = p->mode.gate, delta = p->mode.delta;
    const size_t SS = (size_t)Dk * Dv;
    int L = 1;  // segment length: ceil(sqrt(T))
    while ((long)L * L < T) L++;
    const int nseg = T > 0 ? GDN_CDIV(T, L) : 0;
    // (b, h) pairs are independent: split over the threads, each with its own scratch
    GDN_OMP(parallel)
    {
        // states at segment starts; states s0 .. s0+len of the segment being walked
        double *ck = gdn_malloc((size_t)(nseg > 0 ? nseg : 1) * SS * sizeof(double));
        double *Hs = gdn_malloc((size_t)(L + 1) * SS * sizeof(double));
        double *dH = gdn_malloc(SS * sizeof(double));
        double *w = gdn_malloc((size_t)Dv * sizeof(double));
        double *u = gdn_malloc((size_t)Dv * sizeof(double));
        double *y = gdn_malloc((size_t)Dv * sizeof(double));
        double *c = gdn_malloc((size_t)Dv * sizeof(double));
        GDN_OMP(for schedule(static))
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const size_t sh = ((size_t)b * NH + h) * SS;
#define ROW(t) (((size_t)b * T + (t)) * NH + h)
#define ALPHA(n) (gate ? exp(p->g[n]) : 1.0)
#define BETA(n) (delta ? p->beta[n] : 1.0)
            // forward scan: checkpoints
            double *H = Hs;
            if (p->h0) memcpy(H, p->h0 + sh, SS * sizeof(double));
            else memset(H, 0, SS * sizeof(double));
            for (int t = 0; t < T; t++) {
                if (t % L == 0) memcpy(ck + (size_t)(t / L) * SS, H, SS * sizeof(double));
                size_t n = ROW(t);
                gdn_token_step_cpu(H, w, p->k + n * Dk, p->v + n * Dv, ALPHA(n), BETA(n), delta, Dk, Dv);
            }
            // reverse scan
            if (p->dht) memcpy(dH, p->dht + sh, SS * sizeof(double));
            else memset(dH, 0, SS * sizeof(double));
            for (int sg = nseg - 1; sg >= 0; sg--) {
                const int s0 = sg * L, len = GDN_MIN(L, T - s0);
                memcpy(Hs, ck + (size_t)sg * SS, SS * sizeof(double));
                for (int r = 0; r < len; r++) {
                    size_t n = ROW(s0 + r);
                    memcpy(Hs + (size_t)(r + 1) * SS, Hs + (size_t)r * SS, SS * sizeof(double));
                    gdn_token_step_cpu(Hs + (size_t)(r + 1) * SS, w, p->k + n * Dk, p->v + n * Dv,
                                   ALPHA(n), BETA(n), delta, Dk, Dv);
                }
                for (int r = len - 1; r >= 0; r--) {
                    const size_t n = ROW(s0 + r);
                    const double *Hp = Hs + (size_t)r * SS, *Hc = Hs + (size_t)(r + 1) * SS;
                    const double *q = p->q + n * Dk, *k = p->k + n * Dk, *v = p->v + n * Dv;
                    const double *dO = p->dO + n * Dv;
                    const double a = ALPHA(n), bt = BETA(n);
                    const double bd = delta ? bt : 0.0, bi = bt;
                    // dH += q do^T; dq = H_t do
                    double *dq = p->dq + n * Dk;
                    for (int i = 0; i < Dk; i++) {
                        double *dHi = dH + (size_t)i * Dv;
                        const double *Hci = Hc + (size_t)i * Dv;
                        double s = 0;
                        for (int j = 0; j < Dv; j++) {
                            dHi[j] += q[i] * dO[j];
                            s += Hci[j] * dO[j];
                        }
                        dq[i] = s;
                    }
                    // u = H_{t-1}^T k, y = dH^T k, <dH, H_{t-1}>
                    double dHH = 0;
                    for (int j = 0; j < Dv; j++) u[j] = y[j] = 0;
                    for (int i = 0; i < Dk; i++) {
                        const double *Hpi = Hp + (size_t)i * Dv, *dHi = dH + (size_t)i * Dv;
                        for (int j = 0; j < Dv; j++) {
                            u[j] += k[i] * Hpi[j];
                            y[j] += k[i] * dHi[j];
                            dHH += dHi[j] * Hpi[j];
                        }
                    }
                    double *dv = p->dv + n * Dv;
                    double uy = 0, db = 0;
                    for (int j = 0; j < Dv; j++) {
                        dv[j] = bi * y[j];
                        uy += u[j] * y[j];
                        db += (v[j] - a * u[j]) * y[j];
                        c[j] = bi * v[j] - a * bd * u[j];
                    }
                    if (delta) p->dbeta[n] = db;
                    if (gate) p->dg[n] = a * (dHH - bd * uy);
                    // dk = dH c - a bd H_{t-1} y;  dH <- a (dH - bd k y^T)
                    double *dk = p->dk + n * Dk;
                    for (int i = 0; i < Dk; i++) {
                        double *dHi = dH + (size_t)i * Dv;
                        const double *Hpi = Hp + (size_t)i * Dv;
                        double s1 = 0, s2 = 0;
                        for (int j = 0; j < Dv; j++) {
                            s1 += dHi[j] * c[j];
                            s2 += Hpi[j] * y[j];
                        }
                        dk[i] = s1 - a * bd * s2;
                        for (int j = 0; j < Dv; j++) dHi[j] = a * (dHi[j] - bd * k[i] * y[j]);
                    }
                }
            }
            if (p->dh0) memcpy(p->dh0 + sh, dH, SS * sizeof(double));
#undef ROW
#undef ALPHA
#undef BETA
        }
        free(c);
        free(y);
        free(u);
        free(w);
        free(dH);
        free(Hs);
        free(ck);
    }
}
