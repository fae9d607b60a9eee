/*
 * Private structures of the dispatch (dispatch.c: the runtime's registry
 * and deadline thread; target.c: targets, task slots, credit, settling,
 * callback mode; host.c: the pull endpoint).
 *
 * Lock order: disp.mu, then host.mu, then target.mu. Nothing calls a
 * producer's done, a kick or a host's wake callback with a lock held.
 */
#ifndef TROUPE_DISP_H
#define TROUPE_DISP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "troupe/internal/dispatch.h"

/* A slot's state word: generation << 8 | state. The generation changes
 * each time the slot is freed, so that an id (which carries it) names
 * one task only. */
enum {
    SLOT_FREE = 0,
    SLOT_READY,    /* submitted: for a host to take, or a callback to run */
    SLOT_COPYING,  /* a host copies it (host.c): nothing else touches it */
    SLOT_TAKEN,    /* a host holds it, or its callback runs */
    SLOT_SETTLING, /* its done runs */
    SLOT_HELD,     /* its producer ends it later */
    SLOT_ENDED     /* its producer ended it while its done still ran */
};

#define WORD(gen, st) (((uint64_t)(gen) << 8) | (uint64_t)(st))
#define WORD_GEN(w) ((uint32_t)((w) >> 8))
#define WORD_ST(w) ((int)((w)&0xffu))

/* id: host index (16 bits, 0 for callback targets) << 48 | slot index
 * (16) << 32 | generation (32). */
#define ID_MAKE(hidx, slot, gen)                                               \
    (((uint64_t)(hidx) << 48) | ((uint64_t)(slot) << 32) | (uint64_t)(gen))
#define ID_HIDX(id) ((uint32_t)((id) >> 48))
#define ID_SLOT(id) ((uint32_t)(((id) >> 32) & 0xffffu))
#define ID_GEN(id) ((uint32_t)(id))

typedef struct tslot {
    _Atomic uint64_t word;
    troupe_target *t;
    uint32_t idx;
    troupe_task_kind kind;
    uint32_t attempt;
    int64_t deadline_ms; /* Unix ms, for the host */
    uint64_t due_ns;     /* monotonic deadline */
    uint8_t *data;       /* header then body */
    size_t header_len, body_len, cap;
    troupe__task_done_fn done;
    void *arg;
    bool timed_out;
    bool was_taken; /* it was TAKEN when it settled (valid in done) */
    /* Callback slots: 1 from submit until the HOST lane job is done with
     * the slot, 2 once a settler left the freeing to that job (the task's
     * credit is back already: target.c); the slot is freed by whichever
     * of the two comes last. */
    _Atomic int running;
    /* the generation the deadline settled last: a late reply to it is
     * ETIMEDOUT, not ENOENT */
    _Atomic uint32_t timeout_gen;
    /* target.mu: in flight, in submit order (so deadline order) */
    struct tslot *prev, *next;
    uint32_t free_next; /* target.mu, while free: idx + 1, 0 ends */
} tslot;

struct troupe_task_reply {
    uint8_t *data;
    size_t len;
};

struct troupe_target {
    troupe_runtime *rt;
    struct troupe__disp *d;
    char *name;
    size_t name_len;
    troupe_task_fn fn;
    void *arg;
    troupe_host *host;
    uint32_t hidx; /* index in the host's table (pull), 0 for callback */
    uint32_t credit;
    /* producers waiting for credit are kicked once this many are free
     * (credit/8, at least 1: credit_put_n) */
    uint32_t kick_free;
    /* slots: credit for pull targets; for callback targets up to twice
     * that, as a callback past its deadline keeps its slot (its bytes)
     * but not its credit until it returns (target.c) */
    uint32_t nslots;
    uint64_t timeout_ns;
    uint32_t timeout_ms;
    _Atomic long refs;
    _Atomic uint32_t held;
    _Atomic bool waiters; /* wait list non-empty */
    pthread_mutex_t mu;
    pthread_cond_t kick_cv; /* mu: a waiter's kick returned */
    tslot *slots;
    uint32_t free_head;        /* mu */
    tslot *first, *last;       /* mu: in flight, oldest first */
    troupe__credit_wait *wait; /* mu */
    bool listed;               /* disp.mu: in the name registry */
    int state;                 /* mu: TGT_* */
    troupe_target_stop_cb stop_cb;
    void *stop_arg;
    struct troupe_target *dnext; /* disp.mu: every live target */
    /* counters */
    _Atomic uint64_t st_submitted, st_settled[5], st_timed_out, st_late, st_bad;
};

