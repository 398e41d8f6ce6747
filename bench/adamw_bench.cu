// adamw_bench.cu — times a step's CUDA AdamW at fla-220m (219.9M elements: bf16 params, fp32
// master weights, gradients, m and v) two ways on the same arenas: "per-run" = cuda_adamw once per
// run of same-decay tensors (74 launches) and "multi" = cuda_adamw_multi on the 74 runs (one
// launch, what optim.c calls on the GPU). The layout is model.c's for
// configs/fla-220m.ini (the tensors in build_table's order, each padded to 32 elements; decay on
// the matrices and convs, none on the norms, A_log, dt_bias and the embedding).
// First the check: two identical copies of every arena (random, v > 0), two steps per-run on one
// and multi on the other, then p, master, m and v compared bitwise on the device; the same for a
// ZeRO-1-like shard (world 3, rank 1: m and v hold [lo, hi) only, lo not a multiple of 4 -> the
// one-element kernel). Then the timing: CUDA events around one step, 3 warm-ups, two rounds of 20
// runs alternating per-run / multi, median per round; GB/s counts 30 bytes per element (reads
// g, m, v, master; writes m, v, master and the bf16 p), and a cudaMemcpy of as many bytes (half
// read, half written) is timed the same way as the streaming reference.
// Build: the CMake target adamw_bench; run by hand on a GPU (not a test).
#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "cuda/ops.h"

struct run_t {
    size_t lo, hi;
    float wd;
};

// fla-220m's runs of consecutive same-decay tensors (optim.c), and the arena size.
static std::vector<run_t> fla220m_runs(size_t *n_elems) {
    const size_t d = 1024, H = 4, dk = 128, dv = 256, F = 2816, V = 32000, K = 4, L = 12;
    const size_t hk = H * dk, hv = H * dv;
    std::vector<run_t> runs;
    size_t n = 0;
    int cur = -1;  // decay of the open run
    auto add = [&](size_t numel, bool decay) {
        if ((int)decay != cur) runs.push_back({n, n, decay ? 0.1f : 0.f});
        cur = decay;
        runs.back().hi = n + numel;
        n += (numel + 31) & ~(size_t)31;
    };
    for (size_t l = 0; l < L; l++) {
        add(d, false);                                                             // norm1
        add(hk * d, true), add(hk * d, true), add(hv * d, true);                   // q, k, v
        add(H * d, true), add(H * d, true), add(hv * d, true);                     // a, b, z
        add(hk * K, true), add(hk * K, true), add(hv * K, true);                   // convs
        add(H, false), add(H, false), add(dv, false);                              // A_log, dt_bias, o_norm
        add(d * hv, true);                                                         // o
        add(d, false);                                                             // norm2
        add(F * d, true), add(F * d, true), add(d * F, true);                      // gate, up, down
    }
    add(d, false);      // norm_f
    add(V * d, false);  // embed (optim.wd_embeddings = false)
    add(V * d, true);   // lm_head
    *n_elems = n;
    return runs;
}

__device__ __forceinline__ float hash_unif(uint64_t i, uint32_t salt) {  // [0, 1)
    uint64_t x = i * 0x9E3779B97F4A7C15ull + salt * 0xD1B54A32D192ED03ull;
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 27, x *= 0x94D049BB133111EBull, x ^= x >> 33;
    return (float)(x >> 40) * (1.f / 16777216.f);
}
__global__ void fill_kernel(__nv_bfloat16 *p, float *w, float *g, float *m, float *v, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float wi = 0.1f * (hash_unif(i, seed) - 0.5f);
        w[i] = wi;
        p[i] = __float2bfloat16(wi);
        g[i] = 2e-3f * (hash_unif(i, seed + 1) - 0.5f);
        m[i] = 2e-4f * (hash_unif(i, seed + 2) - 0.5f);
        v[i] = 1e-8f + 1e-6f * hash_unif(i, seed + 3);
    }
}
__global__ void diff_kernel(const uint16_t *a, const uint16_t *b, size_t n, unsigned long long *count) {
    unsigned long long c = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        c += a[i] != b[i];
    if (c) atomicAdd(count, c);
}
static unsigned long long *g_count;
static unsigned long long ndiff(const void *a, const void *b, size_t bytes) {
    CUDA_CHECK(cudaMemset(g_count, 0, sizeof *g_count));
    diff_kernel<<<2048, 256>>>((const uint16_t *)a, (const uint16_t *)b, bytes / 2, g_count);
    CUDA_CHECK(cudaGetLastError());
    unsigned long long c = 0;
    CUDA_CHECK(cudaMemcpy(&c, g_count, sizeof c, cudaMemcpyDeviceToHost));
    return c;
}

