// cuda/ops.h — the CUDA kernels behind the GPU backend (backend_cuda.cu), one launcher per op
// of backend.h. All pointers are device pointers unless named *_host. Element types follow the
// backend's memory classes (backend.h): activations and parameters in `dt` (bf16 for training,
// fp32 for tests), statistics (rstd, rnorm, lse, g, beta), parameter gradients, AdamW state and
// master weights always fp32. Accumulation is fp32 everywhere. Parameter gradients accumulate
// (+=), activation gradients are overwritten (=), as on the CPU (src/bwd/bwd_cpu.h). Every
// reduction is deterministic (fixed order, no float atomics). Op X's kernels live in
// src/fwd/X.cu and src/bwd/X.cu next to their CPU twins X.c (the memory helpers in
// src/cuda/add_convert.cu, AdamW and the sum of squares in src/optim/adamw.cu); each launcher
// checks its launch (CUDA_CHECK_LAUNCH). Test hooks (launch counters): cuda/ops_testing.h.
// The parameter-gradient reductions (rmsnorm, gated norm, conv1d, conv_silu, gates backward)
// share one scratch per device (colsum_scratch, cuda/colsum.cuh), cuda_sumsq_f32 keeps its own;
// both are allocated on first use: call them in stream order on one stream, and once before any
// CUDA-graph capture.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "../fwd/fwd_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CUDA_F32 = 0, CUDA_BF16 = 1 } cuda_dtype;

// ---- memory helpers (dt applies to x/y) -------------------------------------------------------
void cuda_add(cuda_dtype dt, void *y, const void *x, size_t n, cudaStream_t s);      // y += x
void cuda_convert(void *dst, cuda_dtype ddt, const void *src, cuda_dtype sdt, size_t n,
                  cudaStream_t s);                                                     // any -> any
// Deterministic sum of squares of an fp32 array, written to *out_dev (one fp64 value).
void cuda_sumsq_f32(double *out_dev, const float *x, size_t n, cudaStream_t s);

// ---- ops (shapes and maths as in fwd_cpu.h / bwd_cpu.h) ---------------------------------------
// tok: device int32 (N). Embedding backward is deterministic: `order` is a device array of the
// N token positions sorted by token id (stable), `starts` (n_unique + 1) the run boundaries and
// `ids` (n_unique) the token id of each run — built on the host by the backend.
void cuda_embedding_fwd(cuda_dtype dt, void *out, const int32_t *tok, const void *wte, int N,
                        int d, cudaStream_t s);
void cuda_embedding_bwd(cuda_dtype dt, float *dwte, const void *dout, const int32_t *order,
                        const int32_t *starts, const int32_t *ids, int n_unique, int d,
                        cudaStream_t s);
void cuda_rmsnorm_fwd(cuda_dtype dt, void *y, float *rstd, const void *x, const void *w, int N,
                      int d, double eps, cudaStream_t s);
// x_out = x_in + branch (x_out == x_in allowed), then y, rstd = RMSNorm of x_out: in one kernel,
// bitwise a copy and cuda_add, then cuda_rmsnorm_fwd on x_out.
void cuda_add_rmsnorm_fwd(cuda_dtype dt, void *x_out, void *y, float *rstd, const void *x_in,
                          const void *branch, const void *w, int N, int d, double eps,
                          cudaStream_t s);
// acc: dx += the gradient (added in fp32, rounded once), else dx = it; dw += (fp32).
// y: NULL, or (N,d) = cuda_rmsnorm_fwd's y of x from the saved rstd, bitwise (rmsnorm_y,
// cuda/elementwise.cuh; train.recompute = light); NULL runs the kernels without it.
void cuda_rmsnorm_bwd(cuda_dtype dt, void *dx, float *dw, void *y, const void *dy, const void *x,
                      const void *w, const float *rstd, int N, int d, bool acc, cudaStream_t s);
