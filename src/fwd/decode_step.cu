// decode_step.cu — the per-token kernels of the GPU decoder (decode_step.h): short conv + SiLU
// with a ring of past inputs, the recurrent GDN step, and attention over a K/V ring. Twins of
// decode.c's conv_step, gdn_step and attn_step (float64); here fp32 arithmetic, fixed-order
// sums, so a step is bitwise repeatable.
#include "decode_step.h"
#include "../cuda/elementwise.cuh"

namespace {

constexpr int CONV_THREADS = 256;
constexpr int GDN_THREADS = 128;   // value columns of one head per block (blockIdx.y: the rest)
constexpr int GDN_MAX_DK = 256;
constexpr int ATT_THREADS = 128;   // = keys of one score tile
constexpr int ATT_MAX_D = 256;

// ---- short conv + SiLU of one token ---------------------------------------------------------
// One thread per (sequence b, channel c of all groups): pre = sum_j w[c,j] x_{t-(K-1)+j} in
// the CPU's order (j ascending, times before 0 skipped), y = pre sigmoid(pre); then x_t
// overwrites the ring slot of time t - (K-1), which this thread has just read.
template <typename T>
__global__ void __launch_bounds__(CONV_THREADS) conv_silu_step_kernel(conv_step_params p, const int *pos) {
    const int Ct = p.C[0] + p.C[1] + p.C[2];
    const size_t n = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= (size_t)p.B * Ct) return;
    const int b = (int)(n / Ct);
    int c = (int)(n % Ct), s = 0;
    while (c >= p.C[s]) c -= p.C[s++];
    const int K = p.K, t = *pos, C = p.C[s];
    const T *w = (const T *)p.w[s] + (size_t)c * K;
    T *hist = (T *)p.hist[s] + (size_t)b * (K - 1) * C + c;
    const T xt = ((const T *)p.x[s])[(size_t)b * p.ld[s] + c];
    float pre = 0.f;
    for (int j = 0; j < K - 1; j++) {
        const int ts = t - (K - 1) + j;
        if (ts >= 0) pre += to_f(w[j]) * to_f(hist[(size_t)(ts % (K - 1)) * C]);
    }
    pre += to_f(w[K - 1]) * to_f(xt);
    ((T *)p.y[s])[(size_t)b * C + c] = from_f<T>(pre * sigmoid_fast(pre));
    hist[(size_t)(t % (K - 1)) * C] = xt;
}

// ---- the recurrent GDN step ------------------------------------------------------------------
// Block (b h, column tile): thread j owns value column j of the head's state H (Dk x Dv, row i
// = key dim i). Pass 1: u_j = sum_i k_i H_ij; w_j = beta (v_j - alpha u_j). Pass 2: H_ij <-
// alpha H_ij + k_i w_j, o_j = sum_i q_i H_ij (new H). Sums in ascending i, as decode.c.
template <typename T>
__global__ void __launch_bounds__(GDN_THREADS) gdn_step_kernel(gdn_step_params p) {
    __shared__ float qs[GDN_MAX_DK], ks[GDN_MAX_DK];
    const int bh = blockIdx.x, Dk = p.Dk, Dv = p.Dv;
    const int j = blockIdx.y * GDN_THREADS + threadIdx.x;
    for (int i = threadIdx.x; i < Dk; i += GDN_THREADS) {
        qs[i] = to_f(((const T *)p.q)[(size_t)bh * Dk + i]);
        ks[i] = to_f(((const T *)p.k)[(size_t)bh * Dk + i]);
    }
    __syncthreads();
    if (j >= Dv) return;
    float *S = p.S + (size_t)bh * Dk * Dv + j;
    const float alpha = p.mode.gate ? expf(p.g[bh]) : 1.f;
    float w = to_f(((const T *)p.v)[(size_t)bh * Dv + j]);
    if (p.mode.delta) {
        float u = 0.f;
        for (int i = 0; i < Dk; i++) u += ks[i] * S[(size_t)i * Dv];
        w = p.beta[bh] * (w - alpha * u);
    }
    float o = 0.f;
    for (int i = 0; i < Dk; i++) {
        const float h = alpha * S[(size_t)i * Dv] + ks[i] * w;
        S[(size_t)i * Dv] = h;
        o += qs[i] * h;
    }
    ((T *)p.o)[(size_t)bh * Dv + j] = from_f<T>(o);
}

