// dist.c — the communicator's host side: launcher environment, backend choice, MPI backend,
// dispatch to the NCCL backend (dist_nccl.cu, reached through a dist_nccl_ops table so this
// file needs no CUDA), the NCCL id file, the collective watchdog, abort, and `--gpus N`
// (dist_spawn_local). Contracts: dist.h.
#include "dist.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#ifdef GDN_HAVE_MPI
#include <mpi.h>
#endif

#include "../core/common.h"

#define DIST_WATCH_TICK_S 0.1   // watchdog period: a timeout fires at most this late
#define DIST_MPI_CHUNK (1u << 30)  // elements per MPI call (counts are int)

struct dist_impl {
    const dist_nccl_ops *nops;  // NCCL backend (NULL unless backend == DIST_NCCL)
    dist_nccl *nc;
    bool mpi_up;                // MPI usable: initialised, not finalised
    bool mpi_ours;              // dist_init called MPI_Init, so dist_free finalises
    bool mpi_multiple;          // MPI_THREAD_MULTIPLE: the watchdog may call MPI_Abort
#ifdef GDN_HAVE_MPI
    MPI_Comm comm;              // a duplicate of MPI_COMM_WORLD (ours alone)
    int *counts, *displs;       // (world) shard lengths and offsets, for reduce-scatter/allgather
#endif
    pthread_t main_thread;
    // watchdog: one thread; `what` is set while a collective runs on the main thread
    pthread_t wd;
    bool wd_running;
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    bool wd_stop;
    const char *wd_what;        // collective in progress (NULL = none)
    size_t wd_n;
    double wd_t0;
};

static const char *const backend_names[] = {"none", "mpi", "nccl"};
const char *dist_backend_name(dist_backend b) {
    return (b >= DIST_NONE && b <= DIST_NCCL) ? backend_names[b] : "?";
}

// ---- abort -------------------------------------------------------------------------------------

static atomic_int dist_aborting;
static atomic_int dist_nccl_aborted;

static void *abort_nccl_main(void *arg) {
    dist *d = arg;
    d->impl->nops->abort(d->impl->nc);
    atomic_store(&dist_nccl_aborted, 1);
    return NULL;
}

void dist_abort(dist *d, const char *why) {
    // The first caller brings the process down; a second thread arriving meanwhile waits for it.
    if (atomic_exchange(&dist_aborting, 1)) {
        for (;;) pause();
    }
    fflush(stdout);
    if (d) fprintf(stderr, "error: dist: rank %d/%d (%s): %s; aborting all ranks\n", d->rank,
                   d->world, dist_backend_name(d->backend), why);
    else fprintf(stderr, "error: dist: %s; aborting all ranks\n", why);
    fflush(stderr);
    // ncclCommAbort and MPI_Abort can themselves hang (ncclCommAbort waits for kernels queued
    // before NCCL's on the stream): ncclCommAbort gets 2 s on a helper thread, and SIGALRM ends
    // the process after 10 s whatever happens.
    alarm(10);
    struct dist_impl *m = d ? d->impl : NULL;
    pthread_t t;
    if (m && m->nc && pthread_create(&t, NULL, abort_nccl_main, d) == 0) {
        for (int i = 0; i < 200 && !atomic_load(&dist_nccl_aborted); i++) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
#ifdef GDN_HAVE_MPI
    if (m && m->mpi_up && (m->mpi_multiple || pthread_equal(pthread_self(), m->main_thread)))
        MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    _exit(1);
}

// ---- launcher environment ----------------------------------------------------------------------

// *out <- the integer in $name; 0 absent, 1 read, -1 malformed (err says so).
static int env_int(const char *name, int *out, char *err, size_t errlen) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > INT_MAX) {
        snprintf(err, errlen, "environment variable %s=\"%s\" is not a non-negative integer",
                 name, s);
        return -1;
    }
    *out = (int)v;
    return 1;
}

// One launcher's variables: rank and world required together, local rank/world optional.
typedef struct {
    const char *launcher, *rank, *world, *local_rank, *local_world;
    bool mpi;
} env_names;

