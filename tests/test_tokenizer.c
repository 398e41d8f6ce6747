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
        if (encode(t, text, len, specials, &v) && ids_equal_json(&v, jids, &at)) {
            ids_ok++;
        } else {
            printf("    case %zu (specials %d): ids differ at %zu (ours %zu ids, expected %zu)\n",
                   c, specials, at, v.n, json_array_size(jids));
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

// gpt2_bpe.json with `from` replaced by `to` (first occurrence).
static char *edited_fixture(const char *from, const char *to) {
    char path[1200];
    snprintf(path, sizeof path, "%s/gpt2_bpe.json", fixtures);
    FILE *fp = fopen(path, "rb");
    CHECK_PTR(fp);
    char *s = gdn_malloc(1 << 20);
    size_t n = fread(s, 1, (1 << 20) - 1, fp);
    CHECK_SYS(fclose(fp) == 0 ? 0 : -1);
    s[n] = 0;
    char *at = strstr(s, from);
    if (!at) gdn_die("fixture gpt2_bpe.json has no \"%s\"", from);
    char *out = gdn_malloc(n + strlen(to) + 1);
    size_t k = (size_t)(at - s);
    memcpy(out, s, k);
    strcpy(out + k, to);
    strcat(out, at + strlen(from));
    free(s);
    return out;
}

static void bad_input(gdn_tokenizer *gpt2, gdn_tokenizer *spm) {
    printf("\n== bad input\n");
    bad_file("trunc.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,", "not valid JSON",
             "a truncated tokenizer.json (names the file, line and column)");
    // gpt2_bpe.json with one edit: from, to, the file, what the message must name, the row
    static const char *const edits[][5] = {
        {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "wordpiece.json", "model.type",
         "a WordPiece model (names model.type)"},
        {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", "nfc.json", "normalizer",
         "an NFC normalizer (names normalizer)"},
        {"\"pre_tokenizer\": {", "\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"x\": {",
         "whitespace.json", "pre_tokenizer.type", "a Whitespace pre-tokenizer"},
        {"\"merges\": [", "\"merges\": [\"zzzq zzzr\", ", "badmerge.json", "model.merges[0]",
         "a merge of tokens not in the vocabulary"},
        {"\"id\": 0,", "\"id\": 99999999,", "bigid.json", "added_tokens[0]",
         "an added token id of 99999999"},
    };
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
    json_t *toks = json_object_get(root, "tokenizers");
    gdn_tokenizer *gpt2 = NULL, *llama = NULL, *spm = NULL;
    json_t *gpt2_spec = NULL;
    for (size_t i = 0; i < json_array_size(toks); i++) {
        json_t *spec = json_array_get(toks, i);
        const char *name = json_string_value(json_object_get(spec, "name"));
        const char *file = json_string_value(json_object_get(spec, "file"));
        gdn_tokenizer *t = load_fixture(file);
        check(t != NULL, "%s: load %s", name, file);
        if (!t) continue;
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
    free(text);
    tok_free(bytes);

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
