// tokenizer_bpe.c — byte-level BPE of the GPT-2 family (the "bpe" kind of tokenizer.h), read
// from a Hugging Face tokenizer.json, encoding and decoding as the `tokenizers` package does.
//
// Encode, for a segment of text between the added tokens matched in the raw text (tokenizer.c
// splits those out):
//   0. normalize (tokenizer_norm.c), when the file has a normalizer; then split out the added
//      tokens marked "normalized", matched as their own normalized text in the normalized
//      segment, and go on with each piece between them;
//   1. pre-tokenize: each regex stage (the Split pre-tokenizers of the file, then the GPT-2
//      pattern when ByteLevel has use_regex) cuts every piece into its matches and the gaps
//      between them ("Isolated"); with ByteLevel's add_prefix_space a " " is put before the
//      segment when it does not start with one;
//   2. each piece's bytes are the initial symbols (one vocabulary token per byte: GPT-2's
//      byte <-> unicode map, bytes_to_unicode below, names them);
//   3. the merge of lowest rank among adjacent symbol pairs is applied, leftmost first on ties
//      (the same pair), until no adjacent pair has a merge. With the model's ignore_merges, a
//      piece that is a vocabulary token as a whole is that token.
// The regexes run in PCRE2 (UTF + Unicode properties, JIT-compiled when available) on the raw
// bytes with PCRE2_MATCH_INVALID_UTF: invalid UTF-8 never matches, so each maximal run of it
// between matches becomes a piece of its own, encoded byte by byte like any piece. (Python's
// `tokenizers` cannot take such input; for valid UTF-8 the pieces are the package's.)
// Decode: each token's string is mapped back to bytes through the inverse byte map (a token
// with a character outside the map, such as a special token's, decodes to its UTF-8 bytes as a
// whole, as the ByteLevel decoder does; a "normalized" added token's string is its normalized
// text, as in `tokenizers` 0.23), and the bytes are returned as they are (the package replaces
// invalid UTF-8 with U+FFFD; here decode(encode(x)) == x for every byte string when there is no
// normalizer, and x normalized when there is).
#include "tokenizer_kinds.h"
#include "tokenizer_norm.h"
#include "tokenizer_post.h"
#include "../core/common.h"
#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

// The ByteLevel pre-tokenizer's pattern (GPT-2).
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// BPE_MAX_ID bounds the id table (16M ids; real vocabularies are 50k to 256k); pieces of up to
// BPE_SHORT bytes merge through an array of pair ranks, longer ones through a heap.
enum { BPE_MAX_STAGES = 4, BPE_SHORT = 64, BPE_MAX_ID = 1 << 24 };

// pair (left id, right id) -> (rank, merged id), open addressing on the packed key
typedef struct {
    uint64_t key;            // (left << 32) | right; UINT64_MAX = empty
    uint32_t rank, id;
} merge_slot;

struct bpe_model {
    int vocab;                     // max id + 1 over the vocabulary and the added tokens
    // decode: token id -> bytes (dec_data[dec_off[id] .. dec_off[id + 1]]), dec_has[id]
    uint32_t *dec_off;             // (vocab + 1)
    char *dec_data;
    uint8_t *dec_has;              // (vocab)
    // encode
    int32_t byte_id[256];          // the token of each single byte, -1 when missing
    int32_t unk;                   // the model's unk_token id, -1 none
    merge_slot *merges;            // (merge_cap), a power of two
    uint64_t merge_mask;
    uint32_t *word_slots;          // ignore_merges: bytes -> id table over the model vocabulary
    uint64_t word_mask;            // (id + 1, 0 = empty) indexing dec_off / dec_data
    bool ignore_merges, add_prefix_space;
    pcre2_code *re[BPE_MAX_STAGES];
    int n_stages;
    tok_special *specials;         // the added tokens, as written in the file
    size_t n_specials;
    tok_norm *norm;                // the normalizer, NULL for none
    tok_special *norm_tokens;      // the "normalized" added tokens: their normalized text
    size_t n_norm_tokens;
    tok_added_set norm_set;        // over norm_tokens
    tok_ids tpl_prefix, tpl_suffix;  // the post_processor's ids around a text (tokenizer_post.h)
};

// ---- GPT-2's byte <-> unicode map ---------------------------------------------------------

// Byte b is written as code point byte_cp(b): the printable bytes as themselves, the others as
// 256, 257, ... in byte order.
static void bytes_to_unicode(uint32_t cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

static size_t utf8_put(uint32_t c, char *out) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    out[0] = (char)(0xC0 | (c >> 6));
    out[1] = (char)(0x80 | (c & 0x3F));
    return 2;   // every code point of the map is < 0x800
}

