// test_prepare_shards.c — gdn-prepare's shard output end to end (bytes tokenizer).
//
// On the fixture corpus (tests/fixtures/prepare: plain, .gz, two-member .gz, .zst, .jsonl,
// .jsonl.gz, .jsonl.zst, a nested directory, a hidden file): the shards hold exactly the
// documents of expected-*.jsonl encoded one by one, each split by shard_doc_is_val, for
// --doc-split file and blank-lines; 1 and 2 threads write identical files; small --shard-tokens
// gives several shards, each closing at a document end; a 3 MB single document streams through
// 4 KiB pieces unchanged; peak memory (getrusage, printed by the tool) stays within the tool's
// bound on an input 20x the bound; bad inputs stop with a message naming file and line, or are
// skipped and counted; an existing token set is refused without --overwrite and is left intact
// by a failed --overwrite run.
// --specials (tokenizer.json post-processors, tests/fixtures/tokenizers): with Llama 3's
// TemplateProcessing and with BertProcessing each document is stored as the package's
// encode(text, add_special_tokens=True) (tok_encode_template, checked against the package by
// test_tokenizer) + [eot], a 12 kB document cut into pieces included; every document offset
// points at a BOS and the sampler's document starts are the BOSes; the index and shards record
// "specials" and the frame; --specials none stores [eot] + encode(text) as before, and so does
// the default with a tokenizer without a template; a mix of sets framed differently is refused.
// Usage: test_prepare_shards [BINARY_DIR SOURCE_DIR] (default: $GDN_BINARY_DIR, $GDN_SOURCE_DIR
// as ctest sets them).
#include "check.h"
#include "fileutil.h"
#include "../src/data/dataset.h"
#include "../src/data/shards.h"
#include "../src/data/tokenizer.h"
#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

static char bin[600], fix[700], tmp[512];

// Runs gdn-prepare with `args`; stdout + stderr into tmp/log.txt; the exit status.
static int prepare(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/log.txt' 2>&1", bin, args, tmp);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static bool log_has_quiet(const char *s, bool quiet) {
    char p[600];
    snprintf(p, sizeof p, "%s/log.txt", tmp);
    char *t = file_read_all(p, NULL);
    bool ok = t && strstr(t, s);
    if (!ok && t && !quiet) printf("    log: %.600s\n", t);
    free(t);
    return ok;
}
static bool log_has(const char *s) { return log_has_quiet(s, false); }

// A number after `key` in the log ("peak 12.3 MiB" -> key "peak ").
static double log_number(const char *key) {
    char p[600];
    snprintf(p, sizeof p, "%s/log.txt", tmp);
    char *t = file_read_all(p, NULL);
    const char *at = t ? strstr(t, key) : NULL;
    double v = at ? atof(at + strlen(key)) : -1;
    free(t);
    return v;
}

// A split's documents as one token stream plus document offsets.
typedef struct {
    uint32_t *tok;
    size_t n, cap;
    uint64_t *off;  // n_docs + 1
    size_t n_docs, off_cap;
} stream;

static void stream_push(stream *s, const uint32_t *t, size_t n, bool doc_end) {
    if (s->n + n > s->cap) {
        s->cap = GDN_MAX(s->n + n, 2 * s->cap + 1024);
        s->tok = gdn_realloc(s->tok, s->cap * sizeof *s->tok);
    }
    memcpy(s->tok + s->n, t, n * sizeof *t);
    s->n += n;
    if (s->n_docs + 2 > s->off_cap) {
        s->off_cap = 2 * s->off_cap + 64;
        s->off = gdn_realloc(s->off, s->off_cap * sizeof *s->off);
    }
    if (doc_end) s->off[++s->n_docs] = s->n;
}

static void stream_free(stream *s) {
    free(s->tok);
    free(s->off);
    memset(s, 0, sizeof *s);
}

static bool stream_eq(const stream *a, const stream *b) {
    return a->n == b->n && a->n_docs == b->n_docs &&
           (a->n == 0 || !memcmp(a->tok, b->tok, a->n * sizeof *a->tok)) &&
           (a->n_docs == 0 || !memcmp(a->off + 1, b->off + 1, a->n_docs * sizeof *a->off));
}

