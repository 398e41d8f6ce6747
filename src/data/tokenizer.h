// tokenizer.h — text <-> token ids, in-process, behind one interface (DESIGN 5).
//
// Kinds: "bytes" (id = byte value, vocab 256, the tiny default), "bpe" (byte-level BPE of the
// GPT-2 family, from a Hugging Face tokenizer.json or vocab.json + merges.txt), "spm"
// (SentencePiece through libsentencepiece). A tokenizer serialises to a blob (kind + bytes: the
// tokenizer.json text, the .model file's bytes, nothing for bytes) that token files and
// checkpoints store, so that sampling and evaluation decode with exactly the tokenizer the data
// was made with. SentencePiece never sees a newline: "\n" is the id V = pieces, vocabulary
// V + 1 (docs/tokenizers.md has the encode rules of every kind). A loaded tokenizer is immutable: tok_encode / tok_decode may run on one
// tokenizer from many threads at once.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gdn_tokenizer gdn_tokenizer;

// From a file: "bytes" (no file), a tokenizer.json, a vocab.json (merges.txt beside it), or a
// SentencePiece .model. NULL + a message naming the file (and what in it is wrong) on failure.
gdn_tokenizer *tok_load(const char *spec, char *err, size_t errlen);
// From a stored blob (kind "bytes" | "bpe" | "spm"); `what` names where the blob came from for
// messages (e.g. "data/x/index.json" or "run/checkpoint.h5").
gdn_tokenizer *tok_load_blob(const char *kind, const void *blob, size_t n, const char *what,
                             char *err, size_t errlen);
void tok_free(gdn_tokenizer *t);

const char *tok_kind(const gdn_tokenizer *t);                       // "bytes", "bpe", "spm"
// The blob to store (owned by t; n = 0 for bytes).
void tok_blob(const gdn_tokenizer *t, const void **blob, size_t *n);
int tok_vocab_size(const gdn_tokenizer *t);
// The end-of-text id (<|endoftext|>, </s>, ...), -1 when the tokenizer has none.
int tok_eot(const gdn_tokenizer *t);
// The id of a special token written as text ("<|endoftext|>"), -1 if none.
int tok_special_id(const gdn_tokenizer *t, const char *text);

// A growable id buffer; tok_encode appends to it.
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} tok_ids;
void tok_ids_free(tok_ids *v);

// Encode len bytes (any bytes: invalid UTF-8 included) and append the ids to out. `specials`:
// special tokens written in the text become their ids (as the `tokenizers` package does with
// its added tokens); false: they are encoded as ordinary text. False + message on failure.
bool tok_encode(const gdn_tokenizer *t, const char *text, size_t len, bool specials,
                tok_ids *out, char *err, size_t errlen);
// The post-processor's single-sequence template: the ids the `tokenizers` package puts before
// and after a text when it encodes with add_special_tokens = True (a tokenizer.json's
// "post_processor": Llama 3's TemplateProcessing gives prefix <|begin_of_text|>, BertProcessing
// [CLS] / [SEP]). Owned by t. Empty for bytes, SentencePiece and a file without one.
typedef struct {
    const uint32_t *prefix, *suffix;
    size_t n_prefix, n_suffix;
} tok_template;
tok_template tok_get_template(const gdn_tokenizer *t);
// One text with the template: prefix ++ tok_encode(text) ++ suffix, the ids of the package's
// encode(text, add_special_tokens = True) (`specials` as for tok_encode). tok_encode is the
// add_special_tokens = False form.
bool tok_encode_template(const gdn_tokenizer *t, const char *text, size_t len, bool specials,
                         tok_ids *out, char *err, size_t errlen);
// Decode ids to malloc'd bytes (*text, *len; NUL-terminated as well). An id >= vocab is an
// error naming it.
bool tok_decode(const gdn_tokenizer *t, const uint32_t *ids, size_t n, char **text, size_t *len,
                char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
