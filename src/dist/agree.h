// agree.h — ranks check that they run one job before they train it: each hashes what it was
// given (the effective config, the data file's identity, the initial parameters and loop state)
// and compares the hash with rank 0's. A data-parallel run whose ranks disagree would otherwise
// go wrong in the collectives (buffers of different sizes: heap corruption) or train replicas
// that never agree, without a word. train.c calls these before the first collective whose size
// depends on the config, and stops every rank on a mismatch with a message naming what differs.
//
// Every call below is collective (every rank, same order); with world == 1 they return at once.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AGREE_HASH_INIT 0xcbf29ce484222325ull  // FNV-1a 64's offset basis

// FNV-1a 64 of p[0, n), continuing from h (AGREE_HASH_INIT to start).
uint64_t agree_hash(uint64_t h, const void *p, size_t n);

// mine[0, n) against rank 0's: root[0, n) <- rank 0's values (root may be mine on rank 0).
// Returns the number of ranks whose values differ from rank 0's, the same on every rank.
// n must be the same on every rank.
int dist_agree_u64(dist *d, const uint64_t *mine, uint64_t *root, size_t n);

// Rank root's string s, as a malloc'd copy, on every rank (s is read on rank root only).
char *dist_bcast_string(dist *d, const char *s, int root);

#ifdef __cplusplus
}
#endif
