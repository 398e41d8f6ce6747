// test_tokenizer.c — the tokenizers of src/data/tokenizer.h against committed fixtures.
//
// Parity: tests/fixtures/tokenizers/expected.json holds, for two byte-level BPEs trained with
// the `tokenizers` package (GPT-2 regex; Llama-3 Split regex + ignore_merges), one with
// add_prefix_space, and two SentencePiece models, the ids the reference gives each test text
// (emoji, CJK, runs of spaces and newlines, digits, special tokens written in the text), made
// once by make_expected.py beside it. Encode must give exactly those ids, decode the reference's
// text. Then: vocab.json + merges.txt load as the same tokenizer; a tokenizer rebuilt from its
// blob encodes the same; decode(encode(x)) == x on random byte strings, invalid UTF-8 included
// (bytes, bpe) and on random valid text (spm, byte fallback model); encoding from two threads at
// once gives the single-thread ids; bad input (unparsable or unsupported tokenizer.json,
// missing file, id >= vocab) gives false and a message naming the file and the problem.
// Normalizers (tests/fixtures/tokenizers/normalizers.json, from make_expected.py --normalizers):
// parity as above for four BPEs with normalizers (Qwen 2's NFC; Sequence[NFKC, Lowercase,
// Replace]; NFKD, Strip, Replace regexes, Prepend; Strip right, NFD, Prepend) and "normalized"
// added tokens; decode(encode(x)) == the package's normalize_str(x) for normalizers whose encode
// the package cannot always run (Replace regexes that match the empty string); every code point
// through NFC, NFD, NFKC, NFKD and Lowercase against a digest of the package's results, but for
// the listed code points where libutf8proc's Unicode data differ; invalid UTF-8 (each valid run
// normalized on its own, invalid bytes kept); unsupported normalizers refused naming the type.
// And a Split pre-tokenizer with a String (literal) pattern.
// Post-processors (tests/fixtures/tokenizers/post_processors.json, from make_expected.py
// --post-processors): tok_encode_template gives the package's encode(text,
// add_special_tokens=True) and tok_encode its add_special_tokens=False, for Llama 3's
// TemplateProcessing (<|begin_of_text|>) alone and in Sequence[ByteLevel, TemplateProcessing],
// BertProcessing, RobertaProcessing, and a Sequence whose template leaves three encodings for
// Roberta; no template for files without a post_processor, bytes and SentencePiece; unsupported
// post-processors refused naming the JSON path and the type.
// Fixtures: argv[1], else tests/fixtures/tokenizers beside this file.
#define CHECK_WIDTH 90  // the width of the described column
#include "check.h"
#include "../src/data/tokenizer.h"
#include <jansson.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

static char fixtures[1024];
static char tmpdir[512];

static gdn_tokenizer *load_fixture(const char *name) {
    char path[1200], err[1024];
    snprintf(path, sizeof path, "%s/%s", fixtures, name);
    gdn_tokenizer *t = tok_load(path, err, sizeof err);
    if (!t) printf("    %s\n", err);
    return t;
}

static bool encode(const gdn_tokenizer *t, const char *s, size_t n, bool specials, tok_ids *v) {
    char err[1024];
    v->n = 0;
    bool ok = tok_encode(t, s, n, specials, v, err, sizeof err);
    if (!ok) printf("    encode: %s\n", err);
    return ok;
}

static bool encode_template(const gdn_tokenizer *t, const char *s, size_t n, bool specials,
                            tok_ids *v) {
    char err[1024];
    v->n = 0;
    bool ok = tok_encode_template(t, s, n, specials, v, err, sizeof err);
    if (!ok) printf("    encode_template: %s\n", err);
    return ok;
}

static bool ids_equal_json(const tok_ids *v, json_t *ids, size_t *at) {
    size_t n = json_array_size(ids);
    for (size_t i = 0; i < n && i < v->n; i++)
        if (v->ids[i] != (uint32_t)json_integer_value(json_array_get(ids, i))) {
            *at = i;
            return false;
        }
    *at = n < v->n ? n : v->n;
    return n == v->n;
}

static void show_text(const char *s, size_t n) {
    printf("    text \"");
    for (size_t i = 0; i < n && i < 60; i++)
        printf(s[i] == '\n' ? "\\n" : (unsigned char)s[i] < 32 ? "\\x%02x" : "%c",
               (unsigned char)s[i]);
    printf("%s\"\n", n > 60 ? "..." : "");
}

