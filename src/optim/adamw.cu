// adamw.cu — CUDA AdamW step on one tensor and the deterministic sum of squares used by the
// global gradient norm (cuda/ops.h). AdamW, per element, in fp32 (src/model/backend.h):
//   g = grad gscale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   w -= lr (m/bc1 / (sqrt(v/bc2) + eps) + wd w)
// with w the fp32 master weight when master != NULL (then p = round_to_dt(w)), else p itself.
// Sum of squares: fp64 accumulation, a grid of min(1024, ceil(n/1024)) blocks (a function of n
// only), per-block partials into a per-device scratch, then one block sums them in order.
#include "../cuda/elementwise.cuh"

namespace {

struct adamw_params {
    float lr, b1, b2, eps, wd, bc1, bc2, gscale;
};

// The update of one element, shared by every kernel below (wd apart from a: adamw_multi_kernel
// takes each segment's). Only _rn intrinsics, which the compiler never contracts or reorders, so
// the bits do not depend on the kernel or the V it is inlined into.
__device__ __forceinline__ void adamw_elem(float g, float &m, float &v, float &w, const adamw_params &a,
                                           float wd) {
    const float gj = __fmul_rn(g, a.gscale);
    m = __fmaf_rn(a.b1, m, __fmul_rn(1.f - a.b1, gj));
    v = __fmaf_rn(a.b2, v, __fmul_rn(__fmul_rn(1.f - a.b2, gj), gj));
    const float mh = __fdiv_rn(m, a.bc1), vh = __fdiv_rn(v, a.bc2);
    const float step = __fmaf_rn(wd, w, __fdiv_rn(mh, __fadd_rn(__fsqrt_rn(vh), a.eps)));
    w = __fmaf_rn(-a.lr, step, w);
}

// V consecutive elements per thread and iteration (V = 4: 16-byte loads of g, m, v, master; the
// launcher checks n % V and the alignment, else V = 1). The same operations per element for every
// V, so the same bits: written with the _rn intrinsics, which the compiler may not contract into
// other fused multiply-adds (with plain operators the V = 4 and V = 1 instances of one build can
// be contracted differently: test_cuda_ops' "4-wide vs 1-wide" rows check it). A ZeRO-1 shard
// boundary moves a tensor between the two paths, so they must agree bit for bit.
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
        for (int j = 0; j < V; j++) adamw_elem(gi[j], mi[j], vi[j], w[j], a, a.wd);
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

constexpr int ADAMW_MAX_DEVICES = 64;  // per-device caches (adamw_multi_wave)

// ---- AdamW on several segments of the flat arenas in one launch (cuda_adamw_multi) ----
// A step's update of the whole arena (or of a ZeRO-1 shard) by one cuda_adamw launch per run of
// same-decay tensors takes 74 launches at fla-220m, 36 of them norms / gates of at most a few
// thousand elements, each with its ramp-up and tail. Here one launch takes up to ADAMW_MAX_SEGS runs
// (their bounds and decays in a __grid_constant__ table) and a grid of one full wave (every block
// resident) strides over the V-aligned vectors of the span from the first run's start to the
// last run's end, in absolute arena indices. Each thread walks the table forward as its index
// grows (the runs are ascending and disjoint): a vector inside one run takes 16-byte streaming
// loads and stores (each byte is touched once a step: evict-first, __ldcs / __stcs); a vector
// across a run boundary goes element by element, each with its run's decay or, between runs (the
// padding), untouched. Every element gets adamw_elem with the wd of its run: the bits of the
// per-run launches, whatever V and the grid.
constexpr int ADAMW_MAX_SEGS = 128;
struct adamw_seg_table {
    size_t lo[ADAMW_MAX_SEGS], hi[ADAMW_MAX_SEGS];  // ascending, disjoint, lo < hi
    float wd[ADAMW_MAX_SEGS];
    int n;  // >= 1
};

template <int V> __device__ __forceinline__ void ldcs_f32(const float *p, float (&f)[V]) {
    if constexpr (V == 4) {
        const float4 x = __ldcs(reinterpret_cast<const float4 *>(p));
        f[0] = x.x, f[1] = x.y, f[2] = x.z, f[3] = x.w;
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) f[j] = __ldcs(p + j);
    }
}
template <int V> __device__ __forceinline__ void stcs_f32(float *p, const float (&f)[V]) {
    if constexpr (V == 4) {
        __stcs(reinterpret_cast<float4 *>(p), make_float4(f[0], f[1], f[2], f[3]));
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) __stcs(p + j, f[j]);
    }
}
// p (bf16 or fp32) rounded by store_pack's from_f, stored with the streaming hint.
template <typename T, int V> __device__ __forceinline__ void stcs_param(T *p, const float (&f)[V]) {
    pack_t<T, V> k;
#pragma unroll
    for (int j = 0; j < V; j++) k.v[j] = from_f<T>(f[j]);
    if constexpr (sizeof(k) == 16) __stcs(reinterpret_cast<float4 *>(p), *reinterpret_cast<const float4 *>(&k));
    else if constexpr (sizeof(k) == 8) __stcs(reinterpret_cast<float2 *>(p), *reinterpret_cast<const float2 *>(&k));
    else *reinterpret_cast<pack_t<T, V> *>(p) = k;
}

