/* Envelope and frame encoding: round trips of every field, batching,
 * handshake, PART and REFUSE frames, wire versions, limits and bad
 * arguments. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "troupe/alloc.h"
#include "troupe/wire.h"

static troupe_msg *
make_msg(uint32_t kind, const void *body, size_t len)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, kind, body, len));
    return m;
}

static void
assert_same(const troupe_msg *a, const troupe_msg *b)
{
    ck_assert_uint_eq(a->kind, b->kind);
    ck_assert_uint_eq(a->flags, b->flags);
    ck_assert(troupe_addr_eq(a->from, b->from));
    ck_assert(troupe_addr_eq(a->to, b->to));
    ck_assert_uint_eq(a->corr, b->corr);
    ck_assert_int_eq(a->deadline, b->deadline);
    ck_assert_int_eq(a->err, b->err);
    ck_assert_uint_eq(troupe_msg_len(a), troupe_msg_len(b));
    if (troupe_msg_len(a) > 0)
        ck_assert_mem_eq(troupe_msg_data(a), troupe_msg_data(b),
                         troupe_msg_len(a));
    ck_assert_ptr_null(b->ptr);
}

/* Encodes m alone, checks the size prediction, decodes, compares. */
static void
round_trip(const troupe_msg *m)
{
    void *buf = NULL;
    size_t len = 0;
    ck_assert_ok(troupe_wire_encode(7, m, &buf, &len));
    ck_assert_uint_eq(len, troupe_wire_data_overhead(7, 0, 1) +
                               troupe_wire_envelope_size(m));
    troupe_msg *out = NULL;
    uint32_t sender = 0;
    ck_assert_ok(troupe_wire_decode(buf, len, &sender, &out));
    ck_assert_uint_eq(sender, 7);
    assert_same(m, out);
    troupe_msg_destroy(out);
    troupe_free(buf);
}

static const uint64_t u32_edges[] = {
    0,         1, 127, 128, 255, 256, 65535, 65536, 1u << 31, UINT32_MAX - 1,
    UINT32_MAX};
#define N_U32 (sizeof(u32_edges) / sizeof(u32_edges[0]))

START_TEST(test_wire_kind_and_addresses_round_trip_at_every_width)
{
    for (size_t i = 0; i < N_U32; i++) {
        uint32_t v = (uint32_t)u32_edges[i];
        troupe_msg *m = make_msg(v, NULL, 0);
        m->from = (troupe_addr){v, (uint32_t)u32_edges[N_U32 - 1 - i], v};
        m->to = (troupe_addr){(uint32_t)u32_edges[(i + 3) % N_U32], v,
                              (uint32_t)u32_edges[(i + 5) % N_U32]};
        round_trip(m);
        troupe_msg_destroy(m);
    }
}
END_TEST

START_TEST(test_wire_corr_deadline_flags_err_round_trip)
{
    const uint64_t corrs[] = {
        0,         1, 127, 128, 65536, UINT32_MAX, (uint64_t)UINT32_MAX + 1,
        UINT64_MAX};
    const int64_t deadlines[] = {
        0, 1, 1700000000000LL, INT32_MAX, (int64_t)UINT32_MAX + 1, INT64_MAX};
    const uint32_t flags[] = {0, TROUPE_MSG_REPLY, TROUPE_MSG_SYSTEM,
                              TROUPE_MSG_REPLY | TROUPE_MSG_SYSTEM};
    for (size_t c = 0; c < sizeof(corrs) / sizeof(corrs[0]); c++) {
        for (size_t d = 0; d < sizeof(deadlines) / sizeof(deadlines[0]); d++) {
            troupe_msg *m = make_msg(3, "\x91\x01", 2);
            m->corr = corrs[c];
            m->deadline = deadlines[d];
            m->flags = flags[(c + d) % 4];
            m->err = (troupe_err)((c * 7 + d) % (TROUPE_EFAILED + 1));
            round_trip(m);
            troupe_msg_destroy(m);
        }
    }
    for (int e = TROUPE_OK; e <= TROUPE_EFAILED; e++) {
        troupe_msg *m = make_msg(1, NULL, 0);
        m->err = (troupe_err)e;
        m->flags = TROUPE_MSG_REPLY;
        round_trip(m);
        troupe_msg_destroy(m);
    }
}
END_TEST

