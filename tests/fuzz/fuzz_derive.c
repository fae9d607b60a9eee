/*
 * libFuzzer target: index key derivation over hostile documents
 * (troupe_index_derive, actors/index/src/derive.c), which every write runs
 * on the document it stores, and the CASEFOLD collation.
 *
 * Input: a spec (unique flag, 0..4 fields each with a type and a path,
 * or a function index; an optional condition with its value), a primary
 * key, then the document. Paths are built from a small alphabet so that
 * they meet the document's keys; any spec the validator refuses is
 * skipped. The function index's function emits, for each top-level entry
 * of the document, the entry's value bytes as a tuple key (valid or not)
 * and the entry's value as the stored value.
 *
 * Properties: EPROTO exactly when the document is not one well-formed
 * map; otherwise OK, ETOOBIG, ENOMEM (or EINVAL when the function emitted
 * a malformed key); derivation is deterministic; the entries are sorted
 * strictly (no duplicates); each key is a well-formed tuple key of at
 * most TROUPE_KEY_MAX bytes that splits into values then this primary key
 * (which comes back unchanged), and its compared prefix (values_len) lies
 * within the values part, all of it unless a CASEFOLD field adds a
 * tiebreak; each stored value is one msgpack object. CASEFOLD: a fold
 * fits troupe__index_casefold_max, and folding a fold changes nothing.
 */
#include <string.h>

#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/index.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

static troupe_index_fns *fns;

/* Emits each top-level entry's value bytes as a key. */
static troupe_err
emit_values(void *ctx, const void *doc, size_t doc_len, const void *pk,
            size_t pk_len, troupe_index_emit_fn emit, void *emit_ctx)
{
    (void)ctx;
    (void)pk;
    (void)pk_len;
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, doc, doc_len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const void *v;
        size_t vl;
        troupe_read_skip(&r);
        if (troupe_read_raw(&r, &v, &vl) != TROUPE_OK)
            break;
        troupe_err e = emit(emit_ctx, v, vl, v, vl);
        if (e != TROUPE_OK)
            return e;
    }
    return TROUPE_OK;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (troupe_index_fns_create(&fns) != TROUPE_OK ||
        troupe_index_register_fn(fns, "f", emit_values, NULL) != TROUPE_OK)
        fz_fail(__FILE__, __LINE__, "fns", "cannot register");
    return 0;
}

/* A path from the alphabet: each byte is a segment ("a".."d", "0", "1",
 * "k") or a dot; at most 8 bytes. */
static void
make_path(fz_in *in, char *buf, size_t cap)
{
    static const char *const seg[] = {"a", "b", "c", "d", "0", "1", "k", "."};
    size_t n = 1 + fz_u8(in) % 8, at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = seg[fz_u8(in) % 8];
        size_t l = strlen(s);
        if (at + l + 1 > cap)
            break;
        memcpy(buf + at, s, l);
        at += l;
    }
    buf[at] = '\0';
}

static void
check_entries(const troupe_index_entries *out, const troupe_index_def *d,
              const uint8_t *pk, size_t pkl)
{
    bool folded = false;
    FZ_CHECK(out->n <= TROUPE_INDEX_ROW_KEYS_MAX, "%zu entries", out->n);
    (void)d;
    for (size_t i = 0; i < out->n; i++) {
        const troupe_index_entry *en = &out->v[i];
        FZ_CHECK(en->key_len > 0 && en->key_len <= TROUPE_KEY_MAX,
                 "key of %zu bytes", en->key_len);
        FZ_ERR_IN(troupe_key_validate(en->key, en->key_len), TROUPE_OK);
        if (i > 0) {
            const troupe_index_entry *p = &out->v[i - 1];
            size_t m = p->key_len < en->key_len ? p->key_len : en->key_len;
            int c = memcmp(p->key, en->key, m);
            FZ_CHECK(c < 0 || (c == 0 && p->key_len < en->key_len),
                     "entries %zu and %zu out of order or repeated", i - 1, i);
        }
        size_t vl = 0;
        bool esc = false;
        FZ_ERR_IN(troupe_index_key_split(en->key, en->key_len, &vl, &esc),
                  TROUPE_OK);
        FZ_CHECK(en->values_len <= vl, "compared prefix %zu past values %zu",
                 en->values_len, vl);
        folded = folded || en->values_len < vl;
        void *got = NULL;
        size_t gl = 0;
        FZ_ERR_IN(troupe_index_key_pk_copy(en->key, en->key_len, &got, &gl),
                  TROUPE_OK);
        FZ_CHECK(fz_same(got, gl, pk, pkl), "primary key changed");
        FZ_CHECK(esc == (memchr(pk, 0, pkl) != NULL), "escape flag wrong");
        troupe_free(got);
        if (en->val != NULL) {
            troupe_reader r;
            FZ_ERR_IN(troupe_reader_init(&r, en->val, en->val_len), TROUPE_OK);
        }
    }
    (void)folded;
}

