#!/bin/sh
# make-catalog-v1-fixture.sh COMMIT OUTDIR: writes OUTDIR/catalog-v1.tar.gz,
# a database written by troupe at COMMIT (catalog format 1: the tables'
# catalog in `meta`, the queues' in a family of their own, `queues`), and
# OUTDIR/catalog-v1.txt, what it holds. tests/actors/check_catalog.c (tcase
# "format") opens a copy with today's code and checks it against the text.
#
# COMMIT is checked out in a temporary worktree, its troupe_actors built
# (Release, no tests) with the generator below as one more target, and the
# generator run once. The database's reserve file (TROUPE-RESERVE,
# storage/src/space.c) is left out: every open recreates it.
#
# What the generator writes (ids in creation order, one counter for
# tables and indexes, another for queues):
#   table users (id 1) with unique index by_email (id 2); table orders
#   (id 3) created then dropped; index by_age (id 4) added to users; 50
#   rows u00..u49 {"email": "uNN@example.com", "age": NN};
#   queue emails (id 1, 4 partitions, retention 60000 ms): 10 events e0..e9
#   due at 1000, e0 then acknowledged (9 pending, 1 completed);
#   queue jobs (id 2, 1 partition, retention 0): 3 events j0..j2 due at
#   4102444800000 (2100-01-01).
# So queue ids 1 and 2 equal table ids, as two counters made them.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 COMMIT OUTDIR" >&2; exit 2; }
commit=$1
out=$(cd "$2" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/catalog-v1.XXXXXX")
wt="$tmp/src"
cleanup() {
    git -C "$repo" worktree remove --force "$wt" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
git -C "$repo" worktree add --detach "$wt" "$commit" >/dev/null

mkdir "$wt/catalog_v1_gen"
cat > "$wt/catalog_v1_gen/CMakeLists.txt" <<'EOF'
add_executable(catalog_v1_gen gen.c)
target_link_libraries(catalog_v1_gen PRIVATE troupe_actors)
EOF
echo 'add_subdirectory(catalog_v1_gen)' >> "$wt/CMakeLists.txt"
cat > "$wt/catalog_v1_gen/gen.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/runtime.h"
#include "troupe/storage.h"
#include "troupe/table.h"

#define DUE_FAR 4102444800000LL

static void
ok(troupe_err e, const char *what)
{
    if (e != TROUPE_OK) {
        fprintf(stderr, "catalog_v1_gen: %s: %s\n", what, troupe_err_name(e));
        exit(1);
    }
}

static void
publish(troupe_queues *qs, const char *q, const char *id, int64_t t)
{
    static const unsigned char payload[] = {0x81, 0xa1, 'n', 0x01};
    troupe_queue_event ev = {.id = id,
                             .id_len = strlen(id),
                             .key = id,
                             .key_len = strlen(id),
                             .payload = payload,
                             .payload_len = sizeof(payload),
                             .time_ms = t};
    ok(troupe_queue_publish_wait(qs, q, &ev, TROUPE_SYNC_ON), "publish");
}

int
main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    troupe_db *db;
    troupe_commit *c;
    troupe_runtime *rt;
    troupe_tables *t;
    troupe_queues *qs;
    troupe_runtime_opts ro = {.schedulers = 1, .workers = 2};
    ok(troupe_db_open(argv[1], NULL, &db), "db_open");
    ok(troupe_commit_create(db, NULL, &c), "commit");
    ok(troupe_runtime_create(&rt, &ro), "runtime");
    troupe_tables_opts to = {.rt = rt, .db = db, .commit = c};
    ok(troupe_tables_open(&to, &t), "tables_open");
    troupe_index_field ef = {"email", TROUPE_FIELD_STRING};
    troupe_index_field af = {"age", TROUPE_FIELD_INT};
    troupe_index_spec by_email = {
        .name = "by_email", .unique = true, .fields = &ef, .n_fields = 1};
    troupe_index_spec by_age = {.name = "by_age", .fields = &af, .n_fields = 1};
    ok(troupe_tables_create_wait(t, "users", &by_email, 1), "create users");
    ok(troupe_tables_create_wait(t, "orders", NULL, 0), "create orders");
    ok(troupe_tables_drop_wait(t, "orders"), "drop orders");
    ok(troupe_tables_add_index_wait(t, "users", &by_age), "add by_age");
    for (int i = 0; i < 50; i++) {
        char k[8], email[32];
        snprintf(k, sizeof(k), "u%02d", i);
        snprintf(email, sizeof(email), "u%02d@example.com", i);
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_map(&p, 2);
        troupe_pack_cstr(&p, "email");
        troupe_pack_cstr(&p, email);
        troupe_pack_cstr(&p, "age");
        troupe_pack_int(&p, i);
        size_t n;
        const void *d = troupe_pack_data(&p, &n);
        ok(troupe_table_upsert_wait(t, "users", k, strlen(k), d, n, NULL),
           "upsert");
        troupe_pack_fini(&p);
    }
    troupe_queues_opts qo = {.rt = rt, .db = db, .commit = c};
    ok(troupe_queues_open(&qo, &qs), "queues_open");
    troupe_queue_spec emails = {"emails", 4, 60000};
    troupe_queue_spec jobs = {"jobs", 1, 0};
    ok(troupe_queues_create_wait(qs, &emails), "create emails");
    ok(troupe_queues_create_wait(qs, &jobs), "create jobs");
    for (int i = 0; i < 10; i++) {
        char id[8];
        snprintf(id, sizeof(id), "e%d", i);
        publish(qs, "emails", id, 1000);
    }
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof(id), "j%d", i);
        publish(qs, "jobs", id, DUE_FAR);
    }
    troupe_queue_page *pg = NULL;
    ok(troupe_queue_lookup_wait(qs, "emails", "e0", 2, &pg), "lookup");
    if (pg->n != 1)
        ok(TROUPE_ESTATE, "lookup e0");
    ok(troupe_queue_ack_wait(qs, "emails", pg->items[0].skey,
                             pg->items[0].skey_len, TROUPE_SYNC_ON),
       "ack");
    troupe_queue_page_destroy(pg);
    troupe_queue_info *qi = NULL;
    size_t nq = 0;
    ok(troupe_queues_list(qs, &qi, &nq), "queues_list");
    for (size_t i = 0; i < nq; i++) {
        troupe_queue_stats *st = NULL;
        ok(troupe_queue_stats_wait(qs, qi[i].name, &st), "stats");
        printf("queue %s id %llu partitions %u retention_ms %lld pending %llu "
               "completed %llu\n",
               qi[i].name, (unsigned long long)qi[i].id, qi[i].partitions,
               (long long)qi[i].retention_ms, (unsigned long long)st->pending,
               (unsigned long long)st->completed);
        troupe_free(st);
    }
    troupe_free(qi);
    ok(troupe_queues_stop_wait(qs), "queues_stop");
    troupe_queues_destroy(qs);
    ok(troupe_tables_stop_wait(t), "tables_stop");
    troupe_tables_destroy(t);
    ok(troupe_runtime_shutdown_wait(rt), "shutdown");
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(c);
    ok(troupe_db_close(db), "db_close");
    return 0;
}
EOF

