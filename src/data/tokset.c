// tokset.c — token sets (DESIGN 5, dataset.h): a version-1 file or a directory of token shards
// with its index.json, opened and validated as one thing the sampler reads; and data sources,
// one set or data.mix's weighted sets.
//
// A shard set keeps every shard open (one file descriptor each) and its document offsets in RAM
// (8 bytes a document); tokens are read on demand, each read checked against vocab_size, so a
// set of any size opens in the time it takes to read its offsets. Messages name the index.json
// or the shard file and the field; HDF5's error-stack printing is off while a set is opened.
#include "dataset.h"
#include "h5_read.h"
#include "shards.h"
#include "../core/common.h"
#include <hdf5.h>
#include <math.h>
#include <sys/stat.h>

#define SHARD_CACHE_BYTES (4u << 20)       // raw-data chunk cache per shard (many shards open)

// ---- one shard ----------------------------------------------------------------------------

// Open 1-D dataset `name` of a shard and check it holds unsigned integers of `bytes` bytes and
// `want` entries. *d is left open on success.
static bool shard_dataset(hid_t file, const char *path, const char *name, size_t bytes,
                          uint64_t want, hid_t dapl, hid_t *d, char *err, size_t errlen) {
    char desc[64];
    snprintf(desc, sizeof desc, "dataset '/%s'", name);
    htri_t ex = H5Lexists(file, name, H5P_DEFAULT);
    if (ex < 0) return h5_damaged(path, desc, err, errlen);
    if (!ex) {
        snprintf(err, errlen, "%s: dataset '/%s' is missing", path, name);
        return false;
    }
    *d = H5Dopen2(file, name, dapl);
    if (*d < 0) return h5_damaged(path, desc, err, errlen);
    hid_t sp = H5Dget_space(*d), t = sp >= 0 ? H5Dget_type(*d) : H5I_INVALID_HID;
    if (sp < 0 || t < 0) {
        h5_damaged(path, desc, err, errlen);
        if (sp >= 0) H5Sclose(sp);  // failing already: the message says why
        H5Dclose(*d);
        return false;
    }
    int rank = H5Sget_simple_extent_ndims(sp);
    CHECK_HDF5(rank);
    H5T_class_t c = H5Tget_class(t);
    CHECK_HDF5(c);
    bool type_ok = c == H5T_INTEGER && H5Tget_size(t) == bytes;
    if (type_ok) {
        H5T_sign_t sg = H5Tget_sign(t);
        CHECK_HDF5(sg);
        type_ok = sg == H5T_SGN_NONE;
    }
    hsize_t dim = 0;
    if (rank == 1) CHECK_HDF5(H5Sget_simple_extent_dims(sp, &dim, NULL));
    bool ok = true;
    if (rank != 1) {
        snprintf(err, errlen, "%s: dataset '/%s' has rank %d, expected 1-D", path, name, rank);
        ok = false;
    } else if (!type_ok) {
        char tn[64];
        h5_type_name(t, tn, sizeof tn);
        snprintf(err, errlen, "%s: dataset '/%s' has type %s, expected uint%zu", path, name, tn,
                 8 * bytes);
        ok = false;
    } else if (want != UINT64_MAX && dim != want) {
        snprintf(err, errlen, "%s: dataset '/%s' has %llu entries, the index says %llu", path,
                 name, (unsigned long long)dim, (unsigned long long)want);
        ok = false;
    }
    CHECK_HDF5(H5Tclose(t));
    CHECK_HDF5(H5Sclose(sp));
    if (!ok) CHECK_HDF5(H5Dclose(*d));
    return ok;
}

