// elementwise.cu — CUDA forwards of the small ops of cuda/ops.h (twins of src/fwd/*.c): embedding,
// RMSNorm (alone, and fused with the residual add before it), causal depthwise conv1d, SiLU,
// per-row L2 norm, GDN gates, gated (per-head) RMSNorm, SwiGLU, RoPE, dropout, and the memory
// helpers add and convert. Activations in T = float or bf16, statistics (rstd, rnorm, g, beta)
// fp32, every sum in fp32.
// Row ops (RMSNorm, L2 norm, gated norm): one warp per row, 8 rows per 256-thread block; lane l
// sums elements (or 16-byte packs) l, l + 32, ... in order, then a xor butterfly: the order is
// fixed by (D, alignment), so results are bitwise reproducible. Elementwise ops go through
// ew_launch (16-byte packs when every pointer is aligned). The RoPE and dropout kernels, shared
// with their backwards, live in cuda/elementwise.cuh. Maths and shapes: src/fwd/fwd_cpu.h.
#include "../cuda/elementwise.cuh"

namespace {

constexpr int ROW_WARPS = 8, ROW_THREADS = ROW_WARPS * 32;

inline unsigned row_blocks(size_t rows) { return (unsigned)GDN_CDIV(rows, (size_t)ROW_WARPS); }

// ---- embedding: out[n, :] = wte[tok[n], :]; one block per token, 16-byte copies when aligned --
template <typename T, int W>
__global__ void __launch_bounds__(128) embedding_fwd_kernel(T *out, const int32_t *tok, const T *wte, int d) {
    const size_t n = blockIdx.x;
    const T *src = wte + (size_t)tok[n] * d;
    T *dst = out + n * d;
    for (int k = threadIdx.x; k < d / W; k += blockDim.x)
        *reinterpret_cast<pack_t<T, W> *>(dst + k * W) = *reinterpret_cast<const pack_t<T, W> *>(src + k * W);
}

// ss += the squares of one pack, in element order (row_sumsq's and add_rmsnorm's accumulation).
template <int W> __device__ __forceinline__ void sumsq_acc(float &ss, const float (&a)[W]) {
#pragma unroll
    for (int j = 0; j < W; j++) ss += a[j] * a[j];
}

// Sum of squares of one row of n values (n a multiple of W), by one warp: lane k takes packs
// k, k + 32, ...; the warp's sum on every lane.
template <typename T, int W>
__device__ __forceinline__ float row_sumsq(const T *xr, int n, int lane) {
    float ss = 0.f;
    for (int k = lane; k < n / W; k += 32) {
        float a[W];
        load_pack<T, W>(xr + k * W, a);
        sumsq_acc<W>(ss, a);
    }
    return warp_sum(ss);
}

// ---- RMSNorm: y = x rstd w, rstd = 1/sqrt(mean x^2 + eps) (saved for the backward) -------------
__device__ __forceinline__ float rms_rstd(float ss, int d, float eps) { return 1.f / sqrtf(ss / (float)d + eps); }

// The second pass of one row: y = x r w, lane k on packs k, k + 32, ...
template <typename T, int W>
__device__ __forceinline__ void rmsnorm_row_scale(T *yr, const T *xr, const T *w, int d, float r, int lane) {
    for (int k = lane; k < d / W; k += 32) {
        float a[W], wv[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(w + k * W, wv);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = rmsnorm_y(a[j], r, wv[j]);  // rmsnorm_bwd's y: the same
        store_pack<T, W>(yr + k * W, a);
    }
}

template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_fwd_kernel(T *y, float *rstd, const T *x, const T *w, size_t N, int d, float eps) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *xr = x + row * d;
    const float r = rms_rstd(row_sumsq<T, W>(xr, d, lane), d, eps);
    rmsnorm_row_scale<T, W>(y + row * d, xr, w, d, r, lane);
    if (lane == 0) rstd[row] = r;
}

// ---- residual add + RMSNorm: x_out = x_in + branch, then RMSNorm of x_out ---------------------
// Bitwise cuda_add followed by rmsnorm_fwd_kernel<T, W> on x_out: each x_out element is the T
// rounding of float(x_in) + float(branch), as add_op stores it; the squares are summed from
// those rounded values in row_sumsq's order; the second pass re-reads x_out, each pack by the
// lane that stored it (its own store, so no other lane's write is awaited). W is what
// rmsnorm_fwd_launch picks for (y, x_out, w); vec_in: x_in and branch are 16-byte aligned as
// well, else their W elements load one by one (same values, same order). x_out == x_in allowed.
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    add_rmsnorm_fwd_kernel(T *x_out, T *y, float *rstd, const T *x_in, const T *branch, const T *w, size_t N,
                           int d, float eps, bool vec_in) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *xr = x_in + row * d, *br = branch + row * d;
    T *outr = x_out + row * d;
    float ss = 0.f;
    for (int k = lane; k < d / W; k += 32) {
        float a[W], b[W];
        if (vec_in) {
            load_pack<T, W>(xr + k * W, a);
            load_pack<T, W>(br + k * W, b);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) {
                a[j] = to_f(xr[k * W + j]);
                b[j] = to_f(br[k * W + j]);
            }
        }
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = to_f(from_f<T>(a[j] + b[j]));  // the value stored
        store_pack<T, W>(outr + k * W, a);
        sumsq_acc<W>(ss, a);
    }
    const float r = rms_rstd(warp_sum(ss), d, eps);
    rmsnorm_row_scale<T, W>(y + row * d, outr, w, d, r, lane);
    if (lane == 0) rstd[row] = r;
}

