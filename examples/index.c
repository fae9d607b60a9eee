/*
 * index: a table with a secondary index, and a query on it.
 *
 *   index DIR
 *
 * The table "books" has its rows under the primary key (an ISBN) and an
 * index by_author on the document's "author" string. The index is kept in
 * the same batch as every row write, so a query sees exactly what is
 * committed. The program writes four books (upserts: a second run writes
 * the same rows again), then asks the index for every book by one author,
 * with the documents (rows = true), and prints their titles in the index's
 * order (by author, then primary key). Exits 0 when it found both.
 */
#include <stdio.h>
#include <string.h>

#include <troupe/troupe.h>

static const char *const books[][3] = {
    /* isbn, author, title */
    {"0441478123", "Ursula K. Le Guin", "The Left Hand of Darkness"},
    {"0060512750", "Ursula K. Le Guin", "The Dispossessed"},
    {"0345391802", "Douglas Adams", "The Hitchhiker's Guide to the Galaxy"},
    {"0553293354", "Isaac Asimov", "Foundation"},
};

static troupe_err
put_book(troupe_tables *t, const char *const b[3])
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 2);
    troupe_pack_cstr(&p, "author");
    troupe_pack_cstr(&p, b[1]);
    troupe_pack_cstr(&p, "title");
    troupe_pack_cstr(&p, b[2]);
    size_t len = 0;
    const void *doc = troupe_pack_data(&p, &len);
    troupe_err e = p.err != TROUPE_OK
                       ? p.err
                       : troupe_table_upsert_wait(t, "books", b[0],
                                                  strlen(b[0]), doc, len, NULL);
    troupe_pack_fini(&p);
    return e;
}

/* Prints the "title" of one document (a msgpack map). */
static void
print_title(const troupe_index_hit *h)
{
    troupe_reader r;
    uint32_t n = 0;
    troupe_reader_init(&r, h->val, h->val_len);
    troupe_read_map(&r, &n);
    for (uint32_t i = 0; i < n && r.err == TROUPE_OK; i++) {
        const char *k = NULL, *v = NULL;
        size_t kl = 0, vl = 0;
        troupe_read_str(&r, 64, &k, &kl);
        troupe_read_str(&r, 256, &v, &vl);
        if (r.err == TROUPE_OK && kl == 5 && memcmp(k, "title", 5) == 0)
            printf("  %.*s: %.*s\n", (int)h->pk_len, (const char *)h->pk,
                   (int)vl, v);
    }
}

static troupe_err
run(troupe_tables *t)
{
    static const troupe_index_field author[] = {
        {.path = "author", .type = TROUPE_FIELD_STRING}};
    static const troupe_index_spec idx[] = {
        {.name = "by_author", .fields = author, .n_fields = 1}};
    /* idempotent: a later run finds the table with this index */
    troupe_err e = troupe_tables_create_wait(t, "books", idx, 1);
    for (size_t i = 0; i < sizeof(books) / sizeof(books[0]) && e == TROUPE_OK;
         i++)
        e = put_book(t, books[i]);
    if (e != TROUPE_OK)
        return e;
    /* values: a msgpack array of the index's leading values */
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, 1);
    troupe_pack_cstr(&p, "Ursula K. Le Guin");
    troupe_index_query q = {.limit = 10, .rows = true};
    q.values = troupe_pack_data(&p, &q.values_len);
    troupe_index_result *res = NULL;
    e = p.err != TROUPE_OK
            ? p.err
            : troupe_tables_query_wait(t, "books", "by_author", &q, &res);
    troupe_pack_fini(&p);
    if (e != TROUPE_OK)
        return e;
    printf("books by Ursula K. Le Guin: %zu\n", res->n);
    for (size_t i = 0; i < res->n; i++)
        print_title(&res->hits[i]);
    size_t found = res->n;
    troupe_index_result_destroy(res);
    return found == 2 ? TROUPE_OK : TROUPE_ENOENT;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: index DIR\n");
        return 2;
    }
    troupe_db *db = NULL;
    troupe_commit *commit = NULL;
    troupe_runtime *rt = NULL;
    troupe_catalog *cat = NULL;
    troupe_tables *t = NULL;
    troupe_runtime_opts ro = {.schedulers = 1};
    troupe_err e = troupe_db_open(argv[1], NULL, &db);
    if (e == TROUPE_OK)
        e = troupe_commit_create(db, NULL, &commit);
    if (e == TROUPE_OK)
        e = troupe_runtime_create(&rt, &ro);
    troupe_catalog_opts co = {.rt = rt, .db = db};
    if (e == TROUPE_OK)
        e = troupe_catalog_open(&co, &cat);
    troupe_tables_opts to = {.catalog = cat, .commit = commit};
    if (e == TROUPE_OK)
        e = troupe_tables_open(&to, &t);
    if (e == TROUPE_OK)
        e = run(t);
    if (e != TROUPE_OK)
        fprintf(stderr, "index: %s\n", troupe_err_name(e));
    /* close in the reverse order of opening */
    if (t != NULL)
        troupe_tables_stop_wait(t);
    troupe_tables_destroy(t);
    if (cat != NULL)
        troupe_catalog_stop_wait(cat);
    troupe_catalog_destroy(cat);
    if (rt != NULL)
        troupe_runtime_shutdown_wait(rt);
    troupe_runtime_destroy(rt);
    troupe_commit_destroy(commit);
    if (troupe_db_close(db) != TROUPE_OK)
        e = TROUPE_EBUSY;
    return e == TROUPE_OK ? 0 : 1;
}