// Reads a token set's index and every shard into per-split streams; checks the index against
// the shards (counts, attributes). False + message on any inconsistency.
static bool read_set(const char *dir, stream out[2], int *n_shards, uint64_t max_shard_excess) {
    char err[1024], base[600], p[1300];
    shard_index ix;
    memset(out, 0, 2 * sizeof *out);
    if (!shard_index_read(dir, &ix, base, sizeof base, err, sizeof err)) {
        printf("    %s\n", err);
        return false;
    }
    bool ok = true;
    for (int i = 0; i < ix.n_shards && ok; i++) {
        shard_data d;
        snprintf(p, sizeof p, "%s/%s", base, ix.shards[i].path);
        if (!shard_read(p, &d, err, sizeof err)) {
            printf("    %s\n", err);
            ok = false;
            break;
        }
        ok = d.n_tokens == ix.shards[i].tokens && d.n_docs == ix.shards[i].documents &&
             d.split == ix.shards[i].split && d.vocab_size == ix.vocab_size &&
             d.eot_token == ix.eot_token && !strcmp(d.tokenizer_kind, ix.tokenizer_kind) &&
             !strcmp(d.specials, ix.specials);
        if (!ok) printf("    %s: index and shard disagree\n", p);
        // a shard closes at the first document end at or past --shard-tokens: only its last
        // document may cross the size
        if (ok && max_shard_excess && d.n_docs > 1 &&
            d.doc_offsets[d.n_docs - 1] >= max_shard_excess) {
            printf("    %s: document %llu starts at %llu >= --shard-tokens\n", p,
                   (unsigned long long)(d.n_docs - 1), (unsigned long long)d.doc_offsets[d.n_docs - 1]);
            ok = false;
        }
        for (uint64_t k = 0; ok && k < d.n_docs; k++)
            stream_push(&out[d.split], d.tokens + d.doc_offsets[k],
                        d.doc_offsets[k + 1] - d.doc_offsets[k], true);
        shard_data_free(&d);
    }
    if (n_shards) *n_shards = ix.n_shards;
    shard_index_free(&ix);
    return ok;
}

// How gdn-prepare frames a document, computed here from the tokenizer alone.
enum { FRAME_NONE, FRAME_TEMPLATE };

// The expected streams for `tok`: the documents of jsonl, then the text file `extra` (one
// document; NULL: none), each encoded whole, split by the rule: FRAME_NONE: [eot] +
// tok_encode(text); FRAME_TEMPLATE with a template that adds ids: tok_encode_template(text) +
// [eot], else as FRAME_NONE.
static void expected_docs(const char *jsonl, const char *extra, const gdn_tokenizer *tok,
                          int mode, uint64_t seed, double frac, stream out[2]) {
    char err[512];
    memset(out, 0, 2 * sizeof *out);
    FILE *fp = fopen(jsonl, "rb");
    if (!fp) gdn_die("cannot read %s", jsonl);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    uint64_t ordinal = 0;
    tok_template tp = tok_get_template(tok);
    bool tpl = mode == FRAME_TEMPLATE && tp.n_prefix + tp.n_suffix > 0;
    int eot = tok_eot(tok);
    for (;;) {
        char *text = NULL;
        size_t n = 0;
        json_t *j = NULL;
        if ((len = getline(&line, &cap, fp)) > 0) {
            json_error_t je;
            j = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
            if (!j) gdn_die("%s: %s", jsonl, je.text);
            json_t *t = json_object_get(j, "text");
            text = gdn_malloc(json_string_length(t) + 1);
            n = json_string_length(t);
            memcpy(text, json_string_value(t), n);
        } else if (extra) {
            text = file_read_all(extra, &n);
            if (!text) gdn_die("cannot read %s", extra);
            extra = NULL;
        } else {
            break;
        }
        tok_ids ids = {0};
        uint32_t e = (uint32_t)eot;
        bool ok = tpl ? tok_encode_template(tok, text, n, false, &ids, err, sizeof err)
                      : tok_encode(tok, text, n, false, &ids, err, sizeof err);
        if (!ok) gdn_die("%s", err);
        int split = shard_doc_is_val(seed, ordinal++, frac) ? 1 : 0;
        if (eot >= 0 && !tpl) stream_push(&out[split], &e, 1, false);
        stream_push(&out[split], ids.ids, ids.n, !(eot >= 0 && tpl));
        if (eot >= 0 && tpl) stream_push(&out[split], &e, 1, true);
        tok_ids_free(&ids);
        json_decref(j);
        free(text);
    }
    free(line);
    fclose(fp);
}

