// dataset.c — the version-1 gdn-tokens HDF5 file (DESIGN 5): a validating reader and an atomic
// writer, and the HDF5 attribute readers (h5_read.h) that the shard reader (tokset.c) shares.
// Token sets (a v1 file or a shard index) are in tokset.c, the batch sampler in sampler.c.
//
// Errors: what a user can cause (missing, foreign, damaged or truncated file, wrong attribute,
// wrong dataset type, token out of range, disk full while writing) returns false with one message
// that names the file and the field, with HDF5's automatic error-stack printing off so nothing
// else is shown; an HDF5 call that fails while tokfile_open reads the file is such a case (the
// file is damaged), said with HDF5's reason. Internal failures (an HDF5 call failing on a file
// that validated, or on handles the reader made itself) go through CHECK_HDF5.
//
// Integrity: the writer uses the HDF5 1.10 file format (checksummed metadata) and HDF5's
// Fletcher32 filter on the token chunks; tokfile_open reads every token, so a damaged chunk is
// found at open. Files without checksums (written before) read the same way, unchecked.
#include "dataset.h"
#include "h5_read.h"
#include "../core/common.h"
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#define GDN_TOKENS_FORMAT "gdn-tokens"
#define GDN_TOKENS_VERSION 1
// vocab_size in [2, 2^24]: ids are int32 downstream, and 16.7M embedding rows is far beyond any
// real tokenizer, so a larger value is a corrupt or foreign attribute.
#define VOCAB_MIN 2
#define VOCAB_MAX (1 << 24)
#define WRITE_CHUNK 65536            // tokens per HDF5 chunk (128 KiB as uint16)
#define SCAN_BLOCK (1 << 20)         // tokens per read when validating at open
#define READ_CACHE_BYTES (32u << 20) // raw-data chunk cache per dataset for random window reads

static const char *const split_name[2] = {"/train", "/val"};

// ---- HDF5 error handling ------------------------------------------------------------------

// Silence HDF5's automatic error-stack printing in this thread (the setting is per thread in
// a thread-safe build) for calls whose failure is a user error; restore it afterwards.
void h5_quiet_begin(h5_quiet *q) {
    CHECK_HDF5(H5Eget_auto2(H5E_DEFAULT, &q->fn, &q->data));
    CHECK_HDF5(H5Eset_auto2(H5E_DEFAULT, NULL, NULL));
}
void h5_quiet_end(const h5_quiet *q) {
    CHECK_HDF5(H5Eset_auto2(H5E_DEFAULT, q->fn, q->data));
}

static herr_t h5_walk_innermost(unsigned n, const H5E_error2_t *e, void *out) {
    if (n == 0 && e->desc) snprintf((char *)out, 256, "%s", e->desc);
    return 0;
}

// The innermost message of this thread's HDF5 error stack (where the error was detected),
// reduced to the OS error text when the low-level driver reports one, e.g. the sec2 driver's
// "... errno = 28, error message = 'No space left on device', ...".
void h5_error_text(char *out, size_t outlen) {
    char desc[256] = "";
    if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk_innermost, desc) < 0 || !desc[0])
        snprintf(desc, sizeof desc, "unknown HDF5 error");
    const char *key = "error message = '";
    const char *m = strstr(desc, key);
    if (m) {
        m += strlen(key);
        const char *end = strchr(m, '\'');
        int len = end ? (int)(end - m) : (int)strlen(m);
        snprintf(out, outlen, "%.*s", len, m);
    } else {
        snprintf(out, outlen, "%s", desc);
    }
}

// "uint16", "int32", "float64", "string", ... for messages.
void h5_type_name(hid_t t, char *out, size_t outlen) {
    H5T_class_t c = H5Tget_class(t);
    CHECK_HDF5(c);
    size_t size = H5Tget_size(t);
    if (size == 0) gdn_die("H5Tget_size failed");
    if (c == H5T_INTEGER) {
        H5T_sign_t s = H5Tget_sign(t);
        CHECK_HDF5(s);
        snprintf(out, outlen, "%sint%zu", s == H5T_SGN_NONE ? "u" : "", 8 * size);
    } else if (c == H5T_FLOAT) {
        snprintf(out, outlen, "float%zu", 8 * size);
    } else if (c == H5T_STRING) {
        snprintf(out, outlen, "string");
    } else {
        snprintf(out, outlen, "HDF5 type class %d", (int)c);
    }
}

