// dropout.cu — CUDA dropout forward (twin of src/fwd/dropout.c): y = x keep / (1 - p), the
// CPU's Philox mask (keep element i <=> rng_uniform_at(seed, i) >= p). The kernel and launcher
// (dropout_kernel, dropout_launch: cuda/elementwise.cuh) are shared with the backward, which
// applies the same mask to dy.
#include "../cuda/elementwise.cuh"

extern "C" {

void cuda_dropout_fwd(cuda_dtype dt, void *y, const void *x, size_t n, double p, uint64_t seed, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, dropout_launch<T>((T *)y, (const T *)x, n, p, seed, s));
}

}  // extern "C"
