/*
 * The wire format between nodes: msgpack frames that carry message
 * envelopes (docs/wire.md has the byte layout and every rule).
 *
 *   frame    = [version=1, type, sender, incarnation, payload]
 *   DATA     payload = [envelope, ...]            (1..TROUPE_WIRE_BATCH_MAX)
 *   HELLO    payload = str: the sender's listen URL ("" when it has none)
 *   HELLO_ACK payload = nil
 *   envelope = [kind, flags, from, to, corr, deadline, err, body]
 *   address  = [node, slot, gen]
 *   body     = nil (no body) | bin (the body's msgpack bytes, opaque here)
 *
 * Decoding is strict: input is hostile. A frame is checked by a bounded,
 * iterative walk over its bytes (every declared count and length against
 * the bytes that remain, nesting depth capped) before msgpack-c allocates
 * anything, then every field is type- and range-checked. Truncated, wrongly
 * typed, out-of-range or trailing bytes fail with TROUPE_EPROTO; a frame
 * over TROUPE_WIRE_FRAME_MAX fails with TROUPE_ETOOBIG. A frame that fails
 * delivers no message at all.
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

#define TROUPE_WIRE_VERSION 1u
/* Largest frame accepted or produced, in bytes. */
#define TROUPE_WIRE_FRAME_MAX (16u * 1024u * 1024u)
/* Largest message body that fits one frame with its envelope. */
#define TROUPE_WIRE_BODY_MAX (TROUPE_WIRE_FRAME_MAX - 256u)
/* Most envelopes in one DATA frame. */
#define TROUPE_WIRE_BATCH_MAX 8192u
/* Longest URL in a HELLO frame, in bytes. */
#define TROUPE_WIRE_URL_MAX 255u
/* Deepest container nesting accepted in a message body. */
#define TROUPE_WIRE_DEPTH_MAX 32u

typedef enum troupe_frame_type {
    TROUPE_FRAME_DATA = 0,
    TROUPE_FRAME_HELLO = 1,
    TROUPE_FRAME_HELLO_ACK = 2
} troupe_frame_type;

/*
 * A decoded frame header. `sender` is the sending node's id (never 0).
 * `incarnation`: in DATA, the receiver incarnation the frame is meant for
 * (0: any); in HELLO and HELLO_ACK, the sender's own incarnation.
 * `url` points into the decoded bytes (not NUL-terminated); it is valid
 * only while those bytes are.
 */
typedef struct troupe_frame_hdr {
    troupe_frame_type type;
    uint32_t sender;
    uint64_t incarnation;
    uint32_t count;  /* DATA: envelopes in the frame; else 0 */
    const char *url; /* HELLO: the sender's listen URL; else NULL */
    size_t url_len;
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
 * Encodes a HELLO (url: the sender's listen URL, may be NULL or "") or a
 * HELLO_ACK (url must be NULL) frame into buf[0..cap). Errors: EINVAL (bad
 * type or argument, sender 0), ETOOBIG (url over TROUPE_WIRE_URL_MAX, or
 * cap too small; 300 bytes always suffice).
 */
troupe_err
troupe_wire_encode_hello(troupe_frame_type type, uint32_t sender,
                         uint64_t incarnation, const char *url, void *buf,
                         size_t cap, size_t *len);

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
 * Convenience: decodes a DATA frame that holds exactly one envelope into a
 * new message the caller owns. *sender (may be NULL) receives the sending
 * node. Errors as troupe_wire_decode_frame; EPROTO also for a frame that is
 * not DATA or holds more than one envelope.
 */
troupe_err
troupe_wire_decode(const void *buf, size_t len, uint32_t *sender,
                   troupe_msg **out);

#endif
