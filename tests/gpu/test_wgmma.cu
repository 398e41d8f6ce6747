// test_wgmma.cu — the wgmma primitives of src/cuda/wgmma.cuh (matrix descriptors, 128-byte
// swizzle, accumulator and A-register fragment layouts, fence / commit / wait) against a float64
// CPU product, before any kernel builds on them. One warpgroup computes
//   D (64 x N) = [C] + A (64 x K) * B^T,  B given as N x K (D[m][n] = sum_k A[m][k] B[n][k]),
// for N in {64, 128}, K in {16, 64, 128} (1, 4, 8 k-steps: K = 16 proves the base layout and
// descriptors, 64 the k-step advance inside a 128-byte line, 128 the step into the next panel),
// in the four operand forms:
//   ss_k  A and B from shared memory, B K-major ([n][k], as K in S = Q K^T)
//   ss_n  A from shared memory, B N-major ([k][n], imm-trans-b = 1)
//   rs_k  A from registers, B K-major
//   rs_n  A from registers, B N-major (the P V form: V stored [keys][dims])
// and with A taken from rows 64..127 of a 128-row tile (a second warpgroup's rows): ss_k N 128
// (the forward's and the dQ pass's Q rows), ss_k N 64 K 128 (the backward dK/dV pass's K / V
// rows at D = 128) and ss_n N 64 K 128 (its nondeterministic dQ product at D = 64, A = dS).
// Also rs_k with N = 32 (m64n32k16, K 16 and 64: the GDN backward's dO Δ^T and dΔ Y^T in its
// wgmma final kernel, whose B is a 32-row half of a 64-row panel).
// Every case runs accumulating onto a random C (scale-d = 1) and with scale-d = 0 on the first
// k-step (C must be ignored). Inputs are random bf16, never 0 (+-[0.25, 1]), so every misplaced
// element shows. Pass: |D - ref| <= 1e-5 (|C| + sum_k |A B|) per element. A failing case prints
// an 8-row x 8-column map of the wrong blocks (rows 16 w .. 16 w + 15 belong to warp w; the two
// 8-row halves are the g and g + 8 rows of the fragment) and its first wrong elements with the
// thread and register that hold them. Exit 77 (skipped) without an sm_90 device.
#include "gputest.h"
#include <vector>
#include "../../src/cuda/wgmma.cuh"

enum { MODE_SS_K, MODE_SS_N, MODE_RS_K, MODE_RS_N };
static const char *mode_name[] = {"ss_k", "ss_n", "rs_k", "rs_n"};

// A: AR x K row-major (rows AR - 64 .. AR - 1 are multiplied), B: N x K row-major, C, D: 64 x N.
template <int N, int K, int AR, int MODE>
__global__ void __launch_bounds__(128) wgmma_case_kernel(const __nv_bfloat16 *A, const __nv_bfloat16 *B,
                                                         const float *C, float *D, int zero_first, int swap_nb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool AREG = MODE == MODE_RS_K || MODE == MODE_RS_N;
    constexpr int TB = (MODE == MODE_SS_N || MODE == MODE_RS_N) ? 1 : 0;
    constexpr int R0 = AR - 64;
    extern __shared__ unsigned char raw[];
    // panels must start on 1024-byte boundaries (wgmma.cuh); the launch adds 1024 bytes of slack
    const uint32_t raw_s = (uint32_t)__cvta_generic_to_shared(raw);
    unsigned char *base = raw + (((raw_s + 1023u) & ~1023u) - raw_s);
    // a tile's columns come in whole 64-wide panels (wgmma.cuh): K = 16 still takes one panel
    constexpr int KP = K < 64 ? 64 : K;
    __nv_bfloat16 *As = reinterpret_cast<__nv_bfloat16 *>(base);  // AR x KP, sw128<AR>
    __nv_bfloat16 *Bs = As + AR * KP;  // K-major: N x KP, sw128<N>; N-major: K x N, sw128<K>
    const int tid = threadIdx.x, w = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;

    for (int i = tid; i < AR * K; i += 128) As[wgm::sw128<AR>(i / K, i % K)] = A[i];
    for (int i = tid; i < N * K; i += 128) {
        const int n = i / K, k = i % K;
        Bs[TB ? wgm::sw128<K>(k, n) : wgm::sw128<N>(n, k)] = B[i];
    }
    wgm::fence_proxy_async();
    __syncthreads();

    float d[N / 2];
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) d[4 * j + e] = C[(16 * w + g + 8 * (e >> 1)) * N + 8 * j + 2 * t + (e & 1)];
    // A fragments of every k-step (rs forms), straight from global memory in the documented layout
    uint32_t a[K / 16][4];
