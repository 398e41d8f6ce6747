// test_optim.c — LR schedules at their corners, one AdamW step against hand-computed values
// (with and without weight decay, with clipping), and gradient accumulation: two micro-batches
// of B/2 give the gradients of one batch of B (float64, 1e-12); a backend with adamw_multi (the
// CUDA path's interface, here each segment through the CPU adamw) gets optim.c's segments: the
// same bits as one adamw call per run, over the whole arena and over a cut range.
#include "testutil.h"
#include "tiny_model.h"
#include "../src/optim/optim.h"

static void expect(const char *what, double got, double want, double tol) {
    double e = fabs(got - want) / fmax(1e-300, fabs(want));
    if (want == 0) e = fabs(got);
    int ok = e <= tol;
    printf("  %-56s got %.12g want %.12g  %s\n", what, got, want, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}

static gdn_config tiny(void) {
    gdn_config c = tiny_config("GS", 2);
    c.vocab_size = 29;
    c.swa_window = 5;
    c.gdn_chunk_size = 4;
    return c;
}

// adamw_multi for the CPU backend: each segment through backend_cpu.adamw at its offsets (what
// the CUDA kernel does in one launch); counts the calls and segments it got.
static int multi_calls, multi_segs;
static void cpu_adamw_multi(void *p, void *master, const void *g, void *m, void *v, size_t m_lo,
                            const be_adamw_seg *seg, int nseg, double lr, double b1, double b2,
                            double eps, double bc1, double bc2, double gscale) {
    const size_t e = sizeof(double);  // every class is float64 on the CPU backend
    multi_calls++;
    multi_segs += nseg;
    for (int k = 0; k < nseg; k++) {
        if (k > 0 && seg[k].lo < seg[k - 1].hi) gc_failures++, printf("  segments not ascending  FAIL\n");
        const size_t lo = seg[k].lo, s = lo - m_lo;
        backend_cpu.adamw((char *)p + lo * e, master ? (char *)master + lo * e : NULL, (const char *)g + lo * e,
                          (char *)m + s * e, (char *)v + s * e, seg[k].hi - lo, lr, b1, b2, eps, seg[k].wd,
                          bc1, bc2, gscale);
    }
}

int main(void) {
    printf("== LR schedules (lr 1e-3, min 1e-4, 100 steps, warmup 10)\n");
    gdn_config c;
    config_defaults(&c);
    c.lr = 1e-3; c.min_lr = 1e-4; c.steps = 100; c.warmup_steps = 10; c.decay_frac = 0.2;
    const char *names[] = {"cosine", "linear", "constant", "wsd"};
    for (int i = 0; i < 4; i++) {
        snprintf(c.schedule, sizeof c.schedule, "%s", names[i]);
        char w[96];
        snprintf(w, sizeof w, "%s: step 0 = lr/10 (warmup)", names[i]);
        expect(w, optim_lr(&c, 0), 1e-4, 1e-12);
        snprintf(w, sizeof w, "%s: step 9 = lr (end of warmup)", names[i]);
        expect(w, optim_lr(&c, 9), 1e-3, 1e-12);
    }
    snprintf(c.schedule, sizeof c.schedule, "cosine");
    expect("cosine: step 10 = lr", optim_lr(&c, 10), 1e-3, 1e-12);
    expect("cosine: step 55 (half way) = (lr+min)/2", optim_lr(&c, 55), 5.5e-4, 1e-12);
    expect("cosine: step 100 = min_lr", optim_lr(&c, 100), 1e-4, 1e-12);
    snprintf(c.schedule, sizeof c.schedule, "linear");
    expect("linear: step 55 = (lr+min)/2", optim_lr(&c, 55), 5.5e-4, 1e-12);
    snprintf(c.schedule, sizeof c.schedule, "constant");
    expect("constant: step 99 = lr", optim_lr(&c, 99), 1e-3, 1e-12);
    snprintf(c.schedule, sizeof c.schedule, "wsd");
    expect("wsd: step 79 = lr (stable)", optim_lr(&c, 79), 1e-3, 1e-12);
    expect("wsd: step 90 = half way down the decay", optim_lr(&c, 90), 5.5e-4, 1e-12);
    expect("wsd: step 100 = min_lr", optim_lr(&c, 100), 1e-4, 1e-12);

    printf("== AdamW step against hand-computed values\n");
    gdn_config t = tiny();
    t.beta1 = 0.9; t.beta2 = 0.95; t.adam_eps = 1e-8; t.weight_decay = 0.1; t.grad_clip = 0;
    model *m = model_create(&t, &backend_cpu, 1, 4);
    model_init_params(m, 5);
    int iw = m->lp[0].wq, in = m->lp[0].norm1;       // a decayed matrix, a non-decayed norm
    double *w = model_param(m, iw), *gw = model_grad(m, iw), *nw = model_param(m, in), *gn = model_grad(m, in);
    double w0 = w[3], n0 = nw[2], w4 = w[4];
    model_zero_grads(m);
    gw[3] = 0.5; gn[2] = -2.0;
    double lr = 1e-2;
    optim_step(m, 0, lr, optim_grad_norm(m));
    // step 1: mhat = g, vhat = g^2 -> update = g/(|g| + eps) ~ sign(g)
    expect("decayed weight: w - lr (g/(|g|+eps) + wd w)", w[3], w0 - lr * (0.5 / (0.5 + 1e-8) + 0.1 * w0), 1e-12);
    expect("norm weight: no decay", nw[2], n0 - lr * (-2.0 / (2.0 + 1e-8)), 1e-12);
    expect("element with g = 0 only decays: w (1 - lr wd)", w[4], w4 * (1 - lr * 0.1), 1e-12);
    // clipping: norm 10 -> scaled by 1/10 before the moments
    model_init_params(m, 5);
    model_zero_grads(m);
    w0 = w[3];
    gw[3] = 6.0; gn[2] = 8.0;
    m->cfg.grad_clip = 1.0;
    double norm = optim_grad_norm(m);
    expect("gradient norm sqrt(6^2 + 8^2)", norm, 10.0, 1e-15);
    double sc = optim_step(m, 0, lr, norm);
    expect("clip scale 1/10", sc, 0.1, 1e-15);
    double *mm = model_opt(m, m->opt_m, iw);
    expect("first moment holds (1-b1) * clipped g", mm[3], 0.1 * 0.6, 1e-12);
    model_free(m);

    printf("== gradient accumulation: 2 x (B/2) == 1 x B\n");
    gdn_config a = tiny();
    int T = 9;
    model *big = model_create(&a, &backend_cpu, 4, T), *half = model_create(&a, &backend_cpu, 2, T);
    model_init_params(big, 11);
    model_init_params(half, 11);
    int32_t x[36], y[36];
    rng_t r;
    rng_init(&r, 3, 3);
    for (int i = 0; i < 36; i++) { x[i] = (int32_t)rng_below(&r, 29); y[i] = (int32_t)rng_below(&r, 29); }
    model_zero_grads(big);
    model_zero_grads(half);
    double lb = model_forward_backward(big, x, y, 1.0 / 36, false);
    double l1 = model_forward_backward(half, x, y, 1.0 / 36, false);
    double l2 = model_forward_backward(half, x + 18, y + 18, 1.0 / 36, false);
    expect("loss sum of the halves == loss of the batch", l1 + l2, lb, 1e-13);
    check_close("every gradient element (all tensors at once)", half->grad_mem, big->grad_mem, big->n_elems, 1e-12);
    model_free(big);
    model_free(half);

    printf("== adamw_multi (optim.c's segments) == one adamw call per run, bitwise\n");
    backend multi_be = backend_cpu;
    multi_be.adamw_multi = cpu_adamw_multi;
    gdn_config o = tiny();
    o.weight_decay = 0.1;
    model *ma = model_create(&o, &backend_cpu, 1, 4), *mb = model_create(&o, &multi_be, 1, 4);
    for (int round = 0; round < 2; round++) {
        model_init_params(ma, 7);
        model_init_params(mb, 7);
        rng_init(&r, 21, (uint64_t)round);
        for (long step = 0; step < 3; step++) {
            model_zero_grads(ma);
            model_zero_grads(mb);
            for (int k = 0; k < ma->n_params; k++) {  // tensors only: the padding stays zero
                double *ga = model_grad(ma, k), *gb = model_grad(mb, k);
                for (size_t i = 0; i < ma->params[k].numel; i++) ga[i] = gb[i] = rng_normal(&r);
            }
            if (round == 0) {
                optim_step(ma, step, 1e-2, optim_grad_norm(ma));
                optim_step(mb, step, 1e-2, optim_grad_norm(mb));
            } else {  // a range that cuts tensors at both ends, as a ZeRO-1 shard does
                const size_t lo = ma->n_elems / 3 + 1, hi = 2 * ma->n_elems / 3 + 5;
                optim_adamw_range(ma, lo, hi, step, 1e-2, 0.5);
                optim_adamw_range(mb, lo, hi, step, 1e-2, 0.5);
            }
        }
        const size_t bytes = ma->n_elems * sizeof(double);
        check_row(!memcmp(mb->param_mem, ma->param_mem, bytes) && !memcmp(mb->opt_m, ma->opt_m, bytes) &&
                      !memcmp(mb->opt_v, ma->opt_v, bytes),
                  round ? "cut range, 3 steps: params, m, v" : "whole arena, 3 steps: params, m, v", "memcmp");
    }
    printf("  adamw_multi: %d calls, %d segments (%d tensors)\n", multi_calls, multi_segs, mb->n_params);
    expect("one adamw_multi call per step", multi_calls, 6, 0);
    model_free(ma);
    model_free(mb);
    return gc_finish("test_optim");
}
