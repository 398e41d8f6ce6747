// test_doc_ops.cu — document starts (doc_start, SPEC "Document resets") in the CUDA ops other
// than GDN: the causal conv1d and conv + SiLU (plain, tiled, ring and per-element kernels, the
// fused q/k L2 norm; forward and backward), RoPE (forward and backward) and attention (sliding
// window and full causal, D 64 and 128, forward and backward in both modes; the wgmma kernels and,
// forced by attn_params.kernels, the mma.sync kernels on a Hopper device; fp32), against the
// float64 CPU ops run on each document alone: a document [s, e) of row b is the contiguous
// (1, e - s) slice of the (B,T,...) tensors, so the reference is the existing CPU op on that view
// (dw accumulated over the documents). Rows: B = 3, the first with starts at 0, 1, 63, 64, 65,
// 127, 128, 129, 191, 192, 193 (offsets 0, 1, 63 / 64 / 65 of 64- and 128-token tiles, documents of
// one token), the second with two long documents and a last one of one token, the third one
// document. Attention windows smaller and larger than the documents (16, 100, full).
// Pass: the tolerances of test_cuda_ops (relative L2 <= 1e-2 bf16 / 1e-5 fp32 values; fp32
// statistics and parameter gradients <= 1e-5) and test_attention (<= 5e-3 forward, 1e-2 backward
// bf16, 1e-4 fp32). Outputs are NaN-filled before every run.
// Bitwise: every op with doc_start all 0 gives the bytes of doc_start NULL (the plain conv1d's
// backward excepted: with starts it runs the per-element kernels, whose dw sums in another order;
// and dq of the nondeterministic attention backward, which no two runs share).
// Exit 77 (skipped) without a GPU.
#include "gputest.h"
#include <array>
#include <atomic>
#include <functional>
#include <string.h>
#include <thread>
#include <vector>
#include <unistd.h>
extern "C" {
#include "../../src/bwd/bwd_cpu.h"
}
#include "../../src/cuda/ops.h"
#include "../../src/cuda/ops_testing.h"
#include "../../src/fwd/attention_cuda.h"
#include "../../src/fwd/attention_testing.h"
#include "op_buffers.h"

// ---- documents ------------------------------------------------------------------------------------
struct docs {
    int B, T;
    std::vector<int32_t> start;          // (B*T): doc_start
    std::vector<std::vector<int>> rows;  // per row: the document starts, then T
};
static docs make_docs(int B, int T) {
    docs d;
    d.B = B;
    d.T = T;
    const std::vector<std::vector<int>> want = {{0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193},
                                                {0, T / 3, T - 1},
                                                {0}};
    for (int b = 0; b < B; b++) {
        std::vector<int> r;
        for (int s : want[b % 3])
            if (s < T && (r.empty() || s > r.back())) r.push_back(s);
        r.push_back(T);
        d.rows.push_back(r);
        for (size_t i = 0; i + 1 < r.size(); i++)
            for (int t = r[i]; t < r[i + 1]; t++) d.start.push_back(r[i]);
    }
    return d;
}
// fn(b, s, len) for every document
static void each_doc(const docs &d, const std::function<void(int, int, int)> &fn) {
    for (int b = 0; b < d.B; b++)
        for (size_t i = 0; i + 1 < d.rows[b].size(); i++) fn(b, d.rows[b][i], d.rows[b][i + 1] - d.rows[b][i]);
}

