// test_data.c — the token file format, its reader and writer, the batch sampler.
//
// Round trips (uint16 and uint32 widths, multi-chunk); every malformed file gives false and one
// message naming the file and the field, with nothing on stderr (files made with the HDF5 API
// in a mkdtemp directory); the writer's failures (missing directory, token >= vocab, a file-size
// limit standing in for a full disk) leave nothing behind; sampler windows are the right tokens
// at the starts of the seeded formula (the same since the format began),
// y = x shifted by one, deterministic, identical with and without prefetch, identical for
// 2 ranks x B/2 and 1 rank x B, resumable from pos. (Tokenizers: test_tokenizer.c.)
#include "check.h"
#include "../src/data/dataset.h"
#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


static char dir[512];

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static uint32_t *random_tokens(size_t n, uint32_t vocab, rng_t *r) {
    uint32_t *x = gdn_malloc(sizeof(uint32_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = (uint32_t)rng_below(r, vocab);
    return x;
}

// The file type of a dataset: 2 or 4 bytes, unsigned.
static int dset_width(const char *path, const char *name) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK_HDF5(f);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    CHECK_HDF5(d);
    hid_t t = H5Dget_type(d);
    CHECK_HDF5(t);
    int w = (int)H5Tget_size(t) * (H5Tget_sign(t) == H5T_SGN_NONE ? 1 : -1);
    CHECK_HDF5(H5Tclose(t));
    CHECK_HDF5(H5Dclose(d));
    CHECK_HDF5(H5Fclose(f));
    return w;
}

// ---- round trips ---------------------------------------------------------------------------

static void round_trip(const char *name, int vocab, size_t n_train, size_t n_val, int want_width,
                       rng_t *r) {
    char p[600], err[1024];
    path_in(p, sizeof p, name);
    uint32_t *tr = random_tokens(n_train, (uint32_t)vocab, r),
             *va = random_tokens(n_val, (uint32_t)vocab, r);
    if (n_train > 0) tr[n_train - 1] = (uint32_t)vocab - 1; // the largest id survives the width
    bool w = tokfile_write(p, vocab, "spm:some/model.model", vocab > 7 ? 7 : -1, tr, n_train, va,
                           n_val, err, sizeof err);
    check(w, "%s: write vocab %d, %zu + %zu tokens", name, vocab, n_train, n_val);
    if (!w) {
        printf("    %s\n", err);
        goto out;
    }
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    check(!exists(tmp), "%s: no temporary file left after the rename", name);
    int wd = dset_width(p, "/train");
    check(wd == want_width && dset_width(p, "/val") == want_width,
          "%s: stored as uint%d (want uint%d)", name, 8 * wd, 8 * want_width);
    token_file f;
    bool o = tokfile_open(&f, p, err, sizeof err);
    check(o, "%s: open", name);
    if (!o) {
        printf("    %s\n", err);
        goto out;
    }
    check(f.vocab_size == vocab && !strcmp(f.tokenizer, "spm:some/model.model") &&
              f.eot_token == (vocab > 7 ? 7 : -1) && f.n_tokens[0] == n_train &&
              f.n_tokens[1] == n_val,
          "%s: attributes and lengths (vocab %d, eot %d, %llu + %llu)", name, f.vocab_size,
          f.eot_token, (unsigned long long)f.n_tokens[0], (unsigned long long)f.n_tokens[1]);
    int32_t *back = gdn_malloc(sizeof(int32_t) * (n_train + n_val + 1));
    tokfile_read(&f, DATA_SPLIT_TRAIN, 0, n_train, back);
    tokfile_read(&f, DATA_SPLIT_VAL, 0, n_val, back + n_train);
    size_t bad = 0;
    for (size_t i = 0; i < n_train; i++) bad += (uint32_t)back[i] != tr[i];
    for (size_t i = 0; i < n_val; i++) bad += (uint32_t)back[n_train + i] != va[i];
    check(bad == 0, "%s: every token reads back (%zu mismatches)", name, bad);
    // windows across chunk boundaries
    size_t wbad = 0;
    for (int k = 0; k < 50 && n_train > 300; k++) {
        uint64_t s = rng_below(r, n_train - 300);
        tokfile_read(&f, DATA_SPLIT_TRAIN, s, 300, back);
        for (int i = 0; i < 300; i++) wbad += (uint32_t)back[i] != tr[s + i];
    }
    check(wbad == 0, "%s: 50 random windows of 300 tokens read back", name);
    free(back);
    tokfile_close(&f);
out:
    free(tr);
    free(va);
}

// ---- malformed files -------------------------------------------------------------------------

// A valid file: vocab 256, 5000 + 1000 tokens.
static void make_good(const char *p) {
    char err[1024];
    rng_t r;
    rng_init(&r, 1, 1);
    uint32_t *t = random_tokens(6000, 256, &r);
    if (!tokfile_write(p, 256, "bytes", -1, t, 5000, t + 5000, 1000, err, sizeof err))
        gdn_die("make_good: %s", err);
    free(t);
}

static hid_t open_rw(const char *p) {
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK_HDF5(f);
    return f;
}

static void del_attr(hid_t f, const char *name) {
    htri_t ex = H5Aexists(f, name);
    CHECK_HDF5(ex);
    if (ex) CHECK_HDF5(H5Adelete(f, name));
}

static void set_attr_int(const char *p, const char *name, long long v) {
    hid_t f = open_rw(p), sp = H5Screate(H5S_SCALAR);
    CHECK_HDF5(sp);
    del_attr(f, name);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(a);
    CHECK_HDF5(H5Awrite(a, H5T_NATIVE_LLONG, &v));
    CHECK_HDF5(H5Aclose(a));
    CHECK_HDF5(H5Sclose(sp));
    CHECK_HDF5(H5Fclose(f));
}

static void set_attr_str(const char *p, const char *name, const char *v) {
    hid_t f = open_rw(p), sp = H5Screate(H5S_SCALAR), t = H5Tcopy(H5T_C_S1);
    CHECK_HDF5(sp);
    CHECK_HDF5(t);
    CHECK_HDF5(H5Tset_size(t, strlen(v) + 1));
    del_attr(f, name);
    hid_t a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_HDF5(a);
    CHECK_HDF5(H5Awrite(a, t, v));
    CHECK_HDF5(H5Aclose(a));
    CHECK_HDF5(H5Tclose(t));
    CHECK_HDF5(H5Sclose(sp));
    CHECK_HDF5(H5Fclose(f));
}

static void remove_attr(const char *p, const char *name) {
    hid_t f = open_rw(p);
    del_attr(f, name);
    CHECK_HDF5(H5Fclose(f));
}

// Replace dataset `name` by one of file type `type`, rank 1 or 2, filled with `fill` (written
// as native uint32); a negative type makes it a group instead; rank 0 just deletes it.
static void replace_dset(const char *p, const char *name, hid_t type, int rank, uint32_t fill,
                         uint32_t last) {
    hid_t f = open_rw(p);
    htri_t ex = H5Lexists(f, name, H5P_DEFAULT);
    CHECK_HDF5(ex);
    if (ex) CHECK_HDF5(H5Ldelete(f, name, H5P_DEFAULT));
    if (rank > 0 && type < 0) {
        hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK_HDF5(g);
        CHECK_HDF5(H5Gclose(g));
    } else if (rank > 0) {
        hsize_t dims[2] = {rank == 1 ? 600 : 20, 30};
        uint32_t buf[600];
        for (int i = 0; i < 600; i++) buf[i] = fill;
        buf[599] = last;
        hid_t sp = H5Screate_simple(rank, dims, NULL);
        CHECK_HDF5(sp);
        hid_t d = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK_HDF5(d);
        CHECK_HDF5(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
        CHECK_HDF5(H5Dclose(d));
        CHECK_HDF5(H5Sclose(sp));
    }
    CHECK_HDF5(H5Fclose(f));
}

// tokfile_open must fail with a message holding the path and `field` (and `also` if given),
// and print nothing to stderr (no HDF5 error stack).
static void expect_bad(const char *p, const char *what, const char *field, const char *also) {
    char err[1024] = "", cap[600];
    path_in(cap, sizeof cap, "stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    CHECK_SYS(saved);
    int fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK_SYS(fd);
    CHECK_SYS(dup2(fd, 2));
    token_file f;
    bool ok = tokfile_open(&f, p, err, sizeof err);
    fflush(stderr);
    CHECK_SYS(dup2(saved, 2));
    CHECK_SYS(close(saved));
    CHECK_SYS(close(fd));
    struct stat st;
    CHECK_SYS(stat(cap, &st));
    if (ok) tokfile_close(&f);
    bool good = !ok && strstr(err, p) && strstr(err, field) && (!also || strstr(err, also)) &&
                st.st_size == 0;
    check(good, "%s -> false, names file and %s%s%s, stderr empty (%lld B)", what, field,
          also ? " + " : "", also ? also : "", (long long)st.st_size);
    printf("    message: %s\n", err);
}

static void malformed_files(void) {
    printf("\n== malformed files: false, one message naming the file and the field\n");
    char p[600];
    path_in(p, sizeof p, "missing.h5");
    expect_bad(p, "missing file", "No such file", NULL);

    path_in(p, sizeof p, "text.h5");
    FILE *fp = fopen(p, "w");
    CHECK_PTR(fp);
    fputs("First Citizen:\nBefore we proceed any further, hear me speak.\n", fp);
    CHECK_SYS(fclose(fp) == 0 ? 0 : -1);
    expect_bad(p, "plain text file", "not an HDF5 file", NULL);

    path_in(p, sizeof p, "dir.h5");
    CHECK_SYS(mkdir(p, 0700));
    expect_bad(p, "a directory", "not a regular file", NULL);

#define CASE(file, mutate, what, field, also)                                                      \
    do {                                                                                           \
        path_in(p, sizeof p, file);                                                                \
        make_good(p);                                                                              \
        mutate;                                                                                    \
        expect_bad(p, what, field, also);                                                          \
    } while (0)
    CASE("nofmt.h5", remove_attr(p, "format"), "no format attribute", "'format'", "missing");
    CASE("fmt.h5", set_attr_str(p, "format", "other-tokens"), "format = other-tokens", "'format'",
         "other-tokens");
    CASE("fmtint.h5", set_attr_int(p, "format", 1), "format is an integer", "'format'", "string");
    CASE("ver2.h5", set_attr_int(p, "version", 2), "version = 2",
         "attribute 'version' is 2, this build reads version 1", NULL);
    CASE("nover.h5", remove_attr(p, "version"), "no version attribute", "'version'", "missing");
    CASE("verstr.h5", set_attr_str(p, "version", "1"), "version is a string", "'version'",
         "integer");
    CASE("vocab0.h5", set_attr_int(p, "vocab_size", 0), "vocab_size = 0", "'vocab_size'", "is 0");
    CASE("vocabneg.h5", set_attr_int(p, "vocab_size", -5), "vocab_size = -5", "'vocab_size'", "-5");
    CASE("vocabbig.h5", set_attr_int(p, "vocab_size", 1LL << 25), "vocab_size = 2^25",
         "'vocab_size'", "33554432");
    CASE("notok.h5", remove_attr(p, "tokenizer"), "no tokenizer attribute", "'tokenizer'",
         "missing");
    CASE("emptytok.h5", set_attr_str(p, "tokenizer", ""), "tokenizer = \"\"", "'tokenizer'",
         "empty");
    CASE("eot.h5", set_attr_int(p, "eot_token", 256), "eot_token = 256 = vocab", "'eot_token'",
         "256");
    CASE("noeot.h5", remove_attr(p, "eot_token"), "no eot_token attribute", "'eot_token'",
         "missing");
    CASE("notrain.h5", replace_dset(p, "train", H5T_STD_U16LE, 0, 0, 0), "no /train", "'/train'",
         "missing");
    CASE("noval.h5", replace_dset(p, "val", H5T_STD_U16LE, 0, 0, 0), "no /val", "'/val'",
         "missing");
    CASE("traingrp.h5", replace_dset(p, "train", -1, 1, 0, 0), "/train is a group", "'/train'",
         "not a dataset");
    CASE("i32.h5", replace_dset(p, "train", H5T_STD_I32LE, 1, 3, 3), "/train int32", "'/train'",
         "int32");
    CASE("f32.h5", replace_dset(p, "val", H5T_IEEE_F32LE, 1, 3, 3), "/val float32", "'/val'",
         "float32");
    CASE("u32.h5", replace_dset(p, "train", H5T_STD_U32LE, 1, 3, 3), "/train uint32 for vocab 256",
         "'/train'", "uint32");
    CASE("u8.h5", replace_dset(p, "val", H5T_STD_U8LE, 1, 3, 3), "/val uint8", "'/val'", "uint8");
    CASE("rank2.h5", replace_dset(p, "train", H5T_STD_U16LE, 2, 3, 3), "/train of rank 2",
         "'/train'", "rank 2");
    CASE("tok300.h5", replace_dset(p, "val", H5T_STD_U16LE, 1, 3, 300),
         "/val token 300 >= vocab 256", "'/val'", "token 300 at index 599");
    CASE("tokbig.h5", replace_dset(p, "train", H5T_STD_U16BE, 1, 256, 5),
         "/train token 256 (big-endian file)", "'/train'", "token 256 at index 0");
#undef CASE
    // a file another tool wrote big-endian, otherwise valid, is read (HDF5 converts)
    path_in(p, sizeof p, "bigendian.h5");
    make_good(p);
    replace_dset(p, "val", H5T_STD_U16BE, 1, 255, 17);
    token_file f;
    char err[1024];
    bool o = tokfile_open(&f, p, err, sizeof err);
    int32_t last = -1;
    if (o) {
        tokfile_read(&f, DATA_SPLIT_VAL, 599, 1, &last);
        tokfile_close(&f);
    }
    check(o && last == 17, "big-endian uint16 /val opens and reads back (last token %d)", last);
}

// ---- writer failures -------------------------------------------------------------------------

static int count_prefix(const char *prefix) {
    DIR *d = opendir(dir);
    CHECK_PTR(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    CHECK_SYS(closedir(d));
    return n;
}

static void writer_failures(void) {
    printf("\n== writer failures: false, a message, nothing left behind\n");
    char p[600], err[1024] = "";
    uint32_t tok[4] = {1, 2, 3, 4};
    path_in(p, sizeof p, "no/such/dir/x.h5");
    bool w = tokfile_write(p, 256, "bytes", -1, tok, 4, tok, 0, err, sizeof err);
    check(!w && strstr(err, p) && strstr(err, "No such file"),
          "missing directory -> false, message names the file");
    printf("    message: %s\n", err);

    path_in(p, sizeof p, "badtok.h5");
    tok[2] = 256;
    w = tokfile_write(p, 256, "bytes", -1, tok, 4, tok, 0, err, sizeof err);
    check(!w && strstr(err, p) && strstr(err, "/train token 256 at index 2") && !exists(p) &&
              count_prefix("badtok.h5") == 0,
          "token 256 with vocab 256 -> false, names file, split, index; no file");
    printf("    message: %s\n", err);

    w = tokfile_write(p, 1, "bytes", -1, tok, 0, tok, 0, err, sizeof err);
    check(!w && strstr(err, "vocab_size 1"), "vocab_size 1 -> false");
    w = tokfile_write(p, 256, "bytes", 300, tok, 0, tok, 0, err, sizeof err);
    check(!w && strstr(err, "eot_token 300"), "eot_token 300 with vocab 256 -> false");

    // disk full, simulated by a 200 KiB file-size limit in a child process: write() then fails
    // with EFBIG as it would with ENOSPC; the child reports whether the contract held.
    path_in(p, sizeof p, "full.h5");
    fflush(stdout);
    pid_t pid = fork();
    CHECK_SYS(pid);
    if (pid == 0) {
        if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR) _exit(3);
        struct rlimit rl = {200 << 10, 200 << 10};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
        rng_t r;
        rng_init(&r, 5, 5);
        uint32_t *big = random_tokens(1 << 20, 256, &r);
        char e2[1024] = "";
        bool ok = tokfile_write(p, 256, "bytes", -1, big, 1 << 20, big, 1000, e2, sizeof e2);
        char tmp[700];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
        printf("    message: %s\n", e2);
        fflush(stdout);
        _exit(!ok && strstr(e2, p) && strstr(e2, "HINT") && !exists(p) && !exists(tmp) ? 0 : 1);
    }
    int status;
    CHECK_SYS(waitpid(pid, &status, 0));
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0 && count_prefix("full.h5") == 0,
          "file-size limit hit while writing 2 MiB -> false + HINT, no file, no temp (child rc %d)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

// ---- sampler -------------------------------------------------------------------------------

// sampler_init with windows sampling, the parameters in today's order.
static bool init_w(batch_sampler *s, const data_source *src, int split, int B, int T, uint64_t seed,
                   int rank, int world, int n_mb, uint64_t pos, bool prefetch, char *err,
                   size_t errlen) {
    const sampler_params p = {.src = src, .split = split, .B = B, .T = T, .seed = seed,
                              .rank = rank, .world = world, .n_mb = n_mb, .pos = pos,
                              .prefetch = prefetch};
    return sampler_init(s, &p, err, errlen);
}

static void take(batch_sampler *s, int n, int32_t *x, int32_t *y) {
    size_t bt = (size_t)s->B * (size_t)s->T;
    for (int i = 0; i < n; i++) sampler_next(s, x + i * bt, y + i * bt, NULL);
}

static void sampler_tests(void) {
    printf("\n== sampler\n");
    char p[600], err[1024];
    // token i = i, so a window's first token is its start
    const size_t n = 60000;
    uint32_t *t = gdn_malloc(sizeof(uint32_t) * n);
    for (size_t i = 0; i < n; i++) t[i] = (uint32_t)i;
    path_in(p, sizeof p, "ramp.h5");
    if (!tokfile_write(p, 65536, "bytes", -1, t, n, t, 40, err, sizeof err)) gdn_die("%s", err);
    data_source src;
    if (!data_source_open(&src, p, "", err, sizeof err)) gdn_die("%s", err);

    const int B = 4, T = 32, P = 12;
    const size_t bt = (size_t)B * T, all = (size_t)P * bt;
    int32_t *x1 = gdn_malloc(4 * all), *y1 = gdn_malloc(4 * all), *x2 = gdn_malloc(4 * all),
            *y2 = gdn_malloc(4 * all);
    batch_sampler s, s2;
    bool ok = init_w(&s, &src, DATA_SPLIT_TRAIN, B, T, 1234, 0, 1, 1, 0, false, err, sizeof err);
    check(ok, "init B=%d T=%d seed 1234, no prefetch", B, T);
    take(&s, P, x1, y1);
    check(s.pos == (uint64_t)P, "pos advances to %d (got %llu)", P, (unsigned long long)s.pos);
    sampler_free(&s);

    size_t bad = 0, badshift = 0;
    uint64_t maxs = 0;
    for (size_t w = 0; w < (size_t)P * B; w++) {
        uint64_t st = (uint64_t)x1[w * T];
        if (st > maxs) maxs = st;
        for (int i = 0; i < T; i++) {
            bad += (uint64_t)x1[w * T + i] != st + i;
            badshift += (uint64_t)y1[w * T + i] != st + i + 1;
        }
        bad += st > n - (T + 1);
    }
    check(bad == 0, "x windows are tokens [start, start+T) with start <= n-(T+1)");
    check(badshift == 0, "y is x shifted by one (y[t] = token[start + t + 1])");

    init_w(&s2, &src, DATA_SPLIT_TRAIN, B, T, 1234, 0, 1, 1, 0, false, err, sizeof err);
    take(&s2, P, x2, y2);
    sampler_free(&s2);
    check(!memcmp(x1, x2, 4 * all) && !memcmp(y1, y2, 4 * all), "same seed -> same %d batches", P);

    // a v1 file's windows are exactly the formula the sampler always had: start of window j of
    // step s = rng_below(n - T) of Philox (seed ^ split key, stream s) at counter block j << 32
    size_t formula_bad = 0;
    for (int i = 0; i < P; i++)
        for (int b = 0; b < B; b++) {
            rng_t q;
            rng_init(&q, 1234 ^ 0x9E3779B97F4A7C15ull, (uint64_t)i);
            q.counter = (uint64_t)b << 32;
            formula_bad += (uint64_t)x1[((size_t)i * B + b) * T] != rng_below(&q, n - (uint64_t)T);
        }
    check(formula_bad == 0, "v1 file: window starts are the seeded formula's, bit for bit");

    init_w(&s2, &src, DATA_SPLIT_TRAIN, B, T, 1235, 0, 1, 1, 0, false, err, sizeof err);
    take(&s2, P, x2, y2);
    sampler_free(&s2);
    size_t same = 0;
    for (size_t w = 0; w < (size_t)P * B; w++) same += x1[w * T] == x2[w * T];
    check(same < 3, "seed 1235 -> different windows (%zu of %d starts equal)", same, P * B);

    ok = init_w(&s2, &src, DATA_SPLIT_TRAIN, B, T, 1234, 0, 1, 1, 0, true, err, sizeof err);
    check(ok && s2.running, "init with prefetch starts the thread");
    take(&s2, P, x2, y2);
    sampler_free(&s2);
    check(!memcmp(x1, x2, 4 * all) && !memcmp(y1, y2, 4 * all),
          "prefetch on == prefetch off for %d batches", P);
    check(!s2.running, "sampler_free joined the thread");

    // 2 ranks x B/2 == 1 rank x B (one rank with prefetch, one without)
    batch_sampler r0, r1;
    init_w(&r0, &src, DATA_SPLIT_TRAIN, B / 2, T, 1234, 0, 2, 1, 0, true, err, sizeof err);
    init_w(&r1, &src, DATA_SPLIT_TRAIN, B / 2, T, 1234, 1, 2, 1, 0, false, err, sizeof err);
    size_t half = bt / 2, mism = 0;
    int32_t *hx = gdn_malloc(4 * half), *hy = gdn_malloc(4 * half);
    for (int i = 0; i < P; i++) {
        sampler_next(&r0, hx, hy, NULL);
        mism += memcmp(hx, x1 + i * bt, 4 * half) != 0 || memcmp(hy, y1 + i * bt, 4 * half) != 0;
        sampler_next(&r1, hx, hy, NULL);
        mism += memcmp(hx, x1 + i * bt + half, 4 * half) != 0 ||
                memcmp(hy, y1 + i * bt + half, 4 * half) != 0;
    }
    sampler_free(&r0);
    sampler_free(&r1);
    check(mism == 0, "2 ranks x B=%d reproduce 1 rank x B=%d exactly (%zu mismatching halves)",
          B / 2, B, mism);

    // micro-batches split a step like ranks do: 1 rank x 2 micro-batches of B/2, and 2 ranks x
    // 2 micro-batches of B/4, reproduce 1 rank x B (micro-batch m of rank r: block m world + r)
    {
        batch_sampler a;
        init_w(&a, &src, DATA_SPLIT_TRAIN, B / 2, T, 1234, 0, 1, 2, 0, true, err, sizeof err);
        size_t mm = 0;
        for (int i = 0; i < P; i++)
            for (int mb = 0; mb < 2; mb++) {
                sampler_next(&a, hx, hy, NULL);
                mm += memcmp(hx, x1 + i * bt + mb * half, 4 * half) != 0 ||
                      memcmp(hy, y1 + i * bt + mb * half, 4 * half) != 0;
            }
        check(a.pos == (uint64_t)(2 * P), "pos counts micro-batches (%llu after %d steps of 2)",
              (unsigned long long)a.pos, P);
        sampler_free(&a);
        check(mm == 0, "1 rank x 2 micro-batches of B=%d reproduce 1 rank x B=%d exactly (%zu "
              "mismatching blocks)", B / 2, B, mm);
        batch_sampler q[2];
        size_t quarter = bt / 4;
        mm = 0;
        for (int r = 0; r < 2; r++)
            init_w(&q[r], &src, DATA_SPLIT_TRAIN, B / 4, T, 1234, r, 2, 2, 0, r == 0, err,
                         sizeof err);
        for (int i = 0; i < P; i++)
            for (int mb = 0; mb < 2; mb++)
                for (int r = 0; r < 2; r++) {
                    sampler_next(&q[r], hx, hy, NULL);
                    size_t at = i * bt + (size_t)(mb * 2 + r) * quarter;
                    mm += memcmp(hx, x1 + at, 4 * quarter) != 0 || memcmp(hy, y1 + at, 4 * quarter) != 0;
                }
        sampler_free(&q[0]);
        sampler_free(&q[1]);
        check(mm == 0, "2 ranks x 2 micro-batches of B=%d reproduce 1 rank x B=%d exactly (%zu "
              "mismatching blocks)", B / 4, B, mm);
        batch_sampler bad;
        check(!init_w(&bad, &src, DATA_SPLIT_TRAIN, B, T, 1, 0, 1, 0, 0, false, err, sizeof err),
              "n_mb 0 is refused: %s", err);
    }

    // resume: start at pos 5; with prefetch, move pos by hand after two batches
    init_w(&s2, &src, DATA_SPLIT_TRAIN, B, T, 1234, 0, 1, 1, 5, false, err, sizeof err);
    sampler_next(&s2, x2, y2, NULL);
    sampler_free(&s2);
    check(!memcmp(x2, x1 + 5 * bt, 4 * bt) && !memcmp(y2, y1 + 5 * bt, 4 * bt),
          "init at pos 5 gives batch 5");
    init_w(&s2, &src, DATA_SPLIT_TRAIN, B, T, 1234, 0, 1, 1, 0, true, err, sizeof err);
    take(&s2, 2, x2, y2);
    s2.pos = 9;
    sampler_next(&s2, x2, y2, NULL);
    check(!memcmp(x2, x1 + 9 * bt, 4 * bt) && s2.pos == 10,
          "prefetch: pos set to 9 by hand -> batch 9, pos 10");
    sampler_next(&s2, x2, y2, NULL);
    check(!memcmp(x2, x1 + 10 * bt, 4 * bt), "prefetch: then batch 10");
    sampler_free(&s2);

    // too short: /val holds 40 tokens
    ok = init_w(&s2, &src, DATA_SPLIT_VAL, B, 40, 1, 0, 1, 1, 0, true, err, sizeof err);
    check(!ok && strstr(err, p) && strstr(err, "'/val'") && strstr(err, "40 tokens") &&
              strstr(err, "41"),
          "/val of 40 tokens, T = 40 -> false: shorter than one window");
    printf("    message: %s\n", err);
    ok = init_w(&s2, &src, DATA_SPLIT_VAL, B, 39, 1, 0, 1, 1, 0, false, err, sizeof err);
    check(ok, "/val of 40 tokens, T = 39 -> exactly one window fits");
    if (ok) {
        sampler_next(&s2, x2, y2, NULL);
        check(x2[0] == 0 && y2[38] == 39, "that window is tokens [0, 40)");
        sampler_free(&s2);
    }
    ok = init_w(&s2, &src, DATA_SPLIT_TRAIN, B, T, 1, 2, 2, 1, 0, false, err, sizeof err);
    check(!ok && strstr(err, "rank"), "rank 2 of world 2 -> false");
    data_source_close(&src);

    // every start in [0, n - (T+1)] is drawn, about equally: n = T + 4 -> 4 starts
    path_in(p, sizeof p, "tiny.h5");
    if (!tokfile_write(p, 65536, "bytes", -1, t, (size_t)T + 4, t, 0, err, sizeof err))
        gdn_die("%s", err);
    if (!data_source_open(&src, p, "", err, sizeof err)) gdn_die("%s", err);
    init_w(&s2, &src, DATA_SPLIT_TRAIN, 8, T, 99, 0, 1, 1, 0, true, err, sizeof err);
    int cnt[5] = {0};
    int32_t *tx = gdn_malloc(4 * 8 * (size_t)T), *ty = gdn_malloc(4 * 8 * (size_t)T);
    for (int i = 0; i < 100; i++) {
        sampler_next(&s2, tx, ty, NULL);
        for (int b = 0; b < 8; b++) cnt[GDN_MIN(tx[b * T], 4)]++;
    }
    sampler_free(&s2);
    data_source_close(&src);
    bool even = cnt[4] == 0;
    for (int i = 0; i < 4; i++) even &= cnt[i] > 140 && cnt[i] < 260; // 200 +- 4.9 sigma
    check(even, "n = T+4: starts 0..3 drawn %d %d %d %d times of 800, none beyond", cnt[0], cnt[1],
          cnt[2], cnt[3]);
    free(tx);
    free(ty);
    free(hx);
    free(hy);
    free(x1);
    free(y1);
    free(x2);
    free(y2);
    free(t);
}

// eval_full_windows / eval_full_start: for every (n, T, G) tried, W is ceil((n-1)/T) rounded
// up to a multiple of G, the starts rise from 0 to n - T - 1 within the split, and every token
// 1..n-1 is a target of some window (covered); a mutation (W one short of ceil) must uncover.
static bool eval_cover(uint64_t n, uint64_t T, uint64_t W, char *why, size_t len) {
    unsigned char *hit = gdn_malloc(n);
    memset(hit, 0, n);
    uint64_t prev = 0;
    for (uint64_t j = 0; j < W; j++) {
        uint64_t s = eval_full_start(j, W, n, T);
        if (s + T + 1 > n || s < prev) {
            snprintf(why, len, "window %llu starts at %llu", (unsigned long long)j, (unsigned long long)s);
            free(hit);
            return false;
        }
        prev = s;
        for (uint64_t t = s + 1; t <= s + T; t++) hit[t] = 1;
    }
    for (uint64_t t = 1; t < n; t++)
        if (!hit[t]) {
            snprintf(why, len, "token %llu is no window's target", (unsigned long long)t);
            free(hit);
            return false;
        }
    free(hit);
    return true;
}

static void eval_full_tests(void) {
    printf("\n== whole-split evaluation windows\n");
    const uint64_t ns[] = {2, 3, 41, 65, 753, 1000, 111540};
    const uint64_t Ts[] = {1, 2, 40, 64, 256};
    const uint64_t Gs[] = {1, 3, 4, 64};
    int cases = 0, bad = 0, caught = 0, mutants = 0;
    char why[160] = "";
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof Ts / sizeof Ts[0]; b++)
            for (size_t c = 0; c < sizeof Gs / sizeof Gs[0]; c++) {
                uint64_t n = ns[a], T = Ts[b], G = Gs[c];
                if (n < T + 1) continue;
                cases++;
                uint64_t W = eval_full_windows(n, T, G), need = (n - 1 + T - 1) / T;
                bool ok = W % G == 0 && W >= need && W < need + G && eval_cover(n, T, W, why, sizeof why);
                ok = ok && eval_full_start(W - 1, W, n, T) == n - T - 1;
                if (!ok && bad++ == 0)
                    printf("    first failure: n %llu T %llu G %llu W %llu: %s\n", (unsigned long long)n,
                           (unsigned long long)T, (unsigned long long)G, (unsigned long long)W, why);
                if (need > 1 && (n - 1) % T != 0) {  // one window fewer than ceil leaves a gap
                    mutants++;
                    caught += !eval_cover(n, T, need - 1, why, sizeof why);
                }
            }
    check(bad == 0, "%d (n, T, G) cases: W = ceil((n-1)/T) rounded up to G, starts rise from 0 "
          "to n - T - 1, every token 1..n-1 a target", cases);
    check(mutants > 0 && caught == mutants, "the coverage check fails with one window fewer (%d of %d)",
          caught, mutants);
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gdn-test-data-XXXXXX", base && base[0] ? base : "/tmp");
    CHECK_PTR(mkdtemp(dir));
    printf("test_data: files in %s\n", dir);
    rng_t r;
    rng_init(&r, 42, 0);

    printf("\n== write / read round trips\n");
    round_trip("u16.h5", 256, 150000, 1234, 2, &r);    // 3 chunks of 64K tokens
    round_trip("u16max.h5", 65536, 70000, 100, 2, &r); // the largest uint16 vocabulary
    round_trip("u32.h5", 70000, 70000, 100, 4, &r);    // uint32 above it
    round_trip("emptyval.h5", 300, 1000, 0, 2, &r);    // an empty split is legal

    malformed_files();
    writer_failures();
    sampler_tests();
    eval_full_tests();

    // clean up the directory (only files we made; a failed run leaves it for inspection)
    if (gc_failures == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    }
    return gc_finish("test_data");
}
