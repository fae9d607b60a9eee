/*
 * Reads and writes of the `meta` family (troupe/internal/catalog.h): the
 * meta batch every catalog change writes through (the counter, entries
 * (kind, name), an owner's other keys), one synced WAL record per
 * commit; the point read; and the key and counter codecs.
 */
#include <string.h>

#include "catalog_int.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"

troupe_err
troupe__catalog_uint_parse(const void *v, size_t len, uint64_t *out)
{
    troupe_reader r;
    troupe_reader_init(&r, v, len);
    troupe_read_uint(&r, out); /* sticky: read_end reports its error */
    return troupe_read_end(&r) == TROUPE_OK ? TROUPE_OK : TROUPE_ECORRUPT;
}

troupe_err
troupe__catalog_entry_key(troupe_key_writer *w, const char *kind,
                          const char *name)
{
    troupe_key_writer_init(w);
    troupe_key_put_string(w, kind, strlen(kind));
    if (name != NULL)
        troupe_key_put_string(w, name, strlen(name));
    return w->err;
}

void
troupe__meta_begin(troupe__meta_batch *m, troupe_catalog *c)
{
    m->c = c;
    m->b = NULL;
    m->err = c->read_only ? TROUPE_EREADONLY : troupe_batch_create(&m->b);
}

void
troupe__meta_put_key(troupe__meta_batch *m, troupe_key_writer *w, troupe_err ke,
                     const void *v, size_t n)
{
    const uint8_t *k;
    size_t kl;
    if (m->err == TROUPE_OK)
        m->err = ke;
    if (m->err == TROUPE_OK)
        m->err = troupe_key_writer_finish(w, &k, &kl);
    if (m->err == TROUPE_OK)
        m->err = v != NULL ? troupe_batch_put(m->b, m->c->meta, k, kl, v, n)
                           : troupe_batch_delete(m->b, m->c->meta, k, kl);
    troupe_key_writer_fini(w);
}

void
troupe__meta_del_key(troupe__meta_batch *m, troupe_key_writer *w, troupe_err ke)
{
    troupe__meta_put_key(m, w, ke, NULL, 0);
}

void
troupe__meta_put_seq(troupe__meta_batch *m)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_uint(&p, troupe__catalog_seq(m->c));
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    if (m->err == TROUPE_OK)
        m->err = p.err;
    troupe_key_writer w;
    troupe_err ke = troupe__catalog_entry_key(&w, "seq", NULL);
    troupe__meta_put_key(m, &w, ke, d, n);
    troupe_pack_fini(&p);
}

void
troupe__meta_put_entry(troupe__meta_batch *m, const char *kind,
                       const char *name, const void *v, size_t n)
{
    troupe_key_writer w;
    troupe_err ke = troupe__catalog_entry_key(&w, kind, name);
    troupe__meta_put_key(m, &w, ke, v, n);
}

void
troupe__meta_del_entry(troupe__meta_batch *m, const char *kind,
                       const char *name)
{
    troupe__meta_put_entry(m, kind, name, NULL, 0);
}

troupe_err
troupe__meta_commit(troupe__meta_batch *m, troupe_sync sync)
{
    troupe_err e = m->err;
    if (e == TROUPE_OK)
        e = troupe_db_write(m->c->db, m->b, sync);
    troupe_batch_destroy(m->b);
    m->b = NULL;
    return e;
}

troupe_err
troupe__meta_get(troupe_catalog *c, troupe_key_writer *w, troupe_err ke,
                 void **v, size_t *vlen)
{
    const uint8_t *k;
    size_t klen;
    troupe_err e = ke;
    if (e == TROUPE_OK && c->meta == NULL)
        e = TROUPE_ENOENT; /* read-only, no meta: nothing is there */
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(w, &k, &klen);
    if (e == TROUPE_OK)
        e = troupe_db_get(c->db, c->meta, NULL, k, klen, v, vlen);
    troupe_key_writer_fini(w);
    return e;
}
