// gdn_chunk.cu — the chunkwise gated delta rule backward on the GPU (DESIGN 3.2): workspace
// sizing, the launches and the checked public entry. The public contract is in gdn_bwd_cuda.h,
// the float64 twin is gdn_chunk_bwd_cpu (gdn_chunk.c). The kernels, by role, in the headers this
// file includes (one translation unit):
//   gdn_chunk_common.cuh  shared device helpers and the kernels' argument struct
//   gdn_chunk_prep.cuh    prep: per chunk, what does not depend on the state gradient
//   gdn_chunk_scan.cuh    the reverse scan of the state gradient
//   gdn_chunk_final.cuh   final: every gradient of the chunk
//
// Per chunk of C = 64 tokens (rows Q, K, V, dO; start state H, gradient dH' of the end state):
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
//   [fwd]  the chunk-start states, unless the forward saved them (gdn.bwd_states = saved):
//          replayed from the forward's gate cumsums and Δ~ rows (replay), or recomputed by
//          gdn_chunk_fwd with h_states -> Hs and o = NULL (recompute: states only, no Q, P, O
//          work; its prep path borrows the dH' (or PA..Kp) region of the workspace before the
//          scan fills it). Either way the same bits as the forward's own states.
//   prep   (4 warps)  P, A, the fp32 solve (one thread per column), W, KHg, dΔ_loc = P^T dO;
//                     writes Linv, KHg (hi + lo planes), W (NP planes), P | Gam⊙KK^T packed
//                     (fp32), dΔ_loc (gdn_bwd_prep_rc_kernel instead on the recompute path, below)
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
// Recompute path (bf16 inputs, Dk <= 128: recompute_path): gdn_bwd_prep_rc_kernel (prep's
//   arithmetic in less shared memory) writes only Linv, W and P's bf16 plane (the A operand of
//   P^T dO as the mma reads it; workspace PA region), never reads H or dO; the scan forms dΔ_loc
//   = P^T dO for its value columns from that plane with prep's wmm call (bitwise the values prep
//   writes in fp32) and does not write dΔ; the final kernel forms P = Gam ⊙ QK^T (setup; one
//   plane, as prep_rc's) with K resident, per value sub-block dΔ = P^T dO + diag(hdec) K dH'
//   (dH' hi + lo) and KHg = diag(gamma) K H (fp32, not rounded to planes), and QK^T, KK^T again
//   for the C x C work (the same bits as prep_rc's). The recomputed forward's workspace goes to
//   the dH' region.
// On sm_90a, bf16 with Dk = 128 and delta on (final_wgmma), the final kernel is the wgmma one:
//   dO H^T, Δh dH'^T, -γdV H^T, K dH', K H, dO Δ^T and dΔ Y^T on wgmma, each value sub-block's
//   staging -> planes conversion under the previous sub-block's wgmma group (two dH' panel
//   slots) and the loads issued a phase earlier (final_layout::EA); close to the mma.sync
//   results, not bitwise. gdn_bwd_params.final_mma_sync keeps the mma.sync kernel there.
// Tensor cores: mma.sync m16n8k16 bf16 -> fp32; fp32 inputs run the same kernels with operands
// split into bf16 hi + lo planes (NP = 2). With bf16 inputs (NP = 1) the inputs Q, K, V, dO are
// exact as one plane, and the intermediates that dg and dbeta rest on are hi + lo planes too
// (products of one-plane inputs with them take 2 mmas, of two such operands 3): prep: H in
// K H, KHg, Linv; final: Linv, T, Y, dΔ, Δ, Δh = diag(hdec) Δ, dT, Z, and H, dH' in K H and
// K dH'. Still one bf16 plane with bf16 inputs: W, T, diag(gamma) K, P in prep; dH', gamma dO,
// -dΔ in the scan; dQK, X, -γdV, and H, dH' in dO H^T, Δh dH'^T, -γdV H^T in the final kernel
// (a float64 emulation of every rounding point, bench/gdn_precision.py, ranks these below the
// ones above for dg and dbeta; the final kernel has no shared memory left for more planes at
// Dk >= 128, and the scan, the sequential part, keeps one plane).
// Workspace (gdn_chunk_bwd_workspace_bytes) holds, per chunk: Hs, dH' (fp32 Dk x Dv), dΔ (fp32
// C x Dv), P|AK (fp32 C x C), Linv (2 planes C x C), W (NP planes C x Dk), KHg (2 planes C x
// Dv); on the recompute path only Hs, dH', P (one bf16 plane C x C), Linv and W. Hs covers every
// chunk; the rest one segment's (seg_chunks: prep, scan and final once per segment, last first,
// the state gradient between them in a (B,H,Dk,Dv) carry), so fewer chunks a segment, less
// memory and more launches.
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
#include "gdn_chunk_common.cuh"
#include "gdn_chunk_prep.cuh"
#include "gdn_chunk_scan.cuh"
#include "gdn_chunk_final.cuh"

