// tiny_model.h — the tiny model the CPU model tests share: d 16, vocab 23, SwiGLU 24, GDN 2 heads
// of dk 8 / dv 16, attention 2 heads of 8 with window 4, the given pattern and layer count.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "../src/core/config.h"
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
