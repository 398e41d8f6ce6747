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
