// test_ckpt_integrity.c — checkpoint integrity (src/model/checkpoint.h) on the CPU backend, with
// a tiny GSA model whose AdamW m and v are filled with random values (v >= 0):
//   - save + load round-trips every parameter and moment bitwise; checkpoint_verify reads all
//     3 x n_params tensors; every dataset carries the Fletcher32 filter;
//   - one byte flipped inside a tensor's stored data (/params, /adam_m, /adam_v; first and last
//     chunk of a multi-chunk tensor) -> load and verify refuse, naming that tensor and the checksum;
//   - truncated files (to 0 bytes, 100 bytes, half, all but 1 byte) -> a clear error, no crash;
//   - values rewritten with a valid checksum: a negative or NaN v, an infinite m, a NaN
//     parameter, a negative step, world_size 0 -> refused, naming the tensor or attribute;
//   - checkpoint_save of a model whose v holds a negative element fails (its read-back refuses
//     it) and the previous checkpoint at that path is untouched and still loads;
//   - the version-1 form (contiguous datasets, no checksums, the earliest HDF5 file format, as
//     written before checksums) still loads, bitwise; a version-2 file whose tensor has no
//     Fletcher32 filter is refused; a tensor of the wrong type (float32 before version 3) or
//     shape is refused; a version beyond 3 is refused.
// Control (the checks can fail): the damaged files differ from the saved one (the byte did flip),
// and the same flip in the version-1 form is not caught by HDF5 (no checksum there): the load
// succeeds with a different value, which is what the checksum is for.
#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../src/core/config.h"
#include "../src/core/rng.h"
#include "../src/model/backend.h"
#include "../src/model/checkpoint.h"
#include "../src/model/model.h"
#include "fileutil.h"
#include "testutil.h"
#include "tiny_model.h"

static char dir[512];

// dir/name, in one of 8 rotating buffers (a path kept longer is copied by the caller)
static const char *at(const char *name) {
    static char buf[8][640];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static gdn_config test_config(void) {
    gdn_config c = tiny_config("GSA", 3);
    c.vocab_size = 300;  // embed: 300 x 16 = 4800 elements
    return c;
}

static model *make_model(uint64_t seed) {
    gdn_config c = test_config();
    model *m = model_create(&c, &backend_cpu, 2, 8);
    model_init_params(m, seed);
    rng_t r;
    rng_init(&r, seed, 1);
    tiny_fill_moments(m, &r);
    return m;
}

// Load path into a fresh model; *out (optional) gets the model, else it is freed.
static bool load(const char *path, char *err, size_t errlen, model **out) {
    gdn_config c = test_config();
    model *m = model_create(&c, &backend_cpu, 2, 8);
    train_state st = {0};
    bool ok = checkpoint_load(path, m, &st, err, errlen);
    if (out) *out = m;
    else model_free(m);
    return ok;
}

// Dataset /group/name of path, opened with `flags` (H5F_ACC_RDONLY or H5F_ACC_RDWR); *file gets
// the file, closed by the caller after the dataset.
static hid_t open_tensor(const char *path, unsigned flags, const char *group, const char *name,
                         hid_t *file) {
    hid_t f = H5Fopen(path, flags, H5P_DEFAULT);
    CHECK_HDF5(f);
    char full[256];
    snprintf(full, sizeof full, "/%s/%s", group, name);
    hid_t d = H5Dopen2(f, full, H5P_DEFAULT);
    CHECK_HDF5(d);
    *file = f;
    return d;
}

// File offset and stored size of chunk `which` (0 = first, -1 = last) of /group/name, or of
// the contiguous data of a version-1 file.
static void data_location(const char *path, const char *group, const char *name, int which,
                          haddr_t *addr, hsize_t *size, int *nchunks) {
    hid_t f, d = open_tensor(path, H5F_ACC_RDONLY, group, name, &f);
    hid_t dcpl = H5Dget_create_plist(d);
    CHECK_HDF5(dcpl);
    *nchunks = 0;
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t n = 0;
        hid_t fs = H5Dget_space(d);
        CHECK_HDF5(fs);
        CHECK_HDF5(H5Dget_num_chunks(d, fs, &n));
        *nchunks = (int)n;
        hsize_t idx = which < 0 ? n - 1 : (hsize_t)which, off[2];
        unsigned mask;
        CHECK_HDF5(H5Dget_chunk_info(d, fs, idx, off, &mask, addr, size));
        CHECK_HDF5(H5Sclose(fs));
    } else {
        *addr = H5Dget_offset(d);
        *size = H5Dget_storage_size(d);
        if (*addr == HADDR_UNDEF) gdn_die("no offset for /%s/%s", group, name);
    }
    CHECK_HDF5(H5Pclose(dcpl));
    CHECK_HDF5(H5Dclose(d));
    CHECK_HDF5(H5Fclose(f));
}

