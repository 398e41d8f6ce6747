// decode_cuda.cu — the GPU decoder (decode_cuda.h): decode.c's per-token forward on B rows, in
// the model's dtype, with the recurrent state in fp32.
//
// One step, for tokens tok (B):
//   x = wte[tok];  xn = rmsnorm(x, norm1_0)
//   per layer:     branch = mixer(xn);  x += branch, xn = rmsnorm(x, norm2)      (one fused op)
//                  branch = W_down swiglu(W_gate xn, W_up xn);  x += branch, xn = rmsnorm(x, next
//                  layer's norm1, or norm_f after the last)
//   logits = xn lm_head^T
// GDN mixer: q, k, v = W xn; conv + SiLU with the ring (or SiLU alone); L2 norm of q (x 1/sqrt dk)
// and k per head; g, beta from a = W_a xn, b = W_b xn (gdn_gates); the recurrent step; o normed
// by the gated RMSNorm with z = W_z xn; branch = W_o o. Attention mixer: q, k, v = W xn; RoPE at
// t, the K/V ring, attention over the window; branch = W_o o.
//
// Memory: two device blocks carved by one size table walked twice (plan, then carve): the state
// (zeroed by decoder_cuda_reset) and the per-token scratch; plus the token trace (B, max_len).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "decode_cuda.h"
#include "backend_cuda.h"
#include "sampling_cuda.h"
#include "../cuda/gemm.h"
#include "../cuda/ops.h"
#include "../fwd/decode_step.h"
#include "../core/cuda_check.h"

namespace {

struct layer_state {
    float *S;          // G: (B, H, dk, dv) states H = S^T
    void *hist[3];     // G with short conv: (B, K-1, hk | hk | hv) past q, k, v inputs
    void *kc, *vc;     // S / A: (B, cap, Ha*Da) roped keys, values
    int cap, window;   // ring slots, visible past
};

}  // namespace

struct decoder_cuda {
    const model *m;
    cuda_dtype dt;
    size_t e;                      // bytes of an activation / parameter element
    int B, max_len, pos;
    cudaStream_t stream;
    char *state, *scratch;         // the two blocks
    size_t state_bytes, scratch_bytes, used;
    layer_state *ls;               // (L)
    int *pos_dev;                  // (1) the position on the device (decode_step.h)
    int32_t *tok;                  // (B) this step's tokens
    int32_t *trace;                // (B, max_len) every drawn token at its position
    int *bad;                      // (1) sampling: 1 + a row with a non-finite logit
    double *sw;                    // (B, V) sampling weights
    // scratch for one token (B rows each); dt unless float
    void *x, *xn, *branch;                       // (B, d)
    float *rstd;                                 // (B)
    void *ql, *kl, *vl, *qa, *ka, *va, *qn, *kn; // (B, hk | hv)
    void *ga, *gb, *z, *o, *on;                  // (B, H) (B, H) (B, hv) x3
    float *rq, *rk, *g, *beta, *rstd_o;          // (B, H)
    void *aq, *ak, *av, *ao;                     // (B, Ha*Da)
    void *mg, *mu, *mh;                          // (B, F)
    void *logits;                                // (B, V)
    // CUDA graph of one draw + step (decoder_cuda_generate)
    bool graph_on;
    cudaGraphExec_t graph;
    sample_params graph_p;         // the parameters it was recorded with
};

