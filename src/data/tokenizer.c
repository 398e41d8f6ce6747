// tokenizer.c — text <-> token ids (DESIGN 5).
//
// "bytes": id = byte value, vocab 256, no dependency.
// "spm:<model>": SentencePiece through Debian's spm_encode / spm_decode / spm_export_vocab,
// run as subprocesses on temporary files. SentencePiece works line by line and never sees a
// newline, so newlines are an id of their own: with V pieces in the model, id V is "\n" and the
// vocabulary is V + 1. encode("a\nb") = spm(a) ++ [V] ++ spm(b); decode splits at V and decodes
// each line. With the identity normaliser (gdn-prepare trains with it) the round trip is exact
// for every character seen in training.
#include "dataset.h"
#include "../core/common.h"
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

// ---- temporary files and subprocesses -----------------------------------------------------

typedef struct {
    char dir[512];
    char in[600], out[600], log[600];
} spm_tmp;

static bool tmp_init(spm_tmp *t, char *err, size_t errlen) {
    const char *base = getenv("TMPDIR");
    if (!base || !base[0]) base = "/tmp";
    snprintf(t->dir, sizeof t->dir, "%s/gdn-spm-XXXXXX", base);
    if (!mkdtemp(t->dir)) {
        snprintf(err, errlen, "cannot create a temporary directory under %s: %s", base,
                 strerror(errno));
        return false;
    }
    snprintf(t->in, sizeof t->in, "%s/in.txt", t->dir);
    snprintf(t->out, sizeof t->out, "%s/out.txt", t->dir);
    snprintf(t->log, sizeof t->log, "%s/log.txt", t->dir);
    return true;
}

static void tmp_free(spm_tmp *t) {
    const char *files[3] = {t->in, t->out, t->log};
    for (int i = 0; i < 3; i++)
        if (unlink(files[i]) != 0 && errno != ENOENT)
            fprintf(stderr, "warning: cannot remove %s: %s\n", files[i], strerror(errno));
    if (rmdir(t->dir) != 0)
        fprintf(stderr, "warning: cannot remove %s: %s\n", t->dir, strerror(errno));
}

static bool write_file(const char *path, const char *data, size_t n, char *err, size_t errlen) {
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, n, fp) != n || fclose(fp) != 0) {
        snprintf(err, errlen, "cannot write temporary file %s: %s", path, strerror(errno));
        return false;
    }
    return true;
}

// Whole file into a malloc'd NUL-terminated buffer.
static bool read_file(const char *path, char **data, size_t *n, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = gdn_malloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + len, 1, cap - len, fp);
        len += got;
        if (len < cap) break;
        cap *= 2;
        buf = gdn_realloc(buf, cap + 1);
    }
    bool bad = ferror(fp);
    if (fclose(fp) != 0 || bad) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        free(buf);
        return false;
    }
    buf[len] = 0;
    *data = buf;
    *n = len;
    return true;
}

// Run argv (argv[0] found through PATH) with stdin <- in, stdout -> out, stderr -> log.
// False + message when the program is missing, cannot start, or exits non-zero (the message
// then carries the end of its stderr).
static bool run_tool(char *const argv[], const char *in, const char *out, const char *log,
                     char *err, size_t errlen) {
    posix_spawn_file_actions_t fa;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 0, in, O_RDONLY, 0);
    if (rc == 0)
        rc = posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (rc == 0)
        rc = posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (rc != 0) gdn_die("posix_spawn_file_actions setup failed: %s", strerror(rc));
    pid_t pid;
    rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    int rc2 = posix_spawn_file_actions_destroy(&fa);
    if (rc2 != 0) gdn_die("posix_spawn_file_actions_destroy failed: %s", strerror(rc2));
    if (rc == ENOENT) {
        snprintf(err, errlen, "%s not found: apt-get install sentencepiece", argv[0]);
        return false;
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot start %s: %s", argv[0], strerror(rc));
        return false;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) gdn_die("waitpid(%s) failed: %s", argv[0], strerror(errno));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        snprintf(err, errlen, "%s not found: apt-get install sentencepiece", argv[0]);
        return false;
    }
    char *msg = NULL;
    size_t mlen = 0;
    char ignore[64];
    if (!read_file(log, &msg, &mlen, ignore, sizeof ignore)) msg = NULL;
    const char *tail = msg ? msg : "";
    while (mlen > 0 && (msg[mlen - 1] == '\n' || msg[mlen - 1] == '\r')) msg[--mlen] = 0;
    if (mlen > 300) tail = msg + mlen - 300;
    if (WIFEXITED(status))
        snprintf(err, errlen, "%s failed (exit status %d): %s", argv[0], WEXITSTATUS(status), tail);
    else
        snprintf(err, errlen, "%s killed by signal %d", argv[0],
                 WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    free(msg);
    return false;
}

