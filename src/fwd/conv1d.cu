// conv1d.cu — CUDA forwards of the short causal depthwise convolution (twins of conv1d_fwd_cpu
// and conv_silu_fwd_cpu, src/fwd/conv1d.c):
//   conv1d:    y[b,t,c] = sum_{j<K} w[c,j] x[b, t-K+1+j, c]   (x at negative time = 0, per sequence)
//   conv_silu: y = silu(conv1d(x, w)), the fused op of GDN's q, k, v (with an optional per-head L2
//              norm of q and k in the same pass)
// Sum order j = 0..K-1 as the CPU, every sum in fp32.
// Document starts (doc_start, ops.h): token t of row b reads x only from its document's start
// lo = doc[b T + t] on (x before lo = 0); the tiled and ring kernels take them as a template
// instance (DOC) whose masked taps are zeros added in the same order, so starts that are all 0
// give the bits of doc_start NULL; the plain conv1d with starts runs the per-element kernel.
//
// conv1d, the plain op: a tiled kernel where C % W == 0, the pointers are 16-byte aligned and
// K <= CONV_KMAX, else one thread per output.
//
// conv_silu (GDN's fused short convolution + SiLU):
//   pre[b,t,c] = sum_{j<K} w[c,j] x[b, t-K+1+j, c],   y[b,t,c] = silu(pre) = pre sigmoid(pre)
// pre stays in fp32 registers and is never stored (the backward, src/bwd/conv1d.cu, recomputes
// it), so the op costs one read of x and one write of y.
// x's rows have stride ld >= C (ld = C: packed; larger: q, k or v as columns of the fused input
// projection's output, model.c); y is packed (B,T,C). Segments (cuda_conv_silu3_fwd): the C
// channels split at cs[1], cs[2] into up to three outputs ys[s], each packed (B,T,cs[s+1]-cs[s])
// (GDN's q, k, v in one call: each row of the fused projection read once, one launch); the
// tiled paths need every segment width a multiple of W, so a pack never straddles two.
// L2 norm (cuda_conv_silu3_l2_fwd): segments 0 and 1 (GDN's q, k) leave normalised per head of
// nd channels, y = s silu(pre) rnorm, rnorm = 1/sqrt(sum silu(pre)^2 + eps) (rnorm saved, as
// l2norm_fwd). A head (nd | 128, heads starting at multiples of nd) is nd / W packs of W = 4
// channels in a group of 128 consecutive channels of one token: its sum of squares is each pack's
// squares in order, then a xor butterfly over the head's packs (the pack's index in the group as
// the lane), of the fp32 silu values (the unfused path squares their rounded copies), and the
// unnormalised q, k are never stored. Other shapes: conv_silu3, then l2norm_fwd in place.
// Kernels:
// - tiled (conv_silu_fwd_tiled_kernel; the plain forward's path: C % W == 0, x and y aligned to
//   a pack, K <= CONV_SILU_KMAX, one instance per K): thread = (row = (b, tile of CONV_SILU_TT
//   tokens), pack of W = 4 channels); a block is 32 packs (the lanes: 256 contiguous bytes of a
//   token row per warp in bf16) x 8 rows (the warps). The thread walks its tile with the K-1
//   previous inputs in registers (a sliding window), so each x row is loaded once, plus K-1 halo
//   rows per tile (L1/L2 hits: the neighbouring tile is the next warp's); the loads of a chunk of
//   U tokens are issued together. Loads past the end of a sequence are clamped to its last row
//   (never out of bounds), their outputs not stored.
//   Sizes (H200, bf16, B 16, T 2048, K 4; bench variants W 2/4/8, U 4/8/16, TT 8/16/32): C 512
//   23.7 us, C 1024 42 us, against 75.6 / 123 us for conv1d_fwd + silu_fwd and 18.6 / 34.8 us
//   for a device copy of x. W 8 needs ~130 registers (2 blocks per SM) and is 15-20% slower.
//   Staging a block's x tile in shared memory first takes 1.17x its time (bench/model_gpu.md).
// - ring (conv_silu_fwd_ring_kernel; the forward with the L2 norm, on the same shapes): the
//   tiled kernel's arithmetic as one token stream per warp out of a per-thread cp.async ring in
//   shared memory (its comment).
// - per element (conv_silu_fwd_kernel): other shapes, the sum in the same order.
#include "../cuda/conv1d.cuh"
#include "../cuda/ops_testing.h"

