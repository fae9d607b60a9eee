/*
 * Ranges, iterators and pages.
 *
 * Every bound is turned into RocksDB's iterate_lower_bound (inclusive) and
 * iterate_upper_bound (exclusive), so the iterator never walks past the
 * range, and we check each key against the same bounds again: a page must
 * never hold a key outside its range, whatever the table format does.
 *
 * Continuation is by exact key. Forward, the next page starts at
 * cursor + 0x00, the smallest key greater than the cursor. Reverse, the
 * cursor itself is the exclusive upper bound. The tempting shortcut of
 * "incrementing the last byte" of the cursor skips every key that extends
 * it (after "ab", "ab\x00" and "ab\x01"... would be lost), so prefix_end,
 * which does increment, is used only to close a prefix range.
 *
 * A page is built in scratch buffers and then copied into one allocation,
 * so its owner frees one pointer and every key/value pointer is stable.
 */
#include <string.h>

#include "storage_int.h"
#include "troupe/alloc.h"

struct troupe_iter {
    troupe_db *db;
    rocksdb_readoptions_t *ro;
    rocksdb_iterator_t *it; /* NULL: provably empty range */
    uint8_t *lower;         /* inclusive, NULL: none */
    size_t lower_len;
    uint8_t *upper; /* exclusive, NULL: none */
    size_t upper_len;
    bool reverse;
    bool started;
    troupe_err done; /* OK while iterating; then the sticky answer */
};

void
troupe_range_init_bounds(troupe_range *r, const void *start, size_t start_len,
                         const void *end, size_t end_len)
{
    if (r == NULL)
        return;
    r->start = start;
    r->start_len = start_len;
    r->end = end;
    r->end_len = end_len;
    r->prefix = false;
}

void
troupe_range_init_prefix(troupe_range *r, const void *prefix, size_t prefix_len)
{
    if (r == NULL)
        return;
    r->start = prefix;
    r->start_len = prefix_len;
    r->end = NULL;
    r->end_len = 0;
    r->prefix = true;
}

/* A bound under construction: borrowed bytes plus room for one extra. */
typedef struct bound {
    const uint8_t *p; /* NULL: unbounded */
    size_t len;
    bool append_zero; /* the bound is p + 0x00 */
} bound;

static troupe_err
bound_copy(const bound *b, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (b->p == NULL)
        return TROUPE_OK;
    size_t n = b->len + (b->append_zero ? 1 : 0);
    uint8_t *v = troupe_malloc(n ? n : 1);
    if (v == NULL)
        return TROUPE_ENOMEM;
    if (b->len > 0)
        memcpy(v, b->p, b->len);
    if (b->append_zero)
        v[b->len] = 0x00;
    *out = v;
    *len = n;
    return TROUPE_OK;
}

/*
 * Resolves range + cursor into [lower, upper) (see the cursor rules in
 * storage.h). prefix_end is written to pe_buf (the prefix's length).
 */
static troupe_err
resolve(const troupe_range *r, const void *after, size_t after_len,
        bool reverse, uint8_t *pe_buf, bound *lo, bound *hi)
{
    memset(lo, 0, sizeof(*lo));
    memset(hi, 0, sizeof(*hi));
    if (r != NULL) {
        if ((r->start == NULL && r->start_len > 0) ||
            (r->end == NULL && r->end_len > 0) ||
            (r->end != NULL && r->end_len == 0) ||
            r->start_len > TROUPE_KEY_MAX + 1 ||
            r->end_len > TROUPE_KEY_MAX + 1)
            return TROUPE_EINVAL;
        if (r->prefix) {
            if (r->end != NULL || r->start_len > TROUPE_KEY_MAX)
                return TROUPE_EINVAL;
            size_t n = r->start_len;
            const uint8_t *p = r->start;
            while (n > 0 && p[n - 1] == 0xFF)
                n--;
            if (n > 0) {
                memcpy(pe_buf, p, n);
                pe_buf[n - 1]++;
                hi->p = pe_buf;
                hi->len = n;
            }
        } else if (r->end != NULL) {
            hi->p = r->end;
            hi->len = r->end_len;
        }
        if (r->start_len > 0) {
            lo->p = r->start;
            lo->len = r->start_len;
        }
        if (lo->p != NULL && hi->p != NULL &&
            troupe_key_cmp(lo->p, lo->len, hi->p, hi->len) > 0)
            return TROUPE_EINVAL;
    }
    if (after == NULL)
        return after_len == 0 ? TROUPE_OK : TROUPE_EINVAL;
    if (after_len == 0 || after_len > TROUPE_KEY_MAX)
        return TROUPE_EINVAL;
    if ((lo->p != NULL &&
         troupe_key_cmp(after, after_len, lo->p, lo->len) < 0) ||
        (hi->p != NULL &&
         troupe_key_cmp(after, after_len, hi->p, hi->len) >= 0))
        return TROUPE_ERANGE;
    if (reverse) {
        hi->p = after;
        hi->len = after_len;
    } else {
        lo->p = after;
        lo->len = after_len;
        lo->append_zero = true;
    }
    return TROUPE_OK;
}

