/*
 * A simulated transport for tests: a remote hook that keeps a record of
 * every message the runtime hands it (a send to another node, or an error
 * reply the runtime makes at delivery) and can be told to refuse them.
 * One per process (tests run forked); any thread may send through it.
 */
#ifndef TROUPE_TWIRE_H
#define TROUPE_TWIRE_H

#include <stdbool.h>
#include <stddef.h>

#include "troupe/runtime.h"

/* What a message carried when it reached the wire. */
typedef struct ts_wire_rec {
    uint32_t kind, flags;
    troupe_addr from, to;
    uint64_t corr;
    troupe_err err;
    size_t len;
    uint64_t v; /* the first 8 body bytes (memcpy), 0 when shorter */
} ts_wire_rec;

/* Clears the record and installs the hook on rt. */
void
ts_wire_install(troupe_runtime *rt);
/* From now on the hook refuses with e (TROUPE_OK: accepts again). */
void
ts_wire_refuse(troupe_err e);
/* Messages recorded so far. */
size_t
ts_wire_count(void);
/* For ts_run_until / ts_wait_until: ts_wire_count() >= *(size_t *)arg. */
bool
ts_wire_has(void *arg);
/* A copy of record i (i < ts_wire_count()). */
ts_wire_rec
ts_wire_at(size_t i);
/* The corr ids recorded, sorted, into a malloc'd array (*n of them). */
uint64_t *
ts_wire_sorted_corrs(size_t *n);
/* Frees the record. */
void
ts_wire_clear(void);

#endif
