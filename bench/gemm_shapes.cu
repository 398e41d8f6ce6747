// gemm_shapes.cu — on the GPU machine: ms and TFLOP/s of the model's matmuls through cuda_linear
// (cuBLASLt, bf16 in, fp32 accumulate; the same plans as training), to decide fusions before
// writing them: e.g. SwiGLU's gate and up as two 1024 -> 2816 GEMMs or one 1024 -> 5632.
//   nvcc -O3 -std=c++17 -arch=sm_90a -Isrc bench/gemm_shapes.cu build/libgdn_cuda.a build/libgdn.a \
//        -lcublasLt -lcublas -Xcompiler -fopenmp -lgomp -lm -o build/gemm_shapes
//   build/gemm_shapes [N=32768]
// Each line: N in out, forward ms, backward (dx + dW) ms, TFLOP/s of each; 5 warm-up calls, then
// the median of 20 timed calls (CUDA events). Inputs: uniform bf16 in [-1, 1) from a hash of the
// index (constant inputs toggle fewer bits and ran up to ~5% faster, so they would flatter).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_bf16.h>
#include "gemm_fill.cuh"
#include "cuda/gemm.h"
#include "core/cuda_check.h"


template <typename F> static double median_ms(F fn) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 5; i++) fn();
    std::vector<float> t;
    for (int i = 0; i < 20; i++) {
        CUDA_CHECK(cudaEventRecord(a, 0));
        fn();
        CUDA_CHECK(cudaEventRecord(b, 0));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    return t[t.size() / 2];
}

int main(int argc, char **argv) {
    const int N = argc > 1 ? atoi(argv[1]) : 32768;
    cuda_linear_init();
    const int shapes[][2] = {{1024, 2816}, {1024, 5632}, {2816, 1024}, {1024, 3080}, {1024, 1024}, {1024, 32000}};
    for (const auto &s : shapes) {
        const int in = s[0], out = s[1];
        void *x = gemm_dev_random((size_t)N * in * 2), *W = gemm_dev_random((size_t)out * in * 2), *y = gemm_dev_random((size_t)N * out * 2);
        void *dx = gemm_dev_random((size_t)N * in * 2);
        float *dW;
        CUDA_CHECK(cudaMalloc(&dW, (size_t)out * in * 4));
        CUDA_CHECK(cudaMemset(dW, 0, (size_t)out * in * 4));
        const double f = 2.0 * N * in * out;
        const double fw = median_ms([&] { cuda_linear_fwd(CUDA_BF16, y, x, W, N, in, out, 0); });
        const double bw = median_ms([&] { cuda_linear_bwd(CUDA_BF16, dx, dW, y, x, W, N, in, out, false, 0); });
        printf("RESULT N %d in %5d out %5d fwd %.3f ms %.0f TFLOP/s  bwd %.3f ms %.0f TFLOP/s\n", N, in, out, fw,
               f / fw * 1e-9, bw, 2 * f / bw * 1e-9);
        for (void *p : {x, W, y, dx, (void *)dW}) CUDA_CHECK(cudaFree(p));
    }
    return 0;
}