// Read all of 1-D dataset d (n entries) as `mem` type into out; false + message if unreadable.
static bool read_all(hid_t d, hid_t mem, void *out, const char *path, const char *name,
                     char *err, size_t errlen) {
    if (H5Dread(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0) return true;
    char desc[64];
    snprintf(desc, sizeof desc, "dataset '/%s'", name);
    return h5_damaged(path, desc, err, errlen);
}

// Open shard number `ordinal` of `split` (index entry: `tokens`, `docs`), check it against the
// set's attributes, append its document offsets (shifted by sh->start) to offs[*nd ...], and
// keep its file and /tokens open in sh. The first shard opened supplies the tokenizer blob.
static bool shard_open(token_set *s, token_shard *sh, int split, int ordinal, uint64_t tokens,
                       uint64_t docs, uint64_t *offs, uint64_t *nd, char *err, size_t errlen) {
    const char *path = sh->path;
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: shard listed in %s is missing: %s", path, s->index,
                 strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: shard listed in %s is not a regular file", path, s->index);
        return false;
    }
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        snprintf(err, errlen, "%s: shard listed in %s is not an HDF5 file", path, s->index);
        return false;
    }
    sh->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (sh->file < 0) {
        char why[256];
        h5_error_text(why, sizeof why);
        snprintf(err, errlen, "%s: cannot open as HDF5: the file is damaged or truncated (%s)",
                 path, why);
        return false;
    }
    hid_t f = sh->file;
    char fmt[64], sp[16], kind[16];
    long long version, vocab, eot, shard;
    bool ok = h5_attr_str(f, path, "format", fmt, sizeof fmt, err, errlen);
    if (ok && strcmp(fmt, SHARD_FORMAT) != 0) {
        snprintf(err, errlen, "%s: attribute 'format' is \"%s\", expected \"%s\"", path, fmt,
                 SHARD_FORMAT);
        ok = false;
    }
    ok = ok && h5_attr_int(f, path, "version", &version, err, errlen);
    if (ok && version != SHARD_VERSION) {
        snprintf(err, errlen, "%s: attribute 'version' is %lld, a shard is version %d", path,
                 version, SHARD_VERSION);
        ok = false;
    }
    ok = ok && h5_attr_str(f, path, "split", sp, sizeof sp, err, errlen);
    if (ok && strcmp(sp, shard_split_name[split]) != 0) {
        snprintf(err, errlen, "%s: attribute 'split' is \"%s\" but %s lists it as a %s shard",
                 path, sp, s->index, shard_split_name[split]);
        ok = false;
    }
    ok = ok && h5_attr_int(f, path, "vocab_size", &vocab, err, errlen);
    if (ok && vocab != s->vocab_size) {
        snprintf(err, errlen, "%s: attribute 'vocab_size' is %lld but %s says %d (shards of "
                 "another tokenizer?)", path, vocab, s->index, s->vocab_size);
        ok = false;
    }
    ok = ok && h5_attr_int(f, path, "eot_token", &eot, err, errlen);
    if (ok && eot != s->eot_token) {
        snprintf(err, errlen, "%s: attribute 'eot_token' is %lld but %s says %d", path, eot,
                 s->index, s->eot_token);
        ok = false;
    }
    ok = ok && h5_attr_str(f, path, "tokenizer_kind", kind, sizeof kind, err, errlen);
    if (ok && strcmp(kind, s->tokenizer_kind) != 0) {
        snprintf(err, errlen, "%s: attribute 'tokenizer_kind' is \"%s\" but %s says \"%s\"", path,
                 kind, s->index, s->tokenizer_kind);
        ok = false;
    }
    ok = ok && h5_attr_int(f, path, "shard", &shard, err, errlen);
    if (ok && shard != ordinal) {
        snprintf(err, errlen, "%s: attribute 'shard' is %lld but it is %s shard %d in %s", path,
                 shard, shard_split_name[split], ordinal, s->index);
        ok = false;
    }
    char specials[16] = SHARD_SPECIALS_NONE;   // absent in shards of an older gdn-prepare
    htri_t has_sp = ok ? H5Aexists(f, "specials") : 0;
    if (has_sp < 0) ok = h5_damaged(path, "attribute 'specials'", err, errlen);
    ok = ok && (has_sp == 0 || h5_attr_str(f, path, "specials", specials, sizeof specials, err,
                                           errlen));
    if (ok && strcmp(specials, s->specials) != 0) {
        snprintf(err, errlen, "%s: attribute 'specials' is \"%s\" but %s says \"%s\"", path,
                 specials, s->index, s->specials);
        ok = false;
    }
    if (!ok) return false;

    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    CHECK_HDF5(dapl);
    CHECK_HDF5(H5Pset_chunk_cache(dapl, 521, SHARD_CACHE_BYTES, 1.0));
    hid_t dt = H5I_INVALID_HID, dof = H5I_INVALID_HID, dtk = H5I_INVALID_HID;
    ok = shard_dataset(f, path, "tokens", s->vocab_size <= 65536 ? 2 : 4, tokens, dapl, &dt, err,
                       errlen);
    CHECK_HDF5(H5Pclose(dapl));
    if (!ok) return false;
    sh->tokens = dt;
    sh->n_tokens = tokens;
    if (!shard_dataset(f, path, "doc_offsets", 8, docs + 1, H5P_DEFAULT, &dof, err, errlen))
        return false;
    uint64_t *o = gdn_malloc(sizeof(uint64_t) * (size_t)(docs + 1));
    ok = read_all(dof, H5T_NATIVE_UINT64, o, path, "doc_offsets", err, errlen);
    CHECK_HDF5(H5Dclose(dof));
    if (ok && (o[0] != 0 || o[docs] != tokens)) {
        snprintf(err, errlen, "%s: dataset '/doc_offsets' runs from %llu to %llu, expected 0 to "
                 "the %llu tokens", path, (unsigned long long)o[0], (unsigned long long)o[docs],
                 (unsigned long long)tokens);
        ok = false;
    }
    for (uint64_t i = 0; ok && i < docs; i++) {
        if (o[i + 1] < o[i]) {
            snprintf(err, errlen, "%s: dataset '/doc_offsets' decreases at entry %llu (%llu after "
                     "%llu)", path, (unsigned long long)i + 1, (unsigned long long)o[i + 1],
                     (unsigned long long)o[i]);
            ok = false;
        }
        offs[*nd + i] = sh->start + o[i];
    }
    free(o);
    if (!ok) return false;
    *nd += docs;

    if (!shard_dataset(f, path, "tokenizer", 1, UINT64_MAX, H5P_DEFAULT, &dtk, err, errlen))
        return false;
    hid_t tsp = H5Dget_space(dtk);
    CHECK_HDF5(tsp);
    hsize_t blen;
    CHECK_HDF5(H5Sget_simple_extent_dims(tsp, &blen, NULL));
    CHECK_HDF5(H5Sclose(tsp));
    if (!s->tokenizer_blob && s->tokenizer_blob_len == SIZE_MAX) {  // the first shard
        s->tokenizer_blob_len = (size_t)blen;
        if (blen > 0) {
            s->tokenizer_blob = gdn_malloc((size_t)blen);
            ok = read_all(dtk, H5T_NATIVE_UINT8, s->tokenizer_blob, path, "tokenizer", err, errlen);
        }
    } else if ((size_t)blen != s->tokenizer_blob_len) {
        snprintf(err, errlen, "%s: its tokenizer (%llu bytes) differs from the first shard's "
                 "(%zu bytes) of %s", path, (unsigned long long)blen, s->tokenizer_blob_len,
                 s->index);
        ok = false;
    }
    CHECK_HDF5(H5Dclose(dtk));
    return ok;
}

