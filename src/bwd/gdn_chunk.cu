// gdn_chunk.cu — the chunkwise gated delta rule backward on the GPU (DESIGN 3.2); the public
// contract is in gdn_bwd_cuda.h, the float64 twin is gdn_chunk_bwd_cpu (gdn_chunk.c). Per chunk
// of C = 64 tokens (rows Q, K, V, dO; start state H, gradient dH' of the end state):
//
//   G, gamma, hdec = gamma_C/gamma, Gam        double-float log2 prefix sums (gates_warp)
//   A = strictLower(diag(beta)(Gam ⊙ K K^T)),  Linv = (I + A)^{-1},  T = Linv diag(beta)
//   W = T diag(gamma) K,  Y = V - diag(gamma) K H,  Δ = T Y,  P = Gam ⊙ Q K^T (diag incl.)
//   dΔ  = P^T dO + diag(hdec) K dH'
//   dH  = gamma_C dH' + (diag(gamma) Q)^T dO - W^T dΔ                   (to the previous chunk)
//   dV  = T^T dΔ
//   dT  = dΔ V^T + dW (diag(gamma) K)^T = dΔ Y^T       (dW = -dΔ H^T, so the W path folds in)
//   dKg = T^T dW = -dV H^T                             (d(diag(gamma) K))
//   dQ  = diag(gamma) dO H^T + dQK K,                  dQK = (dO Δ^T) ⊙ Gam
//   dK  = dQK^T Q + diag(hdec) Δ dH'^T + diag(gamma) dKg + X K + X^T K,
//   dA  = -strictLower(Linv^T (dT T^T)),  X = diag(beta)(dA ⊙ Gam)
//   dbeta_i = (Linv^T dT)_ii + sum_j dA_ij (Gam ⊙ K K^T)_ij
//   dg_s = sum_{r>=s} pos_r + sum_{r<s} t_r + sum_{i>=s>j} M_ij   (cancellation-free, as in
//          gdn_chunk.c) with pos_r = q_r.dQp_r + gamma_r k_r.dKg_r (+ gamma_C <H, dH'> at
//          r = C-1), t_r = hdec_r k_r.(Δ dH'^T)_r, M = (dO Δ^T) ⊙ (Gam ⊙ Q K^T) +
//          diag(beta) dA ⊙ (Gam ⊙ K K^T) (strictly lower); gamma_r k_r.dKg_r = -KHg_r.dV_r with
//          KHg = diag(gamma) K H (never as Y - V: that difference loses KHg when it is small).
//
// Kernels, in stream order (one CTA per chunk unless said):
//   [fwd]  gdn_chunk_fwd with h_states -> Hs and o = NULL (states only: no Q, P, O work;
//          skipped when the forward kept them); its prep path borrows the dH' (or PA..Kp)
//          region of the workspace before the scan fills it, and skips its prep kernel when
//          the forward kept T and G, or replays the states from the forward's Δ~ and G
//          (fwd_keep_*: the same bits)
//   prep   (4 warps)  P, A, the fp32 solve (one thread per column), W, KHg, dΔ_loc = P^T dO;
//                     writes Linv, KHg (hi + lo planes), W (NP planes), P | Gam⊙KK^T packed
//                     (fp32), dΔ_loc (prep2 instead on the recompute path, below)
//   scan   (4 warps, one CTA per (b, h, block of DVB value columns), chunks in reverse):
//                     dH' in fp32 accumulators (bf16 planes in smem as the mma operand);
//                     writes dΔ over dΔ_loc and dH' of every chunk
//   final  (8 warps)  per pass over DKH key columns, streams value sub-blocks (each one's V,
//                     dO, KHg, dΔ, H, dH' staged by cp.async while the one before computes):
//                     Y = V - KHg, Δ = T Y, dV = T^T dΔ, dP = dO Δ^T, dT = dΔ Y^T, dO H^T,
//                     Δh dH'^T, -γdV H^T on tensor cores; then, in the same shared memory,
//                     the pass's Q, K columns and (first pass) the C x C work (dQK,
//                     Z = dT T^T, dA, X, dbeta, the dg cross sums); then dq, dk of the pass's
//                     columns.
// Recompute path (bf16 inputs, Dk <= 128: recompute_path): prep2 (prep's arithmetic in less
//   shared memory) writes only Linv, W and P's bf16 plane (the A operand of P^T dO as the mma
//   reads it; workspace PA region), never reads H or dO; the scan forms dΔ_loc = P^T dO for its
//   value columns from that plane with prep's wmm call (bitwise the values prep wrote in fp32)
//   and does not write dΔ; the final kernel forms P = Gam ⊙ QK^T (setup; one plane, as prep2's)
//   with K resident, per value sub-block dΔ = P^T dO + diag(hdec) K dH' (dH' hi + lo) and KHg =
//   diag(gamma) K H (fp32, not rounded to planes), and QK^T, KK^T again for the C x C work (the
//   same bits as prep2's). The recomputed forward's workspace goes to the dH' region.
// On sm_90a, bf16 with Dk = 128 and delta on (final_wgmma; GDN_BWD_WGMMA=0 keeps the mma.sync
// kernel, WG 0), the final kernel is WG 4: dO H^T, Δh dH'^T, -γdV H^T, K dH', K H, dO Δ^T and
// dΔ Y^T on wgmma, each value sub-block's staging -> planes conversion under the previous
// sub-block's wgmma group (two dH' panel slots) and the loads issued a phase earlier
// (final_layout::EA); close to the mma.sync results, not bitwise.
// History: sessions 8-14 kept the older paths behind A/B switches (GDN_BWD_WGMMA levels 1-3:
// the final kernels WG 1-3 that WG 4 grew from; GDN_BWD_FINAL_EARLY=0: WG 3; GDN_BWD_PREP2=0:
// prep on the recompute path; GDN_BWD_SCAN2: the unpipelined one-stage scan, or an 8-warp DVB
// 128 scan; GDN_BWD_SCAN_DLOC=0: prep2 writing dΔ_loc in fp32); session 15 deleted them with
// the kernels only they reached (bench/gdn_bwd.md has their measurements).
// Tensor cores: mma.sync m16n8k16 bf16 -> fp32; fp32 inputs run the same kernels with operands
// split into bf16 hi + lo planes (NP = 2). With bf16 inputs (NP = 1) the inputs Q, K, V, dO are
// exact as one plane, and the intermediates that dg and dbeta rest on are hi + lo planes too
// (products of one-plane inputs with them take 2 mmas, of two such operands 3): prep: H in
// K H, KHg, Linv; final: Linv, T, Y, dΔ, Δ, Δh = diag(hdec) Δ, H, dH', dT, Z. Still one bf16
// plane with bf16 inputs: W, T, diag(gamma) K, P in prep; dH', gamma dO, -dΔ in the scan; dQK,
// X, -γdV in the final kernel (a float64 emulation of every rounding point, on the test
// inputs, ranked these below the ones above for dg; the final kernel has no shared memory
// left for them at Dk >= 128, and the scan, the sequential part, was left as it was).
// Workspace (gdn_chunk_bwd_workspace_bytes) holds, per chunk: Hs, dH' (fp32 Dk x Dv), dΔ (fp32
// C x Dv), P|AK (fp32 C x C), Linv (2 planes C x C), W (NP planes
// C x Dk), KHg (2 planes C x Dv); on the recompute path only Hs, dH', P (one bf16 plane
// C x C), Linv and W.
#include "gdn_bwd_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <cuda_bf16.h>

#include "../core/cuda_check.h"
#include "../cuda/mma.cuh"
#include "../cuda/wgmma.cuh"

namespace {

using namespace gdnk;
using bf16 = __nv_bfloat16;

constexpr int SMEM_MAX = 232448;  // dynamic shared memory per block on sm_90 (227 KiB)
constexpr int SMEM_SM = 233472;   // shared memory per SM on sm_90 (228 KiB; 1 KiB of it per CTA)
constexpr int cmax(int a, int b) { return a > b ? a : b; }
// bf16 inputs with Dk <= 128 (the final kernel takes all key columns in one pass): the final
// kernel recomputes P, Gam ⊙ KK^T, KHg and dΔ from what it has on chip instead of reading them
// from the workspace, prep2 runs instead of prep (no H, no dO: it writes P's bf16 plane), and
// the scan forms dΔ_loc = P^T dO itself. Dk 256 and fp32 keep them in the workspace (prep).
// The host asks the same (gdn_bwd_rc).
__host__ __device__ constexpr bool recompute_path(int DK, int NP) { return NP == 1 && DK <= 128; }

// Everything a kernel reads: the caller's params and the carved workspace.
struct bwd_args {
    gdn_bwd_params p;
    int NC;              // chunks per sequence
    const float *Hs;     // (B,H,NC,Dk,Dv) chunk-start states (forward or recomputed)
    float *dHs;          // (B,H,NC,Dk,Dv) gradient of each chunk's end state (scan -> final)
    float *dD;           // (B,H,NC,C,Dv) dΔ_loc (prep) -> dΔ (scan) -> read by final; NULL
                         // on the recompute path (dΔ_loc, dΔ formed by each kernel)
    float *PA;           // (B,H,NC,C,C) lower incl. diag: Gam ⊙ QK^T; strictly upper [j][i]:
                         // (Gam ⊙ KK^T)_ij (prep -> final); NULL on the recompute path
    bf16 *Lv;            // (B,H,NC,2,C,C) Linv hi + lo planes, any dtype (prep -> final)
    bf16 *Wp;            // (B,H,NC,NP,C,Dk) W planes (prep -> scan)
    bf16 *Kp;            // (B,H,NC,2,C,Dv) KHg = diag(gamma) K H hi + lo planes, any dtype
                         // (prep -> final, which forms Y = V - KHg in fp32 and takes
                         // gamma k.dKg = -KHg.dV from it); NULL on the recompute path
    bf16 *Pp;            // (B,H,NC,C,C) P = Gam ⊙ QK^T, prep2's bf16 mma operand as it is
                         // (prep2 -> scan, which forms dΔ_loc = P^T dO from it); NULL off the
                         // recompute path
};

// ---- input / output element pairs (bf16 when NP == 1, fp32 when NP == 2) --------------------
template <int NP>
__device__ __forceinline__ float2 ld_in2(const void *base, size_t off) {
    if constexpr (NP == 1) {
        const __nv_bfloat162 v = *((const __nv_bfloat162 *)((const bf16 *)base + off));
        return make_float2(__low2float(v), __high2float(v));
    } else {
        return *(const float2 *)((const float *)base + off);
    }
}
template <int NP>
__device__ __forceinline__ void st_out2(void *base, size_t off, float x0, float x1) {
    if constexpr (NP == 1)
        *(__nv_bfloat162 *)((bf16 *)base + off) = __floats2bfloat162_rn(x0, x1);
    else
        *(float2 *)((float *)base + off) = make_float2(x0, x1);
}
// (x0, x1) into global planes: plane 0 at base + off, plane 1 pl elements further
template <int NP>
__device__ __forceinline__ void stg_pair(bf16 *base, size_t pl, size_t off, float x0, float x1) {
    if constexpr (NP == 2) {
        uint32_t hi, lo;
        split2(x0, x1, hi, lo);
        *(uint32_t *)(base + off) = hi;
        *(uint32_t *)(base + pl + off) = lo;
    } else {
        *(uint32_t *)(base + off) = pack_bf16(x0, x1);
    }
}
// (x0, x1) from global planes (hi + lo when NP == 2)
template <int NP>
__device__ __forceinline__ float2 kp_pair(const bf16 *base, size_t pl, size_t off) {
    const __nv_bfloat162 h = *(const __nv_bfloat162 *)(base + off);
    float2 x = make_float2(__low2float(h), __high2float(h));
    if constexpr (NP == 2) {
        const __nv_bfloat162 l = *(const __nv_bfloat162 *)(base + pl + off);
        x.x += __low2float(l);
        x.y += __high2float(l);
    }
    return x;
}
__device__ __forceinline__ float quad_sum(float x) {  // sum over the 4 lanes of one row
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}
// KHg pair from its hi + lo bf16 pairs (as kp_pair<2>, split into load and sum)
__device__ __forceinline__ float2 kp_sum2(uint32_t hi, uint32_t lo) {
    const __nv_bfloat162 h = *(const __nv_bfloat162 *)&hi, l = *(const __nv_bfloat162 *)&lo;
    float2 x = make_float2(__low2float(h), __high2float(h));
    x.x += __low2float(l);
    x.y += __high2float(l);
    return x;
}
// fp32 pair at p (8-byte aligned) as one 8-byte load: as a float2 the scan's shared-memory
// read was split into two 4-byte loads (the alignment was lost in the address arithmetic)
__device__ __forceinline__ float2 ld_f2_once(const unsigned char *p) {
    const unsigned long long u = *(const unsigned long long *)p;
    return make_float2(__uint_as_float((uint32_t)u), __uint_as_float((uint32_t)(u >> 32)));
}
// ROWS rows of RB bytes (global row stride rs bytes) -> shared memory at dst (pitch pb bytes),
// 16 bytes per cp.async, NTHR threads; rows >= nvalid zero-filled. src, rs, dst, pb: 16-aligned.
template <int ROWS, int RB, int NTHR>
__device__ __forceinline__ void cp_rows16(uint32_t dst, int pb, const unsigned char *src, size_t rs,
                                          int nvalid, int tid) {
    constexpr int PR = RB / 16;  // pieces per row
    static_assert(RB % 16 == 0 && ROWS * PR % NTHR == 0, "cp_rows16: whole pieces per thread");
#pragma unroll 1  // unrolled, the per-piece addresses get hoisted out of the chunk loop: spills
    for (int k = 0; k < ROWS * PR / NTHR; ++k) {
        const int i = tid + k * NTHR, r = i / PR, c = (i % PR) * 16;
        const bool ok = r < nvalid;
        cp_async16(dst + r * pb + c, ok ? src + r * rs + c : src, ok ? 16 : 0);
    }
}
// EPT/2 fp32 pairs (x0, x1 from x[2k], x[2k + 1]) -> NP bf16 planes at sm + off (plane
// distance pl), the arithmetic of st_pair<NP>, stored 8 or 16 bytes at a time (off aligned so)
template <int NP, int EPT>
__device__ __forceinline__ void st_run(unsigned char *sm, int off, int pl, const float (&x)[EPT]) {
    static_assert(EPT % 4 == 0, "st_run: whole 8-byte pieces");
    uint32_t hi[EPT / 2], lo[EPT / 2];
#pragma unroll
    for (int k = 0; k < EPT / 2; ++k) {
        if constexpr (NP == 2) split2(x[2 * k], x[2 * k + 1], hi[k], lo[k]);
        else hi[k] = pack_bf16(x[2 * k], x[2 * k + 1]);
    }
#pragma unroll
    for (int k = 0; k < EPT / 2; k += EPT % 8 == 0 ? 4 : 2) {
        if constexpr (EPT % 8 == 0) {
            *(uint4 *)(sm + off + k * 4) = make_uint4(hi[k], hi[k + 1], hi[k + 2], hi[k + 3]);
            if constexpr (NP == 2)
                *(uint4 *)(sm + off + pl + k * 4) =
                    make_uint4(lo[k], lo[k + 1], lo[k + 2], lo[k + 3]);
        } else {
            *(uint2 *)(sm + off + k * 4) = make_uint2(hi[k], hi[k + 1]);
            if constexpr (NP == 2) *(uint2 *)(sm + off + pl + k * 4) = make_uint2(lo[k], lo[k + 1]);
        }
    }
}
// 4 consecutive inputs (bf16 when NP == 1, fp32 when NP == 2) from shared memory at p (8- or
// 16-byte aligned)
template <int NP>
__device__ __forceinline__ float4 ld_in4(const unsigned char *p) {
    if constexpr (NP == 1) {
        const uint2 u = *(const uint2 *)p;
        const __nv_bfloat162 lo = *(const __nv_bfloat162 *)&u.x, hi = *(const __nv_bfloat162 *)&u.y;
        return make_float4(__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi));
    } else {
        return *(const float4 *)p;
    }
}
// 4 raw inputs at sm + src -> NP bf16 planes at sm + dst: bf16 copied as they are, fp32 split
// as st_pair<2> splits
template <int NP>
__device__ __forceinline__ void in4_planes(unsigned char *sm, int dst, int pl, int src) {
    if constexpr (NP == 1) {
        *(uint2 *)(sm + dst) = *(const uint2 *)(sm + src);
    } else {
        const float4 v = *(const float4 *)(sm + src);
        const float x[4] = {v.x, v.y, v.z, v.w};
        st_run<2, 4>(sm, dst, pl, x);
    }
}

// =============================================================================================
// prep: per chunk, 4 warps; warp w owns rows [16w, 16w + 16) of every C-row result. Off the
// recompute path only (fp32, Dk 256): prep2 takes the recompute path.
// =============================================================================================
template <int DK, int NP>
struct prep_layout {
    static_assert(!recompute_path(DK, NP), "prep: off the recompute path (prep2 takes it)");
    static constexpr int VB = NP == 1 ? 64 : 32;       // value columns per block of Y, dΔ_loc
    static constexpr int PBK = (DK + 8) * 2, QK_PL = C * PBK;
    static constexpr int PBC = (C + 8) * 2, CC_PL = C * PBC;
    static constexpr int PBV = (VB + 8) * 2, HB_PL = DK * PBV, DO_PL = C * PBV;
    static constexpr int PA = C + 4;                   // fp32 pitch of A / Linv
    static constexpr int HP = 2;                       // H planes: hi + lo also for bf16 inputs
    // region 0: Q, then diag(gamma) K (after P), then H and dO blocks (after W)
    static constexpr int R0 = cmax(NP * QK_PL, HP * HB_PL + NP * DO_PL);
    static constexpr int Q = 0, KG = 0, HB = 0, DO = HP * HB_PL;
    static constexpr int K = R0;
    static constexpr int A = K + NP * QK_PL;
    static constexpr int T = A + C * PA * 4;
    static constexpr int P = T + NP * CC_PL;
    static constexpr int GB = P + NP * CC_PL;          // g[C], beta[C]
    static constexpr int GS = GB + 2 * C * 4;          // Gh, Gl, gam, hdec [C]
    static constexpr int BYTES = GS + 4 * C * 4;
    static_assert(BYTES <= SMEM_MAX, "prep shared memory");
};

