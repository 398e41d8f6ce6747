// cpu_threads.c — one knob (train.threads) for the two thread pools of the CPU backend: the
// OpenMP team of the ops' parallel loops and OpenBLAS's dgemm threads. The two never nest (no
// op calls BLAS inside a parallel loop), so n threads of each use n cores in turn.
#include "cpu_threads.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "../core/common.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef GDN_HAVE_CBLAS
// OpenBLAS extensions (cblas.h of OpenBLAS declares them too; declared here so that this file
// does not depend on which cblas.h is installed).
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
#endif

size_t cpu_min_work_exp = 32768;
size_t cpu_min_work_flat = 524288;

// Set name=value unless the environment has name; says whether it did.
static bool cpu_setenv_default(const char *name, const char *value) {
    if (getenv(name)) return false;
    CHECK_SYS(setenv(name, value, 0));
    return true;
}

void cpu_threads_env(char **argv) {
    if (getenv("GDN_CPU_ENV")) return;
    bool changed = false;
#ifdef _OPENMP
    changed |= cpu_setenv_default("OMP_WAIT_POLICY", "passive");
#endif
#ifdef GDN_HAVE_CBLAS
    changed |= cpu_setenv_default("OPENBLAS_THREAD_TIMEOUT", "16");  // 2^16 cycles, ~25 us
#endif
    if (!changed) return;
    CHECK_SYS(setenv("GDN_CPU_ENV", "1", 1));  // the next image does not exec again
    execv("/proc/self/exe", argv);
    fprintf(stderr, "warning: could not re-execute /proc/self/exe (%s): the CPU thread pools "
                    "keep spinning while idle\nHINT: export OMP_WAIT_POLICY=passive "
                    "OPENBLAS_THREAD_TIMEOUT=16\n", strerror(errno));
}

// The libraries' own choices, read before the first change (OMP_NUM_THREADS or one per core;
// OPENBLAS_NUM_THREADS or one per core): what n <= 0 restores.
#ifdef _OPENMP
static int cpu_default_omp;
#endif
#ifdef GDN_HAVE_CBLAS
static int cpu_default_blas;
#endif
static bool cpu_defaults_read;

void cpu_set_thread_counts(int omp, int blas) {
    if (!cpu_defaults_read) {
#ifdef _OPENMP
        cpu_default_omp = omp_get_max_threads();
#endif
#ifdef GDN_HAVE_CBLAS
        cpu_default_blas = openblas_get_num_threads();
#endif
        cpu_defaults_read = true;
    }
#ifdef _OPENMP
    omp_set_num_threads(omp > 0 ? omp : cpu_default_omp);
#else
    (void)omp;
#endif
#ifdef GDN_HAVE_CBLAS
    openblas_set_num_threads(blas > 0 ? blas : cpu_default_blas);
#else
    (void)blas;
#endif
}

void cpu_set_threads(int n) { cpu_set_thread_counts(n, n); }

int cpu_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
