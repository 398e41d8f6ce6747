// decode.c — token-by-token inference in float64 (decode.h): the forward of model.c for one
// token at absolute position t, with the sequence's past carried in per-layer state.
//
// GDN layer, per head (DESIGN 3.3 on the transposed state H = S^T, dk x dv):
//   u = H^T k,  w = beta (v - alpha u)        (delta off: w = v)
//   H <- alpha H + k w^T,  o = H^T q          (alpha = exp(g), 1 with the gate off)
// which is S_t = alpha S (I - beta k k^T) + beta v k^T, o = S_t q, written without forming S.
// Short conv, per channel c: y_t = sum_{j<K} w[c,j] x_{t-(K-1)+j} (x at negative time = 0),
// the past K-1 inputs in a ring indexed by time mod (K-1).
// Attention layer: q, k roped at position t (rotate-half, theta_i = base^(-2i/D)); k, v kept in
// a ring of `cap` slots indexed by time mod cap; query t sees times max(0, t-window+1)..t, which
// fit in the ring because cap >= min(window, max_len). Scores, max, log-sum-exp and the weighted
// sum run in the same order as attention_fwd_cpu, so the result agrees to rounding.
//
// Memory: one block, state first (zeroed by decoder_reset), then scratch for one token; plus
// a host float64 copy of the parameters (refreshed by decoder_reset).
#include "decode.h"
#include <math.h>
#include "../core/common.h"
#include "../fwd/fwd_cpu.h"

typedef struct {
    double logit;
    int id;
} cand;

typedef struct {
    double *S;                 // GDN: (H, dk, dv) states H = S^T per head
    double *hist[3];           // GDN conv: (K-1, C) past inputs of q, k, v (ring over time)
    double *kc, *vc;           // attention: (cap, Ha*Da) roped keys, values (ring over time)
    int cap, window;           // ring slots; visible past (A layers: max_len)
} layer_state;

struct decoder {
    const model *m;
    int max_len, pos;
    double *w;                 // (n_elems) host copy of the parameters
    double *mem;               // one block: state, then scratch
    size_t used, state_end;    // carving cursor; elements of state at the front of mem
    layer_state *ls;           // (L)
    // scratch for one token
    double *x, *xn, *branch, *rstd;                  // (d) (d) (d) (1)
    double *ql, *kl, *vl, *qc, *kc, *vc, *qa, *ka, *va; // (hk|hv) GDN projections / conv / silu
    double *qn, *kn, *rq, *rk;                       // (hk) (hk) (H) (H)
    double *a, *b, *g, *beta, *z, *o, *on, *rstd_o, *wv; // (H)x4 (hv)x3 (H) (dv)
    double *aq, *ak, *av, *ao, *scores;              // (Ha*Da)x4, (max cap)
    double *mgate, *mup, *mh;                        // (F) x3
    double *logits;                                  // (V)
    cand *cands;                                     // (V) decoder_sample scratch
};

// Hands out n doubles from the block; in the planning pass (mem NULL) only counts.
static double *take(decoder *d, size_t n) {
    size_t off = d->used;
    d->used += (n + 7) & ~(size_t)7;  // 64-byte aligned pieces
    return d->mem ? d->mem + off : NULL;
}

static void layout(decoder *d) {
    const model *m = d->m;
    const gdn_config *c = &m->cfg;
    size_t hk = (size_t)m->H * m->dk, hv = (size_t)m->H * m->dv, ha = (size_t)m->Ha * m->Da;
    int K = c->gdn_conv_size, maxcap = 1;
    d->used = 0;
    for (int l = 0; l < m->L; l++) {
        layer_state *s = &d->ls[l];
        memset(s, 0, sizeof *s);
        char kind = m->lp[l].kind;
        if (kind == 'G') {
            s->S = take(d, (size_t)m->H * m->dk * m->dv);
            if (c->gdn_short_conv && K > 1) {
                s->hist[0] = take(d, (size_t)(K - 1) * hk);
                s->hist[1] = take(d, (size_t)(K - 1) * hk);
                s->hist[2] = take(d, (size_t)(K - 1) * hv);
            }
        } else {
            s->window = kind == 'A' ? d->max_len : m->window;
            s->cap = GDN_MIN(s->window, d->max_len);
            maxcap = GDN_MAX(maxcap, s->cap);
            s->kc = take(d, (size_t)s->cap * ha);
            s->vc = take(d, (size_t)s->cap * ha);
        }
    }
    d->state_end = d->used;
    d->x = take(d, m->d);
    d->xn = take(d, m->d);
    d->branch = take(d, m->d);
    d->rstd = take(d, 1);
    double **wide[] = {&d->ql, &d->kl, &d->qc, &d->kc, &d->qa, &d->ka, &d->qn, &d->kn};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++) *wide[i] = take(d, hk);
    double **wv[] = {&d->vl, &d->vc, &d->va, &d->z, &d->o, &d->on};
    for (size_t i = 0; i < sizeof wv / sizeof wv[0]; i++) *wv[i] = take(d, hv);
    double **heads[] = {&d->rq, &d->rk, &d->a, &d->b, &d->g, &d->beta, &d->rstd_o};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) *heads[i] = take(d, m->H);
    d->wv = take(d, m->dv);
    double **att[] = {&d->aq, &d->ak, &d->av, &d->ao};
    for (size_t i = 0; i < sizeof att / sizeof att[0]; i++) *att[i] = take(d, ha);
    d->scores = take(d, maxcap);
    d->mgate = take(d, m->F);
    d->mup = take(d, m->F);
    d->mh = take(d, m->F);
    d->logits = take(d, m->V);
}

