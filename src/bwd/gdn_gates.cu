// gdn_gates.cu — CUDA backward of GDN's gates (twin of src/bwd/gdn_gates.c), u = a + dt_bias,
// s = sigmoid(b):
//   da = -exp(A_log) softplus'(u) dg,   db = dbeta c s (1 - s)
//   dA_log += sum_n dg g,               ddt_bias += sum_n da
// Gradient rule (src/bwd/bwd_cpu.h): activation gradients (T) are overwritten, parameter
// gradients (fp32) ACCUMULATE (+=).
// The elementwise part is one thread per (token, head); the parameter sums run on
// colsum_launch (cuda/colsum.cuh), deterministic.
#include "../cuda/colsum.cuh"

namespace {

// columns h < H: dA_log[h] += sum_n dg g;  columns H + h: ddt_bias[h] += sum_n da, with
// g = -exp(A_log) softplus(u), da = -exp(A_log) softplus'(u) dg, u = a + dt_bias (as the forward);
// a's row n at n ld, dg packed (N,H)
template <typename T> struct gates_dparam_term {
    const T *a, *A_log, *dt_bias;
    const float *dg;
    float *dA_log, *ddt_bias;
    int H;
    size_t ld;
    __device__ __forceinline__ float term(size_t r, int col) const {
        const int h = col % H;
        const size_t i = r * H + h;
        if (!dg) return 0.f;
        const float u = to_f(a[r * ld + h]) + to_f(dt_bias[h]), up = dg[i], e = expf(to_f(A_log[h]));
        if (col < H) return up * (-e * (u > 20.f ? u : log1pf(expf(u))));
        return -e * (u > 20.f ? 1.f : sigmoid_fast(u)) * up;
    }
    __device__ __forceinline__ float *dst(int col) const { return col < H ? dA_log + col : ddt_bias + (col - H); }
};

// ---- GDN gates, elementwise part: da = -exp(A_log) softplus'(u) dg, db = dbeta c s (1 - s) -------
// a, b, da, db: token n's row at n ld; dg, dbeta packed (N,H)
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
    gdn_gates_bwd_kernel(T *da, T *db, const float *dg, const float *dbeta, const T *a, const T *b, const T *A_log,
                         const T *dt_bias, size_t total, int H, size_t ld, gdn_mode mode) {
    const float cc = mode.neg_eigval ? 2.f : 1.f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int h = (int)(i % H);
        const size_t j = (i / H) * ld + h;
        if (mode.gate && da) {
            const float u = to_f(a[j]) + to_f(dt_bias[h]), up = dg ? dg[i] : 0.f;
            const float e = expf(to_f(A_log[h]));
            da[j] = from_f<T>(-e * (u > 20.f ? 1.f : sigmoid_fast(u)) * up);
        }
        if (mode.delta && db) {
            const float s = sigmoid_fast(to_f(b[j]));
            db[j] = from_f<T>((dbeta ? dbeta[i] : 0.f) * cc * s * (1.f - s));
        }
    }
}

template <typename T>
void gdn_gates_bwd_launch(T *da, T *db, float *dA_log, float *ddt_bias, const float *dg, const float *dbeta,
                          const T *a, const T *b, const T *A_log, const T *dt_bias, int N, int H, size_t ld,
                          gdn_mode mode, cudaStream_t s) {
    const size_t total = (size_t)N * H;
    if ((mode.gate && da) || (mode.delta && db)) {
        gdn_gates_bwd_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(da, db, dg, dbeta, a, b, A_log, dt_bias, total,
                                                                       H, ld, mode);
        CUDA_CHECK_LAUNCH();
    }
    if (mode.gate)
        colsum_launch(gates_dparam_term<T>{a, A_log, dt_bias, dg, dA_log, ddt_bias, H, ld}, (size_t)N, 2 * H, s);
}

}  // namespace

extern "C" {

void cuda_gdn_gates_bwd(cuda_dtype dt, void *da, void *db, float *dA_log, float *ddt_bias, const float *dg,
                        const float *dbeta, const void *a, const void *b, const void *A_log, const void *dt_bias,
                        int N, int H, size_t ld, gdn_mode mode, cudaStream_t s) {
    if (N <= 0 || H <= 0) return;
    CUDA_DT_SWITCH(dt, T, gdn_gates_bwd_launch<T>((T *)da, (T *)db, dA_log, ddt_bias, dg, dbeta, (const T *)a,
                                                  (const T *)b, (const T *)A_log, (const T *)dt_bias, N, H, ld, mode,
                                                  s));
}

}  // extern "C"