namespace {

// ---- causal depthwise conv1d: y[b,t,c] = sum_{j<K} w[c,j] x[b, t-K+1+j, c] (thread per output) --
template <typename T>
__global__ void __launch_bounds__(EW_THREADS) conv1d_fwd_kernel(T *y, const T *x, const T *w, size_t total, int T_,
                                                                int C, int K, const int32_t *doc) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int c = (int)(idx % C);
        const size_t r = idx / C;  // token b*T + t
        const int t = (int)(r % T_), lo = doc ? doc[r] : 0;
        float s = 0.f;
        for (int j = 0; j < K; j++) {
            const int ts = t - (K - 1) + j;
            if (ts >= lo) s += to_f(w[(size_t)c * K + j]) * to_f(x[(r - (K - 1) + j) * C + c]);
        }
        y[idx] = from_f<T>(s);
    }
}

// The same, tiled (the model's path): thread (b, tile of CONV_FWD_TT tokens, pack of W channels)
// with 16-byte loads, 32-bit index math and the taps in registers; each x row is read K times,
// from L1 after the first. Needs C % W == 0, 16-byte aligned pointers and K <= CONV_KMAX (the
// launcher falls back to the kernel above otherwise). Same sum order (j = 0..K-1) as the CPU.
constexpr int CONV_FWD_TT = 16, CONV_THREADS = 128;
template <typename T, int W, int KM>
__global__ void __launch_bounds__(CONV_THREADS)
    conv1d_fwd_tiled_kernel(T *y, const T *x, const T *w, int T_, int C, int K, int tiles) {
    const int cp = blockIdx.x * blockDim.x + threadIdx.x;
    if (cp * W >= C) return;
    const int c0 = cp * W, b = blockIdx.y / tiles, t0 = (blockIdx.y % tiles) * CONV_FWD_TT;
    const int t1 = min(t0 + CONV_FWD_TT, T_);
    float wr[KM][W];
#pragma unroll
    for (int j = 0; j < KM; j++)
#pragma unroll
        for (int i = 0; i < W; i++) wr[j][i] = j < K ? to_f(w[(c0 + i) * K + j]) : 0.f;
    const T *xb = x + (size_t)b * T_ * C + c0;
    T *yb = y + (size_t)b * T_ * C + c0;
    for (int t = t0; t < t1; t++) {
        float acc[W];
#pragma unroll
        for (int i = 0; i < W; i++) acc[i] = 0.f;
#pragma unroll
        for (int j = 0; j < KM; j++) {
            const int ts = t - (K - 1) + j;
            if (j < K && ts >= 0) {
                float xv[W];
                load_pack<T, W>(xb + (size_t)ts * C, xv);
#pragma unroll
                for (int i = 0; i < W; i++) acc[i] += wr[j][i] * xv[i];
            }
        }
        store_pack<T, W>(yb + (size_t)t * C, acc);
    }
}

template <typename T>
void conv1d_fwd_launch(T *y, const T *x, const T *w, int B, int T_, int C, int K, const int32_t *doc, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (!doc && C % W == 0 && K <= CONV_KMAX && aligned16(y) && aligned16(x)) {
        const int tiles = (int)GDN_CDIV(T_, CONV_FWD_TT);
        const dim3 grid((unsigned)GDN_CDIV(C / W, CONV_THREADS), (unsigned)(B * tiles));
        if (K <= 4) conv1d_fwd_tiled_kernel<T, W, 4><<<grid, CONV_THREADS, 0, s>>>(y, x, w, T_, C, K, tiles);
        else conv1d_fwd_tiled_kernel<T, W, CONV_KMAX><<<grid, CONV_THREADS, 0, s>>>(y, x, w, T_, C, K, tiles);
    } else {
        const size_t total = (size_t)B * T_ * C;
        conv1d_fwd_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(y, x, w, total, T_, C, K, doc);
    }
    CUDA_CHECK_LAUNCH();
}

// ---- conv + SiLU -------------------------------------------------------------------------------
constexpr int CONV_SILU_KMAX = 4;  // taps of the tiled kernel: one instance per K = 1..4
constexpr int CONV_SILU_W = 4;     // channels per thread (8-byte loads in bf16, 16 in fp32)
constexpr int CONV_SILU_TT = 16;   // tokens per thread
constexpr int CONV_SILU_U = 4;     // tokens per chunk of loads in flight together
constexpr int CONV_SILU_LANES = 32, CONV_SILU_ROWS = 8, CONV_SILU_THREADS = CONV_SILU_LANES * CONV_SILU_ROWS;

