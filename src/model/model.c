// model.c — description, parameter table, arenas, init, forward and backward of the whole
// network (DESIGN 2) over the op interface of backend.h.
//
// Residual stream per block l:  x_mid = x_in + drop(mixer(rmsnorm(x_in)))
//                               x_out = x_mid + drop(mlp(rmsnorm(x_mid)))
// then logits = rmsnorm(x_L) lm_head^T and the fused softmax cross-entropy, whose gradient
// overwrites the logits (the probabilities are never kept).
#include "model.h"
#include <limits.h>
#include <math.h>
#include "../core/common.h"
#include "../core/rng.h"
#include "../fwd/cpu_threads.h"

#define ELEM(m, c) ((m)->be->elem[c])

void *model_param(const model *m, int i) {
    return (char *)m->param_mem + m->params[i].offset * ELEM(m, BE_PARAM);
}
void *model_grad(const model *m, int i) {
    return (char *)m->grad_mem + m->params[i].offset * ELEM(m, BE_GRAD);
}
void *model_opt(const model *m, void *base, int i) {
    return (char *)base + m->params[i].offset * ELEM(m, BE_OPT);
}
void model_param_download(const model *m, int i, double *dst) {
    if (m->master)
        m->be->download(dst, model_opt(m, m->master, i), m->params[i].numel, BE_OPT);
    else
        m->be->download(dst, model_param(m, i), m->params[i].numel, BE_PARAM);
}
void model_param_upload(model *m, int i, const double *src) {
    m->be->upload(model_param(m, i), src, m->params[i].numel, BE_PARAM);
    if (m->master) m->be->upload(model_opt(m, m->master, i), src, m->params[i].numel, BE_OPT);
}

static int add_param(model *m, param_kind kind, int rows, int cols, bool decay, const char *fmt,
                     int layer, const char *what) {
    if (m->n_params >= MAX_PARAMS) gdn_die("model: too many parameter tensors");
    param_info *p = &m->params[m->n_params];
    if (layer >= 0)
        snprintf(p->name, sizeof p->name, fmt, layer, what);
    else
        snprintf(p->name, sizeof p->name, "%s", what);
    p->kind = kind;
    p->rows = rows;
    p->cols = cols;
    p->numel = (size_t)rows * cols;
    p->offset = m->n_elems;
    p->decay = decay;
    // keep every tensor 64-byte aligned inside the arenas (8 doubles / 32 bf16)
    m->n_elems += (p->numel + 31) & ~(size_t)31;
    return m->n_params++;
}

static void build_table(model *m) {
    const gdn_config *c = &m->cfg;
    int d = m->d;
    for (int l = 0; l < m->L; l++) {
        layer_params *lp = &m->lp[l];
        memset(lp, -1, sizeof *lp);
        lp->kind = config_layer_kind(c, l);
        const char *F = "layers.%d.%s";
        lp->norm1 = add_param(m, PARAM_NORM, 1, d, false, F, l, "norm1");
        if (lp->kind == 'G') {
            int hk = m->H * m->dk, hv = m->H * m->dv;
            lp->wq = add_param(m, PARAM_LINEAR, hk, d, true, F, l, "gdn.q_proj");
            lp->wk = add_param(m, PARAM_LINEAR, hk, d, true, F, l, "gdn.k_proj");
            lp->wv = add_param(m, PARAM_LINEAR, hv, d, true, F, l, "gdn.v_proj");
            if (c->gdn_gate) lp->wa = add_param(m, PARAM_LINEAR, m->H, d, true, F, l, "gdn.a_proj");
            if (c->gdn_delta) lp->wb = add_param(m, PARAM_LINEAR, m->H, d, true, F, l, "gdn.b_proj");
            if (c->gdn_output_gate) lp->wz = add_param(m, PARAM_LINEAR, hv, d, true, F, l, "gdn.g_proj");
            if (c->gdn_short_conv) {
                int K = c->gdn_conv_size;
                lp->conv_q = add_param(m, PARAM_CONV, hk, K, true, F, l, "gdn.q_conv");
                lp->conv_k = add_param(m, PARAM_CONV, hk, K, true, F, l, "gdn.k_conv");
                lp->conv_v = add_param(m, PARAM_CONV, hv, K, true, F, l, "gdn.v_conv");
            }
            if (c->gdn_gate) {
                lp->A_log = add_param(m, PARAM_ALOG, 1, m->H, false, F, l, "gdn.A_log");
                lp->dt_bias = add_param(m, PARAM_DTBIAS, 1, m->H, false, F, l, "gdn.dt_bias");
            }
            lp->onorm = add_param(m, PARAM_NORM, 1, m->dv, false, F, l, "gdn.o_norm");
            lp->wo = add_param(m, PARAM_OUTPROJ, d, hv, true, F, l, "gdn.o_proj");
        } else {
            int ha = m->Ha * m->Da;
            lp->sq = add_param(m, PARAM_LINEAR, ha, d, true, F, l, "attn.q_proj");
            lp->sk = add_param(m, PARAM_LINEAR, ha, d, true, F, l, "attn.k_proj");
            lp->sv = add_param(m, PARAM_LINEAR, ha, d, true, F, l, "attn.v_proj");
            lp->so = add_param(m, PARAM_OUTPROJ, d, ha, true, F, l, "attn.o_proj");
        }
        lp->norm2 = add_param(m, PARAM_NORM, 1, d, false, F, l, "norm2");
        lp->wgate = add_param(m, PARAM_LINEAR, m->F, d, true, F, l, "mlp.gate_proj");
        lp->wup = add_param(m, PARAM_LINEAR, m->F, d, true, F, l, "mlp.up_proj");
        lp->wdown = add_param(m, PARAM_OUTPROJ, d, m->F, true, F, l, "mlp.down_proj");
    }
    m->norm_f = add_param(m, PARAM_NORM, 1, d, false, NULL, -1, "norm_f");
    m->wte = add_param(m, PARAM_EMBED, m->V, d, c->wd_embeddings, NULL, -1, "embed");
    m->lm_head = c->tie_embeddings ? m->wte
                                   : add_param(m, PARAM_LINEAR, m->V, d, true, NULL, -1, "lm_head");
}

// The optimizer arena: AdamW m and v for the flat elements [lo, hi) (all of them, or a ZeRO-1
// shard; an empty shard keeps 1 element), then the master weights (whole) when the backend keeps
// them. Run twice like carve: planning, then for real.
static void carve_opt(model *m, size_t lo, size_t hi) {
    size_t O = ELEM(m, BE_OPT), n = GDN_MAX(hi - lo, (size_t)1);
    m->opt_m = arena_alloc(&m->a_opt, n * O);
    m->opt_v = arena_alloc(&m->a_opt, n * O);
    m->master = m->be->master ? arena_alloc(&m->a_opt, m->n_elems * O) : NULL;
    m->opt_lo = lo;
    m->opt_n = hi - lo;
}

// GDN's input projections q, k, v, a, b, z (those present, in build_table's order) all read
// xn1. When the backend asks for it (fuse_projections: CUDA) and their weights are contiguous
// rows of the arenas (no alignment padding between them: always when H d is a multiple of 32),
// they run as one GEMM into one (N, w) buffer whose columns they are, and one GEMM backward:
// all six when q, k, v pass the short conv (conv_silu reads and writes strided rows), else a, b
// and z (SiLU alone has no strided form). cuBLASLt ran the out = H projections a, b at 4-5
// TFLOP/s and q, k (out 512) at ~500, the wide GEMM runs at ~700 (bench/model_gpu.md). The CPU
// reference keeps a GEMM per weight: OpenBLAS's bits for an odd-width output can depend on its
// thread count, and the reference's may not.
typedef struct {
    bool fused, qkv;     // a GEMM for the group; q, k, v in it (else a, b, z only)
    bool conv3;          // qkv and the three conv weights contiguous: one conv_silu3 call
    int first, w;        // fused: the group's first weight (its base) and its rows
    size_t cq, ck, cv, ca, cb, cz;  // fused: the columns of each in the (N, w) output
    size_t ld_q, ld_v;   // row strides of q_lin, k_lin (ld_q) and v_lin: w, or packed
    size_t ld_ab, zld;   // row strides of a, b (gates ops) and z (gated norm): w, or packed
    int zh;              // heads per z row (gated norm: H fused, 1 packed)
} inproj_layout;
// The group of the weights ids[0..n) (absent ones -1): *fused when the backend fuses and they
// are contiguous and not all absent; col[i] the column of member i; returns the rows (w).
static int inproj_group(const model *m, const int *ids, int n, bool *fused, int *first, size_t *col) {
    size_t w = 0, next = 0;
    *fused = m->be->fuse_projections;
    *first = -1;
    for (int i = 0; i < n; i++) {
        col[i] = 0;
        if (ids[i] < 0) continue;
        const param_info *p = &m->params[ids[i]];
        if (*first < 0)
            *first = ids[i];
        else if (p->offset != next)
            *fused = false;
        next = p->offset + p->numel;
        col[i] = w;
        w += (size_t)p->rows;
    }
    *fused &= *first >= 0;
    return (int)w;
}
static inproj_layout gdn_inproj(const model *m, int l) {
    const layer_params *lp = &m->lp[l];
    const int all[6] = {lp->wq, lp->wk, lp->wv, lp->wa, lp->wb, lp->wz};
    inproj_layout o = {0};
    size_t col[6];
    o.w = inproj_group(m, all, 6, &o.fused, &o.first, col);
    o.qkv = o.fused && m->cfg.gdn_short_conv;
    if (o.qkv) {
        o.cq = col[0], o.ck = col[1], o.cv = col[2], o.ca = col[3], o.cb = col[4], o.cz = col[5];
    } else {
        o.w = inproj_group(m, all + 3, 3, &o.fused, &o.first, col);
        o.ca = col[0], o.cb = col[1], o.cz = col[2];
    }
    if (o.qkv) {
        const param_info *cq = &m->params[lp->conv_q], *ck = &m->params[lp->conv_k];
        o.conv3 = ck->offset == cq->offset + cq->numel &&
                  m->params[lp->conv_v].offset == ck->offset + ck->numel;
    }
    const size_t hk = (size_t)m->H * m->dk, hv = (size_t)m->H * m->dv;
    o.ld_q = o.qkv ? (size_t)o.w : hk;
    o.ld_v = o.qkv ? (size_t)o.w : hv;
    o.ld_ab = o.fused ? (size_t)o.w : (size_t)m->H;
    o.zh = o.fused ? m->H : 1;
    o.zld = o.fused ? (size_t)o.w : (size_t)m->dv;
    return o;
}

