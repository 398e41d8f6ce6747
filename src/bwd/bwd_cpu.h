// bwd_cpu.h — the float64 CPU backward of every op (see fwd_cpu.h for shapes and maths).
//
// The gradient rule (stated once, llm.c style):
//   * parameter gradients ACCUMULATE (+=), so micro-batches add up without extra buffers;
//   * activation (input) gradients are OVERWRITTEN (=); a caller that needs a sum adds itself.
// A gradient pointer documented "or NULL" may be NULL when that gradient is not wanted.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include "../fwd/fwd_cpu.h"

void embedding_bwd_cpu(double *dwte /*(V,d) +=*/, const double *dout /*(N,d)*/,
                       const int32_t *tok, int N, int d);

// acc: dx += the gradient (dx[i] + g, bitwise a separate add), for the residual stream
void rmsnorm_bwd_cpu(double *dx /*(N,d) = (acc: +=)*/, double *dw /*(d) +=*/, const double *dy,
                     const double *x, const double *w, const double *rstd, int N, int d,
                     bool acc);

void linear_bwd_cpu(double *dx /*(N,in) = or NULL*/, double *dW /*(out,in) += or NULL*/,
                    double *db /*(out) += or NULL*/, const double *dy /*(N,out)*/,
                    const double *x, const double *W, int N, int in, int out);
// The same with dx += dy W (the gradient of several layers reading one input, summed in place).
void linear_bwd_acc_cpu(double *dx /*(N,in) += or NULL*/, double *dW /*(out,in) += or NULL*/,
                        double *db /*(out) += or NULL*/, const double *dy /*(N,out)*/,
                        const double *x, const double *W, int N, int in, int out);

void conv1d_bwd_cpu(double *dx /*=*/, double *dw /*(C,K) +=*/, const double *dy, const double *x,
                    const double *w, int B, int T, int C, int K);
// y = silu(conv1d(x, w)): pre = conv1d(x, w) recomputed, d_pre = dy silu'(pre), then
// conv1d_bwd_cpu of d_pre (bitwise silu_bwd_cpu then conv1d_bwd_cpu). Allocates one (B,T,C)
// scratch per call. dx may alias dy, not x.
// x and dx rows of stride ld >= C (conv_silu_fwd_cpu); dy packed (B,T,C); only dx's C columns
// of each row are written
void conv_silu_bwd_cpu(double *dx /*=*/, double *dw /*(C,K) +=*/, const double *dy,
                       const double *x, const double *w, int B, int T, int C, int K, size_t ld);

// The same two with documents (conv1d_fwd_docs_cpu): no tap reaches before the start of its
// output token's document. doc_start NULL: the forms above, bit for bit.
void conv1d_bwd_docs_cpu(double *dx /*=*/, double *dw /*(C,K) +=*/, const double *dy,
                         const double *x, const double *w, int B, int T, int C, int K,
                         const int32_t *doc_start /*(B*T) or NULL*/);
void conv_silu_bwd_docs_cpu(double *dx /*=*/, double *dw /*(C,K) +=*/, const double *dy,
                            const double *x, const double *w, int B, int T, int C, int K,
                            size_t ld, const int32_t *doc_start /*(B*T) or NULL*/);

void silu_bwd_cpu(double *dx /*=*/, const double *dy, const double *x, size_t n);

// y, rnorm: the forward's output and saved 1/norm (l2norm_fwd_cpu); x is not needed
void l2norm_bwd_cpu(double *dx /*=*/, const double *dy, const double *y, const double *rnorm,
                    size_t rows, int D, double scale);

void gdn_gates_bwd_cpu(double *da /*(N,H) = or NULL when gate off*/, double *db /*= or NULL*/,
                       double *dA_log /*(H) +=*/, double *ddt_bias /*(H) +=*/,
                       const double *dg /*or NULL*/, const double *dbeta /*or NULL*/,
                       const double *a, const double *b, const double *A_log,
                       const double *dt_bias, int N, int H, size_t ld /*of a, b, da, db*/,
                       gdn_mode mode);

void gated_rmsnorm_bwd_cpu(double *dx /*=*/, double *dz /*= or NULL*/, double *dw /*(D) +=*/,
                           const double *dy, const double *x, const double *z, const double *w,
                           const double *rstd, size_t rows, int D, int zh,
                           size_t zld /*z and dz rows as gated_rmsnorm_fwd_cpu*/);

// gate, up, dgate, dup rows of stride ld (swiglu_fwd_cpu), dh packed (rows, cols); only the
// cols columns of dgate's and dup's rows are written
void swiglu_bwd_cpu(double *dgate /*=*/, double *dup /*=*/, const double *dh, const double *gate,
                    const double *up, size_t rows, int cols, size_t ld);

// dlogits[n] = (softmax(logits[n]) - onehot(tgt[n])) * scale; 0 for ignored rows. In place
// allowed (dlogits == logits): the fused form that never keeps the probabilities.
void crossentropy_bwd_cpu(double *dlogits /*(N,V) =*/, const double *logits, const int32_t *tgt,
                          int N, int V, double scale);

void dropout_bwd_cpu(double *dx /*=*/, const double *dy, size_t n, double p, uint64_t seed);

void rope_bwd_cpu(double *dx /*=, in place allowed*/, const double *dy, int B, int T, int H, int D,
                  double base);
void rope_bwd_docs_cpu(double *dx /*=, in place allowed*/, const double *dy, int B, int T, int H,
                       int D, double base, const int32_t *doc_start /*(B*T) or NULL*/);

void attention_bwd_cpu(double *dq /*=*/, double *dk /*=*/, double *dv /*=*/, const double *dout,
                       const double *q, const double *k, const double *v, const double *o,
                       const double *lse, int B, int T, int H, int D, int window, double scale);
void attention_bwd_docs_cpu(double *dq /*=*/, double *dk /*=*/, double *dv /*=*/,
                            const double *dout, const double *q, const double *k, const double *v,
                            const double *o, const double *lse, int B, int T, int H, int D,
                            int window, double scale, const int32_t *doc_start /*(B*T) or NULL*/);

// Gated delta rule backward (all gradients =): token-level (DESIGN 3.3) and chunkwise (3.2).
void gdn_token_bwd_cpu(const gdn_cpu_params *p);
void gdn_chunk_bwd_cpu(const gdn_cpu_params *p);

#ifdef __cplusplus
}
#endif
