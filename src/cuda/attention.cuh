// cuda/attention.cuh — code shared by the attention forward (src/fwd/attention.cu) and backward
// (src/bwd/attention.cu) kernels and their entries: the shared-memory tile layout of the
// mma.sync kernels and its tile loader, the mma.sync and exp2 wrappers, the TMA tensor map of a
// (B,T,H,D) tensor for the wgmma kernels, the choice between the wgmma and mma.sync kernels, and
// the entries' argument checks. Internal to those two files; the op's interface is
// src/fwd/attention_cuda.h.
#pragma once
#include <stdint.h>
#include <cuda.h>  // CUtensorMap (types only)
#include <cuda_bf16.h>
#include "../core/cuda_check.h"
#include "../fwd/attention_cuda.h"
#include "mma.cuh"    // PTX wrappers: smem_u32, cp_async16 (0 bytes: zero fill), ldsm4(t), pack_bf16
#include "wgmma.cuh"  // sw128 (the wgmma kernels' tile layout), the wgmma and mbarrier wrappers

// src/fwd/attention.cu: the TMA tensor map of a (B,T,H,D) bf16 tensor x of p's shape, 4-D (D, H,
// T, B), box 64 columns x 1 x `rows` rows x 1, 128-byte swizzle (one box = one 64-column panel of
// wgmma.cuh's layout; rows >= T zero-filled). NULL on success, else why it cannot be made (no
// driver entry point, a pitch or pointer TMA cannot take).
const char *attn_tma_map_bf16(CUtensorMap *map, const void *x, const attn_params *p, int rows);

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

// Whether a bf16 attention pass runs its wgmma (Hopper) kernels: p->kernels is
// ATTN_KERNELS_AUTO and cuda_sm90a_image_runs(probe) (cuda_check.h; image is the caller's static
// for it).
template <class Kernel>
static inline bool attn_wgmma_runs(const attn_params *p, Kernel probe, int *image) {
    return p->kernels == ATTN_KERNELS_AUTO && cuda_sm90a_image_runs(probe, image);
}

// Validation shared by both entries (aborts with a hint).
static inline void attn_check_common(const attn_params *p, const char *who) {
    if (!p) gdn_die("%s: params is NULL", who);
    if (p->B < 1 || p->T < 1 || p->H < 1)
        gdn_die("%s: bad shape B %d T %d H %d (each must be >= 1)", who, p->B, p->T, p->H);
    if (p->D != 64 && p->D != 128)
        gdn_die("%s: head dim %d not supported\nHINT: kernels are built for D = 64 and 128", who,
                p->D);
    if (p->window < 1) gdn_die("%s: window %d < 1\nHINT: use window >= T for full causal", who,
                               p->window);
    if (p->dtype != ATTN_DTYPE_BF16 && p->dtype != ATTN_DTYPE_FP32)
        gdn_die("%s: unknown dtype %d", who, (int)p->dtype);
    if (p->kernels != ATTN_KERNELS_AUTO && p->kernels != ATTN_KERNELS_MMA_SYNC)
        gdn_die("%s: unknown kernels %d\nHINT: zero-initialise attn_params (ATTN_KERNELS_AUTO)", who,
                (int)p->kernels);
    if (!(p->scale > 0.f)) gdn_die("%s: scale %g must be > 0", who, (double)p->scale);
}
static inline void attn_check_ptr(const void *ptr, const char *name, const char *who) {
    if (!ptr) gdn_die("%s: %s is NULL", who, name);
    if ((uintptr_t)ptr % 16)
        gdn_die("%s: %s = %p is not 16-byte aligned\nHINT: tiles are copied in 16-byte pieces; "
                "carve tensors at 16-byte offsets", who, name, ptr);
}

// Shared-memory tile of R rows x D bf16, 16-byte chunks XOR-swizzled by (row & 7): the eight
// rows an ldmatrix phase reads at one logical chunk land in eight different bank groups.
template <int D>
__device__ __forceinline__ int attn_swz(int row, int col) {
    return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}


// c (16x8 fp32) += a (16x16 bf16, row) * b (16x8 bf16, col).
// Fragments (g = lane/4, t = lane%4): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..),
// a3 (g+8, 2t+8..); b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); c0,c1 (g, 2t..), c2,c3 (g+8, 2t..).
__device__ __forceinline__ void attn_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// 2^x (MUFU.EX2, flush-to-zero; 2^-inf = 0)
__device__ __forceinline__ float attn_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Copy rows [row0, row0 + R) of head (b, h) of a (B,T,H,D) bf16 tensor into a tile of the
// attn_swz layout (ldmatrix); rows >= T are zero-filled. All NT threads of the block take part;
// no commit here. (The wgmma kernels load their 128-byte swizzled panels by TMA.)
template <int R, int D, int NT>
__device__ __forceinline__ void attn_load_tile(__nv_bfloat16 *tile, const __nv_bfloat16 *g,
                                               int b, int h, int row0, int T, int H, int tid) {
    constexpr int CPR = D / 8;  // 16-byte chunks per row
#pragma unroll
    for (int i = tid; i < R * CPR; i += NT) {
        int r = i / CPR, c = i % CPR, t = row0 + r;
        const __nv_bfloat16 *src = g;
        int bytes = 0;
        if (t < T) {
            src = g + (((size_t)b * T + t) * H + h) * D + c * 8;
            bytes = 16;
        }
        gdnk::cp_async16(gdnk::smem_u32(tile + attn_swz<D>(r, c * 8)), src, bytes);
    }
}
