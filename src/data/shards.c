// shards.c — the token shard writer, index.json, the train/val rule and a whole-shard reader
// (shards.h).
#include "shards.h"
#include "../core/common.h"
#include "../core/rng.h"
#include "h5_read.h"
#include <fcntl.h>
#include <hdf5.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#define VOCAB_MIN 2
#define VOCAB_MAX (1 << 24)
#define TOKEN_CHUNK 65536          // tokens per HDF5 chunk (128 KiB as uint16)
#define OFFSET_CHUNK 8192          // doc_offsets per HDF5 chunk
#define BLOB_CHUNK (1u << 20)
#define TOKEN_BUF (128u << 10)     // tokens buffered before a write (512 KiB)
#define OFFSET_BUF 8192            // offsets buffered before a write (64 KiB)
#define CACHE_CHUNKS 2             // HDF5 chunk cache per dataset (sequential writes need 1)

const char *const shard_split_name[2] = {"train", "val"};

bool shard_doc_is_val(uint64_t seed, uint64_t ordinal, double val_fraction) {
    return rng_uniform_at(seed, ordinal) < val_fraction;
}

// ---- document frames ------------------------------------------------------------------------

static uint32_t *ids_dup(const uint32_t *ids, size_t n) {
    if (n == 0) return NULL;
    uint32_t *d = gdn_malloc(n * sizeof *d);
    memcpy(d, ids, n * sizeof *d);
    return d;
}

void shard_frame_make(shard_frame *f, int eot, const uint32_t *tpl_prefix, size_t n_tpl_prefix,
                      const uint32_t *tpl_suffix, size_t n_tpl_suffix) {
    memset(f, 0, sizeof *f);
    uint32_t e = (uint32_t)eot;
    size_t ne = eot >= 0;
    if (n_tpl_prefix + n_tpl_suffix == 0) {   // [eot] + text
        f->prefix = ids_dup(&e, ne);
        f->n_prefix = ne;
        return;
    }
    f->prefix = ids_dup(tpl_prefix, n_tpl_prefix);
    f->n_prefix = n_tpl_prefix;
    f->n_suffix = n_tpl_suffix + ne;          // template prefix + text + template suffix + [eot]
    f->suffix = gdn_malloc(f->n_suffix * sizeof *f->suffix);
    if (n_tpl_suffix) memcpy(f->suffix, tpl_suffix, n_tpl_suffix * sizeof *f->suffix);
    if (ne) f->suffix[n_tpl_suffix] = e;
}

void shard_frame_free(shard_frame *f) {
    free(f->prefix);
    free(f->suffix);
    memset(f, 0, sizeof *f);
}

bool shard_frame_equal(const shard_frame *a, const shard_frame *b) {
    return a->n_prefix == b->n_prefix && a->n_suffix == b->n_suffix &&
           (!a->n_prefix || !memcmp(a->prefix, b->prefix, a->n_prefix * sizeof *a->prefix)) &&
           (!a->n_suffix || !memcmp(a->suffix, b->suffix, a->n_suffix * sizeof *a->suffix));
}

static size_t describe_ids(const uint32_t *ids, size_t n, char *out, size_t outlen) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < outlen; i++) {
        int w = snprintf(out + k, outlen - k, "%s%u", i ? ", " : "[", ids[i]);
        k = w < 0 ? k : GDN_MIN(outlen - 1, k + (size_t)w);
    }
    if (n && k + 1 < outlen) out[k++] = ']';
    out[k < outlen ? k : outlen - 1] = 0;
    return k;
}

void shard_frame_describe(const shard_frame *f, char *out, size_t outlen) {
    if (outlen == 0) return;
    size_t k = describe_ids(f->prefix, f->n_prefix, out, outlen);
    snprintf(out + k, outlen - k, "%stext%s", f->n_prefix ? " " : "", f->n_suffix ? " " : "");
    k = strlen(out);
    describe_ids(f->suffix, f->n_suffix, out + k, outlen - k);
}

// ---- HDF5 errors (quiet stacks and HDF5's reason: h5_read.h) --------------------------------