static const env_names launchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", true},
    {"mpiexec", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", true},
    // srun sets SLURM_STEP_NUM_TASKS for the step; SLURM_NTASKS alone is also set inside an
    // sbatch script, where no step was launched, so it is only the fallback.
    {"slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL, false},
};

bool dist_env_read(dist_env *e, char *err, size_t errlen) {
    *e = (dist_env){0, 1, 0, 1, "none", false};
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
        const env_names *L = &launchers[i];
        int rank = -1, world = -1, lrank = -1, lworld = -1;
        int hr = env_int(L->rank, &rank, err, errlen);
        int hw = env_int(L->world, &world, err, errlen);
        if (hr < 0 || hw < 0) return false;
        if (hw == 0 && strcmp(L->launcher, "slurm") == 0) {
            hw = env_int("SLURM_NTASKS", &world, err, errlen);
            if (hw < 0) return false;
        }
        if (hr == 0 && hw == 0) continue;
        if (strcmp(L->launcher, "slurm") == 0 && !getenv("SLURM_LOCALID")) continue;  // sbatch
        if (hr == 0 || hw == 0) {
            snprintf(err, errlen, "%s is set but %s is not (launcher %s)",
                     hr ? L->rank : L->world, hr ? L->world : L->rank, L->launcher);
            return false;
        }
        int hl = env_int(L->local_rank, &lrank, err, errlen);
        int hlw = L->local_world ? env_int(L->local_world, &lworld, err, errlen) : 0;
        if (hl < 0 || hlw < 0) return false;
        if (world < 1 || rank >= world) {
            snprintf(err, errlen, "%s=%d and %s=%d: need 0 <= rank < world (launcher %s)",
                     L->rank, rank, L->world, world, L->launcher);
            return false;
        }
        if (hl == 0) lrank = rank;  // no local rank given: one node
        if (hlw == 0) lworld = world;  // not given: at most world
        if (lworld < 1 || lrank >= lworld || lworld > world) {
            snprintf(err, errlen,
                     "local rank %d of %d on this node does not fit world %d (launcher %s: "
                     "%s, %s)", lrank, lworld, world, L->launcher, L->local_rank,
                     L->local_world ? L->local_world : "-");
            return false;
        }
        *e = (dist_env){rank, world, lrank, lworld, L->launcher, L->mpi};
        return true;
    }
    return true;
}

// ---- watchdog ----------------------------------------------------------------------------------

static void wd_arm(dist *d, const char *what, size_t n) {
    struct dist_impl *m = d->impl;
    pthread_mutex_lock(&m->wd_mu);
    m->wd_what = what;
    m->wd_n = n;
    m->wd_t0 = gdn_now();
    pthread_mutex_unlock(&m->wd_mu);
}

static void wd_disarm(dist *d) {
    struct dist_impl *m = d->impl;
    pthread_mutex_lock(&m->wd_mu);
    m->wd_what = NULL;
    pthread_mutex_unlock(&m->wd_mu);
}

static void *wd_main(void *arg) {
    dist *d = arg;
    struct dist_impl *m = d->impl;
    char why[1024];
    pthread_mutex_lock(&m->wd_mu);
    while (!m->wd_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)(DIST_WATCH_TICK_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec += 1, ts.tv_nsec -= 1000000000L;
        int rc = pthread_cond_timedwait(&m->wd_cv, &m->wd_mu, &ts);
        if (rc != 0 && rc != ETIMEDOUT) {
            snprintf(why, sizeof why, "watchdog: pthread_cond_timedwait: %s", strerror(rc));
            pthread_mutex_unlock(&m->wd_mu);
            dist_abort(d, why);
        }
        if (m->wd_stop) break;
        double age = m->wd_what ? gdn_now() - m->wd_t0 : 0;
        if (m->wd_what && age > d->timeout_s) {
            snprintf(why, sizeof why,
                     "watchdog: collective %s (n=%zu) has not finished after %.1f s "
                     "(timeout_s=%d): another rank failed, hung, or skipped it",
                     m->wd_what, m->wd_n, age, d->timeout_s);
            pthread_mutex_unlock(&m->wd_mu);
            dist_abort(d, why);
        }
        // poll never blocks (event queries, ncclCommGetAsyncError); holding wd_mu keeps
        // dist_free from destroying the comm under it
        char err[768];
        if (m->nc && m->nops->poll(m->nc, d->timeout_s, err, sizeof err) != 0) {
            snprintf(why, sizeof why, "watchdog: %s", err);
            pthread_mutex_unlock(&m->wd_mu);
            dist_abort(d, why);
        }
    }
    pthread_mutex_unlock(&m->wd_mu);
    return NULL;
}

static bool wd_start(dist *d, char *err, size_t errlen) {
    struct dist_impl *m = d->impl;
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (!rc) rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc) rc = pthread_cond_init(&m->wd_cv, &ca);
    if (!rc) rc = pthread_condattr_destroy(&ca);
    if (!rc) rc = pthread_mutex_init(&m->wd_mu, NULL);
    if (!rc) rc = pthread_create(&m->wd, NULL, wd_main, d);
    if (rc) {
        snprintf(err, errlen, "cannot start the watchdog thread: %s", strerror(rc));
        return false;
    }
    m->wd_running = true;
    return true;
}

