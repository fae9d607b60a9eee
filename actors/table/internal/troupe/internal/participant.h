/*
 * The two-phase protocol between a transaction (actors/txn) and the table
 * actors it touches, served by the table module (participant.c and the
 * versioned queries of qver.c), called by txn: the message kinds and
 * their payloads, the key-version counter a commit takes its version
 * from, and the running-transaction list. Every message here carries a
 * pointer, so it is local only (the runtime refuses such kinds from the
 * network).
 */
#ifndef TROUPE_INTERNAL_PARTICIPANT_H
#define TROUPE_INTERNAL_PARTICIPANT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "troupe/hist.h"
#include "troupe/table.h"

/* Kinds of the table actor's messages for transactions (their values are
 * the table actor's, asserted in table_int.h). */
enum {
    TROUPE__PART_PREPARE = 7, /* ptr: ttxn_prep */
    TROUPE__PART_FINISH = 8,  /* ptr: ttxn_fin */
    TROUPE__PART_QVER = 9     /* ptr: ttxn_qver (query with version) */
};

/* Conflict kinds of a prepare's ECONFLICT body, bits (equal to txn.h's
 * TROUPE_CONFLICT_*, asserted in txn's commit.c). */
enum { TROUPE__PART_STALE = 1, TROUPE__PART_RESERVED = 2 };

/*
 * Two-phase commit between a transaction (actors/txn) and the table
 * actors it touches. The transaction and every participant share one
 * ttxn_shared: the snapshot its reads use, the one batch every table's
 * prepare appends its rows, index entries and manifests to, and the state
 * that decides, exactly once, whether the batch is submitted (SUBMITTED,
 * set by the transaction) or abandoned (ABORTED, set by the transaction or
 * by a participant whose reservation deadline passed first).
 */
enum { TTXN_OPEN = 0, TTXN_SUBMITTED, TTXN_ABORTED };

/* An xid's longest form (troupe/internal/xa.h's rule). */
#define TROUPE__XA_XID_MAX 128

typedef struct ttxn_shared {
    atomic_int refs;
    atomic_int state;
    troupe_snapshot *snap;
    troupe_batch *batch; /* NULL once submitted */
    /* XA (troupe/xa.h): the parts are held until the xid is resolved,
     * with no reservation deadline, and a single-key write of a key they
     * hold is refused (EBUSY) naming xid (NUL-terminated). Set before the
     * first prepare is sent, never changed after. */
    bool xa;
    char xid[TROUPE__XA_XID_MAX + 1];
} ttxn_shared;

ttxn_shared *
troupe__ttxn_retain(ttxn_shared *sh);
/* The last reference destroys snapshot and batch. Any thread. */
void
troupe__ttxn_release(ttxn_shared *sh);

/* The kind of each key of a prepare: a write (the values of the table's
 * write kinds, asserted in table_int.h) or one of the others. */
enum {
    TROUPE__PART_INSERT = 0,
    TROUPE__PART_UPDATE = 1,
    TROUPE__PART_UPSERT = 2,
    TROUPE__PART_DELETE = 3,
    TROUPE__PART_READ = 100, /* read only: validate and reserve for reading */
    TROUPE__PART_DEL_ANY,    /* delete if a live row exists, else nothing */
    TROUPE__PART_ABSENT      /* write nothing; EEXIST if a live row exists */
};

typedef struct ttxn_key {
    uint32_t kind;
    int64_t expires;
    bool nostamp;             /* the write's troupe_write_opts.no_timestamps */
    const unsigned char *key; /* into the prep's arena */
    size_t klen;
    const unsigned char *doc; /* NULL for reads and deletes */
    size_t dlen;
    /* Versioned reads: the version the caller read (> 0); the key
     * conflicts when its current version differs. 0: compare with seq0. */
    uint64_t ver;
} ttxn_key;

/* A query with version of n keys (one allocation, troupe_free): replies
 * [[version uint, ...n], rows body] where rows body is the read reply of
 * table.h's GET_MANY (the live rows among the keys, in the order asked).
 * Each value and its version are taken at one instant (no write of the
 * key in flight); a key without a version gets its first one. */
typedef struct ttxn_qver {
    size_t n;
    const unsigned char **keys; /* into the allocation */
    size_t *klens;
} ttxn_qver;

/* Copies n keys into a new ttxn_qver; NULL when out of memory. */
ttxn_qver *
troupe__ttxn_qver_new(const void *const *keys, const size_t *klens, size_t n);

/* A prepare request, sent as a message's ptr (owned by the message, then
 * by the table actor). Keys are distinct and sorted. Reply: OK (keys
 * reserved, rows appended to sh->batch), ECONFLICT with body [[key bin,
 * kinds uint], ...] (the keys whose version changed since seq0, kind
 * TROUPE__PART_STALE, or that another write or transaction holds,
 * TROUPE__PART_RESERVED, or both; nothing reserved), or the error of a
 * write (EEXIST, ENOENT, ECONSTRAINT, ECORRUPT, ...). check_only:
 * validate only, reserve and write nothing. */
/* A scanned range [start, end); NULL: unbounded on that side. */
typedef struct ttxn_range {
    const unsigned char *start;
    size_t slen;
    const unsigned char *end;
    size_t elen;
} ttxn_range;

