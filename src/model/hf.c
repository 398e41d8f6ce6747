// hf.c — see hf.h. fla's side (flash-linear-attention, fla/models/gated_deltanet and
// fla/layers/{gated_deltanet,attn}.py):
//   block l: attn_norm -> attn (GatedDeltaNet, or Attention on the layers of config.attn) ->
//            + residual -> mlp_norm -> mlp (GatedMLP: down(silu(gate) * up)) -> + residual
//   GatedDeltaNet: q/k/v_proj -> q/k/v_conv1d (depthwise causal, SiLU; without the short conv
//   plain SiLU) -> l2norm (eps 1e-6, q scaled by dk^-1/2 in the kernel);
//   g = -exp(A_log) softplus(a_proj x + dt_bias); beta = sigmoid(b_proj x) (x 2 with
//   allow_neg_eigval); o_norm: rmsnorm(o) w * silu(g_proj x) per head (use_gate) or rmsnorm(o) w;
//   o_proj. Attention: head_dim = hidden_size / num_heads, rotate-half RoPE (rope_theta),
//   flash-attention window (window_size - 1, 0): keys j with t - window < j <= t.
// That is DESIGN 2 term for term, so the tensors go across unchanged.
#include "hf.h"
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>
#include "../core/common.h"

__attribute__((format(printf, 3, 4)))
static void hf_err(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

// ---- the config keys --------------------------------------------------------------------------

static const struct {
    const char *section, *key, *rule;
} hf_rules[] = {
    {"model", "pattern", "fla attn.layers: S and A layers are attention layers, G GatedDeltaNet"},
    {"model", "n_layers", "fla num_hidden_layers"},
    {"model", "d_model", "fla hidden_size"},
    {"model", "vocab_size", "fla vocab_size"},
    {"model", "tie_embeddings", "fla tie_word_embeddings"},
    {"model", "dropout", "ignored: dropout is off at inference"},
    {"model", "mixer_dropout", "ignored: dropout is off at inference"},
    {"model", "embed_dropout", "ignored: dropout is off at inference"},
    {"model", "mlp_ratio", "fla intermediate_size (the MLP width it gives)"},
    {"model", "mlp_hidden", "fla intermediate_size"},
    {"model", "norm_eps", "fla norm_eps (every RMSNorm and the GDN output norm)"},
    {"model", "init_std", "fla initializer_range (init only)"},
    {"model", "doc_reset", "ignored: document resets apply to packed training batches"},
    {"model", "doc_positions", "ignored: document positions apply to packed training batches"},
    {"gdn", "n_heads", "fla num_heads (num_v_heads null)"},
    {"gdn", "head_dim", "fla head_dim"},
    {"gdn", "expand_v", "fla expand_v"},
    {"gdn", "conv_size", "fla conv_size"},
    {"gdn", "short_conv", "fla use_short_conv"},
    {"gdn", "output_gate", "fla use_gate"},
    {"gdn", "gate", "refused unless true: fla's layer always has a_proj, A_log and dt_bias"},
    {"gdn", "delta", "refused unless true: fla's layer always has b_proj and the delta rule"},
    {"gdn", "allow_neg_eigval", "fla allow_neg_eigval"},
    {"gdn", "chunk_size", "ignored: how the kernel tiles time, not what it computes"},
    {"gdn", "bwd_states", "ignored: a backward memory choice"},
    {"gdn", "bwd_segment_chunks", "ignored: a backward memory choice"},
    {"swa", "n_heads", "fla attn.num_heads (and num_kv_heads)"},
    {"swa", "head_dim", "refused unless n_heads x head_dim = d_model: fla's attention head_dim "
                        "is hidden_size / num_heads"},
    {"swa", "window", "fla attn.window_size of the S layers (A layers: null)"},
    {"swa", "rope_base", "fla attn.rope_theta"},
    {"swa", "deterministic", "ignored: a backward kernel choice"},
};

const char *hf_key_rule(const char *section, const char *key) {
    for (size_t i = 0; i < sizeof hf_rules / sizeof hf_rules[0]; i++)
        if (!strcmp(hf_rules[i].section, section) && !strcmp(hf_rules[i].key, key))
            return hf_rules[i].rule;
    return NULL;
}

static bool has_kind(const gdn_config *c, char k) {
    for (int l = 0; l < c->n_layers; l++)
        if (config_layer_kind(c, l) == k) return true;
    return false;
}

bool hf_check_config(const gdn_config *c, char *err, size_t errlen) {
    const bool gdn = has_kind(c, 'G'), attn = has_kind(c, 'S') || has_kind(c, 'A');
    if (gdn && !c->gdn_gate) {
        hf_err(err, errlen, "[gdn] gate = false cannot be exported: %s", hf_key_rule("gdn", "gate"));
        return false;
    }
    if (gdn && !c->gdn_delta) {
        hf_err(err, errlen, "[gdn] delta = false cannot be exported: %s", hf_key_rule("gdn", "delta"));
        return false;
    }
    if (attn && (long long)c->swa_n_heads * c->swa_head_dim != c->d_model) {
        hf_err(err, errlen, "[swa] head_dim = %d cannot be exported with [swa] n_heads = %d and "
               "[model] d_model = %d: %s", c->swa_head_dim, c->swa_n_heads, c->d_model,
               hf_key_rule("swa", "head_dim"));
        return false;
    }
    return true;
}

// One attention spec of config.attn: the layers of kind k.
static json_t *attn_spec(const gdn_config *c, char k) {
    json_t *layers = json_array();
    for (int l = 0; l < c->n_layers; l++)
        if (config_layer_kind(c, l) == k) json_array_append_new(layers, json_integer(l));
    return json_pack("{s:o, s:i, s:i, s:b, s:o, s:f}", "layers", layers, "num_heads", c->swa_n_heads,
                     "num_kv_heads", c->swa_n_heads, "qkv_bias", 0, "window_size",
                     k == 'S' ? json_integer(c->swa_window) : json_null(), "rope_theta",
                     c->swa_rope_base);
}

char *hf_config_json(const gdn_config *c, const char *torch_dtype, int bos, int eot) {
    json_t *attn = json_null();
    const bool s = has_kind(c, 'S'), a = has_kind(c, 'A');
    if (s && a) attn = json_pack("[o, o]", attn_spec(c, 'S'), attn_spec(c, 'A'));
    else if (s || a) attn = attn_spec(c, s ? 'S' : 'A');
    json_t *eot_j = eot >= 0 ? json_integer(eot) : json_null();
    json_t *bos_j = bos >= 0 ? json_integer(bos) : json_null();
    json_t *root = json_pack(
        "{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:n, s:f, s:b, s:b, s:i, s:b, s:i, s:i, s:s,"
        " s:f, s:i, s:o, s:b, s:f, s:b, s:b, s:b, s:b, s:b, s:n, s:b, s:o, s:o, s:n, s:s}",
        "architectures", "GatedDeltaNetForCausalLM", "model_type", "gated_deltanet", "attn_mode",
        "chunk", "hidden_size", c->d_model, "num_hidden_layers", c->n_layers, "vocab_size",
        c->vocab_size, "head_dim", c->gdn_head_dim, "num_heads", c->gdn_n_heads, "num_v_heads",
        "expand_v", c->gdn_expand_v, "use_gate", c->gdn_output_gate, "use_short_conv",
        c->gdn_short_conv, "conv_size", c->gdn_conv_size, "allow_neg_eigval",
        c->gdn_allow_neg_eigval, "hidden_ratio", 4, "intermediate_size", config_mlp_hidden(c),
        "hidden_act", "swish", "norm_eps", c->norm_eps, "max_position_embeddings", c->seq_len,
        "attn", attn, "tie_word_embeddings", c->tie_embeddings, "initializer_range", c->init_std,
        "fuse_norm", 1, "fuse_swiglu", 1, "fuse_cross_entropy", 1, "fuse_linear_cross_entropy", 0,
        "use_l2warp", 0, "attnres_block_size", "use_cache", 1, "bos_token_id", bos_j,
        "eos_token_id", eot_j, "pad_token_id", "torch_dtype", torch_dtype);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text) gdn_die("internal: cannot build config.json");
    return text;
}

