// sample.c — gdn-sample: generate text from a checkpoint on the CPU in float64, token by token
// through the recurrent decoder (src/model/decode.h).
//
//   gdn-sample --checkpoint CKPT.h5 [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]
//              [--seed S] [--data FILE.h5]
//
// The model shape comes from the config stored in the checkpoint; the tokenizer too when the
// checkpoint carries one (format 3: /tokenizer, tokenizer.h's blob), else the one of the token
// file the model was trained on (--data, default the checkpoint's data.path). Sampling: logits
// / T, restricted to the K most likely tokens (K = 0: all), softmax, one draw from a Philox
// stream of the seed; T = 0 is greedy (argmax). Generation stops early at the dataset's
// end-of-text token when it has one. The text (prompt + continuation) goes to stdout, the
// rest to stderr.
#include <errno.h>
#include <math.h>
#include "core/common.h"
#include "core/config.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/decode.h"
#include "model/model.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn-sample --checkpoint CKPT.h5 [options]\n"
            "  --prompt TEXT        text to continue (default: end-of-text token, or a newline)\n"
            "  --tokens N           tokens to generate (default 256)\n"
            "  --temperature T      >= 0; 0 = greedy (default 1.0)\n"
            "  --top-k K            sample among the K most likely tokens; 0 = all (default 0)\n"
            "  --seed S             sampling seed (default 1337)\n"
            "  --data FILE.h5       token file whose tokenizer to use when the checkpoint carries\n"
            "                       none (default: the checkpoint's data.path)\n");
}

static long parse_long(const char *opt, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        gdn_die("%s '%s': expected an integer in [%ld, %ld]", opt, s, lo, hi);
    return v;
}

static double parse_double(const char *opt, const char *s, double lo) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo)
        gdn_die("%s '%s': expected a number >= %g", opt, s, lo);
    return v;
}

// text -> ids with the checkpoint's tokenizer (tok) or the token file's (spec).
static bool encode_text(const gdn_tokenizer *tok, const char *spec, const char *text,
                        uint32_t **ids, size_t *n, char *err, size_t errlen) {
    if (!tok) return tokenizer_encode(spec, text, strlen(text), ids, n, err, errlen);
    tok_ids v = {0};
    if (!tok_encode(tok, text, strlen(text), false, &v, err, errlen)) {
        tok_ids_free(&v);
        return false;
    }
    *ids = v.ids;
    *n = v.n;
    return true;
}

// ids -> text, likewise.
static bool decode_ids(const gdn_tokenizer *tok, const char *spec, const int32_t *ids, size_t n,
                       char **text, char *err, size_t errlen) {
    if (!tok) return tokenizer_decode(spec, ids, n, text, err, errlen);
    uint32_t *u = gdn_malloc((n ? n : 1) * sizeof *u);
    for (size_t i = 0; i < n; i++) u[i] = (uint32_t)ids[i];
    size_t len;
    bool ok = tok_decode(tok, u, n, text, &len, err, errlen);
    free(u);
    return ok;
}

