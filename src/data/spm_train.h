// spm_train.h — train a SentencePiece model in-process: a C shim over libsentencepiece_train's
// SentencePieceTrainer (docs/tokenizers.md).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>

// Trains a SentencePiece BPE of vocab_size pieces on text[0, len), one sentence a line (the
// text is cut at "\n", empty lines are left out, as spm_train reads a file), with the identity
// normaliser and whitespace kept (decode(encode(x)) == x), character coverage 1.0, on `threads`
// threads, and writes the .model to out_path (a temporary name beside it, then renamed: nothing
// is left behind on failure). False + the library's message (e.g. "Vocabulary size too high")
// on failure.
bool spm_train_model(const char *text, size_t len, int vocab_size, int threads,
                     const char *out_path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
