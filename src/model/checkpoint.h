// checkpoint.h — one HDF5 file per checkpoint (DESIGN 6): format "gdn-checkpoint" version 3,
// the config text, every parameter and AdamW m and v in the precision it lives in (float64 on the
// CPU backend; float32 on the GPU: the fp32 master weights and moments), the loop state (with
// the bad-step skip state of train.c) and the tokenizer the data was made with. Written to a
// temporary name, flushed, fsynced, read back and verified (below), and only then renamed: a
// crash, a full disk or a damaged write never leaves a half or bad checkpoint under the real
// name, and the previous one stays intact. Before HDF5 writes anything, room for the whole file
// is reserved and released (a full disk, a quota or a file-size limit is refused there with a
// message: HDF5 cannot close a file whose writes fail, and its exit handler would crash on it).
//
// Layout (version 3):
//   root attributes  format, version, config, backend, step, tokens_seen, sampler_pos, seed,
//                    best_val, world_size, skips, skips_in_row, grad_norm_window (1-D float64,
//                    absent when empty)
//   /params/NAME, /adam_m/NAME, /adam_v/NAME   2-D (rows, cols), float32 or float64: each tensor
//                    its own HDF5 type, the precision it lived in when written
//   /tokenizer       1-D uint8, the tokenizer blob (tokenizer.h; empty for "bytes"), string
//                    attribute tokenizer_kind ("bytes" | "bpe" | "spm"); absent when the run
//                    had none to give
// Loading converts: a float32 tensor widens exactly into a float64 model (the CPU backend); a
// float64 tensor into a float32 backend rounds to nearest (as version 1 and 2 files, all float64,
// always did on the GPU). A float32 checkpoint resumes on the GPU bit for bit.
//
// Integrity (version >= 2): every tensor is a chunked dataset with HDF5's Fletcher32 checksum
// filter (chunks of at most 4 MiB), so HDF5 checks each chunk when it is read; the file is written
// in the HDF5 1.10 format (H5F_LIBVER_V110), whose metadata (superblock, object headers, chunk
// index) carries checksums too. A damaged file is refused with a message naming the file and the
// tensor. Version 1 files (contiguous datasets, no checksums) still load; they are checked like
// later ones except for the checksums they do not have. Versions 1 and 2 hold float64 only.
//
// Values checked on load and before a write is kept: parameters and AdamW m finite, AdamW v finite
// and >= 0, step >= 0, world_size >= 1, skips >= skips_in_row >= 0, every tensor 2-D float64 (or
// float32 from version 3 on).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "model.h"

enum { TRAIN_SKIP_WINDOW_MAX = 1024 };  // the most gradient norms train.skip_window keeps

typedef struct {
    long step;              // steps completed
    uint64_t tokens_seen;   // training tokens consumed (all ranks)
    uint64_t sampler_pos;   // next training step's batch number (data/dataset.h; the sampler
                            // counts micro-batches: sampler_pos x train.grad_accum)
    uint64_t seed;          // the run's seed (dropout keys and data derive from it and step)
    double best_val;        // best validation loss so far (INFINITY if none)
    int world_size;         // ranks that wrote it
    long skips;             // steps whose update was skipped (a bad gradient norm: train.c)
    long skips_in_row;      // the skipped steps since the last updated one
    int gnorm_n;            // gradient norms of the last gnorm_n updated steps, oldest first
    double gnorm[TRAIN_SKIP_WINDOW_MAX];  // (the window of train.skip_window)
    int stored_bits[3];     // set by checkpoint_load: 32 or 64, the precision the file holds
                            // the parameters, AdamW m and v in (64 for versions 1 and 2)
} train_state;

// The tokenizer a checkpoint carries (tokenizer.h's kind and blob). kind "" = none.
typedef struct {
    char kind[16];
    void *blob;             // malloc'd, n bytes (NULL when n = 0)
    size_t n;
} ckpt_tokenizer;

// Sets t to a copy of (kind, blob, n); kind "bytes" | "bpe" | "spm".
void ckpt_tokenizer_set(ckpt_tokenizer *t, const char *kind, const void *blob, size_t n);
// From a version-1 token file's attribute tokenizer: "bytes" -> kind "bytes", empty blob;
// "spm:<path>" -> kind "spm", the model file's bytes. false + err (naming the file) otherwise.
bool ckpt_tokenizer_from_spec(ckpt_tokenizer *t, const char *spec, char *err, size_t errlen);
void ckpt_tokenizer_free(ckpt_tokenizer *t);
// The tokenizer stored in a checkpoint into t (overwritten, not freed: the caller frees it with
// ckpt_tokenizer_free): true with t->kind "" when it holds none (versions 1, 2); false + err
// when /tokenizer is there but damaged or malformed.
bool checkpoint_read_tokenizer(const char *path, ckpt_tokenizer *t, char *err, size_t errlen);

// The precision, in bits (32 or 64), checkpoint_save stores group g of model m in: g = 0 the
// parameters (the master weights when the backend keeps them), 1 and 2 AdamW m and v. A backend
// class of 2 bytes (bf16) is stored as float32, a lossless widening.
int checkpoint_group_bits(const model *m, int g);

// tok: the tokenizer to store (NULL or kind "": none).
bool checkpoint_save(const char *path, const model *m, const train_state *st,
                     const ckpt_tokenizer *tok, char *err, size_t errlen);
// Loads into an already created model: every parameter must exist with the same shape. Tensors
// stored in another precision than the model's are converted (see the top); st->stored_bits says
// what the file held.
bool checkpoint_load(const char *path, model *m, train_state *st, char *err, size_t errlen);
// The config text stored in a checkpoint (malloc'd), or NULL + err.
char *checkpoint_read_config(const char *path, char *err, size_t errlen);
// Reads every tensor of a checkpoint without a model (HDF5 verifies the checksums of version 2)
// and checks the format, the loop state and the values as checkpoint_load does. *ntensors (when
// not NULL): tensors read. False + err naming the file and the first bad tensor or field.
bool checkpoint_verify(const char *path, int *ntensors, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
