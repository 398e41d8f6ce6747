// gdn_chunk.cu — the chunkwise gated delta rule forward on the GPU (DESIGN 3.1); gdn_cuda.h
// says what it computes and how the work is split. Kernels:
//
//   gdn_chunk_prep_kernel  one CTA per (b, h, chunk), all chunks at once (bf16, workspace):
//                          T = (I + A)^{-1} diag(beta), P (bf16) and G (fp32) -> workspace
//   gdn_chunk_fwd_kernel   one CTA per (b, h, block of value columns), chunks in order:
//                          the state recurrence and the output (PRE: T, P read from the
//                          workspace; fused: recomputed in the CTA); OUT false (o = NULL):
//                          states only, for the backward's recompute; with keep_dt also
//                          each chunk's Δ~ rows -> keep_dt (and G -> keep_g: prep)
//   gdn_chunk_replay_kernel  one CTA per (b, h, 64 value columns), chunks in order: the
//                          states again from keep_g and keep_dt, S' = gamma_C S + Δ~^T K only
//                          (keep_ready; bitwise the scan's states)
//
// Per chunk of C = 64 tokens, each warp group of 4 warps (DVB value columns):
//   G_r   = log2(e) (g_1 + .. + g_r)       per-warp scan; gamma_r = 2^G_r
//   P1    A  = strictLower(beta_i 2^(G_i-G_j) k_i.k_j)          fp32 -> smem
//         P  = lower(2^(G_i-G_j) q_i.k_j)  (diagonal included)  bf16 -> smem
//   P2    O  = diag(gamma) Q H                                   kept in registers
//         Y  = V - diag(gamma) K H                               bf16 -> smem
//   P3    X  = (I + A)^{-1} by 16x16 blocks: diagonal blocks by forward substitution (one
//         thread per column), off-diagonal X_IJ = -sum_K (X_II A_IK) X_KJ on tensor cores with
//         fp32 operands split into bf16 hi + lo;  T = X diag(beta)  bf16 -> smem
//   P4    Δ  = T Y   (= T V - W H with W = T diag(gamma) K, without forming W or U)
//   P5    O += P Δ -> global;   S' = gamma_C S + Δ~^T K,  Δ~ = diag(2^(G_C - G_r)) Δ
//
// The state is kept as S = H^T (DVB x Dk) in fp32 mma accumulators across chunks, with a bf16
// copy in shared memory as the B operand of P2. Gam is only ever formed from differences
// G_i - G_j, masked by a select (2^(G_i - G_j) overflows above the diagonal, never used).
// States only (OUT false, o = NULL, h_states set): no Q, no P (prep and the CTA skip it), no
// O in P2 and P5, no o stores; every operation on the path to S (A, T, Y, Δ, Δ~, S') is the
// same code, so the states are bitwise those of the o-producing instance.
// Traps of DESIGN 3.1: O reads the chunk-start state (P2 before P5); S is decayed before the
// accumulation; K enters raw (A, P, P5), scaled by gamma (Y) and by gamma_C/gamma (Δ~); A has
// no diagonal; the cross-chunk term -W H is inside Y.
//
// Loads are cp.async into shared memory, issued for chunk n+1 while chunk n computes (PRE: all
// of Q, K, T, P, G at the top of chunk n; fused: K, g, beta at the top, Q after P4 since its
// buffer holds T until then); V goes straight into registers (it only feeds P2's epilogue; one
// chunk ahead when DVB <= 32). fp32 inputs are split into hi/lo planes on load (synchronous,
// one K stage: that path is for checks, not speed). Measurements: bench/gdn_fwd.md.
#include "gdn_cuda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <cuda_bf16.h>

#include "../cuda/mma.cuh"
#include "../core/cuda_check.h"
#include "gdn_chunk_rows.cuh"

