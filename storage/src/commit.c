/*
 * The commit pipeline: many submitters, one writer thread, group commit.
 *
 * Why a thread of our own. RocksDB groups concurrent writers itself, but
 * only among threads that are already blocked inside rocksdb_write, and
 * measured here 8 concurrent synced writers reached 4.8-9.8k writes/s
 * (NOTES.md): grouping must happen before RocksDB. And event-loop threads
 * must never wait on the disk, so someone else has to.
 *
 * The loop: the writer takes every batch queued since its last write (up
 * to group_max_batches / group_max_bytes), merges them into one RocksDB
 * WriteBatch, writes it once (synced when any member asked), then runs the
 * completions in submit order. While it writes and syncs, new batches pile
 * up and form the next group, so the group size follows the load with no
 * timer and no added latency for a lone submitter.
 *
 * Gathering. Submitters usually wait for their completion before they
 * submit again (a transaction commits, then the next one begins). Left
 * alone, k such submitters split into two groups that alternate: while
 * group A syncs, B queues; when A completes, the writer starts B at once
 * and A's submitters, back a few microseconds later, wait a whole sync.
 * So after a synced group of k > 1 batches, the writer waits for the k
 * submitters it just completed to come back on top of what is already
 * queued, up to half the last sync's duration and at most GATHER_MAX_NS:
 * a bounded wait that trades a fraction of a sync for up to twice the
 * batches per sync. A lone submitter (k = 1) never waits here.
 *
 * Merging. A WriteBatch's serialised form ("rep", the WAL record format) is
 * a 12-byte header (8-byte sequence, 4-byte little-endian count) followed
 * by the records, each naming its column family. Appending two batches is
 * concatenating their records and adding the counts: exactly what RocksDB's
 * internal WriteBatchInternal::Append does, done here through the public
 * rocksdb_writebatch_data / rocksdb_writebatch_create_from. The format is
 * RocksDB's on-disk WAL format, stable across releases. The merged group
 * is one WAL record, so the group is atomic as a whole.
 *
 * Budgets. The queue is bounded twice: queue_max batches and
 * queue_max_bytes of their encoded size, counted at submit (a batch no
 * longer changes once submitted). A count alone let 356 batches of 8 MiB
 * hold 3 GB. A batch larger than the byte budget still gets in, alone,
 * into an empty queue: refusing it for good would make it unwritable.
 *
 * Space. The writer asks the db's free-space gate (space.c) before each
 * group's write, with the group's size: a refusal completes the group
 * ENOSPC with nothing written, and the db stays usable. Submit looks at
 * the gate's verdict too (one relaxed load while writes are accepted), so
 * that a full disk refuses at once instead of queueing work that will be
 * refused.
 *
 * Invariants:
 *  - each accepted batch is completed exactly once, by the writer, after
 *    the write that carried it returned (or was refused), in submit order;
 *  - `queued` and `queued_bytes` count batches in the queue, never those
 *    being written;
 *  - after stop, the queue only drains; the stop callback is the last
 *    thing the writer does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage_int.h"
#include "troupe/alloc.h"

#define WB_HEADER 12
#define GATHER_MAX_NS 200000L
#define DEFAULT_QUEUE_MAX 4096
#define DEFAULT_QUEUE_BYTES (64u * 1024u * 1024u)
#define DEFAULT_GROUP_BATCHES 1024
#define DEFAULT_GROUP_BYTES (4u * 1024u * 1024u)
/* Completed batches kept for troupe_commit_batch: at most POOL_MAX, each
 * of at most POOL_BATCH_BYTES (a larger one is freed, so the pool holds at
 * most 4 MiB of capacity). */
#define POOL_MAX 256
#define POOL_BATCH_BYTES (16u * 1024u)

struct troupe_commit {
    troupe_db *db;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    troupe_batch *head, *tail; /* guarded by mu */
    size_t queued;
    size_t queued_bytes;
    bool stopping;
    bool writer_waiting;  /* writer sleeps on cv; a submit must signal */
    size_t gather_target; /* while gathering: wake at this many queued */
    troupe_commit_stop_cb stop_cb;
    void *stop_arg;
    pthread_mutex_t pool_mu; /* guards pool, npool */
    troupe_batch *pool;      /* cleared batches, linked by next */
    size_t npool;
    size_t queue_max, queue_max_bytes, group_max_batches, group_max_bytes;
    /* Writer-only scratch. */
    char *merge;
    size_t merge_cap;
    _Atomic uint64_t n_batches, n_groups, n_syncs;
    /* written by the writer only, read by troupe_commit_get_hists */
    troupe_hist h_write_ns; /* each group's RocksDB write (and sync) */
    troupe_hist h_group;    /* batches per group */
};

