/*
 * Key versions: the counter every committed write of a key takes its
 * version from (tversions, the `vers` field of struct troupe_tables), its
 * durable floor, ("versions") in meta, and the running transactions'
 * begin points (ttables_shared's list): a transaction takes its seq0 from
 * the counter, and the oldest one bounds which key versions a table actor
 * may forget.
 *
 * Key versions never repeat, also across opens, or a version a client
 * cached before a restart could name a newer value after it (a stale
 * versioned commit would then succeed: a lost update). Every version is
 * below a floor stored in meta under ("versions"); an open starts the
 * counter at the stored floor and, before it serves anything, stores a
 * new one `reserve` higher (synced). When half of that is used, a worker
 * stores the next floor in the background (counted as a catalog job, so
 * a stop waits for it). A version is handed out only below the durable
 * floor. Should the counter ever reach it before the background write
 * landed, the thread that needs the version decides: the commit
 * pipeline's writer (every ordinary and transactional commit takes its
 * version there, once the batch is written) may block, and stores the
 * floor itself; an actor's loop may not, so a versioned query that needs
 * a first version answers EBUSY. Neither can happen in practice: with the
 * default reserve (2^24) the background write has 2^23 versions of
 * headroom, minutes of commits at this machine's 200k/s, against the
 * milliseconds one synced write takes. A floor that cannot be stored (a
 * failing disk) leaves the versions past it unrevealed: a versioned query
 * answers that error and a versioned commit EUNKNOWN, so no client ever
 * holds a version a later open could hand out again. Storing a floor
 * instead of each version keeps commits free of extra writes; an epoch
 * per open in the high bits would have worked too, but it halves the
 * counter's range and changes every version's shape for nothing.
 *
 * Read-only tables store no floor: the counter stays at the stored one,
 * which is also the limit, and nothing hands a version out (the calls
 * that would are EREADONLY, troupe__tables_writable), so a version of the
 * read-write node that holds the database can never be repeated here.
 */

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

/* meta ("versions") = [1, floor] */
static troupe_err
vers_key(troupe_key_writer *w)
{
    troupe_key_writer_init(w);
    return troupe_key_put_string(w, "versions", 8);
}

troupe_err
troupe__tables_floor_parse(const void *v, size_t len, uint64_t *floor)
{
    troupe_reader r;
    uint64_t ver = 0, f = 0;
    troupe_reader_init(&r, v, len);
    troupe_read_array_n(&r, 2);
    troupe_read_uint(&r, &ver);
    troupe_read_uint(&r, &f);
    if (troupe_read_end(&r) != TROUPE_OK || ver != 1)
        return TROUPE_ECORRUPT;
    *floor = f;
    return TROUPE_OK;
}

/* The stored floor; 0 for a database that has none yet. */
static troupe_err
vers_load(troupe_tables *t, uint64_t *floor)
{
    troupe_key_writer w;
    void *v = NULL;
    size_t vlen = 0;
    *floor = 0;
    troupe_err ke = vers_key(&w);
    troupe_err e = troupe__meta_get(t->cat, &w, ke, &v, &vlen);
    if (e == TROUPE_ENOENT)
        return TROUPE_OK;
    if (e != TROUPE_OK)
        return e;
    e = troupe__tables_floor_parse(v, vlen, floor);
    troupe_free(v);
    return e;
}

/* Stores floor `f` (synced). Blocks. */
static troupe_err
vers_store(troupe_tables *t, uint64_t f)
{
    troupe_key_writer w;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, f);
    troupe_err ke = vers_key(&w);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    troupe__meta_batch m;
    troupe__meta_begin(&m, t->cat);
    if (p.err != TROUPE_OK)
        m.err = p.err;
    troupe__meta_put_key(&m, &w, ke, d, n);
    troupe_pack_fini(&p);
    return troupe__meta_commit(&m, TROUPE_SYNC_ON);
}

/* Moves the floor to `reserve` past the counter. Called with v->mu. */
static troupe_err
vers_raise_locked(tversions *v)
{
    uint64_t seq = atomic_load(&v->seq);
    uint64_t to = seq > UINT64_MAX - v->reserve ? UINT64_MAX : seq + v->reserve;
    if (to <= atomic_load(&v->limit))
        return TROUPE_OK; /* raised meanwhile */
    troupe_err e = vers_store(v->t, to);
    atomic_store(&v->err, (int)e);
    if (e == TROUPE_OK)
        atomic_store(&v->limit, to);
    return e;
}