// ---- tensor names -----------------------------------------------------------------------------

void hf_param_name(const model *m, int i, hf_tensor_name *out) {
    const param_info *p = &m->params[i];
    memset(out, 0, sizeof *out);
    out->ndim = p->rows == 1 && p->kind != PARAM_LINEAR && p->kind != PARAM_OUTPROJ &&
                p->kind != PARAM_EMBED ? 1 : 2;
    out->shape[0] = out->ndim == 1 ? p->cols : p->rows;
    out->shape[1] = p->cols;
    if (i == m->wte) {
        snprintf(out->name, sizeof out->name, "model.embeddings.weight");
        return;
    }
    if (i == m->lm_head) {
        snprintf(out->name, sizeof out->name, "lm_head.weight");
        return;
    }
    if (i == m->norm_f) {
        snprintf(out->name, sizeof out->name, "model.norm.weight");
        return;
    }
    for (int l = 0; l < m->L; l++) {
        const layer_params *lp = &m->lp[l];
        const struct {
            int idx;
            const char *hf;
        } map[] = {
            {lp->norm1, "attn_norm.weight"},     {lp->norm2, "mlp_norm.weight"},
            {lp->wq, "attn.q_proj.weight"},      {lp->wk, "attn.k_proj.weight"},
            {lp->wv, "attn.v_proj.weight"},      {lp->wa, "attn.a_proj.weight"},
            {lp->wb, "attn.b_proj.weight"},      {lp->wz, "attn.g_proj.weight"},
            {lp->wo, "attn.o_proj.weight"},      {lp->conv_q, "attn.q_conv1d.weight"},
            {lp->conv_k, "attn.k_conv1d.weight"}, {lp->conv_v, "attn.v_conv1d.weight"},
            {lp->A_log, "attn.A_log"},           {lp->dt_bias, "attn.dt_bias"},
            {lp->onorm, "attn.o_norm.weight"},   {lp->sq, "attn.q_proj.weight"},
            {lp->sk, "attn.k_proj.weight"},      {lp->sv, "attn.v_proj.weight"},
            {lp->so, "attn.o_proj.weight"},      {lp->wgate, "mlp.gate_proj.weight"},
            {lp->wup, "mlp.up_proj.weight"},     {lp->wdown, "mlp.down_proj.weight"},
        };
        for (size_t j = 0; j < sizeof map / sizeof map[0]; j++) {
            if (map[j].idx != i) continue;
            snprintf(out->name, sizeof out->name, "model.layers.%d.%s", l, map[j].hf);
            if (p->kind == PARAM_CONV) {  // nn.Conv1d depthwise: (C, 1, K), same memory as (C, K)
                out->ndim = 3;
                out->shape[0] = p->rows;
                out->shape[1] = 1;
                out->shape[2] = p->cols;
            }
            return;
        }
    }
    gdn_die("internal: parameter '%s' has no Hugging Face name", p->name);
}