static void wd_finish(dist *d) {
    struct dist_impl *m = d->impl;
    if (!m->wd_running) return;
    pthread_mutex_lock(&m->wd_mu);
    m->wd_stop = true;
    pthread_cond_signal(&m->wd_cv);
    pthread_mutex_unlock(&m->wd_mu);
    int rc = pthread_join(m->wd, NULL);
    if (rc) gdn_die("dist: pthread_join(watchdog): %s", strerror(rc));
    m->wd_running = false;
    pthread_cond_destroy(&m->wd_cv);
    pthread_mutex_destroy(&m->wd_mu);
}

// ---- MPI backend -------------------------------------------------------------------------------

#ifdef GDN_HAVE_MPI
// An MPI return code other than MPI_SUCCESS aborts the job with MPI's own message.
static void mpi_ok(dist *d, int rc, const char *stmt) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    char why[MPI_MAX_ERROR_STRING + 256];
    snprintf(why, sizeof why, "%s failed: %s", stmt, msg);
    dist_abort(d, why);
}
#define MPI_OK(d, stmt) mpi_ok((d), (stmt), #stmt)

// The same check during dist_init, where failure is returned, not aborted.
static bool mpi_try(int rc, const char *stmt, char *err, size_t errlen) {
    if (rc == MPI_SUCCESS) return true;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    snprintf(err, errlen, "%s failed: %s", stmt, msg);
    return false;
}
#define MPI_TRY(stmt) mpi_try((stmt), #stmt, err, errlen)

// MPI_Init (unless someone did), our own communicator, rank/world/local rank from MPI.
static bool mpi_start(dist *d, const dist_env *e, char *err, size_t errlen) {
    struct dist_impl *m = d->impl;
    int inited = 0, provided = 0;
    if (!MPI_TRY(MPI_Initialized(&inited))) return false;
    if (!inited) {
        if (!MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided))) return false;
        m->mpi_ours = true;
    } else if (!MPI_TRY(MPI_Query_thread(&provided))) {
        return false;
    }
    m->mpi_up = true;
    m->mpi_multiple = provided == MPI_THREAD_MULTIPLE;
    MPI_Comm node;
    int rank, world, lrank, lworld;
    if (!MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) ||
        !MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &m->comm)) ||
        !MPI_TRY(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN)) ||
        !MPI_TRY(MPI_Comm_rank(m->comm, &rank)) || !MPI_TRY(MPI_Comm_size(m->comm, &world)) ||
        !MPI_TRY(MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node)) ||
        !MPI_TRY(MPI_Comm_rank(node, &lrank)) || !MPI_TRY(MPI_Comm_size(node, &lworld)) ||
        !MPI_TRY(MPI_Comm_free(&node)))
        return false;
    if (strcmp(e->launcher, "none") != 0 && (e->world != world || e->rank != rank)) {
        snprintf(err, errlen,
                 "MPI says rank %d of %d but the %s environment says rank %d of %d. HINT: "
                 "launch with mpirun -np N (not several single MPI processes)", rank, world,
                 e->launcher, e->rank, e->world);
        return false;
    }
    d->rank = rank, d->world = world, d->local_rank = lrank, d->local_world = lworld;
    m->counts = gdn_malloc(sizeof(int) * (size_t)world);
    m->displs = gdn_malloc(sizeof(int) * (size_t)world);
    return true;
}

static MPI_Datatype mpi_type(dist_dtype dt) {
    return dt == DIST_DT_F64 ? MPI_DOUBLE : dt == DIST_DT_F32 ? MPI_FLOAT : MPI_BYTE;
}

