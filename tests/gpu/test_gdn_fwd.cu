// test_gdn_fwd.cu — the CUDA chunkwise GDN forward (src/fwd/gdn_chunk.cu) against the float64
// token recurrence (gdn_token_fwd_cpu, DESIGN 3.3) on fresh random inputs: q, k L2-normalised
// rows, v ~ N(0,1), g = log alpha either "mixed" (-g log-uniform in [1e-4, 20]: from near 0 to
// near -20) or "weak" (-g uniform in [0, 0.02]: long memory), beta in (0,1) or (0,2)
// (neg_eigval), h0 random or absent. Outputs o, ht (and h_states) are NaN-filled before each
// run. bf16 cases feed the reference the same bf16-rounded inputs.
// Pass: relative L2 error <= 5e-3 (bf16) / 1e-4 (fp32) for o, ht and h_states, nothing
// non-finite, nothing written past o. Sweeps T in {1, 63, 64, 65, 300, 4096}, B*H from 1 to
// 128, Dk in {64,128,256}, Dv in {Dk, 2Dk}, every mode (also over 4096 tokens), every dv_block;
// bf16 cases run both paths (fused: no workspace; prep kernel + workspace, P from it or not),
// each against the same reference. Every variant also runs states only (o = NULL, the
// backward's recompute), which must give bitwise the same h_states and ht as the run with o;
// prep-path variants also keep G and Δ~ (keep_g, keep_dt) and replay the states from them, again
// bitwise. Exit 77 (skipped) without a GPU. Usage: test_gdn_fwd [--seed N].
#include <pthread.h>
#include <stdint.h>
#include <cuda_runtime.h>

#include "gdn_test_io.h"
#include "../../src/fwd/fwd_cpu.h"
#include "../../src/fwd/gdn_cuda.h"

typedef struct {
    int B, T, H, Dk, Dv;
    gdn_dtype dt;
    bool gate, delta, neg;
    bool weak;    // weak gates (long memory) instead of mixed
    bool h0;      // random initial state
    bool states;  // also check h_states (needs B == 1)
} tcase;

// how the kernel is run: value-column block (0 = automatic), workspace (prep kernel) or not,
// P from the prep kernel (0 = automatic, 1 = yes, 2 = no)
typedef struct {
    int dvb;
    bool ws;
    int pp;
} tvariant;

// ---- the reference, one thread per batch entry -------------------------------------------
typedef struct {
    gdn_cpu_params p;
} ref_job;
static void *ref_run(void *arg) {
    gdn_token_fwd_cpu(&((ref_job *)arg)->p);
    return NULL;
}
static void ref_forward(const gdn_cpu_params *p) {
    const int B = p->B;
    ref_job *jobs = (ref_job *)gdn_malloc(sizeof(ref_job) * B);
    pthread_t *th = (pthread_t *)gdn_malloc(sizeof(pthread_t) * B);
    const size_t nk = (size_t)p->T * p->H * p->Dk, nv = (size_t)p->T * p->H * p->Dv,
                 ng = (size_t)p->T * p->H, ns = (size_t)p->H * p->Dk * p->Dv;
    for (int b = 0; b < B; b++) {
        gdn_cpu_params q = *p;
        q.B = 1;
        q.q = p->q + b * nk;
        q.k = p->k + b * nk;
        q.v = p->v + b * nv;
        q.g = p->g ? p->g + b * ng : NULL;
        q.beta = p->beta ? p->beta + b * ng : NULL;
        q.h0 = p->h0 ? p->h0 + b * ns : NULL;
        q.o = p->o + b * nv;
        q.ht = p->ht ? p->ht + b * ns : NULL;
        jobs[b].p = q;
        if (pthread_create(&th[b], NULL, ref_run, &jobs[b]) != 0) gdn_die("pthread_create failed");
    }
    for (int b = 0; b < B; b++)
        if (pthread_join(th[b], NULL) != 0) gdn_die("pthread_join failed");
    free(th);
    free(jobs);
}