// A failing writer call: `what` into step, then to the cleanup.
#define H5TRY(stmt, what)                                                                          \
    do {                                                                                           \
        if ((long long)(stmt) < 0) {                                                               \
            step = (what);                                                                         \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

// ---- writer -----------------------------------------------------------------------------------

struct shard_writer {
    shard_writer_config c;
    int n_closed;
    shard_entry *closed;
    // the open shard
    bool open;
    char path[600], tmp[640];
    int64_t file, ds_tok, ds_off;  // hid_t
    uint64_t n_tok, flushed;       // tokens in the shard (written + buffered); written
    uint64_t n_docs, off_flushed;  // documents ended; doc_offsets entries written
    uint64_t doc_start;            // the open document's first token
    uint32_t *buf;                 // (TOKEN_BUF)
    uint64_t *offs;                // (OFFSET_BUF)
    size_t n_offs;
};

size_t shard_writer_memory(void) {
    return TOKEN_BUF * sizeof(uint32_t) + OFFSET_BUF * sizeof(uint64_t) +
           CACHE_CHUNKS * (TOKEN_CHUNK * sizeof(uint32_t) + OFFSET_CHUNK * sizeof(uint64_t));
}

shard_writer *shard_writer_open(const shard_writer_config *cfg) {
    shard_writer *w = gdn_malloc(sizeof *w);
    w->c = *cfg;
    w->buf = gdn_malloc(TOKEN_BUF * sizeof *w->buf);
    w->offs = gdn_malloc(OFFSET_BUF * sizeof *w->offs);
    w->file = w->ds_tok = w->ds_off = H5I_INVALID_HID;
    return w;
}

static bool attr_int(hid_t file, const char *name, int v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    if (sp < 0) return false;
    hid_t at = H5Acreate2(file, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = at >= 0 && H5Awrite(at, H5T_NATIVE_INT, &v) >= 0;
    if (at >= 0 && H5Aclose(at) < 0) ok = false;
    if (H5Sclose(sp) < 0) ok = false;
    return ok;
}

static bool attr_str(hid_t file, const char *name, const char *v) {
    hid_t sp = H5Screate(H5S_SCALAR), st = H5Tcopy(H5T_C_S1);
    bool ok = sp >= 0 && st >= 0 && H5Tset_size(st, strlen(v) + 1) >= 0 &&
              H5Tset_strpad(st, H5T_STR_NULLTERM) >= 0;
    hid_t at = ok ? H5Acreate2(file, name, st, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    ok = ok && at >= 0 && H5Awrite(at, st, v) >= 0;
    if (at >= 0 && H5Aclose(at) < 0) ok = false;
    if (st >= 0 && H5Tclose(st) < 0) ok = false;
    if (sp >= 0 && H5Sclose(sp) < 0) ok = false;
    return ok;
}

// A 1-D chunked, Fletcher32-checked, extendible dataset of `type`, initially n elements of
// mem_type from data (n may be 0).
static hid_t make_dataset(hid_t file, const char *name, hid_t type, hsize_t chunk, hid_t mem_type,
                          const void *data, hsize_t n) {
    hsize_t dim = n, maxdim = H5S_UNLIMITED;
    hid_t sp = H5Screate_simple(1, &dim, &maxdim), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);  // a small chunk cache: writes are sequential
    hid_t ds = -1;
    if (sp >= 0 && dcpl >= 0 && dapl >= 0 && H5Pset_chunk(dcpl, 1, &chunk) >= 0 &&
        H5Pset_fletcher32(dcpl) >= 0 &&
        H5Pset_chunk_cache(dapl, 101, CACHE_CHUNKS * chunk * H5Tget_size(type), 1.0) >= 0)
        ds = H5Dcreate2(file, name, type, sp, H5P_DEFAULT, dcpl, dapl);
    if (dapl >= 0) H5Pclose(dapl);
    if (ds >= 0 && n > 0 && H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
        H5Dclose(ds);
        ds = -1;
    }
    if (sp >= 0) H5Sclose(sp);
    if (dcpl >= 0) H5Pclose(dcpl);
    return ds;
}

// Write n elements at [at, at + n) of an extendible 1-D dataset, growing it to at + n.
static bool append_rows(hid_t ds, hid_t mem_type, const void *data, hsize_t at, hsize_t n) {
    hsize_t size = at + n;
    if (H5Dset_extent(ds, &size) < 0) return false;
    if (n == 0) return true;
    hid_t fs = H5Dget_space(ds);
    if (fs < 0) return false;
    hid_t ms = H5Screate_simple(1, &n, NULL);
    bool ok = ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &n, NULL) >= 0 &&
              H5Dwrite(ds, mem_type, ms, fs, H5P_DEFAULT, data) >= 0;
    if (ms >= 0) H5Sclose(ms);
    H5Sclose(fs);
    return ok;
}

static void close_handles(shard_writer *w) {
    if (w->ds_tok >= 0) H5Dclose(w->ds_tok);
    if (w->ds_off >= 0) H5Dclose(w->ds_off);
    if (w->file >= 0) H5Fclose(w->file);
    w->file = w->ds_tok = w->ds_off = H5I_INVALID_HID;
}

static bool writer_fail(shard_writer *w, const char *step, char *err, size_t errlen) {
    char why[256];
    h5_error_text(why, sizeof why);
    snprintf(err, errlen, "%s: cannot write (%s): %s", w->path, step, why);
    return false;
}

static bool shard_create(shard_writer *w, char *err, size_t errlen) {
    const char *step = "";
    int index = w->n_closed;
    snprintf(w->path, sizeof w->path, "%s/%s-%06d.h5", w->c.dir, shard_split_name[w->c.split],
             index);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", w->path);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5TRY(fapl, "creating a property list");
    H5TRY(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110), "setting the format");
    w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    H5TRY(w->file, "creating the file");
    w->open = true;
    bool attrs = attr_str(w->file, "format", SHARD_FORMAT) &&
                 attr_int(w->file, "version", SHARD_VERSION) &&
                 attr_str(w->file, "split", shard_split_name[w->c.split]) &&
                 attr_int(w->file, "vocab_size", w->c.vocab_size) &&
                 attr_int(w->file, "eot_token", w->c.eot_token) &&
                 attr_str(w->file, "tokenizer_kind", w->c.tokenizer_kind) &&
                 attr_int(w->file, "shard", index) &&
                 attr_str(w->file, "specials",
                          w->c.specials ? w->c.specials : SHARD_SPECIALS_NONE);
    H5TRY(attrs ? 0 : -1, "writing attributes");
    hid_t tok_type = w->c.vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
    w->ds_tok = make_dataset(w->file, "/tokens", tok_type, TOKEN_CHUNK, H5T_NATIVE_UINT32, NULL, 0);
    H5TRY(w->ds_tok, "creating /tokens");
    uint64_t zero = 0;
    w->ds_off = make_dataset(w->file, "/doc_offsets", H5T_STD_U64LE, OFFSET_CHUNK,
                             H5T_NATIVE_UINT64, &zero, 1);
    H5TRY(w->ds_off, "creating /doc_offsets");
    hsize_t bchunk = GDN_MAX((hsize_t)1, GDN_MIN((hsize_t)w->c.blob_len, (hsize_t)BLOB_CHUNK));
    hid_t ds_blob = make_dataset(w->file, "/tokenizer", H5T_STD_U8LE, bchunk, H5T_NATIVE_UINT8,
                                 w->c.blob, w->c.blob_len);
    H5TRY(ds_blob, "writing /tokenizer");
    H5TRY(H5Dclose(ds_blob), "writing /tokenizer");
    w->n_tok = w->flushed = 0;
    w->n_docs = 0;
    w->off_flushed = 1;
    w->n_offs = 0;
    return true;
fail:
    writer_fail(w, step, err, errlen);
    close_handles(w);
    if (w->open) unlink(w->tmp);
    w->open = false;
    return false;
}

static bool flush_tokens(shard_writer *w) {
    uint64_t n = w->n_tok - w->flushed;
    if (!append_rows(w->ds_tok, H5T_NATIVE_UINT32, w->buf, w->flushed, n)) return false;
    w->flushed = w->n_tok;
    return true;
}

static bool flush_offsets(shard_writer *w) {
    if (!append_rows(w->ds_off, H5T_NATIVE_UINT64, w->offs, w->off_flushed, w->n_offs))
        return false;
    w->off_flushed += w->n_offs;
    w->n_offs = 0;
    return true;
}

// Flush, close and rename the open shard (removed instead when it holds no document).
static bool shard_close(shard_writer *w, char *err, size_t errlen) {
    const char *step = "";
    H5TRY(flush_tokens(w) ? 0 : -1, "writing /tokens");
    H5TRY(flush_offsets(w) ? 0 : -1, "writing /doc_offsets");
    H5TRY(H5Dclose(w->ds_tok), "closing /tokens");
    w->ds_tok = H5I_INVALID_HID;
    H5TRY(H5Dclose(w->ds_off), "closing /doc_offsets");
    w->ds_off = H5I_INVALID_HID;
    H5TRY(H5Fclose(w->file), "closing the file");
    w->file = H5I_INVALID_HID;
    w->open = false;
    if (w->n_docs == 0) {
        if (unlink(w->tmp) != 0) {
            snprintf(err, errlen, "cannot remove %s: %s", w->tmp, strerror(errno));
            return false;
        }
        return true;
    }
    if (rename(w->tmp, w->path) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", w->tmp, w->path, strerror(errno));
        unlink(w->tmp);
        return false;
    }
    w->closed = gdn_realloc(w->closed, (size_t)(w->n_closed + 1) * sizeof *w->closed);
    shard_entry *e = &w->closed[w->n_closed++];
    memset(e, 0, sizeof *e);
    snprintf(e->path, sizeof e->path, "%s-%06d.h5", shard_split_name[w->c.split], w->n_closed - 1);
    e->split = w->c.split;
    e->tokens = w->n_tok;
    e->documents = w->n_docs;
    return true;
fail:
    writer_fail(w, step, err, errlen);
    close_handles(w);
    unlink(w->tmp);
    w->open = false;
    return false;
}

static bool push_tokens(shard_writer *w, const uint32_t *ids, size_t n, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= (uint32_t)w->c.vocab_size) {
            snprintf(err, errlen, "%s: cannot write token id %u: not below vocab_size %d",
                     w->path, ids[i], w->c.vocab_size);
            return false;
        }
    while (n > 0) {
        size_t room = TOKEN_BUF - (size_t)(w->n_tok - w->flushed);
        size_t k = GDN_MIN(room, n);
        memcpy(w->buf + (w->n_tok - w->flushed), ids, k * sizeof *ids);
        w->n_tok += k;
        ids += k;
        n -= k;
        if (w->n_tok - w->flushed == TOKEN_BUF && !flush_tokens(w))
            return writer_fail(w, "writing /tokens", err, errlen);
    }
    return true;
}