namespace {

constexpr int C = GDN_CHUNK;
constexpr int PA = C + 8;          // row pitch (floats) of the fp32 A / X matrix
constexpr int PCC = C + 8;         // row pitch (elements) of the bf16 C x C matrices (T, P)
constexpr float LOG2E = 1.4426950408889634f;

// Shared-memory layout of gdn_chunk_fwd_kernel (byte offsets). Operand matrices are bf16, row
// pitch padded by 8 elements (16 bytes) so that the 8 rows of each ldmatrix land in distinct
// bank groups; fp32 inputs keep NP = 2 planes (hi, lo) of each, *_PL bytes apart. NWG warp
// groups share Q, K, T, P and own Y, D, Dt, S. States only (OUT false): no P buffer, and no Q
// buffer on the prep path (the fused path keeps it: T lives there); Qs, Ps are then unused.
template <int DK, int DVB, int NWG, bool F32, bool PRE, bool OUT = true>
struct gdn_fwd_layout {
    static_assert(!(PRE && F32), "the prep path is bf16");
    static_assert(NWG == 1 || PRE, "two warp groups need the prep path");
    static constexpr int NW = 4 * NWG;                 // warps
    static constexpr int NP = F32 ? 2 : 1;
    static constexpr int QST = PRE ? 2 : 1, KST = F32 ? 1 : 2, PST = PRE ? 2 : 1;  // stages
    static constexpr int PQK = DK + 8, PV = DVB + 8;   // pitches (elements)
    static constexpr int QK_PL = C * PQK * 2;          // bytes of one plane: Q, K   (C x Dk)
    static constexpr int CC_PL = C * PCC * 2;          //                     P, T   (C x C)
    static constexpr int V_PL = C * PV * 2;            //                     Y, D, Dt (C x DVB)
    static constexpr int S_PL = DVB * PQK * 2;         //                     S      (DVB x Dk)
    static constexpr int QB = OUT || !PRE ? QST : 0, PB = OUT ? PST : 0;  // buffers
    static constexpr int Q = 0;
    static constexpr int K = Q + QB * NP * QK_PL;
    static constexpr int P = K + KST * NP * QK_PL;
    static constexpr int TB = P + PB * NP * CC_PL;     // PRE: 2 stages of T
    static constexpr int A = TB + (PRE ? 2 * CC_PL : 0);  // fused: fp32 A; D, Dt aliased
    static constexpr int WG0 = A + (PRE ? 0 : C * PA * 4);
    static constexpr int WGB = (PRE ? 3 : 1) * NP * V_PL + NP * S_PL;  // per group: Y [D Dt] S
    static constexpr int GB = WG0 + NWG * WGB;         // 2 stages x (g[C], beta[C]) fp32
    static constexpr int GW = GB + 2 * 2 * C * 4;      // NW x C fp32: each warp's G (log2)
    static constexpr int BYTES = GW + NW * C * 4;
    __host__ __device__ static constexpr int Y(int wg) { return WG0 + wg * WGB; }
    __host__ __device__ static constexpr int D(int wg) { return PRE ? Y(wg) + NP * V_PL : A; }
    __host__ __device__ static constexpr int DT(int wg) {
        return PRE ? Y(wg) + 2 * NP * V_PL : A + NP * V_PL;
    }
    __host__ __device__ static constexpr int S(int wg) {
        return Y(wg) + (PRE ? 3 : 1) * NP * V_PL;
    }
    // fused: T lives in Q's buffer (Q is dead after P2, reloaded after P4)
    __host__ __device__ static constexpr int T(int n) { return PRE ? TB + (n & 1) * CC_PL : Q; }
    __host__ __device__ static constexpr int Qs(int n) { return Q + (n % QST) * NP * QK_PL; }
    __host__ __device__ static constexpr int Ks(int n) { return K + (n % KST) * NP * QK_PL; }
    __host__ __device__ static constexpr int Ps(int n) { return P + (n % PST) * NP * CC_PL; }
    static_assert(CC_PL <= QK_PL, "T must fit in Q's buffer");
    static_assert(PRE || 2 * NP * V_PL <= C * PA * 4, "D and Dt must fit in A's buffer");
    static_assert(DVB % 16 == 0 && DK % 64 == 0, "tile shapes");
    static_assert(BYTES <= 232448, "shared memory per block");
};

// Shared-memory layout of gdn_chunk_prep_kernel: T is written over K, P over Q, once P1 has
// read them (54 KB at Dk = 128: 4 CTAs per SM)
template <int DK>
struct gdn_prep_layout {
    static constexpr int PQK = DK + 8, QK_PL = C * PQK * 2, CC_PL = C * PCC * 2;
    static constexpr int K = 0, T = K, Q = K + QK_PL, P = Q, A = Q + QK_PL;
    static constexpr int GB = A + C * PA * 4, GW = GB + 2 * C * 4, BYTES = GW + 4 * C * 4;
    static_assert(CC_PL <= QK_PL, "T, P fit in K's and Q's buffers");
};

// ---- PTX wrappers: shared with the backward (cuda/mma.cuh; the cp.async group
// wrappers cp_async_commit, cp_async_wait_all there are global) ------------------------------
using gdnk::cvt_rows_f32;
using gdnk::cp_async16;
using gdnk::cp_async4;
using gdnk::ldsm4;
using gdnk::ldsm4t;
using gdnk::mma16816;
using gdnk::pack_bf16;
using gdnk::smem_u32;
using gdnk::split2;

// ---- fragments (mma.sync m16n8k16 layouts; g = lane/4, t = lane%4) ---------------------------
// A (16x16): a0 = A[g][2t..], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
// B (16x8):  b0 = B[2t..][g], b1 = B[2t+8..][g]; one x4 load gives two n-tiles: r0,r1 | r2,r3
// C (16x8):  c0,c1 = C[g][2t..], c2,c3 = C[g+8][2t..]
// PB = row pitch in bytes, PL = plane distance in bytes; fp32 paths multiply with 3 products.

// A from row-major [m][k] storage
template <int NP, int PB, int PL>
__device__ __forceinline__ void lda(uint32_t (&a)[NP][4], uint32_t base, int m0, int k0,
                                    int lane) {
    const uint32_t ad = base + (m0 + (lane & 15)) * PB + (k0 + (lane >> 4) * 8) * 2;
#pragma unroll
    for (int p = 0; p < NP; ++p) ldsm4(a[p], ad + p * PL);
}
// A from [k][m] storage (A^T stored)
template <int NP, int PB, int PL>
__device__ __forceinline__ void lda_t(uint32_t (&a)[NP][4], uint32_t base, int k0, int m0,
                                      int lane) {
    const uint32_t ad = base + (k0 + ((lane >> 4) & 1) * 8 + (lane & 7)) * PB +
                        (m0 + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll
    for (int p = 0; p < NP; ++p) ldsm4t(a[p], ad + p * PL);
}
// B (two n-tiles n0..n0+15, k0..k0+15) from [n][k] storage
template <int NP, int PB, int PL>
__device__ __forceinline__ void ldb(uint32_t (&b)[NP][4], uint32_t base, int n0, int k0,
                                    int lane) {
    const uint32_t ad = base + (n0 + (lane >> 4) * 8 + (lane & 7)) * PB +
                        (k0 + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll
    for (int p = 0; p < NP; ++p) ldsm4(b[p], ad + p * PL);
}
// B (two n-tiles) from [k][n] storage
template <int NP, int PB, int PL>
__device__ __forceinline__ void ldb_t(uint32_t (&b)[NP][4], uint32_t base, int k0, int n0,
                                      int lane) {
    const uint32_t ad = base + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * PB +
                        (n0 + (lane >> 4) * 8) * 2;
#pragma unroll
    for (int p = 0; p < NP; ++p) ldsm4t(b[p], ad + p * PL);
}
// c += a * b[n-tile NT]; with planes: a_lo b_hi + a_hi b_lo + a_hi b_hi
template <int NT, int NP>
__device__ __forceinline__ void mma_p(float c[4], const uint32_t (&a)[NP][4],
                                      const uint32_t (&b)[NP][4]) {
    if constexpr (NP == 2) {
        mma16816(c, a[1], b[0][2 * NT], b[0][2 * NT + 1]);
        mma16816(c, a[0], b[1][2 * NT], b[1][2 * NT + 1]);
    }
    mma16816(c, a[0], b[0][2 * NT], b[0][2 * NT + 1]);
}
// store (x0, x1) as bf16 at smem + off (and the lo plane PL further)
template <int NP, int PL>
__device__ __forceinline__ void st_pair(unsigned char *sm, int off, float x0, float x1) {
    if constexpr (NP == 2) {
        uint32_t hi, lo;
        split2(x0, x1, hi, lo);
        *(uint32_t *)(sm + off) = hi;
        *(uint32_t *)(sm + off + PL) = lo;
    } else {
        *(uint32_t *)(sm + off) = pack_bf16(x0, x1);
    }
}
template <int NP, int PL>
__device__ __forceinline__ void st_one(unsigned char *sm, int off, float x) {
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    *(__nv_bfloat16 *)(sm + off) = h;
    if constexpr (NP == 2)
        *(__nv_bfloat16 *)(sm + off + PL) = __float2bfloat16_rn(x - __bfloat162float(h));
}

// acc (16x16 as two n-tiles) += Ablk * Bblk, both 16x16 fp32 row-major blocks of the A/X
// matrix (pitch PA), operands split into bf16 hi + lo: accurate to ~1e-5 relative.
__device__ __forceinline__ void blk_mma_f32(float (&acc)[2][4], const float *a, const float *b,
                                            int lane) {
    const int g = lane >> 2, t = lane & 3;
    uint32_t ah[4], al[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float2 v = *(const float2 *)(a + (g + (r & 1) * 8) * PA + 2 * t + (r >> 1) * 8);
        split2(v.x, v.y, ah[r], al[r]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        const float *bc = b + nt * 8 + g;
        uint32_t bh0, bl0, bh1, bl1;
        split2(bc[(2 * t) * PA], bc[(2 * t + 1) * PA], bh0, bl0);
        split2(bc[(2 * t + 8) * PA], bc[(2 * t + 9) * PA], bh1, bl1);
        mma16816(acc[nt], al, bh0, bh1);
        mma16816(acc[nt], ah, bl0, bl1);
        mma16816(acc[nt], ah, bh0, bh1);
    }
}

// Copy rows [0, C) of a (C x DK) tile starting at token row `src` (row stride rs elements)
// into the bf16 plane(s) at dst; rows >= nvalid are zero-filled.
template <int DK, bool F32, int PB, int PL, int NTH>
__device__ __forceinline__ void load_tile(unsigned char *sm, int dst, const void *src,
                                          size_t rs, int nvalid, int tid) {
    constexpr int PIECES = DK / 8;  // 8 elements per piece
    if constexpr (!F32) {
        const __nv_bfloat16 *s = (const __nv_bfloat16 *)src;
#pragma unroll 4
        for (int i = tid; i < C * PIECES; i += NTH) {
            const int r = i / PIECES, c = (i % PIECES) * 8;
            const bool ok = r < nvalid;
            cp_async16(smem_u32(sm + dst + r * PB + c * 2), ok ? s + r * rs + c : s, ok ? 16 : 0);
        }
    } else {
        cvt_rows_f32<2>(sm, dst, PB, PL, (const float *)src, rs, C, DK, nvalid, tid, NTH);
    }
}

// P1 for one warp: two row blocks MA < MB of  X K^T  (X = K or Q), causal column range only.
template <int MA, int MB, int DK, int NP, int PB, int PL>
__device__ __forceinline__ void p1_tiles(float (&ca)[2 * (MA + 1)][4], float (&cb)[2 * (MB + 1)][4],
                                         uint32_t xs, uint32_t ks, int lane) {
#pragma unroll 2
    for (int kk = 0; kk < DK / 16; ++kk) {
        uint32_t fa[NP][4], fb[NP][4];
        lda<NP, PB, PL>(fa, xs, MA * 16, kk * 16, lane);
        lda<NP, PB, PL>(fb, xs, MB * 16, kk * 16, lane);
#pragma unroll
        for (int np = 0; np <= MB; ++np) {
            uint32_t kb[NP][4];
            ldb<NP, PB, PL>(kb, ks, np * 16, kk * 16, lane);
            mma_p<0>(cb[2 * np], fb, kb);
            mma_p<1>(cb[2 * np + 1], fb, kb);
            if (np <= MA) {
                mma_p<0>(ca[2 * np], fa, kb);
                mma_p<1>(ca[2 * np + 1], fa, kb);
            }
        }
    }
}
// P1 epilogue of row block M: A (fp32, strictly lower, times beta_i) or P (bf16, lower)
template <int M, int NP, int PL>
__device__ __forceinline__ void p1_store(const float (&c)[2 * (M + 1)][4], bool is_a,
                                         unsigned char *sm, int offA, int offP,
                                         const float *G, const float *beta, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int i = M * 16 + g + hr * 8;
        const float Gi = G[i], bi = beta[i];
#pragma unroll
        for (int j = 0; j < 2 * (M + 1); ++j) {
            const int c0 = j * 8 + 2 * t;
            const float e0 = exp2f(Gi - G[c0]), e1 = exp2f(Gi - G[c0 + 1]);
            const float x0 = c[j][2 * hr], x1 = c[j][2 * hr + 1];
            if (is_a) {
                float2 v;
                v.x = c0 < i ? bi * e0 * x0 : 0.f;
                v.y = c0 + 1 < i ? bi * e1 * x1 : 0.f;
                *(float2 *)(sm + offA + (i * PA + c0) * 4) = v;
            } else {
                st_pair<NP, PL>(sm, offP + (i * PCC + c0) * 2, c0 <= i ? e0 * x0 : 0.f,
                                c0 + 1 <= i ? e1 * x1 : 0.f);
            }
        }
    }
}

// dense C x C bf16 matrix in global memory -> smem rows of pitch PCC (cp.async, 16 bytes)
template <int NTH>
__device__ __forceinline__ void load_cc(unsigned char *sm, int dst, const __nv_bfloat16 *src,
                                        int tid) {
    for (int i = tid; i < C * C / 8; i += NTH) {
        const int r = i / (C / 8), c = (i % (C / 8)) * 8;
        cp_async16(smem_u32(sm + dst + (r * PCC + c) * 2), src + r * C + c, 16);
    }
}
// g and beta of the chunk whose first token row (head h included) is row0 (4-byte copies:
// consecutive tokens are H floats apart); rows >= nvalid and switched-off inputs are zero-filled
// (gate off: G = 0)
__device__ __forceinline__ void load_gb(unsigned char *sm, int dst, const gdn_fwd_params &p,
                                        size_t row0, int nvalid, int tid) {
    if (tid >= 2 * C) return;
    const int r = tid & (C - 1);
    const bool isg = tid < C;
    const float *src = isg ? p.g : p.beta;
    const bool ok = r < nvalid && (isg ? p.mode.gate : p.mode.delta);
    cp_async4(smem_u32(sm + dst + ((isg ? 0 : C) + r) * 4),
              ok ? src + row0 + (size_t)r * p.H : (const float *)p.q, ok ? 4 : 0);
}
// G_r = log2(e) (g_1 + .. + g_r) over the chunk into this warp's copy G[C]
__device__ __forceinline__ void gate_cumsum(const float *gsrc, float *G, int lane) {
    float x0 = gsrc[lane], x1 = gsrc[lane + 32];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y0 = __shfl_up_sync(0xffffffffu, x0, o);
        const float y1 = __shfl_up_sync(0xffffffffu, x1, o);
        if (lane >= o) {
            x0 += y0;
            x1 += y1;
        }
    }
    x1 += __shfl_sync(0xffffffffu, x0, 31);
    G[lane] = x0 * LOG2E;
    G[lane + 32] = x1 * LOG2E;
    __syncwarp();
}
// P1 unit `pair` (0: row blocks 0 and 3, 1: row blocks 1 and 2; 10 of the 20 causal 16x8 tiles
// each) of X K^T with X = K (is_a: A, fp32 at offA) or X = Q (P, bf16 at offP)
// With MID_SYNC every thread of the CTA calls it (active false: barrier only) and the stores
// wait for every warp's reads (the prep kernel writes P over Q and T over K).
__device__ __forceinline__ void cta_barrier_any() {
    asm volatile("barrier.sync 0;\n" ::: "memory");  // not .aligned: called from two branches
}
template <int DK, int NP, int PBQ, int QPL, int CPL, bool MID_SYNC = false>
__device__ __forceinline__ void p1_pair(int pair, bool is_a, bool active, uint32_t xs,
                                        uint32_t ks, unsigned char *sm, int offA, int offP,
                                        const float *G, const float *beta, int lane) {
    if (pair) {
        float ca[4][4] = {}, cb[6][4] = {};
        if (active) p1_tiles<1, 2, DK, NP, PBQ, QPL>(ca, cb, xs, ks, lane);
        if (MID_SYNC) cta_barrier_any();
        if (active) {
            p1_store<1, NP, CPL>(ca, is_a, sm, offA, offP, G, beta, lane);
            p1_store<2, NP, CPL>(cb, is_a, sm, offA, offP, G, beta, lane);
        }
    } else {
        float ca[2][4] = {}, cb[8][4] = {};
        if (active) p1_tiles<0, 3, DK, NP, PBQ, QPL>(ca, cb, xs, ks, lane);
        if (MID_SYNC) cta_barrier_any();
        if (active) {
            p1_store<0, NP, CPL>(ca, is_a, sm, offA, offP, G, beta, lane);
            p1_store<3, NP, CPL>(cb, is_a, sm, offA, offP, G, beta, lane);
        }
    }
}

// P3: T = (I + A)^{-1} diag(beta) from the strictly lower A (fp32 at offA, pitch PA; its blocks
// are overwritten by X and by L) into bf16 plane(s) at offT (pitch PCC, lower blocks and the
// diagonal only). Warps 0..2 work; every thread of the CTA calls it (it synchronises the CTA)
// and it returns synchronised.
template <int NP, int CPL>
__device__ void solve_T(unsigned char *sm, int offA, int offT, const float *beta, int warp,
                        int lane) {
    const int g = lane >> 2, t4 = lane & 3;
    float *X = (float *)(sm + offA);
    if (warp < 2) {  // diagonal blocks: one thread per column c of block I
        const int I = warp * 2 + (lane >> 4), c = lane & 15;
        float *Xb = X + I * 16 * PA + I * 16;
        float x[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            float s = 0.f;
#pragma unroll
            for (int j = 0; j < r; ++j) s -= Xb[r * PA + j] * x[j];
            x[r] = r == c ? 1.f : s;  // rows above c come out 0
        }
        __syncwarp();
        const float bc = beta[I * 16 + c];
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            Xb[r * PA + c] = x[r];
            st_one<NP, CPL>(sm, offT + ((I * 16 + r) * PCC + I * 16 + c) * 2, x[r] * bc);
        }
    }
    __syncthreads();
    // off-diagonal blocks: L_IK = X_II A_IK stored at block (K, I) (upper, free);
    // X_IJ = -sum_{K=J}^{I-1} L_IK X_KJ overwrites A_IJ, level by level (I - J = 1, 2, 3)
    auto blk = [&](int r, int c) { return X + r * 16 * PA + c * 16; };
    auto put_x = [&](float (&acc)[2][4], int I, int J, bool keep) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int r = g + hr * 8, c = nt * 8 + 2 * t4;
                const float x0 = -acc[nt][2 * hr], x1 = -acc[nt][2 * hr + 1];
                if (keep) *(float2 *)(blk(I, J) + r * PA + c) = make_float2(x0, x1);
                st_pair<NP, CPL>(sm, offT + ((I * 16 + r) * PCC + J * 16 + c) * 2,
                                 x0 * beta[J * 16 + c], x1 * beta[J * 16 + c + 1]);
            }
    };
    if (warp < 3) {
        const int I = warp + 1;
        for (int K = 0; K < I; ++K) {
            float acc[2][4] = {};
            blk_mma_f32(acc, blk(I, I), blk(I, K), lane);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr)
                    *(float2 *)(blk(K, I) + (g + hr * 8) * PA + nt * 8 + 2 * t4) =
                        make_float2(acc[nt][2 * hr], acc[nt][2 * hr + 1]);
        }
        __syncwarp();
        float acc[2][4] = {};
        blk_mma_f32(acc, blk(I - 1, I), blk(I - 1, I - 1), lane);
        put_x(acc, I, I - 1, true);
    }
    __syncthreads();
    if (warp == 1 || warp == 2) {
        const int I = warp + 1, J = I - 2;
        float acc[2][4] = {};
        blk_mma_f32(acc, blk(J, I), blk(J, J), lane);
        blk_mma_f32(acc, blk(J + 1, I), blk(J + 1, J), lane);
        put_x(acc, I, J, true);
    }
    __syncthreads();
    if (warp == 2) {
        float acc[2][4] = {};
        blk_mma_f32(acc, blk(0, 3), blk(0, 0), lane);
        blk_mma_f32(acc, blk(1, 3), blk(1, 0), lane);
        blk_mma_f32(acc, blk(2, 3), blk(2, 0), lane);
        put_x(acc, 3, 0, false);
    }
    __syncthreads();
}

