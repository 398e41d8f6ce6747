// model.h — the model of DESIGN 2: description from the config, the parameter table, one arena
// per memory class, init, and forward/backward of the whole network over the op interface of
// backend.h (so the CUDA backend plugs in without touching this code).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "../core/arena.h"
#include "../core/config.h"
#include "backend.h"

typedef enum {
    PARAM_LINEAR,   // (out, in) matrix, N(0, init_std)
    PARAM_OUTPROJ,  // mixer / MLP output projection: N(0, init_std / sqrt(2 n_layers))
    PARAM_EMBED,    // (V, d), N(0, init_std)
    PARAM_NORM,     // RMSNorm weight, ones
    PARAM_CONV,     // depthwise conv (C, K), U(-1/sqrt(K), 1/sqrt(K)) as PyTorch's Conv1d
    PARAM_ALOG,     // GDN A_log (H): log U(1, 16)
    PARAM_DTBIAS,   // GDN dt_bias (H): softplus^-1(dt), dt log-uniform in [1e-3, 0.1], >= 1e-4
} param_kind;

typedef struct {
    char name[64];      // e.g. "layers.3.gdn.q_proj"
    param_kind kind;
    int rows, cols;     // vectors: rows = 1
    size_t offset;      // element offset in the params / grads / optimizer arenas
    size_t numel;
    bool decay;         // AdamW weight decay applies
} param_info;

enum { MAX_LAYERS = 256, MAX_PARAMS = 16 * MAX_LAYERS + 8 };

// Indices into the parameter table (-1: absent in this configuration).
typedef struct {
    char kind;                                   // 'G', 'S' or 'A'
    int norm1, norm2;                            // pre-mixer and pre-MLP RMSNorm
    int wq, wk, wv, wa, wb, wz, wo;              // GDN projections (wa/wb/wz may be absent)
    int conv_q, conv_k, conv_v, A_log, dt_bias, onorm;
    int sq, sk, sv, so;                          // attention projections
    int wgate, wup, wdown;                       // SwiGLU MLP
} layer_params;

// Activations of one block, saved by the forward for the backward (pointers into the
// activation arena; element type is the backend's). N = B*T tokens.
typedef struct {
    void *x_in, *xn1, *rstd1;                    // (N,d) block input, normed, (N) 1/rms
    void *q_lin, *k_lin, *v_lin;                 // GDN: projections (N,H*dk|dv), or columns of
                                                 // inproj (row stride: model.c gdn_inproj)
    void *q_act, *k_act, *v_act;                 // after SiLU (of the causal conv with short_conv;
                                                 // the conv output is not kept, see gdn_qkv_fwd);
                                                 // q_act, k_act: one forward temporary for all
                                                 // layers, NULL with conv_silu3_l2_fwd
    void *qn, *kn, *rq, *rk;                     // per-head L2-normed q (x 1/sqrt dk), k; (N*H)
    void *a, *b, *g, *beta;                      // gate projections (N,H) (or inproj columns)
                                                 // and gates (N,H)
    void *z, *o, *rstd_o, *on;                   // output gate (N,H*dv) (or inproj columns),
                                                 // rule output, norm
    void *hs;                                    // gdn.bwd_states = saved: the rule's chunk-
                                                 // start states (gdn_op.hs), else NULL
    void *gkeep;                                 // gdn.bwd_states = replay: the backend's
                                                 // gdn_op.keep (what its backward replays the
                                                 // states from), else NULL
    void *inproj;                                // the fused input projection's (N, w) output
                                                 // (model.c, gdn_inproj): q_lin .. z are its
                                                 // columns; NULL when not fused
    void *aq, *ak, *av, *ao, *lse;               // attention: roped q,k, v, output, (B,H,T)
    void *mix_out;                               // (N,d) mixer output before dropout
    void *x_mid, *xn2, *rstd2;                   // after the mixer residual; MLP input normed
    void *m_gate, *m_up, *m_h, *mlp_out;         // (N,F) x3, (N,d); gate and up the column
                                                 // halves of one (N,2F) when fused (model.c
                                                 // mlp_fused: row stride 2F, m_up = m_gate + F)
} layer_acts;

typedef struct model model;