START_TEST(test_wire_bodies_round_trip_at_every_bin_width)
{
    const size_t lens[] = {0, 1, 2, 255, 256, 65535, 65536, 300000};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        unsigned char *body = malloc(lens[i] + 1);
        for (size_t k = 0; k < lens[i]; k++)
            body[k] = (unsigned char)(k * 31 + i);
        troupe_msg *m = make_msg(9, lens[i] ? body : NULL, lens[i]);
        round_trip(m);
        troupe_msg_destroy(m);
        free(body);
    }
}
END_TEST

START_TEST(test_wire_empty_body_decodes_as_no_body)
{
    troupe_msg *m = make_msg(2, "", 0);
    void *buf;
    size_t len;
    ck_assert_ok(troupe_wire_encode(1, m, &buf, &len));
    troupe_msg *out;
    ck_assert_ok(troupe_wire_decode(buf, len, NULL, &out));
    ck_assert_ptr_null(out->body);
    troupe_msg_destroy(out);
    troupe_msg_destroy(m);
    troupe_free(buf);
}
END_TEST

START_TEST(test_wire_internal_flag_bits_are_not_sent)
{
    troupe_msg *m = make_msg(2, NULL, 0);
    m->flags = TROUPE_MSG_REPLY | (1u << 29) | (1u << 30);
    void *buf;
    size_t len;
    ck_assert_ok(troupe_wire_encode(1, m, &buf, &len));
    troupe_msg *out;
    ck_assert_ok(troupe_wire_decode(buf, len, NULL, &out));
    ck_assert_uint_eq(out->flags, TROUPE_MSG_REPLY);
    troupe_msg_destroy(out);
    troupe_msg_destroy(m);
    troupe_free(buf);
}
END_TEST

struct collect {
    troupe_msg *msgs[64];
    int n;
};

static void
collect_fn(void *arg, troupe_msg **m)
{
    struct collect *c = arg;
    ck_assert_int_lt(c->n, 64);
    c->msgs[c->n++] = *m;
    *m = NULL;
}

static void
leave_fn(void *arg, troupe_msg **m)
{
    int *n = arg;
    ck_assert_ptr_nonnull(*m);
    (*n)++; /* left in *m: the decoder destroys it (ASan checks the leak) */
}

START_TEST(test_wire_batch_of_many_envelopes_decodes_in_order)
{
    troupe_msg *msgs[40];
    size_t cap = troupe_wire_data_overhead(5, 99, 40);
    for (int i = 0; i < 40; i++) {
        char body[40];
        memset(body, 'a' + i % 26, sizeof(body));
        msgs[i] = make_msg((uint32_t)i, body, (size_t)i);
        msgs[i]->corr = (uint64_t)i * 1000;
        msgs[i]->to = (troupe_addr){2, (uint32_t)i + 1, 1};
        cap += troupe_wire_envelope_size(msgs[i]);
    }
    unsigned char *buf = malloc(cap);
    size_t len;
    ck_assert_ok(troupe_wire_encode_data(5, 99, (const troupe_msg **)msgs, 40,
                                         buf, cap, &len));
    ck_assert_uint_eq(len, cap);
    troupe_wire_decoder *d;
    ck_assert_ok(troupe_wire_decoder_create(&d));
    for (int round = 0; round < 3; round++) { /* the zone is reused */
        struct collect c = {.n = 0};
        troupe_frame_hdr h;
        ck_assert_ok(troupe_wire_decode_frame(d, buf, len, &h, collect_fn, &c));
        ck_assert_int_eq(h.type, TROUPE_FRAME_DATA);
        ck_assert_uint_eq(h.sender, 5);
        ck_assert_uint_eq(h.incarnation, 99);
        ck_assert_uint_eq(h.count, 40);
        ck_assert_int_eq(c.n, 40);
        for (int i = 0; i < 40; i++) {
            assert_same(msgs[i], c.msgs[i]);
            troupe_msg_destroy(c.msgs[i]);
        }
    }
    int left = 0;
    ck_assert_ok(troupe_wire_decode_frame(d, buf, len, NULL, leave_fn, &left));
    ck_assert_int_eq(left, 40);
    /* validation only */
    ck_assert_ok(troupe_wire_decode_frame(d, buf, len, NULL, NULL, NULL));
    /* a batch is not a single message */
    troupe_msg *one = NULL;
    ck_assert_err(troupe_wire_decode(buf, len, NULL, &one), TROUPE_EPROTO);
    ck_assert_ptr_null(one);
    troupe_wire_decoder_destroy(d);
    for (int i = 0; i < 40; i++)
        troupe_msg_destroy(msgs[i]);
    free(buf);
}
END_TEST

