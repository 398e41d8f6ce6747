// test_dist_mpi.c — the communicator (src/dist) on CPUs. Run alone (ctest: world 1, backend
// none) it checks the launcher-environment parser on made-up environments, dist_init's
// refusals, the NCCL-id file (with a stand-in NCCL backend) and the collectives as identity
// maps. Under `mpirun -np W` (tests/test_dist.sh, W = 2) the same collectives run on MPI:
//   allreduce of rank-dependent data == closed-form sum (exact: small integers and halves),
//   random float64 data == the sum in rank order within 1e-12 relative, identical bytes on
//   every rank; reduce-scatter then allgather == allreduce for awkward n; bcast; scalars.
// Other modes (driven by tests/test_dist.sh; each must end the job, never hang):
//   timeout T   rank 1 skips a collective: rank 0's watchdog aborts after T s
//   die         rank 1 exits 3 before a collective: the launcher ends rank 0
//   spawn       dist_spawn_local(3): workers get RANK/WORLD_SIZE/..., exchange an id by file
//   spawn-fail  dist_spawn_local(3): worker 1 exits 3, the others hang; the parent returns 3
//   nccl-id     under mpirun: dist_init("nccl") with the stand-in backend sends rank 0's
//               (random) id by MPI_Bcast; every rank must receive the same bytes
//   has-mpi     exit 0 when gdn was built with MPI
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "../src/dist/dist.h"
#include "testutil.h"
#ifdef GDN_HAVE_MPI
#include <mpi.h>
#endif

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char rank_tag[16] = "";  // "[r1] " under mpirun: every rank prints its own checks

static void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  %s", rank_tag);
    vprintf(fmt, ap);
    printf("%*s%s\n", 2, "", ok ? "pass" : "FAIL");
    va_end(ap);
    gc_checks++;
    if (!ok) gc_failures++;
}

// ---- made-up environments (world 1 only: dist_env_read has no side effects) -----------------

static const char *const env_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "GDN_RUN_ID", "GDN_NCCL_ID_PATH"};

static void env_clear(void) {
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++) unsetenv(env_vars[i]);
}

