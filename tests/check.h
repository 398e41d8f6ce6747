// check.h — the printf-style pass / FAIL row of the data, tokenizer and prepare tests: the
// description formatted from fmt, padded to CHECK_WIDTH columns (a test may define its own width
// before including this header; 86 otherwise), then pass or FAIL; counted in testutil.h's
// gc_checks and gc_failures, reported by gc_finish.
#pragma once
#include <stdarg.h>
#include <stdbool.h>
#include "testutil.h"

#ifndef CHECK_WIDTH
#define CHECK_WIDTH 86
#endif

static inline void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void check(bool ok, const char *fmt, ...) {
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("  %-*s %s\n", CHECK_WIDTH, line, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}
