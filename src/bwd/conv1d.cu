// conv1d.cu — CUDA backwards of the short causal depthwise convolution (twins of conv1d_bwd_cpu
// and conv_silu_bwd_cpu, src/bwd/conv1d.c).
// Gradient rule (src/bwd/bwd_cpu.h): activation gradients (T) are overwritten, parameter
// gradients (fp32) ACCUMULATE (+=).
//
// conv1d, the plain op:
//   dx[b,s,c] = sum_{j: s+K-1-j < T} w[c,j] dy[b, s+K-1-j, c]                   (=)
//   dw[c,j]  += sum_{b, t >= K-1-j} dy[b,t,c] x[b, t-K+1+j, c]                  (+=, fp32)
// A tiled kernel (dx and the dw partials in one pass, then colsum_final_dw) where C % W == 0,
// the pointers are 16-byte aligned and K <= CONV_KMAX; else one thread per dx element and
// colsum_launch for dw (cuda/colsum.cuh).
//
// conv_silu (GDN's fused short convolution + SiLU). Forward: y = silu(pre), pre[b,t,c] =
// sum_{j<K} w[c,j] x[b, t-K+1+j, c]. Nothing but x is saved, so pre is recomputed here:
//   d_pre[t] = dy[t] silu'(pre[t]),  silu'(p) = s (1 + p (1 - s)),  s = sigmoid(p)
//   dx[s]    = sum_{j: s+K-1-j < T} w[c,j] d_pre[s+K-1-j]                     (=)
//   dw[c,j] += sum_{b, t >= K-1-j} d_pre[b,t,c] x[b, t-K+1+j, c]              (+=, fp32)
// all in fp32 registers (d_pre is never stored to global memory). Sequence edges: inputs before
// t = 0 are 0; d_pre at t >= T is 0, which is the "s+K-1-j < T" of dx; dx rows >= T are not
// stored.
// Document starts (doc_start, ops.h; lo_t = doc[b T + t]): pre[t] reads x only from lo_t on, so
//   dx[s] = sum_{j: t = s+K-1-j < T, lo_t <= s} w[c,j] d_pre[t],
//   dw[c,j] += sum_{b, t - K + 1 + j >= lo_t} d_pre[b,t,c] x[b, t-K+1+j, c];
// the ring kernel takes them as a template instance (DOC; the masked terms are zeros added in the
// same order, so starts that are all 0 give the bits of doc_start NULL), other shapes and the
// plain conv1d run the per-element kernels.
// Kernels:
// - staged (conv_silu_bwd_staged_kernel; the tiled path: C % W == 0, dx, dy, x aligned to a
//   pack, K <= CONV_SILU_KMAX, one instance per K): a block is 32 packs of W = 2 channels (the
//   lanes: 128 contiguous bytes of a token row in bf16) x 8 rows (the warps), a row = (b, tile
//   of CONV_SILU_TT tokens). x and dy of the block's tiles (and the K-1 halo tokens) are first
//   staged in shared memory by cp.async, every load in flight together; then each warp walks
//   its tile once with the K-1 previous inputs in registers (a window): pre[t] and d_pre[t],
//   dw += d_pre[t] x-window, d_pre stored over its dy; then dx[s] from the d_pre window. d_pre
//   is computed once per token, but for the K-1 tokens after each block (the next block
//   recomputes them).
// - ring (conv_silu_bwd_ring_kernel; the model's path: the tiled path with packs of 4 channels,
//   i.e. x, dx, dy and their rows on 4 elements, and one block a group of rows): the staged
//   kernel's sums as one token stream per warp (W = 4 in 128 registers: no d_pre planes), its dx
//   and partials bitwise, the same final kernel (its comment).
// - per element (other shapes: C off the pack, misaligned pointers, K > 4): per-element dx, and
//   dw by slices of rows summed in order, both recomputing d_pre where they need it; the same
//   final kernel.
// dw, deterministic (no atomics): the 8 warps of a block add their register partials in shared
// memory in warp order, the block writes one partial per dw element to part[blockIdx.y]
// (colsum_scratch, cuda/colsum.cuh), then conv_silu_dw_final_kernel adds the gridDim.y partials
// of each element in a fixed order and adds that to dw. The order depends on the shape only, so
// dw is bitwise the same run after run and on any device.
// Sizes (H200, bf16, B 16, T 2048, K 4): a register-window tiled kernel (loads in chunks of
// registers, the halo recomputed by both neighbours; best of W 1/2/4/8, U 2/4/8, TT 8/16/32, a
// double-buffered load pipeline, forced 2-4 blocks per SM) takes C 512 ~52 us, C 1024 ~91-96 us,
// against 156 / 229 us for silu_bwd + conv1d_bwd, and ~28 / 52 us to move the three tensors; the
// staged kernel takes 0.71x its time (bench/model_gpu.md). Registers decide it: per channel the K
// taps, K dw sums and two windows of K values are live, so W 4 / 8 need 128-255 registers (1-2
// blocks per SM) and run 15-80% slower.
#include "../cuda/conv1d.cuh"
#include "../cuda/colsum.cuh"
#include "../cuda/ops_testing.h"

namespace {

// column col = j*C + c (coalesced over c): dw[c,j] += sum_{b, t >= K-1-j} dy[b,t,c] x[b,t-K+1+j,c]
template <typename T> struct conv_dw_term {
    const T *dy, *x;
    float *dw;
    int T_, C, K;
    const int32_t *doc;  // NULL, or (B*T) document starts: x before lo_t is 0
    __device__ __forceinline__ float term(size_t r, int col) const {
        const int j = col / C, c = col % C, t = (int)(r % T_), lo = doc ? doc[r] : 0;
        if (t - (K - 1) + j < lo) return 0.f;
        return to_f(dy[r * C + c]) * to_f(x[(r - (K - 1) + j) * C + c]);
    }
    __device__ __forceinline__ float *dst(int col) const { return dw + (size_t)(col % C) * K + col / C; }
};

// ---- conv1d dx[b,s,c] = sum_{j: s+K-1-j < T} w[c,j] dy[b, s+K-1-j, c]; thread per element ------
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
    conv1d_bwd_dx_kernel(T *dx, const T *dy, const T *w, size_t total, int T_, int C, int K, const int32_t *doc) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int c = (int)(idx % C);
        const size_t r = idx / C;
        const int s = (int)(r % T_);
        float acc = 0.f;
        for (int j = 0; j < K; j++)
            if (s + K - 1 - j < T_ && (!doc || doc[r + K - 1 - j] <= s)) acc += to_f(w[(size_t)c * K + j]) * to_f(dy[(r + K - 1 - j) * C + c]);
        dx[idx] = from_f<T>(acc);
    }
}