// Shapes and pointers of one call (T_: tokens per sequence; rows = B * tiles).
template <typename T> struct conv_silu_fwd_params {
    T *ys[3];   // the segments' outputs
    const T *x, *w;
    int T_, C, K, tiles, rows;
    size_t ld;  // x's row stride
    conv_segs seg;  // which output each channel goes to (cuda/elementwise.cuh)
    const int32_t *doc;  // NULL, or (B*T) document starts (DOC kernels)
    float *rn[2];   // L2 norm of segments 0, 1 (NORM kernels): 1/norm per (token, head)
    int nd;         // channels per head
    float eps, sc[2];
    // channel c's element of token row r (b T + t) in its segment's output
    __device__ __forceinline__ T *yrow(size_t r, int c) const { return seg.at(ys[0], ys[1], ys[2], r, c); }
    __device__ __forceinline__ int width(int c) const { return seg.width(c); }
};

// sigmoid_fast (cuda/elementwise.cuh): the fast intrinsics, no branch.
__device__ __forceinline__ float silu_f(float p) { return p * sigmoid_fast(p); }

// TT tokens per thread in chunks of U: the U loads of a chunk are in flight together.
// One token: o = silu(sum_j w[j] x[t-K+1+j]) (j ascending), then the window moves one token on.
template <int W, int K>
__device__ __forceinline__ void conv_silu_token(const float (&wr)[K][W], float (&xw)[K][W], float (&o)[W]) {
#pragma unroll
    for (int i = 0; i < W; i++) {
        float a = 0.f;
#pragma unroll
        for (int j = 0; j < K; j++) a += wr[j][i] * xw[j][i];
        o[i] = silu_f(a);
    }
#pragma unroll
    for (int m = 0; m < K - 1; m++)
#pragma unroll
        for (int i = 0; i < W; i++) xw[m][i] = xw[m + 1][i];
}

// conv_silu_token where the first j0 taps precede the token's document start: they read 0 (the
// same sums in the same order; j0 <= 0: conv_silu_token's bits).
template <int W, int K>
__device__ __forceinline__ void conv_silu_token_doc(const float (&wr)[K][W], float (&xw)[K][W], float (&o)[W], int j0) {
#pragma unroll
    for (int i = 0; i < W; i++) {
        float a = 0.f;
#pragma unroll
        for (int j = 0; j < K; j++) a += wr[j][i] * (j >= j0 ? xw[j][i] : 0.f);
        o[i] = silu_f(a);
    }
#pragma unroll
    for (int m = 0; m < K - 1; m++)
#pragma unroll
        for (int i = 0; i < W; i++) xw[m][i] = xw[m + 1][i];
}

// The plain forward (no norm; header). DOC: with p.doc's document starts.
template <typename T, int W, int K, int TT, int U, bool DOC>
__global__ void __launch_bounds__(CONV_SILU_THREADS) conv_silu_fwd_tiled_kernel(const conv_silu_fwd_params<T> p) {
    const int cp = blockIdx.x * CONV_SILU_LANES + (threadIdx.x % CONV_SILU_LANES);
    if (cp * W >= p.C) return;  // no block-wide sync below
    const int c0 = cp * W;
    float wr[K][W];
#pragma unroll
    for (int j = 0; j < K; j++)
#pragma unroll
        for (int i = 0; i < W; i++) wr[j][i] = to_f(p.w[(size_t)(c0 + i) * K + j]);
    for (int row = blockIdx.y * CONV_SILU_ROWS + threadIdx.x / CONV_SILU_LANES; row < p.rows;
         row += gridDim.y * CONV_SILU_ROWS) {
        const int b = row / p.tiles, t0 = (row - b * p.tiles) * TT;
        const size_t ld = p.ld;
        const T *xb = p.x + (size_t)b * p.T_ * ld + c0;
        T *yb = p.yrow((size_t)b * p.T_, c0);
        const int cw = p.width(c0);  // its segment's width: y's row stride
        float xw[K][W];  // before token t: xw[m] = x[t - (K-1) + m], m < K-1; xw[K-1] = x[t]
        pack_t<T, W> xh[K > 1 ? K - 1 : 1];
#pragma unroll
        for (int m = 0; m < K - 1; m++) xh[m] = ld_pack<T, W>(xb + (size_t)max(t0 - (K - 1) + m, 0) * ld);
#pragma unroll
        for (int u0 = 0; u0 < TT; u0 += U) {
            pack_t<T, W> xr[U];
#pragma unroll
            for (int v = 0; v < U; v++)
                if (u0 + v < TT) xr[v] = ld_pack<T, W>(xb + (size_t)min(t0 + u0 + v, p.T_ - 1) * ld);
            if (u0 == 0)
#pragma unroll
                for (int m = 0; m < K - 1; m++) {
                    unpack<T, W>(xh[m], xw[m]);
#pragma unroll
                    for (int i = 0; i < W; i++) xw[m][i] = t0 - (K - 1) + m >= 0 ? xw[m][i] : 0.f;
                }
#pragma unroll
            for (int v = 0; v < U; v++) {
                if (u0 + v >= TT) break;
                const int t = t0 + u0 + v;
                unpack<T, W>(xr[v], xw[K - 1]);
                float o[W];
                if constexpr (DOC)  // taps before lo = doc[b T + t] read 0
                    conv_silu_token_doc<W, K>(wr, xw, o, p.doc[(size_t)b * p.T_ + min(t, p.T_ - 1)] - (t - (K - 1)));
                else
                    conv_silu_token<W, K>(wr, xw, o);
                if (t < p.T_) store_pack<T, W>(yb + (size_t)t * cw, o);
            }
        }
    }
}

