// test_attention.cu — the CUDA attention (src/fwd/attention.cu, src/bwd/attention.cu) against
// the float64 CPU oracle (attention_fwd_cpu / attention_bwd_cpu) for T in {1, 63, 64, 65, 300,
// 4096}, windows {1, 64, 2048, >= T}, head dims 64 and 128, bf16 and fp32, random q, k, v, dO.
// Inputs are drawn in float64 and rounded to bf16 once, so the same rounded values feed the
// oracle and both dtypes (exactly representable in fp32 too). o, lse, dq, dk, dv and the
// workspace are poisoned with NaN before every run. The backward runs on the GPU's own o and lse.
// Pass: relative L2 <= 5e-3 (fwd) / 1e-2 (bwd) for bf16, <= 1e-4 for fp32. A gradient whose
// exact value is 0 (window 1: dq = dk = 0) is measured against ||dv|| instead.
// Every backward runs twice: deterministic (nondeterministic = 0) and with dq by atomics
// (nondeterministic = 1; for fp32 the same deterministic passes), same tolerances, outputs and
// workspace poisoned again before each. Also: the deterministic backward is bitwise
// reproducible (dq, dk, dv; two runs compared byte for byte), and in the nondeterministic mode
// dk and dv still are.
// On a Hopper device (compute capability 9.x, binary with the sm_90a image) every bf16 case runs
// twice, with the same checks and tolerances: on the default wgmma kernels (kernels "wgmma":
// attention_fwd_wgmma_kernel and attention_bwd_*_wgmma_kernel, TMA producer warpgroup), where the
// launch counters of attention_testing.h must show that every call ran them (1 forward launch, 2
// backward launches per deterministic call and 1 per nondeterministic one), so that a silent
// fallback to the mma.sync kernels fails; and with attn_params.kernels = ATTN_KERNELS_MMA_SYNC
// (kernels "mma"), the portable sm_80 kernels, where the counters must not move. Elsewhere the
// bf16 cases run once, on mma.sync. The backward always reads the forward's o and lse, so every
// row also checks the backward on them.
// The oracle runs on all CPU cores, one task per (config, head).
#include "gputest.h"
#include <atomic>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>
#include <unistd.h>
extern "C" {
#include "../../src/bwd/bwd_cpu.h"
}
#include "../../src/fwd/attention_cuda.h"
#include "../../src/fwd/attention_testing.h"

struct cfg {
    int T, W, D;
    int B, H;
    std::vector<double> q, k, v, dO;           // (B,T,H,D), bf16-rounded
    std::vector<double> o, lse, dq, dk, dv;     // oracle
};

static double bf16_round(double x) { return (double)__bfloat162float(__float2bfloat16((float)x)); }

// Oracle for head (b, h) of c: gather to (1,T,1,D), run, scatter.
static void oracle_head(cfg *c, int bh) {
    const int b = bh / c->H, h = bh % c->H, T = c->T, D = c->D, H = c->H;
    const size_t n = (size_t)T * D;
    std::vector<double> q(n), k(n), v(n), dO(n), o(n), lse(T), dq(n), dk(n), dv(n);
    for (int t = 0; t < T; t++)
        for (int e = 0; e < D; e++) {
            const size_t g = (((size_t)b * T + t) * H + h) * D + e, l = (size_t)t * D + e;
            q[l] = c->q[g]; k[l] = c->k[g]; v[l] = c->v[g]; dO[l] = c->dO[g];
        }
    const double scale = 1.0 / sqrt((double)D);
    attention_fwd_cpu(o.data(), lse.data(), q.data(), k.data(), v.data(), 1, T, 1, D, c->W, scale);
    attention_bwd_cpu(dq.data(), dk.data(), dv.data(), dO.data(), q.data(), k.data(), v.data(), o.data(),
                      lse.data(), 1, T, 1, D, c->W, scale);
    for (int t = 0; t < T; t++) {
        c->lse[((size_t)b * H + h) * T + t] = lse[t];
        for (int e = 0; e < D; e++) {
            const size_t g = (((size_t)b * T + t) * H + h) * D + e, l = (size_t)t * D + e;
            c->o[g] = o[l]; c->dq[g] = dq[l]; c->dk[g] = dk[l]; c->dv[g] = dv[l];
        }
    }
}

struct dev_bufs {
    void *q, *k, *v, *o, *dO, *dq, *dk, *dv, *ws;
    float *lse;
};

