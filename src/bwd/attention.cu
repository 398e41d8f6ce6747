// attention.cu — backward of causal sliding-window softmax attention (see
// src/fwd/attention_cuda.h; the CPU twin is attention_bwd_cpu). Deterministic by default (no
// atomics); opt-in (attn_params.nondeterministic, bf16) dq by fp32 atomics in one pass.
//   p_ij  = exp(scale q_i.k_j - lse_i)      recomputed from the forward's lse
//   D_i   = dO_i . o_i                      (pass 0, fp32, into the workspace)
//   ds_ij = p_ij (dO_i.v_j - D_i)
//   dv_j  = sum_i p_ij dO_i,  dk_j = scale sum_i ds_ij q_i       (pass 1: one CTA per key block)
//   dq_i  = scale sum_j ds_ij k_j                                 (pass 2: one CTA per query block)
// Pass 1 (bf16): 8 warps own BKV = 128 keys (16 each), hold dK, dV in registers and walk the
// query blocks of BQ = 64 that see those keys (k0 <= i <= k0 + 127 + window - 1); it computes
// S^T = K Q^T and dP^T = V dO^T, so P^T and dS^T come out in the A-fragment layout of
// dV += P^T dO and dK += dS^T Q. Q, dO, lse, D are double-buffered with cp.async.
// Pass 2 (bf16): 8 warps own BQ = 128 query rows (16 each) and walk the key blocks of BK = 64
// in the window, recomputing S and dP, dQ += dS K. The price of determinism is S and dP
// computed twice: 7 matrix products per tile instead of flash-attention 2's 5 with dq atomics.
// Measured alternative (bench/attention.md): dQ fused into pass 1 with an ordered fp32
// accumulation (semaphore per query block, key blocks in a fixed order) was correct and
// deterministic but slower (10.5 vs 7.5 ms at B8 T4096 H16 D128): with one CTA per SM the
// read-modify-write, fence and semaphore latency of every tile stall all warps.
// Non-deterministic mode (nondeterministic = 1, bf16; flash-attention 2's scheme): pass 1 is
// instantiated with DQA = true. Each warp also stores its dS^T (16 keys x BQ, bf16, the A
// fragments of dK += dS^T Q) into a shared tile dSs [key][query]; after a barrier the 8 warps
// compute dQ_tile = dS K (BQ x D: warp w owns query rows (w%4)*16.., columns (w/4)*D/2..,
// A = dS read by transposed ldmatrix from dSs, B = K by transposed ldmatrix from Ks) and add it
// to an fp32 (B,T,H,D) accumulator in the workspace with red.global.add (rows < T only); the
// order of the additions across CTAs varies, so dq is not bitwise reproducible (dk, dv are).
// A last small kernel writes dq = bf16(scale * acc). 5 matrix products per tile instead of 7,
// no pass 2. The accumulator is zeroed by cudaMemsetAsync first.
// bf16 on sm_90a (the default there; attn_params.kernels = ATTN_KERNELS_MMA_SYNC keeps the
// kernels above): the same passes and modes on wgmma.mma_async, each CTA two consumer warpgroups
// fed by a TMA producer warpgroup over 2 stages, flash-attention 3's warp specialisation
// (attention_bwd_dkdv_wgmma_kernel, attention_bwd_dq_wgmma_kernel). A pass whose wgmma kernel
// cannot run (no tensor map, too few registers for setmaxnreg) runs its mma.sync kernel above.
// fp32: the same passes with one warp per row and plain fp32 FMA (slower; for checks).
// Document starts (attn_params.doc_start; the bf16 kernels' DOC instances): p_ij = 0 for j < s_i
// as well. dQ pass: the forward's walk (lower end max(q0 - W + 1, s_q0), straddle where a block
// begins before the tile's last start). dK/dV pass: the query tiles that see key block [k0, kl]
// are those whose first row's start is <= kl (starts are non-decreasing: a prefix of the tiles
// the window allows, counted by one __syncthreads_count per 256 / 384 tiles before the walk); a
// tile straddles where k0 is before its last row's start, and the starts of its rows sit in
// shared memory next to lse and D.
#include "../core/cuda_check.h"
#include "../cuda/attention.cuh"
#include "../fwd/attention_testing.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int KV_BK = 128, KV_BQ = 64, KV_WARPS = 8, KV_THREADS = KV_WARPS * 32;
constexpr int DQ_BQ = 128, DQ_BK = 64, DQ_WARPS = 8, DQ_THREADS = DQ_WARPS * 32;

struct bwd_kparams {
    int B, T, H, window;  // window clamped to <= T
    float scale, scale_log2;
    const __nv_bfloat16 *q, *k, *v, *dO;
    const float *lse, *Dd;  // (B,H,T): forward lse (natural log), D_i = dO_i . o_i
    __nv_bfloat16 *dq, *dk, *dv;
    float *dqacc;  // (B,T,H,D) fp32, zeroed; nondeterministic mode only (pass 1 with DQA)
    const int32_t *doc;  // NULL, or (B*T) document starts (DOC kernels)
};

// DOC: the start of query i's document (i clamped to the last row: rows past T get p = 0).
__device__ __forceinline__ int attn_doc_start(const int32_t *doc, int b, int T, int i) {
    return doc[(size_t)b * T + min(i, T - 1)];
}
// DOC, dK/dV passes: the last query tile (of BQ rows, tiles m_lo .. m_hi) that sees a key <= kl,
// i.e. the last whose first row's document starts at or before kl (a prefix of the tiles, m_lo's
// always: its first row is <= k0 <= kl). All NT threads of the block call it (a barrier each
// NT tiles).
template <int NT>
__device__ __forceinline__ int attn_doc_last_tile(const int32_t *doc, int b, int T, int BQ, int m_lo, int m_hi, int kl) {
    const int32_t *dr = doc + (size_t)b * T;
    int n = 0;
    for (int m0 = m_lo; m0 <= m_hi; m0 += NT) {
        const int m = m0 + (int)threadIdx.x;
        n += __syncthreads_count(m <= m_hi && dr[(size_t)m * BQ] <= kl);
    }
    return m_lo + n - 1;
}

// K, V, 2x(Q, dO), 2x(lse, D); with DQA also dS^T (BKV, BQ) bf16; with DOC 2x the rows' starts
template <int D, bool DQA, bool DOC = false>
constexpr int kv_smem_bytes() {
    return (2 * KV_BK * D + 4 * KV_BQ * D) * 2 + 4 * KV_BQ * 4 + (DQA ? KV_BK * KV_BQ * 2 : 0) + (DOC ? 2 * KV_BQ * 4 : 0);
}
template <int D>
constexpr int dq_smem_bytes() {
    return (2 * DQ_BQ * D + 4 * DQ_BK * D) * 2;  // Q, dO, 2x(K, V)
}

// ---- pass 0: D_i = dO_i . o_i (one warp per (b, i, h) row) --------------------------------
template <typename E>
__device__ __forceinline__ float attn_to_f(E x);
template <>
__device__ __forceinline__ float attn_to_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ float attn_to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename E>
__global__ void __launch_bounds__(256) attention_bwd_dot_kernel(int B, int T, int H, int D, const E *__restrict__ dO,
                                                                const E *__restrict__ o, float *__restrict__ Dd) {
    const int lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * 8 + (threadIdx.x >> 5);  // (b*T + i)*H + h
    if (row >= (long)B * T * H) return;
    const int h = (int)(row % H), i = (int)((row / H) % T), b = (int)(row / ((long)H * T));
    float s = 0.f;
    for (int e = lane; e < D; e += 32) s += attn_to_f(dO[(size_t)row * D + e]) * attn_to_f(o[(size_t)row * D + e]);
#pragma unroll
    for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) Dd[((size_t)b * H + h) * T + i] = s;
}

// lse (natural) and D of query rows [q0, q0 + n) into shared memory; rows >= T get lse = +inf
// (so p = 0) and D = 0.
__device__ __forceinline__ void attn_load_rowstats(float *lse2s, float *Ds, const float *lse, const float *Dd,
                                                   size_t base, int q0, int n, int T, int tid) {
    if (tid < n) {
        const int i = q0 + tid;
        lse2s[tid] = i < T ? lse[base + i] * ATTN_LOG2E : INFINITY;
        Ds[tid] = i < T ? Dd[base + i] : 0.f;
    }
}

// a[0] += x0, a[1] += x1 in global memory, no return value (RED); a 8-byte aligned.
// sm_90: one vector reduction for the pair.
__device__ __forceinline__ void attn_red_add2(float *a, float x0, float x1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(a), "f"(x0), "f"(x1) : "memory");
#else
    atomicAdd(a, x0);
    atomicAdd(a + 1, x1);
#endif
}