// The next code point of a valid UTF-8 string (jansson's strings are valid), advancing *i.
static uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    unsigned char c = (unsigned char)s[*i];
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (*i + (size_t)len > n) len = (int)(n - *i);
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; k++) v = (v << 6) | ((unsigned char)s[*i + k] & 0x3F);
    *i += (size_t)len;
    return v;
}

// A token's string -> the bytes it stands for: every character through the inverse map, or,
// when one is outside it, the string's own UTF-8 bytes. Returns whether the map covered it.
static bool token_bytes(const char *s, size_t n, const int16_t *inv, char *out, size_t *outn) {
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t c = utf8_next(s, n, &i);
        if (c >= 512 || inv[c] < 0) {
            memcpy(out, s, n);
            *outn = n;
            return false;
        }
        out[k++] = (char)inv[c];
    }
    *outn = k;
    return true;
}

// ---- hashing ------------------------------------------------------------------------------

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static inline uint64_t hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 31);
}

static const merge_slot *merge_find(const bpe_model *m, uint32_t a, uint32_t b) {
    uint64_t key = ((uint64_t)a << 32) | b;
    for (uint64_t h = hash_pair(key) & m->merge_mask;; h = (h + 1) & m->merge_mask) {
        const merge_slot *s = &m->merges[h];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
    }
}

static int32_t word_find(const bpe_model *m, const char *s, size_t n) {
    for (uint64_t h = hash_bytes(s, n) & m->word_mask;; h = (h + 1) & m->word_mask) {
        uint32_t v = m->word_slots[h];
        if (!v) return -1;
        uint32_t id = v - 1;
        if (m->dec_off[id + 1] - m->dec_off[id] == n && !memcmp(m->dec_data + m->dec_off[id], s, n))
            return (int32_t)id;
    }
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c *= 2;
    return c;
}

// ---- loading ------------------------------------------------------------------------------

void bpe_free(bpe_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_stages; i++) pcre2_code_free(m->re[i]);
    for (size_t i = 0; i < m->n_specials; i++) free(m->specials[i].text);
    free(m->specials);
    for (size_t i = 0; i < m->n_norm_tokens; i++) free(m->norm_tokens[i].text);
    free(m->norm_tokens);
    tok_norm_free(m->norm);
    tok_ids_free(&m->tpl_prefix);
    tok_ids_free(&m->tpl_suffix);
    free(m->dec_off);
    free(m->dec_data);
    free(m->dec_has);
    free(m->merges);
    free(m->word_slots);
    free(m);
}

int bpe_vocab_size(const bpe_model *m) { return m->vocab; }
void bpe_specials(const bpe_model *m, const tok_special **list, size_t *n) {
    *list = m->specials;
    *n = m->n_specials;
}
tok_template bpe_template(const bpe_model *m) {
    return (tok_template){.prefix = m->tpl_prefix.ids, .suffix = m->tpl_suffix.ids,
                          .n_prefix = m->tpl_prefix.n, .n_suffix = m->tpl_suffix.n};
}

#define FAIL(...)                                  \
    do {                                           \
        snprintf(err, errlen, __VA_ARGS__);        \
        goto fail;                                 \
    } while (0)

static bool add_stage(bpe_model *m, const char *pattern, size_t len, bool literal,
                      const char *what, const char *path, char *err, size_t errlen) {
    if (m->n_stages == BPE_MAX_STAGES) {
        snprintf(err, errlen, "%s: %s: more than %d regex pre-tokenizers", what, path,
                 BPE_MAX_STAGES);
        return false;
    }
    pcre2_code *re = tok_regex_compile(pattern, len, literal, what, path, err, errlen);
    if (!re) return false;
    m->re[m->n_stages++] = re;
    return true;
}

static const char *str_or(json_t *o, const char *key, const char *def) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : def;
}

static bool json_flag(json_t *o, const char *key) { return json_is_true(json_object_get(o, key)); }

// ByteLevel pre-tokenizer: add_prefix_space, and the GPT-2 pattern when use_regex (default on).
static bool load_byte_level(bpe_model *m, json_t *pt, const char *what, const char *path,
                            char *err, size_t errlen) {
    m->add_prefix_space = json_flag(pt, "add_prefix_space");
    json_t *ur = json_object_get(pt, "use_regex");
    if (!ur || json_is_true(ur))
        return add_stage(m, GPT2_PATTERN, PCRE2_ZERO_TERMINATED, false, what, path, err, errlen);
    return true;
}

