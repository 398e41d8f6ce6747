// gemm.h — the GPU linear layer (y = x W^T, no bias) and its backward, through cuBLASLt:
// bf16 or fp32 operands, fp32 accumulation (CUBLAS_COMPUTE_32F; never TF32, so fp32 mode is
// true fp32). W is (out, in) row-major as in PyTorch; x, y, dx, dy are token-major (N rows).
// One cuBLASLt handle and one 32 MiB workspace for the process, created by cuda_linear_init;
// the algorithm of each (shape, dtype, alignment) is chosen once at its first use and cached:
// the heuristic's first one, or for beta = 0 the fastest of its candidates whose output on that
// call's operands is bitwise the first one's (gemm.cu), so results are bitwise those of
// the heuristic's first choice and repeatable from step to step and run to run.
#pragma once
#include <stddef.h>
#include <cuda_runtime.h>
#include "ops.h"  // cuda_dtype

#ifdef __cplusplus
extern "C" {
#endif

// Create the handle and the workspace (idempotent). Called by backend_cuda_get.
void cuda_linear_init(void);
// Algorithm tuning on (1), off (0: the heuristic's first choice) or as GDN_GEMM_TUNE says (-1,
// the default: on unless it is "0"); drops the cached plans (tests compare the two).
void cuda_linear_set_tune(int on);
// What tuning did so far: plans tuned, candidates run besides each first choice, and of those
// the ones dropped because their output differed from the first choice's, and plans whose
// algorithm is not the first choice.
typedef struct {
    int plans, candidates, dropped, changed;
} cuda_linear_tune_stats;
cuda_linear_tune_stats cuda_linear_get_tune_stats(void);
// y (N,out) = x (N,in) W^T, W (out,in); x, W, y in dt. An out of 256 q + r with 0 < r <= 32
// runs as two GEMMs (the 256 q, then the r outputs; GDN_GEMM_SPLIT, gemm.cu); the
// backward's never.
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
