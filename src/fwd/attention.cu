// attention.cu — forward of causal sliding-window softmax attention (see attention_cuda.h).
// bf16: flash-attention 2 scheme. One CTA of 4 warps owns BQ = 128 query rows of one (b, h);
// each warp owns 32 rows (two m16 tiles, so every K/V fragment read from shared memory feeds
// two mma). The CTA walks the key blocks of BK = 64 that intersect the window, from the
// diagonal block down to the block holding key i - window + 1; blocks outside are not visited.
// Per block: S = Q K^T (mma), mask only on blocks that straddle an edge, online softmax in the
// log2 domain (p = 2^(s c2 - m c2), c2 = scale log2 e, one FFMA + MUFU.EX2 per score; m running
// max of the raw scores, l running sum), O = O * 2^(c2 (m_old - m_new)) + P V (mma, P rounded to
// bf16 in registers). K/V tiles are double-buffered with cp.async, K and V in separate groups:
// S waits only for K, and V (waited for, plus a barrier, just before P V) lands while S and the
// softmax run. At D = 128 this also removed 48 bytes of register spill (255 registers, 0 spill).
// Saved for the backward: lse_i = ln 2 * (m_i + log2 l_i) (attention_bwd recomputes P from it).
// fp32: one warp per query row, 32 keys at a time (lane = key for the scores, lane = head
// dim for the output), plain fp32 FMA and expf: slower, exact to ~1e-6.
#include "../core/cuda_check.h"
#define ATTN_DEVICE_HELPERS
#include "attention_cuda.h"
#include <math.h>

namespace {

// RW = 32 rows per warp (two m16 tiles share each K/V fragment), 4 warps. Measured against
// RW = 16 (8 warps, 128 registers): 2.16 ms vs 2.42 ms at B8 T4096 H16 D128 causal (bench/attention.md).
constexpr int FWD_BQ = 128, FWD_BK = 64, FWD_RW = 32, FWD_WARPS = FWD_BQ / FWD_RW, FWD_THREADS = FWD_WARPS * 32;

struct fwd_kparams {
    int B, T, H, window;  // window already clamped to <= T
    float scale_log2;     // scale * log2 e
    const __nv_bfloat16 *q, *k, *v;
    __nv_bfloat16 *o;
    float *lse;
};

template <int D>
constexpr int fwd_smem_bytes() {
    return (FWD_BQ * D + 4 * FWD_BK * D) * 2;  // Q + 2 x (K, V)
}

// grid (ceil(T/BQ), H, B); heaviest (last) query blocks first under causal masking.
template <int D>
__global__ void __launch_bounds__(FWD_THREADS, 2) attention_fwd_kernel(const __grid_constant__ fwd_kparams p) {
    constexpr int MT = FWD_RW / 16, NT = FWD_THREADS, RW = FWD_RW;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem_raw);  // (BQ, D)
    __nv_bfloat16 *Ks = Qs + FWD_BQ * D;                               // 2 x (BK, D)
    __nv_bfloat16 *Vs = Ks + 2 * FWD_BK * D;                           // 2 x (BK, D)

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int m = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int T = p.T, H = p.H, W = p.window;
    const float c2 = p.scale_log2;
    const int q0 = m * FWD_BQ;
    // key blocks that intersect the window of some row in [q0, q0 + BQ)
    const int j_hi = min(T - 1, q0 + FWD_BQ - 1);
    const int j_lo = max(0, q0 - W + 1);
    const int n_hi = j_hi / FWD_BK, n_lo = j_lo / FWD_BK;

    attn_load_tile<FWD_BQ, D, NT>(Qs, p.q, b, h, q0, T, H, tid);
    attn_load_tile<FWD_BK, D, NT>(Ks, p.k, b, h, n_hi * FWD_BK, T, H, tid);
    attn_cp_async_commit();  // group: Q, K
    attn_load_tile<FWD_BK, D, NT>(Vs, p.v, b, h, n_hi * FWD_BK, T, H, tid);
    attn_cp_async_commit();  // group: V

