// tokenizer_post.h — the post_processor of a Hugging Face tokenizer.json (internal to src/data):
// the ids the `tokenizers` package puts around one text when it encodes with
// add_special_tokens = True (its single-sequence template). Supported: TemplateProcessing,
// BertProcessing, RobertaProcessing, ByteLevel (no ids) and Sequence of them;
// tokenizer_post.c says how each one works.
#pragma once
#include "tokenizer_kinds.h"
#include <jansson.h>

// The "post_processor" object of a tokenizer.json (not null) -> *prefix and *suffix (appended
// to; tok_ids_free them): encode(text, add_special_tokens = True) is prefix ++ the text's ids ++
// suffix. has[id] (vocab entries): whether id is a token of the vocabulary; every id the
// processor adds must be one. False + a message naming `what`, the JSON path and the type when a
// part of it is not supported, or when its template does not hold the text exactly once (with
// special tokens and without).
bool tok_post_load(json_t *post_processor, const uint8_t *has, int vocab, const char *what,
                   tok_ids *prefix, tok_ids *suffix, char *err, size_t errlen);
