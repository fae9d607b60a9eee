/*
 * The queue's stored formats (docs/queue.md, "Key formats"): tuple keys
 * whose order is Tito's string layout's order, the event value, the
 * queue's catalog entry, the partition hash, and input validation.
 * Everything here is pure except troupe__tq_commit_wait.
 *
 * Tito writes zero-padded decimal strings so that string order is due
 * order; the tuple codec gives the same order with exact integers and
 * escaped byte strings, so an event id or owner part may hold any byte
 * (Tito base64url-encodes owner parts for the same reason).
 */
#include <inttypes.h>
#include <string.h>

#include "queue_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/hash.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

int64_t
troupe__tq_now(const tq_queue *q)
{
    return q->clock != NULL ? q->clock(q->clock_ctx) : troupe_now_ms();
}

uint32_t
troupe_queue_partition_of(const void *key, size_t key_len, uint32_t partitions)
{
    /* A format: partitions are stored and routed on (docs/queue.md). */
    uint64_t h = troupe__fnv1a64(key, key_len);
    return partitions == 0 ? 0 : (uint32_t)(h % partitions);
}

static bool
part_ok(const void *p, size_t n, size_t max)
{
    return p != NULL && n >= 1 && n <= max;
}

/* EINVAL with the detail of a part of an event that is not 1..max bytes. */
static troupe_err
part_err(const char *what, const void *p, size_t n, size_t max)
{
    if (p == NULL)
        return troupe__errf(TROUPE_EINVAL, "event %s is NULL", what);
    return troupe__errf(TROUPE_EINVAL, "event %s of %zu bytes: 1..%zu allowed",
                        what, n, max);
}

troupe_err
troupe__tq_event_check(const troupe_queue_event *ev)
{
    if (ev == NULL)
        return TROUPE_EINVAL;
    if (!part_ok(ev->id, ev->id_len, TROUPE_QUEUE_ID_MAX))
        return part_err("id", ev->id, ev->id_len, TROUPE_QUEUE_ID_MAX);
    if (!part_ok(ev->key, ev->key_len, TROUPE_QUEUE_ID_MAX))
        return part_err("key", ev->key, ev->key_len, TROUPE_QUEUE_ID_MAX);
    if (ev->time_ms < 0)
        return troupe__errf(TROUPE_EINVAL,
                            "event time_ms %" PRId64 " is negative",
                            ev->time_ms);
    if (ev->payload == NULL || ev->payload_len == 0)
        return troupe__errf(TROUPE_EINVAL, "event payload is empty");
    bool k = ev->owner_kind != NULL || ev->owner_kind_len != 0;
    bool o = ev->owner_id != NULL || ev->owner_id_len != 0;
    if (k != o)
        return troupe__errf(TROUPE_EINVAL, "event owner given by halves: "
                                           "owner_kind and owner_id go "
                                           "together");
    if (k &&
        !part_ok(ev->owner_kind, ev->owner_kind_len, TROUPE_QUEUE_OWNER_MAX))
        return part_err("owner_kind", ev->owner_kind, ev->owner_kind_len,
                        TROUPE_QUEUE_OWNER_MAX);
    if (k && !part_ok(ev->owner_id, ev->owner_id_len, TROUPE_QUEUE_OWNER_MAX))
        return part_err("owner_id", ev->owner_id, ev->owner_id_len,
                        TROUPE_QUEUE_OWNER_MAX);
    if (ev->payload_len > TROUPE_QUEUE_EVENT_MAX)
        return troupe__errf(TROUPE_ETOOBIG,
                            "event payload of %zu bytes over "
                            "TROUPE_QUEUE_EVENT_MAX (%zu)",
                            ev->payload_len, (size_t)TROUPE_QUEUE_EVENT_MAX);
    troupe_reader r;
    troupe_reader_init(&r, ev->payload, ev->payload_len);
    troupe_read_skip(&r);
    if (troupe_read_end(&r) != TROUPE_OK)
        return troupe__errf(TROUPE_EINVAL,
                            "event payload is not exactly one msgpack object");
    return TROUPE_OK;
}

