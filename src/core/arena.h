// arena.h — one allocation per memory class (params, grads, optimizer, activations, scratch),
// carved into tensors from a size table. Planning pass first: an arena with base == NULL only
// counts (arena_alloc returns NULL and advances `used`); then arena_reserve allocates `used`
// bytes once and the same carve sequence runs again for real. No allocation inside a step.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stddef.h>

typedef struct {
    const char *name;   // the memory class, for messages
    char *base;         // NULL while planning
    size_t size, used;
} arena_t;

void arena_plan(arena_t *a, const char *name);          // start a counting pass
void arena_reserve(arena_t *a, void *(*alloc)(size_t)); // allocate what was counted, reset used
void *arena_alloc(arena_t *a, size_t bytes);            // 64-byte aligned carve
void arena_release(arena_t *a, void (*release)(void *));

#ifdef __cplusplus
}
#endif
