// corpus.c — a raw text corpus as a stream of document pieces (corpus.h): the file list, the
// streaming decompressors (zlib, libzstd), the line reader, the three text document rules, the
// jsonl records, UTF-8 validation and the safe piece cuts.
#include "corpus.h"
#include "../core/common.h"
#include <dirent.h>
#include <jansson.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#define RAW_BYTES (64u << 10)   // compressed (or plain) bytes read from disk at a time
#define LINE_BYTES (64u << 10)  // decompressed bytes buffered for the line reader

typedef enum { SRC_PLAIN, SRC_GZ, SRC_ZST } source_kind;

struct corpus {
    corpus_options o;
    char **files;
    bool *jsonl;                  // per file: a jsonl file (else text)
    int n_files, next_file;
    uint64_t total_bytes;
    _Atomic uint64_t bytes_read;
    uint64_t text_bytes;

    // the open file
    int cur;                      // index in files, -1 when none is open
    FILE *fp;
    source_kind kind;
    unsigned char *raw;           // (RAW_BYTES) bytes from disk
    size_t raw_len, raw_pos;
    bool raw_eof, stream_done;    // end of the file; end of the (last) compressed frame
    z_stream z;
    bool z_live;
    ZSTD_DStream *zs;
    size_t zs_last;               // last ZSTD_decompressStream result (0: frame complete)
    char *rb;                     // (LINE_BYTES) decompressed bytes
    size_t rb_len, rb_pos;
    bool rb_eof;
    uint64_t line;                // 1-based line of the next fragment
    bool at_line_start;
    uint64_t file_bytes;          // text bytes of this file so far

    // the document being assembled (text files): buf[0, blen), text from line doc_line
    char *buf;                    // (2 piece_bytes)
    size_t blen, consumed;        // consumed: the piece handed out last, moved out next call
    bool in_doc;                  // a piece of the document was handed out
    bool has_text;                // the document has begun (blen may be 0 after a cut)
    uint64_t doc_line;
    const char *pending_nl;       // the newline that ends the last line added (line modes)
    bool skipping;                // a bad document: drop input to its end

    // jsonl: the line being read and the record being handed out in pieces
    char *rec_line;
    size_t rec_line_len, rec_line_cap;
    bool rec_too_long;
    json_t *rec;
    const char *rec_text;
    size_t rec_len, rec_pos;
    uint64_t rec_lineno;
};

// ---- file list --------------------------------------------------------------------------------

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static bool is_jsonl_name(const char *p) {
    return has_suffix(p, ".jsonl") || has_suffix(p, ".jsonl.gz") || has_suffix(p, ".jsonl.zst");
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_file(corpus *c, const char *path, uint64_t size) {
    if ((c->n_files & (c->n_files - 1)) == 0) {
        size_t cap = c->n_files ? 2 * (size_t)c->n_files : 16;
        c->files = gdn_realloc(c->files, cap * sizeof *c->files);
        c->jsonl = gdn_realloc(c->jsonl, cap * sizeof *c->jsonl);
    }
    c->files[c->n_files] = gdn_strdup(path);
    c->jsonl[c->n_files] = is_jsonl_name(path);
    c->n_files++;
    c->total_bytes += size;
}

// A directory's regular files, recursively, entries in byte order of their names.
static bool add_dir(corpus *c, const char *dir, int depth, char *err, size_t errlen) {
    if (depth > 64) {
        snprintf(err, errlen, "%s: directories nested more than 64 deep", dir);
        return false;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot read directory '%s': %s", dir, strerror(errno));
        return false;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = gdn_realloc(names, cap * sizeof *names);
        }
        names[n++] = gdn_strdup(e->d_name);
    }
    bool ok = errno == 0;
    if (!ok) snprintf(err, errlen, "cannot read directory '%s': %s", dir, strerror(errno));
    closedir(d);
    if (n > 1) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && ok; i++) {
        size_t pl = strlen(dir) + strlen(names[i]) + 2;
        char *p = gdn_malloc(pl);
        snprintf(p, pl, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(p, &st) != 0) {
            snprintf(err, errlen, "cannot read '%s': %s", p, strerror(errno));
            ok = false;
        } else if (S_ISDIR(st.st_mode)) {
            ok = add_dir(c, p, depth + 1, err, errlen);
        } else if (S_ISREG(st.st_mode)) {
            add_file(c, p, (uint64_t)st.st_size);
        }
        free(p);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return ok;
}

