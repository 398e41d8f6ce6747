// l2norm.cu — CUDA backward of the per-row L2 norm (twin of src/bwd/l2norm.c), from the output
// y = scale x rn and the saved rn:
//   dx = rn (scale dy - y sum(y dy) / scale)   (= scale (rn dy - rn^3 x sum(x dy)))
// One warp per row, or, for rows of 4, 8, 16 or 32 16-byte packs, 32 / packs rows per warp with
// a lane's pack kept in registers (cuda/norm.cuh's row layout); both give the same bits.
#include "../cuda/norm.cuh"

namespace {

// The row formula, shared by both kernels below (so they give the same bits): a lane's W products
// y dy added to its running sum in order; per element dx = rn (scale dy - c y), c = sum / scale.
template <int W> __device__ __forceinline__ float l2norm_dot_acc(float yg, const float (&a)[W], const float (&g)[W]) {
#pragma unroll
    for (int j = 0; j < W; j++) yg += a[j] * g[j];
    return yg;
}
template <int W>
__device__ __forceinline__ void l2norm_dx(float (&a)[W], const float (&g)[W], float rn, float c, float scale) {
#pragma unroll
    for (int j = 0; j < W; j++) a[j] = rn * (scale * g[j] - c * a[j]);
}

template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    l2norm_bwd_kernel(T *dx, const T *dy, const T *y, const float *rnorm, size_t rows, int D, float scale) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *yr = y + row * D, *gr = dy + row * D;
    float yg = 0.f;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W];
        load_pack<T, W>(yr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        yg = l2norm_dot_acc<W>(yg, a, g);
    }
    yg = warp_sum(yg);
    const float rn = rnorm[row], c = yg / scale;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W];
        load_pack<T, W>(yr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        l2norm_dx<W>(a, g, rn, c, scale);
        store_pack<T, W>(dx + row * D + k * W, a);
    }
}

// The same with a row's D / W = LPR packs on LPR lanes (a power of two <= 32): 32 / LPR rows per
// warp, each lane's pack kept in registers between the dot product and the output. Per row the
// same operations in the same order as l2norm_bwd_kernel (each lane's W products summed in
// order, then the xor butterfly over the row's lanes: the full-warp butterfly there only adds
// the idle lanes' zeros first), so the same results; at D = 128 bf16 (16 packs) no lane idles.
template <typename T, int W, int LPR>
__global__ void __launch_bounds__(ROW_THREADS)
    l2norm_bwd_packed_kernel(T *dx, const T *dy, const T *y, const float *rnorm, size_t rows, int D, float scale) {
    constexpr int RPW = 32 / LPR;
    const int lane = threadIdx.x & 31, k = lane % LPR;
    const size_t row = ((size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32) * RPW + lane / LPR;
    const bool ok = row < rows;
    float a[W], g[W], yg = 0.f;
    if (ok) {
        load_pack<T, W>(y + row * D + k * W, a);
        load_pack<T, W>(dy + row * D + k * W, g);
        yg = l2norm_dot_acc<W>(yg, a, g);
    }
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) yg += __shfl_xor_sync(FULL_MASK, yg, o);
    if (!ok) return;
    const float rn = rnorm[row], c = yg / scale;
    l2norm_dx<W>(a, g, rn, c, scale);
    store_pack<T, W>(dx + row * D + k * W, a);
}

template <typename T>
void l2norm_bwd_launch(T *dx, const T *dy, const T *y, const float *rnorm, size_t rows, int D, float scale,
                       cudaStream_t s) {
    constexpr int W = vec_width<T>();
    const bool vec = D % W == 0 && aligned16(dx) && aligned16(dy) && aligned16(y);
    const int packs = vec ? D / W : 0;  // lanes per row in the packed kernel
    auto packed = [&](auto kern, int lpr) {
        const size_t per_block = (size_t)ROW_WARPS * (32 / lpr);
        kern<<<(unsigned)GDN_CDIV(rows, per_block), ROW_THREADS, 0, s>>>(dx, dy, y, rnorm, rows, D, scale);
    };
    if (packs == 32) packed(l2norm_bwd_packed_kernel<T, W, 32>, 32);
    else if (packs == 16) packed(l2norm_bwd_packed_kernel<T, W, 16>, 16);
    else if (packs == 8) packed(l2norm_bwd_packed_kernel<T, W, 8>, 8);
    else if (packs == 4) packed(l2norm_bwd_packed_kernel<T, W, 4>, 4);
    else if (vec)
        l2norm_bwd_kernel<T, W><<<row_blocks(rows), ROW_THREADS, 0, s>>>(dx, dy, y, rnorm, rows, D, scale);
    else
        l2norm_bwd_kernel<T, 1><<<row_blocks(rows), ROW_THREADS, 0, s>>>(dx, dy, y, rnorm, rows, D, scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" {

void cuda_l2norm_bwd(cuda_dtype dt, void *dx, const void *dy, const void *y, const float *rnorm, size_t rows, int D,
                     double scale, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T, l2norm_bwd_launch<T>((T *)dx, (const T *)dy, (const T *)y, rnorm, rows, D, (float)scale, s));
}

}  // extern "C"
