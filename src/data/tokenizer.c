// tokenizer.c — the tokenizer interface (tokenizer.h): loading from a file or a stored blob,
// special tokens, and the dispatch to the kinds (tokenizer_bytes.c, tokenizer_bpe.c,
// tokenizer_spm.cc).
//
// Special tokens (the added tokens of a tokenizer.json, the control pieces of a SentencePiece
// model) are split out of the text before the kind sees it, as the `tokenizers` package does:
// at the leftmost position where one matches, the longest one matching there wins; the text
// between them is encoded on its own. Encoding without specials still splits out the added
// tokens that are not special (as the package does with encode_special_tokens). Added tokens
// marked `normalized` are left to the kind, which matches them in its normalized text.
#include "tokenizer_kinds.h"
#include "../core/common.h"
#include <ctype.h>

struct gdn_tokenizer {
    char kind[8];
    char *blob;              // what tok_blob returns (NULL for bytes)
    size_t blob_n;
    int vocab, eot;
    bpe_model *bpe;
    spm_model *spm;
    const tok_special *specials;   // owned by the kind's model
    size_t n_specials;
    tok_added_set raw;             // the added tokens matched in the raw text
};

void tok_ids_reserve(tok_ids *v, size_t extra) {
    if (v->n + extra <= v->cap) return;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < v->n + extra) cap *= 2;
    v->ids = gdn_realloc(v->ids, cap * sizeof *v->ids);
    v->cap = cap;
}

void tok_ids_push(tok_ids *v, uint32_t id) {
    if (v->n == v->cap) tok_ids_reserve(v, 1);
    v->ids[v->n++] = id;
}

void tok_ids_append(tok_ids *v, const uint32_t *ids, size_t n) {
    tok_ids_reserve(v, n);
    if (n) memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
}