// ---- per-row L2 norm: y = scale x rnorm, rnorm = 1/sqrt(sum x^2 + eps) (saved) ----------------
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS)
    l2norm_fwd_kernel(T *y, float *rnorm, const T *x, size_t rows, int D, float eps, float scale) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *xr = x + row * D;
    T *yr = y + row * D;
    const float ss = row_sumsq<T, W>(xr, D, lane);
    const float rn = 1.f / sqrtf(ss + eps);
    for (int k = lane; k < D / W; k += 32) {
        float a[W];
        load_pack<T, W>(xr + k * W, a);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = scale * a[j] * rn;
        store_pack<T, W>(yr + k * W, a);
    }
    if (lane == 0) rnorm[row] = rn;
}

// ---- gated RMSNorm per head row: y = x rstd w silu(z) (z NULL: no gate) ------------------------
// z's row r at (r / zh) zld + (r % zh) D (zh = 1, zld = D: packed; else zh heads of a token in a
// wider projection output of row stride zld)
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS) gated_rmsnorm_fwd_kernel(T *y, float *rstd, const T *x, const T *z,
                                                                       const T *w, size_t rows, int D, int zh,
                                                                       size_t zld, float eps) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T *xr = x + row * D;
    T *yr = y + row * D;
    const float ss = row_sumsq<T, W>(xr, D, lane);
    const float rs = 1.f / sqrtf(ss / (float)D + eps);
    for (int k = lane; k < D / W; k += 32) {
        float a[W], wv[W], zv[W];
        load_pack<T, W>(xr + k * W, a);
        load_pack<T, W>(w + k * W, wv);
        if (z) {
            load_pack<T, W>(z + (row / zh) * zld + (row % zh) * D + k * W, zv);
#pragma unroll
            for (int j = 0; j < W; j++) a[j] = gated_rmsnorm_y(a[j], rs, wv[j], zv[j], sigmoid_fast(zv[j]));
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) a[j] = rmsnorm_y(a[j], rs, wv[j]);
        }
        store_pack<T, W>(yr + k * W, a);
    }
    if (lane == 0) rstd[row] = rs;
}

