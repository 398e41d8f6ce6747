// hopper_gemm.cu — on the GPU machine: can our own Hopper GEMM (TMA + mbarrier ring + wgmma,
// written by hand) reach cuBLASLt's speed on the model's forward matmuls? First step towards
// GEMMs with epilogues cuBLASLt lacks (SwiGLU from the gate/up GEMM, RMSNorm fused into a
// consumer). Y (M x N, row-major) = X (M x K, row-major) W^T, W (N x K, row-major): both operands
// K-major, bf16 in, fp32 accumulation, bf16 out.
//   nvcc -O3 -std=c++17 -arch=sm_90a bench/hopper_gemm.cu -lcublasLt -o hopper_gemm && ./hopper_gemm
//   (-DHGEMM_WATCHDOG: mbarrier waits trap after ~2^30 failed tries instead of hanging)
// For each shape (fla-220m's forwards, bench/gemm_algos.cu) and each of our two tile widths
// (128 x 256 and 128 x 128): random bf16 inputs (bench/gemm_fill.cuh), our kernel and cuBLASLt
// (its first heuristic choice, the descriptors of gemm_algos.cu's forward, as
// src/model/linear_cuda.cu), rel-L2 of ours against cuBLASLt's output over the whole matrix
// (must be < 1e-3; different accumulation orders only flip a few bf16 roundings), plus a fp32
// dot-product check of both at 4096 sampled elements, and the median of 15 timed calls after 3
// (CUDA events). One RESULT line per shape and tile.
//
// Kernel (hgemm_kernel<BN, STAGES>): persistent, one CTA per SM, 384 threads = 3 warpgroups.
//   warpgroup 0 = producer: setmaxnreg.dec to 40; one thread issues, per 64-wide k-block, two TMA
//     loads (X box 64 x 128, W box 64 x BN) into stage s of a ring of STAGES, after waiting for
//     empty[s]; full[s] (count 1: the producer's arrive.expect_tx) completes with the bytes.
//   warpgroups 1, 2 = consumers: setmaxnreg.inc to 232; consumer c computes rows 64 c .. 64 c + 63
//     of the 128 x BN tile with wgmma.mma_async m64nBNk16 (A and B from shared-memory descriptors),
//     4 per k-block, one commit group per k-block; after issuing k-block kb it waits until only
//     that group is pending (wait_group 1) and releases k-block kb - 1's stage (lane 0 of each
//     warp arrives: empty[s] count 8). Epilogue: fp32 -> bf16 pairs stored directly to global,
//     predicated on row < M and col < N (N even). While the consumers store, the producer already
//     fills the ring for the CTA's next tile.
//   Tiles are visited in groups of GROUP_M m-tiles (all n-tiles of a group, m fastest) so that the
//   132 concurrent tiles share X rows and W rows in L2 (matters for the lm head: W is 65 MB).
// PTX ISA rules relied on (checked against the PTX ISA 8.x/9.x text):
//  - 9.7.9.27 cp.async.bulk.tensor: a CTA not launched as a cluster is a cluster of one, so its
//    shared::cta addresses are valid shared::cluster addresses; the destination of a
//    SWIZZLE_128B load must be 1024-byte aligned (each stage's A and B panels are: stage sizes are
//    multiples of 1024 and the base is aligned at run time). Out-of-range box elements (rows >= M
//    or N, k >= K) are written as zeros and still count towards complete_tx: the expected byte
//    count is always the full boxes.
//  - cuTensorMapEncodeTiled (CUDA driver API): boxDim[i] <= 256; with CU_TENSOR_MAP_SWIZZLE_128B
//    boxDim[0] * elementSize <= 128 (we use exactly 128: 64 bf16); globalStrides multiple of 16;
//    global address 16-byte aligned (K % 8 == 0 checked on the host).
//  - The 128B swizzle TMA writes (16-byte chunk c of row r lands at chunk c ^ (r & 7) of line r)
//    is the layout of wgmma's SWIZZLE_128B K-major operand (9.7.15.5.1.2), the one
//    src/fwd/wgmma.cuh's sw128/desc_k describe and tests/gpu/test_wgmma.cu proves: SBO = 1024
//    (8 lines of 128 bytes), LBO unused, base offset 0 since every panel is 1024-aligned; k-step s
//    starts 32 s bytes into the line (the hardware applies the XOR by address bits).
//  - 9.7.13.15 mbarrier: try_wait.parity with the parity of the phase *before* the current one
//    succeeds at once; so the producer's first pass over the ring waits empty[s] with parity 1.
//  - 9.7.15.4 wgmma: wgmma.fence before the first mma_async of a batch (accumulators were
//    written by other instructions: the epilogue's reads / the previous tile), commit_group /
//    wait_group; the accumulators are not touched between the mma_async and the wait (no C75xx).
//  - 9.7.19.8 setmaxnreg: executed by all threads of a warpgroup; 128 x 40 + 256 x 232 = 64512
//    <= 65536 registers per SM (one CTA per SM), values multiples of 8 in [24, 256].
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cublasLt.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include "gemm_fill.cuh"
#include "../src/fwd/wgmma.cuh"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define LK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "%s:%d cublas %d\n", __FILE__, __LINE__, (int)s_); exit(1); } } while (0)
#define DK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s:%d driver error %d\n", __FILE__, __LINE__, (int)r_); exit(1); } } while (0)

