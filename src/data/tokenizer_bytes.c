// tokenizer_bytes.c — the tokenizer interface (tokenizer.h) and its "bytes" kind: id = byte.
#include "tokenizer.h"
#include "../core/common.h"

struct gdn_tokenizer {
    char kind[8];
};

gdn_tokenizer *tok_load(const char *spec, char *err, size_t errlen) {
    if (spec && !strcmp(spec, "bytes")) return tok_load_blob("bytes", NULL, 0, spec, err, errlen);
    snprintf(err, errlen, "tokenizer %s: only \"bytes\" is available", spec ? spec : "(null)");
    return NULL;
}

gdn_tokenizer *tok_load_blob(const char *kind, const void *blob, size_t n, const char *what,
                             char *err, size_t errlen) {
    (void)blob;
    if (!kind || strcmp(kind, "bytes") != 0 || n != 0) {
        snprintf(err, errlen, "%s: tokenizer kind %s is not known", what, kind ? kind : "(null)");
        return NULL;
    }
    gdn_tokenizer *t = gdn_malloc(sizeof *t);
    snprintf(t->kind, sizeof t->kind, "bytes");
    return t;
}

void tok_free(gdn_tokenizer *t) { free(t); }
const char *tok_kind(const gdn_tokenizer *t) { return t->kind; }
void tok_blob(const gdn_tokenizer *t, const void **blob, size_t *n) {
    (void)t;
    *blob = NULL;
    *n = 0;
}
int tok_vocab_size(const gdn_tokenizer *t) { (void)t; return 256; }
int tok_eot(const gdn_tokenizer *t) { (void)t; return -1; }
int tok_special_id(const gdn_tokenizer *t, const char *text) { (void)t; (void)text; return -1; }

void tok_ids_free(tok_ids *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

static void ids_reserve(tok_ids *v, size_t extra) {
    if (v->n + extra <= v->cap) return;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < v->n + extra) cap *= 2;
    v->ids = gdn_realloc(v->ids, cap * sizeof *v->ids);
    v->cap = cap;
}

bool tok_encode(const gdn_tokenizer *t, const char *text, size_t len, bool specials,
                tok_ids *out, char *err, size_t errlen) {
    (void)t; (void)specials; (void)err; (void)errlen;
    ids_reserve(out, len);
    for (size_t i = 0; i < len; i++) out->ids[out->n++] = (unsigned char)text[i];
    return true;
}

bool tok_decode(const gdn_tokenizer *t, const uint32_t *ids, size_t n, char **text, size_t *len,
                char *err, size_t errlen) {
    (void)t;
    char *s = gdn_malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= 256) {
            snprintf(err, errlen, "token id %u at position %zu is outside the bytes vocabulary "
                     "(256)", ids[i], i);
            free(s);
            return false;
        }
        s[i] = (char)ids[i];
    }
    s[n] = 0;
    *text = s;
    *len = n;
    return true;
}
