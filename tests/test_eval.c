// test_eval.c — src/eval on the CPU:
//  - multiple choice on tests/fixtures/eval/mc.jsonl (every form the reader takes) with a stub
//    scorer whose log-probs are known (-1 a continuation token): acc and acc_norm equal the
//    counts made by hand in tests/fixtures/eval/README.md, 3/11 and 4/11 (dividing by bytes
//    instead of characters would give 5/11); the rows the scorer sees hold " " + the ending as
//    their targets, at the right positions, for every batch size; long rows lose context from
//    the left, a too long ending or a token outside the vocabulary is refused;
//  - the reader: a bad line is refused with the file and its line named, for each way a line
//    can be wrong; an empty file, a missing file;
//  - recall probes: the rows are built as documented (key and value ranges, distinct keys, the
//    queries a permutation, the needle at its depth), seeded (same seed, same rows); a stub that
//    recalls perfectly scores 1, one that never does 0, one that looks back at most W tokens
//    scores the needle depths within W exactly;
//  - model_logprobs on a tiny GS model (float64): the mean of -logp over the targets is
//    model_eval_loss to 1e-12, the argmax is the most likely token, and a real model scores the
//    fixture end to end.
// The fixture directory is argv[1], else tests/fixtures/eval beside this file.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../src/core/common.h"
#include "../src/eval/eval.h"
#include "tiny_model.h"

static int fails = 0, checks = 0;
static void check(const char *what, bool ok) {
    checks++;
    if (!ok) fails++;
    printf("  %s  %s\n", ok ? "pass" : "FAIL", what);
}

// ---- stubs --------------------------------------------------------------------------------

// Every scored position: log-prob -1; records the targets of each row it sees, in order.
typedef struct {
    int B, T;
    char rows[256][128];
    int n_rows;
    bool aligned;  // every target at t is followed in x by the same token at t + 1 (when inside)
} recorder;

static void stub_uniform(void *ctx, const int32_t *x, const int32_t *y, double *logp, int32_t *argmax) {
    recorder *r = ctx;
    for (int b = 0; b < r->B; b++) {
        char *s = r->n_rows < 256 ? r->rows[r->n_rows] : NULL;
        int n = 0;
        bool any = false;
        for (int t = 0; t < r->T; t++) {
            int i = b * r->T + t;
            logp[i] = y[i] >= 0 ? -1.0 : 0.0;
            if (argmax) argmax[i] = 0;
            if (y[i] < 0) continue;
            any = true;
            if (s && n < 127) s[n++] = (char)y[i];
            if (t + 1 < r->T && y[i + 1] >= 0 && x[i + 1] != y[i]) r->aligned = false;
        }
        if (s && any) s[n] = 0, r->n_rows++;
    }
}

// Recall by lookup: the argmax at i is the token after the latest earlier occurrence of x[i] in
// the row within `window` tokens back (0: any distance); -1 when there is none.
typedef struct {
    int B, T, window;
    bool never;  // always predict token 0 (never a value)
} looker;

static void stub_lookup(void *ctx, const int32_t *x, const int32_t *y, double *logp, int32_t *argmax) {
    looker *k = ctx;
    for (int b = 0; b < k->B; b++)
        for (int t = 0; t < k->T; t++) {
            int i = b * k->T + t;
            logp[i] = 0;
            argmax[i] = -1;
            if (y[i] < 0) continue;
            if (k->never) {
                argmax[i] = 0;
                continue;
            }
            for (int j = t - 1; j >= 0 && (k->window == 0 || t - j <= k->window); j--)
                if (x[b * k->T + j] == x[i]) {
                    argmax[i] = x[b * k->T + j + 1];
                    break;
                }
        }
}

// ---- multiple choice ------------------------------------------------------------------------

