// gdn_docs_bench.cu — times the CUDA GDN chunk forward + backward (gdn_chunk_fwd, gdn_chunk_bwd,
// bf16) at one fla-220m GDN layer (B16 T2048 H4 dk128 dv256) with packed documents, as the model
// runs them (src/model/backend_cuda.cu's gdn_fwd / gdn_bwd): no final state, no d(final state),
// no dh0; the forward's workspace. Inputs drawn as in gdn_bwd_bench.cu (gdn_bench_common.cuh),
// dO ~ N(0,1).
//   --mean 0 (no documents): two lines, "none" = the model's default path without documents
//     (gdn.bwd_states = replay: the forward keeps G and Δ~) and "none-recompute" (the
//     backward recomputes the chunk-start states: what the model does with documents, without
//     them: the documents' own cost is docsL against this line).
//   --mean L (L > 0): document lengths drawn from an exponential of mean L tokens (seeded by
//     --seed, default 1; rounded, clipped to [16, 8000]), concatenated into one stream that begins
//     at a uniform offset inside the first document and is cut into B rows of T tokens, as
//     data.sampling = documents packs them (a document longer than the rest of its row goes on
//     in the next row; each row's doc_start counts from its own token 0). The GDN plan
//     (gdn_docs_padded_len + gdn_docs_init, timed on the host) is handed to the forward (docs)
//     and to the backward (fwd.docs), the states recomputed (no h_states, no keeps), as the model
//     does under documents. One line "docsL".
//   --docs-out FILE: the segments fla's varlen path should see, as cu_seqlens over the flattened
//     B*T tokens (int32 little-endian, 0 first, B*T last, every row start and document start
//     in between, increasing).
// Timing: CUDA events around fwd+bwd, 3 warm-up runs, two rounds of 20 runs alternating between
// two input sets, median per round; the forward alone the same way; bwd = best round - fwd.
// Before timing, one run's o, dq, dk, dv, dg, dbeta (NaN-poisoned first) are checked to be
// finite everywhere. Prints
//   RESULT_DOCS <variant> mean_doc <L> docs <n> Tp <Tp> fwd_ms <f> bwd_ms <b> fwdbwd_ms <r1> <r2>
//       plan_ms <host ms> pad_pct <padded tokens %> <check-pass|CHECK-FAIL>
// (docs = the segments fla's varlen path sees: documents, cut where rows start; Tp = the plan's
// padded row length; plan_ms = gdn_docs_padded_len + gdn_docs_init on the host, not its malloc).
// Built and run by run_gdn_docs.sh.
#include <algorithm>
#include <chrono>
#include <random>
#include <stdint.h>
#include <stdio.h>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "bwd/gdn_bwd_cuda.h"
#include "fwd/gdn_cuda.h"
#include "gdn_bench_common.cuh"

struct inset {
    __nv_bfloat16 *q, *k, *v, *dO;
    float *g, *beta;
};

// The packed rows' doc_start (B*T) and the segments' cu_seqlens for `mean` > 0; for mean 0 one
// document a row. Lengths ~ Exp(mean), rounded, clipped to [16, 8000]; the stream starts at a
// uniform offset inside its first document.
static void draw_documents(int B, int T, double mean, uint64_t seed, std::vector<int32_t> &doc_start,
                           std::vector<int32_t> &cu) {
    const int64_t n = (int64_t)B * T;
    std::vector<int64_t> starts;  // document starts in the flattened rows, > 0
    if (mean > 0) {
        std::mt19937_64 rng(seed);
        std::exponential_distribution<double> len(1.0 / mean);
        auto draw = [&]() {
            const double x = std::llround(len(rng));
            return (int64_t)std::min(8000.0, std::max(16.0, x));
        };
        const int64_t first = draw();
        const int64_t off = std::uniform_int_distribution<int64_t>(0, first - 1)(rng);
        for (int64_t s = first - off; s < n; s += draw()) starts.push_back(s);
    }
    doc_start.assign((size_t)n, 0);
    cu.clear();
    size_t i = 0;
    for (int b = 0; b < B; b++) {
        cu.push_back((int32_t)((int64_t)b * T));
        int32_t s = 0;
        for (int t = 0; t < T; t++) {
            const int64_t pos = (int64_t)b * T + t;
            if (i < starts.size() && starts[i] == pos) {
                i++;
                if (t > 0) {
                    s = t;
                    cu.push_back((int32_t)pos);
                }
            }
            doc_start[(size_t)pos] = s;
        }
    }
    cu.push_back((int32_t)n);
}

