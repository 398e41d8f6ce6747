// add_convert.cu — the memory helpers of cuda/ops.h: y += x (cuda_add: residual adds and
// gradient sums of the backend) and dtype conversion (cuda_convert), on the elementwise engine
// (cuda/elementwise.cuh: 16-byte packs when every pointer is aligned, then single elements).
#include "elementwise.cuh"

namespace {

template <typename T> struct add_op {
    T *y;
    const T *x;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float a[W], b[W];
        load_pack<T, W>(y + i, a);
        load_pack<T, W>(x + i, b);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] += b[j];
        store_pack<T, W>(y + i, a);
    }
};
template <typename D, typename S> struct convert_op {
    D *y;
    const S *x;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float a[W];
        load_pack<S, W>(x + i, a);
        store_pack<D, W>(y + i, a);
    }
};

}  // namespace

extern "C" {

void cuda_add(cuda_dtype dt, void *y, const void *x, size_t n, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, ew_launch<T>(add_op<T>{(T *)y, (const T *)x}, n, aligned16(y) && aligned16(x), s));
}

void cuda_convert(void *dst, cuda_dtype ddt, const void *src, cuda_dtype sdt, size_t n, cudaStream_t s) {
    if (n == 0) return;
    const bool vec = aligned16(dst) && aligned16(src);
    if (ddt == sdt) {
        const size_t es = ddt == CUDA_BF16 ? 2 : 4;
        CUDA_DT_SWITCH(ddt, T, (void)sizeof(T));  // rejects an unknown dtype
        if (dst != src) CUDA_CHECK(cudaMemcpyAsync(dst, src, n * es, cudaMemcpyDeviceToDevice, s));
    } else if (ddt == CUDA_BF16 && sdt == CUDA_F32) {
        ew_launch<float>(convert_op<__nv_bfloat16, float>{(__nv_bfloat16 *)dst, (const float *)src}, n, vec, s);
    } else if (ddt == CUDA_F32 && sdt == CUDA_BF16) {
        ew_launch<float>(convert_op<float, __nv_bfloat16>{(float *)dst, (const __nv_bfloat16 *)src}, n, vec, s);
    } else {
        gdn_die("cuda_convert: unknown dtype pair %d <- %d", (int)ddt, (int)sdt);
    }
}

}  // extern "C"
