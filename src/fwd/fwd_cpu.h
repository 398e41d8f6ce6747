// fwd_cpu.h — the float64 CPU forward of every op: the oracle the CUDA kernels are checked
// against, and a complete (slow) backend. Layout is row-major, token-major: a tensor of
// "N rows" has N = B*T tokens, each row contiguous. Heads are contiguous inside a row:
// x[n, h, i] = x[(n*H + h)*D + i].
// Outputs are always overwritten (=). Nothing here allocates except where noted.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

// ---- documents (model.doc_reset) ---------------------------------------------------------------
// The token-mixing ops (conv1d, RoPE, attention, the gated delta rule) take the documents packed
// into each row as `const int32_t *doc_start` (B*T) or NULL: doc_start[b*T + t] = the index within
// row b of the first token of the document that token t belongs to (0 when it began at or before
// the row's start). So doc_start[b*T] = 0 and, for t > 0, doc_start[b*T + t] is either
// doc_start[b*T + t - 1] (the same document) or t (a document starts at t): doc_starts_check.
// Row b's documents are the runs [s, e) of equal values, and each op treats each run as a
// sequence of its own (zero state, zero conv input and no key before s, RoPE position t - s).
// NULL means one document per row: the op's plain form, bit for bit; so is an array of zeros.
// False + a message naming the first bad (row, token) when doc_start breaks the rule above.
bool doc_starts_check(const int32_t *doc_start, int B, int T, char *err, size_t errlen);
// The end (exclusive) of the document of row b that starts at token s.
static inline int doc_end(const int32_t *doc_start, int T, int b, int s) {
    int e = s + 1;
    while (e < T && doc_start[(size_t)b * T + e] == s) e++;
    return e;
}

// ---- embedding: out[n, :] = wte[tok[n], :] -------------------------------------------------
void embedding_fwd_cpu(double *out /*(N,d)*/, const int32_t *tok /*(N)*/,
                       const double *wte /*(V,d)*/, int N, int d);

// ---- RMSNorm: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); saves rstd (N) --------------
void rmsnorm_fwd_cpu(double *y /*(N,d)*/, double *rstd /*(N)*/, const double *x /*(N,d)*/,
                     const double *w /*(d)*/, int N, int d, double eps);
// y = x * rstd * w from a saved rstd: rmsnorm_fwd_cpu's y bit for bit (the same row code). The
// backend's rmsnorm_bwd writes it when asked (train.recompute = light).
void rmsnorm_apply_cpu(double *y /*(N,d)*/, const double *x /*(N,d)*/, const double *w /*(d)*/,
                       const double *rstd /*(N)*/, int N, int d);

// ---- linear: y = x W^T (+ b); W is (out, in) as in PyTorch ------------------------------------
// Uses cblas_dgemm when built with OpenBLAS (GDN_HAVE_CBLAS), plain loops otherwise.
void linear_fwd_cpu(double *y /*(N,out)*/, const double *x /*(N,in)*/, const double *W /*(out,in)*/,
                    const double *b /*(out) or NULL*/, int N, int in, int out);

// ---- causal depthwise conv1d, per sequence, no bias --------------------------------------------
// y[b,t,c] = sum_{j<K} w[c,j] * x[b, t-(K-1)+j, c]   (x at negative time is 0)
void conv1d_fwd_cpu(double *y /*(B,T,C)*/, const double *x /*(B,T,C)*/, const double *w /*(C,K)*/,
                    int B, int T, int C, int K);
// The same followed by SiLU (GDN's q, k, v path): y = silu(conv1d(x, w)); nothing else is
// kept (the backward recomputes the conv). Bitwise conv1d_fwd_cpu then silu_fwd_cpu. y != x.
// x's rows have stride ld >= C (ld = C: packed; larger: columns of a wider projection output)
void conv_silu_fwd_cpu(double *y /*(B,T,C)*/, const double *x /*(B,T,ld)*/,
                       const double *w /*(C,K)*/, int B, int T, int C, int K, size_t ld);
// The same two with documents: x before the start s of token t's document is 0 (conv1d_fwd_cpu
// on each document alone). doc_start NULL: the forms above, bit for bit.
void conv1d_fwd_docs_cpu(double *y, const double *x, const double *w, int B, int T, int C, int K,
                         const int32_t *doc_start /*(B*T) or NULL*/);
