/*
 * XA's table half (troupe/internal/xa.h): the xid rule, the record and
 * marker codecs, the registry of prepared xids in the troupe_tables, and
 * the re-hold at open.
 *
 * The registry is the one place that knows an xid is prepared: a
 * prepare registers its entry before it writes the record (so a second
 * prepare of the xid is EEXIST and a resolution that races the write
 * finds it busy), a resolution claims it, and only the end of the
 * resolution unregisters it. Every table an entry names counts it
 * (tentry.xa_holds, under the tables' mutex): DDL on such a table is
 * EBUSY, because the prepared batch carries the rows of the schema it was
 * prepared with (a new index would lack their entries).
 *
 * Re-hold at open. A record on disk is a transaction whose keys were held
 * when the process went away. Before open returns, each is prepared again
 * at its tables from the write and read sets it stored, under a shared
 * state of its own, through the same participant protocol a commit uses:
 * the keys are locked and reserved, unique values enter the in-flight set,
 * and nothing else can slip in between. The batch that prepare builds is
 * thrown away: the commit writes the stored bytes, exactly what was
 * prepared (a second prepare stamps other timestamps). Versioned reads
 * come back as plain reads: versions do not survive a restart, and the
 * keys cannot have changed while the database was closed.
 */
#include <stdlib.h>
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/catalog.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"
#include "troupe/internal/xa.h"
#include "troupe/storage.h"

