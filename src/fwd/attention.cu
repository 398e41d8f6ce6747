// attention.cu — forward of causal sliding-window softmax attention (see attention_cuda.h).
// bf16: flash-attention 2 scheme. One CTA of 4 warps owns BQ = 128 query rows of one (b, h);
// each warp owns 32 rows (two m16 tiles, so every K/V fragment read from shared memory feeds
// two mma). The CTA walks the key blocks of BK = 64 that intersect the window, from the
// diagonal block down to the block holding key i - window + 1; blocks outside are not visited.
// Per block: S = Q K^T (mma), mask only on blocks that straddle an edge, online softmax in the
// log2 domain (p = 2^(s c2 - m c2), c2 = scale log2 e, one FFMA + MUFU.EX2 per score; m running
// max of the raw scores, l running sum), O = O * 2^(c2 (m_old - m_new)) + P V (mma, P rounded to
// bf16 in registers). K/V tiles are double-buffered with cp.async, K and V in separate groups:
// S waits only for K, and V (waited for, plus a barrier, just before P V) lands while S and the
// softmax run. At D = 128 the kernel takes 255 registers, no spill (one group for K and V
// spilled 48 bytes).
// Saved for the backward: lse_i = ln 2 * (m_i + log2 l_i) (attention_bwd recomputes P from it).
// bf16 on sm_90a (the default there; attn_params.kernels = ATTN_KERNELS_MMA_SYNC keeps the kernel
// above): the same walk and softmax on wgmma.mma_async, fed by a TMA producer warpgroup,
// flash-attention 3's warp specialisation, with 2 K/V stages and the two consumer warpgroups of
// 64 query rows in ping-pong (attention_fwd_wgmma_kernel). Where it cannot run (no tensor map,
// too few registers for setmaxnreg) the kernel above does.
// fp32: one warp per query row, 32 keys at a time (lane = key for the scores, lane = head
// dim for the output), plain fp32 FMA and expf: slower, exact to ~1e-6.
// Document starts (attn_params.doc_start): the bf16 kernels' DOC instances. Starts are
// non-decreasing along a row, so the first query of a tile has the smallest: key blocks wholly
// before it are skipped (the walk's lower end max(q0 - W + 1, s_q0)), and a block straddles when
// it begins before the tile's largest start (its last row's); straddling blocks mask j < s_i per
// element, as the window's edge. A row always keeps key i, so none is fully masked.
#include "../core/cuda_check.h"
#include <cuda.h>          // CUtensorMap (types only: the encoder is found at run time, no -lcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include "../cuda/attention.cuh"
#include "attention_testing.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace {

// RW = 32 rows per warp (two m16 tiles share each K/V fragment), 4 warps. Measured against
// RW = 16 (8 warps, 128 registers): 2.16 ms vs 2.42 ms at B8 T4096 H16 D128 causal (bench/attention.md).
constexpr int FWD_BQ = 128, FWD_BK = 64, FWD_RW = 32, FWD_WARPS = FWD_BQ / FWD_RW, FWD_THREADS = FWD_WARPS * 32;

struct fwd_kparams {
    int B, T, H, window;  // window already clamped to <= T
    float scale_log2;     // scale * log2 e
    const __nv_bfloat16 *q, *k, *v;
    __nv_bfloat16 *o;
    float *lse;
    const int32_t *doc;  // NULL, or (B*T) document starts (DOC kernels)
};

// DOC: the start of query i's document (i clamped to the last row: rows past T are never stored).
__device__ __forceinline__ int attn_doc_start(const int32_t *doc, int b, int T, int i) {
    return doc[(size_t)b * T + min(i, T - 1)];
}

template <int D>
constexpr int fwd_smem_bytes() {
    return (FWD_BQ * D + 4 * FWD_BK * D) * 2;  // Q + 2 x (K, V)
}