// Set "NAME=value" pairs (NULL-terminated), read, compare with the expectation.
static void env_case(const char *what, const char *const *kv, bool want_ok, int rank, int world,
                     int lrank, const char *launcher, bool mpi, const char *want_err) {
    env_clear();
    for (int i = 0; kv[i]; i++) {
        char name[64];
        const char *eq = strchr(kv[i], '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - kv[i]), kv[i]);
        setenv(name, eq + 1, 1);
    }
    dist_env e;
    char err[512] = "";
    bool ok = dist_env_read(&e, err, sizeof err);
    bool good = ok == want_ok;
    if (ok && want_ok)
        good = e.rank == rank && e.world == world && e.local_rank == lrank &&
               strcmp(e.launcher, launcher) == 0 && e.mpi_launcher == mpi;
    if (!ok && !want_ok) good = strstr(err, want_err) != NULL;
    if (ok)
        check(good, "env %-40s -> rank %d/%d local %d/%d %-8s mpi %d", what, e.rank, e.world,
              e.local_rank, e.local_world, e.launcher, e.mpi_launcher);
    else
        check(good, "env %-40s -> error: %s", what, err);
    env_clear();
}

static void test_env(void) {
    printf("\n== launcher environment (made up)\n");
    env_case("(nothing)", (const char *[]){NULL}, true, 0, 1, 0, "none", false, NULL);
    env_case("torchrun 3/4 local 1/2",
             (const char *[]){"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                              NULL}, true, 3, 4, 1, "torchrun", false, NULL);
    env_case("torchrun without LOCAL_RANK", (const char *[]){"RANK=1", "WORLD_SIZE=2", NULL},
             true, 1, 2, 1, "torchrun", false, NULL);
    env_case("mpirun 1/2", (const char *[]){"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                                            "OMPI_COMM_WORLD_LOCAL_RANK=1",
                                            "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL},
             true, 1, 2, 1, "mpirun", true, NULL);
    env_case("mpiexec (MPICH) 2/3", (const char *[]){"PMI_RANK=2", "PMI_SIZE=3", NULL}, true, 2,
             3, 2, "mpiexec", true, NULL);
    env_case("srun 5/8 local 1",
             (const char *[]){"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_STEP_NUM_TASKS=8",
                              "SLURM_LOCALID=1", NULL}, true, 5, 8, 1, "slurm", false, NULL);
    env_case("sbatch script (no step): world 1",
             (const char *[]){"SLURM_PROCID=0", "SLURM_NTASKS=8", NULL}, true, 0, 1, 0, "none",
             false, NULL);
    env_case("torchrun inside srun: torchrun wins",
             (const char *[]){"SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_LOCALID=0",
                              "RANK=6", "WORLD_SIZE=8", "LOCAL_RANK=2", NULL},
             true, 6, 8, 2, "torchrun", false, NULL);
    env_case("mpirun inside srun: mpirun wins",
             (const char *[]){"SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=1", "SLURM_LOCALID=0",
                              "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", NULL},
             true, 3, 4, 3, "mpirun", true, NULL);
    env_case("RANK=2 WORLD_SIZE=2", (const char *[]){"RANK=2", "WORLD_SIZE=2", NULL}, false, 0,
             0, 0, NULL, false, "need 0 <= rank < world");
    env_case("RANK=x", (const char *[]){"RANK=x", "WORLD_SIZE=2", NULL}, false, 0, 0, 0, NULL,
             false, "RANK=\"x\" is not a non-negative integer");
    env_case("RANK without WORLD_SIZE", (const char *[]){"RANK=0", NULL}, false, 0, 0, 0, NULL,
             false, "RANK is set but WORLD_SIZE is not");
    env_case("LOCAL_RANK=4 of LOCAL_WORLD_SIZE=4",
             (const char *[]){"RANK=0", "WORLD_SIZE=8", "LOCAL_RANK=4", "LOCAL_WORLD_SIZE=4",
                              NULL}, false, 0, 0, 0, NULL, false, "local rank 4 of 4");
}

// ---- a stand-in NCCL backend: checks the id exchange of dist_init without a GPU --------------

struct dist_nccl {
    unsigned char id[DIST_NCCL_ID_BYTES];
};

// The id rank 0 "generates": derived from GDN_RUN_ID when it is set (dist_spawn_local), so
// every worker knows what to expect; else from rank 0's pid and clock (nobody else knows it).
static void fake_id(unsigned char *id) {
    const char *k = getenv("GDN_RUN_ID");
    uint64_t h = 1469598103934665603ull;
    for (const char *c = k ? k : ""; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    if (!k) h ^= (uint64_t)getpid() << 32 ^ (uint64_t)(gdn_now() * 1e6);
    for (int i = 0; i < DIST_NCCL_ID_BYTES; i++)
        id[i] = (unsigned char)(rng_uniform_at(h, i) * 256);
}
static unsigned char fake_got_id[DIST_NCCL_ID_BYTES];  // what fake_init received
static const char *fake_unavailable(void) { return NULL; }
static int fake_device_count(void) { return 1; }
static int fake_unique_id(unsigned char *id, char *err, size_t errlen) {
    (void)err, (void)errlen;
    fake_id(id);
    return 0;
}
static dist_nccl *fake_init(const unsigned char *id, int rank, int world, int device,
                            int timeout_s, char *err, size_t errlen) {
    (void)device;
    unsigned char want[DIST_NCCL_ID_BYTES];
    fake_id(want);
    memcpy(fake_got_id, id, sizeof fake_got_id);
    if (getenv("GDN_RUN_ID") && memcmp(id, want, sizeof want) != 0) {
        snprintf(err, errlen, "fake nccl init: received id differs from rank 0's");
        return NULL;
    }
    // NCCL's init is collective: rank 0 returns only once every rank has joined (and so has
    // read the id file, which dist_init then removes). Emulated with marker files.
    const char *idp = getenv("GDN_NCCL_ID_PATH");
    char mark[4200];
    if (idp && world > 1 && rank > 0) {
        snprintf(mark, sizeof mark, "%s.joined.%d", idp, rank);
        FILE *f = fopen(mark, "w");
        if (!f || fclose(f) != 0) gdn_die("cannot create %s", mark);
    }
    for (int r = 1; idp && rank == 0 && r < world; r++) {
        snprintf(mark, sizeof mark, "%s.joined.%d", idp, r);
        double t0 = gdn_now();
        while (access(mark, F_OK) != 0) {
            if (gdn_now() - t0 > timeout_s) {
                snprintf(err, errlen, "fake nccl init: rank %d did not join in %d s", r, timeout_s);
                return NULL;
            }
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (unlink(mark) != 0) gdn_die("cannot remove %s", mark);
    }
    dist_nccl *c = gdn_malloc(sizeof *c);
    memcpy(c->id, id, sizeof c->id);
    return c;
}
static int fake_coll(dist_nccl *c, dist_coll op, dist_dtype dt, void *buf, size_t n, int root,
                     void *stream, bool host, const char *name, char *err, size_t errlen) {
    (void)c, (void)op, (void)dt, (void)buf, (void)n, (void)root, (void)stream, (void)host;
    snprintf(err, errlen, "fake nccl: %s is not implemented", name);
    return -1;
}
static int fake_poll(dist_nccl *c, double timeout_s, char *err, size_t errlen) {
    (void)c, (void)timeout_s, (void)err, (void)errlen;
    return 0;
}
static void fake_abort(dist_nccl *c) { (void)c; }
static int fake_free(dist_nccl *c, char *err, size_t errlen) {
    (void)err, (void)errlen;
    free(c);
    return 0;
}
static const dist_nccl_ops fake_ops = {fake_unavailable, fake_device_count, fake_unique_id,
                                       fake_init, fake_coll, fake_poll, fake_abort, fake_free,
                                       NULL};  // time_next: no timeline in the stand-in

// dist_init must refuse with a message containing want_err.
static void init_refuses(const char *what, const char *want, int timeout_s, const char *path,
                         const dist_nccl_ops *ops, const char *want_err) {
    char err[768] = "";
    double t0 = gdn_now();
    dist *d = dist_init_with(want, timeout_s, path, ops, err, sizeof err);
    check(!d && strstr(err, want_err), "dist_init %-34s refused in %.1f s: %s", what,
          gdn_now() - t0, err);
    if (d) dist_free(d);
}

static void test_refusals(void) {
    printf("\n== dist_init refusals (world 1 process, made-up environments)\n");
    init_refuses("(\"bogus\")", "bogus", 10, NULL, NULL, "allowed: auto, mpi, nccl, none");
    init_refuses("(\"nccl\") without the CUDA backend", "nccl", 10, NULL, NULL,
                 "not linked with the CUDA backend");
    init_refuses("(\"auto\", timeout 0)", "auto", 0, NULL, NULL, "timeout_s = 0");
    setenv("RANK", "1", 1), setenv("WORLD_SIZE", "2", 1);
    init_refuses("(\"none\") with WORLD_SIZE=2", "none", 10, NULL, NULL,
                 "backend none, but the torchrun environment says world 2");
    init_refuses("(\"auto\") world 2, no NCCL, no mpirun", "auto", 10, NULL, NULL,
                 "no backend can carry it");
    init_refuses("(\"nccl\") world 2 without an id path", "nccl", 10, NULL, &fake_ops,
                 "HINT: set [dist] nccl_id_path");
    // a file left by another run (another key) is not taken: rank 1 waits, then times out
    char path[256];
    snprintf(path, sizeof path, "%s/gdn-test-dist-%ld.id", getenv("TMPDIR") ? getenv("TMPDIR")
             : "/tmp", (long)getpid());
    FILE *f = fopen(path, "w");
    if (!f) gdn_die("cannot create %s", path);
    fprintf(f, "gdn-nccl-id 1 old-run ");
    for (int i = 0; i < DIST_NCCL_ID_BYTES; i++) fprintf(f, "00");
    fprintf(f, "\n");
    if (fclose(f) != 0) gdn_die("cannot write %s", path);
    setenv("GDN_RUN_ID", "this-run", 1);
    init_refuses("(\"nccl\") rank 1, stale id file", "nccl", 1, path, &fake_ops,
                 "a file from another run is there");
    f = fopen(path, "w");
    if (!f) gdn_die("cannot create %s", path);
    fprintf(f, "not an id\n");
    if (fclose(f) != 0) gdn_die("cannot write %s", path);
    init_refuses("(\"nccl\") rank 1, garbage id file", "nccl", 1, path, &fake_ops,
                 "is not a gdn NCCL id file");
    unlink(path);
    env_clear();
}

// ---- collectives ---------------------------------------------------------------------------

// Two sums of the same W terms in different orders differ by at most 2 (W-1) u sum_r |x_r|
// (u = unit roundoff), so errors are measured relative to mag_i = sum_r |x_r,i|, not to the
// sum itself (which may cancel to ~0): max_i |a_i - b_i| / mag_i.
static double sum_err(const double *a, const double *b, const double *mag, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]) / fmax(mag[i], 1e-300));
    return w;
}

// rank r's random data for the test with key `key`
static void rank_data(double *x, size_t n, uint64_t key, int r) {
    for (size_t i = 0; i < n; i++) x[i] = 2 * rng_uniform_at(key * 1000 + (uint64_t)r, i) - 1;
}

// mag[i] = sum over ranks of |rank r's x_i|
static void rank_mag(double *mag, size_t n, uint64_t key, int world) {
    double *t = dalloc(n);
    memset(mag, 0, n * sizeof *mag);
    for (int r = 0; r < world; r++) {
        rank_data(t, n, key, r);
        for (size_t i = 0; i < n; i++) mag[i] += fabs(t[i]);
    }
    free(t);
}

// A sum test's buffers: this rank's data x (f64) and y (its f32 rounding), `cap` elements each
// (n used), mag = sum over ranks of |x_i|, and the all-reduce's sums ref, yref to compare with.
typedef struct {
    double *x, *ref, *mag;
    float *y, *yref;
} sum_case;
static sum_case sum_case_make(dist *d, size_t n, size_t cap, uint64_t key) {
    sum_case c = {dalloc(cap), dalloc(n), dalloc(n), gdn_malloc(cap * sizeof(float)),
                  gdn_malloc(n * sizeof(float))};
    rank_mag(c.mag, n, key, d->world);
    rank_data(c.x, n, key, d->rank);
    for (size_t i = 0; i < n; i++) c.y[i] = (float)c.x[i];
    memcpy(c.ref, c.x, n * sizeof *c.x);
    memcpy(c.yref, c.y, n * sizeof *c.y);
    dist_allreduce_sum_f64(d, c.ref, n);
    dist_allreduce_sum_f32(d, c.yref, n, NULL);
    return c;
}
static void sum_case_free(sum_case *c) { free(c->x), free(c->ref), free(c->mag), free(c->y), free(c->yref); }

// every rank holds the same bytes as rank 0
static bool same_on_all(dist *d, const void *x, size_t bytes) {
    unsigned char *r0 = gdn_malloc(bytes);
    memcpy(r0, x, bytes);
    dist_bcast_bytes(d, r0, bytes, 0);
    int differ = memcmp(r0, x, bytes) != 0;
    free(r0);
    return dist_scalar_max_f64(d, differ) == 0;
}

static void test_collectives(dist *d) {
    const int W = d->world, R = d->rank;
    printf("\n== collectives: rank %d of %d, backend %s\n", R, W, dist_backend_name(d->backend));

    // closed form: x_i = (r+1)(i+1) + r/2  ->  sum_r = (i+1) W(W+1)/2 + W(W-1)/4
    const size_t sizes[] = {1, 7, 1000, 4099};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        double *x = dalloc(n);
        float *y = gdn_malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            x[i] = (R + 1.0) * (double)(i + 1) + 0.5 * R;
            y[i] = (float)((R + 1) * (int)(i % 1000 + 1)) + 0.5f * (float)R;
        }
        dist_allreduce_sum_f64(d, x, n);
        dist_allreduce_sum_f32(d, y, n, NULL);
        size_t bad64 = 0, bad32 = 0;
        for (size_t i = 0; i < n; i++) {
            bad64 += x[i] != (double)(i + 1) * W * (W + 1) / 2 + W * (W - 1) / 4.0;
            bad32 += y[i] != (float)((int)(i % 1000 + 1) * W * (W + 1) / 2) + W * (W - 1) / 4.0f;
        }
        check(bad64 == 0 && bad32 == 0, "allreduce_sum f64/f32 n=%-5zu == closed form "
              "(%zu, %zu wrong)", n, bad64, bad32);
        free(x);
        free(y);
    }

    // random data against the sum in rank order, and identical bytes everywhere
    {
        size_t n = 5003;
        double *x = dalloc(n), *ref = dalloc(n), *t = dalloc(n), *mag = dalloc(n);
        for (int r = 0; r < W; r++) {
            rank_data(t, n, 7, r);
            for (size_t i = 0; i < n; i++) ref[i] += t[i];
        }
        rank_mag(mag, n, 7, W);
        rank_data(x, n, 7, R);
        dist_allreduce_sum_f64(d, x, n);
        double e = sum_err(x, ref, mag, n);
        check(e <= 1e-12, "allreduce_sum_f64 random n=%zu vs rank-order sum: max err/sum|x| "
              "%.2e (tol 1e-12)", n, e);
        check(same_on_all(d, x, n * sizeof *x), "allreduce_sum_f64 result identical (bytes) "
              "on all %d ranks", W);
        free(x), free(ref), free(t), free(mag);
    }

    // shards partition [0, n)
    {
        const size_t ns[] = {0, 1, 2, 3, 5, 1000, 1001};
        bool ok = true;
        for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
            size_t n = ns[s], next = 0;
            size_t c = dist_shard_capacity(d, n);
            ok &= c >= n && c % (size_t)W == 0 && c < n + (size_t)W;
            for (int r = 0; r < W; r++) {
                dist f = *d;
                f.rank = r;
                size_t lo, hi;
                dist_shard_range(&f, n, &lo, &hi);
                ok &= lo == next && hi >= lo && hi - lo <= GDN_CDIV(n, (size_t)W);
                next = hi;
            }
            ok &= next == n;
        }
        check(ok, "shard ranges partition [0, n) for n in {0,1,2,3,5,1000,1001}");
    }

    // reduce-scatter + allgather == allreduce (n < world gives empty shards); f32 to within
    // the reordering bound 2 (W-1) 2^-24 sum|x| (0 for W <= 2: a + b == b + a)
    const size_t rsn[] = {1, 2, 3, 5, 1000, 1001};
    const double tol32 = 2.0 * (W - 1) * ldexp(1.0, -24);
    for (size_t s = 0; s < sizeof rsn / sizeof rsn[0]; s++) {
        size_t n = rsn[s], cap = dist_shard_capacity(d, n), lo, hi;
        dist_shard_range(d, n, &lo, &hi);
        sum_case c = sum_case_make(d, n, cap, 11 + s);
        double *x = c.x, *ref = c.ref, *mag = c.mag;
        float *y = c.y, *yref = c.yref;
        dist_reduce_scatter_sum_f64(d, x, n);
        dist_reduce_scatter_sum_f32(d, y, n, NULL);
        double e_rs = hi > lo ? sum_err(x + lo, ref + lo, mag + lo, hi - lo) : 0, e_rs32 = 0;
        for (size_t i = lo; i < hi; i++)
            e_rs32 = fmax(e_rs32, fabs((double)y[i] - yref[i]) / mag[i]);
        dist_allgather_f64(d, x, n);
        dist_allgather_f32(d, y, n, NULL);
        double e_ag = sum_err(x, ref, mag, n), e_ag32 = 0;
        for (size_t i = 0; i < n; i++) e_ag32 = fmax(e_ag32, fabs((double)y[i] - yref[i]) / mag[i]);
        check(e_rs <= 1e-12 && e_ag <= 1e-12 && e_rs32 <= tol32 && e_ag32 <= tol32,
              "reduce_scatter+allgather n=%-4zu shard [%zu,%zu) == allreduce: f64 %.1e %.1e, "
              "f32 %.1e %.1e (tol %.1e)", n, lo, hi, e_rs, e_ag, e_rs32, e_ag32, tol32);
        sum_case_free(&c);
    }

    // reduce to each root in turn (ZeRO-1's gradient pieces): the root gets the allreduce's
    // sum (f64 within 1e-12, f32 within the reordering bound); the other ranks' buffers are
    // not checked (unspecified)
    for (int root = 0; root < W; root++) {
        const size_t n = 1001;
        sum_case c = sum_case_make(d, n, n, 31 + root);
        double *x = c.x, *ref = c.ref, *mag = c.mag;
        float *y = c.y, *yref = c.yref;
        dist_reduce_sum_f64(d, x, n, root);
        dist_reduce_sum_f32_async(d, y, n, root, NULL);
        dist_wait_async(d, NULL);
        double e = 0, e32 = 0;
        if (R == root) {
            e = sum_err(x, ref, mag, n);
            for (size_t i = 0; i < n; i++) e32 = fmax(e32, fabs((double)y[i] - yref[i]) / mag[i]);
        }
        double worst = dist_scalar_max_f64(d, fmax(e / 1e-12, e32 / fmax(tol32, 1e-300)));
        check(worst <= 1.0, "reduce to root %d n=%zu == allreduce on the root: f64 %.1e, f32 %.1e "
              "(tol %.1e)", root, n, e, e32, tol32);
        sum_case_free(&c);
    }

    // allgather alone: shard i of the result is what rank i held there
    {
        size_t n = 37, cap = dist_shard_capacity(d, n), lo, hi;
        double *x = dalloc(cap);
        dist_shard_range(d, n, &lo, &hi);
        for (size_t i = 0; i < n; i++) x[i] = i >= lo && i < hi ? 100.0 * R + (double)i : -1;
        dist_allgather_f64(d, x, n);
        size_t bad = 0, c = GDN_CDIV(n, (size_t)W);
        for (size_t i = 0; i < n; i++) bad += x[i] != 100.0 * (double)(i / c) + (double)i;
        check(bad == 0, "allgather_f64 n=%zu: shard i comes from rank i (%zu wrong)", n, bad);
        free(x);
    }

    // bcast from every root, odd byte counts
    for (int root = 0; root < W; root++) {
        size_t nb = 1 + 333 * (size_t)(root + 1);
        unsigned char *b = gdn_malloc(nb);
        for (size_t i = 0; i < nb; i++) b[i] = R == root ? (unsigned char)(i * 7 + root) : 0;
        dist_bcast_bytes(d, b, nb, root);
        size_t bad = 0;
        for (size_t i = 0; i < nb; i++) bad += b[i] != (unsigned char)(i * 7 + root);
        check(bad == 0, "bcast_bytes root %d, %zu bytes (%zu wrong)", root, nb, bad);
        free(b);
    }

    double s = dist_scalar_sum_f64(d, R + 1.0), mx = dist_scalar_max_f64(d, 3.5 * R - 1);
    check(s == W * (W + 1) / 2.0 && mx == 3.5 * (W - 1) - 1,
          "scalar sum(rank+1) = %g (want %g), max(3.5 rank - 1) = %g (want %g)", s,
          W * (W + 1) / 2.0, mx, 3.5 * (W - 1) - 1);
    double t0 = gdn_now();
    dist_barrier(d);
    check(true, "barrier returned after %.3f s", gdn_now() - t0);
}