// ---- the prep kernel: T, P and G of every chunk, all chunks in parallel (bf16) ---------------
// workspace: T (B,H,NC,C,C) bf16, P (B,H,NC,C,C) bf16, G (B,H,NC,C) fp32 (log2 cumsum of g
// within the chunk); rows and columns past T zero (G constant). gdn_chunk_fwd_workspace_bytes.
__host__ __device__ inline size_t gdn_ws_cc(const gdn_fwd_params &p) {  // elements of T (or P)
    return (size_t)p.B * p.H * ((p.T + C - 1) / C) * C * C;
}
// Where T and G live: the workspace (T, P, G), and G in the caller's keep_g when it keeps it
__host__ __device__ inline __nv_bfloat16 *gdn_ws_T(const gdn_fwd_params &p) {
    return (__nv_bfloat16 *)p.workspace;
}
__host__ __device__ inline float *gdn_ws_G(const gdn_fwd_params &p) {
    return p.keep_g ? p.keep_g : (float *)((__nv_bfloat16 *)p.workspace + 2 * gdn_ws_cc(p));
}
template <int DK>
__global__ void __launch_bounds__(128)
gdn_chunk_prep_kernel(const __grid_constant__ gdn_fwd_params p) {
    using L = gdn_prep_layout<DK>;
    constexpr int PBQ = L::PQK * 2;
    extern __shared__ __align__(128) unsigned char sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, NC = (T + C - 1) / C;
    const bool want_t = p.mode.delta, want_p = p.p_from_prep == 1;
    const gdn_rows cr = gdn_chunk_rows(p, b, n);
    const size_t row0 = cr.tok * H + h;  // token row of the chunk's first token, head h
    const __nv_bfloat16 *kg = (const __nv_bfloat16 *)p.k + row0 * DK;
    const __nv_bfloat16 *qg = (const __nv_bfloat16 *)p.q + row0 * DK;
    if (want_t || want_p)
        load_tile<DK, false, PBQ, L::QK_PL, 128>(sm, L::K, kg, (size_t)H * DK, cr.nvalid, tid);
    if (want_p)
        load_tile<DK, false, PBQ, L::QK_PL, 128>(sm, L::Q, qg, (size_t)H * DK, cr.nvalid, tid);
    load_gb(sm, L::GB, p, row0, cr.nvalid, tid);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    const float *gb = (const float *)(sm + L::GB), *beta = gb + C;
    float *G = (float *)(sm + L::GW) + warp * C;
    gate_cumsum(gb, G, lane);
    const size_t cc = (size_t)C * C, chunk = ((size_t)b * H + h) * NC + n;
    __nv_bfloat16 *wsT = gdn_ws_T(p) + chunk * cc;
    __nv_bfloat16 *wsP = (__nv_bfloat16 *)p.workspace + gdn_ws_cc(p) + chunk * cc;
    float *wsG = gdn_ws_G(p) + chunk * C;
    if (warp == 0) {
        wsG[lane] = G[lane];
        wsG[lane + 32] = G[lane + 32];
    }
    // A (warps 0,1) -> fp32 A; P (warps 2,3) -> over Q once every warp has read Q and K
    p1_pair<DK, 1, PBQ, L::QK_PL, L::CC_PL, true>(
        warp & 1, warp < 2, warp < 2 ? want_t : want_p, smem_u32(sm + (warp < 2 ? L::K : L::Q)),
        smem_u32(sm + L::K), sm, L::A, L::P, G, beta, lane);
    __syncthreads();
    if (want_t) solve_T<1, L::CC_PL>(sm, L::A, L::T, beta, warp, lane);  // T over K
    for (int i = tid; i < C * C / 8; i += 128) {
        const int r = i / (C / 8), c = (i % (C / 8)) * 8;
        if (want_t) *(uint4 *)(wsT + r * C + c) = *(const uint4 *)(sm + L::T + (r * PCC + c) * 2);
        if (want_p) *(uint4 *)(wsP + r * C + c) = *(const uint4 *)(sm + L::P + (r * PCC + c) * 2);
    }
}

