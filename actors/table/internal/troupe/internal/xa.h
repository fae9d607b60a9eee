/*
 * XA over the tables of one troupe_tables, the table module's half
 * (xa.c): the xid rule, the stored record of a prepared transaction and
 * its resolved marker (their keys in the catalog's meta range and their
 * formats), and the registry of prepared xids that lives in the
 * troupe_tables (which tables hold parts, the shared state their parts
 * were prepared under, the record with the batch's exact bytes). The
 * public calls are actors/txn's (troupe/xa.h); they drive the table
 * actors through participant.h and use what is declared here.
 *
 * Formats (msgpack, every field checked when read back):
 *   meta ("xa", xid)      = [1, xid str, prepared_ms int,
 *                            [[table str, table id uint,
 *                              [[kind uint, expires int, nostamp bool,
 *                                key bin, doc bin | nil], ...],
 *                              [[start bin | nil, end bin | nil], ...]],
 *                             ...],
 *                            batch bin]
 *   meta ("xa-done", xid) = [1, outcome uint (1 committed, 2 rolled
 *                            back), resolved_ms int, seq uint]
 * Markers are bounded: at most TROUPE__XA_MARKS_MAX are stored; the
 * resolution that would store one more deletes the oldest (by seq) in
 * the same batch.
 */
#ifndef TROUPE_INTERNAL_XA_H
#define TROUPE_INTERNAL_XA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/internal/participant.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

#define TROUPE__XA_FORMAT 1
/* Bounds of a record, those of one transaction (txn.h's
 * TROUPE_TXN_TABLES_MAX and TROUPE_TXN_KEYS_MAX, asserted in txn's
 * xa.c): keys and ranges per table, tables. */
#define TROUPE__XA_KEYS_MAX 10000
#define TROUPE__XA_TABLES_MAX 64
#define TROUPE__XA_MARKS_MAX 1024
enum { TROUPE__XA_COMMITTED = 1, TROUPE__XA_ROLLED_BACK = 2 };

/* xid[0..len) is 1..TROUPE__XA_XID_MAX bytes of [A-Za-z0-9_.:/-]. */
bool
troupe__xa_xid_valid(const void *xid, size_t len);
/* OK, or EINVAL with troupe_errmsg "<call>: the xid must be ...". */
troupe_err
troupe__xa_xid_check(const char *call, const void *xid, size_t len);

/* meta key (kind, xid) into w (initialised here): kind "xa" (the record)
 * or "xa-done" (the marker). */
troupe_err
troupe__xa_key(troupe_key_writer *w, const char *kind, const void *xid,
               size_t len);

/* One table's part of a record. Keys carry kind, expires, nostamp, key
 * and doc (ver is 0: versions do not survive a restart). */
typedef struct txa_tab {
    const char *name; /* NUL-terminated */
    uint64_t id;
    ttxn_key *keys;
    size_t n;
    ttxn_range *ranges;
    size_t nranges;
} txa_tab;

typedef struct txa_rec {
    const char *xid;
    size_t xlen;
    int64_t prep_ms;
    txa_tab *tabs;
    size_t ntabs;
    const void *batch;
    size_t blen;
} txa_rec;

/* Packs r into p (the record's value). */
void
troupe__xa_rec_pack(const txa_rec *r, troupe_packer *p);
/* Parses v[0..len) into *out: its strings and bytes point into v (keep
 * v), tabs, keys and ranges are allocated (troupe__xa_rec_fini). Every
 * field is checked: the format, the xid rule, kinds, key and document
 * lengths, sorted distinct keys, a table name per table, the batch's
 * presence, nothing after; ECORRUPT otherwise (ENOMEM). */
troupe_err
troupe__xa_rec_parse(const void *v, size_t len, txa_rec *out);
void
troupe__xa_rec_fini(txa_rec *r);

enum { TXA_PENDING = 0, TXA_PREPARED, TXA_RESOLVING };

/* A prepared xid in the registry. The registry owns it; the fields are
 * set before it is registered and not changed after, but `state`, under
 * the tables' mutex. */
