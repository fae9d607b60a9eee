/*
 * A program built against an installed troupe (tests/install/install.sh),
 * the way a user builds one: <troupe/troupe.h> only, plain -std=c11
 * -pedantic, no feature macro. Standalone mode (the runtime's own
 * threads), so it needs no <uv.h>: it opens a db in DIR, a runtime and the
 * tables, puts one row and reads it back, then closes everything in the
 * order the headers give and prints what it read. Exits 0 only when the
 * row came back as written and every close succeeded.
 */
#include <stdio.h>
#include <string.h>

#include <troupe/troupe.h>

static int
fail(const char *what, troupe_err e)
{
    fprintf(stderr, "standalone: %s: %s (%s)\n", what, troupe_err_name(e),
            troupe_strerror(e));
    return 1;
}

/* Reads the row's "greeting" string into out (cap bytes). */
static troupe_err
read_greeting(const troupe_row *row, char *out, size_t cap)
{
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, row->doc, row->doc_len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n; i++) {
        const char *k, *v;
        size_t kl, vl;
        troupe_read_str(&r, 64, &k, &kl);
        if (troupe_read_peek(&r) != TROUPE_MP_STR) {
            troupe_read_skip(&r);
            continue;
        }
        troupe_read_str(&r, cap - 1, &v, &vl);
        if (r.err == TROUPE_OK && kl == 8 && memcmp(k, "greeting", 8) == 0) {
            memcpy(out, v, vl);
            out[vl] = '\0';
            return TROUPE_OK;
        }
    }
    return r.err != TROUPE_OK ? r.err : TROUPE_ENOENT;
}

static int
use_tables(troupe_tables *t)
{
    troupe_err e = troupe_tables_create_wait(t, "greetings", NULL, 0);
    if (e != TROUPE_OK)
        return fail("create table", e);
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "greeting");
    troupe_pack_cstr(&p, "hello from an installed troupe");
    size_t len = 0;
    const void *doc = troupe_pack_data(&p, &len);
    e = p.err != TROUPE_OK
            ? p.err
            : troupe_table_upsert_wait(t, "greetings", "k1", 2, doc, len, NULL);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        return fail("upsert", e);
    troupe_rows *rows = NULL;
    if ((e = troupe_table_get_wait(t, "greetings", "k1", 2, &rows)) !=
        TROUPE_OK)
        return fail("get", e);
    char got[64];
    e = rows->n == 1 ? read_greeting(&rows->rows[0], got, sizeof(got))
                     : TROUPE_ENOENT;
    troupe_rows_destroy(rows);
    if (e != TROUPE_OK)
        return fail("read row", e);
    if (strcmp(got, "hello from an installed troupe") != 0) {
        fprintf(stderr, "standalone: read back \"%s\"\n", got);
        return 1;
    }
    printf("troupe %s (built against %s): %s\n", troupe_version(),
           TROUPE_VERSION_STRING, got);
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: standalone DIR\n");
        return 2;
    }
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_catalog *cat = NULL;
    troupe_tables *t = NULL;
    troupe_err e = troupe_db_open(argv[1], NULL, &db);
    if (e != TROUPE_OK)
        return fail("open db", e);
    int rc = 1;
    if ((e = troupe_commit_create(db, NULL, &commit)) != TROUPE_OK) {
        fail("commit pipeline", e);
        goto close_db;
    }
    troupe_runtime_opts ro = {.schedulers = 1};
    if ((e = troupe_runtime_create(&rt, &ro)) != TROUPE_OK) {
        fail("runtime", e);
        goto close_commit;
    }
    troupe_catalog_opts co = {.rt = rt, .db = db};
    if ((e = troupe_catalog_open(&co, &cat)) != TROUPE_OK) {
        fail("open catalog", e);
        goto close_rt;
    }
    troupe_tables_opts to = {.catalog = cat, .commit = commit};
    if ((e = troupe_tables_open(&to, &t)) != TROUPE_OK) {
        fail("open tables", e);
        goto close_cat;
    }
    rc = use_tables(t);
    if ((e = troupe_tables_stop_wait(t)) != TROUPE_OK)
        rc = fail("stop tables", e);
    troupe_tables_destroy(t);
close_cat:
    if ((e = troupe_catalog_stop_wait(cat)) != TROUPE_OK)
        rc = fail("stop catalog", e);
    troupe_catalog_destroy(cat);
close_rt:
    if ((e = troupe_runtime_shutdown_wait(rt)) != TROUPE_OK)
        rc = fail("shutdown", e);
    troupe_runtime_destroy(rt);
close_commit:
    troupe_commit_destroy(commit);
close_db:
    if ((e = troupe_db_close(db)) != TROUPE_OK)
        rc = fail("close db", e);
    return rc;
}
