/*
 * Key versions of one table actor (tstate.vers, a tkeyvers: this file's
 * alone): the map of the version each key got at its last committed
 * write, its publish, its shedding when full, the eviction passes, the
 * version half of a scanned range's conflicts, and the stats reply.
 *
 * The key-version map: the version each key got at its last committed
 * write. A key not in it has version `vfloor`. With a key-version TTL,
 * records older than it are evicted in passes (TTL and counters in
 * docs/data-model.md). The map holds at most VMAP_MAX records: when full,
 * the oldest records no running transaction needs go first, TTL or not
 * (vmap_shed); only when every record is still needed is the map emptied
 * and vfloor raised to the newest version, so a transaction that began
 * before then conflicts on those keys (safe, never a missed conflict).
 *
 * Eviction. Every record is also on an intrusive list in publish order
 * (a publish moves it to the tail), so the head is the oldest publish and
 * a pass looks at no record it will not evict: memory is the records
 * alone, no queue of tokens. A record goes only when its TTL has passed
 * (now >= published + ttl: never early) and its version is <= the seq0 of
 * every running transaction: such a transaction's snapshot already holds
 * that write, so `vfloor` (<= its seq0) answers its checks as well; a
 * newer version is one it still needs to see a conflict. A pass stops at
 * the first record it may not evict yet (the rest are newer) and works in
 * batches of VEVICT_BATCH, each one message to itself, so other requests
 * run between batches.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/hash.h"
#include "troupe/pack.h"

#define VMAP_MAX 65536
/* Records one pass frees when the map is full (see vmap_publish). */
#define VMAP_SHED (VMAP_MAX / 8)
#define VEVICT_BATCH 256

/* Links v at the head of its chain. */
static void
vmap_link(vent **head, vent *v)
{
    v->next = *head;
    if (v->next != NULL)
        v->next->pprev = &v->next;
    v->pprev = head;
    *head = v;
}

void
troupe__keyvers_clear(tstate *s)
{
    for (size_t i = 0; s->vers.vmap != NULL && i < s->vers.vnb; i++) {
        while (s->vers.vmap[i] != NULL) {
            vent *v = s->vers.vmap[i];
            s->vers.vmap[i] = v->next;
            troupe_free(v);
        }
    }
    s->vers.nv = 0;
    s->vers.vbytes = 0;
    s->vers.lhead = s->vers.ltail = NULL;
}

static size_t
vent_bytes(const vent *v)
{
    return sizeof(*v) + v->klen;
}

static void
vlist_unlink(tstate *s, vent *v)
{
    if (v->lprev != NULL)
        v->lprev->lnext = v->lnext;
    else
        s->vers.lhead = v->lnext;
    if (v->lnext != NULL)
        v->lnext->lprev = v->lprev;
    else
        s->vers.ltail = v->lprev;
    v->lprev = v->lnext = NULL;
}

static void
vlist_append(tstate *s, vent *v)
{
    v->lnext = NULL;
    v->lprev = s->vers.ltail;
    if (s->vers.ltail != NULL)
        s->vers.ltail->lnext = v;
    else
        s->vers.lhead = v;
    s->vers.ltail = v;
}

static void
vmap_remove(tstate *s, vent *v);

/* Doubles the buckets once the chains average two records (keeps the
 * old table when memory is short: longer chains, still correct). */
static void
vmap_grow(tstate *s)
{
    if (s->vers.nv < 2 * s->vers.vnb || s->vers.vnb >= VMAP_MAX / 2)
        return;
    size_t nb = s->vers.vnb * 2;
    vent **t = troupe_calloc(nb, sizeof(*t));
    if (t == NULL)
        return;
    for (size_t i = 0; i < s->vers.vnb; i++)
        while (s->vers.vmap[i] != NULL) {
            vent *v = s->vers.vmap[i];
            s->vers.vmap[i] = v->next;
            vmap_link(&t[v->hash & (nb - 1)], v);
        }
    troupe_free(s->vers.vmap);
    s->vers.vmap = t;
    s->vers.vnb = nb;
}

/* The map is full: frees up to VMAP_SHED of the oldest records that no
 * running transaction needs (version <= the oldest one's seq0), as an
 * eviction pass would but without waiting for their TTL. Returns how
 * many went. */
