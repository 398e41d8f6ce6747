// gdn_cuda.h — CUDA chunkwise forward of the gated delta rule (DESIGN 3.1). The state
// recurrence runs in one kernel: per (batch, head, block of value columns) one CTA walks the
// chunks of C = 64 tokens in order, keeping its columns of the state on chip (fp32 registers +
// a bf16 copy in shared memory). What does not depend on the state (T = (I+A)^{-1} diag(beta)
// from the unit lower-triangular solve in fp32, and P = QK^T ⊙ Gam) is either computed first by
// a prep kernel parallel over all chunks into `workspace` (bf16 path, when a workspace is
// given), or recomputed inside each CTA (no workspace, and the fp32 path). Gate cumsum in log2
// space inside the kernels. Tensor cores: mma.sync m16n8k16 bf16 -> fp32 (sm_80 and sm_90a).
// fp32 inputs run the fused kernel with every matrix operand split into bf16 hi + lo planes
// (3 products per mma), accurate to ~1e-5.
//
// Columns of the state are independent (Δ's and O's columns depend only on the same columns of
// H and V), so the value dimension is split across CTAs: that is where the parallel work comes
// from when B*H is small (a long single sequence); with the prep kernel the chunk-local work is
// not repeated per column block.
//
// The backward's parameters (gdn_bwd_cuda.h, gdn_bwd_params) extend these: its .fwd holds the
// forward's shapes, inputs and what the forward saved or kept for it.
//
// Layout as the CPU twins (fwd_cpu.h, gdn_cpu_params): q, k (B,T,H,Dk); v, o (B,T,H,Dv),
// element (b,t,h,e) at ((b*T + t)*H + h)*D + e; g, beta (B,T,H) fp32, g = log alpha (natural
// log, <= 0); states h0, ht (B,H,Dk,Dv) fp32, H = S^T (rows = key dims).
#pragma once
#include <stddef.h>
#include <cuda_runtime.h>
#include "fwd_cpu.h"  // gdn_mode

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GDN_DTYPE_BF16 = 0, GDN_DTYPE_FP32 = 1 } gdn_dtype;

#define GDN_CHUNK 64  // C: tokens per chunk

typedef struct {
    int B, T, H, Dk, Dv;     // Dk in {64, 128, 256}, Dv in {Dk, 2 Dk}, T >= 0
    gdn_mode mode;           // gate false: g ignored (may be NULL); delta false: beta ignored;
                             // neg_eigval: beta in (0, 2) (no change in the kernel)
    gdn_dtype dtype;         // of q, k, v, o
    const void *q, *k;       // (B,T,H,Dk)
    const void *v;           // (B,T,H,Dv)
    const float *g, *beta;   // (B,T,H)
    const float *h0;         // (B,H,Dk,Dv) initial state, NULL = zero
    void *o;                 // (B,T,H,Dv) written; NULL = not wanted (only with h_states:
                             // the states-only forward, no Q, P or O work, same state bits)
    float *ht;               // (B,H,Dk,Dv) final state, NULL = not wanted
    float *h_states;         // (B,H,NC,Dk,Dv) chunk-start states (NC = ceil(T/64)), NULL = not
                             // wanted; the backward reads them with gdn.bwd_states = saved
                             // (gdn_bwd_params.fwd.h_states)
    void *workspace;         // gdn_chunk_fwd_workspace_bytes(p) bytes of device memory (16-byte
                             // aligned) for T and P of every chunk, or NULL: then the fused
                             // kernel recomputes them in every CTA (slower)
    int dv_block;            // value columns per CTA: 0 = choose (gdn_chunk_fwd_dv_block), else
                             // 16, 32, 64 (64 only for Dk <= 128), or 128 (two warp groups of 64
                             // sharing Q, K, T, P; bf16 with workspace, Dk <= 128); fp32: 16
    int p_from_prep;         // with a workspace, P from the prep kernel: 0 or 1 = yes (default),
                             // 2 = no (computed per CTA); for benchmarks and tests
    cudaStream_t stream;
    // What the backward's replay of the states reads (gdn.bwd_states = replay; the bf16 prep
    // path only: with a workspace, else ignored), NULL = not kept: the prep kernel writes each
    // chunk's gate cumsums G (keep_g: (B,H,NC,C) fp32) there instead of the workspace, and the
    // scan writes each chunk's Δ~ = diag(gamma_C / gamma) Δ rows as its state update reads them
    // (keep_dt: (B,T,H,Dv) bf16); 16-byte aligned, sizes from gdn_chunk_fwd_keep_bytes. Read by
    // the backward's replay (gdn_bwd_params.fwd.keep_g, keep_dt).
    float *keep_g;
    void *keep_dt;
    int keep_ready;          // 1: keep_g and keep_dt already hold an earlier call's on the same k,
                             // v, g, beta, shape and mode, and o is NULL with h_states or ht set:
                             // the states are replayed, S = gamma_C S + Δ~^T K a chunk (the
                             // scan's own update on the same operands: the same bits; no
                             // workspace, no prep kernel)
} gdn_fwd_params;

// Public entry: checks shapes, dtype, pointers (16-byte aligned q, k, v, o; o NULL only with
// h_states), then launches.
void gdn_chunk_fwd(const gdn_fwd_params *p);
// The value-column block the launcher uses for p (p->dv_block when set).
int gdn_chunk_fwd_dv_block(const gdn_fwd_params *p);
// Bytes of workspace that make the prep-kernel path available (0 for fp32: not used there).
size_t gdn_chunk_fwd_workspace_bytes(const gdn_fwd_params *p);
// Bytes of gdn_fwd_params.keep_g and keep_dt (*g, *dt) for p's shape, their sum returned (0 for
// fp32: not used).
size_t gdn_chunk_fwd_keep_bytes(const gdn_fwd_params *p, size_t *g, size_t *dt);

#ifdef __cplusplus
}
#endif