// Document starts (every conv and RoPE op): doc_start NULL, or device int32 (B*T), token t of row
// b in the document that starts at t' = doc_start[b*T + t] (non-decreasing along a row,
// doc_start[b*T + t] <= t; SPEC "Document resets"): the convolutions see zeros before t' (and
// their backward passes no gradient across a start), RoPE's position is t - t'. NULL: no
// resets, today's kernels and bits.
void cuda_conv1d_fwd(cuda_dtype dt, void *y, const void *x, const void *w, int B, int T, int C,
                     int K, const int32_t *doc_start, cudaStream_t s);
void cuda_conv1d_bwd(cuda_dtype dt, void *dx, float *dw, const void *dy, const void *x,
                     const void *w, int B, int T, int C, int K, const int32_t *doc_start,
                     cudaStream_t s);
// y = silu(conv1d(x, w)), pre-activation kept in fp32 registers only; the backward recomputes it
// (src/fwd/conv1d.cu, src/bwd/conv1d.cu). x and dx rows of stride ld >= C (ld = C:
// packed); y and dy packed (B,T,C).
void cuda_conv_silu_fwd(cuda_dtype dt, void *y, const void *x, const void *w, int B, int T,
                        int C, int K, size_t ld, const int32_t *doc_start, cudaStream_t s);
void cuda_conv_silu_bwd(cuda_dtype dt, void *dx, float *dw, const void *dy, const void *x,
                        const void *w, int B, int T, int C, int K, size_t ld,
                        const int32_t *doc_start, cudaStream_t s);
// The same over C0 + C1 + C2 channels of x (rows of stride ld) in one call, the outputs (the
// backward's dy) in three packed buffers of C0, C1, C2 channels; w, dw (C0 + C1 + C2, K).
// Per element the same sums as three calls, so the same bits.
void cuda_conv_silu3_fwd(cuda_dtype dt, void *y0, void *y1, void *y2, const void *x,
                         const void *w, int B, int T, int C0, int C1, int C2, int K, size_t ld,
                         const int32_t *doc_start, cudaStream_t s);
void cuda_conv_silu3_bwd(cuda_dtype dt, void *dx, float *dw, const void *dy0, const void *dy1,
                         const void *dy2, const void *x, const void *w, int B, int T, int C0,
                         int C1, int C2, int K, size_t ld, const int32_t *doc_start,
                         cudaStream_t s);
// cuda_conv_silu3_fwd with y0, y1 L2-normalised per head of nd channels (l2norm_fwd's values:
// y = s silu(conv) rn, rn0 / rn1 (B T, C / nd) saved). In the tiled kernel the norm runs on the
// fp32 values in registers (heads of nd | 128 channels; else the conv, then the norm in place).
void cuda_conv_silu3_l2_fwd(cuda_dtype dt, void *y0, void *y1, void *y2, float *rn0, float *rn1,
                            const void *x, const void *w, int B, int T, int C0, int C1, int C2,
                            int K, size_t ld, int nd, double eps, double s0, double s1,
                            const int32_t *doc_start, cudaStream_t s);
void cuda_silu_fwd(cuda_dtype dt, void *y, const void *x, size_t n, cudaStream_t s);
void cuda_silu_bwd(cuda_dtype dt, void *dx, const void *dy, const void *x, size_t n,
                   cudaStream_t s);
void cuda_l2norm_fwd(cuda_dtype dt, void *y, float *rnorm, const void *x, size_t rows, int D,
                     double eps, double scale, cudaStream_t s);
// y = scale x rnorm (in place allowed: y == x); the backward reads the output y, not x
void cuda_l2norm_bwd(cuda_dtype dt, void *dx, const void *dy, const void *y, const float *rnorm,
                     size_t rows, int D, double scale, cudaStream_t s);
// a, b: activations (dt), token n's row at n ld (ld = H: packed); A_log, dt_bias: parameters
// (dt); g, beta: fp32 (N,H).
void cuda_gdn_gates_fwd(cuda_dtype dt, float *g, float *beta, const void *a, const void *b,
                        const void *A_log, const void *dt_bias, int N, int H, size_t ld,
                        gdn_mode mode, cudaStream_t s);
void cuda_gdn_gates_bwd(cuda_dtype dt, void *da, void *db, float *dA_log, float *ddt_bias,
                        const float *dg, const float *dbeta, const void *a, const void *b,
                        const void *A_log, const void *dt_bias, int N, int H, size_t ld,
                        gdn_mode mode, cudaStream_t s);
