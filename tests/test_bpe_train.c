// test_bpe_train.c — the byte-level BPE trainer (src/data/bpe_train.h).
//
// On the committed fixture (tests/fixtures/bpe_train: corpus.txt, expected_300.json,
// expected_1000.json, made by make_expected.py with the `tokenizers` package):
//   - the merges at vocab 300 and 1000 equal the expected ones, and equal those of a slow
//     reference trainer here (all pair counts recounted before every merge, same tie rule);
//   - the tokenizer.json has the structure `tokenizers` needs (model BPE, ByteLevel
//     pre-tokenizer / decoder, the special as an added token, vocab ids 0..V-1 once each, every
//     merge's halves and result in the vocab);
//   - a plain BPE encoder here, reading only that tokenizer.json (lowest-rank pair first), gives
//     the ids `tokenizers` gave for the fixture texts with the same file, and so does tok_encode
//     (tokenizer.h, the encoder gdn-prepare uses) with tok_load of that file;
// and: the same input twice, or documents added by 1 or 2 threads, or as pre-split words with
// counts, give byte-identical files; on random words 20x the memory cap, the word table's
// measured peak stays under the cap and frequent words survive the pruning; bad input (vocab
// below 256 + specials, an unwritable or invalid output path, bad options) fails with a message
// and leaves nothing behind; the pre-tokenizer split on invalid UTF-8 and contractions.
//
// usage: test_bpe_train [FIXTURE_DIR]              the checks (default $GDN_SOURCE_DIR/tests/...)
//        test_bpe_train --train CORPUS VOCAB OUT   train as the checks do, write OUT (for
//                                                  make_expected.py)
#include "check.h"
#include "fileutil.h"
#include "../src/data/bpe_train.h"
#include "../src/data/tokenizer.h"
#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[512];
static const char *const SPECIALS[] = {"<|endoftext|>"};

static char *read_all(const char *path, size_t *n) {
    char *s = file_read_all(path, n);
    if (!s) gdn_die("cannot open %s", path);
    return s;
}

static bool same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = read_all(a, &na), *y = read_all(b, &nb);
    bool same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static bpe_trainer *new_trainer(size_t cap) {
    bpe_train_opts o = {.mem_cap = cap, .specials = SPECIALS, .n_specials = 1};
    char err[256];
    bpe_trainer *tr = bpe_train_new(&o, err, sizeof err);
    if (!tr) gdn_die("%s", err);
    return tr;
}

// Train on text as one document and write out (the --train mode and the fixture checks).
static bool train_text(const char *text, size_t n, int vocab, const char *out, char *err,
                       size_t errlen) {
    bpe_trainer *tr = new_trainer(0);
    bool ok = bpe_train_add(tr, text, n, err, errlen) && bpe_train_finish(tr, vocab, out, err, errlen);
    bpe_train_free(tr);
    return ok;
}

// ---- GPT-2 byte <-> character, written out again from its definition ----------------------