troupe_err
troupe__tq_value_pack(const troupe_queue_event *ev, uint8_t **out, size_t *len)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 5);
    troupe_pack_uint(&p, 1);
    troupe_pack_bin(&p, ev->id, ev->id_len);
    troupe_pack_bin(&p, ev->key, ev->key_len);
    troupe_pack_raw(&p, ev->payload, ev->payload_len);
    if (ev->owner_kind != NULL) {
        troupe_pack_array(&p, 2);
        troupe_pack_bin(&p, ev->owner_kind, ev->owner_kind_len);
        troupe_pack_bin(&p, ev->owner_id, ev->owner_id_len);
    } else {
        troupe_pack_nil(&p);
    }
    size_t n = 0;
    const void *d = troupe_pack_data(&p, &n);
    troupe_err e = p.err;
    if (e == TROUPE_OK && n > TROUPE_QUEUE_EVENT_MAX)
        e = TROUPE_ETOOBIG;
    uint8_t *c = NULL;
    if (e == TROUPE_OK && (c = troupe_malloc(n)) == NULL)
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK) {
        memcpy(c, d, n);
        *out = c;
        *len = n;
    }
    troupe_pack_fini(&p);
    return e;
}

troupe_err
troupe__tq_value_decode(const void *v, size_t len, troupe_queue_item *it)
{
    troupe_reader r;
    const void *id, *key, *pl, *ok = NULL, *oi = NULL;
    size_t idl = 0, keyl = 0, pll = 0, okl = 0, oil = 0;
    uint64_t ver = 0;
    troupe_reader_init(&r, v, len);
    troupe_read_array_n(&r, 5);
    troupe_read_uint(&r, &ver);
    troupe_read_bin(&r, TROUPE_QUEUE_ID_MAX, &id, &idl);
    troupe_read_bin(&r, TROUPE_QUEUE_ID_MAX, &key, &keyl);
    troupe_read_raw(&r, &pl, &pll);
    if (!troupe_read_try_nil(&r)) {
        troupe_read_array_n(&r, 2);
        troupe_read_bin(&r, TROUPE_QUEUE_OWNER_MAX, &ok, &okl);
        troupe_read_bin(&r, TROUPE_QUEUE_OWNER_MAX, &oi, &oil);
        if (r.err == TROUPE_OK && (okl == 0 || oil == 0))
            return TROUPE_ECORRUPT;
    }
    if (troupe_read_end(&r) != TROUPE_OK || ver != 1 || idl == 0 || keyl == 0)
        return TROUPE_ECORRUPT;
    it->id = id;
    it->id_len = idl;
    it->key = key;
    it->key_len = keyl;
    it->payload = pl;
    it->payload_len = pll;
    it->owner_kind = ok;
    it->owner_kind_len = okl;
    it->owner_id = oi;
    it->owner_id_len = oil;
    return TROUPE_OK;
}

troupe_err
troupe__tq_pkey(troupe_key_writer *w, uint32_t part, int64_t time,
                uint64_t order, const void *id, size_t idlen)
{
    troupe_key_writer_reset(w);
    troupe_key_put_string(w, TQ_PENDING, 1);
    troupe_key_put_int64(w, part);
    troupe_key_put_int64(w, time);
    troupe_key_put_uint64(w, order);
    return troupe_key_put_bytes(w, id, idlen);
}

/* Reads one element of the wanted type. */
static bool
rd(troupe_key_reader *r, troupe_key_type t, troupe_key_item *it)
{
    return troupe_key_read(r, it) == TROUPE_OK && it->type == t;
}

static bool
rd_space(troupe_key_reader *r, const char *space)
{
    troupe_key_item it;
    return rd(r, TROUPE_KEY_STRING, &it) && it.v.s.len == 1 &&
           it.v.s.ptr[0] == (uint8_t)space[0];
}

