// test_profile.c — the profiling decorator (src/diag/profile.h) on the CPU backend, on tiny
// models: (a) it changes nothing: losses, gradients and the AdamW update are bitwise those of
// plain backend_cpu; (b) its table lists each op with the call count the model structure
// implies, and the matmul GFLOP per step 2*N*sum(in*out) (forward) and twice that (backward);
// (c) profile_reset zeroes every counter; and the matmul-by-shape table splits exactly the
// op table's linear calls over the model's shapes; (d) the events clock (profile_use_clock; on
// the GPU CUDA events, here a host clock with the same interface): the same rows, calls and
// FLOPs as the sync clock, the ops' times plus the time between ops account for the passes' wall
// time, and reset / print consume the recorded events.
#include "testutil.h"
#include "tiny_model.h"
#include "../src/model/model.h"
#include "../src/diag/profile.h"
#include "../src/optim/optim.h"

enum { B = 2, T = 9, RUNS = 2, MAX_ROWS = 64 };

typedef struct {
    char op[32];
    long calls;
    double total_ms, gflop_step;  // gflop_step < 0: "-"
} row;

static int fails = 0;
#define EXPECT(cond, ...)                   \
    do {                                    \
        if (!(cond)) {                      \
            printf("FAIL: " __VA_ARGS__);   \
            printf("\n");                   \
            fails++;                        \
        }                                   \
    } while (0)

// Parse the op rows of the table (between the column header and "sum of ops"); show: echo it.
static int table(double step_seconds, int steps, row *rows, bool show) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_PTR(f);
    profile_print(f, step_seconds, steps);
    if (fclose(f) != 0) gdn_die("open_memstream: %s", strerror(errno));
    if (show) fputs(buf, stdout);
    int n = 0;
    bool in_rows = false, saw_sum = false;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "op ", 3)) { in_rows = true; continue; }
        if (!strncmp(line, "sum of ops", 10)) { saw_sum = true; in_rows = false; continue; }
        if (!in_rows) continue;
        row r;
        double per_step, pct;
        int k = sscanf(line, "%31s %ld %lf %lf %lf%% %lf", r.op, &r.calls, &r.total_ms, &per_step,
                       &pct, &r.gflop_step);
        EXPECT(k == 5 || k == 6, "unparsable table row '%s'", line);
        if (k == 5) r.gflop_step = -1;
        if (n < MAX_ROWS) rows[n++] = r;
    }
    EXPECT(saw_sum, "no 'sum of ops' line");
    free(buf);
    return n;
}

static const row *find(const row *rows, int n, const char *op) {
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].op, op)) return &rows[i];
    return NULL;
}

// The matmul-by-shape table after the op table: calls of op summed over its shapes, and the
// number of its rows whose N is not the model's token count (there should be none).
static void shape_table(const char *op, int N, long *calls, int *bad_n, int *n_rows) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_PTR(f);
    profile_print(f, 0, 1);
    if (fclose(f) != 0) gdn_die("open_memstream: %s", strerror(errno));
    *calls = 0;
    *bad_n = *n_rows = 0;
    bool in_rows = false;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "matmul ", 7)) { in_rows = true; continue; }
        if (!in_rows) continue;
        char name[32];
        int n, in, out;
        long c;
        if (sscanf(line, "%31s %d %d %d %ld", name, &n, &in, &out, &c) != 5) {
            EXPECT(false, "unparsable shape row '%s'", line);
            continue;
        }
        if (strcmp(name, op)) continue;
        *calls += c;
        *bad_n += n != N;
        (*n_rows)++;
    }
    free(buf);
}

static gdn_config tiny(const char *pattern, int layers) { return tiny_config(pattern, layers); }

