// timeline_cuda.cu — the device clock of timeline.h: CUDA events with timing enabled, compute
// points on the legacy default stream (the GPU backend's compute stream, backend_cuda.cu).
#include "timeline.h"
#include "../core/cuda_check.h"

static void *tl_event_create(void) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreate(&ev));  // default flags: timing on
    return (void *)ev;
}
static void tl_event_destroy(void *ev) { CUDA_CHECK(cudaEventDestroy((cudaEvent_t)ev)); }
static void tl_event_record(void *ev) { CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, 0)); }
static void tl_event_wait(void *ev) { CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev)); }
static double tl_event_ms(void *from, void *to) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to));
    return ms;
}

static const timeline_clock tl_cuda_clock = {tl_event_create, tl_event_destroy, tl_event_record,
                                             tl_event_wait, tl_event_ms};

extern "C" const timeline_clock *timeline_cuda_clock(void) { return &tl_cuda_clock; }
