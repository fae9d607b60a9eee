/*
 * The commit pipeline: group commit for one db.
 *
 * Any thread submits a batch (ownership moves in) with a durability flag
 * and a completion callback, and returns at once: a submit never waits on
 * the disk, so an event-loop thread may call it. One dedicated writer
 * thread takes every batch queued since its last write, merges the group
 * into one RocksDB write batch (one WAL record: the group is atomic) and
 * writes it once, synced when any batch in the group asked for sync. So N
 * concurrent durable commits cost one fdatasync, not N.
 *
 * Completion. Every submit that returned OK completes exactly once: its
 * callback runs on the writer thread, after the group's write returned,
 * with
 *   OK         written (and synced if that batch or another in its group
 *              asked for it);
 *   ENOENT     the batch names a dropped column family; nothing of it was
 *              written (the rest of its group was);
 *   ENOSPC     nothing of the group was written: the filesystem has less
 *              than the db's min_free_bytes (the db stays usable; writes
 *              are accepted again once space is freed), or RocksDB found
 *              no space to write the WAL record (the db is now fail-stop);
 *   EUNKNOWN   the group's write or sync failed: the batch may or may not
 *              be stored. The db is now fail-stop;
 *   EFAILSTOP  the db was already fail-stop; nothing was written;
 *   ENOMEM     the writer could not allocate the merged group; nothing
 *              of the group was written.
 * The callback must not block for long (it holds up every later commit)
 * and must not call troupe_commit_destroy. Actors get the outcome as a
 * message: the callback builds one and hands it to troupe_runtime_send
 * (runtime.h), which is safe from any thread and never blocks; the actor's
 * loop never waits on the disk.
 *
 * Order: batches submitted by one thread are written in submit order, and
 * a callback never runs before those of earlier groups.
 *
 * Backpressure: at most queue_max batches, and at most queue_max_bytes of
 * them (their encoded size), wait in the queue (accepted, not yet taken by
 * the writer). A submit beyond either fails with EFULL and leaves the
 * batch with the caller, who may retry after a completion. A batch larger
 * than queue_max_bytes is accepted only into an empty queue. So the
 * batches a pipeline holds take at most queue_max_bytes plus the group
 * being written (group_max_bytes, or one larger batch).
 *
 * Shutdown: troupe_commit_stop refuses new batches (ECLOSED) and lets the
 * writer finish what was accepted: queued batches are written, not
 * canceled, and complete normally. Then the stop callback runs, on the
 * writer thread, after the last completion. troupe_commit_destroy joins
 * the writer and frees the pipeline. The db must stay open until destroy
 * returned (troupe_db_close answers EBUSY before).
 */
#ifndef TROUPE_COMMIT_H
#define TROUPE_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/hist.h"
#include "troupe/storage.h"

typedef struct troupe_commit troupe_commit;

typedef struct troupe_commit_opts {
    size_t queue_max;         /* 0: 4096 */
    size_t queue_max_bytes;   /* 0: 64 MiB (see Backpressure) */
    size_t group_max_batches; /* 0: 1024 */
    size_t group_max_bytes;   /* 0: 4 MiB; a larger batch is a group alone */
} troupe_commit_opts;

typedef void (*troupe_commit_cb)(troupe_err err, void *arg);
typedef void (*troupe_commit_stop_cb)(void *arg);

/* Counters since create, read with relaxed loads (for tests, benches). */
typedef struct troupe_commit_stats {
    uint64_t batches; /* completed */
    uint64_t groups;  /* RocksDB writes issued */
    uint64_t syncs;   /* of which synced */
} troupe_commit_stats;

/*
 * Creates a pipeline on db and starts its writer thread. opts may be NULL.
 * Errors: EINVAL (NULL db or out), EREADONLY (a read-only db: it has
 * nothing to commit), ENOMEM, ESYS (thread). Any thread.
 */
troupe_err
troupe_commit_create(troupe_db *db, const troupe_commit_opts *opts,
                     troupe_commit **out);

/*
 * Submits *b for writing. On OK the pipeline owns the batch (*b is set to
 * NULL) and cb(err, arg) fires exactly once, later, on the writer thread
 * (never inside this call). On error nothing fires and *b is untouched.
 * Errors: EINVAL (NULL c, b, *b or cb; batch bound to another db, SYNC_ON with
 * disable_wal), EFULL (queue at queue_max or queue_max_bytes), ECLOSED
 * (stopping), EFAILSTOP (the db is fail-stop), ENOSPC (the filesystem is
 * below the db's min_free_bytes: see storage.h). Any thread; never blocks
 * on the disk.
 */
troupe_err
troupe_commit_submit(troupe_commit *c, troupe_batch **b, troupe_sync sync,
                     troupe_commit_cb cb, void *arg);

/*
 * An empty batch for a submit to c: one the writer completed and cleared
 * (its buffers kept, so a steady stream of writes allocates none), or a
 * new one (troupe_batch_create) when none is free. The caller owns it
 * exactly as a created one: it may submit it to any pipeline of the same
 * db, or destroy it. Errors: EINVAL (NULL c or out), ENOMEM. Any thread.
 */
troupe_err
troupe_commit_batch(troupe_commit *c, troupe_batch **out);

/*
 * Stops accepting batches; the writer writes the queued ones, completes
 * them, then calls cb(arg) (may be NULL) on the writer thread and exits.
 * Returns OK (cb will fire once) or ESTATE (already stopping; cb never
 * fires), EINVAL (NULL c). Any thread; returns at once.
 */
troupe_err
troupe_commit_stop(troupe_commit *c, troupe_commit_stop_cb cb, void *arg);

/*
 * Stops (if not yet stopped, without a callback), waits for the writer to
 * drain and exit, and frees the pipeline. NULL is a no-op. Blocks until
 * the queued batches are written; never call it from a completion or stop
 * callback (it aborts: the writer cannot join itself).
 */
void
troupe_commit_destroy(troupe_commit *c);

/* Copies the counters into *st. */
void
troupe_commit_get_stats(const troupe_commit *c, troupe_commit_stats *st);

/* The histograms' shapes: write times from 1 us doubling to 8.4 s (and
 * past), batches per group from 1 doubling to 1024 (and past). */
#define TROUPE_COMMIT_WRITE_NS_BASE 1000u
#define TROUPE_COMMIT_WRITE_NS_BUCKETS 24u
#define TROUPE_COMMIT_GROUP_BUCKETS 11u

/*
 * Histograms since create (troupe/hist.h): *write_ns of each group's
 * RocksDB write, its sync included, in nanoseconds (failed writes too);
 * *group of the batches per group. Either may be NULL; a NULL c gives
 * empty ones. The writer records them after each group, before the
 * group's callbacks. Any thread.
 */
void
troupe_commit_get_hists(const troupe_commit *c, troupe_hist_snapshot *write_ns,
                        troupe_hist_snapshot *group);

#endif