bool shard_writer_doc_begin(shard_writer *w, char *err, size_t errlen) {
    h5_quiet q;
    h5_quiet_begin(&q);
    bool ok = w->open || shard_create(w, err, errlen);
    if (ok) {
        w->doc_start = w->n_tok;
        if (w->c.frame && w->c.frame->n_prefix)
            ok = push_tokens(w, w->c.frame->prefix, w->c.frame->n_prefix, err, errlen);
    }
    h5_quiet_end(&q);
    return ok;
}

bool shard_writer_append(shard_writer *w, const uint32_t *ids, size_t n, char *err,
                         size_t errlen) {
    h5_quiet q;
    h5_quiet_begin(&q);
    bool ok = push_tokens(w, ids, n, err, errlen);
    h5_quiet_end(&q);
    return ok;
}

bool shard_writer_doc_end(shard_writer *w, char *err, size_t errlen) {
    h5_quiet q;
    h5_quiet_begin(&q);
    bool ok = true;
    if (w->c.frame && w->c.frame->n_suffix)
        ok = push_tokens(w, w->c.frame->suffix, w->c.frame->n_suffix, err, errlen);
    if (!ok) {
        h5_quiet_end(&q);
        return false;
    }
    w->n_docs++;
    w->offs[w->n_offs++] = w->n_tok;
    if (w->n_offs == OFFSET_BUF && !flush_offsets(w))
        ok = writer_fail(w, "writing /doc_offsets", err, errlen);
    if (ok && w->n_tok >= w->c.shard_tokens) ok = shard_close(w, err, errlen);
    h5_quiet_end(&q);
    return ok;
}

