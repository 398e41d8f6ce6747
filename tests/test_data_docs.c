// test_data_docs.c — token shard sets, packed documents and data.mix (DESIGN 5, dataset.h).
//
// Shard sets are written by a test-only writer (shard_fixture.h) following the shard contract.
// Documents are recognisable: a document's first token is its eot (eot sets) or a marker >= 1000
// (sets without eot), every other token < 1000, so a row shows where its documents start.
// Checked: windows over a shard set are bitwise the windows over a v1 file of the same tokens
// (windows cross shard boundaries); documents rows overlap by one token and form the stream;
// doc_start is the last document start at or before each token; every document of the split
// appears exactly once per epoch, in another order each epoch; the rows of 1, 2 and 4 ranks and
// of grad_accum splits are world 1's; resume at any pos gives the same batches, with and without
// prefetch; whole-split tiling; a mix's proportions and per-set streams; malformed index.json,
// a missing shard, a vocabulary mismatch (shard vs index, set vs set) and bad data.mix text give
// a message naming the file.
#define CHECK_WIDTH 92  // the width of the described column
#include "check.h"
#include "shard_fixture.h"
#include "../src/data/dataset.h"
#include <sys/stat.h>
#include <unistd.h>

static char dir[512];

#define VOCAB 2000
#define MARK 1000  // tokens >= MARK open a document

// Documents of one split: lengths in [2, max_len], first token eot or a marker, the rest drawn
// from [lo, lo + 400) (a set's own range, so a row tells which set of a mix it came from).
typedef struct {
    uint32_t *tok;
    uint64_t *offs;
    size_t n_docs;
} docs;

static docs make_docs(size_t n_docs, int max_len, int eot, uint32_t lo, rng_t *r) {
    docs d = {.offs = gdn_malloc(sizeof(uint64_t) * (n_docs + 1)), .n_docs = n_docs};
    d.offs[0] = 0;
    for (size_t i = 0; i < n_docs; i++) d.offs[i + 1] = d.offs[i] + 2 + rng_below(r, (uint64_t)max_len - 1);
    d.tok = gdn_malloc(sizeof(uint32_t) * d.offs[n_docs]);
    for (size_t i = 0; i < n_docs; i++) {
        d.tok[d.offs[i]] = eot >= 0 ? (uint32_t)eot : MARK + (uint32_t)(i % 900);
        for (uint64_t t = d.offs[i] + 1; t < d.offs[i + 1]; t++) d.tok[t] = lo + (uint32_t)rng_below(r, 400);
    }
    return d;
}

static void free_docs(docs *d) {
    free(d->tok);
    free(d->offs);
}

static uint64_t hash_tokens(const int32_t *x, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)x[i]) * 1099511628211ull;
    return h ^ n;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void write_set(const char *name, const shard_meta *m, docs *tr, docs *va, uint64_t shard_tokens,
                      char *out, size_t outlen) {
    snprintf(out, outlen, "%s/%s", dir, name);
    if (mkdir(out, 0755) != 0) gdn_die("mkdir %s: %s", out, strerror(errno));
    const fx_split sp[2] = {{tr->tok, tr->offs, tr->n_docs}, {va->tok, va->offs, va->n_docs}};
    fx_write_set(out, m, sp, shard_tokens);
}

static bool init_s(batch_sampler *s, const data_source *src, int split, bool documents, int B,
                   int T, uint64_t seed, int rank, int world, int n_mb, uint64_t pos, bool prefetch,
                   char *err, size_t errlen) {
    const sampler_params p = {.src = src, .split = split, .documents = documents, .B = B, .T = T,
                              .seed = seed, .rank = rank, .world = world, .n_mb = n_mb, .pos = pos,
                              .prefetch = prefetch};
    return sampler_init(s, &p, err, errlen);
}

