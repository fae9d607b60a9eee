/*
 * Hostile input in bulk: every truncation of valid frames, trailing bytes,
 * random byte flips, random garbage, huge declared counts and lengths in
 * every position, 0xc1, deep nesting. Each input must fail cleanly (or, for
 * a flip that happens to stay valid, decode into messages that encode
 * again); none may crash or read out of bounds (run under ASan too).
 */
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/wire.h"

/* Nonce-sized filler for hand-written handshake frames. */
#define NONCE31 "0123456789abcdef0123456789abcde"
#define NONCE32 NONCE31 "f"

struct frame {
    unsigned char *buf;
    size_t len;
};

/* A few valid frames to mutate: one envelope with a body, a batch, a bare
 * envelope with wide integers, each handshake frame, a REFUSE and a
 * PART. */
static int
valid_frames(struct frame *out)
{
    int n = 0;
    troupe_msg *m[3];
    ck_assert_ok(troupe_msg_create(&m[0], 7,
                                   "\x92\xa3"
                                   "abc\x2a",
                                   6));
    m[0]->from = (troupe_addr){1, 2, 3};
    m[0]->to = (troupe_addr){2, 300, 70000};
    m[0]->corr = 0x1122334455667788ull;
    m[0]->deadline = 1700000000123LL;
    m[0]->flags = TROUPE_MSG_REPLY;
    m[0]->err = TROUPE_EUNREACHABLE;
    ck_assert_ok(troupe_msg_create(&m[1], UINT32_MAX, NULL, 0));
    m[1]->to = (troupe_addr){UINT32_MAX, UINT32_MAX, UINT32_MAX};
    unsigned char big[300];
    memset(big, 0x5a, sizeof(big));
    ck_assert_ok(troupe_msg_create(&m[2], 128, big, sizeof(big)));
    for (int k = 0; k < 3; k++) {
        void *b;
        size_t len;
        ck_assert_ok(troupe_wire_encode(9, m[k], &b, &len));
        out[n++] = (struct frame){b, len};
    }
    size_t cap = troupe_wire_data_overhead(9, 5, 3);
    for (int k = 0; k < 3; k++)
        cap += troupe_wire_envelope_size(m[k]);
    unsigned char *b = troupe_malloc(cap);
    size_t len;
    ck_assert_ok(
        troupe_wire_encode_data(9, 5, (const troupe_msg **)m, 3, b, cap, &len));
    out[n++] = (struct frame){b, len};
    static const uint8_t nonce[TROUPE_WIRE_NONCE_LEN] = {7, 7, 7};
    static const uint8_t mac[TROUPE_WIRE_MAC_LEN] = {9, 9};
    static const uint8_t cert[4] = {0x30, 0x02}, sig[2] = {0x30, 0x00};
    troupe_wire_ctl ctl[] = {
        {.type = TROUPE_FRAME_HELLO,
         .sender = 9,
         .incarnation = 1,
         .url = "ipc:///tmp/x",
         .nonce = nonce},
        {.type = TROUPE_FRAME_HELLO_ACK,
         .sender = 9,
         .incarnation = 1,
         .nonce = nonce,
         .proof = {mac, sizeof(mac), cert, sizeof(cert), sig, sizeof(sig)}},
        {.type = TROUPE_FRAME_AUTH,
         .sender = 9,
         .incarnation = 1,
         .proof = {mac, sizeof(mac), NULL, 0, NULL, 0}},
        {.type = TROUPE_FRAME_REFUSE,
         .sender = 9,
         .err = TROUPE_EAUTH,
         .reason = "no"}};
    for (size_t k = 0; k < sizeof(ctl) / sizeof(ctl[0]); k++) {
        b = troupe_malloc(TROUPE_WIRE_CTL_MAX);
        ck_assert_ok(
            troupe_wire_encode_ctl(&ctl[k], b, TROUPE_WIRE_CTL_MAX, &len));
        out[n++] = (struct frame){b, len};
    }
    static const uint8_t whole[600] = {0x95, 2};
    size_t pcap = troupe_wire_part_size(9, 3, sizeof(whole), 300, 8);
    b = troupe_malloc(pcap);
    ck_assert_ok(troupe_wire_encode_part(9, 3, whole, sizeof(whole), 300, 8, b,
                                         pcap, &len));
    out[n++] = (struct frame){b, len};
    for (int k = 0; k < 3; k++)
        troupe_msg_destroy(m[k]);
    return n;
}

