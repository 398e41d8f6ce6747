// test_compare.c — model_compare_backends (the engine of tools/gradcheck --device cuda) on the
// CPU: the CPU backend against itself passes with zero error; a backend with one subtly wrong
// op (SwiGLU backward off by 1e-3) fails, and only where that op's gradient flows.
#include "testutil.h"
#include "../src/bwd/bwd_cpu.h"
#include "../src/diag/compare.h"

static void bad_swiglu_bwd(void *dgate, void *dup, void *h, const void *dh, const void *gate,
                           const void *up, size_t rows, int cols, size_t ld) {
    swiglu_bwd_cpu(dgate, dup, dh, gate, up, rows, cols, ld);
    if (h) swiglu_fwd_cpu(h, gate, up, rows, cols, ld);
    double *g = dgate;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) g[r * ld + c] *= 1.001;
}

int main(void) {
    gdn_config c;
    config_defaults(&c);
    snprintf(c.pattern, sizeof c.pattern, "GS");
    c.n_layers = 2;
    c.d_model = 32;
    c.mlp_hidden = 48;
    c.gdn_n_heads = 2;
    c.gdn_head_dim = 8;
    c.swa_n_heads = 2;
    c.swa_head_dim = 8;
    c.swa_window = 8;
    c.gdn_chunk_size = 8;
    printf("== CPU backend against itself\n");
    int f0 = model_compare_backends(&c, &backend_cpu, 2, 20, 1e-12, 5, stdout);
    printf("  -> %d failures  %s\n", f0, f0 == 0 ? "pass" : "FAIL");
    gc_checks++;
    gc_failures += f0 != 0;
    backend bad = backend_cpu;
    bad.name = "cpu-with-bad-swiglu";
    bad.swiglu_bwd = bad_swiglu_bwd;
    printf("\n== a backend whose SwiGLU backward is off by 1e-3\n");
    int f1 = model_compare_backends(&c, &bad, 2, 20, 1e-6, 5, stdout);
    printf("  -> %d failures (expected > 0)  %s\n", f1, f1 > 0 ? "pass" : "FAIL");
    gc_checks++;
    gc_failures += f1 == 0;
    return gc_finish("test_compare");
}
