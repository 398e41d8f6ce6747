// gdn_docs.cu — the document plan of the GDN chunk ops (gdn_cuda.h, gdn_docs): each document
// of a row moved to start on a chunk boundary of a padded row, with a reset flag on the chunk
// where it starts, and the token-row moves between the two layouts (gather before an op, scatter
// after it). Row b's tokens keep their order; document i of the row starts at the padded
// position P_i = roundup(P_{i-1} + len_{i-1}, 64) (P_0 = 0); Tp = max over rows of the end of
// the row's last document (it is not padded).
#include "gdn_cuda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/cuda_check.h"

namespace {

constexpr int C = GDN_CHUNK;

size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

// dst row (b, t) of Td rows a batch entry <- src row (b, map[b Td + t]) of Ts rows, or zeros
// where the map says -1; units of U (4 or 16 bytes), `units` per row
template <class U>
__global__ void gdn_docs_move_kernel(U *dst, const U *src, const int32_t *map, int B, int Td,
                                     int Ts, int units) {
    const size_t n = (size_t)B * Td * units;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / units, u = i % units;
        const int b = (int)(row / Td);
        const int m = map[row];
        dst[i] = m >= 0 ? src[((size_t)b * Ts + m) * units + u] : U{};
    }
}

void gdn_docs_move(void *dst, const void *src, const int32_t *map, int B, int Td, int Ts,
                   size_t row_bytes, cudaStream_t stream) {
    if (row_bytes % 4) gdn_die("gdn_docs: token rows of %zu bytes (a multiple of 4 expected)", row_bytes);
    const size_t n = (size_t)B * Td * row_bytes;
    if (n == 0) return;
    const bool v16 = row_bytes % 16 == 0 && (uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0;
    const size_t units = row_bytes / (v16 ? 16 : 4), total = (size_t)B * Td * units;
    const int threads = 256;
    size_t blocks = (total + threads - 1) / threads;
    if (blocks > 65536) blocks = 65536;  // grid-stride beyond
    if (v16)
        gdn_docs_move_kernel<int4><<<(unsigned)blocks, threads, 0, stream>>>(
            (int4 *)dst, (const int4 *)src, map, B, Td, Ts, (int)units);
    else
        gdn_docs_move_kernel<int><<<(unsigned)blocks, threads, 0, stream>>>(
            (int *)dst, (const int *)src, map, B, Td, Ts, (int)units);
    CUDA_CHECK_LAUNCH();
}

// the padded length of row b (doc_start already checked)
int gdn_docs_row_len(const int32_t *ds, int T) {
    int pos = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && ds[t] == t) pos = (pos + C - 1) / C * C;
        pos++;
    }
    return pos;
}

}  // namespace

extern "C" int gdn_docs_padded_len(const int32_t *doc_start, int B, int T) {
    if (B < 1 || T < 0) gdn_die("gdn_docs: bad shape B %d T %d", B, T);
    if (T > 0 && !doc_start) gdn_die("gdn_docs: doc_start is NULL");
    int Tp = T;
    for (int b = 0; b < B; b++) {
        const int32_t *ds = doc_start + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            const bool ok = t == 0 ? ds[0] == 0 : ds[t] == t || ds[t] == ds[t - 1];
            if (!ok)
                gdn_die("gdn_docs: doc_start[b %d, t %d] = %d (previous %d)\nHINT: each token holds "
                        "the start of its document: 0 at t = 0, then t (a new document) or the "
                        "previous token's start", b, t, (int)ds[t], t > 0 ? (int)ds[t - 1] : -1);
        }
        const int len = gdn_docs_row_len(ds, T);
        if (len > Tp) Tp = len;
    }
    return Tp;
}

extern "C" size_t gdn_docs_bytes(int B, int T, int Tp) {
    const size_t ncp = ((size_t)Tp + C - 1) / C;
    return align256((size_t)B * Tp * 4) + align256((size_t)B * T * 4) + align256((size_t)B * ncp);
}

extern "C" void gdn_docs_init(gdn_docs *d, const int32_t *doc_start, int B, int T, void *mem,
                              size_t bytes, cudaStream_t stream) {
    if (!d) gdn_die("gdn_docs_init: plan is NULL");
    const int Tp = gdn_docs_padded_len(doc_start, B, T);
    memset(d, 0, sizeof *d);
    d->B = B;
    d->T = T;
    d->Tp = Tp;
    for (size_t i = 0; i < (size_t)B * T && !d->any; i++) d->any = doc_start[i] != 0;
    if (!d->any) return;
    const size_t need = gdn_docs_bytes(B, T, Tp), ncp = ((size_t)Tp + C - 1) / C;
    if (!mem || bytes < need)
        gdn_die("gdn_docs_init: plan memory %p of %zu bytes, %zu needed\nHINT: size it with "
                "gdn_docs_bytes(B, T, gdn_docs_padded_len(...))", mem, bytes, need);
    if ((uintptr_t)mem % 256) gdn_die("gdn_docs_init: plan memory %p is not 256-byte aligned", mem);
    const size_t off_src = align256((size_t)B * Tp * 4), off_rs = off_src + align256((size_t)B * T * 4);
    unsigned char *h = (unsigned char *)gdn_malloc(need);
    memset(h, 0, need);
    int32_t *pad_src = (int32_t *)h, *src_pad = (int32_t *)(h + off_src);
    uint8_t *reset = h + off_rs;
    for (size_t i = 0; i < (size_t)B * Tp; i++) pad_src[i] = -1;
    for (int b = 0; b < B; b++) {
        const int32_t *ds = doc_start + (size_t)b * T;
        int pos = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && ds[t] == t) {
                pos = (pos + C - 1) / C * C;
                reset[(size_t)b * ncp + pos / C] = 1;
            }
            pad_src[(size_t)b * Tp + pos] = t;
            src_pad[(size_t)b * T + t] = pos;
            pos++;
        }
    }
    CUDA_CHECK(cudaMemcpyAsync(mem, h, need, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    free(h);
    unsigned char *m = (unsigned char *)mem;
    d->pad_src = (const int32_t *)m;
    d->src_pad = (const int32_t *)(m + off_src);
    d->reset = m + off_rs;
}

extern "C" void gdn_docs_gather(const gdn_docs *d, void *dst, const void *src, size_t row_bytes,
                                cudaStream_t stream) {
    gdn_docs_move(dst, src, d->pad_src, d->B, d->Tp, d->T, row_bytes, stream);
}

extern "C" void gdn_docs_scatter(const gdn_docs *d, void *dst, const void *src, size_t row_bytes,
                                 cudaStream_t stream) {
    gdn_docs_move(dst, src, d->src_pad, d->B, d->T, d->Tp, row_bytes, stream);
}
