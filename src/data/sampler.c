// sampler.c — the seeded batch sampler (DESIGN 5, dataset.h): random windows or packed documents
// of one token set or a weighted mix of sets, split over micro-batches and ranks, with a prefetch
// thread.
//
// Every row is a pure function of (seed, split, step, global row): no state but `pos` carries
// from one batch to the next, so a run resumes bit for bit from the checkpointed position, and
// rank r computes its own rows without drawing the others'. Documents: an epoch's order is a
// Fisher-Yates permutation drawn from Philox at (seed, split, set, epoch); the sampler caches
// two epochs per set (the order and its running token counts, 12 bytes a document each), the
// set keeps the document offsets (8 bytes a document), and tokens are read on demand.
//
// Threads: the prefetch thread reads through HDF5 while the main thread may use HDF5 too
// (validation reads, checkpoints). That needs a thread-safe HDF5 (Debian's serial build is);
// with a library built without it, sampler_init runs the sampler synchronously instead
// (same batches, no overlap) and says so once.
#include "dataset.h"
#include "../core/common.h"
#include "../core/rng.h"
#include <hdf5.h>
#include <math.h>

#define CHECK_PTHREAD(stmt)                                                                        \
    do {                                                                                           \
        int pt_rc_ = (stmt);                                                                       \
        if (pt_rc_ != 0)                                                                           \
            gdn_die_at("pthread", #stmt, strerror(pt_rc_), __func__, __FILE__, __LINE__);          \
    } while (0)

static const char *const split_word[2] = {"train", "val"};
// Keys that separate the train and val streams of one seed.
static const uint64_t split_salt[2] = {0x9E3779B97F4A7C15ull, 0xD1B54A32D192ED03ull};
// Keys of the document orders (per set of a mix) apart from the windows' draws.
#define DOC_ORDER_SALT 0x2545F4914F6CDD1Dull
#define DOC_SET_SALT 0xBF58476D1CE4E5B9ull
#define MIX_MASS_TOTAL (1ull << 32)

// One epoch's document order of one set: perm[p] is the p-th document of the epoch's stream,
// which starts at token prefix[p] of the epoch (prefix[D] = the split's tokens).
struct doc_epoch {
    bool valid;
    uint64_t epoch;
    uint32_t *perm;           // (D)
    uint64_t *prefix;         // (D + 1)
};

// ---- windows -------------------------------------------------------------------------------

// Start of row j of step `step`: uniform in [0, n - (T+1)], a pure function of (seed, split,
// step, j). Row j owns Philox counter blocks [j * 2^32, (j+1) * 2^32), so the rejection loop of
// rng_below (a retry has probability < n / 2^64) never reaches another row's numbers, and rank r
// computes its rows without drawing the others'.
static uint64_t window_start(const batch_sampler *s, uint64_t n, uint64_t step, uint64_t j) {
    rng_t r;
    rng_init(&r, s->seed ^ split_salt[s->split], step);
    r.counter = j << 32;
    return rng_below(&r, n - (uint64_t)s->T);
}

// ---- documents -----------------------------------------------------------------------------

// Epoch e of set k, from the cache or drawn into the older of its two slots.
static const doc_epoch *epoch_get(batch_sampler *s, int k, uint64_t e) {
    doc_epoch *c = &s->epochs[2 * k];
    if (c[0].valid && c[0].epoch == e) return &c[0];
    if (c[1].valid && c[1].epoch == e) return &c[1];
    doc_epoch *ep = !c[0].valid ? &c[0] : !c[1].valid ? &c[1] : c[0].epoch < c[1].epoch ? &c[0] : &c[1];
    const token_set *ts = &s->src->set[k];
    const uint64_t D = ts->n_docs[s->split], *off = ts->doc_offsets[s->split];
    rng_t r;
    rng_init(&r, s->seed ^ split_salt[s->split] ^ DOC_ORDER_SALT ^ ((uint64_t)k * DOC_SET_SALT), e);
    for (uint64_t i = 0; i < D; i++) ep->perm[i] = (uint32_t)i;
    for (uint64_t i = D; i-- > 1;) {  // Fisher-Yates, i = D-1 .. 1
        uint64_t j = rng_below(&r, i + 1);
        uint32_t t = ep->perm[i];
        ep->perm[i] = ep->perm[j];
        ep->perm[j] = t;
    }
    ep->prefix[0] = 0;
    for (uint64_t p = 0; p < D; p++)
        ep->prefix[p + 1] = ep->prefix[p] + (off[ep->perm[p] + 1] - off[ep->perm[p]]);
    ep->valid = true;
    ep->epoch = e;
    return ep;
}

// Row = tokens [o, o + T + 1) of set k's document stream (epoch after epoch); ds (T entries, may
// be NULL): the row index where each x token's document starts, 0 when it began before the row.
static void doc_row(batch_sampler *s, int k, uint64_t o, int32_t *row, int32_t *ds) {
    const token_set *ts = &s->src->set[k];
    const uint64_t N = ts->n_tokens[s->split], D = ts->n_docs[s->split];
    const uint64_t *off = ts->doc_offsets[s->split];
    const size_t need = (size_t)s->T + 1;
    int32_t cur = 0;
    for (size_t t = 0; t < need;) {
        const doc_epoch *ep = epoch_get(s, k, o / N);
        const uint64_t u = o % N;
        // p: the document holding u, prefix[p] <= u < prefix[p + 1] (empty documents skipped)
        uint64_t lo = 0, hi = D - 1;
        while (lo < hi) {
            uint64_t mid = (lo + hi + 1) / 2;
            if (ep->prefix[mid] <= u) lo = mid;
            else hi = mid - 1;
        }
        const uint64_t d = ep->perm[lo], within = u - ep->prefix[lo];
        const size_t take = (size_t)GDN_MIN((uint64_t)(need - t), off[d + 1] - off[d] - within);
        tokset_read(ts, s->split, off[d] + within, take, row + t);
        if (within == 0) cur = (int32_t)t;  // a document starts here
        if (ds)
            for (size_t q = t; q < GDN_MIN(t + take, (size_t)s->T); q++) ds[q] = cur;
        t += take;
        o += take;
    }
}

// ---- mix -----------------------------------------------------------------------------------

// The set of global row R and its row number within that set: set 0 takes R iff
// floor((R+1) q0 / Q) > floor(R q0 / Q) (q: integer weights, Q their sum), which gives it
// floor(R q0 / Q) of the first R rows; the rows it leaves are numbered on and shared among the
// other sets the same way. Exact integer arithmetic: the same on every machine.
static int mix_pick(const batch_sampler *s, uint64_t R, uint64_t *idx) {
    const int n = s->src->n;
    unsigned __int128 rem = MIX_MASS_TOTAL;
    for (int k = 0; k < n - 1; k++) {
        const unsigned __int128 q = s->mix_mass[k];
        const uint64_t a = (uint64_t)((unsigned __int128)R * q / rem),
                       b = (uint64_t)(((unsigned __int128)R + 1) * q / rem);
        if (b > a) {
            *idx = a;
            return k;
        }
        R -= a;
        rem -= q;
    }
    *idx = R;
    return n - 1;
}

// ---- batches -------------------------------------------------------------------------------

// x, y, ds: (B, T) of micro-batch pos for this rank; y is x shifted by one token.
static void sampler_fill(batch_sampler *s, uint64_t pos, int32_t *x, int32_t *y, int32_t *ds) {
    const int T = s->T;
    const uint64_t step = pos / (uint64_t)s->n_mb, mb = pos % (uint64_t)s->n_mb;
    const uint64_t G = (uint64_t)s->n_mb * (uint64_t)s->world * (uint64_t)s->B;
    int32_t *row = s->row;
    for (int b = 0; b < s->B; b++) {
        const uint64_t j = (mb * (uint64_t)s->world + (uint64_t)s->rank) * (uint64_t)s->B + (uint64_t)b;
        const uint64_t g = step * G + j;  // the global row number
        uint64_t idx = g;
        const int k = s->src->n > 1 ? mix_pick(s, g, &idx) : 0;
        const token_set *ts = &s->src->set[k];
        const uint64_t n = ts->n_tokens[s->split];
        if (s->documents) {
            uint64_t o = s->tiled ? eval_full_start(g, s->tiled, n, (uint64_t)T) : idx * (uint64_t)T;
            doc_row(s, k, o, row, ds ? ds + (size_t)b * T : NULL);
        } else {
            uint64_t start = s->tiled ? eval_full_start(g, s->tiled, n, (uint64_t)T)
                                      : window_start(s, n, step, j);
            tokset_read(ts, s->split, start, (size_t)T + 1, row);
        }
        memcpy(x + (size_t)b * T, row, sizeof(int32_t) * (size_t)T);
        memcpy(y + (size_t)b * T, row + 1, sizeof(int32_t) * (size_t)T);
    }
}

// Prefetch protocol (all fields under mu): ready_pos is the batch number in buf_x/buf_y/buf_doc,
// or being produced into them while !ready. The thread waits for !ready, fills ready_pos, then
// sets ready. sampler_next waits for ready, copies out, and hands the thread pos + 1.
static void *sampler_thread(void *arg) {
    batch_sampler *s = arg;
    CHECK_PTHREAD(pthread_mutex_lock(&s->mu));
    for (;;) {
        while (!s->stop && s->ready) CHECK_PTHREAD(pthread_cond_wait(&s->cv, &s->mu));
        if (s->stop) break;
        uint64_t p = s->ready_pos;
        CHECK_PTHREAD(pthread_mutex_unlock(&s->mu));
        sampler_fill(s, p, s->buf_x, s->buf_y, s->buf_doc);
        CHECK_PTHREAD(pthread_mutex_lock(&s->mu));
        s->ready = true;
        CHECK_PTHREAD(pthread_cond_broadcast(&s->cv));
    }
    CHECK_PTHREAD(pthread_mutex_unlock(&s->mu));
    return NULL;
}

bool sampler_init(batch_sampler *s, const sampler_params *p, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    const data_source *src = p->src;
    const int split = p->split, B = p->B, T = p->T;
    if (!src || src->n < 1 || src->n > DATA_MIX_MAX) {
        snprintf(err, errlen, "sampler: no token set to read");
        return false;
    }
    const char *name = src->set[0].path;
    if (split != DATA_SPLIT_TRAIN && split != DATA_SPLIT_VAL) {
        snprintf(err, errlen, "%s: sampler split %d is not train (0) or val (1)", name, split);
        return false;
    }
    if (B < 1 || T < 1 || p->world < 1 || p->rank < 0 || p->rank >= p->world || p->n_mb < 1) {
        snprintf(err, errlen,
                 "%s: sampler needs B >= 1, T >= 1, 0 <= rank < world, n_mb >= 1 (got B=%d T=%d "
                 "rank=%d world=%d n_mb=%d)",
                 name, B, T, p->rank, p->world, p->n_mb);
        return false;
    }
    for (int k = 0; k < src->n; k++) {
        const token_set *ts = &src->set[k];
        uint64_t n = ts->n_tokens[split];
        if (n < (uint64_t)T + 1) {
            if (ts->sharded)
                snprintf(err, errlen, "%s: the %s split has %llu tokens, shorter than one window "
                         "of T + 1 = %d tokens", ts->path, split_word[split],
                         (unsigned long long)n, T + 1);
            else
                snprintf(err, errlen, "%s: dataset '/%s' has %llu tokens, shorter than one window "
                         "of T + 1 = %d tokens", ts->path, split_word[split],
                         (unsigned long long)n, T + 1);
            return false;
        }
        if (p->documents && !ts->sharded) {
            snprintf(err, errlen, "%s: data.sampling = documents needs document offsets, and a "
                     "version-1 token file has none\nHINT: prepare the corpus into shards "
                     "(gdn-prepare ... --out DIR) and set data.path = DIR, or use data.sampling "
                     "= windows", ts->path);
            return false;
        }
        if (p->documents && ts->n_docs[split] >= (1ull << 32)) {
            snprintf(err, errlen, "%s: the %s split has %llu documents; documents sampling "
                     "orders at most 2^32 - 1", ts->path, split_word[split],
                     (unsigned long long)ts->n_docs[split]);
            return false;
        }
    }
    *s = (batch_sampler){.src = src,
                         .split = split,
                         .B = B,
                         .T = T,
                         .rank = p->rank,
                         .world = p->world,
                         .n_mb = p->n_mb,
                         .documents = p->documents,
                         .seed = p->seed,
                         .pos = p->pos};
    // integer weights of the interleave: each >= 1, summing to MIX_MASS_TOTAL
    uint64_t used = 0;
    for (int k = 0; k < src->n - 1; k++) {
        uint64_t q = (uint64_t)llround(src->weight[k] * (double)MIX_MASS_TOTAL);
        q = GDN_MAX(q, 1ull);
        q = GDN_MIN(q, MIX_MASS_TOTAL - used - (uint64_t)(src->n - 1 - k));
        s->mix_mass[k] = q;
        used += q;
    }
    s->mix_mass[src->n - 1] = MIX_MASS_TOTAL - used;
    s->row = gdn_malloc(sizeof(int32_t) * ((size_t)T + 1));
    if (s->documents) {
        s->epochs = gdn_malloc(sizeof(doc_epoch) * 2 * (size_t)src->n);
        for (int k = 0; k < src->n; k++)
            for (int c = 0; c < 2; c++) {
                const uint64_t D = src->set[k].n_docs[split];
                s->epochs[2 * k + c].perm = gdn_malloc(sizeof(uint32_t) * (size_t)D);
                s->epochs[2 * k + c].prefix = gdn_malloc(sizeof(uint64_t) * (size_t)(D + 1));
            }
    }
    if (!p->prefetch) return true;
    hbool_t tsafe = 0;
    CHECK_HDF5(H5is_library_threadsafe(&tsafe));
    if (!tsafe) {
        static bool warned = false;
        if (!warned)
            fprintf(
                stderr,
                "note: this HDF5 library is not thread-safe; batches are read without prefetch\n");
        warned = true;
        return true;
    }
    const size_t bt = (size_t)B * (size_t)T;
    s->buf_x = gdn_malloc(sizeof(int32_t) * bt);
    s->buf_y = gdn_malloc(sizeof(int32_t) * bt);
    if (s->documents) s->buf_doc = gdn_malloc(sizeof(int32_t) * bt);
    CHECK_PTHREAD(pthread_mutex_init(&s->mu, NULL));
    CHECK_PTHREAD(pthread_cond_init(&s->cv, NULL));
    s->ready_pos = s->pos;
    s->ready = false;
    s->stop = false;
    CHECK_PTHREAD(pthread_create(&s->thread, NULL, sampler_thread, s));
    s->running = true;
    return true;
}

void sampler_next(batch_sampler *s, int32_t *x, int32_t *y, int32_t *doc_start) {
    if (!s->documents) doc_start = NULL;  // windows: not written
    if (!s->running) {
        sampler_fill(s, s->pos, x, y, doc_start);
        s->pos++;
        return;
    }
    size_t bt = (size_t)s->B * (size_t)s->T;
    CHECK_PTHREAD(pthread_mutex_lock(&s->mu));
    for (;;) {
        while (!s->ready) CHECK_PTHREAD(pthread_cond_wait(&s->cv, &s->mu));
        if (s->ready_pos == s->pos) break;
        // the caller moved pos (e.g. restored from a checkpoint): produce that batch instead
        s->ready_pos = s->pos;
        s->ready = false;
        CHECK_PTHREAD(pthread_cond_broadcast(&s->cv));
    }
    memcpy(x, s->buf_x, sizeof(int32_t) * bt);
    memcpy(y, s->buf_y, sizeof(int32_t) * bt);
    if (doc_start) memcpy(doc_start, s->buf_doc, sizeof(int32_t) * bt);
    s->pos++;
    s->ready_pos = s->pos;
    s->ready = false;
    CHECK_PTHREAD(pthread_cond_broadcast(&s->cv));
    CHECK_PTHREAD(pthread_mutex_unlock(&s->mu));
}

void sampler_free(batch_sampler *s) {
    if (s->running) {
        CHECK_PTHREAD(pthread_mutex_lock(&s->mu));
        s->stop = true;
        CHECK_PTHREAD(pthread_cond_broadcast(&s->cv));
        CHECK_PTHREAD(pthread_mutex_unlock(&s->mu));
        CHECK_PTHREAD(pthread_join(s->thread, NULL));
        CHECK_PTHREAD(pthread_cond_destroy(&s->cv));
        CHECK_PTHREAD(pthread_mutex_destroy(&s->mu));
        s->running = false;
    }
    if (s->epochs) {
        for (int i = 0; i < 2 * s->src->n; i++) {
            free(s->epochs[i].perm);
            free(s->epochs[i].prefix);
        }
        free(s->epochs);
        s->epochs = NULL;
    }
    free(s->buf_x);
    free(s->buf_y);
    free(s->buf_doc);
    free(s->row);
    s->buf_x = s->buf_y = s->buf_doc = s->row = NULL;
}

uint64_t eval_full_windows(uint64_t n, uint64_t T, uint64_t G) {
    return GDN_CDIV(GDN_CDIV(n - 1, T), G) * G;
}

uint64_t eval_full_start(uint64_t j, uint64_t W, uint64_t n, uint64_t T) {
    return W > 1 ? (uint64_t)((unsigned __int128)j * (n - T - 1) / (W - 1)) : 0;
}

uint64_t sampler_tile_split(batch_sampler *s) {
    if (s->running) gdn_die("internal: sampler_tile_split on a prefetching sampler");
    if (s->src->n > 1) gdn_die("internal: sampler_tile_split on a mix (train.eval_batches = 0 "
                               "needs one token set)");
    uint64_t G = (uint64_t)s->n_mb * (uint64_t)s->world * (uint64_t)s->B;
    s->tiled = eval_full_windows(s->src->set[0].n_tokens[s->split], (uint64_t)s->T, G);
    return s->tiled / G;
}
