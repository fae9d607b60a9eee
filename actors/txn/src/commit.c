/*
 * The commit: a two-phase commit over the table actors involved, as the
 * client of their participant protocol (troupe/internal/participant.h;
 * docs/data-model.md, "Transactions"), its completion, and the blocking
 * twin and retry helper.
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
 */
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "troupe/alloc.h"
#include "troupe/internal/participant.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/tables.h"
#include "troupe/internal/waiter.h"
#include "troupe/pack.h"
#include "troupe/storage.h"
#include "txn_int.h"

/* A prepare's conflict bits are the kinds this API reports. */
_Static_assert((int)TROUPE__PART_STALE == (int)TROUPE_CONFLICT_STALE &&
                   (int)TROUPE__PART_RESERVED == (int)TROUPE_CONFLICT_RESERVED,
               "conflict kinds");

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
    tx->commit.rcpt = n ? troupe_calloc(n, sizeof(*tx->commit.rcpt)) : NULL;
    if (n && tx->commit.rcpt == NULL)
        return TROUPE_EUNKNOWN; /* committed, but the receipts are lost */
    for (size_t i = 0; i < tx->nkeys; i++) {
        const xkey *x = tx->keys[i];
        if (x->kind == K_NONE || x->kind == TROUPE__PART_ABSENT)
            continue;
        uint8_t *k = troupe_malloc(x->klen);
        if (k == NULL)
            return TROUPE_EUNKNOWN;
        memcpy(k, x->key, x->klen);
        troupe_txn_receipt *r = &tx->commit.rcpt[tx->commit.nrcpt++];
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
    if (tx->commit.nrcpt > 1)
        qsort(tx->commit.rcpt, tx->commit.nrcpt, sizeof(*tx->commit.rcpt),
              rcpt_cmp);
    return TROUPE_OK;
}