// ---- pass 1 (bf16): dK, dV of one key block; grid (ceil(T/BKV), H, B), heaviest (first) first.
// DQA (nondeterministic mode): also dq += scale dS K into p.dqacc by atomics (see the top).
template <int D, bool DQA, bool DOC>
__global__ void __launch_bounds__(KV_THREADS, 1) attention_bwd_dkdv_kernel(const __grid_constant__ bwd_kparams p) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16 *Ks = reinterpret_cast<__nv_bfloat16 *>(smem_raw);  // (BKV, D)
    __nv_bfloat16 *Vs = Ks + KV_BK * D;                                // (BKV, D)
    __nv_bfloat16 *Qs = Vs + KV_BK * D;                                // 2 x (BQ, D)
    __nv_bfloat16 *dOs = Qs + 2 * KV_BQ * D;                           // 2 x (BQ, D)
    float *lse2s = reinterpret_cast<float *>(dOs + 2 * KV_BQ * D);     // 2 x BQ (log2 domain)
    float *Dss = lse2s + 2 * KV_BQ;                                    // 2 x BQ
    // DQA only: dS^T (BKV keys, BQ queries), rows swizzled as attn_swz<BQ>
    __nv_bfloat16 *dSs = reinterpret_cast<__nv_bfloat16 *>(Dss + 2 * KV_BQ);
    // DOC only: 2 x BQ document starts of the query rows (rows >= T: T, masking every key)
    int *Sds = reinterpret_cast<int *>(smem_raw + kv_smem_bytes<D, DQA>());

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, W = p.window;
    const int k0 = n * KV_BK;
    // query rows that see some key of [k0, k0 + BKV): k0 <= i <= k0 + BKV - 1 + W - 1
    const int i_hi = min(T - 1, k0 + KV_BK - 2 + W);
    const int m_lo = k0 / KV_BQ;
    int m_hi = i_hi / KV_BQ;
    if constexpr (DOC) m_hi = attn_doc_last_tile<KV_THREADS>(p.doc, b, T, KV_BQ, m_lo, m_hi, min(k0 + KV_BK - 1, T - 1));
    const size_t sbase = ((size_t)b * H + h) * T;
    auto load_starts = [&](int *dst, int q0) {
        if (DOC && tid < KV_BQ) dst[tid] = q0 + tid < T ? p.doc[(size_t)b * T + q0 + tid] : T;
    };

    attn_load_tile<KV_BK, D, KV_THREADS>(Ks, p.k, b, h, k0, T, H, tid);
    attn_load_tile<KV_BK, D, KV_THREADS>(Vs, p.v, b, h, k0, T, H, tid);
    attn_load_tile<KV_BQ, D, KV_THREADS>(Qs, p.q, b, h, m_lo * KV_BQ, T, H, tid);
    attn_load_tile<KV_BQ, D, KV_THREADS>(dOs, p.dO, b, h, m_lo * KV_BQ, T, H, tid);
    cp_async_commit();
    attn_load_rowstats(lse2s, Dss, p.lse, p.Dd, sbase, m_lo * KV_BQ, KV_BQ, T, tid);
    load_starts(Sds, m_lo * KV_BQ);

    float dk[D / 8][4], dv[D / 8][4];  // rows (g, g+8) of this warp's 16 keys, cols dt*8 + 2t
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[dt][e] = dv[dt][e] = 0.f;

    const int wrow0 = warp * 16;
    const uint32_t ks_base = gdnk::smem_u32(Ks), vs_base = gdnk::smem_u32(Vs), ds_base = gdnk::smem_u32(dSs);

    for (int m = m_lo, it = 0; m <= m_hi; m++, it++) {
        cp_async_wait<0>();
        __syncthreads();  // tile m visible; every warp is done with buffer (it+1)&1
        if (m < m_hi) {
            const int nb = (it + 1) & 1;
            attn_load_tile<KV_BQ, D, KV_THREADS>(Qs + nb * KV_BQ * D, p.q, b, h, (m + 1) * KV_BQ, T, H, tid);
            attn_load_tile<KV_BQ, D, KV_THREADS>(dOs + nb * KV_BQ * D, p.dO, b, h, (m + 1) * KV_BQ, T, H, tid);
            cp_async_commit();
            attn_load_rowstats(lse2s + nb * KV_BQ, Dss + nb * KV_BQ, p.lse, p.Dd, sbase, (m + 1) * KV_BQ, KV_BQ, T, tid);
            load_starts(Sds + nb * KV_BQ, (m + 1) * KV_BQ);
        }
        const int cb = it & 1;
        const uint32_t qs_base = gdnk::smem_u32(Qs + cb * KV_BQ * D), dos_base = gdnk::smem_u32(dOs + cb * KV_BQ * D);
        const float *l2 = lse2s + cb * KV_BQ, *Dv = Dss + cb * KV_BQ;
        const int *Sq = Sds + cb * KV_BQ;
        const int q0 = m * KV_BQ;

        // S^T = K Q^T, dP^T = V dO^T : (16 keys x BQ queries) per warp
        float st[KV_BQ / 8][4], dpt[KV_BQ / 8][4];
#pragma unroll
        for (int nt = 0; nt < KV_BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[nt][e] = dpt[nt][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t ak[4], av[4];
            const int ar = wrow0 + (lane & 15), ac = kk * 16 + (lane >> 4) * 8;
            gdnk::ldsm4(ak, ks_base + 2 * attn_swz<D>(ar, ac));
            gdnk::ldsm4(av, vs_base + 2 * attn_swz<D>(ar, ac));
#pragma unroll
            for (int np = 0; np < KV_BQ / 16; np++) {
                const int br = np * 16 + (lane & 7) + ((lane >> 4) << 3), bc = kk * 16 + ((lane >> 3) & 1) * 8;
                uint32_t bq[4], bo[4];
                gdnk::ldsm4(bq, qs_base + 2 * attn_swz<D>(br, bc));
                gdnk::ldsm4(bo, dos_base + 2 * attn_swz<D>(br, bc));
                attn_mma(st[2 * np], ak, bq[0], bq[1]);
                attn_mma(st[2 * np + 1], ak, bq[2], bq[3]);
                attn_mma(dpt[2 * np], av, bo[0], bo[1]);
                attn_mma(dpt[2 * np + 1], av, bo[2], bo[3]);
            }
        }

        // P^T = 2^(s scale log2e - lse2), dS^T = P^T (dP^T - D); masked entries 0
        const bool need_mask = (k0 + KV_BK - 1 > q0) || (k0 <= q0 + KV_BQ - 1 - W) || (DOC && k0 < Sq[KV_BQ - 1]);
#pragma unroll
        for (int nt = 0; nt < KV_BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = nt * 8 + 2 * t4 + (e & 1);
                float pv = attn_ex2(fmaf(st[nt][e], p.scale_log2, -l2[c]));
                if (need_mask) {
                    const int j = k0 + wrow0 + g + ((e >> 1) << 3), i = q0 + c;
                    if (j > i || j <= i - W || (DOC && j < Sq[c])) pv = 0.f;
                }
                st[nt][e] = pv;
                dpt[nt][e] = pv * (dpt[nt][e] - Dv[c]);
            }

        // dV += P^T dO, dK += dS^T Q (B operands: row-major [query][d] tiles, transposed ldmatrix)
#pragma unroll
        for (int kk = 0; kk < KV_BQ / 16; kk++) {
            uint32_t ap[4], as[4];
            ap[0] = gdnk::pack_bf16(st[2 * kk][0], st[2 * kk][1]);
            ap[1] = gdnk::pack_bf16(st[2 * kk][2], st[2 * kk][3]);
            ap[2] = gdnk::pack_bf16(st[2 * kk + 1][0], st[2 * kk + 1][1]);
            ap[3] = gdnk::pack_bf16(st[2 * kk + 1][2], st[2 * kk + 1][3]);
            as[0] = gdnk::pack_bf16(dpt[2 * kk][0], dpt[2 * kk][1]);
            as[1] = gdnk::pack_bf16(dpt[2 * kk][2], dpt[2 * kk][3]);
            as[2] = gdnk::pack_bf16(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
            as[3] = gdnk::pack_bf16(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
            if constexpr (DQA) {
                // as[] = dS^T (key wrow0 + g (+8), query kk*16 + 2t (+8) .. +1): store as-is.
                // Previous readers of dSs passed this iteration's top barrier.
                const int kr = wrow0 + g, qc = kk * 16 + 2 * t4;
                *reinterpret_cast<uint32_t *>(dSs + attn_swz<KV_BQ>(kr, qc)) = as[0];
                *reinterpret_cast<uint32_t *>(dSs + attn_swz<KV_BQ>(kr + 8, qc)) = as[1];
                *reinterpret_cast<uint32_t *>(dSs + attn_swz<KV_BQ>(kr, qc + 8)) = as[2];
                *reinterpret_cast<uint32_t *>(dSs + attn_swz<KV_BQ>(kr + 8, qc + 8)) = as[3];
            }
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                const int br = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, bc = dp * 16 + (lane >> 4) * 8;
                uint32_t bo[4], bq[4];
                gdnk::ldsm4t(bo, dos_base + 2 * attn_swz<D>(br, bc));
                attn_mma(dv[2 * dp], ap, bo[0], bo[1]);
                attn_mma(dv[2 * dp + 1], ap, bo[2], bo[3]);
                gdnk::ldsm4t(bq, qs_base + 2 * attn_swz<D>(br, bc));
                attn_mma(dk[2 * dp], as, bq[0], bq[1]);
                attn_mma(dk[2 * dp + 1], as, bq[2], bq[3]);
            }
        }

        if constexpr (DQA) {
            // dQ_tile (BQ x D) = dS (BQ x BKV) K (BKV x D); warp: rows mr0.., columns nc0..+D/2
            __syncthreads();  // every warp's dS^T in dSs
            const int mr0 = (warp & 3) * 16, nc0 = (warp >> 2) * (D / 2);
            float acc[D / 16][4];
#pragma unroll
            for (int nt = 0; nt < D / 16; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[nt][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KV_BK / 16; kk++) {
                // A (queries mr0..+15, keys kk*16..+15) from [key][query] storage: matrices
                // (q 0-7, k 0-7), (q 8-15, k 0-7), (q 0-7, k 8-15), (q 8-15, k 8-15)
                uint32_t a[4];
                gdnk::ldsm4t(a, ds_base + 2 * attn_swz<KV_BQ>(kk * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                                mr0 + ((lane >> 3) & 1) * 8));
#pragma unroll
                for (int dp = 0; dp < D / 32; dp++) {
                    uint32_t bk[4];
                    gdnk::ldsm4t(bk, ks_base + 2 * attn_swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                                nc0 + dp * 16 + (lane >> 4) * 8));
                    attn_mma(acc[2 * dp], a, bk[0], bk[1]);
                    attn_mma(acc[2 * dp + 1], a, bk[2], bk[3]);
                }
            }
            // acc[nt]: rows mr0 + g (+8), columns nc0 + nt*8 + 2t, +1; rows >= T skipped (their
            // dS is 0, and the accumulator has only T rows per batch)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int i = q0 + mr0 + g + 8 * r;
                if (i < T) {
                    float *dst = p.dqacc + (((size_t)b * T + i) * H + h) * D + nc0 + 2 * t4;
#pragma unroll
                    for (int nt = 0; nt < D / 16; nt++) attn_red_add2(dst + nt * 8, acc[nt][2 * r], acc[nt][2 * r + 1]);
                }
            }
        }
    }

    // epilogue: stage dK (x scale) in this warp's K rows, dV in its V rows, 16-byte stores
    if constexpr (DQA) __syncthreads();  // the dQ product of the last tile read every warp's K rows
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wrow0 + g + r * 8;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            const int off = attn_swz<D>(row, dt * 8 + 2 * t4);
            *reinterpret_cast<uint32_t *>(Ks + off) = gdnk::pack_bf16(dk[dt][2 * r] * p.scale, dk[dt][2 * r + 1] * p.scale);
            *reinterpret_cast<uint32_t *>(Vs + off) = gdnk::pack_bf16(dv[dt][2 * r], dv[dt][2 * r + 1]);
        }
    }
    __syncwarp();
    constexpr int CPR = D / 8;
