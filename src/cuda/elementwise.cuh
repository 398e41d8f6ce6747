// cuda/elementwise.cuh — device helpers shared by the kernels behind src/cuda/ops.h
// (src/fwd/elementwise.cu, src/fwd/crossentropy.cu, src/bwd/elementwise.cu, src/optim/adamw.cu):
// the dtype switch, fp32 load/store of float / bf16 elements, 16-byte packs, a grid-stride
// elementwise engine, fixed-order warp reductions and the Philox4x32-10 twin of src/core/rng.c.
// Everything sits in an anonymous namespace: each .cu keeps its own copy, nothing is exported
// (but colsum_scratch, declared at the end).
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "../core/cuda_check.h"
#include "ops.h"
#include "mma.cuh"  // the cp.async group wrappers

// Runs `...` with T = float or __nv_bfloat16 according to dt (one switch per public launcher).
#define CUDA_DT_SWITCH(dt, T, ...)                                                            \
    do {                                                                                      \
        switch (dt) {                                                                         \
        case CUDA_F32: {                                                                      \
            typedef float T;                                                                  \
            __VA_ARGS__;                                                                      \
        } break;                                                                              \
        case CUDA_BF16: {                                                                     \
            typedef __nv_bfloat16 T;                                                          \
            __VA_ARGS__;                                                                      \
        } break;                                                                              \
        default: gdn_die("%s: unknown cuda_dtype %d", __func__, (int)(dt));                    \
        }                                                                                     \
    } while (0)

namespace {

constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);  // round to nearest even
}

