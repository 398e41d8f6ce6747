// gated_rmsnorm.cu — CUDA backward of the gated RMSNorm per head row (twin of
// src/bwd/gated_rmsnorm.c), r the saved rstd, s = sigmoid(z):
//   q = silu(z) = z s,  u = dy w q;   dx = r u - (r^3/D) x sum(u x)
//   dz = dy x r w silu'(z),  silu'(z) = s (1 + z (1 - s));   dw += sum_rows dy x r q
//   (z NULL: q := 1 and no dz)
// Gradient rule (src/bwd/bwd_cpu.h): activation gradients (T) are overwritten, parameter
// gradients (fp32) ACCUMULATE (+=).
// z's and dz's row r at (r / zh) zld + (r % zh) D (zh = 1, zld = D: packed).
// Kernels, one result: the narrow-row kernel (one 16-byte pack a lane, with z, distinct buffers:
// the model's), else the fused kernel (16-byte packs, up to 4 a lane: dx and the dw partials in
// one pass, cuda/norm.cuh) with colsum_final_dw, else one warp per row for dx and colsum_launch
// for dw (cuda/colsum.cuh).
// With y (train.recompute = light) the kernels also store the forward's y = gated_rmsnorm_y from
// the x, w, z they load anyway, bitwise the forward kernels'; a template flag (Y) adds the store,
// so instances without it carry none.
#include "../cuda/norm.cuh"
#include "../cuda/ops_testing.h"

namespace {

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

// The narrow-row kernel: gated_rmsnorm_bwd_fused_kernel<T, W, 1, Y> with z (the model's rows: one
// 16-byte pack a lane), in fewer instructions a row (SASS, bf16 D 256 with y: ~360 a warp-row
// against the fused kernel's ~497; bench/model_gpu.md).
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
// (gated_bwd_disjoint). ptxas (sm_90a, bf16, Y): 64 registers, no spill. Loading the next row's
// x, dy, z and rstd before computing this row gains nothing (norm_bench 130.0 vs 130.1 us) and
// spills 20 / 24 bytes.
template <typename T, int W, bool Y>
__global__ void __launch_bounds__(ROW_THREADS, 4) gated_rmsnorm_bwd_narrow_kernel(const norm_bwd_params<T> p) {
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
    // the row's packs and rstd: row r0's here, the later rows' at the top of the loop
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

// The narrow-row backward runs only where no output (dx, dz, y) shares a byte with an input (x,
// dy, z, w, rstd) or with another output: it reads its inputs once (w once a warp), where the
// fused kernel reads x, dy, w, z again after storing y, so over shared bytes the two could
// differ. The model's buffers are distinct; in place, the fused kernel runs.
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
            norm_bwd_fused_launch<T>(gated_rmsnorm_bwd_narrow_kernel<T, W, Y>, p, dw, s);
            gated_rmsnorm_narrow_count();
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

}  // namespace

extern "C" {

void cuda_gated_rmsnorm_bwd(cuda_dtype dt, void *dx, void *dz, float *dw, void *y, const void *dy, const void *x,
                            const void *z, const void *w, const float *rstd, size_t rows, int D, int zh,
                            size_t zld, cudaStream_t s) {
    if (rows == 0 || D <= 0) return;
    CUDA_DT_SWITCH(dt, T,
                   gated_rmsnorm_bwd_launch<T>({(T *)dx, (T *)dz, (T *)y, (const T *)dy, (const T *)x, (const T *)z,
                                                (const T *)w, rstd, nullptr, rows, D, 0, false, zh, zld},
                                               dw, s));
}

}  // extern "C"