// CTAs per SM the register budget is held to; the states-only instance at Dk 64 with 16 value
// columns to 4, the occupancy its shared memory allows (unbounded, ptxas takes 176 registers:
// 2 CTAs)
template <int DK, int DVB, int NWG, bool F32, bool OUT>
struct gdn_fwd_minblocks {
    static constexpr int value = (!OUT && !F32 && DK == 64 && DVB == 16)   ? 4
                                 : (NWG == 1 && !F32 && DK <= 128) ? 2
                                                                   : 1;
};

// Document resets (chunk_reset, gdn_cuda.h): whether the state after chunk n of row b (the
// start state of chunk n + 1) is zero; the scans zero it right after chunk n's update, so the
// chunk-start states (h_states, P2's smem copy) and the replay see the same zeros
__device__ __forceinline__ bool reset_after(const gdn_fwd_params &p, int b, int n, int NC) {
    return p.chunk_reset && n + 1 < NC && p.chunk_reset[(size_t)b * NC + n + 1];
}
template <int N>
__device__ __forceinline__ void zero_state(float (&s)[N][4]) {
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
}

// ---- the recurrence kernel ---------------------------------------------------------------------
// OUT: o computed and stored; false: chunk-start states (and ht) only
template <int DK, int DVB, int NWG, bool F32, bool PRE, bool OUT>
__global__ void __launch_bounds__(128 * NWG, (gdn_fwd_minblocks<DK, DVB, NWG, F32, OUT>::value))
gdn_chunk_fwd_kernel(const __grid_constant__ gdn_fwd_params p) {
    using L = gdn_fwd_layout<DK, DVB, NWG, F32, PRE, OUT>;
    using Tin = typename std::conditional<F32, float, __nv_bfloat16>::type;
    using Tin2 = typename std::conditional<F32, float2, __nv_bfloat162>::type;
    constexpr int NP = L::NP, NTH = 32 * L::NW;
    constexpr int PBQ = L::PQK * 2, PBC = PCC * 2, PBV = L::PV * 2;  // pitches in bytes
    constexpr int NV = DVB / 8;                    // value n-tiles
    constexpr int MS = DVB / 16;                   // state m-tiles (rows = value columns)
    constexpr int NSW = (DK / 8) * MS / 4;         // state n-tiles per warp
    static_assert(MS <= 4 && 4 % MS == 0 && NSW % 2 == 0, "state tiling");

    extern __shared__ __align__(128) unsigned char sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wg = warp >> 2, wl = warp & 3;       // warp group, warp within the group
    const int g = lane >> 2, t4 = lane & 3;
    const int dv0 = (blockIdx.x * NWG + wg) * DVB, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, DV = p.Dv;
    const int NC = (T + C - 1) / C;
    const bool delta = p.mode.delta;
    const bool p_pre = PRE && p.p_from_prep == 1;  // the launcher resolved it to 1 or 2
    const size_t rowk = (size_t)H * DK, rowv = (size_t)H * DV;  // token strides
    // the token rows of chunk n (gdn_chunk_rows), head h: the chunk's first row and its count
    auto rows_of = [&](int n, size_t &row0) {
        const gdn_rows cr = gdn_chunk_rows(p, b, n);
        row0 = cr.tok * H + h;
        return cr.nvalid;
    };
    const size_t state0 = ((size_t)b * H + h) * DK * DV;         // (b, h) state offset
    const size_t cc = (size_t)C * C, wsblk = ((size_t)b * H + h) * NC;
    const __nv_bfloat16 *ws = (const __nv_bfloat16 *)p.workspace;
    const __nv_bfloat16 *wsT = PRE ? gdn_ws_T(p) + wsblk * cc : nullptr;
    const __nv_bfloat16 *wsP = PRE ? ws + gdn_ws_cc(p) + wsblk * cc : nullptr;
    const float *wsG = PRE ? gdn_ws_G(p) + wsblk * C : nullptr;

    const uint32_t sbase = smem_u32(sm);
    const int s_row = wl % MS;                     // this warp's state tile rows
    const int sn0 = (wl / MS) * NSW;               // and first n-tile (key dims)
    const int offY = L::Y(wg), offD = L::D(wg), offDT = L::DT(wg), offS = L::S(wg);

    // ---- prologue: state from h0, loads of chunk 0 --------------------------------------
    float sacc[NSW][4];
#pragma unroll
    for (int j = 0; j < NSW; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int dv = s_row * 16 + g + (e >> 1) * 8, dk = (sn0 + j) * 8 + 2 * t4 + (e & 1);
            sacc[j][e] = p.h0 ? p.h0[state0 + (size_t)dk * DV + dv0 + dv] : 0.f;
        }
    auto store_state_smem = [&]() {
#pragma unroll
        for (int j = 0; j < NSW; ++j)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int r = s_row * 16 + g + hr * 8, c = (sn0 + j) * 8 + 2 * t4;
                st_pair<NP, L::S_PL>(sm, offS + r * PBQ + c * 2, sacc[j][2 * hr],
                                     sacc[j][2 * hr + 1]);
            }
    };
    auto store_state_global = [&](float *dst) {
#pragma unroll
        for (int j = 0; j < NSW; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int dv = s_row * 16 + g + (e >> 1) * 8,
                          dk = (sn0 + j) * 8 + 2 * t4 + (e & 1);
                dst[(size_t)dk * DV + dv0 + dv] = sacc[j][e];
            }
    };
    // all inputs of chunk n (fused: Q only for n == 0, later Q's come after P4)
    auto load_chunk = [&](int n, bool with_q, bool with_k) {
        size_t row0;
        const int nv = rows_of(n, row0);
        if (OUT && with_q)
            load_tile<DK, F32, PBQ, L::QK_PL, NTH>(sm, L::Qs(n), (const Tin *)p.q + row0 * DK,
                                                   rowk, nv, tid);
        if (with_k)
            load_tile<DK, F32, PBQ, L::QK_PL, NTH>(sm, L::Ks(n), (const Tin *)p.k + row0 * DK,
                                                   rowk, nv, tid);
        if constexpr (PRE) {  // G (log2 cumsum) from the prep kernel; beta is only in T
            if (tid < C / 4)
                cp_async16(smem_u32(sm + L::GB + ((n & 1) * 2 * C + tid * 4) * 4),
                           wsG + (size_t)n * C + tid * 4, 16);
            if (delta) load_cc<NTH>(sm, L::T(n), wsT + n * cc, tid);
            if (OUT && p_pre) load_cc<NTH>(sm, L::Ps(n), wsP + n * cc, tid);
        } else {
            load_gb(sm, L::GB + (n & 1) * 2 * C * 4, p, row0, nv, tid);
        }
    };
    // V rows of this warp's P2 tile straight into registers (they only feed P2's epilogue);
    // small blocks (VPRE) load chunk n+1's right after P2 of chunk n, large ones at the top
    constexpr bool VPRE = DVB <= 32;
    Tin2 vr[NV][2];
    auto load_v = [&](int n) {
        size_t row0;
        const int nv = rows_of(n, row0);
        const Tin *vg = (const Tin *)p.v + row0 * DV + dv0;
#pragma unroll
        for (int j = 0; j < NV; ++j)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int r = wl * 16 + g + hr * 8;
                if (r < nv)
                    vr[j][hr] = *(const Tin2 *)(vg + (size_t)r * rowv + j * 8 + 2 * t4);
                else
                    vr[j][hr] = Tin2{};
            }
    };
    store_state_smem();
    if (NC > 0) {
        load_chunk(0, true, true);
        cp_async_commit();
        if constexpr (VPRE) load_v(0);
    }

    for (int n = 0; n < NC; ++n) {
        cp_async_wait_all();
        __syncthreads();  // chunk n's inputs are in; every read of chunk n-1 is done
        if (n + 1 < NC) load_chunk(n + 1, PRE, L::KST == 2);
        cp_async_commit();
        const int qs = L::Qs(n), ks = L::Ks(n), ps = L::Ps(n);
        if (p.h_states)
            store_state_global(p.h_states + (((size_t)b * H + h) * NC + n) * DK * DV);

        if constexpr (!VPRE) load_v(n);
        const float *gb = (const float *)(sm + L::GB) + (n & 1) * 2 * C;
        const float *beta = gb + C;
        const float *G = gb;
        if constexpr (!PRE) {
            float *Gw = (float *)(sm + L::GW) + warp * C;
            gate_cumsum(gb, Gw, lane);
            G = Gw;
        }
        const float Gc = G[C - 1];

        // ---- P1: A (fused, delta) and P (OUT, unless it came from the prep kernel) ---------
        if constexpr (!PRE) {
            if (OUT ? (warp >= 2 || delta) : (warp < 2 && delta))
                p1_pair<DK, NP, PBQ, L::QK_PL, L::CC_PL>(warp & 1, warp < 2, true,
                                                        sbase + (warp < 2 ? ks : qs), sbase + ks,
                                                        sm, L::A, ps, G, beta, lane);
        } else {
            if (OUT && !p_pre && (warp == 0 || warp == (NWG == 2 ? 4 : 1)))
                p1_pair<DK, NP, PBQ, L::QK_PL, L::CC_PL>(warp == 0 ? 0 : 1, false, true,
                                                        sbase + qs, sbase + ks, sm, 0, ps, G,
                                                        beta, lane);
        }

        // ---- P2: O = diag(gamma) Q H (registers, OUT), Y = V - diag(gamma) K H -------------
        float oacc[NV][4] = {};
        {
            float kacc[NV][4] = {};
#pragma unroll 2
            for (int kk = 0; kk < DK / 16; ++kk) {
                uint32_t qa[NP][4], ka[NP][4];
                if constexpr (OUT) lda<NP, PBQ, L::QK_PL>(qa, sbase + qs, wl * 16, kk * 16, lane);
                lda<NP, PBQ, L::QK_PL>(ka, sbase + ks, wl * 16, kk * 16, lane);
#pragma unroll
                for (int np = 0; np < NV / 2; ++np) {
                    uint32_t sb[NP][4];
                    ldb<NP, PBQ, L::S_PL>(sb, sbase + offS, np * 16, kk * 16, lane);
                    if constexpr (OUT) {
                        mma_p<0>(oacc[2 * np], qa, sb);
                        mma_p<1>(oacc[2 * np + 1], qa, sb);
                    }
                    mma_p<0>(kacc[2 * np], ka, sb);
                    mma_p<1>(kacc[2 * np + 1], ka, sb);
                }
            }
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int i = wl * 16 + g + hr * 8;
                const float gam = exp2f(G[i]), dec = exp2f(Gc - G[i]);
#pragma unroll
                for (int j = 0; j < NV; ++j) {
                    const int c0 = j * 8 + 2 * t4;
                    float v0, v1;
                    if constexpr (F32) {
                        v0 = vr[j][hr].x;
                        v1 = vr[j][hr].y;
                    } else {
                        v0 = __low2float(vr[j][hr]);
                        v1 = __high2float(vr[j][hr]);
                    }
                    if constexpr (OUT) {
                        oacc[j][2 * hr] *= gam;
                        oacc[j][2 * hr + 1] *= gam;
                    }
                    if (delta) {
                        st_pair<NP, L::V_PL>(sm, offY + i * PBV + c0 * 2,
                                             v0 - gam * kacc[j][2 * hr], v1 - gam * kacc[j][2 * hr + 1]);
                    } else {  // Δ = V
                        st_pair<NP, L::V_PL>(sm, offD + i * PBV + c0 * 2, v0, v1);
                        st_pair<NP, L::V_PL>(sm, offDT + i * PBV + c0 * 2, dec * v0, dec * v1);
                    }
                }
            }
        }
        if constexpr (VPRE) {
            if (n + 1 < NC) load_v(n + 1);
        }
        __syncthreads();  // A, P, Y complete; Q, S (bf16) no longer read

        if (delta) {
            // ---- P3 (fused): T = (I + A)^{-1} diag(beta) into Q's buffer -----------------
            if constexpr (!PRE) solve_T<NP, L::CC_PL>(sm, L::A, L::T(n), beta, warp, lane);

            // ---- P4: Δ = T Y (rows of this warp, causal k range) -> D, Δ~ -> Dt ------------
            float dacc[NV][4] = {};
            for (int kk = 0; kk <= wl; ++kk) {
                uint32_t ta[NP][4];
                lda<NP, PBC, L::CC_PL>(ta, sbase + L::T(n), wl * 16, kk * 16, lane);
#pragma unroll
                for (int np = 0; np < NV / 2; ++np) {
                    uint32_t yb[NP][4];
                    ldb_t<NP, PBV, L::V_PL>(yb, sbase + offY, kk * 16, np * 16, lane);
                    mma_p<0>(dacc[2 * np], ta, yb);
                    mma_p<1>(dacc[2 * np + 1], ta, yb);
                }
            }
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int i = wl * 16 + g + hr * 8;
                const float dec = exp2f(Gc - G[i]);
#pragma unroll
                for (int j = 0; j < NV; ++j) {
                    const int off = i * PBV + (j * 8 + 2 * t4) * 2;
                    const float x0 = dacc[j][2 * hr], x1 = dacc[j][2 * hr + 1];
                    st_pair<NP, L::V_PL>(sm, offD + off, x0, x1);
                    st_pair<NP, L::V_PL>(sm, offDT + off, dec * x0, dec * x1);
                }
            }
            __syncthreads();  // D, Dt complete; T no longer read
        }
        if constexpr (!PRE && OUT) {
            if (n + 1 < NC) {  // Q's buffer is free now
                size_t row1;
                const int nv1 = rows_of(n + 1, row1);
                load_tile<DK, F32, PBQ, L::QK_PL, NTH>(sm, L::Q, (const Tin *)p.q + row1 * DK,
                                                       rowk, nv1, tid);
                cp_async_commit();
            }
        }

        // ---- P5: O += P Δ -> global (OUT); S' = gamma_C S + Δ~^T K --------------------------
        if constexpr (PRE) {  // Δ~ rows of this warp group's columns as the update reads them
            if (p.keep_dt) {  // on the chunk grid: all of its rows below T
                const int t0 = n * C, grid_rows = min(C, T - t0);
                const size_t grow0 = ((size_t)b * T + t0) * H + h;
                __nv_bfloat16 *dst = (__nv_bfloat16 *)p.keep_dt + grow0 * DV + dv0;
                for (int i = tid & 127; i < grid_rows * (DVB / 8); i += 128) {
                    const int r = i / (DVB / 8), c = (i % (DVB / 8)) * 8;
                    *(uint4 *)(dst + (size_t)r * rowv + c) = *(const uint4 *)(sm + offDT + r * PBV + c * 2);
                }
            }
        }
        if constexpr (OUT) {
            for (int kk = 0; kk <= wl; ++kk) {
                uint32_t pa[NP][4];
                lda<NP, PBC, L::CC_PL>(pa, sbase + ps, wl * 16, kk * 16, lane);
#pragma unroll
                for (int np = 0; np < NV / 2; ++np) {
                    uint32_t db[NP][4];
                    ldb_t<NP, PBV, L::V_PL>(db, sbase + offD, kk * 16, np * 16, lane);
                    mma_p<0>(oacc[2 * np], pa, db);
                    mma_p<1>(oacc[2 * np + 1], pa, db);
                }
            }
            size_t orow0;
            const int nv = rows_of(n, orow0);
            Tin *og = (Tin *)p.o + orow0 * DV + dv0;
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int r = wl * 16 + g + hr * 8;
                if (r < nv) {
                    Tin *orow = og + (size_t)r * rowv;
#pragma unroll
                    for (int j = 0; j < NV; ++j) {
                        Tin2 v;
                        if constexpr (F32)
                            v = make_float2(oacc[j][2 * hr], oacc[j][2 * hr + 1]);
                        else
                            v = __floats2bfloat162_rn(oacc[j][2 * hr], oacc[j][2 * hr + 1]);
                        *(Tin2 *)(orow + j * 8 + 2 * t4) = v;
                    }
                }
            }
        }
        {
            const float gc = exp2f(Gc);
#pragma unroll
            for (int j = 0; j < NSW; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) sacc[j][e] *= gc;
#pragma unroll
            for (int kk = 0; kk < C / 16; ++kk) {
                uint32_t da[NP][4];
                lda_t<NP, PBV, L::V_PL>(da, sbase + offDT, kk * 16, s_row * 16, lane);
#pragma unroll
                for (int jp = 0; jp < NSW / 2; ++jp) {
                    uint32_t kb[NP][4];
                    ldb_t<NP, PBQ, L::QK_PL>(kb, sbase + ks, kk * 16, (sn0 + 2 * jp) * 8, lane);
                    mma_p<0>(sacc[2 * jp], da, kb);
                    mma_p<1>(sacc[2 * jp + 1], da, kb);
                }
            }
            if (reset_after(p, b, n, NC)) zero_state(sacc);
            store_state_smem();
        }
        if constexpr (L::KST == 1) {
            if (n + 1 < NC) {
                __syncthreads();  // every warp is done with K of chunk n
                size_t row1;
                const int nv1 = rows_of(n + 1, row1);
                load_tile<DK, F32, PBQ, L::QK_PL, NTH>(sm, L::Ks(n + 1),
                                                       (const Tin *)p.k + row1 * DK, rowk, nv1,
                                                       tid);
                cp_async_commit();
            }
        }
    }
    if (p.ht) store_state_global(p.ht + state0);
}

