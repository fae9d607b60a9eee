/*
 * The pull endpoint: a host's ready queue, its wake fd and its notifier.
 *
 * The ready queue is a ring of task ids under the endpoint's lock; a host
 * pulls in batches, so one lock per batch. A task is taken by moving its
 * slot from READY to COPYING (target.c's state word), copied into the
 * host's buffer with nothing else able to touch it (the deadline and a
 * stop settle only READY or TAKEN slots), then made TAKEN. An id whose
 * slot has moved on (settled by its deadline or a stop while it waited)
 * fails that move and is skipped: the ring holds such stale ids until a
 * pull or a compaction passes them, and a compaction whenever the ring
 * fills keeps it within twice the credit of the endpoint's targets.
 *
 * Wake, edge-triggered: the fd is written when a push finds the ring
 * empty and a pull has found it empty since the last write (need_wake).
 * So a host that drains until a pull finds nothing, then waits on the fd,
 * never misses a task. It may find the fd readable with nothing to pull:
 * a push's write can land after a pull already took what it announced
 * (the write happens outside the lock), so a wake is a hint to drain,
 * never proof that a record is queued. Why an
 * eventfd and not a pipe: one fd, a counter that a read resets, no buffer
 * to fill. The optional wake callback runs on a thread of its own that
 * holds no lock and that nothing waits for (HOSTS.md: a Node callback
 * from a foreign thread blocks that thread until JS runs it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "disp.h"
#include "rt.h"
#include "troupe/internal/runtime.h"

#define HOST_TARGETS_MAX 65535u

struct troupe_host {
    troupe_runtime *rt;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* blocking pulls */
    unsigned waiting;
    uint64_t *ring;
    size_t cap, head, n;
    bool need_wake;
    bool closed;
    /* mu: pushes that write the wake after unlocking mu; destroy waits
     * for them (a push's task may be settled, and the host closed, before
     * its wake is written) */
    unsigned notifying;
    int efd;
    troupe_target **targets; /* [index]: 1..ntab-1; NULL where free */
    uint32_t ntab;
    uint32_t attached;
    uint64_t credit_sum;
    /* notifier */
    pthread_mutex_t nmu;
    pthread_cond_t ncond;
    void (*wake_fn)(void *);
    void *wake_arg;
    bool pending, in_call, nquit, nstarted;
    pthread_t nthread;
    /* completions (mu): a FIFO of records ahead of the ring */
    troupe__completion *cq_head, *cq_tail;
    uint32_t c_reserved; /* reserved, not yet pulled or dropped */
    uint64_t c_bytes;    /* bytes of the queued ones */
    uint32_t c_max;
    uint64_t c_bytes_max;
};

struct troupe__completion {
    troupe__completion *next;
    troupe_host *h;
    size_t size; /* of rec */
    uint8_t rec[];
};

#define COMPLETION_MIN                                                         \
    TROUPE_HOST_RECORD_SIZE(8u, 0u) /* header: i32 status, u32 0 */

troupe_err
troupe_host_open(troupe_runtime *rt, const troupe_host_opts *o,
                 troupe_host **out)
{
    if (out != NULL)
        *out = NULL;
    if (rt == NULL || out == NULL || (o != NULL && o->reserved != 0))
        return troupe__errf(TROUPE_EINVAL, "host open: NULL argument or "
                                           "reserved option set");
    troupe_host *h = troupe_calloc(1, sizeof(*h));
    if (h == NULL)
        return TROUPE_ENOMEM;
    h->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (h->efd < 0) {
        troupe_free(h);
        return troupe__errf(TROUPE_ESYS, "host open: eventfd: %s",
                            strerror(errno));
    }
    h->rt = rt;
    h->need_wake = true;
    h->c_max = 4096;
    h->c_bytes_max = 64u << 20;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->nmu, NULL);
    pthread_cond_init(&h->ncond, NULL);
    *out = h;
    return TROUPE_OK;
}

int
troupe_host_wake_fd(const troupe_host *h)
{
    return h != NULL ? h->efd : -1;
}