// ---- SentencePiece ------------------------------------------------------------------------

static bool spm_model_arg(const char *model, char *arg, size_t arglen, char *err, size_t errlen) {
    struct stat st;
    if (!model[0]) {
        snprintf(err, errlen,
                 "tokenizer \"spm:\" names no model file (expected spm:<path to .model>)");
        return false;
    }
    errno = 0;
    if (stat(model, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "SentencePiece model %s cannot be read: %s", model,
                 errno ? strerror(errno) : "not a regular file");
        return false;
    }
    if (snprintf(arg, arglen, "--model=%s", model) >= (int)arglen) {
        snprintf(err, errlen, "SentencePiece model path too long: %.200s...", model);
        return false;
    }
    return true;
}

// V = number of pieces in the model (one line each in spm_export_vocab's output).
static bool spm_pieces(const char *model, spm_tmp *t, int *V, char *err, size_t errlen) {
    char marg[700];
    if (!spm_model_arg(model, marg, sizeof marg, err, errlen)) return false;
    char *argv[] = {"spm_export_vocab", marg, NULL};
    if (!write_file(t->in, "", 0, err, errlen)) return false;
    if (!run_tool(argv, t->in, t->out, t->log, err, errlen)) return false;
    char *txt;
    size_t n;
    if (!read_file(t->out, &txt, &n, err, errlen)) return false;
    long lines = 0;
    for (size_t i = 0; i < n; i++) lines += txt[i] == '\n';
    free(txt);
    if (lines < 1 || lines >= (1 << 24)) {
        snprintf(err, errlen, "SentencePiece model %s: spm_export_vocab listed %ld pieces", model,
                 lines);
        return false;
    }
    *V = (int)lines;
    return true;
}

static bool spm_encode_text(const char *model, const char *text, size_t len, uint32_t **ids,
                            size_t *n, char *err, size_t errlen) {
    spm_tmp t;
    if (!tmp_init(&t, err, errlen)) return false;
    bool ok = false;
    char *out = NULL, marg[700];
    uint32_t *v = NULL;
    int V;
    if (!spm_model_arg(model, marg, sizeof marg, err, errlen)) goto done;
    // k lines in = k lines out: the text plus a final newline, so a trailing "\n" in the text
    // leaves an empty last line (encoded as nothing) after its newline id
    size_t k = 1;
    for (size_t i = 0; i < len; i++) k += text[i] == '\n';
    {
        FILE *fp = fopen(t.in, "wb");
        if (!fp || fwrite(text, 1, len, fp) != len || fputc('\n', fp) == EOF || fclose(fp) != 0) {
            snprintf(err, errlen, "cannot write temporary file %s: %s", t.in, strerror(errno));
            goto done;
        }
    }
    char *argv[] = {"spm_encode", marg, "--output_format=id", NULL};
    if (!run_tool(argv, t.in, t.out, t.log, err, errlen)) goto done;
    size_t olen;
    if (!read_file(t.out, &out, &olen, err, errlen)) goto done;
    if (!spm_pieces(model, &t, &V, err, errlen)) goto done; // reuses in/out/log: after the read
    // ids + one newline id per line break: at most olen / 2 + k
    size_t cap = olen / 2 + k + 1, cnt = 0, line = 0;
    v = gdn_malloc(sizeof(uint32_t) * cap);
    for (char *p = out; *p;) {
        if (*p == '\n') {
            if (++line < k) v[cnt++] = (uint32_t)V;
            p++;
        } else if (*p == ' ') {
            p++;
        } else {
            char *end;
            errno = 0;
            unsigned long id = strtoul(p, &end, 10);
            if (end == p || errno || id >= (unsigned long)V) {
                snprintf(err, errlen,
                         "spm_encode (model %s) printed an unexpected id near \"%.20s\"", model, p);
                goto done;
            }
            v[cnt++] = (uint32_t)id;
            p = end;
        }
    }
    if (line != k) {
        snprintf(err, errlen, "spm_encode (model %s) returned %zu lines for %zu input lines", model,
                 line, k);
        goto done;
    }
    *ids = v;
    *n = cnt;
    v = NULL;
    ok = true;
done:
    free(v);
    free(out);
    tmp_free(&t);
    return ok;
}

