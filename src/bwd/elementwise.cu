// elementwise.cu — CUDA backwards of the small ops of cuda/ops.h (twins of src/bwd/*.c): embedding,
// RMSNorm, conv1d, SiLU, L2 norm, GDN gates, gated RMSNorm, SwiGLU, dropout, RoPE.
// Gradient rule (src/bwd/bwd_cpu.h): activation gradients (T) are overwritten, parameter
// gradients (fp32) ACCUMULATE (+=).
// Parameter gradients are sums over N rows, taken without float atomics in two passes
// (colsum_*): the rows are cut into S slices (S a function of rows and columns only, never of
// the device), thread c of slice s sums its rows in order into part[s][c]; then one warp per
// column sums the S partials in a fixed order and adds the result to the gradient. part is a
// per-device scratch of at most max(2^18, cols) floats, allocated on first use and kept.
// RMSNorm and gated RMSNorm (16-byte path) take their dw partials in the pass that computes dx
// (one partial row per block, see "Fused kernels") and run only colsum_final_kernel after it;
// their unaligned and too-wide cases keep the two passes.
// Extra outputs (train.recompute = light): the RMSNorm and gated RMSNorm backwards can also write
// the forward's y, and the SwiGLU backward its h, from the inputs they read anyway (x, the saved
// rstd, w, z; gate, up), bitwise the forward kernels' values (rmsnorm_y, gated_rmsnorm_y,
// swiglu_h in cuda/elementwise.cuh). A template flag (Y, H) adds the store, so the kernels without
// it are those of before.
// Embedding: each run of equal tokens (built on the host, see cuda/ops.h) is one block that
// sums its rows in sorted order and adds once, so repeated tokens need no atomics either.
#include "../cuda/elementwise.cuh"

namespace {

constexpr int ROW_WARPS = 8, ROW_THREADS = ROW_WARPS * 32;
inline unsigned row_blocks(size_t rows) { return (unsigned)GDN_CDIV(rows, (size_t)ROW_WARPS); }
inline unsigned grid_for(size_t total) {
    return (unsigned)GDN_MIN(GDN_CDIV(total, (size_t)EW_THREADS), (size_t)65536);
}

// ---- deterministic column sums: f.dst(c) += sum_{r < rows} f.term(r, c) -----------------------
constexpr size_t COLSUM_SCRATCH = (size_t)1 << 18;  // floats; S * cols <= max(this, cols)
constexpr size_t COLSUM_MIN_ROWS = 16;              // rows per slice, at least (before rounding)
constexpr int COLSUM_MAX_SLICES = 4096, COLSUM_THREADS = 256, COLSUM_MAX_DEVICES = 64;

}  // namespace

// Scratch of the device in use (cuda/elementwise.cuh): grown (never shrunk) when a call needs
// more, which happens on the first calls only. Stream order makes it safe for launchers issued
// on one stream per device (the backend's compute stream); growth synchronises the device
// before freeing.
float *colsum_scratch(size_t nfloats) {
    static float *buf[COLSUM_MAX_DEVICES];
    static size_t cap[COLSUM_MAX_DEVICES];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= COLSUM_MAX_DEVICES) gdn_die("colsum: device %d >= %d", dev, COLSUM_MAX_DEVICES);
    if (nfloats > cap[dev]) {
        if (buf[dev]) {
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(buf[dev]));
        }
        const size_t want = GDN_MAX(nfloats, COLSUM_SCRATCH);
        CUDA_CHECK(cudaMalloc((void **)&buf[dev], want * sizeof(float)));
        cap[dev] = want;
    }
    return buf[dev];
}

namespace {

template <class F>
__global__ void __launch_bounds__(COLSUM_THREADS)
    colsum_partial_kernel(const F f, float *part, size_t rows, int cols, size_t rows_per_slice) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const size_t r0 = (size_t)blockIdx.y * rows_per_slice, r1 = GDN_MIN(rows, r0 + rows_per_slice);
    float acc = 0.f;
#pragma unroll 4
    for (size_t r = r0; r < r1; r++) acc += f.term(r, c);
    part[(size_t)blockIdx.y * cols + c] = acc;
}

template <class F> __global__ void __launch_bounds__(256) colsum_final_kernel(const F f, const float *part, int cols, int S) {
    const int c = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x & 31;
    if (c >= cols) return;  // whole warp
    float acc = 0.f;
    for (int s = lane; s < S; s += 32) acc += part[(size_t)s * cols + c];
    acc = warp_sum(acc);
    if (lane == 0) *f.dst(c) += acc;
}

template <class F> void colsum_launch(const F &f, size_t rows, int cols, cudaStream_t s) {
    if (rows == 0 || cols <= 0) return;
    size_t S = GDN_CDIV(rows, COLSUM_MIN_ROWS);
    S = GDN_MIN(S, GDN_MAX((size_t)1, COLSUM_SCRATCH / (size_t)cols));
    S = GDN_MIN(S, (size_t)COLSUM_MAX_SLICES);
    const size_t rps = GDN_CDIV(rows, S);
    float *part = colsum_scratch(S * (size_t)cols);
    const int threads = GDN_MIN(COLSUM_THREADS, (int)GDN_CDIV(cols, 32) * 32);
    const dim3 grid((unsigned)GDN_CDIV(cols, threads), (unsigned)S);
    colsum_partial_kernel<F><<<grid, threads, 0, s>>>(f, part, rows, cols, rps);
    CUDA_CHECK_LAUNCH();
    colsum_final_kernel<F><<<(unsigned)GDN_CDIV((size_t)cols * 32, (size_t)256), 256, 0, s>>>(f, part, cols, (int)S);
    CUDA_CHECK_LAUNCH();
}

// colsum_final_kernel's destination when the partials are laid out as dw itself: dw[c]
struct dw_dst {
    float *dw;
    __device__ __forceinline__ float *dst(int c) const { return dw + c; }
};