// The SwiGLU MLP's gate and up projections both read xn2. When the backend fuses projections
// (fuse_projections) and up_proj's rows follow gate_proj's in the arenas (no padding between
// them: always when F d is a multiple of 32; add_param adds them one after the other), W_gate
// and W_up are one (2F, d) weight: one GEMM writes the (N, 2F) gate|up matrix (gate columns
// [0, F), up [F, 2F): m_up = m_gate + F, row stride 2F), swiglu reads both halves with that
// stride, and the backward takes d gate|up in one (N, 2F) matrix, one GEMM for dx (k = 2F: no
// second, accumulating GEMM) and one for the (2F, d) weight gradient. Only when F activations
// are a multiple of 16 bytes (F % 8 in bf16): then the up half and every row start 16-byte
// aligned and the GPU's SwiGLU keeps its 16-byte packs (else it would go element by element).
// The checkpoint keeps the two named tensors. The CPU reference keeps a GEMM per weight
// (gdn_inproj's reason).
static bool mlp_fused(const model *m, int l) {
    const param_info *g = &m->params[m->lp[l].wgate], *u = &m->params[m->lp[l].wup];
    return m->mlp_fuse && u->offset == g->offset + g->numel &&
           (size_t)m->F * ELEM(m, BE_ACT) % 16 == 0;
}
// Row stride of gate, up and their gradients: 2F fused, F packed.
static size_t mlp_ld(const model *m, int l) { return (mlp_fused(m, l) ? 2 : 1) * (size_t)m->F; }

// Rows of the LM head's logits chunk: train.head_chunk_rows when set (at most N); else all N
// when the logits of the whole batch fit in HEAD_CHUNK_BYTES, else the largest multiple of 128
// rows that does (at least 128). At fla-220m's 32768 x 32000 bf16 logits (2 GiB) that is 4
// chunks of 8192 rows: -1.5 GiB of activations; each extra chunk costs one more pass of the
// fp32 lm_head gradient through the GEMM's accumulator (~0.06 ms on an H200) and one loss
// read-back.
#define HEAD_CHUNK_BYTES ((size_t)512 << 20)
static int head_rows_for(const model *m) {
    const size_t row = (size_t)m->V * ELEM(m, BE_ACT);
    if (m->cfg.head_chunk_rows > 0) return GDN_MIN(m->cfg.head_chunk_rows, m->N);
    if ((size_t)m->N * row <= HEAD_CHUNK_BYTES) return m->N;
    size_t r = HEAD_CHUNK_BYTES / row / 128 * 128;
    return (int)GDN_MIN((size_t)m->N, GDN_MAX(r, (size_t)128));
}

// Carve every activation and scratch tensor; run twice (plan, then real) by model_create.
static void carve(model *m) {
    arena_t *A = &m->a_acts, *S = &m->a_scratch;
    size_t e = ELEM(m, BE_ACT), es = ELEM(m, BE_STAT), N = (size_t)m->N, d = (size_t)m->d;
    size_t hk = (size_t)m->H * m->dk, hv = (size_t)m->H * m->dv, ha = (size_t)m->Ha * m->Da;
#define ACT(n) arena_alloc(A, (n) * e)
#define STAT(n) arena_alloc(A, (n) * es)
    // train.recompute (config.h gdn_recompute): outputs of cheap ops live in one shared set of
    // buffers that every layer's forward overwrites. full: those of RMSNorm, conv, SiLU, L2 norm,
    // gated norm, SwiGLU; the backward redoes them for its layer (recompute_layer) from what each
    // layer keeps (inputs, projections, rule output): the same kernels on the same inputs, the
    // same bits. light: those of the RMSNorms, the gated norm and SwiGLU only (the conv outputs
    // stay per layer); the backward kernel that reads their inputs anyway writes each again, bit
    // for bit, before the weight-gradient GEMMs that read it (model_forward_backward).
    layer_acts shared = {0};
    const bool rc = m->cfg.recompute != RECOMPUTE_OFF, rc_conv = m->cfg.recompute == RECOMPUTE_FULL;
    bool any_gdn = false;
    // q, k before their L2 norm are a forward temporary (the backward reads qn, kn): one pair
    // for all layers, none where every GDN layer normalises inside conv_silu3_l2_fwd
    bool qk_tmp = false;
    for (int l = 0; l < m->L; l++) {
        any_gdn |= m->lp[l].kind == 'G';
        qk_tmp |= m->lp[l].kind == 'G' && !gdn_inproj(m, l).conv3;
    }
    if (qk_tmp) {
        shared.q_act = ACT(N * hk);
        shared.k_act = ACT(N * hk);
    }
    if (rc) {
        shared.xn1 = ACT(N * d);
        shared.xn2 = ACT(N * d);
        shared.m_h = ACT(N * m->F);
        if (any_gdn && rc_conv) {
            shared.v_act = ACT(N * hv);
            shared.qn = ACT(N * hk);
            shared.kn = ACT(N * hk);
        }
        if (any_gdn) shared.on = ACT(N * hv);
    }
#define KEEP(field, n) (rc ? shared.field : ACT(n))
#define KEEP_CONV(field, n) (rc_conv ? shared.field : ACT(n))  // kept per layer by light
    for (int l = 0; l < m->L; l++) {
        layer_acts *a = &m->acts[l];
        memset(a, 0, sizeof *a);
        a->x_in = ACT(N * d);
        a->xn1 = KEEP(xn1, N * d);
        a->rstd1 = STAT(N);
        if (m->lp[l].kind == 'G') {
            const inproj_layout L = gdn_inproj(m, l);
            char *base = L.fused ? ACT(N * L.w) : NULL;
            a->inproj = base;
            if (L.qkv) {
                a->q_lin = base ? base + L.cq * e : NULL;
                a->k_lin = base ? base + L.ck * e : NULL;
                a->v_lin = base ? base + L.cv * e : NULL;
            } else {
                a->q_lin = ACT(N * hk);
                a->k_lin = ACT(N * hk);
                a->v_lin = ACT(N * hv);
            }
            a->q_act = shared.q_act;
            a->k_act = shared.k_act;
            a->v_act = KEEP_CONV(v_act, N * hv);
            a->qn = KEEP_CONV(qn, N * hk);
            a->kn = KEEP_CONV(kn, N * hk);
            a->rq = STAT(N * m->H);
            a->rk = STAT(N * m->H);
            if (L.fused) {
                if (m->cfg.gdn_gate) a->a = base ? base + L.ca * e : NULL;
                if (m->cfg.gdn_delta) a->b = base ? base + L.cb * e : NULL;
                if (m->cfg.gdn_output_gate) a->z = base ? base + L.cz * e : NULL;
            } else {
                if (m->cfg.gdn_gate) a->a = ACT(N * m->H);
                if (m->cfg.gdn_delta) a->b = ACT(N * m->H);
                if (m->cfg.gdn_output_gate) a->z = ACT(N * hv);
            }
            if (m->cfg.gdn_delta) a->beta = STAT(N * m->H);
            a->g = STAT(N * m->H);
            a->o = ACT(N * hv);
            if (m->cfg.gdn_bwd_states == GDN_BWD_STATES_SAVED) {  // the chunk-start states
                const int C = m->be->gdn_state_chunk ? m->be->gdn_state_chunk : m->cfg.gdn_chunk_size;
                a->hs = STAT((size_t)m->B * m->H * GDN_CDIV(m->T, C) * m->dk * m->dv);
            } else if (m->cfg.gdn_bwd_states == GDN_BWD_STATES_REPLAY && m->be->gdn_fwd_keep) {
                // what the backend's backward replays the states from (none: it recomputes)
                const size_t n = m->be->gdn_fwd_keep(m->B, m->T, m->H, m->dk, m->dv);
                if (n) a->gkeep = STAT(n);
            }
            a->rstd_o = STAT(N * m->H);
            a->on = KEEP(on, N * hv);
        } else {
            a->aq = ACT(N * ha);
            a->ak = ACT(N * ha);
            a->av = ACT(N * ha);
            a->ao = ACT(N * ha);
            a->lse = STAT(N * m->Ha);
        }
        a->x_mid = ACT(N * d);
        a->xn2 = KEEP(xn2, N * d);
        a->rstd2 = STAT(N);
        if (mlp_fused(m, l)) {  // one (N, 2F): gate | up
            a->m_gate = ACT(N * 2 * m->F);
            a->m_up = a->m_gate ? (char *)a->m_gate + (size_t)m->F * e : NULL;
        } else {
            a->m_gate = ACT(N * m->F);
            a->m_up = ACT(N * m->F);
        }
        a->m_h = KEEP(m_h, N * m->F);
    }
#undef KEEP
#undef KEEP_CONV
    m->x_final = ACT(N * d);
    m->xf = ACT(N * d);
    m->rstd_f = STAT(N);
    m->logits = ACT((size_t)m->head_rows * m->V);  // one row chunk of the LM head (head_loss)
#undef ACT
#undef STAT
    size_t wide = GDN_MAX(GDN_MAX(hk, hv), GDN_MAX((size_t)m->F, ha));
    for (int l = 0; l < m->L; l++)  // D[2] holds the fused input projection's gradient
        if (m->lp[l].kind == 'G') wide = GDN_MAX(wide, (size_t)gdn_inproj(m, l).w);
    m->dx = arena_alloc(S, N * d * e);
    m->dbranch = arena_alloc(S, N * d * e);
    m->dxn = arena_alloc(S, N * d * e);
    m->dmix = arena_alloc(S, N * d * e);
    // dbig[2] right after dbig[1] (each rounded to the arena's 64 bytes, as separate carves
    // would): the fused MLP's d gate|up, (N, 2F) with 2F <= 2 wide, spans the two
    const size_t big = (N * wide * e + 63) & ~(size_t)63;
    m->dbig[0] = arena_alloc(S, big);
    m->dbig[1] = arena_alloc(S, 2 * big);
    m->dbig[2] = m->dbig[1] ? (char *)m->dbig[1] + big : NULL;
    for (int i = 3; i < 6; i++) m->dbig[i] = arena_alloc(S, big);
    // dg, dbeta (stat class: the rule's gate gradients), da, db (activation class)
    for (int i = 0; i < 4; i++) m->dsmall[i] = arena_alloc(S, N * GDN_MAX(m->H, 1) * (i < 2 ? es : e));
}

