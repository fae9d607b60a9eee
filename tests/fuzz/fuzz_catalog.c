/*
 * libFuzzer target: the catalogs' stored values, read from the disk at
 * every open (actors/table/src/entry.c, versions.c and build.c;
 * actors/queue/src/format.c).
 * The first byte picks the decoder:
 *   0 a table's catalog entry {id, name, version, indexes, dropped}
 *   1 the catalog's ("seq") counter (actors/catalog/src/meta.c)
 *   2 the key-version floor ("versions")
 *   3 an index build's position ("build", table id)
 *   4 a queue's catalog entry: key (2-byte length first), then value
 *   5 a queue's order mark ("s": one uint, the decoder of 1)
 *
 * Properties: a refused value is ECORRUPT (ENOMEM only when out of memory)
 * and leaks nothing; an accepted one encodes again (with the encoder the
 * catalog writes with) to a value that decodes to the same thing, and
 * whose encoding is then stable; an accepted table name or queue name is
 * a valid catalog name.
 */
#include <string.h>

#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/catalog.h"
#include "troupe/internal/queue.h"
#include "troupe/internal/tables.h"
#include "troupe/pack.h"

static void
table_entry(const uint8_t *d, size_t n)
{
    tentry *e = NULL;
    troupe_err err = troupe__tables_entry_parse(d, n, &e);
    FZ_ERR_IN(err, TROUPE_OK, TROUPE_ECORRUPT, TROUPE_ENOMEM);
    if (err != TROUPE_OK) {
        FZ_CHECK(e == NULL, "an entry on error");
        return;
    }
    FZ_CHECK(troupe_catalog_name_valid(troupe__tables_entry_name(e), NULL),
             "invalid name accepted");
    void *p1 = NULL, *p2 = NULL;
    size_t l1 = 0, l2 = 0;
    FZ_ERR_IN(troupe__tables_entry_pack(e, &p1, &l1), TROUPE_OK);
    tentry *e2 = NULL;
    FZ_ERR_IN(troupe__tables_entry_parse(p1, l1, &e2), TROUPE_OK);
    FZ_CHECK(strcmp(troupe__tables_entry_name(e),
                    troupe__tables_entry_name(e2)) == 0,
             "name changed");
    FZ_ERR_IN(troupe__tables_entry_pack(e2, &p2, &l2), TROUPE_OK);
    FZ_CHECK(fz_same(p1, l1, p2, l2), "re-encoding differs");
    troupe_free(p1);
    troupe_free(p2);
    troupe__tables_entry_free(e);
    troupe__tables_entry_free(e2);
}

/* One uint through its decoder and back through the packer. */
static void
one_uint(const uint8_t *d, size_t n,
         troupe_err (*dec)(const void *, size_t, uint64_t *))
{
    uint64_t v = 0, again = 0;
    troupe_err err = dec(d, n, &v);
    FZ_ERR_IN(err, TROUPE_OK, TROUPE_ECORRUPT);
    if (err != TROUPE_OK)
        return;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_uint(&p, v);
    size_t l;
    const void *b = troupe_pack_data(&p, &l);
    FZ_ERR_IN(dec(b, l, &again), TROUPE_OK);
    FZ_CHECK(again == v, "value changed");
    troupe_pack_fini(&p);
}

static void
floor_value(const uint8_t *d, size_t n)
{
    uint64_t f = 0, g = 0;
    troupe_err err = troupe__tables_floor_parse(d, n, &f);
    FZ_ERR_IN(err, TROUPE_OK, TROUPE_ECORRUPT);
    if (err != TROUPE_OK)
        return;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 2);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, f);
    size_t l;
    const void *b = troupe_pack_data(&p, &l);
    FZ_ERR_IN(troupe__tables_floor_parse(b, l, &g), TROUPE_OK);
    FZ_CHECK(g == f, "floor changed");
    troupe_pack_fini(&p);
}