// The expected streams of the bytes tokenizer (no eot, no template): expected-*.jsonl's
// documents encoded one by one, split by the rule.
static void expected_set(const char *jsonl, uint64_t seed, double frac, stream out[2]) {
    char err[512];
    gdn_tokenizer *tok = tok_load("bytes", err, sizeof err);
    if (!tok) gdn_die("%s", err);
    expected_docs(jsonl, NULL, tok, FRAME_NONE, seed, frac, out);
    tok_free(tok);
}

static bool files_equal(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = file_read_all(a, &na), *y = file_read_all(b, &nb);
    bool eq = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return eq;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void test_parity(void) {
    printf("== fixture corpus: shards = documents encoded one by one\n");
    char args[4096], out1[600], out2[600], exp[800];
    const char *modes[2] = {"file", "blank-lines"};
    for (int m = 0; m < 2; m++) {
        snprintf(out1, sizeof out1, "%s/fx-%s-t1", tmp, modes[m]);
        snprintf(out2, sizeof out2, "%s/fx-%s-t2", tmp, modes[m]);
        snprintf(exp, sizeof exp, "%s/expected-%s.jsonl", fix, modes[m]);
        for (int t = 1; t <= 2; t++) {
            snprintf(args, sizeof args,
                     "--input '%s/corpus' --out '%s' --doc-split %s --val-fraction 0.3 --seed 7 "
                     "--shard-tokens 200 --batch-bytes 4096 --threads %d",
                     fix, t == 1 ? out1 : out2, modes[m], t);
            int rc = prepare(args);
            check(rc == 0, "--doc-split %s, %d thread(s): exit 0", modes[m], t);
        }
        stream got[2], want[2], got2[2];
        int n_shards = 0;
        bool r = read_set(out1, got, &n_shards, 200);
        check(r, "%s: index and %d shards read and agree", modes[m], n_shards);
        expected_set(exp, 7, 0.3, want);
        check(n_shards >= 4, "%s: --shard-tokens 200 gives several shards (%d)", modes[m], n_shards);
        check(want[1].n_docs > 0 && want[0].n_docs > 0, "%s: both splits hold documents (%zu/%zu)",
              modes[m], want[0].n_docs, want[1].n_docs);
        check(stream_eq(&got[0], &want[0]), "%s: train = its documents encoded one by one (%zu "
              "docs, %zu tokens)", modes[m], got[0].n_docs, got[0].n);
        check(stream_eq(&got[1], &want[1]), "%s: val = its documents encoded one by one (%zu docs, "
              "%zu tokens)", modes[m], got[1].n_docs, got[1].n);
        read_set(out2, got2, NULL, 0);
        char a[800], b[800];
        snprintf(a, sizeof a, "%s/index.json", out1);
        snprintf(b, sizeof b, "%s/index.json", out2);
        bool same = files_equal(a, b) && stream_eq(&got[0], &got2[0]) && stream_eq(&got[1], &got2[1]);
        check(same, "%s: 1 and 2 threads give the same index and shards", modes[m]);
        check(count_entries(out1) == n_shards + 1, "%s: --out holds the shards and index.json only",
              modes[m]);
        for (int s = 0; s < 2; s++) {
            stream_free(&got[s]);
            stream_free(&want[s]);
            stream_free(&got2[s]);
        }
    }
}

static void write_big(const char *path, size_t bytes, bool lines) {
    FILE *fp = fopen(path, "wb");
    if (!fp) gdn_die("cannot write %s", path);
    rng_t r;
    rng_init(&r, 5, 0);
    static const char *words[] = {"alpha", "beta", "gamma", "caf\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87",
                                  "delta,", "epsilon.", "zeta", "\xf0\x9f\x98\x80", "eta"};
    size_t n = 0, col = 0;
    while (n < bytes) {
        const char *w = words[rng_below(&r, 10)];
        fputs(w, fp);
        n += strlen(w);
        col += strlen(w);
        bool nl = lines ? col > 60 : rng_below(&r, 5000) == 0;
        fputc(nl ? '\n' : ' ', fp);
        n++;
        if (nl) col = 0;
    }
    fclose(fp);
}

static void test_big_document(void) {
    printf("== one 3 MB document through 4 KiB pieces\n");
    char in[600], out[600], args[2048];
    snprintf(in, sizeof in, "%s/big-doc.txt", tmp);
    snprintf(out, sizeof out, "%s/big-doc", tmp);
    write_big(in, 3u << 20, false);
    snprintf(args, sizeof args, "--input '%s' --out '%s' --val-fraction 0 --batch-bytes 4096 "
             "--threads 2", in, out);
    check(prepare(args) == 0, "exit 0");
    stream got[2];
    read_set(out, got, NULL, 0);
    size_t n;
    char *text = file_read_all(in, &n);
    bool same = got[0].n_docs == 1 && got[0].n == n;
    for (size_t i = 0; same && i < n; i++) same = got[0].tok[i] == (unsigned char)text[i];
    check(same, "one document, its %zu bytes as tokens", n);
    check(!log_has_quiet("cut without a safe point", true), "every cut at a safe point");
    free(text);
    for (int s = 0; s < 2; s++) stream_free(&got[s]);
}

static void test_memory(void) {
    printf("== peak memory stays within the bound on an input 20x the bound\n");
#if defined(__SANITIZE_ADDRESS__)
    printf("  SKIPPED under AddressSanitizer (its shadow memory and quarantine are not the tool's)\n");
    return;
#endif
    char small[600], big[600], out[600], args[2048];
    const char *opts = "--threads 2 --batch-bytes 16384 --max-record 0.05 --shard-tokens 4000000 "
                       "--val-fraction 0.01 --doc-split blank-lines --overwrite";
    snprintf(small, sizeof small, "%s/mem-small.txt", tmp);
    snprintf(big, sizeof big, "%s/mem-big.txt", tmp);
    snprintf(out, sizeof out, "%s/mem", tmp);
    FILE *fp = fopen(small, "wb");
    fputs("a small input\n\nof two documents\n", fp);
    fclose(fp);
    snprintf(args, sizeof args, "--input '%s' --out '%s' %s", small, out, opts);
    check(prepare(args) == 0, "tiny input: exit 0");
    double base = log_number("peak "), bound = log_number("bounded by ");
    double big_mb = 21.0 * bound;
    write_big(big, (size_t)(big_mb * 1048576.0), true);
    snprintf(args, sizeof args, "--input '%s' --out '%s' %s", big, out, opts);
    check(prepare(args) == 0, "%.0f MiB input: exit 0", big_mb);
    double peak = log_number("peak ");
    printf("    bound %.2f MiB, peak %.1f MiB on the tiny input, %.1f MiB on %.0f MiB\n", bound, base,
           peak, big_mb);
    check(bound > 0 && big_mb >= 20 * bound, "input %.0f MiB >= 20 x bound %.2f MiB", big_mb, bound);
    check(base > 0 && peak > 0 && peak <= base + bound,
          "peak %.1f MiB <= tiny-input peak %.1f + bound %.2f MiB", peak, base, bound);
    unlink(big);
}

static void test_bad_inputs(void) {
    printf("== bad inputs\n");
    char out[600], args[4096], a[900], b[900];
    snprintf(out, sizeof out, "%s/bad-out", tmp);
    const char *files[][2] = {
        {"a-bad.jsonl", "a-bad.jsonl:2: malformed JSON"},
        {"b-utf8.txt", "b-utf8.txt:2: invalid UTF-8"},
        {"c-empty.txt", "c-empty.txt: empty document"},
        {"d-truncated.txt.gz", "d-truncated.txt.gz: truncated gzip data"},
    };
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "--input '%s/bad/%s' --out '%s'", fix, files[i][0], out);
        int rc = prepare(args);
        check(rc == 1 && log_has(files[i][1]), "--on-error stop: %s (rc %d)", files[i][1], rc);
        check(access(out, F_OK) != 0, "  nothing left behind (--out not created)");
    }
    snprintf(args, sizeof args, "--input '%s/bad' --out '%s' --on-error skip --val-fraction 0", fix, out);
    int rc = prepare(args);
    check(rc == 0, "--on-error skip: exit 0");
    const char *listed[] = {"a-bad.jsonl:3: no field \"text\"", "a-bad.jsonl:4: field is not a string",
                            "a-bad.jsonl:5: empty document", "b-utf8.txt:2: invalid UTF-8"};
    for (int i = 0; i < 4; i++) check(log_has(listed[i]), "  listed: %s", listed[i]);
    check(log_has("skipped    7 bad documents"), "  summary counts 7 skipped documents");
    stream got[2];
    read_set(out, got, NULL, 0);
    const char *want = "good onegood six";
    bool same = got[0].n_docs == 2 && got[0].n == strlen(want);
    for (size_t i = 0; same && i < got[0].n; i++) same = got[0].tok[i] == (unsigned char)want[i];
    check(same, "  the two good documents are written, nothing else");
    for (int s = 0; s < 2; s++) stream_free(&got[s]);

    // an existing set: refused without --overwrite; a failed --overwrite run leaves it intact
    snprintf(args, sizeof args, "--input '%s/corpus' --out '%s'", fix, out);
    rc = prepare(args);
    check(rc == 2 && log_has("already holds a token set"), "existing set without --overwrite: "
          "refused (rc %d)", rc);
    snprintf(a, sizeof a, "%s/index.json", out);
    snprintf(b, sizeof b, "%s/index-before.json", tmp);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", a, b);
    if (system(cmd) != 0) gdn_die("cp failed");
    snprintf(args, sizeof args, "--input '%s/corpus' --input '%s/bad/a-bad.jsonl' --out '%s' "
             "--overwrite --shard-tokens 10", fix, fix, out);
    rc = prepare(args);
    check(rc == 1, "failed --overwrite run: exit 1");
    check(files_equal(a, b), "  the old index.json is unchanged");
    check(read_set(out, got, NULL, 0) && got[0].n_docs == 2, "  the old shards still read back");
    check(count_entries(out) == 2, "  no temporary files left (%d entries)", count_entries(out));
    for (int s = 0; s < 2; s++) stream_free(&got[s]);
    snprintf(args, sizeof args, "--input '%s/corpus' --out '%s' --overwrite", fix, out);
    check(prepare(args) == 0, "--overwrite replaces the set");
    check(read_set(out, got, NULL, 0) && got[0].n_docs + got[1].n_docs == 11, "  the new set "
          "reads back (11 documents)");
    for (int s = 0; s < 2; s++) stream_free(&got[s]);
}

