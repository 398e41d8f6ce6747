// wgmma.cuh — Hopper (sm_90a) warpgroup MMA helpers: wgmma.mma_async m64nNk16 bf16 -> fp32 with
// operands in shared memory (matrix descriptors, 128-byte swizzle) or A in registers, plus the
// fences around them. Used by the bf16 attention forward's and backward's wgmma paths
// (src/fwd/attention.cu, src/bwd/attention.cu) and proved element by element by
// tests/gpu/test_wgmma.cu, which uses exactly these helpers.
// The wrappers contain sm_90a-only PTX: call them only from code compiled under
// __CUDA_ARCH_FEAT_SM90_ALL.
//
// Shared-memory layout (PTX ISA 9.7.15.5.1.2, "Shared Memory Matrix Layout", 128B swizzling):
// a bf16 tile of R rows x C columns (C a multiple of 64) is C/64 panels of R x 64; each panel row
// is one 128-byte line, and the 16-byte chunk index inside a line is XORed with (row & 7)
// (Swizzle<3,4,3>: address bits 4-6 ^= bits 7-9). Each panel must start on a 1024-byte boundary
// (R a multiple of 8 and a 1024-byte aligned tile base) so that the hardware, which swizzles by
// address bits, sees row r of a panel at bits 7-9 = r & 7 and the descriptor's base offset is 0.
// The same physical layout serves both majors:
//   K-major operand (A = rows M, or B = rows N, columns = K; no transpose): the rows of the tile
//     are M (or N), k-step s starts 32 s bytes into the line of panel s / 4;
//   N-major B (imm-trans-b = 1; V stored [keys][dims], keys = K): the rows are K, the columns N;
//     k-step s starts at row 16 s, the N columns go on through the next panels.
#pragma once
#include <stdint.h>