static void test_mc(const char *dir) {
    printf("== multiple choice: the fixture with a known scorer\n");
    char path[1200], err[2048];
    snprintf(path, sizeof path, "%s/mc.jsonl", dir);
    mc_task t;
    bool ok = mc_load(&t, path, err, sizeof err);
    check("mc.jsonl loads", ok);
    if (!ok) {
        printf("    %s\n", err);
        return;
    }
    check("11 items (the blank line skipped), lines kept", t.n == 11 && t.items[5].line == 7 && t.items[10].line == 12);
    check("ARC context is lm-eval's prompt, label from answerKey",
          !strcmp(t.items[8].context, "Question: Which gas do plants take in from the air to make food?\nAnswer:") &&
              t.items[8].label == 0 && t.items[8].n_endings == 4);
    check("PIQA: two endings sol1, sol2", t.items[9].n_endings == 2 && !strcmp(t.items[9].endings[1], "rub them with a wet sponge in the rain."));
    check("HellaSwag string label \"0\"", t.items[7].label == 0 && !strcmp(t.items[7].context, "A woman pours batter into a pan. She"));
    gdn_tokenizer *tok = tok_load("bytes", err, sizeof err);
    const int Bs[] = {1, 3, 4, 64};
    for (int bi = 0; bi < 4; bi++) {
        const int B = Bs[bi], T = 96;
        mc_prepared p;
        ok = mc_prepare(&p, &t, 0, tok, T, 256, err, sizeof err);
        if (!ok) {
            check(err, false);
            continue;
        }
        recorder *r = gdn_malloc(sizeof *r);
        *r = (recorder){.B = B, .T = T, .aligned = true};
        eval_scorer s = {.fn = stub_uniform, .ctx = r, .B = B, .T = T, .V = 256};
        mc_result res = mc_score(&s, &p);
        char what[160];
        snprintf(what, sizeof what, "B = %d: acc %.6f == 3/11, acc_norm %.6f == 4/11 (by characters)", B,
                 res.acc, res.acc_norm);
        check(what, res.n == 11 && res.acc == 3.0 / 11 && res.acc_norm == 4.0 / 11);
        bool rows = r->n_rows == p.n;
        for (int k = 0; rows && k < p.n; k++) {
            char want[128];
            snprintf(want, sizeof want, " %s", t.items[p.c[k].item].endings[p.c[k].ending]);
            rows = !strcmp(r->rows[k], want);
            if (!rows) printf("    row %d: targets '%s', want '%s'\n", k, r->rows[k], want);
        }
        snprintf(what, sizeof what, "B = %d: each of the %d rows scores exactly \" \" + its ending, "
                 "inputs shifted by one", B, p.n);
        check(what, rows && r->aligned);
        free(r);
        mc_prepared_free(&p);
    }
    {
        mc_prepared p;
        ok = mc_prepare(&p, &t, 5, tok, 64, 256, err, sizeof err);
        check("mc_items = 5: the first 5 items", ok && p.n_items == 5 && p.n == 15);
        recorder *r = gdn_malloc(sizeof *r);
        *r = (recorder){.B = 2, .T = 64, .aligned = true};
        eval_scorer s = {.fn = stub_uniform, .ctx = r, .B = 2, .T = 64, .V = 256};
        mc_result res = mc_score(&s, &p);
        check("first 5 items: acc 2/5 (lines 1, 3), acc_norm 1/5 (line 4)",
              res.acc == 2.0 / 5 && res.acc_norm == 1.0 / 5);
        free(r);
        mc_prepared_free(&p);
    }
    // a row longer than T + 1 loses context from the left; an ending longer than T is refused
    {
        mc_prepared p;
        ok = mc_prepare(&p, &t, 1, tok, 16, 256, err, sizeof err);
        check("T = 16: 'The capital of France is' + ' a large banana.' keeps its last 17 tokens, "
              "the context's last byte first", ok && p.c[1].n == 17 && p.c[1].cont == 16 && p.c[1].tok[0] == 's');
        if (ok) mc_prepared_free(&p);
        ok = mc_prepare(&p, &t, 1, tok, 15, 256, err, sizeof err);
        check("T = 15: that ending (16 tokens) is refused, naming the file and line", !ok &&
              strstr(err, "mc.jsonl:1: ending 1 has 16 tokens") && strstr(err, "data.seq_len = 15"));
        printf("    %s\n", err);
        ok = mc_prepare(&p, &t, 1, tok, 64, 100, err, sizeof err);
        check("a token id >= vocab_size is refused", !ok && strstr(err, "mc.jsonl:1: token id") && strstr(err, ">= the model's vocab_size 100"));
    }
    tok_free(tok);
    mc_free(&t);
}