#pragma unroll
    for (int c = lane; c < 16 * CPR; c += 32) {
        const int row = wrow0 + c / CPR, ch = c % CPR, j = k0 + row;
        if (j < T) {
            const size_t go = (((size_t)b * T + j) * H + h) * D + ch * 8;
            *reinterpret_cast<uint4 *>(p.dk + go) = *reinterpret_cast<const uint4 *>(Ks + attn_swz<D>(row, ch * 8));
            *reinterpret_cast<uint4 *>(p.dv + go) = *reinterpret_cast<const uint4 *>(Vs + attn_swz<D>(row, ch * 8));
        }
    }
}

// ---- pass 2 (bf16): dQ of one query block; grid (ceil(T/BQ), H, B), heaviest first ----------
template <int D, bool DOC>
__global__ void __launch_bounds__(DQ_THREADS, 1) attention_bwd_dq_kernel(const __grid_constant__ bwd_kparams p) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem_raw);  // (BQ, D)
    __nv_bfloat16 *dOs = Qs + DQ_BQ * D;                               // (BQ, D)
    __nv_bfloat16 *Ks = dOs + DQ_BQ * D;                               // 2 x (BK, D)
    __nv_bfloat16 *Vs = Ks + 2 * DQ_BK * D;                            // 2 x (BK, D)

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int m = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, W = p.window;
    const int q0 = m * DQ_BQ;
    const int j_hi = min(T - 1, q0 + DQ_BQ - 1);
    const int j_lo = max(max(0, q0 - W + 1), DOC ? attn_doc_start(p.doc, b, T, q0) : 0);
    const int n_hi = j_hi / DQ_BK, n_lo = j_lo / DQ_BK;
    const int wrow0 = warp * 16;
    // DOC: the tile's largest document start, this thread's rows' starts
    const int s_hi = DOC ? attn_doc_start(p.doc, b, T, q0 + DQ_BQ - 1) : 0;
    const int lo[2] = {DOC ? attn_doc_start(p.doc, b, T, q0 + wrow0 + g) : 0,
                       DOC ? attn_doc_start(p.doc, b, T, q0 + wrow0 + g + 8) : 0};

    attn_load_tile<DQ_BQ, D, DQ_THREADS>(Qs, p.q, b, h, q0, T, H, tid);
    attn_load_tile<DQ_BQ, D, DQ_THREADS>(dOs, p.dO, b, h, q0, T, H, tid);
    attn_load_tile<DQ_BK, D, DQ_THREADS>(Ks, p.k, b, h, n_hi * DQ_BK, T, H, tid);
    attn_load_tile<DQ_BK, D, DQ_THREADS>(Vs, p.v, b, h, n_hi * DQ_BK, T, H, tid);
    cp_async_commit();

    float lse2[2], Drow[2];  // rows g, g+8 of this warp
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = q0 + wrow0 + g + 8 * r;
        const size_t si = ((size_t)b * H + h) * T + i;
        lse2[r] = i < T ? p.lse[si] * ATTN_LOG2E : INFINITY;
        Drow[r] = i < T ? p.Dd[si] : 0.f;
    }
    float acc[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[dt][e] = 0.f;
    const uint32_t qs_base = gdnk::smem_u32(Qs), dos_base = gdnk::smem_u32(dOs);

    for (int n = n_hi, it = 0; n >= n_lo; n--, it++) {
        cp_async_wait<0>();
        __syncthreads();
        if (n > n_lo) {
            const int nb = (it + 1) & 1;
            attn_load_tile<DQ_BK, D, DQ_THREADS>(Ks + nb * DQ_BK * D, p.k, b, h, (n - 1) * DQ_BK, T, H, tid);
            attn_load_tile<DQ_BK, D, DQ_THREADS>(Vs + nb * DQ_BK * D, p.v, b, h, (n - 1) * DQ_BK, T, H, tid);
            cp_async_commit();
        }
        const uint32_t ks_base = gdnk::smem_u32(Ks + (it & 1) * DQ_BK * D), vs_base = gdnk::smem_u32(Vs + (it & 1) * DQ_BK * D);
        const int k0 = n * DQ_BK;

        // S = Q K^T, dP = dO V^T : (16 rows x BK keys) per warp
        float s[DQ_BK / 8][4], dp[DQ_BK / 8][4];
#pragma unroll
        for (int nt = 0; nt < DQ_BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] = dp[nt][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t aq[4], ao[4];
            const int ar = wrow0 + (lane & 15), ac = kk * 16 + (lane >> 4) * 8;
            gdnk::ldsm4(aq, qs_base + 2 * attn_swz<D>(ar, ac));
            gdnk::ldsm4(ao, dos_base + 2 * attn_swz<D>(ar, ac));
#pragma unroll
            for (int np = 0; np < DQ_BK / 16; np++) {
                const int br = np * 16 + (lane & 7) + ((lane >> 4) << 3), bc = kk * 16 + ((lane >> 3) & 1) * 8;
                uint32_t bk[4], bv[4];
                gdnk::ldsm4(bk, ks_base + 2 * attn_swz<D>(br, bc));
                gdnk::ldsm4(bv, vs_base + 2 * attn_swz<D>(br, bc));
                attn_mma(s[2 * np], aq, bk[0], bk[1]);
                attn_mma(s[2 * np + 1], aq, bk[2], bk[3]);
                attn_mma(dp[2 * np], ao, bv[0], bv[1]);
                attn_mma(dp[2 * np + 1], ao, bv[2], bv[3]);
            }
        }

        // dS = P (dP - D), P recomputed from lse; masked entries 0
        const bool need_mask = (k0 + DQ_BK - 1 > q0) || (k0 <= q0 + DQ_BQ - 1 - W) || (DOC && k0 < s_hi);
#pragma unroll
        for (int nt = 0; nt < DQ_BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                float pv = attn_ex2(fmaf(s[nt][e], p.scale_log2, -lse2[r]));
                if (need_mask) {
                    const int i = q0 + wrow0 + g + 8 * r, j = k0 + nt * 8 + 2 * t4 + (e & 1);
                    if (j > i || j <= i - W || (DOC && j < lo[r])) pv = 0.f;
                }
                dp[nt][e] = pv * (dp[nt][e] - Drow[r]);
            }

        // dQ += dS K (B operand: K tile [key][d], transposed ldmatrix)
#pragma unroll
        for (int kk = 0; kk < DQ_BK / 16; kk++) {
            uint32_t a[4];
            a[0] = gdnk::pack_bf16(dp[2 * kk][0], dp[2 * kk][1]);
            a[1] = gdnk::pack_bf16(dp[2 * kk][2], dp[2 * kk][3]);
            a[2] = gdnk::pack_bf16(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
            a[3] = gdnk::pack_bf16(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
            for (int dq = 0; dq < D / 16; dq++) {
                uint32_t bk[4];
                gdnk::ldsm4t(bk, ks_base + 2 * attn_swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                              dq * 16 + (lane >> 4) * 8));
                attn_mma(acc[2 * dq], a, bk[0], bk[1]);
                attn_mma(acc[2 * dq + 1], a, bk[2], bk[3]);
            }
        }
    }

    // epilogue: dq = scale * acc, staged in this warp's Q rows
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wrow0 + g + r * 8;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            *reinterpret_cast<uint32_t *>(Qs + attn_swz<D>(row, dt * 8 + 2 * t4)) =
                gdnk::pack_bf16(acc[dt][2 * r] * p.scale, acc[dt][2 * r + 1] * p.scale);
    }
    __syncwarp();
    constexpr int CPR = D / 8;
#pragma unroll
    for (int c = lane; c < 16 * CPR; c += 32) {
        const int row = wrow0 + c / CPR, ch = c % CPR, i = q0 + row;
        if (i < T)
            *reinterpret_cast<uint4 *>(p.dq + (((size_t)b * T + i) * H + h) * D + ch * 8) =
                *reinterpret_cast<const uint4 *>(Qs + attn_swz<D>(row, ch * 8));
    }
}

