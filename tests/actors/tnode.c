/* The node of tnode.h. */
#include "tnode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsupport.h"
#include "twire.h"

static const troupe_index_field name_f = {"name", TROUPE_FIELD_STRING};
static const troupe_index_field email_f = {"email", TROUPE_FIELD_STRING};

void
tnode_open(tnode *n, const char *tag, const troupe_runtime_opts *o)
{
    memset(n, 0, sizeof(*n));
    n->dir = ts_tempdir(tag);
    troupe_runtime_opts ro = *o;
    ro.schedulers = 2;
    ck_assert_ok(troupe_runtime_create(&n->rt, &ro));
    ts_wire_install(n->rt);
    ck_assert_ok(troupe_db_open(n->dir, NULL, &n->db));
    ck_assert_ok(troupe_commit_create(n->db, NULL, &n->commit));
    troupe_catalog_opts co = {.rt = n->rt, .db = n->db};
    ck_assert_ok(troupe_catalog_open(&co, &n->cat));
    troupe_tables_opts to = {.catalog = n->cat, .commit = n->commit};
    ck_assert_ok(troupe_tables_open(&to, &n->tables));
    troupe_index_spec by_name = {
        .name = "by_name", .fields = &name_f, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(n->tables, "t", &by_name, 1));
    troupe_index_spec by_email = {
        .name = "by_email", .unique = true, .fields = &email_f, .n_fields = 1};
    ck_assert_ok(troupe_tables_create_wait(n->tables, "u", &by_email, 1));
    troupe_queues_opts qo = {.catalog = n->cat, .commit = n->commit};
    ck_assert_ok(troupe_queues_open(&qo, &n->qs));
    troupe_queue_spec qs = {"q", 2, 0, 0};
    ck_assert_ok(troupe_queues_create_wait(n->qs, &qs));
    troupe_kv_opts ko = {.db = n->db, .commit = n->commit, .cf = "kv"};
    ck_assert_ok(troupe_kv_spawn(n->rt, &ko, NULL, &n->kv));
}

void
tnode_close(tnode *n)
{
    if (n->ttl != NULL) {
        ck_assert_ok(troupe_ttl_stop_wait(n->ttl));
        troupe_ttl_destroy(n->ttl);
    }
    ck_assert_ok(troupe_queues_stop_wait(n->qs));
    troupe_queues_destroy(n->qs);
    if (!n->tables_stopped)
        ck_assert_ok(troupe_tables_stop_wait(n->tables));
    troupe_tables_destroy(n->tables);
    ck_assert_ok(troupe_runtime_shutdown_wait(n->rt));
    ck_assert_ok(troupe_catalog_stop_wait(n->cat));
    troupe_catalog_destroy(n->cat);
    troupe_runtime_destroy(n->rt);
    troupe_commit_destroy(n->commit);
    ck_assert_ok(troupe_db_close(n->db));
    ts_rmtree(n->dir);
    free(n->dir);
    ts_wire_clear();
}

void
tnode_publish(tnode *n, int count)
{
    for (int i = 0; i < count; i++) {
        char id[16];
        snprintf(id, sizeof(id), "e%d", i);
        troupe_queue_event ev = {.id = id,
                                 .id_len = strlen(id),
                                 .key = id,
                                 .key_len = strlen(id),
                                 .payload = "\x07",
                                 .payload_len = 1,
                                 .time_ms = 0};
        ck_assert_ok(
            troupe_queue_publish_wait(n->qs, "q", &ev, TROUPE_SYNC_OFF));
    }
}
