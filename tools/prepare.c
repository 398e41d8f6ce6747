// prepare.c — gdn-prepare: text file(s) -> a gdn-tokens HDF5 file (DESIGN 5).
//
// Reads the inputs in order (a newline is put between two files when the first does not end
// with one), tokenizes them with bytes or SentencePiece (training a BPE model with spm_train
// unless --spm-model is given), puts the first (1 - val_frac) of the tokens in /train and the
// rest in /val (as nanoGPT does for tinyshakespeare: first 90% train, last 10% val), writes the
// file atomically and prints a summary.
#include "../src/core/common.h"
#include "../src/data/dataset.h"
#include "../src/data/tokenizer.h"
#include <fcntl.h>
#include <stdarg.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;


#define MAX_INPUTS 64
#define DEFAULT_SPM_VOCAB 1024

static void usage(FILE *fp) {
    fprintf(
        fp,
        "usage: gdn-prepare --input TEXT [--input TEXT2 ...] --out FILE.h5 [options]\n"
        "\n"
        "Tokenize text into a gdn-tokens HDF5 file: /train = the first (1 - val_frac) of the\n"
        "tokens, /val = the rest.\n"
        "\n"
        "  --input TEXT        text file to read (repeat for several; read in order)\n"
        "  --out FILE.h5       output file (written to a temporary name, then renamed)\n"
        "  --tokenizer NAME    bytes (default: id = byte, vocab 256) or spm (SentencePiece BPE)\n"
        "  --vocab N           spm: pieces to train (default %d; the file's vocab is N + 1,\n"
        "                      the extra id being the newline)\n"
        "  --spm-model PATH    spm: use this trained model instead of training one\n"
        "                      (default: train <out without .h5>.spm.model with spm_train)\n"
        "  --val-frac F        fraction of tokens for /val, 0 <= F < 1 (default 0.1)\n"
        "  --help              this text\n"
        "\n"
        "example: gdn-prepare --input data/tinyshakespeare/input.txt --out "
        "data/tinyshakespeare.h5\n",
        DEFAULT_SPM_VOCAB);
}

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("gdn-prepare: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

__attribute__((noreturn)) static void bad_usage(const char *msg, const char *arg) {
    fflush(stdout);
    fprintf(stderr, "gdn-prepare: %s%s%s%s\n(run gdn-prepare --help for usage)\n", msg,
            arg ? " '" : "", arg ? arg : "", arg ? "'" : "");
    exit(2);
}

// Whole file into a malloc'd buffer; a missing or empty input is an error naming the file.
static char *read_text(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) fail("cannot read input '%s': %s", path, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    char *buf = gdn_malloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - n, fp);
        if (n < cap) break;
        cap *= 2;
        buf = gdn_realloc(buf, cap);
    }
    if (ferror(fp)) fail("cannot read input '%s': %s", path, strerror(errno));
    if (fclose(fp) != 0) fail("cannot read input '%s': %s", path, strerror(errno));
    if (n == 0) fail("input '%s' is empty", path);
    *len = n;
    return buf;
}

