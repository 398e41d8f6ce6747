// test_export.c — the Hugging Face export and import (src/model/hf.h, safetensors.h) on the CPU:
//  - round trip: a tiny hybrid model (G, S, A layers; tied and untied head), random init with
//    norms, A_log, dt_bias drawn too, exported fp32 and imported into a fresh model: every
//    parameter is bitwise the fp32 rounding of the original, and a second export of the imported
//    model is the same file byte for byte; bf16: every parameter is the round-to-nearest-even
//    bf16 of the fp32 value (and bf16 rounding itself checked on ties and NaN);
//  - config.json: the keys and values fla reads; read back, it describes the same model;
//  - refusals: an inexpressible option (gdn.gate, gdn.delta, swa.head_dim) names its key; an
//    import into another architecture names the differing key; every [model], [gdn], [swa] key
//    of the schema has an export rule;
//  - malformed safetensors files (truncated, bad header JSON, offsets out of range, a hole,
//    overlap, wrong dtype, impossible header length): refused with the file and tensor named.
//
//   test_export [--seed N]
#include <jansson.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../src/core/common.h"
#include "../src/core/config.h"
#include "../src/core/rng.h"
#include "../src/model/hf.h"
#include "../src/model/model.h"
#include "../src/model/safetensors.h"
#include "fileutil.h"

static int fails = 0, checks = 0;
#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        checks++;                                                                                 \
        if (cond) {                                                                               \
            printf("ok    ");                                                                     \
        } else {                                                                                  \
            printf("FAIL  ");                                                                     \
            fails++;                                                                              \
        }                                                                                         \
        printf(__VA_ARGS__);                                                                      \
        printf("\n");                                                                             \
    } while (0)

static char g_dir[256];

static gdn_config tiny(const char *pattern, bool tied) {
    gdn_config c;
    config_defaults(&c);
    snprintf(c.pattern, sizeof c.pattern, "%s", pattern);
    c.n_layers = (int)strlen(pattern);
    c.d_model = 64;
    c.vocab_size = 50;
    c.tie_embeddings = tied;
    c.mlp_hidden = 96;
    c.gdn_n_heads = 2;
    c.gdn_head_dim = 16;
    c.gdn_expand_v = 2;
    c.gdn_conv_size = 4;
    c.swa_n_heads = 4;
    c.swa_head_dim = 16;
    c.swa_window = 8;
    c.swa_rope_base = 500000;
    c.seq_len = 32;
    return c;
}

// Random values in every parameter (norms, A_log, dt_bias included: an export that swapped two
// of them would show).
static model *random_model(const gdn_config *c, uint64_t seed) {
    model *m = model_create(c, &backend_cpu, 1, 1);
    model_init_params(m, seed);
    rng_t r;
    rng_init(&r, seed, 7);
    for (int i = 0; i < m->n_params; i++) {
        double *h = gdn_malloc(m->params[i].numel * sizeof(double));
        model_param_download(m, i, h);
        for (size_t j = 0; j < m->params[i].numel; j++) h[j] += 0.1 * rng_normal(&r);
        model_param_upload(m, i, h);
        free(h);
    }
    return m;
}

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

// Parameters of b against f(parameters of a), bitwise: the number of differing tensors.
static int compare(const model *a, const model *b, double (*f)(double), const char **first) {
    int bad = 0;
    for (int i = 0; i < a->n_params; i++) {
        size_t n = a->params[i].numel;
        double *x = gdn_malloc(n * sizeof(double)), *y = gdn_malloc(n * sizeof(double));
        model_param_download(a, i, x);
        model_param_download(b, i, y);
        bool eq = true;
        for (size_t j = 0; j < n && eq; j++) eq = same_bits(f(x[j]), y[j]);
        if (!eq && !bad++) *first = a->params[i].name;
        free(x);
        free(y);
    }
    return bad;
}
static double to_f32(double x) { return (double)(float)x; }
static double to_bf16(double x) { return st_bf16_to_double(st_bf16_from_double(x)); }

