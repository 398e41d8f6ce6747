// bpe_train.c — the byte-level BPE trainer of bpe_train.h: word counting in a hash table under a
// memory cap (pruning the rarest words), merges with incremental pair counts and a lazy max-heap,
// and the tokenizer.json writer (jansson), written to a temporary name and renamed.
//
// Word table: records {count u64, len u32, hash u32, bytes, padding to 8} packed into 32 KiB
// chunks, and an open-addressing slot array {hash, ref} at most half full. Its bytes (slots +
// chunks + the chunk list) are counted exactly; a slot array that doubles holds old and new at
// once, and that is counted too (table_peak).
//
// Merging (after the table is turned into one int32 symbol array per distinct word, sorted by
// bytes): pair (a, b) -> {count = sum over words of occurrences x word count, the words it occurs
// in}. Merging (a, b) into c rewrites only those words; per occurrence, with p the symbol before
// it now and n the one after (HF's Word::merge):
//     (p, a) -= w, (p, c) += w, (b, n) -= w, (c, n) += w        (w = the word's count)
// and (a, b) drops to 0. Only pairs holding c grow, so the heap gets one entry per grown pair after
// each merge; entries of pairs that shrank are stale (count above the pair's count now) and are
// re-pushed with the count now when they reach the top. An entry's count is never below its
// pair's, so a top entry that is not stale is the best pair.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe_train.h"
#include "../core/common.h"
#include <fcntl.h>
#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

// ---- hashing -------------------------------------------------------------------------------

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ mix64(w)) * 0x100000001b3ull;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    return mix64(h ^ w);
}

// ---- the word table ------------------------------------------------------------------------

#define CHUNK_BYTES ((size_t)32 << 10)

typedef struct {
    uint64_t count;
    uint32_t len;
    uint32_t hash;  // low 32 bits of hash_bytes
} word_rec;         // followed by len bytes, padded to 8

typedef struct {
    uint64_t hash;
    uint64_t ref;  // (chunk << 32 | offset) + 1; 0 = empty
} word_slot;

typedef struct {
    word_slot *slots;
    size_t nslots, n;
    uint8_t **chunks;
    uint32_t *chunk_used;
    size_t nchunks, chunks_cap;
    size_t bytes, peak, cap;
} word_table;

static inline size_t rec_size(size_t len) { return (sizeof(word_rec) + len + 7) & ~(size_t)7; }
static inline word_rec *rec_at(const word_table *t, uint64_t ref) {
    ref -= 1;
    return (word_rec *)(t->chunks[ref >> 32] + (uint32_t)ref);
}
static void table_account(word_table *t, size_t transient) {
    t->bytes = t->nslots * sizeof(word_slot) + t->nchunks * CHUNK_BYTES +
               t->chunks_cap * (sizeof(uint8_t *) + sizeof(uint32_t));
    if (t->bytes + transient > t->peak) t->peak = t->bytes + transient;
}

static void table_init(word_table *t, size_t cap) {
    memset(t, 0, sizeof *t);
    t->cap = cap;
    t->nslots = 4096;
    t->slots = gdn_malloc(t->nslots * sizeof(word_slot));
    table_account(t, 0);
}

static void table_free(word_table *t) {
    for (size_t i = 0; i < t->nchunks; i++) free(t->chunks[i]);
    free(t->chunks);
    free(t->chunk_used);
    free(t->slots);
    t->slots = NULL;
    t->chunks = NULL;
    t->chunk_used = NULL;
    t->nchunks = t->chunks_cap = t->nslots = t->n = 0;
}

static void slots_put(word_slot *slots, size_t nslots, uint64_t hash, uint64_t ref) {
    size_t i = hash & (nslots - 1);
    while (slots[i].ref) i = (i + 1) & (nslots - 1);
    slots[i].hash = hash;
    slots[i].ref = ref;
}

// Rebuild the slot array (same size) from the records, walking the chunks in order.
static void table_reindex(word_table *t) {
    memset(t->slots, 0, t->nslots * sizeof(word_slot));
    t->n = 0;
    for (size_t c = 0; c < t->nchunks; c++)
        for (uint32_t off = 0; off < t->chunk_used[c];) {
            word_rec *r = (word_rec *)(t->chunks[c] + off);
            uint64_t h = hash_bytes(r + 1, r->len);
            slots_put(t->slots, t->nslots, h, ((uint64_t)c << 32 | off) + 1);
            t->n++;
            off += (uint32_t)rec_size(r->len);
        }
}

// Count buckets for pruning: counts 1..256 exactly, then one bucket per power of two.
#define PRUNE_BUCKETS 320
static inline int count_bucket(uint64_t c) {
    if (c <= 256) return (int)c;
    return 256 + (63 - __builtin_clzll(c)) - 8 + 1;  // 2^k <= c < 2^(k+1), k >= 8 -> 257 + k - 8
}
static inline uint64_t bucket_max(int b) {
    if (b <= 256) return (uint64_t)b;
    int k = b - 257 + 8;
    return k >= 63 ? UINT64_MAX : ((uint64_t)2 << k) - 1;
}

