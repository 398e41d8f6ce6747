// tokenizer_post.c — the post_processor of a tokenizer.json, read once at load into the ids the
// `tokenizers` package puts before and after one text with add_special_tokens = True
// (tokenizer_post.h). The package (src/processors/, 0.23) passes a list of encodings from
// processor to processor, starting with one, the text's; each processor maps the list:
//   ByteLevel          the list unchanged (offsets only)
//   BertProcessing     e0 -> [cls] e0 [sep]; every later e -> e [sep]
//   RobertaProcessing  e0 -> [cls] e0 [sep]; every later e -> [sep] e [sep]
//   TemplateProcessing its "single" template on a list of one, "pair" on a list of two (more:
//                      the package panics); the result lists, piece by piece, a SpecialToken's
//                      ids ("special_tokens"[name].ids) or a copy of the list's encoding 0
//                      (Sequence A) or 1 (Sequence B)
//   Sequence           each of "processors" in order
// and the result is the list concatenated. Without special tokens Bert and Roberta leave the
// list as it is and a template gives only its Sequence pieces. Here the list is simulated at
// load on atoms (an id, or TEXT: the text's ids, whatever they are), once with special tokens
// and once without: the first must hold TEXT once (prefix TEXT suffix), the second must be
// TEXT alone (so that tok_encode is encode(text, add_special_tokens = False)). Anything else,
// and the cases where the package panics, is refused at load.
#include "tokenizer_post.h"
#include "../core/common.h"

#define POST_TEXT UINT32_MAX   // the text's place (no id: ids are < 2^24)
#define POST_MAX_DEPTH 8       // Sequences nested
#define POST_MAX_ATOMS 4096    // atoms in one list (a guard against templates that multiply)

// The encodings between two processors.
typedef struct {
    tok_ids *e;                // (n)
    size_t n;
} post_list;

typedef struct {
    const uint8_t *has;        // (vocab): the vocabulary's ids
    int vocab;
    const char *what;
    bool add;                  // add_special_tokens
    char *err;
    size_t errlen;
} post_ctx;

static void list_free(post_list *l) {
    for (size_t i = 0; i < l->n; i++) tok_ids_free(&l->e[i]);
    free(l->e);
    l->e = NULL;
    l->n = 0;
}

static tok_ids *list_push(post_list *l) {
    l->e = gdn_realloc(l->e, (l->n + 1) * sizeof *l->e);
    memset(&l->e[l->n], 0, sizeof *l->e);
    return &l->e[l->n++];
}

static size_t list_atoms(const post_list *l) {
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) n += l->e[i].n;
    return n;
}

#define POST_FAIL(...)                                 \
    do {                                               \
        snprintf(c->err, c->errlen, __VA_ARGS__);      \
        return false;                                  \
    } while (0)

// An id the processor adds (at `path`): an integer that is a token of the vocabulary.
static bool post_id(const post_ctx *c, json_t *j, const char *path, uint32_t *id) {
    if (!json_is_integer(j)) POST_FAIL("%s: %s is not an integer id", c->what, path);
    json_int_t v = json_integer_value(j);
    if (v < 0 || v >= c->vocab || !c->has[v])
        POST_FAIL("%s: %s is %lld: not a token of the vocabulary (size %d)", c->what, path,
                  (long long)v, c->vocab);
    *id = (uint32_t)v;
    return true;
}

// Bert's and Roberta's "sep" / "cls": [token, id].
static bool post_pair_id(const post_ctx *c, json_t *pp, const char *path, const char *key,
                         uint32_t *id) {
    json_t *j = json_object_get(pp, key);
    if (!json_is_array(j) || json_array_size(j) != 2 || !json_is_string(json_array_get(j, 0)))
        POST_FAIL("%s: %s.%s is not [token, id]", c->what, path, key);
    char sub[300];
    snprintf(sub, sizeof sub, "%s.%s[1]", path, key);
    return post_id(c, json_array_get(j, 1), sub, id);
}

static bool post_bert(const post_ctx *c, json_t *pp, const char *path, bool roberta,
                      post_list *l) {
    uint32_t sep, cls;
    if (!post_pair_id(c, pp, path, "sep", &sep) || !post_pair_id(c, pp, path, "cls", &cls))
        return false;
    if (!c->add) return true;
    for (size_t i = 0; i < l->n; i++) {
        tok_ids e = {0};
        if (i == 0) tok_ids_append(&e, &cls, 1);
        else if (roberta) tok_ids_append(&e, &sep, 1);
        tok_ids_append(&e, l->e[i].ids, l->e[i].n);
        tok_ids_append(&e, &sep, 1);
        tok_ids_free(&l->e[i]);
        l->e[i] = e;
    }
    return true;
}