// One collective on host memory buf[0, n) (n elements of dt), in place.
static void mpi_coll(dist *d, dist_coll op, dist_dtype dt, void *buf, size_t n, int root) {
    struct dist_impl *m = d->impl;
    MPI_Datatype t = mpi_type(dt);
    size_t esz = dt == DIST_DT_F64 ? 8 : dt == DIST_DT_F32 ? 4 : 1;
    char *p = buf;
    switch (op) {
    case DIST_COLL_ALLREDUCE_SUM:
    case DIST_COLL_ALLREDUCE_MAX:
    case DIST_COLL_BCAST:
        for (size_t off = 0; off < n; off += DIST_MPI_CHUNK) {
            int cnt = (int)GDN_MIN((size_t)DIST_MPI_CHUNK, n - off);
            if (op == DIST_COLL_BCAST)
                MPI_OK(d, MPI_Bcast(p + off * esz, cnt, t, root, m->comm));
            else
                MPI_OK(d, MPI_Allreduce(MPI_IN_PLACE, p + off * esz, cnt, t,
                                        op == DIST_COLL_ALLREDUCE_SUM ? MPI_SUM : MPI_MAX,
                                        m->comm));
        }
        return;
    case DIST_COLL_REDUCE_SCATTER_SUM:
    case DIST_COLL_ALLGATHER: {
        if (n > (size_t)INT_MAX) {
            char why[160];
            snprintf(why, sizeof why, "sharded collective of %zu elements: the MPI backend "
                     "takes at most %d", n, INT_MAX);
            dist_abort(d, why);
        }
        size_t c = GDN_CDIV(n, (size_t)d->world);
        for (int i = 0; i < d->world; i++) {
            size_t lo = GDN_MIN(n, (size_t)i * c), hi = GDN_MIN(n, (size_t)(i + 1) * c);
            m->counts[i] = (int)(hi - lo);
            m->displs[i] = (int)lo;
        }
        size_t lo = (size_t)m->displs[d->rank], cnt = (size_t)m->counts[d->rank];
        if (op == DIST_COLL_REDUCE_SCATTER_SUM) {
            // In place, MPI leaves this rank's block at the start of buf: move it to its shard.
            MPI_OK(d, MPI_Reduce_scatter(MPI_IN_PLACE, p, m->counts, t, MPI_SUM, m->comm));
            if (lo) memmove(p + lo * esz, p, cnt * esz);
        } else {
            MPI_OK(d, MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p, m->counts, m->displs,
                                     t, m->comm));
        }
        return;
    }
    case DIST_COLL_REDUCE_SUM:
        for (size_t off = 0; off < n; off += DIST_MPI_CHUNK) {
            int cnt = (int)GDN_MIN((size_t)DIST_MPI_CHUNK, n - off);
            // the receive buffer counts only at the root (in place there)
            if (d->rank == root)
                MPI_OK(d, MPI_Reduce(MPI_IN_PLACE, p + off * esz, cnt, t, MPI_SUM, root, m->comm));
            else
                MPI_OK(d, MPI_Reduce(p + off * esz, NULL, cnt, t, MPI_SUM, root, m->comm));
        }
        return;
    case DIST_COLL_ALLREDUCE_SUM_ASYNC:  // dist.c maps these before calling (MPI is blocking)
    case DIST_COLL_REDUCE_SUM_ASYNC:
    case DIST_COLL_WAIT_ASYNC:
        dist_abort(d, "mpi_coll: an asynchronous op reached the MPI backend");
    }
}
#endif

// ---- dispatch ----------------------------------------------------------------------------------

static void coll(dist *d, dist_coll op, dist_dtype dt, void *buf, size_t n, int root,
                 void *stream, bool host, const char *name) {
    if (d->backend == DIST_NONE || n == 0) return;
    if (root < 0 || root >= d->world) {
        char why[128];
        snprintf(why, sizeof why, "%s: root %d is not a rank of world %d", name, root, d->world);
        dist_abort(d, why);
    }
    struct dist_impl *m = d->impl;
    wd_arm(d, name, n);
    if (d->backend == DIST_NCCL) {
        char err[768];
        if (m->nops->coll(m->nc, op, dt, buf, n, root, stream, host, name, err, sizeof err))
            dist_abort(d, err);
    } else {
#ifdef GDN_HAVE_MPI
        mpi_coll(d, op, dt, buf, n, root);
#endif
    }
    wd_disarm(d);
}

void dist_allreduce_sum_f64(dist *d, double *buf, size_t n) {
    coll(d, DIST_COLL_ALLREDUCE_SUM, DIST_DT_F64, buf, n, 0, NULL, true, "allreduce_sum_f64");
}
void dist_allreduce_sum_f32(dist *d, float *buf, size_t n, void *stream) {
    coll(d, DIST_COLL_ALLREDUCE_SUM, DIST_DT_F32, buf, n, 0, stream, false, "allreduce_sum_f32");
}

void dist_allreduce_sum_f32_async(dist *d, float *buf, size_t n, void *compute_stream) {
    coll(d, d->backend == DIST_NCCL ? DIST_COLL_ALLREDUCE_SUM_ASYNC : DIST_COLL_ALLREDUCE_SUM,
         DIST_DT_F32, buf, n, 0, compute_stream, false, "allreduce_sum_f32_async");
}
void dist_reduce_sum_f64(dist *d, double *buf, size_t n, int root) {
    coll(d, DIST_COLL_REDUCE_SUM, DIST_DT_F64, buf, n, root, NULL, true, "reduce_sum_f64");
}
void dist_reduce_sum_f32_async(dist *d, float *buf, size_t n, int root, void *compute_stream) {
    coll(d, d->backend == DIST_NCCL ? DIST_COLL_REDUCE_SUM_ASYNC : DIST_COLL_REDUCE_SUM,
         DIST_DT_F32, buf, n, root, compute_stream, false, "reduce_sum_f32_async");
}
bool dist_time_next_async(dist *d, void *ev_begin, void *ev_end) {
    struct dist_impl *m = d->impl;
    if (d->backend != DIST_NCCL || !m->nops->time_next) return false;
    m->nops->time_next(m->nc, ev_begin, ev_end);
    return true;
}
void dist_wait_async(dist *d, void *compute_stream) {
    if (d->backend != DIST_NCCL) return;
    struct dist_impl *m = d->impl;
    char err[768];
    wd_arm(d, "wait_async", 0);
    if (m->nops->coll(m->nc, DIST_COLL_WAIT_ASYNC, DIST_DT_BYTE, NULL, 0, 0, compute_stream,
                      false, "wait_async", err, sizeof err))
        dist_abort(d, err);
    wd_disarm(d);
}

