// test_doc_reset.c — documents packed into rows (model.doc_reset, fwd_cpu.h "documents"), float64:
//   1. each token-mixing op with doc starts against the op run on each document alone (rel L2
//      <= 1e-12): conv1d and conv_silu (strided) forward and backward, RoPE, sliding-window and
//      full attention forward and backward, the gated delta rule chunked and token by token,
//      forward and backward with h0 and dht; documents of 1, 63, 64, 65 and 300 tokens starting
//      at offsets 0, 1, 17 and 63 of a 64-token chunk, several per row, B = 3, gates near 0 and
//      near -20; and the chunked rule with documents against the token recurrence with them;
//   2. the backwards with documents against finite differences (each op, and the whole tiny
//      model of each pattern), with starts that cut the chunks;
//   3. all-zero doc starts give the ops' and the model's results of no doc starts, bit for bit;
//   4. model.doc_positions = false keeps absolute RoPE positions (the model hands RoPE no doc
//      starts, attention and the other mixers still get them), model.doc_reset = false none;
//   and the whole model on packed rows against the model on each document alone, and
//   doc_starts_check on broken arrays.
#include "testutil.h"
#include "tiny_model.h"
#include "../src/bwd/bwd_cpu.h"
#include "../src/model/model.h"

// ---- documents -----------------------------------------------------------------------------
// Row b's documents from a list of lengths ending with 0; the rest of the row is one more.
static int32_t *docs_make(int B, int T, const int *const *lens) {
    int32_t *ds = gdn_malloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int t = 0;
        for (const int *l = lens[b]; *l && t < T; l++)
            for (int s = t; t < T && t < s + *l; t++) ds[(size_t)b * T + t] = s;
        for (int s = t; t < T; t++) ds[(size_t)b * T + t] = s;
    }
    char err[256];
    if (!doc_starts_check(ds, B, T, err, sizeof err)) gdn_die("docs_make: %s", err);
    return ds;
}
static int32_t *docs_zero(int B, int T) {
    int32_t *ds = gdn_malloc((size_t)B * T * sizeof(int32_t));
    memset(ds, 0, (size_t)B * T * sizeof(int32_t));
    return ds;
}
// The test's rows (T = 560, chunk 64): lengths 1, 63, 64, 65, 300 each at least once, starts at
// chunk offsets 0, 1, 17, 63 (row 0: 0 1 64 128 193 493; row 1: 0 17 63 64 129 429 492;
// row 2: 0 63 363 364 428 493)
enum { BIG_B = 3, BIG_T = 560, BIG_C = 64 };
static const int row0[] = {1, 63, 64, 65, 300, 0}, row1[] = {17, 46, 1, 65, 300, 63, 0},
                 row2[] = {63, 300, 1, 64, 65, 0};
static const int *const big_rows[BIG_B] = {row0, row1, row2};
// FD rows (T = 11, chunk 4): row 0 docs at 0 3 4 9, row 1 at 0 5 6 (inside and on chunk edges)
enum { FD_B = 2, FD_T = 11, FD_C = 4 };
static const int fd0[] = {3, 1, 5, 0}, fd1[] = {5, 1, 0};
static const int *const fd_rows[FD_B] = {fd0, fd1};

// Copy rows [s, s+len) of row b of a (B,T,w) tensor to / from a packed (len, w) one.
static void rows_get(double *dst, const double *src, int T, int w, int b, int s, int len) {
    memcpy(dst, src + ((size_t)b * T + s) * w, (size_t)len * w * sizeof(double));
}
static void rows_put(double *dst, const double *src, int T, int w, int b, int s, int len) {
    memcpy(dst + ((size_t)b * T + s) * w, src, (size_t)len * w * sizeof(double));
}
#define FOR_DOCS(ds, B, T)                                            \
    for (int b = 0; b < (B); b++)                                     \
        for (int s = 0, e = 0, len = 0; s < (T); s = e)               \
            if ((e = doc_end(ds, T, b, s)), (len = e - s), 1)

static bool same_bits(const double *a, const double *b, size_t n) {
    return memcmp(a, b, n * sizeof(double)) == 0;
}
static void check_bits(const char *what, const double *a, const double *b, size_t n) {
    check_row(same_bits(a, b, n), what, "bitwise");
}