// ---- reader ---------------------------------------------------------------------------------

// An HDF5 call failed while reading `what` of the file: it is damaged (or not what it claims).
// Call right after the failing call (the error stack is read here). Returns false.
bool h5_damaged(const char *path, const char *what, char *err, size_t errlen) {
    char why[256];
    h5_error_text(why, sizeof why);
    snprintf(err, errlen, "%s: cannot read %s: the file is damaged or truncated (HDF5: %s)", path,
             what, why);
    return false;
}

// An attribute of the root group: open it and check it is one value of type class `want`
// (`what` names it in the message). On success the caller reads *a with type *t and closes
// both with attr_close; on failure everything is closed and err says why.
typedef struct {
    hid_t a, t, sp;
} attr_handle;

static void attr_close(attr_handle *h) {
    CHECK_HDF5(H5Sclose(h->sp));
    CHECK_HDF5(H5Tclose(h->t));
    CHECK_HDF5(H5Aclose(h->a));
}

static bool attr_open(hid_t file, const char *path, const char *name, H5T_class_t want,
                      const char *what, attr_handle *h, char *err, size_t errlen) {
    char desc[96];
    snprintf(desc, sizeof desc, "attribute '%s'", name);
    htri_t ex = H5Aexists(file, name);
    if (ex < 0) return h5_damaged(path, desc, err, errlen);
    if (!ex) {
        snprintf(err, errlen, "%s: attribute '%s' is missing (not a gdn-tokens file?)", path, name);
        return false;
    }
    h->a = H5Aopen(file, name, H5P_DEFAULT);
    if (h->a < 0) return h5_damaged(path, desc, err, errlen);
    h->t = H5Aget_type(h->a);
    h->sp = h->t >= 0 ? H5Aget_space(h->a) : H5I_INVALID_HID;
    H5T_class_t c = h->sp >= 0 ? H5Tget_class(h->t) : H5T_NO_CLASS;
    hssize_t np = c >= 0 ? H5Sget_simple_extent_npoints(h->sp) : -1;
    if (h->t < 0 || h->sp < 0 || c < 0 || np < 0) {
        h5_damaged(path, desc, err, errlen);
        if (h->sp >= 0) H5Sclose(h->sp);  // failing already: the message says why
        if (h->t >= 0) H5Tclose(h->t);
        H5Aclose(h->a);
        return false;
    }
    if (c == want && np == 1) return true;
    char tn[64];
    h5_type_name(h->t, tn, sizeof tn);
    snprintf(err, errlen, "%s: attribute '%s' must be one %s, found %lld value(s) of type %s", path,
             name, what, (long long)np, tn);
    attr_close(h);
    return false;
}

// One integer attribute of the root group. False + message if missing or not one integer.
bool h5_attr_int(hid_t file, const char *path, const char *name, long long *v, char *err,
                     size_t errlen) {
    attr_handle h;
    if (!attr_open(file, path, name, H5T_INTEGER, "integer", &h, err, errlen)) return false;
    bool ok = H5Aread(h.a, H5T_NATIVE_LLONG, v) >= 0;
    if (!ok) {
        char desc[96];
        snprintf(desc, sizeof desc, "attribute '%s'", name);
        h5_damaged(path, desc, err, errlen);
    }
    attr_close(&h);
    return ok;
}

