// mc.c — multiple-choice tasks (eval.h): the jsonl reader (common, HellaSwag, ARC and PIQA
// forms), the candidates' token rows, and the scoring by summed continuation log-probs, with
// lm-evaluation-harness's acc and acc_norm.
#include "eval.h"
#include <jansson.h>
#include "../core/common.h"

// ---- the file -----------------------------------------------------------------------------

// A label: an integer, or a string of digits (HellaSwag on Hugging Face stores "3").
static bool label_value(const json_t *j, int *out) {
    if (json_is_integer(j)) {
        json_int_t v = json_integer_value(j);
        if (v < 0 || v > MC_MAX_ENDINGS) return false;
        *out = (int)v;
        return true;
    }
    if (!json_is_string(j)) return false;
    const char *s = json_string_value(j);
    if (!*s || strlen(s) > 3) return false;
    int v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        v = v * 10 + (*s - '0');
    }
    *out = v;
    return true;
}

// endings from a JSON array of strings; false + why in err
static bool take_endings(mc_item *it, const json_t *arr, const char *what, char *err, size_t errlen) {
    if (!json_is_array(arr)) {
        snprintf(err, errlen, "'%s' is not an array of strings", what);
        return false;
    }
    size_t n = json_array_size(arr);
    if (n < 2 || n > MC_MAX_ENDINGS) {
        snprintf(err, errlen, "'%s' has %zu entries, expected 2 to %d", what, n, MC_MAX_ENDINGS);
        return false;
    }
    it->endings = gdn_malloc(n * sizeof(char *));
    it->n_endings = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        if (!json_is_string(e) || !json_string_length(e)) {
            snprintf(err, errlen, "'%s'[%zu] is %s, expected a non-empty string", what, i,
                     json_is_string(e) ? "empty" : "not a string");
            return false;
        }
        it->endings[i] = gdn_strdup(json_string_value(e));
    }
    return true;
}

static char *question_prompt(const char *q) {
    size_t n = strlen(q) + 32;
    char *s = gdn_malloc(n);
    snprintf(s, n, "Question: %s\nAnswer:", q);
    return s;
}

// One parsed line into *it; false + why (without the file and line) in err.
static bool parse_item(mc_item *it, const json_t *o, char *err, size_t errlen) {
    if (!json_is_object(o)) {
        snprintf(err, errlen, "not a JSON object");
        return false;
    }
    const json_t *ctx = json_object_get(o, "context"), *hs = json_object_get(o, "ctx");
    const json_t *q = json_object_get(o, "question"), *goal = json_object_get(o, "goal");
    if (ctx || hs) {  // common or HellaSwag
        const char *key = ctx ? "context" : "ctx";
        if (!json_is_string(ctx ? ctx : hs)) {
            snprintf(err, errlen, "'%s' is not a string", key);
            return false;
        }
        it->context = gdn_strdup(json_string_value(ctx ? ctx : hs));
        if (!take_endings(it, json_object_get(o, "endings"), "endings", err, errlen)) return false;
        if (!label_value(json_object_get(o, "label"), &it->label)) {
            snprintf(err, errlen, "'label' is missing or not a whole number");
            return false;
        }
    } else if (q && json_is_string(q)) {  // ARC
        const json_t *ch = json_object_get(o, "choices"), *key = json_object_get(o, "answerKey");
        const json_t *labels = json_is_object(ch) ? json_object_get(ch, "label") : NULL;
        if (!json_is_object(ch) || !take_endings(it, json_object_get(ch, "text"), "choices.text", err, errlen)) {
            if (!json_is_object(ch)) snprintf(err, errlen, "'choices' is not an object {\"text\": [...], \"label\": [...]}");
            return false;
        }
        if (!json_is_array(labels) || json_array_size(labels) != (size_t)it->n_endings || !json_is_string(key)) {
            snprintf(err, errlen, "'choices.label' must list one string per choice and 'answerKey' be one of them");
            return false;
        }
        it->label = -1;
        for (int i = 0; i < it->n_endings; i++) {
            const json_t *l = json_array_get(labels, (size_t)i);
            if (json_is_string(l) && !strcmp(json_string_value(l), json_string_value(key))) it->label = i;
        }
        if (it->label < 0) {
            snprintf(err, errlen, "'answerKey' \"%s\" is not among 'choices.label'", json_string_value(key));
            return false;
        }
        it->context = question_prompt(json_string_value(q));
    } else if (goal && json_is_string(goal)) {  // PIQA
        json_t *arr = json_array();
        json_array_append(arr, json_object_get(o, "sol1"));
        json_array_append(arr, json_object_get(o, "sol2"));
        bool ok = json_array_size(arr) == 2 && take_endings(it, arr, "sol1, sol2", err, errlen);
        if (json_array_size(arr) != 2) snprintf(err, errlen, "'sol1' or 'sol2' is missing");
        json_decref(arr);
        if (!ok) return false;
        if (!label_value(json_object_get(o, "label"), &it->label)) {
            snprintf(err, errlen, "'label' is missing or not a whole number");
            return false;
        }
        it->context = question_prompt(json_string_value(goal));
    } else {
        snprintf(err, errlen, "no known form: expected \"context\" (or HellaSwag's \"ctx\") with "
                 "\"endings\" and \"label\", ARC's \"question\", \"choices\", \"answerKey\", or "
                 "PIQA's \"goal\", \"sol1\", \"sol2\", \"label\"");
        return false;
    }
    if (!it->context[0]) {
        snprintf(err, errlen, "the context is empty (the first token of an ending needs one)");
        return false;
    }
    if (it->label >= it->n_endings) {
        snprintf(err, errlen, "label %d is out of range: %d endings (0-based)", it->label, it->n_endings);
        return false;
    }
    return true;
}

