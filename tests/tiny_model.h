// tiny_model.h — the tiny model the CPU model tests share: d 16, vocab 23, SwiGLU 24, GDN 2 heads
// of dk 8 / dv 16, attention 2 heads of 8 with window 4, the given pattern and layer count.
#pragma once
#include <stdio.h>
#include "../src/core/config.h"

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