decoder *decoder_create(const model *m, int max_len) {
    if (max_len < 1) gdn_die("decoder_create: max_len %d < 1", max_len);
    decoder *d = gdn_malloc(sizeof *d);
    d->m = m;
    d->max_len = max_len;
    d->ls = gdn_malloc(sizeof(layer_state) * (size_t)m->L);
    d->w = gdn_malloc(m->n_elems * sizeof(double));
    d->cands = gdn_malloc((size_t)m->V * sizeof(cand));
    layout(d);                                 // plan
    d->mem = gdn_malloc(d->used * sizeof(double));
    layout(d);                                 // carve
    decoder_reset(d);
    return d;
}

void decoder_reset(decoder *d) {
    for (int i = 0; i < d->m->n_params; i++)  // host float64 copy, same offsets as the model's
        model_param_download(d->m, i, d->w + d->m->params[i].offset);
    memset(d->mem, 0, d->state_end * sizeof(double));
    d->pos = 0;
}

int decoder_pos(const decoder *d) { return d->pos; }

void decoder_free(decoder *d) {
    if (!d) return;
    free(d->mem);
    free(d->w);
    free(d->ls);
    free(d->cands);
    free(d);
}

static const double *W(const decoder *d, int i) { return d->w + d->m->params[i].offset; }

// y (C) = causal depthwise conv at time t of x_t (C) and the ring hist (K-1, C); then x_t
// enters the ring.
static void conv_step(double *y, const double *xt, double *hist, const double *w, int C, int K,
                      int t) {
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int j = 0; j < K; j++) {
            int ts = t - (K - 1) + j;
            if (ts < 0) continue;
            double xv = j == K - 1 ? xt[c] : hist[(size_t)(ts % (K - 1)) * C + c];
            s += w[(size_t)c * K + j] * xv;
        }
        y[c] = s;
    }
    if (K > 1) memcpy(hist + (size_t)(t % (K - 1)) * C, xt, (size_t)C * sizeof(double));
}