bool shard_writer_doc_abort(shard_writer *w, char *err, size_t errlen) {
    if (!w->open) return true;
    bool ok = true;
    if (w->doc_start < w->flushed) {  // part of the document is in the file: shrink it
        h5_quiet q;
        h5_quiet_begin(&q);
        hsize_t size = w->doc_start;
        if (H5Dset_extent(w->ds_tok, &size) < 0)
            ok = writer_fail(w, "shrinking /tokens", err, errlen);
        h5_quiet_end(&q);
        w->flushed = w->doc_start;
    }
    w->n_tok = w->doc_start;
    return ok;
}

bool shard_writer_finish(shard_writer *w, char *err, size_t errlen) {
    if (!w->open) return true;
    h5_quiet q;
    h5_quiet_begin(&q);
    bool ok = shard_close(w, err, errlen);
    h5_quiet_end(&q);
    return ok;
}

int shard_writer_n_shards(const shard_writer *w) { return w->n_closed; }
const shard_entry *shard_writer_shard(const shard_writer *w, int i) { return &w->closed[i]; }

void shard_writer_free(shard_writer *w) {
    if (!w) return;
    if (w->open) {
        h5_quiet q;
        h5_quiet_begin(&q);
        close_handles(w);
        h5_quiet_end(&q);
        unlink(w->tmp);
    }
    free(w->closed);
    free(w->buf);
    free(w->offs);
    free(w);
}

// ---- index.json -------------------------------------------------------------------------------