// ---- attention of one token ------------------------------------------------------------------
// Block b: the RoPE angles of time t (as rope_kernel: double sincos of t base^(-2i/D)), q roped
// in place, roped k and v into ring slot t mod cap.
template <typename T>
__global__ void __launch_bounds__(ATT_THREADS) rope_append_kernel(attn_step_params p, const int *pos) {
    __shared__ float cs[ATT_MAX_D / 2], sn[ATT_MAX_D / 2];
    const int b = blockIdx.x, H = p.H, D = p.D, half = D / 2, t = *pos;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double sd, cd;
        sincos((double)t * pow(p.base, -2.0 * i / D), &sd, &cd);
        cs[i] = (float)cd;
        sn[i] = (float)sd;
    }
    __syncthreads();
    const size_t row = (size_t)b * H * D, slot = ((size_t)b * p.cap + t % p.cap) * H * D;
    T *q = (T *)p.q + row, *kc = (T *)p.kc + slot, *vc = (T *)p.vc + slot;
    const T *k = (const T *)p.k + row, *v = (const T *)p.v + row;
    for (int e = threadIdx.x; e < H * half; e += blockDim.x) {
        const int h = e / half, i = e % half;
        const size_t o = (size_t)h * D + i;
        const float c = cs[i], s = sn[i];
        float x1 = to_f(q[o]), x2 = to_f(q[o + half]);
        q[o] = from_f<T>(x1 * c - x2 * s);
        q[o + half] = from_f<T>(x2 * c + x1 * s);
        x1 = to_f(k[o]), x2 = to_f(k[o + half]);
        kc[o] = from_f<T>(x1 * c - x2 * s);
        kc[o + half] = from_f<T>(x2 * c + x1 * s);
    }
    for (int e = threadIdx.x; e < H * D; e += blockDim.x) vc[e] = v[e];
}

// Block (b, h): keys j0..t in tiles of ATT_THREADS with the running max / sum of the online
// softmax. Scores: one warp a key, lanes over the head dim, warp_sum; the tile's max, weights and
// sum are read by every thread from shared memory in index order (the same value everywhere);
// thread d accumulates output dim d (and d + ATT_THREADS).
template <typename T>
__global__ void __launch_bounds__(ATT_THREADS) attn_step_kernel(attn_step_params p, const int *pos) {
    __shared__ float qs[ATT_MAX_D], sc[ATT_THREADS];
    const int b = blockIdx.x / p.H, h = blockIdx.x % p.H, D = p.D, HD = p.H * p.D;
    const int t = *pos, j0 = t - p.window + 1 > 0 ? t - p.window + 1 : 0;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarp = ATT_THREADS / 32;
    const T *q = (const T *)p.q + (size_t)b * HD + (size_t)h * D;
    const T *kc = (const T *)p.kc + (size_t)b * p.cap * HD + (size_t)h * D;
    const T *vc = (const T *)p.vc + (size_t)b * p.cap * HD + (size_t)h * D;
    for (int d = threadIdx.x; d < D; d += ATT_THREADS) qs[d] = to_f(q[d]);
    __syncthreads();
    const float scale = (float)p.scale;
    float m = -INFINITY, l = 0.f, acc0 = 0.f, acc1 = 0.f;
    for (int tile = j0; tile <= t; tile += ATT_THREADS) {
        const int n = t - tile + 1 < ATT_THREADS ? t - tile + 1 : ATT_THREADS;
        for (int jj = warp; jj < n; jj += nwarp) {
            const T *kr = kc + (size_t)((tile + jj) % p.cap) * HD;
            float s = 0.f;
            for (int d = lane; d < D; d += 32) s += qs[d] * to_f(kr[d]);
            s = warp_sum(s);
            if (lane == 0) sc[jj] = s * scale;
        }
        __syncthreads();
        float mt = m;
        for (int jj = 0; jj < n; jj++) mt = fmaxf(mt, sc[jj]);
        const float corr = expf(m - mt);  // m = -inf at the first tile: 0
        __syncthreads();
        if (threadIdx.x < n) sc[threadIdx.x] = expf(sc[threadIdx.x] - mt);
        __syncthreads();
        float lt = 0.f;
        for (int jj = 0; jj < n; jj++) lt += sc[jj];
        l = l * corr + lt;
        acc0 *= corr;
        acc1 *= corr;
        for (int jj = 0; jj < n; jj++) {
            const T *vr = vc + (size_t)((tile + jj) % p.cap) * HD;
            if (threadIdx.x < D) acc0 += sc[jj] * to_f(vr[threadIdx.x]);
            if (threadIdx.x + ATT_THREADS < D) acc1 += sc[jj] * to_f(vr[threadIdx.x + ATT_THREADS]);
        }
        m = mt;
        __syncthreads();
    }
    T *o = (T *)p.o + (size_t)b * HD + (size_t)h * D;
    if (threadIdx.x < D) o[threadIdx.x] = from_f<T>(acc0 / l);
    if (threadIdx.x + ATT_THREADS < D) o[threadIdx.x + ATT_THREADS] = from_f<T>(acc1 / l);
}