static bool
rd_end(troupe_key_reader *r)
{
    troupe_key_item it;
    return troupe_key_read(r, &it) == TROUPE_ENOENT;
}

/* (space, partition, time, order, id) with nothing after: the layout of
 * pending keys and of attempts record keys. */
static bool
rd_due(troupe_key_reader *r, const char *space, troupe_key_item *a,
       troupe_key_item *b, troupe_key_item *c, troupe_key_item *d)
{
    return rd_space(r, space) && rd(r, TROUPE_KEY_INT64, a) &&
           rd(r, TROUPE_KEY_INT64, b) && rd(r, TROUPE_KEY_UINT64, c) &&
           rd(r, TROUPE_KEY_BYTES, d) && d->v.s.len > 0 && rd_end(r) &&
           a->v.i64 >= 0 && a->v.i64 < TROUPE_QUEUE_PARTITIONS_MAX &&
           b->v.i64 >= 0;
}

troupe_err
troupe__tq_pkey_decode(const void *k, size_t len, uint32_t *part, int64_t *time,
                       uint64_t *order)
{
    troupe_key_reader r;
    troupe_key_item a, b, c, d;
    troupe_key_reader_init(&r, k, len);
    bool ok = rd_due(&r, TQ_PENDING, &a, &b, &c, &d);
    troupe_key_reader_fini(&r);
    if (!ok)
        return TROUPE_EINVAL;
    *part = (uint32_t)a.v.i64;
    *time = b.v.i64;
    *order = c.v.u64;
    return TROUPE_OK;
}

troupe_err
troupe__tq_ckey(troupe_key_writer *w, int64_t processed, int64_t time,
                const void *id, size_t idlen, uint64_t order)
{
    troupe_key_writer_reset(w);
    troupe_key_put_string(w, TQ_COMPLETED, 1);
    troupe_key_put_int64(w, processed);
    troupe_key_put_int64(w, time);
    troupe_key_put_bytes(w, id, idlen);
    return troupe_key_put_uint64(w, order);
}

troupe_err
troupe__tq_ckey_decode(const void *k, size_t len, int64_t *processed,
                       int64_t *time, uint64_t *order)
{
    troupe_key_reader r;
    troupe_key_item a, b, c, d;
    troupe_key_reader_init(&r, k, len);
    bool ok = rd_space(&r, TQ_COMPLETED) && rd(&r, TROUPE_KEY_INT64, &a) &&
              rd(&r, TROUPE_KEY_INT64, &b) && rd(&r, TROUPE_KEY_BYTES, &d) &&
              d.v.s.len > 0 && rd(&r, TROUPE_KEY_UINT64, &c) && rd_end(&r);
    troupe_key_reader_fini(&r);
    if (!ok)
        return TROUPE_EINVAL;
    *processed = a.v.i64;
    *time = b.v.i64;
    *order = c.v.u64;
    return TROUPE_OK;
}

troupe_err
troupe__tq_okey(troupe_key_writer *w, const void *kind, size_t klen,
                const void *oid, size_t olen, bool completed, const void *skey,
                size_t slen)
{
    troupe_key_writer_reset(w);
    troupe_key_put_string(w, TQ_OWNER, 1);
    troupe_key_put_bytes(w, kind, klen);
    troupe_key_put_bytes(w, oid, olen);
    troupe_key_put_string(w, completed ? "completed" : "pending",
                          completed ? 9 : 7);
    return troupe_key_put_bytes(w, skey, slen);
}

troupe_err
troupe__tq_ikey(troupe_key_writer *w, const void *id, size_t idlen,
                const void *skey, size_t slen)
{
    troupe_key_writer_reset(w);
    troupe_key_put_string(w, TQ_IDS, 1);
    troupe_key_put_bytes(w, id, idlen);
    return troupe_key_put_bytes(w, skey, slen);
}

