// gemm.cu — y = x W^T and its backward through cuBLASLt (gemm.h says what and
// why). cuBLASLt is column-major; a row-major (r, c) matrix is the column-major (c, r) matrix
// with ld = c, so with x (N,in), W (out,in), y (N,out), dy (N,out) row-major:
//
//   forward   y^T  (out x N)  = W_cm^T (out x in) . x_cm  (in x N)    A = W  op T, B = x  op N
//   dx        dx^T (in x N)   = W_cm   (in x out) . dy_cm (out x N)   A = W  op N, B = dy op N
//   dW        dW^T (in x out) = x_cm   (in x N)   . dy_cm^T (N x out) A = x  op N, B = dy op T
//
// where M_cm is the column-major view of the row-major buffer M. dW accumulates (beta = 1) into
// the fp32 gradient while A and B are bf16 (cuBLASLt's "A/B 16BF, C/D 32F, compute 32F" case).
// Plans (descriptors + algorithm) are cached per shape/type/alignment in a small table searched
// linearly: a model has a few dozen distinct shapes. Single host thread, as the backend.
// Algorithm choice (tune_plan; cuda_linear_set_tune, the config's train.gemm_tune, turns it
// off): the heuristic's first algorithm is not always the fastest for our shapes
// (bench/gemm_algos.cu on an H200: 6-11% slower for o_proj, the MLP's gate/up and the LM head
// forwards). At a plan's first use the candidates with the first one's algorithm id, split-K
// count and reduction scheme are run on the call's own operands (the real call then overwrites
// D); a candidate is kept only if its output hashes bitwise equal to the first one's, and the
// fastest of those is chosen. The configuration filter alone is not enough: bench/gemm_algos.cu
// (ALGOS_DETAIL=1) found such pairs bitwise equal at the model's 15 GEMMs, but on another H200
// instance the tiny shapes of test_model_cuda picked a candidate with other bits, so each
// candidate's output is compared, and test_model_cuda prints how many were dropped. A hash of a
// bf16 output is a weak certificate at small shapes, though: a candidate that sums in another
// order differs from the first choice by an fp32 ulp or two, which flips a bf16 rounding in only
// ~3e-5 of the elements, so at 256 x 64 outputs it passes with probability ~0.6 (seen in
// test_model_cuda, bench/model_gpu.md). So for bf16 D a second hash is compared too: of the
// residual D' = acc - D0 (beta = -1, C = the first choice's output D0, computed in fp32 and then
// rounded), which keeps the next 8 bits of each fp32 accumulator, and where a 1-ulp difference
// flips ~1e-2 of the elements. Where that cannot run (D larger than the scratch buffer, or the
// first choice refuses C != D) only shapes of at least 2^22 outputs are tuned, where the plain
// hash sees ~100 flips. So tuning does not change a result, and runs stay bitwise repeatable
// whatever the timing picks; a test may take the last certified candidate instead of the
// fastest (cuda_linear_tune_pick_last, gemm_testing.h), to exercise a pick other than the first
// whatever the timing. Accumulating GEMMs (beta = 1: dW +=) are tuned out of place
// (D' = acc + D into the scratch buffer, D untouched) where D is fp32 and fits the scratch
// buffer; the others (the LM head's dW, bf16 dx +=) keep the first algorithm.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "gemm.h"
#include "gemm_testing.h"
#include "../core/cuda_check.h"