const char *
troupe_host_target_name(const troupe_host *h, uint32_t index)
{
    if (h == NULL)
        return NULL;
    troupe_host *m = (troupe_host *)h;
    pthread_mutex_lock(&m->mu);
    const char *name =
        index < m->ntab && m->targets[index] ? m->targets[index]->name : NULL;
    pthread_mutex_unlock(&m->mu);
    return name;
}

/* ---- targets ---------------------------------------------------------- */

troupe_err
troupe__host_attach(troupe_host *h, troupe_target *t)
{
    pthread_mutex_lock(&h->mu);
    if (h->closed) {
        pthread_mutex_unlock(&h->mu);
        return troupe__errf(TROUPE_ESTATE, "target on a closed host");
    }
    uint32_t i = 1;
    while (i < h->ntab && h->targets[i] != NULL)
        i++;
    if (i >= h->ntab) {
        if (h->ntab > HOST_TARGETS_MAX) {
            pthread_mutex_unlock(&h->mu);
            return troupe__errf(TROUPE_EFULL, "host: %u targets at most",
                                HOST_TARGETS_MAX);
        }
        uint32_t nt = h->ntab ? 2 * h->ntab : 8;
        if (nt > HOST_TARGETS_MAX + 1)
            nt = HOST_TARGETS_MAX + 1;
        troupe_target **a = troupe_realloc(h->targets, nt * sizeof(*a));
        if (a == NULL) {
            pthread_mutex_unlock(&h->mu);
            return TROUPE_ENOMEM;
        }
        memset(a + h->ntab, 0, (nt - h->ntab) * sizeof(*a));
        h->targets = a;
        h->ntab = nt;
    }
    h->targets[i] = t;
    t->hidx = i;
    h->attached++;
    h->credit_sum += t->credit;
    pthread_mutex_unlock(&h->mu);
    return TROUPE_OK;
}

void
troupe__host_detach(troupe_host *h, troupe_target *t)
{
    pthread_mutex_lock(&h->mu);
    if (t->hidx < h->ntab && h->targets[t->hidx] == t) {
        h->targets[t->hidx] = NULL;
        h->attached--;
        h->credit_sum -= t->credit;
    }
    pthread_mutex_unlock(&h->mu);
}

/* ---- the ring ---------------------------------------------------------- */

/* Whether id still names a ready task (h->mu held). */
static bool
still_ready(troupe_host *h, uint64_t id)
{
    uint32_t hi = ID_HIDX(id), si = ID_SLOT(id);
    if (hi >= h->ntab || h->targets[hi] == NULL)
        return false;
    troupe_target *t = h->targets[hi];
    if (si >= t->credit)
        return false;
    return atomic_load(&t->slots[si].word) == WORD(ID_GEN(id), SLOT_READY);
}

static bool
ring_push(troupe_host *h, uint64_t id)
{
    if (h->n == h->cap) {
        /* compact into a fresh array, growing if every id is live */
        size_t live = 0;
        for (size_t i = 0; i < h->n; i++)
            if (still_ready(h, h->ring[(h->head + i) % h->cap]))
                live++;
        size_t nc = h->cap ? h->cap : 64;
        if (live + 1 > nc / 2)
            nc *= 2;
        uint64_t *a = troupe_malloc(nc * sizeof(*a));
        if (a == NULL)
            return false;
        size_t k = 0;
        for (size_t i = 0; i < h->n; i++) {
            uint64_t x = h->ring[(h->head + i) % h->cap];
            if (still_ready(h, x))
                a[k++] = x;
        }
        troupe_free(h->ring);
        h->ring = a;
        h->cap = nc;
        h->head = 0;
        h->n = k;
    }
    h->ring[(h->head + h->n) % h->cap] = id;
    h->n++;
    return true;
}

static void
notify(troupe_host *h)
{
    uint64_t one = 1;
    ssize_t r = write(h->efd, &one, sizeof(one));
    (void)r; /* EAGAIN: the counter is readable already */
    pthread_mutex_lock(&h->nmu);
    if (h->wake_fn != NULL) {
        h->pending = true;
        pthread_cond_signal(&h->ncond);
    }
    pthread_mutex_unlock(&h->nmu);
}

