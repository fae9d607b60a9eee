/*
 * The queue workload of the crash harness (docs/crash-testing.md, "The
 * queue loop") and its check.
 *
 * The child opens the runtime, the db, the pipeline and the queues,
 * creates queue `crashq` (4 partitions) when it is missing, starts two
 * workers over every partition with a credit of 1 each, reports READY, and
 * publishes forever (synced, a window in flight). Event (cycle, seq) has a
 * 17-byte id 'e' cycle seq (big-endian), the id as business key, a payload
 * [cycle, seq], owner ("crash", "o<cycle * 8 + seq % 8>") and runnable time
 * cycle * 10^6 + seq (in the past: due at once). The handler reports the
 * delivery, then:
 *   - seq % 4 == 0, first invocation: reschedules it to now (the
 *     replacement, invocation 1, is told apart by its time, > 10^12);
 *   - seq % 7 == 3, first invocation, attempt 1, in the cycle that
 *     published it: fails (no outcome: it is delivered again; only in its
 *     own cycle, else a short cycle never reaches the retry, which comes
 *     after the whole due range, and these events pile up);
 *   - otherwise acknowledges.
 * A handler cannot see its outcome commit, but the queue commits it before
 * the worker's credit frees (docs/queue.md, "Handlers"); with a credit of
 * 1 the worker's next delivery therefore proves the previous outcome
 * committed (synced), and the handler reports that completion then. The
 * parent's list of completions is a lower bound, as for every ack.
 *
 * Pipe records (crash.h): REC_QPUB id (publish's callback said OK),
 * REC_QDELIV id/inv (a handler started), REC_QDONE id/inv (its outcome
 * committed), where id = cycle << 40 | seq and inv (in err) is 0 or 1.
 *
 * The check reads the queue's family directly (docs/queue.md, "Key
 * formats"), with its own decoder rather than the queue's.
 */
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crash.h"
#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/runtime.h"

#define QNAME "crashq"
#define QPARTS 4
#define QWORKERS 2
#define EV_ID_LEN 17
#define RESCHED_T 1000000000000ll /* times above: a replacement */
#define BACKLOG 2000              /* most events pending at once, roughly */
#define OKIND "crash"

static uint64_t
ekey(uint64_t cycle, uint64_t seq)
{
    return cycle << 40 | seq;
}

static void
ev_id(uint8_t *k, uint64_t cycle, uint64_t seq)
{
    k[0] = 'e';
    for (int i = 0; i < 8; i++) {
        k[1 + i] = (uint8_t)(cycle >> (56 - 8 * i));
        k[9 + i] = (uint8_t)(seq >> (56 - 8 * i));
    }
}

static bool
ev_parse(const uint8_t *k, size_t n, uint64_t *cycle, uint64_t *seq)
{
    if (n != EV_ID_LEN || k[0] != 'e')
        return false;
    uint64_t c = 0, s = 0;
    for (int i = 0; i < 8; i++) {
        c = c << 8 | k[1 + i];
        s = s << 8 | k[9 + i];
    }
    *cycle = c;
    *seq = s;
    return true;
}

static int
owner_id(char *buf, size_t cap, uint64_t cycle, uint64_t seq)
{
    return snprintf(buf, cap, "o%llu",
                    (unsigned long long)(cycle * 8 + seq % 8));
}

static int64_t
ev_time(uint64_t cycle, uint64_t seq)
{
    return (int64_t)(cycle * 1000000 + seq);
}

static bool
resched(uint64_t seq)
{
    return seq % 4 == 0;
}

/* ---- the child ---------------------------------------------------------- */

typedef struct qworker {
    bool have;      /* a previous delivery */
    bool completed; /* ... whose handler returned an outcome */
    uint64_t key;
    int inv;
} qworker;

static struct {
    int fd;
    uint64_t cycle;
    sem_t window;
    atomic_uint_fast64_t published, completed;
    qworker w[QWORKERS];
} QC;

static void
qdie(const char *what, troupe_err e)
{
    fprintf(stderr, "crash queue child: %s: %s\n", what, troupe_err_name(e));
    _exit(2);
}

