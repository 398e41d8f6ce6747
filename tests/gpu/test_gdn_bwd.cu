// test_gdn_bwd.cu — the CUDA chunkwise GDN backward (src/bwd/gdn_chunk.cu) against the float64
// token-level backward (gdn_token_bwd_cpu, DESIGN 3.3) on fresh random inputs: q, k L2-normalised
// rows, v ~ N(0,1), random dO and (when on) random d(final state) and h0. Gates per head:
// "mixed" (-g log-uniform in [1e-4, 20]: from near 0 to near -20 within one head), "weak"
// (-g in [0, 0.02]: long memory) or "strong" (-g in [5, 20]: every token forgets); beta in
// (0,1), (0,2) (neg_eigval), near 0 ([0, 0.05]) or near 1 ([0.95, 1]). bf16 cases feed the
// reference the same bf16-rounded inputs. Every gradient buffer is NaN-poisoned before each
// run, with a poisoned tail that must survive (no write past the end).
// Pass: relative L2 <= 1e-2 (bf16) / 1e-4 (fp32) for dq, dk, dv, dg, dbeta, dh0, and the same
// bound per (b, h) slice for dg and dbeta (a strongly decaying head is not hidden behind the
// others); nothing non-finite; a second run, with the scan forced to one stage (scan_stages 1:
// the layout that runs two CTAs per SM on large grids), gives bitwise the same gradients; with the
// forward's saved chunk-start states (fwd.h_states) and, bf16, with the states replayed from what
// the forward kept (fwd.keep_g, fwd.keep_dt) the gradients are bitwise those of the recomputing
// path; the backward in segments of (NC + 2) / 3 chunks (seg_chunks) gives bitwise the
// gradients of one segment (the default). Sweeps T in {1, 63, 64, 65, 300, 4096}, Dk in {64,
// 128, 256}, Dv in {Dk, 2Dk}, gate off,
// delta off, neg eigval, every scan value block. Exit 77 without a GPU.
// Usage: test_gdn_bwd [--seed N] [--mma-sync] [--hash]
//   --mma-sync  the whole test on the mma.sync final kernel (final_mma_sync: the portable path,
//               where the wgmma kernel would run: bf16, Dk 128, delta on, sm_90a)
//   --hash      per case a line "hash <case> <FNV-1a 64 of the first run's gradient bytes>" (dq,
//               dk, dv, dg, dbeta, dh0, those the case produces), for bitwise comparisons of two
//               builds, and a line "ghash <case> dq:<h> dk:<h> dv:<h> dg:<h> db:<h> dh0:<h>" with
//               each gradient's own hash ("-" where the case has none): which gradients moved.
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>
#include <cuda_runtime.h>

#include "gdn_test_io.h"
#include "../../src/bwd/bwd_cpu.h"
#include "../../src/bwd/gdn_bwd_cuda.h"
#include "../../src/fwd/gdn_cuda.h"

typedef enum { G_MIXED = 0, G_HEADS = 1 } gmode_t;  // HEADS: head h gets mixed/weak/strong (h%3)
typedef enum { B_FULL = 0, B_LOW = 1, B_HIGH = 2 } bmode_t;

typedef struct {
    int B, T, H, Dk, Dv;
    gdn_dtype dt;
    bool gate, delta, neg;
    gmode_t gm;
    bmode_t bm;
    bool h0, dht;
    int dvb;      // scan value block, 0 = automatic
    bool states;  // also run with the forward's saved (and kept) states and compare bitwise
} tcase;

// ---- the reference: one job per (b, h) head, run by a pool of threads -----------------------
typedef struct {
    const gdn_cpu_params *p;  // the whole problem
    int next;                 // next head to take
    pthread_mutex_t mu;
} ref_pool;