#pragma unroll
    for (int s = 0; s < K / 16; s++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int row = R0 + 16 * w + g + 8 * (q & 1), col = 16 * s + 2 * t + 8 * (q >> 1);
            const uint32_t lo = __bfloat16_as_ushort(A[row * K + col]), hi = __bfloat16_as_ushort(A[row * K + col + 1]);
            a[s][q] = lo | (hi << 16);
        }

    const uint32_t as = (uint32_t)__cvta_generic_to_shared(As), bs = (uint32_t)__cvta_generic_to_shared(Bs);
    wgm::fence_regs(d);
    wgm::fence();
#pragma unroll
    for (int s = 0; s < K / 16; s++) {
        // swap_nb (diagnosis only): the N-major descriptor with LBO and SBO exchanged
        const uint64_t db = !TB     ? wgm::desc_k<N>(bs, 0, s)
                            : swap_nb ? wgm::desc(bs + 2u * (uint32_t)wgm::sw128<K>(16 * s, 0), 1024u, K * 128u)
                                      : wgm::desc_n<K>(bs, s);
        const int acc = !(zero_first && s == 0);
        if constexpr (AREG) wgm::mma_rs<N, TB>(d, a[s], db, acc);
        else wgm::mma_ss<N, TB>(d, wgm::desc_k<AR>(as, R0, s), db, acc);
    }
    wgm::commit();
    wgm::wait<0>();
    wgm::fence_regs(d);
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) D[(16 * w + g + 8 * (e >> 1)) * N + 8 * j + 2 * t + (e & 1)] = d[4 * j + e];
#else
    __trap();  // host side launches only where the sm_90a image exists (checked in main)
#endif
}

static double nonzero_bf16(rng_t *r) {
    const double x = 0.25 + 0.75 * rng_uniform(r);
    return bf2d(f2bf((float)(rng_uniform(r) < 0.5 ? -x : x)));
}

