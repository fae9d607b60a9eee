/*
 * The catalog object (troupe/catalog.h): open (the `meta` family, the
 * format and its migration, the counter), the owners attached to it,
 * the one id counter, stop and destroy; and the name rule of every
 * entry.
 *
 * On a read-only db (troupe_db_opts.read_only) the catalog writes
 * nothing, ever: no `meta` family created (none is an empty catalog),
 * no migration (a format-1 database with queues to move is refused), no
 * ids handed out, and every meta batch fails with EREADONLY; the owners'
 * DDL calls check troupe__catalog_writable before they queue anything.
 *
 * The counter is in memory under `mu` and stored by the owners
 * (troupe__meta_put_seq) before they create anything named after an id,
 * so a crash between the two leaves at worst unused ids, never a family
 * a later create would collide with. One counter for every kind makes an
 * id name one object of one kind, whatever its family letter.
 */
#include <stdlib.h>
#include <string.h>

#include "catalog_int.h"
#include "troupe/alloc.h"
#include "troupe/internal/post.h"
#include "troupe/internal/runtime.h"
#include "troupe/internal/waiter.h"

troupe_runtime *
troupe__catalog_rt(const troupe_catalog *c)
{
    return c->rt;
}

troupe_db *
troupe__catalog_db(const troupe_catalog *c)
{
    return c->db;
}

troupe_cf *
troupe__catalog_meta(const troupe_catalog *c)
{
    return c->meta;
}

troupe_err
troupe_catalog_open(const troupe_catalog_opts *o, troupe_catalog **out)
{
    if (out != NULL)
        *out = NULL;
    if (o == NULL || out == NULL || o->rt == NULL || o->db == NULL)
        return TROUPE_EINVAL;
    troupe_catalog *c = troupe_calloc(1, sizeof(*c));
    if (c == NULL)
        return TROUPE_ENOMEM;
    c->rt = o->rt;
    c->db = o->db;
    c->read_only = troupe_db_read_only(c->db);
    pthread_mutex_init(&c->mu, NULL);
    troupe_err e = troupe_db_cf(c->db, "meta", &c->meta);
    if (e == TROUPE_ENOENT && c->read_only)
        e = TROUPE_OK; /* nothing was ever catalogued: an empty catalog */
    else if (e == TROUPE_ENOENT)
        e = troupe_db_cf_create(c->db, "meta", &c->meta);
    if (e == TROUPE_OK)
        e = troupe__catalog_migrate(c, &c->seq);
    if (e != TROUPE_OK) {
        c->state = CATALOG_STOPPED;
        troupe_catalog_destroy(c);
        return e;
    }
    *out = c;
    return TROUPE_OK;
}

bool
troupe_catalog_read_only(const troupe_catalog *c)
{
    return c != NULL && c->read_only;
}

troupe_err
troupe__catalog_writable(const troupe_catalog *c, const char *call)
{
    if (!c->read_only)
        return TROUPE_OK;
    return troupe__errf(TROUPE_EREADONLY, "%s: the database is open read-only",
                        call);
}

troupe_err
troupe__catalog_attach(troupe_catalog *c)
{
    pthread_mutex_lock(&c->mu);
    troupe_err e = c->state == CATALOG_RUNNING ? TROUPE_OK : TROUPE_ESTATE;
    if (e == TROUPE_OK)
        c->owners++;
    pthread_mutex_unlock(&c->mu);
    return e;
}

void
troupe__catalog_detach(troupe_catalog *c)
{
    pthread_mutex_lock(&c->mu);
    c->owners--;
    pthread_mutex_unlock(&c->mu);
}

troupe_err
troupe__catalog_ids(troupe_catalog *c, uint64_t n, uint64_t *first)
{
    if (c->read_only)
        return TROUPE_EREADONLY; /* no id is ever stored */
    pthread_mutex_lock(&c->mu);
    troupe_err e = n == 0 || c->seq > UINT64_MAX - n ? TROUPE_EFULL : TROUPE_OK;
    if (e == TROUPE_OK) {
        *first = c->seq + 1;
        c->seq += n;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

uint64_t
troupe__catalog_seq(troupe_catalog *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t s = c->seq;
    pthread_mutex_unlock(&c->mu);
    return s;
}

static void
stop_done(void *arg, troupe_runtime *rt)
{
    troupe_catalog *c = arg;
    pthread_mutex_lock(&c->mu);
    c->state = CATALOG_STOPPED;
    troupe_catalog_stop_cb cb = c->stop_cb;
    void *cb_arg = c->stop_arg;
    pthread_mutex_unlock(&c->mu);
    cb(c, cb_arg);
}

void
troupe__catalog_stopped(troupe_catalog *c)
{
    troupe__post_or_run(c->rt, stop_done, c);
}

troupe_err
troupe_catalog_stop(troupe_catalog *c, troupe_catalog_stop_cb cb, void *arg)
{
    if (c == NULL || cb == NULL)
        return TROUPE_EINVAL;
    pthread_mutex_lock(&c->mu);
    troupe_err e = c->state != CATALOG_RUNNING || c->owners > 0 ? TROUPE_ESTATE
                                                                : TROUPE_OK;
    bool now = false;
    if (e == TROUPE_OK) {
        c->state = CATALOG_STOPPING;
        c->stop_cb = cb;
        c->stop_arg = arg;
        now = !c->dq_busy; /* else the queue's last job stops it (ddl.c) */
    }
    pthread_mutex_unlock(&c->mu);
    if (now)
        troupe__catalog_stopped(c);
    return e;
}

static void
wake_stopped(troupe_catalog *c, void *arg)
{
    troupe__waiter_release(arg, TROUPE_OK, NULL);
}

troupe_err
troupe_catalog_stop_wait(troupe_catalog *c)
{
    troupe_err be = troupe__block_check("troupe_catalog_stop_wait");
    if (be != TROUPE_OK)
        return be;
    troupe__waiter w;
    troupe__waiter_init(&w, 1);
    return troupe__waiter_finish(&w, troupe_catalog_stop(c, wake_stopped, &w),
                                 NULL);
}

void
troupe_catalog_destroy(troupe_catalog *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    bool stopped = c->state == CATALOG_STOPPED;
    pthread_mutex_unlock(&c->mu);
    if (!stopped)
        abort(); /* still serving its owners: stop it first */
    pthread_mutex_destroy(&c->mu);
    troupe_free(c);
}

bool
troupe_catalog_name_valid(const char *name, size_t *len)
{
    if (name == NULL)
        return false;
    size_t n = strnlen(name, TROUPE_CATALOG_NAME_MAX + 1);
    if (n == 0 || n > TROUPE_CATALOG_NAME_MAX)
        return false;
    const unsigned char *p = (const unsigned char *)name, *end = p + n;
    while (p < end) {
        unsigned c = *p++;
        if (c < 0x80)
            continue;
        int k;
        unsigned min, cp;
        if ((c & 0xE0) == 0xC0) {
            k = 1, min = 0x80, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, min = 0x800, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, min = 0x10000, cp = c & 0x07;
        } else {
            return false;
        }
        if (end - p < k)
            return false;
        for (int i = 0; i < k; i++, p++) {
            if ((*p & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (*p & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
    }
    if (len != NULL)
        *len = n;
    return true;
}