bool shard_index_write(const char *dir, const shard_index *ix, char *err, size_t errlen) {
    json_t *shards = json_array(), *tot = json_object();
    uint64_t tokens[2] = {0, 0}, docs[2] = {0, 0};
    for (int i = 0; i < ix->n_shards; i++) {
        const shard_entry *e = &ix->shards[i];
        json_array_append_new(shards, json_pack("{s:s, s:s, s:I, s:I}", "path", e->path, "split",
                                                shard_split_name[e->split], "tokens",
                                                (json_int_t)e->tokens, "documents",
                                                (json_int_t)e->documents));
        tokens[e->split] += e->tokens;
        docs[e->split] += e->documents;
    }
    for (int s = 0; s < 2; s++)
        json_object_set_new(tot, shard_split_name[s],
                            json_pack("{s:I, s:I}", "tokens", (json_int_t)tokens[s], "documents",
                                      (json_int_t)docs[s]));
    json_t *root = json_pack("{s:s, s:i, s:i, s:i, s:s, s:s}", "format", SHARD_INDEX_FORMAT,
                             "version", SHARD_INDEX_VERSION, "vocab_size", ix->vocab_size,
                             "eot_token", ix->eot_token, "tokenizer_kind", ix->tokenizer_kind,
                             "specials", ix->specials[0] ? ix->specials : SHARD_SPECIALS_NONE);
    const uint32_t *frame_ids[2] = {ix->frame.prefix, ix->frame.suffix};
    const size_t frame_n[2] = {ix->frame.n_prefix, ix->frame.n_suffix};
    for (int k = 0; k < 2; k++) {
        json_t *a = json_array();
        for (size_t i = 0; i < frame_n[k]; i++)
            json_array_append_new(a, json_integer((json_int_t)frame_ids[k][i]));
        json_object_set_new(root, k ? "doc_suffix" : "doc_prefix", a);
    }
    if (ix->tokenizer_file[0])
        json_object_set_new(root, "tokenizer_file", json_string(ix->tokenizer_file));
    json_object_set_new(root, "shards", shards);
    json_object_set_new(root, "totals", tot);

    char path[600], tmp[640];
    snprintf(path, sizeof path, "%s/%s", dir, SHARD_INDEX_NAME);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) gdn_die("json_dumps failed (out of memory)");
    size_t len = strlen(text);
    bool ok = false;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t wr = write(fd, text, len);
        ok = wr == (ssize_t)len && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
        if (close(fd) != 0) ok = false;
        ok = ok && rename(tmp, path) == 0;
    }
    if (!ok) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
    } else {
        int dfd = open(dir, O_RDONLY);  // make the rename durable
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    free(text);
    return ok;
}

void shard_index_free(shard_index *ix) {
    free(ix->shards);
    shard_frame_free(&ix->frame);
    memset(ix, 0, sizeof *ix);
}

// An integer field >= 0 (or >= lo), else a message.
// An integer member of obj into *v; false + message naming the index and the key.
static bool json_int(const json_t *obj, const char *index, const char *where, const char *key,
                     long long *v, char *err, size_t errlen) {
    const json_t *j = json_object_get(obj, key);
    if (!json_is_integer(j)) {
        snprintf(err, errlen, "%s: %s'%s' is %s, expected an integer", index, where, key,
                 j ? "not an integer" : "missing");
        return false;
    }
    *v = (long long)json_integer_value(j);
    return true;
}

static bool json_str(const json_t *obj, const char *index, const char *where, const char *key,
                     const char **v, char *err, size_t errlen) {
    const json_t *j = json_object_get(obj, key);
    if (!json_is_string(j)) {
        snprintf(err, errlen, "%s: %s'%s' is %s, expected a string", index, where, key,
                 j ? "not a string" : "missing");
        return false;
    }
    *v = json_string_value(j);
    return true;
}

// The checks of one shard entry (shards[i]) into *d.
static bool index_entry(const json_t *e, size_t i, const char *file, shard_entry *d, char *err,
                        size_t errlen) {
    char where[48];
    snprintf(where, sizeof where, "shards[%zu].", i);
    const char *p = NULL, *sp = NULL;
    long long tok, doc;
    if (!json_is_object(e)) {
        snprintf(err, errlen, "%s: shards[%zu] is not an object", file, i);
        return false;
    }
    if (!json_str(e, file, where, "path", &p, err, errlen) ||
        !json_str(e, file, where, "split", &sp, err, errlen) ||
        !json_int(e, file, where, "tokens", &tok, err, errlen) ||
        !json_int(e, file, where, "documents", &doc, err, errlen))
        return false;
    d->split = !strcmp(sp, "train") ? SHARD_SPLIT_TRAIN : !strcmp(sp, "val") ? SHARD_SPLIT_VAL : -1;
    if (d->split < 0 || tok < 0 || doc < 0 || (doc == 0 && tok > 0) || !p[0]) {
        snprintf(err, errlen, "%s: shards[%zu] (\"%s\") has split \"%s\", %lld tokens, %lld "
                 "documents: expected train or val, a path, and counts >= 0 (no tokens "
                 "without documents)", file, i, p, sp, tok, doc);
        return false;
    }
    if (p[0] == '/' || strstr(p, "..") || strlen(p) >= sizeof d->path) {
        snprintf(err, errlen, "%s: %s'path' (\"%s\") must be a relative path without \"..\", "
                 "shorter than %zu characters", file, where, p, sizeof d->path);
        return false;
    }
    snprintf(d->path, sizeof d->path, "%s", p);
    d->tokens = (uint64_t)tok;
    d->documents = (uint64_t)doc;
    return true;
}

