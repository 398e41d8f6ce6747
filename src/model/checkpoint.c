// checkpoint.c — see checkpoint.h. Every HDF5 call is checked; a failure while writing removes
// the temporary file and returns false with the reason (the previous checkpoint is untouched).
#include "checkpoint.h"
#include <hdf5.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <unistd.h>
#include "../core/common.h"

#define CKPT_FORMAT "gdn-checkpoint"
#define CKPT_VERSION 1

static void seterr(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static bool attr_str_w(hid_t loc, const char *name, const char *val) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return false;
    bool ok = H5Tset_size(t, strlen(val) + 1) >= 0;
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = (ok && s >= 0) ? H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT) : -1;
    ok = a >= 0 && H5Awrite(a, t, val) >= 0;
    if (a >= 0) ok &= H5Aclose(a) >= 0;
    if (s >= 0) ok &= H5Sclose(s) >= 0;
    ok &= H5Tclose(t) >= 0;
    return ok;
}

static bool attr_num_w(hid_t loc, const char *name, hid_t type, const void *val) {
    hid_t s = H5Screate(H5S_SCALAR);
    if (s < 0) return false;
    hid_t a = H5Acreate2(loc, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, type, val) >= 0;
    if (a >= 0) ok &= H5Aclose(a) >= 0;
    ok &= H5Sclose(s) >= 0;
    return ok;
}

static char *attr_str_r(hid_t loc, const char *name) {
    if (H5Aexists(loc, name) <= 0) return NULL;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return NULL;
    hid_t ft = H5Aget_type(a);
    char *out = NULL;
    bool ok = true;
    if (ft >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft)) {
        size_t n = H5Tget_size(ft);
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (mt >= 0 && H5Tset_size(mt, n + 1) >= 0) {
            out = gdn_malloc(n + 1);
            if (H5Aread(a, mt, out) < 0) {
                free(out);
                out = NULL;
            }
        }
        if (mt >= 0 && H5Tclose(mt) < 0) ok = false;
    }
    if (ft >= 0 && H5Tclose(ft) < 0) ok = false;
    if (H5Aclose(a) < 0) ok = false;
    if (!ok) {  // a failed close: the library is in trouble, do not trust what was read
        free(out);
        out = NULL;
    }
    return out;
}

static bool attr_num_r(hid_t loc, const char *name, hid_t type, void *val) {
    if (H5Aexists(loc, name) <= 0) return false;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return false;
    bool ok = H5Aread(a, type, val) >= 0;
    ok &= H5Aclose(a) >= 0;
    return ok;
}