// `steps` steps of world x n_mb samplers of B / (world n_mb) rows each, assembled into world 1's
// layout: row j of step s at ((s G + j) T); G = B. prefetch on rank 0 only.
static void collect(const data_source *src, int split, bool documents, int B, int T, int world,
                    int n_mb, int steps, int32_t *x, int32_t *y, int32_t *ds) {
    const int b = B / (world * n_mb);
    char err[1024];
    batch_sampler *s = gdn_malloc(sizeof(batch_sampler) * (size_t)world);
    for (int r = 0; r < world; r++)
        if (!init_s(&s[r], src, split, documents, b, T, 77, r, world, n_mb, 0, r == 0, err, sizeof err))
            gdn_die("%s", err);
    const size_t bt = (size_t)b * T;
    for (int st = 0; st < steps; st++)
        for (int mb = 0; mb < n_mb; mb++)
            for (int r = 0; r < world; r++) {
                size_t at = (size_t)st * B * T + (size_t)(mb * world + r) * bt;
                sampler_next(&s[r], x + at, y + at, ds ? ds + at : NULL);
            }
    for (int r = 0; r < world; r++) sampler_free(&s[r]);
    free(s);
}

// The checks on rows of one set's stream (rows R = 0, 1, ... in order): consecutive rows overlap
// by one token; doc_start is the last marker at or before each token; returns the stream.
static int32_t *check_rows(const int32_t *x, const int32_t *y, const int32_t *ds, size_t rows,
                           int T, const char *what) {
    size_t bad_ds = 0, bad_overlap = 0, bad_shift = 0;
    int32_t *stream = gdn_malloc(sizeof(int32_t) * (rows * (size_t)T + 1));
    for (size_t r = 0; r < rows; r++) {
        const int32_t *xr = x + r * T, *yr = y + r * T, *dr = ds + r * T;
        int32_t cur = 0;
        for (int t = 0; t < T; t++) {
            if (xr[t] >= MARK) cur = t;
            bad_ds += dr[t] != cur;
            if (t + 1 < T) bad_shift += yr[t] != xr[t + 1];
            stream[r * T + t] = xr[t];
        }
        if (r + 1 < rows) bad_overlap += yr[T - 1] != x[(r + 1) * T];
        stream[r * T + T] = yr[T - 1];
    }
    check(bad_ds == 0 && bad_shift == 0, "%s: doc_start = the last document start at or before "
          "each token; y = x shifted (%zu, %zu bad)", what, bad_ds, bad_shift);
    check(bad_overlap == 0, "%s: row R + 1 starts where row R ends (stream offsets R T)", what);
    return stream;
}

// The documents of stream [from, from + n) (it starts at a document start), hashed and sorted,
// against the split's documents: each exactly once.
static bool same_documents(const int32_t *stream, size_t n, const docs *d) {
    uint64_t *got = gdn_malloc(sizeof(uint64_t) * (d->n_docs + 1)), *want = gdn_malloc(sizeof(uint64_t) * d->n_docs);
    size_t ng = 0, start = 0;
    bool ok = stream[0] >= MARK;
    for (size_t i = 1; i <= n && ok; i++)
        if (i == n || stream[i] >= MARK) {
            if (ng == d->n_docs) {
                ok = false;
                break;
            }
            got[ng++] = hash_tokens(stream + start, i - start);
            start = i;
        }
    int32_t *tmp = gdn_malloc(sizeof(int32_t) * 4096);
    for (size_t i = 0; i < d->n_docs; i++) {
        size_t len = d->offs[i + 1] - d->offs[i];
        for (size_t t = 0; t < len; t++) tmp[t] = (int32_t)d->tok[d->offs[i] + t];
        want[i] = hash_tokens(tmp, len);
    }
    ok = ok && ng == d->n_docs;
    if (ok) {
        qsort(got, ng, sizeof *got, cmp_u64);
        qsort(want, ng, sizeof *want, cmp_u64);
        ok = memcmp(got, want, ng * sizeof *got) == 0;
    }
    free(tmp);
    free(got);
    free(want);
    return ok;
}

