/*
 * Buffered writes: insert, update, upsert, delete (and the delete-any of
 * delete by owner) into the key map, with the kind rules that the
 * transaction's own view already decides. Nothing reaches a table before
 * the commit.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/tables.h"
#include "txn_int.h"

/* The kind that results from a new write `nk` over the buffered kind `ok`
 * (K_NONE: none), or the error the transaction's own view already proves. */
static troupe_err
combine(uint32_t ok, uint32_t nk, uint32_t *out)
{
    bool ins = nk == TROUPE__PART_INSERT, upd = nk == TROUPE__PART_UPDATE,
         ups = nk == TROUPE__PART_UPSERT;
    if (ok == K_NONE) {
        *out = nk;
        return TROUPE_OK;
    }
    switch (ok) {
    case TROUPE__PART_INSERT: /* present; the stored row must be absent */
        if (ins)
            return TROUPE_EEXIST;
        *out = upd || ups ? TROUPE__PART_INSERT : TROUPE__PART_ABSENT;
        return TROUPE_OK;
    case TROUPE__PART_UPDATE: /* present; the stored row must be present */
        if (ins)
            return TROUPE_EEXIST;
        *out = upd || ups ? TROUPE__PART_UPDATE : TROUPE__PART_DELETE;
        return TROUPE_OK;
    case TROUPE__PART_UPSERT:
        if (ins)
            return TROUPE_EEXIST;
        *out = upd || ups ? TROUPE__PART_UPSERT : TROUPE__PART_DEL_ANY;
        return TROUPE_OK;
    case TROUPE__PART_DELETE: /* absent; the stored row must be present */
        if (!ins && !ups)
            return TROUPE_ENOENT;
        *out = TROUPE__PART_UPDATE;
        return TROUPE_OK;
    case TROUPE__PART_DEL_ANY:
        if (!ins && !ups)
            return TROUPE_ENOENT;
        *out = TROUPE__PART_UPSERT;
        return TROUPE_OK;
    default: /* TROUPE__PART_ABSENT: absent; the stored row must be absent */
        if (!ins && !ups)
            return TROUPE_ENOENT;
        *out = TROUPE__PART_INSERT;
        return TROUPE_OK;
    }
}

static bool
is_map(const void *doc, size_t dlen)
{
    troupe_reader r;
    troupe_reader_init(&r, doc, dlen);
    if (troupe_read_peek(&r) != TROUPE_MP_MAP)
        return false;
    troupe_read_skip(&r);
    return troupe_read_end(&r) == TROUPE_OK;
}

/* Buffers a write of `kind` (call: the public call, for a refusal's
 * detail). */