// copy head (b, h) of a (B,T,H,D) array into a (T,D) array, or back (dir < 0)
static void head_copy(double *dst, const double *src, int B, int T, int H, int D, int b, int h,
                      int dir) {
    (void)B;
    for (int t = 0; t < T; t++) {
        const size_t n = (((size_t)b * T + t) * H + h) * D;
        if (dir > 0) memcpy(dst + (size_t)t * D, src + n, D * sizeof(double));
        else memcpy((double *)src + n, dst + (size_t)t * D, D * sizeof(double));
    }
}
static void *ref_worker(void *arg) {
    ref_pool *pool = (ref_pool *)arg;
    const gdn_cpu_params *P = pool->p;
    const int T = P->T, H = P->H, Dk = P->Dk, Dv = P->Dv;
    const size_t SS = (size_t)Dk * Dv;
    double *q = dalloc((size_t)T * Dk), *k = dalloc((size_t)T * Dk), *v = dalloc((size_t)T * Dv);
    double *dO = dalloc((size_t)T * Dv), *g = dalloc(T), *beta = dalloc(T);
    double *dq = dalloc((size_t)T * Dk), *dk = dalloc((size_t)T * Dk), *dv = dalloc((size_t)T * Dv);
    double *dg = dalloc(T), *dbeta = dalloc(T);
    for (;;) {
        pthread_mutex_lock(&pool->mu);
        const int job = pool->next++;
        pthread_mutex_unlock(&pool->mu);
        if (job >= P->B * H) break;
        const int b = job / H, h = job % H;
        head_copy(q, P->q, P->B, T, H, Dk, b, h, 1);
        head_copy(k, P->k, P->B, T, H, Dk, b, h, 1);
        head_copy(v, P->v, P->B, T, H, Dv, b, h, 1);
        head_copy(dO, P->dO, P->B, T, H, Dv, b, h, 1);
        head_copy(g, P->g, P->B, T, H, 1, b, h, 1);
        head_copy(beta, P->beta, P->B, T, H, 1, b, h, 1);
        gdn_cpu_params r = *P;
        r.B = 1;
        r.H = 1;
        r.q = q; r.k = k; r.v = v; r.g = g; r.beta = beta; r.dO = dO;
        r.h0 = P->h0 ? P->h0 + (size_t)job * SS : NULL;
        r.dht = P->dht ? P->dht + (size_t)job * SS : NULL;
        r.o = NULL; r.ht = NULL;
        r.dq = dq; r.dk = dk; r.dv = dv; r.dg = dg; r.dbeta = dbeta;
        r.dh0 = P->dh0 + (size_t)job * SS;
        gdn_token_bwd_cpu(&r);
        head_copy(dq, P->dq, P->B, T, H, Dk, b, h, -1);
        head_copy(dk, P->dk, P->B, T, H, Dk, b, h, -1);
        head_copy(dv, P->dv, P->B, T, H, Dv, b, h, -1);
        if (P->mode.gate) head_copy(dg, P->dg, P->B, T, H, 1, b, h, -1);
        if (P->mode.delta) head_copy(dbeta, P->dbeta, P->B, T, H, 1, b, h, -1);
    }
    free(q); free(k); free(v); free(dO); free(g); free(beta);
    free(dq); free(dk); free(dv); free(dg); free(dbeta);
    return NULL;
}
static void ref_backward(const gdn_cpu_params *p) {
    ref_pool pool;
    pool.p = p;
    pool.next = 0;
    if (pthread_mutex_init(&pool.mu, NULL) != 0) gdn_die("pthread_mutex_init failed");
    long nth = sysconf(_SC_NPROCESSORS_ONLN);
    if (nth < 1) nth = 1;
    if (nth > p->B * p->H) nth = p->B * p->H;
    if (nth > 32) nth = 32;
    pthread_t th[32];
    for (long i = 0; i < nth; i++)
        if (pthread_create(&th[i], NULL, ref_worker, &pool) != 0) gdn_die("pthread_create failed");
    for (long i = 0; i < nth; i++)
        if (pthread_join(th[i], NULL) != 0) gdn_die("pthread_join failed");
    pthread_mutex_destroy(&pool.mu);
}

