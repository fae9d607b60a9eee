/*
 * The coordinator workload of the crash harness (docs/crash-testing.md,
 * "The coordinator loop") and its final check.
 *
 * The child opens the runtime, the db, the pipeline, the catalog, the
 * tables, the barrier's table, a table "acct" (64 accounts "a00".."a63",
 * documents {"v": int64}, seeded with 1000 each in one transaction; at
 * open the table holds all 64 or none, anything else fails the child) and
 * "hold" (a TCC try's reservation, one row per branch), registers the
 * callback target "bank" and opens the coordinator (backoff 20..200 ms,
 * so that retries happen within a cycle), which drives what earlier
 * cycles left. Then it reports READY and submits from threads, per kind:
 *
 *   saga "s<cycle>-<seq>": step 01 debits `from` by amt (compensation
 *     credits it back), step 02 credits `to` (compensation debits it);
 *     odd seqs with concurrent steps (seq % 4 == 1: 02 after 01; seq % 4
 *     == 3: both at once);
 *   message "m<cycle>-<seq>": prepare (one step moving amt from `from` to
 *     `to`, query-back "bank", grace 50 ms), the local transaction (only
 *     the barrier check {msg, gid, "00", "msg"}), submit; seq % 3 == 0 is
 *     left prepared for the query-back, and its local transaction commits
 *     only when seq is even;
 *   TCC "t<cycle>-<seq>": prepare, register branches 01 (`from`) and 02
 *     (`to`), the try of 01 (the barrier's op "try": debit `from`, hold
 *     row {"v": amt}), then for seq % 5 == 4 an abort (02 registered, its
 *     try never run: its cancel is null), else the try of 02 (hold row
 *     {"v": 0}) and submit; every confirm and cancel that executes
 *     releases its branch's hold, confirm 02 credits `to` and cancel 01
 *     credits `from` back;
 *   xa "x<cycle>-<seq>": begin, branch 01 (a troupe transaction debiting
 *     `from`) and 02 (crediting `to`), each prepared under its xid and
 *     holding its account until resolved, then submit (both committed by
 *     the coordinator), or for seq % 5 == 4 or a prepare that lost a
 *     conflict an abort (both rolled back); at the drain no xid is left
 *     prepared;
 *   workflow "w<cycle>-<seq>": workflow WORKFLOW (the child's C function)
 *     of two steps moving what a saga's do, each action inline through
 *     the barrier (mode "workflow"), each compensation a branch to the
 *     bank; an action first checks the stored document does not record
 *     its step as succeeded (a memoized step run again: REC_GBAD).
 *
 * with amt = 1 + seq % 9, from = (cycle * 31 + seq * 7) % 64 and to =
 * (from + 1 + seq % 63) % 64. A submission whose _wait calls returned OK
 * is reported REC_GACK, id = cycle << 40 | kind << 32 | seq, err the
 * final status it must reach (troupe_gtx_status). A TCC an earlier cycle
 * left prepared (its application died) is aborted by the coordinator's
 * timeout for prepared TCCs (TCC_TIMEOUT_MS); one that a slow cycle took
 * longer than that to submit is acknowledged as failed.
 *
 * The handler answers by rule, a function of the gid and the attempt
 * only, so that the final state is known: saga 02 action with seq % 7 ==
 * 3 is FAILURE (its transaction rolled back: no barrier row, so its
 * compensation is null); saga 01 action with seq % 5 == 0, attempt 1,
 * executes, commits and answers UNKNOWN (delivered again: DUPLICATED);
 * saga 01 compensate with seq odd, attempt 1, is FAILURE (retried); the
 * query-back is ONGOING for seq % 12 == 0 at attempt 1, otherwise the
 * barrier's answer (troupe_barrier_msg_query_wait); a message step with
 * seq % 4 == 2 and TCC confirm 02 with seq % 4 == 1 and cancel 01 with
 * seq % 3 == 1 execute and answer UNKNOWN at attempt 1; TCC confirm 01
 * with seq % 6 == 2 is FAILURE at attempt 1 (retried, never cancelled).
 * Everything else: the barrier check, the business writes when it says
 * EXECUTE, the commit (a commit error is UNKNOWN), SUCCESS. The payload
 * of each call names its effect; the handler checks it is the one the
 * gid and op imply (a call delivered with another's payload is a
 * violation, REC_GBAD).
 *
 * The drain child (after the kill loop, no kill, no power loss) opens
 * everything, waits (60 s at most, the prepared TCCs' timeout included) until
 * every stored transaction is final, and checks: every acknowledged gid
 * is there with its expected status; sagas fail exactly when seq % 7 ==
 * 3; a TCC aborted by rule failed; a message succeeded exactly when its
 * local transaction's barrier row says "msg" (it failed when the
 * query-back's "rollback" row is there); every transaction's barrier rows
 * are exactly those its final status implies (a succeeded saga has both
 * action rows and no compensation: an UNKNOWN was never compensated; a
 * failed one has all four, the failed action's marked by its null
 * compensation; ...) and no row names a gid that is not stored; no hold
 * row is left; and each account's balance is 1000 plus the net effect of
 * every succeeded transaction touching it, acknowledged or not (a
 * submission killed before its ack may exist; if it does it is final and
 * counted). A step applied twice, or compensated when it must not be, is
 * a balance that does not add up.
 *
 * Why one check at the end rather than one per cycle, as the other loops:
 * a cycle leaves transactions in flight, whose effects are partly applied
 * until the next process drives them, so balances only add up once
 * everything is final; and an acknowledgement lost to a crash shows at the
 * end as well (it is never submitted again). Why a FAILURE rolls back
 * rather than commits its barrier check: a committed action row would make
 * its compensation EXECUTE and undo an effect that never happened.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "crash.h"
#include "troupe/barrier.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/dispatch.h"
#include "troupe/keycodec.h"
#include "troupe/pack.h"
#include "troupe/runtime.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "troupe/workflow.h"
#include "troupe/xa.h"

#define NACCT 64
#define SEED_V 1000
#define ACCT "acct"
#define HOLD "hold"
#define TARGET "bank"
#define GRACE_MS 50
#define RETRY_MIN_MS 20
#define RETRY_MAX_MS 200
/* A prepared TCC's timeout-to-fail (troupe_coord_opts.tcc_timeout_ms) */
#define TCC_TIMEOUT_MS 1000
#define RING 4             /* per thread: submissions not yet final */
#define RING_WAIT_MS 10000 /* then the oldest is left to the drain */
#define DRAIN_MS 60000     /* the drain's bound */
#define TXN_TRIES 64       /* commits retried on a conflict */
#define GID_LEN_MAX 48

/* The kinds, in a gid's id (cycle << 40 | kind << 32 | seq). */
enum { GK_SAGA = 1, GK_MSG = 2, GK_TCC = 3, GK_WF = 4, GK_XA = 5, GK_N = 6 };

static const char kind_letter[GK_N] = {0, 's', 'm', 't', 'w', 'x'};
static const char *const kind_name[GK_N] = {NULL,  "saga",     "msg",
                                            "tcc", "workflow", "xa"};
/* The workflow's name (a troupe_workflow of the child's). */
#define WORKFLOW "xfer"

/* The ops, by index into a transaction's barrier rows. */
enum { OP_ACTION, OP_COMPENSATE, OP_TRY, OP_CONFIRM, OP_CANCEL, OP_MSG, OP_N };

static const char *const op_name[OP_N] = {"action",  "compensate", "try",
                                          "confirm", "cancel",     "msg"};

/* A barrier row's reason: 0 none, 1 + an op, or RS_ROLLBACK (the
 * query-back's own row). */
#define RS_ROLLBACK (OP_N + 1)

static uint64_t
gid_id(int kind, uint64_t cycle, uint64_t seq)
{
    return cycle << 40 | (uint64_t)kind << 32 | seq;
}

static int
gid_fmt(char *buf, size_t cap, int kind, uint64_t cycle, uint64_t seq)
{
    return snprintf(buf, cap, "%c%llu-%llu", kind_letter[kind],
                    (unsigned long long)cycle, (unsigned long long)seq);
}

/* Parses a gid this workload makes (exactly: no leading zeros, nothing
 * after); false for any other. */
static bool
gid_parse(const char *g, size_t n, int *kind, uint64_t *cycle, uint64_t *seq)
{
    if (n < 4 || n >= GID_LEN_MAX)
        return false;
    int k = 0;
    for (int i = 1; i < GK_N; i++)
        if (g[0] == kind_letter[i])
            k = i;
    if (k == 0)
        return false;
    char tmp[GID_LEN_MAX];
    memcpy(tmp, g, n);
    tmp[n] = '\0';
    char *end;
    unsigned long long c = strtoull(tmp + 1, &end, 10);
    if (*end != '-')
        return false;
    unsigned long long s = strtoull(end + 1, &end, 10);
    if (*end != '\0' || c >= (1ull << 24) || s >= (1ull << 32))
        return false;
    char back[GID_LEN_MAX];
    if (gid_fmt(back, sizeof(back), k, c, s) != (int)n ||
        memcmp(back, g, n) != 0)
        return false;
    *kind = k;
    *cycle = c;
    *seq = s;
    return true;
}

