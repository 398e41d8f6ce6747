// corpus.h — a raw text corpus read as a stream of documents, in bounded memory (docs/data.md).
//
// Inputs: text files, directories of them (walked recursively, entries in byte order of their
// names, names starting with '.' skipped), and JSON-lines files (*.jsonl: one JSON object a
// line, the document is its text field). Any of them may be gzip (*.gz, zlib) or zstd (*.zst,
// libzstd) compressed; decompression streams through fixed buffers.
// A document of a text file: the whole file (CORPUS_SPLIT_FILE), the runs of lines between
// blank lines (CORPUS_SPLIT_BLANK_LINES; a blank line is "\n" or "\r\n"; the newline that ends
// a document's last line is not part of it), or each non-blank line without its newline
// (CORPUS_SPLIT_LINES).
//
// Documents come in pieces of at most piece_bytes, cut at safe points (corpus_safe_cut), so a
// document of any size streams through a fixed buffer.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { CORPUS_SPLIT_FILE, CORPUS_SPLIT_BLANK_LINES, CORPUS_SPLIT_LINES } corpus_split;

typedef struct {
    corpus_split split;      // documents of text files
    const char *text_field;  // the jsonl field holding a document's text ("text")
    size_t piece_bytes;      // the longest piece handed out (>= 64)
    size_t max_record_bytes; // the longest jsonl line accepted (a longer one is a bad record)
} corpus_options;

typedef struct {
    const char *text;        // the piece's bytes, valid until the next corpus_next
    size_t len;
    bool first, last;        // the piece opens / closes its document
    bool unsafe_cut;         // cut where no safe point was found (see corpus_safe_cut)
    const char *file;        // the input file and the 1-based line where the piece begins
    uint64_t line;
} corpus_piece;

typedef enum {
    CORPUS_PIECE = 1,        // *p holds the next piece
    CORPUS_END = 0,          // no more input
    CORPUS_BAD = 2,          // a bad document (err: "FILE:LINE: why"): malformed or too long
                             // jsonl record, missing or non-string field, empty document,
                             // invalid UTF-8 in a text file, unreadable or corrupt compressed
                             // file (the rest of that file is skipped). The document in
                             // progress, if a piece of it was handed out, is abandoned;
                             // reading goes on after it
    CORPUS_FAIL = -1,        // reading cannot go on; err says why
} corpus_status;

typedef struct corpus corpus;

// Expands directories; false + message when an input is missing or unreadable. The file list
// (paths only) is all that is kept in memory.
corpus *corpus_open(const char *const *inputs, int n_inputs, const corpus_options *o, char *err,
                    size_t errlen);
corpus_status corpus_next(corpus *c, corpus_piece *p, char *err, size_t errlen);
void corpus_free(corpus *c);

// The most memory a corpus reader holds (its buffers, a jsonl line, the record's parse).
size_t corpus_memory(const corpus_options *o);

int corpus_n_files(const corpus *c);
const char *corpus_file(const corpus *c, int i);
uint64_t corpus_total_bytes(const corpus *c);   // the input files' sizes on disk
// Bytes consumed from disk so far (compressed bytes for compressed files); safe to read from
// another thread (relaxed atomic).
uint64_t corpus_bytes_read(const corpus *c);
uint64_t corpus_text_bytes(const corpus *c);    // text bytes handed out in pieces so far

// Where to cut s[0, n) (n = piece_bytes reached, more text follows) so that encoding the two
// parts apart gives the same tokens as encoding them together, for the bytes tokenizer and for
// byte-level BPE with the GPT-2 and Llama-3 pre-tokenizer regexes: after a "\n" that has an
// ASCII graphic character on both sides, else before a " " that has one on both sides (no
// pre-token spans either point). The last such point in the second half of s; when there is
// none, the last UTF-8 character boundary (*unsafe = true: tokens may differ at the cut).
size_t corpus_safe_cut(const char *s, size_t n, bool *unsafe);