troupe_err
troupe__tq_key_id(const void *k, size_t len, troupe_key_reader *r,
                  const uint8_t **id, size_t *idlen)
{
    troupe_key_item it;
    troupe_key_reader_init(r, k, len);
    if (troupe_key_read(r, &it) != TROUPE_OK || it.type != TROUPE_KEY_STRING ||
        it.v.s.len != 1)
        return TROUPE_EINVAL;
    int n = it.v.s.ptr[0] == 'p' ? 3 : it.v.s.ptr[0] == 'c' ? 2 : -1;
    if (n < 0)
        return TROUPE_EINVAL;
    for (int i = 0; i < n; i++)
        if (troupe_key_read(r, &it) != TROUPE_OK)
            return TROUPE_EINVAL;
    if (!rd(r, TROUPE_KEY_BYTES, &it) || it.v.s.len == 0)
        return TROUPE_EINVAL;
    *id = it.v.s.ptr;
    *idlen = it.v.s.len;
    return TROUPE_OK;
}

/* Reads a bytes element equal to want[0..n). */
static bool
rd_same(troupe_key_reader *r, const void *want, size_t n)
{
    troupe_key_item it;
    return rd(r, TROUPE_KEY_BYTES, &it) && it.v.s.len == n &&
           memcmp(it.v.s.ptr, want, n) == 0;
}

/* The last element of an entry, the row key it points at: a copy in
 * *skey (troupe_malloc'd), which must decode as a pending or a completed
 * key (*completed tells which), and nothing after it. */
static troupe_err
rd_skey(troupe_key_reader *r, uint8_t **skey, size_t *slen, bool *completed)
{
    troupe_key_item it;
    uint32_t part;
    int64_t a, b;
    uint64_t order;
    if (!rd(r, TROUPE_KEY_BYTES, &it))
        return TROUPE_ECORRUPT;
    bool p = troupe__tq_pkey_decode(it.v.s.ptr, it.v.s.len, &part, &b,
                                    &order) == TROUPE_OK;
    bool c = !p && troupe__tq_ckey_decode(it.v.s.ptr, it.v.s.len, &a, &b,
                                          &order) == TROUPE_OK;
    if (!p && !c)
        return TROUPE_ECORRUPT;
    uint8_t *copy = troupe_malloc(it.v.s.len);
    if (copy == NULL)
        return TROUPE_ENOMEM;
    memcpy(copy, it.v.s.ptr, it.v.s.len);
    if (!rd_end(r)) {
        troupe_free(copy);
        return TROUPE_ECORRUPT;
    }
    *skey = copy;
    *slen = it.v.s.len;
    *completed = c;
    return TROUPE_OK;
}

troupe_err
troupe__tq_ientry_decode(const void *k, size_t len, const void *id,
                         size_t idlen, uint8_t **skey, size_t *slen)
{
    troupe_key_reader r;
    bool completed;
    troupe_key_reader_init(&r, k, len);
    troupe_err e = rd_space(&r, TQ_IDS) && rd_same(&r, id, idlen)
                       ? rd_skey(&r, skey, slen, &completed)
                       : TROUPE_ECORRUPT;
    troupe_key_reader_fini(&r);
    return e;
}

troupe_err
troupe__tq_oentry_decode(const void *k, size_t len, const void *kind,
                         size_t klen, const void *oid, size_t olen,
                         uint8_t **skey, size_t *slen, bool *completed)
{
    troupe_key_reader r;
    troupe_key_item st;
    troupe_key_reader_init(&r, k, len);
    troupe_err e = TROUPE_ECORRUPT;
    if (rd_space(&r, TQ_OWNER) && rd_same(&r, kind, klen) &&
        rd_same(&r, oid, olen) && rd(&r, TROUPE_KEY_STRING, &st)) {
        bool done = st.v.s.len == 9 && memcmp(st.v.s.ptr, "completed", 9) == 0;
        bool pend = st.v.s.len == 7 && memcmp(st.v.s.ptr, "pending", 7) == 0;
        if (done || pend)
            e = rd_skey(&r, skey, slen, completed);
        if (e == TROUPE_OK && *completed != done) {
            troupe_free(*skey);
            *skey = NULL;
            e = TROUPE_ECORRUPT;
        }
    }
    troupe_key_reader_fini(&r);
    return e;
}