// The (gated) RMSNorm backward's per-element arithmetic, every rounding explicit (the _rn
// intrinsics are never contracted into FMAs): the kernel instances with and without the
// recompute output (Y) must agree bit for bit (train.recompute = light == off), and with plain
// operators the compiler fused differently per instance once unrelated code around them changed
// (test_cuda_ops "others as without it", session 9). q = z sigmoid(z), or 1 without the gate.
//   ux term  ((g w) q) x, added to ux by one FMA
//   dx       ((r g) w) q - c x
//   dw term  ((g x) r) q
//   dz       ((((g x) r) w) s) (1 + z (1 - s))
__device__ __forceinline__ float norm_ux_add(float ux, float g, float w, float q, float x) {
    return __fmaf_rn(__fmul_rn(__fmul_rn(g, w), q), x, ux);
}
// norm_dx in two steps (the s13 kernels take the product before the row's c is known):
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

// dw[i] += sum_n dy[n,i] x[n,i] rstd[n]
template <typename T> struct rmsnorm_dw_term {
    const T *dy, *x;
    const float *rstd;
    float *dw;
    int d;
    __device__ __forceinline__ float term(size_t r, int c) const {
        const size_t i = r * d + c;
        return norm_dw_term(to_f(dy[i]), to_f(x[i]), rstd[r], 1.f);
    }
    __device__ __forceinline__ float *dst(int c) const { return dw + c; }
};
// dw[i] += sum_rows dy x rstd silu(z)   (z NULL: silu(z) := 1; z's row r at (r / zh) zld + (r % zh) D)
template <typename T> struct gated_dw_term {
    const T *dy, *x, *z;
    const float *rstd;
    float *dw;
    int D, zh;
    size_t zld;
    __device__ __forceinline__ float term(size_t r, int c) const {
        const size_t i = r * D + c;
        if (!z) return norm_dw_term(to_f(dy[i]), to_f(x[i]), rstd[r], 1.f);
        const float zi = to_f(z[(r / zh) * zld + (r % zh) * D + c]);
        return norm_dw_term(to_f(dy[i]), to_f(x[i]), rstd[r], __fmul_rn(zi, sigmoid_fast(zi)));
    }
    __device__ __forceinline__ float *dst(int c) const { return dw + c; }
};
// column col = j*C + c (coalesced over c): dw[c,j] += sum_{b, t >= K-1-j} dy[b,t,c] x[b,t-K+1+j,c]
template <typename T> struct conv_dw_term {
    const T *dy, *x;
    float *dw;
    int T_, C, K;
    __device__ __forceinline__ float term(size_t r, int col) const {
        const int j = col / C, c = col % C, t = (int)(r % T_);
        if (t < K - 1 - j) return 0.f;
        return to_f(dy[r * C + c]) * to_f(x[(r - (K - 1) + j) * C + c]);
    }
    __device__ __forceinline__ float *dst(int col) const { return dw + (size_t)(col % C) * K + col / C; }
};
// columns h < H: dA_log[h] += sum_n dg g;  columns H + h: ddt_bias[h] += sum_n da, with
// g = -exp(A_log) softplus(u), da = -exp(A_log) softplus'(u) dg, u = a + dt_bias (as the forward);
// a's row n at n ld, dg packed (N,H)
template <typename T> struct gates_dparam_term {
    const T *a, *A_log, *dt_bias;
    const float *dg;
    float *dA_log, *ddt_bias;
    int H;
    size_t ld;
    __device__ __forceinline__ float term(size_t r, int col) const {
        const int h = col % H;
        const size_t i = r * H + h;
        if (!dg) return 0.f;
        const float u = to_f(a[r * ld + h]) + to_f(dt_bias[h]), up = dg[i], e = expf(to_f(A_log[h]));
        if (col < H) return up * (-e * (u > 20.f ? u : log1pf(expf(u))));
        return -e * (u > 20.f ? 1.f : sigmoid_fast(u)) * up;
    }
    __device__ __forceinline__ float *dst(int col) const { return col < H ? dA_log + col : ddt_bias + (col - H); }
};

// ---- embedding: one block per run of equal tokens; dwte[ids[u], :] += sum of its rows -----------
template <typename T>
__global__ void __launch_bounds__(256) embedding_bwd_kernel(float *dwte, const T *dout, const int32_t *order,
                                                            const int32_t *starts, const int32_t *ids, int d) {
    const int u = blockIdx.x, p0 = starts[u], p1 = starts[u + 1];
    float *dst = dwte + (size_t)ids[u] * d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.f;
        for (int p = p0; p < p1; p++) acc += to_f(dout[(size_t)order[p] * d + c]);
        dst[c] += acc;
    }
}

// ---- L2 norm from the output y = scale x rn: dx = rn (scale dy - y sum(y dy) / scale) -----------
// (= scale (rn dy - rn^3 x sum(x dy)), src/bwd/l2norm.c); one warp per row
// The row formula, shared by both kernels below (so they give the same bits): a lane's W products
// y dy added to its running sum in order; per element dx = rn (scale dy - c y), c = sum / scale.
template <int W> __device__ __forceinline__ float l2norm_dot_acc(float yg, const float (&a)[W], const float (&g)[W]) {
#pragma unroll
    for (int j = 0; j < W; j++) yg += a[j] * g[j];
    return yg;
}
template <int W>
__device__ __forceinline__ void l2norm_dx(float (&a)[W], const float (&g)[W], float rn, float c, float scale) {
#pragma unroll
    for (int j = 0; j < W; j++) a[j] = rn * (scale * g[j] - c * a[j]);
}

template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    l2norm_bwd_kernel(T *dx, const T *dy, const T *y, const float *rnorm, size_t rows, int D, float scale) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *yr = y + row * D, *gr = dy + row * D;
    float yg = 0.f;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W];
        load_pack<T, W>(yr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        yg = l2norm_dot_acc<W>(yg, a, g);
    }
    yg = warp_sum(yg);
    const float rn = rnorm[row], c = yg / scale;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W];
        load_pack<T, W>(yr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        l2norm_dx<W>(a, g, rn, c, scale);
        store_pack<T, W>(dx + row * D + k * W, a);
    }
}

