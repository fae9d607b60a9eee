/*
 * libFuzzer target: the client side's reply decoders, which read what a
 * table or index actor on another node answered. The first byte picks:
 *   0 a table read reply (get, get_many, scan) into troupe_rows, its
 *     cursor wrapped for a table id (8 bytes) as a scan's is
 *   1 an index QUERY reply      2 a COUNT reply      3 a VERIFY reply
 *
 * Properties: a refused reply is EPROTO (ENOMEM only when out of memory)
 * and leaks nothing; an accepted table reply packs again (as the actor
 * packs it) into a reply that decodes to the same rows; an accepted
 * QUERY result's cursor names an index and its last hit's key; VERIFY
 * calls back only for a reply it accepts as a whole.
 */
#include <string.h>

#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/internal/index.h"
#include "troupe/internal/tables.h"

static void
rows(fz_in *in)
{
    uint64_t table_id = fz_u64(in);
    troupe_body *b = NULL;
    if (troupe_body_copy(in->p, in->n, &b) != TROUPE_OK)
        return;
    troupe_rows *r = NULL;
    troupe_err e = troupe__rows_from_body(b, &r);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_EPROTO, TROUPE_ENOMEM);
    if (e == TROUPE_OK) {
        troupe_body *again = NULL;
        FZ_ERR_IN(troupe__rows_pack(r, &again), TROUPE_OK);
        troupe_rows *r2 = NULL;
        FZ_ERR_IN(troupe__rows_from_body(again, &r2), TROUPE_OK);
        FZ_CHECK(
            r2->n == r->n && r2->more == r->more &&
                fz_same(r->cursor, r->cursor_len, r2->cursor, r2->cursor_len),
            "rows changed");
        for (size_t i = 0; i < r->n; i++)
            FZ_CHECK(fz_same(r->rows[i].key, r->rows[i].key_len,
                             r2->rows[i].key, r2->rows[i].key_len) &&
                         r->rows[i].expires_at_ms ==
                             r2->rows[i].expires_at_ms &&
                         fz_same(r->rows[i].doc, r->rows[i].doc_len,
                                 r2->rows[i].doc, r2->rows[i].doc_len),
                     "row %zu changed", i);
        troupe_rows_destroy(r2);
        troupe_body_release(again);
        if (table_id != 0 && r->cursor != NULL) {
            const uint8_t *raw = r->cursor;
            size_t rl = r->cursor_len;
            uint8_t *keep = troupe_malloc(rl ? rl : 1);
            memcpy(keep, raw, rl);
            e = troupe__rows_cursor_wrap(r, table_id);
            FZ_ERR_IN(e, TROUPE_OK, TROUPE_ENOMEM);
            if (e == TROUPE_OK && rl > 0) {
                const void *k;
                size_t kl;
                FZ_ERR_IN(troupe__cursor_key(r->cursor, r->cursor_len,
                                             TROUPE_CURSOR_ROWS, table_id, &k,
                                             &kl),
                          TROUPE_OK);
                FZ_CHECK(fz_same(k, kl, keep, rl), "wrapped cursor differs");
            }
            troupe_free(keep);
        }
        troupe_rows_destroy(r);
    }
    troupe_body_release(b);
}

static void
query(troupe_msg *m)
{
    troupe_index_result *res = NULL;
    troupe_err e = troupe_index_query_reply(m, &res);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_EPROTO, TROUPE_ENOMEM);
    if (e == TROUPE_OK) {
        if (res->n > 0) {
            const troupe_index_hit *last = &res->hits[res->n - 1];
            FZ_CHECK(res->cursor != NULL &&
                         res->cursor_len ==
                             last->key_len + TROUPE_CURSOR_OVERHEAD &&
                         res->cursor[0] == TROUPE_CURSOR_INDEX &&
                         memcmp(res->cursor + TROUPE_CURSOR_OVERHEAD, last->key,
                                last->key_len) == 0,
                     "cursor is not the last hit's");
        }
        for (size_t i = 0; i < res->n; i++)
            FZ_CHECK(res->hits[i].key_len > 0 && res->hits[i].pk_len > 0,
                     "empty key or pk in hit %zu", i);
    } else {
        FZ_CHECK(res == NULL, "a result on error");
    }
    troupe_index_result_destroy(res);
}

static void
count(troupe_msg *m)
{
    uint64_t c = 0;
    FZ_ERR_IN(troupe_index_count_reply(m, &c), TROUPE_OK, TROUPE_EPROTO);
}

static void
on_mismatch(void *ctx, const troupe_index_mismatch *mm)
{
    FZ_CHECK(mm->kind >= TROUPE_VERIFY_MISSING_MANIFEST &&
                 mm->kind <= TROUPE_VERIFY_STALE_MANIFEST,
             "kind %d", (int)mm->kind);
    (*(size_t *)ctx)++;
}

static void
verify(troupe_msg *m)
{
    size_t calls = 0;
    void *next = NULL;
    size_t nl = 0;
    bool done = false;
    troupe_err e =
        troupe_index_verify_reply(m, on_mismatch, &calls, &next, &nl, &done);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_EPROTO, TROUPE_ENOMEM);
    if (e == TROUPE_EPROTO)
        FZ_CHECK(calls == 0 && next == NULL, "callbacks or a cursor on error");
    else
        FZ_CHECK(done == (next == NULL) && (next == NULL || nl > 0),
                 "done %d with a cursor of %zu bytes", done, nl);
    troupe_free(next);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t sel = fz_u8(&in) % 4;
    if (sel == 0) {
        rows(&in);
        return 0;
    }
    troupe_msg *m = NULL;
    if (troupe_msg_create(&m, 0, in.p, in.n) != TROUPE_OK)
        return 0;
    if (sel == 1)
        query(m);
    else if (sel == 2)
        count(m);
    else
        verify(m);
    troupe_msg_destroy(m);
    return 0;
}
