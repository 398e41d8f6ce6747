// dist.h — the communicator: data parallelism with one code path for NCCL on GPUs, MPI on
// CPUs, and a single process (DESIGN.md section 8).
//
// Bootstrap: rank / world / local_rank come from the launcher's environment, innermost first:
//   RANK, WORLD_SIZE, LOCAL_RANK[, LOCAL_WORLD_SIZE]  torchrun, or `--gpus N` (dist_spawn_local)
//   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK         OpenMPI's mpirun
//   PMI_RANK / PMI_SIZE, MPI_LOCALRANKID               MPICH's mpiexec (hydra)
//   SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID        srun
// and world = 1 when none is set. MPI_Init is called only when launched by an MPI launcher
// (OMPI_* or PMI_* set) or when "mpi" is asked for. With NCCL the 128-byte unique id travels by
// MPI_Bcast when MPI is up, else through a file on a path shared by all ranks (see dist_init).
//
// Buffers: the *_f64 calls and dist_bcast_bytes take HOST memory with every backend (NCCL
// stages them through a device scratch buffer). The *_f32 calls take DEVICE memory with NCCL
// (enqueued on `stream`, asynchronous) and host memory with MPI (stream ignored, synchronous).
// With world == 1 every collective returns at once and leaves the buffer as it is (a sum over
// one rank), so DIST_NONE needs no special case in the caller, on CPU or GPU.
//
// Sharding (ZeRO-1): n elements are cut into world shards of c = ceil(n/world) elements;
// shard i = [min(n, i*c), min(n, (i+1)*c)) (the last shards may be short or empty). Sharded
// buffers must hold dist_shard_capacity(d, n) = world * c elements: NCCL moves equal blocks, so
// elements [n, world*c) are scratch that the call may overwrite (host-staged and MPI calls
// leave them alone).
//
// Determinism: every rank receives the same bytes from a sum (MPI_Allreduce and NCCL's ring
// and tree give every rank the one result they computed), and the same inputs give the same
// result run after run on the same world size and launcher. Sums over different world sizes
// differ by rounding only (float64: ~1e-16 relative per addition).
//
// Failure: a failing rank must bring the others down, never leave them hanging. Every MPI and
// NCCL return code is checked (MPI runs with MPI_ERRORS_RETURN) and a failure calls dist_abort
// with the library's message. A watchdog thread aborts the job, naming the collective and the
// rank, when a collective has not finished timeout_s seconds after it was entered (MPI and
// host-staged calls) or enqueued (NCCL on a stream: tracked with CUDA events until complete);
// it also polls ncclCommGetAsyncError, which reports a peer that died.
//
// Threads: call the collectives from one thread (the one that called dist_init).
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DIST_NONE = 0, DIST_MPI = 1, DIST_NCCL = 2 } dist_backend;
typedef struct dist_nccl_ops dist_nccl_ops;  // the NCCL backend's entry points (end of file)

typedef struct dist {
    int rank, world;               // global rank in [0, world)
    int local_rank, local_world;   // rank among the processes of this node
    dist_backend backend;
    int device;                    // CUDA device in use with NCCL (set by dist_init), else -1
    int timeout_s;                 // watchdog limit per collective
    const char *launcher;          // "torchrun", "mpirun", "mpiexec", "slurm" or "none"
    struct dist_impl *impl;        // private to dist.c
} dist;

// ---- bootstrap -------------------------------------------------------------------------------

// What the launcher's environment says; no side effects. false (and a message naming the
// variable and its value in err) when a variable is malformed or inconsistent
// (rank >= world, local_rank >= local_world, ...).
typedef struct {
    int rank, world, local_rank, local_world;
    const char *launcher;          // as in struct dist; a static string
    bool mpi_launcher;             // the launcher is mpirun/mpiexec: MPI_Init is possible
} dist_env;
bool dist_env_read(dist_env *e, char *err, size_t errlen);

