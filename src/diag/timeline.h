// timeline.h — where a training step's time goes on each stream (gdn-train --timeline N): spans
// (stream, name, start, end) of the forward, the backward of each gradient range the model hands
// to its gradient hook, each bucket's all-reduce, the wait for the sums and the update, written
// per rank as CSV rows
//     step,rank,stream,name,start_ms,end_ms
// with times in ms from the step's start (step 1-based, as the progress line counts). The point
// is to see the all-reduce overlap the backward; tools/plot-timeline draws the rows.
//
// Two rows: compute (the thread / stream running the ops) and comm (the collectives). Compute
// spans are contiguous: each timeline_compute ends the current span at a point and starts the
// next one there.
//
// Clocks. Host (the CPU backend, MPI): the monotonic clock read at each point; a collective
// blocks the calling thread, so its comm span is also a stall of the compute row
// (timeline_compute_blocked). Device (the GPU backend): CUDA events (timeline_clock below);
// compute points are recorded on the legacy default stream (the backend's compute stream),
// comm points by the communicator on its own stream around each collective
// (dist_time_next_async). Times are read with cudaEventElapsedTime only when the events are
// known complete, without adding a sync inside a step: timeline_collect writes the steps before
// the current one right after a host sync of the current one (stream order: every earlier event
// precedes it), timeline_free waits for the rest.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>

typedef enum { TIMELINE_COMPUTE, TIMELINE_COMM } timeline_stream;

// The device clock: opaque cudaEvent_t handles (timeline_cuda.cu; CUDA builds only). Every call
// checks its CUDA return code and ends the program with the call and CUDA's message on failure.
typedef struct {
    void *(*create)(void);                       // an event with timing enabled
    void (*destroy)(void *ev);
    void (*record)(void *ev);                    // on the legacy default stream
    void (*wait)(void *ev);                      // the host waits until ev has completed
    double (*elapsed_ms)(void *from, void *to);  // both completed
} timeline_clock;
const timeline_clock *timeline_cuda_clock(void);
// The device clock in a program built with CUDA (GDN_HAVE_CUDA, a public definition of the
// gdn_cuda target), NULL (no device clock) in one built without.
static inline const timeline_clock *timeline_device_clock(void) {
#ifdef GDN_HAVE_CUDA
    return timeline_cuda_clock();
#else
    return NULL;
#endif
}

typedef struct timeline timeline;

// gdn-train --timeline n: the steps [*first, *first + *count) (1-based) to record when `done`
// steps are done and the run ends after step `end` (train.steps, --stop-after or the end of
// --profile): after 2 warm-up steps (the first steps also pay for lazy allocations and plans),
// fewer when the run is too short for that, all of it when shorter than n. *count < 1: no step
// is left to record.
void timeline_window(long n, long done, long end, long *first, long *count);

// Record steps [first, first + count) (1-based) of this rank into path (created now, header
// written; an error ends the program naming the path). clk NULL: the host clock.
timeline *timeline_create(const char *path, int rank, long first, long count,
                          const timeline_clock *clk);
// Wait for the device, write the rows not yet written, close the file. NULL is allowed.
void timeline_free(timeline *t);

// Step `step` (1-based) begins: true (and its start point taken) when it is recorded.
bool timeline_step_begin(timeline *t, long step);
bool timeline_recording(const timeline *t);  // between a true step_begin and step_end
// Compute row: the span from the previous compute point to here, named `name` (copied).
void timeline_compute(timeline *t, const char *name);
// Host clock: the same (the thread was blocked in a collective: compute waited). Device clock:
// nothing, the collective ran on its own stream and the compute stream went on.
void timeline_compute_blocked(timeline *t, const char *name);
// Comm row, around one collective. Host clock: begin reads the clock now and *ev_begin =
// *ev_end = NULL; end reads it again. Device clock: *ev_begin, *ev_end are two events for the
// communicator to record around the collective on its stream (dist_time_next_async); end with
// recorded = false when it did not (the span is dropped). Returns the span's handle for end.
int timeline_comm_begin(timeline *t, const char *name, void **ev_begin, void **ev_end);
void timeline_comm_end(timeline *t, int span, bool recorded);
// The recorded step ends (after its last compute span).
void timeline_step_end(timeline *t);
// Write the rows of the recorded steps before the current one. Device clock: call only after a
// host sync inside the current step, or between steps (see above).
void timeline_collect(timeline *t);

#ifdef __cplusplus
}
#endif