// ---- Hopper path (sm_90a; attn_wgmma_runs) --------------------------------------------------
// The same two passes (and the same one-pass nondeterministic variant) on wgmma.mma_async with the
// primitives of src/cuda/wgmma.cuh; operands in 128-byte-swizzled 64-column panels. A CTA's two
// consumer warpgroups (the producer below) compute:
// dK/dV pass: a CTA owns WKV_BK = 128 keys, warpgroup wg the 64 keys k0 + 64 wg ... Per query
// block of BQ (64 at D = 128, 128 at D = 64: the accumulators of S^T, dP^T (BQ / 2 registers
// each) and dK, dV (D / 2 each) then total 192 registers a thread for both head dims):
//   S^T = K Q^T, dP^T = V dO^T   A = the warpgroup's K / V rows, B = Q / dO K-major ([query][d]);
//                                 two wgmma groups: P^T is computed while dP^T is still in the
//                                 tensor cores
//   dV += P^T dO, dK += dS^T Q    A = P^T / dS^T from registers (the accumulator of S^T, dP^T
//                                 packed pairwise to bf16, as in the forward's P V), B = dO / Q
//                                 N-major (imm-trans-b: the same [query][d] tiles)
// With DQA (nondeterministic) each warpgroup also stores its dS^T transposed into a [query][key]
// tile dSs (the K-major A operand of dQ = dS K: wgmma reads A from shared memory only K-major
// here) and, after a barrier, computes a 64 x 64 quarter of dQ_tile (BQ x D) = dS K over all 128
// keys: at D = 128 the query rows 0-63 and the head-dim panel wg, at D = 64 the query rows
// 64 wg .. and all 64 columns (A = dSs, B = the K tile N-major), added to p.dqacc with
// red.global.add as in the mma.sync kernel.
// dQ pass: a CTA owns WDQ_BQ = 128 query rows, warpgroup wg 64 of them, and walks key blocks of
// WDQ_BK = 128 (the forward's shape): S = Q K^T, dP = dO V^T (both operands from shared memory,
// K / V K-major; two groups as above), dQ += dS K (dS from registers, K N-major).
constexpr int WKV_BK = 128, WDQ_BQ = 128, WDQ_BK = 128;

template <int D>
__host__ __device__ constexpr int wkv_bq() {
    return D == 128 ? 64 : 128;
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The 1024-aligned start of the dynamic shared memory (wgmma.cuh: panels on 1024-byte boundaries).
__device__ __forceinline__ __nv_bfloat16 *attn_smem_1024(unsigned char *raw) {
    const uint32_t s = gdnk::smem_u32(raw);
    return reinterpret_cast<__nv_bfloat16 *>(raw + (((s + 1023u) & ~1023u) - s));
}
#endif

// ---- the TMA producer and the consumers: attention_bwd_*_wgmma_kernel -----------------------
// A CTA is 3 warpgroups (384 threads) over the grid of the mma.sync pass it replaces:
//   warpgroup 0 = producer: setmaxnreg.dec to BWD_WG_PRODUCER_REGS; its first warp issues the loads
//     (lane 0: TMA, cp.async.bulk.tensor.4d with the forward's tensor maps, box 64 columns x rows,
//     128-byte swizzle = one wgmma panel; rows >= T zero-filled); warps 1-3 exit after setmaxnreg.
//   warpgroups 1, 2 = consumers, the warpgroups wg = 0, 1 above (setmaxnreg.inc to
//     BWD_WG_CONSUMER_REGS): no cp.async, no CTA-wide barrier in the loop; a tile is waited for on
//     its stage's full mbarrier and handed back on its empty mbarrier (count 8: lane 0 of each
//     consumer warp, after the wait_group that retires the last wgmma reading the stage).
// Stage protocol (as attention_fwd_wgmma_kernel), NS = BWD_WG_STAGES = 2 stages: tile u (the u-th
// block visited) lives in stage u % NS, fill u / NS; consumers wait full with parity (u / NS) & 1,
// the producer refills the stage for tile u >= NS after the (u / NS - 1)-th completion of its
// empty barrier, parity (u / NS - 1) & 1. Every producer wait is released by consumer work on an
// earlier tile, so the order cannot deadlock; every load issued is waited for by both consumers
// before they exit.
// TMA writes through the async proxy, as wgmma reads: the mbarrier wait alone orders them.
// Registers: __launch_bounds__(384, 1) gives 168 a thread at launch; setmaxnreg moves 144 x 128
// of them from the producer (24) to the consumers (240), and ptxas compiles the consumer branches
// against 240: their SASS uses up to 185-238 registers, no spill (CUDA 13.0).
// -DGDN_MBAR_WATCHDOG: the waits are wgmma.cuh's mbar_wait(bar, parity, failed).
constexpr int BWD_WG_THREADS = 384, BWD_WG_PRODUCER_REGS = 24, BWD_WG_CONSUMER_REGS = 240, BWD_WG_STAGES = 2;
static_assert(128 * BWD_WG_PRODUCER_REGS + 256 * BWD_WG_CONSUMER_REGS <= 168 * BWD_WG_THREADS,
              "bwd wgmma: setmaxnreg exceeds the launch allocation (168 a thread at 384 threads)");
// Named barriers of these kernels: 0 (the start), 1 (both consumers, DQA), 2 + c (consumer c's
// epilogue).

// Both passes' setup: thread 0 initialises the single-load barrier (count 1) and each stage's
// full (count full_count) and empty (8: the consumers' warps) barriers, thread 32 prefetches the
// four tensor maps; then the CTA's only barrier, so that no arrival precedes an init.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void bwd_wg_setup(int tid, uint32_t single, uint32_t full, uint32_t empty, int full_count,
                                             const CUtensorMap *tmq, const CUtensorMap *tmk, const CUtensorMap *tmv,
                                             const CUtensorMap *tmdo) {
    if (tid == 0) {
        wgm::mbar_init(single, 1);
#pragma unroll
        for (int s = 0; s < BWD_WG_STAGES; s++) {
            wgm::mbar_init(full + 8 * s, full_count);
            wgm::mbar_init(empty + 8 * s, 8);
        }
        wgm::mbar_init_fence();
    }
    if (tid == 32) {
        wgm::prefetch_tensormap(tmq);
        wgm::prefetch_tensormap(tmk);
        wgm::prefetch_tensormap(tmv);
        wgm::prefetch_tensormap(tmdo);
    }
    __syncthreads();
}
#endif

// dK/dV pass (attention_bwd_dkdv_wgmma_kernel). Shared memory: K, V (loaded once),
// NS stages of (Q, dO) tiles and of the (lse2, D) rows of their BQ queries, with DQA two dS tiles
// (by iteration parity: a consumer writes dS of tile u + 1 while the other may still read dS of
// tile u in its dQ product), mbarriers. The producer's warp fills a stage's rows (lse2 = lse *
// log2 e, rows >= T: +inf and 0, as attn_load_rowstats; DOC: also the rows' document starts,
// rows >= T: T) with plain stores; the stage's full barrier counts its 32 lanes' arrivals after
// those stores (release) plus lane 0's arrive.expect_tx for the TMA bytes: 33.
template <int D, bool DQA, bool DOC = false>
constexpr int wkv_smem_bytes() {
    constexpr int NS = BWD_WG_STAGES;
    return (2 * WKV_BK * D + 2 * NS * wkv_bq<D>() * D + (DQA ? 2 * wkv_bq<D>() * WKV_BK : 0)) * 2 +
           (DOC ? 3 : 2) * NS * wkv_bq<D>() * 4 + 1024 + (1 + 2 * NS) * 8;
}
static_assert(wkv_smem_bytes<128, true, true>() <= 227 * 1024 && wkv_smem_bytes<64, true, true>() <= 227 * 1024,
              "bwd wgmma: the dK/dV pass's stages exceed sm_90's 227 KiB");

