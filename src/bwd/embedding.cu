// embedding.cu — CUDA backward of the token embedding (twin of src/bwd/embedding.c):
// dwte[v, :] += sum of the dout rows of the tokens equal to v (fp32, +=). Deterministic without
// atomics: each run of equal tokens (order, starts, ids: built on the host by the backend, see
// cuda/ops.h) is one block that sums its rows in sorted order and adds once.
#include "../cuda/elementwise.cuh"

namespace {

template <typename T>
__global__ void __launch_bounds__(256) embedding_bwd_kernel(float *dwte, const T *dout, const int32_t *order,
                                                            const int32_t *starts, const int32_t *ids, int d) {
    const int u = blockIdx.x, p0 = starts[u], p1 = starts[u + 1];
    float *dst = dwte + (size_t)ids[u] * d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.f;
        for (int p = p0; p < p1; p++) acc += to_f(dout[(size_t)order[p] * d + c]);
        dst[c] += acc;
    }
}

template <typename T>
void embedding_bwd_launch(float *dwte, const T *dout, const int32_t *order, const int32_t *starts,
                          const int32_t *ids, int n_unique, int d, cudaStream_t s) {
    embedding_bwd_kernel<T><<<n_unique, 256, 0, s>>>(dwte, dout, order, starts, ids, d);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" {

void cuda_embedding_bwd(cuda_dtype dt, float *dwte, const void *dout, const int32_t *order, const int32_t *starts,
                        const int32_t *ids, int n_unique, int d, cudaStream_t s) {
    if (n_unique <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, embedding_bwd_launch<T>(dwte, (const T *)dout, order, starts, ids, n_unique, d, s));
}

}  // extern "C"