static void item_free(mc_item *it) {
    free(it->context);
    for (int i = 0; i < it->n_endings; i++) free(it->endings ? it->endings[i] : NULL);
    free(it->endings);
}

bool mc_load(mc_task *t, const char *path, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", path);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, cap_items = 0;
    bool ok = true;
    while (ok && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t blank = 0;
        while (blank < (size_t)len && (line[blank] == ' ' || line[blank] == '\t' ||
                                       line[blank] == '\r' || line[blank] == '\n'))
            blank++;
        if (blank == (size_t)len) continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)len, 0, &je);
        char why[512];
        if (t->n == cap_items) {
            cap_items = cap_items ? 2 * cap_items : 64;
            t->items = gdn_realloc(t->items, (size_t)cap_items * sizeof *t->items);
        }
        mc_item *it = &t->items[t->n];
        memset(it, 0, sizeof *it);
        it->line = lineno;
        if (!o) {
            snprintf(err, errlen, "%s:%d: not JSON: %s (column %d)", path, lineno, je.text, je.column);
            ok = false;
        } else if (!parse_item(it, o, why, sizeof why)) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
            ok = false;
        }
        if (o) json_decref(o);
        if (ok) t->n++;
        else item_free(it);
    }
    bool rerr = ferror(f);
    free(line);
    fclose(f);
    if (ok && rerr) {
        snprintf(err, errlen, "%s: read error", path);
        ok = false;
    }
    if (ok && t->n == 0) {
        snprintf(err, errlen, "%s: no items (one JSON object a line)", path);
        ok = false;
    }
    if (!ok) mc_free(t);
    return ok;
}

void mc_free(mc_task *t) {
    for (int i = 0; i < t->n; i++) item_free(&t->items[i]);
    free(t->items);
    t->items = NULL;
    t->n = 0;
}

// ---- candidates -----------------------------------------------------------------------------

