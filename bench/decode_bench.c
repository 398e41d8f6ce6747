// decode_bench.c — decode speed of the GPU decoder (src/model/decode_cuda.h): a model of the
// given config (random init, seed 1) on the CUDA backend, B sequences of a random P-token prompt,
// then N tokens per sequence generated greedily (temperature 0: no sampling cost, as fla's
// generate with do_sample=False). Timed: the N generated tokens after one untimed warm-up
// generation of the same length (cuBLASLt plans, the CUDA graph); the prompt (fed token by
// token) is timed apart. One JSON line on stdout: tokens/s = B N / seconds.
//
//   decode_bench CONFIG.ini [--batch B] [--prompt P] [--tokens N] [--precision bf16|fp32]
//                [--graph 1|0] [--temperature T --top-k K --top-p P]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/common.h"
#include "core/config.h"
#include "core/rng.h"
#include "model/backend_cuda.h"
#include "model/decode_cuda.h"
#include "model/model.h"

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: decode_bench CONFIG.ini [--batch B] [--prompt P] [--tokens N] "
                        "[--precision bf16|fp32] [--graph 1|0] [--temperature T] [--top-k K] "
                        "[--top-p P]\n");
        return 2;
    }
    int B = 1, P = 16, N = 256, graph = 1;
    bool bf16 = true;
    sample_params sp = {0.0, 0, 1.0, 1337};
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--prompt")) P = atoi(v);
        else if (!strcmp(a, "--tokens")) N = atoi(v);
        else if (!strcmp(a, "--graph")) graph = atoi(v);
        else if (!strcmp(a, "--temperature")) sp.temperature = atof(v);
        else if (!strcmp(a, "--top-k")) sp.top_k = atoi(v);
        else if (!strcmp(a, "--top-p")) sp.top_p = atof(v);
        else if (!strcmp(a, "--precision")) {
            if (strcmp(v, "bf16") && strcmp(v, "fp32")) gdn_die("--precision %s: bf16 or fp32", v);
            bf16 = !strcmp(v, "bf16");
        } else gdn_die("unknown option %s", a);
    }
    if (B < 1 || P < 1 || N < 1) gdn_die("--batch, --prompt and --tokens must be >= 1");
    gdn_config c;
    config_defaults(&c);
    if (!config_load(&c, argv[1], NULL, 0)) gdn_die("%s: see above", argv[1]);
    if (c.vocab_size <= 1) gdn_die("%s: model.vocab_size must be set", argv[1]);
    model *m = model_create(&c, backend_cuda_get(bf16), 1, 1);
    model_init_params(m, 1);
    char dev[128];
    backend_cuda_peak_flops(bf16, dev, sizeof dev);
    fprintf(stderr, "decode_bench: %s, %.2fM parameters, %s, batch %d, prompt %d, %d tokens, graph %d\n",
            dev, model_count_params(m, true) / 1e6, bf16 ? "bf16" : "fp32", B, P, N, graph);
    decoder_cuda *d = decoder_cuda_create(m, B, P + N);
    decoder_cuda_set_graph(d, graph != 0);
    int32_t *prompt = gdn_malloc((size_t)P * B * sizeof(int32_t));
    int32_t *out = gdn_malloc((size_t)N * B * sizeof(int32_t));
    rng_t r;
    rng_init(&r, 7, 0);
    for (size_t i = 0; i < (size_t)P * B; i++) prompt[i] = (int32_t)rng_below(&r, (uint64_t)m->V);
    double tp = 0, tg = 0;
    for (int rep = 0; rep < 2; rep++) {  // rep 0: warm-up
        decoder_cuda_reset(d);
        double t0 = gdn_now();
        for (int t = 0; t < P; t++) decoder_cuda_step(d, prompt + (size_t)t * B);
        decoder_cuda_sync(d);
        double t1 = gdn_now();
        decoder_cuda_generate(d, &sp, N, out);   // ends with a synchronisation
        double t2 = gdn_now();
        tp = t1 - t0;
        tg = t2 - t1;
        fprintf(stderr, "  %s: prompt %.3f s, %d tokens x %d sequences in %.3f s (%.0f tokens/s)\n",
                rep ? "timed" : "warm-up", tp, N, B, tg, (double)N * B / tg);
    }
    printf("{\"bench\": \"decode\", \"impl\": \"gdn.c\", \"device\": \"%s\", \"precision\": \"%s\", "
           "\"batch\": %d, \"prompt\": %d, \"tokens\": %d, \"graph\": %d, \"temperature\": %g, "
           "\"seconds\": %.4f, \"tokens_per_s\": %.1f, \"ms_per_step\": %.4f, \"prompt_s\": %.4f, "
           "\"first_tokens\": [%d, %d, %d, %d]}\n",
           dev, bf16 ? "bf16" : "fp32", B, P, N, graph, sp.temperature, tg, (double)N * B / tg,
           1e3 * tg / N, tp, out[0], out[1 % N], out[2 % N], out[3 % N]);
    free(prompt);
    free(out);
    decoder_cuda_free(d);
    model_free(m);
    return 0;
}