static void
put_le32(char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (char)(v >> (8 * i));
}

/*
 * Writes the group [head, ...] of n batches; sets each b->result. Batches
 * refused before the write (dropped family, fail-stop) get their own
 * error; the others share the write's outcome.
 */
static bool
write_group(troupe_commit *c, troupe_batch *head, size_t n)
{
    troupe_db *db = c->db;
    bool failstop = atomic_load(&db->failstop);
    bool sync = false;
    size_t live = 0, bytes = WB_HEADER;
    uint64_t count = 0;
    troupe_batch *only = NULL;
    size_t i = 0;
    for (troupe_batch *b = head; i < n; b = b->next, i++) {
        if (failstop) {
            b->result = TROUPE_EFAILSTOP;
            continue;
        }
        b->result = troupe__batch_check_cfs(b);
        if (b->result != TROUPE_OK)
            continue;
        int cnt = rocksdb_writebatch_count(b->wb);
        if (cnt == 0)
            continue;                  /* nothing to write: OK */
        troupe__batch_raise_bounds(b); /* before RocksDB sees the keys */
        sync |= b->sync;
        live++;
        count += (uint64_t)cnt;
        bytes += troupe__batch_bytes(b) - WB_HEADER;
        only = b;
    }
    if (live == 0)
        return false;
    troupe_err e = troupe__space_admit(&db->space, bytes);
    if (e != TROUPE_OK)
        goto done;
    if (live == 1) {
        e = troupe__db_write_wb(db, only->wb, sync);
    } else {
        if (bytes > c->merge_cap) {
            char *m = troupe_realloc(c->merge, bytes);
            if (m == NULL) {
                /* Nothing was written; the batches could be retried, but
                 * the caller's contract has no "try again" outcome, and
                 * this is out of memory on the writer: report it. */
                e = TROUPE_ENOMEM;
                goto done;
            }
            c->merge = m;
            c->merge_cap = bytes;
        }
        memset(c->merge, 0, WB_HEADER);
        put_le32(c->merge + 8, (uint32_t)count);
        size_t off = WB_HEADER;
        i = 0;
        for (troupe_batch *b = head; i < n; b = b->next, i++) {
            if (b->result != TROUPE_OK || rocksdb_writebatch_count(b->wb) == 0)
                continue;
            size_t len = 0;
            const char *rep = rocksdb_writebatch_data(b->wb, &len);
            memcpy(c->merge + off, rep + WB_HEADER, len - WB_HEADER);
            off += len - WB_HEADER;
        }
        rocksdb_writebatch_t *wb =
            rocksdb_writebatch_create_from(c->merge, off);
        if (wb == NULL) {
            e = TROUPE_ENOMEM;
            goto done;
        }
        e = troupe__db_write_wb(db, wb, sync);
        rocksdb_writebatch_destroy(wb);
    }
    atomic_fetch_add_explicit(&c->n_groups, 1, memory_order_relaxed);
    if (sync)
        atomic_fetch_add_explicit(&c->n_syncs, 1, memory_order_relaxed);
done:
    i = 0;
    for (troupe_batch *b = head; i < n; b = b->next, i++) {
        if (b->result == TROUPE_OK && rocksdb_writebatch_count(b->wb) > 0)
            b->result = e;
    }
    return sync && e == TROUPE_OK;
}

static int64_t
mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* See "Gathering" above. Called with mu held; returns with mu held. */
static void
gather(troupe_commit *c, size_t last_n, int64_t last_sync_ns)
{
    size_t target = c->queued + last_n;
    if (target > c->group_max_batches)
        target = c->group_max_batches;
    if (last_n < 2 || c->queued >= target || c->stopping)
        return;
    int64_t wait = last_sync_ns / 2;
    if (wait > GATHER_MAX_NS)
        wait = GATHER_MAX_NS;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += wait;
    dl.tv_sec += dl.tv_nsec / 1000000000;
    dl.tv_nsec %= 1000000000;
    c->gather_target = target;
    while (c->queued < target && !c->stopping) {
        c->writer_waiting = true;
        int rc = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
        c->writer_waiting = false;
        if (rc == ETIMEDOUT)
            break;
    }
    c->gather_target = 0;
}

/*
 * Puts the completed batches of a group back in the pool, cleared but with
 * their capacity, so that a steady stream of writes allocates no batches:
 * without it each batch is allocated by a submitter's thread and freed by
 * the writer, and those cross-thread frees contend on the allocator's
 * locks. What the pool cannot take is freed.
 */