static troupe_err
buffer(const char *call, troupe_txn *tx, const char *table, uint32_t kind,
       const void *key, size_t klen, const void *doc, size_t dlen,
       const troupe_write_opts *wo)
{
    troupe_write_opts o = wo != NULL ? *wo : (troupe_write_opts){0};
    if (tx == NULL || table == NULL ||
        (kind != TROUPE__PART_DELETE && doc == NULL))
        return TROUPE_EINVAL;
    if (o.expires_at_ms < 0)
        return troupe__errf(TROUPE_EINVAL,
                            "write_opts.expires_at_ms %" PRId64 " is negative",
                            o.expires_at_ms);
    troupe_err e = troupe__table_key_check(key, klen);
    if (e != TROUPE_OK)
        return e;
    if (tx->state != TX_OPEN)
        return TROUPE_ESTATE;
    if ((e = troupe__tables_writable(tx->t, call)) != TROUPE_OK)
        return e;
    if (dlen > TROUPE_VALUE_MAX)
        return troupe__errf(TROUPE_ETOOBIG,
                            "document of %zu bytes over TROUPE_VALUE_MAX (%zu)",
                            dlen, (size_t)TROUPE_VALUE_MAX);
    if (kind != TROUPE__PART_DELETE && !is_map(doc, dlen))
        return TROUPE_EPROTO;
    uint32_t tab;
    if ((e = troupe__txn_tab_of(tx, table, &tab)) != TROUPE_OK)
        return e;
    xkey *x = troupe__txn_kfind(tx, tab, key, klen);
    /* pi_db's versioned write set holds each key once */
    if (tx->mode == MODE_VERSIONED && x != NULL && x->nwrites > 0)
        return TROUPE_EINVAL;
    uint32_t nk;
    if ((e = combine(x != NULL ? x->kind : K_NONE, kind, &nk)) != TROUPE_OK)
        return e;
    size_t old = x != NULL && x->kind != K_NONE ? x->klen + x->dlen : 0;
    size_t nb = klen + (kind == TROUPE__PART_DELETE ? 0 : dlen);
    if (tx->bytes - old + nb > tx->max_bytes)
        return troupe__errf(TROUPE_ETOOBIG,
                            "the transaction's writes would take %zu bytes, "
                            "over its max_bytes (%zu)",
                            tx->bytes - old + nb, (size_t)tx->max_bytes);
    unsigned char *copy = NULL;
    if (kind != TROUPE__PART_DELETE &&
        (copy = troupe_malloc(dlen ? dlen : 1)) == NULL)
        return TROUPE_ENOMEM;
    if (copy != NULL)
        memcpy(copy, doc, dlen);
    if (x == NULL &&
        (e = troupe__txn_kget(tx, tab, key, klen, &x)) != TROUPE_OK) {
        troupe_free(copy);
        return e;
    }
    troupe_free(x->doc);
    x->doc = copy;
    x->dlen = copy != NULL ? dlen : 0;
    x->kind = nk;
    x->expires = o.expires_at_ms;
    x->nostamp = o.no_timestamps;
    if (x->nwrites < 2)
        x->nwrites++;
    tx->bytes = tx->bytes - old + nb;
    return TROUPE_OK;
}

troupe_err
troupe_txn_insert(troupe_txn *tx, const char *table, const void *key,
                  size_t klen, const void *doc, size_t dlen,
                  const troupe_write_opts *wo)
{
    return buffer("troupe_txn_insert", tx, table, TROUPE__PART_INSERT, key,
                  klen, doc, dlen, wo);
}

troupe_err
troupe_txn_update(troupe_txn *tx, const char *table, const void *key,
                  size_t klen, const void *doc, size_t dlen,
                  const troupe_write_opts *wo)
{
    return buffer("troupe_txn_update", tx, table, TROUPE__PART_UPDATE, key,
                  klen, doc, dlen, wo);
}

troupe_err
troupe_txn_upsert(troupe_txn *tx, const char *table, const void *key,
                  size_t klen, const void *doc, size_t dlen,
                  const troupe_write_opts *wo)
{
    return buffer("troupe_txn_upsert", tx, table, TROUPE__PART_UPSERT, key,
                  klen, doc, dlen, wo);
}

troupe_err
troupe_txn_delete(troupe_txn *tx, const char *table, const void *key,
                  size_t klen)
{
    return buffer("troupe_txn_delete", tx, table, TROUPE__PART_DELETE, key,
                  klen, NULL, 0, NULL);
}

troupe_err
troupe__txn_delete_any(troupe_txn *tx, const char *table, uint64_t table_id,
                       const void *key, size_t klen)
{
    uint32_t tab;
    troupe_err e =
        tx != NULL ? troupe__txn_tab_of(tx, table, &tab) : TROUPE_EINVAL;
    if (e == TROUPE_OK && tx->tabs[tab].id != table_id)
        e = troupe__err_named(TROUPE_ENOTABLE, "dropped meanwhile: table",
                              table, strlen(table)); /* name taken again */
    if (e != TROUPE_OK)
        return e;
    /* a delete over nothing buffered is TROUPE__PART_DELETE; made "if present"
     */
    xkey *x = troupe__txn_kfind(tx, tab, key, klen);
    if (x != NULL && x->kind != K_NONE)
        return TROUPE_EINVAL; /* written already: not this helper's case */
    e = buffer("troupe_txn_delete", tx, table, TROUPE__PART_DELETE, key, klen,
               NULL, 0, NULL);
    if (e == TROUPE_OK)
        troupe__txn_kfind(tx, tab, key, klen)->kind = TROUPE__PART_DEL_ANY;
    return e;
}
