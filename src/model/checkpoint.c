// checkpoint.c — see checkpoint.h. Every HDF5 call is checked; a failure while writing removes
// the temporary file and returns false with the reason (the previous checkpoint is untouched). A
// failure while reading returns false with a message naming the file, the tensor or attribute,
// and HDF5's own reason (a checksum mismatch is said in words).
#include "checkpoint.h"
#include <hdf5.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <unistd.h>
#include "../core/common.h"

#define CKPT_FORMAT "gdn-checkpoint"
#define CKPT_VERSION 3          // written; versions 1 (no checksums), 2 (float64 only) and 3 read
#define CKPT_CHUNK_BYTES ((size_t)1 << 22)  // bytes per chunk, at most: 4 MiB
#define CKPT_MAX_COMPACT_LINKS 65535        // HDF5's limit; a group has <= MAX_PARAMS links,
                                            // the root 13 attributes

static void seterr(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static bool attr_str_w(hid_t loc, const char *name, const char *val) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return false;
    bool ok = H5Tset_size(t, strlen(val) + 1) >= 0;
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = (ok && s >= 0) ? H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT) : -1;
    ok = a >= 0 && H5Awrite(a, t, val) >= 0;
    if (a >= 0) ok &= H5Aclose(a) >= 0;
    if (s >= 0) ok &= H5Sclose(s) >= 0;
    ok &= H5Tclose(t) >= 0;
    return ok;
}

static bool attr_num_w(hid_t loc, const char *name, hid_t type, const void *val) {
    hid_t s = H5Screate(H5S_SCALAR);
    if (s < 0) return false;
    hid_t a = H5Acreate2(loc, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, type, val) >= 0;
    if (a >= 0) ok &= H5Aclose(a) >= 0;
    ok &= H5Sclose(s) >= 0;
    return ok;
}

static char *attr_str_r(hid_t loc, const char *name) {
    if (H5Aexists(loc, name) <= 0) return NULL;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return NULL;
    hid_t ft = H5Aget_type(a);
    char *out = NULL;
    bool ok = true;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft)) {
        size_t n = H5Tget_size(ft);
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (mt >= 0 && H5Tset_size(mt, n + 1) >= 0) {
            out = gdn_malloc(n + 1);
            if (H5Aread(a, mt, out) < 0) {
                free(out);
                out = NULL;
            }
        }
        if (mt >= 0 && H5Tclose(mt) < 0) ok = false;
    }
    if (ft >= 0 && H5Tclose(ft) < 0) ok = false;
    if (H5Aclose(a) < 0) ok = false;
    if (!ok) {  // a failed close: the library is in trouble, do not trust what was read
        free(out);
        out = NULL;
    }
    return out;
}

static bool attr_num_r(hid_t loc, const char *name, hid_t type, void *val) {
    if (H5Aexists(loc, name) <= 0) return false;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return false;
    bool ok = H5Aread(a, type, val) >= 0;
    ok &= H5Aclose(a) >= 0;
    return ok;
}

// The two innermost messages of HDF5's error stack (where the error was detected) as one line;
// checksum set when any message speaks of a checksum (Fletcher32 on data, or the metadata checksums).
// Call right after the failing call: the next HDF5 call clears the stack.
typedef struct {
    char text[512];
    size_t len;
    bool checksum;
} h5_reason;

static herr_t h5_reason_walk(unsigned n, const H5E_error2_t *e, void *data) {
    h5_reason *r = data;
    if (!e->desc || !e->desc[0]) return 0;
    if (strstr(e->desc, "checksum") || strstr(e->desc, "Fletcher32")) r->checksum = true;
    if (n < 2 && r->len < sizeof r->text)  // the two innermost: the outer ones repeat "can't read"
        r->len += (size_t)snprintf(r->text + r->len, sizeof r->text - r->len, "%s%s",
                                   n ? "; " : "", e->desc);
    return 0;
}

static h5_reason h5_reason_now(void) {
    h5_reason r = {.text = "", .len = 0, .checksum = false};
    if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_reason_walk, &r) < 0 || !r.text[0])
        snprintf(r.text, sizeof r.text, "unknown HDF5 error");
    return r;
}

// Elements of `bits` per chunk, at most (4 MiB).
static size_t chunk_elems(int bits) { return CKPT_CHUNK_BYTES / ((size_t)bits / 8); }