void tok_ids_free(tok_ids *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

void tok_bytes_append(tok_bytes *b, const void *data, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = gdn_realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
}

// ---- loading ------------------------------------------------------------------------------

static const char *EOT_NAMES[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};

static void set_specials(gdn_tokenizer *t, const tok_special *list, size_t n) {
    t->specials = list;
    t->n_specials = n;
    tok_added_set_init(&t->raw, list, n, false);
}

gdn_tokenizer *tok_load_blob(const char *kind, const void *blob, size_t n, const char *what,
                             char *err, size_t errlen) {
    if (!what) what = "tokenizer";
    if (!kind || (strcmp(kind, "bytes") && strcmp(kind, "bpe") && strcmp(kind, "spm"))) {
        snprintf(err, errlen, "%s: tokenizer kind \"%s\" is not known (bytes, bpe or spm)", what,
                 kind ? kind : "(null)");
        return NULL;
    }
    if (strcmp(kind, "bytes") && n == 0) {
        snprintf(err, errlen, "%s: the %s tokenizer's stored blob is empty", what, kind);
        return NULL;
    }
    gdn_tokenizer *t = gdn_malloc(sizeof *t);
    snprintf(t->kind, sizeof t->kind, "%s", kind);
    t->eot = -1;
    const tok_special *list = NULL;
    size_t ns = 0;
    if (!strcmp(kind, "bytes")) {
        t->vocab = 256;
        return t;
    }
    if (!strcmp(kind, "bpe")) {
        t->bpe = bpe_load_json(blob, n, what, err, errlen);
        if (!t->bpe) goto fail;
        t->vocab = bpe_vocab_size(t->bpe);
        bpe_specials(t->bpe, &list, &ns);
    } else {
        t->spm = spm_load(blob, n, what, err, errlen);
        if (!t->spm) goto fail;
        t->vocab = spm_vocab_size(t->spm);
        t->eot = spm_eos(t->spm);
        spm_specials(t->spm, &list, &ns);
    }
    set_specials(t, list, ns);
    if (t->eot < 0)
        for (size_t i = 0; i < sizeof EOT_NAMES / sizeof *EOT_NAMES && t->eot < 0; i++)
            t->eot = tok_special_id(t, EOT_NAMES[i]);
    t->blob = gdn_malloc(n + 1);
    memcpy(t->blob, blob, n);
    t->blob_n = n;
    return t;
fail:
    free(t);
    return NULL;
}

// Whole file into a malloc'd NUL-terminated buffer.
static char *read_whole(const char *path, size_t *n, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "tokenizer %s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = gdn_malloc(cap + 1);
    for (;;) {
        len += fread(buf + len, 1, cap - len, fp);
        if (len < cap) break;
        cap *= 2;
        buf = gdn_realloc(buf, cap + 1);
    }
    bool bad = ferror(fp) != 0;
    if (fclose(fp) != 0 || bad) {
        snprintf(err, errlen, "tokenizer %s: cannot read: %s", path, strerror(errno));
        free(buf);
        return NULL;
    }
    buf[len] = 0;
    *n = len;
    return buf;
}

// Whether the JSON text has a key "model" whose value is an object (a tokenizer.json; a
// vocab.json's values are numbers).
static bool has_model_object(const char *json) {
    for (const char *p = strstr(json, "\"model\""); p; p = strstr(p + 1, "\"model\"")) {
        const char *q = p + 7;
        while (isspace((unsigned char)*q)) q++;
        if (*q++ != ':') continue;
        while (isspace((unsigned char)*q)) q++;
        if (*q == '{') return true;
    }
    return false;
}

// A JSON object with a "model" key is a tokenizer.json; one without is a vocab.json (its
// merges.txt beside it). Anything that does not start with '{' is taken for a SentencePiece
// model.
gdn_tokenizer *tok_load(const char *spec, char *err, size_t errlen) {
    if (!spec || !spec[0]) {
        snprintf(err, errlen, "tokenizer: no name given (bytes, a tokenizer.json, a vocab.json or "
                 "a SentencePiece .model)");
        return NULL;
    }
    if (!strcmp(spec, "bytes")) return tok_load_blob("bytes", NULL, 0, spec, err, errlen);
    size_t n;
    char *data = read_whole(spec, &n, err, errlen);
    if (!data) return NULL;
    size_t i = 0;
    while (i < n && isspace((unsigned char)data[i])) i++;
    gdn_tokenizer *t = NULL;
    if (i == n) {
        snprintf(err, errlen, "tokenizer %s: the file is empty", spec);
    } else if (data[i] != '{') {
        t = tok_load_blob("spm", data, n, spec, err, errlen);
    } else if (has_model_object(data)) {
        t = tok_load_blob("bpe", data, n, spec, err, errlen);
    } else {
        // vocab.json: its merges beside it, "<prefix>vocab.json" -> "<prefix>merges.txt"
        // (vocab.json -> merges.txt, gpt2-vocab.json -> gpt2-merges.txt), else merges.txt
        char merges[4096];
        const char *slash = strrchr(spec, '/');
        size_t sl = strlen(spec);
        int keep = slash ? (int)(slash - spec + 1) : 0;
        if (sl >= 10 && !strcmp(spec + sl - 10, "vocab.json")) keep = (int)(sl - 10);
        if (snprintf(merges, sizeof merges, "%.*smerges.txt", keep, spec) >= (int)sizeof merges) {
            snprintf(err, errlen, "tokenizer %s: path too long", spec);
        } else {
            size_t jn;
            char *json = bpe_json_from_files(spec, merges, &jn, err, errlen);
            if (json) t = tok_load_blob("bpe", json, jn, spec, err, errlen);
            free(json);
        }
    }
    free(data);
    return t;
}

void tok_free(gdn_tokenizer *t) {
    if (!t) return;
    if (t->bpe) bpe_free(t->bpe);
    if (t->spm) spm_free(t->spm);
    free(t->blob);
    free(t);
}

const char *tok_kind(const gdn_tokenizer *t) { return t->kind; }
void tok_blob(const gdn_tokenizer *t, const void **blob, size_t *n) {
    *blob = t->blob;
    *n = t->blob_n;
}
int tok_vocab_size(const gdn_tokenizer *t) { return t->vocab; }
int tok_eot(const gdn_tokenizer *t) { return t->eot; }

int tok_special_id(const gdn_tokenizer *t, const char *text) {
    size_t len = strlen(text);
    for (size_t i = 0; i < t->n_specials; i++)
        if (t->specials[i].len == len && !memcmp(t->specials[i].text, text, len))
            return (int)t->specials[i].id;
    return -1;
}

// ---- encode / decode ----------------------------------------------------------------------

static bool encode_plain(const gdn_tokenizer *t, const char *text, size_t len, bool specials,
                         tok_ids *out, char *err, size_t errlen) {
    if (len == 0) return true;
    if (t->bpe) return bpe_encode(t->bpe, text, len, specials, out, err, errlen);
    if (t->spm) return spm_encode(t->spm, text, len, out, err, errlen);
    bytes_encode(text, len, out);
    return true;
}

// ---- added-token sets ---------------------------------------------------------------------

void tok_added_set_init(tok_added_set *s, const tok_special *list, size_t n, bool normalized) {
    memset(s, 0, sizeof *s);
    s->list = list;
    s->n = n;
    s->normalized = normalized;
    for (size_t i = 0; i < n; i++) {
        if (list[i].len == 0 || list[i].normalized != normalized) continue;
        s->first[(unsigned char)list[i].text[0]] = true;
        s->n_tokens++;
        s->n_plain += !list[i].special;
    }
}

// The longest token of s that starts at text[0], or NULL.
static const tok_special *added_at(const tok_added_set *s, const char *text, size_t len) {
    const tok_special *best = NULL;
    for (size_t i = 0; i < s->n; i++) {
        const tok_special *a = &s->list[i];
        if (a->normalized == s->normalized && a->len > 0 && a->len <= len &&
            (!best || a->len > best->len) && !memcmp(a->text, text, a->len))
            best = a;
    }
    return best;
}

const tok_special *tok_added_next(const tok_added_set *s, const char *text, size_t len,
                                  bool specials, size_t *pos, size_t *at) {
    if (!(specials ? s->n_tokens : s->n_plain)) {   // nothing can be split out
        *pos = len;
        return NULL;
    }
    for (size_t i = *pos; i < len; i++) {
        if (!s->first[(unsigned char)text[i]]) continue;
        const tok_special *a = added_at(s, text + i, len - i);
        if (!a) continue;
        if (a->special && !specials) {   // text, and no token starts inside it
            i += a->len - 1;
            continue;
        }
        *at = i;
        *pos = i + a->len;
        return a;
    }
    *pos = len;
    return NULL;
}

bool tok_encode(const gdn_tokenizer *t, const char *text, size_t len, bool specials,
                tok_ids *out, char *err, size_t errlen) {
    size_t start = 0, pos = 0, at = 0;
    const tok_special *s;
    while ((s = tok_added_next(&t->raw, text, len, specials, &pos, &at))) {
        if (!encode_plain(t, text + start, at - start, specials, out, err, errlen)) return false;
        tok_ids_push(out, s->id);
        start = pos;
    }
    return encode_plain(t, text + start, len - start, specials, out, err, errlen);
}

tok_template tok_get_template(const gdn_tokenizer *t) {
    // SentencePiece: a .model carries no rule to add <s> (spm_encode adds it only when asked,
    // --extra_options=bos; Hugging Face's add_bos_token lives in tokenizer_config.json)
    if (t->bpe) return bpe_template(t->bpe);
    return (tok_template){0};
}

bool tok_encode_template(const gdn_tokenizer *t, const char *text, size_t len, bool specials,
                         tok_ids *out, char *err, size_t errlen) {
    tok_template tp = tok_get_template(t);
    tok_ids_append(out, tp.prefix, tp.n_prefix);
    if (!tok_encode(t, text, len, specials, out, err, errlen)) return false;
    tok_ids_append(out, tp.suffix, tp.n_suffix);
    return true;
}

bool tok_decode(const gdn_tokenizer *t, const uint32_t *ids, size_t n, char **text, size_t *len,
                char *err, size_t errlen) {
    tok_bytes b = {0};
    tok_bytes_append(&b, "", 0);
    bool ok = t->bpe   ? bpe_decode(t->bpe, ids, n, &b, err, errlen)
              : t->spm ? spm_decode(t->spm, ids, n, &b, err, errlen)
                       : bytes_decode(ids, n, &b, err, errlen);
    if (!ok) {
        free(b.p);
        return false;
    }
    *text = b.p;
    *len = b.n;
    return true;
}
