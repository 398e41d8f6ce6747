// attention_cuda.h — CUDA causal sliding-window softmax attention (DESIGN 2.2), forward and
// backward, flash-attention scheme: q/k/v tiles in shared memory, online softmax, bf16 tensor
// cores (mma.sync m16n8k16, fp32 accumulate; sm_80 and sm_90a), only the log-sum-exp saved per
// row, the backward recomputes the scores. Key/query blocks outside the window are never
// visited, so the cost is O(T * window), not O(T^2). On sm_90a the bf16 forward runs on
// wgmma.mma_async (attention_fwd_wgmma_selected below; GDN_ATTN_WGMMA=0 keeps mma.sync), and so
// does the bf16 backward (attention_bwd_wgmma_selected; GDN_ATTN_WGMMA_BWD=0 keeps mma.sync).
//
//   s_ij = scale q_i.k_j  for  i - window < j <= i   (window >= T: full causal)
//   lse_i = log sum_j exp(s_ij),  o_i = sum_j exp(s_ij - lse_i) v_j
//
// Layout as the CPU twins (fwd_cpu.h: attention_fwd_cpu, bwd_cpu.h: attention_bwd_cpu):
// q, k, v, o, dO, dq, dk, dv are (B,T,H,D) token-major, element (b,t,h,e) at
// ((b*T + t)*H + h)*D + e; lse is (B,H,T) fp32. RoPE is applied to q and k before the call.
// dtype: bf16 (tensor cores) or fp32 (plain fp32 FMA path, slower, for checks and fp32 runs).
// The backward is deterministic by default (no atomics): dk/dv by one CTA per key block looping
// over the query blocks that see it, dq by a second pass over key blocks. Opt-in
// (nondeterministic = 1, bf16 only): one pass, dq accumulated with fp32 atomics (fewer matrix
// products, dq not bitwise reproducible). All gradients are "=".
#pragma once
#include <stddef.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ATTN_DTYPE_BF16 = 0, ATTN_DTYPE_FP32 = 1 } attn_dtype;

typedef struct {
    int B, T, H, D;          // D in {64, 128}
    int window;              // >= 1; query i sees keys i - window < j <= i (>= T: full causal)
    float scale;             // usually 1/sqrt(D)
    attn_dtype dtype;        // of q, k, v, o, dO, dq, dk, dv
    const void *q, *k, *v;   // (B,T,H,D)
    void *o;                 // (B,T,H,D)  written by attention_fwd
    float *lse;              // (B,H,T) natural log; written by the forward, read by the
                             // backward to recompute p = exp(s - lse) without a max/sum pass
    const void *dO;          // (B,T,H,D)  backward only
    void *dq, *dk, *dv;      // (B,T,H,D)  backward only, overwritten (=)
    int nondeterministic;    // backward only. 0 (default; zero-initialised params get it): two
                             // passes, dq, dk, dv bitwise reproducible run to run. 1, bf16: one
                             // pass, the dK/dV pass also adds dS K into an fp32 dq accumulator
                             // in the workspace with atomics (flash-attention 2: 5 matrix products
                             // per tile instead of 7); the order of the additions varies, so dq
                             // is not bitwise reproducible (dk, dv still are). 1, fp32: ignored
                             // (the fp32 path has only the deterministic passes).
    void *workspace;         // attention_workspace_bytes(p) bytes, backward only
    cudaStream_t stream;
} attn_params;

