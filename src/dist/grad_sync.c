// grad_sync.c — bucketed gradient sums over the model's gradient-ready hook, and the step's
// timeline spans (grad_sync.h).
#include "grad_sync.h"
#include "../core/common.h"

// One sum of grads [off, off + len) (all-reduce, or with ZeRO-1 a reduce to rank `root`), with
// its comm span when the step is recorded.
static void grad_sync_sum(grad_sync *g, model *m, size_t off, size_t len, int root) {
    size_t es = m->be->elem[BE_GRAD];
    void *ev[2] = {NULL, NULL};
    int span = -1;
    if (timeline_recording(g->tl)) {
        char name[40];
        if (root < 0) snprintf(name, sizeof name, "allreduce %.3g MB", (double)(len * es) / 1048576.0);
        else snprintf(name, sizeof name, "reduce %.3g MB to %d", (double)(len * es) / 1048576.0, root);
        span = timeline_comm_begin(g->tl, name, &ev[0], &ev[1]);
    }
    bool timed = ev[0] == NULL;  // host clock: read around the blocking call
    if (es == sizeof(double)) {
        if (root < 0) dist_allreduce_sum_f64(g->d, (double *)m->grad_mem + off, len);
        else dist_reduce_sum_f64(g->d, (double *)m->grad_mem + off, len, root);
    } else {
        if (ev[0]) timed = dist_time_next_async(g->d, ev[0], ev[1]);
        if (root < 0) dist_allreduce_sum_f32_async(g->d, (float *)m->grad_mem + off, len, NULL);
        else dist_reduce_sum_f32_async(g->d, (float *)m->grad_mem + off, len, root, NULL);
    }
    timeline_comm_end(g->tl, span, timed);
    g->sends++;
}

// Grads [off, off + len): one all-reduce, or with ZeRO-1 one reduce per owning shard.
static void grad_sync_piece(grad_sync *g, model *m, size_t off, size_t len) {
    if (!g->shard) {
        grad_sync_sum(g, m, off, len, -1);
        return;
    }
    for (size_t a = off, end = off + len; a < end;) {
        size_t owner = a / g->shard, b = GDN_MIN(end, (owner + 1) * g->shard);
        grad_sync_sum(g, m, a, b - a, (int)owner);
        a = b;
    }
}

// The pending bucket, in pieces of at most g->bucket elements.
static void grad_sync_send(grad_sync *g, model *m) {
    for (size_t off = g->lo; off < g->hi; off += g->bucket)
        grad_sync_piece(g, m, off, GDN_MIN(g->bucket, g->hi - off));
    g->lo = g->hi = 0;
}

// [lo, hi) of the gradient arena is final: join it to the pending bucket when they touch, else
// send the bucket and start a new one; send a bucket that reached g->bucket elements.
static void grad_sync_range(grad_sync *g, model *m, size_t lo, size_t hi) {
    g->covered += hi - lo;
    if (g->lo == g->hi) g->lo = lo, g->hi = hi;
    else if (hi == g->lo) g->lo = lo;
    else if (lo == g->hi) g->hi = hi;
    else {
        grad_sync_send(g, m);
        g->lo = lo, g->hi = hi;
    }
    if (g->hi - g->lo >= g->bucket) grad_sync_send(g, m);
}

// ---- the model's hooks: timeline spans and the sums ---------------------------------------------

// "forward", or "forward mb K" with gradient accumulation (K from 0)
static void mb_label(char *buf, size_t n, const char *what, const grad_sync *g) {
    if (g->n_mb == 1) snprintf(buf, n, "%s", what);
    else snprintf(buf, n, "%s mb %d", what, g->mb);
}

// model_fwd_hook: the forward (with the fused loss of the first LM-head chunk) ends here.
static void grad_sync_fwd_hook(model *m, void *ctx) {
    grad_sync *g = ctx;
    (void)m;
    if (!timeline_recording(g->tl)) return;
    char name[32];
    mb_label(name, sizeof name, "forward", g);
    timeline_compute(g->tl, name);
}

