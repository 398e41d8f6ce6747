// test_cuda_ops.cu — every launcher of src/cuda/ops.h, and the cuBLASLt linear layer of
// src/cuda/gemm.h, against its float64 CPU twin (src/fwd/*.c, src/bwd/*.c,
// backend_cpu's AdamW), in fp32 and bf16.
// Inputs are random (normal, never 0) and rounded once to the storage type, so the oracle and
// the GPU see the same values; saved statistics fed to a backward (rstd, rnorm) are the
// oracle's, rounded to fp32, on both sides. Every output is NaN-filled before each run.
// Pass (relative L2 error, ||got - want|| / ||want||):
//   * fp32 outputs (fp32 activations, and the fp32 statistics, gates, losses and parameter
//     gradients of both modes) <= 1e-5: the same maths in fp32 arithmetic, whose rounding
//     (2^-24 ~ 6e-8 per operation) stays far below it;
//   * bf16 outputs <= 1e-2: the fp32 result is rounded once to bf16 (8 significant bits, unit
//     roundoff 2^-8 ~ 3.9e-3 relative per element, ~2.3e-3 RMS over many elements), so 1e-2
//     leaves a factor ~4 over one rounding and fails any extra error of that size;
//   * cuda_sumsq_f32 (fp64 accumulation of exact squares) <= 1e-10 (n 2^-53 for n = 3e5).
// Also checked: parameter gradients accumulate (two calls give init + 2 G), dropout masks
// equal the CPU's element for element, the fused residual add + RMSNorm is bitwise the unfused
// add and RMSNorm kernels, cross-entropy at V = 50304 (16-byte path) and 50257 (scalar path)
// with ignored rows, embedding backward with repeated tokens, unaligned pointers (scalar
// paths), RoPE at t up to 4095 and in place, AdamW in fp32 and master-weight modes, every
// reduction-bearing op run twice gives bitwise equal outputs, and the extra outputs of the
// RMSNorm, gated RMSNorm and SwiGLU backwards (train.recompute = light) are bitwise the forward
// kernels' outputs on the same inputs, the backwards' other outputs bitwise as without them.
// Every conv_silu row also checks which kernel ran (the launch counters of cuda/ops_testing.h):
// a ring kernel (one token stream per warp out of a cp.async ring) for the tiled forward with the
// L2 norm and the tiled backward with packs of 4 channels, none for the plain forward (the
// register-window tiled kernel), the backward's staged kernel and the untiled fallbacks (group
// conv_silu_ring adds the model's shape and the ring kernels' edge cases). Likewise every
// gated_rmsnorm row for the narrow-row gated RMSNorm forward and backward (group
// gated_rmsnorm_narrow adds the model's shape and odd row counts with the strided z).
// Usage: test_cuda_ops [GROUP_SUBSTRING]: with an argument, only the test groups whose name
// contains it run (e.g. "linear" for the GEMM rows); the suite runs them all.
// Exit 77 (skipped) without a GPU.
#include "gputest.h"
#include <cmath>
#include <functional>
#include <vector>
#include <algorithm>
#include <string>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "../../src/bwd/bwd_cpu.h"
#include "../../src/model/backend.h"
}
#include "../../src/fwd/cpu_threads.h"
#include "../../src/cuda/ops.h"
#include "../../src/cuda/ops_testing.h"
#include "../../src/cuda/gemm.h"

#include "op_buffers.h"

