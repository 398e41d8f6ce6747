// test_fused_proj.c — GDN's input projections as one GEMM (model.c, gdn_inproj; the CUDA
// backend's fuse_projections): q, k, v, a, b, z with the short conv, a, b, z without. On the float64 CPU backend with fuse_projections switched on, against the
// same model without it (the reference's one GEMM per weight), over two micro-batches with
// gradient accumulation and all dropouts:
//   - the fused layout was taken (acts.inproj set) where the weights are contiguous;
//   - the training loss, every gradient tensor and the evaluation loss agree to float64
//     rounding (relative 1e-12 per tensor: the fused GEMM sums dx over the whole group at once,
//     the reference adds a GEMM per weight, so the last bits may differ);
// for every subset of (gate, delta, output gate), with and without the short conv, with
// train.recompute (recompute_layer's gated norm reads the strided z), and for pattern GS.
// A wrong column offset or stride for any member or its gradient moves a gradient at O(1).
#include <math.h>
#include "../src/core/config.h"
#include "../src/model/model.h"
#include "testutil.h"
#include "tiny_model.h"

enum { B = 2, T = 12, V = 23 };  // V: tiny_config's vocabulary
static const double TOL = 1e-12;

static void test_case(const char *pattern, bool gate, bool delta, bool ogate, bool conv, bool rc) {
    gdn_config c = tiny_config(pattern, 2);
    c.dropout = 0.1;
    c.embed_dropout = 0.15;
    c.mixer_dropout = 0.2;
    c.gdn_chunk_size = 8;
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

    rng_t r;
    rng_init(&r, 5, 0);
    int32_t x[2 * B * T], y[2 * B * T];
    for (int i = 0; i < 2 * B * T; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = (int32_t)rng_below(&r, V);
    y[7] = -1;

    double l0 = tiny_train2(m0, x, y, B, T), l1 = tiny_train2(m1, x, y, B, T);
    char det[96];
    snprintf(det, sizeof det, "%.3e", fabs(l1 - l0) / fabs(l0));
    check_row(fabs(l1 - l0) <= TOL * fabs(l0), "training loss", det);
    double worst = 0;
    const char *worst_name = "-";
    for (int i = 0; i < m0->n_params; i++) {
        const double *g0 = model_grad(m0, i), *g1 = model_grad(m1, i);
        double diff = 0, mag = 0;
        for (size_t j = 0; j < m0->params[i].numel; j++) {
            diff = fmax(diff, fabs(g1[j] - g0[j]));
            mag = fmax(mag, fabs(g0[j]));
        }
        double rel = mag > 0 ? diff / mag : diff;
        if (rel > worst || (rel == worst && worst_name[0] == '-')) worst = rel, worst_name = m0->params[i].name;
    }
    snprintf(det, sizeof det, "%.3e (%s)", worst, worst_name);
    check_row(worst <= TOL, "every gradient tensor (max |diff| / max |g|)", det);
    double e0 = model_eval_loss(m0, x, y), e1 = model_eval_loss(m1, x, y);
    snprintf(det, sizeof det, "%.3e", fabs(e1 - e0) / fabs(e0));
    check_row(fabs(e1 - e0) <= TOL * fabs(e0), "evaluation loss", det);
    model_free(m0);
    model_free(m1);
}

int main(void) {
    for (int v = 0; v < 8; v++) test_case("G", v & 1, (v >> 1) & 1, (v >> 2) & 1, v & 1, false);
    test_case("G", true, true, true, true, true);
    test_case("G", true, false, true, false, true);
    test_case("GS", true, true, true, true, false);
    return gc_finish("test_fused_proj");
}