// The ring kernel: the forward with the L2 norm (header) as one token stream per warp, with no
// block-wide barrier (a kernel that stages a block's whole tile, waits, then computes leaves its
// blocks alternating between loading and computing, issue-bound in between: ~170 instructions a
// warp-token of 4 channels a lane). A warp owns 256 channels (two groups of 128, one a half-warp)
// over a chunk of one sequence's tokens (sched: as many chunks as the resident warps take in one
// round), and walks it token by token out of a per-thread ring of RING_D rows in shared memory
// (each thread stages by cp.async exactly the bytes it reads, RING_D - RING_FU rows ahead, so no
// barrier and no other thread is involved; a slot is refilled one step after it was read). A lane
// holds two packs of W channels: pack k of lane l in half h is channel g + 64 k + 4 l,
// g = 256 wc + 128 h, i.e. packs l (k = 0) and l + 16 (k = 1) of group g (header: the pack's
// index is its lane in the head's butterfly). Heads of 128 channels (hl = 32 packs): the level
// xor 16 is one add in the lane (ss0 + ss1 = ss1 + ss0 bitwise), the levels xor 8 .. 1 shuffles
// within the half-warp; smaller heads (hl <= 16): levels hl/2 .. 1 for each pack. The window,
// the conv and SiLU, the squares, 1 / sqrt and the scale are the tiled kernel's expressions
// (conv_silu_token); a warp whose channels are all in segment 2 skips the norm. y leaves by one
// 8- (bf16) or 16-byte (fp32) store per pack (st_pack4, store_pack's rounding).
constexpr int RING_D = 8;   // ring slots of token rows per thread (+ K-1 for the first window)
constexpr int RING_FU = 1;  // tokens a step (2, interleaving their shuffles, spilled at 128 registers)
constexpr int RING_WARPS = 8, RING_THREADS = 32 * RING_WARPS, RING_BLOCKS = 2;
struct conv_ring_sched {
    int lc, nch, ncolw, items;  // tokens a chunk, chunks a sequence, warp columns, B nch ncolw
};
template <typename T, int K> constexpr size_t conv_ring_smem() {  // [warp][slot][pack][lane] packs
    return (size_t)RING_WARPS * (RING_D + K - 1) * 2 * 32 * CONV_SILU_W * sizeof(T);
}
template <typename T, int K, bool DOC>
__global__ void __launch_bounds__(RING_THREADS, RING_BLOCKS)
    conv_silu_fwd_ring_kernel(const conv_silu_fwd_params<T> p, const conv_ring_sched sch) {
    constexpr int W = CONV_SILU_W, NP = 2, D = RING_D, U = RING_FU, CB = W * (int)sizeof(T);
    static_assert(D % U == 0 && D >= 2 * U, "steps of U rows, refilled one step late");
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, h = lane / 16, l = lane % 16;
    unsigned char *const ring = smem + (size_t)warp * (D + K - 1) * NP * 32 * CB;
    auto slot = [ring, lane](int sl, int k) { return (const T *)(ring + ((sl * NP + k) * 32 + lane) * CB); };
    const int C = p.C, T_ = p.T_, hl = p.nd / W;  // hl: packs a head (a power of two <= 32)
    const size_t ld = p.ld;
    for (int item = blockIdx.x * RING_WARPS + warp; item < sch.items; item += gridDim.x * RING_WARPS) {
        const int wc = item % sch.ncolw, chunk = item / sch.ncolw, b = chunk / sch.nch;
        const int ts = (chunk - b * sch.nch) * sch.lc, n = min(sch.lc, T_ - ts);
        const size_t bt = (size_t)b * T_;
        const int g = wc * 256 + h * 128;
        const bool live = g < C;  // C % 128 == 0 (norm_fits): a half-warp is all live or all dead
        const bool norm = wc * 256 < p.seg.cs[2];  // some channel of the warp in segment 0 or 1
        // per pack (selects, not indexing: p stays in constant space)
        T *yp[NP];
        float *rp[NP];
        float sc[NP];
        int cw[NP], heads[NP];
        bool lead[NP], nrm[NP];
        float wr[K][NP * W];
#pragma unroll
        for (int k = 0; k < NP; k++) {
            const int c0 = live ? g + 64 * k + 4 * l : 0;
            const int s = c0 >= p.seg.cs[2] ? 2 : c0 >= p.seg.cs[1] ? 1 : 0;
            const int cs0 = s == 2 ? p.seg.cs[2] : s ? p.seg.cs[1] : 0;
            nrm[k] = s < 2;
            lead[k] = live && s < 2 && (c0 - cs0) % p.nd == 0;
            heads[k] = s < 2 ? (s ? p.seg.cs[2] - p.seg.cs[1] : p.seg.cs[1]) / p.nd : 0;
            rp[k] = (s ? p.rn[1] : p.rn[0]) + (bt + ts) * heads[k] + (c0 - cs0) / p.nd;
            sc[k] = s ? p.sc[1] : p.sc[0];
            cw[k] = p.width(c0);
            yp[k] = p.yrow(bt + ts, c0);
#pragma unroll
            for (int j = 0; j < K; j++)
#pragma unroll
                for (int i = 0; i < W; i++) wr[j][k * W + i] = live ? to_f(p.w[(size_t)(c0 + i) * K + j]) : 0.f;
        }
        // the next row to stage: token tq (from ts - (K-1)), element offset xo of pack 0 in x;
        // rows outside [0, ts + n) are zero-filled (x before t = 0 is 0; rows past the chunk feed no
        // stored output)
        int tq = ts - (K - 1);
        long long xo = ((long long)bt + tq) * (long long)ld + g + 4 * l;
        auto stage = [&](int sl) {
            const bool ok = live && tq >= 0 && tq < ts + n;
            const T *src = ok ? p.x + xo : p.x;
            cp_async_zfill<CB>((void *)slot(sl, 0), src, ok);
            cp_async_zfill<CB>((void *)slot(sl, 1), src + 64, ok);
            cp_async_commit();
            tq++;
            xo += (long long)ld;
        };
#pragma unroll
        for (int m = 0; m < K - 1; m++) stage(D + m);  // the window's rows: slots D ..
#pragma unroll
        for (int r = 0; r < D - U; r++) stage(r);  // token row r: slot r % D
        cp_async_wait<D - U>();
        float xw[K][NP * W];  // before token t: xw[m] = x[t - (K-1) + m], m < K-1; xw[K-1] = x[t]
#pragma unroll
        for (int m = 0; m < K - 1; m++)
#pragma unroll
            for (int k = 0; k < NP; k++) {
                float f[W];
                unpack<T, W>(ld_pack<T, W>(slot(D + m, k)), f);
#pragma unroll
                for (int i = 0; i < W; i++) xw[m][k * W + i] = f[i];
            }
        for (int r0 = 0; r0 < n; r0 += D) {
#pragma unroll
            for (int u0 = 0; u0 < D; u0 += U) {
                cp_async_wait<D - 2 * U>();  // token rows r0 + u0 .. + U-1 are in
                pack_t<T, W> xp[U][NP];
#pragma unroll
                for (int v = 0; v < U; v++)
#pragma unroll
                    for (int k = 0; k < NP; k++) xp[v][k] = ld_pack<T, W>(slot(u0 + v, k));
#pragma unroll
                for (int v = 0; v < U; v++) stage((u0 + v + D - U) % D);  // into the last step's slots
                float o[U][NP * W];
#pragma unroll
                for (int v = 0; v < U; v++) {
#pragma unroll
                    for (int k = 0; k < NP; k++) {
                        float f[W];
                        unpack<T, W>(xp[v][k], f);
#pragma unroll
                        for (int i = 0; i < W; i++) xw[K - 1][k * W + i] = f[i];
                    }
                    if constexpr (DOC) {  // taps before lo = doc[b T + token] read 0
                        const int tok = ts + r0 + u0 + v;
                        conv_silu_token_doc<NP * W, K>(wr, xw, o[v], p.doc[bt + min(tok, T_ - 1)] - (tok - (K - 1)));
                    } else {
                        conv_silu_token<NP * W, K>(wr, xw, o[v]);
                    }
                }
                if (norm) {  // warp-uniform
                    float ss[U][NP];
#pragma unroll
                    for (int v = 0; v < U; v++)
#pragma unroll
                        for (int k = 0; k < NP; k++) {
                            ss[v][k] = 0.f;
#pragma unroll
                            for (int i = 0; i < W; i++) ss[v][k] += o[v][k * W + i] * o[v][k * W + i];
                        }
                    if (hl == 32) {  // level xor 16 (pack l's sum plus pack l + 16's), then 8 .. 1
#pragma unroll
                        for (int v = 0; v < U; v++) ss[v][0] = ss[v][0] + ss[v][1];
#pragma unroll
                        for (int off = 8; off > 0; off >>= 1)
#pragma unroll
                            for (int v = 0; v < U; v++) ss[v][0] += __shfl_xor_sync(0xffffffffu, ss[v][0], off);
                    } else {  // heads within 16 packs: levels hl/2 .. 1 for each pack
                        for (int off = hl / 2; off > 0; off >>= 1)
#pragma unroll
                            for (int v = 0; v < U; v++) {
                                ss[v][0] += __shfl_xor_sync(0xffffffffu, ss[v][0], off);
                                ss[v][1] += __shfl_xor_sync(0xffffffffu, ss[v][1], off);
                            }
                    }
#pragma unroll
                    for (int v = 0; v < U; v++) {
                        const int t = r0 + u0 + v;  // token ts + t
                        float rn[NP];
                        rn[0] = 1.f / sqrtf(ss[v][0] + p.eps);
                        rn[1] = hl == 32 ? rn[0] : 1.f / sqrtf(ss[v][1] + p.eps);  // one head: the same value
#pragma unroll
                        for (int k = 0; k < NP; k++) {
                            if (!nrm[k]) continue;
#pragma unroll
                            for (int i = 0; i < W; i++) o[v][k * W + i] = sc[k] * o[v][k * W + i] * rn[k];
                            if (lead[k] && t < n) rp[k][(size_t)t * heads[k]] = rn[k];
                        }
                    }
                }
#pragma unroll
                for (int v = 0; v < U; v++) {
                    const int t = r0 + u0 + v;
                    if (live && t < n)
#pragma unroll
                        for (int k = 0; k < NP; k++) {
                            float f[W];
#pragma unroll
                            for (int i = 0; i < W; i++) f[i] = o[v][k * W + i];
                            st_pack4(yp[k] + (size_t)t * cw[k], f);
                        }
                }
            }
        }
        cp_async_wait<0>();  // the ring is free for the next item
    }
}