static void documents_tests(int eot) {
    printf("\n== documents sampling, %s\n", eot >= 0 ? "eot opens each document" : "no eot (markers)");
    rng_t r;
    rng_init(&r, 7 + (uint64_t)(eot + 1), 0);
    const int T = 32, B = 8;
    docs tr = make_docs(300, 3 * T, eot, 0, &r), va = make_docs(40, 2 * T, eot, 0, &r);
    shard_meta m = {.vocab_size = VOCAB, .eot_token = eot, .kind = "bpe",
                    .blob = (const uint8_t *)"{\"model\": {}}", .blob_len = 13};
    char path[700], err[1024];
    write_set(eot >= 0 ? "docs-eot" : "docs-noeot", &m, &tr, &va, 1500, path, sizeof path);
    data_source src;
    bool ok = data_source_open(&src, path, "", err, sizeof err);
    check(ok && src.set[0].sharded && src.set[0].n_shards[0] > 3 && src.set[0].n_docs[0] == 300 &&
              src.set[0].n_tokens[0] == tr.offs[300] && src.set[0].tokenizer_blob_len == 13,
          "open %s: %d train shards, 300 documents, %llu tokens, the blob", path,
          ok ? src.set[0].n_shards[0] : -1, (unsigned long long)tr.offs[300]);
    if (!ok) {
        printf("    %s\n", err);
        return;
    }
    const uint64_t N = tr.offs[300];
    const int steps = (int)(2 * N / ((uint64_t)B * T)) + 3;  // two epochs and a bit
    const size_t all = (size_t)steps * B * T;
    int32_t *x = gdn_malloc(4 * all), *y = gdn_malloc(4 * all), *ds = gdn_malloc(4 * all);
    int32_t *x2 = gdn_malloc(4 * all), *y2 = gdn_malloc(4 * all), *ds2 = gdn_malloc(4 * all);
    collect(&src, DATA_SPLIT_TRAIN, true, B, T, 1, 1, steps, x, y, ds);
    int32_t *stream = check_rows(x, y, ds, (size_t)steps * B, T, "world 1");
    check(same_documents(stream, (size_t)N, &tr), "epoch 0: every document of the split exactly once");
    check(same_documents(stream + N, (size_t)N, &tr), "epoch 1: every document exactly once again");
    check(memcmp(stream, stream + N, 4 * 64) != 0, "epoch 1 has another order than epoch 0");
    if (eot >= 0) {
        size_t bad = 0;
        for (size_t i = 0; i < all; i++)
            if (i % T > 0) bad += (x[i] == eot) != (ds[i] == (int32_t)(i % T));
        check(bad == 0, "a document's start is its eot token");
    }

    // the rows of world 2 and 4, and of grad_accum splits, are world 1's
    const int splits[][2] = {{2, 1}, {4, 1}, {1, 2}, {2, 2}, {1, 8}};
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        collect(&src, DATA_SPLIT_TRAIN, true, B, T, splits[i][0], splits[i][1], steps, x2, y2, ds2);
        check(!memcmp(x, x2, 4 * all) && !memcmp(y, y2, 4 * all) && !memcmp(ds, ds2, 4 * all),
              "world %d x grad_accum %d (B %d each): the union of the rows is world 1's",
              splits[i][0], splits[i][1], B / (splits[i][0] * splits[i][1]));
    }
    // resume at any pos (2 ranks x 2 micro-batches: pos counts micro-batches)
    size_t bad = 0;
    for (uint64_t pos = 0; pos < (uint64_t)steps * 2; pos += 3) {
        batch_sampler s;
        const int b = B / 4;
        const size_t bt = (size_t)b * T;
        if (!init_s(&s, &src, DATA_SPLIT_TRAIN, true, b, T, 77, 1, 2, 2, pos, pos % 2 == 0, err, sizeof err))
            gdn_die("%s", err);
        for (uint64_t p = pos; p < GDN_MIN(pos + 4, (uint64_t)steps * 2); p++) {
            sampler_next(&s, x2, y2, ds2);
            size_t at = (size_t)(p / 2) * B * T + (size_t)((p % 2) * 2 + 1) * bt;
            bad += memcmp(x2, x + at, 4 * bt) != 0 || memcmp(y2, y + at, 4 * bt) != 0 ||
                   memcmp(ds2, ds + at, 4 * bt) != 0;
        }
        sampler_free(&s);
    }
    check(bad == 0, "resume at every 3rd pos (rank 1 of 2, 2 micro-batches, prefetch on and off): "
          "the same batches");
    // a prefetching sampler whose pos is moved by hand
    {
        batch_sampler s;
        init_s(&s, &src, DATA_SPLIT_TRAIN, true, B, T, 77, 0, 1, 1, 0, true, err, sizeof err);
        sampler_next(&s, x2, y2, ds2);
        s.pos = 5;
        sampler_next(&s, x2, y2, ds2);
        const size_t at = (size_t)5 * B * T;
        check(s.documents && !memcmp(x2, x + at, 4 * (size_t)B * T) &&
                  !memcmp(ds2, ds + at, 4 * (size_t)B * T),
              "prefetch: pos set to 5 by hand -> batch 5 with its doc starts");
        sampler_next(&s, x2, y2, NULL);  // doc_start may be NULL
        check(!memcmp(x2, x + at + (size_t)B * T, 4 * (size_t)B * T), "doc_start NULL: next batch");
        sampler_free(&s);
    }
    // whole-split tiling: rows at eval_full_start offsets of epoch 0's stream
    {
        batch_sampler s;
        const uint64_t NV = va.offs[40];
        init_s(&s, &src, DATA_SPLIT_VAL, true, 4, T, 77, 0, 1, 1, 0, false, err, sizeof err);
        uint64_t nb = sampler_tile_split(&s), W = nb * 4;
        int32_t *vx = gdn_malloc(4 * (size_t)W * T), *vy = gdn_malloc(4 * (size_t)W * T),
                *vd = gdn_malloc(4 * (size_t)W * T);
        for (uint64_t i = 0; i < nb; i++)
            sampler_next(&s, vx + i * 4 * T, vy + i * 4 * T, vd + i * 4 * T);
        sampler_free(&s);
        // epoch 0 of the val stream from rows at R T
        const int rows = (int)(NV / (uint64_t)T) + 2;
        int32_t *ex = gdn_malloc(4 * (size_t)rows * T), *ey = gdn_malloc(4 * (size_t)rows * T),
                *ed = gdn_malloc(4 * (size_t)rows * T);
        collect(&src, DATA_SPLIT_VAL, true, 1, T, 1, 1, rows, ex, ey, ed);
        int32_t *vs = check_rows(ex, ey, ed, (size_t)rows, T, "val rows");
        check(same_documents(vs, (size_t)NV, &va), "val epoch 0: every document once");
        size_t bt = 0;
        for (uint64_t j = 0; j < W; j++) {
            uint64_t st = eval_full_start(j, W, NV, (uint64_t)T);
            bt += memcmp(vx + j * T, vs + st, 4 * (size_t)T) != 0 || vy[j * T + T - 1] != vs[st + T];
        }
        check(bt == 0 && W * T >= NV - 1, "tiling: %llu rows at eval_full_start cover the val "
              "stream's %llu tokens", (unsigned long long)W, (unsigned long long)NV);
        free(vs);
        free(ex), free(ey), free(ed), free(vx), free(vy), free(vd);
    }
    free(stream);
    free(x), free(y), free(ds), free(x2), free(y2), free(ds2);
    data_source_close(&src);
    free_docs(&tr);
    free_docs(&va);
}