static const uint8_t nonce_a[TROUPE_WIRE_NONCE_LEN] = {1, 2, 3,  4,  5,  6, 7,
                                                       8, 9, 10, 11, 12, 13};
static const uint8_t mac_a[TROUPE_WIRE_MAC_LEN] = {0xaa, 0xbb, 0xcc, 0xdd};

START_TEST(test_wire_hello_and_ack_round_trip)
{
    unsigned char buf[TROUPE_WIRE_CTL_MAX];
    size_t len;
    troupe_frame_hdr h;
    troupe_wire_ctl c = {.type = TROUPE_FRAME_HELLO,
                         .sender = 3,
                         .incarnation = UINT64_MAX,
                         .url = "tcp://127.0.0.1:5555",
                         .nonce = nonce_a};
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
    ck_assert_int_eq(h.type, TROUPE_FRAME_HELLO);
    ck_assert_uint_eq(h.sender, 3);
    ck_assert_uint_eq(h.incarnation, UINT64_MAX);
    ck_assert_uint_eq(h.url_len, strlen("tcp://127.0.0.1:5555"));
    ck_assert_mem_eq(h.url, "tcp://127.0.0.1:5555", h.url_len);
    ck_assert_mem_eq(h.nonce, nonce_a, TROUPE_WIRE_NONCE_LEN);
    uint64_t v = 0;
    ck_assert_ok(troupe_wire_frame_version(buf, len, &v));
    ck_assert_uint_eq(v, TROUPE_WIRE_VERSION);

    c.url = NULL;
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
    ck_assert_uint_eq(h.url_len, 0);

    /* an ack with a mac only, then with a certificate and signature */
    uint8_t cert[TROUPE_WIRE_CERT_MAX], sig[TROUPE_WIRE_SIG_MAX];
    memset(cert, 0x30, sizeof(cert));
    memset(sig, 0x5a, sizeof(sig));
    c = (troupe_wire_ctl){
        .type = TROUPE_FRAME_HELLO_ACK,
        .sender = 4,
        .incarnation = 77,
        .nonce = nonce_a,
        .proof = {.mac = mac_a, .mac_len = TROUPE_WIRE_MAC_LEN}};
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
    ck_assert_int_eq(h.type, TROUPE_FRAME_HELLO_ACK);
    ck_assert_uint_eq(h.sender, 4);
    ck_assert_uint_eq(h.incarnation, 77);
    ck_assert_ptr_null(h.url);
    ck_assert_mem_eq(h.nonce, nonce_a, TROUPE_WIRE_NONCE_LEN);
    ck_assert_uint_eq(h.proof.mac_len, TROUPE_WIRE_MAC_LEN);
    ck_assert_mem_eq(h.proof.mac, mac_a, TROUPE_WIRE_MAC_LEN);
    ck_assert_ptr_null(h.proof.cert);
    ck_assert_ptr_null(h.proof.sig);
    troupe_msg *m = NULL;
    ck_assert_err(troupe_wire_decode(buf, len, NULL, &m), TROUPE_EPROTO);
    c.proof.cert = cert;
    c.proof.cert_len = sizeof(cert);
    c.proof.sig = sig;
    c.proof.sig_len = sizeof(sig);
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    ck_assert_uint_le(len, TROUPE_WIRE_CTL_MAX);
    ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
    ck_assert_uint_eq(h.proof.cert_len, sizeof(cert));
    ck_assert_mem_eq(h.proof.cert, cert, sizeof(cert));
    ck_assert_uint_eq(h.proof.sig_len, sizeof(sig));
    ck_assert_mem_eq(h.proof.sig, sig, sizeof(sig));

    /* AUTH carries the proof alone; an empty proof is allowed (open mode) */
    c.type = TROUPE_FRAME_AUTH;
    c.nonce = NULL;
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
    ck_assert_int_eq(h.type, TROUPE_FRAME_AUTH);
    ck_assert_ptr_null(h.nonce);
    ck_assert_uint_eq(h.proof.cert_len, sizeof(cert));
    c.proof = (troupe_wire_proof){0};
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
    ck_assert_ptr_null(h.proof.mac);

    /* REFUSE: a code and a reason */
    c = (troupe_wire_ctl){.type = TROUPE_FRAME_REFUSE,
                          .sender = 4,
                          .err = TROUPE_EAUTH,
                          .reason = "node id not allowed here"};
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
    ck_assert_int_eq(h.type, TROUPE_FRAME_REFUSE);
    ck_assert_int_eq(h.refuse_err, TROUPE_EAUTH);
    ck_assert_uint_eq(h.reason_len, strlen("node id not allowed here"));
    ck_assert_mem_eq(h.reason, "node id not allowed here", h.reason_len);

    char url[TROUPE_WIRE_URL_MAX + 2];
    memset(url, 'u', sizeof(url));
    url[TROUPE_WIRE_URL_MAX] = '\0';
    c = (troupe_wire_ctl){.type = TROUPE_FRAME_HELLO,
                          .sender = 3,
                          .incarnation = 1,
                          .url = url,
                          .nonce = nonce_a};
    ck_assert_ok(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len));
    ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
    ck_assert_uint_eq(h.url_len, TROUPE_WIRE_URL_MAX);
    url[TROUPE_WIRE_URL_MAX] = 'u';
    url[TROUPE_WIRE_URL_MAX + 1] = '\0';
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_ETOOBIG);
}
END_TEST

