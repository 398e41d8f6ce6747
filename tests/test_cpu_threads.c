// test_cpu_threads.c — the threaded float64 CPU backend gives bitwise the same results for any
// thread count (src/fwd/cpu_threads.h: parallel loops only over independent outputs). Runs with
// 1 thread (OpenMP and OpenBLAS), then with 2 (both pools: train.threads = 2) and with 3 OpenMP
// threads (OpenBLAS kept at 1: its dgemm at 3 threads cuts tiles elsewhere and may change the
// last bits, see cpu_threads.h), and requires memcmp equality of:
//   * the GDN chunk and token forward/backward and attention forward/backward alone, at shapes
//     with B*H >= 4 pairs, a partial last chunk, initial/final states and their gradients;
//   * a whole GS model (GDN + sliding-window attention, dropout on, some ignored targets):
//     the loss and the whole gradient arena after model_forward_backward on backend_cpu.
// The work thresholds are set to 0, so that every row and elementwise op takes its parallel
// path at these small shapes.
#include "testutil.h"
#include "../src/bwd/bwd_cpu.h"
#include "../src/fwd/cpu_threads.h"
#include "../src/model/model.h"

// each compared with 1 thread in both pools
static const struct { int omp, blas; const char *name; } THREADS[] = {
    {2, 2, "2"}, {3, 1, "3/blas 1"}};
enum { NTHR = 2 };

static void set_threads(int t) { cpu_set_thread_counts(THREADS[t].omp, THREADS[t].blas); }

