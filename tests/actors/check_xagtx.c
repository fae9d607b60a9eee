/* The coordinator's XA mode (troupe/coordinator.h, "XA over troupe's own
 * tables") on a real runtime and database: branches that are troupe
 * transactions prepared under "gid/branch-id", committed by the
 * coordinator on submit or rolled back on abort through its built-in
 * target, keys held between; a prepare that conflicts; a prepared xa
 * aborted by its timeout; a process killed after its prepares whose
 * branches stay held across the restart until the coordinator resolves
 * them. The table side of XA is check_xa's. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "troupe/catalog.h"
#include "troupe/commit.h"
#include "troupe/coordinator.h"
#include "troupe/pack.h"
#include "troupe/storage.h"
#include "troupe/table.h"
#include "troupe/txn.h"
#include "troupe/xa.h"
#include "tsupport.h"

static struct {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *commit;
    troupe_catalog *cat;
    troupe_tables *tables;
    troupe_coord *coord;
    char *dir;
    int64_t tcc_timeout_ms;
} fx;

static void
fx_open(void)
{
    troupe_runtime_opts o = {.schedulers = 2, .workers = 2, .host_workers = 2};
    ck_assert_ok(troupe_runtime_create(&fx.rt, &o));
    ck_assert_ok(troupe_db_open(fx.dir, NULL, &fx.db));
    ck_assert_ok(troupe_commit_create(fx.db, NULL, &fx.commit));
    troupe_catalog_opts co = {.rt = fx.rt, .db = fx.db};
    ck_assert_ok(troupe_catalog_open(&co, &fx.cat));
    troupe_tables_opts to = {.catalog = fx.cat, .commit = fx.commit};
    ck_assert_ok(troupe_tables_open(&to, &fx.tables));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "a", NULL, 0));
    ck_assert_ok(troupe_tables_create_wait(fx.tables, "b", NULL, 0));
    troupe_coord_opts cop = {.rt = fx.rt,
                             .tables = fx.tables,
                             .shards = 2,
                             .retry_min_ms = 60000,
                             .retry_max_ms = 60000,
                             .tcc_timeout_ms = fx.tcc_timeout_ms};
    ck_assert_ok(troupe_coord_open_wait(&cop, &fx.coord));
}

static void
fx_close(void)
{
    ck_assert_ok(troupe_coord_stop_wait(fx.coord));
    troupe_coord_destroy(fx.coord);
    ck_assert_ok(troupe_tables_stop_wait(fx.tables));
    troupe_tables_destroy(fx.tables);
    ck_assert_ok(troupe_runtime_shutdown_wait(fx.rt));
    ck_assert_ok(troupe_catalog_stop_wait(fx.cat));
    troupe_catalog_destroy(fx.cat);
    troupe_runtime_destroy(fx.rt);
    troupe_commit_destroy(fx.commit);
    ck_assert_ok(troupe_db_close(fx.db));
}

static void
setup(void)
{
    fx.dir = ts_tempdir("xagtx");
    fx.tcc_timeout_ms = -1; /* never, unless a test says */
    fx_open();
}

static void
teardown(void)
{
    fx_close();
    ts_rmtree(fx.dir);
    free(fx.dir);
}

/* {"v": v} */
static troupe_err
txput(troupe_txn *tx, const char *t, const char *k, int64_t v)
{
    uint8_t b[16];
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_map(&p, 1);
    troupe_pack_cstr(&p, "v");
    troupe_pack_int(&p, v);
    size_t n = 0;
    const void *d = troupe_pack_data(&p, &n);
    memcpy(b, d, n);
    troupe_pack_fini(&p);
    return tx != NULL ? troupe_txn_upsert(tx, t, k, strlen(k), b, n, NULL)
                      : troupe_table_upsert_wait(fx.tables, t, k, strlen(k), b,
                                                 n, NULL);
}

