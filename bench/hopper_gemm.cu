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
// src/cuda/gemm.cu), rel-L2 of ours against cuBLASLt's output over the whole matrix
// (must be < 1e-3; different accumulation orders only flip a few bf16 roundings), plus a fp32
// dot-product check of both at 4096 sampled elements, and the median of 15 timed calls after 3
// (CUDA events). One RESULT line per shape and variant.
// Variants (v2): c256 / c128 are the first kernel below (hgemm_kernel); t*, p*, m* are
// hgemm2_kernel (further down: TMA-store epilogue, pingpong consumers, 2-CTA clusters with W
// multicast). HGEMM_VARIANTS=c256,t256,... runs only those (in that order; default: all);
// HGEMM_TILE=256 or 128 keeps only the variants of that tile width. ALL OK only if every line is OK.
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
//    src/cuda/wgmma.cuh's sw128/desc_k describe and tests/gpu/test_wgmma.cu proves: SBO = 1024
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
#include <string>
#include <vector>
#include <cublasLt.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include "gemm_fill.cuh"
#include "../src/cuda/wgmma.cuh"

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
// One probe of the phase: test_wait under HGEMM_WATCHDOG, else try_wait; acquire at cluster scope
// when CLUSTER (barriers that receive remote arrivals from the peer CTA), else acquire.cta (the
// default of the plain form).
template <bool CLUSTER>
__device__ __forceinline__ uint32_t bar_probe(uint32_t bar, uint32_t parity) {
    uint32_t done;
#ifdef HGEMM_WATCHDOG
    if constexpr (CLUSTER)
        asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    else
        asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#else
    if constexpr (CLUSTER)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    else
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#endif
    return done;
}
// mbarrier wait until the phase of `parity` has completed. WARP: called by whole warps (the
// consumers): __syncwarp() after the spin, since wgmma's .aligned instructions follow; the
// producer's lone thread calls it with WARP = false (its warp's other lanes exited).
// -DHGEMM_WATCHDOG: spin on the non-suspending test_wait instead of try_wait (whose suspend time
// is implementation-defined) and trap after 2^30 failed tries (seconds to tens of seconds).
template <bool WARP, bool CLUSTER = false>
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
#ifdef HGEMM_WATCHDOG
    uint32_t tries = 0;
    do {
        done = bar_probe<CLUSTER>(bar, parity);
        if (!done && ++tries >= (1u << 30)) __trap();  // no printf: a call here would serialise wgmma (C7510)
    } while (!done);
