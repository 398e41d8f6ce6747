// prepare.c — gdn-prepare: a raw text corpus -> token shards (docs/data.md).
//
// One reader thread streams the inputs as document pieces (corpus.h) into a fixed ring of
// batches; --threads workers encode batches with one shared tokenizer (tokenizer.h); the main
// thread takes the batches back in input order and writes each document, whole, to the train or
// val shards (shards.h) by the seeded rule of its ordinal. So the output is a pure function of
// the inputs and the options, whatever the thread count, and memory is bounded by the ring.
// With --tokenizer bpe|spm --vocab N a first pass over the first --train-mb of text trains the
// tokenizer in-process (BPE: the workers count words into bpe_train; SentencePiece: the text is
// gathered for libsentencepiece_train) into the temporary directory, and the second pass encodes
// with tok_load of that file.
// The shards go to a temporary directory inside --out and the index is written last, so a
// failed run leaves the previous contents of --out as they were.
// An --out ending in .h5 writes the single version-1 token file instead (all tokens in memory;
// the first 1 - val_fraction of the tokens train, the rest val).
#include "../src/core/common.h"
#include "../src/data/corpus.h"
#include "../src/data/dataset.h"
#include "../src/data/bpe_train.h"
#include "../src/data/shards.h"
#include "../src/data/spm_train.h"
#include "../src/data/tokenizer.h"
#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_BAD_LISTED 20                // bad documents listed one by one; the rest counted
#define DEFAULT_BATCH_BYTES (1u << 20)
#define DEFAULT_SHARD_TOKENS 100000000ull
#define DEFAULT_TRAIN_BYTES (256ull << 20)
#define DEFAULT_TRAIN_MEM (1ull << 30)
#define DEFAULT_MAX_RECORD (64u << 20)

typedef struct {
    const char **inputs;
    int n_inputs;
    const char *out;
    bool v1;                     // --out FILE.h5: the version-1 single file
    const char *tokenizer;       // "bytes", a tokenizer file, or a kind to train (bpe, spm)
    int vocab;                   // > 0: train a tokenizer of this size first
    uint64_t train_bytes;        // text the trainer sees (the first documents)
    size_t train_mem;            // the BPE trainer's word table cap (bpe_train_opts.mem_cap)
    double val_fraction;
    uint64_t seed;
    uint64_t shard_tokens;
    int threads;
    size_t batch_bytes;
    corpus_options corpus;
    bool skip_bad, overwrite;
    bool template_specials;      // --specials template: the tokenizer's template around documents
} prep_options;

static void usage(FILE *fp) {
    fprintf(
        fp,
        "usage: gdn-prepare --input PATH [--input PATH ...] --out DIR [options]\n"
        "\n"
        "Tokenize a corpus into token shards: DIR/index.json, DIR/train-000000.h5 ...,\n"
        "DIR/val-000000.h5 ... (docs/data.md). An --out ending in .h5 writes one version-1\n"
        "token file instead (small inputs: first 1 - F of the tokens train, the rest val).\n"
        "\n"
        "inputs\n"
        "  --input PATH        a text file, a .jsonl file or a directory of them (walked\n"
        "                      recursively in name order); any file may be .gz or .zst\n"
        "  --text-field NAME   the jsonl field holding the text (default text)\n"
        "  --doc-split RULE    documents of text files: file (default: one file, one\n"
        "                      document), blank-lines (runs of lines between blank lines),\n"
        "                      lines (each non-blank line)\n"
        "  --max-record MB     longest jsonl line accepted (default 64); longer is bad input\n"
        "  --on-error MODE     bad input (malformed jsonl line, missing field, invalid UTF-8,\n"
        "                      empty document, corrupt .gz/.zst): stop (default) or skip (the\n"
        "                      document is left out and counted)\n"
        "tokenizer\n"
        "  --tokenizer T       bytes (default: id = byte, vocab 256), a tokenizer file\n"
        "                      (tokenizer.json, vocab.json + merges.txt, SentencePiece .model),\n"
        "                      or bpe | spm with --vocab N: train one on the corpus first\n"
        "  --vocab N           the trained tokenizer's vocabulary size\n"
        "  --specials MODE     template (default): each document as Hugging Face's\n"
        "                      encode(text) makes it, with the tokenizer.json post-processor's\n"
        "                      ids (Llama 3: <|begin_of_text|> first), then the eot; none: the\n"
        "                      eot, then the text's ids alone (add_special_tokens=False)\n"
        "  --train-mb MB       text the tokenizer trainer reads, from the first documents\n"
        "                      (default 256); trained on --threads threads\n"
        "  --train-mem MB      bpe: memory for the trainer's word counts (default 1024; the\n"
        "                      rarest words are dropped to stay under it; merging takes\n"
        "                      about 3x this at most)\n"
        "output\n"
        "  --out DIR|FILE.h5   shard directory (created if missing), or a version-1 file\n"
        "  --overwrite         replace the token set already in DIR\n"
        "  --val-fraction F    documents for val, 0 <= F < 1 (default 0.005; .h5: 0.1 of the\n"
        "                      tokens); document i goes to val iff Philox uniform(seed, i) < F\n"
        "  --seed S            seed of the train/val rule (default 1)\n"
        "  --shard-tokens N    a shard closes at the first document end at or past N tokens\n"
        "                      (default 100000000)\n"
        "performance\n"
        "  --threads N         encoding threads (default: the number of cores)\n"
        "  --batch-bytes N     text per batch (default 1048576); a document longer than N/4\n"
        "                      is encoded in pieces of at most N/4 bytes, cut at safe points;\n"
        "                      memory: about (2 threads + 2) x 5.2 x N + 3 x --max-record\n"
        "                      + 3 MiB (the summary prints the bound and the measured peak)\n"
        "  --help              this text\n"
        "\n"
        "example: gdn-prepare --input corpus/ --tokenizer gpt2/tokenizer.json --out data/corpus\n");
}

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...);