static double norm2(const vec &x) {
    double s = 0;
    for (double v : x) s += v * v;
    return sqrt(s);
}
// relative L2 (NaN: inf); against `fallback` when the exact answer is identically 0
static double rel_err(const vec &got, const vec &ref, double fallback = 1.0) {
    double num = 0;
    for (size_t i = 0; i < got.size(); i++) num += (got[i] - ref[i]) * (got[i] - ref[i]);
    const double den = norm2(ref);
    const double e = sqrt(num) / (den > 0 ? den : fallback);
    return std::isnan(e) ? INFINITY : e;
}
static void row(const char *op, const char *what, double err, double tol) {
    const bool ok = err <= tol;
    printf("  %-44s %-22s rel %.3e (tol %.0e)  %s\n", op, what, err, tol, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}
static void row_bool(const char *op, const char *what, bool ok) {
    printf("  %-44s %-40s %s\n", op, what, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}

// One output of a run: its device tensor, the reference, the tolerance, and the value it starts
// from (accumulating outputs: dw) or empty (poisoned).
struct out_check {
    const char *name;
    dten t;
    vec want;
    double tol;
    vec init;
};
static void reset(const std::vector<out_check> &outs) {
    for (const auto &o : outs) {
        if (o.init.empty()) poison(o.t);
        else upload(o.t, o.init);
    }
}
// fn(doc) with the documents: every output against its reference; then fn(zeros) and fn(NULL),
// byte for byte the same outputs (bitwise: which of them).
static void run_doc_op(const char *op, const std::function<void(const int32_t *)> &fn, const int32_t *doc,
                       const int32_t *zeros, const std::vector<out_check> &outs, const std::vector<bool> &bitwise) {
    reset(outs);
    fn(doc);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto &o : outs) row(op, o.name, rel_err(download(o.t), o.want), o.tol);
    std::vector<std::vector<unsigned char>> a, b;
    reset(outs);
    fn(zeros);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto &o : outs) a.push_back(raw(o.t));
    reset(outs);
    fn(NULL);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto &o : outs) b.push_back(raw(o.t));
    for (size_t i = 0; i < outs.size(); i++)
        if (bitwise[i]) {
            char what[64];
            snprintf(what, sizeof what, "%s: starts all 0 = NULL, bitwise", outs[i].name);
            row_bool(op, what, a[i] == b[i]);
        }
}

// ---- conv1d, conv + SiLU ----------------------------------------------------------------------------
// conv_silu3 with C0, C1, C2 channels of x's rows (ld apart): the reference per document and
// segment (dw += over the documents)
static void conv3_ref_fwd(std::vector<vec> &y, const docs &d, const vec &x, const vec &w, const int cw[3], int K,
                          size_t ld) {
    int c0 = 0;
    for (int i = 0; i < 3; c0 += cw[i], i++) {
        y[i].assign((size_t)d.B * d.T * cw[i], 0.0);
        if (!cw[i]) continue;
        each_doc(d, [&](int b, int s, int len) {
            const size_t r = (size_t)b * d.T + s;
            conv_silu_fwd_cpu(y[i].data() + r * cw[i], x.data() + r * ld + c0, w.data() + (size_t)c0 * K, 1, len,
                              cw[i], K, ld);
        });
    }
}
static void conv3_ref_bwd(vec &dx, vec &dw, const docs &d, const std::vector<vec> &g, const vec &x, const vec &w,
                          const int cw[3], int K, size_t ld) {
    int c0 = 0;
    for (int i = 0; i < 3; c0 += cw[i], i++) {
        if (!cw[i]) continue;
        each_doc(d, [&](int b, int s, int len) {
            const size_t r = (size_t)b * d.T + s;
            conv_silu_bwd_cpu(dx.data() + r * ld + c0, dw.data() + (size_t)c0 * K, g[i].data() + r * cw[i],
                              x.data() + r * ld + c0, w.data() + (size_t)c0 * K, 1, len, cw[i], K, ld);
        });
    }
}