// One case, both scale-d forms; prints one row each, returns the number of failed rows.
template <int N, int K, int AR, int MODE>
static int run_case(rng_t *r) {
    std::vector<double> A((size_t)AR * K), B((size_t)N * K), C(64 * N);
    for (auto &x : A) x = nonzero_bf16(r);
    for (auto &x : B) x = nonzero_bf16(r);
    for (auto &x : C) x = nonzero_bf16(r);
    std::vector<uint16_t> Ah(A.size()), Bh(B.size());
    for (size_t i = 0; i < A.size(); i++) Ah[i] = f2bf((float)A[i]);
    for (size_t i = 0; i < B.size(); i++) Bh[i] = f2bf((float)B[i]);
    std::vector<float> Cf(C.begin(), C.end()), Df(64 * N);
    __nv_bfloat16 *dA, *dB;
    float *dC, *dD;
    CUDA_CHECK(cudaMalloc(&dA, Ah.size() * 2));
    CUDA_CHECK(cudaMalloc(&dB, Bh.size() * 2));
    CUDA_CHECK(cudaMalloc(&dC, Cf.size() * 4));
    CUDA_CHECK(cudaMalloc(&dD, Df.size() * 4));
    CUDA_CHECK(cudaMemcpy(dA, Ah.data(), Ah.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, Bh.data(), Bh.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dC, Cf.data(), Cf.size() * 4, cudaMemcpyHostToDevice));
    const int KP = K < 64 ? 64 : K;  // whole 64-column panels, as the kernel carves them
    const int smem = (AR * KP + N * KP) * 2 + 1024;
    CUDA_CHECK(cudaFuncSetAttribute(wgmma_case_kernel<N, K, AR, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // D[m][n] in float64 and the sum of the magnitudes of its terms
    auto ref_at = [&](int zero_first, int m, int n, double *mag) {
        double ref = zero_first ? 0 : C[m * N + n];
        *mag = fabs(ref);
        for (int k = 0; k < K; k++) {
            const double p = A[(size_t)(AR - 64 + m) * K + k] * B[(size_t)n * K + k];
            ref += p;
            *mag += fabs(p);
        }
        return ref;
    };
    // one launch; returns the wrong elements, fills the block map ('.' right, 'X' some element
    // wrong; 8 row blocks of 8 rows x N/8 column blocks), the first wrong ones and the worst error
    auto launch = [&](int zero_first, int swap_nb, std::vector<char> &map, std::vector<int> &first, double &worst) {
        CUDA_CHECK(cudaMemset(dD, 0xff, Df.size() * 4));  // NaN: an element never written fails
        wgmma_case_kernel<N, K, AR, MODE><<<1, 128, smem>>>(dA, dB, dC, dD, zero_first, swap_nb);
        CUDA_CHECK_LAUNCH();
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(Df.data(), dD, Df.size() * 4, cudaMemcpyDeviceToHost));
        map.assign(8 * (N / 8), '.');
        first.clear();
        worst = 0;
        int bad = 0;
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < N; n++) {
                double mag;
                const double err = fabs(Df[m * N + n] - ref_at(zero_first, m, n, &mag)), rel = err / mag;
                if (!(err <= 1e-5 * mag)) {
                    bad++;
                    map[(m / 8) * (N / 8) + n / 8] = 'X';
                    if (first.size() < 4) first.push_back(m * N + n);
                }
                worst = std::isnan(rel) ? INFINITY : fmax(worst, rel);
            }
        return bad;
    };
    int failed = 0;
    for (int zero_first = 0; zero_first < 2; zero_first++) {
        std::vector<char> map;
        std::vector<int> first;
        double worst;
        const int bad = launch(zero_first, 0, map, first, worst);
        printf("%-5s N %3d K %3d A rows %3d-%3d %-8s | %5d / %5d wrong  max rel %9.2e | %s\n", mode_name[MODE], N, K,
               AR - 64, AR - 1, zero_first ? "D=A*B" : "D=C+A*B", bad, 64 * N, worst, bad ? "FAIL" : "pass");
        gc_checks++;
        if (!bad) continue;
        gc_failures++;
        failed++;
        printf("      wrong 8x8 blocks (row block = warp w half h: rows 16w+8h..+7; columns 8j..8j+7):\n");
        for (int rb = 0; rb < 8; rb++) printf("      w%d h%d  %.*s\n", rb / 2, rb % 2, N / 8, &map[rb * (N / 8)]);
        for (int idx : first) {
            const int m = idx / N, n = idx % N;
            double mag;
            printf("      D[%2d][%3d] = %12.6f, expected %12.6f  (thread %3d = warp %d lane %2d, d[%d])\n", m, n,
                   (double)Df[idx], ref_at(zero_first, m, n, &mag), 32 * (m / 16) + 4 * (m % 8) + (n % 8) / 2, m / 16,
                   4 * (m % 8) + (n % 8) / 2, 4 * (n / 8) + 2 * ((m % 16) / 8) + (n & 1));
        }
        if (MODE == MODE_SS_N || MODE == MODE_RS_N) {
            const int bad2 = launch(zero_first, 1, map, first, worst);
            printf("      the same with the N-major descriptor's LBO and SBO exchanged: %d wrong%s\n", bad2,
                   bad2 ? "" : "  <- use this encoding in wgm::desc_n");
        }
    }
    for (void *x : {(void *)dA, (void *)dB, (void *)dC, (void *)dD}) CUDA_CHECK(cudaFree(x));
    return failed;
}

