// test_model_gradcheck.c — whole-model finite-difference gradient check in float64 on tiny
// models of each pattern (G, S, A, GS) and each GDN ablation switch: every parameter tensor
// sampled, norm-wise relative error and worst element <= 1e-6.
#include "testutil.h"
#include "tiny_model.h"
#include "../src/model/model.h"

static gdn_config tiny(const char *pattern, int layers) { return tiny_config(pattern, layers); }

int main(void) {
    struct { const char *name, *pattern; int layers; void (*tweak)(gdn_config *); } cases[] = {
        {"G", "G", 2, NULL},
        {"S", "S", 2, NULL},
        {"A", "A", 1, NULL},
        {"GS", "GS", 2, NULL},
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gdn_config c = tiny(cases[i].pattern, cases[i].layers);
        printf("\n== pattern %s\n", cases[i].name);
        fails += model_gradcheck(&c, 2, 9, 10, 1e-6, 1234 + i, stdout);
    }
    // ablations and options, each on a one-layer G (+ S where it matters)
    const char *names[] = {"gate off", "delta off", "no short conv", "no output gate",
                           "neg eigval", "untied + dropout", "dv = dk"};
    for (int v = 0; v < 7; v++) {
        gdn_config c = tiny("GS", 2);
        tiny_ablate(&c, v);
        if (v == 5) {  // untied, with dropout
            c.dropout = 0.25;
            c.embed_dropout = 0.3;
            c.mixer_dropout = 0.2;
        }
        printf("\n== GS, %s\n", names[v]);
        fails += model_gradcheck(&c, 2, 9, 6, 1e-6, 99 + v, stdout);
    }
    printf("\ntest_model_gradcheck: %d failing tensors\n", fails);
    return fails ? 1 : 0;
}