static void
xfer(uint64_t cycle, uint64_t seq, unsigned *from, unsigned *to, int64_t *amt)
{
    *amt = 1 + (int64_t)(seq % 9);
    *from = (unsigned)((cycle * 31 + seq * 7) % NACCT);
    *to = (unsigned)((*from + 1 + seq % 63) % NACCT);
}

/* The balance changes op `op` of branch `b` makes when it executes: n
 * pairs (account, delta), n <= 2; -1 for an op the kind does not have
 * in that branch. */
static int
op_effect(int kind, uint64_t cycle, uint64_t seq, unsigned b, int op,
          unsigned acct[2], int64_t delta[2])
{
    unsigned from, to;
    int64_t amt;
    xfer(cycle, seq, &from, &to, &amt);
    switch (kind) {
    case GK_SAGA:
    case GK_WF: /* a workflow's two steps move what a saga's do */
        if ((b != 1 && b != 2) || (op != OP_ACTION && op != OP_COMPENSATE))
            return -1;
        acct[0] = b == 1 ? from : to;
        delta[0] = (b == 1) == (op == OP_ACTION) ? -amt : amt;
        return 1;
    case GK_MSG:
        if (b != 1 || op != OP_ACTION)
            return -1;
        acct[0] = from;
        delta[0] = -amt;
        acct[1] = to;
        delta[1] = amt;
        return 2;
    case GK_TCC:
        if (b != 1 && b != 2)
            return -1;
        if (op == OP_TRY)
            return b == 1 ? (acct[0] = from, delta[0] = -amt, 1) : 0;
        if (op == OP_CONFIRM)
            return b == 2 ? (acct[0] = to, delta[0] = amt, 1) : 0;
        if (op == OP_CANCEL)
            return b == 1 ? (acct[0] = from, delta[0] = amt, 1) : 0;
        return -1;
    default:
        return -1;
    }
}

/* The payload of a call: msgpack [[account, delta]...] of its effect,
 * into buf (cap >= 32). Returns its length, 0 for an op the kind does
 * not have. */
static size_t
payload_of(int kind, uint64_t cycle, uint64_t seq, unsigned b, int op,
           uint8_t *buf, size_t cap)
{
    unsigned acct[2];
    int64_t delta[2];
    int n = op_effect(kind, cycle, seq, b, op, acct, delta);
    if (n < 0)
        return 0;
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        troupe_pack_array(&p, 2);
        troupe_pack_uint(&p, acct[i]);
        troupe_pack_int(&p, delta[i]);
    }
    size_t len = 0;
    const void *d = troupe_pack_data(&p, &len);
    if (p.err != TROUPE_OK || len > cap)
        len = 0;
    else
        memcpy(buf, d, len);
    troupe_pack_fini(&p);
    return len;
}

static void
acct_key(char k[4], unsigned a)
{
    snprintf(k, 4, "a%02u", a);
}

/* {"v": v} into buf (cap >= 16); its length. */
static size_t
doc_v(uint8_t *buf, int64_t v)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "v");
    troupe_pack_int(&p, v);
    size_t len = 0;
    const void *d = troupe_pack_data(&p, &len);
    if (p.err != TROUPE_OK || len > 16)
        len = 0;
    else
        memcpy(buf, d, len);
    troupe_pack_fini(&p);
    return len;
}

/* The "v" of a {"v": int} document. */
static bool
read_v(const uint8_t *d, size_t n, int64_t *v)
{
    troupe_reader r;
    const char *k = NULL;
    size_t kl = 0;
    troupe_reader_init(&r, d, n);
    troupe_read_map_n(&r, 1);
    troupe_read_str(&r, 8, &k, &kl);
    troupe_read_int(&r, v);
    return troupe_read_end(&r) == TROUPE_OK && kl == 1 && k[0] == 'v';
}

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Before retry i of a transaction that conflicted: the key it lost on
 * is held by a commit in flight (a synced write), so an immediate retry
 * would mostly conflict again. */
static void
conflict_pause(int i)
{
    if (i > 0)
        sleep_ms(i < 10 ? i : 10);
}

/* ---- the process: what the child and the drain share -------------------- */

typedef struct cnode {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *cm;
    troupe_catalog *cat;
    troupe_tables *tb;
    troupe_target *tg;
    troupe_workflow *wf;
    troupe_coord *coord;
} cnode;

/* The one workload of this process: the handler's and the threads' view. */
static struct {
    int fd;
    uint64_t cycle;
    cnode n;
    atomic_uint_fast64_t next[GK_N];  /* per kind: the next seq */
    atomic_uint_fast64_t verdicts[4]; /* by troupe_barrier_verdict */
    atomic_uint_fast64_t bad;         /* violations the handler saw */
} CC;

static _Noreturn void
cdie(const char *what, troupe_err e)
{
    fprintf(stderr, "crash coord child: %s: %s (%s)\n", what,
            troupe_err_name(e), troupe_errmsg(e));
    _exit(2);
}

/* A violation seen from inside (the parent fails the run on it). */
static void __attribute__((format(printf, 3, 4)))
cbad(uint64_t id, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "crash coord child: violation: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    atomic_fetch_add(&CC.bad, 1);
    crash_report(CC.fd, REC_GBAD, code, id);
}

/* Reads account a through tx into *v. */
static troupe_err
acct_get(troupe_txn *tx, unsigned a, int64_t *v)
{
    char k[4];
    acct_key(k, a);
    troupe_rows *r = NULL;
    troupe_err e = troupe_txn_get_wait(tx, ACCT, k, 3, &r);
    if (e == TROUPE_OK &&
        (r->n != 1 || !read_v(r->rows[0].doc, r->rows[0].doc_len, v)))
        e = TROUPE_ECORRUPT;
    troupe_rows_destroy(r);
    return e;
}

/* Buffers the effect's balance changes in tx. */
static troupe_err
apply(troupe_txn *tx, int n, const unsigned *acct, const int64_t *delta)
{
    for (int i = 0; i < n; i++) {
        int64_t v = 0;
        troupe_err e = acct_get(tx, acct[i], &v);
        if (e != TROUPE_OK)
            return e;
        char k[4];
        uint8_t d[16];
        acct_key(k, acct[i]);
        size_t dl = doc_v(d, v + delta[i]);
        if ((e = troupe_txn_upsert(tx, ACCT, k, 3, d, dl, NULL)) != TROUPE_OK)
            return e;
    }
    return TROUPE_OK;
}

static int
hold_key(char *k, size_t cap, const char *gid, size_t gl, unsigned b)
{
    return snprintf(k, cap, "%.*s/%02u", (int)gl, gid, b);
}

/* One delivery's business transaction: the barrier check of (mode, gid,
 * branch, op) and, when it says EXECUTE, the effect (and a TCC confirm's
 * or cancel's release of its hold row), committed in one batch; retried
 * from the start on a conflict (the retry's check is DUPLICATED when the
 * other delivery committed). *hold_missing: a TCC confirm or cancel
 * executed without its try's hold. */
static troupe_err
business(const char *mode, const char *gid, size_t gl, unsigned b,
         const char *bid, int op, int n, const unsigned *acct,
         const int64_t *delta, troupe_barrier_verdict *vout, bool *hold_missing)
{
    troupe_barrier_branch bb = {.mode = mode,
                                .gid = gid,
                                .gid_len = gl,
                                .branch_id = bid,
                                .op = op_name[op]};
    troupe_err e = TROUPE_OK;
    *hold_missing = false;
    for (int i = 0; i < TXN_TRIES; i++) {
        conflict_pause(i);
        troupe_txn *tx = NULL;
        if ((e = troupe_txn_begin(CC.n.tb, NULL, &tx)) != TROUPE_OK)
            return e;
        troupe_barrier_verdict v = 0;
        e = troupe_barrier_check_wait(tx, &bb, &v);
        bool tcc_release =
            strcmp(mode, "tcc") == 0 && (op == OP_CONFIRM || op == OP_CANCEL);
        if (e == TROUPE_OK && v == TROUPE_BARRIER_EXECUTE) {
            e = apply(tx, n, acct, delta);
            if (e == TROUPE_OK && tcc_release) {
                char hk[GID_LEN_MAX + 8];
                int hl = hold_key(hk, sizeof(hk), gid, gl, b);
                troupe_rows *r = NULL;
                troupe_err ge =
                    troupe_txn_get_wait(tx, HOLD, hk, (size_t)hl, &r);
                troupe_rows_destroy(r);
                if (ge == TROUPE_ENOENT)
                    *hold_missing = true;
                else if (ge != TROUPE_OK)
                    e = ge;
                else
                    e = troupe_txn_delete(tx, HOLD, hk, (size_t)hl);
            }
        }
        if (e == TROUPE_OK)
            e = troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT);
        troupe_txn_destroy(tx);
        if (e == TROUPE_OK) {
            *vout = v;
            return TROUPE_OK;
        }
        if (e != TROUPE_ECONFLICT && e != TROUPE_EEXIST)
            return e;
    }
    return e;
}