// Any shape: one thread per output element, the sum in the same order.
template <typename T>
__global__ void __launch_bounds__(EW_THREADS) conv_silu_fwd_kernel(const conv_silu_fwd_params<T> p, size_t total) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int c = (int)(idx % p.C);
        const size_t r = idx / p.C;  // token b*T + t
        const int t = (int)(r % p.T_), lo = p.doc ? p.doc[r] : 0;
        float s = 0.f;
        for (int j = 0; j < p.K; j++)
            if (t - (p.K - 1) + j >= lo) s += to_f(p.w[(size_t)c * p.K + j]) * to_f(p.x[(r - (p.K - 1) + j) * p.ld + c]);
        *p.yrow(r, c) = from_f<T>(silu_f(s));
    }
}

// The ring kernel: as many chunks of each sequence as the resident warps take in one round (2 blocks of 8
// warps an SM at the model's shape: B 16, T 2048, 8 warp columns -> 16 chunks of 128 tokens, one
// item a warp), each a multiple of RING_D tokens; a grid of at most the resident blocks.
template <typename T, int K, bool DOC>
void conv_silu_fwd_ring_launch(const conv_silu_fwd_params<T> &p, int B, cudaStream_t s) {
    constexpr size_t smem = conv_ring_smem<T, K>();
    auto kern = conv_silu_fwd_ring_kernel<T, K, DOC>;
    static int cache = 0;
    const int resident = persistent_setup(kern, RING_THREADS, smem, &cache);
    conv_ring_sched sch;
    sch.ncolw = (int)GDN_CDIV(p.C, 256);
    const long long slots = (long long)resident * RING_WARPS;
    const long long per_seq = GDN_MAX(slots / ((long long)B * sch.ncolw), 1LL);
    sch.lc = (int)GDN_CDIV(GDN_CDIV((long long)p.T_, per_seq), (long long)RING_D) * RING_D;
    sch.nch = (int)GDN_CDIV(p.T_, sch.lc);
    const long long items = (long long)B * sch.nch * sch.ncolw;
    if (items > INT32_MAX) gdn_die("cuda conv_silu_fwd ring: %lld warp items", items);
    sch.items = (int)items;
    const unsigned grid = (unsigned)GDN_MIN(GDN_CDIV(items, (long long)RING_WARPS), (long long)resident);
    kern<<<grid, RING_THREADS, smem, s>>>(p, sch);
    conv_silu_ring_count();
}

