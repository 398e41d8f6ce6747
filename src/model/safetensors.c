// safetensors.c — see safetensors.h. The JSON header goes through jansson; the tensors are
// written and read in chunks, byte by byte little-endian (no assumption on the host's order).
#include "safetensors.h"
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../core/common.h"

#define ST_HEADER_MAX ((uint64_t)100 << 20)   // the format's own limit on the header (100 MB)
#define ST_CHUNK ((size_t)1 << 16)            // elements converted per write / read

__attribute__((format(printf, 3, 4)))
static void st_err(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

const char *st_dtype_name(st_dtype t) { return t == ST_BF16 ? "BF16" : "F32"; }
size_t st_dtype_size(st_dtype t) { return t == ST_BF16 ? 2 : 4; }

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t st_bf16_from_double(double x) {
    uint32_t u = f32_bits((float)x);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))  // NaN: keep it quiet
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return (uint16_t)(u >> 16);
}
double st_bf16_to_double(uint16_t h) { return (double)f32_from_bits((uint32_t)h << 16); }

// ---- writer -----------------------------------------------------------------------------------

static bool write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

// The tensors' values as dtype bytes, chunk by chunk.
static bool write_tensor(FILE *f, const st_out *t, size_t numel, unsigned char *buf) {
    const size_t es = st_dtype_size(t->dtype);
    for (size_t i0 = 0; i0 < numel; i0 += ST_CHUNK) {
        const size_t n = GDN_MIN(ST_CHUNK, numel - i0);
        for (size_t i = 0; i < n; i++) {
            unsigned char *o = buf + i * es;
            if (t->dtype == ST_BF16) {
                uint16_t h = st_bf16_from_double(t->data[i0 + i]);
                o[0] = (unsigned char)h;
                o[1] = (unsigned char)(h >> 8);
            } else {
                uint32_t u = f32_bits((float)t->data[i0 + i]);
                for (int b = 0; b < 4; b++) o[b] = (unsigned char)(u >> (8 * b));
            }
        }
        if (!write_all(f, buf, n * es)) return false;
    }
    return true;
}

bool st_write(const char *path, const st_out *t, int n, char *err, size_t errlen) {
    json_t *root = json_object(), *meta = json_object();
    bool ok = root && meta && json_object_set_new(meta, "format", json_string("pt")) == 0 &&
              json_object_set_new(root, "__metadata__", meta) == 0;
    bool dup = false;
    uint64_t off = 0;
    size_t *numel = gdn_malloc((size_t)GDN_MAX(n, 1) * sizeof *numel);
    for (int i = 0; ok && i < n; i++) {
        size_t ne = 1;
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) {
            ne *= (size_t)t[i].shape[d];
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        }
        numel[i] = ne;
        const uint64_t bytes = (uint64_t)ne * st_dtype_size(t[i].dtype);
        if (json_object_get(root, t[i].name)) {
            st_err(err, errlen, "'%s': tensor '%s' given twice", path, t[i].name);
            json_decref(shape);
            dup = true;
            ok = false;
            break;
        }
        json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtype_name(t[i].dtype), "shape",
                              shape, "data_offsets", (json_int_t)off, (json_int_t)(off + bytes));
        ok = e && json_object_set_new(root, t[i].name, e) == 0;
        off += bytes;
    }
    char *hdr = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!hdr) {
        free(numel);
        if (!dup) st_err(err, errlen, "'%s': cannot build the JSON header", path);
        return false;
    }
    size_t hn = strlen(hdr), padded = (hn + 7) & ~(size_t)7;  // data starts 8-byte aligned
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        st_err(err, errlen, "'%s': path too long", path);
        free(hdr);
        free(numel);
        return false;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st_err(err, errlen, "'%s': cannot create: %s", tmp, strerror(errno));
        free(hdr);
        free(numel);
        return false;
    }
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    ok = write_all(f, len8, 8) && write_all(f, hdr, hn);
    for (size_t i = hn; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    free(hdr);
    unsigned char *buf = gdn_malloc(ST_CHUNK * 4);
    for (int i = 0; ok && i < n; i++) ok = write_tensor(f, &t[i], numel[i], buf);
    free(buf);
    free(numel);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        st_err(err, errlen, "'%s': write failed: %s", tmp, strerror(saved ? saved : errno));
        remove(tmp);
        return false;
    }
    if (rename(tmp, path) != 0) {
        st_err(err, errlen, "'%s': cannot rename to '%s': %s", tmp, path, strerror(errno));
        remove(tmp);
        return false;
    }
    return true;
}