bool
troupe__xa_xid_valid(const void *xid, size_t len)
{
    if (xid == NULL || len == 0 || len > TROUPE__XA_XID_MAX)
        return false;
    const unsigned char *p = xid;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
                  c == '/' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

troupe_err
troupe__xa_xid_check(const char *call, const void *xid, size_t len)
{
    if (troupe__xa_xid_valid(xid, len))
        return TROUPE_OK;
    return troupe__errf(TROUPE_EINVAL,
                        "%s: the xid must be 1..%d bytes of "
                        "[A-Za-z0-9_.:/-] (%s, %zu bytes given)",
                        call, TROUPE__XA_XID_MAX,
                        xid == NULL ? "NULL" : "bad bytes",
                        xid == NULL ? (size_t)0 : len);
}

troupe_err
troupe__xa_key(troupe_key_writer *w, const char *kind, const void *xid,
               size_t len)
{
    troupe_key_writer_init(w);
    troupe_key_put_string(w, kind, strlen(kind));
    return troupe_key_put_string(w, xid, len);
}

/* ---- the record -------------------------------------------------------- */

void
troupe__xa_rec_pack(const txa_rec *r, troupe_packer *p)
{
    troupe_pack_array(p, 5);
    troupe_pack_uint(p, TROUPE__XA_FORMAT);
    troupe_pack_str(p, r->xid, r->xlen);
    troupe_pack_int(p, r->prep_ms);
    troupe_pack_array(p, (uint32_t)r->ntabs);
    for (size_t i = 0; i < r->ntabs; i++) {
        const txa_tab *tb = &r->tabs[i];
        troupe_pack_array(p, 4);
        troupe_pack_cstr(p, tb->name);
        troupe_pack_uint(p, tb->id);
        troupe_pack_array(p, (uint32_t)tb->n);
        for (size_t j = 0; j < tb->n; j++) {
            const ttxn_key *k = &tb->keys[j];
            troupe_pack_array(p, 5);
            troupe_pack_uint(p, k->kind);
            troupe_pack_int(p, k->expires);
            troupe_pack_bool(p, k->nostamp);
            troupe_pack_bin(p, k->key, k->klen);
            if (k->doc != NULL)
                troupe_pack_bin(p, k->doc, k->dlen);
            else
                troupe_pack_nil(p);
        }
        troupe_pack_array(p, (uint32_t)tb->nranges);
        for (size_t j = 0; j < tb->nranges; j++) {
            const ttxn_range *g = &tb->ranges[j];
            troupe_pack_array(p, 2);
            if (g->start != NULL)
                troupe_pack_bin(p, g->start, g->slen);
            else
                troupe_pack_nil(p);
            if (g->end != NULL)
                troupe_pack_bin(p, g->end, g->elen);
            else
                troupe_pack_nil(p);
        }
    }
    troupe_pack_bin(p, r->batch, r->blen);
}

void
troupe__xa_rec_fini(txa_rec *r)
{
    for (size_t i = 0; r->tabs != NULL && i < r->ntabs; i++) {
        troupe_free((void *)r->tabs[i].name);
        troupe_free(r->tabs[i].keys);
        troupe_free(r->tabs[i].ranges);
    }
    troupe_free(r->tabs);
    *r = (txa_rec){0};
}

/* An optional bin: nil (NULL) or 1..TROUPE_KEY_MAX bytes. */
static void
read_opt_key(troupe_reader *rd, const unsigned char **k, size_t *n)
{
    *k = NULL;
    *n = 0;
    if (troupe_read_try_nil(rd))
        return;
    const void *b = NULL;
    troupe_read_bin(rd, TROUPE_KEY_MAX, &b, n);
    if (rd->err == TROUPE_OK && *n == 0)
        rd->err = TROUPE_EPROTO;
    *k = b;
}

static bool
kind_valid(uint32_t kind)
{
    return kind <= TROUPE__PART_DELETE || kind == TROUPE__PART_READ ||
           kind == TROUPE__PART_DEL_ANY || kind == TROUPE__PART_ABSENT;
}

/* One table's part [name, id, [keys], [ranges]] into tb. */
static troupe_err
parse_tab(troupe_reader *rd, txa_tab *tb)
{
    const char *nm = NULL;
    size_t nl = 0;
    uint32_t n = 0, nr = 0;
    troupe_read_array_n(rd, 4);
    troupe_read_str(rd, TROUPE_TABLE_NAME_MAX, &nm, &nl);
    troupe_read_uint(rd, &tb->id);
    if (rd->err != TROUPE_OK)
        return TROUPE_ECORRUPT;
    char *name = troupe_malloc(nl + 1);
    if (name == NULL)
        return TROUPE_ENOMEM;
    memcpy(name, nm, nl);
    name[nl] = '\0';
    tb->name = name;
    size_t vl = 0;
    if (tb->id == 0 || !troupe_catalog_name_valid(name, &vl) || vl != nl)
        return TROUPE_ECORRUPT;
    troupe_read_array(rd, &n);
    if (rd->err != TROUPE_OK || n > TROUPE__XA_KEYS_MAX)
        return TROUPE_ECORRUPT;
    tb->keys = troupe_calloc(n ? n : 1, sizeof(*tb->keys));
    if (tb->keys == NULL)
        return TROUPE_ENOMEM;
    for (uint32_t j = 0; j < n && rd->err == TROUPE_OK; j++) {
        ttxn_key *k = &tb->keys[j];
        const void *kb = NULL;
        troupe_read_array_n(rd, 5);
        troupe_read_u32(rd, &k->kind);
        troupe_read_int(rd, &k->expires);
        troupe_read_bool(rd, &k->nostamp);
        troupe_read_bin(rd, TROUPE_KEY_MAX, &kb, &k->klen);
        k->key = kb;
        if (!troupe_read_try_nil(rd)) {
            const void *db = NULL;
            troupe_read_bin(rd, TROUPE_VALUE_MAX, &db, &k->dlen);
            k->doc = db;
        }
        if (rd->err != TROUPE_OK)
            break;
        bool put = k->kind <= TROUPE__PART_UPSERT;
        if (!kind_valid(k->kind) || k->klen == 0 || k->expires < 0 ||
            put != (k->doc != NULL) ||
            (j > 0 && troupe_key_cmp(tb->keys[j - 1].key, tb->keys[j - 1].klen,
                                     k->key, k->klen) >= 0))
            return TROUPE_ECORRUPT;
    }
    tb->n = n;
    troupe_read_array(rd, &nr);
    if (rd->err != TROUPE_OK || nr > TROUPE__XA_KEYS_MAX)
        return TROUPE_ECORRUPT;
    tb->ranges = troupe_calloc(nr ? nr : 1, sizeof(*tb->ranges));
    if (tb->ranges == NULL)
        return TROUPE_ENOMEM;
    for (uint32_t j = 0; j < nr && rd->err == TROUPE_OK; j++) {
        ttxn_range *g = &tb->ranges[j];
        troupe_read_array_n(rd, 2);
        read_opt_key(rd, &g->start, &g->slen);
        read_opt_key(rd, &g->end, &g->elen);
        if (rd->err == TROUPE_OK && g->start != NULL && g->end != NULL &&
            troupe_key_cmp(g->start, g->slen, g->end, g->elen) >= 0)
            return TROUPE_ECORRUPT;
    }
    tb->nranges = nr;
    return rd->err == TROUPE_OK ? TROUPE_OK : TROUPE_ECORRUPT;
}

troupe_err
troupe__xa_rec_parse(const void *v, size_t len, txa_rec *out)
{
    *out = (txa_rec){0};
    troupe_reader rd;
    uint64_t fmt = 0;
    uint32_t nt = 0;
    troupe_reader_init(&rd, v, len);
    troupe_read_array_n(&rd, 5);
    troupe_read_uint(&rd, &fmt);
    troupe_read_str(&rd, TROUPE__XA_XID_MAX, &out->xid, &out->xlen);
    troupe_read_int(&rd, &out->prep_ms);
    troupe_read_array(&rd, &nt);
    if (rd.err != TROUPE_OK || fmt != TROUPE__XA_FORMAT ||
        !troupe__xa_xid_valid(out->xid, out->xlen) || nt == 0 ||
        nt > TROUPE__XA_TABLES_MAX || out->prep_ms < 0)
        return TROUPE_ECORRUPT;
    out->tabs = troupe_calloc(nt, sizeof(*out->tabs));
    if (out->tabs == NULL)
        return TROUPE_ENOMEM;
    troupe_err e = TROUPE_OK;
    for (uint32_t i = 0; i < nt && e == TROUPE_OK; i++) {
        out->ntabs = i + 1;
        e = parse_tab(&rd, &out->tabs[i]);
        if (e == TROUPE_OK && i > 0 &&
            strcmp(out->tabs[i - 1].name, out->tabs[i].name) >= 0)
            e = TROUPE_ECORRUPT; /* sorted, distinct */
    }
    if (e == TROUPE_OK) {
        troupe_read_bin(&rd, TROUPE_BATCH_MAX, &out->batch, &out->blen);
        if (troupe_read_end(&rd) != TROUPE_OK || out->blen < 12)
            e = TROUPE_ECORRUPT;
    }
    if (e != TROUPE_OK)
        troupe__xa_rec_fini(out);
    return e;
}

/* ---- the registry ------------------------------------------------------ */

void
troupe__xa_entry_free(txa_entry *e)
{
    if (e == NULL)
        return;
    troupe__xa_rec_fini(&e->rec);
    troupe_free(e->val);
    troupe_free(e->addrs);
    troupe__ttxn_release(e->sh);
    troupe_free(e);
}

troupe_err
troupe__xa_entry_new(troupe_tables *t, void *val, size_t vlen, ttxn_shared *sh,
                     txa_entry **out)
{
    *out = NULL;
    txa_entry *e = troupe_calloc(1, sizeof(*e));
    if (e == NULL) {
        troupe_free(val);
        return TROUPE_ENOMEM;
    }
    e->val = val;
    e->vlen = vlen;
    troupe_err err = troupe__xa_rec_parse(val, vlen, &e->rec);
    if (err == TROUPE_OK) {
        e->addrs = troupe_calloc(e->rec.ntabs, sizeof(*e->addrs));
        if (e->addrs == NULL)
            err = TROUPE_ENOMEM;
    }
    for (size_t i = 0; err == TROUPE_OK && i < e->rec.ntabs; i++) {
        uint64_t id = 0;
        troupe_cf *cf = NULL;
        err = troupe__tables_lookup_id(t, e->rec.tabs[i].name, &e->addrs[i],
                                       &cf, &id);
        if (err == TROUPE_ENOENT)
            err = TROUPE_ENOTABLE;
        if (err == TROUPE_OK && id != e->rec.tabs[i].id)
            err = TROUPE_ECORRUPT; /* DDL is refused on held tables */
    }
    if (err != TROUPE_OK) {
        troupe__xa_entry_free(e);
        return err;
    }
    e->sh = troupe__ttxn_retain(sh);
    *out = e;
    return TROUPE_OK;
}

static txa_entry *
entry_find(troupe_tables *t, const void *xid, size_t len)
{
    for (txa_entry *e = t->xa.entries; e != NULL; e = e->next)
        if (e->rec.xlen == len && memcmp(e->rec.xid, xid, len) == 0)
            return e;
    return NULL;
}

/* Adds d to the holds of every table e names. Called with mu held. */
static void
holds_add(troupe_tables *t, const txa_entry *e, int d)
{
    for (size_t i = 0; i < e->rec.ntabs; i++) {
        tentry *en = troupe__tables_entry_find(t, e->rec.tabs[i].name);
        if (en != NULL && en->id == e->rec.tabs[i].id)
            en->xa_holds += d;
    }
}

/* Whether a build, rebuild or sweep of table `name` runs or is pending.
 * Called with mu held. */
static bool
building(troupe_tables *t, const txa_tab *tb)
{
    tentry *en = troupe__tables_entry_find(t, tb->name);
    if (en == NULL || en->id != tb->id)
        return false;
    if (en->ndropped > 0)
        return true;
    for (size_t i = 0; i < en->schema->n; i++)
        if (!troupe_index_def_ready(en->schema->defs[i]))
            return true;
    return false;
}

troupe_err
troupe__xa_register(troupe_tables *t, txa_entry *e, bool fresh)
{
    pthread_mutex_lock(&t->mu);
    troupe_err err = entry_find(t, e->rec.xid, e->rec.xlen) != NULL
                         ? TROUPE_EEXIST
                         : TROUPE_OK;
    for (size_t i = 0; fresh && err == TROUPE_OK && i < e->rec.ntabs; i++)
        if (building(t, &e->rec.tabs[i]))
            err = troupe__errf(TROUPE_EBUSY,
                               "troupe_txn_prepare: an index of table \"%s\" "
                               "is building",
                               e->rec.tabs[i].name);
    if (err == TROUPE_OK) {
        e->state = TXA_PENDING;
        e->next = t->xa.entries;
        t->xa.entries = e;
        holds_add(t, e, 1);
    }
    pthread_mutex_unlock(&t->mu);
    return err;
}

void
troupe__xa_set_state(troupe_tables *t, txa_entry *e, int state)
{
    pthread_mutex_lock(&t->mu);
    e->state = state;
    pthread_mutex_unlock(&t->mu);
}

void
troupe__xa_unregister(troupe_tables *t, txa_entry *e)
{
    pthread_mutex_lock(&t->mu);
    for (txa_entry **pp = &t->xa.entries; *pp != NULL; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            holds_add(t, e, -1);
            break;
        }
    pthread_mutex_unlock(&t->mu);
}

troupe_err
troupe__xa_claim(troupe_tables *t, const void *xid, size_t len, txa_entry **out)
{
    pthread_mutex_lock(&t->mu);
    txa_entry *e = entry_find(t, xid, len);
    troupe_err err = e == NULL                  ? TROUPE_ENOENT
                     : e->state != TXA_PREPARED ? TROUPE_EBUSY
                                                : TROUPE_OK;
    if (err == TROUPE_OK)
        e->state = TXA_RESOLVING;
    pthread_mutex_unlock(&t->mu);
    *out = err == TROUPE_OK ? e : NULL;
    return err;
}

static int
snap_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

troupe_err
troupe__xa_snapshot(troupe_tables *t, char ***xids, int64_t **ms, size_t *n)
{
    *xids = NULL;
    *ms = NULL;
    *n = 0;
    pthread_mutex_lock(&t->mu);
    size_t k = 0;
    for (txa_entry *e = t->xa.entries; e != NULL; e = e->next)
        k += e->state != TXA_PENDING;
    char **v = troupe_calloc(k ? k : 1, sizeof(*v));
    troupe_err err = v == NULL ? TROUPE_ENOMEM : TROUPE_OK;
    size_t i = 0;
    for (txa_entry *e = t->xa.entries; err == TROUPE_OK && e != NULL;
         e = e->next) {
        if (e->state == TXA_PENDING)
            continue; /* its record is not stored yet */
        /* "<xid>\0" then the prepare time, so one sort orders both */
        v[i] = troupe_malloc(e->rec.xlen + 1 + sizeof(int64_t));
        if (v[i] == NULL) {
            err = TROUPE_ENOMEM;
            break;
        }
        memcpy(v[i], e->rec.xid, e->rec.xlen);
        v[i][e->rec.xlen] = '\0';
        memcpy(v[i] + e->rec.xlen + 1, &e->rec.prep_ms, sizeof(int64_t));
        i++;
    }
    pthread_mutex_unlock(&t->mu);
    int64_t *m = err == TROUPE_OK ? troupe_calloc(k ? k : 1, sizeof(*m)) : NULL;
    if (err == TROUPE_OK && m == NULL)
        err = TROUPE_ENOMEM;
    if (err != TROUPE_OK) {
        for (size_t j = 0; v != NULL && j < i; j++)
            troupe_free(v[j]);
        troupe_free(v);
        return err;
    }
    qsort(v, i, sizeof(*v), snap_cmp);
    for (size_t j = 0; j < i; j++)
        memcpy(&m[j], v[j] + strlen(v[j]) + 1, sizeof(int64_t));
    *xids = v;
    *ms = m;
    *n = i;
    return TROUPE_OK;
}

static bool
tab_holds(const txa_tab *tb, const void *key, size_t klen)
{
    for (size_t i = 0; i < tb->n; i++)
        if (troupe_key_cmp(tb->keys[i].key, tb->keys[i].klen, key, klen) == 0)
            return true;
    for (size_t i = 0; i < tb->nranges; i++) {
        const ttxn_range *g = &tb->ranges[i];
        if ((g->start == NULL ||
             troupe_key_cmp(g->start, g->slen, key, klen) <= 0) &&
            (g->end == NULL || troupe_key_cmp(key, klen, g->end, g->elen) < 0))
            return true;
    }
    return false;
}

bool
troupe__xa_holder(troupe_tables *t, const char *table, const void *key,
                  size_t klen, char out[TROUPE__XA_XID_MAX + 1])
{
    bool found = false;
    pthread_mutex_lock(&t->mu);
    for (txa_entry *e = t->xa.entries; e != NULL && !found; e = e->next)
        for (size_t i = 0; i < e->rec.ntabs && !found; i++)
            if (strcmp(e->rec.tabs[i].name, table) == 0 &&
                tab_holds(&e->rec.tabs[i], key, klen)) {
                memcpy(out, e->rec.xid, e->rec.xlen);
                out[e->rec.xlen] = '\0';
                found = true;
            }
    pthread_mutex_unlock(&t->mu);
    return found;
}

troupe_db *
troupe__xa_db(troupe_tables *t)
{
    return t->db;
}

troupe_cf *
troupe__xa_meta(troupe_tables *t)
{
    return t->meta;
}

/* ---- markers ----------------------------------------------------------- */

int
troupe__xa_marker(troupe_tables *t, const void *xid, size_t len)
{
    int out = 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->xa.nmarks; i++)
        if (t->xa.marks[i].len == len &&
            memcmp(t->xa.marks[i].xid, xid, len) == 0)
            out = t->xa.marks[i].outcome;
    pthread_mutex_unlock(&t->mu);
    return out;
}

