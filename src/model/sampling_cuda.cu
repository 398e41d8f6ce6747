// sampling_cuda.cu — the sampling rule of sampling.h on the device (cuda_sample_tokens,
// decode_cuda.h), one block per row, without sorting:
//   the k-th value:   binary search over the order-preserving 32-bit keys of the fp32 logits for
//                     the largest key kappa with #{key >= kappa} >= top_k (32 counts), then the
//                     ties at kappa kept in ascending id order up to top_k (a prefix count);
//   the nucleus:      binary search for the largest key tau with sum_{kept, key >= tau} w >=
//                     top_p Z (32 sums): M(tau) only changes at kept logits, so tau is one of them
//                     and the set equals the host's, which walks the sorted values;
//   the draw:         the row's ids in contiguous per-thread chunks (ascending id order), chunk
//                     sums, the chunk where the running sum passes u Z, then a walk inside it.
// Weights w_i = exp((l_i - l_max) / temperature) in float64 (a scratch row of V doubles), every
// sum a fixed-order block reduction, so the result is repeatable and equals sample_token's on
// the same logits except when u Z or top_p Z falls within rounding of a partial sum.
#include "sampling_cuda.h"
#include "../cuda/elementwise.cuh"

namespace {

constexpr int SAMPLE_THREADS = 512;
constexpr int SAMPLE_WARPS = SAMPLE_THREADS / 32;

struct sample_args {
    int32_t *out;            // (rows)
    const void *logits;      // (rows, V)
    double *w;               // (rows, V) scratch
    int *bad;                // (1) 0, or 1 + the first row with a non-finite logit
    const int *pos;          // (1) device: the step of the draw (the drawn token's position)
    int32_t *trace;          // (rows, trace_ld) or NULL: the token also goes to trace[row, *pos]
    int trace_ld;
    int V, top_k;
    double temperature, top_p;
    uint64_t key;
};

// Order-preserving key: a < b (floats, -0 taken as +0) iff key(a) < key(b).
__device__ __forceinline__ uint32_t order_key(float f) {
    uint32_t u = __float_as_uint(f == 0.f ? 0.f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ void emit(const sample_args &a, int row, int t, int id) {
    a.out[row] = id;
    if (a.trace) a.trace[(size_t)row * a.trace_ld + t] = id;
}

// rng_uniform_at (src/core/rng.c), word for word.
__device__ __forceinline__ double uniform_at(uint64_t key, uint64_t i) {
    const uint4 o = philox4x32_dev(key, i >> 1);
    const uint64_t x = (i & 1) ? ((uint64_t)o.z << 32 | o.w) : ((uint64_t)o.x << 32 | o.y);
    return (double)(x >> 11) * 0x1.0p-53;
}

__device__ __forceinline__ int warp_sum(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Fixed-order block sum (warp butterflies, then the warps' sums in index order); every thread
// gets the value. `red` (SAMPLE_WARPS) is reused: the call ends with a barrier.
template <typename A>
__device__ A block_sum(A v, A *red) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    A s = 0;
    for (int i = 0; i < SAMPLE_WARPS; i++) s += red[i];
    __syncthreads();
    return s;
}

template <typename T>
__global__ void __launch_bounds__(SAMPLE_THREADS) sample_kernel(sample_args a) {
    __shared__ double dred[SAMPLE_WARPS], part[SAMPLE_THREADS];
    __shared__ int ired[SAMPLE_WARPS], ipart[SAMPLE_THREADS];
    __shared__ float bestv[SAMPLE_WARPS];
    __shared__ int besti[SAMPLE_WARPS], found;
    const int row = blockIdx.x, V = a.V, tid = threadIdx.x;
    const T *lg = (const T *)a.logits + (size_t)row * V;
    double *w = a.w + (size_t)row * V;
    const int chunk = (V + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
    const int i0 = min(V, tid * chunk), i1 = min(V, i0 + chunk);

    // max and argmax (lowest id on ties), finiteness
    float best = -INFINITY;
    int bi = V, nbad = 0;
    for (int i = i0; i < i1; i++) {
        const float f = to_f(lg[i]);
        if (!isfinite(f)) nbad++;
        else if (f > best || bi == V) best = f, bi = i;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(FULL_MASK, best, o);
        const int oi = __shfl_xor_sync(FULL_MASK, bi, o);
        if (oi < V && (bi == V || ob > best || (ob == best && oi < bi))) best = ob, bi = oi;
    }
    if (tid % 32 == 0) bestv[tid / 32] = best, besti[tid / 32] = bi;
    nbad = block_sum(nbad, ired);  // (its barrier publishes bestv, besti)
    best = bestv[0], bi = besti[0];
    for (int i = 1; i < SAMPLE_WARPS; i++)
        if (besti[i] < V && (bi == V || bestv[i] > best || (bestv[i] == best && besti[i] < bi)))
            best = bestv[i], bi = besti[i];
    const int t = *a.pos;
    if (nbad) {
        if (tid == 0) {
            atomicCAS(a.bad, 0, row + 1);
            emit(a, row, t, 0);
        }
        return;
    }
    if (a.temperature == 0) {
        if (tid == 0) emit(a, row, t, bi);
        return;
    }
    const double lmax = best;

    // top-k: kappa = the largest key with #{key >= kappa} >= k; ties at kappa up to id idcut
    const bool topk = a.top_k > 0 && a.top_k < V;
    uint32_t kappa = 0;
    int idcut = V;
    if (topk) {
        uint64_t lo = 0, hi = 0xffffffffu;
        while (lo < hi) {
            const uint64_t mid = (lo + hi + 1) / 2;
            int c = 0;
            for (int i = i0; i < i1; i++) c += order_key(to_f(lg[i])) >= (uint32_t)mid;
            if (block_sum(c, ired) >= a.top_k) lo = mid;
            else hi = mid - 1;
        }
        kappa = (uint32_t)lo;
        int gt = 0, ties = 0;
        for (int i = i0; i < i1; i++) {
            const uint32_t k = order_key(to_f(lg[i]));
            gt += k > kappa;
            ties += k == kappa;
        }
        const int need = a.top_k - block_sum(gt, ired);  // >= 1 ties to keep
        ipart[tid] = ties;
        __syncthreads();
        int before = 0;
        for (int t = 0; t < tid; t++) before += ipart[t];
        if (before < need && before + ties >= need) {  // this chunk holds the need-th tie
            int c = before;
            for (int i = i0; i < i1; i++)
                if (order_key(to_f(lg[i])) == kappa && ++c == need) {
                    found = i;
                    break;
                }
        }
        __syncthreads();
        idcut = found;
    }

    // weights of the candidates, their sum
    double z = 0;
    for (int i = i0; i < i1; i++) {
        const float f = to_f(lg[i]);
        const uint32_t k = order_key(f);
        const bool keep = !topk || k > kappa || (k == kappa && i <= idcut);
        w[i] = keep ? exp(((double)f - lmax) / a.temperature) : 0.0;
        z += w[i];
    }
    double Z = block_sum(z, dred);

    // nucleus: tau = the largest key with sum_{key >= tau} w >= top_p Z
    if (a.top_p < 1) {
        const double need = a.top_p * Z;
        uint64_t lo = 0, hi = 0xffffffffu;
        while (lo < hi) {
            const uint64_t mid = (lo + hi + 1) / 2;
            double s = 0;
            for (int i = i0; i < i1; i++)
                if (order_key(to_f(lg[i])) >= (uint32_t)mid) s += w[i];
            if (block_sum(s, dred) >= need) lo = mid;
            else hi = mid - 1;
        }
        z = 0;
        for (int i = i0; i < i1; i++) {
            if (order_key(to_f(lg[i])) < (uint32_t)lo) w[i] = 0;
            z += w[i];
        }
        Z = block_sum(z, dred);
    }

    // draw: the chunk where the running sum passes u Z, then the id inside it
    const double target = uniform_at(a.key, (uint64_t)(uint32_t)row << 32 | (uint32_t)t) * Z;
    int last = -1;
    for (int i = i0; i < i1; i++)
        if (w[i] > 0) last = i;
    part[tid] = z;
    ipart[tid] = last;
    __syncthreads();
    if (tid == 0) {
        double acc = 0;
        int t = 0, lastall = bi;
        for (int j = 0; j < SAMPLE_THREADS; j++)
            if (ipart[j] >= 0) lastall = ipart[j];
        for (; t < SAMPLE_THREADS; t++) {
            if (acc + part[t] > target) break;
            acc += part[t];
        }
        found = lastall;
        part[0] = acc;  // the sum before chunk t (read by chunk t only)
        ipart[0] = t;   // SAMPLE_THREADS: rounding left the total <= target
    }
    __syncthreads();
    const int tstar = ipart[0];
    if (tid == tstar) {
        double acc = part[0];
        for (int i = i0; i < i1; i++) {
            if (w[i] == 0) continue;
            acc += w[i];
            if (acc > target) {
                emit(a, row, t, i);
                return;
            }
        }
        emit(a, row, t, last);  // rounding: the walk ended at the chunk's sum
    } else if (tid == 0 && tstar == SAMPLE_THREADS) {
        emit(a, row, t, found);
    }
}

}  // namespace

extern "C" void cuda_sample_tokens(cuda_dtype dt, int32_t *out, const void *logits, int rows,
                                   int V, const sample_params *p, uint64_t key, const int *pos,
                                   int32_t *trace, int trace_ld, double *w, int *bad,
                                   cudaStream_t s) {
    if (rows <= 0) return;
    if (V < 1) gdn_die("cuda_sample_tokens: vocabulary %d < 1", V);
    sample_args a = {out, logits, w, bad, pos, trace, trace_ld, V, p->top_k, p->temperature,
                     p->top_p, key};
    CUDA_DT_SWITCH(dt, E, sample_kernel<E><<<rows, SAMPLE_THREADS, 0, s>>>(a));
    CUDA_CHECK_LAUNCH();
}