#else
    do {
        done = bar_probe<CLUSTER>(bar, parity);
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


// ---------------------------------------------------------------------------------------------
// v2 kernels (hgemm2_kernel<BN, STAGES, TMA_ST, PP, CL, SPLIT>): the same producer / ring / wgmma
// mainloop, plus three independent options (see bench/hopper_gemm.md, "v2"):
//  TMA_ST: epilogue through shared memory + TMA store. Each consumer warpgroup owns a dedicated
//    buffer of its rows x BN bf16 (32 KiB at BN 256 / 128-row pingpong, 16 KiB at coop BN 128),
//    laid out as 64 x 64 chunks (8 KiB, 1024-aligned) in the 128-byte swizzle of the output
//    tensor map (box 64 cols x 64 rows, SWIZZLE_128B). Per tile: the elected thread (thread 0 of
//    the warpgroup, the only one that commits bulk groups) waits cp.async.bulk.wait_group.read 0
//    (the previous tile's store has finished reading the buffer), named barrier; all 128 threads
//    st.shared their bf16 pairs (conflict-free: 16-byte unit j ^ (row & 7) = j ^ g); every
//    writer fence.proxy.async.shared::cta; named barrier; the elected thread issues one
//    cp.async.bulk.tensor.2d.global.shared::cta store per in-range chunk and commits the group.
//    The TMA unit clips rows >= M and cols >= N (chunks entirely outside are not issued).
//    SPLIT = 2: a buffer of half the columns, filled and stored twice per tile (the second fill
//    waits wait_group.read 0 on the first store), so that 128x256 keeps 4 stages.
//    Before exit: cp.async.bulk.wait_group 0.
//  PP: pingpong. Consumer warpgroup c computes whole tiles (TM x BN, TM = 64 at BN 256 with one
//    m64n256 per k-step, TM = 128 at BN 128 with two m64n128 per k-step): local tile i belongs to
//    warpgroup i & 1, so one warpgroup's epilogue overlaps the other's mainloop. The ring is
//    shared in tile order; ring position of local tile i = i * nk. Ordering barrier ord[c]
//    (count 4: lane 0 of each warp of the other warpgroup): before its mainloop of local tile
//    i >= 1, warpgroup c waits ord[c] phase (i - 1) / 2, which warpgroup 1 - c completes right
//    after the k-loop of tile i - 1 (after its last full-barrier wait). This (a) alternates the
//    mainloops (CUTLASS's math ordering) and (b) guarantees that no waiter runs more than one
//    phase ahead on full[s] (a try_wait.parity two phases early would succeed wrongly).
//  CL = 2: thread-block cluster of 2 along M. The two CTAs of a cluster do the m-tiles 2 u and
//    2 u + 1 of the same n-tile (a "unit"), in lockstep (same loop counts). Each CTA loads its X
//    tile itself and half of the W tile (BN / 2 rows) with .multicast::cluster (ctaMask 0b11)
//    into the same offset of both CTAs; full[s] expects the whole stage (its A + both B halves)
//    from its own producer's arrive.expect_tx. empty[s] counts the consumer warps of BOTH CTAs
//    (a stage of CTA r is written by both producers): each releasing warp arrives locally and,
//    through mapa + mbarrier.arrive.release.cluster.shared::cluster, on the peer's empty[s]; the
//    producer waits empty with acquire.cluster. barrier.cluster arrive.release / wait.acquire
//    after the barrier inits (the peer's barriers exist before any multicast / remote arrive)
//    and at the very end (no CTA exits while its peer may still arrive on its barriers).
//    Fully out-of-range m-tiles (odd tile counts: lm head M = 8320) load a clamped, valid X tile
//    and store nothing.
template <int BN, int STAGES, bool TMA_ST, bool PP, int CL, int SPLIT = 1>
struct Cfg2 {
    static_assert(BN == 128 || BN == 256, "BN 128 or 256");
    static_assert(CL == 1 || CL == 2, "cluster 1 or 2");
    static constexpr int WG_ROWS = PP ? (BN == 256 ? 64 : 128) : 64;  // rows of one consumer warpgroup
    static constexpr int TM = PP ? WG_ROWS : 128;                       // rows of a tile (X box)
    static constexpr int MS = WG_ROWS / 64;                             // m64 wgmmas per k-step
    static constexpr int A_BYTES = TM * BK * 2;
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static_assert(SPLIT == 1 || (TMA_ST && SPLIT == 2), "SPLIT 2: the epilogue in two column halves");
    static constexpr int QP = BN / 64 / SPLIT;                          // 64-col chunks per pass per m64
    static constexpr int EPI_WG = TMA_ST ? WG_ROWS * BN * 2 / SPLIT : 0;  // epilogue buffer of one warpgroup
    static constexpr int ARRIVERS = PP ? 4 : 8;                         // releasing warps per CTA per stage
    static constexpr int NBAR = 2 * STAGES + 2;                         // full, empty, ord[2]
    static constexpr int SMEM = STAGES * STAGE_BYTES + 2 * EPI_WG + 1024 + 8 * NBAR;
    static constexpr int GROUP = 2048 / (TM * CL) > 0 ? 2048 / (TM * CL) : 1;  // units per raster group
    static_assert(A_BYTES % 1024 == 0 && (B_BYTES / 2) % 1024 == 0, "1024-aligned panels");
    static_assert(SMEM <= 227 * 1024, "exceeds sm_90's 227 KiB of shared memory per block");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// 2-D TMA load multicast to the CTAs of `mask` (same CTA-relative offsets of dst and bar in each)
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar,
                                               uint16_t mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(
            dst),
        "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
        : "memory");
}
// 2-D TMA store of the box at (c0, c1) from shared memory; bulk async-group completion
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, int c0, int c1, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"((uint64_t)map),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// named barrier 1 + c of consumer warpgroup c's 128 threads (barrier 0 is __syncthreads'); immediate
// ids so that ptxas reserves only barriers 0-2
__device__ __forceinline__ void named_sync_wg(int c) {
    if (c == 0)
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else
        asm volatile("bar.sync 2, 128;\n" ::: "memory");
}
__device__ __forceinline__ void st_shared_u32(uint32_t a, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync_all() {  // every thread of both CTAs (non-.aligned forms)
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// arrive on the mbarrier at the same CTA-relative address in CTA `rank` of the cluster
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t rank) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(
                     bar),
                 "r"(rank)
                 : "memory");
}
__device__ __forceinline__ uint32_t pack_bf162(float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
}
#endif