static void
position(const uint8_t *d, size_t n)
{
    uint64_t id = 0, id2 = 0;
    const void *a = NULL, *a2 = NULL;
    size_t al = 0, al2 = 0;
    troupe_err err = troupe__tables_pos_parse(d, n, &id, &a, &al);
    FZ_ERR_IN(err, TROUPE_OK, TROUPE_ECORRUPT);
    if (err != TROUPE_OK)
        return;
    FZ_CHECK(al > 0 && al <= TROUPE_KEY_MAX && (const uint8_t *)a >= d &&
                 (const uint8_t *)a + al <= d + n,
             "position key outside the input");
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 3);
    troupe_pack_uint(&p, 1);
    troupe_pack_uint(&p, id);
    troupe_pack_bin(&p, a, al);
    size_t l;
    const void *b = troupe_pack_data(&p, &l);
    FZ_ERR_IN(troupe__tables_pos_parse(b, l, &id2, &a2, &al2), TROUPE_OK);
    FZ_CHECK(id2 == id && fz_same(a, al, a2, al2), "position changed");
    troupe_pack_fini(&p);
}

static void
queue_entry(fz_in *in)
{
    size_t kl, vl;
    const uint8_t *k = fz_span16(in, &kl);
    const uint8_t *v = fz_take(in, in->n, &vl);
    char name[TROUPE_QUEUE_NAME_MAX + 1], name2[TROUPE_QUEUE_NAME_MAX + 1];
    tq_entry en = {0}, en2 = {0};
    troupe_err err = troupe__tq_entry_decode(k, kl, v, vl, name, &en);
    FZ_ERR_IN(err, TROUPE_OK, TROUPE_ECORRUPT);
    if (err != TROUPE_OK)
        return;
    FZ_CHECK(troupe_catalog_name_valid(name, NULL), "invalid name accepted");
    FZ_CHECK(en.id > 0 && en.partitions > 0 &&
                 en.partitions <= TROUPE_QUEUE_PARTITIONS_MAX &&
                 en.retention_ms >= 0 &&
                 en.max_attempts <= TROUPE_QUEUE_ATTEMPTS_MAX,
             "out of range: id %llu, partitions %u, retention %lld, "
             "max_attempts %u",
             (unsigned long long)en.id, en.partitions,
             (long long)en.retention_ms, en.max_attempts);
    troupe_key_writer w;
    troupe_packer p;
    troupe_key_writer_init(&w);
    troupe_pack_init(&p);
    FZ_ERR_IN(troupe__tq_entry_pack(name, &en, &w, &p), TROUPE_OK);
    const uint8_t *k2;
    size_t kl2, vl2;
    FZ_ERR_IN(troupe_key_writer_finish(&w, &k2, &kl2), TROUPE_OK);
    /* keys are canonical: the same name makes the same key */
    FZ_CHECK(fz_same(k, kl, k2, kl2), "key re-encoded differently");
    const void *v2 = troupe_pack_data(&p, &vl2);
    FZ_ERR_IN(troupe__tq_entry_decode(k2, kl2, v2, vl2, name2, &en2),
              TROUPE_OK);
    FZ_CHECK(strcmp(name, name2) == 0 && en.id == en2.id &&
                 en.partitions == en2.partitions &&
                 en.retention_ms == en2.retention_ms &&
                 en.max_attempts == en2.max_attempts && en.paused == en2.paused,
             "entry changed");
    troupe_pack_fini(&p);
    troupe_key_writer_fini(&w);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t which = fz_u8(&in);
    switch (which % 6) {
    case 0:
        table_entry(in.p, in.n);
        break;
    case 1:
        one_uint(in.p, in.n, troupe__catalog_uint_parse);
        break;
    case 2:
        floor_value(in.p, in.n);
        break;
    case 3:
        position(in.p, in.n);
        break;
    case 4:
        queue_entry(&in);
        break;
    default:
        one_uint(in.p, in.n, troupe__catalog_uint_parse);
        break;
    }
    return 0;
}