// s13 (session 13): rows of at most 32 packs (the model's D = 256 bf16),
// gated_rmsnorm_fwd_kernel<T, W>'s grid, one pack a lane, its operations on the same values in
// the same order, in fewer instructions and one memory round trip a row instead of two: the
// lane's x, w and z packs are loaded together before the sum of squares (the old kernel loads
// z and w after the butterfly), x is kept for y; z's row index r / zh by a multiply and shift
// (zdiv; rows <= 2^31, the launcher's condition); s by sigmoid_fast_ex2ftz (sigmoid_fast's bits).
// gated_rmsnorm_fwd_kernel stays for the other calls: wider rows, packs off 16 bytes, y over z,
// more than 2^31 rows.
struct udiv31 {  // n / d for n < 2^31: (n m) >> sh, m = ceil(2^sh / d), sh = 31 + ceil(log2 d)
    uint64_t m;  // exact for every n < 2^31 (Granlund, Montgomery 1994, thm 4.2: m d - 2^sh < d)
    int sh;
    static udiv31 of(uint32_t d) {
        int l = 0;
        while (((uint64_t)1 << l) < d) l++;
        return {(((uint64_t)1 << (31 + l)) + d - 1) / d, 31 + l};
    }
    __device__ __forceinline__ uint32_t div(uint32_t n) const { return (uint32_t)((n * m) >> sh); }
};
template <typename T, int W>
__global__ void __launch_bounds__(ROW_THREADS, 6)
    gated_rmsnorm_fwd_s13_kernel(T *y, float *rstd, const T *x, const T *z, const T *w, size_t rows, int D, int zh,
                                 size_t zld, udiv31 zdiv, float eps) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const bool on = lane * W < D;  // the lane's pack k = lane (k < D / W)
    const size_t e = row * D + (size_t)lane * W;
    uint4 xr, wr, zr;  // packs as 32-bit words (ld_u4)
    if (on) {
        xr = ld_u4(x + e);
        wr = ld_u4(w + lane * W);
        if (z) {
            const uint32_t q = zdiv.div((uint32_t)row), m = (uint32_t)row - q * (uint32_t)zh;
            zr = ld_u4(z + (size_t)q * zld + (size_t)m * D + lane * W);
        }
    }
    float a[W], ss = 0.f;
    if (on) {
        unpack_u4<T, W>(xr, a);
        sumsq_acc<W>(ss, a);
    }
    ss = warp_sum(ss);
    const float rs = 1.f / sqrtf(ss / (float)D + eps);
    if (on) {
        float wv[W];
        unpack_u4<T, W>(wr, wv);
        if (z) {
            float zv[W];
            unpack_u4<T, W>(zr, zv);
#pragma unroll
            for (int j = 0; j < W; j++) a[j] = gated_rmsnorm_y(a[j], rs, wv[j], zv[j], sigmoid_fast_ex2ftz(zv[j]));
        } else {
#pragma unroll
            for (int j = 0; j < W; j++) a[j] = rmsnorm_y(a[j], rs, wv[j]);
        }
        store_pack<T, W>(y + e, a);
    }
    if (lane == 0) rstd[row] = rs;
}

// ---- causal depthwise conv1d: y[b,t,c] = sum_{j<K} w[c,j] x[b, t-K+1+j, c] (thread per output) --
template <typename T>
__global__ void __launch_bounds__(EW_THREADS) conv1d_fwd_kernel(T *y, const T *x, const T *w, size_t total, int T_,
                                                                int C, int K) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int c = (int)(idx % C);
        const size_t r = idx / C;  // token b*T + t
        const int t = (int)(r % T_);
        float s = 0.f;
        for (int j = 0; j < K; j++) {
            const int ts = t - (K - 1) + j;
            if (ts >= 0) s += to_f(w[(size_t)c * K + j]) * to_f(x[(r - (K - 1) + j) * C + c]);
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

// ---- GDN gates: g = -exp(A_log) softplus(a + dt_bias) (0 with the gate off), beta = c sigmoid(b)
// softplus(u) = u for u > 20 (the CPU's threshold), log1p(exp(u)) otherwise. a, b: token n's row
// at n ld; g, beta packed (N,H).
template <typename T>
__global__ void __launch_bounds__(EW_THREADS) gdn_gates_fwd_kernel(float *g, float *beta, const T *a, const T *b,
                                                                   const T *A_log, const T *dt_bias, size_t total,
                                                                   int H, size_t ld, gdn_mode mode) {
    const float c = mode.neg_eigval ? 2.f : 1.f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int h = (int)(i % H);
        const size_t j = (i / H) * ld + h;
        if (mode.gate) {
            const float u = to_f(a[j]) + to_f(dt_bias[h]);
            const float sp = u > 20.f ? u : log1pf(expf(u));
            g[i] = -expf(to_f(A_log[h])) * sp;
        } else {
            g[i] = 0.f;
        }
        if (mode.delta) beta[i] = c * sigmoid_fast(to_f(b[j]));
    }
}