/* The stored v (-1: absent). */
static int64_t
stored(const char *t, const char *k)
{
    troupe_rows *rows = NULL;
    troupe_err e = troupe_table_get_wait(fx.tables, t, k, strlen(k), &rows);
    if (e == TROUPE_ENOENT)
        return -1;
    ck_assert_ok(e);
    troupe_reader r;
    const char *f = NULL;
    size_t fl = 0;
    int64_t v = 0;
    troupe_reader_init(&r, rows->rows[0].doc, rows->rows[0].doc_len);
    troupe_read_map_n(&r, 1);
    troupe_read_str(&r, 8, &f, &fl);
    troupe_read_int(&r, &v);
    ck_assert_ok(troupe_read_end(&r));
    troupe_rows_destroy(rows);
    return v;
}

/* Branch of gid writing t/k = v; its branch id. */
static void
branch(const char *gid, const char *t, const char *k, int64_t v,
       const char *want_bid)
{
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, t, k, v));
    char bid[8];
    ck_assert_ok(troupe_xa_branch_wait(fx.coord, gid, strlen(gid), tx, bid));
    ck_assert_str_eq(bid, want_bid);
    troupe_txn_destroy(tx);
}

/* The xids prepared, joined by ','. */
static const char *
listed(char *buf, size_t cap)
{
    troupe_xa_page *p = NULL;
    ck_assert_ok(troupe_xa_list_wait(fx.tables, NULL, 0, 100, &p));
    buf[0] = '\0';
    for (size_t i = 0; i < p->n; i++) {
        if (i > 0)
            strncat(buf, ",", cap - strlen(buf) - 1);
        strncat(buf, p->v[i].xid, cap - strlen(buf) - 1);
    }
    troupe_xa_page_destroy(p);
    return buf;
}

static bool
final_pred(void *arg)
{
    troupe_gtx_info in;
    const char *gid = arg;
    if (troupe_gtx_query_wait(fx.coord, gid, strlen(gid), &in) != TROUPE_OK)
        return false;
    return in.status == TROUPE_GTX_SUCCEED || in.status == TROUPE_GTX_FAILED;
}

static troupe_gtx_info
wait_final(const char *gid)
{
    ck_assert_msg(ts_wait_until(final_pred, (void *)gid, 10000),
                  "%s did not end", gid);
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, gid, strlen(gid), &in));
    return in;
}

/* A transfer: both branches prepared and held, then committed by the
 * coordinator on submit, in order, through its built-in target. */
START_TEST(test_an_xa_transfer_commits_both_branches_on_submit)
{
    char buf[256];
    ck_assert_ok(txput(NULL, "a", "alice", 100));
    ck_assert_ok(troupe_xa_begin_wait(fx.coord, "x-ok", 4));
    ck_assert_ok(troupe_xa_begin_wait(fx.coord, "x-ok", 4)); /* again: OK */
    branch("x-ok", "a", "alice", 70, "01");
    branch("x-ok", "b", "bob", 30, "02");
    ck_assert_str_eq(listed(buf, sizeof(buf)), "x-ok/01,x-ok/02");
    /* held: a single write is refused, nothing is visible yet */
    ck_assert_err(txput(NULL, "a", "alice", 1), TROUPE_EBUSY);
    ck_assert_int_eq(stored("a", "alice"), 100);
    ck_assert_int_eq(stored("b", "bob"), -1);
    ck_assert_ok(troupe_gtx_submit_wait(fx.coord, "x-ok", 4));
    troupe_gtx_info in = wait_final("x-ok");
    ck_assert_int_eq(in.status, TROUPE_GTX_SUCCEED);
    ck_assert_int_eq(in.mode, TROUPE_MODE_XA);
    ck_assert_uint_eq(in.steps, 2);
    ck_assert_int_eq(stored("a", "alice"), 70);
    ck_assert_int_eq(stored("b", "bob"), 30);
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    ck_assert_ok(txput(NULL, "a", "alice", 71)); /* released */
    troupe_gtx_detail *d = NULL;
    ck_assert_ok(troupe_gtx_detail_wait(fx.coord, "x-ok", 4, &d));
    ck_assert_uint_eq(d->n_branches, 2);
    ck_assert_str_eq(d->branches[0].ops[0].op, "action");
    ck_assert_str_eq(d->branches[0].ops[0].target, TROUPE_XA_TARGET);
    ck_assert_int_eq(d->branches[0].ops[0].state, TROUPE_GTX_CALL_SUCCEEDED);
    ck_assert_str_eq(d->branches[1].ops[1].op, "rollback");
    ck_assert_int_eq(d->branches[1].ops[1].state, TROUPE_GTX_CALL_TODO);
    troupe_gtx_detail_destroy(d);
    /* no branch once submitted */
    troupe_txn *tx = NULL;
    char bid[8];
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "z", 1));
    ck_assert_err(troupe_xa_branch_wait(fx.coord, "x-ok", 4, tx, bid),
                  TROUPE_ECONFLICT);
    troupe_txn_destroy(tx);
}
END_TEST