static void gdn_step(decoder *d, int l) {
    const model *m = d->m;
    const gdn_config *c = &m->cfg;
    const layer_params *lp = &m->lp[l];
    layer_state *s = &d->ls[l];
    int dm = m->d, H = m->H, dk = m->dk, dv = m->dv, hk = H * dk, hv = H * dv;
    int K = c->gdn_conv_size;
    linear_fwd_cpu(d->ql, d->xn, W(d, lp->wq), NULL, 1, dm, hk);
    linear_fwd_cpu(d->kl, d->xn, W(d, lp->wk), NULL, 1, dm, hk);
    linear_fwd_cpu(d->vl, d->xn, W(d, lp->wv), NULL, 1, dm, hv);
    const double *qc = d->ql, *kc = d->kl, *vc = d->vl;
    if (c->gdn_short_conv) {
        conv_step(d->qc, d->ql, s->hist[0], W(d, lp->conv_q), hk, K, d->pos);
        conv_step(d->kc, d->kl, s->hist[1], W(d, lp->conv_k), hk, K, d->pos);
        conv_step(d->vc, d->vl, s->hist[2], W(d, lp->conv_v), hv, K, d->pos);
        qc = d->qc;
        kc = d->kc;
        vc = d->vc;
    }
    silu_fwd_cpu(d->qa, qc, (size_t)hk);
    silu_fwd_cpu(d->ka, kc, (size_t)hk);
    silu_fwd_cpu(d->va, vc, (size_t)hv);
    l2norm_fwd_cpu(d->qn, d->rq, d->qa, (size_t)H, dk, 1e-6, 1.0 / sqrt(dk));
    l2norm_fwd_cpu(d->kn, d->rk, d->ka, (size_t)H, dk, 1e-6, 1.0);
    gdn_mode mode = {c->gdn_gate, c->gdn_delta, c->gdn_allow_neg_eigval};
    if (c->gdn_gate) linear_fwd_cpu(d->a, d->xn, W(d, lp->wa), NULL, 1, dm, H);
    if (c->gdn_delta) linear_fwd_cpu(d->b, d->xn, W(d, lp->wb), NULL, 1, dm, H);
    gdn_gates_fwd_cpu(d->g, c->gdn_delta ? d->beta : NULL, c->gdn_gate ? d->a : NULL,
                      c->gdn_delta ? d->b : NULL, c->gdn_gate ? W(d, lp->A_log) : NULL,
                      c->gdn_gate ? W(d, lp->dt_bias) : NULL, 1, H, H, mode);
    for (int h = 0; h < H; h++) {
        double *Hs = s->S + (size_t)h * dk * dv, *w = d->wv;
        const double *q = d->qn + (size_t)h * dk, *k = d->kn + (size_t)h * dk;
        const double *v = d->va + (size_t)h * dv;
        double alpha = c->gdn_gate ? exp(d->g[h]) : 1.0;
        if (c->gdn_delta) {
            double beta = d->beta[h];
            for (int j = 0; j < dv; j++) w[j] = 0;
            for (int i = 0; i < dk; i++)                       // u = H^T k
                for (int j = 0; j < dv; j++) w[j] += k[i] * Hs[(size_t)i * dv + j];
            for (int j = 0; j < dv; j++) w[j] = beta * (v[j] - alpha * w[j]);
        } else {
            for (int j = 0; j < dv; j++) w[j] = v[j];
        }
        double *o = d->o + (size_t)h * dv;
        for (int j = 0; j < dv; j++) o[j] = 0;
        for (int i = 0; i < dk; i++) {                         // H <- alpha H + k w^T; o = H^T q
            double *Hi = Hs + (size_t)i * dv;
            for (int j = 0; j < dv; j++) {
                Hi[j] = alpha * Hi[j] + k[i] * w[j];
                o[j] += q[i] * Hi[j];
            }
        }
    }
    if (c->gdn_output_gate) linear_fwd_cpu(d->z, d->xn, W(d, lp->wz), NULL, 1, dm, hv);
    gated_rmsnorm_fwd_cpu(d->on, d->rstd_o, d->o, c->gdn_output_gate ? d->z : NULL,
                          W(d, lp->onorm), (size_t)H, dv, 1, dv, c->norm_eps);
    linear_fwd_cpu(d->branch, d->on, W(d, lp->wo), NULL, 1, hv, dm);
}

// In place rotate-half RoPE of one token at position t: (H, D).
static void rope_at(double *x, int t, int H, int D, double base) {
    int half = D / 2;
    for (int i = 0; i < half; i++) {
        double ang = t * pow(base, -2.0 * i / D);
        double cs = cos(ang), sn = sin(ang);
        for (int h = 0; h < H; h++) {
            double *xh = x + (size_t)h * D;
            double x1 = xh[i], x2 = xh[i + half];
            xh[i] = x1 * cs - x2 * sn;
            xh[i + half] = x2 * cs + x1 * sn;
        }
    }
}