// ---- a shard set --------------------------------------------------------------------------

static bool shards_open(token_set *s, char *err, size_t errlen) {
    shard_index ix;
    char dir[1200];
    if (!shard_index_read(s->index, &ix, dir, sizeof dir, err, errlen)) return false;
    s->vocab_size = ix.vocab_size;
    s->eot_token = ix.eot_token;
    snprintf(s->tokenizer_kind, sizeof s->tokenizer_kind, "%s", ix.tokenizer_kind);
    snprintf(s->tokenizer, sizeof s->tokenizer, "%s", ix.tokenizer_kind);
    snprintf(s->specials, sizeof s->specials, "%s", ix.specials);
    s->frame = ix.frame;   // the set owns it now
    memset(&ix.frame, 0, sizeof ix.frame);

    // the shard tables per split, in index order
    bool ok = true;
    const size_t n = (size_t)ix.n_shards;
    for (int k = 0; k < 2; k++)
        s->shards[k] = gdn_malloc(sizeof(token_shard) * (size_t)GDN_MAX(ix.n_shards, 1));
    for (size_t i = 0; ok && i < n; i++) {
        const shard_entry *e = &ix.shards[i];
        int k = e->split;
        token_shard *sh = &s->shards[k][s->n_shards[k]++];
        sh->file = sh->tokens = H5I_INVALID_HID;
        if (snprintf(sh->path, sizeof sh->path, "%s/%s", dir, e->path) >= (int)sizeof sh->path) {
            snprintf(err, errlen, "%s: shards[%zu].path is too long", s->index, i);
            ok = false;
            break;
        }
        sh->start = s->n_tokens[k];
        sh->n_tokens = e->tokens;
        s->n_tokens[k] += e->tokens;
    }

    // open the shards, gather the document offsets
    h5_quiet q;
    h5_quiet_begin(&q);
    s->tokenizer_blob_len = SIZE_MAX;  // "not read yet" for shard_open
    for (int k = 0; ok && k < 2; k++) {
        s->doc_offsets[k] = gdn_malloc(sizeof(uint64_t) * (size_t)(ix.documents[k] + 1));
        uint64_t nd = 0;
        int ord = 0;
        for (size_t i = 0; ok && i < n; i++) {
            if (ix.shards[i].split != k) continue;
            ok = shard_open(s, &s->shards[k][ord], k, ord, ix.shards[i].tokens,
                            ix.shards[i].documents, s->doc_offsets[k], &nd, err, errlen);
            ord++;
        }
        s->doc_offsets[k][nd] = s->n_tokens[k];
        s->n_docs[k] = nd;
    }
    if (s->tokenizer_blob_len == SIZE_MAX) s->tokenizer_blob_len = 0;  // no shards
    h5_quiet_end(&q);
    shard_index_free(&ix);
    return ok;
}