// ---- modes ---------------------------------------------------------------------------------

static dist *init_or_die(const char *want, int timeout_s) {
    char err[768];
    dist *d = dist_init(want, timeout_s, NULL, err, sizeof err);
    if (!d) gdn_die("dist_init(%s): %s", want, err);
    return d;
}

// rank 1 skips the collective and stays busy; rank 0 waits in it until the watchdog fires
static int mode_timeout(int timeout_s) {
    dist *d = init_or_die("auto", timeout_s);
    if (d->world < 2) gdn_die("mode timeout needs 2 ranks (world %d)", d->world);
    printf("rank %d: %s\n", d->rank, d->rank == 1 ? "skipping the allreduce" : "allreduce");
    fflush(stdout);
    double x[4] = {1, 2, 3, 4};
    if (d->rank == 1) {
        sleep(60);
        printf("rank 1: still alive after 60 s: FAIL\n");
        return 1;
    }
    dist_allreduce_sum_f64(d, x, 4);
    printf("rank %d: the allreduce returned without rank 1: FAIL\n", d->rank);
    return 1;
}

// rank 1 dies before the collective; rank 0 must not wait for its watchdog
static int mode_die(void) {
    dist *d = init_or_die("auto", 60);
    if (d->world < 2) gdn_die("mode die needs 2 ranks (world %d)", d->world);
    if (d->rank == 1) {
        fprintf(stderr, "rank 1: exiting with 3 before the allreduce\n");
        exit(3);
    }
    double x[4] = {1, 2, 3, 4};
    dist_allreduce_sum_f64(d, x, 4);
    printf("rank %d: the allreduce returned without rank 1: FAIL\n", d->rank);
    return 1;
}

