// tokenizer_norm.c — the normalizers of a Hugging Face tokenizer.json, applied as the `tokenizers`
// package applies them (its src/normalizers/), with libutf8proc doing the Unicode work and PCRE2
// the regexes:
//   NFC, NFD, NFKC, NFKD   utf8proc_map with STABLE and COMPOSE / DECOMPOSE (+ COMPAT)
//   Lowercase              each code point through utf8proc_tolower (simple mapping), but for
//                          U+0130, the one code point whose full lowercase mapping (Rust's
//                          char::to_lowercase, SpecialCasing.txt) is two code points: "i\u0307"
//   Strip                  leading / trailing White_Space (Rust's char::is_whitespace), tested
//                          by PCRE2's \p{White_Space}
//   Prepend                the string before a non-empty text
//   Replace                every match of a String (literal) or Regex pattern by the content,
//                          matches found as Oniguruma's find_iter finds them (below)
//   Sequence               each in order
// Text is bytes: the Unicode steps (the four forms, Lowercase) work on each maximal run of valid
// UTF-8 on its own and copy every invalid byte as it is (so an invalid byte also ends a run for
// composition: "e" 0xFF "\u0301" stays as it is); Strip stops at an invalid byte (it is not
// white space); Replace runs PCRE2 with PCRE2_MATCH_INVALID_UTF, so a match never holds one.
// For valid UTF-8 (all the package can take) the result is the package's, but where the Unicode
// data differ: test_tokenizer checks every code point against the package and lists those.
#include "tokenizer_norm.h"
#include "../core/common.h"
#include <utf8proc.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

typedef enum {
    NORM_NFC,
    NORM_NFD,
    NORM_NFKC,
    NORM_NFKD,
    NORM_LOWERCASE,
    NORM_STRIP,
    NORM_PREPEND,
    NORM_REPLACE,
} norm_kind;

typedef struct {
    norm_kind kind;
    bool left, right;        // Strip: which ends
    char *str;               // Prepend: the prefix; Replace: the content
    size_t str_n;
    pcre2_code *re;          // Replace: the pattern (a String pattern compiled as a literal)
} norm_step;

struct tok_norm {
    norm_step *steps;        // (n), a Sequence flattened
    size_t n, cap;
    pcre2_code *ws;          // \p{White_Space}, for Strip
};

// The utf8proc_map options of the four forms.
static const int FORM_OPTS[4] = {
    UTF8PROC_STABLE | UTF8PROC_COMPOSE,
    UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
    UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
    UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
};

void tok_norm_free(tok_norm *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n; i++) {
        free(n->steps[i].str);
        pcre2_code_free(n->steps[i].re);
    }
    free(n->steps);
    pcre2_code_free(n->ws);
    free(n);
}

// ---- loading ------------------------------------------------------------------------------

void *tok_regex_compile(const char *pattern, size_t len, bool literal, const char *what,
                        const char *path, char *err, size_t errlen) {
    int code;
    PCRE2_SIZE off;
    // PCRE2_LITERAL takes no PCRE2_UCP (a literal has no classes to widen)
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errlen, "%s: %s: the regex does not compile at offset %zu: %s", what, path,
                 (size_t)off, (const char *)msg);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   // falls back to the interpreter
    return re;
}