// Set up the communicator (call it as dist_init, at the end of this file, which passes the
// NCCL backend when there is one). want: "auto", "mpi", "nccl" or "none".
//   auto: world == 1 and no MPI launcher -> none; else NCCL when it is compiled in and a CUDA
//         device is visible; else MPI when launched by mpirun/mpiexec; else an error. A CPU run
//         (host float64 buffers) in a CUDA build must ask for "mpi" (or "none").
//   mpi:  MPI_Init_thread (MPI_THREAD_MULTIPLE, so the watchdog may call MPI_Abort); rank and
//         world from MPI, local rank from MPI_Comm_split_type(SHARED); must agree with the env.
//   nccl: cudaSetDevice(local_rank % device_count) on the calling thread (d->device), then
//         a non-blocking ncclCommInitRankConfig, polled until ready or timeout_s. The unique id
//         goes by MPI_Bcast when launched by an MPI launcher; otherwise rank 0 writes it to
//         nccl_id_path (temp file + rename, so readers never see half a file) and the others
//         poll until it appears (up to timeout_s). nccl_id_path NULL or "" -> $GDN_NCCL_ID_PATH
//         (set by dist_spawn_local); it must be on a filesystem all ranks see (one node: /tmp).
//         The file carries a run key ($GDN_RUN_ID, $TORCHELASTIC_RUN_ID or
//         $SLURM_JOB_ID.$SLURM_STEP_ID) and a reader ignores a file with another key, so a file
//         left by a crashed run is not taken; rank 0 removes it once the communicator is up.
//   none: single process; an error when the environment says world > 1.
// timeout_s > 0. Returns NULL with the reason (and what to do) in err on failure; the caller
// should then exit non-zero (MPI, if started, is not finalised on that path: MPI_Finalize could
// wait for ranks that did not fail). The collectives below never return an error: they abort
// the job. One MPI-backed communicator per process: dist_free finalises MPI, which cannot be
// initialised again.
dist *dist_init_with(const char *want, int timeout_s, const char *nccl_id_path,
                     const dist_nccl_ops *nccl, char *err, size_t errlen);

// Finish the communicator: waits for pending NCCL work, destroys the comm, MPI_Finalize when
// dist_init called MPI_Init. Collective (every rank calls it). NULL is allowed.
void dist_free(dist *d);

// Print "error: dist: rank R/W: <why>; aborting all ranks" and bring the whole job down
// (ncclCommAbort, given 2 s, then MPI_Abort when MPI is up, else _exit(1): the launcher - mpirun,
// torchrun, srun --kill-on-bad-exit, dist_spawn_local - then kills the other ranks, and those
// left waiting in a collective are ended by their own watchdog). Safe from any thread.
__attribute__((noreturn)) void dist_abort(dist *d, const char *why);

// `--gpus N`: run this program as N local workers. Call it first in main(), before CUDA, HDF5
// or threads exist. The parent re-executes /proc/self/exe with argv[0..argc) N times, each with
// RANK=LOCAL_RANK=i, WORLD_SIZE=LOCAL_WORLD_SIZE=N, MASTER_ADDR=127.0.0.1,
// GDN_NCCL_ID_PATH=<fresh temp dir>/nccl-id, GDN_RUN_ID and GDN_SPAWNED=1 set; the workers
// die with the parent (PR_SET_PDEATHSIG). The parent waits for all of them; when one fails
// (non-zero exit or a signal) it sends SIGTERM to the rest, SIGKILL after 5 s. SIGTERM/SIGINT
// sent to the parent with kill() are forwarded (a terminal's Ctrl-C reaches the workers
// directly). Returns, in the parent, 0 when every worker exited 0, else the first failure's
// exit code (128 + signal for a signal); in a worker (GDN_SPAWNED set) it returns -1 at once
// and spawns nothing, so main() may call it unconditionally:
//     int rc = dist_spawn_local(gpus, argc, argv); if (rc >= 0) return rc;
// n >= 1. argv must be main()'s argv.
int dist_spawn_local(int n, int argc, char **argv);

// ---- collectives (every rank calls them in the same order with the same n) -------------------

// buf[i] <- sum over ranks of buf[i], i < n. Host memory.
void dist_allreduce_sum_f64(dist *d, double *buf, size_t n);
// Same on floats: device memory on `stream` (cudaStream_t, NULL = default) with NCCL,
// host memory with MPI.
void dist_allreduce_sum_f32(dist *d, float *buf, size_t n, void *stream);

