// gemm.h — the GPU linear layer (y = x W^T, no bias) and its backward, through cuBLASLt:
// bf16 or fp32 operands, fp32 accumulation (CUBLAS_COMPUTE_32F; never TF32, so fp32 mode is
// true fp32). W is (out, in) row-major as in PyTorch; x, y, dx, dy are token-major (N rows).
// One cuBLASLt handle and one 32 MiB workspace for the process, created by cuda_linear_init;
// the algorithm of each (shape, dtype, alignment) is chosen once at its first use and cached:
// the heuristic's first one, or the fastest of its candidates whose output on that call's
// operands is bitwise the first one's (gemm.cu), so results are bitwise those of the
// heuristic's first choice and repeatable from step to step and run to run.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <cuda_runtime.h>
#include "ops.h"  // cuda_dtype

#ifdef __cplusplus
extern "C" {
#endif

// Create the handle and the workspace (idempotent). Called by backend_cuda_get.
void cuda_linear_init(void);
// Algorithm tuning on (true, the default) or off (false: the heuristic's first choice);
// the config's train.gemm_tune (backend_cuda_set_gemm_tune). Drops the cached plans (tests
// compare the two). The choice never changes a result (gemm.cu): tuning costs a little time at
// each shape's first call and may make the GEMMs faster.
void cuda_linear_set_tune(bool on);
// What tuning did so far: plans tuned, candidates run besides each first choice, and of those
// the ones dropped because their output differed from the first choice's, and plans whose
// algorithm is not the first choice.
typedef struct {
    int plans, candidates, dropped, changed;
} cuda_linear_tune_stats;
cuda_linear_tune_stats cuda_linear_get_tune_stats(void);
// y (N,out) = x (N,in) W^T, W (out,in); x, W, y in dt. An out of 256 q + r with 0 < r <= 32
// runs as two GEMMs (the 256 q, then the r outputs; gemm.cu split_rest); the backward's never.
void cuda_linear_fwd(cuda_dtype dt, void *y, const void *x, const void *W, int N, int in, int out,
                     cudaStream_t s);
// dx (N,in) = dy (N,out) W   (=, in dt; acc_dx: +=, in the GEMM's fp32 epilogue, one rounding;
//                             skipped when dx is NULL)
// dW (out,in) += dy^T x      (+=, fp32 gradient; skipped when dW is NULL)
void cuda_linear_bwd(cuda_dtype dt, void *dx, float *dW, const void *dy, const void *x,
                     const void *W, int N, int in, int out, bool acc_dx, cudaStream_t s);

#ifdef __cplusplus
}
#endif