static int byte_cp[256];
static void byte_table(void) {
    bool self[256] = {false};
    for (int b = '!'; b <= '~'; b++) self[b] = true;
    for (int b = 0xA1; b <= 0xAC; b++) self[b] = true;
    for (int b = 0xAE; b <= 0xFF; b++) self[b] = true;
    int n = 0;
    for (int b = 0; b < 256; b++) byte_cp[b] = self[b] ? b : 256 + n++;
}
// bytes -> their byte-level string (UTF-8), into out (at least 2n + 1 bytes)
static void byte_level(const char *s, size_t n, char *out) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        int cp = byte_cp[(uint8_t)s[i]];
        if (cp < 0x80) {
            out[at++] = (char)cp;
        } else {
            out[at++] = (char)(0xC0 | (cp >> 6));
            out[at++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[at] = 0;
}

// ---- a plain BPE encoder over a tokenizer.json ---------------------------------------------

typedef struct {
    json_t *root, *vocab, *ranks;  // ranks: "left right" -> merge rank
    json_t *added;
    bpe_trainer *splitter;
    uint32_t *ids;
    size_t n, cap;
} ref_encoder;

static void ids_push(ref_encoder *e, uint32_t id) {
    if (e->n == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 256;
        e->ids = gdn_realloc(e->ids, e->cap * sizeof(uint32_t));
    }
    e->ids[e->n++] = id;
}

// one pre-token: symbols = its characters; merge the lowest-rank adjacent pair (leftmost of
// equal ranks) until none is a merge; then look each symbol up in the vocab.
static void ref_word(const char *w, size_t n, void *ctx) {
    ref_encoder *e = ctx;
    char *s = gdn_malloc(2 * n + 1);
    byte_level(w, n, s);
    size_t ns = 0;
    char **sym = gdn_malloc((strlen(s) + 1) * sizeof(char *));
    for (const char *p = s; *p;) {
        size_t cl = ((uint8_t)*p < 0x80) ? 1 : 2;
        sym[ns] = gdn_malloc(cl + 1);
        memcpy(sym[ns], p, cl);
        sym[ns][cl] = 0;
        ns++;
        p += cl;
    }
    for (;;) {
        long best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < ns; i++) {
            size_t la = strlen(sym[i]), lb = strlen(sym[i + 1]);
            char *key = gdn_malloc(la + lb + 2);
            snprintf(key, la + lb + 2, "%s %s", sym[i], sym[i + 1]);
            json_t *r = json_object_get(e->ranks, key);
            free(key);
            if (r && (best < 0 || json_integer_value(r) < best)) {
                best = (long)json_integer_value(r);
                at = i;
            }
        }
        if (best < 0) break;
        size_t la = strlen(sym[at]), lb = strlen(sym[at + 1]);
        sym[at] = gdn_realloc(sym[at], la + lb + 1);
        memcpy(sym[at] + la, sym[at + 1], lb + 1);
        free(sym[at + 1]);
        memmove(sym + at + 1, sym + at + 2, (ns - at - 2) * sizeof(char *));
        ns--;
    }
    for (size_t i = 0; i < ns; i++) {
        json_t *id = json_object_get(e->vocab, sym[i]);
        ids_push(e, id ? (uint32_t)json_integer_value(id) : UINT32_MAX);
        free(sym[i]);
    }
    free(sym);
    free(s);
}

static bool ref_load(ref_encoder *e, const char *path) {
    memset(e, 0, sizeof *e);
    json_error_t je;
    e->root = json_load_file(path, 0, &je);
    if (!e->root) return false;
    json_t *model = json_object_get(e->root, "model");
    e->vocab = json_object_get(model, "vocab");
    e->added = json_object_get(e->root, "added_tokens");
    json_t *merges = json_object_get(model, "merges");
    e->ranks = json_object();
    for (size_t i = 0; i < json_array_size(merges); i++) {
        json_t *m = json_array_get(merges, i);
        char key[1024];
        snprintf(key, sizeof key, "%s %s", json_string_value(json_array_get(m, 0)),
                 json_string_value(json_array_get(m, 1)));
        json_object_set_new(e->ranks, key, json_integer((json_int_t)i));
    }
    e->splitter = new_trainer(0);
    return true;
}

static void ref_free(ref_encoder *e) {
    json_decref(e->root);
    json_decref(e->ranks);
    bpe_train_free(e->splitter);
    free(e->ids);
}

// text -> ids: added tokens written in the text are their ids; the rest is pre-tokenized.
static void ref_encode(ref_encoder *e, const char *text) {
    e->n = 0;
    size_t len = strlen(text), pos = 0;
    char err[256];
    while (pos <= len) {
        size_t next = len, skip = 0;
        uint32_t sid = 0;
        for (size_t i = 0; i < json_array_size(e->added); i++) {
            json_t *a = json_array_get(e->added, i);
            const char *c = json_string_value(json_object_get(a, "content"));
            const char *f = strstr(text + pos, c);
            if (f && (size_t)(f - text) < next) {
                next = (size_t)(f - text);
                skip = strlen(c);
                sid = (uint32_t)json_integer_value(json_object_get(a, "id"));
            }
        }
        if (!bpe_train_split(e->splitter, text + pos, next - pos, ref_word, e, err, sizeof err))
            gdn_die("%s", err);
        if (next == len) break;
        ids_push(e, sid);
        pos = next + skip;
    }
}

// ---- a slow reference trainer --------------------------------------------------------------

typedef struct {
    char **w;      // distinct words
    size_t *len;
    int64_t *cnt;
    size_t n, cap;
} word_list;

static void wl_add(const char *w, size_t n, void *ctx) {
    word_list *l = ctx;
    for (size_t i = 0; i < l->n; i++)
        if (l->len[i] == n && memcmp(l->w[i], w, n) == 0) {
            l->cnt[i]++;
            return;
        }
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->w = gdn_realloc(l->w, l->cap * sizeof(char *));
        l->len = gdn_realloc(l->len, l->cap * sizeof(size_t));
        l->cnt = gdn_realloc(l->cnt, l->cap * sizeof(int64_t));
    }
    l->w[l->n] = gdn_malloc(n + 1);
    memcpy(l->w[l->n], w, n);
    l->len[l->n] = n;
    l->cnt[l->n] = 1;
    l->n++;
}