// grid (ceil(T/BQ), H, B); heaviest (last) query blocks first under causal masking.
template <int D, bool DOC>
__global__ void __launch_bounds__(FWD_THREADS, 2) attention_fwd_kernel(const __grid_constant__ fwd_kparams p) {
    constexpr int MT = FWD_RW / 16, NT = FWD_THREADS, RW = FWD_RW;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem_raw);  // (BQ, D)
    __nv_bfloat16 *Ks = Qs + FWD_BQ * D;                               // 2 x (BK, D)
    __nv_bfloat16 *Vs = Ks + 2 * FWD_BK * D;                           // 2 x (BK, D)

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int m = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, W = p.window;
    const float c2 = p.scale_log2;
    const int q0 = m * FWD_BQ;
    // key blocks that intersect the window of some row in [q0, q0 + BQ)
    const int j_hi = min(T - 1, q0 + FWD_BQ - 1);
    int j_lo = max(0, q0 - W + 1);
    int s_hi = 0;  // DOC: the largest document start of the tile's rows
    if constexpr (DOC) {
        j_lo = max(j_lo, attn_doc_start(p.doc, b, T, q0));
        s_hi = attn_doc_start(p.doc, b, T, q0 + FWD_BQ - 1);
    }
    const int n_hi = j_hi / FWD_BK, n_lo = j_lo / FWD_BK;

    attn_load_tile<FWD_BQ, D, NT>(Qs, p.q, b, h, q0, T, H, tid);
    attn_load_tile<FWD_BK, D, NT>(Ks, p.k, b, h, n_hi * FWD_BK, T, H, tid);
    cp_async_commit();  // group: Q, K
    attn_load_tile<FWD_BK, D, NT>(Vs, p.v, b, h, n_hi * FWD_BK, T, H, tid);
    cp_async_commit();  // group: V

    float acc[MT][D / 8][4];  // O, rows (mt*16 + g, +8) of this warp, cols dt*8 + 2t, +1
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][dt][e] = 0.f;
    // [mt][row g / g+8]: running max of the raw scores, partial (per-thread) running sum
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) mrow[mt][r] = -INFINITY, lrow[mt][r] = 0.f;

    const int wrow0 = warp * RW;  // first row of this warp inside the tile
    const uint32_t qs_base = gdnk::smem_u32(Qs);
    int srow[MT][2];  // DOC: document starts of this thread's rows
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) srow[mt][r] = DOC ? attn_doc_start(p.doc, b, T, q0 + wrow0 + mt * 16 + g + 8 * r) : 0;

    for (int n = n_hi, it = 0; n >= n_lo; n--, it++) {
        // pending groups: K_n, V_n (oldest first)
        cp_async_wait<1>();
        __syncthreads();  // K tile n visible; every warp is done with buffers (it+1)&1
        const bool pre = n > n_lo;
        if (pre) {
            const int nb = (it + 1) & 1;
            attn_load_tile<FWD_BK, D, NT>(Ks + nb * FWD_BK * D, p.k, b, h, (n - 1) * FWD_BK, T, H, tid);
            cp_async_commit();
            attn_load_tile<FWD_BK, D, NT>(Vs + nb * FWD_BK * D, p.v, b, h, (n - 1) * FWD_BK, T, H, tid);
            cp_async_commit();
        }
        const __nv_bfloat16 *Kb = Ks + (it & 1) * FWD_BK * D;
        const __nv_bfloat16 *Vb = Vs + (it & 1) * FWD_BK * D;
        const uint32_t ks_base = gdnk::smem_u32(Kb), vs_base = gdnk::smem_u32(Vb);

        // S = Q K^T : (RW x BK) per warp
        float s[MT][FWD_BK / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < FWD_BK / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][nt][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                gdnk::ldsm4(a[mt], qs_base + 2 * attn_swz<D>(wrow0 + mt * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int np = 0; np < FWD_BK / 16; np++) {
                uint32_t bf[4];
                gdnk::ldsm4(bf, ks_base + 2 * attn_swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                            kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    attn_mma(s[mt][2 * np], a[mt], bf[0], bf[1]);
                    attn_mma(s[mt][2 * np + 1], a[mt], bf[2], bf[3]);
                }
            }
        }

        // mask (raw scores -> -inf) only on blocks that straddle the diagonal or the window edge
        const int k0 = n * FWD_BK;
        if ((k0 + FWD_BK - 1 > q0) || (k0 <= q0 + FWD_BQ - 1 - W) || (DOC && k0 < s_hi)) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < FWD_BK / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = q0 + wrow0 + mt * 16 + g + ((e >> 1) << 3);
                        const int j = k0 + nt * 8 + 2 * t4 + (e & 1);
                        if (j > i || j <= i - W || (DOC && j < srow[mt][e >> 1])) s[mt][nt][e] = -INFINITY;
                    }
        }

        // online softmax per row: p = 2^(s c2 - m c2) with one FFMA, O and l rescaled
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = mrow[mt][r];
#pragma unroll
                for (int nt = 0; nt < FWD_BK / 8; nt++)
                    mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float ms = mx == -INFINITY ? 0.f : mx * c2;  // fully masked so far: p = 0
                const float corr = attn_ex2(mrow[mt][r] * c2 - ms);
                mrow[mt][r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < FWD_BK / 8; nt++) {
                    const float p0 = attn_ex2(fmaf(s[mt][nt][2 * r], c2, -ms));
                    const float p1 = attn_ex2(fmaf(s[mt][nt][2 * r + 1], c2, -ms));
                    s[mt][nt][2 * r] = p0;
                    s[mt][nt][2 * r + 1] = p1;
                    sum += p0 + p1;
                }
                lrow[mt][r] = lrow[mt][r] * corr + sum;
#pragma unroll
                for (int dt = 0; dt < D / 8; dt++) {
                    acc[mt][dt][2 * r] *= corr;
                    acc[mt][dt][2 * r + 1] *= corr;
                }
            }

        // pending groups: V_n (, K_n-1, V_n-1)
        if (pre) cp_async_wait<2>();
        else cp_async_wait<0>();
        __syncthreads();  // V tile n visible
        // O += P V; P's C-fragments of key tiles 2kk, 2kk+1 are the A-fragment of k-step kk
#pragma unroll
        for (int kk = 0; kk < FWD_BK / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = gdnk::pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = gdnk::pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = gdnk::pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = gdnk::pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t bf[4];
                gdnk::ldsm4t(bf, vs_base + 2 * attn_swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                              dp * 16 + (lane >> 4) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    attn_mma(acc[mt][2 * dp], a[mt], bf[0], bf[1]);
                    attn_mma(acc[mt][2 * dp + 1], a[mt], bf[2], bf[3]);
                }
            }
        }
    }

    // epilogue: o = O / l (bf16, staged through this warp's own Q rows), lse = ln2 (m c2 + log2 l)
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = lrow[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int row = wrow0 + mt * 16 + g + r * 8;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++)
                *reinterpret_cast<uint32_t *>(Qs + attn_swz<D>(row, dt * 8 + 2 * t4)) =
                    gdnk::pack_bf16(acc[mt][dt][2 * r] * inv, acc[mt][dt][2 * r + 1] * inv);
            const int i = q0 + row;
            if (t4 == 0 && i < T)
                p.lse[((size_t)b * H + h) * T + i] = ATTN_LN2 * (mrow[mt][r] * c2 + log2f(l));
        }
    __syncwarp();
    constexpr int CPR = D / 8;