static troupe_err
mark_pack(troupe_packer *p, int outcome, int64_t ms, uint64_t seq)
{
    troupe_pack_init(p);
    troupe_pack_array(p, 4);
    troupe_pack_uint(p, TROUPE__XA_FORMAT);
    troupe_pack_uint(p, (uint64_t)outcome);
    troupe_pack_int(p, ms);
    troupe_pack_uint(p, seq);
    return p->err;
}

troupe_err
troupe__xa_mark_batch(troupe_tables *t, troupe_batch *b, const void *xid,
                      size_t len, int outcome, int64_t now_ms)
{
    troupe_key_writer w;
    troupe_packer p;
    const uint8_t *k;
    size_t kl, vl;
    pthread_mutex_lock(&t->mu);
    uint64_t seq = t->xa.mark_seq + 1;
    bool drop = t->xa.nmarks >= TROUPE__XA_MARKS_MAX;
    txa_mark oldest = drop ? t->xa.marks[0] : (txa_mark){0};
    pthread_mutex_unlock(&t->mu);
    troupe_err e = mark_pack(&p, outcome, now_ms, seq);
    troupe__xa_key(&w, "xa-done", xid, len);
    if (e == TROUPE_OK)
        e = troupe_key_writer_finish(&w, &k, &kl);
    const void *v = troupe_pack_data(&p, &vl);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, t->meta, k, kl, v, vl);
    troupe_key_writer_fini(&w);
    troupe_pack_fini(&p);
    if (e == TROUPE_OK && drop) {
        troupe__xa_key(&w, "xa-done", oldest.xid, oldest.len);
        e = troupe_key_writer_finish(&w, &k, &kl);
        if (e == TROUPE_OK)
            e = troupe_batch_delete(b, t->meta, k, kl);
        troupe_key_writer_fini(&w);
    }
    return e;
}