static void
complete(troupe_txn *tx)
{
    if (tx->commit.nconf > 1) {
        qsort(tx->commit.conf, tx->commit.nconf, sizeof(*tx->commit.conf),
              conf_cmp);
        size_t w = 1;
        for (size_t i = 1; i < tx->commit.nconf; i++) {
            if (conf_cmp(&tx->commit.conf[w - 1], &tx->commit.conf[i]) == 0) {
                tx->commit.conf[w - 1].kinds |=
                    tx->commit.conf[i].kinds; /* one entry */
                troupe_free((void *)tx->commit.conf[i].key);
            } else {
                tx->commit.conf[w++] = tx->commit.conf[i];
            }
        }
        tx->commit.nconf = w;
    }
    troupe_err e = tx->commit.result;
    if (e == TROUPE_EDEAD)
        e = TROUPE_ECLOSED; /* an actor's detail, never a commit's outcome */
    if (e == TROUPE_OK && tx->commit.nconf > 0)
        e = TROUPE_ECONFLICT;
    if (e != TROUPE_ECONFLICT) {
        /* another failure wins over conflicts found before it, and the
         * contract says the set is empty then */
        for (size_t i = 0; i < tx->commit.nconf; i++)
            troupe_free((void *)tx->commit.conf[i].key);
        tx->commit.nconf = 0;
    }
    if (e == TROUPE_OK && tx->commit.vcb != NULL)
        e = receipts_build(tx);
    tx->state = TX_DONE;
    troupe__txn_keys_free(tx);
    troupe__txn_parts_done(tx, e);
    ttables_shared *ts = tx->env.ts;
    atomic_fetch_add_explicit(e == TROUPE_OK          ? &ts->commit_ok
                              : e == TROUPE_ECONFLICT ? &ts->commit_conflict
                                                      : &ts->commit_fail,
                              1, memory_order_relaxed);
    troupe__tables_op_done(ts, TTABLES_OP_COMMIT, tx->commit.t0);
    if (tx->commit.vcb != NULL)
        atomic_fetch_add_explicit(!tx->commit.vprepped ? &tx->env.ts->vprep_fail
                                  : e == TROUPE_OK     ? &tx->env.ts->vcommit_ok
                                                   : &tx->env.ts->vcommit_fail,
                                  1, memory_order_relaxed);
    if (tx->commit.vcb != NULL)
        tx->commit.vcb(tx, e, e == TROUPE_ECONFLICT ? tx->commit.conf : NULL,
                       e == TROUPE_ECONFLICT ? tx->commit.nconf : 0,
                       e == TROUPE_OK ? tx->commit.rcpt : NULL,
                       e == TROUPE_OK ? tx->commit.nrcpt : 0, tx->commit.arg);
    else
        tx->commit.cb(tx, e, e == TROUPE_ECONFLICT ? tx->commit.conf : NULL,
                      e == TROUPE_ECONFLICT ? tx->commit.nconf : 0,
                      tx->commit.arg);
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
    if (atomic_fetch_sub(&tx->commit.pending, 1) == 1)
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
    tx->commit.result = result;
    atomic_store(&tx->commit.pending, 1);
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
        f->ver = publish ? tx->commit.pub_ver : 0;
        fa->tx = tx;
        fa->tab = i;
        m->ptr = f;
        m->ptr_drop = troupe__ttxn_fin_free;
        atomic_fetch_add(&tx->commit.pending, 1);
        if (troupe_runtime_ask(tx->env.rt, tx->tabs[i].addr, &m,
                               tx->env.timeout_ms, on_finished,
                               fa) != TROUPE_OK) {
            troupe_free(fa);
            atomic_fetch_sub(&tx->commit.pending, 1);
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

void
troupe__txn_abort(troupe_txn *tx, troupe_err result, bool on_s0)
{
    abort_all(tx, result, on_s0);
}

void
troupe__txn_complete(troupe_txn *tx, troupe_err result, bool on_s0)
{
    tx->commit.result = result;
    complete_anywhere(tx, on_s0);
}

/* On the pipeline's writer thread, once the batch is written (or its
 * write failed: EUNKNOWN publishes too). The one version every table
 * publishes for the writes is taken here, where blocking is allowed (see
 * troupe__vers_take), and before anyone hears of the commit. */
static void
on_written(troupe_err err, void *arg)
{
    troupe_txn *tx = arg;
    tx->commit.pub_ver = troupe__vers_take(tx->env.vers);
    finish_all(tx, true, err, false);
}

static void
prepare_next(troupe_txn *tx, bool on_s0);

static troupe_err
conf_add(troupe_txn *tx, const char *table, const void *key, size_t klen,
         uint32_t kinds)
{
    if (tx->commit.nconf == tx->commit.capconf) {
        size_t cap = tx->commit.capconf ? tx->commit.capconf * 2 : 8;
        troupe_txn_conflict *v =
            troupe_realloc(tx->commit.conf, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        tx->commit.conf = v;
        tx->commit.capconf = cap;
    }
    uint8_t *k = troupe_malloc(klen);
    if (k == NULL)
        return TROUPE_ENOMEM;
    memcpy(k, key, klen);
    tx->commit.conf[tx->commit.nconf++] = (troupe_txn_conflict){
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
    if (le == TROUPE_ENOTABLE ||
        (le == TROUPE_OK && !troupe_addr_eq(a, tb->addr)))
        return TROUPE_ENOTABLE;
    return TROUPE_ECLOSED;
}

static void
on_prepared(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    troupe_txn *tx = arg;
    xtab *tb = &tx->tabs[tx->commit.order[tx->commit.cur]];
    if (err == TROUPE_ECONFLICT) {
        troupe_err e = conf_decode(tx, tb->name, reply);
        if (e != TROUPE_OK)
            tx->commit.err = e;
        tx->commit.check_only = true;
    } else if (err != TROUPE_OK) {
        tx->commit.err = tab_err(tx, tb, err);
    }
    tx->commit.cur++;
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
    p->check_only = tx->commit.check_only;
    uint64_t rsv = (uint64_t)tx->env.timeout_ms * 2;
    p->reserve_ms = rsv > UINT32_MAX ? UINT32_MAX : (uint32_t)rsv;
    p->sh = troupe__ttxn_retain(tx->sh);
    *out = p;
    return TROUPE_OK;
}

static void
all_prepared(troupe_txn *tx, bool on_s0)
{
    if (tx->commit.err != TROUPE_OK || tx->commit.nconf > 0) {
        abort_all(tx, tx->commit.err, on_s0);
        return;
    }
    /* participants append to the one batch, which is ours again now that
     * every table prepared; a rejected participant writes nothing */
    for (size_t i = 0; i < tx->nparts && tx->commit.err == TROUPE_OK; i++)
        if (tx->parts[i].write != NULL)
            tx->commit.err =
                tx->parts[i].write(tx->parts[i].arg, tx->sh->batch);
    if (tx->commit.err != TROUPE_OK) {
        abort_all(tx, tx->commit.err, on_s0);
        return;
    }
    if (tx->commit.xa) { /* held, not submitted: the record decides */
        troupe__txn_xa_prepared(tx, on_s0);
        return;
    }
    int want = TTXN_OPEN;
    if (!atomic_compare_exchange_strong(&tx->sh->state, &want,
                                        TTXN_SUBMITTED)) {
        /* a table's reservation lapsed first */
        finish_all(tx, false, TROUPE_ETIMEDOUT, on_s0);
        return;
    }
    if (tx->commit.vcb != NULL) {
        tx->commit.vprepped = true;
        atomic_fetch_add_explicit(&tx->env.ts->vprep_ok, 1,
                                  memory_order_relaxed);
    }
    if (!tx->commit
             .writes) { /* versioned reads only: validated, nothing to write */
        finish_all(tx, false, TROUPE_OK, on_s0);
        return;
    }
    troupe_err e = troupe_commit_submit(tx->env.commit, &tx->sh->batch,
                                        tx->commit.sync, on_written, tx);
    if (e != TROUPE_OK)
        finish_all(tx, false, e, on_s0);
}

static void
prepare_next(troupe_txn *tx, bool on_s0)
{
    while (tx->commit.err == TROUPE_OK && tx->commit.cur < tx->commit.norder) {
        xtab *tb = &tx->tabs[tx->commit.order[tx->commit.cur]];
        ttxn_prep *p = NULL;
        troupe_msg *m = NULL;
        troupe_err e = prep_build(tx, tx->commit.order[tx->commit.cur], &p);
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
        tx->commit.err = e;
    }
    all_prepared(tx, on_s0);
}

static int
tab_cmp(const void *a, const void *b, void *ctx)
{
    const xtab *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

troupe_err
troupe_txn_commit(troupe_txn *tx, troupe_sync sync, troupe_txn_commit_cb cb,
                  void *arg)
{
    if (tx == NULL || cb == NULL || (unsigned)sync > TROUPE_SYNC_OFF)
        return TROUPE_EINVAL;
    if (tx->state != TX_OPEN || tx->mode == MODE_VERSIONED)
        return TROUPE_ESTATE;
    tx->commit.cb = cb;
    tx->commit.vcb = NULL;
    tx->commit.arg = arg;
    return troupe__txn_commit_start(tx, sync);
}

troupe_err
troupe__txn_commit_start(troupe_txn *tx, troupe_sync sync)
{
    tx->commit.t0 = troupe__tables_op_clock();
    tx->commit.sync = sync;
    bool writes = false, vreads = false;
    for (size_t i = 0; i < tx->nkeys; i++) {
        writes = writes || tx->keys[i]->kind != K_NONE;
        vreads = vreads || tx->keys[i]->ver != 0;
    }
    writes = writes || tx->nparts > 0; /* participants write too */
    if (writes) {
        troupe_err we = troupe__tables_writable(
            tx->t, tx->commit.vcb != NULL ? "troupe_txn_commit_version"
                                          : "troupe_txn_commit");
        if (we != TROUPE_OK)
            return we;
    }
    tx->commit.writes = writes;
    if (!writes && !vreads) {
        tx->state = TX_COMMITTING;
        tx->commit.result = TROUPE_OK;
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
    tx->commit.norder = 0;
    for (size_t i = 0; i < tx->ntabs; i++)
        if (tx->tabs[i].nkeys > 0 || tx->tabs[i].nrg > 0)
            tx->commit.order[tx->commit.norder++] = i;
    /* insertion sort by name: at most TROUPE_TXN_TABLES_MAX */
    for (size_t i = 1; i < tx->commit.norder; i++)
        for (size_t j = i; j > 0 && tab_cmp(&tx->commit.order[j - 1],
                                            &tx->commit.order[j], tx->tabs) > 0;
             j--) {
            size_t t = tx->commit.order[j];
            tx->commit.order[j] = tx->commit.order[j - 1];
            tx->commit.order[j - 1] = t;
        }
    tx->state = TX_COMMITTING;
    tx->commit.cur = 0;
    prepare_next(tx, false);
    return TROUPE_OK;
}

troupe_err
troupe_txn_conflicts(const troupe_txn *tx, const troupe_txn_conflict **c,
                     size_t *n)
{
    if (tx == NULL || c == NULL || n == NULL)
        return TROUPE_EINVAL;
    *c = tx->commit.nconf ? tx->commit.conf : NULL;
    *n = tx->commit.nconf;
    return TROUPE_OK;
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
troupe_txn_commit_wait(troupe_txn *tx, troupe_sync sync)
{
    troupe_err be = troupe__block_check("troupe_txn_commit_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, troupe_txn_commit(tx, sync, wake_commit, &w), NULL);
}

troupe_err
troupe_txn_run_wait(troupe_tables *t, const troupe_txn_opts *o,
                    const troupe_txn_retry *r, troupe_txn_fn fn, void *arg)
{
    troupe_err be = troupe__block_check("troupe_txn_run_wait");
    if (be != TROUPE_OK)
        return be;
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
