// rope.cu — CUDA RoPE forward (twin of src/fwd/rope.c): rotate-half pairs (i, i + D/2) of each
// head by the angle t base^(-2i/D), t the position (t - doc_start[b T + t] with document starts).
// The kernel and launcher (rope_kernel, rope_launch: cuda/elementwise.cuh) are shared with the
// backward, which applies the transposed rotation.
#include "../cuda/elementwise.cuh"

extern "C" {

void cuda_rope_fwd(cuda_dtype dt, void *y, const void *x, int B, int T, int H, int D, double base,
                   const int32_t *doc_start, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, E, rope_launch<E>((E *)y, (const E *)x, B, T, H, D, base, 1.f, doc_start, s));
}

}  // extern "C"
