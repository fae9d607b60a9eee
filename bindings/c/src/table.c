/*
 * Table requests: create, get, put, delete, scan and index queries. Each
 * is the asynchronous call of troupe/table.h with a request of its own as
 * the callback's argument; the callback (on scheduler 0) turns the result
 * into the completion's body and posts it. A call the tables refuse at
 * once cancels the request: no completion, the error returned.
 */
#include <string.h>

#include "node.h"
#include "troupe/alloc.h"
#include "troupe/internal/runtime.h"

static void
created(troupe_tables *t, troupe_err err, void *arg)
{
    abi_req_done(arg, err, NULL, 0);
}

int
troupe_abi_table_create(troupe_abi *n, uint64_t req, const char *name,
                        const void *indexes, size_t len)
{
    abi_clear();
    if (indexes == NULL && len > 0)
        return abi_ret(troupe__errf(
            TROUPE_EINVAL, "table create: NULL indexes of %zu bytes", len));
    abi_specs sp;
    troupe_err e = abi_specs_parse(indexes, len, &sp);
    if (e != TROUPE_OK)
        return abi_ret(e);
    abi_req *r;
    if ((e = abi_req_begin(n, req, "table create", &r)) != TROUPE_OK) {
        abi_specs_free(&sp);
        return abi_ret(e);
    }
    e = troupe_tables_create(n->tables, name, sp.specs, sp.n, created, r);
    abi_specs_free(&sp); /* copied during the call */
    return abi_req_end(n, r, e);
}

int
troupe_abi_table_get(troupe_abi *n, uint64_t req, const char *table,
                     const void *key, size_t klen)
{
    abi_clear();
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "table get", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    return abi_req_end(
        n, r, troupe_table_get(n->tables, table, key, klen, abi_req_got, r));
}

static void
written(troupe_err err, troupe_rows *rows, void *arg)
{
    troupe_rows_destroy(rows);
    abi_req_done(arg, err, NULL, 0);
}

int
troupe_abi_table_put(troupe_abi *n, uint64_t req, const char *table,
                     const void *key, size_t klen, const void *doc, size_t dlen)
{
    abi_clear();
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "table put", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    troupe_write_opts wo = {.sync = n->sync};
    return abi_req_end(n, r,
                       troupe_table_upsert(n->tables, table, key, klen, doc,
                                           dlen, &wo, written, r));
}

int
troupe_abi_table_delete(troupe_abi *n, uint64_t req, const char *table,
                        const void *key, size_t klen)
{
    abi_clear();
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "table delete", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    troupe_write_opts wo = {.sync = n->sync};
    return abi_req_end(
        n, r,
        troupe_table_delete(n->tables, table, key, klen, &wo, written, r));
}

static void
scanned(troupe_err err, troupe_rows *rows, void *arg)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (err == TROUPE_OK)
        err = abi_pack_rows(rows, &sb);
    troupe_rows_destroy(rows);
    abi_req_done_packed(arg, err, &sb);
}

int
troupe_abi_table_scan(troupe_abi *n, uint64_t req, const char *table,
                      const void *start, size_t slen, const void *end,
                      size_t elen, const void *after, size_t alen,
                      uint32_t limit, int32_t reverse)
{
    abi_clear();
    if (reverse != 0 && reverse != 1)
        return abi_ret(troupe__errf(TROUPE_EINVAL,
                                    "table scan: reverse %d; 0 or 1", reverse));
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "table scan", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    troupe_scan_opts so = {.start = start,
                           .start_len = slen,
                           .end = end,
                           .end_len = elen,
                           .after = after,
                           .after_len = alen,
                           .limit = limit,
                           .reverse = reverse == 1};
    return abi_req_end(n, r,
                       troupe_table_scan(n->tables, table, &so, scanned, r));
}

static void
queried(troupe_err err, troupe_index_result *res, void *arg)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (err == TROUPE_OK)
        err = abi_pack_hits(res, &sb);
    troupe_index_result_destroy(res);
    abi_req_done_packed(arg, err, &sb);
}

int
troupe_abi_index_query(troupe_abi *n, uint64_t req, const char *table,
                       const char *index, const void *values, size_t vlen,
                       const void *from, size_t flen, const void *to,
                       size_t tlen, const void *after, size_t alen,
                       uint32_t limit, int32_t reverse, int32_t rows)
{
    abi_clear();
    if ((reverse != 0 && reverse != 1) || (rows != 0 && rows != 1))
        return abi_ret(troupe__errf(TROUPE_EINVAL,
                                    "index query: reverse %d, rows %d; each "
                                    "0 or 1",
                                    reverse, rows));
    if ((values == NULL && vlen > 0) || (from == NULL && flen > 0) ||
        (to == NULL && tlen > 0) || (after == NULL && alen > 0))
        return abi_ret(troupe__errf(TROUPE_EINVAL,
                                    "index query: a NULL pointer with a "
                                    "length"));
    abi_req *r;
    troupe_err e = abi_req_begin(n, req, "index query", &r);
    if (e != TROUPE_OK)
        return abi_ret(e);
    troupe_index_query q = {.values = vlen ? values : NULL,
                            .values_len = vlen,
                            .from = flen ? from : NULL,
                            .from_len = flen,
                            .to = tlen ? to : NULL,
                            .to_len = tlen,
                            .reverse = reverse == 1,
                            .limit = limit,
                            .after = alen ? after : NULL,
                            .after_len = alen,
                            .rows = rows == 1};
    return abi_req_end(
        n, r, troupe_tables_query(n->tables, table, index, &q, queried, r));
}
