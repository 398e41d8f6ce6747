// dataset.h — HDF5 token datasets (DESIGN 5): the file format, its reader and writer, and the
// seeded batch sampler with a prefetch thread.
//
// File: root attributes format = "gdn-tokens" (string), version = 1 (int), vocab_size (int),
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

// Batch sampler. Step s (0, 1, 2, ...) of the whole job is n_mb * world * B windows of T + 1
// tokens whose starts are a pure function of (seed, split, s, j) (counter-based RNG); micro-batch
// m of rank r takes windows [(m world + r) B, (m world + r + 1) B). So the windows of a step do
// not depend on how they are split: 2 ranks with B/2 each, or 1 rank with 2 micro-batches of
// B/2 (train.grad_accum), see exactly the windows that 1 rank with B sees. `pos` counts the
// micro-batches handed out (step pos / n_mb, micro-batch pos % n_mb): the position to checkpoint.
// x[b*T + t] = tokens[start_b + t], y[b*T + t] = tokens[start_b + t + 1].
typedef struct {
    token_file *f;
    int split, B, T, rank, world, n_mb;
    uint64_t seed;
    uint64_t pos;            // next micro-batch number to hand out (checkpointed)
    uint64_t tiled;          // 0: random windows; else W, the whole-split tiling (sampler_tile_split)
    // prefetch: a background thread fills the next batch while the step runs
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool running, ready, stop;
    uint64_t ready_pos;
    int32_t *buf_x, *buf_y;  // (B*T) each, the prefetched batch
} batch_sampler;

// Fails (message + false) when the split is shorter than one window of T + 1 tokens.
bool sampler_init(batch_sampler *s, token_file *f, int split, int B, int T, uint64_t seed,
                  int rank, int world, int n_mb, uint64_t pos, bool prefetch, char *err,
                  size_t errlen);
// A sampler with prefetch must not be copied or moved after sampler_init (its thread holds
// its address). Setting s->pos by hand is safe: a prefetched batch of another pos is discarded.
void sampler_next(batch_sampler *s, int32_t *x, int32_t *y);   // batch `pos`, then pos++
void sampler_free(batch_sampler *s);
// The whole split instead of random windows (train.eval_batches = 0): the W =
// eval_full_windows(n, T, G) evenly spaced windows of eval_full_start, G = n_mb x world x B
// per step, split over micro-batches and ranks as above. Call right after sampler_init, on a
// sampler without prefetch. Returns the number of steps that cover the split, W / G.
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
