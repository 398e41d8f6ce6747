// test_fused_proj.c — GDN's input projections as one GEMM (model.c, gdn_inproj; the CUDA
// backend's fuse_projections): q, k, v, a, b, z with the short conv, a, b, z without. On the
// float64 CPU backend with fuse_projections switched on, against the same model without it
// (the reference's one GEMM per weight), over two micro-batches with gradient accumulation and
// all dropouts:
//   - the fused layout was taken (acts.inproj set) where the weights are contiguous;
//   - the training loss, every gradient tensor and the evaluation loss agree to float64
//     rounding (relative 1e-12 per tensor: the fused GEMM sums dx over the whole group at once,
//     the reference adds a GEMM per weight, so the last bits may differ);
// for every subset of (gate, delta, output gate), with and without the short conv, with
// train.recompute (recompute_layer's gated norm reads the strided z), and for pattern GS.
// A wrong column offset or stride for any member or its gradient moves a gradient at O(1).
// The MLP's gate and up projections (model.c, mlp_fused) run as one GEMM in every case above;
// test_mlp checks them against the reference backend (two GEMMs; pattern SA: the MLP is the
// only fused projection), for each train.recompute mode, patterns G and SA, a hidden width whose
// F d is not a multiple of the arenas' 32-element padding (the weights are not contiguous: two
// GEMMs either way) and one whose F rows are not a multiple of 16 bytes (two GEMMs: model.c
// mlp_fused). The gate/up buffer is one (N, 2F) exactly when fused.
#include <math.h>
#include "../src/core/config.h"
#include "../src/model/model.h"
#include "testutil.h"
#include "tiny_model.h"

enum { B = 2, T = 12, V = 23 };  // V: tiny_config's vocabulary
static const double TOL = 1e-12;

// Loss, every gradient and the evaluation loss of m1 against m0 (relative TOL), with how many
// gradient elements are not bitwise equal (the detail column).
static void compare_models(model *m0, model *m1, const int32_t *x, const int32_t *y) {
    double l0 = tiny_train2(m0, x, y, B, T), l1 = tiny_train2(m1, x, y, B, T);
    char det[96];
    snprintf(det, sizeof det, "%.3e", fabs(l1 - l0) / fabs(l0));
    check_row(fabs(l1 - l0) <= TOL * fabs(l0), "training loss", det);
    double worst = 0;
    size_t ndiff = 0;
    const char *worst_name = "-";
    for (int i = 0; i < m0->n_params; i++) {
        const double *g0 = model_grad(m0, i), *g1 = model_grad(m1, i);
        double diff = 0, mag = 0;
        for (size_t j = 0; j < m0->params[i].numel; j++) {
            diff = fmax(diff, fabs(g1[j] - g0[j]));
            mag = fmax(mag, fabs(g0[j]));
            ndiff += memcmp(&g0[j], &g1[j], sizeof(double)) != 0;
        }
        double rel = mag > 0 ? diff / mag : diff;
        if (rel > worst || (rel == worst && worst_name[0] == '-')) worst = rel, worst_name = m0->params[i].name;
    }
    snprintf(det, sizeof det, "%.3e, %zu not bitwise", worst, ndiff);
    check_row(worst <= TOL, "every gradient tensor (max |diff| / max |g|)", det);
    double e0 = model_eval_loss(m0, x, y), e1 = model_eval_loss(m1, x, y);
    snprintf(det, sizeof det, "%.3e", fabs(e1 - e0) / fabs(e0));
    check_row(fabs(e1 - e0) <= TOL * fabs(e0), "evaluation loss", det);
}

