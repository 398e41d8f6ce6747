// cuda/conv1d.cuh — device code shared by the short causal convolutions' forward and backward
// (src/fwd/conv1d.cu, src/bwd/conv1d.cu): the widest K kept in registers, the channel segments
// of conv_silu3 (GDN's q, k, v in one call), the cp.async staging helper, the packed store of
// four values, and the setup of the persistent (one wave) grids of the ring kernels.
#pragma once
#include "elementwise.cuh"
#include "mma.cuh"  // the cp.async group wrappers

namespace {

// Widest causal conv1d whose taps the tiled forward and backward keep in registers.
constexpr int CONV_KMAX = 8;

// ---- channel segments of conv_silu3 --------------------------------------------------------------
// Channels [cs[s], cs[s+1]) of one call belong to buffer s of three (GDN's q, k, v), each packed
// with its own width as row stride. Selects, not an indexed array: indexing a parameter array by
// a run-time segment puts the kernel's parameters on the stack.
struct conv_segs {
    int cs[4];  // 0, C0, C0 + C1, C
    static conv_segs of(const int cw[3]) { return {{0, cw[0], cw[0] + cw[1], cw[0] + cw[1] + cw[2]}}; }
    __device__ __forceinline__ int width(int c) const {
        const bool s1 = c >= cs[1], s2 = c >= cs[2];
        return s2 ? cs[3] - cs[2] : s1 ? cs[2] - cs[1] : cs[1];
    }
    // channel c's element of token row r in its segment's buffer (b0, b1, b2)
    template <typename P> __device__ __forceinline__ P at(P b0, P b1, P b2, size_t r, int c) const {
        const bool s1 = c >= cs[1], s2 = c >= cs[2];
        const int lo = s2 ? cs[2] : s1 ? cs[1] : 0;
        return (s2 ? b2 : s1 ? b1 : b0) + r * width(c) + (c - lo);
    }
    // every width a multiple of W and every non-empty buffer aligned to mask + 1 (the tiled path)
    template <typename P> bool packed(const P *b /*[3]*/, int W, uintptr_t mask) const {
        bool ok = true;
        for (int i = 0; i < 3; i++) {
            const int w = cs[i + 1] - cs[i];
            ok = ok && w % W == 0 && (w == 0 || ((uintptr_t)b[i] & mask) == 0);
        }
        return ok;
    }
};

// ---- conv + SiLU kernels that stage by cp.async ---------------------------------------------------
// The ring kernels' per-thread rings and the backward's staged kernel (where the ring kernel does
// not apply) stage their token rows in shared memory by cp.async (bench/model_gpu.md). The helper
// they share: BYTES (4, 8 or 16) from global src to shared dst, asynchronously; !valid:
// dst zero-filled and nothing read (src must still be a BYTES-aligned global address). sm_80+;
// older devices load and store synchronously.
template <int BYTES> __device__ __forceinline__ void cp_async_zfill(void *dst, const void *src, bool valid) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async moves 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    const int n = valid ? BYTES : 0;
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(BYTES), "r"(n)
                     : "memory");
#else
    struct alignas(BYTES) chunk { unsigned char b[BYTES]; };
    chunk c = {};
    if (valid) c = *(const chunk *)src;
    *(chunk *)dst = c;
#endif
}
// (cp_async_commit, cp_async_wait<N>, cp_async_wait_all: cuda/mma.cuh)
// Four fp32 values stored as one pack of T (8 bytes in bf16, 16 in fp32; p aligned to it), each
// rounded as from_f (cvt.rn per element; store_pack's struct copy compiles to four 2-byte stores).
__device__ __forceinline__ void st_pack4(float *p, const float (&f)[4]) {  // (a float4 compiles to four stores)
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(f[0]), "f"(f[1]), "f"(f[2]), "f"(f[3])
                 : "memory");
}
__device__ __forceinline__ void st_pack4(__nv_bfloat16 *p, const float (&f)[4]) {
    const __nv_bfloat162 a = __floats2bfloat162_rn(f[0], f[1]), b = __floats2bfloat162_rn(f[2], f[3]);
    const unsigned long long lo = *reinterpret_cast<const unsigned *>(&a), hi = *reinterpret_cast<const unsigned *>(&b);
    *reinterpret_cast<unsigned long long *>(p) = lo | hi << 32;  // one 8-byte store (a uint2 compiles to two)
}
// Blocks of a kernel resident on the whole device at once (per SM x SMs; the ring kernels' grids).
template <class Kern> int resident_blocks(Kern kern, int threads, size_t smem) {
    int nb = 0, dev = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kern, threads, smem));
    CUDA_CHECK(cudaGetDevice(&dev));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return GDN_MAX(nb, 1) * sms;
}
// The ring launchers' setup for a persistent grid: kern may use smem bytes of dynamic shared
// memory (set at every launch, as the staged launcher does), and its resident blocks, counted once
// into *cache (one per kernel instance; a race stores the same value).
template <class Kern> int persistent_setup(Kern kern, int threads, size_t smem, int *cache) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (!*cache) *cache = resident_blocks(kern, threads, smem);
    return *cache;
}

}  // namespace