// Every case of one tokenizer of expected.json with tokenizer t (loaded from `label`).
static void parity(gdn_tokenizer *t, json_t *spec, const char *label) {
    json_t *cases = json_object_get(spec, "cases");
    bool is_bpe = !strcmp(json_string_value(json_object_get(spec, "kind")), "bpe");
    bool round_trip = is_bpe || json_is_true(json_object_get(spec, "round_trip"));
    size_t n = json_array_size(cases), ids_ok = 0, dec_ok = 0, dec_n = 0;
    tok_ids v = {0};
    char err[1024];
    for (size_t c = 0; c < n; c++) {
        json_t *cs = json_array_get(cases, c);
        json_t *jt = json_object_get(cs, "text"), *jids = json_object_get(cs, "ids");
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt), at = 0;
        bool specials = json_is_true(json_object_get(cs, "specials"));
        bool tpl = json_is_true(json_object_get(cs, "add_special_tokens"));
        bool enc_ok = tpl ? encode_template(t, text, len, specials, &v)
                          : encode(t, text, len, specials, &v);
        if (enc_ok && ids_equal_json(&v, jids, &at)) {
            ids_ok++;
        } else {
            printf("    case %zu (specials %d, template %d): ids differ at %zu (ours %zu ids, "
                   "expected %zu)\n", c, specials, tpl, at, v.n, json_array_size(jids));
            show_text(text, len);
        }
        if (!round_trip) continue;
        json_t *want = is_bpe ? json_object_get(cs, "decoded") : jt;
        size_t nid = json_array_size(jids);
        uint32_t *ids = gdn_malloc((nid + 1) * sizeof *ids);
        for (size_t i = 0; i < nid; i++) ids[i] = (uint32_t)json_integer_value(json_array_get(jids, i));
        char *back = NULL;
        size_t blen = 0;
        dec_n++;
        if (tok_decode(t, ids, nid, &back, &blen, err, sizeof err) &&
            blen == json_string_length(want) && !memcmp(back, json_string_value(want), blen)) {
            dec_ok++;
        } else {
            printf("    case %zu: decode differs%s%s\n", c, back ? "" : ": ", back ? "" : err);
            show_text(text, len);
        }
        free(back);
        free(ids);
    }
    check(ids_ok == n, "%s: encode ids == reference on %zu/%zu cases", label, ids_ok, n);
    if (round_trip)
        check(dec_ok == dec_n, "%s: decode == reference text on %zu/%zu cases", label, dec_ok,
              dec_n);
    tok_ids_free(&v);
}

// ---- round trips on random input ----------------------------------------------------------

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

// A random string of up to max_len bytes: any bytes (when `bytes`), or valid UTF-8 from ASCII,
// whitespace, Latin, CJK, emoji and the specials' text.
static size_t random_text(rng_t *r, char *s, size_t max_len, bool bytes) {
    static const char *frag[] = {" ", "  ", "\n", "\n\n", "\r\n", "\t", "<|endoftext|>",
                                 "</s>", "'s", "123", "the", " the"};
    size_t n = 0, target = (size_t)rng_below(r, max_len);
    while (n + 16 < target) {
        int kind = (int)rng_below(r, bytes ? 6 : 5);
        if (kind == 0) {
            const char *f = frag[rng_below(r, sizeof frag / sizeof *frag)];
            memcpy(s + n, f, strlen(f));
            n += strlen(f);
        } else if (kind == 1 || kind == 2) {
            s[n++] = (char)(0x20 + rng_below(r, 0x5F));
        } else if (kind == 3) {
            static const uint32_t lo[] = {0xA0, 0x3B1, 0x4E00, 0x3041, 0x1F600, 0x2000};
            static const uint32_t span[] = {0x180, 0x30, 0x500, 0x50, 0x40, 0x30};
            int k = (int)rng_below(r, 6);
            n += put_utf8(lo[k] + (uint32_t)rng_below(r, span[k]), s + n);
        } else if (kind == 4) {
            s[n++] = (char)('a' + rng_below(r, 3));
        } else {
            s[n++] = (char)rng_below(r, 256);
        }
    }
    return n;
}

static void round_trips(const gdn_tokenizer *t, const char *label, bool bytes, int count) {
    rng_t r;
    rng_init(&r, 30, (uint64_t)strlen(label));
    char *s = gdn_malloc(4096), err[1024];
    tok_ids v = {0};
    int ok = 0;
    for (int i = 0; i < count; i++) {
        size_t n = random_text(&r, s, i % 10 == 0 ? 4000 : 300, bytes);
        bool specials = i % 2;
        char *back = NULL;
        size_t blen = 0;
        if (encode(t, s, n, specials, &v) &&
            tok_decode(t, v.ids, v.n, &back, &blen, err, sizeof err) && blen == n &&
            !memcmp(back, s, n))
            ok++;
        else if (ok == i)
            show_text(s, n);
        free(back);
    }
    check(ok == count, "%s: decode(encode(x)) == x on %d random %s", label, count,
          bytes ? "byte strings (invalid UTF-8 included)" : "valid UTF-8 strings");
    free(s);
    tok_ids_free(&v);
}

// Long pieces (the heap merge path, the regex on long runs): 200 kB of spaces, of one word,
// of newlines and of digits, each one string.
static void long_runs(const gdn_tokenizer *t, const char *label) {
    static const char fill[4][3] = {"  ", "ab", "\n\n", "12"};
    size_t n = 200000;
    char *s = gdn_malloc(n + 1), err[1024];
    tok_ids v = {0};
    int ok = 0;
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < n; i++) s[i] = fill[k][i % 2];
        char *back = NULL;
        size_t blen = 0;
        if (encode(t, s, n, true, &v) && v.n > 0 &&
            tok_decode(t, v.ids, v.n, &back, &blen, err, sizeof err) && blen == n &&
            !memcmp(back, s, n))
            ok++;
        free(back);
    }
    check(ok == 4, "%s: 200 kB runs of spaces, one word, newlines, digits round trip", label);
    free(s);
    tok_ids_free(&v);
}

// ---- threads ------------------------------------------------------------------------------

typedef struct {
    const gdn_tokenizer *t;
    const char *text;
    size_t len;
    tok_ids out;
    bool ok;
} enc_job;

static void *enc_thread(void *p) {
    enc_job *j = p;
    char err[256];
    j->ok = true;
    for (int rep = 0; rep < 3 && j->ok; rep++) {
        j->out.n = 0;
        j->ok = tok_encode(j->t, j->text, j->len, true, &j->out, err, sizeof err);
    }
    return NULL;
}