bool tokset_open(token_set *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->v1.file = H5I_INVALID_HID;
    s->v1.dset[0] = s->v1.dset[1] = H5I_INVALID_HID;
    if (snprintf(s->path, sizeof s->path, "%s", path) >= (int)sizeof s->path) {
        snprintf(err, errlen, "%.200s...: path longer than %zu characters", path, sizeof s->path - 1);
        return false;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open token data: %s", path, strerror(errno));
        return false;
    }
    size_t len = strlen(path);
    if (S_ISDIR(st.st_mode)) {
        snprintf(s->index, sizeof s->index, "%s%sindex.json", path,
                 len && path[len - 1] == '/' ? "" : "/");
        if (stat(s->index, &st) != 0) {
            snprintf(err, errlen, "%s: a directory without index.json (expected the shards of "
                     "gdn-prepare --out DIR): %s", path, strerror(errno));
            return false;
        }
        s->sharded = true;
    } else if (len >= 5 && !strcmp(path + len - 5, ".json")) {
        snprintf(s->index, sizeof s->index, "%s", path);
        s->sharded = true;
    } else {
        snprintf(s->index, sizeof s->index, "%s", path);
    }
    if (!s->sharded) {
        if (!tokfile_open(&s->v1, path, err, errlen)) return false;
        s->vocab_size = s->v1.vocab_size;
        s->eot_token = s->v1.eot_token;
        snprintf(s->specials, sizeof s->specials, "%s", SHARD_SPECIALS_NONE);
        snprintf(s->tokenizer, sizeof s->tokenizer, "%s", s->v1.tokenizer);
        snprintf(s->tokenizer_kind, sizeof s->tokenizer_kind, "%s",
                 !strncmp(s->v1.tokenizer, "spm:", 4) ? "spm" : "bytes");
        s->n_tokens[0] = s->v1.n_tokens[0];
        s->n_tokens[1] = s->v1.n_tokens[1];
        return true;
    }
    if (!shards_open(s, err, errlen)) {
        tokset_close(s);
        return false;
    }
    return true;
}

void tokset_close(token_set *s) {
    if (!s->sharded) {
        tokfile_close(&s->v1);
        return;
    }
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < s->n_shards[k]; i++) {
            token_shard *sh = &s->shards[k][i];
            if (sh->tokens >= 0) CHECK_HDF5(H5Dclose(sh->tokens));
            if (sh->file >= 0) CHECK_HDF5(H5Fclose(sh->file));
        }
        free(s->shards[k]);
        free(s->doc_offsets[k]);
        s->shards[k] = NULL;
        s->doc_offsets[k] = NULL;
        s->n_shards[k] = 0;
    }
    free(s->tokenizer_blob);
    s->tokenizer_blob = NULL;
    shard_frame_free(&s->frame);
}