static bool load_split(bpe_model *m, json_t *pt, const char *what, const char *path, char *err,
                       size_t errlen) {
    const char *behavior = str_or(pt, "behavior", "");
    if (strcmp(behavior, "Isolated")) {
        snprintf(err, errlen, "%s: %s.behavior is \"%s\": only \"Isolated\" is supported", what,
                 path, behavior);
        return false;
    }
    if (json_flag(pt, "invert")) {
        snprintf(err, errlen, "%s: %s.invert is true: not supported", what, path);
        return false;
    }
    json_t *pat = json_object_get(pt, "pattern");
    json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
    if (json_is_string(re))
        return add_stage(m, json_string_value(re), json_string_length(re), false, what, path, err,
                         errlen);
    if (json_is_string(str))
        return add_stage(m, json_string_value(str), json_string_length(str), true, what, path,
                         err, errlen);
    snprintf(err, errlen, "%s: %s.pattern has neither a \"Regex\" nor a \"String\"", what, path);
    return false;
}

// pre_tokenizer: ByteLevel, or a Sequence of Split ... then ByteLevel.
static bool load_pre_tokenizer(bpe_model *m, json_t *pt, const char *what, char *err,
                               size_t errlen) {
    const char *type = str_or(pt, "type", "(none)");
    if (!strcmp(type, "ByteLevel")) return load_byte_level(m, pt, what, "pre_tokenizer", err, errlen);
    if (strcmp(type, "Sequence")) {
        snprintf(err, errlen, "%s: pre_tokenizer.type is \"%s\": only ByteLevel, or a Sequence of "
                 "Split pre-tokenizers ending with ByteLevel, is supported", what, type);
        return false;
    }
    json_t *list = json_object_get(pt, "pretokenizers");
    size_t n = json_array_size(list);
    if (n == 0 || strcmp(str_or(json_array_get(list, n - 1), "type", ""), "ByteLevel")) {
        snprintf(err, errlen, "%s: pre_tokenizer.pretokenizers must end with a ByteLevel "
                 "pre-tokenizer (a byte-level BPE)", what);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(list, i);
        char path[64];
        snprintf(path, sizeof path, "pre_tokenizer.pretokenizers[%zu]", i);
        const char *ptype = str_or(p, "type", "(none)");
        bool ok;
        if (i == n - 1) {
            ok = load_byte_level(m, p, what, path, err, errlen);
            if (ok && m->add_prefix_space && i > 0) {
                snprintf(err, errlen, "%s: %s.add_prefix_space after a Split is not supported",
                         what, path);
                ok = false;
            }
        } else if (!strcmp(ptype, "Split")) {
            ok = load_split(m, p, what, path, err, errlen);
        } else {
            snprintf(err, errlen, "%s: %s.type is \"%s\": only Split and ByteLevel are supported",
                     what, path, ptype);
            ok = false;
        }
        if (!ok) return false;
    }
    return true;
}

// Checks of the parts of a tokenizer.json that this file does not implement.
static bool check_unsupported(json_t *root, json_t *model, const char *what, char *err,
                              size_t errlen) {
    json_t *dec = json_object_get(root, "decoder");
    const char *dtype = str_or(dec, "type", "(none)");
    if (strcmp(dtype, "ByteLevel")) {
        snprintf(err, errlen, "%s: decoder.type is \"%s\": only ByteLevel is supported", what,
                 dtype);
        return false;
    }
    const char *mtype = str_or(model, "type", "BPE");
    if (strcmp(mtype, "BPE")) {
        snprintf(err, errlen, "%s: model.type is \"%s\": only byte-level \"BPE\" is supported",
                 what, mtype);
        return false;
    }
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout)) {
        snprintf(err, errlen, "%s: model.dropout is set: BPE dropout is not supported", what);
        return false;
    }
    const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++)
        if (str_or(model, affix[i], "")[0]) {
            snprintf(err, errlen, "%s: model.%s is \"%s\": not supported in a byte-level BPE",
                     what, affix[i], str_or(model, affix[i], ""));
            return false;
        }
    if (json_flag(model, "byte_fallback")) {
        snprintf(err, errlen, "%s: model.byte_fallback is true: not supported", what);
        return false;
    }
    return true;
}

