/* Private to actors/catalog: the catalog object. catalog.c owns it (the
 * counter, the owners, the state); ddl.c owns the DDL queue (dq_*), which
 * shares `mu` with the rest. */
#ifndef TROUPE_CATALOG_INT_H
#define TROUPE_CATALOG_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "troupe/internal/catalog.h"

enum { CATALOG_RUNNING = 0, CATALOG_STOPPING, CATALOG_STOPPED };

struct troupe_catalog {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_cf *meta;    /* NULL: a read-only db without one (empty) */
    bool read_only;     /* the db's, at open: nothing is ever written */
    pthread_mutex_t mu; /* everything below */
    uint64_t seq;       /* the highest id handed out */
    int owners;         /* tables and queues attached */
    int state;          /* CATALOG_RUNNING, _STOPPING, _STOPPED */
    troupe_catalog_stop_cb stop_cb;
    void *stop_arg;
    /* ddl.c: the jobs behind the head, and whether a head runs (or
     * waits) */
    troupe__ddl *dq_head, *dq_tail;
    bool dq_busy;
};

/* ddl.c: a stopping catalog whose queue has drained fires its stop
 * callback (catalog.c). Called without mu. */
void
troupe__catalog_stopped(troupe_catalog *c);

/* catalog.c, at open: the format marker read, and a format-1 database
 * migrated (migrate.c); *seq gets the stored counter. On a read-only
 * catalog nothing is written: meta may be NULL (read as format 1 with
 * nothing in it), and a database with queues to move is refused (ESTATE,
 * with its detail). Blocks. */
troupe_err
troupe__catalog_migrate(troupe_catalog *c, uint64_t *seq);

#endif
