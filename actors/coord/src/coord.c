/*
 * The coordinator object (troupe/coordinator.h): open (the table, the
 * shards, the reload of what is unfinished), stop, destroy. The calls
 * that hand a transaction to its shard are calls.c's; the readers are
 * read.c's.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "troupe/internal/dispatch.h"
#include "troupe/internal/runtime.h"

#define RELOAD_PAGE 256

int64_t
troupe__coord_now(const troupe_coord *c)
{
    return c->clock != NULL ? c->clock(c->clock_arg) : troupe_now_ms();
}

troupe_err
troupe__coord_row_decode(const troupe_row *r, tc_gtx **out)
{
    troupe_err e = troupe__gtx_decode(r->doc, r->doc_len, out);
    if (e == TROUPE_OK && !troupe_gid_valid((const char *)r->key, r->key_len)) {
        troupe__gtx_free(*out);
        *out = NULL;
        e = TROUPE_ECORRUPT;
    }
    return e;
}

static void
drop_load(void *ptr)
{
    tc_load *ld = ptr;
    troupe__gtx_free(ld->g);
    troupe_free(ld);
}

/* Hands a stored transaction to its shard (g is consumed). */
static troupe_err
load_one(troupe_coord *c, const troupe_row *r, tc_gtx *g)
{
    tc_load *ld = troupe_calloc(1, sizeof(*ld));
    troupe_msg *m = NULL;
    troupe_err e =
        ld == NULL ? TROUPE_ENOMEM : troupe_msg_create(&m, TC_K_LOAD, NULL, 0);
    if (e != TROUPE_OK) {
        troupe_free(ld);
        troupe__gtx_free(g);
        return e;
    }
    ld->g = g;
    ld->gid_len = r->key_len;
    memcpy(ld->gid, r->key, r->key_len);
    m->ptr = ld;
    m->ptr_drop = drop_load;
    uint32_t s =
        troupe_gtx_shard_of((const char *)r->key, r->key_len, c->n_shards);
    return troupe_runtime_send(c->rt, c->shards[s], &m);
}

/* Every stored transaction, a page at a time; the unfinished ones go to
 * their shards. A row that is not one is ECORRUPT naming its key. */
static troupe_err
reload(troupe_coord *c)
{
    uint8_t *after = NULL;
    size_t after_len = 0;
    troupe_err e = TROUPE_OK;
    for (bool more = true; more && e == TROUPE_OK;) {
        troupe_scan_opts so = {
            .after = after, .after_len = after_len, .limit = RELOAD_PAGE};
        troupe_rows *rows = NULL;
        e = troupe_table_scan_wait(c->tables, TROUPE_GTX_TABLE, &so, &rows);
        if (e != TROUPE_OK)
            break;
        for (size_t i = 0; i < rows->n && e == TROUPE_OK; i++) {
            const troupe_row *r = &rows->rows[i];
            tc_gtx *g = NULL;
            e = troupe__coord_row_decode(r, &g);
            if (e != TROUPE_OK) {
                e = troupe__errf(e, "coord: the stored transaction %.*s: %s",
                                 (int)(r->key_len > 128 ? 128 : r->key_len),
                                 (const char *)r->key, troupe_err_name(e));
                break;
            }
            if (troupe__gtx_final(g))
                troupe__gtx_free(g);
            else
                e = load_one(c, r, g);
        }
        more = e == TROUPE_OK && rows->more;
        troupe_free(after);
        after = NULL;
        if (more) {
            after_len = rows->cursor_len;
            if ((after = troupe_malloc(after_len)) == NULL)
                e = TROUPE_ENOMEM;
            else
                memcpy(after, rows->cursor, after_len);
        }
        troupe_rows_destroy(rows);
    }
    troupe_free(after);
    return e;
}