static bool write_tensor(hid_t grp, const char *name, const double *data, int rows, int cols) {
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    hid_t s = H5Screate_simple(2, dims, NULL);
    if (s < 0) return false;
    hid_t d = H5Dcreate2(grp, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    if (d >= 0) ok &= H5Dclose(d) >= 0;
    ok &= H5Sclose(s) >= 0;
    return ok;
}

// Three groups of tensors: the parameters and the two AdamW moments.
static const char *const GROUPS[3] = {"params", "adam_m", "adam_v"};

// Moments: from m->ckpt_moments when the loop gathered sharded ones, else from opt_m / opt_v.
static void group_download(const model *m, int g, int i, double *h) {
    const param_info *p = &m->params[i];
    if (g == 0) {
        model_param_download(m, i, h);
    } else if (m->ckpt_moments[g - 1]) {
        memcpy(h, m->ckpt_moments[g - 1] + p->offset, p->numel * sizeof(double));
    } else {
        if (m->opt_lo != 0 || m->opt_n != m->n_elems)
            gdn_die("internal: checkpoint of ZeRO-1-sharded moments without ckpt_moments");
        m->be->download(h, model_opt(m, g == 1 ? m->opt_m : m->opt_v, i), p->numel, BE_OPT);
    }
}

// Moments: only the part of tensor i inside [opt_lo, opt_lo + opt_n) (all of it unsharded).
static void group_upload(model *m, int g, int i, const double *h) {
    const param_info *p = &m->params[i];
    if (g == 0) {
        model_param_upload(m, i, h);
        return;
    }
    size_t a = GDN_MAX(p->offset, m->opt_lo), b = GDN_MIN(p->offset + p->numel, m->opt_lo + m->opt_n);
    if (a >= b) return;
    char *base = g == 1 ? m->opt_m : m->opt_v;
    m->be->upload(base + (a - m->opt_lo) * m->be->elem[BE_OPT], h + (a - p->offset), b - a, BE_OPT);
}

bool checkpoint_save(const char *path, const model *m, const train_state *st, char *err,
                     size_t errlen) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        seterr(err, errlen, "cannot create checkpoint '%s' (%s)", tmp, strerror(errno));
        return false;
    }
    bool ok = true;
    char *cfg = config_to_string(&m->cfg);
    int64_t ver = CKPT_VERSION, step = st->step, ws = st->world_size;
    uint64_t tok = st->tokens_seen, pos = st->sampler_pos, seed = st->seed;
    ok &= attr_str_w(f, "format", CKPT_FORMAT);
    ok &= attr_num_w(f, "version", H5T_NATIVE_INT64, &ver);
    ok &= attr_str_w(f, "config", cfg);
    ok &= attr_str_w(f, "backend", m->be->name);
    ok &= attr_num_w(f, "step", H5T_NATIVE_INT64, &step);
    ok &= attr_num_w(f, "tokens_seen", H5T_NATIVE_UINT64, &tok);
    ok &= attr_num_w(f, "sampler_pos", H5T_NATIVE_UINT64, &pos);
    ok &= attr_num_w(f, "seed", H5T_NATIVE_UINT64, &seed);
    ok &= attr_num_w(f, "best_val", H5T_NATIVE_DOUBLE, &st->best_val);
    ok &= attr_num_w(f, "world_size", H5T_NATIVE_INT64, &ws);
    free(cfg);
    size_t maxn = 0;
    for (int i = 0; i < m->n_params; i++) maxn = GDN_MAX(maxn, m->params[i].numel);
    double *h = gdn_malloc(maxn * sizeof(double));
    for (int g = 0; g < 3 && ok; g++) {
        hid_t grp = H5Gcreate2(f, GROUPS[g], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ok &= grp >= 0;
        for (int i = 0; i < m->n_params && ok; i++) {
            const param_info *p = &m->params[i];
            group_download(m, g, i, h);
            ok &= write_tensor(grp, p->name, h, p->rows, p->cols);
        }
        if (grp >= 0) ok &= H5Gclose(grp) >= 0;
    }
    free(h);
    ok &= H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0;
    ok &= H5Fclose(f) >= 0;
    if (ok) {  // the data must be on disk before the rename makes it the checkpoint
        int fd = open(tmp, O_RDONLY);
        ok = fd >= 0 && fsync(fd) == 0;
        if (fd >= 0) close(fd);
    }
    if (!ok) {
        seterr(err, errlen, "writing checkpoint '%s' failed (%s); the previous checkpoint is kept",
               path, errno ? strerror(errno) : "HDF5 error");
        unlink(tmp);
        return false;
    }
    if (rename(tmp, path) != 0) {
        seterr(err, errlen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        unlink(tmp);
        return false;
    }
    return true;
}

static hid_t open_checked(const char *path, char *err, size_t errlen) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (access(path, R_OK) != 0) {
        seterr(err, errlen, "cannot read checkpoint '%s': %s", path, strerror(errno));
        return -1;
    }
    if (H5Fis_hdf5(path) <= 0) {
        seterr(err, errlen, "checkpoint '%s' is not an HDF5 file", path);
        return -1;
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        seterr(err, errlen, "cannot open checkpoint '%s' as HDF5", path);
        return -1;
    }
    char *fmt = attr_str_r(f, "format");
    int64_t ver = -1;
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        seterr(err, errlen, "'%s': attribute 'format' is %s%s%s, expected \"%s\"", path,
               fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "", CKPT_FORMAT);
        free(fmt);
        (void)H5Fclose(f);  // failing already: the message says why
        return -1;
    }
    free(fmt);
    if (!attr_num_r(f, "version", H5T_NATIVE_INT64, &ver) || ver != CKPT_VERSION) {
        seterr(err, errlen, "'%s': attribute 'version' is %lld, this build reads version %d",
               path, (long long)ver, CKPT_VERSION);
        (void)H5Fclose(f);  // failing already: the message says why
        return -1;
    }
    return f;
}