__attribute__((noreturn)) static void bad_usage(const char *msg, const char *arg) {
    fflush(stdout);
    fprintf(stderr, "gdn-prepare: %s%s%s%s\n(run gdn-prepare --help for usage)\n", msg,
            arg ? " '" : "", arg ? arg : "", arg ? "'" : "");
    exit(2);
}

// ---- cleanup on failure -----------------------------------------------------------------------

// What a failed run removes: the temporary directory of this run (and --out when this run
// created it), the open shards' temporary files (through the writers).
static struct {
    char tmp_dir[600];
    char made_out[600];
    shard_writer *w[2];
} cleanup;

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) fprintf(stderr, "warning: cannot remove %s: %s\n", p, strerror(errno));
    }
    closedir(d);
    rmdir(dir);
}

static void cleanup_run(void) {
    for (int s = 0; s < 2; s++) {
        shard_writer_free(cleanup.w[s]);
        cleanup.w[s] = NULL;
    }
    if (cleanup.tmp_dir[0]) remove_tree(cleanup.tmp_dir);
    if (cleanup.made_out[0]) rmdir(cleanup.made_out);
    cleanup.tmp_dir[0] = cleanup.made_out[0] = 0;
}

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("\ngdn-prepare: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    cleanup_run();
    exit(1);
}

// ---- the pipeline -----------------------------------------------------------------------------

typedef struct {
    size_t off, len;             // piece text: batch->text[off, off + len)
    bool first, last, unsafe;
    uint64_t ordinal;            // the document's number (input order), set on its pieces
    const char *file;
    uint64_t line;
    char *bad;                   // a bad-document note (malloc'd message) instead of a piece
    size_t tok_off, n_tok;       // its ids: batch->ids.ids[tok_off, tok_off + n_tok)
} event;

// Pieces and bad-document notes per batch at most.
static int batch_events(const prep_options *o) { return (int)GDN_MIN(o->batch_bytes / 16, 4096); }

enum { SLOT_FREE, SLOT_FILLED, SLOT_ENCODING, SLOT_DONE };

typedef struct {
    int state;
    uint64_t seq;
    char *text;                  // (batch_bytes)
    size_t len;
    event *ev;                   // (BATCH_EVENTS)
    int n_ev;
    tok_ids ids;
    bool end;                    // the input ends after this batch
    char fail[1024];             // reading failed after this batch: why
    char enc_err[1024];          // encoding failed: why
} batch;

typedef struct {
    const prep_options *o;
    const gdn_tokenizer *tok;    // encode the pieces with it, or
    bpe_trainer *trainer;        // count their words into it, or neither (the text is the result)
    uint64_t text_limit;         // > 0: stop after the piece that reaches this much text
    corpus *c;
    batch *slots;
    int n_slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool abort, reader_done;
} pipeline;

static void lock(pipeline *p) {
    int rc = pthread_mutex_lock(&p->mu);
    if (rc) gdn_die("pthread_mutex_lock: %s", strerror(rc));
}
static void unlock(pipeline *p) {
    int rc = pthread_mutex_unlock(&p->mu);
    if (rc) gdn_die("pthread_mutex_unlock: %s", strerror(rc));
}
static void wait_cv(pipeline *p) {
    int rc = pthread_cond_wait(&p->cv, &p->mu);
    if (rc) gdn_die("pthread_cond_wait: %s", strerror(rc));
}
static void wake_all(pipeline *p) {
    int rc = pthread_cond_broadcast(&p->cv);
    if (rc) gdn_die("pthread_cond_broadcast: %s", strerror(rc));
}

// The reader: fills slot seq % n_slots with the next pieces, in order.
static void *reader_main(void *arg) {
    pipeline *p = arg;
    uint64_t seq = 0, ordinal = 0;
    char err[1024];
    bool done = false;
    // a piece that did not fit in the last batch goes first into the next
    while (!done) {
        batch *b = &p->slots[seq % (uint64_t)p->n_slots];
        lock(p);
        while (b->state != SLOT_FREE && !p->abort) wait_cv(p);
        bool stop = p->abort;
        unlock(p);
        if (stop) break;
        b->seq = seq;
        b->len = 0;
        b->n_ev = 0;
        b->end = false;
        b->fail[0] = b->enc_err[0] = 0;
        for (;;) {
            corpus_piece pc;
            corpus_status st = corpus_next(p->c, &pc, err, sizeof err);
            if (st == CORPUS_END || st == CORPUS_FAIL) {
                b->end = true;
                if (st == CORPUS_FAIL) snprintf(b->fail, sizeof b->fail, "%s", err);
                done = true;
                break;
            }
            event *e = &b->ev[b->n_ev++];
            memset(e, 0, sizeof *e);
            if (st == CORPUS_BAD) {
                e->bad = gdn_strdup(err);
            } else {
                if (pc.first) ordinal++;
                e->off = b->len;
                e->len = pc.len;
                e->first = pc.first;
                e->last = pc.last;
                e->unsafe = pc.unsafe_cut;
                e->ordinal = ordinal - 1;
                e->file = pc.file;
                e->line = pc.line;
                memcpy(b->text + b->len, pc.text, pc.len);
                b->len += pc.len;
                if (p->text_limit && corpus_text_bytes(p->c) >= p->text_limit) {
                    b->end = done = true;
                    break;
                }
            }
            // full: no room for another piece of the largest size, or for another event
            if (b->len + p->o->corpus.piece_bytes > p->o->batch_bytes || b->n_ev == batch_events(p->o))
                break;
        }
        lock(p);
        b->state = SLOT_FILLED;
        if (done) p->reader_done = true;
        wake_all(p);
        unlock(p);
        seq++;
    }
    lock(p);
    p->reader_done = true;
    wake_all(p);
    unlock(p);
    return NULL;
}