/* After a push into an empty queue (h->mu held; unlocks it): the wake. */
static void
pushed_unlock(troupe_host *h, bool was_empty)
{
    bool wake = was_empty && h->need_wake;
    if (wake) {
        h->need_wake = false;
        h->notifying++;
    }
    if (h->waiting > 0)
        pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->mu);
    if (wake) {
        notify(h);
        pthread_mutex_lock(&h->mu);
        if (--h->notifying == 0 && h->closed)
            pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->mu);
    }
}

troupe_err
troupe__host_push(troupe_host *h, uint64_t id)
{
    pthread_mutex_lock(&h->mu);
    if (h->closed) {
        pthread_mutex_unlock(&h->mu);
        return TROUPE_ECLOSED;
    }
    bool was_empty = h->n == 0 && h->cq_head == NULL;
    if (!ring_push(h, id)) {
        pthread_mutex_unlock(&h->mu);
        return TROUPE_ENOMEM;
    }
    pushed_unlock(h, was_empty);
    return TROUPE_OK;
}

/* ---- pulls ------------------------------------------------------------- */

static void
put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t
record_write(uint8_t *p, uint64_t id, uint32_t hidx, const tslot *s)
{
    put_le(p, id, 8);
    put_le(p + 8, hidx, 4);
    put_le(p + 12, (uint64_t)s->kind, 2);
    put_le(p + 14, s->header_len, 2);
    put_le(p + 16, s->attempt, 4);
    put_le(p + 20, s->body_len, 4);
    put_le(p + 24, (uint64_t)s->deadline_ms, 8);
    size_t off = TROUPE_HOST_RECORD_FIXED;
    memcpy(p + off, s->data, s->header_len + s->body_len);
    off += s->header_len + s->body_len;
    size_t size = TROUPE_HOST_RECORD_SIZE(s->header_len, s->body_len);
    memset(p + off, 0, size - off);
    return size;
}

/* Tasks taken (COPYING) and placed in the caller's buffer under h->mu,
 * copied with it unlocked: a push waits for the lock only while ids come
 * off the ring, not while bytes are copied. A COPYING task stays in its
 * slot (neither the deadline nor a reply settles it), and its target
 * cannot go (its stop waits for the task's credit). */
#define COPY_RUN 64
typedef struct copy_out {
    uint64_t id;
    uint32_t hidx;
    tslot *s;
    size_t off;
} copy_out;

/* Copies the run out (h->mu held on entry and on return, dropped
 * between), each task TAKEN once its record is written. cp keeps the
 * run's ids (for a close that came meanwhile), its unused tail zeroed. */
static void
copy_unlocked(troupe_host *h, uint8_t *p, copy_out *cp, size_t k,
              uint64_t *min_due)
{
    pthread_mutex_unlock(&h->mu);
    for (size_t i = 0; i < k; i++) {
        tslot *s = cp[i].s;
        record_write(p + cp[i].off, cp[i].id, cp[i].hidx, s);
        if (*min_due == 0 || s->due_ns < *min_due)
            *min_due = s->due_ns;
        atomic_store(&s->word, WORD(ID_GEN(cp[i].id), SLOT_TAKEN));
    }
    for (size_t i = k; i < COPY_RUN; i++)
        cp[i].s = NULL;
    pthread_mutex_lock(&h->mu);
}

/* Reads the fd back to not readable (h->mu held: the ring is empty). */
static void
rearm(troupe_host *h)
{
    h->need_wake = true;
    uint64_t v;
    ssize_t r = read(h->efd, &v, sizeof(v));
    (void)r; /* EAGAIN: not readable */
}

static void
deadline_after(struct timespec *ts, int ms)
{
    uint64_t at = troupe__mono_ns() + (uint64_t)ms * 1000000u;
    ts->tv_sec = (time_t)(at / 1000000000u);
    ts->tv_nsec = (long)(at % 1000000000u);
}

