// cuda_check.h — checked CUDA, cuBLAS(Lt) and NCCL calls (file, line, function, statement and
// the library's own message), and the after-launch check. Include from .cu files only.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "common.h"

#define CUDA_CHECK(stmt)                                                                     \
    do {                                                                                     \
        cudaError_t cuda_rc_ = (stmt);                                                       \
        if (cuda_rc_ != cudaSuccess)                                                         \
            gdn_die_at("CUDA", #stmt, cudaGetErrorString(cuda_rc_), __func__, __FILE__,     \
                       __LINE__);                                                            \
    } while (0)

// After every kernel launch: catches bad launch configurations at once.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#ifdef CUBLAS_API_H_
#define CUBLAS_CHECK(stmt)                                                                   \
    do {                                                                                     \
        cublasStatus_t cublas_rc_ = (stmt);                                                  \
        if (cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                             \
            gdn_die_at("cuBLAS", #stmt, cublasGetStatusString(cublas_rc_), __func__,        \
                       __FILE__, __LINE__);                                                  \
    } while (0)
#endif

#ifdef NCCL_H_
#define NCCL_CHECK(stmt)                                                                     \
    do {                                                                                     \
        ncclResult_t nccl_rc_ = (stmt);                                                      \
        if (nccl_rc_ != ncclSuccess)                                                         \
            gdn_die_at("NCCL", #stmt, ncclGetErrorString(nccl_rc_), __func__, __FILE__,     \
                       __LINE__);                                                            \
    } while (0)
#endif

// Whether kernels built for sm_90a (wgmma) can run here: the current device has compute
// capability 9.x and the binary carries the sm_90a image of `probe` (a build without one would
// run the compute_80 PTX, JIT-compiled to the trap; that image reports the PTX version it came
// from, 80). *image is the caller's static, -1 until the first call (concurrent first calls store
// the same value); the device is asked on every call. The attention passes and the GDN backward
// select their wgmma kernels through it.
template <class Kernel>
static inline bool cuda_sm90a_image_runs(Kernel probe, int *image) {
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major != 9) return false;
    if (*image < 0) {
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncGetAttributes(&fa, probe));
        *image = fa.ptxVersion == 0 || fa.ptxVersion >= 90;
    }
    return *image != 0;
}
