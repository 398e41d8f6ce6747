// timeline.c — the per-step span recorder of timeline.h. A point is a moment on one stream (a
// host clock reading, or a CUDA event); a span is two points of one step. Points and spans of
// the steps not yet written are kept in order, so those of finished steps form a prefix that
// timeline_collect writes and drops (their events go back to a pool for reuse: no event is
// created or destroyed inside a step once the pool is warm).
#include "timeline.h"
#include <limits.h>
#include "../core/common.h"

typedef struct {
    long step;
    void *ev;   // device clock: the event (recorded by us or by the communicator)
    double t;   // host clock: gdn_now() seconds
} tl_point;

typedef struct {
    long step;
    timeline_stream stream;
    char name[40];
    int t0, a, b;  // the step's start point, the span's begin and end points
    bool dropped;  // device comm span whose events the communicator did not record
} tl_span;

struct timeline {
    FILE *f;
    char *path;
    int rank;
    long first, end;        // recorded steps [first, end)
    const timeline_clock *clk;
    tl_point *pts;
    int n_pts, cap_pts;
    tl_span *spans;
    int n_spans, cap_spans;
    void **pool;            // device clock: events free for reuse
    int n_pool, cap_pool;
    long loop_step;         // the last step passed to timeline_step_begin
    bool on;                // recording loop_step
    int t0, cursor;         // its start point; where the current compute span began
};

// Room for the points of two steps of a 12-layer model before any growth.
enum { TL_INITIAL_POINTS = 256 };

static void pool_put(timeline *t, void *ev) {
    if (t->n_pool == t->cap_pool) {
        t->cap_pool = GDN_MAX(2 * t->cap_pool, TL_INITIAL_POINTS);
        t->pool = gdn_realloc(t->pool, sizeof(void *) * (size_t)t->cap_pool);
    }
    t->pool[t->n_pool++] = ev;
}

// A new point of the current step; record: take it now on the compute stream (host clock:
// always read, so comm points are taken through here as well).
static int point_new(timeline *t, bool record) {
    if (t->n_pts == t->cap_pts) {
        t->cap_pts = GDN_MAX(2 * t->cap_pts, TL_INITIAL_POINTS);
        t->pts = gdn_realloc(t->pts, sizeof(tl_point) * (size_t)t->cap_pts);
    }
    tl_point *p = &t->pts[t->n_pts];
    p->step = t->loop_step, p->ev = NULL, p->t = 0;
    if (!t->clk) {
        p->t = gdn_now();
    } else {
        p->ev = t->n_pool > 0 ? t->pool[--t->n_pool] : t->clk->create();
        if (record) t->clk->record(p->ev);
    }
    return t->n_pts++;
}

static int span_new(timeline *t, timeline_stream s, const char *name, int a, int b) {
    if (t->n_spans == t->cap_spans) {
        t->cap_spans = GDN_MAX(2 * t->cap_spans, TL_INITIAL_POINTS);
        t->spans = gdn_realloc(t->spans, sizeof(tl_span) * (size_t)t->cap_spans);
    }
    tl_span *sp = &t->spans[t->n_spans];
    *sp = (tl_span){.step = t->loop_step, .stream = s, .t0 = t->t0, .a = a, .b = b};
    snprintf(sp->name, sizeof sp->name, "%s", name);
    for (char *c = sp->name; *c; c++)  // one CSV field
        if (*c == ',' || *c == '\n') *c = ' ';
    return t->n_spans++;
}

// ms from point a to point b (both complete)
static double point_ms(const timeline *t, int a, int b) {
    if (!t->clk) return 1e3 * (t->pts[b].t - t->pts[a].t);
    return t->clk->elapsed_ms(t->pts[a].ev, t->pts[b].ev);
}