static void threads(const gdn_tokenizer *t, const char *label, const char *text, size_t len) {
    tok_ids one = {0};
    bool ok = encode(t, text, len, true, &one);
    enc_job j[2] = {{t, text, len, {0}, false}, {t, text, len, {0}, false}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK_SYS(-pthread_create(&th[i], NULL, enc_thread, &j[i]));
    for (int i = 0; i < 2; i++) CHECK_SYS(-pthread_join(th[i], NULL));
    for (int i = 0; i < 2; i++)
        ok = ok && j[i].ok && j[i].out.n == one.n &&
             !memcmp(j[i].out.ids, one.ids, one.n * sizeof *one.ids);
    check(ok, "%s: 2 threads encoding %zu bytes at once == one thread (%zu ids)", label, len,
          one.n);
    tok_ids_free(&one);
    tok_ids_free(&j[0].out);
    tok_ids_free(&j[1].out);
}

// ---- bad input ----------------------------------------------------------------------------

static void write_tmp(const char *name, const char *text, char *path, size_t plen) {
    snprintf(path, plen, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "wb");
    CHECK_PTR(fp);
    fputs(text, fp);
    CHECK_SYS(fclose(fp) == 0 ? 0 : -1);
}

// tok_load of a file with `text` must fail with a message holding the path and `want`.
static void bad_file(const char *name, const char *text, const char *want, const char *what) {
    char path[700], err[1024];
    write_tmp(name, text, path, sizeof path);
    gdn_tokenizer *t = tok_load(path, err, sizeof err);
    check(!t && strstr(err, path) && strstr(err, want), "refused: %s", what);
    printf("    message: %s\n", err);
    tok_free(t);
}

// s with `from` replaced by `to` (first occurrence); s is freed.
static char *replace_once(char *s, const char *from, const char *to) {
    char *at = strstr(s, from);
    if (!at) gdn_die("fixture has no \"%s\"", from);
    size_t n = strlen(s), k = (size_t)(at - s);
    char *out = gdn_malloc(n + strlen(to) + 1);
    memcpy(out, s, k);
    strcpy(out + k, to);
    strcat(out, at + strlen(from));
    free(s);
    return out;
}

// The fixture `name` with `from` replaced by `to` (first occurrence).
static char *edited_file(const char *name, const char *from, const char *to) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", fixtures, name);
    FILE *fp = fopen(path, "rb");
    CHECK_PTR(fp);
    char *s = gdn_malloc(1 << 20);
    size_t n = fread(s, 1, (1 << 20) - 1, fp);
    CHECK_SYS(fclose(fp) == 0 ? 0 : -1);
    s[n] = 0;
    return replace_once(s, from, to);
}

static char *edited_fixture(const char *from, const char *to) {
    return edited_file("gpt2_bpe.json", from, to);
}

// gpt2_bpe.json with the normalizer `norm` (a JSON object), loaded from its text.
static gdn_tokenizer *gpt2_with_normalizer(json_t *norm, const char *label) {
    char *nj = json_dumps(norm, JSON_COMPACT | JSON_PRESERVE_ORDER), err[1024], to[4096];
    snprintf(to, sizeof to, "\"normalizer\": %s", nj);
    char *text = edited_fixture("\"normalizer\": null", to);
    gdn_tokenizer *t = tok_load_blob("bpe", text, strlen(text), label, err, sizeof err);
    if (!t) printf("    %s\n", err);
    free(text);
    free(nj);
    return t;
}

// ---- normalizers --------------------------------------------------------------------------

// decode(encode(x)) of a tokenizer without added tokens to split out is x normalized (byte-level
// BPE is lossless): *out (malloc'd) and *n. False when encode or decode fails.
static bool normalized_by(const gdn_tokenizer *t, const char *s, size_t n, char **out,
                          size_t *outn) {
    tok_ids v = {0};
    char err[1024];
    *out = NULL;
    bool ok = encode(t, s, n, false, &v) && tok_decode(t, v.ids, v.n, out, outn, err, sizeof err);
    tok_ids_free(&v);
    return ok;
}

// Each normalizer of normalizers.json's "normalized_texts" with gpt2_bpe.json: decode(encode(x))
// == the package's normalize_str(x) on every text.
static void normalized_texts(json_t *list) {
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i), *cases = json_object_get(e, "cases");
        char *label = json_dumps(json_object_get(e, "normalizer"), JSON_COMPACT);
        gdn_tokenizer *t = gpt2_with_normalizer(json_object_get(e, "normalizer"), label);
        size_t ok = 0, n = json_array_size(cases);
        for (size_t c = 0; t && c < n; c++) {
            json_t *x = json_array_get(json_array_get(cases, c), 0);
            json_t *want = json_array_get(json_array_get(cases, c), 1);
            char *got;
            size_t gn;
            if (normalized_by(t, json_string_value(x), json_string_length(x), &got, &gn) &&
                gn == json_string_length(want) && !memcmp(got, json_string_value(want), gn))
                ok++;
            else if (ok + 3 > c)
                show_text(json_string_value(x), json_string_length(x));
            free(got);
        }
        check(t && ok == n, "%.60s: == normalize_str on %zu/%zu texts", label, ok, n);
        tok_free(t);
        free(label);
    }
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

