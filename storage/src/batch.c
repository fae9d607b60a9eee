/*
 * Write batches: a thin owner of a RocksDB WriteBatch plus the set of
 * families it touched. The set lets a write refuse (ENOENT, nothing
 * written) a batch whose family was dropped since the put, instead of
 * letting RocksDB fail it halfway through the group it was merged into.
 */
#include <string.h>

#include "storage_int.h"
#include "troupe/alloc.h"

/* Per-record overhead we budget against TROUPE_BATCH_MAX: tag, family id
 * and two length varints. */
#define RECORD_OVERHEAD 32

troupe_err
troupe_batch_create(troupe_batch **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    troupe_batch *b = troupe_calloc(1, sizeof(*b));
    if (b == NULL)
        return TROUPE_ENOMEM;
    b->wb = rocksdb_writebatch_create();
    if (b->wb == NULL) {
        troupe_free(b);
        return TROUPE_ENOMEM;
    }
    *out = b;
    return TROUPE_OK;
}

void
troupe_batch_destroy(troupe_batch *b)
{
    if (b == NULL)
        return;
    rocksdb_writebatch_destroy(b->wb);
    troupe_free(b->cfs);
    troupe_free(b->puts);
    troupe_free(b);
}

size_t
troupe__batch_bytes(const troupe_batch *b)
{
    size_t n = 0;
    rocksdb_writebatch_data(b->wb, &n);
    return n;
}

/* Validates and binds; records cf in the touched set, at *idx (a put
 * keeps its key bound there; NULL when the caller needs no index). */
static troupe_err
batch_admit(troupe_batch *b, troupe_cf *cf, size_t payload, size_t *idx)
{
    if (b == NULL || cf == NULL)
        return TROUPE_EINVAL;
    if (b->db != NULL && cf->db != b->db)
        return TROUPE_EINVAL;
    troupe_err e = troupe__cf_check(NULL, cf);
    if (e != TROUPE_OK)
        return e;
    if (cf->read_only)
        return TROUPE_EREADONLY;
    if (troupe__batch_bytes(b) + payload + RECORD_OVERHEAD > TROUPE_BATCH_MAX)
        return TROUPE_ETOOBIG;
    for (size_t i = 0; i < b->ncfs; i++) {
        if (b->cfs[i] == cf) {
            if (idx != NULL)
                *idx = i;
            goto bind;
        }
    }
    if (b->ncfs == b->cfs_cap) {
        size_t cap = b->cfs_cap ? b->cfs_cap * 2 : 4;
        troupe_cf **v = troupe_realloc(b->cfs, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        b->cfs = v;
        troupe_kbound *pv = troupe_realloc(b->puts, cap * sizeof(*pv));
        if (pv == NULL)
            return TROUPE_ENOMEM; /* cfs grew: harmless, cap unchanged */
        b->puts = pv;
        b->cfs_cap = cap;
    }
    b->puts[b->ncfs] = (troupe_kbound){.any = false};
    if (idx != NULL)
        *idx = b->ncfs;
    b->cfs[b->ncfs++] = cf;
bind:
    b->db = cf->db;
    return TROUPE_OK;
}

static troupe_err
key_check(const void *key, size_t len)
{
    if (key == NULL || len == 0)
        return TROUPE_EINVAL;
    return len > TROUPE_KEY_MAX ? TROUPE_ETOOBIG : TROUPE_OK;
}

troupe_err
troupe_batch_put(troupe_batch *b, troupe_cf *cf, const void *key,
                 size_t key_len, const void *val, size_t val_len)
{
    troupe_err e = key_check(key, key_len);
    if (e != TROUPE_OK)
        return b == NULL || cf == NULL ? TROUPE_EINVAL : e;
    if (val == NULL && val_len > 0)
        return TROUPE_EINVAL;
    if (val_len > TROUPE_VALUE_MAX)
        return b == NULL || cf == NULL ? TROUPE_EINVAL : TROUPE_ETOOBIG;
    size_t idx;
    e = batch_admit(b, cf, key_len + val_len, &idx);
    if (e != TROUPE_OK)
        return e;
    rocksdb_writebatch_put_cf(b->wb, cf->h, key, key_len,
                              val != NULL ? val : "", val_len);
    troupe__kbound_max(&b->puts[idx], key, key_len);
    return TROUPE_OK;
}

troupe_err
troupe_batch_delete(troupe_batch *b, troupe_cf *cf, const void *key,
                    size_t key_len)
{
    troupe_err e = key_check(key, key_len);
    if (e != TROUPE_OK)
        return b == NULL || cf == NULL ? TROUPE_EINVAL : e;
    e = batch_admit(b, cf, key_len, NULL);
    if (e != TROUPE_OK)
        return e;
    rocksdb_writebatch_delete_cf(b->wb, cf->h, key, key_len);
    return TROUPE_OK;
}

troupe_err
troupe_batch_delete_range(troupe_batch *b, troupe_cf *cf, const void *start,
                          size_t start_len, const void *end, size_t end_len)
{
    troupe_err e = key_check(start, start_len);
    if (e == TROUPE_OK)
        e = key_check(end, end_len);
    if (e != TROUPE_OK)
        return b == NULL || cf == NULL ? TROUPE_EINVAL : e;
    if (troupe_key_cmp(start, start_len, end, end_len) >= 0)
        return TROUPE_EINVAL;
    e = batch_admit(b, cf, start_len + end_len, NULL);
    if (e != TROUPE_OK)
        return e;
    rocksdb_writebatch_delete_range_cf(b->wb, cf->h, start, start_len, end,
                                       end_len);
    return TROUPE_OK;
}

size_t
troupe_batch_count(const troupe_batch *b)
{
    return b != NULL ? (size_t)rocksdb_writebatch_count(b->wb) : 0;
}

void
troupe_batch_clear(troupe_batch *b)
{
    if (b == NULL)
        return;
    rocksdb_writebatch_clear(b->wb);
    b->ncfs = 0;
    b->db = NULL;
}

troupe_err
troupe__batch_check_cfs(const troupe_batch *b)
{
    for (size_t i = 0; i < b->ncfs; i++) {
        if (atomic_load(&b->cfs[i]->dropped))
            return TROUPE_ENOENT;
    }
    return TROUPE_OK;
}