static void
free_frames(struct frame *f, int n)
{
    for (int k = 0; k < n; k++)
        troupe_free(f[k].buf);
}

/* A decoded message must be able to travel again. */
static void
reencode_fn(void *arg, troupe_msg **m)
{
    int *n = arg;
    void *b = NULL;
    size_t len;
    ck_assert_ok(troupe_wire_encode(1, *m, &b, &len));
    troupe_msg *again = NULL;
    ck_assert_ok(troupe_wire_decode(b, len, NULL, &again));
    ck_assert_uint_eq(again->kind, (*m)->kind);
    ck_assert_uint_eq(again->corr, (*m)->corr);
    troupe_msg_destroy(again);
    troupe_free(b);
    (*n)++;
}

/* Decodes a copy of the input in an exactly-sized heap buffer, so ASan sees
 * any read past its end. Returns the error. */
static troupe_err
decode_exact(troupe_wire_decoder *d, const unsigned char *in, size_t len)
{
    unsigned char *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, in, len);
    int n = 0;
    troupe_err e = troupe_wire_decode_frame(d, len ? copy : NULL, len, NULL,
                                            reencode_fn, &n);
    ck_assert_msg(e == TROUPE_OK || e == TROUPE_EPROTO,
                  "unexpected %s for a %zu-byte input", troupe_err_name(e),
                  len);
    if (e != TROUPE_OK)
        ck_assert_int_eq(n, 0);
    /* the body reader must hold the same line */
    troupe_reader r;
    troupe_err re = troupe_reader_init(&r, len ? copy : NULL, len);
    ck_assert(re == TROUPE_OK || re == TROUPE_EPROTO);
    if (re == TROUPE_OK)
        while (troupe_read_skip(&r) == TROUPE_OK)
            ;
    free(copy);
    return e;
}

START_TEST(test_malformed_every_truncation_is_eproto)
{
    struct frame f[16];
    int nf = valid_frames(f);
    troupe_wire_decoder *d;
    ck_assert_ok(troupe_wire_decoder_create(&d));
    long checked = 0;
    for (int k = 0; k < nf; k++) {
        ck_assert_ok(decode_exact(d, f[k].buf, f[k].len));
        for (size_t cut = 0; cut < f[k].len; cut++, checked++)
            ck_assert_err(decode_exact(d, f[k].buf, cut), TROUPE_EPROTO);
        /* and every suffix (a frame whose start was lost) */
        for (size_t cut = 1; cut < f[k].len; cut++, checked++)
            ck_assert_err(decode_exact(d, f[k].buf + cut, f[k].len - cut),
                          TROUPE_EPROTO);
    }
    ck_assert_int_gt(checked, 1000);
    troupe_wire_decoder_destroy(d);
    free_frames(f, nf);
}
END_TEST

START_TEST(test_malformed_trailing_bytes_are_eproto)
{
    struct frame f[16];
    int nf = valid_frames(f);
    uint64_t s = ts_seed("malformed_trailing");
    for (int k = 0; k < nf; k++) {
        for (size_t extra = 1; extra <= 64; extra++) {
            unsigned char *b = malloc(f[k].len + extra);
            memcpy(b, f[k].buf, f[k].len);
            for (size_t i = 0; i < extra; i++)
                b[f[k].len + i] = (unsigned char)ts_rand(&s);
            ck_assert_err(decode_exact(NULL, b, f[k].len + extra),
                          TROUPE_EPROTO);
            /* a second whole frame glued on is trailing bytes too */
            free(b);
        }
        unsigned char *two = malloc(2 * f[k].len);
        memcpy(two, f[k].buf, f[k].len);
        memcpy(two + f[k].len, f[k].buf, f[k].len);
        ck_assert_err(decode_exact(NULL, two, 2 * f[k].len), TROUPE_EPROTO);
        free(two);
    }
    free_frames(f, nf);
}
END_TEST

