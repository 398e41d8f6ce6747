// cuda/norm.cuh — device code shared by the row norms (RMSNorm, gated RMSNorm, L2 norm) in
// src/fwd/ and src/bwd/ (rmsnorm.cu, gated_rmsnorm.cu, l2norm.cu).
// Row ops: one warp per row, 8 rows per 256-thread block; lane l sums elements (or 16-byte
// packs) l, l + 32, ... in order, then a xor butterfly: the order is fixed by (D, alignment), so
// results are bitwise reproducible.
// Backward: the per-element arithmetic of the (gated) RMSNorm backward, its parameter block
// norm_bwd_params, and the fused kernels' geometry and dw partials (norm_bwd_fused_launch).
#pragma once
#include "elementwise.cuh"
#include "colsum.cuh"

namespace {

constexpr int ROW_WARPS = 8, ROW_THREADS = ROW_WARPS * 32;
inline unsigned row_blocks(size_t rows) { return (unsigned)GDN_CDIV(rows, (size_t)ROW_WARPS); }

// ss += the squares of one pack, in element order (row_sumsq's and add_rmsnorm's accumulation).
template <int W> __device__ __forceinline__ void sumsq_acc(float &ss, const float (&a)[W]) {
#pragma unroll
    for (int j = 0; j < W; j++) ss += a[j] * a[j];
}

// Sum of squares of one row of n values (n a multiple of W), by one warp: lane k takes packs
// k, k + 32, ...; the warp's sum on every lane.
template <typename T, int W>
__device__ __forceinline__ float row_sumsq(const T *xr, int n, int lane) {
    float ss = 0.f;
    for (int k = lane; k < n / W; k += 32) {
        float a[W];
        load_pack<T, W>(xr + k * W, a);
        sumsq_acc<W>(ss, a);
    }
    return warp_sum(ss);
}

// The gated norm's z (and dz): rows r at (r / zh) zld + (r % zh) D; the elements from z's start
// that cover every row's [zrow(r), zrow(r) + D) (any zld).
inline size_t gated_z_extent(size_t rows, int D, int zh, size_t zld) {
    return (rows - 1) / zh * zld + (size_t)zh * D;
}
// Byte ranges of buffers, for the launchers that take a kernel only where outputs and inputs do
// not overlap (the narrow-row gated norms load a row's inputs before earlier outputs are stored).
struct byte_range {
    uintptr_t lo, hi;  // [lo, hi); empty when lo == hi
};
inline byte_range bytes_of(const void *p, size_t bytes) {
    return byte_range{(uintptr_t)p, p ? (uintptr_t)p + bytes : (uintptr_t)p};
}
inline bool ranges_meet(byte_range a, byte_range b) { return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi; }

// ---- RMSNorm and gated RMSNorm backward ----------------------------------------------------------
// The (gated) RMSNorm backward's per-element arithmetic, every rounding explicit (the _rn
// intrinsics are never contracted into FMAs): the kernel instances with and without the
// recompute output (Y) must agree bit for bit (train.recompute = light == off), and with plain
// operators the compiler may fuse differently per instance when unrelated code around them
// changes (test_cuda_ops' rows "others as without it" check it). q = z sigmoid(z), or 1 without
// the gate.
//   ux term  ((g w) q) x, added to ux by one FMA
//   dx       ((r g) w) q - c x
//   dw term  ((g x) r) q
//   dz       ((((g x) r) w) s) (1 + z (1 - s))
__device__ __forceinline__ float norm_ux_add(float ux, float g, float w, float q, float x) {
    return __fmaf_rn(__fmul_rn(__fmul_rn(g, w), q), x, ux);
}
// norm_dx in two steps (the narrow-row kernel takes the product before the row's c is known):
// norm_dx(r, g, w, q, c, x) == norm_dx_fin(norm_dx_pre(r, g, w, q), c, x), the same roundings
__device__ __forceinline__ float norm_dx_pre(float r, float g, float w, float q) {
    return __fmul_rn(__fmul_rn(__fmul_rn(r, g), w), q);
}
__device__ __forceinline__ float norm_dx_fin(float u, float c, float x) { return __fmaf_rn(-c, x, u); }
__device__ __forceinline__ float norm_dx(float r, float g, float w, float q, float c, float x) {
    return norm_dx_fin(norm_dx_pre(r, g, w, q), c, x);
}
__device__ __forceinline__ float norm_dw_term(float g, float x, float r, float q) {
    return __fmul_rn(__fmul_rn(__fmul_rn(g, x), r), q);
}
__device__ __forceinline__ float norm_dz(float g, float x, float r, float w, float z, float s) {
    return __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(g, x), r), w), s),
                     __fmaf_rn(z, __fsub_rn(1.f, s), 1.f));
}