#pragma unroll
    for (int c = lane; c < RW * CPR; c += 32) {
        const int row = wrow0 + c / CPR, ch = c % CPR, i = q0 + row;
        if (i < T)
            *reinterpret_cast<uint4 *>(p.o + (((size_t)b * T + i) * H + h) * D + ch * 8) =
                *reinterpret_cast<const uint4 *>(Qs + attn_swz<D>(row, ch * 8));
    }
}

// ---- Hopper path (sm_90a, the default there: attn_wgmma_runs) -------------------------------
// attention_fwd_wgmma_kernel: the same block walk, masking, log2-domain online softmax and lse
// as the kernel above, on wgmma.mma_async (flash-attention 3's operand placement) fed by a TMA
// producer warpgroup (flash-attention 3's warp specialisation). Per key block of WG_BK = 128, a
// consumer warpgroup (64 query rows): S (64 x 128 fp32, 64 registers a thread) = Q K^T with Q
// and K both read from shared memory through descriptors (K-major, 128-byte swizzle), then
// O (64 x D) += P V with P from registers (the accumulator fragment of S is, pairwise packed to
// bf16, the A fragment of the k-steps, as with mma.sync) and V from shared memory N-major
// (imm-trans-b = 1: V stays [keys][dims] as loaded). Tiles are 64-column panels (wgmma.cuh).
// Per block the arithmetic and its order are fixed (S from zero, o = o * corr_u + P_u V_u);
// inside a warpgroup (flash-attention 3's intra-warpgroup overlap) S_{u+1} = Q K_{u+1}^T and
// O += P_u V_u are issued back to back as two wgmma groups, S first; wait_group 1 returns once
// S_{u+1} is done and its mask and softmax run while P_u V_u is still on the tensor cores; then
// wait_group 0, o *= corr_{u+1}, P_{u+1} packed. Between the issue and wait_group 0 nothing
// touches o or the P_u fragments (ptxas checks this: it would inject a wait and say so under
// -Xptxas -v, "C7517 warpgroup.wait is injected"; it does not).
constexpr int WG_BQ = 128, WG_BK = 128;

// Mask and online softmax of one score block of a warpgroup: s (64 x BK, the S accumulator) -> p = 2^(s c2 - m c2); m, l updated; corr = the factor o
// must be multiplied by. Rows i0 (r = 0) and i0 + 8 (r = 1), keys k0 + 8 j + 2 t4 + (e & 1).
// DOC: keys before the rows' document starts lo[r] masked too.
template <int BK, bool DOC>
__device__ __forceinline__ void wg_softmax(float (&s)[BK / 2], float (&mrow)[2], float (&lrow)[2], float (&corr)[2],
                                           bool mask, int i0, int k0, int t4, int W, float c2, const int (&lo)[2]) {
    if (mask) {
#pragma unroll
        for (int j = 0; j < BK / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = i0 + ((e >> 1) << 3);
                const int key = k0 + 8 * j + 2 * t4 + (e & 1);
                if (key > i || key <= i - W || (DOC && key < lo[e >> 1])) s[4 * j + e] = -INFINITY;
            }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = mrow[r];
#pragma unroll
        for (int j = 0; j < BK / 8; j++) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float ms = mx == -INFINITY ? 0.f : mx * c2;  // fully masked so far: p = 0
        corr[r] = attn_ex2(mrow[r] * c2 - ms);
        mrow[r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < BK / 8; j++) {
            const float p0 = attn_ex2(fmaf(s[4 * j + 2 * r], c2, -ms));
            const float p1 = attn_ex2(fmaf(s[4 * j + 2 * r + 1], c2, -ms));
            s[4 * j + 2 * r] = p0;
            s[4 * j + 2 * r + 1] = p1;
            sum += p0 + p1;
        }
        lrow[r] = lrow[r] * corr[r] + sum;
    }
}

