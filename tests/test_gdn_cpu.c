// test_gdn_cpu.c — the float64 gated delta rule (DESIGN 3): finite differences on the token-level
// backward (every gradient, every mode, with and without h0 / dht) and on the chunked backward
// (one small shape); then the chunked forward and backward against the token-level ones
// (rel L2 <= 1e-10 per tensor) over awkward T, chunk sizes, head dims, gates near 0 and near
// -20, beta near 0, 1 and 2 (negative eigenvalues), gate off, delta off.
#include "testutil.h"
#include "../src/bwd/bwd_cpu.h"

enum { GK_NEAR0, GK_NEAR20, GK_OFF, GK_FD };          // gate settings
enum { BK_NEAR0, BK_NEAR1, BK_NEAR2, BK_OFF, BK_FD, BK_FD2 };  // beta settings (BK_OFF: delta off)
static const char *gk_name[] = {"g~0", "g~-20", "g:off", "g~-.5"};
static const char *bk_name[] = {"b~0", "b~1", "b~2", "d:off", "b~.5", "b~1.5"};

typedef struct {
    int B, T, H, Dk, Dv, C;
    int gk, bk;
    bool h0, dht;     // use an initial state / a gradient of the final state
} tcase;

typedef struct {
    tcase tc;
    gdn_cpu_params p;
    size_t nk, nv, ng, ns;  // elements of q/k, v/o, g/beta, a state tensor
    double *q, *k, *v, *g, *beta, *h0, *R, *R2, *o, *ht;
    double *dq, *dk, *dv, *dg, *dbeta, *dh0;
    bool chunked;           // loss through the chunked forward
} problem;

static void l2rows(double *x, size_t rows, int D, double scale) {
    for (size_t r = 0; r < rows; r++) {
        double *xr = x + r * D, s = 0;
        for (int i = 0; i < D; i++) s += xr[i] * xr[i];
        s = scale / sqrt(s);
        for (int i = 0; i < D; i++) xr[i] *= s;
    }
}

static problem problem_make(tcase tc, uint64_t seed) {
    problem P;
    memset(&P, 0, sizeof P);
    P.tc = tc;
    rng_t r;
    rng_init(&r, seed, 0);
    const size_t N = (size_t)tc.B * tc.T * tc.H;
    P.nk = N * tc.Dk;
    P.nv = N * tc.Dv;
    P.ng = N;
    P.ns = (size_t)tc.B * tc.H * tc.Dk * tc.Dv;
    P.q = dalloc(P.nk); P.k = dalloc(P.nk); P.v = dalloc(P.nv); P.o = dalloc(P.nv);
    P.g = dalloc(N); P.beta = dalloc(N); P.R = dalloc(P.nv);
    P.h0 = dalloc(P.ns); P.R2 = dalloc(P.ns); P.ht = dalloc(P.ns);
    P.dq = dalloc(P.nk); P.dk = dalloc(P.nk); P.dv = dalloc(P.nv);
    P.dg = dalloc(N); P.dbeta = dalloc(N); P.dh0 = dalloc(P.ns);
    fill_normal(P.q, P.nk, &r, 1.0);
    fill_normal(P.k, P.nk, &r, 1.0);
    l2rows(P.q, N, tc.Dk, 1.0 / sqrt((double)tc.Dk));  // q = l2norm(q) / sqrt(Dk)
    l2rows(P.k, N, tc.Dk, 1.0);
    fill_normal(P.v, P.nv, &r, 1.0);
    static const double glo[] = {-0.02, -21, 0, -1.0}, ghi[] = {0, -19, 0, -0.05};
    static const double blo[] = {0, 0.95, 1.95, 0, 0.1, 1.0}, bhi[] = {0.05, 1, 2, 0, 0.9, 1.95};
    fill_uniform(P.g, N, &r, glo[tc.gk], ghi[tc.gk]);
    fill_uniform(P.beta, N, &r, blo[tc.bk], bhi[tc.bk]);
    fill_normal(P.h0, P.ns, &r, 0.3);
    fill_normal(P.R, P.nv, &r, 1.0);
    fill_normal(P.R2, P.ns, &r, 1.0);
    gdn_cpu_params *p = &P.p;
    p->B = tc.B; p->T = tc.T; p->H = tc.H; p->Dk = tc.Dk; p->Dv = tc.Dv; p->chunk = tc.C;
    p->mode.gate = tc.gk != GK_OFF;
    p->mode.delta = tc.bk != BK_OFF;
    p->mode.neg_eigval = tc.bk == BK_NEAR2 || tc.bk == BK_FD2;
    p->q = P.q; p->k = P.k; p->v = P.v;
    p->g = p->mode.gate ? P.g : NULL;
    p->beta = p->mode.delta ? P.beta : NULL;
    p->h0 = tc.h0 ? P.h0 : NULL;
    p->o = P.o;
    p->ht = tc.dht ? P.ht : NULL;
    p->dO = P.R;
    p->dht = tc.dht ? P.R2 : NULL;
    p->dq = P.dq; p->dk = P.dk; p->dv = P.dv;
    p->dg = p->mode.gate ? P.dg : NULL;
    p->dbeta = p->mode.delta ? P.dbeta : NULL;
    p->dh0 = (tc.h0 || tc.dht) ? P.dh0 : NULL;  // neither: dh0 not wanted (NULL path)
    return P;
}

