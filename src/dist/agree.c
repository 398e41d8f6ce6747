// agree.c — see agree.h. Rank 0's hashes go out by broadcast, each rank compares them with its
// own, and a sum over the ranks counts the ranks that differ, so every rank takes the same way.
#include "agree.h"
#include <string.h>
#include "../core/common.h"

uint64_t agree_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;  // FNV-1a 64's prime
    }
    return h;
}

int dist_agree_u64(dist *d, const uint64_t *mine, uint64_t *root, size_t n) {
    if (root != mine) memcpy(root, mine, n * sizeof *root);
    if (d->world == 1) return 0;
    dist_bcast_bytes(d, root, n * sizeof *root, 0);
    bool differs = memcmp(root, mine, n * sizeof *root) != 0;
    return (int)dist_scalar_sum_f64(d, differs ? 1.0 : 0.0);
}

char *dist_bcast_string(dist *d, const char *s, int root) {
    uint64_t len = d->rank == root ? (uint64_t)strlen(s) : 0;
    dist_bcast_bytes(d, &len, sizeof len, root);
    char *out = gdn_malloc((size_t)len + 1);
    if (d->rank == root) memcpy(out, s, (size_t)len);
    if (len > 0) dist_bcast_bytes(d, out, (size_t)len, root);
    out[len] = '\0';
    return out;
}
