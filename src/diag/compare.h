// compare.h — the same model, batch and weights on the float64 CPU backend and on another
// backend (the GPU), gradient by gradient (tools/gradcheck --device cuda; the GPU tests).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdint.h>
#include <stdio.h>
#include "../core/config.h"
#include "../model/backend.h"

// Builds the model of c (vocab_size < 2: 300) for micro-batches of B x T on `test` and on
// backend_cpu, initialises `test` with model_init_params(seed), copies the weights `test` reads
// (its BE_PARAM tensors, so bf16 rounding is shared) into the CPU model, draws one batch of
// random tokens (about one target in 16 ignored), runs forward + backward (loss = mean
// cross-entropy, dropout as in training with the same masks) on both, and prints to `out` the
// loss and, per parameter tensor, the norm-wise relative error ||g - g_cpu|| / ||g_cpu|| and
// the worst element error relative to max |g_cpu|. Pass: relative error <= tol (loss and every
// tensor). For A_log and dt_bias, whose gradients are sums over all tokens that can cancel,
// the table also shows err / sum|terms| and kappa = sum|terms| / |sum| (diagnostics only).
// Returns the number of failures (0: all pass).
int model_compare_backends(const gdn_config *c, const backend *test, int B, int T, double tol,
                           uint64_t seed, FILE *out);
// The same with the batch cut into documents: doc_start (B*T, model_set_doc_starts' form; NULL:
// none) is set on both models before the forward.
int model_compare_backends_docs(const gdn_config *c, const backend *test, int B, int T,
                                double tol, uint64_t seed, const int32_t *doc_start, FILE *out);

#ifdef __cplusplus
}
#endif
