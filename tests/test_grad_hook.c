// test_grad_hook.c — the model's gradient-ready hook (model.h, model_grad_hook), which the
// data-parallel loop uses to all-reduce gradient buckets while the backward goes on. For patterns
// G, S, GS with tied and untied embeddings, two micro-batches per step (the hook armed on the
// second only), on the float64 CPU backend:
//   - no call while disarmed;
//   - each range covers whole tensors of one group (a layer, norm_f, embed, lm_head) and all of
//     that group; the ranges are disjoint and cover [0, n_elems) exactly, padding included;
//   - they arrive in backward order: lm_head (untied), norm_f, layers L-1..0, embed;
//   - at arrival each range already holds its final gradients (bitwise equal to the gradients
//     after the full backward, which equal those of a run without the hook), and a hook that
//     overwrites its range (x2, exact) finds its values kept: the backward never reads them again.
// Control (the value check can fail): armed on the first micro-batch as well, the snapshots
// taken there differ from the final gradients.
// Then grad_sync (src/dist/grad_sync.h) over the hook at world 1 (sums are the identity), with
// buckets of 100 elements (tensors split across pieces): overlapped and after the backward, every
// element is handed over once (grad_sync_step_end checks it), the gradients stay bitwise those of
// the reference, and the pieces number ceil(n / 100) after the backward, at least that overlapped.
#include "../src/core/config.h"
#include "../src/dist/grad_sync.h"
#include "../src/model/model.h"
#include "testutil.h"
#include "tiny_model.h"

enum { MAXR = 64, B = 2, T = 12, V = 23 };  // V: tiny_config's vocabulary

typedef struct {
    size_t lo, hi;
    double *snap;  // grads[lo, hi) when the range arrived
} rec_range;

typedef struct {
    rec_range r[MAXR];
    int n;
    double scale;  // the hook multiplies its range by this after the snapshot (1 = read only)
} recorder;

static void rec_hook(model *m, size_t lo, size_t hi, void *ctx) {
    recorder *R = ctx;
    if (R->n == MAXR) gdn_die("test_grad_hook: more than %d ranges", MAXR);
    if (hi < lo || hi > m->n_elems) gdn_die("test_grad_hook: range [%zu, %zu) of %zu", lo, hi, m->n_elems);
    double *g = m->grad_mem;
    rec_range *r = &R->r[R->n++];
    r->lo = lo, r->hi = hi;
    r->snap = dalloc(hi - lo + 1);
    memcpy(r->snap, g + lo, (hi - lo) * sizeof(double));
    for (size_t i = lo; i < hi; i++) g[i] *= R->scale;
}

static void rec_clear(recorder *R) {
    for (int i = 0; i < R->n; i++) free(R->r[i].snap);
    R->n = 0;
}

// Group of tensor i: layer index, or L (norm_f), L+1 (embed), L+2 (lm_head).
static int group_of(const model *m, int i) {
    int l;
    if (sscanf(m->params[i].name, "layers.%d.", &l) == 1) return l;
    if (!strcmp(m->params[i].name, "norm_f")) return m->L;
    if (!strcmp(m->params[i].name, "embed")) return m->L + 1;
    if (!strcmp(m->params[i].name, "lm_head")) return m->L + 2;
    gdn_die("test_grad_hook: unknown tensor %s", m->params[i].name);
}

// Two micro-batches (fixed tokens, dropout on); hook armed on the ones flagged in `armed`.
static void run_step(model *m, const int32_t *x, const int32_t *y, const bool armed[2]) {
    model_zero_grads(m);
    for (int mb = 0; mb < 2; mb++) {
        m->dropout_key = 0x1234 + (uint64_t)mb;
        m->grad_hook_armed = armed[mb];
        model_forward_backward(m, x + mb * B * T, y + mb * B * T, 1.0 / (2.0 * B * T), true);
    }
    m->grad_hook_armed = false;
}

static int fails = 0;
static void check(bool ok, const char *what, const char *detail) {
    gc_checks++;
    if (!ok) fails++, gc_failures++;
    printf("    %-58s %-22s %s\n", what, detail, ok ? "pass" : "FAIL");
}