enum { TGT_RUNNING = 0, TGT_STOPPING, TGT_STOPPED };

/* The runtime's dispatch: created with the first target. */
struct troupe__disp {
    troupe_runtime *rt;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* the deadline thread sleeps on it */
    struct troupe_target *targets;
    pthread_t thread;
    bool thread_started;
    bool quit;
    /* mu: when the thread wakes next; 0: idle; 1: awake, in a round */
    _Atomic uint64_t sleep_until_ns; /* written under mu; read without */
    bool woken;           /* mu: a deadline came in since the round began */
    troupe_target **scan; /* the thread's: the targets of a round */
    size_t scan_cap;
};

/* dispatch.c */
struct troupe__disp *
troupe__disp_get(troupe_runtime *rt, troupe_err *err);
/* Links t under its name (EEXIST when taken) and into the deadline list. */
troupe_err
troupe__disp_add(struct troupe__disp *d, troupe_target *t);
/* Frees the name (find no longer returns t). */
void
troupe__disp_unlist(struct troupe__disp *d, troupe_target *t);
/* Off the deadline list, before t is freed. */
void
troupe__disp_remove(struct troupe__disp *d, troupe_target *t);
/* t's oldest task in flight now has deadline due_ns: wakes the deadline
 * thread if it sleeps past it. */
void
troupe__disp_due(struct troupe__disp *d, uint64_t due_ns);
uint64_t
troupe__mono_ns(void);
/* At runtime destroy: joins the thread; aborts if a target is left. */
void
troupe__disp_free(troupe_runtime *rt);

/* target.c */
/* Settles the task id of t with outcome if it is in state `from` (or in
 * READY or TAKEN when from is -1): true if this call settled it. */
bool
troupe__task_settle(troupe_target *t, uint64_t id, int from,
                    troupe_outcome outcome, const uint8_t *body, size_t len,
                    bool timed_out);
/* Slots a batch of settles ended, freed together by
 * troupe__task_settled_flush: one lock, one credit give-back and one kick
 * of the waiters for the whole batch instead of one each. */
#define TROUPE__SETTLED_BATCH 64
typedef struct troupe__settled {
    size_t n;
    tslot *s[TROUPE__SETTLED_BATCH];
} troupe__settled;
/* As troupe__task_settle, for a caller that holds a reference on t for
 * the batch: a slot the settle ends goes into acc (flushed when full)
 * instead of being freed at once. */
bool
troupe__task_settle_into(troupe_target *t, uint64_t id, int from,
                         troupe_outcome outcome, const uint8_t *body,
                         size_t len, troupe__settled *acc);
/* Frees the slots in acc (none when empty) and gives their credit back. */
void
troupe__task_settled_flush(troupe_target *t, troupe__settled *acc);
/* Settles UNKNOWN every task of t past its deadline at now_ns; returns
 * the next deadline of t (0: none in flight). */
uint64_t
troupe__target_expire(troupe_target *t, uint64_t now_ns);
/* Moves a READY task to COPYING for a host: the slot, or NULL when id no
 * longer names a ready task. The host then stores TAKEN (or READY back
 * when it did not take it after all). */
tslot *
troupe__task_take(troupe_target *t, uint64_t id);
/* Settles UNKNOWN every task of t that is READY or TAKEN (its host went
 * away). */
void
troupe__target_abandon(troupe_target *t);

/* host.c */
/* Queues a ready task for its host: ECLOSED when the host is closed. */
troupe_err
troupe__host_push(troupe_host *h, uint64_t id);
/* A slot index for t in h's table (ESTATE when closing, EFULL when
 * 65535 targets are there). */
troupe_err
troupe__host_attach(troupe_host *h, troupe_target *t);
void
troupe__host_detach(troupe_host *h, troupe_target *t);

#endif