// Overlap of communication with compute (NCCL). dist_allreduce_sum_f32_async enqueues the sum
// of device memory buf[0, n) on the communicator's own stream, to start once the work enqueued
// so far on compute_stream (cudaStream_t; NULL = the legacy default stream) is done (an event
// recorded there, waited for by the own stream), and returns at once. dist_wait_async makes
// compute_stream wait, on the device, for every collective enqueued so far on the own stream;
// the host does not wait. Between the two, work on compute_stream must neither write buf nor
// read the result, and no other collective may be called (the own stream also carries the
// host-staged calls, so those are ordered after the async ones, but collectives on other streams
// are not). The watchdog times async collectives like any enqueued one.
// MPI: host memory, the sum is done before the call returns (as dist_allreduce_sum_f32), and
// dist_wait_async does nothing; with world == 1 both return at once.
void dist_allreduce_sum_f32_async(dist *d, float *buf, size_t n, void *compute_stream);
void dist_wait_async(dist *d, void *compute_stream);
// The same for a sum to one rank (ZeRO-1: each gradient piece to the rank whose shard holds
// it): in place, on rank `root` buf[0, n) <- the sum over ranks; elsewhere buf is unspecified
// afterwards. _f64: host memory, blocking (MPI). _f32_async: as dist_allreduce_sum_f32_async
// (NCCL: enqueued on the own stream, dist_wait_async joins; MPI: host memory, done on return).
void dist_reduce_sum_f64(dist *d, double *buf, size_t n, int root);
void dist_reduce_sum_f32_async(dist *d, float *buf, size_t n, int root, void *compute_stream);
// Timeline of the overlap (gdn-train --timeline): the next async collective (all-reduce or reduce) with
// n > 0 also records ev_begin on the own stream right before its collective, i.e. after the
// wait for the compute stream, so it marks when the sum can start, and ev_end right after it.
// ev_begin, ev_end: cudaEvent_t with timing enabled, created on d->device by the caller, read
// with cudaEventElapsedTime once complete (the compute stream's wait in dist_wait_async
// orders them before its later work). NCCL only: elsewhere it arms nothing and returns false
// (MPI and world-1 sums are done on the host before the call returns: time them there).
bool dist_time_next_async(dist *d, void *ev_begin, void *ev_end);

// world * ceil(n/world): the length a sharded buffer must have (see Sharding above).
size_t dist_shard_capacity(const dist *d, size_t n);
// This rank's shard [*lo, *hi) of n elements.
void dist_shard_range(const dist *d, size_t n, size_t *lo, size_t *hi);

// In place: buf[lo, hi) <- sum over ranks of buf[lo, hi) for this rank's shard [lo, hi); the
// rest of buf[0, n) is unspecified afterwards. buf holds dist_shard_capacity(d, n) elements.
void dist_reduce_scatter_sum_f64(dist *d, double *buf, size_t n);
void dist_reduce_scatter_sum_f32(dist *d, float *buf, size_t n, void *stream);
// In place: for every rank i, buf[shard i] <- rank i's buf[shard i]; each rank contributes its
// own shard. reduce_scatter then allgather == allreduce. buf holds dist_shard_capacity(d, n).
void dist_allgather_f64(dist *d, double *buf, size_t n);
void dist_allgather_f32(dist *d, float *buf, size_t n, void *stream);

// buf[0, bytes) <- root's buf[0, bytes). Host memory.
void dist_bcast_bytes(dist *d, void *buf, size_t bytes, int root);
// Returns when every rank has entered it.
void dist_barrier(dist *d);

// Scalars (loss, squared grad norm, a "found a NaN" flag): the sum / max over ranks of x,
// the same on every rank.
double dist_scalar_sum_f64(dist *d, double x);
double dist_scalar_max_f64(dist *d, double x);

// Name of a backend: "none", "mpi", "nccl".
const char *dist_backend_name(dist_backend b);