// an output buffer of `bytes`, poisoned (0xff: NaN in bf16 and fp32) with a 16-byte tail
static void *out_alloc(size_t bytes) {
    void *d;
    CUDA_CHECK(cudaMalloc(&d, bytes + 16));
    return d;
}
static void poison(void *d, size_t bytes) { CUDA_CHECK(cudaMemset(d, 0xff, bytes + 16)); }
static bool tail_intact(const void *d, size_t bytes) {
    unsigned char tail[16];
    CUDA_CHECK(cudaMemcpy(tail, (const char *)d + bytes, 16, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 16; i++)
        if (tail[i] != 0xff) return false;
    return true;
}
// The backward p again, its outputs poisoned and its workspace (the first wsb bytes) too: true
// when every output the case computes (dg with the gate, dbeta with delta) has the bits of snap.
static bool bwd_same_bits(const gdn_bwd_params *p, const tcase *c, void *const outs[6],
                          const size_t obytes[6], unsigned char *const snap[6], size_t wsb) {
    for (int i = 0; i < 6; i++) poison(outs[i], obytes[i]);
    if (wsb) CUDA_CHECK(cudaMemset(p->workspace, 0xff, wsb));
    gdn_chunk_bwd(p);
    CUDA_CHECK(cudaDeviceSynchronize());
    bool same = true;
    for (int i = 0; i < 6; i++) {
        const bool used = (i != 3 || c->gate) && (i != 4 || c->delta);
        if (!used) continue;
        unsigned char *s2 = snapshot(outs[i], obytes[i]);
        same &= memcmp(snap[i], s2, obytes[i]) == 0;
        free(s2);
    }
    return same;
}

static int n_cases = 0, n_fail = 0;
static bool hash_mode = false;  // --hash: one "hash <case> <FNV-1a 64>" line per case
static bool mma_sync = false;   // --mma-sync: gdn_bwd_params.final_mma_sync

// FNV-1a 64 over n bytes, continuing from h
static uint64_t fnv1a64(uint64_t h, const unsigned char *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= d[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void run_case(const tcase *c, uint64_t seed) {
    const int B = c->B, T = c->T, H = c->H, Dk = c->Dk, Dv = c->Dv;
    const size_t N = (size_t)B * T * H, nk = N * Dk, nv = N * Dv, ns = (size_t)B * H * Dk * Dv;
    const int NC = (T + GDN_CHUNK - 1) / GDN_CHUNK;
    const gdn_dtype dt = c->dt;
    const size_t esz = dt == GDN_DTYPE_BF16 ? 2 : 4;
    rng_t r;
    rng_init(&r, seed, (uint64_t)n_cases);
    double *q = dalloc(nk), *k = dalloc(nk), *v = dalloc(nv), *dO = dalloc(nv);
    double *g = dalloc(N), *beta = dalloc(N);
    double *h0 = c->h0 ? dalloc(ns) : NULL, *dht = c->dht ? dalloc(ns) : NULL;
    fill_normal(q, nk, &r, 1.0);
    fill_normal(k, nk, &r, 1.0);
    l2norm_rows(q, N, Dk);
    l2norm_rows(k, N, Dk);
    fill_normal(v, nv, &r, 1.0);
    fill_normal(dO, nv, &r, 1.0);
    for (size_t i = 0; i < N; i++) {
        const int h = (int)(i % H);
        const int regime = c->gm == G_HEADS ? h % 3 : 0;
        const double u = rng_uniform(&r);
        g[i] = regime == 0   ? -exp(log(1e-4) + (log(20.0) - log(1e-4)) * u)
               : regime == 1 ? -0.02 * u
                             : -(5.0 + 15.0 * u);
        const double w = rng_uniform(&r);
        beta[i] = c->bm == B_LOW ? 0.05 * w : c->bm == B_HIGH ? 0.95 + 0.05 * w : (c->neg ? 2.0 : 1.0) * w;
    }
    if (h0) fill_normal(h0, ns, &r, 0.5);
    if (dht) fill_normal(dht, ns, &r, 1.0);

    // device inputs (rounded to the device dtype in place; g, beta, states fp32)
    void *d_q = upload(q, nk, dt), *d_k = upload(k, nk, dt), *d_v = upload(v, nv, dt);
    void *d_dO = upload(dO, nv, dt);
    float *d_g = (float *)upload(g, N, GDN_DTYPE_FP32), *d_beta = (float *)upload(beta, N, GDN_DTYPE_FP32);
    float *d_h0 = h0 ? (float *)upload(h0, ns, GDN_DTYPE_FP32) : NULL;
    float *d_dht = dht ? (float *)upload(dht, ns, GDN_DTYPE_FP32) : NULL;
    // outputs
    const size_t bq = nk * esz, bv = nv * esz, bgt = N * 4, bs = ns * 4;
    void *o_dq = out_alloc(bq), *o_dk = out_alloc(bq), *o_dv = out_alloc(bv);
    float *o_dg = (float *)out_alloc(bgt), *o_db = (float *)out_alloc(bgt), *o_dh0 = (float *)out_alloc(bs);

    gdn_bwd_params p;
    memset(&p, 0, sizeof p);
    gdn_fwd_params *pf = &p.fwd;
    pf->B = B; pf->T = T; pf->H = H; pf->Dk = Dk; pf->Dv = Dv;
    pf->mode.gate = c->gate; pf->mode.delta = c->delta; pf->mode.neg_eigval = c->neg;
    pf->dtype = dt;
    pf->q = d_q; pf->k = d_k; pf->v = d_v; pf->g = d_g; pf->beta = d_beta; pf->h0 = d_h0;
    pf->stream = 0;
    p.dO = d_dO; p.dht = d_dht;
    p.dq = o_dq; p.dk = o_dk; p.dv = o_dv; p.dg = o_dg; p.dbeta = o_db; p.dh0 = o_dh0;
    p.dv_block = c->dvb;
    p.final_mma_sync = mma_sync;
    const size_t wsb = gdn_chunk_bwd_workspace_bytes(&p);
    void *ws = NULL;
    CUDA_CHECK(cudaMalloc(&ws, wsb > 0 ? wsb : 256));
    p.workspace = ws;
    p.workspace_bytes = wsb;
    const int dvb = gdn_chunk_bwd_dv_block(&p);

    // run 1 (poisoned), snapshot; run 2 (poisoned again, workspace poisoned too), compare bits
    void *outs[6] = {o_dq, o_dk, o_dv, o_dg, o_db, o_dh0};
    const size_t obytes[6] = {bq, bq, bv, bgt, bgt, bs};
    unsigned char *snap[6];
    bool tails = true, bitwise = true, states_bitwise = true;
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < 6; i++) poison(outs[i], obytes[i]);
        if (run == 1 && wsb) CUDA_CHECK(cudaMemset(ws, 0xff, wsb));
        p.scan_stages = run == 0 ? 0 : 1;  // run 2 with one scan stage: the same bits
        gdn_chunk_bwd(&p);
        CUDA_CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < 6; i++) {
            const bool used = (i != 3 || c->gate) && (i != 4 || c->delta);
            if (!used) continue;
            tails &= tail_intact(outs[i], obytes[i]);
            if (run == 0) {
                snap[i] = snapshot(outs[i], obytes[i]);
            } else {
                unsigned char *s2 = snapshot(outs[i], obytes[i]);
                bitwise &= memcmp(snap[i], s2, obytes[i]) == 0;
                free(s2);
            }
        }
    }
    // the gradients, downloaded
    double *gq = dalloc(nk), *gk = dalloc(nk), *gv = dalloc(nv), *gg = dalloc(N), *gb = dalloc(N);
    double *gh = dalloc(ns);
    download(gq, o_dq, nk, dt);
    download(gk, o_dk, nk, dt);
    download(gv, o_dv, nv, dt);
    download(gg, o_dg, N, GDN_DTYPE_FP32);
    download(gb, o_db, N, GDN_DTYPE_FP32);
    download(gh, o_dh0, ns, GDN_DTYPE_FP32);

    // in segments of (NC + 2) / 3 chunks (at T = 65 two of one chunk, at T = 300 of 2, 2 and 1,
    // at T = 4096 of 22, 22 and 20): the same bits as one segment (the default)
    bool seg_bitwise = true;
    int seg = 0;
    if (NC >= 2) {
        gdn_bwd_params ps = p;
        ps.scan_stages = 0;
        ps.seg_chunks = (NC + 2) / 3;
        seg = ps.seg_chunks;
        ps.workspace_bytes = gdn_chunk_bwd_workspace_bytes(&ps);
        if (ps.workspace_bytes > wsb) CUDA_CHECK(cudaMalloc(&ps.workspace, ps.workspace_bytes));
        seg_bitwise = bwd_same_bits(&ps, c, outs, obytes, snap, ps.workspace_bytes);
        if (ps.workspace != ws) CUDA_CHECK(cudaFree(ps.workspace));
    }
    // with the forward's chunk-start states (saved), and replayed from what it kept (bf16: G and
    // Δ~, a forward with a workspace): the same bits as the recomputing path
    if (c->states) {
        float *hs = NULL;
        void *o_tmp = NULL, *fws = NULL, *kd = NULL;
        float *kg = NULL;
        const size_t bhs = (size_t)B * H * NC * Dk * Dv * 4;
        CUDA_CHECK(cudaMalloc(&hs, bhs + 16));
        CUDA_CHECK(cudaMalloc(&o_tmp, bv + 16));
        gdn_fwd_params f = p.fwd;
        f.o = o_tmp; f.ht = NULL; f.h_states = hs; f.dv_block = 0;
        gdn_chunk_fwd(&f);
        size_t bkg = 0, bkd = 0;
        gdn_chunk_fwd_keep_bytes(&f, &bkg, &bkd);
        const size_t bfws = gdn_chunk_fwd_workspace_bytes(&f);
        if (bkg && bkd && bfws) {  // the forward again, keeping G and Δ~ (the prep path)
            CUDA_CHECK(cudaMalloc(&kg, bkg));
            CUDA_CHECK(cudaMalloc(&kd, bkd));
            CUDA_CHECK(cudaMalloc(&fws, bfws));
            gdn_fwd_params fk = f;
            fk.h_states = NULL;
            fk.workspace = fws;
            fk.keep_g = kg;
            fk.keep_dt = kd;
            gdn_chunk_fwd(&fk);
        }
        for (int src = 0; src < (kg ? 2 : 1); src++) {
            gdn_bwd_params p2 = p;
            if (src == 0) {
                p2.fwd.h_states = hs;
            } else {
                p2.fwd.keep_g = kg;
                p2.fwd.keep_dt = kd;
            }
            const size_t wsb2 = gdn_chunk_bwd_workspace_bytes(&p2);
            if (wsb2 > wsb) gdn_die("workspace with kept states (%zu) larger than without (%zu)", wsb2, wsb);
            p2.workspace_bytes = wsb2;
            states_bitwise &= bwd_same_bits(&p2, c, outs, obytes, snap, wsb);
        }
        CUDA_CHECK(cudaFree(hs));
        CUDA_CHECK(cudaFree(o_tmp));
        if (kg) {
            CUDA_CHECK(cudaFree(kg));
            CUDA_CHECK(cudaFree(kd));
            CUDA_CHECK(cudaFree(fws));
        }
    }
    uint64_t hash = 0xcbf29ce484222325ull;  // of the first run's gradients, in output order
    char ghash[6][20];                       // each gradient's own hash
    for (int i = 0; i < 6; i++) {
        const bool used = (i != 3 || c->gate) && (i != 4 || c->delta);
        snprintf(ghash[i], sizeof ghash[i], "-");
        if (used && hash_mode) {
            hash = fnv1a64(hash, snap[i], obytes[i]);
            snprintf(ghash[i], sizeof ghash[i], "%016llx",
                     (unsigned long long)fnv1a64(0xcbf29ce484222325ull, snap[i], obytes[i]));
        }
        if (used) free(snap[i]);
    }

    // the reference
    double *rq = dalloc(nk), *rk = dalloc(nk), *rv = dalloc(nv), *rg = dalloc(N), *rb = dalloc(N);
    double *rh = dalloc(ns);
    gdn_cpu_params rp;
    memset(&rp, 0, sizeof rp);
    rp.B = B; rp.T = T; rp.H = H; rp.Dk = Dk; rp.Dv = Dv; rp.chunk = GDN_CHUNK;
    rp.mode = p.fwd.mode;
    rp.q = q; rp.k = k; rp.v = v; rp.g = g; rp.beta = beta; rp.h0 = h0;
    rp.dO = dO; rp.dht = dht;
    rp.dq = rq; rp.dk = rk; rp.dv = rv; rp.dg = rg; rp.dbeta = rb; rp.dh0 = rh;
    ref_backward(&rp);

    const double tol = dt == GDN_DTYPE_BF16 ? 1e-2 : 1e-4;
    size_t bad = count_nonfinite(gq, nk) + count_nonfinite(gk, nk) + count_nonfinite(gv, nv) +
                 count_nonfinite(gh, ns);
    const double eq = rel_l2(gq, rq, nk), ek = rel_l2(gk, rk, nk), ev = rel_l2(gv, rv, nv);
    const double eh = rel_l2(gh, rh, ns);
    double eg = 0, egh = 0, eb = 0, ebh = 0;
    if (c->gate) {
        bad += count_nonfinite(gg, N);
        eg = rel_l2(gg, rg, N);
        egh = rel_per_head(gg, rg, B, T, H);
    }
    if (c->delta) {
        bad += count_nonfinite(gb, N);
        eb = rel_l2(gb, rb, N);
        ebh = rel_per_head(gb, rb, B, T, H);
    }
    const double errs[8] = {eq, ek, ev, eg, egh, eb, ebh, eh};
    bool ok = bad == 0 && tails && bitwise && states_bitwise && seg_bitwise;
    for (int i = 0; i < 8; i++) ok &= errs[i] <= tol;  // false for NaN
    char mode[40];
    snprintf(mode, sizeof mode, "%s%s%s%s%s", c->gate ? "" : "nogate ", c->delta ? "" : "nodelta ",
             c->neg ? "neg " : "", c->bm == B_LOW ? "b~0 " : c->bm == B_HIGH ? "b~1 " : "",
             c->gm == G_HEADS ? "m/w/s " : "");
    printf("%-4s B%-2d T%-5d H%-3d dk%-3d dv%-3d dvb%-2d %-20s %-2s %-3s | dq %.1e dk %.1e dv %.1e "
           "dg %.1e (head %.1e) db %.1e (head %.1e) dh0 %.1e%s%s%s%s%s%s  %s\n",
           dt == GDN_DTYPE_BF16 ? "bf16" : "fp32", B, T, H, Dk, Dv, dvb, mode[0] ? mode : "default",
           h0 ? "h0" : "-", dht ? "dht" : "-", eq, ek, ev, eg, egh, eb, ebh, eh,
           bad ? "  NONFINITE" : "", tails ? "" : "  OVERRUN", bitwise ? "" : "  NONDETERMINISTIC",
           states_bitwise ? "" : "  STATES-DIFFER", c->states ? "  (states: same bits)" : "",
           !seg_bitwise ? "  SEGMENTS-DIFFER" : seg ? "  (segments: same bits)" : "",
           ok ? "pass" : "FAIL");
    if (hash_mode) {
        char label[192];
        snprintf(label, sizeof label, "%03d:%s/B%d/T%d/H%d/dk%d/dv%d/dvb%d/%s%s%s%s%s/%s/%s",
                 n_cases, dt == GDN_DTYPE_BF16 ? "bf16" : "fp32", B, T, H, Dk, Dv, dvb,
                 c->gate ? "" : "nogate-", c->delta ? "" : "nodelta-", c->neg ? "neg-" : "",
                 c->bm == B_LOW ? "b0-" : c->bm == B_HIGH ? "b1-" : "",
                 c->gm == G_HEADS ? "mws" : "mixed", h0 ? "h0" : "-", dht ? "dht" : "-");
        printf("hash %s %016llx\n", label, (unsigned long long)hash);
        printf("ghash %s dq:%s dk:%s dv:%s dg:%s db:%s dh0:%s\n", label, ghash[0], ghash[1],
               ghash[2], ghash[3], ghash[4], ghash[5]);
    }
    fflush(stdout);
    n_cases++;
    n_fail += !ok;

    void *frees[] = {d_q, d_k, d_v, d_dO, d_g, d_beta, o_dq, o_dk, o_dv, o_dg, o_db, o_dh0, ws};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) CUDA_CHECK(cudaFree(frees[i]));
    if (d_h0) CUDA_CHECK(cudaFree(d_h0));
    if (d_dht) CUDA_CHECK(cudaFree(d_dht));
    free(q); free(k); free(v); free(dO); free(g); free(beta); free(h0); free(dht);
    free(gq); free(gk); free(gv); free(gg); free(gb); free(gh);
    free(rq); free(rk); free(rv); free(rg); free(rb); free(rh);
}