// Windows over a shard set = windows over a v1 file of the same tokens (windows cross shards).
static void windows_tests(void) {
    printf("\n== windows over a shard set\n");
    rng_t r;
    rng_init(&r, 11, 0);
    const int T = 48, B = 4, P = 40;
    docs tr = make_docs(200, 100, 1999, 0, &r), va = make_docs(30, 60, 1999, 0, &r);
    shard_meta m = {.vocab_size = VOCAB, .eot_token = 1999, .kind = "bytes"};
    char sp[700], v1[700], err[1024];
    write_set("win", &m, &tr, &va, 700, sp, sizeof sp);
    snprintf(v1, sizeof v1, "%s/win-v1.h5", dir);
    if (!tokfile_write(v1, VOCAB, "bytes", 1999, tr.tok, tr.offs[200], va.tok, va.offs[30], err, sizeof err))
        gdn_die("%s", err);
    data_source a, b;
    char idx[800];
    snprintf(idx, sizeof idx, "%s/index.json", sp);
    bool ok = data_source_open(&a, idx, "", err, sizeof err) && data_source_open(&b, v1, "", err, sizeof err);
    check(ok, "open the set by its index.json, and the v1 file");
    if (!ok) {
        printf("    %s\n", err);
        return;
    }
    const size_t all = (size_t)P * B * T;
    int32_t *x1 = gdn_malloc(4 * all), *y1 = gdn_malloc(4 * all), *x2 = gdn_malloc(4 * all),
            *y2 = gdn_malloc(4 * all);
    for (int split = 0; split < 2; split++) {
        collect(&a, split, false, B, T, 1, 1, P, x1, y1, NULL);
        collect(&b, split, false, B, T, 1, 1, P, x2, y2, NULL);
        check(!memcmp(x1, x2, 4 * all) && !memcmp(y1, y2, 4 * all),
              "%s: %d batches from %d shards == from the v1 file, bitwise", split ? "val" : "train",
              P, a.set[0].n_shards[split]);
    }
    collect(&a, 0, false, B, T, 2, 2, P, x2, y2, NULL);
    collect(&a, 0, false, B, T, 1, 1, P, x1, y1, NULL);
    check(!memcmp(x1, x2, 4 * all), "shard set windows: 2 ranks x 2 micro-batches == world 1");
    // a window across a shard boundary reads both shards
    int32_t w[96];
    const token_shard *s1 = &a.set[0].shards[0][1];
    tokset_read(&a.set[0], 0, s1->start - 40, 96, w);
    size_t bad = 0;
    for (int i = 0; i < 96; i++) bad += (uint32_t)w[i] != tr.tok[s1->start - 40 + (uint64_t)i];
    check(bad == 0, "tokset_read across the boundary of shards 0 and 1");
    free(x1), free(y1), free(x2), free(y2);
    data_source_close(&a);
    data_source_close(&b);
    free_docs(&tr);
    free_docs(&va);
}

