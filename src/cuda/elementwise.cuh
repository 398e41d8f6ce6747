// cuda/elementwise.cuh — device helpers shared by the memory-bound CUDA ops of cuda/ops.h
// (src/fwd/*.cu, src/bwd/*.cu, src/cuda/add_convert.cu, src/optim/adamw.cu): the dtype switch,
// fp32 load/store of float / bf16 elements, 16-byte packs, the fast sigmoid, fixed-order warp
// sums, a grid-stride elementwise engine, strided rows, and the two kernels that a forward shares
// with its backward: dropout (with the Philox4x32-10 twin of src/core/rng.c) and RoPE.
// The row norms add cuda/norm.cuh, the parameter-gradient reductions cuda/colsum.cuh, the short
// convolutions cuda/conv1d.cuh.
// Everything sits in an anonymous namespace: each .cu keeps its own copy, nothing is exported.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "../core/cuda_check.h"
#include "ops.h"


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
// The same 16 bytes as four 32-bit words (the narrow-row gated norm kernels keep packs in
// registers across a loop iteration: a pack_t<bf16, 8> copied whole is split by the compiler into
// eight 16-bit values, one register and a PRMT each). unpack_u4 = unpack: a bf16 is the high half of its fp32.
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
// GDN gates): with expf and IEEE division the conv + SiLU kernels are compute-bound (~2x slower
// at the model's shapes), and the gated norm's backward issue-bound (ncu).
__device__ __forceinline__ float sigmoid_fast(float x) { return __fdividef(1.f, 1.f + __expf(-x)); }
// sigmoid_fast bit for bit, with ex2.approx.ftz for __expf's ex2.approx (the narrow-row gated
// norm kernels: 3 SASS instructions less an element). The PTX is __expf's: t = x * -log2(e) (mul.f32
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
inline unsigned grid_for(size_t total) {
    return (unsigned)GDN_MIN(GDN_CDIV(total, (size_t)EW_THREADS), (size_t)65536);
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
// doc: NULL (position t), or (B*T) document starts: position t - doc[b*T + t] (ops.h).
constexpr int ROPE_THREADS = 128, ROPE_MAX_HALF = 512;
template <typename T>
__global__ void __launch_bounds__(ROPE_THREADS) rope_kernel(T *y, const T *x, int T_, int H, int D, double base,
                                                            float sign, const int32_t *doc) {
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    const size_t n = blockIdx.x;  // token b*T + t
    const int t = (int)(n % T_) - (doc ? doc[n] : 0), half = D / 2;
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
void rope_launch(T *y, const T *x, int B, int T_, int H, int D, double base, float sign, const int32_t *doc,
                 cudaStream_t s) {
    if (D % 2) gdn_die("cuda rope: head dim %d is odd (the rotate-half pairing needs D even)", D);
    if (D / 2 > ROPE_MAX_HALF) gdn_die("cuda rope: head dim %d > %d", D, 2 * ROPE_MAX_HALF);
    if ((size_t)B * T_ * H * D == 0) return;
    rope_kernel<T><<<(unsigned)((size_t)B * T_), ROPE_THREADS, 0, s>>>(y, x, T_, H, D, base, sign, doc);
    CUDA_CHECK_LAUNCH();
}

}  // namespace