static void
pub_cb(troupe_err err, void *arg)
{
    if (err != TROUPE_OK)
        qdie("publish completion", err);
    crash_report(QC.fd, REC_QPUB, 0, (uint64_t)(uintptr_t)arg);
    atomic_fetch_add(&QC.published, 1);
    sem_post(&QC.window);
}

static troupe_err
handler(const troupe_queue_delivery *d, troupe_queue_outcome *out, void *arg)
{
    qworker *w = arg;
    /* The credit is 1: this delivery came after the previous outcome of
     * this worker committed. */
    if (w->have && w->completed) {
        crash_report(QC.fd, REC_QDONE, w->inv, w->key);
        atomic_fetch_add(&QC.completed, 1);
    }
    uint64_t cycle, seq;
    if (!ev_parse(d->ev.id, d->ev.id_len, &cycle, &seq))
        qdie("a delivered id no publish made", TROUPE_ECORRUPT);
    int inv = d->ev.time_ms >= RESCHED_T ? 1 : 0;
    crash_report(QC.fd, REC_QDELIV, inv, ekey(cycle, seq));
    w->have = true;
    w->key = ekey(cycle, seq);
    w->inv = inv;
    w->completed = true;
    if (inv == 0 && seq % 7 == 3 && d->attempt == 1 && cycle == QC.cycle) {
        w->completed = false;
        return TROUPE_EIO; /* no outcome: delivered again */
    }
    if (inv == 0 && resched(seq)) {
        out->kind = TROUPE_QUEUE_RESCHEDULE;
        out->time_ms = troupe_now_ms();
        return TROUPE_OK;
    }
    out->kind = TROUPE_QUEUE_ACK;
    return TROUPE_OK;
}

/* argv: DIR CYCLE SYNC FD WINDOW */
int
crash_child_queue(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *dir = argv[0];
    uint64_t cycle = strtoull(argv[1], NULL, 10);
    bool sync = atoi(argv[2]) != 0;
    QC.cycle = cycle;
    QC.fd = atoi(argv[3]);
    sem_init(&QC.window, 0, (unsigned)atoi(argv[4]));
    troupe_runtime *rt;
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 4};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK)
        qdie("runtime", e);
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.sync = sync;
    troupe_db *db;
    if ((e = troupe_db_open(dir, &o, &db)) != TROUPE_OK)
        qdie("open", e);
    troupe_commit *c;
    if ((e = troupe_commit_create(db, NULL, &c)) != TROUPE_OK)
        qdie("commit_create", e);
    troupe_catalog_opts co = {.rt = rt, .db = db};
    troupe_catalog *cat;
    if ((e = troupe_catalog_open(&co, &cat)) != TROUPE_OK)
        qdie("catalog_open", e);
    troupe_queues_opts qo = {.catalog = cat, .commit = c};
    troupe_queues *qs;
    if ((e = troupe_queues_open(&qo, &qs)) != TROUPE_OK)
        qdie("queues_open", e);
    troupe_queue_spec spec = {
        .name = QNAME, .partitions = QPARTS, .retention_ms = INT64_MAX / 4};
    e = troupe_queues_create_wait(qs, &spec);
    if (e != TROUPE_OK && e != TROUPE_EEXIST)
        qdie("create", e);
    /* The backlog the previous cycles left counts against BACKLOG. */
    troupe_queue_stats *qst;
    if ((e = troupe_queue_stats_wait(qs, QNAME, &qst)) != TROUPE_OK)
        qdie("stats", e);
    atomic_store(&QC.published, qst->pending);
    troupe_free(qst);
    troupe_sync sy = sync ? TROUPE_SYNC_ON : TROUPE_SYNC_OFF;
    for (int i = 0; i < QWORKERS; i++) {
        troupe_queue_worker_opts wo = {.queue = QNAME,
                                       .first = 0,
                                       .last = QPARTS - 1,
                                       .credit = 1,
                                       .handler = handler,
                                       .arg = &QC.w[i],
                                       .sync = sy};
        troupe_queue_worker *w;
        if ((e = troupe_queue_worker_create(qs, &wo, &w)) != TROUPE_OK)
            qdie("worker_create", e);
    }
    crash_report(QC.fd, REC_READY, 0, 0);
    uint8_t id[EV_ID_LEN], pay[32];
    char oid[32];
    for (uint64_t seq = 0;; seq++) {
        /* Load shaping, not a wait for a condition: keep the consumers
         * in reach of the publisher so every outcome kind occurs. */
        while (atomic_load(&QC.published) >
               atomic_load(&QC.completed) + BACKLOG)
            usleep(200);
        sem_wait(&QC.window);
        ev_id(id, cycle, seq);
        troupe_packer p;
        troupe_pack_init(&p);
        troupe_pack_array(&p, 2);
        troupe_pack_uint(&p, cycle);
        troupe_pack_uint(&p, seq);
        size_t pl;
        const void *pd = troupe_pack_data(&p, &pl);
        if (p.err != TROUPE_OK || pl > sizeof(pay))
            qdie("payload", p.err);
        memcpy(pay, pd, pl);
        troupe_pack_fini(&p);
        int ol = owner_id(oid, sizeof(oid), cycle, seq);
        troupe_queue_event ev = {.id = id,
                                 .id_len = sizeof(id),
                                 .key = id,
                                 .key_len = sizeof(id),
                                 .payload = pay,
                                 .payload_len = pl,
                                 .time_ms = ev_time(cycle, seq),
                                 .owner_kind = OKIND,
                                 .owner_kind_len = strlen(OKIND),
                                 .owner_id = oid,
                                 .owner_id_len = (size_t)ol};
        e = troupe_queue_publish(qs, QNAME, &ev, sy, pub_cb,
                                 (void *)(uintptr_t)ekey(cycle, seq));
        if (e != TROUPE_OK)
            qdie("publish", e);
    }
}

