// test_recompute.c — train.recompute (model.c: carve, recompute_layer, dw_later): activations
// kept in one shared set of buffers instead of one per layer. full: the cheap ones (RMSNorm
// outputs, conv, SiLU, L2 norm, gated norm, SwiGLU), redone before each layer's backward. light:
// the RMSNorm, gated norm and SwiGLU outputs only, written again as an extra output of the
// backward kernels (rmsnorm_bwd, gated_rmsnorm_bwd, swiglu_bwd) before the weight-gradient GEMMs
// that read them. On the float64 CPU backend, for patterns GSA (short conv, output gate, tied,
// all dropouts), G without conv and output gate (untied), A, and with the CUDA backend's fused
// input projections (fuse_projections: q..z as one GEMM with the conv; a, b, z as one without;
// the MLP's gate and up as one GEMM, SwiGLU on its strided halves; the first of them also with
// the LM head in row chunks and gdn.bwd_states = saved), each mode against the same model with
// recompute off:
//   - the loss and every gradient are bitwise equal, over three steps (two micro-batches with
//     gradient accumulation each; the second forward overwrites the shared buffers the first
//     backward wrote), with a plain SGD update after each so later steps start from new weights;
//   - the evaluation loss after them is bitwise equal too;
//   - the activation arena shrinks: full <= light < off (full < light with two G layers).
// The bitwise checks fail when a mode misses a buffer (recompute_layer, or an extra output not
// written) or runs a weight gradient before its input is back: the backward would read what the
// last forward layer left in the shared buffer.
#include "../src/core/config.h"
#include "../src/model/model.h"
#include "testutil.h"
#include "tiny_model.h"

enum { B = 2, T = 12, V = 23, STEPS = 3 };  // V: tiny_config's vocabulary
static const char *const mode_name[] = {"off", "full", "light"};

static void test_case(const char *name, const char *pattern, bool conv, bool ogate, bool tied,
                      bool fused, bool extras) {
    gdn_config c = tiny_config(pattern, 4);  // window 4; GSA x 4: two G layers share on
    c.tie_embeddings = tied;
    c.dropout = 0.1;
    c.embed_dropout = 0.15;
    c.mixer_dropout = 0.2;
    c.gdn_chunk_size = 8;
    c.gdn_short_conv = conv;
    c.gdn_output_gate = ogate;
    if (extras) {  // the LM head in row chunks of 7 tokens, the GDN chunk-start states kept
        c.head_chunk_rows = 7;
        c.gdn_bwd_states = GDN_BWD_STATES_SAVED;
    }
    backend be = backend_cpu;
    be.fuse_projections = fused;
    const gdn_recompute modes[3] = {RECOMPUTE_OFF, RECOMPUTE_FULL, RECOMPUTE_LIGHT};
    model *m[3];
    for (int k = 0; k < 3; k++) {
        c.recompute = modes[k];
        m[k] = model_create(&c, &be, B, T);
        model_init_params(m[k], 21);
    }
    printf("\n== %s (pattern %s x %d layers)\n", name, pattern, m[0]->L);

    rng_t r;
    rng_init(&r, 9, 0);
    int32_t x[2 * B * T], y[2 * B * T];
    char det[96], what[96];
    const size_t n = m[0]->n_elems;
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < 2 * B * T; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = (int32_t)rng_below(&r, V);
        y[5 + s] = -1;
        double l[3];
        for (int k = 0; k < 3; k++) l[k] = tiny_train2(m[k], x, y, B, T);
        for (int k = 1; k < 3; k++) {
            snprintf(det, sizeof det, "%.17g", l[k]);
            snprintf(what, sizeof what, "step %d, %s: training loss bitwise equal", s, mode_name[k]);
            check_row(memcmp(&l[0], &l[k], sizeof l[0]) == 0, what, det);
            size_t ndiff = 0;
            const double *g0 = m[0]->grad_mem, *gk = m[k]->grad_mem;
            for (size_t i = 0; i < n; i++) ndiff += memcmp(&g0[i], &gk[i], sizeof(double)) != 0;
            snprintf(det, sizeof det, "%zu of %zu differ", ndiff, n);
            snprintf(what, sizeof what, "step %d, %s: every gradient bitwise equal", s, mode_name[k]);
            check_row(ndiff == 0, what, det);
        }
        for (int k = 0; k < 3; k++) {  // p -= 0.05 g: the next step from other weights
            double *p = m[k]->param_mem;
            const double *g = m[k]->grad_mem;
            for (size_t i = 0; i < n; i++) p[i] -= 0.05 * g[i];
        }
    }
    const double e0 = model_eval_loss(m[0], x, y);
    for (int k = 1; k < 3; k++) {
        double ek = model_eval_loss(m[k], x, y);
        snprintf(what, sizeof what, "%s: evaluation loss bitwise equal", mode_name[k]);
        check_row(memcmp(&e0, &ek, sizeof e0) == 0, what, "");
    }
    const size_t a_off = m[0]->a_acts.size, a_full = m[1]->a_acts.size, a_light = m[2]->a_acts.size;
    const bool gdn = strchr(pattern, 'G') != NULL;  // light keeps the conv outputs per layer
    snprintf(det, sizeof det, "off %zu, light %zu, full %zu bytes", a_off, a_light, a_full);
    check_row(a_light < a_off && (gdn ? a_full < a_light : a_full == a_light),
              gdn ? "activation arena: full < light < off" : "activation arena: full = light < off", det);
    for (int k = 0; k < 3; k++) model_free(m[k]);
}

int main(void) {
    test_case("GSA: conv, output gate, tied, dropouts", "GSA", true, true, true, false, false);
    test_case("G: no conv, no output gate, untied", "G", false, false, false, false, false);
    test_case("A: attention only", "A", true, true, true, false, false);
    test_case("GSA, fused projections q..z (the CUDA layout), LM head in row chunks, "
              "gdn.bwd_states = saved", "GSA", true, true, true, true, true);
    test_case("G, fused projections a, b, z, no conv", "G", false, true, false, true, false);
    return gc_finish("test_recompute");
}
