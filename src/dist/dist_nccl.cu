// dist_nccl.cu — the NCCL backend of the communicator (dist.h), reached by dist.c through the
// dist_nccl_ops table that dist_nccl_get_ops returns.
//   - The communicator is non-blocking (ncclConfig_t.blocking = 0): init and every call that
//     answers ncclInProgress are polled with ncclCommGetAsyncError, so a missing rank is a
//     timeout (init) or a watchdog abort (calls), never a hang without a message.
//   - Collectives on device memory are enqueued on the caller's stream; a CUDA event recorded
//     after each goes into a ring (oldest first) that the watchdog thread drains; an entry
//     older than timeout_s names the collective that never completed. Host memory (float64
//     buffers, bytes, scalars) is staged through a device scratch buffer on our own stream.
//   - Overlap (DIST_COLL_ALLREDUCE_SUM_ASYNC / DIST_COLL_WAIT_ASYNC): the all-reduce goes on our
//     own stream (non-blocking, so it runs beside the legacy default stream's kernels) behind an
//     event recorded on the caller's compute stream; the wait is the reverse, an event recorded
//     on our stream that the compute stream waits for. One event each is enough: a wait binds
//     to the record that precedes it, and each record is followed at once by its wait.
//     Host-staged calls share our stream, so they run after any pending async sum.
//   - Timeline (time_next): the next async all-reduce records the caller's two events on our
//     stream, after the wait for the compute stream and after the collective.
//   - Sharded calls are in place: reduce-scatter reads buf[0, world*c) and writes shard
//     buf[rank*c, (rank+1)*c); allgather the reverse (c = ceil(n/world), dist.h).
// Built only with NCCL (GDN_HAVE_NCCL, set by CMake when libnccl is found, and nccl.h
// reachable); otherwise the table says "built without NCCL" and dist_init refuses "nccl".
#include "dist.h"

#include <stdio.h>
#include <string.h>

#if defined(GDN_HAVE_NCCL) && defined(__has_include)
#if __has_include(<nccl.h>)
#define DIST_NCCL_BUILD 1
#endif
#endif

#ifdef DIST_NCCL_BUILD
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

static_assert(NCCL_UNIQUE_ID_BYTES == DIST_NCCL_ID_BYTES, "dist.h's id size is NCCL's");

// enqueued collectives tracked at once; a full ring waits for its oldest
#define DIST_NCCL_RING 256

static double nccl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct pending {
    cudaEvent_t ev;   // recorded on the collective's stream right after it
    const char *name;
    size_t n;
    double t0;        // when it was enqueued
};

struct dist_nccl {
    ncclComm_t comm;
    int rank, world, device;
    cudaStream_t stream;        // host-staged and async collectives
    cudaEvent_t fork_ev;        // compute stream -> our stream (async all-reduce)
    cudaEvent_t join_ev;        // our stream -> compute stream (dist_wait_async)
    cudaEvent_t tl_begin, tl_end;  // the caller's, for the next async all-reduce (or NULL)
    char *scratch;              // device staging buffer for host memory, scratch_bytes long
    size_t scratch_bytes;
    pthread_mutex_t mu;         // guards the ring (main thread pushes, watchdog pops)
    pending ring[DIST_NCCL_RING];
    int head, count;
};

// Error reporting: the failing statement and the library's words, into err; return -1.
#define FAIL(...)                                                                             \
    do {                                                                                      \
        snprintf(err, errlen, __VA_ARGS__);                                                   \
        return -1;                                                                            \
    } while (0)
#define CU_TRY(stmt)                                                                          \
    do {                                                                                      \
        cudaError_t cu_rc_ = (stmt);                                                          \
        if (cu_rc_ != cudaSuccess) FAIL("%s: %s (%s:%d)", #stmt, cudaGetErrorString(cu_rc_),   \
                                        __FILE__, __LINE__);                                  \
    } while (0)
