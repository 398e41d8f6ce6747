// test_gdn_docs.cu — document starts in the CUDA GDN chunk forward and backward (gdn_cuda.h,
// gdn_docs; issue 31): against the float64 token-level ops (gdn_token_fwd_cpu, gdn_token_bwd_cpu)
// run on each document alone, a document [s, e) of row b being the (1, e - s) view of the
// (B,T,H,D) tensors with zero state (h0 only for s = 0, dht only for e = T), and bitwise: a plan
// whose rows hold one document each gives exactly the bits of the op without one, and row 2 (one
// document, followed by chunks of padding only on the plan's grid) of the plan with documents
// gives exactly the bits of that row without a plan (forward and backward: the chunks read
// through the plan's table against the plain rows). The plan's tables are checked on the host
// (every token in exactly one chunk, in order; a chunk within one document; resets where
// documents start; the expected chunks of padding only and the document [65, 129) of row 0 that
// fills its chunk exactly). The outputs are NaN-poisoned before each run: a token row a chunk
// fails to store shows as non-finite.
// Rows (T = 300): row 0 cut at 1, 2, 63, 64, 65, 129, 192 and 255 (documents of one token;
// boundaries at chunk offsets 0, 1 and 63, and at tokens 63, 64, 65), row 1 at 65, 130 and 193,
// row 2 one document (padded to the batch's length behind it). Heads: gates mixed (-g from 1e-4
// to 20 in one head), weak (-g <= 0.02: near 0) and strong (-g in [5, 20]: near -20). Head dims
// (64, 64), (64, 128), (128, 128), (256, 256); bf16 (fused and prep-path forwards) and fp32.
// Backward: the chunk-start states recomputed, saved by the forward (fwd.h_states) and, bf16,
// replayed from what the forward kept (keep_g, keep_dt): each against the reference, and the
// three bitwise equal, and equal to the recomputing path in segments of 2 chunks (seg_chunks);
// bf16 Dk 128 also with the mma.sync final kernel (final_mma_sync).
// Pass: relative L2 <= 5e-3 (bf16) / 1e-4 (fp32) for o and ht; <= 1e-2 / 1e-4 for dq, dk, dv,
// dg, dbeta, dh0 and per (b, h) for dg and dbeta; nothing non-finite (outputs NaN-poisoned before
// each run). Exit 77 without a GPU. Usage: test_gdn_docs [--seed N]
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>
#include <cuda_runtime.h>

#include "gdn_test_io.h"
#include "../../src/bwd/bwd_cpu.h"
#include "../../src/bwd/gdn_bwd_cuda.h"
#include "../../src/fwd/fwd_cpu.h"
#include "../../src/fwd/gdn_cuda.h"

enum { B = 3, T = 300, H = 3 };
static int n_fail = 0, n_cases = 0;

// doc_start (B,T) of the rows above
static void make_doc_starts(int32_t *ds) {
    const int cuts0[] = {1, 2, 63, 64, 65, 129, 192, 255}, cuts1[] = {65, 130, 193};
    const int *cuts[B] = {cuts0, cuts1, NULL};
    const int ncut[B] = {8, 3, 0};
    for (int b = 0; b < B; b++) {
        int s = 0, c = 0;
        for (int t = 0; t < T; t++) {
            if (c < ncut[b] && cuts[b][c] == t) {
                s = t;
                c++;
            }
            ds[b * T + t] = s;
        }
    }
}

