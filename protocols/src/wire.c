/*
 * Frames and envelopes: the msgpack-c side of the wire (docs/wire.md).
 *
 * Encoding packs straight into the caller's buffer through a bounded write
 * callback, so the transport can size an nng message exactly and encode
 * into it without a copy (envelope sizes are computed by the same rules
 * msgpack-c's packer uses: smallest integer, str, bin and array forms).
 *
 * Decoding runs in three steps, and a frame that fails any of them delivers
 * nothing:
 *  1. troupe__mp_walk over the raw bytes, depth-capped at the frame's own
 *     nesting (4): every declared count and length is checked against the
 *     bytes that remain before msgpack-c allocates anything, and trailing
 *     bytes are refused;
 *  2. msgpack_unpack into a zone we own (the decoder's, reused across
 *     frames; never the streaming unpacker, which reserves memory from
 *     declared sizes and must be discarded after an error);
 *  3. every field type- and range-checked over the object tree, then the
 *     messages are built and handed out in frame order.
 *
 * Handshake and control frames (HELLO, HELLO_ACK, AUTH, PART, REFUSE) are
 * carried, never interpreted: the proofs they hold are checked by the
 * transport, which alone knows the secret and certificates, and a PART's
 * chunk is reassembled there too. Their fields are range-checked here like
 * any other (exact nonce and mac lengths, bounded certificates, signatures,
 * URLs and reasons, a chunk inside its frame).
 *
 * The body travels as bin, not as an embedded msgpack object: the runtime
 * treats bodies as opaque bytes, a bin is copied without re-parsing, and it
 * is unambiguous (an embedded body that was itself a nil or a bin could
 * not be told apart from "no body" or from the bin form). Bodies are
 * checked by the actor that reads them (troupe_reader).
 */
#include "troupe/wire.h"

#include <msgpack.h>
#include <stdbool.h>
#include <string.h>

#include "mpwalk.h"
#include "troupe/alloc.h"

/* frame -> envelope list -> envelope -> address */
#define FRAME_DEPTH 4u
#define FRAME_FIELDS 5u
#define ENVELOPE_FIELDS 8u
#define WIRE_FLAGS ((uint32_t)(TROUPE_MSG_REPLY | TROUPE_MSG_SYSTEM))
#define ZONE_CHUNK 8192u

struct troupe_wire_decoder {
    msgpack_zone zone;
};

/* ---- sizes ---- */

static size_t
uint_size(uint64_t v)
{
    if (v < 128)
        return 1;
    if (v <= 0xff)
        return 2;
    if (v <= 0xffff)
        return 3;
    if (v <= 0xffffffffu)
        return 5;
    return 9;
}

static size_t
array_hdr_size(uint64_t n)
{
    return n < 16 ? 1 : n <= 0xffff ? 3 : 5;
}

static size_t
addr_size(troupe_addr a)
{
    return 1 + uint_size(a.node) + uint_size(a.slot) + uint_size(a.gen);
}

static int
err_known(uint64_t v)
{
    switch (v) {
#define ERR_CASE(name, num, text) case num:
        TROUPE_ERR_LIST(ERR_CASE)
#undef ERR_CASE
        return 1;
    default:
        return 0;
    }
}

/* Can m travel? EINVAL or ETOOBIG when not. */
static troupe_err
check_msg(const troupe_msg *m)
{
    if (m == NULL || m->ptr != NULL || m->deadline < 0 ||
        !err_known((uint64_t)m->err))
        return TROUPE_EINVAL;
    if (troupe_msg_len(m) > TROUPE_WIRE_BODY_MAX)
        return TROUPE_ETOOBIG;
    return TROUPE_OK;
}

size_t
troupe_wire_envelope_size(const troupe_msg *m)
{
    if (check_msg(m) != TROUPE_OK)
        return 0;
    size_t blen = troupe_msg_len(m);
    size_t body = blen == 0        ? 1
                  : blen <= 0xff   ? 2 + blen
                  : blen <= 0xffff ? 3 + blen
                                   : 5 + blen;
    return 1 + uint_size(m->kind) + uint_size(m->flags & WIRE_FLAGS) +
           addr_size(m->from) + addr_size(m->to) + uint_size(m->corr) +
           uint_size((uint64_t)m->deadline) + uint_size((uint64_t)m->err) +
           body;
}