START_TEST(test_wire_parts_cover_a_frame_and_decode_in_bounds)
{
    size_t total = 3 * TROUPE_WIRE_PART_MAX + 17;
    unsigned char *frame = malloc(total), *again = calloc(1, total);
    for (size_t i = 0; i < total; i++)
        frame[i] = (unsigned char)(i * 131u);
    size_t cap = TROUPE_WIRE_PART_MAX + TROUPE_WIRE_PART_OVERHEAD;
    unsigned char *buf = malloc(cap);
    size_t off = 0, parts = 0;
    while (off < total) {
        size_t chunk = total - off < TROUPE_WIRE_PART_MAX
                           ? total - off
                           : TROUPE_WIRE_PART_MAX;
        size_t need = troupe_wire_part_size(9, 0x1234, total, off, chunk);
        ck_assert_uint_le(need, chunk + TROUPE_WIRE_PART_OVERHEAD);
        size_t len;
        ck_assert_err(troupe_wire_encode_part(9, 0x1234, frame, total, off,
                                              chunk, buf, need - 1, &len),
                      TROUPE_ETOOBIG);
        ck_assert_ok(troupe_wire_encode_part(9, 0x1234, frame, total, off,
                                             chunk, buf, cap, &len));
        ck_assert_uint_eq(len, need);
        troupe_frame_hdr h;
        ck_assert_ok(troupe_wire_decode_frame(NULL, buf, len, &h, NULL, NULL));
        ck_assert_int_eq(h.type, TROUPE_FRAME_PART);
        ck_assert_uint_eq(h.sender, 9);
        ck_assert_uint_eq(h.incarnation, 0x1234);
        ck_assert_uint_eq(h.part_total, total);
        ck_assert_uint_eq(h.part_offset, off);
        ck_assert_uint_eq(h.chunk_len, chunk);
        memcpy(again + off, h.chunk, h.chunk_len);
        off += chunk;
        parts++;
    }
    ck_assert_uint_eq(parts, 4);
    ck_assert_mem_eq(again, frame, total);
    size_t len;
    /* a chunk outside its frame, an empty or oversized one, a frame over
     * the cap */
    ck_assert_err(troupe_wire_encode_part(9, 0, frame, total, total - 1, 2, buf,
                                          cap, &len),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_wire_encode_part(9, 0, frame, total, 0, 0, buf, cap, &len),
        TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_part(9, 0, frame, total, 0,
                                          TROUPE_WIRE_PART_MAX + 1, buf, cap,
                                          &len),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_part(9, 0, frame,
                                          (size_t)TROUPE_WIRE_FRAME_MAX + 1, 0,
                                          1, buf, cap, &len),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_wire_encode_part(0, 0, frame, total, 0, 1, buf, cap, &len),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe_wire_encode_part(9, 0, NULL, total, 0, 1, buf, cap, &len),
        TROUPE_EINVAL);
    free(buf);
    free(frame);
    free(again);
}
END_TEST

