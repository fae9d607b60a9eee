/*
 * libFuzzer target: arbitrary bytes into the frame decoder and the body
 * reader (built by fuzz.cmake with msgpack-c's sources compiled in).
 *
 * Besides "never crash, never read out of bounds" (ASan, UBSan), it checks:
 *  - a failed decode returns EPROTO or ETOOBIG and delivers no message;
 *  - a decoded message encodes again and decodes to the same fields;
 *  - differential: whenever our bounded walk accepts the bytes as one
 *    object, msgpack-c's unpacker (only ever run after the walk) parses the
 *    same object to the same length, and the body reader can skip it.
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpwalk.h"
#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/wire.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
    uint32_t n;
};

static void
check_msg(void *arg, troupe_msg **m)
{
    struct seen *s = arg;
    s->n++;
    void *buf = NULL;
    size_t len = 0;
    if (troupe_wire_encode(1, *m, &buf, &len) != TROUPE_OK)
        abort();
    troupe_msg *again = NULL;
    if (troupe_wire_decode(buf, len, NULL, &again) != TROUPE_OK)
        abort();
    const troupe_msg *a = *m;
    if (a->kind != again->kind || a->flags != again->flags ||
        !troupe_addr_eq(a->from, again->from) ||
        !troupe_addr_eq(a->to, again->to) || a->corr != again->corr ||
        a->deadline != again->deadline || a->err != again->err ||
        troupe_msg_len(a) != troupe_msg_len(again) ||
        (troupe_msg_len(a) > 0 &&
         memcmp(troupe_msg_data(a), troupe_msg_data(again),
                troupe_msg_len(a)) != 0))
        abort();
    troupe_msg_destroy(again);
    troupe_free(buf);
}

static void
differential(const uint8_t *data, size_t size)
{
    size_t used = 0;
    if (troupe__mp_walk(data, size, TROUPE_WIRE_DEPTH_MAX, &used) != TROUPE_OK)
        return;
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, 2048))
        return;
    msgpack_object obj;
    size_t off = 0;
    msgpack_unpack_return rc =
        msgpack_unpack((const char *)data, used, &off, &zone, &obj);
    if (rc != MSGPACK_UNPACK_SUCCESS || off != used)
        abort();
    msgpack_zone_destroy(&zone);

    troupe_reader r;
    troupe_err e = troupe_reader_init(&r, data, used);
    if (e != TROUPE_OK && used <= TROUPE_WIRE_BODY_MAX)
        abort();
    if (e == TROUPE_OK) {
        if (troupe_read_skip(&r) != TROUPE_OK ||
            troupe_read_end(&r) != TROUPE_OK)
            abort();
        /* and item by item, as a handler would */
        troupe_reader_init(&r, data, used);
        while (troupe_read_peek(&r) != TROUPE_MP_NONE) {
            uint32_t n;
            const void *p;
            size_t len;
            switch (troupe_read_peek(&r)) {
            case TROUPE_MP_ARRAY:
                e = troupe_read_array(&r, &n);
                break;
            case TROUPE_MP_MAP:
                e = troupe_read_map(&r, &n);
                break;
            case TROUPE_MP_BIN:
                e = troupe_read_bin(&r, SIZE_MAX, &p, &len);
                break;
            default:
                e = troupe_read_skip(&r);
                break;
            }
            if (e != TROUPE_OK)
                abort();
        }
        if (troupe_read_end(&r) != TROUPE_OK)
            abort();
        troupe_packer pk;
        troupe_pack_init(&pk);
        troupe_body *b = NULL;
        if (troupe_pack_raw(&pk, data, used) != TROUPE_OK ||
            troupe_pack_take_body(&pk, &b) != TROUPE_OK ||
            troupe_body_len(b) != used ||
            memcmp(troupe_body_data(b), data, used) != 0)
            abort();
        troupe_body_release(b);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    troupe_wire_decoder *d = NULL;
    if (troupe_wire_decoder_create(&d) != TROUPE_OK)
        return 0;
    struct seen s = {0};
    troupe_frame_hdr h;
    troupe_err e = troupe_wire_decode_frame(d, data, size, &h, check_msg, &s);
    if (e == TROUPE_OK) {
        if (h.type == TROUPE_FRAME_DATA ? s.n != h.count : s.n != 0)
            abort();
        /* a second decode with the reused zone must agree */
        struct seen s2 = {0};
        if (troupe_wire_decode_frame(d, data, size, NULL, NULL, &s2) !=
            TROUPE_OK)
            abort();
    } else if ((e != TROUPE_EPROTO && e != TROUPE_ETOOBIG) || s.n != 0) {
        abort();
    }
    troupe_wire_decoder_destroy(d);
    differential(data, size);
    return 0;
}
