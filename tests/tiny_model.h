// tiny_model.h — the tiny model the model tests share (C, and C++ for the CUDA tests): d 16, vocab
// 23, SwiGLU 24, GDN 2 heads of dk 8 / dv 16, attention 2 heads of 8 with window 4, the given
// pattern and layer count.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/core/config.h"
#include "../src/core/rng.h"
#include "../src/model/model.h"

static inline gdn_config tiny_config(const char *pattern, int layers) {
    gdn_config c;
    config_defaults(&c);
    snprintf(c.pattern, sizeof c.pattern, "%s", pattern);
    c.n_layers = layers;
    c.d_model = 16;
    c.vocab_size = 23;
    c.mlp_hidden = 24;
    c.gdn_n_heads = 2;
    c.gdn_head_dim = 8;
    c.gdn_expand_v = 2;
    c.swa_n_heads = 2;
    c.swa_head_dim = 8;
    c.swa_window = 4;
    return c;
}

// The GDN switches the model tests sweep, applied to c by index: 0 gate off, 1 delta off, 2 no
// short conv, 3 no output gate, 4 negative eigenvalues allowed, 5 untied embeddings, 6 dv = dk
// (expand_v 1); any other index leaves c as it is.
static inline void tiny_ablate(gdn_config *c, int v) {
    switch (v) {
    case 0: c->gdn_gate = false; break;
    case 1: c->gdn_delta = false; break;
    case 2: c->gdn_short_conv = false; break;
    case 3: c->gdn_output_gate = false; break;
    case 4: c->gdn_allow_neg_eigval = true; break;
    case 5: c->tie_embeddings = false; break;
    case 6: c->gdn_expand_v = 1; break;
    }
}

// Zero the gradients, then forward + backward of two micro-batches of B x T tokens (x, y hold
// both, one after the other) with gradient accumulation and per-micro-batch dropout keys 0xabc,
// 0xabd: the summed loss. Shared by the tests that compare two builds of the same model.
static inline double tiny_train2(model *m, const int32_t *x, const int32_t *y, int B, int T) {
    model_zero_grads(m);
    double loss = 0;
    for (int mb = 0; mb < 2; mb++) {
        m->dropout_key = 0xabc + (uint64_t)mb;
        loss += model_forward_backward(m, x + mb * B * T, y + mb * B * T, 1.0 / (2.0 * B * T), true);
    }
    return loss;
}

// AdamW moments of every tensor (the alignment padding stays 0) filled from r: m ~ 1e-3 N(0, 1),
// v ~ 1e-6 U(0, 1) (v >= 0), element by element in that order.
static inline void tiny_fill_moments(model *m, rng_t *r) {
    double *mm = (double *)m->opt_m, *vv = (double *)m->opt_v;
    for (int t = 0; t < m->n_params; t++)
        for (size_t i = m->params[t].offset; i < m->params[t].offset + m->params[t].numel; i++) {
            mm[i] = 1e-3 * rng_normal(r);
            vv[i] = 1e-6 * rng_uniform(r);
        }
}

// Every parameter and AdamW moment of a and b bitwise equal.
static inline bool tiny_same_state(const model *a, const model *b) {
    size_t n = a->n_elems;
    double *x = (double *)gdn_malloc(n * sizeof(double));
    double *y = (double *)gdn_malloc(n * sizeof(double));
    bool same = true;
    for (int i = 0; i < a->n_params; i++) {
        model_param_download(a, i, x);
        model_param_download(b, i, y);
        same &= memcmp(x, y, a->params[i].numel * sizeof(double)) == 0;
    }
    same &= memcmp(a->opt_m, b->opt_m, a->opt_n * sizeof(double)) == 0;
    same &= memcmp(a->opt_v, b->opt_v, a->opt_n * sizeof(double)) == 0;
    free(x);
    free(y);
    return same;
}
