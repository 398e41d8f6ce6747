// gemm_fill.cuh — random GEMM operands for bench/gemm_shapes.cu and bench/gemm_algos.cu:
// uniform bf16 in [-1, 1) from a hash of the index (constant inputs toggle fewer bits and ran
// up to ~5-20% faster on an H200, so they would flatter), in fresh device buffers.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_bf16.h>

__global__ void gemm_fill_kernel(__nv_bfloat16 *p, size_t n, unsigned seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2bfloat16((float)(h >> 8) / 8388608.f - 1.f);
    }
}

static inline void gemm_fill_check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "gemm bench: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

// bytes of device memory: zeroed, then its first bytes / 2 bf16 values drawn (fp32 buffers that
// are only written, such as dW, may use it too: they get random bits, then are overwritten or
// accumulated into)
static inline void *gemm_dev_random(size_t bytes) {
    static unsigned seed = 1;
    void *p;
    gemm_fill_check(cudaMalloc(&p, bytes), "cudaMalloc");
    gemm_fill_check(cudaMemset(p, 0, bytes), "cudaMemset");
    gemm_fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)p, bytes / 2, seed++ * 0x9e3779b9u);
    gemm_fill_check(cudaGetLastError(), "gemm_fill_kernel");
    return p;
}