// ---- conv1d backward, tiled (the model's path; conditions as the forward's tiled kernel) --------
// Thread (b, tile of tt tokens, pack of W channels): dx of its tokens (16-byte loads of dy, taps
// in registers, j = 0..K-1 as the CPU) and its tile's share of dw, kept in registers and written
// to part[b * tiles + tile][c * K + j]; colsum_final_dw then adds the B * tiles partials of
// each dw element in a fixed order (no atomics: bitwise the same run after run).
constexpr int CONV_BWD_TT = 64, CONV_BWD_THREADS = 128;
constexpr size_t CONV_BWD_SCRATCH = (size_t)1 << 21;  // floats of partials before tiles grow
template <typename T, int W, int KM>
__global__ void __launch_bounds__(CONV_BWD_THREADS)
    conv1d_bwd_tiled_kernel(T *dx, float *part, const T *dy, const T *x, const T *w, int T_, int C, int K, int tt,
                            int tiles) {
    const int cp = blockIdx.x * blockDim.x + threadIdx.x;
    if (cp * W >= C) return;
    const int c0 = cp * W, b = blockIdx.y / tiles, t0 = (blockIdx.y % tiles) * tt, t1 = min(t0 + tt, T_);
    float wr[KM][W], dwp[KM][W];
#pragma unroll
    for (int j = 0; j < KM; j++)
#pragma unroll
        for (int i = 0; i < W; i++) {
            wr[j][i] = j < K ? to_f(w[(c0 + i) * K + j]) : 0.f;
            dwp[j][i] = 0.f;
        }
    const size_t off = (size_t)b * T_ * C + c0;
    const T *dyb = dy + off, *xb = x + off;
    T *dxb = dx + off;
    for (int t = t0; t < t1; t++) {
        float acc[W], g[W];
#pragma unroll
        for (int i = 0; i < W; i++) acc[i] = 0.f;
#pragma unroll
        for (int j = 0; j < KM; j++) {
            const int ts = t + K - 1 - j;  // dx[t] += w[j] dy[t + K - 1 - j]
            if (j < K && ts < T_) {
                float v[W];
                load_pack<T, W>(dyb + (size_t)ts * C, v);
#pragma unroll
                for (int i = 0; i < W; i++) acc[i] += wr[j][i] * v[i];
            }
        }
        store_pack<T, W>(dxb + (size_t)t * C, acc);
        load_pack<T, W>(dyb + (size_t)t * C, g);
#pragma unroll
        for (int j = 0; j < KM; j++) {
            const int ts = t - (K - 1) + j;  // dw[j] += dy[t] x[t - K + 1 + j]
            if (j < K && ts >= 0) {
                float v[W];
                load_pack<T, W>(xb + (size_t)ts * C, v);
#pragma unroll
                for (int i = 0; i < W; i++) dwp[j][i] += g[i] * v[i];
            }
        }
    }
    float *pb = part + (size_t)blockIdx.y * C * K;
#pragma unroll
    for (int j = 0; j < KM; j++)
#pragma unroll
        for (int i = 0; i < W; i++)
            if (j < K) pb[(c0 + i) * K + j] = dwp[j][i];
}

template <typename T>
void conv1d_bwd_launch(T *dx, float *dw, const T *dy, const T *x, const T *w, int B, int T_, int C, int K,
                       const int32_t *doc, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (!doc && C % W == 0 && K <= CONV_KMAX && aligned16(dx) && aligned16(dy) && aligned16(x)) {
        int tt = CONV_BWD_TT;  // longer tiles when the partials would outgrow the scratch
        while (tt < T_ && (size_t)B * GDN_CDIV(T_, tt) * C * K > CONV_BWD_SCRATCH) tt *= 2;
        const int tiles = (int)GDN_CDIV(T_, tt);
        const size_t S = (size_t)B * tiles;
        float *part = colsum_scratch(S * C * K);
        const dim3 grid((unsigned)GDN_CDIV(C / W, CONV_BWD_THREADS), (unsigned)S);
        if (K <= 4)  // the usual conv_size 4: half the registers of the general kernel
            conv1d_bwd_tiled_kernel<T, W, 4><<<grid, CONV_BWD_THREADS, 0, s>>>(dx, part, dy, x, w, T_, C, K, tt, tiles);
        else
            conv1d_bwd_tiled_kernel<T, W, CONV_KMAX>
                <<<grid, CONV_BWD_THREADS, 0, s>>>(dx, part, dy, x, w, T_, C, K, tt, tiles);
        CUDA_CHECK_LAUNCH();
        colsum_final_dw(dw, part, C * K, (int)S, s);
        return;
    }
    const size_t total = (size_t)B * T_ * C;
    conv1d_bwd_dx_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(dx, dy, w, total, T_, C, K, doc);
    CUDA_CHECK_LAUNCH();
    colsum_launch(conv_dw_term<T>{dy, x, dw, T_, C, K, doc}, (size_t)B * T_, C * K, s);
}