static void wl_free(word_list *wl) {
    for (size_t i = 0; i < wl->n; i++) free(wl->w[i]);
    free(wl->w);
    free(wl->len);
    free(wl->cnt);
}

// Merges of the words (one special besides) as "left right" byte-level strings, into merges[];
// *ntok_out = tokens without the special.
static size_t slow_train_words(const word_list *wlp, int vocab, char ***merges_out, size_t *ntok_out) {
    word_list wl = *wlp;
    // tokens as byte strings; words as id arrays
    size_t ntok = 256, tcap = 256 + (size_t)vocab;
    char **tok = gdn_malloc(tcap * sizeof(char *));
    size_t *tlen = gdn_malloc(tcap * sizeof(size_t));
    for (int b = 0; b < 256; b++) {
        tok[b] = gdn_malloc(1);
        tok[b][0] = (char)b;
        tlen[b] = 1;
    }
    int **ws = gdn_malloc(wl.n * sizeof(int *));
    size_t *wn = gdn_malloc(wl.n * sizeof(size_t));
    for (size_t i = 0; i < wl.n; i++) {
        ws[i] = gdn_malloc((wl.len[i] + 1) * sizeof(int));
        for (size_t k = 0; k < wl.len[i]; k++) ws[i][k] = (uint8_t)wl.w[i][k];
        wn[i] = wl.len[i];
    }
    size_t target = (size_t)vocab - 1, nm = 0, mcap = tcap;
    char **merges = gdn_malloc(mcap * sizeof(char *));
    int64_t *cnt = gdn_malloc(tcap * tcap * sizeof(int64_t));  // (a, b) at a * tcap + b
    size_t *seen = NULL, nseen = 0, seen_cap = 0;  // the nonzero entries of cnt
    while (ntok < target) {
        for (size_t i = 0; i < wl.n; i++)
            for (size_t k = 0; k + 1 < wn[i]; k++) {
                size_t p = (size_t)ws[i][k] * tcap + (size_t)ws[i][k + 1];
                if (cnt[p] == 0) {
                    if (nseen == seen_cap) {
                        seen_cap = seen_cap ? 2 * seen_cap : 4096;
                        seen = gdn_realloc(seen, seen_cap * sizeof(size_t));
                    }
                    seen[nseen++] = p;
                }
                cnt[p] += wl.cnt[i];
            }
        size_t best = 0;  // index a * tcap + b: the smaller one is the smaller (a, b)
        int64_t best_n = 0;
        for (size_t s = 0; s < nseen; s++)
            if (cnt[seen[s]] > best_n || (cnt[seen[s]] == best_n && seen[s] < best)) {
                best = seen[s];
                best_n = cnt[seen[s]];
            }
        for (size_t s = 0; s < nseen; s++) cnt[seen[s]] = 0;
        nseen = 0;
        if (best_n == 0) break;
        int a = (int)(best / tcap), b = (int)(best % tcap);
        char *cat = gdn_malloc(tlen[a] + tlen[b] + 1);
        memcpy(cat, tok[a], tlen[a]);
        memcpy(cat + tlen[a], tok[b], tlen[b]);
        int c = -1;
        for (size_t t = 0; t < ntok; t++)
            if (tlen[t] == tlen[a] + tlen[b] && memcmp(tok[t], cat, tlen[t]) == 0) c = (int)t;
        if (c < 0) {
            c = (int)ntok;
            tok[ntok] = cat;
            tlen[ntok++] = tlen[a] + tlen[b];
        } else {
            free(cat);
        }
        char *sa = gdn_malloc(2 * tlen[a] + 1), *sb = gdn_malloc(2 * tlen[b] + 1);
        byte_level(tok[a], tlen[a], sa);
        byte_level(tok[b], tlen[b], sb);
        if (nm == mcap) merges = gdn_realloc(merges, (mcap *= 2) * sizeof(char *));
        merges[nm] = gdn_malloc(strlen(sa) + strlen(sb) + 2);
        sprintf(merges[nm++], "%s %s", sa, sb);
        free(sa);
        free(sb);
        for (size_t i = 0; i < wl.n; i++) {
            size_t out = 0;
            for (size_t k = 0; k < wn[i];) {
                if (k + 1 < wn[i] && ws[i][k] == a && ws[i][k + 1] == b) {
                    ws[i][out++] = c;
                    k += 2;
                } else {
                    ws[i][out++] = ws[i][k++];
                }
            }
            wn[i] = out;
        }
    }
    for (size_t i = 0; i < wl.n; i++) free(ws[i]);
    for (size_t t = 0; t < ntok; t++) free(tok[t]);
    free(ws);
    free(wn);
    free(tok);
    free(tlen);
    free(cnt);
    free(seen);
    *merges_out = merges;
    *ntok_out = ntok;
    return nm;
}