// A worker: encodes filled batches (lowest sequence number first), or counts their words into
// the BPE trainer.
static void *worker_main(void *arg) {
    pipeline *p = arg;
    for (;;) {
        lock(p);
        batch *b = NULL;
        for (;;) {
            if (p->abort) break;
            for (int i = 0; i < p->n_slots; i++)
                if (p->slots[i].state == SLOT_FILLED && (!b || p->slots[i].seq < b->seq))
                    b = &p->slots[i];
            if (b || p->reader_done) break;
            wait_cv(p);
        }
        if (b) b->state = SLOT_ENCODING;
        unlock(p);
        if (!b) return NULL;
        b->ids.n = 0;
        if (p->tok) {
            size_t need = b->len + (size_t)b->n_ev + 16;  // ids <= bytes + 1 per piece
            if (b->ids.cap < need) {
                b->ids.ids = gdn_realloc(b->ids.ids, need * sizeof *b->ids.ids);
                b->ids.cap = need;
            }
        }
        for (int i = 0; i < b->n_ev && (p->tok || p->trainer); i++) {
            event *e = &b->ev[i];
            if (e->bad) continue;
            e->tok_off = b->ids.n;
            char err[900];
            if (p->trainer) {
                if (!bpe_train_add(p->trainer, b->text + e->off, e->len, err, sizeof err)) {
                    snprintf(b->enc_err, sizeof b->enc_err, "%s:%llu: BPE training: %s", e->file,
                             (unsigned long long)e->line, err);
                    break;
                }
                continue;
            }
            if (!tok_encode(p->tok, b->text + e->off, e->len, false, &b->ids, err, sizeof err)) {
                snprintf(b->enc_err, sizeof b->enc_err, "%s:%llu: cannot encode: %s", e->file,
                         (unsigned long long)e->line, err);
                break;
            }
            e->n_tok = b->ids.n - e->tok_off;
        }
        lock(p);
        b->state = SLOT_DONE;
        wake_all(p);
        unlock(p);
    }
}

// ---- the writer side --------------------------------------------------------------------------

typedef struct {
    const prep_options *o;
    shard_writer *w[2];          // shards output
    tok_ids v1[2];               // .h5 output: all tokens (split at the end)
    tok_ids newline;             // .h5 output: the ids of "\n" put between documents
    char v1_last;                // .h5 output: the last byte of the previous document
    int split;                   // the open document's split, -1 when none is open
    const shard_frame *frame;    // shards output: the ids the writer puts around each document
    uint64_t docs[2], tokens[2];  // tokens: as written (frames included)
    uint64_t bad, unsafe_cuts;
} sink;

static void sink_begin(sink *s, uint64_t ordinal) {
    char err[1024];
    s->split = (!s->o->v1 && shard_doc_is_val(s->o->seed, ordinal, s->o->val_fraction))
                   ? SHARD_SPLIT_VAL
                   : SHARD_SPLIT_TRAIN;
    if (s->o->v1) {
        if (s->v1_last && s->v1_last != '\n') {
            for (size_t i = 0; i < s->newline.n; i++) {
                tok_ids *v = &s->v1[0];
                if (v->n == v->cap) {
                    v->cap = v->cap ? 2 * v->cap : 1 << 16;
                    v->ids = gdn_realloc(v->ids, v->cap * sizeof *v->ids);
                }
                v->ids[v->n++] = s->newline.ids[i];
            }
        }
        return;
    }
    if (!shard_writer_doc_begin(s->w[s->split], err, sizeof err)) fail("%s", err);
    s->tokens[s->split] += s->frame->n_prefix;
}

static void sink_append(sink *s, const uint32_t *ids, size_t n) {
    char err[1024];
    s->tokens[s->split] += n;
    if (s->o->v1) {
        tok_ids *v = &s->v1[0];
        if (v->n + n > v->cap) {
            v->cap = GDN_MAX(v->n + n, v->cap ? 2 * v->cap : (size_t)1 << 16);
            v->ids = gdn_realloc(v->ids, v->cap * sizeof *v->ids);
        }
        memcpy(v->ids + v->n, ids, n * sizeof *ids);
        v->n += n;
        return;
    }
    if (!shard_writer_append(s->w[s->split], ids, n, err, sizeof err)) fail("%s", err);
}

static void sink_end(sink *s, char last_byte) {
    char err[1024];
    s->docs[s->split]++;
    if (s->o->v1) {
        s->v1_last = last_byte;
    } else {
        if (!shard_writer_doc_end(s->w[s->split], err, sizeof err)) fail("%s", err);
        s->tokens[s->split] += s->frame->n_suffix;
    }
    s->split = -1;
}

static void sink_abort(sink *s, uint64_t n_tok) {
    char err[1024];
    s->tokens[s->split] -= n_tok;
    if (s->o->v1) s->v1[0].n -= n_tok;
    else if (!shard_writer_doc_abort(s->w[s->split], err, sizeof err)) fail("%s", err);
    else s->tokens[s->split] -= s->frame->n_prefix;
    s->split = -1;
}