// One string attribute (fixed-length or variable-length, as h5py writes) into out[outlen].
bool h5_attr_str(hid_t file, const char *path, const char *name, char *out, size_t outlen,
                     char *err, size_t errlen) {
    attr_handle h;
    if (!attr_open(file, path, name, H5T_STRING, "string", &h, err, errlen)) return false;
    bool ok = true;
    hid_t a = h.a, t = h.t;
    htri_t vl = H5Tis_variable_str(t);
    CHECK_HDF5(vl);
    hid_t mt = H5Tcopy(H5T_C_S1);
    CHECK_HDF5(mt);
    char *s = NULL;
    char desc[96];
    snprintf(desc, sizeof desc, "attribute '%s'", name);
    if (vl) {
        CHECK_HDF5(H5Tset_size(mt, H5T_VARIABLE));
        if (H5Aread(a, mt, &s) < 0) {
            ok = h5_damaged(path, desc, err, errlen);
            s = NULL;
        }
    } else {
        // one byte more than stored, so a NULLPAD string that fills its size keeps its
        // last character after conversion to NULLTERM
        size_t size = H5Tget_size(t);
        if (size == 0) gdn_die("H5Tget_size failed");
        s = gdn_malloc(size + 1);
        CHECK_HDF5(H5Tset_size(mt, size + 1));
        if (H5Aread(a, mt, s) < 0) ok = h5_damaged(path, desc, err, errlen);
        s[size] = 0;
    }
    if (!ok) {
        // the message is in err
    } else if (!s || strlen(s) >= outlen) {
        snprintf(err, errlen, "%s: attribute '%s' is %s (at most %zu characters)", path, name,
                 s ? "too long" : "a null string", outlen - 1);
        ok = false;
    } else {
        snprintf(out, outlen, "%s", s);
    }
    if (vl) {
        if (s) CHECK_HDF5(H5free_memory(s));
    } else {
        free(s);
    }
    CHECK_HDF5(H5Tclose(mt));
    attr_close(&h);
    return ok;
}