// The same for a text, specials split out.
static size_t slow_train(const char *text, int vocab, char ***merges_out) {
    bpe_trainer *sp = new_trainer(0);
    word_list wl = {0};
    char err[256];
    const char *sep = SPECIALS[0];
    for (const char *p = text;;) {
        const char *f = strstr(p, sep);
        size_t n = f ? (size_t)(f - p) : strlen(p);
        if (!bpe_train_split(sp, p, n, wl_add, &wl, err, sizeof err)) gdn_die("%s", err);
        if (!f) break;
        p = f + strlen(sep);
    }
    bpe_train_free(sp);
    size_t ntok;
    size_t nm = slow_train_words(&wl, vocab, merges_out, &ntok);
    wl_free(&wl);
    return nm;
}

// ---- the checks ----------------------------------------------------------------------------

static void merge_key(json_t *m, char *key, size_t n) {
    snprintf(key, n, "%s %s", json_string_value(json_array_get(m, 0)),
             json_string_value(json_array_get(m, 1)));
}

static void check_structure(const char *path, int vocab) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    check(root != NULL, "V=%d: tokenizer.json parses (%s)", vocab, root ? "ok" : je.text);
    if (!root) return;
    json_t *model = json_object_get(root, "model"), *pre = json_object_get(root, "pre_tokenizer");
    json_t *dec = json_object_get(root, "decoder"), *added = json_object_get(root, "added_tokens");
    json_t *v = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    check(model && !strcmp(json_string_value(json_object_get(model, "type")), "BPE") &&
              json_is_false(json_object_get(model, "ignore_merges")) &&
              json_is_false(json_object_get(model, "byte_fallback")),
          "V=%d: model BPE, ignore_merges and byte_fallback false", vocab);
    check(pre && !strcmp(json_string_value(json_object_get(pre, "type")), "ByteLevel") &&
              json_is_false(json_object_get(pre, "add_prefix_space")) &&
              json_is_true(json_object_get(pre, "use_regex")) &&
              dec && !strcmp(json_string_value(json_object_get(dec, "type")), "ByteLevel"),
          "V=%d: ByteLevel pre-tokenizer (no prefix space, regex) and decoder", vocab);
    json_t *a0 = json_array_get(added, 0);
    check(json_array_size(added) == 1 && json_integer_value(json_object_get(a0, "id")) == vocab - 1 &&
              !strcmp(json_string_value(json_object_get(a0, "content")), SPECIALS[0]) &&
              json_is_true(json_object_get(a0, "special")) &&
              json_integer_value(json_object_get(v, SPECIALS[0])) == vocab - 1,
          "V=%d: <|endoftext|> is added token and vocab entry %d, special", vocab, vocab - 1);
    bool *seen = gdn_malloc((size_t)vocab * sizeof(bool));
    bool ids_ok = json_object_size(v) == (size_t)vocab;
    const char *k;
    json_t *val;
    json_object_foreach(v, k, val) {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= vocab || seen[id]) ids_ok = false;
        else seen[id] = true;
    }
    free(seen);
    check(ids_ok, "V=%d: vocab holds ids 0..%d once each", vocab, vocab - 1);
    bool m_ok = json_array_size(merges) > 0;
    for (size_t i = 0; i < json_array_size(merges); i++) {
        json_t *m = json_array_get(merges, i);
        const char *l = json_string_value(json_array_get(m, 0)), *r = json_string_value(json_array_get(m, 1));
        char cat[1024];
        if (!l || !r || json_array_size(m) != 2) { m_ok = false; break; }
        snprintf(cat, sizeof cat, "%s%s", l, r);
        if (!json_object_get(v, l) || !json_object_get(v, r) || !json_object_get(v, cat)) m_ok = false;
    }
    check(m_ok, "V=%d: %zu merges, each [left, right] with left, right, left+right in vocab", vocab,
          json_array_size(merges));
    json_decref(root);
}

