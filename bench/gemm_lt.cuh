// gemm_lt.cuh — what bench/gemm_algos.cu and bench/gemm_power.cu share: checked calls and one
// GEMM's cuBLASLt descriptors as src/cuda/gemm.cu builds them (bf16 A and B, fp32
// compute, C/D of type tcd; D (m x n col-major, ldc) = op(A) op(B) [+ D]) with up to 32 heuristic
// candidates for a workspace of ws_bytes; the benches' handle and workspace.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cublasLt.h>
#include "gemm_fill.cuh"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define LK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "%s:%d cublas %d\n", __FILE__, __LINE__, (int)s_); exit(1); } } while (0)

struct lt_gemm {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res[32];
    int found;
};

static inline void lt_gemm_make(lt_gemm &g, cublasLtHandle_t lt, cublasOperation_t ta, cublasOperation_t tb, int m,
                                int n, int k, int lda, int ldb, int ldc, cudaDataType_t tcd, size_t ws_bytes) {
    LK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const bool at = ta == CUBLAS_OP_T, bt = tb == CUBLAS_OP_T;
    LK(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, at ? k : m, at ? m : k, lda));
    LK(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, bt ? n : k, bt ? k : n, ldb));
    LK(cublasLtMatrixLayoutCreate(&g.c, tcd, m, n, ldc));
    LK(cublasLtMatmulPreferenceCreate(&g.pref));
    LK(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof ws_bytes));
    g.found = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(lt, g.op, g.a, g.b, g.c, g.c, g.pref, 32, g.res, &g.found));
}

static inline void lt_gemm_free(lt_gemm &g) {
    LK(cublasLtMatmulPreferenceDestroy(g.pref));
    LK(cublasLtMatrixLayoutDestroy(g.a));
    LK(cublasLtMatrixLayoutDestroy(g.b));
    LK(cublasLtMatrixLayoutDestroy(g.c));
    LK(cublasLtMatmulDescDestroy(g.op));
}

// The benches' cuBLASLt handle and workspace (32 MiB, as src/cuda/gemm.cu's), made by lt_init.
static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 32u << 20;
static inline void lt_init() {
    LK(cublasLtCreate(&lt));
    CK(cudaMalloc(&ws, WS));
}

// Candidate i of g on the legacy stream: D = op(A) op(B), + D when acc.
static inline cublasStatus_t lt_gemm_call(const lt_gemm &g, int i, const void *A, const void *B, void *D, bool acc) {
    const float alpha = 1.f, beta = acc ? 1.f : 0.f;
    return cublasLtMatmul(lt, g.op, &alpha, A, g.a, B, g.b, &beta, D, g.c, D, g.c, &g.res[i].algo, ws, WS, 0);
}

// one GEMM of a bench: name, then lt_gemm_make's shape and leading dimensions, the operands and
// the type of D; acc: D += (dW) rather than D =.
typedef void (*lt_gemm_fn)(const char *name, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const void *A, int lda, const void *B, int ldb, void *D, int ldc,
                           cudaDataType_t tcd, bool acc);

// The three GEMMs of a linear layer y = x W^T (x: N x in, W: out x in, bf16; y: N rows of ld >=
// out), as src/cuda/gemm.cu runs them, each through one() on random operands (gemm_dev_random,
// drawn in the order x, W, y, dx, dW): "NAME fwd" y = x W^T, then unless fwd_only "NAME dx"
// dx = dy W and "NAME dW" dW += dy^T x (fp32).
static inline void lt_linear_gemms(const char *name, int N, int in, int out, int ld, bool fwd_only,
                                   lt_gemm_fn one) {
    char nm[64];
    void *x = gemm_dev_random((size_t)N * in * 2), *W = gemm_dev_random((size_t)out * in * 2),
         *y = gemm_dev_random((size_t)N * ld * 2), *dx = gemm_dev_random((size_t)N * in * 2);
    float *dW;
    CK(cudaMalloc(&dW, (size_t)out * in * 4));
    CK(cudaMemset(dW, 0, (size_t)out * in * 4));
    snprintf(nm, sizeof nm, "%s fwd", name);
    one(nm, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, W, in, x, in, y, ld, CUDA_R_16BF, false);
    if (!fwd_only) {
        snprintf(nm, sizeof nm, "%s dx", name);
        one(nm, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, W, in, y, out, dx, in, CUDA_R_16BF, false);
        snprintf(nm, sizeof nm, "%s dW", name);
        one(nm, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, x, in, y, out, dW, in, CUDA_R_32F, true);
    }
    for (void *p : {x, W, y, dx, (void *)dW}) CK(cudaFree(p));
}