// ---- export -----------------------------------------------------------------------------------

static bool write_text(const char *dir, const char *file, const void *data, size_t n, char *err,
                       size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    bool ok = f && (n == 0 || fwrite(data, 1, n, f) == n);
    if (f && fclose(f) != 0) ok = false;
    if (!ok) hf_err(err, errlen, "'%s': cannot write: %s", path, strerror(errno));
    return ok;
}

bool hf_export(const model *m, const char *dir, st_dtype dtype, const hf_tokenizer *tok,
               char *note, size_t notelen, char *err, size_t errlen) {
    if (!hf_check_config(&m->cfg, err, errlen)) return false;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        hf_err(err, errlen, "'%s': cannot create the directory: %s", dir, strerror(errno));
        return false;
    }
    char *cj = hf_config_json(&m->cfg, dtype == ST_BF16 ? "bfloat16" : "float32",
                              tok && tok->kind ? tok->bos : -1, tok && tok->kind ? tok->eot : -1);
    bool ok = write_text(dir, "config.json", cj, strlen(cj), err, errlen);
    free(cj);
    if (!ok) return false;

    // tensors in the parameter table's order; the tied LM head is the embedding (HF omits it)
    size_t total = 0;
    for (int i = 0; i < m->n_params; i++) total += m->params[i].numel;
    double *vals = gdn_malloc(GDN_MAX(total, (size_t)1) * sizeof(double));
    st_out *t = gdn_malloc((size_t)m->n_params * sizeof *t);
    hf_tensor_name *names = gdn_malloc((size_t)m->n_params * sizeof *names);
    size_t at = 0;
    for (int i = 0; i < m->n_params; i++) {
        hf_param_name(m, i, &names[i]);
        model_param_download(m, i, vals + at);
        t[i] = (st_out){.name = names[i].name, .dtype = dtype, .ndim = names[i].ndim,
                        .data = vals + at};
        memcpy(t[i].shape, names[i].shape, sizeof names[i].shape);
        at += m->params[i].numel;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ok = st_write(path, t, m->n_params, err, errlen);
    free(vals);
    free(t);
    free(names);
    if (!ok) return false;

    note[0] = '\0';
    if (!tok || !tok->kind) {
        snprintf(note, notelen, "the checkpoint holds no tokenizer: none written (copy the one the "
                 "data was made with: gdn-prepare's DIR/tokenizer.json or tokenizer.model)");
    } else if (!strcmp(tok->kind, "bpe")) {
        static const char tcfg[] = "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n";
        ok = write_text(dir, "tokenizer.json", tok->blob, tok->n, err, errlen) &&
             write_text(dir, "tokenizer_config.json", tcfg, strlen(tcfg), err, errlen);
    } else if (!strcmp(tok->kind, "spm")) {
        ok = write_text(dir, "tokenizer.model", tok->blob, tok->n, err, errlen);
    } else if (!strcmp(tok->kind, "bytes")) {
        snprintf(note, notelen, "tokenizer \"bytes\" (id = byte value): Hugging Face has no "
                 "tokenizer file for it; none written (ids are the UTF-8 bytes of the text)");
    } else {
        snprintf(note, notelen, "tokenizer kind \"%s\" is not known: none written", tok->kind);
    }
    return ok;
}

