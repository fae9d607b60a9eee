/*
 * The transaction object (struct troupe_txn, txn_int.h): begin, attach,
 * rollback, destroy; its key map (every key it read or wrote, one xkey
 * each, found by open addressing) and its table list (xtab), which the
 * reads, writes, scans and the commit share.
 *
 * Threads. Buffering and the start of commit run on the caller's thread;
 * replies run on scheduler 0; the batch's completion on the pipeline's
 * writer thread. Each step hands over to the next through the runtime's
 * queues, so the transaction's fields are touched by one thread at a time.
 */
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/hash.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/tables.h"
#include "txn_int.h"

static size_t
kh(uint32_t tab, const void *k, size_t n)
{
    uint64_t h = troupe__fnv1a64_from(TROUPE__FNV1A64_BASIS ^ tab, k, n);
    return (size_t)(h ^ (h >> 29));
}

xkey *
troupe__txn_kfind(const troupe_txn *tx, uint32_t tab, const void *key,
                  size_t klen)
{
    if (tx->nslots == 0)
        return NULL;
    for (size_t i = kh(tab, key, klen) & (tx->nslots - 1);;
         i = (i + 1) & (tx->nslots - 1)) {
        uint32_t s = tx->slots[i];
        if (s == 0)
            return NULL;
        xkey *x = tx->keys[s - 1];
        if (x->tab == tab && x->klen == klen && memcmp(x->key, key, klen) == 0)
            return x;
    }
}

static void
kslot_put(troupe_txn *tx, size_t idx)
{
    xkey *x = tx->keys[idx];
    size_t i = kh(x->tab, x->key, x->klen) & (tx->nslots - 1);
    while (tx->slots[i] != 0)
        i = (i + 1) & (tx->nslots - 1);
    tx->slots[i] = (uint32_t)(idx + 1);
}

