// gdn_test_io.h — what the GDN kernel tests (test_gdn_fwd, test_gdn_bwd, test_gdn_docs) share:
// inputs rounded to the kernel's dtype and moved to the device, outputs back as doubles (or as
// bytes, for bitwise comparisons), row L2 normalisation, per-head relative errors.
#pragma once
#include <math.h>
#include "gputest.h"
#include "../../src/fwd/gdn_cuda.h"

static size_t count_nonfinite(const double *x, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += !isfinite(x[i]);
    return c;
}

// device buffer of n elements (n == 0 allowed) in dtype dt from doubles; x is rounded to dt in
// place, so the CPU reference sees exactly the kernel's inputs
static void *upload(double *x, size_t n, gdn_dtype dt) {
    void *d;
    if (dt == GDN_DTYPE_BF16) {
        uint16_t *h = (uint16_t *)gdn_malloc(n * 2 + 2);
        for (size_t i = 0; i < n; i++) {
            h[i] = f2bf((float)x[i]);
            x[i] = bf2d(h[i]);
        }
        CUDA_CHECK(cudaMalloc(&d, n * 2 + 16));
        if (n) CUDA_CHECK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
        free(h);
    } else {
        float *h = (float *)gdn_malloc(n * 4 + 4);
        for (size_t i = 0; i < n; i++) {
            h[i] = (float)x[i];
            x[i] = h[i];
        }
        CUDA_CHECK(cudaMalloc(&d, n * 4 + 16));
        if (n) CUDA_CHECK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
        free(h);
    }
    return d;
}
static void download(double *x, const void *d, size_t n, gdn_dtype dt) {
    if (!n) return;
    if (dt == GDN_DTYPE_BF16) {
        uint16_t *h = (uint16_t *)gdn_malloc(n * 2);
        CUDA_CHECK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) x[i] = bf2d(h[i]);
        free(h);
    } else {
        float *h = (float *)gdn_malloc(n * 4);
        CUDA_CHECK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) x[i] = h[i];
        free(h);
    }
}

static void l2norm_rows(double *x, size_t rows, int D) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < D; i++) s += x[r * D + i] * x[r * D + i];
        s = 1.0 / sqrt(s + 1e-12);
        for (int i = 0; i < D; i++) x[r * D + i] *= s;
    }
}

// the first `bytes` bytes of device buffer d, on the host (free it)
static inline unsigned char *snapshot(const void *d, size_t bytes) {
    unsigned char *h = (unsigned char *)gdn_malloc(bytes + 1);
    if (bytes) CUDA_CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}

// worst relative L2 over the (b, h) slices of a (B,T,H) array
static inline double rel_per_head(const double *got, const double *want, int B, int T, int H) {
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            double num = 0, den = 0;
            for (int t = 0; t < T; t++) {
                const size_t n = ((size_t)b * T + t) * H + h;
                num += (got[n] - want[n]) * (got[n] - want[n]);
                den += want[n] * want[n];
            }
            const double e = den > 0 ? sqrt(num / den) : (num == 0 ? 0 : INFINITY);
            if (!(e <= worst)) worst = e;  // NaN propagates
        }
    return worst;
}