// Write and drop the spans and points of steps < before.
static void flush_before(timeline *t, long before) {
    int ns = 0, np = 0;
    while (ns < t->n_spans && t->spans[ns].step < before) ns++;
    while (np < t->n_pts && t->pts[np].step < before) np++;
    for (int i = 0; i < ns; i++) {
        const tl_span *s = &t->spans[i];
        if (s->dropped) continue;
        fprintf(t->f, "%ld,%d,%s,%s,%.4f,%.4f\n", s->step, t->rank,
                s->stream == TIMELINE_COMPUTE ? "compute" : "comm", s->name,
                point_ms(t, s->t0, s->a), point_ms(t, s->t0, s->b));
    }
    if (ns > 0 && (fflush(t->f) != 0 || ferror(t->f)))
        gdn_die("cannot write the timeline '%s': %s", t->path, strerror(errno));
    if (np == 0 && ns == 0) return;
    for (int i = 0; i < np; i++)
        if (t->pts[i].ev) pool_put(t, t->pts[i].ev);
    if (np > 0) memmove(t->pts, t->pts + np, sizeof(tl_point) * (size_t)(t->n_pts - np));
    if (ns > 0) memmove(t->spans, t->spans + ns, sizeof(tl_span) * (size_t)(t->n_spans - ns));
    t->n_pts -= np, t->n_spans -= ns;
    for (int i = 0; i < t->n_spans; i++) t->spans[i].t0 -= np, t->spans[i].a -= np, t->spans[i].b -= np;
    t->t0 -= np, t->cursor -= np;
}

void timeline_window(long n, long done, long end, long *first, long *count) {
    long left = GDN_MAX(end - done, 0);
    long warm = GDN_MIN(2, GDN_MAX(left - n, 0));
    *first = done + 1 + warm;
    *count = GDN_MIN(n, left - warm);
}

timeline *timeline_create(const char *path, int rank, long first, long count,
                          const timeline_clock *clk) {
    timeline *t = gdn_malloc(sizeof *t);
    t->path = gdn_strdup(path);
    t->f = fopen(path, "w");
    if (!t->f) gdn_die("cannot write the timeline '%s': %s", path, strerror(errno));
    fprintf(t->f, "step,rank,stream,name,start_ms,end_ms\n");
    t->rank = rank, t->first = first, t->end = first + count, t->clk = clk;
    t->t0 = t->cursor = -1;
    // warm the event pool now: creating events inside a recorded step would be timed with it
    if (clk)
        for (int i = 0; i < TL_INITIAL_POINTS; i++) pool_put(t, clk->create());
    return t;
}

void timeline_free(timeline *t) {
    if (!t) return;
    if (t->clk)
        for (int i = 0; i < t->n_pts; i++) t->clk->wait(t->pts[i].ev);
    flush_before(t, LONG_MAX);
    if (fclose(t->f) != 0) gdn_die("cannot write the timeline '%s': %s", t->path, strerror(errno));
    if (t->clk)
        for (int i = 0; i < t->n_pool; i++) t->clk->destroy(t->pool[i]);
    free(t->pool);
    free(t->pts);
    free(t->spans);
    free(t->path);
    free(t);
}

bool timeline_step_begin(timeline *t, long step) {
    if (!t) return false;
    t->loop_step = step;
    t->on = step >= t->first && step < t->end;
    if (t->on) t->t0 = t->cursor = point_new(t, true);
    return t->on;
}

bool timeline_recording(const timeline *t) { return t && t->on; }

void timeline_compute(timeline *t, const char *name) {
    if (!timeline_recording(t)) return;
    int p = point_new(t, true);
    span_new(t, TIMELINE_COMPUTE, name, t->cursor, p);
    t->cursor = p;
}

void timeline_compute_blocked(timeline *t, const char *name) {
    if (t && !t->clk) timeline_compute(t, name);
}

int timeline_comm_begin(timeline *t, const char *name, void **ev_begin, void **ev_end) {
    *ev_begin = *ev_end = NULL;
    if (!timeline_recording(t)) return -1;
    int a = point_new(t, false), b = point_new(t, false);  // host clock: b is read again at end
    if (t->clk) *ev_begin = t->pts[a].ev, *ev_end = t->pts[b].ev;
    return span_new(t, TIMELINE_COMM, name, a, b);
}

void timeline_comm_end(timeline *t, int span, bool recorded) {
    if (!t || span < 0) return;
    tl_span *s = &t->spans[span];
    if (!t->clk) t->pts[s->b].t = gdn_now();
    s->dropped = !recorded;
}

void timeline_step_end(timeline *t) {
    if (t) t->on = false;
}

void timeline_collect(timeline *t) {
    if (t) flush_before(t, t->loop_step);
}
