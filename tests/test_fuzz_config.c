// test_fuzz_config.c — the config loader (src/core/config.c) on a fixed-seed corpus of mutated
// configs: configs/tiny-cpu.ini with 1 to 4 random edits each (a line deleted, duplicated (a
// duplicate key), truncated or swapped with another; a value replaced by a hostile one: huge,
// negative, past int or uint64, NaN, inf, hex, empty, garbage, binary bytes, a 300-character
// string; a bad or unknown section header; a key renamed; random bytes inserted; a NUL byte;
// an include of /dev/zero, a directory, a missing file or the file itself; CRLF line ends).
// Each case is loaded in a child process with a time bound and must end in one of two ways:
//   - refused: config_load returns false and every message line names the file and a line
//     ("case.ini:N: ...") or the file as a whole ("case.ini: ...");
//   - accepted: the config writes and reads back byte-identical (config_to_string ->
//     config_load_string, memcmp), and the derived sizes and model_check_sizes run on it;
// never a crash, a sanitizer report (CI runs this under ASan + UBSan), a leak report or a hang.
//   usage: test_fuzz_config [SEED [CASES]]   (defaults 1 and 200)
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../src/core/config.h"
#include "../src/core/rng.h"
#include "../src/model/model.h"
#include "fileutil.h"
#include "testutil.h"

#define CASE_SECONDS 20  // a case that takes longer is a hang (a load takes milliseconds)

typedef struct {
    char **v;
    int n, cap;
} lines_t;