/* ---- the parent: what the child said ------------------------------------ */

/* Flags per event, kept across cycles. */
enum {
    F_PUB = 1,      /* publish acknowledged */
    F_DONE0 = 2,    /* invocation 0's outcome acknowledged committed */
    F_DONE1 = 4,    /* invocation 1's */
    F_SEEN_C0 = 8,  /* a check saw invocation 0 completed */
    F_SEEN_C1 = 16, /* invocation 1 */
};

typedef struct qcycle {
    uint8_t *flags;
    uint8_t *cnt; /* per check: [p0, p1, c0, c1] per seq */
    uint64_t cap;
} qcycle;

static qcycle *QCY;
static uint64_t NQCY;
static crash_queue_stats QT; /* this cycle's records */

static uint8_t *
flags_of(uint64_t cycle, uint64_t seq)
{
    if (cycle >= NQCY) {
        uint64_t n = NQCY ? NQCY : 64;
        while (n <= cycle)
            n *= 2;
        QCY = realloc(QCY, n * sizeof(*QCY));
        memset(QCY + NQCY, 0, (n - NQCY) * sizeof(*QCY));
        NQCY = n;
    }
    qcycle *c = &QCY[cycle];
    if (seq >= c->cap) {
        uint64_t n = c->cap ? c->cap : 4096;
        while (n <= seq)
            n *= 2;
        c->flags = realloc(c->flags, n);
        c->cnt = realloc(c->cnt, n * 4);
        memset(c->flags + c->cap, 0, n - c->cap);
        memset(c->cnt + c->cap * 4, 0, (n - c->cap) * 4);
        c->cap = n;
    }
    return &c->flags[seq];
}