// ---- conv + SiLU -------------------------------------------------------------------------------
// One group of rows of a staged block: ROWS tiles of TT tokens, tile w = row rg ROWS + w of the
// (B, tiles) grid = (b, t0). s_t0[w] = t0 (negative: past the last row), s_bt[w] = b T.
// Virtual token v (v >= -(K-1)): tile w = clamp(v / TT, 0, ROWS - 1), token t0[w] + v - w TT, so
// tiles that follow each other in one sequence (the common case) give consecutive tokens, and
// the tokens before tile 0 and after tile ROWS - 1 are its halos.
constexpr int CONV_STAGE_NOROW = -(1 << 30);
template <int ROWS, int TT>
__device__ __forceinline__ void conv_stage_rows(int *s_t0, int *s_bt, int rg, int rows, int tiles, int T_) {
    if (threadIdx.x < ROWS) {
        const int r = rg * ROWS + (int)threadIdx.x, b = r / tiles;
        s_t0[threadIdx.x] = r < rows ? (r - b * tiles) * TT : CONV_STAGE_NOROW;
        s_bt[threadIdx.x] = r < rows ? b * T_ : 0;
    }
}
// Stages virtual tokens V0 .. V0 + NV - 1, channels [cg0, cg0 + CG), into dst: row i = v - V0 at
// i CG sizeof(T) bytes, CB bytes per cp.async (coalesced: NQ = CG sizeof(T) / CB consecutive
// threads take one row). Tokens outside [0, T) and channels >= C are zero-filled, nothing read.
// at(tok, c): the global address of channel c of token row tok = b T + t; safe: any CB-aligned
// global address (the unread source of zero fills).
template <typename T, int CG, int CB, int NV, int V0, int ROWS, int TT, int THREADS, class At>
__device__ __forceinline__ void conv_stage_tile(unsigned char *dst, const At &at, const void *safe, int cg0, int C,
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

// dx of one token from the window of d_pre: sum_j w[j] d_pre[s + K-1 - j], from 0 in tap order
// (the staged and ring backward kernels both, so their dx bits agree).
template <int W, int K>
__device__ __forceinline__ void conv_dx_token(float (&acc)[W], const float (&wr)[K][W], const float (&dpw)[K][W]) {
#pragma unroll
    for (int i = 0; i < W; i++) {
        acc[i] = 0.f;
#pragma unroll
        for (int j = 0; j < K; j++) acc[i] += wr[j][i] * dpw[K - 1 - j][i];
    }
}
// The same where only d_pre[s + m], m < n, count (the tokens of s's document; n >= K: all):
// the others are zeros added in the same order.
template <int W, int K>
__device__ __forceinline__ void conv_dx_token_doc(float (&acc)[W], const float (&wr)[K][W], const float (&dpw)[K][W],
                                                  int n) {
#pragma unroll
    for (int i = 0; i < W; i++) {
        acc[i] = 0.f;
#pragma unroll
        for (int j = 0; j < K; j++) acc[i] += wr[j][i] * (K - 1 - j < n ? dpw[K - 1 - j][i] : 0.f);
    }
}

constexpr int CONV_SILU_KMAX = 4;  // taps of the tiled kernel
constexpr int CONV_SILU_W = 2;     // channels per thread (4-byte loads in bf16, 8 in fp32)
constexpr int CONV_SILU_TT = 16;   // tokens per warp's tile
constexpr int CONV_SILU_LANES = 32, CONV_SILU_ROWS = 8, CONV_SILU_THREADS = CONV_SILU_LANES * CONV_SILU_ROWS;
constexpr size_t CONV_SILU_FALLBACK_PART = (size_t)1 << 20;  // fallback: slices x cols <= this
constexpr int CONV_SILU_FALLBACK_ROWS = 64;                  // fallback: rows per slice, at least

// Shapes and pointers of one call. part: (slices, C*K) dw partials; column col = e * P + cp
// with e = j * W + i, P = C / W (tiled: pack cp, channel c = cp W + i, tap j; W = 1, P = C in
// the fallback, so col = j C + c).
// x and dx rows have stride ld >= C (ld = C: packed; larger: columns of the fused input
// projection, model.c); dy is packed (B,T,C), or in segments (cuda_conv_silu3_bwd: channels
// [cs[s], cs[s+1]) from dys[s], packed (B,T,cs[s+1]-cs[s]); the forward's q, k, v in one call).
template <typename T> struct conv_silu_bwd_params {
    T *dx;
    float *part;
    const T *dys[3], *x, *w;
    int T_, C, K, tiles, rows;
    size_t ld;
    conv_segs seg;  // which dy buffer each channel comes from (cuda/conv1d.cuh)
    const int32_t *doc;  // NULL, or (B*T) document starts (header)
    // dy's element (token row r, channel c) and the row stride of c's segment
    __device__ __forceinline__ const T *dyrow(size_t r, int c) const { return seg.at(dys[0], dys[1], dys[2], r, c); }
    __device__ __forceinline__ int width(int c) const { return seg.width(c); }
};

// sigmoid_fast (cuda/elementwise.cuh): the fast intrinsics, no branch.
__device__ __forceinline__ float dsilu_f(float g, float pre) {  // g silu'(pre)
    const float s = sigmoid_fast(pre);
    return g * s * (1.f + pre * (1.f - s));
}

// The staged kernel (header). Block = CONV_SILU_ROWS tiles of TT tokens (rows rg ROWS + warp,
// rg = blockIdx.y + k gridDim.y) x 32 W channels. Per group of rows:
//   stage: x for the K-1 tokens before the first tile, the ROWS TT tokens and K-1 after the
//     last (NX rows), dy for the ROWS TT + K-1 tokens (ND rows), every cp.async in flight
//     together (CB bytes each: 16 where rows, segments and pointers allow);
//   phase 1: warp w walks its tile with the x window: d_pre[t] (0 at t >= T) into shared memory
//     in place of its dy, and dw += d_pre[t] x-window, token by token; the last warp
//     also computes d_pre of the K-1 tokens after its tile (the next block's first tile
//     recomputes them as its own, from the same inputs by the same operations: the same bits);
//   phase 2: warp w forms dx[t0 .. t0+TT-1] from d_pre[t0 .. t0+TT+K-2] (the K-1 after its tile
//     are the next warp's, or 0 where t >= T: a tile's successor row is the next tile of its
//     sequence whenever t0 + TT < T).
// d_pre sits where its dy was: fp32 over fp32 in place; bf16: plane A holds channel c0 of a
// lane's pair on the 4 bytes of its dy pair, plane B channel c0 + 1, so a lane only ever
// overwrites its own dy.
constexpr int CONV_SILU_STAGED_BLOCKS = 4;  // blocks per SM: registers held to 64
template <typename T, int K, int CB>
__global__ void __launch_bounds__(CONV_SILU_THREADS, CONV_SILU_STAGED_BLOCKS)
    conv_silu_bwd_staged_kernel(const conv_silu_bwd_params<T> p) {
    constexpr int W = CONV_SILU_W, TT = CONV_SILU_TT, ROWS = CONV_SILU_ROWS;
    constexpr int CG = CONV_SILU_LANES * W, RB = CG * (int)sizeof(T);  // channels, bytes per staged row
    constexpr int NX = ROWS * TT + 2 * (K - 1), ND = ROWS * TT + K - 1;
    constexpr int RF = RB / 4, LF = W * (int)sizeof(T) / 4;  // plane row and lane offset in floats
    static_assert(W == 2, "plane A / B: a lane's pair of d_pre over its pair of dy");
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int s_t0[ROWS], s_bt[ROWS];
    unsigned char *const xsm = smem, *const dsm = smem + NX * RB;
    float *const dpa = (float *)dsm, *const dpb = (float *)(dsm + ND * RB);  // dpb: bf16 only
    const int lane = threadIdx.x % CONV_SILU_LANES, warp = threadIdx.x / CONV_SILU_LANES;
    const int C = p.C, P = C / W, cp = blockIdx.x * CONV_SILU_LANES + lane, c0 = cp * W, cg0 = blockIdx.x * CG;
    const bool live = cp < P;
    float wr[K][W], dwp[K][W];
#pragma unroll
    for (int j = 0; j < K; j++)
#pragma unroll
        for (int i = 0; i < W; i++) {
            wr[j][i] = live ? to_f(p.w[(size_t)(c0 + i) * K + j]) : 0.f;
            dwp[j][i] = 0.f;
        }
    const size_t ld = p.ld;
    const T *const x = p.x;
    const conv_segs seg = p.seg;
    const T *const dy0 = p.dys[0], *const dy1 = p.dys[1], *const dy2 = p.dys[2];
    auto xat = [x, ld](int tok, int c) { return x + (size_t)tok * ld + c; };
    auto dyat = [seg, dy0, dy1, dy2](int tok, int c) { return seg.at(dy0, dy1, dy2, (size_t)tok, c); };
    const T *xl = (const T *)xsm + lane * W, *gl = (const T *)dsm + lane * W;  // row 0, this lane
    for (int rg = blockIdx.y; rg * ROWS < p.rows; rg += gridDim.y) {
        conv_stage_rows<ROWS, TT>(s_t0, s_bt, rg, p.rows, p.tiles, p.T_);
        __syncthreads();
        conv_stage_tile<T, CG, CB, NX, -(K - 1), ROWS, TT, CONV_SILU_THREADS>(xsm, xat, x, cg0, C, p.T_, s_t0, s_bt);
        conv_stage_tile<T, CG, CB, ND, 0, ROWS, TT, CONV_SILU_THREADS>(dsm, dyat, x, cg0, C, p.T_, s_t0, s_bt);
        cp_async_wait_all();
        __syncthreads();
        const int t0 = s_t0[warp];
        const bool run = live && t0 >= 0;
        if (run) {  // phase 1
            const int r0 = warp * TT;  // staged row of x[t0 - (K-1)], of dy[t0]
            float xw[K][W];  // before token t: xw[m] = x[t-(K-1)+m], m < K-1
#pragma unroll
            for (int m = 0; m < K - 1; m++) {
                unpack<T, W>(ld_pack<T, W>(xl + (r0 + m) * CG), xw[m]);
#pragma unroll
                for (int i = 0; i < W; i++) xw[m][i] = t0 - (K - 1) + m >= 0 ? xw[m][i] : 0.f;
            }
            // one token: d_pre (own: its dw terms), stored over its dy
            auto step = [&](int u, bool own) {
                const int t = t0 + u, r = r0 + u;
                float g[W], dp[W];
                unpack<T, W>(ld_pack<T, W>(xl + (r + K - 1) * CG), xw[K - 1]);
                unpack<T, W>(ld_pack<T, W>(gl + r * CG), g);
#pragma unroll
                for (int i = 0; i < W; i++) {
                    float pre = 0.f;
#pragma unroll
                    for (int j = 0; j < K; j++) pre += wr[j][i] * xw[j][i];
                    dp[i] = t < p.T_ ? dsilu_f(g[i], pre) : 0.f;  // 0 past the end
                }
                if (own)
#pragma unroll
                    for (int j = 0; j < K; j++)
#pragma unroll
                        for (int i = 0; i < W; i++) dwp[j][i] += dp[i] * xw[j][i];
                if constexpr (sizeof(T) == 4) {
                    *(float2 *)(dpa + r * RF + lane * LF) = make_float2(dp[0], dp[1]);
                } else {
                    dpa[r * RF + lane] = dp[0];
                    dpb[r * RF + lane] = dp[1];
                }
#pragma unroll
                for (int m = 0; m < K - 1; m++)
#pragma unroll
                    for (int i = 0; i < W; i++) xw[m][i] = xw[m + 1][i];
            };
#pragma unroll
            for (int u = 0; u < TT; u++) step(u, true);
            if (warp == ROWS - 1)
#pragma unroll
                for (int u = TT; u < TT + K - 1; u++) step(u, false);
        }
        __syncthreads();
        if (run) {  // phase 2: dx[s] = sum_j w[j] d_pre[s+K-1-j], s = t0 .. t0+TT-1
            const int r0 = warp * TT;
            T *dxb = p.dx + ((size_t)s_bt[warp] + t0) * ld + c0;
            auto dpre = [&](int u, float (&d)[W]) {  // d_pre[t0 + u], 0 at t >= T
                const bool in = u < TT || t0 + u < p.T_;  // the tile's own rows hold 0 there
                if constexpr (sizeof(T) == 4) {
                    const float2 v = *(const float2 *)(dpa + (r0 + u) * RF + lane * LF);
                    d[0] = in ? v.x : 0.f;
                    d[1] = in ? v.y : 0.f;
                } else {
                    const float a = dpa[(r0 + u) * RF + lane], b = dpb[(r0 + u) * RF + lane];
                    d[0] = in ? a : 0.f;
                    d[1] = in ? b : 0.f;
                }
            };
            float dpw[K][W];
#pragma unroll
            for (int m = 0; m < K - 1; m++) dpre(m, dpw[m]);
#pragma unroll
            for (int u = 0; u < TT; u++) {
                dpre(u + K - 1, dpw[K - 1]);
                float acc[W];
                conv_dx_token<W, K>(acc, wr, dpw);
                if (t0 + u < p.T_) store_pack<T, W>(dxb + (size_t)u * ld, acc);
#pragma unroll
                for (int m = 0; m < K - 1; m++)
#pragma unroll
                    for (int i = 0; i < W; i++) dpw[m][i] = dpw[m + 1][i];
            }
        }
        __syncthreads();  // the tiles and s_t0 are rewritten by the next group of rows
    }
    // block partial of dw: warps added in order 0..7 for each element
    float *const red = (float *)smem;  // [ROWS][K W][32]
#pragma unroll
    for (int j = 0; j < K; j++)
#pragma unroll
        for (int i = 0; i < W; i++) red[(warp * K * W + j * W + i) * CONV_SILU_LANES + lane] = dwp[j][i];
    __syncthreads();
    if (!live) return;
    float *pb = p.part + (size_t)blockIdx.y * C * K;
    for (int e = warp; e < K * W; e += CONV_SILU_ROWS) {
        float s = 0.f;
#pragma unroll
        for (int r = 0; r < CONV_SILU_ROWS; r++) s += red[(r * K * W + e) * CONV_SILU_LANES + lane];
        pb[(size_t)e * P + cp] = s;
    }
}

// The ring kernel (header): the staged kernel's sums as one token stream per warp, without the
// shared-memory d_pre planes. The staged kernel stages a block's tiles, waits, walks them (phase
// 1), syncs, forms dx (phase 2), syncs: ~75 instructions a channel-token at W = 2, issue-bound
// (the bytes of x, dy and dx take ~100 us at 4 TB/s, the instructions ~150 us). Here a warp owns
// 128 channels (W = 4 a lane) of one group rg of the staged kernel's 8 tiles (item = (rg, channel
// group)) and a lane walks the group's tokens in order out of a per-thread cp.async ring (as the
// forward's ring kernel: each thread stages exactly what it reads, RING_D - 1 rows ahead, a slot
// refilled one row after it was read). Per token, with the window of the K-1 previous x and the
// K-1 previous d_pre in registers: pre, d_pre (0 at t >= T), the dw terms (own tiles), and
// dx[t - (K-1)] from the d_pre window; all of them the staged kernel's expressions on its values
// in its order. Tiles that follow each other in one sequence form a run walked in one go (dx of a
// tile's last K-1 tokens from the next tile's first d_pre, which the staged kernel reads from the
// next warp's plane: the same value from the same inputs); at the end of a run the K-1 following
// tokens are computed (the staged kernel's last warp does that for its block: d_pre there is 0 at
// t >= T, else recomputed as the next block does). A run starts with the K-1 x before its first
// token (0 before t = 0). dw: the staged kernel adds, per block and element, the 8 warps' sums in
// warp order onto 0 (one group of rows a block: this kernel runs only where gridDim.y covers every
// group); here lane c keeps its tile's sum a (from 0, tokens in order) and adds it to its group's
// sum s at each tile's end (s from 0, tiles in order; a tile past the last row adds 0), then
// writes s where the staged kernel's block writes that element's partial (column e P + cp for
// W = 2).
constexpr int RING_D = 8;  // ring slots of token rows per thread (+ K-1 for a run's first window)
constexpr int RING_WARPS = 8, RING_THREADS = 32 * RING_WARPS, RING_BLOCKS = 2;
template <typename T, int K> constexpr size_t conv_ring_bytes() {  // [warp][slot][x, dy][lane] packs
    return (size_t)RING_WARPS * (RING_D + K - 1) * 2 * 32 * 4 * sizeof(T);
}
template <typename T, int K> constexpr size_t conv_ring_smem() {  // + [warp][j W + i][lane] group sums
    return conv_ring_bytes<T, K>() + (size_t)RING_WARPS * K * 4 * 32 * sizeof(float);
}
// DOC: with p.doc's document starts (header): x taps before the token's start read 0, and dx[s]
// takes d_pre[s + m] for m < n only, n the first m >= 1 whose token starts a document (tokens
// past T count as starts: their d_pre is 0 either way); bit m of `starts` marks token
// t - (K-1) + m of the window.
template <typename T, int K, bool DOC>
__global__ void __launch_bounds__(RING_THREADS, RING_BLOCKS)
    conv_silu_bwd_ring_kernel(const conv_silu_bwd_params<T> p, int ncolg, int S) {
    constexpr int W = 4, D = RING_D, TT = CONV_SILU_TT, ROWS = CONV_SILU_ROWS, CB = W * (int)sizeof(T);
    static_assert(TT % D == 0, "a tile's rows fill whole rounds of the ring");
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned char *const ring = smem + (size_t)warp * (D + K - 1) * 2 * 32 * CB;
    auto slot = [ring, lane](int sl, int k) { return (const T *)(ring + ((sl * 2 + k) * 32 + lane) * CB); };
    // the group's dw sums (the staged kernel's block partial), sw[j W + i] of this lane: in shared memory, touched
    // once a tile (registers hold the taps, both windows and the tile's sums)
    float *const sw = (float *)(smem + conv_ring_bytes<T, K>()) + warp * K * W * 32 + lane;
    const int C = p.C, T_ = p.T_, P2 = C / 2;
    const size_t ld = p.ld;
    for (int item = blockIdx.x * RING_WARPS + warp; item < ncolg * S; item += gridDim.x * RING_WARPS) {
        const int rg = item / ncolg, c0 = (item - rg * ncolg) * 128 + lane * W;
        if (c0 >= C) continue;  // a dead lane (C % 4 == 0: a pack is all live); no warp-wide step below
        const int dyw = p.width(c0);
        const T *const dyc = p.dyrow(0, c0);  // channel c0 of token row 0 in its dy segment
        float wr[K][W];
#pragma unroll
        for (int j = 0; j < K; j++)
#pragma unroll
            for (int i = 0; i < W; i++) {
                wr[j][i] = to_f(p.w[(size_t)(c0 + i) * K + j]);
                sw[(j * W + i) * 32] = 0.f;
            }
        int w = 0;  // next tile of the group
        while (w < ROWS) {
            const int row = rg * ROWS + w;
            if (row >= p.rows) {  // as the staged kernel: a warp without a tile adds its 0
#pragma unroll
                for (int j = 0; j < K; j++)
#pragma unroll
                    for (int i = 0; i < W; i++) sw[(j * W + i) * 32] = sw[(j * W + i) * 32] + 0.f;
                w++;
                continue;
            }
            const int b = row / p.tiles, t0 = (row - b * p.tiles) * TT;
            int nt = 1;  // the run: tiles w .. w + nt - 1, one after the other in sequence b
            while (w + nt < ROWS && rg * ROWS + w + nt < p.rows && t0 + nt * TT < T_) nt++;
            w += nt;
            const size_t bt = (size_t)b * T_;
            const int nq = nt * TT + K - 1;  // token rows: the run's tokens and the K-1 after
            // staging: first the K-1 window rows (x only, slots D ..), then token rows q (x and dy,
            // slot q % D); zero outside [0, T) (the staged kernel's masked halo and staged zeros)
            int tq = t0 - (K - 1);
            long long xo = ((long long)bt + tq) * (long long)ld + c0, go = ((long long)bt + t0) * dyw;
            long long dxo = xo;  // dx's element of token row q's s = t - (K-1), one row on a step
            auto stage_x = [&](int sl) {
                const bool ok = tq >= 0 && tq < T_;
                cp_async_zfill<CB>((void *)slot(sl, 0), ok ? p.x + xo : p.x, ok);
                cp_async_commit();
                tq++;
                xo += (long long)ld;
            };
            auto stage = [&](int sl) {  // the next token row (none past the run's)
                if (tq < t0 + nq) {
                    const bool ok = tq < T_;
                    cp_async_zfill<CB>((void *)slot(sl, 0), ok ? p.x + xo : p.x, ok);
                    cp_async_zfill<CB>((void *)slot(sl, 1), ok ? dyc + go : p.x, ok);
                }
                cp_async_commit();
                tq++;
                xo += (long long)ld;
                go += dyw;
            };
#pragma unroll
            for (int m = 0; m < K - 1; m++) stage_x(D + m);
#pragma unroll
            for (int q = 0; q < D - 1; q++) stage(q);
            cp_async_wait<D - 1>();
            float xw[K][W], dpw[K][W], aw[K][W];  // x and d_pre windows; the tile's dw sums
            unsigned starts = 0;  // DOC: the window's document starts (none before the run: d_pre is 0 there)
#pragma unroll
            for (int m = 0; m < K - 1; m++) {
                unpack<T, W>(ld_pack<T, W>(slot(D + m, 0)), xw[m]);
#pragma unroll
                for (int i = 0; i < W; i++) dpw[m][i] = 0.f;  // (feeds no stored dx)
            }
            // token row q (compile-time slot sl): d_pre[t], own: dw terms, and dx[t - (K-1)]
            auto step = [&](int q, int sl, bool own) {
                cp_async_wait<D - 2>();
                const int t = t0 + q;
                float g[W];
                unpack<T, W>(ld_pack<T, W>(slot(sl, 0)), xw[K - 1]);
                unpack<T, W>(ld_pack<T, W>(slot(sl, 1)), g);
                stage((sl + D - 1) % D);  // row q + D - 1 into row q - 1's slot
                if constexpr (DOC) {
                    // x before the token's document start lo is 0: zeroed in the window itself (every
                    // later token's start is >= lo; t >= T: any start, d_pre is 0)
                    const int lo = t < T_ ? p.doc[bt + t] : t, j0 = lo - (t - (K - 1));
#pragma unroll
                    for (int j = 0; j < K - 1; j++)
#pragma unroll
                        for (int i = 0; i < W; i++) xw[j][i] = j < j0 ? 0.f : xw[j][i];
                    starts |= (unsigned)(lo == t) << (K - 1);
                }
                float pre[W];
#pragma unroll
                for (int i = 0; i < W; i++) {
                    pre[i] = 0.f;
#pragma unroll
                    for (int j = 0; j < K; j++) pre[i] += wr[j][i] * xw[j][i];
                }
                if (t < T_)  // one branch for the pack (warp-uniform: a warp's lanes share t)
#pragma unroll
                    for (int i = 0; i < W; i++) dpw[K - 1][i] = dsilu_f(g[i], pre[i]);
                else
#pragma unroll
                    for (int i = 0; i < W; i++) dpw[K - 1][i] = 0.f;  // 0 past the end
                if (own)
#pragma unroll
                    for (int j = 0; j < K; j++)
#pragma unroll
                        for (int i = 0; i < W; i++) aw[j][i] += dpw[K - 1][i] * xw[j][i];
                const int s = t - (K - 1);  // dx[s] = sum_j w[j] d_pre[s+K-1-j]
                if (q >= K - 1 && s < T_) {
                    float acc[W];
                    if constexpr (DOC)
                        conv_dx_token_doc<W, K>(acc, wr, dpw, starts >> 1 ? __ffs((int)(starts >> 1)) : K);
                    else
                        conv_dx_token<W, K>(acc, wr, dpw);
                    st_pack4(p.dx + dxo, acc);
                }
                dxo += (long long)ld;
                if constexpr (DOC) starts >>= 1;
#pragma unroll
                for (int m = 0; m < K - 1; m++)
#pragma unroll
                    for (int i = 0; i < W; i++) {
                        xw[m][i] = xw[m + 1][i];
                        dpw[m][i] = dpw[m + 1][i];
                    }
            };
            for (int k = 0; k < nt; k++) {
#pragma unroll
                for (int j = 0; j < K; j++)
#pragma unroll
                    for (int i = 0; i < W; i++) aw[j][i] = 0.f;
#pragma unroll
                for (int u = 0; u < TT; u++) step(k * TT + u, u % D, true);
#pragma unroll
                for (int j = 0; j < K; j++)
#pragma unroll
                    for (int i = 0; i < W; i++) sw[(j * W + i) * 32] = sw[(j * W + i) * 32] + aw[j][i];
            }
#pragma unroll
            for (int m = 0; m < K - 1; m++) step(nt * TT + m, m % D, false);
            cp_async_wait<0>();  // the ring is free for the next run
        }
        float *pb = p.part + (size_t)rg * C * K;  // the staged layout: column (j 2 + i % 2) P2 + (c0 + i) / 2
#pragma unroll
        for (int j = 0; j < K; j++)
#pragma unroll
            for (int i2 = 0; i2 < 2; i2++)
                *reinterpret_cast<float2 *>(pb + (size_t)(j * 2 + i2) * P2 + c0 / 2) = make_float2(sw[(j * W + i2) * 32], sw[(j * W + 2 + i2) * 32]);
    }
}

// dw[c * K + j] += sum_{s < S} part[s][col] (col = e P + cp, e = j W + i, c = cp W + i): a block
// takes 32 columns; warp k adds slices k, k + 8, ... in order, then lane l of warp 0 adds the 8
// warp sums in order. Fixed order for a given S.
constexpr int CONV_SILU_FINAL_WARPS = 8;
__global__ void __launch_bounds__(CONV_SILU_FINAL_WARPS * 32)
    conv_silu_dw_final_kernel(float *dw, const float *part, int cols, int S, int P, int W, int K) {
    __shared__ float red[CONV_SILU_FINAL_WARPS][32];
    const int lane = threadIdx.x % 32, k = threadIdx.x / 32, col = blockIdx.x * 32 + lane;
    float acc = 0.f;
    if (col < cols)
        for (int s = k; s < S; s += CONV_SILU_FINAL_WARPS) acc += part[(size_t)s * cols + col];
    red[k][lane] = acc;
    __syncthreads();
    if (k != 0 || col >= cols) return;
    float sum = 0.f;
#pragma unroll
    for (int r = 0; r < CONV_SILU_FINAL_WARPS; r++) sum += red[r][lane];
    const int e = col / P, cp = col % P, j = e / W, i = e % W;
    dw[(size_t)(cp * W + i) * K + j] += sum;
}

// ---- fallback: any C, alignment and K ----------------------------------------------------------
// d_pre at token r = b*T + t (t = r % T) of channel c, recomputed from x (same order j = 0..K-1).
// x before the token's document start is 0.
template <typename T> __device__ __forceinline__ float dpre_at(const conv_silu_bwd_params<T> &p, size_t r, int t, int c) {
    const int lo = p.doc ? p.doc[r] : 0;
    float pre = 0.f;
    for (int j = 0; j < p.K; j++)
        if (t - (p.K - 1) + j >= lo) pre += to_f(p.w[(size_t)c * p.K + j]) * to_f(p.x[(r - (p.K - 1) + j) * p.ld + c]);
    return dsilu_f(to_f(*p.dyrow(r, c)), pre);
}

template <typename T>
__global__ void __launch_bounds__(EW_THREADS) conv_silu_bwd_dx_kernel(const conv_silu_bwd_params<T> p, size_t total) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int c = (int)(idx % p.C);
        const size_t r = idx / p.C;
        const int s = (int)(r % p.T_);
        float acc = 0.f;
        for (int j = 0; j < p.K; j++) {
            const int t = s + p.K - 1 - j;
            if (t < p.T_ && (!p.doc || p.doc[r + p.K - 1 - j] <= s))
                acc += to_f(p.w[(size_t)c * p.K + j]) * dpre_at(p, r + p.K - 1 - j, t, c);
        }
        p.dx[r * p.ld + c] = from_f<T>(acc);
    }
}