// The index's specials and frame.
static bool index_frame_is(const char *dir, const char *specials, const uint32_t *prefix,
                           size_t np, const uint32_t *suffix, size_t ns) {
    char err[1024], base[600];
    shard_index ix;
    if (!shard_index_read(dir, &ix, base, sizeof base, err, sizeof err)) {
        printf("    %s\n", err);
        return false;
    }
    bool ok = !strcmp(ix.specials, specials) && ix.frame.n_prefix == np &&
              ix.frame.n_suffix == ns &&
              (!np || !memcmp(ix.frame.prefix, prefix, np * sizeof *prefix)) &&
              (!ns || !memcmp(ix.frame.suffix, suffix, ns * sizeof *suffix));
    if (!ok) printf("    index: specials \"%s\", %zu + %zu frame ids\n", ix.specials,
                    ix.frame.n_prefix, ix.frame.n_suffix);
    shard_index_free(&ix);
    return ok;
}

// Documents sampling over the set: every document start the sampler reports (doc_start[t] == t,
// t > 0) holds `bos`, and every `bos` in a row is a document start.
static bool starts_at_bos(const char *dir, uint32_t bos, int *starts) {
    char err[1024];
    data_source src;
    if (!data_source_open(&src, dir, "", err, sizeof err)) {
        printf("    %s\n", err);
        return false;
    }
    enum { B = 4, T = 48 };
    sampler_params p = {.src = &src, .split = DATA_SPLIT_TRAIN, .documents = true, .B = B,
                        .T = T, .seed = 3, .rank = 0, .world = 1, .n_mb = 1};
    batch_sampler sm;
    bool ok = sampler_init(&sm, &p, err, sizeof err);
    if (!ok) printf("    %s\n", err);
    int32_t x[B * T], y[B * T], ds[B * T];
    *starts = 0;
    for (int step = 0; ok && step < 100; step++) {
        sampler_next(&sm, x, y, ds);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                bool start = ds[b * T + t] == t, is_bos = x[b * T + t] == (int32_t)bos;
                if (t > 0 && start != is_bos) ok = false;
                *starts += t > 0 && start;
            }
    }
    if (ok || sm.row) sampler_free(&sm);
    data_source_close(&src);
    return ok;
}

