// backend_gpu.h — the GPU backend (backend_cuda.h) for programs built with or without CUDA: in a
// translation unit of a program that links gdn_cuda (GDN_HAVE_CUDA, a public definition of that
// target) each call forwards to backend_cuda.h; without CUDA there is no GPU: no devices, no
// backend, nothing to set. Callers choose between the CPU and the GPU with plain ifs.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "backend.h"
#ifdef GDN_HAVE_CUDA
#include "backend_cuda.h"
#endif

// Whether this program has the CUDA backend.
static inline bool backend_gpu_built(void) {
#ifdef GDN_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

// Usable CUDA devices (0 when none, no driver, or no CUDA backend); never fails.
static inline int backend_gpu_devices(void) {
#ifdef GDN_HAVE_CUDA
    return backend_cuda_devices();
#else
    return 0;
#endif
}

// The GPU backend in bf16 or fp32 mode (backend_cuda_get; it needs a device); NULL without the
// CUDA backend.
static inline const backend *backend_gpu_get(bool bf16) {
#ifdef GDN_HAVE_CUDA
    return backend_cuda_get(bf16);
#else
    (void)bf16;
    return NULL;
#endif
}

// swa.deterministic (backend_cuda_set_attention_deterministic); nothing without the CUDA backend.
static inline void backend_gpu_set_attention_deterministic(bool on) {
#ifdef GDN_HAVE_CUDA
    backend_cuda_set_attention_deterministic(on);
#else
    (void)on;
#endif
}

// train.gemm_tune (backend_cuda_set_gemm_tune); nothing without the CUDA backend.
static inline void backend_gpu_set_gemm_tune(bool on) {
#ifdef GDN_HAVE_CUDA
    backend_cuda_set_gemm_tune(on);
#else
    (void)on;
#endif
}

// gdn.bwd_segment_chunks (backend_cuda_set_gdn_bwd_segment_chunks); nothing without the CUDA
// backend.
static inline void backend_gpu_set_gdn_bwd_segment_chunks(int chunks) {
#ifdef GDN_HAVE_CUDA
    backend_cuda_set_gdn_bwd_segment_chunks(chunks);
#else
    (void)chunks;
#endif
}

// Datasheet dense peak FLOP/s of the current device and its name (backend_cuda_peak_flops);
// 0 and "" without the CUDA backend.
static inline double backend_gpu_peak_flops(bool bf16, char *name, size_t namelen) {
#ifdef GDN_HAVE_CUDA
    return backend_cuda_peak_flops(bf16, name, namelen);
#else
    (void)bf16;
    if (namelen) name[0] = 0;
    return 0;
#endif
}