static bool all_finite_bf16(const __nv_bfloat16 *d, size_t n) {
    std::vector<__nv_bfloat16> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        if (!isfinite(__bfloat162float(h[i]))) return false;
    return true;
}
static bool all_finite_f32(const float *d, size_t n) {
    std::vector<float> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        if (!isfinite(h[i])) return false;
    return true;
}

int main(int argc, char **argv) {
    double mean = 0;
    uint64_t seed = 1;
    const char *docs_out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mean") && i + 1 < argc) mean = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--docs-out") && i + 1 < argc) docs_out = argv[++i];
        else {
            fprintf(stderr, "gdn_docs_bench: unknown argument %s (--mean L, --seed S, --docs-out FILE)\n",
                    argv[i]);
            return 2;
        }
    }
    if (!(mean >= 0)) {
        fprintf(stderr, "gdn_docs_bench: --mean must be >= 0\n");
        return 2;
    }
    const int B = bench_shapes[3][0], T = bench_shapes[3][1], H = bench_shapes[3][2],
              Dk = bench_shapes[3][3], Dv = bench_shapes[3][4];
    const size_t N = (size_t)B * T * H;

    std::vector<int32_t> doc_start, cu;
    draw_documents(B, T, mean, seed, doc_start, cu);
    const int ndocs = (int)cu.size() - 1;
    if (docs_out) {
        FILE *fp = fopen(docs_out, "wb");
        if (!fp) {
            fprintf(stderr, "gdn_docs_bench: cannot write %s\n", docs_out);
            return 1;
        }
        const bool ok = fwrite(cu.data(), 4, cu.size(), fp) == cu.size();  // little-endian host
        if (fclose(fp) != 0 || !ok) {
            fprintf(stderr, "gdn_docs_bench: error writing %s\n", docs_out);
            return 1;
        }
    }

    bench_start("gdn_docs_bench", argc, argv);
    inset in[2];
    for (int s = 0; s < 2; s++) {
        CUDA_CHECK(cudaMalloc(&in[s].dO, N * Dv * 2));
        const uint64_t seed_in = 3000 + s;
        gen_qkv_gates(&in[s].q, &in[s].k, &in[s].v, &in[s].g, &in[s].beta, N, Dk, Dv, seed_in);
        gen_rows<<<(unsigned)((N + 7) / 8), 256>>>(in[s].dO, N, Dv, seed_in + 4, false);
        CUDA_CHECK_LAUNCH();
    }
    __nv_bfloat16 *o, *dq, *dk, *dv;
    float *dg, *db;
    CUDA_CHECK(cudaMalloc(&o, N * Dv * 2));
    CUDA_CHECK(cudaMalloc(&dq, N * Dk * 2));
    CUDA_CHECK(cudaMalloc(&dk, N * Dk * 2));
    CUDA_CHECK(cudaMalloc(&dv, N * Dv * 2));
    CUDA_CHECK(cudaMalloc(&dg, N * 4));
    CUDA_CHECK(cudaMalloc(&db, N * 4));

    // the plan (mean > 0): host time of gdn_docs_padded_len + gdn_docs_init (its copy included)
    gdn_docs plan;
    memset(&plan, 0, sizeof plan);
    void *plan_mem = NULL;
    double plan_ms = 0;
    int Tp = T;
    if (mean > 0) {
        using ms_t = std::chrono::duration<double, std::milli>;
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto t0 = std::chrono::steady_clock::now();
        Tp = gdn_docs_padded_len(doc_start.data(), B, T);
        const auto t1 = std::chrono::steady_clock::now();
        const size_t bytes = gdn_docs_bytes(B, T, Tp);  // (the model keeps this buffer)
        CUDA_CHECK(cudaMalloc(&plan_mem, bytes > 0 ? bytes : 256));
        const auto t2 = std::chrono::steady_clock::now();
        gdn_docs_init(&plan, doc_start.data(), B, T, plan_mem, bytes, 0);
        const auto t3 = std::chrono::steady_clock::now();
        plan_ms = ms_t(t1 - t0).count() + ms_t(t3 - t2).count();
    }

    gdn_fwd_params f = bench_fwd_params(B, T, H, Dk, Dv, o, NULL);
    gdn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.dq = dq; p.dk = dk; p.dv = dv; p.dg = dg; p.dbeta = db;  // dh0 not wanted, dht zero
    if (mean > 0) f.docs = &plan;
    const size_t fws_bytes = gdn_chunk_fwd_workspace_bytes(&f);
    void *fws = NULL;
    if (fws_bytes) CUDA_CHECK(cudaMalloc(&fws, fws_bytes));
    f.workspace = fws;
    // the no-documents default (replay): what the forward keeps for the backward
    float *keep_g = NULL;
    void *keep_dt = NULL;
    if (mean == 0) {
        size_t gb, dtb;
        gdn_chunk_fwd_keep_bytes(&f, &gb, &dtb);
        if (gb) CUDA_CHECK(cudaMalloc(&keep_g, gb));
        if (dtb) CUDA_CHECK(cudaMalloc(&keep_dt, dtb));
    }
    p.fwd = f;
    p.fwd.o = NULL;
    p.fwd.workspace = NULL;
    // the backward's workspace: the largest of the variants' (with keeps or without)
    size_t ws_bytes = gdn_chunk_bwd_workspace_bytes(&p);
    p.fwd.keep_g = keep_g; p.fwd.keep_dt = keep_dt;
    ws_bytes = std::max(ws_bytes, gdn_chunk_bwd_workspace_bytes(&p));
    void *ws;
    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    p.workspace = ws;

    auto set_inputs = [&](const inset &s) {
        f.q = s.q; f.k = s.k; f.v = s.v; f.g = s.g; f.beta = s.beta;
        p.fwd.q = s.q; p.fwd.k = s.k; p.fwd.v = s.v; p.fwd.g = s.g; p.fwd.beta = s.beta;
        p.dO = s.dO;
    };
    auto set_keeps = [&](bool keep) {
        f.keep_g = keep ? keep_g : NULL;
        f.keep_dt = keep ? keep_dt : NULL;
        p.fwd.keep_g = f.keep_g; p.fwd.keep_dt = f.keep_dt;
        p.workspace_bytes = gdn_chunk_bwd_workspace_bytes(&p);
    };
    char vname_docs[32];
    snprintf(vname_docs, sizeof vname_docs, "docs%.0f", mean);
    struct variant { const char *name; bool keep; };
    const variant none_vars[2] = {{"none", true}, {"none-recompute", false}};
    const variant docs_vars[1] = {{vname_docs, false}};
    const variant *vars = mean == 0 ? none_vars : docs_vars;
    const int nvars = mean == 0 ? 2 : 1;

    const double pad_pct = 100.0 * (double)(Tp - T) / (double)T;
    int fails = 0;
    for (int vi = 0; vi < nvars; vi++) {
        const variant &var = vars[vi];
        set_keeps(var.keep);
        auto run = [&]() {
            gdn_chunk_fwd(&f);
            gdn_chunk_bwd(&p);
        };
        set_inputs(in[0]);
        CUDA_CHECK(cudaMemset(o, 0xff, N * Dv * 2));
        CUDA_CHECK(cudaMemset(dq, 0xff, N * Dk * 2));
        CUDA_CHECK(cudaMemset(dk, 0xff, N * Dk * 2));
        CUDA_CHECK(cudaMemset(dv, 0xff, N * Dv * 2));
        CUDA_CHECK(cudaMemset(dg, 0xff, N * 4));
        CUDA_CHECK(cudaMemset(db, 0xff, N * 4));
        run();
        CUDA_CHECK(cudaDeviceSynchronize());
        const bool ok = all_finite_bf16(o, N * Dv) && all_finite_bf16(dq, N * Dk) &&
                        all_finite_bf16(dk, N * Dk) && all_finite_bf16(dv, N * Dv) &&
                        all_finite_f32(dg, N) && all_finite_f32(db, N);
        fails += !ok;
        double r[2];
        for (int rd = 0; rd < 2; rd++)
            r[rd] = median_ms(20, [&](int set) { set_inputs(in[set]); }, run);
        const double fwd_ms =
            median_ms(20, [&](int set) { set_inputs(in[set]); }, [&] { gdn_chunk_fwd(&f); });
        const double best = std::min(r[0], r[1]);
        printf("RESULT_DOCS %s mean_doc %.0f docs %d Tp %d fwd_ms %.4f bwd_ms %.4f fwdbwd_ms %.4f "
               "%.4f plan_ms %.3f pad_pct %.2f %s\n",
               var.name, mean, ndocs, Tp, fwd_ms, best - fwd_ms, r[0], r[1], plan_ms, pad_pct,
               ok ? "check-pass" : "CHECK-FAIL");
        fflush(stdout);
    }

    for (int s = 0; s < 2; s++)
        for (void *x : {(void *)in[s].q, (void *)in[s].k, (void *)in[s].v, (void *)in[s].dO,
                        (void *)in[s].g, (void *)in[s].beta})
            CUDA_CHECK(cudaFree(x));
    for (void *x : {(void *)o, (void *)dq, (void *)dk, (void *)dv, (void *)dg, (void *)db, ws})
        CUDA_CHECK(cudaFree(x));
    for (void *x : {plan_mem, fws, (void *)keep_g, keep_dt})
        if (x) CUDA_CHECK(cudaFree(x));
    printf("gdn_docs_bench: %d check failures\n", fails);
    return fails ? 1 : 0;
}