static double flops_per_token(const model *m) {
    // 6 x (matmul parameters incl. the LM head) + the mixers' token-mixing work, fwd + bwd.
    double mm = 0;
    for (int i = 0; i < m->n_params; i++) {
        param_kind k = m->params[i].kind;
        if (k == PARAM_LINEAR || k == PARAM_OUTPROJ) mm += (double)m->params[i].numel;
    }
    if (m->cfg.tie_embeddings) mm += (double)m->V * m->d;  // the tied LM head is a matmul too
    double mix = 0;
    int C = m->cfg.gdn_chunk_size;
    for (int l = 0; l < m->L; l++) {
        if (m->lp[l].kind == 'G') {
            // per token per head, forward: KK^T, W, U, QK^T, P*Delta (~C-wide), W H, Q H,
            // K^T Delta (dk x dv): 2 * (C*(3 dk + 2 dv) / 2 + 3 dk dv); backward ~ 2x forward
            double f = 2.0 * (0.5 * C * (3.0 * m->dk + 2.0 * m->dv) + 3.0 * m->dk * m->dv);
            mix += 3.0 * f * m->H;
        } else {
            double w = GDN_MIN(m->window, m->T);
            mix += 3.0 * 4.0 * w * 0.5 * m->Da * m->Ha;
        }
    }
    return 6.0 * mm + mix;
}

bool model_gpu_check(const gdn_config *c, char *err, size_t errlen) {
    const bool gdn = strchr(c->pattern, 'G') != NULL;
    const bool attn = strchr(c->pattern, 'S') != NULL || strchr(c->pattern, 'A') != NULL;
    const int dk = c->gdn_head_dim;
    const double dv = c->gdn_expand_v * dk;
    if (gdn && dk != 64 && dk != 128 && dk != 256) {
        snprintf(err, errlen, "[gdn] head_dim = %d: the GPU's GDN kernels are built for 64, 128 and 256",
                 dk);
        return false;
    }
    if (gdn && dv != dk && dv != 2.0 * dk) {
        snprintf(err, errlen, "[gdn] expand_v = %g (dv %g): the GPU's GDN kernels are built for "
                 "expand_v 1 and 2", c->gdn_expand_v, dv);
        return false;
    }
    if (attn && c->swa_head_dim != 64 && c->swa_head_dim != 128) {
        snprintf(err, errlen, "[swa] head_dim = %d: the GPU's attention kernels are built for 64 and "
                 "128", c->swa_head_dim);
        return false;
    }
    return true;
}

// Every size model_create computes is a product of at most these (each < 2^31): N = B T tokens,
// a width W (d, V, the MLP's 2F, the GDN input projection's 2 H dk + 3 H dv + 2 H, H Da), or
// B H T dk dv (the GDN states). Bounding (L + 2) x 64 tensors of N W, MAX_PARAMS tensors of
// W^2 and L x B H T dk dv elements of 8 bytes, with a factor 2 to spare for the arenas'
// alignment, bounds every arena and every product in carve and build_table.
bool model_check_sizes(const gdn_config *c, int B, int T, char *err, size_t errlen) {
    const long long N = (long long)B * T, H = c->gdn_n_heads, dk = c->gdn_head_dim;
    const double F2 = c->mlp_hidden > 0 ? 2.0 * c->mlp_hidden
                                        : 2.0 * 256 * ceil(2.0 * c->mlp_ratio * c->d_model / 3.0 / 256);
    const double dv = c->gdn_expand_v * dk;
    if (B < 1 || T < 1 || N > INT_MAX) {
        snprintf(err, errlen, "batch_size x seq_len = %d x %d = %lld tokens per micro-batch; allowed: "
                 "1 to %d", B, T, N, INT_MAX);
        return false;
    }
    const double inproj = 2.0 * H * dk + 2.0 * H * dv + 2.0 * H;  // fused q, k, v, z, a, b
    if (!(F2 <= INT_MAX && dv <= INT_MAX && inproj <= INT_MAX &&
          (long long)c->swa_n_heads * c->swa_head_dim <= INT_MAX)) {
        snprintf(err, errlen, "a width does not fit an int: 2 x MLP hidden %.0f, gdn heads x head_dim "
                 "%lld x %lld (dv %.0f: input projection %.0f), swa heads x head_dim %d x %d", F2, H,
                 dk, dv, inproj, c->swa_n_heads, c->swa_head_dim);
        return false;
    }
    double w = GDN_MAX(GDN_MAX((double)c->d_model, (double)c->vocab_size), GDN_MAX(F2, inproj));
    w = GDN_MAX(w, (double)c->swa_n_heads * c->swa_head_dim);
    const size_t W = (size_t)w, L = (size_t)GDN_MAX(c->n_layers, 0);
    size_t acts, params, states, t;
    bool ok = gdn_mul_ok((size_t)N, W, &t) && gdn_mul_ok(t, 8 * 64 * 2, &t) &&
              gdn_mul_ok(t, L + 2, &acts) && gdn_mul_ok(W, W, &t) &&
              gdn_mul_ok(t, 8 * 2 * (size_t)MAX_PARAMS, &params) &&
              gdn_mul_ok((size_t)N, (size_t)(H * dk), &t) && gdn_mul_ok(t, (size_t)dv, &t) &&
              gdn_mul_ok(t, 8 * 2, &t) && gdn_mul_ok(t, L, &states) && gdn_add_ok(acts, params, &t) &&
              gdn_add_ok(t, states, &t);
    if (!ok) {
        snprintf(err, errlen, "the arenas of this model would exceed a 64-bit size: batch_size x "
                 "seq_len = %lld tokens, n_layers %d, widest tensor %zu columns", N, c->n_layers, W);
        return false;
    }
    return true;
}