// The plan's tables (gdn_docs: chunk_tok, chunk_len, reset) against doc_start: each row's chunks,
// in order, cover its tokens 0..T-1 once, in runs of at most 64 consecutive tokens of one
// document; a chunk that does not start a document follows a full one; a reset exactly where a
// document after token 0 starts; chunks of padding only (len 0, no reset) only after the row's
// tokens. Then the cases the rows were cut for: row 0's document [65, 129) fills chunk 5 exactly
// and the next one starts at chunk 6 with no padding; row 2 (one document) ends in chunk 4 and
// chunks 5.. are padding only (Tp > 320).
static bool check_plan(const gdn_docs *d, const int32_t *ds) {
    const int C = GDN_CHUNK, ncp = (d->Tp + C - 1) / C;
    const size_t n = (size_t)d->B * ncp;
    int32_t *tok = (int32_t *)gdn_malloc(n * 4);
    uint8_t *len = (uint8_t *)gdn_malloc(n), *rst = (uint8_t *)gdn_malloc(n);
    CUDA_CHECK(cudaMemcpy(tok, d->chunk_tok, n * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(len, d->chunk_len, n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(rst, d->reset, n, cudaMemcpyDeviceToHost));
    bool ok = d->B == B && d->T == T;
    for (int b = 0; b < B && ok; b++) {
        const int32_t *row = ds + (size_t)b * T;
        int next = 0;  // the next token the chunks must cover
        for (int c = 0; c < ncp && ok; c++) {
            const size_t i = (size_t)b * ncp + c;
            const int l = len[i], t = tok[i] - b * T;
            if (l == 0) {  // padding only: after the row's tokens, a valid row to point at
                ok = next == T && rst[i] == 0 && t == 0;
                continue;
            }
            ok = l <= C && t == next && t + l <= T;
            for (int u = t + 1; ok && u < t + l; u++) ok = row[u] == row[t];  // one document
            const bool starts = row[t] == t;  // a document starts at this chunk's row 0
            ok = ok && (rst[i] != 0) == (starts && t > 0);
            if (ok && c > 0 && !starts) ok = len[i - 1] == C;
            next = t + l;
        }
        ok = ok && next == T;
    }
    if (ok) {
        ok = ncp >= 9 && tok[5] == 65 && len[5] == 64 && rst[5] && tok[6] == 129 && rst[6] &&
             len[2 * ncp + 4] == T - 4 * C && len[2 * ncp + 5] == 0;
    }
    free(tok);
    free(len);
    free(rst);
    return ok;
}

typedef struct {
    int Dk, Dv;
    gdn_dtype dt;
} tcase;

// inputs (doubles, rounded to the device dtype by upload) and their device copies
typedef struct {
    double *q, *k, *v, *g, *beta, *h0, *dO, *dht;
    void *dq_, *dk_, *dv_, *ddO;
    float *dg_, *dbeta_, *dh0_, *ddht;
} inputs;

static void *dev_out(size_t bytes) {
    void *d;
    CUDA_CHECK(cudaMalloc(&d, bytes + 16));
    CUDA_CHECK(cudaMemset(d, 0xff, bytes + 16));  // NaN in bf16 and fp32
    return d;
}
// the reference on each document alone: forward (o, ht) when dq is NULL, else the backward;
// one job per document, run by a pool of threads
typedef struct {
    const tcase *c;
    const inputs *in;
    double *o, *ht, *dq, *dk, *dv, *dg, *db, *dh0;
    int ndoc, next;
    int doc[B * T][3];  // b, s, e
    pthread_mutex_t mu;
} ref_pool;

static void ref_doc(const ref_pool *P, int b, int s, int e) {
    const int Dk = P->c->Dk, Dv = P->c->Dv;
    const inputs *in = P->in;
    const size_t SS = (size_t)H * Dk * Dv, t0 = (size_t)b * T + s;
    gdn_cpu_params r;
    memset(&r, 0, sizeof r);
    r.B = 1; r.T = e - s; r.H = H; r.Dk = Dk; r.Dv = Dv; r.chunk = GDN_CHUNK;
    r.mode.gate = true; r.mode.delta = true;
    r.q = in->q + t0 * H * Dk; r.k = in->k + t0 * H * Dk; r.v = in->v + t0 * H * Dv;
    r.g = in->g + t0 * H; r.beta = in->beta + t0 * H;
    r.h0 = s == 0 ? in->h0 + b * SS : NULL;
    if (!P->dq) {
        r.o = P->o + t0 * H * Dv;
        r.ht = e == T ? P->ht + b * SS : NULL;
        gdn_token_fwd_cpu(&r);
    } else {
        r.dO = in->dO + t0 * H * Dv;
        r.dht = e == T ? in->dht + b * SS : NULL;
        r.dq = P->dq + t0 * H * Dk; r.dk = P->dk + t0 * H * Dk; r.dv = P->dv + t0 * H * Dv;
        r.dg = P->dg + t0 * H; r.dbeta = P->db + t0 * H;
        r.dh0 = s == 0 ? P->dh0 + b * SS : NULL;
        gdn_token_bwd_cpu(&r);
    }
}
static void *ref_worker(void *arg) {
    ref_pool *P = (ref_pool *)arg;
    for (;;) {
        pthread_mutex_lock(&P->mu);
        const int j = P->next++;
        pthread_mutex_unlock(&P->mu);
        if (j >= P->ndoc) return NULL;
        ref_doc(P, P->doc[j][0], P->doc[j][1], P->doc[j][2]);
    }
}
static void reference(const tcase *c, const int32_t *ds, const inputs *in, double *o, double *ht,
                      double *dq, double *dk, double *dv, double *dg, double *db, double *dh0) {
    static ref_pool P;  // (large: the document table)
    P.c = c; P.in = in;
    P.o = o; P.ht = ht; P.dq = dq; P.dk = dk; P.dv = dv; P.dg = dg; P.db = db; P.dh0 = dh0;
    P.ndoc = 0;
    P.next = 0;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T;) {
            int e = s + 1;
            while (e < T && ds[b * T + e] == s) e++;
            P.doc[P.ndoc][0] = b;
            P.doc[P.ndoc][1] = s;
            P.doc[P.ndoc][2] = e;
            P.ndoc++;
            s = e;
        }
    if (pthread_mutex_init(&P.mu, NULL) != 0) gdn_die("pthread_mutex_init failed");
    long nth = sysconf(_SC_NPROCESSORS_ONLN);
    if (nth < 1) nth = 1;
    if (nth > P.ndoc) nth = P.ndoc;
    if (nth > 32) nth = 32;
    pthread_t th[32];
    for (long i = 0; i < nth; i++)
        if (pthread_create(&th[i], NULL, ref_worker, &P) != 0) gdn_die("pthread_create failed");
    for (long i = 0; i < nth; i++)
        if (pthread_join(th[i], NULL) != 0) gdn_die("pthread_join failed");
    pthread_mutex_destroy(&P.mu);
}

static void report(const char *what, const double *errs, const char **names, int n, double tol,
                   bool extra_ok, const char *extra) {
    bool ok = extra_ok;
    printf("  %-34s", what);
    for (int i = 0; i < n; i++) {
        printf(" %s %.1e", names[i], errs[i]);
        ok &= errs[i] <= tol;  // false for NaN
    }
    printf("%s  %s\n", extra, ok ? "pass" : "FAIL");
    fflush(stdout);
    n_cases++;
    n_fail += !ok;
}

static void run_case(const tcase *c, uint64_t seed, const int32_t *ds, const gdn_docs *plan,
                     const gdn_docs *plan_flat) {
    const int Dk = c->Dk, Dv = c->Dv;
    const gdn_dtype dt = c->dt;
    const bool bf = dt == GDN_DTYPE_BF16;
    const size_t N = (size_t)B * T * H, nk = N * Dk, nv = N * Dv, ns = (size_t)B * H * Dk * Dv;
    const size_t es = bf ? 2 : 4, bq = nk * es, bv = nv * es, bg = N * 4, bs = ns * 4;
    printf("\n== %s dk %d dv %d\n", bf ? "bf16" : "fp32", Dk, Dv);
    rng_t r;
    rng_init(&r, seed, (uint64_t)(Dk * 1000 + Dv * 2 + bf));
    inputs in;
    in.q = dalloc(nk); in.k = dalloc(nk); in.v = dalloc(nv); in.dO = dalloc(nv);
    in.g = dalloc(N); in.beta = dalloc(N); in.h0 = dalloc(ns); in.dht = dalloc(ns);
    fill_normal(in.q, nk, &r, 1.0);
    fill_normal(in.k, nk, &r, 1.0);
    l2norm_rows(in.q, N, Dk);
    l2norm_rows(in.k, N, Dk);
    fill_normal(in.v, nv, &r, 1.0);
    fill_normal(in.dO, nv, &r, 1.0);
    for (size_t i = 0; i < N; i++) {
        const int regime = (int)(i % H);  // head h: mixed, weak (near 0), strong (near -20)
        const double u = rng_uniform(&r);
        in.g[i] = regime == 0   ? -exp(log(1e-4) + (log(20.0) - log(1e-4)) * u)
                  : regime == 1 ? -0.02 * u
                                : -(5.0 + 15.0 * u);
        in.beta[i] = rng_uniform(&r);
    }
    fill_normal(in.h0, ns, &r, 0.5);
    fill_normal(in.dht, ns, &r, 1.0);
    void *d_q = upload(in.q, nk, dt), *d_k = upload(in.k, nk, dt), *d_v = upload(in.v, nv, dt);
    void *d_dO = upload(in.dO, nv, dt);
    float *d_g = (float *)upload(in.g, N, GDN_DTYPE_FP32);
    float *d_beta = (float *)upload(in.beta, N, GDN_DTYPE_FP32);
    float *d_h0 = (float *)upload(in.h0, ns, GDN_DTYPE_FP32);
    float *d_dht = (float *)upload(in.dht, ns, GDN_DTYPE_FP32);

    // ---- the references -------------------------------------------------------------------
    double *ro = dalloc(nv), *rht = dalloc(ns);
    double *rq = dalloc(nk), *rk = dalloc(nk), *rv = dalloc(nv), *rg = dalloc(N), *rb = dalloc(N);
    double *rh = dalloc(ns);
    reference(c, ds, &in, ro, rht, NULL, NULL, NULL, NULL, NULL, NULL);
    reference(c, ds, &in, NULL, NULL, rq, rk, rv, rg, rb, rh);

    // ---- forward ---------------------------------------------------------------------------
    gdn_fwd_params f;
    memset(&f, 0, sizeof f);
    f.B = B; f.T = T; f.H = H; f.Dk = Dk; f.Dv = Dv;
    f.mode.gate = true; f.mode.delta = true;
    f.dtype = dt;
    f.q = d_q; f.k = d_k; f.v = d_v; f.g = d_g; f.beta = d_beta; f.h0 = d_h0;
    f.docs = plan;
    const size_t bhs = gdn_chunk_fwd_h_states_bytes(&f), bws = gdn_chunk_fwd_workspace_bytes(&f);
    size_t bkg = 0, bkd = 0;
    gdn_chunk_fwd_keep_bytes(&f, &bkg, &bkd);
    float *hs = (float *)dev_out(bhs), *kg = bkg ? (float *)dev_out(bkg) : NULL;
    void *kd = bkd ? dev_out(bkd) : NULL, *fws = bws ? dev_out(bws) : NULL;
    void *o = dev_out(bv);
    float *ht = (float *)dev_out(bs);
    double *go = dalloc(nv), *ght = dalloc(ns);
    const double ftol = bf ? 5e-3 : 1e-4;
    const char *fnames[2] = {"o", "ht"};
    // bf16: fused (no workspace), then the prep path keeping G and Δ~ (for the replay); fp32
    // runs fused only. The last run also saves the chunk-start states.
    for (int path = 0; path < (bf ? 2 : 1); path++) {
        gdn_fwd_params fp = f;
        fp.o = o; fp.ht = ht;
        fp.workspace = path ? fws : NULL;
        fp.keep_g = path ? kg : NULL;
        fp.keep_dt = path ? kd : NULL;
        fp.h_states = path == (bf ? 1 : 0) ? hs : NULL;
        CUDA_CHECK(cudaMemset(o, 0xff, bv));
        CUDA_CHECK(cudaMemset(ht, 0xff, bs));
        gdn_chunk_fwd(&fp);
        CUDA_CHECK(cudaDeviceSynchronize());
        download(go, o, nv, dt);
        download(ght, ht, ns, GDN_DTYPE_FP32);
        const double e[2] = {rel_l2(go, ro, nv), rel_l2(ght, rht, ns)};
        const bool fin = count_nonfinite(go, nv) + count_nonfinite(ght, ns) == 0;
        report(path ? "fwd docs, prep path (keep G, Δ~)" : "fwd docs, fused", e, fnames, 2, ftol,
               fin, fin ? "" : "  NONFINITE");
    }
    // bitwise: a plan of one document per row (all starts 0) against no plan; and row 2 of the
    // plan with documents (one document, chunks of padding only after it) against no plan
    {
        gdn_fwd_params fa = f, fb = f, fc = f;
        fa.docs = NULL;
        fb.docs = plan_flat;
        fa.o = o; fa.ht = ht; fa.workspace = fb.workspace = fc.workspace = bf ? fws : NULL;
        void *o2 = dev_out(bv), *o3 = dev_out(bv);
        float *ht2 = (float *)dev_out(bs), *ht3 = (float *)dev_out(bs);
        fb.o = o2; fb.ht = ht2;
        fc.o = o3; fc.ht = ht3;
        gdn_chunk_fwd(&fa);
        gdn_chunk_fwd(&fb);
        gdn_chunk_fwd(&fc);
        CUDA_CHECK(cudaDeviceSynchronize());
        unsigned char *s1 = snapshot(o, bv), *s2 = snapshot(o2, bv), *s5 = snapshot(o3, bv);
        unsigned char *s3 = snapshot(ht, bs), *s4 = snapshot(ht2, bs), *s6 = snapshot(ht3, bs);
        const bool same = memcmp(s1, s2, bv) == 0 && memcmp(s3, s4, bs) == 0;
        report("fwd one document a row vs none", NULL, NULL, 0, 0, same, same ? "  same bits" : "  BITS DIFFER");
        const size_t rv = bv / B, rs = bs / B;  // row 2's bytes of o and ht
        const bool same2 = memcmp(s1 + 2 * rv, s5 + 2 * rv, rv) == 0 &&
                           memcmp(s3 + 2 * rs, s6 + 2 * rs, rs) == 0;
        report("fwd row 2 (one document) vs none", NULL, NULL, 0, 0, same2,
               same2 ? "  same bits" : "  BITS DIFFER");
        free(s1); free(s2); free(s3); free(s4); free(s5); free(s6);
        CUDA_CHECK(cudaFree(o2));
        CUDA_CHECK(cudaFree(ht2));
        CUDA_CHECK(cudaFree(o3));
        CUDA_CHECK(cudaFree(ht3));
    }

    // ---- backward --------------------------------------------------------------------------
    gdn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.fwd = f;
    p.dO = d_dO; p.dht = d_dht;
    void *dq = dev_out(bq), *dk = dev_out(bq), *dv = dev_out(bv);
    float *dg = (float *)dev_out(bg), *db = (float *)dev_out(bg), *dh0 = (float *)dev_out(bs);
    p.dq = dq; p.dk = dk; p.dv = dv; p.dg = dg; p.dbeta = db; p.dh0 = dh0;
    const size_t wsb = gdn_chunk_bwd_workspace_bytes(&p);
    void *ws = NULL;
    CUDA_CHECK(cudaMalloc(&ws, wsb));
    p.workspace = ws;
    p.workspace_bytes = wsb;
    void *outs[6] = {dq, dk, dv, dg, db, dh0};
    const size_t ob[6] = {bq, bq, bv, bg, bg, bs};
    const double btol = bf ? 1e-2 : 1e-4;
    const char *bnames[8] = {"dq", "dk", "dv", "dg", "dg/h", "db", "db/h", "dh0"};
    double *gq = dalloc(nk), *gk = dalloc(nk), *gv = dalloc(nv), *gg = dalloc(N), *gb = dalloc(N);
    double *gh = dalloc(ns);
    unsigned char *first[6] = {NULL};
    // states: 0 recompute, 1 saved, 2 replay (bf16); then recompute in segments of 2 chunks
    // (seg_chunks: segment ends inside and at the ends of documents); mma: the mma.sync final
    // kernel (bf16 Dk 128)
    const int nmodes = bf ? 3 : 2;
    const bool mma_too = bf && Dk == 128;
    for (int mma = 0; mma < (mma_too ? 2 : 1); mma++)
        for (int st = 0; st <= nmodes; st++) {
            const bool segmented = st == nmodes;  // the states recomputed, in segments
            gdn_bwd_params pp = p;
            pp.final_mma_sync = mma != 0;
            pp.fwd.h_states = st == 1 ? hs : NULL;
            pp.fwd.keep_g = st == 2 && !segmented ? kg : NULL;
            pp.fwd.keep_dt = st == 2 && !segmented ? kd : NULL;
            pp.seg_chunks = segmented ? 2 : 0;
            pp.workspace_bytes = gdn_chunk_bwd_workspace_bytes(&pp);
            if (pp.workspace_bytes > wsb) CUDA_CHECK(cudaMalloc(&pp.workspace, pp.workspace_bytes));
            for (int i = 0; i < 6; i++) CUDA_CHECK(cudaMemset(outs[i], 0xff, ob[i]));
            CUDA_CHECK(cudaMemset(pp.workspace, 0xff, pp.workspace_bytes));
            gdn_chunk_bwd(&pp);
            CUDA_CHECK(cudaDeviceSynchronize());
            bool same = true;
            for (int i = 0; i < 6; i++) {
                unsigned char *s = snapshot(outs[i], ob[i]);
                if (st == 0) {
                    free(first[i]);
                    first[i] = s;
                } else {
                    same &= memcmp(first[i], s, ob[i]) == 0;
                    free(s);
                }
            }
            download(gq, dq, nk, dt);
            download(gk, dk, nk, dt);
            download(gv, dv, nv, dt);
            download(gg, dg, N, GDN_DTYPE_FP32);
            download(gb, db, N, GDN_DTYPE_FP32);
            download(gh, dh0, ns, GDN_DTYPE_FP32);
            const bool fin = count_nonfinite(gq, nk) + count_nonfinite(gk, nk) +
                                 count_nonfinite(gv, nv) + count_nonfinite(gg, N) +
                                 count_nonfinite(gb, N) + count_nonfinite(gh, ns) == 0;
            const double e[8] = {rel_l2(gq, rq, nk), rel_l2(gk, rk, nk), rel_l2(gv, rv, nv),
                                 rel_l2(gg, rg, N),  rel_per_head(gg, rg, B, T, H),
                                 rel_l2(gb, rb, N),  rel_per_head(gb, rb, B, T, H),
                                 rel_l2(gh, rh, ns)};
            char what[64];
            snprintf(what, sizeof what, "bwd docs, states %s%s",
                     segmented    ? "recomputed, segments of 2"
                     : st == 0    ? "recomputed"
                     : st == 1    ? "saved"
                                  : "replayed",
                     mma ? ", mma.sync final" : "");
            char extra[64];
            snprintf(extra, sizeof extra, "%s%s", fin ? "" : "  NONFINITE",
                     st == 0 ? "" : same ? "  (same bits as recomputed)" : "  BITS DIFFER");
            report(what, e, bnames, 8, btol, fin && same, extra);
            if (pp.workspace != ws) CUDA_CHECK(cudaFree(pp.workspace));
        }
    // bitwise: a plan of one document per row against no plan; row 2 of the plan with documents
    // (states recomputed) against no plan
    {
        gdn_bwd_params pa = p, pb = p, pc = p;
        pa.fwd.docs = NULL;
        pb.fwd.docs = plan_flat;
        pa.workspace_bytes = pb.workspace_bytes = gdn_chunk_bwd_workspace_bytes(&pa);
        unsigned char *s1[6];
        bool same = true, same2 = true;
        for (int run = 0; run < 3; run++) {
            for (int i = 0; i < 6; i++) CUDA_CHECK(cudaMemset(outs[i], 0xff, ob[i]));
            gdn_chunk_bwd(run == 0 ? &pa : run == 1 ? &pb : &pc);
            CUDA_CHECK(cudaDeviceSynchronize());
            for (int i = 0; i < 6; i++) {
                unsigned char *s = snapshot(outs[i], ob[i]);
                const size_t rb = ob[i] / B;  // row 2's bytes (every output is b-major)
                if (run == 0) {
                    s1[i] = s;
                    continue;
                }
                if (run == 1) same &= memcmp(s1[i], s, ob[i]) == 0;
                else same2 &= memcmp(s1[i] + 2 * rb, s + 2 * rb, rb) == 0;
                free(s);
                if (run == 2) free(s1[i]);
            }
        }
        report("bwd one document a row vs none", NULL, NULL, 0, 0, same, same ? "  same bits" : "  BITS DIFFER");
        report("bwd row 2 (one document) vs none", NULL, NULL, 0, 0, same2,
               same2 ? "  same bits" : "  BITS DIFFER");
    }

    for (int i = 0; i < 6; i++) free(first[i]);
    void *frees[] = {d_q, d_k, d_v, d_dO, d_g, d_beta, d_h0, d_dht, hs, o, ht,
                     dq, dk, dv, dg, db, dh0, ws, kg, kd, fws};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
        if (frees[i]) CUDA_CHECK(cudaFree(frees[i]));
    double *hfrees[] = {in.q, in.k, in.v, in.g, in.beta, in.h0, in.dO, in.dht, ro, rht, rq, rk,
                        rv, rg, rb, rh, go, ght, gq, gk, gv, gg, gb, gh};
    for (size_t i = 0; i < sizeof hfrees / sizeof hfrees[0]; i++) free(hfrees[i]);
}

int main(int argc, char **argv) {
    uint64_t seed = 20261207;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: test_gdn_docs [--seed N]\n");
            return 2;
        }
    }
    gpu_require("test_gdn_docs");
    printf("seed %llu (--seed); B %d T %d H %d; tolerance: o, ht 5e-3 (bf16) / 1e-4 (fp32), "
           "gradients 1e-2 / 1e-4\n", (unsigned long long)seed, B, T, H);
    int32_t *ds = (int32_t *)gdn_malloc((size_t)B * T * 4), *flat = (int32_t *)gdn_malloc((size_t)B * T * 4);
    make_doc_starts(ds);
    const int Tp = gdn_docs_padded_len(ds, B, T);
    const size_t pb = gdn_docs_bytes(B, T, Tp);
    void *pmem = NULL;
    CUDA_CHECK(cudaMalloc(&pmem, pb));
    gdn_docs plan, plan_flat;
    gdn_docs_init(&plan, ds, B, T, pmem, pb, 0);
    gdn_docs_init(&plan_flat, flat, B, T, NULL, 0, 0);  // all 0: any == 0, no memory needed
    printf("padded rows: Tp %d (T %d); plan any %d, one-document plan any %d\n", plan.Tp, T,
           plan.any, plan_flat.any);
    if (!plan.any || plan_flat.any || Tp <= T) {
        printf("test_gdn_docs: FAIL: unexpected plan\n");
        return 1;
    }
    const bool plan_ok = check_plan(&plan, ds);
    report("plan tables (chunk_tok, chunk_len, reset)", NULL, NULL, 0, 0, plan_ok, "");
    const tcase cases[] = {
        {64, 64, GDN_DTYPE_FP32},   {128, 128, GDN_DTYPE_FP32}, {256, 256, GDN_DTYPE_FP32},
        {64, 128, GDN_DTYPE_BF16},  {128, 128, GDN_DTYPE_BF16}, {256, 256, GDN_DTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], seed, ds, &plan, &plan_flat);
    CUDA_CHECK(cudaFree(pmem));
    free(ds);
    free(flat);
    printf("\ntest_gdn_docs: %d checks, %d failed\n", n_cases, n_fail);
    return n_fail ? 1 : 0;
}
