/*
 * Allocation wrapper with a countdown fault hook for tests. The countdown is
 * an atomic so tests with threads stay race-free; in production it is -1 and
 * the cost is one relaxed load per allocation.
 */
#include "troupe/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic long fail_countdown = -1;

static int
should_fail(void)
{
    long c = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (c < 0)
        return 0;
    if (c == 0)
        return 1;
    atomic_fetch_sub_explicit(&fail_countdown, 1, memory_order_relaxed);
    return 0;
}

void *
troupe_malloc(size_t size)
{
    return should_fail() ? NULL : malloc(size ? size : 1);
}

void *
troupe_calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *
troupe_realloc(void *p, size_t size)
{
    return should_fail() ? NULL : realloc(p, size ? size : 1);
}

void
troupe_free(void *p)
{
    free(p);
}

char *
troupe_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = troupe_malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

void
troupe_alloc_fail_after(long countdown)
{
    atomic_store_explicit(&fail_countdown, countdown, memory_order_relaxed);
}
