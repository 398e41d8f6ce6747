// cpu_threads.h — threads of the float64 CPU backend: OpenMP over independent work inside the
// ops, OpenBLAS threads inside dgemm. The rule that keeps the CPU backend an exact oracle: a
// parallel loop only hands out independent outputs ((batch, head) pairs, rows, elements,
// columns of a parameter gradient); no floating-point sum is ever split across threads, so
// every result is bitwise the same for any thread count (tests/test_cpu_threads.c checks it).
// Built without OpenMP, GDN_OMP(...) expands to nothing and every op runs on one thread.
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

// Make the idle threads of both pools sleep instead of spin. Both libraries spin while idle
// (OpenBLAS pthreads: sched_yield for 2^28 cycles after each call; libgomp: ~300k pause loops
// after each parallel region), so on 2 cores the spinning pool takes the core the working pool
// needs (tiny-cpu: 450 ms/step with both pools at their defaults, 250 with the ops on one
// thread, 175 with both pools sleeping when idle). They read OMP_WAIT_POLICY and
// OPENBLAS_THREAD_TIMEOUT only when they load, before main(): so when either is unset this sets
// it (passive; 2^16 cycles) and re-executes the program once, with the same arguments. A value
// the user exported is kept; GDN_CPU_ENV set to anything skips it all (e.g. under valgrind,
// which an exec of /proc/self/exe would leave). Call first thing in main(), before any thread,
// file or MPI state exists. Returns when nothing had to change (or the exec failed).
void cpu_threads_env(char **argv);

// Threads for the OpenMP loops of the CPU ops and for OpenBLAS (train.threads): n >= 1 sets
// both; n <= 0 restores the libraries' defaults (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, else
// one per core). Call from the main thread, outside any op.
// The OpenMP loops give the same bits for any n. OpenBLAS's dgemm need not: it splits M and N
// over its threads, and tiles cut at other places can change the last bits (OpenBLAS 0.3.21
// here: 1, 2 and 4 threads agree on the tiny-cpu shapes, 3 threads do not; 333x77x91 differs
// at 2). Runs reproduce bit for bit at a fixed thread count.
void cpu_set_threads(int n);
// The two pools apart (tests): omp for the ops' loops, blas for OpenBLAS; <= 0: default.
void cpu_set_thread_counts(int omp, int blas);
// The number of threads an OpenMP loop of an op will use now (1 without OpenMP).
int cpu_threads(void);

// GDN_OMP(parallel for schedule(static)) -> #pragma omp parallel for schedule(static)
#ifdef _OPENMP
#define GDN_PRAGMA_(...) _Pragma(#__VA_ARGS__)
#define GDN_OMP(...) GDN_PRAGMA_(omp __VA_ARGS__)
#else
#define GDN_OMP(...)
#endif

// Elementwise and per-row loops go parallel only when the serial loop would take more than
// ~0.3 ms: waking the sleeping team costs 35-90 us per region on the 2-core machine (passive
// wait policy, measured). Work is counted in elements; tests set both to 0 to take every
// parallel path at small shapes.
extern size_t cpu_min_work_exp;   // loops with an exp or an RNG draw per element (32768)
extern size_t cpu_min_work_flat;  // loops with a few flops per element (524288)

#ifdef __cplusplus
}
#endif