// A non-blocking comm may answer ncclInProgress: poll until the call has been enqueued.
#define NCCL_TRY(c, stmt)                                                                     \
    do {                                                                                      \
        ncclResult_t nc_rc_ = (stmt);                                                         \
        if (nc_rc_ == ncclInProgress) nc_rc_ = nccl_wait(c);                                  \
        if (nc_rc_ != ncclSuccess)                                                            \
            FAIL("%s: %s: %s (%s:%d)", #stmt, ncclGetErrorString(nc_rc_),                     \
                 ncclGetLastError(c ? c->comm : NULL), __FILE__, __LINE__);                   \
    } while (0)

static ncclResult_t nccl_wait(dist_nccl *c) {
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress) {
        ncclResult_t rc = ncclCommGetAsyncError(c->comm, &st);
        if (rc != ncclSuccess) return rc;
        if (st == ncclInProgress) sched_yield();
    }
    return st;
}

static const char *nccl_unavailable(void) {
    static char why[256];
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        snprintf(why, sizeof why, "no usable CUDA device (cudaGetDeviceCount: %s)",
                 cudaGetErrorString(rc));
        return why;
    }
    return n > 0 ? NULL : "no CUDA device visible";
}

static int nccl_device_count(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? n : 1;
}

static int nccl_unique_id(unsigned char id[DIST_NCCL_ID_BYTES], char *err, size_t errlen) {
    ncclUniqueId uid;
    ncclResult_t rc = ncclGetUniqueId(&uid);
    if (rc != ncclSuccess)
        FAIL("ncclGetUniqueId: %s: %s. HINT: NCCL_DEBUG=INFO shows which network interface it "
             "tried", ncclGetErrorString(rc), ncclGetLastError(NULL));
    memcpy(id, uid.internal, DIST_NCCL_ID_BYTES);
    return 0;
}

// Pop the completed head entries (cudaEventQuery: only on the watchdog thread, so the main
// thread's last-error state never sees cudaErrorNotReady). Caller holds c->mu.
static int ring_drain(dist_nccl *c, char *err, size_t errlen) {
    while (c->count > 0) {
        cudaError_t rc = cudaEventQuery(c->ring[c->head].ev);
        if (rc == cudaErrorNotReady) return 0;
        if (rc != cudaSuccess)
            FAIL("collective %s: cudaEventQuery: %s", c->ring[c->head].name,
                 cudaGetErrorString(rc));
        c->head = (c->head + 1) % DIST_NCCL_RING;
        c->count--;
    }
    return 0;
}

// Record the end of a collective enqueued on stream s.
static int ring_push(dist_nccl *c, cudaStream_t s, const char *name, size_t n, char *err,
                     size_t errlen) {
    pthread_mutex_lock(&c->mu);
    while (c->count == DIST_NCCL_RING) {  // full: wait for the oldest (the watchdog times it)
        cudaEvent_t ev = c->ring[c->head].ev;
        pthread_mutex_unlock(&c->mu);
        CU_TRY(cudaEventSynchronize(ev));
        pthread_mutex_lock(&c->mu);
        if (c->count == DIST_NCCL_RING && c->ring[c->head].ev == ev) {
            c->head = (c->head + 1) % DIST_NCCL_RING;
            c->count--;
        }
    }
    pending *p = &c->ring[(c->head + c->count) % DIST_NCCL_RING];
    cudaError_t rc = cudaEventRecord(p->ev, s);
    if (rc == cudaSuccess) {
        p->name = name, p->n = n, p->t0 = nccl_now();
        c->count++;
    }
    pthread_mutex_unlock(&c->mu);
    CU_TRY(rc);
    return 0;
}

static void nccl_free_partial(dist_nccl *c) {
    // best effort on an error path: the first failure is what the caller reports
    for (int i = 0; i < DIST_NCCL_RING; i++)
        if (c->ring[i].ev) (void)cudaEventDestroy(c->ring[i].ev);
    if (c->fork_ev) (void)cudaEventDestroy(c->fork_ev);
    if (c->join_ev) (void)cudaEventDestroy(c->join_ev);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    if (c->comm) (void)ncclCommAbort(c->comm);
    (void)pthread_mutex_destroy(&c->mu);
    delete c;
}