/* Appends a marker to the in-memory list (dropping the oldest beyond the
 * bound). Called with mu held. */
static void
mark_add(troupe_tables *t, const void *xid, size_t len, int outcome,
         uint64_t seq)
{
    if (t->xa.nmarks >= TROUPE__XA_MARKS_MAX) {
        memmove(&t->xa.marks[0], &t->xa.marks[1],
                (t->xa.nmarks - 1) * sizeof(t->xa.marks[0]));
        t->xa.nmarks--;
    }
    txa_mark *m = &t->xa.marks[t->xa.nmarks++];
    memcpy(m->xid, xid, len);
    m->len = len;
    m->outcome = outcome;
    m->seq = seq;
    if (seq > t->xa.mark_seq)
        t->xa.mark_seq = seq;
}

void
troupe__xa_marked(troupe_tables *t, const void *xid, size_t len, int outcome,
                  int64_t now_ms)
{
    (void)now_ms;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->xa.nmarks; i++)
        if (t->xa.marks[i].len == len &&
            memcmp(t->xa.marks[i].xid, xid, len) == 0) {
            memmove(&t->xa.marks[i], &t->xa.marks[i + 1],
                    (t->xa.nmarks - i - 1) * sizeof(t->xa.marks[0]));
            t->xa.nmarks--;
            break;
        }
    if (t->xa.marks != NULL)
        mark_add(t, xid, len, outcome, t->xa.mark_seq + 1);
    pthread_mutex_unlock(&t->mu);
}

