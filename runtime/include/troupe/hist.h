/*
 * A small fixed-bucket histogram for monitoring (latencies, sizes): lock-
 * free adds from one or more threads, snapshots from any thread, in the
 * shape Prometheus wants (cumulative buckets, a sum and a count).
 *
 * Bucket i counts the values v <= base << i (i < n); one more bucket counts
 * the rest. Placing a value is a division and a count of leading zeros, so
 * an add costs two relaxed atomic additions. The caller owns the storage
 * (init on zeroed or any memory; no fini).
 */
#ifndef TROUPE_HIST_H
#define TROUPE_HIST_H

#include <stdatomic.h>
#include <stdint.h>

/* Most bounded buckets. */
#define TROUPE_HIST_MAX 32

typedef struct troupe_hist {
    uint64_t base; /* bound of bucket 0, >= 1 */
    unsigned n;    /* bounded buckets, 1..TROUPE_HIST_MAX */
    _Atomic uint64_t counts[TROUPE_HIST_MAX + 1]; /* [n]: past the last */
    _Atomic uint64_t sum;
} troupe_hist;

typedef struct troupe_hist_snapshot {
    uint64_t base;
    unsigned n;
    uint64_t counts[TROUPE_HIST_MAX + 1]; /* per bucket, not cumulative */
    uint64_t count;                       /* the sum of counts[0..n] */
    uint64_t sum;                         /* of the values added */
} troupe_hist_snapshot;

/* Sets up h with n buckets from base (base 0 is taken as 1; n is clamped
 * to 1..TROUPE_HIST_MAX) and zero counts. Not concurrent with adds. */
void
troupe_hist_init(troupe_hist *h, uint64_t base, unsigned n);

/* Counts v. Any thread, concurrently; never blocks. */
void
troupe_hist_add(troupe_hist *h, uint64_t v);

/* Copies the counts (each read atomically, not all at one instant: the
 * sum may be a few adds ahead of or behind the counts; count always
 * equals the sum of the buckets copied). Any thread. */
void
troupe_hist_read(const troupe_hist *h, troupe_hist_snapshot *out);

/* The upper bound of bucket i < n (base << i). */
uint64_t
troupe_hist_bound(const troupe_hist_snapshot *s, unsigned i);

#endif
