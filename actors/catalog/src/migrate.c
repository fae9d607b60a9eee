/*
 * The catalog's format at open: the counter ("seq") read into memory.
 */
#include "catalog_int.h"
#include "troupe/alloc.h"

troupe_err
troupe__catalog_migrate(troupe_catalog *c, uint64_t *seq)
{
    troupe_key_writer w;
    void *v = NULL;
    size_t n = 0;
    troupe_err ke = troupe__catalog_entry_key(&w, "seq", NULL);
    troupe_err e = troupe__meta_get(c, &w, ke, &v, &n);
    *seq = 0;
    if (e == TROUPE_OK)
        e = troupe__catalog_uint_parse(v, n, seq);
    else if (e == TROUPE_ENOENT)
        e = TROUPE_OK;
    troupe_free(v);
    return e;
}