static void progress(const pipeline *p, const sink *s, double t0, bool final) {
    static double last = -1;
    static bool tty = false, tty_known = false;
    if (!tty_known) {
        tty = isatty(2);
        tty_known = true;
    }
    double now = gdn_now();
    if (!final && last >= 0 && now - last < (tty ? 0.5 : 30.0)) return;
    last = now;
    double el = GDN_MAX(now - t0, 1e-9);
    double read = (double)corpus_bytes_read(p->c), total = (double)corpus_total_bytes(p->c);
    double rate = read / el;
    char eta[32] = "";
    if (!final && rate > 0 && total >= read) {
        long sec = (long)((total - read) / rate);
        snprintf(eta, sizeof eta, "  ETA %ld:%02ld", sec / 60, sec % 60);
    }
    fprintf(stderr, "%sread %.1f/%.1f MB  docs %llu  tokens %llu  %.1f MB/s%s%s", tty ? "\r" : "",
            read / 1e6, total / 1e6, (unsigned long long)(s->docs[0] + s->docs[1]),
            (unsigned long long)(s->tokens[0] + s->tokens[1]), rate / 1e6, eta,
            tty && !final ? "   " : "\n");
}

// Runs the pipeline over the corpus into the sink. Bad documents: listed (up to
// MAX_BAD_LISTED) and skipped, or the run stops, per --on-error.
// Opens the corpus, the batch ring, and starts the reader and o->threads workers.
static void pipeline_start(pipeline *p, pthread_t *reader, pthread_t *workers) {
    char err[1024];
    const prep_options *o = p->o;
    p->c = corpus_open(o->inputs, o->n_inputs, &o->corpus, err, sizeof err);
    if (!p->c) fail("%s", err);
    p->n_slots = 2 * o->threads + 2;
    p->slots = gdn_malloc((size_t)p->n_slots * sizeof *p->slots);
    for (int i = 0; i < p->n_slots; i++) {
        p->slots[i].text = gdn_malloc(o->batch_bytes);
        p->slots[i].ev = gdn_malloc((size_t)batch_events(o) * sizeof(event));
    }
    if (pthread_mutex_init(&p->mu, NULL) || pthread_cond_init(&p->cv, NULL))
        gdn_die("pthread init failed");
    int rc = pthread_create(reader, NULL, reader_main, p);
    for (int i = 0; i < o->threads && rc == 0; i++)
        rc = pthread_create(&workers[i], NULL, worker_main, p);
    if (rc) gdn_die("pthread_create: %s", strerror(rc));
}

// Batch number seq, once done.
static batch *pipeline_wait(pipeline *p, uint64_t seq) {
    batch *b = &p->slots[seq % (uint64_t)p->n_slots];
    lock(p);
    while (!(b->state == SLOT_DONE && b->seq == seq)) wait_cv(p);
    unlock(p);
    return b;
}

// Hands batch b back to the reader.
static void pipeline_release(pipeline *p, batch *b) {
    for (int i = 0; i < b->n_ev; i++) free(b->ev[i].bad);
    b->n_ev = 0;
    lock(p);
    b->state = SLOT_FREE;
    wake_all(p);
    unlock(p);
}

// Stops the threads and frees the ring and the corpus.
static void pipeline_stop(pipeline *p, pthread_t reader, pthread_t *workers) {
    lock(p);
    p->abort = true;
    wake_all(p);
    unlock(p);
    pthread_join(reader, NULL);
    for (int i = 0; i < p->o->threads; i++) pthread_join(workers[i], NULL);
    for (int i = 0; i < p->n_slots; i++) {
        for (int k = 0; k < p->slots[i].n_ev; k++) free(p->slots[i].ev[k].bad);
        free(p->slots[i].text);
        free(p->slots[i].ev);
        tok_ids_free(&p->slots[i].ids);
    }
    free(p->slots);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    corpus_free(p->c);
}

static void run_pipeline(const prep_options *o, const gdn_tokenizer *tok, sink *s) {
    pipeline p = {.o = o, .tok = tok};
    pthread_t reader, *workers = gdn_malloc((size_t)o->threads * sizeof *workers);
    pipeline_start(&p, &reader, workers);
    double t0 = gdn_now();
    s->split = -1;
    uint64_t doc_tokens = 0;  // the open document's tokens so far (for an abort)
    const char *stop = NULL;
    char why[1200];
    for (uint64_t seq = 0; !stop; seq++) {
        batch *b = pipeline_wait(&p, seq);
        if (b->enc_err[0]) {
            snprintf(why, sizeof why, "%s", b->enc_err);
            stop = why;
        }
        for (int i = 0; i < b->n_ev && !stop; i++) {
            event *e = &b->ev[i];
            if (e->bad) {
                if (s->split >= 0) sink_abort(s, doc_tokens);
                s->bad++;
                if (!o->skip_bad) {
                    snprintf(why, sizeof why, "%s (--on-error skip leaves bad documents out)",
                             e->bad);
                    stop = why;
                } else if (s->bad <= MAX_BAD_LISTED) {
                    fprintf(stderr, "%sgdn-prepare: %s: skipped\n", isatty(2) ? "\n" : "", e->bad);
                }
                continue;
            }
            if (e->unsafe && s->unsafe_cuts++ == 0)
                fprintf(stderr, "%sgdn-prepare: note: %s:%llu: a document piece of %zu bytes has "
                        "no safe cut point; cut at a character boundary (counted in the "
                        "summary)\n", isatty(2) ? "\n" : "", e->file,
                        (unsigned long long)e->line, e->len);
            if (e->first) {
                sink_begin(s, e->ordinal);
                doc_tokens = 0;
            }
            sink_append(s, b->ids.ids + e->tok_off, e->n_tok);
            doc_tokens += e->n_tok;
            if (e->last) sink_end(s, e->len ? b->text[e->off + e->len - 1] : 0);
        }
        if (!stop && b->fail[0]) {
            snprintf(why, sizeof why, "%s", b->fail);
            stop = why;
        }
        bool end = b->end;
        pipeline_release(&p, b);
        progress(&p, s, t0, false);
        if (end) break;
    }
    if (!stop) progress(&p, s, t0, true);
    pipeline_stop(&p, reader, workers);
    free(workers);
    if (stop) fail("%s", stop);
}

// ---- tokenizer training -----------------------------------------------------------------------

