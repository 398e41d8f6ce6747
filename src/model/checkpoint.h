// checkpoint.h — one HDF5 file per checkpoint (DESIGN 6): format "gdn-checkpoint" version 2,
// the config text, every parameter (float64: the CPU master, or the GPU's fp32 master widened
// losslessly), AdamW m and v, and the loop state. Written to a temporary name, flushed, fsynced,
// read back and verified (below), and only then renamed: a crash, a full disk or a damaged write
// never leaves a half or bad checkpoint under the real name, and the previous one stays intact.
// Before HDF5 writes anything, room for the whole file is reserved and released (a full disk,
// a quota or a file-size limit is refused there with a message: HDF5 cannot close a file whose
// writes fail, and its exit handler would crash on it).
//
// Integrity (version 2): every tensor is a chunked dataset with HDF5's Fletcher32 checksum filter
// (chunks of at most 4 MiB), so HDF5 checks each chunk when it is read; the file is written in the
// HDF5 1.10 format (H5F_LIBVER_V110), whose metadata (superblock, object headers, chunk index)
// carries checksums too. A damaged file is refused with a message naming the file and the tensor.
// Version 1 files (contiguous datasets, no checksums) still load; they are checked like version 2
// ones except for the checksums they do not have.
//
// Values checked on load and before a write is kept: parameters and AdamW m finite, AdamW v finite
// and >= 0, step >= 0, world_size >= 1, every tensor 2-D float64.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "model.h"

typedef struct {
    long step;              // steps completed
    uint64_t tokens_seen;   // training tokens consumed (all ranks)
    uint64_t sampler_pos;   // next training step's batch number (data/dataset.h; the sampler
                            // counts micro-batches: sampler_pos x train.grad_accum)
    uint64_t seed;          // the run's seed (dropout keys and data derive from it and step)
    double best_val;        // best validation loss so far (INFINITY if none)
    int world_size;         // ranks that wrote it
} train_state;

bool checkpoint_save(const char *path, const model *m, const train_state *st, char *err,
                     size_t errlen);
// Loads into an already created model: every parameter must exist with the same shape.
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