// attention_fwd_wgmma_kernel: a CTA of 3 warpgroups (384 threads) owns WG_BQ = 128 query rows
// of one (b, h):
//   warpgroup 0 = producer: setmaxnreg.dec to WG_PRODUCER_REGS; lane 0 of its first warp issues
//     every load as TMA (cp.async.bulk.tensor.4d from the tensor maps of q, k, v: dims (D, H, T,
//     B), box 64 columns x 1 x 128 rows x 1 with 128-byte swizzle, which lands exactly as one
//     64-column panel of the wgmma layout, wgmma.cuh; two boxes per tile at D = 128, one at 64;
//     rows >= T are outside the map and written as zeros).
//     Warps 1-3 of the producer warpgroup exit after setmaxnreg.
//   warpgroups 1, 2 = consumers (64 query rows each): setmaxnreg.inc to WG_CONSUMER_REGS; per
//     key block the code described above (S from zero, mask only on straddling blocks,
//     wg_softmax, o = o * corr + P V, S_{u+1} issued with P_u V_u), then the epilogue through
//     Q's rows.
// K/V tiles rotate through NS = WG_STAGES = 2 stages of shared memory.
// Barriers (shared memory after the tiles): q_full (count 1); per stage s < NS: k_full[s],
// v_full[s] (count 1: the producer's arrive.expect_tx, completed by the TMA bytes), k_empty[s],
// v_empty[s] (count 8: lane 0 of each consumer warp after the wait_group that retires the last
// wgmma reading the stage). Tile u (u-th block visited, key block n_hi - u) lives in stage u % NS,
// fill number u / NS: consumers wait full with parity (u / NS) & 1; the producer refills a stage
// for tile u >= NS after the (u / NS - 1)-th completion of its empty barrier, parity
// (u / NS - 1) & 1. Producer order: Q, K_0, then for j = 0 .. nb - 1: K_{j+1}, V_j (consumers
// need K_{u+1} and V_u together in block u; K runs a block ahead of V). Every wait the
// producer makes is released by a consumer step of an earlier block, so the order cannot
// deadlock; every TMA load issued is waited for by both consumers before the CTA exits.
// Ping-pong (flash-attention 3 section 3.1, its "warp scheduler barrier"): the consumers take
// turns to issue their wgmma groups, so that one's softmax runs while the other's products
// occupy the tensor cores. Named barrier 3 + c (256 threads: consumer c's 128 bar.sync + the
// other's 128 bar.arrive) is consumer c's turn. Consumer 1 arrives on barrier 3 once at the start
// (consumer 0 goes first); at each of its nb + 1 issue points (S_0; S_{u+1} with P_u V_u; the
// last P V) a consumer syncs on its own barrier before wgmma.fence and, after the commits,
// arrives on the other's; consumer 1 skips that arrival after its last issue (consumer 0 has no
// issue left), so both barriers end balanced. The arithmetic is unchanged.
// Registers: __launch_bounds__(384, 1) gives 168 a thread at launch (ptxas -v reports that);
// setmaxnreg moves 144 x 128 of them from the producer (24) to the consumers (240), and ptxas
// compiles the consumer branch against 240 (it uses about 194; no spill).
// -DGDN_MBAR_WATCHDOG: the waits are wgmma.cuh's mbar_wait(bar, parity, failed), which trap only
// at the kernel's end (a trap inside a setmaxnreg region costs the region its register budget).
constexpr int WG_THREADS = 384, WG_PRODUCER_REGS = 24, WG_CONSUMER_REGS = 240, WG_STAGES = 2;
static_assert(128 * WG_PRODUCER_REGS + 256 * WG_CONSUMER_REGS <= 65536, "wgmma fwd: setmaxnreg exceeds the SM's registers");

template <int D>
constexpr int fwd_wgmma_smem_bytes() {
    // Q + NS x (K, V), + slack to align to 1024, + 1 + 4 NS mbarriers (Q full, full K, full V, empty K, empty V)
    return (WG_BQ * D + 2 * WG_STAGES * WG_BK * D) * 2 + 1024 + (1 + 4 * WG_STAGES) * 8;
}
static_assert(fwd_wgmma_smem_bytes<128>() <= 227 * 1024, "wgmma fwd: the stages exceed sm_90's 227 KiB");