// W consecutive elements moved as one access (W * sizeof(T) = 16 bytes: one 128-bit load).
template <typename T, int W> struct alignas(sizeof(T) * W) pack_t { T v[W]; };
template <typename T, int W> __device__ __forceinline__ void load_pack(const T *p, float (&f)[W]) {
    const pack_t<T, W> k = *reinterpret_cast<const pack_t<T, W> *>(p);
#pragma unroll
    for (int j = 0; j < W; j++) f[j] = to_f(k.v[j]);
}
template <typename T, int W> __device__ __forceinline__ void store_pack(T *p, const float (&f)[W]) {
    pack_t<T, W> k;
#pragma unroll
    for (int j = 0; j < W; j++) k.v[j] = from_f<T>(f[j]);
    *reinterpret_cast<pack_t<T, W> *>(p) = k;
}
// load_pack split in two, for kernels that issue the raw loads of several tokens back to back
// (the compiler may not move a load above a store that might alias) and convert later.
template <typename T, int W> __device__ __forceinline__ pack_t<T, W> ld_pack(const T *p) {
    return *reinterpret_cast<const pack_t<T, W> *>(p);
}
template <typename T, int W> __device__ __forceinline__ void unpack(const pack_t<T, W> &k, float (&f)[W]) {
#pragma unroll
    for (int j = 0; j < W; j++) f[j] = to_f(k.v[j]);
}
// The same 16 bytes as four 32-bit words (the s13 norm kernels keep packs in registers across a
// loop iteration: a pack_t<bf16, 8> copied whole is split by the compiler into eight 16-bit
// values, one register and a PRMT each). unpack_u4 = unpack: a bf16 is the high half of its fp32.
__device__ __forceinline__ uint4 ld_u4(const void *p) { return *reinterpret_cast<const uint4 *>(p); }
template <typename T, int W> __device__ __forceinline__ void unpack_u4(const uint4 &k, float (&f)[W]);
template <> __device__ __forceinline__ void unpack_u4<float, 4>(const uint4 &k, float (&f)[4]) {
    f[0] = __uint_as_float(k.x), f[1] = __uint_as_float(k.y), f[2] = __uint_as_float(k.z), f[3] = __uint_as_float(k.w);
}
template <> __device__ __forceinline__ void unpack_u4<__nv_bfloat16, 8>(const uint4 &k, float (&f)[8]) {
    const unsigned u[4] = {k.x, k.y, k.z, k.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(u[i] << 16);  // element 2i: the low half (little endian)
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}
template <typename T> constexpr int vec_width() { return 16 / (int)sizeof(T); }
// Widest causal conv1d whose taps the tiled forward and backward keep in registers.
constexpr int CONV_KMAX = 8;
inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// The forward outputs that a backward writes again (train.recompute = light: rmsnorm_bwd,
// gated_rmsnorm_bwd, swiglu_bwd with their extra output), one definition each for the forward
// kernel and the backward: from the same fp32 inputs (the saved rstd, the loaded x, w, z, gate,
// up) the same bits. Products left to right, each rounded (__fmul_rn: the compiler may not fuse
// one into an FMA, whatever surrounds the call); s = sigmoid_fast(z) or sigmoid_fast(gate).
//   RMSNorm:        y = (x r) w
//   gated RMSNorm:  y = ((x r) w) (z s)          (no gate: (x r) w)
//   SwiGLU:         h = (g s) u
__device__ __forceinline__ float rmsnorm_y(float x, float r, float w) { return __fmul_rn(__fmul_rn(x, r), w); }
__device__ __forceinline__ float gated_rmsnorm_y(float x, float r, float w, float z, float s) {
    return __fmul_rn(rmsnorm_y(x, r, w), __fmul_rn(z, s));
}
__device__ __forceinline__ float swiglu_h(float g, float s, float u) { return __fmul_rn(__fmul_rn(g, s), u); }
// sigmoid by the fast intrinsics: 1 / (1 + e^-x) with MUFU ex2 and rcp (limits exact: e^-x =
// inf -> 0, e^-x = 0 -> 1); ~2 ulp + 1e-7 |x| relative, far below the fp32 and bf16
// tolerances. Every GPU sigmoid uses it (SiLU in the conv kernels, SwiGLU, the gated norm, the
// GDN gates): with expf and IEEE division the conv + SiLU kernels were compute-bound (~2x slower
// at the model's shapes), and the gated norm's backward issue-bound (ncu, session 9).
__device__ __forceinline__ float sigmoid_fast(float x) { return __fdividef(1.f, 1.f + __expf(-x)); }
// sigmoid_fast bit for bit, with ex2.approx.ftz for __expf's ex2.approx (the s13 gated norm
// kernels: 3 SASS instructions less an element). The PTX is __expf's: t = x * -log2(e) (mul.f32
// by 0xBFB8AA3B), e = ex2(t), 1 + e, div.approx. The two ex2 differ only where t < -126, where
// the non-ftz one scales by 2 around MUFU.EX2 (FSETP + 2 FMUL) to return a subnormal e < 2^-126
// and the ftz one returns MUFU.EX2(t) (0, or at most ~2^-126); either way 1 + e rounds to 1
// (e < 2^-25, half an ulp of 1). For every other t (subnormal and NaN included) both run the one
// MUFU.EX2 on the same t (SASS: the ftz form is FMUL + MUFU.EX2 alone).
__device__ __forceinline__ float sigmoid_fast_ex2ftz(float x) {
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * __int_as_float(0xBFB8AA3B)));
    return __fdividef(1.f, 1.f + e);
}

// Sum over the 32 lanes by xor butterfly: every lane ends with the same, fixed-order value
// (a + b == b + a in IEEE arithmetic, so partners compute identical sums at each level).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Elementwise engine: op.template apply<W>(i) handles elements [i, i + W). Packs of
// W = vec_width<T>() cover [0, n - n % W) when every pointer of op is 16-byte aligned (the
// launcher decides), then single elements cover the tail (or everything when unaligned).
constexpr int EW_THREADS = 256;
template <int W, class Op> __global__ void __launch_bounds__(EW_THREADS) ew_kernel(const Op op, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t nv = n / W;
    for (size_t k = tid; k < nv; k += stride) op.template apply<W>(k * W);
    for (size_t i = nv * W + tid; i < n; i += stride) op.template apply<1>(i);
}
template <typename T, class Op> void ew_launch(const Op &op, size_t n, bool vec_ok, cudaStream_t s) {
    if (n == 0) return;
    constexpr int W = vec_width<T>();
    const size_t units = vec_ok ? n / W + n % W : n;
    const unsigned blocks = (unsigned)GDN_MAX((size_t)1, GDN_MIN(GDN_CDIV(units, (size_t)EW_THREADS), (size_t)65536));
    if (vec_ok)
        ew_kernel<W, Op><<<blocks, EW_THREADS, 0, s>>>(op, n);
    else
        ew_kernel<1, Op><<<blocks, EW_THREADS, 0, s>>>(op, n);
    CUDA_CHECK_LAUNCH();
}

