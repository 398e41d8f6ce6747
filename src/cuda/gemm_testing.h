// gemm_testing.h — for tests only: a hook into the algorithm tuning of the GEMM wrapper
// (gemm.cu tune_plan). Not part of the wrapper's interface (gemm.h).
#pragma once
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

// true: each tuned plan takes the last candidate that passed the bitwise certificate instead of
// the fastest, so that a test exercises a choice other than the heuristic's first whatever the
// timing (every plan with a certified candidate besides the first leaves it). false: the fastest
// (the default). Drops the cached plans.
void cuda_linear_tune_pick_last(bool on);

#ifdef __cplusplus
}
#endif