static int n_cases = 0, n_fail = 0;

static void run_case(const tcase *c, uint64_t seed, const tvariant *vars, int nvars) {
    const int B = c->B, T = c->T, H = c->H, Dk = c->Dk, Dv = c->Dv;
    const size_t N = (size_t)B * T * H, nk = N * Dk, nv = N * Dv, ns = (size_t)B * H * Dk * Dv;
    const int NC = (T + GDN_CHUNK - 1) / GDN_CHUNK;
    rng_t r;
    rng_init(&r, seed, (uint64_t)n_cases);
    double *q = dalloc(nk), *k = dalloc(nk), *v = dalloc(nv), *g = dalloc(N), *beta = dalloc(N);
    double *h0 = c->h0 ? dalloc(ns) : NULL;
    fill_normal(q, nk, &r, 1.0);
    fill_normal(k, nk, &r, 1.0);
    l2norm_rows(q, N, Dk);
    l2norm_rows(k, N, Dk);
    fill_normal(v, nv, &r, 1.0);
    for (size_t i = 0; i < N; i++)
        g[i] = c->weak ? -0.02 * rng_uniform(&r) : -exp(log(1e-4) + (log(20.0) - log(1e-4)) * rng_uniform(&r));
    fill_uniform(beta, N, &r, 0.0, c->neg ? 2.0 : 1.0);
    if (h0) fill_normal(h0, ns, &r, 0.5);

    // device inputs (rounding q, k, v to the device dtype in place) and poisoned outputs
    void *dq = upload(q, nk, c->dt), *dk = upload(k, nk, c->dt), *dv = upload(v, nv, c->dt);
    float *dg, *dbeta, *dh0 = NULL, *dht, *dhs, *dht2, *dhs2;
    {
        float *tmp = (float *)gdn_malloc(N * 4);
        for (size_t i = 0; i < N; i++) { tmp[i] = (float)g[i]; g[i] = tmp[i]; }
        CUDA_CHECK(cudaMalloc(&dg, N * 4));
        CUDA_CHECK(cudaMemcpy(dg, tmp, N * 4, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < N; i++) { tmp[i] = (float)beta[i]; beta[i] = tmp[i]; }
        CUDA_CHECK(cudaMalloc(&dbeta, N * 4));
        CUDA_CHECK(cudaMemcpy(dbeta, tmp, N * 4, cudaMemcpyHostToDevice));
        free(tmp);
    }
    if (h0) {
        float *tmp = (float *)gdn_malloc(ns * 4);
        for (size_t i = 0; i < ns; i++) { tmp[i] = (float)h0[i]; h0[i] = tmp[i]; }
        CUDA_CHECK(cudaMalloc(&dh0, ns * 4));
        CUDA_CHECK(cudaMemcpy(dh0, tmp, ns * 4, cudaMemcpyHostToDevice));
        free(tmp);
    }
    double *o_ref = dalloc(nv), *ht_ref = dalloc(ns);
    gdn_cpu_params rp;
    memset(&rp, 0, sizeof rp);
    rp.B = B; rp.T = T; rp.H = H; rp.Dk = Dk; rp.Dv = Dv; rp.chunk = GDN_CHUNK;
    rp.mode.gate = c->gate; rp.mode.delta = c->delta; rp.mode.neg_eigval = c->neg;
    rp.q = q; rp.k = k; rp.v = v; rp.g = g; rp.beta = beta; rp.h0 = h0;
    rp.o = o_ref; rp.ht = ht_ref;
    ref_forward(&rp);

    const size_t esz = c->dt == GDN_DTYPE_BF16 ? 2 : 4;
    void *dout;
    CUDA_CHECK(cudaMalloc(&dout, nv * esz + 16));
    CUDA_CHECK(cudaMalloc(&dht, ns * 4));
    const size_t nhs = (size_t)B * H * NC * Dk * Dv;
    // chunk-start states are always stored (compared with the states-only run), checked
    // against the reference when c->states; the states-only run writes dhs2, dht2
    CUDA_CHECK(cudaMalloc(&dhs, nhs * 4 + 16));
    CUDA_CHECK(cudaMalloc(&dhs2, nhs * 4));
    CUDA_CHECK(cudaMalloc(&dht2, ns * 4));
    float *hs_a = (float *)gdn_malloc(nhs * 4), *hs_b = (float *)gdn_malloc(nhs * 4);
    float *ht_a = (float *)gdn_malloc(ns * 4), *ht_b = (float *)gdn_malloc(ns * 4);
    double *o = dalloc(nv), *ht = dalloc(ns);
    double *hs_ref = NULL;
    if (c->states) {  // chunk-start state n = final state of the prefix of n*C tokens (B == 1)
        hs_ref = dalloc(nhs);
        double *otmp = dalloc(nv), *htmp = dalloc((size_t)H * Dk * Dv);
        for (int n = 0; n < NC; n++) {
            gdn_cpu_params pp = rp;
            pp.T = n * GDN_CHUNK;
            pp.o = otmp;
            pp.ht = htmp;
            if (pp.T > 0) gdn_token_fwd_cpu(&pp);
            else if (h0) memcpy(htmp, h0, (size_t)H * Dk * Dv * sizeof(double));
            else memset(htmp, 0, (size_t)H * Dk * Dv * sizeof(double));
            for (int hh = 0; hh < H; hh++)
                memcpy(hs_ref + ((size_t)hh * NC + n) * Dk * Dv, htmp + (size_t)hh * Dk * Dv,
                       (size_t)Dk * Dv * sizeof(double));
        }
        free(otmp); free(htmp);
    }
    for (int vi = 0; vi < nvars; vi++) {
        const tvariant *va = &vars[vi];
        CUDA_CHECK(cudaMemset(dout, 0xff, nv * esz + 16));  // NaN in bf16 and fp32
        CUDA_CHECK(cudaMemset(dht, 0xff, ns * 4));
        CUDA_CHECK(cudaMemset(dhs, 0xff, nhs * 4 + 16));
        gdn_fwd_params p;
        memset(&p, 0, sizeof p);
        p.B = B; p.T = T; p.H = H; p.Dk = Dk; p.Dv = Dv;
        p.mode.gate = c->gate; p.mode.delta = c->delta; p.mode.neg_eigval = c->neg;
        p.dtype = c->dt;
        p.q = dq; p.k = dk; p.v = dv; p.g = dg; p.beta = dbeta; p.h0 = dh0;
        p.o = dout; p.ht = dht; p.h_states = dhs;
        p.dv_block = va->dvb;
        p.p_from_prep = va->pp;
        p.stream = 0;
        void *dws = NULL;
        const size_t wsb = gdn_chunk_fwd_workspace_bytes(&p);
        if (va->ws && wsb) {
            CUDA_CHECK(cudaMalloc(&dws, wsb));
            CUDA_CHECK(cudaMemset(dws, 0xff, wsb));
        }
        p.workspace = dws;
        const int dvb = gdn_chunk_fwd_dv_block(&p);
        gdn_chunk_fwd(&p);
        CUDA_CHECK(cudaDeviceSynchronize());
        download(o, dout, nv, c->dt);
        {
            float *tmp = (float *)gdn_malloc(ns * 4);
            CUDA_CHECK(cudaMemcpy(tmp, dht, ns * 4, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < ns; i++) ht[i] = tmp[i];
            free(tmp);
        }
        // the padding past o must stay poisoned (no write beyond the tensor)
        bool overrun = false;
        {
            unsigned char tail[16];
            CUDA_CHECK(cudaMemcpy(tail, (char *)dout + nv * esz, 16, cudaMemcpyDeviceToHost));
            for (int i = 0; i < 16; i++) overrun |= tail[i] != 0xff;
        }
        const double tol = c->dt == GDN_DTYPE_BF16 ? 5e-3 : 1e-4;
        const size_t bad = count_nonfinite(o, nv) + count_nonfinite(ht, ns);
        const double eo = rel_l2(o, o_ref, nv), eh = rel_l2(ht, ht_ref, ns);
        double es = 0;
        if (c->states) {
            double *hs = dalloc(nhs);
            float *tmp = (float *)gdn_malloc(nhs * 4);
            CUDA_CHECK(cudaMemcpy(tmp, dhs, nhs * 4, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < nhs; i++) hs[i] = tmp[i];
            free(tmp);
            es = rel_l2(hs, hs_ref, nhs);
            if (count_nonfinite(hs, nhs)) es = NAN;
            free(hs);
        }
        // states only (o = NULL; prep and workspace as above, the workspace poisoned again)
        CUDA_CHECK(cudaMemcpy(hs_a, dhs, nhs * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(ht_a, dht, ns * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemset(dhs2, 0xff, nhs * 4));
        CUDA_CHECK(cudaMemset(dht2, 0xff, ns * 4));
        if (dws) CUDA_CHECK(cudaMemset(dws, 0xff, wsb));
        gdn_fwd_params ps = p;
        ps.o = NULL;
        ps.h_states = dhs2;
        ps.ht = dht2;
        gdn_chunk_fwd(&ps);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(hs_b, dhs2, nhs * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(ht_b, dht2, ns * 4, cudaMemcpyDeviceToHost));
        const bool so_same = memcmp(hs_a, hs_b, nhs * 4) == 0 && memcmp(ht_a, ht_b, ns * 4) == 0;
        // The keep buffers (the prep path; what the model keeps for the backward's replay): the o
        // run writing G and Δ~ there gives bitwise the run above; then the states replayed from
        // keep_g and keep_dt (no workspace) bitwise those of the scan. All start poisoned.
        bool keep_same = true;
        if (dws) {
            size_t bg, bd;
            gdn_chunk_fwd_keep_bytes(&p, &bg, &bd);
            void *kd = NULL;
            float *kgp = NULL;
            CUDA_CHECK(cudaMalloc(&kgp, bg));
            CUDA_CHECK(cudaMalloc(&kd, bd + 16));
            CUDA_CHECK(cudaMemset(kgp, 0xff, bg));
            CUDA_CHECK(cudaMemset(kd, 0xff, bd + 16));
            unsigned char *oa = (unsigned char *)gdn_malloc(nv * esz), *ob = (unsigned char *)gdn_malloc(nv * esz);
            CUDA_CHECK(cudaMemcpy(oa, dout, nv * esz, cudaMemcpyDeviceToHost));
            auto poison = [&] {
                CUDA_CHECK(cudaMemset(dhs2, 0xff, nhs * 4));
                CUDA_CHECK(cudaMemset(dht2, 0xff, ns * 4));
                CUDA_CHECK(cudaMemset(dws, 0xff, wsb));
            };
            auto states_same = [&] {
                CUDA_CHECK(cudaDeviceSynchronize());
                CUDA_CHECK(cudaMemcpy(hs_b, dhs2, nhs * 4, cudaMemcpyDeviceToHost));
                CUDA_CHECK(cudaMemcpy(ht_b, dht2, ns * 4, cudaMemcpyDeviceToHost));
                return memcmp(hs_a, hs_b, nhs * 4) == 0 && memcmp(ht_a, ht_b, ns * 4) == 0;
            };
            poison();
            CUDA_CHECK(cudaMemset(dout, 0xff, nv * esz));
            gdn_fwd_params pt = p;
            pt.h_states = dhs2;
            pt.ht = dht2;
            pt.keep_g = kgp;
            pt.keep_dt = kd;
            gdn_chunk_fwd(&pt);
            keep_same = states_same();
            CUDA_CHECK(cudaMemcpy(ob, dout, nv * esz, cudaMemcpyDeviceToHost));
            keep_same = keep_same && memcmp(oa, ob, nv * esz) == 0;
            unsigned char tail[16];  // nothing written past Δ~
            CUDA_CHECK(cudaMemcpy(tail, (char *)kd + bd, 16, cudaMemcpyDeviceToHost));
            for (int i = 0; i < 16; i++) keep_same = keep_same && tail[i] == 0xff;
            poison();  // the replay
            gdn_fwd_params pp = ps;
            pp.workspace = NULL;
            pp.keep_g = kgp;
            pp.keep_dt = kd;
            pp.keep_ready = 1;
            gdn_chunk_fwd(&pp);
            keep_same = keep_same && states_same();
            free(oa);
            free(ob);
            CUDA_CHECK(cudaFree(kgp));
            CUDA_CHECK(cudaFree(kd));
        }
        const bool ok = bad == 0 && !overrun && eo <= tol && eh <= tol && es <= tol &&
                        isfinite(eo) && isfinite(eh) && isfinite(es) && so_same && keep_same;
        char mode[32], path[16];
        snprintf(mode, sizeof mode, "%s%s%s", c->gate ? "" : "nogate ", c->delta ? "" : "nodelta ",
                 c->neg ? "neg " : "");
        snprintf(path, sizeof path, "%s%s", dws ? "prep" : "fused",
                 dws ? (va->pp == 1 ? "+P" : va->pp == 2 ? "-P" : "") : "");
        printf("%-4s B%-2d T%-5d H%-3d dk%-3d dv%-3d %-6s dvb%-3d %-15s %-5s %-3s | o %.2e  ht %.2e",
               c->dt == GDN_DTYPE_BF16 ? "bf16" : "fp32", B, T, H, Dk, Dv, path, dvb,
               mode[0] ? mode : "default", c->weak ? "weak" : "mixed", h0 ? "h0" : "-", eo, eh);
        if (c->states) printf("  states %.2e", es);
        printf("  (tol %.0e)%s%s%s%s  %s\n", tol, bad ? "  NONFINITE" : "", overrun ? "  OVERRUN" : "",
               so_same ? "" : "  STATES-ONLY-DIFFER", keep_same ? "" : "  KEEP-DIFFER", ok ? "pass" : "FAIL");
        n_cases++;
        n_fail += !ok;
        if (dws) CUDA_CHECK(cudaFree(dws));
    }
    free(hs_ref);
    CUDA_CHECK(cudaFree(dq)); CUDA_CHECK(cudaFree(dk)); CUDA_CHECK(cudaFree(dv));
    CUDA_CHECK(cudaFree(dg)); CUDA_CHECK(cudaFree(dbeta)); CUDA_CHECK(cudaFree(dout));
    CUDA_CHECK(cudaFree(dht));
    if (dh0) CUDA_CHECK(cudaFree(dh0));
    CUDA_CHECK(cudaFree(dhs));
    CUDA_CHECK(cudaFree(dhs2));
    CUDA_CHECK(cudaFree(dht2));
    free(hs_a); free(hs_b); free(ht_a); free(ht_b);
    free(q); free(k); free(v); free(g); free(beta); free(h0);
    free(o); free(ht); free(o_ref); free(ht_ref);
}
int main(int argc, char **argv) {
    uint64_t seed = 20261129;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: test_gdn_fwd [--seed N]\n");
            return 2;
        }
    }
    gpu_require("test_gdn_fwd");
    printf("seed %llu (--seed)\n", (unsigned long long)seed);
    const int dims[6][2] = {{64, 64}, {64, 128}, {128, 128}, {128, 256}, {256, 256}, {256, 512}};
    const gdn_dtype dts[2] = {GDN_DTYPE_FP32, GDN_DTYPE_BF16};
    const tvariant v_f32[1] = {{0, false, 0}};
    const tvariant v_bf16[2] = {{0, false, 0}, {0, true, 0}};  // fused, prep (both automatic)
    for (int di = 0; di < 2; di++) {
        const gdn_dtype dt = dts[di];
        const bool bf = dt == GDN_DTYPE_BF16;
        const tvariant *vs = bf ? v_bf16 : v_f32;
        const int nvs = bf ? 2 : 1;
        printf("\n== %s: every head dim, awkward T\n", bf ? "bf16" : "fp32");
        for (int d = 0; d < 6; d++) {
            const int Ts[5] = {1, 63, 64, 65, 300};
            for (int ti = 0; ti < 5; ti++) {
                tcase c = {1, Ts[ti], 2, dims[d][0], dims[d][1], dt, true, true, false,
                           (ti & 1) != 0, ti == 1 || ti == 4, false};
                if (Ts[ti] == 65) { c.B = 2; c.H = 1; }
                run_case(&c, seed, vs, nvs);
            }
        }
        printf("\n== %s: modes (gate off, delta off, both, neg eigval)\n", bf ? "bf16" : "fp32");
        for (int d = 1; d <= 2; d++)
            for (int m = 0; m < 4; m++) {
                tcase c = {2, 300, 2, dims[d][0], dims[d][1], dt, m != 0 && m != 2, m != 1 && m != 2,
                           m == 3, false, true, false};
                run_case(&c, seed, vs, nvs);
            }
        {
            tcase c = {1, 300, 2, 256, 512, dt, true, true, true, false, true, false};
            run_case(&c, seed, vs, nvs);
            for (int m = 0; m < 4; m++) {  // every mode over a long sequence
                tcase l = {1, 4096, 1, 128, 128, dt, m != 0 && m != 2, m != 1 && m != 2, m == 3,
                           m == 3, true, false};
                run_case(&l, seed, vs, nvs);
            }
        }
        printf("\n== %s: long sequences, many heads, chunk-start states\n", bf ? "bf16" : "fp32");
        {
            tcase c1 = {1, 4096, 1, 128, 128, dt, true, true, false, true, true, false};
            run_case(&c1, seed, vs, nvs);
            tcase c2 = {1, 4096, 1, 64, 128, dt, true, true, true, false, false, false};
            run_case(&c2, seed, vs, nvs);
            tcase c3 = {1, 4096, 1, 256, 512, dt, true, true, false, true, false, false};
            run_case(&c3, seed, vs, nvs);
            tcase c4 = {8, 65, 16, 128, 128, dt, true, true, false, false, true, false};
            run_case(&c4, seed, vs, nvs);
            tcase c5 = {4, 64, 32, 64, 64, dt, true, true, true, true, false, false};
            run_case(&c5, seed, vs, nvs);
            tcase c6 = {1, 300, 2, 128, 128, dt, true, true, false, true, true, true};
            run_case(&c6, seed, vs, nvs);
        }
        if (bf) {
            printf("\n== bf16: every value-column block, both paths, P from the prep kernel or not\n");
            const tvariant all[10] = {{16, false, 0}, {32, false, 0}, {64, false, 0},
                                      {16, true, 1},  {16, true, 2},  {32, true, 1},
                                      {64, true, 2},  {64, true, 1},  {128, true, 2},
                                      {128, true, 1}};
            const tvariant k256[5] = {{16, false, 0}, {32, false, 0}, {16, true, 1},
                                      {32, true, 2},  {32, true, 1}};
            tcase c = {1, 300, 2, 128, 256, dt, true, true, false, true, true, true};
            run_case(&c, seed, all, 10);
            tcase e = {2, 130, 2, 64, 128, dt, true, true, true, false, true, false};
            run_case(&e, seed, all, 10);
            tcase f = {1, 300, 2, 128, 128, dt, true, false, false, false, true, false};
            run_case(&f, seed, all, 10);
            tcase g = {1, 300, 2, 256, 256, dt, true, true, false, false, true, false};
            run_case(&g, seed, k256, 5);
        }
    }
    printf("\ntest_gdn_fwd: %d cases, %d failed\n", n_cases, n_fail);
    return n_fail ? 1 : 0;
}
