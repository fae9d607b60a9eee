/*
 * Host-implemented actors: an actor name whose messages a host serves
 * through a dispatch target (troupe/dispatch.h), by pull (a Node or
 * Python host, a C program on its own loop) or by callback (a C function
 * on the HOST lane).
 *
 * troupe_host_actor_create spawns a proxy actor registered under the
 * name. It is addressable as any other actor: troupe_send, troupe_ask,
 * troupe_runtime_ask to its address, found with troupe_registry_lookup
 * or, from another node, troupe_node_lookup over the transport (kinds
 * 0..63 are admitted from the network; any kind locally). Every message
 * it receives becomes one task of kind TROUPE_TASK_ACTOR on the target,
 * whose body is the message body and whose header is
 * TROUPE_HOST_ACTOR_HEADER_LEN bytes, little-endian:
 *
 *   off  0 u32 kind       the message's kind
 *   off  4 u32 flags      TROUPE_HOST_ACTOR_ASK: the sender waits for the
 *                         reply (an ask); clear: a plain send
 *   off  8 u32 from_node  the sender's address (node, slot, gen); a
 *   off 12 u32 from_slot  message sent from outside any actor names
 *   off 16 u32 from_gen   slot 0
 *   off 20 u32 tag        troupe_host_actor_opts.tag (actors sharing one
 *                         target tell themselves apart by it)
 *   off 24 i64 deadline   the ask's deadline, Unix ms (0: none): a reply
 *                         after it reaches nobody
 *
 * The task's outcome answers an ask, once:
 *   SUCCESS          -> a reply, err OK, whose body is the reply body;
 *   FAILURE          -> a reply with err TROUPE_EFAILED (the host's
 *                       definite "no"), whose body is the reply body
 *                       (the host's detail, its format the host's);
 *   ONGOING, UNKNOWN -> a reply with err TROUPE_EUNKNOWN and no body: the
 *                       host may or may not have acted (the target's
 *                       deadline passed, the host went away, a bad code).
 * A plain send's outcome is dropped (counted). A reply the host makes
 * after the task settled is refused by the dispatch (ETIMEDOUT, ENOENT)
 * and answers nothing again.
 *
 * Back-pressure: the target's credit bounds the tasks in flight. A message
 * that finds no credit waits in the proxy, in arrival order, within
 * queue_bytes (each message counts its body plus
 * TROUPE_HOST_ACTOR_ENTRY_BYTES); one that would pass it is refused: an
 * ask is answered TROUPE_EBUSY, a send is dropped and counted. A waiting
 * ask whose own deadline passes is dropped when its turn comes (its asker
 * has had ETIMEDOUT). A task the target refuses answers its ask with
 * ECLOSED (the target stopping, its host closed), EBUSY or ENOMEM: never
 * delivered, definitely. A body over TROUPE_TASK_BODY_MAX is ETOOBIG. The
 * proxy reads a message's kind, sender, corr, deadline and body only: a
 * local message's ptr is neither read nor freed (send none).
 *
 * Owners and threads: troupe_host_actor_create allocates an object the
 * caller owns; it borrows the runtime and holds a reference on the target
 * (stop the host actor before the target, so that no message is refused
 * for a stopped target; the target may go first, its memory stays until
 * troupe_host_actor_destroy). Stop and destroy it before
 * troupe_runtime_destroy. Every call may come from any thread; only
 * stop_wait blocks.
 */
#ifndef TROUPE_HOSTACTOR_H
#define TROUPE_HOSTACTOR_H

#include <stdint.h>

#include "troupe/dispatch.h"
#include "troupe/runtime.h"

#define TROUPE_HOST_ACTOR_HEADER_LEN 32u
#define TROUPE_HOST_ACTOR_ASK 1u
/* What a waiting message costs the queue beyond its body. */
#define TROUPE_HOST_ACTOR_ENTRY_BYTES 64u
#define TROUPE_HOST_ACTOR_QUEUE_BYTES_DEFAULT (UINT64_C(8) << 20)