// The same with a row's D / W = LPR packs on LPR lanes (a power of two <= 32): 32 / LPR rows per
// warp, each lane's pack kept in registers between the dot product and the output. Per row the
// same operations in the same order as l2norm_bwd_kernel (each lane's W products summed in
// order, then the xor butterfly over the row's lanes: the full-warp butterfly there only adds
// the idle lanes' zeros first), so the same results; at D = 128 bf16 (16 packs) no lane idles.
template <typename T, int W, int LPR>
__global__ void __launch_bounds__(ROW_THREADS)
    l2norm_bwd_packed_kernel(T *dx, const T *dy, const T *y, const float *rnorm, size_t rows, int D, float scale) {
    constexpr int RPW = 32 / LPR;
    const int lane = threadIdx.x & 31, k = lane % LPR;
    const size_t row = ((size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32) * RPW + lane / LPR;
    const bool ok = row < rows;
    float a[W], g[W], yg = 0.f;
    if (ok) {
        load_pack<T, W>(y + row * D + k * W, a);
        load_pack<T, W>(dy + row * D + k * W, g);
        yg = l2norm_dot_acc<W>(yg, a, g);
    }
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) yg += __shfl_xor_sync(FULL_MASK, yg, o);
    if (!ok) return;
    const float rn = rnorm[row], c = yg / scale;
    l2norm_dx<W>(a, g, rn, c, scale);
    store_pack<T, W>(dx + row * D + k * W, a);
}

// ---- RMSNorm and gated RMSNorm backward ----------------------------------------------------------
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

// One warp per row: the unaligned and too-wide cases, dw by colsum_launch afterwards.
template <typename T, int W, bool Y>
__global__ void __launch_bounds__(ROW_THREADS) rmsnorm_bwd_kernel(const norm_bwd_params<T> p) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31, d = p.d;
    if (row >= p.rows) return;
    const T *xr = p.x + row * d, *gr = p.dy + row * d, *w = p.w;
    T *dxr = p.dx + row * d;
    float ux = 0.f;
    for (int k = lane; k < d / W; k += 32) {
        float a[W], g[W], wv[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        load_pack<T, W>(w + k * W, wv);
#pragma unroll
        for (int j = 0; j < W; j++) ux = norm_ux_add(ux, g[j], wv[j], 1.f, a[j]);
    }
    ux = warp_sum(ux);
    const float r = p.rstd[row], c = r * r * r * ux / (float)d;
    for (int k = lane; k < d / W; k += 32) {
        float a[W], g[W], wv[W], o[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        load_pack<T, W>(w + k * W, wv);
        if (p.acc) load_pack<T, W>(dxr + k * W, o);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const float v = norm_dx(r, g[j], wv[j], 1.f, c, a[j]);
            o[j] = p.acc ? o[j] + v : v;
        }
        store_pack<T, W>(dxr + k * W, o);
        if (Y) {
            float yv[W];
#pragma unroll
            for (int j = 0; j < W; j++) yv[j] = rmsnorm_y(a[j], r, wv[j]);
            store_pack<T, W>(p.y + row * d + k * W, yv);
        }
    }
}

template <typename T, int W, bool Y>
__global__ void __launch_bounds__(ROW_THREADS) gated_rmsnorm_bwd_kernel(const norm_bwd_params<T> p) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31, D = p.d;
    if (row >= p.rows) return;
    const size_t o = row * D, oz = p.z ? p.zrow(row) : 0;
    const T *x = p.x, *dy = p.dy, *z = p.z, *w = p.w;
    float ux = 0.f;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W], wv[W], zv[W];
        load_pack<T, W>(x + o + k * W, a);
        load_pack<T, W>(dy + o + k * W, g);
        load_pack<T, W>(w + k * W, wv);
        if (z) {
            load_pack<T, W>(z + oz + k * W, zv);
#pragma unroll
            for (int j = 0; j < W; j++) ux = norm_ux_add(ux, g[j], wv[j], __fmul_rn(zv[j], sigmoid_fast(zv[j])), a[j]);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) ux = norm_ux_add(ux, g[j], wv[j], 1.f, a[j]);
        }
    }
    ux = warp_sum(ux);
    const float rs = p.rstd[row], c = rs * rs * rs * ux / (float)D;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W], wv[W], zv[W], q[W], yv[W];
        load_pack<T, W>(x + o + k * W, a);
        load_pack<T, W>(dy + o + k * W, g);
        load_pack<T, W>(w + k * W, wv);
        if (z) {
            load_pack<T, W>(z + oz + k * W, zv);
            float dzv[W];
#pragma unroll
            for (int j = 0; j < W; j++) {
                const float s = sigmoid_fast(zv[j]);
                q[j] = __fmul_rn(zv[j], s);
                dzv[j] = norm_dz(g[j], a[j], rs, wv[j], zv[j], s);
                if (Y) yv[j] = gated_rmsnorm_y(a[j], rs, wv[j], zv[j], s);
            }
            if (p.dz) store_pack<T, W>(p.dz + oz + k * W, dzv);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) {
                q[j] = 1.f;
                if (Y) yv[j] = rmsnorm_y(a[j], rs, wv[j]);
            }
        }
        if (Y) store_pack<T, W>(p.y + o + k * W, yv);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = norm_dx(rs, g[j], wv[j], q[j], c, a[j]);
        store_pack<T, W>(p.dx + o + k * W, a);
    }
}