// ---- the table ---------------------------------------------------------------------------------
static void row(const char *op, const char *dt, const char *what, double err, double tol) {
    const bool ok = err <= tol && std::isfinite(err);
    printf("%-38s %-5s %-26s %11.3e %9.1e  %s\n", op, dt, what, err, tol, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}
static void row_bool(const char *op, const char *dt, const char *what, bool ok) {
    printf("%-38s %-5s %-26s %11s %9s  %s\n", op, dt, what, ok ? "equal" : "DIFFER", "bitwise", ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}

// One output of an op. init empty: overwritten (=), NaN-filled before each run, compared with
// want. init set: an accumulating (+=) parameter gradient set to init before the run; want is
// init + G after one call, want2 init + 2G after a second call.
struct out_check {
    const char *name;
    dten t;
    vec want, init, want2;
};

// Run fn and check every output; a second call checks accumulation; with `reduction`, a third
// run from the same state must reproduce the first run's bytes.
static void run_checks(const char *op, cuda_dtype dt, const std::function<void()> &fn,
                       const std::vector<out_check> &outs, bool reduction) {
    auto prep = [&]() {
        for (auto &o : outs) {
            if (o.init.empty())
                poison(o.t);
            else
                upload(o.t, o.init);
        }
    };
    prep();
    fn();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::vector<unsigned char>> first;
    bool acc = false;
    for (auto &o : outs) {
        row(op, dtn(dt), o.name, rel_l2(download(o.t).data(), o.want.data(), o.t.n), tol_of(o.t.dt));
        first.push_back(raw(o.t));
        acc |= !o.init.empty();
    }
    if (acc) {
        for (auto &o : outs)
            if (o.init.empty()) poison(o.t);
        fn();
        CUDA_CHECK(cudaDeviceSynchronize());
        for (auto &o : outs)
            if (!o.init.empty()) {
                char what[64];
                snprintf(what, sizeof what, "%s (+= twice)", o.name);
                row(op, dtn(dt), what, rel_l2(download(o.t).data(), o.want2.data(), o.t.n), tol_of(o.t.dt));
            }
    }
    if (reduction) {
        prep();
        fn();
        CUDA_CHECK(cudaDeviceSynchronize());
        bool same = true;
        for (size_t i = 0; i < outs.size(); i++) same = same && raw(outs[i].t) == first[i];
        row_bool(op, dtn(dt), "two runs", same);
    }
}

// train.recompute = light: a backward's extra output (the forward's y or h again). bwd(out) runs
// the backward from the same inputs (it resets its accumulating outputs itself) with the extra
// output `out` or NULL: `out` must be bitwise `fwd` (the forward kernel's output on the same
// inputs), and every other output bitwise the same as without it.
static void check_extra_output(const char *op, cuda_dtype dt, const char *name, const dten &fwd, const dten &out,
                               const std::vector<dten> &others, const std::function<void(void *)> &bwd) {
    auto run = [&](void *extra) {
        for (const dten &o : others) poison(o);
        bwd(extra);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<std::vector<unsigned char>> got;
        for (const dten &o : others) got.push_back(raw(o));
        return got;
    };
    const auto without = run(NULL);
    poison(out);
    const auto with = run(out.d);
    char what[64];
    snprintf(what, sizeof what, "%s = forward's (light)", name);
    row_bool(op, dtn(dt), what, raw(out) == raw(fwd));
    row_bool(op, dtn(dt), "others as without it", with == without);
}

static vec to_f32(const vec &x) {  // what an fp32 statistic holds
    vec y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = (double)(float)x[i];
    return y;
}
static vec plus_twice(vec init, const std::function<void(double *)> &bwd, vec *want2) {
    bwd(init.data());
    *want2 = init;
    bwd(want2->data());
    return init;
}

// ---- ops ---------------------------------------------------------------------------------------
static void test_embedding(cuda_dtype dt, rng_t *r) {
    const int V = 1000;
    const int shapes[2][2] = {{300, 520}, {37, 77}};
    for (auto &sh : shapes) {
        const int N = sh[0], d = sh[1];
        std::vector<int32_t> tok(N);
        for (auto &t : tok) t = (int32_t)rng_below(r, V);
        vec wte = randn(r, (size_t)V * d, 1.0, dt), want((size_t)N * d);
        embedding_fwd_cpu(want.data(), tok.data(), wte.data(), N, d);
        dten dw = dput(wte, dt), out = dempty((size_t)N * d, dt);
        int32_t *dtok = dints(tok);
        char op[64];
        snprintf(op, sizeof op, "embedding_fwd N%d d%d", N, d);
        run_checks(op, dt, [&]() { cuda_embedding_fwd(dt, out.d, dtok, dw.d, N, d, 0); }, {{"out", out, want, {}, {}}},
                   false);
    }
    // backward with repeated tokens: 37 ids for 500 positions
    const int Vs = 37, N = 500, d = 130;
    std::vector<int32_t> tok(N);
    for (auto &t : tok) t = (int32_t)rng_below(r, Vs);
    std::vector<int32_t> order(N), starts, ids;
    for (int i = 0; i < N; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return tok[a] < tok[b]; });
    for (int i = 0; i < N; i++)
        if (i == 0 || tok[order[i]] != tok[order[i - 1]]) {
            starts.push_back(i);
            ids.push_back(tok[order[i]]);
        }
    const int n_unique = (int)ids.size();
    starts.push_back(N);
    vec dout = randn(r, (size_t)N * d, 1.0, dt), init = randn(r, (size_t)Vs * d, 0.1, CUDA_F32), want2;
    vec want = plus_twice(init, [&](double *g) { embedding_bwd_cpu(g, dout.data(), tok.data(), N, d); }, &want2);
    dten ddout = dput(dout, dt), ddw = dempty((size_t)Vs * d, CUDA_F32);
    int32_t *dorder = dints(order), *dstarts = dints(starts), *dids = dints(ids);
    run_checks("embedding_bwd N500 V37 d130", dt,
               [&]() { cuda_embedding_bwd(dt, (float *)ddw.d, ddout.d, dorder, dstarts, dids, n_unique, d, 0); },
               {{"dwte", ddw, want, init, want2}}, true);
}

// Residual add + RMSNorm against the CPU: x_out = the dt rounding of x_in + branch (what cuda_add
// stores), y, rstd = rmsnorm_fwd_cpu of it; then bitwise against the unfused kernels on the same
// inputs (a copy, cuda_add, cuda_rmsnorm_fwd), which the model relies on (recompute_layer redoes
// y, rstd with cuda_rmsnorm_fwd). Shapes: d 1024 at N 777 (the last block part full), also in
// place (x_out == x_in), with every activation pointer one element off 16 bytes (W = 1), and
// with only branch off (packs for x_out, y, w; x_in and branch loaded element by element); odd d
// 100 (bf16 off the pack, fp32 25 packs) and d 77 at N 1, unaligned and in place.
struct add_norm_shape {
    int N, d, off, off_branch;
    bool in_place;
};
static void test_add_rmsnorm(cuda_dtype dt, rng_t *r) {
    const add_norm_shape shapes[] = {{777, 1024, 0, 0, false}, {777, 1024, 0, 0, true}, {777, 1024, 1, 1, false},
                                     {777, 1024, 0, 1, false}, {50, 100, 0, 0, false},  {1, 77, 1, 1, true}};
    for (const add_norm_shape &sh : shapes) {
        const int N = sh.N, d = sh.d;
        const size_t n = (size_t)N * d;
        vec x = randn(r, n, 1.0, dt), b = randn(r, n, 1.0, dt), w = randn(r, d, 0.1, dt, 1.0);
        vec sum(n), y(n), rstd(N);
        for (size_t i = 0; i < n; i++) sum[i] = round_to(x[i] + b[i], dt);  // exact in double, rounded once
        rmsnorm_fwd_cpu(y.data(), rstd.data(), sum.data(), w.data(), N, d, 1e-6);
        dten dxi = dput(x, dt, sh.off), db = dput(b, dt, sh.off_branch), dw_ = dput(w, dt);
        dten dxo = sh.in_place ? dxi : dempty(n, dt, sh.off), dy_ = dempty(n, dt, sh.off);
        dten drs = dempty(N, CUDA_F32);
        auto fused = [&]() {
            if (sh.in_place) upload(dxi, x);  // x_out is x_in: restore it after the poison
            cuda_add_rmsnorm_fwd(dt, dxo.d, dy_.d, (float *)drs.d, dxi.d, db.d, dw_.d, N, d, 1e-6, 0);
        };
        char op[64];
        snprintf(op, sizeof op, "add_rmsnorm_fwd N%d d%d%s%s", N, d,
                 sh.off ? " unal" : sh.off_branch ? " unal-branch" : "", sh.in_place ? " in-place" : "");
        run_checks(op, dt, fused, {{"x_out", dxo, sum, {}, {}}, {"y", dy_, y, {}, {}}, {"rstd", drs, rstd, {}, {}}},
                   true);
        row_bool(op, dtn(dt), "x_out = round(x_in + br)", download(dxo) == sum);
        // the unfused kernels: x_out = copy of x_in, += branch, then the RMSNorm of it
        dten uxo = dempty(n, dt, sh.off), uy = dempty(n, dt, sh.off), urs = dempty(N, CUDA_F32);
        upload(uxo, x);
        cuda_add(dt, uxo.d, db.d, n, 0);
        cuda_rmsnorm_fwd(dt, uy.d, (float *)urs.d, uxo.d, dw_.d, N, d, 1e-6, 0);
        fused();
        CUDA_CHECK(cudaDeviceSynchronize());
        row_bool(op, dtn(dt), "= add, rmsnorm_fwd",
                 raw(dxo) == raw(uxo) && raw(dy_) == raw(uy) && raw(drs) == raw(urs));
    }
}

// Backward shapes of both RMSNorms, around the fused kernels' blocking (8 warps per block, 4+
// rows per warp, one partial row of dw per block): rows 1, 7, 8, 9 (one block, idle warps),
// 63, 64, 65, 300, 4099 (last block part full) x d 8 (one pack: lanes idle), 64, 256, 1024 (1 to
// 8 packs per lane; gated fp32 1024: over its 4, two passes), 1000 (125 or 250 packs: the last
// round part idle), 77 (off the pack: two passes); then 70001 rows (16 rows per warp, 547
// blocks, the last one 113 rows), d 2048 (bf16 rmsnorm: 64 KB of shared memory, past the
// default 48; else two passes) and pointers one element off 16 bytes (two passes).
static const int NORM_BWD_ROWS[] = {1, 7, 8, 9, 63, 64, 65, 300, 4099};
static const int NORM_BWD_DIMS[] = {8, 64, 256, 1000, 1024, 77};
struct norm_bwd_shape {
    int rows, d, off;
};
static std::vector<norm_bwd_shape> norm_bwd_shapes() {
    std::vector<norm_bwd_shape> sh;
    for (int rows : NORM_BWD_ROWS)
        for (int d : NORM_BWD_DIMS) sh.push_back({rows, d, 0});
    sh.push_back({70001, 64, 0});
    sh.push_back({70001, 256, 0});
    sh.push_back({300, 2048, 0});
    sh.push_back({65, 64, 1});
    return sh;
}

static void test_rmsnorm(cuda_dtype dt, rng_t *r) {
    const int shapes[2][2] = {{4099, 1000}, {50, 77}};
    for (auto &sh : shapes) {
        const int N = sh[0], d = sh[1];
        const size_t n = (size_t)N * d;
        vec x = randn(r, n, 1.0, dt), w = randn(r, d, 0.1, dt, 1.0), y(n), rstd(N);
        rmsnorm_fwd_cpu(y.data(), rstd.data(), x.data(), w.data(), N, d, 1e-6);
        dten dx_ = dput(x, dt), dw_ = dput(w, dt), dy_ = dempty(n, dt), drstd = dempty(N, CUDA_F32);
        char op[64];
        snprintf(op, sizeof op, "rmsnorm_fwd N%d d%d", N, d);
        run_checks(op, dt, [&]() { cuda_rmsnorm_fwd(dt, dy_.d, (float *)drstd.d, dx_.d, dw_.d, N, d, 1e-6, 0); },
                   {{"y", dy_, y, {}, {}}, {"rstd", drstd, rstd, {}, {}}}, true);
    }
    // backward: dw += onto a random init; acc: dx pre-filled, += the gradient (want: the CPU's
    // prefill + G, then + 2G after the second call)
    for (const norm_bwd_shape &sh : norm_bwd_shapes())
        for (bool acc : {false, true}) {
            const int N = sh.rows, d = sh.d;
            const size_t n = (size_t)N * d, off = sh.off;
            vec x = randn(r, n, 1.0, dt), w = randn(r, d, 0.1, dt, 1.0), y(n), rstd(N);
            rmsnorm_fwd_cpu(y.data(), rstd.data(), x.data(), w.data(), N, d, 1e-6);
            vec g = randn(r, n, 1.0, dt), rs = to_f32(rstd), dxw(n), scratch(d), init = randn(r, d, 0.1, CUDA_F32);
            vec want2, dx_init, dx_want2;
            vec dw = plus_twice(init, [&](double *a) {
                rmsnorm_bwd_cpu(dxw.data(), a, g.data(), x.data(), w.data(), rs.data(), N, d, false);
            }, &want2);
            if (acc) {
                dx_init = randn(r, n, 1.0, dt);
                dxw = plus_twice(dx_init, [&](double *o) {
                    rmsnorm_bwd_cpu(o, scratch.data(), g.data(), x.data(), w.data(), rs.data(), N, d, true);
                }, &dx_want2);
            }
            dten dx_ = dput(x, dt, off), dw_ = dput(w, dt), dg = dput(g, dt, off), drs = dput(rs, CUDA_F32);
            dten ddx = dempty(n, dt, off), ddw = dempty(d, CUDA_F32);
            char op[64];
            snprintf(op, sizeof op, "rmsnorm_bwd N%d d%d acc%d%s", N, d, (int)acc, off ? " unal" : "");
            run_checks(op, dt,
                       [&]() {
                           cuda_rmsnorm_bwd(dt, ddx.d, (float *)ddw.d, NULL, dg.d, dx_.d, dw_.d, (const float *)drs.d,
                                            N, d, acc, 0);
                       },
                       {{"dx", ddx, dxw, dx_init, dx_want2}, {"dw", ddw, dw, init, want2}}, true);
            // train.recompute = light: the extra output y, from the forward kernel's own rstd,
            // bitwise the forward kernel's y (add_rmsnorm_fwd's y is rmsnorm_fwd's: above)
            dten fy = dempty(n, dt, off), frs = dempty(N, CUDA_F32), by = dempty(n, dt, off);
            cuda_rmsnorm_fwd(dt, fy.d, (float *)frs.d, dx_.d, dw_.d, N, d, 1e-6, 0);
            check_extra_output(op, dt, "y", fy, by, {ddx, ddw}, [&](void *yp) {
                if (acc) upload(ddx, dx_init);
                upload(ddw, init);
                cuda_rmsnorm_bwd(dt, ddx.d, (float *)ddw.d, yp, dg.d, dx_.d, dw_.d, (const float *)frs.d, N, d, acc,
                                 0);
            });
        }
}

// Shapes for both kernels: the tiled path (C a multiple of the pack, K <= 4 and K <= 8 variants,
// T = 1, tiles cut mid-sequence, and B4 T4096 C2048 where the backward's tiles grow to fit its
// partials in the scratch) and the per-element fallback (C off the pack, K > 8).
static void test_conv1d(cuda_dtype dt, rng_t *r) {
    const int shapes[][4] = {{3, 67, 200, 4}, {2, 1, 64, 4},   {2, 130, 1024, 4}, {1, 300, 72, 2},
                             {2, 65, 24, 1},  {2, 50, 16, 6},  {1, 40, 37, 3},    {1, 33, 16, 9},
                             {4, 4096, 2048, 4}};
    for (const auto &sh : shapes) {
        const int B = sh[0], T = sh[1], C = sh[2], K = sh[3];
        const size_t n = (size_t)B * T * C;
        char op[64];
        vec x = randn(r, n, 1.0, dt), w = randn(r, (size_t)C * K, 0.5, dt), y(n);
        conv1d_fwd_cpu(y.data(), x.data(), w.data(), B, T, C, K);
        dten dx_ = dput(x, dt), dw_ = dput(w, dt), dy_ = dempty(n, dt);
        snprintf(op, sizeof op, "conv1d_fwd B%d T%d C%d K%d", B, T, C, K);
        run_checks(op, dt, [&]() { cuda_conv1d_fwd(dt, dy_.d, dx_.d, dw_.d, B, T, C, K, NULL, 0); },
                   {{"y", dy_, y, {}, {}}}, false);
        vec g = randn(r, n, 1.0, dt), dxw(n), init = randn(r, (size_t)C * K, 0.1, CUDA_F32), want2;
        vec dw = plus_twice(init, [&](double *acc) {
            conv1d_bwd_cpu(dxw.data(), acc, g.data(), x.data(), w.data(), B, T, C, K);
        }, &want2);
        dten dg = dput(g, dt), ddx = dempty(n, dt), ddw = dempty((size_t)C * K, CUDA_F32);
        snprintf(op, sizeof op, "conv1d_bwd B%d T%d C%d K%d", B, T, C, K);
        run_checks(op, dt,
                   [&]() { cuda_conv1d_bwd(dt, ddx.d, (float *)ddw.d, dg.d, dx_.d, dw_.d, B, T, C, K, NULL, 0); },
                   {{"dx", ddx, dxw, {}, {}}, {"dw", ddw, dw, init, want2}}, true);
    }
}

// fn runs once more, and a ring kernel must have launched (ring) or not: the tiled forward with
// the L2 norm and the tiled backward with packs of 4 channels run a ring kernel; the plain
// forward runs the tiled kernel, the backward with packs of 2 only the staged kernel, every
// untiled call the per-element fallback. Outputs are poisoned or reset to init first.
static void conv_ring_row(const char *op, cuda_dtype dt, const std::function<void()> &fn,
                          const std::vector<out_check> &outs, bool ring) {
    for (const auto &o : outs) {
        if (o.init.empty())
            poison(o.t);
        else
            upload(o.t, o.init);
    }
    const unsigned long n0 = cuda_conv_silu_ring_launches();
    fn();
    CUDA_CHECK(cudaDeviceSynchronize());
    const bool ran = cuda_conv_silu_ring_launches() != n0;
    row_bool(op, dtn(dt), ring ? "ring kernel launched" : "no ring kernel launched", ran == ring);
}
// whether the tiled conv + SiLU kernels take a call: W = 4 (forward) or 2 (backward), x, dx at
// element col + off of a cudaMalloc'd buffer
static bool conv_tiled(int W, const int cw[3], int K, size_t ld, size_t col, size_t off) {
    return cw[0] % W == 0 && cw[1] % W == 0 && cw[2] % W == 0 && ld % W == 0 && col % W == 0 && off == 0 && K <= 4;
}
// whether the ring backward takes a call: the tiled path with packs of 4 (widths, ld and x's
// column on 4 elements)
static bool conv_ring_bwd(const int cw[3], int K, size_t ld, size_t col, size_t off) {
    return conv_tiled(4, cw, K, ld, col, off);
}
// fn once more from the same state (outs poisoned, reset: the accumulating outputs set again),
// and a narrow-row gated norm kernel must have launched (narrow) or not.
static void norm_narrow_row(const char *op, cuda_dtype dt, const std::vector<dten> &outs,
                            const std::function<void()> &reset, const std::function<void()> &fn, bool narrow) {
    for (const dten &o : outs) poison(o);
    reset();
    const unsigned long n0 = cuda_gated_rmsnorm_narrow_launches();
    fn();
    CUDA_CHECK(cudaDeviceSynchronize());
    const bool ran = cuda_gated_rmsnorm_narrow_launches() != n0;
    row_bool(op, dtn(dt), narrow ? "narrow kernel launched" : "no narrow kernel launched", ran == narrow);
}
// whether the narrow-row gated kernels take a call (the launchers' conditions at these tests' buffers:
// distinct, 16-byte aligned unless off, offsets < 2^31): one 16-byte pack a lane at most
static bool norm_narrow_fwd(cuda_dtype dt, int D, size_t zld, size_t off) {
    const int W = dt == CUDA_BF16 ? 8 : 4;
    return off == 0 && D % W == 0 && D <= 32 * W && zld % W == 0;
}
static bool norm_narrow_bwd(cuda_dtype dt, int D, size_t zld, size_t off, bool hz) {
    return hz && norm_narrow_fwd(dt, D, zld, off);
}

// The CPU reference of conv_silu3_bwd: dx (x's columns c0 of rows ld apart, from col) and dw (+=
// into acc) of q, k, v's conv + SiLU from their output gradients g.
static void conv3_bwd_ref(vec &dx, double *acc, const std::vector<vec> &g, const vec &xw,
                          const vec &w, int B, int T, const int cw[3], const int c0[3], int K,
                          size_t ld, size_t col) {
    for (int i = 0; i < 3; i++)
        conv_silu_bwd_cpu(dx.data() + col + c0[i], acc + (size_t)c0[i] * K, g[i].data(),
                          xw.data() + col + c0[i], w.data() + (size_t)c0[i] * K, B, T, cw[i], K, ld);
}

// The CPU reference of conv_silu3_l2 (q, k, v of column widths cw at columns c0 of x's rows, ld
// apart, from column col): y[i] = conv + SiLU, then for q and k the per-head L2 norm (rn: the
// norms' reciprocals) of the fp32 conv output (fused: the in-kernel norm) or of y rounded to dt
// (composed: conv_silu3 stores y, then l2norm_fwd in place).
static void conv3_l2_ref(std::vector<vec> &y, vec rn[2], const vec &xw, const vec &w, cuda_dtype dt,
                         int B, int T, const int cw[3], const int c0[3], int K, size_t ld,
                         size_t col, int nd, double eps, double s0, bool fused) {
    const size_t rows = (size_t)B * T, nh = rows * (cw[0] / nd);
    for (int i = 0; i < 3; i++) {
        y[i].resize(rows * cw[i]);
        conv_silu_fwd_cpu(y[i].data(), xw.data() + col + c0[i], w.data() + (size_t)c0[i] * K, B, T, cw[i], K, ld);
        if (i == 2) continue;
        if (!fused)
            for (double &e : y[i]) e = round_to(e, dt);
        l2norm_fwd_cpu(y[i].data(), rn[i].data(), y[i].data(), nh, nd, eps, i ? 1.0 : s0);
    }
}

// Fused conv1d + SiLU against conv_silu_fwd_cpu / conv_silu_bwd_cpu. Tiled path: C a multiple
// of the pack (8, 24, 512, 1000 with dead lanes in the last block, 1024), K = 1..4, T = 1, 63,
// 64, 65, 300 (tiles of 16 cut mid-sequence, halos across tiles and sequences), and one
// 4 x 2048 x 512 (many blocks of partials); fallback: C = 1001 (off the pack), K = 6 and 9,
// and pointers one element off 16 bytes. The backward runs twice more: dx, dw bitwise the same.
static void test_conv_silu(cuda_dtype dt, rng_t *r) {
    const int shapes[][5] = {  // B, T, C, K, misaligned
        {1, 1, 8, 4, 0},     {2, 63, 24, 3, 0},  {3, 64, 512, 4, 0},  {2, 65, 1024, 4, 0}, {1, 300, 1000, 4, 0},
        {3, 300, 512, 2, 0}, {2, 65, 8, 1, 0},   {1, 63, 1024, 3, 0}, {3, 1, 1024, 2, 0},  {2, 64, 24, 4, 0},
        {2, 300, 1001, 4, 0}, {2, 65, 24, 6, 0}, {1, 63, 1000, 9, 0}, {2, 65, 512, 4, 1},  {4, 2048, 512, 4, 0}};
    for (const auto &sh : shapes) {
        const int B = sh[0], T = sh[1], C = sh[2], K = sh[3];
        const size_t n = (size_t)B * T * C, off = sh[4];
        char op[64];
        vec x = randn(r, n, 1.0, dt), w = randn(r, (size_t)C * K, 0.5, dt), y(n);
        conv_silu_fwd_cpu(y.data(), x.data(), w.data(), B, T, C, K, C);
        dten dx_ = dput(x, dt, off), dw_ = dput(w, dt), dy_ = dempty(n, dt, off);
        snprintf(op, sizeof op, "conv_silu_fwd B%d T%d C%d K%d%s", B, T, C, K, off ? " unal" : "");
        run_checks(op, dt, [&]() { cuda_conv_silu_fwd(dt, dy_.d, dx_.d, dw_.d, B, T, C, K, C, NULL, 0); },
                   {{"y", dy_, y, {}, {}}}, false);
        const int cw1[3] = {C, 0, 0};
        conv_ring_row(op, dt, [&]() { cuda_conv_silu_fwd(dt, dy_.d, dx_.d, dw_.d, B, T, C, K, C, NULL, 0); },
                     {{"y", dy_, y, {}, {}}}, false);
        vec g = randn(r, n, 1.0, dt), dxw(n), init = randn(r, (size_t)C * K, 0.1, CUDA_F32), want2;
        vec dw = plus_twice(init, [&](double *acc) {
            conv_silu_bwd_cpu(dxw.data(), acc, g.data(), x.data(), w.data(), B, T, C, K, C);
        }, &want2);
        dten dg = dput(g, dt, off), ddx = dempty(n, dt, off), ddw = dempty((size_t)C * K, CUDA_F32);
        snprintf(op, sizeof op, "conv_silu_bwd B%d T%d C%d K%d%s", B, T, C, K, off ? " unal" : "");
        run_checks(op, dt,
                   [&]() { cuda_conv_silu_bwd(dt, ddx.d, (float *)ddw.d, dg.d, dx_.d, dw_.d, B, T, C, K, C, NULL, 0); },
                   {{"dx", ddx, dxw, {}, {}}, {"dw", ddw, dw, init, want2}}, true);
        conv_ring_row(op, dt,
                     [&]() { cuda_conv_silu_bwd(dt, ddx.d, (float *)ddw.d, dg.d, dx_.d, dw_.d, B, T, C, K, C, NULL, 0); },
                     {{"dx", ddx, dxw, {}, {}}, {"dw", ddw, dw, init, want2}}, conv_ring_bwd(cw1, K, C, 0, off));
    }
    // strided x and dx (the model's fused input projection): columns [col, col + C) of rows of
    // ld; dx's other columns hold random values that must stay. fla-220m's q (ld 3080, col 0)
    // and v (C 1024, col 1024) on the tiled path, and an ld off the pack (fallback path); rows
    // off 16 bytes: x at col 2 (the backward's staged kernel stages by packs instead of 16 bytes;
    // the forward falls back) and an ld of 44 (the plain tiled forward, bf16).
    const int strided[][7] = {  // B, T, C, K, ld, col
        {2, 300, 512, 4, 3080, 0, 0}, {1, 65, 1024, 4, 3080, 1024, 0}, {2, 63, 24, 3, 37, 5, 0},
        {2, 63, 24, 3, 38, 2, 0},     {2, 65, 40, 4, 44, 4, 0}};
    for (const auto &sh : strided) {
        const int B = sh[0], T = sh[1], C = sh[2], K = sh[3];
        const size_t ld = sh[4], col = sh[5], rows = (size_t)B * T, n = rows * C, nw = rows * ld;
        char op[96];
        vec xw = randn(r, nw, 1.0, dt), w = randn(r, (size_t)C * K, 0.5, dt), y(n);
        conv_silu_fwd_cpu(y.data(), xw.data() + col, w.data(), B, T, C, K, ld);
        dten dxw_ = dput(xw, dt), dw_ = dput(w, dt), dy_ = dempty(n, dt);
        const void *xp = (const char *)dxw_.d + col * esz(dt);
        snprintf(op, sizeof op, "conv_silu_fwd B%d T%d C%d K%d ld%zu", B, T, C, K, ld);
        run_checks(op, dt, [&]() { cuda_conv_silu_fwd(dt, dy_.d, xp, dw_.d, B, T, C, K, ld, NULL, 0); },
                   {{"y", dy_, y, {}, {}}}, false);
        const int cw1[3] = {C, 0, 0};
        conv_ring_row(op, dt, [&]() { cuda_conv_silu_fwd(dt, dy_.d, xp, dw_.d, B, T, C, K, ld, NULL, 0); },
                     {{"y", dy_, y, {}, {}}}, false);
        vec g = randn(r, n, 1.0, dt), dx_init = randn(r, nw, 1.0, dt), dx_want = dx_init;
        vec init = randn(r, (size_t)C * K, 0.1, CUDA_F32), want2;
        vec dw = plus_twice(init, [&](double *acc) {
            conv_silu_bwd_cpu(dx_want.data() + col, acc, g.data(), xw.data() + col, w.data(), B, T, C, K, ld);
        }, &want2);
        dten dg = dput(g, dt), ddxw = dempty(nw, dt), ddw = dempty((size_t)C * K, CUDA_F32);
        snprintf(op, sizeof op, "conv_silu_bwd B%d T%d C%d K%d ld%zu", B, T, C, K, ld);
        run_checks(op, dt,
                   [&]() {
                       cuda_conv_silu_bwd(dt, (char *)ddxw.d + col * esz(dt), (float *)ddw.d, dg.d, xp, dw_.d, B, T,
                                          C, K, ld, NULL, 0);
                   },
                   {{"dx|rest", ddxw, dx_want, dx_init, dx_want}, {"dw", ddw, dw, init, want2}}, true);
        conv_ring_row(op, dt,
                     [&]() {
                         cuda_conv_silu_bwd(dt, (char *)ddxw.d + col * esz(dt), (float *)ddw.d, dg.d, xp, dw_.d, B,
                                            T, C, K, ld, NULL, 0);
                     },
                     {{"dx|rest", ddxw, dx_want, dx_init, dx_want}, {"dw", ddw, dw, init, want2}},
                     conv_ring_bwd(cw1, K, ld, col, 0));
    }
    // conv_silu3: q, k, v (C0 + C1 + C2 channels of strided rows) in one call, outputs and output
    // gradients in three packed buffers: against the CPU per range, and bitwise against three
    // cuda_conv_silu calls. fla-220m's shape (tiled), a small tiled one, one off the pack.
    const int three[][8] = {  // B, T, C0, C1, C2, K, ld, col
        {2, 300, 512, 512, 1024, 4, 3080, 0}, {2, 63, 8, 8, 16, 4, 40, 4}, {2, 65, 12, 8, 20, 3, 45, 3}};
    for (const auto &sh : three) {
        const int B = sh[0], T = sh[1], K = sh[5], cw[3] = {sh[2], sh[3], sh[4]}, C = cw[0] + cw[1] + cw[2];
        const size_t ld = sh[6], col = sh[7], rows = (size_t)B * T, nw = rows * ld, es = esz(dt);
        const int c0[3] = {0, cw[0], cw[0] + cw[1]};
        char op[96];
        vec xw = randn(r, nw, 1.0, dt), w = randn(r, (size_t)C * K, 0.5, dt);
        std::vector<vec> y(3), g(3);
        for (int i = 0; i < 3; i++) {
            y[i].resize(rows * cw[i]);
            conv_silu_fwd_cpu(y[i].data(), xw.data() + col + c0[i], w.data() + (size_t)c0[i] * K, B, T, cw[i], K, ld);
            g[i] = randn(r, rows * cw[i], 1.0, dt);
        }
        dten dxw_ = dput(xw, dt), dw_ = dput(w, dt);
        dten dy0 = dempty(rows * cw[0], dt), dy1 = dempty(rows * cw[1], dt), dy2 = dempty(rows * cw[2], dt);
        const char *xp = (const char *)dxw_.d + col * es;
        snprintf(op, sizeof op, "conv_silu3_fwd B%d T%d C%d+%d+%d K%d ld%zu", B, T, cw[0], cw[1], cw[2], K, ld);
        auto fwd3 = [&]() {
            cuda_conv_silu3_fwd(dt, dy0.d, dy1.d, dy2.d, xp, dw_.d, B, T, cw[0], cw[1], cw[2], K, ld, NULL, 0);
        };
        run_checks(op, dt, fwd3, {{"y0", dy0, y[0], {}, {}}, {"y1", dy1, y[1], {}, {}}, {"y2", dy2, y[2], {}, {}}},
                   false);
        conv_ring_row(op, dt, fwd3, {{"y0", dy0, y[0], {}, {}}, {"y1", dy1, y[1], {}, {}}, {"y2", dy2, y[2], {}, {}}},
                     false);
        dten e0 = dempty(rows * cw[0], dt), e1 = dempty(rows * cw[1], dt), e2 = dempty(rows * cw[2], dt);
        dten *es3[3] = {&e0, &e1, &e2}, *ds3[3] = {&dy0, &dy1, &dy2};
        for (int i = 0; i < 3; i++)
            cuda_conv_silu_fwd(dt, es3[i]->d, xp + c0[i] * es, (const char *)dw_.d + (size_t)c0[i] * K * es, B, T,
                               cw[i], K, ld, NULL, 0);
        fwd3();
        CUDA_CHECK(cudaDeviceSynchronize());
        bool same = true;
        for (int i = 0; i < 3; i++) same = same && raw(*es3[i]) == raw(*ds3[i]);
        row_bool(op, dtn(dt), "y = three conv_silu calls", same);

        vec dx_init = randn(r, nw, 1.0, dt), dx_want = dx_init, init = randn(r, (size_t)C * K, 0.1, CUDA_F32), want2;
        vec dw = plus_twice(init, [&](double *acc) {
            conv3_bwd_ref(dx_want, acc, g, xw, w, B, T, cw, c0, K, ld, col);
        }, &want2);
        dten dg0 = dput(g[0], dt), dg1 = dput(g[1], dt), dg2 = dput(g[2], dt);
        dten ddxw = dempty(nw, dt), ddw = dempty((size_t)C * K, CUDA_F32);
        snprintf(op, sizeof op, "conv_silu3_bwd B%d T%d C%d+%d+%d K%d ld%zu", B, T, cw[0], cw[1], cw[2], K, ld);
        auto bwd3 = [&](void *dx, float *dwp) {
            cuda_conv_silu3_bwd(dt, (char *)dx + col * es, dwp, dg0.d, dg1.d, dg2.d, xp, dw_.d, B, T, cw[0], cw[1],
                                cw[2], K, ld, NULL, 0);
        };
        run_checks(op, dt, [&]() { bwd3(ddxw.d, (float *)ddw.d); },
                   {{"dx|rest", ddxw, dx_want, dx_init, dx_want}, {"dw", ddw, dw, init, want2}}, true);
        conv_ring_row(op, dt, [&]() { bwd3(ddxw.d, (float *)ddw.d); },
                     {{"dx|rest", ddxw, dx_want, dx_init, dx_want}, {"dw", ddw, dw, init, want2}},
                     conv_ring_bwd(cw, K, ld, col, 0));
        // bitwise against three calls, from the same starting dx and dw
        dten ddxw2 = dput(dx_init, dt), ddw2 = dput(init, CUDA_F32), ddxw3 = dput(dx_init, dt), ddw3 = dput(init, CUDA_F32);
        const void *dg3[3] = {dg0.d, dg1.d, dg2.d};
        for (int i = 0; i < 3; i++)
            cuda_conv_silu_bwd(dt, (char *)ddxw2.d + (col + c0[i]) * es, (float *)ddw2.d + (size_t)c0[i] * K, dg3[i],
                               xp + c0[i] * es, (const char *)dw_.d + (size_t)c0[i] * K * es, B, T, cw[i], K, ld, NULL, 0);
        bwd3(ddxw3.d, (float *)ddw3.d);
        CUDA_CHECK(cudaDeviceSynchronize());
        row_bool(op, dtn(dt), "dx, dw = three conv_silu calls", raw(ddxw2) == raw(ddxw3) && raw(ddw2) == raw(ddw3));
    }
}

// SiLU, SwiGLU and add, on 16-byte aligned pointers (pack path) and one element off (scalar path)
static void test_pointwise(cuda_dtype dt, rng_t *r) {
    const size_t n = 100003;
    for (size_t off = 0; off < 2; off++) {
        const char *al = off ? "unaligned" : "aligned";
        char op[64];
        vec x = randn(r, n, 3.0, dt), u = randn(r, n, 1.0, dt), g = randn(r, n, 1.0, dt);
        vec y(n), dx(n), h(n), dgt(n), dup(n);
        silu_fwd_cpu(y.data(), x.data(), n);
        silu_bwd_cpu(dx.data(), g.data(), x.data(), n);
        swiglu_fwd_cpu(h.data(), x.data(), u.data(), 1, (int)n, n);
        swiglu_bwd_cpu(dgt.data(), dup.data(), g.data(), x.data(), u.data(), 1, (int)n, n);
        dten dx_ = dput(x, dt, off), du = dput(u, dt, off), dg = dput(g, dt, off);
        dten dy_ = dempty(n, dt, off), ddx = dempty(n, dt, off), dh = dempty(n, dt, off);
        dten ddg = dempty(n, dt, off), ddu = dempty(n, dt, off);
        snprintf(op, sizeof op, "silu_fwd n%zu %s", n, al);
        run_checks(op, dt, [&]() { cuda_silu_fwd(dt, dy_.d, dx_.d, n, 0); }, {{"y", dy_, y, {}, {}}}, false);
        snprintf(op, sizeof op, "silu_bwd n%zu %s", n, al);
        run_checks(op, dt, [&]() { cuda_silu_bwd(dt, ddx.d, dg.d, dx_.d, n, 0); }, {{"dx", ddx, dx, {}, {}}}, false);
        snprintf(op, sizeof op, "swiglu_fwd n%zu %s", n, al);
        run_checks(op, dt, [&]() { cuda_swiglu_fwd(dt, dh.d, dx_.d, du.d, 1, (int)n, n, 0); }, {{"h", dh, h, {}, {}}},
                   false);
        snprintf(op, sizeof op, "swiglu_bwd n%zu %s", n, al);
        run_checks(op, dt, [&]() { cuda_swiglu_bwd(dt, ddg.d, ddu.d, NULL, dg.d, dx_.d, du.d, 1, (int)n, n, 0); },
                   {{"dgate", ddg, dgt, {}, {}}, {"dup", ddu, dup, {}, {}}}, false);
        dten fh = dempty(n, dt, off), bh = dempty(n, dt, off);  // light: h again, bitwise
        cuda_swiglu_fwd(dt, fh.d, dx_.d, du.d, 1, (int)n, n, 0);
        check_extra_output(op, dt, "h", fh, bh, {ddg, ddu},
                           [&](void *hp) { cuda_swiglu_bwd(dt, ddg.d, ddu.d, hp, dg.d, dx_.d, du.d, 1, (int)n, n, 0); });
        // add: y += x (y starts as u, rewritten inside fn so that the poison is overwritten)
        vec sum(n);
        for (size_t i = 0; i < n; i++) sum[i] = round_to(u[i] + x[i], dt);  // one rounding, as the GPU
        dten da = dempty(n, dt, off);
        snprintf(op, sizeof op, "add n%zu %s", n, al);
        run_checks(op, dt,
                   [&]() {
                       upload(da, u);
                       cuda_add(dt, da.d, dx_.d, n, 0);
                   },
                   {{"y", da, sum, {}, {}}}, false);
    }
}

// Group swiglu: SwiGLU on rows of stride ld (model.c mlp_fused: gate and up the column halves
// of one (rows, 2 cols) projection; ld > 2 cols leaves spare columns, which must stay untouched),
// and ld = cols (separate packed gate and up), h and dh packed: against the CPU (float64, the
// same strides), the light extra output h, and bitwise against the packed call on the same gate
// and up values copied out (the strided form changes where the values are read, not what is
// computed). Shapes: fla-220m's F (16-byte packs), cols or ld off the pack (one element at a
// time), one row, 1 x 1; each 16-byte aligned and one element off.
static void test_swiglu_strided(cuda_dtype dt, rng_t *r) {
    struct {
        size_t rows;
        int cols;
        size_t ld;
    } const shapes[] = {{512, 2816, 5632}, {300, 64, 128}, {7, 77, 154}, {1, 13, 26}, {33, 24, 48},
                        {17, 16, 37},       {9, 40, 40},    {5, 19, 19},  {1, 1, 2},   {1, 1, 1}};
    const size_t es = esz(dt);
    for (const auto &sh : shapes)
        for (size_t off = 0; off < 2; off++) {
            const size_t rows = sh.rows, ld = sh.ld, cols = (size_t)sh.cols, n = rows * cols, nb = rows * ld;
            const bool one = ld >= 2 * cols;  // gate | up in one buffer, else two packed ones
            char op[96];
            vec a = randn(r, nb, 3.0, dt), b = one ? vec() : randn(r, nb, 1.0, dt), dh = randn(r, n, 1.0, dt);
            const double *g = a.data(), *u = one ? a.data() + cols : b.data();
            vec h(n), d1 = randn(r, nb, 1.0, dt), d2 = one ? vec() : randn(r, nb, 1.0, dt);  // d*: their init
            vec w1 = d1, w2 = d2;  // init with dgate, dup written in their columns
            swiglu_fwd_cpu(h.data(), g, u, rows, sh.cols, ld);
            swiglu_bwd_cpu(w1.data(), one ? w1.data() + cols : w2.data(), dh.data(), g, u, rows, sh.cols, ld);
            dten A = dput(a, dt, off), B = one ? A : dput(b, dt, off), DH = dput(dh, dt, off);
            dten H = dempty(n, dt, off), D1 = dempty(nb, dt, off), D2 = one ? D1 : dempty(nb, dt, off);
            const void *up = one ? (const void *)((const char *)A.d + cols * es) : B.d;
            void *dup = one ? (void *)((char *)D1.d + cols * es) : D2.d;
            const char *al = off ? "unal" : "al";
            snprintf(op, sizeof op, "swiglu_fwd %zux%d ld%zu %s", rows, sh.cols, ld, al);
            auto fwd = [&](void *hp) { cuda_swiglu_fwd(dt, hp, A.d, up, rows, sh.cols, ld, 0); };
            run_checks(op, dt, [&]() { fwd(H.d); }, {{"h", H, h, {}, {}}}, false);
            snprintf(op, sizeof op, "swiglu_bwd %zux%d ld%zu %s", rows, sh.cols, ld, al);
            auto bwd = [&](void *hp) { cuda_swiglu_bwd(dt, D1.d, dup, hp, DH.d, A.d, up, rows, sh.cols, ld, 0); };
            std::vector<out_check> outs = {{one ? "dgate|dup|rest" : "dgate", D1, w1, d1, w1}};
            if (!one) outs.push_back({"dup", D2, w2, d2, w2});
            run_checks(op, dt, [&]() { bwd(NULL); }, outs, false);
            bool rest = true;  // spare columns: exactly their init
            const vec got1 = download(D1);
            for (size_t i = 0; i < rows && one; i++)
                for (size_t c = 2 * cols; c < ld; c++) rest = rest && got1[i * ld + c] == d1[i * ld + c];
            row_bool(op, dtn(dt), "spare columns untouched", rest);
            // the packed call on the same values: h, dgate, dup bitwise
            vec gp(n), upk(n);
            for (size_t i = 0; i < rows; i++)
                for (size_t c = 0; c < cols; c++) gp[i * cols + c] = g[i * ld + c], upk[i * cols + c] = u[i * ld + c];
            dten PG = dput(gp, dt, off), PU = dput(upk, dt, off), PH = dempty(n, dt, off);
            dten PDG = dempty(n, dt, off), PDU = dempty(n, dt, off);
            cuda_swiglu_fwd(dt, PH.d, PG.d, PU.d, rows, sh.cols, cols, 0);
            cuda_swiglu_bwd(dt, PDG.d, PDU.d, NULL, DH.d, PG.d, PU.d, rows, sh.cols, cols, 0);
            upload(D1, d1);
            if (!one) upload(D2, d2);
            fwd(H.d);
            bwd(NULL);
            CUDA_CHECK(cudaDeviceSynchronize());
            const vec s1 = download(D1), s2 = one ? s1 : download(D2), pdg = download(PDG), pdu = download(PDU);
            bool same = raw(H) == raw(PH);
            for (size_t i = 0; i < rows; i++)
                for (size_t c = 0; c < cols; c++) {
                    same = same && s1[i * ld + c] == pdg[i * cols + c];
                    same = same && s2[i * ld + (one ? cols : 0) + c] == pdu[i * cols + c];
                }
            row_bool(op, dtn(dt), "h, dgate, dup = packed call", same);
            dten FH = dempty(n, dt, off), BH = dempty(n, dt, off);  // light: h again, bitwise
            fwd(FH.d);
            check_extra_output(op, dt, "h", FH, BH, one ? std::vector<dten>{D1} : std::vector<dten>{D1, D2}, bwd);
        }
}

static void test_convert(rng_t *r) {
    const size_t n = 100003;
    for (size_t off = 0; off < 2; off++) {
        vec x = randn(r, n, 10.0, CUDA_F32), xb(n);
        for (size_t i = 0; i < n; i++) xb[i] = round_to(x[i], CUDA_BF16);
        dten f = dput(x, CUDA_F32, off), b = dempty(n, CUDA_BF16, off), f2 = dempty(n, CUDA_F32, off);
        dten b2 = dempty(n, CUDA_BF16, off), f3 = dempty(n, CUDA_F32, off);
        poison(b);
        poison(f2);
        poison(b2);
        poison(f3);
        cuda_convert(b.d, CUDA_BF16, f.d, CUDA_F32, n, 0);   // f32 -> bf16 (round to nearest even)
        cuda_convert(f2.d, CUDA_F32, b.d, CUDA_BF16, n, 0);  // bf16 -> f32 (exact)
        cuda_convert(b2.d, CUDA_BF16, b.d, CUDA_BF16, n, 0); // copies
        cuda_convert(f3.d, CUDA_F32, f.d, CUDA_F32, n, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        const char *op = off ? "convert n100003 unaligned" : "convert n100003 aligned";
        std::vector<__nv_bfloat16> hb(n);
        for (size_t i = 0; i < n; i++) hb[i] = __float2bfloat16((float)x[i]);
        const std::vector<unsigned char> want((unsigned char *)hb.data(), (unsigned char *)hb.data() + 2 * n);
        row_bool(op, "-", "f32->bf16 vs host RNE", raw(b) == want);
        row_bool(op, "-", "bf16->f32", download(f2) == xb);
        row_bool(op, "-", "bf16->bf16", raw(b2) == want);
        row_bool(op, "-", "f32->f32", download(f3) == x);
    }
}

static void test_l2norm(cuda_dtype dt, rng_t *r) {
    // D 128 (the model's dk), 64, 32, 256: the packed backward at 16 / 8 / 4 / 32 lanes a row in
    // bf16 (32 / 16 / 8 / 64 packs in fp32: the last two the one-row-per-warp loop), rows that
    // leave a warp part empty; D 100: unaligned packs, one element at a time
    const int shapes[7][2] = {{999, 128}, {33, 100}, {7, 128}, {1, 128}, {50, 64}, {33, 32}, {5, 256}};
    for (auto &sh : shapes) {
        const size_t rows = sh[0];
        const int D = sh[1];
        const size_t n = rows * D;
        const double scale = 1.0 / sqrt((double)D), eps = 1e-6;
        vec x = randn(r, n, 1.0, dt), y(n), rn(rows);
        l2norm_fwd_cpu(y.data(), rn.data(), x.data(), rows, D, eps, scale);
        dten dx_ = dput(x, dt), dy_ = dempty(n, dt), drn = dempty(rows, CUDA_F32);
        char op[64];
        snprintf(op, sizeof op, "l2norm_fwd rows%zu D%d", rows, D);
        run_checks(op, dt, [&]() { cuda_l2norm_fwd(dt, dy_.d, (float *)drn.d, dx_.d, rows, D, eps, scale, 0); },
                   {{"y", dy_, y, {}, {}}, {"rnorm", drn, rn, {}, {}}}, true);
        // the backward reads the forward's output: y as stored (rounded to dt), rnorm as fp32
        vec g = randn(r, n, 1.0, dt), rnf = to_f32(rn), yr(n), dx(n);
        for (size_t i = 0; i < n; i++) yr[i] = round_to(y[i], dt);
        l2norm_bwd_cpu(dx.data(), g.data(), yr.data(), rnf.data(), rows, D, scale);
        dten dg = dput(g, dt), drnf = dput(rnf, CUDA_F32), dyr = dput(yr, dt), ddx = dempty(n, dt);
        snprintf(op, sizeof op, "l2norm_bwd rows%zu D%d", rows, D);
        run_checks(op, dt,
                   [&]() { cuda_l2norm_bwd(dt, ddx.d, dg.d, dyr.d, (const float *)drnf.d, rows, D, scale, 0); },
                   {{"dx", ddx, dx, {}, {}}}, true);
    }
}

// conv_silu3_l2: conv_silu3 with q, k L2-normalised per head of nd channels, against the CPU's
// conv_silu then l2norm_fwd. In-kernel norm (fused = 1; the norm of the unrounded fp32 conv
// output, the ring kernel): fla-220m's shape (heads of 128, T 300), heads of 64, K 3 at T 1 / 65,
// heads of 32 with q and k in one warp (ld 260).
// Composed (fused = 0: conv_silu3 stores y rounded to its dtype, then l2norm_fwd in place, so the
// reference rounds there too, and the result must be bitwise those two calls): heads of 256 (more
// than a warp), an odd row stride (no tiled conv).
static void test_conv_silu3_l2(cuda_dtype dt, rng_t *r) {
    const int shapes[][9] = {  // B, T, C0 (= C1), C2, K, ld, col, nd, fused
        {2, 300, 512, 1024, 4, 3080, 0, 128, 1}, {2, 63, 128, 256, 4, 520, 8, 64, 1},
        {3, 1, 256, 256, 3, 768, 0, 128, 1},     {1, 65, 256, 512, 3, 1024, 0, 64, 1},
        {2, 65, 96, 64, 4, 260, 4, 32, 1},       {2, 64, 256, 512, 4, 1030, 2, 256, 0},
        {1, 63, 128, 128, 2, 387, 1, 128, 0}};
    for (const auto &sh : shapes) {
        const int B = sh[0], T = sh[1], C0 = sh[2], C2 = sh[3], K = sh[4], nd = sh[7], C = 2 * C0 + C2;
        const bool fused = sh[8];
        const size_t ld = sh[5], col = sh[6], rows = (size_t)B * T, nw = rows * ld, es = esz(dt), nh = rows * (C0 / nd);
        const double eps = 1e-6, s0 = 1.0 / sqrt((double)nd);
        vec xw = randn(r, nw, 1.0, dt), w = randn(r, (size_t)C * K, 0.5, dt);
        const int cw[3] = {C0, C0, C2}, c0[3] = {0, C0, 2 * C0};
        std::vector<vec> y(3);
        vec rn[2] = {vec(nh), vec(nh)};
        conv3_l2_ref(y, rn, xw, w, dt, B, T, cw, c0, K, ld, col, nd, eps, s0, fused);
        dten dxw_ = dput(xw, dt), dw_ = dput(w, dt);
        dten dy0 = dempty(rows * C0, dt), dy1 = dempty(rows * C0, dt), dy2 = dempty(rows * C2, dt);
        dten dr0 = dempty(nh, CUDA_F32), dr1 = dempty(nh, CUDA_F32);
        char op[96];
        snprintf(op, sizeof op, "conv_silu3_l2 B%d T%d C%d+%d+%d K%d ld%zu nd%d", B, T, C0, C0, C2, K, ld, nd);
        run_checks(op, dt,
                   [&]() {
                       cuda_conv_silu3_l2_fwd(dt, dy0.d, dy1.d, dy2.d, (float *)dr0.d, (float *)dr1.d,
                                              (const char *)dxw_.d + col * es, dw_.d, B, T, C0, C0, C2, K, ld, nd, eps,
                                              s0, 1.0, NULL, 0);
                   },
                   {{"q = y0 normed", dy0, y[0], {}, {}},
                    {"k = y1 normed", dy1, y[1], {}, {}},
                    {"v = y2", dy2, y[2], {}, {}},
                    {"rnorm q", dr0, rn[0], {}, {}},
                    {"rnorm k", dr1, rn[1], {}, {}}},
                   true);
        conv_ring_row(op, dt,
                     [&]() {
                         cuda_conv_silu3_l2_fwd(dt, dy0.d, dy1.d, dy2.d, (float *)dr0.d, (float *)dr1.d,
                                                (const char *)dxw_.d + col * es, dw_.d, B, T, C0, C0, C2, K, ld, nd,
                                                eps, s0, 1.0, NULL, 0);
                     },
                     {{"q = y0 normed", dy0, y[0], {}, {}},
                      {"k = y1 normed", dy1, y[1], {}, {}},
                      {"v = y2", dy2, y[2], {}, {}},
                      {"rnorm q", dr0, rn[0], {}, {}},
                      {"rnorm k", dr1, rn[1], {}, {}}},
                     fused && conv_tiled(4, cw, K, ld, col, 0));
        if (fused) continue;
        dten e0 = dempty(rows * C0, dt), e1 = dempty(rows * C0, dt), e2 = dempty(rows * C2, dt);
        dten f0 = dempty(nh, CUDA_F32), f1 = dempty(nh, CUDA_F32);
        cuda_conv_silu3_fwd(dt, e0.d, e1.d, e2.d, (const char *)dxw_.d + col * es, dw_.d, B, T, C0, C0, C2, K, ld, NULL, 0);
        cuda_l2norm_fwd(dt, e0.d, (float *)f0.d, e0.d, nh, nd, eps, s0, 0);
        cuda_l2norm_fwd(dt, e1.d, (float *)f1.d, e1.d, nh, nd, eps, 1.0, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        row_bool(op, dtn(dt), "= conv_silu3 + l2norm_fwd", raw(e0) == raw(dy0) && raw(e1) == raw(dy1) &&
                                                               raw(e2) == raw(dy2) && raw(f0) == raw(dr0) &&
                                                               raw(f1) == raw(dr1));
    }
}

// The ring conv + SiLU kernels at the model's shape and around their blocking, against the CPU
// (conv_silu_fwd_cpu then l2norm_fwd_cpu; conv_silu_bwd_cpu per segment; tolerances and the
// fused / composed reference as test_conv_silu3_l2), and which kernel ran: fla-220m's q, k, v
// (ld 3080, 512 + 512 + 1024, K 4, heads of 128) at B 16 T 2048 (bf16; fp32 at B 2: the same
// chunking per sequence) and T = 1, 63, 64, 65, 300 (the forward's chunks end mid-ring; the
// backward's groups of 8 tiles straddle sequences, runs of one tile, padded tokens); B 300 T 20
// (more warp items than resident warps: the forward's chunk is the whole sequence and warps
// loop); heads of 64 and 32 (the butterfly without its xor-16 level), K 1..3, a channel count
// with a half-dead warp (C 384), ld 1028 (on 4 elements, not on 8) and x at column 4; an odd ld
// and column 2 (no ring kernel: conv_silu3 then the norms; the backward's staged kernel or the
// fallback).
// The backward's dx is the whole buffer (its other columns x's values, which must stay).
static void test_conv_silu_ring(cuda_dtype dt, rng_t *r) {
    const int shapes[][9] = {  // B, T, C0 (= C1), C2, K, ld, col, nd
        {16, 2048, 512, 1024, 4, 3080, 0, 128}, {2, 2048, 512, 1024, 4, 3080, 0, 128},
        {3, 1, 512, 1024, 4, 3080, 0, 128},     {2, 63, 512, 1024, 4, 3080, 0, 128},
        {2, 64, 512, 1024, 4, 3080, 0, 128},    {3, 65, 512, 1024, 4, 3080, 0, 128},
        {2, 300, 512, 1024, 4, 3080, 0, 128},   {300, 20, 512, 1024, 4, 3080, 0, 128},
        {3, 300, 128, 256, 3, 520, 8, 64},      {2, 65, 96, 64, 4, 260, 4, 32},
        {2, 129, 128, 128, 2, 1028, 4, 128},    {1, 77, 256, 512, 1, 1024, 0, 128},
        {2, 65, 256, 256, 4, 1030, 2, 128},     {2, 40, 128, 128, 4, 387, 1, 128}};
    for (const auto &sh : shapes) {
        const int B = sh[0], T = sh[1], C0 = sh[2], C2 = sh[3], K = sh[4], nd = sh[7], C = 2 * C0 + C2;
        if (B * T > 4096 && dt == CUDA_F32 && B > 2) continue;  // fp32: the B 2 row has the chunking
        const size_t ld = sh[5], col = sh[6], rows = (size_t)B * T, nw = rows * ld, es = esz(dt), nh = rows * (C0 / nd);
        const int cw[3] = {C0, C0, C2}, c0[3] = {0, C0, 2 * C0};
        const double eps = 1e-6, s0 = 1.0 / sqrt((double)nd);
        // the in-kernel norm (ring kernel) on the tiled path; else conv_silu3 stores y, then the norm
        const bool fused = conv_tiled(4, cw, K, ld, col, 0) && C % 128 == 0;
        vec xw = randn(r, nw, 1.0, dt), w = randn(r, (size_t)C * K, 0.5, dt);
        std::vector<vec> y(3);
        vec rn[2] = {vec(nh), vec(nh)};
        conv3_l2_ref(y, rn, xw, w, dt, B, T, cw, c0, K, ld, col, nd, eps, s0, fused);
        dten dxw_ = dput(xw, dt), dw_ = dput(w, dt);
        const char *xp = (const char *)dxw_.d + col * es;
        dten dy0 = dempty(rows * C0, dt), dy1 = dempty(rows * C0, dt), dy2 = dempty(rows * C2, dt);
        dten dr0 = dempty(nh, CUDA_F32), dr1 = dempty(nh, CUDA_F32);
        char op[96];
        snprintf(op, sizeof op, "conv_silu_ring l2 B%d T%d C%d+%d+%d K%d ld%zu nd%d", B, T, C0, C0, C2, K, ld, nd);
        auto fwd = [&]() {
            cuda_conv_silu3_l2_fwd(dt, dy0.d, dy1.d, dy2.d, (float *)dr0.d, (float *)dr1.d, xp, dw_.d, B, T, C0, C0,
                                   C2, K, ld, nd, eps, s0, 1.0, NULL, 0);
        };
        const std::vector<out_check> fo = {{"q = y0 normed", dy0, y[0], {}, {}},
                                           {"k = y1 normed", dy1, y[1], {}, {}},
                                           {"v = y2", dy2, y[2], {}, {}},
                                           {"rnorm q", dr0, rn[0], {}, {}},
                                           {"rnorm k", dr1, rn[1], {}, {}}};
        run_checks(op, dt, fwd, fo, true);
        conv_ring_row(op, dt, fwd, fo, fused);
        std::vector<vec> g(3);
        for (int i = 0; i < 3; i++) g[i] = randn(r, rows * cw[i], 1.0, dt);
        const vec &dx_init = xw;  // dx's other columns: any values that must stay (x's: no draw)
        vec dx_want = dx_init, init = randn(r, (size_t)C * K, 0.1, CUDA_F32), want2;
        vec dw = plus_twice(init, [&](double *acc) {
            conv3_bwd_ref(dx_want, acc, g, xw, w, B, T, cw, c0, K, ld, col);
        }, &want2);
        dten dg0 = dput(g[0], dt), dg1 = dput(g[1], dt), dg2 = dput(g[2], dt);
        dten ddxw = dempty(nw, dt), ddw = dempty((size_t)C * K, CUDA_F32);
        snprintf(op, sizeof op, "conv_silu_ring bwd B%d T%d C%d+%d+%d K%d ld%zu", B, T, C0, C0, C2, K, ld);
        auto bwd = [&]() {
            cuda_conv_silu3_bwd(dt, (char *)ddxw.d + col * es, (float *)ddw.d, dg0.d, dg1.d, dg2.d, xp, dw_.d, B, T,
                                C0, C0, C2, K, ld, NULL, 0);
        };
        const std::vector<out_check> bo = {{"dx|rest", ddxw, dx_want, dx_init, dx_want}, {"dw", ddw, dw, init, want2}};
        run_checks(op, dt, bwd, bo, true);
        conv_ring_row(op, dt, bwd, bo, conv_ring_bwd(cw, K, ld, col, 0));
    }
}

static void test_gates(cuda_dtype dt, rng_t *r) {
    const int N = 1000, H = 16;
    const size_t n = (size_t)N * H;
    const gdn_mode modes[4] = {{true, true, false}, {true, true, true}, {false, true, false}, {true, false, false}};
    for (const gdn_mode &m : modes) {
        char op[80];
        // a spans both sides of the softplus threshold u = 20
        vec a = randn(r, n, 10.0, dt), b = randn(r, n, 3.0, dt), dtb = randn(r, H, 1.0, dt), Al(H);
        for (auto &e : Al) e = round_to(log(1.0 + 15.0 * rng_uniform(r)), dt);
        for (auto &e : Al) e = e != 0.0 ? e : round_to(0.5, dt);
        vec g(n), beta(n);
        gdn_gates_fwd_cpu(g.data(), m.delta ? beta.data() : NULL, a.data(), b.data(), Al.data(), dtb.data(), N, H, H,
                          m);
        dten da_ = dput(a, dt), db_ = dput(b, dt), dAl = dput(Al, dt), ddtb = dput(dtb, dt);
        dten dgg = dempty(n, CUDA_F32), dbeta = dempty(n, CUDA_F32);
        std::vector<out_check> outs = {{"g", dgg, g, {}, {}}};
        if (m.delta) outs.push_back({"beta", dbeta, beta, {}, {}});
        snprintf(op, sizeof op, "gdn_gates_fwd gate%d delta%d neg%d", m.gate, m.delta, m.neg_eigval);
        run_checks(op, dt,
                   [&]() {
                       cuda_gdn_gates_fwd(dt, (float *)dgg.d, m.delta ? (float *)dbeta.d : NULL, da_.d, db_.d, dAl.d,
                                          ddtb.d, N, H, H, m, 0);
                   },
                   outs, false);

        vec dg = randn(r, n, 1.0, CUDA_F32), dbt = randn(r, n, 1.0, CUDA_F32), da(n), dbw(n);
        vec iA = randn(r, H, 1.0, CUDA_F32), idt = randn(r, H, 1.0, CUDA_F32), wA2, wdt2;
        vec wA = iA, wdt = idt;
        for (int k = 0; k < 2; k++) {
            gdn_gates_bwd_cpu(m.gate ? da.data() : NULL, m.delta ? dbw.data() : NULL, wA.data(), wdt.data(), dg.data(),
                              dbt.data(), a.data(), b.data(), Al.data(), dtb.data(), N, H, H, m);
            if (k == 0) {
                wA2 = wA;
                wdt2 = wdt;
            }
        }
        std::swap(wA, wA2);  // wA: after one call, wA2: after two
        std::swap(wdt, wdt2);
        dten ddg = dput(dg, CUDA_F32), ddbt = dput(dbt, CUDA_F32), dda = dempty(n, dt), ddb = dempty(n, dt);
        dten ddA = dempty(H, CUDA_F32), dddt = dempty(H, CUDA_F32);
        std::vector<out_check> bo = {{"dA_log", ddA, wA, iA, wA2}, {"ddt_bias", dddt, wdt, idt, wdt2}};
        if (m.gate) bo.push_back({"da", dda, da, {}, {}});
        if (m.delta) bo.push_back({"db", ddb, dbw, {}, {}});
        snprintf(op, sizeof op, "gdn_gates_bwd gate%d delta%d neg%d", m.gate, m.delta, m.neg_eigval);
        run_checks(op, dt,
                   [&]() {
                       cuda_gdn_gates_bwd(dt, m.gate ? dda.d : NULL, m.delta ? ddb.d : NULL, (float *)ddA.d,
                                          (float *)dddt.d, (const float *)ddg.d, (const float *)ddbt.d, da_.d, db_.d,
                                          dAl.d, ddtb.d, N, H, H, m, 0);
                   },
                   bo, true);

        // strided (the model's fused a, b, z projection): a, b and da, db are columns [0, H) and
        // [H, 2H) of rows of ld = 2H + 24; the other columns hold random values that must stay
        const size_t ld = 2 * H + 24, nw = (size_t)N * ld;
        vec aw = randn(r, nw, 1.0, dt), dw_init = randn(r, nw, 1.0, dt);
        for (int t = 0; t < N; t++)
            for (int h = 0; h < H; h++) {
                aw[t * ld + h] = a[(size_t)t * H + h];
                aw[t * ld + H + h] = b[(size_t)t * H + h];
            }
        vec dw_want = dw_init;
        for (int t = 0; t < N; t++)
            for (int h = 0; h < H; h++) {
                if (m.gate) dw_want[t * ld + h] = da[(size_t)t * H + h];
                if (m.delta) dw_want[t * ld + H + h] = dbw[(size_t)t * H + h];
            }
        dten daw = dput(aw, dt), ddw = dempty(nw, dt);
        const size_t es = esz(dt);
        const void *aw_a = daw.d, *aw_b = (const char *)daw.d + H * es;
        snprintf(op, sizeof op, "gdn_gates_fwd gate%d delta%d neg%d ld%zu", m.gate, m.delta, m.neg_eigval, ld);
        run_checks(op, dt,
                   [&]() {
                       cuda_gdn_gates_fwd(dt, (float *)dgg.d, m.delta ? (float *)dbeta.d : NULL, aw_a, aw_b, dAl.d,
                                          ddtb.d, N, H, ld, m, 0);
                   },
                   outs, false);
        std::vector<out_check> bw = {{"dA_log", ddA, wA, iA, wA2}, {"ddt_bias", dddt, wdt, idt, wdt2},
                                     {"da|db|rest", ddw, dw_want, dw_init, dw_want}};
        snprintf(op, sizeof op, "gdn_gates_bwd gate%d delta%d neg%d ld%zu", m.gate, m.delta, m.neg_eigval, ld);
        run_checks(op, dt,
                   [&]() {
                       cuda_gdn_gates_bwd(dt, m.gate ? ddw.d : NULL, m.delta ? (char *)ddw.d + H * es : NULL,
                                          (float *)ddA.d, (float *)dddt.d, (const float *)ddg.d, (const float *)ddbt.d,
                                          aw_a, aw_b, dAl.d, ddtb.d, N, H, ld, m, 0);
                   },
                   bw, true);
    }
}

static void test_gated_rmsnorm(cuda_dtype dt, rng_t *r) {
    const double eps = 1e-6;
    const int shapes[2][3] = {{777, 256, 1}, {65, 100, 0}};  // rows, D, with z
    for (auto &sh : shapes) {
        const size_t rows = sh[0];
        const int D = sh[1];
        const bool hz = sh[2];
        const size_t n = rows * D;
        vec x = randn(r, n, 1.0, dt), z = randn(r, n, 2.0, dt), w = randn(r, D, 0.1, dt, 1.0), y(n), rstd(rows);
        gated_rmsnorm_fwd_cpu(y.data(), rstd.data(), x.data(), hz ? z.data() : NULL, w.data(), rows, D, 1, D, eps);
        dten dx_ = dput(x, dt), dz_ = dput(z, dt), dw_ = dput(w, dt), dy_ = dempty(n, dt), drs = dempty(rows, CUDA_F32);
        const void *zp = hz ? dz_.d : NULL;
        char op[80];
        snprintf(op, sizeof op, "gated_rmsnorm_fwd rows%zu D%d z%d", rows, D, (int)hz);
        run_checks(op, dt,
                   [&]() { cuda_gated_rmsnorm_fwd(dt, dy_.d, (float *)drs.d, dx_.d, zp, dw_.d, rows, D, 1, D, eps, 0); },
                   {{"y", dy_, y, {}, {}}, {"rstd", drs, rstd, {}, {}}}, true);
        norm_narrow_row(op, dt, {dy_, drs}, []() {},
                     [&]() { cuda_gated_rmsnorm_fwd(dt, dy_.d, (float *)drs.d, dx_.d, zp, dw_.d, rows, D, 1, D, eps, 0); },
                     norm_narrow_fwd(dt, D, D, 0));
    }
    // backward on the shapes of norm_bwd_shapes (above), with and without the gate z
    for (const norm_bwd_shape &sh : norm_bwd_shapes())
        for (bool hz : {true, false}) {
            const size_t rows = sh.rows, n = rows * sh.d, off = sh.off;
            const int D = sh.d;
            vec x = randn(r, n, 1.0, dt), z = randn(r, n, 2.0, dt), w = randn(r, D, 0.1, dt, 1.0), y(n), rstd(rows);
            gated_rmsnorm_fwd_cpu(y.data(), rstd.data(), x.data(), hz ? z.data() : NULL, w.data(), rows, D, 1, D,
                                  eps);
            vec g = randn(r, n, 1.0, dt), rsf = to_f32(rstd), dx(n), dz(n), init = randn(r, D, 0.1, CUDA_F32), want2;
            vec dw = plus_twice(init, [&](double *acc) {
                gated_rmsnorm_bwd_cpu(dx.data(), hz ? dz.data() : NULL, acc, g.data(), x.data(), hz ? z.data() : NULL,
                                      w.data(), rsf.data(), rows, D, 1, D);
            }, &want2);
            dten dx_ = dput(x, dt, off), dz_ = dput(z, dt, off), dw_ = dput(w, dt), dg = dput(g, dt, off);
            dten drsf = dput(rsf, CUDA_F32), ddx = dempty(n, dt, off), ddz = dempty(n, dt, off);
            dten ddw = dempty(D, CUDA_F32);
            const void *zp = hz ? dz_.d : NULL;
            std::vector<out_check> bo = {{"dx", ddx, dx, {}, {}}, {"dw", ddw, dw, init, want2}};
            if (hz) bo.push_back({"dz", ddz, dz, {}, {}});
            char op[80];
            snprintf(op, sizeof op, "gated_rmsnorm_bwd rows%zu D%d z%d%s", rows, D, (int)hz, off ? " unal" : "");
            run_checks(op, dt,
                       [&]() {
                           cuda_gated_rmsnorm_bwd(dt, ddx.d, hz ? ddz.d : NULL, (float *)ddw.d, NULL, dg.d, dx_.d, zp,
                                                  dw_.d, (const float *)drsf.d, rows, D, 1, D, 0);
                       },
                       bo, true);
            // light: y again from the forward kernel's rstd, bitwise its y
            dten fy = dempty(n, dt, off), frs = dempty(rows, CUDA_F32), by = dempty(n, dt, off);
            cuda_gated_rmsnorm_fwd(dt, fy.d, (float *)frs.d, dx_.d, zp, dw_.d, rows, D, 1, D, eps, 0);
            std::vector<dten> others = {ddx, ddw};
            if (hz) others.push_back(ddz);
            check_extra_output(op, dt, "y", fy, by, others, [&](void *yp) {
                upload(ddw, init);
                cuda_gated_rmsnorm_bwd(dt, ddx.d, hz ? ddz.d : NULL, (float *)ddw.d, yp, dg.d, dx_.d, zp, dw_.d,
                                       (const float *)frs.d, rows, D, 1, D, 0);
            });
            for (bool light : {false, true}) {  // the narrow kernel, with and without y
                std::vector<dten> outs = others;
                if (light) outs.push_back(by);
                char op2[96];
                snprintf(op2, sizeof op2, "%s%s", op, light ? " +y" : "");
                norm_narrow_row(op2, dt, outs, [&]() { upload(ddw, init); },
                             [&]() {
                                 cuda_gated_rmsnorm_bwd(dt, ddx.d, hz ? ddz.d : NULL, (float *)ddw.d,
                                                        light ? by.d : NULL, dg.d, dx_.d, zp, dw_.d,
                                                        (const float *)frs.d, rows, D, 1, D, 0);
                             },
                             norm_narrow_bwd(dt, D, D, off, hz));
            }
            // the forward on these shapes too (unaligned, wide, many rows): against the CPU
            snprintf(op, sizeof op, "gated_rmsnorm_fwd rows%zu D%d z%d%s", rows, D, (int)hz, off ? " unal" : "");
            auto fwd = [&]() {
                cuda_gated_rmsnorm_fwd(dt, fy.d, (float *)frs.d, dx_.d, zp, dw_.d, rows, D, 1, D, eps, 0);
            };
            run_checks(op, dt, fwd, {{"y", fy, y, {}, {}}, {"rstd", frs, rstd, {}, {}}}, true);
            norm_narrow_row(op, dt, {fy, frs}, []() {}, fwd, norm_narrow_fwd(dt, D, D, off));
        }
    // strided z, dz (the model's fused a, b, z projection): zh heads of a token at column zoff of
    // rows of zld; dz's other columns hold random values that must stay. Shapes: the model's
    // (fused kernel), an unaligned one (one-element path), a wide one (two passes, 16-byte packs).
    struct { size_t ntok; int zh, D; size_t zld, zoff; } zs[3] = {
        {250, 4, 256, 1032, 8}, {33, 3, 100, 305, 5}, {20, 2, 1280, 2568, 8}};
    for (auto &sh : zs) {
        const size_t rows = sh.ntok * sh.zh, n = rows * sh.D, nw = sh.ntok * sh.zld;
        const int D = sh.D;
        vec x = randn(r, n, 1.0, dt), zw = randn(r, nw, 2.0, dt), w = randn(r, D, 0.1, dt, 1.0), y(n), rstd(rows);
        gated_rmsnorm_fwd_cpu(y.data(), rstd.data(), x.data(), zw.data() + sh.zoff, w.data(), rows, D, sh.zh, sh.zld,
                              eps);
        dten dx_ = dput(x, dt), dzw = dput(zw, dt), dw_ = dput(w, dt), dy_ = dempty(n, dt), drs = dempty(rows, CUDA_F32);
        const void *zp = (const char *)dzw.d + sh.zoff * esz(dt);
        char op[96];
        snprintf(op, sizeof op, "gated_rmsnorm_fwd rows%zu D%d zh%d zld%zu", rows, D, sh.zh, sh.zld);
        run_checks(op, dt,
                   [&]() {
                       cuda_gated_rmsnorm_fwd(dt, dy_.d, (float *)drs.d, dx_.d, zp, dw_.d, rows, D, sh.zh, sh.zld, eps,
                                              0);
                   },
                   {{"y", dy_, y, {}, {}}, {"rstd", drs, rstd, {}, {}}}, true);
        vec g = randn(r, n, 1.0, dt), rsf = to_f32(rstd), dx(n), dz_init = randn(r, nw, 1.0, dt);
        vec dzw_want = dz_init, init = randn(r, D, 0.1, CUDA_F32), want2;
        vec dwv = plus_twice(init, [&](double *acc) {
            gated_rmsnorm_bwd_cpu(dx.data(), dzw_want.data() + sh.zoff, acc, g.data(), x.data(), zw.data() + sh.zoff,
                                  w.data(), rsf.data(), rows, D, sh.zh, sh.zld);
        }, &want2);
        dten dg = dput(g, dt), drsf = dput(rsf, CUDA_F32), ddx = dempty(n, dt), ddzw = dempty(nw, dt);
        dten ddw = dempty(D, CUDA_F32);
        snprintf(op, sizeof op, "gated_rmsnorm_bwd rows%zu D%d zh%d zld%zu", rows, D, sh.zh, sh.zld);
        run_checks(op, dt,
                   [&]() {
                       cuda_gated_rmsnorm_bwd(dt, ddx.d, (char *)ddzw.d + sh.zoff * esz(dt), (float *)ddw.d, NULL,
                                              dg.d, dx_.d, zp, dw_.d, (const float *)drsf.d, rows, D, sh.zh, sh.zld, 0);
                   },
                   {{"dx", ddx, dx, {}, {}}, {"dw", ddw, dwv, init, want2},
                    {"dz|rest", ddzw, dzw_want, dz_init, dzw_want}},
                   true);
        // light with the strided z: y again, bitwise the forward kernel's (dy_, its rstd drs)
        dten by = dempty(n, dt);
        check_extra_output(op, dt, "y", dy_, by, {ddx, ddw, ddzw}, [&](void *yp) {
            upload(ddzw, dz_init);
            upload(ddw, init);
            cuda_gated_rmsnorm_bwd(dt, ddx.d, (char *)ddzw.d + sh.zoff * esz(dt), (float *)ddw.d, yp, dg.d, dx_.d, zp,
                                   dw_.d, (const float *)drs.d, rows, D, sh.zh, sh.zld, 0);
        });
        for (bool light : {false, true}) {  // the narrow kernel, with and without y
            std::vector<dten> outs = {ddx, ddw, ddzw};
            if (light) outs.push_back(by);
            char op2[112];
            snprintf(op2, sizeof op2, "%s%s", op, light ? " +y" : "");
            norm_narrow_row(op2, dt, outs,
                         [&]() {
                             upload(ddzw, dz_init);
                             upload(ddw, init);
                         },
                         [&]() {
                             cuda_gated_rmsnorm_bwd(dt, ddx.d, (char *)ddzw.d + sh.zoff * esz(dt), (float *)ddw.d,
                                                    light ? by.d : NULL, dg.d, dx_.d, zp, dw_.d, (const float *)drs.d,
                                                    rows, D, sh.zh, sh.zld, 0);
                         },
                         norm_narrow_bwd(dt, D, sh.zld, sh.zoff % (dt == CUDA_BF16 ? 8 : 4), true));
        }
        snprintf(op, sizeof op, "gated_rmsnorm_fwd rows%zu D%d zh%d zld%zu", rows, D, sh.zh, sh.zld);
        norm_narrow_row(op, dt, {dy_, drs}, []() {},
                     [&]() {
                         cuda_gated_rmsnorm_fwd(dt, dy_.d, (float *)drs.d, dx_.d, zp, dw_.d, rows, D, sh.zh, sh.zld,
                                                eps, 0);
                     },
                     norm_narrow_fwd(dt, D, sh.zld, sh.zoff % (dt == CUDA_BF16 ? 8 : 4)));
    }
}

// The narrow-row gated norm kernels at the model's shape (fla-220m: 32768 tokens x 4 heads of 256, z at
// column 2056 of the fused projection's rows of 3080, bf16) and at odd row counts (1, 7, 33,
// 70001: warps with 1 to 16 rows, the last block part full; rows not a multiple of zh), against
// the CPU (gated_rmsnorm_fwd_cpu, gated_rmsnorm_bwd_cpu; the backward from the oracle's rstd,
// dz into the projection's layout with its other columns random, which must stay), the light
// backward's y bitwise the forward kernel's (from its rstd), and which kernel ran.
static void test_gated_rmsnorm_narrow(cuda_dtype dt, rng_t *r) {
    const int Dm = dt == CUDA_BF16 ? 256 : 128;  // one pack a lane
    struct { size_t rows; int zh, D; size_t zld, zoff; bool hz; } sh[] = {
        {131072, 4, 256, 3080, 2056, true}, {1, 4, Dm, 3080, 2056, true}, {7, 4, Dm, 3080, 2056, true},
        {33, 4, Dm, 3080, 2056, true},      {70001, 4, Dm, 3080, 2056, true}, {70001, 3, 64, 200, 8, true},
        {33, 4, 8, 40, 0, true},            {33, 1, Dm, (size_t)Dm, 0, true}, {7, 1, Dm, (size_t)Dm, 0, false}};
    const double eps = 1e-6;
    for (auto &s : sh) {
        if (s.rows == 131072 && dt != CUDA_BF16) continue;  // the model's shape: bf16
        const size_t rows = s.rows, n = rows * s.D, ntok = (rows + s.zh - 1) / s.zh, nw = ntok * s.zld;
        const int D = s.D;
        vec x = randn(r, n, 1.0, dt), zw = randn(r, nw, 2.0, dt), w = randn(r, D, 0.1, dt, 1.0), y(n), rstd(rows);
        const double *zc = s.hz ? zw.data() + s.zoff : NULL;
        gated_rmsnorm_fwd_cpu(y.data(), rstd.data(), x.data(), zc, w.data(), rows, D, s.zh, s.zld, eps);
        dten dx_ = dput(x, dt), dzw = dput(zw, dt), dw_ = dput(w, dt);
        dten fy = dempty(n, dt), frs = dempty(rows, CUDA_F32);
        const void *zp = s.hz ? (const char *)dzw.d + s.zoff * esz(dt) : NULL;
        char op[112];
        snprintf(op, sizeof op, "gated_rmsnorm_narrow fwd rows%zu D%d zh%d zld%zu z%d", rows, D, s.zh, s.zld,
                 (int)s.hz);
        auto fwd = [&]() {
            cuda_gated_rmsnorm_fwd(dt, fy.d, (float *)frs.d, dx_.d, zp, dw_.d, rows, D, s.zh, s.zld, eps, 0);
        };
        run_checks(op, dt, fwd, {{"y", fy, y, {}, {}}, {"rstd", frs, rstd, {}, {}}}, true);
        norm_narrow_row(op, dt, {fy, frs}, []() {}, fwd, norm_narrow_fwd(dt, D, s.zld, 0));  // fy, frs: for light
        vec g = randn(r, n, 1.0, dt), rsf = to_f32(rstd), dx(n), dz_init = randn(r, nw, 1.0, dt);
        vec dzw_want = dz_init, init = randn(r, D, 0.1, CUDA_F32), want2;
        vec dwv = plus_twice(init, [&](double *acc) {
            gated_rmsnorm_bwd_cpu(dx.data(), s.hz ? dzw_want.data() + s.zoff : NULL, acc, g.data(), x.data(), zc,
                                  w.data(), rsf.data(), rows, D, s.zh, s.zld);
        }, &want2);
        dten dg = dput(g, dt), drsf = dput(rsf, CUDA_F32), ddx = dempty(n, dt), ddzw = dput(dz_init, dt);
        dten ddw = dempty(D, CUDA_F32), by = dempty(n, dt);
        void *dzp = s.hz ? (char *)ddzw.d + s.zoff * esz(dt) : NULL;
        snprintf(op, sizeof op, "gated_rmsnorm_narrow bwd rows%zu D%d zh%d zld%zu z%d", rows, D, s.zh, s.zld,
                 (int)s.hz);
        std::vector<out_check> bo = {{"dx", ddx, dx, {}, {}}, {"dw", ddw, dwv, init, want2}};
        if (s.hz) bo.push_back({"dz|rest", ddzw, dzw_want, dz_init, dzw_want});
        run_checks(op, dt,
                   [&]() {
                       cuda_gated_rmsnorm_bwd(dt, ddx.d, dzp, (float *)ddw.d, NULL, dg.d, dx_.d, zp, dw_.d,
                                              (const float *)drsf.d, rows, D, s.zh, s.zld, 0);
                   },
                   bo, true);
        // light: y again from the forward kernel's rstd, bitwise its y; the other outputs as without
        auto bwd = [&](void *yp) {
            upload(ddzw, dz_init);
            upload(ddw, init);
            cuda_gated_rmsnorm_bwd(dt, ddx.d, dzp, (float *)ddw.d, yp, dg.d, dx_.d, zp, dw_.d, (const float *)frs.d,
                                   rows, D, s.zh, s.zld, 0);
        };
        check_extra_output(op, dt, "y", fy, by, {ddx, ddw, ddzw}, bwd);
        for (bool light : {false, true}) {  // the narrow kernel, with and without y
            char op2[128];
            snprintf(op2, sizeof op2, "%s%s", op, light ? " +y" : "");
            norm_narrow_row(op2, dt, {ddx, ddw, ddzw}, []() {}, [&]() { bwd(light ? by.d : NULL); },
                         norm_narrow_bwd(dt, D, s.zld, 0, s.hz));
        }
    }
}

static void test_crossentropy(cuda_dtype dt, rng_t *r) {
    const int shapes[2][2] = {{64, 50304}, {16, 50257}};
    for (auto &sh : shapes) {
        const int N = sh[0], V = sh[1];
        const size_t n = (size_t)N * V;
        vec l(n);
        for (int i = 0; i < N; i++) {  // rows with offsets up to +-60: the max subtraction matters
            const double off = 20.0 * (i % 7 - 3);
            vec rr = randn(r, V, 2.0, dt, off);
            std::copy(rr.begin(), rr.end(), l.begin() + (size_t)i * V);
        }
        std::vector<int32_t> tgt(N);
        int valid = 0;
        for (int i = 0; i < N; i++) {
            tgt[i] = i % 5 == 3 ? -1 : (int32_t)rng_below(r, V);  // every 5th row ignored
            valid += tgt[i] >= 0;
        }
        const double scale = 1.0 / valid;
        vec loss(N), dl(n);
        crossentropy_fwd_cpu(loss.data(), l.data(), tgt.data(), N, V);
        crossentropy_bwd_cpu(dl.data(), l.data(), tgt.data(), N, V, scale);
        dten dlog = dempty(n, dt), dloss = dempty(N, CUDA_F32);
        int32_t *dtgt = dints(tgt);
        char op[64];
        snprintf(op, sizeof op, "crossentropy N%d V%d", N, V);
        run_checks(op, dt,
                   [&]() {
                       upload(dlog, l);  // the op overwrites its input
                       cuda_crossentropy(dt, dlog.d, (float *)dloss.d, dtgt, N, V, scale, 0);
                   },
                   {{"losses", dloss, loss, {}, {}}, {"dlogits", dlog, dl, {}, {}}}, true);
        // the small entries alone (the -scale at each target dominates the norm above)
        vec got = download(dlog), want = dl;
        for (int i = 0; i < N; i++)
            if (tgt[i] >= 0) got[(size_t)i * V + tgt[i]] = want[(size_t)i * V + tgt[i]] = 0.0;
        row(op, dtn(dt), "dlogits off-target", rel_l2(got.data(), want.data(), n), tol_of(dt));
        // scale 0: losses only, logits untouched
        upload(dlog, l);
        poison(dloss);
        cuda_crossentropy(dt, dlog.d, (float *)dloss.d, dtgt, N, V, 0.0, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        row(op, dtn(dt), "losses (scale 0)", rel_l2(download(dloss).data(), loss.data(), N), 1e-5);
        row_bool(op, dtn(dt), "logits kept (scale 0)", download(dlog) == l);
    }
}

static void test_dropout(cuda_dtype dt, rng_t *r) {
    const size_t n = 100001;
    const uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (double p : {0.1, 0.5}) {
        vec x = randn(r, n, 1.0, dt), g = randn(r, n, 1.0, dt), y(n), dx(n);
        dropout_fwd_cpu(y.data(), x.data(), n, p, seed);
        dropout_bwd_cpu(dx.data(), g.data(), n, p, seed);
        dten dx_ = dput(x, dt), dg = dput(g, dt), dy_ = dempty(n, dt), ddx = dempty(n, dt);
        char op[64];
        snprintf(op, sizeof op, "dropout_fwd p%.1f n%zu", p, n);
        run_checks(op, dt, [&]() { cuda_dropout_fwd(dt, dy_.d, dx_.d, n, p, seed, 0); }, {{"y", dy_, y, {}, {}}}, false);
        vec got = download(dy_);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += (got[i] == 0.0) != (rng_uniform_at(seed, i) < p);
        row(op, dtn(dt), "mask mismatches vs CPU", (double)bad, 0.0);
        snprintf(op, sizeof op, "dropout_bwd p%.1f n%zu", p, n);
        run_checks(op, dt, [&]() { cuda_dropout_bwd(dt, ddx.d, dg.d, n, p, seed, 0); }, {{"dx", ddx, dx, {}, {}}}, false);
        got = download(ddx);
        bad = 0;
        for (size_t i = 0; i < n; i++) bad += (got[i] == 0.0) != (rng_uniform_at(seed, i) < p);
        row(op, dtn(dt), "mask mismatches vs CPU", (double)bad, 0.0);
    }
    // p = 0: identity; p = 1: all dropped
    vec x = randn(r, n, 1.0, dt), zero(n, 0.0);
    dten dx_ = dput(x, dt), dy_ = dempty(n, dt);
    run_checks("dropout_fwd p0", dt, [&]() { cuda_dropout_fwd(dt, dy_.d, dx_.d, n, 0.0, seed, 0); },
               {{"y", dy_, x, {}, {}}}, false);
    run_checks("dropout_fwd p1", dt, [&]() { cuda_dropout_fwd(dt, dy_.d, dx_.d, n, 1.0, seed, 0); },
               {{"y", dy_, zero, {}, {}}}, false);
}

static void test_rope(cuda_dtype dt, rng_t *r) {
    const int shapes[2][4] = {{2, 300, 3, 64}, {1, 4096, 2, 128}};  // B, T, H, D
    const double base = 10000.0;
    for (auto &sh : shapes) {
        const int B = sh[0], T = sh[1], H = sh[2], D = sh[3];
        const size_t n = (size_t)B * T * H * D;
        vec x = randn(r, n, 1.0, dt), g = randn(r, n, 1.0, dt), y(n), dx(n);
        rope_fwd_cpu(y.data(), x.data(), B, T, H, D, base);
        rope_bwd_cpu(dx.data(), g.data(), B, T, H, D, base);
        dten dx_ = dput(x, dt), dg = dput(g, dt), dy_ = dempty(n, dt), ddx = dempty(n, dt), dip = dempty(n, dt);
        char op[64];
        snprintf(op, sizeof op, "rope_fwd B%d T%d H%d D%d", B, T, H, D);
        run_checks(op, dt, [&]() { cuda_rope_fwd(dt, dy_.d, dx_.d, B, T, H, D, base, NULL, 0); }, {{"y", dy_, y, {}, {}}},
                   false);
        snprintf(op, sizeof op, "rope_fwd B%d T%d H%d D%d in place", B, T, H, D);
        run_checks(op, dt,
                   [&]() {
                       upload(dip, x);
                       cuda_rope_fwd(dt, dip.d, dip.d, B, T, H, D, base, NULL, 0);
                   },
                   {{"y", dip, y, {}, {}}}, false);
        snprintf(op, sizeof op, "rope_bwd B%d T%d H%d D%d", B, T, H, D);
        run_checks(op, dt, [&]() { cuda_rope_bwd(dt, ddx.d, dg.d, B, T, H, D, base, NULL, 0); }, {{"dx", ddx, dx, {}, {}}},
                   false);
    }
}

// Two identical device copies of one AdamW state, [p, master, g, m, v] each: p = w rounded to dt
static void adamw_copies(dten (&s)[2][5], const vec &w, const vec &g, const vec &m, const vec &v, cuda_dtype dt) {
    vec pin(w.size());
    for (size_t i = 0; i < w.size(); i++) pin[i] = round_to(w[i], dt);
    for (auto &t : s) {
        t[0] = dput(pin, dt);
        t[1] = dput(w, CUDA_F32);
        t[2] = dput(g, CUDA_F32);
        t[3] = dput(m, CUDA_F32);
        t[4] = dput(v, CUDA_F32);
    }
}

// AdamW against backend_cpu.adamw (float64, its parameters are their own master weights):
// two steps from the same fp32 state; p, m, v and the update p_new - p_old are compared. n 10007
// runs the one-element kernel, n 10008 (aligned) the 4-wide one; then the 4-wide against the
// one-element kernel on the same values, bitwise.
static void test_adamw(rng_t *r) {
    const float lr = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.7f;
    struct mode {
        cuda_dtype dt;
        bool master;
    };
    for (const size_t n : {(size_t)10007, (size_t)10008})
    for (const mode &md : {mode{CUDA_F32, false}, mode{CUDA_BF16, true}, mode{CUDA_F32, true}}) {
        char op[64];
        snprintf(op, sizeof op, "adamw n%zu %s", n, md.master ? "master weights" : "in place (fp32)");
        vec w = randn(r, n, 1.0, CUDA_F32), m = randn(r, n, 0.01, CUDA_F32), v(n);
        for (auto &e : v) e = (double)(float)(1e-6 + 1e-3 * rng_uniform(r));
        dten dp = dempty(n, md.dt), dmaster = dempty(n, CUDA_F32), dgr = dempty(n, CUDA_F32);
        dten dm = dput(m, CUDA_F32), dv = dput(v, CUDA_F32);
        if (md.master) upload(dmaster, w);
        vec pin(n);
        for (size_t i = 0; i < n; i++) pin[i] = round_to(w[i], md.dt);
        upload(dp, pin);
        for (int step = 1; step <= 2; step++) {
            const int t = step + 2;
            const float bc1 = 1.f - powf(b1, (float)t), bc2 = 1.f - powf(b2, (float)t);
            vec g = randn(r, n, 0.05, CUDA_F32), w_old = w;
            upload(dgr, g);
            backend_cpu.adamw(w.data(), NULL, g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, bc1, bc2, gscale);
            const dten wt = md.master ? dmaster : dp;
            vec gw_old = download(wt);
            cuda_adamw(md.dt, dp.d, md.master ? (float *)dmaster.d : NULL, (const float *)dgr.d, (float *)dm.d,
                       (float *)dv.d, n, lr, b1, b2, eps, wd, bc1, bc2, gscale, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            vec gw = download(wt), du(n), cu(n);
            for (size_t i = 0; i < n; i++) {
                du[i] = gw[i] - gw_old[i];
                cu[i] = w[i] - w_old[i];
            }
            char what[64];
            snprintf(what, sizeof what, "step %d %s", step, md.master ? "master" : "p");
            row(op, dtn(md.dt), what, rel_l2(gw.data(), w.data(), n), 1e-5);
            snprintf(what, sizeof what, "step %d update", step);
            row(op, dtn(md.dt), what, rel_l2(du.data(), cu.data(), n), 1e-5);
            snprintf(what, sizeof what, "step %d m", step);
            row(op, dtn(md.dt), what, rel_l2(download(dm).data(), m.data(), n), 1e-5);
            snprintf(what, sizeof what, "step %d v", step);
            row(op, dtn(md.dt), what, rel_l2(download(dv).data(), v.data(), n), 1e-5);
            if (md.master) {
                vec gp = download(dp), rp(n);
                for (size_t i = 0; i < n; i++) rp[i] = round_to(gw[i], md.dt);
                snprintf(what, sizeof what, "step %d p = round(master)", step);
                row_bool(op, dtn(md.dt), what, gp == rp);
            }
        }
    }
    // 4-wide (n 10008 from an aligned start) against one-element (the same tensors from their
    // second element: misaligned), on identical values: elements 1.. must match bit for bit
    const size_t n = 10008;
    for (const mode &md : {mode{CUDA_F32, false}, mode{CUDA_BF16, true}}) {
        vec w = randn(r, n, 1.0, CUDA_F32), m = randn(r, n, 0.01, CUDA_F32), v(n), g = randn(r, n, 0.05, CUDA_F32);
        for (auto &e : v) e = (double)(float)(1e-6 + 1e-3 * rng_uniform(r));
        dten s[2][5];  // [run][p, master, g, m, v]
        adamw_copies(s, w, g, m, v, md.dt);
        for (int k = 0; k < 2; k++) {  // k = 1: one element in
            const size_t o = (size_t)k;
            cuda_adamw(md.dt, (char *)s[k][0].d + o * esz(md.dt), md.master ? (float *)s[k][1].d + o : NULL,
                       (const float *)s[k][2].d + o, (float *)s[k][3].d + o, (float *)s[k][4].d + o, n - o, lr, b1, b2,
                       eps, wd, 0.5f, 0.3f, gscale, 0);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        bool same = true;
        for (int j = 0; j < 5; j++) {
            const vec a = download(s[0][j]), b = download(s[1][j]);
            same = same && std::equal(a.begin() + 1, a.end(), b.begin() + 1);
        }
        row_bool(md.master ? "adamw 4-wide vs 1-wide master weights" : "adamw 4-wide vs 1-wide in place (fp32)",
                 dtn(md.dt), "p, master, m, v", same);
    }
}

// cuda_adamw_multi (one launch for many runs, optim.c's default) against cuda_adamw per run on
// the same arenas, bitwise: p, master, m, v over the whole arenas (the gaps between runs must stay
// as they were). Runs of both decays at awkward offsets and lengths (1, 3, not multiples of 4,
// gaps), 300 runs (three launches of at most 128), and ZeRO-1-like moments holding [m_lo, m_hi)
// only: m_lo a multiple of 4 (4-wide kernel) and not (one-element kernel).
static void test_adamw_multi(rng_t *r) {
    const float lr = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, gscale = 0.7f, bc1 = 0.5f, bc2 = 0.3f;
    const size_t N = 50021;
    struct mode {
        cuda_dtype dt;
        bool master;
    };
    struct layout {
        const char *name;
        size_t m_lo, m_hi;
        std::vector<cuda_adamw_seg> seg;
    };
    std::vector<layout> lays;
    lays.push_back({"runs", 0, N,
                    {{0, 1000, 0.1f}, {1000, 1003, 0.f}, {1032, 7777, 0.1f}, {7777, 7778, 0.f}, {7778, 7781, 0.2f},
                     {8000, 40001, 0.1f}, {40001, 50021, 0.f}}});
    {
        layout l{"300 runs", 0, N, {}};
        for (size_t k = 0, at = 3; k < 300; k++) {
            const size_t len = 1 + (k * 37) % 150, gap = (k % 3 == 0) ? 0 : 1 + k % 5;
            l.seg.push_back({at, at + len, (k % 2) ? 0.f : 0.1f});
            at += len + gap;
        }
        lays.push_back(l);
    }
    for (const size_t m_lo : {(size_t)12340, (size_t)12343}) {  // ZeRO-1-like: [m_lo, m_hi) of "runs"
        layout l{m_lo % 4 ? "shard, m_lo % 4 != 0" : "shard, m_lo % 4 == 0", m_lo, 31337, {}};
        for (const cuda_adamw_seg &sg : lays[0].seg) {
            const size_t a = GDN_MAX(sg.lo, l.m_lo), b = GDN_MIN(sg.hi, l.m_hi);
            if (a < b) l.seg.push_back({a, b, sg.wd});
        }
        lays.push_back(l);
    }
    for (const layout &l : lays)
    for (const mode &md : {mode{CUDA_F32, false}, mode{CUDA_BF16, true}, mode{CUDA_F32, true}}) {
        const size_t nm = l.m_hi - l.m_lo;
        vec w = randn(r, N, 1.0, CUDA_F32), g = randn(r, N, 0.05, CUDA_F32), m = randn(r, nm, 0.01, CUDA_F32), v(nm);
        for (auto &e : v) e = (double)(float)(1e-6 + 1e-3 * rng_uniform(r));
        dten s[2][5];  // [per-run, multi][p, master, g, m, v]
        adamw_copies(s, w, g, m, v, md.dt);
        float *mst[2] = {md.master ? (float *)s[0][1].d : NULL, md.master ? (float *)s[1][1].d : NULL};
        for (int step = 0; step < 2; step++) {
            for (const cuda_adamw_seg &sg : l.seg) {
                const size_t o = sg.lo - l.m_lo;
                cuda_adamw(md.dt, (char *)s[0][0].d + sg.lo * esz(md.dt), mst[0] ? mst[0] + sg.lo : NULL,
                           (const float *)s[0][2].d + sg.lo, (float *)s[0][3].d + o, (float *)s[0][4].d + o,
                           sg.hi - sg.lo, lr, b1, b2, eps, sg.wd, bc1, bc2, gscale, 0);
            }
            cuda_adamw_multi(md.dt, s[1][0].d, mst[1], (const float *)s[1][2].d, (float *)s[1][3].d,
                             (float *)s[1][4].d, l.m_lo, l.seg.data(), (int)l.seg.size(), lr, b1, b2, eps, bc1, bc2,
                             gscale, 0);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        bool same = true, moved = false;
        for (int j = 0; j < 5; j++) same = same && raw(s[0][j]) == raw(s[1][j]);
        moved = raw(s[1][3]) != raw(dput(m, CUDA_F32));  // the update ran at all
        char op[64];
        snprintf(op, sizeof op, "adamw_multi %s%s", l.name, md.master ? " master" : " in place");
        row_bool(op, dtn(md.dt), "== per run: p,master,m,v", same && moved);
    }
}

static void test_sumsq(rng_t *r) {
    // 300001: about one trip of four loads a thread; 5000003: the whole 1024-block grid, several
    // trips of four and a tail of single loads
    for (size_t n : {(size_t)300001, (size_t)5000003}) {
        vec x = randn(r, n, 1.0, CUDA_F32);
        double want = 0;
        for (double e : x) want += e * e;
        dten dx_ = dput(x, CUDA_F32);
        double *dout;
        CUDA_CHECK(cudaMalloc((void **)&dout, sizeof(double)));
        g_allocs.push_back(dout);
        double got[2];
        for (int k = 0; k < 2; k++) {
            CUDA_CHECK(cudaMemset(dout, 0xff, sizeof(double)));
            cuda_sumsq_f32(dout, (const float *)dx_.d, n, 0);
            CUDA_CHECK(cudaMemcpy(&got[k], dout, sizeof(double), cudaMemcpyDeviceToHost));
        }
        char op[64];
        snprintf(op, sizeof op, "sumsq_f32 n%zu", n);
        row(op, "fp32", "sum of squares", fabs(got[0] - want) / want, 1e-10);
        row_bool(op, "fp32", "two runs", memcmp(&got[0], &got[1], sizeof(double)) == 0);
    }
}

// Linear layers through cuBLASLt (gemm.h) against the CPU twins: y = x W^T, dx = dy W
// (=, and += onto a prefill), dW += dy^T x (also alone, dx NULL). Shapes: N 1 / 2 / 33 / 63 / 65 /
// 300; in and out off the 16-byte pack (72, 40, 36, 520) and narrow outputs (out 4 / 8: the
// model's a/b gate projections are out 4).
static void test_linear(cuda_dtype dt, rng_t *r) {
    const int shapes[][3] = {{1, 64, 128},  {2, 40, 8},     {63, 72, 40},    {65, 128, 4},
                             {33, 1024, 4}, {300, 1024, 8}, {300, 256, 520}, {2, 36, 8},
                             {64, 128, 800}};
    for (const auto &sh : shapes) {
        const int N = sh[0], in = sh[1], out = sh[2];
        const size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in;
        char op[80];
        vec x = randn(r, nx, 1.0, dt), W = randn(r, nw, 0.1, dt), y(ny);
        linear_fwd_cpu(y.data(), x.data(), W.data(), NULL, N, in, out);
        dten dx_ = dput(x, dt), dW_ = dput(W, dt), dy_ = dempty(ny, dt);
        snprintf(op, sizeof op, "linear_fwd N%d in%d out%d", N, in, out);
        run_checks(op, dt, [&]() { cuda_linear_fwd(dt, dy_.d, dx_.d, dW_.d, N, in, out, 0); },
                   {{"y", dy_, y, {}, {}}}, true);
        vec g = randn(r, ny, 1.0, dt), dxw(nx), initw = randn(r, nw, 0.1, CUDA_F32), wantw2;
        vec dW = plus_twice(initw, [&](double *acc) {
            linear_bwd_cpu(dxw.data(), acc, NULL, g.data(), x.data(), W.data(), N, in, out);
        }, &wantw2);
        dten dg = dput(g, dt), ddx = dempty(nx, dt), ddW = dempty(nw, CUDA_F32);
        snprintf(op, sizeof op, "linear_bwd N%d in%d out%d", N, in, out);
        run_checks(op, dt,
                   [&]() { cuda_linear_bwd(dt, ddx.d, (float *)ddW.d, dg.d, dx_.d, dW_.d, N, in, out, false, 0); },
                   {{"dx", ddx, dxw, {}, {}}, {"dW", ddW, dW, initw, wantw2}}, true);
        // dx += dy W: the prefill is an activation (dt), the sum rounded once per call
        vec initx = randn(r, nx, 1.0, dt), wantx2, dWs(nw);  // dWs: the CPU twin always adds dW
        vec dxa = plus_twice(initx, [&](double *acc) {
            linear_bwd_acc_cpu(acc, dWs.data(), NULL, g.data(), x.data(), W.data(), N, in, out);
        }, &wantx2);
        snprintf(op, sizeof op, "linear_bwd acc N%d in%d out%d", N, in, out);
        run_checks(op, dt,
                   [&]() { cuda_linear_bwd(dt, ddx.d, NULL, dg.d, dx_.d, dW_.d, N, in, out, true, 0); },
                   {{"dx (+=)", ddx, dxa, initx, wantx2}}, true);
        // dW alone (dx NULL)
        snprintf(op, sizeof op, "linear_bwd dW only N%d in%d out%d", N, in, out);
        run_checks(op, dt,
                   [&]() { cuda_linear_bwd(dt, NULL, (float *)ddW.d, dg.d, dx_.d, dW_.d, N, in, out, false, 0); },
                   {{"dW", ddW, dW, initw, wantw2}}, true);
    }
}

// GEMM algorithm tuning (gemm.cu tune_plan) must not change a bit: y = x W^T and dx = dy W
// (the beta = 0 GEMMs it tunes) with the heuristic's first algorithm and with the tuned one, at
// the model's shapes (fla-220m's, N cut to 4096 / 2048) and small ones. Each side starts from an
// empty plan cache (cuda_linear_set_tune drops it), picks its algorithm on a first call (tuning
// compares candidates on that call's operands), and is then compared on other operands, which
// the choice never saw.
static void test_linear_tune(cuda_dtype dt, rng_t *r) {
    const int shapes[][3] = {{4096, 1024, 1024}, {4096, 1024, 2816}, {4096, 2816, 1024},
                             {2048, 1024, 3080}, {2048, 1024, 32000}, {300, 256, 520}, {128, 64, 192},
                             {128, 192, 64}, {65, 128, 4}};
    for (const auto &sh : shapes) {
        const int N = sh[0], in = sh[1], out = sh[2];
        const size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in;
        dten x = dput(randn(r, nx, 1.0, dt), dt), W = dput(randn(r, nw, 0.1, dt), dt);
        dten g = dput(randn(r, ny, 1.0, dt), dt), y = dempty(ny, dt), dx = dempty(nx, dt);
        dten x2 = dput(randn(r, nx, 1.0, dt), dt), W2 = dput(randn(r, nw, 0.1, dt), dt);
        dten g2 = dput(randn(r, ny, 1.0, dt), dt);
        // dW += x^T dy (fp32, accumulating: tuned out of place) from the same fp32 start both times
        const std::vector<double> dw0 = randn(r, nw, 1.0, CUDA_F32);
        dten dW = dempty(nw, CUDA_F32);
        std::vector<unsigned char> yb[2], dxb[2], dwb[2];
        for (int tune = 0; tune < 2; tune++) {
            cuda_linear_set_tune(tune);
            upload(dW, dw0);
            cuda_linear_fwd(dt, y.d, x.d, W.d, N, in, out, 0);  // picks the algorithms
            cuda_linear_bwd(dt, dx.d, (float *)dW.d, g.d, x.d, W.d, N, in, out, false, 0);
            poison(y);
            poison(dx);
            upload(dW, dw0);
            cuda_linear_fwd(dt, y.d, x2.d, W2.d, N, in, out, 0);
            cuda_linear_bwd(dt, dx.d, (float *)dW.d, g2.d, x2.d, W2.d, N, in, out, false, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            yb[tune] = raw(y);
            dxb[tune] = raw(dx);
            dwb[tune] = raw(dW);
        }
        char op[80];
        snprintf(op, sizeof op, "linear tuned N%d in%d out%d", N, in, out);
        row_bool(op, dt == CUDA_BF16 ? "bf16" : "fp32", "y = untuned y (new operands)", yb[0] == yb[1]);
        row_bool(op, dt == CUDA_BF16 ? "bf16" : "fp32", "dx = untuned dx (new operands)", dxb[0] == dxb[1]);
        row_bool(op, dt == CUDA_BF16 ? "bf16" : "fp32", "dW += untuned dW += (new operands)", dwb[0] == dwb[1]);
    }
    cuda_linear_set_tune(-1);
    cuda_linear_tune_stats st = cuda_linear_get_tune_stats();
    printf("GEMM tuning so far: %d plans tuned, %d candidates run besides the first choices, %d of "
           "them dropped (output bits differed), %d plans not on the first choice\n", st.plans,
           st.candidates, st.dropped, st.changed);
}

// The command line's group filter (NULL: every group runs): only the test groups whose name
// contains it, e.g. "linear" for the GEMM rows
static const char *g_only = NULL;
static bool only(const char *group) { return !g_only || strstr(group, g_only) != NULL; }

int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
        fprintf(stderr, "usage: %s [GROUP_SUBSTRING]  (only the test groups whose name contains it)\n", argv[0]);
        return 2;
    }
    if (argc == 2) g_only = argv[1];
    // glibc: keep freed memory for reuse (no mmap'd blocks, no trimming). The large shapes
    // allocate and free host arrays of up to ~1 GB many times; handed back to the kernel, each
    // would be faulted in again, zero-filled, on the main thread (~100 GB of page faults a run).
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
    gpu_require("test_cuda_ops");
    cuda_linear_init();
    rng_t r;
    rng_init(&r, 20240601, 0);
    const double t0 = gdn_now();
    if (g_only) printf("filter \"%s\": only the test groups whose name contains it run\n", g_only);
    printf("\n%-38s %-5s %-26s %11s %9s  %s\n", "op", "dtype", "output", "rel_err", "tol", "result");
    // each group timed (the suite's wall time on the GPU machine is mostly the float64
    // references of the large shapes: the table says which groups to speed up)
    std::vector<std::pair<std::string, double>> took;
    auto group = [&](const char *name, const std::function<void()> &fn) {
        if (!only(name)) return;
        const double g0 = gdn_now();
        fn();
        for (auto &t : took)
            if (t.first == name) {
                t.second += gdn_now() - g0;
                return;
            }
        took.push_back({name, gdn_now() - g0});
    };
    for (cuda_dtype dt : {CUDA_F32, CUDA_BF16}) {
        group("embedding", [&] { test_embedding(dt, &r); });
        group("rmsnorm", [&] { test_rmsnorm(dt, &r); });
        group("add_rmsnorm", [&] { test_add_rmsnorm(dt, &r); });
        group("conv1d", [&] { test_conv1d(dt, &r); });
        group("conv_silu", [&] { test_conv_silu(dt, &r); });
        group("pointwise", [&] { test_pointwise(dt, &r); });
        group("l2norm", [&] { test_l2norm(dt, &r); });
        group("conv_silu3_l2", [&] { test_conv_silu3_l2(dt, &r); });
        group("gates", [&] { test_gates(dt, &r); });
        group("gated_rmsnorm", [&] { test_gated_rmsnorm(dt, &r); });
        group("crossentropy", [&] { test_crossentropy(dt, &r); });
        group("dropout", [&] { test_dropout(dt, &r); });
        group("rope", [&] { test_rope(dt, &r); });
    }
    group("conv_silu_ring", [&] {  // its own stream: the later groups draw what they drew before
        rng_t r3;
        rng_init(&r3, 20261213, 0);
        for (cuda_dtype dt : {CUDA_F32, CUDA_BF16}) test_conv_silu_ring(dt, &r3);
    });
    group("gated_rmsnorm_narrow", [&] {  // its own stream: the later groups draw what they drew before
        rng_t r4;
        rng_init(&r4, 20261214, 0);
        for (cuda_dtype dt : {CUDA_F32, CUDA_BF16}) test_gated_rmsnorm_narrow(dt, &r4);
    });
    group("convert", [&] { test_convert(&r); });
    group("adamw", [&] { test_adamw(&r); });
    group("adamw_multi", [&] {  // its own stream: the later groups draw what they drew before
        rng_t r2;
        rng_init(&r2, 20261130, 0);
        test_adamw_multi(&r2);
    });
    group("swiglu", [&] {  // its own stream: the later groups draw what they drew before
        rng_t r5;
        rng_init(&r5, 20261215, 0);
        for (cuda_dtype dt : {CUDA_F32, CUDA_BF16}) test_swiglu_strided(dt, &r5);
    });
    group("sumsq", [&] { test_sumsq(&r); });
    // last: a shape cuBLASLt finds no algorithm for stops the program (gdn_die), after the rest
    group("linear", [&] {
        for (cuda_dtype dt : {CUDA_F32, CUDA_BF16}) test_linear(dt, &r);
    });
    group("linear_tune", [&] {
        for (cuda_dtype dt : {CUDA_F32, CUDA_BF16}) test_linear_tune(dt, &r);
    });
    printf("\nseconds per group:");
    for (const auto &t : took) printf(" %s %.1f,", t.first.c_str(), t.second);
    printf("\n");
    for (void *p : g_allocs) CUDA_CHECK(cudaFree(p));
    printf("\nall runs and checks: %.1f s\n", gdn_now() - t0);
    return gc_finish("test_cuda_ops");
}
