// test_fuzz_readers.c — the HDF5 readers on damaged and foreign files: the token file reader
// (tokfile_open + tokfile_read, src/data/dataset.h) and the checkpoint reader (checkpoint_load and
// checkpoint_verify, src/model/checkpoint.h). From one valid file of each, written by the
// library's own writers, a fixed-seed corpus:
//   - truncated: to 0, 1, 8, 100, 512 bytes, a quarter, a half, all but 1 and 8 bytes, and 12
//     random lengths;
//   - bit-flipped: one bit at 120 random places over the whole file, 80 in the first 4 KiB and
//     40 in the last 4 KiB (where HDF5 keeps most metadata); 16 random 16-byte runs;
//   - foreign shapes and types written through HDF5: datasets of the wrong type (int32, float32,
//     uint8, uint64, int64, a string) or shape (2-D, 3-D, a scalar, empty), a group where a
//     dataset belongs and the reverse, a dataset missing, attributes of the wrong type or value.
// Each case runs in a child process with a time bound and must end as either
//   - refused: the reader returns false with a message naming the file; or
//   - accepted with exactly the original content (every token; every parameter and AdamW moment
//     bitwise): a flip that lands where nothing is read;
// never a crash, a hang, a sanitizer report (CI runs this under ASan + UBSan) or content that
// differs from what was written (the checksums catch every flip of a checkpoint's and a token
// file's data: both are written with HDF5's Fletcher32 filter and checksummed metadata).
//   usage: test_fuzz_readers [SEED]   (default 1)
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../src/core/rng.h"
#include "../src/data/dataset.h"
#include "../src/model/backend.h"
#include "../src/model/checkpoint.h"
#include "../src/model/model.h"
#include "fileutil.h"
#include "testutil.h"
#include "tiny_model.h"

#define CASE_SECONDS 20

static char dir[256];
static char errp[300];

// ---- the originals ------------------------------------------------------------------------

enum { VOCAB = 300, N_TRAIN = 5000, N_VAL = 700 };
static uint32_t train_tok[N_TRAIN], val_tok[N_VAL];
static model *orig;

static gdn_config fuzz_config(void) { return tiny_config("GS", 2); }

static model *new_model(void) {
    gdn_config c = fuzz_config();
    return model_create(&c, &backend_cpu, 2, 8);
}

// ---- the children: exit 0 accepted with the original content, 2 refused naming the file,
// 4 accepted with other content, 5 the two checkpoint readers disagree --------------------

// Damaged copies must read as the original or be refused (strict); a foreign file that is
// accepted may hold other content (a valid empty split, say).
static bool strict = true;