// RMSNorm:       u = w dy;             dx = r u - (r^3/d) x sum(u x)  (acc: dx += that, added in
//                                      fp32 and rounded once);         dw += sum_rows dy x r
// gated RMSNorm: q = silu(z), u = dy w q; dx = r u - (r^3/D) x sum(u x);
//                dz = dy x r w silu'(z), silu' = s (1 + z (1 - s));    dw += sum_rows dy x r q
//                (z NULL: q := 1 and no dz)
// Y (p.y set): also y = x r w (gated: x r w q), the forward's output, from the loaded x, w, z and r
template <typename T> struct norm_bwd_params {
    T *dx, *dz;               // (rows, d): = (rmsnorm with acc: +=); dz: gated with z only, or NULL
    T *y;                     // (rows, d) packed: the forward's y again (kernels with Y), or NULL
    const T *dy, *x, *z, *w;  // dy, x, z (rows, d), z: gated only, or NULL; w (d)
    const float *rstd;        // (rows), saved by the forward
    float *part;              // (blocks, d): dw partials of the fused kernels, one row per block
    size_t rows;
    int d, rpw;               // rpw: rows per warp of the fused kernels (norm_rows_per_warp)
    bool acc;                 // rmsnorm only
    int zh;                   // gated: z's and dz's row r at (r / zh) zld + (r % zh) d
    size_t zld;               //        (zh = 1, zld = d: packed)
    __device__ __forceinline__ size_t zrow(size_t r) const { return (r / zh) * zld + (r % zh) * d; }
};

// Fused kernels (16-byte packs, d = nk W with nk <= 32 NP): dx as the one-warp-per-row kernels,
// dw partials in the same pass. Block b owns the rows [8 b rpw, 8 (b + 1) rpw) (clipped to rows); warp w of
// it the run [8 b rpw + w rpw, + rpw), row after row. Lane l owns the packs k = l + 32 i (i < NP,
// k < nk), columns [k W, k W + W), and adds its rows' dw terms there, in row order, to acc[w][c]
// (shared memory, 8 d floats). The second loop over a row reads it again, from L1 (it was read an
// instant before). Partials in registers, or the row kept in registers for the second loop, take
// 80-170 registers and run 1.3x slower (H200, bf16, 32768 x 1024: 86-88 us against 66 us).
// At the end the block sums acc[0..8)[c] in warp order and writes part[b][c]; colsum_final_dw
// then adds sum_b part[b][c] (fixed order) into dw[c]. The grid is a function of (rows, d) only:
// bitwise the same run after run, on any GPU. With Y, y is stored in the FIRST loop over a row,
// where x, w (z, sigmoid(z)) are in registers and r is the saved rstd: the kernels keep the
// registers of those without it (sm_90a: 64, no spill, at the model's bf16 shapes; in the second
// loop the gated one spills 28 bytes under its 64-register bound).
template <int W> __device__ __forceinline__ void add_to_f4(float *p, const float (&v)[W]) {
    static_assert(W % 4 == 0, "float4 moves");
#pragma unroll
    for (int j = 0; j < W; j += 4) {
        float4 t = *reinterpret_cast<float4 *>(p + j);
        t.x += v[j];
        t.y += v[j + 1];
        t.z += v[j + 2];
        t.w += v[j + 3];
        *reinterpret_cast<float4 *>(p + j) = t;
    }
}
// Zeroes the lane's columns of its warp's acc (only that lane touches them until norm_block_sum).
template <int W, int NP> __device__ __forceinline__ void norm_acc_zero(float *acc, int lane, int nk) {
#pragma unroll
    for (int i = 0; i < NP; i++)
        if (lane + 32 * i < nk)
#pragma unroll
            for (int j = 0; j < W; j += 4)
                *reinterpret_cast<float4 *>(acc + (lane + 32 * i) * W + j) = make_float4(0.f, 0.f, 0.f, 0.f);
}
// acc (shared, ROW_WARPS x d) -> part_row[c] = acc[0][c] + acc[1][c] + ... + acc[7][c], in that
// order. Every thread of the block calls it.
__device__ __forceinline__ void norm_block_sum(const float *acc, float *part_row, int d) {
    __syncthreads();
    for (int c = threadIdx.x * 4; c < d; c += ROW_THREADS * 4) {
        float4 s = *reinterpret_cast<const float4 *>(acc + c);
#pragma unroll
        for (int w = 1; w < ROW_WARPS; w++) {
            const float4 t = *reinterpret_cast<const float4 *>(acc + (size_t)w * d + c);
            s.x += t.x;
            s.y += t.y;
            s.z += t.z;
            s.w += t.w;
        }
        *reinterpret_cast<float4 *>(part_row + c) = s;
    }
}

