/*
 * Private structures of the runtime, shared by its .c files only.
 *
 * Threads: each scheduler is one thread (or the host's thread, for
 * scheduler 0 in embedded mode) running one uv_loop_t. An actor's fields
 * marked "owner" are touched only by its scheduler's thread.
 */
#ifndef TROUPE_RT_H
#define TROUPE_RT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/internal/msg.h"
#include "troupe/runtime.h"

#define TROUPE_MAX_SCHEDULERS 256
#define TROUPE_MAX_WORKERS 256
#define SLOT_PAGE_BITS 12
#define SLOT_PAGE_SIZE (1u << SLOT_PAGE_BITS)
#define SLOT_MAX_PAGES 4096u /* 16M live actors */
#define SLOT_STRIPES 64u
#define TROUPE__SPECK_ROUNDS 27
#define TROUPE__IDS_BATCH 8 /* correlation ids a scheduler makes at once */
/* Bodies up to this size live inside the message's own allocation
 * (msg.c); the mailbox byte bound leaves them to the message bound, as it
 * does headers, so that small sends pay no second atomic. */
#define TROUPE__INLINE_BODY_MAX 64
#define TROUPE__LANES 2

/* The runtime's own flags, in troupe__msg.pflags (internal/msg.h): never
 * in the public flags, so never on the wire; a send clears them. */
#define TROUPE__MSG_INTERNAL (1u << 30) /* kind is an internal op below */
#define TROUPE__MSG_MATCHED (1u << 29)  /* a reply already matched its ask */
/* Arrived from another node (troupe_runtime_deliver): admitted only with
 * a kind declared remote, counted in the network budget, and, if a reply,
 * matched only against an ask sent to the node it claims to come from. */
#define TROUPE__MSG_NET (1u << 28)
/* Its body bytes are counted in the receiver's mailbox byte bound. */
#define TROUPE__MSG_CHARGED (1u << 27)
/* It holds its share of the network budget (from admission to pop). */
#define TROUPE__MSG_NETHELD (1u << 26)
#define TROUPE__MSG_WIRE_FLAGS (TROUPE_MSG_REPLY)
/* What a message from the network costs in the network budget beyond its
 * body: the header it occupies (an empty body is not free). */
#define TROUPE__NET_MSG_COST ((uint64_t)sizeof(troupe__msg))

enum internal_op {
    OP_INIT,        /* first message of every actor */
    OP_STOP,        /* ptr: struct stop_req * or NULL */
    OP_MONITOR,     /* ptr: struct monitor * to add */
    OP_CHILD_DOWN,  /* a supervised child stopped: err = its reason */
    OP_CHILD_FAILED /* a child escalated: fail this actor */
};

struct troupe_body {
    _Atomic uint32_t refs;
    uint32_t adopted;
    size_t len;
    void *data; /* points to inline[] or an adopted allocation */
    max_align_t inline_[];
};

struct slot {
    _Atomic uint32_t gen;
    _Atomic uint32_t sched; /* scheduler of the live actor */
    uint32_t free_next;     /* guarded by slot_lock while the slot is free */
    uint32_t last_gen;      /* slot_lock: the last live generation, which
                               the next one must differ from */
    troupe_actor *_Atomic actor;
};

struct monitor {
    struct monitor *next;
    troupe_addr watcher;
    uint32_t down_kind;
};

struct timer;

struct stop_req {
    troupe_stop_cb cb;
    void *arg;
};

/* Rarely used parts of an actor, allocated on demand (keeps idle actors
 * small: docs/performance.md's actor_idle_bytes holds them to at most
 * 256 bytes each). */
struct actor_ext {
    struct monitor *monitors;
    struct timer *timers;
    troupe_addr supervisor;
    troupe_restart policy;
    uint32_t max_restarts;
    uint32_t window_ms;
    uint32_t restarts;
    uint64_t window_start;
    void (*arg_free)(void *arg);
    struct stop_req *stop_reqs[4]; /* callbacks of troupe_actor_stop */
    uint32_t n_stop_reqs;
};

enum actor_state { A_NEW, A_RUNNING, A_DEAD };

struct sched;

struct troupe_actor {
    troupe_actor *_Atomic qnext; /* run queue / inject link */
    troupe_msg *_Atomic inbox;   /* MPSC stack: senders push, owner grabs */
    troupe_msg *mhead, *mtail;   /* owner: FIFO taken from inbox */
    _Atomic uint32_t count;      /* queued, not yet accounted by a turn */
    _Atomic uint64_t bytes;      /* body bytes of charged queued messages */
    uint64_t byte_cap;           /* their bound (def or runtime default) */
    _Atomic uint32_t stopping;   /* a stop is requested */
    _Atomic uint32_t n_children; /* live supervised children */
    uint32_t slot, gen;
    uint8_t state; /* owner: enum actor_state */
    uint8_t stop_after_children;
    uint16_t pad_;
    const troupe_actor_def *def;
    struct sched *sched;
    troupe_actor *prev, *next; /* owner: scheduler's actor list */
    struct actor_ext *ext;     /* owner, may be NULL */
    void *arg;                 /* init argument (kept for restarts) */
    max_align_t state_[];
};

