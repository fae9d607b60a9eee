/*
 * The wire format between nodes: msgpack frames that carry message
 * envelopes (docs/wire.md has the byte layout and every rule).
 *
 *   frame     = [version=2, type, sender, incarnation, payload]
 *   DATA      payload = [envelope, ...]          (1..TROUPE_WIRE_BATCH_MAX)
 *   HELLO     payload = [url, nonce]
 *   HELLO_ACK payload = [nonce, mac, cert, sig]
 *   AUTH      payload = [mac, cert, sig]
 *   PART      payload = [total, offset, chunk]
 *   REFUSE    payload = [err, reason]
 *   envelope  = [kind, flags, from, to, corr, deadline, err, body]
 *   address   = [node, slot, gen]
 *   body      = nil (no body) | bin (the body's msgpack bytes, opaque here)
 *
 * HELLO, HELLO_ACK and AUTH are the handshake that binds a connection to
 * an authenticated node (the proofs, mac, cert and sig, are computed and
 * checked by the transport, not here: this file only carries them). PART
 * carries a slice of a frame too large for one nng message
 * (TROUPE_WIRE_PART_MAX); REFUSE says why a connection is being closed.
 *
 * Decoding is strict: input is hostile. A frame is checked by a bounded,
 * iterative walk over its bytes (every declared count and length against
 * the bytes that remain, nesting depth capped) before msgpack-c allocates
 * anything, then every field is type- and range-checked. Truncated, wrongly
 * typed, out-of-range or trailing bytes, and frames of another wire
 * version, fail with TROUPE_EPROTO (troupe_wire_frame_version tells the
 * version of a refused frame); a frame over TROUPE_WIRE_FRAME_MAX fails with
 * TROUPE_ETOOBIG. A frame that fails delivers no message at all.
 *
 * Every function here is pure (no I/O, no global state) and may be called
 * from any thread; a troupe_wire_decoder is used by one thread at a time.
 */
#ifndef TROUPE_WIRE_H
#define TROUPE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/err.h"
#include "troupe/msg.h"

#define TROUPE_WIRE_VERSION 2u
/* Largest frame accepted or produced, in bytes (a DATA frame larger than
 * TROUPE_WIRE_PART_MAX travels as PART frames and is this big at most
 * once reassembled). */
#define TROUPE_WIRE_FRAME_MAX (16u * 1024u * 1024u)
/* Largest message body that fits one frame with its envelope. */
#define TROUPE_WIRE_BODY_MAX (TROUPE_WIRE_FRAME_MAX - 256u)
/* Largest frame sent as one nng message; larger frames are cut into PART
 * frames whose chunks are at most this big. */
#define TROUPE_WIRE_PART_MAX (256u * 1024u)
/* Bytes a PART frame adds to its chunk, at most. */
#define TROUPE_WIRE_PART_OVERHEAD 48u
/* Most envelopes in one DATA frame. */
#define TROUPE_WIRE_BATCH_MAX 8192u
/* Longest URL in a HELLO frame, in bytes. */
#define TROUPE_WIRE_URL_MAX 255u
/* Deepest container nesting accepted in a message body. */
#define TROUPE_WIRE_DEPTH_MAX 32u
/* Handshake fields: nonce and mac lengths (exact), largest certificate
 * (DER) and signature, longest REFUSE reason. */
#define TROUPE_WIRE_NONCE_LEN 32u
#define TROUPE_WIRE_MAC_LEN 32u
#define TROUPE_WIRE_CERT_MAX 4096u
#define TROUPE_WIRE_SIG_MAX 1024u
#define TROUPE_WIRE_REASON_MAX 255u
/* Bytes that always suffice for a HELLO, HELLO_ACK, AUTH or REFUSE. */
#define TROUPE_WIRE_CTL_MAX 5632u

typedef enum troupe_frame_type {
    TROUPE_FRAME_DATA = 0,
    TROUPE_FRAME_HELLO = 1,
    TROUPE_FRAME_HELLO_ACK = 2,
    TROUPE_FRAME_AUTH = 3,
    TROUPE_FRAME_PART = 4,
    TROUPE_FRAME_REFUSE = 5
} troupe_frame_type;

