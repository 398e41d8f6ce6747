// dataset.h — HDF5 token data (DESIGN 5): the version-1 token file, its reader and writer
// (dataset.c); token sets, a v1 file or a shard index, and weighted mixes of them (tokset.c); the
// seeded batch sampler, windows or packed documents, with a prefetch thread (sampler.c).
//
// Version-1 file: root attributes format = "gdn-tokens" (string), version = 1 (int), vocab_size (int),
// tokenizer ("bytes" or "spm:<model file>") (string), eot_token (int, -1 = none); 1-D datasets
// /train and /val of uint16 (uint32 when vocab_size > 65536), chunked for random reads, with
// HDF5's Fletcher32 checksum on each chunk, in the HDF5 1.10 file format (checksummed metadata).
// Files without the checksums (written before them) are read the same way.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include "shards.h"

enum { DATA_SPLIT_TRAIN = 0, DATA_SPLIT_VAL = 1 };

typedef struct {
    char path[512];
    int64_t file;            // hid_t of the open file
    int64_t dset[2];         // hid_t of /train, /val
    int vocab_size;
    char tokenizer[512];
    int eot_token;
    uint64_t n_tokens[2];    // lengths of /train, /val
} token_file;

// Open and validate: the file exists and is HDF5, format/version attributes match, vocab_size
// is sane, both datasets are 1-D unsigned integers of the right width and every token < vocab.
// On failure writes a message naming the file and the field into err and returns false.
bool tokfile_open(token_file *f, const char *path, char *err, size_t errlen);
void tokfile_close(token_file *f);
// Read tokens [start, start + n) of a split (checked bounds) into out.
void tokfile_read(token_file *f, int split, uint64_t start, size_t n, int32_t *out);

// Write a complete file atomically (temporary name, flush, rename). False + message on error
// (e.g. disk full), with nothing left under `path`.
bool tokfile_write(const char *path, int vocab_size, const char *tokenizer, int eot_token,
                   const uint32_t *train, size_t n_train, const uint32_t *val, size_t n_val,
                   char *err, size_t errlen);

// ---- token sets ---------------------------------------------------------------------------
// A token set is what data.path names: a version-1 file (above), or a directory of shards written
// by gdn-prepare with its index.json (or the index.json itself). Shard file: root attributes
// format = "gdn-tokens", version = 2, split = "train" | "val", vocab_size, eot_token (-1 none),
// tokenizer_kind ("bytes" | "bpe" | "spm"), shard (index within its split), specials ("template"
// | "none"; absent: "none"); /tokens (1-D uint16, uint32 when vocab_size > 65536), /doc_offsets
// (1-D uint64, n_docs + 1 entries: document i is tokens [doc_offsets[i], doc_offsets[i+1])),
// /tokenizer (1-D uint8, the tokenizer blob).
// index.json: {"format": "gdn-token-index", "version": 1, "vocab_size", "eot_token",
// "tokenizer_kind", "specials", "doc_prefix", "doc_suffix", "tokenizer_file", "shards": [{"path",
// "split", "tokens", "documents"}, ...], "totals": {...}}; shard paths are relative to the
// index's directory; doc_prefix / doc_suffix are the ids around every document (shards.h's
// shard_frame). A split of a set is the concatenation of its shards in index order (token
// offsets run on across shards).
typedef struct {
    char path[1024];          // the shard file
    int64_t file, tokens;     // hid_t of the file and of /tokens
    uint64_t start;           // offset of its first token in the split's concatenation
    uint64_t n_tokens;
} token_shard;

typedef struct {
    char path[1024];          // what data.path (or a data.mix entry) named
    char index[1200];         // the file that defines the set: the v1 file or the index.json
    bool sharded;             // false: a v1 file (v1 below)
    token_file v1;
    int vocab_size, eot_token;
    char tokenizer_kind[16];  // "bytes" | "bpe" | "spm"
    char tokenizer[512];      // v1: its tokenizer attribute ("bytes", "spm:<model>"); shards: the kind
    char specials[16];        // shards: the index's specials ("none" for v1 files)
    shard_frame frame;        // shards: the ids around every document (empty for v1 files)
    uint8_t *tokenizer_blob;  // shards: the first shard's /tokenizer (NULL for v1 files and empty blobs)
    size_t tokenizer_blob_len;
    uint64_t n_tokens[2];     // per split
    uint64_t n_docs[2];       // per split; 0 for a v1 file (it has no document offsets)
    uint64_t *doc_offsets[2]; // (n_docs + 1) per split, offsets in the split's concatenation
    int n_shards[2];
    token_shard *shards[2];
} token_set;

// Open and validate a set. Shards: the index parses and names format/version 1; every shard
// exists, its attributes agree with the index (vocab_size, eot_token, tokenizer_kind, split,
// shard number, specials), its /tokens and /doc_offsets have the index's lengths and consistent
// offsets.
// Tokens are checked < vocab_size as they are read (a v1 file checks them all at open). False +
// a message naming the file (index.json or the shard) and the field on failure.
bool tokset_open(token_set *s, const char *path, char *err, size_t errlen);
void tokset_close(token_set *s);
// Tokens [start, start + n) of a split's concatenation (across shards). Dies with a message
// naming the shard when a file fails to read or holds a token >= vocab_size.
void tokset_read(const token_set *s, int split, uint64_t start, size_t n, int32_t *out);

