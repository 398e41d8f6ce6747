// common.c — fatal errors, checked allocation, the clock.
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

// Ends the process after a fatal error: every stdio stream flushed (logs, metrics.jsonl), then
// _exit, not exit. Another thread (the sampler's prefetch) may be inside HDF5, and the library's
// exit handler would tear HDF5 down under it (seen: a crash instead of the message). Files
// being written at that point are temporary ones that only a rename would have published.
__attribute__((noreturn)) static void die_exit(void) {
    fflush(NULL);
    _exit(1);
}

void gdn_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    die_exit();
}

void gdn_die_at(const char *what, const char *stmt, const char *msg, const char *func,
                const char *file, int line) {
    fflush(stdout);
    fprintf(stderr, "error: %s call failed: %s\n  statement: %s\n  at %s (%s:%d)\n", what,
            msg ? msg : "", stmt, func, file, line);
    die_exit();
}

void *gdn_malloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) gdn_die("out of memory allocating %zu bytes", n);
    return p;
}

void *gdn_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) gdn_die("out of memory reallocating %zu bytes", n);
    return q;
}

char *gdn_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = gdn_malloc(n);
    memcpy(d, s, n);
    return d;
}

double gdn_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