namespace {

// Hands out `bytes` (256-byte aligned) from a block; in the planning pass (base NULL) only counts.
void *take(decoder_cuda *d, char *base, size_t bytes) {
    size_t off = d->used;
    d->used += (bytes + 255) & ~(size_t)255;
    return base ? base + off : nullptr;
}

void layout_state(decoder_cuda *d, char *base) {
    const model *m = d->m;
    const gdn_config *c = &m->cfg;
    size_t B = (size_t)d->B, hk = (size_t)m->H * m->dk, hv = (size_t)m->H * m->dv;
    size_t ha = (size_t)m->Ha * m->Da;
    int K = c->gdn_conv_size;
    d->used = 0;
    for (int l = 0; l < m->L; l++) {
        layer_state *s = &d->ls[l];
        memset(s, 0, sizeof *s);
        if (m->lp[l].kind == 'G') {
            s->S = (float *)take(d, base, B * m->H * m->dk * m->dv * sizeof(float));
            if (c->gdn_short_conv && K > 1) {
                s->hist[0] = take(d, base, B * (K - 1) * hk * d->e);
                s->hist[1] = take(d, base, B * (K - 1) * hk * d->e);
                s->hist[2] = take(d, base, B * (K - 1) * hv * d->e);
            }
        } else {
            s->window = m->lp[l].kind == 'A' ? d->max_len : m->window;
            s->cap = s->window < d->max_len ? s->window : d->max_len;
            s->kc = take(d, base, B * s->cap * ha * d->e);
            s->vc = take(d, base, B * s->cap * ha * d->e);
        }
    }
}

void layout_scratch(decoder_cuda *d, char *base) {
    const model *m = d->m;
    size_t B = (size_t)d->B, e = d->e, hk = (size_t)m->H * m->dk, hv = (size_t)m->H * m->dv;
    size_t ha = (size_t)m->Ha * m->Da, H = (size_t)m->H;
    d->used = 0;
    d->pos_dev = (int *)take(d, base, sizeof(int));
    d->bad = (int *)take(d, base, sizeof(int));
    d->tok = (int32_t *)take(d, base, B * sizeof(int32_t));
    d->trace = (int32_t *)take(d, base, B * d->max_len * sizeof(int32_t));
    d->sw = (double *)take(d, base, B * m->V * sizeof(double));
    d->x = take(d, base, B * m->d * e);
    d->xn = take(d, base, B * m->d * e);
    d->branch = take(d, base, B * m->d * e);
    d->rstd = (float *)take(d, base, B * sizeof(float));
    void **wk[] = {&d->ql, &d->kl, &d->qa, &d->ka, &d->qn, &d->kn};
    for (void **p : wk) *p = take(d, base, B * hk * e);
    void **wv[] = {&d->vl, &d->va, &d->z, &d->o, &d->on};
    for (void **p : wv) *p = take(d, base, B * hv * e);
    d->ga = take(d, base, B * H * e);
    d->gb = take(d, base, B * H * e);
    float **hs[] = {&d->rq, &d->rk, &d->g, &d->beta, &d->rstd_o};
    for (float **p : hs) *p = (float *)take(d, base, B * H * sizeof(float));
    void **at[] = {&d->aq, &d->ak, &d->av, &d->ao};
    for (void **p : at) *p = take(d, base, B * (ha > 0 ? ha : 1) * e);
    d->mg = take(d, base, B * m->F * e);
    d->mu = take(d, base, B * m->F * e);
    d->mh = take(d, base, B * m->F * e);
    d->logits = take(d, base, B * m->V * e);
}

const void *P(const decoder_cuda *d, int i) { return i < 0 ? nullptr : model_param(d->m, i); }

void gdn_mixer(decoder_cuda *d, int l) {
    const model *m = d->m;
    const gdn_config *c = &m->cfg;
    const layer_params *lp = &m->lp[l];
    layer_state *s = &d->ls[l];
    const cudaStream_t st = d->stream;
    const int B = d->B, dm = m->d, H = m->H, hk = H * m->dk, hv = H * m->dv, K = c->gdn_conv_size;
    cuda_linear_fwd(d->dt, d->ql, d->xn, P(d, lp->wq), B, dm, hk, st);
    cuda_linear_fwd(d->dt, d->kl, d->xn, P(d, lp->wk), B, dm, hk, st);
    cuda_linear_fwd(d->dt, d->vl, d->xn, P(d, lp->wv), B, dm, hv, st);
    if (c->gdn_short_conv && K > 1) {
        conv_step_params cp = {};
        cp.B = B;
        cp.K = K;
        const void *x[3] = {d->ql, d->kl, d->vl}, *w[3] = {P(d, lp->conv_q), P(d, lp->conv_k), P(d, lp->conv_v)};
        void *y[3] = {d->qa, d->ka, d->va};
        const int C[3] = {hk, hk, hv};
        for (int i = 0; i < 3; i++) {
            cp.C[i] = C[i];
            cp.x[i] = x[i];
            cp.ld[i] = (size_t)C[i];
            cp.w[i] = w[i];
            cp.hist[i] = s->hist[i];
            cp.y[i] = y[i];
        }
        cuda_conv_silu_step(d->dt, &cp, d->pos_dev, st);
    } else {
        // conv_size 1 with short_conv: y = w x, then SiLU (no ring)
        if (c->gdn_short_conv)
            gdn_die("decoder_cuda: gdn.conv_size %d with short_conv is not supported here", K);
        cuda_silu_fwd(d->dt, d->qa, d->ql, (size_t)B * hk, st);
        cuda_silu_fwd(d->dt, d->ka, d->kl, (size_t)B * hk, st);
        cuda_silu_fwd(d->dt, d->va, d->vl, (size_t)B * hv, st);
    }
    cuda_l2norm_fwd(d->dt, d->qn, d->rq, d->qa, (size_t)B * H, m->dk, 1e-6, 1.0 / sqrt(m->dk), st);
    cuda_l2norm_fwd(d->dt, d->kn, d->rk, d->ka, (size_t)B * H, m->dk, 1e-6, 1.0, st);
    gdn_mode mode = {c->gdn_gate, c->gdn_delta, c->gdn_allow_neg_eigval};
    if (c->gdn_gate) cuda_linear_fwd(d->dt, d->ga, d->xn, P(d, lp->wa), B, dm, H, st);
    if (c->gdn_delta) cuda_linear_fwd(d->dt, d->gb, d->xn, P(d, lp->wb), B, dm, H, st);
    cuda_gdn_gates_fwd(d->dt, d->g, d->beta, d->ga, d->gb, c->gdn_gate ? P(d, lp->A_log) : nullptr,
                       c->gdn_gate ? P(d, lp->dt_bias) : nullptr, B, H, (size_t)H, mode, st);
    gdn_step_params gp = {};
    gp.B = B;
    gp.H = H;
    gp.Dk = m->dk;
    gp.Dv = m->dv;
    gp.mode = mode;
    gp.q = d->qn;
    gp.k = d->kn;
    gp.v = d->va;
    gp.g = d->g;
    gp.beta = d->beta;
    gp.S = s->S;
    gp.o = d->o;
    cuda_gdn_step(d->dt, &gp, st);
    if (c->gdn_output_gate) cuda_linear_fwd(d->dt, d->z, d->xn, P(d, lp->wz), B, dm, hv, st);
    cuda_gated_rmsnorm_fwd(d->dt, d->on, d->rstd_o, d->o, c->gdn_output_gate ? d->z : nullptr,
                           P(d, lp->onorm), (size_t)B * H, m->dv, 1, (size_t)m->dv, c->norm_eps, st);
    cuda_linear_fwd(d->dt, d->branch, d->on, P(d, lp->wo), B, hv, dm, st);
}

void attn_mixer(decoder_cuda *d, int l) {
    const model *m = d->m;
    const layer_params *lp = &m->lp[l];
    layer_state *s = &d->ls[l];
    const cudaStream_t st = d->stream;
    const int B = d->B, dm = m->d, ha = m->Ha * m->Da;
    cuda_linear_fwd(d->dt, d->aq, d->xn, P(d, lp->sq), B, dm, ha, st);
    cuda_linear_fwd(d->dt, d->ak, d->xn, P(d, lp->sk), B, dm, ha, st);
    cuda_linear_fwd(d->dt, d->av, d->xn, P(d, lp->sv), B, dm, ha, st);
    attn_step_params ap = {};
    ap.B = B;
    ap.H = m->Ha;
    ap.D = m->Da;
    ap.cap = s->cap;
    ap.window = s->window;
    ap.base = m->cfg.swa_rope_base;
    ap.scale = 1.0 / sqrt(m->Da);
    ap.q = d->aq;
    ap.k = d->ak;
    ap.v = d->av;
    ap.kc = s->kc;
    ap.vc = s->vc;
    ap.o = d->ao;
    cuda_attn_step(d->dt, &ap, d->pos_dev, st);
    cuda_linear_fwd(d->dt, d->branch, d->ao, P(d, lp->so), B, ha, dm, st);
}

// The forward of one position from d->tok; ends by advancing pos_dev.
void forward_step(decoder_cuda *d) {
    const model *m = d->m;
    const cudaStream_t st = d->stream;
    const int B = d->B, dm = m->d, F = m->F;
    const double eps = m->cfg.norm_eps;
    cuda_embedding_fwd(d->dt, d->x, d->tok, P(d, m->wte), B, dm, st);
    cuda_rmsnorm_fwd(d->dt, d->xn, d->rstd, d->x, P(d, m->lp[0].norm1), B, dm, eps, st);
    for (int l = 0; l < m->L; l++) {
        const layer_params *lp = &m->lp[l];
        if (lp->kind == 'G')
            gdn_mixer(d, l);
        else
            attn_mixer(d, l);
        cuda_add_rmsnorm_fwd(d->dt, d->x, d->xn, d->rstd, d->x, d->branch, P(d, lp->norm2), B, dm,
                             eps, st);
        cuda_linear_fwd(d->dt, d->mg, d->xn, P(d, lp->wgate), B, dm, F, st);
        cuda_linear_fwd(d->dt, d->mu, d->xn, P(d, lp->wup), B, dm, F, st);
        cuda_swiglu_fwd(d->dt, d->mh, d->mg, d->mu, (size_t)B, F, (size_t)F, st);
        cuda_linear_fwd(d->dt, d->branch, d->mh, P(d, lp->wdown), B, F, dm, st);
        const int next = l + 1 < m->L ? m->lp[l + 1].norm1 : m->norm_f;
        cuda_add_rmsnorm_fwd(d->dt, d->x, d->xn, d->rstd, d->x, d->branch, P(d, next), B, dm, eps, st);
    }
    cuda_linear_fwd(d->dt, d->logits, d->xn, P(d, m->lm_head), B, dm, m->V, st);
    cuda_pos_advance(d->pos_dev, st);
}

void draw(decoder_cuda *d, const sample_params *p) {
    cuda_sample_tokens(d->dt, d->tok, d->logits, d->B, d->m->V, p, sample_key(p->seed), d->pos_dev,
                       d->trace, d->max_len, d->sw, d->bad, d->stream);
}

void drop_graph(decoder_cuda *d) {
    if (d->graph) CUDA_CHECK(cudaGraphExecDestroy(d->graph));
    d->graph = nullptr;
}

bool same_params(const sample_params &a, const sample_params &b) {
    return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p &&
           a.seed == b.seed;
}

void check_room(const decoder_cuda *d, int n) {
    if ((long)d->pos + n > d->max_len)
        gdn_die("decoder_cuda: position %d + %d tokens is past the decoder's max_len %d\n"
                "HINT: create the decoder with a larger max_len, or decoder_cuda_reset it",
                d->pos, n, d->max_len);
}

}  // namespace

