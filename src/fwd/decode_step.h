// decode_step.h — the per-token kernels of the GPU decoder (src/model/decode_cuda.cu): one new
// token for each of B sequences, the sequence's past carried in state, as src/model/decode.c does
// on the CPU in float64. The projections, norms, gates, SwiGLU and LM head are the training
// ops of cuda/ops.h and gemm.h on B rows; what is left is here:
//   conv_silu_step  y = silu(sum_{j<K} w[c,j] x_{t-(K-1)+j}), the past K-1 inputs in a ring
//   gdn_step        the recurrent delta rule of one token (decode.c gdn_step)
//   attn_step       RoPE at position t, the K/V ring append, attention over the visible past
// Activations in dt (cuda_dtype), the GDN state and the gates fp32, arithmetic fp32. Every
// position-dependent kernel reads t from device memory (*pos), so a decoder step has no host
// value in it and can be captured once in a CUDA graph and replayed.
#pragma once
#include <stddef.h>
#include <cuda_runtime.h>
#include "../cuda/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// Up to three channel groups in one launch (GDN's q, k, v); C[s] = 0: group s absent.
typedef struct {
    int B, K;                 // sequences, conv width (K >= 2)
    int C[3];                 // channels of each group
    const void *x[3];         // (B, C[s]) this token's inputs, row stride ld[s]
    size_t ld[3];
    const void *w[3];         // (C[s], K) depthwise weights
    void *hist[3];            // (B, K-1, C[s]) the past K-1 inputs, slot = time mod (K-1)
    void *y[3];               // (B, C[s]) outputs, packed
} conv_step_params;
// y = silu(conv) at time t = *pos (inputs before time 0 are zero), then x enters the ring.
void cuda_conv_silu_step(cuda_dtype dt, const conv_step_params *p, const int *pos,
                         cudaStream_t s);

typedef struct {
    int B, H, Dk, Dv;         // Dk <= 256
    gdn_mode mode;            // gate off: alpha = 1; delta off: w = v
    const void *q, *k;        // (B, H, Dk) L2-normed (q x 1/sqrt Dk)
    const void *v;            // (B, H, Dv)
    const float *g, *beta;    // (B, H) log-gate, beta (gdn_gates)
    float *S;                 // (B, H, Dk, Dv) state H = S^T per head, updated in place
    void *o;                  // (B, H, Dv)
} gdn_step_params;
// Per head: u = H^T k, w = beta (v - alpha u) (delta off: w = v), H <- alpha H + k w^T,
// o = H^T q, alpha = exp(g).
void cuda_gdn_step(cuda_dtype dt, const gdn_step_params *p, cudaStream_t s);

typedef struct {
    int B, H, D;              // sequences, heads, head dim (even, <= 256)
    int cap, window;          // ring slots, visible past (t - window < j <= t); cap >= min(window, positions)
    double base, scale;       // RoPE base, score scale
    void *q;                  // (B, H, D) projected query, roped in place
    const void *k, *v;        // (B, H, D) this token's key and value projections
    void *kc, *vc;            // (B, cap, H, D) roped keys and values, slot = time mod cap
    void *o;                  // (B, H, D)
} attn_step_params;
// RoPE of q and k at t = *pos, k and v into slot t mod cap, then o = softmax(scale q K^T) V over
// the times max(0, t - window + 1) .. t.
void cuda_attn_step(cuda_dtype dt, const attn_step_params *p, const int *pos, cudaStream_t s);

// *pos += 1 (one thread): the decoder's position after a step, on the device.
void cuda_pos_advance(int *pos, cudaStream_t s);

#ifdef __cplusplus
}
#endif