static void problem_free(problem *P) {
    double *bufs[] = {P->q, P->k, P->v, P->o, P->g, P->beta, P->R, P->h0, P->R2, P->ht,
                      P->dq, P->dk, P->dv, P->dg, P->dbeta, P->dh0};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

// L = sum(o * R) + sum(ht * R2)   (second term only when dht is used)
static double problem_loss(void *ctx) {
    problem *P = ctx;
    if (P->chunked) gdn_chunk_fwd_cpu(&P->p);
    else gdn_token_fwd_cpu(&P->p);
    double L = dot(P->o, P->R, P->nv);
    if (P->tc.dht) L += dot(P->ht, P->R2, P->ns);
    return L;
}

static void fd_case(tcase tc, bool chunked, uint64_t seed) {
    problem P = problem_make(tc, seed);
    P.chunked = chunked;
    if (chunked) gdn_chunk_bwd_cpu(&P.p);
    else gdn_token_bwd_cpu(&P.p);
    char op[64];
    snprintf(op, sizeof op, "%s %s %s%s%s", chunked ? "chunk" : "token", gk_name[tc.gk],
             bk_name[tc.bk], tc.h0 ? " h0" : "", tc.dht ? " dht" : "");
    rng_t r;
    rng_init(&r, seed, 1);
    const double tol = 1e-6;
    gc_check(op, "dq", P.q, P.nk, P.dq, problem_loss, &P, 0, tol, &r);
    gc_check(op, "dk", P.k, P.nk, P.dk, problem_loss, &P, 0, tol, &r);
    gc_check(op, "dv", P.v, P.nv, P.dv, problem_loss, &P, 0, tol, &r);
    if (P.p.mode.gate) gc_check(op, "dg", P.g, P.ng, P.dg, problem_loss, &P, 0, tol, &r);
    if (P.p.mode.delta) gc_check(op, "dbeta", P.beta, P.ng, P.dbeta, problem_loss, &P, 0, tol, &r);
    if (tc.h0) gc_check(op, "dh0", P.h0, P.ns, P.dh0, problem_loss, &P, 0, tol, &r);
    problem_free(&P);
}

// ---- chunked vs token-level ----------------------------------------------------------------
#define NQ 8  // o, ht, dq, dk, dv, dg, dbeta, dh0
static const char *qname[NQ] = {"o", "ht", "dq", "dk", "dv", "dg", "db", "dh0"};
static double worst_all[NQ], worst_g20[NQ];
static const double SENTINEL = 12345.0;

static bool untouched(const double *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != SENTINEL) return false;
    return true;
}