static void fixture_checks(const char *fixdir, int vocab, const char *corpus, size_t corpus_n) {
    printf("\n== fixture corpus, vocab %d\n", vocab);
    char out[700], exp_path[700], err[256];
    snprintf(out, sizeof out, "%s/tok%d.json", dir, vocab);
    snprintf(exp_path, sizeof exp_path, "%s/expected_%d.json", fixdir, vocab);
    double t0 = gdn_now();
    bool ok = train_text(corpus, corpus_n, vocab, out, err, sizeof err);
    check(ok, "trains and writes (%.2f s) %s", gdn_now() - t0, ok ? "" : err);
    if (!ok) return;
    check_structure(out, vocab);

    json_error_t je;
    json_t *exp = json_load_file(exp_path, 0, &je), *got = json_load_file(out, 0, &je);
    check(exp != NULL, "expected file %s parses", exp_path);
    if (!exp || !got) return;
    json_t *em = json_object_get(exp, "merges"), *gm = json_object_get(json_object_get(got, "model"), "merges");
    bool same = json_array_size(em) == json_array_size(gm);
    size_t first_diff = 0;
    for (size_t i = 0; same && i < json_array_size(em); i++) {
        char a[1024], b[1024];
        merge_key(json_array_get(em, i), a, sizeof a);
        merge_key(json_array_get(gm, i), b, sizeof b);
        if (strcmp(a, b)) { same = false; first_diff = i; }
    }
    if (same)
        check(true, "merges equal the expected (%zu)", json_array_size(em));
    else
        check(false, "merges equal the expected (%zu; first difference at %zu)", json_array_size(em), first_diff);

    char **slow;
    size_t ns = slow_train(corpus, vocab, &slow);
    bool slow_same = ns == json_array_size(gm);
    for (size_t i = 0; i < ns; i++) {
        char b[1024];
        if (i < json_array_size(gm)) merge_key(json_array_get(gm, i), b, sizeof b);
        if (slow_same && strcmp(slow[i], b)) slow_same = false;
        free(slow[i]);
    }
    free(slow);
    check(slow_same, "merges equal the slow reference trainer's (%zu)", ns);

    ref_encoder e;
    if (!ref_load(&e, out)) gdn_die("cannot load %s", out);
    json_t *texts = json_object_get(exp, "texts"), *ids = json_object_get(exp, "ids");
    for (size_t t = 0; t < json_array_size(texts); t++) {
        json_t *want = json_array_get(ids, t);
        ref_encode(&e, json_string_value(json_array_get(texts, t)));
        bool eq = e.n == json_array_size(want);
        for (size_t i = 0; eq && i < e.n; i++) eq = e.ids[i] == (uint32_t)json_integer_value(json_array_get(want, i));
        check(eq, "text %zu: plain encoder on our json = tokenizers ids (%zu ids)", t, json_array_size(want));
    }
    ref_free(&e);

    // the product's encoder (tokenizer.h) on the trained file: the same ids as `tokenizers`
    char terr[1024];
    gdn_tokenizer *tok = tok_load(out, terr, sizeof terr);
    check(tok != NULL, "tok_load reads the trained file %s", tok ? "" : terr);
    if (tok) {
        check(tok_vocab_size(tok) == vocab && tok_eot(tok) == vocab - 1,
              "tok_load: vocab %d, eot <|endoftext|> = %d (want %d, %d)", tok_vocab_size(tok),
              tok_eot(tok), vocab, vocab - 1);
        tok_ids v = {0};
        for (size_t t = 0; t < json_array_size(texts); t++) {
            json_t *want = json_array_get(ids, t);
            const char *text = json_string_value(json_array_get(texts, t));
            v.n = 0;
            bool eq = tok_encode(tok, text, strlen(text), true, &v, terr, sizeof terr) &&
                      v.n == json_array_size(want);
            for (size_t i = 0; eq && i < v.n; i++)
                eq = v.ids[i] == (uint32_t)json_integer_value(json_array_get(want, i));
            check(eq, "text %zu: tok_encode on our json = tokenizers ids (%zu ids)", t,
                  json_array_size(want));
        }
        tok_ids_free(&v);
        tok_free(tok);
    }
    json_decref(exp);
    json_decref(got);
}

