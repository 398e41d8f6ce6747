// gputest.h — what GPU tests share: skip cleanly (exit 77, reason printed) when no CUDA
// device is usable, so CI (no GPU) reports them as skipped, never as passed.
#pragma once
#include "../../src/core/cuda_check.h"
#include "../testutil.h"

// Host bf16 bits: float -> bf16 round to nearest even (inputs are finite), bf16 -> double.
static inline uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline double bf2d(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline void gpu_require(const char *test) {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess || n == 0) {
        printf("%s: SKIPPED: no usable CUDA device (%s)\n", test,
               rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
        exit(GC_SKIP_RC);
    }
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    printf("%s: device 0 = %s (sm_%d%d, %d SMs)\n", test, p.name, p.major, p.minor,
           p.multiProcessorCount);
}