__global__ void pos_advance_kernel(int *pos) { *pos += 1; }

}  // namespace

extern "C" {

void cuda_conv_silu_step(cuda_dtype dt, const conv_step_params *p, const int *pos, cudaStream_t s) {
    if (p->K < 2) gdn_die("cuda_conv_silu_step: conv width %d < 2 (no conv: use cuda_silu_fwd)", p->K);
    size_t n = (size_t)p->B * (p->C[0] + p->C[1] + p->C[2]);
    if (n == 0) return;
    unsigned grid = (unsigned)((n + CONV_THREADS - 1) / CONV_THREADS);
    CUDA_DT_SWITCH(dt, E, conv_silu_step_kernel<E><<<grid, CONV_THREADS, 0, s>>>(*p, pos));
    CUDA_CHECK_LAUNCH();
}

void cuda_gdn_step(cuda_dtype dt, const gdn_step_params *p, cudaStream_t s) {
    if (p->Dk < 1 || p->Dk > GDN_MAX_DK || p->Dv < 1)
        gdn_die("cuda_gdn_step: head dims dk %d, dv %d (dk must be in [1, %d])", p->Dk, p->Dv,
                GDN_MAX_DK);
    if (p->B * p->H == 0) return;
    dim3 grid((unsigned)(p->B * p->H), (unsigned)((p->Dv + GDN_THREADS - 1) / GDN_THREADS));
    CUDA_DT_SWITCH(dt, E, gdn_step_kernel<E><<<grid, GDN_THREADS, 0, s>>>(*p));
    CUDA_CHECK_LAUNCH();
}

void cuda_attn_step(cuda_dtype dt, const attn_step_params *p, const int *pos, cudaStream_t s) {
    if (p->D < 2 || p->D % 2 || p->D > ATT_MAX_D)
        gdn_die("cuda_attn_step: head dim %d (even, <= %d)", p->D, ATT_MAX_D);
    if (p->cap < 1 || p->window < 1) gdn_die("cuda_attn_step: cap %d, window %d", p->cap, p->window);
    if (p->B * p->H == 0) return;
    CUDA_DT_SWITCH(dt, E, rope_append_kernel<E><<<p->B, ATT_THREADS, 0, s>>>(*p, pos));
    CUDA_CHECK_LAUNCH();
    CUDA_DT_SWITCH(dt, E, attn_step_kernel<E><<<p->B * p->H, ATT_THREADS, 0, s>>>(*p, pos));
    CUDA_CHECK_LAUNCH();
}

void cuda_pos_advance(int *pos, cudaStream_t s) {
    pos_advance_kernel<<<1, 1, 0, s>>>(pos);
    CUDA_CHECK_LAUNCH();
}

}  // extern "C"
