// rope.c — CPU float64 RoPE backward: the forward is a rotation by +t theta_i of each pair
// (i, i + D/2), so the backward is the transposed rotation (by -t theta_i):
//   dx[i]     =  dy[i] cos + dy[i+D/2] sin
//   dx[i+D/2] = -dy[i] sin + dy[i+D/2] cos
// Each pair is read before it is written: dx == dy (in place) is allowed.
#include <math.h>
#include "../core/common.h"
#include "bwd_cpu.h"
#include "../fwd/cpu_threads.h"

void rope_bwd_cpu(double *dx, const double *dy, int B, int T, int H, int D, double base) {
    if (D % 2) gdn_die("rope: head dim %d is odd (the rotate-half pairing needs D even)", D);
    int half = D / 2;
    GDN_OMP(parallel for schedule(static) if ((size_t)B * T * H * D >= cpu_min_work_flat))
    for (int t = 0; t < T; t++)  // positions: independent
        for (int i = 0; i < half; i++) {
            double ang = t * pow(base, -2.0 * i / D);
            double c = cos(ang), s = sin(ang);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++) {
                    size_t o = (((size_t)b * T + t) * H + h) * D;
                    double g1 = dy[o + i], g2 = dy[o + i + half];
                    dx[o + i] = g1 * c + g2 * s;
                    dx[o + i + half] = -g1 * s + g2 * c;
                }
        }
}