// ---- the reader's messages -------------------------------------------------------------------

static void test_mc_errors(void) {
    printf("== multiple choice: bad lines are named\n");
    char tmpl[] = "/tmp/gdn-test-eval.XXXXXX";
    if (!mkdtemp(tmpl)) gdn_die("mkdtemp");
    static const struct { const char *text, *want; } cases[] = {
        {"{\"context\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n{\"context\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0\n",
         ":2: not JSON"},
        {"\n\n{\"context\": \"a\", \"endings\": [\"b\", \"c\"]}\n", ":3: 'label' is missing"},
        {"{\"context\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 2}\n", ":1: label 2 is out of range: 2 endings"},
        {"{\"context\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": -1}\n", ":1: 'label' is missing or not a whole number"},
        {"{\"context\": \"a\", \"endings\": [\"b\", \"\"], \"label\": 0}\n", ":1: 'endings'[1] is empty"},
        {"{\"context\": \"a\", \"endings\": [\"b\"], \"label\": 0}\n", ":1: 'endings' has 1 entries, expected 2 to 64"},
        {"{\"context\": \"\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n", ":1: the context is empty"},
        {"{\"context\": 3, \"endings\": [\"b\", \"c\"], \"label\": 0}\n", ":1: 'context' is not a string"},
        {"{\"prompt\": \"a\"}\n", ":1: no known form"},
        {"[1, 2]\n", ":1: not a JSON object"},
        {"{\"question\": \"q\", \"choices\": {\"text\": [\"x\", \"y\"], \"label\": [\"A\", \"B\"]}, \"answerKey\": \"C\"}\n",
         ":1: 'answerKey' \"C\" is not among 'choices.label'"},
        {"{\"goal\": \"g\", \"sol1\": \"x\", \"label\": 0}\n", ":1: 'sol1' or 'sol2' is missing"},
        {"\n  \n", ": no items"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256], err[1024] = "", what[1100];
        snprintf(path, sizeof path, "%s/bad%zu.jsonl", tmpl, i);
        FILE *f = fopen(path, "w");
        if (!f) gdn_die("cannot write %s", path);
        fputs(cases[i].text, f);
        fclose(f);
        mc_task t;
        bool ok = mc_load(&t, path, err, sizeof err);
        char want[512];
        snprintf(want, sizeof want, "%s%s", path, cases[i].want);
        snprintf(what, sizeof what, "case %zu refused: %s", i, err);
        check(what, !ok && strstr(err, want) == err);
        if (ok) mc_free(&t);
        unlink(path);
    }
    char err[1024] = "";
    mc_task t;
    bool ok = mc_load(&t, "/nonexistent/mc.jsonl", err, sizeof err);
    check("a missing file is named", !ok && strstr(err, "/nonexistent/mc.jsonl: cannot open"));
    rmdir(tmpl);
}

// ---- recall probes ----------------------------------------------------------------------------