static void upload(void *d, const std::vector<double> &x, attn_dtype dt) {
    const size_t n = x.size();
    if (dt == ATTN_DTYPE_BF16) {
        std::vector<__nv_bfloat16> h(n);
        for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16((float)x[i]);
        CUDA_CHECK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
    } else {
        std::vector<float> h(n);
        for (size_t i = 0; i < n; i++) h[i] = (float)x[i];
        CUDA_CHECK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice));
    }
}
static std::vector<double> download(const void *d, size_t n, attn_dtype dt) {
    std::vector<double> x(n);
    if (dt == ATTN_DTYPE_BF16) {
        std::vector<__nv_bfloat16> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) x[i] = __bfloat162float(h[i]);
    } else {
        std::vector<float> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) x[i] = h[i];
    }
    return x;
}
static double norm2(const std::vector<double> &x) {
    double s = 0;
    for (double v : x) s += v * v;
    return sqrt(s);
}
// relative L2; against `fallback` norm when the exact answer is identically 0
static double rel_err(const std::vector<double> &got, const std::vector<double> &ref, double fallback) {
    double num = 0;
    for (size_t i = 0; i < got.size(); i++) num += (got[i] - ref[i]) * (got[i] - ref[i]);
    const double den = norm2(ref);
    const double e = sqrt(num) / (den > 0 ? den : fallback);
    return std::isnan(e) ? INFINITY : e;
}