struct arenas {
    __nv_bfloat16 *p;
    float *w, *g, *m, *v;
};
static arenas alloc_arenas(size_t n) {
    arenas a;
    CUDA_CHECK(cudaMalloc((void **)&a.p, n * 2));
    CUDA_CHECK(cudaMalloc((void **)&a.w, n * 4));
    CUDA_CHECK(cudaMalloc((void **)&a.g, n * 4));
    CUDA_CHECK(cudaMalloc((void **)&a.m, n * 4));
    CUDA_CHECK(cudaMalloc((void **)&a.v, n * 4));
    return a;
}

static const float LR = 3e-4f, B1 = 0.9f, B2 = 0.95f, EPS = 1e-8f, GSCALE = 0.8f;

// One step on the elements [lo, hi) of the runs, m and v holding [m_lo, ...) (m, v: their base).
static void step_per_run(const arenas &a, float *m, float *v, size_t m_lo, const std::vector<run_t> &runs,
                         size_t lo, size_t hi, float bc1, float bc2) {
    for (const run_t &r : runs) {
        const size_t s = std::max(lo, r.lo), e = std::min(hi, r.hi);
        if (s >= e) continue;
        cuda_adamw(CUDA_BF16, a.p + s, a.w + s, a.g + s, m + (s - m_lo), v + (s - m_lo), e - s, LR, B1, B2, EPS, r.wd,
                   bc1, bc2, GSCALE, 0);
    }
}
static void step_multi(const arenas &a, float *m, float *v, size_t m_lo, const std::vector<run_t> &runs, size_t lo,
                       size_t hi, float bc1, float bc2) {
    std::vector<cuda_adamw_seg> seg;
    for (const run_t &r : runs) {
        const size_t s = std::max(lo, r.lo), e = std::min(hi, r.hi);
        if (s < e) seg.push_back({s, e, r.wd});
    }
    cuda_adamw_multi(CUDA_BF16, a.p, a.w, a.g, m, v, m_lo, seg.data(), (int)seg.size(), LR, B1, B2, EPS, bc1, bc2,
                     GSCALE, 0);
}

static float median(std::vector<float> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
}

