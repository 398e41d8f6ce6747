// l2norm.cu — CUDA forward of the per-row L2 norm (twin of src/fwd/l2norm.c), GDN's q and k
// normalised per head: y = scale x rnorm, rnorm = 1/sqrt(sum x^2 + eps) (rnorm (rows) fp32,
// saved for the backward). One warp per row (cuda/norm.cuh), sums in fp32. In the model the norm
// usually runs inside the conv + SiLU forward (cuda_conv_silu3_l2_fwd, src/fwd/conv1d.cu).
#include "../cuda/norm.cuh"

namespace {

template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    l2norm_fwd_kernel(T *y, float *rnorm, const T *x, size_t rows, int D, float eps, float scale) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *xr = x + row * D;
    T *yr = y + row * D;
    const float ss = row_sumsq<T, W>(xr, D, lane);
    const float rn = 1.f / sqrtf(ss + eps);
    for (int k = lane; k < D / W; k += 32) {
        float a[W];
        load_pack<T, W>(xr + k * W, a);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = scale * a[j] * rn;
        store_pack<T, W>(yr + k * W, a);
    }
    if (lane == 0) rnorm[row] = rn;
}

template <typename T>
void l2norm_fwd_launch(T *y, float *rnorm, const T *x, size_t rows, int D, float eps, float scale, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (D % W == 0 && aligned16(y) && aligned16(x))
        l2norm_fwd_kernel<T, W><<<row_blocks(rows), ROW_THREADS, 0, s>>>(y, rnorm, x, rows, D, eps, scale);
    else
        l2norm_fwd_kernel<T, 1><<<row_blocks(rows), ROW_THREADS, 0, s>>>(y, rnorm, x, rows, D, eps, scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" {

void cuda_l2norm_fwd(cuda_dtype dt, void *y, float *rnorm, const void *x, size_t rows, int D, double eps,
                     double scale, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T, l2norm_fwd_launch<T>((T *)y, rnorm, (const T *)x, rows, D, (float)eps, (float)scale, s));
}

}  // extern "C"
