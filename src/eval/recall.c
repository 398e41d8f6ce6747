// recall.c — synthetic recall probes (eval.h): multi-query associative recall (MQAR, Zoology's
// task: key-value pairs, then queries of the keys) and a needle in a haystack, built from a
// seeded Philox stream, scored by the argmax of the model's next-token distribution.
#include "eval.h"
#include "../core/common.h"

// keys from [0, V/2), values and filler from [V/2, V)
static int32_t draw_value(rng_t *r, int V) { return (int32_t)(V / 2 + (int)rng_below(r, (uint64_t)(V - V / 2))); }

void recall_mqar_row(int32_t *x, int32_t *y, int L, int K, int V, rng_t *r) {
    int32_t keys[EVAL_MAX_KEYS], vals[EVAL_MAX_KEYS];
    int order[EVAL_MAX_KEYS];
    // K distinct keys: rejection against the ones drawn (K <= V/2, K <= EVAL_MAX_KEYS)
    for (int i = 0; i < K; i++) {
        bool fresh;
        do {
            keys[i] = (int32_t)rng_below(r, (uint64_t)(V / 2));
            fresh = true;
            for (int j = 0; j < i; j++) fresh = fresh && keys[j] != keys[i];
        } while (!fresh);
        vals[i] = draw_value(r, V);
    }
    for (int i = 0; i < K; i++) order[i] = i;  // the queries' order: Fisher-Yates
    for (int i = K - 1; i > 0; i--) {
        int j = (int)rng_below(r, (uint64_t)i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (int t = 0; t < L; t++) y[t] = -1;
    for (int i = 0; i < K; i++) x[2 * i] = keys[i], x[2 * i + 1] = vals[i];
    for (int t = 2 * K; t < L - 2 * K; t++) x[t] = draw_value(r, V);
    for (int i = 0; i < K; i++) {
        int q = L - 2 * K + 2 * i;
        x[q] = keys[order[i]], x[q + 1] = vals[order[i]];
        y[q] = vals[order[i]];
    }
}

void recall_needle_row(int32_t *x, int32_t *y, int L, int j, int n, int V, rng_t *r) {
    const int p = (int)((int64_t)j * (L - 3) / GDN_MAX(n - 1, 1));
    const int32_t key = (int32_t)rng_below(r, (uint64_t)(V / 2)), val = draw_value(r, V);
    for (int t = 0; t < L; t++) {
        y[t] = -1;
        if (t != p && t != p + 1 && t != L - 1) x[t] = draw_value(r, V);
    }
    x[p] = key, x[p + 1] = val;
    x[L - 1] = key, y[L - 1] = val;
}

uint64_t recall_stream(char kind, int L, int K) {
    return ((uint64_t)(unsigned char)kind << 56) ^ ((uint64_t)(uint32_t)L << 24) ^ (uint64_t)(uint32_t)K;
}

// n rows of L tokens (row j made by make(j)), B to a batch, batch k on rank k mod world; the
// fraction of scored positions whose argmax is the target, over all ranks.
static double recall_run(const eval_scorer *s, int L, int K, int n, uint64_t seed, char kind) {
    const int B = s->B, T = s->T, N = B * T;
    const int rank = s->d ? s->d->rank : 0, world = s->d ? s->d->world : 1;
    int32_t *x = gdn_malloc((size_t)N * sizeof(int32_t)), *y = gdn_malloc((size_t)N * sizeof(int32_t));
    int32_t *am = gdn_malloc((size_t)N * sizeof(int32_t)), *rx = gdn_malloc((size_t)L * sizeof(int32_t)),
            *ry = gdn_malloc((size_t)L * sizeof(int32_t));
    double *lp = gdn_malloc((size_t)N * sizeof(double));
    rng_t r;
    rng_init(&r, seed, recall_stream(kind, L, K));
    double hit = 0, total = 0;
    for (int j0 = 0, k = 0; j0 < n; j0 += B, k++) {
        for (int i = 0; i < N; i++) x[i] = 0, y[i] = -1;
        for (int b = 0; b < B && j0 + b < n; b++) {  // every rank draws every row: one stream
            if (kind == 'm') recall_mqar_row(rx, ry, L, K, s->V, &r);
            else recall_needle_row(rx, ry, L, j0 + b, n, s->V, &r);
            memcpy(x + (size_t)b * T, rx, (size_t)L * sizeof(int32_t));
            memcpy(y + (size_t)b * T, ry, (size_t)L * sizeof(int32_t));
        }
        if (k % world != rank) continue;
        s->fn(s->ctx, x, y, lp, am);
        for (int i = 0; i < N; i++) {
            if (y[i] < 0) continue;
            total += 1;
            hit += am[i] == y[i];
        }
    }
    if (s->d && world > 1) {
        double v[2] = {hit, total};
        dist_allreduce_sum_f64(s->d, v, 2);
        hit = v[0], total = v[1];
    }
    free(x);
    free(y);
    free(am);
    free(rx);
    free(ry);
    free(lp);
    return total > 0 ? hit / total : 0.0;
}

double recall_mqar(const eval_scorer *s, int L, int K, int n, uint64_t seed) {
    return recall_run(s, L, K, n, seed, 'm');
}

double recall_needle(const eval_scorer *s, int L, int n, uint64_t seed) {
    return recall_run(s, L, 0, n, seed, 'n');
}