// spm_train on the concatenated text (a temporary file, so the model sees exactly the text that
// is encoded). Its log goes to a temporary file, shown only when it fails.
static void train_spm(const char *text, size_t len, const char *prefix, int vocab) {
    const char *base = getenv("TMPDIR");
    if (!base || !base[0]) base = "/tmp";
    char dir[512], in[600], log[600];
    snprintf(dir, sizeof dir, "%s/gdn-prepare-XXXXXX", base);
    if (!mkdtemp(dir))
        fail("cannot create a temporary directory under %s: %s", base, strerror(errno));
    snprintf(in, sizeof in, "%s/text.txt", dir);
    snprintf(log, sizeof log, "%s/spm_train.log", dir);
    FILE *fp = fopen(in, "wb");
    if (!fp || fwrite(text, 1, len, fp) != len || fclose(fp) != 0)
        fail("cannot write temporary file %s: %s", in, strerror(errno));

    char a_in[700], a_prefix[700], a_vocab[64];
    snprintf(a_in, sizeof a_in, "--input=%s", in);
    if (snprintf(a_prefix, sizeof a_prefix, "--model_prefix=%s", prefix) >= (int)sizeof a_prefix)
        fail("output path too long: %s", prefix);
    snprintf(a_vocab, sizeof a_vocab, "--vocab_size=%d", vocab);
    // identity normaliser and kept whitespace: decode(encode(text)) == text
    char *argv[] = {"spm_train",
                    a_in,
                    a_prefix,
                    a_vocab,
                    "--model_type=bpe",
                    "--character_coverage=1.0",
                    "--normalization_rule_name=identity",
                    "--remove_extra_whitespaces=false",
                    NULL};
    posix_spawn_file_actions_t fa;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (rc == 0)
        rc = posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (rc != 0) fail("posix_spawn_file_actions setup failed: %s", strerror(rc));
    pid_t pid;
    rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    int rc2 = posix_spawn_file_actions_destroy(&fa);
    if (rc2 != 0) fail("posix_spawn_file_actions_destroy failed: %s", strerror(rc2));
    if (rc == ENOENT) fail("spm_train not found: apt-get install sentencepiece");
    if (rc != 0) fail("cannot start spm_train: %s", strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) fail("waitpid(spm_train) failed: %s", strerror(errno));
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
        // the end of the log says why (e.g. "Vocabulary size too high (N). Please set it to a
        // value <= M.")
        char tail[1024] = "";
        FILE *lf = fopen(log, "rb");
        if (lf) {
            if (fseek(lf, 0, SEEK_END) == 0) {
                long sz = ftell(lf);
                if (sz > (long)sizeof tail - 1) {
                    if (fseek(lf, sz - (long)(sizeof tail - 1), SEEK_SET) != 0) sz = 0;
                } else if (fseek(lf, 0, SEEK_SET) != 0) {
                    sz = 0;
                }
                size_t got = sz > 0 ? fread(tail, 1, sizeof tail - 1, lf) : 0;
                tail[got] = 0;
            }
            fclose(lf);
        }
        // its last three lines
        size_t tl = strlen(tail);
        while (tl > 0 && tail[tl - 1] == '\n') tail[--tl] = 0;
        const char *from = tail;
        int lines = 0;
        for (size_t i = tl; i-- > 0;)
            if (tail[i] == '\n' && ++lines == 3) {
                from = tail + i + 1;
                break;
            }
        fprintf(stderr, "%s\n", from);
    }
    if (unlink(in) != 0 || unlink(log) != 0 || rmdir(dir) != 0)
        fprintf(stderr, "warning: cannot remove temporary files in %s: %s\n", dir, strerror(errno));
    if (!ok) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
            fail("spm_train not found: apt-get install sentencepiece");
        fail("spm_train failed (%s %d; its log is above) for --vocab %d",
             WIFEXITED(status) ? "exit status" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), vocab);
    }
}

// "--name value" or "--name=value"; advances *i past a separate value.
static const char *flag_value(int argc, char **argv, int *i, const char *name) {
    size_t nl = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, nl) != 0) return NULL;
    if (a[nl] == '=') return a + nl + 1;
    if (a[nl] != 0) return NULL;
    if (*i + 1 >= argc) bad_usage("missing value after", name);
    return argv[++*i];
}

