// gdn_docs.cu — the document plan of the GDN chunk ops (gdn_cuda.h, gdn_docs): each document
// of a row placed to start on a chunk boundary of a padded chunk grid, with a reset flag on the
// chunk where it starts, and per padded chunk the run of the row's tokens it covers (the kernels
// read and write the tokens there: the padded rows are never formed). Row b's tokens keep their
// order; document i of the row starts at the padded position P_i = roundup(P_{i-1} + len_{i-1},
// 64) (P_0 = 0); Tp = max over rows of the end of the row's last document (it is not padded).
#include "gdn_cuda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/cuda_check.h"

namespace {

constexpr int C = GDN_CHUNK;

size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

// the padded length of row b (doc_start already checked)
int gdn_docs_row_len(const int32_t *ds, int T) {
    int pos = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && ds[t] == t) pos = (pos + C - 1) / C * C;
        pos++;
    }
    return pos;
}

// the tables' offsets in the plan's memory: chunk_tok (int32), chunk_len, reset (bytes), each
// (B,NCp)
struct docs_tables {
    size_t tok, len, reset, total;
};
docs_tables gdn_docs_tables(int B, int Tp) {
    const size_t ncp = ((size_t)Tp + C - 1) / C, n = (size_t)B * ncp;
    docs_tables w;
    w.tok = 0;
    w.len = w.tok + align256(n * 4);
    w.reset = w.len + align256(n);
    w.total = w.reset + align256(n);
    return w;
}

}  // namespace

extern "C" int gdn_docs_padded_len(const int32_t *doc_start, int B, int T) {
    if (B < 1 || T < 0) gdn_die("gdn_docs: bad shape B %d T %d", B, T);
    if (T > 0 && !doc_start) gdn_die("gdn_docs: doc_start is NULL");
    if ((size_t)B * T > INT32_MAX)
        gdn_die("gdn_docs: B %d T %d: %zu tokens (the plan's token rows are int32)", B, T,
                (size_t)B * T);
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
    (void)T;  // (the tables are per padded chunk)
    return gdn_docs_tables(B, Tp).total;
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
    const docs_tables w = gdn_docs_tables(B, Tp);
    const size_t need = w.total, ncp = ((size_t)Tp + C - 1) / C;
    if (!mem || bytes < need)
        gdn_die("gdn_docs_init: plan memory %p of %zu bytes, %zu needed\nHINT: size it with "
                "gdn_docs_bytes(B, T, gdn_docs_padded_len(...))", mem, bytes, need);
    if ((uintptr_t)mem % 256) gdn_die("gdn_docs_init: plan memory %p is not 256-byte aligned", mem);
    unsigned char *h = (unsigned char *)gdn_malloc(need);
    memset(h, 0, need);
    int32_t *tok = (int32_t *)(h + w.tok);
    uint8_t *len = h + w.len, *reset = h + w.reset;
    for (int b = 0; b < B; b++) {
        const int32_t *ds = doc_start + (size_t)b * T;
        for (size_t n = 0; n < ncp; n++) tok[(size_t)b * ncp + n] = (int32_t)((size_t)b * T);
        int pos = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && ds[t] == t) {
                pos = (pos + C - 1) / C * C;
                reset[(size_t)b * ncp + pos / C] = 1;
            }
            const size_t ci = (size_t)b * ncp + pos / C;
            if (pos % C == 0) tok[ci] = (int32_t)((size_t)b * T + t);  // a chunk's first token
            len[ci]++;
            pos++;
        }
    }
    CUDA_CHECK(cudaMemcpyAsync(mem, h, need, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    free(h);
    unsigned char *m = (unsigned char *)mem;
    d->chunk_tok = (const int32_t *)(m + w.tok);
    d->chunk_len = m + w.len;
    d->reset = m + w.reset;
}