// A (rows, cols) tensor as a chunked dataset with the Fletcher32 checksum filter: chunks of
// whole rows, at most 4 MiB each (a row wider than that is split). bits = 64: stored float64;
// 32: float32, converted in place in data (every value must be a float32 value: the backend's
// fp32 or bf16 element widened; false otherwise, which would be a bug).
static bool write_tensor(hid_t grp, const char *name, double *data, int rows, int cols, int bits) {
    const size_t n = (size_t)rows * (size_t)cols, ce = chunk_elems(bits);
    if (bits == 32) {  // float i overwrites bytes of double i/2 <= i: already read
        float *f = (float *)data;
        for (size_t i = 0; i < n; i++) {
            const double x = data[i];
            f[i] = (float)x;
            if ((double)f[i] != x && !(isnan(x) && isnan(f[i]))) return false;
        }
    }
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    hsize_t ccols = GDN_MIN((hsize_t)cols, (hsize_t)ce);
    hsize_t chunk[2] = {GDN_MAX((hsize_t)1, GDN_MIN((hsize_t)rows, ce / ccols)), ccols};
    hid_t s = H5Screate_simple(2, dims, NULL);
    if (s < 0) return false;
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    bool ok = dcpl >= 0 && H5Pset_chunk(dcpl, 2, chunk) >= 0 && H5Pset_fletcher32(dcpl) >= 0;
    hid_t ft = bits == 32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
    hid_t mt = bits == 32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
    hid_t d = ok ? H5Dcreate2(grp, name, ft, s, H5P_DEFAULT, dcpl, H5P_DEFAULT) : -1;
    ok = d >= 0 && H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    if (d >= 0) ok &= H5Dclose(d) >= 0;
    if (dcpl >= 0) ok &= H5Pclose(dcpl) >= 0;
    ok &= H5Sclose(s) >= 0;
    return ok;
}

// Three groups of tensors: the parameters and the two AdamW moments.
static const char *const GROUPS[3] = {"params", "adam_m", "adam_v"};

// The values of group g's tensor: parameters and m finite, v finite and >= 0.
static bool check_values(const char *path, int g, const char *name, const double *h, size_t n,
                         char *err, size_t errlen) {
    static const char *const what[3] = {"parameters must be finite",
                                        "AdamW first moments must be finite",
                                        "AdamW second moments must be finite and >= 0"};
    for (size_t i = 0; i < n; i++) {
        if (isfinite(h[i]) && (g != 2 || h[i] >= 0)) continue;
        seterr(err, errlen, "'%s': tensor '/%s/%s' element %zu is %g: %s (a damaged checkpoint, "
               "or one not written by gdn); refused", path, GROUPS[g], name, i, h[i], what[g]);
        return false;
    }
    return true;
}

// Tensor `name` of group g (open in grp) of a version-`version` file: checks it is 2-D float64
// (or float32 from version 3 on), of shape (rows, cols) when rows >= 0, with all its bytes stored,
// chunked with the Fletcher32 filter when version >= 2; reads it into *buf as float64 (grown to
// *cap elements as needed; HDF5 verifies each chunk's checksum; float32 widened exactly) and
// checks its values. *numel: its element count; *bits: its stored precision (32 or 64).
static bool read_tensor(hid_t grp, const char *path, int version, int g, const char *name,
                        long rows, long cols, double **buf, size_t *cap, size_t *numel, int *bits,
                        char *err, size_t errlen) {
    hid_t d = H5Dopen2(grp, name, H5P_DEFAULT);
    if (d < 0) {
        h5_reason r = h5_reason_now();
        seterr(err, errlen, "'%s': cannot open tensor '/%s/%s' (HDF5: %s)", path, GROUPS[g], name,
               r.text);
        return false;
    }
    hid_t s = H5Dget_space(d), t = H5Dget_type(d), dcpl = H5Dget_create_plist(d);
    bool ok = s >= 0 && t >= 0 && dcpl >= 0;
    if (!ok) seterr(err, errlen, "'%s': cannot inspect tensor '/%s/%s'", path, GROUPS[g], name);
    hsize_t dims[2] = {0, 0};
    int nd = ok ? H5Sget_simple_extent_ndims(s) : -1;
    if (ok && (nd != 2 || H5Sget_simple_extent_dims(s, dims, NULL) < 0)) {
        seterr(err, errlen, "'%s': tensor '/%s/%s' has %d dimensions, expected 2", path, GROUPS[g],
               name, nd);
        ok = false;
    }
    const size_t tsize = ok ? H5Tget_size(t) : 0;
    const bool f32_ok = version >= 3;
    if (ok && (H5Tget_class(t) != H5T_FLOAT || (tsize != 8 && !(tsize == 4 && f32_ok)))) {
        seterr(err, errlen, "'%s': tensor '/%s/%s' is not %s (HDF5 type class %d, %zu bytes)",
               path, GROUPS[g], name, f32_ok ? "float32 or float64" : "float64",
               (int)H5Tget_class(t), tsize);
        ok = false;
    }
    if (ok && rows >= 0 && (dims[0] != (hsize_t)rows || dims[1] != (hsize_t)cols)) {
        seterr(err, errlen, "'%s': tensor '/%s/%s' has shape (%llu, %llu), the configured model "
               "has (%ld, %ld)", path, GROUPS[g], name, (unsigned long long)dims[0],
               (unsigned long long)dims[1], rows, cols);
        ok = false;
    }
    // every element must be stored (an unwritten chunk would read as fill values): this also
    // bounds what is allocated below by the file's size
    const hsize_t n = dims[0] * dims[1];
    if (ok && dims[1] && n / dims[1] != dims[0]) {
        seterr(err, errlen, "'%s': tensor '/%s/%s' has shape (%llu, %llu): too large", path,
               GROUPS[g], name, (unsigned long long)dims[0], (unsigned long long)dims[1]);
        ok = false;
    }
    if (ok && H5Dget_storage_size(d) < n * tsize) {
        seterr(err, errlen, "'%s': tensor '/%s/%s' of %llu elements has %llu bytes stored, fewer "
               "than its data (a truncated or damaged file)", path, GROUPS[g], name,
               (unsigned long long)n, (unsigned long long)H5Dget_storage_size(d));
        ok = false;
    }
    if (ok && version >= 2) {
        unsigned flags = 0, cd[4];
        size_t ncd = 4;
        htri_t has = H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &ncd, cd, 0, NULL,
                                          NULL) >= 0;
        H5Eclear2(H5E_DEFAULT);  // "filter not found" is an answer here, not an error
        if (!has) {
            seterr(err, errlen, "'%s': tensor '/%s/%s' has no Fletcher32 checksum (every tensor of "
                   "a version-%d checkpoint has one)", path, GROUPS[g], name, version);
            ok = false;
        }
    }
    if (ok && n > *cap) {
        free(*buf);
        *buf = gdn_malloc((size_t)n * sizeof(double));
        *cap = (size_t)n;
    }
    const bool f32 = tsize == 4;
    if (ok && H5Dread(d, f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      *buf) < 0) {
        h5_reason r = h5_reason_now();
        if (r.checksum)
            seterr(err, errlen, "'%s': tensor '/%s/%s' is damaged: its checksum does not match its "
                   "data; refused (HDF5: %s)", path, GROUPS[g], name, r.text);
        else
            seterr(err, errlen, "'%s': cannot read tensor '/%s/%s': the file is damaged or "
                   "truncated (HDF5: %s)", path, GROUPS[g], name, r.text);
        ok = false;
    }
    if (ok && f32) {  // widen in place from the end: double i overwrites floats 2i, 2i+1 >= i
        const float *f = (const float *)*buf;
        for (size_t i = (size_t)n; i-- > 0;) (*buf)[i] = (double)f[i];
    }
    ok = ok && check_values(path, g, name, *buf, (size_t)n, err, errlen);
    bool closed = (dcpl < 0 || H5Pclose(dcpl) >= 0) & (t < 0 || H5Tclose(t) >= 0) &
                  (s < 0 || H5Sclose(s) >= 0) & (H5Dclose(d) >= 0);
    if (ok && !closed) {
        seterr(err, errlen, "'%s': cannot close tensor '/%s/%s'", path, GROUPS[g], name);
        ok = false;
    }
    *numel = (size_t)n;
    *bits = f32 ? 32 : 64;
    return ok;
}