static bool post_template(const post_ctx *c, json_t *pp, const char *path, post_list *l) {
    const char *key = l->n == 1 ? "single" : "pair";
    if (l->n > 2)
        POST_FAIL("%s: %s (TemplateProcessing) comes after processors that leave %zu sequences: "
                  "the tokenizers package takes 1 or 2 (it panics)", c->what, path, l->n);
    json_t *tpl = json_object_get(pp, key), *st = json_object_get(pp, "special_tokens");
    if (!json_is_array(tpl)) POST_FAIL("%s: %s.%s is missing or not an array", c->what, path, key);
    if (!json_is_object(st))
        POST_FAIL("%s: %s.special_tokens is missing or not an object", c->what, path);
    post_list out = {0};
    for (size_t i = 0; i < json_array_size(tpl); i++) {
        json_t *piece = json_array_get(tpl, i);
        json_t *seq = json_object_get(piece, "Sequence"), *sp = json_object_get(piece, "SpecialToken");
        char sub[300];
        snprintf(sub, sizeof sub, "%s.%s[%zu]", path, key, i);
        if (json_is_object(seq)) {
            const char *id = json_string_value(json_object_get(seq, "id"));
            size_t k = id && !strcmp(id, "A") ? 0 : id && !strcmp(id, "B") ? 1 : 2;
            if (k == 2) {
                list_free(&out);
                POST_FAIL("%s: %s.Sequence.id is not \"A\" or \"B\"", c->what, sub);
            }
            if (k >= l->n) {
                list_free(&out);
                POST_FAIL("%s: %s is Sequence %s but the %s template has %zu sequence(s): not "
                          "supported (the tokenizers package panics)", c->what, sub, id, key, l->n);
            }
            tok_ids *e = list_push(&out);
            tok_ids_append(e, l->e[k].ids, l->e[k].n);
        } else if (json_is_object(sp)) {
            if (!c->add) continue;
            const char *name = json_string_value(json_object_get(sp, "id"));
            json_t *tok = name ? json_object_get(st, name) : NULL;
            json_t *ids = json_object_get(tok, "ids");
            if (!name || !json_is_array(ids)) {
                list_free(&out);
                POST_FAIL("%s: %s is SpecialToken \"%s\", which %s.special_tokens does not "
                          "define (with \"ids\")", c->what, sub, name ? name : "(no id)", path);
            }
            tok_ids *e = list_push(&out);
            for (size_t k = 0; k < json_array_size(ids); k++) {
                char idpath[600];
                uint32_t id;
                snprintf(idpath, sizeof idpath, "%s.special_tokens[\"%s\"].ids[%zu]", path, name,
                         k);
                if (!post_id(c, json_array_get(ids, k), idpath, &id)) {
                    list_free(&out);
                    return false;
                }
                tok_ids_push(e, id);
            }
        } else {
            list_free(&out);
            POST_FAIL("%s: %s is neither {\"Sequence\": ...} nor {\"SpecialToken\": ...}", c->what,
                      sub);
        }
        if (list_atoms(&out) > POST_MAX_ATOMS) {
            list_free(&out);
            POST_FAIL("%s: %s: the template grows past %d ids", c->what, path, POST_MAX_ATOMS);
        }
    }
    list_free(l);
    *l = out;
    return true;
}

// Processor pp (at `path`) on the list, as the package's process_encodings.
static bool post_apply(const post_ctx *c, json_t *pp, const char *path, int depth, post_list *l) {
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!json_is_object(pp) || !type)
        POST_FAIL("%s: %s is not an object with a \"type\"", c->what, path);
    if (!strcmp(type, "ByteLevel")) return true;
    if (!strcmp(type, "BertProcessing")) return post_bert(c, pp, path, false, l);
    if (!strcmp(type, "RobertaProcessing")) return post_bert(c, pp, path, true, l);
    if (!strcmp(type, "TemplateProcessing")) return post_template(c, pp, path, l);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(pp, "processors");
        if (!json_is_array(list))
            POST_FAIL("%s: %s.processors is missing or not an array", c->what, path);
        if (depth >= POST_MAX_DEPTH)
            POST_FAIL("%s: %s: Sequences nested more than %d deep", c->what, path, POST_MAX_DEPTH);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", path, i);
            if (!post_apply(c, json_array_get(list, i), sub, depth + 1, l)) return false;
        }
        return true;
    }
    POST_FAIL("%s: %s.type is \"%s\": not supported (TemplateProcessing, BertProcessing, "
              "RobertaProcessing, ByteLevel, and Sequence of these are)", c->what, path, type);
}

// The list of one encoding, the text, through pp; the result concatenated into *out.
static bool post_run(const post_ctx *c, json_t *pp, tok_ids *out) {
    post_list l = {0};
    tok_ids_push(list_push(&l), POST_TEXT);
    bool ok = post_apply(c, pp, "post_processor", 0, &l);
    for (size_t i = 0; ok && i < l.n; i++) tok_ids_append(out, l.e[i].ids, l.e[i].n);
    list_free(&l);
    return ok;
}

bool tok_post_load(json_t *post_processor, const uint8_t *has, int vocab, const char *what,
                   tok_ids *prefix, tok_ids *suffix, char *err, size_t errlen) {
    post_ctx c = {.has = has, .vocab = vocab, .what = what, .add = true, .err = err,
                  .errlen = errlen};
    tok_ids with = {0}, without = {0};
    bool ok = post_run(&c, post_processor, &with);
    c.add = false;
    ok = ok && post_run(&c, post_processor, &without);
    size_t texts = 0, at = 0;
    for (size_t i = 0; ok && i < with.n; i++)
        if (with.ids[i] == POST_TEXT) texts++, at = i;
    if (ok && texts != 1) {
        snprintf(err, errlen, "%s: post_processor: with special tokens it gives the text %zu "
                 "times: only templates that hold the text once are supported", what, texts);
        ok = false;
    }
    if (ok && !(without.n == 1 && without.ids[0] == POST_TEXT)) {
        snprintf(err, errlen, "%s: post_processor: without special tokens it does not give the "
                 "text alone (%zu ids): not supported", what, without.n);
        ok = false;
    }
    if (ok) {
        tok_ids_append(prefix, with.ids, at);
        tok_ids_append(suffix, with.ids + at + 1, with.n - at - 1);
    }
    tok_ids_free(&with);
    tok_ids_free(&without);
    return ok;
}
