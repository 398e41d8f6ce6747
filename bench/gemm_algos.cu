// gemm_algos.cu — on the GPU machine: does cuBLASLt's first heuristic choice leave speed on the
// table for the model's matmuls? For each GEMM of fla-220m (forward y = x W^T, dx = dy W, dW +=
// dy^T x, with the descriptors of src/cuda/gemm.cu: bf16 A/B, fp32 compute, bf16 or
// accumulated fp32 D, 32 MiB workspace), ask the heuristic for up to 32 algorithms, time each
// (median of 15 calls after 3, CUDA events, random bf16 inputs) and print the first choice's time,
// the best one's time and rank, and the gain. gemm.cu's tuner chooses only among the candidates
// with the first choice's configuration whose output is bitwise the first choice's.
// With ALGOS_DETAIL=1 also one line per candidate: its configuration (algo id, tile, stages,
// split-K, reduction scheme, cluster shape) and whether its output is bitwise the first choice's
// (the accumulating dW runs from the same initial D each time).
//   nvcc -O3 -std=c++17 -arch=sm_90a bench/gemm_algos.cu -lcublasLt -o gemm_algos && ./gemm_algos
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include "gemm_fill.cuh"
#include "gemm_lt.cuh"

// one GEMM as gemm.cu's matmul: D (m x n col-major) = op(A) op(B) [+ D]
static void one(const char *name, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A,
                int lda, const void *B, int ldb, void *D, int ldc, cudaDataType_t tcd, bool acc) {
    lt_gemm G;
    lt_gemm_make(G, lt, ta, tb, m, n, k, lda, ldb, ldc, tcd, WS);
    const cublasLtMatmulHeuristicResult_t *res = G.res;
    const int found = G.found;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> ms(found, 1e30);
    const bool detail = getenv("ALGOS_DETAIL") && atoi(getenv("ALGOS_DETAIL"));
    const size_t dbytes = (size_t)m * n * (tcd == CUDA_R_16BF ? 2 : 4);
    std::vector<unsigned char> d0(dbytes), d1(dbytes), dref(dbytes);
    CK(cudaMemcpy(d0.data(), D, dbytes, cudaMemcpyDeviceToHost));  // D before any call
    for (int i = 0; i < found; i++) {
        auto call = [&] {
            return lt_gemm_call(G, i, A, B, D, acc);
        };
        if (call() != CUBLAS_STATUS_SUCCESS) continue;  // an algorithm may refuse at run time
        for (int j = 0; j < 2; j++) LK(call());
        std::vector<float> t;
        for (int j = 0; j < 15; j++) {
            CK(cudaEventRecord(e0, 0));
            LK(call());
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            float x;
            CK(cudaEventElapsedTime(&x, e0, e1));
            t.push_back(x);
        }
        std::sort(t.begin(), t.end());
        ms[i] = t[t.size() / 2];
        if (detail) {  // one call from the initial D; compare with the first candidate's result
            CK(cudaMemcpy(D, d0.data(), dbytes, cudaMemcpyHostToDevice));
            LK(call());
            CK(cudaMemcpy(i == 0 ? dref.data() : d1.data(), D, dbytes, cudaMemcpyDeviceToHost));
            int v[6] = {0, 0, 0, 0, 0, 0};
            size_t w;
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &v[0], sizeof v[0], &w);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &v[1], sizeof v[1], &w);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &v[2], sizeof v[2], &w);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v[3], sizeof v[3], &w);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &v[4], sizeof v[4], &w);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &v[5], sizeof v[5], &w);
            printf("  #%d id %d tile %d stages %d splitK %d red %d cluster %d ws %zu  %.4f ms  %s\n", i, v[0], v[1], v[2],
                   v[3], v[4], v[5], res[i].workspaceSize, ms[i],
                   i == 0 ? "(reference)" : memcmp(d1.data(), dref.data(), dbytes) == 0 ? "bitwise equal" : "DIFFERENT bits");
        }
    }
    int best = (int)(std::min_element(ms.begin(), ms.end()) - ms.begin());
    const double f = 2.0 * m * n * k;
    printf("RESULT %-22s m %5d n %5d k %5d  algos %2d  first %.4f ms (%3.0f TFLOP/s)  best #%d %.4f ms (%3.0f TFLOP/s)  gain %.1f%%\n",
           name, m, n, k, found, ms[0], f / ms[0] * 1e-9, best, ms[best], f / ms[best] * 1e-9,
           100.0 * (ms[0] - ms[best]) / ms[0]);
    lt_gemm_free(G);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

int main() {
    lt_init();
    struct shape { const char *name; int N, in, out; } shapes[] = {
        {"gdn in-proj", 32768, 1024, 3080}, {"o-proj", 32768, 1024, 1024}, {"mlp gate/up", 32768, 1024, 2816},
        {"mlp down", 32768, 2816, 1024},    {"lm head chunk", 8320, 1024, 32000}};
    for (const shape &s : shapes) lt_linear_gemms(s.name, s.N, s.in, s.out, s.out, false, one);
    return 0;
}