static void test_specials(void) {
    printf("== --specials: the tokenizer.json post-processor's template around each document\n");
    char args[6144], exp[800], tokdir[800], tokpath[900], big[600], out[3][600];
    snprintf(exp, sizeof exp, "%s/expected-file.jsonl", fix);
    snprintf(tokdir, sizeof tokdir, "%s/../tokenizers", fix);
    snprintf(big, sizeof big, "%s/specials-long.txt", tmp);
    write_big(big, 12000, true);   // 12 kB: pieces of 1 KiB at --batch-bytes 4096
    const char *common = "--val-fraction 0.3 --seed 7 --shard-tokens 300 --batch-bytes 4096";
    static const struct {
        const char *file, *what;
    } toks[] = {{"llama3_post_bpe.json", "Llama 3: Sequence[ByteLevel, TemplateProcessing]"},
                {"bert_bpe.json", "BertProcessing"},
                {"gpt2_bpe.json", "no post_processor"}};
    for (int k = 0; k < 3; k++) {
        char err[1024];
        snprintf(tokpath, sizeof tokpath, "%s/%s", tokdir, toks[k].file);
        gdn_tokenizer *tok = tok_load(tokpath, err, sizeof err);
        if (!tok) gdn_die("%s", err);
        tok_template tp = tok_get_template(tok);
        uint32_t eot = (uint32_t)tok_eot(tok);
        printf("  -- %s (%s): template %zu + %zu ids, eot %u\n", toks[k].file, toks[k].what,
               tp.n_prefix, tp.n_suffix, eot);
        const char *modes[3] = {"", "--specials template --threads 2", "--specials none"};
        for (int m = 0; m < 3; m++) {
            snprintf(out[m], sizeof out[m], "%s/specials-%d-%d", tmp, k, m);
            snprintf(args, sizeof args, "--input '%s/corpus' --input '%s' --tokenizer '%s' "
                     "--out '%s' %s %s", fix, big, tokpath, out[m], common, modes[m]);
            check(prepare(args) == 0, "%s: exit 0", m == 0 ? "default" : modes[m]);
        }
        stream got[3][2], want[2][2];
        for (int m = 0; m < 3; m++) read_set(out[m], got[m], NULL, 0);
        expected_docs(exp, big, tok, FRAME_TEMPLATE, 7, 0.3, want[0]);
        expected_docs(exp, big, tok, FRAME_NONE, 7, 0.3, want[1]);
        bool tpl = tp.n_prefix + tp.n_suffix > 0;
        check(stream_eq(&got[0][0], &want[0][0]) && stream_eq(&got[0][1], &want[0][1]),
              "default: each document = %s (%zu + %zu docs, %zu tokens)",
              tpl ? "encode(text, add_special_tokens=True) + [eot]" : "[eot] + encode(text)",
              got[0][0].n_docs, got[0][1].n_docs, got[0][0].n + got[0][1].n);
        check(stream_eq(&got[1][0], &got[0][0]) && stream_eq(&got[1][1], &got[0][1]),
              "--specials template, 2 threads: the same tokens and offsets");
        check(stream_eq(&got[2][0], &want[1][0]) && stream_eq(&got[2][1], &want[1][1]),
              "--specials none: [eot] + encode(text), the layout without templates");
        // offsets at each BOS: the first id of every document is the template's first, and it
        // appears nowhere else
        if (tpl) {
            size_t at_start = 0, docs = 0, elsewhere = 0, ends = 0;
            for (int sp = 0; sp < 2; sp++) {
                const stream *g = &got[0][sp];
                docs += g->n_docs;
                for (size_t d = 0; d < g->n_docs; d++) {
                    uint64_t a = d ? g->off[d] : 0, b = g->off[d + 1];   // (off[0] is unset)
                    at_start += b > a && g->tok[a] == tp.prefix[0];
                    ends += b > a && g->tok[b - 1] == eot;
                    for (uint64_t i = a + 1; i < b; i++) elsewhere += g->tok[i] == tp.prefix[0];
                }
            }
            check(docs > 0 && at_start == docs && ends == docs && elsewhere == 0,
                  "every offset points at its document's %u (%zu/%zu), the eot ends each "
                  "(%zu), %zu elsewhere", tp.prefix[0], at_start, docs, ends, elsewhere);
            int starts = 0;
            bool bos_ok = starts_at_bos(out[0], tp.prefix[0], &starts);
            check(bos_ok && starts >= 10, "documents sampling: the %d document starts in 100 "
                  "batches of 4 x 48 are the %u tokens", starts, tp.prefix[0]);
        }
        uint32_t suffix[8];
        if (tp.n_suffix) memcpy(suffix, tp.suffix, tp.n_suffix * sizeof *suffix);
        suffix[tp.n_suffix] = eot;
        check(tpl ? index_frame_is(out[0], "template", tp.prefix, tp.n_prefix, suffix,
                                   tp.n_suffix + 1)
                  : index_frame_is(out[0], "template", &eot, 1, NULL, 0),
              "index.json: specials \"template\", doc_prefix / doc_suffix the frame "
              "(shards: attribute specials too)");
        check(index_frame_is(out[2], "none", &eot, 1, NULL, 0),
              "--specials none: index.json specials \"none\", doc_prefix [eot], doc_suffix []");
        // a mix must frame its documents alike
        char mix[4200];
        data_source src;
        snprintf(mix, sizeof mix, "%s:1, %s:1", out[0], out[2]);
        bool opened = data_source_open(&src, out[0], mix, err, sizeof err);
        if (opened) data_source_close(&src);
        if (tpl)
            check(!opened && strstr(err, "frame its documents alike") && strstr(err, out[2]),
                  "data.mix of the template set and the none set: refused, naming the set");
        else
            check(opened, "data.mix of the template and none sets (the same frame): opens");
        if (!opened) printf("    message: %s\n", err);
        for (int m = 0; m < 3; m++)
            for (int sp = 0; sp < 2; sp++) stream_free(&got[m][sp]);
        for (int m = 0; m < 2; m++)
            for (int sp = 0; sp < 2; sp++) stream_free(&want[m][sp]);
        tok_free(tok);
    }
    snprintf(args, sizeof args, "--input '%s/corpus' --out '%s/specials-bad' --specials bos", fix,
             tmp);
    check(prepare(args) == 2 && log_has("--specials must be template or none"),
          "--specials bos: usage error naming the choices");
}

static void remove_all(const char *dir) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

int main(int argc, char **argv) {
    const char *bdir = argc > 2 ? argv[1] : getenv("GDN_BINARY_DIR");
    const char *sdir = argc > 2 ? argv[2] : getenv("GDN_SOURCE_DIR");
    if (!bdir || !sdir) {
        fprintf(stderr, "usage: test_prepare_shards BINARY_DIR SOURCE_DIR\n");
        return 2;
    }
    snprintf(bin, sizeof bin, "%s/gdn-prepare", bdir);
    snprintf(fix, sizeof fix, "%s/tests/fixtures/prepare", sdir);
    snprintf(tmp, sizeof tmp, "%s/gdn-test-prepare-shards-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) gdn_die("mkdtemp failed");
    test_parity();
    test_specials();
    test_big_document();
    test_bad_inputs();
    test_memory();
    printf("\ntest_prepare_shards: %d checks, %d failed\n", gc_checks, gc_failures);
    if (gc_failures == 0) remove_all(tmp);
    else printf("(files kept in %s)\n", tmp);
    return gc_failures ? 1 : 0;
}
