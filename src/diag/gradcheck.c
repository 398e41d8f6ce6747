// gradcheck.c — whole-model finite-difference gradient check (tools/gradcheck,
// gdn-train --gradcheck). The loss is the mean cross-entropy of one fixed random batch with
// dropout masks fixed (so the function is deterministic); every parameter tensor is perturbed
// element by element (central differences, h = 1e-6 max(1, |p|)) and compared with the
// backward's gradient. Weights are drawn larger than at init (std 0.2) and norm weights are
// jittered, so that gradients are O(1e-2..1) and every path of the model matters.
#include <math.h>
#include "../model/model.h"
#include "../core/common.h"
#include "../core/rng.h"

int model_gradcheck(const gdn_config *cin, int B, int T, int samples, double tol, uint64_t seed,
                    FILE *out) {
    return model_gradcheck_docs(cin, B, T, samples, tol, seed, NULL, out);
}

int model_gradcheck_docs(const gdn_config *cin, int B, int T, int samples, double tol,
                         uint64_t seed, const int32_t *doc_start, FILE *out) {
    gdn_config c = *cin;
    if (c.vocab_size < 2) c.vocab_size = 37;
    c.init_std = 0.2;
    if (c.gdn_chunk_size > 4) c.gdn_chunk_size = 4;  // several chunks, the last one partial
    if (c.swa_window > T) c.swa_window = GDN_MAX(2, T / 2);
    model *m = model_create(&c, &backend_cpu, B, T);
    model_init_params(m, seed);
    rng_t r;
    rng_init(&r, seed, 77);
    for (int i = 0; i < m->n_params; i++) {
        param_info *p = &m->params[i];
        if (p->kind == PARAM_NORM) {
            double *w = model_param(m, i);
            for (size_t j = 0; j < p->numel; j++) w[j] += 0.3 * rng_normal(&r);
        }
    }
    int N = B * T;
    int32_t *x = gdn_malloc(N * sizeof(int32_t)), *y = gdn_malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        x[i] = (int32_t)rng_below(&r, (uint64_t)m->V);
        y[i] = (int32_t)rng_below(&r, (uint64_t)m->V);
    }
    m->dropout_key = seed * 31 + 7;
    model_set_doc_starts(m, doc_start);
    model_zero_grads(m);
    double loss = model_forward_backward(m, x, y, 1.0 / N, true) / N;
    fprintf(out, "gradcheck: pattern %s, %d layers, d %d, B %d, T %d, vocab %d, loss %.6f, "
                 "tol %.0e, up to %d samples per tensor%s\n",
            c.pattern, c.n_layers, c.d_model, B, T, m->V, loss, tol, samples,
            m->doc_start ? ", with documents" : "");
    fprintf(out, "%-28s %10s %8s %12s %12s  %s\n", "tensor", "numel", "checked", "rel_err",
            "worst_elem", "result");
    int fails = 0;
    for (int i = 0; i < m->n_params; i++) {
        param_info *p = &m->params[i];
        double *w = model_param(m, i), *g = model_grad(m, i);
        size_t n = p->numel, k = (samples <= 0 || (size_t)samples >= n) ? n : (size_t)samples;
        double num = 0, den = 0, worst = 0;
        for (size_t s = 0; s < k; s++) {
            size_t j = k == n ? s : (size_t)rng_below(&r, n);
            double w0 = w[j], h = 1e-6 * fmax(1.0, fabs(w0));
            w[j] = w0 + h;
            double lp = model_loss(m, x, y, true);
            w[j] = w0 - h;
            double lm = model_loss(m, x, y, true);
            w[j] = w0;
            double fd = (lp - lm) / (2 * h), e = g[j] - fd;
            num += e * e;
            den += fd * fd;
            worst = fmax(worst, fabs(e) / fmax(1.0, fabs(g[j])));
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        bool ok = isfinite(rel) && rel <= tol && worst <= tol;
        fails += !ok;
        fprintf(out, "%-28s %10zu %8zu %12.3e %12.3e  %s\n", p->name, n, k, rel, worst,
                ok ? "pass" : "FAIL");
    }
    fprintf(out, "gradcheck: %d of %d tensors failed\n", fails, m->n_params);
    free(x);
    free(y);
    model_free(m);
    return fails;
}