static void check_same(const char *op, const char *what, int t, const void *a, const void *b,
                       size_t bytes) {
    int ok = memcmp(a, b, bytes) == 0;
    printf("%-26s %-8s %-10s %10zu  %s\n", op, what, THREADS[t].name, bytes,
           ok ? "identical" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}

// ---- the gated delta rule, chunked and token by token ---------------------------------------
enum { GB = 3, GT = 150, GH = 2, GDK = 16, GDV = 32, GC = 64 };  // 6 (b, h) pairs, last chunk 22
enum { GNK = GB * GT * GH * GDK, GNV = GB * GT * GH * GDV, GNG = GB * GT * GH,
       GNS = GB * GH * GDK * GDV };

typedef struct {
    double o[GNV], ht[GNS], dq[GNK], dk[GNK], dv[GNV], dg[GNG], db[GNG], dh0[GNS];
} gdn_out;

static void gdn_run(bool chunked, const gdn_cpu_params *in, gdn_out *out) {
    gdn_cpu_params p = *in;
    p.o = out->o;
    p.ht = out->ht;
    p.dq = out->dq;
    p.dk = out->dk;
    p.dv = out->dv;
    p.dg = out->dg;
    p.dbeta = out->db;
    p.dh0 = out->dh0;
    if (chunked) {
        gdn_chunk_fwd_cpu(&p);
        gdn_chunk_bwd_cpu(&p);
    } else {
        gdn_token_fwd_cpu(&p);
        gdn_token_bwd_cpu(&p);
    }
}

static void test_gdn(rng_t *r) {
    double *q = dalloc(GNK), *k = dalloc(GNK), *v = dalloc(GNV), *g = dalloc(GNG);
    double *beta = dalloc(GNG), *h0 = dalloc(GNS), *dO = dalloc(GNV), *dht = dalloc(GNS);
    fill_normal(q, GNK, r, 0.25);
    fill_normal(k, GNK, r, 0.25);
    fill_normal(v, GNV, r, 1.0);
    fill_uniform(g, GNG, r, -1.0, -0.01);
    fill_uniform(beta, GNG, r, 0.05, 0.95);
    fill_normal(h0, GNS, r, 0.5);
    fill_normal(dO, GNV, r, 1.0);
    fill_normal(dht, GNS, r, 1.0);
    gdn_cpu_params p = {.B = GB, .T = GT, .H = GH, .Dk = GDK, .Dv = GDV, .chunk = GC,
                        .mode = {.gate = true, .delta = true, .neg_eigval = false},
                        .q = q, .k = k, .v = v, .g = g, .beta = beta, .h0 = h0, .dO = dO,
                        .dht = dht};
    gdn_out *ref = gdn_malloc(sizeof *ref), *got = gdn_malloc(sizeof *got);
    for (int chunked = 1; chunked >= 0; chunked--) {
        const char *op = chunked ? "gdn_chunk fwd+bwd" : "gdn_token fwd+bwd";
        cpu_set_threads(1);
        gdn_run(chunked, &p, ref);
        for (int t = 0; t < NTHR; t++) {
            set_threads(t);
            memset(got, 0, sizeof *got);
            gdn_run(chunked, &p, got);
            check_same(op, "o", t, got->o, ref->o, sizeof ref->o);
            check_same(op, "ht", t, got->ht, ref->ht, sizeof ref->ht);
            check_same(op, "dq", t, got->dq, ref->dq, sizeof ref->dq);
            check_same(op, "dk", t, got->dk, ref->dk, sizeof ref->dk);
            check_same(op, "dv", t, got->dv, ref->dv, sizeof ref->dv);
            check_same(op, "dg", t, got->dg, ref->dg, sizeof ref->dg);
            check_same(op, "dbeta", t, got->db, ref->db, sizeof ref->db);
            check_same(op, "dh0", t, got->dh0, ref->dh0, sizeof ref->dh0);
        }
    }
    free(ref);
    free(got);
    free(q), free(k), free(v), free(g), free(beta), free(h0), free(dO), free(dht);
}

// ---- sliding-window attention --------------------------------------------------------------
enum { AB = 2, AT = 100, AH = 3, AD = 16, AW = 40 };  // 6 (b, h) pairs, window < T
enum { AN = AB * AT * AH * AD, AL = AB * AH * AT };

typedef struct { double o[AN], lse[AL], dq[AN], dk[AN], dv[AN]; } attn_out;

static void attn_run(const double *q, const double *k, const double *v, const double *dO,
                     attn_out *out) {
    const double scale = 1.0 / sqrt((double)AD);
    attention_fwd_cpu(out->o, out->lse, q, k, v, AB, AT, AH, AD, AW, scale);
    attention_bwd_cpu(out->dq, out->dk, out->dv, dO, q, k, v, out->o, out->lse, AB, AT, AH, AD,
                      AW, scale);
}

static void test_attention(rng_t *r) {
    double *q = dalloc(AN), *k = dalloc(AN), *v = dalloc(AN), *dO = dalloc(AN);
    fill_normal(q, AN, r, 1.0);
    fill_normal(k, AN, r, 1.0);
    fill_normal(v, AN, r, 1.0);
    fill_normal(dO, AN, r, 1.0);
    attn_out *ref = gdn_malloc(sizeof *ref), *got = gdn_malloc(sizeof *got);
    cpu_set_threads(1);
    attn_run(q, k, v, dO, ref);
    for (int t = 0; t < NTHR; t++) {
        set_threads(t);
        memset(got, 0, sizeof *got);
        attn_run(q, k, v, dO, got);
        check_same("attention fwd+bwd", "o", t, got->o, ref->o, sizeof ref->o);
        check_same("attention fwd+bwd", "lse", t, got->lse, ref->lse, sizeof ref->lse);
        check_same("attention fwd+bwd", "dq", t, got->dq, ref->dq, sizeof ref->dq);
        check_same("attention fwd+bwd", "dk", t, got->dk, ref->dk, sizeof ref->dk);
        check_same("attention fwd+bwd", "dv", t, got->dv, ref->dv, sizeof ref->dv);
    }
    free(ref);
    free(got);
    free(q), free(k), free(v), free(dO);
}

// ---- a whole GS model ----------------------------------------------------------------------
// T = 144 = 2 chunks of 64 + 16; B*H = 8 pairs in both mixers; the projections (576 x 64 x 64
// and up) are large enough for OpenBLAS to split them over its threads.
enum { MB = 4, MT = 144 };

static double model_run(model *m, const int32_t *x, const int32_t *y, double *grads) {
    model_zero_grads(m);
    m->dropout_key = 0x5eed;
    double loss = model_forward_backward(m, x, y, 1.0 / (MB * MT), true);
    memcpy(grads, m->grad_mem, m->n_elems * sizeof(double));
    return loss;
}

static void test_model(rng_t *r) {
    gdn_config c;
    config_defaults(&c);
    snprintf(c.pattern, sizeof c.pattern, "GS");
    c.n_layers = 2;
    c.d_model = 64;
    c.vocab_size = 256;
    c.mlp_hidden = 128;
    c.gdn_n_heads = 2;
    c.gdn_head_dim = 32;
    c.gdn_expand_v = 2;
    c.gdn_chunk_size = 64;
    c.swa_n_heads = 2;
    c.swa_head_dim = 32;
    c.swa_window = 48;
    c.dropout = 0.1;
    model *m = model_create(&c, &backend_cpu, MB, MT);
    model_init_params(m, 4321);
    const int N = MB * MT;
    int32_t *x = gdn_malloc(N * sizeof(int32_t)), *y = gdn_malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        x[i] = (int32_t)rng_below(r, (uint64_t)m->V);
        y[i] = i % 37 == 5 ? -1 : (int32_t)rng_below(r, (uint64_t)m->V);  // some ignored
    }
    double *gref = dalloc(m->n_elems), *got = dalloc(m->n_elems);
    cpu_set_threads(1);
    double lref = model_run(m, x, y, gref);
    printf("%-26s loss %.17g with 1 thread, %zu parameters\n", "model GS (d 64, N 576)", lref,
           m->n_elems);
    for (int t = 0; t < NTHR; t++) {
        set_threads(t);
        double l = model_run(m, x, y, got);
        check_same("model GS fwd+bwd", "loss", t, &l, &lref, sizeof l);
        check_same("model GS fwd+bwd", "grads", t, got, gref,
                   m->n_elems * sizeof(double));
    }
    free(gref);
    free(got);
    free(x);
    free(y);
    model_free(m);
}

int main(void) {
    rng_t r;
    rng_init(&r, 2027, 0);
    cpu_min_work_exp = cpu_min_work_flat = 0;
    cpu_set_threads(2);
    printf("OpenMP team with train.threads = 2: %d threads%s\n", cpu_threads(),
           cpu_threads() == 1 ? " (built without OpenMP: every run is single-threaded)" : "");
    printf("%-26s %-8s %-10s %10s  %s\n", "op", "output", "threads", "bytes", "vs 1 thread");
    test_gdn(&r);
    test_attention(&r);
    test_model(&r);
    cpu_set_threads(0);
    return gc_finish("test_cpu_threads");
}