corpus *corpus_open(const char *const *inputs, int n_inputs, const corpus_options *o, char *err,
                    size_t errlen) {
    corpus *c = gdn_malloc(sizeof *c);
    c->o = *o;
    if (c->o.piece_bytes < 64) c->o.piece_bytes = 64;
    c->cur = -1;
    for (int i = 0; i < n_inputs; i++) {
        struct stat st;
        if (stat(inputs[i], &st) != 0) {
            snprintf(err, errlen, "cannot read input '%s': %s", inputs[i], strerror(errno));
            corpus_free(c);
            return NULL;
        }
        if (S_ISDIR(st.st_mode)) {
            int before = c->n_files;
            if (!add_dir(c, inputs[i], 0, err, errlen)) {
                corpus_free(c);
                return NULL;
            }
            if (c->n_files == before) {
                snprintf(err, errlen, "input directory '%s' holds no files", inputs[i]);
                corpus_free(c);
                return NULL;
            }
        } else {
            add_file(c, inputs[i], (uint64_t)st.st_size);
        }
    }
    c->raw = gdn_malloc(RAW_BYTES);
    c->rb = gdn_malloc(LINE_BYTES);
    c->buf = gdn_malloc(2 * c->o.piece_bytes + LINE_BYTES);
    return c;
}

static void close_file(corpus *c) {
    if (c->fp) fclose(c->fp);
    c->fp = NULL;
    if (c->z_live) inflateEnd(&c->z);
    c->z_live = false;
    if (c->zs) ZSTD_freeDStream(c->zs);
    c->zs = NULL;
    c->cur = -1;
}

void corpus_free(corpus *c) {
    if (!c) return;
    close_file(c);
    for (int i = 0; i < c->n_files; i++) free(c->files[i]);
    free(c->files);
    free(c->jsonl);
    free(c->raw);
    free(c->rb);
    free(c->buf);
    free(c->rec_line);
    if (c->rec) json_decref(c->rec);
    free(c);
}

size_t corpus_memory(const corpus_options *o) {
    size_t piece = GDN_MAX(o->piece_bytes, (size_t)64);
    return RAW_BYTES + LINE_BYTES + (2 * piece + LINE_BYTES) + 3 * o->max_record_bytes;
}

int corpus_n_files(const corpus *c) { return c->n_files; }
const char *corpus_file(const corpus *c, int i) { return c->files[i]; }
uint64_t corpus_total_bytes(const corpus *c) { return c->total_bytes; }
uint64_t corpus_bytes_read(const corpus *c) {
    return atomic_load_explicit(&((corpus *)c)->bytes_read, memory_order_relaxed);
}
uint64_t corpus_text_bytes(const corpus *c) { return c->text_bytes; }

// ---- decompressing source ---------------------------------------------------------------------

static bool open_file(corpus *c, int i, char *err, size_t errlen) {
    const char *p = c->files[i];
    c->fp = fopen(p, "rb");
    if (!c->fp) {
        snprintf(err, errlen, "cannot read input '%s': %s", p, strerror(errno));
        return false;
    }
    c->cur = i;
    c->kind = has_suffix(p, ".gz") ? SRC_GZ : has_suffix(p, ".zst") ? SRC_ZST : SRC_PLAIN;
    c->raw_len = c->raw_pos = 0;
    c->raw_eof = c->stream_done = false;
    c->rb_len = c->rb_pos = 0;
    c->rb_eof = false;
    c->line = 1;
    c->at_line_start = true;
    c->file_bytes = 0;
    c->blen = c->consumed = 0;
    c->in_doc = c->has_text = c->skipping = false;
    c->pending_nl = NULL;
    c->rec_line_len = 0;
    c->rec_too_long = false;
    if (c->kind == SRC_GZ) {
        memset(&c->z, 0, sizeof c->z);
        if (inflateInit2(&c->z, 15 + 32) != Z_OK) {  // 15 + 32: gzip or zlib header
            snprintf(err, errlen, "%s: cannot start the gzip decoder", p);
            return false;
        }
        c->z_live = true;
    } else if (c->kind == SRC_ZST) {
        c->zs = ZSTD_createDStream();
        if (!c->zs || ZSTD_isError(ZSTD_initDStream(c->zs))) {
            snprintf(err, errlen, "%s: cannot start the zstd decoder", p);
            return false;
        }
        c->zs_last = 0;
    }
    return true;
}

