// gdn_fwd_bench.cu — times the CUDA GDN chunk forward (src/fwd/gdn_chunk.cu, gdn_chunk_fwd) at
// the shapes of BENCHMARKS.md, bf16, inputs drawn as there (q, k L2-normalised rows,
// g = logsigmoid(N(0,1) + 3), beta = sigmoid(U(0,1))). Before timing, every variant timed is
// checked on two heads against the float64 token recurrence (gdn_token_fwd_cpu), outputs
// NaN-poisoned first. Timing: CUDA events around each launch, 3 warm-up launches, two rounds
// of 30 launches alternating between two input sets (each set is > 10x the L2), median per
// round. Variants: the automatic choice (prep kernel + workspace), the other value-column
// blocks, P from the prep kernel or not, and the fused kernel alone (no workspace). Prints one
// "RESULT" line per (shape, variant); run_gdn_fwd.sh joins them with fla's times. Built by bench/run_gdn_fwd.sh (nvcc against the built libraries).
#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <thread>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "fwd/fwd_cpu.h"
#include "fwd/gdn_cuda.h"
#include "gdn_bench_common.cuh"

static const double PEAK_TFLOPS = 727.0;  // bf16 cuBLAS 8192^3 on this H200 (BENCHMARKS.md)
static const double PEAK_TBS = 4.2;       // device-to-device copy

struct inset {
    __nv_bfloat16 *q, *k, *v;
    float *g, *beta;
};

struct headref {  // the reference for one head
    int b, h;
    std::vector<double> q, k, v, g, beta, o, ht;
    gdn_cpu_params p;
};