size_t
troupe_wire_data_overhead(uint32_t sender, uint64_t incarnation, size_t n)
{
    return 1 + uint_size(TROUPE_WIRE_VERSION) + uint_size(TROUPE_FRAME_DATA) +
           uint_size(sender) + uint_size(incarnation) + array_hdr_size(n);
}

/* ---- encoding ---- */

struct fixbuf {
    unsigned char *p;
    size_t len;
    size_t cap;
};

static int
fixbuf_write(void *data, const char *buf, size_t len)
{
    struct fixbuf *fb = data;
    if (len == 0)
        return 0;
    if (len > fb->cap - fb->len)
        return -1;
    memcpy(fb->p + fb->len, buf, len);
    fb->len += len;
    return 0;
}

static int
pack_addr(msgpack_packer *pk, troupe_addr a)
{
    return msgpack_pack_array(pk, 3) | msgpack_pack_uint32(pk, a.node) |
           msgpack_pack_uint32(pk, a.slot) | msgpack_pack_uint32(pk, a.gen);
}

static int
pack_envelope(msgpack_packer *pk, const troupe_msg *m)
{
    size_t blen = troupe_msg_len(m);
    int rc = msgpack_pack_array(pk, ENVELOPE_FIELDS) |
             msgpack_pack_uint32(pk, m->kind) |
             msgpack_pack_uint32(pk, m->flags & WIRE_FLAGS) |
             pack_addr(pk, m->from) | pack_addr(pk, m->to) |
             msgpack_pack_uint64(pk, m->corr) |
             msgpack_pack_uint64(pk, (uint64_t)m->deadline) |
             msgpack_pack_uint32(pk, (uint32_t)m->err);
    if (blen == 0)
        return rc | msgpack_pack_nil(pk);
    return rc | msgpack_pack_bin(pk, blen) |
           msgpack_pack_bin_body(pk, troupe_msg_data(m), blen);
}

static void
pack_frame_hdr(msgpack_packer *pk, troupe_frame_type type, uint32_t sender,
               uint64_t incarnation, int *rc)
{
    *rc |= msgpack_pack_array(pk, FRAME_FIELDS) |
           msgpack_pack_uint32(pk, TROUPE_WIRE_VERSION) |
           msgpack_pack_uint32(pk, (uint32_t)type) |
           msgpack_pack_uint32(pk, sender) |
           msgpack_pack_uint64(pk, incarnation);
}

troupe_err
troupe_wire_encode_data(uint32_t sender, uint64_t incarnation,
                        const troupe_msg *const *msgs, size_t n, void *buf,
                        size_t cap, size_t *len)
{
    if (msgs == NULL || buf == NULL || len == NULL || sender == 0 || n == 0 ||
        n > TROUPE_WIRE_BATCH_MAX)
        return TROUPE_EINVAL;
    size_t total = troupe_wire_data_overhead(sender, incarnation, n);
    for (size_t k = 0; k < n; k++) {
        troupe_err e = check_msg(msgs[k]);
        if (e != TROUPE_OK)
            return e;
        total += troupe_wire_envelope_size(msgs[k]);
    }
    if (total > TROUPE_WIRE_FRAME_MAX || total > cap)
        return TROUPE_ETOOBIG;
    struct fixbuf fb = {buf, 0, cap};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, fixbuf_write);
    int rc = 0;
    pack_frame_hdr(&pk, TROUPE_FRAME_DATA, sender, incarnation, &rc);
    rc |= msgpack_pack_array(&pk, n);
    for (size_t k = 0; k < n && rc == 0; k++)
        rc |= pack_envelope(&pk, msgs[k]);
    /* The sizes above mirror the packer; a mismatch is a bug here, but it
     * must still never write past cap (fixbuf_write refuses). */
    if (rc != 0 || fb.len != total)
        return TROUPE_ETOOBIG;
    *len = fb.len;
    return TROUPE_OK;
}