// Bit 0x10 of byte `where` of path flipped in place.
static void flip_byte(const char *path, off_t where) { xor_bytes(path, where, &(unsigned char){0x10}, 1); }

// Element idx of /group/name set to v through HDF5 (the checksum is recomputed: a valid file
// with a bad value).
static void set_element(const char *path, const char *group, const char *name, size_t idx, double v) {
    hid_t f, d = open_tensor(path, H5F_ACC_RDWR, group, name, &f);
    hid_t s = H5Dget_space(d);
    CHECK_HDF5(s);
    hssize_t n = H5Sget_simple_extent_npoints(s);
    double *x = gdn_malloc((size_t)n * sizeof(double));
    CHECK_HDF5(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x));
    x[idx] = v;
    CHECK_HDF5(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x));
    free(x);
    CHECK_HDF5(H5Sclose(s));
    CHECK_HDF5(H5Dclose(d));
    CHECK_HDF5(H5Fclose(f));
}

static void set_attr_i64(const char *path, const char *name, int64_t v) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK_HDF5(f);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    CHECK_HDF5(a);
    CHECK_HDF5(H5Awrite(a, H5T_NATIVE_INT64, &v));
    CHECK_HDF5(H5Aclose(a));
    CHECK_HDF5(H5Fclose(f));
}

// ---- rewriting a checkpoint in another form -----------------------------------------------