/*
 * The proof a HELLO_ACK or AUTH carries. Each field is absent (NULL, 0)
 * or present: mac exactly TROUPE_WIRE_MAC_LEN bytes, cert 1..CERT_MAX
 * bytes, sig 1..SIG_MAX bytes. cert and sig come together or not at all.
 * In a decoded header the pointers point into the decoded bytes.
 */
typedef struct troupe_wire_proof {
    const uint8_t *mac;
    size_t mac_len;
    const uint8_t *cert;
    size_t cert_len;
    const uint8_t *sig;
    size_t sig_len;
} troupe_wire_proof;

/*
 * A decoded frame header. `sender` is the sending node's id (never 0).
 * `incarnation`: in DATA and PART, the receiver incarnation the frame is
 * meant for (0: any); in HELLO, HELLO_ACK and AUTH, the sender's own
 * incarnation; in REFUSE, the sender's own (0 when it has none to give).
 * Pointers point into the decoded bytes (strings not NUL-terminated) and
 * are valid only while those bytes are; fields a type does not carry are
 * zero or NULL.
 */
typedef struct troupe_frame_hdr {
    troupe_frame_type type;
    uint32_t sender;
    uint64_t incarnation;
    uint32_t count;  /* DATA: envelopes in the frame */
    const char *url; /* HELLO: the sender's listen URL ("" = none) */
    size_t url_len;
    const uint8_t *nonce;    /* HELLO, HELLO_ACK: TROUPE_WIRE_NONCE_LEN bytes */
    troupe_wire_proof proof; /* HELLO_ACK, AUTH */
    uint32_t part_total;     /* PART: size of the whole frame */
    uint32_t part_offset;    /* PART: where this chunk starts in it */
    const uint8_t *chunk;    /* PART: 1..TROUPE_WIRE_PART_MAX bytes */
    size_t chunk_len;
    troupe_err refuse_err; /* REFUSE: why (a code this build knows) */
    const char *reason;    /* REFUSE: text, 0..TROUPE_WIRE_REASON_MAX */
    size_t reason_len;
} troupe_frame_hdr;

/* ---- encoding ---- */

/*
 * Bytes the envelope of `m` takes on the wire (body included), or 0 when m
 * cannot travel: NULL, a local-only message (m->ptr set), or a body over
 * TROUPE_WIRE_BODY_MAX.
 */
size_t
troupe_wire_envelope_size(const troupe_msg *m);

/* Bytes of a DATA frame header announcing n envelopes (add the envelope
 * sizes for the frame's size). */
size_t
troupe_wire_data_overhead(uint32_t sender, uint64_t incarnation, size_t n);

/*
 * Encodes a DATA frame of msgs[0..n) into buf[0..cap); *len receives its
 * size. The messages are only read. Errors: EINVAL (NULL argument, n == 0
 * or > TROUPE_WIRE_BATCH_MAX, sender 0, a local-only message), ETOOBIG (a
 * body over TROUPE_WIRE_BODY_MAX, the frame over TROUPE_WIRE_FRAME_MAX, or
 * cap too small: size buf with troupe_wire_data_overhead plus
 * troupe_wire_envelope_size of each message).
 */
troupe_err
troupe_wire_encode_data(uint32_t sender, uint64_t incarnation,
                        const troupe_msg *const *msgs, size_t n, void *buf,
                        size_t cap, size_t *len);

/*
 * A handshake or control frame to encode. `type` is HELLO, HELLO_ACK,
 * AUTH or REFUSE; `sender` is not 0. HELLO uses url (NULL or "" for none,
 * at most TROUPE_WIRE_URL_MAX bytes) and nonce; HELLO_ACK uses nonce and
 * proof; AUTH uses proof; REFUSE uses err (a known code) and reason (NULL
 * or at most TROUPE_WIRE_REASON_MAX bytes). nonce is TROUPE_WIRE_NONCE_LEN
 * bytes. Fields a type does not use must be zero or NULL.
 */
typedef struct troupe_wire_ctl {
    troupe_frame_type type;
    uint32_t sender;
    uint64_t incarnation;
    const char *url;
    const uint8_t *nonce;
    troupe_wire_proof proof;
    troupe_err err;
    const char *reason;
} troupe_wire_ctl;

