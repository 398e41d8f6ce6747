// attention_bench.cu — times attention_fwd and attention_fwd + attention_bwd (bf16) on the
// issue-6 shapes; bench/attention_torch.py times PyTorch on the same shapes in the same call
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
// ATTN_BENCH_FWD3_AB=1 (or 3, pp3): A/B of the variants of attention_fwd_wgmma3_kernel in one
// process: each case runs with GDN_ATTN_WGMMA_FWD3 unset (the default: pp, 2 K/V stages) under its
// name, then = that value (2 or 3 K/V stages, pp = ping-pong; the variable is read per call) as
// "NAME+fwd3", then unset again (drift check); one "FWD3_AB" line per case.
// ATTN_BENCH_BWD3_AB=pp (or 3, pp3): the same for the backward kernels attention_bwd_*_wgmma3_kernel
// (GDN_ATTN_WGMMA_BWD3; the default: 2 stages, no ping-pong), "NAME+bwd3", each run also timing
// attention_bwd alone ("bwd" lines; the forward's o and lse of both input sets are in place); one
// "BWD3_AB" line per case with the backward's ms, det and nondet.
// (Until session 11 the A/Bs set the base to the older wgmma kernels, deleted since.)
#include "../src/core/cuda_check.h"
#include "../src/fwd/attention_cuda.h"
#include <algorithm>
#include <stdlib.h>
#include <string.h>
#include <string>
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

// ms, the better of two medians each; bwd_*: only when run_case's bwd_alone is set
struct times {
    float fwd, fwdbwd_det, fwdbwd_nondet, bwd_det, bwd_nondet;
};