START_TEST(test_an_xa_abort_rolls_every_branch_back)
{
    char buf[256];
    ck_assert_ok(txput(NULL, "a", "alice", 100));
    ck_assert_ok(troupe_xa_begin_wait(fx.coord, "x-ab", 4));
    branch("x-ab", "a", "alice", 70, "01");
    branch("x-ab", "b", "bob", 30, "02");
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "x-ab", 4, "no money"));
    troupe_gtx_info in = wait_final("x-ab");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "aborted: no money");
    ck_assert_int_eq(stored("a", "alice"), 100);
    ck_assert_int_eq(stored("b", "bob"), -1);
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    ck_assert_ok(txput(NULL, "a", "alice", 5)); /* released */
    /* the rollbacks ran, in reverse */
    troupe_gtx_detail *d = NULL;
    ck_assert_ok(troupe_gtx_detail_wait(fx.coord, "x-ab", 4, &d));
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(d->branches[i].ops[0].state, TROUPE_GTX_CALL_TODO);
        ck_assert_int_eq(d->branches[i].ops[1].state,
                         TROUPE_GTX_CALL_SUCCEEDED);
    }
    troupe_gtx_detail_destroy(d);
    ck_assert_err(troupe_gtx_submit_wait(fx.coord, "x-ab", 4),
                  TROUPE_ECONFLICT);
}
END_TEST

/* A branch whose prepare conflicts with a key another branch holds:
 * ECONFLICT, the branch registered but never prepared; the abort that
 * follows rolls back both (the one never prepared: OK). */
START_TEST(test_a_conflicting_branch_prepare_is_econflict_and_aborts_clean)
{
    char buf[256];
    ck_assert_ok(troupe_xa_begin_wait(fx.coord, "x-cf", 4));
    branch("x-cf", "a", "k", 1, "01");
    troupe_txn *tx = NULL;
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "k", 2));
    char bid[8];
    ck_assert_err(troupe_xa_branch_wait(fx.coord, "x-cf", 4, tx, bid),
                  TROUPE_ECONFLICT);
    const troupe_txn_conflict *cf = NULL;
    size_t n = 0;
    ck_assert_ok(troupe_txn_conflicts(tx, &cf, &n));
    ck_assert_uint_ge(n, 1);
    troupe_txn_destroy(tx);
    ck_assert_str_eq(listed(buf, sizeof(buf)), "x-cf/01");
    ck_assert_ok(troupe_gtx_abort_wait(fx.coord, "x-cf", 4, NULL));
    ck_assert_int_eq(wait_final("x-cf").status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    ck_assert_int_eq(stored("a", "k"), -1);
}
END_TEST

START_TEST(test_bad_xa_calls_are_refused)
{
    troupe_txn *tx = NULL;
    char bid[8];
    ck_assert_ok(troupe_txn_begin(fx.tables, NULL, &tx));
    ck_assert_ok(txput(tx, "a", "k", 1));
    ck_assert_err(troupe_xa_branch_wait(fx.coord, "x-none", 6, tx, bid),
                  TROUPE_ENOENT);
    ck_assert_err(troupe_xa_begin_wait(fx.coord, "x bad", 5), TROUPE_EINVAL);
    ck_assert_err(troupe_xa_branch_wait(fx.coord, "x-n", 3, NULL, bid),
                  TROUPE_EINVAL);
    /* a tcc's register on an xa, an xa's branch on a tcc: not theirs */
    ck_assert_ok(troupe_xa_begin_wait(fx.coord, "x-m", 3));
    ck_assert_ok(troupe_tcc_prepare_wait(fx.coord, "t-m", 3));
    troupe_gtx_call call = {TROUPE_XA_TARGET, NULL, 0};
    ck_assert_err(
        troupe_tcc_register_wait(fx.coord, "x-m", 3, &call, &call, bid),
        TROUPE_ENOENT);
    ck_assert_err(troupe_xa_branch_wait(fx.coord, "t-m", 3, tx, bid),
                  TROUPE_ENOENT);
    troupe_txn_destroy(tx);
}
END_TEST