enum rule { R_RUN, R_RUN_UNKNOWN, R_FAIL, R_ONGOING, R_QUERY };

/* What the handler does with a delivery: a function of the gid, the op
 * and the attempt only. */
static enum rule
rule_of(int kind, uint64_t seq, unsigned b, int op, uint32_t attempt)
{
    bool first = attempt == 1;
    switch (kind) {
    case GK_SAGA:
        if (b == 2 && op == OP_ACTION && seq % 7 == 3)
            return R_FAIL;
        if (b == 1 && op == OP_ACTION && seq % 5 == 0 && first)
            return R_RUN_UNKNOWN;
        if (b == 1 && op == OP_COMPENSATE && seq % 2 == 1 && first)
            return R_FAIL;
        return R_RUN;
    case GK_WF: /* only its compensations come here */
        return b == 1 && seq % 2 == 1 && first ? R_FAIL : R_RUN;
    case GK_MSG:
        if (op == OP_MSG)
            return seq % 12 == 0 && first ? R_ONGOING : R_QUERY;
        return seq % 4 == 2 && first ? R_RUN_UNKNOWN : R_RUN;
    default:
        if (b == 1 && op == OP_CONFIRM && seq % 6 == 2 && first)
            return R_FAIL;
        if (b == 2 && op == OP_CONFIRM && seq % 4 == 1 && first)
            return R_RUN_UNKNOWN;
        if (b == 1 && op == OP_CANCEL && seq % 3 == 1 && first)
            return R_RUN_UNKNOWN;
        return R_RUN;
    }
}

static int
op_index(const char *op)
{
    for (int i = 0; i < OP_N; i++)
        if (strcmp(op, op_name[i]) == 0)
            return i;
    return -1;
}

/* The bank: every branch of every transaction of the workload. */
static troupe_outcome
bank(const troupe_task *t, troupe_task_reply *r, void *arg)
{
    (void)r;
    (void)arg;
    /* header: mode, gid, branch id, op, each NUL-terminated */
    const char *f[4];
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        const uint8_t *z = off < t->header_len
                               ? memchr(t->header + off, 0, t->header_len - off)
                               : NULL;
        if (z == NULL) {
            cbad(0, 1, "a branch task whose header is not four strings");
            return TROUPE_OUTCOME_UNKNOWN;
        }
        f[i] = (const char *)t->header + off;
        off = (size_t)(z - t->header) + 1;
    }
    const char *mode = f[0], *gid = f[1], *bid = f[2], *ops = f[3];
    size_t gl = strlen(gid);
    int kind = 0, op = op_index(ops);
    uint64_t cycle = 0, seq = 0;
    unsigned b = (unsigned)atoi(bid);
    if (t->kind != TROUPE_TASK_BRANCH || off != t->header_len ||
        !gid_parse(gid, gl, &kind, &cycle, &seq) ||
        strcmp(mode, kind_name[kind]) != 0 || op < 0) {
        cbad(0, 1, "a branch task %s %s that no submission made", mode, gid);
        return TROUPE_OUTCOME_UNKNOWN;
    }
    uint64_t id = gid_id(kind, cycle, seq);
    enum rule ru = rule_of(kind, seq, b, op, t->attempt);
    if (ru == R_ONGOING)
        return TROUPE_OUTCOME_ONGOING;
    if (ru == R_QUERY) {
        if (b != 0 || t->body_len != 0) {
            cbad(id, 2, "%s: a query-back of branch %s or with a payload", gid,
                 bid);
            return TROUPE_OUTCOME_UNKNOWN;
        }
        troupe_outcome o = 0;
        troupe_err e = troupe_barrier_msg_query_wait(CC.n.tb, gid, gl, &o);
        return e == TROUPE_OK ? o : TROUPE_OUTCOME_UNKNOWN;
    }
    /* The payload must be this op's own. */
    uint8_t want[32];
    size_t wl = payload_of(kind, cycle, seq, b, op, want, sizeof(want));
    if (wl == 0 || wl != t->body_len || memcmp(want, t->body, wl) != 0 ||
        op == OP_TRY || op == OP_MSG) {
        cbad(id, 3, "%s: branch %s: a payload that is not its op's", gid, bid);
        return TROUPE_OUTCOME_UNKNOWN;
    }
    if (ru == R_FAIL) /* nothing written: no barrier row either */
        return TROUPE_OUTCOME_FAILURE;
    unsigned acct[2];
    int64_t delta[2];
    int n = op_effect(kind, cycle, seq, b, op, acct, delta);
    troupe_barrier_verdict v = 0;
    bool hold_missing = false;
    troupe_err e =
        business(mode, gid, gl, b, bid, op, n, acct, delta, &v, &hold_missing);
    if (e != TROUPE_OK)
        return TROUPE_OUTCOME_UNKNOWN;
    atomic_fetch_add(&CC.verdicts[v], 1);
    crash_report(CC.fd, REC_GVERDICT, (int32_t)v, id);
    if (hold_missing)
        cbad(id, 4, "%s: branch %s: confirmed or cancelled without its hold",
             gid, bid);
    return ru == R_RUN_UNKNOWN ? TROUPE_OUTCOME_UNKNOWN
                               : TROUPE_OUTCOME_SUCCESS;
}

/* ---- the workflow: a transfer as two memoized steps ---- */

typedef struct wf_step {
    uint64_t cycle, seq;
    unsigned b;
} wf_step;

/* A step's action, run inline by the workflow's run: the barrier check
 * (workflow, gid, branch, "action") and the effect in one transaction.
 * Step 02 with seq % 7 == 3 is FAILURE (nothing written). A step whose
 * stored record says it succeeded is never run again: checked against
 * the document, which only the reply of an earlier run can have
 * changed (this run's is not sent yet). */
static troupe_outcome
wf_action(troupe_wf *wf, const char *bid, void *arg)
{
    const wf_step *st = arg;
    size_t gl = 0;
    const char *gid = troupe_wf_gid(wf, &gl);
    uint64_t id = gid_id(GK_WF, st->cycle, st->seq);
    troupe_gtx_detail *d = NULL;
    troupe_err e = troupe_gtx_detail_wait(CC.n.coord, gid, gl, &d);
    if (e != TROUPE_OK)
        return TROUPE_OUTCOME_UNKNOWN;
    bool done = st->b < d->n_branches &&
                d->branches[st->b].ops[0].state == TROUPE_GTX_CALL_SUCCEEDED;
    troupe_gtx_detail_destroy(d);
    if (done) {
        cbad(id, 5, "%s: step %s ran again after it succeeded", gid, bid);
        return TROUPE_OUTCOME_UNKNOWN;
    }
    if (st->b == 2 && st->seq % 7 == 3)
        return TROUPE_OUTCOME_FAILURE;
    unsigned acct[2];
    int64_t delta[2];
    int n = op_effect(GK_WF, st->cycle, st->seq, st->b, OP_ACTION, acct, delta);
    troupe_barrier_verdict v = 0;
    bool hold_missing = false;
    e = business("workflow", gid, gl, st->b, bid, OP_ACTION, n, acct, delta, &v,
                 &hold_missing);
    if (e != TROUPE_OK)
        return TROUPE_OUTCOME_UNKNOWN;
    atomic_fetch_add(&CC.verdicts[v], 1);
    crash_report(CC.fd, REC_GVERDICT, (int32_t)v, id);
    return TROUPE_OUTCOME_SUCCESS;
}

/* The workflow: step "debit" (01, its compensation credits back), step
 * "credit" (02, its compensation debits), both through the bank. */
static troupe_outcome
wf_run(troupe_wf *wf, const uint8_t *in, size_t len, void *arg)
{
    (void)in;
    (void)len;
    (void)arg;
    size_t gl = 0;
    const char *gid = troupe_wf_gid(wf, &gl);
    int kind = 0;
    uint64_t cycle = 0, seq = 0;
    if (!gid_parse(gid, gl, &kind, &cycle, &seq) || kind != GK_WF) {
        cbad(0, 1, "a workflow run %s that no submission made", gid);
        return TROUPE_OUTCOME_UNKNOWN;
    }
    static const char *const names[3] = {NULL, "debit", "credit"};
    for (unsigned b = 1; b <= 2; b++) {
        uint8_t p[32];
        troupe_gtx_call undo = {
            TARGET, p,
            payload_of(GK_WF, cycle, seq, b, OP_COMPENSATE, p, sizeof(p))};
        wf_step st = {cycle, seq, b};
        troupe_err e =
            troupe_wf_step(wf, names[b], &undo, wf_action, &st, NULL, NULL);
        if (e == TROUPE_EFAILED)
            return TROUPE_OUTCOME_FAILURE;
        if (e != TROUPE_OK)
            return TROUPE_OUTCOME_ONGOING;
    }
    return TROUPE_OUTCOME_SUCCESS;
}