// Gradient-ready hook (data parallelism: all-reduce buckets while the backward goes on, DESIGN
// 8). When m->grad_hook is set and m->grad_hook_armed is true, model_forward_backward calls
// grad_hook(m, lo, hi, m->grad_hook_ctx) for element ranges [lo, hi) of the flat gradient arena
// (grad_mem; element offsets as in param_info.offset) as soon as every gradient in the range has
// its final value for this call, i.e. no later part of the backward writes it. In backward order:
//   1. [lm_head, n_elems)       after the LM head's backward (untied embeddings only)
//   2. [norm_f, embed)          after the final norm's backward
//   3. layer l's tensors        after layer l's backward, l = L-1, ..., 0
//   4. [embed, lm_head|n_elems) at the very end (when tied, the embedding also took the LM
//                               head's gradient in step 1's place, so it is final only here)
// The ranges are disjoint and cover [0, n_elems) exactly once, padding between tensors included
// (padding gradients stay 0). The backward never reads parameter gradients, so the hook may
// overwrite its range (e.g. with the sum over ranks) before the backward returns. Arm it only for
// the last micro-batch of a step: with gradient accumulation, an earlier call would hand over
// partial sums. On a GPU "final" is in stream order: the kernels writing the range have been
// enqueued on the compute stream (the legacy default stream), not necessarily run.
typedef void (*model_grad_hook)(model *m, size_t elem_lo, size_t elem_hi, void *ctx);
// Forward-done hook (gdn-train --timeline: where the forward ends and the backward begins).
// When m->fwd_hook is set, model_forward_backward calls fwd_hook(m, m->grad_hook_ctx) on every
// call, armed or not, once the forward and the fused loss (which also writes dlogits) of the
// first LM-head row chunk are done (on a GPU: enqueued), before the first backward op (the other
// chunks' logits and losses run inside the LM head's backward: model.c, head_loss). It must not
// touch the model's tensors.
typedef void (*model_fwd_hook)(model *m, void *ctx);

struct model {
    gdn_config cfg;
    const backend *be;
    int L, d, V, F, B, T, N;                     // layers, width, vocab, MLP hidden, batch, seq
    int head_rows;                               // rows of one LM-head logits chunk (model.c)
    int H, dk, dv;                               // GDN heads and dims
    int Ha, Da;                                  // attention heads and head dim
    int window;
    bool mlp_fuse;                               // the MLP's gate and up as one GEMM where their
                                                 // weights are contiguous (model.c mlp_fused)
    // parameter table
    param_info params[MAX_PARAMS];
    int n_params;
    size_t n_elems;                              // total parameter elements
    layer_params lp[MAX_LAYERS];
    int wte, lm_head, norm_f;                    // lm_head == wte when tied
    // memory classes
    arena_t a_params, a_grads, a_opt, a_acts, a_scratch;
    void *param_mem, *grad_mem;                  // (n_elems) each
    void *opt_m, *opt_v;                         // (opt_n) each: elements [opt_lo, opt_lo + opt_n)
    size_t opt_lo, opt_n;                        // of the flat arena (all, or a ZeRO-1 shard)
    void *master;                                // (n_elems) BE_OPT master weights, or NULL
    const double *ckpt_moments[2];               // set by the loop around checkpoint_save when
                                                 // m, v are sharded: full m, v (host float64)
    layer_acts acts[MAX_LAYERS];
    void *x_final, *xf, *rstd_f, *logits;        // (N,d) (N,d) (N) (N,V)
    int32_t *tok, *tgt;                          // host copies of the batch
    int32_t *doc_mem;                            // (N) backend memory for the doc starts, made
                                                 // at the first model_set_doc_starts
    const int32_t *doc_start;                    // = doc_mem while resets are on, else NULL:
                                                 // what the token-mixing ops are given
    // backward scratch (one block's worth, reused layer after layer)
    void *dx, *dbranch, *dxn, *dbig[6], *dsmall[4], *dmix;
    uint64_t dropout_key;                        // set by the loop for each micro-batch
    double flops_per_token;                      // forward+backward, for MFU
    model_grad_hook grad_hook;                   // see above; NULL = none
    model_fwd_hook fwd_hook;                     // see above; NULL = none
    void *grad_hook_ctx;                         // passed to both hooks
    bool grad_hook_armed;                        // set by the loop for the last micro-batch
};

