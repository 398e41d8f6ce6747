// tokenizer_bench.c — encode throughput of a tokenizer of src/data/tokenizer.h on a text file.
//
//   tokenizer_bench TOKENIZER FILE [--threads N] [--repeat R] [--chunk BYTES]
//
// The file is cut into chunks of about BYTES (default 65536) at newlines, as documents would
// come; N threads take chunks in turn from a shared counter and encode them with specials on.
// Prints one line: bytes, ids, best-of-R seconds and MB/s (10^6 bytes per second). Run by
// bench/tokenizer.py beside the `tokenizers` package and spm_encode.
#include "core/common.h"
#include "data/tokenizer.h"
#include <pthread.h>
#include <stdatomic.h>

typedef struct {
    const gdn_tokenizer *t;
    const char *text;
    const size_t *cut;       // chunk c = text[cut[c], cut[c + 1])
    size_t n_chunks;
    atomic_size_t next;
    atomic_size_t ids;
} bench_job;

static void *worker(void *p) {
    bench_job *j = p;
    tok_ids v = {0};
    char err[1024];
    size_t ids = 0;
    for (size_t c; (c = atomic_fetch_add(&j->next, 1)) < j->n_chunks;) {
        v.n = 0;
        if (!tok_encode(j->t, j->text + j->cut[c], j->cut[c + 1] - j->cut[c], true, &v, err,
                        sizeof err))
            gdn_die("encode: %s", err);
        ids += v.n;
    }
    atomic_fetch_add(&j->ids, ids);
    tok_ids_free(&v);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tokenizer_bench TOKENIZER FILE [--threads N] [--repeat R] "
                "[--chunk BYTES]\n");
        return 2;
    }
    int threads = 1, repeat = 3;
    size_t chunk = 65536;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk")) chunk = (size_t)atol(argv[i + 1]);
        else gdn_die("unknown option %s", argv[i]);
    }
    if (threads < 1 || threads > 256 || repeat < 1 || chunk < 1)
        gdn_die("--threads, --repeat and --chunk must be positive");
    char err[1024];
    gdn_tokenizer *t = tok_load(argv[1], err, sizeof err);
    if (!t) gdn_die("%s", err);
    FILE *fp = fopen(argv[2], "rb");
    if (!fp) gdn_die("cannot open %s: %s", argv[2], strerror(errno));
    CHECK_SYS(fseek(fp, 0, SEEK_END));
    long sz = ftell(fp);
    CHECK_SYS(sz);
    CHECK_SYS(fseek(fp, 0, SEEK_SET));
    char *text = gdn_malloc((size_t)sz + 1);
    if (fread(text, 1, (size_t)sz, fp) != (size_t)sz) gdn_die("cannot read %s", argv[2]);
    fclose(fp);
    size_t n = (size_t)sz, n_chunks = 0, cap = n / chunk + 2;
    size_t *cut = gdn_malloc((cap + 1) * sizeof *cut);
    for (size_t pos = 0; pos < n;) {
        size_t end = pos + chunk < n ? pos + chunk : n;
        while (end < n && text[end - 1] != '\n') end++;
        if (n_chunks + 2 > cap) cut = gdn_realloc(cut, ((cap *= 2) + 1) * sizeof *cut);
        cut[n_chunks++] = pos;
        pos = end;
    }
    cut[n_chunks] = n;

    double best = 1e30;
    size_t ids = 0;
    for (int r = 0; r < repeat; r++) {
        bench_job j = {.t = t, .text = text, .cut = cut, .n_chunks = n_chunks};
        atomic_init(&j.next, 0);
        atomic_init(&j.ids, 0);
        pthread_t th[256];
        double t0 = gdn_now();
        for (int i = 0; i < threads; i++)
            if (pthread_create(&th[i], NULL, worker, &j) != 0) gdn_die("pthread_create failed");
        for (int i = 0; i < threads; i++)
            if (pthread_join(th[i], NULL) != 0) gdn_die("pthread_join failed");
        double dt = gdn_now() - t0;
        if (dt < best) best = dt;
        ids = atomic_load(&j.ids);
    }
    printf("gdn %s threads=%d bytes=%zu ids=%zu chunks=%zu seconds=%.4f MB/s=%.2f\n", tok_kind(t),
           threads, n, ids, n_chunks, best, n / best / 1e6);
    free(cut);
    free(text);
    tok_free(t);
    return 0;
}
