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
 * bytes; the modules that hand them out write and check them with
 * troupe/internal/cursor.h.
 */
#ifndef TROUPE_CURSOR_H
#define TROUPE_CURSOR_H

#include "troupe/storage.h"

#define TROUPE_CURSOR_OVERHEAD 9
/* The longest cursor: a key of TROUPE_KEY_MAX bytes and the overhead. */
#define TROUPE_CURSOR_MAX (TROUPE_KEY_MAX + TROUPE_CURSOR_OVERHEAD)

#endif
