// sampling_cuda.h — the sampling rule of sampling.h on the device (sampling_cuda.cu), for the GPU
// decoder (decode_cuda.cu) and its test.
#pragma once
#include <stdint.h>
#include <cuda_runtime.h>
#include "../cuda/ops.h"
#include "sampling.h"

#ifdef __cplusplus
extern "C" {
#endif

// Row r of logits (rows, V; dt) -> out[r] (device int32): sample_token(row r, step *pos) with
// key = sample_key(p->seed). trace: NULL, or (rows, trace_ld) where trace[r, *pos] gets it too.
// w: (rows, V) float64 scratch. bad: device int, set to 1 + r for a row r with a non-finite
// logit (its out is 0); the caller reads it and reports.
void cuda_sample_tokens(cuda_dtype dt, int32_t *out, const void *logits, int rows, int V,
                        const sample_params *p, uint64_t key, const int *pos, int32_t *trace,
                        int trace_ld, double *w, int *bad, cudaStream_t s);

#ifdef __cplusplus
}
#endif