static void round_trip(const char *pattern, bool tied, uint64_t seed) {
    gdn_config c = tiny(pattern, tied);
    char err[2048], note[512], d1[300], d2[300], d3[300];
    snprintf(d1, sizeof d1, "%s/%s-%d-f32", g_dir, pattern, tied);
    snprintf(d2, sizeof d2, "%s/%s-%d-again", g_dir, pattern, tied);
    snprintf(d3, sizeof d3, "%s/%s-%d-bf16", g_dir, pattern, tied);
    model *a = random_model(&c, seed), *b = random_model(&c, seed + 1);
    bool ok = hf_export(a, d1, ST_F32, NULL, note, sizeof note, err, sizeof err);
    CHECK(ok, "%s %s: export fp32%s%s", pattern, tied ? "tied" : "untied", ok ? "" : ": ", ok ? "" : err);
    ok = ok && hf_import(b, d1, err, sizeof err);
    CHECK(ok, "%s: import into a fresh model%s%s", pattern, ok ? "" : ": ", ok ? "" : err);
    const char *first = "";
    int bad = compare(a, b, to_f32, &first);
    CHECK(bad == 0, "%s: imported parameters == fp32 of the exported, bitwise (%d of %d tensors "
          "differ%s%s)", pattern, bad, a->n_params, bad ? ", first " : "", first);
    ok = hf_export(b, d2, ST_F32, NULL, note, sizeof note, err, sizeof err);
    char p1[400], p2[400];
    snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
    snprintf(p2, sizeof p2, "%s/model.safetensors", d2);
    size_t n1 = 0, n2 = 0;
    char *f1 = file_read_all(p1, &n1), *f2 = file_read_all(p2, &n2);
    CHECK(ok && f1 && f2 && n1 == n2 && memcmp(f1, f2, n1) == 0,
          "%s: export -> import -> export: model.safetensors identical (%zu bytes)", pattern, n1);
    free(f1);
    free(f2);
    model *e = random_model(&c, seed + 2);
    ok = hf_export(a, d3, ST_BF16, NULL, note, sizeof note, err, sizeof err) &&
         hf_import(e, d3, err, sizeof err);
    bad = compare(a, e, to_bf16, &first);
    CHECK(ok && bad == 0, "%s: bf16 export -> import == round-to-nearest-even bf16 of the fp32 "
          "values (%d tensors differ%s%s)", pattern, bad, bad ? ", first " : "", first);
    model_free(a);
    model_free(b);
    model_free(e);
}

