// elementwise.cu — CUDA backwards of the small ops of cuda_ops.h (twins of src/bwd/*.c): embedding,
// RMSNorm, conv1d, SiLU, L2 norm, GDN gates, gated RMSNorm, SwiGLU, dropout, RoPE.
// Gradient rule (src/bwd/bwd_cpu.h): activation gradients (T) are overwritten, parameter
// gradients (fp32) ACCUMULATE (+=).
// Parameter gradients are sums over N rows, taken without float atomics in two passes
// (colsum_*): the rows are cut into S slices (S a function of rows and columns only, never of
// the device), thread c of slice s sums its rows in order into part[s][c]; then one warp per
// column sums the S partials in a fixed order and adds the result to the gradient. part is a
// per-device scratch of at most max(2^18, cols) floats, allocated on first use and kept.
// Embedding: each run of equal tokens (built on the host, see cuda_ops.h) is one block that
// sums its rows in sorted order and adds once, so repeated tokens need no atomics either.
#include "../fwd/cuda_ops_device.cuh"

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

// Scratch of the device in use: grown (never shrunk) when a call needs more, which happens on
// the first calls only. Stream order makes it safe for launchers issued on one stream per
// device (the backend's compute stream); growth synchronises the device before freeing.
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

// dw[i] += sum_n dy[n,i] x[n,i] rstd[n]
template <typename T> struct rmsnorm_dw_term {
    const T *dy, *x;
    const float *rstd;
    float *dw;
    int d;
    __device__ __forceinline__ float term(size_t r, int c) const {
        const size_t i = r * d + c;
        return to_f(dy[i]) * to_f(x[i]) * rstd[r];
    }
    __device__ __forceinline__ float *dst(int c) const { return dw + c; }
};
// dw[i] += sum_rows dy x rstd silu(z)   (z NULL: silu(z) := 1)
template <typename T> struct gated_dw_term {
    const T *dy, *x, *z;
    const float *rstd;
    float *dw;
    int D;
    __device__ __forceinline__ float term(size_t r, int c) const {
        const size_t i = r * D + c;
        const float v = to_f(dy[i]) * to_f(x[i]) * rstd[r];
        if (!z) return v;
        const float zi = to_f(z[i]);
        return v * (zi * sigmoid_f(zi));
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
// g = -exp(A_log) softplus(u), da = -exp(A_log) softplus'(u) dg, u = a + dt_bias (as the forward)
template <typename T> struct gates_dparam_term {
    const T *a, *A_log, *dt_bias;
    const float *dg;
    float *dA_log, *ddt_bias;
    int H;
    __device__ __forceinline__ float term(size_t r, int col) const {
        const int h = col % H;
        const size_t i = r * H + h;
        if (!dg) return 0.f;
        const float u = to_f(a[i]) + to_f(dt_bias[h]), up = dg[i], e = expf(to_f(A_log[h]));
        if (col < H) return up * (-e * (u > 20.f ? u : log1pf(expf(u))));
        return -e * (u > 20.f ? 1.f : sigmoid_f(u)) * up;
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

// ---- RMSNorm dx: u = w dy, dx = r u - (r^3/d) x sum(u x); one warp per row ---------------------
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_bwd_kernel(T *dx, const T *dy, const T *x, const T *w, const float *rstd, size_t N, int d) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *xr = x + row * d, *gr = dy + row * d;
    float ux = 0.f;
    for (int k = lane; k < d / W; k += 32) {
        float a[W], g[W], wv[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        load_pack<T, W>(w + k * W, wv);
#pragma unroll
        for (int j = 0; j < W; j++) ux += wv[j] * g[j] * a[j];
    }
    ux = warp_sum(ux);
    const float r = rstd[row], c = r * r * r * ux / (float)d;
    for (int k = lane; k < d / W; k += 32) {
        float a[W], g[W], wv[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
        load_pack<T, W>(w + k * W, wv);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = r * wv[j] * g[j] - c * a[j];
        store_pack<T, W>(dx + row * d + k * W, a);
    }
}

// ---- L2 norm dx = scale (rn dy - rn^3 x sum(x dy)); one warp per row ---------------------------
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    l2norm_bwd_kernel(T *dx, const T *dy, const T *x, const float *rnorm, size_t rows, int D, float scale) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *xr = x + row * D, *gr = dy + row * D;
    float xg = 0.f;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
#pragma unroll
        for (int j = 0; j < W; j++) xg += a[j] * g[j];
    }
    xg = warp_sum(xg);
    const float rn = rnorm[row], c = rn * rn * rn * xg;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(gr + k * W, g);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = scale * (rn * g[j] - c * a[j]);
        store_pack<T, W>(dx + row * D + k * W, a);
    }
}

// ---- gated RMSNorm: q = silu(z), u = dy w q; dx = r u - (r^3/D) x sum(u x);
//      dz = dy x r w silu'(z), silu' = s (1 + z (1 - s)); one warp per row ----------------------
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    gated_rmsnorm_bwd_kernel(T *dx, T *dz, const T *dy, const T *x, const T *z, const T *w, const float *rstd,
                             size_t rows, int D) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const size_t o = row * D;
    float ux = 0.f;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W], wv[W], zv[W];
        load_pack<T, W>(x + o + k * W, a);
        load_pack<T, W>(dy + o + k * W, g);
        load_pack<T, W>(w + k * W, wv);
        if (z) {
            load_pack<T, W>(z + o + k * W, zv);
#pragma unroll
            for (int j = 0; j < W; j++) ux += g[j] * wv[j] * (zv[j] * sigmoid_f(zv[j])) * a[j];
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) ux += g[j] * wv[j] * a[j];
        }
    }
    ux = warp_sum(ux);
    const float rs = rstd[row], c = rs * rs * rs * ux / (float)D;
    for (int k = lane; k < D / W; k += 32) {
        float a[W], g[W], wv[W], zv[W], q[W];
        load_pack<T, W>(x + o + k * W, a);
        load_pack<T, W>(dy + o + k * W, g);
        load_pack<T, W>(w + k * W, wv);
        if (z) {
            load_pack<T, W>(z + o + k * W, zv);
            float dzv[W];
#pragma unroll
            for (int j = 0; j < W; j++) {
                const float s = sigmoid_f(zv[j]);
                q[j] = zv[j] * s;
                dzv[j] = g[j] * a[j] * rs * wv[j] * s * (1.f + zv[j] * (1.f - s));
            }
            if (dz) store_pack<T, W>(dz + o + k * W, dzv);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) q[j] = 1.f;
        }
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = rs * g[j] * wv[j] * q[j] - c * a[j];
        store_pack<T, W>(dx + o + k * W, a);
    }
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
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
    gdn_gates_bwd_kernel(T *da, T *db, const float *dg, const float *dbeta, const T *a, const T *b, const T *A_log,
                         const T *dt_bias, size_t total, int H, gdn_mode mode) {
    const float cc = mode.neg_eigval ? 2.f : 1.f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int h = (int)(i % H);
        if (mode.gate && da) {
            const float u = to_f(a[i]) + to_f(dt_bias[h]), up = dg ? dg[i] : 0.f;
            const float e = expf(to_f(A_log[h]));
            da[i] = from_f<T>(-e * (u > 20.f ? 1.f : sigmoid_f(u)) * up);
        }
        if (mode.delta && db) {
            const float s = sigmoid_f(to_f(b[i]));
            db[i] = from_f<T>((dbeta ? dbeta[i] : 0.f) * cc * s * (1.f - s));
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
            const float s = sigmoid_f(a[j]);
            g[j] = g[j] * s * (1.f + a[j] * (1.f - s));
        }
        store_pack<T, W>(dx + i, g);
    }
};
template <typename T> struct swiglu_bwd_op {
    T *dgate, *dup;
    const T *dh, *gate, *up;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float d[W], g[W], u[W], dg[W], du[W];
        load_pack<T, W>(dh + i, d);
        load_pack<T, W>(gate + i, g);
        load_pack<T, W>(up + i, u);
#pragma unroll
        for (int j = 0; j < W; j++) {
            const float s = sigmoid_f(g[j]);
            dg[j] = d[j] * u[j] * s * (1.f + g[j] * (1.f - s));
            du[j] = d[j] * g[j] * s;
        }
        store_pack<T, W>(dgate + i, dg);
        store_pack<T, W>(dup + i, du);
    }
};

