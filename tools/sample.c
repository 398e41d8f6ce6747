// sample.c — gdn-sample: generate text from a checkpoint token by token, on the GPU
// (src/model/decode_cuda.h, the model's dtype: --precision) or on the CPU in float64
// (src/model/decode.h); --device auto takes the GPU when this build has CUDA and one is present.
//
//   gdn-sample --checkpoint CKPT.h5 [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]
//              [--top-p P] [--seed S] [--data FILE.h5] [--device auto|cuda|cpu]
//              [--precision fp32|bf16] [--specials template|none]
//
// The model shape comes from the config stored in the checkpoint; the tokenizer too when the
// checkpoint carries one (format 3: /tokenizer, tokenizer.h's blob), else the one of the token
// set the model was trained on (--data, default the checkpoint's data.path). Sampling: the
// rule of src/model/sampling.h (docs/sampling.md): logits / T over the K most likely tokens
// (K = 0: all) and the nucleus of mass P, one Philox draw per position from the seed; T = 0 is
// greedy (argmax). The CPU and the GPU draw the same uniforms. Generation stops at the
// tokenizer's end-of-text token when it has one. --specials template (default, as gdn-prepare):
// the ids the tokenizer.json post-processor puts before a text (Llama 3: <|begin_of_text|>) go
// before the prompt, as before every training document. The text (prompt + continuation) goes to stdout, the
// rest to stderr.
#include <errno.h>
#include <math.h>
#include "core/common.h"
#include "core/config.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/backend_gpu.h"
#include "model/decode.h"
#include "model/model.h"
#include "model/sampling.h"
#ifdef GDN_HAVE_CUDA
#include "model/decode_cuda.h"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn-sample --checkpoint CKPT.h5 [options]\n"
            "  --prompt TEXT        text to continue (default: the template's prefix, else the\n"
            "                       end-of-text token, else a newline)\n"
            "  --tokens N           tokens to generate (default 256)\n"
            "  --temperature T      >= 0; 0 = greedy (default 1.0)\n"
            "  --top-k K            sample among the K most likely tokens; 0 = all (default 0)\n"
            "  --top-p P            sample within the smallest set of most likely tokens holding\n"
            "                       P of the probability (nucleus); 1 = all (default 1)\n"
            "  --seed S             sampling seed (default 1337)\n"
            "  --device D           auto (default: the GPU when there is one), cuda or cpu\n"
            "  --precision P        GPU parameters and activations: fp32 (default) or bf16\n"
            "  --specials S         template (default): the tokenizer's post-processor prefix\n"
            "                       (e.g. BOS) before the prompt, as gdn-prepare frames each\n"
            "                       document; none: the prompt's ids alone\n"
            "  --data PATH          token set whose tokenizer to use when the checkpoint carries\n"
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

// The tokenizer of a token set: a shard set's stored blob, or what a version-1 file names
// ("bytes", or "spm:<model file>").
static gdn_tokenizer *set_tokenizer(const token_set *ts, char *err, size_t errlen) {
    if (ts->sharded)
        return tok_load_blob(ts->tokenizer_kind, ts->tokenizer_blob, ts->tokenizer_blob_len,
                             ts->index, err, errlen);
    const char *spec = strncmp(ts->tokenizer, "spm:", 4) ? ts->tokenizer : ts->tokenizer + 4;
    return tok_load(spec, err, errlen);
}