// Tokens [start, start + n) of one shard; dies naming the shard when it fails to read (a damaged
// chunk: Fletcher32) or holds a token >= vocab_size.
static void shard_read_tokens(const token_set *s, const token_shard *sh, uint64_t start, size_t n,
                              int32_t *out) {
    hsize_t hs = start, hn = n;
    hid_t fs = H5Dget_space(sh->tokens);
    CHECK_HDF5(fs);
    hid_t ms = H5Screate_simple(1, &hn, NULL);
    CHECK_HDF5(ms);
    CHECK_HDF5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &hs, NULL, &hn, NULL));
    h5_quiet q;
    h5_quiet_begin(&q);
    herr_t rc = H5Dread(sh->tokens, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, out);
    char why[256] = "";
    if (rc < 0) h5_error_text(why, sizeof why);
    h5_quiet_end(&q);
    if (rc < 0)
        gdn_die("%s: cannot read tokens [%llu, %llu): the shard is damaged or truncated (HDF5: %s)",
                sh->path, (unsigned long long)start, (unsigned long long)(start + n), why);
    CHECK_HDF5(H5Sclose(ms));
    CHECK_HDF5(H5Sclose(fs));
    for (size_t i = 0; i < n; i++)
        if (out[i] < 0 || out[i] >= s->vocab_size)
            gdn_die("%s: token %d at index %llu is >= vocab_size %d (a damaged or foreign shard)",
                    sh->path, out[i], (unsigned long long)(start + i), s->vocab_size);
}

void tokset_read(const token_set *s, int split, uint64_t start, size_t n, int32_t *out) {
    if (split != DATA_SPLIT_TRAIN && split != DATA_SPLIT_VAL)
        gdn_die("tokset_read: split %d is not DATA_SPLIT_TRAIN or DATA_SPLIT_VAL", split);
    uint64_t len = s->n_tokens[split];
    if (start > len || n > len - start)
        gdn_die("tokset_read: %s %s tokens [%llu, %llu) out of bounds (length %llu)", s->path,
                shard_split_name[split], (unsigned long long)start, (unsigned long long)(start + n),
                (unsigned long long)len);
    if (!s->sharded) {
        tokfile_read((token_file *)&s->v1, split, start, n, out);
        return;
    }
    // the last shard starting at or before `start`, then on across shard boundaries
    const token_shard *sh = s->shards[split];
    int lo = 0, hi = s->n_shards[split] - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (sh[mid].start <= start) lo = mid;
        else hi = mid - 1;
    }
    for (int i = lo; n > 0; i++) {
        if (start >= sh[i].start + sh[i].n_tokens) continue;  // empty shards
        size_t take = (size_t)GDN_MIN((uint64_t)n, sh[i].start + sh[i].n_tokens - start);
        shard_read_tokens(s, &sh[i], start - sh[i].start, take, out);
        out += take;
        start += take;
        n -= take;
    }
}

// ---- data sources ---------------------------------------------------------------------------

// The tokenizer of b is a's: same vocab_size, eot_token, kind and blob (v1: tokenizer attribute).
static bool same_tokenizer(const token_set *a, const token_set *b, char *err, size_t errlen) {
    const char *what = NULL;
    char av[64] = "", bv[64] = "";
    if (a->vocab_size != b->vocab_size) {
        what = "vocab_size";
        snprintf(av, sizeof av, "%d", a->vocab_size);
        snprintf(bv, sizeof bv, "%d", b->vocab_size);
    } else if (a->eot_token != b->eot_token) {
        what = "eot_token";
        snprintf(av, sizeof av, "%d", a->eot_token);
        snprintf(bv, sizeof bv, "%d", b->eot_token);
    } else if (strcmp(a->tokenizer, b->tokenizer) != 0) {
        what = "tokenizer";
        snprintf(av, sizeof av, "%.60s", a->tokenizer);
        snprintf(bv, sizeof bv, "%.60s", b->tokenizer);
    } else if (a->tokenizer_blob_len != b->tokenizer_blob_len ||
               (a->tokenizer_blob_len &&
                memcmp(a->tokenizer_blob, b->tokenizer_blob, a->tokenizer_blob_len) != 0)) {
        what = "tokenizer blob";
        snprintf(av, sizeof av, "%zu bytes", a->tokenizer_blob_len);
        snprintf(bv, sizeof bv, "%zu bytes, other contents", b->tokenizer_blob_len);
    }
    if (!what) return true;
    snprintf(err, errlen, "data.mix: %s has %s %s but %s has %s: every set of a mix must come "
             "from one tokenizer", b->index, what, bv, a->index, av);
    return false;
}