// Random words over a 3-letter alphabet with random counts, as pre-split words (long runs of
// few letters: many ties, overlapping pairs like "aaa"): the merges and the vocabulary size equal
// the slow trainer's.
static void random_word_checks(void) {
    printf("\n== random words: fast = slow reference\n");
    rng_t r;
    rng_init(&r, 11, 0);
    int agree = 0, trials = 60;
    char out[700], err[256];
    snprintf(out, sizeof out, "%s/random.json", dir);
    for (int t = 0; t < trials; t++) {
        word_list wl = {0};
        int nw = 5 + (int)rng_below(&r, 40);
        bpe_trainer *tr = new_trainer(0);
        for (int i = 0; i < nw; i++) {
            char w[24];
            int len = 1 + (int)rng_below(&r, 16);
            for (int k = 0; k < len; k++) w[k] = (char)('a' + rng_below(&r, 3));
            uint64_t c = 1 + rng_below(&r, 9);
            for (uint64_t k = 0; k < c; k++) wl_add(w, (size_t)len, &wl);
            bpe_train_add_word(tr, w, (size_t)len, c);
        }
        int vocab = 257 + 5 + (int)rng_below(&r, 60);
        bool ok = bpe_train_finish(tr, vocab, out, err, sizeof err);
        bpe_train_stats st;
        bpe_train_get_stats(tr, &st);
        bpe_train_free(tr);
        char **slow;
        size_t ntok, ns = slow_train_words(&wl, vocab, &slow, &ntok);
        json_error_t je;
        json_t *root = ok ? json_load_file(out, 0, &je) : NULL;
        json_t *gm = json_object_get(json_object_get(root, "model"), "merges");
        bool same = root && ns == json_array_size(gm) && (size_t)st.vocab_size == ntok + 1;
        for (size_t i = 0; i < ns; i++) {
            char b[1024];
            if (same) {
                merge_key(json_array_get(gm, i), b, sizeof b);
                same = !strcmp(slow[i], b);
            }
            free(slow[i]);
        }
        free(slow);
        json_decref(root);
        wl_free(&wl);
        agree += same;
    }
    check(agree == trials, "%d/%d random word sets: same merges and vocab size", agree, trials);
}

typedef struct {
    bpe_trainer *tr;
    char **docs;
    size_t *lens;
    size_t n, first, step;
} add_job;

static void *add_docs(void *p) {
    add_job *j = p;
    char err[256];
    for (size_t i = j->first; i < j->n; i += j->step)
        if (!bpe_train_add(j->tr, j->docs[i], j->lens[i], err, sizeof err)) gdn_die("%s", err);
    return NULL;
}

static void add_word_cb(const char *w, size_t n, void *ctx) { bpe_train_add_word(ctx, w, n, 1); }

static void determinism_checks(const char *corpus, size_t n) {
    printf("\n== determinism\n");
    char a[700], b[700], c[700], d[700], err[256];
    snprintf(a, sizeof a, "%s/det_a.json", dir);
    snprintf(b, sizeof b, "%s/det_b.json", dir);
    snprintf(c, sizeof c, "%s/det_c.json", dir);
    snprintf(d, sizeof d, "%s/det_d.json", dir);
    bool ok = train_text(corpus, n, 600, a, err, sizeof err) && train_text(corpus, n, 600, b, err, sizeof err);
    check(ok && same_file(a, b), "the same input twice: identical files");
    // documents = lines, added by 1 thread then by 2 threads (interleaved)
    size_t nd = 0;
    char **docs = gdn_malloc((n + 1) * sizeof(char *));
    size_t *lens = gdn_malloc((n + 1) * sizeof(size_t));
    for (size_t s = 0; s < n;) {
        const char *nl = memchr(corpus + s, '\n', n - s);
        size_t e = nl ? (size_t)(nl - corpus) + 1 : n;
        docs[nd] = (char *)corpus + s;
        lens[nd++] = e - s;
        s = e;
    }
    for (int threads = 1; threads <= 2; threads++) {
        bpe_trainer *tr = new_trainer(0);
        add_job jobs[2];
        pthread_t th[2];
        for (int t = 0; t < threads; t++) {
            jobs[t] = (add_job){tr, docs, lens, nd, (size_t)t, (size_t)threads};
            if (pthread_create(&th[t], NULL, add_docs, &jobs[t]) != 0) gdn_die("pthread_create");
        }
        for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
        if (!bpe_train_finish(tr, 600, threads == 1 ? c : d, err, sizeof err)) gdn_die("%s", err);
        bpe_train_free(tr);
    }
    check(same_file(c, d), "%zu line documents by 1 thread and by 2 threads: identical files", nd);
    // the same lines as pre-split words with counts
    bpe_trainer *tr = new_trainer(0);
    for (size_t i = 0; i < nd; i++) {
        // split at the special as bpe_train_add does
        const char *s = docs[i], *end = docs[i] + lens[i];
        while (s < end) {
            const char *f = strstr(s, SPECIALS[0]);
            const char *stop = f && f < end ? f : end;
            if (!bpe_train_split(tr, s, (size_t)(stop - s), add_word_cb, tr, err, sizeof err)) gdn_die("%s", err);
            s = stop == end ? end : stop + strlen(SPECIALS[0]);
        }
    }
    ok = bpe_train_finish(tr, 600, a, err, sizeof err);
    bpe_train_free(tr);
    check(ok && same_file(a, c), "the same words through bpe_train_add_word: identical file");
    free(docs);
    free(lens);
}