__device__ __forceinline__ void tile_coords_g(int t, int ntm, int ntn, int group, int &tm, int &tn) {
    const int per_group = group * ntn;
    const int grp = t / per_group, first = grp * group;
    const int gsize = min(ntm - first, group);
    const int r = t - grp * per_group;
    tm = first + r % gsize;
    tn = r / gsize;
}

template <int BN, int STAGES, bool TMA_ST, bool PP, int CL, int SPLIT>
__global__ void __launch_bounds__(NTHREADS, 1)
    hgemm2_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW,
                  const __grid_constant__ CUtensorMap tmY, __nv_bfloat16 *__restrict__ Y, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = Cfg2<BN, STAGES, TMA_ST, PP, CL, SPLIT>;
    constexpr int TM = C::TM, MS = C::MS, QP = C::QP;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // ring (STAGES x [A TM x 128 B | B BN x 128 B]), then the epilogue buffers (2 x EPI_WG), then
    // the barriers full[STAGES], empty[STAGES], ord[2]. The dynamic shared memory starts at the
    // same offset in every CTA of the kernel, so `base` and all offsets agree between the two
    // CTAs of a cluster (multicast and remote arrivals use CTA-relative offsets).
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t epi = base + STAGES * C::STAGE_BYTES;
    const uint32_t full = epi + 2 * C::EPI_WG, empty = full + 8 * STAGES, ord = empty + 8 * STAGES;
    const int tid = threadIdx.x, wg = tid >> 7;
    const uint32_t rank = CL > 1 ? cluster_rank() : 0u;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; s++) {
            wgm::mbar_init(full + 8 * s, 1);
            wgm::mbar_init(empty + 8 * s, C::ARRIVERS * CL);
        }
        wgm::mbar_init(ord, 4);
        wgm::mbar_init(ord + 8, 4);
        wgm::mbar_init_fence();
    }
    if (tid == 32) {
        prefetch_map(&tmX);
        prefetch_map(&tmW);
        if (TMA_ST) prefetch_map(&tmY);
    }
    if constexpr (CL > 1)
        cluster_sync_all();  // also a CTA barrier: the inits are visible to both CTAs before any use
    else
        __syncthreads();
    const int ntm = (M + TM - 1) / TM, ntn = (N + BN - 1) / BN, nk = (K + BK - 1) / BK;
    const int ntm_u = (ntm + CL - 1) / CL, nunits = ntm_u * ntn;
    const int unit0 = blockIdx.x / CL, uslots = gridDim.x / CL;

    if (wg == 0) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int stage = 0;
            uint32_t phase = 0;
            for (int u = unit0; u < nunits; u += uslots) {
                int tmu, tn;
                tile_coords_g(u, ntm_u, ntn, C::GROUP, tmu, tn);
                const int tm = min(tmu * CL + (int)rank, ntm - 1);  // clamped: see the header
                for (int kb = 0; kb < nk; kb++) {
                    bar_wait<false, (CL > 1)>(empty + 8 * stage, phase ^ 1);
                    const uint32_t fb = full + 8 * stage, sa = base + stage * C::STAGE_BYTES;
                    bar_expect_tx(fb, C::STAGE_BYTES);
                    tma_load_2d(sa, &tmX, kb * BK, tm * TM, fb);
                    if constexpr (CL == 1)
                        tma_load_2d(sa + C::A_BYTES, &tmW, kb * BK, tn * BN, fb);
                    else
                        tma_load_2d_mc(sa + C::A_BYTES + rank * (C::B_BYTES / 2), &tmW, kb * BK,
                                       tn * BN + (int)rank * (BN / 2), fb, (uint16_t)0x3);
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                }
            }
        }
    } else {  // consumers
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1, w = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
        const int rowoff = PP ? 0 : 64 * c;  // this warpgroup's first row in the tile
        float d[MS][BN / 2];
#pragma unroll
        for (int m = 0; m < MS; m++)
#pragma unroll
            for (int i = 0; i < BN / 2; i++) d[m][i] = 0.f;
        int i = 0;
        for (int u = unit0; u < nunits; u += uslots, i++) {
            if (PP && (i & 1) != c) continue;
            int tmu, tn;
            tile_coords_g(u, ntm_u, ntn, C::GROUP, tmu, tn);
            const int tm = tmu * CL + (int)rank;  // unclamped: >= ntm stores nothing
            if (PP && i > 0) bar_wait<true, false>(ord + 8 * c, (uint32_t)((i - 1) >> 1) & 1u);
            const int it0 = i * nk;
            int stage = it0 % STAGES;
            uint32_t phase = (uint32_t)(it0 / STAGES) & 1u;
            int prev = 0;
            for (int kb = 0; kb < nk; kb++) {
                bar_wait<true, false>(full + 8 * stage, phase);
                const uint32_t sa = base + stage * C::STAGE_BYTES, sb = sa + C::A_BYTES;
                wgm::fence();
#pragma unroll
                for (int s = 0; s < BK / 16; s++)
#pragma unroll
                    for (int m = 0; m < MS; m++)
                        mma<BN>(d[m], wgm::desc_k<TM>(sa, rowoff + 64 * m, s), wgm::desc_k<BN>(sb, 0, s), (kb | s) != 0);
                wgm::commit();
                if (kb > 0) {  // k-block kb - 1's wgmmas are done: release its stage (both CTAs)
                    wgm::wait<1>();
                    if (lane == 0) {
                        wgm::mbar_arrive(empty + 8 * prev);
                        if (CL > 1) mbar_arrive_remote(empty + 8 * prev, rank ^ 1u);
                    }
                }
                prev = stage;
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
            if (PP && lane == 0) wgm::mbar_arrive(ord + 8 * (c ^ 1));  // the other warpgroup may start
            wgm::wait<0>();
#pragma unroll
            for (int m = 0; m < MS; m++) wgm::fence_regs(d[m]);
            if (lane == 0) {
                wgm::mbar_arrive(empty + 8 * prev);
                if (CL > 1) mbar_arrive_remote(empty + 8 * prev, rank ^ 1u);
            }
            if constexpr (TMA_ST) {
                const uint32_t buf = epi + c * C::EPI_WG;
                const bool leader = (tid & 127) == 0;
#pragma unroll
                for (int p = 0; p < SPLIT; p++) {   // SPLIT 2: columns [0, BN/2), then [BN/2, BN)
                    if (leader) bulk_wait_read0();  // the previous store from the buffer has read it
                    named_sync_wg(c);
#pragma unroll
                    for (int m = 0; m < MS; m++)
#pragma unroll
                        for (int jj = 0; jj < 8 * QP; jj++)
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                const int j = p * 8 * QP + jj;  // accumulator column group (8 columns)
                                const int r = 16 * w + g + 8 * h;  // row in the 64-row chunk; r & 7 == g
                                const uint32_t a = buf + (uint32_t)(m * QP + (jj >> 3)) * 8192u + (uint32_t)r * 128u +
                                                   ((uint32_t)((jj & 7) ^ g) << 4) + 4u * t4;
                                st_shared_u32(a, pack_bf162(d[m][4 * j + 2 * h], d[m][4 * j + 2 * h + 1]));
                            }
                    wgm::fence_proxy_async();  // each writer: its st.shared before the async proxy's reads
                    named_sync_wg(c);
                    if (leader) {
#pragma unroll
                        for (int m = 0; m < MS; m++)
#pragma unroll
                            for (int ql = 0; ql < QP; ql++) {
                                const int c0 = tn * BN + 64 * (p * QP + ql), c1 = tm * TM + rowoff + 64 * m;
                                if (c0 < N && c1 < M) tma_store_2d(&tmY, c0, c1, buf + (uint32_t)(m * QP + ql) * 8192u);
                            }
                        bulk_commit();
                    }
                }
            } else {
#pragma unroll
                for (int m = 0; m < MS; m++) {
                    const int row0 = tm * TM + rowoff + 64 * m + 16 * w + g;
#pragma unroll
                    for (int j = 0; j < BN / 8; j++) {
                        const int col = tn * BN + 8 * j + 2 * t4;
                        if (col < N) {
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                const int row = row0 + 8 * h;
                                if (row < M)
                                    *reinterpret_cast<__nv_bfloat162 *>(Y + (size_t)row * N + col) =
                                        __floats2bfloat162_rn(d[m][4 * j + 2 * h], d[m][4 * j + 2 * h + 1]);
                            }
                        }
                    }
                }
            }
        }
        if (TMA_ST && (tid & 127) == 0) bulk_wait0();  // all stores done before the CTA may exit
    }
    if constexpr (CL > 1) cluster_sync_all();  // no CTA exits while its peer may still arrive remotely