extern "C" {

decoder_cuda *decoder_cuda_create(const model *m, int batch, int max_len) {
    if (batch < 1 || max_len < 1)
        gdn_die("decoder_cuda_create: batch %d and max_len %d must be >= 1", batch, max_len);
    bool bf16;
    if (m->be == backend_cuda_get(false)) bf16 = false;
    else if (m->be == backend_cuda_get(true)) bf16 = true;
    else gdn_die("decoder_cuda_create: the model is on the %s backend, not the CUDA one", m->be->name);
    decoder_cuda *d = (decoder_cuda *)gdn_malloc(sizeof *d);
    d->m = m;
    d->dt = bf16 ? CUDA_BF16 : CUDA_F32;
    d->e = bf16 ? 2 : 4;
    d->B = batch;
    d->max_len = max_len;
    d->graph_on = true;
    d->ls = (layer_state *)gdn_malloc(sizeof(layer_state) * (size_t)m->L);
    CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    layout_state(d, nullptr);
    d->state_bytes = d->used;
    layout_scratch(d, nullptr);
    d->scratch_bytes = d->used;
    CUDA_CHECK(cudaMalloc((void **)&d->state, d->state_bytes));
    CUDA_CHECK(cudaMalloc((void **)&d->scratch, d->scratch_bytes));
    CUDA_CHECK(cudaMemset(d->scratch, 0, d->scratch_bytes));
    layout_state(d, d->state);
    layout_scratch(d, d->scratch);
    decoder_cuda_reset(d);
    return d;
}

void decoder_cuda_free(decoder_cuda *d) {
    if (!d) return;
    CUDA_CHECK(cudaStreamSynchronize(d->stream));
    drop_graph(d);
    CUDA_CHECK(cudaFree(d->state));
    CUDA_CHECK(cudaFree(d->scratch));
    CUDA_CHECK(cudaStreamDestroy(d->stream));
    free(d->ls);
    free(d);
}

void decoder_cuda_reset(decoder_cuda *d) {
    CUDA_CHECK(cudaDeviceSynchronize());  // the model's stream may still write parameters
    CUDA_CHECK(cudaMemsetAsync(d->state, 0, d->state_bytes, d->stream));
    CUDA_CHECK(cudaMemsetAsync(d->pos_dev, 0, sizeof(int), d->stream));
    CUDA_CHECK(cudaMemsetAsync(d->bad, 0, sizeof(int), d->stream));
    d->pos = 0;
}

int decoder_cuda_pos(const decoder_cuda *d) { return d->pos; }

void decoder_cuda_sync(decoder_cuda *d) { CUDA_CHECK(cudaStreamSynchronize(d->stream)); }

void decoder_cuda_set_graph(decoder_cuda *d, bool on) {
    CUDA_CHECK(cudaStreamSynchronize(d->stream));
    d->graph_on = on;
    drop_graph(d);
}

void decoder_cuda_step(decoder_cuda *d, const int32_t *tokens) {
    check_room(d, 1);
    for (int b = 0; b < d->B; b++)
        if (tokens[b] < 0 || tokens[b] >= d->m->V)
            gdn_die("decoder_cuda_step: token %d of sequence %d outside the vocabulary [0, %d)",
                    tokens[b], b, d->m->V);
    // (pageable sources: each copy has taken the bytes when it returns)
    CUDA_CHECK(cudaMemcpyAsync(d->tok, tokens, (size_t)d->B * sizeof(int32_t),
                               cudaMemcpyHostToDevice, d->stream));
    CUDA_CHECK(cudaMemcpy2DAsync(d->trace + d->pos, (size_t)d->max_len * sizeof(int32_t), tokens,
                                 sizeof(int32_t), sizeof(int32_t), (size_t)d->B,
                                 cudaMemcpyHostToDevice, d->stream));
    forward_step(d);
    d->pos++;
}

void decoder_cuda_logits(decoder_cuda *d, double *dst) {
    const size_t n = (size_t)d->B * d->m->V;
    if (d->dt == CUDA_F32) {
        float *h = (float *)gdn_malloc(n * sizeof(float));
        CUDA_CHECK(cudaMemcpyAsync(h, d->logits, n * sizeof(float), cudaMemcpyDeviceToHost, d->stream));
        CUDA_CHECK(cudaStreamSynchronize(d->stream));
        for (size_t i = 0; i < n; i++) dst[i] = h[i];
        free(h);
    } else {
        uint16_t *h = (uint16_t *)gdn_malloc(n * sizeof(uint16_t));
        CUDA_CHECK(cudaMemcpyAsync(h, d->logits, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, d->stream));
        CUDA_CHECK(cudaStreamSynchronize(d->stream));
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)h[i] << 16;
            float f;
            memcpy(&f, &u, 4);
            dst[i] = f;
        }
        free(h);
    }
}

