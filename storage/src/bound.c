/*
 * Key bounds: every column family knows an upper bound of the keys it may
 * hold, so that a point read of a key above it answers ENOENT without
 * asking RocksDB.
 *
 * Why. Every table write reads its key first (the row and its manifest:
 * absent for an insert, and an orphaned manifest is an integrity error).
 * Each of those reads is a RocksDB Get: a superversion, the memtable
 * bloom probe, and one filter probe per level-0 file, most of them cache
 * misses. Keys that grow (counters, timestamps, time-ordered ids) land
 * above everything stored, and for them the bound answers at once: a
 * B-tree's append fast path, as SQLite's and PostgreSQL's rightmost
 * inserts. Measured on `table_put`, the two reads were a fifth of the
 * write path.
 *
 * Exactness. The bound starts as the family's last key at open or create
 * (an iterator's SeekToLast, which sees the memtables the WAL replay
 * filled), and every write that goes through this module raises it to
 * its largest put key before RocksDB sees the batch (troupe_db_write and
 * the commit pipeline's writer); nothing else writes the database, which
 * RocksDB's lock keeps to one process. Deletes never lower it. So a key
 * above the bound is absent now and in every snapshot. A raise
 * happens-before the write it guards, and the write before whatever
 * learns of it, so a reader that learned of a write sees its raise.
 *
 * The bound is the key's first 16 bytes, zero-padded: a key that shares
 * those bytes with the bound is read from RocksDB as before.
 */
#include <string.h>

#include "storage_int.h"

static uint64_t
be64(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 8; i++)
        v = (v << 8) | (i < n ? p[i] : 0);
    return v;
}

void
troupe__kbound_of(const void *key, size_t len, troupe_kbound *out)
{
    const unsigned char *p = key;
    out->hi = be64(p, len);
    out->lo = len > 8 ? be64(p + 8, len - 8) : 0;
    out->any = true;
}

static bool
kbound_gt(const troupe_kbound *a, const troupe_kbound *b)
{
    if (!a->any)
        return false;
    if (!b->any)
        return true;
    return a->hi > b->hi || (a->hi == b->hi && a->lo > b->lo);
}

void
troupe__kbound_max(troupe_kbound *acc, const void *key, size_t len)
{
    troupe_kbound k;
    troupe__kbound_of(key, len, &k);
    if (kbound_gt(&k, acc))
        *acc = k;
}

static void
bound_load(troupe_cf *cf, troupe_kbound *out)
{
    for (;;) {
        uint64_t s1 =
            atomic_load_explicit(&cf->bound_seq, memory_order_acquire);
        if (s1 & 1)
            continue; /* a raise is storing it */
        out->hi = atomic_load_explicit(&cf->bound_hi, memory_order_relaxed);
        out->lo = atomic_load_explicit(&cf->bound_lo, memory_order_relaxed);
        out->any = atomic_load_explicit(&cf->bound_any, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&cf->bound_seq, memory_order_relaxed) == s1)
            return;
    }
}

/* Under bound_mu. */
static void
bound_store(troupe_cf *cf, const troupe_kbound *b)
{
    atomic_fetch_add_explicit(&cf->bound_seq, 1, memory_order_seq_cst);
    atomic_store_explicit(&cf->bound_hi, b->hi, memory_order_relaxed);
    atomic_store_explicit(&cf->bound_lo, b->lo, memory_order_relaxed);
    atomic_store_explicit(&cf->bound_any, b->any, memory_order_relaxed);
    atomic_fetch_add_explicit(&cf->bound_seq, 1, memory_order_seq_cst);
}

void
troupe__cf_bound_init(troupe_cf *cf)
{
    pthread_mutex_init(&cf->bound_mu, NULL);
    atomic_init(&cf->bound_seq, 0);
    /* The highest bound until the last key is known: nothing is above. */
    troupe_kbound b = {.hi = UINT64_MAX, .lo = UINT64_MAX, .any = true};
    /* fill_cache off: the last block read here stays out of the block
     * cache, which holds what the application reads. */
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = NULL;
    if (ro != NULL) {
        rocksdb_readoptions_set_fill_cache(ro, 0);
        it = rocksdb_create_iterator_cf(cf->db->rdb, ro, cf->h);
    }
    if (it != NULL) {
        rocksdb_iter_seek_to_last(it);
        char *err = NULL;
        if (rocksdb_iter_valid(it)) {
            size_t n = 0;
            const char *k = rocksdb_iter_key(it, &n);
            troupe__kbound_of(k, n, &b);
        } else {
            rocksdb_iter_get_error(it, &err);
            if (err == NULL)
                b.any = false; /* empty: every key is above */
            else
                troupe__rocks_err(&cf->db->log, err, TROUPE_EIO, "key bound");
        }
        rocksdb_iter_destroy(it);
    }
    if (ro != NULL)
        rocksdb_readoptions_destroy(ro);
    atomic_init(&cf->bound_hi, b.hi);
    atomic_init(&cf->bound_lo, b.lo);
    atomic_init(&cf->bound_any, b.any);
}

void
troupe__cf_bound_fini(troupe_cf *cf)
{
    pthread_mutex_destroy(&cf->bound_mu);
}

void
troupe__cf_bound_raise(troupe_cf *cf, const troupe_kbound *b)
{
    troupe_kbound cur;
    bound_load(cf, &cur);
    if (!kbound_gt(b, &cur))
        return; /* the common case for updates: no lock */
    pthread_mutex_lock(&cf->bound_mu);
    bound_load(cf, &cur);
    if (kbound_gt(b, &cur))
        bound_store(cf, b);
    pthread_mutex_unlock(&cf->bound_mu);
}

bool
troupe__cf_above(troupe_cf *cf, const void *key, size_t len)
{
    troupe_kbound k, cur;
    troupe__kbound_of(key, len, &k);
    bound_load(cf, &cur);
    return kbound_gt(&k, &cur);
}

void
troupe__batch_raise_bounds(const troupe_batch *b)
{
    for (size_t i = 0; i < b->ncfs; i++)
        if (b->puts[i].any)
            troupe__cf_bound_raise(b->cfs[i], &b->puts[i]);
}