namespace {

constexpr size_t WORKSPACE_BYTES = 32u << 20;  // what cuBLAS recommends on Hopper
constexpr int TUNE_CANDIDATES = 8, TUNE_CALLS = 5;
constexpr size_t RESID_BYTES = 16u << 20;   // scratch for the first choice's output (tune_plan)
constexpr int64_t PLAIN_HASH_MIN = 1 << 22;  // bf16 outputs the plain hash alone certifies

struct mm_key {
    cublasOperation_t ta, tb;
    int m, n, k;
    int64_t lda, ldb, ldc;
    cudaDataType_t tab, tcd;  // type of A and B; of C and D
    int beta1;                // C is read (beta = 1)
    int align[3];             // bytes: A, B, C/D (power of two, <= 256)
};

struct mm_plan {
    mm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

struct linear_state {
    cublasLtHandle_t lt = nullptr;
    void *workspace = nullptr;
    std::vector<mm_plan> plans;
    bool tune = true;                      // cuda_linear_set_tune (train.gemm_tune)
    bool pick_last = false;                // cuda_linear_tune_pick_last (tests)
    unsigned long long *hashes = nullptr;  // device: per candidate, output hash, residual hash
    void *resid = nullptr;                 // device, RESID_BYTES: the first choice's bf16 output
    cuda_linear_tune_stats stats = {0, 0, 0, 0};
};
linear_state S;

bool key_eq(const mm_key &x, const mm_key &y) {
    return x.ta == y.ta && x.tb == y.tb && x.m == y.m && x.n == y.n && x.k == y.k &&
           x.lda == y.lda && x.ldb == y.ldb && x.ldc == y.ldc && x.tab == y.tab &&
           x.tcd == y.tcd && x.beta1 == y.beta1 && x.align[0] == y.align[0] &&
           x.align[1] == y.align[1] && x.align[2] == y.align[2];
}

// Largest power of two (<= 256) dividing both the address and the column pitch in bytes.
int alignment(const void *p, int64_t ld, size_t elem) {
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)ld * elem | 256u;
    return (int)(v & (~v + 1));
}

size_t dtype_bytes(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }
cudaDataType_t lt_type(cuda_dtype dt) { return dt == CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

int algo_config(const cublasLtMatmulAlgo_t &a, cublasLtMatmulAlgoConfigAttributes_t attr) {
    int v = 0;
    size_t written = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &written));
    return v;
}

// Candidates whose results are bitwise those of `a` (the file's header says why).
bool same_numerics(const cublasLtMatmulAlgo_t &a, const cublasLtMatmulAlgo_t &b) {
    return algo_config(a, CUBLASLT_ALGO_CONFIG_ID) == algo_config(b, CUBLASLT_ALGO_CONFIG_ID) &&
           algo_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) == algo_config(b, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) &&
           algo_config(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) ==
               algo_config(b, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
}

// Order-independent 64-bit hash of the m x n column-major matrix D (ld elements, elem 2 or 4
// bytes; the padding rows are not read): the sum over elements of splitmix64(position, bits).
__global__ void hash_matrix_kernel(const void *D, int m, int n, int64_t ld, int elem,
                                   unsigned long long *out) {
    unsigned long long acc = 0;
    const int64_t total = (int64_t)m * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i / m, r = i - c * m, at = c * ld + r;
        uint64_t bits = elem == 2 ? ((const uint16_t *)D)[at] : ((const uint32_t *)D)[at];
        uint64_t x = ((uint64_t)i << 32) ^ bits ^ 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        acc += x ^ (x >> 31);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);  // integer sum: the order does not matter
}

