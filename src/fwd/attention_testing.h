// attention_testing.h — for tests and benchmarks only (tests/gpu/test_attention.cu,
// bench/attention_bench.cu): which bf16 kernels attention_fwd / attention_bwd run by default on
// this device, and how many times the wgmma kernels were launched, so that a test can tell a
// silent fallback to the mma.sync kernels from the path it meant to cover. The op's interface is
// attention_cuda.h; a test forces the mma.sync kernels with attn_params.kernels.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// 1 when a bf16 attention_fwd with kernels = ATTN_KERNELS_AUTO runs the Hopper kernel
// attention_fwd_wgmma_kernel (wgmma.mma_async, TMA producer warpgroup): the current device has
// compute capability 9.x and the binary carries the sm_90a image. Measured on an H200:
// bench/attention.md.
int attention_fwd_wgmma_available(void);
// The same for attention_bwd (bf16, both modes): the dK/dV and dQ kernels
// attention_bwd_dkdv_wgmma_kernel and attention_bwd_dq_wgmma_kernel.
int attention_bwd_wgmma_available(void);
// How many times attention_fwd has launched attention_fwd_wgmma_kernel in this process; a call on
// the wgmma path that fell back to the mma.sync kernel (stderr: "attention_fwd_wgmma_kernel
// cannot run") does not count.
unsigned long attention_fwd_wgmma_launches(void);
// How many wgmma backward kernels attention_bwd has launched in this process (2 per
// deterministic call, 1 per nondeterministic one); a pass that fell back to its mma.sync kernel
// (stderr: "... cannot run") does not count.
unsigned long attention_bwd_wgmma_launches(void);

#ifdef __cplusplus
}
#endif
