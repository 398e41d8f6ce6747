// gdn_chunk_rows.cuh — the token rows of one chunk, for every kernel of the GDN chunk forward
// (src/fwd/gdn_chunk.cu) and backward (src/bwd/gdn_chunk_*.cuh) that loads or stores a token
// tensor (q, k, v, g, beta, o; dO, dq, dk, dv, dg, dbeta). Chunk n of row b covers `nvalid`
// consecutive token rows from `tok` of the (B, ., H, D) tensors; the chunk's rows r >= nvalid
// load as zeros and are never stored. Without a document plan (p.chunk_tok NULL) that is rows
// b T + 64 n .., min(64, T - 64 n) of them, the arithmetic the kernels always had; with one, the
// plan's table (gdn_cuda.h, gdn_docs: chunk_tok, chunk_len), p.T being the padded grid's length.
// Everything chunk-indexed (chunk-start states, workspaces, keep_g, keep_dt, reset flags) stays
// on the grid of NC = ceil(p.T/64) chunks.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "gdn_cuda.h"

struct gdn_rows {
    size_t tok;  // token row (b, t) as b T + t of the tensors' own rows
    int nvalid;  // rows of the chunk that are tokens (0..64)
};

// n < ceil(p.T/64)
__device__ __forceinline__ gdn_rows gdn_chunk_rows(const gdn_fwd_params &p, int b, int n) {
    constexpr int C = GDN_CHUNK;
    if (p.chunk_tok) {
        const size_t i = (size_t)b * ((p.T + C - 1) / C) + n;
        return {(size_t)p.chunk_tok[i], (int)p.chunk_len[i]};
    }
    const int t0 = n * C;
    return {(size_t)b * p.T + t0, min(C, p.T - t0)};
}
