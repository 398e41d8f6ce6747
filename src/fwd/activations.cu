// activations.cu — CUDA forwards of the pointwise activations (twins of src/fwd/activations.c):
//   SiLU    y = x sigmoid(x)
//   SwiGLU  h = silu(gate) up    (gate, up: rows of stride ld >= cols, the halves of the MLP's
//                                 fused gate/up projection when ld = 2 cols; h packed)
// On the elementwise engine (cuda/elementwise.cuh); h is swiglu_h, the bits the backward writes
// again under train.recompute = light.
#include "../cuda/elementwise.cuh"

namespace {

template <typename T> struct silu_fwd_op {
    T *y;
    const T *x;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float a[W];
        load_pack<T, W>(x + i, a);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = a[j] * sigmoid_fast(a[j]);
        store_pack<T, W>(y + i, a);
    }
};
// h packed (rows, cols), gate and up rows of stride gu.ld (row_stride)
template <typename T> struct swiglu_fwd_op {
    T *h;
    const T *gate, *up;
    row_stride gu;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float g[W], u[W];
        const size_t j = gu.at(i);
        load_pack<T, W>(gate + j, g);
        load_pack<T, W>(up + j, u);
#pragma unroll
        for (int j = 0; j < W; j++) g[j] = swiglu_h(g[j], sigmoid_fast(g[j]), u[j]);  // swiglu_bwd's h: the same
        store_pack<T, W>(h + i, g);
    }
};

}  // namespace

extern "C" {

void cuda_silu_fwd(cuda_dtype dt, void *y, const void *x, size_t n, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, ew_launch<T>(silu_fwd_op<T>{(T *)y, (const T *)x}, n, aligned16(y) && aligned16(x), s));
}

void cuda_swiglu_fwd(cuda_dtype dt, void *h, const void *gate, const void *up, size_t rows, int cols, size_t ld,
                     cudaStream_t s) {
    if (rows == 0 || cols <= 0) return;
    if (ld < (size_t)cols) gdn_die("cuda_swiglu_fwd: row stride %zu < %d columns", ld, cols);
    const row_stride gu = row_stride_of(rows, cols, ld);
    CUDA_DT_SWITCH(dt, T,
                   ew_launch<T>(swiglu_fwd_op<T>{(T *)h, (const T *)gate, (const T *)up, gu}, rows * (size_t)cols,
                                row_stride_packs(gu, vec_width<T>()) && aligned16(h) && aligned16(gate) &&
                                    aligned16(up),
                                s));
}

}  // extern "C"
