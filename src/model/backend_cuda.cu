// backend_cuda.cu — the GPU backend: every op of backend.h on device memory, in two modes
// (backend_cuda.h): bf16 (training) and fp32 (checks against the float64 CPU backend). Each op
// calls a launcher of cuda/ops.h, the cuBLASLt linear (gemm.h), the GDN chunk kernels
// (gdn_cuda.h, gdn_bwd_cuda.h) or the attention kernels (attention_cuda.h).
//
// Element types per memory class (backend.h):      ACT   STAT  PARAM  GRAD  OPT
//                                         bf16:     bf16  fp32  bf16   fp32  fp32  (+ master)
//                                         fp32:     fp32  fp32  fp32   fp32  fp32
// One stream: the legacy default stream (0) for every launch and copy, so ops are ordered
// without events. The per-batch uploads (tokens, targets, the embedding backward's sort) are
// queued without waiting, through pinned buffers (upload_async); the cross-entropy's row
// losses are read back once per head_loss (crossentropy_defer, loss_collect). The step's sync
// points are that read-back and the gradient norm (sumsq); download / upload (checkpoints,
// tests) stay synchronous cudaMemcpy.
//
// Token arrays arrive as host int32 (model.tok / model.tgt): they are uploaded to device
// buffers owned by this file. Those buffers (tokens, targets, the embedding-backward sort, the
// row losses) and the kernels' workspace (attention backward, GDN forward prep) are the
// backend's only lazy allocations: made at first use, grown only if a larger batch ever comes,
// and then reused, so a training run allocates nothing inside a step after its first. One
// workspace serves every kernel: with a single stream, uses never overlap.
//
// Determinism: the embedding backward's token order is built on the host (stable sort by id),
// the cross-entropy loss is the row losses summed on the host in index order, cuBLASLt plans
// are cached; the kernels promise fixed-order reductions (cuda/ops.h).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "backend_cuda.h"
#include "../cuda/ops.h"
#include "../cuda/gemm.h"
#include "../fwd/attention_cuda.h"
#include "../fwd/gdn_cuda.h"
#include "../bwd/gdn_bwd_cuda.h"
#include "../core/cuda_check.h"

