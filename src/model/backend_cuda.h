// backend_cuda.h — the GPU backend of backend.h (src/model/backend_cuda.cu).
//   bf16 mode: activations and parameters bf16; statistics, gradients, AdamW state fp32; fp32
//              master weights (master = true). For training.
//   fp32 mode: every class fp32, no master copy. For checks against the float64 CPU backend.
// The first call creates the process-wide cuBLASLt handle and workspace; it needs a CUDA device.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

const backend *backend_cuda_get(bool bf16);
// swa.deterministic: false lets the bf16 attention backward sum dq by atomics in one pass
// (attn_params.nondeterministic); true (the default) keeps the bitwise-repeatable two passes.
void backend_cuda_set_attention_deterministic(bool on);
// train.gemm_tune: cuBLASLt algorithm tuning on (the default) or off (gemm.h cuda_linear_set_tune;
// the same bits either way).
void backend_cuda_set_gemm_tune(bool on);
// gdn.bwd_segment_chunks: the GDN backward's chunks per segment (gdn_bwd_params.seg_chunks; 0,
// the default: the whole sequence at once; the same bits either way).
void backend_cuda_set_gdn_bwd_segment_chunks(int chunks);
// Number of usable CUDA devices (0 when none or no driver); never fails. train.device = auto.
int backend_cuda_devices(void);
// Datasheet dense peak FLOP/s of the current device (bf16 or fp32), 0 when unknown; its name.
double backend_cuda_peak_flops(bool bf16, char *name, size_t namelen);

#ifdef __cplusplus
}
#endif