// One entry of normalizers.json's "code_points": every code point but the surrogates and "\n",
// each followed by "\n", through gpt2_bpe.json with the normalizer; each line must be what the
// package makes of that code point alone: the count and FNV-1a digest of "%X:<line>\n" over the
// code points it changes, leaving out the listed ones where utf8proc's Unicode data differ
// (those must give the package's text or utf8proc's, as recorded).
static void code_points(json_t *table) {
    json_t *norm = json_object_get(table, "normalizer");
    json_t *known = json_object_get(table, "known_differences");
    const char *name = json_string_value(json_object_get(norm, "type"));
    gdn_tokenizer *t = gpt2_with_normalizer(norm, name);
    if (!t) {
        check(false, "%s: every code point", name);
        return;
    }
    char *s = gdn_malloc(0x110000 * 5), *back = NULL;
    size_t n = 0, bn = 0, ncp = 0;
    for (uint32_t c = 0; c < 0x110000; c++) {
        if ((c >= 0xD800 && c < 0xE000) || c == '\n') continue;
        n += put_utf8(c, s + n);
        s[n++] = '\n';
        ncp++;
    }
    bool ok = normalized_by(t, s, n, &back, &bn);
    uint64_t h = 0xcbf29ce484222325ull;
    size_t changed = 0, lines = 0, k = 0, as_package = 0, as_utf8proc = 0;
    const char *p = back, *end = back + (ok ? bn : 0);
    for (uint32_t c = 0; ok && c < 0x110000; c++) {
        if ((c >= 0xD800 && c < 0xE000) || c == '\n') continue;
        const char *q = memchr(p, '\n', (size_t)(end - p));
        if (!q) break;
        size_t len = (size_t)(q - p);
        lines++;
        json_t *kd = json_array_get(known, k);
        if (kd && json_integer_value(json_array_get(kd, 0)) == (json_int_t)c) {
            json_t *pkg = json_array_get(kd, 1), *lib = json_array_get(kd, 2);
            if (len == json_string_length(pkg) && !memcmp(p, json_string_value(pkg), len))
                as_package++;
            else if (len == json_string_length(lib) && !memcmp(p, json_string_value(lib), len))
                as_utf8proc++;
            k++;
        } else {
            char self[4], head[16];
            if (len != put_utf8(c, self) || memcmp(p, self, len)) {
                changed++;
                h = fnv1a(h, head, (size_t)snprintf(head, sizeof head, "%X:", c));
                h = fnv1a(fnv1a(h, p, len), "\n", 1);
            }
        }
        p = q + 1;
    }
    char digest[24];
    snprintf(digest, sizeof digest, "%016llx", (unsigned long long)h);
    const char *want = json_string_value(json_object_get(table, "digest"));
    size_t want_changed = (size_t)json_integer_value(json_object_get(table, "changed"));
    check(ok && lines == ncp && p == end && changed == want_changed && !strcmp(digest, want),
          "%s: %zu code points, %zu changed as the package changes them (%zu), digest %s", name,
          lines, changed, want_changed, digest);
    check(k == json_array_size(known) && as_package + as_utf8proc == k,
          "%s: %zu code points where utf8proc's data differ: %zu as utf8proc, %zu as the package",
          name, k, as_utf8proc, as_package);
    free(back);
    free(s);
    tok_free(t);
}

// Invalid UTF-8 meets normalizers: for consecutive cases A, B (with specials) of a fixture whose
// normalizer works code point by code point, decode(encode(A + bad + B)) is the reference's
// decoded A + bad + decoded B: each valid run is normalized on its own, invalid bytes kept.
static void invalid_between(const gdn_tokenizer *t, json_t *spec, const char *label) {
    static const char *const bad[] = {"\xff", "\xc3", "\x81", "\xe2\x82", "\xf0\x9f\x98",
                                      "\xed\xa0\x80", "\xc0\xaf"};
    json_t *cases = json_object_get(spec, "cases");
    json_t *prev = NULL;
    size_t pairs = 0, ok = 0;
    char err[1024];
    tok_ids v = {0};
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        if (!json_is_true(json_object_get(cs, "specials"))) continue;
        if (prev) {
            json_t *ta = json_object_get(prev, "text"), *tb = json_object_get(cs, "text");
            json_t *da = json_object_get(prev, "decoded"), *db = json_object_get(cs, "decoded");
            const char *b = bad[pairs % (sizeof bad / sizeof *bad)];
            size_t na = json_string_length(ta), nb = json_string_length(tb), nbad = strlen(b);
            size_t nda = json_string_length(da), ndb = json_string_length(db);
            char *x = gdn_malloc(na + nbad + nb + 1), *want = gdn_malloc(nda + nbad + ndb + 1);
            memcpy(x, json_string_value(ta), na);
            memcpy(x + na, b, nbad);
            memcpy(x + na + nbad, json_string_value(tb), nb);
            memcpy(want, json_string_value(da), nda);
            memcpy(want + nda, b, nbad);
            memcpy(want + nda + nbad, json_string_value(db), ndb);
            char *back = NULL;
            size_t bn = 0, wn = nda + nbad + ndb;
            if (encode(t, x, na + nbad + nb, true, &v) &&
                tok_decode(t, v.ids, v.n, &back, &bn, err, sizeof err) && bn == wn &&
                !memcmp(back, want, wn))
                ok++;
            else if (ok == pairs)
                show_text(x, na + nbad + nb);
            pairs++;
            free(back);
            free(x);
            free(want);
        }
        prev = cs;
    }
    check(ok == pairs, "%s: A + invalid bytes + B decodes to A' + the bytes + B' (%zu/%zu pairs)",
          label, ok, pairs);
    tok_ids_free(&v);
}