START_TEST(test_malformed_random_byte_flips_never_crash)
{
    struct frame f[16];
    int nf = valid_frames(f);
    uint64_t s = ts_seed("malformed_flips");
    troupe_wire_decoder *d;
    ck_assert_ok(troupe_wire_decoder_create(&d));
    int ok = 0, bad = 0;
    for (int i = 0; i < 20000; i++) {
        struct frame *fr = &f[ts_rand(&s) % (uint64_t)nf];
        unsigned char *b = malloc(fr->len);
        memcpy(b, fr->buf, fr->len);
        int flips = 1 + (int)(ts_rand(&s) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = ts_rand(&s) % fr->len;
            if (ts_rand(&s) % 2)
                b[at] ^= (unsigned char)(1u << (ts_rand(&s) % 8));
            else
                b[at] = (unsigned char)ts_rand(&s);
        }
        if (decode_exact(d, b, fr->len) == TROUPE_OK)
            ok++;
        else
            bad++;
        free(b);
    }
    /* Both outcomes must occur, or the mutation is not exercising much
     * (the handshake frames are mostly opaque nonce and proof bytes, so
     * fewer flips break them than break an envelope). */
    ck_assert_int_gt(ok, 100);
    ck_assert_int_gt(bad, 8000);
    troupe_wire_decoder_destroy(d);
    free_frames(f, nf);
}
END_TEST

START_TEST(test_malformed_random_garbage_is_eproto)
{
    uint64_t s = ts_seed("malformed_garbage");
    unsigned char b[600];
    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t)(ts_rand(&s) % sizeof(b));
        for (size_t k = 0; k < len; k++)
            b[k] = (unsigned char)ts_rand(&s);
        if (i % 2 && len > 0)
            b[0] = 0x95; /* a plausible frame header */
        ck_assert_err(decode_exact(NULL, b, len), TROUPE_EPROTO);
    }
}
END_TEST

/* Hostile headers: huge declared counts and lengths. */
static const unsigned char *const hostile[] = {
    (const unsigned char *)"\xdd\xff\xff\xff\xff", /* array32 */
    (const unsigned char *)"\xdd\x7f\xff\xff\xff",
    (const unsigned char *)"\xdd\x00\x01\x00\x00",
    (const unsigned char *)"\xdc\xff\xff",         /* array16 */
    (const unsigned char *)"\xdf\xff\xff\xff\xff", /* map32 */
    (const unsigned char *)"\xdf\x80\x00\x00\x00", /* 2n overflows 32 bits */
    (const unsigned char *)"\xde\xff\xff",         /* map16 */
    (const unsigned char *)"\xdb\xff\xff\xff\xff", /* str32 */
    (const unsigned char *)"\xda\xff\xff",         /* str16 */
    (const unsigned char *)"\xd9\xff",             /* str8 */
    (const unsigned char *)"\xc6\xff\xff\xff\xff", /* bin32 */
    (const unsigned char *)"\xc5\xff\xff",         /* bin16 */
    (const unsigned char *)"\xc4\xff",             /* bin8 */
    (const unsigned char *)"\xc9\xff\xff\xff\xff", /* ext32 */
    (const unsigned char *)"\xc9\xff\xff\xff\xff\x01",
    (const unsigned char *)"\xc8\xff\xff", /* ext16 */
    (const unsigned char *)"\xc7\xff",     /* ext8 */
    (const unsigned char *)"\xd8\x01",     /* fixext16, cut */
    (const unsigned char *)"\xc1",         /* never used */
    (const unsigned char *)"\xcf\x01\x02", /* uint64, cut */
    (const unsigned char *)"\xcb\x00",     /* float64, cut */
};
static const size_t hostile_len[] = {5, 5, 5, 3, 5, 5, 3, 5, 3, 2, 5,
                                     3, 2, 5, 6, 3, 2, 2, 1, 3, 2};
#define N_HOSTILE (sizeof(hostile) / sizeof(hostile[0]))

