// rope.c — CPU float64 RoPE backward: the forward is a rotation by +t theta_i of each pair
// (i, i + D/2), so the backward is the transposed rotation (by -t theta_i):
//   dx[i]     =  dy[i] cos + dy[i+D/2] sin
//   dx[i+D/2] = -dy[i] sin + dy[i+D/2] cos
// Each pair is read before it is written: dx == dy (in place) is allowed.
#include "../core/common.h"
#include "bwd_cpu.h"
#include "../fwd/fwd_cpu.h"

void rope_bwd_cpu(double *dx, const double *dy, int B, int T, int H, int D, double base) {
    rope_rotate_cpu(dx, dy, B, T, H, D, base, -1.0);  // the same bits as the formulas above
}

void rope_bwd_docs_cpu(double *dx, const double *dy, int B, int T, int H, int D, double base,
                       const int32_t *doc_start) {
    rope_rotate_docs_cpu(dx, dy, B, T, H, D, base, -1.0, doc_start);
}