// Open /train or /val, check it is a 1-D unsigned integer dataset of the width the format
// prescribes for the vocabulary, and that every token is < vocab_size.
//
// The token check scans the whole dataset in SCAN_BLOCK pieces at open: one sequential read,
// which for our sizes (up to a few hundred million tokens) costs well under the first step,
// and turns a corrupt file into a message instead of an out-of-bounds embedding lookup.
static bool open_split(token_file *f, int split, char *err, size_t errlen) {
    const char *name = split_name[split];
    char desc[64];
    snprintf(desc, sizeof desc, "dataset '%s'", name);
    htri_t ex = H5Lexists(f->file, name + 1, H5P_DEFAULT);
    if (ex < 0) return h5_damaged(f->path, desc, err, errlen);
    if (!ex) {
        snprintf(err, errlen, "%s: dataset '%s' is missing", f->path, name);
        return false;
    }
    hid_t obj = H5Oopen(f->file, name, H5P_DEFAULT);
    if (obj < 0) return h5_damaged(f->path, desc, err, errlen);
    H5I_type_t it = H5Iget_type(obj);
    CHECK_HDF5(it);
    CHECK_HDF5(H5Oclose(obj));
    if (it != H5I_DATASET) {
        snprintf(err, errlen, "%s: '%s' is not a dataset (a group or named type)", f->path, name);
        return false;
    }
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    CHECK_HDF5(dapl);
    CHECK_HDF5(H5Pset_chunk_cache(dapl, 10007, READ_CACHE_BYTES, 1.0));
    hid_t d = H5Dopen2(f->file, name, dapl);
    if (d < 0) h5_damaged(f->path, desc, err, errlen);
    CHECK_HDF5(H5Pclose(dapl));
    if (d < 0) return false;
    f->dset[split] = d;

    hid_t sp = H5Dget_space(d), t = sp >= 0 ? H5Dget_type(d) : H5I_INVALID_HID;
    if (sp < 0 || t < 0) {
        h5_damaged(f->path, desc, err, errlen);
        if (sp >= 0) H5Sclose(sp);  // failing already: the message says why
        return false;
    }
    int rank = H5Sget_simple_extent_ndims(sp);
    CHECK_HDF5(rank);
    size_t want = f->vocab_size <= 65536 ? 2 : 4;
    H5T_class_t c = H5Tget_class(t);
    CHECK_HDF5(c);
    bool type_ok = c == H5T_INTEGER && H5Tget_size(t) == want;
    if (type_ok) {
        H5T_sign_t sg = H5Tget_sign(t);
        CHECK_HDF5(sg);
        type_ok = sg == H5T_SGN_NONE;
    }
    bool ok = true;
    if (rank != 1) {
        snprintf(err, errlen, "%s: dataset '%s' has rank %d, expected a 1-D array of tokens",
                 f->path, name, rank);
        ok = false;
    } else if (!type_ok) {
        char tn[64];
        h5_type_name(t, tn, sizeof tn);
        snprintf(err, errlen, "%s: dataset '%s' has type %s, expected uint%zu for vocab_size %d",
                 f->path, name, tn, 8 * want, f->vocab_size);
        ok = false;
    } else {
        hsize_t dim;
        CHECK_HDF5(H5Sget_simple_extent_dims(sp, &dim, NULL));
        f->n_tokens[split] = dim;
    }
    CHECK_HDF5(H5Tclose(t));
    CHECK_HDF5(H5Sclose(sp));
    if (!ok) return false;

    uint64_t n = f->n_tokens[split];
    uint32_t *buf = gdn_malloc(sizeof(uint32_t) * (size_t)GDN_MIN(n, (uint64_t)SCAN_BLOCK));
    hid_t fs = H5Dget_space(d);
    CHECK_HDF5(fs);
    for (uint64_t s = 0; s < n && ok; s += SCAN_BLOCK) {
        hsize_t start = s, cnt = GDN_MIN(n - s, (uint64_t)SCAN_BLOCK);
        hid_t ms = H5Screate_simple(1, &cnt, NULL);
        CHECK_HDF5(ms);
        CHECK_HDF5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &cnt, NULL));
        if (H5Dread(d, H5T_NATIVE_UINT32, ms, fs, H5P_DEFAULT, buf) < 0) {
            char what[128];
            snprintf(what, sizeof what, "tokens [%llu, %llu) of '%s'", (unsigned long long)s,
                     (unsigned long long)(s + cnt), name);
            ok = h5_damaged(f->path, what, err, errlen);
        }
        CHECK_HDF5(H5Sclose(ms));
        if (!ok) break;
        for (hsize_t i = 0; i < cnt; i++) {
            if (buf[i] >= (uint32_t)f->vocab_size) {
                snprintf(err, errlen,
                         "%s: dataset '%s' holds token %u at index %llu, >= vocab_size %d", f->path,
                         name, buf[i], (unsigned long long)(s + i), f->vocab_size);
                ok = false;
                break;
            }
        }
    }
    CHECK_HDF5(H5Sclose(fs));
    free(buf);
    return ok;
}