template <int D, bool DOC>
__global__ void __launch_bounds__(WG_THREADS, 1)
    attention_fwd_wgmma_kernel(const __grid_constant__ fwd_kparams p, const __grid_constant__ CUtensorMap tmq,
                               const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BQ = WG_BQ, BK = WG_BK, NC = 256, NS = WG_STAGES;  // NC consumer threads
    static_assert(NS >= 2, "wgmma fwd: K_{u+1} and V_u are read together");
    static_assert(BQ == BK, "wgmma fwd: Q, K and V tiles share the box of the tensor maps");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // every panel must start on a 1024-byte boundary (wgmma.cuh, and TMA's 128-byte swizzle)
    const uint32_t raw_s = gdnk::smem_u32(smem_raw);
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem_raw + (((raw_s + 1023u) & ~1023u) - raw_s));
    __nv_bfloat16 *Ks = Qs + BQ * D;       // NS x (BK x D), sw128<BK>
    __nv_bfloat16 *Vs = Ks + NS * BK * D;  // NS x (BK x D), sw128<BK>
    const uint32_t q_full = gdnk::smem_u32(Vs + NS * BK * D), k_full = q_full + 8, v_full = k_full + 8 * NS;
    const uint32_t k_empty = v_full + 8 * NS, v_empty = k_empty + 8 * NS;

    const int tid = threadIdx.x, lane = tid & 31;
    const int m = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, W = p.window;
    const int q0 = m * BQ;
    const int j_hi = min(T - 1, q0 + BQ - 1);
    const int j_lo = max(max(0, q0 - W + 1), DOC ? attn_doc_start(p.doc, b, T, q0) : 0);  // DOC: header
    const int n_hi = j_hi / BK, nb = n_hi - j_lo / BK + 1;  // tile u = key block n_hi - u, u < nb

    if (tid == 0) {
        wgm::mbar_init(q_full, 1);
#pragma unroll
        for (int s = 0; s < NS; s++) {
            wgm::mbar_init(k_full + 8 * s, 1);
            wgm::mbar_init(v_full + 8 * s, 1);
            wgm::mbar_init(k_empty + 8 * s, NC / 32);
            wgm::mbar_init(v_empty + 8 * s, NC / 32);
        }
        wgm::mbar_init_fence();
    }
    if (tid == 32) {
        wgm::prefetch_tensormap(&tmq);
        wgm::prefetch_tensormap(&tmk);
        wgm::prefetch_tensormap(&tmv);
    }
    __syncthreads();  // barriers initialised before any arrival; the only CTA-wide barrier
    bool wd_failed = false;  // -DGDN_MBAR_WATCHDOG: a wait timed out (wgmma.cuh; trap at the end)

    const uint32_t qs = gdnk::smem_u32(Qs), ks0 = gdnk::smem_u32(Ks), vs0 = gdnk::smem_u32(Vs);
    constexpr uint32_t TILE = 2u * BK * D;  // bytes per Q, K or V tile (BQ == BK)
    constexpr uint32_t PANEL = 2u * BK * 64;  // bytes per 64-column panel of a tile

    if (tid < 128) {  // ---- producer warpgroup
        wgm::setmaxnreg_dec<WG_PRODUCER_REGS>();
        if (tid < 32) {
            // one tile: rows row0 .. row0 + 127 of head (b, h), D / 64 boxes, on `bar`
            auto load = [&](const CUtensorMap *map, uint32_t dst, int row0, uint32_t bar) {
                if (lane == 0) {
                    wgm::mbar_arrive_expect_tx(bar, TILE);
#pragma unroll
                    for (int c = 0; c < D / 64; c++) wgm::tma_load_4d(dst + c * PANEL, map, 64 * c, h, row0, b, bar);
                }
                __syncwarp();
            };
            load(&tmq, qs, q0, q_full);
            load(&tmk, ks0, n_hi * BK, k_full);
            for (int j = 0; j < nb; j++) {
                if (j + 1 < nb) {  // K_{j+1}: its stage was read last by S_{j+1-NS}
                    const int u = j + 1, st = u % NS;
                    if (u >= NS) wgm::mbar_wait(k_empty + 8 * st, (u / NS - 1) & 1, wd_failed);
                    load(&tmk, ks0 + st * TILE, (n_hi - u) * BK, k_full + 8 * st);
                }
                {  // V_j: its stage was read last by P_{j-NS} V_{j-NS}
                    const int st = j % NS;
                    if (j >= NS) wgm::mbar_wait(v_empty + 8 * st, (j / NS - 1) & 1, wd_failed);
                    load(&tmv, vs0 + st * TILE, (n_hi - j) * BK, v_full + 8 * st);
                }
            }
        }
    } else {  // ---- consumer warpgroups: the per-block code of the header
        wgm::setmaxnreg_inc<WG_CONSUMER_REGS>();
        const int wg = (tid >> 7) - 1, w = (tid >> 5) & 3;
        const int g = lane >> 2, t4 = lane & 3;
        const float c2 = p.scale_log2;
        const int wq0 = q0 + 64 * wg;     // first query row of this warpgroup
        const int i0 = wq0 + 16 * w + g;  // this thread's rows: i0, i0 + 8
        // DOC: the document starts of this thread's rows and the warpgroup's largest
        const int lo[2] = {DOC ? attn_doc_start(p.doc, b, T, i0) : 0, DOC ? attn_doc_start(p.doc, b, T, i0 + 8) : 0};
        const int s_hi = DOC ? attn_doc_start(p.doc, b, T, wq0 + 63) : 0;

        float o[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.f;
        float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f}, corr[2];
        float s[BK / 2];
        uint32_t pa[BK / 16][4];
        auto pack_p = [&]() {
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++)
#pragma unroll
                for (int q = 0; q < 4; q++) pa[kk][q] = gdnk::pack_bf16(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
        };
        auto straddles = [&](int k0) { return (k0 + BK - 1 > wq0) || (k0 <= wq0 + 63 - W) || (DOC && k0 < s_hi); };
        auto release = [&](uint32_t bar) {
            if (lane == 0) wgm::mbar_arrive(bar);
        };
        // ping-pong: wait for this consumer's turn to issue / hand the turn to the other (header)
        auto turn_wait = [&]() {
            if (wg == 0) asm volatile("bar.sync 3, 256;\n" ::: "memory");
            else asm volatile("bar.sync 4, 256;\n" ::: "memory");
        };
        auto turn_pass = [&]() {
            if (wg == 0) asm volatile("bar.arrive 4, 256;\n" ::: "memory");
            else asm volatile("bar.arrive 3, 256;\n" ::: "memory");
        };
        if (wg == 1) asm volatile("bar.arrive 3, 256;\n" ::: "memory");  // consumer 0 issues first

        // block 0: S_0, softmax (o is 0: no rescale), P_0. TMA writes through the async proxy,
        // as wgmma reads: the mbarrier wait alone orders them (no proxy fence).
        wgm::mbar_wait(q_full, 0, wd_failed);
        wgm::mbar_wait(k_full, 0, wd_failed);
        turn_wait();
        wgm::fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
            wgm::mma_ss<BK, 0>(s, wgm::desc_k<BQ>(qs, 64 * wg, kk), wgm::desc_k<BK>(ks0, 0, kk), kk > 0);
        wgm::commit();
        turn_pass();
        wgm::wait<0>();
        wgm::fence_regs(s);
        release(k_empty);
        wg_softmax<BK, DOC>(s, mrow, lrow, corr, straddles(n_hi * BK), i0, n_hi * BK, t4, W, c2, lo);
        pack_p();

        for (int u = 0; u + 1 < nb; u++) {
            const int sn = (u + 1) % NS, sc = u % NS;  // stages of K_{u+1} and V_u
            wgm::mbar_wait(k_full + 8 * sn, ((u + 1) / NS) & 1, wd_failed);
            wgm::mbar_wait(v_full + 8 * sc, (u / NS) & 1, wd_failed);
            wgm::fence_regs(s);
            wgm::fence_regs(o);
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) wgm::fence_regs(pa[kk]);
            turn_wait();
            wgm::fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                wgm::mma_ss<BK, 0>(s, wgm::desc_k<BQ>(qs, 64 * wg, kk), wgm::desc_k<BK>(ks0 + sn * TILE, 0, kk), kk > 0);
            wgm::commit();  // group: S_{u+1}
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) wgm::mma_rs<D, 1>(o, pa[kk], wgm::desc_n<BK>(vs0 + sc * TILE, kk), 1);
            wgm::commit();   // group: O += P_u V_u
            turn_pass();
            wgm::wait<1>();  // S_{u+1} done; o and pa stay untouched until wait<0>
            wgm::fence_regs(s);
            release(k_empty + 8 * sn);
            const int k0 = (n_hi - u - 1) * BK;
            wg_softmax<BK, DOC>(s, mrow, lrow, corr, straddles(k0), i0, k0, t4, W, c2, lo);
            wgm::wait<0>();  // P_u V_u done
            wgm::fence_regs(o);
            release(v_empty + 8 * sc);
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                o[4 * j] *= corr[0];
                o[4 * j + 1] *= corr[0];
                o[4 * j + 2] *= corr[1];
                o[4 * j + 3] *= corr[1];
            }
            pack_p();
        }

        // last block: O += P V (the producer loads nothing after V_{nb-1}: no release)
        wgm::mbar_wait(v_full + 8 * ((nb - 1) % NS), ((nb - 1) / NS) & 1, wd_failed);
        wgm::fence_regs(o);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) wgm::fence_regs(pa[kk]);
        turn_wait();
        wgm::fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            wgm::mma_rs<D, 1>(o, pa[kk], wgm::desc_n<BK>(vs0 + ((nb - 1) % NS) * TILE, kk), 1);
        wgm::commit();
        if (wg == 0) turn_pass();  // consumer 1's last issue follows; nothing follows consumer 1's
        wgm::wait<0>();
        wgm::fence_regs(o);

        // epilogue: o = O / l staged through this warpgroup's own Q rows (written by
        // TMA, read only by this warpgroup's retired wgmma), lse = ln2 (m c2 + log2 l)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = lrow[r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int row = 64 * wg + 16 * w + g + 8 * r;  // inside the tile
