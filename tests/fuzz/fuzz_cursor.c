/*
 * libFuzzer target: page cursors at every call that takes one, on a real
 * database (fuzz_node.h): table scans, transaction scans, index queries
 * (whole index and a range), AND queries, queue listings and verify
 * steps. A cursor comes from the client, or from a remote node: anything.
 *
 * Input: one byte of mode (bits 0-2 the call, bit 5 a bounded range, bit 6
 * reverse, bit 7 "prefixed": the cursor is the right tag and object id
 * for that call followed by the rest of the input, so that the fuzzer
 * reaches past the identity check; else the rest is the whole cursor).
 *
 * Properties: a foreign, malformed or out-of-range cursor is ERANGE (a
 * verify cursor EINVAL), never another error and never "not found"; a
 * page read after a cursor holds only items strictly after its key in
 * the page's direction; the cursor a page hands out is taken by the next
 * call, whose items continue strictly after it.
 */
#include <string.h>

#include "fuzz_node.h"
#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/index.h"
#include "troupe/internal/tables.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"

static fz_node *N;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    N = fz_node_open();
    return 0;
}

static int
order(const void *a, size_t an, const void *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    return c != 0 ? c : (an > bn) - (an < bn);
}

/* Each key must lie strictly after `after` (before it in reverse). */
static void
after_check(const char *what, const void *after, size_t al, const void *key,
            size_t kl, bool reverse)
{
    if (after == NULL)
        return;
    int c = order(key, kl, after, al);
    FZ_CHECK(reverse ? c < 0 : c > 0, "%s: an item not past the cursor", what);
}

/* A pack of [v] as a query bound. */
static size_t
bound(uint8_t *buf, bool str, int64_t v)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    if (str)
        troupe_pack_cstr(&p, "n1");
    else
        troupe_pack_int(&p, v);
    size_t n;
    const void *d = troupe_pack_data(&p, &n);
    memcpy(buf, d, n);
    troupe_pack_fini(&p);
    return n;
}

/* ---- each call: one page after cursor c; then, when it hands out a
 * cursor, the next page ---- */

typedef struct page {
    troupe_err err;
    size_t n;
    uint8_t *cursor; /* copy */
    size_t cursor_len;
} page;

static void
page_cursor(page *pg, const void *c, size_t cl)
{
    if (c != NULL && cl > 0) {
        pg->cursor = troupe_malloc(cl);
        memcpy(pg->cursor, c, cl);
        pg->cursor_len = cl;
    }
}

static page
scan(int call, const void *c, size_t cl, const void *key, size_t kl,
     bool reverse, bool ranged)
{
    troupe_scan_opts so = {
        .after = c, .after_len = cl, .limit = 5, .reverse = reverse};
    if (ranged) {
        so.start = "k05", so.start_len = 3;
        so.end = "k15", so.end_len = 3;
    }
    page pg = {0};
    troupe_rows *rows = NULL;
    troupe_txn *tx = NULL;
    if (call == 0) {
        pg.err = troupe_table_scan_wait(N->tables, "t", &so, &rows);
    } else {
        FZ_ERR_IN(troupe_txn_begin(N->tables, NULL, &tx), TROUPE_OK);
        pg.err = troupe_txn_scan_wait(tx, "t", &so, &rows);
    }
    if (pg.err == TROUPE_OK) {
        pg.n = rows->n;
        for (size_t i = 0; i < rows->n; i++) {
            after_check("scan", key, kl, rows->rows[i].key,
                        rows->rows[i].key_len, reverse);
            if (ranged)
                FZ_CHECK(order(rows->rows[i].key, rows->rows[i].key_len, "k05",
                               3) >= 0 &&
                             order(rows->rows[i].key, rows->rows[i].key_len,
                                   "k15", 3) < 0,
                         "row outside the range");
        }
        page_cursor(&pg, rows->cursor, rows->cursor_len);
    }
    troupe_rows_destroy(rows);
    troupe_txn_destroy(tx);
    return pg;
}

