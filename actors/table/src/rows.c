/*
 * troupe_rows, the result of a table read (and of a transaction's), and
 * its reply body [[[key, expires, doc], ...], cursor|nil, more]: decode
 * into rows pointing into the body, pack, destroy, and the wrapping of a
 * scan's exact key into the table's cursor (troupe/cursor.h). No state.
 *
 * A user's troupe_rows is the first member of a trows (table_int.h), so
 * that what the rows point into stays out of the public struct; every
 * troupe_rows is allocated here, so the cast back is always valid.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/cursor.h"
#include "troupe/pack.h"

trows *
troupe__rows_alloc(size_t n, size_t extra, void **tail)
{
    trows *t = troupe_calloc(1, sizeof(*t) + n * sizeof(troupe_row) + extra);
    if (t == NULL)
        return NULL;
    troupe_row *v = (troupe_row *)(t + 1);
    t->pub.rows = v;
    if (tail != NULL)
        *tail = v + n;
    return t;
}

void
troupe_rows_destroy(troupe_rows *r)
{
    if (r == NULL)
        return;
    trows *t = (trows *)r;
    troupe_body_release(t->body);
    troupe_free(t->mem);
    troupe_free(t->cur);
    troupe_free(t);
}

/* [[[key, expires, doc], ...], cursor|nil, more]; pointers into body. */
static troupe_err
rows_decode(troupe_body *body, troupe_rows **out)
{
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, troupe_body_data(body), troupe_body_len(body));
    troupe_read_array_n(&r, 3);
    troupe_read_array(&r, &n);
    if (r.err != TROUPE_OK || n > TROUPE_TABLE_PAGE_MAX)
        return TROUPE_EPROTO;
    trows *t = troupe__rows_alloc(n, 0, NULL);
    if (t == NULL)
        return TROUPE_ENOMEM;
    troupe_rows *rows = &t->pub;
    troupe_row *v = (troupe_row *)rows->rows;
    for (uint32_t i = 0; i < n; i++) {
        const void *p = NULL;
        troupe_read_array_n(&r, 3);
        troupe_read_bin(&r, TROUPE_KEY_MAX, &p, &v[i].key_len);
        v[i].key = p;
        troupe_read_int(&r, &v[i].expires_at_ms);
        if (troupe_read_peek(&r) != TROUPE_MP_MAP)
            r.err = TROUPE_EPROTO;
        troupe_read_raw(&r, &p, &v[i].doc_len);
        v[i].doc = p;
    }
    if (!troupe_read_try_nil(&r)) {
        const void *p = NULL;
        troupe_read_bin(&r, TROUPE_KEY_MAX, &p, &rows->cursor_len);
        rows->cursor = p;
    }
    troupe_read_bool(&r, &rows->more);
    if (troupe_read_end(&r) != TROUPE_OK) {
        troupe_free(t);
        return TROUPE_EPROTO;
    }
    rows->n = n;
    t->body = troupe_body_retain(body);
    *out = rows;
    return TROUPE_OK;
}

troupe_err
troupe__rows_from_body(troupe_body *body, troupe_rows **out)
{
    return rows_decode(body, out);
}

troupe_err
troupe__rows_cursor_wrap(troupe_rows *r, uint64_t table_id)
{
    if (r->cursor == NULL)
        return TROUPE_OK;
    uint8_t *c = troupe_malloc(r->cursor_len + TROUPE_CURSOR_OVERHEAD);
    if (c == NULL)
        return TROUPE_ENOMEM;
    troupe__cursor_put(c, TROUPE_CURSOR_ROWS, table_id, r->cursor,
                       r->cursor_len);
    trows *t = (trows *)r;
    troupe_free(t->cur);
    t->cur = c;
    r->cursor = c;
    r->cursor_len += TROUPE_CURSOR_OVERHEAD;
    return TROUPE_OK;
}

/* Appends [key, expires, doc] of a live row to p. */
void
troupe__table_pack_row(troupe_packer *p, const void *key, size_t klen,
                       int64_t exp, const void *doc, size_t dlen)
{
    troupe_pack_array(p, 3);
    troupe_pack_bin(p, key, klen);
    troupe_pack_int(p, exp);
    troupe_pack_raw(p, doc, dlen);
}

troupe_err
troupe__rows_pack(const troupe_rows *r, troupe_body **out)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_array(&p, (uint32_t)r->n);
    for (size_t i = 0; i < r->n; i++)
        troupe__table_pack_row(&p, r->rows[i].key, r->rows[i].key_len,
                               r->rows[i].expires_at_ms, r->rows[i].doc,
                               r->rows[i].doc_len);
    if (r->cursor != NULL)
        troupe_pack_bin(&p, r->cursor, r->cursor_len);
    else
        troupe_pack_nil(&p);
    troupe_pack_bool(&p, r->more);
    return troupe_pack_take_body(&p, out); /* p.err, if any */
}
