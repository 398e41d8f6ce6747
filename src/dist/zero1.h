// zero1.h — ZeRO-1 (dist.zero1, DESIGN 8): AdamW's state sharded across the ranks, on the CPU
// and the GPU backend.
//
// Each rank keeps AdamW's m and v for its shard of the flat parameter arena only
// (model_shard_optimizer: 2/world of their memory; shards as in dist.h) and updates its shard of
// the master weights (the parameters themselves when the backend keeps no master copy); the
// weights are then all-gathered, so every rank holds the whole updated model. The gradient sums
// arrive as grad_sync with shard = zero1_shard_elems leaves them: this rank's shard of the
// gradient arena holds the sums over the ranks.
//
// z: dist_shard_capacity(n) elements of the gradient / optimizer class (host float64 on the CPU,
// device fp32 on the GPU), allocated once with the backend's alloc: the in-place buffer of the
// all-gathers. The gradient, optimizer and (without a master copy) parameter classes must have
// one element type (checked at create).
//
// A checkpoint gathers m and v through z onto rank 0's host (zero1_gather_moments before
// checkpoint_save, zero1_release_moments after). Every call here is collective: every rank
// calls it, in the same order.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "../diag/timeline.h"
#include "../model/model.h"
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

// dst[0, n) <- src[0, n), device fp32 to device fp32 (to_bf16 false) or to device bf16 rounded
// to nearest, as the GPU AdamW writes the bf16 parameters (to_bf16 true).
typedef void (*zero1_device_copy_fn)(void *dst, bool to_bf16, const void *src, size_t n);
// The GPU's copy (zero1_cuda.cu; CUDA builds only).
void zero1_device_copy(void *dst, bool to_bf16, const void *src, size_t n);

typedef struct {
    dist *d;
    model *m;
    void *z;                          // (dist_shard_capacity(n_elems)) gradient class, see above
    size_t lo, hi;                    // this rank's shard of the flat arena
    zero1_device_copy_fn device_copy; // GPU backend: the copy above; CPU backend: NULL (memcpy)
} zero1;

// Shard m's optimizer state (call it right after model_create, before the parameters are drawn
// or loaded: model_shard_optimizer) and allocate z. device_copy: NULL when m's backend keeps its
// arenas on the host (float64), else the device copy (zero1_create picks it).
zero1 *zero1_create_with(dist *d, model *m, zero1_device_copy_fn device_copy);
void zero1_free(zero1 *z);  // releases z; NULL is allowed

// Elements per rank's shard (dist_shard_capacity / world): grad_sync_create's shard.
size_t zero1_shard_elems(const zero1 *z);

// One step, after the gradient sums: the global norm from the shards (returned; the caller
// clips and logs it), AdamW on this rank's shard of the flat arenas (optim_adamw_range: runs of
// same-decay tensors cut to the shard), the weights all-gathered through z. No update when the
// norm is not finite or above max_norm (INFINITY: none; train.c's bad-step skip). On the
// timeline's compute row (tl may be NULL): "norm+update" ends before the all-gather; the
// caller's next point ends the "all-gather" span.
double zero1_step(zero1 *z, long step, double lr, double max_norm, timeline *tl);

// Before a checkpoint: the full AdamW m and v, gathered through z from every rank's shard, as
// host float64 arrays on rank 0 (m->ckpt_moments, which checkpoint_save writes).
// zero1_release_moments frees them after the save.
void zero1_gather_moments(zero1 *z);
void zero1_release_moments(zero1 *z);

// zero1_create_with and the device copy of this build: programs built with CUDA
// (GDN_HAVE_CUDA is a public definition of the gdn_cuda target) pass zero1_device_copy when the
// backend is on the GPU; programs without CUDA have only host backends.
static inline zero1 *zero1_create(dist *d, model *m, bool on_gpu) {
#ifdef GDN_HAVE_CUDA
    return zero1_create_with(d, m, on_gpu ? zero1_device_copy : NULL);
#else
    (void)on_gpu;  // no GPU backend without CUDA
    return zero1_create_with(d, m, NULL);
#endif
}

#ifdef __cplusplus
}
#endif