static size_t
vmap_shed(tstate *s)
{
    uint64_t oldest = troupe__tables_txn_oldest(s->cfg.ts);
    size_t n = 0;
    while (n < VMAP_SHED && s->vers.lhead != NULL &&
           s->vers.lhead->ver <= oldest) {
        vmap_remove(s, s->vers.lhead);
        s->vers.vevicted++;
        n++;
    }
    return n;
}

/* Records that key got version ver. A write of a key that has no record
 * (`create` false) and that no running transaction can need (ver <= the
 * oldest one's seq0: each already has the write in its snapshot) makes no
 * record: the floor rises to ver instead. That changes nothing for running
 * transactions (their seq0 >= ver), and no client holds a version of such
 * a key (a versioned query or a versioned commit made a record, and one
 * evicted since conflicts against any floor). So an insert-heavy table
 * without transactions keeps no records at all. A versioned query's first
 * version (`create`) is always recorded: the client holds it. */
void
troupe__keyvers_publish(tstate *s, const void *key, size_t klen, uint64_t ver,
                        int64_t now, bool create)
{
    if (ver > s->vers.vmax)
        s->vers.vmax = ver;
    size_t h = troupe__fnv1a64(key, klen);
    vent *v = troupe__keyvers_find(s, key, klen, h);
    if (v != NULL) {
        v->ver = ver;
        v->pub_ms = now; /* a publish refreshes its TTL */
        vlist_unlink(s, v);
        vlist_append(s, v);
        return;
    }
    if (!create && ver <= troupe__tables_txn_oldest(s->cfg.ts)) {
        if (ver > s->vers.vfloor)
            s->vers.vfloor = ver;
        return;
    }
    if (s->vers.nv >= VMAP_MAX)
        vmap_shed(s);
    v = s->vers.nv < VMAP_MAX ? troupe_malloc(sizeof(*v) + klen) : NULL;
    if (v == NULL) { /* full of needed records (or no memory): every key
                        is new now */
        troupe__keyvers_clear(s);
        s->vers.vfloor = s->vers.vmax;
        return;
    }
    v->ver = ver;
    v->pub_ms = now;
    v->hash = h;
    v->klen = klen;
    memcpy(v->key, key, klen);
    vmap_link(&s->vers.vmap[h & (s->vers.vnb - 1)], v);
    vlist_append(s, v);
    s->vers.nv++;
    s->vers.vbytes += vent_bytes(v);
    vmap_grow(s);
}

/* Removes v from the map and the list. */
static void
vmap_remove(tstate *s, vent *v)
{
    *v->pprev = v->next;
    if (v->next != NULL)
        v->next->pprev = v->pprev;
    vlist_unlink(s, v);
    s->vers.nv--;
    s->vers.vbytes -= vent_bytes(v);
    troupe_free(v);
}

bool
troupe__keyvers_range_stale(const tstate *s, const ttxn_range *r, uint64_t seq0,
                            kset *ks)
{
    static const unsigned char zero = 0;
    if (s->vers.vfloor > seq0) { /* forgotten versions: assume a change */
        if (r->start != NULL)
            troupe__kset_add(ks, r->start, r->slen, TROUPE__PART_STALE);
        else
            troupe__kset_add(ks, &zero, 1, TROUPE__PART_STALE);
        return true;
    }
    for (size_t b = 0; b < s->vers.vnb; b++)
        for (const vent *v = s->vers.vmap[b]; v != NULL; v = v->next)
            if (v->ver > seq0 && troupe__range_has(r, v->key, v->klen)) {
                const klock *l = *troupe__locks_slot(s, v->key, v->klen);
                bool held =
                    l != NULL && (l->whead != NULL ||
                                  (l->running != NULL &&
                                   (l->running->ext ||
                                    atomic_load(&l->running->cver) == 0)));
                troupe__kset_add(ks, v->key, v->klen,
                                 TROUPE__PART_STALE |
                                     (held ? TROUPE__PART_RESERVED : 0));
            }
    return false;
}