void decoder_cuda_generate(decoder_cuda *d, const sample_params *p, int n, int32_t *out) {
    char err[256];
    if (!sample_params_check(p, err, sizeof err)) gdn_die("decoder_cuda_generate: %s", err);
    if (n <= 0) return;
    if (d->pos == 0) gdn_die("decoder_cuda_generate: feed at least one token first (decoder_cuda_step)");
    check_room(d, n);
    const int pos0 = d->pos;
    for (int i = 0; i < n; i++) {
        if (d->graph_on && d->graph && !same_params(d->graph_p, *p)) drop_graph(d);
        if (!d->graph_on || (d->graph == nullptr && i == 0)) {
            draw(d, p);  // plain launches (and, the first time, every plan cached for the capture)
            forward_step(d);
        } else {
            if (!d->graph) {
                cudaGraph_t g;
                CUDA_CHECK(cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal));
                draw(d, p);
                forward_step(d);
                CUDA_CHECK(cudaStreamEndCapture(d->stream, &g));
                CUDA_CHECK(cudaGraphInstantiate(&d->graph, g, 0));
                CUDA_CHECK(cudaGraphDestroy(g));
                d->graph_p = *p;
            }
            CUDA_CHECK(cudaGraphLaunch(d->graph, d->stream));
        }
        d->pos++;
    }
    int bad = 0;
    CUDA_CHECK(cudaMemcpyAsync(&bad, d->bad, sizeof bad, cudaMemcpyDeviceToHost, d->stream));
    CUDA_CHECK(cudaStreamSynchronize(d->stream));
    if (bad)
        gdn_die("decoder_cuda_generate: sequence %d has a non-finite logit (a diverged or broken "
                "checkpoint?)", bad - 1);
    if (out)
        CUDA_CHECK(cudaMemcpy2D(out, (size_t)n * sizeof(int32_t), d->trace + pos0,
                                (size_t)d->max_len * sizeof(int32_t), (size_t)n * sizeof(int32_t),
                                (size_t)d->B, cudaMemcpyDeviceToHost));
}

}  // extern "C"