// ---- elementwise ops ------------------------------------------------------------------------
template <typename T> struct silu_fwd_op {
    T *y;
    const T *x;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float a[W];
        load_pack<T, W>(x + i, a);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = a[j] * sigmoid_fast(a[j]);
        store_pack<T, W>(y + i, a);
    }
};
// h packed (rows, cols), gate and up rows of stride gu.ld (row_stride)
template <typename T> struct swiglu_fwd_op {
    T *h;
    const T *gate, *up;
    row_stride gu;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float g[W], u[W];
        const size_t j = gu.at(i);
        load_pack<T, W>(gate + j, g);
        load_pack<T, W>(up + j, u);
#pragma unroll
        for (int j = 0; j < W; j++) g[j] = swiglu_h(g[j], sigmoid_fast(g[j]), u[j]);  // swiglu_bwd's h: the same
        store_pack<T, W>(h + i, g);
    }
};
template <typename T> struct add_op {
    T *y;
    const T *x;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float a[W], b[W];
        load_pack<T, W>(y + i, a);
        load_pack<T, W>(x + i, b);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] += b[j];
        store_pack<T, W>(y + i, a);
    }
};
template <typename D, typename S> struct convert_op {
    D *y;
    const S *x;
    template <int W> __device__ __forceinline__ void apply(size_t i) const {
        float a[W];
        load_pack<S, W>(x + i, a);
        store_pack<D, W>(y + i, a);
    }
};