static int mode_spawn(int argc, char **argv, bool fail) {
    int rc = dist_spawn_local(3, argc, argv);
    if (rc >= 0) {  // the parent
        printf("parent: workers done, dist_spawn_local returned %d\n", rc);
        return rc;
    }
    const char *idp = getenv("GDN_NCCL_ID_PATH");
    dist_env e;
    char err[768];
    if (!dist_env_read(&e, err, sizeof err)) gdn_die("worker: %s", err);
    if (fail) {
        if (e.rank == 1) {
            fprintf(stderr, "worker 1: exiting with 3\n");
            exit(3);
        }
        sleep(60);
        printf("worker %d: not stopped after 60 s: FAIL\n", e.rank);
        return 1;
    }
    bool env_ok = e.world == 3 && e.local_rank == e.rank && e.local_world == 3 &&
                  strcmp(e.launcher, "torchrun") == 0 && idp && getenv("GDN_RUN_ID");
    dist *d = dist_init_with("nccl", 10, NULL, &fake_ops, err, sizeof err);
    if (!d) {
        printf("worker %d: dist_init: %s: FAIL\n", e.rank, err);
        return 1;
    }
    bool gone = access(idp, F_OK) != 0;  // rank 0 removes the id file once init is done
    printf("worker %d/%d: env %s, id from %s matches rank 0's, id file %s\n", d->rank, d->world,
           env_ok ? "ok" : "WRONG", d->rank ? "file" : "itself",
           d->rank == 0 ? (gone ? "removed" : "NOT REMOVED") : "-");
    dist_free(d);
    return env_ok && (e.rank != 0 || gone) ? 0 : 1;
}