START_TEST(test_wire_other_version_is_eproto_and_told_apart)
{
    /* a version-1 HELLO as the previous wire format wrote it */
    const unsigned char v1[] = {0x95, 0x01, 0x01, 0x03, 0x01, 0xa0};
    ck_assert_err(
        troupe_wire_decode_frame(NULL, v1, sizeof(v1), NULL, NULL, NULL),
        TROUPE_EPROTO);
    uint64_t v = 0;
    ck_assert_ok(troupe_wire_frame_version(v1, sizeof(v1), &v));
    ck_assert_uint_eq(v, 1);
    /* garbage is not a frame of any version */
    const unsigned char junk[] = {0x93, 0x01, 0x02, 0x03};
    ck_assert_err(troupe_wire_frame_version(junk, sizeof(junk), &v),
                  TROUPE_EPROTO);
    const unsigned char neg[] = {0x95, 0xff, 0x01, 0x03, 0x01, 0xa0};
    ck_assert_err(troupe_wire_frame_version(neg, sizeof(neg), &v),
                  TROUPE_EPROTO);
    ck_assert_err(troupe_wire_frame_version(v1, 0, &v), TROUPE_EPROTO);
    ck_assert_err(troupe_wire_frame_version(NULL, 4, &v), TROUPE_EINVAL);
    ck_assert_err(troupe_wire_frame_version(v1, sizeof(v1), NULL),
                  TROUPE_EINVAL);
}
END_TEST

START_TEST(test_wire_oversized_body_and_frame_are_etoobig)
{
    size_t big = TROUPE_WIRE_BODY_MAX + 1;
    unsigned char *body = calloc(1, big);
    troupe_msg *m = make_msg(1, body, big);
    ck_assert_uint_eq(troupe_wire_envelope_size(m), 0);
    void *buf = NULL;
    size_t len;
    ck_assert_err(troupe_wire_encode(1, m, &buf, &len), TROUPE_ETOOBIG);
    ck_assert_ptr_null(buf);
    troupe_msg_destroy(m);

    /* the largest body still fits a frame of its own */
    m = make_msg(1, body, TROUPE_WIRE_BODY_MAX);
    ck_assert_ok(troupe_wire_encode(1, m, &buf, &len));
    ck_assert_uint_le(len, TROUPE_WIRE_FRAME_MAX);
    troupe_msg *out;
    ck_assert_ok(troupe_wire_decode(buf, len, NULL, &out));
    ck_assert_uint_eq(troupe_msg_len(out), TROUPE_WIRE_BODY_MAX);
    troupe_msg_destroy(out);
    troupe_free(buf);

    /* two of them do not */
    const troupe_msg *two[2] = {m, m};
    unsigned char small[16];
    ck_assert_err(
        troupe_wire_encode_data(1, 0, two, 2, small, sizeof(small), &len),
        TROUPE_ETOOBIG);
    troupe_msg_destroy(m);
    free(body);

    /* a frame longer than the cap is refused before it is read */
    ck_assert_err(troupe_wire_decode_frame(NULL, small,
                                           (size_t)TROUPE_WIRE_FRAME_MAX + 1,
                                           NULL, NULL, NULL),
                  TROUPE_ETOOBIG);
}
END_TEST

START_TEST(test_wire_encode_into_short_buffer_is_etoobig_and_stays_in_bounds)
{
    troupe_msg *m = make_msg(1, "\x92\x01\x02", 3);
    m->corr = 12345;
    const troupe_msg *one[1] = {m};
    size_t need =
        troupe_wire_data_overhead(1, 0, 1) + troupe_wire_envelope_size(m);
    for (size_t cap = 0; cap < need; cap++) {
        unsigned char *buf = malloc(cap ? cap : 1);
        size_t len;
        ck_assert_err(troupe_wire_encode_data(1, 0, one, 1, buf, cap, &len),
                      TROUPE_ETOOBIG);
        free(buf);
    }
    troupe_msg_destroy(m);
}
END_TEST