static dist_nccl *nccl_init(const unsigned char id[DIST_NCCL_ID_BYTES], int rank, int world,
                            int device, int timeout_s, char *err, size_t errlen) {
    dist_nccl *c = new dist_nccl();
    c->rank = rank, c->world = world, c->device = device;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        snprintf(err, errlen, "pthread_mutex_init failed");
        delete c;
        return NULL;
    }
    auto fail = [&](const char *what, const char *msg) -> dist_nccl * {
        snprintf(err, errlen, "rank %d/%d, device %d: %s: %s", rank, world, device, what, msg);
        nccl_free_partial(c);
        return NULL;
    };
    cudaError_t cr = cudaSetDevice(device);
    if (cr != cudaSuccess) return fail("cudaSetDevice", cudaGetErrorString(cr));
    cr = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (cr != cudaSuccess) return fail("cudaStreamCreateWithFlags", cudaGetErrorString(cr));
    for (int i = 0; i < DIST_NCCL_RING; i++) {
        cr = cudaEventCreateWithFlags(&c->ring[i].ev, cudaEventDisableTiming);
        if (cr != cudaSuccess) return fail("cudaEventCreateWithFlags", cudaGetErrorString(cr));
    }
    cr = cudaEventCreateWithFlags(&c->fork_ev, cudaEventDisableTiming);
    if (cr == cudaSuccess) cr = cudaEventCreateWithFlags(&c->join_ev, cudaEventDisableTiming);
    if (cr != cudaSuccess) return fail("cudaEventCreateWithFlags", cudaGetErrorString(cr));
    ncclUniqueId uid;
    memcpy(uid.internal, id, DIST_NCCL_ID_BYTES);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&c->comm, world, uid, rank, &cfg);
    if (rc != ncclSuccess && rc != ncclInProgress)
        return fail("ncclCommInitRankConfig", ncclGetErrorString(rc));
    // every rank must join: poll until ready, or give up after timeout_s
    double t0 = nccl_now();
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress) {
        rc = ncclCommGetAsyncError(c->comm, &st);
        if (rc != ncclSuccess) return fail("ncclCommGetAsyncError", ncclGetErrorString(rc));
        if (st != ncclInProgress) break;
        if (nccl_now() - t0 > timeout_s) {
            char msg[256];
            snprintf(msg, sizeof msg, "not complete after %d s. HINT: are all %d ranks running, "
                     "with the same id, and able to reach each other? (NCCL_DEBUG=INFO)",
                     timeout_s, world);
            return fail("ncclCommInitRankConfig", msg);
        }
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (st != ncclSuccess) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s (%s)", ncclGetErrorString(st), ncclGetLastError(c->comm));
        return fail("ncclCommInitRankConfig", msg);
    }
    return c;
}

static ncclDataType_t nccl_type(dist_dtype dt) {
    return dt == DIST_DT_F64 ? ncclFloat64 : dt == DIST_DT_F32 ? ncclFloat32 : ncclUint8;
}

