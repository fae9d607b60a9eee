/* Private: the transaction object and what the files of the transaction
 * module (txn.c, write.c, read.c, scan.c, commit.c, versioned.c, remove.c)
 * lend each other. */
#ifndef TROUPE_TXN_INT_H
#define TROUPE_TXN_INT_H

#include "troupe/internal/participant.h"
#include "troupe/internal/waiter.h"
#include "troupe/pack.h"
#include "troupe/txn.h"

enum { TX_OPEN = 0, TX_COMMITTING, TX_DONE };
/* Which protocol the transaction chose with its first read (writes choose
 * none): the two are never mixed. */
enum { MODE_NONE = 0, MODE_ORDINARY, MODE_VERSIONED };

/* The kind of a key the transaction only read. */
#define K_NONE UINT32_MAX

typedef struct xtab {
    char *name;
    troupe_addr addr;
    troupe_cf *cf_t;
    uint64_t id; /* the table's catalog id: its scan cursors name it */
    size_t nkeys;
    size_t nrg;       /* scanned ranges */
    bool sent;        /* a prepare went out: it gets a finish */
    uint64_t pub_ver; /* the version its finish published */
} xtab;

/* A scanned range [start, end) of table `tab`; NULL: unbounded. */
typedef struct xrange {
    uint32_t tab;
    unsigned char *start;
    size_t slen;
    unsigned char *end;
    size_t elen;
} xrange;

typedef struct xkey {
    uint32_t tab;
    uint32_t kind; /* K_NONE: read only; TROUPE__PART_INSERT.. or
                      TROUPE__PART_DEL_ANY/ABSENT */
    int64_t expires;
    uint64_t ver;     /* versioned read: the version the caller read; 0: none */
    uint32_t nwrites; /* buffered writes of the key (counted up to 2) */
    bool nostamp;     /* the last write's troupe_write_opts.no_timestamps */
    unsigned char *doc;
    size_t dlen;
    size_t klen;
    unsigned char key[];
} xkey;

/* A transaction's commit: commit.c's (troupe_txn_commit and, in
 * versioned.c, troupe_txn_commit_version set cb or vcb and arg before
 * starting it; txn.c frees conf and rcpt at destroy). */
typedef struct txcommit {
    troupe_sync sync;
    uint64_t t0; /* when the commit began (troupe__tables_op_clock) */
    troupe_txn_commit_cb cb;
    troupe_txn_commit_version_cb vcb;
    void *arg;
    size_t order[TROUPE_TXN_TABLES_MAX];
    size_t norder;
    size_t cur;
    bool check_only;
    bool writes;
    bool vprepped;    /* a versioned commit passed its prepare phase */
    uint64_t pub_ver; /* the version its writes get, taken once written */
    troupe_err err;
    troupe_err result;
    _Atomic size_t pending;
    troupe_txn_conflict *conf;
    size_t nconf;
    size_t capconf;
    troupe_txn_receipt *rcpt;
    size_t nrcpt;
    bool xa; /* troupe_txn_prepare: tx->sh->xid names it (xa.c) */
} txcommit;

/* The transaction: txn.c makes and frees it and owns the rest, the key
 * map (keys, slots) and the table list first. */
struct troupe_txn {
    troupe_tables *t;
    ttxn_env env;
    ttxn_shared *sh;
    uint64_t seq0;
    ttxn_active act; /* in env.ts's running list from begin to destroy */
    size_t max_keys;
    size_t max_bytes;
    size_t bytes;
    int state;
    int mode;
    xtab tabs[TROUPE_TXN_TABLES_MAX];
    size_t ntabs;
    xkey **keys;
    size_t nkeys;
    size_t capkeys;
    uint32_t *slots; /* open addressing: index + 1 into keys, 0 empty */
    size_t nslots;
    xrange *ranges;
    size_t nranges;
    troupe_txn_part *parts; /* troupe_txn_attach; done fires once each */
    size_t nparts;
    txcommit commit;
};

/* ---- txn.c: the key map and the table list ---------------------------- */

/* The entry of (tab, key), or NULL. */
xkey *
troupe__txn_kfind(const troupe_txn *tx, uint32_t tab, const void *key,
                  size_t klen);

/* The entry of (tab, key), added (read only) when absent. ETOOBIG past
 * max_keys (keys and ranges), ENOMEM. */
troupe_err
troupe__txn_kget(troupe_txn *tx, uint32_t tab, const void *key, size_t klen,
                 xkey **out);

/* The index of table `name` in tx->tabs, looked up on first use. EINVAL
 * (NULL name), the lookup's errors, ETOOBIG past TROUPE_TXN_TABLES_MAX,
 * ENOMEM. */
troupe_err
troupe__txn_tab_of(troupe_txn *tx, const char *name, uint32_t *out);

/* Frees the key map and the scanned ranges (the read and write sets). */
void
troupe__txn_keys_free(troupe_txn *tx);

/* Tells every participant the outcome, once (the list is emptied). */
void
troupe__txn_parts_done(troupe_txn *tx, troupe_err outcome);

/* ---- read.c: what scans and versioned queries share with reads ----------- */

/* The reply body [[rows...], cursor | nil, more] from rows packed one by
 * one into `items` (row i starts at off[i]). */
troupe_err
troupe__txn_rows_body(troupe_packer *items, const size_t *off, size_t n,
                      const void *cur, size_t clen, bool more,
                      troupe_body **out);

/* A troupe_table_cb that releases the troupe__waiter at arg with the rows. */
void
troupe__txn_wake_rows(troupe_err err, troupe_rows *rows, void *arg);

/* troupe__waiter_finish for the calls that answer rows. */
troupe_err
troupe__txn_finish_rows(troupe__waiter *w, troupe_err started,
                        troupe_rows **rows);

/* ---- commit.c --------------------------------------------------------- */

/* Starts the commit of tx (cb or vcb and arg set by the caller, who
 * checked its state): the prepares in table-name order, or, with nothing
 * to write or check, the callback posted to scheduler 0. */
troupe_err
troupe__txn_commit_start(troupe_txn *tx, troupe_sync sync);

/* Ends a commit whose batch was not submitted: every table that got a
 * prepare gets a finish without publish, then the callback with result.
 * on_s0: the caller runs on scheduler 0. */
void
troupe__txn_abort(troupe_txn *tx, troupe_err result, bool on_s0);
/* Ends a commit without finishing its tables (an XA prepare whose parts
 * stay held): the callback with result, on scheduler 0. */
void
troupe__txn_complete(troupe_txn *tx, troupe_err result, bool on_s0);

/* ---- xa.c --------------------------------------------------------------- */

/* Every table of an XA prepare prepared without conflict: stores the
 * record, then completes (or aborts). */
void
troupe__txn_xa_prepared(troupe_txn *tx, bool on_s0);

/* ---- what remove.c needs ------------------------------------------------ */

/* txn.c: the storage snapshot every read of tx uses (borrowed: lives as
 * long as tx). */
const troupe_snapshot *
troupe__txn_snapshot(const troupe_txn *tx);

/*
 * write.c: buffers a delete of key in table `table` that deletes whatever
 * live row is there at commit and nothing when there is none (a row that
 * expired meanwhile), checked like any write of tx against its begin. The
 * table must still be the one of catalog id `table_id` (its row family
 * "t.<table_id>"): ENOENT when the name now names another table. Errors
 * as troupe_txn_delete otherwise.
 */
troupe_err
troupe__txn_delete_any(troupe_txn *tx, const char *table, uint64_t table_id,
                       const void *key, size_t klen);

#endif
