// test_ckpt_dtypes.c — checkpoints in the precision the state lives in (src/model/checkpoint.h,
// format version 3), on the CPU with a test backend whose parameters and AdamW moments live in
// float32 (the CPU backend's ops, storage as the GPU's fp32 mode: elem 4 for params, grads and
// optimizer, no master copy):
//   - a float32 model's checkpoint stores every tensor as float32 (HDF5 type, 4 bytes), is
//     smaller than the float64 file by 4 bytes an element of each group, verifies, and loads back into a float32 model bit for bit
//     (stored_bits 32);
//   - into the float64 CPU backend it loads widened exactly (every value == (double) the float);
//   - a float64 checkpoint loads into the float32 backend rounded to nearest ((float) x);
//   - the loop state's skip fields and gradient-norm window round-trip; a checkpoint without
//     them (checkpoint_save of a zero window) reads an empty window;
//   - the tokenizer: stored (kind + blob) and read back byte for byte, absent -> kind "";
//     ckpt_tokenizer_from_spec of "bytes", "spm:<file>" (the file's bytes), a missing file and
//     an unknown spec; a /tokenizer whose kind is unknown is refused by verify, naming it.
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
#include "testutil.h"
#include "tiny_model.h"

// ---- a backend whose parameters, gradients and moments are float32 ---------------------------

static backend be32;

static void f32_download(double *dst, const void *src, size_t n, be_class c) {
    if (be32.elem[c] == 8) {
        memcpy(dst, src, n * sizeof(double));
        return;
    }
    const float *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = (double)s[i];
}

static void f32_upload(void *dst, const double *src, size_t n, be_class c) {
    if (be32.elem[c] == 8) {
        memcpy(dst, src, n * sizeof(double));
        return;
    }
    float *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = (float)src[i];
}

static void f32_zero(void *p, size_t n, be_class c) { memset(p, 0, n * be32.elem[c]); }

static void be32_init(void) {
    be32 = backend_cpu;
    be32.name = "test-fp32";
    be32.elem[BE_PARAM] = be32.elem[BE_GRAD] = be32.elem[BE_OPT] = 4;
    be32.master = false;
    be32.download = f32_download;
    be32.upload = f32_upload;
    be32.zero = f32_zero;
}

static gdn_config test_config(void) {
    gdn_config c = tiny_config("GSA", 3);
    c.vocab_size = 300;
    return c;
}

// A model on backend be: parameters from seed, moments random (v >= 0), through upload.
static model *make_model(const backend *be, uint64_t seed) {
    gdn_config c = test_config();
    model *m = model_create(&c, be, 2, 8);
    model_init_params(m, seed);
    rng_t r;
    rng_init(&r, seed, 1);
    double *h = gdn_malloc(m->n_elems * sizeof(double));
    for (int g = 0; g < 2; g++) {
        for (size_t i = 0; i < m->n_elems; i++)
            h[i] = g == 0 ? 1e-3 * rng_normal(&r) : 1e-6 * rng_uniform(&r);
        be->upload(g == 0 ? m->opt_m : m->opt_v, h, m->n_elems, BE_OPT);
    }
    free(h);
    return m;
}

// Group g (0 params, 1 m, 2 v) of tensor i as float64.
static void group_get(const model *m, int g, int i, double *h) {
    if (g == 0) model_param_download(m, i, h);
    else m->be->download(h, model_opt(m, g == 1 ? m->opt_m : m->opt_v, i), m->params[i].numel, BE_OPT);
}

// How b's state relates to a's: 0 bitwise equal, 1 b == (float) a, 2 neither.
enum { SAME, ROUNDED, OTHER };
static int relation(const model *a, const model *b) {
    double *x = gdn_malloc(a->n_elems * sizeof(double)), *y = gdn_malloc(a->n_elems * sizeof(double));
    bool same = true, rounded = true;
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < a->n_params; i++) {
            size_t n = a->params[i].numel;
            group_get(a, g, i, x);
            group_get(b, g, i, y);
            same &= memcmp(x, y, n * sizeof(double)) == 0;
            for (size_t k = 0; k < n; k++) rounded &= y[k] == (double)(float)x[k];
        }
    free(x);
    free(y);
    return same ? SAME : rounded ? ROUNDED : OTHER;
}

// Every tensor of /params, /adam_m, /adam_v stored with `bytes` bytes an element.
static bool all_stored_as(const char *path, const model *m, size_t bytes) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return false;
    static const char *const groups[3] = {"params", "adam_m", "adam_v"};
    bool ok = true;
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < m->n_params; i++) {
            char name[128];
            snprintf(name, sizeof name, "/%s/%s", groups[g], m->params[i].name);
            hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
            hid_t t = d >= 0 ? H5Dget_type(d) : -1;
            ok &= t >= 0 && H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == bytes;
            if (t >= 0) H5Tclose(t);
            if (d >= 0) H5Dclose(d);
        }
    H5Fclose(f);
    return ok;
}