static void test_recall(void) {
    printf("== recall probes: construction\n");
    const int V = 50, L = 40, K = 6;
    int32_t x[64], y[64], x2[64], y2[64];
    rng_t r, r2;
    rng_init(&r, 9, recall_stream('m', L, K));
    rng_init(&r2, 9, recall_stream('m', L, K));
    bool ranges = true, distinct = true, perm = true, same = true;
    for (int rep = 0; rep < 50; rep++) {
        recall_mqar_row(x, y, L, K, V, &r);
        recall_mqar_row(x2, y2, L, K, V, &r2);
        same = same && !memcmp(x, x2, sizeof(int32_t) * L) && !memcmp(y, y2, sizeof(int32_t) * L);
        for (int t = 0; t < L; t++) {
            bool key_pos = (t < 2 * K && t % 2 == 0) || (t >= L - 2 * K && (t - (L - 2 * K)) % 2 == 0);
            ranges = ranges && (key_pos ? x[t] >= 0 && x[t] < V / 2 : x[t] >= V / 2 && x[t] < V);
            ranges = ranges && (y[t] == -1) == !(t >= L - 2 * K && key_pos);
        }
        int seen[64] = {0};
        for (int i = 0; i < K; i++) {
            for (int j = 0; j < i; j++) distinct = distinct && x[2 * i] != x[2 * j];
            int q = L - 2 * K + 2 * i, hit = -1;
            for (int j = 0; j < K; j++) hit = x[2 * j] == x[q] ? j : hit;
            perm = perm && hit >= 0 && !seen[hit]++ && y[q] == x[2 * hit + 1] && x[q + 1] == y[q];
        }
    }
    check("MQAR: keys in [0, V/2) at the pair and query keys, values and filler in [V/2, V), targets only at queries", ranges);
    check("MQAR: keys distinct; the queries a permutation of them, each target its key's value", distinct && perm);
    check("MQAR: same seed and stream, same rows", same);
    rng_init(&r2, 10, recall_stream('m', L, K));
    recall_mqar_row(x2, y2, L, K, V, &r2);
    rng_init(&r, 9, recall_stream('m', L, K));
    recall_mqar_row(x, y, L, K, V, &r);
    check("MQAR: another seed, another row", memcmp(x, x2, sizeof(int32_t) * L) != 0);
    bool needle = true;
    rng_init(&r, 9, recall_stream('n', L, 0));
    for (int j = 0; j < 8; j++) {
        recall_needle_row(x, y, L, j, 8, V, &r);
        int p = j * (L - 3) / 7, keys = 0;
        for (int t = 0; t < L; t++) keys += x[t] < V / 2;
        needle = needle && keys == 2 && x[p] < V / 2 && x[L - 1] == x[p] && y[L - 1] == x[p + 1] &&
                 x[p + 1] >= V / 2;
        for (int t = 0; t < L - 1; t++) needle = needle && y[t] == -1;
    }
    check("needle: the key at floor(j (L-3) / (n-1)) and at L-1 only, its value after it, the target at L-1", needle);

    printf("== recall probes: scores of known scorers\n");
    const int Bs[] = {1, 5, 16};
    for (int bi = 0; bi < 3; bi++) {
        const int B = Bs[bi], T = 48;
        looker k = {.B = B, .T = T};
        eval_scorer s = {.fn = stub_lookup, .ctx = &k, .B = B, .T = T, .V = V};
        char what[200];
        double m1 = recall_mqar(&s, 40, 6, 13, 3), m2 = recall_mqar(&s, 48, 12, 13, 3), n1 = recall_needle(&s, 40, 8, 3);
        snprintf(what, sizeof what, "B = %d: perfect lookup: mqar_L40_k6 %g, mqar_L48_k12 %g, needle_L40 %g, all 1", B, m1, m2, n1);
        check(what, m1 == 1 && m2 == 1 && n1 == 1);
        k.window = 10;
        double w = recall_needle(&s, 40, 8, 3);
        snprintf(what, sizeof what, "B = %d: lookup within 10 tokens: needle_L40 over 8 depths %g == 2/8 "
                 "(keys at 0 5 10 15 21 26 31 37, query at 39)", B, w);
        check(what, w == 0.25);
        k.never = true;
        double z = recall_mqar(&s, 40, 6, 13, 3);
        snprintf(what, sizeof what, "B = %d: a scorer that never recalls: %g == 0", B, z);
        check(what, z == 0);
    }
}

// ---- the model's log-probs ----------------------------------------------------------------------