// Element i of a packed (rows, cols) tensor -> its offset in a (rows, cols) tensor of row stride
// ld >= cols (SwiGLU's gate and up: the halves of the MLP's fused projection, ld = 2 cols). The
// elementwise ops index the packed side by i; ld == cols is i itself. The division is 32-bit
// where every index fits (fits32: rows cols < 2^32, the model's sizes), else 64-bit.
struct row_stride {
    size_t cols, ld;
    bool fits32;
    __device__ __forceinline__ size_t at(size_t i) const {
        if (ld == cols) return i;
        if (fits32) {
            const uint32_t c = (uint32_t)cols, r = (uint32_t)i / c;
            return (size_t)r * ld + ((uint32_t)i - r * c);
        }
        return i / cols * ld + i % cols;
    }
};
inline row_stride row_stride_of(size_t rows, int cols, size_t ld) {
    return {(size_t)cols, ld, rows * (size_t)cols < ((size_t)1 << 32)};
}
// Whether packs of W elements of the packed side stay inside one strided row and start W-aligned
// in it (with 16-byte aligned bases: ew_launch's vec_ok). ld == cols: always (the flat form,
// a tail of single elements when cols % W != 0).
inline bool row_stride_packs(const row_stride &m, int W) {
    return m.ld == m.cols || (m.cols % (size_t)W == 0 && m.ld % (size_t)W == 0);
}

// Philox4x32-10, word for word the CPU's philox4x32 (src/core/rng.c).
__device__ __forceinline__ uint4 philox4x32_dev(uint64_t key, uint64_t ctr) {
    uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
#pragma unroll
    for (int round = 0; round < 10; round++) {
        const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return make_uint4(c0, c1, c2, c3);
}

// Dropout y = x * keep / (1 - p), keep_i = rng_uniform_at(seed, i) >= p. The CPU draws
// u = (w >> 11) 2^-53 with w the 64-bit word (o0:o1 for even i, o2:o3 for odd i) of Philox block
// i >> 1; u >= p  <=>  (w >> 11) >= ceil(p 2^53) = thr (p 2^53 is exact in double), so the
// device compares integers and draws one block per pair of elements.
template <typename T> struct dropout_op {
    T *y;
    const T *x;
    size_t n;
    uint64_t seed, thr;
    float scale;
    __device__ __forceinline__ void pair(size_t k) const {  // elements 2k, 2k + 1
        const uint4 o = philox4x32_dev(seed, k);
        const uint64_t w0 = ((uint64_t)o.x << 32 | o.y) >> 11, w1 = ((uint64_t)o.z << 32 | o.w) >> 11;
        const size_t i = 2 * k;
        y[i] = from_f<T>(w0 >= thr ? to_f(x[i]) * scale : 0.f);
        if (i + 1 < n) y[i + 1] = from_f<T>(w1 >= thr ? to_f(x[i + 1]) * scale : 0.f);
    }
};
template <typename T> __global__ void __launch_bounds__(EW_THREADS) dropout_kernel(const dropout_op<T> op) {
    const size_t pairs = (op.n + 1) / 2, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < pairs; k += stride) op.pair(k);
}
template <typename T>
void dropout_launch(T *y, const T *x, size_t n, double p, uint64_t seed, cudaStream_t s) {
    if (!(p >= 0.0 && p <= 1.0)) gdn_die("cuda dropout: p = %g is outside [0, 1]", p);
    if (n == 0) return;
    if (p == 0.0) {
        if (y != x) CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(T), cudaMemcpyDeviceToDevice, s));
        return;
    }
    const dropout_op<T> op = {y, x, n, seed, (uint64_t)ceil(p * 9007199254740992.0),
                              p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.f};
    const size_t pairs = (n + 1) / 2;
    const unsigned blocks = (unsigned)GDN_MIN(GDN_CDIV(pairs, (size_t)EW_THREADS), (size_t)65536);
    dropout_kernel<T><<<blocks, EW_THREADS, 0, s>>>(op);
    CUDA_CHECK_LAUNCH();
}

