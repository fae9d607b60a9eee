/*
 * Key derivation: the index entries of one row for one index
 * (docs/data-model.md, "Sparse rules" and "Indexes"), the entry list it
 * fills (troupe_index_entries) and the layout of an entry key (values,
 * then bytes(pk): troupe_index_key_split, _pk, _pk_copy).
 *
 *
 * Derivation reads the document with a bounds-checked troupe_reader that
 * validates the whole map once; each field lookup then walks a copy of that
 * reader, so a hostile document can make derive fail with EPROTO but never
 * read outside its bytes. Every field yields a list of encoded key elements
 * (one per qualifying scalar, leaf array element or map entry: the path
 * rules below "derivation"); the keys are the cartesian product of those
 * lists, each followed by the tiebreaks of CASEFOLD fields and the
 * bytes(pk) element, then sorted and deduplicated. The product is capped
 * (TROUPE_INDEX_ROW_KEYS_MAX) because a document of a few kilobytes with
 * several arrays could otherwise ask for billions of keys.
 */
#include <stdlib.h>
#include <string.h>

#include "index_int.h"
#include "troupe/alloc.h"
#include "troupe/storage.h"

/* ---- entries ------------------------------------------------------------ */

void
troupe_index_entries_init(troupe_index_entries *e)
{
    if (e != NULL)
        memset(e, 0, sizeof(*e));
}

static void
entries_truncate(troupe_index_entries *e, size_t n)
{
    while (e->n > n) {
        e->n--;
        troupe_free(e->v[e->n].key);
        troupe_free(e->v[e->n].val);
    }
}

void
troupe_index_entries_fini(troupe_index_entries *e)
{
    if (e == NULL)
        return;
    entries_truncate(e, 0);
    troupe_free(e->v);
    memset(e, 0, sizeof(*e));
}

/* Appends key = values ‖ pk_enc (copied) and an optional value (copied);
 * the first cmp_len bytes of values are what a unique index compares. */
static troupe_err
entries_push(troupe_index_entries *e, const void *values, size_t values_len,
             size_t cmp_len, const void *pk_enc, size_t pk_enc_len,
             const void *val, size_t val_len)
{
    size_t klen = values_len + pk_enc_len;
    if (klen > TROUPE_KEY_MAX)
        return TROUPE_ETOOBIG;
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 8;
        troupe_index_entry *v = troupe_realloc(e->v, cap * sizeof(*v));
        if (v == NULL)
            return TROUPE_ENOMEM;
        e->v = v;
        e->cap = cap;
    }
    unsigned char *k = troupe_malloc(klen);
    unsigned char *vv = NULL;
    if (k == NULL)
        return TROUPE_ENOMEM;
    if (val != NULL) {
        if ((vv = troupe_malloc(val_len > 0 ? val_len : 1)) == NULL) {
            troupe_free(k);
            return TROUPE_ENOMEM;
        }
        memcpy(vv, val, val_len);
    }
    memcpy(k, values, values_len);
    memcpy(k + values_len, pk_enc, pk_enc_len);
    e->v[e->n++] = (troupe_index_entry){.key = k,
                                        .key_len = klen,
                                        .values_len = cmp_len,
                                        .val = vv,
                                        .val_len = vv ? val_len : 0};
    return TROUPE_OK;
}

/* Sort key: the entry key, then emission order, so that the first of
 * several entries with one key (a function emitting it twice) is kept. */
typedef struct sort_item {
    troupe_index_entry e;
    size_t order;
} sort_item;

static int
sort_cmp(const void *pa, const void *pb)
{
    const sort_item *a = pa, *b = pb;
    int c = troupe_key_cmp(a->e.key, a->e.key_len, b->e.key, b->e.key_len);
    if (c != 0)
        return c;
    return a->order < b->order ? -1 : a->order > b->order;
}

static troupe_err
sort_dedup(troupe_index_entries *e, size_t from)
{
    size_t n = e->n - from;
    if (n < 2)
        return TROUPE_OK;
    sort_item *s = troupe_malloc(n * sizeof(*s));
    if (s == NULL)
        return TROUPE_ENOMEM;
    for (size_t i = 0; i < n; i++)
        s[i] = (sort_item){.e = e->v[from + i], .order = i};
    qsort(s, n, sizeof(*s), sort_cmp);
    size_t out = from;
    for (size_t i = 0; i < n; i++) {
        if (out > from &&
            troupe_key_cmp(e->v[out - 1].key, e->v[out - 1].key_len, s[i].e.key,
                           s[i].e.key_len) == 0) {
            troupe_free(s[i].e.key);
            troupe_free(s[i].e.val);
            continue;
        }
        e->v[out++] = s[i].e;
    }
    e->n = out;
    troupe_free(s);
    return TROUPE_OK;
}