#pragma unroll
            for (int j = 0; j < D / 8; j++)
                *reinterpret_cast<uint32_t *>(Qs + wgm::sw128<BQ>(row, 8 * j + 2 * t4)) =
                    gdnk::pack_bf16(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
            const int i = q0 + row;
            if (t4 == 0 && i < T) p.lse[((size_t)b * H + h) * T + i] = ATTN_LN2 * (mrow[r] * c2 + log2f(l));
        }
        // the 128 threads of this consumer warpgroup only (named barrier 1 + wg)
        wgm::wg_store_rows<D, 1>(wg, tid, q0, T, [&](int row, int ch, int i) {
            *reinterpret_cast<uint4 *>(p.o + (((size_t)b * T + i) * H + h) * D + ch * 8) =
                *reinterpret_cast<const uint4 *>(Qs + wgm::sw128<BQ>(row, ch * 8));
        });
    }
    wgm::mbar_watchdog_check(wd_failed);  // outside the setmaxnreg regions (wgmma.cuh)
#else
    __trap();  // launched only where the sm_90a image exists (attn_wgmma_runs checks)
#endif
}

// fp32: one warp per query row (b, i, h); 4 warps per block.
template <int D>
__global__ void __launch_bounds__(128) attention_fwd_f32_kernel(int B, int T, int H, int W, float scale,
                                                                const float *__restrict__ q,
                                                                const float *__restrict__ k,
                                                                const float *__restrict__ v,
                                                                float *__restrict__ o,
                                                                float *__restrict__ lse,
                                                                const int32_t *__restrict__ doc) {
    __shared__ float qs[4][D];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long row = (long)blockIdx.x * 4 + warp;  // (b*T + i)*H + h
    if (row >= (long)B * T * H) return;
    const int h = (int)(row % H), i = (int)((row / H) % T), b = (int)(row / ((long)H * T));
    const size_t rs = (size_t)H * D;
    const float *qi = q + (size_t)row * D;
    for (int e = lane; e < D; e += 32) qs[warp][e] = qi[e];
    __syncwarp();
    const float *kb = k + (size_t)b * T * rs + (size_t)h * D;
    const float *vb = v + (size_t)b * T * rs + (size_t)h * D;
    float acc[D / 32];
#pragma unroll
    for (int r = 0; r < D / 32; r++) acc[r] = 0.f;
    float mrun = -INFINITY, l = 0.f;
    const int jlo = max(max(0, i - W + 1), doc ? doc[(size_t)b * T + i] : 0);  // keys jlo .. i
    for (int j0 = jlo; j0 <= i; j0 += 32) {
        const int j = j0 + lane;
        float s = -INFINITY;
        if (j <= i) {
            const float4 *kr = reinterpret_cast<const float4 *>(kb + (size_t)j * rs);
            float d = 0.f;
#pragma unroll 8
            for (int e = 0; e < D / 4; e++) {
                const float4 kv = kr[e];
                d += qs[warp][4 * e] * kv.x + qs[warp][4 * e + 1] * kv.y + qs[warp][4 * e + 2] * kv.z +
                     qs[warp][4 * e + 3] * kv.w;
            }
            s = d * scale;
        }
        float mx = s;
#pragma unroll
        for (int o2 = 16; o2; o2 >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
        const float m_new = fmaxf(mrun, mx);  // finite: key j0 <= i is always visible
        const float corr = expf(mrun - m_new);
        const float pj = j <= i ? expf(s - m_new) : 0.f;
        float ps = pj;
#pragma unroll
        for (int o2 = 16; o2; o2 >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o2);
        l = l * corr + ps;
        mrun = m_new;
#pragma unroll
        for (int r = 0; r < D / 32; r++) acc[r] *= corr;
        const int nj = min(32, i - j0 + 1);
        for (int jj = 0; jj < nj; jj++) {
            const float pb = __shfl_sync(0xffffffffu, pj, jj);
            const float *vr = vb + (size_t)(j0 + jj) * rs;
#pragma unroll
            for (int r = 0; r < D / 32; r++) acc[r] += pb * vr[lane + 32 * r];
        }
    }
    float *oi = o + (size_t)row * D;
#pragma unroll
    for (int r = 0; r < D / 32; r++) oi[lane + 32 * r] = acc[r] / l;
    if (lane == 0) lse[((size_t)b * H + h) * T + i] = mrun + logf(l);
}

fwd_kparams fwd_make_kparams(const attn_params *p, int W) {
    fwd_kparams kp;
    kp.B = p->B; kp.T = p->T; kp.H = p->H; kp.window = W;
    kp.scale_log2 = p->scale * ATTN_LOG2E;
    kp.q = static_cast<const __nv_bfloat16 *>(p->q);
    kp.k = static_cast<const __nv_bfloat16 *>(p->k);
    kp.v = static_cast<const __nv_bfloat16 *>(p->v);
    kp.o = static_cast<__nv_bfloat16 *>(p->o);
    kp.lse = p->lse;
    kp.doc = p->doc_start;
    return kp;
}

// One launch of a bf16 forward kernel: a CTA of `threads` per BQ query rows of one (b, h),
// grid (ceil(T / BQ), H, B), `smem` bytes of dynamic shared memory.
void fwd_launch(void (*kernel)(const fwd_kparams), int smem, int bq, int threads, const attn_params *p, int W) {
    const fwd_kparams kp = fwd_make_kparams(p, W);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    dim3 grid(GDN_CDIV(p->T, bq), p->H, p->B);
    kernel<<<grid, threads, smem, p->stream>>>(kp);
    CUDA_CHECK_LAUNCH();
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda); NULL with *why set
// when it cannot be had (asked once; concurrent first calls store the same values). A failed
// query is cleared from the runtime's last error, so that the next launch check does not see it.
PFN_cuTensorMapEncodeTiled_v12000 tma_encoder(const char **why) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    static const char *reason = nullptr;
    static int asked = 0;
    if (!asked) {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        const cudaError_t rc =
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
#else
        const cudaError_t rc = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q);
#endif
        if (rc != cudaSuccess) {
            reason = cudaGetErrorString(rc);
            (void)cudaGetLastError();
        } else if (q != cudaDriverEntryPointSuccess || !f) {
            reason = "the driver does not export cuTensorMapEncodeTiled (version 12000)";
        } else {
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
        }
        asked = 1;
    }
    *why = reason;
    return fn;
}