static void cmp_case(tcase tc, uint64_t seed) {
    problem P = problem_make(tc, seed);
    gdn_cpu_params *p = &P.p;
    const size_t N = P.ng;
    double *o_ref = dalloc(P.nv), *ht_ref = dalloc(P.ns);
    double *g_ref[6];  // dq dk dv dg dbeta dh0 from the token-level backward
    size_t gn[6] = {P.nk, P.nk, P.nv, N, N, P.ns};
    for (int i = 0; i < 6; i++) g_ref[i] = dalloc(gn[i]);
    double *g_chk[6] = {P.dq, P.dk, P.dv, P.dg, P.dbeta, P.dh0};
    // forward: o and ht always compared
    p->ht = ht_ref; p->o = o_ref;
    gdn_token_fwd_cpu(p);
    p->ht = P.ht; p->o = P.o;
    gdn_chunk_fwd_cpu(p);
    double err[NQ];
    for (int i = 0; i < NQ; i++) err[i] = -1;  // -1: not applicable
    err[0] = rel_l2(P.o, o_ref, P.nv);
    err[1] = rel_l2(P.ht, ht_ref, P.ns);
    // backward: gate off -> dg, delta off -> dbeta get a sentinel-filled buffer that must stay
    bool ok_untouched = true;
    for (int pass = 0; pass < 2; pass++) {
        double **dst = pass == 0 ? g_ref : g_chk;
        p->dq = dst[0]; p->dk = dst[1]; p->dv = dst[2]; p->dg = dst[3]; p->dbeta = dst[4];
        p->dh0 = (tc.h0 || tc.dht) ? dst[5] : NULL;
        if (!p->mode.gate) for (size_t i = 0; i < N; i++) p->dg[i] = SENTINEL;
        if (!p->mode.delta) for (size_t i = 0; i < N; i++) p->dbeta[i] = SENTINEL;
        if (pass == 0) gdn_token_bwd_cpu(p);
        else gdn_chunk_bwd_cpu(p);
        if (!p->mode.gate) ok_untouched &= untouched(p->dg, N);
        if (!p->mode.delta) ok_untouched &= untouched(p->dbeta, N);
    }
    for (int i = 0; i < 6; i++) {
        if (i == 3 && !p->mode.gate) continue;
        if (i == 4 && !p->mode.delta) continue;
        if (i == 5 && !(tc.h0 || tc.dht)) continue;
        err[2 + i] = rel_l2(g_chk[i], g_ref[i], gn[i]);
    }
    bool ok = ok_untouched;
    for (int i = 0; i < NQ; i++) {
        if (err[i] < 0) continue;
        if (!(err[i] <= 1e-10)) ok = false;
        if (err[i] > worst_all[i]) worst_all[i] = err[i];
        if (tc.gk == GK_NEAR20 && err[i] > worst_g20[i]) worst_g20[i] = err[i];
    }
    printf("T=%-3d C=%-2d B%dH%d Dk=%-3d Dv=%-3d %-5s %-5s %-2s %-3s |", tc.T, tc.C, tc.B, tc.H,
           tc.Dk, tc.Dv, gk_name[tc.gk], bk_name[tc.bk], tc.h0 ? "h0" : "", tc.dht ? "dht" : "");
    for (int i = 0; i < NQ; i++) {
        if (err[i] < 0) printf(" %s    -   ", qname[i]);
        else printf(" %s %8.1e", qname[i], err[i]);
    }
    printf(" %s%s\n", ok ? "pass" : "FAIL", ok_untouched ? "" : " (dg/dbeta written in off mode)");
    gc_checks++;
    if (!ok) gc_failures++;
    free(o_ref);
    free(ht_ref);
    for (int i = 0; i < 6; i++) free(g_ref[i]);
    problem_free(&P);
}