static void test_conv(cuda_dtype dt, rng_t *r) {
    const docs d = make_docs(3, 300);
    const int B = d.B, T = d.T;
    const size_t N = (size_t)B * T;
    const int32_t *doc = dints(d.start), *zeros = dints(std::vector<int32_t>(N, 0));
    char op[96];

    // plain conv1d (C on the pack: the tiled kernels without starts, the per-element ones with)
    {
        const int C = 64, K = 4;
        vec x = randn(r, N * C, 1.0, dt), w = randn(r, (size_t)C * K, 0.5, dt), y(N * C, 0.0);
        each_doc(d, [&](int b, int s, int len) {
            const size_t o = ((size_t)b * T + s) * C;
            conv1d_fwd_cpu(y.data() + o, x.data() + o, w.data(), 1, len, C, K);
        });
        dten dx_ = dput(x, dt), dw_ = dput(w, dt), dy_ = dempty(N * C, dt);
        snprintf(op, sizeof op, "conv1d_fwd %s C%d K%d", dtn(dt), C, K);
        run_doc_op(op, [&](const int32_t *ds) { cuda_conv1d_fwd(dt, dy_.d, dx_.d, dw_.d, B, T, C, K, ds, 0); }, doc,
                   zeros, {{"y", dy_, y, tol_of(dt), {}}}, {true});
        vec g = randn(r, N * C, 1.0, dt), dx(N * C, 0.0), dw((size_t)C * K, 0.0);
        each_doc(d, [&](int b, int s, int len) {
            const size_t o = ((size_t)b * T + s) * C;
            conv1d_bwd_cpu(dx.data() + o, dw.data(), g.data() + o, x.data() + o, w.data(), 1, len, C, K);
        });
        dten dg = dput(g, dt), ddx = dempty(N * C, dt), ddw = dempty((size_t)C * K, CUDA_F32);
        snprintf(op, sizeof op, "conv1d_bwd %s C%d K%d", dtn(dt), C, K);
        run_doc_op(op,
                   [&](const int32_t *ds) {
                       cuda_conv1d_bwd(dt, ddx.d, (float *)ddw.d, dg.d, dx_.d, dw_.d, B, T, C, K, ds, 0);
                   },
                   doc, zeros, {{"dx", ddx, dx, tol_of(dt), {}}, {"dw", ddw, dw, 1e-5, vec((size_t)C * K, 0.0)}},
                   {true, false});
    }

    // conv + SiLU: the tiled forward and ring backward (C 64, K 4 and 2), the per-element kernels
    // (C 37, K 3); then the model's call: q, k, v of strided rows, forward with the L2 norm (ring)
    const int shapes[][2] = {{64, 4}, {64, 2}, {37, 3}};
    for (const auto &sh : shapes) {
        const int C = sh[0], K = sh[1], cw[3] = {C, 0, 0};
        const bool tiled = C % 4 == 0;
        vec x = randn(r, N * C, 1.0, dt), w = randn(r, (size_t)C * K, 0.5, dt);
        std::vector<vec> y(3);
        conv3_ref_fwd(y, d, x, w, cw, K, C);
        dten dx_ = dput(x, dt), dw_ = dput(w, dt), dy_ = dempty(N * C, dt);
        snprintf(op, sizeof op, "conv_silu_fwd %s C%d K%d (%s)", dtn(dt), C, K, tiled ? "tiled" : "per element");
        run_doc_op(op, [&](const int32_t *ds) { cuda_conv_silu_fwd(dt, dy_.d, dx_.d, dw_.d, B, T, C, K, C, ds, 0); },
                   doc, zeros, {{"y", dy_, y[0], tol_of(dt), {}}}, {true});
        std::vector<vec> g = {randn(r, N * C, 1.0, dt), {}, {}};
        vec dx(N * C, 0.0), dw((size_t)C * K, 0.0);
        conv3_ref_bwd(dx, dw, d, g, x, w, cw, K, C);
        dten dg = dput(g[0], dt), ddx = dempty(N * C, dt), ddw = dempty((size_t)C * K, CUDA_F32);
        snprintf(op, sizeof op, "conv_silu_bwd %s C%d K%d (%s)", dtn(dt), C, K, tiled ? "ring" : "per element");
        auto bwd = [&](const int32_t *ds) {
            cuda_conv_silu_bwd(dt, ddx.d, (float *)ddw.d, dg.d, dx_.d, dw_.d, B, T, C, K, C, ds, 0);
        };
        run_doc_op(op, bwd, doc, zeros, {{"dx", ddx, dx, tol_of(dt), {}}, {"dw", ddw, dw, 1e-5, vec((size_t)C * K, 0.0)}},
                   {true, true});
        const unsigned long n0 = cuda_conv_silu_ring_launches();
        bwd(doc);
        CUDA_CHECK(cudaDeviceSynchronize());
        const bool ran = cuda_conv_silu_ring_launches() != n0;
        row_bool(op, tiled ? "with starts: the ring kernel ran" : "no ring kernel", ran == tiled);
    }
    {
        const int nd = 64, K = 4, cw[3] = {128, 128, 256};
        const size_t ld = 512 + 64;  // q, k, v: columns of a wider projection output
        const double eps = 1e-6, s0 = 0.125;
        vec x = randn(r, N * ld, 1.0, dt), w = randn(r, 512 * K, 0.5, dt);
        std::vector<vec> y(3);
        conv3_ref_fwd(y, d, x, w, cw, K, ld);
        vec rn[2];
        for (int i = 0; i < 2; i++) {  // the in-kernel norm of the fp32 conv output
            rn[i].resize(N * cw[i] / nd);
            l2norm_fwd_cpu(y[i].data(), rn[i].data(), y[i].data(), N * cw[i] / nd, nd, eps, i ? 1.0 : s0);
        }
        dten dx_ = dput(x, dt), dw_ = dput(w, dt), y0 = dempty(N * cw[0], dt), y1 = dempty(N * cw[1], dt),
             y2 = dempty(N * cw[2], dt), r0 = dempty(N * cw[0] / nd, CUDA_F32), r1 = dempty(N * cw[1] / nd, CUDA_F32);
        snprintf(op, sizeof op, "conv_silu3_l2_fwd %s C128+128+256 nd%d ld%zu", dtn(dt), nd, ld);
        const unsigned long n0 = cuda_conv_silu_ring_launches();
        run_doc_op(op,
                   [&](const int32_t *ds) {
                       cuda_conv_silu3_l2_fwd(dt, y0.d, y1.d, y2.d, (float *)r0.d, (float *)r1.d, dx_.d, dw_.d, B, T,
                                              cw[0], cw[1], cw[2], K, ld, nd, eps, s0, 1.0, ds, 0);
                   },
                   doc, zeros,
                   {{"q", y0, y[0], tol_of(dt), {}}, {"k", y1, y[1], tol_of(dt), {}}, {"v", y2, y[2], tol_of(dt), {}},
                    {"rnorm q", r0, rn[0], 1e-5, {}}, {"rnorm k", r1, rn[1], 1e-5, {}}},
                   {true, true, true, true, true});
        row_bool(op, "the ring kernel ran (3 calls)", cuda_conv_silu_ring_launches() == n0 + 3);
        std::vector<vec> g = {randn(r, N * cw[0], 1.0, dt), randn(r, N * cw[1], 1.0, dt), randn(r, N * cw[2], 1.0, dt)};
        vec dx(N * ld, 0.0), dw(512 * K, 0.0);
        conv3_ref_bwd(dx, dw, d, g, x, w, cw, K, ld);
        dten g0 = dput(g[0], dt), g1 = dput(g[1], dt), g2 = dput(g[2], dt), ddx = dempty(N * ld, dt),
             ddw = dempty(512 * K, CUDA_F32);
        // dx's columns past 512 are not written: both sides 0 there
        snprintf(op, sizeof op, "conv_silu3_bwd %s C128+128+256 ld%zu", dtn(dt), ld);
        run_doc_op(op,
                   [&](const int32_t *ds) {
                       CUDA_CHECK(cudaMemset(ddx.d, 0, N * ld * esz(dt)));
                       cuda_conv_silu3_bwd(dt, ddx.d, (float *)ddw.d, g0.d, g1.d, g2.d, dx_.d, dw_.d, B, T, cw[0],
                                           cw[1], cw[2], K, ld, ds, 0);
                   },
                   doc, zeros, {{"dx", ddx, dx, tol_of(dt), {}}, {"dw", ddw, dw, 1e-5, vec(512 * K, 0.0)}},
                   {true, true});
    }
}