// Drop the words of the smallest count buckets until the records take at most target bytes, and
// compact the chunks in place (a record only moves to a lower address). Returns the threshold.
static uint64_t table_prune(word_table *t, size_t target, bpe_train_stats *st) {
    size_t hist[PRUNE_BUCKETS + 1] = {0};
    size_t total = 0;
    for (size_t c = 0; c < t->nchunks; c++)
        for (uint32_t off = 0; off < t->chunk_used[c];) {
            word_rec *r = (word_rec *)(t->chunks[c] + off);
            size_t sz = rec_size(r->len);
            hist[count_bucket(r->count)] += sz;
            total += sz;
            off += (uint32_t)sz;
        }
    int thr = 0;
    while (thr < PRUNE_BUCKETS && total > target) total -= hist[++thr];
    size_t wc = 0;
    uint32_t woff = 0;
    for (size_t c = 0; c < t->nchunks; c++) {
        uint32_t used = t->chunk_used[c];
        for (uint32_t off = 0; off < used;) {
            word_rec *r = (word_rec *)(t->chunks[c] + off);
            size_t sz = rec_size(r->len);
            if (count_bucket(r->count) <= thr) {
                st->pruned_words++;
                st->pruned_count += r->count;
            } else {
                if (woff + sz > CHUNK_BYTES) {
                    t->chunk_used[wc++] = woff;
                    woff = 0;
                }
                memmove(t->chunks[wc] + woff, r, sz);
                woff += (uint32_t)sz;
            }
            off += (uint32_t)sz;
        }
    }
    size_t keep = (t->nchunks == 0) ? 0 : wc + 1;
    if (keep) t->chunk_used[wc] = woff;
    for (size_t c = keep; c < t->nchunks; c++) free(t->chunks[c]);
    t->nchunks = keep;
    table_reindex(t);
    st->prunes++;
    uint64_t thr_count = bucket_max(thr);
    if (thr_count > st->prune_max_threshold) st->prune_max_threshold = thr_count;
    table_account(t, 0);
    return thr_count;
}

// ---- the trainer ---------------------------------------------------------------------------

struct bpe_trainer {
    pcre2_code *re;
    char **specials;
    size_t *special_len;
    int n_specials;
    bool progress;
    pthread_mutex_t mu;
    word_table table;  // under mu
    bpe_train_stats st;  // under mu
    bool finished;
};

static void tr_prune(bpe_trainer *tr) {
    word_table *t = &tr->table;
    size_t slot_bytes = t->nslots * sizeof(word_slot);
    size_t left = t->cap > slot_bytes ? t->cap - slot_bytes : 0;
    size_t target = left / 2;
    // keep at most a quarter of the slots filled, so the slot array need not grow soon
    uint64_t thr = table_prune(t, target, &tr->st);
    while (t->n > t->nslots / 4) {
        target /= 2;
        thr = table_prune(t, target, &tr->st);
    }
    if (tr->progress)
        fprintf(stderr, "bpe: word table reached its cap (%.1f MB): dropped the words of count <= %llu"
                " (%llu distinct words, %llu occurrences dropped so far)\n",
                (double)t->cap / 1e6, (unsigned long long)thr,
                (unsigned long long)tr->st.pruned_words, (unsigned long long)tr->st.pruned_count);
}

// Count one word (len <= BPE_TRAIN_MAX_WORD); caller holds mu.
static void tr_insert(bpe_trainer *tr, const char *w, size_t len, uint64_t h, uint64_t count) {
    word_table *t = &tr->table;
    tr->st.words += count;
    for (size_t i = h & (t->nslots - 1);; i = (i + 1) & (t->nslots - 1)) {
        if (!t->slots[i].ref) break;
        if (t->slots[i].hash != h) continue;
        word_rec *r = rec_at(t, t->slots[i].ref);
        if (r->len == len && memcmp(r + 1, w, len) == 0) {
            r->count += count;
            return;
        }
    }
    // a new word: room for a slot (load <= 1/2) and for its record
    if ((t->n + 1) * 2 > t->nslots) {
        size_t grown = 2 * t->nslots * sizeof(word_slot);
        if (t->bytes + grown > t->cap) {
            tr_prune(tr);
        } else {
            word_slot *ns = gdn_malloc(grown);
            table_account(t, grown);
            for (size_t i = 0; i < t->nslots; i++)
                if (t->slots[i].ref) slots_put(ns, 2 * t->nslots, t->slots[i].hash, t->slots[i].ref);
            free(t->slots);
            t->slots = ns;
            t->nslots *= 2;
            table_account(t, 0);
        }
    }
    size_t sz = rec_size(len);
    if (t->nchunks == 0 || t->chunk_used[t->nchunks - 1] + sz > CHUNK_BYTES) {
        size_t list_more = t->nchunks == t->chunks_cap ? (t->chunks_cap + 16) : 0;
        size_t need = CHUNK_BYTES + list_more * (sizeof(uint8_t *) + sizeof(uint32_t));
        if (t->bytes + need > t->cap) tr_prune(tr);
        if (t->nchunks == 0 || t->chunk_used[t->nchunks - 1] + sz > CHUNK_BYTES) {
            if (t->nchunks == t->chunks_cap) {
                t->chunks_cap += 16;
                t->chunks = gdn_realloc(t->chunks, t->chunks_cap * sizeof(uint8_t *));
                t->chunk_used = gdn_realloc(t->chunk_used, t->chunks_cap * sizeof(uint32_t));
            }
            t->chunks[t->nchunks] = gdn_malloc(CHUNK_BYTES);
            t->chunk_used[t->nchunks] = 0;
            t->nchunks++;
            table_account(t, 0);
            if (t->bytes > t->cap)
                gdn_die("bpe_train: word table %zu bytes over its cap %zu after pruning", t->bytes, t->cap);
        }
    }
    size_t c = t->nchunks - 1;
    uint32_t off = t->chunk_used[c];
    word_rec *r = (word_rec *)(t->chunks[c] + off);
    r->count = count;
    r->len = (uint32_t)len;
    r->hash = (uint32_t)h;
    memcpy(r + 1, w, len);
    t->chunk_used[c] = off + (uint32_t)sz;
    slots_put(t->slots, t->nslots, h, ((uint64_t)c << 32 | off) + 1);
    t->n++;
    tr->st.distinct = t->n;
    tr->st.table_bytes = t->bytes;
    tr->st.table_peak = t->peak;
}