namespace wgm {

// Element offset of (r, c) in an R-row tile of the layout above.
template <int R>
__host__ __device__ constexpr int sw128(int r, int c) {
    return (c >> 6) * (R * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}

// Matrix descriptor (PTX ISA 9.7.15.5.1.2.2, "Matrix Descriptor Format"): bits 0-13 start
// address, 16-29 leading-dimension byte offset, 32-45 stride-dimension byte offset, each
// encoded as (x & 0x3FFFF) >> 4; bits 49-51 base offset (0: every panel is 1024-byte aligned);
// bits 62-63 swizzle mode, 1 = 128-byte.
__device__ __forceinline__ uint64_t desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}
// K-major operand, k-step s (columns 16 s .. 16 s + 15), rows r0 .. of an R-row tile at `base`.
// Strides (PTX ISA 9.7.15.5.1.2.1): SBO = 1024, the distance between groups of 8 rows (8
// lines of 128 bytes); LBO is unused by swizzled K-major layouts ("assumed 1"): encoded as 1.
template <int R>
__device__ __forceinline__ uint64_t desc_k(uint32_t base, int r0, int s) {
    return desc(base + 2u * (uint32_t)sw128<R>(r0, 16 * s), 16u, 1024u);
}
// N-major B (imm-trans-b = 1), k-step s (rows 16 s .. 16 s + 15) of an R-row tile at `base`.
// LBO = the distance between 64-column panels (R lines of 128 bytes: "from the first 8 rows to
// the next 8 rows" of 128-bit elements along N), SBO = 1024, the distance between groups of 8
// K rows.
template <int R>
__device__ __forceinline__ uint64_t desc_n(uint32_t base, int s) {
    return desc(base + 2u * (uint32_t)sw128<R>(16 * s, 0), (uint32_t)R * 128u, 1024u);
}

// Generic-proxy writes to shared memory (st.shared, cp.async) must be made visible to the async
// proxy in which wgmma reads its operands (PTX ISA 9.7.15.4): every writer fences its own writes,
// then a barrier, then wgmma.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Orders this warpgroup's earlier register writes (accumulators, A fragments) before the next
// wgmma.mma_async reads them.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most N committed groups of this thread are pending.
template <int N>
__device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// The accumulators are written asynchronously; the compiler does not know it. Passing every
// accumulator through an empty volatile asm right after wgmma.wait_group (and before the next
// wgmma) keeps their reads and writes from moving across the wait.
template <int NR>
__device__ __forceinline__ void fence_regs(float (&d)[NR]) {
#pragma unroll
    for (int i = 0; i < NR; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A fragments held in registers (mma_rs): pins their writes before the wgmma.fence
// that precedes the mma_rs reading them.
template <int NR>
__device__ __forceinline__ void fence_regs(uint32_t (&a)[NR]) {
#pragma unroll
    for (int i = 0; i < NR; i++) asm volatile("" : "+r"(a[i])::"memory");
}

// D (64 x N fp32, N/2 registers per thread) = A (64 x 16 bf16) * B (16 x N bf16) + (acc ? D : 0)
// for the warpgroup. Accumulator layout (PTX ISA 9.7.15.5.1.1.1, Figure 149): thread = 32 w +
// 4 g + t of the warpgroup holds d[4 j + e] = D[16 w + g + 8 (e >> 1)][8 j + 2 t + (e & 1)].
// A in registers (Figure 148): a[0] = A[16 w + g][2 t, +1], a[1] = A[16 w + g + 8][2 t, +1],
// a[2] = A[16 w + g][2 t + 8, +9], a[3] = A[16 w + g + 8][2 t + 8, +9] (bf16 pairs, low half
// first): the mma.sync m16n8k16 A fragment of warp w's 16 rows.
// mma_ss: A and B from descriptors; mma_rs: A from registers. TB = imm-trans-b (0: B K-major,
// 1: B N-major).
// The inline PTX of every (N, form): accumulator list, then operands; imm-trans-b is the "n"
// operand after acc (the PTX text is the same as one asm block per TB).
#define WGM_D8(i)                                                                                              \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define WGM_D16 WGM_D8(0), WGM_D8(8)
#define WGM_D32 WGM_D8(0), WGM_D8(8), WGM_D8(16), WGM_D8(24)
#define WGM_D64 WGM_D32, WGM_D8(32), WGM_D8(40), WGM_D8(48), WGM_D8(56)
#define WGM_R16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define WGM_R32                                                                                                \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                   \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGM_R64                                                                                                \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                                   \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"                            \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"                            \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

template <int N, int TB>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int acc) {
    static_assert(N == 64 || N == 128, "wgmma: N 64 or 128");
    if constexpr (N == 64)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGM_R32 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
                     : WGM_D32
                     : "l"(da), "l"(db), "r"(acc), "n"(TB));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGM_R64 ", %64, %65, p, 1, 1, 0, %67;\n}\n"
                     : WGM_D64
                     : "l"(da), "l"(db), "r"(acc), "n"(TB));
}
// mma_rs also takes N = 32 (m64n32k16: 16 accumulators, the layout above with j < 4).
template <int N, int TB>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int acc) {
    static_assert(N == 32 || N == 64 || N == 128, "wgmma: N 32, 64 or 128");
    if constexpr (N == 32)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " WGM_R16
                     ", {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
                     : WGM_D16
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
    else if constexpr (N == 64)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGM_R32
                     ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : WGM_D32
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGM_R64
                     ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                     : WGM_D64
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}
#undef WGM_D8
#undef WGM_D16
#undef WGM_D32
#undef WGM_D64
#undef WGM_R16
#undef WGM_R32
#undef WGM_R64

// mbarrier (PTX ISA 9.7.13.15) at a shared::cta address, for pipelines that feed wgmma without
// CTA-wide barriers (the attention wgmma kernels). init by one thread, then a barrier before any
// arrival. mbar_wait spins on try_wait.parity until the phase of that parity has completed
// (acquire, CTA scope); the waiter must still fence_proxy_async() before wgmma reads data that
// generic-proxy writes released through the barrier.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// after the inits, before the barrier that publishes them (orders them before async arrivals)
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// -DGDN_MBAR_WATCHDOG (debug builds only, e.g. in ATTN_ARCH for bench/run_attention.sh): a wait
// still failing 2 s (%globaltimer) after its first failed try traps, so a protocol bug ends the
// launch with an error instead of hanging until the caller's timeout.
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
    uint32_t done;
