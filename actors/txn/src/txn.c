/*
 * Transactions (txn_root): snapshot reads, buffered writes and a two-phase
 * commit over the table actors involved (docs/data-model.md,
 * "Transactions").
 *
 * Versions. The catalog holds one counter (never repeating, also across
 * opens: catalog.c); every committed write of a key (ordinary or
 * transactional) publishes the next value as that key's version in its
 * table actor, after the write is visible. A transaction takes its one
 * value on the pipeline's writer thread once its batch is written, and
 * every table it wrote publishes that value. begin reads the
 * counter (seq0) and only then takes the snapshot, so a write whose
 * version is <= seq0 is in the snapshot, and one that is not may have a
 * version > seq0 or still hold its key's lock: both are conflicts at
 * prepare. So "unchanged since the snapshot" is decided by the table
 * actors alone, on their own threads, with no global lock.
 *
 * Commit. The tables prepare one after another (sorted by name), because
 * each appends its rows, index entries and manifests to the one shared
 * batch, which belongs to one thread at a time. A table that reports
 * conflicts does not stop the round: the remaining tables are asked to
 * validate only (check_only), so the caller gets the full conflict set.
 * Any other error stops it. Then exactly one of two things happens,
 * decided by one compare-and-swap on the shared state: the transaction
 * submits the batch (SUBMITTED), or it (or a table whose reservation
 * deadline passed first) abandons it (ABORTED). Either way every table
 * that was sent a prepare gets a finish (publish or not), and the caller's
 * callback fires once every finish was answered, so a caller that begins
 * the next transaction right away does not trip over its own reservations.
 * The alternative, a transaction actor holding this state, would cost a
 * spawn per transaction and buy nothing here: every step is already a
 * message with a deadline, and the reservations expire by themselves.
 *
 * Scans add their whole range to the read set; the tables validate and
 * reserve ranges like keys (no phantoms). The versioned API is the same
 * commit with an external read set: each key carries the version the
 * client read, which the table compares with the key's current version
 * instead of with seq0; the finish replies carry the versions published,
 * which become the receipts.
 *
 * Threads. Buffering and the start of commit run on the caller's thread;
 * replies run on scheduler 0; the batch's completion on the pipeline's
 * writer thread. Each step hands over to the next through the runtime's
 * queues, so the transaction's fields are touched by one thread at a time.
 */
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "troupe/alloc.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/hash.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/post.h"
#include "troupe/internal/tables.h"
#include "troupe/internal/waiter.h"
#include "troupe/pack.h"
#include "troupe/storage.h"
#include "troupe/txn.h"
#include "txn_int.h"

/* A prepare's conflict bits are the kinds this API reports. */
_Static_assert((int)TROUPE__PART_STALE == (int)TROUPE_CONFLICT_STALE &&
                   (int)TROUPE__PART_RESERVED == (int)TROUPE_CONFLICT_RESERVED,
               "conflict kinds");

enum { TX_OPEN = 0, TX_COMMITTING, TX_DONE };
/* Which protocol the transaction chose with its first read (writes choose
 * none): the two are never mixed. */
enum { MODE_NONE = 0, MODE_ORDINARY, MODE_VERSIONED };

/* The kind of a key the transaction only read. */
#define K_NONE UINT32_MAX

typedef struct xtab {
    char *name;
    troupe_addr addr;
    troupe_cf *cf_t;
    uint64_t id; /* the table's catalog id: its scan cursors name it */
    size_t nkeys;
    size_t nrg;       /* scanned ranges */
    bool sent;        /* a prepare went out: it gets a finish */
    uint64_t pub_ver; /* the version its finish published */
} xtab;

/* A scanned range [start, end) of table `tab`; NULL: unbounded. */
typedef struct xrange {
    uint32_t tab;
    unsigned char *start;
    size_t slen;
    unsigned char *end;
    size_t elen;
} xrange;

typedef struct xkey {
    uint32_t tab;
    uint32_t kind; /* K_NONE: read only; TROUPE__PART_INSERT.. or
                      TROUPE__PART_DEL_ANY/ABSENT */
    int64_t expires;
    uint64_t ver;     /* versioned read: the version the caller read; 0: none */
    uint32_t nwrites; /* buffered writes of the key (counted up to 2) */
    bool nostamp;     /* the last write's troupe_write_opts.no_timestamps */
    unsigned char *doc;
    size_t dlen;
    size_t klen;
    unsigned char key[];
} xkey;

struct troupe_txn {
    troupe_tables *t;
    ttxn_env env;
    ttxn_shared *sh;
    uint64_t seq0;
    ttxn_active act; /* in env.ts's running list from begin to destroy */
    bool vprepped;   /* a versioned commit passed its prepare phase */
    size_t max_keys;
    size_t max_bytes;
    size_t bytes;
    int state;
    int mode;
    troupe_txn_commit_version_cb vcb;
    troupe_txn_receipt *rcpt;
    size_t nrcpt;
    xtab tabs[TROUPE_TXN_TABLES_MAX];
    size_t ntabs;
    xkey **keys;
    size_t nkeys;
    size_t capkeys;
    uint32_t *slots; /* open addressing: index + 1 into keys, 0 empty */
    size_t nslots;
    xrange *ranges;
    size_t nranges;
    /* commit */
    troupe_sync sync;
    troupe_txn_commit_cb cb;
    void *arg;
    size_t order[TROUPE_TXN_TABLES_MAX];
    size_t norder;
    size_t cur;
    bool check_only;
    bool writes;
    uint64_t pub_ver; /* the version its writes get, taken once written */
    troupe_err err;
    troupe_err result;
    _Atomic size_t pending;
    troupe_txn_conflict *conf;
    size_t nconf;
    size_t capconf;
    troupe_txn_part *parts; /* troupe_txn_attach; done fires once each */
    size_t nparts;
};

/* ---- the key map ------------------------------------------------------- */

static size_t
kh(uint32_t tab, const void *k, size_t n)
{
    uint64_t h = troupe__fnv1a64_from(TROUPE__FNV1A64_BASIS ^ tab, k, n);
    return (size_t)(h ^ (h >> 29));
}

static xkey *
kfind(const troupe_txn *tx, uint32_t tab, const void *key, size_t klen)
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
static troupe_err
kget(troupe_txn *tx, uint32_t tab, const void *key, size_t klen, xkey **out)
{
    xkey *x = kfind(tx, tab, key, klen);
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
static troupe_err
tab_of(troupe_txn *tx, const char *name, uint32_t *out)
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
    if (t == NULL || out == NULL || opts.max_keys > TROUPE_TXN_KEYS_MAX ||
        opts.max_bytes > TROUPE_TXN_BYTES_MAX)
        return TROUPE_EINVAL;
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

static void
keys_free(troupe_txn *tx)
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
static void
parts_done(troupe_txn *tx, troupe_err outcome)
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
    parts_done(tx, TROUPE_ECANCELED);
    keys_free(tx);
    for (size_t i = 0; i < tx->ntabs; i++)
        troupe_free(tx->tabs[i].name);
    for (size_t i = 0; i < tx->nconf; i++)
        troupe_free((void *)tx->conf[i].key);
    troupe_free(tx->conf);
    for (size_t i = 0; i < tx->nrcpt; i++)
        troupe_free((void *)tx->rcpt[i].key);
    troupe_free(tx->rcpt);
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
    keys_free(tx);
    tx->bytes = 0;
    parts_done(tx, TROUPE_ECANCELED);
    return TROUPE_OK;
}

/* ---- buffered writes --------------------------------------------------- */

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