// Fused kernels (16-byte packs, d = nk W with nk <= 32 NP): dx as the kernels above, dw partials
// in the same pass. Block b owns the rows [8 b rpw, 8 (b + 1) rpw) (clipped to rows); warp w of
// it the run [8 b rpw + w rpw, + rpw), row after row. Lane l owns the packs k = l + 32 i (i < NP,
// k < nk), columns [k W, k W + W), and adds its rows' dw terms there, in row order, to acc[w][c]
// (shared memory, 8 d floats). The second loop over a row reads it again, from L1 (it was read an
// instant before). Partials in registers, or the row kept in registers for the second loop, took
// 80-170 registers and ran 1.3x slower (H200, bf16, 32768 x 1024: 86-88 us against 66 us).
// At the end the block sums acc[0..8)[c] in warp order and writes part[b][c]; colsum_final_kernel
// then adds sum_b part[b][c] (fixed order) into dw[c]. The grid is a function of (rows, d) only:
// bitwise the same run after run, on any GPU. With Y, y is stored in the FIRST loop over a row,
// where x, w (z, sigmoid(z)) are in registers and r is the saved rstd: the kernels keep the
// registers of those without it (sm_90a: 64, no spill, at the model's bf16 shapes; in the second
// loop the gated one spilled 28 bytes under its 64-register bound).
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
template <typename T, int W, int NP, bool Y>
__global__ void __launch_bounds__(ROW_THREADS) rmsnorm_bwd_fused_kernel(const norm_bwd_params<T> p) {
    extern __shared__ float4 norm_smem[];  // acc: (ROW_WARPS, d)
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, d = p.d, nk = d / W;
    float *acc = reinterpret_cast<float *>(norm_smem) + (size_t)warp * d;
    const size_t r0 = ((size_t)blockIdx.x * ROW_WARPS + warp) * p.rpw, r1 = GDN_MIN(p.rows, r0 + p.rpw);
    norm_acc_zero<W, NP>(acc, lane, nk);
    for (size_t row = r0; row < r1; row++) {
        const T *xr = p.x + row * d, *gr = p.dy + row * d;
        T *dxr = p.dx + row * d;
        const float r = p.rstd[row];
        float ux = 0.f;
#pragma unroll
        for (int i = 0; i < NP; i++)
            if (lane + 32 * i < nk) {
                const int k = lane + 32 * i;
                float a[W], g[W], wv[W];
                load_pack<T, W>(xr + k * W, a);
                load_pack<T, W>(gr + k * W, g);
                load_pack<T, W>(p.w + k * W, wv);
#pragma unroll
                for (int j = 0; j < W; j++) ux = norm_ux_add(ux, g[j], wv[j], 1.f, a[j]);
                if (Y) {  // y again, here where x and w are at hand (r is known)
                    float yv[W];
#pragma unroll
                    for (int j = 0; j < W; j++) yv[j] = rmsnorm_y(a[j], r, wv[j]);
                    store_pack<T, W>(p.y + row * d + k * W, yv);
                }
            }
        ux = warp_sum(ux);
        const float c = r * r * r * ux / (float)d;
#pragma unroll
        for (int i = 0; i < NP; i++)
            if (lane + 32 * i < nk) {
                const int k = lane + 32 * i;
                float a[W], g[W], wv[W], o[W], t[W];
                load_pack<T, W>(xr + k * W, a);
                load_pack<T, W>(gr + k * W, g);
                load_pack<T, W>(p.w + k * W, wv);
                if (p.acc) load_pack<T, W>(dxr + k * W, o);
#pragma unroll
                for (int j = 0; j < W; j++) {
                    const float v = norm_dx(r, g[j], wv[j], 1.f, c, a[j]);
                    o[j] = p.acc ? o[j] + v : v;
                    t[j] = norm_dw_term(g[j], a[j], r, 1.f);
                }
                store_pack<T, W>(dxr + k * W, o);
                add_to_f4<W>(acc + k * W, t);
            }
    }
    norm_block_sum(reinterpret_cast<const float *>(norm_smem), p.part + (size_t)blockIdx.x * d, d);
}

// One pack per lane (D <= 32 W: the model's head widths): at least 4 blocks per SM, i.e. <= 64
// registers (the compiler takes 80 on its own); latency-bound rows want the warps (H200, bf16,
// 131072 x 256 with z: 120 us against 171 us). Wider rows: the compiler's choice (64 spill).
constexpr int norm_gated_min_blocks(int np) { return np == 1 ? 4 : 1; }
template <typename T, int W, int NP, bool Y>
__global__ void __launch_bounds__(ROW_THREADS, norm_gated_min_blocks(NP))
    gated_rmsnorm_bwd_fused_kernel(const norm_bwd_params<T> p) {
    extern __shared__ float4 norm_smem[];  // acc: (ROW_WARPS, D)
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, D = p.d, nk = D / W;
    float *acc = reinterpret_cast<float *>(norm_smem) + (size_t)warp * D;
    const size_t r0 = ((size_t)blockIdx.x * ROW_WARPS + warp) * p.rpw, r1 = GDN_MIN(p.rows, r0 + p.rpw);
    const T *z = p.z;
    norm_acc_zero<W, NP>(acc, lane, nk);
    for (size_t row = r0; row < r1; row++) {
        const size_t o = row * D, oz = z ? p.zrow(row) : 0;
        const float rs = p.rstd[row];
        float ux = 0.f, sg[NP][W];  // sg: sigmoid(z) of the lane's columns, for the second loop
#pragma unroll
        for (int i = 0; i < NP; i++)
            if (lane + 32 * i < nk) {
                const size_t e = o + (size_t)(lane + 32 * i) * W;
                float a[W], g[W], wv[W], zv[W];
                load_pack<T, W>(p.x + e, a);
                load_pack<T, W>(p.dy + e, g);
                load_pack<T, W>(p.w + (lane + 32 * i) * W, wv);
                float yv[W];  // Y: y again, here where x, w, z, sigmoid(z) are at hand (rs is known)
                if (z) {
                    load_pack<T, W>(z + oz + (size_t)(lane + 32 * i) * W, zv);
#pragma unroll
                    for (int j = 0; j < W; j++) {
                        sg[i][j] = sigmoid_fast(zv[j]);
                        ux = norm_ux_add(ux, g[j], wv[j], __fmul_rn(zv[j], sg[i][j]), a[j]);
                        if (Y) yv[j] = gated_rmsnorm_y(a[j], rs, wv[j], zv[j], sg[i][j]);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < W; j++) {
                        ux = norm_ux_add(ux, g[j], wv[j], 1.f, a[j]);
                        if (Y) yv[j] = rmsnorm_y(a[j], rs, wv[j]);
                    }
                }
                if (Y) store_pack<T, W>(p.y + e, yv);
            }
        ux = warp_sum(ux);
        const float c = rs * rs * rs * ux / (float)D;
#pragma unroll
        for (int i = 0; i < NP; i++)
            if (lane + 32 * i < nk) {
                const size_t e = o + (size_t)(lane + 32 * i) * W;
                float a[W], g[W], wv[W], zv[W], q[W], t[W];
                load_pack<T, W>(p.x + e, a);
                load_pack<T, W>(p.dy + e, g);
                load_pack<T, W>(p.w + (lane + 32 * i) * W, wv);
                if (z) {
                    const size_t ez = oz + (size_t)(lane + 32 * i) * W;
                    load_pack<T, W>(z + ez, zv);
                    float dzv[W];
#pragma unroll
                    for (int j = 0; j < W; j++) {
                        const float s = sg[i][j];
                        q[j] = __fmul_rn(zv[j], s);
                        dzv[j] = norm_dz(g[j], a[j], rs, wv[j], zv[j], s);
                    }
                    if (p.dz) store_pack<T, W>(p.dz + ez, dzv);
                } else {
#pragma unroll
                    for (int j = 0; j < W; j++) q[j] = 1.f;
                }
#pragma unroll
                for (int j = 0; j < W; j++) {
                    t[j] = norm_dw_term(g[j], a[j], rs, q[j]);  // q = 1 without z
                    a[j] = norm_dx(rs, g[j], wv[j], q[j], c, a[j]);
                }
                store_pack<T, W>(p.dx + e, a);
                add_to_f4<W>(acc + (lane + 32 * i) * W, t);
            }
    }
    norm_block_sum(reinterpret_cast<const float *>(norm_smem), p.part + (size_t)blockIdx.x * D, D);
}