#ifdef GDN_MBAR_WATCHDOG
    uint64_t t0 = 0;
#endif
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
#ifdef GDN_MBAR_WATCHDOG
        if (!done) {
            uint64_t t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if (t0 == 0) t0 = t;
            else if (t - t0 > 2000000000ull) __trap();
        }
#endif
    } while (!done);
    __syncwarp();  // callers are whole warps, and wgmma's .aligned instructions follow
}

// mbar_wait for warp-specialised kernels (setmaxnreg; attention_fwd_wgmma_kernel). Under
// -DGDN_MBAR_WATCHDOG a trap inside the code that follows a setmaxnreg makes ptxas (CUDA 13.0)
// drop that region's register budget back to the launch bound's (168 at 384 threads): wgmma
// serialised (C7512) and spills. So this wait does not trap: once it has failed for 2 s it sets
// `failed` and returns, every later wait of the thread with `failed` set returns at once (the
// kernel runs to its end on garbage instead of hanging), and the kernel calls
// mbar_watchdog_check(failed) after its warpgroups' branches have joined, which traps there.
// Without the watchdog it is mbar_wait above and `failed` stays false.
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity, bool &failed) {
#ifdef GDN_MBAR_WATCHDOG
    uint32_t done;
    uint64_t t0 = 0;
    if (failed) return;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
        if (!done) {
            uint64_t t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if (t0 == 0) t0 = t;
            else if (t - t0 > 2000000000ull) failed = true, done = 1;
        }
    } while (!done);
    __syncwarp();
#else
    (void)failed;
    mbar_wait(bar, parity);
#endif
}
__device__ __forceinline__ void mbar_watchdog_check(bool failed) {
#ifdef GDN_MBAR_WATCHDOG
    if (failed) __trap();
#else
    (void)failed;
#endif
}

// ---- TMA (cp.async.bulk.tensor) and register reallocation, for warp-specialised kernels with a
// producer warpgroup (attention_fwd_wgmma_kernel; bench/hopper_gemm.cu has the same patterns).
// The producer's arrival on a "full" barrier: one arrival (count it at init) that also raises the
// phase's expected transaction count by `bytes`; the phase completes once the arrivals are in and
// the TMA loads completing on the barrier have delivered that many bytes (PTX ISA 9.7.13.15.11).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// 4-D TMA load of the box at coordinates (c0 innermost .. c3) of the tensor map at `map` (a
// __grid_constant__ kernel parameter's address) into shared memory at `dst` (1024-byte aligned for
// SWIZZLE_128B), completing on the mbarrier `bar` with the box's bytes (out-of-range elements
// are written as zeros and still counted). A CTA launched without a cluster is a cluster of one,
// so its shared::cta addresses are valid shared::cluster addresses.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void *map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void prefetch_tensormap(const void *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}
// setmaxnreg (PTX ISA 9.7.19.8): executed by every thread of a warpgroup; N a multiple of 8 in
// [24, 256]. dec releases registers to the CTA's pool, inc waits until it can take them.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
}

// A consumer warpgroup's epilogue store: wait on named barrier BAR0 + wg (the warpgroup's 128
// threads only, so its rows of the swizzled sw128 staging tile are complete), then visit its 64
// rows in 16-byte chunks: store(row, ch, i) for each row of the tile with i = r0 + row < T and
// each chunk ch < D / 8 (the caller writes the chunk(s) to global; attention fwd o, bwd dq, dk/dv).
template <int D, int BAR0, class F>
__device__ __forceinline__ void wg_store_rows(int wg, int tid, int r0, int T, F &&store) {
    if (wg == 0) asm volatile("bar.sync %0, 128;\n" ::"n"(BAR0) : "memory");
    else asm volatile("bar.sync %0, 128;\n" ::"n"(BAR0 + 1) : "memory");
    constexpr int CPR = D / 8;
#pragma unroll
    for (int c = tid & 127; c < 64 * CPR; c += 128) {
        const int row = 64 * wg + c / CPR, ch = c % CPR, i = r0 + row;
        if (i < T) store(row, ch, i);
    }
}

}  // namespace wgm
