/*
 * Point reads and snapshots. Values are copied out of RocksDB's pinned
 * slices into troupe_malloc'ed buffers so the caller frees them with
 * troupe_free like everything else troupe hands out (RocksDB's own
 * buffers would need rocksdb_free, a foreign allocator in a public
 * contract).
 */
#include <string.h>

#include "storage_int.h"
#include "troupe/alloc.h"

troupe_err
troupe_snapshot_create(troupe_db *db, troupe_snapshot **out)
{
    if (out != NULL)
        *out = NULL;
    if (db == NULL || out == NULL)
        return TROUPE_EINVAL;
    troupe_snapshot *s = troupe_calloc(1, sizeof(*s));
    if (s == NULL)
        return TROUPE_ENOMEM;
    s->ro = rocksdb_readoptions_create();
    if (s->ro == NULL) {
        troupe_free(s);
        return TROUPE_ENOMEM;
    }
    s->db = db;
    /* A read-only db's view never changes after open, so the latest
     * state is the snapshot (and RocksDB's secondary instance refuses
     * iterators over a snapshot). */
    if (!db->read_only) {
        s->snap = rocksdb_create_snapshot(db->rdb);
        rocksdb_readoptions_set_snapshot(s->ro, s->snap);
    }
    atomic_fetch_add(&db->users, 1);
    *out = s;
    return TROUPE_OK;
}

void
troupe_snapshot_destroy(troupe_snapshot *s)
{
    if (s == NULL)
        return;
    if (s->snap != NULL)
        rocksdb_release_snapshot(s->db->rdb, s->snap);
    rocksdb_readoptions_destroy(s->ro);
    atomic_fetch_sub(&s->db->users, 1);
    troupe_free(s);
}

static troupe_err
read_args(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
          bool cached, const rocksdb_readoptions_t **ro)
{
    if (db == NULL || cf == NULL || cf->db != db)
        return TROUPE_EINVAL;
    if (snap != NULL && snap->db != db)
        return TROUPE_EINVAL;
    *ro = cached ? db->ro_cached : snap != NULL ? snap->ro : db->ro;
    return troupe__cf_check(db, cf);
}

static troupe_err
copy_out(const char *p, size_t n, void **val)
{
    void *v = troupe_malloc(n ? n : 1);
    if (v == NULL)
        return TROUPE_ENOMEM;
    if (n > 0)
        memcpy(v, p, n);
    *val = v;
    return TROUPE_OK;
}

static troupe_err
get_impl(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap, bool cached,
         const void *key, size_t key_len, void **val, size_t *val_len)
{
    if (val != NULL)
        *val = NULL;
    if (val_len != NULL)
        *val_len = 0;
    const rocksdb_readoptions_t *ro;
    troupe_err e = read_args(db, cf, snap, cached, &ro);
    if (e == TROUPE_EINVAL || key == NULL || key_len == 0 || val == NULL ||
        val_len == NULL)
        return TROUPE_EINVAL;
    if (key_len > TROUPE_KEY_MAX)
        return TROUPE_ETOOBIG;
    if (e != TROUPE_OK)
        return e;
    if (troupe__cf_above(cf, key, key_len))
        return TROUPE_ENOENT; /* above every key it holds (bound.c) */
    char *err = NULL;
    rocksdb_pinnableslice_t *ps =
        rocksdb_get_pinned_cf(db->rdb, ro, cf->h, key, key_len, &err);
    if (err != NULL)
        return troupe__rocks_err(&db->log, err, TROUPE_EIO, "get");
    if (ps == NULL)
        return TROUPE_ENOENT;
    size_t n = 0;
    const char *p = rocksdb_pinnableslice_value(ps, &n);
    e = copy_out(p, n, val);
    rocksdb_pinnableslice_destroy(ps);
    if (e == TROUPE_OK)
        *val_len = n;
    return e;
}

troupe_err
troupe_db_get(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
              const void *key, size_t key_len, void **val, size_t *val_len)
{
    return get_impl(db, cf, snap, false, key, key_len, val, val_len);
}

troupe_err
troupe_db_get_cached(troupe_db *db, troupe_cf *cf, const void *key,
                     size_t key_len, void **val, size_t *val_len)
{
    return get_impl(db, cf, NULL, true, key, key_len, val, val_len);
}

/* RocksDB's batched MultiGet: one superversion for all the keys, and the
 * memtable and table filters probed for the whole batch at once
 * (prefetched), where n single gets take each probe's cache misses one
 * after the other. It may read the disk, so blocking reads only. */