// Splits a merges entry ("a b" or ["a", "b"]) into its two token strings.
static bool merge_parts(json_t *e, const char **a, size_t *an, const char **b, size_t *bn) {
    if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
        json_is_string(json_array_get(e, 1))) {
        *a = json_string_value(json_array_get(e, 0));
        *an = json_string_length(json_array_get(e, 0));
        *b = json_string_value(json_array_get(e, 1));
        *bn = json_string_length(json_array_get(e, 1));
        return true;
    }
    if (!json_is_string(e)) return false;
    const char *s = json_string_value(e), *sp = strchr(s, ' ');
    if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) return false;
    *a = s;
    *an = (size_t)(sp - s);
    *b = sp + 1;
    *bn = strlen(sp + 1);
    return true;
}

bpe_model *bpe_load_json(const char *text, size_t n, const char *what, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(text, n, 0, &je);
    bpe_model *m = gdn_malloc(sizeof *m);
    char *concat = NULL;
    if (!root)
        FAIL("%s: not valid JSON (line %d, column %d): %s", what, je.line, je.column, je.text);
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(model)) FAIL("%s: no \"model\" object", what);
    if (!check_unsupported(root, model, what, err, errlen)) goto fail;
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm) && !(m->norm = tok_norm_load(norm, what, err, errlen)))
        goto fail;
    if (!json_is_object(vocab)) FAIL("%s: model.vocab is missing or not an object", what);
    if (!json_is_array(merges)) FAIL("%s: model.merges is missing or not an array", what);
    if (added && !json_is_array(added)) FAIL("%s: added_tokens is not an array", what);
    m->ignore_merges = json_flag(model, "ignore_merges");
    json_t *pt = json_object_get(root, "pre_tokenizer");
    if (!pt || json_is_null(pt))
        FAIL("%s: pre_tokenizer is null: a byte-level BPE needs a ByteLevel pre-tokenizer", what);
    if (!load_pre_tokenizer(m, pt, what, err, errlen)) goto fail;

    // ids: the vocabulary's and the added tokens'
    const char *key;
    json_t *val;
    int64_t max_id = -1;
    size_t total_len = 0;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= BPE_MAX_ID)
            FAIL("%s: model.vocab[\"%s\"] is not an id in [0, 2^24)", what, key);
        max_id = GDN_MAX(max_id, json_integer_value(val));
        total_len += strlen(key);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        json_t *content = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= BPE_MAX_ID || !json_is_string(content) ||
            json_string_length(content) == 0)
            FAIL("%s: added_tokens[%zu] needs an \"id\" in [0, 2^24) and a non-empty \"content\"",
                 what, i);
        const char *flags[3] = {"single_word", "lstrip", "rstrip"};
        for (int f = 0; f < 3; f++)
            if (json_flag(a, flags[f]))
                FAIL("%s: added_tokens[%zu].%s is true: not supported", what, i, flags[f]);
        max_id = GDN_MAX(max_id, json_integer_value(id));
        total_len += json_string_length(content);
    }
    if (max_id < 0) FAIL("%s: model.vocab is empty", what);
    m->vocab = (int)max_id + 1;

    // the added tokens; the "normalized" ones also as their normalized text
    m->n_specials = json_array_size(added);
    m->specials = gdn_malloc((m->n_specials + 1) * sizeof *m->specials);
    m->norm_tokens = gdn_malloc((m->n_specials + 1) * sizeof *m->norm_tokens);
    for (size_t i = 0; i < m->n_specials; i++) {
        json_t *a = json_array_get(added, i), *c = json_object_get(a, "content");
        tok_special *sp = &m->specials[i];
        sp->len = json_string_length(c);
        sp->text = gdn_malloc(sp->len + 1);
        memcpy(sp->text, json_string_value(c), sp->len);
        sp->id = (uint32_t)json_integer_value(json_object_get(a, "id"));
        sp->special = json_flag(a, "special");
        sp->normalized = json_flag(a, "normalized");
        if (!sp->normalized) continue;
        tok_special *nt = &m->norm_tokens[m->n_norm_tokens++];
        *nt = *sp;
        tok_bytes nb = {0};
        if (m->norm) {
            if (!tok_norm_apply(m->norm, sp->text, sp->len, &nb, err, errlen)) {
                free(nb.p);
                nt->text = NULL;
                goto fail;
            }
        } else {
            tok_bytes_append(&nb, sp->text, sp->len);
        }
        nt->text = nb.p;   // "" (once normalized) never matches, and decodes to nothing
        nt->len = nb.n;
    }
    tok_added_set_init(&m->norm_set, m->norm_tokens, m->n_norm_tokens, true);

    // decode table: vocabulary, then added tokens (an added token's text wins for its id: its
    // normalized text when it is a "normalized" one)
    uint32_t cp[256];
    int16_t inv[512];
    bytes_to_unicode(cp);
    for (int i = 0; i < 512; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[cp[b]] = (int16_t)b;
    size_t nv = (size_t)m->vocab;
    const char **str = gdn_malloc(nv * sizeof *str);
    size_t *slen = gdn_malloc(nv * sizeof *slen);
    json_object_foreach(vocab, key, val) {
        str[json_integer_value(val)] = key;
        slen[json_integer_value(val)] = strlen(key);
    }
    for (size_t i = 0, k = 0; i < m->n_specials; i++) {
        const tok_special *a = m->specials[i].normalized ? &m->norm_tokens[k++] : &m->specials[i];
        str[a->id] = a->text;
        slen[a->id] = a->len;
        total_len += a->len;   // a normalized text can be longer than the content
    }
    m->dec_off = gdn_malloc((nv + 1) * sizeof *m->dec_off);
    m->dec_data = gdn_malloc(total_len + 1);
    m->dec_has = gdn_malloc(nv);
    uint32_t off = 0;
    for (size_t id = 0; id < nv; id++) {
        m->dec_off[id] = off;
        if (!str[id]) continue;
        size_t k;
        token_bytes(str[id], slen[id], inv, m->dec_data + off, &k);
        m->dec_has[id] = 1;
        off += (uint32_t)k;
    }
    m->dec_off[nv] = off;
    free(str);
    free(slen);

    // the post-processor's template: ids of the vocabulary and the added tokens
    json_t *post = json_object_get(root, "post_processor");
    if (post && !json_is_null(post) &&
        !tok_post_load(post, m->dec_has, m->vocab, what, &m->tpl_prefix, &m->tpl_suffix, err,
                       errlen))
        goto fail;

    // encode: single bytes, merges, and (ignore_merges) whole words
    char u[4];
    for (int b = 0; b < 256; b++) {
        json_t *v = json_object_getn(vocab, u, utf8_put(cp[b], u));
        m->byte_id[b] = v ? (int32_t)json_integer_value(v) : -1;
    }
    json_t *unk = json_object_get(model, "unk_token");
    m->unk = -1;
    if (json_is_string(unk)) {
        json_t *v = json_object_get(vocab, json_string_value(unk));
        if (!v) FAIL("%s: model.unk_token \"%s\" is not in model.vocab", what,
                     json_string_value(unk));
        m->unk = (int32_t)json_integer_value(v);
    }
    size_t nm = json_array_size(merges);
    if (nm >= (1u << 31)) FAIL("%s: model.merges has too many entries", what);
    uint64_t mcap = pow2_at_least(2 * (uint64_t)nm + 2);
    m->merges = gdn_malloc(mcap * sizeof *m->merges);
    m->merge_mask = mcap - 1;
    for (uint64_t i = 0; i < mcap; i++) m->merges[i].key = UINT64_MAX;
    size_t concat_cap = 0;
    for (size_t r = 0; r < nm; r++) {
        const char *a, *b;
        size_t an, bn;
        if (!merge_parts(json_array_get(merges, r), &a, &an, &b, &bn))
            FAIL("%s: model.merges[%zu] is not \"left right\" or [\"left\", \"right\"]", what, r);
        if (an + bn + 1 > concat_cap) {
            concat_cap = 2 * (an + bn + 1);
            concat = gdn_realloc(concat, concat_cap);
        }
        memcpy(concat, a, an);
        memcpy(concat + an, b, bn);
        json_t *va = json_object_getn(vocab, a, an), *vb = json_object_getn(vocab, b, bn);
        json_t *vab = json_object_getn(vocab, concat, an + bn);
        if (!va || !vb || !vab)
            FAIL("%s: model.merges[%zu] (\"%.*s\" + \"%.*s\"): \"%.*s\" is not in model.vocab",
                 what, r, (int)an, a, (int)bn, b, !va ? (int)an : !vb ? (int)bn : (int)(an + bn),
                 !va ? a : !vb ? b : concat);
        uint64_t k = ((uint64_t)json_integer_value(va) << 32) | (uint64_t)json_integer_value(vb);
        uint64_t h = hash_pair(k) & m->merge_mask;
        while (m->merges[h].key != UINT64_MAX && m->merges[h].key != k) h = (h + 1) & m->merge_mask;
        if (m->merges[h].key == k) continue;   // a repeated merge keeps its first rank
        m->merges[h].key = k;
        m->merges[h].rank = (uint32_t)r;
        m->merges[h].id = (uint32_t)json_integer_value(vab);
    }
    uint64_t wcap = pow2_at_least(2 * (uint64_t)json_object_size(vocab) + 2);
    m->word_slots = gdn_malloc(wcap * sizeof *m->word_slots);
    m->word_mask = wcap - 1;
    json_object_foreach(vocab, key, val) {
        uint32_t id = (uint32_t)json_integer_value(val);
        const char *s = m->dec_data + m->dec_off[id];
        size_t len = m->dec_off[id + 1] - m->dec_off[id];
        if (word_find(m, s, len) >= 0) continue;
        uint64_t h = hash_bytes(s, len) & m->word_mask;
        while (m->word_slots[h]) h = (h + 1) & m->word_mask;
        m->word_slots[h] = id + 1;
    }

    free(concat);
    json_decref(root);
    return m;
fail:
    free(concat);
    json_decref(root);
    bpe_free(m);
    return NULL;
}