int main(int argc, char **argv) {
    const char *inputs[MAX_INPUTS], *out = NULL, *tok = NULL, *spm_model = NULL;
    int n_inputs = 0, vocab = 0;
    double val_frac = 0.1;
    const char *v;
    if (argc == 1) {
        usage(stderr);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        char *end;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if ((v = flag_value(argc, argv, &i, "--input"))) {
            if (n_inputs == MAX_INPUTS) bad_usage("too many --input files (at most 64)", NULL);
            inputs[n_inputs++] = v;
        } else if ((v = flag_value(argc, argv, &i, "--out"))) {
            out = v;
        } else if ((v = flag_value(argc, argv, &i, "--tokenizer"))) {
            if (strcmp(v, "bytes") && strcmp(v, "spm"))
                bad_usage("--tokenizer must be bytes or spm, not", v);
            tok = v;
        } else if ((v = flag_value(argc, argv, &i, "--vocab"))) {
            errno = 0;
            long x = strtol(v, &end, 10);
            if (end == v || *end || errno || x < 2 || x > (1 << 24) - 1)
                bad_usage("--vocab must be an integer in [2, 16777215], not", v);
            vocab = (int)x;
        } else if ((v = flag_value(argc, argv, &i, "--val-frac"))) {
            errno = 0;
            val_frac = strtod(v, &end);
            if (end == v || *end || errno || !(val_frac >= 0 && val_frac < 1))
                bad_usage("--val-frac must be a number in [0, 1), not", v);
        } else if ((v = flag_value(argc, argv, &i, "--spm-model"))) {
            spm_model = v;
        } else {
            bad_usage("unknown argument", argv[i]);
        }
    }
    if (n_inputs == 0) bad_usage("no --input given", NULL);
    if (!out || !out[0]) bad_usage("no --out given", NULL);
    if (!tok) tok = spm_model ? "spm" : "bytes";
    bool spm = !strcmp(tok, "spm");
    if (!spm && (vocab || spm_model))
        bad_usage("--vocab and --spm-model need --tokenizer spm", NULL);
    if (spm_model && vocab)
        bad_usage("--vocab trains a model; it cannot go with --spm-model", NULL);
    if (spm && !vocab) vocab = DEFAULT_SPM_VOCAB;

    double t0 = gdn_now();
    // concatenate the inputs
    size_t len = 0;
    char *text = NULL;
    for (int k = 0; k < n_inputs; k++) {
        size_t n;
        char *t = read_text(inputs[k], &n);
        bool sep = len > 0 && text[len - 1] != '\n';
        text = gdn_realloc(text, len + sep + n);
        if (sep) text[len++] = '\n';
        memcpy(text + len, t, n);
        len += n;
        free(t);
    }

    // tokenizer name as stored in the file: "bytes" or "spm:<model path>" (the path as given,
    // so a relative path keeps working when the repository moves)
    char tokenizer[512], err[1024];
    if (!spm) {
        snprintf(tokenizer, sizeof tokenizer, "bytes");
    } else if (spm_model) {
        if (snprintf(tokenizer, sizeof tokenizer, "spm:%s", spm_model) >= (int)sizeof tokenizer)
            fail("--spm-model path too long: %s", spm_model);
    } else {
        char prefix[480];
        size_t ol = strlen(out);
        int keep = (ol > 3 && !strcmp(out + ol - 3, ".h5")) ? (int)ol - 3 : (int)ol;
        if (snprintf(prefix, sizeof prefix, "%.*s.spm", keep, out) >= (int)sizeof prefix)
            fail("--out path too long: %s", out);
        printf("gdn-prepare: training a SentencePiece BPE model (%d pieces) -> %s.model\n", vocab,
               prefix);
        fflush(stdout);
        train_spm(text, len, prefix, vocab);
        snprintf(tokenizer, sizeof tokenizer, "spm:%s.model", prefix);
    }

    gdn_tokenizer *tk = tok_load(spm ? tokenizer + 4 : tokenizer, err, sizeof err);
    if (!tk) fail("%s", err);
    int file_vocab = tok_vocab_size(tk);
    tok_ids enc = {0};
    if (!tok_encode(tk, text, len, false, &enc, err, sizeof err)) fail("%s", err);
    tok_free(tk);
    uint32_t *ids = enc.ids;
    size_t n = enc.n;
    free(text);
    if (n == 0) fail("the inputs encode to no tokens");
    size_t n_train = (size_t)((double)n * (1.0 - val_frac));
    if (n_train > n) n_train = n;
    if (!tokfile_write(out, file_vocab, tokenizer, -1, ids, n_train, ids + n_train, n - n_train,
                       err, sizeof err))
        fail("%s", err);
    free(ids);

    printf("gdn-prepare: wrote %s\n", out);
    printf("  inputs     %d file(s), %zu bytes\n", n_inputs, len);
    printf("  tokenizer  %s\n", tokenizer);
    printf("  vocab      %d\n", file_vocab);
    printf("  train      %zu tokens\n", n_train);
    printf("  val        %zu tokens (val_frac %g)\n", n - n_train, val_frac);
    printf("  time       %.2f s\n", gdn_now() - t0);
    return 0;
}