// RoPE (rotate-half pairs (i, i + D/2), angle t base^(-2i/D)), one block per token. sign = +1:
// the forward rotation; sign = -1: its transpose (the backward), with the same cos/sin bits.
// The angles are taken in double exactly as the CPU does (an fp32 angle t theta is off by up to
// ~4e-3 rad at t = 1e5), then rounded to fp32 cos/sin once per block in shared memory.
constexpr int ROPE_THREADS = 128, ROPE_MAX_HALF = 512;
template <typename T>
__global__ void __launch_bounds__(ROPE_THREADS) rope_kernel(T *y, const T *x, int T_, int H, int D, double base,
                                                            float sign) {
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    const size_t n = blockIdx.x;  // token b*T + t
    const int t = (int)(n % T_), half = D / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double sd, cd;
        sincos((double)t * pow(base, -2.0 * i / D), &sd, &cd);
        cs[i] = (float)cd;
        sn[i] = sign * (float)sd;
    }
    __syncthreads();
    const T *xr = x + n * H * D;
    T *yr = y + n * H * D;
    for (int e = threadIdx.x; e < H * half; e += blockDim.x) {
        const int h = e / half, i = e % half;
        const size_t o = (size_t)h * D + i;
        const float x1 = to_f(xr[o]), x2 = to_f(xr[o + half]), c = cs[i], s = sn[i];
        yr[o] = from_f<T>(x1 * c - x2 * s);
        yr[o + half] = from_f<T>(x2 * c + x1 * s);
    }
}
template <typename T>
void rope_launch(T *y, const T *x, int B, int T_, int H, int D, double base, float sign, cudaStream_t s) {
    if (D % 2) gdn_die("cuda rope: head dim %d is odd (the rotate-half pairing needs D even)", D);
    if (D / 2 > ROPE_MAX_HALF) gdn_die("cuda rope: head dim %d > %d", D, 2 * ROPE_MAX_HALF);
    if ((size_t)B * T_ * H * D == 0) return;
    rope_kernel<T><<<(unsigned)((size_t)B * T_), ROPE_THREADS, 0, s>>>(y, x, T_, H, D, base, sign);
    CUDA_CHECK_LAUNCH();
}

// ---- channel segments of conv_silu3 (src/fwd/conv_silu.cu, src/bwd/conv_silu.cu) -------------
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