// s13 (session 13): gated_rmsnorm_bwd_fused_kernel<T, W, 1, Y> with z (the model's rows: one
// 16-byte pack a lane), in fewer instructions a row (SASS, bf16 D 256 with y: ~497 -> ~360 a
// warp-row; bench/model_gpu.md, session 13).
// The same grid, rows per warp, lane -> pack map, shared-memory dw partials and per-element
// operations on the same values in the same order; what changes is where values live and when
// they are loaded:
// - everything that does not need the row's sum c (y, dz, the dw term added to acc, and dx's
//   ((r g) w) q: norm_dx_pre) is taken in the first pass, from registers; the second pass is one
//   FMA an element (norm_dx_fin) on x unpacked again; nothing is loaded twice, s is taken once;
// - packs live as 32-bit words (ld_u4 / unpack_u4: a pack_t<bf16, 8> kept across iterations is
//   split into 16-bit registers, 24 PRMTs a row); row and element offsets are 32-bit (launcher:
//   < 2^32); w's pack is loaded once a warp; z's row offset is stepped (no division a row);
// - s by sigmoid_fast_ex2ftz (sigmoid_fast's bits, 3 instructions less an element).
// The launcher takes this kernel only where no output overlaps an input or another output
// (gated_bwd_disjoint). ptxas (sm_90a, bf16, Y): 64 registers, no spill (old kernel: 36 / 44
// bytes). Session 13's variant that loaded the next row's x, dy, z and rstd before computing
// this row gained nothing (norm_bench 130.0 vs 130.1 us) and spilled 20 / 24 bytes: deleted in
// session 14 (git history).
template <typename T, int W, bool Y>
__global__ void __launch_bounds__(ROW_THREADS, 4) gated_rmsnorm_bwd_s13_kernel(const norm_bwd_params<T> p) {
    extern __shared__ float4 norm_smem[];  // acc: (ROW_WARPS, D)
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const unsigned D = (unsigned)p.d, lw = (unsigned)lane * W;
    const bool on = lw < D;  // lane < nk: the lane's pack k = lane
    float *acc = reinterpret_cast<float *>(norm_smem) + (size_t)warp * D + lw;
    // rows and element offsets in 32 bits (the launcher's condition: x, dy, z offsets < 2^32)
    const unsigned r0 = (unsigned)(((size_t)blockIdx.x * ROW_WARPS + warp) * p.rpw);
    const unsigned r1 = (unsigned)GDN_MIN(p.rows, (size_t)r0 + p.rpw);
    norm_acc_zero<W, 1>(acc - lw, lane, D / W);
    uint4 wr;  // packs as 32-bit words (ld_u4), unpacked where used
    if (on) wr = ld_u4(p.w + lw);
    // z's row r at (r / zh) zld + (r % zh) D: ozl (+ lw), zm = r % zh; from r to r + 1 the offset
    // grows by D, and by zld - zh D more where zm wraps to 0 (exact modulo 2^32)
    const unsigned zh = (unsigned)p.zh, zwrap = (unsigned)p.zld - zh * D;
    unsigned ozl = (unsigned)p.zrow(r0) + lw, zm = r0 % zh, el = r0 * D + lw;
    // the row's packs and rstd: row r0's here, the later rows' at the top of the loop (this form's
    // PTX is byte for byte that of session 13's variant without the early loads, mask 11, whose
    // outputs an H200 matched bitwise with the old kernel's)
    uint4 x0, g0, z0;
    float rs0 = 0.f;
    if (r0 < r1) {
        rs0 = p.rstd[r0];
        if (on) {
            x0 = ld_u4(p.x + el);
            g0 = ld_u4(p.dy + el);
            z0 = ld_u4(p.z + ozl);
        }
    }
    for (unsigned row = r0; row < r1; row++, el += D) {
        unsigned ozl1 = ozl + D, zm1 = zm + 1;
        if (zm1 == zh) {
            zm1 = 0;
            ozl1 += zwrap;
        }
        if (row > r0) {
            rs0 = p.rstd[row];
            if (on) {
                x0 = ld_u4(p.x + el);
                g0 = ld_u4(p.dy + el);
                z0 = ld_u4(p.z + ozl);
            }
        }
        const float rs = rs0;
        float u[W], ux = 0.f;  // u: dx before the c term, norm_dx_pre
        if (on) {
            float a[W], g[W], zv[W], wv[W], yv[W], dzv[W], t[W];
            unpack_u4<T, W>(wr, wv);
            unpack_u4<T, W>(x0, a);
            unpack_u4<T, W>(g0, g);
            unpack_u4<T, W>(z0, zv);
#pragma unroll
            for (int j = 0; j < W; j++) {
                const float s = sigmoid_fast_ex2ftz(zv[j]), q = __fmul_rn(zv[j], s);
                ux = norm_ux_add(ux, g[j], wv[j], q, a[j]);
                if (Y) yv[j] = gated_rmsnorm_y(a[j], rs, wv[j], zv[j], s);
                dzv[j] = norm_dz(g[j], a[j], rs, wv[j], zv[j], s);
                t[j] = norm_dw_term(g[j], a[j], rs, q);
                u[j] = norm_dx_pre(rs, g[j], wv[j], q);
            }
            add_to_f4<W>(acc, t);
            if (Y) store_pack<T, W>(p.y + el, yv);
            if (p.dz) store_pack<T, W>(p.dz + ozl, dzv);
        }
        ux = warp_sum(ux);
        const float c = rs * rs * rs * ux / (float)p.d;
        if (on) {
            float a[W];
            unpack_u4<T, W>(x0, a);  // again: 8 shifts, fewer registers than keeping a
#pragma unroll
            for (int j = 0; j < W; j++) u[j] = norm_dx_fin(u[j], c, a[j]);
            store_pack<T, W>(p.dx + el, u);
        }
        ozl = ozl1;
        zm = zm1;
    }
    norm_block_sum(reinterpret_cast<const float *>(norm_smem), p.part + (size_t)blockIdx.x * D, D);
}