static void config_keys(void) {
    gdn_config c = tiny("GGSA", false);
    model *m = random_model(&c, 3);
    char err[2048], note[512], dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/keys", g_dir);
    bool ok = hf_export(m, dir, ST_F32, NULL, note, sizeof note, err, sizeof err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *r = ok ? json_load_file(path, 0, &je) : NULL;
    CHECK(r != NULL, "config.json parses");
    if (!r) return;
#define JI(k) json_integer_value(json_object_get(r, k))
#define JB(k) json_is_true(json_object_get(r, k))
    CHECK(!strcmp(json_string_value(json_object_get(r, "model_type")), "gated_deltanet") &&
              !strcmp(json_string_value(json_array_get(json_object_get(r, "architectures"), 0)),
                      "GatedDeltaNetForCausalLM"),
          "model_type gated_deltanet, architectures [GatedDeltaNetForCausalLM]");
    CHECK(JI("hidden_size") == 64 && JI("num_hidden_layers") == 4 && JI("vocab_size") == 50 &&
              JI("num_heads") == 2 && JI("head_dim") == 16 && JI("conv_size") == 4 &&
              JI("intermediate_size") == 96 &&
              json_real_value(json_object_get(r, "expand_v")) == 2.0 &&
              json_is_null(json_object_get(r, "num_v_heads")),
          "sizes: hidden_size, num_hidden_layers, vocab_size, num_heads, head_dim, conv_size, "
          "intermediate_size, expand_v, num_v_heads null");
    CHECK(JB("use_gate") && JB("use_short_conv") && !JB("allow_neg_eigval") &&
              !JB("tie_word_embeddings") &&
              !strcmp(json_string_value(json_object_get(r, "hidden_act")), "swish") &&
              json_real_value(json_object_get(r, "norm_eps")) == c.norm_eps,
          "use_gate, use_short_conv, allow_neg_eigval, tie_word_embeddings, hidden_act, norm_eps");
    json_t *attn = json_object_get(r, "attn");
    json_t *s = json_array_get(attn, 0), *a = json_array_get(attn, 1);
    CHECK(json_array_size(attn) == 2 && json_array_size(json_object_get(s, "layers")) == 1 &&
              json_integer_value(json_array_get(json_object_get(s, "layers"), 0)) == 2 &&
              json_integer_value(json_object_get(s, "window_size")) == 8 &&
              json_integer_value(json_array_get(json_object_get(a, "layers"), 0)) == 3 &&
              json_is_null(json_object_get(a, "window_size")) &&
              json_integer_value(json_object_get(s, "num_heads")) == 4 &&
              json_integer_value(json_object_get(s, "num_kv_heads")) == 4 &&
              json_real_value(json_object_get(s, "rope_theta")) == 500000,
          "attn: [S layers 2 window 8, A layers 3 window null], num_heads = num_kv_heads 4, "
          "rope_theta");
    json_decref(r);
    gdn_config back;
    config_defaults(&back);
    ok = hf_config_read(dir, &back, err, sizeof err);
    CHECK(ok && !strcmp(back.pattern, "GGSA") && back.swa_head_dim == 16 && back.mlp_hidden == 96,
          "config.json read back: pattern GGSA, swa.head_dim 16, mlp_hidden 96%s%s", ok ? "" : ": ",
          ok ? "" : err);
    ok = hf_config_matches(&c, dir, err, sizeof err);
    CHECK(ok, "the export describes the model it came from%s%s", ok ? "" : ": ", ok ? "" : err);
    gdn_config other = c;
    other.gdn_n_heads = 4;
    model *o = model_create(&other, &backend_cpu, 1, 1);
    ok = hf_import(o, dir, err, sizeof err);
    CHECK(!ok && strstr(err, "[gdn] n_heads") && strstr(err, "config.json"),
          "import into gdn.n_heads = 4: refused naming the key: %s", err);
    model_free(o);
    gdn_config tied = c;
    tied.tie_embeddings = true;
    ok = hf_config_matches(&tied, dir, err, sizeof err);
    CHECK(!ok && strstr(err, "[model] tie_embeddings"), "tied run vs untied export: %s", err);
    model_free(m);
}

static void refusals(void) {
    char err[2048];
    gdn_config c = tiny("GS", true);
    c.gdn_gate = false;
    CHECK(!hf_check_config(&c, err, sizeof err) && strstr(err, "[gdn] gate"), "gdn.gate = false: %s", err);
    c = tiny("GS", true);
    c.gdn_delta = false;
    CHECK(!hf_check_config(&c, err, sizeof err) && strstr(err, "[gdn] delta"), "gdn.delta = false: %s", err);
    c = tiny("GS", true);
    c.swa_head_dim = 32;
    CHECK(!hf_check_config(&c, err, sizeof err) && strstr(err, "[swa] head_dim"),
          "swa n_heads x head_dim != d_model: %s", err);
    c = tiny("G", true);
    c.swa_head_dim = 32;  // no attention layer: the swa keys do not matter
    CHECK(hf_check_config(&c, err, sizeof err), "pattern G ignores the [swa] keys");
    c = tiny("GS", true);
    c.gdn_short_conv = false;
    c.gdn_output_gate = false;
    c.gdn_allow_neg_eigval = true;
    c.dropout = 0.1;
    CHECK(hf_check_config(&c, err, sizeof err), "short_conv, output_gate off, allow_neg_eigval, "
          "dropout: expressible");

    // every [model], [gdn], [swa] key of the schema has a rule
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    config_write(&c, f);
    fclose(f);
    char section[32] = "";
    int keys = 0, missing = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '[') {
            sscanf(line, "[%31[^]]", section);
            continue;
        }
        if (strcmp(section, "model") && strcmp(section, "gdn") && strcmp(section, "swa")) continue;
        char key[64];
        if (sscanf(line, "%63[a-z_0-9] =", key) != 1) continue;
        keys++;
        if (!hf_key_rule(section, key)) {
            missing++;
            printf("      [%s] %s has no export rule (src/model/hf.c hf_rules)\n", section, key);
        }
    }
    free(text);
    CHECK(keys > 20 && missing == 0, "%d [model]/[gdn]/[swa] keys, each with an export rule", keys);
}

// ---- malformed safetensors -------------------------------------------------------------------

static void write_raw(const char *path, const char *hdr, size_t data_bytes, uint64_t hlen_override) {
    FILE *f = fopen(path, "wb");
    uint64_t hn = hlen_override ? hlen_override : strlen(hdr);
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)(hn >> (8 * b));
    fwrite(len8, 1, 8, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
    fclose(f);
}