    float acc[MT][D / 8][4];  // O, rows (mt*16 + g, +8) of this warp, cols dt*8 + 2t, +1
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][dt][e] = 0.f;
    // [mt][row g / g+8]: running max of the raw scores, partial (per-thread) running sum
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) mrow[mt][r] = -INFINITY, lrow[mt][r] = 0.f;

    const int wrow0 = warp * RW;  // first row of this warp inside the tile
    const uint32_t qs_base = gdnk::smem_u32(Qs);

    for (int n = n_hi, it = 0; n >= n_lo; n--, it++) {
        // pending groups: K_n, V_n (oldest first)
        attn_cp_async_wait<1>();
        __syncthreads();  // K tile n visible; every warp is done with buffers (it+1)&1
        const bool pre = n > n_lo;
        if (pre) {
            const int nb = (it + 1) & 1;
            attn_load_tile<FWD_BK, D, NT>(Ks + nb * FWD_BK * D, p.k, b, h, (n - 1) * FWD_BK, T, H, tid);
            attn_cp_async_commit();
            attn_load_tile<FWD_BK, D, NT>(Vs + nb * FWD_BK * D, p.v, b, h, (n - 1) * FWD_BK, T, H, tid);
            attn_cp_async_commit();
        }
        const __nv_bfloat16 *Kb = Ks + (it & 1) * FWD_BK * D;
        const __nv_bfloat16 *Vb = Vs + (it & 1) * FWD_BK * D;
        const uint32_t ks_base = gdnk::smem_u32(Kb), vs_base = gdnk::smem_u32(Vb);

        // S = Q K^T : (RW x BK) per warp
        float s[MT][FWD_BK / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < FWD_BK / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][nt][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                gdnk::ldsm4(a[mt], qs_base + 2 * attn_swz<D>(wrow0 + mt * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int np = 0; np < FWD_BK / 16; np++) {
                uint32_t bf[4];
                gdnk::ldsm4(bf, ks_base + 2 * attn_swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                            kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    attn_mma(s[mt][2 * np], a[mt], bf[0], bf[1]);
                    attn_mma(s[mt][2 * np + 1], a[mt], bf[2], bf[3]);
                }
            }
        }

        // mask (raw scores -> -inf) only on blocks that straddle the diagonal or the window edge
        const int k0 = n * FWD_BK;
        if ((k0 + FWD_BK - 1 > q0) || (k0 <= q0 + FWD_BQ - 1 - W)) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < FWD_BK / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = q0 + wrow0 + mt * 16 + g + ((e >> 1) << 3);
                        const int j = k0 + nt * 8 + 2 * t4 + (e & 1);
                        if (j > i || j <= i - W) s[mt][nt][e] = -INFINITY;
                    }
        }

        // online softmax per row: p = 2^(s c2 - m c2) with one FFMA, O and l rescaled
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = mrow[mt][r];
#pragma unroll
                for (int nt = 0; nt < FWD_BK / 8; nt++)
                    mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float ms = mx == -INFINITY ? 0.f : mx * c2;  // fully masked so far: p = 0
                const float corr = attn_ex2(mrow[mt][r] * c2 - ms);
                mrow[mt][r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < FWD_BK / 8; nt++) {
                    const float p0 = attn_ex2(fmaf(s[mt][nt][2 * r], c2, -ms));
                    const float p1 = attn_ex2(fmaf(s[mt][nt][2 * r + 1], c2, -ms));
                    s[mt][nt][2 * r] = p0;
                    s[mt][nt][2 * r + 1] = p1;
                    sum += p0 + p1;
                }
                lrow[mt][r] = lrow[mt][r] * corr + sum;