// ---- conv + SiLU kernels that stage by cp.async (src/fwd/conv_silu.cu, src/bwd/conv_silu.cu) ----
// The s13 kernels' per-thread rings and the backward's v2 kernel (where s13 does not apply) stage
// their token rows in shared memory by cp.async (bench/model_gpu.md, sessions 10 and 13). The
// helper they share: BYTES (4, 8 or 16) from global src to shared dst, asynchronously; !valid:
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
// rounded as from_f (cvt.rn per element; store_pack's struct copy became four 2-byte stores).
__device__ __forceinline__ void st_pack4(float *p, const float (&f)[4]) {  // (a float4 became four stores)
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(f[0]), "f"(f[1]), "f"(f[2]), "f"(f[3])
                 : "memory");
}
__device__ __forceinline__ void st_pack4(__nv_bfloat16 *p, const float (&f)[4]) {
    const __nv_bfloat162 a = __floats2bfloat162_rn(f[0], f[1]), b = __floats2bfloat162_rn(f[2], f[3]);
    const unsigned long long lo = *reinterpret_cast<const unsigned *>(&a), hi = *reinterpret_cast<const unsigned *>(&b);
    *reinterpret_cast<unsigned long long *>(p) = lo | hi << 32;  // one 8-byte store (a uint2 became two)
}
// Blocks of a kernel resident on the whole device at once (per SM x SMs; the s13 kernels' grids).
template <class Kern> int resident_blocks(Kern kern, int threads, size_t smem) {
    int nb = 0, dev = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kern, threads, smem));
    CUDA_CHECK(cudaGetDevice(&dev));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return GDN_MAX(nb, 1) * sms;
}
// The gated norm's z (and dz): rows r at (r / zh) zld + (r % zh) D; the elements from z's start
// that cover every row's [zrow(r), zrow(r) + D) (any zld).
inline size_t gated_z_extent(size_t rows, int D, int zh, size_t zld) {
    return (rows - 1) / zh * zld + (size_t)zh * D;
}
// Byte ranges of buffers, for the launchers that take a kernel only where outputs and inputs do
// not overlap (the s13 gated norms load a row's inputs before earlier outputs are stored).
struct byte_range {
    uintptr_t lo, hi;  // [lo, hi); empty when lo == hi
};
inline byte_range bytes_of(const void *p, size_t bytes) {
    return byte_range{(uintptr_t)p, p ? (uintptr_t)p + bytes : (uintptr_t)p};
}
inline bool ranges_meet(byte_range a, byte_range b) { return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi; }
// The s13 launchers' setup: kern may use smem bytes of dynamic shared memory (set at every launch,
// as the v2 launchers do), and its resident blocks, counted once into *cache (one per kernel
// instance; a race stores the same value).
template <class Kern> int s13_setup(Kern kern, int threads, size_t smem, int *cache) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (!*cache) *cache = resident_blocks(kern, threads, smem);
    return *cache;
}
// One group of rows of a v2 block: ROWS tiles of TT tokens, tile w = row rg ROWS + w of the
// (B, tiles) grid = (b, t0). s_t0[w] = t0 (negative: past the last row), s_bt[w] = b T.
// Virtual token v (v >= -(K-1)): tile w = clamp(v / TT, 0, ROWS - 1), token t0[w] + v - w TT, so
// tiles that follow each other in one sequence (the common case) give consecutive tokens, and
// the tokens before tile 0 and after tile ROWS - 1 are its halos.
constexpr int CONV_V2_NOROW = -(1 << 30);
template <int ROWS, int TT>
__device__ __forceinline__ void conv_v2_rows(int *s_t0, int *s_bt, int rg, int rows, int tiles, int T_) {
    if (threadIdx.x < ROWS) {
        const int r = rg * ROWS + (int)threadIdx.x, b = r / tiles;
        s_t0[threadIdx.x] = r < rows ? (r - b * tiles) * TT : CONV_V2_NOROW;
        s_bt[threadIdx.x] = r < rows ? b * T_ : 0;
    }
}
// Stages virtual tokens V0 .. V0 + NV - 1, channels [cg0, cg0 + CG), into dst: row i = v - V0 at
// i CG sizeof(T) bytes, CB bytes per cp.async (coalesced: NQ = CG sizeof(T) / CB consecutive
// threads take one row). Tokens outside [0, T) and channels >= C are zero-filled, nothing read.
// at(tok, c): the global address of channel c of token row tok = b T + t; safe: any CB-aligned
// global address (the unread source of zero fills).
template <typename T, int CG, int CB, int NV, int V0, int ROWS, int TT, int THREADS, class At>
__device__ __forceinline__ void conv_v2_stage(unsigned char *dst, const At &at, const void *safe, int cg0, int C,
                                              int T_, const int *s_t0, const int *s_bt) {
    constexpr int E = CB / (int)sizeof(T), NQ = CG / E, STEP = THREADS / NQ;
    static_assert(CG % E == 0 && THREADS % NQ == 0, "a row of the tile is whole chunks, rows whole thread groups");
    const int q = (int)threadIdx.x % NQ, c = cg0 + q * E;
    const bool cok = c < C;
#pragma unroll 4
    for (int i = (int)threadIdx.x / NQ; i < NV; i += STEP) {
        const int v = i + V0, w = min((int)((unsigned)max(v, 0) / TT), ROWS - 1);
        const int t = s_t0[w] + v - w * TT;
        const bool ok = cok && t >= 0 && t < T_;
        cp_async_zfill<CB>(dst + (size_t)i * (CG * sizeof(T)) + q * CB, ok ? (const void *)at(s_bt[w] + t, c) : safe,
                           ok);
    }
}

}  // namespace

// Not in the anonymous namespace (one definition, in src/bwd/elementwise.cu): at least nfloats
// of device scratch for deterministic partial sums, one buffer per device, reused by every
// reduction-bearing backward launched on its stream (colsum_launch, the norm and conv backwards).
float *colsum_scratch(size_t nfloats);
// Counts a launch of a conv + SiLU s13 kernel (one definition, in src/fwd/conv_silu.cu;
// cuda_conv_silu_s13_launches reads the count).
void conv_silu_s13_count();
// Counts a launch of an s13 gated norm kernel (one definition, in src/fwd/elementwise.cu;
// cuda_norm_s13_launches reads it).
void norm_s13_count();
