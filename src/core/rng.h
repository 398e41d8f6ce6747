// rng.h — counter-based random numbers (Philox4x32-10): the value at (key, counter) is a pure
// function of both, so rank r at step s draws a reproducible stream no matter what ran before,
// and a checkpoint only needs the counters. Same algorithm as cuRAND/PyTorch's Philox, so a
// GPU kernel can draw the same numbers (dropout masks) without state.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t key;     // seed (mixed with a stream id by rng_init)
    uint64_t counter; // how many 128-bit blocks were drawn
    uint32_t buf[4];
    int nbuf;         // unused values left in buf
} rng_t;

void rng_init(rng_t *r, uint64_t seed, uint64_t stream);
uint32_t rng_u32(rng_t *r);
uint64_t rng_u64(rng_t *r);
double rng_uniform(rng_t *r);                  // [0, 1), 53 bits
double rng_normal(rng_t *r);                   // N(0, 1), Box-Muller
uint64_t rng_below(rng_t *r, uint64_t n);      // uniform in [0, n), unbiased
// Position the stream as if exactly n 32-bit words had been drawn since rng_init: lets threads
// fill disjoint parts of one stream (rng_uniform draws 2 words, rng_normal 4) with the same bits.
void rng_seek(rng_t *r, uint64_t n);
// The 32-bit words drawn since rng_init (or since the position rng_seek set): rng_seek's inverse.
uint64_t rng_tell(const rng_t *r);
// Stateless: the 4 words of block `ctr` of stream `key`.
void philox4x32(uint64_t key, uint64_t ctr, uint32_t out[4]);
// Stateless uniform in [0,1) for element i of stream key (used by dropout masks).
double rng_uniform_at(uint64_t key, uint64_t i);

#ifdef __cplusplus
}
#endif