static norm_step *add_step(tok_norm *n, norm_kind kind) {
    if (n->n == n->cap) {
        n->cap = n->cap ? 2 * n->cap : 4;
        n->steps = gdn_realloc(n->steps, n->cap * sizeof *n->steps);
    }
    norm_step *s = &n->steps[n->n++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    return s;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = gdn_malloc(n + 1);
    memcpy(d, s, n);
    return d;
}

// One normalizer object at JSON path `path` (a Sequence recursively), appended to n's steps.
static bool load_step(tok_norm *n, json_t *j, const char *path, int depth, const char *what,
                      char *err, size_t errlen) {
    json_t *jt = json_object_get(j, "type");
    const char *type = json_is_string(jt) ? json_string_value(jt) : "(none)";
    static const char *const forms[4] = {"NFC", "NFD", "NFKC", "NFKD"};
    for (int f = 0; f < 4; f++)
        if (!strcmp(type, forms[f])) {
            add_step(n, (norm_kind)(NORM_NFC + f));
            return true;
        }
    if (!strcmp(type, "Lowercase")) {
        add_step(n, NORM_LOWERCASE);
        return true;
    }
    if (!strcmp(type, "Strip")) {
        json_t *l = json_object_get(j, "strip_left"), *r = json_object_get(j, "strip_right");
        if (!json_is_boolean(l) || !json_is_boolean(r)) {
            snprintf(err, errlen, "%s: %s (Strip) needs booleans strip_left and strip_right",
                     what, path);
            return false;
        }
        norm_step *s = add_step(n, NORM_STRIP);
        s->left = json_is_true(l);
        s->right = json_is_true(r);
        return true;
    }
    if (!strcmp(type, "Prepend")) {
        json_t *p = json_object_get(j, "prepend");
        if (!json_is_string(p)) {
            snprintf(err, errlen, "%s: %s.prepend is missing or not a string", what, path);
            return false;
        }
        norm_step *s = add_step(n, NORM_PREPEND);
        s->str_n = json_string_length(p);
        s->str = dup_bytes(json_string_value(p), s->str_n);
        return true;
    }
    if (!strcmp(type, "Replace")) {
        json_t *pat = json_object_get(j, "pattern"), *content = json_object_get(j, "content");
        json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        if (!json_is_string(content)) {
            snprintf(err, errlen, "%s: %s.content is missing or not a string", what, path);
            return false;
        }
        if (!json_is_string(re) && !json_is_string(str)) {
            snprintf(err, errlen, "%s: %s.pattern has neither a \"Regex\" nor a \"String\"", what,
                     path);
            return false;
        }
        json_t *p = json_is_string(re) ? re : str;
        char ppath[256];
        snprintf(ppath, sizeof ppath, "%s.pattern", path);
        pcre2_code *code = tok_regex_compile(json_string_value(p), json_string_length(p),
                                             p == str, what, ppath, err, errlen);
        if (!code) return false;
        norm_step *s = add_step(n, NORM_REPLACE);
        s->re = code;
        s->str_n = json_string_length(content);
        s->str = dup_bytes(json_string_value(content), s->str_n);
        return true;
    }
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(j, "normalizers");
        if (!json_is_array(list)) {
            snprintf(err, errlen, "%s: %s.normalizers is missing or not an array", what, path);
            return false;
        }
        if (depth >= 8) {
            snprintf(err, errlen, "%s: %s: Sequences nested more than 8 deep", what, path);
            return false;
        }
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", path, i);
            if (!load_step(n, json_array_get(list, i), sub, depth + 1, what, err, errlen))
                return false;
        }
        return true;
    }
    snprintf(err, errlen, "%s: %s.type is \"%s\": not supported (NFC, NFD, NFKC, NFKD, Lowercase, "
             "Strip, Prepend, Replace, and Sequence of these are)", what, path, type);
    return false;
}

tok_norm *tok_norm_load(json_t *normalizer, const char *what, char *err, size_t errlen) {
    tok_norm *n = gdn_malloc(sizeof *n);
    if (!load_step(n, normalizer, "normalizer", 0, what, err, errlen)) {
        tok_norm_free(n);
        return NULL;
    }
    n->ws = tok_regex_compile("\\p{White_Space}", PCRE2_ZERO_TERMINATED, false, what, "normalizer",
                              err, errlen);
    if (!n->ws) {
        tok_norm_free(n);
        return NULL;
    }
    return n;
}

// ---- applying -----------------------------------------------------------------------------

// Length of the valid UTF-8 character at s[0 ..), or -1 when it is not one (n > 0).
static inline ptrdiff_t char_len(const char *s, size_t n, utf8proc_int32_t *c) {
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, c);
    return k > 0 ? (ptrdiff_t)k : -1;
}

static bool map_form(const char *s, size_t n, int opts, tok_bytes *out, char *err, size_t errlen) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opts);
    if (k < 0) {
        snprintf(err, errlen, "normalizer: utf8proc_map failed on %zu bytes: %s", n,
                 utf8proc_errmsg(k));
        return false;
    }
    tok_bytes_append(out, dst, (size_t)k);
    free(dst);
    return true;
}

static void lowercase(const char *s, size_t n, tok_bytes *out) {
    char buf[4096];   // flushed to out when 4 bytes might not fit
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (k + 4 > sizeof buf) {
            tok_bytes_append(out, buf, k);
            k = 0;
        }
        unsigned char b = (unsigned char)s[i];
        if (b < 0x80) {   // ASCII: A-Z
            buf[k++] = (char)(b >= 'A' && b <= 'Z' ? b + 32 : b);
            i++;
            continue;
        }
        utf8proc_int32_t c;
        i += (size_t)char_len(s + i, n - i, &c);
        if (c == 0x130) {   // LATIN CAPITAL LETTER I WITH DOT ABOVE -> i + COMBINING DOT ABOVE
            memcpy(buf + k, "i\xcc\x87", 3);
            k += 3;
        } else {
            k += (size_t)utf8proc_encode_char(utf8proc_tolower(c), (utf8proc_uint8_t *)buf + k);
        }
    }
    tok_bytes_append(out, buf, k);
}