#else
    if (threadIdx.x == 0 && blockIdx.x == 0) printf("hgemm2_kernel: built without sm_90a\n");
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
    static constexpr int BN_ = BN, STAGES_ = STAGES, TM_ = hg::BM, CL_ = 1, SMEM_ = hg::Cfg<BN, STAGES>::SMEM;
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

// v2 kernels. TMA_ST needs N % 8 == 0 (the output map's row stride a multiple of 16 bytes).
// CL = 2: launched with cudaLaunchKernelEx and a cluster-dimension attribute (2, 1, 1); the grid is
// 2 x min(units, cudaOccupancyMaxActiveClusters) (some GPCs may not fit an even number of CTAs).
template <int BN, int STAGES, bool TMA_ST, bool PP, int CL, int SPLIT = 1>
struct Ours2 {
    using C = hg::Cfg2<BN, STAGES, TMA_ST, PP, CL, SPLIT>;
    static constexpr int BN_ = BN, STAGES_ = STAGES, TM_ = C::TM, CL_ = CL, SMEM_ = C::SMEM;
    CUtensorMap mx, mw, my;
    __nv_bfloat16 *y;
    int M, N, K, grid;
    static void launch_cfg(cudaLaunchConfig_t &cfg, cudaLaunchAttribute &attr, int grid) {
        memset(&cfg, 0, sizeof cfg);
        memset(&attr, 0, sizeof attr);
        cfg.gridDim = dim3((unsigned)grid, 1, 1);
        cfg.blockDim = dim3(hg::NTHREADS, 1, 1);
        cfg.dynamicSmemBytes = C::SMEM;
        cfg.stream = 0;
        if (CL > 1) {
            attr.id = cudaLaunchAttributeClusterDimension;
            attr.val.clusterDim.x = CL;
            attr.val.clusterDim.y = 1;
            attr.val.clusterDim.z = 1;
            cfg.attrs = &attr;
            cfg.numAttrs = 1;
        }
    }
    Ours2(const void *x, const void *w, void *y_, int M_, int N_, int K_) : y((__nv_bfloat16 *)y_), M(M_), N(N_), K(K_) {
        if (K % 8 || N % 2 || (TMA_ST && N % 8)) {
            fprintf(stderr, "hopper_gemm: needs K %% 8 == 0 and N even (N %% 8 == 0 for the TMA-store variants)\n");
            exit(1);
        }
        mx = make_map(x, M, K, C::TM);
        mw = make_map(w, N, K, CL > 1 ? BN / 2 : BN);
        my = TMA_ST ? make_map(y, M, N, 64) : mx;  // output: boxes of 64 x 64, 128B swizzle (unused without TMA_ST)
        CK(cudaFuncSetAttribute(hg::hgemm2_kernel<BN, STAGES, TMA_ST, PP, CL, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                C::SMEM));
        const int units = (((M + C::TM - 1) / C::TM + CL - 1) / CL) * ((N + BN - 1) / BN);
        int slots = num_sms / CL;
        if (CL > 1) {
            cudaLaunchConfig_t cfg;
            cudaLaunchAttribute attr;
            launch_cfg(cfg, attr, CL * slots);
            int ncl = 0;
            CK(cudaOccupancyMaxActiveClusters(&ncl, hg::hgemm2_kernel<BN, STAGES, TMA_ST, PP, CL, SPLIT>, &cfg));
            if (ncl < 1) {
                fprintf(stderr, "hopper_gemm: no cluster of %d CTAs with %d B of shared memory fits\n", CL, C::SMEM);
                exit(1);
            }
            slots = std::min(slots, ncl);
        }
        grid = CL * std::min(units, slots);
    }
    void operator()() {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute attr;
        launch_cfg(cfg, attr, grid);
        CK(cudaLaunchKernelEx(&cfg, hg::hgemm2_kernel<BN, STAGES, TMA_ST, PP, CL, SPLIT>, mx, mw, my, y, M, N, K));
    }
};

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 32u << 20;