static int
mark_cmp(const void *a, const void *b)
{
    const txa_mark *x = a, *y = b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* ---- open: markers and records ---------------------------------------- */

/* The xid of a meta key (kind, xid): ECORRUPT unless it is exactly that
 * with a valid xid. */
static troupe_err
key_xid(const troupe_kv *kv, const char *kind, char *buf, size_t *len)
{
    troupe_key_reader kr;
    troupe_key_item a, b, c;
    troupe_key_reader_init(&kr, kv->key, kv->key_len);
    bool ok =
        troupe_key_read(&kr, &a) == TROUPE_OK && a.type == TROUPE_KEY_STRING &&
        a.v.s.len == strlen(kind) && memcmp(a.v.s.ptr, kind, a.v.s.len) == 0 &&
        troupe_key_read(&kr, &b) == TROUPE_OK && b.type == TROUPE_KEY_STRING &&
        troupe__xa_xid_valid(b.v.s.ptr, b.v.s.len);
    if (ok) {
        memcpy(buf, b.v.s.ptr, b.v.s.len);
        buf[b.v.s.len] = '\0';
        *len = b.v.s.len;
        ok = troupe_key_read(&kr, &c) == TROUPE_ENOENT;
    }
    troupe_key_reader_fini(&kr);
    return ok ? TROUPE_OK : TROUPE_ECORRUPT;
}

/* Deletes the stored markers v[0..n) (synced). Blocks. */
static troupe_err
marks_trim(troupe_tables *t, const txa_mark *v, size_t n)
{
    troupe_batch *b = NULL;
    troupe_err e = troupe_batch_create(&b);
    for (size_t i = 0; e == TROUPE_OK && i < n; i++) {
        troupe_key_writer w;
        const uint8_t *k;
        size_t kl;
        troupe__xa_key(&w, "xa-done", v[i].xid, v[i].len);
        e = troupe_key_writer_finish(&w, &k, &kl);
        if (e == TROUPE_OK)
            e = troupe_batch_delete(b, t->meta, k, kl);
        troupe_key_writer_fini(&w);
    }
    if (e == TROUPE_OK)
        e = troupe_db_write(t->db, b, TROUPE_SYNC_ON);
    troupe_batch_destroy(b);
    return e;
}

/* The stored markers, newest TROUPE__XA_MARKS_MAX kept in memory, oldest
 * first. Two resolutions that race past the bound may each delete the
 * same oldest marker and leave one more stored: the surplus, the oldest
 * by seq, is deleted here. */
static troupe_err
load_marks(troupe_tables *t)
{
    txa_mark *v = NULL;
    size_t n = 0, cap = 0;
    troupe_key_writer w;
    troupe_range rg;
    troupe_iter *it = NULL;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "xa-done", 7);
    troupe_err e = troupe_key_writer_range(&w, &rg);
    if (e == TROUPE_OK)
        e = troupe_iter_create(t->db, t->meta, NULL, &rg, NULL, 0, false, &it);
    troupe_kv kv;
    while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        char xid[TROUPE__XA_XID_MAX + 1];
        size_t xl = 0;
        troupe_reader rd;
        uint64_t fmt = 0, outcome = 0, seq = 0;
        int64_t ms = 0;
        if (key_xid(&kv, "xa-done", xid, &xl) != TROUPE_OK) {
            e = troupe__errf(TROUPE_ECORRUPT,
                             "xa: a resolved marker's key is malformed");
            break;
        }
        troupe_reader_init(&rd, kv.val, kv.val_len);
        troupe_read_array_n(&rd, 4);
        troupe_read_uint(&rd, &fmt);
        troupe_read_uint(&rd, &outcome);
        troupe_read_int(&rd, &ms);
        troupe_read_uint(&rd, &seq);
        if (troupe_read_end(&rd) != TROUPE_OK || fmt != TROUPE__XA_FORMAT ||
            (outcome != TROUPE__XA_COMMITTED &&
             outcome != TROUPE__XA_ROLLED_BACK) ||
            seq == 0) {
            e = troupe__errf(TROUPE_ECORRUPT,
                             "xa: the resolved marker of xid \"%s\" does not "
                             "decode",
                             xid);
            break;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            txa_mark *nv = troupe_realloc(v, nc * sizeof(*nv));
            if (nv == NULL) {
                e = TROUPE_ENOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        txa_mark *m = &v[n++];
        memcpy(m->xid, xid, xl);
        m->len = xl;
        m->outcome = (int)outcome;
        m->seq = seq;
    }
    troupe_iter_destroy(it);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_ENOENT)
        e = TROUPE_OK;
    if (e == TROUPE_OK)
        t->xa.marks = troupe_calloc(TROUPE__XA_MARKS_MAX, sizeof(*v));
    if (e == TROUPE_OK && t->xa.marks == NULL)
        e = TROUPE_ENOMEM;
    size_t cut = n > TROUPE__XA_MARKS_MAX ? n - TROUPE__XA_MARKS_MAX : 0;
    if (e == TROUPE_OK && n > 0) {
        qsort(v, n, sizeof(*v), mark_cmp);
        if (cut > 0)
            e = marks_trim(t, v, cut);
    }
    if (e == TROUPE_OK) {
        t->xa.nmarks = n - cut;
        if (n > 0) /* v is NULL when no marker is stored */
            memcpy(t->xa.marks, v + cut, t->xa.nmarks * sizeof(*v));
        t->xa.mark_seq = n ? v[n - 1].seq : 0;
    }
    troupe_free(v);
    return e;
}