// data.mix: proportions, rows of one set each, each set's rows its own stream, splits, resume.
static void mix_tests(void) {
    printf("\n== data.mix\n");
    rng_t r;
    rng_init(&r, 12, 0);
    const int T = 16, B = 8;
    shard_meta m = {.vocab_size = VOCAB, .eot_token = 1999, .kind = "bytes"};
    docs ta = make_docs(150, 40, 1999, 0, &r), va = make_docs(20, 40, 1999, 0, &r);
    docs tb = make_docs(90, 40, 1999, 500, &r), vb = make_docs(20, 40, 1999, 500, &r);
    char pa[700], pb[700], mix[2400], err[1024];
    write_set("mix-a", &m, &ta, &va, 900, pa, sizeof pa);
    write_set("mix-b", &m, &tb, &vb, 900, pb, sizeof pb);
    snprintf(mix, sizeof mix, " %s:1 , %s:3", pa, pb);
    data_source src;
    bool ok = data_source_open(&src, "ignored", mix, err, sizeof err);
    check(ok && src.n == 2 && fabs(src.weight[0] - 0.25) < 1e-15 && fabs(src.weight[1] - 0.75) < 1e-15,
          "data.mix \"A:1 , B:3\": 2 sets, weights 0.25, 0.75");
    if (!ok) {
        printf("    %s\n", err);
        return;
    }
    for (int documents = 0; documents < 2; documents++) {
        const int steps = 250;
        const size_t rows = (size_t)steps * B, all = rows * T;
        int32_t *x = gdn_malloc(4 * all), *y = gdn_malloc(4 * all), *ds = gdn_malloc(4 * all);
        int32_t *x2 = gdn_malloc(4 * all), *y2 = gdn_malloc(4 * all), *ds2 = gdn_malloc(4 * all);
        collect(&src, DATA_SPLIT_TRAIN, documents, B, T, 1, 1, steps, x, y, documents ? ds : NULL);
        // which set each row came from; rows never mix sets
        size_t cnt[2] = {0, 0}, mixed = 0;
        int32_t *sx[2], *sy[2], *sd[2];
        for (int k = 0; k < 2; k++) {
            sx[k] = gdn_malloc(4 * all), sy[k] = gdn_malloc(4 * all), sd[k] = gdn_malloc(4 * all);
        }
        for (size_t i = 0; i < rows; i++) {
            int a = 0, b = 0;
            for (int t = 0; t < T; t++) {
                a += x[i * T + t] < 500;
                b += x[i * T + t] >= 500 && x[i * T + t] < MARK;
            }
            int k = b > 0;
            mixed += a > 0 && b > 0;
            memcpy(sx[k] + cnt[k] * T, x + i * T, 4 * (size_t)T);
            memcpy(sy[k] + cnt[k] * T, y + i * T, 4 * (size_t)T);
            if (documents) memcpy(sd[k] + cnt[k] * T, ds + i * T, 4 * (size_t)T);
            cnt[k]++;
        }
        check(mixed == 0 && labs((long)cnt[0] - (long)rows / 4) <= 2,
              "%s: %zu of %zu rows from A (weight 0.25: %zu +- 2), none mixed", documents ? "documents" : "windows",
              cnt[0], rows, rows / 4);
        if (documents) {
            for (int k = 0; k < 2; k++) {
                const docs *d = k ? &tb : &ta;
                char what[64];
                snprintf(what, sizeof what, "set %c's rows in order", 'A' + k);
                int32_t *st = check_rows(sx[k], sy[k], sd[k], cnt[k], T, what);
                check(cnt[k] * T >= d->offs[d->n_docs] && same_documents(st, d->offs[d->n_docs], d),
                      "%s: its epoch 0 holds each of its documents once", what);
                free(st);
            }
        }
        collect(&src, DATA_SPLIT_TRAIN, documents, B, T, 2, 2, steps, x2, y2, documents ? ds2 : NULL);
        check(!memcmp(x, x2, 4 * all) && !memcmp(y, y2, 4 * all) && (!documents || !memcmp(ds, ds2, 4 * all)),
              "%s mix: 2 ranks x 2 micro-batches == world 1", documents ? "documents" : "windows");
        collect(&src, DATA_SPLIT_TRAIN, documents, B, T, 4, 1, steps, x2, y2, documents ? ds2 : NULL);
        check(!memcmp(x, x2, 4 * all), "%s mix: 4 ranks == world 1", documents ? "documents" : "windows");
        batch_sampler s;
        init_s(&s, &src, DATA_SPLIT_TRAIN, documents, B, T, 77, 0, 1, 1, 123, true, err, sizeof err);
        sampler_next(&s, x2, y2, ds2);
        check(!memcmp(x2, x + (size_t)123 * B * T, 4 * (size_t)B * T),
              "%s mix: resume at pos 123 gives batch 123", documents ? "documents" : "windows");
        sampler_free(&s);
        for (int k = 0; k < 2; k++) free(sx[k]), free(sy[k]), free(sd[k]);
        free(x), free(y), free(ds), free(x2), free(y2), free(ds2);
    }
    // proportions of three sets over many rows (the interleave, no file reads needed beyond init)
    {
        data_source s3;
        snprintf(mix, sizeof mix, "%s:0.1,%s:0.3,%s:0.6", pa, pb, pa);
        ok = data_source_open(&s3, "", mix, err, sizeof err);
        check(ok && s3.n == 3, "data.mix of 3 entries (a set may appear twice)");
        batch_sampler s;
        init_s(&s, &s3, DATA_SPLIT_TRAIN, false, 100, T, 1, 0, 1, 1, 0, false, err, sizeof err);
        int32_t *bx = gdn_malloc(4 * 100 * (size_t)T), *by = gdn_malloc(4 * 100 * (size_t)T);
        size_t cb = 0, n = 0;
        for (int i = 0; i < 100; i++) {
            sampler_next(&s, bx, by, NULL);
            for (int b = 0; b < 100; b++, n++) {
                bool isb = false;
                for (int t = 0; t < T; t++) isb |= bx[b * T + t] >= 500 && bx[b * T + t] < MARK;
                cb += isb;
            }
        }
        check(labs((long)cb - 3000) <= 2, "weights 0.1 / 0.3 / 0.6: %zu of %zu rows from the 0.3 set",
              cb, n);
        sampler_free(&s);
        free(bx), free(by);
        data_source_close(&s3);
    }
    data_source_close(&src);
    free_docs(&ta), free_docs(&va), free_docs(&tb), free_docs(&vb);
}