static void
stopped(troupe_runtime *rt, troupe_addr a, void *arg)
{
    (void)rt;
    (void)a;
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

/* Stops the first n shards and waits for them. */
static void
stop_shards(troupe_coord *c, uint32_t n)
{
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    for (uint32_t i = 0; i < n; i++) {
        troupe__waiter_hold(&w);
        if (troupe_actor_stop(c->rt, c->shards[i], stopped, &w) != TROUPE_OK)
            troupe__waiter_release(&w, TROUPE_OK, NULL);
    }
    troupe__waiter_release(&w, TROUPE_OK, NULL);
    (void)troupe__waiter_wait(&w, NULL);
    troupe__waiter_fini(&w);
}

troupe_err
troupe_coord_open_wait(const troupe_coord_opts *o, troupe_coord **out)
{
    troupe_err be = troupe__block_check("troupe_coord_open_wait");
    if (be != TROUPE_OK)
        return be;
    if (o == NULL || out == NULL || o->rt == NULL || o->tables == NULL)
        return troupe__errf(TROUPE_EINVAL, "coord: NULL option");
    uint32_t lo = o->retry_min_ms ? o->retry_min_ms : TROUPE_GTX_RETRY_MIN_MS;
    uint32_t hi = o->retry_max_ms ? o->retry_max_ms : TROUPE_GTX_RETRY_MAX_MS;
    if (o->shards > TROUPE_COORD_SHARDS_MAX || lo > hi ||
        o->sync > TROUPE_SYNC_OFF)
        return troupe__errf(TROUPE_EINVAL,
                            "coord: shards at most %d, retry_min_ms at most "
                            "retry_max_ms, sync one of troupe_sync",
                            TROUPE_COORD_SHARDS_MAX);
    if (o->retention_ms > TROUPE_GTX_RETENTION_MAX_MS)
        return troupe__errf(TROUPE_EINVAL,
                            "coord: retention_ms at most %lld (100 years)",
                            (long long)TROUPE_GTX_RETENTION_MAX_MS);
    troupe_err e = troupe__coord_table_create(o->tables);
    if (e != TROUPE_OK)
        return e;
    troupe_coord *c = troupe_calloc(1, sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->rt = o->rt;
    c->tables = o->tables;
    c->n_shards = o->shards ? o->shards : TROUPE_COORD_SHARDS_DEFAULT;
    c->retry_min_ms = lo;
    c->retry_max_ms = hi;
    c->branch_timeout_ms = o->branch_timeout_ms
                               ? o->branch_timeout_ms
                               : TROUPE_TARGET_TIMEOUT_DEFAULT_MS;
    c->tcc_timeout_ms = o->tcc_timeout_ms == 0  ? TROUPE_TCC_TIMEOUT_DEFAULT_MS
                        : o->tcc_timeout_ms < 0 ? 0
                                                : o->tcc_timeout_ms;
    c->clock = o->clock;
    c->clock_arg = o->clock_arg;
    c->sync = o->sync == TROUPE_SYNC_OFF ? TROUPE_SYNC_OFF : TROUPE_SYNC_ON;
    c->retention_ms =
        o->retention_ms ? o->retention_ms : TROUPE_GTX_RETENTION_DEFAULT_MS;
    if ((c->shards = troupe_calloc(c->n_shards, sizeof(*c->shards))) == NULL) {
        troupe_free(c);
        return TROUPE_ENOMEM;
    }
    troupe__waiter_init(&c->purges, 1);
    troupe__waiter_init(&c->calls, 1);
    uint32_t n = 0;
    for (; n < c->n_shards && e == TROUPE_OK; n++)
        if ((e = troupe__coord_shard_spawn(c, n, &c->shards[n])) != TROUPE_OK)
            break;
    if (e == TROUPE_OK)
        e = reload(c);
    if (e != TROUPE_OK) {
        stop_shards(c, n);
        troupe__waiter_release(&c->calls, TROUPE_OK, NULL);
        (void)troupe__waiter_wait(&c->calls, NULL);
        troupe__waiter_fini(&c->calls);
        troupe__waiter_fini(&c->purges);
        troupe_free(c->shards);
        troupe_free(c);
        return e;
    }
    *out = c;
    return TROUPE_OK;
}

troupe_err
troupe_coord_stop_wait(troupe_coord *c)
{
    troupe_err be = troupe__block_check("troupe_coord_stop_wait");
    if (be != TROUPE_OK)
        return be;
    if (c == NULL)
        return troupe__errf(TROUPE_EINVAL, "coord: NULL");
    int running = 0;
    if (!atomic_compare_exchange_strong(&c->state, &running, 1))
        return troupe__errf(TROUPE_ESTATE, "coord: stopped already");
    /* the purges in flight end first (new ones see the state) */
    troupe__waiter_release(&c->purges, TROUPE_OK, NULL);
    (void)troupe__waiter_wait(&c->purges, NULL);
    stop_shards(c, c->n_shards);
    /* no shard starts a table call now: the ones in flight end */
    troupe__waiter_release(&c->calls, TROUPE_OK, NULL);
    (void)troupe__waiter_wait(&c->calls, NULL);
    return TROUPE_OK;
}

void
troupe_coord_destroy(troupe_coord *c)
{
    if (c == NULL)
        return;
    if (atomic_load(&c->state) != 1)
        abort(); /* still running: troupe_coord_stop_wait first */
    troupe__waiter_fini(&c->purges);
    troupe__waiter_fini(&c->calls);
    troupe_free(c->shards);
    troupe_free(c);
}
