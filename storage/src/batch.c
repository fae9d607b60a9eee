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

const void *
troupe_batch_data(const troupe_batch *b, size_t *len)
{
    if (len != NULL)
        *len = 0;
    if (b == NULL || len == NULL)
        return NULL;
    return rocksdb_writebatch_data(b->wb, len);
}

/* WriteBatch record tags (RocksDB's db/dbformat.h, ValueType): the only
 * ones a troupe batch holds. */
enum {
    WB_DELETE = 0x0,
    WB_PUT = 0x1,
    WB_CF_DELETE = 0x4,
    WB_CF_PUT = 0x5,
    WB_CF_RANGE_DELETE = 0xE,
    WB_RANGE_DELETE = 0xF
};
#define WB_HEADER 12 /* sequence (8 bytes) and count (4), little-endian */

static bool
wb_varint32(const unsigned char **p, const unsigned char *end, uint32_t *out)
{
    uint32_t v = 0;
    for (int shift = 0; shift <= 28 && *p < end; shift += 7) {
        unsigned char c = *(*p)++;
        v |= (uint32_t)(c & 0x7f) << shift;
        if ((c & 0x80) == 0) {
            *out = v;
            return true;
        }
    }
    return false;
}

static bool
wb_slice(const unsigned char **p, const unsigned char *end,
         const unsigned char **s, size_t *n)
{
    uint32_t len = 0;
    if (!wb_varint32(p, end, &len) || (size_t)(end - *p) < len)
        return false;
    *s = *p;
    *n = len;
    *p += len;
    return true;
}

/* The open family of db whose RocksDB id is id. */
static troupe_cf *
cf_by_id(troupe_db *db, uint32_t id)
{
    troupe_cf *cf = NULL;
    pthread_mutex_lock(&db->mu);
    for (size_t i = 0; i < db->ncfs && cf == NULL; i++)
        if (!atomic_load(&db->cfs[i]->dropped) &&
            rocksdb_column_family_handle_get_id(db->cfs[i]->h) == id)
            cf = db->cfs[i];
    pthread_mutex_unlock(&db->mu);
    return cf;
}

troupe_err
troupe_batch_from_data(troupe_db *db, const void *data, size_t len,
                       troupe_batch **out)
{
    if (out != NULL)
        *out = NULL;
    if (db == NULL || out == NULL || (data == NULL && len > 0))
        return TROUPE_EINVAL;
    if (len < WB_HEADER)
        return TROUPE_ECORRUPT;
    const unsigned char *p = data, *end = p + len;
    uint32_t count = (uint32_t)p[8] | (uint32_t)p[9] << 8 |
                     (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
    p += WB_HEADER;
    troupe_batch *b = NULL;
    troupe_err e = troupe_batch_create(&b);
    uint32_t seen = 0;
    while (e == TROUPE_OK && p < end) {
        unsigned char tag = *p++;
        uint32_t cfid = 0;
        const unsigned char *k = NULL, *v = NULL;
        size_t kl = 0, vl = 0;
        bool cfd = tag == WB_CF_DELETE || tag == WB_CF_PUT ||
                   tag == WB_CF_RANGE_DELETE;
        bool known =
            cfd || tag == WB_DELETE || tag == WB_PUT || tag == WB_RANGE_DELETE;
        bool two = tag == WB_PUT || tag == WB_CF_PUT ||
                   tag == WB_RANGE_DELETE || tag == WB_CF_RANGE_DELETE;
        if (!known || (cfd && !wb_varint32(&p, end, &cfid)) ||
            !wb_slice(&p, end, &k, &kl) || (two && !wb_slice(&p, end, &v, &vl)))
            e = TROUPE_ECORRUPT;
        troupe_cf *cf = e == TROUPE_OK ? cf_by_id(db, cfid) : NULL;
        if (e == TROUPE_OK && cf == NULL)
            e = TROUPE_ENOENT;
        if (e != TROUPE_OK)
            break;
        seen++;
        switch (tag) {
        case WB_PUT:
        case WB_CF_PUT:
            e = troupe_batch_put(b, cf, k, kl, v, vl);
            break;
        case WB_RANGE_DELETE:
        case WB_CF_RANGE_DELETE:
            e = troupe_batch_delete_range(b, cf, k, kl, v, vl);
            break;
        default:
            e = troupe_batch_delete(b, cf, k, kl);
            break;
        }
        /* a stored key the checks refuse (empty, inverted range) is not
         * one troupe wrote */
        if (e == TROUPE_EINVAL)
            e = TROUPE_ECORRUPT;
    }
    if (e == TROUPE_OK && seen != count)
        e = TROUPE_ECORRUPT;
    if (e != TROUPE_OK) {
        troupe_batch_destroy(b);
        return e;
    }
    *out = b;
    return TROUPE_OK;
}