// Element e (absolute) of the arenas: m and v hold [m_lo, ...).
template <typename T, bool MASTER>
__device__ __forceinline__ void adamw_one(T *p, float *master, const float *g, float *m, float *v, size_t m_lo,
                                          size_t e, const adamw_params &a, float wd) {
    const size_t s = e - m_lo;
    float gi = g[e], mi = m[s], vi = v[s], w = MASTER ? master[e] : to_f(p[e]);
    adamw_elem(gi, mi, vi, w, a, wd);
    m[s] = mi;
    v[s] = vi;
    if (MASTER) master[e] = w;
    float pw[1] = {w};
    store_pack<T, 1>(p + e, pw);
}

template <typename T, int V, bool MASTER>
__global__ void __launch_bounds__(EW_THREADS)
    adamw_multi_kernel(T *p, float *master, const float *g, float *m, float *v, size_t m_lo,
                       const __grid_constant__ adamw_seg_table t, const adamw_params a) {
    const size_t end = t.hi[t.n - 1], stride = (size_t)gridDim.x * blockDim.x * V;
    int k = 0;
    size_t lo = t.lo[0], hi = t.hi[0];
    float wd = t.wd[0];
    for (size_t i = lo / V * V + ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V; i < end; i += stride) {
        while (hi <= i) {  // the first run ending after i (exists: i < end)
            k++;
            lo = t.lo[k], hi = t.hi[k], wd = t.wd[k];
        }
        if (lo <= i && i + V <= hi) {  // inside run k
            float gi[V], mi[V], vi[V], w[V];
            const size_t s = i - m_lo;
            ldcs_f32<V>(g + i, gi);
            ldcs_f32<V>(m + s, mi);
            ldcs_f32<V>(v + s, vi);
            if (MASTER) ldcs_f32<V>(master + i, w);
            else load_pack<T, V>(p + i, w);
#pragma unroll
            for (int j = 0; j < V; j++) adamw_elem(gi[j], mi[j], vi[j], w[j], a, wd);
            stcs_f32<V>(m + s, mi);
            stcs_f32<V>(v + s, vi);
            if (MASTER) stcs_f32<V>(master + i, w);
            stcs_param<T, V>(p + i, w);
        } else if (i + V > lo) {  // across a boundary of run k (V > 1 only): element by element
#pragma unroll 1
            for (int j = 0, kk = k; j < V; j++) {
                const size_t e = i + j;
                while (kk < t.n && t.hi[kk] <= e) kk++;
                if (kk == t.n) break;
                if (t.lo[kk] <= e) adamw_one<T, MASTER>(p, master, g, m, v, m_lo, e, a, t.wd[kk]);
            }
        }  // else: the whole vector lies between two runs
    }
}

// One full wave of adamw_multi_kernel<T, V, MASTER> on the current device: SMs x resident blocks
// (4 waves measure 1% faster than 1 in bench/adamw_bench.cu, ~0.02 ms a step: not worth a knob).
template <typename T, int V, bool MASTER> unsigned adamw_multi_wave() {
    static unsigned blocks[ADAMW_MAX_DEVICES];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= ADAMW_MAX_DEVICES) gdn_die("cuda_adamw_multi: device %d >= %d", dev, ADAMW_MAX_DEVICES);
    if (!blocks[dev]) {
        int sms = 0, per_sm = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, adamw_multi_kernel<T, V, MASTER>,
                                                                 EW_THREADS, 0));
        blocks[dev] = (unsigned)GDN_MAX(1, sms * GDN_MAX(per_sm, 1));
    }
    return blocks[dev];
}