int main(int argc, char **argv) {
    const bench_args args = bench_start("gdn_fwd_bench", argc, argv);
    const int only = args.only;
    const bool quick = args.quick;  // automatic dv_block only
    int fails = 0;
    for (int si = 0; si < 4; si++) {
        if (only >= 0 && si != only) continue;
        const int B = bench_shapes[si][0], T = bench_shapes[si][1], H = bench_shapes[si][2],
                  Dk = bench_shapes[si][3], Dv = bench_shapes[si][4];
        const size_t N = (size_t)B * T * H;
        inset in[2];
        for (int s = 0; s < 2; s++) {
            const uint64_t seed = 1000 + 10 * si + s;
            gen_qkv_gates(&in[s].q, &in[s].k, &in[s].v, &in[s].g, &in[s].beta, N, Dk, Dv, seed);
        }
        __nv_bfloat16 *o;
        float *ht;
        void *ws;
        CUDA_CHECK(cudaMalloc(&o, N * Dv * 2));
        CUDA_CHECK(cudaMalloc(&ht, (size_t)B * H * Dk * Dv * 4));
        CUDA_CHECK(cudaDeviceSynchronize());

        gdn_fwd_params p = bench_fwd_params(B, T, H, Dk, Dv, o, ht);
        const size_t wsb = gdn_chunk_fwd_workspace_bytes(&p);
        CUDA_CHECK(cudaMalloc(&ws, wsb));
        p.workspace = ws;
        const int dvb_auto = gdn_chunk_fwd_dv_block(&p);
        if (quick) {
            p.q = in[0].q; p.k = in[0].k; p.v = in[0].v; p.g = in[0].g; p.beta = in[0].beta;
            gdn_chunk_fwd(&p);
            CUDA_CHECK(cudaDeviceSynchronize());
            printf("quick: shape %d dv_block %d launched\n", si, dvb_auto);
            continue;
        }

        // float64 reference for two heads of input set 0 (threads)
        headref ref[2];
        std::thread th[2];
        for (int r = 0; r < 2; r++) {
            headref &R = ref[r];
            R.b = B - 1;
            R.h = r == 0 ? 0 : H - 1;
            R.q = head_of(in[0].q, T, H, Dk, R.b, R.h);
            R.k = head_of(in[0].k, T, H, Dk, R.b, R.h);
            R.v = head_of(in[0].v, T, H, Dv, R.b, R.h);
            R.g = gate_of(in[0].g, T, H, R.b, R.h);
            R.beta = gate_of(in[0].beta, T, H, R.b, R.h);
            R.o.assign((size_t)T * Dv, 0);
            R.ht.assign((size_t)Dk * Dv, 0);
            memset(&R.p, 0, sizeof R.p);
            R.p.B = 1; R.p.T = T; R.p.H = 1; R.p.Dk = Dk; R.p.Dv = Dv; R.p.chunk = GDN_CHUNK;
            R.p.mode.gate = true; R.p.mode.delta = true;
            R.p.q = R.q.data(); R.p.k = R.k.data(); R.p.v = R.v.data();
            R.p.g = R.g.data(); R.p.beta = R.beta.data();
            R.p.o = R.o.data(); R.p.ht = R.ht.data();
            th[r] = std::thread([&R] { gdn_token_fwd_cpu(&R.p); });
        }
        for (std::thread &t : th) t.join();

        const double nc = (double)((T + 63) / 64);
        // useful FLOPs: per chunk-head 2*(C^2 Dk [KK^T + QK^T, causal halves] + C^2 Dv [TY + PΔ,
        // halves] + 3 C Dk Dv [KH, QH, state update]) + C^3/3 (solve)
        const double flop = (double)B * H * nc *
                            (2.0 * (64.0 * 64 * Dk + 64.0 * 64 * Dv + 3.0 * 64 * Dk * Dv) +
                             64.0 * 64 * 64 / 3);
        const double bytes = (double)N * (2.0 * Dk * 2 + 2.0 * Dv * 2 + 8) +
                             (double)B * H * Dk * Dv * 4;
        const double floor_ms = std::max(flop / (PEAK_TFLOPS * 1e9), bytes / (PEAK_TBS * 1e9));

        // variants: the automatic choice (prep kernel + workspace), every other value-column
        // block with the prep kernel, P from the prep kernel or not for the automatic block,
        // and the fused kernel alone (no workspace)
        struct variant { int dvb; bool ws; int pp; bool is_auto; };
        std::vector<variant> vars = {{0, true, 0, true}};
        for (int d : {128, 64, 32, 16})
            if (d != dvb_auto && Dv % d == 0 && Dk <= 128) vars.push_back({d, true, 0, false});
        vars.push_back({dvb_auto, true, 2, false});  // P computed in the recurrence kernel
        vars.push_back({0, false, 0, false});
        for (const variant &va : vars) {
            p.dv_block = va.dvb;
            p.workspace = va.ws ? ws : NULL;
            p.p_from_prep = va.pp;
            const int dvb = gdn_chunk_fwd_dv_block(&p);
            const int pp = va.pp ? va.pp : 1;
            const char *label = !va.ws ? "fused" : pp == 1 ? "prep+P" : "prep-P";
            // check: poisoned outputs, input set 0, the two reference heads
            CUDA_CHECK(cudaMemset(o, 0xff, N * Dv * 2));
            CUDA_CHECK(cudaMemset(ht, 0xff, (size_t)B * H * Dk * Dv * 4));
            p.q = in[0].q; p.k = in[0].k; p.v = in[0].v; p.g = in[0].g; p.beta = in[0].beta;
            gdn_chunk_fwd(&p);
            CUDA_CHECK(cudaDeviceSynchronize());
            double eo = 0, eh = 0;
            for (int r = 0; r < 2; r++) {
                std::vector<double> og = head_of(o, T, H, Dv, ref[r].b, ref[r].h);
                std::vector<float> hf((size_t)Dk * Dv);
                CUDA_CHECK(cudaMemcpy(hf.data(), ht + ((size_t)ref[r].b * H + ref[r].h) * Dk * Dv,
                                      hf.size() * 4, cudaMemcpyDeviceToHost));
                std::vector<double> hg(hf.begin(), hf.end());
                eo = std::max(eo, rel_err(og, ref[r].o));
                eh = std::max(eh, rel_err(hg, ref[r].ht));
            }
            const bool ok = eo <= 5e-3 && eh <= 5e-3 && std::isfinite(eo) && std::isfinite(eh);
            fails += !ok;
            // timing
            auto set_inputs = [&](int set) {
                const inset &s = in[set];
                p.q = s.q; p.k = s.k; p.v = s.v; p.g = s.g; p.beta = s.beta;
            };
            double rounds[2];
            for (int rd = 0; rd < 2; rd++) rounds[rd] = median_ms(30, set_inputs, [&] { gdn_chunk_fwd(&p); });
            const double best = std::min(rounds[0], rounds[1]);
            const long ctas = (long)B * H * (Dv / dvb);
            // RESULT shape path dv_block auto CTAs ms1 ms2 TFLOP/s TB/s floor err_o err_ht check
            printf("RESULT B%d_T%d_H%d_dk%d_dv%d %s %d %s %ld %.4f %.4f %.1f %.2f %.4f %.2e %.2e "
                   "%s\n",
                   B, T, H, Dk, Dv, label, dvb, va.is_auto ? "auto" : "-", ctas, rounds[0],
                   rounds[1], flop / (best * 1e9), bytes / (best * 1e9), floor_ms, eo, eh,
                   ok ? "check-pass" : "CHECK-FAIL");
            fflush(stdout);
        }
        for (int s = 0; s < 2; s++) {
            CUDA_CHECK(cudaFree(in[s].q)); CUDA_CHECK(cudaFree(in[s].k));
            CUDA_CHECK(cudaFree(in[s].v)); CUDA_CHECK(cudaFree(in[s].g));
            CUDA_CHECK(cudaFree(in[s].beta));
        }
        CUDA_CHECK(cudaFree(o));
        CUDA_CHECK(cudaFree(ht));
        CUDA_CHECK(cudaFree(ws));
    }
    printf("gdn_fwd_bench: %d check failures\n", fails);
    return fails ? 1 : 0;
}