static bool raw_fill(corpus *c, char *err, size_t errlen) {
    if (c->raw_pos < c->raw_len || c->raw_eof) return true;
    c->raw_len = fread(c->raw, 1, RAW_BYTES, c->fp);
    c->raw_pos = 0;
    if (ferror(c->fp)) {
        snprintf(err, errlen, "cannot read input '%s': %s", c->files[c->cur], strerror(errno));
        return false;
    }
    if (c->raw_len < RAW_BYTES) c->raw_eof = true;
    atomic_fetch_add_explicit(&c->bytes_read, c->raw_len, memory_order_relaxed);
    return true;
}

// Up to cap decompressed bytes into out; *got = 0 at the end of the file. False on a read
// error or corrupt compressed data (err says which file).
static bool source_read(corpus *c, char *out, size_t cap, size_t *got, char *err, size_t errlen) {
    *got = 0;
    const char *path = c->files[c->cur];
    while (*got == 0) {
        if (!raw_fill(c, err, errlen)) return false;
        bool no_input = c->raw_pos == c->raw_len;
        if (c->kind == SRC_PLAIN) {
            if (no_input) return true;
            size_t n = GDN_MIN(cap, c->raw_len - c->raw_pos);
            memcpy(out, c->raw + c->raw_pos, n);
            c->raw_pos += n;
            *got = n;
        } else if (c->kind == SRC_GZ) {
            if (no_input) {
                if (!c->stream_done) {
                    snprintf(err, errlen, "%s: truncated gzip data", path);
                    return false;
                }
                return true;
            }
            if (c->stream_done) {  // another gzip member follows
                if (inflateReset(&c->z) != Z_OK) {
                    snprintf(err, errlen, "%s: cannot restart the gzip decoder", path);
                    return false;
                }
                c->stream_done = false;
            }
            c->z.next_in = c->raw + c->raw_pos;
            c->z.avail_in = (uInt)(c->raw_len - c->raw_pos);
            c->z.next_out = (Bytef *)out;
            c->z.avail_out = (uInt)cap;
            int rc = inflate(&c->z, Z_NO_FLUSH);
            c->raw_pos = c->raw_len - c->z.avail_in;
            *got = cap - c->z.avail_out;
            if (rc == Z_STREAM_END) {
                c->stream_done = true;
            } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && *got == 0 && c->z.avail_in == 0)) {
                snprintf(err, errlen, "%s: corrupt gzip data (zlib: %s)", path,
                         c->z.msg ? c->z.msg : "error");
                return false;
            }
        } else {
            if (no_input) {
                if (c->zs_last != 0) {
                    snprintf(err, errlen, "%s: truncated zstd data", path);
                    return false;
                }
                return true;
            }
            ZSTD_inBuffer in = {c->raw, c->raw_len, c->raw_pos};
            ZSTD_outBuffer o = {out, cap, 0};
            size_t rc = ZSTD_decompressStream(c->zs, &o, &in);
            if (ZSTD_isError(rc)) {
                snprintf(err, errlen, "%s: corrupt zstd data (zstd: %s)", path,
                         ZSTD_getErrorName(rc));
                return false;
            }
            c->zs_last = rc;
            c->raw_pos = in.pos;
            *got = o.pos;
        }
    }
    return true;
}

