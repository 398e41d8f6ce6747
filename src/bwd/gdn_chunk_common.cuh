// gdn_chunk_common.cuh — what the kernels of the GDN chunk backward share (included by
// src/bwd/gdn_chunk.cu only: the backward is one translation unit): shared-memory limits, the
// recompute path's predicate, the kernels' argument struct (the caller's params and the carved
// workspace), and element-pair loads and stores between global memory, shared-memory planes
// and registers. The mma.sync fragments, plane stores and gate prefix sums are in
// src/cuda/mma.cuh.
#pragma once
#include <stdint.h>
#include <cuda_bf16.h>

#include "gdn_bwd_cuda.h"
#include "../cuda/mma.cuh"
#include "../fwd/gdn_chunk_rows.cuh"

namespace {

using namespace gdnk;
using bf16 = __nv_bfloat16;

constexpr int SMEM_MAX = 232448;  // dynamic shared memory per block on sm_90 (227 KiB)
constexpr int SMEM_SM = 233472;   // shared memory per SM on sm_90 (228 KiB; 1 KiB of it per CTA)
constexpr int cmax(int a, int b) { return a > b ? a : b; }
// The recompute path: bf16 inputs with Dk <= 128 (the final kernel takes all key columns in one
// pass). The final kernel recomputes P, Gam ⊙ KK^T, KHg and dΔ from what it has on chip instead
// of reading them from the workspace, gdn_bwd_prep_rc_kernel runs instead of gdn_bwd_prep_kernel
// (no H, no dO: it writes P's bf16 plane), and the scan forms dΔ_loc = P^T dO itself. Dk 256
// and fp32 keep them in the workspace (gdn_bwd_prep_kernel). The host asks the same
// (gdn_bwd_rc). Not to be confused with gdn.bwd_states = recompute (the chunk-start states).
__host__ __device__ constexpr bool recompute_path(int DK, int NP) { return NP == 1 && DK <= 128; }

// Everything a kernel reads: the caller's params and the carved workspace.
struct bwd_args {
    gdn_bwd_params p;    // the caller's, with dht and dh0 those of the segment (the carry
                         // between segments, gdn_chunk.cu)
    int NC;              // chunks per sequence
    int c0, NS;          // the segment: chunks c0 .. c0 + NS - 1 of every sequence (prep and
                         // final: grid.x = NS; the scan walks them in reverse)
    const float *Hs;     // (B,H,NC,Dk,Dv) chunk-start states (forward or recomputed), all chunks
    // The per-chunk workspace below holds the segment's chunks only: chunk n of (b, h) at tile
    // (b H + h) NS + n - c0 (seg_tile), shapes (B,H,NS,...)
    float *dHs;          // (Dk,Dv) gradient of each chunk's end state (scan -> final)
    float *dD;           // (C,Dv) dΔ_loc (prep) -> dΔ (scan) -> read by final; NULL on the
                         // recompute path (dΔ_loc, dΔ formed by each kernel)
    float *PA;           // (C,C) lower incl. diag: Gam ⊙ QK^T; strictly upper [j][i]:
                         // (Gam ⊙ KK^T)_ij (prep -> final); NULL on the recompute path
    bf16 *Lv;            // (2,C,C) Linv hi + lo planes, any dtype (prep -> final)
    bf16 *Wp;            // (NP,C,Dk) W planes (prep -> scan)
    bf16 *Kp;            // (2,C,Dv) KHg = diag(gamma) K H hi + lo planes, any dtype (prep ->
                         // final, which forms Y = V - KHg in fp32 and takes gamma k.dKg =
                         // -KHg.dV from it); NULL on the recompute path
    bf16 *Pp;            // (C,C) P = Gam ⊙ QK^T, the bf16 mma operand as prep_rc formed it
                         // (prep_rc -> scan, which forms dΔ_loc = P^T dO from it); NULL off
                         // the recompute path
};
// Chunk n's tile in the segment's workspace (seg_tile) and in the states (state_tile)
__device__ __forceinline__ size_t seg_tile(const bwd_args &a, size_t bh, int n) {
    return bh * a.NS + (n - a.c0);
}
__device__ __forceinline__ size_t state_tile(const bwd_args &a, size_t bh, int n) {
    return bh * a.NC + n;
}

// ---- input / output element pairs (bf16 when NP == 1, fp32 when NP == 2) --------------------
template <int NP>
__device__ __forceinline__ float2 ld_in2(const void *base, size_t off) {
    if constexpr (NP == 1) {
        const __nv_bfloat162 v = *((const __nv_bfloat162 *)((const bf16 *)base + off));
        return make_float2(__low2float(v), __high2float(v));
    } else {
        return *(const float2 *)((const float *)base + off);
    }
}
template <int NP>
__device__ __forceinline__ void st_out2(void *base, size_t off, float x0, float x1) {
    if constexpr (NP == 1)
        *(__nv_bfloat162 *)((bf16 *)base + off) = __floats2bfloat162_rn(x0, x1);
    else
        *(float2 *)((float *)base + off) = make_float2(x0, x1);
}
// (x0, x1) into global planes: plane 0 at base + off, plane 1 pl elements further
template <int NP>
__device__ __forceinline__ void stg_pair(bf16 *base, size_t pl, size_t off, float x0, float x1) {
    if constexpr (NP == 2) {
        uint32_t hi, lo;
        split2(x0, x1, hi, lo);
        *(uint32_t *)(base + off) = hi;
        *(uint32_t *)(base + pl + off) = lo;
    } else {
        *(uint32_t *)(base + off) = pack_bf16(x0, x1);
    }
}
// (x0, x1) from global planes (hi + lo when NP == 2)
template <int NP>
__device__ __forceinline__ float2 kp_pair(const bf16 *base, size_t pl, size_t off) {
    const __nv_bfloat162 h = *(const __nv_bfloat162 *)(base + off);
    float2 x = make_float2(__low2float(h), __high2float(h));
    if constexpr (NP == 2) {
        const __nv_bfloat162 l = *(const __nv_bfloat162 *)(base + pl + off);
        x.x += __low2float(l);
        x.y += __high2float(l);
    }
    return x;
}
__device__ __forceinline__ float quad_sum(float x) {  // sum over the 4 lanes of one row
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}
// KHg pair from its hi + lo bf16 pairs (as kp_pair<2>, split into load and sum)
__device__ __forceinline__ float2 kp_sum2(uint32_t hi, uint32_t lo) {
    const __nv_bfloat162 h = *(const __nv_bfloat162 *)&hi, l = *(const __nv_bfloat162 *)&lo;
    float2 x = make_float2(__low2float(h), __high2float(h));
    x.x += __low2float(l);
    x.y += __high2float(l);
    return x;
}
// fp32 pair at p (8-byte aligned) as one 8-byte load (a float2 read of the scan's shared memory
// compiles to two 4-byte loads: the alignment is lost in the address arithmetic)
__device__ __forceinline__ float2 ld_f2_once(const unsigned char *p) {
    const unsigned long long u = *(const unsigned long long *)p;
    return make_float2(__uint_as_float((uint32_t)u), __uint_as_float((uint32_t)(u >> 32)));
}
// ROWS rows of RB bytes (global row stride rs bytes) -> shared memory at dst (pitch pb bytes),
// 16 bytes per cp.async, NTHR threads; rows >= nvalid zero-filled. src, rs, dst, pb: 16-aligned.
template <int ROWS, int RB, int NTHR>
__device__ __forceinline__ void cp_rows16(uint32_t dst, int pb, const unsigned char *src, size_t rs,
                                          int nvalid, int tid) {
    constexpr int PR = RB / 16;  // pieces per row
    static_assert(RB % 16 == 0 && ROWS * PR % NTHR == 0, "cp_rows16: whole pieces per thread");
#pragma unroll 1  // unrolled, the per-piece addresses get hoisted out of the chunk loop: spills
    for (int k = 0; k < ROWS * PR / NTHR; ++k) {
        const int i = tid + k * NTHR, r = i / PR, c = (i % PR) * 16;
        const bool ok = r < nvalid;
        cp_async16(dst + r * pb + c, ok ? src + r * rs + c : src, ok ? 16 : 0);
    }
}
// EPT/2 fp32 pairs (x0, x1 from x[2k], x[2k + 1]) -> NP bf16 planes at sm + off (plane
// distance pl), the arithmetic of st_pair<NP>, stored 8 or 16 bytes at a time (off aligned so)
template <int NP, int EPT>
__device__ __forceinline__ void st_run(unsigned char *sm, int off, int pl, const float (&x)[EPT]) {
    static_assert(EPT % 4 == 0, "st_run: whole 8-byte pieces");
    uint32_t hi[EPT / 2], lo[EPT / 2];
#pragma unroll
    for (int k = 0; k < EPT / 2; ++k) {
        if constexpr (NP == 2) split2(x[2 * k], x[2 * k + 1], hi[k], lo[k]);
        else hi[k] = pack_bf16(x[2 * k], x[2 * k + 1]);
    }
#pragma unroll
    for (int k = 0; k < EPT / 2; k += EPT % 8 == 0 ? 4 : 2) {
        if constexpr (EPT % 8 == 0) {
            *(uint4 *)(sm + off + k * 4) = make_uint4(hi[k], hi[k + 1], hi[k + 2], hi[k + 3]);
            if constexpr (NP == 2)
                *(uint4 *)(sm + off + pl + k * 4) =
                    make_uint4(lo[k], lo[k + 1], lo[k + 2], lo[k + 3]);
        } else {
            *(uint2 *)(sm + off + k * 4) = make_uint2(hi[k], hi[k + 1]);
            if constexpr (NP == 2) *(uint2 *)(sm + off + pl + k * 4) = make_uint2(lo[k], lo[k + 1]);
        }
    }
}
// 4 consecutive inputs (bf16 when NP == 1, fp32 when NP == 2) from shared memory at p (8- or
// 16-byte aligned)
template <int NP>
__device__ __forceinline__ float4 ld_in4(const unsigned char *p) {
    if constexpr (NP == 1) {
        const uint2 u = *(const uint2 *)p;
        const __nv_bfloat162 lo = *(const __nv_bfloat162 *)&u.x, hi = *(const __nv_bfloat162 *)&u.y;
        return make_float4(__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi));
    } else {
        return *(const float4 *)p;
    }
}
// 4 raw inputs at sm + src -> NP bf16 planes at sm + dst: bf16 copied as they are, fp32 split
// as st_pair<2> splits
template <int NP>
__device__ __forceinline__ void in4_planes(unsigned char *sm, int dst, int pl, int src) {
    if constexpr (NP == 1) {
        *(uint2 *)(sm + dst) = *(const uint2 *)(sm + src);
    } else {
        const float4 v = *(const float4 *)(sm + src);
        const float x[4] = {v.x, v.y, v.z, v.w};
        st_run<2, 4>(sm, dst, pl, x);
    }
}

}  // namespace
