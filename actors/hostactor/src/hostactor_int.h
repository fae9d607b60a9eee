/*
 * The host actor's object, shared by its lifecycle (hostactor.c) and its
 * proxy actor (proxy.c).
 */
#ifndef TROUPE_HOSTACTOR_INT_H
#define TROUPE_HOSTACTOR_INT_H

#include <stdatomic.h>
#include <stdbool.h>

#include "troupe/actor.h"
#include "troupe/hostactor.h"
#include "troupe/internal/dispatch.h"

/* A message waiting for credit: what its task and its answer need. */
typedef struct ha_entry {
    struct ha_entry *next;
    uint32_t kind;
    troupe_addr from;
    uint64_t corr; /* 0: a plain send */
    int64_t deadline;
    troupe_body *body; /* owned, or NULL */
    uint64_t cost;     /* body bytes + TROUPE_HOST_ACTOR_ENTRY_BYTES */
} ha_entry;

enum { HA_RUNNING = 0, HA_STOPPING, HA_STOPPED };

struct troupe_host_actor {
    troupe_runtime *rt;
    troupe_target *target; /* a reference of ours */
    char *target_name;
    size_t target_len;
    troupe_addr addr; /* written by create, for troupe_host_actor_addr */
    troupe_addr self; /* written by the proxy's init, for the kick */
    uint32_t tag;
    uint64_t queue_max;
    /* the owner's, the proxy's (until it is gone for good), one per task
     * in flight, one per kick message, the stop's */
    _Atomic long refs;
    _Atomic int state;     /* HA_* */
    _Atomic bool stopping; /* the proxy refuses everything */
    /* 1 for the stopper (released by stop), 1 for the proxy (released
     * once it is gone), 1 per task in flight: 0 ends the stop */
    _Atomic size_t running;
    _Atomic bool kick_pending; /* a kick message is on its way */
    troupe__credit_wait wait;
    troupe_host_actor_stop_cb stop_cb;
    void *stop_arg;
    bool stop_post; /* cb through scheduler 0 (stop_wait: directly) */
    /* the proxy's thread only (and its arg_free, once it is gone) */
    ha_entry *head, *tail;
    /* counters (troupe_host_actor_stats) */
    _Atomic uint64_t st_received, st_submitted, st_replied, st_failed,
        st_unknown, st_sends_done, st_busy, st_dropped, st_closed, st_expired,
        st_reply_lost, st_queued, st_queued_bytes, st_in_flight;
};

/* The proxy's definition (proxy.c). */
extern const troupe_actor_def troupe__ha_proxy_def;

/* The proxy is gone for good (its spawn's arg_free): flushes what waits
 * (asks answered ECLOSED), then releases its share and reference. */
void
troupe__ha_proxy_gone(void *arg);

/* Sets the credit wait's kick (before the proxy is spawned). */
void
troupe__ha_wait_init(troupe_host_actor *ha);

void
troupe__ha_release(troupe_host_actor *ha);
/* One share of `running` fewer; the last ends the stop. */
void
troupe__ha_done(troupe_host_actor *ha);

static inline void
troupe__ha_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

#endif