// "specials", "doc_prefix", "doc_suffix" into ix (vocab_size and eot_token read): absent (an
// index of an older gdn-prepare), "none" and the frame [eot] + text.
static bool index_frame(const json_t *root, const char *file, shard_index *ix, char *err,
                        size_t errlen) {
    const json_t *sp = json_object_get(root, "specials");
    const char *v = SHARD_SPECIALS_NONE;
    if (sp && !json_str(root, file, "", "specials", &v, err, errlen)) return false;
    if (strcmp(v, SHARD_SPECIALS_NONE) && strcmp(v, SHARD_SPECIALS_TEMPLATE)) {
        snprintf(err, errlen, "%s: 'specials' is \"%s\", expected \"template\" or \"none\"", file,
                 v);
        return false;
    }
    snprintf(ix->specials, sizeof ix->specials, "%s", v);
    const json_t *a[2] = {json_object_get(root, "doc_prefix"), json_object_get(root, "doc_suffix")};
    if (!a[0] && !a[1]) {
        shard_frame_make(&ix->frame, ix->eot_token, NULL, 0, NULL, 0);
        return true;
    }
    uint32_t **ids[2] = {&ix->frame.prefix, &ix->frame.suffix};
    size_t *n[2] = {&ix->frame.n_prefix, &ix->frame.n_suffix};
    for (int k = 0; k < 2; k++) {
        const char *key = k ? "doc_suffix" : "doc_prefix";
        size_t len = json_array_size(a[k]);
        if (!json_is_array(a[k]) || len > 4096) {
            snprintf(err, errlen, "%s: '%s' is %s, expected an array of token ids (with '%s')",
                     file, key, a[k] ? "not an array of at most 4096" : "missing",
                     k ? "doc_prefix" : "doc_suffix");
            return false;
        }
        *ids[k] = len ? gdn_malloc(len * sizeof **ids[k]) : NULL;
        *n[k] = len;
        for (size_t i = 0; i < len; i++) {
            const json_t *e = json_array_get(a[k], i);
            json_int_t id = json_is_integer(e) ? json_integer_value(e) : -1;
            if (id < 0 || id >= ix->vocab_size) {
                snprintf(err, errlen, "%s: '%s'[%zu] is not a token id in [0, %d)", file, key, i,
                         ix->vocab_size);
                return false;
            }
            (*ids[k])[i] = (uint32_t)id;
        }
    }
    return true;
}