// Warp `warp`'s 16 rows (m0..) of Q K^T into aq and, with delta, of K K^T into ak, over the key
// columns, for the column blocks np <= warp (the lower triangle; prep, prep2).
template <int DK, int NP>
__device__ __forceinline__ void qk_kk_products(float (&aq)[8][4], float (&ak)[8][4], const smat &sQ,
                                               const smat &sK, int m0, int warp, int lane, bool delta) {
    for (int kk = 0; kk < DK; kk += 16) {
        uint32_t fq[NP][4], fk[NP][4] = {};
        lda<NP>(fq, sQ, m0, kk, lane);
        if (delta) lda<NP>(fk, sK, m0, kk, lane);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            if (np <= warp) {
                uint32_t fb[NP][4];
                ldb<NP>(fb, sK, np * 16, kk, lane);
                mma_p<0, NP>(aq[2 * np], fq, fb);
                mma_p<1, NP>(aq[2 * np + 1], fq, fb);
                if (delta) {
                    mma_p<0, NP>(ak[2 * np], fk, fb);
                    mma_p<1, NP>(ak[2 * np + 1], fk, fb);
                }
            }
        }
    }
}

// Asm (C x C fp32, row pitch PA, strictly lower A, read by rows) -> Linv = (I + A)^{-1} in place:
// thread c < C solves column c by forward substitution in fp32; the CTA's barriers order the
// reads of A before the write-back and the write-back before any later reader (prep, prep2).
template <int PA>
__device__ __forceinline__ void invert_unit_lower(float *Asm, int tid) {
    float x[C];
    if (tid < C) {
#pragma unroll
        for (int r = 0; r < C; ++r) {
            const float *Ar = Asm + r * PA;
            float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
            for (int j = 0; j + 3 < r; j += 4) {
                const float4 av = *(const float4 *)(Ar + j);
                s0 += av.x * x[j];
                s1 += av.y * x[j + 1];
                s2 += av.z * x[j + 2];
                s3 += av.w * x[j + 3];
            }
#pragma unroll
            for (int j = r & ~3; j < r; ++j) s0 += Ar[j] * x[j];
            x[r] = (r == tid ? 1.f : 0.f) - ((s0 + s1) + (s2 + s3));
        }
    }
    __syncthreads();  // every read of A is done
    if (tid < C) {
#pragma unroll
        for (int r = 0; r < C; ++r) Asm[r * PA + tid] = x[r];
    }
    __syncthreads();
}

template <int DK, int NP>
__global__ void __launch_bounds__(128) gdn_bwd_prep_kernel(const __grid_constant__ bwd_args a) {
    using L = prep_layout<DK, NP>;
    constexpr int VB = L::VB, NTV = VB / 8;
    extern __shared__ __align__(128) unsigned char sm[];
    const gdn_bwd_params &p = a.p;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, m0 = warp * 16;
    const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, DV = p.Dv, NC = a.NC;
    const int t0 = n * C, nvalid = min(C, T - t0);
    const bool delta = p.mode.delta, gate = p.mode.gate;
    const size_t row0 = ((size_t)b * T + t0) * H + h;  // token row of (b, t0, h)
    const size_t cix = ((size_t)b * H + h) * NC + n;     // chunk tile index
    const size_t rsk = (size_t)H * DK, rsv = (size_t)H * DV;
    const size_t esz = NP == 1 ? 2 : 4;
    const unsigned char *qg = (const unsigned char *)p.q + row0 * DK * esz;
    const unsigned char *kg = (const unsigned char *)p.k + row0 * DK * esz;
    const unsigned char *dog = (const unsigned char *)p.dO + row0 * DV * esz;

    float *gsm = (float *)(sm + L::GB), *bsm = gsm + C;
    float *Gh = (float *)(sm + L::GS), *Gl = Gh + C, *gam = Gl + C, *hdec = gam + C;
    float *Asm = (float *)(sm + L::A);
    const uint32_t sb = smem_u32(sm);
    const smat sQ{sb + L::Q, L::PBK, L::QK_PL}, sK{sb + L::K, L::PBK, L::QK_PL};
    const smat sKG{sb + L::KG, L::PBK, L::QK_PL};
    const smat sT{sb + L::T, L::PBC, L::CC_PL}, sP{sb + L::P, L::PBC, L::CC_PL};
    const smat sH{sb + L::HB, L::PBV, L::HB_PL}, sDO{sb + L::DO, L::PBV, L::DO_PL};

    load_in_rows<NP>(sm, L::Q, L::PBK, L::QK_PL, qg, rsk, C, DK, nvalid, tid, 128);
    load_in_rows<NP>(sm, L::K, L::PBK, L::QK_PL, kg, rsk, C, DK, nvalid, tid, 128);
    if (tid < C) {
        const bool ok = tid < nvalid;
        gsm[tid] = ok && gate ? p.g[row0 + (size_t)tid * H] : 0.f;
        bsm[tid] = ok && delta ? p.beta[row0 + (size_t)tid * H] : 0.f;
    }
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    if (warp == 0) gates_warp(gsm, Gh, Gl, gam, hdec, lane);
    __syncthreads();

    // ---- P = Gam ⊙ Q K^T (lower), A = strictLower(beta_i Gam ⊙ K K^T) ------------------------
    float *PAg = a.PA + cix * C * C;
    {
        float aq[8][4] = {}, ak[8][4] = {};
        qk_kk_products<DK, NP>(aq, ak, sQ, sK, m0, warp, lane, delta);
        frag_each<8>(aq, m0, 0, lane, [&](int i, int j, float x0, float x1) {
            const float p0 = x0 * gam_ij(Gh, Gl, i, j), p1 = x1 * gam_ij(Gh, Gl, i, j + 1);
            st_pair<NP>(sm, L::P + i * L::PBC + j * 2, L::CC_PL, p0, p1);
            if (j <= i) PAg[i * C + j] = p0;
            if (j + 1 <= i) PAg[i * C + j + 1] = p1;
        });
        if (delta)
            frag_each<8>(ak, m0, 0, lane, [&](int i, int j, float x0, float x1) {
                const float a0 = j < i ? x0 * gam_ij(Gh, Gl, i, j) : 0.f;
                const float a1 = j + 1 < i ? x1 * gam_ij(Gh, Gl, i, j + 1) : 0.f;
                *(float2 *)(Asm + i * L::PA + j) = make_float2(bsm[i] * a0, bsm[i] * a1);
                if (j < i) PAg[j * C + i] = a0;
                if (j + 1 < i) PAg[(j + 1) * C + i] = a1;
            });
    }
    __syncthreads();

    if (delta) {
        invert_unit_lower<L::PA>(Asm, tid);  // Asm: A -> Linv = (I + A)^{-1}
        // Linv -> global (hi + lo); T = Linv diag(beta) -> smem; diag(gamma) K -> Q's buffer
        bf16 *Lg = a.Lv + cix * 2 * C * C;
        for (int e = tid; e < C * C / 2; e += 128) {
            const int i = e / (C / 2), j = (e % (C / 2)) * 2;
            const float2 l = *(const float2 *)(Asm + i * L::PA + j);
            stg_pair<2>(Lg, (size_t)C * C, (size_t)i * C + j, l.x, l.y);
            st_pair<NP>(sm, L::T + i * L::PBC + j * 2, L::CC_PL, l.x * bsm[j], l.y * bsm[j + 1]);
        }
        for (int e = tid; e < C * DK / 2; e += 128) {
            const int i = e / (DK / 2), j = (e % (DK / 2)) * 2;
            const float2 kv = ld_pair<NP>(sm, L::K + i * L::PBK + j * 2, L::QK_PL);
            st_pair<NP>(sm, L::KG + i * L::PBK + j * 2, L::QK_PL, gam[i] * kv.x, gam[i] * kv.y);
        }
        __syncthreads();
        // ---- W = T diag(gamma) K -> global planes --------------------------------------------
        bf16 *Wg = a.Wp + cix * NP * C * DK;
        for (int cb = 0; cb < DK; cb += 64) {
            float acc[8][4] = {};
            wmm<NP, false, true, 8>(acc, sT, sKG, m0, cb, 0, m0 + 16, lane);
            frag_each<8>(acc, m0, cb, lane, [&](int i, int j, float x0, float x1) {
                stg_pair<NP>(Wg, (size_t)C * DK, (size_t)i * DK + j, x0, x1);
            });
        }
    }
    __syncthreads();  // region 0 is reused for H and dO blocks

    // ---- per value block: KHg = diag(gamma) K H (H as hi + lo), dΔ_loc = P^T dO ----------------
    for (int v0 = 0; v0 < DV; v0 += VB) {
        if (delta)
            cvt_rows_f32<L::HP>(sm, L::HB, L::PBV, L::HB_PL, a.Hs + cix * DK * DV + v0, DV, DK,
                                VB, DK, tid, 128);
        load_in_rows<NP>(sm, L::DO, L::PBV, L::DO_PL, dog + v0 * esz, rsv, C, VB, nvalid, tid,
                         128);
        cp_async_commit();
        cp_async_wait_all();
        __syncthreads();
        if (delta) {
            float acc[NTV][4] = {};
            wmm<NP, false, true, NTV, L::HP>(acc, sK, sH, m0, 0, 0, DK, lane);
            bf16 *Kg = a.Kp + cix * 2 * C * DV;
            frag_each<NTV>(acc, m0, 0, lane, [&](int i, int j, float x0, float x1) {
                stg_pair<2>(Kg, (size_t)C * DV, (size_t)i * DV + v0 + j, gam[i] * x0,
                            gam[i] * x1);
            });
        }
        {
            float acc[NTV][4] = {};
            wmm<NP, true, true, NTV>(acc, sP, sDO, m0, 0, m0, C, lane);
            float *dDg = a.dD + cix * C * DV + v0;  // row stride Dv
            frag_each<NTV>(acc, m0, 0, lane, [&](int i, int j, float x0, float x1) {
                *(float2 *)(dDg + (size_t)i * DV + j) = make_float2(x0, x1);
            });
        }
        __syncthreads();
    }
}

// =============================================================================================
// prep2 (the recompute path: bf16, Dk <= 128): prep's arithmetic in prep's order (bitwise its
// results) in less shared memory, so that 4 CTAs share an SM at Dk 128 (prep would have 72 KB:
// 3; prep2 55 KB, and __launch_bounds__(128, 4) keeps the registers at <= 128), and instead of
// dΔ_loc = P^T dO, P's bf16 plane (the A operand of that product, exactly as the mma reads it)
// -> a.Pp: the scan forms P^T dO for its value columns with the same wmm call (the same
// fragments, k from 16 w, each n-tile's accumulation alone: the same fp32 bits); prep2 never
// reads dO.
//   - A (fp32 C x C) lives in region 0 once every warp has read Q (one more barrier between the
//     P/A mma and the A epilogue), not in a region of its own;
//   - diag(gamma) K is formed in K's own buffer (each thread rewrites the pairs it read; the
//     recompute path never reads K again), so region 0 is free after the Linv / T loop;
//   - warp 0 forms the gates while Q and K are still in flight (prep waits for them first).
// =============================================================================================
template <int DK, int NP>
struct prep2_layout {
    static_assert(recompute_path(DK, NP), "prep2: the recompute path only");
    static constexpr int PBK = (DK + 8) * 2, QK_PL = C * PBK;
    static constexpr int PBC = (C + 8) * 2, CC_PL = C * PBC;
    static constexpr int PA = C + 4;                       // fp32 pitch of A / Linv
    // region 0: Q, then A / Linv (fp32). DOB: the two 64-column dO blocks region 0 also held
    // while prep2 formed dΔ_loc (until session 15), kept in its size so that the layout (and the
    // tested PTX) stays as it was; 1 KB at Dk 64 and 128, no CTA per SM to gain.
    static constexpr int DOB = 2 * NP * C * (64 + 8) * 2;
    static constexpr int R0 = cmax(cmax(NP * QK_PL, C * PA * 4), DOB);
    static constexpr int Q = 0, A = 0;
    static constexpr int K = R0;                           // K, then diag(gamma) K
    static constexpr int T = K + NP * QK_PL;
    static constexpr int P = T + NP * CC_PL;
    static constexpr int GB = P + NP * CC_PL;              // g[C], beta[C]
    static constexpr int GS = GB + 2 * C * 4;              // Gh, Gl, gam, hdec [C]
    static constexpr int BYTES = GS + 4 * C * 4;
    static_assert(BYTES <= SMEM_MAX, "prep2 shared memory");
    static_assert(DK > 128 || BYTES + 1024 <= SMEM_SM / 4, "prep2: 4 CTAs per SM");
};

template <int DK, int NP>
__global__ void __launch_bounds__(128, 4) gdn_bwd_prep2_kernel(const __grid_constant__ bwd_args a) {
    using L = prep2_layout<DK, NP>;
    extern __shared__ __align__(128) unsigned char sm[];
    const gdn_bwd_params &p = a.p;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, m0 = warp * 16;
    const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, NC = a.NC;
    const int t0 = n * C, nvalid = min(C, T - t0);
    const bool delta = p.mode.delta, gate = p.mode.gate;
    const size_t row0 = ((size_t)b * T + t0) * H + h;  // token row of (b, t0, h)
    const size_t cix = ((size_t)b * H + h) * NC + n;     // chunk tile index
    const size_t rsk = (size_t)H * DK;
    const size_t esz = NP == 1 ? 2 : 4;
    const unsigned char *qg = (const unsigned char *)p.q + row0 * DK * esz;
    const unsigned char *kg = (const unsigned char *)p.k + row0 * DK * esz;

    float *gsm = (float *)(sm + L::GB), *bsm = gsm + C;
    float *Gh = (float *)(sm + L::GS), *Gl = Gh + C, *gam = Gl + C, *hdec = gam + C;
    float *Asm = (float *)(sm + L::A);
    const uint32_t sb = smem_u32(sm);
    const smat sQ{sb + L::Q, L::PBK, L::QK_PL}, sK{sb + L::K, L::PBK, L::QK_PL};
    const smat sT{sb + L::T, L::PBC, L::CC_PL};

    load_in_rows<NP>(sm, L::Q, L::PBK, L::QK_PL, qg, rsk, C, DK, nvalid, tid, 128);
    load_in_rows<NP>(sm, L::K, L::PBK, L::QK_PL, kg, rsk, C, DK, nvalid, tid, 128);
    cp_async_commit();
    if (tid < C) {
        const bool ok = tid < nvalid;
        gsm[tid] = ok && gate ? p.g[row0 + (size_t)tid * H] : 0.f;
        bsm[tid] = ok && delta ? p.beta[row0 + (size_t)tid * H] : 0.f;
    }
    __syncthreads();  // g, beta are in (Q, K may still be in flight: the gates do not wait)
    if (warp == 0) gates_warp(gsm, Gh, Gl, gam, hdec, lane);
    cp_async_wait_all();
    __syncthreads();

    // ---- P = Gam ⊙ Q K^T (lower), A = strictLower(beta_i Gam ⊙ K K^T) ------------------------
    {
        float aq[8][4] = {}, ak[8][4] = {};
        qk_kk_products<DK, NP>(aq, ak, sQ, sK, m0, warp, lane, delta);
        frag_each<8>(aq, m0, 0, lane, [&](int i, int j, float x0, float x1) {
            const float p0 = x0 * gam_ij(Gh, Gl, i, j), p1 = x1 * gam_ij(Gh, Gl, i, j + 1);
            st_pair<NP>(sm, L::P + i * L::PBC + j * 2, L::CC_PL, p0, p1);
        });
        if (delta) {
            __syncthreads();  // every warp has read Q: A takes region 0
            frag_each<8>(ak, m0, 0, lane, [&](int i, int j, float x0, float x1) {
                const float a0 = j < i ? x0 * gam_ij(Gh, Gl, i, j) : 0.f;
                const float a1 = j + 1 < i ? x1 * gam_ij(Gh, Gl, i, j + 1) : 0.f;
                *(float2 *)(Asm + i * L::PA + j) = make_float2(bsm[i] * a0, bsm[i] * a1);
            });
        }
    }
    __syncthreads();
    {  // P's plane (C rows of C bf16) -> a.Pp, 16 bytes a store
        static_assert(NP == 1, "prep2: one P plane");
        bf16 *Pg = a.Pp + cix * C * C;
        for (int e = tid; e < C * C / 8; e += 128) {
            const int r = e / (C / 8), c = (e % (C / 8)) * 8;
            *(uint4 *)(Pg + r * C + c) = *(const uint4 *)(sm + L::P + r * L::PBC + c * 2);
        }
    }

    if (delta) {
        invert_unit_lower<L::PA>(Asm, tid);  // Asm: A -> Linv = (I + A)^{-1}
        // Linv -> global (hi + lo); T = Linv diag(beta) -> smem; diag(gamma) K over K
        bf16 *Lg = a.Lv + cix * 2 * C * C;
        for (int e = tid; e < C * C / 2; e += 128) {
            const int i = e / (C / 2), j = (e % (C / 2)) * 2;
            const float2 l = *(const float2 *)(Asm + i * L::PA + j);
            stg_pair<2>(Lg, (size_t)C * C, (size_t)i * C + j, l.x, l.y);
            st_pair<NP>(sm, L::T + i * L::PBC + j * 2, L::CC_PL, l.x * bsm[j], l.y * bsm[j + 1]);
        }
        for (int e = tid; e < C * DK / 2; e += 128) {
            const int i = e / (DK / 2), j = (e % (DK / 2)) * 2;
            const float2 kv = ld_pair<NP>(sm, L::K + i * L::PBK + j * 2, L::QK_PL);
            st_pair<NP>(sm, L::K + i * L::PBK + j * 2, L::QK_PL, gam[i] * kv.x, gam[i] * kv.y);
        }
        __syncthreads();  // T and diag(gamma) K are in; A is no longer read
        // ---- W = T diag(gamma) K -> global planes --------------------------------------------
        bf16 *Wg = a.Wp + cix * NP * C * DK;
        for (int cb = 0; cb < DK; cb += 64) {
            float acc[8][4] = {};
            wmm<NP, false, true, 8>(acc, sT, sK, m0, cb, 0, m0 + 16, lane);
            frag_each<8>(acc, m0, cb, lane, [&](int i, int j, float x0, float x1) {
                stg_pair<NP>(Wg, (size_t)C * DK, (size_t)i * DK + j, x0, x1);
            });
        }
    }
}

