// shards.h — token shards (docs/data.md, SPEC "Token shards"): the shard writer gdn-prepare
// streams documents into, the index.json writer and reader, the train/val rule, and a whole-shard
// reader for tests and tools (the trainer reads shards on demand through dataset.h).
//
// Shard file (HDF5 1.10 format, Fletcher32 on every chunk): root attributes format =
// "gdn-tokens", version = 2, split = "train" | "val", vocab_size, eot_token (-1 none),
// tokenizer_kind ("bytes" | "bpe" | "spm"), shard (index within its split); datasets /tokens
// (1-D uint16, uint32 when vocab_size > 65536), /doc_offsets (1-D uint64, n_docs + 1 entries:
// document i = tokens[doc_offsets[i], doc_offsets[i+1]), first 0, last the token count) and
// /tokenizer (1-D uint8, the tokenizer blob, empty for bytes), and the attribute specials =
// "template" | "none" (gdn-prepare --specials; absent in older shards: "none"). A document is
// stored framed (shard_frame below): [eot] + its tokens, or with a template that adds ids,
// template prefix + its tokens + template suffix + [eot].
// index.json: {"format": "gdn-token-index", "version": 1, "vocab_size", "eot_token",
// "tokenizer_kind", "specials", "doc_prefix", "doc_suffix" (the frame's ids; the three absent in
// older indexes: "none", [eot], []), "tokenizer_file" (absent for bytes), "shards": [{"path",
// "split", "tokens", "documents"}, ...] (paths relative to the index's directory; train shards,
// then val shards, each in order), "totals": {"train": {"tokens", "documents"}, "val": {...}}}.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHARD_FORMAT "gdn-tokens"
#define SHARD_VERSION 2
#define SHARD_INDEX_FORMAT "gdn-token-index"
#define SHARD_INDEX_VERSION 1
#define SHARD_INDEX_NAME "index.json"

enum { SHARD_SPLIT_TRAIN = 0, SHARD_SPLIT_VAL = 1 };
extern const char *const shard_split_name[2];  // "train", "val"

// The train/val rule: document number `ordinal` (0-based, in input order) goes to val iff
// rng_uniform_at(seed, ordinal) < val_fraction (Philox; a pure function of seed and ordinal).
bool shard_doc_is_val(uint64_t seed, uint64_t ordinal, double val_fraction);

// ---- document frames ---------------------------------------------------------------------------

// The ids around every document of a token set: document i = prefix + its text's ids + suffix,
// tokens [doc_offsets[i], doc_offsets[i+1]). gdn-prepare's rule (docs/data.md): with a template
// that adds ids (the tokenizer's post-processor, tok_get_template, under --specials template),
// template prefix + text + template suffix + [eot]; else [eot] + text. [eot] only when the
// tokenizer has an eot id. So a document starts at its first frame id (the template's BOS, or
// the eot, llm.c's convention), and the eot stands between documents either way.
typedef struct {
    uint32_t *prefix, *suffix;     // malloc'd (NULL when empty)
    size_t n_prefix, n_suffix;
} shard_frame;

#define SHARD_SPECIALS_TEMPLATE "template"
#define SHARD_SPECIALS_NONE "none"

void shard_frame_make(shard_frame *f, int eot, const uint32_t *tpl_prefix, size_t n_tpl_prefix,
                      const uint32_t *tpl_suffix, size_t n_tpl_suffix);
void shard_frame_free(shard_frame *f);
bool shard_frame_equal(const shard_frame *a, const shard_frame *b);
// "[128000] text [128001]" (ids of the frame around "text") into out.
void shard_frame_describe(const shard_frame *f, char *out, size_t outlen);

typedef struct {
    char path[64];           // file name, relative to the index's directory: "train-000000.h5"
    int split;               // SHARD_SPLIT_*
    uint64_t tokens, documents;
} shard_entry;

// ---- writer: one split's shards, documents appended in order -----------------------------------