// Fused-path geometry, a function of (rows, d) only. Rows per warp: the largest power of two
// <= NORM_RPW_MAX that still gives NORM_MIN_BLOCKS blocks, but at least NORM_RPW_MIN (a block's
// partial row, written and read back, costs ~1 / (6 rpw) of its rows' bf16 traffic); doubled
// while the partials (blocks x d floats) would pass NORM_SCRATCH.
constexpr int NORM_RPW_MIN = 4, NORM_RPW_MAX = 32;
constexpr size_t NORM_MIN_BLOCKS = 512, NORM_SCRATCH = (size_t)1 << 20;
constexpr int NORM_NP_RMS = 8, NORM_NP_GATED = 4;  // packs per lane, at most (smem 8 d; gated: sg registers)
constexpr size_t NORM_SMEM_DEFAULT = 48 * 1024;    // dynamic shared memory without the opt-in
inline int norm_rows_per_warp(size_t rows, int d) {
    size_t rpw = NORM_RPW_MAX;
    while (rpw > (size_t)NORM_RPW_MIN && GDN_CDIV(rows, ROW_WARPS * rpw) < NORM_MIN_BLOCKS) rpw /= 2;
    while (rpw < rows && GDN_CDIV(rows, ROW_WARPS * rpw) * (size_t)d > NORM_SCRATCH) rpw *= 2;
    return (int)rpw;
}
// Packs per lane of a fused kernel for nk packs per row: the least of 1, 2, 4, ... <= npmax with
// 32 np >= nk; 0 when none (the two-pass path).
inline int norm_packs_per_lane(int nk, int npmax) {
    for (int np = 1; np <= npmax; np *= 2)
        if (32 * np >= nk) return np;
    return 0;
}
template <typename T>
void norm_bwd_fused_launch(void (*kernel)(norm_bwd_params<T>), norm_bwd_params<T> p, float *dw, cudaStream_t s) {
    p.rpw = norm_rows_per_warp(p.rows, p.d);
    const size_t blocks = GDN_CDIV(p.rows, (size_t)ROW_WARPS * p.rpw);
    const size_t smem = (size_t)ROW_WARPS * p.d * sizeof(float);  // the warps' dw partials
    if (smem > NORM_SMEM_DEFAULT)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    p.part = colsum_scratch(blocks * p.d);
    kernel<<<(unsigned)blocks, ROW_THREADS, smem, s>>>(p);
    CUDA_CHECK_LAUNCH();
    colsum_final_dw(dw, p.part, p.d, (int)blocks, s);
}

}  // namespace