template <int D, bool DQA, bool DOC>
__global__ void __launch_bounds__(BWD_WG_THREADS, 1)
    attention_bwd_dkdv_wgmma_kernel(const __grid_constant__ bwd_kparams p, const __grid_constant__ CUtensorMap tmq,
                                    const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv,
                                    const __grid_constant__ CUtensorMap tmdo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BK = WKV_BK, BQ = wkv_bq<D>(), NS = BWD_WG_STAGES;
    static_assert(NS >= 2, "bwd wgmma: tile u + 1 loads while tile u is read");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16 *Ks = attn_smem_1024(smem_raw);  // BK x D, sw128<BK>
    __nv_bfloat16 *Vs = Ks + BK * D;                // BK x D, sw128<BK>
    __nv_bfloat16 *Qs = Vs + BK * D;                // NS x (BQ x D), sw128<BQ>
    __nv_bfloat16 *dOs = Qs + NS * BQ * D;          // NS x (BQ x D), sw128<BQ>
    __nv_bfloat16 *dSs = dOs + NS * BQ * D;         // DQA: 2 x (BQ queries x BK keys), sw128<BQ>
    float *lse2s = reinterpret_cast<float *>(dSs + (DQA ? 2 * BQ * BK : 0));  // NS x BQ (log2 domain)
    float *Dss = lse2s + NS * BQ;                                              // NS x BQ
    int *Sds = reinterpret_cast<int *>(Dss + NS * BQ);                         // DOC: NS x BQ starts
    const uint32_t kv_full = gdnk::smem_u32(Sds + (DOC ? NS * BQ : 0)), full = kv_full + 8, empty = full + 8 * NS;

    const int tid = threadIdx.x, lane = tid & 31;
    const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, W = p.window;
    const int k0 = n * BK;
    // query rows that see some key of [k0, k0 + BK): k0 <= i <= k0 + BK - 1 + W - 1
    const int i_hi = min(T - 1, k0 + BK - 2 + W);
    const int m_lo = k0 / BQ;
    int m_hi = i_hi / BQ;
    if constexpr (DOC) m_hi = attn_doc_last_tile<BWD_WG_THREADS>(p.doc, b, T, BQ, m_lo, m_hi, min(k0 + BK - 1, T - 1));
    const size_t sbase = ((size_t)b * H + h) * T;

    bwd_wg_setup(tid, kv_full, full, empty, 33, &tmq, &tmk, &tmv, &tmdo);  // the only CTA-wide barrier
    bool wd_failed = false;  // -DGDN_MBAR_WATCHDOG (wgmma.cuh; trap at the end)

    constexpr uint32_t KTILE = 2u * BK * D, QTILE = 2u * BQ * D;  // bytes of a K (V), a Q (dO) tile
    constexpr uint32_t KPANEL = 2u * BK * 64, QPANEL = 2u * BQ * 64;  // bytes of one 64-column panel

    if (tid < 128) {  // ---- producer warpgroup
        wgm::setmaxnreg_dec<BWD_WG_PRODUCER_REGS>();
        if (tid < 32) {
            const uint32_t ks0 = gdnk::smem_u32(Ks), vs0 = gdnk::smem_u32(Vs);
            const uint32_t qs0 = gdnk::smem_u32(Qs), dos0 = gdnk::smem_u32(dOs);
            if (lane == 0) {
                wgm::mbar_arrive_expect_tx(kv_full, 2 * KTILE);
#pragma unroll
                for (int c = 0; c < D / 64; c++) {
                    wgm::tma_load_4d(ks0 + c * KPANEL, &tmk, 64 * c, h, k0, b, kv_full);
                    wgm::tma_load_4d(vs0 + c * KPANEL, &tmv, 64 * c, h, k0, b, kv_full);
                }
            }
            for (int m = m_lo, u = 0; m <= m_hi; m++, u++) {
                const int st = u % NS;
                if (u >= NS) wgm::mbar_wait(empty + 8 * st, (u / NS - 1) & 1, wd_failed);
                const uint32_t bar = full + 8 * st;
                if (lane == 0) {
                    wgm::mbar_arrive_expect_tx(bar, 2 * QTILE);
#pragma unroll
                    for (int c = 0; c < D / 64; c++) {
                        wgm::tma_load_4d(qs0 + st * QTILE + c * QPANEL, &tmq, 64 * c, h, m * BQ, b, bar);
                        wgm::tma_load_4d(dos0 + st * QTILE + c * QPANEL, &tmdo, 64 * c, h, m * BQ, b, bar);
                    }
                }
#pragma unroll
                for (int r = lane; r < BQ; r += 32) {
                    const int i = m * BQ + r;
                    lse2s[st * BQ + r] = i < T ? p.lse[sbase + i] * ATTN_LOG2E : INFINITY;
                    Dss[st * BQ + r] = i < T ? p.Dd[sbase + i] : 0.f;
                    if constexpr (DOC) Sds[st * BQ + r] = i < T ? p.doc[(size_t)b * T + i] : T;
                }
                wgm::mbar_arrive(bar);  // release: this lane's rows are in shared memory
            }
        }
    } else {  // ---- consumer warpgroups: the dK/dV pass's per-tile code (header)
        wgm::setmaxnreg_inc<BWD_WG_CONSUMER_REGS>();
        const int wg = (tid >> 7) - 1, w = (tid >> 5) & 3;
        const int g = lane >> 2, t4 = lane & 3;
        const float c2 = p.scale_log2;
        const int kw0 = k0 + 64 * wg;  // first key of this warpgroup

        // dk[4 j + e], dv[4 j + e]: key kw0 + 16 w + g + 8 (e >> 1), column 8 j + 2 t4 + (e & 1)
        float dk[D / 2], dv[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.f;
        const uint32_t ks = gdnk::smem_u32(Ks), vs = gdnk::smem_u32(Vs);
        wgm::mbar_wait(kv_full, 0, wd_failed);

        for (int m = m_lo, u = 0; m <= m_hi; m++, u++) {
            const int cb = u % NS;
            wgm::mbar_wait(full + 8 * cb, (u / NS) & 1, wd_failed);
            const uint32_t qs = gdnk::smem_u32(Qs + cb * BQ * D), dos = gdnk::smem_u32(dOs + cb * BQ * D);
            const float *l2 = lse2s + cb * BQ, *Dq = Dss + cb * BQ;
            const int *Sq = Sds + cb * BQ;
            const int q0 = m * BQ;

            // st[4 j + e] = S^T[key kw0 + 16 w + g + 8 (e >> 1)][query q0 + 8 j + 2 t4 + (e & 1)], dpt alike
            float st[BQ / 2], dpt[BQ / 2];
#pragma unroll
            for (int i = 0; i < BQ / 2; i++) st[i] = dpt[i] = 0.f;
            wgm::fence_regs(st);
            wgm::fence_regs(dpt);
            wgm::fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                wgm::mma_ss<BQ, 0>(st, wgm::desc_k<BK>(ks, 64 * wg, kk), wgm::desc_k<BQ>(qs, 0, kk), 1);
            wgm::commit();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                wgm::mma_ss<BQ, 0>(dpt, wgm::desc_k<BK>(vs, 64 * wg, kk), wgm::desc_k<BQ>(dos, 0, kk), 1);
            wgm::commit();
            wgm::wait<1>();
            wgm::fence_regs(st);

            const bool need_mask = (kw0 + 63 > q0) || (kw0 <= q0 + BQ - 1 - W) || (DOC && kw0 < Sq[BQ - 1]);
#pragma unroll
            for (int j = 0; j < BQ / 8; j++) {
                const float2 lq = *reinterpret_cast<const float2 *>(l2 + 8 * j + 2 * t4);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float pv = attn_ex2(fmaf(st[4 * j + e], c2, -((e & 1) ? lq.y : lq.x)));
                    if (need_mask) {
                        const int key = kw0 + 16 * w + g + 8 * (e >> 1), i = q0 + 8 * j + 2 * t4 + (e & 1);
                        if (key > i || key <= i - W || (DOC && key < Sq[8 * j + 2 * t4 + (e & 1)])) pv = 0.f;
                    }
                    st[4 * j + e] = pv;
                }
            }
            wgm::wait<0>();
            wgm::fence_regs(dpt);
#pragma unroll
            for (int j = 0; j < BQ / 8; j++) {
                const float2 dq = *reinterpret_cast<const float2 *>(Dq + 8 * j + 2 * t4);
#pragma unroll
                for (int e = 0; e < 4; e++) dpt[4 * j + e] = st[4 * j + e] * (dpt[4 * j + e] - ((e & 1) ? dq.y : dq.x));
            }
            uint32_t pa[BQ / 16][4], da[BQ / 16][4];
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    pa[kk][q] = gdnk::pack_bf16(st[8 * kk + 2 * q], st[8 * kk + 2 * q + 1]);
                    da[kk][q] = gdnk::pack_bf16(dpt[8 * kk + 2 * q], dpt[8 * kk + 2 * q + 1]);
                }

            wgm::fence_regs(dv);
            wgm::fence_regs(dk);
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) {
                wgm::fence_regs(pa[kk]);
                wgm::fence_regs(da[kk]);
            }
            wgm::fence();
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) {
                wgm::mma_rs<D, 1>(dv, pa[kk], wgm::desc_n<BQ>(dos, kk), 1);
                wgm::mma_rs<D, 1>(dk, da[kk], wgm::desc_n<BQ>(qs, kk), 1);
            }
            wgm::commit();
            const int dsb = (u & 1) * BQ * BK;  // DQA: this tile's dS buffer, dSs + dsb
            if constexpr (DQA) {
                // dS^T -> dSs + dsb [query][key]. da[kk][q] holds key 16 w + g + 8 (q & 1) of this
                // warpgroup, queries 16 kk + 2 t4 + 8 (q >> 1) (low half) and + 1 (high half). The 8
                // lanes g of a store share one 16-byte chunk, the 4 lanes t4 hit 4 rows whose
                // swizzled chunks differ: no bank conflict. The last readers of this buffer (dQ
                // product of tile u - 2) passed the consumers' barrier of tile u - 1 before this
                // thread could.
#pragma unroll
                for (int kk = 0; kk < BQ / 16; kk++)
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const int key = 64 * wg + 16 * w + g + 8 * (q & 1), qr = 16 * kk + 2 * t4 + 8 * (q >> 1);
                        reinterpret_cast<uint16_t *>(dSs + dsb)[wgm::sw128<BQ>(qr, key)] = (uint16_t)(da[kk][q] & 0xFFFFu);
                        reinterpret_cast<uint16_t *>(dSs + dsb)[wgm::sw128<BQ>(qr + 1, key)] = (uint16_t)(da[kk][q] >> 16);
                    }
                wgm::fence_proxy_async();
            }
            wgm::wait<0>();
            wgm::fence_regs(dv);
            wgm::fence_regs(dk);
            // Q, dO, lse2, D of this stage read: the warp's lse2 / D loads (generic proxy, every
            // lane) are ordered before lane 0's release by the warp barrier
            __syncwarp();
            if (lane == 0) wgm::mbar_arrive(empty + 8 * cb);

            if constexpr (DQA) {
                asm volatile("bar.sync 1, 256;\n" ::: "memory");  // both consumers' dS in dSs + dsb, visible to wgmma
                constexpr int QUARTER_ROWS = BQ == 128;
                const int r0 = QUARTER_ROWS ? 64 * wg : 0, cp = QUARTER_ROWS ? 0 : wg;
                const uint32_t kp = ks + (uint32_t)cp * (BK * 64 * 2);
                const uint32_t dss = gdnk::smem_u32(dSs + dsb);
                float acc[32];
#pragma unroll
                for (int i = 0; i < 32; i++) acc[i] = 0.f;
                wgm::fence_regs(acc);
                wgm::fence();
#pragma unroll
                for (int s = 0; s < BK / 16; s++)
                    wgm::mma_ss<64, 1>(acc, wgm::desc_k<BQ>(dss, r0, s), wgm::desc_n<BK>(kp, s), 1);
                wgm::commit();
                wgm::wait<0>();
                wgm::fence_regs(acc);
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int i = q0 + r0 + 16 * w + g + 8 * r;
                    if (i < T) {
                        float *dst = p.dqacc + (((size_t)b * T + i) * H + h) * D + 64 * cp + 2 * t4;
#pragma unroll
                        for (int j = 0; j < 8; j++) attn_red_add2(dst + 8 * j, acc[4 * j + 2 * r], acc[4 * j + 2 * r + 1]);
                    }
                }
            }
        }

        // epilogue: dK (x scale) staged in K, dV in V, each consumer its
        // own 64 rows (written by TMA, read only by retired wgmma), then its rows stored
        // DQA: the other consumer's last dQ product read every K row
        if constexpr (DQA) asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = 64 * wg + 16 * w + g + 8 * r;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                const int off = wgm::sw128<BK>(row, 8 * j + 2 * t4);
                *reinterpret_cast<uint32_t *>(Ks + off) = gdnk::pack_bf16(dk[4 * j + 2 * r] * p.scale, dk[4 * j + 2 * r + 1] * p.scale);
                *reinterpret_cast<uint32_t *>(Vs + off) = gdnk::pack_bf16(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
            }
        }
        // the 128 threads of this consumer only (named barrier 2 + wg)
        wgm::wg_store_rows<D, 2>(wg, tid, k0, T, [&](int row, int ch, int j) {
            const size_t go = (((size_t)b * T + j) * H + h) * D + ch * 8;
            *reinterpret_cast<uint4 *>(p.dk + go) = *reinterpret_cast<const uint4 *>(Ks + wgm::sw128<BK>(row, ch * 8));
            *reinterpret_cast<uint4 *>(p.dv + go) = *reinterpret_cast<const uint4 *>(Vs + wgm::sw128<BK>(row, ch * 8));
        });
    }
    wgm::mbar_watchdog_check(wd_failed);  // outside the setmaxnreg regions (wgmma.cuh)