// ---- launchers ------------------------------------------------------------------------------
template <typename T>
void rmsnorm_bwd_launch(T *dx, float *dw, const T *dy, const T *x, const T *w, const float *rstd, int N, int d,
                        cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (d % W == 0 && aligned16(dx) && aligned16(dy) && aligned16(x) && aligned16(w))
        rmsnorm_bwd_kernel<T, W><<<row_blocks(N), ROW_THREADS, 0, s>>>(dx, dy, x, w, rstd, N, d);
    else
        rmsnorm_bwd_kernel<T, 1><<<row_blocks(N), ROW_THREADS, 0, s>>>(dx, dy, x, w, rstd, N, d);
    CUDA_CHECK_LAUNCH();
    colsum_launch(rmsnorm_dw_term<T>{dy, x, rstd, dw, d}, (size_t)N, d, s);
}

template <typename T>
void l2norm_bwd_launch(T *dx, const T *dy, const T *x, const float *rnorm, size_t rows, int D, float scale,
                       cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (D % W == 0 && aligned16(dx) && aligned16(dy) && aligned16(x))
        l2norm_bwd_kernel<T, W><<<row_blocks(rows), ROW_THREADS, 0, s>>>(dx, dy, x, rnorm, rows, D, scale);
    else
        l2norm_bwd_kernel<T, 1><<<row_blocks(rows), ROW_THREADS, 0, s>>>(dx, dy, x, rnorm, rows, D, scale);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void gated_rmsnorm_bwd_launch(T *dx, T *dz, float *dw, const T *dy, const T *x, const T *z, const T *w,
                              const float *rstd, size_t rows, int D, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (D % W == 0 && aligned16(dx) && aligned16(dz) && aligned16(dy) && aligned16(x) && aligned16(z) &&
        aligned16(w))
        gated_rmsnorm_bwd_kernel<T, W><<<row_blocks(rows), ROW_THREADS, 0, s>>>(dx, dz, dy, x, z, w, rstd, rows, D);
    else
        gated_rmsnorm_bwd_kernel<T, 1><<<row_blocks(rows), ROW_THREADS, 0, s>>>(dx, dz, dy, x, z, w, rstd, rows, D);
    CUDA_CHECK_LAUNCH();
    colsum_launch(gated_dw_term<T>{dy, x, z, rstd, dw, D}, rows, D, s);
}

// ---- conv1d backward, tiled (the model's path; conditions as the forward's tiled kernel) --------
// Thread (b, tile of tt tokens, pack of W channels): dx of its tokens (16-byte loads of dy, taps
// in registers, j = 0..K-1 as the CPU) and its tile's share of dw, kept in registers and written
// to part[b * tiles + tile][c * K + j]; colsum_final_kernel then adds the B * tiles partials of
// each dw element in a fixed order (no atomics: bitwise the same run after run).
constexpr int CONV_BWD_TT = 64, CONV_BWD_THREADS = 128;
constexpr size_t CONV_BWD_SCRATCH = (size_t)1 << 21;  // floats of partials before tiles grow
struct conv_dw_dst {
    float *dw;
    __device__ __forceinline__ float *dst(int col) const { return dw + col; }
};
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
        colsum_final_kernel<conv_dw_dst><<<(unsigned)GDN_CDIV((size_t)C * K * 32, (size_t)256), 256, 0, s>>>(
            conv_dw_dst{dw}, part, C * K, (int)S);
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
                          const T *a, const T *b, const T *A_log, const T *dt_bias, int N, int H, gdn_mode mode,
                          cudaStream_t s) {
    const size_t total = (size_t)N * H;
    if ((mode.gate && da) || (mode.delta && db)) {
        gdn_gates_bwd_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(da, db, dg, dbeta, a, b, A_log, dt_bias, total,
                                                                       H, mode);
        CUDA_CHECK_LAUNCH();
    }
    if (mode.gate) colsum_launch(gates_dparam_term<T>{a, A_log, dt_bias, dg, dA_log, ddt_bias, H}, (size_t)N, 2 * H, s);
}

