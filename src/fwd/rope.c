// rope.c — CPU float64 rotary position embedding, rotate-half (NeoX) pairing. For token t
// (position within its sequence) and pair (i, i + D/2), i < D/2, theta_i = base^(-2i/D):
//   y[i]       = x[i] cos(t theta_i) - x[i+D/2] sin(t theta_i)
//   y[i+D/2]   = x[i+D/2] cos(t theta_i) + x[i] sin(t theta_i)
// Each pair is read before it is written, so y == x (in place) is allowed.
#include <math.h>
#include "../core/common.h"
#include "fwd_cpu.h"
#include "cpu_threads.h"

// Rotation of every pair by sign * t theta_i: +1 the forward, -1 its transpose (the backward).
void rope_rotate_cpu(double *y, const double *x, int B, int T, int H, int D, double base, double sign) {
    if (D % 2) gdn_die("rope: head dim %d is odd (the rotate-half pairing needs D even)", D);
    int half = D / 2;
    GDN_OMP(parallel for schedule(static) if ((size_t)B * T * H * D >= cpu_min_work_flat))
    for (int t = 0; t < T; t++)  // positions: independent
        for (int i = 0; i < half; i++) {
            double ang = t * pow(base, -2.0 * i / D);
            double c = cos(ang), s = sign * sin(ang);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++) {
                    size_t o = (((size_t)b * T + t) * H + h) * D;
                    double x1 = x[o + i], x2 = x[o + i + half];
                    y[o + i] = x1 * c - x2 * s;
                    y[o + i + half] = x2 * c + x1 * s;
                }
        }
}

void rope_fwd_cpu(double *y, const double *x, int B, int T, int H, int D, double base) {
    rope_rotate_cpu(y, x, B, T, H, D, base, 1.0);
}