namespace hg {

constexpr int BM = 128, BK = 64, NTHREADS = 384, GROUP_M = 16;

template <int BN, int STAGES>
struct Cfg {
    static_assert(BN == 128 || BN == 256, "BN 128 or 256");
    static constexpr int A_BYTES = BM * BK * 2;                   // 16 KiB
    static constexpr int B_BYTES = BN * BK * 2;                   // 16 or 32 KiB
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;         // multiple of 1024
    static constexpr int SMEM = STAGES * STAGE_BYTES + 1024 + 2 * 8 * STAGES;  // + alignment slack + barriers
    static_assert(SMEM <= 227 * 1024, "exceeds sm_90's 227 KiB of shared memory per block");
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// mbarrier wait until the phase of `parity` has completed (acquire, CTA scope). WARP: called by
// whole warps (the consumers): __syncwarp() after the spin, since wgmma's .aligned instructions
// follow; the producer's lone thread calls it with WARP = false (its warp's other lanes exited).
// -DHGEMM_WATCHDOG: spin on the non-suspending test_wait instead of try_wait (whose suspend time
// is implementation-defined) and trap after 2^30 failed tries (seconds to tens of seconds).
template <bool WARP>
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
#ifdef HGEMM_WATCHDOG
    uint32_t tries = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
        if (!done && ++tries >= (1u << 30)) __trap();  // no printf: a call here would serialise wgmma (C7510)
    } while (!done);
#else
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
#endif
    if (WARP) __syncwarp();
}
__device__ __forceinline__ void bar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// 2-D TMA load of the box at (c0 = inner/k, c1 = row) into shared memory, completing on `bar`
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void prefetch_map(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}

// wgmma m64nNk16, N = 128 or 256, bf16 x bf16 -> fp32, A and B K-major from descriptors
// (imm-trans-a = imm-trans-b = 0); scale-d = acc (0: D = A B, the first k-step of a tile).
#define HG_D8(i)                                                                                               \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define HG_D64(i) HG_D8(i), HG_D8(i + 8), HG_D8(i + 16), HG_D8(i + 24), HG_D8(i + 32), HG_D8(i + 40), HG_D8(i + 48), HG_D8(i + 56)
#define HG_R64 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define HG_R128 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
template <int N>
__device__ __forceinline__ void mma(float (&d)[N / 2], uint64_t da, uint64_t db, int acc) {
    if constexpr (N == 128)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" HG_R64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : HG_D64(0)
                     : "l"(da), "l"(db), "r"(acc));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" HG_R128 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                     : HG_D64(0), HG_D64(64)
                     : "l"(da), "l"(db), "r"(acc));
}
#undef HG_D8
#undef HG_D64
#undef HG_R64
#undef HG_R128
#endif