int main(void) {
    double t0 = gdn_now();
    uint64_t seed = 1000;

    // 1. finite differences, token-level backward (and the chunked one on one small shape)
    gc_header("gated delta rule backward vs finite differences (B=2 T=7 H=2 Dk=4 Dv=5; chunked: T=11 C=4)");
    {
        const tcase base = {2, 7, 2, 4, 5, 4, GK_FD, BK_FD, false, false};
        const int modes[4][2] = {{GK_FD, BK_FD}, {GK_OFF, BK_FD}, {GK_FD, BK_OFF}, {GK_FD, BK_FD2}};
        for (int m = 0; m < 4; m++)
            for (int hd = 0; hd < 4; hd++) {
                if (m > 0 && (hd == 1 || hd == 2)) continue;  // h0 alone / dht alone: default mode
                tcase tc = base;
                tc.gk = modes[m][0];
                tc.bk = modes[m][1];
                tc.h0 = hd & 1;
                tc.dht = hd & 2;
                fd_case(tc, false, seed++);
            }
        const tcase ch1 = {2, 11, 2, 4, 5, 4, GK_FD, BK_FD, true, true};
        const tcase ch2 = {2, 11, 2, 4, 5, 4, GK_FD, BK_FD2, false, false};
        fd_case(ch1, true, seed++);
        fd_case(ch2, true, seed++);
    }

    // 2 + 3. chunked forward and backward == token-level (rel L2 <= 1e-10 per tensor)
    printf("\n== chunked vs token-level, rel L2 per tensor (tol 1e-10; '-' = not applicable)\n");
    // (a) every T x C at (Dk, Dv) = (32, 64), gates near 0 and near -20
    {
        const int Ts[] = {1, 15, 63, 64, 65, 300}, Cs[] = {16, 32, 64};
        const int bks[] = {BK_NEAR1, BK_NEAR0, BK_NEAR2};
        int i = 0;
        for (int a = 0; a < 6; a++)
            for (int c = 0; c < 3; c++)
                for (int gk = GK_NEAR0; gk <= GK_NEAR20; gk++, i++) {
                    tcase tc = {1, Ts[a], 2, 32, 64, Cs[c], gk, bks[i % 3], (i / 3) % 2, (i / 6) % 2};
                    cmp_case(tc, seed++);
                }
    }
    // (b) every head-dim pair at T = 65 (C = 32) and T = 300 (C = 64)
    {
        const int dims[6][2] = {{32, 32}, {32, 64}, {64, 64}, {64, 128}, {128, 128}, {128, 256}};
        for (int d = 0; d < 6; d++) {
            tcase t1 = {1, 65, 2, dims[d][0], dims[d][1], 32, GK_NEAR0, BK_NEAR1, true, true};
            tcase t2 = {1, 300, 1, dims[d][0], dims[d][1], 64, GK_NEAR20, d % 2 ? BK_NEAR2 : BK_NEAR1,
                        true, true};
            cmp_case(t1, seed++);
            cmp_case(t2, seed++);
        }
    }
    // (c) every gate x beta/mode setting, at two shapes, with and without h0 / dht
    for (int gk = GK_NEAR0; gk <= GK_OFF; gk++)
        for (int bk = BK_NEAR0; bk <= BK_OFF; bk++) {
            for (int hd = 0; hd < 4; hd++) {
                tcase tc = {2, 63, 2, 32, 32, 16, gk, bk, hd & 1, (hd & 2) != 0};
                cmp_case(tc, seed++);
            }
            for (int hd = 0; hd < 4; hd += 3) {
                tcase tc = {1, 65, 2, 64, 64, 32, gk, bk, hd & 1, (hd & 2) != 0};
                cmp_case(tc, seed++);
            }
        }

    printf("\nworst rel L2 over all cases:      ");
    for (int i = 0; i < NQ; i++) printf(" %s %.1e", qname[i], worst_all[i]);
    printf("\nworst rel L2 with g near -20:     ");
    for (int i = 0; i < NQ; i++) printf(" %s %.1e", qname[i], worst_g20[i]);
    printf("\n(%.1f s)\n", gdn_now() - t0);
    return gc_finish("test_gdn_cpu");
}
