// gdn_chunk_final.cuh — the last kernel of the GDN chunk backward (included by
// src/bwd/gdn_chunk.cu only): per chunk, every gradient from the chunk-start state H, the
// end-state gradient dH' (from the scan) and what the prep kernel stored, in two phases per
// pass over DKH key columns:
//   phase 1, per value sub-block (each one's V, dO, H, dH' staged by cp.async while the one
//            before computes): Y = V - KHg, Δ = T Y, dV = T^T dΔ, and the products over value
//            columns dP = dO Δ^T, dT = dΔ Y^T, dO H^T, Δh dH'^T, -γdV H^T;
//   phase 2, in the same shared memory: the pass's Q, K columns and (first pass) the C x C work
//            (dQK, Z = dT T^T, dA, X, dbeta, the dg cross sums); then dq, dk of the pass's
//            columns. Last, dg from the row sums.
// Two instances per shape at most: the mma.sync kernel (every shape) and, on sm_90a for bf16
// with Dk = 128 and delta on, the wgmma kernel (WGMMA: the H and C x C products of phase 1 on
// wgmma, each sub-block's staging -> planes conversion under the previous one's wgmmas).
#pragma once
#include "gdn_chunk_common.cuh"
#include "../cuda/wgmma.cuh"

namespace {

// =============================================================================================
// gdn_bwd_final_kernel: per chunk, 8 warps; warp w owns rows [16 (w%4), +16) and column half
// w/4 of every C-row result (C x C, C x DKH). In a value sub-block warps 0-3 form Δ, warps 4-7 dV
// (all VB columns each).
// =============================================================================================
// WGMMA: false, the mma.sync kernel (every shape); true, the wgmma kernel (bf16 with Dk = 128
// and delta on, on sm_90a; final_wgmma): the H products that run over value columns into the C x Dk
// accumulators (dO H^T, Δh dH'^T, -γdV H^T) are wgmma m64n64k16 with A (dO, Δh, -γdV) in
// registers from the same ldmatrix fragments and B (the H and dH' blocks) in shared memory in
// the 128-byte swizzled layout of wgmma.cuh: one 64-column panel of DKH rows per block, the hi
// plane in columns 0..31 and the lo plane in 32..63 (VB = 32), so one panel row is one 128-byte
// line and every k-step a descriptor of its own (K-major: rows = key dims = N); K dH' and K H
// read the same panels N-major (rows = key dims = K, N = 64 = hi | lo); dO Δ^T and dΔ Y^T run
// as m64n32 per warpgroup (its 32 token columns), with Y and Δ as C-row panels (hi | lo) instead
// of padded planes.
template <int DK, int NP, bool WGMMA>
struct final_layout {
    // Value columns stream in sub-blocks of VB, each staged raw (cp.async) while the one before
    // computes, so only the first one's loads wait. PAIR sub-blocks form a group of VG columns:
    // the fp32 sums that run over value columns outside one mma chain (<H, dH'>, the -KHg.dV row
    // sums, and dK's two H-block products, Δh dH'^T then -γdV H^T) are grouped by VG columns,
    // so that the order of those sums does not depend on the sub-block width. The staging and
    // one more H block and -γdV (the VG group's first, kept for its -γdV H^T) need VB = 32 with
    // bf16 inputs.
    static constexpr int VB = NP == 1 ? 32 : 16, PAIR = NP == 1 ? 2 : 1, VG = PAIR * VB;
    static constexpr bool RC = recompute_path(DK, NP);            // (then DKH = DK)
    static constexpr int ESZ = NP == 1 ? 2 : 4;                   // input element bytes
    static constexpr int DKH = NP == 1 ? (DK < 128 ? DK : 128) : 64;  // key columns per pass
    static constexpr int PBH = (DKH + 8) * 2, QH_PL = C * PBH;
    static constexpr int PBC = (C + 8) * 2, CC_PL = C * PBC;
    static constexpr int PF = C + 4;                             // fp32 pitch
    static constexpr int PBV = (VB + 8) * 2, V_PL = C * PBV, HB_PL = DKH * PBV;
    // Planes of H and dH' as the B operand of the dq and dk H-products (dO H^T, Δh dH'^T,
    // -γdV H^T): with bf16 inputs the hi plane alone. The float64 emulation of every rounding
    // point (bench/gdn_precision.py, docs/gdn_kernels.md) ranks these three uses among the least
    // harmful to dg and dbeta; H and dH' stay hi + lo in K H and K dH' (in dΔ), which rank
    // among the most. fp32 inputs keep both planes (their 1e-4 bound).
    static constexpr int NPH = NP == 1 ? 1 : 2;
    // Whole kernel. Intermediates are hi + lo planes also for bf16 inputs (dg and dbeta rest on
    // them); only operands that are bf16 inputs (Q, K, dO) and dQK, X, -γdV have NP planes.
    static constexpr int TT = 0;                                  // T = Linv diag(beta) (2)
    static constexpr int DQK = TT + 2 * CC_PL;                    // dQK = dP ⊙ Gam
    static constexpr int XB = DQK + NP * CC_PL;                   // X = diag(beta)(dA ⊙ Gam)
    // RC: K (one plane, all columns; the pass's K of phase 2 too) and P = Gam ⊙ QK^T (one plane,
    // as prep_rc's, for dΔ's P^T dO), both formed in the setup
    static constexpr int KR = XB + NP * CC_PL;
    static constexpr int PP = KR + (RC ? QH_PL : 0);
    static constexpr int SMALL = PP + (RC ? CC_PL : 0);
    // fp32 [C]: g, beta, Gh, Gl, gam, hdec, pos1p[2], tkp[2], pos2p[2], dbp[2], dbd, cross; red[256]
    // (red: the 8 warp sums of <H, dH'>; the rest is unused)
    static constexpr int R = SMALL + (18 * C + 256) * 4;
    // Region R, phase 1 (each value sub-block of a pass): planes converted from the staging
    // (WP, the wgmma kernel: Y and Δ are swizzled panels after the dH' panel instead, see YW)
    static constexpr bool WP = WGMMA;
    // EA (the wgmma kernel): the staging and the conversion off the sub-block chain. The dH'
    // panel has two slots (slot = e, as the H panel's), so sub-block v + 1's staging -> planes
    // conversion runs while sub-block v's wgmma group (the H products) is in flight; v + 1's dO,
    // H, dH' are staged right after v's first barrier (the conversion read them under v - 1's
    // wgmmas), V after Y (which reads it); the RC KHg of warps 4-7 waits in the DQK | XB region (written
    // only in phase 2) instead of the dH' staging; phase 2's Linv and Q travel into the dO | H |
    // dH' staging during the last sub-block. (Bitwise the results of converting and staging in
    // the sub-block chain, as the mma.sync kernel does.)
    static constexpr bool EA = WGMMA;
    static constexpr int Y0 = R;                                  // Y = V - KHg (2 planes)
    static constexpr int DO = Y0 + (WP ? 0 : 2 * V_PL);
    static constexpr int DD = DO + NP * V_PL;                     // dΔ (2)
    static constexpr int DL0 = DD + 2 * V_PL;                     // Δ (2; NP planes of V when
                                                                  // delta is off)
    static constexpr int DH = DL0 + (WP ? 0 : 2 * V_PL);          // diag(hdec) Δ (2)
    static constexpr int DVG = DH + 2 * V_PL;                     // -diag(gamma) dV, PAIR slots
    // WGMMA: both blocks as swizzled panels (hi | lo in one 128-byte line), 1024-byte aligned
    // (the kernel rebases sm to a 1024-byte boundary; BYTES has the slack)
    static_assert(!WGMMA || (NP == 1 && DK == 128 && VB == 32 && PAIR == 2), "final: wgmma shape");
    static constexpr int HW_PL = DKH * 128;                       // WGMMA: one panel (hi | lo)
    static constexpr int HB = WGMMA ? (DVG + PAIR * NP * V_PL + 1023) / 1024 * 1024
                                 : DVG + PAIR * NP * V_PL;        // H block (DKH x VB) (2), PAIR
                                                                  // slots (slot = place in VG)
    static constexpr int HB_SLOT = WGMMA ? HW_PL : 2 * HB_PL;        // bytes per slot
    static constexpr int DHB = HB + PAIR * HB_SLOT;               // dH' block (2)
    // WP: Y and Δ as C-row panels (hi | lo, as the H panels), B of dT += dΔ Y^T and dP += dO
    // Δ^T on wgmma (K-major: rows = tokens = N); 1024-aligned as DHB and HW_PL are (after the
    // two dH' panel slots)
    static constexpr int YW_PL = C * 128;
    static constexpr int YW = DHB + (WGMMA ? 2 * HW_PL : 2 * HB_PL), DLW = YW + YW_PL;
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
    static constexpr int BYTES = SEND + (WGMMA ? 1024 : 0);       // WGMMA: alignment slack
    static_assert(BYTES <= SMEM_MAX, "final shared memory");
    static_assert(!EA || (RC && WP && NP == 1 && QP2 + QH_PL <= SEND && SDO % 16 == 0 &&
                          CC_PL % 16 == 0 && (VB / 8) * 128 * 16 <= XB + NP * CC_PL - DQK),
                  "final: wgmma layout (phase 2's Linv, Q in the staging, KHg in DQK | XB)");
    static_assert(!WGMMA || (HB % 1024 == 0 && HW_PL % 1024 == 0),
                  "final: wgmma panels 1024-aligned");
    static_assert(!WP || (YW % 1024 == 0 && YW_PL % 1024 == 0), "final: Y, Δ panels 1024-aligned");
    static_assert(SV % 16 == 0 && PBV % 16 == 0, "final: cp.async staging alignment");
};

// acc = A B^T for this warp's 16 x 32 tile (rows m0.., columns n0..), k over [0, DKH); A, B
// one plane (bf16 inputs), stored [row][k]. Only the lower part: a 16-column half wholly above
// the diagonal stays zero. The fragments and the k order of the prep kernels' P and Gam ⊙ KK^T,
// so the same fp32 bits as those (recompute path).
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

// ---- the wgmma kernel: the H and dH' blocks, Y and Δ as swizzled panels, their products ----
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
// conflict) and the same mma order as wmm: the same bits as the padded layout gives. (The wgmma
// kernel's Δ = T Y: the Y panel, k = token rows, A = T of 2 planes.)
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
// the barrier that publishes them. sm_90a only; the wgmma instance is launched only there.
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
// around them is the mma.sync kernel's. B (H, dH') is its hi plane alone (final_layout::NPH);
// per k-step the planes go in mma_p's order (A lo x B hi, A hi x B hi; dO Δ^T, dΔ Y^T: A lo x
// B hi, A hi x B lo, A hi x B hi). Two orders differ from the mma.sync path: -γdV_e H_e^T follows its own
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
    // H and dH' as B of these three: the hi plane (k-step s) alone (final_layout::NPH)
#pragma unroll
    for (int s = 0; s < 2; ++s)  // dO H^T
        wgm::mma_rs<64, 0>(q32, fo[s][0], wgm::desc_k<R>(hbe, q0, s), 1);
#pragma unroll
    for (int s = 0; s < 2; ++s) {  // Δh dH'^T
        wgm::mma_rs<64, 0>(k32, fd[s][1], wgm::desc_k<R>(dhb, q0, s), 1);
        wgm::mma_rs<64, 0>(k32, fd[s][0], wgm::desc_k<R>(dhb, q0, s), 1);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s)  // -γdV H^T
        wgm::mma_rs<64, 0>(k32, fg[s][0], wgm::desc_k<R>(hbe, q0, s), 1);
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
// two halves (hi + lo) once: the mma.sync kernel's chain adds lo, then hi at every k-step, so the
// sums round differently (dΔ and KHg, hence every gradient, move by ~1e-7 relative).
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

template <int DK, int NP, bool WGMMA>
__global__ void __launch_bounds__(256, 1) gdn_bwd_final_kernel(const __grid_constant__ bwd_args a) {
    using L = final_layout<DK, NP, WGMMA>;
    constexpr int VB = L::VB, PAIR = L::PAIR, VG = L::VG, ESZ = L::ESZ;
    constexpr int DKH = L::DKH, NKH = DK / DKH, NTV = VB / 8, NQ = DKH / 16;
    constexpr bool RC = L::RC;
    constexpr int HBP = RC || NP == 2 ? 2 : 1;  // planes of the H, dH' blocks (mma.sync kernel)
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
    unsigned char *sm = sm_raw;  // WGMMA: rebased to a 1024-byte boundary (the panels' swizzle)
    if constexpr (WGMMA) sm += (1024u - (smem_u32(sm_raw) & 1023u)) & 1023u;
    const gdn_fwd_params &p = a.p.fwd;  // shapes and inputs; a.p: the gradients
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g4 = lane >> 2, t4 = lane & 3, mw = warp & 3, ch = warp >> 2, m0 = mw * 16;
    const int n = a.c0 + blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int H = p.H, DV = p.Dv;
    const gdn_rows cr = gdn_chunk_rows(p, b, n);
    const int nvalid = cr.nvalid;  // the chunk's token rows (the rest: zeros, never stored)
    const bool gate = p.mode.gate;
    bool delta = p.mode.delta;
    // the wgmma kernel runs only with delta on (gdn_bwd_final_launch): its -γdV H^T goes with
    // every sub-block
    if constexpr (WGMMA) delta = true;
    const size_t row0 = cr.tok * H + h;  // token row of the chunk's first token, head h
    const size_t cix = seg_tile(a, (size_t)b * H + h, n);    // the workspace's tile
    const size_t hix = state_tile(a, (size_t)b * H + h, n);  // the chunk-start state's
    const size_t rsk = (size_t)H * DK, rsv = (size_t)H * DV;
    const size_t esz = ESZ;
    const unsigned char *qg = (const unsigned char *)p.q + row0 * DK * esz;
    const unsigned char *kg = (const unsigned char *)p.k + row0 * DK * esz;
    const unsigned char *vg = (const unsigned char *)p.v + row0 * DV * esz;
    const unsigned char *dog = (const unsigned char *)a.p.dO + row0 * DV * esz;
    unsigned char *dqg = (unsigned char *)a.p.dq + row0 * DK * esz;
    unsigned char *dkg = (unsigned char *)a.p.dk + row0 * DK * esz;
    unsigned char *dvg = (unsigned char *)a.p.dv + row0 * DV * esz;
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
    const smat sQ2{sb + L::QP2, L::PBH, L::QH_PL};  // phase 2's Q (sQh, or the staging with wgmma)

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
        const size_t ho = hix * DK * DV + (size_t)kn * DKH * DV + vn;
        cp_rows16<DKH, VB * 4, 256>(sb + L::SH, VB * 4, (const unsigned char *)(a.Hs + ho),
                                    (size_t)DV * 4, DKH, tid);
        if constexpr (!RC) cp_dh(kn, vn);
    };
    // wgmma kernel (EA, RC only): part A (dO, H, dH': read only by the conversion) right after the
    // conversion barrier of the sub-block before; part V (V: read by Y = V - KHg) after Y
    auto stageA = [&](int kn, int vn) {
        cp_rows16<C, VB * ESZ, 256>(sb + L::SDO, VB * ESZ, dog + vn * esz, rsv * esz, nvalid,
                                    tid);
        const size_t ho = hix * DK * DV + (size_t)kn * DKH * DV + vn;
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
    if constexpr (RC) {  // P = Gam ⊙ QK^T (lower incl. the diagonal) as prep_rc's plane; the first
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
    // conversion at the top of the sub-block loop below (the mma.sync kernel's; here RC, delta
    // on), line for line
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
                    // the lo planes only where K H and K dH' read them (RC) or fp32 inputs
                    // (their H products take both); else the hi plane alone, the same bits
                    st_run<HBP, 4>(sm, hbo + po, L::HB_PL, xh);
                    st_run<HBP, 4>(sm, L::DHB + po, L::HB_PL, xd);
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
                // K H (H as hi + lo, as the prep kernel forms it) and Y = V - KHg by warps 4-7; each in
                // the tiling of stage A below (rows m0, all VB columns), in halves of 16 columns
                // (all VB at once spills: the 96 accumulators of stage B are live here)
                if constexpr (WGMMA) {  // warpgroup 0: K dH' (dΔ); 1: K H (KHg); all VB columns
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

            if constexpr (WGMMA) {  // the H and C x C products on wgmma, the next sub-block's
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
                wmm<NP, false, false, NQ, L::NPH>(aQ, sDO, sHB, m0, q0, 0, VB, lane);  // dO H^T
                wmm<2, false, false, NQ, L::NPH>(aK, sDH, sDHB, m0, q0, 0, VB, lane);  // Δh dH'^T
                if (delta && e == PAIR - 1)  // -γdV H^T of the VG group's sub-blocks, in order
#pragma unroll 1
                    for (int x = 0; x < PAIR; ++x) {
                        const smat sG{sb + L::DVG + x * NP * L::V_PL, L::PBV, L::V_PL};
                        const smat sH{sb + L::HB + x * 2 * L::HB_PL, L::PBV, L::HB_PL};
                        wmm<NP, false, false, NQ, L::NPH>(aK, sG, sH, m0, q0, 0, VB, lane);
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
                if (tid < nvalid && a.p.dbeta)
                    a.p.dbeta[row0 + (size_t)tid * H] = dbd[tid] + dbp[tid] + dbp[C + tid];
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
    if (gate && a.p.dg && warp == 0) {
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
            if (s < nvalid) a.p.dg[row0 + (size_t)s * H] = acc;
        }
    }
}

}  // namespace
