// embedding.cu — CUDA forward of the token embedding (twin of src/fwd/embedding.c):
// out[n, :] = wte[tok[n], :], tok a device int32 array. One block per token, 16-byte copies when
// d and the pointers allow.
#include "../cuda/elementwise.cuh"

namespace {

template <typename T, int W>
__global__ void __launch_bounds__(128) embedding_fwd_kernel(T *out, const int32_t *tok, const T *wte, int d) {
    const size_t n = blockIdx.x;
    const T *src = wte + (size_t)tok[n] * d;
    T *dst = out + n * d;
    for (int k = threadIdx.x; k < d / W; k += blockDim.x)
        *reinterpret_cast<pack_t<T, W> *>(dst + k * W) = *reinterpret_cast<const pack_t<T, W> *>(src + k * W);
}

template <typename T> void embedding_fwd_launch(T *out, const int32_t *tok, const T *wte, int N, int d, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (d % W == 0 && aligned16(out) && aligned16(wte))
        embedding_fwd_kernel<T, W><<<N, 128, 0, s>>>(out, tok, wte, d);
    else
        embedding_fwd_kernel<T, 1><<<N, 128, 0, s>>>(out, tok, wte, d);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" {

void cuda_embedding_fwd(cuda_dtype dt, void *out, const int32_t *tok, const void *wte, int N, int d,
                        cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, embedding_fwd_launch<T>((T *)out, tok, (const T *)wte, N, d, s));
}

}  // extern "C"
