// docs.c — documents packed into rows (model.doc_reset, fwd_cpu.h "documents"): the check of a
// doc_start array, and the gated delta rule run document by document. A document [s, e) of row
// b is a contiguous (1, e - s) view of every (B, T, ...) tensor (token-major layout), so the
// float64 GDN runs each document as a batch of one sequence of its own: exact by construction.
#include <stdio.h>
#include "fwd_cpu.h"

bool doc_starts_check(const int32_t *doc_start, int B, int T, char *err, size_t errlen) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int32_t s = doc_start[(size_t)b * T + t];
            const int32_t prev = t ? doc_start[(size_t)b * T + t - 1] : 0;
            if (t == 0 ? s != 0 : s != prev && s != t) {
                snprintf(err, errlen,
                         "doc_start[row %d, token %d] = %d: must be %s (the start of the document "
                         "of the token before, or this token when a document starts here)",
                         b, t, (int)s, t == 0 ? "0 at a row's first token" : "that or the token");
                return false;
            }
        }
    return true;
}

void gdn_docs_run_cpu(const gdn_cpu_params *p, void (*op)(const gdn_cpu_params *)) {
    const int T = p->T, NH = p->H;
    const size_t SS = (size_t)p->Dk * p->Dv, nc = (size_t)(p->chunk > 0 ? (T + p->chunk - 1) / p->chunk : 0);
    for (int b = 0; b < p->B; b++)
        for (int s = 0, e; s < T; s = e) {
            e = doc_end(p->doc_start, T, b, s);
            const size_t n0 = ((size_t)b * T + s) * NH;  // row of (b, s, head 0)
            const bool first = s == 0, last = e == T;
            gdn_cpu_params v = *p;
            v.B = 1;
            v.T = e - s;
            v.doc_start = NULL;
#define VIEW(f, width) v.f = p->f ? p->f + n0 * (width) : NULL
            VIEW(q, p->Dk);
            VIEW(k, p->Dk);
            VIEW(v, p->Dv);
            VIEW(g, 1);
            VIEW(beta, 1);
            VIEW(o, p->Dv);
            VIEW(dO, p->Dv);
            VIEW(dq, p->Dk);
            VIEW(dk, p->Dk);
            VIEW(dv, p->Dv);
            VIEW(dg, 1);
            VIEW(dbeta, 1);
#undef VIEW
            const size_t sh = (size_t)b * NH * SS;  // row b's (H, Dk, Dv) states
            v.h0 = first && p->h0 ? p->h0 + sh : NULL;
            v.dh0 = first && p->dh0 ? p->dh0 + sh : NULL;
            v.ht = last && p->ht ? p->ht + sh : NULL;
            v.dht = last && p->dht ? p->dht + sh : NULL;
            // chunk-start states only where the row is one document (the row's own chunks)
            v.hs = first && last && p->hs ? p->hs + sh * nc : NULL;
            op(&v);
        }
}
