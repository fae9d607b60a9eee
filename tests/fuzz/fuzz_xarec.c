/*
 * libFuzzer target: a prepared XA transaction's stored record (meta
 * ("xa", xid), actors/table/src/xa.c), read back at every open of the
 * tables to hold its keys again.
 *
 * Properties: a refused record is ECORRUPT (ENOMEM only when out of
 * memory) and leaves nothing to free; an accepted one has a valid xid,
 * at most TROUPE_TXN_TABLES_MAX tables each with a name, keys sorted and
 * distinct within their limits, a batch; and it packs (with the table
 * module's packer) to a record that parses and packs to the same bytes.
 */
#include <string.h>

#include "fuzz_support.h"
#include "troupe/internal/xa.h"
#include "troupe/pack.h"
#include "troupe/txn.h"

static int
key_cmp(const ttxn_key *a, const ttxn_key *b)
{
    size_t n = a->klen < b->klen ? a->klen : b->klen;
    int c = memcmp(a->key, b->key, n);
    return c != 0 ? c : (a->klen > b->klen) - (a->klen < b->klen);
}

int
LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    txa_rec r;
    troupe_err e = troupe__xa_rec_parse(d, n, &r);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ECORRUPT, TROUPE_ENOMEM);
    if (e != TROUPE_OK)
        return 0;
    FZ_CHECK(troupe__xa_xid_valid(r.xid, r.xlen),
             "an xid that breaks its rule");
    FZ_CHECK(r.ntabs <= TROUPE_TXN_TABLES_MAX, "%zu tables", r.ntabs);
    FZ_CHECK(r.batch != NULL, "no batch");
    for (size_t t = 0; t < r.ntabs; t++) {
        const txa_tab *tb = &r.tabs[t];
        FZ_CHECK(tb->name != NULL && tb->name[0] != '\0', "a nameless table");
        FZ_CHECK(tb->n <= TROUPE_TXN_KEYS_MAX, "%zu keys", tb->n);
        for (size_t k = 1; k < tb->n; k++)
            FZ_CHECK(key_cmp(&tb->keys[k - 1], &tb->keys[k]) < 0,
                     "keys not sorted or not distinct");
    }
    troupe_packer p1, p2;
    troupe_pack_init(&p1);
    troupe_pack_init(&p2);
    troupe__xa_rec_pack(&r, &p1);
    size_t l1 = 0, l2 = 0;
    const void *b1 = troupe_pack_data(&p1, &l1);
    FZ_CHECK(b1 != NULL, "pack");
    txa_rec s;
    FZ_CHECK(troupe__xa_rec_parse(b1, l1, &s) == TROUPE_OK,
             "an accepted record packs to one refused");
    troupe__xa_rec_pack(&s, &p2);
    const void *b2 = troupe_pack_data(&p2, &l2);
    FZ_CHECK(b2 != NULL && l1 == l2 && memcmp(b1, b2, l1) == 0,
             "the packing moved");
    troupe__xa_rec_fini(&s);
    troupe__xa_rec_fini(&r);
    troupe_pack_fini(&p1);
    troupe_pack_fini(&p2);
    return 0;
}
