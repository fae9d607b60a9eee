/*
 * Private to storage/src: RocksDB's info log, written by rocks_log.cc so
 * that a failing write to it can never abort the process. C and C++ see
 * this header (storage_int.h is C only).
 */
#ifndef TROUPE_ROCKS_LOG_H
#define TROUPE_ROCKS_LOG_H

#include <rocksdb/c.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most bytes of one info log file; the previous one is kept as LOG.old. */
#define TROUPE_ROCKS_LOG_MAX (4u * 1024u * 1024u)

/*
 * A logger for rocksdb_options_set_info_log that writes RocksDB's INFO and
 * higher lines to <dir>/LOG (an existing LOG becomes LOG.old first). Each
 * line is one write(2); a line that cannot be written (full disk, I/O
 * error, directory gone) is dropped and counted, never retried, and the
 * next line tries again. When the file reaches max_bytes it becomes
 * LOG.old and a new LOG starts, so the info log holds at most twice
 * max_bytes. The directory need not exist yet (lines before it exists are
 * dropped). The caller owns the result and frees it with
 * troupe__rocks_log_destroy once neither the options it was set in nor
 * the db use it. A streak of failed writes is reported once through lg
 * (copied). NULL when out of memory.
 */
rocksdb_logger_t *
troupe__rocks_log_create(const char *dir, size_t max_bytes,
                         const troupe_logger *lg);

/*
 * A logger for a read-only db: writes no file; RocksDB's lines become
 * records of lg (copied), sys "rocksdb": its DEBUG, INFO and HEADER lines
 * at DEBUG, WARN at INFO, ERROR and FATAL at WARN. Freed with
 * troupe__rocks_log_destroy. NULL when out of memory.
 */
rocksdb_logger_t *
troupe__rocks_log_create_forward(const troupe_logger *lg);

/* NULL is a no-op. */
void
troupe__rocks_log_destroy(rocksdb_logger_t *l);

/* Lines dropped since create (a write that failed or was short); 0 for
 * a forwarding logger. */
uint64_t
troupe__rocks_log_dropped(const rocksdb_logger_t *l);

#ifdef __cplusplus
}
#endif

#endif
