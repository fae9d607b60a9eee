/*
 * Details for a name that failed the catalog's name rule: which rule it
 * broke (no name, empty, too long, not strict UTF-8), with the name as it
 * is, so a caller sees the byte at fault (escaped as \xHH).
 */
#ifndef TROUPE_INTERNAL_NAMES_H
#define TROUPE_INTERNAL_NAMES_H

#include <stddef.h>

#include "troupe/err.h"

/* Leaves the detail of `what` (e.g. "table name") `name`, which failed a
 * rule of 1..max bytes of strict UTF-8 without NUL, on the calling
 * thread, and returns EINVAL. name may be NULL. Never allocates; any
 * thread. */
troupe_err
troupe__name_err(const char *what, const char *name, size_t max);

#endif