// ---- import -----------------------------------------------------------------------------------

// config.json's value of key, or fla's default (GatedDeltaNetConfig) when it is absent.
static json_t *key_or(json_t *root, const char *key, json_t *def) {
    json_t *v = json_object_get(root, key);
    if (v) {
        json_decref(def);
        return json_incref(v);
    }
    return def;
}

static bool get_int(json_t *root, const char *key, json_int_t def, int lo, int *out,
                    const char *path, char *err, size_t errlen) {
    json_t *v = key_or(root, key, json_integer(def));
    bool ok = json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= INT32_MAX;
    if (ok) *out = (int)json_integer_value(v);
    else hf_err(err, errlen, "'%s': \"%s\" must be an integer >= %d", path, key, lo);
    json_decref(v);
    return ok;
}
static bool get_num(json_t *root, const char *key, double def, double *out, const char *path,
                    char *err, size_t errlen) {
    json_t *v = key_or(root, key, json_real(def));
    bool ok = json_is_number(v) && isfinite(json_number_value(v)) && json_number_value(v) > 0;
    if (ok) *out = json_number_value(v);
    else hf_err(err, errlen, "'%s': \"%s\" must be a positive number", path, key);
    json_decref(v);
    return ok;
}
static bool get_bool(json_t *root, const char *key, bool def, bool *out, const char *path,
                     char *err, size_t errlen) {
    json_t *v = key_or(root, key, json_boolean(def));
    bool ok = json_is_boolean(v);
    if (ok) *out = json_is_true(v);
    else hf_err(err, errlen, "'%s': \"%s\" must be true or false", path, key);
    json_decref(v);
    return ok;
}

