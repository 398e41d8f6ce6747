// cuda/mma.cuh — device helpers shared by the chunkwise GDN kernels (the backward's, in
// src/bwd/gdn_chunk*.cuh; the forward in src/fwd/gdn_chunk.cu uses the PTX wrappers and keeps its
// own fragment loaders with compile-time pitches; the attention kernels use the PTX wrappers
// too): PTX wrappers (cp.async, ldmatrix, mma.sync m16n8k16 bf16 -> fp32),
// fragment loads from shared memory with run-time pitches, the bf16 hi + lo split that lets
// fp32 operands run on bf16 tensor cores (3 products per mma, ~1e-5 relative), tile copies
// global -> shared, and the per-chunk gate prefix sums in double-float log2 form.
//
// Operand matrices live in shared memory as NP planes of bf16 (NP = 1: bf16; NP = 2: hi, lo with
// x = hi + lo to ~2^-17 relative), described by smat {base, row pitch in bytes, plane
// distance in bytes}. Row pitches are (cols + 8) elements, so the 8 row addresses of one
// ldmatrix land in distinct 16-byte bank groups.
#pragma once
#include <stdint.h>
#include <cuda_bf16.h>

// cp.async groups, the one set of wrappers for every kernel (GDN, attention, the conv and
// memory-bound kernels through cuda/elementwise.cuh): commit this thread's cp.async since the last
// commit as a group; wait until at most N of its groups (the newest) are in flight; wait for all.
// The "memory" clobbers keep the compiler's shared-memory accesses on their side of each. sm_80+
// (an older device has no cp.async: the conv kernels' cp_async_zfill copies synchronously there,
// and these are no-ops).
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