troupe_err
troupe__tq_item(const tq_queue *q, const void *k, size_t klen, const void *v,
                size_t vlen, troupe_queue_item *it)
{
    memset(it, 0, sizeof(*it));
    it->skey = k;
    it->skey_len = klen;
    uint32_t part;
    if (troupe__tq_pkey_decode(k, klen, &part, &it->time_ms, &it->order) ==
        TROUPE_OK) {
        it->partition = part;
    } else if (troupe__tq_ckey_decode(k, klen, &it->processed_ms, &it->time_ms,
                                      &it->order) == TROUPE_OK) {
        it->completed = true;
    } else {
        return TROUPE_ECORRUPT;
    }
    if (troupe__tq_value_decode(v, vlen, it) != TROUPE_OK)
        return TROUPE_ECORRUPT;
    /* the key's id must be the value's */
    troupe_key_reader r;
    const uint8_t *kid = NULL;
    size_t kidl = 0;
    troupe_err e = troupe__tq_key_id(k, klen, &r, &kid, &kidl);
    bool same =
        e == TROUPE_OK && kidl == it->id_len && memcmp(kid, it->id, kidl) == 0;
    troupe_key_reader_fini(&r);
    if (!same)
        return TROUPE_ECORRUPT;
    uint32_t hp =
        troupe_queue_partition_of(it->key, it->key_len, q->partitions);
    if (!it->completed && hp != it->partition)
        return TROUPE_ECORRUPT;
    it->partition = hp;
    return TROUPE_OK;
}

troupe_err
troupe__tq_entries(troupe_batch *b, troupe_cf *cf, const troupe_queue_item *it,
                   const void *skey, size_t slen, bool completed, bool put)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    const uint8_t *k;
    size_t kl;
    troupe_err e = TROUPE_OK;
    if (it->owner_kind != NULL) {
        troupe__tq_okey(&w, it->owner_kind, it->owner_kind_len, it->owner_id,
                        it->owner_id_len, completed, skey, slen);
        e = troupe_key_writer_finish(&w, &k, &kl);
        if (e == TROUPE_OK)
            e = put ? troupe_batch_put(b, cf, k, kl, "", 0)
                    : troupe_batch_delete(b, cf, k, kl);
    }
    if (e == TROUPE_OK) {
        troupe__tq_ikey(&w, it->id, it->id_len, skey, slen);
        e = troupe_key_writer_finish(&w, &k, &kl);
        if (e == TROUPE_OK)
            e = put ? troupe_batch_put(b, cf, k, kl, "", 0)
                    : troupe_batch_delete(b, cf, k, kl);
    }
    troupe_key_writer_fini(&w);
    return e;
}

/* ---- the catalog entry ----------------------------------------------- */

static troupe_err
entry_key(troupe_key_writer *w, const char *name)
{
    troupe_key_writer_reset(w);
    troupe_key_put_string(w, "queue", 5);
    if (name != NULL)
        troupe_key_put_string(w, name, strlen(name));
    return w->err;
}

troupe_err
troupe__tq_entry_pack(const char *name, const tq_entry *en,
                      troupe_key_writer *w, troupe_packer *p)
{
    entry_key(w, name);
    /* Version 1 while neither field of version 2 is set, so that a
     * database that uses neither stays readable by older builds. */
    bool v2 = en->max_attempts != 0 || en->paused;
    troupe_pack_array(p, v2 ? 6 : 4);
    troupe_pack_uint(p, v2 ? 2 : 1);
    troupe_pack_uint(p, en->id);
    troupe_pack_uint(p, en->partitions);
    troupe_pack_int(p, en->retention_ms);
    if (v2) {
        troupe_pack_uint(p, en->max_attempts);
        troupe_pack_bool(p, en->paused);
    }
    return w->err != TROUPE_OK ? w->err : p->err;
}