static long long file_size(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 ? (long long)s.st_size : -1;
}

static bool load_into(const char *path, const backend *be, model **out, train_state *st, char *err,
                      size_t n) {
    gdn_config c = test_config();
    *out = model_create(&c, be, 2, 8);
    *st = (train_state){0};
    return checkpoint_load(path, *out, st, err, n);
}

int main(void) {
    be32_init();
    char dir[] = "/tmp/gdn-ckpt-dtypes-XXXXXX";
    if (!mkdtemp(dir)) gdn_die("mkdtemp failed");
    char p32[600], p64[600], pspm[600], pbad[600];
    snprintf(p32, sizeof p32, "%s/f32.h5", dir);
    snprintf(p64, sizeof p64, "%s/f64.h5", dir);
    snprintf(pspm, sizeof pspm, "%s/tok.model", dir);
    snprintf(pbad, sizeof pbad, "%s/badkind.h5", dir);
    char err[2048], detail[256];
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    // ---- float32 state: stored float32, loads back bitwise
    model *m32 = make_model(&be32, 5);
    check_row(checkpoint_group_bits(m32, 0) == 32 && checkpoint_group_bits(m32, 1) == 32 &&
              checkpoint_group_bits(m32, 2) == 32, "float32 backend: groups stored in 32 bits", "");
    train_state st = {.step = 12, .tokens_seen = 960, .sampler_pos = 12, .seed = 3, .best_val = 2.5,
                      .world_size = 1, .skips = 3, .skips_in_row = 1, .gnorm_n = 5};
    for (int i = 0; i < 5; i++) st.gnorm[i] = 0.5 + 0.125 * i;
    static const unsigned char blob[] = {'s', 'p', 0, 'm', 0xff, 7};
    ckpt_tokenizer tok = {.kind = ""};
    ckpt_tokenizer_set(&tok, "spm", blob, sizeof blob);
    bool ok = checkpoint_save(p32, m32, &st, &tok, err, sizeof err);
    check_row(ok, "checkpoint_save of the float32 model", ok ? "" : err);
    check_row(all_stored_as(p32, m32, 4), "every tensor stored as float32", p32);
    int nt = 0;
    ok = checkpoint_verify(p32, &nt, err, sizeof err);
    snprintf(detail, sizeof detail, "%d tensors", nt);
    check_row(ok && nt == 3 * m32->n_params, "checkpoint_verify of the float32 file", ok ? detail : err);
    model *back = NULL;
    train_state in;
    ok = load_into(p32, &be32, &back, &in, err, sizeof err);
    check_row(ok && relation(m32, back) == SAME, "float32 file -> float32 model: bitwise", ok ? "" : err);
    check_row(ok && in.stored_bits[0] == 32 && in.stored_bits[1] == 32 && in.stored_bits[2] == 32,
              "stored_bits = 32", "");
    bool state_ok = ok && in.step == 12 && in.skips == 3 && in.skips_in_row == 1 && in.gnorm_n == 5 &&
                    memcmp(in.gnorm, st.gnorm, 5 * sizeof(double)) == 0 && in.best_val == 2.5;
    check_row(state_ok, "loop state, skips and the gradient-norm window round-trip", "");
    model_free(back);

    // ---- into the float64 CPU backend: widened exactly
    ok = load_into(p32, &backend_cpu, &back, &in, err, sizeof err);
    check_row(ok && relation(m32, back) == SAME, "float32 file -> float64 CPU model: widened exactly",
              ok ? "" : err);
    model_free(back);

    // ---- float64 file into the float32 backend: rounded to nearest
    model *m64 = make_model(&backend_cpu, 6);
    check_row(checkpoint_group_bits(m64, 0) == 64 && checkpoint_group_bits(m64, 2) == 64,
              "CPU backend: groups stored in 64 bits", "");
    st.gnorm_n = 0;
    st.skips = st.skips_in_row = 0;
    ok = checkpoint_save(p64, m64, &st, NULL, err, sizeof err);
    check_row(ok && all_stored_as(p64, m64, 8), "float64 model: every tensor stored as float64",
              ok ? "" : err);
    ok = ok && load_into(p64, &be32, &back, &in, err, sizeof err);
    check_row(ok && relation(m64, back) == ROUNDED && in.stored_bits[0] == 64,
              "float64 file -> float32 model: rounded to nearest, stored_bits 64", ok ? "" : err);
    check_row(ok && in.gnorm_n == 0 && in.skips == 0, "an empty window and no skips read back", "");
    if (back) model_free(back);
    // the files differ by the data's 4 bytes an element in each group (same headers, chunks)
    long long s32 = file_size(p32), s64 = file_size(p64), numel = 0;
    for (int i = 0; i < m64->n_params; i++) numel += (long long)m64->params[i].numel;
    double saved = (double)(s64 - s32) / (double)(3 * 4 * numel);
    snprintf(detail, sizeof detail, "%lld vs %lld bytes: %.3f x 12 B/param", s32, s64, saved);
    check_row(s32 > 0 && s64 > 0 && saved > 0.97 && saved < 1.03,
              "the float32 file is smaller by 4 bytes an element of each group", detail);

    // ---- the tokenizer
    ckpt_tokenizer t2 = {.kind = ""};
    ok = checkpoint_read_tokenizer(p32, &t2, err, sizeof err);
    check_row(ok && !strcmp(t2.kind, "spm") && t2.n == sizeof blob && !memcmp(t2.blob, blob, sizeof blob),
              "tokenizer stored and read back byte for byte", ok ? t2.kind : err);
    ckpt_tokenizer_free(&t2);
    ok = checkpoint_read_tokenizer(p64, &t2, err, sizeof err);
    check_row(ok && t2.kind[0] == '\0' && t2.n == 0, "no tokenizer given: none read (kind \"\")",
              ok ? "" : err);
    ckpt_tokenizer_set(&tok, "bytes", NULL, 0);
    ckpt_tokenizer_free(&t2);
    ok = checkpoint_save(p64, m64, &st, &tok, err, sizeof err) &&
         checkpoint_read_tokenizer(p64, &t2, err, sizeof err);
    check_row(ok && !strcmp(t2.kind, "bytes") && t2.n == 0, "\"bytes\": an empty blob round-trips",
              ok ? "" : err);
    ok = checkpoint_verify(p64, NULL, err, sizeof err);
    check_row(ok, "a checkpoint with an empty /tokenizer verifies", ok ? "" : err);
    FILE *f = fopen(pspm, "wb");
    if (!f || fwrite(blob, 1, sizeof blob, f) != sizeof blob || fclose(f) != 0) gdn_die("write %s", pspm);
    char spec[700];
    snprintf(spec, sizeof spec, "spm:%s", pspm);
    ok = ckpt_tokenizer_from_spec(&tok, spec, err, sizeof err);
    check_row(ok && !strcmp(tok.kind, "spm") && tok.n == sizeof blob && !memcmp(tok.blob, blob, sizeof blob),
              "from the token file's spec spm:<path>: kind spm, the file's bytes", ok ? "" : err);
    ok = ckpt_tokenizer_from_spec(&tok, "bytes", err, sizeof err);
    check_row(ok && !strcmp(tok.kind, "bytes") && tok.n == 0, "from spec bytes: kind bytes, empty", "");
    ok = ckpt_tokenizer_from_spec(&tok, "spm:/nonexistent/x.model", err, sizeof err);
    check_row(!ok && strstr(err, "/nonexistent/x.model"), "spm:<missing file>: refused, naming it", err);
    ok = ckpt_tokenizer_from_spec(&tok, "gpt2", err, sizeof err);
    check_row(!ok && strstr(err, "gpt2"), "an unknown spec: refused, naming it", err);
    // a /tokenizer whose kind is not one tokenizer.h knows
    ckpt_tokenizer_set(&tok, "spm", blob, sizeof blob);
    ok = checkpoint_save(pbad, m64, &st, &tok, err, sizeof err);
    hid_t fh = ok ? H5Fopen(pbad, H5F_ACC_RDWR, H5P_DEFAULT) : -1;
    if (fh >= 0) {
        hid_t d = H5Dopen2(fh, "tokenizer", H5P_DEFAULT);
        CHECK_HDF5(d);
        hid_t a = H5Aopen(d, "tokenizer_kind", H5P_DEFAULT);
        CHECK_HDF5(a);
        hid_t t = H5Aget_type(a);
        CHECK_HDF5(t);
        CHECK_HDF5(H5Awrite(a, t, "xyz"));  // same length as "spm"
        CHECK_HDF5(H5Tclose(t));
        CHECK_HDF5(H5Aclose(a));
        CHECK_HDF5(H5Dclose(d));
        CHECK_HDF5(H5Fclose(fh));
    }
    ok = checkpoint_verify(pbad, NULL, err, sizeof err);
    check_row(fh >= 0 && !ok && strstr(err, "tokenizer_kind") && strstr(err, "xyz"),
              "verify refuses an unknown tokenizer kind, naming it", err);

    ckpt_tokenizer_free(&tok);
    ckpt_tokenizer_free(&t2);
    model_free(m32);
    model_free(m64);
    unlink(p32);
    unlink(p64);
    unlink(pspm);
    unlink(pbad);
    rmdir(dir);
    return gc_finish("test_ckpt_dtypes");
}