// z, dz: row r at (r / zh) zld + (r % zh) D (zh = 1, zld = D: packed)
void cuda_gated_rmsnorm_fwd(cuda_dtype dt, void *y, float *rstd, const void *x, const void *z,
                            const void *w, size_t rows, int D, int zh, size_t zld, double eps,
                            cudaStream_t s);
// y: NULL, or (rows,D) packed = cuda_gated_rmsnorm_fwd's y from the saved rstd, bitwise
// (gated_rmsnorm_y; train.recompute = light)
void cuda_gated_rmsnorm_bwd(cuda_dtype dt, void *dx, void *dz, float *dw, void *y, const void *dy,
                            const void *x, const void *z, const void *w, const float *rstd,
                            size_t rows, int D, int zh, size_t zld, cudaStream_t s);
// gate, up (and dgate, dup): (rows, cols) with row stride ld >= cols (cols: packed; 2 cols: the
// halves of the MLP's fused gate/up projection); h, dh packed. 16-byte packs when cols and ld
// are multiples of 8 (bf16; 4 fp32) and every pointer is 16-byte aligned (ld = cols: any cols),
// else one element at a time; the same values either way.
void cuda_swiglu_fwd(cuda_dtype dt, void *h, const void *gate, const void *up, size_t rows,
                     int cols, size_t ld, cudaStream_t s);
// h: NULL, or = cuda_swiglu_fwd's h of (gate, up), bitwise (swiglu_h; train.recompute = light)
void cuda_swiglu_bwd(cuda_dtype dt, void *dgate, void *dup, void *h, const void *dh,
                     const void *gate, const void *up, size_t rows, int cols, size_t ld,
                     cudaStream_t s);
// Fused softmax cross-entropy: row losses (fp32, 0 for ignored) into losses, and when
// scale != 0 the logits are overwritten by (softmax - onehot) * scale. tgt: device int32.
void cuda_crossentropy(cuda_dtype dt, void *logits, float *losses, const int32_t *tgt, int N,
                       int V, double scale, cudaStream_t s);
// Same Philox mask as the CPU (rng_uniform_at(seed, i) >= p keeps element i).
void cuda_dropout_fwd(cuda_dtype dt, void *y, const void *x, size_t n, double p, uint64_t seed,
                      cudaStream_t s);
void cuda_dropout_bwd(cuda_dtype dt, void *dx, const void *dy, size_t n, double p, uint64_t seed,
                      cudaStream_t s);
void cuda_rope_fwd(cuda_dtype dt, void *y, const void *x, int B, int T, int H, int D, double base,
                   const int32_t *doc_start, cudaStream_t s);
void cuda_rope_bwd(cuda_dtype dt, void *dx, const void *dy, int B, int T, int H, int D,
                   double base, const int32_t *doc_start, cudaStream_t s);
// AdamW on fp32 master weights (or on p itself when master == NULL, fp32 mode); writes p in dt.
void cuda_adamw(cuda_dtype dt, void *p, float *master, const float *g, float *m, float *v,
                size_t n, float lr, float b1, float b2, float eps, float wd, float bc1, float bc2,
                float gscale, cudaStream_t s);
// The same update on nseg segments [lo, hi) of the flat arenas, each with its weight decay, in
// one launch per 128 segments (bitwise cuda_adamw per segment). p, master, g are the arenas'
// bases (element e at p + e), m and v hold the elements from m_lo on (element e at m + e - m_lo).
// Segments ascending and disjoint, lo >= m_lo; empty ones are skipped; the elements between
// segments are not touched.
typedef struct {
    size_t lo, hi;
    float wd;
} cuda_adamw_seg;
void cuda_adamw_multi(cuda_dtype dt, void *p, float *master, const float *g, float *m, float *v,
                      size_t m_lo, const cuda_adamw_seg *seg, int nseg, float lr, float b1, float b2,
                      float eps, float bc1, float bc2, float gscale, cudaStream_t s);

#ifdef __cplusplus
}
#endif
