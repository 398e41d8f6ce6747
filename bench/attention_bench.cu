// attention_bench.cu — times attention_fwd and attention_fwd + attention_bwd (bf16) on two
// shapes of 32K tokens; bench/attention_torch.py times PyTorch on the same shapes in the same call
// (bench/run_attention.sh runs both). Correctness is checked first by tests/gpu/test_attention.
//   full:   B 8, T 4096,  H 16, D 128, window >= T (full causal)
//   window: B 2, T 16384, H 16, D 128, window 2048 (same token count)
// CUDA events around each call after 3 warm-ups, median (and min, max) of 25, two input sets
// alternated (each set is several times the 60 MB L2). FLOPs by the flash-attention convention:
// fwd = 4 D B H * (visible pairs), bwd = 2.5 x fwd (our deterministic backward does 3.5 x: it
// recomputes S and dP in the dq pass; the nondeterministic one, dq by atomics, does 2.5 x).
// fwd+bwd is timed in both backward modes (attn_params.nondeterministic = 0 "det", 1 "nondet").
// Prints one "RESULT name mode ... fwd_ms fwdbwd_ms fwd_tflops fwdbwd_tflops" line per case and
// mode (fwd_ms is the same forward in both lines).
//   attention_bench             the default kernels (wgmma on a Hopper device with the sm_90a image)
//   attention_bench --mma-sync  attn_params.kernels = ATTN_KERNELS_MMA_SYNC: the portable kernels
// Each timing is valid only if every call ran the kernels asked for: the wgmma launch counters
// (attention_testing.h) are checked and a case says INVALID otherwise (a fallback, stderr says why).
#include "../src/core/cuda_check.h"
#include "../src/fwd/attention_cuda.h"
#include "../src/fwd/attention_testing.h"
#include <algorithm>
#include <stdlib.h>
#include <string.h>
#include <vector>

__global__ void fill_kernel(__nv_bfloat16 *x, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        x[i] = __float2bfloat16(((float)(h & 0xffffff) / 16777216.f - 0.5f) * 3.4641f);  // var 1
    }
}

struct set {
    void *q, *k, *v, *o, *dO, *dq, *dk, *dv, *ws;
    float *lse;
};

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

constexpr int warm = 3, reps = 25;  // calls per timing: warm-ups, then the timed ones