int main(int argc, char **argv) {
    uint64_t seed = 20261130;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--hash") == 0) {
            hash_mode = true;
        } else if (strcmp(argv[i], "--mma-sync") == 0) {
            mma_sync = true;
        } else {
            fprintf(stderr, "usage: test_gdn_bwd [--seed N] [--mma-sync] [--hash]\n");
            return 2;
        }
    }
    gpu_require("test_gdn_bwd");
    printf("seed %llu (--seed)%s; tolerance: relative L2 1e-2 (bf16), 1e-4 (fp32)\n",
           (unsigned long long)seed, mma_sync ? "; final kernel: mma.sync (--mma-sync)" : "");
    const int dims[6][2] = {{64, 64}, {64, 128}, {128, 128}, {128, 256}, {256, 256}, {256, 512}};
    const gdn_dtype dts[2] = {GDN_DTYPE_FP32, GDN_DTYPE_BF16};
    for (int di = 0; di < 2; di++) {
        const gdn_dtype dt = dts[di];
        const char *dn = dt == GDN_DTYPE_BF16 ? "bf16" : "fp32";
        printf("\n== %s: every head dim, awkward T\n", dn);
        for (int d = 0; d < 6; d++) {
            const int Ts[5] = {1, 63, 64, 65, 300};
            for (int ti = 0; ti < 5; ti++) {
                tcase c = {1, Ts[ti], 2, dims[d][0], dims[d][1], dt, true, true, false, G_MIXED,
                           B_FULL, (ti & 1) != 0, ti != 2, 0, false};
                if (Ts[ti] == 65) { c.B = 2; c.H = 1; }
                if (Ts[ti] == 300) c.gm = G_HEADS;
                run_case(&c, seed);
            }
        }
        printf("\n== %s: modes (gate off, delta off, both, neg eigval), beta near 0 and 1\n", dn);
        for (int d = 1; d <= 2; d++)
            for (int m = 0; m < 4; m++) {
                tcase c = {2, 300, 2, dims[d][0], dims[d][1], dt, m != 0 && m != 2,
                           m != 1 && m != 2, m == 3, G_MIXED, B_FULL, true, true, 0, false};
                run_case(&c, seed);
            }
        {
            tcase lo = {1, 300, 3, 128, 128, dt, true, true, false, G_HEADS, B_LOW, true, true, 0, false};
            run_case(&lo, seed);
            tcase hi = {1, 300, 3, 128, 128, dt, true, true, false, G_HEADS, B_HIGH, false, true, 0, false};
            run_case(&hi, seed);
            tcase ng = {1, 300, 3, 64, 128, dt, true, true, true, G_HEADS, B_FULL, true, false, 0, false};
            run_case(&ng, seed);
        }
        printf("\n== %s: long sequences, many heads, saved states\n", dn);
        {
            tcase c1 = {1, 4096, 3, 128, 128, dt, true, true, false, G_HEADS, B_FULL, true, true, 0, false};
            run_case(&c1, seed);
            tcase c2 = {1, 4096, 1, 64, 128, dt, true, true, true, G_MIXED, B_FULL, false, true, 0, false};
            run_case(&c2, seed);
            if (dt == GDN_DTYPE_BF16) {
                tcase c3 = {1, 4096, 1, 256, 512, dt, true, true, false, G_MIXED, B_FULL, true, true, 0, false};
                run_case(&c3, seed);
            }
            tcase c4 = {4, 130, 16, 128, 128, dt, true, true, false, G_HEADS, B_FULL, true, true, 0, false};
            run_case(&c4, seed);
            tcase c5 = {2, 300, 2, 128, 128, dt, true, true, false, G_HEADS, B_FULL, true, true, 0, true};
            run_case(&c5, seed);
            tcase c6 = {1, 200, 2, 256, 256, dt, true, false, false, G_MIXED, B_FULL, true, true, 0, true};
            run_case(&c6, seed);
        }
        if (dt == GDN_DTYPE_BF16) {
            printf("\n== bf16: every scan value block\n");
            const int blocks[3] = {16, 32, 64};
            for (int bi = 0; bi < 3; bi++) {
                tcase c = {1, 300, 2, 128, 256, dt, true, true, false, G_HEADS, B_FULL, true, true,
                           blocks[bi], false};
                run_case(&c, seed);
                tcase e = {1, 300, 2, 64, 64, dt, true, true, true, G_MIXED, B_FULL, false, true,
                           blocks[bi], false};
                run_case(&e, seed);
                if (blocks[bi] < 64) {
                    tcase f = {1, 300, 2, 256, 256, dt, true, true, false, G_HEADS, B_FULL, true,
                               false, blocks[bi], false};
                    run_case(&f, seed);
                }
            }
        }
    }
    printf("\ntest_gdn_bwd: %d cases, %d failed\n", n_cases, n_fail);
    return n_fail ? 1 : 0;
}
