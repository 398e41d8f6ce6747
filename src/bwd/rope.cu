// rope.cu — CUDA RoPE backward (twin of src/bwd/rope.c): the transpose of the forward's rotation,
// by the forward's kernel (rope_launch, cuda/elementwise.cuh) with sign -1 (the same cos / sin
// bits).
#include "../cuda/elementwise.cuh"

extern "C" {

void cuda_rope_bwd(cuda_dtype dt, void *dx, const void *dy, int B, int T, int H, int D, double base,
                   const int32_t *doc_start, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, E, rope_launch<E>((E *)dx, (const E *)dy, B, T, H, D, base, -1.f, doc_start, s));
}

}  // extern "C"