typedef struct {
    char *data;
    size_t n, cap;
} text_buf;

static void buf_append(text_buf *b, const char *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = GDN_MAX(b->n + n, b->cap ? 2 * b->cap : (size_t)1 << 20);
        b->data = gdn_realloc(b->data, b->cap);
    }
    memcpy(b->data + b->n, data, n);
    b->n += n;
}

// The training pass: the first o->train_bytes of document text (whole pieces: up to one piece
// more), bad documents skipped (the encoding pass reports them). With a trainer the workers
// count the pieces' words into it; else the text is gathered into *sample, documents joined by
// "\n" (SentencePiece's sentences are lines).
static void train_pass(const prep_options *o, bpe_trainer *trainer, text_buf *sample) {
    pipeline p = {.o = o, .trainer = trainer, .text_limit = o->train_bytes};
    pthread_t reader, *workers = gdn_malloc((size_t)o->threads * sizeof *workers);
    pipeline_start(&p, &reader, workers);
    double t0 = gdn_now(), last = t0;
    uint64_t limit = GDN_MIN(o->train_bytes, corpus_total_bytes(p.c));
    char why[1200] = "";
    for (uint64_t seq = 0;; seq++) {
        batch *b = pipeline_wait(&p, seq);
        if (b->enc_err[0]) snprintf(why, sizeof why, "%s", b->enc_err);
        for (int i = 0; sample && !why[0] && i < b->n_ev; i++) {
            const event *e = &b->ev[i];
            if (e->bad) continue;
            buf_append(sample, b->text + e->off, e->len);
            if (e->last) buf_append(sample, "\n", 1);
        }
        if (!why[0] && b->fail[0]) snprintf(why, sizeof why, "%s", b->fail);
        bool end = b->end;
        pipeline_release(&p, b);
        double now = gdn_now(), text = (double)corpus_text_bytes(p.c);
        if (why[0] || end || now - last >= (isatty(2) ? 0.5 : 30.0)) {
            double rate = text / GDN_MAX(now - t0, 1e-9);
            long eta = rate > 0 && limit > text ? (long)((limit - text) / rate) : 0;
            fprintf(stderr, "%stokenizer training: read %.1f/%.1f MB  %.1f MB/s  ETA %ld:%02ld%s",
                    isatty(2) ? "\r" : "", text / 1e6, limit / 1e6, rate / 1e6, eta / 60, eta % 60,
                    isatty(2) && !end && !why[0] ? "   " : "\n");
            last = now;
        }
        if (end || why[0]) break;
    }
    pipeline_stop(&p, reader, workers);
    free(workers);
    if (why[0]) fail("%s", why);
}

// Trains a tokenizer of kind o->tokenizer ("bpe" | "spm") with o->vocab entries on the corpus's
// first o->train_bytes into `path` (tokenizer.json for bpe, a .model for spm; written to a
// temporary name, then renamed).
static void tokenizer_train(const prep_options *o, const char *path) {
    char err[1024];
    double t0 = gdn_now();
    fprintf(stderr, "gdn-prepare: training a %s tokenizer (vocab %d) on up to %.0f MB of text, "
            "%d threads\n", o->tokenizer, o->vocab, o->train_bytes / 1e6, o->threads);
    if (!strcmp(o->tokenizer, "bpe")) {
        const char *specials[] = {"<|endoftext|>"};
        bpe_train_opts bo = {.mem_cap = o->train_mem, .specials = specials, .n_specials = 1,
                             .progress = true};
        bpe_trainer *tr = bpe_train_new(&bo, err, sizeof err);
        if (!tr) fail("%s", err);
        train_pass(o, tr, NULL);
        bpe_train_stats st;
        bpe_train_get_stats(tr, &st);
        if (st.words == 0) {
            bpe_train_free(tr);
            fail("the inputs hold no text to train a tokenizer on");
        }
        uint64_t distinct = st.distinct;
        if (!bpe_train_finish(tr, o->vocab, path, err, sizeof err)) {
            bpe_train_free(tr);
            fail("%s", err);
        }
        bpe_train_get_stats(tr, &st);
        bpe_train_free(tr);
        fprintf(stderr, "gdn-prepare: BPE of %d tokens (%d merges) from %llu words (%llu "
                "distinct; word table peak %.1f MiB, %llu prunes) in %.1f s\n", st.vocab_size,
                st.merges, (unsigned long long)st.words, (unsigned long long)distinct,
                st.table_peak / 1048576.0, (unsigned long long)st.prunes, gdn_now() - t0);
    } else {
        text_buf sample = {0};
        train_pass(o, NULL, &sample);
        if (sample.n == 0) fail("the inputs hold no text to train a tokenizer on");
        bool ok = spm_train_model(sample.data, sample.n, o->vocab, o->threads, path, err,
                                  sizeof err);
        free(sample.data);
        if (!ok) fail("%s", err);
        fprintf(stderr, "gdn-prepare: SentencePiece model trained in %.1f s\n", gdn_now() - t0);
    }
}

// ---- output -----------------------------------------------------------------------------------

static void write_file(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || (n && fwrite(data, 1, n, fp) != n) || fclose(fp) != 0)
        fail("cannot write %s: %s", path, strerror(errno));
}