static page
query(int call, const void *c, size_t cl, const void *key, size_t kl,
      bool reverse, bool ranged)
{
    uint8_t from[16], to[16];
    troupe_index_query q = {
        .after = c, .after_len = cl, .limit = 5, .reverse = reverse};
    if (ranged && call == 3) {
        q.from = from, q.from_len = bound(from, false, 21);
        q.to = to, q.to_len = bound(to, false, 24);
    }
    page pg = {0};
    troupe_index_result *res = NULL;
    pg.err = troupe_tables_query_wait(
        N->tables, "t", call == 2 ? "by_name" : "by_age", &q, &res);
    if (pg.err == TROUPE_OK) {
        pg.n = res->n;
        for (size_t i = 0; i < res->n; i++)
            after_check("query", key, kl, res->hits[i].key,
                        res->hits[i].key_len, reverse);
        page_cursor(&pg, res->cursor, res->cursor_len);
    }
    troupe_index_result_destroy(res);
    return pg;
}

static page
query_and(const void *c, size_t cl, const void *key, size_t kl)
{
    uint8_t va[16], from[16], to[16];
    troupe_index_query qa = {.values = va, .values_len = bound(va, true, 0)};
    troupe_index_query qb = {.from = from,
                             .from_len = bound(from, false, 20),
                             .to = to,
                             .to_len = bound(to, false, 25)};
    page pg = {0};
    troupe_index_result *res = NULL;
    pg.err = troupe_tables_query_and_wait(N->tables, "t", "by_name", &qa,
                                          "by_age", &qb, c, cl, 2, &res);
    if (pg.err == TROUPE_OK) {
        pg.n = res->n;
        for (size_t i = 0; i < res->n; i++)
            after_check("and", key, kl, res->hits[i].pk, res->hits[i].pk_len,
                        false);
        page_cursor(&pg, res->cursor, res->cursor_len);
    }
    troupe_index_result_destroy(res);
    return pg;
}

static page
list(const void *c, size_t cl, const void *key, size_t kl)
{
    page pg = {0};
    troupe_queue_page *qp = NULL;
    pg.err =
        troupe_queue_list_wait(N->qs, "q", TROUPE_QUEUE_PENDING, c, cl, 5, &qp);
    if (pg.err == TROUPE_OK) {
        pg.n = qp->n;
        for (size_t i = 0; i < qp->n; i++)
            after_check("list", key, kl, qp->items[i].skey,
                        qp->items[i].skey_len, false);
        page_cursor(&pg, qp->cursor, qp->cursor_len);
    }
    troupe_queue_page_destroy(qp);
    return pg;
}

static size_t mismatches;

static void
on_mismatch(void *ctx, const troupe_index_mismatch *m)
{
    (void)ctx;
    (void)m;
    mismatches++;
}

static page
verify(const void *c, size_t cl)
{
    tindex_env env;
    FZ_ERR_IN(troupe__tables_index_env(N->tables, "t", "by_name", &env),
              TROUPE_OK);
    size_t ndefs;
    const troupe_index_def *const *defs =
        troupe__tschema_defs(env.schema, &ndefs);
    troupe_index_verify_opts o = {.table_id = env.table_id,
                                  .defs = defs,
                                  .n_defs = ndefs,
                                  .budget = 7,
                                  .cb = on_mismatch};
    page pg = {0};
    void *next = NULL;
    size_t nl = 0;
    bool done = false;
    pg.err = troupe_index_verify_step(env.db, &o, c, cl, &next, &nl, &done);
    if (pg.err == TROUPE_OK) {
        pg.n = done ? 0 : 1;
        page_cursor(&pg, next, nl);
    }
    troupe_free(next);
    troupe__tschema_release(env.schema);
    FZ_CHECK(mismatches == 0, "verify found %zu mismatches", mismatches);
    return pg;
}