bool shard_index_read(const char *path, shard_index *ix, char *dir_out, size_t dir_len,
                      char *err, size_t errlen) {
    memset(ix, 0, sizeof *ix);
    char file[1200];
    struct stat st;
    size_t len = strlen(path);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(file, sizeof file, "%s%s%s", path, len && path[len - 1] == '/' ? "" : "/",
                 SHARD_INDEX_NAME);
        snprintf(dir_out, dir_len, "%.*s", (int)(len > 1 && path[len - 1] == '/' ? len - 1 : len),
                 path);
    } else {
        snprintf(file, sizeof file, "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash) snprintf(dir_out, dir_len, "%.*s", (int)(slash - path), path);
        else snprintf(dir_out, dir_len, ".");
    }
    json_error_t je;
    json_t *root = json_load_file(file, 0, &je);
    if (!root) {
        snprintf(err, errlen, "%s:%d: cannot read the shard index: %s", file, je.line, je.text);
        return false;
    }
    bool ok = true;
    const char *fmt = NULL, *kind = NULL;
    long long version = 0, vocab = 0, eot = 0;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: the shard index is not a JSON object", file);
        ok = false;
    }
    ok = ok && json_str(root, file, "", "format", &fmt, err, errlen);
    if (ok && strcmp(fmt, SHARD_INDEX_FORMAT) != 0) {
        snprintf(err, errlen, "%s: 'format' is \"%s\", expected \"%s\"", file, fmt,
                 SHARD_INDEX_FORMAT);
        ok = false;
    }
    ok = ok && json_int(root, file, "", "version", &version, err, errlen);
    if (ok && version != SHARD_INDEX_VERSION) {
        snprintf(err, errlen, "%s: 'version' is %lld, this build reads version %d", file, version,
                 SHARD_INDEX_VERSION);
        ok = false;
    }
    ok = ok && json_int(root, file, "", "vocab_size", &vocab, err, errlen);
    if (ok && (vocab < VOCAB_MIN || vocab > VOCAB_MAX)) {
        snprintf(err, errlen, "%s: 'vocab_size' is %lld, outside [%d, %d]", file, vocab,
                 VOCAB_MIN, VOCAB_MAX);
        ok = false;
    }
    ok = ok && json_int(root, file, "", "eot_token", &eot, err, errlen);
    if (ok && (eot < -1 || eot >= vocab)) {
        snprintf(err, errlen, "%s: 'eot_token' is %lld, expected -1 (none) or a token in [0, %lld)",
                 file, eot, vocab);
        ok = false;
    }
    ok = ok && json_str(root, file, "", "tokenizer_kind", &kind, err, errlen);
    if (ok && strcmp(kind, "bytes") && strcmp(kind, "bpe") && strcmp(kind, "spm")) {
        snprintf(err, errlen, "%s: 'tokenizer_kind' is \"%s\", expected bytes, bpe or spm", file,
                 kind);
        ok = false;
    }
    if (ok) {
        ix->vocab_size = (int)vocab;
        ix->eot_token = (int)eot;
        snprintf(ix->tokenizer_kind, sizeof ix->tokenizer_kind, "%s", kind);
    }
    ok = ok && index_frame(root, file, ix, err, errlen);
    const json_t *tf = ok ? json_object_get(root, "tokenizer_file") : NULL;
    if (tf) {
        const char *t = json_is_string(tf) ? json_string_value(tf) : NULL;
        if (!t || !t[0] || strchr(t, '/') || strlen(t) >= sizeof ix->tokenizer_file) {
            snprintf(err, errlen, "%s: 'tokenizer_file' must be a file name beside the index",
                     file);
            ok = false;
        } else {
            snprintf(ix->tokenizer_file, sizeof ix->tokenizer_file, "%s", t);
        }
    }
    const json_t *arr = ok ? json_object_get(root, "shards") : NULL;
    if (ok && (!json_is_array(arr) || json_array_size(arr) > (1u << 24))) {
        snprintf(err, errlen, "%s: 'shards' is %s, expected an array (of at most 2^24 shards)",
                 file, arr ? (json_is_array(arr) ? "too long" : "not an array") : "missing");
        ok = false;
    }
    if (ok) {
        ix->n_shards = (int)json_array_size(arr);
        ix->shards = gdn_malloc((size_t)GDN_MAX(ix->n_shards, 1) * sizeof *ix->shards);
    }
    for (int i = 0; ok && i < ix->n_shards; i++) {
        shard_entry *d = &ix->shards[i];
        ok = index_entry(json_array_get(arr, (size_t)i), (size_t)i, file, d, err, errlen);
        if (ok) {
            ix->tokens[d->split] += d->tokens;
            ix->documents[d->split] += d->documents;
        }
    }
    // totals (gdn-prepare writes them; optional for a hand-written index) agree with the shards
    const json_t *tot = ok ? json_object_get(root, "totals") : NULL;
    if (tot && !json_is_object(tot)) {
        snprintf(err, errlen, "%s: 'totals' is not an object", file);
        ok = false;
    }
    for (int sp = 0; ok && tot && sp < 2; sp++) {
        const json_t *t = json_object_get(tot, shard_split_name[sp]);
        if (!t) continue;
        char where[48];
        snprintf(where, sizeof where, "totals.%s.", shard_split_name[sp]);
        long long tk, dc;
        ok = json_int(t, file, where, "tokens", &tk, err, errlen) &&
             json_int(t, file, where, "documents", &dc, err, errlen);
        if (ok && ((uint64_t)tk != ix->tokens[sp] || (uint64_t)dc != ix->documents[sp])) {
            snprintf(err, errlen, "%s: totals.%s says %lld tokens, %lld documents; its shards add "
                     "up to %llu, %llu", file, shard_split_name[sp], tk, dc,
                     (unsigned long long)ix->tokens[sp], (unsigned long long)ix->documents[sp]);
            ok = false;
        }
    }
    json_decref(root);
    if (!ok) shard_index_free(ix);
    return ok;
}

// ---- whole-shard reader -------------------------------------------------------------------------

static bool read_attr_int(hid_t f, const char *name, int *out) {
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) return false;
    bool ok = H5Aread(a, H5T_NATIVE_INT, out) >= 0;
    H5Aclose(a);
    return ok;
}

static bool read_attr_str(hid_t f, const char *name, char *out, size_t cap) {
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) return false;
    hid_t t = H5Aget_type(a);
    bool ok = t >= 0 && H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) &&
              H5Tget_size(t) < cap;
    if (ok) {
        memset(out, 0, cap);
        ok = H5Aread(a, t, out) >= 0;
    }
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return ok;
}

