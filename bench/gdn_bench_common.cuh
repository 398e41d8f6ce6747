// gdn_bench_common.cuh — what the GDN benchmarks (gdn_fwd_bench.cu, gdn_bwd_bench.cu) share:
// inputs drawn on the device as BENCHMARKS.md describes them (q, k L2-normalised rows, g =
// logsigmoid(N(0,1) + 3), beta = sigmoid(U(0,1))), one head copied back as doubles for the
// float64 reference, the relative L2 error, the median time; time_us for the single-kernel benches
// (conv_silu_bench, norm_bench).
#pragma once
#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "core/cuda_check.h"
#include "fwd/gdn_cuda.h"

// ---- device-side input generation (hash -> uniform / normal) ------------------------------
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
__device__ __forceinline__ float unif(uint64_t seed, uint64_t i) {  // (0, 1)
    return ((float)(mix64(seed * 0x100000001b3ull + i) >> 40) + 0.5f) * (1.0f / 16777216.0f);
}
__device__ __forceinline__ float normal(uint64_t seed, uint64_t i) {
    const float u1 = unif(seed, 2 * i), u2 = unif(seed, 2 * i + 1);
    return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}
// rows of D values: N(0,1), L2-normalised when norm, stored bf16 (one warp per row)
__global__ void gen_rows(__nv_bfloat16 *x, size_t rows, int D, uint64_t seed, bool norm) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    float v[16];  // D <= 512
    float ss = 0.f;
    for (int j = 0; j < D / 32; j++) {
        v[j] = normal(seed, row * D + j * 32 + lane);
        ss += v[j] * v[j];
    }
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float s = norm ? rsqrtf(ss + 1e-12f) : 1.f;
    for (int j = 0; j < D / 32; j++) x[row * D + j * 32 + lane] = __float2bfloat16_rn(v[j] * s);
}
__global__ void gen_gates(float *g, float *beta, size_t n, uint64_t seed) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = normal(seed, i) + 3.f;
    g[i] = fminf(x, 0.f) - log1pf(expf(-fabsf(x)));  // logsigmoid
    beta[i] = 1.f / (1.f + expf(-unif(seed + 7, i)));
}
__global__ void gen_f32(float *x, size_t n, uint64_t seed) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = normal(seed, i);
}

// q, k (N rows of Dk, L2-normalised), v (N rows of Dv), bf16, and g, beta (N), fp32: allocated
// and drawn from seeds seed, seed + 1, seed + 2 and seed + 3 (g and beta).
static inline void gen_qkv_gates(__nv_bfloat16 **q, __nv_bfloat16 **k, __nv_bfloat16 **v, float **g,
                                 float **beta, size_t N, int Dk, int Dv, uint64_t seed) {
    CUDA_CHECK(cudaMalloc(q, N * Dk * 2));
    CUDA_CHECK(cudaMalloc(k, N * Dk * 2));
    CUDA_CHECK(cudaMalloc(v, N * Dv * 2));
    CUDA_CHECK(cudaMalloc(g, N * 4));
    CUDA_CHECK(cudaMalloc(beta, N * 4));
    gen_rows<<<(unsigned)((N + 7) / 8), 256>>>(*q, N, Dk, seed, true);
    CUDA_CHECK_LAUNCH();
    gen_rows<<<(unsigned)((N + 7) / 8), 256>>>(*k, N, Dk, seed + 1, true);
    CUDA_CHECK_LAUNCH();
    gen_rows<<<(unsigned)((N + 7) / 8), 256>>>(*v, N, Dv, seed + 2, false);
    CUDA_CHECK_LAUNCH();
    gen_gates<<<(unsigned)((N + 255) / 256), 256>>>(*g, *beta, N, seed + 3);
    CUDA_CHECK_LAUNCH();
}

// ---- the GDN benchmarks' frame ----------------------------------------------------------------
// BENCHMARKS.md's three kernel shapes, then one GDN layer of configs/fla-220m.ini: B, T, H, Dk, Dv
static const int bench_shapes[4][5] = {{8, 4096, 16, 128, 128}, {4, 4096, 16, 128, 256},
                                       {1, 32768, 16, 128, 128}, {16, 2048, 4, 128, 256}};

// The chunk forward's parameters for a bench shape: gate and delta on, bf16, outputs o and ht,
// everything else zero (inputs, workspace, kept tensors: set by the bench).
static inline gdn_fwd_params bench_fwd_params(int B, int T, int H, int Dk, int Dv, void *o, float *ht) {
    gdn_fwd_params p;
    memset(&p, 0, sizeof p);
    p.B = B; p.T = T; p.H = H; p.Dk = Dk; p.Dv = Dv;
    p.mode.gate = true; p.mode.delta = true;
    p.dtype = GDN_DTYPE_BF16;
    p.o = o; p.ht = ht;
    return p;
}

// The command line: --shape N (only bench_shapes[N]), --quick (each variant launched once,
// no check, no timing: a run for a profiler). Prints the bench's name and the device.
struct bench_args {
    int only = -1;
    bool quick = false;
};
static inline bench_args bench_start(const char *name, int argc, char **argv) {
    bench_args a;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) a.only = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) a.quick = true;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s: %s, %d SMs, L2 %d MiB\n", name, prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20);
    return a;
}

// head (b, h) of a (B,T,H,D) bf16 tensor -> (T,D) doubles
static std::vector<double> head_of(const __nv_bfloat16 *d, int T, int H, int D, int b, int h) {
    std::vector<__nv_bfloat16> tmp((size_t)T * D);
    CUDA_CHECK(cudaMemcpy2D(tmp.data(), (size_t)D * 2, d + ((size_t)b * T * H + h) * D,
                            (size_t)H * D * 2, (size_t)D * 2, T, cudaMemcpyDeviceToHost));
    std::vector<double> out(tmp.size());
    for (size_t i = 0; i < tmp.size(); i++) out[i] = (double)__bfloat162float(tmp[i]);
    return out;
}
static std::vector<double> gate_of(const float *d, int T, int H, int b, int h) {
    std::vector<float> tmp(T);
    CUDA_CHECK(cudaMemcpy2D(tmp.data(), 4, d + (size_t)b * T * H + h, (size_t)H * 4, 4, T,
                            cudaMemcpyDeviceToHost));
    return std::vector<double>(tmp.begin(), tmp.end());
}

static double rel_err(const std::vector<double> &a, const std::vector<double> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : (num == 0 ? 0 : INFINITY);
}
static double median(std::vector<float> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
}

// Median ms of n timed calls of run() (CUDA events around each, on the legacy stream), after 3
// warm-up calls; before each call, set_inputs(set) picks input set 1, 0, 1, ... (set =
// (i + 4) & 1 for i = -3 .. n - 1), so consecutive calls never find their inputs in the L2.
template <class S, class R> static double median_ms(int n, const S &set_inputs, const R &run) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int it = -3; it < n; it++) {
        set_inputs((it + 4) & 1);
        CUDA_CHECK(cudaEventRecord(e0));
        run();
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (it >= 0) ms.push_back(t);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return median(ms);
}

// us per call of fn (on the legacy stream): 20 launches between two events, after 3 warm-up calls
template <class F> static double time_us(const F &fn) {
    for (int i = 0; i < 3; i++) fn();
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    const int n = 20;
    CUDA_CHECK(cudaEventRecord(e0, 0));
    for (int i = 0; i < n; i++) fn();
    CUDA_CHECK(cudaEventRecord(e1, 0));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return 1e3 * ms / n;
}