// Moments: from m->ckpt_moments when the loop gathered sharded ones, else from opt_m / opt_v.
static void group_download(const model *m, int g, int i, double *h) {
    const param_info *p = &m->params[i];
    if (g == 0) {
        model_param_download(m, i, h);
    } else if (m->ckpt_moments[g - 1]) {
        memcpy(h, m->ckpt_moments[g - 1] + p->offset, p->numel * sizeof(double));
    } else {
        if (m->opt_lo != 0 || m->opt_n != m->n_elems)
            gdn_die("internal: checkpoint of ZeRO-1-sharded moments without ckpt_moments");
        m->be->download(h, model_opt(m, g == 1 ? m->opt_m : m->opt_v, i), p->numel, BE_OPT);
    }
}

// Moments: only the part of tensor i inside [opt_lo, opt_lo + opt_n) (all of it unsharded).
static void group_upload(model *m, int g, int i, const double *h) {
    const param_info *p = &m->params[i];
    if (g == 0) {
        model_param_upload(m, i, h);
        return;
    }
    size_t a = GDN_MAX(p->offset, m->opt_lo), b = GDN_MIN(p->offset + p->numel, m->opt_lo + m->opt_n);
    if (a >= b) return;
    char *base = g == 1 ? m->opt_m : m->opt_v;
    m->be->upload(base + (a - m->opt_lo) * m->be->elem[BE_OPT], h + (a - p->offset), b - a, BE_OPT);
}

int checkpoint_group_bits(const model *m, int g) {
    const backend *be = m->be;
    size_t bytes = g == 0 && !be->master ? be->elem[BE_PARAM] : be->elem[BE_OPT];
    return bytes >= 8 ? 64 : 32;
}

// An upper bound on the bytes of model m's checkpoint with a config text of cfg_len bytes and a
// tokenizer blob of tok_n bytes: the three groups in their precisions, plus 4 KiB of object
// header, chunk index and checksums per tensor and 256 bytes per chunk (a checkpoint measures
// ~420 bytes a tensor beyond its data), plus 1 MiB.
static uint64_t checkpoint_bytes_bound(const model *m, size_t cfg_len, size_t tok_n) {
    uint64_t b = ((uint64_t)1 << 20) + cfg_len + tok_n + tok_n / 16;
    for (int g = 0; g < 3; g++) {
        const int bits = checkpoint_group_bits(m, g);
        for (int i = 0; i < m->n_params; i++) {
            uint64_t numel = m->params[i].numel;
            b += numel * (uint64_t)(bits / 8) + 4096 + 256 * (numel / chunk_elems(bits) + 1);
        }
    }
    return b;
}

// ---- the tokenizer -------------------------------------------------------------------------

void ckpt_tokenizer_set(ckpt_tokenizer *t, const char *kind, const void *blob, size_t n) {
    ckpt_tokenizer_free(t);
    snprintf(t->kind, sizeof t->kind, "%s", kind);
    t->n = n;
    t->blob = n ? gdn_malloc(n) : NULL;
    if (n) memcpy(t->blob, blob, n);
}