/* A deferred call run on a scheduler's thread. */
struct ctl {
    struct ctl *next;
    void (*fn)(struct sched *s, void *arg);
    void (*post)(void *arg, troupe_runtime *rt); /* when fn is NULL */
    void *arg;
};

struct pending; /* ask.c */

struct sched {
    troupe_runtime *rt;
    unsigned idx;
    uv_loop_t *loop;
    uv_loop_t own_loop;
    bool embedded;
    pthread_t thread;
    bool thread_started;
    /* Wakeups from other threads: an eventfd polled by the loop, written
     * only when wake_pending was clear (troupe__sched_wake). Not a
     * uv_async_t: its receiver spins while a sender is between its flag
     * and its write, which on a busy 2-core machine was 20% of a
     * scheduler's time. */
    uv_poll_t wake;
    int wake_fd;
    atomic_bool wake_pending;
    uv_idle_t runner;
    bool runner_on;
    troupe_actor *_Atomic inject; /* actors made runnable by other threads */
    troupe_actor *rq_head, *rq_tail;
    troupe_actor *actors; /* newest first */
    _Atomic uint32_t n_actors;
    bool drained;
    /* control queue, guarded by ctl_lock */
    pthread_mutex_t ctl_lock;
    struct ctl *ctl_head, *ctl_tail;
    bool ctl_closed;
    /* asks (ask.c) */
    struct pending **ptab;
    uint32_t ptab_cap, ptab_n;
    struct pending **heap;
    uint32_t heap_n, heap_cap;
    uv_timer_t ask_timer;
    /* correlation ids made ahead (ids.c), high and low words, used from
     * the end */
    uint32_t id_x[TROUPE__IDS_BATCH], id_y[TROUPE__IDS_BATCH];
    unsigned n_ids;
    int n_open_handles;
};

struct job {
    struct job *next;
    void (*fn)(void *);
    void *arg;
    void (*drop)(void *);
    void (*done_cb)(void *, troupe_runtime *);
    troupe_addr target;
    uint32_t done_kind;
    bool counted;   /* counts against the lane's job bound */
    bool adapter;   /* troupe_runtime_work_in: kept at shutdown */
    uint64_t bytes; /* declared by the submitter */
};

/* One lane of the worker pool (work.c): its own threads and queue. */
struct lane {
    troupe_runtime *rt;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct job *head, *tail; /* lock */
    uint32_t jobs;           /* lock: counted jobs queued or running */
    uint64_t bytes;          /* lock: declared bytes queued or running */
    uint32_t max_jobs;
    uint64_t max_bytes;
    bool stopping; /* lock */
    unsigned n;    /* threads started */
    pthread_t *threads;
};

struct workers {
    struct lane lanes[TROUPE__LANES];
    _Atomic unsigned alive; /* threads of every lane not yet exited */
};

struct regent {
    struct regent *next;
    char *name;
    troupe_addr addr;
};

enum rt_phase { RT_RUNNING, RT_CLOSING, RT_DONE };

struct troupe_runtime {
    uint32_t node_id;
    troupe_logger logger; /* opts.logger; read-only after create */
    unsigned n_sched;
    struct sched *scheds;
    _Atomic unsigned rr;
    _Atomic int phase;
    _Atomic uint64_t next_corr; /* counter behind the correlation ids */
    _Atomic uint64_t next_timer;
    /* Round keys of the id cipher (ids.c), from a random key per runtime;
     * read-only after create. */
    uint32_t id_keys[TROUPE__SPECK_ROUNDS];
    /* slots */
    struct slot *_Atomic pages[SLOT_MAX_PAGES];
    pthread_mutex_t slot_lock;
    uint32_t slot_hwm;
    uint64_t gen_ctr;   /* slot_lock: counter behind the generations */
    uint32_t free_head; /* free slots threaded through free_next; 0 = none */
    /* budgets (runtime.h defaults resolved at create) */
    uint64_t mailbox_bytes; /* default per-mailbox byte bound */
    uint64_t net_cap;       /* bound of net_bytes */
    /* network messages still in mailboxes: written by the transport's
     * threads and by every turn that takes one, so padded onto a cache
     * line of its own (padding, not _Alignas: the runtime is calloc'd) */
    char net_pad_a_[64];
    _Atomic uint64_t net_bytes;
    char net_pad_b_[64];
    /* counters (troupe_runtime_stats) */
    _Atomic uint64_t st_refused_kind, st_refused_dead, st_refused_full;
    _Atomic uint64_t st_error_replies, st_error_replies_lost;
    _Atomic uint64_t st_mailbox_full;
    _Atomic uint64_t st_work_refused, st_work_cancelled;
    pthread_mutex_t stripes[SLOT_STRIPES];
    /* remote hook: ctx is stored before ops (release), ops loaded once */
    const troupe_remote_ops *_Atomic remote;
    void *_Atomic remote_ctx;
    /* registry */
    pthread_mutex_t reg_lock;
    struct regent *reg[64];
    /* workers */
    struct workers pool;
    /* dispatch (dispatch.c): created with the first target */
    pthread_mutex_t disp_lock;
    struct troupe__disp *disp;
    /* host asks */
    troupe_actor *proxy;
    troupe_addr proxy_addr;
    /* shutdown */
    _Atomic unsigned n_drained;
    unsigned n_closed;
    bool workers_done;
    troupe_shutdown_cb shutdown_cb;
    void *shutdown_arg;
    pthread_mutex_t done_lock;
    pthread_cond_t done_cond;
    bool done;
};