static int gdn_smem_optin() {  // shared memory a block may opt in to on this device
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return optin;
}

// ---- the replay kernel: the chunk-start states again, from a forward's kept Δ~ and G -------
// Per chunk S' = gamma_C S + Δ~^T K: the scan's P5 on the same bf16 operands (Δ~ as the scan
// stored it, K) with the same fragments in the same k order, so every state element gets the
// same fp32 operations (an mma's element depends only on its row of A, its column of B and its
// accumulator: the warp tiling may differ from the scan's). One warp per 16 value columns (a
// state m-tile) x all Dk columns; K and Δ~ of chunk n+1 are in flight while chunk n updates. No
// dependent products: a stream of the state writes and the K, Δ~ reads.
// CTAs per SM the replay's register budget is held to at Dk 64 and 128 (unbounded, ptxas takes
// 232 registers at Dk 128: 2 CTAs)
template <int DK>
struct gdn_replay_minblocks {
    static constexpr int value = DK == 64 ? 4 : DK == 128 ? 3 : 1;
};
// Stages (chunks in flight: K, Δ~ and the chunk-end gate cumsum each): a chunk's work (its
// products, the state's stores) is short against a load's latency, so a CTA keeps NST - 1
// chunks of loads ahead of the one it updates. Dk 64: three, within the 4 CTAs an SM its
// registers allow; Dk 128: four (106 KB, 2 CTAs an SM), which grids of few (b, h) pairs with
// long sequences need (a CTA an SM, latency-bound); Dk 256: two (86 KB, 2 CTAs an SM).
template <int DK>
struct gdn_replay_stages {
    static constexpr int value = DK == 64 ? 3 : DK == 128 ? 4 : 2;
};
template <int DK, int DVB>
struct gdn_replay_layout {
    static constexpr int NST = gdn_replay_stages<DK>::value;
    static constexpr int NW = DVB / 16, PQK = DK + 8, PV = DVB + 8;
    static constexpr int QK_PL = C * PQK * 2, V_PL = C * PV * 2;
    static constexpr int K = 0, D = NST * QK_PL, GC = D + NST * V_PL;  // GC: 16 bytes a stage
    static constexpr int BYTES = GC + NST * 16;
};
template <int DK, int DVB>
__global__ void __launch_bounds__(2 * DVB, (gdn_replay_minblocks<DK>::value)) gdn_chunk_replay_kernel(const __grid_constant__ gdn_fwd_params p) {
    using L = gdn_replay_layout<DK, DVB>;
    constexpr int NTH = 32 * L::NW, PBQ = L::PQK * 2, PBV = L::PV * 2, NSW = DK / 8;
    extern __shared__ __align__(128) unsigned char sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int dv0 = blockIdx.x * DVB, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, DV = p.Dv, NC = (T + C - 1) / C;
    const size_t rowk = (size_t)H * DK, rowv = (size_t)H * DV, tok0 = (size_t)b * T * H + h;
    const __nv_bfloat16 *dtg = (const __nv_bfloat16 *)p.keep_dt + tok0 * DV + dv0;
    const float *Gg = p.keep_g + ((size_t)b * H + h) * NC * C;
    const size_t state0 = ((size_t)b * H + h) * DK * DV;
    const uint32_t sbase = smem_u32(sm);
    float sacc[NSW][4];
#pragma unroll
    for (int j = 0; j < NSW; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int dv = warp * 16 + g + (e >> 1) * 8, dk = j * 8 + 2 * t4 + (e & 1);
            sacc[j][e] = p.h0 ? p.h0[state0 + (size_t)dk * DV + dv0 + dv] : 0.f;
        }
    auto store_state_global = [&](float *dst) {
#pragma unroll
        for (int j = 0; j < NSW; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int dv = warp * 16 + g + (e >> 1) * 8, dk = j * 8 + 2 * t4 + (e & 1);
                dst[(size_t)dk * DV + dv0 + dv] = sacc[j][e];
            }
    };
    auto load_chunk = [&](int n) {  // K from the chunk's token rows, Δ~ from the grid's, G_C
        const int t0 = n * C, st = n % L::NST;
        const gdn_rows cr = gdn_chunk_rows(p, b, n);
        load_tile<DK, false, PBQ, L::QK_PL, NTH>(sm, L::K + st * L::QK_PL,
                                                 (const __nv_bfloat16 *)p.k + (cr.tok * H + h) * DK,
                                                 rowk, cr.nvalid, tid);
        load_tile<DVB, false, PBV, L::V_PL, NTH>(sm, L::D + st * L::V_PL, dtg + (size_t)t0 * rowv,
                                                 rowv, T - t0, tid);
        if (tid == 0) cp_async4(sbase + L::GC + st * 16, Gg + (size_t)n * C + C - 1, 4);
    };
    // prologue: chunks 0 .. NST - 2, a commit group each (empty past the last chunk), so that
    // chunk n's group is the (NST - 1)-th newest at the top of iteration n
#pragma unroll
    for (int n = 0; n < L::NST - 1; ++n) {
        if (n < NC) load_chunk(n);
        cp_async_commit();
    }
    for (int n = 0; n < NC; ++n) {
        cp_async_wait<L::NST - 2>();
        __syncthreads();  // chunk n's K, Δ~, G_C are in; every read of chunk n-1 is done
        if (n + L::NST - 1 < NC) load_chunk(n + L::NST - 1);  // into chunk n-1's stage
        cp_async_commit();
        const int st = n % L::NST;
        const float Gc = *(const float *)(sm + L::GC + st * 16);
        if (p.h_states) store_state_global(p.h_states + (((size_t)b * H + h) * NC + n) * DK * DV);
        const float gc = exp2f(Gc);
#pragma unroll
        for (int j = 0; j < NSW; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) sacc[j][e] *= gc;
        const uint32_t ds = sbase + L::D + st * L::V_PL, ks = sbase + L::K + st * L::QK_PL;
#pragma unroll
        for (int kk = 0; kk < C / 16; ++kk) {
            uint32_t da[1][4];
            lda_t<1, PBV, L::V_PL>(da, ds, kk * 16, warp * 16, lane);
#pragma unroll
            for (int jp = 0; jp < NSW / 2; ++jp) {
                uint32_t kb[1][4];
                ldb_t<1, PBQ, L::QK_PL>(kb, ks, kk * 16, 2 * jp * 8, lane);
                mma_p<0>(sacc[2 * jp], da, kb);
                mma_p<1>(sacc[2 * jp + 1], da, kb);
            }
        }
        if (reset_after(p, b, n, NC)) zero_state(sacc);
    }
    if (p.ht) store_state_global(p.ht + state0);
}

