// gdn_chunk_scan.cuh — the reverse scan of the GDN chunk backward (included by
// src/bwd/gdn_chunk.cu only): the one sequential part. Per (b, h, block of value columns), chunks
// from last to first, the state gradient on chip:
//   dΔ = dΔ_loc + diag(hdec) K dH'                       dΔ_loc = P^T dO (prep, or formed here)
//   dH = gamma_C dH' + (diag(gamma) Q)^T dO - W^T dΔ     -> the previous chunk's dH'
// It writes dH' of every chunk (read by the final kernel) and, off the recompute path, dΔ over
// dΔ_loc. The initial-state gradient dh0 is the dH left after chunk 0. A chunk that starts a
// document (fwd.chunk_reset) passes dH' = 0 to the chunk before it. One launch walks one
// segment of chunks (bwd_args c0, NS): it starts from dht (the gradient of the segment's end
// state: the caller's dht for the last segment, else the carry the launch after it left) and
// leaves the dH before its first chunk in dh0 (the caller's for chunk 0, else the carry); each
// thread reads and writes the same elements, so dht and dh0 may be one buffer.
#pragma once
#include "gdn_chunk_common.cuh"

namespace {

// =============================================================================================
// gdn_bwd_scan_kernel: per (b, h, block of DVB value columns), 4 warps, chunks in reverse
// order. dH (Dk x DVB) lives in fp32 accumulators: warp w owns rows [w Dk/4, (w+1) Dk/4).
// =============================================================================================
// CTAs of one SM by shared memory, at most rcta (the registers' bound)
constexpr int scan_ctas(int bytes, int rcta) {
    return SMEM_SM / (bytes + 1024) < rcta ? SMEM_SM / (bytes + 1024) : rcta;
}
// SMAX: the most stages (chunk sets in flight) the launcher allows: 2 when the grid leaves SMs
// idle (one CTA per SM, the next chunk's loads behind this one's work), 1 when the grid is
// larger than the SMs (70 KB at Dk 128, DVB 64: two CTAs per SM hide each other's latency).
// SD (the recompute path; false there only in scan_pipe_ok's criterion): the set holds P (bf16
// C x C, pitch PDD, from prep_rc) in place of the fp32 dΔ_loc rows, and is always staged (PF).
// Each warp forms its own dΔ_loc rows (16 w..) from P and the set's dO rows with the prep
// kernel's wmm call, in registers. (Splitting that product evenly over the warps through an fp32
// shared tile runs at the same speed.)
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
    // CTAs per SM the kernel runs without it (RCTA: without PF the registers allow 2 at DVB 64,
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
//   group B: dΔ_loc and dO of n - 1 (PF), issued after the barrier behind the dΔ epilogue (as
//            in the PIPE = false kernel); waited for at the top of n - 1
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
    constexpr bool SD = RC;  // dΔ_loc = P^T dO from prep_rc's P (scan_layout's)
    static_assert(!SD || L::PF, "scan SD: staged sets");
    extern __shared__ __align__(128) unsigned char sm[];
    const gdn_fwd_params &p = a.p.fwd;  // shapes and inputs; a.p: the gradients
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g4 = lane >> 2, t4 = lane & 3;
    const int v0 = blockIdx.x * DVB, h = blockIdx.y, b = blockIdx.z;
    const int H = p.H, DV = p.Dv, NC = a.NC;
    const int c0 = a.c0, c1 = a.c0 + a.NS;  // the segment's chunks, walked from c1 - 1 down
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
        const gdn_rows cr = gdn_chunk_rows(p, b, n);
        const int nv = cr.nvalid, st = stage(n);
        const size_t row0 = cr.tok * H + h;
        load_in_rows<NP>(sm, st + L::K, L::PBK, L::QK_PL,
                         (const unsigned char *)p.k + row0 * DK * esz, rsk, C, DK, nv, tid, NTHR);
        if (tid < C) {
            const bool ok = tid < nv && gate;
            cp_async4(sb + st + L::G + tid * 4, ok ? p.g + row0 + (size_t)tid * H : RC ? a.dHs : a.dD,
                      ok ? 4 : 0);
        }
    };
    auto load_qw = [&](int n) {
        const gdn_rows cr = gdn_chunk_rows(p, b, n);
        const int nv = cr.nvalid, st = stage(n);
        const size_t row0 = cr.tok * H + h;
        load_in_rows<NP>(sm, st + L::Q, L::PBK, L::QK_PL,
                         (const unsigned char *)p.q + row0 * DK * esz, rsk, C, DK, nv, tid, NTHR);
        if (delta) {
            const bf16 *Wg = a.Wp + seg_tile(a, bh, n) * NP * C * DK;
#pragma unroll
            for (int pl = 0; pl < NP; ++pl)
                cp_rows_bf16(sb + st + L::W + pl * L::QK_PL, L::PBK, Wg + (size_t)pl * C * DK, DK,
                             C, DK, C, tid, NTHR);
        }
    };
    auto load_chunk = [&](int n) {
        const gdn_rows cr = gdn_chunk_rows(p, b, n);
        const int nv = cr.nvalid, st = stage(n);
        const size_t row0 = cr.tok * H + h;
        load_in_rows<NP>(sm, st + L::Q, L::PBK, L::QK_PL,
                         (const unsigned char *)p.q + row0 * DK * esz, rsk, C, DK, nv, tid, NTHR);
        load_in_rows<NP>(sm, st + L::K, L::PBK, L::QK_PL,
                         (const unsigned char *)p.k + row0 * DK * esz, rsk, C, DK, nv, tid, NTHR);
        if (delta) {
            const bf16 *Wg = a.Wp + seg_tile(a, bh, n) * NP * C * DK;
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
        const gdn_rows cr = gdn_chunk_rows(p, b, n);
        const int nv = cr.nvalid, st = stage(n);
        const size_t row0 = cr.tok * H + h;
        if constexpr (SD)  // (SD) P of chunk n, all C rows
            cp_rows16<C, C * 2, NTHR>(sb + st + L::DDR, L::PDD,
                                      (const unsigned char *)(a.Pp + seg_tile(a, bh, n) * C * C),
                                      (size_t)C * 2, C, tid);
        else
            cp_rows16<C, DVB * 4, NTHR>(sb + st + L::DDR, L::PDD,
                                        (const unsigned char *)(dd_loc(seg_tile(a, bh, n)) + v0),
                                        (size_t)DV * 4, C, tid);
        cp_rows16<C, DVB * 2 * NP, NTHR>(sb + st + L::DOR, L::PDO,
                                         (const unsigned char *)a.p.dO + (row0 * DV + v0) * esz,
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
                acc[mt][nt][e] = a.p.dht ? a.p.dht[bh * DK * DV + (size_t)r * DV + v0 + c] : 0.f;
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
        if (c1 > c0) {
            load_kg(c1 - 1);
            cp_async_commit();  // A
            load_dd_do(c1 - 1);
            cp_async_commit();  // B
            load_qw(c1 - 1);
            cp_async_commit();  // C
        }
    } else if (c1 > c0) {
        load_chunk(c1 - 1);
        if constexpr (L::PF) load_dd_do(c1 - 1);
        cp_async_commit();
    }

    for (int n = c1 - 1; n >= c0; --n) {
        if constexpr (PIPE) cp_async_wait<1>();  // A and B of chunk n (C may be in flight)
        else cp_async_wait_all();
        __syncthreads();  // chunk n's Q, K, W, g (and dΔ_loc, dO) are in; dH' planes are visible
        if constexpr (!PIPE) {
            if (L::S == 2 && n > c0) {
                load_chunk(n - 1);
                if constexpr (L::PF) load_dd_do(n - 1);
            }
            cp_async_commit();
        }
        const gdn_rows cr = gdn_chunk_rows(p, b, n);
        const int nv = cr.nvalid, st = stage(n);
        const size_t row0 = cr.tok * H + h, cix = seg_tile(a, bh, n);
        const smat sQ{sb + st + L::Q, L::PBK, L::QK_PL}, sK{sb + st + L::K, L::PBK, L::QK_PL};
        const smat sW{sb + st + L::W, L::PBK, L::QK_PL};
        // this thread's dΔ_loc and dO pairs (rows 16 warp + g4 (+8), cols nt 8 + 2 t4); (SD: none
        // in global memory, a.dD is NULL)
        float *dDg = SD ? nullptr : dd_loc(cix) + v0;
        // (PF: from the chunk's set, after the barrier below; same values, zero rows included)
        float2 ddl[NTV][2], dov[NTV][2];
        auto ld_dd_do = [&]() {
            const unsigned char *dog = (const unsigned char *)a.p.dO + row0 * DV * esz + v0 * esz;
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
            if (n > c0) load_kg(n - 1);
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
        if (L::PF && L::S == 1 && n > c0) load_dd_do(n - 1);  // committed with load_chunk below
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
        // a document starts at chunk n (chunk_reset): its start state is zero, whatever chunk
        // n - 1 left, so no gradient flows back across it (dH' of chunk n - 1 is zero)
        if (n > 0 && p.chunk_reset && p.chunk_reset[(size_t)b * NC + n]) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
        }
        store_dh_planes();
        if constexpr (PIPE) {
            if (n > c0) load_qw(n - 1);
            cp_async_commit();  // C
        } else if (L::S == 1 && n > c0) {
            load_chunk(n - 1);
            cp_async_commit();
        }
    }
    if (a.p.dh0) store_dh_global(a.p.dh0 + bh * DK * DV);
}

}  // namespace
