/*
 * Messages: a small header plus an optional msgpack body in a refcounted,
 * immutable buffer.
 *
 * Ownership: a troupe_msg has one owner. troupe_msg_create gives it to the
 * caller; every send consumes it (through a troupe_msg ** that is NULLed,
 * on success and on failure). A handler borrows the message for the call;
 * to keep body bytes past the handler, retain the body (troupe_body_retain)
 * or copy them. Fan-out creates one troupe_msg per receiver and retains the
 * same body: bytes are never copied.
 *
 * The body is msgpack bytes; protocols/ has helpers to pack and strictly
 * decode them. The runtime never looks inside a body.
 */
#ifndef TROUPE_MSG_H
#define TROUPE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"

/*
 * An actor address. `node` names the node (troupe_runtime_opts.node_id);
 * `slot` and `gen` name the actor on that node. Every spawn draws a fresh
 * generation from a keyed permutation under a random key per runtime: never
 * 0, never the generation the slot had before, and unrelated to every
 * other actor's, so an address a peer learns reveals no other actor's
 * (one in 2^32 guesses names a given slot's actor). A stopped actor's slot
 * is reused with a new generation, so a stale address does not reach the
 * new actor: a send to it fails with TROUPE_EDEAD (a reuse repeats an
 * older generation of the slot with probability 2^-32). After a node
 * restarts, addresses of its previous incarnation likewise do not name its
 * new actors. slot 0 is never an actor; an address with slot 0 is "none"
 * (troupe_addr_is_none), and TROUPE_ADDR_NONE is the all-zero one;
 * {node, 0, 0} names a node without an actor (the sender of a reply made
 * by troupe_runtime_reply).
 */
typedef struct troupe_addr {
    uint32_t node;
    uint32_t slot;
    uint32_t gen;
} troupe_addr;

#define TROUPE_ADDR_NONE ((troupe_addr){0, 0, 0})

static inline int
troupe_addr_eq(troupe_addr a, troupe_addr b)
{
    return a.node == b.node && a.slot == b.slot && a.gen == b.gen;
}

static inline int
troupe_addr_is_none(troupe_addr a)
{
    return a.slot == 0;
}

/* Refcounted immutable bytes. Any thread may retain or release. */
typedef struct troupe_body troupe_body;

/* Allocates a body of `len` bytes for the caller to fill before the first
 * send; *data receives the writable bytes. The caller owns one reference. */
troupe_err
troupe_body_alloc(size_t len, troupe_body **out, void **data);
/* A body holding a copy of `len` bytes at `data`. */
troupe_err
troupe_body_copy(const void *data, size_t len, troupe_body **out);
/* A body that takes ownership of `data`, allocated with troupe_malloc (for
 * example a released msgpack_sbuffer); freed with troupe_free. On error
 * `data` is freed too. */
troupe_err
troupe_body_adopt(void *data, size_t len, troupe_body **out);
troupe_body *
troupe_body_retain(troupe_body *b);
/* Drops one reference; the last frees. NULL is a no-op. */
void
troupe_body_release(troupe_body *b);
const void *
troupe_body_data(const troupe_body *b);
size_t
troupe_body_len(const troupe_body *b);

/* Message flags. */
enum {
    TROUPE_MSG_REPLY = 1u << 0, /* answers an ask: matched by `corr` (and,
                                   from another node, by the node asked) */
    TROUPE_MSG_SYSTEM = 1u << 1 /* runtime-generated; bypasses the mailbox
                                   bounds (DOWN, timers, work completions);
                                   never accepted from the network */
};

typedef struct troupe_msg troupe_msg;
/*
 * The header. Fields are public for reading in handlers; set them only on a
 * message you own and have not yet sent. The runtime keeps its own part of
 * a message (its link in a mailbox, its private flags, how it was
 * allocated) behind this header, out of reach.
 */
struct troupe_msg {
    uint32_t kind;     /* handler table index at the receiver */
    uint32_t flags;    /* TROUPE_MSG_* */
    troupe_addr from;  /* set by send from an actor; NONE from a host */
    troupe_addr to;    /* set by send */
    uint64_t corr;     /* correlation id of an ask/reply (unguessable,
                          unique per runtime); timer id */
    int64_t deadline;  /* Unix ms after which the message is dropped /
                          the ask times out; 0 = none */
    troupe_err err;    /* status a reply or system message carries:
                          ETIMEDOUT for a timed-out ask, the reason in a
                          DOWN message, OK otherwise */
    troupe_body *body; /* owned reference, or NULL */
    void *ptr;         /* local-only payload (work completions, storage
                          callbacks). A message with ptr set never leaves
                          its node: a remote send fails with EINVAL. */
    /* If set, the message owns ptr until a handler receives it: destroying
     * the message calls ptr_drop(ptr), which is how a payload is released
     * when the runtime discards a message unhandled (target dead or gone
     * before handling it, deadline passed, no handler, failed send). The
     * runtime clears it just before a handler runs: the handler then owns
     * ptr. */
    void (*ptr_drop)(void *ptr);
};

/*
 * Creates a message of `kind` with a copy of body bytes (len may be 0, body
 * may then be NULL). The caller owns the result.
 */
troupe_err
troupe_msg_create(troupe_msg **out, uint32_t kind, const void *body,
                  size_t len);
/* Same, with a body reference the message takes over (even on error). */
troupe_err
troupe_msg_create_body(troupe_msg **out, uint32_t kind, troupe_body **body);
/* Frees a message the caller owns and releases its body. NULL: no-op. */
void
troupe_msg_destroy(troupe_msg *m);
/* Convenience: the body bytes and length (NULL/0 when bodiless). */
const void *
troupe_msg_data(const troupe_msg *m);
size_t
troupe_msg_len(const troupe_msg *m);

/* Wall clock in Unix milliseconds (the clock of deadlines). */
int64_t
troupe_now_ms(void);

#endif