bpe_trainer *bpe_train_new(const bpe_train_opts *opts, char *err, size_t errlen) {
    size_t cap = opts->mem_cap ? opts->mem_cap : ((size_t)1 << 30);
    if (cap < BPE_TRAIN_MIN_CAP) {
        snprintf(err, errlen, "bpe trainer: memory cap %zu bytes is below the minimum %zu",
                 cap, BPE_TRAIN_MIN_CAP);
        return NULL;
    }
    if (opts->n_specials < 0 || (opts->n_specials > 0 && !opts->specials)) {
        snprintf(err, errlen, "bpe trainer: bad special-token list");
        return NULL;
    }
    for (int i = 0; i < opts->n_specials; i++) {
        const char *s = opts->specials[i];
        json_t *j = s ? json_string(s) : NULL;  // NULL for invalid UTF-8
        if (!s || !s[0] || !j) {
            snprintf(err, errlen, "bpe trainer: special token %d is empty or not UTF-8", i);
            json_decref(j);
            return NULL;
        }
        json_decref(j);
        for (int k = 0; k < i; k++)
            if (!strcmp(opts->specials[k], s)) {
                snprintf(err, errlen, "bpe trainer: special token %s given twice", s);
                return NULL;
            }
    }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)BPE_GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "bpe trainer: PCRE2 cannot compile the GPT-2 pattern at %zu: %s",
                 (size_t)eo, (const char *)msg);
        return NULL;
    }
    // JIT when PCRE2 was built with it; the interpreter gives the same matches otherwise.
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    bpe_trainer *tr = gdn_malloc(sizeof *tr);
    tr->re = re;
    tr->n_specials = opts->n_specials;
    tr->specials = gdn_malloc((size_t)(opts->n_specials + 1) * sizeof(char *));
    tr->special_len = gdn_malloc((size_t)(opts->n_specials + 1) * sizeof(size_t));
    for (int i = 0; i < opts->n_specials; i++) {
        tr->specials[i] = gdn_strdup(opts->specials[i]);
        tr->special_len[i] = strlen(tr->specials[i]);
    }
    tr->progress = opts->progress;
    if (pthread_mutex_init(&tr->mu, NULL) != 0) gdn_die("bpe_train: pthread_mutex_init failed");
    table_init(&tr->table, cap);
    tr->st.table_bytes = tr->table.bytes;
    tr->st.table_peak = tr->table.peak;
    return tr;
}

void bpe_train_free(bpe_trainer *tr) {
    if (!tr) return;
    table_free(&tr->table);
    pcre2_code_free(tr->re);
    for (int i = 0; i < tr->n_specials; i++) free(tr->specials[i]);
    free(tr->specials);
    free(tr->special_len);
    pthread_mutex_destroy(&tr->mu);
    free(tr);
}

void bpe_train_get_stats(bpe_trainer *tr, bpe_train_stats *out) {
    pthread_mutex_lock(&tr->mu);
    *out = tr->st;
    pthread_mutex_unlock(&tr->mu);
}