/* mask[i] = 1 where byte i of a valid frame is str or bin payload. */
static void
payload_mask(const unsigned char *buf, size_t len, unsigned char *mask)
{
    ck_assert_uint_le(len, 1024);
    memset(mask, 0, len);
    troupe_reader r;
    ck_assert_ok(troupe_reader_init(&r, buf, len));
    for (;;) {
        troupe_mp_type t = troupe_read_peek(&r);
        const void *p = NULL;
        size_t n = 0;
        uint32_t count;
        if (t == TROUPE_MP_NONE)
            break;
        if (t == TROUPE_MP_ARRAY)
            ck_assert_ok(troupe_read_array(&r, &count));
        else if (t == TROUPE_MP_MAP)
            ck_assert_ok(troupe_read_map(&r, &count));
        else if (t == TROUPE_MP_STR)
            ck_assert_ok(troupe_read_str(&r, len, (const char **)&p, &n));
        else if (t == TROUPE_MP_BIN)
            ck_assert_ok(troupe_read_bin(&r, len, &p, &n));
        else
            ck_assert_ok(troupe_read_skip(&r));
        if (n > 0)
            memset(mask + ((const unsigned char *)p - buf), 1, n);
    }
    ck_assert_ok(troupe_read_end(&r));
}

START_TEST(test_malformed_hostile_headers_alone_and_in_every_position)
{
    _Static_assert(N_HOSTILE == sizeof(hostile_len) / sizeof(hostile_len[0]),
                   "hostile table");
    troupe_wire_decoder *d;
    ck_assert_ok(troupe_wire_decoder_create(&d));
    for (size_t h = 0; h < N_HOSTILE; h++)
        ck_assert_err(decode_exact(d, hostile[h], hostile_len[h]),
                      TROUPE_EPROTO);
    /* Splice each header into every offset of valid frames, both
     * replacing the rest and followed by the rest. */
    struct frame f[16];
    int nf = valid_frames(f);
    unsigned char b[1024];
    unsigned char mask[16][1024];
    for (int k = 0; k < nf; k++)
        payload_mask(f[k].buf, f[k].len, mask[k]);
    long n = 0, opaque = 0;
    for (int k = 0; k < nf; k++) {
        for (size_t at = 0; at < f[k].len; at++) {
            for (size_t h = 0; h < N_HOSTILE; h++) {
                memcpy(b, f[k].buf, at);
                memcpy(b + at, hostile[h], hostile_len[h]);
                troupe_err e = decode_exact(d, b, at + hostile_len[h]);
                /* Only bytes that exactly overwrite str/bin payload (a body
                 * or a URL: opaque here) may leave the frame valid. */
                if (e == TROUPE_OK) {
                    ck_assert_uint_eq(at + hostile_len[h], f[k].len);
                    for (size_t i = at; i < f[k].len; i++)
                        ck_assert_msg(mask[k][i], "frame %d, header %zu at %zu",
                                      k, h, at);
                    opaque++;
                } else {
                    ck_assert_err(e, TROUPE_EPROTO);
                }
                size_t rest = f[k].len - at;
                memcpy(b + at + hostile_len[h], f[k].buf + at, rest);
                e = decode_exact(d, b, at + hostile_len[h] + rest);
                ck_assert_err(e, TROUPE_EPROTO);
                n += 2;
            }
        }
    }
    ck_assert_int_gt(n, 10000);
    ck_assert_int_lt(opaque, n / 100);
    free_frames(f, nf);
    troupe_wire_decoder_destroy(d);
}
END_TEST

START_TEST(test_malformed_deep_nesting_is_eproto)
{
    size_t len = 200000;
    unsigned char *b = malloc(len);
    const unsigned char opens[] = {0x91, 0x81, 0xdd};
    for (size_t o = 0; o < sizeof(opens); o++) {
        size_t i = 0;
        while (i < len) {
            if (opens[o] == 0xdd && i + 5 <= len) {
                memcpy(b + i, "\xdd\x00\x00\x00\x01", 5);
                i += 5;
            } else {
                b[i++] = opens[o] == 0xdd ? 0x91 : opens[o];
            }
        }
        ck_assert_err(decode_exact(NULL, b, len), TROUPE_EPROTO);
        /* Terminated nesting is well-formed msgpack, still too deep. */
        b[len - 1] = 0x01;
        ck_assert_err(decode_exact(NULL, b, len), TROUPE_EPROTO);
    }
    free(b);
    /* A body nested exactly to the limit is readable; one deeper is not. */
    unsigned char body[TROUPE_WIRE_DEPTH_MAX + 2];
    memset(body, 0x91, sizeof(body));
    body[TROUPE_WIRE_DEPTH_MAX] = 0x00;
    troupe_reader r;
    ck_assert_ok(troupe_reader_init(&r, body, TROUPE_WIRE_DEPTH_MAX + 1));
    body[TROUPE_WIRE_DEPTH_MAX] = 0x91;
    body[TROUPE_WIRE_DEPTH_MAX + 1] = 0x00;
    ck_assert_err(troupe_reader_init(&r, body, TROUPE_WIRE_DEPTH_MAX + 2),
                  TROUPE_EPROTO);
}
END_TEST