// Tensor map of a (B,T,H,D) bf16 tensor as 4-D (D, H, T, B) (dimension 0 innermost), box 64
// columns x 1 head x `rows` rows x 1 batch, 128-byte swizzle (one wgmma panel per box), rows >= T
// out of range (zero-filled). Returns NULL on success, else why the map cannot be encoded.
const char *tma_encode(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap *map, const void *x, const attn_params *p,
                       int rows) {
    const cuuint64_t es = 2;
    const cuuint64_t dims[4] = {(cuuint64_t)p->D, (cuuint64_t)p->H, (cuuint64_t)p->T, (cuuint64_t)p->B};
    // byte strides of dimensions 1..3: multiples of 16 and < 2^40 (cuTensorMapEncodeTiled)
    const cuuint64_t strides[3] = {dims[0] * es, dims[0] * dims[1] * es, dims[0] * dims[1] * dims[2] * es};
    for (cuuint64_t st : strides)
        if (st % 16 || st >= (1ull << 40)) return "a row pitch is not a multiple of 16 bytes or exceeds 2^40";
    if ((uintptr_t)x % 16) return "a tensor is not 16-byte aligned";
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1}, estr[4] = {1, 1, 1, 1};
    const CUresult rc = enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void *>(x), dims, strides, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc == CUDA_SUCCESS) return nullptr;
    static char msg[64];  // host, the caller prints it at once
    snprintf(msg, sizeof msg, "cuTensorMapEncodeTiled returned CUresult %d", (int)rc);
    return msg;
}

// attention_fwd_wgmma_kernel launches so far (attention_fwd_wgmma_launches, attention_testing.h:
// test_attention checks that every bf16 forward on the wgmma path really ran it and did not fall
// back to the mma.sync kernel)
unsigned long fwd_wgmma_launches = 0;

