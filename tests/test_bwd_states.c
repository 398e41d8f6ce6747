// test_bwd_states.c — gdn.bwd_states on the float64 CPU backend: with saved the forward keeps
// the rule's chunk-start states (gdn_cpu_params.hs, gdn_op.hs) and the backward reads them instead
// of recomputing them with its own forward scan (replay and recompute: the CPU backend keeps
// nothing to replay from, both recompute).
//   - op level (gdn_chunk_fwd_cpu -> gdn_chunk_bwd_cpu): the gradients with the forward's states
//     equal those of the recomputing backward within 1e-12 relative, for T a multiple of the chunk
//     and not, with and without an initial state, gate / delta on and off; and a negative control:
//     one state element moved by 1e-6 moves the gradients beyond that bound (the backward reads
//     the states it is given);
//   - model level (patterns GS and G, two micro-batches, with and without train.recompute): the
//     loss bitwise, every gradient within 1e-12 of the model with gdn.bwd_states = replay (the
//     default), and the activation arena larger by the states' size; recompute: the loss and
//     every gradient bitwise those of replay, the same arena;
//   - config: gdn.bwd_states takes replay | recompute | saved, not the boolean words; a config
//     file that still sets gdn.save_states fails with a hint to gdn.bwd_states, a checkpoint's
//     config text with it loads as bwd_states (true: saved, false: replay).
// The CUDA side (gdn_fwd_params.h_states -> gdn_bwd_params.h_states) is checked bitwise by
// tests/gpu/test_gdn_bwd.cu (its "states" rows) and tests/gpu/test_model_cuda.cu.
#include <math.h>
#include <string.h>
#include <unistd.h>
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
    c.gdn_bwd_states = GDN_BWD_STATES_SAVED;
    model *m1 = model_create(&c, &backend_cpu, MB, MT);
    c.gdn_bwd_states = GDN_BWD_STATES_RECOMPUTE;
    model *m2 = model_create(&c, &backend_cpu, MB, MT);
    model_init_params(m0, 5);
    model_init_params(m1, 5);
    model_init_params(m2, 5);
    printf("\n== model, pattern %s x %d layers, recompute %d\n", pattern, m0->L, recompute);
    rng_t r;
    rng_init(&r, 3, 0);
    int32_t x[2 * MB * MT], y[2 * MB * MT];
    for (int i = 0; i < 2 * MB * MT; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = (int32_t)rng_below(&r, V);
    double l0 = tiny_train2(m0, x, y, MB, MT), l1 = tiny_train2(m1, x, y, MB, MT);
    double l2 = tiny_train2(m2, x, y, MB, MT);
    char det[80];
    snprintf(det, sizeof det, "%.17g", l0);
    check_row(memcmp(&l0, &l1, sizeof l0) == 0, "saved: training loss bitwise equal", det);
    double e = rel_diff(m1->grad_mem, m0->grad_mem, m0->n_elems);
    snprintf(det, sizeof det, "rel %.2e <= 1e-12", e);
    check_row(e <= 1e-12, "saved: every gradient within 1e-12", det);
    check_row(memcmp(&l0, &l2, sizeof l0) == 0 &&
                  memcmp(m0->grad_mem, m2->grad_mem, m0->n_elems * sizeof(double)) == 0 &&
                  m2->a_acts.size == m0->a_acts.size,
              "recompute: loss, gradients and arena those of replay", "bitwise");
    int ng = 0;
    for (int l = 0; l < m0->L; l++) ng += m0->lp[l].kind == 'G';
    size_t want = (size_t)ng * MB * m0->H * GDN_CDIV(MT, 8) * m0->dk * m0->dv * sizeof(double);
    snprintf(det, sizeof det, "%zu -> %zu bytes (states %zu)", m0->a_acts.size, m1->a_acts.size, want);
    check_row(m1->a_acts.size >= m0->a_acts.size + want, "activation arena holds the states", det);
    model_free(m0);
    model_free(m1);
    model_free(m2);
}

// config text (as a file, or as a checkpoint's text) -> *c; false on an error, whose stderr text
// goes to err (n bytes)
static bool load_text(gdn_config *c, const char *text, bool as_file, char *err, size_t n) {
    char path[] = "/tmp/test_bwd_states_XXXXXX";
    if (as_file) {
        int fd;
        CHECK_SYS(fd = mkstemp(path));
        CHECK_SYS(write(fd, text, strlen(text)));
        CHECK_SYS(close(fd));
    }
    FILE *f = tmpfile();
    CHECK_PTR(f);
    fflush(stderr);
    int saved;
    CHECK_SYS(saved = dup(2));
    CHECK_SYS(dup2(fileno(f), 2));
    const bool ok = as_file ? config_load(c, path, NULL, 0) : config_load_string(c, text, "t.ini");
    fflush(stderr);
    CHECK_SYS(dup2(saved, 2));
    CHECK_SYS(close(saved));
    if (as_file) CHECK_SYS(unlink(path));
    rewind(f);
    const size_t got = fread(err, 1, n - 1, f);
    err[got] = '\0';
    fclose(f);
    return ok;
}

// gdn.bwd_states through the config loader: its three names, no boolean words, the replaced
// gdn.save_states named in a config file's error, and read as bwd_states in a checkpoint's text
static void config_case(void) {
    printf("\n== config: gdn.bwd_states\n");
    static const struct { const char *v; gdn_bwd_states_mode want; } ok[] = {
        {"replay", GDN_BWD_STATES_REPLAY}, {"recompute", GDN_BWD_STATES_RECOMPUTE},
        {"saved", GDN_BWD_STATES_SAVED}};
    gdn_config c;
    config_defaults(&c);
    check_row(c.gdn_bwd_states == GDN_BWD_STATES_REPLAY, "default: replay", "");
    char text[64], err[1024];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(text, sizeof text, "[gdn]\nbwd_states = %s\n", ok[i].v);
        config_defaults(&c);
        const bool loaded = load_text(&c, text, true, err, sizeof err);
        check_row(loaded && c.gdn_bwd_states == ok[i].want, ok[i].v, loaded ? "loaded" : err);
    }
    config_defaults(&c);
    bool failed = !load_text(&c, "[gdn]\nbwd_states = true\n", true, err, sizeof err);
    check_row(failed, "gdn.bwd_states = true: an error", failed ? "" : "loaded");
    config_defaults(&c);
    failed = !load_text(&c, "[gdn]\nsave_states = true\n", true, err, sizeof err);
    err[strcspn(err, "\n")] = '\0';
    check_row(failed && strstr(err, "gdn.bwd_states = saved") != NULL,
              "gdn.save_states in a config file: an error naming gdn.bwd_states = saved", err);
    for (int v = 0; v < 2; v++) {  // a checkpoint's text written with save_states
        snprintf(text, sizeof text, "[gdn]\nsave_states = %s\n", v ? "true" : "false");
        config_defaults(&c);
        const bool loaded = load_text(&c, text, false, err, sizeof err);
        const gdn_bwd_states_mode want = v ? GDN_BWD_STATES_SAVED : GDN_BWD_STATES_REPLAY;
        check_row(loaded && c.gdn_bwd_states == want,
                  v ? "checkpoint text save_states = true: read as saved"
                    : "checkpoint text save_states = false: read as replay",
                  loaded ? "loaded" : err);
    }
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
    config_case();
    return gc_finish("test_bwd_states");
}