// The attention specs of config.attn into kinds[] ('S' or 'A') and the swa keys.
static bool read_attn(json_t *attn, gdn_config *c, char *kinds, const char *path, char *err,
                      size_t errlen) {
    json_t *specs = json_is_object(attn) ? json_pack("[O]", attn) : json_incref(attn);
    bool ok = json_is_array(specs), have_window = false, first = true;
    if (!ok) hf_err(err, errlen, "'%s': \"attn\" must be null, an object or a list of objects", path);
    size_t si;
    json_t *s;
    json_array_foreach(specs, si, s) {
        if (!ok) break;
        json_t *layers = json_object_get(s, "layers"), *nh = json_object_get(s, "num_heads"),
               *kv = json_object_get(s, "num_kv_heads"), *bias = json_object_get(s, "qkv_bias"),
               *win = json_object_get(s, "window_size"), *theta = json_object_get(s, "rope_theta");
        if (!json_is_object(s) || !json_is_array(layers) || !json_is_integer(nh) ||
            json_integer_value(nh) < 1) {
            hf_err(err, errlen, "'%s': attn spec %zu: needs \"layers\" (a list) and \"num_heads\" "
                   "(an integer >= 1)", path, si);
            ok = false;
            break;
        }
        const int heads = (int)json_integer_value(nh);
        if (kv && !json_is_null(kv) && (!json_is_integer(kv) || json_integer_value(kv) != heads)) {
            hf_err(err, errlen, "'%s': attn spec %zu: num_kv_heads differs from num_heads (grouped "
                   "keys and values): gdn.c's attention has one key/value head per query head",
                   path, si);
            ok = false;
            break;
        }
        if (bias && json_is_true(bias)) {
            hf_err(err, errlen, "'%s': attn spec %zu: qkv_bias = true: gdn.c's projections have no "
                   "bias", path, si);
            ok = false;
            break;
        }
        const double rt = theta && !json_is_null(theta) ? json_number_value(theta) : 10000.0;
        if (!(rt > 0) || (!first && (heads != c->swa_n_heads || rt != c->swa_rope_base))) {
            hf_err(err, errlen, "'%s': attn spec %zu: num_heads and rope_theta must be those of "
                   "the other specs and rope_theta > 0 (gdn.c has one [swa] n_heads, rope_base)",
                   path, si);
            ok = false;
            break;
        }
        c->swa_n_heads = heads;
        c->swa_rope_base = rt;
        char kind = 'A';
        if (win && !json_is_null(win)) {
            if (!json_is_integer(win) || json_integer_value(win) < 1 ||
                json_integer_value(win) > 16777216 ||
                (have_window && json_integer_value(win) != c->swa_window)) {
                hf_err(err, errlen, "'%s': attn spec %zu: window_size must be an integer in [1, "
                       "2^24], the same for every windowed spec (gdn.c has one [swa] window)", path,
                       si);
                ok = false;
                break;
            }
            kind = 'S';
            have_window = true;
            c->swa_window = (int)json_integer_value(win);
        }
        size_t li;
        json_t *lv;
        json_array_foreach(layers, li, lv) {
            json_int_t l = json_is_integer(lv) ? json_integer_value(lv) : -1;
            if (l < 0 || l >= c->n_layers || kinds[l] != 'G') {
                hf_err(err, errlen, "'%s': attn spec %zu: layer entry %zu is not a new layer index "
                       "in [0, %d)", path, si, li, c->n_layers);
                ok = false;
                break;
            }
            kinds[l] = kind;
        }
        first = false;
    }
    json_decref(specs);
    return ok;
}