// =============================================================================================
// scan: per (b, h, block of DVB value columns), 4 warps, chunks in reverse order.
// dH (Dk x DVB) lives in fp32 accumulators: warp w owns rows [w Dk/4, (w+1) Dk/4).
// =============================================================================================
// CTAs of one SM by shared memory, at most rcta (the registers' bound)
constexpr int scan_ctas(int bytes, int rcta) {
    return SMEM_SM / (bytes + 1024) < rcta ? SMEM_SM / (bytes + 1024) : rcta;
}
// SMAX: the most stages (chunk sets in flight) the launcher allows: 2 when the grid leaves SMs
// idle (one CTA per SM, the next chunk's loads behind this one's work), 1 when the grid is
// larger than the SMs (70 KB at Dk 128, DVB 64: two CTAs per SM hide each other's latency).
// SD (the recompute path; false there only in scan_pipe_ok's criterion): the set holds P (bf16
// C x C, pitch PDD, from prep2) in place of the fp32 dΔ_loc rows, and is always staged (PF). Each
// warp forms its own dΔ_loc rows (16 w..) from P and the set's dO rows with prep's wmm call, in
// registers. (Splitting that product evenly over the warps through an fp32 shared tile ran at
// the same speed, s14a.)
// scan_sets: the stage count S and staging PF; scan_layout: the offsets (SD on the recompute path)
template <int DK, int DVB, int NP, int SMAX, bool SD>
struct scan_sets {
    static constexpr int PBK = (DK + 8) * 2, QK_PL = C * PBK;
    static constexpr int PBV = (DVB + 8) * 2;
    static constexpr int RG_BYTES = NP * PBV * cmax(DK, 2 * C);
    static constexpr int WG = 4 * 4 * C * 4;                 // per warp: Gh, Gl, gam, hdec
    static constexpr int SET0 = 3 * NP * QK_PL + C * 4;      // Q, K, W planes + g of one chunk
    static constexpr int S = SMAX >= 2 && 2 * SET0 + RG_BYTES + WG <= SMEM_MAX ? 2 : 1;  // stages
    // PF: a chunk's dΔ_loc (fp32) and dO (input dtype) rows of the block come by cp.async into
    // its set (raw, padded pitches PDD, PDO: conflict-free 8-byte reads) in the commit group of
    // its Q, K, W. Only where that keeps the stage count and, with one stage (grid > SMs), the
    // CTAs per SM the kernel had without it (RCTA: without PF the registers allowed 2 at DVB 64,
    // 231-253 a thread; for the other DVBs the shared-memory count is compared). Two stages run
    // at most one CTA per SM from the launcher, unless scan_stages = 2 is forced.
    static constexpr int PDD = SD ? (C + 8) * 2 : (DVB + 8) * 4, PDO = (DVB + 8) * 2 * NP;
    static constexpr int XB = C * (PDD + PDO), RCTA = DVB == 64 ? 2 : 8;
    static constexpr int BYTES0 = S * SET0 + RG_BYTES + WG;
    static constexpr bool PF1 = BYTES0 + XB <= SMEM_MAX &&  // one stage
                                scan_ctas(BYTES0 + XB, RCTA) >= scan_ctas(BYTES0, RCTA);
    static constexpr bool PF = SD       ? true  // (scan_layout checks BYTES)
                               : S == 2 ? 2 * (SET0 + XB) + RG_BYTES + WG <= SMEM_MAX
                                        : PF1;
};
template <int DK, int DVB, int NP, int SMAX>
struct scan_layout : scan_sets<DK, DVB, NP, SMAX, recompute_path(DK, NP)> {
    using B = scan_sets<DK, DVB, NP, SMAX, recompute_path(DK, NP)>;
    static constexpr int SET = B::SET0 + (B::PF ? B::XB : 0);
    static constexpr int Q = 0, K = NP * B::QK_PL, W = 2 * NP * B::QK_PL, G = SET - C * 4;
    static constexpr int DDR = 3 * NP * B::QK_PL, DOR = DDR + C * B::PDD;  // (PF only)
    // region: dH' planes (Dk rows) while dΔ is formed; then gamma dO and -dΔ planes (C rows)
    static constexpr int RG = B::S * SET;
    static constexpr int DH = RG, DH_PL = DK * B::PBV;
    static constexpr int DO = RG, DO_PL = C * B::PBV;
    static constexpr int DD = RG + NP * C * B::PBV;
    static constexpr int WGO = RG + B::RG_BYTES;
    static constexpr int BYTES = WGO + B::WG;
    static_assert(BYTES <= SMEM_MAX, "scan shared memory");
    static_assert(SET % 16 == 0 && B::PDD % 16 == 0 && B::PDO % 16 == 0 && DOR % 16 == 0,
                  "scan: 16-byte cp.async destinations");
};

// PIPE (one stage with PF, bf16: where scan_pipe_ok): the same arithmetic in the same order
// (bitwise the PIPE = false results), the loads of chunk n - 1 split by when their buffers
// fall free in chunk n, so that none of them is waited for right after it is issued:
//   group A: K and g of n - 1, issued after the barrier behind (1) (K dH' and gates_warp are the
//            only readers of K and g); waited for at the top of n - 1
//   group B: dΔ_loc and dO of n - 1 (PF), issued after the barrier behind the dΔ epilogue, as
//            before; waited for at the top of n - 1
//   group C: Q and W of n - 1, issued after the barrier behind (2) (their only reader); waited
//            for just before the barrier in front of (2) of n - 1
// Every iteration commits A, B, C (empty at n = 0), so the pending groups are [A, B, C] at the
// top (wait_group 1: A and B complete) and [C, A'] before (2) (wait_group 1: C complete).
// gates_warp runs after (1) is issued (its results are read only by the epilogue of (1)).
template <int DK, int DVB, int NP, int SMAX, bool PIPE = false>
__global__ void __launch_bounds__(128) gdn_bwd_scan_kernel(const __grid_constant__ bwd_args a) {
    using L = scan_layout<DK, DVB, NP, SMAX>;
    static_assert(!PIPE || (L::S == 1 && L::PF && NP == 1), "scan PIPE: one stage, PF, bf16");
    constexpr int NTHR = 128;
    constexpr int MT = DK / 64, NTV = DVB / 8, RW = DK / 4;  // m-tiles, n-tiles, rows per warp
    constexpr bool RC = recompute_path(DK, NP);
    constexpr bool SD = RC;  // dΔ_loc = P^T dO from prep2's P (scan_layout's)
    static_assert(!SD || L::PF, "scan SD: staged sets");
    extern __shared__ __align__(128) unsigned char sm[];
    const gdn_bwd_params &p = a.p;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g4 = lane >> 2, t4 = lane & 3;
    const int v0 = blockIdx.x * DVB, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, DV = p.Dv, NC = a.NC;
    const bool delta = p.mode.delta, gate = p.mode.gate;
    const size_t bh = (size_t)b * H + h;
    const size_t rsk = (size_t)H * DK, rsv = (size_t)H * DV;
    const size_t esz = NP == 1 ? 2 : 4;
    const uint32_t sb = smem_u32(sm);
    float *wgs = (float *)(sm + L::WGO) + warp * 4 * C;
    float *Gh = wgs, *Gl = wgs + C, *gam = wgs + 2 * C, *hdec = wgs + 3 * C;
    const smat sDH{sb + L::DH, L::PBV, L::DH_PL};
    const smat sDO{sb + L::DO, L::PBV, L::DO_PL}, sDD{sb + L::DD, L::PBV, L::DO_PL};

    auto stage = [&](int n) { return L::S == 2 ? (n & 1) * L::SET : 0; };
    // chunk ci's dΔ_loc (row stride Dv; not SD)
    auto dd_loc = [&](size_t ci) { return a.dD + ci * C * DV; };
    // (PIPE) chunk n's K and g (group A), Q and W (group C): the parts of load_chunk, the same
    // copies
    auto load_kg = [&](int n) {
        const int t0 = n * C, nv = min(C, T - t0), st = stage(n);
        const size_t row0 = ((size_t)b * T + t0) * H + h;
        load_in_rows<NP>(sm, st + L::K, L::PBK, L::QK_PL,
                         (const unsigned char *)p.k + row0 * DK * esz, rsk, C, DK, nv, tid, NTHR);
        if (tid < C) {
            const bool ok = tid < nv && gate;
            cp_async4(sb + st + L::G + tid * 4, ok ? p.g + row0 + (size_t)tid * H : RC ? a.dHs : a.dD,
                      ok ? 4 : 0);
        }
    };
    auto load_qw = [&](int n) {
        const int t0 = n * C, nv = min(C, T - t0), st = stage(n);
        const size_t row0 = ((size_t)b * T + t0) * H + h;
        load_in_rows<NP>(sm, st + L::Q, L::PBK, L::QK_PL,
                         (const unsigned char *)p.q + row0 * DK * esz, rsk, C, DK, nv, tid, NTHR);
        if (delta) {
            const bf16 *Wg = a.Wp + (bh * NC + n) * NP * C * DK;
#pragma unroll
            for (int pl = 0; pl < NP; ++pl)
                cp_rows_bf16(sb + st + L::W + pl * L::QK_PL, L::PBK, Wg + (size_t)pl * C * DK, DK,
                             C, DK, C, tid, NTHR);
        }
    };
    auto load_chunk = [&](int n) {
        const int t0 = n * C, nv = min(C, T - t0), st = stage(n);
        const size_t row0 = ((size_t)b * T + t0) * H + h;
        load_in_rows<NP>(sm, st + L::Q, L::PBK, L::QK_PL,
                         (const unsigned char *)p.q + row0 * DK * esz, rsk, C, DK, nv, tid, NTHR);
        load_in_rows<NP>(sm, st + L::K, L::PBK, L::QK_PL,
                         (const unsigned char *)p.k + row0 * DK * esz, rsk, C, DK, nv, tid, NTHR);
        if (delta) {
            const bf16 *Wg = a.Wp + (bh * NC + n) * NP * C * DK;
#pragma unroll
            for (int pl = 0; pl < NP; ++pl)
                cp_rows_bf16(sb + st + L::W + pl * L::QK_PL, L::PBK, Wg + (size_t)pl * C * DK, DK,
                             C, DK, C, tid, NTHR);
        }
        if (tid < C) {
            const bool ok = tid < nv && gate;
            cp_async4(sb + st + L::G + tid * 4, ok ? p.g + row0 + (size_t)tid * H : RC ? a.dHs : a.dD,
                      ok ? 4 : 0);
        }
    };
    // (PF) chunk n's dΔ_loc rows (all C, as the register loads read them) and dO rows (zero
    // past the sequence end) of columns [v0, v0 + DVB), raw, into its set
    auto load_dd_do = [&](int n) {
        const int t0 = n * C, nv = min(C, T - t0), st = stage(n);
        const size_t row0 = ((size_t)b * T + t0) * H + h;
        if constexpr (SD)  // (SD) P of chunk n, all C rows
            cp_rows16<C, C * 2, NTHR>(sb + st + L::DDR, L::PDD,
                                      (const unsigned char *)(a.Pp + (bh * NC + n) * C * C),
                                      (size_t)C * 2, C, tid);
        else
            cp_rows16<C, DVB * 4, NTHR>(sb + st + L::DDR, L::PDD,
                                        (const unsigned char *)(dd_loc(bh * NC + n) + v0),
                                        (size_t)DV * 4, C, tid);
        cp_rows16<C, DVB * 2 * NP, NTHR>(sb + st + L::DOR, L::PDO,
                                         (const unsigned char *)p.dO + (row0 * DV + v0) * esz,
                                         rsv * esz, nv, tid);
    };

    // dH (rows r = warp RW + mt 16 + g4 (+8), cols c = nt 8 + 2 t4 (+1)), from dht
    float acc[MT][NTV][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = warp * RW + mt * 16 + g4 + (e >> 1) * 8;
                const int c = nt * 8 + 2 * t4 + (e & 1);
                acc[mt][nt][e] = p.dht ? p.dht[bh * DK * DV + (size_t)r * DV + v0 + c] : 0.f;
            }
    auto store_dh_planes = [&]() {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int r = warp * RW + mt * 16 + g4 + hr * 8, c = nt * 8 + 2 * t4;
                    st_pair<NP>(sm, L::DH + r * L::PBV + c * 2, L::DH_PL, acc[mt][nt][2 * hr],
                                acc[mt][nt][2 * hr + 1]);
                }
    };
    auto store_dh_global = [&](float *dst) {  // dst: (Dk, Dv) state of this (b, h)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int r = warp * RW + mt * 16 + g4 + hr * 8, c = nt * 8 + 2 * t4;
                    *(float2 *)(dst + (size_t)r * DV + v0 + c) =
                        make_float2(acc[mt][nt][2 * hr], acc[mt][nt][2 * hr + 1]);
                }
    };
    store_dh_planes();
    if constexpr (PIPE) {
        if (NC > 0) {
            load_kg(NC - 1);
            cp_async_commit();  // A
            load_dd_do(NC - 1);
            cp_async_commit();  // B
            load_qw(NC - 1);
            cp_async_commit();  // C
        }
    } else if (NC > 0) {
        load_chunk(NC - 1);
        if constexpr (L::PF) load_dd_do(NC - 1);
        cp_async_commit();
    }

    for (int n = NC - 1; n >= 0; --n) {
        if constexpr (PIPE) cp_async_wait<1>();  // A and B of chunk n (C may be in flight)
        else cp_async_wait_all();
        __syncthreads();  // chunk n's Q, K, W, g (and dΔ_loc, dO) are in; dH' planes are visible
        if constexpr (!PIPE) {
            if (L::S == 2 && n > 0) {
                load_chunk(n - 1);
                if constexpr (L::PF) load_dd_do(n - 1);
            }
            cp_async_commit();
        }
        const int t0 = n * C, nv = min(C, T - t0), st = stage(n);
        const size_t row0 = ((size_t)b * T + t0) * H + h, cix = bh * NC + n;
        const smat sQ{sb + st + L::Q, L::PBK, L::QK_PL}, sK{sb + st + L::K, L::PBK, L::QK_PL};
        const smat sW{sb + st + L::W, L::PBK, L::QK_PL};
        // this thread's dΔ_loc and dO pairs (rows 16 warp + g4 (+8), cols nt 8 + 2 t4); (SD: none
        // in global memory, a.dD is NULL)
        float *dDg = SD ? nullptr : dd_loc(cix) + v0;
        // (PF: from the chunk's set, after the barrier below; same values, zero rows included)
        float2 ddl[NTV][2], dov[NTV][2];
        auto ld_dd_do = [&]() {
            const unsigned char *dog = (const unsigned char *)p.dO + row0 * DV * esz + v0 * esz;
#pragma unroll
            for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int i = warp * 16 + g4 + hr * 8, c = nt * 8 + 2 * t4;
                    ddl[nt][hr] = *(const float2 *)(dDg + (size_t)i * DV + c);
                    dov[nt][hr] =
                        i < nv ? ld_in2<NP>(dog, (size_t)i * rsv + c) : make_float2(0.f, 0.f);
                }
        };
        // dH' of chunk n (gradient of its end state) -> its slot
        store_dh_global(a.dHs + cix * DK * DV);
        if constexpr (!PIPE) {
            gates_warp((const float *)(sm + st + L::G), Gh, Gl, gam, hdec, lane);
            __syncwarp();
        }
        if constexpr (!L::PF) ld_dd_do();

        // (1) dΔ = dΔ_loc + diag(hdec) K dH'
        float a1[NTV][4] = {};
        wmm<NP, false, true, NTV>(a1, sK, sDH, warp * 16, 0, 0, DK, lane);
        // (SD) dΔ_loc = P^T dO, this warp's rows and columns: prep's call (k from the warp's
        // first row: P is lower), so each n-tile's fp32 sum is the one prep would write
        float dl[NTV][4] = {};
        if constexpr (SD) {
            const smat sPm{sb + st + L::DDR, L::PDD, 0}, sDOr{sb + st + L::DOR, L::PDO, 0};
            wmm<NP, true, true, NTV>(dl, sPm, sDOr, warp * 16, 0, warp * 16, C, lane);
        }
        if constexpr (PIPE) {
            gates_warp((const float *)(sm + st + L::G), Gh, Gl, gam, hdec, lane);
            __syncwarp();
        }
        __syncthreads();  // dH' planes are no longer read: the region takes gamma dO and -dΔ
        if constexpr (PIPE) {  // K and g of this chunk are no longer read
            if (n > 0) load_kg(n - 1);
            cp_async_commit();  // A
        }
