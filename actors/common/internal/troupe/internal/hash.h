/*
 * FNV-1a 64 (Fowler, Noll, Vo: the published offset basis and prime), the
 * one hash of actors/. Pure; any thread.
 *
 * Where its value is a format, it must never change: the queue's partition
 * of a business key (troupe_queue_partition_of) is stored and routed on.
 * Elsewhere (hash tables in memory) each caller seeds and mixes the result
 * as it needs; the loop stays this one.
 */
#ifndef TROUPE_INTERNAL_HASH_H
#define TROUPE_INTERNAL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TROUPE__FNV1A64_BASIS UINT64_C(0xcbf29ce484222325)
#define TROUPE__FNV1A64_PRIME UINT64_C(0x100000001b3)

/* The hash of p[0..n) continued from h (the basis, or a seeded basis);
 * p may be NULL when n is 0. */
static inline uint64_t
troupe__fnv1a64_from(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * TROUPE__FNV1A64_PRIME;
    return h;
}

/* FNV-1a 64 of p[0..n); p may be NULL when n is 0. */
static inline uint64_t
troupe__fnv1a64(const void *p, size_t n)
{
    return troupe__fnv1a64_from(TROUPE__FNV1A64_BASIS, p, n);
}

#endif