// ---- RoPE -------------------------------------------------------------------------------------------
static void test_rope(cuda_dtype dt, rng_t *r) {
    const docs d = make_docs(3, 300);
    const int B = d.B, T = d.T, H = 2, D = 64;
    const double base = 10000.0;
    const size_t N = (size_t)B * T, n = N * H * D;
    const int32_t *doc = dints(d.start), *zeros = dints(std::vector<int32_t>(N, 0));
    vec x = randn(r, n, 1.0, dt), y(n), g = randn(r, n, 1.0, dt), dx(n);
    each_doc(d, [&](int b, int s, int len) {
        const size_t o = ((size_t)b * T + s) * H * D;
        rope_fwd_cpu(y.data() + o, x.data() + o, 1, len, H, D, base);
        rope_bwd_cpu(dx.data() + o, g.data() + o, 1, len, H, D, base);
    });
    dten dx_ = dput(x, dt), dy_ = dempty(n, dt), dg = dput(g, dt), ddx = dempty(n, dt);
    char op[64];
    snprintf(op, sizeof op, "rope_fwd %s H%d D%d", dtn(dt), H, D);
    run_doc_op(op, [&](const int32_t *ds) { cuda_rope_fwd(dt, dy_.d, dx_.d, B, T, H, D, base, ds, 0); }, doc, zeros,
               {{"y", dy_, y, tol_of(dt), {}}}, {true});
    snprintf(op, sizeof op, "rope_bwd %s H%d D%d", dtn(dt), H, D);
    run_doc_op(op, [&](const int32_t *ds) { cuda_rope_bwd(dt, ddx.d, dg.d, B, T, H, D, base, ds, 0); }, doc, zeros,
               {{"dx", ddx, dx, tol_of(dt), {}}}, {true});
}