nice -n 10 cmake -S "$wt" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release \
    -DTROUPE_TESTS=OFF >/dev/null
nice -n 10 cmake --build "$tmp/build" -j2 --target catalog_v1_gen >/dev/null
mkdir "$tmp/db"
"$tmp/build/catalog_v1_gen/catalog_v1_gen" "$tmp/db/catalog-v1" > "$tmp/queues.txt"
rm -f "$tmp/db/catalog-v1/TROUPE-RESERVE"
(cd "$tmp/db" && tar -czf "$out/catalog-v1.tar.gz" --sort=name \
    --owner=0 --group=0 --numeric-owner --mtime=@0 catalog-v1)
{
    echo "# catalog-v1.tar.gz: written by troupe $(git -C "$repo" rev-parse --short "$commit") (catalog format 1)"
    echo "# by scripts/make-catalog-v1-fixture.sh; read by tests/actors/check_catalog.c"
    echo "table users id 1 rows 50"
    echo "index users by_email id 2 unique 1"
    echo "index users by_age id 4 unique 0"
    echo "dropped orders id 3"
    cat "$tmp/queues.txt"
    echo "due emails 1000"
    echo "due jobs $((4102444800000))"
    echo "seq meta 4"
    echo "seq queues 3"
} > "$out/catalog-v1.txt"
echo "wrote $out/catalog-v1.tar.gz and $out/catalog-v1.txt"