// ---- the NCCL backend's interface (dist_nccl.cu; used by dist.c only) ------------------------

#define DIST_NCCL_ID_BYTES 128  // NCCL_UNIQUE_ID_BYTES

typedef enum {
    DIST_COLL_ALLREDUCE_SUM,
    DIST_COLL_ALLREDUCE_MAX,
    DIST_COLL_REDUCE_SCATTER_SUM,  // n = total elements, shard layout as above, in place
    DIST_COLL_ALLGATHER,           // n = total elements, in place
    DIST_COLL_BCAST,
    // Overlap (dist_allreduce_sum_f32_async), device memory, host == false: the sum is enqueued
    // on the backend's own stream after the work enqueued so far on `stream`; returns at once.
    DIST_COLL_ALLREDUCE_SUM_ASYNC,
    // Sum to `root` (in place there): blocking, and the async variant as above.
    DIST_COLL_REDUCE_SUM,
    DIST_COLL_REDUCE_SUM_ASYNC,
    // dist_wait_async, no data (buf NULL, n 0): `stream` waits for everything enqueued so far
    // on the backend's own stream (device-side; the host does not wait).
    DIST_COLL_WAIT_ASYNC,
} dist_coll;
typedef enum { DIST_DT_F32, DIST_DT_F64, DIST_DT_BYTE } dist_dtype;

typedef struct dist_nccl dist_nccl;  // the NCCL communicator's state (dist_nccl.cu)

// Every int-returning entry: 0 on success, else -1 with a message (the failing call and
// NCCL's / CUDA's own words) in err.
struct dist_nccl_ops {
    // NULL when NCCL can be used here, else why not ("built without NCCL", "no CUDA device").
    const char *(*unavailable)(void);
    int (*device_count)(void);
    int (*unique_id)(unsigned char id[DIST_NCCL_ID_BYTES], char *err, size_t errlen);
    dist_nccl *(*init)(const unsigned char id[DIST_NCCL_ID_BYTES], int rank, int world,
                       int device, int timeout_s, char *err, size_t errlen);
    // One collective on buf[0, n): device memory enqueued on `stream` (host == false), or host
    // memory staged through a device scratch buffer on the backend's own stream and waited for
    // (host == true). `name` labels it for the watchdog. The *_ASYNC ops: see dist_coll.
    int (*coll)(dist_nccl *c, dist_coll op, dist_dtype dt, void *buf, size_t n, int root,
                void *stream, bool host, const char *name, char *err, size_t errlen);
    // Watchdog tick (another thread): 0 = healthy; -1 = an asynchronous NCCL error, or the
    // oldest unfinished enqueued collective is older than timeout_s (err names it and its age).
    int (*poll)(dist_nccl *c, double timeout_s, char *err, size_t errlen);
    void (*abort)(dist_nccl *c);  // ncclCommAbort; from any thread
    int (*free)(dist_nccl *c, char *err, size_t errlen);
    // dist_time_next_async: the next DIST_COLL_ALLREDUCE_SUM_ASYNC records these two
    // cudaEvent_t on our stream around its collective, then forgets them. NULL: not supported.
    void (*time_next)(dist_nccl *c, void *ev_begin, void *ev_end);
};

// The NCCL backend of this build; defined in dist_nccl.cu, so only in CUDA builds. Without
// NCCL at build time it still exists and its unavailable() says so.
const dist_nccl_ops *dist_nccl_get_ops(void);

// dist_init: dist_init_with plus the NCCL backend when this translation unit is built with
// CUDA (GDN_HAVE_CUDA is a public definition of the gdn_cuda target), so programs that do not
// link gdn_cuda (CPU tests, tools) need no CUDA symbol.
static inline dist *dist_init(const char *want, int timeout_s, const char *nccl_id_path,
                              char *err, size_t errlen) {
#ifdef GDN_HAVE_CUDA
    return dist_init_with(want, timeout_s, nccl_id_path, dist_nccl_get_ops(), err, errlen);
#else
    return dist_init_with(want, timeout_s, nccl_id_path, NULL, err, errlen);
#endif
}

#ifdef __cplusplus
}
#endif