model *model_create(const gdn_config *c, const backend *be, int B, int T) {
    char size_err[512];
    if (!model_check_sizes(c, B, T, size_err, sizeof size_err)) gdn_die("model: %s", size_err);
    model *m = gdn_malloc(sizeof *m);
    m->cfg = *c;
    m->be = be;
    m->L = c->n_layers;
    m->d = c->d_model;
    m->V = c->vocab_size;
    m->F = config_mlp_hidden(c);
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->H = c->gdn_n_heads;
    m->dk = c->gdn_head_dim;
    m->dv = config_gdn_dv(c);
    m->Ha = c->swa_n_heads;
    m->Da = c->swa_head_dim;
    m->window = c->swa_window;
    if (m->L > MAX_LAYERS) gdn_die("model.n_layers = %d: at most %d", m->L, MAX_LAYERS);
    if (m->V < 2) gdn_die("model: vocab_size %d (set model.vocab_size or use a dataset)", m->V);
    build_table(m);
    m->head_rows = head_rows_for(m);
    m->mlp_fuse = be->fuse_projections;  // mlp_fused

    arena_plan(&m->a_params, "params");
    arena_plan(&m->a_grads, "grads");
    arena_plan(&m->a_opt, "optimizer");
    arena_plan(&m->a_acts, "activations");
    arena_plan(&m->a_scratch, "scratch");
    size_t P = ELEM(m, BE_PARAM), Gs = ELEM(m, BE_GRAD);
    arena_alloc(&m->a_params, m->n_elems * P);
    arena_alloc(&m->a_grads, m->n_elems * Gs);
    carve_opt(m, 0, m->n_elems);
    carve(m);
    arena_reserve(&m->a_params, be->alloc);
    arena_reserve(&m->a_grads, be->alloc);
    arena_reserve(&m->a_opt, be->alloc);
    arena_reserve(&m->a_acts, be->alloc);
    arena_reserve(&m->a_scratch, be->alloc);
    m->param_mem = arena_alloc(&m->a_params, m->n_elems * P);
    m->grad_mem = arena_alloc(&m->a_grads, m->n_elems * Gs);
    carve_opt(m, 0, m->n_elems);
    carve(m);
    m->tok = gdn_malloc((size_t)m->N * sizeof(int32_t));
    m->tgt = gdn_malloc((size_t)m->N * sizeof(int32_t));
    m->flops_per_token = flops_per_token(m);
    return m;
}

void model_shard_optimizer(model *m, size_t lo, size_t hi) {
    if (lo > hi || hi > m->n_elems)
        gdn_die("internal: optimizer shard [%zu, %zu) of %zu elements", lo, hi, m->n_elems);
    const backend *be = m->be;
    arena_release(&m->a_opt, be->release);
    arena_plan(&m->a_opt, "optimizer");
    carve_opt(m, lo, hi);
    arena_reserve(&m->a_opt, be->alloc);
    carve_opt(m, lo, hi);
    size_t n = GDN_MAX(hi - lo, (size_t)1);
    be->zero(m->opt_m, n, BE_OPT);
    be->zero(m->opt_v, n, BE_OPT);
}

void model_free(model *m) {
    if (!m) return;
    arena_release(&m->a_params, m->be->release);
    arena_release(&m->a_grads, m->be->release);
    arena_release(&m->a_opt, m->be->release);
    arena_release(&m->a_acts, m->be->release);
    arena_release(&m->a_scratch, m->be->release);
    if (m->doc_mem) m->be->release(m->doc_mem);
    free(m->tok);
    free(m->tgt);
    free(m);
}

void model_set_doc_starts(model *m, const int32_t *doc_start) {
    m->doc_start = NULL;
    if (m->be->set_docs) m->be->set_docs(NULL, m->B, m->T);
    if (!doc_start || !m->cfg.doc_reset) return;
    char err[256];
    if (!doc_starts_check(doc_start, m->B, m->T, err, sizeof err))
        gdn_die("model_set_doc_starts: %s", err);
    if (!m->be->doc_reset)
        gdn_die("model.doc_reset: the %s backend does not restart its mixers at document starts "
                "yet\nHINT: set model.doc_reset = false (documents then see each other, as with "
                "window sampling) or train on the CPU (train.device = cpu)", m->be->name);
    if (!m->doc_mem) m->doc_mem = m->be->alloc((size_t)m->N * sizeof(int32_t));
    m->be->upload_index(m->doc_mem, doc_start, (size_t)m->N);
    m->doc_start = m->doc_mem;
    if (m->be->set_docs) m->be->set_docs(doc_start, m->B, m->T);
}

// Element j of a tensor with initialiser `kind` as drawn from its stream: normals take 4 words
// each, uniforms 2, norms none (init_words), so element j0 starts at word j0 * init_words(kind)
// and threads can fill disjoint slices with the bits of one sequential pass.
static int init_words(param_kind kind) {
    switch (kind) {
    case PARAM_LINEAR:
    case PARAM_EMBED:
    case PARAM_OUTPROJ: return 4;
    case PARAM_NORM: return 0;
    case PARAM_CONV:
    case PARAM_ALOG:
    case PARAM_DTBIAS: return 2;
    }
    return 0;
}

static double init_value(const model *m, const param_info *p, rng_t *r) {
    double std = m->cfg.init_std;
    switch (p->kind) {
    case PARAM_LINEAR:
    case PARAM_EMBED: return std * rng_normal(r);
    case PARAM_OUTPROJ: return std / sqrt(2.0 * m->L) * rng_normal(r);
    case PARAM_NORM: return 1.0;
    case PARAM_CONV: return 1.0 / sqrt((double)p->cols) * (2 * rng_uniform(r) - 1);
    case PARAM_ALOG: return log(1.0 + 15.0 * rng_uniform(r));
    case PARAM_DTBIAS: {
        double dt = exp(log(1e-3) + (log(0.1) - log(1e-3)) * rng_uniform(r));
        if (dt < 1e-4) dt = 1e-4;
        return dt + log(-expm1(-dt));  // softplus^-1(dt)
    }
    }
    return 0;
}

void model_init_params(model *m, uint64_t seed) {
    // Each tensor draws from its own stream (seed, tensor index): adding a layer does not
    // change the init of the others, and the result does not depend on the backend or on the
    // number of threads (220M parameters took ~15 s on one core; slices of 64K run in parallel).
    enum { SLICE = 65536 };
    size_t maxn = 0;
    for (int i = 0; i < m->n_params; i++) maxn = GDN_MAX(maxn, m->params[i].numel);
    double *h = gdn_malloc(maxn * sizeof(double));
    for (int i = 0; i < m->n_params; i++) {
        const param_info *p = &m->params[i];
        const size_t n_slices = GDN_CDIV(p->numel, (size_t)SLICE);
        GDN_OMP(parallel for schedule(dynamic, 1) if (p->numel > SLICE))
        for (size_t sl = 0; sl < n_slices; sl++) {
            const size_t j0 = sl * SLICE, j1 = GDN_MIN(p->numel, j0 + SLICE);
            rng_t r;
            rng_init(&r, seed, 1000 + (uint64_t)i);
            rng_seek(&r, (uint64_t)j0 * (uint64_t)init_words(p->kind));
            for (size_t j = j0; j < j1; j++) h[j] = init_value(m, p, &r);
        }
        model_param_upload(m, i, h);
    }
    free(h);
    m->be->zero(m->grad_mem, m->n_elems, BE_GRAD);
    m->be->zero(m->opt_m, GDN_MAX(m->opt_n, (size_t)1), BE_OPT);
    m->be->zero(m->opt_v, GDN_MAX(m->opt_n, (size_t)1), BE_OPT);
}

void model_zero_grads(model *m) { m->be->zero(m->grad_mem, m->n_elems, BE_GRAD); }

// ---- dropout ----------------------------------------------------------------------------------
// Every mask is a function of (the micro-batch's dropout_key, the place, the element index), so
// the backward redraws it and nothing is saved. Places: 0 the embedding output
// (model.embed_dropout); 1 + 2l + br the residual branches of layer l (br 0 mixer, 1 MLP;
// model.dropout); 1 + 2L + l the input of layer l's mixer output projection (model.mixer_dropout:
// GDN's gated-norm output, attention's heads; the place of nanoGPT's attention dropout, without
// a kernel of its own).
enum { PLACE_EMBED = 0 };
static uint64_t place_branch(int l, int br) { return 1 + 2 * (uint64_t)l + (uint64_t)br; }
static uint64_t place_mixer(const model *m, int l) { return 1 + 2 * (uint64_t)m->L + (uint64_t)l; }