int main() {
    size_t n = 0;
    const std::vector<run_t> runs = fla220m_runs(&n);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("adamw_bench: %s, %d SMs; fla-220m layout: %zu elements (%.2f M), %zu runs\n", prop.name,
           prop.multiProcessorCount, n, n / 1e6, runs.size());
    CUDA_CHECK(cudaMalloc((void **)&g_count, sizeof *g_count));
    arenas A = alloc_arenas(n), B = alloc_arenas(n);

    // ---- bitwise check: whole arena, then a world-3 rank-1 shard ----
    bool all_ok = true;
    for (int shard = 0; shard < 2; shard++) {
        fill_kernel<<<4096, 256>>>(A.p, A.w, A.g, A.m, A.v, n, 7);
        fill_kernel<<<4096, 256>>>(B.p, B.w, B.g, B.m, B.v, n, 7);
        CUDA_CHECK(cudaGetLastError());
        const size_t c = (n + 2) / 3, lo = shard ? c : 0, hi = shard ? std::min(n, 2 * c) : n;
        // a shard's m and v: their base at element lo of the buffers (as the sharded arena holds
        // [lo, hi) from its start; here inside the full buffers, so misaligned when lo % 4 != 0)
        float *mA = A.m + lo, *vA = A.v + lo, *mB = B.m + lo, *vB = B.v + lo;
        for (int t = 1; t <= 2; t++) {
            const float bc1 = 1.f - powf(B1, (float)t), bc2 = 1.f - powf(B2, (float)t);
            step_per_run(A, mA, vA, lo, runs, lo, hi, bc1, bc2);
            step_multi(B, mB, vB, lo, runs, lo, hi, bc1, bc2);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        const unsigned long long dp = ndiff(A.p, B.p, n * 2), dw = ndiff(A.w, B.w, n * 4),
                                 dm = ndiff(A.m, B.m, n * 4), dv = ndiff(A.v, B.v, n * 4);
        // and the step did something: A's master against a fresh fill
        fill_kernel<<<4096, 256>>>(B.p, B.w, B.g, B.m, B.v, n, 7);
        const unsigned long long moved = ndiff(A.w, B.w, n * 4);
        const bool ok = dp == 0 && dw == 0 && dm == 0 && dv == 0 && moved > 0;
        all_ok = all_ok && ok;
        printf("CHECK %-28s lo %zu hi %zu (lo %% 4 = %zu): differing 16-bit words p %llu master %llu m %llu v %llu; "
               "changed by the step %llu: %s\n",
               shard ? "shard (world 3, rank 1)" : "whole arena", lo, hi, lo % 4, dp, dw, dm, dv, moved,
               ok ? "bitwise equal" : "DIFFER");
    }

    // ---- timing ----
    fill_kernel<<<4096, 256>>>(A.p, A.w, A.g, A.m, A.v, n, 11);
    CUDA_CHECK(cudaGetLastError());
    const double bytes = 30.0 * (double)n;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    const char *names[3] = {"per-run", "multi", "memcpy"};
    auto one = [&](int which, int t) -> float {
        const float bc1 = 1.f - powf(B1, (float)t), bc2 = 1.f - powf(B2, (float)t);
        CUDA_CHECK(cudaEventRecord(e0));
        if (which == 0) step_per_run(A, A.m, A.v, 0, runs, 0, n, bc1, bc2);
        else step_multi(A, A.m, A.v, 0, runs, 0, n, bc1, bc2);
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        return ms;
    };
    // the reference: 15 n bytes copied between two buffers of their own (B's arenas freed first)
    CUDA_CHECK(cudaFree(B.p));
    CUDA_CHECK(cudaFree(B.w));
    CUDA_CHECK(cudaFree(B.g));
    CUDA_CHECK(cudaFree(B.m));
    CUDA_CHECK(cudaFree(B.v));
    void *cs = nullptr, *cd = nullptr;
    CUDA_CHECK(cudaMalloc(&cs, (size_t)(bytes / 2)));
    CUDA_CHECK(cudaMalloc(&cd, (size_t)(bytes / 2)));
    CUDA_CHECK(cudaMemset(cs, 1, (size_t)(bytes / 2)));
    auto one_copy = [&]() -> float {
        CUDA_CHECK(cudaEventRecord(e0));
        CUDA_CHECK(cudaMemcpyAsync(cd, cs, (size_t)(bytes / 2), cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        return ms;
    };
    int t = 1;
    for (int w = 0; w < 3; w++) one(0, t++), one(1, t++), one_copy();
    float med[2][3];
    for (int round = 0; round < 2; round++) {
        std::vector<float> ms[3];
        for (int it = 0; it < 20; it++) {
            ms[0].push_back(one(0, t++));
            ms[1].push_back(one(1, t++));
            ms[2].push_back(one_copy());
        }
        for (int k = 0; k < 3; k++) med[round][k] = median(ms[k]);
    }
    for (int k = 0; k < 3; k++)
        printf("RESULT %-8s ms %.3f %.3f  GB/s %.0f %.0f%s\n", names[k], med[0][k], med[1][k], bytes / med[0][k] / 1e6,
               bytes / med[1][k] / 1e6, k == 2 ? "  (cudaMemcpy of 15 bytes per element: the streaming reference)" : "");
    const float best0 = std::min(med[0][0], med[1][0]), best1 = std::min(med[0][1], med[1][1]);
    printf("SPEEDUP multi vs per-run: %.3fx (%.3f -> %.3f ms, best round each); check: %s\n", best0 / best1, best0,
           best1, all_ok ? "bitwise equal" : "DIFFER");
    return all_ok ? 0 : 1;
}