/* slots (actor.c) */
struct slot *
troupe__slot_get(troupe_runtime *rt, uint32_t idx);
bool
troupe__addr_alive(troupe_runtime *rt, troupe_addr a);
void
troupe__slot_release(troupe_runtime *rt, uint32_t idx);

/* scheduling and delivery (sched.c) */
troupe_err
troupe__post(troupe_runtime *rt, struct sched *from, troupe_addr to,
             troupe_msg **m, bool system);
void
troupe__local_enqueue(troupe_actor *a, troupe_msg *m);
/* Gives back what a message from the network held of the network budget
 * (no-op for others); for whoever takes it out of a mailbox. */
void
troupe__net_release(troupe_runtime *rt, troupe_msg *m);
troupe_err
troupe__ctl(struct sched *s, void (*fn)(struct sched *, void *), void *arg);
/* The same for troupe_runtime_post's callback form. */
troupe_err
troupe__ctl_post(struct sched *s, void (*post)(void *, troupe_runtime *),
                 void *arg);
/* Makes s's thread look at its inject stack and control queue soon. Any
 * thread; at most one write(2) until s has looked. */
void
troupe__sched_wake(struct sched *s);
/* Runs the queued deferred calls (on s's thread). */
void
troupe__run_ctl(struct sched *s);
/* The scheduler whose loop callback (an actor turn, the wakeup) is
 * running on this thread, or NULL outside them. */
struct sched *
troupe__sched_current(void);
/* Marks the calling thread as a scheduler's own, for its life
 * (troupe__block_check). */
void
troupe__sched_thread_mark(void);
troupe_err
troupe__sched_init(troupe_runtime *rt, struct sched *s, uv_loop_t *host);
void
troupe__sched_close(struct sched *s);
void
troupe__runq_push(struct sched *s, troupe_actor *a);

/* actors (actor.c) */
troupe_err
troupe__spawn(troupe_runtime *rt, const troupe_actor_def *def,
              const troupe_spawn_opts *o, troupe_addr *out, bool counted);
void
troupe__actor_run(troupe_actor *a);
void
troupe__shutdown_sched(struct sched *s, void *arg);
troupe_msg *
troupe__internal_msg(uint32_t op, troupe_err err, void *ptr);

/* asks (ask.c) */
troupe_err
troupe__ask_register(struct sched *s, uint64_t corr, troupe_addr asker,
                     troupe_addr target, uint32_t reply_kind,
                     uint32_t timeout_ms, troupe_reply_cb cb, void *cb_arg);
/* Matches a reply; returns false when it is late (caller drops it). When
 * the entry was a host callback, runs it and sets *consumed. */
bool
troupe__ask_match(struct sched *s, troupe_msg *m, bool *consumed);
void
troupe__ask_unregister(struct sched *s, uint64_t corr);
void
troupe__ask_close_all(struct sched *s);

/* unguessable ids (ids.c) */
/* Speck64/128: key[0] is k0, key[1..3] are l0..l2. */
void
troupe__speck_schedule(uint32_t rk[TROUPE__SPECK_ROUNDS],
                       const uint32_t key[4]);
uint64_t
troupe__speck_encrypt(const uint32_t rk[TROUPE__SPECK_ROUNDS], uint64_t block);
/* The same on the TROUPE__IDS_BATCH blocks first, first + 1, ..., at once
 * (first's low word at most UINT32_MAX - BATCH + 1): block i encrypts to
 * xs[i] << 32 | ys[i]. */
void
troupe__speck_encrypt_ctr(const uint32_t rk[TROUPE__SPECK_ROUNDS],
                          uint64_t first, uint32_t xs[TROUPE__IDS_BATCH],
                          uint32_t ys[TROUPE__IDS_BATCH]);
/* Draws the runtime's key (getrandom); ESYS when the kernel gives none. */
troupe_err
troupe__ids_init(troupe_runtime *rt);
/* A fresh correlation id: never 0, never repeated by this runtime. On s's
 * thread only (it draws from s's ids made ahead). */
uint64_t
troupe__corr_next(struct sched *s);
/* A fresh generation, never 0 and never `avoid`. Caller holds slot_lock. */
uint32_t
troupe__gen_next(troupe_runtime *rt, uint32_t avoid);

/* workers (work.c) */
troupe_err
troupe__workers_start(troupe_runtime *rt, const troupe_runtime_opts *o);
void
troupe__workers_stop(troupe_runtime *rt);
void
troupe__workers_join(troupe_runtime *rt);

/* message block cache of the calling thread (msg.c) */
void
troupe__msg_cache_start(void);
void
troupe__msg_cache_stop(void);

/* shutdown steps (runtime.c) */
void
troupe__sched_drained(struct sched *s);

#endif