static int token_child(const char *path) {
    token_file f;
    char err[2048];
    if (!tokfile_open(&f, path, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return strstr(err, path) ? 2 : 6;
    }
    const uint32_t *want[2] = {train_tok, val_tok};
    const uint64_t n[2] = {N_TRAIN, N_VAL};
    int rc = 0;
    for (int s = 0; s < 2 && rc == 0 && strict; s++) {
        if (f.n_tokens[s] != n[s]) {
            fprintf(stderr, "accepted with %llu tokens in split %d, written %llu\n",
                    (unsigned long long)f.n_tokens[s], s, (unsigned long long)n[s]);
            rc = 4;
            break;
        }
        int32_t *got = gdn_malloc(n[s] * sizeof(int32_t));
        tokfile_read(&f, s, 0, n[s], got);
        for (uint64_t i = 0; i < n[s]; i++)
            if ((uint32_t)got[i] != want[s][i]) {
                fprintf(stderr, "accepted, but token %llu of split %d is %d, written %u\n",
                        (unsigned long long)i, s, got[i], want[s][i]);
                rc = 4;
                break;
            }
        free(got);
    }
    tokfile_close(&f);
    return rc;
}

static int ckpt_child(const char *path) {
    char err[2048], verr[2048];
    model *m = new_model();
    train_state st = {0};
    bool loaded = checkpoint_load(path, m, &st, err, sizeof err);
    bool verified = checkpoint_verify(path, NULL, verr, sizeof verr);
    int rc;
    if (loaded != verified) {
        fprintf(stderr, "load %s, verify %s: %s | %s\n", loaded ? "accepts" : "refuses",
                verified ? "accepts" : "refuses", loaded ? "" : err, verified ? "" : verr);
        rc = 5;
    } else if (!loaded) {
        fprintf(stderr, "%s\n", err);
        rc = strstr(err, path) && strstr(verr, path) ? 2 : 6;
    } else {
        rc = !strict || (tiny_same_state(m, orig) && st.step == 12) ? 0 : 4;
        if (rc) fprintf(stderr, "accepted with a different state\n");
    }
    model_free(m);
    return rc;
}

// ---- running one case ---------------------------------------------------------------------

static int n_cases, n_refused, n_accepted, n_bad;
static double worst;

static void run_case(const char *what, const char *path, int (*fn)(const char *)) {
    fflush(stdout);
    double t0 = gdn_now();
    pid_t pid = fork();
    CHECK_SYS(pid);
    if (pid == 0) {
        alarm(CASE_SECONDS);
        int fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 2) < 0) _exit(99);
        close(fd);
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        _exit(fn(path));  // no leak check here: libhdf5 leaks on some damaged files (its own allocations)
    }
    int st = 0;
    CHECK_SYS(waitpid(pid, &st, 0));
    double dt = gdn_now() - t0;
    worst = GDN_MAX(worst, dt);
    n_cases++;
    const char *why = NULL;
    if (WIFSIGNALED(st)) why = WTERMSIG(st) == SIGALRM ? "hang (time bound)" : "crash (signal)";
    else if (WEXITSTATUS(st) == 0) n_accepted++;
    else if (WEXITSTATUS(st) == 2) n_refused++;
    else if (WEXITSTATUS(st) == 4) why = "accepted with content other than what was written";
    else if (WEXITSTATUS(st) == 5) why = "checkpoint_load and checkpoint_verify disagree";
    else if (WEXITSTATUS(st) == 6) why = "refused without naming the file";
    else why = "exit code (a fatal error or a sanitizer report)";
    if (why) {
        n_bad++;
        char *msg = slurp(errp), keep[320];
        snprintf(keep, sizeof keep, "%s/fail-%d.h5", dir, n_bad);  // the input, kept to reproduce
        copy_file(path, keep);
        printf("  FAIL  %s: %s (status %d, signal %d, %.1f s; input kept as %s)\n%s\n", what, why,
               WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0, dt, keep, msg);
        free(msg);
    }
}

// Truncations and flips of `good` (each in a copy at `bad`), run through fn.
static void damage(const char *kind, const char *good, const char *bad, int (*fn)(const char *),
                   rng_t *r) {
    const off_t size = file_size(good);
    char what[160];
    off_t lens[25] = {0, 1, 8, 100, 512, size / 4, size / 2, size - 1, size - 8};
    int nl = 9;
    while (nl < 21) lens[nl++] = (off_t)rng_below(r, (uint64_t)size);
    for (int i = 0; i < nl; i++) {
        copy_file(good, bad);
        if (truncate(bad, lens[i]) != 0) gdn_die("truncate");
        snprintf(what, sizeof what, "%s truncated to %lld of %lld bytes", kind, (long long)lens[i],
                 (long long)size);
        run_case(what, bad, fn);
    }
    for (int i = 0; i < 240; i++) {
        off_t at = i < 120 ? (off_t)rng_below(r, (uint64_t)size)
                 : i < 200 ? (off_t)rng_below(r, (uint64_t)GDN_MIN(size, (off_t)4096))
                           : size - 1 - (off_t)rng_below(r, (uint64_t)GDN_MIN(size, (off_t)4096));
        unsigned char bit = (unsigned char)(1u << rng_below(r, 8));
        copy_file(good, bad);
        xor_bytes(bad, at, &bit, 1);
        snprintf(what, sizeof what, "%s with bit 0x%02x of byte %lld flipped", kind, bit, (long long)at);
        run_case(what, bad, fn);
    }
    for (int i = 0; i < 16; i++) {
        unsigned char x[16];
        for (int k = 0; k < 16; k++) x[k] = (unsigned char)(1 + rng_below(r, 255));
        off_t at = (off_t)rng_below(r, (uint64_t)(size - 16));
        copy_file(good, bad);
        xor_bytes(bad, at, x, 16);
        snprintf(what, sizeof what, "%s with 16 bytes at %lld changed", kind, (long long)at);
        run_case(what, bad, fn);
    }
}