/*
 * Encodes c into buf[0..cap); *len receives its size. Errors: EINVAL (a
 * NULL argument, a bad type, sender 0, a missing nonce, a field the type
 * does not use, a proof field of the wrong length, cert without sig or
 * the reverse, an unknown err), ETOOBIG (url or reason too long, or cap
 * too small; TROUPE_WIRE_CTL_MAX always suffices).
 */
troupe_err
troupe_wire_encode_ctl(const troupe_wire_ctl *c, void *buf, size_t cap,
                       size_t *len);

/* Bytes of the PART frame carrying `chunk_len` bytes of a `total`-byte
 * frame from `offset` (at most chunk_len + TROUPE_WIRE_PART_OVERHEAD). */
size_t
troupe_wire_part_size(uint32_t sender, uint64_t incarnation, size_t total,
                      size_t offset, size_t chunk_len);

/*
 * Encodes the PART frame that carries frame[offset..offset + chunk_len) of
 * the `total`-byte frame at `frame` into buf[0..cap); *len receives its
 * size. Errors: EINVAL (NULL argument, sender 0, chunk_len 0 or over
 * TROUPE_WIRE_PART_MAX, total over TROUPE_WIRE_FRAME_MAX, the chunk not
 * inside the frame), ETOOBIG (cap too small: size buf with
 * troupe_wire_part_size).
 */
troupe_err
troupe_wire_encode_part(uint32_t sender, uint64_t incarnation,
                        const void *frame, size_t total, size_t offset,
                        size_t chunk_len, void *buf, size_t cap, size_t *len);

/*
 * Convenience: a DATA frame holding the one message m, in a buffer
 * allocated with troupe_malloc that the caller owns (*out, free with
 * troupe_free). Errors as troupe_wire_encode_data, and ENOMEM.
 */
troupe_err
troupe_wire_encode(uint32_t sender, const troupe_msg *m, void **out,
                   size_t *len);

/* ---- decoding ---- */

/*
 * A reusable decoding context: holds the msgpack-c zone frames are
 * unpacked into, so a busy receiver does not allocate one per frame.
 * Owned by its creator; one thread at a time.
 */
typedef struct troupe_wire_decoder troupe_wire_decoder;

troupe_err
troupe_wire_decoder_create(troupe_wire_decoder **out);
/* NULL is a no-op. */
void
troupe_wire_decoder_destroy(troupe_wire_decoder *d);

/*
 * Receives one decoded message; takes it by setting *m to NULL (a message
 * left in *m is destroyed after fn returns). Called on the decoding
 * thread, in frame order.
 */
typedef void (*troupe_wire_msg_fn)(void *arg, troupe_msg **m);

/*
 * Decodes the frame buf[0..len). `d` may be NULL (a temporary zone is
 * used); `hdr` may be NULL; `fn` may be NULL (validate only). The whole
 * frame is checked before the first message is created, so a frame that
 * fails strict decoding calls fn for no message; *hdr is filled in before
 * fn first runs, so fn may consult it (say, to drop a stale frame). Each
 * message is new, owned by fn, with flags, addresses, corr, deadline and err
 * from the wire, ptr NULL and a body holding a copy of the wire body (NULL when
 * the envelope had none). Errors: EINVAL (buf NULL with len > 0), ETOOBIG (len
 * over TROUPE_WIRE_FRAME_MAX), EPROTO (anything malformed), ENOMEM (then fn may
 * have received the messages before the failed allocation).
 */
troupe_err
troupe_wire_decode_frame(troupe_wire_decoder *d, const void *buf, size_t len,
                         troupe_frame_hdr *hdr, troupe_wire_msg_fn fn,
                         void *arg);

/*
 * The wire version a frame declares: OK and *version when buf[0..len)
 * starts like a frame (an array of 5 whose first element is an unsigned
 * integer), whatever the rest holds; EPROTO otherwise. For telling a peer
 * that speaks another version apart from garbage. Reads at most 10 bytes.
 */
troupe_err
troupe_wire_frame_version(const void *buf, size_t len, uint64_t *version);

/*
 * Convenience: decodes a DATA frame that holds exactly one envelope into a
 * new message the caller owns. *sender (may be NULL) receives the sending
 * node. Errors as troupe_wire_decode_frame; EPROTO also for a frame that is
 * not DATA or holds more than one envelope.
 */
troupe_err
troupe_wire_decode(const void *buf, size_t len, uint32_t *sender,
                   troupe_msg **out);

#endif