static void
on_reheld(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    (void)rt;
    (void)reply;
    troupe__waiter_release(arg, err, NULL);
}

/* Prepares table part tb of e again at actor a, and waits for it. */
static troupe_err
rehold_tab(troupe_tables *t, txa_entry *e, const txa_tab *tb, troupe_addr a)
{
    ttxn_prep *p = troupe_calloc(1, sizeof(*p) + tb->n * sizeof(ttxn_key) +
                                        tb->nranges * sizeof(ttxn_range));
    if (p == NULL)
        return TROUPE_ENOMEM;
    p->keys = (ttxn_key *)(p + 1);
    p->ranges = (ttxn_range *)&p->keys[tb->n];
    /* the keys and documents point into e->val, which outlives the
     * prepare (the actor copies what it keeps) */
    memcpy(p->keys, tb->keys, tb->n * sizeof(ttxn_key));
    memcpy(p->ranges, tb->ranges, tb->nranges * sizeof(ttxn_range));
    p->n = tb->n;
    p->nranges = tb->nranges;
    p->seq0 = troupe__vers_now(&t->vers);
    p->sh = troupe__ttxn_retain(e->sh);
    troupe_msg *m = NULL;
    troupe_err err = troupe_msg_create(&m, TROUPE__PART_PREPARE, NULL, 0);
    if (err != TROUPE_OK) {
        troupe__ttxn_prep_free(p);
        return err;
    }
    m->ptr = p;
    m->ptr_drop = troupe__ttxn_prep_free;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    err = troupe_runtime_ask(t->rt, a, &m, t->timeout_ms, on_reheld, &w);
    return troupe__waiter_finish(&w, err, NULL);
}