static void test_model(const char *dir) {
    printf("== model_logprobs on a tiny GS model (CPU float64)\n");
    gdn_config c = tiny_config("GS", 2);
    const int B = 3, T = 37, N = B * T, V = c.vocab_size;
    c.head_chunk_rows = 16;  // several LM-head chunks, one not full
    model *m = model_create(&c, &backend_cpu, B, T);
    model_init_params(m, 5);
    rng_t r;
    rng_init(&r, 77, 0);
    int32_t *x = gdn_malloc(N * sizeof(int32_t)), *y = gdn_malloc(N * sizeof(int32_t)),
            *am = gdn_malloc(N * sizeof(int32_t)), *y2 = gdn_malloc(N * sizeof(int32_t));
    double *lp = gdn_malloc(N * sizeof(double)), *lp2 = gdn_malloc(N * sizeof(double));
    for (int i = 0; i < N; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = i % 7 == 3 ? -1 : (int32_t)rng_below(&r, V);
    double loss = model_eval_loss(m, x, y);
    model_logprobs(m, x, y, lp, am);
    double s = 0;
    int cnt = 0;
    bool skipped = true;
    for (int i = 0; i < N; i++) {
        if (y[i] < 0) {
            skipped = skipped && lp[i] == 0 && am[i] == -1;
            continue;
        }
        s -= lp[i], cnt++;
    }
    char what[200];
    snprintf(what, sizeof what, "mean -logp %.15f vs model_eval_loss %.15f (|d| %.1e <= 1e-12)", s / cnt, loss,
             fabs(s / cnt - loss));
    check(what, fabs(s / cnt - loss) <= 1e-12);
    check("ignored targets: logp 0, argmax -1", skipped);
    for (int i = 0; i < N; i++) y2[i] = am[i];
    model_logprobs(m, x, y2, lp2, NULL);
    bool best = true;
    for (int i = 0; i < N; i++) best = best && (y[i] < 0 || lp2[i] >= lp[i]);
    check("argmax: its log-prob >= the target's at every position", best);
    double p = 0;
    for (int v = 0; v < V; v++) {
        for (int i = 0; i < N; i++) y2[i] = i == 40 ? v : -1;
        model_logprobs(m, x, y2, lp2, NULL);
        p += exp(lp2[40]);
    }
    snprintf(what, sizeof what, "the probabilities of one position sum to 1 (%.15f)", p);
    check(what, fabs(p - 1) < 1e-12);

    // the fixture end to end through the model (bytes ids must fit: a 256-token vocabulary)
    model_free(m);
    c.vocab_size = 256;
    m = model_create(&c, &backend_cpu, 4, 64);
    model_init_params(m, 5);
    char path[1200], err[1024];
    snprintf(path, sizeof path, "%s/mc.jsonl", dir);
    mc_task t;
    mc_prepared pr;
    gdn_tokenizer *tok = tok_load("bytes", err, sizeof err);
    if (mc_load(&t, path, err, sizeof err) && mc_prepare(&pr, &t, 0, tok, 64, 256, err, sizeof err)) {
        eval_scorer es = eval_scorer_model(m, NULL);
        mc_result a = mc_score(&es, &pr), b = mc_score(&es, &pr);
        snprintf(what, sizeof what, "an untrained model scores the fixture: acc %.4f, acc_norm %.4f, "
                 "the same twice", a.acc, a.acc_norm);
        check(what, a.n == 11 && a.acc == b.acc && a.acc_norm == b.acc_norm && a.acc >= 0 && a.acc <= 1);
        double rq = recall_mqar(&es, 64, 8, 6, 1);
        snprintf(what, sizeof what, "and the recall probes (mqar_L64_k8 %.4f in [0, 1])", rq);
        check(what, rq >= 0 && rq <= 1);
        mc_prepared_free(&pr);
        mc_free(&t);
    } else {
        check(err, false);
    }
    tok_free(tok);
    model_free(m);
    free(x), free(y), free(am), free(y2), free(lp), free(lp2);
}

int main(int argc, char **argv) {
    char dir[1024];
    if (argc > 1) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    } else {
        const char *me = __FILE__, *tail = "test_eval.c";
        size_t lm = strlen(me), lt = strlen(tail);
        snprintf(dir, sizeof dir, "%.*sfixtures/eval", (int)(lm - lt), me);
    }
    test_mc(dir);
    test_mc_errors();
    test_recall();
    test_model(dir);
    printf("test_eval: %d passed, %d failed\n", checks - fails, fails);
    return fails ? 1 : 0;
}