/* ---- derivation --------------------------------------------------------- */

/*
 * Path rules (Tito's). A field's path walks the document from the root:
 * a map is looked up by the segment (the first matching string key), an
 * array on the way applies the rest of the path to each element (arrays
 * of arrays too), anything else ends the walk (missing). What the path
 * reaches is the field's value: a scalar gives one element (sparse rules:
 * only a non-empty value of the declared type), an array gives one
 * element per leaf element however deeply nested, and a map gives one
 * element per entry with a string key whose value qualifies, the element
 * being the nested tuple (key, value) so that the entry's key is part of
 * the indexed value (a map inside such an entry is another type). The
 * walk is bounded by the document (each value is visited at most once per
 * field) and its depth by the reader's nesting limit.
 */

/* Encoded key elements of one field: one per qualifying value, with the
 * original string of a CASEFOLD field beside each (its tiebreak). The
 * common field, one short value, lives in the inline buffers: a derive
 * costs no allocation per field then (writes derive on the table actor's
 * thread, so this is every indexed write's path). */
#define ELEMS_INL_BYTES 64
#define ELEMS_INL_N 4
typedef struct elems {
    unsigned char *bytes; /* element i is bytes[off[i], off[i + 1]) */
    size_t len, cap;
    size_t *off;
    unsigned char *tb; /* CASEFOLD only: tiebreak i is tb[toff[i], ..) */
    size_t tblen, tbcap;
    size_t *toff; /* CASEFOLD only */
    size_t n, ncap;
    unsigned char bytes_inl[ELEMS_INL_BYTES];
    size_t off_inl[ELEMS_INL_N + 1];
} elems;

/* Room for `need` bytes at *p (cap *cap), which may be the inline buffer
 * `inl` (never freed or realloc'ed). */
static troupe_err
grow(unsigned char **p, size_t *cap, size_t need, unsigned char *inl)
{
    if (need <= *cap)
        return TROUPE_OK;
    size_t c = *cap ? *cap * 2 : 256;
    while (c < need)
        c *= 2;
    bool in = inl != NULL && *p == inl;
    unsigned char *q = in ? troupe_malloc(c) : troupe_realloc(*p, c);
    if (q == NULL)
        return TROUPE_ENOMEM;
    if (in)
        memcpy(q, inl, *cap);
    *p = q;
    *cap = c;
    return TROUPE_OK;
}

static void
elems_init(elems *el)
{
    el->bytes = el->bytes_inl;
    el->cap = ELEMS_INL_BYTES;
    el->off = el->off_inl;
    el->ncap = ELEMS_INL_N + 1;
}

/* Appends one element `v` and its tiebreak `t` (NULL: none). */
static troupe_err
elems_push(elems *el, const uint8_t *v, size_t vlen, const uint8_t *t,
           size_t tlen)
{
    if (el->n == TROUPE_INDEX_ROW_KEYS_MAX)
        return TROUPE_ETOOBIG;
    troupe_err e = grow(&el->bytes, &el->cap, el->len + vlen, el->bytes_inl);
    if (e == TROUPE_OK && t != NULL)
        e = grow(&el->tb, &el->tbcap, el->tblen + tlen, NULL);
    if (e == TROUPE_OK && el->n + 2 > el->ncap) {
        size_t nc = el->ncap * 2;
        size_t *o = el->off == el->off_inl
                        ? troupe_malloc(nc * sizeof(*o))
                        : troupe_realloc(el->off, nc * sizeof(*o));
        if (o == NULL)
            return TROUPE_ENOMEM;
        if (el->off == el->off_inl)
            memcpy(o, el->off_inl, sizeof(el->off_inl));
        el->off = o;
        el->ncap = nc;
        if (el->toff != NULL) {
            size_t *to = troupe_realloc(el->toff, nc * sizeof(*to));
            if (to == NULL)
                return TROUPE_ENOMEM;
            el->toff = to;
        }
    }
    if (e == TROUPE_OK && t != NULL && el->toff == NULL &&
        (el->toff = troupe_calloc(el->ncap, sizeof(*el->toff))) == NULL)
        e = TROUPE_ENOMEM;
    if (e != TROUPE_OK)
        return e;
    if (el->n == 0)
        el->off[0] = 0;
    memcpy(el->bytes + el->len, v, vlen);
    el->len += vlen;
    if (t != NULL) {
        memcpy(el->tb + el->tblen, t, tlen);
        el->tblen += tlen;
    }
    el->n++;
    el->off[el->n] = el->len;
    if (el->toff != NULL)
        el->toff[el->n] = el->tblen;
    return TROUPE_OK;
}

