// testutil.h — what every CPU test shares: random fills, relative errors, and the
// central finite-difference gradient check with its table (header-only, static functions).
//
// Gradient check contract: the test defines a scalar loss L(ctx) = sum(out * R) for fixed
// random R (so every output element matters), computes the analytic gradient of every input
// and parameter once, then gc_check perturbs elements of one buffer (all of them, or a random
// sample of at most max_samples) by +-h and compares (L+ - L-)/2h with the analytic value.
// Pass: norm-wise relative error <= tol AND every element |a - fd| <= tol * max(1, |a|).
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/core/common.h"
#include "../src/core/rng.h"

#define GC_SKIP_RC 77  // ctest SKIP_RETURN_CODE

static int gc_failures = 0;
static int gc_checks = 0;

static inline void fill_normal(double *x, size_t n, rng_t *r, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(r);
}
static inline void fill_uniform(double *x, size_t n, rng_t *r, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(r);
}
static inline double *dalloc(size_t n) { return (double *)gdn_malloc(n * sizeof(double)); }
static inline double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
// ||a - b|| / ||b||  (0 when both are 0)
static inline double rel_l2(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

typedef double (*gc_loss_fn)(void *ctx);

static inline void gc_header(const char *title) {
    printf("\n== %s\n%-28s %-10s %8s %12s %12s  %s\n", title, "op", "tensor", "checked",
           "rel_err", "worst_elem", "result");
}

// Check analytic gradient `grad` of buffer x (n elements) against central differences of f.
static inline int gc_check(const char *op, const char *name, double *x, size_t n,
                           const double *grad, gc_loss_fn f, void *ctx, size_t max_samples,
                           double tol, rng_t *r) {
    size_t m = (max_samples == 0 || max_samples >= n) ? n : max_samples;
    double num = 0, den = 0, worst = 0;
    for (size_t s = 0; s < m; s++) {
        size_t i = (m == n) ? s : (size_t)rng_below(r, n);
        double x0 = x[i];
        double h = 1e-6 * fmax(1.0, fabs(x0));
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        double fd = (lp - lm) / (2 * h);
        double d = grad[i] - fd;
        num += d * d;
        den += fd * fd;
        double e = fabs(d) / fmax(1.0, fabs(grad[i]));
        if (e > worst) worst = e;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    int ok = rel <= tol && worst <= tol && isfinite(rel);
    printf("%-28s %-10s %8zu %12.3e %12.3e  %s\n", op, name, m, rel, worst, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
    return ok;
}

// Compare two arrays at a relative L2 tolerance, print one line, count failures.
static inline int check_close(const char *what, const double *got, const double *want, size_t n,
                              double tol) {
    double e = rel_l2(got, want, n);
    int ok = e <= tol && isfinite(e);
    printf("  %-60s rel %.3e (tol %.0e)  %s\n", what, e, tol, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
    return ok;
}

// One pass / FAIL row of a named check with a short detail column, counted.
static inline int check_row(int ok, const char *what, const char *detail) {
    printf("    %-58s %-30s %s\n", what, detail, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
    return ok;
}

static inline int gc_finish(const char *test) {
    printf("\n%s: %d checks, %d failed\n", test, gc_checks, gc_failures);
    return gc_failures ? 1 : 0;
}