typedef struct ttxn_prep {
    ttxn_shared *sh; /* one reference */
    uint64_t seq0;
    uint32_t reserve_ms; /* reservations lapse after this unless
                            submitted */
    bool check_only;
    size_t n;
    ttxn_key *keys;
    /* Ranges the transaction scanned: a key of one written since seq0,
     * or held by a write, conflicts (reported by its key; by the range's
     * start, or a single 0x00 byte when unbounded, when the table no
     * longer knows which key changed). Reserved like reads: writes into
     * them wait, other transactions' writes into them conflict. */
    size_t nranges;
    ttxn_range *ranges;
} ttxn_prep;

void
troupe__ttxn_prep_free(void *p);

/* Releases the reservations of sh at one table, publishing `ver` as the
 * new version of its written keys when `publish` (the batch was
 * submitted, whatever its outcome; the version was taken on the writer
 * thread once the batch was written). Sent as a message's ptr; replies
 * the version published (uint, 0 when none). */
typedef struct ttxn_fin {
    ttxn_shared *sh; /* one reference */
    bool publish;
    uint64_t ver;
} ttxn_fin;

void
troupe__ttxn_fin_free(void *p);

/* A running transaction's begin point, linked in ttables_shared from
 * troupe_txn_begin to troupe_txn_destroy. */
typedef struct ttxn_active {
    struct ttxn_active *prev;
    struct ttxn_active *next;
    uint64_t seq0;
} ttxn_active;

/*
 * Key versions: one counter per troupe_tables whose values never repeat,
 * also across opens (versions.c's design note). Every value handed out is
 * below `limit`, a floor stored durably in meta; the next open starts the
 * counter there. Fields are the catalog's; the functions below are the
 * interface.
 */
typedef struct tversions {
    _Atomic uint64_t seq;   /* the last value handed out */
    _Atomic uint64_t limit; /* the durable floor */
    uint64_t reserve;       /* how far each raise moves the floor */
    atomic_bool raising;    /* a background raise is queued or running */
    _Atomic int err;        /* the last raise's error (OK when none) */
    pthread_mutex_t mu;     /* one raise (a synced write) at a time */
    troupe_tables *t;
} tversions;

/* The next version, on a thread that may block on the disk (the commit
 * pipeline's writer): when the background raise is behind, the floor is
 * raised here first. If that fails too the value is still returned (the
 * write it versions is stored) but is never revealed: see
 * troupe__vers_check. Any thread that may block. */
uint64_t
troupe__vers_take(tversions *v);
/* The next version on a thread that must not block (an actor's loop): 0
 * when it would reach the durable floor (the background raise is behind;
 * the caller answers troupe__vers_check's error). */
uint64_t
troupe__vers_try(tversions *v);
/* The counter now (a transaction's seq0). */
uint64_t
troupe__vers_now(tversions *v);
/* OK when `ver` may be shown to a client (a versioned query's answer, a
 * receipt): it is below the durable floor. Else the last raise's error,
 * or EBUSY when the raise is only behind. Any thread. */
troupe_err
troupe__vers_check(tversions *v, uint64_t ver);

/* The client calls whose latencies ttables_shared keeps. */
enum {
    TTABLES_OP_GET,    /* get, get_many */
    TTABLES_OP_WRITE,  /* insert, update, upsert, delete */
    TTABLES_OP_SCAN,   /* scan */
    TTABLES_OP_QUERY,  /* index query and count */
    TTABLES_OP_COMMIT, /* transaction commits, versioned or not */
    TTABLES_OPS
};

/*
 * What the catalog shares with every table actor and transaction of one
 * troupe_tables: the key-version TTL, the running transactions in begin
 * order (so the oldest begin point is the head's, O(1)), and the
 * data-layer counters (relaxed atomics: read by the stats call only).
 */
typedef struct ttables_shared {
    uint64_t vttl_ms;   /* key-version TTL after quantization; 0: off */
    pthread_mutex_t mu; /* guards the list below */
    ttxn_active *head;
    ttxn_active *tail;
    _Atomic uint64_t qver_ok, qver_fail;
    _Atomic uint64_t vprep_ok, vprep_fail, vcommit_ok, vcommit_fail;
    _Atomic uint64_t txn_created, txn_closed;
    /* transaction commits by outcome, and the latencies of client calls
     * from the call to its callback (TTABLES_OP_*), in nanoseconds */
    _Atomic uint64_t commit_ok, commit_conflict, commit_fail;
    troupe_hist op_ns[TTABLES_OPS];
} ttables_shared;

/* The clock of those latencies (CLOCK_MONOTONIC), in nanoseconds. */
uint64_t
troupe__tables_op_clock(void);
/* Counts one call of `op` that started at t0 (troupe__tables_op_clock).
 * Any thread; two relaxed atomics and one clock read. */
void
troupe__tables_op_done(ttables_shared *ts, int op, uint64_t t0);

/* Links a into the running list, taking its seq0 from the counter under
 * the lock, so a later entry never has a smaller seq0. Any thread. */
void
troupe__tables_txn_enter(ttables_shared *ts, tversions *vers, ttxn_active *a);
/* Unlinks a (entered before). Any thread. */
void
troupe__tables_txn_leave(ttables_shared *ts, ttxn_active *a);
/* The oldest running transaction's seq0; UINT64_MAX when none runs. */
uint64_t
troupe__tables_txn_oldest(ttables_shared *ts);

/* What a transaction needs from the catalog. */
typedef struct ttxn_env {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    int64_t (*clock)(void *ctx);
    void *clock_ctx;
    uint32_t timeout_ms;
    tversions *vers;
    ttables_shared *ts;
} ttxn_env;

troupe_err
troupe__tables_txn_env(troupe_tables *t, ttxn_env *env);

#endif