// The next line fragment: up to and including '\n' (*complete) or, for a line longer than the
// buffer or the file's last line without a newline, the bytes up to the buffer's end. *n = 0 at
// the end of the file. The fragment points into c->rb, valid until the next call.
static bool next_fragment(corpus *c, const char **s, size_t *n, bool *complete, char *err,
                          size_t errlen) {
    for (;;) {
        const char *p = c->rb + c->rb_pos;
        size_t avail = c->rb_len - c->rb_pos;
        const char *nl = avail ? memchr(p, '\n', avail) : NULL;
        if (nl || (avail && (c->rb_eof || (c->rb_pos == 0 && c->rb_len == LINE_BYTES)))) {
            *s = p;
            *n = nl ? (size_t)(nl - p) + 1 : avail;
            *complete = nl != NULL;
            c->rb_pos += *n;
            return true;
        }
        if (c->rb_eof) {
            *n = 0;
            *complete = false;
            return true;
        }
        memmove(c->rb, p, avail);  // keep the partial line, read more after it
        c->rb_pos = 0;
        c->rb_len = avail;
        size_t got;
        if (!source_read(c, c->rb + avail, LINE_BYTES - avail, &got, err, errlen)) return false;
        if (got == 0) c->rb_eof = true;
        c->rb_len += got;
    }
}

// ---- UTF-8 and cuts ---------------------------------------------------------------------------

// Offset of the first byte of s[0, n) that is not part of valid UTF-8 (RFC 3629: no overlong
// forms, no surrogates, <= U+10FFFF), or n.
static size_t utf8_invalid_at(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        int len;
        unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (b >= 0xC2 && b <= 0xDF) len = 2;
        else if (b == 0xE0) { len = 3; lo = 0xA0; }
        else if (b >= 0xE1 && b <= 0xEC) len = 3;
        else if (b == 0xED) { len = 3; hi = 0x9F; }
        else if (b >= 0xEE && b <= 0xEF) len = 3;
        else if (b == 0xF0) { len = 4; lo = 0x90; }
        else if (b >= 0xF1 && b <= 0xF3) len = 4;
        else if (b == 0xF4) { len = 4; hi = 0x8F; }
        else return i;
        if (i + (size_t)len > n) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (int k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += (size_t)len;
    }
    return n;
}

static bool graphic(char ch) { return ch > ' ' && ch < 0x7f; }

size_t corpus_safe_cut(const char *s, size_t n, bool *unsafe) {
    *unsafe = false;
    size_t lo = n / 2 + 1;
    for (size_t c = n - 1; c >= lo && c >= 2; c--)
        if (s[c - 1] == '\n' && graphic(s[c - 2]) && graphic(s[c])) return c;
    for (size_t c = n - 2; c >= lo && c >= 1; c--)
        if (s[c] == ' ' && graphic(s[c - 1]) && graphic(s[c + 1])) return c;
    *unsafe = true;
    size_t c = n - 1;
    while (c > 1 && ((unsigned char)s[c] & 0xC0) == 0x80) c--;
    return c;
}

static uint64_t count_lines(const char *s, size_t n) {
    uint64_t k = 0;
    for (const char *p = s, *end = s + n; (p = memchr(p, '\n', (size_t)(end - p))); p++) k++;
    return k;
}

// ---- documents --------------------------------------------------------------------------------

// Hand out buf[0, len) as a piece of the current document.
static corpus_status emit(corpus *c, corpus_piece *p, size_t len, bool last, bool unsafe) {
    p->text = c->buf;
    p->len = len;
    p->first = !c->in_doc;
    p->last = last;
    p->unsafe_cut = unsafe;
    p->file = c->files[c->cur];
    p->line = c->doc_line;
    c->doc_line += count_lines(c->buf, len);
    c->consumed = len;
    c->in_doc = !last;
    if (last) c->has_text = false;
    c->text_bytes += len;
    return CORPUS_PIECE;
}

// A bad document of a text file: the message, then skip its remaining input.
static corpus_status bad_doc(corpus *c, size_t bad_at, char *err, size_t errlen) {
    uint64_t line = c->doc_line + count_lines(c->buf, bad_at);
    snprintf(err, errlen, "%s:%llu: invalid UTF-8 (byte 0x%02x)", c->files[c->cur],
             (unsigned long long)line, (unsigned char)c->buf[bad_at]);
    c->blen = 0;
    c->in_doc = c->has_text = false;
    c->pending_nl = NULL;
    c->skipping = true;
    return CORPUS_BAD;
}

// The document's text so far is buf[0, blen): a full piece goes out (true), or nothing (false).
static bool piece_due(corpus *c) { return c->blen >= c->o.piece_bytes; }

