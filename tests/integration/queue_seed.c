/*
 * queue_seed DIR: fills a database with known queues and events for the
 * `troupe queue ...` test (queue_cli.sh). Queue "orders" (4 partitions,
 * retention 1 h) gets events o1..o5 due at 1000 (o1 and o2 owned by
 * customer/alice), o6 due in an hour and one with the binary id 00 01
 * 'b' 'i' 'n'; then o1 and o2 are acknowledged and o3 is rescheduled to
 * an hour from now. So: 5 pending (o3's replacement, o4, o5, o6, the
 * binary one), 3 completed (o1, o2, o3's first invocation). Queue "audit"
 * (1 partition) stays empty. With ROWS, table "users" gets an index
 * "by_n" (on field n) and ROWS rows u000000.. with n = their number, for
 * `troupe index rebuild --wait` (admin_cli.sh). Exits 0, or 1 with a
 * message.
 */
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "troupe/commit.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"
#include "troupe/table.h"

static troupe_err
publish(troupe_queues *qs, const void *id, size_t id_len, int64_t t, bool owned)
{
    static const unsigned char payload[] = {0x81, 0xa3, 'q', 't', 'y', 0x02};
    troupe_queue_event ev = {.id = id,
                             .id_len = id_len,
                             .key = id,
                             .key_len = id_len,
                             .payload = payload,
                             .payload_len = sizeof(payload),
                             .time_ms = t};
    if (owned) {
        ev.owner_kind = "customer";
        ev.owner_kind_len = 8;
        ev.owner_id = "alice";
        ev.owner_id_len = 5;
    }
    return troupe_queue_publish_wait(qs, "orders", &ev, TROUPE_SYNC_ON);
}

/* Acknowledges (t < 0) or reschedules event id's pending invocation. */
static troupe_err
outcome(troupe_queues *qs, const char *id, int64_t t)
{
    troupe_queue_page *pg = NULL;
    troupe_err e = troupe_queue_lookup_wait(qs, "orders", id, strlen(id), &pg);
    if (e == TROUPE_OK && (pg->n != 1 || pg->items[0].completed))
        e = TROUPE_ESTATE;
    if (e == TROUPE_OK)
        e = t < 0
                ? troupe_queue_ack_wait(qs, "orders", pg->items[0].skey,
                                        pg->items[0].skey_len, TROUPE_SYNC_ON)
                : troupe_queue_reschedule_wait(qs, "orders", pg->items[0].skey,
                                               pg->items[0].skey_len, t,
                                               TROUPE_SYNC_ON);
    troupe_queue_page_destroy(pg);
    return e;
}

/* Table "users" with index "by_n" and rows rows. */
static troupe_err
seed_table(troupe_catalog *cat, troupe_commit *c, long rows)
{
    troupe_tables *t = NULL;
    troupe_tables_opts to = {.catalog = cat, .commit = c};
    troupe_err e = troupe_tables_open(&to, &t);
    static const troupe_index_field nf = {"n", TROUPE_FIELD_INT};
    troupe_index_spec by_n = {.name = "by_n", .fields = &nf, .n_fields = 1};
    if (e == TROUPE_OK)
        e = troupe_tables_create_wait(t, "users", &by_n, 1);
    troupe_write_opts wo = {.sync = TROUPE_SYNC_OFF};
    for (long i = 0; e == TROUPE_OK && i < rows; i++) {
        char k[32];
        snprintf(k, sizeof(k), "u%06ld", i);
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_map(&p, 1);
        troupe_pack_cstr(&p, "n");
        troupe_pack_int(&p, i);
        size_t dl;
        const void *d = troupe_pack_data(&p, &dl);
        e = d == NULL ? TROUPE_ENOMEM
                      : troupe_table_upsert_wait(t, "users", k, strlen(k), d,
                                                 dl, &wo);
        troupe_pack_fini(&p);
    }
    if (t != NULL) {
        troupe_err se = troupe_tables_stop_wait(t);
        if (e == TROUPE_OK)
            e = se;
        troupe_tables_destroy(t);
    }
    return e;
}

int
main(int argc, char **argv)
{
    long rows = argc == 3 ? strtol(argv[2], NULL, 10) : 0;
    if (argc < 2 || argc > 3 || rows < 0) {
        fprintf(stderr, "usage: queue_seed DIR [ROWS]\n");
        return 2;
    }
    troupe_db *db = NULL;
    troupe_commit *c = NULL;
    troupe_runtime *rt = NULL;
    troupe_catalog *cat = NULL;
    troupe_queues *qs = NULL;
    troupe_runtime_opts ro = {.schedulers = 1, .workers = 2};
    troupe_err e = troupe_db_open(argv[1], NULL, &db);
    if (e == TROUPE_OK)
        e = troupe_commit_create(db, NULL, &c);
    if (e == TROUPE_OK)
        e = troupe_runtime_create(&rt, &ro);
    if (e == TROUPE_OK) {
        troupe_catalog_opts co = {.rt = rt, .db = db};
        e = troupe_catalog_open(&co, &cat);
    }
    if (e == TROUPE_OK) {
        troupe_queues_opts qo = {.catalog = cat, .commit = c};
        e = troupe_queues_open(&qo, &qs);
    }
    troupe_queue_spec orders = {
        .name = "orders", .partitions = 4, .retention_ms = 3600000};
    troupe_queue_spec audit = {.name = "audit", .partitions = 1};
    if (e == TROUPE_OK)
        e = troupe_queues_create_wait(qs, &orders);
    if (e == TROUPE_OK)
        e = troupe_queues_create_wait(qs, &audit);
    int64_t later = troupe_now_ms() + 3600000;
    for (int i = 1; e == TROUPE_OK && i <= 5; i++) {
        char id[8];
        snprintf(id, sizeof(id), "o%d", i);
        e = publish(qs, id, strlen(id), 1000, i <= 2);
    }
    static const unsigned char bin[] = {0x00, 0x01, 'b', 'i', 'n'};
    if (e == TROUPE_OK)
        e = publish(qs, "o6", 2, later, false);
    if (e == TROUPE_OK)
        e = publish(qs, bin, sizeof(bin), 2000, false);
    if (e == TROUPE_OK)
        e = outcome(qs, "o1", -1);
    if (e == TROUPE_OK)
        e = outcome(qs, "o2", -1);
    if (e == TROUPE_OK)
        e = outcome(qs, "o3", later);
    if (e == TROUPE_OK && rows > 0)
        e = seed_table(cat, c, rows);
    if (qs != NULL)
        troupe_queues_stop_wait(qs);
    troupe_queues_destroy(qs);
    if (cat != NULL) {
        troupe_catalog_stop_wait(cat);
        troupe_catalog_destroy(cat);
    }
    if (rt != NULL) {
        troupe_runtime_shutdown_wait(rt);
        troupe_runtime_destroy(rt);
    }
    troupe_commit_destroy(c);
    if (db != NULL) {
        troupe_err ce = troupe_db_close(db);
        if (e == TROUPE_OK)
            e = ce;
    }
    if (e != TROUPE_OK) {
        fprintf(stderr, "queue_seed: %s\n", troupe_err_name(e));
        return 1;
    }
    return 0;
}
