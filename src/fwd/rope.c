// rope.c — CPU float64 rotary position embedding, rotate-half (NeoX) pairing. For token t
// (position within its sequence) and pair (i, i + D/2), i < D/2, theta_i = base^(-2i/D):
//   y[i]       = x[i] cos(t theta_i) - x[i+D/2] sin(t theta_i)
//   y[i+D/2]   = x[i+D/2] cos(t theta_i) + x[i] sin(t theta_i)
// With documents (doc_start, fwd_cpu.h) the position of token t of row b is t - doc_start[b*T+t].
// Each pair is read before it is written, so y == x (in place) is allowed.
#include <math.h>
#include "../core/common.h"
#include "fwd_cpu.h"
#include "cpu_threads.h"

// Rotation of every pair by sign * t theta_i: +1 the forward, -1 its transpose (the backward).
void rope_rotate_docs_cpu(double *y, const double *x, int B, int T, int H, int D, double base,
                          double sign, const int32_t *doc_start) {
    if (D % 2) gdn_die("rope: head dim %d is odd (the rotate-half pairing needs D even)", D);
    int half = D / 2;
    if (doc_start) {  // positions differ between rows: the angles per token (b, t)
        GDN_OMP(parallel for schedule(static) if ((size_t)B * T * H * D >= cpu_min_work_flat))
        for (int bt = 0; bt < B * T; bt++) {
            const int pos = bt % T - doc_start[bt];
            for (int i = 0; i < half; i++) {
                double ang = pos * pow(base, -2.0 * i / D);
                double c = cos(ang), s = sign * sin(ang);
                for (int h = 0; h < H; h++) {
                    size_t o = ((size_t)bt * H + h) * D;
                    double x1 = x[o + i], x2 = x[o + i + half];
                    y[o + i] = x1 * c - x2 * s;
                    y[o + i + half] = x2 * c + x1 * s;
                }
            }
        }
        return;
    }
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

void rope_rotate_cpu(double *y, const double *x, int B, int T, int H, int D, double base, double sign) {
    rope_rotate_docs_cpu(y, x, B, T, H, D, base, sign, NULL);
}

void rope_fwd_cpu(double *y, const double *x, int B, int T, int H, int D, double base) {
    rope_rotate_cpu(y, x, B, T, H, D, base, 1.0);
}

void rope_fwd_docs_cpu(double *y, const double *x, int B, int T, int H, int D, double base,
                       const int32_t *doc_start) {
    rope_rotate_docs_cpu(y, x, B, T, H, D, base, 1.0, doc_start);
}