// tile t -> (m-tile, n-tile): groups of GROUP_M m-tiles, m fastest inside a group
__device__ __forceinline__ void tile_coords(int t, int ntm, int ntn, int &tm, int &tn) {
    const int per_group = GROUP_M * ntn;
    const int grp = t / per_group, first = grp * GROUP_M;
    const int gsize = min(ntm - first, GROUP_M);
    const int r = t - grp * per_group;
    tm = first + r % gsize;
    tn = r / gsize;
}

template <int BN, int STAGES>
__global__ void __launch_bounds__(NTHREADS, 1)
    hgemm_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW,
                 __nv_bfloat16 *__restrict__ Y, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = Cfg<BN, STAGES>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // stage s: A (128 rows x 128 B) at base + s * STAGE_BYTES, B (BN rows x 128 B) right after;
    // both 1024-aligned (see the header). Barriers after the ring: full[s], empty[s].
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t full = base + STAGES * C::STAGE_BYTES, empty = full + 8 * STAGES;
    const int tid = threadIdx.x, wg = tid >> 7;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; s++) {
            wgm::mbar_init(full + 8 * s, 1);
            wgm::mbar_init(empty + 8 * s, 8);  // lane 0 of each of the 8 consumer warps
        }
        wgm::mbar_init_fence();
    }
    if (tid == 32) {
        prefetch_map(&tmX);
        prefetch_map(&tmW);
    }
    __syncthreads();  // the only CTA-wide barrier
    const int ntm = (M + BM - 1) / BM, ntn = (N + BN - 1) / BN, ntiles = ntm * ntn, nk = (K + BK - 1) / BK;

    if (wg == 0) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int stage = 0;
            uint32_t phase = 0;
            for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
                int tm, tn;
                tile_coords(t, ntm, ntn, tm, tn);
                for (int kb = 0; kb < nk; kb++) {
                    bar_wait<false>(empty + 8 * stage, phase ^ 1);
                    const uint32_t fb = full + 8 * stage, sa = base + stage * C::STAGE_BYTES;
                    bar_expect_tx(fb, C::STAGE_BYTES);
                    tma_load_2d(sa, &tmX, kb * BK, tm * BM, fb);
                    tma_load_2d(sa + C::A_BYTES, &tmW, kb * BK, tn * BN, fb);
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                }
            }
        }
    } else {  // consumers
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1, w = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
        float d[BN / 2];  // each tile's first wgmma overwrites it (scale-d = 0); zeroed once for tidiness
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
        int stage = 0;
        uint32_t phase = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
            int tm, tn;
            tile_coords(t, ntm, ntn, tm, tn);
            int prev = 0;
            for (int kb = 0; kb < nk; kb++) {
                bar_wait<true>(full + 8 * stage, phase);
                const uint32_t sa = base + stage * C::STAGE_BYTES, sb = sa + C::A_BYTES;
                wgm::fence();
#pragma unroll
                for (int s = 0; s < BK / 16; s++)
                    mma<BN>(d, wgm::desc_k<BM>(sa, 64 * c, s), wgm::desc_k<BN>(sb, 0, s), (kb | s) != 0);
                wgm::commit();
                if (kb > 0) {  // k-block kb - 1's wgmmas are done: its stage may be refilled
                    wgm::wait<1>();
                    if (lane == 0) wgm::mbar_arrive(empty + 8 * prev);
                }
                prev = stage;
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
            wgm::wait<0>();
            wgm::fence_regs(d);
            if (lane == 0) wgm::mbar_arrive(empty + 8 * prev);
            // epilogue: d[4 j + e] = D[16 w + g + 8 (e >> 1)][8 j + 2 t4 + (e & 1)] of this 64-row half
            const int row0 = tm * BM + 64 * c + 16 * w + g;
#pragma unroll
            for (int j = 0; j < BN / 8; j++) {
                const int col = tn * BN + 8 * j + 2 * t4;
                if (col < N) {  // N even: col + 1 < N too
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int row = row0 + 8 * h;
                        if (row < M)
                            *reinterpret_cast<__nv_bfloat162 *>(Y + (size_t)row * N + col) =
                                __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                    }
                }
            }
        }
    }
