// profile.h — where a step's time goes: a decorator around any backend (backend.h) that times
// every op, and a table of the totals (gdn-train --profile N prints it). Two clocks:
//   - sync (the default): the host's monotonic clock between two inner->sync() calls. Syncing
//     around each op serialises the GPU: overlap between ops disappears and each op also
//     carries its launch latency, so the per-op times are what the op costs alone; the sum is an
//     upper bound of the ops' share of a normal step.
//   - events (profile_use_clock; gdn-train --profile N --profile-events): two device events
//     (CUDA events on the compute stream) around each op and no sync, so the step runs as
//     unprofiled and each op's time is its device time inside it; the table adds the time
//     between ops (the device idle, or running work queued outside the ops).
//
// State is process-wide (static in profile.c): one profiled backend per process. Calling
// backend_profiled again with the same inner backend returns the same decorator; with another
// one it is an error. Not thread-safe: ops must come from one thread, as they do in a step.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdio.h>
#include "../model/backend.h"
#include "timeline.h"

// A backend whose ops (zero, add, copy, sumsq, every op, adamw, adamw_multi when inner has it)
// call inner's op between two inner->sync() and record its time and call count; linear_fwd /
// linear_bwd also record their FLOPs (2*N*in*out / 4*N*in*out). alloc/release/download/upload/
// sync pass through untimed.
// name, elem and master are inner's, so checkpoints and summaries are unchanged.
const backend *backend_profiled(const backend *inner);
// Events instead of syncs from now on (clk: a device clock, e.g. timeline_cuda_clock(); NULL:
// back to syncs). Call it between ops, not inside one.
void profile_use_clock(const timeline_clock *clk);
// Zero every counter (e.g. after the warm-up steps).
void profile_reset(void);
// Table sorted by total time: op, calls, total ms, ms per step, % of the profiled time,
// GFLOP per step and achieved GFLOP/s where known; then the sum of the ops against the
// measured mean step time step_seconds (<= 0: not known, no comparison) over `steps` steps.
void profile_print(FILE *f, double step_seconds, int steps);

#ifdef __cplusplus
}
#endif