typedef struct troupe_host_actor troupe_host_actor;

typedef struct troupe_host_actor_opts {
    const char *name;   /* the actor's name in the registry: 1..255 bytes */
    const char *target; /* the dispatch target that serves it (created
                           before, pull or callback) */
    uint32_t tag;       /* copied into every task's header */
    /* Bytes of messages waiting for credit, at most; 0:
     * TROUPE_HOST_ACTOR_QUEUE_BYTES_DEFAULT (8 MiB). */
    uint64_t queue_bytes;
    int scheduler; /* the proxy's scheduler: -1 round robin, else index */
} troupe_host_actor_opts;

/*
 * Spawns the proxy under o->name, served by the target o->target. *out is
 * the caller's (NULL on error). Errors: EINVAL (NULL, a name not of
 * 1..255 bytes, no target name, a scheduler out of range), ENOENT (no running
 * target of that name), EEXIST (the name is taken), ECLOSED (rt shutting down),
 * ENOMEM. Never blocks.
 */
troupe_err
troupe_host_actor_create(troupe_runtime *rt, const troupe_host_actor_opts *o,
                         troupe_host_actor **out);

/* The proxy's address (NONE for NULL). Never blocks. */
troupe_addr
troupe_host_actor_addr(const troupe_host_actor *a);

/* Counters since create; relaxed reads. */
typedef struct troupe_host_actor_stats {
    uint64_t received;   /* messages handled by the proxy */
    uint64_t submitted;  /* tasks submitted to the target */
    uint64_t replied;    /* asks answered OK (SUCCESS) */
    uint64_t failed;     /* asks answered EFAILED (FAILURE) */
    uint64_t unknown;    /* asks answered EUNKNOWN (ONGOING, UNKNOWN) */
    uint64_t sends_done; /* plain sends whose task settled (any outcome) */
    uint64_t busy;       /* asks answered EBUSY (queue bytes, or the target) */
    uint64_t dropped;    /* sends dropped: queue bytes, a refused task, stop */
    uint64_t closed;     /* asks answered ECLOSED (stopping, target gone) */
    uint64_t expired;    /* waiting asks dropped past their deadline */
    uint64_t reply_lost; /* answers the runtime or transport refused */
    uint64_t queued;     /* messages waiting for credit now */
    uint64_t queued_bytes; /* their bytes now (as queue_bytes counts) */
    uint64_t in_flight;    /* tasks not yet settled now */
} troupe_host_actor_stats;

void
troupe_host_actor_stats_get(const troupe_host_actor *a,
                            troupe_host_actor_stats *out);

typedef void (*troupe_host_actor_stop_cb)(troupe_host_actor *a, void *arg);

/*
 * Stops the host actor: from now on every message is refused (an ask
 * answered ECLOSED, a send dropped), messages waiting for credit too; the
 * proxy stops (its name goes with it); tasks in flight settle as the
 * dispatch settles them (the host's answer, the deadline, the target's
 * stop or its host's close) and answer their asks; then cb(a, arg) fires
 * once, on scheduler 0 (never inside this call; once scheduler 0 has
 * closed, on the thread that settled the last task, this one included).
 * Also valid after the runtime's shutdown stopped the proxy. Errors (cb
 * never fires): EINVAL (NULL a or cb), ESTATE (stopping or stopped).
 * Never blocks.
 */
troupe_err
troupe_host_actor_stop(troupe_host_actor *a, troupe_host_actor_stop_cb cb,
                       void *arg);

/* troupe_host_actor_stop and a wait for its end (not through scheduler
 * 0); its errors, and EDEADLK on a troupe thread (nothing is stopped).
 * Blocks at most as long as the target's timeout. */
troupe_err
troupe_host_actor_stop_wait(troupe_host_actor *a);

/* Frees a stopped host actor (its stop callback has fired). NULL is a
 * no-op; one not stopped is a programming error: abort(). */
void
troupe_host_actor_destroy(troupe_host_actor *a);

#endif
