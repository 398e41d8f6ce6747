// gdn_chunk_prep.cuh — the first kernel of the GDN chunk backward (included by
// src/bwd/gdn_chunk.cu only): per chunk, all chunks in parallel, what does not depend on the
// state gradient. From Q, K, g, beta of the chunk: the gates (G, gamma, hdec), P = Gam ⊙ QK^T,
// A = strictLower(diag(beta)(Gam ⊙ KK^T)), Linv = (I + A)^{-1} by an fp32 forward substitution,
// T = Linv diag(beta) and W = T diag(gamma) K. Two kernels, one per path (gdn_chunk_common.cuh's
// recompute_path):
//   gdn_bwd_prep_kernel     fp32 or Dk 256: also KHg = diag(gamma) K H and dΔ_loc = P^T dO per
//                           value block; writes Linv, W, KHg, P | Gam ⊙ KK^T (fp32), dΔ_loc
//   gdn_bwd_prep_rc_kernel  bf16 with Dk <= 128: writes Linv, W and P's bf16 plane only (the scan
//                           and the final kernel form the rest on chip)
// Readers: W -> the scan; Linv, KHg, P | Gam ⊙ KK^T -> the final kernel; dΔ_loc -> the scan
// (which writes dΔ over it); P's plane -> the scan (dΔ_loc = P^T dO).
#pragma once
#include "gdn_chunk_common.cuh"

namespace {

// =============================================================================================
// gdn_bwd_prep_kernel: per chunk, 4 warps; warp w owns rows [16w, 16w + 16) of every C-row
// result. Off the recompute path only (fp32, Dk 256): gdn_bwd_prep_rc_kernel takes that path.
// =============================================================================================
template <int DK, int NP>
struct prep_layout {
    static_assert(!recompute_path(DK, NP), "prep: off the recompute path (prep_rc takes it)");
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
// columns, for the column blocks np <= warp (the lower triangle; both prep kernels).
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
// reads of A before the write-back and the write-back before any later reader (both prep kernels).
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
    const gdn_fwd_params &p = a.p.fwd;  // shapes and inputs; a.p: the gradients
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, m0 = warp * 16;
    const int n = a.c0 + blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int H = p.H, DV = p.Dv;
    const gdn_rows cr = gdn_chunk_rows(p, b, n);
    const int nvalid = cr.nvalid;
    const bool delta = p.mode.delta, gate = p.mode.gate;
    const size_t row0 = cr.tok * H + h;  // token row of the chunk's first token, head h
    const size_t cix = seg_tile(a, (size_t)b * H + h, n);    // the workspace's tile
    const size_t hix = state_tile(a, (size_t)b * H + h, n);  // the chunk-start state's
    const size_t rsk = (size_t)H * DK, rsv = (size_t)H * DV;
    const size_t esz = NP == 1 ? 2 : 4;
    const unsigned char *qg = (const unsigned char *)p.q + row0 * DK * esz;
    const unsigned char *kg = (const unsigned char *)p.k + row0 * DK * esz;
    const unsigned char *dog = (const unsigned char *)a.p.dO + row0 * DV * esz;

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
            cvt_rows_f32<L::HP>(sm, L::HB, L::PBV, L::HB_PL, a.Hs + hix * DK * DV + v0, DV, DK, VB,
                                DK, tid, 128);
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
// gdn_bwd_prep_rc_kernel (the recompute path: bf16, Dk <= 128): gdn_bwd_prep_kernel's arithmetic
// in its order (bitwise its results) in less shared memory, so that 4 CTAs share an SM at Dk 128
// (gdn_bwd_prep_kernel's layout would take 72 KB: 3; this one 55 KB, and
// __launch_bounds__(128, 4) keeps the registers at <= 128), and instead of dΔ_loc = P^T dO, P's
// bf16 plane (the A operand of that product, exactly as the mma reads it) -> a.Pp: the scan
// forms P^T dO for its value columns with the same wmm call (the same fragments, k from 16 w,
// each n-tile's accumulation alone: the same fp32 bits); this kernel never reads dO.
//   - A (fp32 C x C) lives in region 0 once every warp has read Q (one more barrier between the
//     P/A mma and the A epilogue), not in a region of its own;
//   - diag(gamma) K is formed in K's own buffer (each thread rewrites the pairs it read; the
//     recompute path never reads K again), so region 0 is free after the Linv / T loop;
//   - warp 0 forms the gates while Q and K are still in flight (gdn_bwd_prep_kernel waits for
//     them first).
// =============================================================================================
template <int DK, int NP>
struct prep_rc_layout {
    static_assert(recompute_path(DK, NP), "prep_rc: the recompute path only");
    static constexpr int PBK = (DK + 8) * 2, QK_PL = C * PBK;
    static constexpr int PBC = (C + 8) * 2, CC_PL = C * PBC;
    static constexpr int PA = C + 4;                       // fp32 pitch of A / Linv
    // region 0: Q, then A / Linv (fp32); at least DOB bytes (two 64-column planes of C rows:
    // 1 KB more than Q or A need at Dk 64 and 128, no CTA per SM to gain by dropping it)
    static constexpr int DOB = 2 * NP * C * (64 + 8) * 2;
    static constexpr int R0 = cmax(cmax(NP * QK_PL, C * PA * 4), DOB);
    static constexpr int Q = 0, A = 0;
    static constexpr int K = R0;                           // K, then diag(gamma) K
    static constexpr int T = K + NP * QK_PL;
    static constexpr int P = T + NP * CC_PL;
    static constexpr int GB = P + NP * CC_PL;              // g[C], beta[C]
    static constexpr int GS = GB + 2 * C * 4;              // Gh, Gl, gam, hdec [C]
    static constexpr int BYTES = GS + 4 * C * 4;
    static_assert(BYTES <= SMEM_MAX, "prep_rc shared memory");
    static_assert(DK > 128 || BYTES + 1024 <= SMEM_SM / 4, "prep_rc: 4 CTAs per SM");
};

template <int DK, int NP>
__global__ void __launch_bounds__(128, 4) gdn_bwd_prep_rc_kernel(const __grid_constant__ bwd_args a) {
    using L = prep_rc_layout<DK, NP>;
    extern __shared__ __align__(128) unsigned char sm[];
    const gdn_fwd_params &p = a.p.fwd;  // shapes and inputs; a.p: the gradients
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, m0 = warp * 16;
    const int n = a.c0 + blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int H = p.H;
    const gdn_rows cr = gdn_chunk_rows(p, b, n);
    const int nvalid = cr.nvalid;
    const bool delta = p.mode.delta, gate = p.mode.gate;
    const size_t row0 = cr.tok * H + h;  // token row of the chunk's first token, head h
    const size_t cix = seg_tile(a, (size_t)b * H + h, n);  // the workspace's tile
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
        static_assert(NP == 1, "prep_rc: one P plane");
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

}  // namespace