static bool
known_err(troupe_err e)
{
    return (int)e >= 0 && err_known((uint64_t)(int)e);
}

/* A present proof field is exactly `fixed` bytes (fixed > 0) or 1..max. */
static bool
field_ok(const uint8_t *p, size_t len, size_t fixed, size_t max)
{
    if (p == NULL)
        return len == 0;
    return fixed ? len == fixed : len >= 1 && len <= max;
}

static bool
proof_ok(const troupe_wire_proof *pr)
{
    return field_ok(pr->mac, pr->mac_len, TROUPE_WIRE_MAC_LEN, 0) &&
           field_ok(pr->cert, pr->cert_len, 0, TROUPE_WIRE_CERT_MAX) &&
           field_ok(pr->sig, pr->sig_len, 0, TROUPE_WIRE_SIG_MAX) &&
           (pr->cert == NULL) == (pr->sig == NULL);
}

static bool
proof_empty(const troupe_wire_proof *pr)
{
    return pr->mac == NULL && pr->cert == NULL && pr->sig == NULL &&
           pr->mac_len == 0 && pr->cert_len == 0 && pr->sig_len == 0;
}

static int
pack_opt_bin(msgpack_packer *pk, const uint8_t *p, size_t len)
{
    if (p == NULL)
        return msgpack_pack_nil(pk);
    return msgpack_pack_bin(pk, len) | msgpack_pack_bin_body(pk, p, len);
}

static int
pack_proof(msgpack_packer *pk, const troupe_wire_proof *pr)
{
    return pack_opt_bin(pk, pr->mac, pr->mac_len) |
           pack_opt_bin(pk, pr->cert, pr->cert_len) |
           pack_opt_bin(pk, pr->sig, pr->sig_len);
}

troupe_err
troupe_wire_encode_ctl(const troupe_wire_ctl *c, void *buf, size_t cap,
                       size_t *len)
{
    if (c == NULL || buf == NULL || len == NULL || c->sender == 0)
        return TROUPE_EINVAL;
    bool hello = c->type == TROUPE_FRAME_HELLO;
    bool ack = c->type == TROUPE_FRAME_HELLO_ACK;
    bool auth = c->type == TROUPE_FRAME_AUTH;
    bool refuse = c->type == TROUPE_FRAME_REFUSE;
    if (!hello && !ack && !auth && !refuse)
        return TROUPE_EINVAL;
    /* each type carries exactly its own fields */
    if ((c->url != NULL && !hello) || ((c->nonce != NULL) != (hello || ack)) ||
        (!(ack || auth) && !proof_empty(&c->proof)) ||
        ((ack || auth) && !proof_ok(&c->proof)) ||
        (!refuse && (c->err != TROUPE_OK || c->reason != NULL)) ||
        (refuse && !known_err(c->err)))
        return TROUPE_EINVAL;
    size_t ulen = c->url ? strlen(c->url) : 0;
    size_t rlen = c->reason ? strlen(c->reason) : 0;
    if (ulen > TROUPE_WIRE_URL_MAX || rlen > TROUPE_WIRE_REASON_MAX)
        return TROUPE_ETOOBIG;
    struct fixbuf fb = {buf, 0, cap};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, fixbuf_write);
    int rc = 0;
    pack_frame_hdr(&pk, c->type, c->sender, c->incarnation, &rc);
    if (hello) {
        rc |= msgpack_pack_array(&pk, 2) | msgpack_pack_str(&pk, ulen) |
              msgpack_pack_str_body(&pk, c->url ? c->url : "", ulen) |
              pack_opt_bin(&pk, c->nonce, TROUPE_WIRE_NONCE_LEN);
    } else if (ack) {
        rc |= msgpack_pack_array(&pk, 4) |
              pack_opt_bin(&pk, c->nonce, TROUPE_WIRE_NONCE_LEN) |
              pack_proof(&pk, &c->proof);
    } else if (auth) {
        rc |= msgpack_pack_array(&pk, 3) | pack_proof(&pk, &c->proof);
    } else {
        rc |= msgpack_pack_array(&pk, 2) |
              msgpack_pack_uint32(&pk, (uint32_t)c->err) |
              msgpack_pack_str(&pk, rlen) |
              msgpack_pack_str_body(&pk, c->reason ? c->reason : "", rlen);
    }
    if (rc != 0)
        return TROUPE_ETOOBIG;
    *len = fb.len;
    return TROUPE_OK;
}