#pragma unroll
        for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int i = warp * 16 + g4 + hr * 8, c = nt * 8 + 2 * t4;
                if constexpr (SD) {
                    ddl[nt][hr] = make_float2(dl[nt][2 * hr], dl[nt][2 * hr + 1]);
                    dov[nt][hr] = ld_in2<NP>(sm + st + L::DOR + i * L::PDO, c);
                } else if constexpr (L::PF) {
                    ddl[nt][hr] = ld_f2_once(sm + st + L::DDR + i * L::PDD + c * 4);
                    dov[nt][hr] = ld_in2<NP>(sm + st + L::DOR + i * L::PDO, c);
                }
                const float x0 = ddl[nt][hr].x + hdec[i] * a1[nt][2 * hr];
                const float x1 = ddl[nt][hr].y + hdec[i] * a1[nt][2 * hr + 1];
                if constexpr (!RC) *(float2 *)(dDg + (size_t)i * DV + c) = make_float2(x0, x1);
                st_pair<NP>(sm, L::DD + i * L::PBV + c * 2, L::DO_PL, -x0, -x1);
                st_pair<NP>(sm, L::DO + i * L::PBV + c * 2, L::DO_PL, gam[i] * dov[nt][hr].x,
                            gam[i] * dov[nt][hr].y);
            }
        if constexpr (PIPE) cp_async_wait<1>();  // C of chunk n (A of n - 1 may be in flight)
        __syncthreads();  // (PF) this chunk's dΔ_loc and dO rows are no longer read
        if (L::PF && L::S == 1 && n > 0) load_dd_do(n - 1);  // committed with load_chunk below
        if constexpr (PIPE) cp_async_commit();                // (PIPE: on its own) B

        // (2) dH = gamma_C dH' + Q^T (diag(gamma) dO) + W^T (-dΔ)
        const float gC = gam[C - 1];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][e] *= gC;
            wmm<NP, true, true, NTV>(acc[mt], sQ, sDO, warp * RW + mt * 16, 0, 0, C, lane);
            if (delta)
                wmm<NP, true, true, NTV>(acc[mt], sW, sDD, warp * RW + mt * 16, 0, 0, C, lane);
        }
        __syncthreads();  // the region and this chunk's stage are free
        store_dh_planes();
        if constexpr (PIPE) {
            if (n > 0) load_qw(n - 1);
            cp_async_commit();  // C
        } else if (L::S == 1 && n > 0) {
            load_chunk(n - 1);
            cp_async_commit();
        }
    }
    if (p.dh0) store_dh_global(p.dh0 + bh * DK * DV);
}

// =============================================================================================
// final: per chunk, 8 warps; warp w owns rows [16 (w%4), +16) and column half w/4 of every
// C-row result (C x C, C x DKH). In a value sub-block warps 0-3 form Δ, warps 4-7 dV (all VB
// columns each).
// =============================================================================================
// WG: 0, the mma.sync kernel (every shape); 4, the wgmma kernel (bf16 with Dk = 128 and delta
// on, on sm_90a; final_wgmma): the H products that run over value columns into the C x Dk
// accumulators (dO H^T, Δh dH'^T, -γdV H^T) are wgmma m64n64k16 with A (dO, Δh, -γdV) in
// registers from the same ldmatrix fragments and B (the H and dH' blocks) in shared memory in
// the 128-byte swizzled layout of wgmma.cuh: one 64-column panel of DKH rows per block, the hi
// plane in columns 0..31 and the lo plane in 32..63 (VB = 32), so one panel row is one 128-byte
// line and every k-step a descriptor of its own (K-major: rows = key dims = N); K dH' and K H
// read the same panels N-major (rows = key dims = K, N = 64 = hi | lo); dO Δ^T and dΔ Y^T run
// as m64n32 per warpgroup (its 32 token columns), with Y and Δ as C-row panels (hi | lo) instead
// of padded planes. (The numbers 1-3 were its earlier steps, deleted in session 15.)
template <int DK, int NP, int WG = 0>
struct final_layout {
    static_assert(WG == 0 || WG == 4, "final: WG 0 (mma.sync) or 4 (wgmma)");
    // Value columns stream in sub-blocks of VB, each staged raw (cp.async) while the one before
    // computes, so only the first one's loads wait. PAIR sub-blocks form a group of VG columns:
    // the fp32 sums that run over value columns outside one mma chain (<H, dH'>, the -KHg.dV row
    // sums, and dK's two H-block products, Δh dH'^T then -γdV H^T) are grouped by VG columns,
    // as in the 64-column blocks this kernel had when there was no smem for staging (the same
    // bits as then). The staging and one more H block and -γdV (the VG group's first, kept for
    // its -γdV H^T) need VB = 32 with bf16 inputs.
    static constexpr int VB = NP == 1 ? 32 : 16, PAIR = NP == 1 ? 2 : 1, VG = PAIR * VB;
    static constexpr bool RC = recompute_path(DK, NP);            // (then DKH = DK)
    static constexpr int ESZ = NP == 1 ? 2 : 4;                   // input element bytes
    static constexpr int DKH = NP == 1 ? (DK < 128 ? DK : 128) : 64;  // key columns per pass
    static constexpr int PBH = (DKH + 8) * 2, QH_PL = C * PBH;
    static constexpr int PBC = (C + 8) * 2, CC_PL = C * PBC;
    static constexpr int PF = C + 4;                             // fp32 pitch
    static constexpr int PBV = (VB + 8) * 2, V_PL = C * PBV, HB_PL = DKH * PBV;
    // Whole kernel. Intermediates are hi + lo planes also for bf16 inputs (dg and dbeta rest on
    // them); only operands that are bf16 inputs (Q, K, dO) and dQK, X, -γdV have NP planes.
    static constexpr int TT = 0;                                  // T = Linv diag(beta) (2)
    static constexpr int DQK = TT + 2 * CC_PL;                    // dQK = dP ⊙ Gam
    static constexpr int XB = DQK + NP * CC_PL;                   // X = diag(beta)(dA ⊙ Gam)
    // RC: K (one plane, all columns; the pass's K of phase 2 too) and P = Gam ⊙ QK^T (one plane,
    // as prep's, for dΔ's P^T dO), both formed in the setup
    static constexpr int KR = XB + NP * CC_PL;
    static constexpr int PP = KR + (RC ? QH_PL : 0);
    static constexpr int SMALL = PP + (RC ? CC_PL : 0);
    // fp32 [C]: g, beta, Gh, Gl, gam, hdec, pos1p[2], tkp[2], pos2p[2], dbp[2], dbd, cross; red[256]
    // (red: the 8 warp sums of <H, dH'>; the rest is unused)
    static constexpr int R = SMALL + (18 * C + 256) * 4;
    // Region R, phase 1 (each value sub-block of a pass): planes converted from the staging
    // (WP, WG 4: Y and Δ are swizzled panels after the dH' panel instead, see YW below)
    static constexpr bool WP = WG != 0;
    // EA (WG 4): the staging and the conversion off the sub-block chain. The dH' panel has two
    // slots (slot = e, as the H panel's), so sub-block v + 1's staging -> planes conversion runs
    // while sub-block v's wgmma group (the H products) is in flight; v + 1's dO, H, dH' are
    // staged right after v's first barrier (the conversion read them under v - 1's wgmmas), V
    // after Y (which reads it); the RC KHg of warps 4-7 waits in the DQK | XB region (written
    // only in phase 2) instead of the dH' staging; phase 2's Linv and Q travel into the dO | H |
    // dH' staging during the last sub-block. (Bitwise the results of WG 3, its step before,
    // which converted and staged in the sub-block chain.)
    static constexpr bool EA = WG != 0;
    static constexpr int Y0 = R;                                  // Y = V - KHg (2 planes)
    static constexpr int DO = Y0 + (WP ? 0 : 2 * V_PL);
    static constexpr int DD = DO + NP * V_PL;                     // dΔ (2)
    static constexpr int DL0 = DD + 2 * V_PL;                     // Δ (2; NP planes of V when
                                                                  // delta is off)
    static constexpr int DH = DL0 + (WP ? 0 : 2 * V_PL);          // diag(hdec) Δ (2)
    static constexpr int DVG = DH + 2 * V_PL;                     // -diag(gamma) dV, PAIR slots
    // WG: both blocks as swizzled panels (hi | lo in one 128-byte line), 1024-byte aligned
    // (the kernel rebases sm to a 1024-byte boundary; BYTES has the slack)
    static_assert(!WG || (NP == 1 && DK == 128 && VB == 32 && PAIR == 2), "final: WG shape");
    static constexpr int HW_PL = DKH * 128;                       // WG: one panel (hi | lo)
    static constexpr int HB = WG ? (DVG + PAIR * NP * V_PL + 1023) / 1024 * 1024
                                 : DVG + PAIR * NP * V_PL;        // H block (DKH x VB) (2), PAIR
                                                                  // slots (slot = place in VG)
    static constexpr int HB_SLOT = WG ? HW_PL : 2 * HB_PL;        // bytes per slot
    static constexpr int DHB = HB + PAIR * HB_SLOT;               // dH' block (2)
    // WP: Y and Δ as C-row panels (hi | lo, as the H panels), B of dT += dΔ Y^T and dP += dO
    // Δ^T on wgmma (K-major: rows = tokens = N); 1024-aligned as DHB and HW_PL are (after the
    // two dH' panel slots)
    static constexpr int YW_PL = C * 128;
    static constexpr int YW = DHB + (WG ? 2 * HW_PL : 2 * HB_PL), DLW = YW + YW_PL;
    static constexpr int Y = WP ? YW : Y0, DL = WP ? DLW : DL0;
    static constexpr int END1 = YW + (WP ? 2 * YW_PL : 0);
    // phase 2 (after the value sub-blocks of a pass): its Q, K columns and the C x C work (RC:
    // K is resident; Q is here in the setup too)
    static constexpr int QH = R, KH = RC ? KR : QH + NP * QH_PL;
    static constexpr int F1 = QH + (RC ? 1 : 2) * NP * QH_PL;    // fp32: dP, then M, prefixes
    static constexpr int DT = F1 + C * PF * 4;                    // dT (lower, 2 planes)
    static constexpr int ZB = DT + 2 * CC_PL;                     // Z = dT T^T (2)
    static constexpr int LV0 = ZB + 2 * CC_PL;                    // Linv (2): loaded for T in the
                                                                  // setup, again for phase 2
                                                                  // (EA: phase 2's at LVP)
    static constexpr int END2 = LV0 + 2 * CC_PL;
    // staging (raw, as in global memory), apart from both phases: the next sub-block's, or the
    // next pass's first, travels during phase 2 too
    static constexpr int SV = cmax(END1, END2);                   // V (C x VB inputs)
    static constexpr int SDO = SV + C * VB * ESZ;                 // dO
    static constexpr int SK = SDO + C * VB * ESZ;                 // KHg hi, lo: 2C rows, pitch
                                                                  // PBV (the dV epilogue reads it
                                                                  // by fragments); not RC
    static constexpr int SDD = SK + (RC ? 0 : 2 * V_PL);          // dΔ (fp32 C x VB); not RC
    static constexpr int SH = SDD + (RC ? 0 : C * VB * 4);        // H (fp32 DKH x VB)
    static constexpr int SDH = SH + DKH * VB * 4;                 // dH'
    static constexpr int SEND = SDH + DKH * VB * 4;
    static constexpr int LV = LV0;                                // the setup's Linv (for T)
    static constexpr int LVP = EA ? SDO : LV0;                    // phase 2's Linv (EA: staging)
    static constexpr int QP2 = EA ? SDO + 2 * CC_PL : QH;         // phase 2's Q (EA: staging)
    static constexpr int KHS = EA ? DQK : SDH;                    // RC: KHg of warps 4-7, Y -> dV
    static constexpr int BYTES = SEND + (WG ? 1024 : 0);          // WG: alignment slack
    static_assert(BYTES <= SMEM_MAX, "final shared memory");
    static_assert(!EA || (RC && WP && NP == 1 && QP2 + QH_PL <= SEND && SDO % 16 == 0 &&
                          CC_PL % 16 == 0 && (VB / 8) * 128 * 16 <= XB + NP * CC_PL - DQK),
                  "final: WG 4 layout (phase 2's Linv, Q in the staging, KHg in DQK | XB)");
    static_assert(!WG || (HB % 1024 == 0 && HW_PL % 1024 == 0), "final: WG panels 1024-aligned");
    static_assert(!WP || (YW % 1024 == 0 && YW_PL % 1024 == 0), "final: Y, Δ panels 1024-aligned");
    static_assert(SV % 16 == 0 && PBV % 16 == 0, "final: cp.async staging alignment");
};

// acc = A B^T for this warp's 16 x 32 tile (rows m0.., columns n0..), k over [0, DKH); A, B
// one plane (bf16 inputs), stored [row][k]. Only the lower part: a 16-column half wholly above
// the diagonal stays zero. The fragments and the k order of prep's P and Gam ⊙ KK^T, so the
// same fp32 bits as those (recompute path).
template <int DKH>
__device__ __forceinline__ void abt_lower(float (&acc)[4][4], smat a, smat b, int m0, int n0,
                                          int lane) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
    for (int kk = 0; kk < DKH; kk += 16) {
        uint32_t fa[1][4];
        lda<1>(fa, a, m0, kk, lane);
#pragma unroll
        for (int np = 0; np < 2; ++np)
            if (n0 + np * 16 < m0 + 16) {
                uint32_t fb[1][4];
                ldb<1>(fb, b, n0 + np * 16, kk, lane);
                mma_p<0, 1>(acc[2 * np], fa, fb);
                mma_p<1, 1>(acc[2 * np + 1], fa, fb);
            }
    }
}

// ---- WG 4: the H and dH' blocks, Y and Δ as swizzled panels, their products on wgmma ------
// 4 fp32 of row r, columns c..c + 3 (c % 4 == 0, c < 32) -> hi at column c, lo at column 32 + c
// of the R-row panel at byte offset base: the split of st_run<2, 4> (the same plane bits); the 4
// elements stay inside one 16-byte chunk, so each plane is one 8-byte store.
template <int R>
__device__ __forceinline__ void st4_panel(unsigned char *sm, int base, int r, int c,
                                          const float (&x)[4]) {
    uint32_t hi[2], lo[2];
    split2(x[0], x[1], hi[0], lo[0]);
    split2(x[2], x[3], hi[1], lo[1]);
    *(uint2 *)(sm + base + 2 * wgm::sw128<R>(r, c)) = make_uint2(hi[0], hi[1]);
    *(uint2 *)(sm + base + 2 * wgm::sw128<R>(r, c + 32)) = make_uint2(lo[0], lo[1]);
}
// st_pair<2> of (x0, x1) at row r, columns c, c + 1 (c even, c < 32) of an R-row panel:
// hi at column c, lo at 32 + c (the same plane bits as st_pair<2>).
template <int R>
__device__ __forceinline__ void st_pair_panel(unsigned char *sm, int base, int r, int c, float x0,
                                              float x1) {
    uint32_t hi, lo;
    split2(x0, x1, hi, lo);
    *(uint32_t *)(sm + base + 2 * wgm::sw128<R>(r, c)) = hi;
    *(uint32_t *)(sm + base + 2 * wgm::sw128<R>(r, c + 32)) = lo;
}
// wmm<NPA, false, true, NT, 2> with B (k = rows, n = the sub-block's value columns) read from an
// R-row panel at shared address bp: ldmatrix.trans of the same 8-element runs (each a 16-byte
// chunk of the swizzled line; the 8 rows of one 8x8 matrix land in 8 distinct chunks, so no bank
// conflict) and the same mma order as wmm: the same bits as the padded layout gave. (WG 4's
// Δ = T Y: the Y panel, k = token rows, A = T of 2 planes.)
template <int R, int NT, int NPA = 1>
__device__ __forceinline__ void wmm_bpanel(float (&acc)[NT][4], smat a, uint32_t bp, int m0,
                                           int n0, int k0, int k1, int lane) {
    static_assert(NT % 2 == 0, "B fragments come in pairs of n-tiles");
    for (int k = k0; k < k1; k += 16) {
        uint32_t fa[NPA][4];
        lda<NPA>(fa, a, m0, k, lane);
        const int r = k + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            const int c = n0 + np * 16 + (lane >> 4) * 8;
            uint32_t fb[2][4];
#pragma unroll
            for (int pl = 0; pl < 2; ++pl)
                ldsm4t(fb[pl], bp + 2u * (uint32_t)wgm::sw128<R>(r, c + 32 * pl));
            mma_p<0, NPA, 2>(acc[2 * np], fa, fb);
            mma_p<1, NPA, 2>(acc[2 * np + 1], fa, fb);
        }
    }
}
// Generic-proxy stores to a panel made visible to wgmma (the async proxy): each writer, before
// the barrier that publishes them. sm_90a only; the WG instance is launched only there.
__device__ __forceinline__ void wg_fence_proxy() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    wgm::fence_proxy_async();
#else
    __trap();