troupe_err
troupe__tq_entry_decode(const void *k, size_t klen, const void *v, size_t vlen,
                        char name[TROUPE_QUEUE_NAME_MAX + 1], tq_entry *en)
{
    troupe_key_reader kr;
    troupe_key_item a, b;
    troupe_key_reader_init(&kr, k, klen);
    bool ok =
        troupe_key_read(&kr, &a) == TROUPE_OK && a.type == TROUPE_KEY_STRING &&
        a.v.s.len == 5 && memcmp(a.v.s.ptr, "queue", 5) == 0 &&
        troupe_key_read(&kr, &b) == TROUPE_OK && b.type == TROUPE_KEY_STRING &&
        b.v.s.len > 0 && b.v.s.len <= TROUPE_QUEUE_NAME_MAX;
    if (ok) {
        memcpy(name, b.v.s.ptr, b.v.s.len);
        name[b.v.s.len] = 0;
        /* a NUL inside would cut the name short: no create makes one */
        ok = strlen(name) == b.v.s.len &&
             troupe_catalog_name_valid(name, NULL) &&
             troupe_key_read(&kr, &a) == TROUPE_ENOENT;
    }
    troupe_key_reader_fini(&kr);
    troupe_err e = troupe__tq_entry_value_decode(v, vlen, en);
    return ok ? e : TROUPE_ECORRUPT;
}

troupe_err
troupe__tq_entry_value_decode(const void *v, size_t vlen, tq_entry *en)
{
    troupe_reader r;
    uint64_t ver = 0, i = 0;
    uint32_t n = 0, cnt = 0, maxa = 0;
    int64_t ret = -1;
    bool paused = false;
    troupe_reader_init(&r, v, vlen);
    troupe_read_array(&r, &cnt);
    troupe_read_uint(&r, &ver);
    troupe_read_uint(&r, &i);
    troupe_read_u32(&r, &n);
    troupe_read_int(&r, &ret);
    /* version 1: 4 fields; version 2 adds max_attempts and paused */
    if (ver == 2 && cnt == 6) {
        troupe_read_u32(&r, &maxa);
        troupe_read_bool(&r, &paused);
    }
    if (troupe_read_end(&r) != TROUPE_OK ||
        !((ver == 1 && cnt == 4) || (ver == 2 && cnt == 6)) || i == 0 ||
        n == 0 || n > TROUPE_QUEUE_PARTITIONS_MAX || ret < 0 ||
        maxa > TROUPE_QUEUE_ATTEMPTS_MAX)
        return TROUPE_ECORRUPT;
    *en = (tq_entry){.id = i,
                     .partitions = n,
                     .retention_ms = ret,
                     .max_attempts = maxa,
                     .paused = paused};
    return TROUPE_OK;
}

/* ---- the attempts record ---------------------------------------------- */

troupe_err
troupe__tq_akey(troupe_key_writer *w, const void *skey, size_t slen)
{
    uint32_t part;
    int64_t time;
    uint64_t order;
    troupe_key_reader r;
    const uint8_t *id = NULL;
    size_t idl = 0;
    bool rinit = false;
    troupe_err e = troupe__tq_pkey_decode(skey, slen, &part, &time, &order);
    if (e == TROUPE_OK) {
        e = troupe__tq_key_id(skey, slen, &r, &id, &idl);
        rinit = true;
    }
    if (e == TROUPE_OK) {
        troupe_key_writer_reset(w);
        troupe_key_put_string(w, TQ_ATTEMPTS, 1);
        troupe_key_put_int64(w, part);
        troupe_key_put_int64(w, time);
        troupe_key_put_uint64(w, order);
        e = troupe_key_put_bytes(w, id, idl);
    }
    if (rinit)
        troupe_key_reader_fini(&r);
    return e;
}

