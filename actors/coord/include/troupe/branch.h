/*
 * A global transaction's branch served by a troupe actor (docs/
 * coordinator.md, "Actor targets"). A call whose target is
 *
 *   actor:NAME#KIND              the actor registered as NAME on the
 *                                coordinator's node (troupe_registry_add),
 *                                looked up at each call
 *   actor:@NODE.SLOT.GEN#KIND    the actor at that address, on this node
 *                                or on another one
 *
 * reaches it as an ask of message kind KIND (0..63; a remote actor must
 * declare it in remote_kinds) whose body is the branch
 * (troupe_branch_call_read); the reply's body is the outcome
 * (troupe_branch_reply). An error reply, a body that is not an outcome,
 * or no reply within the transaction's branch timeout (30 s) is UNKNOWN:
 * retried after its backoff, never compensated. A submit whose target
 * names no registered local actor is refused (ENOENT); an address is
 * checked for its form only (an actor gone makes its calls UNKNOWN).
 *
 * Threads: both calls run in the serving actor's handler.
 */
#ifndef TROUPE_BRANCH_H
#define TROUPE_BRANCH_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/actor.h"
#include "troupe/coord.h"
#include "troupe/dispatch.h"

/* The prefix of an actor target; a dispatch target with a name that
 * starts with it cannot be a branch target. */
#define TROUPE_ACTOR_TARGET_PREFIX "actor:"

/* A branch delivered to an actor: the barrier's fields (NUL-terminated
 * copies; pass them to troupe_barrier_check), the attempt (1 for the
 * first) and the payload given at submit (borrowed from the message: valid
 * while the handler runs). */
typedef struct troupe_branch_call {
    char mode[16];
    char gid[TROUPE_GID_MAX + 1];
    size_t gid_len;
    char branch_id[8];
    char op[16];
    uint32_t attempt;
    const void *payload;
    size_t payload_len;
} troupe_branch_call;

/* Reads the branch of m into *out. EPROTO when m's body is not one (the
 * handler should then reply with troupe_reply_error(self, m, EPROTO)),
 * EINVAL for NULL. */
troupe_err
troupe_branch_call_read(const troupe_msg *m, troupe_branch_call *out);

/* Answers the branch ask req with outcome o (SUCCESS, FAILURE, ONGOING or
 * UNKNOWN). Errors: EINVAL (NULL, another outcome: nothing sent), those
 * of troupe_reply. */
troupe_err
troupe_branch_reply(troupe_actor *self, const troupe_msg *req,
                    troupe_outcome o);

#endif
