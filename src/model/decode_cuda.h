// decode_cuda.h — token-by-token generation on the GPU for a batch of sequences: the twin of
// decode.h (float64, CPU) over the model's own device parameters (the CUDA backend, fp32 or bf16
// mode; nothing is copied), with the sampling rule of sampling.h drawn on the device.
//   GDN layers: state H = S^T (B, H, dk, dv) fp32, a ring of the last conv_size - 1 projected
//               q, k, v inputs per channel (decode_step.h);
//   S layers:   a ring K/V cache of the last min(window, max_len) roped keys and values;
//   A layers:   a K/V cache of every position (max_len slots).
// The prompt is fed token by token through the same step (decoder_cuda_step), not through the
// chunked forward: one code path whose every logit the GPU test compares with the CPU decoder.
// Each step: the embedding, norms, projections (cuBLASLt), gates, gated norm and SwiGLU are the
// training ops of cuda/ops.h on B rows; the conv, GDN recurrence and attention are decode_step.h.
// decoder_cuda_generate records one step (draw + forward) as a CUDA graph at its first call and
// replays it (decoder_cuda_set_graph(d, false): plain launches; the same results).
// All work runs on the decoder's own stream; each entry point first waits for the device (the
// model may have been changed by training on another stream).
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "model.h"
#include "sampling.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct decoder_cuda decoder_cuda;

// A decoder for `batch` sequences of up to max_len positions each, reading m's parameters in
// place (m on the CUDA backend: ends the program otherwise). All memory is allocated here.
decoder_cuda *decoder_cuda_create(const model *m, int batch, int max_len);
void decoder_cuda_free(decoder_cuda *d);
// Back to position 0 with zero states and empty caches.
void decoder_cuda_reset(decoder_cuda *d);
int decoder_cuda_pos(const decoder_cuda *d);
// Wait until the decoder's queued work is done (for timing).
void decoder_cuda_sync(decoder_cuda *d);
// Feed tokens (host, batch entries, each in [0, V)) at the next position of every sequence; the
// logits of the following token stay on the device. More than max_len positions end the program.
void decoder_cuda_step(decoder_cuda *d, const int32_t *tokens);
// The last step's logits (batch, V) as host float64.
void decoder_cuda_logits(decoder_cuda *d, double *dst);
// n times: draw every sequence's next token from the last logits (sampling.h, row r = sequence
// r, t = the current position) and feed it. out: host (batch, n), row-major, or NULL. Needs pos
// + n <= max_len. A non-finite logit ends the program with a message.
void decoder_cuda_generate(decoder_cuda *d, const sample_params *p, int n, int32_t *out);
// CUDA graph replay in decoder_cuda_generate (default on).
void decoder_cuda_set_graph(decoder_cuda *d, bool on);

#ifdef __cplusplus
}
#endif