static uint64_t drop_key(const model *m, uint64_t place) {
    return m->dropout_key + place * 0x9E3779B97F4A7C15ull;
}
// y = drop(x) (y == x allowed) when training with p > 0; returns whether it dropped.
static bool drop_fwd(model *m, void *y, const void *x, size_t n, double p, uint64_t place, bool train) {
    if (!(train && p > 0)) return false;
    m->be->dropout_fwd(y, x, n, p, drop_key(m, place));
    return true;
}
// dx = d drop(x) / dx applied to dy (dx == dy allowed), under drop_fwd's condition.
static bool drop_bwd(model *m, void *dx, const void *dy, size_t n, double p, uint64_t place, bool train) {
    if (!(train && p > 0)) return false;
    m->be->dropout_bwd(dx, dy, n, p, drop_key(m, place));
    return true;
}

// The input of layer l's output projection: `h` itself, or with mixer dropout its dropped copy
// in `tmp` (the backward calls it again to redraw the same copy).
static const void *mixer_drop(model *m, int l, const void *h, void *tmp, size_t n, bool train) {
    return drop_fwd(m, tmp, h, n, m->cfg.mixer_dropout, place_mixer(m, l), train) ? tmp : h;
}

// x_out = x_in + drop(branch) (branch dropped in place), then the RMSNorm that reads it:
// xn, rstd = rmsnorm(x_out, w), one fused op (bitwise the add, then rmsnorm_fwd).
static void residual_norm_fwd(model *m, void *x_out, void *xn, void *rstd, const void *x_in,
                              void *branch, const void *w, int l, int br, bool train) {
    size_t n = (size_t)m->N * m->d;
    drop_fwd(m, branch, branch, n, m->cfg.dropout, place_branch(l, br), train);
    m->be->add_rmsnorm_fwd(x_out, xn, rstd, x_in, branch, w, m->N, m->d, m->cfg.norm_eps);
}

#define P(i) model_param(m, i)
// GDN's q, k, v from their projections: SiLU of the causal conv (short_conv; one fused op, the
// conv output is not kept: the backward recomputes it) or of the projection, then per-head L2
// norm of q (x 1/sqrt dk) and k (inside the conv op when q, k, v are one fused projection; else
// through the q_act / k_act temporary). Also what train.recompute redoes (recompute_layer).
static double gdn_q_scale(const model *m) { return 1.0 / sqrt(m->dk); }  // q's norm: x 1/sqrt dk
static void gdn_qkv_fwd(model *m, int l) {
    const backend *be = m->be;
    const layer_params *lp = &m->lp[l];
    layer_acts *a = &m->acts[l];
    int N = m->N, H = m->H, hk = H * m->dk, hv = H * m->dv, K = m->cfg.gdn_conv_size;
    const inproj_layout L = gdn_inproj(m, l);
    const double eps = 1e-6, q_scale = gdn_q_scale(m);
    if (L.conv3) {  // q, k, v columns side by side in the fused projection: one call, q, k normed
        be->conv_silu3_l2_fwd(a->qn, a->kn, a->v_act, a->rq, a->rk, a->q_lin, P(lp->conv_q), m->B,
                              m->T, hk, hk, hv, K, L.ld_q, m->dk, eps, q_scale, 1.0, m->doc_start);
        return;
    }
    if (m->cfg.gdn_short_conv) {
        const int32_t *ds = m->doc_start;
        be->conv_silu_fwd(a->q_act, a->q_lin, P(lp->conv_q), m->B, m->T, hk, K, L.ld_q, ds);
        be->conv_silu_fwd(a->k_act, a->k_lin, P(lp->conv_k), m->B, m->T, hk, K, L.ld_q, ds);
        be->conv_silu_fwd(a->v_act, a->v_lin, P(lp->conv_v), m->B, m->T, hv, K, L.ld_v, ds);
    } else {
        be->silu_fwd(a->q_act, a->q_lin, (size_t)N * hk);
        be->silu_fwd(a->k_act, a->k_lin, (size_t)N * hk);
        be->silu_fwd(a->v_act, a->v_lin, (size_t)N * hv);
    }
    be->l2norm_fwd(a->qn, a->rq, a->q_act, (size_t)N * H, m->dk, eps, q_scale);
    be->l2norm_fwd(a->kn, a->rk, a->k_act, (size_t)N * H, m->dk, eps, 1.0);
}

static void gdn_mixer_fwd(model *m, int l, bool train) {
    const backend *be = m->be;
    const layer_params *lp = &m->lp[l];
    layer_acts *a = &m->acts[l];
    const gdn_config *c = &m->cfg;
    int N = m->N, d = m->d, H = m->H, hk = H * m->dk, hv = H * m->dv;
    gdn_mode mode = {c->gdn_gate, c->gdn_delta, c->gdn_allow_neg_eigval};
    const inproj_layout L = gdn_inproj(m, l);
    if (L.fused) be->linear_fwd(a->inproj, a->xn1, P(L.first), N, d, L.w);  // the group at once
    if (!L.qkv) {
        be->linear_fwd(a->q_lin, a->xn1, P(lp->wq), N, d, hk);
        be->linear_fwd(a->k_lin, a->xn1, P(lp->wk), N, d, hk);
        be->linear_fwd(a->v_lin, a->xn1, P(lp->wv), N, d, hv);
    }
    gdn_qkv_fwd(m, l);  // conv, SiLU, L2 norm
    if (!L.fused) {
        if (c->gdn_gate) be->linear_fwd(a->a, a->xn1, P(lp->wa), N, d, H);
        if (c->gdn_delta) be->linear_fwd(a->b, a->xn1, P(lp->wb), N, d, H);
        if (c->gdn_output_gate) be->linear_fwd(a->z, a->xn1, P(lp->wz), N, d, hv);
    }
    be->gdn_gates_fwd(a->g, a->beta, a->a, a->b, c->gdn_gate ? P(lp->A_log) : NULL,
                      c->gdn_gate ? P(lp->dt_bias) : NULL, N, H, L.ld_ab, mode);
    gdn_op op = {.B = m->B, .T = m->T, .H = H, .Dk = m->dk, .Dv = m->dv, .chunk = c->gdn_chunk_size,
                 .mode = mode, .q = a->qn, .k = a->kn, .v = a->v_act, .g = a->g, .beta = a->beta,
                 .o = a->o, .hs = a->hs, .keep = a->gkeep, .doc_start = m->doc_start};  // every forward: a backward may follow one with train false
    be->gdn_fwd(&op);
    be->gated_rmsnorm_fwd(a->on, a->rstd_o, a->o, a->z, P(lp->onorm), (size_t)N * H, m->dv, L.zh,
                          L.zld, c->norm_eps);
    be->linear_fwd(m->dmix, mixer_drop(m, l, a->on, m->dbig[0], (size_t)N * hv, train), P(lp->wo), N, hv, d);
}

// RoPE's documents: positions from each document's start (model.doc_positions) or the row's
static const int32_t *rope_docs(const model *m) {
    return m->cfg.doc_positions ? m->doc_start : NULL;
}

static void attn_mixer_fwd(model *m, int l, bool train) {
    const backend *be = m->be;
    const layer_params *lp = &m->lp[l];
    layer_acts *a = &m->acts[l];
    int N = m->N, d = m->d, ha = m->Ha * m->Da;
    int window = m->lp[l].kind == 'A' ? m->T : m->window;
    be->linear_fwd(a->aq, a->xn1, P(lp->sq), N, d, ha);
    be->linear_fwd(a->ak, a->xn1, P(lp->sk), N, d, ha);
    be->linear_fwd(a->av, a->xn1, P(lp->sv), N, d, ha);
    be->rope_fwd(a->aq, a->aq, m->B, m->T, m->Ha, m->Da, m->cfg.swa_rope_base, rope_docs(m));
    be->rope_fwd(a->ak, a->ak, m->B, m->T, m->Ha, m->Da, m->cfg.swa_rope_base, rope_docs(m));
    be->attention_fwd(a->ao, a->lse, a->aq, a->ak, a->av, m->B, m->T, m->Ha, m->Da, window,
                      1.0 / sqrt(m->Da), m->doc_start);
    be->linear_fwd(m->dmix, mixer_drop(m, l, a->ao, m->dbig[0], (size_t)N * ha, train), P(lp->so), N, ha, d);
}