// ---- conv1d dx[b,s,c] = sum_{j: s+K-1-j < T} w[c,j] dy[b, s+K-1-j, c]; thread per element ------
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
    conv1d_bwd_dx_kernel(T *dx, const T *dy, const T *w, size_t total, int T_, int C, int K) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int c = (int)(idx % C);
        const size_t r = idx / C;
        const int s = (int)(r % T_);
        float acc = 0.f;
        for (int j = 0; j < K; j++)
            if (s + K - 1 - j < T_) acc += to_f(w[(size_t)c * K + j]) * to_f(dy[(r + K - 1 - j) * C + c]);
        dx[idx] = from_f<T>(acc);
    }
}

// ---- GDN gates, elementwise part: da = -exp(A_log) softplus'(u) dg, db = dbeta c s (1 - s) -------
// a, b, da, db: token n's row at n ld; dg, dbeta packed (N,H)
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
    gdn_gates_bwd_kernel(T *da, T *db, const float *dg, const float *dbeta, const T *a, const T *b, const T *A_log,
                         const T *dt_bias, size_t total, int H, size_t ld, gdn_mode mode) {
    const float cc = mode.neg_eigval ? 2.f : 1.f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int h = (int)(i % H);
        const size_t j = (i / H) * ld + h;
        if (mode.gate && da) {
            const float u = to_f(a[j]) + to_f(dt_bias[h]), up = dg ? dg[i] : 0.f;
            const float e = expf(to_f(A_log[h]));
            da[j] = from_f<T>(-e * (u > 20.f ? 1.f : sigmoid_fast(u)) * up);
        }
        if (mode.delta && db) {
            const float s = sigmoid_fast(to_f(b[j]));
            db[j] = from_f<T>((dbeta ? dbeta[i] : 0.f) * cc * s * (1.f - s));
        }
    }
}

// ---- elementwise ops ------------------------------------------------------------------------
template <typename T> struct silu_bwd_op {
    T *dx;
    const T *dy, *x;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float g[W], a[W];
        load_pack<T, W>(dy + i, g);
        load_pack<T, W>(x + i, a);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const float s = sigmoid_fast(a[j]);
            g[j] = g[j] * s * (1.f + a[j] * (1.f - s));
        }
        store_pack<T, W>(dx + i, g);
    }
};
// H: also h = swiglu_h(gate, up), the forward's output. dh, h packed (rows, cols); gate, up,
// dgate, dup rows of stride gu.ld (row_stride)
template <typename T, bool H> struct swiglu_bwd_op {
    T *dgate, *dup;
    const T *dh, *gate, *up;
    T *h;  // H only
    row_stride gu;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float d[W], g[W], u[W], dg[W], du[W], hv[W];
        const size_t k = gu.at(i);
        load_pack<T, W>(dh + i, d);
        load_pack<T, W>(gate + k, g);
        load_pack<T, W>(up + k, u);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const float s = sigmoid_fast(g[j]);
            // every rounding explicit, as the norms' (norm_dx): the H and plain instances agree
            dg[j] = __fmul_rn(__fmul_rn(__fmul_rn(d[j], u[j]), s), __fmaf_rn(g[j], __fsub_rn(1.f, s), 1.f));
            du[j] = __fmul_rn(__fmul_rn(d[j], g[j]), s);
            if (H) hv[j] = swiglu_h(g[j], s, u[j]);
        }
        store_pack<T, W>(dgate + k, dg);
        store_pack<T, W>(dup + k, du);
        if (H) store_pack<T, W>(h + i, hv);
    }
};

// ---- launchers ------------------------------------------------------------------------------
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
    colsum_final_kernel<dw_dst>
        <<<(unsigned)GDN_CDIV((size_t)p.d * 32, (size_t)256), 256, 0, s>>>(dw_dst{dw}, p.part, p.d, (int)blocks);
    CUDA_CHECK_LAUNCH();
}

template <typename T, bool Y> void rmsnorm_bwd_launch_y(const norm_bwd_params<T> &p, float *dw, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    const bool vec = p.d % W == 0 && aligned16(p.dx) && aligned16(p.dy) && aligned16(p.x) && aligned16(p.w) &&
                     aligned16(p.y);
    switch (vec ? norm_packs_per_lane(p.d / W, NORM_NP_RMS) : 0) {
    case 1: norm_bwd_fused_launch<T>(rmsnorm_bwd_fused_kernel<T, W, 1, Y>, p, dw, s); return;
    case 2: norm_bwd_fused_launch<T>(rmsnorm_bwd_fused_kernel<T, W, 2, Y>, p, dw, s); return;
    case 4: norm_bwd_fused_launch<T>(rmsnorm_bwd_fused_kernel<T, W, 4, Y>, p, dw, s); return;
    case 8: norm_bwd_fused_launch<T>(rmsnorm_bwd_fused_kernel<T, W, 8, Y>, p, dw, s); return;
    default: break;  // two passes
    }
    if (vec)
        rmsnorm_bwd_kernel<T, W, Y><<<row_blocks(p.rows), ROW_THREADS, 0, s>>>(p);
    else
        rmsnorm_bwd_kernel<T, 1, Y><<<row_blocks(p.rows), ROW_THREADS, 0, s>>>(p);
    CUDA_CHECK_LAUNCH();
    colsum_launch(rmsnorm_dw_term<T>{p.dy, p.x, p.rstd, dw, p.d}, p.rows, p.d, s);
}
template <typename T> void rmsnorm_bwd_launch(const norm_bwd_params<T> &p, float *dw, cudaStream_t s) {
    if (p.y)
        rmsnorm_bwd_launch_y<T, true>(p, dw, s);
    else
        rmsnorm_bwd_launch_y<T, false>(p, dw, s);
}

