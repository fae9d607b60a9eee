/*
 * Index builds, the actor's half: the walk over the table's keys and the
 * reindex ops it queues, and the schema switch that hands the actor a new
 * schema and build. build.c is the catalog's half (the entry update that
 * starts a build, its saved position, its finalize). Owns tstate.build
 * while the actor runs it.
 *
 * A build lists the table's keys in batches of BUILD_BATCH (a scan on a
 * worker) and queues one reindex op per key behind that key's lock, so it
 * reads what the writes before it committed and writes after it see its
 * entries. It starts only once no write prepared with an older schema is
 * still running: every write that starts after the switch maintains the
 * new index itself, and every row committed before is listed by a later
 * scan step (the scan moves forward by key, one step after the other).
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"
#include "troupe/storage.h"

/* Rows an index build reindexes per step. */
#define BUILD_BATCH 64

typedef struct kjob {
    troupe_db *db;
    troupe_cf *cf_t;
    troupe_cf *meta; /* the build's, copied: the build may end first */
    uint64_t table_id, index_id;
    unsigned char *after;
    size_t alen;
    troupe_err err;
    troupe_page *page;
} kjob;

static void
kjob_free(void *arg)
{
    kjob *j = arg;
    troupe_page_destroy(j->page);
    troupe_free(j->after);
    troupe_free(j);
}

static void
keys_work(void *arg)
{
    kjob *j = arg;
    j->err = TROUPE_OK;
    if (j->meta != NULL && j->alen > 0)
        j->err = troupe__tables_build_save(j->db, j->meta, j->table_id,
                                           j->index_id, j->after, j->alen);
    if (j->err == TROUPE_OK)
        j->err = troupe_db_scan(j->db, j->cf_t, NULL, NULL, j->after, j->alen,
                                BUILD_BATCH, false, &j->page);
}

static void
build_finish(tstate *s, troupe_err err)
{
    tbuild *b = s->build;
    s->build = NULL;
    troupe_free(b->cursor);
    b->cursor = NULL;
    troupe__tables_build_done(b, err);
}

void
troupe__build_step(troupe_actor *self, tstate *s)
{
    tbuild *b = s->build;
    if (b == NULL || b->scanning || b->outstanding > 0)
        return;
    if (!b->started) {
        if (s->writes.old_running > 0)
            return; /* writes of an older schema still running */
        b->started = true;
    }
    if (b->err != TROUPE_OK) {
        build_finish(s, b->err);
        return;
    }
    kjob *j = troupe_calloc(1, sizeof(*j));
    if (j != NULL && b->clen > 0 && (j->after = troupe_malloc(b->clen)))
        memcpy(j->after, b->cursor, j->alen = b->clen);
    if (j == NULL || (b->clen > 0 && j->after == NULL)) {
        troupe_free(j);
        build_finish(s, TROUPE_ENOMEM);
        return;
    }
    j->db = s->cfg.db;
    j->cf_t = s->cfg.cf_t;
    j->meta = b->meta;
    j->table_id = b->table_id;
    j->index_id = b->index_id;
    troupe_err e =
        troupe_work_submit(self, keys_work, j, TABLE_BUILD_KEYS, kjob_free);
    if (e != TROUPE_OK) {
        kjob_free(j);
        build_finish(s, e);
        return;
    }
    b->scanning = true;
}

static void
build_op_done(troupe_actor *self, tstate *s, troupe_err err)
{
    tbuild *b = s->build;
    if (b == NULL)
        return;
    if (err != TROUPE_OK && b->err == TROUPE_OK)
        b->err = err;
    if (--b->outstanding == 0)
        troupe__build_step(self, s);
}

/* A reindex op ended (its wop.done). */
static void
build_op_release(troupe_actor *self, tstate *s, wop *op)
{
    build_op_done(self, s, op->err);
}

troupe_err
troupe__build_h_keys(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    kjob *j = m->ptr;
    tbuild *b = s->build;
    if (j == NULL)
        return troupe__table_no_payload(self, m);
    if (b == NULL) {
        kjob_free(j);
        return TROUPE_OK;
    }
    b->scanning = false;
    if (b->err != TROUPE_OK || j->err != TROUPE_OK || j->page->n == 0) {
        troupe_err e = b->err != TROUPE_OK ? b->err : j->err;
        kjob_free(j);
        build_finish(s, e);
        return TROUPE_OK;
    }
    const troupe_page *pg = j->page;
    unsigned char *c = troupe_realloc(b->cursor, pg->cursor_len);
    if (c == NULL) {
        kjob_free(j);
        build_finish(s, TROUPE_ENOMEM);
        return TROUPE_OK;
    }
    memcpy(c, pg->cursor, pg->cursor_len);
    b->cursor = c;
    b->clen = pg->cursor_len;
    /* Count them all first: an op may finish inside enqueue. */
    b->outstanding = pg->n + 1;
    for (size_t i = 0; i < pg->n; i++) {
        wop *op = troupe__wop_new(self, s, TABLE_REINDEX, pg->items[i].key,
                                  pg->items[i].key_len, NULL, 0, 0, false);
        troupe_err e = TROUPE_ENOMEM;
        if (op != NULL) {
            op->build = true;
            op->done = build_op_release;
            e = troupe__write_enqueue(self, s, op);
        }
        if (e != TROUPE_OK)
            build_op_done(self, s, e);
    }
    kjob_free(j);
    build_op_done(self, s, TROUPE_OK);
    return TROUPE_OK;
}

troupe_err
troupe__build_h_switch(troupe_actor *self, void *st, const troupe_msg *m)
{
    tstate *s = st;
    tswitch *sw = m->ptr;
    if (sw == NULL)
        return troupe__table_no_payload(self, m);
    troupe__tschema_release(s->cfg.schema);
    s->cfg.schema = sw->schema;
    s->writes.gen++;
    s->writes.old_running = s->writes.nrunning;
    if (sw->build != NULL) {
        if (s->build != NULL) /* one at a time: the catalog ensures it */
            troupe__tables_build_done(sw->build, TROUPE_EBUSY);
        else
            s->build = sw->build;
    }
    troupe_free(sw);
    troupe__build_step(self, s);
    return TROUPE_OK;
}

void
troupe__table_switch(troupe_runtime *rt, troupe_addr a, tschema *schema,
                     tbuild *build)
{
    tswitch *sw = troupe_malloc(sizeof(*sw));
    troupe_msg *m = NULL;
    if (sw != NULL &&
        troupe_msg_create(&m, TABLE_SWITCH, NULL, 0) == TROUPE_OK) {
        sw->schema = schema;
        sw->build = build;
        m->ptr = sw;
        if (troupe_runtime_send(rt, a, &m) == TROUPE_OK)
            return;
    }
    troupe_free(sw);
    troupe__tschema_release(schema);
    if (build != NULL)
        troupe__tables_build_done(build, TROUPE_ECLOSED);
}

void
troupe__build_stop(troupe_actor *self, tstate *s)
{
    if (s->build != NULL)
        build_finish(s, TROUPE_ECLOSED);
}