bool bpe_train_split(bpe_trainer *tr, const char *text, size_t len,
                     void (*fn)(const char *word, size_t n, void *ctx), void *ctx, char *err,
                     size_t errlen) {
    if (len == 0) return true;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(tr->re, NULL);
    if (!md) gdn_die("bpe_train: out of memory for PCRE2 match data");
    size_t pos = 0;
    bool ok = true;
    while (pos < len) {
        int rc = pcre2_match(tr->re, (PCRE2_SPTR)text, len, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) {  // only bytes no word can hold (invalid UTF-8) remain
            fn(text + pos, len - pos, ctx);
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            snprintf(err, errlen, "bpe trainer: PCRE2 match failed at byte %zu: %s", pos,
                     (const char *)msg);
            ok = false;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (s > pos) fn(text + pos, s - pos, ctx);  // skipped invalid UTF-8: a word of its own
        if (e <= s) e = s + 1;  // no alternative matches empty; keep moving if one ever did
        fn(text + s, e - s, ctx);
        pos = e;
    }
    pcre2_match_data_free(md);
    return ok;
}

// Words of one add call, hashed outside the lock and counted in batches under it.
#define ADD_BATCH 4096
typedef struct {
    bpe_trainer *tr;
    const char *w[ADD_BATCH];
    uint32_t len[ADD_BATCH];
    uint64_t hash[ADD_BATCH];
    int n;
    uint64_t long_words;
} add_batch;

static void batch_flush(add_batch *b) {
    bpe_trainer *tr = b->tr;
    pthread_mutex_lock(&tr->mu);
    for (int i = 0; i < b->n; i++) tr_insert(tr, b->w[i], b->len[i], b->hash[i], 1);
    tr->st.long_words += b->long_words;
    pthread_mutex_unlock(&tr->mu);
    b->n = 0;
    b->long_words = 0;
}

static void batch_word(const char *w, size_t n, void *ctx) {
    add_batch *b = ctx;
    if (n > BPE_TRAIN_MAX_WORD) {
        b->long_words++;
        return;
    }
    b->w[b->n] = w;
    b->len[b->n] = (uint32_t)n;
    b->hash[b->n] = hash_bytes(w, n);
    if (++b->n == ADD_BATCH) batch_flush(b);
}

// First occurrence of needle (m > 0 bytes) in hay (n bytes), or NULL.
static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    for (const char *p = hay, *end = hay + n; (size_t)(end - p) >= m;) {
        p = memchr(p, needle[0], (size_t)(end - p) - m + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, m) == 0) return p;
        p++;
    }
    return NULL;
}

bool bpe_train_add(bpe_trainer *tr, const char *text, size_t len, char *err, size_t errlen) {
    if (tr->finished) {
        snprintf(err, errlen, "bpe trainer: documents added after finish");
        return false;
    }
    add_batch *b = malloc(sizeof *b);  // not zero-filled: called once per document
    if (!b) gdn_die("bpe_train: out of memory (%zu bytes)", sizeof *b);
    b->tr = tr;
    b->n = 0;
    b->long_words = 0;
    bool ok = true;
    size_t pos = 0;
    while (ok && pos < len) {
        // the next special token written in the text, if any: the text before it is a piece
        size_t next = len, skip = 0;
        for (int i = 0; i < tr->n_specials; i++) {
            const char *f = find_bytes(text + pos, next - pos, tr->specials[i], tr->special_len[i]);
            if (f && (size_t)(f - text) < next) {
                next = (size_t)(f - text);
                skip = tr->special_len[i];
            }
        }
        ok = bpe_train_split(tr, text + pos, next - pos, batch_word, b, err, errlen);
        pos = next + skip;
    }
    if (b->n || b->long_words) batch_flush(b);
    free(b);
    return ok;
}

void bpe_train_add_word(bpe_trainer *tr, const char *word, size_t len, uint64_t count) {
    if (count == 0 || len == 0) return;
    uint64_t h = hash_bytes(word, len);
    if (tr->finished) gdn_die("bpe_train_add_word called after bpe_train_finish");
    pthread_mutex_lock(&tr->mu);
    if (len > BPE_TRAIN_MAX_WORD)
        tr->st.long_words += count;
    else
        tr_insert(tr, word, len, h, count);
    pthread_mutex_unlock(&tr->mu);
}

// ---- merging -------------------------------------------------------------------------------

typedef struct {
    int64_t count;
    uint32_t a, b;
    uint32_t *pos;  // words the pair occurs in (may hold words it left since)
    uint32_t npos, cap;
    uint64_t touched;  // the merge that last grew it
} pair_t;

typedef struct {
    int64_t count;
    uint32_t a, b;
} heap_entry;

typedef struct {
    // words
    int32_t *sym;        // all words' symbols
    size_t *wstart;      // (n) first symbol of word i
    uint32_t *wlen;      // (n) symbols in word i now
    int64_t *wcount;     // (n)
    uint64_t *wstamp;    // (n) the merge that last rewrote word i
    size_t n;
    // tokens: bytes of token i = tok_bytes[tok_off[i] .. + tok_len[i]]
    char *tok_bytes;
    size_t tok_bytes_n, tok_bytes_cap;
    size_t *tok_off;
    uint32_t *tok_len;
    size_t ntok, tok_cap;
    int32_t *tok_map;    // open addressing: token bytes -> id, -1 empty
    size_t tok_map_n;
    // pairs
    pair_t *pairs;
    size_t npairs, pairs_cap;
    int32_t *pair_map;   // open addressing on (a, b): index into pairs, -1 empty
    size_t pair_map_n;
    heap_entry *heap;
    size_t nheap, heap_cap;
    uint32_t *touched;   // pairs grown by the merge in progress
    size_t ntouched, touched_cap;
    uint32_t (*merges)[2];
    size_t nmerges, merges_cap;
    uint64_t merge_no;
} merger;

static void merger_free(merger *m) {
    free(m->sym);
    free(m->wstart);
    free(m->wlen);
    free(m->wcount);
    free(m->wstamp);
    free(m->tok_bytes);
    free(m->tok_off);
    free(m->tok_len);
    free(m->tok_map);
    for (size_t i = 0; i < m->npairs; i++) free(m->pairs[i].pos);
    free(m->pairs);
    free(m->pair_map);
    free(m->heap);
    free(m->touched);
    free(m->merges);
}

