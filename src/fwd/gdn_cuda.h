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
#include <stdint.h>
#include <cuda_runtime.h>
#include "fwd_cpu.h"  // gdn_mode

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GDN_DTYPE_BF16 = 0, GDN_DTYPE_FP32 = 1 } gdn_dtype;

#define GDN_CHUNK 64  // C: tokens per chunk

// Document starts (model.doc_reset; SPEC "Document resets in the model"): the state restarts
// from zero at each document start (h0 applies to a row's first document only, dht to its last).
// Design: split at the boundary. Every document is placed to start on a chunk boundary of a
// padded chunk grid of Tp >= T tokens a row; the pad tokens read as q = k = v = 0, g = 0,
// beta = 0, which leave the state unchanged exactly (their Δ rows are T (V - K H) rows of zeros,
// gamma = 1, and they add nothing to any product of a real token), and each chunk that begins a
// document (other than at token 0) carries a reset flag: the scans zero the state before it
// (forward, replay, recompute) and zero the state gradient flowing back across it (backward). A
// chunk never holds two documents, so the kernels' chunk arithmetic is unchanged: no masks and no
// -inf gates (chosen over masking A, P and the chunk-state terms per document inside a chunk:
// that needs surgery in every kernel of the forward and the backward, this only at the scans'
// chunk steps). The padded rows are never formed: chunk n of row b reads its tokens from the
// rows' own (B,T) layout through the plan's table (chunk_tok, chunk_len: a run of at most 64
// consecutive tokens of one document; rows past it load as zeros and are never stored). Cost:
// fewer than 64 pad tokens of chunk work per document start (the last document of a row is not
// padded), no copies.
// A plan is made once per batch from the host's doc starts and shared by every GDN layer, the
// forward and the backward: gdn_docs_padded_len, gdn_docs_bytes, gdn_docs_init.
typedef struct {
    int B, T;                 // the rows' shape the plan was made for
    int Tp;                   // padded row length (T when any == 0)
    int any;                  // 0: no document starts after token 0 in any row: every op runs
                              // its no-document path; the tables are not set
    const int32_t *chunk_tok; // (B,NCp) device, NCp = ceil(Tp/64): the token row b T + t of the
                              // rows' (B,T) layout that padded chunk n of row b starts at (b T
                              // for a chunk of padding only)
    const uint8_t *chunk_len; // (B,NCp) device: that chunk's tokens, consecutive from chunk_tok
                              // (<= 64; 0 = padding only, at a row's end)
    const uint8_t *reset;     // (B,NCp) device, NCp = ceil(Tp/64): 1 = the state is zero at the
                              // start of that padded chunk (a document starts there, chunk > 0)
} gdn_docs;

// Checks doc_start (host, (B,T): the start s of the document of token t, s = 0 at t = 0, then
// s == t (a new document) or the previous token's s; dies naming b, t otherwise; B T < 2^31) and
// returns the padded row length Tp (T when no document starts after token 0).
int gdn_docs_padded_len(const int32_t *doc_start, int B, int T);
// Device bytes of a plan's tables for B rows of T tokens padded to Tp (gdn_docs_padded_len's).
size_t gdn_docs_bytes(int B, int T, int Tp);
// Fills *d from doc_start (host, (B,T)): tables built on the host, copied into mem (device, 256-byte
// aligned, >= gdn_docs_bytes(B, T, Tp) bytes; unused when any == 0) on stream, which is then
// synchronised (the host staging is freed). mem must outlive every op that uses the plan.
void gdn_docs_init(gdn_docs *d, const int32_t *doc_start, int B, int T, void *mem, size_t bytes,
                   cudaStream_t stream);

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
    // Document starts: NULL (or docs->any == 0) = none, today's path. Else the plan for (B, T);
    // the op runs on the plan's padded chunk grid with its reset flags, each chunk reading and
    // writing its tokens of q, k, v, g, beta, o in place (no copies). h_states, keep_g and keep_dt
    // are then on that grid (T -> docs->Tp: NC = ceil(Tp/64) chunk-start states, keep_dt rows
    // (B,Tp,H,Dv); size them with this p through gdn_chunk_fwd_h_states_bytes,
    // gdn_chunk_fwd_keep_bytes); ht is the last document's end.
    const gdn_docs *docs;
    // The chunk grid as the kernels see it, set by the docs path from the plan (all NULL with
    // docs->any): T is then the grid's length (Tp), NC = ceil(T/64).
    const uint8_t *chunk_reset;  // (B,NC) device: 1 = the state is zero at the start of chunk n
                             // (n > 0; chunk 0 starts from h0), NULL = none (alone: for inputs
                             // already laid out with documents on chunk boundaries)
    const int32_t *chunk_tok;    // (B,NC) device: the token row (of q, k, v, g, beta, o, and the
                             // backward's dO and gradients) where chunk n of row b starts, the
                             // plan's chunk_tok; NULL = b T + 64 n (the rows as they are)
    const uint8_t *chunk_len;    // (B,NC) device: the chunk's tokens (the plan's chunk_len); set
                             // with chunk_tok
} gdn_fwd_params;

// Public entry: checks shapes, dtype, pointers (16-byte aligned q, k, v, o; o NULL only with
// h_states), then launches.
void gdn_chunk_fwd(const gdn_fwd_params *p);
// The value-column block the launcher uses for p (p->dv_block when set).
int gdn_chunk_fwd_dv_block(const gdn_fwd_params *p);
// Bytes of workspace that make the prep-kernel path available (0 for fp32: not used there).
// With docs: of the padded layout.
size_t gdn_chunk_fwd_workspace_bytes(const gdn_fwd_params *p);
// Bytes of gdn_fwd_params.keep_g and keep_dt (*g, *dt) for p's shape, their sum returned (0 for
// fp32: not used). With docs: of the padded layout.
size_t gdn_chunk_fwd_keep_bytes(const gdn_fwd_params *p, size_t *g, size_t *dt);
// Bytes of gdn_fwd_params.h_states: B H NC Dk Dv fp32, NC = ceil(T/64) (with docs: ceil(Tp/64)).
size_t gdn_chunk_fwd_h_states_bytes(const gdn_fwd_params *p);

#ifdef __cplusplus
}
#endif