namespace {

// ---- launchers ---------------------------------------------------------------------------------
template <class K>
void set_smem(K kern, int bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// gdn_bwd_prep_rc_kernel on the recompute path (bf16, Dk <= 128), gdn_bwd_prep_kernel off it
template <int DK, int NP>
void gdn_bwd_prep_launch(const bwd_args &a) {
    const dim3 grid(a.NS, a.p.fwd.H, a.p.fwd.B);
    if constexpr (recompute_path(DK, NP)) {
        using L2 = prep_rc_layout<DK, NP>;
        static bool attr2_done = false;
        if (!attr2_done) {  // the most shared memory per SM (4 CTAs of 55 KB at Dk 128)
            set_smem(gdn_bwd_prep_rc_kernel<DK, NP>, L2::BYTES);
            CUDA_CHECK(cudaFuncSetAttribute(gdn_bwd_prep_rc_kernel<DK, NP>,
                                            cudaFuncAttributePreferredSharedMemoryCarveout,
                                            (int)cudaSharedmemCarveoutMaxShared));
            int per_sm = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &per_sm, gdn_bwd_prep_rc_kernel<DK, NP>, 128, L2::BYTES));
            if (DK == 128 && per_sm < 4)
                fprintf(stderr, "gdn_chunk_bwd: gdn_bwd_prep_rc_kernel runs %d CTAs per SM, not 4 "
                                "(registers or shared memory): slower than planned\n", per_sm);
            attr2_done = true;
        }
        gdn_bwd_prep_rc_kernel<DK, NP><<<grid, 128, L2::BYTES, a.p.fwd.stream>>>(a);
    } else {
        using L = prep_layout<DK, NP>;
        static bool attr_done = false;  // one attribute call per instance
        if (!attr_done) {
            set_smem(gdn_bwd_prep_kernel<DK, NP>, L::BYTES);
            attr_done = true;
        }
        gdn_bwd_prep_kernel<DK, NP><<<grid, 128, L::BYTES, a.p.fwd.stream>>>(a);
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
void gdn_bwd_scan_launch_stages(const bwd_args &a, dim3 grid) {
    gdn_bwd_scan_attr<DK, DVB, NP, SMAX, PIPE>();
    gdn_bwd_scan_kernel<DK, DVB, NP, SMAX, PIPE>
        <<<grid, 128, scan_layout<DK, DVB, NP, SMAX>::BYTES, a.p.fwd.stream>>>(a);
    CUDA_CHECK_LAUNCH();
}
// The pipelined one-stage scan (gdn_bwd_scan_kernel PIPE) runs where the inputs are bf16 and
// the one-stage kernel without SD (fp32 dΔ_loc rows) stages its sets by cp.async (PF), a
// criterion on the SD = false layout that holds on the recompute path too (where SD's sets are
// always staged); elsewhere the one-stage scan is the unpipelined one
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
    const dim3 grid(a.p.fwd.Dv / DVB, a.p.fwd.H, a.p.fwd.B);
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
        gdn_bwd_scan_launch_stages<DK, DVB, NP, 1, pipe>(a, grid);
    else
        gdn_bwd_scan_launch_stages<DK, DVB, NP, 2>(a, grid);
}
template <int DK, int NP, bool WGMMA>
void gdn_bwd_final_launch_path(const bwd_args &a) {
    using L = final_layout<DK, NP, WGMMA>;
    static bool attr_done = false;
    if (!attr_done) {
        set_smem(gdn_bwd_final_kernel<DK, NP, WGMMA>, L::BYTES);
        attr_done = true;
    }
    const dim3 grid(a.NS, a.p.fwd.H, a.p.fwd.B);
    gdn_bwd_final_kernel<DK, NP, WGMMA><<<grid, 256, L::BYTES, a.p.fwd.stream>>>(a);
    CUDA_CHECK_LAUNCH();
}
// Whether the wgmma final kernel runs for bf16 with Dk = 128 and delta on: not with
// final_mma_sync (tests: the mma.sync kernel, the portable path, on Hopper), nor on a device
// without an sm_90a image (cuda_check.h, cuda_sm90a_image_runs: a build without the sm_90a image
// would run the compute_80 PTX, JIT-compiled to the trap). bench/gdn_bwd.md has the two kernels'
// times. Dk 64 (its 32 key columns per warpgroup would need m64n32), Dk 256, fp32 and delta off
// (no -γdV) always take the mma.sync kernel.
bool final_wgmma() {
    static int image = -1;  // concurrent first calls store the same value
    return cuda_sm90a_image_runs(gdn_bwd_final_kernel<128, 1, true>, &image);
}
template <int DK, int NP>
void gdn_bwd_final_launch(const bwd_args &a) {
    if constexpr (DK == 128 && NP == 1) {
        if (a.p.fwd.mode.delta && !a.p.final_mma_sync && final_wgmma()) {
            gdn_bwd_final_launch_path<DK, NP, true>(a);
            return;
        }
    }
    gdn_bwd_final_launch_path<DK, NP, false>(a);
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

// The forward's parameters for the chunk-start states: into hs, no o (the states-only forward),
// replayed when the forward kept G and Δ~ (keep_g, keep_dt), else recomputed; the workspace is
// set by the caller
gdn_fwd_params states_fwd_params(const gdn_bwd_params *p, float *hs) {
    gdn_fwd_params f = p->fwd;
    f.o = NULL;
    f.ht = NULL;
    f.h_states = hs;
    f.workspace = NULL;
    f.dv_block = 0;
    f.p_from_prep = 0;
    f.keep_ready = f.keep_g && f.keep_dt;
    if (!f.keep_ready) {  // nothing to replay from: recompute, writing none of the caller's buffers
        f.keep_g = NULL;
        f.keep_dt = NULL;
    }
    return f;
}
bool gdn_bwd_rc(const gdn_bwd_params *p) {  // the kernels' recompute_path
    return recompute_path(p->fwd.Dk, p->fwd.dtype == GDN_DTYPE_FP32 ? 2 : 1);
}
size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }
// Chunks per segment (gdn_bwd_params.seg_chunks; 0 = the whole sequence in one). Each segment
// is one prep, scan and final launch on its chunks, so the per-chunk workspace holds one
// segment: less memory for more launches, each boundary costing about one final kernel's drain
// and one scan's fill (bench/gdn_bwd.md). Every choice gives the same bits.
int seg_chunks(const gdn_bwd_params *p, int NC) {
    if (NC < 1) return 1;
    return p->seg_chunks > 0 && p->seg_chunks < NC ? p->seg_chunks : NC;
}
// Workspace carving: one table, walked by the size query and by the entry alike. The states
// (Hs) cover every chunk; the per-chunk region from off_dhs covers one segment of seg chunks,
// then the carry (the state gradient between segments) when there is more than one. The
// states-only forward (recompute or replay) borrows the region from off_dhs before prep fills
// it: total is at least off_dhs + its workspace.
struct ws_plan {
    size_t off_hs, off_dhs, off_dd, off_pa, off_lv, off_wp, off_kp, off_carry, total;
    int seg;  // chunks per segment
};
ws_plan gdn_bwd_plan(const gdn_bwd_params *p) {
    const int NCi = (p->fwd.T + GDN_CHUNK - 1) / GDN_CHUNK;
    const size_t NC = (size_t)NCi, bh = (size_t)p->fwd.B * p->fwd.H, C2 = (size_t)GDN_CHUNK;
    const size_t NP = p->fwd.dtype == GDN_DTYPE_FP32 ? 2 : 1;
    const size_t Dk = p->fwd.Dk, Dv = p->fwd.Dv;
    const bool rc = gdn_bwd_rc(p);
    ws_plan w;
    w.seg = seg_chunks(p, NCi);
    const size_t nch = bh * (size_t)w.seg;  // the segment's chunk tiles
    size_t o = 0;
    w.off_hs = o;
    if (!p->fwd.h_states) o += align256(bh * NC * Dk * Dv * 4);
    w.off_dhs = o;
    o += align256(nch * Dk * Dv * 4);
    w.off_dd = o;
    if (!rc) o += align256(nch * C2 * Dv * 4);
    w.off_pa = o;  // (recompute path: prep_rc's bf16 P plane for the scan)
    o += rc ? align256(nch * C2 * C2 * 2) : align256(nch * C2 * C2 * 4);
    w.off_lv = w.off_wp = w.off_kp = o;
    if (p->fwd.mode.delta) {  // Linv and KHg: hi + lo bf16 planes whatever the dtype; W: NP planes
        w.off_lv = o;
        o += align256(nch * 2 * C2 * C2 * 2);
        w.off_wp = o;
        o += align256(nch * NP * C2 * Dk * 2);
        w.off_kp = o;
        if (!rc) o += align256(nch * 2 * C2 * Dv * 2);
    }
    w.off_carry = o;
    if ((size_t)w.seg < NC) o += align256(bh * Dk * Dv * 4);
    if (!p->fwd.h_states) {
        const gdn_fwd_params f = states_fwd_params(p, NULL);
        const size_t fws = align256(gdn_chunk_fwd_workspace_bytes(&f));
        if (w.off_dhs + fws > o) o = w.off_dhs + fws;
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

// With documents (fwd.docs->any): the backward runs on the plan's padded chunk grid (T -> Tp)
// with its reset flags, each chunk's tokens read and its gradients written where they are
// (chunk_tok, chunk_len: no copies)
gdn_bwd_params gdn_bwd_padded(const gdn_bwd_params *p) {
    gdn_bwd_params f = *p;
    const gdn_docs *d = p->fwd.docs;
    f.fwd.T = d->Tp;
    f.fwd.docs = NULL;
    f.fwd.chunk_reset = d->reset;
    f.fwd.chunk_tok = d->chunk_tok;
    f.fwd.chunk_len = d->chunk_len;
    return f;
}
bool gdn_bwd_has_docs(const gdn_bwd_params *p) { return p->fwd.docs && p->fwd.docs->any; }

}  // namespace

extern "C" size_t gdn_chunk_bwd_workspace_bytes(const gdn_bwd_params *p) {
    if (!p) gdn_die("gdn_chunk_bwd_workspace_bytes: params is NULL");
    if (gdn_bwd_has_docs(p)) {
        const gdn_bwd_params f = gdn_bwd_padded(p);
        return gdn_bwd_plan(&f).total;
    }
    return gdn_bwd_plan(p).total;
}

extern "C" int gdn_chunk_bwd_seg_chunks(const gdn_bwd_params *p) {
    if (!p) gdn_die("gdn_chunk_bwd_seg_chunks: params is NULL");
    const gdn_bwd_params f = gdn_bwd_has_docs(p) ? gdn_bwd_padded(p) : *p;
    return gdn_bwd_plan(&f).seg;
}

extern "C" int gdn_chunk_bwd_dv_block(const gdn_bwd_params *p) {
    if (p->dv_block) return p->dv_block;
    if (p->fwd.dtype == GDN_DTYPE_FP32) return 16;
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // the largest block (least repeated chunk-local loads) that still fills every SM
    for (int d = p->fwd.Dk <= 128 ? 64 : 32; d >= 16; d /= 2)
        if ((long)p->fwd.B * p->fwd.H * (p->fwd.Dv / d) >= sms) return d;
    return 16;
}

// the backward on p's chunk grid (no document plan; fwd.chunk_reset, chunk_tok, chunk_len as
// given)
static void gdn_chunk_bwd_rows(const gdn_bwd_params *p) {
    if (p->fwd.B < 1 || p->fwd.H < 1 || p->fwd.T < 0)
        gdn_die("gdn_chunk_bwd: bad shape B %d T %d H %d (B, H >= 1, T >= 0)", p->fwd.B, p->fwd.T,
                p->fwd.H);
    if (p->fwd.Dk != 64 && p->fwd.Dk != 128 && p->fwd.Dk != 256)
        gdn_die("gdn_chunk_bwd: Dk %d not supported\nHINT: kernels are built for Dk = 64, 128, 256",
                p->fwd.Dk);
    if (p->fwd.Dv != p->fwd.Dk && p->fwd.Dv != 2 * p->fwd.Dk)
        gdn_die("gdn_chunk_bwd: Dv %d not supported with Dk %d\nHINT: Dv = Dk or 2 Dk (expand_v 1 "
                "or 2)", p->fwd.Dv, p->fwd.Dk);
    if (p->fwd.dtype != GDN_DTYPE_BF16 && p->fwd.dtype != GDN_DTYPE_FP32)
        gdn_die("gdn_chunk_bwd: unknown dtype %d", (int)p->fwd.dtype);
    const bool f32 = p->fwd.dtype == GDN_DTYPE_FP32;
    const int dvb = gdn_chunk_bwd_dv_block(p);
    if (f32 && dvb != 16)
        gdn_die("gdn_chunk_bwd: dv_block %d with fp32 inputs\nHINT: fp32 runs with dv_block 16",
                dvb);
    if (p->scan_stages < 0 || p->scan_stages > 2)
        gdn_die("gdn_chunk_bwd: scan_stages %d\nHINT: 0 (choose), 1 or 2", p->scan_stages);
    if (dvb != 16 && dvb != 32 && !(dvb == 64 && p->fwd.Dk <= 128))
        gdn_die("gdn_chunk_bwd: dv_block %d not supported with Dk %d\nHINT: 16, 32, or 64 when "
                "Dk <= 128", dvb, p->fwd.Dk);
    if (p->seg_chunks < 0)
        gdn_die("gdn_chunk_bwd: seg_chunks %d\nHINT: 0 (one segment, the whole sequence) or the "
                "chunks per segment (>= 1)",
                p->seg_chunks);
    const ws_plan w = gdn_bwd_plan(p);
    if (p->fwd.T == 0) {  // no tokens: dh0 = dht
        if (p->dh0) {
            const size_t bytes = (size_t)p->fwd.B * p->fwd.H * p->fwd.Dk * p->fwd.Dv * 4;
            if (p->dht)
                CUDA_CHECK(cudaMemcpyAsync(p->dh0, p->dht, bytes, cudaMemcpyDeviceToDevice,
                                           p->fwd.stream));
            else
                CUDA_CHECK(cudaMemsetAsync(p->dh0, 0, bytes, p->fwd.stream));
        }
        return;
    }
    gdn_bwd_check_ptr(p->fwd.q, 16, "q");
    gdn_bwd_check_ptr(p->fwd.k, 16, "k");
    gdn_bwd_check_ptr(p->fwd.v, 16, "v");
    gdn_bwd_check_ptr(p->dO, 16, "dO");
    gdn_bwd_check_ptr(p->dq, 16, "dq");
    gdn_bwd_check_ptr(p->dk, 16, "dk");
    gdn_bwd_check_ptr(p->dv, 16, "dv");
    if (p->fwd.mode.gate) gdn_bwd_check_ptr(p->fwd.g, 4, "g (gate on)");
    if (p->fwd.mode.delta) gdn_bwd_check_ptr(p->fwd.beta, 4, "beta (delta on)");
    if (p->fwd.h0) gdn_bwd_check_ptr(p->fwd.h0, 4, "h0");
    if (p->dht) gdn_bwd_check_ptr(p->dht, 8, "dht");
    if (p->dh0) gdn_bwd_check_ptr(p->dh0, 8, "dh0");
    if (p->fwd.h_states) gdn_bwd_check_ptr(p->fwd.h_states, 16, "h_states");
    if (!p->fwd.chunk_tok != !p->fwd.chunk_len)
        gdn_die("gdn_chunk_bwd: fwd.chunk_tok %p with fwd.chunk_len %p\nHINT: both or neither (the "
                "document plan's tables)", (const void *)p->fwd.chunk_tok,
                (const void *)p->fwd.chunk_len);
    if (!p->fwd.h_states) {
        if (p->fwd.keep_g) gdn_bwd_check_ptr(p->fwd.keep_g, 16, "fwd.keep_g");
        if (p->fwd.keep_dt) gdn_bwd_check_ptr(p->fwd.keep_dt, 16, "fwd.keep_dt");
    }
    gdn_bwd_check_ptr(p->workspace, 256, "workspace");
    if (p->workspace_bytes < w.total)
        gdn_die("gdn_chunk_bwd: workspace of %zu bytes, %zu needed\nHINT: size it with "
                "gdn_chunk_bwd_workspace_bytes()", p->workspace_bytes, w.total);

    bwd_args a;
    a.p = *p;
    a.NC = (p->fwd.T + GDN_CHUNK - 1) / GDN_CHUNK;
    unsigned char *ws = (unsigned char *)p->workspace;
    a.dHs = (float *)(ws + w.off_dhs);
    const bool rc = gdn_bwd_rc(p);
    a.dD = rc ? NULL : (float *)(ws + w.off_dd);
    a.PA = rc ? NULL : (float *)(ws + w.off_pa);
    a.Lv = (bf16 *)(ws + w.off_lv);
    a.Wp = (bf16 *)(ws + w.off_wp);
    a.Kp = rc ? NULL : (bf16 *)(ws + w.off_kp);
    a.Pp = rc ? (bf16 *)(ws + w.off_pa) : NULL;  // prep_rc's P, for the scan's dΔ_loc = P^T dO
    if (p->fwd.h_states) {
        a.Hs = p->fwd.h_states;
    } else {  // the chunk-start states: replayed, or recomputed by a second forward scan
        float *hs = (float *)(ws + w.off_hs);
        a.Hs = hs;
        gdn_fwd_params f = states_fwd_params(p, hs);
        // The forward's prep path (T, G once per chunk-head, then the scan) needs a workspace;
        // without one it runs fused, redoing them in every value-block CTA (3.1 vs 1.4 ms at B1
        // T32768 H16, bench/gdn_fwd.md). It borrows the region the backward fills only later
        // (from off_dhs; gdn_bwd_plan sized it to fit).
        if (gdn_chunk_fwd_workspace_bytes(&f) > 0) f.workspace = ws + w.off_dhs;
        gdn_chunk_fwd(&f);
    }
    // The segments, last first: each one's scan starts from the gradient the one after it left
    // (the carry; the caller's dht for the last) and leaves its own for the one before (the
    // caller's dh0 for the first)
    float *carry = (float *)(ws + w.off_carry);
    const int nseg = (a.NC + w.seg - 1) / w.seg;
    for (int s = nseg - 1; s >= 0; --s) {
        a.c0 = s * w.seg;
        a.NS = a.NC - a.c0 < w.seg ? a.NC - a.c0 : w.seg;
        a.p.dht = s == nseg - 1 ? p->dht : carry;
        a.p.dh0 = s == 0 ? p->dh0 : carry;
        if (f32) {
            switch (p->fwd.Dk) {
            case 64: gdn_bwd_run<64, 2>(a, dvb); break;
            case 128: gdn_bwd_run<128, 2>(a, dvb); break;
            default: gdn_bwd_run<256, 2>(a, dvb); break;
            }
        } else {
            switch (p->fwd.Dk) {
            case 64: gdn_bwd_run<64, 1>(a, dvb); break;
            case 128: gdn_bwd_run<128, 1>(a, dvb); break;
            default: gdn_bwd_run<256, 1>(a, dvb); break;
            }
        }
    }
}

// With documents: the backward on the plan's chunk grid (its chunk-start states saved,
// replayed or recomputed on that grid), q, k, v, g, beta, dO read and dq, dk, dv, dg, dbeta
// written in the rows' own layout (gdn_cuda.h, gdn_docs)
static void gdn_chunk_bwd_docs(const gdn_bwd_params *p) {
    const gdn_docs *d = p->fwd.docs;
    const gdn_fwd_params &f = p->fwd;
    if (d->B != f.B || d->T != f.T)
        gdn_die("gdn_chunk_bwd: document plan for B %d T %d, params B %d T %d\nHINT: make the plan "
                "(gdn_docs_init) for this batch's shape", d->B, d->T, f.B, f.T);
    if (f.chunk_reset || f.chunk_tok || f.chunk_len)
        gdn_die("gdn_chunk_bwd: fwd.chunk_reset, chunk_tok or chunk_len with a document plan\n"
                "HINT: the plan sets its own");
    const gdn_bwd_params in = gdn_bwd_padded(p);
    gdn_chunk_bwd_rows(&in);
}

extern "C" void gdn_chunk_bwd(const gdn_bwd_params *p) {
    if (!p) gdn_die("gdn_chunk_bwd: params is NULL");
    if (gdn_bwd_has_docs(p)) {
        gdn_chunk_bwd_docs(p);
        return;
    }
    gdn_chunk_bwd_rows(p);
}