static troupe_err
iter_create(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
            const troupe_range *range, const void *after, size_t after_len,
            bool reverse, bool cached, troupe_iter **out)
{
    if (out != NULL)
        *out = NULL;
    if (db == NULL || cf == NULL || out == NULL || cf->db != db ||
        (snap != NULL && snap->db != db))
        return TROUPE_EINVAL;
    /* the prefix's end: only prefix ranges need the buffer (a 16 KiB
     * allocation per iterator was a visible share of short scans) */
    uint8_t *pe = NULL;
    if (range != NULL && range->prefix &&
        (pe = troupe_malloc(range->start_len ? range->start_len : 1)) == NULL)
        return TROUPE_ENOMEM;
    bound lo, hi;
    troupe_err e = resolve(range, after, after_len, reverse, pe, &lo, &hi);
    if (e == TROUPE_OK)
        e = troupe__cf_check(db, cf);
    troupe_iter *it = NULL;
    if (e == TROUPE_OK) {
        it = troupe_calloc(1, sizeof(*it));
        if (it == NULL)
            e = TROUPE_ENOMEM;
    }
    if (e == TROUPE_OK)
        e = bound_copy(&lo, &it->lower, &it->lower_len);
    if (e == TROUPE_OK)
        e = bound_copy(&hi, &it->upper, &it->upper_len);
    troupe_free(pe);
    if (e == TROUPE_OK) {
        it->ro = rocksdb_readoptions_create();
        if (it->ro == NULL)
            e = TROUPE_ENOMEM;
    }
    if (e != TROUPE_OK) {
        if (it != NULL) {
            troupe_free(it->lower);
            troupe_free(it->upper);
            troupe_free(it);
        }
        return e;
    }
    it->db = db;
    it->reverse = reverse;
    it->done = TROUPE_OK;
    if (snap != NULL && snap->snap != NULL)
        rocksdb_readoptions_set_snapshot(it->ro, snap->snap);
    if (cached)
        rocksdb_readoptions_set_read_tier(it->ro, 1); /* kBlockCacheTier */
    /* An empty range never reaches RocksDB (whose assertion-enabled
     * Debian build is best not fed lower >= upper). */
    if (it->lower != NULL && it->upper != NULL &&
        troupe_key_cmp(it->lower, it->lower_len, it->upper, it->upper_len) >=
            0) {
        it->done = TROUPE_ENOENT;
    } else {
        if (it->lower != NULL)
            rocksdb_readoptions_set_iterate_lower_bound(
                it->ro, (const char *)it->lower, it->lower_len);
        if (it->upper != NULL)
            rocksdb_readoptions_set_iterate_upper_bound(
                it->ro, (const char *)it->upper, it->upper_len);
        it->it = rocksdb_create_iterator_cf(db->rdb, it->ro, cf->h);
        if (it->it == NULL) {
            rocksdb_readoptions_destroy(it->ro);
            troupe_free(it->lower);
            troupe_free(it->upper);
            troupe_free(it);
            return TROUPE_ENOMEM;
        }
    }
    atomic_fetch_add(&db->users, 1);
    *out = it;
    return TROUPE_OK;
}

troupe_err
troupe_iter_create(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
                   const troupe_range *range, const void *after,
                   size_t after_len, bool reverse, troupe_iter **out)
{
    return iter_create(db, cf, snap, range, after, after_len, reverse, false,
                       out);
}

troupe_err
troupe_iter_create_cached(troupe_db *db, troupe_cf *cf,
                          const troupe_snapshot *snap,
                          const troupe_range *range, const void *after,
                          size_t after_len, bool reverse, troupe_iter **out)
{
    return iter_create(db, cf, snap, range, after, after_len, reverse, true,
                       out);
}

troupe_err
troupe_iter_next(troupe_iter *it, troupe_kv *kv)
{
    if (it == NULL || kv == NULL)
        return TROUPE_EINVAL;
    memset(kv, 0, sizeof(*kv));
    if (it->done != TROUPE_OK)
        return it->done;
    if (!it->started) {
        it->started = true;
        if (it->reverse)
            rocksdb_iter_seek_to_last(it->it);
        else if (it->lower != NULL)
            rocksdb_iter_seek(it->it, (const char *)it->lower, it->lower_len);
        else
            rocksdb_iter_seek_to_first(it->it);
    } else if (it->reverse) {
        rocksdb_iter_prev(it->it);
    } else {
        rocksdb_iter_next(it->it);
    }
    if (!rocksdb_iter_valid(it->it)) {
        char *err = NULL;
        rocksdb_iter_get_error(it->it, &err);
        it->done = err != NULL ? troupe__rocks_err(&it->db->log, err,
                                                   TROUPE_EIO, "iterate")
                               : TROUPE_ENOENT;
        return it->done;
    }
    size_t kl = 0, vl = 0;
    const char *k = rocksdb_iter_key(it->it, &kl);
    const char *v = rocksdb_iter_value(it->it, &vl);
    /* RocksDB keeps to both bounds; each side checks the bound it moves
     * towards (the seek placed it past the other) as a guard. */
    if ((it->reverse && it->lower != NULL &&
         troupe_key_cmp(k, kl, it->lower, it->lower_len) < 0) ||
        (!it->reverse && it->upper != NULL &&
         troupe_key_cmp(k, kl, it->upper, it->upper_len) >= 0)) {
        it->done = TROUPE_ENOENT;
        return it->done;
    }
    kv->key = (const uint8_t *)k;
    kv->key_len = kl;
    kv->val = (const uint8_t *)v;
    kv->val_len = vl;
    return TROUPE_OK;
}