static size_t
bin_hdr_size(size_t n)
{
    return n <= 0xff ? 2 : n <= 0xffff ? 3 : 5;
}

size_t
troupe_wire_part_size(uint32_t sender, uint64_t incarnation, size_t total,
                      size_t offset, size_t chunk_len)
{
    return 1 + uint_size(TROUPE_WIRE_VERSION) + uint_size(TROUPE_FRAME_PART) +
           uint_size(sender) + uint_size(incarnation) + 1 + uint_size(total) +
           uint_size(offset) + bin_hdr_size(chunk_len) + chunk_len;
}

troupe_err
troupe_wire_encode_part(uint32_t sender, uint64_t incarnation,
                        const void *frame, size_t total, size_t offset,
                        size_t chunk_len, void *buf, size_t cap, size_t *len)
{
    if (frame == NULL || buf == NULL || len == NULL || sender == 0 ||
        chunk_len == 0 || chunk_len > TROUPE_WIRE_PART_MAX ||
        total > TROUPE_WIRE_FRAME_MAX || offset > total ||
        chunk_len > total - offset)
        return TROUPE_EINVAL;
    if (troupe_wire_part_size(sender, incarnation, total, offset, chunk_len) >
        cap)
        return TROUPE_ETOOBIG;
    struct fixbuf fb = {buf, 0, cap};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, fixbuf_write);
    int rc = 0;
    pack_frame_hdr(&pk, TROUPE_FRAME_PART, sender, incarnation, &rc);
    rc |= msgpack_pack_array(&pk, 3) |
          msgpack_pack_uint32(&pk, (uint32_t)total) |
          msgpack_pack_uint32(&pk, (uint32_t)offset) |
          msgpack_pack_bin(&pk, chunk_len) |
          msgpack_pack_bin_body(&pk, (const unsigned char *)frame + offset,
                                chunk_len);
    if (rc != 0)
        return TROUPE_ETOOBIG;
    *len = fb.len;
    return TROUPE_OK;
}

troupe_err
troupe_wire_encode(uint32_t sender, const troupe_msg *m, void **out,
                   size_t *len)
{
    if (out == NULL || len == NULL)
        return TROUPE_EINVAL;
    troupe_err e = check_msg(m);
    if (e != TROUPE_OK)
        return e;
    size_t cap =
        troupe_wire_data_overhead(sender, 0, 1) + troupe_wire_envelope_size(m);
    void *buf = troupe_malloc(cap);
    if (buf == NULL)
        return TROUPE_ENOMEM;
    e = troupe_wire_encode_data(sender, 0, &m, 1, buf, cap, len);
    if (e != TROUPE_OK) {
        troupe_free(buf);
        return e;
    }
    *out = buf;
    return TROUPE_OK;
}

/* ---- decoding ---- */

troupe_err
troupe_wire_decoder_create(troupe_wire_decoder **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    troupe_wire_decoder *d = troupe_malloc(sizeof(*d));
    if (d == NULL)
        return TROUPE_ENOMEM;
    if (!msgpack_zone_init(&d->zone, ZONE_CHUNK)) {
        troupe_free(d);
        return TROUPE_ENOMEM;
    }
    *out = d;
    return TROUPE_OK;
}

void
troupe_wire_decoder_destroy(troupe_wire_decoder *d)
{
    if (d == NULL)
        return;
    msgpack_zone_destroy(&d->zone);
    troupe_free(d);
}

