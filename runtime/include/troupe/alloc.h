/*
 * The runtime's one allocator wrapper.
 *
 * Every allocation troupe makes for its own objects goes through these, so a
 * test can make allocation site N fail (libuv and RocksDB cannot report OOM
 * through their APIs, so only our own sites are testable; NOTES.md).
 * troupe_malloc/calloc/realloc return NULL on failure, never abort.
 *
 * The fault hook is process-wide test instrumentation, not runtime state:
 * it is the only process-wide state (the runtime's two thread-locals,
 * in msg.c and sched.c, are per thread) and is never set outside tests.
 * It is read with relaxed atomics, so it may be set from any thread.
 */
#ifndef TROUPE_ALLOC_H
#define TROUPE_ALLOC_H

#include <stddef.h>

void *
troupe_malloc(size_t size);
void *
troupe_calloc(size_t n, size_t size);
void *
troupe_realloc(void *p, size_t size);
void
troupe_free(void *p);
/* Copy of s (NUL-terminated), or NULL on allocation failure. */
char *
troupe_strdup(const char *s);

/*
 * Test hook: after `countdown` more successful allocations, every allocation
 * fails until the hook is reset with troupe_alloc_fail_after(-1).
 */
void
troupe_alloc_fail_after(long countdown);

#endif