size_t dist_shard_capacity(const dist *d, size_t n) {
    return GDN_CDIV(n, (size_t)d->world) * (size_t)d->world;
}
void dist_shard_range(const dist *d, size_t n, size_t *lo, size_t *hi) {
    size_t c = GDN_CDIV(n, (size_t)d->world);
    *lo = GDN_MIN(n, (size_t)d->rank * c);
    *hi = GDN_MIN(n, (size_t)(d->rank + 1) * c);
}

void dist_reduce_scatter_sum_f64(dist *d, double *buf, size_t n) {
    coll(d, DIST_COLL_REDUCE_SCATTER_SUM, DIST_DT_F64, buf, n, 0, NULL, true,
         "reduce_scatter_sum_f64");
}
void dist_reduce_scatter_sum_f32(dist *d, float *buf, size_t n, void *stream) {
    coll(d, DIST_COLL_REDUCE_SCATTER_SUM, DIST_DT_F32, buf, n, 0, stream, false,
         "reduce_scatter_sum_f32");
}
void dist_allgather_f64(dist *d, double *buf, size_t n) {
    coll(d, DIST_COLL_ALLGATHER, DIST_DT_F64, buf, n, 0, NULL, true, "allgather_f64");
}
void dist_allgather_f32(dist *d, float *buf, size_t n, void *stream) {
    coll(d, DIST_COLL_ALLGATHER, DIST_DT_F32, buf, n, 0, stream, false, "allgather_f32");
}

void dist_bcast_bytes(dist *d, void *buf, size_t bytes, int root) {
    coll(d, DIST_COLL_BCAST, DIST_DT_BYTE, buf, bytes, root, NULL, true, "bcast_bytes");
}

void dist_barrier(dist *d) {
    if (d->backend == DIST_NCCL) {  // NCCL has no barrier: a one-element sum, waited for
        double x = 0;
        coll(d, DIST_COLL_ALLREDUCE_SUM, DIST_DT_F64, &x, 1, 0, NULL, true, "barrier");
        return;
    }
#ifdef GDN_HAVE_MPI
    if (d->backend == DIST_MPI) {
        wd_arm(d, "barrier", 0);
        MPI_OK(d, MPI_Barrier(d->impl->comm));
        wd_disarm(d);
    }
#endif
}

double dist_scalar_sum_f64(dist *d, double x) {
    coll(d, DIST_COLL_ALLREDUCE_SUM, DIST_DT_F64, &x, 1, 0, NULL, true, "scalar_sum_f64");
    return x;
}
double dist_scalar_max_f64(dist *d, double x) {
    coll(d, DIST_COLL_ALLREDUCE_MAX, DIST_DT_F64, &x, 1, 0, NULL, true, "scalar_max_f64");
    return x;
}

// ---- the NCCL id file --------------------------------------------------------------------------

// The run key written with the id: readers skip a file from another run. "-" when unknown.
static void id_run_key(char *key, size_t n) {
    const char *g = getenv("GDN_RUN_ID"), *t = getenv("TORCHELASTIC_RUN_ID");
    const char *j = getenv("SLURM_JOB_ID"), *s = getenv("SLURM_STEP_ID");
    if (g && *g) snprintf(key, n, "%s", g);
    else if (t && *t) snprintf(key, n, "torchrun-%s", t);
    else if (j && *j) snprintf(key, n, "slurm-%s.%s", j, s ? s : "-");
    else snprintf(key, n, "-");
    for (char *c = key; *c; c++)
        if (*c <= ' ' || *c > '~') *c = '_';
}

// File format, one line: "gdn-nccl-id 1 <key> <256 hex digits>\n".
static bool id_write(const char *path, const unsigned char *id, char *err, size_t errlen) {
    char key[128], tmp[4096];
    id_run_key(key, sizeof key);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "cannot create %s: %s. HINT: [dist] nccl_id_path must be in a "
                 "writable directory shared by all ranks", tmp, strerror(errno));
        return false;
    }
    fprintf(f, "gdn-nccl-id 1 %s ", key);
    for (int i = 0; i < DIST_NCCL_ID_BYTES; i++) fprintf(f, "%02x", id[i]);
    fputc('\n', f);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return false;
    }
    return true;
}