static void check_case(const char *title, const gdn_config *c, uint64_t seed) {
    printf("\n== %s\n", title);
    const backend *pb = backend_profiled(&backend_cpu);
    model *ref = model_create(c, &backend_cpu, B, T), *prof = model_create(c, pb, B, T);
    model_init_params(ref, seed);
    model_init_params(prof, seed);
    int N = ref->N;
    int32_t x[RUNS][B * T], y[RUNS][B * T];
    rng_t r;
    rng_init(&r, seed, 7);
    for (int k = 0; k < RUNS; k++)
        for (int i = 0; i < N; i++) {
            x[k][i] = (int32_t)rng_below(&r, (uint64_t)c->vocab_size);
            y[k][i] = (int32_t)rng_below(&r, (uint64_t)c->vocab_size);
        }

    // (a) the same two forward/backward passes and one AdamW step on both backends
    profile_reset();
    double t0 = gdn_now();
    bool same_loss = true;
    for (int k = 0; k < RUNS; k++) {
        double lr = model_forward_backward(ref, x[k], y[k], 1.0 / N, true);
        double lp = model_forward_backward(prof, x[k], y[k], 1.0 / N, true);
        same_loss &= memcmp(&lr, &lp, sizeof lr) == 0;
    }
    double step_s = (gdn_now() - t0) / RUNS;  // includes the reference runs: > the ops' sum
    size_t bytes = ref->n_elems * sizeof(double);
    bool same_grad = memcmp(ref->grad_mem, prof->grad_mem, bytes) == 0;
    double gn_ref = optim_grad_norm(ref), gn_prof = optim_grad_norm(prof);
    optim_step(ref, 0, 1e-2, gn_ref);
    optim_step(prof, 0, 1e-2, gn_prof);
    bool same_update = gn_ref == gn_prof && memcmp(ref->param_mem, prof->param_mem, bytes) == 0 &&
                       memcmp(ref->opt_m, prof->opt_m, bytes) == 0 &&
                       memcmp(ref->opt_v, prof->opt_v, bytes) == 0;
    printf("bitwise equal to backend_cpu: losses %s, gradients %s (%zu), AdamW update %s\n",
           same_loss ? "yes" : "NO", same_grad ? "yes" : "NO", ref->n_elems,
           same_update ? "yes" : "NO");
    EXPECT(same_loss && same_grad && same_update, "the decorator changed a result");

    // (b) call counts from the model structure, per forward (= per backward)
    int nG = 0, nS = 0;
    for (int l = 0; l < ref->L; l++) *(ref->lp[l].kind == 'G' ? &nG : &nS) += 1;
    int lin = nG * (3 + c->gdn_gate + c->gdn_delta + c->gdn_output_gate + 1)  // q k v (a b z) o
              + nS * 4                                                          // q k v o
              + ref->L * 3                                                      // gate up down
              + 1;                                                              // LM head
    double mm = 0;  // sum of in*out over the matmuls of one forward
    for (int i = 0; i < ref->n_params; i++) {
        param_kind k = ref->params[i].kind;
        if (k == PARAM_LINEAR || k == PARAM_OUTPROJ) mm += (double)ref->params[i].numel;
    }
    if (c->tie_embeddings) mm += (double)ref->V * ref->d;  // LM head = the embedding
    long runs = 1;  // optim_step: one AdamW call per run of tensors with the same weight decay
    for (int i = 1; i < ref->n_params; i++) runs += ref->params[i].decay != ref->params[i - 1].decay;
    struct { const char *op; long calls; double gflop_step; } want[] = {
        {"linear_fwd", (long)RUNS * lin, 2.0 * N * mm / 1e9},
        {"linear_bwd", (long)RUNS * lin, 4.0 * N * mm / 1e9},
        {"gdn_fwd", (long)RUNS * nG, -1},
        {"gdn_bwd", (long)RUNS * nG, -1},
        {"attention_fwd", (long)RUNS * nS, -1},
        {"attention_bwd", (long)RUNS * nS, -1},
        {"crossentropy", RUNS, -1},
        {"embedding_fwd", RUNS, -1},
        {"embedding_bwd", RUNS, -1},
        // layer 0's norm1 alone; the other 2L norms come fused with the residual add before them
        {"rmsnorm_fwd", RUNS, -1},
        {"add_rmsnorm_fwd", (long)RUNS * 2 * ref->L, -1},
        {"rmsnorm_bwd", (long)RUNS * (2 * ref->L + 1), -1},
        {"sumsq", 1, -1},  // one pass over the gradient arena (optim_grad_norm)
        {"adamw", runs, -1},
    };
    row rows[MAX_ROWS];
    int n = table(step_s, RUNS, rows, true);
    printf("%-16s %8s %8s %14s %14s  %s\n", "op", "calls", "expected", "GFLOP/step", "expected",
           "result");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const row *rw = find(rows, n, want[i].op);
        bool ok = rw && rw->calls == want[i].calls;
        // %.6g in the table: the printed value is within 5e-6 relative of the exact one
        if (rw && want[i].gflop_step > 0)
            ok &= fabs(rw->gflop_step - want[i].gflop_step) <= 5e-6 * want[i].gflop_step;
        if (rw && want[i].gflop_step < 0) ok &= rw->gflop_step < 0;
        printf("%-16s %8ld %8ld %14.6g %14.6g  %s\n", want[i].op, rw ? rw->calls : -1,
               want[i].calls, rw ? rw->gflop_step : 0.0, want[i].gflop_step, ok ? "ok" : "FAIL");
        EXPECT(ok, "%s: count or FLOPs wrong (or row missing)", want[i].op);
    }
    for (int i = 1; i < n; i++)
        EXPECT(rows[i].total_ms <= rows[i - 1].total_ms, "table not sorted by time at %s",
               rows[i].op);
    // the matmul table splits the same calls by shape: as many distinct (in, out) as the model
    // has linear shapes (at least 2), every row at the model's N
    for (int k = 0; k < 2; k++) {
        const char *op = k ? "linear_bwd" : "linear_fwd";
        const row *rw = find(rows, n, op);
        long sc;
        int bad_n, nr;
        shape_table(op, N, &sc, &bad_n, &nr);
        printf("matmul table: %s %ld calls over %d shapes (op table: %ld), %d rows with N != %d\n", op,
               sc, nr, rw ? rw->calls : -1, bad_n, N);
        EXPECT(rw && sc == rw->calls && nr >= 2 && bad_n == 0, "%s: matmul table disagrees", op);
    }
    EXPECT(find(rows, n, "gdn_fwd") || nG == 0, "gdn_fwd missing");
    // the residual adds are all inside add_rmsnorm_fwd: no separate add or copy
    EXPECT(!find(rows, n, "add") && !find(rows, n, "copy"), "add or copy called by the model");
    EXPECT(nS > 0 || !find(rows, n, "attention_fwd"), "attention_fwd listed without S layers");

    // (c) reset: no rows; then one pass counts exactly one pass
    profile_reset();
    int n0 = table(0, 1, rows, false);
    printf("after profile_reset: %d op rows\n", n0);
    EXPECT(n0 == 0, "profile_reset left %d rows", n0);
    model_forward_backward(prof, x[0], y[0], 1.0 / N, true);
    n = table(0, 1, rows, false);
    const row *rw = find(rows, n, "linear_fwd");
    printf("one pass after reset: linear_fwd %ld calls (expected %d)\n", rw ? rw->calls : -1, lin);
    EXPECT(rw && rw->calls == lin, "linear_fwd after reset: %ld, expected %d", rw ? rw->calls : -1,
           lin);
    model_free(ref);
    model_free(prof);
}