#endif
}
// The C x DKH products of one value sub-block e (K = VB = 32: 2 k-steps) for this warpgroup's
// 64 key columns q0.. (warpgroup = ch; warp mw of it owns rows 16 mw.., the rows of its
// ldmatrix A fragments): aQ += dO H_e^T, aK += Δh dH'^T, aK += -γdV_e H_e^T. aQ, aK in the
// mma.sync tiling are the warpgroup's m64n64 accumulators element for element (acc[nt][e] =
// d[4 nt + e]: row 16 mw + g + 8 (e >> 1), column q0 + 8 nt + 2 t + (e & 1)), so the code
// around them is unchanged. Per k-step the planes go in mma_p's order (A lo x B hi, A hi x B lo,
// A hi x B hi). Two orders differ from the mma.sync path: -γdV_e H_e^T follows its own
// sub-block's Δh dH'^T (there: both Δh dH'^T of the VG group, then both -γdV H^T, issued under a
// condition, which makes ptxas serialise the wgmmas), and one wgmma sums its 16-deep products
// differently from mma.sync: the results are close, not bitwise. The C x C products too, in the
// same group: for this warpgroup's 32 token columns n0.. of the C x C accumulators (aP, aT in
// the mma.sync tiling are its m64n32 accumulators element for element: column n0 + 8 nt + 2 t +
// (e & 1)), aP += dO Δ^T (A = the dO fragments above, B = the Δ panel at dlp) and aT += dΔ Y^T
// (A = dΔ, 2 planes, from sDD; B = the Y panel at yp), both K-major C-row panels (hi | lo) read
// at rows n0.., k-step 2 pl + s as for H. One wgmma group, issued before `between` (the next
// sub-block's conversion, which overlaps it) and waited for after it: nothing stays in flight
// past the sub-block (the next one rewrites the panels and A planes).
template <class F>
__device__ __forceinline__ void final_wg_hprod(float (&aQ)[8][4], float (&aK)[8][4], smat sDO,
                                               smat sDH, smat sG, uint32_t hbe, uint32_t dhb,
                                               int m0, int q0, int lane, F between,
                                               float (&aP)[4][4], float (&aT)[4][4], smat sDD,
                                               uint32_t dlp, uint32_t yp, int n0) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int R = 128;  // DKH
    float(&q32)[32] = reinterpret_cast<float(&)[32]>(aQ);
    float(&k32)[32] = reinterpret_cast<float(&)[32]>(aK);
    float(&p16)[16] = reinterpret_cast<float(&)[16]>(aP);
    float(&t16)[16] = reinterpret_cast<float(&)[16]>(aT);
    uint32_t fo[2][1][4], fd[2][2][4], fg[2][1][4];  // [k-step][plane][fragment]
    uint32_t fe[2][2][4];                             // dΔ
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        lda<1>(fo[s], sDO, m0, 16 * s, lane);
        lda<2>(fd[s], sDH, m0, 16 * s, lane);
        lda<1>(fg[s], sG, m0, 16 * s, lane);
        lda<2>(fe[s], sDD, m0, 16 * s, lane);
    }
    // the A fragments and accumulators written before the fence (wgmma.cuh: fence_regs)
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[8]>(fo));
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[16]>(fd));
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[8]>(fg));
    wgm::fence_regs(q32);
    wgm::fence_regs(k32);
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[16]>(fe));
    wgm::fence_regs(p16);
    wgm::fence_regs(t16);
    wgm::fence();
    // k-step s of plane pl of a panel: columns 32 pl + 16 s, i.e. desc_k's k-step 2 pl + s
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // dO H^T
        wgm::mma_rs<64, 0>(q32, fo[s][0], wgm::desc_k<R>(hbe, q0, 2 + s), 1);
        wgm::mma_rs<64, 0>(q32, fo[s][0], wgm::desc_k<R>(hbe, q0, s), 1);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // Δh dH'^T
        wgm::mma_rs<64, 0>(k32, fd[s][1], wgm::desc_k<R>(dhb, q0, s), 1);
        wgm::mma_rs<64, 0>(k32, fd[s][0], wgm::desc_k<R>(dhb, q0, 2 + s), 1);
        wgm::mma_rs<64, 0>(k32, fd[s][0], wgm::desc_k<R>(dhb, q0, s), 1);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // -γdV H^T
        wgm::mma_rs<64, 0>(k32, fg[s][0], wgm::desc_k<R>(hbe, q0, 2 + s), 1);
        wgm::mma_rs<64, 0>(k32, fg[s][0], wgm::desc_k<R>(hbe, q0, s), 1);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // dO Δ^T
        wgm::mma_rs<32, 0>(p16, fo[s][0], wgm::desc_k<C>(dlp, n0, 2 + s), 1);
        wgm::mma_rs<32, 0>(p16, fo[s][0], wgm::desc_k<C>(dlp, n0, s), 1);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // dΔ Y^T
        wgm::mma_rs<32, 0>(t16, fe[s][1], wgm::desc_k<C>(yp, n0, s), 1);
        wgm::mma_rs<32, 0>(t16, fe[s][0], wgm::desc_k<C>(yp, n0, 2 + s), 1);
        wgm::mma_rs<32, 0>(t16, fe[s][0], wgm::desc_k<C>(yp, n0, s), 1);
    }
    wgm::commit();
    between();
    wgm::wait<0>();
    wgm::fence_regs(q32);
    wgm::fence_regs(k32);
    // the A fragments live (unchanged) until the wait: the wgmmas read them asynchronously
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[8]>(fo));
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[16]>(fd));
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[8]>(fg));
    wgm::fence_regs(p16);
    wgm::fence_regs(t16);
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[16]>(fe));
#else
    __trap();  // launched only where the sm_90a image exists (final_wgmma checks)
#endif
}

// acc (this warpgroup's m64n64: columns 0..31 = K B_hi, 32..63 = K B_lo over the
// sub-block's value columns) = K B over all DKH key dims, B the panel at bp read N-major
// (trans-b: rows = key dims = K, columns = N = hi | lo; desc_n), A = K (rows m0.. of the chunk)
// by ldmatrix, 8 k-steps in one group, waited for here. acc zero on entry. The caller sums the
// two halves (hi + lo) once: main's mma.sync chain adds lo, then hi at every k-step, so the sums
// round differently (dΔ and KHg, hence every gradient, move by ~1e-7 relative).
__device__ __forceinline__ void final_wg_kpanel(float (&acc)[8][4], smat sK, uint32_t bp, int m0,
                                                int lane) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int R = 128;  // DKH
    float(&a32)[32] = reinterpret_cast<float(&)[32]>(acc);
    uint32_t fk[8][1][4];  // [k-step][plane][fragment]
#pragma unroll
    for (int s = 0; s < 8; ++s) lda<1>(fk[s], sK, m0, 16 * s, lane);
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[32]>(fk));
    wgm::fence_regs(a32);
    wgm::fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) wgm::mma_rs<64, 1>(a32, fk[s][0], wgm::desc_n<R>(bp, s), 1);
    wgm::commit();
    wgm::wait<0>();
    wgm::fence_regs(a32);
    wgm::fence_regs(reinterpret_cast<uint32_t(&)[32]>(fk));
#else
    __trap();  // launched only where the sm_90a image exists (final_wgmma checks)
#endif
}

