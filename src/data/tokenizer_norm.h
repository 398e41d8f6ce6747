// tokenizer_norm.h — the normalizer of a Hugging Face tokenizer.json (internal to src/data; the
// bpe kind runs it on each segment of text between added tokens, as the `tokenizers` package
// does). Supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace and Sequence of
// them; tokenizer_norm.c says how each one works.
#pragma once
#include "tokenizer_kinds.h"
#include <jansson.h>

typedef struct tok_norm tok_norm;

// The "normalizer" object of a tokenizer.json (not null). NULL + a message naming `what`, the
// JSON path and the type when a part of it is not supported.
tok_norm *tok_norm_load(json_t *normalizer, const char *what, char *err, size_t errlen);
void tok_norm_free(tok_norm *n);

// out = text[0 .. len) normalized (out's content is replaced; text must not lie in out). Any
// bytes: the Unicode steps work on each maximal run of valid UTF-8 and copy every invalid byte
// as it is. False + a message only when a library call fails (out of memory in utf8proc, a
// regex match limit). Thread-safe: n is only read.
bool tok_norm_apply(const tok_norm *n, const char *text, size_t len, tok_bytes *out, char *err,
                    size_t errlen);

// A tokenizer.json regex (or, literal, a plain string) compiled by PCRE2 for UTF-8 input, with
// Unicode classes and invalid bytes matched as non-characters, JIT-compiled where possible; the
// pre-tokenizers and the normalizers both use it. Returns a pcre2_code * (8-bit), or NULL + a
// message naming `what`, `path` and the offset.
void *tok_regex_compile(const char *pattern, size_t len, bool literal, const char *what,
                        const char *path, char *err, size_t errlen);