static void
elems_fini(elems *el)
{
    if (el->bytes != el->bytes_inl)
        troupe_free(el->bytes);
    if (el->off != el->off_inl)
        troupe_free(el->off);
    troupe_free(el->tb);
    troupe_free(el->toff);
}

typedef struct walk {
    const index_field *f;
    elems *el;
    troupe_key_writer w;  /* scratch: one element */
    troupe_key_writer tw; /* scratch: its tiebreak */
} walk;

/* One scalar at r (consumed) under map key mk (NULL: none). */
static troupe_err
walk_scalar(walk *wk, troupe_reader *r, const char *mk, size_t mkl)
{
    troupe_key_writer *w = &wk->w;
    troupe_key_writer_reset(w);
    troupe_err e = TROUPE_OK;
    if (mk != NULL) {
        e = troupe_key_begin_tuple(w);
        if (e == TROUPE_OK)
            e = troupe_key_put_string(w, mk, mkl);
        if (e != TROUPE_OK)
            return e;
    }
    bool fold = wk->f->type == TROUPE_FIELD_STRING_CASEFOLD;
    const char *orig = NULL;
    size_t olen = 0;
    int rc = 0;
    if (fold && troupe_read_peek(r) == TROUPE_MP_STR) {
        if ((e = troupe_read_str(r, SIZE_MAX, &orig, &olen)) != TROUPE_OK)
            return e;
        if (olen > 0)
            rc = (e = troupe__index_put_folded(w, orig, olen)) == TROUPE_OK
                     ? 1
                     : -(int)e;
    } else {
        rc = troupe__index_put_value(r, wk->f->type, w);
    }
    if (rc <= 0)
        return rc < 0 ? (troupe_err)-rc : TROUPE_OK;
    if (mk != NULL && (e = troupe_key_end_tuple(w)) != TROUPE_OK)
        return e;
    const uint8_t *k, *t = NULL;
    size_t kl, tl = 0;
    if ((e = troupe_key_writer_finish(w, &k, &kl)) != TROUPE_OK)
        return e;
    if (fold) { /* the original string: the tiebreak */
        troupe_key_writer_reset(&wk->tw);
        troupe_key_put_string(&wk->tw, orig, olen);
        if ((e = troupe_key_writer_finish(&wk->tw, &t, &tl)) != TROUPE_OK)
            return e;
    }
    return elems_push(wk->el, k, kl, t, tl);
}

/* The field's value at r (consumed): scalar, array (flattened) or map
 * (one element per entry); mk is the map key it is under (NULL: none). */
static troupe_err
walk_leaf(walk *wk, troupe_reader *r, const char *mk, size_t mkl)
{
    troupe_mp_type t = troupe_read_peek(r);
    uint32_t n = 0;
    troupe_err e = TROUPE_OK;
    if (t == TROUPE_MP_ARRAY) {
        if ((e = troupe_read_array(r, &n)) != TROUPE_OK)
            return e;
        for (uint32_t i = 0; i < n && e == TROUPE_OK; i++)
            e = walk_leaf(wk, r, mk, mkl);
        return e;
    }
    if (t == TROUPE_MP_MAP && mk == NULL) {
        if ((e = troupe_read_map(r, &n)) != TROUPE_OK)
            return e;
        for (uint32_t i = 0; i < n && e == TROUPE_OK; i++) {
            if (troupe_read_peek(r) != TROUPE_MP_STR) {
                e = troupe_read_skip(r);
                if (e == TROUPE_OK)
                    e = troupe_read_skip(r);
                continue;
            }
            const char *k;
            size_t kl;
            e = troupe_read_str(r, SIZE_MAX, &k, &kl);
            if (e == TROUPE_OK)
                e = walk_leaf(wk, r, k, kl);
        }
        return e;
    }
    if (t == TROUPE_MP_MAP)
        return troupe_read_skip(r); /* a map in a map entry: no element */
    return walk_scalar(wk, r, mk, mkl);
}

