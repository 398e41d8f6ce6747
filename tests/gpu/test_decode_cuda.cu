// test_decode_cuda.cu — the GPU decoder (src/model/decode_cuda.cu) against the float64 CPU
// decoder (src/model/decode.c), and the GPU sampling kernel against sample_token.
//
// Decoder: tiny random models (tests/tiny_model.h's, vocab 61) of patterns G, GS, GSA and GS under
// each GDN switch (tiny_ablate 0..6), on the CUDA backend in fp32; the CPU model gets the same
// parameter values (fp32 values, exact in float64). A batch of 3 sequences, each its own random
// 5-token prompt, then N greedy tokens (argv[1], default 200; 50 for the switch sweep): at every
// position every row's logits agree with its CPU decoder's within relative L2 1e-4, and every
// greedy token (drawn on the GPU) equals the CPU's argmax. The SWA window 4 makes the K/V ring
// wrap; A layers keep all 205 positions. Then the same generation again in one
// decoder_cuda_generate call (CUDA graph replay) must give the same tokens, and a bf16 decoder
// of the same model must run and keep finite logits.
// Sampling: random logit rows (V = 1000 and 32000, some rows quantised to make ties) under
// temperature / top-k / top-p settings; the GPU's draw equals sample_token's on the same values
// (fp32 logits, exact in float64) for every row and position: 0 mismatches allowed.
//
//   test_decode_cuda [N]
#include "gputest.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "../../src/core/config.h"
#include "../../src/model/model.h"
#include "../../src/model/backend_cuda.h"
extern "C" {
#include "../../src/model/decode.h"  // (a C header without its own extern "C")
}
#include "../../src/model/decode_cuda.h"
#include "../../src/model/sampling.h"
#include "../../src/model/sampling_cuda.h"
#include "../tiny_model.h"

enum { NB = 3, NP = 5 };