int
crash_queue_note(const crash_rec *r, uint64_t cycle, char *msg, size_t cap)
{
    uint64_t c = r->id >> 40, s = r->id & ((1ull << 40) - 1);
    if (c > cycle) {
        snprintf(msg, cap, "a record names cycle %llu, which has not run",
                 (unsigned long long)c);
        return -1;
    }
    uint8_t *f = flags_of(c, s);
    switch (r->type) {
    case REC_QPUB:
        *f |= F_PUB;
        QT.published++;
        return 0;
    case REC_QDONE:
        *f |= r->err ? F_DONE1 : F_DONE0;
        QT.completed++;
        return 0;
    case REC_QDELIV:
        QT.delivered++;
        if (c < cycle)
            QT.older++;
        if (r->err != 0 && r->err != 1)
            break;
        if (*f & (r->err ? F_DONE1 | F_SEEN_C1 : F_DONE0 | F_SEEN_C0)) {
            snprintf(msg, cap,
                     "event (%llu, %llu) invocation %d delivered again after "
                     "its completion was %s",
                     (unsigned long long)c, (unsigned long long)s, r->err,
                     *f & (r->err ? F_DONE1 : F_DONE0)
                         ? "acknowledged"
                         : "seen committed by a check");
            return -1;
        }
        return 0;
    default:
        break;
    }
    snprintf(msg, cap, "unexpected record %u (err %d) from the queue child",
             r->type, r->err);
    return -1;
}

/* ---- the parent's check ------------------------------------------------- */

#define FAIL(...)                                                              \
    do {                                                                       \
        snprintf(msg, cap, __VA_ARGS__);                                       \
        goto out;                                                              \
    } while (0)

typedef struct qrow {
    uint8_t *skey;
    size_t sklen;
    bool completed;
    uint64_t cycle, seq;
    int inv;
    int owners, ids; /* entries naming it */
} qrow;

static int
row_cmp(const void *a, const void *b)
{
    const qrow *x = a, *y = b;
    size_t n = x->sklen < y->sklen ? x->sklen : y->sklen;
    int c = memcmp(x->skey, y->skey, n);
    return c != 0 ? c : (x->sklen > y->sklen) - (x->sklen < y->sklen);
}

static qrow *
row_find(qrow *rows, size_t n, const uint8_t *k, size_t kl)
{
    qrow key = {.skey = (uint8_t *)k, .sklen = kl};
    return bsearch(&key, rows, n, sizeof(qrow), row_cmp);
}

/* The queue's catalog entry (in meta: catalog format 2, which every
 * child's open leaves): *id, or found false. */
static troupe_err
catalog(troupe_db *db, bool *found, uint64_t *id, uint32_t *parts)
{
    *found = false;
    troupe_cf *cf;
    troupe_err e = troupe_db_cf(db, "meta", &cf);
    if (e == TROUPE_ENOENT)
        return TROUPE_OK;
    if (e != TROUPE_OK)
        return e;
    troupe_key_writer w;
    troupe_key_writer_init(&w);
    troupe_key_put_string(&w, "queue", 5);
    troupe_key_put_string(&w, QNAME, strlen(QNAME));
    const uint8_t *k;
    size_t kl;
    void *v = NULL;
    size_t vl = 0;
    e = troupe_key_writer_finish(&w, &k, &kl);
    if (e == TROUPE_OK)
        e = troupe_db_get(db, cf, NULL, k, kl, &v, &vl);
    troupe_key_writer_fini(&w);
    if (e == TROUPE_ENOENT)
        return TROUPE_OK;
    if (e != TROUPE_OK)
        return e;
    troupe_reader r;
    uint64_t ver = 0, p = 0;
    int64_t ret = 0;
    troupe_reader_init(&r, v, vl);
    troupe_read_array_n(&r, 4);
    troupe_read_uint(&r, &ver);
    troupe_read_uint(&r, id);
    troupe_read_uint(&r, &p);
    troupe_read_int(&r, &ret);
    e = troupe_read_end(&r);
    troupe_free(v);
    if (e != TROUPE_OK || ver != 1 || p != QPARTS)
        return TROUPE_ECORRUPT;
    *parts = (uint32_t)p;
    *found = true;
    return TROUPE_OK;
}

static bool
rd(troupe_key_reader *r, troupe_key_type t, troupe_key_item *it)
{
    return troupe_key_read(r, it) == TROUPE_OK && it->type == t;
}

