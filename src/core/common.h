// common.h — checked calls, fatal errors and small helpers shared by every file.
// Every library call that can fail goes through one of the CHECK_* macros below, which print
// the failing statement, the function, file and line, the library's own message, and exit(1).
#pragma once
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

// Print "error: <msg>" (and a HINT line when given) and exit(1). Never returns.
__attribute__((noreturn, format(printf, 1, 2))) void gdn_die(const char *fmt, ...);
// Like gdn_die but adds the call site; used by the CHECK macros.
__attribute__((noreturn)) void gdn_die_at(const char *what, const char *stmt, const char *msg,
                                          const char *func, const char *file, int line);

// libc / POSIX: a call that returns < 0 (or NULL through CHECK_PTR) on failure, errno set.
#define CHECK_SYS(stmt)                                                                     \
    do {                                                                                    \
        if ((stmt) < 0) gdn_die_at("system call", #stmt, strerror(errno), __func__,        \
                                   __FILE__, __LINE__);                                     \
    } while (0)
#define CHECK_PTR(stmt)                                                                     \
    do {                                                                                    \
        if ((stmt) == NULL) gdn_die_at("system call", #stmt, strerror(errno), __func__,    \
                                       __FILE__, __LINE__);                                 \
    } while (0)

// HDF5: every H5* call returns a negative value (hid_t or herr_t) on failure.
#define CHECK_HDF5(stmt)                                                                    \
    do {                                                                                    \
        if ((long long)(stmt) < 0) gdn_die_at("HDF5", #stmt, "call failed (HDF5 error stack above)", \
                                              __func__, __FILE__, __LINE__);                \
    } while (0)

// MPI: MPI_SUCCESS is 0 in every implementation; the message comes from MPI_Error_string
// in dist code, where mpi.h is included (see src/dist/).
#define CHECK_MPI(stmt)                                                                     \
    do {                                                                                    \
        int mpi_rc_ = (stmt);                                                               \
        if (mpi_rc_ != 0) gdn_die_at("MPI", #stmt, "call failed", __func__, __FILE__, __LINE__); \
    } while (0)

// CUDA, cuBLAS(Lt) and NCCL checks live in src/core/cuda_check.h (needs their headers).

void *gdn_malloc(size_t n);             // exits with a message on failure; zero-filled
void *gdn_realloc(void *p, size_t n);
char *gdn_strdup(const char *s);
double gdn_now(void);                   // monotonic seconds

// Checked size arithmetic: *out = a * b (a + b), false when the result does not fit in size_t.
static inline bool gdn_mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool gdn_add_ok(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

#define GDN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GDN_MAX(a, b) ((a) > (b) ? (a) : (b))
#define GDN_CDIV(a, b) (((a) + (b) - 1) / (b))

#ifdef __cplusplus
}
#endif