troupe_err
troupe_host_next_batch(troupe_host *h, int timeout_ms, void *buf, size_t cap,
                       size_t max, size_t *n_out, size_t *len_out)
{
    if (n_out != NULL)
        *n_out = 0;
    if (len_out != NULL)
        *len_out = 0;
    if (h == NULL || (buf == NULL && cap > 0) || n_out == NULL ||
        len_out == NULL || timeout_ms < 0)
        return troupe__errf(TROUPE_EINVAL, "host next: NULL argument or "
                                           "negative timeout");
    if (timeout_ms > 0) {
        troupe_err be = troupe__block_check("troupe_host_next");
        if (be != TROUPE_OK)
            return be;
    }
    uint8_t *p = buf;
    size_t off = 0, n = 0;
    troupe_target *big = NULL;
    uint64_t big_id = 0;
    size_t big_need = 0, c_need = 0;
    troupe__completion *pulled = NULL, **ptail = &pulled;
    uint64_t min_due = 0;
    copy_out cp[COPY_RUN];
    size_t ncp = 0;
    bool closed_mid = false;
    struct timespec until;
    if (timeout_ms > 0)
        deadline_after(&until, timeout_ms);
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (h->closed) {
            pthread_mutex_unlock(&h->mu);
            return TROUPE_ECLOSED;
        }
        while (n < max && h->cq_head != NULL) {
            troupe__completion *c = h->cq_head;
            if (off + c->size > cap) {
                if (n == 0)
                    c_need = c->size;
                break;
            }
            memcpy(p + off, c->rec, c->size);
            off += c->size;
            n++;
            h->cq_head = c->next;
            if (h->cq_head == NULL)
                h->cq_tail = NULL;
            h->c_reserved--;
            h->c_bytes -= c->size;
            c->next = NULL;
            *ptail = c;
            ptail = &c->next;
        }
        while (n < max && c_need == 0 && h->cq_head == NULL && h->n > 0) {
            uint64_t id = h->ring[h->head];
            uint32_t hi = ID_HIDX(id);
            troupe_target *t = hi < h->ntab ? h->targets[hi] : NULL;
            tslot *s = t != NULL ? troupe__task_take(t, id) : NULL;
            if (s == NULL) { /* settled meanwhile: stale */
                h->head = (h->head + 1) % h->cap;
                h->n--;
                continue;
            }
            size_t size = TROUPE_HOST_RECORD_SIZE(s->header_len, s->body_len);
            if (off + size > cap) {
                if (n > 0) { /* next time */
                    atomic_store(&s->word, WORD(ID_GEN(id), SLOT_READY));
                    break;
                }
                h->head = (h->head + 1) % h->cap;
                h->n--;
                big = t;
                big_id = id;
                big_need = size;
                troupe__target_retain(t);
                break;
            }
            h->head = (h->head + 1) % h->cap;
            h->n--;
            cp[ncp++] = (copy_out){id, hi, s, off};
            off += size;
            n++;
            if (ncp == COPY_RUN) {
                copy_unlocked(h, p, cp, ncp, &min_due);
                ncp = 0;
                if (h->closed) {
                    closed_mid = true;
                    break;
                }
            }
        }
        if (ncp > 0) {
            copy_unlocked(h, p, cp, ncp, &min_due);
            ncp = 0;
            closed_mid = h->closed;
        }
        if (closed_mid)
            break;
        if (n > 0 || big != NULL || c_need > 0)
            break;
        if (h->n == 0 && h->cq_head == NULL)
            rearm(h);
        if (timeout_ms == 0)
            break;
        h->waiting++;
        int r = pthread_cond_timedwait(&h->cond, &h->mu, &until);
        h->waiting--;
        if (r == ETIMEDOUT && h->n == 0 && h->cq_head == NULL)
            break;
    }
    pthread_mutex_unlock(&h->mu);
    if (closed_mid) {
        /* the close may have passed the last run while it was being
         * copied (a COPYING task is not abandoned): settled here */
        for (size_t i = 0; i < COPY_RUN && cp[i].s != NULL; i++)
            troupe__task_settle(cp[i].s->t, cp[i].id, SLOT_TAKEN,
                                TROUPE_OUTCOME_UNKNOWN, NULL, 0, false);
        n = 0;
        off = 0;
    }
    while (pulled != NULL) {
        troupe__completion *c = pulled;
        pulled = c->next;
        troupe_free(c);
    }
    *n_out = n;
    *len_out = off;
    if (closed_mid)
        return TROUPE_ECLOSED;
    if (c_need > 0) {
        *len_out = c_need;
        return troupe__errf(TROUPE_ETOOBIG,
                            "host next: the next completion needs %zu "
                            "bytes, the buffer holds %zu; it stays first",
                            c_need, cap);
    }
    /* A task copied while the deadline thread passed it (it skips a slot
     * being copied) may be overdue now: the thread looks again. */
    if (min_due != 0 && min_due <= troupe__mono_ns() && h->rt->disp != NULL)
        troupe__disp_due(h->rt->disp, min_due);
    if (big != NULL) {
        troupe__task_settle(big, big_id, SLOT_COPYING, TROUPE_OUTCOME_UNKNOWN,
                            NULL, 0, false);
        troupe__target_release(big);
        *len_out = big_need;
        return troupe__errf(TROUPE_ETOOBIG,
                            "host next: the next task needs %zu bytes, the "
                            "buffer holds %zu; it settled UNKNOWN",
                            big_need, cap);
    }
    return TROUPE_OK;
}

