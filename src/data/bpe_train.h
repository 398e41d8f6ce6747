// bpe_train.h — learn a byte-level BPE (GPT-2 family) from text, in bounded memory, and write
// it as a Hugging Face tokenizer.json (docs/tokenizers.md, "Training a BPE").
//
// Use: bpe_train_new -> bpe_train_add (documents, from any number of threads) or
// bpe_train_add_word (pre-split words with counts) -> bpe_train_finish (merges, then the file)
// -> bpe_train_free.
//
// Counting: each document is split at the special tokens written in it, each piece into
// pre-tokens ("words") by BPE_GPT2_PATTERN (PCRE2, UTF + UCP; bytes the pattern cannot match,
// i.e. invalid UTF-8, form words of their own), and each word's count goes into one hash table.
// That table is held under opts.mem_cap bytes: when a word would take it over, the rarest words
// are dropped (every word of count 1, then of count <= 2, ... up to the smallest threshold that
// brings the words' bytes to half of what the cap leaves beside the slot array), and the pruning
// is counted in bpe_train_stats. Without pruning the result does not depend on how documents
// are split across calls or threads; with it, it depends on the order they arrive in.
//
// Merging: tokens 0..255 are the bytes (id = byte value); each merge takes the adjacent pair
// with the highest count over all words (weighted by word counts), ties going to the smallest
// left id, then the smallest right id; the merged token gets the next id unless its bytes are
// already a token (then the merge is recorded and reuses that id). Merging stops when the
// vocabulary (bytes + merged tokens + specials) reaches vocab_size or no pair is left. The
// specials take the last ids.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The GPT-2 pre-tokenizer pattern, as the `tokenizers` ByteLevel pre-tokenizer uses it
// (use_regex = true). Compiled with PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF.
#define BPE_GPT2_PATTERN \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

// Words longer than this many bytes are not counted (bpe_train_stats.long_words counts them).
#define BPE_TRAIN_MAX_WORD 1024
// The smallest mem_cap accepted.
#define BPE_TRAIN_MIN_CAP ((size_t)1 << 20)

typedef struct bpe_trainer bpe_trainer;

typedef struct {
    size_t mem_cap;                // bytes for the word table; 0 = 1 GiB
    const char *const *specials;   // special tokens, e.g. "<|endoftext|>" (UTF-8, non-empty)
    int n_specials;
    bool progress;                 // a progress line on stderr while merging, pruning notes
} bpe_train_opts;

typedef struct {
    uint64_t words;         // pre-tokens counted (occurrences)
    uint64_t distinct;      // distinct words in the table now
    uint64_t long_words;    // pre-tokens longer than BPE_TRAIN_MAX_WORD, not counted
    uint64_t prunes;        // times the table was pruned
    uint64_t pruned_words;  // distinct words dropped by pruning
    uint64_t pruned_count;  // their occurrences
    uint64_t prune_max_threshold;  // the largest count threshold a pruning used
    size_t table_bytes;     // bytes the word table holds now
    size_t table_peak;      // the most it ever held (slot arrays while growing included)
    int merges;             // after finish: merges learned
    int vocab_size;         // after finish: tokens written (bytes + merged + specials)
    double merge_seconds;   // after finish: time spent merging
} bpe_train_stats;

// NULL + message on bad options (cap below BPE_TRAIN_MIN_CAP, empty or invalid-UTF-8 special).
bpe_trainer *bpe_train_new(const bpe_train_opts *opts, char *err, size_t errlen);
void bpe_train_free(bpe_trainer *tr);

// Count the words of one document (any bytes). Thread-safe: many threads may add at once.
// False + message only on a PCRE2 matching failure.
bool bpe_train_add(bpe_trainer *tr, const char *text, size_t len, char *err, size_t errlen);
// Count `count` occurrences of one already pre-tokenized word. Thread-safe.
void bpe_train_add_word(bpe_trainer *tr, const char *word, size_t len, uint64_t count);

// Learn merges until the vocabulary has vocab_size tokens (bytes + merges + specials), then write
// the tokenizer.json to out_path (a temporary name in the same directory, then renamed; nothing
// is left behind on failure). The counted words are consumed: call once. False + message when
// vocab_size < 256 + n_specials, on an I/O error, or when a special equals a learned token.
bool bpe_train_finish(bpe_trainer *tr, int vocab_size, const char *out_path, char *err,
                      size_t errlen);

void bpe_train_get_stats(bpe_trainer *tr, bpe_train_stats *out);

// Split text into the pre-tokens the trainer counts (specials are not split out here), calling
// fn for each in order; the words concatenate to the text. Thread-safe. False on a PCRE2 error.
bool bpe_train_split(bpe_trainer *tr, const char *text, size_t len,
                     void (*fn)(const char *word, size_t n, void *ctx), void *ctx, char *err,
                     size_t errlen);