static int nccl_coll(dist_nccl *c, dist_coll op, dist_dtype dt, void *buf, size_t n, int root,
                     void *stream, bool host, const char *name, char *err, size_t errlen) {
    if (op == DIST_COLL_WAIT_ASYNC) {  // the compute stream waits for our stream
        CU_TRY(cudaSetDevice(c->device));
        CU_TRY(cudaEventRecord(c->join_ev, c->stream));
        CU_TRY(cudaStreamWaitEvent((cudaStream_t)stream, c->join_ev, 0));
        return 0;
    }
    const bool async = op == DIST_COLL_ALLREDUCE_SUM_ASYNC || op == DIST_COLL_REDUCE_SUM_ASYNC;
    if (async && host) FAIL("collective %s: an async collective takes device memory", name);
    const size_t esz = dt == DIST_DT_F64 ? 8 : dt == DIST_DT_F32 ? 4 : 1;
    const bool sharded = op == DIST_COLL_REDUCE_SCATTER_SUM || op == DIST_COLL_ALLGATHER;
    const size_t shard = sharded ? (n + (size_t)c->world - 1) / (size_t)c->world : 0;
    const size_t cap = sharded ? shard * (size_t)c->world : n;  // elements moved
    const size_t lo = sharded ? shard * (size_t)c->rank : 0;    // this rank's shard
    const size_t hi = sharded ? (lo + shard < n ? lo + shard : n) : n;
    const ncclDataType_t t = nccl_type(dt);
    cudaStream_t s = host || async ? c->stream : (cudaStream_t)stream;
    char *p = (char *)buf;
    CU_TRY(cudaSetDevice(c->device));
    if (async) {  // our stream starts once the compute stream's work so far is done
        CU_TRY(cudaEventRecord(c->fork_ev, (cudaStream_t)stream));
        CU_TRY(cudaStreamWaitEvent(s, c->fork_ev, 0));
        if (c->tl_begin) CU_TRY(cudaEventRecord(c->tl_begin, s));
    }
    if (host) {
        if (cap * esz > c->scratch_bytes) {
            if (c->scratch) CU_TRY(cudaFree(c->scratch));
            c->scratch = NULL, c->scratch_bytes = 0;
            CU_TRY(cudaMalloc((void **)&c->scratch, cap * esz));
            c->scratch_bytes = cap * esz;
        }
        p = c->scratch;
        CU_TRY(cudaMemcpyAsync(p, buf, n * esz, cudaMemcpyHostToDevice, s));
    }
    // the padding [n, cap) is scratch: zero it so no stale NaN travels
    if (cap > n) CU_TRY(cudaMemsetAsync(p + n * esz, 0, (cap - n) * esz, s));
    switch (op) {
    case DIST_COLL_ALLREDUCE_SUM:
    case DIST_COLL_ALLREDUCE_SUM_ASYNC:
        NCCL_TRY(c, ncclAllReduce(p, p, n, t, ncclSum, c->comm, s));
        break;
    case DIST_COLL_ALLREDUCE_MAX:
        NCCL_TRY(c, ncclAllReduce(p, p, n, t, ncclMax, c->comm, s));
        break;
    case DIST_COLL_REDUCE_SCATTER_SUM:
        NCCL_TRY(c, ncclReduceScatter(p, p + lo * esz, shard, t, ncclSum, c->comm, s));
        break;
    case DIST_COLL_ALLGATHER:
        NCCL_TRY(c, ncclAllGather(p + lo * esz, p, shard, t, c->comm, s));
        break;
    case DIST_COLL_BCAST:
        NCCL_TRY(c, ncclBroadcast(p, p, n, t, root, c->comm, s));
        break;
    case DIST_COLL_REDUCE_SUM:
    case DIST_COLL_REDUCE_SUM_ASYNC:
        NCCL_TRY(c, ncclReduce(p, p, n, t, ncclSum, root, c->comm, s));
        break;
    case DIST_COLL_WAIT_ASYNC:  // handled above
        break;
    }
    if (async && c->tl_end) CU_TRY(cudaEventRecord(c->tl_end, s));
    if (async) c->tl_begin = c->tl_end = NULL;
    if (!host) return ring_push(c, s, name, n, err, errlen);
    // host: copy back what the caller may read, and wait (dist.c's watchdog times the wait)
    if (op == DIST_COLL_REDUCE_SCATTER_SUM) {
        if (hi > lo) CU_TRY(cudaMemcpyAsync((char *)buf + lo * esz, p + lo * esz, (hi - lo) * esz,
                                            cudaMemcpyDeviceToHost, s));
    } else {
        CU_TRY(cudaMemcpyAsync(buf, p, n * esz, cudaMemcpyDeviceToHost, s));
    }
    CU_TRY(cudaStreamSynchronize(s));
    return 0;
}