// The invalid-UTF-8 rule of each step, on hand-made bytes: normalizer, input, expected output.
static void invalid_rules(void) {
    static const char *const rules[][4] = {
        {"{\"type\": \"NFC\"}", "e\xcc\x81\xff" "e\xcc\x81", "\xc3\xa9\xff\xc3\xa9",
         "NFC: runs on either side of 0xFF composed"},
        {"{\"type\": \"NFC\"}", "e\xff\xcc\x81", "e\xff\xcc\x81",
         "NFC: a mark after 0xFF is not composed with the e before it"},
        {"{\"type\": \"NFKD\"}", "\xef\xac\x81\xc3\xef\xbc\x91", "fi\xc3" "1",
         "NFKD: fi-ligature, lone 0xC3, full-width 1"},
        {"{\"type\": \"Lowercase\"}", "\xc3\x80" "B\xff\xc3\x87\xc4\xb0\x80",
         "\xc3\xa0" "b\xff\xc3\xa7i\xcc\x87\x80", "Lowercase: around 0xFF and a lone 0x80"},
        {"{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}",
         " \t\xff\xc3 \xe3\x80\x80", "\xff\xc3", "Strip: invalid bytes are not white space"},
        {"{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}", " \x85 \xc2\x85",
         "\x85", "Strip: lone 0x85 kept, U+0085 (C2 85) stripped"},
        {"{\"type\": \"Replace\", \"pattern\": {\"String\": \"''\"}, \"content\": \"\\\"\"}",
         "a''\xff''\xe2''", "a\"\xff\"\xe2\"", "Replace String: matches between invalid bytes"},
        {"{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"b*\"}, \"content\": \"-\"}",
         "\xff" "b", "-\xff-", "Replace b*: 0xFF steps like one character (as \"ab\" -> \"-a-\")"},
        {"{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}", "\xff", "\xe2\x96\x81\xff",
         "Prepend: before a text of invalid bytes"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++) {
        json_error_t je;
        json_t *norm = json_loads(rules[i][0], 0, &je);
        if (!norm) gdn_die("rule %zu: %s", i, je.text);
        gdn_tokenizer *t = gpt2_with_normalizer(norm, rules[i][3]);
        char *got = NULL;
        size_t gn = 0;
        bool ok = t && normalized_by(t, rules[i][1], strlen(rules[i][1]), &got, &gn) &&
                  gn == strlen(rules[i][2]) && !memcmp(got, rules[i][2], gn);
        check(ok, "invalid UTF-8, %s", rules[i][3]);
        if (!ok && got) show_text(got, gn);
        free(got);
        tok_free(t);
        json_decref(norm);
    }
}

// NFC on random bytes (invalid UTF-8 included): encode never fails and normalizing twice is
// normalizing once (the runs stay the runs).
static void nfc_random(const gdn_tokenizer *t, const char *label) {
    rng_t r;
    rng_init(&r, 31, 5);
    char *s = gdn_malloc(4096);
    int ok = 0, count = 300;
    for (int i = 0; i < count; i++) {
        size_t n = random_text(&r, s, 300, true);
        char *once = NULL, *twice = NULL;
        size_t n1 = 0, n2 = 0;
        if (normalized_by(t, s, n, &once, &n1) && normalized_by(t, once, n1, &twice, &n2) &&
            n1 == n2 && !memcmp(once, twice, n1))
            ok++;
        free(once);
        free(twice);
    }
    check(ok == count, "%s: on %d random byte strings, normalizing twice == once", label, count);
    free(s);
}

// A "normalized" added token whose normalized text is empty never matches (as in the package)
// and decodes to nothing.
static void empty_normalized_token(void) {
    char *text = edited_fixture("\"normalizer\": null",
                                "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": "
                                "\"<|endoftext|>\"}, \"content\": \"\"}");
    text = replace_once(text, "\"normalized\": false", "\"normalized\": true");
    char err[1024];
    gdn_tokenizer *t = tok_load_blob("bpe", text, strlen(text), "emptytoken.json", err,
                                     sizeof err);
    tok_ids a = {0}, b = {0};
    char *back = NULL;
    size_t bn = 1;
    uint32_t eot = 0;
    bool ok = t && encode(t, "a<|endoftext|>b", 15, true, &a) && encode(t, "ab", 2, true, &b) &&
              a.n == b.n && !memcmp(a.ids, b.ids, a.n * sizeof *a.ids) &&
              tok_decode(t, &eot, 1, &back, &bn, err, sizeof err) && bn == 0;
    check(ok, "a normalized added token that normalizes to \"\": never matched, decodes to \"\"");
    free(back);
    tok_ids_free(&a);
    tok_ids_free(&b);
    tok_free(t);
    free(text);
}

// A Split pre-tokenizer with a String pattern (a literal): llama3_bpe.json with its pattern
// {"String": " "}; the ids are those `tokenizers` 0.23.3 gives the same edited file.
static void split_string(void) {
    char *text = edited_file("llama3_bpe.json", "\"pattern\": {",
                             "\"pattern\": {\"String\": \" \"}, \"unused\": {");
    static const uint32_t want[] = {41, 414, 80, 222, 88, 271, 315, 222, 222, 71, 80, 80};
    char err[1024];
    gdn_tokenizer *t = tok_load_blob("bpe", text, strlen(text), "split_string.json", err,
                                     sizeof err);
    if (!t) printf("    %s\n", err);
    tok_ids v = {0};
    bool ok = t && encode(t, "Hello world  foo", 16, true, &v) &&
              v.n == sizeof want / sizeof *want && !memcmp(v.ids, want, sizeof want);
    check(ok, "Split(String \" \") + ByteLevel: loads, \"Hello world  foo\" -> the package's ids");
    tok_ids_free(&v);
    tok_free(t);
    free(text);
}

// Tokenizers without a template: tok_encode_template is tok_encode.
static void no_template(gdn_tokenizer *gpt2, gdn_tokenizer *spm) {
    char err[1024];
    gdn_tokenizer *bytes = tok_load("bytes", err, sizeof err);
    gdn_tokenizer *kinds[3] = {bytes, gpt2, spm};
    const char *text = "Hello world<|endoftext|></s>";
    for (int k = 0; k < 3; k++) {
        if (!kinds[k]) continue;
        tok_template tp = tok_get_template(kinds[k]);
        tok_ids a = {0}, b = {0};
        bool ok = tp.n_prefix == 0 && tp.n_suffix == 0 &&
                  encode(kinds[k], text, strlen(text), true, &a) &&
                  encode_template(kinds[k], text, strlen(text), true, &b) && a.n == b.n &&
                  !memcmp(a.ids, b.ids, a.n * sizeof *a.ids);
        check(ok, "%s%s: no template; tok_encode_template == tok_encode", tok_kind(kinds[k]),
              k == 1 ? " (post_processor null)" : "");
        tok_ids_free(&a);
        tok_ids_free(&b);
    }
    tok_free(bytes);
}

static void bad_input(gdn_tokenizer *gpt2, gdn_tokenizer *spm) {
    printf("\n== bad input\n");
    bad_file("trunc.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,", "not valid JSON",
             "a truncated tokenizer.json (names the file, line and column)");
    // gpt2_bpe.json with one edit: from, to, the file, what the message must name, the row
#define NORM(x) "\"normalizer\": " x
#define POST(x) "\"post_processor\": " x
#define SEQ(x) "{\"Sequence\": {\"id\": \"" x "\", \"type_id\": 0}}"
#define SPECIAL(x) "{\"SpecialToken\": {\"id\": \"" x "\", \"type_id\": 0}}"
#define ETOK(id) "{\"E\": {\"id\": \"E\", \"ids\": [" id "], \"tokens\": [\"E\"]}}"
    static const char *const edits[][5] = {
        {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "wordpiece.json", "model.type",
         "a WordPiece model (names model.type)"},
        {NORM("null"), NORM("{\"type\": \"BertNormalizer\", \"lowercase\": true}"), "bert.json",
         "normalizer.type is \"BertNormalizer\"", "a BertNormalizer (names normalizer.type)"},
        {NORM("null"), NORM("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, "
                            "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}]}"),
         "precompiled.json", "normalizer.normalizers[1].type is \"Precompiled\"",
         "Sequence[NFC, Precompiled] (names normalizers[1] and Precompiled)"},
        {NORM("null"), NORM("{\"type\": \"StripAccents\"}"), "stripaccents.json",
         "\"StripAccents\"", "a StripAccents normalizer (names it)"},
        {NORM("null"), NORM("{\"type\": \"Replace\", \"pattern\": {\"Glob\": \"*\"}, "
                            "\"content\": \"\"}"),
         "glob.json", "normalizer.pattern", "a Replace pattern that is no String or Regex"},
        {NORM("null"), NORM("{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(\"}, "
                            "\"content\": \"\"}"),
         "badregex.json", "does not compile", "a Replace regex that does not compile"},
        {NORM("null"), NORM("{\"type\": \"Strip\", \"strip_left\": true}"), "strip.json",
         "strip_right", "a Strip without strip_right"},
        {"\"pre_tokenizer\": {", "\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"x\": {",
         "whitespace.json", "pre_tokenizer.type", "a Whitespace pre-tokenizer"},
        {"\"merges\": [", "\"merges\": [\"zzzq zzzr\", ", "badmerge.json", "model.merges[0]",
         "a merge of tokens not in the vocabulary"},
        {"\"id\": 0,", "\"id\": 99999999,", "bigid.json", "added_tokens[0]",
         "an added token id of 99999999"},
        {POST("null"), POST("{\"type\": \"WordPieceProcessing\"}"), "post_unknown.json",
         "post_processor.type is \"WordPieceProcessing\"",
         "an unknown post_processor type (names post_processor.type and the type)"},
        {POST("null"), POST("{\"type\": \"Sequence\", \"processors\": [{\"type\": "
                            "\"ByteLevel\"}, {\"type\": \"Precompiled\"}]}"),
         "post_seq.json", "post_processor.processors[1].type is \"Precompiled\"",
         "Sequence[ByteLevel, Precompiled] (names processors[1] and the type)"},
        {POST("null"), POST("{\"type\": \"TemplateProcessing\", \"single\": [" SEQ("B") "], "
                            "\"pair\": [], \"special_tokens\": {}}"),
         "post_b.json", "post_processor.single[0] is Sequence B",
         "a single template of Sequence B (the package panics)"},
        {POST("null"), POST("{\"type\": \"TemplateProcessing\", \"single\": [" SPECIAL("<s>")
                            ", " SEQ("A") "], \"pair\": [], \"special_tokens\": {}}"),
         "post_undefined.json", "SpecialToken \"<s>\"",
         "a template's SpecialToken missing from special_tokens (names it)"},
        {POST("null"), POST("{\"type\": \"TemplateProcessing\", \"single\": [" SEQ("A") ", "
                            SEQ("A") "], \"pair\": [], \"special_tokens\": {}}"),
         "post_twice.json", "gives the text 2 times", "a template holding $A twice"},
        {POST("null"), POST("{\"type\": \"TemplateProcessing\", \"single\": [" SPECIAL("E")
                            "], \"pair\": [], \"special_tokens\": " ETOK("5000") "}"),
         "post_bigid.json", "post_processor.special_tokens[\"E\"].ids[0] is 5000",
         "a template id outside the vocabulary (names the path and the id)"},
        {POST("null"), POST("{\"type\": \"Sequence\", \"processors\": [{\"type\": "
                            "\"TemplateProcessing\", \"single\": [" SPECIAL("E") ", " SEQ("A") ", "
                            SPECIAL("E") "], \"pair\": [], \"special_tokens\": " ETOK("0") "}, "
                            "{\"type\": \"TemplateProcessing\", \"single\": [" SEQ("A") "], "
                            "\"pair\": [], \"special_tokens\": {}}]}"),
         "post_three.json", "processors[1] (TemplateProcessing) comes after processors that "
         "leave 3", "a template after one that leaves 3 encodings (the package panics)"},
        {POST("null"), POST("{\"type\": \"BertProcessing\", \"cls\": [\"<|endoftext|>\", 0]}"),
         "post_nosep.json", "post_processor.sep is not [token, id]", "a BertProcessing without sep"},
    };
#undef NORM
#undef POST
#undef SEQ
#undef SPECIAL
#undef ETOK
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        char *s = edited_fixture(edits[i][0], edits[i][1]);
        bad_file(edits[i][2], s, edits[i][3], edits[i][4]);
        free(s);
    }
    bad_file("vocab.json", "{\"a\": 0, \"b\": 1}", "merges.txt", "a vocab.json without merges.txt");
    bad_file("garbage.model", "\x01\x02not a model at all", "not a tokenizer.json",
             "a file that is no tokenizer");
    bad_file("empty.json", "", "empty", "an empty file");

    char err[1024], missing[700];
    snprintf(missing, sizeof missing, "%s/nothere.json", tmpdir);
    gdn_tokenizer *t = tok_load(missing, err, sizeof err);
    check(!t && strstr(err, missing), "refused: a missing file (names it)");
    printf("    message: %s\n", err);
    t = tok_load_blob("wordpiece", "x", 1, "run/ckpt.h5", err, sizeof err);
    check(!t && strstr(err, "run/ckpt.h5") && strstr(err, "wordpiece"),
          "refused: a stored blob of an unknown kind (names where it came from)");

    gdn_tokenizer *bytes = tok_load("bytes", err, sizeof err);
    gdn_tokenizer *kinds[3] = {bytes, gpt2, spm};
    for (int k = 0; k < 3; k++) {
        if (!kinds[k]) continue;
        uint32_t ids[3] = {1, 2, (uint32_t)tok_vocab_size(kinds[k])};
        char *back = NULL;
        size_t blen;
        bool d = tok_decode(kinds[k], ids, 3, &back, &blen, err, sizeof err);
        char num[32];
        snprintf(num, sizeof num, "%u", ids[2]);
        check(!d && strstr(err, num) && strstr(err, "position 2"),
              "%s: decode of id %u (= vocab) -> false, names the id and position",
              tok_kind(kinds[k]), ids[2]);
        free(back);
    }
    tok_free(bytes);
}