static void malformed(void) {
    char path[300], err[2048];
    snprintf(path, sizeof path, "%s/bad.safetensors", g_dir);
    st_file f;
    static const struct {
        const char *what, *hdr;
        size_t data;
        uint64_t hlen;
        const char *expect[2];  // substrings of the message besides the path
    } cases[] = {
        {"valid", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, {NULL, NULL}},
        {"truncated data", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 5, 0,
         {"'w'", "beyond"}},
        {"truncated header", "{\"w\":{\"dtype\":\"F32\"", 0, 4000, {"header length", NULL}},
        {"bad header JSON", "{\"w\":{\"dtype\":\"F32\",,}}", 0, 0, {"header JSON", "column"}},
        {"offsets out of range", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8, 0,
         {"'w'", "beyond"}},
        {"offsets against the shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0,
         {"'w'", "need 12"}},
        {"wrong dtype", "{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, 0,
         {"'w'", "F16"}},
        {"a hole", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, 0,
         {"'v'", "belong to no tensor"}},
        {"overlap", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0,
         {"overlaps", "'w'"}},
        {"negative offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, 0,
         {"'w'", "data_offsets"}},
        {"duplicate tensor", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                             "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0,
         {"header JSON", "w"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i].hdr, cases[i].data, cases[i].hlen);
        err[0] = '\0';
        bool ok = st_open(&f, path, err, sizeof err);
        if (ok) st_close(&f);
        if (!cases[i].expect[0]) {
            CHECK(ok, "safetensors %s: opens%s%s", cases[i].what, ok ? "" : ": ", err);
            continue;
        }
        bool named = strstr(err, path) != NULL;
        for (int k = 0; k < 2; k++) named &= !cases[i].expect[k] || strstr(err, cases[i].expect[k]);
        CHECK(!ok && named, "safetensors %s: %s", cases[i].what, err);
    }
    // a model file missing one tensor: the import names it
    gdn_config c = tiny("G", true);
    model *m = random_model(&c, 5);
    char dir[300], note[512];
    snprintf(dir, sizeof dir, "%s/missing", g_dir);
    hf_export(m, dir, ST_F32, NULL, note, sizeof note, err, sizeof err);
    char p[400];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    double one = 1;
    st_out t = {.name = "model.norm.weight", .dtype = ST_F32, .ndim = 1, .shape = {1}, .data = &one};
    st_write(p, &t, 1, err, sizeof err);
    bool ok = hf_import(m, dir, err, sizeof err);
    CHECK(!ok && strstr(err, "model.safetensors") && strstr(err, "is missing"), "a missing tensor: %s", err);
    t.shape[0] = 64;
    double *ones = gdn_malloc(64 * sizeof(double));
    t.data = ones;
    model *full = random_model(&c, 6);
    hf_export(full, dir, ST_F32, NULL, note, sizeof note, err, sizeof err);
    // the same file with the final norm's shape changed: named with both shapes
    st_file sf;
    st_open(&sf, p, err, sizeof err);
    int nt = sf.n;
    st_out *outs = gdn_malloc((size_t)nt * sizeof *outs);
    double **vals = gdn_malloc((size_t)nt * sizeof *vals);
    for (int i = 0; i < nt; i++) {
        vals[i] = gdn_malloc(GDN_MAX(sf.t[i].numel, (size_t)1) * sizeof(double));
        st_read(&sf, &sf.t[i], vals[i], err, sizeof err);
        outs[i] = (st_out){.name = sf.t[i].name, .dtype = ST_F32, .ndim = sf.t[i].ndim, .data = vals[i]};
        memcpy(outs[i].shape, sf.t[i].shape, sizeof outs[i].shape);
        if (!strcmp(sf.t[i].name, "model.norm.weight")) outs[i].shape[0] = 32;
    }
    char p2[400];
    snprintf(p2, sizeof p2, "%s/model2.safetensors", dir);
    st_write(p2, outs, nt, err, sizeof err);
    st_close(&sf);
    rename(p2, p);
    ok = hf_import(m, dir, err, sizeof err);
    CHECK(!ok && strstr(err, "'model.norm.weight' has shape [32], the model needs [64]"),
          "a wrong shape: %s", err);
    for (int i = 0; i < nt; i++) free(vals[i]);
    free(vals);
    free(outs);
    free(ones);
    model_free(m);
    model_free(full);
}

static void bf16_rounding(void) {
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even mantissa (1); 1 + 3 2^-8: up to 1 + 2^-6
    CHECK(st_bf16_from_double(1.0 + 1.0 / 256) == 0x3f80 && st_bf16_from_double(1.0 + 3.0 / 256) == 0x3f82 &&
              st_bf16_from_double(-2.0) == 0xc000 && st_bf16_from_double(1.0 + 1.0 / 256 + 1.0 / 65536) == 0x3f81,
          "bf16: ties to even, above a tie rounds up, sign");
    uint16_t nan = st_bf16_from_double(NAN);
    CHECK((nan & 0x7f80) == 0x7f80 && (nan & 0x7f), "bf16: NaN stays NaN (0x%04x)", nan);
}

int main(int argc, char **argv) {
    uint64_t seed = 11;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else gdn_die("usage: test_export [--seed N]");
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/test_export.XXXXXX");
    if (!mkdtemp(g_dir)) gdn_die("mkdtemp %s", g_dir);
    bf16_rounding();
    round_trip("GGSA", false, seed);
    round_trip("GS", true, seed + 10);
    config_keys();
    refusals();
    malformed();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", g_dir);
    printf("\ntest_export: %d of %d checks passed\n", checks - fails, checks);
    return fails ? 1 : 0;
}