// ---- vocab.json + merges.txt --------------------------------------------------------------

char *bpe_json_from_files(const char *vocab_path, const char *merges_path, size_t *n, char *err,
                          size_t errlen) {
    json_error_t je;
    json_t *vocab = json_load_file(vocab_path, 0, &je);
    json_t *root = NULL, *merges = NULL;
    char *out = NULL, *line = NULL;
    size_t cap = 0;
    FILE *fp = NULL;
    if (!vocab) {
        snprintf(err, errlen, "%s: not valid JSON (line %d, column %d): %s", vocab_path, je.line,
                 je.column, je.text);
        goto done;
    }
    if (!json_is_object(vocab)) {
        snprintf(err, errlen, "%s: a vocab.json must be an object {token: id}", vocab_path);
        goto done;
    }
    fp = fopen(merges_path, "rb");
    if (!fp) {
        snprintf(err, errlen, "%s: its merges file %s cannot be opened: %s", vocab_path,
                 merges_path, strerror(errno));
        goto done;
    }
    merges = json_array();
    ssize_t got;
    long lineno = 0;
    while ((got = getline(&line, &cap, fp)) >= 0) {
        lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (got == 0 || (lineno == 1 && !strncmp(line, "#version", 8))) continue;
        char *sp = strchr(line, ' ');
        if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' ')) {
            snprintf(err, errlen, "%s:%ld: not a merge \"left right\"", merges_path, lineno);
            goto done;
        }
        json_t *s = json_stringn(line, (size_t)got);
        if (!s) {
            snprintf(err, errlen, "%s:%ld: not valid UTF-8", merges_path, lineno);
            goto done;
        }
        json_array_append_new(merges, s);
    }
    if (ferror(fp)) {
        snprintf(err, errlen, "%s: read error: %s", merges_path, strerror(errno));
        goto done;
    }
    // GPT-2's files: <|endoftext|> is the vocabulary's special token
    json_t *added = json_array();
    json_t *eot = json_object_get(vocab, "<|endoftext|>");
    if (json_is_integer(eot))
        json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id",
                                               json_integer_value(eot), "content", "<|endoftext|>",
                                               "single_word", 0, "lstrip", 0, "rstrip", 0,
                                               "normalized", 0, "special", 1));
    json_t *bl = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                           "trim_offsets", 1, "use_regex", 1);
    root = json_pack("{s:s, s:n, s:n, s:o, s:n, s:o, s:O, s:O, s:{s:s, s:n, s:n, s:n, s:n, s:b, "
                     "s:b, s:b, s:O, s:O}}",
                     "version", "1.0", "truncation", "padding", "added_tokens", added,
                     "normalizer", "pre_tokenizer", bl, "post_processor", bl, "decoder", bl,
                     "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
                     "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0,
                     "vocab", vocab, "merges", merges);
    if (!root) {
        snprintf(err, errlen, "%s: cannot build its tokenizer.json", vocab_path);
        goto done;
    }
    out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!out) {
        snprintf(err, errlen, "%s: cannot serialise its tokenizer.json", vocab_path);
        goto done;
    }
    *n = strlen(out);
