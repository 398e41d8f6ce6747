// op_buffers.h — what the op tests (test_cuda_ops, test_doc_ops) share: host vectors of doubles,
// inputs drawn and rounded once to the storage dtype (so the float64 oracle and the GPU see the
// same values), and device tensors (fp32 or bf16) moved to and from those vectors; every
// allocation is kept in g_allocs for the test to free at the end.
#pragma once
#include <algorithm>
#include <vector>
#include "gputest.h"
#include "../../src/cuda/ops.h"
#include "../../src/fwd/cpu_threads.h"

typedef std::vector<double> vec;

static size_t esz(cuda_dtype dt) { return dt == CUDA_BF16 ? 2 : 4; }
static const char *dtn(cuda_dtype dt) { return dt == CUDA_BF16 ? "bf16" : "fp32"; }
static double tol_of(cuda_dtype dt) { return dt == CUDA_BF16 ? 1e-2 : 1e-5; }
static double round_to(double x, cuda_dtype dt) {
    return dt == CUDA_BF16 ? (double)__bfloat162float(__float2bfloat16((float)x)) : (double)(float)x;
}
// Host loops over the elements of large arrays (random fills, conversions) run on the OpenMP
// threads of the CPU ops (cpu_threads.h; one thread without OpenMP): each element is computed
// alone, so the values are the same for any thread count.
#define HOST_PAR_MIN ((size_t)1 << 16)
// normal(offset, scale) rounded to dt, never exactly 0. Element i takes words 4i..4i+3 after
// r's position (rng_normal draws two uniforms of two words each): fixed chunks of elements,
// each from a copy of r seeked to its start (rng_seek), fill x with the bits of one sequential
// pass, and r ends where that pass would leave it.
static vec randn(rng_t *r, size_t n, double scale, cuda_dtype dt, double offset = 0.0) {
    vec x(n);
    const size_t chunk = 8192, nchunks = (n + chunk - 1) / chunk;
    const uint64_t w0 = rng_tell(r);
    GDN_OMP(parallel for schedule(static) if (n >= HOST_PAR_MIN))
    for (size_t c = 0; c < nchunks; c++) {
        rng_t rc = *r;
        rng_seek(&rc, w0 + 4 * c * chunk);
        for (size_t i = c * chunk; i < std::min(n, (c + 1) * chunk); i++) {
            double v = round_to(offset + scale * rng_normal(&rc), dt);
            x[i] = v != 0.0 ? v : round_to(0.5 * scale, dt);
        }
    }
    rng_seek(r, w0 + 4 * n);
    return x;
}

// ---- device tensors ---------------------------------------------------------------------------
struct dten {
    void *d;
    size_t n;
    cuda_dtype dt;
};
static std::vector<void *> g_allocs;
static dten dempty(size_t n, cuda_dtype dt, size_t offset_elems = 0) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, (n + 16) * esz(dt)));
    g_allocs.push_back(p);
    return {(char *)p + offset_elems * esz(dt), n, dt};
}
static void upload(const dten &t, const vec &x) {
    if (t.dt == CUDA_BF16) {
        std::vector<__nv_bfloat16> h(t.n);
        GDN_OMP(parallel for schedule(static) if (t.n >= HOST_PAR_MIN))
        for (size_t i = 0; i < t.n; i++) h[i] = __float2bfloat16((float)x[i]);
        CUDA_CHECK(cudaMemcpy(t.d, h.data(), t.n * 2, cudaMemcpyHostToDevice));
    } else {
        std::vector<float> h(t.n);
        GDN_OMP(parallel for schedule(static) if (t.n >= HOST_PAR_MIN))
        for (size_t i = 0; i < t.n; i++) h[i] = (float)x[i];
        CUDA_CHECK(cudaMemcpy(t.d, h.data(), t.n * 4, cudaMemcpyHostToDevice));
    }
}
static dten dput(const vec &x, cuda_dtype dt, size_t offset_elems = 0) {
    dten t = dempty(x.size(), dt, offset_elems);
    upload(t, x);
    return t;
}
static vec download(const dten &t) {
    vec x(t.n);
    if (t.dt == CUDA_BF16) {
        std::vector<__nv_bfloat16> h(t.n);
        CUDA_CHECK(cudaMemcpy(h.data(), t.d, t.n * 2, cudaMemcpyDeviceToHost));
        GDN_OMP(parallel for schedule(static) if (t.n >= HOST_PAR_MIN))
        for (size_t i = 0; i < t.n; i++) x[i] = __bfloat162float(h[i]);
    } else {
        std::vector<float> h(t.n);
        CUDA_CHECK(cudaMemcpy(h.data(), t.d, t.n * 4, cudaMemcpyDeviceToHost));
        GDN_OMP(parallel for schedule(static) if (t.n >= HOST_PAR_MIN))
        for (size_t i = 0; i < t.n; i++) x[i] = h[i];
    }
    return x;
}
static std::vector<unsigned char> raw(const dten &t) {
    std::vector<unsigned char> b(t.n * esz(t.dt));
    CUDA_CHECK(cudaMemcpy(b.data(), t.d, b.size(), cudaMemcpyDeviceToHost));
    return b;
}
static void poison(const dten &t) { CUDA_CHECK(cudaMemset(t.d, 0xff, t.n * esz(t.dt))); }  // NaN
static int32_t *dints(const std::vector<int32_t> &x) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, GDN_MAX(x.size(), (size_t)1) * 4));
    g_allocs.push_back(p);
    CUDA_CHECK(cudaMemcpy(p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    return (int32_t *)p;
}