namespace {

constexpr cudaStream_t STREAM = 0;  // the legacy default stream

// ---- state shared by both modes ---------------------------------------------------------------
struct cuda_be_state {
    // per-batch device buffers (lazy, see the top of the file), capacity tok_cap tokens
    size_t tok_cap = 0;
    int32_t *tok = nullptr, *tgt = nullptr;                   // (N)
    int32_t *order = nullptr, *starts = nullptr, *ids = nullptr;  // (N), (N+1), (N)
    float *losses = nullptr;                                  // (N)
    void *ws = nullptr;                                       // kernels' workspace
    size_t ws_cap = 0;
    double *sumsq = nullptr;                                  // (1)
    // host mirrors
    std::vector<uint64_t> keys;                               // (tok << 32 | position)
    std::vector<int32_t> h_order, h_starts, h_ids;
    std::vector<float> h_losses;
    std::vector<unsigned char> staging;                       // download / upload conversion
    // crossentropy_defer: the kept calls' row losses, one after the other in dl (capacity
    // dl_cap floats), and each call's (first row, rows)
    float *dl = nullptr;
    size_t dl_cap = 0;
    std::vector<std::pair<size_t, int>> dl_calls;
    bool attn_deterministic = true;                           // swa.deterministic
    int gdn_bwd_seg = 0;                                      // gdn.bwd_segment_chunks
    // documents (set_docs): the GDN plan of the current batch and its tables' memory
    gdn_docs docs{};
    bool docs_on = false;
    void *docs_mem = nullptr;
    size_t docs_mem_cap = 0;
};
cuda_be_state ST;

void ensure_tokens(int N) {
    if (N < 0) gdn_die("backend_cuda: negative token count %d", N);
    if ((size_t)N <= ST.tok_cap && ST.tok) return;
    CUDA_CHECK(cudaDeviceSynchronize());  // the old buffers may still be read
    CUDA_CHECK(cudaFree(ST.tok));
    CUDA_CHECK(cudaFree(ST.tgt));
    CUDA_CHECK(cudaFree(ST.order));
    CUDA_CHECK(cudaFree(ST.starts));
    CUDA_CHECK(cudaFree(ST.ids));
    CUDA_CHECK(cudaFree(ST.losses));
    size_t n = (size_t)(N > 0 ? N : 1);
    CUDA_CHECK(cudaMalloc(&ST.tok, n * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc(&ST.tgt, n * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc(&ST.order, n * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc(&ST.starts, (n + 1) * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc(&ST.ids, n * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc(&ST.losses, n * sizeof(float)));
    ST.tok_cap = n;
}

// ---- host -> device copies that do not wait for the device ---------------------------------------
// The source is copied into one of UP_SLOTS pinned buffers (round robin) and the copy queued on
// STREAM, so the host runs on while the device works through the step. A buffer is rewritten only
// after the copy that last read it has run (its event): UP_SLOTS uploads back is a step or more
// (8 uploads a training step: tokens, 4 target chunks at fla-220m, the 3 sort arrays), whose end
// the host has already waited for (the gradient norm), so the wait costs nothing in practice.
// Buffers grow at first use (cudaMallocHost) and are then reused.
constexpr int UP_SLOTS = 16;
struct up_slot {
    void *host = nullptr;
    size_t cap = 0;
    cudaEvent_t read = nullptr;  // recorded after the copy that reads host
};
up_slot UP[UP_SLOTS];
int up_next = 0;

void upload_async(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    up_slot &u = UP[up_next];
    up_next = (up_next + 1) % UP_SLOTS;
    if (!u.read) CUDA_CHECK(cudaEventCreateWithFlags(&u.read, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventSynchronize(u.read));  // (a never-recorded event is complete)
    if (u.cap < bytes) {
        CUDA_CHECK(cudaFreeHost(u.host));
        CUDA_CHECK(cudaMallocHost(&u.host, bytes));
        u.cap = bytes;
    }
    memcpy(u.host, src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, u.host, bytes, cudaMemcpyHostToDevice, STREAM));
    CUDA_CHECK(cudaEventRecord(u.read, STREAM));
}

// At least `bytes` of device memory (256-byte aligned), valid until the next call.
void *workspace(size_t bytes) {
    if (bytes > ST.ws_cap || !ST.ws) {
        CUDA_CHECK(cudaDeviceSynchronize());  // the old buffer may still be read
        CUDA_CHECK(cudaFree(ST.ws));
        CUDA_CHECK(cudaMalloc(&ST.ws, bytes > 0 ? bytes : 256));
        ST.ws_cap = bytes;
    }
    return ST.ws;
}

// ---- host <-> device with conversion ------------------------------------------------------------
void to_host(double *dst, const void *src, size_t n, bool bf16) {
    if (n == 0) return;
    size_t bytes = n * (bf16 ? 2 : 4);
    if (ST.staging.size() < bytes) ST.staging.resize(bytes);
    CUDA_CHECK(cudaMemcpy(ST.staging.data(), src, bytes, cudaMemcpyDeviceToHost));
    if (bf16) {
        const __nv_bfloat16 *h = (const __nv_bfloat16 *)ST.staging.data();
        for (size_t i = 0; i < n; i++) dst[i] = (double)__bfloat162float(h[i]);
    } else {
        const float *h = (const float *)ST.staging.data();
        for (size_t i = 0; i < n; i++) dst[i] = (double)h[i];
    }
}

void to_device(void *dst, const double *src, size_t n, bool bf16) {
    if (n == 0) return;
    size_t bytes = n * (bf16 ? 2 : 4);
    if (ST.staging.size() < bytes) ST.staging.resize(bytes);
    if (bf16) {
        __nv_bfloat16 *h = (__nv_bfloat16 *)ST.staging.data();
        for (size_t i = 0; i < n; i++) h[i] = __double2bfloat16(src[i]);  // one rounding
    } else {
        float *h = (float *)ST.staging.data();
        for (size_t i = 0; i < n; i++) h[i] = (float)src[i];
    }
    CUDA_CHECK(cudaMemcpy(dst, ST.staging.data(), bytes, cudaMemcpyHostToDevice));
}

void *be_alloc(size_t bytes) {
    void *p = nullptr;
    if (bytes == 0) return nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    CUDA_CHECK(cudaMemset(p, 0, bytes));
    return p;
}
void be_release(void *p) { CUDA_CHECK(cudaFree(p)); }

double be_sumsq(const void *x, size_t n) {  // gradients: fp32 in both modes
    if (n == 0) return 0.0;
    cuda_sumsq_f32(ST.sumsq, (const float *)x, n, STREAM);
    double s = 0;
    CUDA_CHECK(cudaMemcpy(&s, ST.sumsq, sizeof s, cudaMemcpyDeviceToHost));
    return s;
}

// Stable order of positions by token id, and the runs of equal ids (cuda_embedding_bwd).
int sort_tokens(const int32_t *tok, int N) {
    ST.keys.resize((size_t)N);
    for (int i = 0; i < N; i++) {
        if (tok[i] < 0) gdn_die("backend_cuda: embedding token %d at position %d is negative", tok[i], i);
        ST.keys[i] = (uint64_t)(uint32_t)tok[i] << 32 | (uint32_t)i;
    }
    std::sort(ST.keys.begin(), ST.keys.end());  // keys are unique: the order is stable
    ST.h_order.resize((size_t)N);
    ST.h_starts.clear();
    ST.h_ids.clear();
    for (int i = 0; i < N; i++) {
        int32_t id = (int32_t)(ST.keys[i] >> 32);
        ST.h_order[i] = (int32_t)(ST.keys[i] & 0xffffffffu);
        if (i == 0 || id != ST.h_ids.back()) {
            ST.h_starts.push_back(i);
            ST.h_ids.push_back(id);
        }
    }
    ST.h_starts.push_back(N);
    return (int)ST.h_ids.size();
}

// ---- the ops, one instance per mode -----------------------------------------------------------
template <bool BF>
struct ops {
    static constexpr cuda_dtype DT = BF ? CUDA_BF16 : CUDA_F32;  // activations and parameters
    static bool is_bf16(be_class c) { return BF && (c == BE_ACT || c == BE_PARAM); }
    static size_t elem(be_class c) { return is_bf16(c) ? 2 : 4; }

    static void download(double *dst, const void *src, size_t n, be_class c) {
        to_host(dst, src, n, is_bf16(c));
    }
    static void upload(void *dst, const double *src, size_t n, be_class c) {
        to_device(dst, src, n, is_bf16(c));
    }
    static void upload_index(int32_t *dst, const int32_t *src, size_t n) {
        if (!n) return;
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(int32_t), cudaMemcpyHostToDevice, STREAM));
        CUDA_CHECK(cudaStreamSynchronize(STREAM));  // src may change once this returns
    }
    // Document starts (backend.h): the conv, RoPE and attention kernels take doc_start as it
    // is; the GDN kernels take a plan made on the host (gdn_docs: documents placed on chunk
    // boundaries of a padded chunk grid), built here once a batch from the host copy and used
    // by every layer's forward and backward. With documents after token 0 the GDN backward
    // recomputes its chunk states (gdn.bwd_states = recompute for that batch): the model's keep
    // and saved-state buffers are sized for rows of T tokens, the padded chunk grid has Tp >= T.
    static void set_docs(const int32_t *doc_start, int B, int T) {
        ST.docs_on = false;
        if (!doc_start) return;
        const int Tp = gdn_docs_padded_len(doc_start, B, T);
        const size_t bytes = gdn_docs_bytes(B, T, Tp);
        if (bytes > ST.docs_mem_cap || !ST.docs_mem) {
            CUDA_CHECK(cudaDeviceSynchronize());  // the old tables may still be read
            CUDA_CHECK(cudaFree(ST.docs_mem));
            CUDA_CHECK(cudaMalloc(&ST.docs_mem, bytes > 0 ? bytes : 256));
            ST.docs_mem_cap = bytes;
        }
        gdn_docs_init(&ST.docs, doc_start, B, T, ST.docs_mem, bytes, STREAM);
        ST.docs_on = true;
    }
    // The GDN plan for an op given doc_start (NULL: none, or no document after token 0)
    static const gdn_docs *gdn_plan(const gdn_op *op) {
        if (!op->doc_start || !ST.docs_on || !ST.docs.any) return nullptr;
        if (ST.docs.B != op->B || ST.docs.T != op->T)
            gdn_die("backend_cuda: the GDN op's batch (%d x %d) is not the documents' (%d x %d)",
                    op->B, op->T, ST.docs.B, ST.docs.T);
        return &ST.docs;
    }
    static void zero(void *p, size_t n, be_class c) {
        if (n) CUDA_CHECK(cudaMemsetAsync(p, 0, n * elem(c), STREAM));
    }
    static void add(void *y, const void *x, size_t n) { cuda_add(DT, y, x, n, STREAM); }
    static void copy(void *y, const void *x, size_t n) {
        if (n && y != x)
            CUDA_CHECK(cudaMemcpyAsync(y, x, n * elem(BE_ACT), cudaMemcpyDeviceToDevice, STREAM));
    }
    static void embedding_fwd(void *out, const int32_t *tok, const void *wte, int N, int d) {
        ensure_tokens(N);
        upload_async(ST.tok, tok, (size_t)N * sizeof(int32_t));
        cuda_embedding_fwd(DT, out, ST.tok, wte, N, d, STREAM);
    }
    static void embedding_bwd(void *dwte, const void *dout, const int32_t *tok, int N, int d) {
        ensure_tokens(N);
        int nu = sort_tokens(tok, N);
        upload_async(ST.order, ST.h_order.data(), (size_t)N * sizeof(int32_t));
        upload_async(ST.starts, ST.h_starts.data(), (size_t)(nu + 1) * sizeof(int32_t));
        upload_async(ST.ids, ST.h_ids.data(), (size_t)nu * sizeof(int32_t));
        cuda_embedding_bwd(DT, (float *)dwte, dout, ST.order, ST.starts, ST.ids, nu, d, STREAM);
    }
    static void rmsnorm_fwd(void *y, void *rstd, const void *x, const void *w, int N, int d,
                            double eps) {
        cuda_rmsnorm_fwd(DT, y, (float *)rstd, x, w, N, d, eps, STREAM);
    }
    static void add_rmsnorm_fwd(void *x_out, void *y, void *rstd, const void *x_in,
                                const void *branch, const void *w, int N, int d, double eps) {
        cuda_add_rmsnorm_fwd(DT, x_out, y, (float *)rstd, x_in, branch, w, N, d, eps, STREAM);
    }
    static void rmsnorm_bwd(void *dx, void *dw, void *y, const void *dy, const void *x,
                            const void *w, const void *rstd, int N, int d, bool acc) {
        cuda_rmsnorm_bwd(DT, dx, (float *)dw, y, dy, x, w, (const float *)rstd, N, d, acc, STREAM);
    }
    static void linear_fwd(void *y, const void *x, const void *W, int N, int in, int out) {
        cuda_linear_fwd(DT, y, x, W, N, in, out, STREAM);
    }
    static void linear_bwd(void *dx, void *dW, const void *dy, const void *x, const void *W,
                           int N, int in, int out, bool acc) {
        cuda_linear_bwd(DT, dx, (float *)dW, dy, x, W, N, in, out, acc, STREAM);
    }
    static void conv1d_fwd(void *y, const void *x, const void *w, int B, int T, int C, int K,
                           const int32_t *doc_start) {
        cuda_conv1d_fwd(DT, y, x, w, B, T, C, K, doc_start, STREAM);
    }
    static void conv1d_bwd(void *dx, void *dw, const void *dy, const void *x, const void *w,
                           int B, int T, int C, int K, const int32_t *doc_start) {
        cuda_conv1d_bwd(DT, dx, (float *)dw, dy, x, w, B, T, C, K, doc_start, STREAM);
    }
    static void silu_fwd(void *y, const void *x, size_t n) { cuda_silu_fwd(DT, y, x, n, STREAM); }
    static void silu_bwd(void *dx, const void *dy, const void *x, size_t n) {
        cuda_silu_bwd(DT, dx, dy, x, n, STREAM);
    }
    static void conv_silu_fwd(void *y, const void *x, const void *w, int B, int T, int C, int K,
                              size_t ld, const int32_t *doc_start) {
        cuda_conv_silu_fwd(DT, y, x, w, B, T, C, K, ld, doc_start, STREAM);
    }
    static void conv_silu_bwd(void *dx, void *dw, const void *dy, const void *x, const void *w,
                              int B, int T, int C, int K, size_t ld, const int32_t *doc_start) {
        cuda_conv_silu_bwd(DT, dx, (float *)dw, dy, x, w, B, T, C, K, ld, doc_start, STREAM);
    }
    static void conv_silu3_fwd(void *y0, void *y1, void *y2, const void *x, const void *w, int B,
                               int T, int C0, int C1, int C2, int K, size_t ld,
                               const int32_t *doc_start) {
        cuda_conv_silu3_fwd(DT, y0, y1, y2, x, w, B, T, C0, C1, C2, K, ld, doc_start, STREAM);
    }
    static void conv_silu3_bwd(void *dx, void *dw, const void *dy0, const void *dy1,
                               const void *dy2, const void *x, const void *w, int B, int T, int C0,
                               int C1, int C2, int K, size_t ld, const int32_t *doc_start) {
        cuda_conv_silu3_bwd(DT, dx, (float *)dw, dy0, dy1, dy2, x, w, B, T, C0, C1, C2, K, ld,
                            doc_start, STREAM);
    }
    static void conv_silu3_l2_fwd(void *y0, void *y1, void *y2, void *rn0, void *rn1,
                                  const void *x, const void *w, int B, int T, int C0, int C1,
                                  int C2, int K, size_t ld, int nd, double eps, double s0,
                                  double s1, const int32_t *doc_start) {
        cuda_conv_silu3_l2_fwd(DT, y0, y1, y2, (float *)rn0, (float *)rn1, x, w, B, T, C0, C1, C2,
                               K, ld, nd, eps, s0, s1, doc_start, STREAM);
    }
    static void l2norm_fwd(void *y, void *rnorm, const void *x, size_t rows, int D, double eps,
                           double scale) {
        cuda_l2norm_fwd(DT, y, (float *)rnorm, x, rows, D, eps, scale, STREAM);
    }
    static void l2norm_bwd(void *dx, const void *dy, const void *y, const void *rnorm,
                           size_t rows, int D, double scale) {
        cuda_l2norm_bwd(DT, dx, dy, y, (const float *)rnorm, rows, D, scale, STREAM);
    }
    static void gdn_gates_fwd(void *g, void *beta, const void *a, const void *b,
                              const void *A_log, const void *dt_bias, int N, int H, size_t ld,
                              gdn_mode mode) {
        cuda_gdn_gates_fwd(DT, (float *)g, (float *)beta, a, b, A_log, dt_bias, N, H, ld, mode,
                           STREAM);
    }
    static void gdn_gates_bwd(void *da, void *db, void *dA_log, void *ddt_bias, const void *dg,
                              const void *dbeta, const void *a, const void *b,
                              const void *A_log, const void *dt_bias, int N, int H, size_t ld,
                              gdn_mode mode) {
        cuda_gdn_gates_bwd(DT, da, db, (float *)dA_log, (float *)ddt_bias, (const float *)dg,
                           (const float *)dbeta, a, b, A_log, dt_bias, N, H, ld, mode, STREAM);
    }
    static void gated_rmsnorm_fwd(void *y, void *rstd, const void *x, const void *z,
                                  const void *w, size_t rows, int D, int zh, size_t zld,
                                  double eps) {
        cuda_gated_rmsnorm_fwd(DT, y, (float *)rstd, x, z, w, rows, D, zh, zld, eps, STREAM);
    }
    static void gated_rmsnorm_bwd(void *dx, void *dz, void *dw, void *y, const void *dy,
                                  const void *x, const void *z, const void *w, const void *rstd,
                                  size_t rows, int D, int zh, size_t zld) {
        cuda_gated_rmsnorm_bwd(DT, dx, dz, (float *)dw, y, dy, x, z, w, (const float *)rstd, rows,
                               D, zh, zld, STREAM);
    }
    static void swiglu_fwd(void *h, const void *gate, const void *up, size_t rows, int cols,
                           size_t ld) {
        cuda_swiglu_fwd(DT, h, gate, up, rows, cols, ld, STREAM);
    }
    static void swiglu_bwd(void *dgate, void *dup, void *h, const void *dh, const void *gate,
                           const void *up, size_t rows, int cols, size_t ld) {
        cuda_swiglu_bwd(DT, dgate, dup, h, dh, gate, up, rows, cols, ld, STREAM);
    }
    // Summed loss over the non-ignored rows: fp32 row losses, added on the host in row order
    // in double (deterministic; one sync).
    static double crossentropy(void *logits, const int32_t *tgt, int N, int V, double scale) {
        ensure_tokens(N);
        upload_async(ST.tgt, tgt, (size_t)N * sizeof(int32_t));
        cuda_crossentropy(DT, logits, ST.losses, ST.tgt, N, V, scale, STREAM);
        ST.h_losses.resize((size_t)N);
        CUDA_CHECK(cudaMemcpy(ST.h_losses.data(), ST.losses, (size_t)N * sizeof(float),
                              cudaMemcpyDeviceToHost));
        double s = 0;
        for (int i = 0; i < N; i++) s += (double)ST.h_losses[i];
        return s;
    }
    // The same kernel, its row losses kept on the device after the earlier kept calls' rows;
    // loss_collect reads them all back at once and sums them as crossentropy and the caller
    // would have: per call from 0 in row order, then the calls' sums in call order.
    static void crossentropy_defer(void *logits, const int32_t *tgt, int N, int V, double scale) {
        ensure_tokens(N);
        const size_t r0 = ST.dl_calls.empty() ? 0 : ST.dl_calls.back().first + ST.dl_calls.back().second;
        if (r0 + (size_t)N > ST.dl_cap) {  // grow, keeping the rows already there (first steps only)
            const size_t cap = GDN_MAX(r0 + (size_t)N, 2 * ST.dl_cap);
            float *p = nullptr;
            CUDA_CHECK(cudaMalloc(&p, cap * sizeof(float)));
            if (r0) CUDA_CHECK(cudaMemcpy(p, ST.dl, r0 * sizeof(float), cudaMemcpyDeviceToDevice));
            CUDA_CHECK(cudaDeviceSynchronize());  // the old buffer may still be written
            CUDA_CHECK(cudaFree(ST.dl));
            ST.dl = p;
            ST.dl_cap = cap;
        }
        upload_async(ST.tgt, tgt, (size_t)N * sizeof(int32_t));
        cuda_crossentropy(DT, logits, ST.dl + r0, ST.tgt, N, V, scale, STREAM);
        ST.dl_calls.push_back({r0, N});
    }
    static double loss_collect() {
        if (ST.dl_calls.empty()) return 0.0;
        const size_t rows = ST.dl_calls.back().first + ST.dl_calls.back().second;
        ST.h_losses.resize(rows);
        CUDA_CHECK(cudaMemcpy(ST.h_losses.data(), ST.dl, rows * sizeof(float), cudaMemcpyDeviceToHost));
        double sum = 0;
        for (const auto &c : ST.dl_calls) {
            double s = 0;
            for (int i = 0; i < c.second; i++) s += (double)ST.h_losses[c.first + i];
            sum += s;
        }
        ST.dl_calls.clear();
        return sum;
    }
    static void dropout_fwd(void *y, const void *x, size_t n, double p, uint64_t seed) {
        cuda_dropout_fwd(DT, y, x, n, p, seed, STREAM);
    }
    static void dropout_bwd(void *dx, const void *dy, size_t n, double p, uint64_t seed) {
        cuda_dropout_bwd(DT, dx, dy, n, p, seed, STREAM);
    }
    static void rope_fwd(void *y, const void *x, int B, int T, int H, int D, double base,
                         const int32_t *doc_start) {
        cuda_rope_fwd(DT, y, x, B, T, H, D, base, doc_start, STREAM);
    }
    static void rope_bwd(void *dx, const void *dy, int B, int T, int H, int D, double base,
                         const int32_t *doc_start) {
        cuda_rope_bwd(DT, dx, dy, B, T, H, D, base, doc_start, STREAM);
    }
    static attn_params attn(const void *q, const void *k, const void *v, int B, int T, int H,
                            int D, int window, double scale) {
        attn_params p;
        memset(&p, 0, sizeof p);
        p.B = B;
        p.T = T;
        p.H = H;
        p.D = D;
        p.window = window;
        p.scale = (float)scale;
        p.dtype = BF ? ATTN_DTYPE_BF16 : ATTN_DTYPE_FP32;
        p.q = q;
        p.k = k;
        p.v = v;
        p.stream = STREAM;
        return p;
    }
    static void attention_fwd(void *o, void *lse, const void *q, const void *k, const void *v,
                              int B, int T, int H, int D, int window, double scale,
                              const int32_t *doc_start) {
        attn_params p = attn(q, k, v, B, T, H, D, window, scale);
        p.doc_start = doc_start;
        p.o = o;
        p.lse = (float *)lse;
        ::attention_fwd(&p);
    }
    static void attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
                              const void *k, const void *v, const void *o, const void *lse,
                              int B, int T, int H, int D, int window, double scale,
                              const int32_t *doc_start) {
        attn_params p = attn(q, k, v, B, T, H, D, window, scale);
        p.doc_start = doc_start;
        p.o = (void *)o;  // read only by the backward
        p.lse = (float *)lse;
        p.dO = dout;
        p.dq = dq;
        p.dk = dk;
        p.dv = dv;
        p.nondeterministic = ST.attn_deterministic ? 0 : 1;  // before sizing the workspace
        p.workspace = workspace(attention_workspace_bytes(&p));
        ::attention_bwd(&p);
    }
    // The kernel always uses chunks of GDN_CHUNK = 64 tokens; op->chunk (the CPU algorithm's
    // chunk) does not change the result, only the float64 rounding on the CPU.
    // The forward's parameters for a shape, everything else zero
    static gdn_fwd_params gdn_fwd_shape(int B, int T, int H, int Dk, int Dv) {
        gdn_fwd_params p;
        memset(&p, 0, sizeof p);
        p.B = B;
        p.T = T;
        p.H = H;
        p.Dk = Dk;
        p.Dv = Dv;
        p.dtype = BF ? GDN_DTYPE_BF16 : GDN_DTYPE_FP32;
        return p;
    }
    static void gdn_fwd(const gdn_op *op) {
        gdn_fwd_params p = gdn_fwd_shape(op->B, op->T, op->H, op->Dk, op->Dv);
        p.mode = op->mode;
        p.q = op->q;
        p.k = op->k;
        p.v = op->v;
        p.g = (const float *)op->g;
        p.beta = (const float *)op->beta;
        p.o = op->o;
        p.stream = STREAM;
        p.docs = gdn_plan(op);
        if (!p.docs) {  // with documents the backward recomputes the states (set_docs)
            p.h_states = (float *)op->hs;  // gdn.bwd_states = saved: for the backward
            keep_carve(op, &p.keep_g, &p.keep_dt);  // replay: kept for the backward
        }
        size_t wsb = gdn_chunk_fwd_workspace_bytes(&p);  // 0: the kernel recomputes per CTA
        p.workspace = wsb ? workspace(wsb) : nullptr;
        gdn_chunk_fwd(&p);
    }
    // gdn_op.keep (bf16, gdn.bwd_states = replay): what the GDN forward keeps for the backward's
    // replay of the chunk states, carved as keep_g (each chunk's gate cumsums, fp32) then keep_dt
    // (each chunk's Δ~ rows, bf16 (B,T,H,Dv)): the backward replays the states from them
    // (S = gamma_C S + Δ~^T K, no dependent products), the same bits as a recompute. Returns its
    // bytes, *dt_off the offset of keep_dt. One place for gdn_fwd_keep (the size) and keep_carve
    // (the pointers).
    static size_t keep_layout(int B, int T, int H, int Dk, int Dv, size_t *dt_off) {
        const gdn_fwd_params p = gdn_fwd_shape(B, T, H, Dk, Dv);
        size_t g, dt;
        gdn_chunk_fwd_keep_bytes(&p, &g, &dt);
        *dt_off = GDN_CDIV(g, 256) * 256;
        return *dt_off + dt;
    }
    static size_t gdn_fwd_keep(int B, int T, int H, int Dk, int Dv) {
        if (!BF) return 0;
        size_t dt_off;
        return GDN_CDIV(keep_layout(B, T, H, Dk, Dv, &dt_off), elem(BE_STAT));
    }
    // op->keep carved as gdn_fwd_keep sized it: G, then Δ~ (NULL where not kept)
    static void keep_carve(const gdn_op *op, float **g, void **dt) {
        *g = NULL;
        *dt = NULL;
        if (!op->keep) return;
        size_t dt_off;
        keep_layout(op->B, op->T, op->H, op->Dk, op->Dv, &dt_off);
        *g = (float *)op->keep;
        *dt = (char *)op->keep + dt_off;
    }
    static void gdn_bwd(const gdn_op *op) {
        // No initial state, no final-state gradient; the chunk-start states are the forward's
        // (gdn.bwd_states = saved), replayed from what it kept (replay) or recomputed by a second
        // forward scan (recompute), inside gdn_chunk_bwd.
        gdn_bwd_params p;
        memset(&p, 0, sizeof p);
        p.fwd = gdn_fwd_shape(op->B, op->T, op->H, op->Dk, op->Dv);
        p.fwd.mode = op->mode;
        p.fwd.q = op->q;
        p.fwd.k = op->k;
        p.fwd.v = op->v;
        p.fwd.g = (const float *)op->g;
        p.fwd.beta = (const float *)op->beta;
        p.fwd.stream = STREAM;
        p.fwd.docs = gdn_plan(op);
        if (!p.fwd.docs) {  // with documents the states are recomputed (set_docs)
            p.fwd.h_states = (float *)op->hs;
            keep_carve(op, &p.fwd.keep_g, &p.fwd.keep_dt);
        }
        p.dO = op->dO;
        p.dq = op->dq;
        p.dk = op->dk;
        p.dv = op->dv;
        p.dg = (float *)op->dg;
        p.dbeta = (float *)op->dbeta;
        p.seg_chunks = ST.gdn_bwd_seg;
        p.workspace_bytes = gdn_chunk_bwd_workspace_bytes(&p);
        p.workspace = workspace(p.workspace_bytes);
        gdn_chunk_bwd(&p);
    }
    static void adamw(void *p, void *master, const void *g, void *m, void *v, size_t n,
                      double lr, double b1, double b2, double eps, double wd, double bc1,
                      double bc2, double gscale) {
        if (BF && !master) gdn_die("backend_cuda (bf16): adamw needs the fp32 master weights");
        cuda_adamw(DT, p, (float *)master, (const float *)g, (float *)m, (float *)v, n, (float)lr,
                   (float)b1, (float)b2, (float)eps, (float)wd, (float)bc1, (float)bc2,
                   (float)gscale, STREAM);
    }

    static void adamw_multi(void *p, void *master, const void *g, void *m, void *v, size_t m_lo,
                            const be_adamw_seg *seg, int nseg, double lr, double b1, double b2,
                            double eps, double bc1, double bc2, double gscale) {
        if (BF && !master) gdn_die("backend_cuda (bf16): adamw needs the fp32 master weights");
        // wd to float, into a vector kept between calls; cuda_adamw_multi cuts the list into launches
        static std::vector<cuda_adamw_seg> cs;
        cs.resize((size_t)GDN_MAX(nseg, 0));
        for (int k = 0; k < nseg; k++) cs[k] = {seg[k].lo, seg[k].hi, (float)seg[k].wd};
        cuda_adamw_multi(DT, p, (float *)master, (const float *)g, (float *)m, (float *)v, m_lo, cs.data(), nseg,
                         (float)lr, (float)b1, (float)b2, (float)eps, (float)bc1, (float)bc2, (float)gscale,
                         STREAM);
    }

    static backend make() {
        backend b;
        memset(&b, 0, sizeof b);
        b.name = BF ? "cuda-bf16" : "cuda-fp32";
        for (int c = 0; c < BE_NCLASS; c++) b.elem[c] = elem((be_class)c);
        b.master = BF;
        b.fuse_projections = true;
        b.gdn_state_chunk = GDN_CHUNK;  // the kernels' chunk, whatever gdn.chunk_size says
        b.gdn_fwd_keep = gdn_fwd_keep;
        b.alloc = be_alloc;
        b.release = be_release;
        b.download = download;
        b.upload = upload;
        b.upload_index = upload_index;
        b.doc_reset = true;
        b.set_docs = set_docs;
        b.zero = zero;
        b.add = add;
        b.copy = copy;
        b.sumsq = be_sumsq;
        b.sync = [] { CUDA_CHECK(cudaDeviceSynchronize()); };
        b.embedding_fwd = embedding_fwd;
        b.embedding_bwd = embedding_bwd;
        b.rmsnorm_fwd = rmsnorm_fwd;
        b.add_rmsnorm_fwd = add_rmsnorm_fwd;
        b.rmsnorm_bwd = rmsnorm_bwd;
        b.linear_fwd = linear_fwd;
        b.linear_bwd = linear_bwd;
        b.conv1d_fwd = conv1d_fwd;
        b.conv1d_bwd = conv1d_bwd;
        b.silu_fwd = silu_fwd;
        b.silu_bwd = silu_bwd;
        b.conv_silu_fwd = conv_silu_fwd;
        b.conv_silu_bwd = conv_silu_bwd;
        b.conv_silu3_fwd = conv_silu3_fwd;
        b.conv_silu3_bwd = conv_silu3_bwd;
        b.conv_silu3_l2_fwd = conv_silu3_l2_fwd;
        b.l2norm_fwd = l2norm_fwd;
        b.l2norm_bwd = l2norm_bwd;
        b.gdn_gates_fwd = gdn_gates_fwd;
        b.gdn_gates_bwd = gdn_gates_bwd;
        b.gated_rmsnorm_fwd = gated_rmsnorm_fwd;
        b.gated_rmsnorm_bwd = gated_rmsnorm_bwd;
        b.swiglu_fwd = swiglu_fwd;
        b.swiglu_bwd = swiglu_bwd;
        b.crossentropy = crossentropy;
        b.crossentropy_defer = crossentropy_defer;
        b.loss_collect = loss_collect;
        b.dropout_fwd = dropout_fwd;
        b.dropout_bwd = dropout_bwd;
        b.rope_fwd = rope_fwd;
        b.rope_bwd = rope_bwd;
        b.attention_fwd = attention_fwd;
        b.attention_bwd = attention_bwd;
        b.gdn_fwd = gdn_fwd;
        b.gdn_bwd = gdn_bwd;
        b.adamw = adamw;
        b.adamw_multi = adamw_multi;
        return b;
    }
};

}  // namespace

extern "C" int backend_cuda_devices(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" error: this is only a probe
        return 0;
    }
    return n;
}

extern "C" double backend_cuda_peak_flops(bool bf16, char *name, size_t namelen) {
    cudaDeviceProp p;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    snprintf(name, namelen, "%s", p.name);
    // datasheet dense peaks (SXM): the usual MFU denominator
    if (strstr(p.name, "H100") || strstr(p.name, "H200")) return bf16 ? 989e12 : 67e12;
    if (strstr(p.name, "A100")) return bf16 ? 312e12 : 19.5e12;
    return 0;
}

extern "C" void backend_cuda_set_attention_deterministic(bool on) { ST.attn_deterministic = on; }
extern "C" void backend_cuda_set_gdn_bwd_segment_chunks(int chunks) { ST.gdn_bwd_seg = chunks; }

extern "C" void backend_cuda_set_gemm_tune(bool on) { cuda_linear_set_tune(on); }

extern "C" const backend *backend_cuda_get(bool bf16) {
    static backend modes[2];
    static bool ready = false;
    if (!ready) {
        int n = 0;
        cudaError_t rc = cudaGetDeviceCount(&n);
        if (rc != cudaSuccess || n == 0)
            gdn_die("backend_cuda: no usable CUDA device (%s)\nHINT: run with train.device=cpu",
                    rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
        cuda_linear_init();
        CUDA_CHECK(cudaMalloc(&ST.sumsq, sizeof(double)));
        modes[0] = ops<false>::make();
        modes[1] = ops<true>::make();
        ready = true;
    }
    return &modes[bf16 ? 1 : 0];
}