void ckpt_tokenizer_free(ckpt_tokenizer *t) {
    free(t->blob);
    *t = (ckpt_tokenizer){.kind = "", .blob = NULL, .n = 0};
}

bool ckpt_tokenizer_from_spec(ckpt_tokenizer *t, const char *spec, char *err, size_t errlen) {
    if (!strcmp(spec, "bytes")) {
        ckpt_tokenizer_set(t, "bytes", NULL, 0);
        return true;
    }
    if (strncmp(spec, "spm:", 4) != 0) {
        seterr(err, errlen, "tokenizer '%s': expected \"bytes\" or \"spm:<model file>\"", spec);
        return false;
    }
    const char *path = spec + 4;
    FILE *f = fopen(path, "rb");
    if (!f) {
        seterr(err, errlen, "tokenizer '%s': cannot read the SentencePiece model '%s': %s", spec,
               path, strerror(errno));
        return false;
    }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = gdn_malloc(cap);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = gdn_realloc(buf, cap *= 2);
    }
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok || n == 0) {
        seterr(err, errlen, "tokenizer '%s': reading the SentencePiece model '%s' failed%s", spec,
               path, n == 0 && ok ? " (the file is empty)" : "");
        free(buf);
        return false;
    }
    ckpt_tokenizer_free(t);
    snprintf(t->kind, sizeof t->kind, "spm");
    t->blob = buf;
    t->n = n;
    return true;
}

// The kinds tokenizer.h knows.
static bool tokenizer_kind_known(const char *k) {
    return !strcmp(k, "bytes") || !strcmp(k, "bpe") || !strcmp(k, "spm");
}

// Dataset /tokenizer (uint8 blob, Fletcher32 chunks when not empty) with its tokenizer_kind.
static bool write_tokenizer(hid_t f, const ckpt_tokenizer *t) {
    hsize_t dims[1] = {(hsize_t)t->n}, chunk[1] = {(hsize_t)GDN_MIN(t->n, CKPT_CHUNK_BYTES)};
    hid_t s = H5Screate_simple(1, dims, NULL);
    if (s < 0) return false;
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    // an empty blob: a contiguous dataset of 0 bytes (a chunk cannot be larger than the extent)
    bool ok = dcpl >= 0 && (t->n == 0 || (H5Pset_chunk(dcpl, 1, chunk) >= 0 &&
                                          H5Pset_fletcher32(dcpl) >= 0));
    hid_t d = ok ? H5Dcreate2(f, "tokenizer", H5T_STD_U8LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT) : -1;
    ok = d >= 0 && (t->n == 0 || H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                          t->blob) >= 0);
    ok = ok && attr_str_w(d, "tokenizer_kind", t->kind);
    if (d >= 0) ok &= H5Dclose(d) >= 0;
    if (dcpl >= 0) ok &= H5Pclose(dcpl) >= 0;
    ok &= H5Sclose(s) >= 0;
    return ok;
}

// Reads /tokenizer of an open checkpoint into t (kind "" when there is none).
static bool read_tokenizer(hid_t f, const char *path, ckpt_tokenizer *t, char *err, size_t errlen) {
    ckpt_tokenizer_free(t);
    if (H5Lexists(f, "tokenizer", H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return true;
    }
    hid_t d = H5Dopen2(f, "tokenizer", H5P_DEFAULT);
    if (d < 0) {
        h5_reason r = h5_reason_now();
        seterr(err, errlen, "'%s': cannot open dataset '/tokenizer' (HDF5: %s)", path, r.text);
        return false;
    }
    hid_t s = H5Dget_space(d), ty = H5Dget_type(d);
    bool ok = s >= 0 && ty >= 0 && H5Sget_simple_extent_ndims(s) == 1 &&
              H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1;
    hssize_t n = ok ? H5Sget_simple_extent_npoints(s) : -1;
    char *kind = ok ? attr_str_r(d, "tokenizer_kind") : NULL;
    if (!ok || n < 0) {
        seterr(err, errlen, "'%s': dataset '/tokenizer' is not a 1-D byte array", path);
        ok = false;
    } else if (!kind || !tokenizer_kind_known(kind) || strlen(kind) >= sizeof t->kind) {
        seterr(err, errlen, "'%s': attribute '/tokenizer' tokenizer_kind is %s%s%s; expected "
               "\"bytes\", \"bpe\" or \"spm\"", path, kind ? "\"" : "", kind ? kind : "missing",
               kind ? "\"" : "");
        ok = false;
    } else if ((uint64_t)n > (uint64_t)H5Dget_storage_size(d)) {
        seterr(err, errlen, "'%s': dataset '/tokenizer' of %lld bytes has fewer stored (a "
               "truncated or damaged file)", path, (long long)n);
        ok = false;
    }
    void *blob = ok && n > 0 ? gdn_malloc((size_t)n) : NULL;
    if (ok && n > 0 && H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, blob) < 0) {
        h5_reason r = h5_reason_now();
        seterr(err, errlen, "'%s': dataset '/tokenizer' is %s (HDF5: %s)", path,
               r.checksum ? "damaged: its checksum does not match its data" : "unreadable", r.text);
        ok = false;
    }
    bool closed = (ty < 0 || H5Tclose(ty) >= 0) & (s < 0 || H5Sclose(s) >= 0) & (H5Dclose(d) >= 0);
    if (ok && !closed) {
        seterr(err, errlen, "'%s': cannot close dataset '/tokenizer'", path);
        ok = false;
    }
    if (ok) {
        snprintf(t->kind, sizeof t->kind, "%s", kind);
        t->blob = blob;
        t->n = (size_t)n;
    } else {
        free(blob);
    }
    free(kind);
    return ok;
}