#else
    __trap();  // launched only where the sm_90a image exists (attn_wgmma_runs checks)
#endif
}

// dQ pass (attention_bwd_dq_wgmma_kernel): Q, dO loaded once (one barrier), NS stages
// of (K, V) tiles, each on one full barrier (count 1: the producer's arrive.expect_tx) and one
// empty barrier (released after dQ += dS K, the last wgmma reading K; V is read before it). The
// consumers read lse and D of their rows from global memory.
template <int D>
constexpr int wdq_smem_bytes() {
    return (2 * WDQ_BQ * D + 2 * BWD_WG_STAGES * WDQ_BK * D) * 2 + 1024 + (1 + 2 * BWD_WG_STAGES) * 8;
}
static_assert(wdq_smem_bytes<128>() <= 227 * 1024, "bwd wgmma: the dQ pass's stages exceed sm_90's 227 KiB");

template <int D, bool DOC>
__global__ void __launch_bounds__(BWD_WG_THREADS, 1)
    attention_bwd_dq_wgmma_kernel(const __grid_constant__ bwd_kparams p, const __grid_constant__ CUtensorMap tmq,
                                  const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv,
                                  const __grid_constant__ CUtensorMap tmdo) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BQ = WDQ_BQ, BK = WDQ_BK, NS = BWD_WG_STAGES;
    static_assert(NS >= 2, "bwd wgmma: tile u + 1 loads while tile u is read");
    static_assert(BQ == BK, "bwd wgmma: Q, dO, K and V tiles share the box of the tensor maps");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16 *Qs = attn_smem_1024(smem_raw);  // BQ x D, sw128<BQ>
    __nv_bfloat16 *dOs = Qs + BQ * D;               // BQ x D, sw128<BQ>
    __nv_bfloat16 *Ks = dOs + BQ * D;               // NS x (BK x D), sw128<BK>
    __nv_bfloat16 *Vs = Ks + NS * BK * D;           // NS x (BK x D), sw128<BK>
    const uint32_t q_full = gdnk::smem_u32(Vs + NS * BK * D), full = q_full + 8, empty = full + 8 * NS;

    const int tid = threadIdx.x, lane = tid & 31;
    const int m = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, W = p.window;
    const int q0 = m * BQ;
    const int j_hi = min(T - 1, q0 + BQ - 1);
    const int j_lo = max(max(0, q0 - W + 1), DOC ? attn_doc_start(p.doc, b, T, q0) : 0);
    const int n_hi = j_hi / BK, n_lo = j_lo / BK;

    bwd_wg_setup(tid, q_full, full, empty, 1, &tmq, &tmk, &tmv, &tmdo);  // the only CTA-wide barrier
    bool wd_failed = false;  // -DGDN_MBAR_WATCHDOG (wgmma.cuh; trap at the end)

    constexpr uint32_t TILE = 2u * BK * D, PANEL = 2u * BK * 64;  // bytes of a tile, of a 64-column panel

    if (tid < 128) {  // ---- producer warpgroup: its first warp waits, lane 0 issues every TMA
        wgm::setmaxnreg_dec<BWD_WG_PRODUCER_REGS>();
        if (tid < 32) {
            const uint32_t qs0 = gdnk::smem_u32(Qs), dos0 = gdnk::smem_u32(dOs);
            const uint32_t ks0 = gdnk::smem_u32(Ks), vs0 = gdnk::smem_u32(Vs);
            if (lane == 0) {
                wgm::mbar_arrive_expect_tx(q_full, 2 * TILE);
#pragma unroll
                for (int c = 0; c < D / 64; c++) {
                    wgm::tma_load_4d(qs0 + c * PANEL, &tmq, 64 * c, h, q0, b, q_full);
                    wgm::tma_load_4d(dos0 + c * PANEL, &tmdo, 64 * c, h, q0, b, q_full);
                }
            }
            for (int n = n_hi, u = 0; n >= n_lo; n--, u++) {
                const int st = u % NS;
                if (u >= NS) wgm::mbar_wait(empty + 8 * st, (u / NS - 1) & 1, wd_failed);
                const uint32_t bar = full + 8 * st;
                if (lane == 0) {
                    wgm::mbar_arrive_expect_tx(bar, 2 * TILE);
#pragma unroll
                    for (int c = 0; c < D / 64; c++) {
                        wgm::tma_load_4d(ks0 + st * TILE + c * PANEL, &tmk, 64 * c, h, n * BK, b, bar);
                        wgm::tma_load_4d(vs0 + st * TILE + c * PANEL, &tmv, 64 * c, h, n * BK, b, bar);
                    }
                }
                __syncwarp();
            }
        }
    } else {  // ---- consumer warpgroups: the dQ pass's per-tile code (header)
        wgm::setmaxnreg_inc<BWD_WG_CONSUMER_REGS>();
        const int wg = (tid >> 7) - 1, w = (tid >> 5) & 3;
        const int g = lane >> 2, t4 = lane & 3;
        const float c2 = p.scale_log2;
        const int wq0 = q0 + 64 * wg;  // first query row of this warpgroup

        float lse2[2], Drow[2];  // rows wq0 + 16 w + g, + 8
        int lo[2];               // DOC: their document starts
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = wq0 + 16 * w + g + 8 * r;
            const size_t si = ((size_t)b * H + h) * T + i;
            lse2[r] = i < T ? p.lse[si] * ATTN_LOG2E : INFINITY;
            Drow[r] = i < T ? p.Dd[si] : 0.f;
            lo[r] = DOC ? attn_doc_start(p.doc, b, T, i) : 0;
        }
        const int s_hi = DOC ? attn_doc_start(p.doc, b, T, wq0 + 63) : 0;  // the warpgroup's largest start
        // dq[4 j + e]: row wq0 + 16 w + g + 8 (e >> 1), column 8 j + 2 t4 + (e & 1)
        float dq[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) dq[i] = 0.f;
        const uint32_t qs = gdnk::smem_u32(Qs), dos = gdnk::smem_u32(dOs);
        wgm::mbar_wait(q_full, 0, wd_failed);

        for (int n = n_hi, u = 0; n >= n_lo; n--, u++) {
            const int cb = u % NS;
            wgm::mbar_wait(full + 8 * cb, (u / NS) & 1, wd_failed);
            const uint32_t ks = gdnk::smem_u32(Ks + cb * BK * D), vs = gdnk::smem_u32(Vs + cb * BK * D);
            const int k0 = n * BK;

            float s[BK / 2], dp[BK / 2];
#pragma unroll
            for (int i = 0; i < BK / 2; i++) s[i] = dp[i] = 0.f;
            wgm::fence_regs(s);
            wgm::fence_regs(dp);
            wgm::fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                wgm::mma_ss<BK, 0>(s, wgm::desc_k<BQ>(qs, 64 * wg, kk), wgm::desc_k<BK>(ks, 0, kk), 1);
            wgm::commit();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                wgm::mma_ss<BK, 0>(dp, wgm::desc_k<BQ>(dos, 64 * wg, kk), wgm::desc_k<BK>(vs, 0, kk), 1);
            wgm::commit();
            wgm::wait<1>();
            wgm::fence_regs(s);

            const bool need_mask = (k0 + BK - 1 > wq0) || (k0 <= wq0 + 63 - W) || (DOC && k0 < s_hi);
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e >> 1;
                    float pv = attn_ex2(fmaf(s[4 * j + e], c2, -lse2[r]));
                    if (need_mask) {
                        const int i = wq0 + 16 * w + g + 8 * r, key = k0 + 8 * j + 2 * t4 + (e & 1);
                        if (key > i || key <= i - W || (DOC && key < lo[r])) pv = 0.f;
                    }
                    s[4 * j + e] = pv;
                }
            wgm::wait<0>();
            wgm::fence_regs(dp);
#pragma unroll
            for (int j = 0; j < BK / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - Drow[e >> 1]);
            uint32_t da[BK / 16][4];
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++)
#pragma unroll
                for (int q = 0; q < 4; q++) da[kk][q] = gdnk::pack_bf16(dp[8 * kk + 2 * q], dp[8 * kk + 2 * q + 1]);

            wgm::fence_regs(dq);
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) wgm::fence_regs(da[kk]);
            wgm::fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) wgm::mma_rs<D, 1>(dq, da[kk], wgm::desc_n<BK>(ks, kk), 1);
            wgm::commit();
            wgm::wait<0>();
            wgm::fence_regs(dq);
            if (lane == 0) wgm::mbar_arrive(empty + 8 * cb);  // K, V of this stage read
        }

        // epilogue: dq = scale * acc staged in this consumer's own Q rows
        // (written by TMA, read only by its retired wgmma), then its rows stored
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = 64 * wg + 16 * w + g + 8 * r;
#pragma unroll
            for (int j = 0; j < D / 8; j++)
                *reinterpret_cast<uint32_t *>(Qs + wgm::sw128<BQ>(row, 8 * j + 2 * t4)) =
                    gdnk::pack_bf16(dq[4 * j + 2 * r] * p.scale, dq[4 * j + 2 * r + 1] * p.scale);
        }
        wgm::wg_store_rows<D, 2>(wg, tid, q0, T, [&](int row, int ch, int i) {
            *reinterpret_cast<uint4 *>(p.dq + (((size_t)b * T + i) * H + h) * D + ch * 8) =
                *reinterpret_cast<const uint4 *>(Qs + wgm::sw128<BQ>(row, ch * 8));
        });
    }
    wgm::mbar_watchdog_check(wd_failed);  // outside the setmaxnreg regions (wgmma.cuh)