template <int DK, int NP, int WG>
__global__ void __launch_bounds__(256, 1) gdn_bwd_final_kernel(const __grid_constant__ bwd_args a) {
    using L = final_layout<DK, NP, WG>;
    constexpr int VB = L::VB, PAIR = L::PAIR, VG = L::VG, ESZ = L::ESZ;
    constexpr int DKH = L::DKH, NKH = DK / DKH, NTV = VB / 8, NQ = DKH / 16;
    constexpr bool RC = L::RC;
    static_assert(!RC || NKH == 1, "final: the recompute path takes all key columns in one pass");
    // H, dH' conversion and <H, dH'>: thread t takes rows t/TPG + (256/TPG) k (k < NHG), columns
    // 4 (t%TPG).. of each VG group, i.e. in one sub-block of the group (all of them when PAIR is
    // 1). The other pieces (Y, dΔ, dO, V): 4 elements each, NPC a thread, by the other threads.
    constexpr int TPG = VG / 4, NHG = DKH * VG / 4 / 256, NPC = C * VB / 4 / (256 / PAIR);
    static_assert(NHG * 4 * 256 == DKH * VG && NPC * (256 / PAIR) * 4 == C * VB && NTV % 2 == 0,
                  "final: sub-block split");
    // the C x C scalars: 4 threads per row or column (quad shuffles), C / 4 columns a thread in
    // float4s; the dg sums: warp 0, two rows a lane
    static_assert(4 * C == 256 && 2 * 32 == C && L::F1 % 16 == 0 && L::PF % 4 == 0,
                  "final: scalar loops' thread mapping");
    extern __shared__ __align__(128) unsigned char sm_raw[];
    unsigned char *sm = sm_raw;  // WG: rebased to a 1024-byte boundary (the panels' swizzle)
    if constexpr (WG != 0) sm += (1024u - (smem_u32(sm_raw) & 1023u)) & 1023u;
    const gdn_bwd_params &p = a.p;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g4 = lane >> 2, t4 = lane & 3, mw = warp & 3, ch = warp >> 2, m0 = mw * 16;
    const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, DV = p.Dv, NC = a.NC;
    const int t0 = n * C, nvalid = min(C, T - t0);
    const bool gate = p.mode.gate;
    bool delta = p.mode.delta;
    // WG runs only with delta on (gdn_bwd_final_launch): its -γdV H^T goes with every sub-block
    if constexpr (WG != 0) delta = true;
    const size_t row0 = ((size_t)b * T + t0) * H + h;
    const size_t cix = ((size_t)b * H + h) * NC + n;
    const size_t rsk = (size_t)H * DK, rsv = (size_t)H * DV;
    const size_t esz = ESZ;
    const unsigned char *qg = (const unsigned char *)p.q + row0 * DK * esz;
    const unsigned char *kg = (const unsigned char *)p.k + row0 * DK * esz;
    const unsigned char *vg = (const unsigned char *)p.v + row0 * DV * esz;
    const unsigned char *dog = (const unsigned char *)p.dO + row0 * DV * esz;
    unsigned char *dqg = (unsigned char *)p.dq + row0 * DK * esz;
    unsigned char *dkg = (unsigned char *)p.dk + row0 * DK * esz;
    unsigned char *dvg = (unsigned char *)p.dv + row0 * DV * esz;
    const float *PAg = RC ? nullptr : a.PA + cix * C * C;
    const float *dDg = RC ? nullptr : a.dD + cix * C * DV;

    float *gsm = (float *)(sm + L::SMALL), *bsm = gsm + C, *Gh = bsm + C, *Gl = Gh + C;
    float *gam = Gl + C, *hdec = gam + C, *pos1p = hdec + C, *tkp = pos1p + 2 * C;
    float *pos2p = tkp + 2 * C, *dbp = pos2p + 2 * C, *dbd = dbp + 2 * C, *cross = dbd + C;
    float *red = cross + C;
    float *F1 = (float *)(sm + L::F1);
    const uint32_t sb = smem_u32(sm);
    const smat sQh{sb + L::QH, L::PBH, L::QH_PL}, sKh{sb + L::KH, L::PBH, L::QH_PL};
    const smat sLv{sb + L::LVP, L::PBC, L::CC_PL}, sT{sb + L::TT, L::PBC, L::CC_PL};
    const smat sdQK{sb + L::DQK, L::PBC, L::CC_PL}, sX{sb + L::XB, L::PBC, L::CC_PL};
    const smat sDT{sb + L::DT, L::PBC, L::CC_PL}, sZ{sb + L::ZB, L::PBC, L::CC_PL};
    const smat sY{sb + L::Y, L::PBV, L::V_PL}, sDO{sb + L::DO, L::PBV, L::V_PL};
    const smat sDD{sb + L::DD, L::PBV, L::V_PL}, sDL{sb + L::DL, L::PBV, L::V_PL};
    const smat sDH{sb + L::DH, L::PBV, L::V_PL}, sDHB{sb + L::DHB, L::PBV, L::HB_PL};
    const smat sPP{sb + L::PP, L::PBC, L::CC_PL};
    const smat sQ2{sb + L::QP2, L::PBH, L::QH_PL};  // phase 2's Q (sQh but with WG 4)

    // Staging of the value sub-block at columns vn of pass kn. Part 1 (V, dO, dΔ, H, dH') is read
    // only by the conversion at the top of its sub-block; part 2 (KHg) also by the dV epilogue
    // after it, so its copy into the staging is issued one barrier later. RC: part 1 is V, dO, H,
    // issued one barrier later (Y = V - KHg reads V after the conversion), and part 2 is dH' (its
    // staging holds the KHg of warps 4-7 from Y to the dV epilogue).
    auto cp_dh = [&](int kn, int vn) {
        const size_t ho = cix * DK * DV + (size_t)kn * DKH * DV + vn;
        cp_rows16<DKH, VB * 4, 256>(sb + L::SDH, VB * 4, (const unsigned char *)(a.dHs + ho),
                                    (size_t)DV * 4, DKH, tid);
    };
    auto stage1 = [&](int kn, int vn) {
        cp_rows16<C, VB * ESZ, 256>(sb + L::SV, VB * ESZ, vg + vn * esz, rsv * esz, nvalid, tid);
        cp_rows16<C, VB * ESZ, 256>(sb + L::SDO, VB * ESZ, dog + vn * esz, rsv * esz, nvalid,
                                    tid);
        if constexpr (!RC)
            cp_rows16<C, VB * 4, 256>(sb + L::SDD, VB * 4, (const unsigned char *)(dDg + vn),
                                      (size_t)DV * 4, C, tid);
        const size_t ho = cix * DK * DV + (size_t)kn * DKH * DV + vn;
        cp_rows16<DKH, VB * 4, 256>(sb + L::SH, VB * 4, (const unsigned char *)(a.Hs + ho),
                                    (size_t)DV * 4, DKH, tid);
        if constexpr (!RC) cp_dh(kn, vn);
    };
    // WG 4 (EA, RC only): part A (dO, H, dH': read only by the conversion) right after the
    // conversion barrier of the sub-block before; part V (V: read by Y = V - KHg) after Y
    auto stageA = [&](int kn, int vn) {
        cp_rows16<C, VB * ESZ, 256>(sb + L::SDO, VB * ESZ, dog + vn * esz, rsv * esz, nvalid,
                                    tid);
        const size_t ho = cix * DK * DV + (size_t)kn * DKH * DV + vn;
        cp_rows16<DKH, VB * 4, 256>(sb + L::SH, VB * 4, (const unsigned char *)(a.Hs + ho),
                                    (size_t)DV * 4, DKH, tid);
        cp_dh(kn, vn);
    };
    auto stageV = [&](int vn) {
        cp_rows16<C, VB * ESZ, 256>(sb + L::SV, VB * ESZ, vg + vn * esz, rsv * esz, nvalid, tid);
    };
    auto stage2 = [&](int kn, int vn) {  // KHg: the hi and lo planes as 2C rows (lo follows hi)
        if constexpr (RC)
            cp_dh(kn, vn);
        else if (delta)
            cp_rows16<2 * C, VB * 2, 256>(sb + L::SK, L::PBV,
                                          (const unsigned char *)(a.Kp + cix * 2 * C * DV + vn),
                                          (size_t)DV * 2, 2 * C, tid);
    };

    // ---- setup: gates, Linv, T; the first sub-block's staging meanwhile ----------------------
    // (EA: the copies are issued first and warp 0's gates_warp runs while they travel)
    if constexpr (!L::EA) {
        if (tid < C) {
            const bool ok = tid < nvalid;
            gsm[tid] = ok && gate ? p.g[row0 + (size_t)tid * H] : 0.f;
            bsm[tid] = ok && delta ? p.beta[row0 + (size_t)tid * H] : 0.f;
        }
        for (int e = tid; e < 2 * C; e += 256) pos1p[e] = tkp[e] = pos2p[e] = dbp[e] = 0.f;
    }
    if (delta) {
#pragma unroll
        for (int pl = 0; pl < 2; ++pl)
            cp_rows_bf16(sb + L::LV + pl * L::CC_PL, L::PBC, a.Lv + (cix * 2 + pl) * C * C, C, C,
                         C, C, tid, 256);
    }
    if constexpr (RC) {  // Q for P (phase 1 then overwrites it), K for the whole kernel
        load_in_rows<NP>(sm, L::QH, L::PBH, L::QH_PL, qg, rsk, C, DK, nvalid, tid, 256);
        load_in_rows<NP>(sm, L::KH, L::PBH, L::QH_PL, kg, rsk, C, DK, nvalid, tid, 256);
    }
    cp_async_commit();
    if constexpr (L::EA) {
        stageA(0, 0);
        cp_async_commit();
        stageV(0);
        cp_async_commit();
        if (tid < C) {  // as above
            const bool ok = tid < nvalid;
            gsm[tid] = ok && gate ? p.g[row0 + (size_t)tid * H] : 0.f;
            bsm[tid] = ok && delta ? p.beta[row0 + (size_t)tid * H] : 0.f;
        }
        for (int e = tid; e < 2 * C; e += 256) pos1p[e] = tkp[e] = pos2p[e] = dbp[e] = 0.f;
        __syncthreads();  // g, beta
        if (warp == 0) gates_warp(gsm, Gh, Gl, gam, hdec, lane);
        cp_async_wait<2>();  // Linv, Q, K
        __syncthreads();
    } else {
        stage1(0, 0);
        stage2(0, 0);
        cp_async_commit();
        cp_async_wait<1>();  // Linv (RC: and Q, K)
        __syncthreads();
        if (warp == 0) gates_warp(gsm, Gh, Gl, gam, hdec, lane);
    }
    if (delta)
        for (int e = tid; e < C * C / 2; e += 256) {
            const int i = e / (C / 2), j = (e % (C / 2)) * 2;
            const float2 l = ld_pair<2>(sm, L::LV + i * L::PBC + j * 2, L::CC_PL);
            st_pair<2>(sm, L::TT + i * L::PBC + j * 2, L::CC_PL, l.x * bsm[j], l.y * bsm[j + 1]);
        }
    __syncthreads();
    if constexpr (RC) {  // P = Gam ⊙ QK^T (lower incl. the diagonal) as prep's plane; the first
                         // sub-block's top barrier orders these reads of Q before phase 1
        float acc[4][4];
        abt_lower<DKH>(acc, sQh, sKh, m0, ch * 32, lane);
        frag_each<4>(acc, m0, ch * 32, lane, [&](int i, int j, float x0, float x1) {
            st_pair<1>(sm, L::PP + i * L::PBC + j * 2, L::CC_PL, x0 * gam_ij(Gh, Gl, i, j),
                       x1 * gam_ij(Gh, Gl, i, j + 1));
        });
    }
    float hdh = 0.f;  // this thread's part of <H, dH'>
    // EA: the staged dO, H, dH' of the sub-block at columns v0c -> its dO planes, H panel slot
    // and dH' panel slot (slot = its place e in the VG group), and its <H, dH'> terms: the
    // conversion at the top of the sub-block loop below (WG 0's; here RC, delta on), line for line
    auto convert_ea = [&](int v0c) {
        const int e = (v0c / VB) % PAIR;
        const int hbo = L::HB + e * L::HB_SLOT, dhbo = L::DHB + e * L::HB_SLOT;
        const int hq = tid % TPG;
        if (hq * 4 / VB == e) {
            const int c = hq * 4 - e * VB;
#pragma unroll 2  // (the wgmma group's accumulators and A fragments are live: fully unrolled,
                  // the hoisted loads spill)
            for (int it = 0; it < NHG; ++it) {
                const int r = tid / TPG + it * (256 / TPG), so = (r * VB + c) * 4;
                const float4 hv = *(const float4 *)(sm + L::SH + so);
                const float4 dv = *(const float4 *)(sm + L::SDH + so);
                hdh += hv.x * dv.x + hv.y * dv.y + hv.z * dv.z + hv.w * dv.w;
                const float xh[4] = {hv.x, hv.y, hv.z, hv.w}, xd[4] = {dv.x, dv.y, dv.z, dv.w};
                st4_panel<DKH>(sm, hbo, r, c, xh);
                st4_panel<DKH>(sm, dhbo, r, c, xd);
            }
            wg_fence_proxy();  // the panels, for wgmma
        } else {
            const int u = tid / TPG * (VB / 4) + tid % (VB / 4);  // among these threads
#pragma unroll
            for (int k = 0; k < NPC; ++k) {
                const int pc = u + k * (256 / PAIR), r = pc / (VB / 4), c = (pc % (VB / 4)) * 4;
                const int po = r * L::PBV + c * 2, si = r * VB + c;  // plane offset; element
                in4_planes<NP>(sm, L::DO + po, L::V_PL, L::SDO + si * ESZ);
            }
        }
    };
    if constexpr (L::EA) {  // the first sub-block's conversion (the others: under the wgmmas)
        cp_async_wait<1>();  // dO, H, dH' (V may still travel)
        __syncthreads();           // everyone's; P's reads of Q (region R) done
        convert_ea(0);
    }

    for (int kh = 0; kh < NKH; ++kh) {
        const int c0 = kh * DKH, q0 = ch * (DKH / 2);  // pass columns; this warp's half
        float aP[4][4] = {}, aT[4][4] = {}, aQ[NQ][4] = {}, aK[NQ][4] = {};

        for (int v0 = 0; v0 < DV; v0 += VB) {
            const int e = (v0 / VB) % PAIR;  // the sub-block's place in its VG group: its slot
            const int hbo = L::HB + e * L::HB_SLOT, dvo = L::DVG + e * NP * L::V_PL;
            cp_async_wait_all();  // this sub-block's staging (the thread's own copies)
            __syncthreads();      // everyone's; the previous sub-block's planes are free
                                  // (EA: the planes converted under the last wgmmas complete)
            if constexpr (!L::EA) {
            // Staging -> planes. H, dH' (and <H, dH'>) by the threads whose columns of the VG
            // group lie in this sub-block; Y = V - KHg (fp32, kept as hi + lo planes for Δ = T Y
            // and dT), dΔ, dO and, with delta off, Δ = V (and dV = dΔ) by the others.
            const int hq = tid % TPG;
            if (hq * 4 / VB == e) {
                const int c = hq * 4 - e * VB;
#pragma unroll
                for (int it = 0; it < NHG; ++it) {
                    const int r = tid / TPG + it * (256 / TPG), so = (r * VB + c) * 4;
                    const int po = r * L::PBV + c * 2;
                    const float4 hv = *(const float4 *)(sm + L::SH + so);
                    const float4 dv = *(const float4 *)(sm + L::SDH + so);
                    hdh += hv.x * dv.x + hv.y * dv.y + hv.z * dv.z + hv.w * dv.w;
                    const float xh[4] = {hv.x, hv.y, hv.z, hv.w}, xd[4] = {dv.x, dv.y, dv.z, dv.w};
                    st_run<2, 4>(sm, hbo + po, L::HB_PL, xh);
                    st_run<2, 4>(sm, L::DHB + po, L::HB_PL, xd);
                }
            }
            if (PAIR == 1 || hq * 4 / VB != e) {
                const int u = tid / TPG * (VB / 4) + tid % (VB / 4);  // among these threads
#pragma unroll
                for (int k = 0; k < NPC; ++k) {
                    const int pc = u + k * (256 / PAIR), r = pc / (VB / 4), c = (pc % (VB / 4)) * 4;
                    const int po = r * L::PBV + c * 2, si = r * VB + c;  // plane offset; element
                    if constexpr (RC) {  // Y and dΔ come after KHg and dΔ below
                        if (!delta) in4_planes<NP>(sm, L::DL + po, L::V_PL, L::SV + si * ESZ);
                    } else {
                        const float4 d = *(const float4 *)(sm + L::SDD + si * 4);
                        const float xd[4] = {d.x, d.y, d.z, d.w};
                        st_run<2, 4>(sm, L::DD + po, L::V_PL, xd);
                        if (delta) {
                            const float4 v = ld_in4<NP>(sm + L::SV + si * ESZ);
                            const uint2 kh = *(const uint2 *)(sm + L::SK + po);
                            const uint2 kl = *(const uint2 *)(sm + L::SK + L::V_PL + po);
                            const float2 k0 = kp_sum2(kh.x, kl.x), k1 = kp_sum2(kh.y, kl.y);
                            const float y[4] = {v.x - k0.x, v.y - k0.y, v.z - k1.x, v.w - k1.y};
                            st_run<2, 4>(sm, L::Y + po, L::V_PL, y);
                        } else {
                            in4_planes<NP>(sm, L::DL + po, L::V_PL, L::SV + si * ESZ);  // Δ = V
                            if (kh == 0 && r < nvalid) {
                                st_out2<NP>(dvg, (size_t)r * rsv + v0 + c, d.x, d.y);
                                st_out2<NP>(dvg, (size_t)r * rsv + v0 + c + 2, d.z, d.w);
                            }
                        }
                    }
                    in4_planes<NP>(sm, L::DO + po, L::V_PL, L::SDO + si * ESZ);
                }
            }
            __syncthreads();  // the planes complete; the staging free but for KHg (RC: V)
            }  // !EA
            // the next sub-block, or the next pass's first
            const int vn = v0 + VB < DV ? v0 + VB : 0, kn = v0 + VB < DV ? kh : kh + 1;
            if constexpr (L::EA) {  // the next sub-block's dO, H, dH' (this one's were converted
                                    // before the barrier above); after the last sub-block,
                                    // phase 2's Linv and Q into that staging
                if (kn < NKH) {
                    stageA(kn, vn);
                } else {
#pragma unroll
                    for (int pl = 0; pl < 2; ++pl)
                        cp_rows_bf16(sb + L::LVP + pl * L::CC_PL, L::PBC,
                                     a.Lv + (cix * 2 + pl) * C * C, C, C, C, C, tid, 256);
                    load_in_rows<NP>(sm, L::QP2, L::PBH, L::QH_PL, qg, rsk, C, DK, nvalid, tid,
                                     256);
                }
                cp_async_commit();
            }
            // (RC, warps 4-7) KHg at the thread's dV fragment elements: from Y to the dV epilogue
            // in the dH' staging (read by then; EA: in DQK | XB), thread-private float4 slots
            // (conflict-free)
            float4 *khs = (float4 *)(sm + L::KHS) + (tid - 128);
            static_assert(!RC || L::EA || NTV * 128 * 16 <= DKH * VB * 4,
                          "final: KHg in the dH' staging");
            if constexpr (RC) {
                // dΔ = P^T dO + diag(hdec) K dH' (dH' as hi + lo) by warps 0-3; KHg = diag(gamma)
                // K H (H as hi + lo, as prep formed it) and Y = V - KHg by warps 4-7; each in
                // the tiling of stage A below (rows m0, all VB columns), in halves of 16 columns
                // (all VB at once spills: the 96 accumulators of stage B are live here)
                if constexpr (WG != 0) {  // warpgroup 0: K dH' (dΔ); 1: K H (KHg); all VB columns
                    float acc[8][4] = {};
                    final_wg_kpanel(acc, sKh,  // dH' slot e, as H's
                                    sb + (uint32_t)(ch == 0 ? L::DHB + e * L::HB_SLOT : hbo), m0,
                                    lane);
                    float x[NTV][4];
#pragma unroll
                    for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                        for (int q = 0; q < 4; ++q) x[nt][q] = acc[nt][q] + acc[nt + NTV][q];
                    if (ch == 0) {  // scaled by hdec, then P^T dO by mma.sync
#pragma unroll
                        for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                            for (int q = 0; q < 4; ++q) x[nt][q] *= hdec[m0 + g4 + (q >> 1) * 8];
                        wmm<1, true, true, NTV>(x, sPP, sDO, m0, 0, m0, C, lane);  // P lower
                        frag_each<NTV>(x, m0, 0, lane, [&](int i, int j, float x0, float x1) {
                            st_pair<2>(sm, L::DD + i * L::PBV + j * 2, L::V_PL, x0, x1);
                        });
                    } else {  // as the mma.sync path below, all VB columns at once
#pragma unroll
                        for (int nt = 0; nt < NTV; ++nt) {
#pragma unroll
                            for (int hr = 0; hr < 2; ++hr) {
                                const int i = m0 + g4 + hr * 8, j = nt * 8 + 2 * t4;
                                x[nt][2 * hr] *= gam[i];
                                x[nt][2 * hr + 1] *= gam[i];
                                const float2 v = ld_in2<NP>(sm + L::SV, (size_t)i * VB + j);
                                // the Y panel (wgmma's B of dΔ Y^T)
                                st_pair_panel<C>(sm, L::Y, i, j, v.x - x[nt][2 * hr],
                                                 v.y - x[nt][2 * hr + 1]);
                            }
                            khs[nt * 128] = make_float4(x[nt][0], x[nt][1], x[nt][2], x[nt][3]);
                        }
                        wg_fence_proxy();  // published by the barrier below
                    }
                } else
#pragma unroll 1
                for (int hf = 0; hf < NTV / 2; ++hf) {
                    float x[2][4] = {};
                    if (ch == 0) {  // K dH', scaled by hdec, then P^T dO by the same mma chain
                        wmm<1, false, true, 2, 2>(x, sKh, sDHB, m0, hf * 16, 0, DKH, lane);
#pragma unroll
                        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                            for (int q = 0; q < 4; ++q) x[nt][q] *= hdec[m0 + g4 + (q >> 1) * 8];
                        wmm<1, true, true, 2>(x, sPP, sDO, m0, hf * 16, m0, C, lane);  // P lower
                        frag_each<2>(x, m0, hf * 16, lane, [&](int i, int j, float x0, float x1) {
                            st_pair<2>(sm, L::DD + i * L::PBV + j * 2, L::V_PL, x0, x1);
                            if (!delta && i < nvalid)  // dV = dΔ
                                st_out2<NP>(dvg, (size_t)i * rsv + v0 + j, x0, x1);
                        });
                    } else if (delta) {
                        const smat sHB{sb + (uint32_t)hbo, L::PBV, L::HB_PL};
                        wmm<1, false, true, 2, 2>(x, sKh, sHB, m0, hf * 16, 0, DKH, lane);
#pragma unroll
                        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                            for (int hr = 0; hr < 2; ++hr) {
                                const int i = m0 + g4 + hr * 8, j = hf * 16 + nt * 8 + 2 * t4;
                                x[nt][2 * hr] *= gam[i];
                                x[nt][2 * hr + 1] *= gam[i];
                                const float2 v = ld_in2<NP>(sm + L::SV, (size_t)i * VB + j);
                                st_pair<2>(sm, L::Y + i * L::PBV + j * 2, L::V_PL,
                                           v.x - x[nt][2 * hr], v.y - x[nt][2 * hr + 1]);
                            }
                            khs[(hf * 2 + nt) * 128] =
                                make_float4(x[nt][0], x[nt][1], x[nt][2], x[nt][3]);
                        }
                    }
                }
                __syncthreads();  // dΔ and Y complete; the staging is free
            }
            if constexpr (L::EA) {
                if (kn < NKH) stageV(vn);
            } else if (kn < NKH) {
                stage1(kn, vn);
            }
            cp_async_commit();

            if (delta) {
                if (ch == 0) {  // Δ = T Y (T lower: k up to this row block)
                    float acc[NTV][4] = {};
                    if constexpr (L::WP)  // Y from its panel: the same bits
                        wmm_bpanel<C, NTV, 2>(acc, sT, sb + L::Y, m0, 0, 0, m0 + 16, lane);
                    else
                        wmm<2, false, true, NTV>(acc, sT, sY, m0, 0, 0, m0 + 16, lane);
                    frag_each<NTV>(acc, m0, 0, lane, [&](int i, int j, float x0, float x1) {
                        if constexpr (L::WP)  // the Δ panel (wgmma's B of dO Δ^T)
                            st_pair_panel<C>(sm, L::DL, i, j, x0, x1);
                        else
                            st_pair<2>(sm, L::DL + i * L::PBV + j * 2, L::V_PL, x0, x1);
                        st_pair<2>(sm, L::DH + i * L::PBV + j * 2, L::V_PL, hdec[i] * x0,
                                   hdec[i] * x1);
                    });
                    if constexpr (L::WP) wg_fence_proxy();  // published by the barrier below
                } else {  // dV = T^T dΔ (k from this row block on)
                    float av[NTV][4] = {};
                    wmm<2, true, true, NTV>(av, sT, sDD, m0, 0, m0, C, lane);
                    float ps[2] = {0.f, 0.f};
#pragma unroll
                    for (int nt = 0; nt < NTV; ++nt) {
                        float4 k4;
                        if constexpr (RC) k4 = khs[nt * 128];
#pragma unroll
                        for (int hr = 0; hr < 2; ++hr) {
                            const int i = m0 + g4 + hr * 8, j = nt * 8 + 2 * t4;
                            const int po = i * L::PBV + j * 2;
                            const float x0 = av[nt][2 * hr], x1 = av[nt][2 * hr + 1];
                            st_pair<NP>(sm, dvo + po, L::V_PL, -gam[i] * x0, -gam[i] * x1);
                            if (kh == 0) {
                                float2 kg2;
                                if constexpr (RC)
                                    kg2 = hr ? make_float2(k4.z, k4.w) : make_float2(k4.x, k4.y);
                                else
                                    kg2 = kp_sum2(*(const uint32_t *)(sm + L::SK + po),
                                                  *(const uint32_t *)(sm + L::SK + L::V_PL + po));
                                if (i < nvalid) st_out2<NP>(dvg, (size_t)i * rsv + v0 + j, x0, x1);
                                ps[hr] -= kg2.x * x0 + kg2.y * x1;
                            }
                        }
                    }
                    if (kh == 0) {  // gamma_r k_r.dKg_r = -KHg_r.dV_r, one partial per slot
                        ps[0] = quad_sum(ps[0]);
                        ps[1] = quad_sum(ps[1]);
                        if (t4 == 0) {
                            pos2p[e * C + m0 + g4] += ps[0];
                            pos2p[e * C + m0 + g4 + 8] += ps[1];
                        }
                    }
                }
            } else {  // Δ = V: Δh = diag(hdec) V
                for (int e2 = tid; e2 < C * VB / 2; e2 += 256) {
                    const int i = e2 / (VB / 2), j = (e2 % (VB / 2)) * 2;
                    const float2 d = ld_pair<NP>(sm, L::DL + i * L::PBV + j * 2, L::V_PL);
                    st_pair<2>(sm, L::DH + i * L::PBV + j * 2, L::V_PL, hdec[i] * d.x,
                               hdec[i] * d.y);
                }
            }
            __syncthreads();  // Δ, Δh, -γdV complete; KHg read
            if constexpr (!L::EA) {
                if (kn < NKH) stage2(kn, vn);
                cp_async_commit();
            }

            if constexpr (WG != 0) {  // the H and C x C products on wgmma, the next sub-block's
                                      // conversion under them
                const smat sG{sb + (uint32_t)dvo, L::PBV, L::V_PL};
                final_wg_hprod(
                    aQ, aK, sDO, sDH, sG, sb + (uint32_t)hbo,
                    sb + (uint32_t)(L::DHB + e * L::HB_SLOT), m0, q0, lane,
                    [&] {
                        if (kn < NKH) {
                            cp_async_wait<1>();  // its dO, H, dH' (V may travel)
                            __syncthreads();  // everyone's; every warp's A fragments of
                                              // this group (dO planes) are loaded
                            convert_ea(vn);
                        }
                    },
                    aP, aT, sDD, sb + L::DL, sb + L::Y, ch * 32);
            } else {
                if (kh == 0) {
                    if (delta) {  // dO Δ^T, dΔ Y^T
                        wmm<NP, false, false, 4, 2>(aP, sDO, sDL, m0, ch * 32, 0, VB, lane);
                        wmm<2, false, false, 4>(aT, sDD, sY, m0, ch * 32, 0, VB, lane);
                    } else {  // dO V^T
                        wmm<NP, false, false, 4>(aP, sDO, sDL, m0, ch * 32, 0, VB, lane);
                    }
                }
                const smat sHB{sb + (uint32_t)hbo, L::PBV, L::HB_PL};
                wmm<NP, false, false, NQ, 2>(aQ, sDO, sHB, m0, q0, 0, VB, lane);    // dO H^T
                wmm<2, false, false, NQ>(aK, sDH, sDHB, m0, q0, 0, VB, lane);        // Δh dH'^T
                if (delta && e == PAIR - 1)  // -γdV H^T of the VG group's sub-blocks, in order
#pragma unroll 1
                    for (int x = 0; x < PAIR; ++x) {
                        const smat sG{sb + L::DVG + x * NP * L::V_PL, L::PBV, L::V_PL};
                        const smat sH{sb + L::HB + x * 2 * L::HB_PL, L::PBV, L::HB_PL};
                        wmm<NP, false, false, NQ, 2>(aK, sG, sH, m0, q0, 0, VB, lane);
                    }
            }
        }
        __syncthreads();  // the value-block buffers are dead: region R takes phase 2
        if constexpr (!L::EA) {  // (EA: Linv and Q were staged during the last sub-block)
            if (kh == 0 && delta)  // Linv again (phase 1 overwrote the setup's copy), first needed
                                   // by dbd: it travels with the PA loads just below
#pragma unroll
                for (int pl = 0; pl < 2; ++pl)
                    cp_rows_bf16(sb + L::LVP + pl * L::CC_PL, L::PBC,
                                 a.Lv + (cix * 2 + pl) * C * C, C, C, C, C, tid, 256);
            if constexpr (RC)  // Q (K is resident): QK^T is formed again just below, with Linv
                load_in_rows<NP>(sm, L::QH, L::PBH, L::QH_PL, qg, rsk, C, DK, nvalid, tid, 256);
        }
        cp_async_commit();
        if constexpr (!RC) {
            load_in_rows<NP>(sm, L::QH, L::PBH, L::QH_PL, qg + c0 * esz, rsk, C, DKH, nvalid, tid,
                             256);
            load_in_rows<NP>(sm, L::KH, L::PBH, L::QH_PL, kg + c0 * esz, rsk, C, DKH, nvalid, tid,
                             256);
        }
        cp_async_commit();  // waited for after the C x C work

        // ---- C x C work (once): dQK, M, Z = dT T^T, dA = -Linv^T Z, X, dbeta, cross sums --------
        if (kh == 0) {
            if constexpr (!RC)
                frag_each<4>(aP, m0, ch * 32, lane, [&](int i, int j, float x0, float x1) {
                    *(float2 *)(F1 + i * L::PF + j) = make_float2(x0, x1);
                });
            if (delta)
                frag_each<4>(aT, m0, ch * 32, lane, [&](int i, int j, float x0, float x1) {
                    st_pair<2>(sm, L::DT + i * L::PBC + j * 2, L::CC_PL, j <= i ? x0 : 0.f,
                               j + 1 <= i ? x1 : 0.f);
                });
            if constexpr (RC) {  // dQK and dP ⊙ QK ⊙ Gam from dP (aP) and QK^T in its tiling
                cp_async_wait<1>();  // Linv and Q
                __syncthreads();
                float qk[4][4];
                abt_lower<DKH>(qk, sQ2, sKh, m0, ch * 32, lane);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int hr = 0; hr < 2; ++hr) {
                        const int i = m0 + g4 + hr * 8, j = ch * 32 + nt * 8 + 2 * t4;
                        float dq2[2], m2[2];
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const float d = aP[nt][2 * hr + e], gij = gam_ij(Gh, Gl, i, j + e);
                            dq2[e] = j + e <= i ? d * gij : 0.f;
                            m2[e] = j + e < i ? d * (qk[nt][2 * hr + e] * gij) : 0.f;
                        }
                        st_pair<NP>(sm, L::DQK + i * L::PBC + j * 2, L::CC_PL, dq2[0], dq2[1]);
                        *(float2 *)(F1 + i * L::PF + j) = make_float2(m2[0], m2[1]);
                    }
            } else {
                // PA (Gam ⊙ QK^T) for dP ⊙ QK ⊙ Gam just below, all issued before the first use
                float pa1[C * C / 256];
#pragma unroll
                for (int it = 0; it < C * C / 256; ++it) {
                    const int e = tid + it * 256, i = e / C, j = e % C;
                    pa1[it] = j < i ? PAg[i * C + j] : 0.f;
                }
                cp_async_wait<1>();  // Linv (Q, K may still be in flight)
                __syncthreads();
#pragma unroll
                for (int it = 0; it < C * C / 256; ++it) {
                    const int e = tid + it * 256, i = e / C, j = e % C;
                    const float d = F1[i * L::PF + j];
                    st_one<NP>(sm, L::DQK + i * L::PBC + j * 2, L::CC_PL,
                               j <= i ? d * gam_ij(Gh, Gl, i, j) : 0.f);
                    F1[i * L::PF + j] = j < i ? d * pa1[it] : 0.f;  // dP ⊙ QK ⊙ Gam
                }
            }
            if (delta) {  // (Linv^T dT)_ii: 4 threads per column i, rows m = q mod 4, m >= i
                const int i = tid >> 2, q = tid & 3;
                float s = 0.f;
                // from the warp's first column 8 warp on (the rows above hold none of its terms);
                // loads unconditional (in range), so they pipeline; the term only for m >= i
#pragma unroll 4
                for (int k = 2 * warp; k < C / 4; ++k) {
                    const int m = 4 * k + q;
                    const float t = fmaf(ld_one<2>(sm, L::LVP + m * L::PBC + i * 2, L::CC_PL),
                                         ld_one<2>(sm, L::DT + m * L::PBC + i * 2, L::CC_PL), s);
                    s = m >= i ? t : s;
                }
                s = quad_sum(s);  // the same value in the 4 lanes
                if (q == 0) dbd[i] = s;
            }
            __syncthreads();
            if (delta) {
                {
                    float acc[4][4] = {};
                    wmm<2, false, false, 4>(acc, sDT, sT, m0, ch * 32, 0, C, lane);  // dT T^T
                    frag_each<4>(acc, m0, ch * 32, lane, [&](int i, int j, float x0, float x1) {
                        st_pair<2>(sm, L::ZB + i * L::PBC + j * 2, L::CC_PL, j < i ? x0 : 0.f,
                                   j + 1 < i ? x1 : 0.f);
                    });
                }
                __syncthreads();  // Z complete
                {
                    float pa2[4][2][2];  // (Gam ⊙ KK^T)_i,jj here, 0 unless jj < i
                    float kk[4][4];      // (RC) KK^T in this tiling
                    if constexpr (RC) abt_lower<DKH>(kk, sKh, sKh, m0, ch * 32, lane);
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                        for (int hr = 0; hr < 2; ++hr)
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int i = m0 + g4 + hr * 8, jj = ch * 32 + nt * 8 + 2 * t4 + e;
                                if constexpr (RC)
                                    pa2[nt][hr][e] =
                                        jj < i ? kk[nt][2 * hr + e] * gam_ij(Gh, Gl, i, jj) : 0.f;
                                else
                                    pa2[nt][hr][e] = jj < i ? PAg[jj * C + i] : 0.f;
                            }
                    float acc[4][4] = {};
                    wmm<2, true, true, 4>(acc, sLv, sZ, m0, ch * 32, m0, C, lane);  // Linv^T Z
                    float pb[2] = {0.f, 0.f};
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                        for (int hr = 0; hr < 2; ++hr) {
                            const int i = m0 + g4 + hr * 8, j = ch * 32 + nt * 8 + 2 * t4;
                            float xv[2];
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int jj = j + e;
                                const float dA = jj < i ? -acc[nt][2 * hr + e] : 0.f;
                                const float ak = pa2[nt][hr][e];  // 0 unless jj < i
                                F1[i * L::PF + jj] += bsm[i] * dA * ak;
                                pb[hr] += dA * ak;
                                xv[e] = jj < i ? bsm[i] * dA * gam_ij(Gh, Gl, i, jj) : 0.f;
                            }
                            st_pair<NP>(sm, L::XB + i * L::PBC + j * 2, L::CC_PL, xv[0], xv[1]);
                        }