int main() {
    gpu_require("test_attention");
    // on the wgmma path every bf16 call must launch the wgmma kernels (header)
    const bool fwd_wg = attention_fwd_wgmma_available(), bwd_wg = attention_bwd_wgmma_available();
    printf("bf16 forward: %s\n", fwd_wg ? "wgmma kernel attention_fwd_wgmma_kernel (sm_90a; TMA producer, 2 K/V "
                                          "stages, consumer ping-pong), and the mma.sync kernel (kernels = mma)"
                                        : "mma.sync kernel");
    printf("bf16 backward: %s\n", bwd_wg ? "wgmma kernels attention_bwd_*_wgmma_kernel (sm_90a; TMA producer, 2 "
                                           "stages), and the mma.sync kernels (kernels = mma)"
                                         : "mma.sync kernels");
    const int Ts[] = {1, 63, 64, 65, 300, 4096};
    const int Ds[] = {64, 128};
    std::vector<cfg *> cfgs;
    rng_t r;
    rng_init(&r, 6, 0);
    for (int T : Ts)
        for (int D : Ds) {
            const int Ws[] = {1, 64, 2048, T + 7};  // T + 7 >= T: full causal
            for (int W : Ws) {
                cfg *c = new cfg;
                c->T = T; c->W = W; c->D = D; c->B = 2; c->H = 2;
                const size_t n = (size_t)c->B * T * c->H * D;
                for (auto *x : {&c->q, &c->k, &c->v, &c->dO}) {
                    x->resize(n);
                    for (auto &e : *x) e = bf16_round(rng_normal(&r));
                }
                c->o.resize(n); c->dq.resize(n); c->dk.resize(n); c->dv.resize(n);
                c->lse.resize((size_t)c->B * c->H * T);
                cfgs.push_back(c);
            }
        }

    int fwd_wg_checks = 0, fwd_wg_ran = 0, bwd_wg_checks = 0, bwd_wg_ran = 0, mma_checks = 0, mma_ran = 0;
    // oracle on every core, biggest tasks first
    double t0 = gdn_now();
    std::vector<std::pair<cfg *, int>> tasks;
    for (int pass = 0; pass < 2; pass++)
        for (cfg *c : cfgs)
            if ((c->T >= 1024) == (pass == 0))
                for (int bh = 0; bh < c->B * c->H; bh++) tasks.push_back({c, bh});
    std::atomic<size_t> next(0);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const int nth = (int)(ncpu > 0 ? ncpu : 1);
    std::vector<std::thread> pool;
    for (int i = 0; i < nth; i++)
        pool.emplace_back([&]() {
            for (size_t t; (t = next.fetch_add(1)) < tasks.size();) oracle_head(tasks[t].first, tasks[t].second);
        });
    for (auto &th : pool) th.join();
    printf("float64 oracle: %zu configs, %zu head tasks on %d threads, %.1f s\n", cfgs.size(), tasks.size(), nth,
           gdn_now() - t0);

    printf("\n%5s %6s %4s %5s %7s %6s | %9s %9s | %9s %9s %9s | %s\n", "T", "window", "D", "dtype", "kernels",
           "mode", "o", "lse", "dq", "dk", "dv", "result");
    t0 = gdn_now();
    // (dtype, kernels) of each run of a config: bf16 on the default kernels, bf16 forced onto
    // mma.sync where the default is wgmma, fp32 (one path)
    std::vector<std::pair<attn_dtype, attn_kernels>> runs = {{ATTN_DTYPE_BF16, ATTN_KERNELS_AUTO}};
    if (fwd_wg || bwd_wg) runs.push_back({ATTN_DTYPE_BF16, ATTN_KERNELS_MMA_SYNC});
    runs.push_back({ATTN_DTYPE_FP32, ATTN_KERNELS_AUTO});
    for (cfg *c : cfgs)
        for (const auto &run : runs) {
            const attn_dtype dt = run.first;
            const bool bf16 = dt == ATTN_DTYPE_BF16, forced = run.second == ATTN_KERNELS_MMA_SYNC;
            // which kernels this run's bf16 calls must launch: wgmma (launch counters + 1, + 2) or mma.sync (+ 0)
            const bool want_fwd_wg = bf16 && fwd_wg && !forced, want_bwd_wg = bf16 && bwd_wg && !forced;
            const char *kname = !bf16 ? "fp32" : forced || !(fwd_wg || bwd_wg) ? "mma" : "wgmma";
            const size_t n = c->q.size(), nl = c->lse.size(), es = bf16 ? 2 : 4;
            attn_params p = {};
            p.B = c->B; p.T = c->T; p.H = c->H; p.D = c->D; p.window = c->W;
            p.scale = (float)(1.0 / sqrt((double)c->D));
            p.dtype = dt;
            p.kernels = run.second;
            dev_bufs d;
            for (void **x : {&d.q, &d.k, &d.v, &d.o, &d.dO, &d.dq, &d.dk, &d.dv}) CUDA_CHECK(cudaMalloc(x, n * es));
            CUDA_CHECK(cudaMalloc(&d.lse, nl * 4));
            p.nondeterministic = 1;  // the larger workspace (dq accumulator for bf16), used by both modes
            const size_t wsb = attention_workspace_bytes(&p);
            p.nondeterministic = 0;
            CUDA_CHECK(cudaMalloc(&d.ws, wsb));
            upload(d.q, c->q, dt); upload(d.k, c->k, dt); upload(d.v, c->v, dt); upload(d.dO, c->dO, dt);
            CUDA_CHECK(cudaMemset(d.o, 0xff, n * es));  // NaN
            CUDA_CHECK(cudaMemset(d.lse, 0xff, nl * 4));
            p.q = d.q; p.k = d.k; p.v = d.v; p.o = d.o; p.lse = d.lse;
            p.dO = d.dO; p.dq = d.dq; p.dk = d.dk; p.dv = d.dv; p.workspace = d.ws;
            const unsigned long fwd_n0 = attention_fwd_wgmma_launches();
            attention_fwd(&p);
            CUDA_CHECK(cudaDeviceSynchronize());
            if (want_fwd_wg) {  // hard check: the forward above launched the wgmma kernel
                const bool ran = attention_fwd_wgmma_launches() == fwd_n0 + 1;
                fwd_wg_checks++;
                fwd_wg_ran += ran;
                gc_checks++;
                if (!ran) {
                    gc_failures++;
                    printf("      forward (T %d window %d D %d): attention_fwd_wgmma_kernel did not run (fell back "
                           "to mma.sync, stderr says why): FAIL\n", c->T, c->W, c->D);
                }
            } else if (forced) {  // hard check: kernels = mma kept the forward off wgmma
                const bool mma = attention_fwd_wgmma_launches() == fwd_n0;
                mma_checks++;
                mma_ran += mma;
                gc_checks++;
                if (!mma) {
                    gc_failures++;
                    printf("      forward (T %d window %d D %d): kernels = mma launched the wgmma kernel: FAIL\n",
                           c->T, c->W, c->D);
                }
            }
            std::vector<float> lsef(nl);
            CUDA_CHECK(cudaMemcpy(lsef.data(), d.lse, nl * 4, cudaMemcpyDeviceToHost));
            std::vector<double> lse(lsef.begin(), lsef.end());
            const double dvn = norm2(c->dv);
            const double e_o = rel_err(download(d.o, n, dt), c->o, 1), e_l = rel_err(lse, c->lse, 1);
            const double tf = bf16 ? 5e-3 : 1e-4, tb = bf16 ? 1e-2 : 1e-4;
            // backward with outputs and workspace poisoned (NaN); returns dq, dk, dv bytes
            auto run_bwd = [&](int nondet) {
                for (void *x : {d.dq, d.dk, d.dv}) CUDA_CHECK(cudaMemset(x, 0xff, n * es));
                CUDA_CHECK(cudaMemset(d.ws, 0xff, wsb));
                p.nondeterministic = nondet;
                attention_bwd(&p);
                p.nondeterministic = 0;
                CUDA_CHECK(cudaDeviceSynchronize());
                std::vector<unsigned char> a(3 * n * es);
                CUDA_CHECK(cudaMemcpy(a.data(), d.dq, n * es, cudaMemcpyDeviceToHost));
                CUDA_CHECK(cudaMemcpy(a.data() + n * es, d.dk, n * es, cudaMemcpyDeviceToHost));
                CUDA_CHECK(cudaMemcpy(a.data() + 2 * n * es, d.dv, n * es, cudaMemcpyDeviceToHost));
                return a;
            };
            for (int nondet = 0; nondet < 2; nondet++) {
                const char *mode = nondet ? "nondet" : "det";
                const unsigned long bwd_n0 = attention_bwd_wgmma_launches();
                const std::vector<unsigned char> a = run_bwd(nondet);
                const unsigned long bwd_n1 = attention_bwd_wgmma_launches();
                const double e_dq = rel_err(download(d.dq, n, dt), c->dq, dvn);
                const double e_dk = rel_err(download(d.dk, n, dt), c->dk, dvn);
                const double e_dv = rel_err(download(d.dv, n, dt), c->dv, dvn);
                const bool ok = e_o <= tf && e_l <= tf && e_dq <= tb && e_dk <= tb && e_dv <= tb;
                printf("%5d %6d %4d %5s %7s %6s | %9.2e %9.2e | %9.2e %9.2e %9.2e | %s\n", c->T, c->W, c->D,
                       bf16 ? "bf16" : "fp32", kname, mode, e_o, e_l, e_dq, e_dk, e_dv, ok ? "pass" : "FAIL");
                gc_checks++;
                if (!ok) gc_failures++;

                if (want_bwd_wg) {  // hard check: the wgmma kernels of both passes ran
                    const bool ran = bwd_n1 == bwd_n0 + (nondet ? 1 : 2);
                    bwd_wg_checks++;
                    bwd_wg_ran += ran;
                    gc_checks++;
                    if (!ran) {
                        gc_failures++;
                        printf("      backward (T %d window %d D %d %s): %lu of %d wgmma kernels ran (fell back to "
                               "mma.sync, stderr says why): FAIL\n", c->T, c->W, c->D, mode, bwd_n1 - bwd_n0,
                               nondet ? 1 : 2);
                    }
                } else if (forced) {  // hard check: kernels = mma kept both passes off wgmma
                    const bool mma = bwd_n1 == bwd_n0;
                    mma_checks++;
                    mma_ran += mma;
                    gc_checks++;
                    if (!mma) {
                        gc_failures++;
                        printf("      backward (T %d window %d D %d %s): kernels = mma launched %lu wgmma kernels: "
                               "FAIL\n", c->T, c->W, c->D, mode, bwd_n1 - bwd_n0);
                    }
                }

                // reproducibility: rerun the backward (poisoned again) and compare bytes; all of
                // dq, dk, dv in the deterministic mode, dk and dv in the nondeterministic one
                if (c->T == 4096 && c->W > c->T) {
                    const std::vector<unsigned char> bb = run_bwd(nondet);
                    const size_t from = nondet ? n * es : 0;
                    const bool same = memcmp(a.data() + from, bb.data() + from, a.size() - from) == 0;
                    printf("      backward %s bitwise reproducible (T %d D %d %s %s, two runs): %s\n",
                           nondet ? "dk, dv" : "dq, dk, dv", c->T, c->D, bf16 ? "bf16" : "fp32", kname,
                           same ? "pass" : "FAIL");
                    gc_checks++;
                    if (!same) gc_failures++;
                }
            }
            for (void *x : {d.q, d.k, d.v, d.o, d.dO, d.dq, d.dk, d.dv, d.ws}) CUDA_CHECK(cudaFree(x));
            CUDA_CHECK(cudaFree(d.lse));
        }
    if (fwd_wg)
        printf("forward on attention_fwd_wgmma_kernel: %d of %d bf16 configs: %s\n", fwd_wg_ran, fwd_wg_checks,
               fwd_wg_ran == fwd_wg_checks ? "pass" : "FAIL");
    if (bwd_wg)
        printf("backward on the wgmma kernels: %d of %d bf16 runs: %s\n", bwd_wg_ran, bwd_wg_checks,
               bwd_wg_ran == bwd_wg_checks ? "pass" : "FAIL");
    if (mma_checks)
        printf("kernels = mma kept off wgmma: %d of %d bf16 calls: %s\n", mma_ran, mma_checks,
               mma_ran == mma_checks ? "pass" : "FAIL");
    printf("GPU runs and checks: %.1f s\n", gdn_now() - t0);
    for (cfg *c : cfgs) delete c;
    return gc_finish("test_attention");
}