troupe_err
troupe_host_next(troupe_host *h, int timeout_ms, void *buf, size_t cap,
                 size_t *len)
{
    size_t n;
    return troupe_host_next_batch(h, timeout_ms, buf, cap, 1, &n, len);
}

/* ---- replies ----------------------------------------------------------- */

/* t, retained, for a task id of h: NULL when none. */
static troupe_target *
target_of(troupe_host *h, uint64_t id)
{
    uint32_t hi = ID_HIDX(id);
    pthread_mutex_lock(&h->mu);
    troupe_target *t = hi < h->ntab ? h->targets[hi] : NULL;
    if (t != NULL)
        troupe__target_retain(t);
    pthread_mutex_unlock(&h->mu);
    return t;
}

/* Settles one reply for t (retained by the caller), its freed slot into
 * acc: OK, or why it was refused (nothing changed, or the task settled
 * UNKNOWN for a bad outcome or body). */
static troupe_err
reply_one(troupe_target *t, uint64_t id, uint32_t outcome, const void *body,
          size_t len, troupe__settled *acc)
{
    troupe_err e = TROUPE_OK;
    troupe_outcome o = (troupe_outcome)outcome;
    if (outcome < TROUPE_OUTCOME_SUCCESS || outcome > TROUPE_OUTCOME_UNKNOWN) {
        e = troupe__errf(TROUPE_EINVAL,
                         "host reply: outcome %u is undefined; the task "
                         "settled UNKNOWN",
                         outcome);
        o = TROUPE_OUTCOME_UNKNOWN;
        body = NULL;
        len = 0;
    } else if (len > TROUPE_TASK_BODY_MAX) {
        e = troupe__errf(TROUPE_ETOOBIG,
                         "host reply: body of %zu bytes, at most %u; the "
                         "task settled UNKNOWN",
                         len, TROUPE_TASK_BODY_MAX);
        o = TROUPE_OUTCOME_UNKNOWN;
        body = NULL;
        len = 0;
    }
    if (troupe__task_settle_into(t, id, SLOT_TAKEN, o, body, len, acc)) {
        if (e == TROUPE_EINVAL)
            atomic_fetch_add_explicit(&t->st_bad, 1, memory_order_relaxed);
        return e;
    }
    atomic_fetch_add_explicit(&t->st_late, 1, memory_order_relaxed);
    uint32_t si = ID_SLOT(id);
    if (si < t->credit && atomic_load(&t->slots[si].timeout_gen) == ID_GEN(id))
        return troupe__errf(TROUPE_ETIMEDOUT,
                            "host reply: task %llu passed its deadline and "
                            "settled UNKNOWN; reply refused",
                            (unsigned long long)id);
    return troupe__errf(TROUPE_ENOENT,
                        "host reply: task %llu is not in this host's hands",
                        (unsigned long long)id);
}