static void test_case(const char *pattern, bool tied) {
    gdn_config c = tiny_config(pattern, 3);
    c.tie_embeddings = tied;
    c.dropout = 0.1;
    c.gdn_chunk_size = 8;
    c.swa_window = 5;
    model *m = model_create(&c, &backend_cpu, B, T);
    model_init_params(m, 11);
    size_t n = m->n_elems;
    printf("\n== pattern %s x %d layers, %s embeddings: %d tensors, %zu elements\n", pattern,
           m->L, tied ? "tied" : "untied", m->n_params, n);

    rng_t r;
    rng_init(&r, 5, 0);
    int32_t x[2 * B * T], y[2 * B * T];
    for (int i = 0; i < 2 * B * T; i++) x[i] = (int32_t)rng_below(&r, V), y[i] = (int32_t)rng_below(&r, V);
    y[3] = -1;  // an ignored target

    // reference: no hook
    const bool last_only[2] = {false, true}, both[2] = {true, true};
    run_step(m, x, y, last_only);
    double *ref = dalloc(n), *g = m->grad_mem;
    memcpy(ref, g, n * sizeof(double));

    // with the hook, armed on the last micro-batch only
    recorder R = {.scale = 1.0};
    m->grad_hook = rec_hook;
    m->grad_hook_ctx = &R;
    bool armed0[2] = {false, false};
    run_step(m, x, y, armed0);
    char det[64];
    snprintf(det, sizeof det, "%d calls", R.n);
    check(R.n == 0, "disarmed: no call", det);
    run_step(m, x, y, last_only);
    check(memcmp(g, ref, n * sizeof(double)) == 0, "gradients bitwise equal to a run without hook", "");

    // each range: whole tensors of one group, all of the group
    int ngroups = m->L + (tied ? 2 : 3), order_ok = 1, shape_ok = 1;
    int *seen = gdn_malloc(sizeof(int) * (size_t)ngroups);
    int expect_first = tied ? m->L : m->L + 2;  // lm_head (untied) else norm_f
    for (int k = 0; k < R.n; k++) {
        const rec_range *rr = &R.r[k];
        int grp = -1, count = 0;
        for (int i = 0; i < m->n_params; i++) {
            const param_info *p = &m->params[i];
            bool inside = p->offset >= rr->lo && p->offset < rr->hi;
            if (inside && p->offset + p->numel > rr->hi) shape_ok = 0;  // tensor cut by the range
            if (!inside) continue;
            if (grp >= 0 && group_of(m, i) != grp) shape_ok = 0;    // two groups in one range
            grp = group_of(m, i);
            count++;
        }
        if (count == 0 || grp < 0) {
            shape_ok = 0;
            continue;
        }
        for (int i = 0; i < m->n_params; i++)  // the whole group is inside
            if (group_of(m, i) == grp && (m->params[i].offset < rr->lo || m->params[i].offset >= rr->hi))
                shape_ok = 0;
        seen[grp]++;
        // expected: [lm_head], norm_f, L-1, ..., 0, embed
        int want;
        if (k == 0) want = expect_first;
        else if (!tied && k == 1) want = m->L;
        else {
            int j = k - (tied ? 1 : 2);  // 0 -> layer L-1
            want = j < m->L ? m->L - 1 - j : m->L + 1;
        }
        if (grp != want) order_ok = 0;
    }
    for (int gi = 0; gi < ngroups; gi++)
        if (seen[gi] != 1) shape_ok = 0;
    snprintf(det, sizeof det, "%d ranges", R.n);
    check(shape_ok && R.n == ngroups, "one range per group, whole tensors", det);
    check(order_ok && R.n == ngroups, "backward order: [lm_head] norm_f L-1..0 embed", "");

    // disjoint, exact cover of [0, n): sorted by lo, each starts where the previous ended
    rec_range sorted[MAXR];
    memcpy(sorted, R.r, sizeof(rec_range) * (size_t)R.n);
    for (int a = 1; a < R.n; a++)
        for (int b = a; b > 0 && sorted[b].lo < sorted[b - 1].lo; b--) {
            rec_range t = sorted[b];
            sorted[b] = sorted[b - 1], sorted[b - 1] = t;
        }
    size_t at = 0;
    bool cover = true;
    for (int k = 0; k < R.n; k++) {
        if (sorted[k].lo != at || sorted[k].hi <= sorted[k].lo) cover = false;
        at = sorted[k].hi;
    }
    snprintf(det, sizeof det, "ends at %zu", at);
    check(cover && at == n, "disjoint, cover [0, n_elems) exactly", det);

    // values at arrival are final; every range carries some gradient
    bool final_ok = true, nonzero = true;
    for (int k = 0; k < R.n; k++) {
        const rec_range *rr = &R.r[k];
        size_t len = rr->hi - rr->lo;
        if (memcmp(rr->snap, g + rr->lo, len * sizeof(double)) != 0) final_ok = false;
        bool any = false;
        for (size_t i = 0; i < len; i++) any |= rr->snap[i] != 0;
        nonzero &= any;
    }
    check(final_ok, "each range final at arrival (bitwise)", "");
    check(nonzero, "each range holds non-zero gradients", "");
    rec_clear(&R);

    // a hook that overwrites its range: x2 (exact) survives the rest of the backward
    R.scale = 2.0;
    run_step(m, x, y, last_only);
    bool kept = R.n == ngroups;
    for (size_t i = 0; i < n; i++) kept &= g[i] == 2.0 * ref[i];
    check(kept, "overwritten ranges kept: grads == 2 x reference", "");
    rec_clear(&R);

    // control: armed on the first micro-batch too, its snapshots are partial sums
    R.scale = 1.0;
    run_step(m, x, y, both);
    bool differ = R.n == 2 * ngroups;
    for (int k = 0; k < ngroups && differ; k++) {
        const rec_range *rr = &R.r[k];
        differ = memcmp(rr->snap, g + rr->lo, (rr->hi - rr->lo) * sizeof(double)) != 0;
    }
    snprintf(det, sizeof det, "%d calls", R.n);
    check(differ, "control: first-micro-batch snapshots differ from final", det);
    rec_clear(&R);

    // grad_sync over the hook, world 1: overlapped, then one pass after the backward
    m->grad_hook = NULL, m->grad_hook_ctx = NULL;
    char err[512];
    dist *d = dist_init("none", 10, "", err, sizeof err);
    if (!d) gdn_die("test_grad_hook: %s", err);
    const size_t bucket = 100;
    for (int overlap = 1; overlap >= 0; overlap--) {
        grad_sync *gs = grad_sync_create(d, m, true, overlap, 0, (double)(bucket * sizeof(double)) / 1048576.0,
                                         2, NULL);
        model_zero_grads(m);
        for (int mb = 0; mb < 2; mb++) {
            m->dropout_key = 0x1234 + (uint64_t)mb;
            grad_sync_microbatch(gs, m, mb);
            model_forward_backward(m, x + mb * B * T, y + mb * B * T, 1.0 / (2.0 * B * T), true);
            grad_sync_microbatch_end(gs, m);
        }
        grad_sync_step_end(gs, m);
        long pieces = (long)((n + bucket - 1) / bucket);
        snprintf(det, sizeof det, "%ld sums, %ld pieces", gs->sends, pieces);
        check(memcmp(g, ref, n * sizeof(double)) == 0 && !m->grad_hook_armed &&
                  (overlap ? gs->sends >= pieces : gs->sends == pieces),
              overlap ? "grad_sync overlapped: grads kept, all sent" : "grad_sync after the backward",
              det);
        grad_sync_free(gs);
        m->grad_hook = NULL, m->grad_hook_ctx = NULL;
    }
    dist_free(d);

    free(seen);
    free(ref);
    model_free(m);
}

int main(void) {
    const char *patterns[] = {"G", "S", "GS"};
    for (int p = 0; p < 3; p++)
        for (int t = 0; t < 2; t++) test_case(patterns[p], t == 0);
    return gc_finish("test_grad_hook");
}