// part[slice][j C + c] = sum over the slice's rows r (in order) of d_pre[r, c] x[r-K+1+j, c]
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
    conv_silu_bwd_dw_slices_kernel(const conv_silu_bwd_params<T> p, size_t rows, size_t rows_per_slice) {
    const int cols = p.C * p.K, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const int j = col / p.C, c = col % p.C;
    const size_t r0 = (size_t)blockIdx.y * rows_per_slice, r1 = GDN_MIN(rows, r0 + rows_per_slice);
    float acc = 0.f;
    for (size_t r = r0; r < r1; r++) {
        const int t = (int)(r % p.T_), lo = p.doc ? p.doc[r] : 0;
        if (t - (p.K - 1) + j >= lo) acc += dpre_at(p, r, t, c) * to_f(p.x[(r - (p.K - 1) + j) * p.ld + c]);
    }
    p.part[(size_t)blockIdx.y * cols + col] = acc;
}

// ---- launchers --------------------------------------------------------------------------------
template <typename T, int K, int CB>
void conv_silu_bwd_staged_launch(const conv_silu_bwd_params<T> &p, dim3 grid, cudaStream_t s) {
    constexpr int RB = CONV_SILU_LANES * CONV_SILU_W * (int)sizeof(T);
    constexpr int NX = CONV_SILU_ROWS * CONV_SILU_TT + 2 * (K - 1), ND = CONV_SILU_ROWS * CONV_SILU_TT + K - 1;
    constexpr size_t smem = (size_t)(NX + ND * (sizeof(T) == 2 ? 2 : 1)) * RB;  // x; dy and d_pre
    static_assert(smem >= sizeof(float) * CONV_SILU_ROWS * K * CONV_SILU_W * CONV_SILU_LANES, "room for dw's sum");
    auto kern = conv_silu_bwd_staged_kernel<T, K, CB>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<grid, CONV_SILU_THREADS, smem, s>>>(p);
    CUDA_CHECK_LAUNCH();
}