// Run the candidates res[0..n) with res[0]'s configuration filter on the call's own operands
// (beta = 0: every call overwrites D) on stream s: hash each one's output (and for bf16 D the
// residual against res[0]'s output, the file's header says why), time TUNE_CALLS calls; the
// fastest whose hashes equal res[0]'s. Returns res[0] when the shape cannot be certified.
cublasLtMatmulAlgo_t tune_plan(const mm_plan &p, const cublasLtMatmulHeuristicResult_t *res, int n,
                               const void *A, const void *B, void *D, cudaStream_t s) {
    const int elem = (int)dtype_bytes(p.key.tcd);
    const int64_t outs = (int64_t)p.key.m * p.key.n;
    const size_t dbytes = ((size_t)p.key.ldc * (p.key.n - 1) + p.key.m) * elem;
    bool resid = elem == 2 && dbytes <= RESID_BYTES;
    if (elem == 2 && !resid && outs < PLAIN_HASH_MIN) return res[0].algo;
    // accumulating (beta = 1: dW +=): the candidates write acc + D into the scratch buffer and
    // leave D as it is; fp32 D only (its hash sees any other summation order)
    const bool acc = p.key.beta1;
    if (acc && (elem != 4 || dbytes > RESID_BYTES)) return res[0].algo;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    const float alpha = 1.0f, beta = acc ? 1.0f : 0.0f, minus1 = -1.0f;
    void *out = acc ? S.resid : D;
    float ms[TUNE_CANDIDATES];
    bool ran[TUNE_CANDIDATES] = {false};
    unsigned long long h[2 * TUNE_CANDIDATES];
    CUDA_CHECK(cudaMemsetAsync(S.hashes, 0, sizeof h, s));
    for (int i = 0; i < n; i++) {
        if (i > 0 && !same_numerics(res[0].algo, res[i].algo)) continue;
        auto call = [&] {
            return cublasLtMatmul(S.lt, p.op, &alpha, A, p.a, B, p.b, &beta, D, p.c, out, p.c,
                                  &res[i].algo, S.workspace, WORKSPACE_BYTES, s);
        };
        // a candidate may still refuse these operands: skip it (the first one never does in
        // place; out of place, for an accumulating GEMM, it may: then no tuning)
        cublasStatus_t st = call();
        if (st != CUBLAS_STATUS_SUCCESS) {
            if (i == 0 && !acc) CUBLAS_CHECK(st);
            if (i == 0) break;
            continue;
        }
        hash_matrix_kernel<<<264, 256, 0, s>>>(out, p.key.m, p.key.n, p.key.ldc, elem, S.hashes + i);
        CUDA_CHECK(cudaGetLastError());
        if (resid) {
            if (i == 0) CUDA_CHECK(cudaMemcpyAsync(S.resid, D, dbytes, cudaMemcpyDeviceToDevice, s));
            // D = acc - D0 (C = D0 in the scratch buffer, D the call's own output)
            st = cublasLtMatmul(S.lt, p.op, &alpha, A, p.a, B, p.b, &minus1, S.resid, p.c, D, p.c,
                                &res[i].algo, S.workspace, WORKSPACE_BYTES, s);
            if (st != CUBLAS_STATUS_SUCCESS) {
                if (i > 0) continue;  // cannot be certified: not a candidate
                resid = false;        // the first choice refuses C != D: plain hash only
                if (outs < PLAIN_HASH_MIN) break;
            } else {
                hash_matrix_kernel<<<264, 256, 0, s>>>(D, p.key.m, p.key.n, p.key.ldc, elem,
                                                       S.hashes + TUNE_CANDIDATES + i);
                CUDA_CHECK(cudaGetLastError());
            }
        }
        CUDA_CHECK(cudaEventRecord(e0, s));
        for (int j = 0; j < TUNE_CALLS; j++) CUBLAS_CHECK(call());
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
        ran[i] = true;
    }
    CUDA_CHECK(cudaMemcpyAsync(h, S.hashes, sizeof h, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    if ((elem == 2 && !resid && outs < PLAIN_HASH_MIN) || !ran[0]) return res[0].algo;
    int best = 0;
    S.stats.plans++;
    for (int i = 1; i < n; i++) {
        if (!ran[i]) continue;
        S.stats.candidates++;
        if (h[i] != h[0] || (resid && h[TUNE_CANDIDATES + i] != h[TUNE_CANDIDATES])) {
            S.stats.dropped++;
            continue;
        }
        if (S.pick_last || ms[i] < ms[best]) best = i;
    }
    if (best != 0) S.stats.changed++;
    return res[best].algo;
}

// The plan of key (created at its first use; A, B, D and s are that call's, for tune_plan).
const mm_plan &plan_for(const mm_key &key, const void *A, const void *B, void *D, cudaStream_t s) {
    for (const mm_plan &p : S.plans)
        if (key_eq(p.key, key)) return p;
    mm_plan p;
    memset(&p, 0, sizeof p);
    p.key = key;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &key.ta,
                                                sizeof key.ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &key.tb,
                                                sizeof key.tb));
    // stored shapes: A is (m x k) or, transposed, (k x m); B is (k x n) or (n x k)
    bool at = key.ta == CUBLAS_OP_T, bt = key.tb == CUBLAS_OP_T;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, key.tab, at ? key.k : key.m, at ? key.m : key.k,
                                            key.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, key.tab, bt ? key.n : key.k, bt ? key.k : key.n,
                                            key.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, key.tcd, key.m, key.n, key.ldc));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = WORKSPACE_BYTES;
    uint32_t al[3] = {(uint32_t)key.align[0], (uint32_t)key.align[1], (uint32_t)key.align[2]};
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]));
    cublasLtMatmulHeuristicResult_t res[TUNE_CANDIDATES];
    int found = 0;
    const bool tune = S.tune;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(S.lt, p.op, p.a, p.b, p.c, p.c, pref,
                                                tune ? TUNE_CANDIDATES : 1, res, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found < 1)
        gdn_die("cuBLASLt: no algorithm for m %d n %d k %d (op %c%c, A/B %s, C/D %s, align %d/%d/%d)"
                "\nHINT: check the shapes and that tensors are carved at 16-byte offsets",
                key.m, key.n, key.k, at ? 'T' : 'N', bt ? 'T' : 'N',
                key.tab == CUDA_R_16BF ? "bf16" : "fp32", key.tcd == CUDA_R_16BF ? "bf16" : "fp32",
                key.align[0], key.align[1], key.align[2]);
    p.algo = tune && found > 1 ? tune_plan(p, res, found, A, B, D, s) : res[0].algo;
    S.plans.push_back(p);
    return S.plans.back();
}