done:
    if (fp) fclose(fp);
    free(line);
    json_decref(merges);
    json_decref(vocab);
    json_decref(root);
    return out;
}

// ---- encode -------------------------------------------------------------------------------

typedef struct {
    uint32_t rank, pos;
} heap_ent;

// Per-call scratch (tok_encode may run on one model from many threads).
typedef struct {
    const bpe_model *m;
    pcre2_match_data *md[BPE_MAX_STAGES];
    tok_ids *out;
    uint32_t *id, *rank;           // symbols of the piece; rank of the pair (i, i + 1)
    int32_t *prev, *next;          // long pieces: linked list
    heap_ent *heap;
    size_t cap, heap_cap;
    char *err;
    size_t errlen;
    bool failed;
} enc_ctx;

static void ctx_reserve(enc_ctx *c, size_t n) {
    if (n <= c->cap) return;
    size_t cap = c->cap ? c->cap : 256;
    while (cap < n) cap *= 2;
    c->id = gdn_realloc(c->id, cap * sizeof *c->id);
    c->rank = gdn_realloc(c->rank, cap * sizeof *c->rank);
    c->prev = gdn_realloc(c->prev, cap * sizeof *c->prev);
    c->next = gdn_realloc(c->next, cap * sizeof *c->next);
    c->cap = cap;
}

