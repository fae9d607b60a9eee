/*
 * What fuzz_handshake checks a proof against, shared with mkseeds (which
 * writes seeds carrying the right proofs): the secret both sides hold and
 * the transcript a HELLO_ACK or AUTH frame's proof covers.
 */
#ifndef TROUPE_FUZZ_HANDSHAKE_H
#define TROUPE_FUZZ_HANDSHAKE_H

#include <stddef.h>
#include <string.h>

#include "auth.h"
#include "troupe/wire.h"

#define FZ_HS_SECRET "fuzz-cluster-secret-0123456789"
#define FZ_HS_SELF 7u /* the node checking the proof */

static const uint8_t fz_hs_nonce[TROUPE_WIRE_NONCE_LEN] = {1, 2, 3, 4, 5};
static const char fz_hs_url[] = "tcp://127.0.0.1:4000/some/longer/url/path";

/*
 * The transcript for frame h as node FZ_HS_SELF sees it: a HELLO_ACK's
 * proof is the listener's (h->sender) over our HELLO, an AUTH's the
 * dialer's over its own. `sel` picks the URL's length, so that transcripts
 * of every size are covered.
 */
static inline troupe__transcript
fz_hs_transcript(const troupe_frame_hdr *h, uint8_t sel)
{
    const uint8_t *theirs = h->nonce != NULL ? h->nonce : fz_hs_nonce;
    bool ack = h->type == TROUPE_FRAME_HELLO_ACK;
    troupe__transcript t = {
        .role = ack ? TROUPE__AUTH_LISTENER : TROUPE__AUTH_DIALER,
        .dialer = ack ? FZ_HS_SELF : h->sender,
        .listener = ack ? h->sender : FZ_HS_SELF,
        .dialer_inc = ack ? 11 : h->incarnation,
        .listener_inc = ack ? h->incarnation : 11,
        .dialer_nonce = ack ? fz_hs_nonce : theirs,
        .listener_nonce = ack ? theirs : fz_hs_nonce,
        .url = fz_hs_url,
        .url_len = sel % sizeof(fz_hs_url),
    };
    return t;
}

#endif