// kernels: what attn_params.kernels asks for; wgmma: whether those are the wgmma kernels here
static void run_case(const char *name, int B, int T, int H, int D, int W, attn_kernels kernels, bool wgmma) {
    const size_t n = (size_t)B * T * H * D;
    attn_params p = {};
    p.B = B; p.T = T; p.H = H; p.D = D; p.window = W;
    p.scale = 1.f / sqrtf((float)D);
    p.dtype = ATTN_DTYPE_BF16;
    p.kernels = kernels;
    p.nondeterministic = 1;  // the larger workspace, used by both modes
    const size_t wsb = attention_workspace_bytes(&p);
    set s[2];
    for (int i = 0; i < 2; i++) {
        for (void **x : {&s[i].q, &s[i].k, &s[i].v, &s[i].o, &s[i].dO, &s[i].dq, &s[i].dk, &s[i].dv})
            CUDA_CHECK(cudaMalloc(x, n * 2));
        CUDA_CHECK(cudaMalloc(&s[i].lse, (size_t)B * H * T * 4));
        CUDA_CHECK(cudaMalloc(&s[i].ws, wsb));
        uint32_t seed = 17 + 5 * i;
        for (void *x : {s[i].q, s[i].k, s[i].v, s[i].dO}) {
            fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)x, n, seed++);
            CUDA_CHECK_LAUNCH();
        }
    }
    auto bind = [&](int i) {
        p.q = s[i].q; p.k = s[i].k; p.v = s[i].v; p.o = s[i].o; p.lse = s[i].lse;
        p.dO = s[i].dO; p.dq = s[i].dq; p.dk = s[i].dk; p.dv = s[i].dv; p.workspace = s[i].ws;
    };
    double pairs = 0;  // visible (i, j) pairs per head
    for (int i = 0; i < T; i++) pairs += std::min(i + 1, W);
    const double fwd_flop = 4.0 * D * B * H * pairs;

    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    const char *mode_name[3] = {"fwd", "fwd+bwd", "fwd+bwd"};
    const char *bwd_name[3] = {"", "det", "nondet"};
    // [fwd, fwd+bwd det, fwd+bwd nondet][first, second timing]
    float res[3][2] = {};
    const unsigned long f0 = attention_fwd_wgmma_launches(), b0 = attention_bwd_wgmma_launches();
    for (int mode = 0; mode < 3; mode++)
        for (int twice = 0; twice < 2; twice++) {
            std::vector<float> ts;
            p.nondeterministic = mode == 2;
            for (int r = 0; r < warm + reps; r++) {
                bind(r & 1);
                CUDA_CHECK(cudaEventRecord(e0, 0));
                attention_fwd(&p);
                if (mode >= 1) attention_bwd(&p);
                CUDA_CHECK(cudaEventRecord(e1, 0));
                CUDA_CHECK(cudaEventSynchronize(e1));
                float ms;
                CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= warm) ts.push_back(ms);
            }
            res[mode][twice] = median(ts);
            printf("  %-7s %-8s %-6s run %d: median %.3f ms  (min %.3f, max %.3f)\n", name, mode_name[mode],
                   bwd_name[mode], twice, res[mode][twice], *std::min_element(ts.begin(), ts.end()),
                   *std::max_element(ts.begin(), ts.end()));
        }
    // 3 x 2 x (warm + reps) forward calls; backward calls: 2 x (warm + reps) det (2 wgmma
    // launches each) and as many nondet (1 each)
    const unsigned long calls = 2ul * (warm + reps);
    const unsigned long fwd_want = wgmma ? 3 * calls : 0, bwd_want = wgmma ? 2 * calls + calls : 0;
    const bool valid = attention_fwd_wgmma_launches() - f0 == fwd_want && attention_bwd_wgmma_launches() - b0 == bwd_want;
    const float f = std::min(res[0][0], res[0][1]);
    for (int mode = 1; mode < 3; mode++) {
        const float fb = std::min(res[mode][0], res[mode][1]);
        printf("RESULT %s %s B%d T%d H%d D%d W%d fwd_ms %.3f fwdbwd_ms %.3f fwd_tflops %.1f fwdbwd_tflops %.1f%s\n",
               name, bwd_name[mode], B, T, H, D, W, f, fb, fwd_flop / f * 1e-9, 3.5 * fwd_flop / fb * 1e-9,
               valid ? "" : " INVALID (not every call ran the kernels asked for: a fallback, see stderr)");
    }
    for (int i = 0; i < 2; i++) {
        for (void *x : {s[i].q, s[i].k, s[i].v, s[i].o, s[i].dO, s[i].dq, s[i].dk, s[i].dv, s[i].ws})
            CUDA_CHECK(cudaFree(x));
        CUDA_CHECK(cudaFree(s[i].lse));
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
}

int main(int argc, char **argv) {
    const bool mma = argc == 2 && strcmp(argv[1], "--mma-sync") == 0;
    if (argc > 2 || (argc == 2 && !mma)) {
        fprintf(stderr, "usage: attention_bench [--mma-sync]\n");
        return 2;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const bool wgmma = !mma && attention_fwd_wgmma_available() && attention_bwd_wgmma_available();
    printf("attention_bench on %s (%d SMs), bf16 kernels: %s\n", prop.name, prop.multiProcessorCount,
           wgmma ? "wgmma (attention_fwd_wgmma_kernel, attention_bwd_*_wgmma_kernel)"
                 : mma ? "mma.sync (--mma-sync)" : "mma.sync (no sm_90a device or image)");
    const attn_kernels k = mma ? ATTN_KERNELS_MMA_SYNC : ATTN_KERNELS_AUTO;
    run_case("full", 8, 4096, 16, 128, 4096, k, wgmma);
    run_case("window", 2, 16384, 16, 128, 2048, k, wgmma);
    return 0;
}
