// gdn_token.c — the gated delta rule token by token (DESIGN 3.3 forward), float64: the ground
// truth that the chunkwise algorithm (gdn_chunk.c) and every GPU kernel are checked against.
// Per (b, h), state H = S^T (Dk x Dv), alpha_t = exp(g_t) (1 when the gate is off):
//   S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,   o_t = S_t q_t
// written on H with u = H_{t-1}^T k_t (Dv):
//   H_t = alpha_t H_{t-1} + k_t w_t^T,  w_t = beta_t (v_t - alpha_t u)   (delta off: w_t = v_t)
//   o_t = H_t^T q_t
#include "fwd_cpu.h"
#include <math.h>
#include "../core/common.h"
#include "cpu_threads.h"

// One step in place: H (Dk,Dv) <- alpha H + k w^T; w (Dv) is scratch. The token-level backward
// replays the forward with it (src/bwd/gdn_token.c), so both see the same bits.
void gdn_token_step_cpu(double *H, double *w, const double *k, const double *v, double alpha,
                           double beta, bool delta, int Dk, int Dv) {
    if (delta) {
        for (int j = 0; j < Dv; j++) w[j] = 0;
        for (int i = 0; i < Dk; i++) {
            const double *Hi = H + (size_t)i * Dv;
            for (int j = 0; j < Dv; j++) w[j] += k[i] * Hi[j];   // u = H^T k
        }
        for (int j = 0; j < Dv; j++) w[j] = beta * (v[j] - alpha * w[j]);
    } else {
        for (int j = 0; j < Dv; j++) w[j] = v[j];
    }
    for (int i = 0; i < Dk; i++) {
        double *Hi = H + (size_t)i * Dv;
        for (int j = 0; j < Dv; j++) Hi[j] = alpha * Hi[j] + k[i] * w[j];
    }
}

void gdn_token_fwd_cpu(const gdn_cpu_params *p) {
    if (p->doc_start) {  // each document on its own (src/fwd/docs.c)
        gdn_docs_run_cpu(p, gdn_token_fwd_cpu);
        return;
    }
    const int B = p->B, T = p->T, NH = p->H, Dk = p->Dk, Dv = p->Dv;
    if (B < 1 || T < 0 || NH < 1 || Dk < 1 || Dv < 1)
        gdn_die("gdn_token_fwd_cpu: bad shape B=%d T=%d H=%d Dk=%d Dv=%d", B, T, NH, Dk, Dv);
    const size_t SS = (size_t)Dk * Dv;
    // (b, h) pairs are independent: split over the threads, each with its own H and w
    GDN_OMP(parallel)
    {
        double *H = gdn_malloc(SS * sizeof(double));   // (Dk,Dv) state of the current head
        double *w = gdn_malloc((size_t)Dv * sizeof(double));
        GDN_OMP(for schedule(static))
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const size_t sh = ((size_t)b * NH + h) * SS;  // offset of this head's state
            if (p->h0) memcpy(H, p->h0 + sh, SS * sizeof(double));
            else memset(H, 0, SS * sizeof(double));
            for (int t = 0; t < T; t++) {
                const size_t n = ((size_t)b * T + t) * NH + h;  // (b, t, h) row
                const double *q = p->q + n * Dk, *k = p->k + n * Dk, *v = p->v + n * Dv;
                double alpha = p->mode.gate ? exp(p->g[n]) : 1.0;
                double beta = p->mode.delta ? p->beta[n] : 1.0;
                gdn_token_step_cpu(H, w, k, v, alpha, beta, p->mode.delta, Dk, Dv);
                double *o = p->o + n * Dv;  // o = H^T q
                for (int j = 0; j < Dv; j++) o[j] = 0;
                for (int i = 0; i < Dk; i++) {
                    const double *Hi = H + (size_t)i * Dv;
                    for (int j = 0; j < Dv; j++) o[j] += q[i] * Hi[j];
                }
            }
            if (p->ht) memcpy(p->ht + sh, H, SS * sizeof(double));
        }
        free(w);
        free(H);
    }
}