static void tok_map_put(merger *m, uint32_t id) {
    uint64_t h = hash_bytes(m->tok_bytes + m->tok_off[id], m->tok_len[id]);
    size_t i = h & (m->tok_map_n - 1);
    while (m->tok_map[i] >= 0) i = (i + 1) & (m->tok_map_n - 1);
    m->tok_map[i] = (int32_t)id;
}

static int32_t tok_find(const merger *m, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    for (size_t i = h & (m->tok_map_n - 1); m->tok_map[i] >= 0; i = (i + 1) & (m->tok_map_n - 1)) {
        int32_t id = m->tok_map[i];
        if (m->tok_len[id] == n && memcmp(m->tok_bytes + m->tok_off[id], s, n) == 0) return id;
    }
    return -1;
}

static uint32_t tok_add(merger *m, const char *s, size_t n) {
    if (m->ntok == m->tok_cap) {
        m->tok_cap = m->tok_cap ? 2 * m->tok_cap : 1024;
        m->tok_off = gdn_realloc(m->tok_off, m->tok_cap * sizeof(size_t));
        m->tok_len = gdn_realloc(m->tok_len, m->tok_cap * sizeof(uint32_t));
    }
    while (m->tok_bytes_n + n > m->tok_bytes_cap) {
        m->tok_bytes_cap = m->tok_bytes_cap ? 2 * m->tok_bytes_cap : 65536;
        m->tok_bytes = gdn_realloc(m->tok_bytes, m->tok_bytes_cap);
    }
    memcpy(m->tok_bytes + m->tok_bytes_n, s, n);
    uint32_t id = (uint32_t)m->ntok++;
    m->tok_off[id] = m->tok_bytes_n;
    m->tok_len[id] = (uint32_t)n;
    m->tok_bytes_n += n;
    if (m->ntok * 2 > m->tok_map_n) {
        free(m->tok_map);
        m->tok_map_n = m->tok_map_n ? 2 * m->tok_map_n : 4096;
        m->tok_map = gdn_malloc(m->tok_map_n * sizeof(int32_t));
        memset(m->tok_map, 0xff, m->tok_map_n * sizeof(int32_t));
        for (uint32_t i = 0; i < m->ntok; i++) tok_map_put(m, i);
    } else {
        tok_map_put(m, id);
    }
    return id;
}

static inline uint64_t pair_hash(uint32_t a, uint32_t b) { return mix64((uint64_t)a << 32 | b); }

static void pair_map_put(merger *m, uint32_t idx) {
    size_t i = pair_hash(m->pairs[idx].a, m->pairs[idx].b) & (m->pair_map_n - 1);
    while (m->pair_map[i] >= 0) i = (i + 1) & (m->pair_map_n - 1);
    m->pair_map[i] = (int32_t)idx;
}

// The index of pair (a, b), created with count 0 when new.
static uint32_t pair_get(merger *m, uint32_t a, uint32_t b) {
    for (size_t i = pair_hash(a, b) & (m->pair_map_n - 1); m->pair_map[i] >= 0;
         i = (i + 1) & (m->pair_map_n - 1)) {
        pair_t *p = &m->pairs[m->pair_map[i]];
        if (p->a == a && p->b == b) return (uint32_t)m->pair_map[i];
    }
    if (m->npairs == m->pairs_cap) {
        m->pairs_cap = m->pairs_cap ? 2 * m->pairs_cap : 65536;
        m->pairs = gdn_realloc(m->pairs, m->pairs_cap * sizeof(pair_t));
    }
    if (m->npairs >= (size_t)INT32_MAX) gdn_die("bpe_train: more than 2^31 distinct pairs");
    uint32_t idx = (uint32_t)m->npairs++;
    m->pairs[idx] = (pair_t){.a = a, .b = b};
    if (m->npairs * 2 > m->pair_map_n) {
        free(m->pair_map);
        m->pair_map_n = m->pair_map_n ? 2 * m->pair_map_n : 131072;
        m->pair_map = gdn_malloc(m->pair_map_n * sizeof(int32_t));
        memset(m->pair_map, 0xff, m->pair_map_n * sizeof(int32_t));
        for (uint32_t i = 0; i < m->npairs; i++) pair_map_put(m, i);
    } else {
        pair_map_put(m, idx);
    }
    return idx;
}

static void pair_note_word(pair_t *p, uint32_t wi) {
    if (p->npos && p->pos[p->npos - 1] == wi) return;
    if (p->npos == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 4;
        p->pos = gdn_realloc(p->pos, p->cap * sizeof(uint32_t));
    }
    p->pos[p->npos++] = wi;
}

// heap order: higher count first, then smaller a, then smaller b
static inline bool heap_before(const heap_entry *x, const heap_entry *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static void heap_push(merger *m, int64_t count, uint32_t a, uint32_t b) {
    if (m->nheap == m->heap_cap) {
        m->heap_cap = m->heap_cap ? 2 * m->heap_cap : 65536;
        m->heap = gdn_realloc(m->heap, m->heap_cap * sizeof(heap_entry));
    }
    heap_entry e = {count, a, b};
    size_t i = m->nheap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!heap_before(&e, &m->heap[up])) break;
        m->heap[i] = m->heap[up];
        i = up;
    }
    m->heap[i] = e;
}