/* The path from `seg` on, applied to the value at r. `consume`: leave r
 * past that value (an array's elements are walked with one reader);
 * otherwise a map lookup stops at its match, as reading on would cost
 * every write a walk of the rest of the document. */
static troupe_err
walk_path(walk *wk, troupe_reader *r, const char *seg, bool consume)
{
    if (seg == NULL)
        return walk_leaf(wk, r, NULL, 0); /* always consumes */
    troupe_mp_type t = troupe_read_peek(r);
    uint32_t n = 0;
    troupe_err e = TROUPE_OK;
    if (t == TROUPE_MP_ARRAY) {
        if ((e = troupe_read_array(r, &n)) != TROUPE_OK)
            return e;
        for (uint32_t i = 0; i < n && e == TROUPE_OK; i++)
            e = walk_path(wk, r, seg, true);
        return e;
    }
    if (t != TROUPE_MP_MAP)
        return consume ? troupe_read_skip(r) : TROUPE_OK; /* missing */
    const char *dot = strchr(seg, '.');
    size_t slen = dot != NULL ? (size_t)(dot - seg) : strlen(seg);
    if ((e = troupe_read_map(r, &n)) != TROUPE_OK)
        return e;
    bool hit = false;
    for (uint32_t i = 0; i < n && e == TROUPE_OK; i++) {
        bool match = false;
        if (!hit && troupe_read_peek(r) == TROUPE_MP_STR) {
            const char *k;
            size_t kl;
            e = troupe_read_str(r, SIZE_MAX, &k, &kl);
            match = e == TROUPE_OK && kl == slen && memcmp(k, seg, slen) == 0;
        } else {
            e = troupe_read_skip(r);
        }
        if (e != TROUPE_OK)
            break;
        if (match) { /* the first matching key wins */
            hit = true;
            e = walk_path(wk, r, dot != NULL ? dot + 1 : NULL, consume);
            if (!consume)
                break;
        } else {
            e = troupe_read_skip(r);
        }
    }
    return e;
}

/* The elements of field f; wk's scratch writers serve every field. */
static troupe_err
elems_collect(const troupe_reader *doc, const index_field *f, elems *el,
              walk *wk)
{
    wk->f = f;
    wk->el = el;
    troupe_reader r = *doc;
    el->n = el->len = el->tblen = 0;
    return walk_path(wk, &r, f->path, false);
}

/* ---- the condition ------------------------------------------------------ */

/* Positions *r (a copy of the document's reader, at the map) on the value
 * at `path`; false when any segment is missing or not inside a map. The
 * first matching key of a map wins (a map with duplicate keys is legal
 * msgpack; choosing one is what keeps derivation deterministic). */
static bool
find_path(const troupe_reader *doc, const char *path, troupe_reader *out)
{
    troupe_reader r = *doc;
    const char *seg = path;
    for (;;) {
        const char *dot = strchr(seg, '.');
        size_t slen = dot != NULL ? (size_t)(dot - seg) : strlen(seg);
        uint32_t n;
        if (troupe_read_peek(&r) != TROUPE_MP_MAP ||
            troupe_read_map(&r, &n) != TROUPE_OK)
            return false;
        bool hit = false;
        for (uint32_t i = 0; i < n; i++) {
            if (troupe_read_peek(&r) == TROUPE_MP_STR) {
                const char *k;
                size_t klen;
                if (troupe_read_str(&r, SIZE_MAX, &k, &klen) != TROUPE_OK)
                    return false;
                if (klen == slen && memcmp(k, seg, slen) == 0) {
                    hit = true;
                    break;
                }
            } else if (troupe_read_skip(&r) != TROUPE_OK) {
                return false;
            }
            if (troupe_read_skip(&r) != TROUPE_OK)
                return false;
        }
        if (!hit)
            return false;
        if (dot == NULL) {
            *out = r;
            return true;
        }
        seg = dot + 1;
    }
}

/* Kind of a scalar for condition equality: ints of either sign are one
 * kind, float32/64 another (int 1 never equals float 1.0). */
