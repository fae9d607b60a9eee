/*
 * The catalog's format at open (docs/data-model.md, "The catalog"), and
 * the migration of a database written in format 1, before anything is
 * served.
 *
 * Format 1 had two catalogs: the tables' in `meta` (counter ("seq"): the
 * highest table or index id handed out) and the queues' in a family of
 * their own, `queues` (counter ("seq"): the next queue id; entries
 * ("queue", name)). Format 2 is one: the queue entries move to `meta`
 * with the same keys and values, ("seq") becomes the highest id of every
 * kind, and the marker ("catalog") = 2 says so.
 *
 * The migration is one synced batch on meta (the copied entries, the
 * counter and the marker: one WAL record, so a crash leaves format 1 or
 * format 2, never a mix), then the drop of `queues`. A crash between the
 * two leaves format 2 with `queues` still there: its content is in meta
 * already, so the next open drops it. Queue entries are copied verbatim:
 * the queues' loader checks them later, with the same errors as before.
 * Nothing is written when the database is refused (a newer format, a
 * malformed marker or counter, queue entries already in meta).
 *
 * A read-only catalog writes nothing: a format-1 database with a
 * `queues` family is refused (ESTATE: reading it would hide its queues,
 * and only a read-write open can move them; ENOTSUP stays the answer for
 * a format no open of this code can read); one without it, and a
 * database without meta, read as they are (the migration would add the
 * marker and nothing else); a leftover `queues` next to format 2 stays.
 */
#include "catalog_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"
#include "troupe/pack.h"

#define OLD_QUEUES "queues"

/* The uint under key (k1) of family cf: ENOENT when absent, ECORRUPT when
 * not one uint. */
static troupe_err
get_uint(troupe_catalog *c, troupe_cf *cf, const char *k1, uint64_t *out)
{
    troupe_key_writer w;
    const uint8_t *k;
    size_t kl;
    void *v = NULL;
    size_t n = 0;
    troupe_err e = troupe__catalog_entry_key(&w, k1, NULL);
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_db_get(c->db, cf, NULL, k, kl, &v, &n);
    if (e == TROUPE_OK)
        e = troupe__catalog_uint_parse(v, n, out);
    troupe_free(v);
    troupe_key_writer_fini(&w);
    return e;
}

/* Calls fn(arg, key, value) for every ("queue", *) entry of cf; counts
 * them in *n. */
static troupe_err
each_queue(troupe_catalog *c, troupe_cf *cf,
           troupe_err (*fn)(void *arg, const troupe_kv *kv), void *arg,
           size_t *n)
{
    troupe_key_writer w;
    troupe_range rg;
    troupe_iter *it = NULL;
    troupe_err e = troupe__catalog_entry_key(&w, "queue", NULL);
    if (e == TROUPE_OK)
        e = troupe_key_writer_range(&w, &rg);
    if (e == TROUPE_OK)
        e = troupe_iter_create(c->db, cf, NULL, &rg, NULL, 0, false, &it);
    troupe_kv kv;
    *n = 0;
    while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        (*n)++;
        if (fn != NULL)
            e = fn(arg, &kv);
    }
    troupe_iter_destroy(it);
    troupe_key_writer_fini(&w);
    return e == TROUPE_ENOENT ? TROUPE_OK : e;
}

static troupe_err
copy_entry(void *arg, const troupe_kv *kv)
{
    troupe__meta_batch *m = arg;
    return troupe_batch_put(m->b, m->c->meta, kv->key, kv->key_len, kv->val,
                            kv->val_len);
}

/* Format 1 to 2: *seq gets the new counter. */
static troupe_err
migrate_v1(troupe_catalog *c, uint64_t seq_t, uint64_t *seq)
{
    troupe_cf *qcf = NULL;
    troupe_err e = troupe_db_cf(c->db, OLD_QUEUES, &qcf);
    if (e == TROUPE_ENOENT) {
        qcf = NULL;
        e = TROUPE_OK;
    } else if (e != TROUPE_OK) {
        return e;
    }
    uint64_t next_q = 1;
    if (qcf != NULL) {
        e = get_uint(c, qcf, "seq", &next_q);
        if (e == TROUPE_ENOENT) {
            next_q = 1;
            e = TROUPE_OK;
        }
    }
    size_t n = 0;
    if (e == TROUPE_OK && c->meta != NULL)
        e = each_queue(c, c->meta, NULL, NULL, &n);
    if (e == TROUPE_OK && n > 0)
        e = TROUPE_ECORRUPT; /* two sources of queue entries: refuse both */
    if (e != TROUPE_OK)
        return e;
    c->seq = seq_t > next_q - (next_q > 0) ? seq_t : next_q - (next_q > 0);
    if (c->read_only) {
        /* Without `queues` the migration would write the marker and the
         * same counter, nothing else: meta reads as format 2 already. */
        if (qcf != NULL)
            return troupe__errf(TROUPE_ESTATE,
                                "the catalog is in format 1 with queues to "
                                "move: open it read-write once to migrate");
        *seq = c->seq;
        return TROUPE_OK;
    }
    troupe__meta_batch m;
    troupe__meta_begin(&m, c);
    if (m.err == TROUPE_OK && qcf != NULL)
        m.err = each_queue(c, qcf, copy_entry, &m, &n);
    troupe__meta_put_seq(&m);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_uint(&p, TROUPE__CATALOG_FORMAT);
    size_t plen;
    const void *pd = troupe_pack_data(&p, &plen);
    if (m.err == TROUPE_OK)
        m.err = p.err;
    troupe__meta_put_entry(&m, "catalog", NULL, pd, plen);
    troupe_pack_fini(&p);
    e = troupe__meta_commit(&m, TROUPE_SYNC_ON);
    if (e == TROUPE_OK && qcf != NULL)
        e = troupe_db_cf_drop(c->db, OLD_QUEUES);
    *seq = c->seq;
    return e;
}

troupe_err
troupe__catalog_migrate(troupe_catalog *c, uint64_t *seq)
{
    uint64_t fmt = 1, seq_t = 0;
    if (c->meta == NULL) /* read-only, no meta: format 1, nothing in it */
        return migrate_v1(c, 0, seq);
    troupe_err e = get_uint(c, c->meta, "catalog", &fmt);
    if (e == TROUPE_ENOENT) {
        fmt = 1;
        e = TROUPE_OK;
    } else if (e == TROUPE_OK && fmt != TROUPE__CATALOG_FORMAT) {
        /* 0 and 1 were never written: a marker holds 2 or more */
        e = fmt > TROUPE__CATALOG_FORMAT ? TROUPE_ENOTSUP : TROUPE_ECORRUPT;
    }
    if (e == TROUPE_OK) {
        e = get_uint(c, c->meta, "seq", &seq_t);
        if (e == TROUPE_ENOENT) {
            seq_t = 0;
            e = TROUPE_OK;
        }
    }
    if (e != TROUPE_OK)
        return e;
    if (fmt == 1)
        return migrate_v1(c, seq_t, seq);
    *seq = seq_t;
    /* A crash after the migration's batch, before the drop: its content
     * is in meta already. */
    troupe_cf *qcf = NULL;
    e = troupe_db_cf(c->db, OLD_QUEUES, &qcf);
    if (e == TROUPE_OK && c->read_only)
        return TROUPE_OK; /* left for a read-write open */
    if (e == TROUPE_OK)
        return troupe_db_cf_drop(c->db, OLD_QUEUES);
    return e == TROUPE_ENOENT ? TROUPE_OK : e;
}