// Moves the finished token set from the temporary directory into --out: the old index goes
// first (so a crash in between leaves no index naming missing files), then the old set's
// files, then the new files, then the new index.
static void publish(const prep_options *o, const shard_index *ix) {
    char err[1024], p[1300], q[1300], dir[600];
    snprintf(p, sizeof p, "%s/%s", o->out, SHARD_INDEX_NAME);
    shard_index old;
    bool had = access(p, F_OK) == 0;
    bool old_ok = had && shard_index_read(o->out, &old, dir, sizeof dir, err, sizeof err);
    if (had && unlink(p) != 0) fail("cannot remove the old %s: %s", p, strerror(errno));
    if (old_ok) {
        for (int i = 0; i < old.n_shards; i++) {
            snprintf(q, sizeof q, "%s/%s", o->out, old.shards[i].path);
            unlink(q);
        }
        if (old.tokenizer_file[0]) {
            snprintf(q, sizeof q, "%s/%s", o->out, old.tokenizer_file);
            unlink(q);
        }
        shard_index_free(&old);
    }
    for (int i = 0; i <= ix->n_shards; i++) {
        const char *name = i < ix->n_shards ? ix->shards[i].path : ix->tokenizer_file;
        if (!name[0]) continue;
        snprintf(p, sizeof p, "%s/%s", cleanup.tmp_dir, name);
        snprintf(q, sizeof q, "%s/%s", o->out, name);
        if (rename(p, q) != 0) fail("cannot move %s to %s: %s", p, q, strerror(errno));
    }
    if (!shard_index_write(o->out, ix, err, sizeof err)) fail("%s", err);
    remove_tree(cleanup.tmp_dir);
    cleanup.tmp_dir[0] = cleanup.made_out[0] = 0;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return ru.ru_maxrss / 1024.0;  // Linux: KiB
}

// The memory the run's buffers may hold (MiB): the batch ring (text, ids: at most one id per
// byte and piece, events), the corpus reader, a jsonl record with its parse, the shard writers.
static double memory_bound_mib(const prep_options *o) {
    double ring = (2.0 * o->threads + 2) *
                  ((double)o->batch_bytes + 4.0 * (o->batch_bytes + batch_events(o) + 16) +
                   batch_events(o) * sizeof(event));
    double reader = (double)corpus_memory(&o->corpus);
    return (ring + reader + 2.0 * shard_writer_memory()) / (1 << 20);
}

// ---- options ----------------------------------------------------------------------------------

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

static uint64_t parse_u64(const char *v, uint64_t lo, uint64_t hi, const char *msg) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end || errno || v[0] == '-' || x < lo || x > hi) bad_usage(msg, v);
    return x;
}

static void parse_options(int argc, char **argv, prep_options *o) {
    const char *v;
    bool val_set = false;
    double max_record_mb = DEFAULT_MAX_RECORD / 1048576.0, train_mb = -1;
    o->train_mem = DEFAULT_TRAIN_MEM;
    o->inputs = gdn_malloc((size_t)argc * sizeof *o->inputs);
    o->tokenizer = "bytes";
    o->seed = 1;
    o->shard_tokens = DEFAULT_SHARD_TOKENS;
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = nproc > 0 ? (int)GDN_MIN(nproc, 256L) : 1;
    o->batch_bytes = DEFAULT_BATCH_BYTES;
    o->corpus.split = CORPUS_SPLIT_FILE;
    o->corpus.text_field = "text";
    o->train_bytes = DEFAULT_TRAIN_BYTES;
    o->template_specials = true;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            exit(0);
        } else if ((v = flag_value(argc, argv, &i, "--input"))) {
            o->inputs[o->n_inputs++] = v;
        } else if ((v = flag_value(argc, argv, &i, "--out"))) {
            o->out = v;
        } else if ((v = flag_value(argc, argv, &i, "--tokenizer")) ||
                   (v = flag_value(argc, argv, &i, "--spm-model"))) {
            o->tokenizer = v;
        } else if ((v = flag_value(argc, argv, &i, "--vocab"))) {
            o->vocab = (int)parse_u64(v, 2, (1 << 24) - 1,
                                      "--vocab must be an integer in [2, 16777215], not");
        } else if ((v = flag_value(argc, argv, &i, "--train-mb"))) {
            errno = 0;
            train_mb = strtod(v, &end);
            if (end == v || *end || errno || !(train_mb > 0))
                bad_usage("--train-mb must be a number > 0, not", v);
        } else if ((v = flag_value(argc, argv, &i, "--train-mem"))) {
            o->train_mem = (size_t)parse_u64(v, 1, 1u << 20,
                                             "--train-mem must be an integer of MB in [1, 1048576], not") << 20;
        } else if ((v = flag_value(argc, argv, &i, "--val-fraction")) ||
                   (v = flag_value(argc, argv, &i, "--val-frac"))) {
            errno = 0;
            o->val_fraction = strtod(v, &end);
            if (end == v || *end || errno || !(o->val_fraction >= 0 && o->val_fraction < 1))
                bad_usage("--val-fraction must be a number in [0, 1), not", v);
            val_set = true;
        } else if ((v = flag_value(argc, argv, &i, "--seed"))) {
            o->seed = parse_u64(v, 0, UINT64_MAX, "--seed must be an integer >= 0, not");
        } else if ((v = flag_value(argc, argv, &i, "--shard-tokens"))) {
            o->shard_tokens = parse_u64(v, 1, UINT64_MAX, "--shard-tokens must be an integer >= 1, not");
        } else if ((v = flag_value(argc, argv, &i, "--threads"))) {
            o->threads = (int)parse_u64(v, 1, 1024, "--threads must be an integer in [1, 1024], not");
        } else if ((v = flag_value(argc, argv, &i, "--batch-bytes"))) {
            o->batch_bytes = (size_t)parse_u64(v, 4096, 1ull << 30,
                                               "--batch-bytes must be an integer in [4096, 2^30], not");
        } else if ((v = flag_value(argc, argv, &i, "--text-field"))) {
            if (!v[0]) bad_usage("--text-field must not be empty", NULL);
            o->corpus.text_field = v;
        } else if ((v = flag_value(argc, argv, &i, "--doc-split"))) {
            if (!strcmp(v, "file")) o->corpus.split = CORPUS_SPLIT_FILE;
            else if (!strcmp(v, "blank-lines")) o->corpus.split = CORPUS_SPLIT_BLANK_LINES;
            else if (!strcmp(v, "lines")) o->corpus.split = CORPUS_SPLIT_LINES;
            else bad_usage("--doc-split must be file, blank-lines or lines, not", v);
        } else if ((v = flag_value(argc, argv, &i, "--max-record"))) {
            errno = 0;
            max_record_mb = strtod(v, &end);
            if (end == v || *end || errno || !(max_record_mb >= 0.01 && max_record_mb <= 4096))
                bad_usage("--max-record must be a number of MB in [0.01, 4096], not", v);
        } else if ((v = flag_value(argc, argv, &i, "--on-error"))) {
            if (!strcmp(v, "skip")) o->skip_bad = true;
            else if (!strcmp(v, "stop")) o->skip_bad = false;
            else bad_usage("--on-error must be stop or skip, not", v);
        } else if ((v = flag_value(argc, argv, &i, "--specials"))) {
            if (!strcmp(v, "template")) o->template_specials = true;
            else if (!strcmp(v, "none")) o->template_specials = false;
            else bad_usage("--specials must be template or none, not", v);
        } else if (!strcmp(argv[i], "--overwrite")) {
            o->overwrite = true;
        } else {
            bad_usage("unknown argument", argv[i]);
        }
    }
    if (o->n_inputs == 0) bad_usage("no --input given", NULL);
    if (!o->out || !o->out[0]) bad_usage("no --out given", NULL);
    size_t ol = strlen(o->out);
    o->v1 = ol > 3 && !strcmp(o->out + ol - 3, ".h5");
    if (!val_set) o->val_fraction = o->v1 ? 0.1 : 0.005;
    bool kind = !strcmp(o->tokenizer, "bpe") || !strcmp(o->tokenizer, "spm");
    if (kind && !o->vocab)
        bad_usage("--tokenizer bpe|spm trains a tokenizer and needs --vocab N; to use a trained "
                  "one, pass its file:", o->tokenizer);
    if (!kind && o->vocab)
        bad_usage("--vocab N trains a tokenizer: it needs --tokenizer bpe or spm, not", o->tokenizer);
    if (!strcmp(o->tokenizer, "bpe") && o->vocab && o->vocab < 257) {
        char n[16];
        snprintf(n, sizeof n, "%d", o->vocab);
        bad_usage("--tokenizer bpe needs --vocab >= 257 (256 byte tokens + <|endoftext|>), not", n);
    }
    if (o->v1 && !strcmp(o->tokenizer, "bpe"))
        bad_usage("a version-1 .h5 file holds bytes or SentencePiece tokens only; write a shard "
                  "directory (an --out without .h5) for a BPE tokenizer:", o->out);
    if (!kind && strcmp(o->tokenizer, "bytes") && access(o->tokenizer, R_OK) != 0)
        bad_usage("--tokenizer must be bytes, bpe or spm (with --vocab N), or a readable "
                  "tokenizer file (tokenizer.json, vocab.json, *.model), not", o->tokenizer);
    if (train_mb > 0) o->train_bytes = (uint64_t)(train_mb * 1048576.0);
    o->corpus.max_record_bytes = (size_t)(max_record_mb * 1048576.0);
    o->corpus.piece_bytes = o->batch_bytes / 4;  // a batch holds >= 3 of the longest pieces
}