static bool
scalar_equal(troupe_reader *a, troupe_reader *b)
{
    troupe_mp_type ta = troupe_read_peek(a), tb = troupe_read_peek(b);
    bool ia = ta == TROUPE_MP_UINT || ta == TROUPE_MP_INT;
    bool ib = tb == TROUPE_MP_UINT || tb == TROUPE_MP_INT;
    if (ia && ib) {
        if (ta != tb)
            return false; /* negative vs non-negative */
        if (ta == TROUPE_MP_UINT) {
            uint64_t x, y;
            return troupe_read_uint(a, &x) == TROUPE_OK &&
                   troupe_read_uint(b, &y) == TROUPE_OK && x == y;
        }
        int64_t x, y;
        return troupe_read_int(a, &x) == TROUPE_OK &&
               troupe_read_int(b, &y) == TROUPE_OK && x == y;
    }
    if (ta != tb)
        return false;
    switch (ta) {
    case TROUPE_MP_FLOAT: {
        double x, y;
        return troupe_read_double(a, &x) == TROUPE_OK &&
               troupe_read_double(b, &y) == TROUPE_OK && x == y;
    }
    case TROUPE_MP_BOOL: {
        bool x, y;
        return troupe_read_bool(a, &x) == TROUPE_OK &&
               troupe_read_bool(b, &y) == TROUPE_OK && x == y;
    }
    case TROUPE_MP_STR: {
        const char *x, *y;
        size_t nx, ny;
        return troupe_read_str(a, SIZE_MAX, &x, &nx) == TROUPE_OK &&
               troupe_read_str(b, SIZE_MAX, &y, &ny) == TROUPE_OK && nx == ny &&
               memcmp(x, y, nx) == 0;
    }
    case TROUPE_MP_BIN: {
        const void *x, *y;
        size_t nx, ny;
        return troupe_read_bin(a, SIZE_MAX, &x, &nx) == TROUPE_OK &&
               troupe_read_bin(b, SIZE_MAX, &y, &ny) == TROUPE_OK && nx == ny &&
               memcmp(x, y, nx) == 0;
    }
    default:
        return false;
    }
}

static bool
cond_holds(const troupe_index_def *d, const troupe_reader *doc)
{
    troupe_reader r;
    bool found = d->op != TROUPE_COND_NONE && find_path(doc, d->cond_path, &r);
    switch (d->op) {
    case TROUPE_COND_NONE:
        return true;
    case TROUPE_COND_EXISTS:
        return found && troupe_read_peek(&r) != TROUPE_MP_NIL;
    case TROUPE_COND_TRUE: {
        bool b = false;
        return found && troupe_read_peek(&r) == TROUPE_MP_BOOL &&
               troupe_read_bool(&r, &b) == TROUPE_OK && b;
    }
    case TROUPE_COND_EQ:
    case TROUPE_COND_NE: {
        bool eq = false;
        if (found) {
            troupe_reader v;
            if (troupe_reader_init(&v, d->cond_val, d->cond_val_len) ==
                TROUPE_OK)
                eq = scalar_equal(&r, &v);
        }
        return d->op == TROUPE_COND_EQ ? eq : !eq;
    }
    }
    return false;
}

/*
 * The keys are the cartesian product of the fields' elements (the last
 * field fastest), each key the elements in field order, then the original
 * strings of the CASEFOLD fields (the tiebreaks, in field order: after
 * every value, so that leading values stay a tuple prefix of the key and
 * a unique index compares the folded values alone), then bytes(pk).
 */