// ---- launchers (grid, vector width, launch check) ----------------------------------------------
template <typename T> void embedding_fwd_launch(T *out, const int32_t *tok, const T *wte, int N, int d, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (d % W == 0 && aligned16(out) && aligned16(wte))
        embedding_fwd_kernel<T, W><<<N, 128, 0, s>>>(out, tok, wte, d);
    else
        embedding_fwd_kernel<T, 1><<<N, 128, 0, s>>>(out, tok, wte, d);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_fwd_launch(T *y, float *rstd, const T *x, const T *w, int N, int d, float eps, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (d % W == 0 && aligned16(y) && aligned16(x) && aligned16(w))
        rmsnorm_fwd_kernel<T, W><<<row_blocks(N), ROW_THREADS, 0, s>>>(y, rstd, x, w, N, d, eps);
    else
        rmsnorm_fwd_kernel<T, 1><<<row_blocks(N), ROW_THREADS, 0, s>>>(y, rstd, x, w, N, d, eps);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void add_rmsnorm_fwd_launch(T *x_out, T *y, float *rstd, const T *x_in, const T *branch, const T *w, int N, int d,
                            float eps, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (d % W == 0 && aligned16(y) && aligned16(x_out) && aligned16(w))  // rmsnorm_fwd_launch's test
        add_rmsnorm_fwd_kernel<T, W><<<row_blocks(N), ROW_THREADS, 0, s>>>(x_out, y, rstd, x_in, branch, w, N, d, eps,
                                                                          aligned16(x_in) && aligned16(branch));
    else
        add_rmsnorm_fwd_kernel<T, 1><<<row_blocks(N), ROW_THREADS, 0, s>>>(x_out, y, rstd, x_in, branch, w, N, d, eps,
                                                                          true);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void l2norm_fwd_launch(T *y, float *rnorm, const T *x, size_t rows, int D, float eps, float scale, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (D % W == 0 && aligned16(y) && aligned16(x))
        l2norm_fwd_kernel<T, W><<<row_blocks(rows), ROW_THREADS, 0, s>>>(y, rnorm, x, rows, D, eps, scale);
    else
        l2norm_fwd_kernel<T, 1><<<row_blocks(rows), ROW_THREADS, 0, s>>>(y, rnorm, x, rows, D, eps, scale);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void gated_rmsnorm_fwd_launch(T *y, float *rstd, const T *x, const T *z, const T *w, size_t rows, int D, int zh,
                              size_t zld, float eps, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    const bool vec = D % W == 0 && (!z || zld % W == 0) && aligned16(y) && aligned16(x) && aligned16(z) && aligned16(w);
    // s13: one pack a lane, rows <= 2^31 (udiv31), y not over z (z is read with x here, after the
    // butterfly before: a y row over a z row would differ between the two only then)
    const bool y_over_z = z && ranges_meet(bytes_of(y, rows * D * sizeof(T)),
                                           bytes_of(z, gated_z_extent(rows, D, zh, zld) * sizeof(T)));
    if (vec && D <= 32 * W && rows <= ((size_t)1 << 31) && !y_over_z) {
        gated_rmsnorm_fwd_s13_kernel<T, W><<<row_blocks(rows), ROW_THREADS, 0, s>>>(
            y, rstd, x, z, w, rows, D, zh, zld, udiv31::of((uint32_t)GDN_MAX(zh, 1)), eps);
        CUDA_CHECK_LAUNCH();
        norm_s13_count();
        return;
    }
    if (vec)
        gated_rmsnorm_fwd_kernel<T, W>
            <<<row_blocks(rows), ROW_THREADS, 0, s>>>(y, rstd, x, z, w, rows, D, zh, zld, eps);
    else
        gated_rmsnorm_fwd_kernel<T, 1>
            <<<row_blocks(rows), ROW_THREADS, 0, s>>>(y, rstd, x, z, w, rows, D, zh, zld, eps);
    CUDA_CHECK_LAUNCH();
}

inline unsigned grid_for(size_t total) {
    return (unsigned)GDN_MIN(GDN_CDIV(total, (size_t)EW_THREADS), (size_t)65536);
}

template <typename T> void conv1d_fwd_launch(T *y, const T *x, const T *w, int B, int T_, int C, int K, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (C % W == 0 && K <= CONV_KMAX && aligned16(y) && aligned16(x)) {
        const int tiles = (int)GDN_CDIV(T_, CONV_FWD_TT);
        const dim3 grid((unsigned)GDN_CDIV(C / W, CONV_THREADS), (unsigned)(B * tiles));
        if (K <= 4) conv1d_fwd_tiled_kernel<T, W, 4><<<grid, CONV_THREADS, 0, s>>>(y, x, w, T_, C, K, tiles);
        else conv1d_fwd_tiled_kernel<T, W, CONV_KMAX><<<grid, CONV_THREADS, 0, s>>>(y, x, w, T_, C, K, tiles);
    } else {
        const size_t total = (size_t)B * T_ * C;
        conv1d_fwd_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(y, x, w, total, T_, C, K);
    }
    CUDA_CHECK_LAUNCH();
}

static unsigned long norm_s13_launches;

}  // namespace

// ---- public entry points (cuda/ops.h) -------------------------------------------------------
void norm_s13_count() { __atomic_add_fetch(&norm_s13_launches, 1ul, __ATOMIC_RELAXED); }

extern "C" {

unsigned long cuda_norm_s13_launches(void) { return __atomic_load_n(&norm_s13_launches, __ATOMIC_RELAXED); }

void cuda_add(cuda_dtype dt, void *y, const void *x, size_t n, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, ew_launch<T>(add_op<T>{(T *)y, (const T *)x}, n, aligned16(y) && aligned16(x), s));
}

void cuda_convert(void *dst, cuda_dtype ddt, const void *src, cuda_dtype sdt, size_t n, cudaStream_t s) {
    if (n == 0) return;
    const bool vec = aligned16(dst) && aligned16(src);
    if (ddt == sdt) {
        const size_t es = ddt == CUDA_BF16 ? 2 : 4;
        CUDA_DT_SWITCH(ddt, T, (void)sizeof(T));  // rejects an unknown dtype
        if (dst != src) CUDA_CHECK(cudaMemcpyAsync(dst, src, n * es, cudaMemcpyDeviceToDevice, s));
    } else if (ddt == CUDA_BF16 && sdt == CUDA_F32) {
        ew_launch<float>(convert_op<__nv_bfloat16, float>{(__nv_bfloat16 *)dst, (const float *)src}, n, vec, s);
    } else if (ddt == CUDA_F32 && sdt == CUDA_BF16) {
        ew_launch<float>(convert_op<float, __nv_bfloat16>{(float *)dst, (const __nv_bfloat16 *)src}, n, vec, s);
    } else {
        gdn_die("cuda_convert: unknown dtype pair %d <- %d", (int)ddt, (int)sdt);
    }
}

void cuda_embedding_fwd(cuda_dtype dt, void *out, const int32_t *tok, const void *wte, int N, int d,
                        cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, embedding_fwd_launch<T>((T *)out, tok, (const T *)wte, N, d, s));
}

void cuda_rmsnorm_fwd(cuda_dtype dt, void *y, float *rstd, const void *x, const void *w, int N, int d, double eps,
                      cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, rmsnorm_fwd_launch<T>((T *)y, rstd, (const T *)x, (const T *)w, N, d, (float)eps, s));
}

void cuda_add_rmsnorm_fwd(cuda_dtype dt, void *x_out, void *y, float *rstd, const void *x_in, const void *branch,
                          const void *w, int N, int d, double eps, cudaStream_t s) {
    if (N <= 0 || d <= 0) return;
    CUDA_DT_SWITCH(dt, T, add_rmsnorm_fwd_launch<T>((T *)x_out, (T *)y, rstd, (const T *)x_in, (const T *)branch,
                                                    (const T *)w, N, d, (float)eps, s));
}

void cuda_conv1d_fwd(cuda_dtype dt, void *y, const void *x, const void *w, int B, int T, int C, int K,
                     cudaStream_t s) {
    if ((size_t)B * T * C == 0) return;
    CUDA_DT_SWITCH(dt, E, conv1d_fwd_launch<E>((E *)y, (const E *)x, (const E *)w, B, T, C, K, s));
}

void cuda_silu_fwd(cuda_dtype dt, void *y, const void *x, size_t n, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, ew_launch<T>(silu_fwd_op<T>{(T *)y, (const T *)x}, n, aligned16(y) && aligned16(x), s));
}

