/*
 * libFuzzer target: the tuple key codec's reader (storage/src/keycodec.c),
 * which decodes every key read from the disk and every cursor.
 *
 * Properties beyond "no crash":
 *  - troupe_key_validate accepts exactly the inputs the reader walks to
 *    the end of the top-level tuple without an error;
 *  - round trip: re-encoding what the reader returned gives the input's
 *    bytes exactly (the format is canonical: one encoding per value);
 *  - errors are sticky: after EPROTO every read is EPROTO, after the end
 *    of the input every read is ENOENT;
 *  - order: for two valid keys (the input split in two), memcmp order of
 *    the encodings equals the value order the codec documents.
 */
#include <math.h>
#include <string.h>

#include "fuzz_support.h"
#include "troupe/keycodec.h"

/* Decodes data into w; the reader's final status. */
static troupe_err
reencode(const uint8_t *data, size_t size, troupe_key_writer *w)
{
    troupe_key_reader r;
    troupe_key_item it;
    troupe_key_reader_init(&r, data, size);
    unsigned depth = 0;
    troupe_err e;
    for (;;) {
        e = troupe_key_read(&r, &it);
        if (e == TROUPE_ENOENT && depth > 0) {
            troupe_key_end_tuple(w);
            depth--;
            continue;
        }
        if (e != TROUPE_OK)
            break;
        switch (it.type) {
        case TROUPE_KEY_NULL:
            troupe_key_put_null(w);
            break;
        case TROUPE_KEY_BOOL:
            troupe_key_put_bool(w, it.v.b);
            break;
        case TROUPE_KEY_INT64:
            troupe_key_put_int64(w, it.v.i64);
            break;
        case TROUPE_KEY_UINT64:
            troupe_key_put_uint64(w, it.v.u64);
            break;
        case TROUPE_KEY_DOUBLE:
            FZ_CHECK(!signbit(it.v.d) || it.v.d != 0, "-0.0 decoded");
            troupe_key_put_double(w, it.v.d);
            break;
        case TROUPE_KEY_STRING:
            troupe_key_put_string(w, (const char *)it.v.s.ptr, it.v.s.len);
            break;
        case TROUPE_KEY_BYTES:
            troupe_key_put_bytes(w, it.v.s.ptr, it.v.s.len);
            break;
        case TROUPE_KEY_TUPLE:
            troupe_key_begin_tuple(w);
            depth++;
            FZ_CHECK(depth <= TROUPE_KEY_DEPTH_MAX, "depth %u", depth);
            break;
        default:
            FZ_CHECK(0, "type %d", (int)it.type);
        }
    }
    /* sticky */
    troupe_err again = troupe_key_read(&r, &it);
    FZ_CHECK(again == e || (e == TROUPE_ENOMEM), "%s then %s",
             troupe_err_name(e), troupe_err_name(again));
    troupe_key_reader_fini(&r);
    return e;
}

/* ---- value order (keycodec.h), for the order property ---- */

static int
type_rank(troupe_key_type t, bool b)
{
    switch (t) {
    case TROUPE_KEY_NULL:
        return 0;
    case TROUPE_KEY_BOOL:
        return b ? 2 : 1;
    case TROUPE_KEY_INT64:
        return 3;
    case TROUPE_KEY_UINT64:
        return 4;
    case TROUPE_KEY_DOUBLE:
        return 5;
    case TROUPE_KEY_STRING:
        return 6;
    case TROUPE_KEY_BYTES:
        return 7;
    default:
        return 8; /* tuple */
    }
}

static int
cmp_double(double a, double b)
{
    /* NaN (canonical) sorts above +inf */
    bool na = isnan(a), nb = isnan(b);
    if (na || nb)
        return na - nb;
    return (a > b) - (a < b);
}

