/*
 * The runtime's internal tier: what the other modules of troupe call in
 * the runtime and users do not (runtime/CMakeLists.txt gives it to them
 * through troupe_runtime_internal; it is never installed).
 */
#ifndef TROUPE_INTERNAL_RUNTIME_H
#define TROUPE_INTERNAL_RUNTIME_H

#include <stddef.h>

#include "troupe/err.h"

/* Leaves the calling thread's detail for err (troupe_errmsg), formatted
 * as printf, cut at TROUPE_ERRMSG_MAX - 1 bytes. Returns err, so a check
 * reads `return troupe__errf(TROUPE_EINVAL, "...", ...)`. Never
 * allocates. */
troupe_err
troupe__errf(troupe_err err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The detail `what "name"` for err, with the name's bytes as they are
 * except '"', '\' and bytes below 0x20 or 0x7f, which are escaped as in
 * log lines (\", \\, \xHH), so a name from outside cannot break the
 * message; a name too long for the buffer ends in "...". name may hold
 * NUL bytes (len counts them). Returns err. */
troupe_err
troupe__err_named(troupe_err err, const char *what, const char *name,
                  size_t len);

/* OK when the calling thread may block waiting for troupe; EDEADLK, with
 * its detail, on a thread where a wait could wait for itself: a thread
 * of a troupe scheduler, or any thread while it runs a troupe callback
 * (an actor's turn, a completion or a post, also on a host's loop in
 * embedded mode). Every blocking call that waits for a scheduler checks
 * it first and returns its error without starting anything. A host's
 * own callbacks on its loop are outside what this can see: troupe does
 * not know when the host's uv_run is running. Never blocks. */
troupe_err
troupe__block_check(const char *call);

#endif