static void attn_step(decoder *d, int l) {
    const model *m = d->m;
    const layer_params *lp = &m->lp[l];
    layer_state *s = &d->ls[l];
    int dm = m->d, Ha = m->Ha, Da = m->Da, ha = Ha * Da, t = d->pos;
    linear_fwd_cpu(d->aq, d->xn, W(d, lp->sq), NULL, 1, dm, ha);
    linear_fwd_cpu(d->ak, d->xn, W(d, lp->sk), NULL, 1, dm, ha);
    linear_fwd_cpu(d->av, d->xn, W(d, lp->sv), NULL, 1, dm, ha);
    rope_at(d->aq, t, Ha, Da, m->cfg.swa_rope_base);
    rope_at(d->ak, t, Ha, Da, m->cfg.swa_rope_base);
    memcpy(s->kc + (size_t)(t % s->cap) * ha, d->ak, (size_t)ha * sizeof(double));
    memcpy(s->vc + (size_t)(t % s->cap) * ha, d->av, (size_t)ha * sizeof(double));
    double scale = 1.0 / sqrt(Da), *sc = d->scores;
    int j0 = t - s->window + 1 > 0 ? t - s->window + 1 : 0;
    for (int h = 0; h < Ha; h++)
        attention_row_cpu(d->ao + (size_t)h * Da, d->aq + (size_t)h * Da, s->kc + (size_t)h * Da,
                          s->vc + (size_t)h * Da, (size_t)ha, s->cap, j0, t, Da, scale, sc);
    linear_fwd_cpu(d->branch, d->ao, W(d, lp->so), NULL, 1, ha, dm);
}

const double *decoder_step(decoder *d, int32_t token) {
    const model *m = d->m;
    int dm = m->d, F = m->F;
    double eps = m->cfg.norm_eps;
    if (token < 0 || token >= m->V)
        gdn_die("decoder_step: token %d outside the vocabulary [0, %d)", token, m->V);
    if (d->pos >= d->max_len)
        gdn_die("decoder_step: position %d is past the decoder's max_len %d\n"
                "HINT: create the decoder with a larger max_len, or decoder_reset it",
                d->pos, d->max_len);
    embedding_fwd_cpu(d->x, &token, W(d, m->wte), 1, dm);
    for (int l = 0; l < m->L; l++) {
        const layer_params *lp = &m->lp[l];
        rmsnorm_fwd_cpu(d->xn, d->rstd, d->x, W(d, lp->norm1), 1, dm, eps);
        if (lp->kind == 'G')
            gdn_step(d, l);
        else
            attn_step(d, l);
        for (int i = 0; i < dm; i++) d->x[i] += d->branch[i];
        rmsnorm_fwd_cpu(d->xn, d->rstd, d->x, W(d, lp->norm2), 1, dm, eps);
        linear_fwd_cpu(d->mgate, d->xn, W(d, lp->wgate), NULL, 1, dm, F);
        linear_fwd_cpu(d->mup, d->xn, W(d, lp->wup), NULL, 1, dm, F);
        swiglu_fwd_cpu(d->mh, d->mgate, d->mup, 1, F, (size_t)F);
        linear_fwd_cpu(d->branch, d->mh, W(d, lp->wdown), NULL, 1, F, dm);
        for (int i = 0; i < dm; i++) d->x[i] += d->branch[i];
    }
    rmsnorm_fwd_cpu(d->xn, d->rstd, d->x, W(d, m->norm_f), 1, dm, eps);
    linear_fwd_cpu(d->logits, d->xn, W(d, m->lm_head), NULL, 1, dm, m->V);
    d->pos++;
    return d->logits;
}

// Descending logit, then ascending id: a total order, so top-k is deterministic under ties.
static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit < b->logit ? 1 : -1;
    return (a->id > b->id) - (a->id < b->id);
}

// p_i = exp((l_i - l_max) / temperature) / Z over the k best; draw u ~ U[0, Z) and return the
// first i (in descending-logit order) whose cumulative weight exceeds u.
int32_t decoder_sample(decoder *d, const double *logits, double temperature, int top_k, rng_t *r) {
    int V = d->m->V;
    cand *c = d->cands;
    if (!(temperature >= 0)) gdn_die("decoder_sample: temperature %g < 0", temperature);
    for (int i = 0; i < V; i++) {
        if (!isfinite(logits[i]))
            gdn_die("decoder_sample: logit %d is %g (a diverged or broken checkpoint?)", i,
                    logits[i]);
        c[i] = (cand){logits[i], i};
    }
    qsort(c, (size_t)V, sizeof *c, cand_cmp);
    if (temperature == 0) return c[0].id;
    int k = (top_k <= 0 || top_k > V) ? V : top_k;
    double total = 0, best = c[0].logit;
    for (int i = 0; i < k; i++) {
        c[i].logit = exp((c[i].logit - best) / temperature);  // in [0, 1], the best is 1
        total += c[i].logit;
    }
    double u = rng_uniform(r) * total, acc = 0;
    for (int i = 0; i < k; i++) {
        acc += c[i].logit;
        if (u < acc) return c[i].id;
    }
    return c[k - 1].id;  // not reached: u < total, and acc ends equal to total (same sums)
}