/* The entry of (tab, key), added (read only) when absent. */
troupe_err
troupe__txn_kget(troupe_txn *tx, uint32_t tab, const void *key, size_t klen,
                 xkey **out)
{
    xkey *x = troupe__txn_kfind(tx, tab, key, klen);
    if (x != NULL) {
        *out = x;
        return TROUPE_OK;
    }
    if (tx->nkeys + tx->nranges >= tx->max_keys)
        return TROUPE_ETOOBIG;
    if (tx->nkeys == tx->capkeys) {
        size_t cap = tx->capkeys ? tx->capkeys * 2 : 16;
        xkey **v = troupe_realloc(tx->keys, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        tx->keys = v;
        tx->capkeys = cap;
    }
    if ((tx->nkeys + 1) * 2 > tx->nslots) {
        size_t ns = tx->nslots ? tx->nslots * 2 : 32;
        uint32_t *sl = troupe_calloc(ns, sizeof(*sl));
        if (sl == NULL)
            return TROUPE_ENOMEM;
        troupe_free(tx->slots);
        tx->slots = sl;
        tx->nslots = ns;
        for (size_t i = 0; i < tx->nkeys; i++)
            kslot_put(tx, i);
    }
    x = troupe_calloc(1, sizeof(*x) + klen);
    if (x == NULL)
        return TROUPE_ENOMEM;
    x->tab = tab;
    x->kind = K_NONE;
    x->klen = klen;
    memcpy(x->key, key, klen);
    tx->keys[tx->nkeys] = x;
    kslot_put(tx, tx->nkeys);
    tx->nkeys++;
    tx->tabs[tab].nkeys++;
    *out = x;
    return TROUPE_OK;
}

/* The index of table `name` in tx->tabs, looked up on first use. */
troupe_err
troupe__txn_tab_of(troupe_txn *tx, const char *name, uint32_t *out)
{
    if (name == NULL)
        return TROUPE_EINVAL;
    for (size_t i = 0; i < tx->ntabs; i++)
        if (strcmp(tx->tabs[i].name, name) == 0) {
            *out = (uint32_t)i;
            return TROUPE_OK;
        }
    xtab tb = {0};
    troupe_err e =
        troupe__tables_lookup_id(tx->t, name, &tb.addr, &tb.cf_t, &tb.id);
    if (e != TROUPE_OK)
        return e;
    if (tx->ntabs == TROUPE_TXN_TABLES_MAX)
        return TROUPE_ETOOBIG;
    if ((tb.name = troupe_strdup(name)) == NULL)
        return TROUPE_ENOMEM;
    tx->tabs[tx->ntabs] = tb;
    *out = (uint32_t)tx->ntabs++;
    return TROUPE_OK;
}

/* ---- begin / destroy --------------------------------------------------- */

troupe_err
troupe_txn_begin(troupe_tables *t, const troupe_txn_opts *o, troupe_txn **out)
{
    if (out != NULL)
        *out = NULL;
    troupe_txn_opts opts = o != NULL ? *o : (troupe_txn_opts){0};
    if (t == NULL || out == NULL)
        return TROUPE_EINVAL;
    if (opts.max_keys > TROUPE_TXN_KEYS_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "txn_opts.max_keys %zu over TROUPE_TXN_KEYS_MAX "
                            "(%zu)",
                            (size_t)opts.max_keys, (size_t)TROUPE_TXN_KEYS_MAX);
    if (opts.max_bytes > TROUPE_TXN_BYTES_MAX)
        return troupe__errf(TROUPE_EINVAL,
                            "txn_opts.max_bytes %zu over TROUPE_TXN_BYTES_MAX "
                            "(%zu)",
                            (size_t)opts.max_bytes,
                            (size_t)TROUPE_TXN_BYTES_MAX);
    troupe_txn *tx = troupe_calloc(1, sizeof(*tx));
    if (tx == NULL)
        return TROUPE_ENOMEM;
    troupe_err e = troupe__tables_txn_env(t, &tx->env);
    if (e != TROUPE_OK) {
        troupe_free(tx);
        return e;
    }
    tx->t = t;
    tx->max_keys = opts.max_keys ? opts.max_keys : TROUPE_TXN_KEYS_MAX;
    tx->max_bytes = opts.max_bytes ? opts.max_bytes : TROUPE_TXN_BYTES_MAX;
    tx->sh = troupe_calloc(1, sizeof(*tx->sh));
    if (tx->sh == NULL) {
        troupe_free(tx);
        return TROUPE_ENOMEM;
    }
    atomic_init(&tx->sh->refs, 1);
    atomic_init(&tx->sh->state, TTXN_OPEN);
    /* The counter first, then the snapshot (see the note at the top). */
    troupe__tables_txn_enter(tx->env.ts, tx->env.vers, &tx->act);
    tx->seq0 = tx->act.seq0;
    e = troupe_snapshot_create(tx->env.db, &tx->sh->snap);
    if (e != TROUPE_OK) {
        troupe__tables_txn_leave(tx->env.ts, &tx->act);
        troupe__ttxn_release(tx->sh);
        troupe_free(tx);
        return e;
    }
    atomic_fetch_add_explicit(&tx->env.ts->txn_created, 1,
                              memory_order_relaxed);
    *out = tx;
    return TROUPE_OK;
}

void
troupe__txn_keys_free(troupe_txn *tx)
{
    for (size_t i = 0; i < tx->nkeys; i++) {
        troupe_free(tx->keys[i]->doc);
        troupe_free(tx->keys[i]);
    }
    troupe_free(tx->keys);
    troupe_free(tx->slots);
    tx->keys = NULL;
    tx->slots = NULL;
    tx->nkeys = tx->capkeys = tx->nslots = 0;
    for (size_t i = 0; i < tx->nranges; i++)
        troupe_free(tx->ranges[i].start); /* one block with end */
    troupe_free(tx->ranges);
    tx->ranges = NULL;
    tx->nranges = 0;
}

/* Tells every participant the outcome, once (the list is emptied). */
void
troupe__txn_parts_done(troupe_txn *tx, troupe_err outcome)
{
    troupe_txn_part *p = tx->parts;
    size_t n = tx->nparts;
    tx->parts = NULL;
    tx->nparts = 0;
    for (size_t i = 0; i < n; i++)
        p[i].done(p[i].arg, outcome);
    troupe_free(p);
}

troupe_err
troupe_txn_attach(troupe_txn *tx, const troupe_txn_part *p)
{
    if (tx == NULL || p == NULL || p->done == NULL)
        return TROUPE_EINVAL;
    if (tx->state != TX_OPEN)
        return TROUPE_ESTATE;
    if (tx->nparts >= TROUPE_TXN_PARTS_MAX)
        return TROUPE_ETOOBIG;
    troupe_txn_part *np =
        troupe_realloc(tx->parts, (tx->nparts + 1) * sizeof(*np));
    if (np == NULL)
        return TROUPE_ENOMEM;
    tx->parts = np;
    tx->parts[tx->nparts++] = *p;
    return TROUPE_OK;
}

void
troupe_txn_destroy(troupe_txn *tx)
{
    if (tx == NULL)
        return;
    if (tx->state == TX_COMMITTING)
        abort(); /* its commit still runs and will call back into tx */
    troupe__txn_parts_done(tx, TROUPE_ECANCELED);
    troupe__txn_keys_free(tx);
    for (size_t i = 0; i < tx->ntabs; i++)
        troupe_free(tx->tabs[i].name);
    for (size_t i = 0; i < tx->commit.nconf; i++)
        troupe_free((void *)tx->commit.conf[i].key);
    troupe_free(tx->commit.conf);
    for (size_t i = 0; i < tx->commit.nrcpt; i++)
        troupe_free((void *)tx->commit.rcpt[i].key);
    troupe_free(tx->commit.rcpt);
    troupe__ttxn_release(tx->sh);
    troupe__tables_txn_leave(tx->env.ts, &tx->act);
    atomic_fetch_add_explicit(&tx->env.ts->txn_closed, 1, memory_order_relaxed);
    troupe_free(tx);
}

troupe_err
troupe_txn_rollback(troupe_txn *tx)
{
    if (tx == NULL)
        return TROUPE_EINVAL;
    if (tx->state != TX_OPEN)
        return TROUPE_ESTATE;
    tx->state = TX_DONE;
    troupe__txn_keys_free(tx);
    tx->bytes = 0;
    troupe__txn_parts_done(tx, TROUPE_ECANCELED);
    return TROUPE_OK;
}

const troupe_snapshot *
troupe__txn_snapshot(const troupe_txn *tx)
{
    return tx->sh->snap;
}