static void
casefold(const uint8_t *s, size_t n)
{
    size_t max = troupe__index_casefold_max(n);
    unsigned char *a = troupe_malloc(max + 1);
    size_t an = troupe__index_casefold(s, n, a);
    FZ_CHECK(an <= max, "fold of %zu bytes is %zu > %zu", n, an, max);
    unsigned char *b = troupe_malloc(troupe__index_casefold_max(an) + 1);
    size_t bn = troupe__index_casefold(a, an, b);
    FZ_CHECK(fz_same(a, an, b, bn), "folding a fold changed it");
    troupe_free(a);
    troupe_free(b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t mode = fz_u8(&in);
    if (mode == 0xff) {
        casefold(in.p, in.n);
        return 0;
    }
    char paths[4][64], cpath[64];
    troupe_index_field fields[4];
    troupe_index_spec spec = {.name = "ix", .unique = (mode & 1) != 0};
    size_t nf = (mode >> 1) % 5;
    for (size_t i = 0; i < nf; i++) {
        fields[i].type = (troupe_field_type)(fz_u8(&in) % 7);
        make_path(&in, paths[i], sizeof(paths[i]));
        fields[i].path = paths[i];
    }
    spec.fields = nf ? fields : NULL;
    spec.n_fields = nf;
    if (nf == 0)
        spec.fn_name = "f";
    uint8_t c = fz_u8(&in);
    if (c % 5 != 0) {
        spec.cond.op = (troupe_cond_op)(c % 5);
        make_path(&in, cpath, sizeof(cpath));
        spec.cond.path = cpath;
        if (spec.cond.op == TROUPE_COND_EQ || spec.cond.op == TROUPE_COND_NE)
            spec.cond.value = fz_span8(&in, &spec.cond.value_len);
    }
    size_t pkl, dl;
    const uint8_t *pk = fz_span8(&in, &pkl);
    const uint8_t *doc = fz_take(&in, in.n, &dl);
    troupe_index_def *d = NULL;
    if (troupe_index_def_create(&spec, 1, &d) != TROUPE_OK || pkl == 0)
        goto out;
    troupe_index_entries a, b;
    troupe_index_entries_init(&a);
    troupe_index_entries_init(&b);
    troupe_err e = troupe_index_derive(d, fns, doc, dl, pk, pkl, &a);
    troupe_reader r;
    bool is_map = troupe_reader_init(&r, doc, dl) == TROUPE_OK &&
                  troupe_read_peek(&r) == TROUPE_MP_MAP;
    if (!is_map)
        FZ_ERR_IN(e, TROUPE_EPROTO);
    else if (nf == 0)
        FZ_ERR_IN(e, TROUPE_OK, TROUPE_ETOOBIG, TROUPE_ENOMEM, TROUPE_EINVAL);
    else
        FZ_ERR_IN(e, TROUPE_OK, TROUPE_ETOOBIG, TROUPE_ENOMEM);
    if (e != TROUPE_OK) {
        FZ_CHECK(a.n == 0, "entries left after %s", troupe_err_name(e));
    } else {
        check_entries(&a, d, pk, pkl);
        FZ_ERR_IN(troupe_index_derive(d, fns, doc, dl, pk, pkl, &b), TROUPE_OK);
        FZ_CHECK(a.n == b.n, "%zu entries, then %zu", a.n, b.n);
        for (size_t i = 0; i < a.n; i++)
            FZ_CHECK(fz_same(a.v[i].key, a.v[i].key_len, b.v[i].key,
                             b.v[i].key_len) &&
                         a.v[i].values_len == b.v[i].values_len &&
                         fz_same(a.v[i].val, a.v[i].val_len, b.v[i].val,
                                 b.v[i].val_len),
                     "entry %zu differs the second time", i);
        bool casefold_field = false;
        for (size_t i = 0; i < nf; i++)
            casefold_field = casefold_field ||
                             fields[i].type == TROUPE_FIELD_STRING_CASEFOLD;
        for (size_t i = 0; i < a.n && !casefold_field; i++) {
            size_t vl = 0;
            troupe_index_key_split(a.v[i].key, a.v[i].key_len, &vl, NULL);
            FZ_CHECK(a.v[i].values_len == vl,
                     "compared prefix %zu of values %zu without CASEFOLD",
                     a.v[i].values_len, vl);
        }
    }
    troupe_index_entries_fini(&a);
    troupe_index_entries_fini(&b);
out:
    troupe_index_def_destroy(d);
    return 0;
}
