// optim.c — see optim.h.
#include "optim.h"
#include "../core/common.h"
#include <math.h>
#include <string.h>

double optim_lr(const gdn_config *c, long step) {
    double lr = c->lr, lo = c->min_lr;
    long W = c->warmup_steps, S = c->steps;
    if (step < W) return lr * (double)(step + 1) / (double)W;
    if (!strcmp(c->schedule, "constant")) return lr;
    double span = (double)(S - W);
    double prog = span > 0 ? (double)(step - W) / span : 1.0;
    if (prog > 1) prog = 1;
    if (!strcmp(c->schedule, "cosine")) return lo + 0.5 * (lr - lo) * (1 + cos(3.141592653589793 * prog));
    if (!strcmp(c->schedule, "linear")) return lr - (lr - lo) * prog;
    // wsd: stable until the last decay_frac of all steps, then linear to min_lr
    double decay_start = (double)S * (1.0 - c->decay_frac);
    if ((double)step < decay_start) return lr;
    double p = ((double)step - decay_start) / ((double)S - decay_start);
    if (p > 1) p = 1;
    return lr - (lr - lo) * p;
}

// One pass over the whole gradient arena (one device sync on a GPU instead of one per tensor):
// the padding between tensors is zero (the arena is zero-filled and every zeroing covers all
// n_elems; no op writes outside its tensor), so it adds nothing.
double optim_grad_norm(const model *m) { return sqrt(m->be->sumsq(m->grad_mem, m->n_elems)); }

void optim_adamw_range(model *m, size_t lo, size_t hi, long step, double lr, double scale) {
    const gdn_config *c = &m->cfg;
    const backend *be = m->be;
    if (lo < m->opt_lo || hi > m->opt_lo + m->opt_n)
        gdn_die("internal: AdamW on [%zu, %zu) outside the moments' [%zu, %zu)", lo, hi, m->opt_lo,
                m->opt_lo + m->opt_n);
    double t = (double)(step + 1);
    double bc1 = 1 - pow(c->beta1, t), bc2 = 1 - pow(c->beta2, t);
    size_t ep = be->elem[BE_PARAM], eo = be->elem[BE_OPT], eg = be->elem[BE_GRAD];
    char *p = m->param_mem, *w = m->master, *g = m->grad_mem, *mm = m->opt_m, *vv = m->opt_v;
    // One segment per run of consecutive tensors with the same weight decay (219 tensors of
    // fla-220m -> 74 runs), cut to [lo, hi). The padding between tensors is zero in every arena
    // (zero-filled, never written), and AdamW keeps a zero element with a zero gradient zero, so
    // the tensors' elements get the same bits as tensor by tensor. The backend's adamw_multi takes
    // all the runs in one call (CUDA: one launch per 128), else one adamw call per run; the same
    // update of each element either way.
    const bool multi = be->adamw_multi != NULL;  // (the CPU backend has none)
    be_adamw_seg *seg = multi ? gdn_malloc((size_t)m->n_params * sizeof *seg) : NULL;
    int ns = 0;
    for (int i = 0, j; i < m->n_params; i = j) {
        const param_info *first = &m->params[i];
        for (j = i + 1; j < m->n_params && m->params[j].decay == first->decay &&
                        m->params[j].offset >= m->params[j - 1].offset + m->params[j - 1].numel;
             j++) {}
        const param_info *last = &m->params[j - 1];
        size_t a = GDN_MAX(lo, first->offset), b = GDN_MIN(hi, last->offset + last->numel);
        if (a >= b) continue;
        const double wd = first->decay ? c->weight_decay : 0.0;
        if (multi) {
            if (ns > 0 && a < seg[ns - 1].hi) {  // not ascending (unreached: model.c carves in order)
                be->adamw_multi(p, w, g, mm, vv, m->opt_lo, seg, ns, lr, c->beta1, c->beta2,
                                c->adam_eps, bc1, bc2, scale);
                ns = 0;
            }
            seg[ns++] = (be_adamw_seg){a, b, wd};
            continue;
        }
        size_t s = a - m->opt_lo;  // m, v hold [opt_lo, opt_lo + opt_n) only
        be->adamw(p + a * ep, w ? w + a * eo : NULL, g + a * eg, mm + s * eo, vv + s * eo, b - a, lr,
                  c->beta1, c->beta2, c->adam_eps, wd, bc1, bc2, scale);
    }
    if (ns > 0)
        be->adamw_multi(p, w, g, mm, vv, m->opt_lo, seg, ns, lr, c->beta1, c->beta2, c->adam_eps,
                        bc1, bc2, scale);
    free(seg);
}

double optim_step(model *m, long step, double lr, double grad_norm) {
    const gdn_config *c = &m->cfg;
    if (m->opt_lo != 0 || m->opt_n != m->n_elems)
        gdn_die("internal: optim_step on ZeRO-1-sharded moments (the loop updates its shard)");
    double scale = 1.0;
    if (c->grad_clip > 0 && grad_norm > c->grad_clip) scale = c->grad_clip / grad_norm;
    optim_adamw_range(m, 0, m->n_elems, step, lr, scale);
    return scale;
}