static page
run(int call, const void *c, size_t cl, const void *key, size_t kl,
    bool reverse, bool ranged)
{
    switch (call) {
    case 0:
    case 1:
        return scan(call, c, cl, key, kl, reverse, ranged);
    case 2:
    case 3:
        return query(call, c, cl, key, kl, reverse, ranged);
    case 4:
        return query_and(c, cl, key, kl);
    case 5:
        return list(c, cl, key, kl);
    default:
        return verify(c, cl);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t tags[] = {TROUPE_CURSOR_ROWS,  TROUPE_CURSOR_ROWS,
                                   TROUPE_CURSOR_INDEX, TROUPE_CURSOR_INDEX,
                                   TROUPE_CURSOR_AND,   TROUPE_CURSOR_QUEUE};
    uint64_t ids[] = {N->t_id,      N->t_id, N->by_name_id,
                      N->by_age_id, N->t_id, N->q_id};
    fz_in in = {data, size};
    uint8_t mode = fz_u8(&in);
    int call = mode % 7;
    bool reverse = (mode & 0x40) != 0 && call <= 3;
    bool ranged = (mode & 0x20) != 0;
    bool prefixed = (mode & 0x80) != 0;
    size_t tl;
    const uint8_t *tail = fz_take(&in, in.n, &tl);
    if (tl > TROUPE_KEY_MAX)
        return 0;
    uint8_t *c = NULL;
    size_t cl = 0;
    const void *key = NULL; /* the key the cursor names, when known */
    size_t kl = 0;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    if (prefixed && call == 6) {
        /* verify's cursor: (table id, phase, position, last key) */
        troupe_key_put_uint64(&w, N->t_id);
        const uint8_t *k;
        troupe_key_writer_finish(&w, &k, &cl);
        c = troupe_malloc(cl + tl + 1);
        memcpy(c, k, cl);
        memcpy(c + cl, tail, tl);
        cl += tl;
    } else if (prefixed) {
        c = troupe_malloc(tl + TROUPE_CURSOR_OVERHEAD);
        troupe__cursor_put(c, tags[call], ids[call], tail, tl);
        cl = tl + TROUPE_CURSOR_OVERHEAD;
        key = tail, kl = tl;
    } else if (tl > 0) {
        c = troupe_malloc(tl);
        memcpy(c, tail, tl);
        cl = tl;
        /* raw bytes may still be a cursor of this call's object */
        if (call != 6 && troupe__cursor_key(c, cl, tags[call], ids[call], &key,
                                            &kl) != TROUPE_OK) {
            key = NULL;
            kl = 0;
        }
    }
    troupe_key_writer_fini(&w);
    page pg = run(call, c, cl, key, kl, reverse, ranged);
    if (call == 6)
        FZ_ERR_IN(pg.err, TROUPE_OK, TROUPE_EINVAL);
    else
        FZ_ERR_IN(pg.err, TROUPE_OK, TROUPE_ERANGE, TROUPE_EINVAL);
    /* EINVAL only for what the call checks before the cursor: an empty
     * one (no cursor at all is no error) */
    if (pg.err == TROUPE_EINVAL && call != 6)
        FZ_CHECK(c != NULL && cl == 0, "EINVAL for a cursor of %zu bytes", cl);
    if (pg.err == TROUPE_OK && !prefixed && call != 6)
        FZ_CHECK(cl == 0 || key != NULL,
                 "a %zu-byte cursor of something else accepted", cl);
    if (pg.err == TROUPE_OK && pg.cursor != NULL) {
        /* the page's own cursor continues it */
        const void *k2 = NULL;
        size_t k2l = 0;
        if (call != 6) {
            k2 = pg.cursor + TROUPE_CURSOR_OVERHEAD;
            k2l = pg.cursor_len - TROUPE_CURSOR_OVERHEAD;
        }
        page next =
            run(call, pg.cursor, pg.cursor_len, k2, k2l, reverse, ranged);
        FZ_ERR_IN(next.err, TROUPE_OK);
        troupe_free(next.cursor);
    }
    troupe_free(pg.cursor);
    troupe_free(c);
    return 0;
}