#pragma unroll
                for (int dt = 0; dt < D / 8; dt++) {
                    acc[mt][dt][2 * r] *= corr;
                    acc[mt][dt][2 * r + 1] *= corr;
                }
            }

        // pending groups: V_n (, K_n-1, V_n-1)
        if (pre) attn_cp_async_wait<2>();
        else attn_cp_async_wait_all();
        __syncthreads();  // V tile n visible
        // O += P V; P's C-fragments of key tiles 2kk, 2kk+1 are the A-fragment of k-step kk
#pragma unroll
        for (int kk = 0; kk < FWD_BK / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = gdnk::pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = gdnk::pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = gdnk::pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = gdnk::pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t bf[4];
                gdnk::ldsm4t(bf, vs_base + 2 * attn_swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                              dp * 16 + (lane >> 4) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    attn_mma(acc[mt][2 * dp], a[mt], bf[0], bf[1]);
                    attn_mma(acc[mt][2 * dp + 1], a[mt], bf[2], bf[3]);
                }
            }
        }
    }

    // epilogue: o = O / l (bf16, staged through this warp's own Q rows), lse = ln2 (m c2 + log2 l)
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = lrow[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int row = wrow0 + mt * 16 + g + r * 8;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++)
                *reinterpret_cast<uint32_t *>(Qs + attn_swz<D>(row, dt * 8 + 2 * t4)) =
                    gdnk::pack_bf16(acc[mt][dt][2 * r] * inv, acc[mt][dt][2 * r + 1] * inv);
            const int i = q0 + row;
            if (t4 == 0 && i < T)
                p.lse[((size_t)b * H + h) * T + i] = ATTN_LN2 * (mrow[mt][r] * c2 + log2f(l));
        }
    __syncwarp();
    constexpr int CPR = D / 8;
#pragma unroll
    for (int c = lane; c < RW * CPR; c += 32) {
        const int row = wrow0 + c / CPR, ch = c % CPR, i = q0 + row;
        if (i < T)
            *reinterpret_cast<uint4 *>(p.o + (((size_t)b * T + i) * H + h) * D + ch * 8) =
                *reinterpret_cast<const uint4 *>(Qs + attn_swz<D>(row, ch * 8));
    }
}