// NORM: the ring kernel; else the tiled kernel. The instance with document starts where p.doc.
template <typename T, int W, int K, bool NORM, int TT = CONV_SILU_TT, int U = CONV_SILU_U>
void conv_silu_fwd_tiled_launch(conv_silu_fwd_params<T> p, int B, cudaStream_t s) {
    if (NORM) {
        if (p.doc) conv_silu_fwd_ring_launch<T, K, true>(p, B, s);
        else conv_silu_fwd_ring_launch<T, K, false>(p, B, s);
        return;
    }
    p.tiles = (int)GDN_CDIV(p.T_, TT);
    p.rows = B * p.tiles;
    const unsigned gx = (unsigned)GDN_CDIV(p.C / W, CONV_SILU_LANES);
    const unsigned gy = (unsigned)GDN_MIN(GDN_CDIV(p.rows, CONV_SILU_ROWS), 65535);
    if (p.doc) conv_silu_fwd_tiled_kernel<T, W, K, TT, U, true><<<dim3(gx, gy), CONV_SILU_THREADS, 0, s>>>(p);
    else conv_silu_fwd_tiled_kernel<T, W, K, TT, U, false><<<dim3(gx, gy), CONV_SILU_THREADS, 0, s>>>(p);
}

// p.rn[0] set: normalise segments 0 and 1 in the kernel (the caller checked norm_fits).
// Returns false where the tiled path does not apply and the per-element kernel ran instead.
template <typename T>
bool conv_silu_fwd_launch(conv_silu_fwd_params<T> p, int B, cudaStream_t s) {
    constexpr int W = CONV_SILU_W;
    if ((size_t)B * p.T_ > (size_t)INT32_MAX) gdn_die("cuda conv_silu_fwd: B %d x T %d tokens is too many", B, p.T_);
    const uintptr_t pack = sizeof(T) * W - 1;  // pack alignment mask
    const bool norm = p.rn[0] != nullptr;
    bool tiled = p.seg.packed(p.ys, W, pack) && p.ld % W == 0 && ((uintptr_t)p.x & pack) == 0 && p.K <= CONV_SILU_KMAX;
    if (tiled) {
        switch (p.K * 2 + norm) {  // the one place that picks a tap count
        case 2: conv_silu_fwd_tiled_launch<T, W, 1, false>(p, B, s); break;
        case 3: conv_silu_fwd_tiled_launch<T, W, 1, true>(p, B, s); break;
        case 4: conv_silu_fwd_tiled_launch<T, W, 2, false>(p, B, s); break;
        case 5: conv_silu_fwd_tiled_launch<T, W, 2, true>(p, B, s); break;
        case 6: conv_silu_fwd_tiled_launch<T, W, 3, false>(p, B, s); break;
        case 7: conv_silu_fwd_tiled_launch<T, W, 3, true>(p, B, s); break;
        case 8: conv_silu_fwd_tiled_launch<T, W, 4, false>(p, B, s); break;
        case 9: conv_silu_fwd_tiled_launch<T, W, 4, true>(p, B, s); break;
        default: gdn_die("cuda conv_silu_fwd: K = %d > %d in the tiled path", p.K, CONV_SILU_KMAX);
        }
    } else if (!norm) {
        const size_t total = (size_t)B * p.T_ * p.C;
        const unsigned blocks = (unsigned)GDN_MIN(GDN_CDIV(total, (size_t)EW_THREADS), (size_t)65536);
        conv_silu_fwd_kernel<T><<<blocks, EW_THREADS, 0, s>>>(p, total);
    }
    if (tiled || !norm) CUDA_CHECK_LAUNCH();
    return tiled || !norm;
}