/* The accounts hold all NACCT rows, or none: then seeds them in one
 * transaction. Anything else is a seed applied in part. */
static void
seed_check(troupe_tables *tb)
{
    troupe_scan_opts so = {.limit = 1000};
    troupe_rows *r = NULL;
    troupe_err e = troupe_table_scan_wait(tb, ACCT, &so, &r);
    if (e != TROUPE_OK)
        cdie("scan acct", e);
    size_t n = r->n;
    troupe_rows_destroy(r);
    if (n == NACCT)
        return;
    if (n != 0) {
        fprintf(stderr,
                "crash coord child: %zu of %d accounts: the seed was applied "
                "in part\n",
                n, NACCT);
        _exit(2);
    }
    troupe_txn *tx = NULL;
    if ((e = troupe_txn_begin(tb, NULL, &tx)) != TROUPE_OK)
        cdie("seed begin", e);
    for (unsigned a = 0; a < NACCT && e == TROUPE_OK; a++) {
        char k[4];
        uint8_t d[16];
        acct_key(k, a);
        size_t dl = doc_v(d, SEED_V);
        e = troupe_txn_insert(tx, ACCT, k, 3, d, dl, NULL);
    }
    if (e == TROUPE_OK)
        e = troupe_txn_commit_wait(tx, TROUPE_SYNC_ON);
    troupe_txn_destroy(tx);
    if (e != TROUPE_OK)
        cdie("seed", e);
}

static void
node_open(const char *dir, cnode *n)
{
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 2, .host_workers = 4};
    troupe_err e = troupe_runtime_create(&n->rt, &ro);
    if (e != TROUPE_OK)
        cdie("runtime", e);
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.sync = true;
    if ((e = troupe_db_open(dir, &o, &n->db)) != TROUPE_OK)
        cdie("open", e);
    if ((e = troupe_commit_create(n->db, NULL, &n->cm)) != TROUPE_OK)
        cdie("commit_create", e);
    troupe_catalog_opts co = {.rt = n->rt, .db = n->db};
    if ((e = troupe_catalog_open(&co, &n->cat)) != TROUPE_OK)
        cdie("catalog_open", e);
    troupe_tables_opts to = {.catalog = n->cat, .commit = n->cm};
    if ((e = troupe_tables_open(&to, &n->tb)) != TROUPE_OK)
        cdie("tables_open", e);
    if ((e = troupe_barrier_create_wait(n->tb)) != TROUPE_OK)
        cdie("barrier_create", e);
    if ((e = troupe_tables_create_wait(n->tb, ACCT, NULL, 0)) != TROUPE_OK)
        cdie("create acct", e);
    if ((e = troupe_tables_create_wait(n->tb, HOLD, NULL, 0)) != TROUPE_OK)
        cdie("create hold", e);
    seed_check(n->tb);
    CC.n = *n; /* the handler's tables, before the target can be called */
    troupe_target_opts tg = {.name = TARGET, .fn = bank};
    if ((e = troupe_target_create(n->rt, &tg, &n->tg)) != TROUPE_OK)
        cdie("target_create", e);
    troupe_workflow_def wd = {.name = WORKFLOW, .fn = wf_run};
    if ((e = troupe_workflow_create(n->rt, &wd, &n->wf)) != TROUPE_OK)
        cdie("workflow_create", e);
    troupe_coord_opts cop = {.rt = n->rt,
                             .tables = n->tb,
                             .retry_min_ms = RETRY_MIN_MS,
                             .retry_max_ms = RETRY_MAX_MS,
                             .tcc_timeout_ms = TCC_TIMEOUT_MS};
    if ((e = troupe_coord_open_wait(&cop, &n->coord)) != TROUPE_OK)
        cdie("coord_open", e);
    /* field by field: the handler may be reading CC.n.tb by now */
    CC.n.tg = n->tg;
    CC.n.coord = n->coord;
}

/* Stops and frees what node_open made, the coordinator first (it already
 * is when n->coord is NULL). Returns the first error. */
static troupe_err
node_close(cnode *n)
{
    troupe_err first = TROUPE_OK, e;
#define KEEP(x)                                                                \
    do {                                                                       \
        e = (x);                                                               \
        if (e != TROUPE_OK && first == TROUPE_OK)                              \
            first = e;                                                         \
    } while (0)
    if (n->coord != NULL) {
        KEEP(troupe_coord_stop_wait(n->coord));
        troupe_coord_destroy(n->coord);
    }
    KEEP(troupe_workflow_stop_wait(n->wf));
    troupe_workflow_destroy(n->wf);
    KEEP(troupe_target_stop_wait(n->tg));
    troupe_target_destroy(n->tg);
    KEEP(troupe_tables_stop_wait(n->tb));
    troupe_tables_destroy(n->tb);
    KEEP(troupe_catalog_stop_wait(n->cat));
    troupe_catalog_destroy(n->cat);
    KEEP(troupe_runtime_shutdown_wait(n->rt));
    troupe_runtime_destroy(n->rt);
    troupe_commit_destroy(n->cm);
    KEEP(troupe_db_close(n->db));
#undef KEEP
    memset(n, 0, sizeof(*n));
    return first;
}

static bool
final(troupe_gtx_status s)
{
    return s == TROUPE_GTX_SUCCEED || s == TROUPE_GTX_FAILED;
}

/* ---- the child: submitters ----------------------------------------------- */

/* A thread's submissions not yet seen final, oldest first. */
typedef struct ring {
    char gid[RING][GID_LEN_MAX];
    int n, head;
} ring;

/* Load shaping, not a wait for a condition: a submit returns once it is
 * stored, long before its calls ran, so without this a cycle would store
 * thousands of transactions for the next ones (and the drain) to drive.
 * Waits (bounded) until the oldest of a full ring is final. */
static void
ring_make_room(ring *r)
{
    if (r->n < RING)
        return;
    const char *g = r->gid[r->head];
    uint64_t lim = mono_ms() + RING_WAIT_MS;
    while (mono_ms() < lim) {
        troupe_gtx_info in;
        troupe_err e = troupe_gtx_query_wait(CC.n.coord, g, strlen(g), &in);
        if (e != TROUPE_OK)
            cdie("query", e);
        if (final(in.status))
            break;
        sleep_ms(2);
    }
    r->head = (r->head + 1) % RING;
    r->n--;
}

static void
ring_push(ring *r, const char *gid)
{
    snprintf(r->gid[(r->head + r->n) % RING], GID_LEN_MAX, "%s", gid);
    r->n++;
}

static void
call_of(troupe_gtx_call *c, uint8_t *buf, int kind, uint64_t seq, unsigned b,
        int op)
{
    c->target = TARGET;
    c->payload = buf;
    c->payload_len = payload_of(kind, CC.cycle, seq, b, op, buf, 32);
}

static void
saga_one(uint64_t seq, const char *gid, int gl)
{
    uint8_t p[4][32];
    troupe_saga_step st[2];
    call_of(&st[0].action, p[0], GK_SAGA, seq, 1, OP_ACTION);
    call_of(&st[0].compensate, p[1], GK_SAGA, seq, 1, OP_COMPENSATE);
    call_of(&st[1].action, p[2], GK_SAGA, seq, 2, OP_ACTION);
    call_of(&st[1].compensate, p[3], GK_SAGA, seq, 2, OP_COMPENSATE);
    /* odd seqs run their steps concurrently (docs/coordinator.md):
     * seq % 4 == 1 with step 02 after 01, seq % 4 == 3 both at once */
    uint64_t after[2] = {0, seq % 4 == 1 ? 1 : 0};
    troupe_saga_opts o = {.concurrent = true, .after = after};
    troupe_err e = troupe_saga_submit_wait(CC.n.coord, gid, (size_t)gl, st, 2,
                                           seq % 2 == 1 ? &o : NULL);
    if (e != TROUPE_OK)
        cdie("saga submit", e);
    int want = seq % 7 == 3 ? TROUPE_GTX_FAILED : TROUPE_GTX_SUCCEED;
    crash_report(CC.fd, REC_GACK, want, gid_id(GK_SAGA, CC.cycle, seq));
}

/* A message's local transaction: the barrier check {msg, gid, 00, msg}
 * and nothing else. True when it committed; false when the query-back
 * came first (its "rollback" row: DUPLICATED, or a commit that lost to
 * it). */