static troupe_err
batched_multi_get(troupe_db *db, troupe_cf *cf, const rocksdb_readoptions_t *ro,
                  size_t n, const void *const *keys, const size_t *key_lens,
                  void **vals, size_t *val_lens, troupe_err *errs)
{
    void **blk = troupe_malloc(n * 2 * sizeof(void *));
    if (blk == NULL)
        return TROUPE_ENOMEM;
    rocksdb_pinnableslice_t **pv = (rocksdb_pinnableslice_t **)blk;
    char **rerr = (char **)(blk + n);
    rocksdb_batched_multi_get_cf(db->rdb, ro, cf->h, n,
                                 (const char *const *)keys, key_lens, pv, rerr,
                                 false);
    for (size_t i = 0; i < n; i++) {
        vals[i] = NULL;
        val_lens[i] = 0;
        if (rerr[i] != NULL) {
            errs[i] =
                troupe__rocks_err(&db->log, rerr[i], TROUPE_EIO, "multi_get");
        } else if (pv[i] == NULL) {
            errs[i] = TROUPE_ENOENT;
        } else {
            size_t len = 0;
            const char *p = rocksdb_pinnableslice_value(pv[i], &len);
            errs[i] = copy_out(p, len, &vals[i]);
            if (errs[i] == TROUPE_OK)
                val_lens[i] = len;
        }
        rocksdb_pinnableslice_destroy(pv[i]);
    }
    troupe_free(blk);
    return TROUPE_OK;
}

static troupe_err
multi_get_impl(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
               bool cached, size_t n, const void *const *keys,
               const size_t *key_lens, void **vals, size_t *val_lens,
               troupe_err *errs)
{
    const rocksdb_readoptions_t *ro;
    troupe_err e = read_args(db, cf, snap, cached, &ro);
    if (e == TROUPE_EINVAL || n == 0 || keys == NULL || key_lens == NULL ||
        vals == NULL || val_lens == NULL || errs == NULL)
        return TROUPE_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (keys[i] == NULL || key_lens[i] == 0)
            return TROUPE_EINVAL;
        if (key_lens[i] > TROUPE_KEY_MAX)
            return TROUPE_ETOOBIG;
    }
    if (e != TROUPE_OK)
        return e;
    if (!cached)
        return batched_multi_get(db, cf, ro, n, keys, key_lens, vals, val_lens,
                                 errs);
    /* Memory only: the vector MultiGet, which honours the block-cache
     * tier (the batched one reads missing data blocks from the disk
     * whatever the read tier: RocksDB 7.8 and later). One block for the
     * four arrays RocksDB wants (pointers, then sizes:
     * both 8-byte aligned). */
    void **blk = troupe_malloc(n * (3 * sizeof(void *) + sizeof(size_t)));
    if (blk == NULL)
        return TROUPE_ENOMEM;
    const rocksdb_column_family_handle_t **hs = (void *)blk;
    char **rv = (char **)(blk + n);
    char **rerr = (char **)(blk + 2 * n);
    size_t *rlen = (size_t *)(void *)(blk + 3 * n);
    for (size_t i = 0; i < n; i++)
        hs[i] = cf->h;
    rocksdb_multi_get_cf(db->rdb, ro, hs, n, (const char *const *)keys,
                         key_lens, rv, rlen, rerr);
    for (size_t i = 0; i < n; i++) {
        vals[i] = NULL;
        val_lens[i] = 0;
        if (rerr[i] != NULL) {
            errs[i] =
                troupe__rocks_err(&db->log, rerr[i], TROUPE_EIO, "multi_get");
            if (rv[i] != NULL)
                rocksdb_free(rv[i]);
            continue;
        }
        if (rv[i] == NULL) {
            errs[i] = TROUPE_ENOENT;
            continue;
        }
        errs[i] = copy_out(rv[i], rlen[i], &vals[i]);
        if (errs[i] == TROUPE_OK)
            val_lens[i] = rlen[i];
        rocksdb_free(rv[i]);
    }
    troupe_free(blk);
    return TROUPE_OK;
}

troupe_err
troupe_db_multi_get(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
                    size_t n, const void *const *keys, const size_t *key_lens,
                    void **vals, size_t *val_lens, troupe_err *errs)
{
    return multi_get_impl(db, cf, snap, false, n, keys, key_lens, vals,
                          val_lens, errs);
}

troupe_err
troupe_db_multi_get_cached(troupe_db *db, troupe_cf *cf, size_t n,
                           const void *const *keys, const size_t *key_lens,
                           void **vals, size_t *val_lens, troupe_err *errs)
{
    return multi_get_impl(db, cf, NULL, true, n, keys, key_lens, vals, val_lens,
                          errs);
}
