// rng.c — Philox4x32-10 (Salmon et al., SC'11), counter-based.
#include "rng.h"
#include <math.h>

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void philox4x32(uint64_t key, uint64_t ctr, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void rng_init(rng_t *r, uint64_t seed, uint64_t stream) {
    r->key = splitmix64(seed ^ splitmix64(stream + 0x632BE59BD9B4E019ull));
    r->counter = 0;
    r->nbuf = 0;
}

uint32_t rng_u32(rng_t *r) {
    if (r->nbuf == 0) {
        philox4x32(r->key, r->counter++, r->buf);
        r->nbuf = 4;
    }
    return r->buf[4 - r->nbuf--];
}

uint64_t rng_u64(rng_t *r) {
    uint64_t hi = rng_u32(r);
    return (hi << 32) | rng_u32(r);
}

void rng_seek(rng_t *r, uint64_t n) {
    r->counter = n / 4;
    r->nbuf = 0;
    if (n % 4) {
        philox4x32(r->key, r->counter++, r->buf);
        r->nbuf = 4 - (int)(n % 4);
    }
}

uint64_t rng_tell(const rng_t *r) { return 4 * r->counter - (uint64_t)r->nbuf; }

double rng_uniform(rng_t *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

double rng_normal(rng_t *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rng_below(rng_t *r, uint64_t n) {
    if (n <= 1) return 0;
    uint64_t lim = UINT64_MAX - UINT64_MAX % n, x;
    do x = rng_u64(r); while (x >= lim);
    return x % n;
}

double rng_uniform_at(uint64_t key, uint64_t i) {
    uint32_t o[4];
    philox4x32(key, i >> 1, o);
    uint64_t x = (i & 1) ? ((uint64_t)o[2] << 32 | o[3]) : ((uint64_t)o[0] << 32 | o[1]);
    return (double)(x >> 11) * 0x1.0p-53;
}