static troupe_err
no_task(uint64_t id)
{
    return troupe__errf(TROUPE_ENOENT, "host reply: no task %llu",
                        (unsigned long long)id);
}

troupe_err
troupe_host_reply(troupe_host *h, uint64_t id, uint32_t outcome,
                  const void *body, size_t len)
{
    if (h == NULL || (body == NULL && len > 0))
        return troupe__errf(TROUPE_EINVAL, "host reply: NULL argument");
    troupe_target *t = target_of(h, id);
    if (t == NULL)
        return no_task(id);
    troupe__settled acc = {.n = 0};
    troupe_err e = reply_one(t, id, outcome, body, len, &acc);
    troupe__task_settled_flush(t, &acc);
    troupe__target_release(t);
    return e;
}

/* The records of one target settle together (troupe__settled): a batch
 * costs one lock of h per run of one target's records, one of the target
 * per TROUPE__SETTLED_BATCH slots freed, and one kick of its producers. */
troupe_err
troupe_host_reply_batch(troupe_host *h, const void *buf, size_t len,
                        size_t *done, size_t *refused)
{
    if (done != NULL)
        *done = 0;
    if (refused != NULL)
        *refused = 0;
    if (h == NULL || (buf == NULL && len > 0) || done == NULL ||
        refused == NULL)
        return troupe__errf(TROUPE_EINVAL, "host reply batch: NULL argument");
    const uint8_t *p = buf;
    size_t off = 0;
    troupe_target *t = NULL;
    uint32_t t_hi = 0;
    troupe__settled acc = {.n = 0};
    troupe_err e = TROUPE_OK;
    while (off < len) {
        if (len - off < 16) {
            e = troupe__errf(TROUPE_EPROTO,
                             "host reply batch: a record cut at byte %zu", off);
            break;
        }
        uint64_t id = get_le(p + off, 8);
        uint32_t o = (uint32_t)get_le(p + off + 8, 4);
        uint32_t bl = (uint32_t)get_le(p + off + 12, 4);
        size_t size = ((size_t)16 + bl + 7u) & ~(size_t)7u;
        if ((size_t)16 + bl > len - off) { /* the last may skip padding */
            e = troupe__errf(TROUPE_EPROTO,
                             "host reply batch: a body past the end at "
                             "byte %zu",
                             off);
            break;
        }
        if (t == NULL || ID_HIDX(id) != t_hi) {
            if (t != NULL) {
                troupe__task_settled_flush(t, &acc);
                troupe__target_release(t);
            }
            t = target_of(h, id);
            t_hi = ID_HIDX(id);
        }
        if (t != NULL &&
            reply_one(t, id, o, p + off + 16, bl, &acc) == TROUPE_OK)
            (*done)++;
        else
            (*refused)++;
        off += size < len - off ? size : len - off;
    }
    if (t != NULL) {
        troupe__task_settled_flush(t, &acc);
        troupe__target_release(t);
    }
    return e;
}

/* ---- wake callback ----------------------------------------------------- */

static void *
notifier_main(void *arg)
{
    troupe_host *h = arg;
    pthread_mutex_lock(&h->nmu);
    while (!h->nquit) {
        if (!h->pending || h->wake_fn == NULL) {
            pthread_cond_wait(&h->ncond, &h->nmu);
            continue;
        }
        h->pending = false;
        void (*fn)(void *) = h->wake_fn;
        void *a = h->wake_arg;
        h->in_call = true;
        pthread_mutex_unlock(&h->nmu);
        fn(a);
        pthread_mutex_lock(&h->nmu);
        h->in_call = false;
        pthread_cond_broadcast(&h->ncond);
    }
    pthread_mutex_unlock(&h->nmu);
    return NULL;
}