bool hf_config_read(const char *dir, gdn_config *c, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        if (root) hf_err(err, errlen, "'%s': not a JSON object", path);
        else hf_err(err, errlen, "'%s': %s (line %d, column %d)", path, je.text, je.line, je.column);
        json_decref(root);
        return false;
    }
    gdn_config n = *c;
    json_t *mt = json_object_get(root, "model_type"), *act = json_object_get(root, "hidden_act"),
           *nv = json_object_get(root, "num_v_heads"), *ar = json_object_get(root, "attnres_block_size");
    bool ok = true;
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "gated_deltanet")) {
        hf_err(err, errlen, "'%s': \"model_type\" is not \"gated_deltanet\" (fla's "
               "GatedDeltaNetForCausalLM)", path);
        ok = false;
    } else if (act && !(json_is_string(act) && (!strcmp(json_string_value(act), "swish") ||
                                                 !strcmp(json_string_value(act), "silu")))) {
        hf_err(err, errlen, "'%s': \"hidden_act\" must be \"swish\" (gdn.c's MLP is SwiGLU)", path);
        ok = false;
    } else if (ar && !json_is_null(ar)) {
        hf_err(err, errlen, "'%s': \"attnres_block_size\" is set: gdn.c has no attention "
               "residuals", path);
        ok = false;
    }
    int mlp = 0;
    double ratio = 4;
    ok = ok && get_int(root, "hidden_size", 2048, 1, &n.d_model, path, err, errlen) &&
         get_int(root, "num_hidden_layers", 21, 1, &n.n_layers, path, err, errlen) &&
         get_int(root, "vocab_size", 32000, 2, &n.vocab_size, path, err, errlen) &&
         get_int(root, "head_dim", 256, 1, &n.gdn_head_dim, path, err, errlen) &&
         get_int(root, "num_heads", 6, 1, &n.gdn_n_heads, path, err, errlen) &&
         get_int(root, "conv_size", 4, 1, &n.gdn_conv_size, path, err, errlen) &&
         get_num(root, "expand_v", 2.0, &n.gdn_expand_v, path, err, errlen) &&
         get_num(root, "norm_eps", 1e-6, &n.norm_eps, path, err, errlen) &&
         get_bool(root, "use_gate", true, &n.gdn_output_gate, path, err, errlen) &&
         get_bool(root, "use_short_conv", true, &n.gdn_short_conv, path, err, errlen) &&
         get_bool(root, "allow_neg_eigval", false, &n.gdn_allow_neg_eigval, path, err, errlen) &&
         get_bool(root, "tie_word_embeddings", false, &n.tie_embeddings, path, err, errlen);
    if (ok && nv && !json_is_null(nv) &&
        !(json_is_integer(nv) && json_integer_value(nv) == n.gdn_n_heads)) {
        hf_err(err, errlen, "'%s': \"num_v_heads\" differs from num_heads (grouped value heads): "
               "gdn.c has one value head per key head", path);
        ok = false;
    }
    json_t *is = json_object_get(root, "intermediate_size");
    if (ok && is && !json_is_null(is)) {
        ok = get_int(root, "intermediate_size", 0, 1, &mlp, path, err, errlen);
    } else if (ok) {  // fla's GatedMLP: 2/3 ratio d rounded up to 256
        json_t *hr = json_object_get(root, "hidden_ratio");
        if (hr && !json_is_null(hr)) ok = get_num(root, "hidden_ratio", 4, &ratio, path, err, errlen);
        mlp = (int)(n.d_model * ratio * 2 / 3);
        mlp = 256 * ((mlp + 255) / 256);
    }
    if (ok && n.n_layers > MAX_LAYERS) {
        hf_err(err, errlen, "'%s': num_hidden_layers %d: gdn.c holds at most %d", path, n.n_layers,
               MAX_LAYERS);
        ok = false;
    }
    char kinds[MAX_LAYERS + 1];
    if (ok) {
        memset(kinds, 'G', (size_t)n.n_layers);
        kinds[n.n_layers] = '\0';
        json_t *attn = json_object_get(root, "attn");
        if (attn && !json_is_null(attn)) ok = read_attn(attn, &n, kinds, path, err, errlen);
    }
    json_decref(root);
    if (!ok) return false;
    n.mlp_hidden = mlp;
    n.gdn_gate = n.gdn_delta = true;
    if (strchr(kinds, 'S') || strchr(kinds, 'A')) n.swa_head_dim = n.d_model / n.swa_n_heads;
    // the pattern: the shortest period of the layer kinds (it repeats to n_layers)
    int p = 1;
    while (p < n.n_layers) {
        bool rep = true;
        for (int l = p; l < n.n_layers && rep; l++) rep = kinds[l] == kinds[l % p];
        if (rep) break;
        p++;
    }
    if (p >= (int)sizeof n.pattern) {
        hf_err(err, errlen, "'%s': the layer kinds %s do not repeat with a period under %zu "
               "letters ([model] pattern)", path, kinds, sizeof n.pattern);
        return false;
    }
    memcpy(n.pattern, kinds, (size_t)p);
    n.pattern[p] = '\0';
    *c = n;
    return true;
}