static heap_entry heap_pop(merger *m) {
    heap_entry top = m->heap[0], last = m->heap[--m->nheap];
    size_t i = 0, n = m->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(&m->heap[c + 1], &m->heap[c])) c++;
        if (!heap_before(&m->heap[c], &last)) break;
        m->heap[i] = m->heap[c];
        i = c;
    }
    if (n) m->heap[i] = last;
    return top;
}

// (x, y) += delta occurrences of word wi, unless (x, y) is the pair being merged.
static void pair_change(merger *m, uint32_t x, uint32_t y, int64_t delta, uint32_t wi,
                        uint32_t a, uint32_t b) {
    if (x == a && y == b) return;
    uint32_t idx = pair_get(m, x, y);
    pair_t *p = &m->pairs[idx];
    p->count += delta;
    if (delta > 0) {
        pair_note_word(p, wi);
        if (p->touched != m->merge_no) {
            p->touched = m->merge_no;
            if (m->ntouched == m->touched_cap) {
                m->touched_cap = m->touched_cap ? 2 * m->touched_cap : 1024;
                m->touched = gdn_realloc(m->touched, m->touched_cap * sizeof(uint32_t));
            }
            m->touched[m->ntouched++] = idx;
        }
    }
}

// Rewrite word wi with every (a, b) -> c, left to right, updating the pair counts.
static void merge_word(merger *m, uint32_t wi, uint32_t a, uint32_t b, uint32_t c) {
    int32_t *w = m->sym + m->wstart[wi];
    uint32_t len = m->wlen[wi], out = 0, i = 0;
    int64_t cnt = m->wcount[wi];
    while (i < len) {
        if (i + 1 < len && (uint32_t)w[i] == a && (uint32_t)w[i + 1] == b) {
            if (out > 0) {
                uint32_t p = (uint32_t)w[out - 1];
                pair_change(m, p, a, -cnt, wi, a, b);
                pair_change(m, p, c, cnt, wi, a, b);
            }
            if (i + 2 < len) {
                uint32_t nx = (uint32_t)w[i + 2];
                pair_change(m, b, nx, -cnt, wi, a, b);
                pair_change(m, c, nx, cnt, wi, a, b);
            }
            w[out++] = (int32_t)c;
            i += 2;
        } else {
            w[out++] = w[i++];
        }
    }
    m->wlen[wi] = out;
}

static int cmp_recs(const void *x, const void *y) {
    const word_rec *a = *(const word_rec *const *)x, *b = *(const word_rec *const *)y;
    size_t n = GDN_MIN(a->len, b->len);
    int c = memcmp(a + 1, b + 1, n);
    if (c) return c;
    return (a->len > b->len) - (a->len < b->len);
}

// Move the counted words into m (sorted by bytes, so the order they arrived in does not matter)
// and free the word table.
static void merger_load_words(merger *m, word_table *t) {
    word_rec **recs = gdn_malloc((t->n + 1) * sizeof(word_rec *));
    size_t n = 0, total = 0;
    for (size_t c = 0; c < t->nchunks; c++)
        for (uint32_t off = 0; off < t->chunk_used[c];) {
            word_rec *r = (word_rec *)(t->chunks[c] + off);
            recs[n++] = r;
            total += r->len;
            off += (uint32_t)rec_size(r->len);
        }
    if (n >= (size_t)UINT32_MAX) gdn_die("bpe_train: more than 2^32 distinct words");
    qsort(recs, n, sizeof *recs, cmp_recs);
    m->n = n;
    m->sym = gdn_malloc((total + 1) * sizeof(int32_t));
    m->wstart = gdn_malloc((n + 1) * sizeof(size_t));
    m->wlen = gdn_malloc((n + 1) * sizeof(uint32_t));
    m->wcount = gdn_malloc((n + 1) * sizeof(int64_t));
    m->wstamp = gdn_malloc((n + 1) * sizeof(uint64_t));
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *s = (const uint8_t *)(recs[i] + 1);
        m->wstart[i] = at;
        m->wlen[i] = recs[i]->len;
        m->wcount[i] = recs[i]->count > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)recs[i]->count;
        for (uint32_t k = 0; k < recs[i]->len; k++) m->sym[at++] = s[k];
    }
    free(recs);
    table_free(t);
}

// ---- tokenizer.json ------------------------------------------------------------------------

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100 + their rank among them. utf8[b] is the UTF-8 of byte b's character.
static void byte_chars(char utf8[256][3]) {
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unsigned cp = self ? (unsigned)b : 256u + (unsigned)extra++;
        if (cp < 0x80) {
            utf8[b][0] = (char)cp;
            utf8[b][1] = 0;
        } else {
            utf8[b][0] = (char)(0xC0 | (cp >> 6));
            utf8[b][1] = (char)(0x80 | (cp & 0x3F));
            utf8[b][2] = 0;
        }
    }
}