// ---- attention ------------------------------------------------------------------------------------
struct attn_cfg {
    int W, D;
    vec q, k, v, dO;                // (B,T,H,D), bf16-rounded
    vec o, lse, dq, dk, dv;         // reference
};
// The reference of document [s, s + len) of row b: the CPU ops on its (1, len, H, D) view; lse
// from (1, H, len) into (B, H, T).
static void attn_ref_doc(attn_cfg *c, const docs &d, int H, int b, int s, int len) {
    const int T = d.T, D = c->D;
    const size_t o = ((size_t)b * T + s) * H * D;
    const double scale = 1.0 / sqrt((double)D);
    vec lse((size_t)H * len);
    attention_fwd_cpu(c->o.data() + o, lse.data(), c->q.data() + o, c->k.data() + o, c->v.data() + o, 1, len, H, D,
                      c->W, scale);
    attention_bwd_cpu(c->dq.data() + o, c->dk.data() + o, c->dv.data() + o, c->dO.data() + o, c->q.data() + o,
                      c->k.data() + o, c->v.data() + o, c->o.data() + o, lse.data(), 1, len, H, D, c->W, scale);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < len; t++) c->lse[((size_t)b * H + h) * T + s + t] = lse[(size_t)h * len + t];
}

static void test_attention(rng_t *r) {
    const docs d = make_docs(3, 640);
    const int B = d.B, T = d.T, H = 2;
    const size_t N = (size_t)B * T;
    const int32_t *doc = dints(d.start), *zeros = dints(std::vector<int32_t>(N, 0));
    const bool fwd_wg = attention_fwd_wgmma_available(), bwd_wg = attention_bwd_wgmma_available();
    printf("attention: bf16 on %s\n", fwd_wg || bwd_wg ? "the wgmma kernels and (kernels = mma) the mma.sync kernels"
                                                       : "the mma.sync kernels");
    std::vector<attn_cfg *> cfgs;
    for (int D : {64, 128})
        for (int W : {16, 100, T + 7}) {
            attn_cfg *c = new attn_cfg;
            c->W = W;
            c->D = D;
            const size_t n = N * H * D;
            for (vec *x : {&c->q, &c->k, &c->v, &c->dO}) *x = randn(r, n, 1.0, CUDA_BF16);
            for (vec *x : {&c->o, &c->dq, &c->dk, &c->dv}) x->assign(n, 0.0);
            c->lse.assign(N * H, 0.0);
            cfgs.push_back(c);
        }
    // the reference on every core, one task per (config, document)
    double t0 = gdn_now();
    std::vector<std::pair<attn_cfg *, std::array<int, 3>>> tasks;
    for (attn_cfg *c : cfgs) each_doc(d, [&](int b, int s, int len) { tasks.push_back({c, {b, s, len}}); });
    std::atomic<size_t> next(0);
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    std::vector<std::thread> pool;
    for (long i = 0; i < (ncpu > 0 ? ncpu : 1); i++)
        pool.emplace_back([&]() {
            for (size_t t; (t = next.fetch_add(1)) < tasks.size();)
                attn_ref_doc(tasks[t].first, d, H, tasks[t].second[0], tasks[t].second[1], tasks[t].second[2]);
        });
    for (auto &th : pool) th.join();
    printf("attention reference: %zu documents, %.1f s\n", tasks.size(), gdn_now() - t0);

    std::vector<std::pair<attn_dtype, attn_kernels>> runs = {{ATTN_DTYPE_BF16, ATTN_KERNELS_AUTO}};
    if (fwd_wg || bwd_wg) runs.push_back({ATTN_DTYPE_BF16, ATTN_KERNELS_MMA_SYNC});
    runs.push_back({ATTN_DTYPE_FP32, ATTN_KERNELS_AUTO});
    for (attn_cfg *c : cfgs)
        for (const auto &run : runs) {
            const bool bf16 = run.first == ATTN_DTYPE_BF16, forced = run.second == ATTN_KERNELS_MMA_SYNC;
            const cuda_dtype dt = bf16 ? CUDA_BF16 : CUDA_F32;
            const char *kname = !bf16 ? "fp32" : forced || !(fwd_wg || bwd_wg) ? "bf16 mma" : "bf16 wgmma";
            const size_t n = c->q.size();
            attn_params p = {};
            p.B = B; p.T = T; p.H = H; p.D = c->D; p.window = c->W;
            p.scale = (float)(1.0 / sqrt((double)c->D));
            p.dtype = run.first;
            p.kernels = run.second;
            dten q = dput(c->q, dt), k = dput(c->k, dt), v = dput(c->v, dt), dO = dput(c->dO, dt);
            dten o = dempty(n, dt), dq = dempty(n, dt), dk = dempty(n, dt), dv = dempty(n, dt);
            dten lse = dempty(N * H, CUDA_F32);
            p.nondeterministic = 1;  // the larger workspace, used by both modes
            dten ws = dempty(attention_workspace_bytes(&p) / 4, CUDA_F32);
            p.nondeterministic = 0;
            p.q = q.d; p.k = k.d; p.v = v.d; p.o = o.d; p.lse = (float *)lse.d;
            p.dO = dO.d; p.dq = dq.d; p.dk = dk.d; p.dv = dv.d; p.workspace = ws.d;
            const double tf = bf16 ? 5e-3 : 1e-4, tb = bf16 ? 1e-2 : 1e-4;
            char op[96];
            snprintf(op, sizeof op, "attention_fwd %s D%d window %d", kname, c->D, c->W);
            const unsigned long f0 = attention_fwd_wgmma_launches();
            run_doc_op(op,
                       [&](const int32_t *ds) {
                           p.doc_start = ds;
                           attention_fwd(&p);
                       },
                       doc, zeros, {{"o", o, c->o, tf, {}}, {"lse", lse, c->lse, tf, {}}}, {true, true});
            if (bf16 && fwd_wg && !forced) row_bool(op, "wgmma kernel ran (3 calls)", attention_fwd_wgmma_launches() == f0 + 3);
            if (forced) row_bool(op, "kernels = mma: no wgmma kernel", attention_fwd_wgmma_launches() == f0);
            // the backward on the forward's o and lse with the documents
            p.doc_start = doc;
            attention_fwd(&p);
            for (int nondet = 0; nondet < 2; nondet++) {
                snprintf(op, sizeof op, "attention_bwd %s D%d window %d %s", kname, c->D, c->W, nondet ? "nondet" : "det");
                const unsigned long b0 = attention_bwd_wgmma_launches();
                run_doc_op(op,
                           [&](const int32_t *ds) {
                               CUDA_CHECK(cudaMemset(ws.d, 0xff, ws.n * 4));
                               p.doc_start = ds;
                               p.nondeterministic = nondet;
                               attention_bwd(&p);
                               p.nondeterministic = 0;
                           },
                           doc, zeros,
                           {{"dq", dq, c->dq, tb, {}}, {"dk", dk, c->dk, tb, {}}, {"dv", dv, c->dv, tb, {}}},
                           {!(nondet && bf16), true, true});
                if (bf16 && bwd_wg && !forced)
                    row_bool(op, "wgmma kernels ran (3 calls)", attention_bwd_wgmma_launches() == b0 + 3 * (nondet ? 1 : 2));
                if (forced) row_bool(op, "kernels = mma: no wgmma kernel", attention_bwd_wgmma_launches() == b0);
            }
            p.doc_start = NULL;
        }
    for (attn_cfg *c : cfgs) delete c;
}

int main() {
    gpu_require("test_doc_ops");
    const double t0 = gdn_now();
    rng_t r;
    rng_init(&r, 31, 0);
    for (cuda_dtype dt : {CUDA_F32, CUDA_BF16}) {
        test_conv(dt, &r);
        test_rope(dt, &r);
    }
    test_attention(&r);
    for (void *p : g_allocs) CUDA_CHECK(cudaFree(p));
    printf("test_doc_ops: %.1f s\n", gdn_now() - t0);
    return gc_finish("test_doc_ops");
}
