/*
 * Results as msgpack, the bodies of completions (bindings/c/README.md,
 * "Completion bodies"). Documents and values are copied as the msgpack
 * they are, not decoded and packed again.
 */
#include <string.h>

#include "node.h"

/* msgpack-c's packer returns 0 or -1; ok collects them. */
static void
raw(msgpack_sbuffer *sb, const void *p, size_t len, int *ok)
{
    if (msgpack_sbuffer_write(sb, p, len) != 0)
        *ok = -1;
}

static void
bin(msgpack_packer *pk, const void *p, size_t len, int *ok)
{
    if (p == NULL) {
        *ok |= msgpack_pack_nil(pk);
        return;
    }
    *ok |= msgpack_pack_bin(pk, len);
    *ok |= msgpack_pack_bin_body(pk, p, len);
}

static void
str(msgpack_packer *pk, const char *s, int *ok)
{
    size_t l = strlen(s);
    *ok |= msgpack_pack_str(pk, l);
    *ok |= msgpack_pack_str_body(pk, s, l);
}

/* "cursor": bin or nil, "more": bool, the tail of a page. */
static void
page_tail(msgpack_packer *pk, const uint8_t *cursor, size_t cursor_len,
          bool more, int *ok)
{
    str(pk, "cursor", ok);
    bin(pk, cursor, cursor_len, ok);
    str(pk, "more", ok);
    *ok |= more ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
}

troupe_err
abi_pack_rows(const troupe_rows *rows, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int ok = 0;
    ok |= msgpack_pack_map(&pk, 3);
    str(&pk, "rows", &ok);
    ok |= msgpack_pack_array(&pk, rows->n);
    for (size_t i = 0; i < rows->n; i++) {
        const troupe_row *r = &rows->rows[i];
        ok |= msgpack_pack_array(&pk, 2);
        bin(&pk, r->key, r->key_len, &ok);
        raw(sb, r->doc, r->doc_len, &ok);
    }
    page_tail(&pk, rows->cursor, rows->cursor_len, rows->more, &ok);
    return ok == 0 ? TROUPE_OK : TROUPE_ENOMEM;
}

troupe_err
abi_pack_hits(const troupe_index_result *res, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int ok = 0;
    ok |= msgpack_pack_map(&pk, 3);
    str(&pk, "hits", &ok);
    ok |= msgpack_pack_array(&pk, res->n);
    for (size_t i = 0; i < res->n; i++) {
        const troupe_index_hit *h = &res->hits[i];
        ok |= msgpack_pack_array(&pk, 3);
        bin(&pk, h->key, h->key_len, &ok);
        bin(&pk, h->pk, h->pk_len, &ok);
        if (h->val != NULL && h->val_len > 0)
            raw(sb, h->val, h->val_len, &ok);
        else
            ok |= msgpack_pack_nil(&pk);
    }
    page_tail(&pk, res->cursor, res->cursor_len, res->more, &ok);
    return ok == 0 ? TROUPE_OK : TROUPE_ENOMEM;
}

troupe_err
abi_pack_conflicts(const troupe_txn_conflict *c, size_t n, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int ok = 0;
    ok |= msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n; i++) {
        ok |= msgpack_pack_array(&pk, 3);
        str(&pk, c[i].table, &ok);
        bin(&pk, c[i].key, c[i].key_len, &ok);
        ok |= msgpack_pack_uint32(&pk, c[i].kinds);
    }
    return ok == 0 ? TROUPE_OK : TROUPE_ENOMEM;
}