// Forward through the logits; returns nothing (the loss is taken by the caller).
static void forward(model *m, const int32_t *x, bool train) {
    const backend *be = m->be;
    int N = m->N, d = m->d, F = m->F;
    double eps = m->cfg.norm_eps;
    memcpy(m->tok, x, (size_t)N * sizeof(int32_t));
    be->embedding_fwd(m->acts[0].x_in, m->tok, P(m->wte), N, d);
    drop_fwd(m, m->acts[0].x_in, m->acts[0].x_in, (size_t)N * d, m->cfg.embed_dropout, PLACE_EMBED, train);
    // layer 0's norm1; every later norm comes fused with the residual add before it
    be->rmsnorm_fwd(m->acts[0].xn1, m->acts[0].rstd1, m->acts[0].x_in, P(m->lp[0].norm1), N, d, eps);
    for (int l = 0; l < m->L; l++) {
        const layer_params *lp = &m->lp[l];
        layer_acts *a = &m->acts[l];
        if (lp->kind == 'G')
            gdn_mixer_fwd(m, l, train);
        else
            attn_mixer_fwd(m, l, train);
        residual_norm_fwd(m, a->x_mid, a->xn2, a->rstd2, a->x_in, m->dmix, P(lp->norm2), l, 0, train);
        if (mlp_fused(m, l)) {
            be->linear_fwd(a->m_gate, a->xn2, P(lp->wgate), N, d, 2 * F);  // gate | up at once
        } else {
            be->linear_fwd(a->m_gate, a->xn2, P(lp->wgate), N, d, F);
            be->linear_fwd(a->m_up, a->xn2, P(lp->wup), N, d, F);
        }
        be->swiglu_fwd(a->m_h, a->m_gate, a->m_up, (size_t)N, F, mlp_ld(m, l));
        be->linear_fwd(m->dmix, a->m_h, P(lp->wdown), N, F, d);
        // into the next layer's input and norm1 (train.recompute: its xn1 is the shared buffer,
        // which layer l no longer reads), after the last layer into x_final and norm_f
        if (l + 1 < m->L) {
            layer_acts *b = &m->acts[l + 1];
            residual_norm_fwd(m, b->x_in, b->xn1, b->rstd1, a->x_mid, m->dmix, P(m->lp[l + 1].norm1),
                              l, 1, train);
        } else {
            residual_norm_fwd(m, m->x_final, m->xf, m->rstd_f, a->x_mid, m->dmix, P(m->norm_f), l, 1,
                              train);
        }
    }
}

// The LM head and the fused cross-entropy over row chunks of m->head_rows (the logits buffer
// holds one chunk; the probabilities are never kept): returns the summed loss. backward: each
// chunk's logits are overwritten by dlogits (x grad_scale) and its backward runs at once: dxn's
// rows of the chunk, lm_head's gradient += (the fwd_hook runs after the first chunk's loss).
static double head_loss(model *m, double grad_scale, bool backward) {
    const backend *be = m->be;
    const int N = m->N, d = m->d, R = m->head_rows;
    const size_t e = ELEM(m, BE_ACT);
    const bool defer = be->crossentropy_defer && be->loss_collect;  // no wait inside the loop
    double sum = 0;
    for (int r0 = 0; r0 < N; r0 += R) {
        const int n = GDN_MIN(R, N - r0);
        const char *xf = (const char *)m->xf + (size_t)r0 * d * e;
        be->linear_fwd(m->logits, xf, P(m->lm_head), n, d, m->V);
        if (defer)
            be->crossentropy_defer(m->logits, m->tgt + r0, n, m->V, backward ? grad_scale : 0.0);
        else
            sum += be->crossentropy(m->logits, m->tgt + r0, n, m->V, backward ? grad_scale : 0.0);
        if (!backward) continue;
        if (r0 == 0 && m->fwd_hook) m->fwd_hook(m, m->grad_hook_ctx);
        be->linear_bwd((char *)m->dxn + (size_t)r0 * d * e, model_grad(m, m->lm_head), m->logits, xf,
                       P(m->lm_head), n, d, m->V, false);
    }
    return defer ? be->loss_collect() : sum;
}

double model_loss(model *m, const int32_t *x, const int32_t *y, bool train) {
    forward(m, x, train);
    memcpy(m->tgt, y, (size_t)m->N * sizeof(int32_t));
    int valid = 0;
    for (int i = 0; i < m->N; i++) valid += y[i] >= 0;
    double sum = head_loss(m, 0.0, false);
    return valid ? sum / valid : 0.0;
}

double model_eval_loss(model *m, const int32_t *x, const int32_t *y) {
    return model_loss(m, x, y, false);
}

// log p(y_i | x_0..i) and the argmax of row i's logits, for the rows i with y[i] >= 0, from the
// backend's logits (model.h). The logits of each head chunk are brought to the host in pieces
// of LOGPROB_ROWS rows (float64; the GPU's fp32 or bf16 values converted exactly), where the
// log-sum-exp is taken in float64: log p = z_y - max - log sum exp(z - max).
enum { LOGPROB_ROWS = 16 };
void model_logprobs(model *m, const int32_t *x, const int32_t *y, double *logp, int32_t *argmax) {
    const backend *be = m->be;
    const int N = m->N, d = m->d, V = m->V, R = m->head_rows;
    const size_t e = ELEM(m, BE_ACT);
    forward(m, x, false);
    double *z = gdn_malloc((size_t)LOGPROB_ROWS * V * sizeof(double));
    for (int r0 = 0; r0 < N; r0 += R) {
        const int n = GDN_MIN(R, N - r0);
        be->linear_fwd(m->logits, (const char *)m->xf + (size_t)r0 * d * e, P(m->lm_head), n, d, V);
        for (int i = 0; i < n;) {
            if (y[r0 + i] < 0) {  // a run of wanted rows, at most LOGPROB_ROWS long
                logp[r0 + i] = 0;
                if (argmax) argmax[r0 + i] = -1;
                i++;
                continue;
            }
            int k = 1;
            while (k < LOGPROB_ROWS && i + k < n && y[r0 + i + k] >= 0) k++;
            be->download(z, (const char *)m->logits + (size_t)i * V * e, (size_t)k * V, BE_ACT);
            for (int j = 0; j < k; j++) {
                const double *zr = z + (size_t)j * V;
                int best = 0;
                for (int v = 1; v < V; v++) best = zr[v] > zr[best] ? v : best;
                double s = 0;
                for (int v = 0; v < V; v++) s += exp(zr[v] - zr[best]);
                const int t = y[r0 + i + j];
                logp[r0 + i + j] = t < V ? zr[t] - zr[best] - log(s) : -INFINITY;
                if (argmax) argmax[r0 + i + j] = best;
            }
            i += k;
        }
    }
    free(z);
}

#define G(i) model_grad(m, i)

// dbranch = d(drop(branch)) / d branch applied to dx
static void *residual_bwd(model *m, int l, int br, bool train) {
    size_t n = (size_t)m->N * m->d;
    return drop_bwd(m, m->dbranch, m->dx, n, m->cfg.dropout, place_branch(l, br), train) ? m->dbranch
                                                                                       : m->dx;
}

// train.recompute = light: the weight-gradient GEMMs of the linears that read a shared output
// (xn1, xn2 of the norms, m_h of SwiGLU), put off until the backward kernel that reads its inputs
// has written that output again (dw_later_run). Each job's dy must stay untouched until then: the callers keep them in buffers
// nothing else writes before it (gdn_mixer_bwd routes q, k, v for this).
enum { DW_LATER_MAX = 6 };  // GDN unfused: q, k, v, a, b, z
typedef struct {
    int w, out;       // the weight and its rows
    const void *dy;   // (N, out)
} dw_job;
typedef struct {
    dw_job job[DW_LATER_MAX];
    int n;
} dw_later;

// dxn (first: =, else +=) d/dxn of linear(xn, W) given dy, summed in the GEMM itself, and W's
// gradient += in the same call; with `later` (light) dxn only, W's gradient queued
static void linear_bwd_acc(model *m, void *dxn, bool first, int w, const void *dy, const void *xn,
                           int in, int out, dw_later *later) {
    if (!later) {
        m->be->linear_bwd(dxn, G(w), dy, xn, P(w), m->N, in, out, !first);
        return;
    }
    if (later->n >= DW_LATER_MAX)
        gdn_die("internal: more than %d weight gradients put off", DW_LATER_MAX);
    later->job[later->n++] = (dw_job){w, out, dy};
    m->be->linear_bwd(dxn, NULL, dy, NULL, P(w), m->N, in, out, !first);
}
// The queued weight gradients, now that xn (N, in) holds the shared output again; empties the queue.
static void dw_later_run(model *m, dw_later *later, const void *xn, int in) {
    for (int i = 0; i < later->n; i++) {
        const dw_job *j = &later->job[i];
        m->be->linear_bwd(NULL, G(j->w), j->dy, xn, P(j->w), m->N, in, j->out, false);
    }
    later->n = 0;
}