typedef struct {
    const char *dir;         // where the shards go (must exist)
    int split;               // SHARD_SPLIT_*
    int vocab_size;          // [2, 2^24]
    int eot_token;           // -1: none
    const char *tokenizer_kind;
    const void *blob;        // the tokenizer blob stored in every shard (may be NULL, 0)
    size_t blob_len;
    uint64_t shard_tokens;   // a shard closes at the first document end at or past this size
    const char *specials;    // the attribute specials: SHARD_SPECIALS_* (NULL: "none")
    const shard_frame *frame;  // the ids written around each document (NULL: none)
} shard_writer_config;

typedef struct shard_writer shard_writer;

// Nothing is created until the first document. The config's strings and blob must outlive w.
shard_writer *shard_writer_open(const shard_writer_config *cfg);
// A document: doc_begin (opens a shard when none is open; writes the frame's prefix), append
// its ids any number of times, then doc_end (writes the frame's suffix; may close the shard), or
// doc_abort (drops the document's tokens, written or not). Each writes a shard as NAME.tmp and
// renames it to NAME when it closes. False + message (naming the file) on failure, e.g. disk
// full or an id >= vocab_size.
bool shard_writer_doc_begin(shard_writer *w, char *err, size_t errlen);
bool shard_writer_append(shard_writer *w, const uint32_t *ids, size_t n, char *err,
                         size_t errlen);
bool shard_writer_doc_end(shard_writer *w, char *err, size_t errlen);
bool shard_writer_doc_abort(shard_writer *w, char *err, size_t errlen);
// Closes the open shard (one with no documents is removed).
bool shard_writer_finish(shard_writer *w, char *err, size_t errlen);
// The closed shards, in order.
int shard_writer_n_shards(const shard_writer *w);
const shard_entry *shard_writer_shard(const shard_writer *w, int i);
// Removes the open shard's temporary file, if any (a failed run), and frees w.
void shard_writer_free(shard_writer *w);
// Host memory one writer holds (its buffers), for the memory bound.
size_t shard_writer_memory(void);

// ---- index.json ----------------------------------------------------------------------------

typedef struct {
    int vocab_size, eot_token;
    char tokenizer_kind[8];
    char specials[16];        // SHARD_SPECIALS_* ("" is written as "none")
    shard_frame frame;        // read: owned (shard_index_free); written: the caller's
    char tokenizer_file[64];  // "" when there is none (bytes)
    int n_shards;
    shard_entry *shards;
    uint64_t tokens[2], documents[2];  // totals per split
} shard_index;

// Writes dir/index.json atomically (temporary file, fsync, rename, fsync of dir); the totals
// are computed from the shards.
bool shard_index_write(const char *dir, const shard_index *ix, char *err, size_t errlen);
// Reads and checks an index (path: the index.json or its directory): format, version, every
// field's type and range, shard paths (relative, no ".."), no tokens without documents, and the
// totals, when present (gdn-prepare always writes them), equal to the shards' sums. The one
// index.json reader: gdn-prepare and the data reader (tokset.c) both use it. dir_out receives
// the directory that shard paths are relative to. False + message naming the file and the key.
bool shard_index_read(const char *path, shard_index *ix, char *dir_out, size_t dir_len,
                      char *err, size_t errlen);
void shard_index_free(shard_index *ix);

// ---- a whole shard in memory (tests, tools) --------------------------------------------------

typedef struct {
    int split, vocab_size, eot_token, shard;
    char tokenizer_kind[8];
    char specials[16];       // the attribute specials ("none" when absent)
    uint32_t *tokens;
    uint64_t n_tokens;
    uint64_t *doc_offsets;   // n_docs + 1
    uint64_t n_docs;
    uint8_t *blob;
    size_t blob_len;
} shard_data;

// Reads and checks a shard file: attributes, offsets (0 first, non-decreasing, last = token
// count), every id < vocab_size. False + message naming the file and the field.
bool shard_read(const char *path, shard_data *d, char *err, size_t errlen);
void shard_data_free(shard_data *d);