// A host clock behind the device-clock interface: an event is the time it was recorded.
static void *hc_create(void) {
    double *e = malloc(sizeof *e);
    CHECK_PTR(e);
    *e = -1;
    return e;
}
static void hc_destroy(void *e) { free(e); }
static void hc_record(void *e) { *(double *)e = gdn_now(); }
static void hc_wait(void *e) { EXPECT(*(double *)e >= 0, "wait on an event never recorded"); }
static double hc_ms(void *a, void *b) {
    EXPECT(*(double *)a >= 0 && *(double *)b >= 0, "elapsed time of an event never recorded");
    return 1e3 * (*(double *)b - *(double *)a);
}
static const timeline_clock host_clock = {hc_create, hc_destroy, hc_record, hc_wait, hc_ms};

// The "between ops" row of the table (ms per step), -1 when absent.
static double between_ops_ms(int steps) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_PTR(f);
    profile_print(f, 0, steps);
    if (fclose(f) != 0) gdn_die("open_memstream: %s", strerror(errno));
    double total = -1, per_step;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        if (!strncmp(line, "between ops", 11) && sscanf(line + 11, "%lf %lf", &total, &per_step) != 2)
            EXPECT(false, "unparsable 'between ops' line '%s'", line);
    free(buf);
    return total;
}