#else
    __trap();  // launched only where the sm_90a image exists (attn_wgmma_runs checks)
#endif
}

// ---- nondeterministic mode: dq = bf16(scale * acc), 4 elements per thread -----------------------
__global__ void __launch_bounds__(256) attention_bwd_dq_convert_kernel(const float4 *__restrict__ acc,
                                                                       uint2 *__restrict__ dq, size_t n4, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 a = acc[i];
        dq[i] = make_uint2(gdnk::pack_bf16(a.x * scale, a.y * scale), gdnk::pack_bf16(a.z * scale, a.w * scale));
    }
}

// ---- fp32 passes: one warp per row, 4 warps per block ----------------------------------------
struct bwd_f32_params {
    int B, T, H, window;
    float scale;
    const float *q, *k, *v, *dO, *lse, *Dd;
    float *dq, *dk, *dv;
    const int32_t *doc;  // NULL, or (B*T) document starts
};

__device__ __forceinline__ float attn_dot_f32(const float *s, const float *g, int D) {
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
    float d = 0.f;
#pragma unroll 8
    for (int e = 0; e < D / 4; e++) {
        const float4 x = g4[e];
        d += s[4 * e] * x.x + s[4 * e + 1] * x.y + s[4 * e + 2] * x.z + s[4 * e + 3] * x.w;
    }
    return d;
}

// dq of query row (b, i, h): keys i - W < j <= i, 32 at a time (lane = key)
template <int D>
__global__ void __launch_bounds__(128) attention_bwd_dq_f32_kernel(const __grid_constant__ bwd_f32_params p) {
    __shared__ float qs[4][D], dos[4][D];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int T = p.T, H = p.H;
    const long row = (long)blockIdx.x * 4 + warp;
    if (row >= (long)p.B * T * H) return;
    const int h = (int)(row % H), i = (int)((row / H) % T), b = (int)(row / ((long)H * T));
    const size_t rs = (size_t)H * D;
    for (int e = lane; e < D; e += 32) qs[warp][e] = p.q[(size_t)row * D + e], dos[warp][e] = p.dO[(size_t)row * D + e];
    __syncwarp();
    const size_t si = ((size_t)b * H + h) * T + i;
    const float lse = p.lse[si], Di = p.Dd[si];
    const float *kb = p.k + (size_t)b * T * rs + (size_t)h * D;
    const float *vb = p.v + (size_t)b * T * rs + (size_t)h * D;
    float acc[D / 32];
#pragma unroll
    for (int r = 0; r < D / 32; r++) acc[r] = 0.f;
    const int jlo = max(max(0, i - p.window + 1), p.doc ? p.doc[(size_t)b * T + i] : 0);  // keys jlo .. i
    for (int j0 = jlo; j0 <= i; j0 += 32) {
        const int j = j0 + lane;
        float ds = 0.f;
        if (j <= i) {
            const float s = attn_dot_f32(qs[warp], kb + (size_t)j * rs, D) * p.scale;
            const float dpv = attn_dot_f32(dos[warp], vb + (size_t)j * rs, D);
            ds = expf(s - lse) * (dpv - Di);
        }
        const int nj = min(32, i - j0 + 1);
        for (int jj = 0; jj < nj; jj++) {
            const float d = __shfl_sync(0xffffffffu, ds, jj);
            const float *kr = kb + (size_t)(j0 + jj) * rs;
#pragma unroll
            for (int r = 0; r < D / 32; r++) acc[r] += d * kr[lane + 32 * r];
        }
    }
#pragma unroll
    for (int r = 0; r < D / 32; r++) p.dq[(size_t)row * D + lane + 32 * r] = acc[r] * p.scale;
}