static int nccl_poll(dist_nccl *c, double timeout_s, char *err, size_t errlen) {
    static thread_local int device_set = -1;  // the watchdog thread's current device
    if (device_set != c->device) {
        CU_TRY(cudaSetDevice(c->device));
        device_set = c->device;
    }
    pthread_mutex_lock(&c->mu);
    int rc = ring_drain(c, err, errlen);
    if (rc == 0 && c->count > 0 && nccl_now() - c->ring[c->head].t0 > timeout_s) {
        const pending *p = &c->ring[c->head];
        snprintf(err, errlen, "collective %s (n=%zu) enqueued %.1f s ago has not completed "
                 "(timeout_s=%g): another rank failed, hung, or skipped it", p->name, p->n,
                 nccl_now() - p->t0, timeout_s);
        rc = -1;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc) return rc;
    ncclResult_t st;
    ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
    if (r != ncclSuccess) FAIL("ncclCommGetAsyncError: %s", ncclGetErrorString(r));
    if (st != ncclSuccess && st != ncclInProgress)
        FAIL("NCCL asynchronous error: %s: %s", ncclGetErrorString(st), ncclGetLastError(c->comm));
    return 0;
}

static void nccl_abort(dist_nccl *c) { (void)ncclCommAbort(c->comm); }  // we exit next

static void nccl_time_next(dist_nccl *c, void *ev_begin, void *ev_end) {
    c->tl_begin = (cudaEvent_t)ev_begin, c->tl_end = (cudaEvent_t)ev_end;
}

static int nccl_free(dist_nccl *c, char *err, size_t errlen) {
    CU_TRY(cudaSetDevice(c->device));
    // wait for what is in flight (the watchdog, armed by dist_free, times it), then finish
    pthread_mutex_lock(&c->mu);
    while (c->count > 0) {
        cudaEvent_t ev = c->ring[c->head].ev;
        pthread_mutex_unlock(&c->mu);
        CU_TRY(cudaEventSynchronize(ev));
        pthread_mutex_lock(&c->mu);
        c->head = (c->head + 1) % DIST_NCCL_RING;
        c->count--;
    }
    pthread_mutex_unlock(&c->mu);
    NCCL_TRY(c, ncclCommFinalize(c->comm));
    // after a completed finalize, destroy only frees local memory: no polling
    ncclResult_t rc = ncclCommDestroy(c->comm);
    if (rc != ncclSuccess) FAIL("ncclCommDestroy: %s", ncclGetErrorString(rc));
    c->comm = NULL;
    for (int i = 0; i < DIST_NCCL_RING; i++) CU_TRY(cudaEventDestroy(c->ring[i].ev));
    CU_TRY(cudaEventDestroy(c->fork_ev));
    CU_TRY(cudaEventDestroy(c->join_ev));
    CU_TRY(cudaStreamDestroy(c->stream));
    if (c->scratch) CU_TRY(cudaFree(c->scratch));
    if (pthread_mutex_destroy(&c->mu) != 0) FAIL("pthread_mutex_destroy failed");
    delete c;
    return 0;
}

static const dist_nccl_ops nccl_ops = {nccl_unavailable, nccl_device_count, nccl_unique_id,
                                       nccl_init,        nccl_coll,         nccl_poll,
                                       nccl_abort,       nccl_free,         nccl_time_next};

#else  // no NCCL at build time

static const char *nccl_unavailable(void) {
    return "gdn was built without NCCL (libnccl / nccl.h not found at configure time)";
}
static const dist_nccl_ops nccl_ops = {nccl_unavailable, NULL, NULL, NULL, NULL,
                                       NULL,             NULL, NULL, NULL};

#endif

extern "C" const dist_nccl_ops *dist_nccl_get_ops(void) { return &nccl_ops; }