// Two steps' tokens and targets (2 B T each) from seed; target `ignored` is -1 (not counted)
static void draw_tokens(int32_t *x, int32_t *y, uint64_t seed, int ignored) {
    rng_t r;
    rng_init(&r, seed, 0);
    for (int i = 0; i < 2 * B * T; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = (int32_t)rng_below(&r, V);
    y[ignored] = -1;
}

// Both kinds of case: the tiny config with every dropout on and GDN chunks of 8
static gdn_config case_config(const char *pattern) {
    gdn_config c = tiny_config(pattern, 2);
    c.dropout = 0.1;
    c.embed_dropout = 0.15;
    c.mixer_dropout = 0.2;
    c.gdn_chunk_size = 8;
    return c;
}

static void test_case(const char *pattern, bool gate, bool delta, bool ogate, bool conv, bool rc) {
    gdn_config c = case_config(pattern);
    c.gdn_gate = gate;
    c.gdn_delta = delta;
    c.gdn_output_gate = ogate;
    c.gdn_short_conv = conv;
    c.recompute = rc;
    backend fused = backend_cpu;
    fused.fuse_projections = true;
    model *m0 = model_create(&c, &backend_cpu, B, T);
    model *m1 = model_create(&c, &fused, B, T);
    model_init_params(m0, 33);
    model_init_params(m1, 33);
    printf("\n== pattern %s, gate %d delta %d output gate %d conv %d recompute %d\n", pattern, gate,
           delta, ogate, conv, rc);
    bool any = gate || delta || ogate || conv;
    check_row(!any || (m1->acts[0].inproj != NULL && m0->acts[0].inproj == NULL),
          "fused layout taken (and only with fuse_projections)", any ? (conv ? "q..z" : "a, b, z") : "none");

    int32_t x[2 * B * T], y[2 * B * T];
    draw_tokens(x, y, 5, 7);

    compare_models(m0, m1, x, y);
    model_free(m0);
    model_free(m1);
}

static void test_mlp(const char *pattern, int hidden, int dm, gdn_recompute rc) {
    gdn_config c = case_config(pattern);
    c.d_model = dm;
    c.mlp_hidden = hidden;
    c.recompute = rc;
    backend fused = backend_cpu;
    fused.fuse_projections = true;
    model *m0 = model_create(&c, &backend_cpu, B, T);  // the reference: a GEMM per weight
    model *m1 = model_create(&c, &fused, B, T);
    model_init_params(m0, 34);
    model_init_params(m1, 34);
    const bool contiguous = (size_t)hidden * c.d_model % 32 == 0;
    const bool rows16 = hidden * sizeof(double) % 16 == 0;
    printf("\n== MLP gate|up: pattern %s, d %d, hidden %d (F d %% 32 = %d), recompute %d\n", pattern,
           dm, hidden, hidden * c.d_model % 32, (int)rc);
    bool one = true, two = true;  // m1: one (N, 2F) buffer in every layer; m0: two
    for (int l = 0; l < m1->L; l++) {
        one &= m1->acts[l].m_up == (char *)m1->acts[l].m_gate + (size_t)hidden * sizeof(double);
        two &= m0->acts[l].m_up != (char *)m0->acts[l].m_gate + (size_t)hidden * sizeof(double);
    }
    check_row(two && one == (contiguous && rows16), "gate|up one (N, 2F) iff contiguous, 16 B rows",
              one ? "fused" : "two GEMMs");

    int32_t x[2 * B * T], y[2 * B * T];
    draw_tokens(x, y, 6, 3);
    compare_models(m0, m1, x, y);
    model_free(m0);
    model_free(m1);
}

int main(void) {
    for (int v = 0; v < 8; v++) test_case("G", v & 1, (v >> 1) & 1, (v >> 2) & 1, v & 1, false);
    test_case("G", true, true, true, true, true);
    test_case("G", true, false, true, false, true);
    test_case("GS", true, true, true, true, false);
    const gdn_recompute rcs[3] = {RECOMPUTE_OFF, RECOMPUTE_LIGHT, RECOMPUTE_FULL};
    for (int k = 0; k < 3; k++) {
        test_mlp("G", 24, 16, rcs[k]);
        test_mlp("SA", 24, 16, rcs[k]);
    }
    test_mlp("G", 25, 16, RECOMPUTE_OFF);  // F d = 400: padding between gate and up
    test_mlp("G", 25, 16, RECOMPUTE_LIGHT);
    test_mlp("G", 25, 32, RECOMPUTE_OFF);  // contiguous, but rows of 200 bytes
    return gc_finish("test_fused_proj");
}
