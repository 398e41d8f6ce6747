// export.c — gdn-export: a checkpoint as a Hugging Face directory in the layout of fla's
// GatedDeltaNetForCausalLM (src/model/hf.h, docs/export.md), and the forward logits of a model
// for given token ids (what tests/gpu/fla_export_check.py compares fla's logits with).
//
//   gdn-export CKPT.h5 OUTDIR [--dtype bf16|fp32]
//   gdn-export --dump-logits MODEL TOKENS.bin OUT.bin [--batch B]
//
// --dump-logits: MODEL is a checkpoint or an exported directory; TOKENS.bin holds B x T int32
// little-endian ids (row-major), OUT.bin gets the B x T x V logits as float64 little-endian,
// from gdn.c's forward on the CPU in float64 (the whole network through the final norm, then
// the LM head as a float64 product).
#include <errno.h>
#include <hdf5.h>
#include <sys/stat.h>
#include "core/common.h"
#include "core/config.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/hf.h"
#include "model/model.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn-export CKPT.h5 OUTDIR [--dtype bf16|fp32]\n"
            "         writes OUTDIR/config.json, model.safetensors and the tokenizer in the layout\n"
            "         of fla's GatedDeltaNetForCausalLM (default dtype bf16)\n"
            "       gdn-export --dump-logits MODEL TOKENS.bin OUT.bin [--batch B]\n"
            "         MODEL: a checkpoint or an exported directory; TOKENS.bin: B x T int32 ids;\n"
            "         OUT.bin: B x T x vocab float64 logits of gdn.c's forward (CPU, float64);\n"
            "         B defaults to 4\n");
}

// The checkpoint's stored tokenizer: dataset /tokenizer (uint8 blob) with string attribute
// "tokenizer_kind". false when there is none (older checkpoints); dies on a damaged one.
static bool read_ckpt_tokenizer(const char *path, char *kind, size_t kindlen, void **blob,
                                size_t *n) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) gdn_die("'%s': cannot open as HDF5", path);
    bool found = H5Lexists(f, "tokenizer", H5P_DEFAULT) > 0;
    if (found) {
        hid_t d = H5Dopen2(f, "tokenizer", H5P_DEFAULT), s = d >= 0 ? H5Dget_space(d) : -1;
        hid_t a = d >= 0 && H5Aexists(d, "tokenizer_kind") > 0 ? H5Aopen(d, "tokenizer_kind", H5P_DEFAULT) : -1;
        hid_t at = a >= 0 ? H5Aget_type(a) : -1;
        hssize_t cnt = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
        if (d < 0 || s < 0 || cnt < 0 || at < 0 || H5Tget_class(at) != H5T_STRING ||
            H5Tis_variable_str(at) || H5Tget_size(at) + 1 > kindlen)
            gdn_die("'%s': dataset /tokenizer or its string attribute tokenizer_kind is unreadable",
                    path);
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (mt < 0 || H5Tset_size(mt, kindlen) < 0 || H5Aread(a, mt, kind) < 0)
            gdn_die("'%s': attribute /tokenizer tokenizer_kind is unreadable", path);
        kind[kindlen - 1] = '\0';
        *n = (size_t)cnt;
        *blob = gdn_malloc(GDN_MAX(*n, (size_t)1));
        if (*n && H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, *blob) < 0)
            gdn_die("'%s': dataset /tokenizer is unreadable", path);
        if (H5Tclose(mt) < 0 || H5Tclose(at) < 0 || H5Aclose(a) < 0 || H5Sclose(s) < 0 ||
            H5Dclose(d) < 0)
            gdn_die("'%s': closing /tokenizer failed", path);
    }
    if (H5Fclose(f) < 0) gdn_die("'%s': closing failed", path);
    return found;
}

static void load_ckpt_config(const char *ckpt, gdn_config *cfg) {
    char err[1024];
    char *text = checkpoint_read_config(ckpt, err, sizeof err);
    if (!text) gdn_die("%s\nHINT: pass a checkpoint written by gdn-train (OUT_DIR/checkpoint.h5)", err);
    config_defaults(cfg);
    bool ok = config_load_string(cfg, text, ckpt);
    free(text);
    if (!ok) gdn_die("'%s': the stored config does not parse with this build (see above)", ckpt);
}

static int do_export(const char *ckpt, const char *dir, st_dtype dtype) {
    gdn_config cfg;
    load_ckpt_config(ckpt, &cfg);
    char err[2048], note[512];
    if (!hf_check_config(&cfg, err, sizeof err)) gdn_die("'%s': %s", ckpt, err);
    model *m = model_create(&cfg, &backend_cpu, 1, 1);
    train_state st;
    if (!checkpoint_load(ckpt, m, &st, err, sizeof err)) gdn_die("%s", err);
    char kind[16] = "";
    void *blob = NULL;
    hf_tokenizer tok = {.kind = NULL, .eot = -1, .bos = -1};
    if (read_ckpt_tokenizer(ckpt, kind, sizeof kind, &blob, &tok.n)) {
        tok.kind = kind;
        tok.blob = blob;
        gdn_tokenizer *t = tok_load_blob(kind, blob, tok.n, ckpt, err, sizeof err);
        if (t) {
            tok.eot = tok_eot(t);
            tok_template tp = tok_get_template(t);  // Llama 3: BOS before each text
            tok.bos = tp.n_prefix ? (int)tp.prefix[0] : tok.eot;
            tok_free(t);
        } else {
            fprintf(stderr, "note: %s (config.json gets no bos/eos id)\n", err);
        }
    }
    if (!hf_export(m, dir, dtype, &tok, note, sizeof note, err, sizeof err)) gdn_die("%s", err);
    printf("exported %s (step %ld, %zu parameters) to %s: config.json, model.safetensors (%s)%s%s\n",
           ckpt, st.step, model_count_params(m, true), dir, st_dtype_name(dtype),
           tok.kind && !note[0] ? ", tokenizer " : "", tok.kind && !note[0] ? tok.kind : "");
    if (note[0]) printf("note: %s\n", note);
    free(blob);
    model_free(m);
    return 0;
}