void conv_silu_fwd_docs_cpu(double *y, const double *x, const double *w, int B, int T, int C,
                            int K, size_t ld, const int32_t *doc_start /*(B*T) or NULL*/);

// ---- SiLU: y = x * sigmoid(x) ------------------------------------------------------------------
void silu_fwd_cpu(double *y, const double *x, size_t n);

// ---- per-row L2 norm: y = scale * x / sqrt(sum x^2 + eps); saves rnorm = 1/sqrt(..) (rows) -----
void l2norm_fwd_cpu(double *y /*(rows,D)*/, double *rnorm /*(rows)*/, const double *x,
                    size_t rows, int D, double eps, double scale);

// ---- GDN gates (DESIGN 2.1), a, b (N,H); A_log, dt_bias (H) ------------------------------------
// g = -exp(A_log) * softplus(a + dt_bias)   (gate off: g = 0, a unused)
// beta = sigmoid(b) (x2 when neg_eigval)    (delta off: beta unused, may be NULL)
typedef struct {
    bool gate;      // false: alpha = 1 (plain DeltaNet)
    bool delta;     // false: S_t = alpha S_{t-1} + v k^T (no beta)
    bool neg_eigval;// beta in (0, 2)
} gdn_mode;
void gdn_gates_fwd_cpu(double *g /*(N,H)*/, double *beta /*(N,H) or NULL*/,
                       const double *a /*row n at n ld*/, const double *b /*row n at n ld*/,
                       const double *A_log, const double *dt_bias, int N, int H, size_t ld,
                       gdn_mode mode);

// ---- per-head output norm with SiLU gate: y = x * rstd * w * silu(z) (z NULL: no gate) --------
// z: row r at (r / zh) zld + (r % zh) D (zh = 1, zld = D: packed (rows,D); zh heads of a token
// inside a wider projection output of row stride zld).
void gated_rmsnorm_fwd_cpu(double *y /*(rows,D)*/, double *rstd /*(rows)*/, const double *x,
                           const double *z /*or NULL*/, const double *w /*(D)*/, size_t rows,
                           int D, int zh, size_t zld, double eps);
// y from a saved rstd: gated_rmsnorm_fwd_cpu's y bit for bit (the same row code; the backend's
// gated_rmsnorm_bwd writes it when asked, train.recompute = light).
void gated_rmsnorm_apply_cpu(double *y /*(rows,D)*/, const double *x, const double *z /*or NULL*/,
                             const double *w /*(D)*/, const double *rstd /*(rows)*/, size_t rows,
                             int D, int zh, size_t zld);

// ---- SwiGLU: h = silu(gate) * up ----------------------------------------------------------------
// gate, up: (rows, cols) with row stride ld >= cols (ld = cols: packed; 2 cols: the two halves of
// the MLP's fused gate/up projection, gate = x, up = x + cols); h packed (rows, cols).
void swiglu_fwd_cpu(double *h, const double *gate, const double *up, size_t rows, int cols,
                    size_t ld);

// ---- softmax cross-entropy: losses[n] = logsumexp(logits[n]) - logits[n, tgt[n]] ----------------
// tgt[n] < 0 means "ignore" (loss 0). Returns the mean over the non-ignored rows (0 if none).
double crossentropy_fwd_cpu(double *losses /*(N) or NULL*/, const double *logits /*(N,V)*/,
                            const int32_t *tgt /*(N)*/, int N, int V);

// ---- dropout with a counter-based mask: keep iff rng(seed, i) >= p; y = x * keep / (1-p) --------
void dropout_fwd_cpu(double *y, const double *x, size_t n, double p, uint64_t seed);

// ---- RoPE (rotate-half / NeoX pairing: (i, i + D/2)), position of token t is t within its
// sequence; theta_i = base^(-2i/D). In place allowed (y == x).
void rope_fwd_cpu(double *y /*(B,T,H,D)*/, const double *x, int B, int T, int H, int D, double base);
// Rotation by sign * t theta_i (+1: rope_fwd_cpu; -1: its transpose, rope_bwd_cpu).
void rope_rotate_cpu(double *y, const double *x, int B, int T, int H, int D, double base, double sign);
// With documents: the position of token t is t - doc_start[b*T + t] (NULL: t, the forms above
// bit for bit).
void rope_rotate_docs_cpu(double *y, const double *x, int B, int T, int H, int D, double base,
                          double sign, const int32_t *doc_start /*(B*T) or NULL*/);
