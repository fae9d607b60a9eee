/*
 * The data layer's stored formats that several modules read, written once
 * (docs/data-model.md): the row envelope of a table's row family, the
 * manifest of its manifest family, and the names of the families. The
 * table actor writes rows and manifests; its reads, transactions, index
 * queries and verify read them back, here. Everything read comes from the
 * disk: anything that is not the format is ECORRUPT, with nothing
 * allocated. Pure; any thread.
 */
#ifndef TROUPE_INTERNAL_DATAFMT_H
#define TROUPE_INTERNAL_DATAFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"

/* The row envelope [1, expires, doc]: format version 1, expires a Unix ms
 * time >= 0 that fits an int64 (0: never expires), doc one map, nothing
 * after it. On OK *doc points into env. ECORRUPT otherwise. */
troupe_err
troupe__envelope_parse(const void *env, size_t len, int64_t *expires,
                       const void **doc, size_t *doc_len);

/* A row is live until its expiry (0: never expires). */
static inline bool
troupe__row_live(int64_t expires, int64_t now)
{
    return expires == 0 || expires > now;
}

/* One key a manifest lists: index id and the index family key. */
typedef struct mentry {
    uint64_t id;
    const void *key;
    size_t len;
} mentry;

/*
 * Parses the manifest [1, [[id uint, key bin], ...]]: sorted by (id, key)
 * bytewise without repeats, every key of 1..TROUPE_KEY_MAX bytes. With
 * suffix (the row's encoded primary key, slen bytes) every key must also
 * be longer than the suffix and end with it, as a row's own manifest
 * does; suffix NULL skips that rule (verify, which reports such keys one
 * by one). *out is a troupe_malloc'd array of *n entries pointing into
 * man (NULL when *n is 0). ECORRUPT (nothing allocated), ENOMEM.
 */
troupe_err
troupe__manifest_parse(const void *man, size_t len, const uint8_t *suffix,
                       size_t slen, mentry **out, size_t *n);

/* Room for any family name troupe__cf_name writes, NUL included. */
#define TROUPE__CF_NAME_LEN 24

/* The column family names of docs/data-model.md: "t.<id>" (rows of table
 * id), "m.<id>" (its manifests), "x.<id>" (entries of index id), "q.<id>"
 * (queue id). buf receives the NUL-terminated name. EINVAL for another
 * kind, a NULL buf or cap below TROUPE__CF_NAME_LEN. */
troupe_err
troupe__cf_name(char kind, uint64_t id, char *buf, size_t cap);

#endif
