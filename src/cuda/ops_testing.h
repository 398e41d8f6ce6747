// cuda/ops_testing.h — test hooks of the CUDA ops (for tests/ and bench/, not the backend):
// launch counters of the kernels that only some shapes reach, so that a test can check which
// kernel ran. Counted on the host at launch, process-wide, by the launchers that implement them.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// The conv + SiLU ring kernels (one token stream per warp out of a per-thread cp.async ring:
// the tiled forward with the L2 norm, the tiled backward with packs of 4 channels;
// src/fwd/conv1d.cu, src/bwd/conv1d.cu).
unsigned long cuda_conv_silu_ring_launches(void);
// The narrow-row gated RMSNorm kernels (one 16-byte pack a lane: the forward on rows of at most
// 32 packs, the backward on such rows with z; src/fwd/gated_rmsnorm.cu, src/bwd/gated_rmsnorm.cu).
unsigned long cuda_gated_rmsnorm_narrow_launches(void);

#ifdef __cplusplus
}
// The launchers' side: one launch counted (defined in src/fwd/conv1d.cu and
// src/fwd/gated_rmsnorm.cu).
void conv_silu_ring_count();
void gated_rmsnorm_narrow_count();
#endif
