// grad_sync.h — a data-parallel step's gradient sums, in buckets overlapped with the backward
// (DESIGN 8), and the timeline spans of the step's forward and backward (gdn-train --timeline).
//
// The model hands over final gradient ranges during the backward of the last micro-batch
// (model_grad_hook, model.h: lm_head, norm_f, layers L-1..0, embedding). Consecutive ranges that
// touch (each new one ends where the pending bucket starts, or starts where it ends) are
// coalesced into one bucket; a bucket of >= bucket_mb, or a range that does not touch it, sends
// it. A send sums its elements over the ranks in pieces of at most bucket_mb: CPU float64
// gradients with the blocking MPI all-reduce; GPU fp32 gradients (device memory) with an NCCL
// all-reduce enqueued on the communicator's stream behind the kernels enqueued so far on the
// compute stream (the legacy default stream), so it runs while the backward of the earlier
// layers goes on. grad_sync_step_end sends what is pending and makes the compute stream wait for
// the sums before the gradient norm reads them.
//
// Each element is summed once, as one element of some piece, so the result does not depend on
// the bucketing: on 2 ranks (a + b, commutative) it is the same bits as one all-reduce after the
// backward (overlap = false: the whole arena handed over once, after the backward).
//
// ZeRO-1 (shard > 0): a piece is not all-reduced but summed to the rank whose shard holds it
// (split at shard boundaries: one reduce per owner), so after the wait each rank holds the sums
// of its own shard in the gradient arena (the rest of its arena is its local gradient) and no
// reduce-scatter is needed after the backward: only the all-gather of the weights (zero1.h).
//
// Use, per step of n_mb micro-batches:
//     for (mb = 0; mb < n_mb; mb++) {
//         grad_sync_microbatch(g, m, mb);    // arms the hook on the last micro-batch
//         model_forward_backward(m, ...);
//         grad_sync_microbatch_end(g, m);
//     }
//     grad_sync_step_end(g, m);              // the sums are there (in stream order on a GPU)
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "../diag/timeline.h"
#include "../model/model.h"
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    dist *d;
    bool sum;             // sum the gradients over the ranks (false: only the timeline spans)
    bool overlap;         // sum from the gradient hook, during the backward
    size_t shard;         // ZeRO-1: elements per rank's shard (dist_shard_capacity / world); 0: off
    size_t bucket;        // elements per sum, >= 1
    size_t lo, hi;        // pending bucket [lo, hi); empty when lo == hi
    size_t covered;       // elements handed over this step; n_elems at the step's end
    long sends;           // sums issued so far
    int mb, n_mb;         // the micro-batch in flight, of n_mb per step
    timeline *tl;         // --timeline (NULL: none): compute spans, a comm span per sum, the wait
} grad_sync;

// Set up the sums for model m and install the model's hooks (m->grad_hook when overlapping or
// recording a timeline, m->fwd_hook when recording; m->grad_hook_ctx = the grad_sync).
//   sum:       sum over d's ranks (false: nothing is summed; the hooks only record tl's spans)
//   overlap:   with sum, send buckets from the gradient hook (false: one pass after the backward)
//   shard:     ZeRO-1's elements per shard (reduce each piece to its owner), 0 for all-reduce
//   bucket_mb: > 0, MiB per sum (elements of the backend's gradient class)
//   n_mb:      micro-batches per step (>= 1)
//   tl:        the timeline to record on, or NULL; owned by the caller
// Free with grad_sync_free (which leaves m's hooks as they are: free the model too).
grad_sync *grad_sync_create(dist *d, model *m, bool sum, bool overlap, size_t shard,
                            double bucket_mb, int n_mb, timeline *tl);
void grad_sync_free(grad_sync *g);

// Micro-batch mb (0-based) is next: the gradient hook is armed for the last one only (earlier
// ones would hand over partial sums).
void grad_sync_microbatch(grad_sync *g, model *m, int mb);
// Its forward and backward are done: on a recorded step an unarmed backward is one compute span
// ("backward", or "backward mb K" with n_mb > 1).
void grad_sync_microbatch_end(grad_sync *g, model *m);
// After the last micro-batch: disarm the hook; with sum, send what is pending (without overlap:
// the whole arena), check that every element was handed over once, and make the compute stream
// wait for the sums (NCCL; the MPI sums are done already). The timeline's "wait" span ends here.
void grad_sync_step_end(grad_sync *g, model *m);

#ifdef __cplusplus
}
#endif
