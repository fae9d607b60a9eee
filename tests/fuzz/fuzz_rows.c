/*
 * libFuzzer target: what the table and queue actors read back from their
 * own families. The first byte picks the decoder:
 *   0 a row envelope [1, expires, doc] (troupe__envelope_parse)
 *   1 a manifest, with the row's encoded primary key (1-byte length
 *     first): troupe__manifest_parse with that suffix (the table actor's
 *     reading) and without (verify's), side by side
 *   2 a queue row's value [1, id, key, payload, owner]
 *   3 a pending key (p, partition, time, order, id)
 *   4 a completed key (c, processed, time, id, order)
 *   5 a whole queue row (key with a 2-byte length first, then value), as
 *     listings and deliveries read it (troupe__tq_item), for a queue of
 *     1..256 partitions (one byte)
 *   6 an id entry (i, id, skey) of an id (1-byte length first)
 *   7 an owner entry (o, kind, id, state, skey) of an owner (two spans)
 *
 * Properties: a refused input is ECORRUPT / EPROTO / EINVAL as each
 * decoder documents, with nothing allocated; accepted ones agree with an
 * independent reading (the envelope: msgpack-c's unpacker over the same
 * bytes, both paths of the decoder; the manifest: both readings accept the
 * same lists, the suffixed one only those whose keys end with the primary
 * key); every key decoder re-encodes what it accepted to the same bytes.
 */
#include <msgpack.h>
#include <string.h>

#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/datafmt.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/tables.h"
#include "troupe/pack.h"

/* ---- 0: envelopes ---- */

/* The envelope as msgpack-c reads it: true with *expires and the doc's
 * offset when it is [1, expires >= 0, map], nothing after. Only called on
 * bytes our bounded walk accepted (msgpack-c allocates from declared
 * sizes). */
static bool
envelope_ref(const uint8_t *d, size_t n, int64_t *expires, size_t *doc_off)
{
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, 1024))
        return false;
    msgpack_object o;
    size_t off = 0;
    bool ok = msgpack_unpack((const char *)d, n, &off, &zone, &o) ==
                  MSGPACK_UNPACK_SUCCESS &&
              off == n && o.type == MSGPACK_OBJECT_ARRAY &&
              o.via.array.size == 3 &&
              o.via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
              o.via.array.ptr[0].via.u64 == 1 &&
              o.via.array.ptr[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
              o.via.array.ptr[1].via.u64 <= INT64_MAX &&
              o.via.array.ptr[2].type == MSGPACK_OBJECT_MAP;
    if (ok) {
        *expires = (int64_t)o.via.array.ptr[1].via.u64;
        /* the doc is what is left after the header and two elements */
        size_t hdr = 1, first = 0, second = 0;
        msgpack_zone z2;
        msgpack_object t;
        ok = msgpack_zone_init(&z2, 256);
        if (ok) {
            /* more bytes follow each: EXTRA_BYTES */
            first = hdr;
            ok = msgpack_unpack((const char *)d, n, &first, &z2, &t) ==
                 MSGPACK_UNPACK_EXTRA_BYTES;
            second = first;
            ok = ok && msgpack_unpack((const char *)d, n, &second, &z2, &t) ==
                           MSGPACK_UNPACK_EXTRA_BYTES;
            msgpack_zone_destroy(&z2);
        }
        *doc_off = second;
    }
    msgpack_zone_destroy(&zone);
    return ok;
}

static void
envelope(const uint8_t *d, size_t n)
{
    int64_t exp = -1, rexp = -1;
    const void *doc = NULL;
    size_t dl = 0, roff = 0;
    troupe_err e = troupe__envelope_parse(d, n, &exp, &doc, &dl);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ECORRUPT);
    troupe_reader r;
    bool walked = troupe_reader_init(&r, d, n) == TROUPE_OK;
    bool ref = walked && envelope_ref(d, n, &rexp, &roff);
    FZ_CHECK((e == TROUPE_OK) == ref, "decoder %s, reference %s",
             troupe_err_name(e), ref ? "accepts" : "refuses");
    if (e != TROUPE_OK)
        return;
    FZ_CHECK(exp == rexp, "expires %lld, reference %lld", (long long)exp,
             (long long)rexp);
    FZ_CHECK((const uint8_t *)doc == d + roff && roff + dl == n,
             "doc at %zu+%zu, reference at %zu",
             (size_t)((const uint8_t *)doc - d), dl, roff);
    /* the general path on the same envelope, re-encoded without the fast
     * path's fixint form, agrees */
    uint8_t *g = troupe_malloc(12 + dl);
    FZ_CHECK(g != NULL, "out of memory");
    g[0] = 0x93; /* array of 3 */
    g[1] = 0xcc; /* uint8 1 */
    g[2] = 0x01;
    g[3] = 0xcf; /* uint64 expires */
    for (int i = 0; i < 8; i++)
        g[4 + i] = (uint8_t)((uint64_t)exp >> (56 - 8 * i));
    memcpy(g + 12, doc, dl);
    int64_t gexp = -1;
    const void *gdoc = NULL;
    size_t gdl = 0;
    FZ_ERR_IN(troupe__envelope_parse(g, 12 + dl, &gexp, &gdoc, &gdl),
              TROUPE_OK);
    FZ_CHECK(gexp == exp && fz_same(gdoc, gdl, doc, dl), "paths disagree");
    troupe_free(g);
}

