/*
 * The log hook: where the library's log records go.
 *
 * A troupe_logger is a plain value {fn, ctx, level} that a host puts in
 * troupe_runtime_opts (the runtime gives it out to the modules that run
 * on it: troupe_runtime_logger) and in troupe_db_opts (the storage engine
 * has no runtime). Both copy it. A zeroed logger is the default: records
 * of level WARN and more severe are written to stderr, one line each.
 *
 * Levels, most severe first: ERROR (something failed that the library
 * could not hide: a disk fault, a lost completion), WARN (a refused or
 * degraded operation an operator should know about: a db that cannot be
 * opened, an actor restarted, writes refused for want of space), INFO
 * (normal events worth a line), DEBUG (detail, e.g. RocksDB's own info
 * lines of a read-only db). A record passes when its level is at least as
 * severe as the logger's; the message is formatted only then, so a record
 * that does not pass costs one comparison. No record is made on the hot
 * paths (sends, asks, table puts, commits) unless something fails.
 *
 * The default line (fn NULL), one write(2) to stderr per record:
 *
 *   ts=2026-01-02T03:04:05.678Z level=warn sys=storage msg="open /d:
 *   not a directory" dir=/d err=EINVAL
 *
 * (on one line). ts is UTC with milliseconds. msg is always quoted;
 * a field's value is quoted when it is empty or holds a space, a quote,
 * '=', a backslash or a control byte. Inside quotes, '"' and '\' are
 * escaped with a backslash, newline, carriage return and tab as \n, \r,
 * \t, and any other byte below 0x20 and 0x7f as \xHH; bytes from 0x80 up
 * pass unchanged (UTF-8 stays readable). So a name or message holding a
 * newline or a quote can never split a line or forge a field. Keys are
 * written as given with every byte outside [A-Za-z0-9_.-] made '_'. A
 * line longer than TROUPE_LOG_LINE_MAX bytes has its message cut, ending
 * in "...".
 *
 * Contract for fn:
 *  - it may be called from any troupe thread (schedulers, workers, the
 *    storage writer, RocksDB's background threads, the caller's own
 *    thread), concurrently with itself: it must be thread-safe;
 *  - it must not call back into troupe (no send, no db call, no log);
 *    it should return quickly, since the thread that logs waits for it;
 *  - it borrows the record: every pointer in it is valid only during the
 *    call;
 *  - records it drops are its own business: troupe neither counts nor
 *    retries them. The default writer drops a line when write(2) fails
 *    (retrying only EINTR), uncounted too.
 */
#ifndef TROUPE_LOG_H
#define TROUPE_LOG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Level 0 is not a level: it stands for the default threshold, WARN. */
typedef enum troupe_log_level {
    TROUPE_LOG_DEFAULT = 0,
    TROUPE_LOG_ERROR = 1,
    TROUPE_LOG_WARN = 2,
    TROUPE_LOG_INFO = 3,
    TROUPE_LOG_DEBUG = 4
} troupe_log_level;

/* Longest default line, newline included. */
#define TROUPE_LOG_LINE_MAX 8192

/* One key=value pair of a record; both NUL-terminated. */
typedef struct troupe_log_field {
    const char *key;
    const char *value;
} troupe_log_field;

typedef struct troupe_log_record {
    troupe_log_level level; /* ERROR..DEBUG */
    const char *sys;        /* the part that logs: "runtime", "storage",
                               "rocksdb" */
    const char *msg;        /* the formatted message, NUL-terminated */
    size_t msg_len;
    const troupe_log_field *fields; /* nfields pairs; NULL when 0 */
    size_t nfields;
    int64_t time_ns; /* CLOCK_REALTIME when the record was made */
} troupe_log_record;

typedef void (*troupe_log_fn)(void *ctx, const troupe_log_record *rec);

typedef struct troupe_logger {
    troupe_log_fn fn; /* NULL: the default stderr writer */
    void *ctx;        /* passed to fn */
    /* Most detailed level that passes; TROUPE_LOG_DEFAULT (0): WARN. */
    troupe_log_level level;
} troupe_logger;

/* Whether a record of `level` passes lg (NULL lg: the default). */
int
troupe_log_enabled(const troupe_logger *lg, troupe_log_level level);

/*
 * Makes a record, if `level` passes lg (NULL: the default logger), with
 * the message formatted as printf does, and hands it to lg's fn or the
 * default writer. level must be ERROR..DEBUG (anything else is dropped);
 * sys NULL is "troupe". Any thread; never fails (a message that cannot be
 * formatted in full is cut).
 */
void
troupe_log(const troupe_logger *lg, troupe_log_level level, const char *sys,
           const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* The same with key=value fields (borrowed for the call; a NULL key or
 * value field is skipped). */
void
troupe_log_fields(const troupe_logger *lg, troupe_log_level level,
                  const char *sys, const troupe_log_field *fields,
                  size_t nfields, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

/*
 * Formats rec as the default writer's line into buf (cap bytes, at least
 * 64), newline and NUL included, and returns the line's length without
 * the NUL. For hosts whose fn wants the default format somewhere else.
 * Any thread.
 */
size_t
troupe_log_format(const troupe_log_record *rec, char *buf, size_t cap);

/* The level's name in lines: "error", "warn", "info", "debug" ("?"
 * otherwise). A static string. */
const char *
troupe_log_level_name(troupe_log_level level);

#ifdef __cplusplus
}
#endif

#endif