bool hf_config_matches(const gdn_config *c, const char *dir, char *err, size_t errlen) {
    gdn_config h = *c;
    if (!hf_config_read(dir, &h, err, errlen)) return false;
    // the same architecture written differently: the run's spelling
    bool same_kinds = h.n_layers == c->n_layers;
    for (int l = 0; same_kinds && l < c->n_layers; l++)
        same_kinds = config_layer_kind(&h, l) == config_layer_kind(c, l);
    if (same_kinds) memcpy(h.pattern, c->pattern, sizeof h.pattern);
    if (config_mlp_hidden(&h) == config_mlp_hidden(c)) {
        h.mlp_hidden = c->mlp_hidden;
        h.mlp_ratio = c->mlp_ratio;
    }
    const bool attn = has_kind(c, 'S') || has_kind(c, 'A');
    if (!has_kind(c, 'G') || !c->gdn_short_conv) h.gdn_conv_size = c->gdn_conv_size;
    if (!has_kind(c, 'G')) {
        h.gdn_n_heads = c->gdn_n_heads, h.gdn_head_dim = c->gdn_head_dim;
        h.gdn_expand_v = c->gdn_expand_v, h.gdn_short_conv = c->gdn_short_conv;
        h.gdn_output_gate = c->gdn_output_gate, h.gdn_allow_neg_eigval = c->gdn_allow_neg_eigval;
        h.gdn_gate = c->gdn_gate, h.gdn_delta = c->gdn_delta;
    }
    if (!attn) {
        h.swa_n_heads = c->swa_n_heads, h.swa_head_dim = c->swa_head_dim;
        h.swa_rope_base = c->swa_rope_base;
    }
    if (!has_kind(c, 'S')) h.swa_window = c->swa_window;
    config_difference d;
    if (config_first_difference(c, &h, 0, false, &d) < 0) return true;
    hf_err(err, errlen, "'%s/config.json' does not describe the run's model: [%s] %s is %s in the "
           "run's config, %s in the export", dir, d.section, d.key, d.a, d.b);
    return false;
}

bool hf_import(model *m, const char *dir, char *err, size_t errlen) {
    if (!hf_config_matches(&m->cfg, dir, err, errlen)) return false;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_file f;
    if (!st_open(&f, path, err, errlen)) return false;
    size_t maxn = 1;
    for (int i = 0; i < m->n_params; i++) maxn = GDN_MAX(maxn, m->params[i].numel);
    double *h = gdn_malloc(maxn * sizeof(double));
    bool ok = true;
    int used = 0;
    for (int i = 0; ok && i < m->n_params; i++) {
        hf_tensor_name nm;
        hf_param_name(m, i, &nm);
        const st_tensor *t = st_find(&f, nm.name);
        if (!t) {
            hf_err(err, errlen, "'%s': tensor '%s' (gdn.c's %s) is missing", path, nm.name,
                   m->params[i].name);
            ok = false;
            break;
        }
        bool shape = t->ndim == nm.ndim;
        for (int d = 0; shape && d < nm.ndim; d++) shape = t->shape[d] == nm.shape[d];
        if (!shape) {
            char want[96] = "", got[96] = "";
            for (int d = 0; d < nm.ndim; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                         (long long)nm.shape[d]);
            for (int d = 0; d < t->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                         (long long)t->shape[d]);
            hf_err(err, errlen, "'%s': tensor '%s' has shape [%s], the model needs [%s]", path,
                   nm.name, got, want);
            ok = false;
            break;
        }
        ok = st_read(&f, t, h, err, errlen);
        for (size_t j = 0; ok && j < t->numel; j++) {
            if (!isfinite(h[j])) {
                hf_err(err, errlen, "'%s': tensor '%s': element %zu is not finite", path, nm.name, j);
                ok = false;
            }
        }
        if (ok) model_param_upload(m, i, h);
        used++;
    }
    if (ok && used != f.n) {  // a tensor the model has no place for: not this architecture
        for (int j = 0; j < f.n; j++) {
            bool known = false;
            for (int i = 0; i < m->n_params && !known; i++) {
                hf_tensor_name nm;
                hf_param_name(m, i, &nm);
                known = !strcmp(nm.name, f.t[j].name);
            }
            // a tied head saved beside its embedding: the same tensor, nothing to load
            known |= m->cfg.tie_embeddings && !strcmp(f.t[j].name, "lm_head.weight");
            if (!known) {
                hf_err(err, errlen, "'%s': tensor '%s' has no place in the run's model",
                       path, f.t[j].name);
                ok = false;
                break;
            }
        }
    }
    free(h);
    st_close(&f);
    return ok;
}