template <int DK, int DVB, int NWG, bool F32, bool PRE, bool OUT>
void gdn_chunk_fwd_launch(const gdn_fwd_params *p) {
    using L = gdn_fwd_layout<DK, DVB, NWG, F32, PRE, OUT>;
    auto kern = gdn_chunk_fwd_kernel<DK, DVB, NWG, F32, PRE, OUT>;
    static bool attr_done = false;  // one attribute call per instance
    if (!attr_done) {
        const int optin = gdn_smem_optin();
        if (L::BYTES > optin)
            gdn_die("gdn_chunk_fwd: Dk %d with %d value columns per CTA (%s) needs %d bytes of "
                    "shared memory per block; this GPU allows %d\nHINT: set a smaller dv_block%s",
                    DK, DVB * NWG, F32 ? "fp32" : PRE ? "prep path" : "fused", L::BYTES, optin,
                    PRE ? " or pass no workspace" : "");
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        L::BYTES));
        attr_done = true;
    }
    const dim3 grid(p->Dv / (DVB * NWG), p->H, p->B);
    kern<<<grid, 128 * NWG, L::BYTES, p->stream>>>(*p);
    CUDA_CHECK_LAUNCH();
}
// the o-producing instance, or the states-only one when o is NULL
template <int DK, int DVB, int NWG, bool F32, bool PRE>
void gdn_chunk_fwd_run(const gdn_fwd_params *p) {
    if (p->o) gdn_chunk_fwd_launch<DK, DVB, NWG, F32, PRE, true>(p);
    else gdn_chunk_fwd_launch<DK, DVB, NWG, F32, PRE, false>(p);
}

