// ckpt.c — gdn-ckpt: look into checkpoints.
//   gdn-ckpt info CKPT.h5        format version, loop state (with the bad-step skips), the
//                                tokenizer, each tensor's stored type, size and rms
//   gdn-ckpt verify CKPT.h5      reads every tensor (HDF5 checks the Fletcher32 checksums of a
//                                version-2 file) and checks format, loop state and values as
//                                gdn-train's resume does (checkpoint_verify); exit 0 when sound,
//                                1 with the first problem named (file, tensor or attribute)
//   gdn-ckpt diff [--rtol R] A.h5 B.h5
//                                exit 0 iff every tensor of /params, /adam_m, /adam_v and the
//                                loop state (step, tokens_seen, sampler_pos, seed, skips) are
//                                bitwise equal (or, with --rtol, every tensor within ||a-b|| <=
//                                R ||b||); tensors are compared as float64 values, so a float32
//                                file and a float64 one holding the same values are equal (a
//                                note says when the stored types differ);
//                                prints the first differences, the worst relative error and
//                                (with --rtol) how many tensors are bitwise equal; a bad R
//                                (not a number >= 0) exits 2
#include <hdf5.h>
#include <math.h>
#include "core/common.h"
#include "model/checkpoint.h"

typedef struct {
    int ndiff, ntensors, nsame;  // nsame: tensors equal bit for bit
    int ntype;                   // tensors stored with another type in B than in A
    hid_t other;
    double rtol;        // < 0: bitwise
    double worst;       // worst norm-wise relative difference seen
} walk_ctx;

static hid_t open_or_die(const char *path) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (H5Fis_hdf5(path) <= 0) gdn_die("'%s' is not a readable HDF5 file", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) gdn_die("cannot open '%s'", path);
    return f;
}

// Bytes of one stored element of tensor `name` in loc (0 when it cannot be told).
static size_t stored_bytes(hid_t loc, const char *name) {
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return 0;
    hid_t t = H5Dget_type(d);
    size_t b = t >= 0 ? H5Tget_size(t) : 0;
    if (t >= 0) CHECK_HDF5(H5Tclose(t));
    CHECK_HDF5(H5Dclose(d));
    return b;
}

// Tensor `name` of loc as float64 values (HDF5 widens a float32 tensor exactly).
static double *read_all(hid_t loc, const char *name, size_t *n) {
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t s = H5Dget_space(d);
    CHECK_HDF5(s);
    hssize_t np = H5Sget_simple_extent_npoints(s);
    CHECK_HDF5(np);
    double *buf = gdn_malloc((size_t)np * sizeof(double) + 8);
    if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        char file[512] = "?", grp[256] = "?";
        (void)H5Fget_name(d, file, sizeof file);  // for the message only
        (void)H5Iget_name(loc, grp, sizeof grp);
        gdn_die("'%s': cannot read tensor '%s/%s': the file is damaged or truncated (a checksum "
                "or read error)\nHINT: gdn-ckpt verify '%s' names the first bad tensor", file, grp,
                name, file);
    }
    CHECK_HDF5(H5Sclose(s));
    CHECK_HDF5(H5Dclose(d));
    *n = (size_t)np;
    return buf;
}

static herr_t diff_one(hid_t grp, const char *name, const H5L_info_t *info, void *op) {
    (void)info;
    walk_ctx *w = op;
    size_t na = 0, nb = 0;
    double *a = read_all(grp, name, &na);
    double *b = read_all(w->other, name, &nb);
    w->ntensors++;
    if (a && b && stored_bytes(grp, name) != stored_bytes(w->other, name)) w->ntype++;
    if (a && b && na == nb && memcmp(a, b, na * sizeof(double)) == 0) w->nsame++;
    if (!a || !b || na != nb) {
        if (w->ndiff++ < 10) printf("  %s: %s\n", name, !b ? "missing in B" : "sizes differ");
    } else if (memcmp(a, b, na * sizeof(double)) != 0) {
        double num = 0, den = 0;
        for (size_t i = 0; i < na; i++) {
            num += (a[i] - b[i]) * (a[i] - b[i]);
            den += b[i] * b[i];
        }
        double rel = den > 0 ? sqrt(num / den) : INFINITY;
        if (!(rel <= w->worst)) w->worst = rel;
        if (w->rtol < 0 || !(rel <= w->rtol)) {
            size_t k = 0;
            while (k < na && memcmp(&a[k], &b[k], sizeof(double)) == 0) k++;
            if (w->ndiff++ < 10)
                printf("  %s: relative difference %.3e; first at element %zu: %.17g vs %.17g\n",
                       name, rel, k, a[k], b[k]);
        }
    }
    free(a);
    free(b);
    return 0;
}

static long long attr_i64(hid_t f, const char *name) {
    long long v = -1;
    if (H5Aexists(f, name) > 0) {
        hid_t a = H5Aopen(f, name, H5P_DEFAULT);
        CHECK_HDF5(a);
        CHECK_HDF5(H5Aread(a, H5T_NATIVE_LLONG, &v));
        CHECK_HDF5(H5Aclose(a));
    }
    return v;
}

static const char *const GROUPS[3] = {"params", "adam_m", "adam_v"};
static const char *const STATE[4] = {"step", "tokens_seen", "sampler_pos", "seed"};
// loop state of version 3 (0 in earlier files)
static const char *const STATE3[2] = {"skips", "skips_in_row"};