static int
get_uint(const msgpack_object *o, uint64_t max, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
        return 0;
    *v = o->via.u64;
    return 1;
}

static int
get_u32(const msgpack_object *o, uint32_t *v)
{
    uint64_t u;
    if (!get_uint(o, UINT32_MAX, &u))
        return 0;
    *v = (uint32_t)u;
    return 1;
}

static int
get_addr(const msgpack_object *o, troupe_addr *a)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
        return 0;
    const msgpack_object *f = o->via.array.ptr;
    return get_u32(&f[0], &a->node) && get_u32(&f[1], &a->slot) &&
           get_u32(&f[2], &a->gen);
}

/* The checked fields of one envelope; body points into the frame. */
struct envelope {
    uint32_t kind, flags, err;
    troupe_addr from, to;
    uint64_t corr;
    int64_t deadline;
    const void *body;
    size_t body_len;
};

static troupe_err
parse_envelope(const msgpack_object *o, struct envelope *env)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != ENVELOPE_FIELDS)
        return TROUPE_EPROTO;
    const msgpack_object *f = o->via.array.ptr;
    uint64_t deadline;
    if (!get_u32(&f[0], &env->kind) || !get_u32(&f[1], &env->flags) ||
        (env->flags & ~WIRE_FLAGS) != 0 || !get_addr(&f[2], &env->from) ||
        !get_addr(&f[3], &env->to) ||
        !get_uint(&f[4], UINT64_MAX, &env->corr) ||
        !get_uint(&f[5], INT64_MAX, &deadline) || !get_u32(&f[6], &env->err) ||
        !err_known(env->err))
        return TROUPE_EPROTO;
    env->deadline = (int64_t)deadline;
    if (f[7].type == MSGPACK_OBJECT_NIL) {
        env->body = NULL;
        env->body_len = 0;
    } else if (f[7].type == MSGPACK_OBJECT_BIN &&
               f[7].via.bin.size <= TROUPE_WIRE_BODY_MAX) {
        env->body = f[7].via.bin.ptr;
        env->body_len = f[7].via.bin.size;
    } else {
        return TROUPE_EPROTO;
    }
    return TROUPE_OK;
}

static troupe_err
build_msg(const struct envelope *env, troupe_msg **out)
{
    troupe_msg *m;
    troupe_err e = troupe_msg_create(&m, env->kind, NULL, 0);
    if (e != TROUPE_OK)
        return e;
    if (env->body_len > 0) {
        e = troupe_body_copy(env->body, env->body_len, &m->body);
        if (e != TROUPE_OK) {
            troupe_msg_destroy(m);
            return e;
        }
    }
    m->flags = env->flags;
    m->from = env->from;
    m->to = env->to;
    m->corr = env->corr;
    m->deadline = env->deadline;
    m->err = (troupe_err)env->err;
    *out = m;
    return TROUPE_OK;
}

/* A payload array of exactly n elements; its elements, or NULL. */
static const msgpack_object *
payload_array(const msgpack_object *pl, uint32_t n)
{
    if (pl->type != MSGPACK_OBJECT_ARRAY || pl->via.array.size != n)
        return NULL;
    return pl->via.array.ptr;
}

/* nil (absent) or a bin of exactly `fixed` bytes (fixed > 0) or 1..max. */
static bool
get_opt_bin(const msgpack_object *o, size_t fixed, size_t max,
            const uint8_t **p, size_t *len)
{
    if (o->type == MSGPACK_OBJECT_NIL) {
        *p = NULL;
        *len = 0;
        return true;
    }
    if (o->type != MSGPACK_OBJECT_BIN)
        return false;
    size_t n = o->via.bin.size;
    if (fixed ? n != fixed : n == 0 || n > max)
        return false;
    *p = (const uint8_t *)o->via.bin.ptr;
    *len = n;
    return true;
}