troupe_err
troupe__tq_akey_pkey(troupe_key_writer *w, const void *akey, size_t alen)
{
    troupe_key_reader r;
    troupe_key_item a, b, c, d;
    troupe_key_reader_init(&r, akey, alen);
    bool ok = rd_due(&r, TQ_ATTEMPTS, &a, &b, &c, &d);
    troupe_err e = ok ? troupe__tq_pkey(w, (uint32_t)a.v.i64, b.v.i64, c.v.u64,
                                        d.v.s.ptr, d.v.s.len)
                      : TROUPE_ECORRUPT;
    troupe_key_reader_fini(&r);
    return e;
}

troupe_err
troupe__tq_att_pack(const tq_att *a, troupe_packer *p)
{
    troupe_pack_array(p, 4);
    troupe_pack_uint(p, 1);
    troupe_pack_uint(p, a->attempts);
    troupe_pack_bool(p, a->parked);
    if (a->error != NULL)
        troupe_pack_bin(p, a->error,
                        a->error_len < TROUPE_QUEUE_ERROR_MAX
                            ? a->error_len
                            : TROUPE_QUEUE_ERROR_MAX);
    else
        troupe_pack_nil(p);
    return p->err;
}

troupe_err
troupe__tq_att_decode(const void *v, size_t len, tq_att *a)
{
    troupe_reader r;
    uint64_t ver = 0;
    uint32_t n = 0;
    bool parked = false;
    const void *err = NULL;
    size_t errl = 0;
    troupe_reader_init(&r, v, len);
    troupe_read_array_n(&r, 4);
    troupe_read_uint(&r, &ver);
    troupe_read_u32(&r, &n);
    troupe_read_bool(&r, &parked);
    if (!troupe_read_try_nil(&r))
        troupe_read_bin(&r, TROUPE_QUEUE_ERROR_MAX, &err, &errl);
    if (troupe_read_end(&r) != TROUPE_OK || ver != 1 || n == 0)
        return TROUPE_ECORRUPT;
    *a = (tq_att){
        .attempts = n, .parked = parked, .error = err, .error_len = errl};
    return TROUPE_OK;
}

troupe_err
troupe__tq_att_write(troupe_batch *b, troupe_cf *cf, const void *skey,
                     size_t slen, const tq_att *a)
{
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_packer p;
    troupe_pack_init(&p);
    const uint8_t *k;
    size_t kl;
    troupe_err e = troupe__tq_akey(&w, skey, slen);
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK && a == NULL)
        e = troupe_batch_delete(b, cf, k, kl);
    else if (e == TROUPE_OK && (e = troupe__tq_att_pack(a, &p)) == TROUPE_OK) {
        size_t n = 0;
        const void *v = troupe_pack_data(&p, &n);
        e = troupe_batch_put(b, cf, k, kl, v, n);
    }
    troupe_pack_fini(&p);
    troupe_key_writer_fini(&w);
    return e;
}

troupe_err
troupe__tq_att_get(const tq_queue *q, troupe_snapshot *snap, const void *skey,
                   size_t slen, tq_att *a, void **buf)
{
    *buf = NULL;
    *a = (tq_att){0};
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    const uint8_t *k;
    size_t kl;
    size_t vl = 0;
    troupe_err e = troupe__tq_akey(&w, skey, slen);
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_db_get(q->db, q->cf, snap, k, kl, buf, &vl);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_ENOENT)
        return TROUPE_OK; /* never delivered since its publication */
    if (e == TROUPE_OK && (e = troupe__tq_att_decode(*buf, vl, a)) != TROUPE_OK)
        *a = (tq_att){0};
    if (e != TROUPE_OK) {
        troupe_free(*buf);
        *buf = NULL;
    }
    return e;
}

/* ---- the blocking commit ---------------------------------------------- */

static void
committed(troupe_err err, void *arg)
{
    troupe__waiter_release(arg, err, NULL);
}

troupe_err
troupe__tq_commit_wait(troupe_commit *c, troupe_batch **b, troupe_sync sync)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(
        &w, troupe_commit_submit(c, b, sync, committed, &w), NULL);
}
