// rmsnorm.cu — CUDA backward of RMSNorm (twin of src/bwd/rmsnorm.c), r the saved rstd:
//   u = w dy;  dx = r u - (r^3/d) x sum(u x)   (acc: dx += that, added in fp32 and rounded once)
//   dw += sum_rows dy x r
// Gradient rule (src/bwd/bwd_cpu.h): activation gradients (T) are overwritten, parameter
// gradients (fp32) ACCUMULATE (+=).
// 16-byte packs and rows of at most 8 packs a lane: the fused kernel (dx and the dw partials in
// one pass, cuda/norm.cuh), then colsum_final_dw. Unaligned or wider rows: one warp per row for
// dx, then colsum_launch for dw (cuda/colsum.cuh).
// With y (train.recompute = light) the kernels also store the forward's y = rmsnorm_y(x, r, w)
// from the x and w they load anyway, bitwise the forward kernel's; a template flag (Y) adds the
// store, so instances without it carry none.
#include "../cuda/norm.cuh"

namespace {

// dw[i] += sum_n dy[n,i] x[n,i] rstd[n]
template <typename T> struct rmsnorm_dw_term {
    const T *dy, *x;
    const float *rstd;
    float *dw;
    int d;
    __device__ __forceinline__ float term(size_t r, int c) const {
        const size_t i = r * d + c;
        return norm_dw_term(to_f(dy[i]), to_f(x[i]), rstd[r], 1.f);
    }
    __device__ __forceinline__ float *dst(int c) const { return dw + c; }
};

// One warp per row: the unaligned and too-wide cases, dw by colsum_launch afterwards.
template <typename T, int W, bool Y>
__global__ void __launch_bounds__(ROW_THREADS) rmsnorm_bwd_kernel(const norm_bwd_params<T> p) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31, d = p.d;
    if (row >= p.rows) return;
    const T *xr = p.x + row * d, *gr = p.dy + row * d, *w = p.w;
    T *dxr = p.dx + row * d;
    float ux = 0.f;
    for (int k = lane; k < d / W; k += 32) {
        float a[W], g[W], wv[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        load_pack<T, W>(w + k * W, wv);
#pragma unroll
        for (int j = 0; j < W; j++) ux = norm_ux_add(ux, g[j], wv[j], 1.f, a[j]);
    }
    ux = warp_sum(ux);
    const float r = p.rstd[row], c = r * r * r * ux / (float)d;
    for (int k = lane; k < d / W; k += 32) {
        float a[W], g[W], wv[W], o[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        load_pack<T, W>(w + k * W, wv);
        if (p.acc) load_pack<T, W>(dxr + k * W, o);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const float v = norm_dx(r, g[j], wv[j], 1.f, c, a[j]);
            o[j] = p.acc ? o[j] + v : v;
        }
        store_pack<T, W>(dxr + k * W, o);
        if (Y) {
            float yv[W];
#pragma unroll
            for (int j = 0; j < W; j++) yv[j] = rmsnorm_y(a[j], r, wv[j]);
            store_pack<T, W>(p.y + row * d + k * W, yv);
        }
    }
}

template <typename T, int W, int NP, bool Y>
__global__ void __launch_bounds__(ROW_THREADS) rmsnorm_bwd_fused_kernel(const norm_bwd_params<T> p) {
    extern __shared__ float4 norm_smem[];  // acc: (ROW_WARPS, d)
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, d = p.d, nk = d / W;
    float *acc = reinterpret_cast<float *>(norm_smem) + (size_t)warp * d;
    const size_t r0 = ((size_t)blockIdx.x * ROW_WARPS + warp) * p.rpw, r1 = GDN_MIN(p.rows, r0 + p.rpw);
    norm_acc_zero<W, NP>(acc, lane, nk);
    for (size_t row = r0; row < r1; row++) {
        const T *xr = p.x + row * d, *gr = p.dy + row * d;
        T *dxr = p.dx + row * d;
        const float r = p.rstd[row];
        float ux = 0.f;
#pragma unroll
        for (int i = 0; i < NP; i++)
            if (lane + 32 * i < nk) {
                const int k = lane + 32 * i;
                float a[W], g[W], wv[W];
                load_pack<T, W>(xr + k * W, a);
                load_pack<T, W>(gr + k * W, g);
                load_pack<T, W>(p.w + k * W, wv);
#pragma unroll
                for (int j = 0; j < W; j++) ux = norm_ux_add(ux, g[j], wv[j], 1.f, a[j]);
                if (Y) {  // y again, here where x and w are at hand (r is known)
                    float yv[W];
#pragma unroll
                    for (int j = 0; j < W; j++) yv[j] = rmsnorm_y(a[j], r, wv[j]);
                    store_pack<T, W>(p.y + row * d + k * W, yv);
                }
            }
        ux = warp_sum(ux);
        const float c = r * r * r * ux / (float)d;
#pragma unroll
        for (int i = 0; i < NP; i++)
            if (lane + 32 * i < nk) {
                const int k = lane + 32 * i;
                float a[W], g[W], wv[W], o[W], t[W];
                load_pack<T, W>(xr + k * W, a);
                load_pack<T, W>(gr + k * W, g);
                load_pack<T, W>(p.w + k * W, wv);
                if (p.acc) load_pack<T, W>(dxr + k * W, o);
#pragma unroll
                for (int j = 0; j < W; j++) {
                    const float v = norm_dx(r, g[j], wv[j], 1.f, c, a[j]);
                    o[j] = p.acc ? o[j] + v : v;
                    t[j] = norm_dw_term(g[j], a[j], r, 1.f);
                }
                store_pack<T, W>(dxr + k * W, o);
                add_to_f4<W>(acc + k * W, t);
            }
    }
    norm_block_sum(reinterpret_cast<const float *>(norm_smem), p.part + (size_t)blockIdx.x * d, d);
}

template <typename T, bool Y> void rmsnorm_bwd_launch_y(const norm_bwd_params<T> &p, float *dw, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    const bool vec = p.d % W == 0 && aligned16(p.dx) && aligned16(p.dy) && aligned16(p.x) && aligned16(p.w) &&
                     aligned16(p.y);
    switch (vec ? norm_packs_per_lane(p.d / W, NORM_NP_RMS) : 0) {
    case 1: norm_bwd_fused_launch<T>(rmsnorm_bwd_fused_kernel<T, W, 1, Y>, p, dw, s); return;
    case 2: norm_bwd_fused_launch<T>(rmsnorm_bwd_fused_kernel<T, W, 2, Y>, p, dw, s); return;
    case 4: norm_bwd_fused_launch<T>(rmsnorm_bwd_fused_kernel<T, W, 4, Y>, p, dw, s); return;
    case 8: norm_bwd_fused_launch<T>(rmsnorm_bwd_fused_kernel<T, W, 8, Y>, p, dw, s); return;
    default: break;  // two passes
    }
    if (vec)
        rmsnorm_bwd_kernel<T, W, Y><<<row_blocks(p.rows), ROW_THREADS, 0, s>>>(p);
    else
        rmsnorm_bwd_kernel<T, 1, Y><<<row_blocks(p.rows), ROW_THREADS, 0, s>>>(p);
    CUDA_CHECK_LAUNCH();
    colsum_launch(rmsnorm_dw_term<T>{p.dy, p.x, p.rstd, dw, p.d}, p.rows, p.d, s);
}
template <typename T> void rmsnorm_bwd_launch(const norm_bwd_params<T> &p, float *dw, cudaStream_t s) {
    if (p.y)
        rmsnorm_bwd_launch_y<T, true>(p, dw, s);
    else
        rmsnorm_bwd_launch_y<T, false>(p, dw, s);
}

}  // namespace

extern "C" {

void cuda_rmsnorm_bwd(cuda_dtype dt, void *dx, float *dw, void *y, const void *dy, const void *x, const void *w,
                      const float *rstd, int N, int d, bool acc, cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T,
                   rmsnorm_bwd_launch<T>({(T *)dx, nullptr, (T *)y, (const T *)dy, (const T *)x, nullptr, (const T *)w,
                                          rstd, nullptr, (size_t)N, d, 0, acc},
                                         dw, s));
}

}  // extern "C"