static long long attr_i64_or0(hid_t f, const char *name) {
    return H5Aexists(f, name) > 0 ? attr_i64(f, name) : 0;
}

static herr_t info_one(hid_t grp, const char *name, const H5L_info_t *info, void *op) {
    (void)info;
    (void)op;
    size_t n = 0;
    double *a = read_all(grp, name, &n);
    double s = 0;
    for (size_t i = 0; a && i < n; i++) s += a[i] * a[i];
    size_t b = stored_bytes(grp, name);
    printf("  %-32s %10zu  %s  rms %.6g\n", name, n, b == 4 ? "float32" : b == 8 ? "float64" : "?",
           n ? sqrt(s / (double)n) : 0.0);
    free(a);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "info")) {
        hid_t f = open_or_die(argv[2]);
        for (int i = 0; i < 4; i++) printf("%s = %lld\n", STATE[i], attr_i64(f, STATE[i]));
        printf("version = %lld\n", attr_i64(f, "version"));
        for (int i = 0; i < 2; i++) printf("%s = %lld\n", STATE3[i], attr_i64_or0(f, STATE3[i]));
        char err[2048];
        ckpt_tokenizer tok;
        if (!checkpoint_read_tokenizer(argv[2], &tok, err, sizeof err)) gdn_die("%s", err);
        if (tok.kind[0]) printf("tokenizer = %s (%zu bytes)\n", tok.kind, tok.n);
        else printf("tokenizer = none\n");
        ckpt_tokenizer_free(&tok);
        hid_t g = H5Gopen2(f, "params", H5P_DEFAULT);
        if (g < 0) gdn_die("'%s': no /params group (not a gdn checkpoint?)", argv[2]);
        CHECK_HDF5(H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, info_one, NULL));
        CHECK_HDF5(H5Gclose(g));
        CHECK_HDF5(H5Fclose(f));
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "verify")) {
        char err[2048];
        int n = 0;
        if (!checkpoint_verify(argv[2], &n, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        printf("OK: %s: %d tensors read, checksums and values sound\n", argv[2], n);
        return 0;
    }
    double rtol = -1;
    if (argc == 6 && !strcmp(argv[1], "diff") && !strcmp(argv[2], "--rtol")) {
        char *end = NULL;
        rtol = strtod(argv[3], &end);
        if (end == argv[3] || *end || !(rtol >= 0) || !isfinite(rtol)) {
            fprintf(stderr, "error: --rtol '%s': expected a number >= 0\n", argv[3]);
            return 2;
        }
        argv[2] = argv[4];
        argv[3] = argv[5];
        argc = 4;
    }
    if (argc == 4 && !strcmp(argv[1], "diff")) {
        hid_t fa = open_or_die(argv[2]), fb = open_or_die(argv[3]);
        int nd = 0, nt = 0, ns = 0;
        double worst = 0;
        for (int i = 0; i < 6; i++) {
            const char *name = i < 4 ? STATE[i] : STATE3[i - 4];
            long long a = i < 4 ? attr_i64(fa, name) : attr_i64_or0(fa, name);
            long long b = i < 4 ? attr_i64(fb, name) : attr_i64_or0(fb, name);
            if (a != b) {
                printf("  %s: %lld vs %lld\n", name, a, b);
                nd++;
            }
        }
        for (int gi = 0; gi < 3; gi++) {
            hid_t ga = H5Gopen2(fa, GROUPS[gi], H5P_DEFAULT), gb = H5Gopen2(fb, GROUPS[gi], H5P_DEFAULT);
            if (ga < 0 || gb < 0) gdn_die("group /%s missing in %s", GROUPS[gi], ga < 0 ? argv[2] : argv[3]);
            walk_ctx w = {.other = gb, .rtol = rtol};
            CHECK_HDF5(H5Literate(ga, H5_INDEX_NAME, H5_ITER_INC, NULL, diff_one, &w));
            if (w.ntype)
                printf("  note: %d tensors of /%s are stored with another type in B than in A "
                       "(float32 / float64): compared as float64 values\n", w.ntype, GROUPS[gi]);
            nd += w.ndiff;
            nt += w.ntensors;
            ns += w.nsame;
            worst = fmax(worst, w.worst);
            CHECK_HDF5(H5Gclose(ga));
            CHECK_HDF5(H5Gclose(gb));
        }
        CHECK_HDF5(H5Fclose(fa));
        CHECK_HDF5(H5Fclose(fb));
        if (rtol < 0)
            printf("%s: %d tensors compared, %d differ bitwise; worst relative difference %.3e\n",
                   nd ? "DIFFERENT" : "IDENTICAL", nt, nd, worst);
        else
            printf("%s: %d tensors compared, %d differ beyond --rtol, %d bitwise equal; worst "
                   "relative difference %.3e\n", nd ? "DIFFERENT" : "CLOSE", nt, nd, ns, worst);
        return nd ? 1 : 0;
    }
    fprintf(stderr, "usage: gdn-ckpt info CKPT.h5 | gdn-ckpt verify CKPT.h5 | gdn-ckpt diff [--rtol R] A.h5 B.h5\n");
    return 2;
}
