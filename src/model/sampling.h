// sampling.h — the next token from a row of logits: temperature, top-k, top-p (nucleus) and a
// seeded draw, defined once here (docs/sampling.md) and computed by two twins: sample_token on
// the host (float64) and the GPU decoder's sampling kernel (decode_cuda.h), which agree on the
// same logits: same candidate set, same uniform, same token (up to the rounding of a sum that
// lands exactly on a boundary; tests/gpu/test_decode_cuda.cu checks it).
//
// For one row of logits l (V, all finite):
//   temperature 0:  the argmax (lowest id on ties); nothing is drawn.
//   candidates C:   all ids; with 0 < top_k < V the top_k ids of largest logit, ties at the
//                   k-th value broken towards the lower id.
//   weights:        w_i = exp((l_i - l_max) / temperature), i in C (l_max over all ids).
//   nucleus:        with 0 < top_p < 1, tau = the largest logit value in C such that
//                   sum_{i in C, l_i >= tau} w_i >= top_p sum_{i in C} w_i; C keeps the i with
//                   l_i >= tau (every id tied at tau stays).
//   draw:           u = rng_uniform_at(key, (row << 32) | t) in [0, 1) (Philox, rng.h), key =
//                   sample_key(seed), t = the drawn token's position in its sequence (the
//                   tokens before it, prompt included); walking C in ascending id order, the
//                   first i whose running sum of w exceeds u sum_{C} w.
// So sequence `row` draws the same uniform for position t on the CPU and the GPU, whatever the
// batch size, and a run with the same seed, prompt and logits repeats exactly.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double temperature;  // >= 0; 0 = greedy
    int top_k;           // <= 0 or >= V: no top-k cut
    double top_p;        // (0, 1]; 1 = no nucleus cut
    uint64_t seed;
} sample_params;

// The Philox key of the sampling stream of seed.
uint64_t sample_key(uint64_t seed);
// The uniform that sequence `row` (< 2^31) draws for its position t (< 2^32).
double sample_uniform(uint64_t key, int row, uint64_t t);
// False + a message when p is out of range (temperature < 0 or not finite, top_p outside (0, 1]).
bool sample_params_check(const sample_params *p, char *err, size_t errlen);
// The token drawn from logits (V) as above; scratch: V doubles and V ints of the caller's (no
// allocation here). A non-finite logit ends the program with a message naming its id.
int32_t sample_token(const double *logits, int V, const sample_params *p, uint64_t key, int row,
                     uint64_t t, double *scratch, int *iscratch);

#ifdef __cplusplus
}
#endif
