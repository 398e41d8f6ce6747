// generate.h — one sequence's continuation on whatever device the model lives on, and the short
// text sample that gdn-train prints every train.sample_every steps. Header-only like
// backend_gpu.h: a program linking gdn_cuda (GDN_HAVE_CUDA) generates a GPU model's tokens with
// the GPU decoder (decode_cuda.h), any other with the float64 CPU decoder (decode.h); both draw
// by the rule of sampling.h (row 0, t = the drawn token's position).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../core/common.h"
#include "../data/dataset.h"
#include "../data/tokenizer.h"
#include "backend_gpu.h"
#include "decode.h"
#include "model.h"
#include "sampling.h"
#ifdef GDN_HAVE_CUDA
#include "decode_cuda.h"
#endif

// Whether m's parameters live on the GPU backend (either mode).
static inline bool generate_model_on_gpu(const model *m) {
    return backend_gpu_devices() > 0 && (m->be == backend_gpu_get(false) || m->be == backend_gpu_get(true));
}

// out (n) = the n tokens drawn after prompt (np >= 1 tokens in [0, V)); no early stop.
static inline void generate_tokens(const model *m, const int32_t *prompt, int np, int n,
                                   const sample_params *p, int32_t *out) {
    if (np < 1 || n < 0) gdn_die("generate_tokens: prompt of %d tokens, %d to generate", np, n);
#ifdef GDN_HAVE_CUDA
    if (generate_model_on_gpu(m)) {
        decoder_cuda *d = decoder_cuda_create(m, 1, np + n);
        for (int i = 0; i < np; i++) decoder_cuda_step(d, &prompt[i]);
        decoder_cuda_generate(d, p, n, out);
        decoder_cuda_free(d);
        return;
    }
#endif
    decoder *d = decoder_create(m, np + n);
    double *sc = (double *)gdn_malloc((size_t)m->V * sizeof(double));
    int *isc = (int *)gdn_malloc((size_t)m->V * sizeof(int));
    const uint64_t key = sample_key(p->seed);
    const double *logits = NULL;
    for (int i = 0; i < np; i++) logits = decoder_step(d, prompt[i]);
    for (int i = 0; i < n; i++) {
        out[i] = sample_token(logits, m->V, p, key, 0, (uint64_t)(np + i), sc, isc);
        if (i + 1 < n) logits = decoder_step(d, out[i]);
    }
    free(sc);
    free(isc);
    decoder_free(d);
}

// train.sample_every: n tokens after the ids every document of the set starts with (its frame's
// prefix: the template's BOS, or the end-of-text token; token 0 without either), at
// temperature 1 with the run's seed, decoded with the set's tokenizer and printed as one line
// "step S sample: TEXT" (newlines written \n); a tokenizer that does not load is reported on the
// line instead, the run goes on.
static inline void generate_print_sample(const model *m, const token_set *ts, int n, uint64_t seed,
                                         long step, FILE *f) {
    int32_t eot_start = ts->eot_token >= 0 && ts->eot_token < m->V ? ts->eot_token : 0;
    const int32_t *start = &eot_start;  // the ids every document of the set starts with
    int n_start = 1;
    int32_t *pre = NULL;
    if (ts->frame.n_prefix > 0 && ts->frame.n_prefix < 64) {
        pre = (int32_t *)gdn_malloc(ts->frame.n_prefix * sizeof(int32_t));
        bool ok = true;
        for (size_t i = 0; i < ts->frame.n_prefix; i++) {
            pre[i] = (int32_t)ts->frame.prefix[i];
            ok = ok && ts->frame.prefix[i] < (uint32_t)m->V;
        }
        if (ok) {
            start = pre;
            n_start = (int)ts->frame.n_prefix;
        }
    }
    int32_t *ids = (int32_t *)gdn_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    const sample_params p = {1.0, 0, 1.0, seed};
    generate_tokens(m, start, n_start, n, &p, ids);
    free(pre);
    char err[512];
    gdn_tokenizer *t;
    if (ts->tokenizer_blob)
        t = tok_load_blob(ts->tokenizer_kind, ts->tokenizer_blob, ts->tokenizer_blob_len, ts->index,
                          err, sizeof err);
    else
        t = tok_load(strncmp(ts->tokenizer, "spm:", 4) ? ts->tokenizer : ts->tokenizer + 4, err, sizeof err);
    char *text = NULL;
    size_t len = 0;
    int kept = 0;
    while (kept < n && ids[kept] != ts->eot_token) kept++;  // up to the end of the document
    if (t && !tok_decode(t, (const uint32_t *)ids, (size_t)kept, &text, &len, err, sizeof err)) text = NULL;
    fprintf(f, "step %ld sample: ", step);
    if (text) {
        for (size_t i = 0; i < len; i++) {
            if (text[i] == '\n') fputs("\\n", f);
            else if (text[i] == '\r') fputs("\\r", f);
            else fputc(text[i], f);
        }
        fputc('\n', f);
    } else {
        fprintf(f, "(no text: %s)\n", err);
    }
    fflush(f);
    free(text);
    if (t) tok_free(t);
    free(ids);
}