static bool
msg_local(const char *gid, int gl)
{
    troupe_barrier_branch bb = {.mode = "msg",
                                .gid = gid,
                                .gid_len = (size_t)gl,
                                .branch_id = TROUPE_MSG_BRANCH_ID,
                                .op = "msg"};
    for (int i = 0; i < TXN_TRIES; i++) {
        conflict_pause(i);
        troupe_txn *tx = NULL;
        troupe_err e = troupe_txn_begin(CC.n.tb, NULL, &tx);
        if (e != TROUPE_OK)
            cdie("local begin", e);
        troupe_barrier_verdict v = 0;
        if ((e = troupe_barrier_check_wait(tx, &bb, &v)) != TROUPE_OK)
            cdie("local barrier", e);
        if (v != TROUPE_BARRIER_EXECUTE) {
            troupe_txn_destroy(tx);
            return false;
        }
        e = troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT);
        troupe_txn_destroy(tx);
        if (e == TROUPE_OK)
            return true;
        if (e != TROUPE_ECONFLICT && e != TROUPE_EEXIST)
            cdie("local commit", e);
    }
    cdie("local commit", TROUPE_ECONFLICT);
}

static void
msg_one(uint64_t seq, const char *gid, int gl)
{
    uint8_t p[32];
    troupe_gtx_call step, query = {TARGET, NULL, 0};
    call_of(&step, p, GK_MSG, seq, 1, OP_ACTION);
    troupe_err e = troupe_msg_prepare_wait(CC.n.coord, gid, (size_t)gl, &step,
                                           1, &query, GRACE_MS);
    if (e != TROUPE_OK)
        cdie("msg prepare", e);
    bool submit = seq % 3 != 0;
    bool committed = (submit || seq % 2 == 0) && msg_local(gid, gl);
    if (submit && committed &&
        (e = troupe_gtx_submit_wait(CC.n.coord, gid, (size_t)gl)) != TROUPE_OK)
        cdie("msg submit", e);
    crash_report(CC.fd, REC_GACK,
                 committed ? TROUPE_GTX_SUCCEED : TROUPE_GTX_FAILED,
                 gid_id(GK_MSG, CC.cycle, seq));
}

/* A TCC branch's try (the application's): the barrier's op "try", the
 * debit of `from` (branch 01) and the branch's hold row. Its cancel
 * cannot have come first: only a later process aborts this one. */
static void
tcc_try(uint64_t seq, const char *gid, int gl, unsigned b)
{
    unsigned acct[2];
    int64_t delta[2];
    int n = op_effect(GK_TCC, CC.cycle, seq, b, OP_TRY, acct, delta);
    char bid[8];
    snprintf(bid, sizeof(bid), "%02u", b);
    troupe_barrier_branch bb = {.mode = "tcc",
                                .gid = gid,
                                .gid_len = (size_t)gl,
                                .branch_id = bid,
                                .op = "try"};
    for (int i = 0; i < TXN_TRIES; i++) {
        conflict_pause(i);
        troupe_txn *tx = NULL;
        troupe_err e = troupe_txn_begin(CC.n.tb, NULL, &tx);
        if (e != TROUPE_OK)
            cdie("try begin", e);
        troupe_barrier_verdict v = 0;
        if ((e = troupe_barrier_check_wait(tx, &bb, &v)) != TROUPE_OK)
            cdie("try barrier", e);
        if (v != TROUPE_BARRIER_EXECUTE)
            cdie("try: its cancel came first", TROUPE_ESTATE);
        e = apply(tx, n, acct, delta);
        char hk[GID_LEN_MAX + 8];
        uint8_t d[16];
        int hl = hold_key(hk, sizeof(hk), gid, (size_t)gl, b);
        size_t dl = doc_v(d, n > 0 ? -delta[0] : 0);
        if (e == TROUPE_OK)
            e = troupe_txn_insert(tx, HOLD, hk, (size_t)hl, d, dl, NULL);
        if (e == TROUPE_OK)
            e = troupe_txn_commit_wait(tx, TROUPE_SYNC_DEFAULT);
        troupe_txn_destroy(tx);
        if (e == TROUPE_OK)
            return;
        if (e != TROUPE_ECONFLICT && e != TROUPE_EEXIST)
            cdie("try commit", e);
    }
    cdie("try commit", TROUPE_ECONFLICT);
}

/* A TCC past its timeout (TCC_TIMEOUT_MS) before this thread came to its
 * register, abort or submit: aborted by the coordinator, so it fails. */
static bool
tcc_timed_out(troupe_err e, int kind, uint64_t seq, const char *gid, int gl)
{
    troupe_gtx_info in;
    if (e != TROUPE_ECONFLICT ||
        troupe_gtx_query_wait(CC.n.coord, gid, (size_t)gl, &in) != TROUPE_OK ||
        strcmp(in.reason, "prepared for longer than its timeout-to-fail") != 0)
        return false;
    crash_report(CC.fd, REC_GACK, TROUPE_GTX_FAILED,
                 gid_id(kind, CC.cycle, seq));
    return true;
}

static void
tcc_one(uint64_t seq, const char *gid, int gl)
{
    troupe_err e = troupe_tcc_prepare_wait(CC.n.coord, gid, (size_t)gl);
    if (e != TROUPE_OK)
        cdie("tcc prepare", e);
    for (unsigned b = 1; b <= 2; b++) {
        uint8_t p[2][32];
        troupe_gtx_call confirm, cancel;
        call_of(&confirm, p[0], GK_TCC, seq, b, OP_CONFIRM);
        call_of(&cancel, p[1], GK_TCC, seq, b, OP_CANCEL);
        char got[8], want[8];
        e = troupe_tcc_register_wait(CC.n.coord, gid, (size_t)gl, &confirm,
                                     &cancel, got);
        if (tcc_timed_out(e, GK_TCC, seq, gid, gl))
            return;
        if (e != TROUPE_OK)
            cdie("tcc register", e);
        snprintf(want, sizeof(want), "%02u", b);
        if (strcmp(got, want) != 0)
            cdie("tcc register: another branch id", TROUPE_ECORRUPT);
    }
    tcc_try(seq, gid, gl, 1);
    bool by_abort = seq % 5 == 4;
    if (by_abort) {
        e = troupe_gtx_abort_wait(CC.n.coord, gid, (size_t)gl, NULL);
    } else {
        tcc_try(seq, gid, gl, 2);
        e = troupe_gtx_submit_wait(CC.n.coord, gid, (size_t)gl);
    }
    if (tcc_timed_out(e, GK_TCC, seq, gid, gl))
        return;
    if (e != TROUPE_OK)
        cdie(by_abort ? "tcc abort" : "tcc submit", e);
    crash_report(CC.fd, REC_GACK,
                 by_abort ? TROUPE_GTX_FAILED : TROUPE_GTX_SUCCEED,
                 gid_id(GK_TCC, CC.cycle, seq));
}

/* An xa branch: a troupe transaction moving delta on account a, prepared
 * under gid/branch-id by troupe_xa_branch_wait; false when its prepare
 * lost a conflict (the branch registered, never prepared). */
static bool
xa_side(const char *gid, int gl, unsigned a, int64_t delta)
{
    troupe_txn *tx = NULL;
    troupe_err e = troupe_txn_begin(CC.n.tb, NULL, &tx);
    if (e != TROUPE_OK)
        cdie("xa begin txn", e);
    e = apply(tx, 1, &a, &delta);
    char bid[8];
    if (e == TROUPE_OK)
        e = troupe_xa_branch_wait(CC.n.coord, gid, (size_t)gl, tx, bid);
    troupe_txn_destroy(tx);
    if (e == TROUPE_ECONFLICT)
        return false;
    if (e != TROUPE_OK)
        cdie("xa branch", e);
    return true;
}

/* An xa transfer: branch 01 debits `from`, 02 credits `to`, each prepared
 * (holding its account until resolved); submitted when both prepared and
 * seq % 5 != 4, else aborted. Acknowledged with the status that must
 * follow. */
static void
xa_one(uint64_t seq, const char *gid, int gl)
{
    unsigned from, to;
    int64_t amt;
    xfer(CC.cycle, seq, &from, &to, &amt);
    troupe_err e = troupe_xa_begin_wait(CC.n.coord, gid, (size_t)gl);
    if (e != TROUPE_OK)
        cdie("xa begin", e);
    bool ok = xa_side(gid, gl, from, -amt) && xa_side(gid, gl, to, amt) &&
              seq % 5 != 4;
    e = ok ? troupe_gtx_submit_wait(CC.n.coord, gid, (size_t)gl)
           : troupe_gtx_abort_wait(CC.n.coord, gid, (size_t)gl, NULL);
    if (tcc_timed_out(e, GK_XA, seq, gid, gl))
        return;
    if (e != TROUPE_OK)
        cdie(ok ? "xa submit" : "xa abort", e);
    crash_report(CC.fd, REC_GACK, ok ? TROUPE_GTX_SUCCEED : TROUPE_GTX_FAILED,
                 gid_id(GK_XA, CC.cycle, seq));
}