template <int DK>
void gdn_chunk_prep_launch(const gdn_fwd_params *p) {
    using L = gdn_prep_layout<DK>;
    auto kern = gdn_chunk_prep_kernel<DK>;
    static bool attr_done = false;
    if (!attr_done) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        L::BYTES));
        attr_done = true;
    }
    const dim3 grid((p->T + C - 1) / C, p->H, p->B);
    kern<<<grid, 128, L::BYTES, p->stream>>>(*p);
    CUDA_CHECK_LAUNCH();
}

// 64 value columns a CTA (4 warps)
template <int DK, int DVB>
void gdn_chunk_replay_launch(const gdn_fwd_params *p) {
    using L = gdn_replay_layout<DK, DVB>;
    auto kern = gdn_chunk_replay_kernel<DK, DVB>;
    static bool attr_done = false;
    if (!attr_done) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES));
        attr_done = true;
    }
    const dim3 grid(p->Dv / DVB, p->H, p->B);
    kern<<<grid, 2 * DVB, L::BYTES, p->stream>>>(*p);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" int gdn_chunk_fwd_dv_block(const gdn_fwd_params *p) {
    if (p->dv_block) return p->dv_block;
    if (p->dtype == GDN_DTYPE_FP32) return 16;
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // two warp groups of 64 columns (Q, K, T, P shared) when that still fills ~every SM, else
    // the largest block that fills every SM (least repeated work), else the smallest
    const long heads = (long)p->B * p->H;
    const int need128 = p->Dk == 64 ? gdn_fwd_layout<64, 64, 2, false, true>::BYTES
                                    : gdn_fwd_layout<128, 64, 2, false, true>::BYTES;
    if (p->workspace && p->Dk <= 128 && heads * (p->Dv / 128) * 10 >= (long)sms * 9 &&
        gdn_smem_optin() >= need128)
        return 128;
    for (int d = p->Dk <= 128 ? 64 : 32; d >= 16; d /= 2)
        if (heads * (p->Dv / d) >= sms) return d;
    return 16;
}

// p as its kernels see it: with documents, the padded chunk grid (T -> docs->Tp)
static gdn_fwd_params gdn_fwd_padded(const gdn_fwd_params *pin) {
    gdn_fwd_params f = *pin;
    if (pin->docs && pin->docs->any) f.T = pin->docs->Tp;
    f.docs = NULL;
    return f;
}

extern "C" size_t gdn_chunk_fwd_workspace_bytes(const gdn_fwd_params *pin) {
    const gdn_fwd_params pp = gdn_fwd_padded(pin), *p = &pp;
    if (p->dtype == GDN_DTYPE_FP32) return 0;
    const size_t nc = (size_t)(p->T + C - 1) / C;
    return 2 * (size_t)p->B * p->H * nc * C * C * sizeof(__nv_bfloat16)  // T and P
           + (size_t)p->B * p->H * nc * C * sizeof(float);                // G
}

extern "C" size_t gdn_chunk_fwd_keep_bytes(const gdn_fwd_params *pin, size_t *g, size_t *dt) {
    const gdn_fwd_params pp = gdn_fwd_padded(pin), *p = &pp;
    const size_t nc = (size_t)(p->T + C - 1) / C, bh = (size_t)p->B * p->H;
    const bool f32 = p->dtype == GDN_DTYPE_FP32;
    const size_t bg = f32 ? 0 : bh * nc * C * sizeof(float);
    const size_t bd = f32 ? 0 : (size_t)p->B * p->T * p->H * p->Dv * sizeof(__nv_bfloat16);
    if (g) *g = bg;
    if (dt) *dt = bd;
    return bg + bd;
}

extern "C" size_t gdn_chunk_fwd_h_states_bytes(const gdn_fwd_params *pin) {
    const gdn_fwd_params p = gdn_fwd_padded(pin);
    const size_t nc = (size_t)(p.T + C - 1) / C;
    return (size_t)p.B * p.H * nc * p.Dk * p.Dv * sizeof(float);
}

static void gdn_check_ptr(const void *ptr, size_t align, const char *name) {
    if (!ptr) gdn_die("gdn_chunk_fwd: %s is NULL", name);
    if ((uintptr_t)ptr % align)
        gdn_die("gdn_chunk_fwd: %s = %p is not %zu-byte aligned\nHINT: carve tensors at 16-byte "
                "offsets", name, ptr, align);
}