#else
    if (threadIdx.x == 0 && blockIdx.x == 0) printf("hgemm_kernel: built without sm_90a\n");
    __trap();
#endif
}

}  // namespace hg

// ---------------------------------------------------------------------------------------------
// host

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;

static void get_encode() {
    cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode_tiled, 12000, cudaEnableDefault, &q));
#else
    CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", (void **)&encode_tiled, cudaEnableDefault, &q));
#endif
    if (q != cudaDriverEntryPointSuccess || !encode_tiled) {
        fprintf(stderr, "cuTensorMapEncodeTiled not found (%d)\n", (int)q);
        exit(1);
    }
}

// row-major bf16 matrix rows x cols (cols contiguous), boxes of 64 columns x box_rows rows, 128B swizzle
static CUtensorMap make_map(const void *p, int rows, int cols, int box_rows) {
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {(cuuint32_t)hg::BK, (cuuint32_t)box_rows};
    cuuint32_t estr[2] = {1, 1};
    DK(encode_tiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(p), dims, strides, box, estr,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return m;
}

static int num_sms;

template <int BN, int STAGES>
struct Ours {
    CUtensorMap mx, mw;
    __nv_bfloat16 *y;
    int M, N, K, grid;
    Ours(const void *x, const void *w, void *y_, int M_, int N_, int K_) : y((__nv_bfloat16 *)y_), M(M_), N(N_), K(K_) {
        if (K % 8 || N % 2) {
            fprintf(stderr, "hopper_gemm: needs K %% 8 == 0 and N even\n");
            exit(1);
        }
        mx = make_map(x, M, K, hg::BM);
        mw = make_map(w, N, K, BN);
        const int tiles = ((M + hg::BM - 1) / hg::BM) * ((N + BN - 1) / BN);
        grid = std::min(tiles, num_sms);
        CK(cudaFuncSetAttribute(hg::hgemm_kernel<BN, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                hg::Cfg<BN, STAGES>::SMEM));
    }
    void operator()() {
        hg::hgemm_kernel<BN, STAGES><<<grid, hg::NTHREADS, hg::Cfg<BN, STAGES>::SMEM>>>(mx, mw, y, M, N, K);
        CK(cudaGetLastError());
    }
};

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 32u << 20;

// cuBLASLt's forward as gemm_algos.cu / linear_cuda.cu: column-major D (N x M) = W^T-op ... i.e.
// A = W (K x N col-major, op T), B = X (K x M col-major, op N), D = Y (N x M col-major, ld N)
struct Lt {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulHeuristicResult_t res;
    const void *x, *w;
    void *y;
    Lt(const void *x_, const void *w_, void *y_, int M, int N, int K) : x(x_), w(w_), y(y_) {
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        LK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, K, N, K));
        LK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, K, M, K));
        LK(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, N));
        cublasLtMatmulPreference_t pref;
        LK(cublasLtMatmulPreferenceCreate(&pref));
        size_t wsz = WS;
        LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
        int found = 0;
        LK(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &res, &found));
        if (found < 1) {
            fprintf(stderr, "cuBLASLt: no algorithm\n");
            exit(1);
        }
        LK(cublasLtMatmulPreferenceDestroy(pref));
    }
    ~Lt() {
        cublasLtMatrixLayoutDestroy(a);
        cublasLtMatrixLayoutDestroy(b);
        cublasLtMatrixLayoutDestroy(c);
        cublasLtMatmulDescDestroy(op);
    }
    void operator()() {
        const float alpha = 1.f, beta = 0.f;
        LK(cublasLtMatmul(lt, op, &alpha, w, a, x, b, &beta, y, c, y, c, &res.algo, ws, WS, 0));
    }
};