// Room for `bytes` next to the checkpoint, found before HDF5 writes a byte: HDF5 (1.10) cannot
// close a file whose writes fail (H5Fclose fails and keeps the file open; the library's exit
// handler then crashes closing it again), so a full disk, a quota or a file-size limit must be
// met here. A file of that size is reserved at `tmp` with posix_fallocate, which fails with
// ENOSPC, EDQUOT or EFBIG where the checkpoint's writes would, and removed again, leaving the
// room to the checkpoint. false + err when there is none (or tmp cannot be created).
static bool check_room(const char *path, const char *tmp, uint64_t bytes, char *err, size_t errlen) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        seterr(err, errlen, "cannot create checkpoint '%s' (%s)", tmp, strerror(errno));
        return false;
    }
    int rc = bytes > (uint64_t)INT64_MAX ? EFBIG : posix_fallocate(fd, 0, (off_t)bytes);
    bool closed = close(fd) == 0;
    unlink(tmp);
    // a filesystem without fallocate support (EOPNOTSUPP, EINVAL) cannot be asked: go on
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL && rc != ENOSYS) {
        seterr(err, errlen, "writing checkpoint '%s' failed: no room for its %llu bytes (%s); the "
               "previous checkpoint is kept", path, (unsigned long long)bytes, strerror(rc));
        return false;
    }
    if (!closed) {
        seterr(err, errlen, "writing checkpoint '%s' failed: closing '%s': %s; the previous "
               "checkpoint is kept", path, tmp, strerror(errno));
        return false;
    }
    return true;
}