static herr_t copy_attr(hid_t loc, const char *name, const H5A_info_t *info, void *dst) {
    (void)info;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    CHECK_HDF5(a);
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    CHECK_HDF5(t);
    CHECK_HDF5(s);
    size_t n = H5Tget_size(t) * (size_t)H5Sget_simple_extent_npoints(s);
    void *buf = gdn_malloc(n);
    CHECK_HDF5(H5Aread(a, t, buf));
    hid_t b = H5Acreate2(*(hid_t *)dst, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(b);
    CHECK_HDF5(H5Awrite(b, t, buf));
    free(buf);
    CHECK_HDF5(H5Aclose(b));
    CHECK_HDF5(H5Sclose(s));
    CHECK_HDF5(H5Tclose(t));
    CHECK_HDF5(H5Aclose(a));
    return 0;
}

typedef struct {
    hid_t dst;
    hid_t file_type;    // type of the copies
    const char *odd;    // this tensor gets `odd_shape` (1 x n) when not NULL
} copy_ctx;

static herr_t copy_tensor(hid_t grp, const char *name, const H5L_info_t *info, void *data) {
    (void)info;
    copy_ctx *c = data;
    hid_t d = H5Dopen2(grp, name, H5P_DEFAULT);
    CHECK_HDF5(d);
    hid_t s = H5Dget_space(d);
    CHECK_HDF5(s);
    hsize_t dims[2];
    CHECK_HDF5(H5Sget_simple_extent_dims(s, dims, NULL));
    double *x = gdn_malloc((size_t)(dims[0] * dims[1]) * sizeof(double));
    CHECK_HDF5(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x));
    if (c->odd && strcmp(name, c->odd) == 0) {
        dims[1] *= dims[0];
        dims[0] = 1;
    }
    hid_t s2 = H5Screate_simple(2, dims, NULL);
    CHECK_HDF5(s2);
    hid_t d2 = H5Dcreate2(c->dst, name, c->file_type, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(d2);
    CHECK_HDF5(H5Dwrite(d2, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x));
    free(x);
    CHECK_HDF5(H5Dclose(d2));
    CHECK_HDF5(H5Sclose(s2));
    CHECK_HDF5(H5Sclose(s));
    CHECK_HDF5(H5Dclose(d));
    return 0;
}

// src rewritten as dst with contiguous datasets, no filter, the default (earliest) HDF5 file
// format and attribute version = `version`: the form checkpoints had before checksums when
// version is 1. file_type: the datasets' stored type; odd: a tensor stored as (1, n).
static void rewrite(const char *src, const char *dst, int64_t version, hid_t file_type,
                    const char *odd) {
    hid_t a = H5Fopen(src, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK_HDF5(a);
    hid_t b = H5Fcreate(dst, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(b);
    hsize_t idx = 0;
    CHECK_HDF5(H5Aiterate2(a, H5_INDEX_NAME, H5_ITER_INC, &idx, copy_attr, &b));
    hid_t va = H5Aopen(b, "version", H5P_DEFAULT);
    CHECK_HDF5(va);
    CHECK_HDF5(H5Awrite(va, H5T_NATIVE_INT64, &version));
    CHECK_HDF5(H5Aclose(va));
    static const char *const groups[3] = {"params", "adam_m", "adam_v"};
    for (int g = 0; g < 3; g++) {
        hid_t ga = H5Gopen2(a, groups[g], H5P_DEFAULT);
        CHECK_HDF5(ga);
        hid_t gb = H5Gcreate2(b, groups[g], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK_HDF5(gb);
        copy_ctx c = {.dst = gb, .file_type = file_type, .odd = odd};
        idx = 0;
        CHECK_HDF5(H5Literate(ga, H5_INDEX_NAME, H5_ITER_INC, &idx, copy_tensor, &c));
        CHECK_HDF5(H5Gclose(gb));
        CHECK_HDF5(H5Gclose(ga));
    }
    CHECK_HDF5(H5Fclose(b));
    CHECK_HDF5(H5Fclose(a));
}

// ---- the checks -----------------------------------------------------------------------------

static bool has(const char *err, const char *a, const char *b) {
    return strstr(err, a) && (!b || strstr(err, b));
}

static void expect_refused(const char *what, const char *path, const char *must1, const char *must2) {
    char err[2048] = "", verr[2048] = "";
    bool loaded = load(path, err, sizeof err, NULL);
    bool verified = checkpoint_verify(path, NULL, verr, sizeof verr);
    bool ok = !loaded && !verified && has(err, path, NULL) && has(err, must1, must2) &&
              has(verr, must1, must2);
    check_row(ok, what, ok ? "refused" : "NOT refused as expected");
    printf("      load:   %s\n      verify: %s\n", err, verr);
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    snprintf(dir, sizeof dir, "%s/gdn-ckpt-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) gdn_die("mkdtemp %s", dir);
    char err[2048];
    char good[640];  // at()'s buffers rotate: the paths used throughout get their own
    snprintf(good, sizeof good, "%s", at("good.h5"));

    printf("== save, load, verify\n");
    model *m = make_model(7);
    train_state st = {.step = 12, .tokens_seen = 1200, .sampler_pos = 12, .seed = 7,
                      .best_val = INFINITY, .world_size = 1};
    bool saved = checkpoint_save(good, m, &st, NULL, err, sizeof err);
    check_row(saved, "checkpoint_save", saved ? "ok" : err);
    if (!saved) return gc_finish("test_ckpt_integrity");
    model *back = NULL;
    bool ok = load(good, err, sizeof err, &back);
    check_row(ok && tiny_same_state(m, back), "load: parameters, m, v bitwise", ok ? "" : err);
    model_free(back);
    int nt = 0;
    ok = checkpoint_verify(good, &nt, err, sizeof err);
    char detail[64];
    snprintf(detail, sizeof detail, "%d of %d tensors", nt, 3 * m->n_params);
    check_row(ok && nt == 3 * m->n_params, "checkpoint_verify reads every tensor", detail);
    {
        hid_t f = H5Fopen(good, H5F_ACC_RDONLY, H5P_DEFAULT);
        int nfilt = 0;
        for (int g = 0; g < 3; g++)
            for (int i = 0; i < m->n_params; i++) {
                static const char *const gn[3] = {"params", "adam_m", "adam_v"};
                char full[256];
                snprintf(full, sizeof full, "/%s/%s", gn[g], m->params[i].name);
                hid_t d = H5Dopen2(f, full, H5P_DEFAULT), p = H5Dget_create_plist(d);
                unsigned fl;
                size_t nc = 0;
                nfilt += H5Pget_filter_by_id2(p, H5Z_FILTER_FLETCHER32, &fl, &nc, NULL, 0, NULL, NULL) >= 0;
                H5Pclose(p);
                H5Dclose(d);
            }
        H5Fclose(f);
        snprintf(detail, sizeof detail, "%d of %d", nfilt, 3 * m->n_params);
        check_row(nfilt == 3 * m->n_params, "every dataset has the Fletcher32 filter", detail);
    }

    printf("== one byte flipped inside a tensor's data\n");
    const char *embed = m->params[m->wte].name, *wq = m->params[m->lp[0].wq].name;
    struct { const char *group, *name; int chunk; } flips[] = {
        {"params", embed, 0}, {"adam_m", wq, 0}, {"adam_v", embed, -1}, {"adam_v", wq, 0},
    };
    for (size_t k = 0; k < sizeof flips / sizeof flips[0]; k++) {
        const char *bad = at("flip.h5");
        copy_file(good, bad);
        haddr_t addr;
        hsize_t size;
        int nch;
        data_location(bad, flips[k].group, flips[k].name, flips[k].chunk, &addr, &size, &nch);
        flip_byte(bad, (off_t)(addr + size / 3));
        char what[160], must[160];
        snprintf(what, sizeof what, "flip in /%s/%s (chunk %d of %d)", flips[k].group,
                 flips[k].name, flips[k].chunk, nch);
        snprintf(must, sizeof must, "'/%s/%s'", flips[k].group, flips[k].name);
        check_row(files_differ(good, bad), "  control: the file changed", "");
        expect_refused(what, bad, must, "checksum");
    }

    printf("== truncated files\n");
    const off_t size = file_size(good);
    const off_t lens[] = {0, 100, size / 2, size - 1};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const char *bad = at("trunc.h5");
        copy_file(good, bad);
        if (truncate(bad, lens[k]) != 0) gdn_die("truncate");
        char what[96];
        snprintf(what, sizeof what, "truncated to %lld of %lld bytes", (long long)lens[k],
                 (long long)size);
        expect_refused(what, bad, lens[k] < 512 ? "HDF5" : "truncated", NULL);
    }

    printf("== bad values with valid checksums\n");
    struct { const char *group, *name; size_t idx; double v; const char *must; } vals[] = {
        {"adam_v", wq, 3, -1e-9, "AdamW second moments must be finite and >= 0"},
        {"adam_v", embed, 0, NAN, "AdamW second moments"},
        {"adam_m", embed, 5, INFINITY, "AdamW first moments must be finite"},
        {"params", wq, 1, NAN, "parameters must be finite"},
    };
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
        const char *bad = at("val.h5");
        copy_file(good, bad);
        set_element(bad, vals[k].group, vals[k].name, vals[k].idx, vals[k].v);
        char what[160], must[160];
        snprintf(what, sizeof what, "/%s/%s[%zu] = %g", vals[k].group, vals[k].name, vals[k].idx,
                 vals[k].v);
        snprintf(must, sizeof must, "'/%s/%s' element %zu", vals[k].group, vals[k].name, vals[k].idx);
        expect_refused(what, bad, must, vals[k].must);
    }
    {
        const char *bad = at("step.h5");
        copy_file(good, bad);
        set_attr_i64(bad, "step", -3);
        expect_refused("step = -3", bad, "attribute 'step' is -3", ">= 0");
        copy_file(good, bad);
        set_attr_i64(bad, "world_size", 0);
        expect_refused("world_size = 0", bad, "attribute 'world_size' is 0", ">= 1");
    }

    printf("== a save whose read-back fails keeps the previous checkpoint\n");
    {
        const size_t neg = m->params[m->lp[0].wq].offset + 3;  // inside a tensor, not padding
        const double keep = ((double *)m->opt_v)[neg];
        ((double *)m->opt_v)[neg] = -1.0;
        char before[640];
        snprintf(before, sizeof before, "%s", at("before.h5"));
        copy_file(good, before);
        bool s2 = checkpoint_save(good, m, &st, NULL, err, sizeof err);
        printf("      %s\n", err);
        check_row(!s2 && strstr(err, "does not verify") && strstr(err, "'/adam_v/layers.0.gdn.q_proj' element 3") &&
                      strstr(err, "previous checkpoint is kept"),
                  "save of a negative v fails, naming the tensor", s2 ? "saved" : "refused");
        check_row(!files_differ(good, before), "the previous checkpoint is byte for byte the same", "");
        ((double *)m->opt_v)[neg] = keep;
        ok = load(good, err, sizeof err, &back);
        check_row(ok && tiny_same_state(m, back), "and still loads, bitwise the state it holds", ok ? "" : err);
        model_free(back);
        int ntmp = 0;
        DIR *dd = opendir(dir);
        for (struct dirent *e; dd && (e = readdir(dd));) ntmp += strstr(e->d_name, ".tmp.") != NULL;
        if (dd) closedir(dd);
        check_row(dd && ntmp == 0, "no temporary file left behind", "");
    }

    printf("== other forms\n");
    {
        const char *v1 = at("v1.h5");
        rewrite(good, v1, 1, H5T_IEEE_F64LE, NULL);
        ok = load(v1, err, sizeof err, &back);
        check_row(ok && tiny_same_state(m, back), "version 1 (contiguous, no checksums) loads bitwise",
                  ok ? "" : err);
        model_free(back);
        ok = checkpoint_verify(v1, &nt, err, sizeof err);
        check_row(ok && nt == 3 * m->n_params, "version 1 verifies", ok ? "" : err);
        // control: a flip in the version-1 form goes unnoticed by HDF5
        haddr_t addr;
        hsize_t size;
        int nch;
        data_location(v1, "adam_m", wq, 0, &addr, &size, &nch);
        flip_byte(v1, (off_t)(addr + 8 * 2 + 6));  // an exponent byte of m[2]: stays finite
        ok = load(v1, err, sizeof err, &back);
        check_row(ok && !tiny_same_state(m, back),
                  "control: the same flip in version 1 loads, with a changed value", ok ? "" : err);
        model_free(back);

        const char *nof = at("nofilter.h5");
        rewrite(good, nof, 2, H5T_IEEE_F64LE, NULL);
        expect_refused("version 2 without the Fletcher32 filter", nof, "no Fletcher32 checksum", NULL);
        const char *f32 = at("f32.h5");
        rewrite(good, f32, 1, H5T_IEEE_F32LE, NULL);
        expect_refused("float32 tensors in a version-1 file", f32, "is not float64", NULL);
        const char *shp = at("shape.h5");
        rewrite(good, shp, 1, H5T_IEEE_F64LE, wq);
        char must[160];
        snprintf(must, sizeof must, "'/params/%s' has shape (1, ", wq);
        char lerr[2048];
        ok = load(shp, lerr, sizeof lerr, NULL);
        check_row(!ok && strstr(lerr, must), "a (1, n) tensor refused by load, naming it", lerr);
        const char *v4 = at("v4.h5");
        copy_file(good, v4);
        set_attr_i64(v4, "version", 4);
        expect_refused("version 4", v4, "attribute 'version' is 4", "versions 1 to 3");
    }
    model_free(m);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return gc_finish("test_ckpt_integrity");
}