// later (train.recompute = light): the input projections' weight gradients are queued (their dy
// stay in D[2], D[3], D[4], D[1], dsmall[2..3] until model_forward_backward runs them), and on,
// shared, is written again by gated_rmsnorm_bwd before wo's gradient
static void gdn_mixer_bwd(model *m, int l, const void *dbr, bool train, dw_later *later) {
    const backend *be = m->be;
    const layer_params *lp = &m->lp[l];
    layer_acts *a = &m->acts[l];
    const gdn_config *c = &m->cfg;
    int N = m->N, d = m->d, H = m->H, hk = H * m->dk, hv = H * m->dv, K = c->gdn_conv_size;
    gdn_mode mode = {c->gdn_gate, c->gdn_delta, c->gdn_allow_neg_eigval};
    void **D = m->dbig;
    if (!later)
        be->linear_bwd(D[0], G(lp->wo), dbr, mixer_drop(m, l, a->on, D[1], (size_t)N * hv, train),
                       P(lp->wo), N, hv, d, false);                                  // d on
    else  // on is another layer's until gated_rmsnorm_bwd below
        be->linear_bwd(D[0], NULL, dbr, NULL, P(lp->wo), N, hv, d, false);          // d on
    drop_bwd(m, D[0], D[0], (size_t)N * hv, c->mixer_dropout, place_mixer(m, l), train);
    // fused input projection (gdn_inproj): the group's gradients are the columns of one (N, w)
    // matrix in D[2], kept until its one GEMM backward below; else da, db in dsmall, dz in D[2]
    const inproj_layout L = gdn_inproj(m, l);
    const size_t e = ELEM(m, BE_ACT);
    char *dgrp = D[2];
    void *da = L.fused ? dgrp + L.ca * e : m->dsmall[2];
    void *db = L.fused ? dgrp + L.cb * e : m->dsmall[3];
    void *dz = L.fused ? dgrp + L.cz * e : D[2];
    be->gated_rmsnorm_bwd(D[1], c->gdn_output_gate ? dz : NULL, G(lp->onorm), later ? a->on : NULL,
                          D[0], a->o, a->z, P(lp->onorm), a->rstd_o, (size_t)N * H, m->dv, L.zh,
                          L.zld);                                         // d o, d z (light: on)
    if (later)  // wo's gradient from on (its dropped copy into D[0]: d on is spent)
        be->linear_bwd(NULL, G(lp->wo), dbr, mixer_drop(m, l, a->on, D[0], (size_t)N * hv, train),
                       P(lp->wo), N, hv, d, false);
    bool first = true;
    if (!L.fused && c->gdn_output_gate) {
        linear_bwd_acc(m, m->dxn, true, lp->wz, dz, a->xn1, d, hv, later);
        first = false;
    }
    gdn_op op = {.B = m->B, .T = m->T, .H = H, .Dk = m->dk, .Dv = m->dv, .chunk = c->gdn_chunk_size,
                 .mode = mode, .q = a->qn, .k = a->kn, .v = a->v_act, .g = a->g, .beta = a->beta,
                 .o = a->o, .dO = D[1], .dq = D[3], .dk = D[4], .dv = D[5],
                 .dg = c->gdn_gate ? m->dsmall[0] : NULL, .dbeta = c->gdn_delta ? m->dsmall[1] : NULL,
                 .hs = a->hs, .keep = a->gkeep, .doc_start = m->doc_start};
    be->gdn_bwd(&op);
    if (c->gdn_gate || c->gdn_delta)
        be->gdn_gates_bwd(c->gdn_gate ? da : NULL, c->gdn_delta ? db : NULL,
                          c->gdn_gate ? G(lp->A_log) : NULL, c->gdn_gate ? G(lp->dt_bias) : NULL,
                          op.dg, op.dbeta, a->a, a->b, c->gdn_gate ? P(lp->A_log) : NULL,
                          c->gdn_gate ? P(lp->dt_bias) : NULL, N, H, L.ld_ab, mode);
    if (L.fused && !L.qkv) {
        linear_bwd_acc(m, m->dxn, first, L.first, dgrp, a->xn1, d, L.w, later);  // a, b, z at once
        first = false;
    } else if (!L.fused) {
        if (c->gdn_gate) {
            linear_bwd_acc(m, m->dxn, first, lp->wa, da, a->xn1, d, H, later);
            first = false;
        }
        if (c->gdn_delta) {
            linear_bwd_acc(m, m->dxn, first, lp->wb, db, a->xn1, d, H, later);
            first = false;
        }
    }
    // q, k, v paths: (l2norm) <- silu(conv) fused, or silu alone <- linear (with L.qkv: conv's
    // dx into the group's columns, one GEMM backward for all after the loop)
    // (the L2 norm backward reads its output qn / kn: y below). With `later` each path's dlin
    // (the projection's output gradient) gets its own buffer, kept until its queued weight
    // gradient: q's and k's dgrad (spent by the L2 norm backward), D[1] for v (d o is spent);
    // D[2] keeps dz or the fused group's columns.
    struct {
        void *dgrad;
        int w, conv, width;
        void *lin, *y, *rn;
        double scale;
        size_t col, ld;
        void *keep;
    } path[3] = {
        {D[3], lp->wq, lp->conv_q, hk, a->q_lin, a->qn, a->rq, gdn_q_scale(m), L.cq, L.ld_q, D[3]},
        {D[4], lp->wk, lp->conv_k, hk, a->k_lin, a->kn, a->rk, 1.0, L.ck, L.ld_q, D[4]},
        {D[5], lp->wv, lp->conv_v, hv, a->v_lin, NULL, NULL, 1.0, L.cv, L.ld_v, D[1]},
    };
    if (L.conv3) {  // dq_act, dk_act into D[0], D[1] (free after gdn_bwd), dv_act is D[5]
        be->l2norm_bwd(D[0], D[3], a->qn, a->rq, (size_t)N * H, m->dk, path[0].scale);
        be->l2norm_bwd(D[1], D[4], a->kn, a->rk, (size_t)N * H, m->dk, path[1].scale);
        be->conv_silu3_bwd(dgrp + L.cq * e, G(lp->conv_q), D[0], D[1], D[5], a->q_lin,
                           P(lp->conv_q), m->B, m->T, hk, hk, hv, K, L.ld_q, m->doc_start);
    }
    for (int i = 0; i < 3 && !L.conv3; i++) {
        size_t n = (size_t)N * path[i].width;
        void *dact = path[i].dgrad;
        if (path[i].rn) {
            be->l2norm_bwd(D[0], path[i].dgrad, path[i].y, path[i].rn, (size_t)N * H, m->dk,
                           path[i].scale);
            dact = D[0];
        }
        void *dlin = later ? path[i].keep : D[1];
        if (c->gdn_short_conv) {
            dlin = L.qkv ? dgrp + path[i].col * e : later ? path[i].keep : D[2];
            be->conv_silu_bwd(dlin, G(path[i].conv), dact, path[i].lin, P(path[i].conv), m->B,
                              m->T, path[i].width, K, path[i].ld, m->doc_start);
        } else {
            be->silu_bwd(dlin, dact, path[i].lin, n);
        }
        if (!L.qkv) {
            linear_bwd_acc(m, m->dxn, first, path[i].w, dlin, a->xn1, d, path[i].width, later);
            first = false;
        }
    }
    if (L.qkv)  // all six at once
        linear_bwd_acc(m, m->dxn, first, L.first, dgrp, a->xn1, d, L.w, later);
}

// later (light): q, k, v's weight gradients queued (dy in D[1..3]); ao is kept per layer, so so's
// gradient is taken at once as without it
static void attn_mixer_bwd(model *m, int l, const void *dbr, bool train, dw_later *later) {
    const backend *be = m->be;
    const layer_params *lp = &m->lp[l];
    layer_acts *a = &m->acts[l];
    int N = m->N, d = m->d, ha = m->Ha * m->Da;
    int window = lp->kind == 'A' ? m->T : m->window;
    void **D = m->dbig;
    be->linear_bwd(D[0], G(lp->so), dbr, mixer_drop(m, l, a->ao, D[1], (size_t)N * ha, train),
                   P(lp->so), N, ha, d, false);
    drop_bwd(m, D[0], D[0], (size_t)N * ha, m->cfg.mixer_dropout, place_mixer(m, l), train);
    be->attention_bwd(D[1], D[2], D[3], D[0], a->aq, a->ak, a->av, a->ao, a->lse, m->B, m->T,
                      m->Ha, m->Da, window, 1.0 / sqrt(m->Da), m->doc_start);
    be->rope_bwd(D[1], D[1], m->B, m->T, m->Ha, m->Da, m->cfg.swa_rope_base, rope_docs(m));
    be->rope_bwd(D[2], D[2], m->B, m->T, m->Ha, m->Da, m->cfg.swa_rope_base, rope_docs(m));
    linear_bwd_acc(m, m->dxn, true, lp->sq, D[1], a->xn1, d, ha, later);
    linear_bwd_acc(m, m->dxn, false, lp->sk, D[2], a->xn1, d, ha, later);
    linear_bwd_acc(m, m->dxn, false, lp->sv, D[3], a->xn1, d, ha, later);
}