static void memory_cap_checks(void) {
    printf("\n== memory cap\n");
    const size_t cap = BPE_TRAIN_MIN_CAP;
    bpe_trainer *tr = new_trainer(cap);
    rng_t r;
    rng_init(&r, 7, 0);
    size_t doc_n = 65536, total = 0;
    char *doc = gdn_malloc(doc_n + 64), err[256];
    while (total < 20 * cap + 1) {
        size_t at = 0, k = 0;
        while (at < doc_n) {
            if (k++ % 10 == 0) {
                memcpy(doc + at, " common", 7);  // a word one in ten: must survive pruning
                at += 7;
                continue;
            }
            doc[at++] = ' ';
            int len = 3 + (int)rng_below(&r, 10);
            for (int i = 0; i < len; i++) doc[at++] = (char)('a' + rng_below(&r, 26));
        }
        if (!bpe_train_add(tr, doc, at, err, sizeof err)) gdn_die("%s", err);
        total += at;
    }
    bpe_train_stats st;
    bpe_train_get_stats(tr, &st);
    check(st.table_peak <= cap && st.prunes > 0,
          "%.1f MB of random words, cap %.2f MB: table peak %.3f MB, %llu prunes", (double)total / 1e6,
          (double)cap / 1e6, (double)st.table_peak / 1e6, (unsigned long long)st.prunes);
    check(st.pruned_words > 0 && st.prune_max_threshold >= 1 && st.distinct > 0,
          "pruned %llu words (%llu occurrences, threshold up to %llu), %llu distinct kept",
          (unsigned long long)st.pruned_words, (unsigned long long)st.pruned_count,
          (unsigned long long)st.prune_max_threshold, (unsigned long long)st.distinct);
    char out[700];
    snprintf(out, sizeof out, "%s/capped.json", dir);
    bool ok = bpe_train_finish(tr, 400, out, err, sizeof err);
    bpe_train_free(tr);
    ref_encoder e;
    bool learned = ok && ref_load(&e, out);
    if (learned) {
        learned = json_object_get(e.vocab, "\xc4\xa0" "common") != NULL;  // "Ġcommon"
        ref_free(&e);
    }
    check(ok && learned, "the frequent word survives pruning: \"Ġcommon\" is a token");
    free(doc);
}

static bool dir_has_tmp(const char *d) {
    DIR *dd = opendir(d);
    bool found = false;
    struct dirent *de;
    while (dd && (de = readdir(dd)))
        if (strstr(de->d_name, ".tmp-")) found = true;
    if (dd) closedir(dd);
    return found;
}

static void bad_input_checks(void) {
    printf("\n== bad input\n");
    char err[256] = "", out[700];
    snprintf(out, sizeof out, "%s/bad.json", dir);
    bpe_trainer *tr = new_trainer(0);
    bool ok = bpe_train_add(tr, "hello world", 11, err, sizeof err);
    ok = ok && bpe_train_finish(tr, 256, out, err, sizeof err);
    check(!ok && strstr(err, "smaller than the 256 byte tokens + 1 special"), "vocab 256 + 1 special: %s", err);
    err[0] = 0;
    ok = bpe_train_finish(tr, 300, "/nonexistent-gdn-dir/tok.json", err, sizeof err);
    check(!ok && strstr(err, "/nonexistent-gdn-dir/tok.json"), "missing directory: %s", err);
    ok = bpe_train_add(tr, "more", 4, err, sizeof err);
    check(!ok && strstr(err, "after finish"), "add after finish: %s", err);
    bpe_train_free(tr);
    tr = new_trainer(0);
    bpe_train_add(tr, "hello world", 11, err, sizeof err);
    char sub[700];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK_SYS(mkdir(sub, 0755));
    err[0] = 0;
    ok = bpe_train_finish(tr, 300, sub, err, sizeof err);  // the output path is a directory
    check(!ok && strstr(err, "rename") && !dir_has_tmp(dir), "output path is a directory: %s; no temporary left", err);
    bpe_train_free(tr);
    bpe_train_opts o = {.mem_cap = 1000};
    check(bpe_train_new(&o, err, sizeof err) == NULL && strstr(err, "below the minimum"), "cap too small: %s", err);
    const char *bad[] = {"<s>", ""};
    o = (bpe_train_opts){.specials = bad, .n_specials = 2};
    check(bpe_train_new(&o, err, sizeof err) == NULL && strstr(err, "empty"), "empty special: %s", err);
    const char *twice[] = {"<s>", "<s>"};
    o = (bpe_train_opts){.specials = twice, .n_specials = 2};
    check(bpe_train_new(&o, err, sizeof err) == NULL && strstr(err, "twice"), "duplicate special: %s", err);
    // an empty corpus: no merges, the bytes and the special
    tr = new_trainer(0);
    ok = bpe_train_finish(tr, 1000, out, err, sizeof err);
    bpe_train_stats st;
    bpe_train_get_stats(tr, &st);
    bpe_train_free(tr);
    check(ok && st.merges == 0 && st.vocab_size == 257, "empty corpus: 0 merges, 257 tokens");
}