bool checkpoint_save(const char *path, const model *m, const train_state *st,
                     const ckpt_tokenizer *tok, char *err, size_t errlen) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    if (tok && !tok->kind[0]) tok = NULL;
    if (tok && !tokenizer_kind_known(tok->kind)) {
        seterr(err, errlen, "writing checkpoint '%s': tokenizer kind \"%s\" is not known", path,
               tok->kind);
        return false;
    }
    if (st->gnorm_n < 0 || st->gnorm_n > TRAIN_SKIP_WINDOW_MAX || st->skips < st->skips_in_row ||
        st->skips_in_row < 0)
        gdn_die("internal: checkpoint of a bad skip state (skips %ld, in a row %ld, window %d)",
                st->skips, st->skips_in_row, st->gnorm_n);
    char *cfg = config_to_string(&m->cfg);
    if (!check_room(path, tmp, checkpoint_bytes_bound(m, strlen(cfg), tok ? tok->n : 0), err,
                    errlen)) {
        free(cfg);
        return false;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    // the HDF5 1.10 file format: checksums on the metadata as well (checkpoint.h)
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) {
        free(cfg);
        seterr(err, errlen, "cannot set up the HDF5 file access list for '%s'", tmp);
        if (fapl >= 0) (void)H5Pclose(fapl);  // failing already: the message says why
        return false;
    }
    // the root's attributes as object header messages (checksummed), never dense (see gcpl below)
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    hid_t f = fcpl >= 0 && H5Pset_attr_phase_change(fcpl, CKPT_MAX_COMPACT_LINKS, CKPT_MAX_COMPACT_LINKS - 1) >= 0
                  ? H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl) : -1;
    if (fcpl >= 0 && H5Pclose(fcpl) < 0 && f >= 0) {
        free(cfg);
        seterr(err, errlen, "cannot close the HDF5 file creation list for '%s'", tmp);
        (void)H5Pclose(fapl);  // failing already: the message says why
        (void)H5Fclose(f);
        unlink(tmp);
        return false;
    }
    if (H5Pclose(fapl) < 0 && f >= 0) {
        free(cfg);
        seterr(err, errlen, "cannot close the HDF5 file access list for '%s'", tmp);
        (void)H5Fclose(f);  // failing already: the message says why
        unlink(tmp);
        return false;
    }
    if (f < 0) {
        free(cfg);
        seterr(err, errlen, "cannot create checkpoint '%s' (%s)", tmp, strerror(errno));
        return false;
    }
    bool ok = true;
    int64_t ver = CKPT_VERSION, step = st->step, ws = st->world_size, sk = st->skips,
            skr = st->skips_in_row;
    uint64_t tseen = st->tokens_seen, pos = st->sampler_pos, seed = st->seed;
    ok &= attr_str_w(f, "format", CKPT_FORMAT);
    ok &= attr_num_w(f, "version", H5T_NATIVE_INT64, &ver);
    ok &= attr_str_w(f, "config", cfg);
    ok &= attr_str_w(f, "backend", m->be->name);
    ok &= attr_num_w(f, "step", H5T_NATIVE_INT64, &step);
    ok &= attr_num_w(f, "tokens_seen", H5T_NATIVE_UINT64, &tseen);
    ok &= attr_num_w(f, "sampler_pos", H5T_NATIVE_UINT64, &pos);
    ok &= attr_num_w(f, "seed", H5T_NATIVE_UINT64, &seed);
    ok &= attr_num_w(f, "best_val", H5T_NATIVE_DOUBLE, &st->best_val);
    ok &= attr_num_w(f, "world_size", H5T_NATIVE_INT64, &ws);
    ok &= attr_num_w(f, "skips", H5T_NATIVE_INT64, &sk);
    ok &= attr_num_w(f, "skips_in_row", H5T_NATIVE_INT64, &skr);
    if (st->gnorm_n > 0) {
        hsize_t wn = (hsize_t)st->gnorm_n;
        hid_t ws1 = H5Screate_simple(1, &wn, NULL);
        hid_t wa = ws1 >= 0 ? H5Acreate2(f, "grad_norm_window", H5T_IEEE_F64LE, ws1, H5P_DEFAULT,
                                         H5P_DEFAULT) : -1;
        ok &= wa >= 0 && H5Awrite(wa, H5T_NATIVE_DOUBLE, st->gnorm) >= 0;
        if (wa >= 0) ok &= H5Aclose(wa) >= 0;
        if (ws1 >= 0) ok &= H5Sclose(ws1) >= 0;
    }
    if (tok) ok &= write_tokenizer(f, tok);
    free(cfg);
    size_t maxn = 0;
    for (int i = 0; i < m->n_params; i++) maxn = GDN_MAX(maxn, m->params[i].numel);
    double *h = gdn_malloc(maxn * sizeof(double));
    // the links of a group as messages of its object header (checksummed), never "dense" in a
    // fractal heap, whose blocks carry no checksum (a flipped bit there reaches HDF5's parser:
    // libhdf5 1.10.8 crashed on one in tests/test_fuzz_readers.c)
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    ok &= gcpl >= 0 && H5Pset_link_phase_change(gcpl, CKPT_MAX_COMPACT_LINKS, CKPT_MAX_COMPACT_LINKS - 1) >= 0;
    for (int g = 0; g < 3 && ok; g++) {
        hid_t grp = H5Gcreate2(f, GROUPS[g], H5P_DEFAULT, gcpl, H5P_DEFAULT);
        ok &= grp >= 0;
        for (int i = 0; i < m->n_params && ok; i++) {
            const param_info *p = &m->params[i];
            group_download(m, g, i, h);
            ok &= write_tensor(grp, p->name, h, p->rows, p->cols, checkpoint_group_bits(m, g));
        }
        if (grp >= 0) ok &= H5Gclose(grp) >= 0;
    }
    if (gcpl >= 0) ok &= H5Pclose(gcpl) >= 0;
    free(h);
    ok &= H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0;
    ok &= H5Fclose(f) >= 0;
    if (ok) {  // the data must be on disk before the rename makes it the checkpoint
        int fd = open(tmp, O_RDONLY);
        ok = fd >= 0 && fsync(fd) == 0;
        if (fd >= 0) close(fd);
    }
    if (!ok) {
        seterr(err, errlen, "writing checkpoint '%s' failed (%s); the previous checkpoint is kept",
               path, errno ? strerror(errno) : "HDF5 error");
        unlink(tmp);
        return false;
    }
    // read back before it replaces the previous one: every tensor (checksums), the values, the
    // loop state, and as many tensors as the model has
    char why[1024];
    int nread = 0;
    if (!checkpoint_verify(tmp, &nread, why, sizeof why) || nread != 3 * m->n_params) {
        if (nread != 3 * m->n_params && why[0] == '\0')
            snprintf(why, sizeof why, "%d tensors read back, %d written", nread, 3 * m->n_params);
        seterr(err, errlen, "writing checkpoint '%s' failed: the new file does not verify (%s); "
               "the previous checkpoint is kept", path, why);
        unlink(tmp);
        return false;
    }
    if (rename(tmp, path) != 0) {
        seterr(err, errlen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        unlink(tmp);
        return false;
    }
    return true;
}

// Opens a checkpoint and checks its format and version (*version: 1 or 2).
static hid_t open_checked(const char *path, int *version, char *err, size_t errlen) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (access(path, R_OK) != 0) {
        seterr(err, errlen, "cannot read checkpoint '%s': %s", path, strerror(errno));
        return -1;
    }
    htri_t is = H5Fis_hdf5(path);
    if (is == 0) {
        seterr(err, errlen, "checkpoint '%s' is not an HDF5 file", path);
        return -1;
    }
    hid_t f = is > 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
    if (f < 0) {  // H5Fis_hdf5 or H5Fopen failed: the stack says why
        h5_reason r = h5_reason_now();
        seterr(err, errlen, "cannot open checkpoint '%s' as HDF5: the file is %s (HDF5: %s)", path,
               r.checksum ? "damaged (a metadata checksum does not match)" : "damaged or truncated",
               r.text);
        return -1;
    }
    char *fmt = attr_str_r(f, "format");
    int64_t ver = -1;
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        seterr(err, errlen, "'%s': attribute 'format' is %s%s%s, expected \"%s\"", path,
               fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "", CKPT_FORMAT);
        free(fmt);
        (void)H5Fclose(f);  // failing already: the message says why
        return -1;
    }
    free(fmt);
    if (!attr_num_r(f, "version", H5T_NATIVE_INT64, &ver) || ver < 1 || ver > CKPT_VERSION) {
        seterr(err, errlen, "'%s': attribute 'version' is %lld, this build reads versions 1 to %d",
               path, (long long)ver, CKPT_VERSION);
        (void)H5Fclose(f);  // failing already: the message says why
        return -1;
    }
    *version = (int)ver;
    return f;
}