static void lines_push(lines_t *l, int at, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = gdn_realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    memmove(l->v + at + 1, l->v + at, (size_t)(l->n - at) * sizeof *l->v);
    l->v[at] = gdn_strdup(s);
    l->n++;
}
static void lines_del(lines_t *l, int at) {
    free(l->v[at]);
    memmove(l->v + at, l->v + at + 1, (size_t)(l->n - at - 1) * sizeof *l->v);
    l->n--;
}
static void lines_set(lines_t *l, int at, const char *s) {
    char *c = gdn_strdup(s);
    free(l->v[at]);
    l->v[at] = c;
}
static void lines_free(lines_t *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static const char *const hostile_values[] = {
    "", " ", "-1", "0", "1", "3", "2147483647", "2147483648", "-2147483648", "-2147483649",
    "4294967296", "99999999999999999999999", "18446744073709551615", "18446744073709551616",
    "1e308", "1e309", "-1e308", "nan", "NaN", "inf", "-inf", "1e-320", "0x1p3", "0x10", "1.5",
    "1,5", "+7", "07", "true", "yes", "OFF", "garbage", "G", "GSAX", "GSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGSGS",
    "cpu", "cuda", "fp32", "wsd", "light", "a;b", "a ;b", ";", "#", "\\", "'", "\"", "%s%n%x",
    "${HOME}", "/dev/zero", "4096", "65536", "65537", "16777216", "1e6", "\xff\xfe", "\x01\x02",
    "caf\xc3\xa9", "1e-6", "0.9999999999999999", "1 2",
};
static const char *const hostile_sections[] = {
    "[nosuch]", "[model", "[]", "[ train ]", "[model]]", "[MODEL]", "[train] ; c", "[train] x",
    "[gdn", "[[gdn]]", "[xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx]",
};
static const char *const hostile_lines[] = {
    "include = /dev/zero", "include = /", "include = missing.ini", "include = @SELF@",
    "include =", "= 3", "key_without_value", ";", "#", "   ", "\tn_layers = 3",
    "\xEF\xBB\xBF[model]", "[model]\r", "n_layers = 2 ; c", "d_model: 64", "pattern = G S",
    "gdn_n_heads = 2", "save_states = maybe", "threads = 100000", "grad_accum = 2147483647",
    "eval_batches = 2147483647", "seq_len = 2147483647", "batch_size = 2147483647",
    "d_model = 2147483647",
};

static const char *pick(rng_t *r, const char *const *v, size_t n) { return v[rng_below(r, n)]; }

// One mutated text of `base` (its lines) into a malloc'd string; *len its length (NULs allowed).
static char *mutate(const lines_t *base, rng_t *r, const char *self, size_t *len) {
    lines_t l = {0};
    for (int i = 0; i < base->n; i++) lines_push(&l, l.n, base->v[i]);
    int edits = 1 + (int)rng_below(r, 4);
    bool crlf = false;
    for (int e = 0; e < edits; e++) {
        int op = (int)rng_below(r, 11), at = l.n ? (int)rng_below(r, (uint64_t)l.n) : 0;
        char buf[1024];
        switch (op) {
        case 0: if (l.n) lines_del(&l, at); break;
        case 1: if (l.n) lines_push(&l, (int)rng_below(r, (uint64_t)l.n + 1), l.v[at]); break;
        case 2: case 3: {  // a value replaced (twice as likely: the main case)
            for (int tries = 0; tries < 20 && l.n; tries++, at = (int)rng_below(r, (uint64_t)l.n)) {
                const char *eq = strchr(l.v[at], '=');
                if (!eq || l.v[at][0] == ';' || l.v[at][0] == '[') continue;
                char big[301];
                memset(big, 'x', 300);
                big[300] = '\0';
                const char *v = rng_below(r, 8) == 0 ? big  // a long one
                              : pick(r, hostile_values, sizeof hostile_values / sizeof *hostile_values);
                snprintf(buf, sizeof buf, "%.*s= %s", (int)(eq - l.v[at]), l.v[at], v);
                lines_set(&l, at, buf);
                break;
            }
            break;
        }
        case 4:
            lines_push(&l, at, pick(r, hostile_sections, sizeof hostile_sections / sizeof *hostile_sections));
            break;
        case 5:
            if (l.n) {
                size_t n = strlen(l.v[at]);
                snprintf(buf, sizeof buf, "%.*s", (int)rng_below(r, n + 1), l.v[at]);
                lines_set(&l, at, buf);
            }
            break;
        case 6:
            if (l.n && strlen(l.v[at]) + 16 < sizeof buf) {  // random bytes (not NUL: below)
                size_t n = strlen(l.v[at]), k = rng_below(r, n + 1), m = 1 + rng_below(r, 12);
                memcpy(buf, l.v[at], k);
                for (size_t i = 0; i < m; i++) buf[k + i] = (char)(1 + rng_below(r, 255));
                memcpy(buf + k + m, l.v[at] + k, n - k);
                buf[n + m] = '\0';
                lines_set(&l, at, buf);
            }
            break;
        case 7: {
            const char *h = pick(r, hostile_lines, sizeof hostile_lines / sizeof *hostile_lines);
            if (strstr(h, "@SELF@")) {
                snprintf(buf, sizeof buf, "include = %s", self);
                h = buf;
            }
            lines_push(&l, rng_below(r, 2) ? 0 : at, h);
            break;
        }
        case 8:
            if (l.n > 1) {
                int b = (int)rng_below(r, (uint64_t)l.n);
                char *t = l.v[at];
                l.v[at] = l.v[b];
                l.v[b] = t;
            }
            break;
        case 9:
            if (l.n && l.v[at][0] && l.v[at][0] != '[' && l.v[at][0] != ';') {  // a key renamed
                snprintf(buf, sizeof buf, "%s", l.v[at]);
                size_t k = rng_below(r, GDN_MIN(strcspn(buf, " ="), (size_t)16) + 1);
                if (k < strlen(buf)) buf[k] = (char)('a' + rng_below(r, 26));
                lines_set(&l, at, buf);
            }
            break;
        case 10: crlf = true; break;
        }
    }
    // join
    size_t total = 0;
    for (int i = 0; i < l.n; i++) total += strlen(l.v[i]) + 2;
    char *out = gdn_malloc(total + 64), *p = out;
    for (int i = 0; i < l.n; i++) {
        size_t n = strlen(l.v[i]);
        memcpy(p, l.v[i], n);
        p += n;
        if (crlf) *p++ = '\r';
        *p++ = '\n';
    }
    // one case in 16 gets a NUL byte in the middle of the file (the loader must refuse it)
    if (p > out && rng_below(r, 16) == 0) out[rng_below(r, (uint64_t)(p - out))] = '\0';
    *len = (size_t)(p - out);
    lines_free(&l);
    return out;
}

// The child: load, then (accepted) round trip and sizes. Exit 0 accepted, 2 refused, 3 the
// round trip differs.
static void child(const char *path) {
    alarm(CASE_SECONDS);
#if !defined(__SANITIZE_ADDRESS__)
    struct rlimit rl = {(rlim_t)2 << 30, (rlim_t)2 << 30};  // 2 GiB: a runaway read ends here
    setrlimit(RLIMIT_AS, &rl);
#endif
    gdn_config c;
    config_defaults(&c);
    if (!config_load(&c, path, NULL, 0)) exit(2);
    char *text = config_to_string(&c);
    gdn_config back;
    config_defaults(&back);
    bool same = config_load_string(&back, text, "written") && memcmp(&c, &back, sizeof c) == 0;
    free(text);
    volatile int sink = config_mlp_hidden(&c) + config_gdn_dv(&c);
    for (int i = 0; i < c.n_layers; i++) sink += config_layer_kind(&c, i);
    char err[512];
    int vocab = c.vocab_size ? c.vocab_size : 256;
    c.vocab_size = vocab;
    sink += model_check_sizes(&c, c.batch_size, c.seq_len, err, sizeof err);
    (void)sink;
    exit(same ? 0 : 3);
}

// Every line of a refusal names the file: "path:" at its start.
static bool messages_name_file(const char *msg, const char *path) {
    if (!*msg) return false;
    size_t pl = strlen(path);
    for (const char *p = msg; *p;) {
        const char *nl = strchr(p, '\n');
        if (strncmp(p, path, pl) != 0 || p[pl] != ':') return false;
        p = nl ? nl + 1 : p + strlen(p);
    }
    return true;
}

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    int ncases = argc > 2 ? atoi(argv[2]) : 200;
    const char *src = getenv("GDN_SOURCE_DIR");
    char base_path[1024];
    snprintf(base_path, sizeof base_path, "%s/configs/tiny-cpu.ini", src ? src : "..");
    FILE *bf = fopen(base_path, "rb");
    if (!bf) {
        printf("SKIPPED: no %s (run through ctest, which sets GDN_SOURCE_DIR)\n", base_path);
        return GC_SKIP_RC;
    }
    lines_t base = {0};
    char line[1024];
    while (fgets(line, sizeof line, bf)) {
        line[strcspn(line, "\r\n")] = '\0';
        lines_push(&base, base.n, line);
    }
    fclose(bf);

    char dir[] = "/tmp/gdn_fuzz_config_XXXXXX";
    CHECK_PTR(mkdtemp(dir));
    char path[256], errp[256];
    snprintf(path, sizeof path, "%s/case.ini", dir);
    snprintf(errp, sizeof errp, "%s/case.err", dir);
    rng_t r;
    rng_init(&r, seed, 0);
    int accepted = 0, refused = 0, bad = 0;
    double worst = 0, t0 = gdn_now();
    printf("test_fuzz_config: seed %llu, %d cases from %s\n", (unsigned long long)seed, ncases, base_path);
    for (int k = 0; k < ncases; k++) {
        size_t len;
        char *text = mutate(&base, &r, path, &len);
        FILE *f = fopen(path, "wb");
        CHECK_PTR(f);
        if (fwrite(text, 1, len, f) != len || fclose(f) != 0) gdn_die("writing %s", path);
        fflush(stdout);
        double c0 = gdn_now();
        pid_t pid = fork();
        CHECK_SYS(pid);
        if (pid == 0) {
            int fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd < 0 || dup2(fd, 2) < 0) _exit(99);
            close(fd);
            child(path);
        }
        int st = 0;
        CHECK_SYS(waitpid(pid, &st, 0));
        double dt = gdn_now() - c0;
        worst = GDN_MAX(worst, dt);
        char *msg = slurp(errp);
        const char *why = NULL;
        if (WIFSIGNALED(st)) why = WTERMSIG(st) == SIGALRM ? "hang (time bound)" : "crash (signal)";
        else if (WEXITSTATUS(st) == 0) accepted++;
        else if (WEXITSTATUS(st) == 2 && messages_name_file(msg, path)) refused++;
        else if (WEXITSTATUS(st) == 2) why = "refused without a message naming the file";
        else if (WEXITSTATUS(st) == 3) why = "accepted, but the written config reads back different";
        else why = "exit code (a sanitizer report or a fatal error)";
        if (why) {
            bad++;
            printf("  FAIL  case %d: %s (status %d, signal %d, %.1f s)\n  --- input (%zu bytes):\n%.*s\n  --- stderr:\n%s\n",
                   k, why, WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0, dt,
                   len, (int)GDN_MIN(len, (size_t)3000), text, msg);
        }
        free(msg);
        free(text);
    }
    printf("test_fuzz_config: %d cases: %d accepted (round trip exact), %d refused with messages naming "
           "the file, %d failed; slowest case %.2f s, all %.1f s\n", ncases, accepted, refused, bad, worst,
           gdn_now() - t0);
    unlink(path);
    unlink(errp);
    rmdir(dir);
    lines_free(&base);
    return bad ? 1 : 0;
}