// ---- foreign token files ------------------------------------------------------------------

typedef enum { TK_TYPE, TK_SHAPE2, TK_SCALAR, TK_EMPTY, TK_GROUP, TK_MISSING_VAL, TK_ATTR_TYPE,
               TK_ATTR_VALUE } tk_kind;

static void attr_i32(hid_t f, const char *name, int v) {
    hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(a);
    CHECK_HDF5(H5Awrite(a, H5T_NATIVE_INT, &v));
    CHECK_HDF5(H5Aclose(a));
    CHECK_HDF5(H5Sclose(s));
}
static void attr_s(hid_t f, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1);
    CHECK_HDF5(H5Tset_size(t, strlen(v) + 1));
    hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(a);
    CHECK_HDF5(H5Awrite(a, t, v));
    CHECK_HDF5(H5Aclose(a));
    CHECK_HDF5(H5Sclose(s));
    CHECK_HDF5(H5Tclose(t));
}

// A token file like the writer's with one thing foreign: kind, with variant v.
static void write_foreign_tokens(const char *path, tk_kind kind, int v) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(f);
    if (kind == TK_ATTR_TYPE && v == 0) attr_i32(f, "format", 7);
    else attr_s(f, "format", kind == TK_ATTR_VALUE && v == 0 ? "gdn-checkpoint" : "gdn-tokens");
    if (kind == TK_ATTR_TYPE && v == 1) attr_s(f, "version", "1");
    else attr_i32(f, "version", kind == TK_ATTR_VALUE && v == 1 ? 2 : 1);
    if (kind == TK_ATTR_TYPE && v == 2) attr_s(f, "vocab_size", "300");
    else attr_i32(f, "vocab_size", kind == TK_ATTR_VALUE && v == 2 ? 1 : kind == TK_ATTR_VALUE && v == 3 ? (1 << 25)
                                  : kind == TK_ATTR_VALUE && v == 4 ? 100 : VOCAB);
    attr_s(f, "tokenizer", kind == TK_ATTR_VALUE && v == 5 ? "" : "bytes");
    attr_i32(f, "eot_token", kind == TK_ATTR_VALUE && v == 6 ? 9999 : -1);
    hid_t ftypes[] = {H5T_STD_I32LE, H5T_IEEE_F32LE, H5T_STD_U8LE, H5T_STD_U64LE, H5T_STD_I64LE};
    for (int s = 0; s < 2; s++) {
        const char *name = s ? "/val" : "/train";
        const uint32_t *data = s ? val_tok : train_tok;
        hsize_t n = s ? N_VAL : N_TRAIN;
        if (s == 1 && kind == TK_MISSING_VAL) continue;
        if (s == 0 && kind == TK_GROUP) {
            hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            CHECK_HDF5(g);
            CHECK_HDF5(H5Gclose(g));
            continue;
        }
        hid_t ft = H5T_STD_U16LE, sp;
        hid_t strt = -1;
        if (s == 0 && kind == TK_TYPE) {
            if (v < 5) ft = ftypes[v];
            else {
                strt = H5Tcopy(H5T_C_S1);
                CHECK_HDF5(H5Tset_size(strt, 4));
                ft = strt;
            }
        }
        if (s == 0 && kind == TK_SHAPE2) {
            hsize_t d2[2] = {n / 10, 10};
            sp = H5Screate_simple(2, d2, NULL);
        } else if (s == 0 && kind == TK_SCALAR) {
            sp = H5Screate(H5S_SCALAR);
        } else if (s == 0 && kind == TK_EMPTY) {
            hsize_t z = 0;
            sp = H5Screate_simple(1, &z, NULL);
        } else {
            sp = H5Screate_simple(1, &n, NULL);
        }
        CHECK_HDF5(sp);
        hid_t d = H5Dcreate2(f, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK_HDF5(d);
        if (strt < 0 && !(s == 0 && (kind == TK_SCALAR || kind == TK_EMPTY)))
            CHECK_HDF5(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
        CHECK_HDF5(H5Dclose(d));
        CHECK_HDF5(H5Sclose(sp));
        if (strt >= 0) CHECK_HDF5(H5Tclose(strt));
    }
    CHECK_HDF5(H5Fclose(f));
}

// ---- foreign checkpoints ------------------------------------------------------------------

typedef enum { CK_TYPE, CK_RANK3, CK_SCALAR, CK_STRING, CK_GROUP_AS_DATASET, CK_DATASET_AS_GROUP,
               CK_ATTR_STEP_STRING, CK_ATTR_VERSION_DOUBLE, CK_ATTR_CONFIG_INT } ck_kind;

// `good` rewritten as `path` with one foreign part (tensor `name` of /params for the tensor kinds).
static void write_foreign_ckpt(const char *good, const char *path, ck_kind kind, const char *name) {
    copy_file(good, path);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK_HDF5(f);
    char full[256];
    snprintf(full, sizeof full, "/params/%s", name);
    if (kind <= CK_STRING) {
        CHECK_HDF5(H5Ldelete(f, full, H5P_DEFAULT));
        hsize_t d3[3] = {2, 2, 2};
        hid_t sp = kind == CK_RANK3 ? H5Screate_simple(3, d3, NULL) : kind == CK_TYPE ? H5Screate_simple(2, d3, NULL)
                                                                     : H5Screate(H5S_SCALAR);
        hid_t t = kind == CK_TYPE ? H5Tcopy(H5T_STD_I64LE) : kind == CK_STRING ? H5Tcopy(H5T_C_S1) : H5Tcopy(H5T_IEEE_F64LE);
        if (kind == CK_STRING) CHECK_HDF5(H5Tset_size(t, 8));
        hid_t d = H5Dcreate2(f, full, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK_HDF5(d);
        unsigned char zero[64] = {0};
        CHECK_HDF5(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, zero));
        CHECK_HDF5(H5Dclose(d));
        CHECK_HDF5(H5Tclose(t));
        CHECK_HDF5(H5Sclose(sp));
    } else if (kind == CK_GROUP_AS_DATASET) {
        CHECK_HDF5(H5Ldelete(f, "/adam_m", H5P_DEFAULT));
        hsize_t d1 = 4;
        hid_t sp = H5Screate_simple(1, &d1, NULL);
        hid_t d = H5Dcreate2(f, "/adam_m", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK_HDF5(d);
        CHECK_HDF5(H5Dclose(d));
        CHECK_HDF5(H5Sclose(sp));
    } else if (kind == CK_DATASET_AS_GROUP) {
        CHECK_HDF5(H5Ldelete(f, full, H5P_DEFAULT));
        hid_t g = H5Gcreate2(f, full, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK_HDF5(g);
        CHECK_HDF5(H5Gclose(g));
    } else {
        const char *an = kind == CK_ATTR_STEP_STRING ? "step" : kind == CK_ATTR_VERSION_DOUBLE ? "version" : "config";
        CHECK_HDF5(H5Adelete(f, an));
        if (kind == CK_ATTR_STEP_STRING) attr_s(f, an, "12");
        else if (kind == CK_ATTR_CONFIG_INT) attr_i32(f, an, 12);
        else {
            double two = 2.5;
            hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(f, an, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
            CHECK_HDF5(a);
            CHECK_HDF5(H5Awrite(a, H5T_NATIVE_DOUBLE, &two));
            CHECK_HDF5(H5Aclose(a));
            CHECK_HDF5(H5Sclose(s));
        }
    }
    CHECK_HDF5(H5Fclose(f));
}

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    snprintf(dir, sizeof dir, "/tmp/gdn_fuzz_readers_XXXXXX");
    CHECK_PTR(mkdtemp(dir));
    snprintf(errp, sizeof errp, "%s/case.err", dir);
    rng_t r;
    rng_init(&r, seed, 0);
    double t0 = gdn_now();
    char good[300], bad[300], err[2048];

    printf("== token files (seed %llu)\n", (unsigned long long)seed);
    for (int i = 0; i < N_TRAIN; i++) train_tok[i] = (uint32_t)rng_below(&r, VOCAB);
    for (int i = 0; i < N_VAL; i++) val_tok[i] = (uint32_t)rng_below(&r, VOCAB);
    snprintf(good, sizeof good, "%s/tokens.h5", dir);
    snprintf(bad, sizeof bad, "%s/bad-tokens.h5", dir);
    if (!tokfile_write(good, VOCAB, "bytes", -1, train_tok, N_TRAIN, val_tok, N_VAL, err, sizeof err))
        gdn_die("%s", err);
    run_case("the token file as written", good, token_child);
    if (n_bad) return 1;
    int c0 = n_cases, b0 = n_bad;
    damage("token file", good, bad, token_child, &r);
    static const struct { tk_kind k; int nv; const char *what; } tk[] = {
        {TK_TYPE, 6, "/train of a foreign type"}, {TK_SHAPE2, 1, "/train 2-D"}, {TK_SCALAR, 1, "/train a scalar"},
        {TK_EMPTY, 1, "/train empty"}, {TK_GROUP, 1, "/train a group"}, {TK_MISSING_VAL, 1, "no /val"},
        {TK_ATTR_TYPE, 3, "an attribute of a foreign type"}, {TK_ATTR_VALUE, 7, "an attribute of a foreign value"},
    };
    strict = false;
    for (size_t i = 0; i < sizeof tk / sizeof tk[0]; i++)
        for (int v = 0; v < tk[i].nv; v++) {
            char what[128];
            snprintf(what, sizeof what, "%s (variant %d)", tk[i].what, v);
            write_foreign_tokens(bad, tk[i].k, v);
            run_case(what, bad, token_child);
        }
    printf("  token files: %d cases, %d failed\n", n_cases - c0, n_bad - b0);

    printf("== checkpoints\n");
    orig = new_model();
    model_init_params(orig, 3);
    tiny_fill_moments(orig, &r);
    train_state st = {.step = 12, .tokens_seen = 96, .sampler_pos = 12, .seed = 3, .best_val = INFINITY,
                      .world_size = 1};
    snprintf(good, sizeof good, "%s/ckpt.h5", dir);
    snprintf(bad, sizeof bad, "%s/bad-ckpt.h5", dir);
    if (!checkpoint_save(good, orig, &st, NULL, err, sizeof err)) gdn_die("%s", err);
    c0 = n_cases, b0 = n_bad;
    strict = true;
    run_case("the checkpoint as written", good, ckpt_child);
    if (n_bad > b0) return 1;
    damage("checkpoint", good, bad, ckpt_child, &r);
    static const char *const ck_what[] = {"a tensor of int64", "a 3-D tensor", "a scalar tensor", "a string tensor",
                                          "/adam_m a dataset", "a tensor a group", "step a string",
                                          "version 2.5 (a double)", "config an integer"};
    strict = false;
    for (int k = CK_TYPE; k <= CK_ATTR_CONFIG_INT; k++) {
        write_foreign_ckpt(good, bad, (ck_kind)k, orig->params[orig->lp[0].wq].name);
        run_case(ck_what[k], bad, ckpt_child);
    }
    printf("  checkpoints: %d cases, %d failed\n", n_cases - c0, n_bad - b0);
    model_free(orig);

    unlink(good);
    unlink(bad);
    unlink(errp);
    snprintf(good, sizeof good, "%s/tokens.h5", dir);
    unlink(good);
    if (!n_bad) rmdir(dir);
    printf("test_fuzz_readers: %d cases: %d refused naming the file, %d accepted with the written "
           "content, %d failed; slowest case %.2f s, all %.1f s\n", n_cases, n_refused, n_accepted,
           n_bad, worst, gdn_now() - t0);
    return n_bad ? 1 : 0;
}