// The loop state attributes, checked: step >= 0, world_size >= 1.
static bool read_state(hid_t f, const char *path, train_state *st, char *err, size_t errlen) {
    int64_t step = 0, ws = 1;
    bool ok = attr_num_r(f, "step", H5T_NATIVE_INT64, &step) &&
              attr_num_r(f, "tokens_seen", H5T_NATIVE_UINT64, &st->tokens_seen) &&
              attr_num_r(f, "sampler_pos", H5T_NATIVE_UINT64, &st->sampler_pos) &&
              attr_num_r(f, "seed", H5T_NATIVE_UINT64, &st->seed) &&
              attr_num_r(f, "best_val", H5T_NATIVE_DOUBLE, &st->best_val) &&
              attr_num_r(f, "world_size", H5T_NATIVE_INT64, &ws);
    if (!ok) {
        seterr(err, errlen, "'%s': loop state attributes (step, tokens_seen, sampler_pos, seed, "
                            "best_val, world_size) missing or unreadable", path);
        return false;
    }
    if (step < 0 || step > LONG_MAX) {
        seterr(err, errlen, "'%s': attribute 'step' is %lld; allowed: >= 0", path, (long long)step);
        return false;
    }
    if (ws < 1 || ws > INT_MAX) {
        seterr(err, errlen, "'%s': attribute 'world_size' is %lld; allowed: >= 1", path,
               (long long)ws);
        return false;
    }
    // the skip state (version 3; earlier files: none skipped, an empty window)
    int64_t sk = 0, skr = 0;
    st->gnorm_n = 0;
    if (H5Aexists(f, "skips") > 0 || H5Aexists(f, "skips_in_row") > 0) {
        if (!attr_num_r(f, "skips", H5T_NATIVE_INT64, &sk) ||
            !attr_num_r(f, "skips_in_row", H5T_NATIVE_INT64, &skr) || skr < 0 || sk < skr ||
            sk > LONG_MAX) {
            seterr(err, errlen, "'%s': attributes 'skips' (%lld) and 'skips_in_row' (%lld) are "
                   "missing or unreadable, or not skips >= skips_in_row >= 0", path, (long long)sk,
                   (long long)skr);
            return false;
        }
    }
    if (H5Aexists(f, "grad_norm_window") > 0) {
        hid_t a = H5Aopen(f, "grad_norm_window", H5P_DEFAULT);
        hid_t s = a >= 0 ? H5Aget_space(a) : -1;
        hssize_t n = s >= 0 && H5Sget_simple_extent_ndims(s) == 1 ? H5Sget_simple_extent_npoints(s) : -1;
        bool wok = n >= 1 && n <= TRAIN_SKIP_WINDOW_MAX &&
                   H5Aread(a, H5T_NATIVE_DOUBLE, st->gnorm) >= 0;
        for (hssize_t i = 0; wok && i < n; i++) wok = isfinite(st->gnorm[i]) && st->gnorm[i] >= 0;
        if (s >= 0) wok &= H5Sclose(s) >= 0;
        if (a >= 0) wok &= H5Aclose(a) >= 0;
        if (!wok) {
            seterr(err, errlen, "'%s': attribute 'grad_norm_window' is unreadable or not 1 to %d "
                   "finite gradient norms >= 0", path, TRAIN_SKIP_WINDOW_MAX);
            return false;
        }
        st->gnorm_n = (int)n;
    }
    H5Eclear2(H5E_DEFAULT);
    st->step = (long)step;
    st->world_size = (int)ws;
    st->skips = (long)sk;
    st->skips_in_row = (long)skr;
    return true;
}

char *checkpoint_read_config(const char *path, char *err, size_t errlen) {
    int version = 0;
    hid_t f = open_checked(path, &version, err, errlen);
    if (f < 0) return NULL;
    char *cfg = attr_str_r(f, "config");
    if (!cfg) seterr(err, errlen, "'%s': attribute 'config' is missing", path);
    if (H5Fclose(f) < 0 && cfg) {
        seterr(err, errlen, "'%s': cannot close the file after reading it", path);
        free(cfg);
        cfg = NULL;
    }
    return cfg;
}