troupe_err
troupe_host_set_wake(troupe_host *h, void (*fn)(void *arg), void *arg)
{
    if (h == NULL)
        return troupe__errf(TROUPE_EINVAL, "host set wake: NULL host");
    pthread_mutex_lock(&h->nmu);
    if (h->nstarted && pthread_equal(pthread_self(), h->nthread)) {
        pthread_mutex_unlock(&h->nmu);
        return troupe__errf(TROUPE_EDEADLK,
                            "host set wake: called from the wake callback");
    }
    if (fn != NULL) {
        pthread_mutex_lock(&h->mu);
        bool closed = h->closed;
        pthread_mutex_unlock(&h->mu);
        if (closed) {
            pthread_mutex_unlock(&h->nmu);
            return troupe__errf(TROUPE_ESTATE, "host set wake: closed");
        }
        if (!h->nstarted) {
            if (pthread_create(&h->nthread, NULL, notifier_main, h) != 0) {
                pthread_mutex_unlock(&h->nmu);
                return troupe__errf(TROUPE_ESYS, "host set wake: no thread: %s",
                                    strerror(errno));
            }
            h->nstarted = true;
        }
    }
    h->wake_fn = fn;
    h->wake_arg = arg;
    /* clearing (or replacing) is a quiescence point for the old fn */
    while (h->in_call)
        pthread_cond_wait(&h->ncond, &h->nmu);
    pthread_mutex_unlock(&h->nmu);
    return TROUPE_OK;
}

/* ---- close ------------------------------------------------------------- */

troupe_err
troupe_host_close(troupe_host *h)
{
    if (h == NULL)
        return troupe__errf(TROUPE_EINVAL, "host close: NULL host");
    troupe_err e = troupe_host_set_wake(h, NULL, NULL);
    if (e != TROUPE_OK)
        return e;
    pthread_mutex_lock(&h->mu);
    if (h->closed) {
        pthread_mutex_unlock(&h->mu);
        return troupe__errf(TROUPE_ESTATE, "host close: closed already");
    }
    h->closed = true;
    pthread_cond_broadcast(&h->cond);
    uint32_t k = 0;
    troupe_target **ts =
        h->attached ? troupe_malloc(h->attached * sizeof(*ts)) : NULL;
    for (uint32_t i = 1; ts != NULL && i < h->ntab; i++)
        if (h->targets[i] != NULL) {
            troupe__target_retain(h->targets[i]);
            ts[k++] = h->targets[i];
        }
    h->n = 0;
    h->head = 0;
    troupe__completion *drop = h->cq_head;
    for (troupe__completion *c = drop; c != NULL; c = c->next)
        h->c_reserved--;
    h->cq_head = h->cq_tail = NULL;
    h->c_bytes = 0;
    pthread_mutex_unlock(&h->mu);
    while (drop != NULL) {
        troupe__completion *c = drop;
        drop = c->next;
        troupe_free(c);
    }
    /* the host went away: what it holds or would have pulled is UNKNOWN
     * (without memory for the list, the deadlines settle them) */
    for (uint32_t i = 0; i < k; i++) {
        troupe__target_abandon(ts[i]);
        troupe__target_release(ts[i]);
    }
    troupe_free(ts);
    return TROUPE_OK;
}

void
troupe_host_destroy(troupe_host *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    bool ok = h->closed && h->attached == 0 && h->c_reserved == 0;
    while (ok && h->notifying > 0) /* a push's wake in flight: short */
        pthread_cond_wait(&h->cond, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (!ok) {
        fprintf(stderr, "troupe: host_destroy of a host not closed, or with "
                        "targets or completions reserved left\n");
        abort();
    }
    if (h->nstarted) {
        pthread_mutex_lock(&h->nmu);
        h->nquit = true;
        pthread_cond_broadcast(&h->ncond);
        pthread_mutex_unlock(&h->nmu);
        pthread_join(h->nthread, NULL);
    }
    close(h->efd);
    troupe_free(h->ring);
    troupe_free(h->targets);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->ncond);
    pthread_mutex_destroy(&h->nmu);
    troupe_free(h);
}

