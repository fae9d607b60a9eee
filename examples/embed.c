/*
 * embed: troupe on a host's own libuv loop, from open to a clean close
 * (docs/embedding.md walks through it).
 *
 *   embed DIR
 *
 * Opens the database in DIR (creating it), a commit pipeline, a runtime
 * whose scheduler 0 is this program's loop, the catalog and the tables;
 * then, all in
 * callbacks on that loop: creates the table "notes", writes one row, reads
 * it back and prints it, stops the tables and shuts the runtime down. Once
 * nothing of troupe is left on the loop, uv_run returns by itself; the
 * program frees the tables, stops and frees the catalog, frees the
 * runtime, the pipeline and the db, in that order, and closes the loop. Exits 0
 * only when every step succeeded.
 *
 * Every callback here runs on scheduler 0, the host's loop, so the
 * program's state needs no lock; nothing on this thread may block (no
 * _wait call) once uv_run has started.
 */
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include <troupe/troupe.h>

typedef struct app {
    troupe_runtime *rt;
    troupe_catalog *catalog;
    troupe_tables *tables;
    troupe_err err; /* the first failure, OK while all goes well */
    const char *failed;
} app;

static void
note_failure(app *a, const char *what, troupe_err e)
{
    if (a->err == TROUPE_OK) {
        a->err = e;
        a->failed = what;
    }
}

static void
on_shutdown(troupe_runtime *rt, void *arg)
{
    /* Nothing to do: the runtime has closed its handles, so uv_run
     * returns once the host's own handles are done too. */
}

static void
on_tables_stopped(troupe_tables *t, void *arg)
{
    app *a = arg;
    troupe_err e = troupe_runtime_shutdown(a->rt, on_shutdown, a);
    if (e != TROUPE_OK)
        note_failure(a, "shutdown", e);
}

/* The last step, also on any failure: stop the tables, then the runtime. */
static void
finish(app *a)
{
    troupe_err e = troupe_tables_stop(a->tables, on_tables_stopped, a);
    if (e != TROUPE_OK) {
        note_failure(a, "stop tables", e);
        on_tables_stopped(a->tables, a);
    }
}

static void
on_read(troupe_err err, troupe_rows *rows, void *arg)
{
    app *a = arg;
    if (err != TROUPE_OK) {
        note_failure(a, "get", err);
    } else {
        /* The document is msgpack: {"text": "..."}. */
        troupe_reader r;
        const char *k = NULL, *v = NULL;
        size_t kl = 0, vl = 0;
        troupe_reader_init(&r, rows->rows[0].doc, rows->rows[0].doc_len);
        troupe_read_map_n(&r, 1);
        troupe_read_str(&r, 16, &k, &kl);
        troupe_read_str(&r, 256, &v, &vl);
        if (troupe_read_end(&r) != TROUPE_OK)
            note_failure(a, "read row", r.err);
        else
            printf("notes/first: %.*s = %.*s\n", (int)kl, k, (int)vl, v);
    }
    troupe_rows_destroy(rows); /* the callback owns rows */
    finish(a);
}

static void
on_written(troupe_err err, troupe_rows *rows, void *arg)
{
    app *a = arg;
    troupe_rows_destroy(rows); /* NULL for writes; harmless */
    if (err == TROUPE_OK)
        err = troupe_table_get(a->tables, "notes", "first", 5, on_read, a);
    if (err != TROUPE_OK) {
        note_failure(a, "write or get", err);
        finish(a);
    }
}

static void
on_created(troupe_tables *t, troupe_err err, void *arg)
{
    app *a = arg;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "text");
    troupe_pack_cstr(&p, "written and read on the host's loop");
    size_t len = 0;
    const void *doc = troupe_pack_data(&p, &len);
    if (err == TROUPE_OK)
        err = p.err;
    /* The call copies the document before it returns. */
    if (err == TROUPE_OK)
        err = troupe_table_upsert(t, "notes", "first", 5, doc, len, NULL,
                                  on_written, a);
    troupe_pack_fini(&p);
    if (err != TROUPE_OK) {
        note_failure(a, "create or write", err);
        finish(a);
    }
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: embed DIR\n");
        return 2;
    }
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0)
        return 1;
    app a = {.err = TROUPE_OK};
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_err e = troupe_db_open(argv[1], NULL, &db);
    if (e == TROUPE_OK)
        e = troupe_commit_create(db, NULL, &commit);
    troupe_runtime_opts ro = {.loop = &loop};
    if (e == TROUPE_OK)
        e = troupe_runtime_create(&a.rt, &ro);
    /* Opening blocks for the disk, so it comes before uv_run. */
    troupe_catalog_opts co = {.rt = a.rt, .db = db};
    if (e == TROUPE_OK)
        e = troupe_catalog_open(&co, &a.catalog);
    troupe_tables_opts to = {.catalog = a.catalog, .commit = commit};
    if (e == TROUPE_OK)
        e = troupe_tables_open(&to, &a.tables);
    if (e == TROUPE_OK)
        e = troupe_tables_create(a.tables, "notes", NULL, 0, on_created, &a);
    if (e != TROUPE_OK) {
        note_failure(&a, "open", e);
        if (a.tables != NULL)
            finish(&a);
        else if (a.rt != NULL)
            troupe_runtime_shutdown(a.rt, on_shutdown, &a);
    }
    if (a.rt != NULL)
        uv_run(&loop, UV_RUN_DEFAULT); /* returns after on_shutdown */

    /* Scheduler 0 has closed: the catalog's stop calls back here and now,
     * once the tables on it are gone. */
    troupe_tables_destroy(a.tables);
    if (a.catalog != NULL &&
        (e = troupe_catalog_stop_wait(a.catalog)) != TROUPE_OK)
        note_failure(&a, "stop catalog", e);
    troupe_catalog_destroy(a.catalog);
    troupe_runtime_destroy(a.rt);
    troupe_commit_destroy(commit);
    if ((e = troupe_db_close(db)) != TROUPE_OK)
        note_failure(&a, "close db", e);
    if (uv_loop_close(&loop) != 0) {
        fprintf(stderr, "embed: handles left on the loop\n");
        return 1;
    }
    if (a.err != TROUPE_OK) {
        fprintf(stderr, "embed: %s: %s\n", a.failed, troupe_err_name(a.err));
        return 1;
    }
    return 0;
}