void rope_fwd_docs_cpu(double *y, const double *x, int B, int T, int H, int D, double base,
                       const int32_t *doc_start /*(B*T) or NULL*/);

// ---- causal sliding-window softmax attention (DESIGN 2.2) --------------------------------------
// Query i sees keys j with i - window < j <= i (window >= T: full causal).
// o (B,T,H,D); lse (B,H,T) = log sum_j exp(scale q_i.k_j) is saved for the backward.
// One query row of it: keys and values j in [j0, j1] at k, v + r * stride with r = j, or j % cap
// when cap > 0 (a ring buffer of cap rows: the decoder's KV cache); o (D) written, the row's
// log-sum-exp returned; s: scratch for j1 - j0 + 1 scores.
double attention_row_cpu(double *o, const double *q, const double *k, const double *v,
                         size_t stride, int cap, int j0, int j1, int D, double scale, double *s);
void attention_fwd_cpu(double *o, double *lse, const double *q, const double *k, const double *v,
                       int B, int T, int H, int D, int window, double scale);
// With documents: query i of row b sees keys j with max(i - window, s - 1) < j <= i, s =
// doc_start[b*T + i] (NULL: attention_fwd_cpu bit for bit).
void attention_fwd_docs_cpu(double *o, double *lse, const double *q, const double *k,
                            const double *v, int B, int T, int H, int D, int window, double scale,
                            const int32_t *doc_start /*(B*T) or NULL*/);

// ---- the gated delta rule (DESIGN 3) ------------------------------------------------------------
// One params struct for the family: the forward reads the inputs and writes o (and ht); the
// backward reads the inputs, dO (and dht) and writes the gradients.
// Layout: q, k (B,T,H,Dk); v, o (B,T,H,Dv); g, beta (B,T,H); states h0, ht (B,H,Dk,Dv), stored
// transposed as in DESIGN 3 (H = S^T, rows = key dims).
typedef struct {
    int B, T, H, Dk, Dv;
    int chunk;              // chunk size C for the chunkwise algorithm (ignored token-level)
    gdn_mode mode;          // mode.gate false: g ignored (may be NULL); mode.delta false: beta ignored
    const double *q, *k, *v, *g, *beta;
    const double *h0;       // initial state, NULL = zero
    double *o;              // output
    double *ht;             // final state, NULL = not wanted
    double *hs;             // chunk-start states (B,H,NC,Dk,Dv), NC = ceil(T/chunk), NULL = none:
                            // the forward writes them; the backward reads them instead of
                            // recomputing them with its own forward scan (gdn.bwd_states = saved)
    // backward
    const double *dO;       // gradient of o
    const double *dht;      // gradient of the final state, NULL = zero
    double *dq, *dk, *dv, *dg, *dbeta; // dg NULL allowed when gate off, dbeta NULL when delta off
    double *dh0;            // gradient of the initial state, NULL = not wanted
    // documents (B*T) or NULL (see the top of this file): the state restarts from zero at each
    // document start; h0 (dh0) is the start state of the document at token 0 of each row, ht
    // (dht) the final state of each row's last document. Every entry point below then runs each
    // document as a sequence of its own (gdn_docs_run_cpu); hs is kept (read) only for rows
    // holding one document, the others' states are recomputed by the backward.
    const int32_t *doc_start;
} gdn_cpu_params;

// Run op (one of the four entry points below) on each document of p->doc_start as a (1, e - s)
// view of the (B, T, ...) tensors, with doc_start NULL in the view.
void gdn_docs_run_cpu(const gdn_cpu_params *p, void (*op)(const gdn_cpu_params *));

void gdn_token_fwd_cpu(const gdn_cpu_params *p);
// One token of it in place on H = S^T (Dk,Dv): H <- alpha H + k w^T, w = beta (v - alpha H^T k)
// (delta off: w = v); w (Dv) scratch.
void gdn_token_step_cpu(double *H, double *w, const double *k, const double *v, double alpha,
                        double beta, bool delta, int Dk, int Dv);  // DESIGN 3.3, token by token (ground truth)
void gdn_chunk_fwd_cpu(const gdn_cpu_params *p);  // DESIGN 3.1, the kernel's algorithm

#ifdef __cplusplus
}
#endif
