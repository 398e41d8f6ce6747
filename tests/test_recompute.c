// test_recompute.c — train.recompute (model.c: carve, recompute_layer): the cheap activations
// (RMSNorm outputs, conv, SiLU, L2 norm, gated norm, SwiGLU) kept in one shared set of buffers
// and redone in the backward. On the float64 CPU backend, for patterns GS (short conv, output
// gate, tied, both dropouts), G without conv and output gate (untied), and A:
//   - the loss and every gradient are bitwise those of the same model without recompute, over
//     two micro-batches with gradient accumulation (the second forward overwrites the shared
//     buffers the first backward recomputed);
//   - the evaluation loss after it is bitwise equal too;
//   - the activation arena is smaller.
// The bitwise checks fail when recompute_layer misses a buffer: the backward would read what the
// last forward layer left there.
#include "../src/core/config.h"
#include "../src/model/model.h"
#include "testutil.h"
#include "tiny_model.h"

enum { B = 2, T = 12, V = 23 };  // V: tiny_config's vocabulary

static void test_case(const char *name, const char *pattern, bool conv, bool ogate, bool tied) {
    gdn_config c = tiny_config(pattern, 3);  // window 4
    c.tie_embeddings = tied;
    c.dropout = 0.1;
    c.embed_dropout = 0.15;
    c.mixer_dropout = 0.2;
    c.gdn_chunk_size = 8;
    c.gdn_short_conv = conv;
    c.gdn_output_gate = ogate;
    model *m0 = model_create(&c, &backend_cpu, B, T);
    c.recompute = true;
    model *m1 = model_create(&c, &backend_cpu, B, T);
    model_init_params(m0, 21);
    model_init_params(m1, 21);
    printf("\n== %s (pattern %s x %d layers)\n", name, pattern, m0->L);

    rng_t r;
    rng_init(&r, 9, 0);
    int32_t x[2 * B * T], y[2 * B * T];
    for (int i = 0; i < 2 * B * T; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = (int32_t)rng_below(&r, V);
    y[5] = -1;

    double l0 = tiny_train2(m0, x, y, B, T), l1 = tiny_train2(m1, x, y, B, T);
    char det[64];
    snprintf(det, sizeof det, "%.17g", l0);
    check_row(memcmp(&l0, &l1, sizeof l0) == 0, "training loss bitwise equal", det);
    size_t n = m0->n_elems, ndiff = 0;
    const double *g0 = m0->grad_mem, *g1 = m1->grad_mem;
    for (size_t i = 0; i < n; i++) ndiff += memcmp(&g0[i], &g1[i], sizeof(double)) != 0;
    snprintf(det, sizeof det, "%zu of %zu differ", ndiff, n);
    check_row(ndiff == 0, "every gradient bitwise equal", det);
    double e0 = model_eval_loss(m0, x, y), e1 = model_eval_loss(m1, x, y);
    check_row(memcmp(&e0, &e1, sizeof e0) == 0, "evaluation loss bitwise equal", "");
    snprintf(det, sizeof det, "%zu -> %zu bytes", m0->a_acts.size, m1->a_acts.size);
    check_row(m1->a_acts.size < m0->a_acts.size, "activation arena smaller", det);
    model_free(m0);
    model_free(m1);
}

int main(void) {
    test_case("GS: conv, output gate, tied, dropouts", "GS", true, true, true);
    test_case("G: no conv, no output gate, untied", "G", false, false, false);
    test_case("A: attention only", "A", true, true, true);
    return gc_finish("test_recompute");
}
