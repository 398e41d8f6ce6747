// optim.h — AdamW with decoupled weight decay, global-norm clipping and LR schedules (DESIGN 4).
// The optimizer state (m, v) lives in the model's optimizer arena, one slot per parameter
// element; the update runs per tensor through the backend (so the GPU does it in place).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include "../core/config.h"
#include "../model/model.h"

// Learning rate at `step` (0-based) of `cfg->steps`: warmup (linear from lr/warmup to lr),
// then cosine | linear | constant | wsd (warmup-stable-decay: constant, then a linear decay to
// min_lr over the last decay_frac of the steps).
double optim_lr(const gdn_config *cfg, long step);

// sqrt of the sum of squares of every gradient element (one pass over the gradient arena).
double optim_grad_norm(const model *m);

// One AdamW step (t = step + 1 for the bias corrections). The gradients are scaled by
// min(1, grad_clip / norm) first when grad_clip > 0. Returns the scale applied.
double optim_step(model *m, long step, double lr, double grad_norm);

// The AdamW update (gradients times `scale`) of the flat arena elements [lo, hi) only, within
// the moments' range [opt_lo, opt_lo + opt_n): optim_step's whole arena, or ZeRO-1's shard.
void optim_adamw_range(model *m, size_t lo, size_t hi, long step, double lr, double scale);

#ifdef __cplusplus
}
#endif
