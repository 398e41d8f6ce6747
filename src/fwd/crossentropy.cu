// crossentropy.cu — CUDA fused softmax cross-entropy (twin of src/fwd/crossentropy.c and
// src/bwd/crossentropy.c), for vocabularies of any size (V = 50304, 65536, ...):
//   losses[n]    = log sum_v exp(l[n,v] - m) - (l[n,t] - m),  m = max_v l[n,v],  t = tgt[n]
//   l[n,v]      <- scale (softmax(l[n])_v - [v == t])       when scale != 0 (in place)
// One block per row. Pass 1 streams the row once in 16-byte packs: each thread keeps an online
// (max, sum of exp) pair over its packs v = tid, tid + 512, ...; the 512 pairs are merged by a
// xor butterfly in each warp, then the 16 warp pairs in warp order by every thread (fixed order:
// bitwise reproducible). Pass 2 rereads the row (mostly from L2) and overwrites it with the
// gradient, so no probability is ever stored. Ignored rows (t < 0): loss 0, gradient 0.
// Logits in T (float / bf16), arithmetic and losses fp32. The per-logit exponentials are
// exp_fast: 2^((l - m) log2 e) (MUFU ex2: ~2 ulp; the subtraction first, so the values near the
// max, which carry the sum, keep their accuracy): expf's range reduction makes the kernel
// issue-bound (ncu: 84% issue slots, 44% of DRAM bandwidth). The one-hot term is
// subtracted once, by the thread holding the target's pack.
#include "../cuda/elementwise.cuh"

namespace {

constexpr int CE_THREADS = 512, CE_WARPS = CE_THREADS / 32;

// (m, s) <- merge of two online softmax states; symmetric in its arguments, so butterfly
// partners agree bit for bit. An empty state is (-inf, 0).
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return;
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

// e^(d) for d = l - m <= 0 as 2^(d log2 e) on MUFU ex2 (ftz: results below 2^-126 are 0, as
// they are after bf16 rounding anyway). __expf is the same product and ex2 but without .ftz in
// this build (no -ftz / --use_fast_math): its PTX differs, and this form is the one measured.
__device__ __forceinline__ float exp_fast(float d) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d * 1.4426950408889634f));
    return y;
}

template <typename T, int W>
__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_kernel(T *logits, float *losses, const int32_t *tgt, int V, float scale) {
    __shared__ float wm[CE_WARPS], ws[CE_WARPS];
    const size_t row = blockIdx.x;
    T *l = logits + row * V;
    const int t = tgt[row], tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (t < 0 || t >= V) {
        // ignored row; a target >= V breaks the contract (the CPU dies): NaN loss and gradient
        // so that the caller's finiteness check stops the run
        const float fill = t < 0 ? 0.f : NAN;
        if (tid == 0) losses[row] = fill;
        if (scale != 0.f)
            for (int v = tid; v < V; v += CE_THREADS) l[v] = from_f<T>(fill);
        return;
    }
    const float xt = tid == 0 ? to_f(l[t]) : 0.f;  // read before any thread overwrites the row
    float m = -INFINITY, s = 0.f;
    for (int k = tid; k < V / W; k += CE_THREADS) {
        float a[W];
        load_pack<T, W>(l + (size_t)k * W, a);
        float pm = a[0];
#pragma unroll
        for (int j = 1; j < W; j++) pm = fmaxf(pm, a[j]);
        if (pm > m) {
            s *= exp_fast(m - pm);  // exp_fast(-inf) = 0: the first pack
            m = pm;
        }
#pragma unroll
        for (int j = 0; j < W; j++) s += exp_fast(a[j] - m);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(FULL_MASK, m, o), s2 = __shfl_xor_sync(FULL_MASK, s, o);
        lse_merge(m, s, m2, s2);
    }
    if (lane == 0) {
        wm[warp] = m;
        ws[warp] = s;
    }
    __syncthreads();
    m = wm[0];
    s = ws[0];
    for (int w = 1; w < CE_WARPS; w++) lse_merge(m, s, wm[w], ws[w]);
    if (tid == 0) losses[row] = logf(s) - (xt - m);
    if (scale == 0.f) return;
    const float kq = scale / s;
    const int kt = t / W;  // the pack holding the target
    for (int k = tid; k < V / W; k += CE_THREADS) {
        float a[W];
        load_pack<T, W>(l + (size_t)k * W, a);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] = kq * exp_fast(a[j] - m);
        if (k == kt)
#pragma unroll
            for (int j = 0; j < W; j++)
                if (j == t - kt * W) a[j] -= scale;
        store_pack<T, W>(l + (size_t)k * W, a);
    }
}

template <typename T>
void crossentropy_launch(T *logits, float *losses, const int32_t *tgt, int N, int V, float scale, cudaStream_t s) {
    constexpr int W = vec_width<T>();
    if (V % W == 0 && aligned16(logits))
        crossentropy_kernel<T, W><<<N, CE_THREADS, 0, s>>>(logits, losses, tgt, V, scale);
    else
        crossentropy_kernel<T, 1><<<N, CE_THREADS, 0, s>>>(logits, losses, tgt, V, scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" void cuda_crossentropy(cuda_dtype dt, void *logits, float *losses, const int32_t *tgt, int N, int V,
                                  double scale, cudaStream_t s) {
    if (N <= 0) return;
    if (V <= 0) gdn_die("cuda_crossentropy: vocab size %d", V);
    CUDA_DT_SWITCH(dt, T, crossentropy_launch<T>((T *)logits, losses, tgt, N, V, (float)scale, s));
}