// sum (a - b)^2, sum b^2, max |a - b|, max |a - b| / |b| over |b| >= 1 (b = reference)
__global__ void compare_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, size_t n, double *acc, float *mx) {
    double s0 = 0, s1 = 0;
    float m0 = 0, m1 = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float x = __bfloat162float(a[i]), r = __bfloat162float(b[i]), e = fabsf(x - r);
        s0 += (double)e * e;
        s1 += (double)r * r;
        m0 = fmaxf(m0, e);
        if (fabsf(r) >= 1.f) m1 = fmaxf(m1, e / fabsf(r));
        if (x != x) m0 = INFINITY;  // NaN in ours
    }
    for (int o = 16; o; o >>= 1) {
        s0 += __shfl_xor_sync(0xffffffffu, s0, o);
        s1 += __shfl_xor_sync(0xffffffffu, s1, o);
        m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, o));
        m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, o));
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&acc[0], s0);
        atomicAdd(&acc[1], s1);
        atomicMax((int *)&mx[0], __float_as_int(m0));  // non-negative floats order as ints
        atomicMax((int *)&mx[1], __float_as_int(m1));
    }
}

// fp32 dot products at sampled (row, col): out[2 i] = |ours - dot|, out[2 i + 1] = |cublas - dot|,
// relative to max(|dot|, 1)
__global__ void sample_kernel(const __nv_bfloat16 *x, const __nv_bfloat16 *w, const __nv_bfloat16 *ya,
                              const __nv_bfloat16 *yb, int M, int N, int K, int ns, float *out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ns) return;
    unsigned h = (unsigned)i * 2654435761u + 12345u;
    h ^= h >> 13;
    h *= 2246822519u;
    h ^= h >> 16;
    // first samples at the corners / the ragged edges, then pseudo-random positions
    int r = (int)(h % (unsigned)M), cl = (int)((h / 7u) % (unsigned)N);
    if (i == 0) r = 0, cl = 0;
    if (i == 1) r = M - 1, cl = N - 1;
    if (i == 2) r = 0, cl = N - 1;
    if (i == 3) r = M - 1, cl = 0;
    float s = 0.f;
    for (int k = 0; k < K; k++) s += __bfloat162float(x[(size_t)r * K + k]) * __bfloat162float(w[(size_t)cl * K + k]);
    const float den = fmaxf(fabsf(s), 1.f);
    out[2 * i] = fabsf(__bfloat162float(ya[(size_t)r * N + cl]) - s) / den;
    out[2 * i + 1] = fabsf(__bfloat162float(yb[(size_t)r * N + cl]) - s) / den;
}