// Launches attention_fwd_wgmma_kernel<D>; returns 0 (nothing launched, the reason printed once to
// stderr) when the tensor maps cannot be made or the registers do not allow setmaxnreg, so that
// the caller runs the mma.sync kernel (attention_fwd_kernel) instead.
template <int D, bool DOC>
int attention_fwd_launch_wgmma(const attn_params *p, int W) {
    static int warned = 0;
    // setmaxnreg moves registers inside the CTA's launch allocation: the consumers' setmaxnreg.inc
    // (256 x 240) can only be served if ptxas gave the kernel >= 168 registers a thread (384 x 168
    // = 128 x 24 + 256 x 240); with fewer it would block forever. ptxas reports 168 (launch bound);
    // checked once per instance, a fallback instead of a hang if a compiler ever differs.
    static int regs_ok = -1;
    if (regs_ok < 0) {
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncGetAttributes(&fa, attention_fwd_wgmma_kernel<D, DOC>));
        regs_ok = fa.numRegs * WG_THREADS >= 128 * WG_PRODUCER_REGS + 256 * WG_CONSUMER_REGS;
    }
    const char *why = regs_ok ? nullptr : "the kernel has fewer than 168 registers a thread: setmaxnreg.inc would hang";
    CUtensorMap mq, mk, mv;
    PFN_cuTensorMapEncodeTiled_v12000 enc = why ? nullptr : tma_encoder(&why);
    if (!why) why = tma_encode(enc, &mq, p->q, p, WG_BK);
    if (!why) why = tma_encode(enc, &mk, p->k, p, WG_BK);
    if (!why) why = tma_encode(enc, &mv, p->v, p, WG_BK);
    if (why) {
        if (!warned) {
            fprintf(stderr, "attention_fwd: attention_fwd_wgmma_kernel cannot run (%s; B %d T %d H %d D %d): "
                            "running the mma.sync kernel attention_fwd_kernel\n", why, p->B, p->T, p->H, p->D);
            warned = 1;
        }
        return 0;
    }
    const fwd_kparams kp = fwd_make_kparams(p, W);
    constexpr int smem = fwd_wgmma_smem_bytes<D>();
    CUDA_CHECK(cudaFuncSetAttribute(attention_fwd_wgmma_kernel<D, DOC>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    dim3 grid(GDN_CDIV(p->T, WG_BQ), p->H, p->B);
    attention_fwd_wgmma_kernel<D, DOC><<<grid, WG_THREADS, smem, p->stream>>>(kp, mq, mk, mv);
    CUDA_CHECK_LAUNCH();
    fwd_wgmma_launches++;  // plain counter (diagnostics; the test calls attention_fwd from one thread)
    return 1;
}

// The bf16 forward: on the wgmma path attention_fwd_wgmma_kernel, else (or where it cannot run)
// the mma.sync kernel; the DOC instances where p has document starts.
template <int D, bool DOC>
void attention_fwd_launch_bf16(const attn_params *p, int W, bool wgmma) {
    if (wgmma && attention_fwd_launch_wgmma<D, DOC>(p, W)) return;
    fwd_launch(attention_fwd_kernel<D, DOC>, fwd_smem_bytes<D>(), FWD_BQ, FWD_THREADS, p, W);
}
template <int D>
void attention_fwd_launch_bf16(const attn_params *p, int W, bool wgmma) {
    if (p->doc_start) attention_fwd_launch_bf16<D, true>(p, W, wgmma);
    else attention_fwd_launch_bf16<D, false>(p, W, wgmma);
}

template <int D>
void attention_fwd_launch_f32(const attn_params *p, int W) {
    const long rows = (long)p->B * p->T * p->H;
    attention_fwd_f32_kernel<D><<<(unsigned)GDN_CDIV(rows, 4), 128, 0, p->stream>>>(
        p->B, p->T, p->H, W, p->scale, static_cast<const float *>(p->q), static_cast<const float *>(p->k),
        static_cast<const float *>(p->v), static_cast<float *>(p->o), p->lse, p->doc_start);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

const char *attn_tma_map_bf16(CUtensorMap *map, const void *x, const attn_params *p, int rows) {
    const char *why = nullptr;
    PFN_cuTensorMapEncodeTiled_v12000 enc = tma_encoder(&why);
    return why ? why : tma_encode(enc, map, x, p, rows);
}

extern "C" void attention_fwd(const attn_params *p) {
    attn_check_common(p, "attention_fwd");
    attn_check_ptr(p->q, "q", "attention_fwd");
    attn_check_ptr(p->k, "k", "attention_fwd");
    attn_check_ptr(p->v, "v", "attention_fwd");
    attn_check_ptr(p->o, "o", "attention_fwd");
    attn_check_ptr(p->lse, "lse", "attention_fwd");
    if (p->H > 65535 || p->B > 65535) gdn_die("attention_fwd: B %d / H %d exceed the grid", p->B, p->H);
    const int W = p->window < p->T ? p->window : p->T;
    if (p->dtype == ATTN_DTYPE_FP32) {
        p->D == 64 ? attention_fwd_launch_f32<64>(p, W) : attention_fwd_launch_f32<128>(p, W);
    } else {
        static int image = -1;
        const bool wgmma = attn_wgmma_runs(p, attention_fwd_wgmma_kernel<128, false>, &image);
        p->D == 64 ? attention_fwd_launch_bf16<64>(p, W, wgmma) : attention_fwd_launch_bf16<128>(p, W, wgmma);
    }
}

extern "C" unsigned long attention_fwd_wgmma_launches(void) { return fwd_wgmma_launches; }

extern "C" int attention_fwd_wgmma_available(void) {
    static int image = -1;
    return cuda_sm90a_image_runs(attention_fwd_wgmma_kernel<128, false>, &image);
}
