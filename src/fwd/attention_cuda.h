// attention_cuda.h — CUDA causal sliding-window softmax attention (DESIGN 2.2), forward and
// backward, flash-attention scheme: q/k/v tiles in shared memory, online softmax, bf16 tensor
// cores (mma.sync m16n8k16, fp32 accumulate; sm_80 and sm_90a), only the log-sum-exp saved per
// row, the backward recomputes the scores. Key/query blocks outside the window are never
// visited, so the cost is O(T * window), not O(T^2). On a Hopper device (compute capability 9.x,
// binary with the sm_90a image) the bf16 forward and backward run on wgmma.mma_async kernels fed
// by a TMA producer warpgroup; attn_params.kernels = ATTN_KERNELS_MMA_SYNC keeps the portable
// mma.sync kernels there too.
//
//   s_ij = scale q_i.k_j  for  i - window < j <= i   (window >= T: full causal)
//                         and  j >= s_i with document starts (doc_start; s_i = 0 without)
//   lse_i = log sum_j exp(s_ij),  o_i = sum_j exp(s_ij - lse_i) v_j
//
// Layout as the CPU twins (fwd_cpu.h: attention_fwd_cpu, bwd_cpu.h: attention_bwd_cpu):
// q, k, v, o, dO, dq, dk, dv are (B,T,H,D) token-major, element (b,t,h,e) at
// ((b*T + t)*H + h)*D + e; lse is (B,H,T) fp32. RoPE is applied to q and k before the call.
// dtype: bf16 (tensor cores) or fp32 (plain fp32 FMA path, slower, for checks and fp32 runs).
// The backward is deterministic by default (no atomics): dk/dv by one CTA per key block looping
// over the query blocks that see it, dq by a second pass over key blocks. Opt-in
// (nondeterministic = 1, bf16 only): one pass, dq accumulated with fp32 atomics (fewer matrix
// products, dq not bitwise reproducible). All gradients are "=".
// Code shared by the forward's and backward's kernels: src/cuda/attention.cuh. Launch counters
// and the device's default kernel family, for tests: attention_testing.h.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ATTN_DTYPE_BF16 = 0, ATTN_DTYPE_FP32 = 1 } attn_dtype;

// Which bf16 kernels run (fp32 has one path). AUTO (0, the zero-initialised default): the wgmma
// kernels on a compute capability 9.x device when the binary carries the sm_90a image (a pass
// whose wgmma kernel cannot run, stderr says why, runs its mma.sync kernel), else the mma.sync
// kernels. MMA_SYNC: the portable mma.sync (sm_80) kernels on every device, so that tests cover
// them on Hopper too; the same maths and tolerances, not the same bits as wgmma.
typedef enum { ATTN_KERNELS_AUTO = 0, ATTN_KERNELS_MMA_SYNC = 1 } attn_kernels;

typedef struct {
    int B, T, H, D;          // D in {64, 128}
    int window;              // >= 1; query i sees keys i - window < j <= i (>= T: full causal)
    float scale;             // usually 1/sqrt(D)
    attn_dtype dtype;        // of q, k, v, o, dO, dq, dk, dv
    const void *q, *k, *v;   // (B,T,H,D)
    void *o;                 // (B,T,H,D)  written by attention_fwd
    float *lse;              // (B,H,T) natural log; written by the forward, read by the
                             // backward to recompute p = exp(s - lse) without a max/sum pass
    const void *dO;          // (B,T,H,D)  backward only
    void *dq, *dk, *dv;      // (B,T,H,D)  backward only, overwritten (=)
    int nondeterministic;    // backward only. 0 (default; zero-initialised params get it): two
                             // passes, dq, dk, dv bitwise reproducible run to run. 1, bf16: one
                             // pass, the dK/dV pass also adds dS K into an fp32 dq accumulator
                             // in the workspace with atomics (flash-attention 2: 5 matrix products
                             // per tile instead of 7); the order of the additions varies, so dq
                             // is not bitwise reproducible (dk, dv still are). 1, fp32: ignored
                             // (the fp32 path has only the deterministic passes).
    attn_kernels kernels;    // bf16: AUTO (default) or the mma.sync kernels (above)
    void *workspace;         // attention_workspace_bytes(p) bytes, backward only
    const int32_t *doc_start;  // NULL (zero-initialised: no document resets), or device int32
                             // (B*T): query t of row b sees only keys j >= doc_start[b*T + t],
                             // the start of its document (non-decreasing along a row, <= t;
                             // SPEC "Document resets"). Forward and backward take the same.
                             // Key blocks before every query's start are skipped; all-0 starts
                             // give the bits of NULL.
    cudaStream_t stream;
} attn_params;

// Bytes of device workspace the backward needs: D_i = dO_i . o_i, fp32 (B,H,T); with
// nondeterministic = 1 and bf16 also the dq accumulator, fp32 (B,T,H,D). Reads B, T, H, D,
// dtype, nondeterministic.
size_t attention_workspace_bytes(const attn_params *p);
// Public entries: check shapes, dtype, pointers and alignment (16 bytes), then launch.
void attention_fwd(const attn_params *p);  // reads q, k, v; writes o, lse
void attention_bwd(const attn_params *p);  // reads q, k, v, o, lse, dO; writes dq, dk, dv
#ifdef __cplusplus
}
#endif