void cuda_l2norm_fwd(cuda_dtype dt, void *y, float *rnorm, const void *x, size_t rows, int D, double eps,
                     double scale, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T, l2norm_fwd_launch<T>((T *)y, rnorm, (const T *)x, rows, D, (float)eps, (float)scale, s));
}

void cuda_gdn_gates_fwd(cuda_dtype dt, float *g, float *beta, const void *a, const void *b, const void *A_log,
                        const void *dt_bias, int N, int H, size_t ld, gdn_mode mode, cudaStream_t s) {
    const size_t total = (size_t)N * H;
    if (total == 0) return;
    CUDA_DT_SWITCH(dt, T, gdn_gates_fwd_kernel<T><<<grid_for(total), EW_THREADS, 0, s>>>(
                              g, beta, (const T *)a, (const T *)b, (const T *)A_log, (const T *)dt_bias, total, H,
                              ld, mode);
                   CUDA_CHECK_LAUNCH());
}

void cuda_gated_rmsnorm_fwd(cuda_dtype dt, void *y, float *rstd, const void *x, const void *z, const void *w,
                            size_t rows, int D, int zh, size_t zld, double eps, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T, gated_rmsnorm_fwd_launch<T>((T *)y, rstd, (const T *)x, (const T *)z, (const T *)w, rows,
                                                      D, zh, zld, (float)eps, s));
}

void cuda_swiglu_fwd(cuda_dtype dt, void *h, const void *gate, const void *up, size_t rows, int cols, size_t ld,
                     cudaStream_t s) {
    if (rows == 0 || cols <= 0) return;
    if (ld < (size_t)cols) gdn_die("cuda_swiglu_fwd: row stride %zu < %d columns", ld, cols);
    const row_stride gu = row_stride_of(rows, cols, ld);
    CUDA_DT_SWITCH(dt, T,
                   ew_launch<T>(swiglu_fwd_op<T>{(T *)h, (const T *)gate, (const T *)up, gu}, rows * (size_t)cols,
                                row_stride_packs(gu, vec_width<T>()) && aligned16(h) && aligned16(gate) &&
                                    aligned16(up),
                                s));
}

void cuda_dropout_fwd(cuda_dtype dt, void *y, const void *x, size_t n, double p, uint64_t seed, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, T, dropout_launch<T>((T *)y, (const T *)x, n, p, seed, s));
}

void cuda_rope_fwd(cuda_dtype dt, void *y, const void *x, int B, int T, int H, int D, double base, cudaStream_t s) {
    CUDA_DT_SWITCH(dt, E, rope_launch<E>((E *)y, (const E *)x, B, T, H, D, base, 1.f, s));
}

}  // extern "C"