int main(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *data = NULL;
    long n_tokens = 256, top_k = 0;
    double temp = 1.0, top_p = 1.0;
    uint64_t seed = 1337;
    const char *device = "auto", *precision = "fp32", *specials = "template";
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
        else if (!strcmp(a, "--top-p")) top_p = parse_double(a, v, 0.0);
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--precision")) precision = v;
        else if (!strcmp(a, "--specials")) specials = v;
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
    const char *tok_from = "the checkpoint";
    if (!tok) {
        if (!data) data = cfg.data_path;
        token_set ts;
        if (!tokset_open(&ts, data, err, sizeof err))
            gdn_die("%s\nHINT: pass --data PATH, the token file or shard set the model was trained "
                    "on (its tokenizer is needed)", err);
        if (cfg.vocab_size == 0) cfg.vocab_size = ts.vocab_size;
        if (cfg.vocab_size < ts.vocab_size)
            gdn_die("'%s' has vocab_size %d but the model in '%s' has %d: not the model's dataset",
                    data, ts.vocab_size, ckpt, cfg.vocab_size);
        tok = set_tokenizer(&ts, err, sizeof err);
        tokset_close(&ts);
        if (!tok) gdn_die("%s: its tokenizer: %s", data, err);
        tok_from = data;
    }
    if (cfg.vocab_size == 0) cfg.vocab_size = tok_vocab_size(tok);
    const int eot = tok_eot(tok);

    sample_params sp = {temp, (int)top_k, top_p, seed};
    if (!sample_params_check(&sp, err, sizeof err)) gdn_die("--temperature / --top-p: %s", err);
    if (strcmp(device, "auto") && strcmp(device, "cuda") && strcmp(device, "cpu"))
        gdn_die("--device '%s': expected auto, cuda or cpu", device);
    if (strcmp(specials, "template") && strcmp(specials, "none"))
        gdn_die("--specials '%s': expected template or none", specials);
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16"))
        gdn_die("--precision '%s': expected fp32 or bf16", precision);
    bool gpu = strcmp(device, "cpu") != 0 && backend_gpu_devices() > 0;
    if (!strcmp(device, "cuda") && !gpu)
        gdn_die("--device cuda: %s", backend_gpu_built() ? "no usable CUDA device"
                                                         : "this build has no CUDA backend");
    model *m = model_create(&cfg, gpu ? backend_gpu_get(!strcmp(precision, "bf16")) : &backend_cpu,
                            1, 1);
    train_state st;
    if (!checkpoint_load(ckpt, m, &st, err, sizeof err)) gdn_die("%s", err);
    model_print_summary(m, stderr);
    fprintf(stderr, "checkpoint %s: step %ld, %llu tokens seen; tokenizer %s from %s\n", ckpt,
            st.step, (unsigned long long)st.tokens_seen, tok_kind(tok), tok_from);

    // start ids: the template's prefix (--specials template), then the prompt; no prompt and
    // no prefix: end-of-text, else a newline. The prefix and the end-of-text start are not
    // printed.
    tok_ids pv = {0};
    size_t hidden = 0;
    const tok_template tp = tok_get_template(tok);
    if (!strcmp(specials, "template") && tp.n_prefix) {
        pv.ids = gdn_malloc(tp.n_prefix * sizeof *pv.ids);
        memcpy(pv.ids, tp.prefix, tp.n_prefix * sizeof *pv.ids);
        pv.n = pv.cap = hidden = tp.n_prefix;
    }
    if (prompt && prompt[0]) {
        if (!tok_encode(tok, prompt, strlen(prompt), true, &pv, err, sizeof err))
            gdn_die("encoding the prompt: %s", err);
    } else if (hidden == 0 && eot >= 0) {
        pv.ids = gdn_malloc(sizeof *pv.ids);
        pv.ids[0] = (uint32_t)eot;
        pv.n = pv.cap = hidden = 1;
    } else if (hidden == 0 && !tok_encode(tok, "\n", 1, false, &pv, err, sizeof err)) {
        gdn_die("encoding the start token: %s", err);
    }
    uint32_t *pids = pv.ids;
    size_t np = pv.n;
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

    // generate: the prompt fed token by token, then the draws (sampling.h: row 0, the drawn
    // token's position)
    double t0 = gdn_now(), t1 = t0;
    size_t n = np;
    if (gpu) {
#ifdef GDN_HAVE_CUDA
        decoder_cuda *dg = decoder_cuda_create(m, 1, (int)total);
        for (size_t i = 0; i < np; i++) decoder_cuda_step(dg, &ids[i]);
        decoder_cuda_sync(dg);
        t1 = gdn_now();
        decoder_cuda_generate(dg, &sp, (int)n_tokens, ids + np);
        while (n < total && ids[n] != eot) n++;
        decoder_cuda_free(dg);
#endif
    } else {
        decoder *dec = decoder_create(m, (int)total);
        double *sc = gdn_malloc((size_t)m->V * sizeof(double));
        int *isc = gdn_malloc((size_t)m->V * sizeof(int));
        uint64_t key = sample_key(seed);
        const double *logits = NULL;
        for (size_t i = 0; i < np; i++) logits = decoder_step(dec, ids[i]);
        t1 = gdn_now();
        for (long i = 0; i < n_tokens; i++) {
            int32_t next = sample_token(logits, m->V, &sp, key, 0, (uint64_t)n, sc, isc);
            if (next == eot) break;
            ids[n++] = next;
            if (i + 1 < n_tokens) logits = decoder_step(dec, next);
        }
        free(sc);
        free(isc);
        decoder_free(dec);
    }
    double t2 = gdn_now();

    char *out;
    size_t skip = hidden, out_len;
    uint32_t *gen = gdn_malloc((n - skip + 1) * sizeof *gen);
    for (size_t i = skip; i < n; i++) gen[i - skip] = (uint32_t)ids[i];
    if (!tok_decode(tok, gen, n - skip, &out, &out_len, err, sizeof err))
        gdn_die("decoding the output: %s", err);
    free(gen);
    fwrite(out, 1, out_len, stdout);
    fputc('\n', stdout);
    if (fflush(stdout) != 0) gdn_die("writing the output: %s", strerror(errno));
    fprintf(stderr, "%s: prompt %zu tokens (%.1f tok/s), generated %zu tokens (%.1f tok/s)\n",
            gpu ? "GPU" : "CPU", np,
            np / GDN_MAX(t1 - t0, 1e-9), n - np, (n - np) / GDN_MAX(t2 - t1, 1e-9));

    free(out);
    free(ids);
    model_free(m);
    tok_free(tok);
    return 0;
}