int main(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *data = NULL;
    long n_tokens = 256, top_k = 0;
    double temp = 1.0;
    uint64_t seed = 1337;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc || strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "error: unexpected argument '%s'%s\n", a,
                    strncmp(a, "--", 2) == 0 ? " (missing value)" : "");
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--checkpoint")) ckpt = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--tokens")) n_tokens = parse_long(a, v, 0, 1L << 24);
        else if (!strcmp(a, "--top-k")) top_k = parse_long(a, v, 0, 1L << 30);
        else if (!strcmp(a, "--temperature")) temp = parse_double(a, v, 0.0);
        else if (!strcmp(a, "--seed")) seed = (uint64_t)parse_long(a, v, 0, 0x7fffffffffffffffL);
        else {
            fprintf(stderr, "error: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "error: --checkpoint is required\n");
        usage(stderr);
        return 2;
    }

    // config and model shape from the checkpoint
    char err[1024];
    char *text = checkpoint_read_config(ckpt, err, sizeof err);
    if (!text)
        gdn_die("%s\nHINT: pass a checkpoint written by gdn-train (OUT_DIR/checkpoint.h5)", err);
    gdn_config cfg;
    config_defaults(&cfg);
    bool ok = config_load_string(&cfg, text, ckpt);
    free(text);
    if (!ok) gdn_die("'%s': the stored config does not parse with this build (see above)", ckpt);

    // the tokenizer: the checkpoint's when it carries one that this build loads, else the token
    // file's
    ckpt_tokenizer ct;
    if (!checkpoint_read_tokenizer(ckpt, &ct, err, sizeof err)) gdn_die("%s", err);
    gdn_tokenizer *tok = NULL;
    if (ct.kind[0]) {
        tok = tok_load_blob(ct.kind, ct.blob, ct.n, ckpt, err, sizeof err);
        if (!tok) fprintf(stderr, "note: %s; the token file's tokenizer is used\n", err);
    }
    ckpt_tokenizer_free(&ct);
    token_file tf = {.eot_token = -1};
    if (!tok) {
        if (!data) data = cfg.data_path;
        if (!tokfile_open(&tf, data, err, sizeof err))
            gdn_die("%s\nHINT: pass --data FILE.h5, the token file the model was trained on (its "
                    "tokenizer is needed)", err);
        if (cfg.vocab_size == 0) cfg.vocab_size = tf.vocab_size;
        if (cfg.vocab_size < tf.vocab_size)
            gdn_die("'%s' has vocab_size %d but the model in '%s' has %d: not the model's dataset",
                    data, tf.vocab_size, ckpt, cfg.vocab_size);
    } else {
        tf.eot_token = tok_eot(tok);
        snprintf(tf.tokenizer, sizeof tf.tokenizer, "%s (from the checkpoint)", tok_kind(tok));
        if (cfg.vocab_size == 0) cfg.vocab_size = tok_vocab_size(tok);
    }

    model *m = model_create(&cfg, &backend_cpu, 1, 1);
    train_state st;
    if (!checkpoint_load(ckpt, m, &st, err, sizeof err)) gdn_die("%s", err);
    model_print_summary(m, stderr);
    fprintf(stderr, "checkpoint %s: step %ld, %llu tokens seen; tokenizer %s\n", ckpt, st.step,
            (unsigned long long)st.tokens_seen, tf.tokenizer);

    // prompt -> ids (no prompt: start from end-of-text, or a newline)
    uint32_t *pids = NULL;
    size_t np = 0;
    bool show_start = true;   // whether the start ids are part of the printed text
    if (prompt && prompt[0]) {
        if (!encode_text(tok, tf.tokenizer, prompt, &pids, &np, err, sizeof err))
            gdn_die("encoding the prompt: %s", err);
    } else if (tf.eot_token >= 0) {
        pids = gdn_malloc(sizeof *pids);
        pids[0] = (uint32_t)tf.eot_token;
        np = 1;
        show_start = false;
    } else if (!encode_text(tok, tf.tokenizer, "\n", &pids, &np, err, sizeof err)) {
        gdn_die("encoding the start token: %s", err);
    }
    if (np == 0) gdn_die("the prompt encodes to no tokens");
    size_t total = np + (size_t)n_tokens;
    if (total > (size_t)INT32_MAX) gdn_die("prompt + --tokens too long");
    int32_t *ids = gdn_malloc(total * sizeof *ids);
    for (size_t i = 0; i < np; i++) {
        if (pids[i] >= (uint32_t)m->V)
            gdn_die("prompt token %u at %zu is outside the model's vocabulary %d", pids[i], i,
                    m->V);
        ids[i] = (int32_t)pids[i];
    }
    free(pids);

    // generate
    decoder *dec = decoder_create(m, (int)total);
    rng_t r;
    rng_init(&r, seed, 0x53414d50u);  // "SAMP"
    double t0 = gdn_now();
    const double *logits = NULL;
    for (size_t i = 0; i < np; i++) logits = decoder_step(dec, ids[i]);
    double t1 = gdn_now();
    size_t n = np;
    for (long i = 0; i < n_tokens; i++) {
        int32_t tok = decoder_sample(dec, logits, temp, (int)top_k, &r);
        if (tok == tf.eot_token) break;
        ids[n++] = tok;
        if (i + 1 < n_tokens) logits = decoder_step(dec, tok);
    }
    double t2 = gdn_now();

    char *out;
    size_t skip = show_start ? 0 : np;
    if (!decode_ids(tok, tf.tokenizer, ids + skip, n - skip, &out, err, sizeof err))
        gdn_die("decoding the output: %s", err);
    fputs(out, stdout);
    fputc('\n', stdout);
    if (fflush(stdout) != 0) gdn_die("writing the output: %s", strerror(errno));
    fprintf(stderr, "prompt %zu tokens (%.1f tok/s), generated %zu tokens (%.1f tok/s)\n", np,
            np / GDN_MAX(t1 - t0, 1e-9), n - np, (n - np) / GDN_MAX(t2 - t1, 1e-9));

    free(out);
    free(ids);
    decoder_free(dec);
    model_free(m);
    if (tok) tok_free(tok);
    else tokfile_close(&tf);
    return 0;
}