// A Unicode step (a form or Lowercase) on each maximal valid UTF-8 run of s; invalid bytes copied.
static bool map_runs(const norm_step *st, const char *s, size_t n, tok_bytes *out, char *err,
                     size_t errlen) {
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        bool ascii = true;
        utf8proc_int32_t c;
        ptrdiff_t k;
        for (;;) {
            while (i < n && (unsigned char)s[i] < 0x80) i++;
            if (i == n || (k = char_len(s + i, n - i, &c)) < 0) break;
            ascii = false;
            i += (size_t)k;
        }
        if (i > start) {
            if (st->kind == NORM_LOWERCASE)
                lowercase(s + start, i - start, out);
            else if (ascii)   // ASCII is its own NFC, NFD, NFKC and NFKD
                tok_bytes_append(out, s + start, i - start);
            else if (!map_form(s + start, i - start, FORM_OPTS[st->kind - NORM_NFC], out, err,
                               errlen))
                return false;
        }
        if (i < n) tok_bytes_append(out, s + i++, 1);   // an invalid byte
    }
    return true;
}

// Whether s[0 .. n) is one White_Space character.
static bool is_space(const tok_norm *nm, pcre2_match_data *md, const char *s, size_t n) {
    int rc = pcre2_match(nm->ws, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, NULL);
    return rc > 0;
}

static void strip(const tok_norm *nm, const norm_step *st, pcre2_match_data *md, const char *s,
                  size_t n, tok_bytes *out) {
    size_t a = 0, b = n;
    utf8proc_int32_t c;
    ptrdiff_t k;
    if (st->left)
        while (a < n && (k = char_len(s + a, n - a, &c)) > 0 && is_space(nm, md, s + a, (size_t)k))
            a += (size_t)k;
    if (st->right)
        while (b > a) {
            // the last character starts at the last byte that is not a continuation byte
            size_t p = b - 1;
            while (p > a && b - p < 4 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
            if (char_len(s + p, b - p, &c) != (ptrdiff_t)(b - p) || !is_space(nm, md, s + p, b - p))
                break;
            b = p;
        }
    tok_bytes_append(out, s + a, b - a);
}

// Every match of st->re in s replaced by st->str. The matches are those of Oniguruma's
// find_iter (the onig crate, which `tokenizers` uses): each search starts where the last match
// ended; an empty match where the last match ended is dropped and the search goes on one
// character later. An empty text has no match.
static bool replace(const norm_step *st, pcre2_match_data *md, const char *s, size_t n,
                    tok_bytes *out, char *err, size_t errlen) {
    size_t last_end = 0, copied = 0, last_match_end = SIZE_MAX;
    while (n > 0 && last_end <= n) {
        int rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, last_end, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            snprintf(err, errlen, "normalizer: Replace regex failed at byte %zu: %s", last_end,
                     (const char *)msg);
            return false;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms == me && me == last_match_end) {   // then me == last_end
            utf8proc_int32_t c;
            ptrdiff_t k = last_end < n ? char_len(s + last_end, n - last_end, &c) : 1;
            last_end += k > 0 ? (size_t)k : 1;
            continue;
        }
        last_end = last_match_end = me;
        tok_bytes_append(out, s + copied, ms - copied);
        tok_bytes_append(out, st->str, st->str_n);
        copied = me;
    }
    tok_bytes_append(out, s + copied, n - copied);
    return true;
}

static bool apply_step(const tok_norm *nm, const norm_step *st, pcre2_match_data **md,
                       const char *s, size_t n, tok_bytes *out, char *err, size_t errlen) {
    switch (st->kind) {
    case NORM_NFC:
    case NORM_NFD:
    case NORM_NFKC:
    case NORM_NFKD:
    case NORM_LOWERCASE:
        return map_runs(st, s, n, out, err, errlen);
    case NORM_STRIP:
    case NORM_REPLACE:
        if (!*md) {   // the whole match only (pcre2_match returns 0 when groups do not fit)
            *md = pcre2_match_data_create(1, NULL);
            if (!*md) gdn_die("pcre2_match_data_create: out of memory");
        }
        if (st->kind == NORM_REPLACE) return replace(st, *md, s, n, out, err, errlen);
        strip(nm, st, *md, s, n, out);
        return true;
    case NORM_PREPEND:
        if (n > 0) tok_bytes_append(out, st->str, st->str_n);
        tok_bytes_append(out, s, n);
        return true;
    }
    return true;
}

bool tok_norm_apply(const tok_norm *nm, const char *text, size_t len, tok_bytes *out, char *err,
                    size_t errlen) {
    tok_bytes buf[2] = {{0}, {0}};
    pcre2_match_data *md = NULL;
    const char *s = text;
    size_t n = len;
    bool ok = true;
    out->n = 0;
    tok_bytes_append(out, "", 0);
    if (nm->n == 0) tok_bytes_append(out, text, len);   // an empty Sequence
    // step i reads the previous one's output (the text for the first) and writes buf[i % 2],
    // the last one out
    for (size_t i = 0; i < nm->n && ok; i++) {
        tok_bytes *dst = i + 1 == nm->n ? out : &buf[i % 2];
        dst->n = 0;
        tok_bytes_append(dst, "", 0);
        ok = apply_step(nm, &nm->steps[i], &md, s, n, dst, err, errlen);
        s = dst->p;
        n = dst->n;
    }
    free(buf[0].p);
    free(buf[1].p);
    pcre2_match_data_free(md);
    return ok;
}