char *checkpoint_read_config(const char *path, char *err, size_t errlen) {
    hid_t f = open_checked(path, err, errlen);
    if (f < 0) return NULL;
    char *cfg = attr_str_r(f, "config");
    if (!cfg) seterr(err, errlen, "'%s': attribute 'config' is missing", path);
    if (H5Fclose(f) < 0 && cfg) {
        seterr(err, errlen, "'%s': cannot close the file after reading it", path);
        free(cfg);
        cfg = NULL;
    }
    return cfg;
}

bool checkpoint_load(const char *path, model *m, train_state *st, char *err, size_t errlen) {
    hid_t f = open_checked(path, err, errlen);
    if (f < 0) return false;
    int64_t step = 0, ws = 1;
    bool ok = attr_num_r(f, "step", H5T_NATIVE_INT64, &step) &&
              attr_num_r(f, "tokens_seen", H5T_NATIVE_UINT64, &st->tokens_seen) &&
              attr_num_r(f, "sampler_pos", H5T_NATIVE_UINT64, &st->sampler_pos) &&
              attr_num_r(f, "seed", H5T_NATIVE_UINT64, &st->seed) &&
              attr_num_r(f, "best_val", H5T_NATIVE_DOUBLE, &st->best_val) &&
              attr_num_r(f, "world_size", H5T_NATIVE_INT64, &ws);
    if (!ok) {
        seterr(err, errlen, "'%s': loop state attributes (step, tokens_seen, sampler_pos, seed, "
                            "best_val, world_size) missing or unreadable", path);
        (void)H5Fclose(f);  // failing already: the message says why
        return false;
    }
    st->step = (long)step;
    st->world_size = (int)ws;
    size_t maxn = 0;
    for (int i = 0; i < m->n_params; i++) maxn = GDN_MAX(maxn, m->params[i].numel);
    double *h = gdn_malloc(maxn * sizeof(double));
    for (int g = 0; g < 3 && ok; g++) {
        hid_t grp = H5Gopen2(f, GROUPS[g], H5P_DEFAULT);
        if (grp < 0) {
            seterr(err, errlen, "'%s': group '/%s' is missing", path, GROUPS[g]);
            ok = false;
            break;
        }
        for (int i = 0; i < m->n_params && ok; i++) {
            const param_info *p = &m->params[i];
            if (H5Lexists(grp, p->name, H5P_DEFAULT) <= 0) {
                seterr(err, errlen, "'%s': tensor '/%s/%s' is missing (checkpoint of a different "
                                    "model shape?)", path, GROUPS[g], p->name);
                ok = false;
                break;
            }
            hid_t d = H5Dopen2(grp, p->name, H5P_DEFAULT);
            hid_t s = d >= 0 ? H5Dget_space(d) : -1;
            hsize_t dims[2] = {0, 0};
            int nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
            if (nd == 2 && H5Sget_simple_extent_dims(s, dims, NULL) < 0) nd = -1;
            if (nd != 2 || dims[0] != (hsize_t)p->rows || dims[1] != (hsize_t)p->cols) {
                seterr(err, errlen, "'%s': tensor '/%s/%s' has shape (%llu, %llu), the configured "
                                    "model has (%d, %d)", path, GROUPS[g], p->name,
                       (unsigned long long)dims[0], (unsigned long long)dims[1], p->rows, p->cols);
                ok = false;
            } else if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, h) < 0) {
                seterr(err, errlen, "'%s': cannot read tensor '/%s/%s'", path, GROUPS[g], p->name);
                ok = false;
            } else {
                group_upload(m, g, i, h);
            }
            bool closed = (s < 0 || H5Sclose(s) >= 0) & (d < 0 || H5Dclose(d) >= 0);
            if (ok && !closed) {
                seterr(err, errlen, "'%s': cannot close tensor '/%s/%s'", path, GROUPS[g], p->name);
                ok = false;
            }
        }
        if (H5Gclose(grp) < 0 && ok) {
            seterr(err, errlen, "'%s': cannot close group '/%s'", path, GROUPS[g]);
            ok = false;
        }
    }
    free(h);
    if (H5Fclose(f) < 0 && ok) {
        seterr(err, errlen, "'%s': cannot close the file after reading it", path);
        ok = false;
    }
    return ok;
}