/* ---- 1: manifests ---- */

static void
manifests(fz_in *in)
{
    size_t sl, ml;
    const uint8_t *suffix = fz_span8(in, &sl);
    const uint8_t *man = fz_take(in, in->n, &ml);
    mentry *tv = NULL, *vv = NULL;
    size_t tn = 0, vn = 0;
    troupe_err te = troupe__manifest_parse(man, ml, suffix, sl, &tv, &tn);
    FZ_ERR_IN(te, TROUPE_OK, TROUPE_ECORRUPT, TROUPE_ENOMEM);
    troupe_err ve = troupe__manifest_parse(man, ml, NULL, 0, &vv, &vn);
    FZ_ERR_IN(ve, TROUPE_OK, TROUPE_ECORRUPT, TROUPE_ENOMEM);
    if (te != TROUPE_OK)
        FZ_CHECK(tv == NULL && tn == 0, "entries on error");
    if (ve != TROUPE_OK)
        FZ_CHECK(vv == NULL && vn == 0, "entries on error");
    /* with the row's suffix: verify's reading plus the suffix rule */
    if (te == TROUPE_OK)
        FZ_CHECK(ve == TROUPE_OK, "verify refuses what the table accepts");
    if (ve == TROUPE_OK && te != TROUPE_ENOMEM) {
        bool suffixed = true;
        for (size_t i = 0; i < vn; i++)
            suffixed = suffixed && vv[i].len > sl &&
                       memcmp((const uint8_t *)vv[i].key + vv[i].len - sl,
                              suffix, sl) == 0;
        FZ_CHECK(suffixed == (te == TROUPE_OK),
                 "table parser %s, keys %s the suffix", troupe_err_name(te),
                 suffixed ? "all end with" : "do not all end with");
    }
    if (te == TROUPE_OK && ve == TROUPE_OK) {
        FZ_CHECK(tn == vn, "%zu entries vs %zu", tn, vn);
        for (size_t i = 0; i < tn; i++)
            FZ_CHECK(tv[i].id == vv[i].id &&
                         fz_same(tv[i].key, tv[i].len, vv[i].key, vv[i].len),
                     "entry %zu differs", i);
    }
    troupe_free(tv);
    troupe_free(vv);
}

/* ---- 2..7: queue rows and entries ---- */

static void
queue_value(const uint8_t *d, size_t n)
{
    troupe_queue_item it, again;
    memset(&it, 0, sizeof(it));
    troupe_err e = troupe__tq_value_decode(d, n, &it);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ECORRUPT);
    if (e != TROUPE_OK)
        return;
    FZ_CHECK(it.id_len >= 1 && it.id_len <= TROUPE_QUEUE_ID_MAX &&
                 it.key_len >= 1 && it.key_len <= TROUPE_QUEUE_ID_MAX,
             "id or key out of range");
    FZ_CHECK((it.owner_kind == NULL) == (it.owner_id == NULL),
             "owner by halves");
    troupe_queue_event ev = {.id = it.id,
                             .id_len = it.id_len,
                             .key = it.key,
                             .key_len = it.key_len,
                             .payload = it.payload,
                             .payload_len = it.payload_len,
                             .owner_kind = it.owner_kind,
                             .owner_kind_len = it.owner_kind_len,
                             .owner_id = it.owner_id,
                             .owner_id_len = it.owner_id_len};
    uint8_t *v = NULL;
    size_t vl = 0;
    e = troupe__tq_value_pack(&ev, &v, &vl);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ETOOBIG);
    if (e != TROUPE_OK)
        return;
    memset(&again, 0, sizeof(again));
    FZ_ERR_IN(troupe__tq_value_decode(v, vl, &again), TROUPE_OK);
    FZ_CHECK(fz_same(it.id, it.id_len, again.id, again.id_len) &&
                 fz_same(it.key, it.key_len, again.key, again.key_len) &&
                 fz_same(it.payload, it.payload_len, again.payload,
                         again.payload_len) &&
                 fz_same(it.owner_kind, it.owner_kind_len, again.owner_kind,
                         again.owner_kind_len) &&
                 fz_same(it.owner_id, it.owner_id_len, again.owner_id,
                         again.owner_id_len),
             "value changed");
    troupe_free(v);
}