// fp32: one warp per query row (b, i, h); 4 warps per block.
template <int D>
__global__ void __launch_bounds__(128) attention_fwd_f32_kernel(int B, int T, int H, int W, float scale,
                                                                const float *__restrict__ q,
                                                                const float *__restrict__ k,
                                                                const float *__restrict__ v,
                                                                float *__restrict__ o,
                                                                float *__restrict__ lse) {
    __shared__ float qs[4][D];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long row = (long)blockIdx.x * 4 + warp;  // (b*T + i)*H + h
    if (row >= (long)B * T * H) return;
    const int h = (int)(row % H), i = (int)((row / H) % T), b = (int)(row / ((long)H * T));
    const size_t rs = (size_t)H * D;
    const float *qi = q + (size_t)row * D;
    for (int e = lane; e < D; e += 32) qs[warp][e] = qi[e];
    __syncwarp();
    const float *kb = k + (size_t)b * T * rs + (size_t)h * D;
    const float *vb = v + (size_t)b * T * rs + (size_t)h * D;
    float acc[D / 32];
#pragma unroll
    for (int r = 0; r < D / 32; r++) acc[r] = 0.f;
    float mrun = -INFINITY, l = 0.f;
    const int jlo = max(0, i - W + 1);
    for (int j0 = jlo; j0 <= i; j0 += 32) {
        const int j = j0 + lane;
        float s = -INFINITY;
        if (j <= i) {
            const float4 *kr = reinterpret_cast<const float4 *>(kb + (size_t)j * rs);
            float d = 0.f;
#pragma unroll 8
            for (int e = 0; e < D / 4; e++) {
                const float4 kv = kr[e];
                d += qs[warp][4 * e] * kv.x + qs[warp][4 * e + 1] * kv.y + qs[warp][4 * e + 2] * kv.z +
                     qs[warp][4 * e + 3] * kv.w;
            }
            s = d * scale;
        }
        float mx = s;
#pragma unroll
        for (int o2 = 16; o2; o2 >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
        const float m_new = fmaxf(mrun, mx);  // finite: key j0 <= i is always visible
        const float corr = expf(mrun - m_new);
        const float pj = j <= i ? expf(s - m_new) : 0.f;
        float ps = pj;
#pragma unroll
        for (int o2 = 16; o2; o2 >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o2);
        l = l * corr + ps;
        mrun = m_new;
#pragma unroll
        for (int r = 0; r < D / 32; r++) acc[r] *= corr;
        const int nj = min(32, i - j0 + 1);
        for (int jj = 0; jj < nj; jj++) {
            const float pb = __shfl_sync(0xffffffffu, pj, jj);
            const float *vr = vb + (size_t)(j0 + jj) * rs;
#pragma unroll
            for (int r = 0; r < D / 32; r++) acc[r] += pb * vr[lane + 32 * r];
        }
    }
    float *oi = o + (size_t)row * D;
#pragma unroll
    for (int r = 0; r < D / 32; r++) oi[lane + 32 * r] = acc[r] / l;
    if (lane == 0) lse[((size_t)b * H + h) * T + i] = mrun + logf(l);
}

template <int D>
void attention_fwd_launch_bf16(const attn_params *p, int W) {
    fwd_kparams kp;
    kp.B = p->B; kp.T = p->T; kp.H = p->H; kp.window = W;
    kp.scale_log2 = p->scale * ATTN_LOG2E;
    kp.q = static_cast<const __nv_bfloat16 *>(p->q);
    kp.k = static_cast<const __nv_bfloat16 *>(p->k);
    kp.v = static_cast<const __nv_bfloat16 *>(p->v);
    kp.o = static_cast<__nv_bfloat16 *>(p->o);
    kp.lse = p->lse;
    constexpr int smem = fwd_smem_bytes<D>();
    CUDA_CHECK(cudaFuncSetAttribute(attention_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    dim3 grid(GDN_CDIV(p->T, FWD_BQ), p->H, p->B);
    attention_fwd_kernel<D><<<grid, FWD_THREADS, smem, p->stream>>>(kp);
    CUDA_CHECK_LAUNCH();
}

template <int D>
void attention_fwd_launch_f32(const attn_params *p, int W) {
    const long rows = (long)p->B * p->T * p->H;
    attention_fwd_f32_kernel<D><<<(unsigned)GDN_CDIV(rows, 4), 128, 0, p->stream>>>(
        p->B, p->T, p->H, W, p->scale, static_cast<const float *>(p->q), static_cast<const float *>(p->k),
        static_cast<const float *>(p->v), static_cast<float *>(p->o), p->lse);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" void attention_fwd(const attn_params *p) {
    attn_check_common(p, "attention_fwd");
    attn_check_ptr(p->q, "q", "attention_fwd");
    attn_check_ptr(p->k, "k", "attention_fwd");
    attn_check_ptr(p->v, "v", "attention_fwd");
    attn_check_ptr(p->o, "o", "attention_fwd");
    attn_check_ptr(p->lse, "lse", "attention_fwd");
    if (p->H > 65535 || p->B > 65535) gdn_die("attention_fwd: B %d / H %d exceed the grid", p->B, p->H);
    const int W = p->window < p->T ? p->window : p->T;
    const bool bf16 = p->dtype == ATTN_DTYPE_BF16;
    switch (p->D) {
    case 64: bf16 ? attention_fwd_launch_bf16<64>(p, W) : attention_fwd_launch_f32<64>(p, W); break;
    case 128: bf16 ? attention_fwd_launch_bf16<128>(p, W) : attention_fwd_launch_f32<128>(p, W); break;
    default: gdn_die("attention_fwd: head dim %d not supported", p->D);
    }
}