// 1 read, 0 not there yet (or from another run: *stale set), -1 malformed.
static int id_try_read(const char *path, const char *key, unsigned char *id, bool *stale,
                       char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    char *got = fgets(line, sizeof line, f);
    fclose(f);
    char fkey[256], hex[2 * DIST_NCCL_ID_BYTES + 2];
    int ver = 0;
    if (!got || sscanf(line, "gdn-nccl-id %d %255s %257s", &ver, fkey, hex) != 3 || ver != 1 ||
        strlen(hex) != 2 * DIST_NCCL_ID_BYTES) {
        snprintf(err, errlen, "%s is not a gdn NCCL id file (format \"gdn-nccl-id 1 KEY HEX\")",
                 path);
        return -1;
    }
    if (strcmp(fkey, key) != 0) {
        *stale = true;
        return 0;
    }
    for (int i = 0; i < 2 * DIST_NCCL_ID_BYTES; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) {
            snprintf(err, errlen, "%s: bad hex digit '%c' in the id", path, c);
            return -1;
        }
        id[i / 2] = (unsigned char)(i % 2 ? id[i / 2] | v : v << 4);
    }
    return 1;
}

static bool id_read(const char *path, int rank, int timeout_s, unsigned char *id, char *err,
                    size_t errlen) {
    char key[128];
    id_run_key(key, sizeof key);
    bool stale = false;
    double t0 = gdn_now();
    for (;;) {
        int rc = id_try_read(path, key, id, &stale, err, errlen);
        if (rc == 1) return true;
        if (rc < 0) return false;
        if (gdn_now() - t0 > timeout_s) {
            snprintf(err, errlen,
                     "rank %d: no NCCL id for this run (key %s) in %s after %d s%s. HINT: is "
                     "rank 0 running, and is the path on a filesystem every rank sees?", rank,
                     key, path, timeout_s,
                     stale ? " (a file from another run is there)" : "");
            return false;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

// ---- init / free -------------------------------------------------------------------------------

// Stop the watchdog and free the memory. On dist_init's error paths MPI is left as it is, not
// finalised: MPI_Finalize can wait for ranks that are still running, and the caller is about
// to exit non-zero, which makes mpirun end the job.
static void dist_release(dist *d) {
    struct dist_impl *m = d->impl;
    wd_finish(d);
#ifdef GDN_HAVE_MPI
    free(m->counts);
    free(m->displs);
#endif
    free(m);
    free(d);
}

dist *dist_init_with(const char *want, int timeout_s, const char *nccl_id_path,
                     const dist_nccl_ops *nccl, char *err, size_t errlen) {
    dist_env e;
    if (!dist_env_read(&e, err, errlen)) return NULL;
    if (timeout_s < 1) {
        snprintf(err, errlen, "timeout_s = %d: must be >= 1", timeout_s);
        return NULL;
    }
    const char *why_no_nccl = !nccl ? "this program is not linked with the CUDA backend"
                                    : nccl->unavailable();
#ifdef GDN_HAVE_MPI
    const char *why_no_mpi = e.mpi_launcher ? NULL : "not launched by mpirun/mpiexec";
#else
    const char *why_no_mpi = "gdn was built without MPI (find_package(MPI) failed)";
#endif
    dist_backend b;
    if (!want || strcmp(want, "auto") == 0) {
        if (e.world == 1 && !e.mpi_launcher) b = DIST_NONE;
        else if (!why_no_nccl) b = DIST_NCCL;
        else if (!why_no_mpi) b = DIST_MPI;
        else {
            snprintf(err, errlen, "the %s environment says world %d, but no backend can carry "
                     "it: NCCL: %s; MPI: %s", e.launcher, e.world, why_no_nccl, why_no_mpi);
            return NULL;
        }
    } else if (strcmp(want, "none") == 0) {
        if (e.world > 1) {
            snprintf(err, errlen, "backend none, but the %s environment says world %d",
                     e.launcher, e.world);
            return NULL;
        }
        b = DIST_NONE;
    } else if (strcmp(want, "mpi") == 0) {
#ifndef GDN_HAVE_MPI
        snprintf(err, errlen, "backend mpi: %s", why_no_mpi);
        return NULL;
#endif
        b = DIST_MPI;
    } else if (strcmp(want, "nccl") == 0) {
        if (why_no_nccl) {
            snprintf(err, errlen, "backend nccl: %s", why_no_nccl);
            return NULL;
        }
        b = DIST_NCCL;
    } else {
        snprintf(err, errlen, "backend \"%s\": allowed: auto, mpi, nccl, none", want);
        return NULL;
    }

    dist *d = gdn_malloc(sizeof *d);
    struct dist_impl *m = gdn_malloc(sizeof *m);
    *d = (dist){e.rank, e.world, e.local_rank, e.local_world, b, -1, timeout_s, e.launcher, m};
#ifdef GDN_HAVE_MPI
    m->comm = MPI_COMM_NULL;
#endif
    m->main_thread = pthread_self();
    if (!wd_start(d, err, errlen)) {
        dist_release(d);
        return NULL;
    }
#ifdef GDN_HAVE_MPI
    if ((b == DIST_MPI || (b == DIST_NCCL && e.mpi_launcher)) && !mpi_start(d, &e, err, errlen)) {
        dist_release(d);
        return NULL;
    }
#endif
    if (b == DIST_NCCL) {
        int ndev = nccl->device_count();
        d->device = d->local_rank % ndev;
        unsigned char id[DIST_NCCL_ID_BYTES] = {0};
        if (d->rank == 0 && nccl->unique_id(id, err, errlen)) {
            dist_release(d);  // the other ranks time out waiting for the id
            return NULL;
        }
        const char *path = nccl_id_path && *nccl_id_path ? nccl_id_path
                                                         : getenv("GDN_NCCL_ID_PATH");
        bool by_file = !m->mpi_up && d->world > 1;
        if (m->mpi_up) {
#ifdef GDN_HAVE_MPI
            wd_arm(d, "bcast(nccl id)", DIST_NCCL_ID_BYTES);
            MPI_OK(d, MPI_Bcast(id, DIST_NCCL_ID_BYTES, MPI_BYTE, 0, m->comm));
            wd_disarm(d);
#endif
        } else if (by_file) {
            if (!path || !*path) {
                snprintf(err, errlen, "world %d without MPI: the NCCL id needs a file. HINT: set "
                         "[dist] nccl_id_path to a path every rank sees (or launch with mpirun, "
                         "or use --gpus N on one node)", d->world);
                dist_release(d);
                return NULL;
            }
            bool ok = d->rank == 0 ? id_write(path, id, err, errlen)
                                   : id_read(path, d->rank, timeout_s, id, err, errlen);
            if (!ok) {
                dist_release(d);
                return NULL;
            }
        }
        m->nops = nccl;
        m->nc = nccl->init(id, d->rank, d->world, d->device, timeout_s, err, errlen);
        if (!m->nc) {
            dist_release(d);
            return NULL;
        }
        // init completed on every rank, so every rank has read the file
        if (by_file && d->rank == 0) unlink(path);
    }
    return d;
}

void dist_free(dist *d) {
    if (!d) return;
    struct dist_impl *m = d->impl;
    if (m->nc) {
        // detach first (under wd_mu, so the watchdog is not polling it), then finish it with
        // the watchdog armed: a peer that is gone cannot hang us here
        char err[768];
        pthread_mutex_lock(&m->wd_mu);
        dist_nccl *nc = m->nc;
        m->nc = NULL;
        m->wd_what = "dist_free(nccl)", m->wd_n = 0, m->wd_t0 = gdn_now();
        pthread_mutex_unlock(&m->wd_mu);
        if (m->nops->free(nc, err, sizeof err)) dist_abort(d, err);
        wd_disarm(d);
    }
#ifdef GDN_HAVE_MPI
    if (m->mpi_up) {
        wd_arm(d, "dist_free(mpi)", 0);
        MPI_OK(d, MPI_Comm_free(&m->comm));
        wd_disarm(d);
    }
#endif
    wd_finish(d);
#ifdef GDN_HAVE_MPI
    if (m->mpi_up && m->mpi_ours) {
        m->mpi_up = false;
        int rc = MPI_Finalize();
        if (rc != MPI_SUCCESS) gdn_die("dist: MPI_Finalize failed (code %d)", rc);
    }
    m->mpi_up = false;
#endif
    dist_release(d);
}

// ---- --gpus N: local workers -------------------------------------------------------------------

static volatile sig_atomic_t spawn_forward_sig;

// A signal sent to the parent with kill() (not a terminal's, which the workers get themselves)
// is passed on to the workers.
static void spawn_on_signal(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    if (info && (info->si_code == SI_USER || info->si_code == SI_QUEUE)) spawn_forward_sig = sig;
}

static void spawn_sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int dist_spawn_local(int n, int argc, char **argv) {
    if (getenv("GDN_SPAWNED")) return -1;
    if (n < 1 || argc < 1) gdn_die("dist_spawn_local: n = %d, argc = %d: need n >= 1", n, argc);
    const char *tmpdir = getenv("TMPDIR");
    char dir[4096], idpath[4200], runid[64], buf[32];
    snprintf(dir, sizeof dir, "%s/gdn-dist-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    CHECK_PTR(mkdtemp(dir));
    snprintf(idpath, sizeof idpath, "%s/nccl-id", dir);
    snprintf(runid, sizeof runid, "spawn-%ld-%ld", (long)getpid(), (long)time(NULL));
    char **args = gdn_malloc(sizeof(char *) * ((size_t)argc + 1));
    for (int i = 0; i < argc; i++) args[i] = argv[i];

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = spawn_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    CHECK_SYS(sigemptyset(&sa.sa_mask));
    CHECK_SYS(sigaction(SIGINT, &sa, &old_int));
    CHECK_SYS(sigaction(SIGTERM, &sa, &old_term));

    pid_t parent = getpid();
    pid_t *pids = gdn_malloc(sizeof(pid_t) * (size_t)n);
    fflush(stdout);
    fflush(stderr);
    // SIGINT/SIGTERM stay blocked across fork: a child must not run the parent's handler (it
    // would swallow the signal); it restores the defaults first, then unblocks.
    sigset_t block, old_mask;
    CHECK_SYS(sigemptyset(&block));
    CHECK_SYS(sigaddset(&block, SIGINT));
    CHECK_SYS(sigaddset(&block, SIGTERM));
    int prc = pthread_sigmask(SIG_BLOCK, &block, &old_mask);
    if (prc) gdn_die("dist_spawn_local: pthread_sigmask: %s", strerror(prc));
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        CHECK_SYS(pid);
        if (pid == 0) {
            if (sigaction(SIGINT, &old_int, NULL) || sigaction(SIGTERM, &old_term, NULL) ||
                pthread_sigmask(SIG_SETMASK, &old_mask, NULL))
                _exit(127);
#ifdef __linux__
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(127);
#endif
            if (getppid() != parent) _exit(127);  // the parent died before prctl
            snprintf(buf, sizeof buf, "%d", i);
            int rc = setenv("RANK", buf, 1) | setenv("LOCAL_RANK", buf, 1);
            snprintf(buf, sizeof buf, "%d", n);
            rc |= setenv("WORLD_SIZE", buf, 1) | setenv("LOCAL_WORLD_SIZE", buf, 1);
            rc |= setenv("MASTER_ADDR", "127.0.0.1", 1) | setenv("GDN_NCCL_ID_PATH", idpath, 1);
            rc |= setenv("GDN_RUN_ID", runid, 1) | setenv("GDN_SPAWNED", "1", 1);
            if (rc) {
                perror("dist_spawn_local: setenv");
                _exit(127);
            }
            execv("/proc/self/exe", args);
            fprintf(stderr, "error: dist_spawn_local: execv(/proc/self/exe): %s\n",
                    strerror(errno));
            _exit(127);
        }
        pids[i] = pid;
    }
    prc = pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (prc) gdn_die("dist_spawn_local: pthread_sigmask: %s", strerror(prc));

    int alive = n, first_fail = 0;
    double kill_at = 0;  // after a failure: when SIGKILL follows SIGTERM
    while (alive > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid < 0 && errno != EINTR) CHECK_SYS(pid);
        if (pid > 0) {
            int i = 0;
            while (i < n && pids[i] != pid) i++;
            if (i == n) continue;  // not ours
            pids[i] = 0;
            alive--;
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (code != 0 && first_fail == 0) {
                first_fail = code;
                fflush(stdout);
                if (WIFEXITED(st))
                    fprintf(stderr, "error: dist_spawn_local: worker %d exited with %d", i, code);
                else
                    fprintf(stderr, "error: dist_spawn_local: worker %d killed by signal %d",
                            i, WTERMSIG(st));
                fprintf(stderr, "; stopping the other %d worker(s)\n", alive);
                for (int j = 0; j < n; j++)
                    if (pids[j] > 0) kill(pids[j], SIGTERM);
                kill_at = gdn_now() + 5;
            }
            continue;
        }
        if (spawn_forward_sig) {
            int sig = spawn_forward_sig;
            spawn_forward_sig = 0;
            for (int j = 0; j < n; j++)
                if (pids[j] > 0) kill(pids[j], sig);
        }
        if (kill_at > 0 && gdn_now() > kill_at) {
            for (int j = 0; j < n; j++)
                if (pids[j] > 0) kill(pids[j], SIGKILL);
            kill_at = 0;
        }
        spawn_sleep_ms(20);
    }
    CHECK_SYS(sigaction(SIGINT, &old_int, NULL));
    CHECK_SYS(sigaction(SIGTERM, &old_term, NULL));
    // the id file is normally gone already (rank 0 removes it); leftovers only warrant a word
    if ((unlink(idpath) != 0 && errno != ENOENT) || rmdir(dir) != 0)
        fprintf(stderr, "warning: dist_spawn_local: cannot remove %s: %s\n", dir, strerror(errno));
    free(pids);
    free(args);
    return first_fail;
}
