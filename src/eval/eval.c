// eval.c — the [eval] section (eval.h): its lists parsed and checked against the run, the named
// token sets and multiple-choice files opened once, and one evaluation of all of it.
#include "eval.h"
#include <ctype.h>
#include <math.h>
#include "../core/common.h"

struct evaluator {
    const gdn_config *c;
    int every;
    int n_val;
    char val_name[EVAL_MAX_NAMED][33];
    data_source val[EVAL_MAX_NAMED];
    int n_mc;
    char mc_name[EVAL_MAX_NAMED][33];
    mc_task mc[EVAL_MAX_NAMED];
    mc_prepared mcp[EVAL_MAX_NAMED];
    int n_probe;
    struct { char kind; int L, K; } probe[EVAL_MAX_PROBES];
};

static void model_fn(void *ctx, const int32_t *x, const int32_t *y, double *logp, int32_t *argmax) {
    model_logprobs((model *)ctx, x, y, logp, argmax);
}

eval_scorer eval_scorer_model(model *m, dist *d) {
    return (eval_scorer){.fn = model_fn, .ctx = m, .B = m->B, .T = m->T, .V = m->V, .d = d};
}

// ---- the lists ------------------------------------------------------------------------------

// The entries of a comma-separated list, blanks around each trimmed, into ent[] (pointers into
// buf, a copy of text); -1 + message when there are more than max or one is empty.
static int split_list(const char *key, const char *text, char *buf, size_t buflen, char **ent,
                      int max, char *err, size_t errlen) {
    snprintf(buf, buflen, "%s", text);
    int n = 0;
    char *p = buf;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return 0;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        while (*p == ' ' || *p == '\t') p++;
        char *end = p + strlen(p);
        while (end > p && (end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
        if (!*p) {
            snprintf(err, errlen, "eval.%s = \"%s\": an empty entry", key, text);
            return -1;
        }
        if (n == max) {
            snprintf(err, errlen, "eval.%s: more than %d entries", key, max);
            return -1;
        }
        ent[n++] = p;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

// "NAME:PATH" entries: names of 1-32 letters, digits, '_', '-', '.', distinct.
static int named_list(const char *key, const char *text, char names[][33], char **paths,
                      char *buf, size_t buflen, char *err, size_t errlen) {
    char *ent[EVAL_MAX_NAMED];
    int n = split_list(key, text, buf, buflen, ent, EVAL_MAX_NAMED, err, errlen);
    for (int i = 0; i < n; i++) {
        char *colon = strchr(ent[i], ':');
        size_t len = colon ? (size_t)(colon - ent[i]) : 0;
        bool ok = colon && len >= 1 && len <= 32 && colon[1];
        for (size_t k = 0; ok && k < len; k++)
            ok = isalnum((unsigned char)ent[i][k]) || strchr("_-.", ent[i][k]);
        if (!ok) {
            snprintf(err, errlen, "eval.%s: entry \"%s\" is not NAME:PATH (NAME: 1 to 32 letters, "
                     "digits, '_', '-' or '.')", key, ent[i]);
            return -1;
        }
        *colon = 0;
        snprintf(names[i], 33, "%s", ent[i]);
        paths[i] = colon + 1;
        while (*paths[i] == ' ') paths[i]++;
        for (int j = 0; j < i; j++)
            if (!strcmp(names[j], names[i])) {
                snprintf(err, errlen, "eval.%s: the name \"%s\" is given twice", key, names[i]);
                return -1;
            }
    }
    return n;
}

static bool whole_number(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < 1 || v > 16777216) return false;
    *out = (int)v;
    return true;
}

// eval.mqar's "LEN:KEYS" and eval.needle's "LEN" entries into e->probe.
static bool probe_lists(evaluator *e, const gdn_config *c, char *err, size_t errlen) {
    char buf[CFG_STR], *ent[EVAL_MAX_PROBES];
    const int V = c->vocab_size, T = c->seq_len;
    for (int pass = 0; pass < 2; pass++) {
        const char *key = pass ? "needle" : "mqar";
        int n = split_list(key, pass ? c->ev_needle : c->ev_mqar, buf, sizeof buf, ent,
                           EVAL_MAX_PROBES - e->n_probe, err, errlen);
        if (n < 0) return false;
        if (n > 0 && V < 4) {
            snprintf(err, errlen, "eval.%s: recall probes need a vocabulary of at least 4 tokens "
                     "(model.vocab_size = %d)", key, V);
            return false;
        }
        for (int i = 0; i < n; i++) {
            int L = 0, K = 0;
            char *colon = strchr(ent[i], ':');
            if (colon) *colon = 0;
            bool ok = whole_number(ent[i], &L) && (pass ? !colon : colon && whole_number(colon + 1, &K));
            if (!ok) {
                snprintf(err, errlen, "eval.%s: entry \"%s%s%s\" is not %s", key, ent[i],
                         colon ? ":" : "", colon ? colon + 1 : "", pass ? "LEN" : "LEN:KEYS");
                return false;
            }
            if (L > T) {
                snprintf(err, errlen, "eval.%s: length %d is longer than data.seq_len = %d", key, L, T);
                return false;
            }
            if (pass ? L < 3 : (4 * (long)K > L || K > V / 2 || K > EVAL_MAX_KEYS)) {
                if (pass) snprintf(err, errlen, "eval.needle: length %d, expected at least 3", L);
                else snprintf(err, errlen, "eval.mqar: %d:%d needs 4 x KEYS <= LEN, KEYS <= "
                              "vocab_size / 2 = %d and KEYS <= %d", L, K, V / 2, EVAL_MAX_KEYS);
                return false;
            }
            for (int j = 0; j < e->n_probe; j++)
                if (e->probe[j].kind == (pass ? 'n' : 'm') && e->probe[j].L == L && e->probe[j].K == K) {
                    snprintf(err, errlen, "eval.%s: the probe \"%s%s%s\" is given twice", key,
                             ent[i], colon ? ":" : "", colon ? colon + 1 : "");
                    return false;
                }
            e->probe[e->n_probe].kind = pass ? 'n' : 'm';
            e->probe[e->n_probe].L = L;
            e->probe[e->n_probe].K = K;
            e->n_probe++;
        }
    }
    return true;
}

// The tokenizer the data was made with: a shard set's stored blob, a v1 file's attribute.
static gdn_tokenizer *data_tokenizer(const token_set *ts, char *err, size_t errlen) {
    if (ts->sharded)
        return tok_load_blob(ts->tokenizer_kind, ts->tokenizer_blob, ts->tokenizer_blob_len,
                             ts->index, err, errlen);
    if (!strncmp(ts->tokenizer, "spm:", 4)) return tok_load(ts->tokenizer + 4, err, errlen);
    return tok_load_blob("bytes", NULL, 0, ts->index, err, errlen);
}

evaluator *evaluator_open(const gdn_config *c, const data_source *src, char *err, size_t errlen) {
    err[0] = 0;
    evaluator *e = gdn_malloc(sizeof *e);
    e->c = c;
    e->every = c->ev_every;
    char buf[1024], *paths[EVAL_MAX_NAMED], why[2048];
    bool ok = true;
    int n = named_list("val", c->ev_val, e->val_name, paths, buf, sizeof buf, err, errlen);
    for (int i = 0; ok && i < n; i++) {
        if (!data_source_open(&e->val[i], paths[i], "", why, sizeof why)) {
            snprintf(err, errlen, "eval.val %s: %s", e->val_name[i], why);
            ok = false;
            break;
        }
        e->n_val++;
        if (e->val[i].set[0].vocab_size > c->vocab_size) {
            snprintf(err, errlen, "eval.val %s: '%s' has vocab_size %d, more than the model's %d",
                     e->val_name[i], e->val[i].set[0].index, e->val[i].set[0].vocab_size, c->vocab_size);
            ok = false;
        } else if (e->val[i].set[0].n_tokens[DATA_SPLIT_VAL] < (uint64_t)c->seq_len + 1) {
            snprintf(err, errlen, "eval.val %s: the val split of '%s' has %llu tokens, fewer than "
                     "one row of data.seq_len + 1 = %d", e->val_name[i], e->val[i].set[0].index,
                     (unsigned long long)e->val[i].set[0].n_tokens[DATA_SPLIT_VAL], c->seq_len + 1);
            ok = false;
        }
    }
    ok = ok && n >= 0;
    n = ok ? named_list("mc", c->ev_mc, e->mc_name, paths, buf, sizeof buf, err, errlen) : 0;
    ok = ok && n >= 0;
    gdn_tokenizer *tok = NULL;
    if (ok && n > 0 && !(tok = data_tokenizer(&src->set[0], why, sizeof why))) {
        snprintf(err, errlen, "eval.mc: the data's tokenizer: %s", why);
        ok = false;
    }
    for (int i = 0; ok && i < n; i++) {
        ok = mc_load(&e->mc[i], paths[i], why, sizeof why);
        if (ok) {
            e->n_mc++;
            ok = mc_prepare(&e->mcp[i], &e->mc[i], c->ev_mc_items, tok, c->seq_len, c->vocab_size,
                            why, sizeof why);
        }
        if (!ok) snprintf(err, errlen, "eval.mc %s: %s", e->mc_name[i], why);
    }
    if (tok) tok_free(tok);
    ok = ok && probe_lists(e, c, err, errlen);
    if (!ok || evaluator_count(e) == 0) {
        evaluator_free(e);
        return NULL;
    }
    return e;
}

void evaluator_free(evaluator *e) {
    if (!e) return;
    for (int i = 0; i < e->n_val; i++) data_source_close(&e->val[i]);
    for (int i = 0; i < e->n_mc; i++) {
        mc_free(&e->mc[i]);
        mc_prepared_free(&e->mcp[i]);
    }
    free(e);
}

int evaluator_count(const evaluator *e) { return e->n_val + 2 * e->n_mc + e->n_probe; }

bool evaluator_due(const evaluator *e, long step, bool last) {
    return e && (last || (e->every > 0 && step % e->every == 0));
}

// ---- one evaluation -------------------------------------------------------------------------

// The mean loss over eval.batches validation batches of a named set (0: the batches that tile
// the split): train.c's evaluate with windows, on this set, with the run's batch split.
static double set_loss(model *m, const data_source *src, const gdn_config *c, dist *d,
                       int32_t *x, int32_t *y) {
    batch_sampler vs;
    char err[1024];
    const sampler_params sp = {.src = src, .split = DATA_SPLIT_VAL, .documents = false,
                               .B = m->B, .T = m->T, .seed = c->seed ^ 0x5A17u,
                               .rank = d->rank, .world = d->world, .n_mb = c->grad_accum};
    if (!sampler_init(&vs, &sp, err, sizeof err)) gdn_die("eval.val: %s", err);
    long nb = c->ev_batches > 0 ? c->ev_batches : (long)sampler_tile_split(&vs);
    const long n = nb * c->grad_accum;
    double s = 0;
    for (long i = 0; i < n; i++) {
        sampler_next(&vs, x, y, NULL);
        s += model_eval_loss(m, x, y);
    }
    sampler_free(&vs);
    return dist_scalar_sum_f64(d, s) / ((double)n * d->world);
}

int evaluator_run(evaluator *e, model *m, dist *d, eval_value *out) {
    const gdn_config *c = e->c;
    eval_scorer s = eval_scorer_model(m, d);
    // every row here is one sequence from its first token: no document starts (the training
    // batch's do not apply; the loop sets them again for its next batch)
    model_set_doc_starts(m, NULL);
    int n = 0;
    double t0 = gdn_now();
    int32_t *x = gdn_malloc((size_t)m->N * sizeof(int32_t)), *y = gdn_malloc((size_t)m->N * sizeof(int32_t));
    for (int i = 0; i < e->n_val; i++) {
        snprintf(out[n].name, sizeof out[n].name, "val/%s", e->val_name[i]);
        out[n++].value = set_loss(m, &e->val[i], c, d, x, y);
    }
    free(x);
    free(y);
    for (int i = 0; i < e->n_mc; i++) {
        double t = gdn_now();
        mc_result r = mc_score(&s, &e->mcp[i]);
        snprintf(out[n].name, sizeof out[n].name, "mc/%s/acc", e->mc_name[i]);
        out[n++].value = r.acc;
        snprintf(out[n].name, sizeof out[n].name, "mc/%s/acc_norm", e->mc_name[i]);
        out[n++].value = r.acc_norm;
        t = gdn_now() - t;
        printf("eval: mc/%s: %d items, %d candidates in %.1f s (%.0f candidates/s)\n", e->mc_name[i],
               r.n, e->mcp[i].n, t, e->mcp[i].n / fmax(t, 1e-9));
    }
    for (int i = 0; i < e->n_probe; i++) {
        int L = e->probe[i].L, K = e->probe[i].K;
        if (e->probe[i].kind == 'm') {
            snprintf(out[n].name, sizeof out[n].name, "recall/mqar_L%d_k%d", L, K);
            out[n++].value = recall_mqar(&s, L, K, c->ev_probes, c->ev_seed);
        } else {
            snprintf(out[n].name, sizeof out[n].name, "recall/needle_L%d", L);
            out[n++].value = recall_needle(&s, L, c->ev_probes, c->ev_seed);
        }
    }
    printf("eval: %d values in %.1f s\n", n, gdn_now() - t0);
    return n;
}

void eval_values_json(const eval_value *v, int n, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "{");
    for (int i = 0; i < n && used < len; i++)
        used += isfinite(v[i].value)  // JSON has no NaN: null
                    ? (size_t)snprintf(buf + used, len - used, "%s\"%s\": %.17g", i ? ", " : "",
                                       v[i].name, v[i].value)
                    : (size_t)snprintf(buf + used, len - used, "%s\"%s\": null", i ? ", " : "",
                                       v[i].name);
    if (used < len) snprintf(buf + used, len - used, "}");
}

void eval_values_line(const eval_value *v, int n, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s %.4f", i ? " | " : "", v[i].name, v[i].value);
}
