// gemm_lt.cuh — what bench/gemm_algos.cu and bench/gemm_power.cu share: checked calls and one
// GEMM's cuBLASLt descriptors as src/cuda/gemm.cu builds them (bf16 A and B, fp32
// compute, C/D of type tcd; D (m x n col-major, ldc) = op(A) op(B) [+ D]) with up to 32 heuristic
// candidates for a workspace of ws_bytes.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cublasLt.h>

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