// Unicode characters of UTF-8 text: the bytes that do not continue a sequence (Python's len()
// of the decoded string; invalid bytes count one each, as Python's surrogateescape would).
static int utf8_chars(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

bool mc_prepare(mc_prepared *p, const mc_task *t, int max_items, const gdn_tokenizer *tok,
                int T, int V, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    int n_items = max_items > 0 && max_items < t->n ? max_items : t->n;
    int total = 0;
    for (int i = 0; i < n_items; i++) total += t->items[i].n_endings;
    p->c = gdn_malloc((size_t)total * sizeof *p->c);
    p->first = gdn_malloc((size_t)(n_items + 1) * sizeof(int));
    p->n_items = n_items;
    tok_ids ctx = {0}, whole = {0};
    bool ok = true;
    for (int i = 0; i < n_items && ok; i++) {
        const mc_item *it = &t->items[i];
        p->first[i] = p->n;
        ctx.n = 0;
        char why[512];
        ok = tok_encode(tok, it->context, strlen(it->context), false, &ctx, why, sizeof why);
        for (int j = 0; j < it->n_endings && ok; j++) {
            size_t lc = strlen(it->context), le = strlen(it->endings[j]);
            char *text = gdn_malloc(lc + le + 2);
            memcpy(text, it->context, lc);
            text[lc] = ' ';
            memcpy(text + lc + 1, it->endings[j], le + 1);
            whole.n = 0;
            ok = tok_encode(tok, text, lc + le + 1, false, &whole, why, sizeof why);
            free(text);
            if (!ok) break;
            long cont = (long)whole.n - (long)ctx.n;
            if (cont < 1 || cont > T) {
                snprintf(why, sizeof why, "ending %d has %ld tokens after the context's %zu, "
                         "expected 1 to data.seq_len = %d", j, cont, ctx.n, T);
                ok = false;
                break;
            }
            size_t keep = GDN_MIN(whole.n, (size_t)T + 1), from = whole.n - keep;
            mc_cand *c = &p->c[p->n++];
            *c = (mc_cand){.n = (int)keep, .cont = (int)cont, .chars = utf8_chars(it->endings[j]),
                           .item = i, .ending = j};
            c->tok = gdn_malloc(keep * sizeof(int32_t));
            for (size_t k = 0; k < keep; k++) {
                uint32_t id = whole.ids[from + k];
                if (id >= (uint32_t)V) {
                    snprintf(why, sizeof why, "token id %u >= the model's vocab_size %d", id, V);
                    ok = false;
                }
                c->tok[k] = (int32_t)id;
            }
        }
        if (!ok) snprintf(err, errlen, "%s:%d: %s", t->path, it->line, why);
    }
    p->first[n_items] = p->n;
    tok_ids_free(&ctx);
    tok_ids_free(&whole);
    int *labels = gdn_malloc((size_t)GDN_MAX(n_items, 1) * sizeof(int));
    for (int i = 0; i < n_items; i++) labels[i] = t->items[i].label;
    p->label = labels;
    if (!ok) mc_prepared_free(p);
    return ok;
}

void mc_prepared_free(mc_prepared *p) {
    for (int i = 0; i < p->n; i++) free(p->c[i].tok);
    free(p->c);
    free(p->first);
    free((void *)p->label);
    memset(p, 0, sizeof *p);
}

// ---- scoring --------------------------------------------------------------------------------

// Batches of B candidates, one a row: x = the row's first n - 1 tokens (then token 0 as padding),
// y = the next token at the continuation's positions, -1 elsewhere. Batch k runs on rank
// k mod world; the per-candidate sums are then summed over the ranks (each is nonzero on one).
mc_result mc_score(const eval_scorer *s, const mc_prepared *p) {
    const int B = s->B, T = s->T, N = B * T;
    const int rank = s->d ? s->d->rank : 0, world = s->d ? s->d->world : 1;
    int32_t *x = gdn_malloc((size_t)N * sizeof(int32_t)), *y = gdn_malloc((size_t)N * sizeof(int32_t));
    double *lp = gdn_malloc((size_t)N * sizeof(double));
    double *sum = gdn_malloc((size_t)GDN_MAX(p->n, 1) * sizeof(double));
    for (int b0 = 0, k = 0; b0 < p->n; b0 += B, k++) {
        if (k % world != rank) continue;
        for (int i = 0; i < N; i++) x[i] = 0, y[i] = -1;
        for (int b = 0; b < B && b0 + b < p->n; b++) {
            const mc_cand *c = &p->c[b0 + b];
            for (int t = 0; t + 1 < c->n; t++) {
                x[b * T + t] = c->tok[t];
                if (t + 1 >= c->n - c->cont) y[b * T + t] = c->tok[t + 1];
            }
        }
        s->fn(s->ctx, x, y, lp, NULL);
        for (int b = 0; b < B && b0 + b < p->n; b++) {
            double acc = 0;
            for (int t = 0; t < T; t++) acc += y[b * T + t] >= 0 ? lp[b * T + t] : 0.0;
            sum[b0 + b] = acc;
        }
    }
    if (s->d && world > 1) dist_allreduce_sum_f64(s->d, sum, (size_t)p->n);
    mc_result r = {.n = p->n_items};
    for (int i = 0; i < p->n_items; i++) {
        int best = -1, best_norm = -1;
        double bv = 0, bn = 0;
        for (int j = p->first[i]; j < p->first[i + 1]; j++) {
            double v = sum[j], vn = sum[j] / (double)GDN_MAX(p->c[j].chars, 1);
            if (best < 0 || v > bv) best = j, bv = v;
            if (best_norm < 0 || vn > bn) best_norm = j, bn = vn;
        }
        r.acc += p->c[best].ending == p->label[i];
        r.acc_norm += p->c[best_norm].ending == p->label[i];
    }
    if (p->n_items) r.acc /= p->n_items, r.acc_norm /= p->n_items;
    free(x);
    free(y);
    free(lp);
    free(sum);
    return r;
}