static corpus_status cut_piece(corpus *c, corpus_piece *p, char *err, size_t errlen) {
    bool unsafe;
    size_t cut = corpus_safe_cut(c->buf, GDN_MIN(c->blen, c->o.piece_bytes + 1), &unsafe);
    size_t bad = utf8_invalid_at(c->buf, cut);
    if (bad < cut) return bad_doc(c, bad, err, errlen);
    return emit(c, p, cut, false, unsafe);
}

static corpus_status end_doc(corpus *c, corpus_piece *p, char *err, size_t errlen) {
    size_t bad = utf8_invalid_at(c->buf, c->blen);
    if (bad < c->blen) {
        corpus_status st = bad_doc(c, bad, err, errlen);
        c->skipping = false;  // the document ends here
        return st;
    }
    c->pending_nl = NULL;
    return emit(c, p, c->blen, true, false);
}

static void append(corpus *c, const char *s, size_t n) {
    memcpy(c->buf + c->blen, s, n);
    c->blen += n;
}

// The next piece of a text file; CORPUS_END at the end of the file.
static corpus_status text_next(corpus *c, corpus_piece *p, char *err, size_t errlen) {
    corpus_split mode = c->o.split;
    for (;;) {
        if (piece_due(c)) return cut_piece(c, p, err, errlen);
        const char *s;
        size_t n;
        bool complete;
        if (!next_fragment(c, &s, &n, &complete, err, errlen)) return CORPUS_FAIL;
        uint64_t line = c->line;
        bool line_start = c->at_line_start;
        c->at_line_start = complete;
        if (complete) c->line++;
        c->file_bytes += n;
        if (n == 0) {  // end of the file
            bool had = c->has_text;
            bool skipped = c->skipping;
            c->skipping = false;
            if (had) return end_doc(c, p, err, errlen);
            if (mode == CORPUS_SPLIT_FILE && c->file_bytes == 0 && !skipped) {
                snprintf(err, errlen, "%s: empty document (the file is empty)", c->files[c->cur]);
                c->file_bytes = 1;  // reported once
                return CORPUS_BAD;
            }
            return CORPUS_END;
        }
        if (mode == CORPUS_SPLIT_FILE) {
            if (c->skipping) continue;
            if (!c->has_text) {
                c->has_text = true;
                c->doc_line = line;
            }
            append(c, s, n);
            continue;
        }
        // line modes: a line's content without its newline; blank lines separate
        size_t content = n;
        const char *nl = NULL;
        if (complete) {
            bool crlf = n >= 2 && s[n - 2] == '\r';
            content = n - (crlf ? 2 : 1);
            nl = crlf ? "\r\n" : "\n";
        }
        bool blank = line_start && complete && content == 0;
        if (blank || (mode == CORPUS_SPLIT_LINES && line_start && content == 0)) {
            bool skipped = c->skipping;
            c->skipping = false;
            if (c->has_text && !skipped) return end_doc(c, p, err, errlen);
            continue;
        }
        if (c->skipping) {
            if (mode == CORPUS_SPLIT_LINES && complete) c->skipping = false;
            continue;
        }
        if (!c->has_text) {
            c->has_text = true;
            c->doc_line = line;
            c->pending_nl = NULL;
        }
        if (c->pending_nl) append(c, c->pending_nl, strlen(c->pending_nl));
        append(c, s, content);
        c->pending_nl = nl;
        if (mode == CORPUS_SPLIT_LINES && complete) return end_doc(c, p, err, errlen);
    }
}

// ---- jsonl ------------------------------------------------------------------------------------

static corpus_status record_piece(corpus *c, corpus_piece *p) {
    size_t left = c->rec_len - c->rec_pos;
    size_t n = left;
    bool unsafe = false;
    if (left > c->o.piece_bytes) n = corpus_safe_cut(c->rec_text + c->rec_pos, c->o.piece_bytes + 1, &unsafe);
    p->text = c->rec_text + c->rec_pos;
    p->len = n;
    p->first = c->rec_pos == 0;
    p->last = n == left;
    p->unsafe_cut = unsafe;
    p->file = c->files[c->cur];
    p->line = c->rec_lineno;
    c->rec_pos += n;
    c->text_bytes += n;
    return CORPUS_PIECE;
}

