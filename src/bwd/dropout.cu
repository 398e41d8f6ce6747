// dropout.cu — CUDA dropout backward (twin of src/bwd/dropout.c): dx = dy keep / (1 - p) with
// the forward's mask, by the forward's kernel (dropout_launch, cuda/elementwise.cuh) on dy.
#include "../cuda/elementwise.cuh"

extern "C" {

void cuda_dropout_bwd(cuda_dtype dt, void *dx, const void *dy, size_t n, double p, uint64_t seed, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, dropout_launch<T>((T *)dx, (const T *)dy, n, p, seed, s));
}

}  // extern "C"
