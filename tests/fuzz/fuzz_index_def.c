/*
 * libFuzzer target: an index definition in its catalog form
 * (troupe_index_def_unpack, actors/index/src/def_codec.c), read from the disk
 * inside every table's catalog entry.
 *
 * Properties: a refused definition is EPROTO (ENOMEM only when out of
 * memory) and leaks nothing (a repeated key used to leak its first
 * value); an accepted one packs again, unpacks to a definition of the
 * same spec, id and state, and packs to the same bytes (the catalog form
 * is stable); a clone under another id is the same spec.
 */
#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/index.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    troupe_index_def *d = NULL;
    troupe_err e = troupe_index_def_unpack(data, size, &d);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_EPROTO, TROUPE_ENOMEM);
    if (e != TROUPE_OK) {
        FZ_CHECK(d == NULL, "a def on error");
        return 0;
    }
    void *p1 = NULL, *p2 = NULL;
    size_t l1 = 0, l2 = 0;
    FZ_ERR_IN(troupe_index_def_pack(d, &p1, &l1), TROUPE_OK);
    troupe_index_def *d2 = NULL;
    FZ_ERR_IN(troupe_index_def_unpack(p1, l1, &d2), TROUPE_OK);
    FZ_CHECK(troupe_index_def_same(d, d2), "spec changed");
    FZ_CHECK(troupe_index_def_id(d) == troupe_index_def_id(d2), "id changed");
    FZ_CHECK(troupe_index_def_ready(d) == troupe_index_def_ready(d2),
             "state changed");
    FZ_CHECK(troupe_index_def_same(d2, d), "same() not symmetric");
    FZ_ERR_IN(troupe_index_def_pack(d2, &p2, &l2), TROUPE_OK);
    FZ_CHECK(fz_same(p1, l1, p2, l2), "catalog form not stable");
    troupe_index_def *c = NULL;
    uint64_t cid = troupe_index_def_id(d) + 1;
    FZ_ERR_IN(troupe_index_def_clone(d, cid ? cid : 1, &c), TROUPE_OK);
    FZ_CHECK(troupe_index_def_same(d, c), "clone differs");
    troupe_index_def_destroy(c);
    troupe_free(p1);
    troupe_free(p2);
    troupe_index_def_destroy(d);
    troupe_index_def_destroy(d2);
    return 0;
}