// The documents of shard sets a and b are framed alike (gdn-prepare --specials with this
// tokenizer: a template's BOS in one set and not in the other would teach two conventions).
static bool same_frame(const token_set *a, const token_set *b, char *err, size_t errlen) {
    if (!a->sharded || !b->sharded || shard_frame_equal(&a->frame, &b->frame)) return true;
    char av[200], bv[200];
    shard_frame_describe(&a->frame, av, sizeof av);
    shard_frame_describe(&b->frame, bv, sizeof bv);
    snprintf(err, errlen, "data.mix: %s stores each document as %s (specials %s) but %s as %s "
             "(specials %s): every set of a mix must frame its documents alike\nHINT: prepare "
             "them with the same gdn-prepare --specials", b->index, bv, b->specials, a->index, av,
             a->specials);
    return false;
}

bool data_source_open(data_source *d, const char *path, const char *mix, char *err,
                      size_t errlen) {
    memset(d, 0, sizeof *d);
    char paths[DATA_MIX_MAX][1024];
    double w[DATA_MIX_MAX], sum = 0;
    int n = 0;
    if (!mix || !mix[0]) {
        snprintf(paths[0], sizeof paths[0], "%s", path);
        w[0] = 1;
        n = 1;
    } else {
        const char *p = mix;
        while (*p) {
            size_t m = strcspn(p, ",");
            char entry[1100];
            snprintf(entry, sizeof entry, "%.*s", (int)GDN_MIN(m, sizeof entry - 1), p);
            p += m + (p[m] == ',');
            char *e = entry, *end = entry + strlen(entry);
            while (*e == ' ' || *e == '\t') e++;
            while (end > e && (end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
            if (!*e) continue;
            char *colon = strrchr(e, ':');
            char *num_end = NULL;
            double wt = colon ? strtod(colon + 1, &num_end) : NAN;
            if (!colon || colon == e || num_end == colon + 1 || (num_end && *num_end) ||
                !(wt > 0) || !isfinite(wt)) {
                snprintf(err, errlen, "data.mix: entry '%s': expected PATH:WEIGHT with a weight "
                         "> 0 (entries separated by ',')", e);
                return false;
            }
            if (n == DATA_MIX_MAX) {
                snprintf(err, errlen, "data.mix: more than %d sets", DATA_MIX_MAX);
                return false;
            }
            *colon = 0;
            size_t len = strlen(e);
            if (len >= sizeof paths[n]) {
                snprintf(err, errlen, "data.mix: path '%.200s...' longer than %zu characters", e,
                         sizeof paths[n] - 1);
                return false;
            }
            memcpy(paths[n], e, len + 1);
            w[n++] = wt;
        }
        if (n == 0) {
            snprintf(err, errlen, "data.mix: '%s' names no set (expected PATH:WEIGHT, ...)", mix);
            return false;
        }
    }
    d->set = gdn_malloc(sizeof(token_set) * (size_t)n);
    for (int i = 0; i < n; i++) {
        bool opened = tokset_open(&d->set[i], paths[i], err, errlen);
        if (!opened || (i > 0 && (!same_tokenizer(&d->set[0], &d->set[i], err, errlen) ||
                                  !same_frame(&d->set[0], &d->set[i], err, errlen)))) {
            if (opened) tokset_close(&d->set[i]);
            for (int k = 0; k < i; k++) tokset_close(&d->set[k]);
            free(d->set);
            d->set = NULL;
            return false;
        }
        sum += w[i];
    }
    d->n = n;
    for (int i = 0; i < n; i++) d->weight[i] = w[i] / sum;
    return true;
}

void data_source_close(data_source *d) {
    for (int i = 0; i < d->n; i++) tokset_close(&d->set[i]);
    free(d->set);
    d->set = NULL;
    d->n = 0;
}