template <typename T>
conv_silu_fwd_params<T> fwd_params(void *const ys[3], const int cw[3], const void *x, const void *w, int T_, int K,
                                   size_t ld, const int32_t *doc) {
    conv_silu_fwd_params<T> p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 3; i++) p.ys[i] = (T *)ys[i];
    p.x = (const T *)x;
    p.w = (const T *)w;
    p.T_ = T_;
    p.K = K;
    p.ld = ld;
    p.doc = doc;
    p.seg = conv_segs::of(cw);
    p.C = p.seg.cs[3];
    return p;
}

// The in-kernel norm: heads of nd channels (nd / W lanes, a power of two <= 32) tile segments 0
// and 1, and every lane of a warp is live.
bool norm_fits(const int cw[3], int nd) {
    constexpr int W = CONV_SILU_W;
    const int lanes = nd / W;
    return nd % W == 0 && lanes >= 1 && lanes <= CONV_SILU_LANES && (lanes & (lanes - 1)) == 0 && cw[0] % nd == 0 &&
           cw[1] % nd == 0 && (cw[0] + cw[1] + cw[2]) % (CONV_SILU_LANES * W) == 0;
}

void check_shape(const char *who, int B, int T, const int cw[3], int K, size_t ld) {
    if (B < 0 || T < 0 || cw[0] < 0 || cw[1] < 0 || cw[2] < 0 || K < 1 || ld < (size_t)(cw[0] + cw[1] + cw[2]))
        gdn_die("%s: bad shape B %d T %d C %d+%d+%d K %d ld %zu", who, B, T, cw[0], cw[1], cw[2], K, ld);
}

}  // namespace