static times run_case(const char *name, int B, int T, int H, int D, int W, bool bwd_alone = false) {
    if (attention_fwd_wgmma_selected()) printf("%s: bf16 forward %s\n", name, attention_fwd_wgmma_version_name());
    const size_t n = (size_t)B * T * H * D;
    attn_params p = {};
    p.B = B; p.T = T; p.H = H; p.D = D; p.window = W;
    p.scale = 1.f / sqrtf((float)D);
    p.dtype = ATTN_DTYPE_BF16;
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
    const char *mode_name[5] = {"fwd", "fwd+bwd", "fwd+bwd", "bwd", "bwd"};
    const char *bwd_name[5] = {"", "det", "nondet", "det", "nondet"};
    // [fwd, fwd+bwd det, fwd+bwd nondet, bwd det, bwd nondet (bwd_alone)][first, second timing];
    // the bwd-alone modes read the o and lse that the earlier modes left in both input sets
    float res[5][2] = {};
    for (int mode = 0; mode < (bwd_alone ? 5 : 3); mode++)
        for (int twice = 0; twice < 2; twice++) {
            std::vector<float> ts;
            p.nondeterministic = mode == 2 || mode == 4;
            for (int r = 0; r < warm + reps; r++) {
                bind(r & 1);
                CUDA_CHECK(cudaEventRecord(e0, 0));
                if (mode <= 2) attention_fwd(&p);
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
    const float f = std::min(res[0][0], res[0][1]);
    for (int mode = 1; mode < 3; mode++) {
        const float fb = std::min(res[mode][0], res[mode][1]);
        printf("RESULT %s %s B%d T%d H%d D%d W%d fwd_ms %.3f fwdbwd_ms %.3f fwd_tflops %.1f fwdbwd_tflops %.1f\n", name,
               bwd_name[mode], B, T, H, D, W, f, fb, fwd_flop / f * 1e-9, 3.5 * fwd_flop / fb * 1e-9);
    }
    for (int i = 0; i < 2; i++) {
        for (void *x : {s[i].q, s[i].k, s[i].v, s[i].o, s[i].dO, s[i].dq, s[i].dk, s[i].dv, s[i].ws})
            CUDA_CHECK(cudaFree(x));
        CUDA_CHECK(cudaFree(s[i].lse));
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    auto best = [&](int mode) { return std::min(res[mode][0], res[mode][1]); };
    return {f, best(1), best(2), best(3), best(4)};
}

// ATTN_BENCH_FWD3_AB: the default forward, the variant ab, the default again on one case (header)
static void run_ab(const char *ab, const char *name, int B, int T, int H, int D, int W) {
    const std::string n3 = std::string(name) + "+fwd3", n2b = std::string(name) + "+again";
    unsetenv("GDN_ATTN_WGMMA_FWD3");
    const unsigned long n0 = attention_fwd_wgmma3_launches();
    const float f2 = run_case(name, B, T, H, D, W).fwd;
    const unsigned long n1 = attention_fwd_wgmma3_launches();
    setenv("GDN_ATTN_WGMMA_FWD3", ab, 1);
    const float f3 = run_case(n3.c_str(), B, T, H, D, W).fwd;
    const unsigned long n2 = attention_fwd_wgmma3_launches();
    unsetenv("GDN_ATTN_WGMMA_FWD3");
    const float f2b = run_case(n2b.c_str(), B, T, H, D, W).fwd;
    // run_case makes 3 x 2 x (warm + reps) forward calls; the timings are wgmma3's only if every
    // call launched it (no fallback to mma.sync)
    const unsigned long calls = 3ul * 2 * (warm + reps);
    const bool valid = n1 - n0 == calls && n2 - n1 == calls && attention_fwd_wgmma3_launches() - n2 == calls;
    printf("FWD3_AB %s B%d T%d H%d D%d W%d fwd_ms default %.3f %s %.3f default_again %.3f %s/default %.3f%s\n", name,
           B, T, H, D, W, f2, ab, f3, f2b, ab, f3 / std::min(f2, f2b),
           valid ? "" : " INVALID (wgmma3 did not run everywhere: fell back to mma.sync, see stderr)");
}

// ATTN_BENCH_BWD3_AB: the default backward, the variant ab, the default again on one case (header)
static void run_bwd_ab(const char *ab, const char *name, int B, int T, int H, int D, int W) {
    const std::string n3 = std::string(name) + "+bwd3", nb = std::string(name) + "+again";
    unsetenv("GDN_ATTN_WGMMA_BWD3");
    const unsigned long n0 = attention_bwd_wgmma3_launches();
    const times a = run_case(name, B, T, H, D, W, true);
    const unsigned long n1 = attention_bwd_wgmma3_launches();
    setenv("GDN_ATTN_WGMMA_BWD3", ab, 1);
    const times c = run_case(n3.c_str(), B, T, H, D, W, true);
    const unsigned long n2 = attention_bwd_wgmma3_launches();
    unsetenv("GDN_ATTN_WGMMA_BWD3");
    const times a2 = run_case(nb.c_str(), B, T, H, D, W, true);
    // run_case makes 2 x (warm + reps) backward calls in each of its 4 backward modes: 2 det ones
    // (2 launches a call), 2 nondet ones (1); the timings are wgmma3's only if every call launched it
    const unsigned long launches = 2ul * (warm + reps) * (2 * 2 + 2 * 1);
    const bool valid = n1 - n0 == launches && n2 - n1 == launches && attention_bwd_wgmma3_launches() - n2 == launches;
    printf("BWD3_AB %s B%d T%d H%d D%d W%d bwd_ms det: default %.3f %s %.3f default_again %.3f %s/default %.3f | "
           "nondet: default %.3f %s %.3f default_again %.3f %s/default %.3f | fwd+bwd det ms: default %.3f %s %.3f%s\n",
           name, B, T, H, D, W, a.bwd_det, ab, c.bwd_det, a2.bwd_det, ab, c.bwd_det / std::min(a.bwd_det, a2.bwd_det),
           a.bwd_nondet, ab, c.bwd_nondet, a2.bwd_nondet, ab, c.bwd_nondet / std::min(a.bwd_nondet, a2.bwd_nondet),
           std::min(a.fwdbwd_det, a2.fwdbwd_det), ab, c.fwdbwd_det,
           valid ? "" : " INVALID (wgmma3 did not run everywhere: fell back to mma.sync, see stderr)");
}

int main() {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("attention_bench on %s (%d SMs), bf16 forward: %s, backward: %s\n", prop.name, prop.multiProcessorCount,
           attention_fwd_wgmma_selected() ? "wgmma kernel (GDN_ATTN_WGMMA=0: mma.sync)" : "mma.sync kernel",
           attention_bwd_wgmma_selected() ? "wgmma kernels (GDN_ATTN_WGMMA_BWD=0: mma.sync)" : "mma.sync kernels");
    const char *ab = getenv("ATTN_BENCH_FWD3_AB");
    if (ab && strcmp(ab, "0") != 0 && attention_fwd_wgmma_selected()) {
        run_ab(ab, "full", 8, 4096, 16, 128, 4096);
        run_ab(ab, "window", 2, 16384, 16, 128, 2048);
        return 0;
    }
    const char *bab = getenv("ATTN_BENCH_BWD3_AB");
    if (bab && strcmp(bab, "0") != 0 && attention_bwd_wgmma_selected()) {
        run_bwd_ab(bab, "full", 8, 4096, 16, 128, 4096);
        run_bwd_ab(bab, "window", 2, 16384, 16, 128, 2048);
        return 0;
    }
    run_case("full", 8, 4096, 16, 128, 4096);
    run_case("window", 2, 16384, 16, 128, 2048);
    return 0;
}
