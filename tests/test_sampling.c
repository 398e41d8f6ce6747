// test_sampling.c — the sampling rule of src/model/sampling.h on the host (sample_token):
//   greedy: the argmax, lowest id on ties; top_k 1 is greedy at any temperature;
//   top-k: ties at the k-th value keep the lowest ids; ids outside the top k are never drawn;
//   top-p: the nucleus is the smallest set of largest logits reaching top_p of the mass (ties at
//          the threshold all kept); ids outside it are never drawn;
//   frequencies: over 200000 positions the count of every id is within 5 standard deviations of
//          draws x softmax(logits / temperature) renormalised over the kept set;
//   the draw: a pure function of (seed, row, position); rows draw different uniforms;
//   sample_params_check refuses a negative temperature and top_p outside (0, 1].
#include "testutil.h"
#include <math.h>
#include "../src/model/sampling.h"

enum { V = 12, DRAWS = 200000 };

static int freq_case(const char *name, const double *lg, const sample_params *p, const int *kept) {
    double sc[V];
    int isc[V], cnt[V] = {0};
    uint64_t key = sample_key(p->seed);
    for (int t = 0; t < DRAWS; t++) cnt[sample_token(lg, V, p, key, 0, (uint64_t)t, sc, isc)]++;
    double lmax = lg[0], z = 0, worst = 0;
    for (int i = 1; i < V; i++) lmax = fmax(lmax, lg[i]);
    for (int i = 0; i < V; i++) z += kept[i] ? exp((lg[i] - lmax) / p->temperature) : 0;
    int outside = 0;
    for (int i = 0; i < V; i++) {
        if (!kept[i]) {
            outside += cnt[i];
            continue;
        }
        double q = exp((lg[i] - lmax) / p->temperature) / z, mean = DRAWS * q;
        double sd = sqrt(DRAWS * q * (1 - q)) + 1e-9;
        worst = fmax(worst, fabs(cnt[i] - mean) / sd);
    }
    int ok = worst <= 5 && outside == 0;
    printf("%-34s worst |count - mean| %.2f sd, %d draws outside the kept set  %s\n", name, worst,
           outside, ok ? "ok" : "FAIL");
    return !ok;
}

int main(void) {
    int fails = 0;
    double sc[V];
    int isc[V];
    // logits with a tie at the top (ids 2 and 7) and a tie group in the middle (4, 5, 9)
    const double lg[V] = {0.1, -1.0, 2.0, 0.5, 1.0, 1.0, -3.0, 2.0, 0.0, 1.0, -0.5, 0.3};
    sample_params g = {0.0, 0, 1.0, 1};
    uint64_t key = sample_key(1);
    int gt = sample_token(lg, V, &g, key, 0, 0, sc, isc);
    fails += !check_row(gt == 2, "greedy: argmax, lowest id on ties", gt == 2 ? "id 2" : "wrong id");
    sample_params k1 = {5.0, 1, 1.0, 2};
    int k1bad = 0;
    for (int t = 0; t < 1000; t++) k1bad += sample_token(lg, V, &k1, sample_key(2), 3, (uint64_t)t, sc, isc) != 2;
    fails += !check_row(k1bad == 0, "top_k 1 at temperature 5 is greedy", k1bad ? "other ids drawn" : "id 2 always");

    // full softmax
    int all[V];
    for (int i = 0; i < V; i++) all[i] = 1;
    sample_params p = {0.8, 0, 1.0, 3};
    fails += freq_case("temperature 0.8", lg, &p, all);
    p.temperature = 2.5;
    fails += freq_case("temperature 2.5", lg, &p, all);
    // top-k 4: 2, 7 (2.0), then the tie group at 1.0 (4, 5, 9) cut to its two lowest ids 4, 5
    int top4[V] = {0};
    top4[2] = top4[7] = top4[4] = top4[5] = 1;
    p = (sample_params){1.0, 4, 1.0, 4};
    fails += freq_case("top-k 4 (cuts a tie group)", lg, &p, top4);
    // top-p: mass at T = 1: ids 2, 7 hold e^2 each; with the 1.0 group the three more e^1 each
    double z = 0, top2 = 2 * exp(2.0), top5 = top2 + 3 * exp(1.0);
    for (int i = 0; i < V; i++) z += exp(lg[i]);
    int nuc2[V] = {0}, nuc5[V] = {0};
    nuc2[2] = nuc2[7] = 1;
    nuc5[2] = nuc5[7] = nuc5[4] = nuc5[5] = nuc5[9] = 1;
    p = (sample_params){1.0, 0, 0.999 * top2 / z, 5};
    fails += freq_case("top-p just under the top two", lg, &p, nuc2);
    p.top_p = 0.5 * (top2 + top5) / z;  // needs the 1.0 group: all three kept (ties at tau)
    fails += freq_case("top-p into a tie group", lg, &p, nuc5);
    p = (sample_params){1.0, 4, 0.999 * top2 / (top2 + 2 * exp(1.0)), 6};  // of the top 4's mass
    fails += freq_case("top-k 4 then top-p", lg, &p, nuc2);

    // the draw: a pure function of (seed, row, position); rows differ
    int same = 1, rows_differ = 0;
    sample_params q = {1.0, 0, 1.0, 9};
    uint64_t k9 = sample_key(9);
    for (int t = 0; t < 200; t++) {
        same &= sample_token(lg, V, &q, k9, 1, (uint64_t)t, sc, isc) ==
                sample_token(lg, V, &q, sample_key(9), 1, (uint64_t)t, sc, isc);
        rows_differ += sample_uniform(k9, 0, (uint64_t)t) != sample_uniform(k9, 1, (uint64_t)t);
    }
    fails += !check_row(same, "same (seed, row, position): same token", same ? "200 of 200" : "differs");
    fails += !check_row(rows_differ == 200, "rows draw different uniforms", rows_differ == 200 ? "200 of 200" : "equal");
    fails += !check_row(sample_key(9) != sample_key(10), "seeds give different keys", "");

    char err[128];
    sample_params bad1 = {-1, 0, 1, 0}, bad2 = {1, 0, 0, 0}, bad3 = {1, 0, 1.5, 0}, good = {0, 0, 1, 0};
    int chk = !sample_params_check(&bad1, err, sizeof err) && !sample_params_check(&bad2, err, sizeof err) &&
              !sample_params_check(&bad3, err, sizeof err) && sample_params_check(&good, err, sizeof err);
    fails += !check_row(chk, "sample_params_check", chk ? "refuses T < 0, top_p 0 and 1.5" : "wrong");
    printf("test_sampling: %s (%d failing)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