static void
recycle(troupe_commit *c, troupe_batch *head)
{
    troupe_batch *keep = NULL, *keep_tail = NULL;
    size_t nkeep = 0;
    pthread_mutex_lock(&c->pool_mu);
    size_t room = POOL_MAX - c->npool;
    pthread_mutex_unlock(&c->pool_mu);
    for (troupe_batch *b = head, *nx; b != NULL; b = nx) {
        nx = b->next;
        if (nkeep < room && troupe__batch_bytes(b) <= POOL_BATCH_BYTES) {
            troupe_batch_clear(b);
            b->next = keep;
            keep = b;
            if (keep_tail == NULL)
                keep_tail = b;
            nkeep++;
        } else {
            troupe_batch_destroy(b);
        }
    }
    if (keep == NULL)
        return;
    pthread_mutex_lock(&c->pool_mu);
    keep_tail->next = c->pool;
    c->pool = keep;
    c->npool += nkeep;
    pthread_mutex_unlock(&c->pool_mu);
}

static void *
writer_main(void *arg)
{
    troupe_commit *c = arg;
    pthread_setname_np(pthread_self(), "troupe-commit");
    size_t last_n = 0;
    int64_t last_sync_ns = 0;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        gather(c, last_n, last_sync_ns);
        last_n = 0;
        while (c->head == NULL && !c->stopping) {
            c->writer_waiting = true;
            pthread_cond_wait(&c->cv, &c->mu);
            c->writer_waiting = false;
        }
        if (c->head == NULL)
            break; /* stopping and drained */
        troupe_batch *head = c->head, *last = head;
        size_t n = 1, bytes = head->pipe_bytes;
        while (last->next != NULL && n < c->group_max_batches) {
            size_t nb = last->next->pipe_bytes;
            if (bytes + nb > c->group_max_bytes)
                break;
            bytes += nb;
            last = last->next;
            n++;
        }
        c->head = last->next;
        if (c->head == NULL)
            c->tail = NULL;
        last->next = NULL;
        c->queued -= n;
        c->queued_bytes -= bytes;
        pthread_mutex_unlock(&c->mu);

        int64_t t0 = mono_ns();
        bool synced = write_group(c, head, n);
        int64_t dt = mono_ns() - t0;
        if (synced) {
            last_n = n;
            last_sync_ns = dt;
        }
        troupe_hist_add(&c->h_write_ns, dt > 0 ? (uint64_t)dt : 0);
        troupe_hist_add(&c->h_group, n);
        atomic_fetch_add_explicit(&c->n_batches, n, memory_order_relaxed);
        /* Callbacks first, recycling after: submitters waiting on a
         * completion get going sooner. */
        for (troupe_batch *b = head; b != NULL; b = b->next)
            b->cb(b->result, b->cb_arg);
        recycle(c, head);
        pthread_mutex_lock(&c->mu);
    }
    troupe_commit_stop_cb cb = c->stop_cb;
    void *cb_arg = c->stop_arg;
    pthread_mutex_unlock(&c->mu);
    if (cb != NULL)
        cb(cb_arg);
    return NULL;
}