typedef struct {
    char words[16][16];
    int n;
} split_out;
static void split_cb(const char *w, size_t n, void *ctx) {
    split_out *s = ctx;
    if (s->n < 16 && n < 16) {
        memcpy(s->words[s->n], w, n);
        s->words[s->n][n] = 0;
    }
    s->n++;
}

static void split_checks(void) {
    printf("\n== pre-tokenizer\n");
    bpe_trainer *tr = new_trainer(0);
    char err[256];
    split_out s = {0};
    const char *t1 = "it's ab\xff\xfe" "cd  12x\n\n";
    bpe_train_split(tr, t1, strlen(t1), split_cb, &s, err, sizeof err);
    const char *want[] = {"it", "'s", " ab", "\xff\xfe", "cd", " ", " 12", "x", "\n\n"};
    bool ok = s.n == 9;
    for (int i = 0; ok && i < 9; i++) ok = !strcmp(s.words[i], want[i]);
    check(ok, "\"it's ab<ff fe>cd  12x\\n\\n\" -> it|'s| ab|<ff fe>|cd| | 12|x|\\n\\n (%d words)", s.n);
    bpe_train_free(tr);
}

int main(int argc, char **argv) {
    byte_table();
    if (argc == 5 && !strcmp(argv[1], "--train")) {
        size_t n;
        char *text = read_all(argv[2], &n), err[256];
        bpe_train_opts o = {.specials = SPECIALS, .n_specials = 1, .progress = true};
        bpe_trainer *tr = bpe_train_new(&o, err, sizeof err);
        double t0 = gdn_now();
        bool ok = tr && bpe_train_add(tr, text, n, err, sizeof err);
        double t1 = gdn_now();
        ok = ok && bpe_train_finish(tr, atoi(argv[3]), argv[4], err, sizeof err);
        if (ok) {
            bpe_train_stats st;
            bpe_train_get_stats(tr, &st);
            fprintf(stderr, "%.1f MB: counted %llu words in %.2f s (%.1f MB/s), table peak %.1f MB; "
                    "%d merges in %.2f s; total %.2f s\n", (double)n / 1e6,
                    (unsigned long long)st.words, t1 - t0, (double)n / 1e6 / (t1 - t0),
                    (double)st.table_peak / 1e6, st.merges, st.merge_seconds, gdn_now() - t0);
        } else {
            fprintf(stderr, "error: %s\n", err);
        }
        bpe_train_free(tr);
        free(text);
        return ok ? 0 : 1;
    }
    char fixdir[600];
    if (argc > 1) {
        snprintf(fixdir, sizeof fixdir, "%s", argv[1]);
    } else {
        const char *src = getenv("GDN_SOURCE_DIR");
        if (!src) {
            printf("SKIPPED: no fixture directory (give it, or run through ctest)\n");
            return GC_SKIP_RC;
        }
        snprintf(fixdir, sizeof fixdir, "%s/tests/fixtures/bpe_train", src);
    }
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gdn-test-bpe-XXXXXX", base && base[0] ? base : "/tmp");
    CHECK_PTR(mkdtemp(dir));
    printf("test_bpe_train: files in %s, fixtures in %s\n", dir, fixdir);
    char cpath[700];
    snprintf(cpath, sizeof cpath, "%s/corpus.txt", fixdir);
    size_t n;
    char *corpus = read_all(cpath, &n);

    split_checks();
    fixture_checks(fixdir, 300, corpus, n);
    fixture_checks(fixdir, 1000, corpus, n);
    random_word_checks();
    determinism_checks(corpus, n);
    memory_cap_checks();
    bad_input_checks();
    free(corpus);
    if (gc_failures == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    }
    return gc_finish("test_bpe_train");
}
