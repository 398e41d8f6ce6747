// checkpoint.h — one HDF5 file per checkpoint (DESIGN 6): format "gdn-checkpoint" version 1,
// the config text, every parameter (float64: the CPU master, or the GPU's fp32 master widened
// losslessly), AdamW m and v, and the loop state. Written to a temporary name, flushed, fsynced
// and renamed: a crash or a full disk never leaves a half checkpoint under the real name, and
// the previous checkpoint stays intact.
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

#ifdef __cplusplus
}
#endif