template <typename T>
void embedding_bwd_launch(float *dwte, const T *dout, const int32_t *order, const int32_t *starts,
                          const int32_t *ids, int n_unique, int d, cudaStream_t s) {
    embedding_bwd_kernel<T><<<n_unique, 256, 0, s>>>(dwte, dout, order, starts, ids, d);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- public entry points (cuda_ops.h) -------------------------------------------------------
extern "C" {

void cuda_embedding_bwd(cuda_dtype dt, float *dwte, const void *dout, const int32_t *order, const int32_t *starts,
                        const int32_t *ids, int n_unique, int d, cudaStream_t s) {
    if (n_unique <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, embedding_bwd_launch<T>(dwte, (const T *)dout, order, starts, ids, n_unique, d, s));
}

void cuda_rmsnorm_bwd(cuda_dtype dt, void *dx, float *dw, const void *dy, const void *x, const void *w,
                      const float *rstd, int N, int d, cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, rmsnorm_bwd_launch<T>((T *)dx, dw, (const T *)dy, (const T *)x, (const T *)w, rstd, N, d, s));
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

void cuda_l2norm_bwd(cuda_dtype dt, void *dx, const void *dy, const void *x, const float *rnorm, size_t rows, int D,
                     double scale, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T, l2norm_bwd_launch<T>((T *)dx, (const T *)dy, (const T *)x, rnorm, rows, D, (float)scale, s));
}

void cuda_gdn_gates_bwd(cuda_dtype dt, void *da, void *db, float *dA_log, float *ddt_bias, const float *dg,
                        const float *dbeta, const void *a, const void *b, const void *A_log, const void *dt_bias,
                        int N, int H, gdn_mode mode, cudaStream_t s) {
    if (N <= 0 || H <= 0) return;
    CUDA_DT_SWITCH(dt, T, gdn_gates_bwd_launch<T>((T *)da, (T *)db, dA_log, ddt_bias, dg, dbeta, (const T *)a,
                                                  (const T *)b, (const T *)A_log, (const T *)dt_bias, N, H, mode, s));
}

void cuda_gated_rmsnorm_bwd(cuda_dtype dt, void *dx, void *dz, float *dw, const void *dy, const void *x,
                            const void *z, const void *w, const float *rstd, size_t rows, int D, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T, gated_rmsnorm_bwd_launch<T>((T *)dx, (T *)dz, dw, (const T *)dy, (const T *)x, (const T *)z,
                                                      (const T *)w, rstd, rows, D, s));
}

void cuda_swiglu_bwd(cuda_dtype dt, void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                     size_t n, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, ew_launch<T>(swiglu_bwd_op<T>{(T *)dgate, (T *)dup, (const T *)dh, (const T *)gate,
                                                        (const T *)up},
                                       n, aligned16(dgate) && aligned16(dup) && aligned16(dh) && aligned16(gate) &&
                                              aligned16(up),
                                       s));
}

void cuda_dropout_bwd(cuda_dtype dt, void *dx, const void *dy, size_t n, double p, uint64_t seed, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, dropout_launch<T>((T *)dx, (const T *)dy, n, p, seed, s));
}

void cuda_rope_bwd(cuda_dtype dt, void *dx, const void *dy, int B, int T, int H, int D, double base, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, E, rope_launch<E>((E *)dx, (const E *)dy, B, T, H, D, base, -1.f, s));
}

}  // extern "C"