static inline uint32_t pair_rank(const bpe_model *m, uint32_t a, uint32_t b, uint32_t *merged) {
    const merge_slot *s = merge_find(m, a, b);
    if (!s) return UINT32_MAX;
    *merged = s->id;
    return s->rank;
}

static inline bool heap_less(heap_ent a, heap_ent b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(enc_ctx *c, size_t *n, heap_ent e) {
    if (*n == c->heap_cap) {
        c->heap_cap = c->heap_cap ? 2 * c->heap_cap : 1024;
        c->heap = gdn_realloc(c->heap, c->heap_cap * sizeof *c->heap);
    }
    size_t i = (*n)++;
    while (i > 0 && heap_less(e, c->heap[(i - 1) / 2])) {
        c->heap[i] = c->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    c->heap[i] = e;
}

static heap_ent heap_pop(enc_ctx *c, size_t *n) {
    heap_ent top = c->heap[0], last = c->heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, s = i;
        heap_ent cur = last;
        if (l < *n && heap_less(c->heap[l], cur)) s = l, cur = c->heap[l];
        if (r < *n && heap_less(c->heap[r], cur)) s = r;
        if (s == i) break;
        c->heap[i] = c->heap[s];
        i = s;
    }
    if (*n > 0) c->heap[i] = last;
    return top;
}

// Merges of a long piece: a heap of candidate pairs (rank, left position) over a linked list.
// A popped pair is used when its left symbol is alive and the pair there still has that rank
// (a rank names one pair, so the pair is the same).
static size_t merge_long(enc_ctx *c, size_t n) {
    const bpe_model *m = c->m;
    uint32_t *id = c->id;
    int32_t *prev = c->prev, *next = c->next;
    size_t hn = 0, alive = n;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        uint32_t merged = 0, r;
        if (i + 1 < n && (r = pair_rank(m, id[i], id[i + 1], &merged)) != UINT32_MAX)
            heap_push(c, &hn, (heap_ent){r, (uint32_t)i});
    }
    while (hn > 0) {
        heap_ent e = heap_pop(c, &hn);
        uint32_t i = e.pos, merged = 0;
        if (id[i] == UINT32_MAX || next[i] < 0) continue;
        int32_t j = next[i];
        if (pair_rank(m, id[i], id[j], &merged) != e.rank) continue;
        id[i] = merged;
        id[j] = UINT32_MAX;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = (int32_t)i;
        alive--;
        uint32_t r;
        if (prev[i] >= 0 && (r = pair_rank(m, id[prev[i]], id[i], &merged)) != UINT32_MAX)
            heap_push(c, &hn, (heap_ent){r, (uint32_t)prev[i]});
        if (next[i] >= 0 && (r = pair_rank(m, id[i], id[next[i]], &merged)) != UINT32_MAX)
            heap_push(c, &hn, (heap_ent){r, i});
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) id[k++] = id[i];
    (void)alive;
    return k;
}

// Merges of a short piece: the rank of every adjacent pair in an array, the lowest (leftmost
// on ties) merged until none is left.
static size_t merge_short(enc_ctx *c, size_t n) {
    const bpe_model *m = c->m;
    uint32_t *id = c->id, *rank = c->rank, merged = 0;
    for (size_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(m, id[i], id[i + 1], &merged);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == UINT32_MAX) break;
        pair_rank(m, id[best], id[best + 1], &merged);
        id[best] = merged;
        // drop symbol best + 1 and the pair (best + 1, best + 2); ranks around best are redone
        memmove(id + best + 1, id + best + 2, (n - best - 2) * sizeof *id);
        if (best + 3 < n) memmove(rank + best + 1, rank + best + 2, (n - best - 3) * sizeof *rank);
        n--;
        if (best > 0) rank[best - 1] = pair_rank(m, id[best - 1], id[best], &merged);
        if (best + 1 < n) rank[best] = pair_rank(m, id[best], id[best + 1], &merged);
    }
    return n;
}

