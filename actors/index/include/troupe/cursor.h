/*
 * Page cursors of the data layer: what a page's `cursor` is and what the
 * next call's `after` takes, for table scans and transaction scans
 * (troupe/table.h, troupe/txn.h), index queries and their AND
 * (troupe/index.h) and queue listings (troupe/queue.h).
 *
 * A cursor names the object that handed it out, so that one given to
 * another table, index or queue (or to another kind of page) is refused
 * with ERANGE instead of being read as a position there. Format
 * (docs/data-model.md, "Cursors"): one tag byte (the kind of page), the
 * object's catalog id as 8 bytes big-endian (ids are never reused: a
 * dropped and recreated table has another), then the exact key of the
 * last item, which the next page continues strictly after (before, in
 * reverse). It costs 9 bytes and a compare. Hosts treat cursors as opaque
 * bytes; the functions below are for the modules that hand them out (and
 * for tests).
 */
#ifndef TROUPE_CURSOR_H
#define TROUPE_CURSOR_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/storage.h"

#define TROUPE_CURSOR_OVERHEAD 9
/* The longest cursor: a key of TROUPE_KEY_MAX bytes and the overhead. */
#define TROUPE_CURSOR_MAX (TROUPE_KEY_MAX + TROUPE_CURSOR_OVERHEAD)

/* Kinds of page (the tag byte; part of the format). */
enum {
    TROUPE_CURSOR_ROWS = 'r',  /* rows of table id: scans */
    TROUPE_CURSOR_INDEX = 'x', /* entries of index id: queries */
    TROUPE_CURSOR_AND = 'a',   /* primary keys of table id: AND queries */
    TROUPE_CURSOR_QUEUE = 'q'  /* rows of queue id: listings */
};

/* Writes the cursor of (tag, id, key[0..klen)) to out, which has room for
 * klen + TROUPE_CURSOR_OVERHEAD bytes. Pure; any thread. */
void
troupe__cursor_put(uint8_t *out, uint8_t tag, uint64_t id, const void *key,
                   size_t klen);

/* The key of cursor c when it is a cursor of (tag, id): OK with *key
 * pointing into c. ERANGE for anything else: another object's cursor,
 * another kind of page, too short or too long, an empty key. EINVAL for
 * NULL outputs. Pure; any thread. */
troupe_err
troupe__cursor_key(const void *c, size_t clen, uint8_t tag, uint64_t id,
                   const void **key, size_t *klen);

#endif