static char *token_string(const merger *m, uint32_t id, char utf8[256][3], char **buf,
                          size_t *cap) {
    size_t need = 2 * (size_t)m->tok_len[id] + 1;
    if (need > *cap) {
        *cap = need * 2;
        *buf = gdn_realloc(*buf, *cap);
    }
    size_t at = 0;
    const uint8_t *s = (const uint8_t *)m->tok_bytes + m->tok_off[id];
    for (uint32_t k = 0; k < m->tok_len[id]; k++)
        for (const char *c = utf8[s[k]]; *c; c++) (*buf)[at++] = *c;
    (*buf)[at] = 0;
    return *buf;
}

static json_t *byte_level(bool add_prefix_space, bool trim_offsets) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("ByteLevel"));
    json_object_set_new(o, "add_prefix_space", json_boolean(add_prefix_space));
    json_object_set_new(o, "trim_offsets", json_boolean(trim_offsets));
    json_object_set_new(o, "use_regex", json_true());
    return o;
}

// The tokenizer.json document, in the layout the `tokenizers` package writes.
static json_t *tokenizer_json(const merger *m, bpe_trainer *tr, char *err, size_t errlen) {
    char utf8[256][3];
    byte_chars(utf8);
    char *buf = NULL;
    size_t cap = 0;
    json_t *vocab = json_object();
    for (uint32_t id = 0; id < m->ntok; id++)
        json_object_set_new(vocab, token_string(m, id, utf8, &buf, &cap), json_integer(id));
    json_t *added = json_array();
    for (int i = 0; i < tr->n_specials; i++) {
        size_t id = m->ntok + (size_t)i;
        if (json_object_get(vocab, tr->specials[i])) {
            snprintf(err, errlen, "bpe trainer: special token %s is also a learned token",
                     tr->specials[i]);
            json_decref(vocab);
            json_decref(added);
            free(buf);
            return NULL;
        }
        json_object_set_new(vocab, tr->specials[i], json_integer((json_int_t)id));
        json_t *a = json_object();
        json_object_set_new(a, "id", json_integer((json_int_t)id));
        json_object_set_new(a, "content", json_string(tr->specials[i]));
        json_object_set_new(a, "single_word", json_false());
        json_object_set_new(a, "lstrip", json_false());
        json_object_set_new(a, "rstrip", json_false());
        json_object_set_new(a, "normalized", json_false());
        json_object_set_new(a, "special", json_true());
        json_array_append_new(added, a);
    }
    json_t *merges = json_array();
    for (size_t i = 0; i < m->nmerges; i++) {
        json_t *pr = json_array();
        json_array_append_new(pr, json_string(token_string(m, m->merges[i][0], utf8, &buf, &cap)));
        json_array_append_new(pr, json_string(token_string(m, m->merges[i][1], utf8, &buf, &cap)));
        json_array_append_new(merges, pr);
    }
    free(buf);
    json_t *model = json_object();
    json_object_set_new(model, "type", json_string("BPE"));
    json_object_set_new(model, "dropout", json_null());
    json_object_set_new(model, "unk_token", json_null());
    json_object_set_new(model, "continuing_subword_prefix", json_null());
    json_object_set_new(model, "end_of_word_suffix", json_null());
    json_object_set_new(model, "fuse_unk", json_false());
    json_object_set_new(model, "byte_fallback", json_false());
    json_object_set_new(model, "ignore_merges", json_false());
    json_object_set_new(model, "vocab", vocab);
    json_object_set_new(model, "merges", merges);
    json_t *root = json_object();
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    json_object_set_new(root, "added_tokens", added);
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer", byte_level(false, true));
    json_object_set_new(root, "post_processor", byte_level(true, false));
    json_object_set_new(root, "decoder", byte_level(true, true));
    json_object_set_new(root, "model", model);
    return root;
}

// text -> path through a temporary file in the same directory, fsync'd, then renamed.
static bool write_atomic(const char *path, const char *text, size_t n, char *err, size_t errlen) {
    size_t pl = strlen(path);
    char *tmp = gdn_malloc(pl + 16);
    snprintf(tmp, pl + 16, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        free(tmp);
        return false;
    }
    const char *why = NULL;
    for (size_t at = 0; at < n && !why;) {
        ssize_t w = write(fd, text + at, n - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) why = "write";
        else at += (size_t)w;
    }
    if (!why && fchmod(fd, 0644) != 0) why = "fchmod";
    if (!why && fsync(fd) != 0) why = "fsync";
    int saved = errno;
    if (close(fd) != 0 && !why) {
        why = "close";
        saved = errno;
    }
    if (!why && rename(tmp, path) != 0) {
        why = "rename";
        saved = errno;
    }
    if (why) {
        snprintf(err, errlen, "cannot write %s (%s of %s): %s", path, why, tmp, strerror(saved));
        unlink(tmp);
    }
    free(tmp);
    return !why;
}