#pragma unroll
                    for (int hr = 0; hr < 2; ++hr) pb[hr] = quad_sum(pb[hr]);
                    if (t4 == 0) {
                        dbp[ch * C + m0 + g4] = pb[0];
                        dbp[ch * C + m0 + g4 + 8] = pb[1];
                    }
                }
                __syncthreads();
                if (tid < nvalid && p.dbeta)
                    p.dbeta[row0 + (size_t)tid * H] = dbd[tid] + dbp[tid] + dbp[C + tid];
            }
            if (gate) {
                {  // row prefix: F1[i][s] = sum_{j < s} M_ij; 4 threads per row i, thread q
                   // its C/4 columns: their sum, the earlier segments' sums (quad shuffles,
                   // added in order), then the running sum from there
                    const int i = tid >> 2, q = tid & 3;
                    float4 *row = (float4 *)(F1 + i * L::PF + q * (C / 4));
                    float4 mv[C / 16];
#pragma unroll
                    for (int k = 0; k < C / 16; ++k) mv[k] = row[k];
                    float seg = 0.f;
#pragma unroll
                    for (int k = 0; k < C / 16; ++k) {
                        seg += mv[k].x;
                        seg += mv[k].y;
                        seg += mv[k].z;
                        seg += mv[k].w;
                    }
                    const int qb = lane & ~3;
                    const float s0 = __shfl_sync(0xffffffffu, seg, qb);
                    const float s1 = __shfl_sync(0xffffffffu, seg, qb + 1);
                    const float s2 = __shfl_sync(0xffffffffu, seg, qb + 2);
                    float run = 0.f;
                    if (q > 0) run = s0;
                    if (q > 1) run += s1;
                    if (q > 2) run += s2;
#pragma unroll
                    for (int k = 0; k < C / 16; ++k) {
                        float4 o;
                        o.x = run;
                        run += mv[k].x;
                        o.y = run;
                        run += mv[k].y;
                        o.z = run;
                        run += mv[k].z;
                        o.w = run;
                        run += mv[k].w;
                        row[k] = o;
                    }
                }
                __syncthreads();
                {  // cross_s = sum_{i >= s > j} M_ij: 4 threads per column s, rows i = q mod 4,
                   // from the warp's first column 8 warp on (as dbd above)
                    const int s = tid >> 2, q = tid & 3;
                    float acc = 0.f;
#pragma unroll 4
                    for (int k = 2 * warp; k < C / 4; ++k) {
                        const int i = 4 * k + q;
                        const float f = F1[i * L::PF + s];
                        acc = i >= s ? acc + f : acc;
                    }
                    acc = quad_sum(acc);
                    if (q == 0) cross[s] = acc;
                }
            }
            __syncthreads();
        }

        cp_async_wait_all();
        __syncthreads();  // this pass's Q, K columns are in

        // ---- dQp = diag(gamma) dO H^T; row dots q.dQp (pos) and k.dKp (t + pos2) -------------
        {
            float pq[2] = {0.f, 0.f}, pk[2] = {0.f, 0.f};
#pragma unroll
            for (int nt = 0; nt < NQ; ++nt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const int i = m0 + g4 + hr * 8, j = q0 + nt * 8 + 2 * t4;
                    aQ[nt][2 * hr] *= gam[i];
                    aQ[nt][2 * hr + 1] *= gam[i];
                    const float2 qv = ld_pair<NP>(sm, L::QP2 + i * L::PBH + j * 2, L::QH_PL);
                    const float2 kv = ld_pair<NP>(sm, L::KH + i * L::PBH + j * 2, L::QH_PL);
                    pq[hr] += qv.x * aQ[nt][2 * hr] + qv.y * aQ[nt][2 * hr + 1];
                    pk[hr] += kv.x * aK[nt][2 * hr] + kv.y * aK[nt][2 * hr + 1];
                }
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                pq[hr] = quad_sum(pq[hr]);
                pk[hr] = quad_sum(pk[hr]);
            }
            if (t4 == 0) {
                pos1p[ch * C + m0 + g4] += pq[0];
                pos1p[ch * C + m0 + g4 + 8] += pq[1];
                tkp[ch * C + m0 + g4] += pk[0];
                tkp[ch * C + m0 + g4 + 8] += pk[1];
            }
        }

        // ---- dQ = dQp + dQK K;  dK = dKp + dQK^T Q + X K + X^T K  (this pass's columns) --------
        wmm<NP, false, true, NQ>(aQ, sdQK, sKh, m0, q0, 0, m0 + 16, lane);
        wmm<NP, true, true, NQ>(aK, sdQK, sQ2, m0, q0, m0, C, lane);
        if (delta) {
            wmm<NP, false, true, NQ>(aK, sX, sKh, m0, q0, 0, m0 + 16, lane);
            wmm<NP, true, true, NQ>(aK, sX, sKh, m0, q0, m0, C, lane);
        }
#pragma unroll
        for (int nt = 0; nt < NQ; ++nt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int i = m0 + g4 + hr * 8, j = c0 + q0 + nt * 8 + 2 * t4;
                if (i < nvalid) {
                    st_out2<NP>(dqg, (size_t)i * rsk + j, aQ[nt][2 * hr], aQ[nt][2 * hr + 1]);
                    st_out2<NP>(dkg, (size_t)i * rsk + j, aK[nt][2 * hr], aK[nt][2 * hr + 1]);
                }
            }
        __syncthreads();  // region R is reused by the next pass
    }

    // ---- dg_s = sum_{r >= s} pos_r + sum_{r < s} t_r + cross_s --------------------------------
    // <H, dH'>: a butterfly in each warp (every lane ends with the same sum), then the 8 warp
    // sums in order. The sums over r: warp 0, rows 2 lane and 2 lane + 1, as warp scans of the
    // row-pair sums (fixed order: deterministic; no difference of prefix sums is formed)
    {
        float hs = hdh;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) hs += __shfl_xor_sync(0xffffffffu, hs, o);
        if (lane == 0) red[warp] = hs;
    }
    __syncthreads();
    if (gate && p.dg && warp == 0) {
        float hd = red[0];
#pragma unroll
        for (int w = 1; w < 8; ++w) hd += red[w];
        const int r0 = 2 * lane;
        float P[2], U[2];  // pos_r; t_r - gamma_r k_r.dKg_r
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int r = r0 + e;
            P[e] = (pos1p[r] + pos1p[C + r]) + (pos2p[r] + pos2p[C + r]);
            U[e] = (tkp[r] + tkp[C + r]) - (pos2p[r] + pos2p[C + r]);
        }
        float sp = P[0] + P[1], pu = U[0] + U[1];  // -> over lanes >= lane; lanes <= lane
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const float x = __shfl_down_sync(0xffffffffu, sp, d);
            const float y = __shfl_up_sync(0xffffffffu, pu, d);
            if (lane + d < 32) sp += x;
            if (lane >= d) pu = y + pu;
        }
        const float spn = __shfl_down_sync(0xffffffffu, sp, 1);
        const float pup = __shfl_up_sync(0xffffffffu, pu, 1);
        float suf[2], pre[2];  // sum_{r >= r0 + e} pos_r; sum_{r < r0 + e} (t_r - ...)
        suf[1] = lane < 31 ? P[1] + spn : P[1];
        suf[0] = P[0] + suf[1];
        pre[0] = lane > 0 ? pup : 0.f;
        pre[1] = lane > 0 ? pup + U[0] : U[0];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int s = r0 + e;
            float acc = fmaf(gam[C - 1], hd, cross[s]);
            acc += suf[e];
            if (s > 0) acc += pre[e];
            if (s < nvalid) p.dg[row0 + (size_t)s * H] = acc;
        }
    }
}