static corpus_status jsonl_next(corpus *c, corpus_piece *p, char *err, size_t errlen) {
    const char *path = c->files[c->cur];
    for (;;) {
        const char *s;
        size_t n;
        bool complete;
        if (!next_fragment(c, &s, &n, &complete, err, errlen)) return CORPUS_FAIL;
        if (n == 0 && c->rec_line_len == 0 && !c->rec_too_long) return CORPUS_END;
        if (n > 0 && !c->rec_too_long) {
            if (c->rec_line_len + n > c->o.max_record_bytes) {
                c->rec_too_long = true;
            } else {
                if (c->rec_line_len + n > c->rec_line_cap) {
                    c->rec_line_cap = GDN_MAX(c->rec_line_len + n, 2 * c->rec_line_cap);
                    c->rec_line = gdn_realloc(c->rec_line, c->rec_line_cap);
                }
                memcpy(c->rec_line + c->rec_line_len, s, n);
                c->rec_line_len += n;
            }
        }
        if (!complete && n > 0) continue;  // the line goes on
        uint64_t lineno = c->line;
        if (complete) c->line++;
        size_t len = c->rec_line_len;
        c->rec_line_len = 0;
        if (c->rec_too_long) {
            c->rec_too_long = false;
            snprintf(err, errlen, "%s:%llu: record longer than %zu bytes (--max-record)", path,
                     (unsigned long long)lineno, c->o.max_record_bytes);
            return CORPUS_BAD;
        }
        bool blank = true;
        for (size_t i = 0; i < len && blank; i++)
            blank = c->rec_line[i] == ' ' || c->rec_line[i] == '\t' || c->rec_line[i] == '\r' ||
                    c->rec_line[i] == '\n';
        if (blank) continue;
        json_error_t je;
        json_t *j = json_loadb(c->rec_line, len, JSON_ALLOW_NUL, &je);
        if (!j) {
            snprintf(err, errlen, "%s:%llu: malformed JSON (%s)", path, (unsigned long long)lineno,
                     je.text);
            return CORPUS_BAD;
        }
        json_t *f = json_is_object(j) ? json_object_get(j, c->o.text_field) : NULL;
        const char *why = !json_is_object(j) ? "the record is not a JSON object"
                          : !f               ? "no field"
                          : !json_is_string(f) ? "field is not a string"
                          : json_string_length(f) == 0 ? "empty document in field"
                                                       : NULL;
        if (why) {
            if (json_is_object(j))
                snprintf(err, errlen, "%s:%llu: %s \"%s\"", path, (unsigned long long)lineno, why,
                         c->o.text_field);
            else
                snprintf(err, errlen, "%s:%llu: %s", path, (unsigned long long)lineno, why);
            json_decref(j);
            return CORPUS_BAD;
        }
        c->rec = j;
        c->rec_text = json_string_value(f);
        c->rec_len = json_string_length(f);
        c->rec_pos = 0;
        c->rec_lineno = lineno;
        return record_piece(c, p);
    }
}

// ---- the stream -------------------------------------------------------------------------------

corpus_status corpus_next(corpus *c, corpus_piece *p, char *err, size_t errlen) {
    if (c->consumed) {  // the piece handed out last leaves the buffer
        memmove(c->buf, c->buf + c->consumed, c->blen - c->consumed);
        c->blen -= c->consumed;
        c->consumed = 0;
    }
    if (c->rec) {
        if (c->rec_pos < c->rec_len) return record_piece(c, p);
        json_decref(c->rec);
        c->rec = NULL;
    }
    for (;;) {
        if (c->cur < 0) {
            if (c->next_file == c->n_files) return CORPUS_END;
            if (!open_file(c, c->next_file++, err, errlen)) {
                close_file(c);
                return CORPUS_FAIL;
            }
        }
        bool jl = c->jsonl[c->cur];
        corpus_status st = jl ? jsonl_next(c, p, err, errlen) : text_next(c, p, err, errlen);
        if (st == CORPUS_FAIL) {
            // a read error or corrupt compressed data: the file's document in progress is lost;
            // reading goes on with the next file, reported as a bad document
            close_file(c);
            c->blen = c->consumed = 0;
            c->in_doc = c->has_text = false;
            return CORPUS_BAD;
        }
        if (st != CORPUS_END) return st;
        close_file(c);
    }
}