/* Evicts up to VEVICT_BATCH records from the head of the publish list. */
static uint32_t
vevict_batch(tstate *s)
{
    uint64_t ttl = s->cfg.ts != NULL ? s->cfg.ts->vttl_ms : 0;
    if (ttl == 0 || s->vers.lhead == NULL)
        return 0;
    int64_t now = s->cfg.clock(s->cfg.clock_ctx);
    uint64_t oldest = troupe__tables_txn_oldest(s->cfg.ts);
    uint32_t n = 0;
    while (n < VEVICT_BATCH && s->vers.lhead != NULL) {
        vent *v = s->vers.lhead;
        if (now < v->pub_ms || (uint64_t)(now - v->pub_ms) < ttl ||
            v->ver > oldest)
            break;
        vmap_remove(s, v);
        s->vers.vevicted++;
        n++;
    }
    return n;
}

static void
vevict_step(troupe_actor *self, tstate *s)
{
    uint32_t n = s->life.closing ? 0 : vevict_batch(s);
    s->vers.ev_total += n;
    if (n > 0)
        s->vers.ev_batches++;
    if (n > s->vers.ev_largest)
        s->vers.ev_largest = n;
    if (n == VEVICT_BATCH && s->vers.lhead != NULL) {
        /* yield: the next batch queues behind what arrived meanwhile */
        troupe_msg *m = NULL;
        if (troupe_msg_create(&m, TABLE_VEVICT_NEXT, NULL, 0) == TROUPE_OK &&
            troupe_runtime_send(troupe_actor_runtime(self), troupe_self(self),
                                &m) == TROUPE_OK)
            return;
    }
    troupe_packer pk;
    troupe_pack_init(&pk);
    troupe_pack_array(&pk, 3);
    troupe_pack_uint(&pk, s->vers.ev_total);
    troupe_pack_uint(&pk, s->vers.ev_batches);
    troupe_pack_uint(&pk, s->vers.ev_largest);
    troupe_body *b = NULL;
    troupe_err e = troupe_pack_take_body(&pk, &b);
    troupe_runtime_reply(troupe_actor_runtime(self), s->vers.ev_asker,
                         s->vers.ev_corr, e, e == TROUPE_OK ? &b : NULL);
    s->vers.evicting = false;
}

troupe_err
troupe__keyvers_h_vevict(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    if (s->life.closing || s->vers.evicting) {
        troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr,
                             s->life.closing ? TROUPE_ECLOSED : TROUPE_EBUSY,
                             NULL);
        return TROUPE_OK;
    }
    s->vers.evicting = true;
    s->vers.ev_asker = m->from;
    s->vers.ev_corr = m->corr;
    s->vers.ev_total = 0;
    s->vers.ev_batches = s->vers.ev_largest = 0;
    vevict_step(self, s);
    return TROUPE_OK;
}

troupe_err
troupe__keyvers_h_vevict_next(troupe_actor *self, void *st, const troupe_msg *m)
{
    (void)m;
    tstate *s = st;
    if (s->vers.evicting)
        vevict_step(self, s);
    return TROUPE_OK;
}

troupe_err
troupe__keyvers_h_stats(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    troupe_packer pk;
    troupe_pack_init(&pk);
    troupe_pack_array(&pk, 3);
    troupe_pack_uint(&pk, s->vers.nv);
    troupe_pack_uint(&pk, s->vers.vbytes);
    troupe_pack_uint(&pk, s->vers.vevicted);
    troupe_body *b = NULL;
    troupe_err e = troupe_pack_take_body(&pk, &b);
    troupe_runtime_reply(troupe_actor_runtime(self), m->from, m->corr, e,
                         e == TROUPE_OK ? &b : NULL);
    return TROUPE_OK;
}

troupe_err
troupe__keyvers_init(tstate *s)
{
    s->vers.vnb = VMAP_BUCKETS_MIN;
    s->vers.vmap = troupe_calloc(s->vers.vnb, sizeof(*s->vers.vmap));
    return s->vers.vmap != NULL ? TROUPE_OK : TROUPE_ENOMEM;
}

void
troupe__keyvers_stop(troupe_actor *self, tstate *s)
{
    troupe__keyvers_clear(s);
    troupe_free(s->vers.vmap);
}
