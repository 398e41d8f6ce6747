// rmsnorm.cu — CUDA forward of RMSNorm (twin of src/fwd/rmsnorm.c), alone and fused with the
// residual add before it:
//   y = x rstd w,  rstd = 1/sqrt(mean x^2 + eps)       (rstd (N) fp32, saved for the backward)
//   add_rmsnorm:   x_out = x_in + branch, then y, rstd = RMSNorm of x_out
// Activations in T = float or bf16, sums in fp32; one warp per row (cuda/norm.cuh). y is
// rmsnorm_y(x, rstd, w), the bits the backward writes again under train.recompute = light.
#include "../cuda/norm.cuh"

namespace {

// ---- RMSNorm: y = x rstd w, rstd = 1/sqrt(mean x^2 + eps) (saved for the backward) -------------
__device__ __forceinline__ float rms_rstd(float ss, int d, float eps) { return 1.f / sqrtf(ss / (float)d + eps); }

// The second pass of one row: y = x r w, lane k on packs k, k + 32, ...
template <typename T, int W>
__device__ __forceinline__ void rmsnorm_row_scale(T *yr, const T *xr, const T *w, int d, float r, int lane) {
    for (int k = lane; k < d / W; k += 32) {
        float a[W], wv[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(w + k * W, wv);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = rmsnorm_y(a[j], r, wv[j]);  // rmsnorm_bwd's y: the same
        store_pack<T, W>(yr + k * W, a);
    }
}

template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_fwd_kernel(T *y, float *rstd, const T *x, const T *w, size_t N, int d, float eps) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *xr = x + row * d;
    const float r = rms_rstd(row_sumsq<T, W>(xr, d, lane), d, eps);
    rmsnorm_row_scale<T, W>(y + row * d, xr, w, d, r, lane);
    if (lane == 0) rstd[row] = r;
}

// ---- residual add + RMSNorm: x_out = x_in + branch, then RMSNorm of x_out ---------------------
// Bitwise cuda_add followed by rmsnorm_fwd_kernel<T, W> on x_out: each x_out element is the T
// rounding of float(x_in) + float(branch), as add_op stores it; the squares are summed from
// those rounded values in row_sumsq's order; the second pass re-reads x_out, each pack by the
// lane that stored it (its own store, so no other lane's write is awaited). W is what
// rmsnorm_fwd_launch picks for (y, x_out, w); vec_in: x_in and branch are 16-byte aligned as
// well, else their W elements load one by one (same values, same order). x_out == x_in allowed.
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    add_rmsnorm_fwd_kernel(T *x_out, T *y, float *rstd, const T *x_in, const T *branch, const T *w, size_t N,
                           int d, float eps, bool vec_in) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *xr = x_in + row * d, *br = branch + row * d;
    T *outr = x_out + row * d;
    float ss = 0.f;
    for (int k = lane; k < d / W; k += 32) {
        float a[W], b[W];
        if (vec_in) {
            load_pack<T, W>(xr + k * W, a);
            load_pack<T, W>(br + k * W, b);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) {
                a[j] = to_f(xr[k * W + j]);
                b[j] = to_f(br[k * W + j]);
            }
        }
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = to_f(from_f<T>(a[j] + b[j]));  // the value stored
        store_pack<T, W>(outr + k * W, a);
        sumsq_acc<W>(ss, a);
    }
    const float r = rms_rstd(warp_sum(ss), d, eps);
    rmsnorm_row_scale<T, W>(y + row * d, outr, w, d, r, lane);
    if (lane == 0) rstd[row] = r;
}

template <typename T>
void rmsnorm_fwd_launch(T *y, float *rstd, const T *x, const T *w, int N, int d, float eps, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (d % W == 0 && aligned16(y) && aligned16(x) && aligned16(w))
        rmsnorm_fwd_kernel<T, W><<<row_blocks(N), ROW_THREADS, 0, s>>>(y, rstd, x, w, N, d, eps);
    else
        rmsnorm_fwd_kernel<T, 1><<<row_blocks(N), ROW_THREADS, 0, s>>>(y, rstd, x, w, N, d, eps);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void add_rmsnorm_fwd_launch(T *x_out, T *y, float *rstd, const T *x_in, const T *branch, const T *w, int N, int d,
                            float eps, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (d % W == 0 && aligned16(y) && aligned16(x_out) && aligned16(w))  // rmsnorm_fwd_launch's test
        add_rmsnorm_fwd_kernel<T, W><<<row_blocks(N), ROW_THREADS, 0, s>>>(x_out, y, rstd, x_in, branch, w, N, d, eps,
                                                                          aligned16(x_in) && aligned16(branch));
    else
        add_rmsnorm_fwd_kernel<T, 1><<<row_blocks(N), ROW_THREADS, 0, s>>>(x_out, y, rstd, x_in, branch, w, N, d, eps,
                                                                          true);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" {

void cuda_rmsnorm_fwd(cuda_dtype dt, void *y, float *rstd, const void *x, const void *w, int N, int d, double eps,
                      cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, rmsnorm_fwd_launch<T>((T *)y, rstd, (const T *)x, (const T *)w, N, d, (float)eps, s));
}

void cuda_add_rmsnorm_fwd(cuda_dtype dt, void *x_out, void *y, float *rstd, const void *x_in, const void *branch,
                          const void *w, int N, int d, double eps, cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, add_rmsnorm_fwd_launch<T>((T *)x_out, (T *)y, rstd, (const T *)x_in, (const T *)branch,
                                                    (const T *)w, N, d, (float)eps, s));
}

}  // extern "C"