static bool
get_proof(const msgpack_object *f, troupe_wire_proof *pr)
{
    return get_opt_bin(&f[0], TROUPE_WIRE_MAC_LEN, 0, &pr->mac, &pr->mac_len) &&
           get_opt_bin(&f[1], 0, TROUPE_WIRE_CERT_MAX, &pr->cert,
                       &pr->cert_len) &&
           get_opt_bin(&f[2], 0, TROUPE_WIRE_SIG_MAX, &pr->sig, &pr->sig_len) &&
           (pr->cert == NULL) == (pr->sig == NULL);
}

static bool
get_nonce(const msgpack_object *o, const uint8_t **nonce)
{
    size_t len;
    return o->type == MSGPACK_OBJECT_BIN &&
           get_opt_bin(o, TROUPE_WIRE_NONCE_LEN, 0, nonce, &len);
}

/* The payload of a frame other than DATA, into h. */
static bool
parse_ctl(const msgpack_object *pl, troupe_frame_hdr *h)
{
    const msgpack_object *f;
    uint64_t v;
    switch (h->type) {
    case TROUPE_FRAME_HELLO:
        if ((f = payload_array(pl, 2)) == NULL ||
            f[0].type != MSGPACK_OBJECT_STR ||
            f[0].via.str.size > TROUPE_WIRE_URL_MAX ||
            !get_nonce(&f[1], &h->nonce))
            return false;
        h->url = f[0].via.str.ptr;
        h->url_len = f[0].via.str.size;
        return true;
    case TROUPE_FRAME_HELLO_ACK:
        return (f = payload_array(pl, 4)) != NULL &&
               get_nonce(&f[0], &h->nonce) && get_proof(&f[1], &h->proof);
    case TROUPE_FRAME_AUTH:
        return (f = payload_array(pl, 3)) != NULL && get_proof(f, &h->proof);
    case TROUPE_FRAME_PART:
        if ((f = payload_array(pl, 3)) == NULL ||
            !get_uint(&f[0], TROUPE_WIRE_FRAME_MAX, &v))
            return false;
        h->part_total = (uint32_t)v;
        if (!get_uint(&f[1], h->part_total, &v) ||
            !get_opt_bin(&f[2], 0, TROUPE_WIRE_PART_MAX, &h->chunk,
                         &h->chunk_len) ||
            h->chunk == NULL || h->chunk_len > h->part_total - v)
            return false;
        h->part_offset = (uint32_t)v;
        return true;
    case TROUPE_FRAME_REFUSE:
        if ((f = payload_array(pl, 2)) == NULL ||
            !get_uint(&f[0], UINT32_MAX, &v) || !err_known(v) ||
            f[1].type != MSGPACK_OBJECT_STR ||
            f[1].via.str.size > TROUPE_WIRE_REASON_MAX)
            return false;
        h->refuse_err = (troupe_err)v;
        h->reason = f[1].via.str.ptr;
        h->reason_len = f[1].via.str.size;
        return true;
    default:
        return false;
    }
}