template <int MODE>
static void run_mode(rng_t *r, int fails[2][3]) {
    fails[0][0] = run_case<64, 16, 64, MODE>(r);
    fails[0][1] = run_case<64, 64, 64, MODE>(r);
    fails[0][2] = run_case<64, 128, 64, MODE>(r);
    fails[1][0] = run_case<128, 16, 64, MODE>(r);
    fails[1][1] = run_case<128, 64, 64, MODE>(r);
    fails[1][2] = run_case<128, 128, 64, MODE>(r);
}

int main() {
    gpu_require("test_wgmma");
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9) {
        printf("test_wgmma: SKIPPED: wgmma needs sm_90 (device is sm_%d%d)\n", prop.major, prop.minor);
        return GC_SKIP_RC;
    }
    // The sm_90a image must be in the binary: a compute_80 PTX image would be JIT-compiled to the
    // __trap() branch.
    cudaFuncAttributes fa;
    CUDA_CHECK(cudaFuncGetAttributes(&fa, wgmma_case_kernel<64, 16, 64, MODE_SS_K>));
    printf("test_wgmma: kernel image: binary sm_%d, PTX %d\n", fa.binaryVersion, fa.ptxVersion);
    if (fa.ptxVersion > 0 && fa.ptxVersion < 90) {
        printf("test_wgmma: FAIL: no sm_90a image\nHINT: configure with -DCMAKE_CUDA_ARCHITECTURES=90a (or the default "
               "\"90a 80\")\n");
        return 1;
    }
    rng_t r;
    rng_init(&r, 90, 0);
    printf("\n%-5s %5s %5s %14s %-8s | %21s %18s | %s\n", "form", "N", "K", "A rows", "op", "elements", "", "result");
    int fails[4][2][3];
    run_mode<MODE_SS_K>(&r, fails[MODE_SS_K]);
    run_mode<MODE_SS_N>(&r, fails[MODE_SS_N]);
    run_mode<MODE_RS_K>(&r, fails[MODE_RS_K]);
    run_mode<MODE_RS_N>(&r, fails[MODE_RS_N]);
    // a second warpgroup's A rows (rows 64..127 of a 128-row tile), in the shapes the attention
    // kernels use them
    const int upper = run_case<128, 64, 128, MODE_SS_K>(&r) + run_case<128, 128, 128, MODE_SS_K>(&r) +
                      run_case<64, 128, 128, MODE_SS_K>(&r) + run_case<64, 128, 128, MODE_SS_N>(&r);
    // m64n32 (rs_k only: mma_ss takes N 64 / 128)
    const int n32 = run_case<32, 16, 64, MODE_RS_K>(&r) + run_case<32, 64, 64, MODE_RS_K>(&r);

    // Where a failure points, from which K first fails per form (same N).
    printf("\nsummary per form and N (K = 16 / 64 / 128):\n");
    for (int mode = 0; mode < 4; mode++)
        for (int ni = 0; ni < 2; ni++) {
            const int *f = fails[mode][ni];
            const char *what = !f[0] && !f[1] && !f[2] ? "ok"
                               : f[0] ? "fails at one k-step: base layout, swizzle, LBO/SBO or fragment layout"
                               : f[1] ? "K = 16 right, K = 64 wrong: the k-step advance inside a 128-byte line"
                                      : "K <= 64 right, K = 128 wrong: the step to the next 64-column panel";
            printf("  %-5s N %3d: %s %s %s  %s\n", mode_name[mode], ni ? 128 : 64, f[0] ? "FAIL" : "pass",
                   f[1] ? "FAIL" : "pass", f[2] ? "FAIL" : "pass", what);
        }
    printf("  ss_k, ss_n A rows 64-127 of a 128-row tile: %s\n",
           upper ? "FAIL (the row offset of the A descriptor; rows 0-63 pass above?)" : "ok");
    printf("  rs_k N 32 (m64n32k16), K 16 / 64: %s\n",
           n32 ? "FAIL (wgmma.cuh's N = 32 form: accumulator list or operand numbering)" : "ok");
    return gc_finish("test_wgmma");
}