static troupe_err
derive_declared(const troupe_index_def *d, const troupe_reader *doc,
                const uint8_t *pk_enc, size_t pk_enc_len,
                troupe_index_entries *out)
{
    elems *el = troupe_calloc(d->n_fields, sizeof(*el));
    troupe_err e = TROUPE_OK;
    if (el == NULL)
        return TROUPE_ENOMEM;
    walk wk;
    troupe_key_writer_init(&wk.w);
    troupe_key_writer_init(&wk.tw);
    for (size_t i = 0; i < d->n_fields; i++)
        elems_init(&el[i]);
    size_t total = 1;
    for (size_t i = 0; i < d->n_fields && e == TROUPE_OK && total > 0; i++) {
        e = elems_collect(doc, &d->fields[i], &el[i], &wk);
        total *= el[i].n;
        if (total > TROUPE_INDEX_ROW_KEYS_MAX)
            e = TROUPE_ETOOBIG;
    }
    size_t idx[INDEX_FIELDS_MAX] = {0};
    size_t cap = 0;
    for (size_t i = 0; i < d->n_fields && e == TROUPE_OK; i++) {
        size_t widest = 0;
        for (size_t j = 0; j < el[i].n; j++) {
            size_t l = el[i].off[j + 1] - el[i].off[j];
            if (d->fields[i].type == TROUPE_FIELD_STRING_CASEFOLD)
                l += el[i].toff[j + 1] - el[i].toff[j];
            widest = l > widest ? l : widest;
        }
        cap += widest;
    }
    unsigned char *key = NULL;
    if (e == TROUPE_OK && total > 0 && (key = troupe_malloc(cap + 1)) == NULL)
        e = TROUPE_ENOMEM;
    for (size_t k = 0; e == TROUPE_OK && k < total; k++) {
        /* Complete encoded elements concatenate into a tuple encoding. */
        size_t len = 0;
        for (size_t i = 0; i < d->n_fields; i++) {
            size_t a = el[i].off[idx[i]], b = el[i].off[idx[i] + 1];
            memcpy(key + len, el[i].bytes + a, b - a);
            len += b - a;
        }
        size_t values = len;
        for (size_t i = 0; i < d->n_fields; i++) {
            if (d->fields[i].type != TROUPE_FIELD_STRING_CASEFOLD)
                continue;
            size_t a = el[i].toff[idx[i]], b = el[i].toff[idx[i] + 1];
            memcpy(key + len, el[i].tb + a, b - a);
            len += b - a;
        }
        e = entries_push(out, key, len, values, pk_enc, pk_enc_len, NULL, 0);
        /* odometer, last field fastest */
        for (size_t i = d->n_fields; i-- > 0;) {
            if (++idx[i] < el[i].n)
                break;
            idx[i] = 0;
        }
    }
    troupe_free(key);
    for (size_t i = 0; i < d->n_fields; i++)
        elems_fini(&el[i]);
    troupe_free(el);
    troupe_key_writer_fini(&wk.w);
    troupe_key_writer_fini(&wk.tw);
    return e;
}

typedef struct emit_ctx {
    troupe_index_entries *out;
    size_t first;
    const uint8_t *pk_enc;
    size_t pk_enc_len;
    troupe_err err; /* first failure, sticky: the function may ignore it */
} emit_ctx;

static troupe_err
emit_one(void *arg, const void *values, size_t values_len, const void *val,
         size_t val_len)
{
    emit_ctx *c = arg;
    troupe_err e = c->err;
    if (e != TROUPE_OK)
        return e;
    if (values == NULL || values_len == 0 ||
        troupe_key_validate(values, values_len) != TROUPE_OK)
        e = TROUPE_EINVAL;
    else if (val == NULL && val_len != 0)
        e = TROUPE_EINVAL;
    if (e == TROUPE_OK && val != NULL) {
        troupe_reader r;
        if (troupe_reader_init(&r, val, val_len) != TROUPE_OK)
            e = TROUPE_EINVAL;
    }
    if (e == TROUPE_OK && c->out->n - c->first >= TROUPE_INDEX_ROW_KEYS_MAX)
        e = TROUPE_ETOOBIG;
    if (e == TROUPE_OK)
        e = entries_push(c->out, values, values_len, values_len, c->pk_enc,
                         c->pk_enc_len, val, val_len);
    c->err = e;
    return e;
}