// D (m x n, column-major, ld ldc) = op(A) op(B) + beta D
void matmul(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A,
            int64_t lda, const void *B, int64_t ldb, cudaDataType_t tab, void *D, int64_t ldc,
            cudaDataType_t tcd, bool accumulate, cudaStream_t s) {
    if (!S.lt) gdn_die("cuda_linear: not initialised\nHINT: call cuda_linear_init (backend_cuda_get does)");
    mm_key key;
    memset(&key, 0, sizeof key);  // padding too: keys are compared field by field, but keep it clean
    key.ta = ta;
    key.tb = tb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.tab = tab;
    key.tcd = tcd;
    key.beta1 = accumulate;
    key.align[0] = alignment(A, lda, dtype_bytes(tab));
    key.align[1] = alignment(B, ldb, dtype_bytes(tab));
    key.align[2] = alignment(D, ldc, dtype_bytes(tcd));
    const mm_plan &p = plan_for(key, A, B, D, s);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(S.lt, p.op, &alpha, A, p.a, B, p.b, &beta, D, p.c, D, p.c, &p.algo,
                                S.workspace, WORKSPACE_BYTES, s));
}

void check_shape(const char *who, int N, int in, int out) {
    if (N < 0 || in < 1 || out < 1) gdn_die("%s: bad shape N %d in %d out %d", who, N, in, out);
}

// Ragged output widths: out = 256 q + r with a small r (the GDN input projection's 3080 =
// 12 x 256 + 8: a, b) leaves the last column of the 256-wide tiles nearly empty (that forward
// ran at 600 TFLOP/s against 735-768 for the other shapes, bench/model_gpu.md). Split: the 256 q
// outputs as one GEMM, the r as another, into the same rows (ld = out). Returns r (0: no split).
// Forward only: the 3080-wide forward takes 3.66 ms a step split against 3.88 as one GEMM, while
// the weight gradient split the same way (dW's n being out) took 7.57 against 7.11
// (bench/model_gpu.md), so dW and dx (out is its k) run as one GEMM.
int split_rest(int out) {
    const int r = out % 256;
    return out > 256 && r > 0 && r <= 32 ? r : 0;
}

// Drops the cached plans, so that the next call of each shape chooses again.
void drop_plans() {
    for (mm_plan &p : S.plans) {
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.op));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.a));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.b));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.c));
    }
    S.plans.clear();
}

}  // namespace

extern "C" void cuda_linear_set_tune(bool on) {
    drop_plans();
    S.tune = on;
}

extern "C" void cuda_linear_tune_pick_last(bool on) {
    drop_plans();
    S.pick_last = on;
}

extern "C" void cuda_linear_init(void) {
    if (S.lt) return;
    CUBLAS_CHECK(cublasLtCreate(&S.lt));
    CUDA_CHECK(cudaMalloc(&S.workspace, WORKSPACE_BYTES));
    CUDA_CHECK(cudaMalloc(&S.hashes, 2 * TUNE_CANDIDATES * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMalloc(&S.resid, RESID_BYTES));
}

extern "C" cuda_linear_tune_stats cuda_linear_get_tune_stats(void) { return S.stats; }

extern "C" void cuda_linear_fwd(cuda_dtype dt, void *y, const void *x, const void *W, int N,
                                int in, int out, cudaStream_t s) {
    check_shape("cuda_linear_fwd", N, in, out);
    if (N == 0) return;
    cudaDataType_t t = lt_type(dt);
    const int r = split_rest(out), q = out - r;
    const size_t e = dtype_bytes(t);
    matmul(CUBLAS_OP_T, CUBLAS_OP_N, q, N, in, W, in, x, in, t, y, out, t, false, s);
    if (r)
        matmul(CUBLAS_OP_T, CUBLAS_OP_N, r, N, in, (const char *)W + (size_t)q * in * e, in, x, in,
               t, (char *)y + (size_t)q * e, out, t, false, s);
}

extern "C" void cuda_linear_bwd(cuda_dtype dt, void *dx, float *dW, const void *dy, const void *x,
                                const void *W, int N, int in, int out, bool acc_dx, cudaStream_t s) {
    check_shape("cuda_linear_bwd", N, in, out);
    if (N == 0) return;
    cudaDataType_t t = lt_type(dt);
    if (dx) matmul(CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, W, in, dy, out, t, dx, in, t, acc_dx, s);
    if (dW) matmul(CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, x, in, dy, out, t, dW, in, CUDA_R_32F, true, s);
}