// A failing open: false, and the message holds `want` (a file name) and `also`.
static void expect_fail(const char *path, const char *mix, const char *want, const char *also,
                        const char *what) {
    data_source s;
    char err[2048] = "";
    bool ok = data_source_open(&s, path, mix, err, sizeof err);
    check(!ok && strstr(err, want) && (!also || strstr(err, also)), "%s -> false, names the file", what);
    printf("    message: %s\n", err);
    if (ok) data_source_close(&s);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) gdn_die("cannot write %s", path);
}

static void error_tests(void) {
    printf("\n== bad sets\n");
    rng_t r;
    rng_init(&r, 13, 0);
    docs tr = make_docs(30, 40, 1999, 0, &r), va = make_docs(5, 40, 1999, 0, &r);
    shard_meta m = {.vocab_size = VOCAB, .eot_token = 1999, .kind = "bytes"};
    char good[700], p[900], idx[900], err[1024];
    write_set("good", &m, &tr, &va, 300, good, sizeof good);
    snprintf(idx, sizeof idx, "%s/index.json", good);

    char d[700];
    snprintf(d, sizeof d, "%s/badjson", dir);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/index.json", d);
    write_text(p, "{\"format\": \"gdn-token-index\", \"version\": 1,\n \"vocab_size\": 2000 oops}");
    expect_fail(d, "", p, ":2:", "index.json that is not JSON (line 2)");
    write_text(p, "{\"format\": \"gdn-token-index\", \"version\": 1, \"eot_token\": -1, "
                  "\"tokenizer_kind\": \"bytes\", \"shards\": []}");
    expect_fail(p, "", p, "'vocab_size'", "index.json without vocab_size");
    write_text(p, "{\"format\": \"something-else\", \"version\": 1}");
    expect_fail(p, "", p, "'format'", "index.json of another format");
    write_text(p, "{\"format\": \"gdn-token-index\", \"version\": 1, \"vocab_size\": 2000, "
                  "\"eot_token\": -1, \"tokenizer_kind\": \"bytes\", \"shards\": [{\"path\": "
                  "\"train-000000.h5\", \"split\": \"train\", \"tokens\": 10, \"documents\": 1}]}");
    expect_fail(p, "", "train-000000.h5", "missing", "a shard listed but missing");
    write_text(p, "{\"format\": \"gdn-token-index\", \"version\": 1, \"vocab_size\": 2000, "
                  "\"eot_token\": -1, \"tokenizer_kind\": \"bytes\", \"shards\": [{\"path\": "
                  "\"../train-000000.h5\", \"split\": \"train\", \"tokens\": 10, \"documents\": 1}]}");
    expect_fail(p, "", p, "relative path", "a shard path outside the index's directory");
    // the good set's index with another vocab_size than its shards
    snprintf(d, sizeof d, "%s/good/index.json", dir);
    FILE *f = fopen(d, "r");
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *v = strstr(text, "\"vocab_size\": 2000");
    check(v != NULL, "fixture index.json holds \"vocab_size\": 2000");
    if (v) {
        memcpy(v, "\"vocab_size\": 3000", 18);
        snprintf(p, sizeof p, "%s/good/index-v3000.json", dir);
        write_text(p, text);
        expect_fail(p, "", "train-000000.h5", "'vocab_size' is 2000", "a shard of vocab 2000 in an index of 3000");
    }
    // totals that do not add up
    v = strstr(text, "\"vocab_size\": 3000");
    if (v) memcpy(v, "\"vocab_size\": 2000", 18);
    char *tot = strstr(text, "\"totals\"");
    char *tk = tot ? strstr(tot, "\"tokens\": ") : NULL;
    if (tk) {
        tk[10] = tk[10] == '9' ? '8' : '9';
        snprintf(p, sizeof p, "%s/good/index-totals.json", dir);
        write_text(p, text);
        expect_fail(p, "", p, "totals", "totals that differ from the shards' sum");
    }
    // mix: sets of different vocabularies
    docs t2 = make_docs(30, 40, 2999, 0, &r), v2 = make_docs(5, 40, 2999, 0, &r);
    shard_meta m2 = {.vocab_size = 3000, .eot_token = 2999, .kind = "bytes"};
    char other[700], mix[2400];
    write_set("vocab3000", &m2, &t2, &v2, 300, other, sizeof other);
    snprintf(mix, sizeof mix, "%s:1, %s:1", good, other);
    expect_fail("", mix, other, "vocab_size", "data.mix of vocab 2000 and vocab 3000 sets");
    snprintf(mix, sizeof mix, "%s:0", good);
    expect_fail("", mix, good, "weight > 0", "data.mix weight 0");
    snprintf(mix, sizeof mix, "%s", good);
    expect_fail("", mix, good, "PATH:WEIGHT", "data.mix entry without a weight");
    snprintf(mix, sizeof mix, "%s:1, %s/nothing-here:2", good, dir);
    expect_fail("", mix, "nothing-here", NULL, "data.mix naming a missing set");
    // documents sampling needs document offsets: a v1 file has none
    snprintf(p, sizeof p, "%s/v1.h5", dir);
    if (!tokfile_write(p, VOCAB, "bytes", -1, tr.tok, tr.offs[30], va.tok, va.offs[5], err, sizeof err))
        gdn_die("%s", err);
    data_source s;
    if (!data_source_open(&s, p, "", err, sizeof err)) gdn_die("%s", err);
    batch_sampler bs;
    bool ok = init_s(&bs, &s, DATA_SPLIT_TRAIN, true, 2, 8, 1, 0, 1, 1, 0, false, err, sizeof err);
    check(!ok && strstr(err, p) && strstr(err, "document offsets"), "documents sampling of a v1 "
          "file -> false, names it");
    printf("    message: %s\n", err);
    data_source_close(&s);
    free_docs(&tr), free_docs(&va), free_docs(&t2), free_docs(&v2);
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gdn-test-docs-XXXXXX", base && base[0] ? base : "/tmp");
    CHECK_PTR(mkdtemp(dir));
    printf("test_data_docs: files in %s\n", dir);
    windows_tests();
    documents_tests(1999);
    documents_tests(-1);
    mix_tests();
    error_tests();
    if (gc_failures == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    }
    return gc_finish("test_data_docs");
}