bool bpe_train_finish(bpe_trainer *tr, int vocab_size, const char *out_path, char *err,
                      size_t errlen) {
    if (tr->finished) {
        snprintf(err, errlen, "bpe trainer: finish called twice");
        return false;
    }
    if (vocab_size < 256 + tr->n_specials) {
        snprintf(err, errlen, "bpe trainer: vocab %d is smaller than the 256 byte tokens + %d "
                 "special token%s", vocab_size, tr->n_specials, tr->n_specials == 1 ? "" : "s");
        return false;
    }
    if (!out_path || !out_path[0]) {
        snprintf(err, errlen, "bpe trainer: no output path");
        return false;
    }
    tr->finished = true;
    double t0 = gdn_now();
    merger m = {0};
    pthread_mutex_lock(&tr->mu);
    merger_load_words(&m, &tr->table);
    tr->st.table_bytes = 0;
    pthread_mutex_unlock(&tr->mu);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        tok_add(&m, &c, 1);
    }
    m.pair_map_n = 131072;
    m.pair_map = gdn_malloc(m.pair_map_n * sizeof(int32_t));
    memset(m.pair_map, 0xff, m.pair_map_n * sizeof(int32_t));
    for (size_t wi = 0; wi < m.n; wi++) {
        const int32_t *w = m.sym + m.wstart[wi];
        for (uint32_t i = 0; i + 1 < m.wlen[wi]; i++) {
            uint32_t idx = pair_get(&m, (uint32_t)w[i], (uint32_t)w[i + 1]);  // may move m.pairs
            pair_t *p = &m.pairs[idx];
            p->count += m.wcount[wi];
            pair_note_word(p, (uint32_t)wi);
        }
    }
    for (size_t i = 0; i < m.npairs; i++) heap_push(&m, m.pairs[i].count, m.pairs[i].a, m.pairs[i].b);

    size_t target = (size_t)vocab_size - (size_t)tr->n_specials;
    size_t want = target - 256;
    double last = gdn_now(), tm = last;
    char *cat = NULL;
    size_t cat_cap = 0;
    while (m.ntok < target && m.nheap) {
        heap_entry e = heap_pop(&m);
        uint32_t idx = pair_get(&m, e.a, e.b);
        int64_t now = m.pairs[idx].count;
        if (now <= 0) continue;
        if (now != e.count) {
            heap_push(&m, now, e.a, e.b);
            continue;
        }
        size_t la = m.tok_len[e.a], lb = m.tok_len[e.b];
        if (la + lb > cat_cap) {
            cat_cap = 2 * (la + lb);
            cat = gdn_realloc(cat, cat_cap);
        }
        memcpy(cat, m.tok_bytes + m.tok_off[e.a], la);
        memcpy(cat + la, m.tok_bytes + m.tok_off[e.b], lb);
        int32_t found = tok_find(&m, cat, la + lb);
        uint32_t c = found >= 0 ? (uint32_t)found : tok_add(&m, cat, la + lb);
        if (m.nmerges == m.merges_cap) {
            m.merges_cap = m.merges_cap ? 2 * m.merges_cap : 1024;
            m.merges = gdn_realloc(m.merges, m.merges_cap * sizeof *m.merges);
        }
        m.merges[m.nmerges][0] = e.a;
        m.merges[m.nmerges][1] = e.b;
        m.nmerges++;
        m.merge_no++;
        m.ntouched = 0;
        uint32_t *pos = m.pairs[idx].pos, npos = m.pairs[idx].npos;
        m.pairs[idx].pos = NULL;
        m.pairs[idx].npos = m.pairs[idx].cap = 0;
        m.pairs[idx].count = 0;
        for (uint32_t k = 0; k < npos; k++) {
            uint32_t wi = pos[k];
            if (m.wstamp[wi] == m.merge_no) continue;
            m.wstamp[wi] = m.merge_no;
            merge_word(&m, wi, e.a, e.b, c);
        }
        free(pos);
        for (size_t k = 0; k < m.ntouched; k++) {
            const pair_t *p = &m.pairs[m.touched[k]];
            if (p->count > 0) heap_push(&m, p->count, p->a, p->b);
        }
        double t = gdn_now();
        if (tr->progress && t - last >= 1.0) {
            size_t done = m.ntok - 256;
            double rate = (double)done / (t - tm);
            fprintf(stderr, "\rbpe: %zu/%zu tokens merged, %.0f/s, ETA %.0f s   ", done, want,
                    rate, rate > 0 ? (double)(want - done) / rate : 0.0);
            last = t;
        }
    }
    free(cat);
    double merge_s = gdn_now() - tm;
    if (tr->progress)
        fprintf(stderr, "\rbpe: %zu merges, %zu tokens + %d specials, %zu distinct words, %.1f s\n",
                m.nmerges, m.ntok, tr->n_specials, m.n, gdn_now() - t0);
    json_t *root = tokenizer_json(&m, tr, err, errlen);
    bool ok = root != NULL;
    if (ok) {
        char *text = json_dumps(root, JSON_INDENT(2));
        if (!text) gdn_die("bpe_train: out of memory writing the tokenizer.json text");
        size_t n = strlen(text);
        ok = write_atomic(out_path, text, n, err, errlen);
        free(text);
        json_decref(root);
    }
    pthread_mutex_lock(&tr->mu);
    tr->st.merges = (int)m.nmerges;
    tr->st.vocab_size = (int)m.ntok + tr->n_specials;
    tr->st.merge_seconds = merge_s;
    tr->st.distinct = 0;
    pthread_mutex_unlock(&tr->mu);
    merger_free(&m);
    return ok;
}