template <typename T>
void l2norm_bwd_launch(T *dx, const T *dy, const T *y, const float *rnorm, size_t rows, int D, float scale,
                       cudaStream_t s) {
    constexpr int W = vec_width<T>();
    const bool vec = D % W == 0 && aligned16(dx) && aligned16(dy) && aligned16(y);
    const int packs = vec ? D / W : 0;  // lanes per row in the packed kernel
    auto packed = [&](auto kern, int lpr) {
        const size_t per_block = (size_t)ROW_WARPS * (32 / lpr);
        kern<<<(unsigned)GDN_CDIV(rows, per_block), ROW_THREADS, 0, s>>>(dx, dy, y, rnorm, rows, D, scale);
    };
    if (packs == 32) packed(l2norm_bwd_packed_kernel<T, W, 32>, 32);
    else if (packs == 16) packed(l2norm_bwd_packed_kernel<T, W, 16>, 16);
    else if (packs == 8) packed(l2norm_bwd_packed_kernel<T, W, 8>, 8);
    else if (packs == 4) packed(l2norm_bwd_packed_kernel<T, W, 4>, 4);
    else if (vec)
        l2norm_bwd_kernel<T, W><<<row_blocks(rows), ROW_THREADS, 0, s>>>(dx, dy, y, rnorm, rows, D, scale);
    else
        l2norm_bwd_kernel<T, 1><<<row_blocks(rows), ROW_THREADS, 0, s>>>(dx, dy, y, rnorm, rows, D, scale);
    CUDA_CHECK_LAUNCH();
}

// The s13 gated backward runs only where no output (dx, dz, y) shares a byte with an input (x,
// dy, z, w, rstd) or with another output: it reads its inputs once (w once a warp), where the
// old kernel reads x, dy, w, z again after storing y, so over shared bytes the two could differ.
// The model's buffers are distinct; in place, the old kernel runs.
template <typename T> bool gated_bwd_disjoint(const norm_bwd_params<T> &p) {
    const size_t n = p.rows * p.d * sizeof(T), nz = gated_z_extent(p.rows, p.d, p.zh, p.zld) * sizeof(T);
    const byte_range out[3] = {bytes_of(p.dx, n), bytes_of(p.dz, nz), bytes_of(p.y, n)};
    const byte_range in[5] = {bytes_of(p.x, n), bytes_of(p.dy, n), bytes_of(p.z, nz), bytes_of(p.w, p.d * sizeof(T)),
                              bytes_of(p.rstd, p.rows * sizeof(float))};
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 5; j++)
            if (ranges_meet(out[i], in[j])) return false;
        for (int j = i + 1; j < 3; j++)
            if (ranges_meet(out[i], out[j])) return false;
    }
    return true;
}

// ... and where its 32-bit element offsets hold: x, dy (rows D) and z, dz below 2^32 elements
template <typename T> bool gated_bwd_fits32(const norm_bwd_params<T> &p) {
    const size_t lim = (size_t)1 << 32;
    return p.rows * p.d < lim && gated_z_extent(p.rows, p.d, p.zh, p.zld) < lim && p.zld < lim;
}

template <typename T, bool Y>
void gated_rmsnorm_bwd_launch_y(const norm_bwd_params<T> &p, float *dw, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    const bool vec = p.d % W == 0 && (!p.z || p.zld % W == 0) && aligned16(p.dx) && aligned16(p.dz) && aligned16(p.dy) &&
                     aligned16(p.x) && aligned16(p.z) && aligned16(p.w) && aligned16(p.y);
    switch (vec ? norm_packs_per_lane(p.d / W, NORM_NP_GATED) : 0) {
    case 1:
        if (p.z && gated_bwd_disjoint(p) && gated_bwd_fits32(p)) {
            norm_bwd_fused_launch<T>(gated_rmsnorm_bwd_s13_kernel<T, W, Y>, p, dw, s);
            norm_s13_count();
            return;
        }
        norm_bwd_fused_launch<T>(gated_rmsnorm_bwd_fused_kernel<T, W, 1, Y>, p, dw, s);
        return;
    case 2: norm_bwd_fused_launch<T>(gated_rmsnorm_bwd_fused_kernel<T, W, 2, Y>, p, dw, s); return;
    case 4: norm_bwd_fused_launch<T>(gated_rmsnorm_bwd_fused_kernel<T, W, 4, Y>, p, dw, s); return;
    default: break;  // two passes
    }
    if (vec)
        gated_rmsnorm_bwd_kernel<T, W, Y><<<row_blocks(p.rows), ROW_THREADS, 0, s>>>(p);
    else
        gated_rmsnorm_bwd_kernel<T, 1, Y><<<row_blocks(p.rows), ROW_THREADS, 0, s>>>(p);
    CUDA_CHECK_LAUNCH();
    colsum_launch(gated_dw_term<T>{p.dy, p.x, p.z, p.rstd, dw, p.d, p.zh, p.zld}, p.rows, p.d, s);
}
template <typename T> void gated_rmsnorm_bwd_launch(const norm_bwd_params<T> &p, float *dw, cudaStream_t s) {
    if (p.y)
        gated_rmsnorm_bwd_launch_y<T, true>(p, dw, s);
    else
        gated_rmsnorm_bwd_launch_y<T, false>(p, dw, s);
}

template <typename T>
void swiglu_bwd_launch(T *dgate, T *dup, T *h, const T *dh, const T *gate, const T *up, size_t rows, int cols,
                       size_t ld, cudaStream_t s) {
    const row_stride gu = row_stride_of(rows, cols, ld);
    const size_t n = rows * (size_t)cols;
    const bool vec = row_stride_packs(gu, vec_width<T>()) && aligned16(dgate) && aligned16(dup) && aligned16(dh) &&
                     aligned16(gate) && aligned16(up);
    if (h)
        ew_launch<T>(swiglu_bwd_op<T, true>{dgate, dup, dh, gate, up, h, gu}, n, vec && aligned16(h), s);
    else
        ew_launch<T>(swiglu_bwd_op<T, false>{dgate, dup, dh, gate, up, nullptr, gu}, n, vec, s);
}