// Build the description and allocate every arena for micro-batches of B sequences of T tokens.
// vocab_size must already be set (> 1). Errors (bad shapes) end the program with a message.
model *model_create(const gdn_config *c, const backend *be, int B, int T);
// What model_create checks first: every dimension (B x T, the head widths, the MLP width) fits
// an int, and an upper bound of every arena's bytes fits a 64-bit size, so that no size below
// wraps. False + a message naming the keys and the values.
bool model_check_sizes(const gdn_config *c, int B, int T, char *err, size_t errlen);
// Whether the CUDA backend's kernels cover the model's shapes: the GDN chunk kernels are built for
// gdn.head_dim 64, 128, 256 with dv = head_dim or 2 head_dim (src/fwd/gdn_chunk.cu), attention for
// swa.head_dim 64 and 128 (src/cuda/attention.cuh). False + a message naming the first key outside
// them, its value and the values built. gdn-train checks it before it picks the GPU: train.device
// = cuda (and --gradcheck --device cuda) refuses the config, auto runs on the CPU and says why.
// (The GPU decoder of gdn-sample has its own, wider limits: src/fwd/decode_step.cu.)
bool model_gpu_check(const gdn_config *c, char *err, size_t errlen);
void model_free(model *m);
void model_init_params(model *m, uint64_t seed);
// ZeRO-1: keep the AdamW moments m, v only for the flat elements [lo, hi) (this rank's shard);
// the master weights stay whole. Call right after model_create, before init or a checkpoint
// load (the optimizer arena is made again). optim_step then refuses to run; the loop updates the
// shard itself, and checkpoint_save needs ckpt_moments, checkpoint_load fills just the shard.
void model_shard_optimizer(model *m, size_t lo, size_t hi);
void *model_param(const model *m, int i);        // pointer to parameter tensor i
void *model_grad(const model *m, int i);
void *model_opt(const model *m, void *base, int i);  // tensor i inside master, or whole opt_m / opt_v
// Parameter tensor i as float64 on the host (the master weights when the backend keeps them).
void model_param_download(const model *m, int i, double *dst);
// Set parameter tensor i (and its master copy) from host float64.
void model_param_upload(model *m, int i, const double *src);
void model_zero_grads(model *m);
// Documents packed into the rows (model.doc_reset): doc_start (B*T, host) as fwd_cpu.h
// "documents" (doc_start[b*T+t] = the index within row b of the first token of token t's
// document, 0 when it began before the row), or NULL. Applies to the following forward,
// backward and loss calls until set again; the model keeps its own copy. NULL, or
// model.doc_reset = false: no resets (today's bits; so are all-zero starts). At each document
// start the GDN state is zero, the short conv sees zeros before it, attention sees no key before
// it and RoPE positions count from it (model.doc_positions; false: from the row start). A bad
// array, or a backend without resets, ends the program with a message.
void model_set_doc_starts(model *m, const int32_t *doc_start);
// Mean loss over non-ignored targets of the batch; no backward. Dropout off.
double model_eval_loss(model *m, const int32_t *x, const int32_t *y);
// The same with dropout as in training when train is true (masks from m->dropout_key).
double model_loss(model *m, const int32_t *x, const int32_t *y, bool train);
// Per-position scores (evaluation, src/eval): forward with dropout off, then for each row i
// (of B*T) with y[i] >= 0, logp[i] = log softmax(logits_i)[y[i]] in float64 and, when argmax is
// not NULL, argmax[i] = the index of row i's largest logit (the lowest on ties); rows with
// y[i] < 0: logp 0, argmax -1. No gradient, no loss state: the training's bits do not change.
void model_logprobs(model *m, const int32_t *x, const int32_t *y, double *logp, int32_t *argmax);
// Forward, fused loss, backward: grads += d(sum of losses * grad_scale)/dparams.
// Returns the summed loss over the batch's targets (caller divides). train: dropout on.
// Calls m->fwd_hook when set and m->grad_hook when armed (see model_grad_hook).
double model_forward_backward(model *m, const int32_t *x, const int32_t *y, double grad_scale,
                              bool train);
void model_print_summary(const model *m, FILE *f);
size_t model_count_params(const model *m, bool include_embeddings);

// Finite-difference check of the whole model as configured, shrunk to B x T tokens, on the CPU
// in float64 (src/diag/gradcheck.c): samples up to `samples` elements of every parameter
// tensor, prints a table (norm-wise relative error, worst element, pass/fail) to out and
// returns the number of failing tensors.
int model_gradcheck(const gdn_config *c, int B, int T, int samples, double tol, uint64_t seed,
                    FILE *out);
// The same with the documents doc_start (B*T, model_set_doc_starts; NULL: none).
int model_gradcheck_docs(const gdn_config *c, int B, int T, int samples, double tol,
                         uint64_t seed, const int32_t *doc_start, FILE *out);

#ifdef __cplusplus
}
#endif