static troupe_err
buffer(troupe_txn *tx, const char *table, uint32_t kind, const void *key,
       size_t klen, const void *doc, size_t dlen, const troupe_write_opts *wo)
{
    troupe_write_opts o = wo != NULL ? *wo : (troupe_write_opts){0};
    if (tx == NULL || table == NULL ||
        (kind != TROUPE__PART_DELETE && doc == NULL) || o.expires_at_ms < 0)
        return TROUPE_EINVAL;
    troupe_err e = troupe__table_key_check(key, klen);
    if (e != TROUPE_OK)
        return e;
    if (tx->state != TX_OPEN)
        return TROUPE_ESTATE;
    if (dlen > TROUPE_VALUE_MAX)
        return TROUPE_ETOOBIG;
    if (kind != TROUPE__PART_DELETE && !is_map(doc, dlen))
        return TROUPE_EPROTO;
    uint32_t tab;
    if ((e = tab_of(tx, table, &tab)) != TROUPE_OK)
        return e;
    xkey *x = kfind(tx, tab, key, klen);
    /* pi_db's versioned write set holds each key once */
    if (tx->mode == MODE_VERSIONED && x != NULL && x->nwrites > 0)
        return TROUPE_EINVAL;
    uint32_t nk;
    if ((e = combine(x != NULL ? x->kind : K_NONE, kind, &nk)) != TROUPE_OK)
        return e;
    size_t old = x != NULL && x->kind != K_NONE ? x->klen + x->dlen : 0;
    size_t nb = klen + (kind == TROUPE__PART_DELETE ? 0 : dlen);
    if (tx->bytes - old + nb > tx->max_bytes)
        return TROUPE_ETOOBIG;
    unsigned char *copy = NULL;
    if (kind != TROUPE__PART_DELETE &&
        (copy = troupe_malloc(dlen ? dlen : 1)) == NULL)
        return TROUPE_ENOMEM;
    if (copy != NULL)
        memcpy(copy, doc, dlen);
    if (x == NULL && (e = kget(tx, tab, key, klen, &x)) != TROUPE_OK) {
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
    return buffer(tx, table, TROUPE__PART_INSERT, key, klen, doc, dlen, wo);
}

troupe_err
troupe_txn_update(troupe_txn *tx, const char *table, const void *key,
                  size_t klen, const void *doc, size_t dlen,
                  const troupe_write_opts *wo)
{
    return buffer(tx, table, TROUPE__PART_UPDATE, key, klen, doc, dlen, wo);
}

troupe_err
troupe_txn_upsert(troupe_txn *tx, const char *table, const void *key,
                  size_t klen, const void *doc, size_t dlen,
                  const troupe_write_opts *wo)
{
    return buffer(tx, table, TROUPE__PART_UPSERT, key, klen, doc, dlen, wo);
}

troupe_err
troupe_txn_delete(troupe_txn *tx, const char *table, const void *key,
                  size_t klen)
{
    return buffer(tx, table, TROUPE__PART_DELETE, key, klen, NULL, 0, NULL);
}

const troupe_snapshot *
troupe__txn_snapshot(const troupe_txn *tx)
{
    return tx->sh->snap;
}

troupe_err
troupe__txn_delete_any(troupe_txn *tx, const char *table, uint64_t table_id,
                       const void *key, size_t klen)
{
    uint32_t tab;
    troupe_err e = tx != NULL ? tab_of(tx, table, &tab) : TROUPE_EINVAL;
    if (e == TROUPE_OK && tx->tabs[tab].id != table_id)
        e = TROUPE_ENOENT; /* dropped, and the name taken by another */
    if (e != TROUPE_OK)
        return e;
    /* a delete over nothing buffered is TROUPE__PART_DELETE; made "if present"
     */
    xkey *x = kfind(tx, tab, key, klen);
    if (x != NULL && x->kind != K_NONE)
        return TROUPE_EINVAL; /* written already: not this helper's case */
    e = buffer(tx, table, TROUPE__PART_DELETE, key, klen, NULL, 0, NULL);
    if (e == TROUPE_OK)
        kfind(tx, tab, key, klen)->kind = TROUPE__PART_DEL_ANY;
    return e;
}

/* ---- reads ------------------------------------------------------------- */

enum { SRC_SNAP = 0, SRC_BUF, SRC_ABSENT };

typedef struct ritem {
    int src;
    int64_t expires;
    const unsigned char *key;
    size_t klen;
    const unsigned char *doc;
    size_t dlen;
} ritem;

typedef struct rjob {
    troupe_db *db;
    troupe_cf *cf_t;
    ttxn_shared *sh; /* one reference: the snapshot */
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    troupe_table_cb cb;
    void *arg;
    bool single;
    troupe_err err;
    troupe_body *body;
    size_t n;
    ritem items[];
} rjob;

/* The reply body [[rows...], cursor | nil, more] from rows packed one by
 * one into `items` (row i starts at off[i]). */
static troupe_err
rows_body(troupe_packer *items, const size_t *off, size_t n, const void *cur,
          size_t clen, bool more, troupe_body **out)
{
    if (items->err != TROUPE_OK)
        return items->err;
    size_t len = 0;
    const unsigned char *d = troupe_pack_data(items, &len);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_array(&p, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        troupe_pack_raw(&p, d + off[i],
                        (i + 1 < n ? off[i + 1] : len) - off[i]);
    if (cur != NULL)
        troupe_pack_bin(&p, cur, clen);
    else
        troupe_pack_nil(&p);
    troupe_pack_bool(&p, more);
    return troupe_pack_take_body(&p, out);
}

static void
read_work(void *arg)
{
    rjob *j = arg;
    int64_t now = j->clock(j->clock_ctx);
    troupe_packer rows;
    troupe_pack_init(&rows);
    size_t cnt = 0;
    size_t *off = troupe_calloc(j->n ? j->n : 1, sizeof(*off));
    troupe_err e = off != NULL ? TROUPE_OK : TROUPE_ENOMEM;
    for (size_t i = 0; e == TROUPE_OK && i < j->n; i++) {
        ritem *it = &j->items[i];
        if (it->src == SRC_ABSENT)
            continue;
        if (it->src == SRC_BUF) {
            if (troupe__row_live(it->expires, now)) {
                troupe_pack_data(&rows, &off[cnt++]);
                troupe__table_pack_row(&rows, it->key, it->klen, it->expires,
                                       it->doc, it->dlen);
            }
            continue;
        }
        void *val = NULL;
        size_t vlen = 0;
        e = troupe_db_get(j->db, j->cf_t, j->sh->snap, it->key, it->klen, &val,
                          &vlen);
        if (e == TROUPE_ENOENT) {
            e = TROUPE_OK;
            continue;
        }
        int64_t exp = 0;
        const void *doc = NULL;
        size_t dlen = 0;
        if (e == TROUPE_OK)
            e = troupe__envelope_parse(val, vlen, &exp, &doc, &dlen);
        if (e == TROUPE_OK && troupe__row_live(exp, now)) {
            troupe_pack_data(&rows, &off[cnt++]);
            troupe__table_pack_row(&rows, it->key, it->klen, exp, doc, dlen);
        }
        troupe_free(val);
    }
    if (e == TROUPE_OK && j->single && cnt == 0)
        e = TROUPE_ENOENT;
    if (e == TROUPE_OK)
        e = rows_body(&rows, off, cnt, NULL, 0, false, &j->body);
    troupe_pack_fini(&rows);
    troupe_free(off);
    j->err = e;
}

static void
read_done(void *arg, troupe_runtime *rt)
{
    rjob *j = arg;
    troupe_rows *rows = NULL;
    troupe_err e = j->err;
    if (e == TROUPE_OK)
        e = troupe__rows_from_body(j->body, &rows);
    troupe_body_release(j->body);
    troupe__ttxn_release(j->sh);
    troupe_table_cb cb = j->cb;
    void *cb_arg = j->arg;
    troupe_free(j);
    cb(e, rows, cb_arg);
}

static troupe_err
read_start(troupe_txn *tx, const char *table, const void *const *keys,
           const size_t *klens, size_t n, bool single, troupe_table_cb cb,
           void *arg)
{
    if (tx == NULL || table == NULL || cb == NULL ||
        (n > 0 && (keys == NULL || klens == NULL)) || (single && n != 1) ||
        n > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EINVAL;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        troupe_err e = troupe__table_key_check(keys[i], klens[i]);
        if (e != TROUPE_OK)
            return e;
    }
    if (tx->state != TX_OPEN || tx->mode == MODE_VERSIONED)
        return TROUPE_ESTATE;
    uint32_t tab;
    troupe_err e = tab_of(tx, table, &tab);
    if (e != TROUPE_OK)
        return e;
    tx->mode = MODE_ORDINARY;
    /* Every key joins the read set first; a limit reached leaves the
     * keys added so far in it (reading more can only add conflicts). */
    for (size_t i = 0; i < n; i++) {
        xkey *x;
        if ((e = kget(tx, tab, keys[i], klens[i], &x)) != TROUPE_OK)
            return e;
        bytes += klens[i] + (x->kind != K_NONE ? x->dlen : 0);
    }
    rjob *j = troupe_calloc(1, sizeof(*j) + n * sizeof(ritem) + bytes);
    if (j == NULL)
        return TROUPE_ENOMEM;
    unsigned char *p = (unsigned char *)&j->items[n];
    for (size_t i = 0; i < n; i++) {
        xkey *x = kfind(tx, tab, keys[i], klens[i]);
        ritem *it = &j->items[i];
        memcpy(p, keys[i], klens[i]);
        it->key = p;
        it->klen = klens[i];
        p += klens[i];
        switch (x->kind) {
        case K_NONE:
            it->src = SRC_SNAP;
            break;
        case TROUPE__PART_INSERT:
        case TROUPE__PART_UPDATE:
        case TROUPE__PART_UPSERT:
            it->src = SRC_BUF;
            it->expires = x->expires;
            memcpy(p, x->doc, x->dlen);
            it->doc = p;
            it->dlen = x->dlen;
            p += x->dlen;
            break;
        default:
            it->src = SRC_ABSENT;
        }
    }
    j->n = n;
    j->single = single;
    j->db = tx->env.db;
    j->cf_t = tx->tabs[tab].cf_t;
    j->sh = troupe__ttxn_retain(tx->sh);
    j->clock = tx->env.clock;
    j->clock_ctx = tx->env.clock_ctx;
    j->cb = cb;
    j->arg = arg;
    e = troupe_runtime_work(tx->env.rt, read_work, read_done, j);
    if (e != TROUPE_OK) {
        troupe__ttxn_release(j->sh);
        troupe_free(j);
    }
    return e;
}

troupe_err
troupe_txn_get(troupe_txn *tx, const char *table, const void *key, size_t klen,
               troupe_table_cb cb, void *arg)
{
    return read_start(tx, table, &key, &klen, 1, true, cb, arg);
}

troupe_err
troupe_txn_get_many(troupe_txn *tx, const char *table, const void *const *keys,
                    const size_t *klens, size_t n, troupe_table_cb cb,
                    void *arg)
{
    return read_start(tx, table, keys, klens, n, false, cb, arg);
}

/* ---- scans ------------------------------------------------------------- */

/*
 * A scan merges the snapshot's rows of the range with the transaction's
 * buffered writes in it (a buffered document replaces or adds a row, a
 * buffered delete hides one), in key order, with the table scan's exact
 * cursor rules. The whole requested range [start, end) joins the read set
 * as a range, whatever the page covered: at commit, a key of it written
 * since the snapshot, or held by a write, is a conflict, and until the
 * commit is done no other write may enter it (no phantoms).
 */

typedef struct bitem {
    bool present;
    int64_t expires;
    const unsigned char *key;
    size_t klen;
    const unsigned char *doc;
    size_t dlen;
} bitem;

typedef struct sjob {
    troupe_db *db;
    troupe_cf *cf_t;
    ttxn_shared *sh;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    troupe_table_cb cb;
    void *arg;
    uint64_t table_id;
    const unsigned char *start, *end, *after;
    size_t slen, elen, alen;
    size_t limit;
    bool reverse;
    troupe_err err;
    troupe_body *body;
    size_t nb;
    bitem *b; /* buffered writes in the range past the cursor, in order */
} sjob;

static void
scan_work(void *arg)
{
    sjob *j = arg;
    int64_t now = j->clock(j->clock_ctx);
    troupe_range rg;
    troupe_range_init_bounds(&rg, j->start, j->slen, j->end, j->elen);
    troupe_iter *it = NULL;
    troupe_err e = troupe_iter_create(j->db, j->cf_t, j->sh->snap, &rg,
                                      j->after, j->alen, j->reverse, &it);
    troupe_packer rows;
    troupe_pack_init(&rows);
    size_t *off = troupe_calloc(j->limit, sizeof(*off));
    if (e == TROUPE_OK && off == NULL)
        e = TROUPE_ENOMEM;
    unsigned char *cur = NULL;
    size_t clen = 0, n = 0, bi = 0;
    bool more = false, have = false, done = false;
    troupe_kv kv = {0};
    while (e == TROUPE_OK) {
        if (!have && !done) {
            troupe_err ie = troupe_iter_next(it, &kv);
            if (ie == TROUPE_ENOENT)
                done = true;
            else if (ie != TROUPE_OK) {
                e = ie;
                break;
            } else
                have = true;
        }
        if (!have && bi == j->nb)
            break;
        /* the next candidate: the snapshot's row or the buffered write */
        bool from_buf = !have;
        if (have && bi < j->nb) {
            int c =
                troupe_key_cmp(kv.key, kv.key_len, j->b[bi].key, j->b[bi].klen);
            if (j->reverse)
                c = -c;
            if (c >= 0)
                from_buf = true;
            if (c == 0)
                have = false; /* the buffered write replaces the row */
        }
        const void *key, *doc = NULL;
        size_t klen, dlen = 0;
        int64_t exp = 0;
        troupe_err pe = TROUPE_OK;
        bool present;
        if (from_buf) {
            const bitem *b = &j->b[bi++];
            key = b->key;
            klen = b->klen;
            present = b->present && troupe__row_live(b->expires, now);
            exp = b->expires;
            doc = b->doc;
            dlen = b->dlen;
        } else {
            key = kv.key;
            klen = kv.key_len;
            pe = troupe__envelope_parse(kv.val, kv.val_len, &exp, &doc, &dlen);
            present = pe == TROUPE_OK && troupe__row_live(exp, now);
            have = false;
        }
        if (n == j->limit) {
            if (pe != TROUPE_OK || present) { /* the next page has a say */
                more = true;
                break;
            }
            continue;
        }
        if (pe != TROUPE_OK) {
            e = pe;
            break;
        }
        if (!present)
            continue;
        troupe_pack_data(&rows, &off[n++]);
        troupe__table_pack_row(&rows, key, klen, exp, doc, dlen);
        unsigned char *c = troupe_realloc(cur, klen);
        if (c == NULL) {
            e = TROUPE_ENOMEM;
            break;
        }
        cur = c;
        memcpy(cur, key, klen);
        clen = klen;
    }
    if (e == TROUPE_OK)
        e = rows_body(&rows, off, n, n > 0 ? cur : NULL, clen, more, &j->body);
    troupe_pack_fini(&rows);
    troupe_iter_destroy(it);
    troupe_free(cur);
    troupe_free(off);
    j->err = e;
}

static void
scan_done(void *arg, troupe_runtime *rt)
{
    (void)rt;
    sjob *j = arg;
    troupe_rows *rows = NULL;
    troupe_err e = j->err;
    if (e == TROUPE_OK)
        e = troupe__rows_from_body(j->body, &rows);
    if (e == TROUPE_OK &&
        (e = troupe__rows_cursor_wrap(rows, j->table_id)) != TROUPE_OK) {
        troupe_rows_destroy(rows);
        rows = NULL;
    }
    troupe_body_release(j->body);
    troupe__ttxn_release(j->sh);
    troupe_table_cb cb = j->cb;
    void *cb_arg = j->arg;
    troupe_free(j);
    cb(e, rows, cb_arg);
}

/* Adds [start, end) of tab to the read set (once). */
static troupe_err
range_add(troupe_txn *tx, uint32_t tab, const troupe_scan_opts *so)
{
    for (size_t i = 0; i < tx->nranges; i++) {
        const xrange *r = &tx->ranges[i];
        if (r->tab == tab && (r->start == NULL) == (so->start == NULL) &&
            (r->end == NULL) == (so->end == NULL) &&
            (so->start == NULL || troupe_key_cmp(r->start, r->slen, so->start,
                                                 so->start_len) == 0) &&
            (so->end == NULL ||
             troupe_key_cmp(r->end, r->elen, so->end, so->end_len) == 0))
            return TROUPE_OK;
    }
    if (tx->nkeys + tx->nranges >= tx->max_keys)
        return TROUPE_ETOOBIG;
    xrange *v = troupe_realloc(tx->ranges, (tx->nranges + 1) * sizeof(*v));
    if (v == NULL)
        return TROUPE_ENOMEM;
    tx->ranges = v;
    unsigned char *d = troupe_malloc(so->start_len + so->end_len + 1);
    if (d == NULL)
        return TROUPE_ENOMEM;
    xrange *r = &v[tx->nranges];
    *r = (xrange){.tab = tab};
    r->start = d; /* the block's owner, also when start is unbounded */
    if (so->start != NULL) {
        memcpy(d, so->start, so->start_len);
        r->slen = so->start_len;
    }
    if (so->end != NULL) {
        r->end = d + so->start_len;
        memcpy(r->end, so->end, so->end_len);
        r->elen = so->end_len;
    }
    tx->nranges++;
    tx->tabs[tab].nrg++;
    return TROUPE_OK;
}

static int
bitem_cmp(const void *a, const void *b)
{
    const xkey *x = *(const xkey *const *)a, *y = *(const xkey *const *)b;
    return troupe_key_cmp(x->key, x->klen, y->key, y->klen);
}

troupe_err
troupe_txn_scan(troupe_txn *tx, const char *table, const troupe_scan_opts *sc,
                troupe_table_cb cb, void *arg)
{
    if (tx == NULL || table == NULL || cb == NULL)
        return TROUPE_EINVAL;
    troupe_err ce = troupe__scan_opts_check(sc);
    if (ce != TROUPE_OK)
        return ce;
    if (tx->state != TX_OPEN || tx->mode == MODE_VERSIONED)
        return TROUPE_ESTATE;
    uint32_t tab;
    troupe_scan_opts raw; /* the cursor's key: ERANGE for another table's */
    troupe_err e = tab_of(tx, table, &tab);
    if (e == TROUPE_OK)
        e = troupe__scan_cursor_unwrap(sc, tx->tabs[tab].id, &raw);
    const troupe_scan_opts *so = &raw;
    if (e == TROUPE_OK)
        e = range_add(tx, tab, so);
    if (e != TROUPE_OK)
        return e;
    tx->mode = MODE_ORDINARY;
    /* the buffered writes in range and past the cursor, in scan order */
    size_t nb = 0, bytes = 0;
    xkey **v = troupe_malloc((tx->nkeys ? tx->nkeys : 1) * sizeof(*v));
    if (v == NULL)
        return TROUPE_ENOMEM;
    for (size_t i = 0; i < tx->nkeys; i++) {
        xkey *x = tx->keys[i];
        if (x->tab != tab || x->kind == K_NONE)
            continue;
        if (so->start != NULL &&
            troupe_key_cmp(x->key, x->klen, so->start, so->start_len) < 0)
            continue;
        if (so->end != NULL &&
            troupe_key_cmp(x->key, x->klen, so->end, so->end_len) >= 0)
            continue;
        if (so->after != NULL) {
            int c = troupe_key_cmp(x->key, x->klen, so->after, so->after_len);
            if (so->reverse ? c >= 0 : c <= 0)
                continue;
        }
        v[nb++] = x;
        bytes += x->klen + x->dlen;
    }
    if (nb > 1)
        qsort(v, nb, sizeof(*v), bitem_cmp);
    if (so->reverse)
        for (size_t i = 0; i < nb / 2; i++) {
            xkey *t = v[i];
            v[i] = v[nb - 1 - i];
            v[nb - 1 - i] = t;
        }
    size_t rb = so->start_len + so->end_len + so->after_len;
    sjob *j =
        troupe_calloc(1, sizeof(*j) + nb * sizeof(bitem) + bytes + rb + 1);
    if (j == NULL) {
        troupe_free(v);
        return TROUPE_ENOMEM;
    }
    j->b = (bitem *)(j + 1);
    unsigned char *d = (unsigned char *)&j->b[nb];
    for (size_t i = 0; i < nb; i++) {
        bitem *b = &j->b[i];
        b->present = v[i]->kind == TROUPE__PART_INSERT ||
                     v[i]->kind == TROUPE__PART_UPDATE ||
                     v[i]->kind == TROUPE__PART_UPSERT;
        b->expires = v[i]->expires;
        memcpy(d, v[i]->key, v[i]->klen);
        b->key = d;
        b->klen = v[i]->klen;
        d += v[i]->klen;
        if (b->present) {
            memcpy(d, v[i]->doc, v[i]->dlen);
            b->doc = d;
            b->dlen = v[i]->dlen;
            d += v[i]->dlen;
        }
    }
    troupe_free(v);
    j->nb = nb;
    if (so->start != NULL) {
        memcpy(d, so->start, so->start_len);
        j->start = d;
        j->slen = so->start_len;
        d += so->start_len;
    }
    if (so->end != NULL) {
        memcpy(d, so->end, so->end_len);
        j->end = d;
        j->elen = so->end_len;
        d += so->end_len;
    }
    if (so->after != NULL) {
        memcpy(d, so->after, so->after_len);
        j->after = d;
        j->alen = so->after_len;
    }
    j->limit = so->limit;
    j->reverse = so->reverse;
    j->db = tx->env.db;
    j->cf_t = tx->tabs[tab].cf_t;
    j->table_id = tx->tabs[tab].id;
    j->sh = troupe__ttxn_retain(tx->sh);
    j->clock = tx->env.clock;
    j->clock_ctx = tx->env.clock_ctx;
    j->cb = cb;
    j->arg = arg;
    e = troupe_runtime_work(tx->env.rt, scan_work, scan_done, j);
    if (e != TROUPE_OK) {
        troupe__ttxn_release(j->sh);
        troupe_free(j);
    }
    return e;
}

/* ---- commit ------------------------------------------------------------ */

static int
conf_cmp(const void *a, const void *b)
{
    const troupe_txn_conflict *x = a, *y = b;
    int c = strcmp(x->table, y->table);
    if (c != 0)
        return c;
    return troupe_key_cmp(x->key, x->key_len, y->key, y->key_len);
}

static int
rcpt_cmp(const void *a, const void *b)
{
    const troupe_txn_receipt *x = a, *y = b;
    int c = strcmp(x->table, y->table);
    if (c != 0)
        return c;
    return troupe_key_cmp(x->key, x->key_len, y->key, y->key_len);
}

/* One receipt per final write: (table, key, the version its table
 * published, upsert or delete), sorted like conflicts. A write that
 * writes nothing (insert then delete) has none. */
static troupe_err
receipts_build(troupe_txn *tx)
{
    size_t n = 0;
    for (size_t i = 0; i < tx->nkeys; i++)
        n += tx->keys[i]->kind != K_NONE &&
             tx->keys[i]->kind != TROUPE__PART_ABSENT;
    tx->rcpt = n ? troupe_calloc(n, sizeof(*tx->rcpt)) : NULL;
    if (n && tx->rcpt == NULL)
        return TROUPE_EUNKNOWN; /* committed, but the receipts are lost */
    for (size_t i = 0; i < tx->nkeys; i++) {
        const xkey *x = tx->keys[i];
        if (x->kind == K_NONE || x->kind == TROUPE__PART_ABSENT)
            continue;
        uint8_t *k = troupe_malloc(x->klen);
        if (k == NULL)
            return TROUPE_EUNKNOWN;
        memcpy(k, x->key, x->klen);
        troupe_txn_receipt *r = &tx->rcpt[tx->nrcpt++];
        r->table = tx->tabs[x->tab].name;
        r->key = k;
        r->key_len = x->klen;
        r->version = tx->tabs[x->tab].pub_ver;
        r->deleted =
            x->kind == TROUPE__PART_DELETE || x->kind == TROUPE__PART_DEL_ANY;
        /* committed, but a version at or past the durable floor (its
         * raise failed) must never reach a client */
        if (troupe__vers_check(tx->env.vers, r->version) != TROUPE_OK)
            return TROUPE_EUNKNOWN;
    }
    if (tx->nrcpt > 1)
        qsort(tx->rcpt, tx->nrcpt, sizeof(*tx->rcpt), rcpt_cmp);
    return TROUPE_OK;
}

static void
complete(troupe_txn *tx)
{
    if (tx->nconf > 1) {
        qsort(tx->conf, tx->nconf, sizeof(*tx->conf), conf_cmp);
        size_t w = 1;
        for (size_t i = 1; i < tx->nconf; i++) {
            if (conf_cmp(&tx->conf[w - 1], &tx->conf[i]) == 0) {
                tx->conf[w - 1].kinds |= tx->conf[i].kinds; /* one entry */
                troupe_free((void *)tx->conf[i].key);
            } else {
                tx->conf[w++] = tx->conf[i];
            }
        }
        tx->nconf = w;
    }
    troupe_err e = tx->result;
    if (e == TROUPE_EDEAD)
        e = TROUPE_ECLOSED; /* an actor's detail, never a commit's outcome */
    if (e == TROUPE_OK && tx->nconf > 0)
        e = TROUPE_ECONFLICT;
    if (e != TROUPE_ECONFLICT) {
        /* another failure wins over conflicts found before it, and the
         * contract says the set is empty then */
        for (size_t i = 0; i < tx->nconf; i++)
            troupe_free((void *)tx->conf[i].key);
        tx->nconf = 0;
    }
    if (e == TROUPE_OK && tx->vcb != NULL)
        e = receipts_build(tx);
    tx->state = TX_DONE;
    keys_free(tx);
    parts_done(tx, e);
    if (tx->vcb != NULL)
        atomic_fetch_add_explicit(!tx->vprepped    ? &tx->env.ts->vprep_fail
                                  : e == TROUPE_OK ? &tx->env.ts->vcommit_ok
                                                   : &tx->env.ts->vcommit_fail,
                                  1, memory_order_relaxed);
    if (tx->vcb != NULL)
        tx->vcb(tx, e, e == TROUPE_ECONFLICT ? tx->conf : NULL,
                e == TROUPE_ECONFLICT ? tx->nconf : 0,
                e == TROUPE_OK ? tx->rcpt : NULL,
                e == TROUPE_OK ? tx->nrcpt : 0, tx->arg);
    else
        tx->cb(tx, e, e == TROUPE_ECONFLICT ? tx->conf : NULL,
               e == TROUPE_ECONFLICT ? tx->nconf : 0, tx->arg);
}

static void
complete_s0(void *arg, troupe_runtime *rt)
{
    (void)rt;
    complete(arg);
}

/* Completes on scheduler 0: at once when already there, else posted
 * there (or here, once scheduler 0 has closed: troupe__post_or_run). */
static void
complete_anywhere(troupe_txn *tx, bool on_s0)
{
    if (on_s0)
        complete(tx);
    else
        troupe__post_or_run(tx->env.rt, complete_s0, tx);
}

static void
fin_one(troupe_txn *tx, bool on_s0)
{
    if (atomic_fetch_sub(&tx->pending, 1) == 1)
        complete_anywhere(tx, on_s0);
}

typedef struct finarg {
    troupe_txn *tx;
    size_t tab;
} finarg;

static void
on_finished(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    finarg *fa = arg;
    troupe_txn *tx = fa->tx;
    uint64_t ver = 0;
    if (err == TROUPE_OK && reply != NULL && reply->body != NULL) {
        troupe_reader r;
        troupe_reader_init(&r, troupe_body_data(reply->body),
                           troupe_body_len(reply->body));
        troupe_read_uint(&r, &ver);
        if (troupe_read_end(&r) != TROUPE_OK)
            ver = 0;
    }
    tx->tabs[fa->tab].pub_ver = ver;
    troupe_free(fa);
    fin_one(tx, true);
}

/* Sends a finish to every table that got a prepare, then completes with
 * `result` once each answered (or timed out). */
static void
finish_all(troupe_txn *tx, bool publish, troupe_err result, bool on_s0)
{
    tx->result = result;
    atomic_store(&tx->pending, 1);
    for (size_t i = 0; i < tx->ntabs; i++) {
        if (!tx->tabs[i].sent)
            continue;
        ttxn_fin *f = troupe_malloc(sizeof(*f));
        finarg *fa = troupe_malloc(sizeof(*fa));
        troupe_msg *m = NULL;
        if (f == NULL || fa == NULL ||
            troupe_msg_create(&m, TROUPE__PART_FINISH, NULL, 0) != TROUPE_OK) {
            troupe_free(f);
            troupe_free(fa);
            continue; /* the table's reservation deadline releases it */
        }
        f->sh = troupe__ttxn_retain(tx->sh);
        f->publish = publish;
        f->ver = publish ? tx->pub_ver : 0;
        fa->tx = tx;
        fa->tab = i;
        m->ptr = f;
        m->ptr_drop = troupe__ttxn_fin_free;
        atomic_fetch_add(&tx->pending, 1);
        if (troupe_runtime_ask(tx->env.rt, tx->tabs[i].addr, &m,
                               tx->env.timeout_ms, on_finished,
                               fa) != TROUPE_OK) {
            troupe_free(fa);
            atomic_fetch_sub(&tx->pending, 1);
        }
    }
    fin_one(tx, on_s0);
}

static void
abort_all(troupe_txn *tx, troupe_err result, bool on_s0)
{
    int want = TTXN_OPEN;
    atomic_compare_exchange_strong(&tx->sh->state, &want, TTXN_ABORTED);
    finish_all(tx, false, result, on_s0);
}

/* On the pipeline's writer thread, once the batch is written (or its
 * write failed: EUNKNOWN publishes too). The one version every table
 * publishes for the writes is taken here, where blocking is allowed (see
 * troupe__vers_take), and before anyone hears of the commit. */
static void
on_written(troupe_err err, void *arg)
{
    troupe_txn *tx = arg;
    tx->pub_ver = troupe__vers_take(tx->env.vers);
    finish_all(tx, true, err, false);
}

static void
prepare_next(troupe_txn *tx, bool on_s0);

static troupe_err
conf_add(troupe_txn *tx, const char *table, const void *key, size_t klen,
         uint32_t kinds)
{
    if (tx->nconf == tx->capconf) {
        size_t cap = tx->capconf ? tx->capconf * 2 : 8;
        troupe_txn_conflict *v = troupe_realloc(tx->conf, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        tx->conf = v;
        tx->capconf = cap;
    }
    uint8_t *k = troupe_malloc(klen);
    if (k == NULL)
        return TROUPE_ENOMEM;
    memcpy(k, key, klen);
    tx->conf[tx->nconf++] = (troupe_txn_conflict){
        .table = table, .key = k, .key_len = klen, .kinds = kinds};
    return TROUPE_OK;
}

static troupe_err
conf_decode(troupe_txn *tx, const char *table, const troupe_msg *reply)
{
    if (reply == NULL || reply->body == NULL)
        return TROUPE_EPROTO;
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, troupe_body_data(reply->body),
                       troupe_body_len(reply->body));
    troupe_read_array(&r, &n);
    for (uint32_t i = 0; r.err == TROUPE_OK && i < n; i++) {
        const void *k;
        size_t kl;
        uint32_t kinds = 0;
        troupe_read_array_n(&r, 2);
        troupe_read_bin(&r, TROUPE_KEY_MAX, &k, &kl);
        troupe_read_u32(&r, &kinds);
        if (r.err == TROUPE_OK &&
            (kl == 0 || kinds == 0 ||
             (kinds & ~(uint32_t)(TROUPE_CONFLICT_STALE |
                                  TROUPE_CONFLICT_RESERVED)) != 0))
            return TROUPE_EPROTO;
        if (r.err == TROUPE_OK) {
            troupe_err e = conf_add(tx, table, k, kl, kinds);
            if (e != TROUPE_OK)
                return e;
        }
    }
    return troupe_read_end(&r) == TROUPE_OK ? TROUPE_OK : TROUPE_EPROTO;
}

/*
 * The error of a table's prepare as the caller gets it. A table actor that
 * is gone (EDEAD) or winding down (ECLOSED) while the catalog no longer
 * lists that table under this actor was dropped after the transaction
 * buffered its writes (maybe recreated under the same name, a new table):
 * that is the missing-table error. Otherwise the tables are stopping, and
 * EDEAD, an actor's detail, is ECLOSED.
 */
static troupe_err
tab_err(troupe_txn *tx, const xtab *tb, troupe_err err)
{
    if (err != TROUPE_EDEAD && err != TROUPE_ECLOSED)
        return err;
    troupe_addr a;
    troupe_cf *cf;
    troupe_err le = troupe__tables_lookup_cf(tx->t, tb->name, &a, &cf);
    if (le == TROUPE_ENOENT ||
        (le == TROUPE_OK && !troupe_addr_eq(a, tb->addr)))
        return TROUPE_ENOENT;
    return TROUPE_ECLOSED;
}

static void
on_prepared(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    troupe_txn *tx = arg;
    xtab *tb = &tx->tabs[tx->order[tx->cur]];
    if (err == TROUPE_ECONFLICT) {
        troupe_err e = conf_decode(tx, tb->name, reply);
        if (e != TROUPE_OK)
            tx->err = e;
        tx->check_only = true;
    } else if (err != TROUPE_OK) {
        tx->err = tab_err(tx, tb, err);
    }
    tx->cur++;
    prepare_next(tx, true);
}

static int
xkey_cmp(const void *a, const void *b)
{
    const xkey *x = *(const xkey *const *)a, *y = *(const xkey *const *)b;
    return troupe_key_cmp(x->key, x->klen, y->key, y->klen);
}

/* The prepare request of table `tab`: its keys, sorted, copied. */
static troupe_err
prep_build(troupe_txn *tx, size_t tab, ttxn_prep **out)
{
    size_t n = tx->tabs[tab].nkeys, nrg = tx->tabs[tab].nrg, bytes = 0, k = 0;
    xkey **v = troupe_malloc((n ? n : 1) * sizeof(*v));
    if (v == NULL)
        return TROUPE_ENOMEM;
    for (size_t i = 0; i < tx->nranges; i++)
        if (tx->ranges[i].tab == tab)
            bytes += tx->ranges[i].slen + tx->ranges[i].elen;
    for (size_t i = 0; i < tx->nkeys; i++)
        if (tx->keys[i]->tab == tab) {
            v[k++] = tx->keys[i];
            bytes += tx->keys[i]->klen + tx->keys[i]->dlen;
        }
    if (n > 1)
        qsort(v, n, sizeof(*v), xkey_cmp);
    ttxn_prep *p = troupe_calloc(1, sizeof(*p) + n * sizeof(ttxn_key) +
                                        nrg * sizeof(ttxn_range) + bytes);
    if (p == NULL) {
        troupe_free(v);
        return TROUPE_ENOMEM;
    }
    p->keys = (ttxn_key *)(p + 1);
    p->ranges = (ttxn_range *)&p->keys[n];
    unsigned char *d = (unsigned char *)&p->ranges[nrg];
    for (size_t i = 0; i < tx->nranges; i++) {
        const xrange *r = &tx->ranges[i];
        if (r->tab != tab)
            continue;
        ttxn_range *pr = &p->ranges[p->nranges++];
        if (r->start != NULL) {
            memcpy(d, r->start, r->slen);
            pr->start = d;
            pr->slen = r->slen;
            d += r->slen;
        }
        if (r->end != NULL) {
            memcpy(d, r->end, r->elen);
            pr->end = d;
            pr->elen = r->elen;
            d += r->elen;
        }
    }
    for (size_t i = 0; i < n; i++) {
        ttxn_key *pk = &p->keys[i];
        pk->kind = v[i]->kind != K_NONE ? v[i]->kind : TROUPE__PART_READ;
        pk->expires = v[i]->expires;
        pk->nostamp = v[i]->nostamp;
        pk->ver = v[i]->ver;
        memcpy(d, v[i]->key, v[i]->klen);
        pk->key = d;
        pk->klen = v[i]->klen;
        d += v[i]->klen;
        if (v[i]->doc != NULL && v[i]->kind != K_NONE) {
            memcpy(d, v[i]->doc, v[i]->dlen);
            pk->doc = d;
            pk->dlen = v[i]->dlen;
            d += v[i]->dlen;
        }
    }
    troupe_free(v);
    p->n = n;
    p->seq0 = tx->seq0;
    p->check_only = tx->check_only;
    uint64_t rsv = (uint64_t)tx->env.timeout_ms * 2;
    p->reserve_ms = rsv > UINT32_MAX ? UINT32_MAX : (uint32_t)rsv;
    p->sh = troupe__ttxn_retain(tx->sh);
    *out = p;
    return TROUPE_OK;
}

static void
all_prepared(troupe_txn *tx, bool on_s0)
{
    if (tx->err != TROUPE_OK || tx->nconf > 0) {
        abort_all(tx, tx->err, on_s0);
        return;
    }
    /* participants append to the one batch, which is ours again now that
     * every table prepared; a rejected participant writes nothing */
    for (size_t i = 0; i < tx->nparts && tx->err == TROUPE_OK; i++)
        if (tx->parts[i].write != NULL)
            tx->err = tx->parts[i].write(tx->parts[i].arg, tx->sh->batch);
    if (tx->err != TROUPE_OK) {
        abort_all(tx, tx->err, on_s0);
        return;
    }
    int want = TTXN_OPEN;
    if (!atomic_compare_exchange_strong(&tx->sh->state, &want,
                                        TTXN_SUBMITTED)) {
        /* a table's reservation lapsed first */
        finish_all(tx, false, TROUPE_ETIMEDOUT, on_s0);
        return;
    }
    if (tx->vcb != NULL) {
        tx->vprepped = true;
        atomic_fetch_add_explicit(&tx->env.ts->vprep_ok, 1,
                                  memory_order_relaxed);
    }
    if (!tx->writes) { /* versioned reads only: validated, nothing to write */
        finish_all(tx, false, TROUPE_OK, on_s0);
        return;
    }
    troupe_err e = troupe_commit_submit(tx->env.commit, &tx->sh->batch,
                                        tx->sync, on_written, tx);
    if (e != TROUPE_OK)
        finish_all(tx, false, e, on_s0);
}

static void
prepare_next(troupe_txn *tx, bool on_s0)
{
    while (tx->err == TROUPE_OK && tx->cur < tx->norder) {
        xtab *tb = &tx->tabs[tx->order[tx->cur]];
        ttxn_prep *p = NULL;
        troupe_msg *m = NULL;
        troupe_err e = prep_build(tx, tx->order[tx->cur], &p);
        if (e == TROUPE_OK && (e = troupe_msg_create(&m, TROUPE__PART_PREPARE,
                                                     NULL, 0)) != TROUPE_OK)
            troupe__ttxn_prep_free(p);
        if (e == TROUPE_OK) {
            m->ptr = p;
            m->ptr_drop = troupe__ttxn_prep_free;
            tb->sent = true;
            e = troupe_runtime_ask(tx->env.rt, tb->addr, &m, tx->env.timeout_ms,
                                   on_prepared, tx);
            if (e == TROUPE_OK)
                return; /* on_prepared goes on */
            tb->sent = false;
            e = tab_err(tx, tb, e);
        }
        tx->err = e;
    }
    all_prepared(tx, on_s0);
}

static int
tab_cmp(const void *a, const void *b, void *ctx)
{
    const xtab *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static troupe_err
commit_start(troupe_txn *tx, troupe_sync sync);

troupe_err
troupe_txn_commit(troupe_txn *tx, troupe_sync sync, troupe_txn_commit_cb cb,
                  void *arg)
{
    if (tx == NULL || cb == NULL || (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    if (tx->state != TX_OPEN || tx->mode == MODE_VERSIONED)
        return TROUPE_ESTATE;
    tx->cb = cb;
    tx->vcb = NULL;
    tx->arg = arg;
    return commit_start(tx, sync);
}

troupe_err
troupe_txn_commit_version(troupe_txn *tx, troupe_sync sync,
                          troupe_txn_commit_version_cb cb, void *arg)
{
    if (tx == NULL || cb == NULL || (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    if (tx->state != TX_OPEN || tx->mode == MODE_ORDINARY)
        return TROUPE_ESTATE;
    for (size_t i = 0; i < tx->nkeys; i++)
        if (tx->keys[i]->nwrites > 1)
            return TROUPE_EINVAL; /* a key written twice: pi_db refuses */
    tx->cb = NULL;
    tx->vcb = cb;
    tx->arg = arg;
    return commit_start(tx, sync);
}

static troupe_err
commit_start(troupe_txn *tx, troupe_sync sync)
{
    tx->sync = sync;
    bool writes = false, vreads = false;
    for (size_t i = 0; i < tx->nkeys; i++) {
        writes = writes || tx->keys[i]->kind != K_NONE;
        vreads = vreads || tx->keys[i]->ver != 0;
    }
    writes = writes || tx->nparts > 0; /* participants write too */
    tx->writes = writes;
    if (!writes && !vreads) {
        tx->state = TX_COMMITTING;
        tx->result = TROUPE_OK;
        /* nothing to write: the callback still never runs inside the call */
        troupe_err e = troupe_runtime_post(tx->env.rt, complete_s0, tx);
        if (e != TROUPE_OK)
            tx->state = TX_OPEN;
        return e;
    }
    troupe_err e = writes ? troupe_commit_batch(tx->env.commit, &tx->sh->batch)
                          : TROUPE_OK;
    if (e != TROUPE_OK)
        return e;
    tx->norder = 0;
    for (size_t i = 0; i < tx->ntabs; i++)
        if (tx->tabs[i].nkeys > 0 || tx->tabs[i].nrg > 0)
            tx->order[tx->norder++] = i;
    /* insertion sort by name: at most TROUPE_TXN_TABLES_MAX */
    for (size_t i = 1; i < tx->norder; i++)
        for (size_t j = i;
             j > 0 && tab_cmp(&tx->order[j - 1], &tx->order[j], tx->tabs) > 0;
             j--) {
            size_t t = tx->order[j];
            tx->order[j] = tx->order[j - 1];
            tx->order[j - 1] = t;
        }
    tx->state = TX_COMMITTING;
    tx->cur = 0;
    prepare_next(tx, false);
    return TROUPE_OK;
}

troupe_err
troupe_txn_conflicts(const troupe_txn *tx, const troupe_txn_conflict **c,
                     size_t *n)
{
    if (tx == NULL || c == NULL || n == NULL)
        return TROUPE_EINVAL;
    *c = tx->nconf ? tx->conf : NULL;
    *n = tx->nconf;
    return TROUPE_OK;
}

/* ---- blocking twins and the retry helper ------------------------------- */

static void
wake_rows(troupe_err err, troupe_rows *rows, void *arg)
{
    troupe__waiter_release(arg, err, rows);
}

/* troupe__waiter_finish for the calls that answer rows. */
static troupe_err
finish_rows(troupe__waiter *w, troupe_err started, troupe_rows **rows)
{
    void *r = NULL;
    troupe_err e = troupe__waiter_finish(w, started, &r);
    *rows = r;
    return e;
}

troupe_err
troupe_txn_get_wait(troupe_txn *tx, const char *table, const void *key,
                    size_t klen, troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return finish_rows(&w, troupe_txn_get(tx, table, key, klen, wake_rows, &w),
                       rows);
}

troupe_err
troupe_txn_get_many_wait(troupe_txn *tx, const char *table,
                         const void *const *keys, const size_t *klens, size_t n,
                         troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return finish_rows(
        &w, troupe_txn_get_many(tx, table, keys, klens, n, wake_rows, &w),
        rows);
}

static void
wake_commit(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
            size_t n, void *arg)
{
    (void)tx;
    (void)c;
    (void)n;
    troupe__waiter_release(arg, err, NULL);
}

troupe_err
troupe_txn_scan_wait(troupe_txn *tx, const char *table,
                     const troupe_scan_opts *so, troupe_rows **rows)
{
    if (rows == NULL)
        return TROUPE_EINVAL;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return finish_rows(&w, troupe_txn_scan(tx, table, so, wake_rows, &w), rows);
}

troupe_err
troupe_txn_commit_wait(troupe_txn *tx, troupe_sync sync)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, troupe_txn_commit(tx, sync, wake_commit, &w), NULL);
}

troupe_err
troupe_txn_run_wait(troupe_tables *t, const troupe_txn_opts *o,
                    const troupe_txn_retry *r, troupe_txn_fn fn, void *arg)
{
    troupe_txn_retry rr = r != NULL ? *r : (troupe_txn_retry){0};
    if (rr.attempts != NULL)
        *rr.attempts = 0;
    if (t == NULL || fn == NULL || (unsigned)rr.sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    uint32_t max = rr.max_attempts ? rr.max_attempts : 8;
    uint64_t base = rr.base_ms ? rr.base_ms : 2;
    uint64_t cap = rr.max_ms ? rr.max_ms : 200;
    uint64_t rnd = uv_hrtime() ^ (uintptr_t)&rr ^ 0x9e3779b97f4a7c15ull;
    troupe_err e = TROUPE_ECONFLICT;
    for (uint32_t a = 0; a < max; a++) {
        if (rr.attempts != NULL)
            *rr.attempts = a + 1;
        if (a > 0) { /* full jitter */
            uint64_t ceil = base << (a - 1 < 20 ? a - 1 : 20);
            if (ceil > cap)
                ceil = cap;
            rnd ^= rnd << 13;
            rnd ^= rnd >> 7;
            rnd ^= rnd << 17;
            uv_sleep((unsigned)(rnd % (ceil + 1)));
        }
        troupe_txn *tx = NULL;
        if ((e = troupe_txn_begin(t, o, &tx)) != TROUPE_OK)
            return e;
        e = fn(tx, arg);
        if (e == TROUPE_OK)
            e = troupe_txn_commit_wait(tx, rr.sync);
        else
            troupe_txn_rollback(tx);
        troupe_txn_destroy(tx);
        if (e != TROUPE_ECONFLICT)
            return e;
    }
    return e;
}

/* ---- the versioned API (pi_db) ----------------------------------------- */

typedef struct qcall {
    troupe_txn_version_cb cb;   /* one key */
    troupe_txn_versions_cb mcb; /* many */
    void *arg;
    size_t n;
    ttables_shared *ts;
} qcall;

/* Decodes [[version, ...n], rows body] into *vers (troupe_malloc'ed) and
 * *rows. */
static troupe_err
qver_decode(const troupe_msg *reply, size_t n, uint64_t **vers,
            troupe_rows **rows)
{
    if (reply == NULL || reply->body == NULL)
        return TROUPE_EPROTO;
    troupe_reader r;
    uint32_t cnt = 0;
    troupe_reader_init(&r, troupe_body_data(reply->body),
                       troupe_body_len(reply->body));
    troupe_read_array_n(&r, 2);
    troupe_read_array(&r, &cnt);
    if (r.err != TROUPE_OK || cnt != n)
        return TROUPE_EPROTO;
    uint64_t *v = troupe_calloc(n, sizeof(*v));
    if (v == NULL)
        return TROUPE_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        troupe_read_uint(&r, &v[i]);
        if (r.err == TROUPE_OK && v[i] == 0)
            r.err = TROUPE_EPROTO;
    }
    const void *raw = NULL;
    size_t rlen = 0;
    troupe_read_raw(&r, &raw, &rlen);
    troupe_body *b = NULL;
    troupe_err e = troupe_read_end(&r) != TROUPE_OK
                       ? TROUPE_EPROTO
                       : troupe_body_copy(raw, rlen, &b);
    if (e == TROUPE_OK)
        e = troupe__rows_from_body(b, rows);
    troupe_body_release(b);
    if (e != TROUPE_OK) {
        troupe_free(v);
        return e;
    }
    *vers = v;
    return TROUPE_OK;
}

static void
on_qver(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    qcall *c = arg;
    troupe_rows *rows = NULL;
    uint64_t *vers = NULL;
    if (err == TROUPE_EDEAD)
        err = TROUPE_ECLOSED; /* the table's actor went meanwhile */
    if (err == TROUPE_OK)
        err = qver_decode(reply, c->n, &vers, &rows);
    atomic_fetch_add_explicit(err == TROUPE_OK ? &c->ts->qver_ok
                                               : &c->ts->qver_fail,
                              c->n, memory_order_relaxed);
    qcall cc = *c;
    troupe_free(c);
    if (cc.mcb != NULL) {
        cc.mcb(err, rows, vers, cc.arg);
        return;
    }
    uint64_t ver = err == TROUPE_OK ? vers[0] : 0;
    troupe_free(vers);
    cc.cb(err, rows, ver, cc.arg);
}

static troupe_err
query_versions(troupe_tables *t, const char *table, const void *const *keys,
               const size_t *klens, size_t n, troupe_txn_version_cb cb,
               troupe_txn_versions_cb mcb, void *arg)
{
    if (t == NULL || table == NULL || (cb == NULL && mcb == NULL) ||
        keys == NULL || klens == NULL || n == 0 || n > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EINVAL;
    troupe_err e = TROUPE_OK;
    for (size_t i = 0; e == TROUPE_OK && i < n; i++)
        e = troupe__table_key_check(keys[i], klens[i]);
    ttxn_env env;
    troupe_addr a;
    troupe_cf *cf;
    if (e != TROUPE_OK || (e = troupe__tables_txn_env(t, &env)) != TROUPE_OK ||
        (e = troupe__tables_lookup_cf(t, table, &a, &cf)) != TROUPE_OK)
        return e;
    ttxn_qver *q = troupe__ttxn_qver_new(keys, klens, n);
    qcall *c = troupe_malloc(sizeof(*c));
    troupe_msg *m = NULL;
    if (q == NULL || c == NULL ||
        troupe_msg_create(&m, TROUPE__PART_QVER, NULL, 0) != TROUPE_OK) {
        troupe_free(q);
        troupe_free(c);
        return TROUPE_ENOMEM;
    }
    m->ptr = q;
    m->ptr_drop = troupe_free;
    *c = (qcall){cb, mcb, arg, n, env.ts};
    e = troupe_runtime_ask(env.rt, a, &m, env.timeout_ms, on_qver, c);
    if (e != TROUPE_OK)
        troupe_free(c);
    return e;
}

troupe_err
troupe_txn_query_version(troupe_tables *t, const char *table, const void *key,
                         size_t klen, troupe_txn_version_cb cb, void *arg)
{
    if (cb == NULL)
        return TROUPE_EINVAL;
    return query_versions(t, table, &key, &klen, 1, cb, NULL, arg);
}

troupe_err
troupe_txn_query_versions(troupe_tables *t, const char *table,
                          const void *const *keys, const size_t *klens,
                          size_t n, troupe_txn_versions_cb cb, void *arg)
{
    if (cb == NULL)
        return TROUPE_EINVAL;
    return query_versions(t, table, keys, klens, n, NULL, cb, arg);
}

typedef struct qwait {
    troupe__waiter w;
    uint64_t ver;
    uint64_t *vers;
} qwait;

static void
wake_qver(troupe_err err, troupe_rows *rows, uint64_t ver, void *arg)
{
    qwait *q = arg;
    q->ver = ver;
    troupe__waiter_release(&q->w, err, rows);
}

static void
wake_qvers(troupe_err err, troupe_rows *rows, uint64_t *vers, void *arg)
{
    qwait *q = arg;
    q->vers = vers;
    troupe__waiter_release(&q->w, err, rows);
}

troupe_err
troupe_txn_query_version_wait(troupe_tables *t, const char *table,
                              const void *key, size_t klen, troupe_rows **rows,
                              uint64_t *version)
{
    if (rows == NULL || version == NULL)
        return TROUPE_EINVAL;
    *version = 0;
    qwait q = {0};
    troupe__waiter_init(&q.w, 1);
    troupe_err e = finish_rows(
        &q.w, troupe_txn_query_version(t, table, key, klen, wake_qver, &q),
        rows);
    if (e == TROUPE_OK)
        *version = q.ver;
    return e;
}

troupe_err
troupe_txn_query_versions_wait(troupe_tables *t, const char *table,
                               const void *const *keys, const size_t *klens,
                               size_t n, troupe_rows **rows,
                               uint64_t **versions)
{
    if (rows == NULL || versions == NULL)
        return TROUPE_EINVAL;
    *versions = NULL;
    qwait q = {0};
    troupe__waiter_init(&q.w, 1);
    troupe_err e = finish_rows(
        &q.w,
        troupe_txn_query_versions(t, table, keys, klens, n, wake_qvers, &q),
        rows);
    if (e == TROUPE_OK)
        *versions = q.vers;
    else
        troupe_free(q.vers);
    return e;
}

troupe_err
troupe_txn_read_version(troupe_txn *tx, const char *table, const void *key,
                        size_t klen, uint64_t version)
{
    if (tx == NULL || table == NULL || version == 0)
        return TROUPE_EINVAL;
    troupe_err e = troupe__table_key_check(key, klen);
    if (e != TROUPE_OK)
        return e;
    if (tx->state != TX_OPEN || tx->mode == MODE_ORDINARY)
        return TROUPE_ESTATE;
    uint32_t tab;
    xkey *x;
    if ((e = tab_of(tx, table, &tab)) != TROUPE_OK)
        return e;
    /* A second read entry of one key is refused, not merged: the last
     * one winning would let a stale read followed by a current one
     * commit (pi_db rejects duplicate entries before anything happens). */
    x = kfind(tx, tab, key, klen);
    if (x != NULL && x->ver != 0)
        return TROUPE_EINVAL;
    if (x == NULL && (e = kget(tx, tab, key, klen, &x)) != TROUPE_OK)
        return e;
    tx->mode = MODE_VERSIONED;
    x->ver = version;
    return TROUPE_OK;
}

troupe_err
troupe_txn_receipts(const troupe_txn *tx, const troupe_txn_receipt **r,
                    size_t *n)
{
    if (tx == NULL || r == NULL || n == NULL)
        return TROUPE_EINVAL;
    *r = tx->nrcpt ? tx->rcpt : NULL;
    *n = tx->nrcpt;
    return TROUPE_OK;
}

static void
wake_vcommit(troupe_txn *tx, troupe_err err, const troupe_txn_conflict *c,
             size_t n, const troupe_txn_receipt *r, size_t nr, void *arg)
{
    (void)tx;
    (void)c;
    (void)n;
    (void)r;
    (void)nr;
    troupe__waiter_release(arg, err, NULL);
}

troupe_err
troupe_txn_commit_version_wait(troupe_txn *tx, troupe_sync sync)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, troupe_txn_commit_version(tx, sync, wake_vcommit, &w), NULL);
}