/* Checks an event value against what (cycle, seq) published. */
static bool
value_ok(const void *v, size_t vl, uint64_t cycle, uint64_t seq)
{
    uint8_t id[EV_ID_LEN];
    ev_id(id, cycle, seq);
    char oid[32];
    int ol = owner_id(oid, sizeof(oid), cycle, seq);
    troupe_reader r;
    uint64_t ver = 0, pc = 0, ps = 0;
    const void *a, *b, *ok, *oi;
    size_t al = 0, bl = 0, okl = 0, oil = 0;
    troupe_reader_init(&r, v, vl);
    troupe_read_array_n(&r, 5);
    troupe_read_uint(&r, &ver);
    troupe_read_bin(&r, 1024, &a, &al);
    troupe_read_bin(&r, 1024, &b, &bl);
    troupe_read_array_n(&r, 2);
    troupe_read_uint(&r, &pc);
    troupe_read_uint(&r, &ps);
    troupe_read_array_n(&r, 2);
    troupe_read_bin(&r, 512, &ok, &okl);
    troupe_read_bin(&r, 512, &oi, &oil);
    return troupe_read_end(&r) == TROUPE_OK && ver == 1 && al == EV_ID_LEN &&
           memcmp(a, id, al) == 0 && bl == EV_ID_LEN &&
           memcmp(b, id, bl) == 0 && pc == cycle && ps == seq &&
           okl == strlen(OKIND) && memcmp(ok, OKIND, okl) == 0 &&
           oil == (size_t)ol && memcmp(oi, oid, oil) == 0;
}

