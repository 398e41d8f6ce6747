// arena.c — see arena.h.
#include "arena.h"
#include "common.h"

void arena_plan(arena_t *a, const char *name) {
    a->name = name;
    a->base = NULL;
    a->size = 0;
    a->used = 0;
}

void arena_reserve(arena_t *a, void *(*alloc)(size_t)) {
    a->size = a->used;
    a->base = a->size ? alloc(a->size) : NULL;
    if (a->size && !a->base) gdn_die("arena '%s': cannot allocate %zu bytes", a->name, a->size);
    a->used = 0;
}

void *arena_alloc(arena_t *a, size_t bytes) {
    size_t off = (a->used + 63) & ~(size_t)63;
    if (off < a->used || !gdn_add_ok(off, bytes, &a->used))
        gdn_die("arena '%s': its size overflows 64 bits (a carve of %zu bytes after %zu)", a->name,
                bytes, off);
    if (!a->base) return NULL;
    if (a->used > a->size)
        gdn_die("arena '%s': carve of %zu bytes overflows its %zu bytes (plan and carve disagree)",
                a->name, bytes, a->size);
    return a->base + off;
}

void arena_release(arena_t *a, void (*release)(void *)) {
    if (a->base) release(a->base);
    a->base = NULL;
    a->size = a->used = 0;
}