// ---- 1. ops with documents = ops on each document alone ---------------------------------------
static void test_conv(const int32_t *ds, int B, int T, rng_t *r) {
    const int C = 12, K = 4;
    const size_t ld = 20, n = (size_t)B * T * C;
    double *x = dalloc((size_t)B * T * ld), *w = dalloc((size_t)C * K), *dy = dalloc(n);
    double *y = dalloc(n), *yr = dalloc(n), *dx = dalloc((size_t)B * T * ld);
    double *dxr = dalloc((size_t)B * T * ld), *dw = dalloc((size_t)C * K), *dwr = dalloc((size_t)C * K);
    double *xd = dalloc((size_t)T * ld), *td = dalloc((size_t)T * ld), *td2 = dalloc((size_t)T * ld);
    fill_normal(x, (size_t)B * T * ld, r, 1.0);
    fill_normal(w, (size_t)C * K, r, 0.5);
    fill_normal(dy, n, r, 1.0);
    printf("\n== conv1d with documents vs each document alone (B=%d T=%d C=%d K=%d)\n", B, T, C, K);
    // plain conv1d on packed x (the first C columns of the strided x, packed)
    double *xp = dalloc(n);
    for (size_t i = 0; i < (size_t)B * T; i++) memcpy(xp + i * C, x + i * ld, C * sizeof(double));
    conv1d_fwd_docs_cpu(y, xp, w, B, T, C, K, ds);
    memset(dw, 0, C * K * sizeof(double));
    conv1d_bwd_docs_cpu(dx, dw, dy, xp, w, B, T, C, K, ds);
    memset(dwr, 0, C * K * sizeof(double));
    FOR_DOCS(ds, B, T) {
        rows_get(xd, xp, T, C, b, s, len);
        conv1d_fwd_cpu(td, xd, w, 1, len, C, K);
        rows_put(yr, td, T, C, b, s, len);
        rows_get(td, dy, T, C, b, s, len);
        conv1d_bwd_cpu(td2, dwr, td, xd, w, 1, len, C, K);
        rows_put(dxr, td2, T, C, b, s, len);
    }
    check_close("conv1d_fwd_docs y", y, yr, n, 1e-12);
    check_close("conv1d_bwd_docs dx", dx, dxr, n, 1e-12);
    check_close("conv1d_bwd_docs dw (sum over the documents)", dw, dwr, (size_t)C * K, 1e-12);
    // conv_silu on the strided x (row stride ld), dx strided
    conv_silu_fwd_docs_cpu(y, x, w, B, T, C, K, ld, ds);
    memset(dw, 0, C * K * sizeof(double));
    memset(dx, 0, (size_t)B * T * ld * sizeof(double));
    memset(dxr, 0, (size_t)B * T * ld * sizeof(double));
    conv_silu_bwd_docs_cpu(dx, dw, dy, x, w, B, T, C, K, ld, ds);
    memset(dwr, 0, C * K * sizeof(double));
    FOR_DOCS(ds, B, T) {
        const double *xv = x + ((size_t)b * T + s) * ld;  // the document's strided view
        conv_silu_fwd_cpu(td, xv, w, 1, len, C, K, ld);
        rows_put(yr, td, T, C, b, s, len);
        rows_get(td, dy, T, C, b, s, len);
        conv_silu_bwd_cpu(dxr + ((size_t)b * T + s) * ld, dwr, td, xv, w, 1, len, C, K, ld);
    }
    check_close("conv_silu_fwd_docs y (row stride 20)", y, yr, n, 1e-12);
    check_close("conv_silu_bwd_docs dx (row stride 20)", dx, dxr, (size_t)B * T * ld, 1e-12);
    check_close("conv_silu_bwd_docs dw", dw, dwr, (size_t)C * K, 1e-12);
    double *bufs[] = {x, w, dy, y, yr, dx, dxr, dw, dwr, xd, td, td2, xp};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

static void test_rope(const int32_t *ds, int B, int T, rng_t *r) {
    const int H = 2, D = 16, w = H * D;
    const size_t n = (size_t)B * T * w;
    double *x = dalloc(n), *y = dalloc(n), *yr = dalloc(n), *xd = dalloc((size_t)T * w),
           *td = dalloc((size_t)T * w);
    fill_normal(x, n, r, 1.0);
    printf("\n== RoPE with documents vs each document alone (H=%d D=%d)\n", H, D);
    for (int dir = 0; dir < 2; dir++) {
        if (dir == 0) rope_fwd_docs_cpu(y, x, B, T, H, D, 10000.0, ds);
        else rope_bwd_docs_cpu(y, x, B, T, H, D, 10000.0, ds);
        FOR_DOCS(ds, B, T) {
            rows_get(xd, x, T, w, b, s, len);
            if (dir == 0) rope_fwd_cpu(td, xd, 1, len, H, D, 10000.0);
            else rope_bwd_cpu(td, xd, 1, len, H, D, 10000.0);
            rows_put(yr, td, T, w, b, s, len);
        }
        check_close(dir == 0 ? "rope_fwd_docs (position t - s)" : "rope_bwd_docs", y, yr, n, 1e-12);
    }
    // NULL: the absolute position t (rope_fwd_cpu of the whole row)
    rope_fwd_docs_cpu(y, x, B, T, H, D, 10000.0, NULL);
    rope_fwd_cpu(yr, x, B, T, H, D, 10000.0);
    check_bits("rope_fwd_docs, doc_start NULL = rope_fwd_cpu (absolute positions)", y, yr, n);
    double *bufs[] = {x, y, yr, xd, td};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

static void test_attention(const int32_t *ds, int B, int T, int window, rng_t *r) {
    const int H = 2, D = 16, w = H * D;
    const size_t n = (size_t)B * T * w;
    const double scale = 1.0 / sqrt(D);
    double *q = dalloc(n), *k = dalloc(n), *v = dalloc(n), *dO = dalloc(n), *o = dalloc(n),
           *orf = dalloc(n), *lse = dalloc((size_t)B * H * T), *lser = dalloc((size_t)B * H * T);
    double *dq = dalloc(n), *dk = dalloc(n), *dv = dalloc(n), *dqr = dalloc(n), *dkr = dalloc(n),
           *dvr = dalloc(n);
    const size_t nd = (size_t)T * w;
    double *qd = dalloc(nd), *kd = dalloc(nd), *vd = dalloc(nd), *od = dalloc(nd),
           *dOd = dalloc(nd), *ld_ = dalloc((size_t)H * T), *g1 = dalloc(nd), *g2 = dalloc(nd),
           *g3 = dalloc(nd);
    fill_normal(q, n, r, 1.0);
    fill_normal(k, n, r, 1.0);
    fill_normal(v, n, r, 1.0);
    fill_normal(dO, n, r, 1.0);
    printf("\n== attention with documents vs each document alone (window %d%s, H=%d D=%d)\n",
           window, window >= T ? ": full" : "", H, D);
    attention_fwd_docs_cpu(o, lse, q, k, v, B, T, H, D, window, scale, ds);
    attention_bwd_docs_cpu(dq, dk, dv, dO, q, k, v, o, lse, B, T, H, D, window, scale, ds);
    FOR_DOCS(ds, B, T) {
        rows_get(qd, q, T, w, b, s, len);
        rows_get(kd, k, T, w, b, s, len);
        rows_get(vd, v, T, w, b, s, len);
        rows_get(dOd, dO, T, w, b, s, len);
        const int wd = window >= T ? len : window;  // full attention of the document
        attention_fwd_cpu(od, ld_, qd, kd, vd, 1, len, H, D, wd, scale);
        attention_bwd_cpu(g1, g2, g3, dOd, qd, kd, vd, od, ld_, 1, len, H, D, wd, scale);
        rows_put(orf, od, T, w, b, s, len);
        rows_put(dqr, g1, T, w, b, s, len);
        rows_put(dkr, g2, T, w, b, s, len);
        rows_put(dvr, g3, T, w, b, s, len);
        for (int h = 0; h < H; h++)  // lse (B,H,T)
            memcpy(lser + ((size_t)b * H + h) * T + s, ld_ + (size_t)h * len, len * sizeof(double));
    }
    check_close("attention_fwd_docs o", o, orf, n, 1e-12);
    check_close("attention_fwd_docs lse", lse, lser, (size_t)B * H * T, 1e-12);
    check_close("attention_bwd_docs dq", dq, dqr, n, 1e-12);
    check_close("attention_bwd_docs dk", dk, dkr, n, 1e-12);
    check_close("attention_bwd_docs dv", dv, dvr, n, 1e-12);
    double *bufs[] = {q, k, v, dO, o, orf, lse, lser, dq, dk, dv, dqr, dkr, dvr,
                      qd, kd, vd, od, dOd, ld_, g1, g2, g3};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

// The gated delta rule's tensors, inputs and outputs, for one shape.
typedef struct {
    int B, T, H, Dk, Dv, C;
    double *q, *k, *v, *g, *beta, *h0, *dO, *dht;       // inputs
    double *o, *ht, *dq, *dk, *dv, *dg, *dbeta, *dh0;   // outputs
} gdn_set;

static void l2rows(double *x, size_t rows, int D, double scale) {
    for (size_t i = 0; i < rows; i++) {
        double *xr = x + i * D, s = 0;
        for (int e = 0; e < D; e++) s += xr[e] * xr[e];
        for (int e = 0; e < D; e++) xr[e] *= scale / sqrt(s);
    }
}
static gdn_set gdn_set_make(int B, int T, int H, int Dk, int Dv, int C, double glo, double ghi,
                            rng_t *r) {
    gdn_set S = {.B = B, .T = T, .H = H, .Dk = Dk, .Dv = Dv, .C = C};
    const size_t N = (size_t)B * T * H, ns = (size_t)B * H * Dk * Dv;
    double **in[] = {&S.q, &S.k, &S.dq, &S.dk}, **iv[] = {&S.v, &S.dO, &S.o, &S.dv},
           **ig[] = {&S.g, &S.beta, &S.dg, &S.dbeta}, **is[] = {&S.h0, &S.dht, &S.ht, &S.dh0};
    for (int i = 0; i < 4; i++) {
        *in[i] = dalloc(N * Dk);
        *iv[i] = dalloc(N * Dv);
        *ig[i] = dalloc(N);
        *is[i] = dalloc(ns);
    }
    fill_normal(S.q, N * Dk, r, 1.0);
    fill_normal(S.k, N * Dk, r, 1.0);
    l2rows(S.q, N, Dk, 1.0 / sqrt(Dk));
    l2rows(S.k, N, Dk, 1.0);
    fill_normal(S.v, N * Dv, r, 1.0);
    fill_normal(S.dO, N * Dv, r, 1.0);
    fill_uniform(S.g, N, r, glo, ghi);
    fill_uniform(S.beta, N, r, 0.1, 0.9);
    fill_normal(S.h0, ns, r, 0.3);
    fill_normal(S.dht, ns, r, 1.0);
    return S;
}
static void gdn_set_free(gdn_set *S) {
    double *bufs[] = {S->q, S->k, S->v, S->g, S->beta, S->h0, S->dO, S->dht,
                      S->o, S->ht, S->dq, S->dk, S->dv, S->dg, S->dbeta, S->dh0};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}
static gdn_cpu_params gdn_set_params(const gdn_set *S, const int32_t *ds) {
    gdn_cpu_params p = {
        .B = S->B, .T = S->T, .H = S->H, .Dk = S->Dk, .Dv = S->Dv, .chunk = S->C,
        .mode = {true, true, false}, .q = S->q, .k = S->k, .v = S->v, .g = S->g,
        .beta = S->beta, .h0 = S->h0, .o = S->o, .ht = S->ht, .dO = S->dO, .dht = S->dht,
        .dq = S->dq, .dk = S->dk, .dv = S->dv, .dg = S->dg, .dbeta = S->dbeta, .dh0 = S->dh0,
        .doc_start = ds,
    };
    return p;
}
// Forward then backward of p, by chunks or token by token.
static void gdn_fwd_bwd(gdn_cpu_params *p, bool chunked) {
    if (chunked) {
        gdn_chunk_fwd_cpu(p);
        gdn_chunk_bwd_cpu(p);
    } else {
        gdn_token_fwd_cpu(p);
        gdn_token_bwd_cpu(p);
    }
}
// The outputs of a set: o, ht, dq, dk, dv, dg, dbeta, dh0 with their sizes.
enum { GDN_NOUT = 8 };
static const char *gdn_out_name[GDN_NOUT] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
static void gdn_outs(const gdn_set *S, double **out, size_t *n) {
    const size_t N = (size_t)S->B * S->T * S->H, ns = (size_t)S->B * S->H * S->Dk * S->Dv;
    double *o[GDN_NOUT] = {S->o, S->ht, S->dq, S->dk, S->dv, S->dg, S->dbeta, S->dh0};
    size_t m[GDN_NOUT] = {N * S->Dv, ns, N * S->Dk, N * S->Dk, N * S->Dv, N, N, ns};
    for (int i = 0; i < GDN_NOUT; i++) out[i] = o[i], n[i] = m[i];
}

// One document of set S (row b, [s, s+len)) copied into a set of B = 1, T = len; h0 only for
// the document at 0, dht only for the row's last one.
static void gdn_doc_get(gdn_set *D, const gdn_set *S, int b, int s, int len) {
    const int T = S->T, H = S->H;
    D->T = len;
    rows_get(D->q, S->q, T, H * S->Dk, b, s, len);
    rows_get(D->k, S->k, T, H * S->Dk, b, s, len);
    rows_get(D->v, S->v, T, H * S->Dv, b, s, len);
    rows_get(D->dO, S->dO, T, H * S->Dv, b, s, len);
    rows_get(D->g, S->g, T, H, b, s, len);
    rows_get(D->beta, S->beta, T, H, b, s, len);
    const size_t ns = (size_t)H * S->Dk * S->Dv;
    memcpy(D->h0, S->h0 + b * ns, ns * sizeof(double));
    memcpy(D->dht, S->dht + b * ns, ns * sizeof(double));
}
static void gdn_doc_put(gdn_set *R, const gdn_set *D, int b, int s, int len, bool first,
                        bool last) {
    const int T = R->T, H = R->H;
    const size_t ns = (size_t)H * R->Dk * R->Dv;
    rows_put(R->o, D->o, T, H * R->Dv, b, s, len);
    rows_put(R->dq, D->dq, T, H * R->Dk, b, s, len);
    rows_put(R->dk, D->dk, T, H * R->Dk, b, s, len);
    rows_put(R->dv, D->dv, T, H * R->Dv, b, s, len);
    rows_put(R->dg, D->dg, T, H, b, s, len);
    rows_put(R->dbeta, D->dbeta, T, H, b, s, len);
    if (first) memcpy(R->dh0 + b * ns, D->dh0, ns * sizeof(double));
    if (last) memcpy(R->ht + b * ns, D->ht, ns * sizeof(double));
}

static void test_gdn(const int32_t *ds, int B, int T, double glo, double ghi, const char *gname,
                     rng_t *r) {
    const int H = 2, Dk = 16, Dv = 24, C = BIG_C;
    gdn_set S = gdn_set_make(B, T, H, Dk, Dv, C, glo, ghi, r);
    gdn_set R = gdn_set_make(B, T, H, Dk, Dv, C, glo, ghi, r);  // reference outputs
    gdn_set D = gdn_set_make(1, T, H, Dk, Dv, C, glo, ghi, r);  // one document
    gdn_set K = gdn_set_make(B, T, H, Dk, Dv, C, glo, ghi, r);  // chunked outputs, for token vs chunk
    double *out[GDN_NOUT], *ref[GDN_NOUT], *chk[GDN_NOUT];
    size_t n[GDN_NOUT];
    printf("\n== gated delta rule with documents vs each document alone (H=%d Dk=%d Dv=%d chunk "
           "%d, %s, h0 and dht)\n", H, Dk, Dv, C, gname);
    for (int chunked = 1; chunked >= 0; chunked--) {
        gdn_cpu_params p = gdn_set_params(&S, ds);
        gdn_fwd_bwd(&p, chunked);
        FOR_DOCS(ds, B, T) {
            gdn_doc_get(&D, &S, b, s, len);
            gdn_cpu_params pd = gdn_set_params(&D, NULL);
            if (s != 0) pd.h0 = NULL, pd.dh0 = NULL;
            if (e != T) pd.ht = NULL, pd.dht = NULL;
            gdn_fwd_bwd(&pd, chunked);
            gdn_doc_put(&R, &D, b, s, len, s == 0, e == T);
        }
        gdn_outs(&S, out, n);
        gdn_outs(&R, ref, n);
        gdn_outs(&K, chk, n);
        for (int i = 0; i < GDN_NOUT; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s %s", chunked ? "gdn_chunk" : "gdn_token", gdn_out_name[i]);
            check_close(what, out[i], ref[i], n[i], 1e-12);
            if (chunked) memcpy(chk[i], out[i], n[i] * sizeof(double));
        }
    }
    // the two algorithms with documents agree (rounding of chunk vs token order only)
    for (int i = 0; i < GDN_NOUT; i++) {
        char what[96];
        snprintf(what, sizeof what, "gdn_chunk with documents = gdn_token with them: %s", gdn_out_name[i]);
        check_close(what, chk[i], out[i], n[i], 1e-10);
    }
    gdn_set_free(&S);
    gdn_set_free(&R);
    gdn_set_free(&D);
    gdn_set_free(&K);
}

// ---- 2. finite differences ---------------------------------------------------------------------
typedef struct {
    int kind;  // 0 conv_silu, 1 attention (window), 2 attention (full), 3 rope, 4 gdn chunk, 5 gdn token
    const int32_t *ds;
    int B, T, C, K, H, D;
    size_t ld;
    double *x, *w, *y, *R;           // conv: x (B,T,ld), w, y (B,T,C); R (out)
    double *q, *k, *v, *o, *lse;     // attention / rope (x = q)
    gdn_set G;
    double *Rht;
} fd_ctx;

static double fd_loss(void *vc) {
    fd_ctx *c = vc;
    const size_t na = (size_t)c->B * c->T * c->H * c->D;
    switch (c->kind) {
    case 0:
        conv_silu_fwd_docs_cpu(c->y, c->x, c->w, c->B, c->T, c->C, c->K, c->ld, c->ds);
        return dot(c->y, c->R, (size_t)c->B * c->T * c->C);
    case 1:
    case 2:
        attention_fwd_docs_cpu(c->o, c->lse, c->q, c->k, c->v, c->B, c->T, c->H, c->D,
                               c->kind == 1 ? 3 : c->T, 0.7, c->ds);
        return dot(c->o, c->R, na);
    case 3:
        rope_fwd_docs_cpu(c->o, c->q, c->B, c->T, c->H, c->D, 100.0, c->ds);
        return dot(c->o, c->R, na);
    default: {
        gdn_cpu_params p = gdn_set_params(&c->G, c->ds);
        if (c->kind == 4) gdn_chunk_fwd_cpu(&p);
        else gdn_token_fwd_cpu(&p);
        const gdn_set *G = &c->G;
        return dot(G->o, G->dO, (size_t)G->B * G->T * G->H * G->Dv) +
               dot(G->ht, G->dht, (size_t)G->B * G->H * G->Dk * G->Dv);
    }
    }
}

static void test_fd_ops(const int32_t *ds, rng_t *r) {
    const int B = FD_B, T = FD_T;
    const double tol = 1e-7;
    gc_header("op backward with documents vs finite differences (B=2 T=11, docs at 0 3 4 9 | 0 5 6)");
    {  // conv_silu, strided
        fd_ctx c = {.kind = 0, .ds = ds, .B = B, .T = T, .C = 5, .K = 4, .ld = 7};
        const size_t nx = (size_t)B * T * c.ld, ny = (size_t)B * T * c.C;
        c.x = dalloc(nx);
        c.w = dalloc(c.C * c.K);
        c.y = dalloc(ny);
        c.R = dalloc(ny);
        double *dx = dalloc(nx), *dw = dalloc(c.C * c.K);
        fill_normal(c.x, nx, r, 1.0);
        fill_normal(c.w, c.C * c.K, r, 0.6);
        fill_normal(c.R, ny, r, 1.0);
        memset(dx, 0, nx * sizeof(double));
        memset(dw, 0, c.C * c.K * sizeof(double));
        conv_silu_bwd_docs_cpu(dx, dw, c.R, c.x, c.w, B, T, c.C, c.K, c.ld, ds);
        for (size_t i = 0; i < (size_t)B * T; i++)  // columns past C are not the op's input
            for (size_t j = c.C; j < c.ld; j++) dx[i * c.ld + j] = 0;
        gc_check("conv_silu_docs", "dx", c.x, nx, dx, fd_loss, &c, 0, tol, r);
        gc_check("conv_silu_docs", "dw", c.w, c.C * c.K, dw, fd_loss, &c, 0, tol, r);
        free(c.x), free(c.w), free(c.y), free(c.R), free(dx), free(dw);
    }
    for (int kind = 1; kind <= 3; kind++) {  // attention window 3, full; rope
        fd_ctx c = {.kind = kind, .ds = ds, .B = B, .T = T, .H = 2, .D = 4};
        const size_t n = (size_t)B * T * c.H * c.D;
        c.q = dalloc(n), c.k = dalloc(n), c.v = dalloc(n), c.o = dalloc(n), c.R = dalloc(n);
        c.lse = dalloc((size_t)B * c.H * T);
        double *dq = dalloc(n), *dk = dalloc(n), *dv = dalloc(n);
        fill_normal(c.q, n, r, 1.0);
        fill_normal(c.k, n, r, 1.0);
        fill_normal(c.v, n, r, 1.0);
        fill_normal(c.R, n, r, 1.0);
        const char *op = kind == 1 ? "attention_docs (window 3)" : kind == 2 ? "attention_docs (full)" : "rope_docs";
        if (kind < 3) {
            fd_loss(&c);
            attention_bwd_docs_cpu(dq, dk, dv, c.R, c.q, c.k, c.v, c.o, c.lse, B, T, c.H, c.D,
                                   kind == 1 ? 3 : T, 0.7, ds);
            gc_check(op, "dq", c.q, n, dq, fd_loss, &c, 0, tol, r);
            gc_check(op, "dk", c.k, n, dk, fd_loss, &c, 0, tol, r);
            gc_check(op, "dv", c.v, n, dv, fd_loss, &c, 0, tol, r);
        } else {
            rope_bwd_docs_cpu(dq, c.R, B, T, c.H, c.D, 100.0, ds);
            gc_check(op, "dx", c.q, n, dq, fd_loss, &c, 0, tol, r);
        }
        double *bufs[] = {c.q, c.k, c.v, c.o, c.R, c.lse, dq, dk, dv};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
    for (int kind = 4; kind <= 5; kind++) {  // gdn chunked (chunk 4), token; h0 and dht
        fd_ctx c = {.kind = kind, .ds = ds};
        c.G = gdn_set_make(B, T, 2, 4, 5, FD_C, -1.0, -0.05, r);
        gdn_cpu_params p = gdn_set_params(&c.G, ds);
        if (kind == 4) gdn_chunk_bwd_cpu(&p);
        else gdn_token_bwd_cpu(&p);
        const char *op = kind == 4 ? "gdn_chunk_docs (chunk 4)" : "gdn_token_docs";
        double *out[GDN_NOUT];
        size_t n[GDN_NOUT];
        gdn_outs(&c.G, out, n);
        gdn_set *G = &c.G;
        double *in[] = {G->q, G->k, G->v, G->g, G->beta, G->h0};
        const int grad_of[] = {2, 3, 4, 5, 6, 7};  // dq dk dv dg dbeta dh0
        const size_t nin[] = {n[2], n[3], n[4], n[5], n[6], n[7]};
        for (int i = 0; i < 6; i++)
            gc_check(op, gdn_out_name[grad_of[i]], in[i], nin[i], out[grad_of[i]], fd_loss, &c, 0,
                     tol, r);
        gdn_set_free(&c.G);
    }
}

// ---- 3., 4. and the model ---------------------------------------------------------------------
// A spy on the CPU backend: which doc_start the model hands RoPE, attention and the GDN.
static const int32_t *seen_rope, *seen_attn, *seen_gdn, *seen_conv;
static void spy_rope_fwd(void *y, const void *x, int B, int T, int H, int D, double base,
                         const int32_t *ds) {
    seen_rope = ds;
    backend_cpu.rope_fwd(y, x, B, T, H, D, base, ds);
}
static void spy_attention_fwd(void *o, void *lse, const void *q, const void *k, const void *v,
                              int B, int T, int H, int D, int window, double scale,
                              const int32_t *ds) {
    seen_attn = ds;
    backend_cpu.attention_fwd(o, lse, q, k, v, B, T, H, D, window, scale, ds);
}
static void spy_conv_silu_fwd(void *y, const void *x, const void *w, int B, int T, int C, int K,
                              size_t ld, const int32_t *ds) {
    seen_conv = ds;
    backend_cpu.conv_silu_fwd(y, x, w, B, T, C, K, ld, ds);
}
static void spy_gdn_fwd(const gdn_op *op) {
    seen_gdn = op->doc_start;
    backend_cpu.gdn_fwd(op);
}

static void batch_fill(int32_t *x, int32_t *y, size_t n, int V, rng_t *r) {
    for (size_t i = 0; i < n; i++) {
        x[i] = (int32_t)rng_below(r, (uint64_t)V);
        y[i] = (int32_t)rng_below(r, (uint64_t)V);
    }
}

// Loss and gradients of one forward + backward with doc starts ds (NULL: none set).
static double model_step(model *m, const int32_t *x, const int32_t *y, const int32_t *ds,
                         double *grads) {
    model_set_doc_starts(m, ds);
    model_zero_grads(m);
    m->dropout_key = 0xabc;
    double loss = model_forward_backward(m, x, y, 1.0 / m->N, true);
    memcpy(grads, m->grad_mem, m->n_elems * sizeof(double));
    return loss;
}

static void test_model_zero_starts(rng_t *r) {
    printf("\n== the model: all-zero doc starts = none, bit for bit (loss and every gradient)\n");
    const int B = 2, T = 40;
    for (int v = 0; v < 3; v++) {
        gdn_config c = tiny_config("GSA", 3);
        c.gdn_chunk_size = 8;
        c.dropout = 0.1;
        const char *what[] = {"GSA", "GSA, gdn.bwd_states = saved", "GSA, recompute full, fused projections"};
        if (v == 1) c.gdn_bwd_states = GDN_BWD_STATES_SAVED;
        if (v == 2) c.recompute = RECOMPUTE_FULL;
        backend be = backend_cpu;
        if (v == 2) be.fuse_projections = true;
        model *m = model_create(&c, &be, B, T);
        model_init_params(m, 7);
        int32_t *x = gdn_malloc(B * T * sizeof(int32_t)), *y = gdn_malloc(B * T * sizeof(int32_t));
        batch_fill(x, y, (size_t)B * T, m->V, r);
        int32_t *zero = docs_zero(B, T);
        double *g0 = dalloc(m->n_elems), *g1 = dalloc(m->n_elems);
        double l0 = model_step(m, x, y, NULL, g0), l1 = model_step(m, x, y, zero, g1);
        char detail[64];
        snprintf(detail, sizeof detail, "loss %.6f", l0);
        check_row(l0 == l1 && same_bits(g0, g1, m->n_elems), what[v], detail);
        free(x), free(y), free(zero), free(g0), free(g1);
        model_free(m);
    }
}

static void test_model_positions(rng_t *r) {
    printf("\n== the model: which doc starts each mixer gets (model.doc_reset, model.doc_positions)\n");
    const int B = 2, T = 12;
    const int ra[] = {5, 0}, rb[] = {3, 4, 0};
    const int *const rows[] = {ra, rb};
    int32_t *ds = docs_make(B, T, rows);
    backend spy = backend_cpu;
    spy.rope_fwd = spy_rope_fwd;
    spy.attention_fwd = spy_attention_fwd;
    spy.conv_silu_fwd = spy_conv_silu_fwd;
    spy.gdn_fwd = spy_gdn_fwd;
    for (int v = 0; v < 3; v++) {
        gdn_config c = tiny_config("GS", 2);
        c.doc_positions = v != 1;
        c.doc_reset = v != 2;
        model *m = model_create(&c, &spy, B, T);
        model_init_params(m, 3);
        int32_t *x = gdn_malloc(B * T * sizeof(int32_t)), *y = gdn_malloc(B * T * sizeof(int32_t));
        batch_fill(x, y, (size_t)B * T, m->V, r);
        model_set_doc_starts(m, ds);
        seen_rope = seen_attn = seen_gdn = seen_conv = (const int32_t *)1;
        model_eval_loss(m, x, y);
        bool ok;
        const char *what;
        if (v == 0) {
            what = "defaults: RoPE, attention, conv and GDN get the doc starts";
            ok = seen_rope && seen_attn && seen_gdn && seen_conv && seen_rope != (const int32_t *)1 &&
                 memcmp(seen_attn, ds, B * T * sizeof(int32_t)) == 0;
        } else if (v == 1) {
            what = "doc_positions = false: RoPE none (absolute), the others the starts";
            ok = !seen_rope && seen_attn && seen_gdn && seen_conv && seen_attn != (const int32_t *)1;
        } else {
            what = "doc_reset = false: no mixer gets doc starts";
            ok = !seen_rope && !seen_attn && !seen_gdn && !seen_conv;
        }
        check_row(ok, what, "");
        free(x), free(y);
        model_free(m);
    }
    free(ds);
}

// The model on packed rows: the loss of the tokens of one document (the other targets ignored)
// equals the model's loss on that document alone, a row of its own (B = 1, T = its length).
static void test_model_per_document(rng_t *r) {
    printf("\n== the model on packed rows vs on each document alone (T=40, chunk 8, window 4)\n");
    const int B = 2, T = 40;
    const int ra[] = {5, 8, 3, 1, 13, 0}, rb[] = {17, 1, 22, 0};
    const int *const rows[] = {ra, rb};
    int32_t *ds = docs_make(B, T, rows);
    const char *patterns[] = {"G", "S", "A", "GSA"};
    for (int pi = 0; pi < 4; pi++) {
        gdn_config c = tiny_config(patterns[pi], pi == 3 ? 3 : 2);
        c.gdn_chunk_size = 8;
        model *m = model_create(&c, &backend_cpu, B, T);
        model_init_params(m, 11);
        int32_t *x = gdn_malloc(B * T * sizeof(int32_t)), *y = gdn_malloc(B * T * sizeof(int32_t)),
                *yd = gdn_malloc(B * T * sizeof(int32_t));
        batch_fill(x, y, (size_t)B * T, m->V, r);
        double worst = 0;
        int ndocs = 0;
        FOR_DOCS(ds, B, T) {
            for (int i = 0; i < B * T; i++) yd[i] = -1;
            memcpy(yd + (size_t)b * T + s, y + (size_t)b * T + s, len * sizeof(int32_t));
            model_set_doc_starts(m, ds);
            double packed = model_eval_loss(m, x, yd);
            model *md = model_create(&c, &backend_cpu, 1, len);
            memcpy(md->param_mem, m->param_mem, m->n_elems * sizeof(double));
            double alone = model_eval_loss(md, x + (size_t)b * T + s, y + (size_t)b * T + s);
            model_free(md);
            worst = fmax(worst, fabs(packed - alone) / fmax(1.0, fabs(alone)));
            ndocs++;
        }
        char what[96], detail[64];
        snprintf(what, sizeof what, "pattern %s: %d documents' losses", patterns[pi], ndocs);
        snprintf(detail, sizeof detail, "worst rel %.1e", worst);
        check_row(worst <= 1e-12, what, detail);
        free(x), free(y), free(yd);
        model_free(m);
    }
    free(ds);
}

static void test_check(void) {
    printf("\n== doc_starts_check\n");
    char err[256];
    const int32_t good[] = {0, 0, 2, 2, 2, 5, 6, 6, 0, 1, 1, 1, 4, 4, 4, 4};
    check_row(doc_starts_check(good, 2, 8, err, sizeof err), "a valid array passes", "");
    const struct { int32_t v[8]; const char *what; } bad[] = {
        {{1, 1, 1, 1, 1, 1, 1, 1}, "row start not 0"},
        {{0, 0, 1, 1, 1, 1, 1, 1}, "start before its token's previous (1 at token 2)"},
        {{0, 0, 0, 5, 5, 5, 5, 5}, "start after the token (5 at token 3)"},
        {{0, 0, 2, 2, 0, 0, 0, 0}, "start going back (0 at token 4)"},
        {{0, 0, -1, -1, 0, 0, 0, 0}, "negative start"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bool ok = !doc_starts_check(bad[i].v, 1, 8, err, sizeof err) && strstr(err, "row 0");
        check_row(ok, bad[i].what, "rejected, names the row");
    }
    check_row(!doc_starts_check(bad[1].v, 1, 8, err, sizeof err) && strstr(err, "token 2"),
              "the message names the token", err);
}

// ---- 3. ops: zero starts = NULL bitwise -----------------------------------------------------
static void test_ops_zero_starts(rng_t *r) {
    printf("\n== ops: all-zero doc starts = none, bit for bit\n");
    const int B = 2, T = 70, C = 6, K = 4, H = 2, D = 8;
    const size_t ld = 9, nx = (size_t)B * T * ld, ny = (size_t)B * T * C, na = (size_t)B * T * H * D;
    int32_t *z = docs_zero(B, T);
    double *x = dalloc(nx), *w = dalloc(C * K), *dy = dalloc(ny), *y0 = dalloc(nx), *y1 = dalloc(nx),
           *dw0 = dalloc(C * K), *dw1 = dalloc(C * K);
    fill_normal(x, nx, r, 1.0);
    fill_normal(w, C * K, r, 0.5);
    fill_normal(dy, ny, r, 1.0);
    conv_silu_fwd_cpu(y0, x, w, B, T, C, K, ld);
    conv_silu_fwd_docs_cpu(y1, x, w, B, T, C, K, ld, z);
    check_bits("conv_silu_fwd", y0, y1, ny);
    memset(y0, 0, nx * sizeof(double)), memset(y1, 0, nx * sizeof(double));
    memset(dw0, 0, C * K * sizeof(double)), memset(dw1, 0, C * K * sizeof(double));
    conv_silu_bwd_cpu(y0, dw0, dy, x, w, B, T, C, K, ld);
    conv_silu_bwd_docs_cpu(y1, dw1, dy, x, w, B, T, C, K, ld, z);
    check_bits("conv_silu_bwd dx", y0, y1, nx);
    check_bits("conv_silu_bwd dw", dw0, dw1, C * K);
    free(x), free(w), free(dy), free(y0), free(y1), free(dw0), free(dw1);
    double *q = dalloc(na), *k = dalloc(na), *v = dalloc(na), *dO = dalloc(na),
           *o[2], *lse[2], *g[2][3];
    fill_normal(q, na, r, 1.0), fill_normal(k, na, r, 1.0), fill_normal(v, na, r, 1.0);
    fill_normal(dO, na, r, 1.0);
    for (int i = 0; i < 2; i++) {
        o[i] = dalloc(na), lse[i] = dalloc((size_t)B * H * T);
        for (int j = 0; j < 3; j++) g[i][j] = dalloc(na);
    }
    for (int full = 0; full < 2; full++) {
        const int win = full ? T : 16;
        attention_fwd_cpu(o[0], lse[0], q, k, v, B, T, H, D, win, 0.3);
        attention_fwd_docs_cpu(o[1], lse[1], q, k, v, B, T, H, D, win, 0.3, z);
        attention_bwd_cpu(g[0][0], g[0][1], g[0][2], dO, q, k, v, o[0], lse[0], B, T, H, D, win, 0.3);
        attention_bwd_docs_cpu(g[1][0], g[1][1], g[1][2], dO, q, k, v, o[1], lse[1], B, T, H, D, win,
                               0.3, z);
        bool ok = same_bits(o[0], o[1], na) && same_bits(lse[0], lse[1], (size_t)B * H * T);
        for (int j = 0; j < 3; j++) ok &= same_bits(g[0][j], g[1][j], na);
        check_row(ok, full ? "attention full: o, lse, dq, dk, dv" : "attention window 16: o, lse, dq, dk, dv",
                  "bitwise");
    }
    rope_fwd_cpu(o[0], q, B, T, H, D, 500.0);
    rope_fwd_docs_cpu(o[1], q, B, T, H, D, 500.0, z);
    check_bits("rope_fwd", o[0], o[1], na);
    rope_bwd_cpu(o[0], q, B, T, H, D, 500.0);
    rope_bwd_docs_cpu(o[1], q, B, T, H, D, 500.0, z);
    check_bits("rope_bwd", o[0], o[1], na);
    free(q), free(k), free(v), free(dO);
    for (int i = 0; i < 2; i++) {
        free(o[i]), free(lse[i]);
        for (int j = 0; j < 3; j++) free(g[i][j]);
    }
    free(z);
    // the gated delta rule, with the chunk-start states saved (hs) and h0 / dht
    const int Tg = 150, Cg = 64, Hg = 2, Dk = 8, Dv = 12;
    z = docs_zero(B, Tg);
    for (int tok = 0; tok < 2; tok++) {
        gdn_set S[2];
        double *hs[2];
        const size_t nhs = (size_t)B * Hg * GDN_CDIV(Tg, Cg) * Dk * Dv;
        for (int i = 0; i < 2; i++) {
            rng_t ri;
            rng_init(&ri, 555, 0);
            S[i] = gdn_set_make(B, Tg, Hg, Dk, Dv, Cg, -0.1, 0.0, &ri);
            hs[i] = tok ? NULL : dalloc(nhs);
            gdn_cpu_params p = gdn_set_params(&S[i], i ? z : NULL);
            p.hs = hs[i];
            gdn_fwd_bwd(&p, !tok);
        }
        double *a[GDN_NOUT], *bb[GDN_NOUT];
        size_t n[GDN_NOUT];
        gdn_outs(&S[0], a, n);
        gdn_outs(&S[1], bb, n);
        bool ok = tok || same_bits(hs[0], hs[1], nhs);
        for (int i = 0; i < GDN_NOUT; i++) ok &= same_bits(a[i], bb[i], n[i]);
        check_row(ok, tok ? "gdn_token: o, ht, every gradient" : "gdn_chunk (hs saved): o, ht, hs, every gradient",
                  "bitwise");
        for (int i = 0; i < 2; i++) gdn_set_free(&S[i]), free(hs[i]);
    }
    free(z);
}

int main(void) {
    double t0 = gdn_now();
    rng_t r;
    rng_init(&r, 31, 0);
    test_check();

    int32_t *big = docs_make(BIG_B, BIG_T, big_rows);
    test_conv(big, BIG_B, BIG_T, &r);
    test_rope(big, BIG_B, BIG_T, &r);
    test_attention(big, BIG_B, BIG_T, 50, &r);
    test_attention(big, BIG_B, BIG_T, BIG_T, &r);
    test_gdn(big, BIG_B, BIG_T, -0.02, 0.0, "gates near 0", &r);
    test_gdn(big, BIG_B, BIG_T, -21.0, -19.0, "gates near -20", &r);
    free(big);

    int32_t *fd = docs_make(FD_B, FD_T, fd_rows);
    test_fd_ops(fd, &r);
    printf("\n== the whole tiny model with documents vs finite differences (B=2 T=11 chunk 4)\n");
    const char *patterns[] = {"G", "S", "A", "GS"};
    for (int i = 0; i < 4; i++) {
        gdn_config c = tiny_config(patterns[i], i == 2 ? 1 : 2);
        int fails = model_gradcheck_docs(&c, FD_B, FD_T, 10, 1e-6, 4321 + i, fd, stdout);
        check_row(fails == 0, patterns[i], "model_gradcheck_docs");
    }
    free(fd);

    test_ops_zero_starts(&r);
    test_model_zero_starts(&r);
    test_model_positions(&r);
    test_model_per_document(&r);
    printf("\n(%.1f s)\n", gdn_now() - t0);
    return gc_finish("test_doc_reset");
}