// under mpirun: the id travels by MPI_Bcast; compare what every rank got
static int mode_nccl_id_mpi(void) {
#ifdef GDN_HAVE_MPI
    char err[768];
    dist *d = dist_init_with("nccl", 10, NULL, &fake_ops, err, sizeof err);
    if (!d) gdn_die("dist_init(nccl, stand-in backend): %s", err);
    unsigned char lo[DIST_NCCL_ID_BYTES], hi[DIST_NCCL_ID_BYTES];
    int nonzero = 0;
    for (int i = 0; i < DIST_NCCL_ID_BYTES; i++) nonzero += fake_got_id[i] != 0;
    CHECK_MPI(MPI_Allreduce(fake_got_id, lo, DIST_NCCL_ID_BYTES, MPI_UNSIGNED_CHAR, MPI_MIN,
                            MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(fake_got_id, hi, DIST_NCCL_ID_BYTES, MPI_UNSIGNED_CHAR, MPI_MAX,
                            MPI_COMM_WORLD));
    bool same = memcmp(lo, hi, sizeof lo) == 0 && nonzero > 100;
    printf("rank %d/%d (%s): NCCL id by MPI_Bcast: %s (%d of %d bytes non-zero)\n", d->rank,
           d->world, dist_backend_name(d->backend), same ? "same on every rank" : "DIFFERS: FAIL",
           nonzero, DIST_NCCL_ID_BYTES);
    dist_free(d);
    return same ? 0 : 1;
#else
    gdn_die("mode nccl-id needs MPI");
#endif
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "has-mpi") == 0) {
#ifdef GDN_HAVE_MPI
        return 0;
#else
        printf("gdn was built without MPI\n");
        return 1;
#endif
    }
    if (strcmp(mode, "timeout") == 0) return mode_timeout(argc > 2 ? atoi(argv[2]) : 2);
    if (strcmp(mode, "die") == 0) return mode_die();
    if (strcmp(mode, "spawn") == 0) return mode_spawn(argc, argv, false);
    if (strcmp(mode, "spawn-fail") == 0) return mode_spawn(argc, argv, true);
    if (strcmp(mode, "nccl-id") == 0) return mode_nccl_id_mpi();
    if (*mode) gdn_die("unknown mode %s (timeout T | die | spawn | spawn-fail | nccl-id | has-mpi)",
                      mode);

    dist_env e;
    char err[768];
    if (!dist_env_read(&e, err, sizeof err)) gdn_die("dist_env_read: %s", err);
    bool alone = strcmp(e.launcher, "none") == 0;
    if (alone) {
        test_env();
        test_refusals();
    }
    dist *d = init_or_die("auto", 20);
    if (d->world > 1) snprintf(rank_tag, sizeof rank_tag, "[r%d] ", d->rank);
    printf("\n== dist_init(auto): rank %d/%d local %d/%d backend %s launcher %s\n", d->rank,
           d->world, d->local_rank, d->local_world, dist_backend_name(d->backend), d->launcher);
    check(d->rank == e.rank && d->world == e.world && d->local_rank == e.local_rank,
          "rank/world/local rank agree with the %s environment (%d/%d local %d)", e.launcher,
          e.rank, e.world, e.local_rank);
    check(d->backend == (alone ? DIST_NONE : DIST_MPI), "backend %s for launcher %s",
          dist_backend_name(d->backend), e.launcher);
    test_collectives(d);
    dist_free(d);
    return gc_finish(alone ? "test_dist_mpi (1 process)" : "test_dist_mpi (mpirun)");
}
