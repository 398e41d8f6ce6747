// sampling.c — the host twin of the sampling rule of sampling.h, written as the definition
// reads: sort for the k-th value and the nucleus threshold, then a walk in id order.
#include "sampling.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "../core/common.h"
#include "../core/rng.h"

uint64_t sample_key(uint64_t seed) {
    rng_t r;
    rng_init(&r, seed, 0x53414d50u);  // "SAMP"
    return r.key;
}

double sample_uniform(uint64_t key, int row, uint64_t t) {
    return rng_uniform_at(key, (uint64_t)(uint32_t)row << 32 | (t & 0xffffffffu));
}

bool sample_params_check(const sample_params *p, char *err, size_t errlen) {
    if (!(p->temperature >= 0) || !isfinite(p->temperature)) {
        snprintf(err, errlen, "temperature %g: expected a finite number >= 0", p->temperature);
        return false;
    }
    if (!(p->top_p > 0 && p->top_p <= 1)) {
        snprintf(err, errlen, "top_p %g: expected a number in (0, 1]", p->top_p);
        return false;
    }
    return true;
}

static int desc_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a < b) - (a > b);
}

int32_t sample_token(const double *logits, int V, const sample_params *p, uint64_t key, int row,
                     uint64_t t, double *scratch, int *iscratch) {
    int best = 0;
    for (int i = 0; i < V; i++) {
        if (!isfinite(logits[i]))
            gdn_die("sampling: logit %d of row %d is %g (a diverged or broken checkpoint?)", i,
                    row, logits[i]);
        if (logits[i] > logits[best]) best = i;
    }
    if (p->temperature == 0) return best;
    double lmax = logits[best];
    int *keep = iscratch;  // keep[i]: i in C
    for (int i = 0; i < V; i++) keep[i] = 1;
    if (p->top_k > 0 && p->top_k < V) {  // the k-th largest value, ties towards the lower id
        for (int i = 0; i < V; i++) scratch[i] = logits[i];
        qsort(scratch, (size_t)V, sizeof *scratch, desc_double);
        double tk = scratch[p->top_k - 1];
        int above = 0;
        for (int i = 0; i < V; i++) above += logits[i] > tk;
        int ties = p->top_k - above;
        for (int i = 0; i < V; i++) {
            if (logits[i] > tk) continue;
            if (logits[i] == tk && ties > 0) {
                ties--;
                continue;
            }
            keep[i] = 0;
        }
    }
    double total = 0;
    for (int i = 0; i < V; i++) total += keep[i] ? exp((logits[i] - lmax) / p->temperature) : 0;
    if (p->top_p < 1) {  // nucleus: walk the distinct kept values downwards
        int n = 0;
        for (int i = 0; i < V; i++)
            if (keep[i]) scratch[n++] = logits[i];
        qsort(scratch, (size_t)n, sizeof *scratch, desc_double);
        double need = p->top_p * total, acc = 0, tau = scratch[n - 1];
        for (int j = 0; j < n; j++) {
            acc += exp((scratch[j] - lmax) / p->temperature);
            if (acc >= need && (j + 1 == n || scratch[j + 1] != scratch[j])) {
                tau = scratch[j];
                break;
            }
        }
        total = 0;
        for (int i = 0; i < V; i++) {
            if (keep[i] && logits[i] < tau) keep[i] = 0;
            total += keep[i] ? exp((logits[i] - lmax) / p->temperature) : 0;
        }
    }
    double target = sample_uniform(key, row, t) * total, acc = 0;
    int last = best;
    for (int i = 0; i < V; i++) {
        if (!keep[i]) continue;
        acc += exp((logits[i] - lmax) / p->temperature);
        last = i;
        if (acc > target) return i;
    }
    return last;  // only when rounding leaves acc <= target at the end
}
