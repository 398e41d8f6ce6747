// test_save_states.c — gdn.save_states on the float64 CPU backend: the forward keeps the rule's
// chunk-start states (gdn_cpu_params.hs, gdn_op.hs) and the backward reads them instead of
// recomputing them with its own forward scan.
//   - op level (gdn_chunk_fwd_cpu -> gdn_chunk_bwd_cpu): the gradients with the forward's states
//     equal those of the recomputing backward within 1e-12 relative, for T a multiple of the chunk
//     and not, with and without an initial state, gate / delta on and off; and a negative control:
//     one state element moved by 1e-6 moves the gradients beyond that bound (the backward reads
//     the states it is given);
//   - model level (patterns GS and G, two micro-batches, with and without train.recompute): the
//     loss bitwise, every gradient within 1e-12 of the model without save_states, and the
//     activation arena larger by the states' size.
// The CUDA side (gdn_fwd_params.h_states -> gdn_bwd_params.h_states) is checked bitwise by
// tests/gpu/test_gdn_bwd.cu (its "states" rows) and tests/gpu/test_model_cuda.cu.
#include <math.h>
#include <string.h>
#include "../src/bwd/bwd_cpu.h"
#include "../src/core/config.h"
#include "../src/core/rng.h"
#include "../src/model/model.h"
#include "testutil.h"
#include "tiny_model.h"