/* A frame whose one field is replaced by a valid value of the wrong type
 * or out of range. Built by hand: [1, 0, 9, 0, [[env...]]]. */
static size_t
frame_with_fields(unsigned char *b, const char *const env[8],
                  const size_t env_len[8])
{
    size_t n = 0;
    memcpy(b, "\x95\x02\x00\x09\x00\x91\x98", 7);
    n = 7;
    for (int i = 0; i < 8; i++) {
        memcpy(b + n, env[i], env_len[i]);
        n += env_len[i];
    }
    return n;
}

START_TEST(test_malformed_wrong_types_and_ranges_are_eproto)
{
    const char *env[8] = {
        "\x01", "\x00", "\x93\x01\x02\x03", "\x93\x02\x05\x01", "\x00", "\x00",
        "\x00", "\xc0"};
    size_t env_len[8] = {1, 1, 4, 4, 1, 1, 1, 1};
    unsigned char b[256];
    size_t n = frame_with_fields(b, env, env_len);
    ck_assert_ok(decode_exact(NULL, b, n)); /* the baseline is valid */

    struct {
        int field;
        const char *v;
        size_t len;
    } bad[] = {
        {0, "\xff", 1},                                 /* negative kind */
        {0, "\xcf\x00\x00\x00\x01\x00\x00\x00\x00", 9}, /* kind > u32 */
        {0, "\xa1x", 2},                                /* string kind */
        {0, "\xca\x00\x00\x00\x00", 5},                 /* float kind */
        {1, "\x04", 1},                                 /* unknown flag bit */
        {1, "\xce\x40\x00\x00\x00", 5},                 /* internal flag bit */
        {1, "\xc3", 1},                                 /* bool flags */
        {2, "\x92\x01\x02", 3},                         /* address of two */
        {2, "\x94\x01\x02\x03\x04", 5},                 /* address of four */
        {2, "\x93\x01\x02\xff", 4},                     /* negative gen */
        {3, "\x83\x01\x02\x03\x04\x05\x06", 7},         /* map address */
        {3, "\xc0", 1},                                 /* nil address */
        {4, "\xd3\xff\xff\xff\xff\xff\xff\xff\xff", 9}, /* corr -1 */
        {4, "\xc4\x01\x00", 3},                         /* bin corr */
        {5, "\xff", 1},                                 /* negative deadline */
        {5, "\xcf\x80\x00\x00\x00\x00\x00\x00\x00", 9}, /* > INT64_MAX */
        {6, "\x7f", 1},                                 /* unknown error code */
        {6, "\xe0", 1},             /* negative error code */
        {7, "\xa2hi", 3},           /* str body */
        {7, "\x91\x01", 2},         /* embedded object body */
        {7, "\xc7\x01\x05\x00", 4}, /* ext body */
        {7, "\x00", 1},             /* integer body */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *e2[8];
        size_t l2[8];
        memcpy(e2, env, sizeof(e2));
        memcpy(l2, env_len, sizeof(l2));
        e2[bad[i].field] = bad[i].v;
        l2[bad[i].field] = bad[i].len;
        n = frame_with_fields(b, e2, l2);
        ck_assert_msg(decode_exact(NULL, b, n) == TROUPE_EPROTO,
                      "bad value %zu accepted", i);
    }

    /* Frame-level fields, each frame otherwise complete. */
    static const unsigned char good_env[16] = {
        0x91, 0x98, 0x01, 0x00, 0x93, 0x01, 0x02, 0x03,
        0x93, 0x02, 0x05, 0x01, 0x00, 0x00, 0x00, 0xc0};
    const struct {
        const char *hdr;
        size_t hdr_len;
        int with_env; /* append a valid one-envelope batch */
        int valid;
    } frames[] = {
        {"\x95\x02\x00\x09\x00", 5, 1, 1}, /* the baseline */
        {"\x95\x01\x00\x09\x00", 5, 1, 0}, /* version 1 */
        {"\x95\x00\x00\x09\x00", 5, 1, 0}, /* version 0 */
        {"\x95\x02\x06\x09\x00", 5, 1, 0}, /* unknown type */
        {"\x95\x02\x00\x00\x00", 5, 1, 0}, /* sender 0 */
        {"\x95\x02\x00\xff\x00", 5, 1, 0}, /* negative sender */
        {"\x95\x02\x00\xcf\x00\x00\x00\x01\x00\x00\x00\x01\x00", 13, 1, 0},
        /* ^ sender over 32 bits */
        {"\x95\x02\x00\x09\xff", 5, 1, 0},          /* negative incarnation */
        {"\x95\x02\x00\x09\xa1x", 6, 1, 0},         /* str incarnation */
        {"\x95\x02\x00\x09\x00\x90", 6, 0, 0},      /* empty batch */
        {"\x95\x02\x00\x09\x00\xc0", 6, 0, 0},      /* DATA with nil */
        {"\x95\x02\x01\x09\x00\xc0", 6, 0, 0},      /* HELLO, nil payload */
        {"\x95\x02\x01\x09\x00\x91\xa1u", 8, 0, 0}, /* HELLO, no nonce */
        {"\x95\x02\x01\x09\x00\x92\xa1u\xc4\x20" NONCE32, 42, 0, 1},
        /* ^ HELLO ok */
        {"\x95\x02\x01\x09\x00\x92\xc4\x01u\xc4\x20" NONCE32, 43, 0, 0},
        /* ^ HELLO with a bin URL */
        {"\x95\x02\x01\x09\x00\x92\xa1u\xc4\x1f" NONCE31, 41, 0, 0},
        /* ^ HELLO with a short nonce */
        {"\x95\x02\x01\x09\x00\x92\xa1u\xa0", 9, 0, 0}, /* str nonce */
        {"\x95\x02\x02\x09\x00\x94\xc4\x20" NONCE32 "\xc0\xc0\xc0", 43, 0, 1},
        /* ^ ACK ok, no proof */
        {"\x95\x02\x02\x09\x00\x94\xc4\x20" NONCE32 "\xc0\xc4\x01\x00\xc0", 45,
         0, 0},
        /* ^ ACK with a certificate and no signature */
        {"\x95\x02\x02\x09\x00\x93\xc4\x20" NONCE32 "\xc0\xc0", 42, 0, 0},
        /* ^ ACK with three fields */
        {"\x95\x02\x02\x09\x00\xa0", 6, 0, 0},             /* ACK with str */
        {"\x95\x02\x03\x09\x00\x93\xc0\xc0\xc0", 9, 0, 1}, /* AUTH ok */
        {"\x95\x02\x03\x09\x00\x93\xc4\x1f" NONCE31 "\xc0\xc0", 42, 0, 0},
        /* ^ AUTH with a 31-byte mac */
        {"\x95\x02\x03\x09\x00\x93\xc0\xc4\x00\xc4\x01\x00", 12, 0, 0},
        /* ^ AUTH with an empty certificate */
        {"\x95\x02\x04\x09\x00\x93\x0a\x02\xc4\x03xyz", 13, 0, 1},
        /* ^ PART ok */
        {"\x95\x02\x04\x09\x00\x93\x0a\x08\xc4\x03xyz", 13, 0, 0},
        /* ^ PART past the end of its frame */
        {"\x95\x02\x04\x09\x00\x93\x0a\x0b\xc4\x01x", 11, 0, 0},
        /* ^ PART offset past the frame */
        {"\x95\x02\x04\x09\x00\x93\x0a\x00\xc4\x00", 10, 0, 0},
        /* ^ PART with an empty chunk */
        {"\x95\x02\x04\x09\x00\x93\x0a\x00\xc0", 9, 0, 0}, /* nil chunk */
        {"\x95\x02\x04\x09\x00\x93\xce\x01\x00\x00\x01\x00\xc4\x01x", 15, 0, 0},
        /* ^ PART of a frame over TROUPE_WIRE_FRAME_MAX */
        {"\x95\x02\x05\x09\x00\x92\x1b\xa0", 8, 0, 1}, /* REFUSE ok */
        {"\x95\x02\x05\x09\x00\x92\xcc\xc8\xa0", 9, 0, 0},
        /* ^ REFUSE with an unknown code */
        {"\x95\x02\x05\x09\x00\x92\x1b\xc0", 8, 0, 0}, /* nil reason */
        {"\x95\x02\x01\x09\x00", 5, 1, 0},             /* HELLO with a batch */
        {"\x94\x02\x00\x09", 4, 1, 0},                 /* four fields */
        {"\x96\x02\x00\x09\x00\xc0", 6, 1, 0},         /* six fields */
        {"\x83\x02\x00\x09\x00\x02", 6, 1, 0},         /* a map */
    };
    for (size_t i = 0; i < sizeof(frames) / sizeof(frames[0]); i++) {
        n = frames[i].hdr_len;
        memcpy(b, frames[i].hdr, n);
        if (frames[i].with_env) {
            memcpy(b + n, good_env, sizeof(good_env));
            n += sizeof(good_env);
        }
        troupe_err e = decode_exact(NULL, b, n);
        ck_assert_msg(e == (frames[i].valid ? TROUPE_OK : TROUPE_EPROTO),
                      "frame %zu: %s", i, troupe_err_name(e));
    }
    /* HELLO url at and over the limit */
    unsigned char h[400];
    memcpy(h, "\x95\x02\x01\x09\x00\x92\xd9\xff", 8);
    memset(h + 8, 'u', 255);
    memcpy(h + 8 + 255, "\xc4\x20", 2);
    memset(h + 8 + 255 + 2, 0x11, 32);
    ck_assert_ok(decode_exact(NULL, h, 8 + 255 + 34));
    memcpy(h, "\x95\x02\x01\x09\x00\x92\xda\x01\x00", 9);
    memset(h + 9, 'u', 256);
    memcpy(h + 9 + 256, "\xc4\x20", 2);
    memset(h + 9 + 256 + 2, 0x11, 32);
    ck_assert_err(decode_exact(NULL, h, 9 + 256 + 34), TROUPE_EPROTO);
}
END_TEST

