// gdn_gates.cu — CUDA forward of GDN's gates (twin of src/fwd/gdn_gates.c):
//   g    = -exp(A_log) softplus(a + dt_bias)     (0 with the gate off)
//   beta = c sigmoid(b)                          (c = 2 with negative eigenvalues, else 1)
// a, b: activations (T), token n's row at n ld; A_log, dt_bias: parameters (T); g, beta fp32
// (N,H) packed. One thread per (token, head), grid-stride.
#include "../cuda/elementwise.cuh"

namespace {

// softplus(u) = u for u > 20 (the CPU's threshold), log1p(exp(u)) otherwise. a, b: token n's row
// at n ld; g, beta packed (N,H).
template <typename T>
__global__ void __launch_bounds__(EW_THREADS) gdn_gates_fwd_kernel(float *g, float *beta, const T *a, const T *b,
                                                                   const T *A_log, const T *dt_bias, size_t total,
                                                                   int H, size_t ld, gdn_mode mode) {
    const float c = mode.neg_eigval ? 2.f : 1.f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int h = (int)(i % H);
        const size_t j = (i / H) * ld + h;
        if (mode.gate) {
            const float u = to_f(a[j]) + to_f(dt_bias[h]);
            const float sp = u > 20.f ? u : log1pf(expf(u));
            g[i] = -expf(to_f(A_log[h])) * sp;
        } else {
            g[i] = 0.f;
        }
        if (mode.delta) beta[i] = c * sigmoid_fast(to_f(b[j]));
    }
}

template <typename T>
void gdn_gates_fwd_launch(float *g, float *beta, const T *a, const T *b, const T *A_log, const T *dt_bias,
                          size_t total, int H, size_t ld, gdn_mode mode, cudaStream_t s) {
    gdn_gates_fwd_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(g, beta, a, b, A_log, dt_bias, total, H, ld, mode);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" {

void cuda_gdn_gates_fwd(cuda_dtype dt, float *g, float *beta, const void *a, const void *b, const void *A_log,
                        const void *dt_bias, int N, int H, size_t ld, gdn_mode mode, cudaStream_t s) {
    const size_t total = (size_t)N * H;
    if (total == 0) return;
    CUDA_DT_SWITCH(dt, T, gdn_gates_fwd_launch<T>(g, beta, (const T *)a, (const T *)b, (const T *)A_log,
                                                  (const T *)dt_bias, total, H, ld, mode, s));
}

}  // extern "C"
