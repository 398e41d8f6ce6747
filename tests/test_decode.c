// test_decode.c — the token-by-token decoder (src/model/decode.c) against the full forward
// (model.c, chunkwise GDN, whole-sequence attention): for tiny random models of each pattern
// and each GDN switch, the decoder's logits after token t must equal row t of the forward's
// logits on the same sequence, relative L2 error <= 1e-10 at every position. Each case runs
// two different sequences with a decoder_reset between them (state and caches must clear),
// with T = 13 > SWA window 4 (the ring cache wraps) and GDN chunk 4 (the forward crosses
// chunks). The decoder is created with max_len = T, the tightest legal size.
// decoder_sample: greedy = argmax; over 200000 seeded draws the frequency of every token is
// within 5 standard deviations of softmax(logits / temperature) renormalised over the top k,
// and tokens outside the top k are never drawn.
#include "testutil.h"
#include "tiny_model.h"
#include "../src/model/decode.h"

enum { T = 13 };

static gdn_config tiny(const char *pattern, int layers) {
    gdn_config c = tiny_config(pattern, layers);
    c.gdn_chunk_size = 4;  // several chunks in T = 13
    return c;
}

// Worst relative L2 error over positions between decoder and forward logits; prints one row.
static int check_case(const char *name, const gdn_config *c, uint64_t seed) {
    model *m = model_create(c, &backend_cpu, 1, T);
    model_init_params(m, seed);
    int V = m->V;
    decoder *dec = decoder_create(m, T);
    int32_t x[T], y[T];
    double *full = dalloc((size_t)T * V);
    double worst = -1;
    int worst_t = -1, worst_seq = -1;
    rng_t r;
    rng_init(&r, seed, 7);
    for (int seq = 0; seq < 2; seq++) {
        for (int t = 0; t < T; t++) {
            x[t] = (int32_t)rng_below(&r, (uint64_t)V);
            y[t] = 0;
        }
        model_eval_loss(m, x, y);  // grad scale 0: m->logits keeps the logits
        m->be->download(full, m->logits, (size_t)T * V, BE_ACT);
        if (seq > 0) decoder_reset(dec);
        for (int t = 0; t < T; t++) {
            const double *lg = decoder_step(dec, x[t]);
            double e = rel_l2(lg, full + (size_t)t * V, (size_t)V);
            if (!(e <= worst)) {  // also catches NaN
                worst = e;
                worst_t = t;
                worst_seq = seq;
            }
        }
    }
    int ok = worst <= 1e-10 && decoder_pos(dec) == T;
    printf("%-34s %6d %6d %12.3e %5d %4d  %s\n", name, T, 2 * T, worst, worst_t, worst_seq,
           ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
    free(full);
    decoder_free(dec);
    model_free(m);
    return ok;
}

// Empirical frequencies of decoder_sample against the exact distribution.
static void check_sampler(void) {
    gdn_config c = tiny("G", 1);
    c.vocab_size = 6;
    model *m = model_create(&c, &backend_cpu, 1, 1);
    model_init_params(m, 5);
    decoder *dec = decoder_create(m, 1);
    const double logits[6] = {0.3, 2.0, -1.0, 2.0, 1.2, -0.5};  // a tie at ids 1 and 3
    printf("\ndecoder_sample vs softmax(logits / temperature) over the top k, %d draws\n", 200000);
    printf("%-26s %14s %12s  %s\n", "case", "worst_sigma", "outside_k", "result");
    struct { double temp; int k; } cs[] = {{1.0, 0}, {0.7, 3}, {2.5, 5}, {1.0, 1}, {0.0, 0}};
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        double temp = cs[ci].temp;
        int k = cs[ci].k <= 0 ? 6 : cs[ci].k;
        // the top k under the (logit desc, id asc) order: 1, 3, 4, 0, 5, 2
        const int order[6] = {1, 3, 4, 0, 5, 2};
        double p[6] = {0}, z = 0;
        if (temp == 0) {
            p[1] = 1;
        } else {
            for (int i = 0; i < k; i++) z += exp(logits[order[i]] / temp);
            for (int i = 0; i < k; i++) p[order[i]] = exp(logits[order[i]] / temp) / z;
        }
        long cnt[6] = {0}, n = 200000;
        rng_t r;
        rng_init(&r, 42 + ci, 3);
        for (long i = 0; i < n; i++) cnt[decoder_sample(dec, logits, temp, cs[ci].k, &r)]++;
        double worst = 0;
        long outside = 0;
        for (int v = 0; v < 6; v++) {
            if (p[v] == 0) {
                outside += cnt[v];
                continue;
            }
            double sd = sqrt(n * p[v] * (1 - p[v]));
            double dev = sd > 0 ? fabs(cnt[v] - n * p[v]) / sd : fabs(cnt[v] - n * p[v]);
            if (dev > worst) worst = dev;
        }
        int ok = worst <= 5 && outside == 0;
        char name[64];
        snprintf(name, sizeof name, "temperature %.1f, top-k %d", temp, cs[ci].k);
        printf("%-26s %14.3f %12ld  %s\n", name, worst, outside, ok ? "pass" : "FAIL");
        gc_checks++;
        if (!ok) gc_failures++;
    }
    decoder_free(dec);
    model_free(m);
}

int main(void) {
    printf("decoder logits vs full forward (relative L2 per position, worst of both sequences)\n");
    printf("%-34s %6s %6s %12s %5s %4s  %s\n", "case", "T", "steps", "worst_rel", "at_t", "seq",
           "result");
    struct { const char *pattern; int layers; } pats[] = {{"G", 2}, {"S", 2}, {"A", 1}, {"GS", 2},
                                                          {"SG", 2}};
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        gdn_config c = tiny(pats[i].pattern, pats[i].layers);
        char name[64];
        snprintf(name, sizeof name, "pattern %s, %d layers", pats[i].pattern, pats[i].layers);
        check_case(name, &c, 100 + i);
    }
    const char *names[] = {"GS, gate off",       "GS, delta off",     "GS, no short conv",
                           "GS, no output gate", "GS, neg eigval",    "GS, untied",
                           "GS, dv = dk",        "GS, conv size 2",   "GS, window 20 >= T",
                           "GS, gate+delta off", "G, chunk 64 (1 chunk)"};
    int nv = (int)(sizeof names / sizeof names[0]);
    for (int v = 0; v < nv; v++) {
        gdn_config c = tiny(v == 10 ? "G" : "GS", 2);
        tiny_ablate(&c, v);  // 0 .. 6
        switch (v) {
        case 7: c.gdn_conv_size = 2; break;
        case 8: c.swa_window = 20; break;
        case 9: c.gdn_gate = false; c.gdn_delta = false; break;
        case 10: c.gdn_chunk_size = 64; break;
        }
        check_case(names[v], &c, 200 + (uint64_t)v);
    }
    check_sampler();
    return gc_finish("test_decode");
}