// Bytes of device workspace the backward needs: D_i = dO_i . o_i, fp32 (B,H,T); with
// nondeterministic = 1 and bf16 also the dq accumulator, fp32 (B,T,H,D). Reads B, T, H, D,
// dtype, nondeterministic.
size_t attention_workspace_bytes(const attn_params *p);
// Public entries: check shapes, dtype, pointers and alignment (16 bytes), then launch.
void attention_fwd(const attn_params *p);  // reads q, k, v; writes o, lse
void attention_bwd(const attn_params *p);  // reads q, k, v, o, lse, dO; writes dq, dk, dv
// 1 when attention_fwd runs bf16 through the Hopper kernel (wgmma.mma_async, operands in shared
// memory): on a compute capability 9.x current device when the binary carries the sm_90a image,
// unless GDN_ATTN_WGMMA=0 is in the environment (read once; keeps the mma.sync kernel, for
// comparisons). Measured on an H200: bench/attention.md, session 6.
int attention_fwd_wgmma_selected(void);
// How the wgmma forward runs: attention_fwd_wgmma3_kernel (TMA producer warpgroup) in the
// variant GDN_ATTN_WGMMA_FWD3 picks (read on every call: unset = pp, 2 K/V stages with consumer
// ping-pong; 1 or 2, 3: 2 or 3 stages without; pp3: 3 with; any other value aborts), in words for
// test and bench logs.
const char *attention_fwd_wgmma_version_name(void);
// How many times attention_fwd has launched attention_fwd_wgmma3_kernel in this process; a call
// on the wgmma path that fell back to the mma.sync kernel (stderr: "attention_fwd_wgmma3_kernel
// cannot run") does not count. test_attention checks it, so that a silent fallback fails.
unsigned long attention_fwd_wgmma3_launches(void);
// The same for attention_bwd (bf16): 1 when it runs the Hopper dK/dV and dQ kernels (wgmma, both
// modes) on a compute capability 9.x device with the sm_90a image; GDN_ATTN_WGMMA_BWD=0 keeps the
// mma.sync backward (read once).
int attention_bwd_wgmma_selected(void);
// The bf16 wgmma backward runs the TMA-producer kernels attention_bwd_dkdv_wgmma3_kernel and
// attention_bwd_dq_wgmma3_kernel in the variant GDN_ATTN_WGMMA_BWD3 picks (read on every call):
// unset, "1" or "2" / "3": 2 / 3 stages, "pp" (or "pp2") / "pp3": the same with the consumer
// warpgroups in ping-pong; any other value aborts. Returns the stages now (+ 10 with ping-pong).
int attention_bwd_wgmma3_selected(void);
// How many wgmma3 backward kernels attention_bwd has launched in this process (2 per
// deterministic call, 1 per nondeterministic one); a pass that fell back to its mma.sync kernel
// (stderr: "... cannot run") does not count. test_attention checks it.
unsigned long attention_bwd_wgmma3_launches(void);

#ifdef __cplusplus
}
#endif

// ---- device helpers shared by src/fwd/attention.cu and src/bwd/attention.cu ---------------
#if defined(__CUDACC__) && defined(ATTN_DEVICE_HELPERS)
#include <stdint.h>
#include <cuda_bf16.h>
#include "../cuda/mma.cuh"  // PTX wrappers: smem_u32, cp_async16 (0 bytes: zero fill), ldsm4(t), pack_bf16
#include "../cuda/wgmma.cuh"             // sw128 (the wgmma path's tile layout), the wgmma and mbarrier wrappers
#include <cuda.h>                // CUtensorMap (types only)

// src/fwd/attention.cu: the TMA tensor map of a (B,T,H,D) bf16 tensor x of p's shape, 4-D (D, H,
// T, B), box 64 columns x 1 x `rows` rows x 1, 128-byte swizzle (one box = one 64-column panel of
// wgmma.cuh's layout; rows >= T zero-filled). NULL on success,
// else why it cannot be made (no driver entry point, a pitch or pointer TMA cannot take).
const char *attn_tma_map_bf16(CUtensorMap *map, const void *x, const attn_params *p, int rows);

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

// Whether a bf16 attention pass runs its wgmma (Hopper) kernels: the environment variable
// env_name is not "0" (read once into the caller's static env) and cuda_sm90a_image_runs(probe)
// (cuda_check.h; image is the caller's static for it).
template <class Kernel>
static inline int attn_wgmma_selected(const char *env_name, Kernel probe, int *env, int *image) {
    if (*env < 0) {
        const char *s = getenv(env_name);
        *env = !(s && strcmp(s, "0") == 0);
    }
    return *env && cuda_sm90a_image_runs(probe, image);
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
#endif