// ---- reader -----------------------------------------------------------------------------------

void st_close(st_file *f) {
    if (f->f) fclose(f->f);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

static int by_begin(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// An integer >= 0 from a JSON value, or false.
static bool json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

// Parses entry `name` = e into *t; false + err naming the file and the tensor.
static bool parse_entry(const char *path, const char *name, json_t *e, st_tensor *t, char *err,
                        size_t errlen) {
    if (!json_is_object(e)) {
        st_err(err, errlen, "'%s': tensor '%s': its header entry is not a JSON object", path, name);
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets")) {
            st_err(err, errlen, "'%s': tensor '%s': unknown key \"%s\" in its header entry "
                   "(allowed: dtype, shape, data_offsets)", path, name, k);
            return false;
        }
    }
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
           *of = json_object_get(e, "data_offsets");
    if (!json_is_string(dt)) {
        st_err(err, errlen, "'%s': tensor '%s': \"dtype\" missing or not a string", path, name);
        return false;
    }
    const char *ds = json_string_value(dt);
    if (!strcmp(ds, "F32")) t->dtype = ST_F32;
    else if (!strcmp(ds, "BF16")) t->dtype = ST_BF16;
    else {
        st_err(err, errlen, "'%s': tensor '%s': dtype \"%s\" is not read (F32 or BF16 only)", path,
               name, ds);
        return false;
    }
    if (!json_is_array(sh) || json_array_size(sh) > ST_MAX_DIMS) {
        st_err(err, errlen, "'%s': tensor '%s': \"shape\" missing, not an array, or more than %d "
               "dimensions", path, name, ST_MAX_DIMS);
        return false;
    }
    t->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t s;
        if (!json_u64(json_array_get(sh, (size_t)d), &s) || s > ((uint64_t)1 << 40)) {
            st_err(err, errlen, "'%s': tensor '%s': shape[%d] is not an integer in [0, 2^40]", path,
                   name, d);
            return false;
        }
        t->shape[d] = (int64_t)s;
        if (s && numel > ((uint64_t)1 << 50) / s) {
            st_err(err, errlen, "'%s': tensor '%s': the shape's element count overflows", path, name);
            return false;
        }
        numel *= s;
    }
    t->numel = (size_t)numel;
    if (!json_is_array(of) || json_array_size(of) != 2 ||
        !json_u64(json_array_get(of, 0), &t->begin) || !json_u64(json_array_get(of, 1), &t->end) ||
        t->begin > t->end) {
        st_err(err, errlen, "'%s': tensor '%s': \"data_offsets\" must be [begin, end], integers "
               "with 0 <= begin <= end", path, name);
        return false;
    }
    const uint64_t need = numel * st_dtype_size(t->dtype);
    if (t->end - t->begin != need) {
        st_err(err, errlen, "'%s': tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but "
               "shape and dtype %s need %llu", path, name, (unsigned long long)t->begin,
               (unsigned long long)t->end, (unsigned long long)(t->end - t->begin), ds,
               (unsigned long long)need);
        return false;
    }
    return true;
}

