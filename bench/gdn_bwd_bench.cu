// gdn_bwd_bench.cu — times the CUDA GDN chunk forward + backward (gdn_chunk_fwd, gdn_chunk_bwd)
// at the shapes of BENCHMARKS.md and of one fla-220m layer (shape 3), bf16, inputs drawn as there (q, k L2-normalised rows,
// g = logsigmoid(N(0,1) + 3), beta = sigmoid(U(0,1))), dO ~ N(0,1), d(final state) ~ N(0,1).
// Three variants, one per gdn.bwd_states: "recompute" = forward (o, ht) + backward that
// recomputes the chunk-start states, "replay" = forward that also keeps the
// gate cumsums and Δ~ rows + backward that replays the states from them (the default), and
// "states" = forward that also stores them (saved) + backward that reads them. Before timing, each variant's gradients (NaN-poisoned first) are
// checked on one head against the float64 token-level backward (gdn_token_bwd_cpu, run on a CPU
// thread while the GPU is timed). Timing: CUDA events around fwd+bwd, 3 warm-up runs, two
// rounds of 20 runs alternating between two input sets (each > 10x the L2), median per round.
// Every variant's forward gets its prep workspace, as the model's does.
// Memory: what the fwd+bwd allocates beyond its inputs (q, k, v, g, beta, dO, dht): o, ht,
// the gradients, the backward's workspace, the forward's workspace, (replay) the kept G and
// Δ~, (states) the saved states. Prints one "RESULT"
// line per (shape, variant); run_gdn_bwd.sh joins them with fla's. Built by run_gdn_bwd.sh.
//   gdn_bwd_bench [--shape N] [--seg-chunks N] [--quick [--variant recompute|replay|states]]
// (--quick: each variant's fwd + bwd launched once, unchecked and untimed, for a profiler;
// --seg-chunks: the backward's chunks per segment, gdn_bwd_params.seg_chunks, 0 = one segment.)
// Before each shape's RESULT lines, one "SEGMENTS <shape> seg_chunks N of NC" line.
#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <thread>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "bwd/bwd_cpu.h"
#include "bwd/gdn_bwd_cuda.h"
#include "fwd/gdn_cuda.h"
#include "gdn_bench_common.cuh"

struct inset {
    __nv_bfloat16 *q, *k, *v, *dO;
    float *g, *beta, *dht;
};