// ---- conv1d backward, tiled (the model's path; conditions as the forward's tiled kernel) --------
// Thread (b, tile of tt tokens, pack of W channels): dx of its tokens (16-byte loads of dy, taps
// in registers, j = 0..K-1 as the CPU) and its tile's share of dw, kept in registers and written
// to part[b * tiles + tile][c * K + j]; colsum_final_kernel then adds the B * tiles partials of
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
                       cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (C % W == 0 && K <= CONV_KMAX && aligned16(dx) && aligned16(dy) && aligned16(x)) {
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
        colsum_final_kernel<dw_dst><<<(unsigned)GDN_CDIV((size_t)C * K * 32, (size_t)256), 256, 0, s>>>(
            dw_dst{dw}, part, C * K, (int)S);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const size_t total = (size_t)B * T_ * C;
    conv1d_bwd_dx_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(dx, dy, w, total, T_, C, K);
    CUDA_CHECK_LAUNCH();
    colsum_launch(conv_dw_term<T>{dy, x, dw, T_, C, K}, (size_t)B * T_, C * K, s);
}

template <typename T>
void gdn_gates_bwd_launch(T *da, T *db, float *dA_log, float *ddt_bias, const float *dg, const float *dbeta,
                          const T *a, const T *b, const T *A_log, const T *dt_bias, int N, int H, size_t ld,
                          gdn_mode mode, cudaStream_t s) {
    const size_t total = (size_t)N * H;
    if ((mode.gate && da) || (mode.delta && db)) {
        gdn_gates_bwd_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(da, db, dg, dbeta, a, b, A_log, dt_bias, total,
                                                                       H, ld, mode);
        CUDA_CHECK_LAUNCH();
    }
    if (mode.gate)
        colsum_launch(gates_dparam_term<T>{a, A_log, dt_bias, dg, dA_log, ddt_bias, H, ld}, (size_t)N, 2 * H, s);
}

template <typename T>
void embedding_bwd_launch(float *dwte, const T *dout, const int32_t *order, const int32_t *starts,
                          const int32_t *ids, int n_unique, int d, cudaStream_t s) {
    embedding_bwd_kernel<T><<<n_unique, 256, 0, s>>>(dwte, dout, order, starts, ids, d);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- public entry points (cuda/ops.h) -------------------------------------------------------
extern "C" {

void cuda_embedding_bwd(cuda_dtype dt, float *dwte, const void *dout, const int32_t *order, const int32_t *starts,
                        const int32_t *ids, int n_unique, int d, cudaStream_t s) {
    if (n_unique <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, embedding_bwd_launch<T>(dwte, (const T *)dout, order, starts, ids, n_unique, d, s));
}

void cuda_rmsnorm_bwd(cuda_dtype dt, void *dx, float *dw, void *y, const void *dy, const void *x, const void *w,
                      const float *rstd, int N, int d, bool acc, cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T,
                   rmsnorm_bwd_launch<T>({(T *)dx, nullptr, (T *)y, (const T *)dy, (const T *)x, nullptr, (const T *)w,
                                          rstd, nullptr, (size_t)N, d, 0, acc},
                                         dw, s));
}

void cuda_conv1d_bwd(cuda_dtype dt, void *dx, float *dw, const void *dy, const void *x, const void *w, int B, int T,
                     int C, int K, cudaStream_t s) {
    if ((size_t)B * T * C * K == 0) return;
    CUDA_DT_SWITCH(dt, E, conv1d_bwd_launch<E>((E *)dx, dw, (const E *)dy, (const E *)x, (const E *)w, B, T, C, K, s));
}

void cuda_silu_bwd(cuda_dtype dt, void *dx, const void *dy, const void *x, size_t n, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, ew_launch<T>(silu_bwd_op<T>{(T *)dx, (const T *)dy, (const T *)x}, n,
                                       aligned16(dx) && aligned16(dy) && aligned16(x), s));
}

void cuda_l2norm_bwd(cuda_dtype dt, void *dx, const void *dy, const void *y, const float *rnorm, size_t rows, int D,
                     double scale, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T, l2norm_bwd_launch<T>((T *)dx, (const T *)dy, (const T *)y, rnorm, rows, D, (float)scale, s));
}

void cuda_gdn_gates_bwd(cuda_dtype dt, void *da, void *db, float *dA_log, float *ddt_bias, const float *dg,
                        const float *dbeta, const void *a, const void *b, const void *A_log, const void *dt_bias,
                        int N, int H, size_t ld, gdn_mode mode, cudaStream_t s) {
    if (N <= 0 || H <= 0) return;
    CUDA_DT_SWITCH(dt, T, gdn_gates_bwd_launch<T>((T *)da, (T *)db, dA_log, ddt_bias, dg, dbeta, (const T *)a,
                                                  (const T *)b, (const T *)A_log, (const T *)dt_bias, N, H, ld, mode,
                                                  s));
}

void cuda_gated_rmsnorm_bwd(cuda_dtype dt, void *dx, void *dz, float *dw, void *y, const void *dy, const void *x,
                            const void *z, const void *w, const float *rstd, size_t rows, int D, int zh,
                            size_t zld, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T,
                   gated_rmsnorm_bwd_launch<T>({(T *)dx, (T *)dz, (T *)y, (const T *)dy, (const T *)x, (const T *)z,
                                                (const T *)w, rstd, nullptr, rows, D, 0, false, zh, zld},
                                               dw, s));
}

void cuda_swiglu_bwd(cuda_dtype dt, void *dgate, void *dup, void *h, const void *dh, const void *gate,
                     const void *up, size_t rows, int cols, size_t ld, cudaStream_t s) {
    if (rows == 0 || cols <= 0) return;
    if (ld < (size_t)cols) gdn_die("cuda_swiglu_bwd: row stride %zu < %d columns", ld, cols);
    CUDA_DT_SWITCH(dt, T, swiglu_bwd_launch<T>((T *)dgate, (T *)dup, (T *)h, (const T *)dh, (const T *)gate,
                                               (const T *)up, rows, cols, ld, s));
}

void cuda_dropout_bwd(cuda_dtype dt, void *dx, const void *dy, size_t n, double p, uint64_t seed, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, dropout_launch<T>((T *)dx, (const T *)dy, n, p, seed, s));
}

void cuda_rope_bwd(cuda_dtype dt, void *dx, const void *dy, int B, int T, int H, int D, double base, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, E, rope_launch<E>((E *)dx, (const E *)dy, B, T, H, D, base, -1.f, s));
}

}  // extern "C"
