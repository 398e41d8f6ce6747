// gated_rmsnorm.cu — CUDA forward of the gated RMSNorm per head row (twin of
// src/fwd/gated_rmsnorm.c), GDN's output norm:
//   y = x rstd w silu(z),  rstd = 1/sqrt(mean x^2 + eps)   (z NULL: no gate; rstd (rows) saved)
// One warp per row (cuda/norm.cuh). Two kernels, the same bits: the narrow-row kernel (rows of at
// most 32 16-byte packs, the model's D = 256 bf16) where its conditions hold, else the general
// row kernel. y is gated_rmsnorm_y, the bits the backward writes again under
// train.recompute = light.
#include "../cuda/norm.cuh"
#include "../cuda/ops_testing.h"

namespace {

// z's row r at (r / zh) zld + (r % zh) D (zh = 1, zld = D: packed; else zh heads of a token in a
// wider projection output of row stride zld)
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS) gated_rmsnorm_fwd_kernel(T *y, float *rstd, const T *x, const T *z,
                                                                       const T *w, size_t rows, int D, int zh,
                                                                       size_t zld, float eps) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *xr = x + row * D;
    T *yr = y + row * D;
    const float ss = row_sumsq<T, W>(xr, D, lane);
    const float rs = 1.f / sqrtf(ss / (float)D + eps);
    for (int k = lane; k < D / W; k += 32) {
        float a[W], wv[W], zv[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(w + k * W, wv);
        if (z) {
            load_pack<T, W>(z + (row / zh) * zld + (row % zh) * D + k * W, zv);
#pragma unroll
            for (int j = 0; j < W; j++) a[j] = gated_rmsnorm_y(a[j], rs, wv[j], zv[j], sigmoid_fast(zv[j]));
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) a[j] = rmsnorm_y(a[j], rs, wv[j]);
        }
        store_pack<T, W>(yr + k * W, a);
    }
    if (lane == 0) rstd[row] = rs;
}

// The narrow-row kernel: rows of at most 32 packs (the model's D = 256 bf16), with
// gated_rmsnorm_fwd_kernel<T, W>'s grid, one pack a lane, its operations on the same values in
// the same order, in fewer instructions and one memory round trip a row instead of two: the
// lane's x, w and z packs are loaded together before the sum of squares (the general kernel loads
// z and w after the butterfly), x is kept for y; z's row index r / zh by a multiply and shift
// (zdiv; rows <= 2^31, the launcher's condition); s by sigmoid_fast_ex2ftz (sigmoid_fast's bits).
// gated_rmsnorm_fwd_kernel takes the other calls: wider rows, packs off 16 bytes, y over z, more
// than 2^31 rows.
struct udiv31 {  // n / d for n < 2^31: (n m) >> sh, m = ceil(2^sh / d), sh = 31 + ceil(log2 d)
    uint64_t m;  // exact for every n < 2^31 (Granlund, Montgomery 1994, thm 4.2: m d - 2^sh < d)
    int sh;
    static udiv31 of(uint32_t d) {
        int l = 0;
        while (((uint64_t)1 << l) < d) l++;
        return {(((uint64_t)1 << (31 + l)) + d - 1) / d, 31 + l};
    }
    __device__ __forceinline__ uint32_t div(uint32_t n) const { return (uint32_t)((n * m) >> sh); }
};
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS, 6)
    gated_rmsnorm_fwd_narrow_kernel(T *y, float *rstd, const T *x, const T *z, const T *w, size_t rows, int D,
                                    int zh, size_t zld, udiv31 zdiv, float eps) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const bool on = lane * W < D;  // the lane's pack k = lane (k < D / W)
    const size_t e = row * D + (size_t)lane * W;
    uint4 xr, wr, zr;  // packs as 32-bit words (ld_u4)
    if (on) {
        xr = ld_u4(x + e);
        wr = ld_u4(w + lane * W);
        if (z) {
            const uint32_t q = zdiv.div((uint32_t)row), m = (uint32_t)row - q * (uint32_t)zh;
            zr = ld_u4(z + (size_t)q * zld + (size_t)m * D + lane * W);
        }
    }
    float a[W], ss = 0.f;
    if (on) {
        unpack_u4<T, W>(xr, a);
        sumsq_acc<W>(ss, a);
    }
    ss = warp_sum(ss);
    const float rs = 1.f / sqrtf(ss / (float)D + eps);
    if (on) {
        float wv[W];
        unpack_u4<T, W>(wr, wv);
        if (z) {
            float zv[W];
            unpack_u4<T, W>(zr, zv);
#pragma unroll
            for (int j = 0; j < W; j++) a[j] = gated_rmsnorm_y(a[j], rs, wv[j], zv[j], sigmoid_fast_ex2ftz(zv[j]));
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) a[j] = rmsnorm_y(a[j], rs, wv[j]);
        }
        store_pack<T, W>(y + e, a);
    }
    if (lane == 0) rstd[row] = rs;
}

template <typename T>
void gated_rmsnorm_fwd_launch(T *y, float *rstd, const T *x, const T *z, const T *w, size_t rows, int D, int zh,
                              size_t zld, float eps, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    const bool vec = D % W == 0 && (!z || zld % W == 0) && aligned16(y) && aligned16(x) && aligned16(z) && aligned16(w);
    // the narrow-row kernel: one pack a lane, rows <= 2^31 (udiv31), y not over z (it reads z with
    // x, the general kernel after the butterfly: a y row over a z row would differ between the two
    // only then)
    const bool y_over_z = z && ranges_meet(bytes_of(y, rows * D * sizeof(T)),
                                           bytes_of(z, gated_z_extent(rows, D, zh, zld) * sizeof(T)));
    if (vec && D <= 32 * W && rows <= ((size_t)1 << 31) && !y_over_z) {
        gated_rmsnorm_fwd_narrow_kernel<T, W><<<row_blocks(rows), ROW_THREADS, 0, s>>>(
            y, rstd, x, z, w, rows, D, zh, zld, udiv31::of((uint32_t)GDN_MAX(zh, 1)), eps);
        CUDA_CHECK_LAUNCH();
        gated_rmsnorm_narrow_count();
        return;
    }
    if (vec)
        gated_rmsnorm_fwd_kernel<T, W>
            <<<row_blocks(rows), ROW_THREADS, 0, s>>>(y, rstd, x, z, w, rows, D, zh, zld, eps);
    else
        gated_rmsnorm_fwd_kernel<T, 1>
            <<<row_blocks(rows), ROW_THREADS, 0, s>>>(y, rstd, x, z, w, rows, D, zh, zld, eps);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- launch counter (cuda/ops_testing.h) -------------------------------------------------------
static unsigned long narrow_launches;  // host side, counted at launch (forward and backward)
void gated_rmsnorm_narrow_count() { __atomic_add_fetch(&narrow_launches, 1ul, __ATOMIC_RELAXED); }

extern "C" {

unsigned long cuda_gated_rmsnorm_narrow_launches(void) { return __atomic_load_n(&narrow_launches, __ATOMIC_RELAXED); }

void cuda_gated_rmsnorm_fwd(cuda_dtype dt, void *y, float *rstd, const void *x, const void *z, const void *w,
                            size_t rows, int D, int zh, size_t zld, double eps, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T, gated_rmsnorm_fwd_launch<T>((T *)y, rstd, (const T *)x, (const T *)z, (const T *)w, rows,
                                                      D, zh, zld, (float)eps, s));
}

}  // extern "C"