struct headref {  // the reference backward for one head
    std::vector<double> q, k, v, g, beta, dO, dht, dq, dk, dv, dg, db, dh0;
    gdn_cpu_params p;
};
int main(int argc, char **argv) {
    const bench_args args = bench_start("gdn_bwd_bench", argc, argv);
    const int only = args.only;
    const bool quick = args.quick;  // one fwd + bwd per variant
    enum { NVAR = 3 };  // variant 0 recompute, 1 replay, 2 states (saved)
    const char *vname[NVAR] = {"recompute", "replay", "states"};
    int vonly = -1;  // --variant NAME with --quick: that variant alone (a profile of one)
    int seg_chunks = 0;  // --seg-chunks N
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--seg-chunks")) {
            char *end = NULL;
            const long v = strtol(argv[i + 1], &end, 10);
            if (!*argv[i + 1] || *end || v < 0 || v > 1 << 20) {
                fprintf(stderr, "gdn_bwd_bench: --seg-chunks %s: not a count >= 0\n", argv[i + 1]);
                return 2;
            }
            seg_chunks = (int)v;
        } else if (!strcmp(argv[i], "--variant")) {
            for (int v = 0; v < NVAR; v++)
                if (!strcmp(argv[i + 1], vname[v])) vonly = v;
            if (vonly < 0) {
                fprintf(stderr, "gdn_bwd_bench: --variant %s: not one of recompute, replay, states\n",
                        argv[i + 1]);
                return 2;
            }
        }
    if (vonly >= 0 && !quick) {
        fprintf(stderr, "gdn_bwd_bench: --variant goes with --quick (the timed run checks and "
                        "times every variant)\n");
        return 2;
    }
    int fails = 0;
    for (int si = 0; si < 4; si++) {
        if (only >= 0 && si != only) continue;
        const int B = bench_shapes[si][0], T = bench_shapes[si][1], H = bench_shapes[si][2],
                  Dk = bench_shapes[si][3], Dv = bench_shapes[si][4];
        const size_t N = (size_t)B * T * H, NS = (size_t)B * H * Dk * Dv;
        const int NC = (T + 63) / 64;
        inset in[2];
        for (int s = 0; s < 2; s++) {
            CUDA_CHECK(cudaMalloc(&in[s].dO, N * Dv * 2));
            CUDA_CHECK(cudaMalloc(&in[s].dht, NS * 4));
            const uint64_t seed = 2000 + 10 * si + s;
            gen_qkv_gates(&in[s].q, &in[s].k, &in[s].v, &in[s].g, &in[s].beta, N, Dk, Dv, seed);
            gen_rows<<<(unsigned)((N + 7) / 8), 256>>>(in[s].dO, N, Dv, seed + 4, false);
            CUDA_CHECK_LAUNCH();
            gen_f32<<<(unsigned)((NS + 255) / 256), 256>>>(in[s].dht, NS, seed + 5);
            CUDA_CHECK_LAUNCH();
        }
        // outputs of fwd + bwd
        __nv_bfloat16 *o, *dq, *dk, *dv;
        float *ht, *dg, *db, *dh0, *hs;
        CUDA_CHECK(cudaMalloc(&o, N * Dv * 2));
        CUDA_CHECK(cudaMalloc(&ht, NS * 4));
        CUDA_CHECK(cudaMalloc(&dq, N * Dk * 2));
        CUDA_CHECK(cudaMalloc(&dk, N * Dk * 2));
        CUDA_CHECK(cudaMalloc(&dv, N * Dv * 2));
        CUDA_CHECK(cudaMalloc(&dg, N * 4));
        CUDA_CHECK(cudaMalloc(&db, N * 4));
        CUDA_CHECK(cudaMalloc(&dh0, NS * 4));
        const size_t hs_bytes = (size_t)B * H * NC * Dk * Dv * 4;
        CUDA_CHECK(cudaMalloc(&hs, hs_bytes));

        gdn_fwd_params f = bench_fwd_params(B, T, H, Dk, Dv, o, ht);
        gdn_bwd_params p;
        memset(&p, 0, sizeof p);
        p.fwd = f;
        p.fwd.o = NULL; p.fwd.ht = NULL;
        p.dq = dq; p.dk = dk; p.dv = dv; p.dg = dg; p.dbeta = db; p.dh0 = dh0;
        p.seg_chunks = seg_chunks;
        printf("SEGMENTS B%d_T%d_H%d_dk%d_dv%d seg_chunks %d of %d\n", B, T, H, Dk, Dv,
               gdn_chunk_bwd_seg_chunks(&p), NC);
        const size_t ws_re = gdn_chunk_bwd_workspace_bytes(&p);
        p.fwd.h_states = hs;
        const size_t ws_st = gdn_chunk_bwd_workspace_bytes(&p);
        p.fwd.h_states = NULL;
        // replay: the forward's workspace and what it keeps (G, Δ~)
        size_t keep_g_bytes, keep_dt_bytes;
        const size_t keep_bytes = gdn_chunk_fwd_keep_bytes(&f, &keep_g_bytes, &keep_dt_bytes);
        const size_t fws_bytes = gdn_chunk_fwd_workspace_bytes(&f);
        float *keep_g;
        void *keep_dt, *fws;
        CUDA_CHECK(cudaMalloc(&keep_g, keep_g_bytes));
        CUDA_CHECK(cudaMalloc(&keep_dt, keep_dt_bytes));
        CUDA_CHECK(cudaMalloc(&fws, fws_bytes));
        void *ws;
        CUDA_CHECK(cudaMalloc(&ws, ws_re));
        p.workspace = ws;
        p.workspace_bytes = ws_re;
        const int dvb = gdn_chunk_bwd_dv_block(&p);
        const double outs_mib = (double)(N * Dv * 2 + NS * 4 + 2 * N * Dk * 2 + N * Dv * 2 +
                                         2 * N * 4 + NS * 4) / 1048576.0;
        auto set_inputs = [&](const inset &s) {
            f.q = s.q; f.k = s.k; f.v = s.v; f.g = s.g; f.beta = s.beta;
            p.fwd.q = s.q; p.fwd.k = s.k; p.fwd.v = s.v; p.fwd.g = s.g; p.fwd.beta = s.beta;
            p.dO = s.dO; p.dht = s.dht;
        };

        auto set_variant = [&](int var) {
            f.h_states = var == 2 ? hs : NULL;
            f.workspace = fws;  // the model gives the forward its workspace in every variant
            f.keep_g = var == 1 ? keep_g : NULL;
            f.keep_dt = var == 1 ? keep_dt : NULL;
            p.fwd.h_states = f.h_states;
            p.fwd.keep_g = f.keep_g;
            p.fwd.keep_dt = f.keep_dt;
            p.workspace_bytes = var == 2 ? ws_st : ws_re;
        };
        if (quick) {
            set_inputs(in[0]);
            for (int var = 0; var < NVAR; var++) {
                if (vonly >= 0 && var != vonly) continue;
                set_variant(var);
                gdn_chunk_fwd(&f);
                gdn_chunk_bwd(&p);
            }
            CUDA_CHECK(cudaDeviceSynchronize());
            printf("quick: shape %d launched\n", si);
            continue;  // (buffers are left to process exit)
        }
        // reference for head (B-1, H-1) of input set 0, on a CPU thread
        headref R;
        const int rb = B - 1, rh = H - 1;
        set_inputs(in[0]);
        R.q = head_of(in[0].q, T, H, Dk, rb, rh);
        R.k = head_of(in[0].k, T, H, Dk, rb, rh);
        R.v = head_of(in[0].v, T, H, Dv, rb, rh);
        R.dO = head_of(in[0].dO, T, H, Dv, rb, rh);
        R.g = gate_of(in[0].g, T, H, rb, rh);
        R.beta = gate_of(in[0].beta, T, H, rb, rh);
        {
            std::vector<float> tmp((size_t)Dk * Dv);
            CUDA_CHECK(cudaMemcpy(tmp.data(), in[0].dht + ((size_t)rb * H + rh) * Dk * Dv,
                                  tmp.size() * 4, cudaMemcpyDeviceToHost));
            R.dht.assign(tmp.begin(), tmp.end());
        }
        R.dq.assign((size_t)T * Dk, 0); R.dk.assign((size_t)T * Dk, 0);
        R.dv.assign((size_t)T * Dv, 0); R.dg.assign(T, 0); R.db.assign(T, 0);
        R.dh0.assign((size_t)Dk * Dv, 0);
        memset(&R.p, 0, sizeof R.p);
        R.p.B = 1; R.p.T = T; R.p.H = 1; R.p.Dk = Dk; R.p.Dv = Dv; R.p.chunk = 64;
        R.p.mode.gate = true; R.p.mode.delta = true;
        R.p.q = R.q.data(); R.p.k = R.k.data(); R.p.v = R.v.data(); R.p.g = R.g.data();
        R.p.beta = R.beta.data(); R.p.dO = R.dO.data(); R.p.dht = R.dht.data();
        R.p.dq = R.dq.data(); R.p.dk = R.dk.data(); R.p.dv = R.dv.data(); R.p.dg = R.dg.data();
        R.p.dbeta = R.db.data(); R.p.dh0 = R.dh0.data();
        std::thread th([&R] { gdn_token_bwd_cpu(&R.p); });

        // per variant: a checked run (poisoned outputs, input set 0), then the timing
        std::vector<std::vector<double>> got[NVAR];
        double times[NVAR][2];
        for (int var = 0; var < NVAR; var++) {
            set_variant(var);
            auto run = [&]() {
                gdn_chunk_fwd(&f);
                gdn_chunk_bwd(&p);
            };
            set_inputs(in[0]);
            CUDA_CHECK(cudaMemset(dq, 0xff, N * Dk * 2));
            CUDA_CHECK(cudaMemset(dk, 0xff, N * Dk * 2));
            CUDA_CHECK(cudaMemset(dv, 0xff, N * Dv * 2));
            CUDA_CHECK(cudaMemset(dg, 0xff, N * 4));
            CUDA_CHECK(cudaMemset(db, 0xff, N * 4));
            CUDA_CHECK(cudaMemset(dh0, 0xff, NS * 4));
            run();
            CUDA_CHECK(cudaDeviceSynchronize());
            got[var].push_back(head_of(dq, T, H, Dk, rb, rh));
            got[var].push_back(head_of(dk, T, H, Dk, rb, rh));
            got[var].push_back(head_of(dv, T, H, Dv, rb, rh));
            got[var].push_back(gate_of(dg, T, H, rb, rh));
            got[var].push_back(gate_of(db, T, H, rb, rh));
            {
                std::vector<float> tmp((size_t)Dk * Dv);
                CUDA_CHECK(cudaMemcpy(tmp.data(), dh0 + ((size_t)rb * H + rh) * Dk * Dv,
                                      tmp.size() * 4, cudaMemcpyDeviceToHost));
                got[var].push_back(std::vector<double>(tmp.begin(), tmp.end()));
            }
            for (int rd = 0; rd < 2; rd++)
                times[var][rd] = median_ms(20, [&](int set) { set_inputs(in[set]); }, run);
        }
        // forward alone (each variant's) for the split fwd / bwd
        double fwd_ms[NVAR];
        for (int var = 0; var < NVAR; var++) {
            set_variant(var);
            fwd_ms[var] = median_ms(20, [&](int set) { set_inputs(in[set]); }, [&] { gdn_chunk_fwd(&f); });
        }
        th.join();
        const std::vector<double> *ref[6] = {&R.dq, &R.dk, &R.dv, &R.dg, &R.db, &R.dh0};
        const char *gname[6] = {"dq", "dk", "dv", "dg", "db", "dh0"};
        for (int var = 0; var < NVAR; var++) {
            double worst = 0;
            char errs[256];
            int off = 0;
            for (int i = 0; i < 6; i++) {
                const double e = rel_err(got[var][i], *ref[i]);
                off += snprintf(errs + off, sizeof errs - off, " %s %.1e", gname[i], e);
                if (!(e <= worst)) worst = e;
            }
            const bool ok = worst <= 1e-2;
            fails += !ok;
            const double ws_mib = (double)(var == 2 ? ws_st : ws_re) / 1048576.0;
            const double kept = (var == 2 ? (double)hs_bytes : var == 1 ? (double)keep_bytes : 0.0) +
                                (double)fws_bytes;
            const double extra = outs_mib + ws_mib + kept / 1048576.0;
            const double best = std::min(times[var][0], times[var][1]);
            printf("RESULT B%d_T%d_H%d_dk%d_dv%d %s dvb %d ms %.4f %.4f fwd_ms %.4f bwd_ms %.4f "
                   "ws_mib %.0f extra_mib %.0f err%s %s\n",
                   B, T, H, Dk, Dv, vname[var], dvb, times[var][0], times[var][1], fwd_ms[var],
                   best - fwd_ms[var], ws_mib, extra, errs, ok ? "check-pass" : "CHECK-FAIL");
            fflush(stdout);
        }
        for (int s = 0; s < 2; s++) {
            for (void *x : {(void *)in[s].q, (void *)in[s].k, (void *)in[s].v, (void *)in[s].dO,
                            (void *)in[s].g, (void *)in[s].beta, (void *)in[s].dht})
                CUDA_CHECK(cudaFree(x));
        }
        for (void *x : {(void *)o, (void *)ht, (void *)dq, (void *)dk, (void *)dv, (void *)dg,
                        (void *)db, (void *)dh0, (void *)hs, ws, (void *)keep_g, keep_dt, fws})
            CUDA_CHECK(cudaFree(x));
    }
    printf("gdn_bwd_bench: %d check failures\n", fails);
    return fails ? 1 : 0;
}