/* Compares the tuples at a and b item by item, recursively. */
static int
cmp_tuples(troupe_key_reader *a, troupe_key_reader *b)
{
    for (;;) {
        troupe_key_item x, y;
        troupe_err ea = troupe_key_read(a, &x);
        troupe_err eb = troupe_key_read(b, &y);
        /* a tuple that is a prefix of the other sorts first; the readers
         * are dropped once the order is decided */
        if (ea == TROUPE_ENOENT || eb == TROUPE_ENOENT)
            return (ea != TROUPE_ENOENT) - (eb != TROUPE_ENOENT);
        FZ_CHECK(ea == TROUPE_OK && eb == TROUPE_OK, "%s, %s",
                 troupe_err_name(ea), troupe_err_name(eb));
        int ra = type_rank(x.type, x.type == TROUPE_KEY_BOOL && x.v.b);
        int rb = type_rank(y.type, y.type == TROUPE_KEY_BOOL && y.v.b);
        int c = (ra > rb) - (ra < rb);
        if (c == 0) {
            switch (x.type) {
            case TROUPE_KEY_INT64:
                c = (x.v.i64 > y.v.i64) - (x.v.i64 < y.v.i64);
                break;
            case TROUPE_KEY_UINT64:
                c = (x.v.u64 > y.v.u64) - (x.v.u64 < y.v.u64);
                break;
            case TROUPE_KEY_DOUBLE:
                c = cmp_double(x.v.d, y.v.d);
                break;
            case TROUPE_KEY_STRING:
            case TROUPE_KEY_BYTES: {
                /* each item may point into its reader's scratch: compare
                 * before the next read */
                size_t n = x.v.s.len < y.v.s.len ? x.v.s.len : y.v.s.len;
                c = n ? memcmp(x.v.s.ptr, y.v.s.ptr, n) : 0;
                c = c != 0 ? (c > 0) - (c < 0)
                           : (x.v.s.len > y.v.s.len) - (x.v.s.len < y.v.s.len);
                break;
            }
            case TROUPE_KEY_TUPLE:
                c = cmp_tuples(a, b);
                break;
            default:
                break;
            }
        } else if (x.type == TROUPE_KEY_TUPLE || y.type == TROUPE_KEY_TUPLE) {
            return c; /* unequal types: the order is decided */
        }
        if (c != 0)
            return c;
    }
}

static int
memcmp_order(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0)
        return (c > 0) - (c < 0);
    return (an > bn) - (an < bn);
}

static void
check_order(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    size_t cut = 1 + data[0] % (size - 1);
    const uint8_t *a = data + 1, *b = data + cut;
    size_t an = cut - 1, bn = size - cut;
    if (troupe_key_validate(a, an) != TROUPE_OK ||
        troupe_key_validate(b, bn) != TROUPE_OK)
        return;
    troupe_key_reader ra, rb;
    troupe_key_reader_init(&ra, a, an);
    troupe_key_reader_init(&rb, b, bn);
    int v = cmp_tuples(&ra, &rb);
    troupe_key_reader_fini(&ra);
    troupe_key_reader_fini(&rb);
    int m = memcmp_order(a, an, b, bn);
    FZ_CHECK(v == m, "value order %d, byte order %d", v, m);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_err e = reencode(data, size, &w);
    troupe_err v = troupe_key_validate(data, size);
    FZ_ERR_IN(e, TROUPE_ENOENT, TROUPE_EPROTO);
    FZ_CHECK((v == TROUPE_OK) == (e == TROUPE_ENOENT), "validate %s, walk %s",
             troupe_err_name(v), troupe_err_name(e));
    if (e == TROUPE_ENOENT) {
        const uint8_t *k;
        size_t kl;
        FZ_ERR_IN(troupe_key_writer_finish(&w, &k, &kl), TROUPE_OK);
        FZ_CHECK(fz_same(k, kl, data, size), "re-encoded %zu bytes of %zu", kl,
                 size);
    } else {
        FZ_ERR_IN(v, TROUPE_EPROTO);
    }
    troupe_key_writer_fini(&w);
    check_order(data, size);
    return 0;
}