bool st_open(st_file *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->path = gdn_strdup(path);
    f->f = fopen(path, "rb");
    if (!f->f) {
        st_err(err, errlen, "'%s': cannot open: %s", path, strerror(errno));
        st_close(f);
        return false;
    }
    struct stat sb;
    if (fstat(fileno(f->f), &sb) != 0) {
        st_err(err, errlen, "'%s': cannot stat: %s", path, strerror(errno));
        st_close(f);
        return false;
    }
    const uint64_t fsize = (uint64_t)sb.st_size;
    unsigned char len8[8];
    if (fsize < 8 || fread(len8, 1, 8, f->f) != 8) {
        st_err(err, errlen, "'%s': truncated: %llu bytes, shorter than the 8-byte header length",
               path, (unsigned long long)fsize);
        st_close(f);
        return false;
    }
    uint64_t hn = 0;
    for (int b = 0; b < 8; b++) hn |= (uint64_t)len8[b] << (8 * b);
    if (hn < 2 || hn > ST_HEADER_MAX || hn > fsize - 8) {
        st_err(err, errlen, "'%s': header length %llu is impossible for a file of %llu bytes "
               "(2 to min(100 MB, file size - 8)): truncated or not a safetensors file", path,
               (unsigned long long)hn, (unsigned long long)fsize);
        st_close(f);
        return false;
    }
    char *hdr = gdn_malloc((size_t)hn + 1);
    if (fread(hdr, 1, (size_t)hn, f->f) != (size_t)hn) {
        st_err(err, errlen, "'%s': cannot read the %llu-byte header: %s", path,
               (unsigned long long)hn, ferror(f->f) ? strerror(errno) : "short file");
        free(hdr);
        st_close(f);
        return false;
    }
    json_error_t je;
    json_t *root = json_loadb(hdr, (size_t)hn, JSON_REJECT_DUPLICATES, &je);
    free(hdr);
    if (!root || !json_is_object(root)) {
        if (root)
            st_err(err, errlen, "'%s': the header is JSON but not an object", path);
        else
            st_err(err, errlen, "'%s': header JSON: %s (line %d, column %d)", path, je.text,
                   je.line, je.column);
        json_decref(root);
        st_close(f);
        return false;
    }
    f->data_start = 8 + hn;
    const uint64_t dsize = fsize - f->data_start;
    f->t = gdn_malloc((json_object_size(root) + 1) * sizeof *f->t);
    const char *name;
    json_t *e;
    bool ok = true;
    json_object_foreach(root, name, e) {
        if (!strcmp(name, "__metadata__")) {
            if (!json_is_object(e)) {
                st_err(err, errlen, "'%s': \"__metadata__\" is not an object", path);
                ok = false;
                break;
            }
            continue;
        }
        st_tensor *t = &f->t[f->n];
        if (!name[0]) {
            st_err(err, errlen, "'%s': a tensor has an empty name", path);
            ok = false;
            break;
        }
        if (!parse_entry(path, name, e, t, err, errlen)) {
            ok = false;
            break;
        }
        if (t->end > dsize) {
            st_err(err, errlen, "'%s': tensor '%s': data_offsets [%llu, %llu] end beyond the "
                   "file's %llu data bytes (truncated file?)", path, name,
                   (unsigned long long)t->begin, (unsigned long long)t->end,
                   (unsigned long long)dsize);
            ok = false;
            break;
        }
        t->name = gdn_strdup(name);
        f->n++;
    }
    json_decref(root);
    if (ok && f->n > 1) qsort(f->t, (size_t)f->n, sizeof *f->t, by_begin);
    uint64_t at = 0;  // the tensors must tile [0, dsize)
    for (int i = 0; ok && i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        if (t->begin < at) {
            st_err(err, errlen, "'%s': tensor '%s' (bytes [%llu, %llu)) overlaps tensor '%s'", path,
                   t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                   f->t[i - 1].name);
            ok = false;
        } else if (t->begin > at) {
            st_err(err, errlen, "'%s': data bytes [%llu, %llu) before tensor '%s' belong to no "
                   "tensor", path, (unsigned long long)at, (unsigned long long)t->begin, t->name);
            ok = false;
        }
        at = t->end;
    }
    if (ok && at != dsize) {
        st_err(err, errlen, "'%s': %llu data bytes after the last tensor belong to no tensor", path,
               (unsigned long long)(dsize - at));
        ok = false;
    }
    if (!ok) st_close(f);
    return ok;
}

bool st_read(const st_file *f, const st_tensor *t, double *dst, char *err, size_t errlen) {
    const size_t es = st_dtype_size(t->dtype);
    if (fseeko(f->f, (off_t)(f->data_start + t->begin), SEEK_SET) != 0) {
        st_err(err, errlen, "'%s': tensor '%s': seek failed: %s", f->path, t->name, strerror(errno));
        return false;
    }
    unsigned char *buf = gdn_malloc(ST_CHUNK * 4);
    bool ok = true;
    for (size_t i0 = 0; ok && i0 < t->numel; i0 += ST_CHUNK) {
        const size_t n = GDN_MIN(ST_CHUNK, t->numel - i0);
        if (fread(buf, es, n, f->f) != n) {
            st_err(err, errlen, "'%s': tensor '%s': read failed: %s", f->path, t->name,
                   ferror(f->f) ? strerror(errno) : "short file");
            ok = false;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            const unsigned char *p = buf + i * es;
            if (t->dtype == ST_BF16) {
                dst[i0 + i] = st_bf16_to_double((uint16_t)(p[0] | (p[1] << 8)));
            } else {
                uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24;
                dst[i0 + i] = (double)f32_from_bits(u);
            }
        }
    }
    free(buf);
    return ok;
}