/* One stored record: parsed, its parts held again, registered. */
static troupe_err
rehold(troupe_tables *t, const troupe_kv *kv)
{
    char xid[TROUPE__XA_XID_MAX + 1];
    size_t xl = 0;
    troupe_err e = key_xid(kv, "xa", xid, &xl);
    if (e != TROUPE_OK)
        return troupe__errf(TROUPE_ECORRUPT,
                            "xa: a prepared record's key is malformed");
    void *val = troupe_malloc(kv->val_len ? kv->val_len : 1);
    if (val == NULL)
        return TROUPE_ENOMEM;
    memcpy(val, kv->val, kv->val_len);
    ttxn_shared *sh = troupe_calloc(1, sizeof(*sh));
    if (sh == NULL) {
        troupe_free(val);
        return TROUPE_ENOMEM;
    }
    atomic_init(&sh->refs, 1);
    atomic_init(&sh->state, TTXN_OPEN);
    sh->xa = true;
    memcpy(sh->xid, xid, xl + 1);
    e = troupe_batch_create(&sh->batch);
    txa_entry *en = NULL;
    if (e == TROUPE_OK)
        e = troupe__xa_entry_new(t, val, kv->val_len, sh, &en);
    else
        troupe_free(val);
    troupe__ttxn_release(sh);
    if (e == TROUPE_OK && (en->rec.xlen != xl || memcmp(en->rec.xid, xid, xl)))
        e = TROUPE_ECORRUPT; /* the record is another xid's */
    if (e == TROUPE_ECORRUPT || e == TROUPE_ENOTABLE) {
        troupe__xa_entry_free(en);
        return troupe__errf(e,
                            e == TROUPE_ECORRUPT
                                ? "xa: the prepared record of xid \"%s\" does "
                                  "not decode"
                                : "xa: a table of prepared xid \"%s\" is gone",
                            xid);
    }
    if (e == TROUPE_OK)
        e = troupe__xa_register(t, en, false);
    if (e != TROUPE_OK) {
        troupe__xa_entry_free(en);
        return e;
    }
    size_t i = 0;
    for (; e == TROUPE_OK && i < en->rec.ntabs; i++)
        e = rehold_tab(t, en, &en->rec.tabs[i], en->addrs[i]);
    if (e != TROUPE_OK) {
        /* the parts held so far go with the actors: open fails */
        troupe__xa_unregister(t, en);
        troupe__xa_entry_free(en);
        return troupe__errf(e,
                            "xa: prepared xid \"%s\" could not be held again "
                            "(%s)",
                            xid, troupe_err_name(e));
    }
    /* the batch that prepare built is not the one that commits */
    troupe_batch_destroy(en->sh->batch);
    en->sh->batch = NULL;
    troupe__xa_set_state(t, en, TXA_PREPARED);
    return TROUPE_OK;
}