START_TEST(test_wire_bad_arguments_are_einval)
{
    troupe_msg *m = make_msg(1, NULL, 0);
    const troupe_msg *one[1] = {m};
    unsigned char buf[512];
    size_t len;
    void *out = NULL;

    ck_assert_uint_eq(troupe_wire_envelope_size(NULL), 0);
    m->ptr = buf; /* local-only */
    ck_assert_uint_eq(troupe_wire_envelope_size(m), 0);
    ck_assert_err(troupe_wire_encode_data(1, 0, one, 1, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode(1, m, &out, &len), TROUPE_EINVAL);
    m->ptr = NULL;
    m->deadline = -1;
    ck_assert_err(troupe_wire_encode(1, m, &out, &len), TROUPE_EINVAL);
    m->deadline = 0;
    m->err = (troupe_err)999;
    ck_assert_err(troupe_wire_encode(1, m, &out, &len), TROUPE_EINVAL);
    m->err = TROUPE_OK;

    ck_assert_err(
        troupe_wire_encode_data(1, 0, NULL, 1, buf, sizeof(buf), &len),
        TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_data(1, 0, one, 0, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_data(1, 0, one, TROUPE_WIRE_BATCH_MAX + 1,
                                          buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_data(0, 0, one, 1, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    ck_assert_err(
        troupe_wire_encode_data(1, 0, one, 1, NULL, sizeof(buf), &len),
        TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_data(1, 0, one, 1, buf, sizeof(buf), NULL),
                  TROUPE_EINVAL);
    const troupe_msg *with_null[2] = {m, NULL};
    ck_assert_err(
        troupe_wire_encode_data(1, 0, with_null, 2, buf, sizeof(buf), &len),
        TROUPE_EINVAL);

    troupe_wire_ctl c = {.type = (troupe_frame_type)7, .sender = 1};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c.type = TROUPE_FRAME_DATA;
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c.type = TROUPE_FRAME_PART;
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    /* a HELLO needs its nonce; an ack takes no URL; AUTH no nonce */
    c = (troupe_wire_ctl){.type = TROUPE_FRAME_HELLO, .sender = 1, .url = "x"};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c = (troupe_wire_ctl){.type = TROUPE_FRAME_HELLO_ACK,
                          .sender = 1,
                          .nonce = nonce_a,
                          .url = "x"};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c = (troupe_wire_ctl){
        .type = TROUPE_FRAME_AUTH, .sender = 1, .nonce = nonce_a};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    /* proofs: a short mac, a certificate without a signature */
    c = (troupe_wire_ctl){.type = TROUPE_FRAME_AUTH,
                          .sender = 1,
                          .proof = {.mac = mac_a, .mac_len = 31}};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c.proof = (troupe_wire_proof){.cert = mac_a, .cert_len = 4};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    /* a proof or an error where the type has none */
    c = (troupe_wire_ctl){
        .type = TROUPE_FRAME_HELLO,
        .sender = 1,
        .nonce = nonce_a,
        .proof = {.mac = mac_a, .mac_len = TROUPE_WIRE_MAC_LEN}};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c = (troupe_wire_ctl){.type = TROUPE_FRAME_HELLO,
                          .sender = 1,
                          .nonce = nonce_a,
                          .err = TROUPE_EAUTH};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c = (troupe_wire_ctl){
        .type = TROUPE_FRAME_REFUSE, .sender = 1, .err = (troupe_err)999};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c = (troupe_wire_ctl){.type = TROUPE_FRAME_HELLO, .nonce = nonce_a};
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    c.sender = 1;
    ck_assert_err(troupe_wire_encode_ctl(NULL, buf, sizeof(buf), &len),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_ctl(&c, NULL, sizeof(buf), &len),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, sizeof(buf), NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode_ctl(&c, buf, 4, &len), TROUPE_ETOOBIG);

    ck_assert_err(troupe_wire_encode(1, NULL, &out, &len), TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode(1, m, NULL, &len), TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode(1, m, &out, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_wire_encode(0, m, &out, &len), TROUPE_EINVAL);
    ck_assert_ptr_null(out);

    ck_assert_err(troupe_wire_decoder_create(NULL), TROUPE_EINVAL);
    troupe_wire_decoder_destroy(NULL);

    ck_assert_err(troupe_wire_decode_frame(NULL, NULL, 1, NULL, NULL, NULL),
                  TROUPE_EINVAL);
    ck_assert_err(troupe_wire_decode_frame(NULL, NULL, 0, NULL, NULL, NULL),
                  TROUPE_EPROTO);
    ck_assert_err(troupe_wire_decode_frame(NULL, buf, 0, NULL, NULL, NULL),
                  TROUPE_EPROTO);
    troupe_msg *dm = NULL;
    ck_assert_err(troupe_wire_decode(buf, 0, NULL, NULL), TROUPE_EINVAL);
    ck_assert_err(troupe_wire_decode(NULL, 3, NULL, &dm), TROUPE_EINVAL);
    ck_assert_ptr_null(dm);
    troupe_msg_destroy(m);
}
END_TEST

START_TEST(test_wire_allocation_failure_is_enomem_without_leaks)
{
    troupe_msg *m = make_msg(4, "\x91\x05", 2);
    void *buf;
    size_t len;
    ck_assert_ok(troupe_wire_encode(1, m, &buf, &len));
    /* every allocation site in decode: the message, then its body */
    for (long fail_at = 0; fail_at < 2; fail_at++) {
        troupe_msg *out = NULL;
        troupe_alloc_fail_after(fail_at);
        troupe_err e = troupe_wire_decode(buf, len, NULL, &out);
        troupe_alloc_fail_after(-1);
        ck_assert_err(e, TROUPE_ENOMEM);
        ck_assert_ptr_null(out);
    }
    troupe_wire_decoder *d = NULL;
    troupe_alloc_fail_after(0);
    ck_assert_err(troupe_wire_decoder_create(&d), TROUPE_ENOMEM);
    void *b2 = NULL;
    ck_assert_err(troupe_wire_encode(1, m, &b2, &len), TROUPE_ENOMEM);
    troupe_alloc_fail_after(-1);
    ck_assert_ptr_null(d);
    ck_assert_ptr_null(b2);
    troupe_msg_destroy(m);
    troupe_free(buf);
}
END_TEST

START_TEST(test_wire_random_messages_round_trip)
{
    uint64_t s = ts_seed("wire_random");
    for (int i = 0; i < 3000; i++) {
        size_t blen = ts_rand(&s) % 4 == 0 ? 0 : ts_rand(&s) % 700;
        unsigned char body[700];
        for (size_t k = 0; k < blen; k++)
            body[k] = (unsigned char)ts_rand(&s);
        troupe_msg *m =
            make_msg((uint32_t)ts_rand(&s), blen ? body : NULL, blen);
        unsigned w = (unsigned)(ts_rand(&s) % 64);
        m->flags =
            (uint32_t)ts_rand(&s) & (TROUPE_MSG_REPLY | TROUPE_MSG_SYSTEM);
        m->from = (troupe_addr){(uint32_t)ts_rand(&s) >> (w % 32),
                                (uint32_t)ts_rand(&s), (uint32_t)ts_rand(&s)};
        m->to = (troupe_addr){(uint32_t)ts_rand(&s),
                              (uint32_t)ts_rand(&s) >> (w % 32),
                              (uint32_t)ts_rand(&s)};
        m->corr = ts_rand(&s) >> w;
        m->deadline = (int64_t)(ts_rand(&s) >> (w | 1));
        m->err = (troupe_err)(ts_rand(&s) % (TROUPE_EFAILED + 1));
        round_trip(m);
        troupe_msg_destroy(m);
    }
}
END_TEST

Suite *
wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("codec");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_wire_kind_and_addresses_round_trip_at_every_width);
    tcase_add_test(tc, test_wire_corr_deadline_flags_err_round_trip);
    tcase_add_test(tc, test_wire_bodies_round_trip_at_every_bin_width);
    tcase_add_test(tc, test_wire_empty_body_decodes_as_no_body);
    tcase_add_test(tc, test_wire_internal_flag_bits_are_not_sent);
    tcase_add_test(tc, test_wire_batch_of_many_envelopes_decodes_in_order);
    tcase_add_test(tc, test_wire_hello_and_ack_round_trip);
    tcase_add_test(tc, test_wire_parts_cover_a_frame_and_decode_in_bounds);
    tcase_add_test(tc, test_wire_other_version_is_eproto_and_told_apart);
    tcase_add_test(tc, test_wire_oversized_body_and_frame_are_etoobig);
    tcase_add_test(
        tc, test_wire_encode_into_short_buffer_is_etoobig_and_stays_in_bounds);
    tcase_add_test(tc, test_wire_bad_arguments_are_einval);
    tcase_add_test(tc, test_wire_allocation_failure_is_enomem_without_leaks);
    tcase_add_test(tc, test_wire_random_messages_round_trip);
    suite_add_tcase(s, tc);
    return s;
}