static void
wf_one(uint64_t seq, const char *gid, int gl)
{
    troupe_err e = troupe_workflow_submit_wait(CC.n.coord, gid, (size_t)gl,
                                               WORKFLOW, NULL, 0);
    if (e != TROUPE_OK)
        cdie("workflow submit", e);
    int want = seq % 7 == 3 ? TROUPE_GTX_FAILED : TROUPE_GTX_SUCCEED;
    crash_report(CC.fd, REC_GACK, want, gid_id(GK_WF, CC.cycle, seq));
}

static void *
submitter(void *arg)
{
    int kind = (int)(intptr_t)arg;
    ring r = {.n = 0};
    for (;;) {
        ring_make_room(&r);
        uint64_t seq = atomic_fetch_add(&CC.next[kind], 1);
        char gid[GID_LEN_MAX];
        int gl = gid_fmt(gid, sizeof(gid), kind, CC.cycle, seq);
        if (kind == GK_SAGA)
            saga_one(seq, gid, gl);
        else if (kind == GK_MSG)
            msg_one(seq, gid, gl);
        else if (kind == GK_WF)
            wf_one(seq, gid, gl);
        else if (kind == GK_XA)
            xa_one(seq, gid, gl);
        else
            tcc_one(seq, gid, gl);
        ring_push(&r, gid);
    }
    return NULL;
}

/* argv: DIR CYCLE SYNC FD THREADS */
int
crash_child_coord(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *dir = argv[0];
    CC.cycle = strtoull(argv[1], NULL, 10);
    if (atoi(argv[2]) == 0) {
        fprintf(stderr, "crash coord child: runs synced only\n");
        return 2;
    }
    CC.fd = atoi(argv[3]);
    int threads = atoi(argv[4]);
    if (threads < 1 || threads > 16)
        return 2;
    cnode n;
    memset(&n, 0, sizeof(n));
    node_open(dir, &n);
    crash_report(CC.fd, REC_READY, 0, 0);
    pthread_t th;
    /* xa branches hold their accounts from prepare to resolution (two
     * synced writes or more), which the other kinds' transactions then
     * conflict on: one xa thread keeps them from starving the rest */
    for (int k = GK_SAGA; k < GK_N; k++)
        for (int i = 0; i < (k == GK_XA ? 1 : threads); i++)
            if (pthread_create(&th, NULL, submitter, (void *)(intptr_t)k) != 0)
                cdie("thread", TROUPE_ESYS);
    for (;;)
        pause();
}

/* ---- the drain: drive everything to its end, then check --------------- */

typedef struct fgtx {
    uint64_t id;
    troupe_gtx_status status;
    troupe_gtx_mode mode;
    uint32_t steps;
    uint8_t rows[3][OP_N]; /* barrier rows by branch 00..02 and op */
    int acked;             /* the expected status when acknowledged */
} fgtx;

static int
fgtx_cmp(const void *a, const void *b)
{
    uint64_t x = ((const fgtx *)a)->id, y = ((const fgtx *)b)->id;
    return (x > y) - (x < y);
}

static fgtx *
fgtx_find(fgtx *v, size_t n, uint64_t id)
{
    fgtx key = {.id = id};
    return bsearch(&key, v, n, sizeof(*v), fgtx_cmp);
}

static const char *
status_name(troupe_gtx_status s)
{
    static const char *const n[] = {"?",        "prepared", "submitted",
                                    "aborting", "succeed",  "failed"};
    return (unsigned)s < 6 ? n[s] : "?";
}

static void
id_gid(char *buf, size_t cap, uint64_t id)
{
    gid_fmt(buf, cap, (int)(id >> 32 & 0xff), id >> 40, id & 0xffffffffu);
}

#define DFAIL(...)                                                             \
    do {                                                                       \
        fprintf(stderr, "%s: FAIL: ", label);                                  \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        rc = 1;                                                                \
        goto out;                                                              \
    } while (0)

/* Every stored transaction: *v (the caller frees it), *n; *open those not
 * final. */
static troupe_err
list_all(fgtx **v, size_t *n, size_t *open, const char *label)
{
    size_t cap = 0;
    *v = NULL;
    *n = 0;
    *open = 0;
    char after[TROUPE_GID_MAX + 1] = "";
    for (;;) {
        troupe_gtx_page *pg = NULL;
        troupe_err e =
            troupe_gtx_list_wait(CC.n.coord, NULL, after[0] ? after : NULL,
                                 TROUPE_GTX_LIST_MAX, &pg);
        if (e != TROUPE_OK)
            return e;
        for (size_t i = 0; i < pg->n; i++) {
            const troupe_gtx_entry *it = &pg->items[i];
            int k;
            uint64_t c, s;
            if (!gid_parse(it->gid, strlen(it->gid), &k, &c, &s) ||
                troupe_gtx_mode_of(kind_name[k]) != it->info.mode) {
                fprintf(stderr,
                        "%s: FAIL: a stored transaction %s no "
                        "submission made\n",
                        label, it->gid);
                troupe_gtx_page_destroy(pg);
                return TROUPE_ECORRUPT;
            }
            if (*n == cap) {
                cap = cap ? cap * 2 : 4096;
                fgtx *nv = realloc(*v, cap * sizeof(**v));
                if (nv == NULL) {
                    troupe_gtx_page_destroy(pg);
                    return TROUPE_ENOMEM;
                }
                *v = nv;
            }
            fgtx *g = &(*v)[(*n)++];
            memset(g, 0, sizeof(*g));
            g->id = gid_id(k, c, s);
            g->status = it->info.status;
            g->mode = it->info.mode;
            g->steps = it->info.steps;
            if (!final(g->status))
                (*open)++;
        }
        bool more = pg->more;
        snprintf(after, sizeof(after), "%s", pg->cursor);
        troupe_gtx_page_destroy(pg);
        if (!more)
            break;
    }
    if (*n > 0)
        qsort(*v, *n, sizeof(**v), fgtx_cmp);
    return TROUPE_OK;
}

/* Prints what keeps gid g from ending. */
static void
explain(const char *label, const fgtx *g)
{
    char gid[GID_LEN_MAX];
    id_gid(gid, sizeof(gid), g->id);
    troupe_gtx_detail *d = NULL;
    if (troupe_gtx_detail_wait(CC.n.coord, gid, strlen(gid), &d) != TROUPE_OK)
        return;
    fprintf(stderr, "%s:   %s %s reason \"%s\" attempts %u\n", label, gid,
            status_name(d->info.status), d->info.reason, d->info.attempts);
    for (size_t i = 0; i < d->n_branches; i++)
        for (size_t j = 0; j < d->branches[i].n_ops; j++) {
            const troupe_gtx_op *o = &d->branches[i].ops[j];
            fprintf(stderr,
                    "%s:     branch %s %s state %d attempts %u "
                    "last %d\n",
                    label, d->branches[i].id, o->op, o->state, o->attempts,
                    o->last);
        }
    troupe_gtx_detail_destroy(d);
}

/* The barrier rows g's final status implies, into want (a failed TCC's
 * try row may instead be its null cancel's: the caller allows that). */
static void
rows_wanted(const fgtx *g, int kind, uint8_t want[3][OP_N])
{
    memset(want, 0, 3 * OP_N);
    bool ok = g->status == TROUPE_GTX_SUCCEED;
    switch (kind) {
    case GK_SAGA:
    case GK_WF: /* the same rows, under mode "workflow" */
        want[1][OP_ACTION] = 1 + OP_ACTION;
        if (ok) {
            want[2][OP_ACTION] = 1 + OP_ACTION;
        } else {
            want[1][OP_COMPENSATE] = 1 + OP_COMPENSATE;
            want[2][OP_ACTION] = 1 + OP_COMPENSATE; /* null compensation */
            want[2][OP_COMPENSATE] = 1 + OP_COMPENSATE;
        }
        break;
    case GK_XA: /* its branches are prepared transactions: no barrier */
        break;
    case GK_MSG:
        want[0][OP_MSG] = ok ? 1 + OP_MSG : RS_ROLLBACK;
        if (ok)
            want[1][OP_ACTION] = 1 + OP_ACTION;
        break;
    default:
        for (unsigned b = 1; b <= g->steps && b <= 2; b++) {
            want[b][OP_TRY] = 1 + OP_TRY;
            if (ok)
                want[b][OP_CONFIRM] = 1 + OP_CONFIRM;
            else
                want[b][OP_CANCEL] = 1 + OP_CANCEL;
        }
        break;
    }
}

static const char *
reason_name(uint8_t r)
{
    return r == 0             ? "none"
           : r == RS_ROLLBACK ? "rollback"
           : r <= OP_N        ? op_name[r - 1]
                              : "?";
}