/* ---- completions ------------------------------------------------------- */

void
troupe__host_completion_limits(troupe_host *h, uint32_t count, uint64_t bytes)
{
    pthread_mutex_lock(&h->mu);
    if (count > 0)
        h->c_max = count;
    if (bytes > 0)
        h->c_bytes_max = bytes;
    pthread_mutex_unlock(&h->mu);
}

/* The record of c for status and a body of len bytes (c->rec has room). */
static void
completion_fill(troupe__completion *c, uint64_t id, troupe_err status,
                const void *body, size_t len)
{
    uint8_t *p = c->rec;
    put_le(p, id, 8);
    put_le(p + 8, 0, 4);
    put_le(p + 12, TROUPE_TASK_COMPLETION, 2);
    put_le(p + 14, 8, 2);
    put_le(p + 16, 0, 4);
    put_le(p + 20, len, 4);
    put_le(p + 24, 0, 8);
    put_le(p + 32, (uint32_t)(int32_t)status, 4);
    put_le(p + 36, 0, 4);
    if (len > 0)
        memcpy(p + 40, body, len);
    c->size = TROUPE_HOST_RECORD_SIZE(8u, len);
    memset(p + 40 + len, 0, c->size - 40 - len);
}

troupe_err
troupe__completion_reserve(troupe_host *h, uint64_t id,
                           troupe__completion **out)
{
    *out = NULL;
    troupe__completion *c = troupe_malloc(sizeof(*c) + COMPLETION_MIN);
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->next = NULL;
    c->h = h;
    completion_fill(c, id, TROUPE_OK, NULL, 0);
    pthread_mutex_lock(&h->mu);
    troupe_err e = TROUPE_OK;
    if (h->closed)
        e = troupe__errf(TROUPE_ECLOSED, "request: the node is closing");
    else if (h->c_reserved >= h->c_max)
        e = troupe__errf(TROUPE_EBUSY,
                         "request: %u requests in flight or not pulled "
                         "(the limit): pull completions, then retry",
                         h->c_reserved);
    else if (h->c_bytes >= h->c_bytes_max)
        e = troupe__errf(TROUPE_EBUSY,
                         "request: completions of %llu bytes not pulled "
                         "(limit %llu): pull them, then retry",
                         (unsigned long long)h->c_bytes,
                         (unsigned long long)h->c_bytes_max);
    else
        h->c_reserved++;
    pthread_mutex_unlock(&h->mu);
    if (e != TROUPE_OK) {
        troupe_free(c);
        return e;
    }
    *out = c;
    return TROUPE_OK;
}

void
troupe__completion_cancel(troupe__completion *c)
{
    if (c == NULL)
        return;
    troupe_host *h = c->h;
    pthread_mutex_lock(&h->mu);
    h->c_reserved--;
    if (h->closed && h->c_reserved == 0)
        pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
    troupe_free(c);
}

void
troupe__completion_post(troupe__completion *c, troupe_err status,
                        const void *body, size_t len)
{
    troupe_host *h = c->h;
    uint64_t id = get_le(c->rec, 8);
    if (len > TROUPE__COMPLETION_BODY_MAX) {
        status = TROUPE_ETOOBIG;
        len = 0;
    }
    if (len > 0) {
        troupe__completion *b =
            troupe_realloc(c, sizeof(*c) + TROUPE_HOST_RECORD_SIZE(8u, len));
        if (b != NULL)
            c = b;
        else {
            status = TROUPE_ENOMEM; /* c is intact: an empty one */
            len = 0;
        }
    }
    completion_fill(c, id, status, body, len);
    pthread_mutex_lock(&h->mu);
    if (h->closed) {
        h->c_reserved--;
        pthread_mutex_unlock(&h->mu);
        troupe_free(c);
        return;
    }
    bool was_empty = h->n == 0 && h->cq_head == NULL;
    if (h->cq_tail != NULL)
        h->cq_tail->next = c;
    else
        h->cq_head = c;
    h->cq_tail = c;
    h->c_bytes += c->size;
    pushed_unlock(h, was_empty);
}
