/*
 * The one place RocksDB's errors become troupe_err.
 *
 * The C API reports failure as a malloc'ed string "<Code>: <detail>"
 * (Status::ToString). Only the code prefix is stable, so that is all we
 * match on; the detail goes to stderr for the operator, since callers get
 * a code and RocksDB's LOG file is not where anyone looks first.
 */
#include <stdio.h>
#include <string.h>

#include "storage_int.h"

static bool
has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

troupe_err
troupe__rocks_err(char *errptr, troupe_err io_class, const char *what)
{
    if (errptr == NULL)
        return TROUPE_OK;
    troupe_err e;
    if (has_prefix(errptr, "Corruption"))
        e = TROUPE_ECORRUPT;
    else if (has_prefix(errptr, "IO error")) {
        /* Another process ("Resource temporarily unavailable") or this
         * one ("lock hold by current process") holds the db's LOCK file:
         * a busy resource, not a failing disk. */
        if (strstr(errptr, "/LOCK") != NULL &&
            (strstr(errptr, "Resource temporarily unavailable") != NULL ||
             strstr(errptr, "lock hold by current process") != NULL))
            e = TROUPE_EBUSY;
        else
            e = io_class;
    } else if (has_prefix(errptr, "Invalid argument")) {
        e = strstr(errptr, "does not exist") != NULL ? TROUPE_ENOENT
                                                     : TROUPE_EINVAL;
    } else if (has_prefix(errptr, "Not found"))
        e = TROUPE_ENOENT;
    else if (has_prefix(errptr, "Resource busy") || has_prefix(errptr, "Busy"))
        e = TROUPE_EBUSY;
    else if (has_prefix(errptr, "Operation timed out") ||
             has_prefix(errptr, "Timed out"))
        e = TROUPE_ETIMEDOUT;
    else if (has_prefix(errptr, "Not implemented"))
        e = TROUPE_ENOTSUP;
    else if (has_prefix(errptr, "Result incomplete"))
        e = TROUPE_EAGAIN; /* a cache-only read needed the disk */
    else if (has_prefix(errptr, "Shutdown in progress"))
        e = TROUPE_ECLOSED;
    else
        e = io_class;
    if (e != TROUPE_EAGAIN) /* an expected outcome, not a fault */
        fprintf(stderr, "troupe storage: %s: %s (%s)\n", what, errptr,
                troupe_err_name(e));
    rocksdb_free(errptr);
    return e;
}
