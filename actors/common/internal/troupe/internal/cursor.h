/*
 * Writing and checking page cursors (the format: troupe/cursor.h), for
 * the modules that hand them out (table and transaction scans, index
 * queries, queue listings) and their tests. Pure; any thread.
 */
#ifndef TROUPE_INTERNAL_CURSOR_H
#define TROUPE_INTERNAL_CURSOR_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/cursor.h"
#include "troupe/err.h"

/* Kinds of page (the tag byte; part of the format). */
enum {
    TROUPE_CURSOR_ROWS = 'r',  /* rows of table id: scans */
    TROUPE_CURSOR_INDEX = 'x', /* entries of index id: queries */
    TROUPE_CURSOR_AND = 'a',   /* primary keys of table id: AND queries */
    TROUPE_CURSOR_QUEUE = 'q'  /* rows of queue id: listings */
};

/* Writes the cursor of (tag, id, key[0..klen)) to out, which has room for
 * klen + TROUPE_CURSOR_OVERHEAD bytes. */
void
troupe__cursor_put(uint8_t *out, uint8_t tag, uint64_t id, const void *key,
                   size_t klen);

/* The key of cursor c when it is a cursor of (tag, id): OK with *key
 * pointing into c. ERANGE for anything else: another object's cursor,
 * another kind of page, too short or too long, an empty key. EINVAL for
 * NULL outputs. */
troupe_err
troupe__cursor_key(const void *c, size_t clen, uint8_t tag, uint64_t id,
                   const void **key, size_t *klen);

#endif
