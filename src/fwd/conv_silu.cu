// conv_silu.cu — CUDA forward of GDN's fused short convolution + SiLU (twin of conv_silu_fwd_cpu,
// src/fwd/conv1d.c):
//   pre[b,t,c] = sum_{j<K} w[c,j] x[b, t-K+1+j, c]   (x at negative time = 0, per sequence)
//   y[b,t,c]   = silu(pre) = pre sigmoid(pre)
// pre stays in fp32 registers and is never stored (the backward, src/bwd/conv_silu.cu,
// recomputes it), so the pair costs one read of x and one write of y.
// Tiled kernel (conv_silu_fwd_tiled_kernel; the model's path: C % W == 0, x and y aligned to a
// pack, K <= CONV_SILU_KMAX, one instance per K): thread = (row = (b, tile of CONV_SILU_TT
// tokens), pack of W = 4 channels); a block is 32 packs (the lanes: 256 contiguous bytes of a
// token row per warp in bf16) x 8 rows (the warps). The thread walks its tile with the K-1 previous inputs in
// registers (a sliding window), so each x row is loaded once, plus K-1 halo rows per tile
// (L1/L2 hits: the neighbouring tile is the next warp's); the loads of a chunk of U tokens are
// issued together. Loads past the end of a sequence are clamped to its last row (never out of
// bounds), their outputs not stored. Sum order j = 0..K-1 as the CPU.
// Sizes (H200, bf16, B 16, T 2048, K 4; bench variants W 2/4/8, U 4/8/16, TT 8/16/32): C 512
// 23.7 us, C 1024 42 us, against 75.6 / 123 us for conv1d_fwd + silu_fwd and 18.6 / 34.8 us
// for a device copy of x. W 8 needs ~130 registers (2 blocks per SM) and was 15-20% slower.
// Other shapes: one thread per output element.
// With the L2 norm below, the s13 kernel (conv_silu_fwd_s13_kernel): the tiled kernel's
// arithmetic as one token stream per warp out of a per-thread cp.async ring in shared memory.
// History (git; bench/model_gpu.md): session 10's v2 kernel (conv_silu_fwd_v2_kernel: the tiled
// kernel's threads with the block's x tile staged in shared memory first) took 0.85x the tiled
// kernel's time with the norm, but 1.17x without it, so the plain forward stays on the tiled
// kernel; session 11 deleted the tiled kernel's norm path and v2's plain path, session 14 v2
// itself (session 13's s13 kernel matched it bitwise, in less time). "v2" below names it.
// x's rows have stride ld >= C (ld = C: packed; larger: q, k or v as columns of the fused input
// projection's output, model.c); y is packed (B,T,C). Segments (cuda_conv_silu3_fwd): the C
// channels split at cs[1], cs[2] into up to three outputs ys[s], each packed (B,T,cs[s+1]-cs[s])
// (GDN's q, k, v in one call: each row of the fused projection read once, one launch); the
// tiled path needs every segment width a multiple of W, so a pack never straddles two.
// L2 norm (cuda_conv_silu3_l2_fwd): segments 0 and 1 (GDN's q, k) leave normalised per head of
// nd channels, y = s silu(pre) rnorm, rnorm = 1/sqrt(sum silu(pre)^2 + eps) (rnorm saved, as
// l2norm_fwd). A head (nd | 128, heads starting at multiples of nd) is nd / W lanes of v2's
// warp of 32 W = 128 consecutive channels of one token: the sum of squares is a butterfly over
// them, of the fp32 silu values (the unfused path squares their rounded copies), and the
// unnormalised q, k are never stored. Other shapes: conv_silu3, then l2norm_fwd in place.
#include "../cuda/elementwise.cuh"

namespace {

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

// The plain forward (no norm; header).
template <typename T, int W, int K, int TT, int U>
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
                conv_silu_token<W, K>(wr, xw, o);
                if (t < p.T_) store_pack<T, W>(yb + (size_t)t * cw, o);
            }
        }
    }
}

