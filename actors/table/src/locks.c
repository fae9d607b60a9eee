/*
 * Per-key locks of one table actor (tstate.locks, a tlocks: this file's
 * alone): the lock a write holds from its start to its release (later
 * writes of the key wait behind it, in arrival order), the read
 * reservations of prepared transactions (writes wait until they go), and
 * the ranges prepared transactions scanned (a write into one waits, off
 * any lock, until the range is released), with the lock half of a scanned
 * range's conflicts. A lock exists while anything holds or waits for its
 * key, so the buckets hold only keys in use.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/storage.h"

klock *
troupe__locks_get(tstate *s, const void *key, size_t klen)
{
    klock **pp = troupe__locks_slot(s, key, klen);
    if (*pp == NULL) {
        klock *l = troupe_calloc(1, sizeof(*l) + klen);
        if (l == NULL)
            return NULL;
        l->klen = klen;
        memcpy(l->key, key, klen);
        *pp = l;
    }
    return *pp;
}

void
troupe__locks_advance(troupe_actor *self, tstate *s, klock *l)
{
    if (l->rsv > 0)
        return;
    wop *next = l->whead;
    if (next == NULL) {
        klock **pp = troupe__locks_slot(s, l->key, l->klen);
        *pp = l->next;
        troupe_free(l);
        return;
    }
    l->whead = next->next;
    if (l->whead == NULL)
        l->wtail = NULL;
    l->running = next;
    troupe__write_start(self, s, next);
}

troupe_err
troupe__locks_attach(troupe_actor *self, tstate *s, wop *op)
{
    op->next = NULL;
    if (troupe__locks_in_range(s, op->key, op->klen)) {
        if (s->locks.rwait_tail == NULL)
            s->locks.rwait_head = op;
        else
            s->locks.rwait_tail->next = op;
        s->locks.rwait_tail = op;
        return TROUPE_OK;
    }
    klock *l = troupe__locks_get(s, op->key, op->klen);
    if (l == NULL)
        return TROUPE_ENOMEM;
    op->lock = l;
    if (l->running == NULL && l->rsv == 0) {
        l->running = op;
        troupe__write_start(self, s, op);
    } else if (l->wtail == NULL) {
        l->whead = l->wtail = op;
    } else {
        l->wtail->next = op;
        l->wtail = op;
    }
    return TROUPE_OK;
}

void
troupe__locks_rsv_release(troupe_actor *self, tstate *s, klock *l)
{
    if (--l->rsv > 0 || l->running != NULL)
        return;
    troupe__locks_advance(self, s, l);
}

bool
troupe__locks_in_range(const tstate *s, const void *key, size_t klen)
{
    for (const trsv *r = s->locks.ranges; r != NULL; r = r->next)
        for (size_t i = 0; i < r->n; i++)
            if (troupe__range_has(&r->v[i], key, klen))
                return true;
    return false;
}

void
troupe__locks_reserve(tstate *s, trsv *r)
{
    r->pprev = NULL;
    if (r->n == 0)
        return;
    r->next = s->locks.ranges;
    if (r->next != NULL)
        r->next->pprev = &r->next;
    r->pprev = &s->locks.ranges;
    s->locks.ranges = r;
}

void
troupe__locks_unreserve(tstate *s, trsv *r)
{
    (void)s;
    if (r->pprev == NULL)
        return;
    *r->pprev = r->next;
    if (r->next != NULL)
        r->next->pprev = r->pprev;
    r->pprev = NULL;
}

void
troupe__locks_rwait_retry(troupe_actor *self, tstate *s)
{
    wop *w = s->locks.rwait_head;
    s->locks.rwait_head = s->locks.rwait_tail = NULL;
    while (w != NULL) {
        wop *nx = w->next;
        if (troupe__locks_attach(self, s, w) != TROUPE_OK) {
            troupe_runtime_reply(w->rt, w->asker, w->corr, TROUPE_ENOMEM, NULL);
            w->err = TROUPE_ENOMEM;
            if (w->done != NULL)
                w->done(self, s, w);
            troupe__wop_free(w);
        }
        w = nx;
    }
}

void
troupe__locks_range_held(const tstate *s, const ttxn_range *r, uint64_t seq0,
                         kset *ks)
{
    for (size_t b = 0; b < s->locks.nbuckets; b++)
        for (const klock *l = s->locks.buckets[b]; l != NULL; l = l->next) {
            if (!troupe__range_has(r, l->key, l->klen) ||
                troupe__keyvers_get(s, l->key, l->klen) > seq0)
                continue; /* troupe__keyvers_range_stale lists it */
            uint32_t kinds = l->whead != NULL ? TROUPE__PART_RESERVED : 0;
            if (l->running != NULL) {
                uint64_t cv =
                    l->running->ext ? 0 : atomic_load(&l->running->cver);
                kinds |= cv == 0     ? TROUPE__PART_RESERVED
                         : cv > seq0 ? TROUPE__PART_STALE
                                     : 0;
            }
            if (kinds != 0)
                troupe__kset_add(ks, l->key, l->klen, kinds);
        }
}

troupe_err
troupe__locks_init(tstate *s)
{
    s->locks.nbuckets = 256;
    s->locks.buckets =
        troupe_calloc(s->locks.nbuckets, sizeof(*s->locks.buckets));
    return s->locks.buckets != NULL ? TROUPE_OK : TROUPE_ENOMEM;
}

/* Writes still queued behind a key, or behind a reserved range, were
 * never submitted: they fail with ECLOSED. A key's running write is in a
 * worker or the pipeline and answers from there. */
void
troupe__locks_stop(troupe_actor *self, tstate *s)
{
    for (wop *w = s->locks.rwait_head; w != NULL;) {
        wop *nx = w->next;
        troupe__wop_close(w);
        w = nx;
    }
    for (size_t i = 0; i < s->locks.nbuckets; i++) {
        klock *l = s->locks.buckets[i];
        while (l != NULL) {
            klock *ln = l->next;
            for (wop *w = l->whead; w != NULL;) {
                wop *nx = w->next;
                troupe__wop_close(w);
                w = nx;
            }
            troupe_free(l);
            l = ln;
        }
    }
    troupe_free(s->locks.buckets);
}