// The whole 1-D dataset `name` as mem_type elements of `size` bytes.
static void *read_all(hid_t f, const char *name, hid_t mem_type, size_t size, uint64_t *n) {
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) return NULL;
    hid_t sp = H5Dget_space(ds);
    hsize_t dim = 0;
    void *out = NULL;
    if (sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1 &&
        H5Sget_simple_extent_dims(sp, &dim, NULL) == 1) {
        out = gdn_malloc(GDN_MAX((size_t)dim, (size_t)1) * size);
        if (dim > 0 && H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
            free(out);
            out = NULL;
        }
        *n = dim;
    }
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(ds);
    return out;
}

void shard_data_free(shard_data *d) {
    free(d->tokens);
    free(d->doc_offsets);
    free(d->blob);
    memset(d, 0, sizeof *d);
}

bool shard_read(const char *path, shard_data *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    h5_quiet q;
    h5_quiet_begin(&q);
    bool ok = false;
    char fmt[32] = "", split[16] = "", why[256];
    int version = 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        h5_error_text(why, sizeof why);
        snprintf(err, errlen, "%s: cannot open: %s", path, why);
        goto done;
    }
    if (!read_attr_str(f, "format", fmt, sizeof fmt) || strcmp(fmt, SHARD_FORMAT) != 0 ||
        !read_attr_int(f, "version", &version) || version != SHARD_VERSION) {
        snprintf(err, errlen, "%s: not a gdn-tokens version %d shard (attributes format, version)",
                 path, SHARD_VERSION);
        goto done;
    }
    if (!read_attr_str(f, "split", split, sizeof split) ||
        (strcmp(split, "train") && strcmp(split, "val")) ||
        !read_attr_int(f, "vocab_size", &d->vocab_size) || d->vocab_size < VOCAB_MIN ||
        d->vocab_size > VOCAB_MAX || !read_attr_int(f, "eot_token", &d->eot_token) ||
        d->eot_token < -1 || d->eot_token >= d->vocab_size || !read_attr_int(f, "shard", &d->shard) ||
        !read_attr_str(f, "tokenizer_kind", d->tokenizer_kind, sizeof d->tokenizer_kind)) {
        snprintf(err, errlen,
                 "%s: missing or bad attribute (split, vocab_size, eot_token, shard, "
                 "tokenizer_kind)", path);
        goto done;
    }
    d->split = !strcmp(split, "val");
    htri_t has_sp = H5Aexists(f, "specials");
    if (has_sp <= 0) snprintf(d->specials, sizeof d->specials, "%s", SHARD_SPECIALS_NONE);
    if (has_sp < 0 || (has_sp > 0 && !read_attr_str(f, "specials", d->specials,
                                                    sizeof d->specials))) {
        snprintf(err, errlen, "%s: bad attribute specials", path);
        goto done;
    }
    uint64_t n_off = 0, n_blob = 0;
    d->tokens = read_all(f, "/tokens", H5T_NATIVE_UINT32, 4, &d->n_tokens);
    d->doc_offsets = read_all(f, "/doc_offsets", H5T_NATIVE_UINT64, 8, &n_off);
    d->blob = read_all(f, "/tokenizer", H5T_NATIVE_UINT8, 1, &n_blob);
    d->blob_len = (size_t)n_blob;
    if (!d->tokens || !d->doc_offsets || !d->blob) {
        h5_error_text(why, sizeof why);
        snprintf(err, errlen, "%s: cannot read /tokens, /doc_offsets or /tokenizer: %s", path, why);
        goto done;
    }
    if (n_off < 1 || d->doc_offsets[0] != 0 || d->doc_offsets[n_off - 1] != d->n_tokens) {
        snprintf(err, errlen, "%s: /doc_offsets must start at 0 and end at the token count %llu",
                 path, (unsigned long long)d->n_tokens);
        goto done;
    }
    d->n_docs = n_off - 1;
    for (uint64_t i = 1; i < n_off; i++)
        if (d->doc_offsets[i] < d->doc_offsets[i - 1]) {
            snprintf(err, errlen, "%s: /doc_offsets decreases at entry %llu", path,
                     (unsigned long long)i);
            goto done;
        }
    for (uint64_t i = 0; i < d->n_tokens; i++)
        if (d->tokens[i] >= (uint32_t)d->vocab_size) {
            snprintf(err, errlen, "%s: /tokens[%llu] = %u is not below vocab_size %d", path,
                     (unsigned long long)i, d->tokens[i], d->vocab_size);
            goto done;
        }
    ok = true;
done:
    if (f >= 0) H5Fclose(f);
    h5_quiet_end(&q);
    if (!ok) shard_data_free(d);
    return ok;
}
