/*
 * troupe_err: the one error type of every public call.
 *
 * One X-macro list makes the enum, troupe_strerror() and troupe_err_name().
 * Numbers never change once released; new codes go at the end.
 * Both functions return static strings and may be called from any thread.
 *
 * A call that fails may also leave a detail for its thread, naming what was
 * wrong ("no table \"users\""): troupe_errmsg, as SQLite's errmsg but per
 * thread, since one troupe object is called from many threads.
 */
#ifndef TROUPE_ERR_H
#define TROUPE_ERR_H

#define TROUPE_ERR_LIST(X)                                                     \
    X(OK, 0, "success")                                                        \
    X(EINVAL, 1, "invalid argument")                                           \
    X(ENOMEM, 2, "out of memory")                                              \
    X(ENOENT, 3, "not found")                                                  \
    X(EEXIST, 4, "already exists")                                             \
    X(ECLOSED, 5, "closed or shutting down")                                   \
    X(ETIMEDOUT, 6, "deadline passed")                                         \
    X(EFULL, 7, "queue or mailbox full")                                       \
    X(EDEAD, 8, "no such actor (stopped or never existed)")                    \
    X(EPROTO, 9, "malformed message")                                          \
    X(ETOOBIG, 10, "value exceeds its size limit")                             \
    X(EIO, 11, "I/O error")                                                    \
    X(ECORRUPT, 12, "integrity error: stored data is corrupt")                 \
    X(EUNKNOWN, 13,                                                            \
      "outcome unknown: the operation may or may not have "                    \
      "taken effect")                                                          \
    X(EFAILSTOP, 14, "storage engine stopped after an I/O error; reopen")      \
    X(EUNREACHABLE, 15, "node unreachable")                                    \
    X(ECONFLICT, 16, "transaction conflict")                                   \
    X(EBUSY, 17, "resource busy")                                              \
    X(ESTATE, 18, "operation not valid in the current state")                  \
    X(ERANGE, 19, "cursor or value out of range")                              \
    X(ESYS, 20, "system call failed")                                          \
    X(ECONSTRAINT, 21, "constraint violated")                                  \
    X(ENOTSUP, 22, "operation not supported by this object")                   \
    X(ECANCELED, 23, "operation canceled")                                     \
    X(EFAILED, 24, "handler failed")                                           \
    X(EAGAIN, 25, "would block: the data is not in memory")                    \
    X(ENOSPC, 26, "no space left on device: writes refused")                   \
    X(EAUTH, 27, "peer not authenticated or not allowed")                      \
    X(EREADONLY, 28, "opened read-only: writes refused")                       \
    X(EDEADLK, 29,                                                             \
      "blocking call on an event-loop thread would wait for itself: use the "  \
      "asynchronous form")                                                     \
    X(ENOTABLE, 30, "no such table")                                           \
    X(ENOINDEX, 31, "no such index")                                           \
    X(ENOQUEUE, 32, "no such queue")

typedef enum troupe_err {
#define TROUPE_ERR_ENUM(name, num, text) TROUPE_##name = num,
    TROUPE_ERR_LIST(TROUPE_ERR_ENUM)
#undef TROUPE_ERR_ENUM
} troupe_err;

/* Human-readable text of an error code; "unknown error" for others. */
const char *
troupe_strerror(troupe_err err);

/* The code's name without prefix ("EINVAL"); "UNKNOWN_ERROR" for others. */
const char *
troupe_err_name(troupe_err err);

/*
 * The detail of the most recent failure with code `err` on the calling
 * thread: what was wrong, with the name or value involved, e.g.
 * `no table "users"`. When the thread's last detail was left with another
 * code, or none was, it is troupe_strerror(err). So call it right after
 * the call that returned err, on the same thread. A detail is left by
 * what a call checks on the calling thread before it returns (the
 * blocking twins included); an error found later, on another thread,
 * reaches its callback or blocking twin without one.
 * The string belongs to the thread and is valid until its next troupe
 * call; at most TROUPE_ERRMSG_MAX bytes with the NUL.
 */
#define TROUPE_ERRMSG_MAX 256
const char *
troupe_errmsg(troupe_err err);

#endif