// the forward on p's chunk grid (no document plan; chunk_reset, chunk_tok, chunk_len as given)
static void gdn_chunk_fwd_rows(const gdn_fwd_params *pin) {
    gdn_fwd_params pp = *pin;
    gdn_fwd_params *p = &pp;
    if (p->B < 1 || p->H < 1 || p->T < 0)
        gdn_die("gdn_chunk_fwd: bad shape B %d T %d H %d (B, H >= 1, T >= 0)", p->B, p->T, p->H);
    if (p->Dk != 64 && p->Dk != 128 && p->Dk != 256)
        gdn_die("gdn_chunk_fwd: Dk %d not supported\nHINT: kernels are built for Dk = 64, 128, 256",
                p->Dk);
    if (p->Dv != p->Dk && p->Dv != 2 * p->Dk)
        gdn_die("gdn_chunk_fwd: Dv %d not supported with Dk %d\nHINT: Dv = Dk or 2 Dk (expand_v 1 "
                "or 2)", p->Dv, p->Dk);
    if (p->dtype != GDN_DTYPE_BF16 && p->dtype != GDN_DTYPE_FP32)
        gdn_die("gdn_chunk_fwd: unknown dtype %d", (int)p->dtype);
    gdn_check_ptr(p->q, 16, "q");
    gdn_check_ptr(p->k, 16, "k");
    gdn_check_ptr(p->v, 16, "v");
    if (!p->o && !p->h_states)
        gdn_die("gdn_chunk_fwd: o and h_states are both NULL\nHINT: o may be NULL only when "
                "h_states is set (the states-only forward of the backward's recompute)");
    if (p->o) gdn_check_ptr(p->o, 16, "o");
    if (p->mode.gate) gdn_check_ptr(p->g, 4, "g (gate on)");
    if (p->mode.delta) gdn_check_ptr(p->beta, 4, "beta (delta on)");
    if (p->h0) gdn_check_ptr(p->h0, 4, "h0");
    if (p->ht) gdn_check_ptr(p->ht, 4, "ht");
    if (p->h_states) gdn_check_ptr(p->h_states, 4, "h_states");
    if (!p->chunk_tok != !p->chunk_len)
        gdn_die("gdn_chunk_fwd: chunk_tok %p with chunk_len %p\nHINT: both or neither (the "
                "document plan's tables)", (const void *)p->chunk_tok, (const void *)p->chunk_len);
    const bool f32 = p->dtype == GDN_DTYPE_FP32;
    if (f32) p->workspace = NULL;  // the fp32 path recomputes T and P in the fused kernel
    if (p->workspace) gdn_check_ptr(p->workspace, 16, "workspace");
    // the replay (keep_ready with keep_dt, states only): no workspace, no prep, no scan
    const bool replay = !f32 && p->keep_ready && p->keep_dt && !p->o && (p->h_states || p->ht);
    if (!p->workspace && !replay) {  // the keep buffers belong to the prep path
        p->keep_dt = NULL;
        p->keep_g = NULL;
        p->keep_ready = 0;
    }
    if (p->keep_g) gdn_check_ptr(p->keep_g, 16, "keep_g");
    if (p->keep_dt) gdn_check_ptr(p->keep_dt, 16, "keep_dt");
    if (p->keep_ready && !(p->keep_g && replay))
        gdn_die("gdn_chunk_fwd: keep_ready needs keep_g and keep_dt with o = NULL and h_states or "
                "ht (the replay)\nHINT: a forward that keeps them runs with keep_ready = 0");
    // the replay has its own column blocks (64): dv_block does not apply
    const int dvb = replay ? 0 : gdn_chunk_fwd_dv_block(p);
    if (!replay) {
        if (f32 && dvb != 16)
            gdn_die("gdn_chunk_fwd: dv_block %d with fp32 inputs\nHINT: fp32 runs with dv_block 16",
                    dvb);
        if (dvb == 128 && !(p->workspace && p->Dk <= 128))
            gdn_die("gdn_chunk_fwd: dv_block 128 needs a workspace and Dk <= 128 (Dk %d, workspace "
                    "%p)\nHINT: pass gdn_chunk_fwd_workspace_bytes(p) bytes", p->Dk, p->workspace);
        if (dvb != 16 && dvb != 32 && dvb != 128 && !(dvb == 64 && p->Dk <= 128))
            gdn_die("gdn_chunk_fwd: dv_block %d not supported with Dk %d\nHINT: 16, 32, 64 (Dk <= "
                    "128) or 128 (Dk <= 128, workspace)", dvb, p->Dk);
    }
    if (p->T == 0) {  // nothing to scan: ht = h0
        if (p->ht) {
            const size_t n = (size_t)p->B * p->H * p->Dk * p->Dv * sizeof(float);
            if (p->h0) CUDA_CHECK(cudaMemcpyAsync(p->ht, p->h0, n, cudaMemcpyDeviceToDevice, p->stream));
            else CUDA_CHECK(cudaMemsetAsync(p->ht, 0, n, p->stream));
        }
        return;
    }
    if (replay) {
        switch (p->Dk) {
        case 64: gdn_chunk_replay_launch<64, 64>(p); break;
        case 128: gdn_chunk_replay_launch<128, 64>(p); break;
        default: gdn_chunk_replay_launch<256, 64>(p); break;
        }
        return;
    }
    if (f32) {
        switch (p->Dk) {
        case 64: gdn_chunk_fwd_run<64, 16, 1, true, false>(p); break;
        case 128: gdn_chunk_fwd_run<128, 16, 1, true, false>(p); break;
        default: gdn_chunk_fwd_run<256, 16, 1, true, false>(p); break;
        }
        return;
    }
    if (!p->workspace) {
        p->p_from_prep = 2;
        switch (p->Dk * 1000 + dvb) {
        case 64016: gdn_chunk_fwd_run<64, 16, 1, false, false>(p); break;
        case 64032: gdn_chunk_fwd_run<64, 32, 1, false, false>(p); break;
        case 64064: gdn_chunk_fwd_run<64, 64, 1, false, false>(p); break;
        case 128016: gdn_chunk_fwd_run<128, 16, 1, false, false>(p); break;
        case 128032: gdn_chunk_fwd_run<128, 32, 1, false, false>(p); break;
        case 128064: gdn_chunk_fwd_run<128, 64, 1, false, false>(p); break;
        case 256016: gdn_chunk_fwd_run<256, 16, 1, false, false>(p); break;
        default: gdn_chunk_fwd_run<256, 32, 1, false, false>(p); break;
        }
        return;
    }
    // prep path (always writes G; T with delta on; P unless p_from_prep == 2, measured faster
    // at every benchmark shape, bench/gdn_fwd.md; states only: no P anywhere, prep skips Q)
    if (p->p_from_prep != 2) p->p_from_prep = p->o ? 1 : 2;
    switch (p->Dk) {
    case 64: gdn_chunk_prep_launch<64>(p); break;
    case 128: gdn_chunk_prep_launch<128>(p); break;
    default: gdn_chunk_prep_launch<256>(p); break;
    }
    switch (p->Dk * 1000 + dvb) {
    case 64016: gdn_chunk_fwd_run<64, 16, 1, false, true>(p); break;
    case 64032: gdn_chunk_fwd_run<64, 32, 1, false, true>(p); break;
    case 64064: gdn_chunk_fwd_run<64, 64, 1, false, true>(p); break;
    case 64128: gdn_chunk_fwd_run<64, 64, 2, false, true>(p); break;
    case 128016: gdn_chunk_fwd_run<128, 16, 1, false, true>(p); break;
    case 128032: gdn_chunk_fwd_run<128, 32, 1, false, true>(p); break;
    case 128064: gdn_chunk_fwd_run<128, 64, 1, false, true>(p); break;
    case 128128: gdn_chunk_fwd_run<128, 64, 2, false, true>(p); break;
    case 256016: gdn_chunk_fwd_run<256, 16, 1, false, true>(p); break;
    default: gdn_chunk_fwd_run<256, 32, 1, false, true>(p); break;
    }
}

// With documents: the forward on the plan's padded chunk grid (T -> Tp) with its reset flags,
// each chunk's tokens read and o written where they are (chunk_tok, chunk_len; gdn_cuda.h,
// gdn_docs)
static void gdn_chunk_fwd_docs(const gdn_fwd_params *p) {
    const gdn_docs *d = p->docs;
    if (d->B != p->B || d->T != p->T)
        gdn_die("gdn_chunk_fwd: document plan for B %d T %d, params B %d T %d\nHINT: make the plan "
                "(gdn_docs_init) for this batch's shape", d->B, d->T, p->B, p->T);
    if (p->chunk_reset || p->chunk_tok || p->chunk_len)
        gdn_die("gdn_chunk_fwd: chunk_reset, chunk_tok or chunk_len with a document plan\nHINT: "
                "the plan sets its own");
    gdn_fwd_params f = gdn_fwd_padded(p);
    f.chunk_reset = d->reset;
    f.chunk_tok = d->chunk_tok;
    f.chunk_len = d->chunk_len;
    gdn_chunk_fwd_rows(&f);
}

extern "C" void gdn_chunk_fwd(const gdn_fwd_params *p) {
    if (!p) gdn_die("gdn_chunk_fwd: params is NULL");
    if (p->docs && p->docs->any) {
        gdn_chunk_fwd_docs(p);
        return;
    }
    gdn_fwd_params f = *p;
    f.docs = NULL;
    gdn_chunk_fwd_rows(&f);
}