bool tokfile_open(token_file *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->file = H5I_INVALID_HID;
    f->dset[0] = f->dset[1] = H5I_INVALID_HID;
    if (strlen(path) >= sizeof f->path) {
        snprintf(err, errlen, "%.200s...: path longer than %zu characters", path,
                 sizeof f->path - 1);
        return false;
    }
    snprintf(f->path, sizeof f->path, "%s", path);

    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open token file: %s", path, strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return false;
    }
    char h5err[256] = "";
    h5_quiet q;  // over the whole open: a failing call is reported through err
    h5_quiet_begin(&q);
    htri_t is = H5Fis_hdf5(path);
    if (is < 0) h5_error_text(h5err, sizeof h5err);
    hid_t file = H5I_INVALID_HID;
    if (is > 0) {
        file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (file < 0) h5_error_text(h5err, sizeof h5err);
    }
    if (is == 0) {
        h5_quiet_end(&q);
        snprintf(err, errlen,
                 "%s: not an HDF5 file (expected a gdn-tokens file written by gdn-prepare)", path);
        return false;
    }
    if (file < 0) {
        h5_quiet_end(&q);
        snprintf(err, errlen, "%s: cannot open as HDF5: the file is damaged or truncated (%s)",
                 path, h5err);
        return false;
    }
    f->file = file;

    char fmt[64];
    long long version, vocab, eot;
    bool ok = h5_attr_str(file, path, "format", fmt, sizeof fmt, err, errlen);
    if (ok && strcmp(fmt, GDN_TOKENS_FORMAT) != 0) {
        snprintf(err, errlen, "%s: attribute 'format' is \"%s\", expected \"%s\"", path, fmt,
                 GDN_TOKENS_FORMAT);
        ok = false;
    }
    ok = ok && h5_attr_int(file, path, "version", &version, err, errlen);
    if (ok && version != GDN_TOKENS_VERSION) {
        snprintf(err, errlen, "%s: attribute 'version' is %lld, this build reads version %d", path,
                 version, GDN_TOKENS_VERSION);
        ok = false;
    }
    ok = ok && h5_attr_int(file, path, "vocab_size", &vocab, err, errlen);
    if (ok && (vocab < VOCAB_MIN || vocab > VOCAB_MAX)) {
        snprintf(err, errlen, "%s: attribute 'vocab_size' is %lld, outside [%d, %d]", path, vocab,
                 VOCAB_MIN, VOCAB_MAX);
        ok = false;
    }
    if (ok) f->vocab_size = (int)vocab;
    ok = ok && h5_attr_str(file, path, "tokenizer", f->tokenizer, sizeof f->tokenizer, err, errlen);
    if (ok && !f->tokenizer[0]) {
        snprintf(err, errlen,
                 "%s: attribute 'tokenizer' is empty (expected \"bytes\" or \"spm:<model>\")",
                 path);
        ok = false;
    }
    ok = ok && h5_attr_int(file, path, "eot_token", &eot, err, errlen);
    if (ok && (eot < -1 || eot >= vocab)) {
        snprintf(err, errlen,
                 "%s: attribute 'eot_token' is %lld, expected -1 (none) or a token in [0, %lld)",
                 path, eot, vocab);
        ok = false;
    }
    if (ok) f->eot_token = (int)eot;
    ok = ok && open_split(f, DATA_SPLIT_TRAIN, err, errlen);
    ok = ok && open_split(f, DATA_SPLIT_VAL, err, errlen);
    if (!ok) tokfile_close(f);
    h5_quiet_end(&q);
    return ok;
}

void tokfile_close(token_file *f) {
    for (int s = 0; s < 2; s++) {
        if (f->dset[s] >= 0) CHECK_HDF5(H5Dclose(f->dset[s]));
        f->dset[s] = H5I_INVALID_HID;
    }
    if (f->file >= 0) CHECK_HDF5(H5Fclose(f->file));
    f->file = H5I_INVALID_HID;
}

void tokfile_read(token_file *f, int split, uint64_t start, size_t n, int32_t *out) {
    if (split != DATA_SPLIT_TRAIN && split != DATA_SPLIT_VAL)
        gdn_die("tokfile_read: split %d is not DATA_SPLIT_TRAIN or DATA_SPLIT_VAL", split);
    uint64_t len = f->n_tokens[split];
    if (start > len || n > len - start)
        gdn_die("tokfile_read: %s%s tokens [%llu, %llu) out of bounds (length %llu)", f->path,
                split_name[split], (unsigned long long)start, (unsigned long long)(start + n),
                (unsigned long long)len);
    if (n == 0) return;
    hsize_t hs = start, hn = n;
    hid_t fs = H5Dget_space(f->dset[split]);
    CHECK_HDF5(fs);
    hid_t ms = H5Screate_simple(1, &hn, NULL);
    CHECK_HDF5(ms);
    CHECK_HDF5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &hs, NULL, &hn, NULL));
    CHECK_HDF5(H5Dread(f->dset[split], H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, out));
    CHECK_HDF5(H5Sclose(ms));
    CHECK_HDF5(H5Sclose(fs));
}

// ---- writer -----------------------------------------------------------------------------------