bool checkpoint_load(const char *path, model *m, train_state *st, char *err, size_t errlen) {
    int version = 0;
    hid_t f = open_checked(path, &version, err, errlen);
    if (f < 0) return false;
    train_state in = *st;
    bool ok = read_state(f, path, &in, err, errlen);
    char *cfg = ok ? attr_str_r(f, "config") : NULL;  // read by checkpoint_read_config
    if (ok && !cfg) {
        seterr(err, errlen, "'%s': attribute 'config' is missing or unreadable", path);
        ok = false;
    }
    free(cfg);
    size_t maxn = 0, cap, numel = 0;
    for (int i = 0; i < m->n_params; i++) maxn = GDN_MAX(maxn, m->params[i].numel);
    double *h = gdn_malloc(maxn * sizeof(double));
    cap = maxn;
    for (int g = 0; g < 3; g++) in.stored_bits[g] = 0;
    for (int g = 0; g < 3 && ok; g++) {
        hid_t grp = H5Gopen2(f, GROUPS[g], H5P_DEFAULT);
        if (grp < 0) {
            seterr(err, errlen, "'%s': group '/%s' is missing", path, GROUPS[g]);
            ok = false;
            break;
        }
        for (int i = 0; i < m->n_params && ok; i++) {
            const param_info *p = &m->params[i];
            if (H5Lexists(grp, p->name, H5P_DEFAULT) <= 0) {
                seterr(err, errlen, "'%s': tensor '/%s/%s' is missing (checkpoint of a different "
                                    "model shape?)", path, GROUPS[g], p->name);
                ok = false;
                break;
            }
            int bits = 0;
            ok = read_tensor(grp, path, version, g, p->name, p->rows, p->cols, &h, &cap, &numel,
                             &bits, err, errlen);
            if (ok) group_upload(m, g, i, h);
            // a group of mixed precisions (not written by gdn) reads as the wider
            in.stored_bits[g] = GDN_MAX(in.stored_bits[g], bits);
        }
        if (H5Gclose(grp) < 0 && ok) {
            seterr(err, errlen, "'%s': cannot close group '/%s'", path, GROUPS[g]);
            ok = false;
        }
    }
    free(h);
    if (H5Fclose(f) < 0 && ok) {
        seterr(err, errlen, "'%s': cannot close the file after reading it", path);
        ok = false;
    }
    if (ok) *st = in;
    return ok;
}

// checkpoint_verify: every link of the three groups, in name order.
typedef struct {
    const char *path;
    int version, g, n;
    double *buf;
    size_t cap;
    char *err;
    size_t errlen;
} verify_walk;

static herr_t verify_one(hid_t grp, const char *name, const H5L_info_t *info, void *data) {
    (void)info;
    verify_walk *w = data;
    size_t numel = 0;
    int bits = 0;
    if (!read_tensor(grp, w->path, w->version, w->g, name, -1, -1, &w->buf, &w->cap, &numel, &bits,
                     w->err, w->errlen))
        return 1;  // stop: the message is in err
    w->n++;
    return 0;
}

bool checkpoint_verify(const char *path, int *ntensors, char *err, size_t errlen) {
    if (ntensors) *ntensors = 0;
    if (errlen) err[0] = '\0';
    verify_walk w = {.path = path, .err = err, .errlen = errlen};
    hid_t f = open_checked(path, &w.version, err, errlen);
    if (f < 0) return false;
    train_state st;
    bool ok = read_state(f, path, &st, err, errlen);
    char *cfg = ok ? attr_str_r(f, "config") : NULL;
    if (ok && !cfg) {
        seterr(err, errlen, "'%s': attribute 'config' is missing or unreadable", path);
        ok = false;
    }
    free(cfg);
    ckpt_tokenizer tok = {.kind = ""};
    ok = ok && read_tokenizer(f, path, &tok, err, errlen);
    ckpt_tokenizer_free(&tok);
    for (int g = 0; g < 3 && ok; g++) {
        hid_t grp = H5Gopen2(f, GROUPS[g], H5P_DEFAULT);
        if (grp < 0) {
            h5_reason r = h5_reason_now();
            seterr(err, errlen, "'%s': group '/%s' is missing or unreadable (HDF5: %s)", path,
                   GROUPS[g], r.text);
            ok = false;
            break;
        }
        w.g = g;
        hsize_t idx = 0;
        herr_t rc = H5Literate(grp, H5_INDEX_NAME, H5_ITER_INC, &idx, verify_one, &w);
        if (rc != 0) {
            if (rc < 0) {  // the iteration itself failed (a damaged group), not a tensor
                h5_reason r = h5_reason_now();
                seterr(err, errlen, "'%s': cannot list group '/%s': the file is damaged (HDF5: %s)",
                       path, GROUPS[g], r.text);
            }
            ok = false;
        }
        if (H5Gclose(grp) < 0 && ok) {
            seterr(err, errlen, "'%s': cannot close group '/%s'", path, GROUPS[g]);
            ok = false;
        }
    }
    free(w.buf);
    if (H5Fclose(f) < 0 && ok) {
        seterr(err, errlen, "'%s': cannot close the file after reading it", path);
        ok = false;
    }
    if (ntensors) *ntensors = w.n;
    return ok;
}

bool checkpoint_read_tokenizer(const char *path, ckpt_tokenizer *t, char *err, size_t errlen) {
    *t = (ckpt_tokenizer){.kind = ""};
    int version = 0;
    hid_t f = open_checked(path, &version, err, errlen);
    if (f < 0) return false;
    bool ok = read_tokenizer(f, path, t, err, errlen);
    if (H5Fclose(f) < 0 && ok) {
        seterr(err, errlen, "'%s': cannot close the file after reading it", path);
        ok = false;
    }
    if (!ok) ckpt_tokenizer_free(t);
    return ok;
}
