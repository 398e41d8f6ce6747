// backend.h — the op interface the model is written against. The model never knows whether
// tensors live in host float64 (the CPU reference backend, backend_cpu.c) or on a GPU in
// bf16/fp32 (the CUDA backend, backend_cuda.cu): it holds void pointers carved from arenas that
// the backend allocated, and calls the ops below. Shapes and maths of each op are those of
// src/fwd/fwd_cpu.h; the gradient rule is that of src/bwd/bwd_cpu.h (parameter grads +=,
// activation grads =).
// Documents (model.doc_reset): the token-mixing ops (conv1d and the conv_silu family, RoPE,
// attention, the gated delta rule) take `const int32_t *doc_start` (B*T) in backend memory
// (be->alloc, filled by be->upload_index) or NULL: the starts of the documents packed into each
// row, with the meaning of fwd_cpu.h "documents". NULL, or all zeros, gives today's bits.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "../fwd/fwd_cpu.h"

typedef struct {
    int B, T, H, Dk, Dv, chunk;
    gdn_mode mode;
    const void *q, *k, *v, *g, *beta;
    void *o;
    const void *dO;
    void *dq, *dk, *dv, *dg, *dbeta;
    void *hs;  // stat class, (B,H,NC,Dk,Dv) chunk-start states, NC = ceil(T / backend
               // gdn_state_chunk (0: chunk)); NULL = none. gdn_fwd writes them, gdn_bwd reads them
               // instead of recomputing (gdn.bwd_states = saved: memory for a faster backward)
    void *keep;  // stat class, backend gdn_fwd_keep elements: what the backend's gdn_fwd keeps
                 // for gdn_bwd's replay of the states (gdn.bwd_states = replay; CUDA bf16: each
                 // chunk's gate cumsums and Δ~ rows); NULL = none: gdn_bwd recomputes the states
                 // (or reads hs)
    const int32_t *doc_start;  // (B*T) backend memory, or NULL: the state restarts from zero at
                               // each document start (fwd_cpu.h "documents"; hs / keep then
                               // as the backend decides, its fwd and bwd alike)
} gdn_op;

// Memory classes: each has its own element type in a backend (CPU: all float64; GPU bf16 mode:
// activations and params bf16, statistics / gradients / optimizer fp32; GPU fp32 mode: all fp32).
typedef enum {
    BE_ACT,    // activations: x, q, k, v, logits, ... and their gradients
    BE_STAT,   // per-row statistics and gates: rstd, rnorm, lse, g, beta (fp32 on GPUs)
    BE_PARAM,  // parameters as the ops read them
    BE_GRAD,   // parameter gradients (accumulated over micro-batches)
    BE_OPT,    // AdamW m, v and the master weights
    BE_NCLASS
} be_class;

// One segment of an adamw_multi call: flat arena elements [lo, hi), weight decay wd.
typedef struct {
    size_t lo, hi;
    double wd;
} be_adamw_seg;