troupe_err
troupe_commit_create(troupe_db *db, const troupe_commit_opts *opts,
                     troupe_commit **out)
{
    if (out != NULL)
        *out = NULL;
    if (db == NULL || out == NULL)
        return TROUPE_EINVAL;
    if (db->read_only)
        return TROUPE_EREADONLY;
    troupe_commit *c = troupe_calloc(1, sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->db = db;
    c->queue_max =
        opts && opts->queue_max ? opts->queue_max : DEFAULT_QUEUE_MAX;
    c->queue_max_bytes = opts && opts->queue_max_bytes ? opts->queue_max_bytes
                                                       : DEFAULT_QUEUE_BYTES;
    c->group_max_batches = opts && opts->group_max_batches
                               ? opts->group_max_batches
                               : DEFAULT_GROUP_BATCHES;
    c->group_max_bytes = opts && opts->group_max_bytes ? opts->group_max_bytes
                                                       : DEFAULT_GROUP_BYTES;
    atomic_init(&c->n_batches, 0);
    troupe_hist_init(&c->h_write_ns, TROUPE_COMMIT_WRITE_NS_BASE,
                     TROUPE_COMMIT_WRITE_NS_BUCKETS);
    troupe_hist_init(&c->h_group, 1, TROUPE_COMMIT_GROUP_BUCKETS);
    atomic_init(&c->n_groups, 0);
    atomic_init(&c->n_syncs, 0);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_condattr_t ca; /* gather() waits against CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_fetch_add(&db->users, 1);
    if (pthread_create(&c->thread, NULL, writer_main, c) != 0) {
        atomic_fetch_sub(&db->users, 1);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        pthread_mutex_destroy(&c->pool_mu);
        troupe_free(c);
        return TROUPE_ESYS;
    }
    *out = c;
    return TROUPE_OK;
}

troupe_err
troupe_commit_batch(troupe_commit *c, troupe_batch **out)
{
    if (out != NULL)
        *out = NULL;
    if (c == NULL || out == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&c->pool_mu);
    troupe_batch *b = c->pool;
    if (b != NULL) {
        c->pool = b->next;
        c->npool--;
    }
    pthread_mutex_unlock(&c->pool_mu);
    if (b == NULL)
        return troupe_batch_create(out);
    b->next = NULL;
    *out = b;
    return TROUPE_OK;
}

troupe_err
troupe_commit_submit(troupe_commit *c, troupe_batch **bp, troupe_sync sync,
                     troupe_commit_cb cb, void *arg)
{
    if (c == NULL || bp == NULL || *bp == NULL || cb == NULL)
        return TROUPE_EINVAL;
    troupe_batch *b = *bp;
    if (b->db != NULL && b->db != c->db)
        return TROUPE_EINVAL;
    bool s;
    troupe_err e = troupe__db_resolve_sync(c->db, sync, &s);
    if (e != TROUPE_OK)
        return e;
    if (atomic_load(&c->db->failstop))
        return TROUPE_EFAILSTOP;
    if (troupe__space_refusing(&c->db->space))
        return TROUPE_ENOSPC;
    size_t bytes = troupe__batch_bytes(b);
    b->sync = s;
    b->cb = cb;
    b->cb_arg = arg;
    b->next = NULL;
    b->pipe_bytes = bytes;
    bool wake = false;
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        e = TROUPE_ECLOSED;
    } else if (c->queued >= c->queue_max ||
               (c->queued > 0 &&
                c->queued_bytes + bytes > c->queue_max_bytes)) {
        e = TROUPE_EFULL;
    } else {
        if (c->tail != NULL)
            c->tail->next = b;
        else
            c->head = b;
        c->tail = b;
        c->queued++;
        c->queued_bytes += bytes;
        /* While gathering, only the batch that completes the group wakes
         * the writer: waking it for each would make it compete for the
         * cores with the very submitters it waits for. */
        wake = c->writer_waiting &&
               (c->gather_target == 0 || c->queued >= c->gather_target);
        if (wake)
            c->writer_waiting = false;
    }
    pthread_mutex_unlock(&c->mu);
    if (e != TROUPE_OK)
        return e;
    *bp = NULL;
    if (wake)
        pthread_cond_signal(&c->cv);
    return TROUPE_OK;
}

troupe_err
troupe_commit_stop(troupe_commit *c, troupe_commit_stop_cb cb, void *arg)
{
    if (c == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        pthread_mutex_unlock(&c->mu);
        return TROUPE_ESTATE;
    }
    c->stopping = true;
    c->stop_cb = cb;
    c->stop_arg = arg;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return TROUPE_OK;
}

void
troupe_commit_destroy(troupe_commit *c)
{
    if (c == NULL)
        return;
    if (pthread_equal(pthread_self(), c->thread)) {
        /* A programming error, and the process ends here: written
         * directly (the logger may be what the callback tears down). */
        fprintf(stderr, "troupe_commit_destroy called from its own writer "
                        "thread (a completion or stop callback)\n");
        abort();
    }
    pthread_mutex_lock(&c->mu);
    if (!c->stopping) {
        c->stopping = true;
        pthread_cond_signal(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    atomic_fetch_sub(&c->db->users, 1);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    for (troupe_batch *b = c->pool, *nx; b != NULL; b = nx) {
        nx = b->next;
        troupe_batch_destroy(b);
    }
    pthread_mutex_destroy(&c->pool_mu);
    troupe_free(c->merge);
    troupe_free(c);
}

void
troupe_commit_get_stats(const troupe_commit *c, troupe_commit_stats *st)
{
    if (st == NULL)
        return;
    memset(st, 0, sizeof(*st));
    if (c == NULL)
        return;
    troupe_commit *m = (troupe_commit *)c;
    st->batches = atomic_load_explicit(&m->n_batches, memory_order_relaxed);
    st->groups = atomic_load_explicit(&m->n_groups, memory_order_relaxed);
    st->syncs = atomic_load_explicit(&m->n_syncs, memory_order_relaxed);
}

void
troupe_commit_get_hists(const troupe_commit *c, troupe_hist_snapshot *write_ns,
                        troupe_hist_snapshot *group)
{
    troupe_hist zero;
    troupe_hist_init(&zero, 1, 1);
    if (write_ns != NULL)
        troupe_hist_read(c ? &c->h_write_ns : &zero, write_ns);
    if (group != NULL)
        troupe_hist_read(c ? &c->h_group : &zero, group);
}