template <class F>
static float median_ms(F &&f) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int j = 0; j < 3; j++) f();
    std::vector<float> t;
    for (int j = 0; j < 15; j++) {
        CK(cudaEventRecord(e0, 0));
        f();
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        float x;
        CK(cudaEventElapsedTime(&x, e0, e1));
        t.push_back(x);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static bool all_ok = true;

template <int BN, int STAGES>
static void run_shape(const char *name, int M, int N, int K) {
    void *x = gemm_dev_random((size_t)M * K * 2), *w = gemm_dev_random((size_t)N * K * 2);
    void *ya = gemm_dev_random((size_t)M * N * 2), *yb = gemm_dev_random((size_t)M * N * 2);  // garbage before the calls
    Ours<BN, STAGES> ours(x, w, ya, M, N, K);
    Lt ref(x, w, yb, M, N, K);
    ours();
    CK(cudaDeviceSynchronize());
    ref();
    CK(cudaDeviceSynchronize());
    // accuracy
    double *acc;
    float *mx, *smp;
    const int ns = 4096;
    CK(cudaMalloc(&acc, 2 * sizeof(double)));
    CK(cudaMalloc(&mx, 2 * sizeof(float)));
    CK(cudaMalloc(&smp, 2 * ns * sizeof(float)));
    CK(cudaMemset(acc, 0, 2 * sizeof(double)));
    CK(cudaMemset(mx, 0, 2 * sizeof(float)));
    compare_kernel<<<1024, 256>>>((const __nv_bfloat16 *)ya, (const __nv_bfloat16 *)yb, (size_t)M * N, acc, mx);
    CK(cudaGetLastError());
    sample_kernel<<<(ns + 127) / 128, 128>>>((const __nv_bfloat16 *)x, (const __nv_bfloat16 *)w,
                                             (const __nv_bfloat16 *)ya, (const __nv_bfloat16 *)yb, M, N, K, ns, smp);
    CK(cudaGetLastError());
    double hacc[2];
    float hmx[2];
    std::vector<float> hs(2 * ns);
    CK(cudaMemcpy(hacc, acc, sizeof hacc, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hmx, mx, sizeof hmx, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hs.data(), smp, hs.size() * sizeof(float), cudaMemcpyDeviceToHost));
    float so = 0, sr = 0;
    for (int i = 0; i < ns; i++) so = std::max(so, hs[2 * i]), sr = std::max(sr, hs[2 * i + 1]);
    const double rel = std::sqrt(hacc[0] / std::max(hacc[1], 1e-30));
    const bool ok = rel < 1e-3 && std::isfinite(hmx[0]);
    all_ok = all_ok && ok;
    // speed
    const float t_ours = median_ms([&] { ours(); }), t_ref = median_ms([&] { ref(); });
    const double f = 2.0 * M * N * K;
    printf("RESULT %-14s tile 128x%d st %d  M %5d K %5d N %5d  ours %.4f ms (%3.0f TFLOP/s)  cublasLt %.4f ms (%3.0f "
           "TFLOP/s)  ratio %.3f  rel-L2 %.2e  max|d| %.3g  max rel(|ref|>=1) %.3g  sampled fp32: ours %.2e lt %.2e  %s\n",
           name, BN, STAGES, M, K, N, t_ours, f / t_ours * 1e-9, t_ref, f / t_ref * 1e-9, t_ref / t_ours, rel, hmx[0],
           hmx[1], so, sr, ok ? "OK" : "FAIL");
    fflush(stdout);
    for (void *p : {x, w, ya, yb, (void *)acc, (void *)mx, (void *)smp}) CK(cudaFree(p));
}

int main(int argc, char **argv) {
    int dev;
    CK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    CK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
    printf("device %s, %d SMs, sm_%d%d\n", prop.name, num_sms, prop.major, prop.minor);
    if (prop.major != 9) {
        fprintf(stderr, "hopper_gemm: needs sm_90\n");
        return 1;
    }
    get_encode();
    LK(cublasLtCreate(&lt));
    CK(cudaMalloc(&ws, WS));
    // HGEMM_TILE=256 or 128: only that tile width (default both)
    const int only = getenv("HGEMM_TILE") ? atoi(getenv("HGEMM_TILE")) : 0;
    struct shape { const char *name; int M, K, N; } shapes[] = {
        {"mlp gate/up", 32768, 1024, 2816}, {"gdn in-proj", 32768, 1024, 3080}, {"o-proj", 32768, 1024, 1024},
        {"mlp down", 32768, 2816, 1024},    {"lm head chunk", 8320, 1024, 32000}};
    for (const shape &s : shapes) {
        if (only != 128) run_shape<256, 4>(s.name, s.M, s.N, s.K);
        if (only != 256) run_shape<128, 6>(s.name, s.M, s.N, s.K);
    }
    LK(cublasLtDestroy(lt));
    CK(cudaFree(ws));
    printf("%s\n", all_ok ? "ALL OK" : "SOME FAILED");
    return all_ok ? 0 : 2;
}
