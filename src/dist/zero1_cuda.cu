// zero1_cuda.cu — ZeRO-1's device copy (zero1.h) on the GPU backend's compute stream (the legacy
// default stream).
#include "zero1.h"
#include "../cuda/ops.h"

extern "C" void zero1_device_copy(void *dst, bool to_bf16, const void *src, size_t n) {
    cuda_convert(dst, to_bf16 ? CUDA_BF16 : CUDA_F32, src, CUDA_F32, n, NULL);
}
