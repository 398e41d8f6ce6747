// compare.c — see compare.h. The CPU model is the reference: float64 everywhere, so the
// differences printed are the test backend's own (its precision, or its bugs).
//
// A_log and dt_bias are the only gradients that are a few numbers summed over every token:
// dA_log[h] = sum_n dg[n,h] g[n,h], ddt_bias[h] = sum_n dg[n,h] dg/du[n,h]. Such a sum can
// cancel (seen: sum |terms| / |sum| = 45 for one head at init), and then a per-term relative
// error e gives up to e * sum|terms| / |sum| on the result. The pass/fail check is the plain
// relative error <= tol for every tensor, these two included; for them the table also prints
// err / sum|terms| and kappa = sum|terms| / |sum| (sum_n |term_n| from the CPU run: both factors
// dg/dA_log = g and dg/du have one sign, so it is the same backward applied to |dg|), which says
// whether a failure is the per-element precision of the GDN kernel amplified by cancellation.
#include "compare.h"
#include <math.h>
#include "../model/model.h"
#include "../bwd/bwd_cpu.h"
#include "../core/common.h"
#include "../core/rng.h"

// The CPU reference backend plus: every gates backward also adds sum_n |term_n| of dA_log and
// ddt_bias into `scale` at the offsets of those gradients (single-threaded use).
static struct {
    const double *grad_base;  // the CPU model's gradient arena
    double *scale;            // (n_elems)
} cmp;
static void cmp_gates_bwd(void *da, void *db, void *dA_log, void *ddt_bias, const void *dg,
                          const void *dbeta, const void *a, const void *b, const void *A_log,
                          const void *dt_bias, int N, int H, size_t ld, gdn_mode mode) {
    backend_cpu.gdn_gates_bwd(da, db, dA_log, ddt_bias, dg, dbeta, a, b, A_log, dt_bias, N, H, ld,
                              mode);
    if (!mode.gate || !dg) return;
    size_t n = (size_t)N * H;
    double *adg = gdn_malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) adg[i] = fabs(((const double *)dg)[i]);
    gdn_mode gate_only = {true, false, false};
    gdn_gates_bwd_cpu(NULL, NULL, cmp.scale + ((const double *)dA_log - cmp.grad_base),
                      cmp.scale + ((const double *)ddt_bias - cmp.grad_base), adg, NULL, a, b,
                      A_log, dt_bias, N, H, ld, gate_only);
    free(adg);
}

int model_compare_backends(const gdn_config *c, const backend *test, int B, int T, double tol,
                           uint64_t seed, FILE *out) {
    return model_compare_backends_docs(c, test, B, T, tol, seed, NULL, out);
}