/* An xa left prepared (its application gone) aborts after the timeout:
 * its branches are rolled back and release their keys. */
START_TEST(test_a_prepared_xa_aborts_after_its_timeout)
{
    fx_close();
    fx.tcc_timeout_ms = 300;
    fx_open();
    char buf[256];
    ck_assert_ok(troupe_xa_begin_wait(fx.coord, "x-to", 4));
    branch("x-to", "a", "k", 1, "01");
    troupe_gtx_info in = wait_final("x-to");
    ck_assert_int_eq(in.status, TROUPE_GTX_FAILED);
    ck_assert_str_eq(in.reason, "prepared for longer than its timeout-to-fail");
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    ck_assert_int_eq(stored("a", "k"), -1);
}
END_TEST

/* A process killed after its branches were prepared: after the restart
 * they still hold their keys (a single write is refused) until the
 * coordinator resolves them; the submit then commits exactly what was
 * prepared. */
START_TEST(test_a_crash_after_prepare_keeps_the_branches_held_until_resolved)
{
    char buf[256];
    /* no fixture: RocksDB's background threads would not survive the
     * fork, so nothing of it runs in this process before */
    fx.dir = ts_tempdir("xagtx_crash");
    fx.tcc_timeout_ms = -1;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fx_open();
        if (troupe_xa_begin_wait(fx.coord, "x-cr", 4) != TROUPE_OK)
            _exit(2);
        branch("x-cr", "a", "alice", 70, "01");
        branch("x-cr", "b", "bob", 30, "02");
        raise(SIGKILL);
        _exit(3);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "the child did not reach its kill (status %d)", st);
    fx_open();
    ck_assert_str_eq(listed(buf, sizeof(buf)), "x-cr/01,x-cr/02");
    ck_assert_err(txput(NULL, "a", "alice", 1), TROUPE_EBUSY);
    ck_assert_err(txput(NULL, "b", "bob", 1), TROUPE_EBUSY);
    troupe_gtx_info in;
    ck_assert_ok(troupe_gtx_query_wait(fx.coord, "x-cr", 4, &in));
    ck_assert_int_eq(in.status, TROUPE_GTX_PREPARED);
    ck_assert_ok(troupe_gtx_submit_wait(fx.coord, "x-cr", 4));
    ck_assert_int_eq(wait_final("x-cr").status, TROUPE_GTX_SUCCEED);
    ck_assert_int_eq(stored("a", "alice"), 70);
    ck_assert_int_eq(stored("b", "bob"), 30);
    ck_assert_str_eq(listed(buf, sizeof(buf)), "");
    teardown();
}
END_TEST

Suite *
xagtx_suite(void)
{
    Suite *s = suite_create("xagtx");
    TCase *tc = tcase_create("xagtx");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_an_xa_transfer_commits_both_branches_on_submit);
    tcase_add_test(tc, test_an_xa_abort_rolls_every_branch_back);
    tcase_add_test(
        tc, test_a_conflicting_branch_prepare_is_econflict_and_aborts_clean);
    tcase_add_test(tc, test_bad_xa_calls_are_refused);
    tcase_add_test(tc, test_a_prepared_xa_aborts_after_its_timeout);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("crash");
    tcase_set_timeout(tk, 60);
    tcase_add_test(
        tk, test_a_crash_after_prepare_keeps_the_branches_held_until_resolved);
    suite_add_tcase(s, tk);
    return s;
}