static bool spm_decode_ids(const char *model, const int32_t *ids, size_t n, char **text, char *err,
                           size_t errlen) {
    spm_tmp t;
    if (!tmp_init(&t, err, errlen)) return false;
    bool ok = false;
    char *out = NULL, marg[700];
    FILE *fp = NULL;
    int V;
    if (!spm_pieces(model, &t, &V, err, errlen)) goto done;
    if (!spm_model_arg(model, marg, sizeof marg, err, errlen)) goto done;
    size_t k = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > V) {
            snprintf(err, errlen, "spm:%s: id %d at position %zu is outside [0, %d]", model, ids[i],
                     i, V);
            goto done;
        }
        k += ids[i] == V;
    }
    // one line of ids per text line
    fp = fopen(t.in, "wb");
    if (!fp) goto werr;
    for (size_t i = 0; i < n; i++) {
        int r = ids[i] == V ? fputc('\n', fp)
                            : fprintf(fp, "%s%d", (i > 0 && ids[i - 1] != V) ? " " : "", ids[i]);
        if (r < 0) goto werr;
    }
    if (fputc('\n', fp) == EOF) goto werr;
    int rc = fclose(fp);
    fp = NULL;
    if (rc != 0) goto werr;
    char *argv[] = {"spm_decode", marg, "--input_format=id", NULL};
    if (!run_tool(argv, t.in, t.out, t.log, err, errlen)) goto done;
    size_t olen;
    if (!read_file(t.out, &out, &olen, err, errlen)) goto done;
    size_t lines = 0;
    for (size_t i = 0; i < olen; i++) lines += out[i] == '\n';
    if (lines != k || olen == 0 || out[olen - 1] != '\n') {
        snprintf(err, errlen, "spm_decode (model %s) returned %zu lines for %zu input lines", model,
                 lines, k);
        goto done;
    }
    out[olen - 1] = 0; // the newline after the last line is ours, not the text's
    *text = out;
    out = NULL;
    ok = true;
    goto done;
werr:
    snprintf(err, errlen, "cannot write temporary file %s: %s", t.in, strerror(errno));
done:
    if (fp) fclose(fp);
    free(out);
    tmp_free(&t);
    return ok;
}

// ---- public -------------------------------------------------------------------------------

static bool unknown_tokenizer(const char *tokenizer, char *err, size_t errlen) {
    snprintf(err, errlen, "unknown tokenizer \"%s\" (expected \"bytes\" or \"spm:<model file>\")",
             tokenizer);
    return false;
}

bool tokenizer_vocab_size(const char *tokenizer, int *vocab, char *err, size_t errlen) {
    if (strcmp(tokenizer, "bytes") == 0) {
        *vocab = 256;
        return true;
    }
    if (strncmp(tokenizer, "spm:", 4) != 0) return unknown_tokenizer(tokenizer, err, errlen);
    spm_tmp t;
    if (!tmp_init(&t, err, errlen)) return false;
    int V;
    bool ok = spm_pieces(tokenizer + 4, &t, &V, err, errlen);
    tmp_free(&t);
    if (ok) *vocab = V + 1;
    return ok;
}

bool tokenizer_encode(const char *tokenizer, const char *text, size_t len, uint32_t **ids,
                      size_t *n, char *err, size_t errlen) {
    if (strcmp(tokenizer, "bytes") == 0) {
        uint32_t *v = gdn_malloc(sizeof(uint32_t) * len);
        for (size_t i = 0; i < len; i++) v[i] = (unsigned char)text[i];
        *ids = v;
        *n = len;
        return true;
    }
    if (strncmp(tokenizer, "spm:", 4) == 0)
        return spm_encode_text(tokenizer + 4, text, len, ids, n, err, errlen);
    return unknown_tokenizer(tokenizer, err, errlen);
}

bool tokenizer_decode(const char *tokenizer, const int32_t *ids, size_t n, char **text, char *err,
                      size_t errlen) {
    if (strcmp(tokenizer, "bytes") == 0) {
        char *s = gdn_malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] > 255) {
                snprintf(err, errlen, "bytes tokenizer: id %d at position %zu is outside [0, 256)",
                         ids[i], i);
                free(s);
                return false;
            }
            s[i] = (char)ids[i];
        }
        s[n] = 0;
        *text = s;
        return true;
    }
    if (strncmp(tokenizer, "spm:", 4) == 0)
        return spm_decode_ids(tokenizer + 4, ids, n, text, err, errlen);
    return unknown_tokenizer(tokenizer, err, errlen);
}
