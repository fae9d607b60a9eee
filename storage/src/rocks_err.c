/*
 * The one place RocksDB's errors become troupe_err.
 *
 * The C API reports failure as a malloc'ed string "<Code>: <detail>"
 * (Status::ToString). Only the code prefix is stable, so that is all we
 * match on; the detail goes to the db's logger for the operator, since
 * callers get a code and RocksDB's LOG file is not where anyone looks
 * first.
 *
 * A full disk. RocksDB's posix layer turns ENOSPC into an IO error with
 * the NoSpace subcode ("IO error: No space left on device: <context>:
 * <file>: ..."), and the context says which call failed. When it was a
 * data write (an append or pwrite, or the creation of the file) the bytes
 * never reached the file: the WAL holds at most a torn tail of the record,
 * which recovery drops, and the memtable was never touched, so the write
 * is not stored and the answer is ENOSPC. Any other call (a sync, a close,
 * a rename) may have failed after the data got there: the caller's
 * io_class (EUNKNOWN on write paths). Measured with the fault shim: a
 * batch whose WAL write() failed with ENOSPC was absent after reopen in
 * every case.
 */
#include <string.h>

#include "storage_int.h"

static bool
has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

bool
troupe__rocks_nospace(const char *errptr)
{
    return errptr != NULL && has_prefix(errptr, "IO error") &&
           strstr(errptr, "No space left on device") != NULL;
}

/* A NoSpace error whose failing call wrote no data (see above). */
static bool
nospace_unwritten(const char *errptr)
{
    static const char *const data_writes[] = {
        "While appending to file",
        "While pwrite to file",
        "While open a file for appending",
    };
    for (size_t i = 0; i < sizeof(data_writes) / sizeof(data_writes[0]); i++) {
        if (strstr(errptr, data_writes[i]) != NULL)
            return true;
    }
    return false;
}

troupe_err
troupe__rocks_err(const troupe_logger *lg, char *errptr, troupe_err io_class,
                  const char *what)
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
        else if (troupe__rocks_nospace(errptr) && nospace_unwritten(errptr))
            e = TROUPE_ENOSPC;
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
    if (e != TROUPE_EAGAIN) { /* an expected outcome, not a fault */
        /* A failing disk or corrupt data is an error of the engine; the
         * rest (a busy lock, a missing family) is the caller's to act on. */
        bool fault = e == TROUPE_ECORRUPT || e == TROUPE_EIO ||
                     e == TROUPE_EUNKNOWN || e == TROUPE_ENOSPC;
        troupe_log_fields(
            lg, fault ? TROUPE_LOG_ERROR : TROUPE_LOG_WARN, "storage",
            (troupe_log_field[]){{"op", what}, {"err", troupe_err_name(e)}}, 2,
            "%s: %s", what, errptr);
    }
    rocksdb_free(errptr);
    return e;
}