static int do_dump(const char *src, const char *tokens, const char *out, int B) {
    FILE *f = fopen(tokens, "rb");
    if (!f) gdn_die("'%s': cannot open: %s", tokens, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) gdn_die("'%s': cannot stat: %s", tokens, strerror(errno));
    const size_t n = (size_t)sb.st_size / 4;
    if ((size_t)sb.st_size % 4 || n == 0 || n % (size_t)B || n / (size_t)B > (1u << 24))
        gdn_die("'%s': %lld bytes is not %d rows of int32 ids", tokens, (long long)sb.st_size, B);
    const int T = (int)(n / (size_t)B);
    int32_t *x = gdn_malloc(n * sizeof *x), *y = gdn_malloc(n * sizeof *y);
    unsigned char *raw = gdn_malloc(n * 4);
    if (fread(raw, 4, n, f) != n) gdn_die("'%s': short read", tokens);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        x[i] = (int32_t)((uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
                         (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24);
        y[i] = -1;  // no loss targets: only the forward is wanted
    }
    free(raw);

    gdn_config cfg;
    char err[2048];
    struct stat ds;
    const bool is_dir = stat(src, &ds) == 0 && S_ISDIR(ds.st_mode);
    if (is_dir) {
        config_defaults(&cfg);
        if (!hf_config_read(src, &cfg, err, sizeof err)) gdn_die("%s", err);
        cfg.seq_len = T;
    } else {
        load_ckpt_config(src, &cfg);
    }
    for (size_t i = 0; i < n; i++)
        if (x[i] < 0 || x[i] >= cfg.vocab_size)
            gdn_die("'%s': id %d at %zu is outside the vocabulary [0, %d)", tokens, x[i], i,
                    cfg.vocab_size);
    model *m = model_create(&cfg, &backend_cpu, B, T);
    if (is_dir) {
        if (!hf_import(m, src, err, sizeof err)) gdn_die("%s", err);
    } else {
        train_state st;
        if (!checkpoint_load(src, m, &st, err, sizeof err)) gdn_die("%s", err);
    }
    model_eval_loss(m, x, y);  // the forward: m->xf = the final norm's output (N, d)
    const int d = m->d, V = m->V;
    double *xf = gdn_malloc(n * (size_t)d * sizeof(double));
    double *w = gdn_malloc((size_t)V * d * sizeof(double));
    m->be->download(xf, m->xf, n * (size_t)d, BE_ACT);
    model_param_download(m, m->lm_head, w);
    FILE *o = fopen(out, "wb");
    if (!o) gdn_die("'%s': cannot create: %s", out, strerror(errno));
    double *row = gdn_malloc((size_t)V * sizeof(double));
    unsigned char *bytes = gdn_malloc((size_t)V * 8);
    for (size_t i = 0; i < n; i++) {  // logits[i, v] = xf[i] . w[v], written little-endian
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += xf[i * d + k] * w[(size_t)v * d + k];
            row[v] = s;
        }
        for (int v = 0; v < V; v++) {
            uint64_t u;
            memcpy(&u, &row[v], 8);
            for (int b = 0; b < 8; b++) bytes[(size_t)v * 8 + b] = (unsigned char)(u >> (8 * b));
        }
        if (fwrite(bytes, 8, (size_t)V, o) != (size_t)V) gdn_die("'%s': write failed", out);
    }
    if (fclose(o) != 0) gdn_die("'%s': write failed: %s", out, strerror(errno));
    printf("logits of %d x %d tokens, vocab %d, written to %s (float64)\n", B, T, V, out);
    free(row);
    free(bytes);
    free(xf);
    free(w);
    free(x);
    free(y);
    model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "--dump-logits")) {
        int B = 4;
        if (argc == 7 && !strcmp(argv[5], "--batch")) {
            char *end;
            long b = strtol(argv[6], &end, 10);
            if (*end || b < 1 || b > 65536) gdn_die("--batch '%s': expected an integer in [1, 65536]", argv[6]);
            B = (int)b;
        } else if (argc != 5) {
            usage(stderr);
            return 2;
        }
        return do_dump(argv[2], argv[3], argv[4], B);
    }
    st_dtype dtype = ST_BF16;
    if (argc == 5 && !strcmp(argv[3], "--dtype")) {
        if (!strcmp(argv[4], "bf16")) dtype = ST_BF16;
        else if (!strcmp(argv[4], "fp32")) dtype = ST_F32;
        else gdn_die("--dtype '%s': expected bf16 or fp32", argv[4]);
    } else if (argc != 3 || argv[1][0] == '-' || argv[2][0] == '-') {
        usage(stderr);
        return 2;
    }
    return do_export(argv[1], argv[2], dtype);
}
