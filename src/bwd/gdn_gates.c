// gdn_gates.c — CPU float64 GDN gates backward, per token n and head h, u = a + dt_bias:
//   g = -exp(A_log) softplus(u):  dg/du = -exp(A_log) sigmoid(u)  (1 for u > 20, as the forward's
//   threshold makes softplus(u) = u there),  dg/dA_log = g
//     da = dg * dg/du  (=),  ddt_bias += sum_n da,  dA_log += sum_n dg * g
//   beta = c sigmoid(b):  db = dbeta * c s (1 - s)  (=)
// Gate off: da, dA_log, ddt_bias untouched. Delta off: db untouched. A NULL dg / dbeta is a
// zero upstream gradient. a, b, da, db: token n's row at n * ld (ld = H: packed (N,H)); dg,
// dbeta packed (N,H).
#include <math.h>
#include "bwd_cpu.h"

static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void gdn_gates_bwd_cpu(double *da, double *db, double *dA_log, double *ddt_bias, const double *dg,
                       const double *dbeta, const double *a, const double *b, const double *A_log,
                       const double *dt_bias, int N, int H, size_t ld, gdn_mode mode) {
    double c = mode.neg_eigval ? 2.0 : 1.0;
    for (int h = 0; h < H; h++) {
        double e = mode.gate ? exp(A_log[h]) : 0.0, sA = 0, sdt = 0;
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * H + h, j = (size_t)n * ld + h;
            if (mode.gate) {
                double u = a[j] + dt_bias[h], up = dg ? dg[i] : 0.0;
                double sp = u > 20.0 ? u : log1p(exp(u));
                double dsp = u > 20.0 ? 1.0 : sigmoid(u);
                double dai = -e * dsp * up;
                if (da) da[j] = dai;
                sdt += dai;
                sA += up * (-e * sp);
            }
            if (mode.delta && db) {
                double s = sigmoid(b[j]);
                db[j] = (dbeta ? dbeta[i] : 0.0) * c * s * (1.0 - s);
            }
        }
        if (mode.gate) {
            dA_log[h] += sA;
            ddt_bias[h] += sdt;
        }
    }
}