// One tokenizer of a fixture file: loads, has the reference's kind, vocabulary and eot, encodes
// and decodes every case as the reference, and so does its rebuild from the blob. NULL when it
// does not load.
static gdn_tokenizer *parity_one(json_t *spec) {
    const char *name = json_string_value(json_object_get(spec, "name"));
    const char *file = json_string_value(json_object_get(spec, "file"));
    char err[1024];
    gdn_tokenizer *t = load_fixture(file);
    check(t != NULL, "%s: load %s", name, file);
    if (!t) return NULL;
    int vocab = (int)json_integer_value(json_object_get(spec, "vocab"));
    int eot = (int)json_integer_value(json_object_get(spec, "eot"));
    check(tok_vocab_size(t) == vocab && tok_eot(t) == eot &&
              !strcmp(tok_kind(t), json_string_value(json_object_get(spec, "kind"))),
          "%s: kind %s, vocab %d (reference %d), eot %d (reference %d)", name, tok_kind(t),
          tok_vocab_size(t), vocab, tok_eot(t), eot);
    parity(t, spec, name);

    // the stored blob rebuilds the same tokenizer
    const void *blob;
    size_t bn;
    tok_blob(t, &blob, &bn);
    gdn_tokenizer *b = tok_load_blob(tok_kind(t), blob, bn, "blob", err, sizeof err);
    check(b != NULL, "%s: tok_load_blob of its %zu-byte blob", name, bn);
    if (b) {
        char label[64];
        snprintf(label, sizeof label, "%s from its blob", name);
        parity(b, spec, label);
        tok_free(b);
    }
    return t;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        snprintf(fixtures, sizeof fixtures, "%s", argv[1]);
    } else {
        const char *f = __FILE__, *slash = strrchr(f, '/');
        snprintf(fixtures, sizeof fixtures, "%.*s/fixtures/tokenizers",
                 slash ? (int)(slash - f) : 1, slash ? f : ".");
    }
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/gdn-test-tok-XXXXXX", base && base[0] ? base : "/tmp");
    CHECK_PTR(mkdtemp(tmpdir));

    char path[1200], err[1024];
    snprintf(path, sizeof path, "%s/expected.json", fixtures);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        fprintf(stderr, "test_tokenizer: cannot read %s: %s (pass the fixtures directory as "
                "argv[1])\n", path, je.text);
        return 1;
    }
    printf("== parity with the reference tokenizers (%s)\n", path);
    gdn_tokenizer *gpt2 = NULL, *llama = NULL, *spm = NULL;
    json_t *gpt2_spec = NULL;
    json_t *toks = json_object_get(root, "tokenizers");
    for (size_t i = 0; i < json_array_size(toks); i++) {
        json_t *spec = json_array_get(toks, i);
        const char *name = json_string_value(json_object_get(spec, "name"));
        gdn_tokenizer *t = parity_one(spec);
        if (!t) continue;
        if (!strcmp(name, "gpt2")) gpt2 = t, gpt2_spec = spec;
        else if (!strcmp(name, "llama3")) llama = t;
        else if (!strcmp(name, "spm_bpe")) spm = t;
        else tok_free(t);
    }
    if (gpt2_spec) {
        gdn_tokenizer *vm = load_fixture("gpt2_vocab.json");
        check(vm && tok_eot(vm) == tok_eot(gpt2), "gpt2 as vocab.json + merges.txt: loads, eot %d",
              vm ? tok_eot(vm) : -2);
        if (vm) parity(vm, gpt2_spec, "gpt2 as vocab.json + merges.txt");
        tok_free(vm);
    }

    printf("\n== round trips\n");
    gdn_tokenizer *bytes = tok_load("bytes", err, sizeof err);
    round_trips(bytes, "bytes", true, 300);
    if (gpt2) round_trips(gpt2, "gpt2", true, 400);
    if (llama) round_trips(llama, "llama3", true, 400);
    if (spm) round_trips(spm, "spm_bpe", false, 200);
    if (gpt2) long_runs(gpt2, "gpt2");
    if (llama) long_runs(llama, "llama3");

    printf("\n== threads\n");
    snprintf(path, sizeof path, "%s/../../../data/tinyshakespeare/input.txt", fixtures);
    FILE *fp = fopen(path, "rb");
    char *text = gdn_malloc(300001);
    size_t len = 0;
    if (fp) {
        len = fread(text, 1, 300000, fp);
        fclose(fp);
    } else {
        rng_t r;
        rng_init(&r, 7, 7);
        len = random_text(&r, text, 4000, true);
    }
    threads(bytes, "bytes", text, len);
    if (gpt2) threads(gpt2, "gpt2", text, len);
    if (llama) threads(llama, "llama3", text, len);
    if (spm) threads(spm, "spm_bpe", text, len);
    tok_free(bytes);

    snprintf(path, sizeof path, "%s/normalizers.json", fixtures);
    json_t *nroot = json_load_file(path, 0, &je);
    if (!nroot) {
        fprintf(stderr, "test_tokenizer: cannot read %s: %s\n", path, je.text);
        return 1;
    }
    printf("\n== normalizers: parity with the reference (%s; tokenizers %s, utf8proc's Unicode "
           "%s)\n", path, json_string_value(json_object_get(nroot, "tokenizers_version")),
           json_string_value(json_object_get(nroot, "utf8proc_unicode")));
    toks = json_object_get(nroot, "tokenizers");
    for (size_t i = 0; i < json_array_size(toks); i++) {
        json_t *spec = json_array_get(toks, i);
        const char *name = json_string_value(json_object_get(spec, "name"));
        gdn_tokenizer *t = parity_one(spec);
        if (!t) continue;
        if (!strcmp(name, "nfc")) {
            invalid_between(t, spec, name);
            nfc_random(t, name);
        } else if (!strcmp(name, "seq")) {
            invalid_between(t, spec, name);
            threads(t, name, text, len);
        }
        tok_free(t);
    }
    printf("\n== normalizers: normalize_str of the reference\n");
    normalized_texts(json_object_get(nroot, "normalized_texts"));
    empty_normalized_token();
    printf("\n== normalizers: every code point\n");
    json_t *tables = json_object_get(nroot, "code_points");
    for (size_t i = 0; i < json_array_size(tables); i++) code_points(json_array_get(tables, i));
    printf("\n== normalizers: invalid UTF-8\n");
    invalid_rules();
    printf("\n== a literal Split pattern\n");
    split_string();
    json_decref(nroot);

    snprintf(path, sizeof path, "%s/post_processors.json", fixtures);
    json_t *proot = json_load_file(path, 0, &je);
    if (!proot) {
        fprintf(stderr, "test_tokenizer: cannot read %s: %s\n", path, je.text);
        return 1;
    }
    printf("\n== post-processors: parity with the reference (%s; tokenizers %s)\n", path,
           json_string_value(json_object_get(proot, "tokenizers_version")));
    toks = json_object_get(proot, "tokenizers");
    for (size_t i = 0; i < json_array_size(toks); i++) {
        gdn_tokenizer *t = parity_one(json_array_get(toks, i));
        tok_free(t);
    }
    no_template(gpt2, spm);
    json_decref(proot);
    free(text);

    bad_input(gpt2, spm);
    tok_free(gpt2);
    tok_free(llama);
    tok_free(spm);
    json_decref(root);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: cannot remove %s\n", tmpdir);
    printf("\n%d checks, %d failures\n", gc_checks, gc_failures);
    return gc_failures ? 1 : 0;
}
