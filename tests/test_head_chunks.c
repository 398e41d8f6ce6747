// test_head_chunks.c — the LM head and the fused loss in row chunks (model.c, head_loss;
// train.head_chunk_rows). On the float64 CPU backend, patterns GS (tied embeddings: the head's
// gradient adds to the embedding's) and G (untied), two micro-batches with accumulation:
//   - chunks of 7 rows (24 rows a micro-batch: 7, 7, 7, 3) and of 24 (one chunk) against the
//     default (one chunk at these sizes): the loss within 1e-14 relative (only the order of the
//     per-chunk sums differs), every gradient within 1e-12, the evaluation loss within 1e-14;
//   - one chunk is bitwise the default;
//   - the activation arena shrinks by (24 - 7) x V logits;
//   - a backend with crossentropy_defer / loss_collect (the CUDA backend's path, here over the
//     CPU crossentropy) gives the chunks of 7 bitwise: loss, gradients, evaluation loss.
// The CUDA backend runs the same chunks through tests/gpu/test_model_cuda.cu (part 1, fp32,
// head_chunk_rows 100 of 256 rows) against this CPU model.
#include <math.h>
#include <string.h>
#include "../src/core/config.h"
#include "../src/core/rng.h"
#include "../src/model/model.h"
#include "testutil.h"
#include "tiny_model.h"

enum { B = 2, T = 12, V = 23 };

static double rel(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// crossentropy_defer / loss_collect over the CPU backend's crossentropy: each call's sum kept
// (the CUDA backend keeps the row losses on the device and sums them at loss_collect).
static double kept[64];
static int n_kept, max_kept;
static void defer_ce(void *logits, const int32_t *tgt, int N, int Vv, double scale) {
    if (n_kept == 64) gc_failures++, printf("  more than 64 kept losses  FAIL\n");
    else kept[n_kept++] = backend_cpu.crossentropy(logits, tgt, N, Vv, scale);
    if (n_kept > max_kept) max_kept = n_kept;
}
static double collect(void) {
    double s = 0;
    for (int i = 0; i < n_kept; i++) s += kept[i];
    n_kept = 0;
    return s;
}

static void test_case(const char *pattern, bool tied) {
    gdn_config c = tiny_config(pattern, 2);
    c.tie_embeddings = tied;
    c.dropout = 0.1;
    c.gdn_chunk_size = 8;
    model *m0 = model_create(&c, &backend_cpu, B, T);
    c.head_chunk_rows = 7;
    model *m1 = model_create(&c, &backend_cpu, B, T);
    c.head_chunk_rows = B * T;
    model *m2 = model_create(&c, &backend_cpu, B, T);
    backend deferring = backend_cpu;
    deferring.crossentropy_defer = defer_ce;
    deferring.loss_collect = collect;
    c.head_chunk_rows = 7;
    model *m3 = model_create(&c, &deferring, B, T);
    model *ms[4] = {m0, m1, m2, m3};
    for (int i = 0; i < 4; i++) model_init_params(ms[i], 17);
    printf("\n== pattern %s x %d, %s embeddings: head rows %d / %d / %d\n", pattern, m0->L,
           tied ? "tied" : "untied", m0->head_rows, m1->head_rows, m2->head_rows);
    rng_t r;
    rng_init(&r, 4, 0);
    int32_t x[2 * B * T], y[2 * B * T];
    for (int i = 0; i < 2 * B * T; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = (int32_t)rng_below(&r, V);
    y[3] = -1;   // ignored targets in the first chunk
    y[22] = -1;  // and in the last, short one
    double l[4], ev[4];
    for (int i = 0; i < 4; i++) l[i] = tiny_train2(ms[i], x, y, B, T);
    char det[96];
    snprintf(det, sizeof det, "%.17g vs %.17g", l[1], l[0]);
    check_row(fabs(l[1] - l[0]) <= 1e-14 * fabs(l[0]), "chunks of 7: loss within 1e-14", det);
    double e = rel(m1->grad_mem, m0->grad_mem, m0->n_elems);
    snprintf(det, sizeof det, "rel %.2e", e);
    check_row(e <= 1e-12, "chunks of 7: every gradient within 1e-12", det);
    for (int i = 0; i < 4; i++) ev[i] = model_eval_loss(ms[i], x, y);
    snprintf(det, sizeof det, "%.17g vs %.17g", ev[1], ev[0]);
    check_row(fabs(ev[1] - ev[0]) <= 1e-14 * fabs(ev[0]), "chunks of 7: evaluation loss within 1e-14", det);
    bool same = !memcmp(&l[2], &l[0], sizeof l[0]) && !memcmp(&ev[2], &ev[0], sizeof ev[0]) &&
                !memcmp(m2->grad_mem, m0->grad_mem, m0->n_elems * sizeof(double));
    check_row(same, "one chunk of 24 rows: loss, gradients, evaluation bitwise the default", "");
    same = !memcmp(&l[3], &l[1], sizeof l[0]) && !memcmp(&ev[3], &ev[1], sizeof ev[0]) &&
           !memcmp(m3->grad_mem, m1->grad_mem, m1->n_elems * sizeof(double));
    snprintf(det, sizeof det, "%d losses kept at most", max_kept);
    check_row(same && max_kept == 4 && n_kept == 0,
              "chunks of 7, losses deferred: loss, gradients, evaluation bitwise", det);
    size_t want = (size_t)(B * T - 7) * V * sizeof(double);
    snprintf(det, sizeof det, "%zu -> %zu bytes", m0->a_acts.size, m1->a_acts.size);
    check_row(m0->a_acts.size - m1->a_acts.size >= want, "activation arena smaller by 17 x V logits", det);
    for (int i = 0; i < 4; i++) model_free(ms[i]);
}

int main(void) {
    test_case("GS", true);
    test_case("G", false);
    return gc_finish("test_head_chunks");
}
