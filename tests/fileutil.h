// fileutil.h — the file helpers the reader and writer tests share (header-only, static
// functions): copying a fixture, comparing two files, reading a file whole, changing bytes in
// place. Each dies through gdn_die on an I/O error, naming the file (file_read_all returns NULL
// for a file it cannot open).
#pragma once
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../src/core/common.h"

// src copied byte for byte to dst (created or truncated).
static inline void copy_file(const char *src, const char *dst) {
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    if (!a || !b) gdn_die("copy %s -> %s", src, dst);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        if (fwrite(buf, 1, n, b) != n) gdn_die("copy: write");
    fclose(a);
    if (fclose(b) != 0) gdn_die("copy: close");
}

// true when the two files differ in a byte or in length.
static inline bool files_differ(const char *a, const char *b) {
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    bool differ = false;
    int cx, cy;
    do {
        cx = getc(x);
        cy = getc(y);
        differ |= cx != cy;
    } while (!differ && cx != EOF);
    fclose(x);
    fclose(y);
    return differ;
}

static inline off_t file_size(const char *p) {
    struct stat sb;
    if (stat(p, &sb) != 0) gdn_die("stat %s", p);
    return sb.st_size;
}

// The first 64 KiB - 1 bytes of path as a NUL-terminated string ("" when it cannot be opened);
// the caller frees it.
static inline char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return gdn_strdup("");
    char *buf = gdn_malloc(1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

// The whole of path, NUL-terminated (*n: its length in bytes, when n is not NULL); NULL when it
// cannot be opened. The caller frees it.
static inline char *file_read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = gdn_malloc((size_t)sz + 1);
    size_t got = fread(b, 1, (size_t)sz, f);
    fclose(f);
    b[got] = 0;
    if (n) *n = got;
    return b;
}

// Bytes [at, at + n) of path XORed in place with x[0..n) (n <= 64).
static inline void xor_bytes(const char *path, off_t at, const unsigned char *x, size_t n) {
    int fd = open(path, O_RDWR);
    unsigned char b[64];
    if (fd < 0 || n > sizeof b || pread(fd, b, n, at) != (ssize_t)n) gdn_die("xor: read %s", path);
    for (size_t i = 0; i < n; i++) b[i] ^= x[i];
    if (pwrite(fd, b, n, at) != (ssize_t)n || close(fd) != 0) gdn_die("xor: write %s", path);
}