START_TEST(test_malformed_non_minimal_encodings_are_accepted)
{
    /* msgpack allows wider forms than needed; values, not forms, are
     * checked: kind as uint32, flags as int8, address parts as uint16. */
    const char *env[8] = {"\xce\x00\x00\x00\x05",
                          "\xd0\x01",
                          "\x93\xcd\x00\x01\x02\x03",
                          "\xdc\x00\x03\x02\x05\x01",
                          "\x00",
                          "\xd3\x00\x00\x00\x00\x00\x00\x00\x07",
                          "\x00",
                          "\xc4\x01\xc0"};
    size_t env_len[8] = {5, 2, 6, 6, 1, 9, 1, 3};
    unsigned char b[256];
    size_t n = frame_with_fields(b, env, env_len);
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_wire_decode(b, n, NULL, &m));
    ck_assert_uint_eq(m->kind, 5);
    ck_assert_uint_eq(m->flags, TROUPE_MSG_REPLY);
    ck_assert_uint_eq(m->from.node, 1);
    ck_assert_int_eq(m->deadline, 7);
    ck_assert_uint_eq(troupe_msg_len(m), 1);
    troupe_msg_destroy(m);
}
END_TEST

Suite *
malformed_suite(void)
{
    Suite *s = suite_create("malformed");
    TCase *tc = tcase_create("bulk");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_malformed_every_truncation_is_eproto);
    tcase_add_test(tc, test_malformed_trailing_bytes_are_eproto);
    tcase_add_test(tc, test_malformed_random_byte_flips_never_crash);
    tcase_add_test(tc, test_malformed_random_garbage_is_eproto);
    tcase_add_test(tc,
                   test_malformed_hostile_headers_alone_and_in_every_position);
    tcase_add_test(tc, test_malformed_deep_nesting_is_eproto);
    tcase_add_test(tc, test_malformed_wrong_types_and_ranges_are_eproto);
    tcase_add_test(tc, test_malformed_non_minimal_encodings_are_accepted);
    suite_add_tcase(s, tc);
    return s;
}
