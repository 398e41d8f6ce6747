// norm_bench.cu — the GDN output norm (gated RMSNorm, src/fwd/gated_rmsnorm.cu and
// src/bwd/gated_rmsnorm.cu) at fla-220m's shape: bf16, 32768 tokens x 4 heads of 256 (131072
// rows), z at column 2056 of the fused input projection's rows of 3080 (as model.c), dz into a
// buffer of the same layout, the backward with y (train.recompute = light). Times the forward
// and the backward (its dw final kernel included), both on the narrow-row kernels: two rounds of
// 20 back-to-back launches between CUDA events (each tensor > the 60 MB L2), us per call and the
// GB/s of the bytes that must move (forward: x, z, y; backward: x, dy, z, dx, dz, y). Prints
// "RESULT op us_round1 us_round2 GB/s"; exits 1 if an op did not run a narrow-row kernel
// (cuda_gated_rmsnorm_narrow_launches, cuda/ops_testing.h). Numbers: bench/model_gpu.md.
// Build: the CMake target norm_bench; run by hand on a GPU (not a test).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <functional>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "cuda/ops.h"
#include "cuda/ops_testing.h"
#include "gdn_bench_common.cuh"

__global__ void gen_bf16(__nv_bfloat16 *x, size_t n, uint64_t seed, float scale, float offset) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __float2bfloat16_rn(offset + scale * normal(seed, i));
}
static void fill(__nv_bfloat16 *x, size_t n, uint64_t seed, float scale, float offset = 0.f) {
    gen_bf16<<<(unsigned)((n + 255) / 256), 256>>>(x, n, seed, scale, offset);
    CUDA_CHECK_LAUNCH();
}
template <typename T> static T *dalloc(size_t n) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    return (T *)p;
}

int main() {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("norm_bench: no GPU\n");
        return 77;
    }
    typedef __nv_bfloat16 bf;
    const size_t ntok = 32768, ld = 3080, zoff = 2056;
    const int zh = 4, D = 256;
    const size_t rows = ntok * zh, n = rows * D;
    const double eps = 1e-6;
    bf *x = dalloc<bf>(n), *g = dalloc<bf>(n), *zw = dalloc<bf>(ntok * ld), *w = dalloc<bf>(D);
    bf *y = dalloc<bf>(n), *dx = dalloc<bf>(n), *dzw = dalloc<bf>(ntok * ld), *by = dalloc<bf>(n);
    float *rstd = dalloc<float>(rows), *dw = dalloc<float>(D);
    fill(x, n, 1, 1.f);
    fill(g, n, 2, 1.f);
    fill(zw, ntok * ld, 3, 2.f);
    fill(w, D, 4, 0.1f, 1.f);
    fill(dzw, ntok * ld, 5, 1.f);
    const bf *z = zw + zoff;
    bf *dz = dzw + zoff;
    const double gb_f = 3.0 * n * 2 / 1e9, gb_b = 6.0 * n * 2 / 1e9;
    auto fwd = [&]() { cuda_gated_rmsnorm_fwd(CUDA_BF16, y, rstd, x, z, w, rows, D, zh, ld, eps, 0); };
    auto bwd = [&]() {
        cuda_gated_rmsnorm_bwd(CUDA_BF16, dx, dz, dw, by, g, x, z, w, rstd, rows, D, zh, ld, 0);
    };
    const std::function<void()> ops[2] = {fwd, bwd};  // the forward first: rstd for the backward
    int bad = 0;
    for (int op = 0; op < 2; op++) {
        const unsigned long l0 = cuda_gated_rmsnorm_narrow_launches();
        const double t1 = time_us(ops[op]), t2 = time_us(ops[op]);
        const bool ran = cuda_gated_rmsnorm_narrow_launches() != l0;
        bad += !ran;
        printf("RESULT gated_rmsnorm_%s rows%zu D%d zh%d ld%zu %8.1f %8.1f us %6.0f GB/s%s\n", op ? "bwd" : "fwd", rows,
               D, zh, ld, t1, t2, (op ? gb_b : gb_f) / (std::min(t1, t2) * 1e-6), ran ? "" : " (no narrow-row launch!)");
    }
    return bad ? 1 : 0;
}