static double rel_diff(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void fill(rng_t *r, double *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(r);
}

// Gradients (dq, dk, dv, dg, dbeta, dh0 concatenated) of one backward call.
static void grads(const gdn_cpu_params *p0, double *hs, double *out) {
    gdn_cpu_params p = *p0;
    size_t nk = (size_t)p.B * p.T * p.H * p.Dk, nv = (size_t)p.B * p.T * p.H * p.Dv;
    size_t ng = (size_t)p.B * p.T * p.H, ns = (size_t)p.B * p.H * p.Dk * p.Dv;
    p.hs = hs;
    p.dq = out;
    p.dk = out + nk;
    p.dv = out + 2 * nk;
    p.dg = out + 2 * nk + nv;
    p.dbeta = out + 2 * nk + nv + ng;
    p.dh0 = p.h0 ? out + 2 * nk + nv + 2 * ng : NULL;
    if (!p.h0) memset(out + 2 * nk + nv + 2 * ng, 0, ns * sizeof(double));
    gdn_chunk_bwd_cpu(&p);
}

static void op_case(int B, int T, int H, int Dk, int Dv, int C, bool gate, bool delta, bool h0) {
    rng_t r;
    rng_init(&r, 1000 + T + 7 * C, 0);
    size_t nk = (size_t)B * T * H * Dk, nv = (size_t)B * T * H * Dv, ng = (size_t)B * T * H;
    size_t ns = (size_t)B * H * Dk * Dv, nst = (size_t)B * H * GDN_CDIV(T, C) * Dk * Dv;
    size_t ntot = 2 * nk + nv + 2 * ng + ns;
    double *q = gdn_malloc(nk * sizeof(double)), *k = gdn_malloc(nk * sizeof(double));
    double *v = gdn_malloc(nv * sizeof(double)), *o = gdn_malloc(nv * sizeof(double));
    double *dO = gdn_malloc(nv * sizeof(double)), *g = gdn_malloc(ng * sizeof(double));
    double *beta = gdn_malloc(ng * sizeof(double)), *hin = gdn_malloc(ns * sizeof(double));
    double *hs = gdn_malloc(nst * sizeof(double));
    double *ga = gdn_malloc(ntot * sizeof(double)), *gb = gdn_malloc(ntot * sizeof(double));
    fill(&r, q, nk, -1, 1);
    fill(&r, k, nk, -1, 1);
    for (size_t i = 0; i < nk; i += Dk) {  // unit-norm keys, as after the model's L2 norm
        double s = 0;
        for (int e = 0; e < Dk; e++) s += k[i + e] * k[i + e];
        for (int e = 0; e < Dk; e++) k[i + e] /= sqrt(s);
    }
    fill(&r, v, nv, -1, 1);
    fill(&r, dO, nv, -1, 1);
    fill(&r, g, ng, -0.7, -0.01);
    fill(&r, beta, ng, 0.05, 0.95);
    fill(&r, hin, ns, -0.5, 0.5);
    gdn_cpu_params p = {.B = B, .T = T, .H = H, .Dk = Dk, .Dv = Dv, .chunk = C,
                        .mode = {.gate = gate, .delta = delta}, .q = q, .k = k, .v = v,
                        .g = g, .beta = beta, .h0 = h0 ? hin : NULL, .o = o, .dO = dO};
    p.hs = hs;
    gdn_chunk_fwd_cpu(&p);
    p.hs = NULL;
    grads(&p, NULL, ga);
    grads(&p, hs, gb);
    double e = rel_diff(gb, ga, ntot);
    char name[160], det[64];
    snprintf(name, sizeof name, "op B%d T%-3d H%d Dk%d Dv%-2d C%-2d gate %d delta %d h0 %d: with states == recomputed",
             B, T, H, Dk, Dv, C, gate, delta, h0);
    snprintf(det, sizeof det, "rel %.2e <= 1e-12", e);
    check_row(e <= 1e-12, name, det);
    if (T > C) {  // the control: a moved state of the second chunk must show
        hs[(size_t)Dk * Dv + 3] += 1e-6;
        grads(&p, hs, gb);
        e = rel_diff(gb, ga, ntot);
        snprintf(det, sizeof det, "rel %.2e > 1e-12", e);
        check_row(e > 1e-12, "  control: one state element + 1e-6 moves the gradients", det);
    }
    free(q), free(k), free(v), free(o), free(dO), free(g), free(beta), free(hin), free(hs);
    free(ga), free(gb);
}

enum { MB = 2, MT = 20, V = 23 };  // V: tiny_config's vocabulary; T 20 = chunks of 8, 8, 4

static void model_case(const char *pattern, bool recompute) {
    gdn_config c = tiny_config(pattern, 2);
    c.gdn_chunk_size = 8;
    c.recompute = recompute;
    c.dropout = 0.1;
    model *m0 = model_create(&c, &backend_cpu, MB, MT);
    c.gdn_save_states = true;
    model *m1 = model_create(&c, &backend_cpu, MB, MT);
    model_init_params(m0, 5);
    model_init_params(m1, 5);
    printf("\n== model, pattern %s x %d layers, recompute %d\n", pattern, m0->L, recompute);
    rng_t r;
    rng_init(&r, 3, 0);
    int32_t x[2 * MB * MT], y[2 * MB * MT];
    for (int i = 0; i < 2 * MB * MT; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = (int32_t)rng_below(&r, V);
    double l0 = tiny_train2(m0, x, y, MB, MT), l1 = tiny_train2(m1, x, y, MB, MT);
    char det[80];
    snprintf(det, sizeof det, "%.17g", l0);
    check_row(memcmp(&l0, &l1, sizeof l0) == 0, "training loss bitwise equal", det);
    double e = rel_diff(m1->grad_mem, m0->grad_mem, m0->n_elems);
    snprintf(det, sizeof det, "rel %.2e <= 1e-12", e);
    check_row(e <= 1e-12, "every gradient within 1e-12", det);
    int ng = 0;
    for (int l = 0; l < m0->L; l++) ng += m0->lp[l].kind == 'G';
    size_t want = (size_t)ng * MB * m0->H * GDN_CDIV(MT, 8) * m0->dk * m0->dv * sizeof(double);
    snprintf(det, sizeof det, "%zu -> %zu bytes (states %zu)", m0->a_acts.size, m1->a_acts.size, want);
    check_row(m1->a_acts.size >= m0->a_acts.size + want, "activation arena holds the states", det);
    model_free(m0);
    model_free(m1);
}

int main(void) {
    printf("== op: gdn_chunk_fwd_cpu's states into gdn_chunk_bwd_cpu\n");
    op_case(1, 1, 1, 8, 16, 8, true, true, false);
    op_case(2, 16, 2, 8, 16, 8, true, true, true);
    op_case(1, 21, 2, 8, 8, 8, true, true, false);
    op_case(1, 21, 2, 8, 16, 4, false, true, true);
    op_case(1, 21, 1, 8, 16, 8, true, false, true);
    op_case(2, 37, 1, 4, 8, 16, true, true, true);
    model_case("GS", false);
    model_case("GS", true);
    model_case("G", false);
    return gc_finish("test_save_states");
}