namespace gdnk {

constexpr int C = 64;  // tokens per chunk (GDN_CHUNK)
constexpr double LOG2E_D = 1.4426950408889634073599;

struct smat {
    uint32_t base;  // shared-memory address of plane 0, element (0, 0)
    int pb;         // row pitch, bytes
    int pl;         // plane distance, bytes
};

// ---- PTX wrappers ------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
// 16 bytes global -> shared; bytes = 0 zero-fills (src must still be a valid address)
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}
__device__ __forceinline__ void ldsm4(uint32_t r[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm4t(uint32_t r[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
// c (16x8 fp32) += a (16x16 bf16, row) * b (16x8 bf16, col)
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float x0, float x1) {
    __nv_bfloat162 v = __floats2bfloat162_rn(x0, x1);  // x0 in the low half
    return *(uint32_t *)&v;
}
// fp32 pair -> bf16 hi pair + bf16 lo pair (x = hi + lo to ~2^-17 relative)
__device__ __forceinline__ void split2(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    hi = *(uint32_t *)&h;
    lo = pack_bf16(x0 - __low2float(h), x1 - __high2float(h));
}

// ---- fragments (mma.sync m16n8k16 layouts; g = lane/4, t = lane%4) ---------------------------
// A (16x16): a0 = A[g][2t..], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
// B (16x8):  b0 = B[2t..][g], b1 = B[2t+8..][g]; one x4 load gives two n-tiles: r0,r1 | r2,r3
// C (16x8):  c0,c1 = C[g][2t..], c2,c3 = C[g+8][2t..]

// A (rows m0.., cols k0..) from row-major [m][k] storage
template <int NP>
__device__ __forceinline__ void lda(uint32_t (&a)[NP][4], smat s, int m0, int k0, int lane) {
    const uint32_t ad = s.base + (m0 + (lane & 15)) * s.pb + (k0 + (lane >> 4) * 8) * 2;
#pragma unroll
    for (int p = 0; p < NP; ++p) ldsm4(a[p], ad + p * s.pl);
}
// A from [k][m] storage (A^T stored)
template <int NP>
__device__ __forceinline__ void lda_t(uint32_t (&a)[NP][4], smat s, int k0, int m0, int lane) {
    const uint32_t ad = s.base + (k0 + ((lane >> 4) & 1) * 8 + (lane & 7)) * s.pb +
                        (m0 + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll
    for (int p = 0; p < NP; ++p) ldsm4t(a[p], ad + p * s.pl);
}
// B (two n-tiles n0..n0+15, k0..k0+15) from [n][k] storage
template <int NP>
__device__ __forceinline__ void ldb(uint32_t (&b)[NP][4], smat s, int n0, int k0, int lane) {
    const uint32_t ad = s.base + (n0 + (lane >> 4) * 8 + (lane & 7)) * s.pb +
                        (k0 + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll
    for (int p = 0; p < NP; ++p) ldsm4(b[p], ad + p * s.pl);
}
// B (two n-tiles) from [k][n] storage
template <int NP>
__device__ __forceinline__ void ldb_t(uint32_t (&b)[NP][4], smat s, int k0, int n0, int lane) {
    const uint32_t ad = s.base + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * s.pb +
                        (n0 + (lane >> 4) * 8) * 2;
#pragma unroll
    for (int p = 0; p < NP; ++p) ldsm4t(b[p], ad + p * s.pl);
}
// c += a * b[n-tile NT]; with planes: a_lo b_hi + a_hi b_lo + a_hi b_hi (lo x lo dropped). A and
// B may have different plane counts (a bf16 input, one exact plane, times a hi + lo value).
template <int NT, int NPA, int NPB = NPA>
__device__ __forceinline__ void mma_p(float c[4], const uint32_t (&a)[NPA][4],
                                      const uint32_t (&b)[NPB][4]) {
    if constexpr (NPA == 2) mma16816(c, a[1], b[0][2 * NT], b[0][2 * NT + 1]);
    if constexpr (NPB == 2) mma16816(c, a[0], b[1][2 * NT], b[1][2 * NT + 1]);
    mma16816(c, a[0], b[0][2 * NT], b[0][2 * NT + 1]);
}

// Warp product: acc (16 x 8*NT, rows m0.., cols n0..) += A[m0.., k] B[k, n0..] for k in
// [k0, k1) (multiples of 16). TA: A stored [k][m] (else [m][k]); TB: B stored [k][n] (else
// [n][k]). NT even. A has NP planes, B has NPB (default NP).
template <int NP, bool TA, bool TB, int NT, int NPB = NP>
__device__ __forceinline__ void wmm(float (&acc)[NT][4], smat a, smat b, int m0, int n0, int k0,
                                    int k1, int lane) {
    static_assert(NT % 2 == 0, "B fragments come in pairs of n-tiles");
    for (int k = k0; k < k1; k += 16) {
        uint32_t fa[NP][4];
        if constexpr (TA) lda_t<NP>(fa, a, k, m0, lane);
        else lda<NP>(fa, a, m0, k, lane);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            uint32_t fb[NPB][4];
            if constexpr (TB) ldb_t<NPB>(fb, b, k, n0 + np * 16, lane);
            else ldb<NPB>(fb, b, n0 + np * 16, k, lane);
            mma_p<0, NP, NPB>(acc[2 * np], fa, fb);
            mma_p<1, NP, NPB>(acc[2 * np + 1], fa, fb);
        }
    }
}

// Call f(row, col, v0, v1) for each element pair of a 16 x 8*NT accumulator at (m0, n0):
// (row, col) and (row, col + 1) hold v0, v1.
template <int NT, class F>
__device__ __forceinline__ void frag_each(const float (&acc)[NT][4], int m0, int n0, int lane,
                                          F f) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
            f(m0 + g + hr * 8, n0 + nt * 8 + 2 * t, acc[nt][2 * hr], acc[nt][2 * hr + 1]);
}

// ---- plane stores and loads ------------------------------------------------------------------
// (x0, x1) as bf16 at byte offset off of sm (and the lo plane pl further)
template <int NP>
__device__ __forceinline__ void st_pair(unsigned char *sm, int off, int pl, float x0, float x1) {
    if constexpr (NP == 2) {
        uint32_t hi, lo;
        split2(x0, x1, hi, lo);
        *(uint32_t *)(sm + off) = hi;
        *(uint32_t *)(sm + off + pl) = lo;
    } else {
        *(uint32_t *)(sm + off) = pack_bf16(x0, x1);
    }
}
template <int NP>
__device__ __forceinline__ void st_one(unsigned char *sm, int off, int pl, float x) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    *(__nv_bfloat16 *)(sm + off) = h;
    if constexpr (NP == 2)
        *(__nv_bfloat16 *)(sm + off + pl) = __float2bfloat16_rn(x - __bfloat162float(h));
}
// the value held at byte offset off (hi + lo)
template <int NP>
__device__ __forceinline__ float ld_one(const unsigned char *sm, int off, int pl) {
    float x = __bfloat162float(*(const __nv_bfloat16 *)(sm + off));
    if constexpr (NP == 2) x += __bfloat162float(*(const __nv_bfloat16 *)(sm + off + pl));
    return x;
}
template <int NP>
__device__ __forceinline__ float2 ld_pair(const unsigned char *sm, int off, int pl) {
    const __nv_bfloat162 h = *(const __nv_bfloat162 *)(sm + off);
    float2 x = make_float2(__low2float(h), __high2float(h));
    if constexpr (NP == 2) {
        const __nv_bfloat162 l = *(const __nv_bfloat162 *)(sm + off + pl);
        x.x += __low2float(l);
        x.y += __high2float(l);
    }
    return x;
}

// rows x cols bf16 block (row stride rs elements) -> one bf16 plane at dst (pitch pb bytes),
// cp.async; rows >= nvalid zero-filled. cols % 8 == 0.
__device__ __forceinline__ void cp_rows_bf16(uint32_t dst, int pb, const __nv_bfloat16 *src,
                                             size_t rs, int rows, int cols, int nvalid, int tid,
                                             int nthr) {
    const int pieces = cols / 8;
    for (int i = tid; i < rows * pieces; i += nthr) {
        const int r = i / pieces, c = (i % pieces) * 8;
        const bool ok = r < nvalid;
        cp_async16(dst + r * pb + c * 2, ok ? src + r * rs + c : src, ok ? 16 : 0);
    }
}
// rows x cols fp32 block -> NP bf16 planes at sm + dst (pitch pb, plane distance pl), through
// registers; rows >= nvalid are zero. cols % 8 == 0, src 16-byte aligned rows.
template <int NP>
__device__ __forceinline__ void cvt_rows_f32(unsigned char *sm, int dst, int pb, int pl,
                                             const float *src, size_t rs, int rows, int cols,
                                             int nvalid, int tid, int nthr) {
    const int pieces = cols / 8;
    for (int i = tid; i < rows * pieces; i += nthr) {
        const int r = i / pieces, c = (i % pieces) * 8;
        float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
        if (r < nvalid) {
            v0 = *(const float4 *)(src + r * rs + c);
            v1 = *(const float4 *)(src + r * rs + c + 4);
        }
        uint4 hi, lo;
        split2(v0.x, v0.y, hi.x, lo.x);
        split2(v0.z, v0.w, hi.y, lo.y);
        split2(v1.x, v1.y, hi.z, lo.z);
        split2(v1.z, v1.w, hi.w, lo.w);
        *(uint4 *)(sm + dst + r * pb + c * 2) = hi;
        if constexpr (NP == 2) *(uint4 *)(sm + dst + r * pb + c * 2 + pl) = lo;
    }
}
// An input tensor (bf16 when NP == 1, fp32 when NP == 2) -> planes.
template <int NP>
__device__ __forceinline__ void load_in_rows(unsigned char *sm, int dst, int pb, int pl,
                                             const void *src, size_t rs, int rows, int cols,
                                             int nvalid, int tid, int nthr) {
    if constexpr (NP == 1)
        cp_rows_bf16(smem_u32(sm + dst), pb, (const __nv_bfloat16 *)src, rs, rows, cols, nvalid,
                     tid, nthr);
    else
        cvt_rows_f32<2>(sm, dst, pb, pl, (const float *)src, rs, rows, cols, nvalid, tid, nthr);
}

// ---- gates -----------------------------------------------------------------------------------
// One warp: from g[0..C) (natural log, zero past the chunk's end or with the gate off) the
// log2 prefix sums G_r = log2(e) (g_0 + .. + g_r), summed in double and kept as hi + lo floats,
// so that G_i - G_j = (hi_i - hi_j) + (lo_i - lo_j) is accurate to fp32 rounding of the
// difference even when |G| reaches ~2000 (gates near -20 over 64 tokens). Also
// gam_r = 2^G_r and hdec_r = 2^(G_{C-1} - G_r). Padded tokens (g = 0) leave G constant, so
// G_{C-1} is the gate sum of the valid tokens.
__device__ __forceinline__ void gates_warp(const float *g, float *Gh, float *Gl, float *gam,
                                           float *hdec, int lane) {
    double x0 = g[lane], x1 = g[lane + 32];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double y0 = __shfl_up_sync(0xffffffffu, x0, o);
        const double y1 = __shfl_up_sync(0xffffffffu, x1, o);
        if (lane >= o) {
            x0 += y0;
            x1 += y1;
        }
    }
    x1 += __shfl_sync(0xffffffffu, x0, 31);
    x0 *= LOG2E_D;
    x1 *= LOG2E_D;
    const double xc = __shfl_sync(0xffffffffu, x1, 31);
    const float h0 = (float)x0, l0 = (float)(x0 - (double)h0);
    const float h1 = (float)x1, l1 = (float)(x1 - (double)h1);
    const float hc = (float)xc, lc = (float)(xc - (double)hc);
    Gh[lane] = h0;
    Gl[lane] = l0;
    Gh[lane + 32] = h1;
    Gl[lane + 32] = l1;
    gam[lane] = exp2f(h0) * exp2f(l0);
    gam[lane + 32] = exp2f(h1) * exp2f(l1);
    hdec[lane] = exp2f((hc - h0) + (lc - l0));
    hdec[lane + 32] = exp2f((hc - h1) + (lc - l1));
}
// Gam_ij = 2^(G_i - G_j) for j <= i, else 0 (the exponent above the diagonal is never used)
__device__ __forceinline__ float gam_ij(const float *Gh, const float *Gl, int i, int j) {
    const float e = exp2f((Gh[i] - Gh[j]) + (Gl[i] - Gl[j]));
    return j <= i ? e : 0.f;
}

}  // namespace gdnk