troupe_err
troupe__xa_open(troupe_tables *t)
{
    if (t->meta == NULL)
        return TROUPE_OK; /* a read-only db that never had a catalog */
    troupe_err e = load_marks(t);
    if (e != TROUPE_OK)
        return e;
    troupe_key_writer w;
    troupe_range rg;
    troupe_iter *it = NULL;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "xa", 2);
    e = troupe_key_writer_range(&w, &rg);
    if (e == TROUPE_OK)
        e = troupe_iter_create(t->db, t->meta, NULL, &rg, NULL, 0, false, &it);
    troupe_kv kv;
    bool first = true;
    while (e == TROUPE_OK && (e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        /* holding again waits for the table actors' answers */
        if (first &&
            (e = troupe__block_check("troupe_tables_open")) != TROUPE_OK)
            break;
        first = false;
        e = rehold(t, &kv);
    }
    troupe_iter_destroy(it);
    troupe_key_writer_fini(&w);
    return e == TROUPE_ENOENT ? TROUPE_OK : e;
}

void
troupe__xa_close(troupe_tables *t)
{
    while (t->xa.entries != NULL) {
        txa_entry *e = t->xa.entries;
        t->xa.entries = e->next;
        troupe__xa_entry_free(e);
    }
    troupe_free(t->xa.marks);
    t->xa.marks = NULL;
    t->xa.nmarks = 0;
}