/* Steps 2 and 3 over bytes that passed the walk. */
static troupe_err
decode_checked(msgpack_zone *zone, const char *buf, size_t len,
               troupe_frame_hdr *hdr, troupe_wire_msg_fn fn, void *arg)
{
    msgpack_object root;
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack(buf, len, &off, zone, &root);
    if (rc == MSGPACK_UNPACK_NOMEM_ERROR)
        return TROUPE_ENOMEM;
    if (rc != MSGPACK_UNPACK_SUCCESS || off != len)
        return TROUPE_EPROTO;
    if (root.type != MSGPACK_OBJECT_ARRAY ||
        root.via.array.size != FRAME_FIELDS)
        return TROUPE_EPROTO;
    const msgpack_object *f = root.via.array.ptr;
    uint64_t version, type;
    troupe_frame_hdr h = {0};
    if (!get_uint(&f[0], UINT64_MAX, &version) ||
        version != TROUPE_WIRE_VERSION ||
        !get_uint(&f[1], TROUPE_FRAME_REFUSE, &type) ||
        !get_u32(&f[2], &h.sender) || h.sender == 0 ||
        !get_uint(&f[3], UINT64_MAX, &h.incarnation))
        return TROUPE_EPROTO;
    h.type = (troupe_frame_type)type;
    const msgpack_object *pl = &f[4];
    if (h.type == TROUPE_FRAME_DATA) {
        if (pl->type != MSGPACK_OBJECT_ARRAY || pl->via.array.size == 0 ||
            pl->via.array.size > TROUPE_WIRE_BATCH_MAX)
            return TROUPE_EPROTO;
        h.count = pl->via.array.size;
        struct envelope env;
        for (uint32_t k = 0; k < h.count; k++) {
            troupe_err e = parse_envelope(&pl->via.array.ptr[k], &env);
            if (e != TROUPE_OK)
                return e;
        }
    } else if (!parse_ctl(pl, &h)) {
        return TROUPE_EPROTO;
    }
    if (hdr != NULL)
        *hdr = h;
    if (h.type != TROUPE_FRAME_DATA || fn == NULL)
        return TROUPE_OK;
    for (uint32_t k = 0; k < h.count; k++) {
        struct envelope env;
        troupe_msg *m = NULL;
        parse_envelope(&pl->via.array.ptr[k], &env);
        troupe_err e = build_msg(&env, &m);
        if (e != TROUPE_OK)
            return e;
        fn(arg, &m);
        troupe_msg_destroy(m);
    }
    return TROUPE_OK;
}

troupe_err
troupe_wire_decode_frame(troupe_wire_decoder *d, const void *buf, size_t len,
                         troupe_frame_hdr *hdr, troupe_wire_msg_fn fn,
                         void *arg)
{
    if (buf == NULL && len > 0)
        return TROUPE_EINVAL;
    if (len > TROUPE_WIRE_FRAME_MAX)
        return TROUPE_ETOOBIG;
    if (len == 0)
        return TROUPE_EPROTO;
    size_t used;
    troupe_err e = troupe__mp_walk(buf, len, FRAME_DEPTH, &used);
    if (e != TROUPE_OK)
        return e;
    if (used != len)
        return TROUPE_EPROTO; /* trailing bytes */
    if (d != NULL) {
        e = decode_checked(&d->zone, buf, len, hdr, fn, arg);
        msgpack_zone_clear(&d->zone);
        return e;
    }
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, ZONE_CHUNK))
        return TROUPE_ENOMEM;
    e = decode_checked(&zone, buf, len, hdr, fn, arg);
    msgpack_zone_destroy(&zone);
    return e;
}

troupe_err
troupe_wire_frame_version(const void *buf, size_t len, uint64_t *version)
{
    if (buf == NULL || version == NULL)
        return TROUPE_EINVAL;
    struct mp_item it;
    const unsigned char *p = buf;
    if (len > 10)
        len = 10;
    if (troupe__mp_item(p, len, &it) != TROUPE_OK ||
        it.type != TROUPE_MP_ARRAY || it.u != FRAME_FIELDS)
        return TROUPE_EPROTO;
    size_t off = it.size;
    if (troupe__mp_item(p + off, len - off, &it) != TROUPE_OK ||
        it.type != TROUPE_MP_UINT)
        return TROUPE_EPROTO;
    *version = it.u;
    return TROUPE_OK;
}

struct take_one {
    troupe_msg *m;
};

static void
take_one(void *arg, troupe_msg **m)
{
    struct take_one *t = arg;
    if (t->m == NULL) {
        t->m = *m;
        *m = NULL;
    }
}

troupe_err
troupe_wire_decode(const void *buf, size_t len, uint32_t *sender,
                   troupe_msg **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    troupe_frame_hdr h;
    struct take_one t = {NULL};
    troupe_err e = troupe_wire_decode_frame(NULL, buf, len, &h, take_one, &t);
    if (e == TROUPE_OK && (h.type != TROUPE_FRAME_DATA || h.count != 1))
        e = TROUPE_EPROTO;
    if (e != TROUPE_OK) {
        troupe_msg_destroy(t.m);
        return e;
    }
    if (sender != NULL)
        *sender = h.sender;
    *out = t.m;
    return TROUPE_OK;
}