// The ring kernel: a grid of at most the resident blocks, its warps over the S x C / 128 items.
template <typename T, int K, bool DOC>
void conv_silu_bwd_ring_launch(const conv_silu_bwd_params<T> &p, int S, cudaStream_t s) {
    constexpr size_t smem = conv_ring_smem<T, K>();
    auto kern = conv_silu_bwd_ring_kernel<T, K, DOC>;
    static int cache = 0;
    const int resident = persistent_setup(kern, RING_THREADS, smem, &cache);
    const int ncolg = (int)GDN_CDIV(p.C, 128);
    if ((long long)ncolg * S > INT32_MAX) gdn_die("cuda conv_silu_bwd ring: %d x %d warp items", ncolg, S);
    const unsigned grid = (unsigned)GDN_MIN(GDN_CDIV((long long)ncolg * S, (long long)RING_WARPS), (long long)resident);
    kern<<<grid, RING_THREADS, smem, s>>>(p, ncolg, S);
    CUDA_CHECK_LAUNCH();
    conv_silu_ring_count();
}

// stage16: the staged kernel stages by 16-byte chunks (else by packs of W); ring: the ring kernel
// instead (its partials are the staged kernel's, so the same final kernel), where every group of
// rows has its block (ring_fits; the only tiled kernel with document starts)
bool ring_fits(int rows) { return (int)GDN_CDIV(rows, CONV_SILU_ROWS) <= 65535; }
template <typename T, int W, int K, int TT = CONV_SILU_TT>
void conv_silu_bwd_tiled_launch(conv_silu_bwd_params<T> p, float *dw, int B, bool stage16, bool ring, cudaStream_t s) {
    const int P = p.C / W, cols = p.C * K;
    p.tiles = (int)GDN_CDIV(p.T_, TT);
    p.rows = B * p.tiles;
    const unsigned gx = (unsigned)GDN_CDIV(P, CONV_SILU_LANES);
    const int S = GDN_MIN((int)GDN_CDIV(p.rows, CONV_SILU_ROWS), 65535);
    p.part = colsum_scratch((size_t)S * cols);
    if (ring && ring_fits(p.rows) && p.doc)
        conv_silu_bwd_ring_launch<T, K, true>(p, S, s);
    else if (ring && ring_fits(p.rows))
        conv_silu_bwd_ring_launch<T, K, false>(p, S, s);
    else if (stage16)
        conv_silu_bwd_staged_launch<T, K, 16>(p, dim3(gx, (unsigned)S), s);
    else
        conv_silu_bwd_staged_launch<T, K, (int)sizeof(T) * W>(p, dim3(gx, (unsigned)S), s);
    conv_silu_dw_final_kernel<<<(unsigned)GDN_CDIV(cols, 32), CONV_SILU_FINAL_WARPS * 32, 0, s>>>(dw, p.part, cols,
                                                                                                S, P, W, K);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void conv_silu_bwd_launch(T *dx, float *dw, const T *const dys[3], const int cw[3], const T *x, const T *w, int B,
                          int T_, int K, size_t ld, const int32_t *doc, cudaStream_t s) {
    constexpr int W = CONV_SILU_W;
    if ((size_t)B * T_ > (size_t)INT32_MAX) gdn_die("cuda conv_silu_bwd: B %d x T %d tokens is too many", B, T_);
    const conv_segs seg = conv_segs::of(cw);
    const int C = seg.cs[3];
    conv_silu_bwd_params<T> p = {dx, NULL, {dys[0], dys[1], dys[2]}, x, w, T_, C, K, 0, 0, ld, seg, doc};
    const uintptr_t pack = sizeof(T) * W - 1;  // pack alignment mask
    if (seg.packed(dys, W, pack) && ld % W == 0 && (((uintptr_t)dx | (uintptr_t)x) & pack) == 0 &&
        K <= CONV_SILU_KMAX) {
        // the staged kernel's 16-byte staging: x's rows, C, every dy segment and the x and dy
        // pointers on 16 bytes (dx is stored by packs of W either way)
        constexpr int E = 16 / (int)sizeof(T);
        const bool stage16 = ld % E == 0 && C % E == 0 && seg.packed(dys, E, 15) && ((uintptr_t)x & 15) == 0;
        // the ring kernel: packs of 4 channels (x, dx, dy and their rows on 4 elements)
        const uintptr_t pack4 = sizeof(T) * 4 - 1;
        const bool ring = ld % 4 == 0 && seg.packed(dys, 4, pack4) && (((uintptr_t)dx | (uintptr_t)x) & pack4) == 0;
        if (!doc || (ring && ring_fits(B * (int)GDN_CDIV(T_, CONV_SILU_TT)))) {  // else per element
            switch (K) {  // the one place that picks a tap count
            case 1: conv_silu_bwd_tiled_launch<T, W, 1>(p, dw, B, stage16, ring, s); break;
            case 2: conv_silu_bwd_tiled_launch<T, W, 2>(p, dw, B, stage16, ring, s); break;
            case 3: conv_silu_bwd_tiled_launch<T, W, 3>(p, dw, B, stage16, ring, s); break;
            case 4: conv_silu_bwd_tiled_launch<T, W, 4>(p, dw, B, stage16, ring, s); break;
            default: gdn_die("cuda conv_silu_bwd: K = %d > %d in the tiled path", K, CONV_SILU_KMAX);
            }
            return;
        }
    }
    const size_t rows = (size_t)B * T_, total = rows * C, cols = (size_t)C * K;
    const unsigned blocks = (unsigned)GDN_MIN(GDN_CDIV(total, (size_t)EW_THREADS), (size_t)65536);
    conv_silu_bwd_dx_kernel<T><<<blocks, EW_THREADS, 0, s>>>(p, total);
    CUDA_CHECK_LAUNCH();
    size_t S = GDN_CDIV(rows, (size_t)CONV_SILU_FALLBACK_ROWS);
    S = GDN_MIN(S, GDN_MAX((size_t)1, CONV_SILU_FALLBACK_PART / cols));
    S = GDN_MIN(S, (size_t)65535);
    const size_t rps = GDN_CDIV(rows, S);
    p.part = colsum_scratch(S * cols);
    conv_silu_bwd_dw_slices_kernel<T>
        <<<dim3((unsigned)GDN_CDIV(cols, (size_t)EW_THREADS), (unsigned)S), EW_THREADS, 0, s>>>(p, rows, rps);
    CUDA_CHECK_LAUNCH();
    conv_silu_dw_final_kernel<<<(unsigned)GDN_CDIV(cols, (size_t)32), CONV_SILU_FINAL_WARPS * 32, 0, s>>>(
        dw, p.part, (int)cols, (int)S, C, 1, K);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- public entry points (cuda/ops.h) ----------------------------------------------------------
extern "C" void cuda_conv1d_bwd(cuda_dtype dt, void *dx, float *dw, const void *dy, const void *x, const void *w,
                                int B, int T, int C, int K, const int32_t *doc_start, cudaStream_t s) {
    if ((size_t)B * T * C * K == 0) return;
    CUDA_DT_SWITCH(dt, E,
                   conv1d_bwd_launch<E>((E *)dx, dw, (const E *)dy, (const E *)x, (const E *)w, B, T, C, K, doc_start, s));
}

extern "C" void cuda_conv_silu3_bwd(cuda_dtype dt, void *dx, float *dw, const void *dy0, const void *dy1,
                                    const void *dy2, const void *x, const void *w, int B, int T, int C0, int C1,
                                    int C2, int K, size_t ld, const int32_t *doc_start, cudaStream_t s) {
    const int C = C0 + C1 + C2;
    if (B < 0 || T < 0 || C0 < 0 || C1 < 0 || C2 < 0 || K < 1 || ld < (size_t)C)
        gdn_die("cuda_conv_silu_bwd: bad shape B %d T %d C %d+%d+%d K %d ld %zu", B, T, C0, C1, C2, K, ld);
    if ((size_t)B * T * C == 0) return;
    if ((size_t)C * K > (size_t)INT32_MAX) gdn_die("cuda_conv_silu_bwd: C %d x K %d is too large", C, K);
    const int cw[3] = {C0, C1, C2};
    CUDA_DT_SWITCH(dt, E, {
        const E *const dys[3] = {(const E *)dy0, (const E *)dy1, (const E *)dy2};
        conv_silu_bwd_launch<E>((E *)dx, dw, dys, cw, (const E *)x, (const E *)w, B, T, K, ld, doc_start, s);
    });
}

extern "C" void cuda_conv_silu_bwd(cuda_dtype dt, void *dx, float *dw, const void *dy, const void *x, const void *w,
                                   int B, int T, int C, int K, size_t ld, const int32_t *doc_start, cudaStream_t s) {
    cuda_conv_silu3_bwd(dt, dx, dw, dy, NULL, NULL, x, w, B, T, C, 0, 0, K, ld, doc_start, s);
}