// s13, the forward with the L2 norm (header) as one token stream per warp, v2's arithmetic
// unchanged. v2 stages a block's whole tile, waits, then computes (its
// three blocks an SM alternate between loading and computing, issue-bound in between: ~170
// instructions a warp-token of 4 channels a lane), and stores y by four 2-byte stores a lane.
// Here a warp owns 256 channels (two groups of 128 = v2's warp, one a half-warp) over a chunk of
// one sequence's tokens (sched: as many chunks as the resident warps take in one round), and
// walks it token by token out of a per-thread ring of S13_D rows in shared memory (each thread
// stages by cp.async exactly the bytes it reads, S13_D - S13_FU rows ahead, so no barrier and
// no other thread is involved; a slot is refilled one step after it was read). A lane holds two
// packs of W channels: pack k of lane l in half h is channel g + 64 k + 4 l, g = 256 wc + 128 h,
// i.e. v2's lanes l (k = 0) and l + 16 (k = 1) of the warp of group g: their sums of squares are
// v2's butterfly's first level (xor 16, one add: ss0 + ss1 = ss1 + ss0 bitwise) and the levels
// xor 8 .. 1 are the same shuffles within the half-warp. Everything else (the window, the conv
// and SiLU, the squares, 1 / sqrt, the scale) is v2's expressions on v2's values in v2's order;
// a warp whose channels are all in segment 2 skips the norm (v2 computed it and dropped it).
// y leaves by one 8- (bf16) or 16-byte (fp32) store per pack (st_pack4, the same rounding).
constexpr int S13_D = 8;   // ring slots of token rows per thread (+ K-1 for the first window)
constexpr int S13_FU = 1;  // tokens a step (2, interleaving their shuffles, spilled at 128 registers)
constexpr int S13_WARPS = 8, S13_THREADS = 32 * S13_WARPS, S13_F_BLOCKS = 2;
struct conv_s13_sched {
    int lc, nch, ncolw, items;  // tokens a chunk, chunks a sequence, warp columns, B nch ncolw
};
template <typename T, int K> constexpr size_t conv_s13_smem() {  // [warp][slot][pack][lane] packs
    return (size_t)S13_WARPS * (S13_D + K - 1) * 2 * 32 * CONV_SILU_W * sizeof(T);
}
template <typename T, int K>
__global__ void __launch_bounds__(S13_THREADS, S13_F_BLOCKS)
    conv_silu_fwd_s13_kernel(const conv_silu_fwd_params<T> p, const conv_s13_sched sch) {
    constexpr int W = CONV_SILU_W, NP = 2, D = S13_D, U = S13_FU, CB = W * (int)sizeof(T);
    static_assert(D % U == 0 && D >= 2 * U, "steps of U rows, refilled one step late");
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, h = lane / 16, l = lane % 16;
    unsigned char *const ring = smem + (size_t)warp * (D + K - 1) * NP * 32 * CB;
    auto slot = [ring, lane](int sl, int k) { return (const T *)(ring + ((sl * NP + k) * 32 + lane) * CB); };
    const int C = p.C, T_ = p.T_, hl = p.nd / W;  // hl: v2's lanes a head (a power of two <= 32)
    const size_t ld = p.ld;
    for (int item = blockIdx.x * S13_WARPS + warp; item < sch.items; item += gridDim.x * S13_WARPS) {
        const int wc = item % sch.ncolw, chunk = item / sch.ncolw, b = chunk / sch.nch;
        const int ts = (chunk - b * sch.nch) * sch.lc, n = min(sch.lc, T_ - ts);
        const size_t bt = (size_t)b * T_;
        const int g = wc * 256 + h * 128;
        const bool live = g < C;  // C % 128 == 0 (norm_fits): a half-warp is all live or all dead
        const bool norm = wc * 256 < p.seg.cs[2];  // some channel of the warp in segment 0 or 1
        // per pack, as v2 per lane (selects, not indexing: p stays in constant space)
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
        // rows outside [0, ts + n) are zero-filled (v2's masked halo and its staged zeros)
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
                    conv_silu_token<NP * W, K>(wr, xw, o[v]);
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
                    if (hl == 32) {  // v2's level xor 16 (lane l's sum plus lane l + 16's), then 8 .. 1
#pragma unroll
                        for (int v = 0; v < U; v++) ss[v][0] = ss[v][0] + ss[v][1];
#pragma unroll
                        for (int off = 8; off > 0; off >>= 1)
#pragma unroll
                            for (int v = 0; v < U; v++) ss[v][0] += __shfl_xor_sync(0xffffffffu, ss[v][0], off);
                    } else {  // heads within a pack's 16 lanes: v2's levels hl/2 .. 1 for each pack
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
        const int t = (int)(r % p.T_);
        float s = 0.f;
        for (int j = 0; j < p.K; j++)
            if (t - (p.K - 1) + j >= 0) s += to_f(p.w[(size_t)c * p.K + j]) * to_f(p.x[(r - (p.K - 1) + j) * p.ld + c]);
        *p.yrow(r, c) = from_f<T>(silu_f(s));
    }
}

// s13: as many chunks of each sequence as the resident warps take in one round (2 blocks of 8
// warps an SM at the model's shape: B 16, T 2048, 8 warp columns -> 16 chunks of 128 tokens, one
// item a warp), each a multiple of S13_D tokens; a grid of at most the resident blocks.
template <typename T, int K>
void conv_silu_fwd_s13_launch(const conv_silu_fwd_params<T> &p, int B, cudaStream_t s) {
    constexpr size_t smem = conv_s13_smem<T, K>();
    auto kern = conv_silu_fwd_s13_kernel<T, K>;
    static int cache = 0;
    const int resident = s13_setup(kern, S13_THREADS, smem, &cache);
    conv_s13_sched sch;
    sch.ncolw = (int)GDN_CDIV(p.C, 256);
    const long long slots = (long long)resident * S13_WARPS, per_seq = GDN_MAX(slots / ((long long)B * sch.ncolw), 1LL);
    sch.lc = (int)GDN_CDIV(GDN_CDIV((long long)p.T_, per_seq), (long long)S13_D) * S13_D;
    sch.nch = (int)GDN_CDIV(p.T_, sch.lc);
    const long long items = (long long)B * sch.nch * sch.ncolw;
    if (items > INT32_MAX) gdn_die("cuda conv_silu_fwd s13: %lld warp items", items);
    sch.items = (int)items;
    const unsigned grid = (unsigned)GDN_MIN(GDN_CDIV(items, (long long)S13_WARPS), (long long)resident);
    kern<<<grid, S13_THREADS, smem, s>>>(p, sch);
    conv_silu_s13_count();
}

// NORM: the s13 kernel; else the tiled kernel.
template <typename T, int W, int K, bool NORM, int TT = CONV_SILU_TT, int U = CONV_SILU_U>
void conv_silu_fwd_tiled_launch(conv_silu_fwd_params<T> p, int B, cudaStream_t s) {
    if (NORM) {
        conv_silu_fwd_s13_launch<T, K>(p, B, s);
        return;
    }
    p.tiles = (int)GDN_CDIV(p.T_, TT);
    p.rows = B * p.tiles;
    const unsigned gx = (unsigned)GDN_CDIV(p.C / W, CONV_SILU_LANES);
    const unsigned gy = (unsigned)GDN_MIN(GDN_CDIV(p.rows, CONV_SILU_ROWS), 65535);
    conv_silu_fwd_tiled_kernel<T, W, K, TT, U><<<dim3(gx, gy), CONV_SILU_THREADS, 0, s>>>(p);
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
                                   size_t ld) {
    conv_silu_fwd_params<T> p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < 3; i++) p.ys[i] = (T *)ys[i];
    p.x = (const T *)x;
    p.w = (const T *)w;
    p.T_ = T_;
    p.K = K;
    p.ld = ld;
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

// ---- public entry point (cuda/ops.h) --------------------------------------------------------
static unsigned long conv_silu_s13_launches = 0;  // host side, counted at launch
void conv_silu_s13_count() { __atomic_add_fetch(&conv_silu_s13_launches, 1, __ATOMIC_RELAXED); }
extern "C" unsigned long cuda_conv_silu_s13_launches(void) {
    return __atomic_load_n(&conv_silu_s13_launches, __ATOMIC_RELAXED);
}

extern "C" void cuda_conv_silu3_fwd(cuda_dtype dt, void *y0, void *y1, void *y2, const void *x, const void *w, int B,
                                    int T, int C0, int C1, int C2, int K, size_t ld, cudaStream_t s) {
    const int cw[3] = {C0, C1, C2};
    check_shape("cuda_conv_silu_fwd", B, T, cw, K, ld);
    if ((size_t)B * T * (C0 + C1 + C2) == 0) return;
    void *const ys[3] = {y0, y1, y2};
    CUDA_DT_SWITCH(dt, E, conv_silu_fwd_launch<E>(fwd_params<E>(ys, cw, x, w, T, K, ld), B, s));
}

extern "C" void cuda_conv_silu3_l2_fwd(cuda_dtype dt, void *y0, void *y1, void *y2, float *rn0, float *rn1,
                                       const void *x, const void *w, int B, int T, int C0, int C1, int C2, int K,
                                       size_t ld, int nd, double eps, double s0, double s1, cudaStream_t s) {
    const int cw[3] = {C0, C1, C2};
    check_shape("cuda_conv_silu3_l2_fwd", B, T, cw, K, ld);
    if (nd < 1 || C0 % nd || C1 % nd) gdn_die("cuda_conv_silu3_l2_fwd: heads of %d channels do not tile %d, %d", nd, C0, C1);
    if ((size_t)B * T * (C0 + C1 + C2) == 0) return;
    void *const ys[3] = {y0, y1, y2};
    bool done = false;
    if (norm_fits(cw, nd))
        CUDA_DT_SWITCH(dt, E, {
            conv_silu_fwd_params<E> p = fwd_params<E>(ys, cw, x, w, T, K, ld);
            p.rn[0] = rn0;
            p.rn[1] = rn1;
            p.nd = nd;
            p.eps = (float)eps;
            p.sc[0] = (float)s0;
            p.sc[1] = (float)s1;
            done = conv_silu_fwd_launch<E>(p, B, s);
        });
    if (done) return;
    cuda_conv_silu3_fwd(dt, y0, y1, y2, x, w, B, T, C0, C1, C2, K, ld, s);  // then the norms in place
    const size_t N = (size_t)B * T;
    cuda_l2norm_fwd(dt, y0, rn0, y0, N * (C0 / nd), nd, eps, s0, s);
    cuda_l2norm_fwd(dt, y1, rn1, y1, N * (C1 / nd), nd, eps, s1, s);
}

extern "C" void cuda_conv_silu_fwd(cuda_dtype dt, void *y, const void *x, const void *w, int B, int T, int C, int K,
                                   size_t ld, cudaStream_t s) {
    cuda_conv_silu3_fwd(dt, y, NULL, NULL, x, w, B, T, C, 0, 0, K, ld, s);
}