void
troupe_iter_destroy(troupe_iter *it)
{
    if (it == NULL)
        return;
    if (it->it != NULL)
        rocksdb_iter_destroy(it->it);
    rocksdb_readoptions_destroy(it->ro);
    troupe_free(it->lower);
    troupe_free(it->upper);
    atomic_fetch_sub(&it->db->users, 1);
    troupe_free(it);
}

/* Scratch for a page under construction. */
typedef struct page_buf {
    uint8_t *data;
    size_t len, cap;
    size_t *offs; /* 4 per entry: key off, key len, val off, val len */
    size_t n, ncap;
} page_buf;

static troupe_err
page_buf_add(page_buf *pb, const troupe_kv *kv)
{
    size_t need = kv->key_len + kv->val_len;
    if (pb->len + need > pb->cap) {
        size_t cap = pb->cap ? pb->cap : 4096;
        while (cap < pb->len + need)
            cap *= 2;
        uint8_t *d = troupe_realloc(pb->data, cap);
        if (d == NULL)
            return TROUPE_ENOMEM;
        pb->data = d;
        pb->cap = cap;
    }
    if (pb->n == pb->ncap) {
        size_t cap = pb->ncap ? pb->ncap * 2 : 64;
        size_t *o = troupe_realloc(pb->offs, cap * 4 * sizeof(size_t));
        if (o == NULL)
            return TROUPE_ENOMEM;
        pb->offs = o;
        pb->ncap = cap;
    }
    size_t *o = pb->offs + 4 * pb->n++;
    o[0] = pb->len;
    o[1] = kv->key_len;
    memcpy(pb->data + pb->len, kv->key, kv->key_len);
    pb->len += kv->key_len;
    o[2] = pb->len;
    o[3] = kv->val_len;
    if (kv->val_len > 0)
        memcpy(pb->data + pb->len, kv->val, kv->val_len);
    pb->len += kv->val_len;
    return TROUPE_OK;
}

static troupe_err
page_build(const page_buf *pb, bool more, troupe_page **out)
{
    size_t head = sizeof(troupe_page) + pb->n * sizeof(troupe_kv);
    troupe_page *p = troupe_malloc(head + pb->len);
    if (p == NULL)
        return TROUPE_ENOMEM;
    troupe_kv *items = (troupe_kv *)(p + 1);
    uint8_t *data = (uint8_t *)p + head;
    if (pb->len > 0)
        memcpy(data, pb->data, pb->len);
    for (size_t i = 0; i < pb->n; i++) {
        const size_t *o = pb->offs + 4 * i;
        items[i].key = data + o[0];
        items[i].key_len = o[1];
        items[i].val = data + o[2];
        items[i].val_len = o[3];
    }
    p->n = pb->n;
    p->items = items;
    p->cursor = pb->n > 0 ? items[pb->n - 1].key : NULL;
    p->cursor_len = pb->n > 0 ? items[pb->n - 1].key_len : 0;
    p->more = more;
    *out = p;
    return TROUPE_OK;
}

troupe_err
troupe_db_scan(troupe_db *db, troupe_cf *cf, const troupe_snapshot *snap,
               const troupe_range *range, const void *after, size_t after_len,
               size_t limit, bool reverse, troupe_page **out)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || limit == 0)
        return TROUPE_EINVAL;
    troupe_iter *it;
    troupe_err e =
        troupe_iter_create(db, cf, snap, range, after, after_len, reverse, &it);
    if (e != TROUPE_OK)
        return e;
    page_buf pb = {0};
    troupe_kv kv;
    while (pb.n < limit) {
        e = troupe_iter_next(it, &kv);
        if (e == TROUPE_OK)
            e = page_buf_add(&pb, &kv);
        if (e != TROUPE_OK)
            break;
    }
    bool more = false;
    if (e == TROUPE_OK) {
        /* Full page: peek one entry so the caller learns "last page"
         * without another round trip. */
        e = troupe_iter_next(it, &kv);
        more = e == TROUPE_OK;
    }
    if (e == TROUPE_OK || e == TROUPE_ENOENT)
        e = page_build(&pb, more, out);
    troupe_free(pb.data);
    troupe_free(pb.offs);
    troupe_iter_destroy(it);
    return e;
}

void
troupe_page_destroy(troupe_page *p)
{
    troupe_free(p);
}