typedef struct txa_entry {
    struct txa_entry *next;
    int state;
    ttxn_shared *sh; /* one reference: what the table parts were prepared
                        under (their finish names it) */
    void *val;       /* the stored record (troupe_malloc) */
    size_t vlen;
    txa_rec rec;        /* parsed from val */
    troupe_addr *addrs; /* rec.tabs[i]'s table actor */
} txa_entry;

/* Frees e (NULL is a no-op): its record, addresses and reference. */
void
troupe__xa_entry_free(txa_entry *e);

/* Builds an entry from a packed record (val is taken on OK and on error:
 * troupe_free'd on error), with each table's actor looked up by name and
 * checked against the record's id (ECORRUPT naming the xid when it
 * differs, the table being gone is ENOTABLE). sh is retained. */
troupe_err
troupe__xa_entry_new(troupe_tables *t, void *val, size_t vlen, ttxn_shared *sh,
                     txa_entry **out);

/* Registers e (state TXA_PENDING), marking each of its tables held (DDL
 * on a held table is EBUSY). EEXIST when its xid is registered; a fresh
 * prepare (not a re-hold at open) is EBUSY when a table of it has an
 * index building: the build's reindex of a held key would wait for the
 * resolution, and the tables' stop waits for the build. */
troupe_err
troupe__xa_register(troupe_tables *t, txa_entry *e, bool fresh);
/* e (registered) becomes `state`. */
void
troupe__xa_set_state(troupe_tables *t, txa_entry *e, int state);
/* Unlinks e and releases its tables' holds; e is the caller's. */
void
troupe__xa_unregister(troupe_tables *t, txa_entry *e);
/* The entry of xid, moved from TXA_PREPARED to TXA_RESOLVING: OK, ENOENT
 * (not registered), EBUSY (being prepared or resolved). */
troupe_err
troupe__xa_claim(troupe_tables *t, const void *xid, size_t len,
                 txa_entry **out);

/* The outcome a stored marker records for xid (TROUPE__XA_*), 0: none. */
int
troupe__xa_marker(troupe_tables *t, const void *xid, size_t len);
/* Adds to b the marker of xid with outcome, and the delete of the
 * oldest marker when that makes more than TROUPE__XA_MARKS_MAX; the
 * in-memory list follows when troupe__xa_marked is called after the
 * write succeeded. */
troupe_err
troupe__xa_mark_batch(troupe_tables *t, troupe_batch *b, const void *xid,
                      size_t len, int outcome, int64_t now_ms);
void
troupe__xa_marked(troupe_tables *t, const void *xid, size_t len, int outcome,
                  int64_t now_ms);

/* A snapshot of the registry's prepared xids: xids[i] (NUL-terminated)
 * and ms[i], the prepare time, in xid order; *n of them. One allocation
 * each array (troupe_free xids[i], xids, ms). ENOMEM. */
troupe_err
troupe__xa_snapshot(troupe_tables *t, char ***xids, int64_t **ms, size_t *n);

/* Whether a prepared xid holds key of table `table` (writes or reads it,
 * or scanned a range over it); its xid into out (NUL-terminated) if so.
 * For the detail of a refused write. Any thread. */
bool
troupe__xa_holder(troupe_tables *t, const char *table, const void *key,
                  size_t klen, char out[TROUPE__XA_XID_MAX + 1]);

/* What a resolution needs from the tables. */
troupe_db *
troupe__xa_db(troupe_tables *t);
troupe_cf *
troupe__xa_meta(troupe_tables *t);

/* At open (tables.c), after the tables are loaded and before open
 * returns: every stored record parsed (ECORRUPT with troupe_errmsg naming
 * the xid when one does not), its parts prepared again at their tables
 * from its write and read sets (locks, read reservations, unique values
 * in flight; the batch they build is thrown away: the stored bytes are
 * what commits) and registered as prepared; the markers loaded. Blocks. */
troupe_err
troupe__xa_open(troupe_tables *t);
/* At destroy: frees the registry and the markers. */
void
troupe__xa_close(troupe_tables *t);

#endif
