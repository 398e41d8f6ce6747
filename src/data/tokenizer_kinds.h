// tokenizer_kinds.h — what each tokenizer kind gives the interface in tokenizer.c (internal to
// src/data). A kind encodes a segment of text that holds no special token (tokenizer.c splits
// the specials out first) and decodes ids of its vocabulary to bytes.
#pragma once
#include "tokenizer.h"
#ifdef __cplusplus
extern "C" {
#endif

// An added token: its text as written in a document, its id, whether it is special (split out
// only when encoding with specials; a non-special added token always is, as in `tokenizers`),
// and whether it is matched in the normalized text (by the kind, after its normalizer) rather
// than in the raw text (by tokenizer.c, before the kind sees the text).
typedef struct {
    char *text;
    size_t len;
    uint32_t id;
    bool special;
    bool normalized;
} tok_special;

// A set of added tokens to split out of a text as the `tokenizers` package does (an
// Aho-Corasick automaton, leftmost-longest): at the leftmost position where one matches, the
// longest one there; the search goes on after it. A special token met when encoding without
// specials is text, and the search goes on after it all the same.
typedef struct {
    const tok_special *list;   // the set: the tokens of list[0 .. n) with this `normalized`
    size_t n;
    bool normalized;
    bool first[256];           // some token of the set starts with this byte
    size_t n_tokens, n_plain;  // tokens in the set; those not special
} tok_added_set;

// The set of list's tokens whose `normalized` flag is `normalized`.
void tok_added_set_init(tok_added_set *s, const tok_special *list, size_t n, bool normalized);
// The next token split out of text[*pos .. len): returns it with *at = its offset and
// *pos = its end; NULL (and *pos = len) when none is left.
const tok_special *tok_added_next(const tok_added_set *s, const char *text, size_t len,
                                  bool specials, size_t *pos, size_t *at);

// A growable byte buffer (decode output).
typedef struct {
    char *p;
    size_t n, cap;
} tok_bytes;

void tok_ids_reserve(tok_ids *v, size_t extra);
void tok_ids_push(tok_ids *v, uint32_t id);
void tok_ids_append(tok_ids *v, const uint32_t *ids, size_t n);
void tok_bytes_append(tok_bytes *b, const void *data, size_t n);

// bytes: id = byte value.
void bytes_encode(const char *text, size_t len, tok_ids *out);
bool bytes_decode(const uint32_t *ids, size_t n, tok_bytes *out, char *err, size_t errlen);

// bpe (tokenizer_bpe.c): a tokenizer.json text; `what` names its origin in messages.
typedef struct bpe_model bpe_model;
bpe_model *bpe_load_json(const char *json, size_t n, const char *what, char *err, size_t errlen);
// vocab.json + merges.txt -> the equivalent tokenizer.json text (malloc'd, *n bytes).
char *bpe_json_from_files(const char *vocab_path, const char *merges_path, size_t *n, char *err,
                          size_t errlen);
void bpe_free(bpe_model *m);
int bpe_vocab_size(const bpe_model *m);
void bpe_specials(const bpe_model *m, const tok_special **list, size_t *n);
// The post_processor's template (tokenizer_post.h); empty when the file has none.
tok_template bpe_template(const bpe_model *m);
// A segment of text between raw-matched added tokens: normalized, its normalized added tokens
// split out (the special ones only with `specials`), and the rest pre-tokenized and merged.
bool bpe_encode(const bpe_model *m, const char *text, size_t len, bool specials, tok_ids *out,
                char *err, size_t errlen);
bool bpe_decode(const bpe_model *m, const uint32_t *ids, size_t n, tok_bytes *out, char *err,
                size_t errlen);

// spm (tokenizer_spm.cc): the .model file's bytes.
typedef struct spm_model spm_model;
spm_model *spm_load(const void *blob, size_t n, const char *what, char *err, size_t errlen);
void spm_free(spm_model *m);
int spm_vocab_size(const spm_model *m);   // pieces + 1: the last id is "\n"
int spm_eos(const spm_model *m);          // </s>, -1 when the model has none
void spm_specials(const spm_model *m, const tok_special **list, size_t *n);
bool spm_encode(const spm_model *m, const char *text, size_t len, tok_ids *out, char *err,
                size_t errlen);
bool spm_decode(const spm_model *m, const uint32_t *ids, size_t n, tok_bytes *out, char *err,
                size_t errlen);

#ifdef __cplusplus
}
#endif