/* Whether the counter at `cur` is in the upper half of the reservation. */
static bool
vers_low(const tversions *v, uint64_t cur)
{
    uint64_t lim = atomic_load(&v->limit);
    return cur >= lim || lim - cur <= v->reserve / 2;
}

static void
vers_raise_work(void *arg)
{
    tversions *v = arg;
    pthread_mutex_lock(&v->mu);
    if (vers_low(v, atomic_load(&v->seq)))
        vers_raise_locked(v);
    pthread_mutex_unlock(&v->mu);
    atomic_store(&v->raising, false);
}

static void
vers_raise_done(void *arg, troupe_runtime *rt)
{
    (void)rt;
    troupe__tables_ddl_dec(((tversions *)arg)->t);
}

/* Queues the background raise once the counter is in the upper half
 * (only while the tables run: a stop waits for one already queued). */
static void
vers_kick(tversions *v, uint64_t cur)
{
    bool idle = false;
    if (!vers_low(v, cur) ||
        !atomic_compare_exchange_strong(&v->raising, &idle, true))
        return;
    troupe_tables *t = v->t;
    pthread_mutex_lock(&t->mu);
    bool run = t->state == TABLES_RUNNING;
    if (run)
        t->ddl_jobs++;
    pthread_mutex_unlock(&t->mu);
    if (run && troupe_runtime_work(t->rt, vers_raise_work, vers_raise_done,
                                   v) == TROUPE_OK)
        return;
    atomic_store(&v->raising, false);
    if (run)
        troupe__tables_ddl_dec(t);
}

uint64_t
troupe__vers_take(tversions *v)
{
    uint64_t ver = atomic_fetch_add(&v->seq, 1) + 1;
    vers_kick(v, ver);
    if (ver < atomic_load(&v->limit))
        return ver;
    pthread_mutex_lock(&v->mu);
    if (ver >= atomic_load(&v->limit))
        vers_raise_locked(v);
    pthread_mutex_unlock(&v->mu);
    return ver;
}

uint64_t
troupe__vers_try(tversions *v)
{
    uint64_t ver = atomic_fetch_add(&v->seq, 1) + 1;
    vers_kick(v, ver);
    return ver < atomic_load(&v->limit) ? ver : 0;
}

uint64_t
troupe__vers_now(tversions *v)
{
    return atomic_load(&v->seq);
}

troupe_err
troupe__vers_check(tversions *v, uint64_t ver)
{
    if (ver < atomic_load(&v->limit))
        return TROUPE_OK;
    troupe_err e = (troupe_err)atomic_load(&v->err);
    return e != TROUPE_OK ? e : TROUPE_EBUSY;
}

troupe_err
troupe__vers_open(troupe_tables *t)
{
    uint64_t f = 0;
    troupe_err e = vers_load(t, &f);
    if (e != TROUPE_OK)
        return e;
    atomic_store(&t->vers.seq, f);
    atomic_store(&t->vers.limit, f);
    if (troupe_catalog_read_only(t->cat))
        return TROUPE_OK; /* no floor moves: no version is handed out */
    pthread_mutex_lock(&t->vers.mu);
    e = vers_raise_locked(&t->vers);
    pthread_mutex_unlock(&t->vers.mu);
    return e;
}

void
troupe__tables_txn_enter(ttables_shared *ts, tversions *vers, ttxn_active *a)
{
    pthread_mutex_lock(&ts->mu);
    a->seq0 = troupe__vers_now(vers);
    a->next = NULL;
    a->prev = ts->tail;
    if (ts->tail != NULL)
        ts->tail->next = a;
    else
        ts->head = a;
    ts->tail = a;
    pthread_mutex_unlock(&ts->mu);
}

void
troupe__tables_txn_leave(ttables_shared *ts, ttxn_active *a)
{
    pthread_mutex_lock(&ts->mu);
    if (a->prev != NULL)
        a->prev->next = a->next;
    else
        ts->head = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    else
        ts->tail = a->prev;
    a->prev = a->next = NULL;
    pthread_mutex_unlock(&ts->mu);
}

uint64_t
troupe__tables_txn_oldest(ttables_shared *ts)
{
    pthread_mutex_lock(&ts->mu);
    uint64_t v = ts->head != NULL ? ts->head->seq0 : UINT64_MAX;
    pthread_mutex_unlock(&ts->mu);
    return v;
}