static void check_events(void) {
    printf("\n== events clock (a host clock behind the device-clock interface)\n");
    gdn_config c = tiny("GS", 3);
    const backend *pb = backend_profiled(&backend_cpu);
    model *m = model_create(&c, pb, B, T);
    model_init_params(m, 21);
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) {
        x[i] = (int32_t)((7 * i + 3) % c.vocab_size);
        y[i] = (int32_t)((5 * i + 1) % c.vocab_size);
    }
    // the same two passes under each clock: the same rows, calls and FLOPs
    row rs[MAX_ROWS], re[MAX_ROWS];
    profile_reset();
    for (int k = 0; k < RUNS; k++) model_forward_backward(m, x, y, 1.0 / m->N, true);
    int ns = table(0, RUNS, rs, false);
    EXPECT(between_ops_ms(RUNS) < 0, "the sync clock printed a 'between ops' row");
    profile_use_clock(&host_clock);
    profile_reset();
    double t0 = gdn_now();
    for (int k = 0; k < RUNS; k++) model_forward_backward(m, x, y, 1.0 / m->N, true);
    double wall = gdn_now() - t0;
    int ne = table(0, RUNS, re, true);
    bool same = ns == ne;
    double ops = 0;
    for (int i = 0; i < ne; i++) {
        const row *r = find(rs, ns, re[i].op);
        same &= r && r->calls == re[i].calls && r->gflop_step == re[i].gflop_step;
        ops += re[i].total_ms / 1e3;
    }
    printf("events: %d rows (sync: %d), same calls and GFLOP: %s\n", ne, ns, same ? "yes" : "NO");
    EXPECT(same, "the events clock changed the rows, calls or FLOPs");
    double gap = between_ops_ms(RUNS) / 1e3;
    // ops + between ops = from the first op's start to the last op's end: inside the wall time,
    // short of it only by the host code before the first op and after the last. Each value read
    // back from the table is printed to 0.001 ms: the sum of ne + 1 of them may stand up to half
    // of that each above the times it rounds.
    printf("events: ops %.3f ms + between ops %.3f ms = %.3f ms of %.3f ms wall\n", 1e3 * ops,
           1e3 * gap, 1e3 * (ops + gap), 1e3 * wall);
    const double printed = (ne + 1) * 0.5e-6;  // s
    EXPECT(gap >= 0 && ops + gap <= wall + printed && ops + gap >= 0.8 * wall,
           "events: ops + between ops = %g s against %g s of wall time", ops + gap, wall);
    // (printing resolved the events: a second print adds nothing; reset empties the table)
    int ne2 = table(0, RUNS, re, false);
    double ops2 = 0;
    for (int i = 0; i < ne2; i++) ops2 += re[i].total_ms / 1e3;
    EXPECT(ne2 == ne && fabs(ops2 - ops) <= 1e-9 + 1e-6 * ops, "a second print changed the sums");
    model_forward_backward(m, x, y, 1.0 / m->N, true);
    profile_reset();
    int n0 = table(0, 1, re, false);
    EXPECT(n0 == 0 && between_ops_ms(1) == 0, "events: reset left %d rows", n0);
    profile_use_clock(NULL);
    model_free(m);
}

int main(void) {
    gdn_config c = tiny("GS", 3);  // G S G, every GDN switch on, tied embeddings
    check_case("GSG, all GDN switches on, tied", &c, 11);
    c = tiny("GS", 2);
    c.gdn_gate = false;
    c.gdn_delta = false;
    c.gdn_output_gate = false;
    c.tie_embeddings = false;
    c.dropout = 0.25;
    check_case("GS, gate/delta/output gate off, untied, dropout 0.25", &c, 12);
    check_events();
    printf("\ntest_profile: %d failures\n", fails);
    return fails ? 1 : 0;
}