// ---- launchers ---------------------------------------------------------------------------------
// (Sessions 8-14's A/B switches GDN_BWD_PREP2, GDN_BWD_SCAN2, GDN_BWD_SCAN_DLOC and
// GDN_BWD_FINAL_EARLY, and GDN_BWD_WGMMA's levels 1-3, were deleted in session 15 with the
// kernels only they reached: see the header.)
template <class K>
void set_smem(K kern, int bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// prep2 on the recompute path (bf16, Dk <= 128), prep off it
template <int DK, int NP>
void gdn_bwd_prep_launch(const bwd_args &a) {
    const dim3 grid(a.NC, a.p.H, a.p.B);
    if constexpr (recompute_path(DK, NP)) {
        using L2 = prep2_layout<DK, NP>;
        static bool attr2_done = false;
        if (!attr2_done) {  // the most shared memory per SM (4 CTAs of 55 KB at Dk 128)
            set_smem(gdn_bwd_prep2_kernel<DK, NP>, L2::BYTES);
            CUDA_CHECK(cudaFuncSetAttribute(gdn_bwd_prep2_kernel<DK, NP>,
                                            cudaFuncAttributePreferredSharedMemoryCarveout,
                                            (int)cudaSharedmemCarveoutMaxShared));
            int per_sm = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &per_sm, gdn_bwd_prep2_kernel<DK, NP>, 128, L2::BYTES));
            if (DK == 128 && per_sm < 4)
                fprintf(stderr, "gdn_chunk_bwd: prep2 runs %d CTAs per SM, not 4 "
                                "(registers or shared memory): slower than planned\n", per_sm);
            attr2_done = true;
        }
        gdn_bwd_prep2_kernel<DK, NP><<<grid, 128, L2::BYTES, a.p.stream>>>(a);
    } else {
        using L = prep_layout<DK, NP>;
        static bool attr_done = false;  // one attribute call per instance
        if (!attr_done) {
            set_smem(gdn_bwd_prep_kernel<DK, NP>, L::BYTES);
            attr_done = true;
        }
        gdn_bwd_prep_kernel<DK, NP><<<grid, 128, L::BYTES, a.p.stream>>>(a);
    }
    CUDA_CHECK_LAUNCH();
}
// the kernel's shared-memory attribute, once per instantiation
template <int DK, int DVB, int NP, int SMAX, bool PIPE = false>
void gdn_bwd_scan_attr() {
    static bool attr_done = false;
    if (!attr_done) {
        set_smem(gdn_bwd_scan_kernel<DK, DVB, NP, SMAX, PIPE>,
                 scan_layout<DK, DVB, NP, SMAX>::BYTES);
        attr_done = true;
    }
}
template <int DK, int DVB, int NP, int SMAX, bool PIPE = false>
void gdn_bwd_scan_launch_s(const bwd_args &a, dim3 grid) {
    gdn_bwd_scan_attr<DK, DVB, NP, SMAX, PIPE>();
    gdn_bwd_scan_kernel<DK, DVB, NP, SMAX, PIPE>
        <<<grid, 128, scan_layout<DK, DVB, NP, SMAX>::BYTES, a.p.stream>>>(a);
    CUDA_CHECK_LAUNCH();
}
// The pipelined one-stage scan (gdn_bwd_scan_kernel PIPE) runs where the inputs are bf16 and
// the one-stage kernel without SD (fp32 dΔ_loc rows) stages its sets by cp.async (PF): the
// criterion it was chosen by before SD (whose sets are always staged) came, kept so that every
// shape keeps its kernel; elsewhere the one-stage scan is the unpipelined one
template <int DK, int DVB, int NP>
constexpr bool scan_pipe_ok() {
    return NP == 1 && scan_sets<DK, DVB, NP, 1, false>::S == 1 &&
           scan_sets<DK, DVB, NP, 1, false>::PF;
}
// One stage (two CTAs per SM) when the grid has more CTAs than the device has SMs and two of
// them fit on an SM; else two stages. Same arithmetic either way (bitwise the same results).
template <int DK, int DVB, int NP>
void gdn_bwd_scan_launch(const bwd_args &a) {
    constexpr bool pipe = scan_pipe_ok<DK, DVB, NP>();
    const dim3 grid(a.p.Dv / DVB, a.p.H, a.p.B);
    static int sms = 0, two_fit = -1;
    if (two_fit < 0) {  // (asked of the one-stage kernel that runs)
        int dev = 0, per_sm = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        gdn_bwd_scan_attr<DK, DVB, NP, 1, pipe>();
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, gdn_bwd_scan_kernel<DK, DVB, NP, 1, pipe>, 128,
            scan_layout<DK, DVB, NP, 1>::BYTES));
        two_fit = per_sm >= 2;
    }
    const int st = a.p.scan_stages;  // checked by gdn_chunk_bwd
    if (st == 1 || (st == 0 && two_fit && (long)grid.x * grid.y * grid.z > sms))
        gdn_bwd_scan_launch_s<DK, DVB, NP, 1, pipe>(a, grid);
    else
        gdn_bwd_scan_launch_s<DK, DVB, NP, 2>(a, grid);
}
template <int DK, int NP, int WG>
void gdn_bwd_final_launch_w(const bwd_args &a) {
    using L = final_layout<DK, NP, WG>;
    static bool attr_done = false;
    if (!attr_done) {
        set_smem(gdn_bwd_final_kernel<DK, NP, WG>, L::BYTES);
        attr_done = true;
    }
    const dim3 grid(a.NC, a.p.H, a.p.B);
    gdn_bwd_final_kernel<DK, NP, WG><<<grid, 256, L::BYTES, a.p.stream>>>(a);
    CUDA_CHECK_LAUNCH();
}
// Whether the wgmma final kernel (WG 4) runs for bf16 with Dk = 128 and delta on (the
// environment read once): not with GDN_BWD_WGMMA=0 (the mma.sync kernel, WG 0; any other value
// or none: wgmma), nor on a device without an sm_90a image (one H200: WG 2, the first two steps
// on wgmma, 6% faster than the mma.sync kernel's backward in session 8, WG 3 another ~1% in
// session 9, WG 4 another 0.2-1.7% in session 11; bench/gdn_bwd.md). Dk 64 (its 32 key columns
// per warpgroup would need m64n32), Dk 256, fp32 and delta off (no -γdV) always take the
// mma.sync kernel (cuda_check.h, cuda_sm90a_image_runs: a build without the sm_90a image would
// run the compute_80 PTX, JIT-compiled to the trap).
bool final_wgmma() {
    static int env = -1, image = -1;  // concurrent first calls store the same values
    if (env < 0) {
        const char *s = getenv("GDN_BWD_WGMMA");
        env = s && strcmp(s, "0") == 0 ? 0 : 1;
    }
    return env && cuda_sm90a_image_runs(gdn_bwd_final_kernel<128, 1, 4>, &image);
}
template <int DK, int NP>
void gdn_bwd_final_launch(const bwd_args &a) {
    if constexpr (DK == 128 && NP == 1) {
        if (a.p.mode.delta && final_wgmma()) {
            gdn_bwd_final_launch_w<DK, NP, 4>(a);
            return;
        }
    }
    gdn_bwd_final_launch_w<DK, NP, 0>(a);
}

template <int DK, int NP>
void gdn_bwd_run(const bwd_args &a, int dvb) {
    gdn_bwd_prep_launch<DK, NP>(a);
    if constexpr (NP == 2) {
        (void)dvb;
        gdn_bwd_scan_launch<DK, 16, 2>(a);
    } else {
        switch (dvb) {
        case 16: gdn_bwd_scan_launch<DK, 16, 1>(a); break;
        case 32: gdn_bwd_scan_launch<DK, 32, 1>(a); break;
        default:
            if constexpr (DK <= 128) gdn_bwd_scan_launch<DK, 64, 1>(a);
            else gdn_die("gdn_chunk_bwd: dv_block 64 with Dk %d", DK);
            break;
        }
    }
    gdn_bwd_final_launch<DK, NP>(a);
}

// The second forward scan's parameters: chunk-start states into hs, no o (the states-only
// forward); the workspace is set by the caller
gdn_fwd_params recompute_fwd_params(const gdn_bwd_params *p, float *hs) {
    gdn_fwd_params f;
    memset(&f, 0, sizeof f);
    f.B = p->B;
    f.T = p->T;
    f.H = p->H;
    f.Dk = p->Dk;
    f.Dv = p->Dv;
    f.mode = p->mode;
    f.dtype = p->dtype;
    f.q = p->q;
    f.k = p->k;
    f.v = p->v;
    f.g = p->g;
    f.beta = p->beta;
    f.h0 = p->h0;
    f.ht = NULL;
    f.h_states = hs;
    f.keep_t = (void *)p->fwd_keep_t;  // the forward's T, G or Δ~: no prep kernel, or a replay
    f.keep_g = (float *)p->fwd_keep_g;
    f.keep_dt = (void *)p->fwd_keep_dt;
    f.keep_ready = p->fwd_keep_g && (p->fwd_keep_t || p->fwd_keep_dt);
    f.dv_block = 0;
    f.stream = p->stream;
    return f;
}
bool gdn_bwd_rc(const gdn_bwd_params *p) {  // the kernels' recompute_path
    return recompute_path(p->Dk, p->dtype == GDN_DTYPE_FP32 ? 2 : 1);
}
size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }
// Workspace carving: one table, walked by the size query and by the entry alike.
struct ws_plan {
    size_t off_hs, off_dhs, off_dd, off_pa, off_lv, off_wp, off_kp, total;
};
ws_plan gdn_bwd_plan(const gdn_bwd_params *p) {
    const size_t NC = (size_t)(p->T + GDN_CHUNK - 1) / GDN_CHUNK;
    const size_t nch = (size_t)p->B * p->H * NC, C2 = (size_t)GDN_CHUNK;
    const size_t NP = p->dtype == GDN_DTYPE_FP32 ? 2 : 1;
    const size_t Dk = p->Dk, Dv = p->Dv;
    const bool rc = gdn_bwd_rc(p);
    ws_plan w;
    size_t o = 0;
    w.off_hs = o;
    if (!p->h_states) o += align256(nch * Dk * Dv * 4);
    w.off_dhs = o;
    size_t dhs = nch * Dk * Dv * 4;
    if (rc && !p->h_states) {  // the forward's workspace lives here until prep starts
        const gdn_fwd_params f = recompute_fwd_params(p, NULL);
        const size_t fws = gdn_chunk_fwd_workspace_bytes(&f);  // > dhs only at Dk = Dv = 64
        dhs = dhs > fws ? dhs : fws;
    }
    o += align256(dhs);
    w.off_dd = o;
    if (!rc) o += align256(nch * C2 * Dv * 4);
    w.off_pa = o;  // (recompute path: prep2's bf16 P plane for the scan)
    o += rc ? align256(nch * C2 * C2 * 2) : align256(nch * C2 * C2 * 4);
    w.off_lv = w.off_wp = w.off_kp = o;
    if (p->mode.delta) {  // Linv and KHg: hi + lo bf16 planes whatever the dtype; W: NP planes
        w.off_lv = o;
        o += align256(nch * 2 * C2 * C2 * 2);
        w.off_wp = o;
        o += align256(nch * NP * C2 * Dk * 2);
        w.off_kp = o;
        if (!rc) o += align256(nch * 2 * C2 * Dv * 2);
    }
    w.total = o;
    return w;
}

void gdn_bwd_check_ptr(const void *ptr, size_t align, const char *name) {
    if (!ptr) gdn_die("gdn_chunk_bwd: %s is NULL", name);
    if ((uintptr_t)ptr % align)
        gdn_die("gdn_chunk_bwd: %s = %p is not %zu-byte aligned\nHINT: carve tensors at 16-byte "
                "offsets (the workspace at 256)", name, ptr, align);
}

}  // namespace

extern "C" size_t gdn_chunk_bwd_workspace_bytes(const gdn_bwd_params *p) {
    if (!p) gdn_die("gdn_chunk_bwd_workspace_bytes: params is NULL");
    return gdn_bwd_plan(p).total;
}

extern "C" int gdn_chunk_bwd_dv_block(const gdn_bwd_params *p) {
    if (p->dv_block) return p->dv_block;
    if (p->dtype == GDN_DTYPE_FP32) return 16;
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // the largest block (least repeated chunk-local loads) that still fills every SM
    for (int d = p->Dk <= 128 ? 64 : 32; d >= 16; d /= 2)
        if ((long)p->B * p->H * (p->Dv / d) >= sms) return d;
    return 16;
}

extern "C" void gdn_chunk_bwd(const gdn_bwd_params *p) {
    if (!p) gdn_die("gdn_chunk_bwd: params is NULL");
    if (p->B < 1 || p->H < 1 || p->T < 0)
        gdn_die("gdn_chunk_bwd: bad shape B %d T %d H %d (B, H >= 1, T >= 0)", p->B, p->T, p->H);
    if (p->Dk != 64 && p->Dk != 128 && p->Dk != 256)
        gdn_die("gdn_chunk_bwd: Dk %d not supported\nHINT: kernels are built for Dk = 64, 128, 256",
                p->Dk);
    if (p->Dv != p->Dk && p->Dv != 2 * p->Dk)
        gdn_die("gdn_chunk_bwd: Dv %d not supported with Dk %d\nHINT: Dv = Dk or 2 Dk (expand_v 1 "
                "or 2)", p->Dv, p->Dk);
    if (p->dtype != GDN_DTYPE_BF16 && p->dtype != GDN_DTYPE_FP32)
        gdn_die("gdn_chunk_bwd: unknown dtype %d", (int)p->dtype);
    const bool f32 = p->dtype == GDN_DTYPE_FP32;
    const int dvb = gdn_chunk_bwd_dv_block(p);
    if (f32 && dvb != 16)
        gdn_die("gdn_chunk_bwd: dv_block %d with fp32 inputs\nHINT: fp32 runs with dv_block 16",
                dvb);
    if (p->scan_stages < 0 || p->scan_stages > 2)
        gdn_die("gdn_chunk_bwd: scan_stages %d\nHINT: 0 (choose), 1 or 2", p->scan_stages);
    if (dvb != 16 && dvb != 32 && !(dvb == 64 && p->Dk <= 128))
        gdn_die("gdn_chunk_bwd: dv_block %d not supported with Dk %d\nHINT: 16, 32, or 64 when "
                "Dk <= 128", dvb, p->Dk);
    const ws_plan w = gdn_bwd_plan(p);
    if (p->T == 0) {  // no tokens: dh0 = dht
        if (p->dh0) {
            const size_t bytes = (size_t)p->B * p->H * p->Dk * p->Dv * 4;
            if (p->dht)
                CUDA_CHECK(cudaMemcpyAsync(p->dh0, p->dht, bytes, cudaMemcpyDeviceToDevice,
                                           p->stream));
            else
                CUDA_CHECK(cudaMemsetAsync(p->dh0, 0, bytes, p->stream));
        }
        return;
    }
    gdn_bwd_check_ptr(p->q, 16, "q");
    gdn_bwd_check_ptr(p->k, 16, "k");
    gdn_bwd_check_ptr(p->v, 16, "v");
    gdn_bwd_check_ptr(p->dO, 16, "dO");
    gdn_bwd_check_ptr(p->dq, 16, "dq");
    gdn_bwd_check_ptr(p->dk, 16, "dk");
    gdn_bwd_check_ptr(p->dv, 16, "dv");
    if (p->mode.gate) gdn_bwd_check_ptr(p->g, 4, "g (gate on)");
    if (p->mode.delta) gdn_bwd_check_ptr(p->beta, 4, "beta (delta on)");
    if (p->h0) gdn_bwd_check_ptr(p->h0, 4, "h0");
    if (p->dht) gdn_bwd_check_ptr(p->dht, 8, "dht");
    if (p->dh0) gdn_bwd_check_ptr(p->dh0, 8, "dh0");
    if (p->h_states) gdn_bwd_check_ptr(p->h_states, 16, "h_states");
    if (!p->h_states) {
        if (p->fwd_keep_t) gdn_bwd_check_ptr(p->fwd_keep_t, 16, "fwd_keep_t");
        if (p->fwd_keep_g) gdn_bwd_check_ptr(p->fwd_keep_g, 16, "fwd_keep_g");
        if (p->fwd_keep_dt) gdn_bwd_check_ptr(p->fwd_keep_dt, 16, "fwd_keep_dt");
    }
    gdn_bwd_check_ptr(p->workspace, 256, "workspace");
    if (p->workspace_bytes < w.total)
        gdn_die("gdn_chunk_bwd: workspace of %zu bytes, %zu needed\nHINT: size it with "
                "gdn_chunk_bwd_workspace_bytes()", p->workspace_bytes, w.total);

    bwd_args a;
    a.p = *p;
    a.NC = (p->T + GDN_CHUNK - 1) / GDN_CHUNK;
    unsigned char *ws = (unsigned char *)p->workspace;
    a.dHs = (float *)(ws + w.off_dhs);
    const bool rc = gdn_bwd_rc(p);
    a.dD = rc ? NULL : (float *)(ws + w.off_dd);
    a.PA = rc ? NULL : (float *)(ws + w.off_pa);
    a.Lv = (bf16 *)(ws + w.off_lv);
    a.Wp = (bf16 *)(ws + w.off_wp);
    a.Kp = rc ? NULL : (bf16 *)(ws + w.off_kp);
    a.Pp = rc ? (bf16 *)(ws + w.off_pa) : NULL;  // prep2's P, for the scan's dΔ_loc = P^T dO
    if (p->h_states) {
        a.Hs = p->h_states;
    } else {  // second forward scan: chunk-start states only
        float *hs = (float *)(ws + w.off_hs);
        a.Hs = hs;
        gdn_fwd_params f = recompute_fwd_params(p, hs);
        // The forward's prep path (T, G once per chunk-head, then the scan) needs a workspace;
        // without one it runs fused, redoing them in every value-block CTA (3.1 vs 1.4 ms at B1
        // T32768 H16, bench/gdn_fwd.md). Lend it a region the backward fills only later: on the
        // recompute path the dH' region (sized for it by gdn_bwd_plan); else dH' (written by
        // the scan) or PA..Kp (written by prep), whichever is large enough.
        const size_t need = gdn_chunk_fwd_workspace_bytes(&f);
        if (rc) {
            if (need > 0) f.workspace = ws + w.off_dhs;
        } else {
            if (need > 0 && w.off_dd - w.off_dhs >= need)
                f.workspace = ws + w.off_dhs;
            else if (need > 0 && w.total - w.off_pa >= need)
                f.workspace = ws + w.off_pa;
        }
        gdn_chunk_fwd(&f);
    }
    if (f32) {
        switch (p->Dk) {
        case 64: gdn_bwd_run<64, 2>(a, dvb); break;
        case 128: gdn_bwd_run<128, 2>(a, dvb); break;
        default: gdn_bwd_run<256, 2>(a, dvb); break;
        }
    } else {
        switch (p->Dk) {
        case 64: gdn_bwd_run<64, 1>(a, dvb); break;
        case 128: gdn_bwd_run<128, 1>(a, dvb); break;
        default: gdn_bwd_run<256, 1>(a, dvb); break;
        }
    }
}