static int argmax(const double *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

// One model: returns the number of failures (prints one row).
static int check_model(const char *name, gdn_config c, int N, uint64_t seed) {
    c.vocab_size = 61;
    model *mg = model_create(&c, backend_cuda_get(false), 1, 8);
    model *mc = model_create(&c, &backend_cpu, 1, 8);
    model_init_params(mg, seed);
    std::vector<double> buf(mg->n_elems);
    for (int i = 0; i < mg->n_params; i++) {
        model_param_download(mg, i, buf.data());
        model_param_upload(mc, i, buf.data());
    }
    const int V = mg->V, max_len = NP + N;
    decoder *dc[NB];
    for (int b = 0; b < NB; b++) dc[b] = decoder_create(mc, max_len);
    decoder_cuda *dg = decoder_cuda_create(mg, NB, max_len);
    std::vector<double> lg((size_t)NB * V);
    const double *lc[NB];
    rng_t r;
    rng_init(&r, seed, 11);
    int32_t prompt[NP][NB];
    for (int t = 0; t < NP; t++)
        for (int b = 0; b < NB; b++) prompt[t][b] = (int32_t)rng_below(&r, (uint64_t)V);
    double worst = 0;
    int worst_t = -1, bad_tok = 0, first_bad = -1;
    std::vector<int32_t> toks((size_t)NB * N);
    auto compare = [&](int t) {
        decoder_cuda_logits(dg, lg.data());
        for (int b = 0; b < NB; b++) {
            double e = rel_l2(lg.data() + (size_t)b * V, lc[b], (size_t)V);
            if (!(e <= worst)) worst = e, worst_t = t;
        }
    };
    for (int t = 0; t < NP; t++) {
        decoder_cuda_step(dg, prompt[t]);
        for (int b = 0; b < NB; b++) lc[b] = decoder_step(dc[b], prompt[t][b]);
        compare(t);
    }
    const sample_params greedy = {0.0, 0, 1.0, 1};
    for (int i = 0; i < N; i++) {
        int32_t got[NB];
        decoder_cuda_generate(dg, &greedy, 1, got);
        for (int b = 0; b < NB; b++) {
            int want = argmax(lc[b], V);
            toks[(size_t)b * N + i] = got[b];
            if (got[b] != want && bad_tok++ == 0) first_bad = i;
            lc[b] = decoder_step(dc[b], want);
        }
        compare(NP + i);
    }
    // the same again in one call: graph replay
    decoder_cuda_reset(dg);
    for (int t = 0; t < NP; t++) decoder_cuda_step(dg, prompt[t]);
    std::vector<int32_t> again((size_t)NB * N);
    decoder_cuda_generate(dg, &greedy, N, again.data());
    int graph_diff = 0;
    for (size_t i = 0; i < again.size(); i++) graph_diff += again[i] != toks[i];
    // bf16: runs, finite logits
    model *mb = model_create(&c, backend_cuda_get(true), 1, 8);
    for (int i = 0; i < mg->n_params; i++) {
        model_param_download(mg, i, buf.data());
        model_param_upload(mb, i, buf.data());
    }
    decoder_cuda *db = decoder_cuda_create(mb, NB, max_len);
    for (int t = 0; t < NP; t++) decoder_cuda_step(db, prompt[t]);
    const sample_params warm = {0.8, 20, 0.95, 7};
    decoder_cuda_generate(db, &warm, N, again.data());
    decoder_cuda_logits(db, lg.data());
    int nonfinite = 0;
    for (double v : lg) nonfinite += !isfinite(v);
    bool ok = worst <= 1e-4 && bad_tok == 0 && graph_diff == 0 && nonfinite == 0;
    printf("%-22s worst logits rel L2 %.2e (position %d)  greedy mismatches %d%s%d  graph "
           "replay diffs %d  bf16 non-finite %d  %s\n",
           name, worst, worst_t, bad_tok, bad_tok ? " from step " : "", bad_tok ? first_bad : 0,
           graph_diff, nonfinite, ok ? "ok" : "FAIL");
    decoder_cuda_free(db);
    model_free(mb);
    decoder_cuda_free(dg);
    for (int b = 0; b < NB; b++) decoder_free(dc[b]);
    model_free(mc);
    model_free(mg);
    return ok ? 0 : 1;
}

// GPU draws against sample_token on the same fp32 logits.
static int check_sampling(int V) {
    const int rows = 16, positions = 12;
    const sample_params ps[] = {
        {1.0, 0, 1.0, 1}, {0.7, 50, 1.0, 2}, {1.3, 0, 0.9, 3}, {1.0, 10, 0.5, 4},
        {0.5, 1, 1.0, 5}, {2.0, 0, 0.02, 6}, {0.0, 0, 1.0, 7}, {1.0, V, 0.999, 8}};
    std::vector<float> lf((size_t)rows * V);
    std::vector<double> ld((size_t)rows * V), scratch(V);
    std::vector<int> iscratch(V);
    rng_t r;
    rng_init(&r, (uint64_t)V, 12);
    for (int b = 0; b < rows; b++)
        for (int i = 0; i < V; i++) {
            double x = 3.0 * rng_normal(&r);
            if (b % 4 == 3) x = floor(x * 2) / 2;  // ties
            lf[(size_t)b * V + i] = (float)x;
            ld[(size_t)b * V + i] = (double)(float)x;
        }
    float *dl;
    double *dw;
    int32_t *dout;
    int *dpos, *dbad;
    CUDA_CHECK(cudaMalloc(&dl, lf.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dw, lf.size() * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&dout, rows * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc(&dpos, sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dbad, sizeof(int)));
    CUDA_CHECK(cudaMemset(dbad, 0, sizeof(int)));
    CUDA_CHECK(cudaMemcpy(dl, lf.data(), lf.size() * sizeof(float), cudaMemcpyHostToDevice));
    int mism = 0, draws = 0;
    for (const sample_params &p : ps) {
        const uint64_t key = sample_key(p.seed);
        for (int t = 0; t < positions; t++) {
            int32_t got[rows];
            int pos = 100 * t + 3;
            CUDA_CHECK(cudaMemcpy(dpos, &pos, sizeof pos, cudaMemcpyHostToDevice));
            cuda_sample_tokens(CUDA_F32, dout, dl, rows, V, &p, key, dpos, nullptr, 0, dw, dbad, 0);
            CUDA_CHECK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
            for (int b = 0; b < rows; b++) {
                int want = sample_token(ld.data() + (size_t)b * V, V, &p, key, b, (uint64_t)pos,
                                        scratch.data(), iscratch.data());
                draws++;
                if (got[b] != want && mism++ < 5)
                    printf("  V %d T %g k %d p %g row %d pos %d: GPU %d, CPU %d\n", V,
                           p.temperature, p.top_k, p.top_p, b, pos, got[b], want);
            }
        }
    }
    int bad = 0;
    CUDA_CHECK(cudaMemcpy(&bad, dbad, sizeof bad, cudaMemcpyDeviceToHost));
    printf("sampling V %-6d %d draws, %d differ from sample_token, bad flag %d  %s\n", V, draws,
           mism, bad, mism == 0 && bad == 0 ? "ok" : "FAIL");
    CUDA_CHECK(cudaFree(dl));
    CUDA_CHECK(cudaFree(dw));
    CUDA_CHECK(cudaFree(dout));
    CUDA_CHECK(cudaFree(dpos));
    CUDA_CHECK(cudaFree(dbad));
    return mism == 0 && bad == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 200;
    if (N < 1 || N > 100000) {
        fprintf(stderr, "usage: test_decode_cuda [N tokens, 1..100000]\n");
        return 2;
    }
    gpu_require("test_decode_cuda");
    int fails = 0;
    const char *patterns[] = {"G", "GS", "GSA"};
    for (int i = 0; i < 3; i++) {
        gdn_config c = tiny_config(patterns[i], 3);
        fails += check_model(patterns[i], c, N, 100 + (uint64_t)i);
    }
    for (int v = 0; v <= 6; v++) {
        gdn_config c = tiny_config("GS", 2);
        tiny_ablate(&c, v);
        char name[32];
        snprintf(name, sizeof name, "GS switch %d", v);
        fails += check_model(name, c, N < 50 ? N : 50, 200 + (uint64_t)v);
    }
    fails += check_sampling(1000);
    fails += check_sampling(32000);
    printf("test_decode_cuda: %s (%d failing)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