int main(int argc, char **argv) {
    if (argc == 1) {
        usage(stderr);
        return 2;
    }
    prep_options o = {0};
    parse_options(argc, argv, &o);
    char err[1024], tmp[700];
    double t0 = gdn_now();

    // where this run writes: a temporary directory inside --out (shards), or beside FILE.h5
    if (!o.v1) {
        struct stat st;
        char ixpath[700];
        snprintf(ixpath, sizeof ixpath, "%s/%s", o.out, SHARD_INDEX_NAME);
        if (stat(o.out, &st) != 0) {
            if (mkdir(o.out, 0777) != 0) fail("cannot create --out '%s': %s", o.out, strerror(errno));
            snprintf(cleanup.made_out, sizeof cleanup.made_out, "%s", o.out);
        } else if (!S_ISDIR(st.st_mode)) {
            bad_usage("--out must be a directory (or end in .h5), and this is a file:", o.out);
        } else if (access(ixpath, F_OK) == 0 && !o.overwrite) {
            fflush(stdout);
            fprintf(stderr, "gdn-prepare: '%s' already holds a token set (index.json); pass "
                    "--overwrite to replace it\n", o.out);
            free(o.inputs);
            return 2;
        }
        snprintf(cleanup.tmp_dir, sizeof cleanup.tmp_dir, "%s/.prepare-tmp.%ld", o.out,
                 (long)getpid());
        if (mkdir(cleanup.tmp_dir, 0777) != 0)
            fail("cannot create %s: %s", cleanup.tmp_dir, strerror(errno));
    }

    // the tokenizer: loaded, or trained on the corpus first
    char spec[1000];
    snprintf(spec, sizeof spec, "%s", o.tokenizer);
    if (o.vocab) {
        // shards: the tokenizer file of the token set, published with it; .h5: beside the file
        if (o.v1) snprintf(spec, sizeof spec, "%.*s.spm.model", (int)strlen(o.out) - 3, o.out);
        else snprintf(spec, sizeof spec, "%s/%s", cleanup.tmp_dir,
                      !strcmp(o.tokenizer, "spm") ? "tokenizer.model" : "tokenizer.json");
        tokenizer_train(&o, spec);
    }
    gdn_tokenizer *tok = tok_load(spec, err, sizeof err);
    if (!tok) fail("%s", err);
    int vocab = tok_vocab_size(tok), eot = tok_eot(tok);
    const char *kind = tok_kind(tok);
    const void *blob;
    size_t blob_len;
    tok_blob(tok, &blob, &blob_len);

    // the ids around each document (shards.h): the tokenizer's template with --specials template
    tok_template tpl = o.template_specials ? tok_get_template(tok) : (tok_template){0};
    shard_frame frame;
    shard_frame_make(&frame, eot, tpl.prefix, tpl.n_prefix, tpl.suffix, tpl.n_suffix);
    const char *specials = o.template_specials ? SHARD_SPECIALS_TEMPLATE : SHARD_SPECIALS_NONE;

    sink s = {.o = &o, .split = -1, .frame = &frame};
    shard_writer_config wc[2];
    if (o.v1) {
        if (!strcmp(kind, "bpe"))
            fail("a version-1 .h5 file holds bytes or SentencePiece tokens only; write a shard "
                 "directory (an --out without .h5) for a BPE tokenizer");
        if (!tok_encode(tok, "\n", 1, false, &s.newline, err, sizeof err)) fail("%s", err);
    } else {
        for (int sp = 0; sp < 2; sp++) {
            wc[sp] = (shard_writer_config){.dir = cleanup.tmp_dir, .split = sp, .vocab_size = vocab,
                                          .eot_token = eot, .tokenizer_kind = kind, .blob = blob,
                                          .blob_len = blob_len, .shard_tokens = o.shard_tokens,
                                          .specials = specials, .frame = &frame};
            s.w[sp] = cleanup.w[sp] = shard_writer_open(&wc[sp]);
        }
    }

    run_pipeline(&o, tok, &s);
    if (s.docs[0] + s.docs[1] == 0) fail("the inputs hold no documents");

    shard_index ix = {.vocab_size = vocab, .eot_token = eot, .frame = frame};
    snprintf(ix.specials, sizeof ix.specials, "%s", specials);
    if (o.v1) {
        size_t n = s.v1[0].n, n_train = (size_t)((double)n * (1.0 - o.val_fraction));
        if (n_train > n) n_train = n;
        char attr[1100];
        if (!strcmp(kind, "spm")) snprintf(attr, sizeof attr, "spm:%s", spec);
        else snprintf(attr, sizeof attr, "bytes");
        snprintf(tmp, sizeof tmp, "%s", o.out);
        if (!tokfile_write(o.out, vocab, attr, eot, s.v1[0].ids, n_train, s.v1[0].ids + n_train,
                           n - n_train, err, sizeof err))
            fail("%s", err);
        s.tokens[0] = n_train;
        s.tokens[1] = n - n_train;
        printf("gdn-prepare: wrote %s\n", o.out);
        printf("  tokenizer  %s\n", attr);
    } else {
        for (int sp = 0; sp < 2; sp++)
            if (!shard_writer_finish(s.w[sp], err, sizeof err)) fail("%s", err);
        snprintf(ix.tokenizer_kind, sizeof ix.tokenizer_kind, "%s", kind);
        if (blob_len) {  // a trained tokenizer is already there: the file the blob was read from
            snprintf(ix.tokenizer_file, sizeof ix.tokenizer_file, "%s",
                     !strcmp(kind, "spm") ? "tokenizer.model" : "tokenizer.json");
            snprintf(tmp, sizeof tmp, "%s/%s", cleanup.tmp_dir, ix.tokenizer_file);
            if (!o.vocab) write_file(tmp, blob, blob_len);
        }
        ix.n_shards = shard_writer_n_shards(s.w[0]) + shard_writer_n_shards(s.w[1]);
        ix.shards = gdn_malloc((size_t)GDN_MAX(ix.n_shards, 1) * sizeof *ix.shards);
        int k = 0;
        for (int sp = 0; sp < 2; sp++)
            for (int i = 0; i < shard_writer_n_shards(s.w[sp]); i++)
                ix.shards[k++] = *shard_writer_shard(s.w[sp], i);
        publish(&o, &ix);
        printf("gdn-prepare: wrote %s (%d shards)\n", o.out, ix.n_shards);
        printf("  tokenizer  %s%s%s\n", kind, blob_len ? " " : "", blob_len ? ix.tokenizer_file : "");
        char fr[200];
        shard_frame_describe(&frame, fr, sizeof fr);
        printf("  eot        %d\n", eot);
        printf("  specials   %s: each document stored as %s\n", specials, fr);
        free(ix.shards);
        for (int sp = 0; sp < 2; sp++) {
            shard_writer_free(s.w[sp]);
            cleanup.w[sp] = NULL;
        }
    }
    printf("  inputs     %d file(s)\n", o.n_inputs);
    printf("  vocab      %d\n", vocab);
    if (o.v1)
        printf("  documents  %llu\n", (unsigned long long)(s.docs[0] + s.docs[1]));
    else
        printf("  documents  %llu train, %llu val\n", (unsigned long long)s.docs[0],
               (unsigned long long)s.docs[1]);
    printf("  train      %llu tokens\n", (unsigned long long)s.tokens[0]);
    printf("  val        %llu tokens (val_fraction %g)\n", (unsigned long long)s.tokens[1],
           o.val_fraction);
    printf("  skipped    %llu bad documents\n", (unsigned long long)s.bad);
    if (s.unsafe_cuts)
        printf("  cuts       %llu document pieces cut without a safe point\n",
               (unsigned long long)s.unsafe_cuts);
    printf("  threads    %d\n", o.threads);
    printf("  memory     peak %.1f MiB (buffers bounded by %.1f MiB)\n", peak_rss_mib(),
           memory_bound_mib(&o));
    printf("  time       %.2f s\n", gdn_now() - t0);
    tok_ids_free(&s.v1[0]);
    tok_ids_free(&s.newline);
    shard_frame_free(&frame);
    tok_free(tok);
    free(o.inputs);
    return 0;
}
