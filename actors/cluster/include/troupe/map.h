/*
 * The partition map in etcd: which node owns each placement unit. One key,
 * TROUPE_MAP_KEY, holds the whole map as one JSON document
 *
 *   {"format": 1, "units": {"table:orders:0": 2, "coord:0": 1, ...}}
 *
 * and the map's version is that key's mod_revision (an etcd revision: it
 * only grows, and every node reads the same one for the same map). No
 * key: the empty map at revision 0.
 *
 * A unit is named
 *   table:NAME:SHARD      a table's shard
 *   queue:NAME:PARTITION  a queue's partition
 *   coord:SHARD           a shard of the coordinator
 * with NAME 1..64 bytes of [A-Za-z0-9_.-] and SHARD a decimal 0..65535
 * (no leading zero). An owner is a node id, 1..4294967294.
 *
 * Every change is a compare-and-set on the revision the change was made
 * from (troupe_etcd_cas): two assigns made from one revision cannot both
 * land; the loser sees ECONFLICT, or with retry, re-reads and applies
 * its change to the new map (no change is ever lost or applied to a map
 * it was not computed from).
 */
#ifndef TROUPE_MAP_H
#define TROUPE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/etcd.h"

#define TROUPE_MAP_KEY "/troupe/map"
#define TROUPE_MAP_UNIT_MAX 80
#define TROUPE_MAP_UNITS_MAX 4096

typedef struct troupe_map_entry {
    char unit[TROUPE_MAP_UNIT_MAX + 1];
    uint32_t node;
} troupe_map_entry;

typedef struct troupe_map {
    int64_t revision;        /* the map's version; 0: no map yet */
    troupe_map_entry *units; /* n entries in unit order */
    size_t n;
} troupe_map;

/* True when unit is a well-formed unit name. */
bool
troupe_map_unit_ok(const char *unit);

/* Reads the map (blocking; refuses troupe loop threads: EDEADLK). out is
 * the caller's, freed with troupe_map_fini. Errors: EINVAL, the etcd
 * client's, EPROTO (the stored map is not one troupe writes: nothing is
 * guessed). */
troupe_err
troupe_map_read_wait(troupe_etcd *etcd, troupe_map *out);

/* The owner of unit in m, or 0. */
uint32_t
troupe_map_owner(const troupe_map *m, const char *unit);

void
troupe_map_fini(troupe_map *m);

/*
 * Assigns unit to node (moving it if another owns it). expect_rev >= 0:
 * only if the map is at that revision now (0: no map yet), else
 * ECONFLICT; expect_rev -1: from the map as read now, re-read and tried
 * again while another change lands in between (at most 16 times, then
 * ECONFLICT). *new_rev (may be NULL): the map's revision after. Blocking.
 * Errors: EINVAL (a bad unit or node), ECONFLICT, EFULL (the map holds
 * TROUPE_MAP_UNITS_MAX units), EPROTO, the etcd client's.
 */
troupe_err
troupe_map_assign_wait(troupe_etcd *etcd, const char *unit, uint32_t node,
                       int64_t expect_rev, int64_t *new_rev);

/* The JSON codec, for the tests: decode a stored value into m (revision
 * left 0; EPROTO for anything troupe_map_encode would not write), and
 * encode m (units sorted, no unit twice) into a NUL-terminated string
 * freed with troupe_free. */
troupe_err
troupe_map_decode(const uint8_t *value, size_t len, troupe_map *m);
troupe_err
troupe_map_encode(const troupe_map *m, char **out);

#endif