// Every HDF5 call in the writer may fail for a user reason (disk full, quota, permissions),
// so a failure records which step failed and HDF5's innermost message, then unwinds.
#define WCHECK(stmt, what)                                                                         \
    do {                                                                                           \
        if ((long long)(stmt) < 0) {                                                               \
            h5_error_text(h5err, sizeof h5err);                                                    \
            step = (what);                                                                         \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

static bool check_tokens(const char *path, const char *name, const uint32_t *x, size_t n, int vocab,
                         char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (x[i] >= (uint32_t)vocab) {
            snprintf(err, errlen, "%s: cannot write: %s token %u at index %zu >= vocab_size %d",
                     path, name, x[i], i, vocab);
            return false;
        }
    }
    return true;
}

bool tokfile_write(const char *path, int vocab_size, const char *tokenizer, int eot_token,
                   const uint32_t *train, size_t n_train, const uint32_t *val, size_t n_val,
                   char *err, size_t errlen) {
    if (vocab_size < VOCAB_MIN || vocab_size > VOCAB_MAX) {
        snprintf(err, errlen, "%s: cannot write: vocab_size %d outside [%d, %d]", path, vocab_size,
                 VOCAB_MIN, VOCAB_MAX);
        return false;
    }
    if (!tokenizer || !tokenizer[0] || strlen(tokenizer) >= sizeof(((token_file *)0)->tokenizer)) {
        snprintf(err, errlen,
                 "%s: cannot write: tokenizer must be a non-empty string of < %zu characters", path,
                 sizeof(((token_file *)0)->tokenizer));
        return false;
    }
    if (eot_token < -1 || eot_token >= vocab_size) {
        snprintf(err, errlen, "%s: cannot write: eot_token %d not -1 or in [0, %d)", path,
                 eot_token, vocab_size);
        return false;
    }
    if (!check_tokens(path, "/train", train, n_train, vocab_size, err, errlen) ||
        !check_tokens(path, "/val", val, n_val, vocab_size, err, errlen))
        return false;

    char tmp[600];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%.200s...: path too long", path);
        return false;
    }
    hid_t file = H5I_INVALID_HID, sp = H5I_INVALID_HID, at = H5I_INVALID_HID, st = H5I_INVALID_HID,
          dcpl = H5I_INVALID_HID, ds = H5I_INVALID_HID, fapl = H5I_INVALID_HID;
    char h5err[256] = "";
    const char *step = "";
    h5_quiet q;
    h5_quiet_begin(&q);

    // the HDF5 1.10 file format: checksummed metadata
    WCHECK(fapl = H5Pcreate(H5P_FILE_ACCESS), "creating a property list");
    WCHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110), "setting the file format");
    file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    WCHECK(file, "creating the file");
    WCHECK(H5Pclose(fapl), "closing a property list");
    fapl = H5I_INVALID_HID;
    WCHECK(sp = H5Screate(H5S_SCALAR), "creating a dataspace");
    // string attributes: fixed length, NUL-terminated
    const char *snames[2] = {"format", "tokenizer"}, *svals[2] = {GDN_TOKENS_FORMAT, tokenizer};
    for (int i = 0; i < 2; i++) {
        WCHECK(st = H5Tcopy(H5T_C_S1), "creating a string type");
        WCHECK(H5Tset_size(st, strlen(svals[i]) + 1), "creating a string type");
        WCHECK(H5Tset_strpad(st, H5T_STR_NULLTERM), "creating a string type");
        WCHECK(at = H5Acreate2(file, snames[i], st, sp, H5P_DEFAULT, H5P_DEFAULT),
               "writing attributes");
        WCHECK(H5Awrite(at, st, svals[i]), "writing attributes");
        WCHECK(H5Aclose(at), "writing attributes");
        at = H5I_INVALID_HID;
        WCHECK(H5Tclose(st), "closing a string type");
        st = H5I_INVALID_HID;
    }
    const char *inames[3] = {"version", "vocab_size", "eot_token"};
    const int ivals[3] = {GDN_TOKENS_VERSION, vocab_size, eot_token};
    for (int i = 0; i < 3; i++) {
        WCHECK(at = H5Acreate2(file, inames[i], H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT),
               "writing attributes");
        WCHECK(H5Awrite(at, H5T_NATIVE_INT, &ivals[i]), "writing attributes");
        WCHECK(H5Aclose(at), "writing attributes");
        at = H5I_INVALID_HID;
    }
    WCHECK(H5Sclose(sp), "closing a dataspace");
    sp = H5I_INVALID_HID;

    // datasets: 1-D, chunked (random window reads touch one or two chunks), uint16 when every
    // id < 65536 fits, else uint32; the max dimension is unlimited so a chunk may exceed a short
    // split (and an empty split is legal).
    hid_t ftype = vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
    const uint32_t *data[2] = {train, val};
    const size_t len[2] = {n_train, n_val};
    for (int s = 0; s < 2; s++) {
        hsize_t dim = len[s], maxdim = H5S_UNLIMITED;
        hsize_t chunk = GDN_MAX((hsize_t)1, GDN_MIN(dim, (hsize_t)WRITE_CHUNK));
        WCHECK(sp = H5Screate_simple(1, &dim, &maxdim), "creating a dataspace");
        WCHECK(dcpl = H5Pcreate(H5P_DATASET_CREATE), "creating a property list");
        WCHECK(H5Pset_chunk(dcpl, 1, &chunk), "setting the chunk size");
        WCHECK(H5Pset_fletcher32(dcpl), "setting the checksum filter");
        const char *what = s == 0 ? "writing /train" : "writing /val";
        WCHECK(ds = H5Dcreate2(file, split_name[s], ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT),
               what);
        if (len[s] > 0)
            WCHECK(H5Dwrite(ds, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data[s]), what);
        WCHECK(H5Dclose(ds), what);
        ds = H5I_INVALID_HID;
        WCHECK(H5Pclose(dcpl), "closing a property list");
        dcpl = H5I_INVALID_HID;
        WCHECK(H5Sclose(sp), "closing a dataspace");
        sp = H5I_INVALID_HID;
    }
    WCHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), "flushing the file");
    hid_t closing = file;
    file = H5I_INVALID_HID;
    WCHECK(H5Fclose(closing), "closing the file");
    h5_quiet_end(&q);

    // durable before visible: fsync the data, rename over the real name, fsync the directory
    int fd = open(tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        snprintf(h5err, sizeof h5err, "%s", strerror(errno));
        if (fd >= 0) close(fd);
        step = "fsync";
        goto fail_closed;
    }
    if (close(fd) != 0) {
        snprintf(h5err, sizeof h5err, "%s", strerror(errno));
        step = "close";
        goto fail_closed;
    }
    if (rename(tmp, path) != 0) {
        snprintf(h5err, sizeof h5err, "%s", strerror(errno));
        step = "renaming the temporary file";
        goto fail_closed;
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY);
    // a directory that cannot be synced (EINVAL on some filesystems) only weakens durability
    // of the rename; the file is complete under its name, so this is a warning, not a failure
    if (dfd < 0 || (fsync(dfd) != 0 && errno != EINVAL))
        fprintf(stderr, "warning: %s: cannot fsync directory %s: %s\n", path, dir, strerror(errno));
    if (dfd >= 0) close(dfd);
    return true;

fail:
    // close what is open, quietly (errors here add nothing to the first one)
    if (ds >= 0) H5Dclose(ds);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (fapl >= 0) H5Pclose(fapl);
    if (at >= 0) H5Aclose(at);
    if (st >= 0) H5Tclose(st);
    if (sp >= 0) H5Sclose(sp);
    if (file >= 0) H5Fclose(file);
    h5_quiet_end(&q);
fail_closed:
    if (unlink(tmp) != 0 && errno != ENOENT)
        fprintf(stderr, "warning: cannot remove temporary file %s: %s\n", tmp, strerror(errno));
    {
        bool full =
            strstr(h5err, "No space") || strstr(h5err, "quota") || strstr(h5err, "too large");
        snprintf(err, errlen, "%s: write failed while %s: %s%s", path, step, h5err,
                 full ? " (HINT: the disk or quota is full; free space or write elsewhere)" : "");
    }
    return false;
}