// dk, dv of key row (b, j, h): queries j <= i < j + W (and in j's document: i < the next
// document's start, a prefix as starts do not decrease), 32 at a time (lane = query)
template <int D>
__global__ void __launch_bounds__(128) attention_bwd_dkdv_f32_kernel(const __grid_constant__ bwd_f32_params p) {
    __shared__ float ks[4][D], vs[4][D];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int T = p.T, H = p.H;
    const long row = (long)blockIdx.x * 4 + warp;
    if (row >= (long)p.B * T * H) return;
    const int h = (int)(row % H), j = (int)((row / H) % T), b = (int)(row / ((long)H * T));
    const size_t rs = (size_t)H * D;
    for (int e = lane; e < D; e += 32) ks[warp][e] = p.k[(size_t)row * D + e], vs[warp][e] = p.v[(size_t)row * D + e];
    __syncwarp();
    const float *qb = p.q + (size_t)b * T * rs + (size_t)h * D;
    const float *ob = p.dO + (size_t)b * T * rs + (size_t)h * D;
    const size_t sb = ((size_t)b * H + h) * T;
    float ak[D / 32], av[D / 32];
#pragma unroll
    for (int r = 0; r < D / 32; r++) ak[r] = av[r] = 0.f;
    int i_hi = min(T - 1, j + p.window - 1);
    if (p.doc) {  // the last query of j's document, by bisection: doc[i] <= j for i in [j, i_hi]
        const int32_t *dr = p.doc + (size_t)b * T;
        int lo = j;
        while (lo < i_hi) {
            const int mid = lo + (i_hi - lo + 1) / 2;
            if (dr[mid] <= j) lo = mid;
            else i_hi = mid - 1;
        }
    }
    for (int i0 = j; i0 <= i_hi; i0 += 32) {
        const int i = i0 + lane;
        float pv = 0.f, ds = 0.f;
        if (i <= i_hi) {
            const float s = attn_dot_f32(ks[warp], qb + (size_t)i * rs, D) * p.scale;
            const float dpv = attn_dot_f32(vs[warp], ob + (size_t)i * rs, D);
            pv = expf(s - p.lse[sb + i]);
            ds = pv * (dpv - p.Dd[sb + i]);
        }
        const int ni = min(32, i_hi - i0 + 1);
        for (int ii = 0; ii < ni; ii++) {
            const float pb = __shfl_sync(0xffffffffu, pv, ii), db = __shfl_sync(0xffffffffu, ds, ii);
            const float *qr = qb + (size_t)(i0 + ii) * rs, *dr = ob + (size_t)(i0 + ii) * rs;
#pragma unroll
            for (int r = 0; r < D / 32; r++) {
                av[r] += pb * dr[lane + 32 * r];
                ak[r] += db * qr[lane + 32 * r];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < D / 32; r++) {
        p.dk[(size_t)row * D + lane + 32 * r] = ak[r] * p.scale;
        p.dv[(size_t)row * D + lane + 32 * r] = av[r];
    }
}

// ---- launchers ------------------------------------------------------------------------------
template <typename E>
void attention_bwd_dot_launch(const attn_params *p, float *Dd) {
    const long rows = (long)p->B * p->T * p->H;
    attention_bwd_dot_kernel<E><<<(unsigned)GDN_CDIV(rows, 8), 256, 0, p->stream>>>(
        p->B, p->T, p->H, p->D, static_cast<const E *>(p->dO), static_cast<const E *>(p->o), Dd);
    CUDA_CHECK_LAUNCH();
}

// Sets the shared-memory limit of the mma.sync kernel fn and launches it (both passes run 256
// threads; the wgmma kernels run over the same grids, so that a pass can fall back per call).
static_assert(KV_THREADS == DQ_THREADS && KV_BK == WKV_BK && DQ_BQ == WDQ_BQ,
              "the bf16 launcher gives both kernel families the same grids and the mma.sync passes one block size");
void attn_bwd_launch(void (*fn)(bwd_kparams), int smem, dim3 grid, const bwd_kparams &kp, cudaStream_t stream) {
    CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    fn<<<grid, KV_THREADS, smem, stream>>>(kp);
    CUDA_CHECK_LAUNCH();
}

// wgmma kernel launches so far (attention_bwd_wgmma_launches, attention_testing.h: test_attention
// checks that a bf16 backward on the wgmma path really ran them and did not fall back to mma.sync)
unsigned long bwd_wgmma_launches = 0;

typedef void (*bwd_wgmma_kernel_fn)(bwd_kparams, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap);

// Launches the wgmma kernel fn (384 threads, smem bytes) with the tensor maps of q and dO (box
// qrows rows) and k and v (krows rows); returns 0 (nothing launched; why printed once to stderr)
// when the maps cannot be made or fn has too few registers for its setmaxnreg, so that the caller
// runs the pass's mma.sync kernel instead. setmaxnreg moves registers inside the CTA's launch
// allocation: the consumers' setmaxnreg.inc (256 x 240) can only be served if ptxas gave the
// kernel >= 168 registers a thread (384 x 168 >= 128 x 24 + 256 x 240); with fewer it would block
// forever. ptxas reports 168 (the launch bound); checked once per kernel (*regs_ok, the caller's
// static).
int attn_bwd_wgmma_launch(bwd_wgmma_kernel_fn fn, int smem, dim3 grid, const bwd_kparams &kp, const attn_params *p,
                          int qrows, int krows, int *regs_ok, const char *name) {
    static int warned = 0;
    if (*regs_ok < 0) {
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncGetAttributes(&fa, fn));
        *regs_ok = fa.numRegs * BWD_WG_THREADS >= 128 * BWD_WG_PRODUCER_REGS + 256 * BWD_WG_CONSUMER_REGS;
    }
    const char *why = *regs_ok ? nullptr : "the kernel has fewer than 168 registers a thread: setmaxnreg.inc would hang";
    CUtensorMap mq, mk, mv, mdo;
    if (!why) why = attn_tma_map_bf16(&mq, p->q, p, qrows);
    if (!why) why = attn_tma_map_bf16(&mdo, p->dO, p, qrows);
    if (!why) why = attn_tma_map_bf16(&mk, p->k, p, krows);
    if (!why) why = attn_tma_map_bf16(&mv, p->v, p, krows);
    if (why) {
        if (!warned) {
            fprintf(stderr, "attention_bwd: %s cannot run (%s; B %d T %d H %d D %d): running the pass's mma.sync "
                            "kernel\n", name, why, p->B, p->T, p->H, p->D);
            warned = 1;
        }
        return 0;
    }
    CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    fn<<<grid, BWD_WG_THREADS, smem, p->stream>>>(kp, mq, mk, mv, mdo);
    CUDA_CHECK_LAUNCH();
    bwd_wgmma_launches++;  // plain counter (diagnostics; the test calls attention_bwd from one thread)
    return 1;
}

// The dK/dV pass (DQA: with dq by atomics) and the dQ pass on their wgmma kernels; 0 when nothing
// was launched (the fallback above)
template <int D, bool DQA, bool DOC>
int attn_bwd_wgmma_dkdv(const attn_params *p, const bwd_kparams &kp, dim3 grid) {
    static int regs_ok = -1;
    return attn_bwd_wgmma_launch(attention_bwd_dkdv_wgmma_kernel<D, DQA, DOC>, wkv_smem_bytes<D, DQA, DOC>(), grid, kp,
                                 p, wkv_bq<D>(), WKV_BK, &regs_ok, "attention_bwd_dkdv_wgmma_kernel");
}
template <int D, bool DOC>
int attn_bwd_wgmma_dq(const attn_params *p, const bwd_kparams &kp, dim3 grid) {
    static int regs_ok = -1;
    return attn_bwd_wgmma_launch(attention_bwd_dq_wgmma_kernel<D, DOC>, wdq_smem_bytes<D>(), grid, kp, p, WDQ_BQ,
                                 WDQ_BK, &regs_ok, "attention_bwd_dq_wgmma_kernel");
}

// dqacc: NULL = deterministic two passes; else the zeroed fp32 accumulator (nondeterministic).
// wgmma: the Hopper kernels (attn_wgmma_runs), else mma.sync; a pass whose wgmma kernel cannot run
// falls back to its mma.sync kernel (the passes share grids and dqacc's layout). DOC: the
// instances with document starts (p->doc_start).
template <int D, bool DOC>
void attention_bwd_launch_bf16(const attn_params *p, int W, const float *Dd, float *dqacc, bool wgmma) {
    bwd_kparams kp;
    kp.B = p->B; kp.T = p->T; kp.H = p->H; kp.window = W;
    kp.scale = p->scale;
    kp.scale_log2 = p->scale * ATTN_LOG2E;
    kp.q = static_cast<const __nv_bfloat16 *>(p->q);
    kp.k = static_cast<const __nv_bfloat16 *>(p->k);
    kp.v = static_cast<const __nv_bfloat16 *>(p->v);
    kp.dO = static_cast<const __nv_bfloat16 *>(p->dO);
    kp.lse = p->lse;
    kp.Dd = Dd;
    kp.dq = static_cast<__nv_bfloat16 *>(p->dq);
    kp.dk = static_cast<__nv_bfloat16 *>(p->dk);
    kp.dv = static_cast<__nv_bfloat16 *>(p->dv);
    kp.dqacc = dqacc;
    kp.doc = p->doc_start;
    const dim3 kv_grid(GDN_CDIV(p->T, KV_BK), p->H, p->B), dq_grid(GDN_CDIV(p->T, DQ_BQ), p->H, p->B);
    if (dqacc) {
        if (!wgmma || !attn_bwd_wgmma_dkdv<D, true, DOC>(p, kp, kv_grid))
            attn_bwd_launch(attention_bwd_dkdv_kernel<D, true, DOC>, kv_smem_bytes<D, true, DOC>(), kv_grid, kp, p->stream);
        const size_t n4 = (size_t)p->B * p->T * p->H * D / 4;
        const unsigned blocks = (unsigned)(GDN_CDIV(n4, (size_t)256) < 4096 ? GDN_CDIV(n4, (size_t)256) : 4096);
        attention_bwd_dq_convert_kernel<<<blocks, 256, 0, p->stream>>>(reinterpret_cast<const float4 *>(dqacc),
                                                                       static_cast<uint2 *>(p->dq), n4, p->scale);
        CUDA_CHECK_LAUNCH();
        return;
    }
    if (!wgmma || !attn_bwd_wgmma_dkdv<D, false, DOC>(p, kp, kv_grid))
        attn_bwd_launch(attention_bwd_dkdv_kernel<D, false, DOC>, kv_smem_bytes<D, false, DOC>(), kv_grid, kp, p->stream);
    if (!wgmma || !attn_bwd_wgmma_dq<D, DOC>(p, kp, dq_grid))
        attn_bwd_launch(attention_bwd_dq_kernel<D, DOC>, dq_smem_bytes<D>(), dq_grid, kp, p->stream);
}
template <int D>
void attention_bwd_launch_bf16(const attn_params *p, int W, const float *Dd, float *dqacc, bool wgmma) {
    if (p->doc_start) attention_bwd_launch_bf16<D, true>(p, W, Dd, dqacc, wgmma);
    else attention_bwd_launch_bf16<D, false>(p, W, Dd, dqacc, wgmma);
}

template <int D>
void attention_bwd_launch_f32(const attn_params *p, int W, const float *Dd) {
    bwd_f32_params kp;
    kp.B = p->B; kp.T = p->T; kp.H = p->H; kp.window = W;
    kp.scale = p->scale;
    kp.q = static_cast<const float *>(p->q);
    kp.k = static_cast<const float *>(p->k);
    kp.v = static_cast<const float *>(p->v);
    kp.dO = static_cast<const float *>(p->dO);
    kp.lse = p->lse;
    kp.Dd = Dd;
    kp.dq = static_cast<float *>(p->dq);
    kp.dk = static_cast<float *>(p->dk);
    kp.dv = static_cast<float *>(p->dv);
    kp.doc = p->doc_start;
    const unsigned blocks = (unsigned)GDN_CDIV((long)p->B * p->T * p->H, 4);
    attention_bwd_dkdv_f32_kernel<D><<<blocks, 128, 0, p->stream>>>(kp);
    CUDA_CHECK_LAUNCH();
    attention_bwd_dq_f32_kernel<D><<<blocks, 128, 0, p->stream>>>(kp);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

// Workspace: D (B,H,T) fp32 at offset 0, padded to 256 bytes; nondeterministic bf16 also the dq
// accumulator (B,T,H,D) fp32 after it.
static bool attn_bwd_uses_dqacc(const attn_params *p) {
    return p->nondeterministic && p->dtype == ATTN_DTYPE_BF16;
}
static size_t attn_ws_dd_bytes(const attn_params *p) {
    return (((size_t)p->B * p->H * p->T * sizeof(float)) + 255) & ~(size_t)255;
}
extern "C" size_t attention_workspace_bytes(const attn_params *p) {
    size_t bytes = attn_ws_dd_bytes(p);
    if (attn_bwd_uses_dqacc(p)) bytes += (size_t)p->B * p->T * p->H * p->D * sizeof(float);
    return bytes;
}

extern "C" void attention_bwd(const attn_params *p) {
    const char *who = "attention_bwd";
    attn_check_common(p, who);
    attn_check_ptr(p->q, "q", who);
    attn_check_ptr(p->k, "k", who);
    attn_check_ptr(p->v, "v", who);
    attn_check_ptr(p->o, "o", who);
    attn_check_ptr(p->lse, "lse", who);
    attn_check_ptr(p->dO, "dO", who);
    attn_check_ptr(p->dq, "dq", who);
    attn_check_ptr(p->dk, "dk", who);
    attn_check_ptr(p->dv, "dv", who);
    attn_check_ptr(p->workspace, "workspace", who);
    if (p->H > 65535 || p->B > 65535) gdn_die("%s: B %d / H %d exceed the grid", who, p->B, p->H);
    const int W = p->window < p->T ? p->window : p->T;
    if (p->nondeterministic != 0 && p->nondeterministic != 1)
        gdn_die("%s: nondeterministic = %d (must be 0 or 1)\nHINT: zero-initialise attn_params", who,
                p->nondeterministic);
    float *Dd = static_cast<float *>(p->workspace);  // (B,H,T)
    float *dqacc = NULL;                             // (B,T,H,D) fp32, nondeterministic bf16 only
    if (attn_bwd_uses_dqacc(p)) {
        dqacc = reinterpret_cast<float *>(static_cast<unsigned char *>(p->workspace) + attn_ws_dd_bytes(p));
        CUDA_CHECK(cudaMemsetAsync(dqacc, 0, (size_t)p->B * p->T * p->H * p->D * sizeof(float), p->stream));
    }
    const bool bf16 = p->dtype == ATTN_DTYPE_BF16;
    if (bf16) attention_bwd_dot_launch<__nv_bfloat16>(p, Dd);
    else attention_bwd_dot_launch<float>(p, Dd);
    static int image = -1;
    const bool wgmma = bf16 && attn_wgmma_runs(p, attention_bwd_dq_wgmma_kernel<128, false>, &image);
    switch (p->D) {
    case 64: bf16 ? attention_bwd_launch_bf16<64>(p, W, Dd, dqacc, wgmma) : attention_bwd_launch_f32<64>(p, W, Dd); break;
    case 128: bf16 ? attention_bwd_launch_bf16<128>(p, W, Dd, dqacc, wgmma) : attention_bwd_launch_f32<128>(p, W, Dd); break;
    default: gdn_die("%s: head dim %d not supported", who, p->D);
    }
}

extern "C" unsigned long attention_bwd_wgmma_launches(void) { return bwd_wgmma_launches; }

extern "C" int attention_bwd_wgmma_available(void) {
    static int image = -1;
    return cuda_sm90a_image_runs(attention_bwd_dq_wgmma_kernel<128, false>, &image);
}