int
crash_queue_check(const char *dir, uint64_t cycle, crash_queue_stats *st,
                  char *msg, size_t cap)
{
    int rc = -1;
    msg[0] = '\0';
    *st = QT;
    memset(&QT, 0, sizeof(QT));
    flags_of(cycle, 0);
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    troupe_db *db = NULL;
    troupe_iter *it = NULL;
    qrow *rows = NULL;
    size_t nrows = 0, caprows = 0;
    troupe_key_reader kr;
    troupe_key_reader_init(&kr, NULL, 0);
    troupe_err e = troupe_db_open(dir, &o, &db);
    if (e != TROUPE_OK)
        FAIL("reopen after the crash: %s", troupe_err_name(e));
    bool found = false;
    uint64_t qid = 0;
    uint32_t parts = 0;
    if ((e = catalog(db, &found, &qid, &parts)) != TROUPE_OK)
        FAIL("the catalog entry of %s: %s", QNAME, troupe_err_name(e));
    for (uint64_t c = 0; c <= cycle; c++)
        if (QCY[c].cnt != NULL)
            memset(QCY[c].cnt, 0, QCY[c].cap * 4);
    if (found) {
        char name[32];
        snprintf(name, sizeof(name), "q.%llu", (unsigned long long)qid);
        troupe_cf *cf;
        if ((e = troupe_db_cf(db, name, &cf)) != TROUPE_OK)
            FAIL("family %s: %s", name, troupe_err_name(e));
        /* Pass 1: the rows ("c" and "p"); pass 2: the entries. */
        for (int pass = 1; pass <= 2; pass++) {
            if (pass == 2)
                qsort(rows, nrows, sizeof(*rows), row_cmp);
            if ((e = troupe_iter_create(db, cf, NULL, NULL, NULL, 0, false,
                                        &it)) != TROUPE_OK)
                FAIL("iter: %s", troupe_err_name(e));
            troupe_kv kv;
            while ((e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
                troupe_key_item a, b, c3, d, x;
                troupe_key_reader_fini(&kr);
                troupe_key_reader_init(&kr, kv.key, kv.key_len);
                if (!rd(&kr, TROUPE_KEY_STRING, &a) || a.v.s.len != 1)
                    FAIL("a key outside every space");
                char sp = (char)a.v.s.ptr[0];
                if (sp == 's')
                    continue; /* the order mark */
                bool row = sp == 'p' || sp == 'c';
                if (row != (pass == 1))
                    continue;
                if (row) {
                    int64_t part = 0, tm = 0;
                    const uint8_t *idp;
                    size_t idl;
                    bool ok;
                    if (sp == 'p') {
                        ok = rd(&kr, TROUPE_KEY_INT64, &b) &&
                             rd(&kr, TROUPE_KEY_INT64, &c3) &&
                             rd(&kr, TROUPE_KEY_UINT64, &d) &&
                             rd(&kr, TROUPE_KEY_BYTES, &x);
                        part = b.v.i64;
                        tm = c3.v.i64;
                    } else {
                        ok = rd(&kr, TROUPE_KEY_INT64, &b) &&
                             rd(&kr, TROUPE_KEY_INT64, &c3) &&
                             rd(&kr, TROUPE_KEY_BYTES, &x) &&
                             rd(&kr, TROUPE_KEY_UINT64, &d);
                        tm = c3.v.i64;
                    }
                    idp = x.v.s.ptr;
                    idl = x.v.s.len;
                    uint64_t ec, es;
                    if (!ok || troupe_key_read(&kr, &a) != TROUPE_ENOENT ||
                        !ev_parse(idp, idl, &ec, &es))
                        FAIL("a %s row with a key no publish made",
                             sp == 'p' ? "pending" : "completed");
                    if (ec > cycle)
                        FAIL("event (%llu, %llu) of a cycle that has not run",
                             (unsigned long long)ec, (unsigned long long)es);
                    int inv = tm >= RESCHED_T ? 1 : 0;
                    if (inv == 0 && tm != ev_time(ec, es))
                        FAIL("event (%llu, %llu) has time %lld",
                             (unsigned long long)ec, (unsigned long long)es,
                             (long long)tm);
                    if (inv == 1 && !resched(es))
                        FAIL("event (%llu, %llu) has a replacement but was "
                             "never rescheduled",
                             (unsigned long long)ec, (unsigned long long)es);
                    if (sp == 'p' && part != (int64_t)troupe_queue_partition_of(
                                                 idp, idl, parts))
                        FAIL("event (%llu, %llu) pending in partition %lld",
                             (unsigned long long)ec, (unsigned long long)es,
                             (long long)part);
                    if (!value_ok(kv.val, kv.val_len, ec, es))
                        FAIL("event (%llu, %llu): its value is not the one "
                             "published",
                             (unsigned long long)ec, (unsigned long long)es);
                    flags_of(ec, es);
                    uint8_t *cn = &QCY[ec].cnt[es * 4];
                    int slot = (sp == 'c' ? 2 : 0) + inv;
                    if (++cn[slot] > 1)
                        FAIL("event (%llu, %llu) invocation %d is %s twice",
                             (unsigned long long)ec, (unsigned long long)es,
                             inv, sp == 'c' ? "completed" : "pending");
                    if (nrows == caprows) {
                        caprows = caprows ? caprows * 2 : 4096;
                        rows = realloc(rows, caprows * sizeof(*rows));
                    }
                    qrow *q = &rows[nrows++];
                    memset(q, 0, sizeof(*q));
                    q->skey = malloc(kv.key_len);
                    memcpy(q->skey, kv.key, kv.key_len);
                    q->sklen = kv.key_len;
                    q->completed = sp == 'c';
                    q->cycle = ec;
                    q->seq = es;
                    q->inv = inv;
                    if (sp == 'c')
                        st->completed_rows++;
                    else
                        st->pending_rows++;
                    continue;
                }
                /* entries */
                qrow *q = NULL;
                if (sp == 'o') {
                    bool ok = rd(&kr, TROUPE_KEY_BYTES, &b) &&
                              b.v.s.len == strlen(OKIND) &&
                              memcmp(b.v.s.ptr, OKIND, b.v.s.len) == 0;
                    char oid[32];
                    size_t ol = 0;
                    if (ok && rd(&kr, TROUPE_KEY_BYTES, &c3) &&
                        c3.v.s.len < sizeof(oid)) {
                        ol = c3.v.s.len;
                        memcpy(oid, c3.v.s.ptr, ol);
                    } else {
                        ok = false;
                    }
                    bool comp = false;
                    if (ok && rd(&kr, TROUPE_KEY_STRING, &d)) {
                        comp = d.v.s.len == 9 &&
                               memcmp(d.v.s.ptr, "completed", 9) == 0;
                        ok = comp || (d.v.s.len == 7 &&
                                      memcmp(d.v.s.ptr, "pending", 7) == 0);
                    } else {
                        ok = false;
                    }
                    if (ok && rd(&kr, TROUPE_KEY_BYTES, &x) &&
                        troupe_key_read(&kr, &a) == TROUPE_ENOENT)
                        q = row_find(rows, nrows, x.v.s.ptr, x.v.s.len);
                    else
                        FAIL("a malformed owner entry");
                    if (q == NULL)
                        FAIL("an owner entry names a row that does not "
                             "exist");
                    char want[32];
                    int wl = owner_id(want, sizeof(want), q->cycle, q->seq);
                    if (q->completed != comp || (size_t)wl != ol ||
                        memcmp(want, oid, ol) != 0)
                        FAIL("the owner entry of event (%llu, %llu) says "
                             "%.*s/%s, its row is %s/%s",
                             (unsigned long long)q->cycle,
                             (unsigned long long)q->seq, (int)ol, oid,
                             comp ? "completed" : "pending", want,
                             q->completed ? "completed" : "pending");
                    q->owners++;
                    st->entries++;
                } else if (sp == 'i') {
                    uint64_t ec, es;
                    if (!rd(&kr, TROUPE_KEY_BYTES, &b) ||
                        !ev_parse(b.v.s.ptr, b.v.s.len, &ec, &es) ||
                        !rd(&kr, TROUPE_KEY_BYTES, &x) ||
                        troupe_key_read(&kr, &a) != TROUPE_ENOENT)
                        FAIL("a malformed id entry");
                    q = row_find(rows, nrows, x.v.s.ptr, x.v.s.len);
                    if (q == NULL)
                        FAIL("the id entry of event (%llu, %llu) names a row "
                             "that does not exist",
                             (unsigned long long)ec, (unsigned long long)es);
                    if (q->cycle != ec || q->seq != es)
                        FAIL("an id entry names another event's row");
                    q->ids++;
                    st->entries++;
                } else if (sp == 'a') {
                    /* an attempts record: ("a", part, time, order, id),
                     * written and deleted with its pending row */
                    if (!rd(&kr, TROUPE_KEY_INT64, &b) ||
                        !rd(&kr, TROUPE_KEY_INT64, &c3) ||
                        !rd(&kr, TROUPE_KEY_UINT64, &d) ||
                        !rd(&kr, TROUPE_KEY_BYTES, &x) ||
                        troupe_key_read(&kr, &a) != TROUPE_ENOENT)
                        FAIL("a malformed attempts record key");
                    troupe_key_writer pw;
                    troupe_key_writer_init(&pw);
                    troupe_key_put_string(&pw, "p", 1);
                    troupe_key_put_int64(&pw, b.v.i64);
                    troupe_key_put_int64(&pw, c3.v.i64);
                    troupe_key_put_uint64(&pw, d.v.u64);
                    troupe_key_put_bytes(&pw, x.v.s.ptr, x.v.s.len);
                    const uint8_t *pk;
                    size_t pkl;
                    q = troupe_key_writer_finish(&pw, &pk, &pkl) == TROUPE_OK
                            ? row_find(rows, nrows, pk, pkl)
                            : NULL;
                    troupe_key_writer_fini(&pw);
                    if (q == NULL || q->completed)
                        FAIL("an attempts record outlived its pending row");
                    /* [1, attempts >= 1, parked, error | nil] */
                    troupe_reader vr;
                    uint64_t ver = 0, n = 0;
                    bool parked = true;
                    troupe_reader_init(&vr, kv.val, kv.val_len);
                    troupe_read_array_n(&vr, 4);
                    troupe_read_uint(&vr, &ver);
                    troupe_read_uint(&vr, &n);
                    troupe_read_bool(&vr, &parked);
                    troupe_read_skip(&vr);
                    if (troupe_read_end(&vr) != TROUPE_OK || ver != 1 ||
                        n == 0 || parked)
                        FAIL("event (%llu, %llu): a malformed attempts "
                             "record (or parked, on a queue without a limit)",
                             (unsigned long long)q->cycle,
                             (unsigned long long)q->seq);
                } else {
                    FAIL("a key in unknown space '%c'", sp);
                }
            }
            troupe_iter_destroy(it);
            it = NULL;
            if (e != TROUPE_ENOENT)
                FAIL("iteration ended with %s", troupe_err_name(e));
        }
        for (size_t i = 0; i < nrows; i++)
            if (rows[i].owners != 1 || rows[i].ids != 1)
                FAIL("event (%llu, %llu) %s row has %d owner and %d id "
                     "entries",
                     (unsigned long long)rows[i].cycle,
                     (unsigned long long)rows[i].seq,
                     rows[i].completed ? "completed" : "pending",
                     rows[i].owners, rows[i].ids);
    }
    /* Per event: consistent state; acknowledged publishes and outcomes
     * there; what earlier checks saw completed still is. */
    for (uint64_t c = 0; c <= cycle; c++) {
        qcycle *qc = &QCY[c];
        for (uint64_t s = 0; s < qc->cap; s++) {
            uint8_t f = qc->flags[s];
            const uint8_t *n = &qc->cnt[s * 4];
            int p0 = n[0], p1 = n[1], c0 = n[2], c1 = n[3];
            if (f == 0 && p0 + p1 + c0 + c1 == 0)
                continue;
            if (c == cycle && (f & F_PUB))
                st->acked++;
            if ((f & F_PUB) && p0 + p1 + c0 + c1 == 0) {
                st->lost++; /* counted; the loop fails synced runs on it */
                continue;
            }
            const char *bad = NULL;
            if (p0 + c0 > 1)
                bad = "its first invocation is both pending and completed";
            else if (p1 + c1 > 1)
                bad = "its replacement is both pending and completed";
            else if (p1 + c1 > 0 && c0 == 0)
                bad = "a replacement exists but the rescheduled invocation "
                      "is not completed: the reschedule was applied in part";
            else if (resched(s) && c0 == 1 && p1 + c1 == 0)
                bad = "the rescheduled invocation is completed but its "
                      "replacement is missing: the reschedule was applied in "
                      "part";
            else if ((f & F_DONE0) && c0 == 0)
                bad = "its first outcome was acknowledged but the "
                      "invocation is not completed";
            else if ((f & F_DONE1) && c1 == 0)
                bad = "its replacement's ack was acknowledged but it is not "
                      "completed";
            else if ((f & F_SEEN_C0) && c0 == 0)
                bad = "a check saw it completed, now it is not";
            else if ((f & F_SEEN_C1) && c1 == 0)
                bad = "a check saw its replacement completed, now it is not";
            if (bad != NULL)
                FAIL("event (%llu, %llu) [pending %d+%d, completed %d+%d]: "
                     "%s",
                     (unsigned long long)c, (unsigned long long)s, p0, p1, c0,
                     c1, bad);
            if (c0)
                qc->flags[s] |= F_SEEN_C0;
            if (c1)
                qc->flags[s] |= F_SEEN_C1;
            if (c0 + c1 > 0 && (!resched(s) || c1 > 0))
                st->done_events++;
        }
    }
    rc = 0;
out:
    troupe_key_reader_fini(&kr);
    troupe_iter_destroy(it);
    for (size_t i = 0; i < nrows; i++)
        free(rows[i].skey);
    free(rows);
    if (db != NULL) {
        e = troupe_db_close(db);
        if (e != TROUPE_OK && rc == 0) {
            snprintf(msg, cap, "close: %s", troupe_err_name(e));
            rc = -1;
        }
    }
    return rc;
}

void
crash_queue_reset(void)
{
    for (uint64_t c = 0; c < NQCY; c++) {
        free(QCY[c].flags);
        free(QCY[c].cnt);
    }
    free(QCY);
    QCY = NULL;
    NQCY = 0;
    memset(&QT, 0, sizeof(QT));
}