/* The id element of a key that decoded (a copy: troupe_free it). */
static uint8_t *
key_id(const uint8_t *k, size_t n, size_t *idl)
{
    troupe_key_reader r;
    const uint8_t *id = NULL;
    FZ_ERR_IN(troupe__tq_key_id(k, n, &r, &id, idl), TROUPE_OK);
    uint8_t *c = troupe_malloc(*idl);
    FZ_CHECK(c != NULL, "out of memory");
    memcpy(c, id, *idl);
    troupe_key_reader_fini(&r);
    return c;
}

static void
same_key(troupe_key_writer *w, const uint8_t *k, size_t n)
{
    const uint8_t *k2;
    size_t n2;
    FZ_ERR_IN(troupe_key_writer_finish(w, &k2, &n2), TROUPE_OK);
    FZ_CHECK(fz_same(k, n, k2, n2), "key re-encoded differently");
}

/* A pending (or completed) key: decoded, then encoded again from what the
 * decoder gave, to the same bytes. */
static void
state_key(const uint8_t *k, size_t n, bool completed)
{
    uint32_t part = 0;
    int64_t processed = 0, time = 0;
    uint64_t order = 0;
    troupe_err e = completed
                       ? troupe__tq_ckey_decode(k, n, &processed, &time, &order)
                       : troupe__tq_pkey_decode(k, n, &part, &time, &order);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_EINVAL);
    if (e != TROUPE_OK)
        return;
    FZ_CHECK(part < TROUPE_QUEUE_PARTITIONS_MAX && (completed || time >= 0),
             "out of range");
    size_t idl;
    uint8_t *id = key_id(k, n, &idl);
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    if (completed)
        troupe__tq_ckey(&w, processed, time, id, idl, order);
    else
        troupe__tq_pkey(&w, part, time, order, id, idl);
    same_key(&w, k, n);
    troupe_key_writer_fini(&w);
    troupe_free(id);
}

static void
queue_row(fz_in *in)
{
    tq_queue q;
    memset(&q, 0, sizeof(q));
    q.partitions = 1u + fz_u8(in);
    size_t kl, vl;
    const uint8_t *k = fz_span16(in, &kl);
    const uint8_t *v = fz_take(in, in->n, &vl);
    troupe_queue_item it;
    troupe_err e = troupe__tq_item(&q, k, kl, v, vl, &it);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ECORRUPT);
    if (e != TROUPE_OK)
        return;
    FZ_CHECK(it.partition ==
                 troupe_queue_partition_of(it.key, it.key_len, q.partitions),
             "partition is not the key's");
    size_t idl;
    uint8_t *id = key_id(k, kl, &idl);
    FZ_CHECK(fz_same(id, idl, it.id, it.id_len), "key and value ids differ");
    troupe_free(id);
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    if (it.completed)
        troupe__tq_ckey(&w, it.processed_ms, it.time_ms, it.id, it.id_len,
                        it.order);
    else
        troupe__tq_pkey(&w, it.partition, it.time_ms, it.order, it.id,
                        it.id_len);
    same_key(&w, k, kl);
    troupe_key_writer_fini(&w);
}

static void
id_entry(fz_in *in)
{
    size_t idl, kl;
    const uint8_t *id = fz_span8(in, &idl);
    const uint8_t *k = fz_take(in, in->n, &kl);
    uint8_t *skey = NULL;
    size_t sl = 0;
    troupe_err e = troupe__tq_ientry_decode(k, kl, id, idl, &skey, &sl);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ECORRUPT, TROUPE_ENOMEM);
    if (e != TROUPE_OK) {
        FZ_CHECK(skey == NULL, "a key on error");
        return;
    }
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe__tq_ikey(&w, id, idl, skey, sl);
    same_key(&w, k, kl);
    troupe_key_writer_fini(&w);
    troupe_free(skey);
}

static void
owner_entry(fz_in *in)
{
    size_t kindl, oidl, kl;
    const uint8_t *kind = fz_span8(in, &kindl);
    const uint8_t *oid = fz_span8(in, &oidl);
    const uint8_t *k = fz_take(in, in->n, &kl);
    uint8_t *skey = NULL;
    size_t sl = 0;
    bool done = false;
    troupe_err e = troupe__tq_oentry_decode(k, kl, kind, kindl, oid, oidl,
                                            &skey, &sl, &done);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ECORRUPT, TROUPE_ENOMEM);
    if (e != TROUPE_OK) {
        FZ_CHECK(skey == NULL, "a key on error");
        return;
    }
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe__tq_okey(&w, kind, kindl, oid, oidl, done, skey, sl);
    same_key(&w, k, kl);
    troupe_key_writer_fini(&w);
    troupe_free(skey);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t sel = fz_u8(&in) % 8;
    switch (sel) {
    case 0:
        envelope(in.p, in.n);
        break;
    case 1:
        manifests(&in);
        break;
    case 2:
        queue_value(in.p, in.n);
        break;
    case 3:
    case 4:
        state_key(in.p, in.n, sel == 4);
        break;
    case 5:
        queue_row(&in);
        break;
    case 6:
        id_entry(&in);
        break;
    default:
        owner_entry(&in);
        break;
    }
    return 0;
}
