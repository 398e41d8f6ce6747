// cuda/colsum.cuh — deterministic column sums for parameter gradients (src/bwd/*.cu):
// f.dst(c) += sum_{r < rows} f.term(r, c), taken without float atomics in two passes. The rows
// are cut into S slices (S a function of rows and columns only, never of the device), thread c
// of slice s sums its rows in order into part[s][c]; then one warp per column sums the S
// partials in a fixed order and adds the result to the gradient. part is a per-device scratch of
// at most max(2^18, cols) floats, allocated on first use and kept. Kernels that take their own
// partials (the fused norm backwards, the tiled conv1d backward) run only the second pass, on
// partials laid out as dw itself (colsum_final_dw).
#pragma once
#include "elementwise.cuh"

// Not in the anonymous namespace (one definition each, in src/cuda/colsum.cu):
// At least nfloats of device scratch for deterministic partial sums, one buffer per device,
// reused by every reduction-bearing backward launched on its stream (colsum_launch, the norm and
// conv backwards).
float *colsum_scratch(size_t nfloats);
// dw[c] += sum_{s < S} part[s][c] for c < cols (colsum_final_kernel in fixed order), launch checked.
void colsum_final_dw(float *dw, const float *part, int cols, int S, cudaStream_t s);

namespace {

constexpr size_t COLSUM_SCRATCH = (size_t)1 << 18;  // floats; S * cols <= max(this, cols)
constexpr size_t COLSUM_MIN_ROWS = 16;              // rows per slice, at least (before rounding)
constexpr int COLSUM_MAX_SLICES = 4096, COLSUM_THREADS = 256, COLSUM_MAX_DEVICES = 64;

template <class F>
__global__ void __launch_bounds__(COLSUM_THREADS)
    colsum_partial_kernel(const F f, float *part, size_t rows, int cols, size_t rows_per_slice) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const size_t r0 = (size_t)blockIdx.y * rows_per_slice, r1 = GDN_MIN(rows, r0 + rows_per_slice);
    float acc = 0.f;
#pragma unroll 4
    for (size_t r = r0; r < r1; r++) acc += f.term(r, c);
    part[(size_t)blockIdx.y * cols + c] = acc;
}

template <class F> __global__ void __launch_bounds__(256) colsum_final_kernel(const F f, const float *part, int cols, int S) {
    const int c = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x & 31;
    if (c >= cols) return;  // whole warp
    float acc = 0.f;
    for (int s = lane; s < S; s += 32) acc += part[(size_t)s * cols + c];
    acc = warp_sum(acc);
    if (lane == 0) *f.dst(c) += acc;
}

template <class F> void colsum_launch(const F &f, size_t rows, int cols, cudaStream_t s) {
    if (rows == 0 || cols <= 0) return;
    size_t S = GDN_CDIV(rows, COLSUM_MIN_ROWS);
    S = GDN_MIN(S, GDN_MAX((size_t)1, COLSUM_SCRATCH / (size_t)cols));
    S = GDN_MIN(S, (size_t)COLSUM_MAX_SLICES);
    const size_t rps = GDN_CDIV(rows, S);
    float *part = colsum_scratch(S * (size_t)cols);
    const int threads = GDN_MIN(COLSUM_THREADS, (int)GDN_CDIV(cols, 32) * 32);
    const dim3 grid((unsigned)GDN_CDIV(cols, threads), (unsigned)S);
    colsum_partial_kernel<F><<<grid, threads, 0, s>>>(f, part, rows, cols, rps);
    CUDA_CHECK_LAUNCH();
    colsum_final_kernel<F><<<(unsigned)GDN_CDIV((size_t)cols * 32, (size_t)256), 256, 0, s>>>(f, part, cols, (int)S);
    CUDA_CHECK_LAUNCH();
}

}  // namespace