// train.recompute = full: redo layer l's cheap forward ops into the shared buffers (carve)
// before its backward reads them, with the calls and arguments of forward() and gdn_mixer_fwd
// (the norms forward() fused with the residual add: rmsnorm_fwd of the stored sum, bitwise the
// same).
static void recompute_layer(model *m, int l) {
    const backend *be = m->be;
    const layer_params *lp = &m->lp[l];
    layer_acts *a = &m->acts[l];
    const gdn_config *c = &m->cfg;
    int N = m->N, d = m->d, H = m->H;
    be->rmsnorm_fwd(a->xn1, a->rstd1, a->x_in, P(lp->norm1), N, d, c->norm_eps);
    if (lp->kind == 'G') {
        gdn_qkv_fwd(m, l);
        const inproj_layout L = gdn_inproj(m, l);
        be->gated_rmsnorm_fwd(a->on, a->rstd_o, a->o, a->z, P(lp->onorm), (size_t)N * H, m->dv,
                              L.zh, L.zld, c->norm_eps);
    }
    be->rmsnorm_fwd(a->xn2, a->rstd2, a->x_mid, P(lp->norm2), N, d, c->norm_eps);
    be->swiglu_fwd(a->m_h, a->m_gate, a->m_up, (size_t)N, m->F, mlp_ld(m, l));
}

// First element of layer l's parameters; l == L: of norm_f. build_table lays out layer 0, ...,
// layer L-1 (norm1 opens each), then norm_f, embed, lm_head (untied), each padded to 32.
static size_t layer_elem_lo(const model *m, int l) {
    return m->params[l < m->L ? m->lp[l].norm1 : m->norm_f].offset;
}

// Hand the final gradients [lo, hi) to the hook (model.h) when it is armed.
static void grads_ready(model *m, size_t lo, size_t hi) {
    if (m->grad_hook && m->grad_hook_armed) m->grad_hook(m, lo, hi, m->grad_hook_ctx);
}

double model_forward_backward(model *m, const int32_t *x, const int32_t *y, double grad_scale,
                              bool train) {
    const backend *be = m->be;
    int N = m->N, d = m->d, F = m->F;
    size_t nd = (size_t)N * d;
    size_t emb_lo = m->params[m->wte].offset;
    size_t emb_hi = m->lm_head == m->wte ? m->n_elems : m->params[m->lm_head].offset;
    forward(m, x, train);
    memcpy(m->tgt, y, (size_t)N * sizeof(int32_t));
    double loss_sum = head_loss(m, grad_scale, true);  // and the LM head's backward
    if (m->lm_head != m->wte) grads_ready(m, emb_hi, m->n_elems);
    be->rmsnorm_bwd(m->dx, G(m->norm_f), NULL, m->dxn, m->x_final, P(m->norm_f), m->rstd_f, N, d,
                    false);
    grads_ready(m, layer_elem_lo(m, m->L), emb_lo);
    // train.recompute = light: xn1, xn2, m_h and on (shared, carve) are written again by the
    // backward kernels that read their inputs anyway (swiglu_bwd, the norms' backwards: an extra
    // output), and the weight gradients that read them run after those kernels (dw_later): the
    // same GEMMs and kernels on the same values as without it, in another order
    const bool light = m->cfg.recompute == RECOMPUTE_LIGHT;
    dw_later later = {.n = 0}, *lt = light ? &later : NULL;
    for (int l = m->L - 1; l >= 0; l--) {
        const layer_params *lp = &m->lp[l];
        layer_acts *a = &m->acts[l];
        // the shared buffers still hold the last layer's forward: only the others are redone
        if (m->cfg.recompute == RECOMPUTE_FULL && l < m->L - 1) recompute_layer(m, l);
        // MLP branch: dx holds d x_out (light: wdown's gradient once swiglu_bwd has written h)
        const void *dbr = residual_bwd(m, l, 1, train);
        linear_bwd_acc(m, m->dbig[0], true, lp->wdown, dbr, a->m_h, F, d, lt);
        // d gate, d up: the column halves of one (N, 2F) in dbig[1..2] when fused (mlp_fused)
        const bool fused = mlp_fused(m, l);
        void *dgate = m->dbig[1];
        void *dup = fused ? (char *)dgate + (size_t)F * ELEM(m, BE_ACT) : m->dbig[2];
        be->swiglu_bwd(dgate, dup, light ? a->m_h : NULL, m->dbig[0], a->m_gate, a->m_up,
                       (size_t)N, F, mlp_ld(m, l));
        if (light) dw_later_run(m, &later, a->m_h, F);                 // wdown
        if (fused) {  // dx = [d gate | d up] [W_gate; W_up], the (2F, d) gradient +=
            linear_bwd_acc(m, m->dxn, true, lp->wgate, dgate, a->xn2, d, 2 * F, lt);
        } else {
            linear_bwd_acc(m, m->dxn, true, lp->wgate, dgate, a->xn2, d, F, lt);
            linear_bwd_acc(m, m->dxn, false, lp->wup, dup, a->xn2, d, F, lt);
        }
        be->rmsnorm_bwd(m->dx, G(lp->norm2), light ? a->xn2 : NULL, m->dxn, a->x_mid, P(lp->norm2),
                        a->rstd2, N, d, true);                         // dx = d x_mid
        if (light) dw_later_run(m, &later, a->xn2, d);                 // gate, up
        // mixer branch
        dbr = residual_bwd(m, l, 0, train);
        if (lp->kind == 'G')
            gdn_mixer_bwd(m, l, dbr, train, lt);
        else
            attn_mixer_bwd(m, l, dbr, train, lt);
        be->rmsnorm_bwd(m->dx, G(lp->norm1), light ? a->xn1 : NULL, m->dxn, a->x_in, P(lp->norm1),
                        a->rstd1, N, d, true);                         // dx = d x_in
        if (light) dw_later_run(m, &later, a->xn1, d);                 // the input projections
        grads_ready(m, layer_elem_lo(m, l), layer_elem_lo(m, l + 1));
    }
    drop_bwd(m, m->dx, m->dx, nd, m->cfg.embed_dropout, PLACE_EMBED, train);
    be->embedding_bwd(G(m->wte), m->dx, m->tok, N, d);
    grads_ready(m, emb_lo, emb_hi);
    return loss_sum;
}

size_t model_count_params(const model *m, bool include_embeddings) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) {
        if (!include_embeddings && m->params[i].kind == PARAM_EMBED) continue;
        n += m->params[i].numel;
    }
    return n;
}

void model_print_summary(const model *m, FILE *f) {
    fprintf(f, "model: %d layers, pattern %s, d %d, vocab %d, mlp %d, GDN %dx(dk %d, dv %d), "
               "attn %dx%d window %d, %s embeddings\n",
            m->L, m->cfg.pattern, m->d, m->V, m->F, m->H, m->dk, m->dv, m->Ha, m->Da, m->window,
            m->cfg.tie_embeddings ? "tied" : "untied");
    fprintf(f, "model: %.3fM parameters (%.3fM without embeddings), %d tensors, %.2f MFLOP/token\n",
            model_count_params(m, true) / 1e6, model_count_params(m, false) / 1e6, m->n_params,
            m->flops_per_token / 1e6);
    if (m->head_rows < m->N)  // say where the logits memory went (model.c head_loss)
        fprintf(f, "model: LM head and loss in %d row chunks of %d tokens (train.head_chunk_rows; "
                   "logits buffer %.1f MiB)\n",
                (int)GDN_CDIV(m->N, m->head_rows), m->head_rows,
                (double)m->head_rows * m->V * ELEM(m, BE_ACT) / 1048576.0);
    if (m->cfg.gdn_bwd_states == GDN_BWD_STATES_SAVED)
        fprintf(f, "model: gdn.bwd_states = saved keeps the GDN chunk-start states for the backward\n");
    else if (m->cfg.gdn_bwd_states == GDN_BWD_STATES_RECOMPUTE)
        fprintf(f, "model: gdn.bwd_states = recompute: the GDN backward recomputes its chunk-start states\n");
    if (m->be->fuse_projections && !mlp_fused(m, 0))  // padded weights, or F rows not 16-byte multiples
        fprintf(f, "model: the MLP's gate and up projections as two GEMMs\n");
    if (m->cfg.recompute == RECOMPUTE_FULL)
        fprintf(f, "model: train.recompute = full: norm, conv, SiLU, L2 norm, gated norm and "
                   "SwiGLU outputs shared by the layers, redone before each layer's backward\n");
    else if (m->cfg.recompute == RECOMPUTE_LIGHT)
        fprintf(f, "model: train.recompute = light: norm, gated norm and SwiGLU outputs shared by "
                   "the layers, written again by the backward kernels\n");
    fprintf(f, "memory: params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, activations %.1f MiB, "
               "scratch %.1f MiB (backend %s, %zu-byte activations)\n",
            m->a_params.size / 1048576.0, m->a_grads.size / 1048576.0, m->a_opt.size / 1048576.0,
            m->a_acts.size / 1048576.0, m->a_scratch.size / 1048576.0, m->be->name, ELEM(m, BE_ACT));
}
