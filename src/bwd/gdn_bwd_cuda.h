// gdn_bwd_cuda.h — CUDA backward of the chunkwise gated delta rule (DESIGN 3.2). Given q, k, v,
// g, beta, the optional initial state, dO and the optional gradient of the final state, it
// writes dq, dk, dv, dg, dbeta and the initial-state gradient (all "=", bwd_cpu.h's rule).
// Its chunk-start states come from the forward (gdn.bwd_states, in fwd): saved (fwd.h_states),
// replayed from what the forward kept (fwd.keep_g, fwd.keep_dt: S = gamma_C S + Δ~^T K a chunk)
// or, with neither, recomputed by a second forward scan (gdn_chunk_fwd with h_states into the
// workspace and o = NULL: states only); all three give the same bits. Then, on the stream, in
// order (src/bwd/gdn_chunk.cu says the maths):
//   prep   per chunk      T = (I+A)^{-1} diag(beta) (fp32 solve), W, KHg = diag(gamma) K H,
//                         dΔ_loc = P^T dO, P and Gam ⊙ K K^T            -> workspace
//   scan   per (b, h, value block), chunks in reverse, dH on chip:
//                         dΔ = dΔ_loc + diag(gamma_C/gamma) K dH',
//                         dH = gamma_C dH' + (diag(gamma) Q)^T dO - W^T dΔ  -> dΔ, dH' per chunk
//   final  per chunk      Δ = T (V - KHg), dV = T^T dΔ, dq, dk, dbeta, dg (cancellation-free)
// With bf16 inputs and Dk <= 128 the final kernel forms P, Gam ⊙ K K^T, KHg and dΔ itself
// (prep stores only Linv, W and P's bf16 plane, the scan no dΔ): a smaller workspace.
// Deterministic: no atomics; every sum has a fixed order, so equal inputs give equal bits.
//
// Layout as gdn_fwd_params (gdn_cuda.h): q, k, dq, dk (B,T,H,Dk); v, dO, dv (B,T,H,Dv) in
// dtype; g, beta, dg, dbeta (B,T,H) fp32; h0, dht, dh0 (B,H,Dk,Dv) fp32; h_states
// (B,H,NC,Dk,Dv) fp32, NC = ceil(T/64).
#pragma once
#include <stddef.h>
#include <cuda_runtime.h>
#include "../fwd/gdn_cuda.h"  // gdn_dtype, gdn_mode, GDN_CHUNK

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    gdn_fwd_params fwd;       // the forward's: B, T, H, Dk, Dv (Dk in {64, 128, 256}, Dv in {Dk,
                              // 2 Dk}), mode (gate false: g ignored, dg not written; delta false:
                              // beta ignored, dbeta not written), dtype (also of dO, dq, dk, dv),
                              // q, k, v, g, beta, h0 (NULL = zero), stream, and what it saved or
                              // kept for the backward: h_states (saved chunk-start states) or
                              // keep_g and keep_dt (the replay's; their keep_ready is implied),
                              // NULL = recompute the states into the workspace; docs (the same
                              // plan the forward ran with: h_states, keep_g, keep_dt are then on
                              // its padded chunk grid; the token tensors, dO and the gradients
                              // included, keep their (B,T) rows; gdn_cuda.h, gdn_docs) or
                              // chunk_reset (with chunk_tok, chunk_len). Not read: o, ht,
                              // workspace, dv_block, p_from_prep, keep_ready.
    const void *dO;           // (B,T,H,Dv) gradient of o
    const float *dht;         // (B,H,Dk,Dv) gradient of the final state, NULL = zero
    void *dq, *dk, *dv;       // written (=), same layout and dtype as q, k, v
    float *dg, *dbeta;        // (B,T,H) written (=); NULL = not wanted
    float *dh0;               // (B,H,Dk,Dv) written (=); NULL = not wanted
    void *workspace;          // device scratch, 256-byte aligned,
    size_t workspace_bytes;   //   >= gdn_chunk_bwd_workspace_bytes(this)
    int dv_block;             // value columns per scan CTA: 0 = choose, else 16, 32 or 64
                              // (bf16; 64 only for Dk <= 128) or 16 (fp32)
    int scan_stages;          // chunks in flight per scan CTA: 0 = choose (1 when the grid has
                              // more CTAs than SMs and two fit per SM, else 2), 1 or 2 = force
                              // (tests: both give bitwise the same gradients)
    bool final_mma_sync;      // true: the mma.sync final kernel also where the wgmma one would
                              // run (bf16, Dk 128, delta on, sm_90a); tests cover the portable
                              // path with it on Hopper
    int seg_chunks;           // chunks per segment: prep, scan and final run once per segment,
                              // last segment first, so the per-chunk workspace (dH', Linv, W,
                              // ...) holds one segment; 0 = one segment (the whole sequence),
                              // else >= 1 (gdn.bwd_segment_chunks). Every value gives the same
                              // bits; each segment boundary costs time (bench/gdn_bwd.md).
} gdn_bwd_params;

// Device scratch the backward needs for p's shapes, dtype, mode and h_states (bytes); with
// fwd.docs that of the plan's padded chunk grid.
size_t gdn_chunk_bwd_workspace_bytes(const gdn_bwd_params *p);
// Public entry: checks shapes, dtype, pointers and the workspace size, then launches (async on
// p->stream; the workspace must stay allocated until the stream has run the backward).
void gdn_chunk_bwd(const gdn_bwd_params *p);
// The value-column block the scan uses for p (p->dv_block when set).
int gdn_chunk_bwd_dv_block(const gdn_bwd_params *p);
// The chunks per segment the backward uses for p (p->seg_chunks when set, at most the chunks
// per sequence).
int gdn_chunk_bwd_seg_chunks(const gdn_bwd_params *p);

#ifdef __cplusplus
}
#endif