// What the sampler reads: one set (n = 1, weight 1), or data.mix's weighted sets.
#define DATA_MIX_MAX 16
typedef struct {
    int n;
    token_set *set;           // (n)
    double weight[DATA_MIX_MAX];  // normalised: sum 1
} data_source;

// mix = "" (data.path alone) or "PATH:WEIGHT, PATH:WEIGHT, ..." (weights > 0, normalised here;
// the last ':' of an entry separates its weight). Every set of a mix has the same vocab_size,
// eot_token and tokenizer (kind and blob) as the first, and every shard set the same document
// frame (doc_prefix, doc_suffix). False + message naming the file.
bool data_source_open(data_source *d, const char *path, const char *mix, char *err, size_t errlen);
void data_source_close(data_source *d);

// ---- batch sampler ------------------------------------------------------------------------
// Step s (0, 1, 2, ...) of the whole job is G = n_mb * world * B rows of T + 1 tokens; global
// row j of step s is a pure function of (seed, split, s, j); micro-batch m of rank r takes rows
// [(m world + r) B, (m world + r + 1) B). So the rows of a step do not depend on how they are
// split: 2 ranks with B/2 each, or 1 rank with 2 micro-batches of B/2 (train.grad_accum), see
// exactly the rows that 1 rank with B sees. `pos` counts the micro-batches handed out (step
// pos / n_mb, micro-batch pos % n_mb): the position to checkpoint.
// x[b*T + t] = row_b[t], y[b*T + t] = row_b[t + 1].
//
// windows (data.sampling = windows): row j is the tokens at a start uniform in [0, n - (T+1)] of
// the split's n tokens (Philox at (seed, split, s), counter block j << 32), read across shards.
// documents: the split's documents in a seeded order (a permutation per epoch, a pure function
// of seed, split and epoch), concatenated into one stream over the epochs; global row R = s G + j
// is stream tokens [R T, R T + T + 1); a document longer than the rest of its row continues in
// the next row. doc_start[b*T + t] = the index within row b of the first token of the document
// that token t belongs to (0 when that document began before the row); the document's first
// token is the first id of its frame (the eot, or the template's BOS: shards.h's shard_frame).
// mix (data_source.n > 1): global row number R = s G + j goes to set k by a deterministic
// interleave (set 0 takes R iff floor((R+1) w0) > floor(R w0), the others share the rest the
// same way, with integer weights); the set's own row count before R is its row in its stream
// (documents), or the row draws a window of that set at (seed, split, s, j) (windows).
typedef struct {
    const data_source *src;
    int split;                // DATA_SPLIT_TRAIN | DATA_SPLIT_VAL
    bool documents;           // data.sampling = documents (else windows)
    int B, T;
    uint64_t seed;
    int rank, world, n_mb;
    uint64_t pos;             // the first micro-batch to hand out
    bool prefetch;            // fill the next batch on a thread while the step runs
} sampler_params;

typedef struct doc_epoch doc_epoch;  // sampler.c: one epoch's document order, cached

typedef struct {
    const data_source *src;
    int split, B, T, rank, world, n_mb;
    bool documents;          // rows are packed documents; sampler_next fills doc_start
    uint64_t seed;
    uint64_t pos;            // next micro-batch number to hand out (checkpointed)
    uint64_t tiled;          // 0: seeded rows; else W, the whole-split tiling (sampler_tile_split)
    uint64_t mix_mass[DATA_MIX_MAX];  // integer weights of the interleave (sum 2^32)
    doc_epoch *epochs;       // documents: 2 cached epochs per set
    int32_t *row;            // (T + 1) one row being assembled
    // prefetch: a background thread fills the next batch while the step runs
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool running, ready, stop;
    uint64_t ready_pos;
    int32_t *buf_x, *buf_y, *buf_doc;  // (B*T) each, the prefetched batch
} batch_sampler;

// Fails (message + false) when a split is shorter than one row of T + 1 tokens, or documents
// sampling is asked of a v1 file (it has no document offsets).
bool sampler_init(batch_sampler *s, const sampler_params *p, char *err, size_t errlen);
// A sampler with prefetch must not be copied or moved after sampler_init (its thread holds
// its address). Setting s->pos by hand is safe: a prefetched batch of another pos is discarded.
// Batch `pos`, then pos++. doc_start (B*T) may be NULL; it is written only when s->documents.
void sampler_next(batch_sampler *s, int32_t *x, int32_t *y, int32_t *doc_start);
void sampler_free(batch_sampler *s);
// The whole split instead of seeded rows (train.eval_batches = 0; one set, not a mix): the W =
// eval_full_windows(n, T, G) evenly spaced rows of eval_full_start, G = n_mb x world x B per
// step, split over micro-batches and ranks as above (documents: offsets in epoch 0's stream).
// Call right after sampler_init, on a sampler without prefetch. Returns the number of steps
// that cover the split, W / G.
uint64_t sampler_tile_split(batch_sampler *s);

// Whole-split evaluation (train.eval_batches = 0): n_windows(n, T, G) = ceil((n - 1) / T)
// windows of T + 1 tokens, rounded up to a multiple of G (the windows of one global batch);
// window j of W starts at floor(j (n - T - 1) / (W - 1)) (0 when W == 1): evenly spaced from
// the first token to the last, at most T apart, so every token after the first is a target
// at least once. Needs n >= T + 1, T >= 1, G >= 1.
uint64_t eval_full_windows(uint64_t n, uint64_t T, uint64_t G);
uint64_t eval_full_start(uint64_t j, uint64_t W, uint64_t n, uint64_t T);

#ifdef __cplusplus
}
#endif