// cuBLASLt's forward as gemm_algos.cu / gemm.cu: column-major D (N x M) = W^T-op ... i.e.
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

template <class O>
static void run_shape(const char *vname, const char *name, int M, int N, int K) {
    void *x = gemm_dev_random((size_t)M * K * 2), *w = gemm_dev_random((size_t)N * K * 2);
    void *ya = gemm_dev_random((size_t)M * N * 2), *yb = gemm_dev_random((size_t)M * N * 2);  // garbage before the calls
    O ours(x, w, ya, M, N, K);
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
    printf("RESULT %-14s %-6s tile %dx%d st %d cl %d grid %3d  M %5d K %5d N %5d  ours %.4f ms (%3.0f TFLOP/s)  cublasLt %.4f ms (%3.0f "
           "TFLOP/s)  ratio %.3f  rel-L2 %.2e  max|d| %.3g  max rel(|ref|>=1) %.3g  sampled fp32: ours %.2e lt %.2e  %s\n",
           name, vname, O::TM_, O::BN_, O::STAGES_, O::CL_, ours.grid, M, K, N, t_ours, f / t_ours * 1e-9, t_ref, f / t_ref * 1e-9, t_ref / t_ours, rel, hmx[0],
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
    // Variants (HGEMM_VARIANTS=a,b,... selects and orders them; default: all, in this order).
    // HGEMM_TILE=256 or 128 keeps only the variants of that tile width.
    struct variant { const char *name; int bn; void (*run)(const char *, const char *, int, int, int); const char *what; };
    const variant variants[] = {
        {"c256", 256, run_shape<Ours<256, 4>>, "v1 cooperative 128x256, 4 stages, direct stores"},
        {"c128", 128, run_shape<Ours<128, 6>>, "v1 cooperative 128x128, 6 stages, direct stores"},
        {"t256", 256, run_shape<Ours2<256, 3, true, false, 1>>, "cooperative 128x256, 3 stages, smem + TMA store"},
        {"t256s", 256, run_shape<Ours2<256, 4, true, false, 1, 2>>, "cooperative 128x256, 4 stages, TMA store in 2 halves"},
        {"t128", 128, run_shape<Ours2<128, 6, true, false, 1>>, "cooperative 128x128, 6 stages, smem + TMA store"},
        {"p256", 256, run_shape<Ours2<256, 4, true, true, 1>>, "pingpong 64x256 per warpgroup, 4 stages, TMA store"},
        {"p128", 128, run_shape<Ours2<128, 5, true, true, 1>>, "pingpong 128x128 per warpgroup, 5 stages, TMA store"},
        {"p256d", 256, run_shape<Ours2<256, 5, false, true, 1>>, "pingpong 64x256 per warpgroup, 5 stages, direct stores"},
        {"m256", 256, run_shape<Ours2<256, 3, true, false, 2>>, "cluster 2x1 (W multicast), cooperative 128x256, 3 st, TMA store"},
        {"m256s", 256, run_shape<Ours2<256, 4, true, false, 2, 2>>, "cluster 2x1 (W multicast), cooperative 128x256, 4 st, TMA store in 2 halves"},
        {"m256d", 256, run_shape<Ours2<256, 4, false, false, 2>>, "cluster 2x1 (W multicast), cooperative 128x256, 4 st, direct"},
        {"mp256", 256, run_shape<Ours2<256, 4, true, true, 2>>, "cluster 2x1 (W multicast), pingpong 64x256, 4 st, TMA store"},
        {"mp128", 128, run_shape<Ours2<128, 5, true, true, 2>>, "cluster 2x1 (W multicast), pingpong 128x128, 5 st, TMA store"},
    };
    const int nvar = (int)(sizeof variants / sizeof variants[0]);
    const int only = getenv("HGEMM_TILE") ? atoi(getenv("HGEMM_TILE")) : 0;
    std::vector<int> sel;
    if (const char *v = getenv("HGEMM_VARIANTS")) {
        std::string s(v);
        size_t p = 0;
        while (p <= s.size()) {
            const size_t q = std::min(s.find(',', p), s.size());
            const std::string nm = s.substr(p, q - p);
            p = q + 1;
            if (nm.empty()) continue;
            int k = -1;
            for (int j = 0; j < nvar; j++)
                if (nm == variants[j].name) k = j;
            if (k < 0) {
                fprintf(stderr, "hopper_gemm: unknown variant '%s' (known:", nm.c_str());
                for (const variant &x : variants) fprintf(stderr, " %s", x.name);
                fprintf(stderr, ")\n");
                return 1;
            }
            sel.push_back(k);
        }
    } else {
        for (int j = 0; j < nvar; j++) sel.push_back(j);
    }
    for (int k : sel)
        if (only == 0 || only == variants[k].bn) printf("variant %-6s %s\n", variants[k].name, variants[k].what);
    struct shape { const char *name; int M, K, N; } shapes[] = {
        {"mlp gate/up", 32768, 1024, 2816}, {"gdn in-proj", 32768, 1024, 3080}, {"o-proj", 32768, 1024, 1024},
        {"mlp down", 32768, 2816, 1024},    {"lm head chunk", 8320, 1024, 32000}};
    for (const shape &s : shapes)
        for (int k : sel)
            if (only == 0 || only == variants[k].bn) variants[k].run(variants[k].name, s.name, s.M, s.N, s.K);
    LK(cublasLtDestroy(lt));
    CK(cudaFree(ws));
    printf("%s\n", all_ok ? "ALL OK" : "SOME FAILED");
    return all_ok ? 0 : 2;
}