int model_compare_backends_docs(const gdn_config *cin, const backend *test, int B, int T,
                                double tol, uint64_t seed, const int32_t *doc_start, FILE *out) {
    gdn_config c = *cin;
    if (c.vocab_size < 2) c.vocab_size = 300;
    model *mt = model_create(&c, test, B, T);
    backend ref = backend_cpu;
    ref.gdn_gates_bwd = cmp_gates_bwd;
    model *mc = model_create(&c, &ref, B, T);
    cmp.grad_base = mc->grad_mem;
    cmp.scale = gdn_malloc(mc->n_elems * sizeof(double));
    model_init_params(mt, seed);
    model_init_params(mc, seed);  // optimizer state and gradients zeroed; weights replaced below
    size_t maxn = 0;
    for (int i = 0; i < mt->n_params; i++) maxn = GDN_MAX(maxn, mt->params[i].numel);
    double *h = gdn_malloc(maxn * sizeof(double)), *hc = gdn_malloc(maxn * sizeof(double));
    for (int i = 0; i < mt->n_params; i++) {
        test->download(h, model_param(mt, i), mt->params[i].numel, BE_PARAM);
        model_param_upload(mc, i, h);
    }

    int N = B * T, valid = 0;
    int32_t *x = gdn_malloc((size_t)N * sizeof(int32_t)), *y = gdn_malloc((size_t)N * sizeof(int32_t));
    rng_t r;
    rng_init(&r, seed, 4242);
    for (int i = 0; i < N; i++) {
        x[i] = (int32_t)rng_below(&r, (uint64_t)c.vocab_size);
        y[i] = rng_below(&r, 16) == 0 ? -1 : (int32_t)rng_below(&r, (uint64_t)c.vocab_size);
        valid += y[i] >= 0;
    }
    if (valid == 0) {  // keep the loss defined
        y[0] = 0;
        valid = 1;
    }
    mt->dropout_key = mc->dropout_key = seed * 31 + 7;
    model_set_doc_starts(mt, doc_start);
    model_set_doc_starts(mc, doc_start);
    model_zero_grads(mt);
    model_zero_grads(mc);
    double lt = model_forward_backward(mt, x, y, 1.0 / valid, true) / valid;
    double lc = model_forward_backward(mc, x, y, 1.0 / valid, true) / valid;
    double lerr = fabs(lt - lc) / fmax(fabs(lc), 1e-300);
    int fails = !(lerr <= tol);
    int ndocs = 0;
    for (int i = 0; doc_start && i < N; i++) ndocs += doc_start[i] == i % T;
    fprintf(out, "compare %s vs cpu: pattern %s, %d layers, d %d, B %d, T %d, vocab %d, tol %.0e%s",
            test->name, c.pattern, c.n_layers, c.d_model, B, T, c.vocab_size, tol,
            doc_start ? "" : "\n");
    if (doc_start) fprintf(out, ", %d documents (doc_reset %s)\n", ndocs, c.doc_reset ? "on" : "off");
    fprintf(out, "  loss %s %.10f  cpu %.10f  rel %.3e  %s\n", test->name, lt, lc, lerr,
            lerr <= tol ? "pass" : "FAIL");
    fprintf(out, "  %-28s %9s %11s %11s %11s %11s %8s  %s\n", "tensor", "numel", "|g_cpu|",
            "rel_err", "worst_elem", "err/sum|t|", "kappa", "result");
    for (int i = 0; i < mt->n_params; i++) {
        const param_info *p = &mt->params[i];
        test->download(h, model_grad(mt, i), p->numel, BE_GRAD);
        backend_cpu.download(hc, model_grad(mc, i), p->numel, BE_GRAD);
        const double *S = cmp.scale + p->offset;  // A_log, dt_bias: -sum |terms|
        bool is_sum = p->kind == PARAM_ALOG || p->kind == PARAM_DTBIAS;
        double num = 0, den = 0, worst = 0, gmax = 0, sum_err = 0, kappa = 0;
        for (size_t j = 0; j < p->numel; j++) {
            double e = h[j] - hc[j];
            num += e * e;
            den += hc[j] * hc[j];
            worst = fmax(worst, fabs(e));
            gmax = fmax(gmax, fabs(hc[j]));
            if (is_sum) {  // S holds -sum|terms| (both factors are negative)
                double st = fabs(S[j]);
                sum_err = fmax(sum_err, st > 0 ? fabs(e) / st : fabs(e) > 0 ? INFINITY : 0);
                kappa = fmax(kappa, st / fmax(fabs(hc[j]), 1e-300));
            }
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        double wrel = gmax > 0 ? worst / gmax : worst;
        bool ok = isfinite(rel) && rel <= tol;
        fails += !ok;
        if (is_sum)
            fprintf(out, "  %-28s %9zu %11.4e %11.3e %11.3e %11.3e %8.1f  %s\n", p->name, p->numel,
                    sqrt(den), rel, wrel, sum_err, kappa, ok ? "pass" : "FAIL");
        else
            fprintf(out, "  %-28s %9zu %11.4e %11.3e %11.3e %11s %8s  %s\n", p->name, p->numel,
                    sqrt(den), rel, wrel, "-", "-", ok ? "pass" : "FAIL");
    }
    fprintf(out, "compare: %d of %d checks failed (loss + %d tensors)\n", fails, mt->n_params + 1,
            mt->n_params);
    free(x);
    free(y);
    free(h);
    free(hc);
    free(cmp.scale);
    cmp.scale = NULL;
    model_free(mt);
    model_free(mc);
    return fails;
}