template <typename T, int V, bool MASTER>
void adamw_multi_launch(T *p, float *master, const float *g, float *m, float *v, size_t m_lo,
                        const adamw_seg_table &t, const adamw_params &a, cudaStream_t s) {
    const size_t span = t.hi[t.n - 1] - t.lo[0] / V * V;
    const size_t wave = adamw_multi_wave<T, V, MASTER>();
    const unsigned blocks = (unsigned)GDN_MIN(GDN_CDIV(span, (size_t)V * EW_THREADS), wave);
    adamw_multi_kernel<T, V, MASTER><<<blocks, EW_THREADS, 0, s>>>(p, master, g, m, v, m_lo, t, a);
    CUDA_CHECK_LAUNCH();
}

template <typename T>
void adamw_multi_dispatch(T *p, float *master, const float *g, float *m, float *v, size_t m_lo,
                          const adamw_seg_table &t, const adamw_params &a, cudaStream_t s) {
    // V = 4 needs every stream 16-byte aligned at the multiples of 4 (p: 4 elements), m and v
    // included: m_lo a multiple of 4 (a ZeRO-1 shard of ceil(n / world) elements may not be)
    const bool vec = m_lo % 4 == 0 && aligned16(g) && aligned16(m) && aligned16(v) && (!master || aligned16(master)) &&
                     ((uintptr_t)p & (sizeof(T) * 4 - 1)) == 0;
    if (vec && master) adamw_multi_launch<T, 4, true>(p, master, g, m, v, m_lo, t, a, s);
    else if (vec) adamw_multi_launch<T, 4, false>(p, master, g, m, v, m_lo, t, a, s);
    else if (master) adamw_multi_launch<T, 1, true>(p, master, g, m, v, m_lo, t, a, s);
    else adamw_multi_launch<T, 1, false>(p, master, g, m, v, m_lo, t, a, s);
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
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    // four loads in flight per thread, then the same additions in the same order as one at a
    // time (the bits do not change; one load per trip left the stream latency-bound)
    for (; i + 3 * stride < n; i += 4 * stride) {
        const double x0 = x[i], x1 = x[i + stride], x2 = x[i + 2 * stride], x3 = x[i + 3 * stride];
        acc += x0 * x0;
        acc += x1 * x1;
        acc += x2 * x2;
        acc += x3 * x3;
    }
    for (; i < n; i += stride) {
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

void cuda_adamw_multi(cuda_dtype dt, void *p, float *master, const float *g, float *m, float *v, size_t m_lo,
                      const cuda_adamw_seg *seg, int nseg, float lr, float b1, float b2, float eps, float bc1,
                      float bc2, float gscale, cudaStream_t s) {
    const adamw_params a = {lr, b1, b2, eps, 0.f, bc1, bc2, gscale};
    adamw_seg_table t;
    t.n = 0;
    size_t prev = 0;
    for (int k = 0; k < nseg; k++) {
        if (seg[k].lo >= seg[k].hi) continue;  // empty
        if (seg[k].lo < prev || seg[k].lo < m_lo)
            gdn_die("cuda_adamw_multi: segment %d [%zu, %zu) overlaps or precedes the previous end %zu / m_lo %zu", k,
                    seg[k].lo, seg[k].hi, prev, m_lo);
        prev = seg[k].hi;
        t.lo[t.n] = seg[k].lo;
        t.hi[t.n] = seg[k].hi;
        t.wd[t.n] = seg[k].wd;
        if (++t.n == ADAMW_MAX_SEGS) {  // a launch per ADAMW_MAX_SEGS segments
            CUDA_DT_SWITCH(dt, T, adamw_multi_dispatch<T>((T *)p, master, g, m, v, m_lo, t, a, s));
            t.n = 0;
        }
    }
    if (t.n) CUDA_DT_SWITCH(dt, T, adamw_multi_dispatch<T>((T *)p, master, g, m, v, m_lo, t, a, s));
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
