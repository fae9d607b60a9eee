/*
 * The runtime's message: every troupe_msg the runtime hands out (created,
 * delivered, or made for a reply, a timer or a completion) is the first
 * member of one of these, so troupe__msg_of is a cast and the mailbox and
 * the transport reach their link with the same loads and stores as if it
 * were public. A troupe_msg a caller declares itself (to answer a held
 * request with troupe_reply, say) has no such tail: the runtime reads only
 * public fields of those, and never links one.
 */
#ifndef TROUPE_INTERNAL_MSG_H
#define TROUPE_INTERNAL_MSG_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include "troupe/msg.h"

typedef struct troupe__msg troupe__msg;
struct troupe__msg {
    /* aligned so an inline body can follow the message (msg.c) */
    _Alignas(max_align_t) troupe_msg pub;
    /* Belongs to whoever holds the message in flight: the runtime's
     * mailbox, or the transport once the remote hook has consumed it. */
    troupe_msg *_Atomic next;
    uint32_t pflags; /* the runtime's own bits (runtime/src/rt.h) */
    uint32_t alloc;  /* how the message was allocated (msg.c) */
};

static inline troupe__msg *
troupe__msg_of(troupe_msg *m)
{
    return (troupe__msg *)m;
}

static inline const troupe__msg *
troupe__msg_cof(const troupe_msg *m)
{
    return (const troupe__msg *)m;
}

#endif
