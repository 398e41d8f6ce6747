// conv_silu_bench.cu — the fused short convolution + SiLU of GDN's q, k, v (src/fwd/conv1d.cu,
// src/bwd/conv1d.cu) at fla-220m's shapes: bf16, B*T = 32768 tokens (B 8 T 4096 and
// B 16 T 2048), q, k, v = 512 + 512 + 1024 channels read as columns of the fused input
// projection's output (row stride ld 3080, as model.c), K 4, heads of 128 for the L2 norm.
// Times conv_silu3_fwd (the register-window tiled kernel), conv_silu3_l2_fwd (the model's
// forward) and conv_silu3_bwd (the model's backward, its dw final kernel included; both on the
// ring kernels: one token stream per warp out of a per-thread cp.async ring): two rounds of 20
// back-to-back launches between CUDA events (each tensor > 2x the 60 MB L2), us per call and the
// GB/s of the bytes that must move (x and y; x, dy and dx), next to a strided device copy of x's
// C columns (the forward's bytes: its practical floor). Prints "RESULT op shape kernel us_round1
// us_round2 GB/s"; exits 1 if an op did not run the kernel named (cuda_conv_silu_ring_launches,
// cuda/ops_testing.h). Numbers: bench/model_gpu.md.
// Build (repo root, after building the libraries; or the CMake target conv_silu_bench):
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Isrc \
//        bench/conv_silu_bench.cu BUILD/libgdn_cuda.a BUILD/libgdn.a -Xcompiler -fopenmp -lgomp \
//        -lcublasLt -lcublas -lpthread -lm -o conv_silu_bench
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <functional>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "cuda/ops.h"
#include "cuda/ops_testing.h"
#include "gdn_bench_common.cuh"

__global__ void gen_bf16(__nv_bfloat16 *x, size_t n, uint64_t seed, float scale) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __float2bfloat16_rn(scale * normal(seed, i));
}
static void fill(__nv_bfloat16 *x, size_t n, uint64_t seed, float scale) {
    gen_bf16<<<(unsigned)((n + 255) / 256), 256>>>(x, n, seed, scale);
    CUDA_CHECK_LAUNCH();
}
template <typename T> static T *dalloc(size_t n) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    return (T *)p;
}
static int failures = 0;


int main() {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("conv_silu_bench: no GPU\n");
        return 77;
    }
    const int C0 = 512, C1 = 512, C2 = 1024, C = C0 + C1 + C2, K = 4, nd = 128;
    const size_t ld = 3080;
    const double eps = 1e-6, s0 = 1.0 / sqrt((double)nd), s1 = 1.0;
    const int shapes[][2] = {{8, 4096}, {16, 2048}};
    const size_t N = 32768;  // tokens of every shape
    __nv_bfloat16 *x = dalloc<__nv_bfloat16>(N * ld), *w = dalloc<__nv_bfloat16>((size_t)C * K);
    __nv_bfloat16 *y[3], *dy[3], *dx = dalloc<__nv_bfloat16>(N * ld);
    const int cw[3] = {C0, C1, C2};
    for (int i = 0; i < 3; i++) {
        y[i] = dalloc<__nv_bfloat16>(N * cw[i]);
        dy[i] = dalloc<__nv_bfloat16>(N * cw[i]);
        fill(dy[i], N * cw[i], 11 + i, 1.f);
    }
    float *rn0 = dalloc<float>(N * (C0 / nd)), *rn1 = dalloc<float>(N * (C1 / nd)), *dw = dalloc<float>((size_t)C * K);
    fill(x, N * ld, 1, 1.f);
    fill(w, (size_t)C * K, 2, 0.5f);
    CUDA_CHECK(cudaDeviceSynchronize());
    const double mb_fwd = 2.0 * N * C * 2 / 1e6, mb_bwd = 3.0 * N * C * 2 / 1e6;  // MB that must move
    printf("conv_silu_bench: bf16, C %d+%d+%d (ld %zu), K %d, %zu tokens; GB/s of %.0f MB (forward: x, y) and "
           "%.0f MB (backward: x, dy, dx)\n", C0, C1, C2, ld, K, N, mb_fwd, mb_bwd);
    {  // the practical floor: x's C columns copied to a packed buffer (the forward's bytes)
        __nv_bfloat16 *yc = dalloc<__nv_bfloat16>(N * C);
        double us[2];
        for (int r = 0; r < 2; r++)
            us[r] = time_us([&]() {
                CUDA_CHECK(cudaMemcpy2DAsync(yc, (size_t)C * 2, x, ld * 2, (size_t)C * 2, N, cudaMemcpyDeviceToDevice, 0));
            });
        printf("COPY   x[:, :%d] -> packed     %8.1f %8.1f  %6.0f GB/s (floor: forward ~ this, backward ~ 1.5x)\n", C,
               us[0], us[1], mb_fwd / 1e3 / (std::min(us[0], us[1]) * 1e-6));
        CUDA_CHECK(cudaFree(yc));
    }
    for (const auto &sh : shapes) {
        const int B = sh[0], T = sh[1];
        char shape[32];
        snprintf(shape, sizeof shape, "B%d_T%d", B, T);
        auto fwd = [&]() { cuda_conv_silu3_fwd(CUDA_BF16, y[0], y[1], y[2], x, w, B, T, C0, C1, C2, K, ld, NULL, 0); };
        auto l2 = [&]() {
            cuda_conv_silu3_l2_fwd(CUDA_BF16, y[0], y[1], y[2], rn0, rn1, x, w, B, T, C0, C1, C2, K, ld, nd, eps, s0,
                                   s1, NULL, 0);
        };
        auto bwd = [&]() {
            cuda_conv_silu3_bwd(CUDA_BF16, dx, dw, dy[0], dy[1], dy[2], x, w, B, T, C0, C1, C2, K, ld, NULL, 0);
        };
        struct {
            const char *name;
            std::function<void()> fn;
            double mb;
            bool ring;  // runs a ring kernel
        } ops[3] = {{"fwd", fwd, mb_fwd, false}, {"l2fwd", l2, mb_fwd, true}, {"bwd", bwd, mb_bwd, true}};
        for (auto &op : ops) {
            const unsigned long n0 = cuda_conv_silu_ring_launches();
            double us[2];
            for (int r = 0; r < 2; r++) us[r] = time_us(op.fn);
            const bool ok = (cuda_conv_silu_ring_launches() != n0) == op.ring;
            printf("RESULT %-6s %-14s %-5s %8.1f %8.1f  %6.0f GB/s%s\n", op.name, shape, op.ring ? "ring" : "tiled",
                   us[0], us[1], op.mb / 1e3 / (std::min(us[0], us[1]) * 1e-6), ok ? "" : "  WRONG KERNEL");
            if (!ok) failures++;
        }
    }
    printf("ring launches: %lu\n", cuda_conv_silu_ring_launches());
    printf("conv_silu_bench: %s\n", failures ? "an op ran the wrong kernel" : "every op on its kernel");
    return failures ? 1 : 0;
}