static void encode_piece(enc_ctx *c, const char *s, size_t n) {
    const bpe_model *m = c->m;
    if (m->ignore_merges) {
        int32_t w = word_find(m, s, n);
        if (w >= 0) {
            tok_ids_push(c->out, (uint32_t)w);
            return;
        }
    }
    ctx_reserve(c, n);
    for (size_t i = 0; i < n; i++) {
        int32_t b = m->byte_id[(unsigned char)s[i]];
        if (b < 0) b = m->unk;
        if (b < 0) {
            if (!c->failed)
                snprintf(c->err, c->errlen, "byte 0x%02x has no token in the vocabulary (and the "
                         "model has no unk_token)", (unsigned char)s[i]);
            c->failed = true;
            return;
        }
        c->id[i] = (uint32_t)b;
    }
    size_t k = n <= BPE_SHORT ? merge_short(c, n) : merge_long(c, n);
    tok_ids_append(c->out, c->id, k);
}

// Stage `stage` cuts s into matches and the gaps between them, each handed to the next stage.
static void pretokenize(enc_ctx *c, int stage, const char *s, size_t n) {
    if (stage == c->m->n_stages) {
        encode_piece(c, s, n);
        return;
    }
    pcre2_match_data *md = c->md[stage];
    size_t pos = 0;
    while (pos < n && !c->failed) {
        int rc = pcre2_match(c->m->re[stage], (PCRE2_SPTR)s, n, pos, PCRE2_NOTEMPTY, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            snprintf(c->err, c->errlen, "pre-tokenizer regex failed at byte %zu: %s", pos,
                     (const char *)msg);
            c->failed = true;
            return;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] > pos) pretokenize(c, stage + 1, s + pos, ov[0] - pos);
        pretokenize(c, stage + 1, s + ov[0], ov[1] - ov[0]);
        pos = ov[1];
    }
    if (pos < n && !c->failed) pretokenize(c, stage + 1, s + pos, n - pos);
}

// A piece of text between added tokens: ByteLevel's prefix space, then the pre-tokenizer.
static void encode_segment(enc_ctx *c, const char *text, size_t len) {
    if (len == 0) return;   // `tokenizers` drops empty splits
    char *prefixed = NULL;
    if (c->m->add_prefix_space && text[0] != ' ') {
        prefixed = gdn_malloc(len + 1);
        prefixed[0] = ' ';
        memcpy(prefixed + 1, text, len);
        text = prefixed;
        len++;
    }
    pretokenize(c, 0, text, len);
    free(prefixed);
}

bool bpe_encode(const bpe_model *m, const char *text, size_t len, bool specials, tok_ids *out,
                char *err, size_t errlen) {
    tok_bytes normalized = {0};
    if (m->norm) {
        if (!tok_norm_apply(m->norm, text, len, &normalized, err, errlen)) {
            free(normalized.p);
            return false;
        }
        text = normalized.p;
        len = normalized.n;
    }
    enc_ctx c = {.m = m, .out = out, .err = err, .errlen = errlen};
    for (int i = 0; i < m->n_stages; i++) {
        c.md[i] = pcre2_match_data_create_from_pattern(m->re[i], NULL);
        if (!c.md[i]) gdn_die("pcre2_match_data_create_from_pattern: out of memory");
    }
    size_t start = 0, pos = 0, at = 0;
    const tok_special *s;
    while (!c.failed && (s = tok_added_next(&m->norm_set, text, len, specials, &pos, &at))) {
        encode_segment(&c, text + start, at - start);
        tok_ids_push(out, s->id);
        start = pos;
    }
    if (!c.failed) encode_segment(&c, text + start, len - start);
    free(normalized.p);
    for (int i = 0; i < m->n_stages; i++) pcre2_match_data_free(c.md[i]);
    free(c.id);
    free(c.rank);
    free(c.prev);
    free(c.next);
    free(c.heap);
    return !c.failed;
}

bool bpe_decode(const bpe_model *m, const uint32_t *ids, size_t n, tok_bytes *out, char *err,
                size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= (uint32_t)m->vocab || !m->dec_has[ids[i]]) {
            snprintf(err, errlen, "token id %u at position %zu is not in the BPE vocabulary "
                     "(size %d)", ids[i], i, m->vocab);
            return false;
        }
        tok_bytes_append(out, m->dec_data + m->dec_off[ids[i]],
                         m->dec_off[ids[i] + 1] - m->dec_off[ids[i]]);
    }
    return true;
}
