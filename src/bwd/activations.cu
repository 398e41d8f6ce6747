// activations.cu — CUDA backwards of the pointwise activations (twins of src/bwd/activations.c):
//   SiLU    dx = dy s (1 + x (1 - s)),  s = sigmoid(x)
//   SwiGLU  dgate = dh up s (1 + gate (1 - s)),  dup = dh gate s,  s = sigmoid(gate)
// gate, up, dgate, dup: rows of stride ld >= cols; dh (and h) packed. With h (train.recompute =
// light) the SwiGLU backward also stores the forward's h = swiglu_h(gate, s, up), bitwise the
// forward kernel's. On the elementwise engine (cuda/elementwise.cuh).
#include "../cuda/elementwise.cuh"

namespace {

template <typename T> struct silu_bwd_op {
    T *dx;
    const T *dy, *x;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float g[W], a[W];
        load_pack<T, W>(dy + i, g);
        load_pack<T, W>(x + i, a);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const float s = sigmoid_fast(a[j]);
            g[j] = g[j] * s * (1.f + a[j] * (1.f - s));
        }
        store_pack<T, W>(dx + i, g);
    }
};
// H: also h = swiglu_h(gate, up), the forward's output. dh, h packed (rows, cols); gate, up,
// dgate, dup rows of stride gu.ld (row_stride)
template <typename T, bool H> struct swiglu_bwd_op {
    T *dgate, *dup;
    const T *dh, *gate, *up;
    T *h;  // H only
    row_stride gu;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float d[W], g[W], u[W], dg[W], du[W], hv[W];
        const size_t k = gu.at(i);
        load_pack<T, W>(dh + i, d);
        load_pack<T, W>(gate + k, g);
        load_pack<T, W>(up + k, u);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const float s = sigmoid_fast(g[j]);
            // every rounding explicit, as the norms' (norm_dx): the H and plain instances agree
            dg[j] = __fmul_rn(__fmul_rn(__fmul_rn(d[j], u[j]), s), __fmaf_rn(g[j], __fsub_rn(1.f, s), 1.f));
            du[j] = __fmul_rn(__fmul_rn(d[j], g[j]), s);
            if (H) hv[j] = swiglu_h(g[j], s, u[j]);
        }
        store_pack<T, W>(dgate + k, dg);
        store_pack<T, W>(dup + k, du);
        if (H) store_pack<T, W>(h + i, hv);
    }
};

template <typename T>
void swiglu_bwd_launch(T *dgate, T *dup, T *h, const T *dh, const T *gate, const T *up, size_t rows, int cols,
                       size_t ld, cudaStream_t s) {
    const row_stride gu = row_stride_of(rows, cols, ld);
    const size_t n = rows * (size_t)cols;
    const bool vec = row_stride_packs(gu, vec_width<T>()) && aligned16(dgate) && aligned16(dup) && aligned16(dh) &&
                     aligned16(gate) && aligned16(up);
    if (h)
        ew_launch<T>(swiglu_bwd_op<T, true>{dgate, dup, dh, gate, up, h, gu}, n, vec && aligned16(h), s);
    else
        ew_launch<T>(swiglu_bwd_op<T, false>{dgate, dup, dh, gate, up, nullptr, gu}, n, vec, s);
}

}  // namespace

extern "C" {

void cuda_silu_bwd(cuda_dtype dt, void *dx, const void *dy, const void *x, size_t n, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, ew_launch<T>(silu_bwd_op<T>{(T *)dx, (const T *)dy, (const T *)x}, n,
                                       aligned16(dx) && aligned16(dy) && aligned16(x), s));
}

void cuda_swiglu_bwd(cuda_dtype dt, void *dgate, void *dup, void *h, const void *dh, const void *gate,
                     const void *up, size_t rows, int cols, size_t ld, cudaStream_t s) {
    if (rows == 0 || cols <= 0) return;
    if (ld < (size_t)cols) gdn_die("cuda_swiglu_bwd: row stride %zu < %d columns", ld, cols);
    CUDA_DT_SWITCH(dt, T, swiglu_bwd_launch<T>((T *)dgate, (T *)dup, (T *)h, (const T *)dh, (const T *)gate,
                                               (const T *)up, rows, cols, ld, s));
}

}  // extern "C"