// ---- launch counter (cuda/ops_testing.h) -------------------------------------------------------
static unsigned long ring_launches = 0;  // host side, counted at launch (forward and backward)
void conv_silu_ring_count() { __atomic_add_fetch(&ring_launches, 1, __ATOMIC_RELAXED); }
extern "C" unsigned long cuda_conv_silu_ring_launches(void) {
    return __atomic_load_n(&ring_launches, __ATOMIC_RELAXED);
}

// ---- public entry points (cuda/ops.h) ----------------------------------------------------------
extern "C" void cuda_conv1d_fwd(cuda_dtype dt, void *y, const void *x, const void *w, int B, int T, int C, int K,
                                const int32_t *doc_start, cudaStream_t s) {
    if ((size_t)B * T * C == 0) return;
    CUDA_DT_SWITCH(dt, E, conv1d_fwd_launch<E>((E *)y, (const E *)x, (const E *)w, B, T, C, K, doc_start, s));
}

extern "C" void cuda_conv_silu3_fwd(cuda_dtype dt, void *y0, void *y1, void *y2, const void *x, const void *w, int B,
                                    int T, int C0, int C1, int C2, int K, size_t ld, const int32_t *doc_start,
                                    cudaStream_t s) {
    const int cw[3] = {C0, C1, C2};
    check_shape("cuda_conv_silu_fwd", B, T, cw, K, ld);
    if ((size_t)B * T * (C0 + C1 + C2) == 0) return;
    void *const ys[3] = {y0, y1, y2};
    CUDA_DT_SWITCH(dt, E, conv_silu_fwd_launch<E>(fwd_params<E>(ys, cw, x, w, T, K, ld, doc_start), B, s));
}

extern "C" void cuda_conv_silu3_l2_fwd(cuda_dtype dt, void *y0, void *y1, void *y2, float *rn0, float *rn1,
                                       const void *x, const void *w, int B, int T, int C0, int C1, int C2, int K,
                                       size_t ld, int nd, double eps, double s0, double s1, const int32_t *doc_start,
                                       cudaStream_t s) {
    const int cw[3] = {C0, C1, C2};
    check_shape("cuda_conv_silu3_l2_fwd", B, T, cw, K, ld);
    if (nd < 1 || C0 % nd || C1 % nd) gdn_die("cuda_conv_silu3_l2_fwd: heads of %d channels do not tile %d, %d", nd, C0, C1);
    if ((size_t)B * T * (C0 + C1 + C2) == 0) return;
    void *const ys[3] = {y0, y1, y2};
    bool done = false;
    if (norm_fits(cw, nd))
        CUDA_DT_SWITCH(dt, E, {
            conv_silu_fwd_params<E> p = fwd_params<E>(ys, cw, x, w, T, K, ld, doc_start);
            p.rn[0] = rn0;
            p.rn[1] = rn1;
            p.nd = nd;
            p.eps = (float)eps;
            p.sc[0] = (float)s0;
            p.sc[1] = (float)s1;
            done = conv_silu_fwd_launch<E>(p, B, s);
        });
    if (done) return;
    cuda_conv_silu3_fwd(dt, y0, y1, y2, x, w, B, T, C0, C1, C2, K, ld, doc_start, s);  // then the norms in place
    const size_t N = (size_t)B * T;
    cuda_l2norm_fwd(dt, y0, rn0, y0, N * (C0 / nd), nd, eps, s0, s);
    cuda_l2norm_fwd(dt, y1, rn1, y1, N * (C1 / nd), nd, eps, s1, s);
}

extern "C" void cuda_conv_silu_fwd(cuda_dtype dt, void *y, const void *x, const void *w, int B, int T, int C, int K,
                                   size_t ld, const int32_t *doc_start, cudaStream_t s) {
    cuda_conv_silu3_fwd(dt, y, NULL, NULL, x, w, B, T, C, 0, 0, K, ld, doc_start, s);
}
