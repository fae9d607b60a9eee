/*
 * The one loader (troupe/internal/catalog.h): the entries (kind, name)
 * of meta in key order, each key checked the same way for every kind
 * before its owner parses the value, and each id the owner reports
 * checked against the counter after. What is read is from the disk:
 * anything that is not the format is ECORRUPT.
 */
#include <string.h>

#include "catalog_int.h"
#include "troupe/alloc.h"

/* The name of entry key (kind, name) into buf (NUL-terminated), or
 * ECORRUPT: not exactly two strings, or a name the rule refuses (a NUL
 * inside would cut it short: no create makes one). */
static troupe_err
entry_name(const void *key, size_t klen, const char *kind, char *buf)
{
    troupe_key_reader kr;
    troupe_key_item a, b;
    troupe_key_reader_init(&kr, key, klen);
    size_t kl = strlen(kind);
    bool ok =
        troupe_key_read(&kr, &a) == TROUPE_OK && a.type == TROUPE_KEY_STRING &&
        a.v.s.len == kl && memcmp(a.v.s.ptr, kind, kl) == 0 &&
        troupe_key_read(&kr, &b) == TROUPE_OK && b.type == TROUPE_KEY_STRING &&
        b.v.s.len > 0 && b.v.s.len <= TROUPE_CATALOG_NAME_MAX;
    if (ok) {
        memcpy(buf, b.v.s.ptr, b.v.s.len);
        buf[b.v.s.len] = 0;
        ok = strlen(buf) == b.v.s.len && troupe_catalog_name_valid(buf, NULL) &&
             troupe_key_read(&kr, &a) == TROUPE_ENOENT;
    }
    troupe_key_reader_fini(&kr);
    return ok ? TROUPE_OK : TROUPE_ECORRUPT;
}

troupe_err
troupe__catalog_load(troupe_catalog *c, const char *kind,
                     troupe__catalog_load_fn fn, void *arg)
{
    if (c->meta == NULL)
        return TROUPE_OK; /* read-only, no meta: no entries */
    char *name = troupe_malloc(TROUPE_CATALOG_NAME_MAX + 1);
    if (name == NULL)
        return TROUPE_ENOMEM;
    troupe_key_writer w;
    troupe_range rg;
    troupe_iter *it = NULL;
    troupe_err e = troupe__catalog_entry_key(&w, kind, NULL);
    if (e == TROUPE_OK)
        e = troupe_key_writer_range(&w, &rg);
    if (e == TROUPE_OK)
        e = troupe_iter_create(c->db, c->meta, NULL, &rg, NULL, 0, false, &it);
    uint64_t seq = troupe__catalog_seq(c);
    troupe_kv kv;
    while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        uint64_t id = 0;
        e = entry_name(kv.key, kv.key_len, kind, name);
        if (e == TROUPE_OK)
            e = fn(arg, name, kv.val, kv.val_len, &id);
        if (e == TROUPE_OK && (id == 0 || id > seq))
            e = TROUPE_ECORRUPT;
    }
    troupe_iter_destroy(it);
    troupe_key_writer_fini(&w);
    troupe_free(name);
    return e == TROUPE_ENOENT ? TROUPE_OK : e;
}
