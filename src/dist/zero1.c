// zero1.c — the sharded AdamW step, the all-gather of the weights and the gather of the moments
// for a checkpoint (zero1.h).
#include "zero1.h"
#include <math.h>
#include "../core/common.h"
#include "../optim/optim.h"

// dst[0, n) <- src[0, n) in the gradient / optimizer class; to_bf16: dst is the GPU's bf16
// parameter arena.
static void flat_copy(const zero1 *z, void *dst, bool to_bf16, const void *src, size_t n) {
    if (z->device_copy) {
        z->device_copy(dst, to_bf16, src, n);
        return;
    }
    if (to_bf16) gdn_die("internal: bf16 parameters on the CPU");
    memcpy(dst, src, n * z->m->be->elem[BE_GRAD]);
}

// In place over z->z[0, n): every rank's shard, from its owner.
static void zero1_allgather(zero1 *z, size_t n) {
    if (z->m->be->elem[BE_GRAD] == sizeof(double)) dist_allgather_f64(z->d, z->z, n);
    else dist_allgather_f32(z->d, z->z, n, NULL);
}

zero1 *zero1_create_with(dist *d, model *m, zero1_device_copy_fn device_copy) {
    const backend *be = m->be;
    // the flat copies treat gradients, optimizer state and (without a master copy) parameters
    // as arrays of one element type
    if (be->elem[BE_GRAD] != be->elem[BE_OPT] ||
        (!be->master && be->elem[BE_PARAM] != be->elem[BE_GRAD]))
        gdn_die("internal: backend %s: gradient, optimizer and parameter element sizes differ",
                be->name);
    if (!device_copy && be->elem[BE_GRAD] != sizeof(double))
        gdn_die("internal: ZeRO-1 on backend %s needs the device copy of a CUDA build", be->name);
    zero1 *z = gdn_malloc(sizeof *z);
    *z = (zero1){.d = d, .m = m, .device_copy = device_copy};
    dist_shard_range(d, m->n_elems, &z->lo, &z->hi);
    model_shard_optimizer(m, z->lo, z->hi);  // this rank keeps AdamW's m and v for its shard only
    z->z = be->alloc(dist_shard_capacity(d, m->n_elems) * be->elem[BE_GRAD]);
    return z;
}

void zero1_free(zero1 *z) {
    if (!z) return;
    z->m->be->release(z->z);
    free(z);
}

size_t zero1_shard_elems(const zero1 *z) {
    return dist_shard_capacity(z->d, z->m->n_elems) / (size_t)z->d->world;
}

double zero1_step(zero1 *z, long step, double lr, double max_norm, timeline *tl) {
    model *m = z->m;
    const backend *be = m->be;
    const gdn_config *c = &m->cfg;
    size_t n = m->n_elems, lo = z->lo, hi = z->hi;
    size_t eg = be->elem[BE_GRAD], ep = be->elem[BE_PARAM];
    char *gb = m->grad_mem, *p = m->param_mem, *w = m->master;
    double gnorm = sqrt(dist_scalar_sum_f64(z->d, be->sumsq(gb + lo * eg, hi - lo)));
    if (!isfinite(gnorm) || gnorm > max_norm) return gnorm;
    double scale = (c->grad_clip > 0 && gnorm > c->grad_clip) ? c->grad_clip / gnorm : 1.0;
    optim_adamw_range(m, lo, hi, step, lr, scale);
    // every rank's shard of the weights: the master copy when there is one, then the bf16
    // parameters from it; else the parameters themselves
    timeline_compute(tl, "norm+update");
    void *truth = w ? (void *)w : (void *)p;
    flat_copy(z, z->z, false, truth, n);
    zero1_allgather(z, n);
    flat_copy(z, truth, false, z->z, n);
    if (w) flat_copy(z, p, ep == 2, z->z, n);
    return gnorm;
}

void zero1_gather_moments(zero1 *z) {
    model *m = z->m;
    const backend *be = m->be;
    size_t n = m->n_elems, eg = be->elem[BE_GRAD];
    void *arr[2] = {m->opt_m, m->opt_v};
    for (int k = 0; k < 2; k++) {
        flat_copy(z, (char *)z->z + m->opt_lo * eg, false, arr[k], m->opt_n);
        zero1_allgather(z, n);
        if (z->d->rank != 0) continue;
        double *h = gdn_malloc(n * sizeof(double));
        be->download(h, z->z, n, BE_GRAD);
        m->ckpt_moments[k] = h;
    }
}

void zero1_release_moments(zero1 *z) {
    for (int k = 0; k < 2; k++) {
        free((void *)z->m->ckpt_moments[k]);
        z->m->ckpt_moments[k] = NULL;
    }
}