troupe_err
troupe_index_derive(const troupe_index_def *d, const troupe_index_fns *fns,
                    const void *doc, size_t doc_len, const void *pk,
                    size_t pk_len, troupe_index_entries *out)
{
    if (d == NULL || out == NULL || (doc == NULL && doc_len > 0) ||
        pk == NULL || pk_len == 0 || pk_len > TROUPE_KEY_MAX)
        return TROUPE_EINVAL;
    troupe_reader r;
    troupe_err e = troupe_reader_init(&r, doc, doc_len);
    if (e == TROUPE_EINVAL)
        e = TROUPE_EPROTO;
    if (e != TROUPE_OK)
        return e;
    if (troupe_read_peek(&r) != TROUPE_MP_MAP)
        return TROUPE_EPROTO;
    const fn_slot *fs = NULL;
    if (d->fn_name != NULL &&
        (fs = troupe__index_fns_find(fns, d->fn_name)) == NULL)
        return TROUPE_ENOENT;
    if (!cond_holds(d, &r))
        return TROUPE_OK;
    troupe_key_writer pw;
    troupe_key_writer_init(&pw);
    const uint8_t *pk_enc;
    size_t pk_enc_len;
    troupe_key_put_bytes(&pw, pk, pk_len);
    e = troupe_key_writer_finish(&pw, &pk_enc, &pk_enc_len);
    size_t first = out->n;
    if (e == TROUPE_OK && fs != NULL) {
        emit_ctx c = {.out = out,
                      .first = first,
                      .pk_enc = pk_enc,
                      .pk_enc_len = pk_enc_len};
        e = fs->fn(fs->ctx, doc, doc_len, pk, pk_len, emit_one, &c);
        if (e == TROUPE_OK)
            e = c.err;
    } else if (e == TROUPE_OK) {
        e = derive_declared(d, &r, pk_enc, pk_enc_len, out);
    }
    if (e == TROUPE_OK)
        e = sort_dedup(out, first);
    if (e != TROUPE_OK)
        entries_truncate(out, first);
    troupe_key_writer_fini(&pw);
    return e;
}

/* ---- keys ---------------------------------------------------------------- */

troupe_err
troupe_index_key_split(const void *key, size_t key_len, size_t *values_len,
                       bool *pk_escaped)
{
    if (key == NULL || key_len == 0 || values_len == NULL)
        return TROUPE_EINVAL;
    troupe_key_reader r;
    troupe_key_reader_init(&r, key, key_len);
    troupe_key_item it;
    troupe_err e;
    unsigned depth = 0;
    size_t top = 0, last_len = 0;
    size_t last_zeros = 0;
    bool last_bytes = false;
    while ((e = troupe_key_read(&r, &it)) == TROUPE_OK ||
           (e == TROUPE_ENOENT && depth > 0)) {
        if (e == TROUPE_ENOENT) {
            depth--;
            continue;
        }
        if (depth == 0) {
            top++;
            last_bytes = it.type == TROUPE_KEY_BYTES;
            if (last_bytes) {
                last_len = it.v.s.len;
                last_zeros = 0;
                for (size_t i = 0; i < it.v.s.len; i++)
                    last_zeros += it.v.s.ptr[i] == 0;
            }
        }
        if (it.type == TROUPE_KEY_TUPLE)
            depth++;
    }
    troupe_key_reader_fini(&r);
    if (e != TROUPE_ENOENT || top < 2 || !last_bytes || last_len == 0)
        return TROUPE_EPROTO;
    *values_len = key_len - (last_len + last_zeros + 2);
    if (pk_escaped != NULL)
        *pk_escaped = last_zeros > 0;
    return TROUPE_OK;
}

troupe_err
troupe_index_key_pk(const void *key, size_t key_len, const void **pk,
                    size_t *pk_len)
{
    if (pk == NULL || pk_len == NULL)
        return TROUPE_EINVAL;
    size_t vlen;
    bool esc;
    troupe_err e = troupe_index_key_split(key, key_len, &vlen, &esc);
    if (e != TROUPE_OK)
        return e;
    if (esc)
        return TROUPE_ENOTSUP;
    *pk = (const unsigned char *)key + vlen + 1;
    *pk_len = key_len - vlen - 2;
    return TROUPE_OK;
}

troupe_err
troupe_index_key_pk_copy(const void *key, size_t key_len, void **pk,
                         size_t *pk_len)
{
    if (pk == NULL || pk_len == NULL)
        return TROUPE_EINVAL;
    *pk = NULL;
    *pk_len = 0;
    size_t vlen;
    troupe_err e = troupe_index_key_split(key, key_len, &vlen, NULL);
    if (e != TROUPE_OK)
        return e;
    troupe_key_reader r;
    troupe_key_item it;
    troupe_key_reader_init(&r, (const uint8_t *)key + vlen, key_len - vlen);
    e = troupe_key_read(&r, &it);
    if (e == TROUPE_OK) {
        if ((*pk = troupe_malloc(it.v.s.len)) == NULL)
            e = TROUPE_ENOMEM;
        else {
            memcpy(*pk, it.v.s.ptr, it.v.s.len);
            *pk_len = it.v.s.len;
        }
    }
    troupe_key_reader_fini(&r);
    return e;
}