/* Reads the barrier table into the rows of the transactions of v. */
static troupe_err
read_barrier(fgtx *v, size_t n, uint64_t *nrows, const char *label)
{
    uint8_t *cur = NULL;
    size_t cur_len = 0;
    troupe_err e = TROUPE_OK;
    for (;;) {
        troupe_scan_opts so = {
            .after = cur, .after_len = cur_len, .limit = TROUPE_TABLE_PAGE_MAX};
        troupe_rows *r = NULL;
        if ((e = troupe_table_scan_wait(CC.n.tb, TROUPE_BARRIER_TABLE, &so,
                                        &r)) != TROUPE_OK)
            break;
        for (size_t i = 0; i < r->n && e == TROUPE_OK; i++) {
            const troupe_row *row = &r->rows[i];
            troupe_key_reader kr;
            troupe_key_item it[4], end;
            char f[4][GID_LEN_MAX];
            bool ok = true;
            troupe_key_reader_init(&kr, row->key, row->key_len);
            for (int j = 0; j < 4 && ok; j++) {
                ok = troupe_key_read(&kr, &it[j]) == TROUPE_OK &&
                     it[j].type == TROUPE_KEY_STRING &&
                     it[j].v.s.len < GID_LEN_MAX;
                if (ok) {
                    memcpy(f[j], it[j].v.s.ptr, it[j].v.s.len);
                    f[j][it[j].v.s.len] = '\0';
                }
            }
            ok = ok && troupe_key_read(&kr, &end) == TROUPE_ENOENT;
            troupe_key_reader_fini(&kr);
            troupe_reader rd;
            const char *rs = NULL;
            size_t rl = 0, kl = 0;
            const char *k = NULL;
            troupe_reader_init(&rd, row->doc, row->doc_len);
            troupe_read_map_n(&rd, 1);
            troupe_read_str(&rd, 16, &k, &kl);
            troupe_read_str(&rd, 16, &rs, &rl);
            char reason[17] = "";
            if (troupe_read_end(&rd) == TROUPE_OK && kl == 6 &&
                memcmp(k, "reason", 6) == 0) {
                memcpy(reason, rs, rl);
                reason[rl] = '\0';
            } else {
                ok = false;
            }
            int kind;
            uint64_t c, s;
            int op = ok ? op_index(f[3]) : -1;
            int ri = strcmp(reason, "rollback") == 0 ? RS_ROLLBACK
                                                     : op_index(reason) + 1;
            unsigned b = ok ? (unsigned)atoi(f[2]) : 9;
            fgtx *g = NULL;
            if (ok && gid_parse(f[1], strlen(f[1]), &kind, &c, &s) &&
                strcmp(f[0], kind_name[kind]) == 0 && op >= 0 && b <= 2 &&
                ri > 0)
                g = fgtx_find(v, n, gid_id(kind, c, s));
            else
                ok = false;
            if (!ok) {
                fprintf(stderr, "%s: FAIL: a barrier row no branch wrote\n",
                        label);
                e = TROUPE_ECORRUPT;
            } else if (g == NULL) {
                fprintf(stderr,
                        "%s: FAIL: barrier row %s %s %s %s of a "
                        "transaction that is not stored\n",
                        label, f[0], f[1], f[2], f[3]);
                e = TROUPE_ECORRUPT;
            } else {
                g->rows[b][op] = (uint8_t)ri;
                (*nrows)++;
            }
        }
        free(cur);
        cur = NULL;
        bool more = r->more;
        if (e == TROUPE_OK && more) {
            cur_len = r->cursor_len;
            cur = malloc(cur_len);
            if (cur == NULL)
                e = TROUPE_ENOMEM;
            else
                memcpy(cur, r->cursor, cur_len);
        }
        troupe_rows_destroy(r);
        if (e != TROUPE_OK || !more)
            break;
    }
    free(cur);
    return e;
}

typedef struct dack {
    uint64_t id;
    int want;
} dack;