typedef struct backend {
    const char *name;
    size_t elem[BE_NCLASS];                            // bytes of one element of each class
    bool master;                                       // keeps master weights apart (BE_OPT type)
    bool fuse_projections;                             // projections of one input as one GEMM
                                                       // (GDN's q..z, the MLP's gate and up)
                                                       // where their weights allow (model.c)
    int gdn_state_chunk;                               // tokens per chunk of gdn_op.hs (0: op's chunk)
    size_t (*gdn_fwd_keep)(int B, int T, int H, int Dk, int Dv);  // elements of gdn_op.keep
                                                       // (stat class); NULL or 0: no replay, the
                                                       // backward recomputes the states
    bool doc_reset;                                    // the ops honour doc_start (false: they
                                                       // may not be given one; model.c refuses)
    void *(*alloc)(size_t bytes);                      // zero-filled
    void (*release)(void *p);
    void (*download)(double *dst, const void *src, size_t n, be_class c);  // to host float64
    void (*upload)(void *dst, const double *src, size_t n, be_class c);    // from host float64
    void (*upload_index)(int32_t *dst, const int32_t *src, size_t n);  // host int32 to alloc's
                                                       // memory (doc_start); done on return
    void (*set_docs)(const int32_t *doc_start, int B, int T);  // the host copy of the doc_start
                                                       // that the next ops get (NULL: none), for
                                                       // backends that plan on the host; may be NULL
    void (*zero)(void *p, size_t n, be_class c);
    void (*add)(void *y, const void *x, size_t n);     // y += x (activations)
    void (*copy)(void *y, const void *x, size_t n);    // activations
    double (*sumsq)(const void *x, size_t n);          // sum of squares of gradients, in double
    void (*sync)(void);                                // wait until all queued work is done
    // ops (see fwd_cpu.h / bwd_cpu.h)
    void (*embedding_fwd)(void *out, const int32_t *tok, const void *wte, int N, int d);
    void (*embedding_bwd)(void *dwte, const void *dout, const int32_t *tok, int N, int d);
    void (*rmsnorm_fwd)(void *y, void *rstd, const void *x, const void *w, int N, int d, double eps);
    // The residual add and the next RMSNorm fused: x_out = x_in + branch (x_out == x_in allowed),
    // then y, rstd = rmsnorm_fwd of the stored x_out, bit for bit (recompute_layer redoes y, rstd
    // with rmsnorm_fwd from x_out and must find the forward's values).
    void (*add_rmsnorm_fwd)(void *x_out, void *y, void *rstd, const void *x_in, const void *branch,
                            const void *w, int N, int d, double eps);
    // dx = the gradient (acc: dx += it, the residual stream's sum in place), dw += ...
    // y: NULL, or (N,d) = the forward's y, bit for bit: x rstd w from the saved rstd, with
    // rmsnorm_fwd's arithmetic (train.recompute = light re-materialises the norm outputs here,
    // from the x and rstd the backward reads anyway; model.c)
    void (*rmsnorm_bwd)(void *dx, void *dw, void *y, const void *dy, const void *x, const void *w,
                        const void *rstd, int N, int d, bool acc);
    void (*linear_fwd)(void *y, const void *x, const void *W, int N, int in, int out);
    // dx = dy W (acc: dx += dy W), dW += dy^T x; either may be NULL (that GEMM is skipped; x is
    // not read without dW): the two are independent, so dx and dW may be taken by two calls
    void (*linear_bwd)(void *dx, void *dW, const void *dy, const void *x, const void *W, int N,
                       int in, int out, bool acc);
    void (*conv1d_fwd)(void *y, const void *x, const void *w, int B, int T, int C, int K,
                       const int32_t *doc_start);
    void (*conv1d_bwd)(void *dx, void *dw, const void *dy, const void *x, const void *w, int B,
                       int T, int C, int K, const int32_t *doc_start);
    void (*silu_fwd)(void *y, const void *x, size_t n);
    void (*silu_bwd)(void *dx, const void *dy, const void *x, size_t n);
    // y = silu(conv1d(x, w)) fused; backward recomputes the conv: dx =, dw += (C,K). x and dx
    // rows of stride ld (C: packed; wider: columns of the fused input projection), y, dy packed
    void (*conv_silu_fwd)(void *y, const void *x, const void *w, int B, int T, int C, int K,
                          size_t ld, const int32_t *doc_start);
    void (*conv_silu_bwd)(void *dx, void *dw, const void *dy, const void *x, const void *w,
                          int B, int T, int C, int K, size_t ld, const int32_t *doc_start);
    // conv_silu over C0 + C1 + C2 channels of x at once (GDN's q, k, v from the fused
    // projection), outputs / output gradients in three packed buffers; w, dw (C0+C1+C2, K).
    // The same values as three conv_silu calls on the channel ranges.
    void (*conv_silu3_fwd)(void *y0, void *y1, void *y2, const void *x, const void *w, int B,
                           int T, int C0, int C1, int C2, int K, size_t ld,
                           const int32_t *doc_start);
    void (*conv_silu3_bwd)(void *dx, void *dw, const void *dy0, const void *dy1, const void *dy2,
                           const void *x, const void *w, int B, int T, int C0, int C1, int C2,
                           int K, size_t ld, const int32_t *doc_start);
    // conv_silu3_fwd, then l2norm_fwd of outputs 0 and 1 per head of nd channels: y_s = s_s
    // silu(conv) rnorm_s, rnorm_s (B T, C_s / nd) saved (GDN's q and k: the CUDA kernel
    // normalises in registers, so unnormalised q and k are never stored); y2 as conv_silu3_fwd
    void (*conv_silu3_l2_fwd)(void *y0, void *y1, void *y2, void *rn0, void *rn1, const void *x,
                              const void *w, int B, int T, int C0, int C1, int C2, int K,
                              size_t ld, int nd, double eps, double s0, double s1,
                              const int32_t *doc_start);
    void (*l2norm_fwd)(void *y, void *rnorm, const void *x, size_t rows, int D, double eps,
                       double scale);
    // y = scale x rnorm per row of D; the backward reads the output y and rnorm, not x
    void (*l2norm_bwd)(void *dx, const void *dy, const void *y, const void *rnorm, size_t rows,
                       int D, double scale);
    // a, b, da, db: token n's row at n * ld (ld = H packed; wider: columns of a fused
    // projection's output); g, beta, dg, dbeta packed (N,H)
    void (*gdn_gates_fwd)(void *g, void *beta, const void *a, const void *b, const void *A_log,
                          const void *dt_bias, int N, int H, size_t ld, gdn_mode mode);
    void (*gdn_gates_bwd)(void *da, void *db, void *dA_log, void *ddt_bias, const void *dg,
                          const void *dbeta, const void *a, const void *b, const void *A_log,
                          const void *dt_bias, int N, int H, size_t ld, gdn_mode mode);
    // z, dz: row r at (r / zh) zld + (r % zh) D (zh = 1, zld = D: packed); x, y, dx, dy packed
    void (*gated_rmsnorm_fwd)(void *y, void *rstd, const void *x, const void *z, const void *w,
                              size_t rows, int D, int zh, size_t zld, double eps);
    // y: NULL, or (rows,D) packed = gated_rmsnorm_fwd's y bit for bit, from the saved rstd
    // (train.recompute = light, as rmsnorm_bwd's y)
    void (*gated_rmsnorm_bwd)(void *dx, void *dz, void *dw, void *y, const void *dy,
                              const void *x, const void *z, const void *w, const void *rstd,
                              size_t rows, int D, int zh, size_t zld);
    // gate, up, dgate, dup: (rows, cols), row r at r ld (ld = cols: packed; 2 cols: the halves
    // of the MLP's fused gate/up projection, model.c mlp_fused); h, dh packed (rows, cols)
    void (*swiglu_fwd)(void *h, const void *gate, const void *up, size_t rows, int cols, size_t ld);
    // h: NULL, or = swiglu_fwd's h of (gate, up) bit for bit (train.recompute = light)
    void (*swiglu_bwd)(void *dgate, void *dup, void *h, const void *dh, const void *gate,
                       const void *up, size_t rows, int cols, size_t ld);
    // Fused softmax cross-entropy: returns the summed loss over non-ignored rows and, when
    // dlogits_scale != 0, overwrites logits with (softmax - onehot) * dlogits_scale.
    double (*crossentropy)(void *logits, const int32_t *tgt, int N, int V, double dlogits_scale);
    // Optional, both or neither (NULL: the caller adds crossentropy's returns): crossentropy
    // without waiting for its loss. crossentropy_defer keeps the call's summed loss (the double
    // crossentropy would return) inside the backend; loss_collect returns 0 + l1 + l2 + ... over
    // the kept ones in call order (what the caller would have added) and forgets them. A GPU
    // reads the losses back once, after the last chunk, instead of stopping at every chunk.
    void (*crossentropy_defer)(void *logits, const int32_t *tgt, int N, int V, double dlogits_scale);
    double (*loss_collect)(void);
    void (*dropout_fwd)(void *y, const void *x, size_t n, double p, uint64_t seed);
    void (*dropout_bwd)(void *dx, const void *dy, size_t n, double p, uint64_t seed);
    // doc_start: position of token t is t - doc_start[b*T+t] (NULL: t)
    void (*rope_fwd)(void *y, const void *x, int B, int T, int H, int D, double base,
                     const int32_t *doc_start);
    void (*rope_bwd)(void *dx, const void *dy, int B, int T, int H, int D, double base,
                     const int32_t *doc_start);
    // doc_start: query i sees no key before its document's start
    void (*attention_fwd)(void *o, void *lse, const void *q, const void *k, const void *v, int B,
                          int T, int H, int D, int window, double scale, const int32_t *doc_start);
    void (*attention_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *k, const void *v, const void *o, const void *lse, int B,
                          int T, int H, int D, int window, double scale, const int32_t *doc_start);
    void (*gdn_fwd)(const gdn_op *op);
    void (*gdn_bwd)(const gdn_op *op);
    // AdamW on one tensor, g = grad * gscale: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    // w -= lr (mhat/(sqrt(vhat)+eps) + wd w) with w the master weights when the backend keeps
    // them (then p = round(w)), else p itself (master == NULL).
    void (*adamw)(void *p, void *master, const void *g, void *m, void *v, size_t n, double lr,
                  double b1, double b2, double eps, double wd, double bc1, double bc2,
                  double gscale);
    // Optional (NULL: optim.c calls adamw per segment): adamw on nseg segments [seg.lo, seg.hi)
    // of the flat arenas, each with its weight decay, bitwise adamw per segment. p, master
    // (NULL: none), g are the arenas' bases (element e at e), m and v hold the elements from
    // m_lo on (element e at e - m_lo); segments ascending and disjoint, lo >= m_lo; the elements
    // between segments are not touched.
    void (*adamw_multi)(void *p, void *master, const void *g, void *m, void *v, size_t m_lo,
                        const be_adamw_seg *seg, int nseg, double lr, double b1, double b2,
                        double eps, double bc1, double bc2, double gscale);
} backend;

extern const backend backend_cpu;

#ifdef __cplusplus
}
#endif