// "bwd lm_head", "bwd norm_f", "bwd layer L", "bwd embed": the gradient range beginning at
// element lo (model.h: each range starts at the first tensor of its group). With tied
// embeddings the LM head's backward has no range of its own: it ends in norm_f's span.
static void grad_range_name(const model *m, size_t lo, char *buf, size_t n) {
    if (m->lm_head == m->wte && lo == m->params[m->norm_f].offset) {
        snprintf(buf, n, "bwd lm_head+norm_f");
        return;
    }
    for (int i = 0; i < m->n_params; i++) {
        if (m->params[i].offset != lo) continue;
        int l;
        if (sscanf(m->params[i].name, "layers.%d.", &l) == 1) snprintf(buf, n, "bwd layer %d", l);
        else snprintf(buf, n, "bwd %s", m->params[i].name);
        return;
    }
    snprintf(buf, n, "bwd [%zu..)", lo);
}

// model_grad_hook: the span of the backward that finished this range, then its bucket. On the
// host clock a blocking all-reduce issued here stalls the backward: a "wait (hook)" span.
static void grad_sync_grad_hook(model *m, size_t lo, size_t hi, void *ctx) {
    grad_sync *g = ctx;
    if (timeline_recording(g->tl)) {
        char name[40];
        grad_range_name(m, lo, name, sizeof name);
        timeline_compute(g->tl, name);
    }
    if (!g->overlap) return;
    long sends = g->sends;
    grad_sync_range(g, m, lo, hi);
    if (g->sends != sends) timeline_compute_blocked(g->tl, "wait (hook)");
}

// ---- the step ---------------------------------------------------------------------------------

grad_sync *grad_sync_create(dist *d, model *m, bool sum, bool overlap, size_t shard,
                            double bucket_mb, int n_mb, timeline *tl) {
    if (n_mb < 1 || !(bucket_mb > 0))
        gdn_die("internal: grad_sync_create: %d micro-batches, %g MB buckets", n_mb, bucket_mb);
    grad_sync *g = gdn_malloc(sizeof *g);
    *g = (grad_sync){.d = d, .sum = sum, .overlap = sum && overlap, .shard = shard,
                     .bucket = GDN_MAX((size_t)1, (size_t)(bucket_mb * 1048576.0 /
                                                           (double)m->be->elem[BE_GRAD])),
                     .n_mb = n_mb, .tl = tl};
    if (g->overlap || tl) {
        m->grad_hook = grad_sync_grad_hook;
        m->grad_hook_ctx = g;
    }
    if (tl) m->fwd_hook = grad_sync_fwd_hook;
    return g;
}

void grad_sync_free(grad_sync *g) { free(g); }

void grad_sync_microbatch(grad_sync *g, model *m, int mb) {
    g->mb = mb;
    m->grad_hook_armed = mb == g->n_mb - 1;  // the sums go out with the last one
}

void grad_sync_microbatch_end(grad_sync *g, model *m) {
    if (!timeline_recording(g->tl) || m->grad_hook_armed) return;
    char name[32];  // unarmed: no ranges, the backward in one span
    mb_label(name, sizeof name, "backward", g);
    timeline_compute(g->tl, name);
}

// The compute row's "wait" span: from the end of the backward to the sums being there (the
// last bucket's blocking sum on the host clock; the compute stream's wait on the device).
void grad_sync_step_end(grad_sync *g, model *m) {
    m->grad_hook_armed = false;
    if (!g->sum) return;
    if (!g->overlap) grad_sync_range(g, m, 0, m->n_elems);
    grad_sync_send(g, m);
    if (g->covered != m->n_elems)
        gdn_die("internal: the gradient hook handed over %zu of %zu elements this step",
                g->covered, m->n_elems);
    g->covered = 0;
    dist_wait_async(g->d, NULL);  // the compute stream waits for the sums (NCCL; else nothing)
    timeline_compute(g->tl, "wait");
}
