// adamw.cu — CUDA AdamW step on one tensor and the deterministic sum of squares used by the
// global gradient norm (cuda_ops.h). AdamW, per element, in fp32 (src/model/backend.h):
//   g = grad gscale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   w -= lr (m/bc1 / (sqrt(v/bc2) + eps) + wd w)
// with w the fp32 master weight when master != NULL (then p = round_to_dt(w)), else p itself.
// Sum of squares: fp64 accumulation, a grid of min(1024, ceil(n/1024)) blocks (a function of n
// only), per-block partials into a per-device scratch, then one block sums them in order.
#include "../fwd/cuda_ops_device.cuh"

namespace {

struct adamw_params {
    float lr, b1, b2, eps, wd, bc1, bc2, gscale;
};

// V consecutive elements per thread and iteration (V = 4: 16-byte loads of g, m, v, master; the
// launcher checks n % V and the alignment, else V = 1). The same operations per element for every
// V, so the same bits: written with the _rn intrinsics, which the compiler may not contract into
// other fused multiply-adds (with plain operators the V = 4 and V = 1 instances of one build
// were contracted differently: test_cuda_ops' "4-wide vs 1-wide" rows failed in session 7). A
// ZeRO-1 shard boundary moves a tensor between the two paths, so they must agree bit for bit.
template <typename T, int V, bool MASTER>
__global__ void __launch_bounds__(EW_THREADS)
    adamw_kernel(T *p, float *master, const float *g, float *m, float *v, size_t n, const adamw_params a) {
    const size_t stride = (size_t)gridDim.x * blockDim.x * V;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
        float gi[V], mi[V], vi[V], w[V];
        load_pack<float, V>(g + i, gi);
        load_pack<float, V>(m + i, mi);
        load_pack<float, V>(v + i, vi);
        if (MASTER)
            load_pack<float, V>(master + i, w);
        else
            load_pack<T, V>(p + i, w);
#pragma unroll
        for (int j = 0; j < V; j++) {
            const float gj = __fmul_rn(gi[j], a.gscale);
            mi[j] = __fmaf_rn(a.b1, mi[j], __fmul_rn(1.f - a.b1, gj));
            vi[j] = __fmaf_rn(a.b2, vi[j], __fmul_rn(__fmul_rn(1.f - a.b2, gj), gj));
            const float mh = __fdiv_rn(mi[j], a.bc1), vh = __fdiv_rn(vi[j], a.bc2);
            const float step = __fmaf_rn(a.wd, w[j], __fdiv_rn(mh, __fadd_rn(__fsqrt_rn(vh), a.eps)));
            w[j] = __fmaf_rn(-a.lr, step, w[j]);
        }
        store_pack<float, V>(m + i, mi);
        store_pack<float, V>(v + i, vi);
        if (MASTER) store_pack<float, V>(master + i, w);
        store_pack<T, V>(p + i, w);
    }
}

template <typename T, int V, bool MASTER>
void adamw_launch(T *p, float *master, const float *g, float *m, float *v, size_t n, const adamw_params &a,
                  cudaStream_t s) {
    const unsigned blocks = (unsigned)GDN_MIN(GDN_CDIV(n / V, (size_t)EW_THREADS), (size_t)65536);
    adamw_kernel<T, V, MASTER><<<blocks, EW_THREADS, 0, s>>>(p, master, g, m, v, n, a);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void adamw_dispatch(T *p, float *master, const float *g, float *m, float *v, size_t n, const adamw_params &a,
                    cudaStream_t s) {
    const bool vec = n % 4 == 0 && aligned16(g) && aligned16(m) && aligned16(v) && (!master || aligned16(master)) &&
                     ((uintptr_t)p & (sizeof(T) * 4 - 1)) == 0;
    if (vec && master) adamw_launch<T, 4, true>(p, master, g, m, v, n, a, s);
    else if (vec) adamw_launch<T, 4, false>(p, master, g, m, v, n, a, s);
    else if (master) adamw_launch<T, 1, true>(p, master, g, m, v, n, a, s);
    else adamw_launch<T, 1, false>(p, master, g, m, v, n, a, s);
}

constexpr int SUMSQ_THREADS = 256, SUMSQ_MAX_BLOCKS = 1024, SUMSQ_MAX_DEVICES = 64;

// Fixed-order block sum: xor butterfly per warp, then the warp sums in warp order by thread 0.
__device__ __forceinline__ double block_sum(double v) {
    __shared__ double wsum[SUMSQ_THREADS / 32];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) wsum[threadIdx.x / 32] = v;
    __syncthreads();
    double s = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < SUMSQ_THREADS / 32; w++) s += wsum[w];
    return s;  // valid in thread 0
}

__global__ void __launch_bounds__(SUMSQ_THREADS) sumsq_partial_kernel(double *part, const float *x, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    double acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double xi = x[i];
        acc += xi * xi;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(SUMSQ_THREADS) sumsq_final_kernel(double *out, const double *part, int nb) {
    double acc = 0;
    for (int i = threadIdx.x; i < nb; i += SUMSQ_THREADS) acc += part[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) *out = acc;
}

// SUMSQ_MAX_BLOCKS doubles per device, allocated on first use and kept (stream-ordered reuse).
double *sumsq_scratch() {
    static double *buf[SUMSQ_MAX_DEVICES];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= SUMSQ_MAX_DEVICES) gdn_die("cuda_sumsq_f32: device %d >= %d", dev, SUMSQ_MAX_DEVICES);
    if (!buf[dev]) CUDA_CHECK(cudaMalloc((void **)&buf[dev], SUMSQ_MAX_BLOCKS * sizeof(double)));
    return buf[dev];
}

}  // namespace

extern "C" {

void cuda_adamw(cuda_dtype dt, void *p, float *master, const float *g, float *m, float *v, size_t n, float lr,
                float b1, float b2, float eps, float wd, float bc1, float bc2, float gscale, cudaStream_t s) {
    if (n == 0) return;
    const adamw_params a = {lr, b1, b2, eps, wd, bc1, bc2, gscale};
    CUDA_DT_SWITCH(dt, T, adamw_dispatch<T>((T *)p, master, g, m, v, n, a, s));
}

void cuda_sumsq_f32(double *out_dev, const float *x, size_t n, cudaStream_t s) {
    if (n == 0) {
        CUDA_CHECK(cudaMemsetAsync(out_dev, 0, sizeof(double), s));
        return;
    }
    const int nb = (int)GDN_MIN(GDN_CDIV(n, (size_t)SUMSQ_THREADS * 4), (size_t)SUMSQ_MAX_BLOCKS);
    double *part = sumsq_scratch();
    sumsq_partial_kernel<<<nb, SUMSQ_THREADS, 0, s>>>(part, x, n);
    CUDA_CHECK_LAUNCH();
    sumsq_final_kernel<<<1, SUMSQ_THREADS, 0, s>>>(out_dev, part, nb);
    CUDA_CHECK_LAUNCH();
}

}  // extern "C"
