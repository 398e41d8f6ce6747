// decode.h — token-by-token inference (generation) on the CPU in float64: the same function as
// the model's forward (model.c), computed one token at a time with carried state instead of
// over a whole sequence:
//   GDN layers: the recurrent form of DESIGN 3.3, one state H = S^T (dk x dv) per head, and a
//               rolling buffer of the last conv_size - 1 inputs per channel for the short conv;
//   S layers:   a ring KV cache of the last min(window, max_len) roped keys and values;
//   A layers:   a KV cache of every position since the last reset (full causal attention).
// Logits at position t after steps with tokens x_0..x_t equal row t of the full forward over
// x_0..x_t (tests/test_decode.c checks 1e-10 relative).
#pragma once
#include <stdint.h>
#include "../core/rng.h"
#include "model.h"

typedef struct decoder decoder;

// A decoder for model m (any backend: its parameters are copied to host float64 here and at
// every decoder_reset). max_len bounds the positions between resets (>= 1); caches are sized
// from it once, nothing is allocated in decoder_step.
decoder *decoder_create(const model *m, int max_len);
// Back to position 0 with zero states and empty caches; re-reads the model's parameters.
void decoder_reset(decoder *d);
// Feed token (0 <= token < V) at the next position; returns the logits (V) of the token that
// follows (a buffer of the decoder, overwritten by the next step). Feeding more
// than max_len tokens since the last reset is an error that ends the program.
const double *decoder_step(decoder *d, int32_t token);
int decoder_pos(const decoder *d);    // tokens fed since the last reset
// One token drawn from logits (V): temperature 0 is greedy (argmax, lowest id on ties); else
// softmax(logits / temperature) restricted to the top_k largest logits (top_k <= 0 or >= V:
// all; ties broken towards the lower id), one uniform from r. Non-finite logits end the program.
int32_t decoder_sample(decoder *d, const double *logits, double temperature, int top_k, rng_t *r);
void decoder_free(decoder *d);
