// tokenizer_kinds.h — what each tokenizer kind gives the interface in tokenizer.c (internal to
// src/data). A kind encodes a segment of text that holds no special token (tokenizer.c splits
// the specials out first) and decodes ids of its vocabulary to bytes.
#pragma once
#include "tokenizer.h"
#ifdef __cplusplus
extern "C" {
#endif

// An added token: its text as written in a document, its id, and whether it is special (split
// out only when encoding with specials; a non-special added token always is, as in
// `tokenizers`).
typedef struct {
    char *text;
    size_t len;
    uint32_t id;
    bool special;
} tok_special;

// A growable byte buffer (decode output).
typedef struct {
    char *p;
    size_t n, cap;
} tok_bytes;

void tok_ids_reserve(tok_ids *v, size_t extra);
void tok_ids_push(tok_ids *v, uint32_t id);
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
bool bpe_encode(const bpe_model *m, const char *text, size_t len, tok_ids *out, char *err,
                size_t errlen);
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