/* argv: DIR ACKS FD LABEL */
int
crash_child_coord_drain(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    const char *dir = argv[0], *label = argv[3];
    CC.fd = atoi(argv[2]);
    CC.cycle = UINT64_MAX;
    int rc = 0;
    fgtx *v = NULL;
    size_t n = 0, open = 0;
    dack *acks = NULL;
    size_t nacks = 0, capacks = 0;
    FILE *af = fopen(argv[1], "r");
    if (af == NULL) {
        fprintf(stderr, "%s: FAIL: cannot read %s\n", label, argv[1]);
        return 1;
    }
    unsigned long long aid;
    int astatus;
    while (fscanf(af, "%llu %d", &aid, &astatus) == 2) {
        if (nacks == capacks) {
            capacks = capacks ? capacks * 2 : 4096;
            acks = realloc(acks, capacks * sizeof(*acks));
            if (acks == NULL)
                cdie("acks", TROUPE_ENOMEM);
        }
        acks[nacks++] = (dack){aid, astatus};
    }
    fclose(af);
    uint64_t t0 = mono_ms();
    cnode nd;
    memset(&nd, 0, sizeof(nd));
    node_open(dir, &nd);
    uint64_t rounds = 0;
    troupe_err e;
    /* Until no stored transaction is open (re-read every 20 ms), or the
     * bound: the coordinator drives them on its own timers. */
    for (;; rounds++) {
        free(v);
        if ((e = list_all(&v, &n, &open, label)) != TROUPE_OK)
            DFAIL("list: %s", troupe_err_name(e));
        if (open == 0)
            break;
        if (mono_ms() - t0 > DRAIN_MS) {
            fprintf(stderr,
                    "%s: FAIL: %zu of %zu transactions not final "
                    "after %d s:\n",
                    label, open, n, DRAIN_MS / 1000);
            int shown = 0;
            for (size_t i = 0; i < n && shown < 5; i++)
                if (!final(v[i].status)) {
                    explain(label, &v[i]);
                    shown++;
                }
            rc = 1;
            goto out;
        }
        sleep_ms(20);
    }
    uint64_t drained_ms = mono_ms() - t0;
    /* Nothing is in flight once all are final; stop the coordinator so
     * nothing changes under the reads. */
    e = troupe_coord_stop_wait(nd.coord);
    troupe_coord_destroy(nd.coord);
    nd.coord = NULL;
    CC.n.coord = NULL;
    if (e != TROUPE_OK)
        DFAIL("coord stop: %s", troupe_err_name(e));
    uint64_t nrows = 0;
    if ((e = read_barrier(v, n, &nrows, label)) != TROUPE_OK) {
        rc = 1;
        goto out;
    }
    /* Acknowledged: stored, with the status the submitter expected. */
    for (size_t i = 0; i < nacks; i++) {
        char gid[GID_LEN_MAX];
        id_gid(gid, sizeof(gid), acks[i].id);
        fgtx *g = fgtx_find(v, n, acks[i].id);
        if (g == NULL)
            DFAIL("%s was acknowledged and is not stored", gid);
        if ((int)g->status != acks[i].want)
            DFAIL("%s was acknowledged to end %s, it ended %s", gid,
                  status_name((troupe_gtx_status)acks[i].want),
                  status_name(g->status));
        g->acked = acks[i].want;
    }
    /* Every stored one: its status by rule, its effect. */
    int64_t bal[NACCT];
    for (int a = 0; a < NACCT; a++)
        bal[a] = SEED_V;
    uint64_t count[GK_N][6] = {{0}}, unacked = 0;
    for (size_t i = 0; i < n; i++) {
        fgtx *g = &v[i];
        int kind = (int)(g->id >> 32 & 0xff);
        uint64_t cycle = g->id >> 40, seq = g->id & 0xffffffffu;
        char gid[GID_LEN_MAX];
        id_gid(gid, sizeof(gid), g->id);
        bool ok = g->status == TROUPE_GTX_SUCCEED;
        count[kind][g->status]++;
        unacked += g->acked == 0;
        if ((kind == GK_SAGA || kind == GK_WF) && ok != (seq % 7 != 3))
            DFAIL("%s %s ended %s, its rule says %s", kind_name[kind], gid,
                  status_name(g->status), seq % 7 == 3 ? "failed" : "succeed");
        if ((kind == GK_TCC || kind == GK_XA) && ok &&
            (seq % 5 == 4 || g->steps != 2))
            DFAIL("%s %s succeeded with %u branches%s", kind_name[kind], gid,
                  g->steps,
                  seq % 5 == 4 ? " though its application aborted it" : "");
        if (((kind == GK_SAGA || kind == GK_WF) && g->steps != 2) ||
            (kind == GK_MSG && g->steps != 1))
            DFAIL("%s has %u steps", gid, g->steps);
        if (ok) {
            unsigned from, to;
            int64_t amt;
            xfer(cycle, seq, &from, &to, &amt);
            bal[from] -= amt;
            bal[to] += amt;
        }
    }
    /* Balances: each the seed plus the net of the succeeded ones. */
    troupe_scan_opts so = {.limit = 1000};
    troupe_rows *r = NULL;
    if ((e = troupe_table_scan_wait(nd.tb, ACCT, &so, &r)) != TROUPE_OK)
        DFAIL("scan acct: %s", troupe_err_name(e));
    int64_t sum = 0;
    int wrong = 0;
    bool rows_ok = r->n == NACCT;
    for (size_t i = 0; i < r->n && rows_ok; i++) {
        char k[4];
        int64_t b = 0;
        acct_key(k, (unsigned)i);
        rows_ok = r->rows[i].key_len == 3 &&
                  memcmp(r->rows[i].key, k, 3) == 0 &&
                  read_v(r->rows[i].doc, r->rows[i].doc_len, &b);
        sum += b;
        if (rows_ok && b != bal[i] && ++wrong <= 8)
            fprintf(stderr,
                    "%s: FAIL: account %s holds %lld, the final "
                    "transactions make it %lld (%+lld)\n",
                    label, k, (long long)b, (long long)bal[i],
                    (long long)(b - bal[i]));
    }
    size_t nacct = r->n;
    troupe_rows_destroy(r);
    if (!rows_ok)
        DFAIL("the accounts are not a00..a%02d with {v} (%zu rows)", NACCT - 1,
              nacct);
    if (sum != (int64_t)NACCT * SEED_V)
        fprintf(stderr, "%s: FAIL: the balances add up to %lld, not %lld\n",
                label, (long long)sum, (long long)NACCT * SEED_V);
    if (wrong > 0 || sum != (int64_t)NACCT * SEED_V)
        DFAIL("%d of %d balances do not match the final transactions (the "
              "first above): a step applied twice, or compensated when it "
              "must not be",
              wrong, NACCT);
    if ((e = troupe_table_scan_wait(nd.tb, HOLD, &so, &r)) != TROUPE_OK)
        DFAIL("scan hold: %s", troupe_err_name(e));
    if (r->n > 0) {
        fprintf(stderr,
                "%s: FAIL: %zu hold rows left (a hanging "
                "reservation), the first %.*s\n",
                label, r->n, (int)r->rows[0].key_len,
                (const char *)r->rows[0].key);
        troupe_rows_destroy(r);
        rc = 1;
        goto out;
    }
    troupe_rows_destroy(r);
    /* No xa branch left prepared: every one was committed or rolled back
     * with its transaction's end (a held key would block for ever). */
    troupe_xa_page *xp = NULL;
    if ((e = troupe_xa_list_wait(nd.tb, NULL, 0, 10, &xp)) != TROUPE_OK)
        DFAIL("xa list: %s", troupe_err_name(e));
    size_t left = xp->n;
    char first[TROUPE_XA_XID_MAX + 1] = "";
    if (left > 0)
        snprintf(first, sizeof(first), "%s", xp->v[0].xid);
    troupe_xa_page_destroy(xp);
    if (left > 0)
        DFAIL("%zu xa branches left prepared after every transaction ended, "
              "the first %s",
              left, first);
    /* Every stored one's barrier rows: exactly those its status implies. */
    for (size_t i = 0; i < n; i++) {
        const fgtx *g = &v[i];
        int kind = (int)(g->id >> 32 & 0xff);
        bool ok = g->status == TROUPE_GTX_SUCCEED;
        char gid[GID_LEN_MAX];
        id_gid(gid, sizeof(gid), g->id);
        uint8_t want[3][OP_N];
        rows_wanted(g, kind, want);
        for (unsigned b = 0; b < 3; b++)
            for (int op = 0; op < OP_N; op++) {
                uint8_t got = g->rows[b][op], w = want[b][op];
                /* a failed saga whose two steps ran at once may have
                 * compensated 01 before its action ever ran (interrupted
                 * by a kill, then not run again going back): null */
                uint64_t sq = g->id & 0xffffffffu;
                bool fine = got == w ||
                            (kind == GK_TCC && op == OP_TRY && w != 0 &&
                             got == 1 + OP_CANCEL && !ok) ||
                            (kind == GK_SAGA && sq % 4 == 3 && !ok && b == 1 &&
                             op == OP_ACTION && got == 1 + OP_COMPENSATE);
                if (!fine)
                    DFAIL("%s %s: barrier row %02u %s is %s, want %s%s", gid,
                          status_name(g->status), b, op_name[op],
                          reason_name(got), reason_name(w),
                          op == OP_COMPENSATE || op == OP_CANCEL
                              ? " (compensated when it must not be, or not "
                                "when it must)"
                              : "");
            }
    }
    if (atomic_load(&CC.bad) > 0)
        DFAIL("the handler saw %llu violations (above)",
              (unsigned long long)atomic_load(&CC.bad));
    printf("%s: drain: %zu transactions final in %.1f s (%llu rounds); "
           "acknowledged %zu, stored but not acknowledged %llu\n",
           label, n, (double)drained_ms / 1000.0, (unsigned long long)rounds,
           nacks, (unsigned long long)unacked);
    for (int k = GK_SAGA; k < GK_N; k++)
        printf("%s: drain: %s: %llu succeed, %llu failed\n", label,
               kind_name[k], (unsigned long long)count[k][TROUPE_GTX_SUCCEED],
               (unsigned long long)count[k][TROUPE_GTX_FAILED]);
    printf("%s: drain: %llu barrier rows, each the one its transaction's "
           "status implies; %d balances add up to %lld; no hold left; the "
           "drain's handler: %llu executed, %llu duplicated, %llu null "
           "compensations\n",
           label, (unsigned long long)nrows, NACCT, (long long)sum,
           (unsigned long long)atomic_load(&CC.verdicts[1]),
           (unsigned long long)atomic_load(&CC.verdicts[3]),
           (unsigned long long)atomic_load(&CC.verdicts[2]));
out:
    free(v);
    free(acks);
    e = node_close(&nd);
    if (e != TROUPE_OK && rc == 0) {
        fprintf(stderr, "%s: FAIL: close: %s\n", label, troupe_err_name(e));
        rc = 1;
    }
    return rc;
}

/* ---- the parent: what the children said --------------------------------- */

static struct {
    dack *v;
    size_t n, cap;
    uint64_t per_kind[GK_N];
    uint64_t verdicts[4]; /* by troupe_barrier_verdict */
    uint64_t older;       /* of them, of an earlier cycle's transaction */
} CA;

int
crash_coord_note(const crash_rec *r, uint64_t cycle, char *msg, size_t cap)
{
    char gid[GID_LEN_MAX];
    id_gid(gid, sizeof(gid), r->id);
    int kind = (int)(r->id >> 32 & 0xff);
    if (r->type == REC_GVERDICT && r->err >= TROUPE_BARRIER_EXECUTE &&
        r->err <= TROUPE_BARRIER_DUPLICATED) {
        CA.verdicts[r->err]++;
        CA.older += r->id >> 40 < cycle;
        return 0;
    }
    if (r->type == REC_GBAD) {
        snprintf(msg, cap,
                 "the handler saw a violation (code %d) at %s "
                 "(above)",
                 r->err, gid);
        return -1;
    }
    if (r->type != REC_GACK || kind < GK_SAGA || kind >= GK_N ||
        r->id >> 40 != cycle ||
        (r->err != TROUPE_GTX_SUCCEED && r->err != TROUPE_GTX_FAILED)) {
        snprintf(msg, cap,
                 "unexpected record %u (err %d, id %s) from the "
                 "coordinator child",
                 r->type, r->err, gid);
        return -1;
    }
    if (CA.n == CA.cap) {
        CA.cap = CA.cap ? CA.cap * 2 : 4096;
        CA.v = realloc(CA.v, CA.cap * sizeof(*CA.v));
        if (CA.v == NULL) {
            snprintf(msg, cap, "out of memory");
            return -1;
        }
    }
    CA.v[CA.n++] = (dack){r->id, r->err};
    CA.per_kind[kind]++;
    return 0;
}

int
crash_coord_write_acks(const char *path, crash_coord_stats *st, char *msg,
                       size_t cap)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        snprintf(msg, cap, "cannot write %s", path);
        return -1;
    }
    for (size_t i = 0; i < CA.n; i++)
        fprintf(f, "%llu %d\n", (unsigned long long)CA.v[i].id, CA.v[i].want);
    if (fclose(f) != 0) {
        snprintf(msg, cap, "cannot write %s", path);
        return -1;
    }
    st->sagas = CA.per_kind[GK_SAGA];
    st->msgs = CA.per_kind[GK_MSG];
    st->tccs = CA.per_kind[GK_TCC];
    st->workflows = CA.per_kind[GK_WF];
    st->xas = CA.per_kind[GK_XA];
    st->executed = CA.verdicts[TROUPE_BARRIER_EXECUTE];
    st->null_comp = CA.verdicts[TROUPE_BARRIER_NULL_COMPENSATION];
    st->duplicated = CA.verdicts[TROUPE_BARRIER_DUPLICATED];
    st->older = CA.older;
    return 0;
}

void
crash_coord_reset(void)
{
    free(CA.v);
    memset(&CA, 0, sizeof(CA));
}
