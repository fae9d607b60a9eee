/*
 * crash_loop: the crash-safety harness (docs/crash-testing.md).
 *
 *   crash_loop storage|kv|table|queue|coord [--txn] [--nosync]
 *              [--powerloss off|on|mixed]
 *              [--expect-loss] [--cycles N] [--seconds S] [--kill-ms T]
 *              [--shim PATH]
 *   crash_loop eio --fault-shim PATH [--seconds S]
 *
 * A crash cycle: fork and exec a child workload (this binary, crash.h),
 * under the power-loss shim when the cycle models a power loss; read its
 * acknowledgements from a pipe; SIGKILL it at a random point (seeded:
 * TROUPE_SEED replays); restore the directory to its durable state when
 * the cycle models a power loss; reopen the db in this process and check:
 *   - every acknowledged commit is present (synced commits: always;
 *     unsynced: after a kill alone; after a power loss their losses are
 *     counted, and --expect-loss demands at least one over the run);
 *   - every batch is all or nothing across families ("a" and "b" hold the
 *     same keys, "c"/last names the newest key present);
 *   - each cycle's commits form a prefix of its submit order (the pipeline
 *     writes one submitter's batches in order), and every value is intact;
 *   - what one check saw never changes at a later check.
 * The table loop (tables.c) checks rows, index entries and manifests
 * instead: verify finds no mismatch, every row is a document some write
 * made, no write or transaction is applied in part, and every
 * acknowledged write is there. The queue loop (queue.c) checks the
 * queue's rows and entries: every acknowledged publish is pending or
 * completed, never both, no invocation completed twice, every acknowledged
 * outcome committed, no completed invocation delivered again (the child
 * reports deliveries), and every row has exactly its owner and id entries.
 * The coordinator loop (coord.c) checks once, after the last cycle: a
 * drain child drives every stored global transaction to its end, then
 * every acknowledged one is there with its expected status, every
 * barrier row is the one its transaction's status implies, and the
 * account balances are the seed plus the net of what succeeded.
 * Bounds: --cycles/--seconds, overridden by TROUPE_CRASH_CYCLES and
 * TROUPE_CRASH_SECONDS. TROUPE_CRASH_KEEP=1 keeps the directory;
 * TROUPE_CRASH_VERBOSE=1 prints every cycle. On a failed check the
 * directory is always kept and its path printed.
 *
 * The eio sweep runs the eio child under the EIO shim with the Nth write
 * or sync call (and every later one) failing with EIO or ENOSPC, for a
 * range of N, and checks fail-stop semantics and recovery.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crash.h"
#include "powerloss.h"
#include "troupe/alloc.h"

static char base[PATH_MAX]; /* temp root: db/ and journal/ */
static char dbdir[PATH_MAX];
static char jdir[PATH_MAX];
static char self_exe[PATH_MAX];
static const char *label = "crash";
static bool verbose;

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t
rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void
rmtree(const char *p)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p);
    if (system(cmd) != 0)
        fprintf(stderr, "%s: could not remove %s\n", label, p);
}

static void __attribute__((format(printf, 1, 2), noreturn))
fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: FAIL: ", label);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n%s: directory kept: %s\n", label, base);
    va_end(ap);
    exit(1);
}

static long
env_or(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s != NULL && *s != '\0' ? strtol(s, NULL, 10) : dflt;
}

/* ---- children ----------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    int fd; /* read end */
} child;

/* Starts `crash_loop <args...>` with extra environment entries. */
static child
spawn(const char *const *args, char *const *env)
{
    int p[2];
    if (pipe(p) != 0)
        fail("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid == 0) {
        close(p[0]);
        for (int i = 0; env != NULL && env[i] != NULL; i++)
            putenv(env[i]);
        char fdarg[16];
        snprintf(fdarg, sizeof(fdarg), "%d", p[1]);
        char *argv[16];
        int n = 0;
        argv[n++] = self_exe;
        for (int i = 0; args[i] != NULL && n < 14; i++)
            argv[n++] = strcmp(args[i], "@FD") == 0 ? fdarg : (char *)args[i];
        argv[n] = NULL;
        execv(self_exe, argv);
        _exit(127);
    }
    close(p[1]);
    return (child){pid, p[0]};
}

/* Reads whole records until the deadline (0: until EOF); calls on_rec.
 * Returns 1 at EOF, 0 at the deadline. */
static int
pump(child *c, uint64_t deadline, void (*on_rec)(const crash_rec *, void *),
     void *arg)
{
    static uint8_t buf[1 << 16];
    static size_t have;
    for (;;) {
        int timeout = -1;
        if (deadline != 0) {
            uint64_t t = now_ms();
            if (t >= deadline)
                return 0;
            timeout = (int)(deadline - t);
        }
        struct pollfd pf = {c->fd, POLLIN, 0};
        int r = poll(&pf, 1, timeout);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return 0;
        ssize_t n = read(c->fd, buf + have, sizeof(buf) - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            have = 0;
            return 1;
        }
        have += (size_t)n;
        size_t off = 0;
        for (; have - off >= sizeof(crash_rec); off += sizeof(crash_rec)) {
            crash_rec rec;
            memcpy(&rec, buf + off, sizeof(rec));
            on_rec(&rec, arg);
        }
        memmove(buf, buf + off, have - off);
        have -= off;
    }
}

/* Waits for the child; returns its wait status. */
static int
reap(child *c)
{
    int st = 0;
    while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
        ;
    close(c->fd);
    return st;
}

/* ---- the database check ------------------------------------------------- */

enum workload { WL_STORAGE, WL_KV, WL_TABLE, WL_QUEUE, WL_COORD };

/* What the checks saw of each cycle: its prefix length. */
static uint64_t *seen;
static size_t nseen;

static troupe_db *
reopen(enum workload wl)
{
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    if (wl == WL_STORAGE) {
        o.cfs = crash_storage_cfs;
        o.ncfs = 3;
    } else {
        static const char *const kvcf[] = {CRASH_KV_CF};
        o.cfs = kvcf;
        o.ncfs = 1;
    }
    troupe_db *db = NULL;
    troupe_err e = troupe_db_open(dbdir, &o, &db);
    if (e != TROUPE_OK)
        fail("reopen after the crash: %s (%s)", troupe_err_name(e),
             troupe_strerror(e));
    return db;
}

static uint64_t
be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* Walks one family; checks keys, values and prefixes; fills counts[]
 * (per cycle, up to `cycle`). Returns the last key (or none). */
static void
walk(troupe_db *db, const char *cfname, int fam, uint64_t cycle,
     uint64_t *counts, uint8_t *last, bool *have_last)
{
    troupe_cf *cf;
    troupe_err e = troupe_db_cf(db, cfname, &cf);
    if (e != TROUPE_OK)
        fail("family %s: %s", cfname, troupe_err_name(e));
    troupe_iter *it;
    if ((e = troupe_iter_create(db, cf, NULL, NULL, NULL, 0, false, &it)) !=
        TROUPE_OK)
        fail("iter: %s", troupe_err_name(e));
    troupe_kv kv;
    *have_last = false;
    uint8_t v[CRASH_VAL_MAX];
    while ((e = troupe_iter_next(it, &kv)) == TROUPE_OK) {
        if (kv.key_len != CRASH_KEY_LEN || kv.key[0] != 'k')
            fail("%s: a key that no commit wrote (%zu bytes)", cfname,
                 kv.key_len);
        uint64_t c = be64(kv.key + 1), s = be64(kv.key + 9);
        if (c > cycle)
            fail("%s: a key of cycle %llu, which has not run", cfname,
                 (unsigned long long)c);
        if (s != counts[c])
            fail("%s: cycle %llu holds commit %llu but not %llu: a hole in "
                 "the submit order",
                 cfname, (unsigned long long)c, (unsigned long long)s,
                 (unsigned long long)counts[c]);
        size_t n = crash_val(v, c, s, fam);
        if (kv.val_len != n || memcmp(kv.val, v, n) != 0)
            fail("%s: commit %llu/%llu has a damaged value", cfname,
                 (unsigned long long)c, (unsigned long long)s);
        counts[c]++;
        memcpy(last, kv.key, CRASH_KEY_LEN);
        *have_last = true;
    }
    if (e != TROUPE_ENOENT)
        fail("%s: iteration ended with %s", cfname, troupe_err_name(e));
    troupe_iter_destroy(it);
}

/*
 * Checks the db after cycle `cycle`; returns how many of that cycle's
 * commits are present (a prefix of its submit order).
 */
static uint64_t
check_db(enum workload wl, uint64_t cycle)
{
    troupe_db *db = reopen(wl);
    if (cycle >= nseen) {
        size_t n = nseen ? nseen : 64;
        while (n <= cycle)
            n *= 2;
        seen = realloc(seen, n * sizeof(*seen));
        memset(seen + nseen, 0, (n - nseen) * sizeof(*seen));
        nseen = n;
    }
    uint64_t *ca = calloc(cycle + 1, sizeof(uint64_t));
    uint8_t la[CRASH_KEY_LEN];
    bool hla;
    if (wl == WL_KV) {
        walk(db, CRASH_KV_CF, 0, cycle, ca, la, &hla);
    } else {
        uint64_t *cb = calloc(cycle + 1, sizeof(uint64_t));
        uint8_t lb[CRASH_KEY_LEN];
        bool hlb;
        walk(db, "a", 0, cycle, ca, la, &hla);
        walk(db, "b", 1, cycle, cb, lb, &hlb);
        for (uint64_t c = 0; c <= cycle; c++) {
            if (ca[c] != cb[c])
                fail("cycle %llu: family a holds %llu commits, b %llu: a "
                     "batch was split",
                     (unsigned long long)c, (unsigned long long)ca[c],
                     (unsigned long long)cb[c]);
        }
        free(cb);
        troupe_cf *cf;
        troupe_db_cf(db, "c", &cf);
        void *v = NULL;
        size_t vn = 0;
        troupe_err e = troupe_db_get(db, cf, NULL, CRASH_LAST_KEY,
                                     strlen(CRASH_LAST_KEY), &v, &vn);
        if (hla) {
            if (e != TROUPE_OK || vn != CRASH_KEY_LEN ||
                memcmp(v, la, CRASH_KEY_LEN) != 0)
                fail("c/last (%s) does not name the newest commit present: "
                     "a batch was split",
                     troupe_err_name(e));
        } else if (e != TROUPE_ENOENT) {
            fail("c/last exists (%s) but no commit does", troupe_err_name(e));
        }
        troupe_free(v);
    }
    for (uint64_t c = 0; c < cycle; c++) {
        if (ca[c] != seen[c])
            fail("cycle %llu: %llu commits now, %llu at its own check: the "
                 "recovered state changed",
                 (unsigned long long)c, (unsigned long long)ca[c],
                 (unsigned long long)seen[c]);
    }
    uint64_t k = ca[cycle];
    seen[cycle] = k;
    free(ca);
    troupe_err e = troupe_db_close(db);
    if (e != TROUPE_OK)
        fail("close: %s", troupe_err_name(e));
    return k;
}

/* ---- crash loops -------------------------------------------------------- */

typedef struct acks {
    bool ready;
    uint64_t n;   /* acknowledgements received */
    uint64_t max; /* highest acknowledged seq + 1 */
    uint8_t *bits;
    size_t cap;
} acks;

static void
on_ack(const crash_rec *r, void *arg)
{
    acks *a = arg;
    if (r->type == REC_READY) {
        a->ready = true;
        return;
    }
    if (r->type != REC_ACK)
        fail("unexpected record %u from a crash child", r->type);
    if (r->id >= a->cap * 8) {
        size_t n = a->cap ? a->cap : 4096;
        while (n * 8 <= r->id)
            n *= 2;
        a->bits = realloc(a->bits, n);
        memset(a->bits + a->cap, 0, n - a->cap);
        a->cap = n;
    }
    a->bits[r->id / 8] |= (uint8_t)(1u << (r->id % 8));
    a->n++;
    if (r->id + 1 > a->max)
        a->max = r->id + 1;
}

/* The queue child's records: publishes count as acknowledgements. */
typedef struct qacks {
    acks a;
    uint64_t cycle;
} qacks;

static void
on_queue_rec(const crash_rec *r, void *arg)
{
    qacks *q = arg;
    if (r->type == REC_READY) {
        q->a.ready = true;
        return;
    }
    char msg[512];
    if (crash_queue_note(r, q->cycle, msg, sizeof(msg)) != 0)
        fail("cycle %llu: %s", (unsigned long long)q->cycle, msg);
    if (r->type == REC_QPUB)
        q->a.n++;
}

/* The coordinator child's records: acknowledged submissions count. */
static void
on_coord_rec(const crash_rec *r, void *arg)
{
    qacks *q = arg;
    if (r->type == REC_READY) {
        q->a.ready = true;
        return;
    }
    char msg[512];
    if (crash_coord_note(r, q->cycle, msg, sizeof(msg)) != 0)
        fail("cycle %llu: %s", (unsigned long long)q->cycle, msg);
    if (r->type == REC_GACK)
        q->a.n++;
}

/* Acknowledged seqs >= k: acknowledged but not present. */
static uint64_t
lost(const acks *a, uint64_t k)
{
    uint64_t n = 0;
    for (uint64_t s = k; s < a->max; s++)
        n += (a->bits[s / 8] >> (s % 8)) & 1;
    return n;
}

static void
make_dirs(const char *tag)
{
    const char *t = getenv("TMPDIR");
    snprintf(base, sizeof(base), "%s/troupe-crash-%s-XXXXXX", t ? t : "/tmp",
             tag);
    if (mkdtemp(base) == NULL)
        fail("mkdtemp: %s", strerror(errno));
    char real[PATH_MAX];
    if (realpath(base, real) == NULL)
        fail("realpath: %s", strerror(errno));
    snprintf(base, sizeof(base), "%s", real);
    if (strlen(base) + 16 > sizeof(dbdir))
        fail("temp path too long");
    snprintf(dbdir, sizeof(dbdir), "%.*s/db", PATH_MAX - 16, base);
    snprintf(jdir, sizeof(jdir), "%.*s/journal", PATH_MAX - 16, base);
    if (mkdir(dbdir, 0755) != 0 || mkdir(jdir, 0755) != 0)
        fail("mkdir: %s", strerror(errno));
}

typedef struct loop_opts {
    enum workload wl;
    bool sync;
    int powerloss; /* 0 off, 1 on, 2 mixed */
    bool expect_loss;
    bool txn; /* table: multi-table transactions */
    long cycles, seconds, kill_ms, window;
    const char *shim;
} loop_opts;

/* The coordinator loop's end: the acknowledgements to a file, then the
 * drain child (no kill, no power loss), which drives everything stored
 * to its end and checks it (coord.c). */
static void
run_coord_drain(void)
{
    char path[PATH_MAX + 16], msg[512];
    snprintf(path, sizeof(path), "%.*s/acks", PATH_MAX - 16, base);
    crash_coord_stats st = {0};
    if (crash_coord_write_acks(path, &st, msg, sizeof(msg)) != 0)
        fail("%s", msg);
    printf("%s: acknowledged %llu sagas, %llu messages, %llu TCCs, %llu "
           "workflows, %llu xa; branch deliveries committed in the killed "
           "children: %llu executed, %llu null compensations, %llu "
           "duplicated; %llu of these were of a transaction an earlier cycle "
           "began\n",
           label, (unsigned long long)st.sagas, (unsigned long long)st.msgs,
           (unsigned long long)st.tccs, (unsigned long long)st.workflows,
           (unsigned long long)st.xas, (unsigned long long)st.executed,
           (unsigned long long)st.null_comp, (unsigned long long)st.duplicated,
           (unsigned long long)st.older);
    char asan[] = "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0";
    char *env[] = {asan, NULL};
    const char *args[] = {"child-coord-drain", dbdir, path, "@FD", label, NULL};
    qacks qa = {.cycle = UINT64_MAX};
    child ch = spawn(args, env);
    /* The drain bounds itself (60 s); this only guards against a hang. */
    if (pump(&ch, now_ms() + 150000, on_coord_rec, &qa) == 0) {
        kill(ch.pid, SIGKILL);
        reap(&ch);
        fail("the drain child hung");
    }
    int rs = reap(&ch);
    crash_coord_reset();
    if (!WIFEXITED(rs) || WEXITSTATUS(rs) != 0)
        fail("the drain's check failed (status 0x%x, above)", rs);
}

static int
run_loop(const loop_opts *o)
{
    uint64_t seed_env = (uint64_t)env_or("TROUPE_SEED", 0);
    uint64_t seed =
        seed_env ? seed_env : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    printf("%s: seed %llu (set TROUPE_SEED to replay)\n", label,
           (unsigned long long)seed);
    fflush(stdout);
    uint64_t rs = seed | 1;
    make_dirs(label);
    if (o->powerloss && o->shim == NULL)
        fail("--powerloss needs --shim");
    long cycles = env_or("TROUPE_CRASH_CYCLES", o->cycles);
    long seconds = env_or("TROUPE_CRASH_SECONDS", o->seconds);
    long kill_ms = env_or("TROUPE_CRASH_KILL_MS", o->kill_ms);
    uint64_t end = now_ms() + (uint64_t)seconds * 1000u;
    uint64_t acked = 0, pl_cycles = 0, pl_lost = 0, pl_lossy = 0;
    uint64_t kill_lost = 0, early = 0, present = 0, rows = 0, txns = 0;
    /* Net: a restore also brings back files whose unlink was not durable
     * (RocksDB deleting obsolete files), so a cycle can add bytes. */
    int64_t dropped = 0;
    crash_queue_stats qsum = {0}, qlast = {0};
    long c = 0;
    char env_preload[PATH_MAX + 16], env_dir[PATH_MAX + 32],
        env_j[PATH_MAX + 32];
    snprintf(env_dir, sizeof(env_dir), PL_ENV_DIR "=%s", dbdir);
    snprintf(env_j, sizeof(env_j), PL_ENV_JOURNAL "=%s", jdir);
    for (; c < cycles && now_ms() < end; c++) {
        /* mixed: alternate, from a seeded start, so both kinds run. */
        bool pl = o->powerloss == 1 ||
                  (o->powerloss == 2 && ((uint64_t)c + seed) % 2 == 1);
        char cyc[24], syncarg[4], win[16];
        snprintf(cyc, sizeof(cyc), "%ld", c);
        snprintf(syncarg, sizeof(syncarg), "%d", o->sync ? 1 : 0);
        snprintf(win, sizeof(win), "%ld", o->window);
        const char *args[] = {o->wl == WL_KV      ? "child-kv"
                              : o->wl == WL_QUEUE ? "child-queue"
                              : o->wl == WL_COORD ? "child-coord"
                              : o->wl == WL_TABLE
                                  ? (o->txn ? "child-table-txn" : "child-table")
                                  : "child-storage",
                              dbdir,
                              cyc,
                              syncarg,
                              "@FD",
                              win,
                              NULL};
        /* ASan's runtime must not object to a preload it did not expect. */
        char asan[] = "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0";
        char *env[5] = {asan, NULL};
        if (pl) {
            snprintf(env_preload, sizeof(env_preload), "LD_PRELOAD=%s",
                     o->shim);
            env[1] = env_preload;
            env[2] = env_dir;
            env[3] = env_j;
        }
        qacks qa = {.cycle = (uint64_t)c};
        acks a = {0};
        void (*on_rec)(const crash_rec *, void *) = on_ack;
        void *rarg = &a;
        if (o->wl == WL_QUEUE) {
            on_rec = on_queue_rec;
            rarg = &qa;
        } else if (o->wl == WL_COORD) {
            on_rec = on_coord_rec;
            rarg = &qa;
        }
        child ch = spawn(args, env);
        uint64_t t0 = now_ms();
        bool kill_early = rnd(&rs) % 8 == 0;
        uint64_t delay =
            kill_early ? rnd(&rs) % 200 : rnd(&rs) % (uint64_t)kill_ms;
        int eof = 0;
        bool *ready =
            o->wl == WL_QUEUE || o->wl == WL_COORD ? &qa.a.ready : &a.ready;
        if (kill_early) {
            eof = pump(&ch, t0 + delay + 1, on_rec, rarg);
        } else {
            /* Wait for READY (bounded), then the random delay. */
            uint64_t lim = t0 + 30000;
            while (!*ready && !eof && now_ms() < lim)
                eof = pump(&ch, now_ms() + 5, on_rec, rarg);
            if (!eof)
                eof = pump(&ch, now_ms() + delay + 1, on_rec, rarg);
        }
        if (eof)
            fail("cycle %ld: the workload died on its own (status 0x%x)", c,
                 reap(&ch));
        kill(ch.pid, SIGKILL);
        pump(&ch, 0, on_rec, rarg);
        int st = reap(&ch);
        if (o->wl == WL_QUEUE || o->wl == WL_COORD)
            a = qa.a;
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
            fail("cycle %ld: the workload ended with status 0x%x, not by "
                 "the kill",
                 c, st);
        if (!a.ready)
            early++;
        pl_restore_stats rst = {0};
        if (pl && pl_restore(dbdir, jdir, &rst) != 0)
            fail("cycle %ld: restore failed", c);
        dropped += (int64_t)rst.bytes_before - (int64_t)rst.bytes_after;
        uint64_t k, l;
        if (o->wl == WL_COORD) {
            /* Checked once, by the drain after the last cycle: a cycle
             * leaves transactions in flight, for the next to drive. */
            k = a.n;
            l = 0;
        } else if (o->wl == WL_QUEUE) {
            /* Queue: publishes and outcomes complete out of order; the
             * check counts acknowledged publishes missing. */
            crash_queue_stats qs;
            char msg[512];
            if (crash_queue_check(dbdir, (uint64_t)c, &qs, msg, sizeof(msg)) !=
                0)
                fail("cycle %ld (%s): %s", c, pl ? "power loss" : "kill -9",
                     msg);
            if (qs.acked != a.n)
                fail("cycle %ld: %llu publishes acknowledged, the check "
                     "counted %llu",
                     c, (unsigned long long)a.n, (unsigned long long)qs.acked);
            l = qs.lost;
            k = a.n - l;
            qsum.published += qs.published;
            qsum.completed += qs.completed;
            qsum.delivered += qs.delivered;
            qsum.older += qs.older;
            qlast = qs;
        } else if (o->wl == WL_TABLE) {
            /* Tables: writes complete out of order across keys, so the
             * check counts acknowledged writes missing, not a prefix. */
            crash_table_stats ts;
            char msg[512];
            if (crash_table_check(dbdir, (uint64_t)c, o->txn, a.bits, a.max,
                                  &ts, msg, sizeof(msg)) != 0)
                fail("cycle %ld (%s): %s", c, pl ? "power loss" : "kill -9",
                     msg);
            if (ts.acked != a.n)
                fail("cycle %ld: %llu acknowledgements, the check counted "
                     "%llu",
                     c, (unsigned long long)a.n, (unsigned long long)ts.acked);
            l = ts.lost;
            k = a.n - l;
            rows = ts.rows;
            txns += ts.txns;
        } else {
            k = check_db(o->wl, (uint64_t)c);
            l = lost(&a, k);
        }
        acked += a.n;
        present += k;
        if (pl) {
            pl_cycles++;
            pl_lost += l;
            pl_lossy += l > 0;
        } else {
            kill_lost += l;
        }
        if (verbose)
            printf("%s: cycle %ld %s killed at %llu ms%s: acked %llu, "
                   "present %llu, lost %llu%s\n",
                   label, c, pl ? "power loss" : "kill -9",
                   (unsigned long long)(now_ms() - t0),
                   a.ready ? "" : " (during open)", (unsigned long long)a.n,
                   (unsigned long long)k, (unsigned long long)l, pl ? "" : "");
        if (l > 0 && (o->sync || !pl))
            fail("cycle %ld (%s, %s): %llu acknowledged commits lost "
                 "(acked %llu, present %llu)",
                 c, pl ? "power loss" : "kill -9",
                 o->sync ? "synced" : "unsynced", (unsigned long long)l,
                 (unsigned long long)a.n, (unsigned long long)k);
        free(a.bits);
    }
    double took = (double)(now_ms() + (uint64_t)seconds * 1000u - end) / 1000.0;
    if (o->wl == WL_COORD) /* its losses are the drain's to find */
        printf("%s: %ld cycles (%llu power loss, %llu kill -9, %llu killed "
               "before READY) in %.1f s; restore dropped %lld bytes (net)\n",
               label, c, (unsigned long long)pl_cycles,
               (unsigned long long)(c - (long)pl_cycles),
               (unsigned long long)early, took, (long long)dropped);
    else
        printf("%s: %ld cycles (%llu power loss, %llu kill -9, %llu killed "
               "before READY) in %.1f s; acked %llu, present %llu; lost after "
               "kill -9: %llu; lost after power loss: %llu, in %llu of %llu "
               "cycles; restore dropped %lld bytes (net)\n",
               label, c, (unsigned long long)pl_cycles,
               (unsigned long long)(c - (long)pl_cycles),
               (unsigned long long)early, took, (unsigned long long)acked,
               (unsigned long long)present, (unsigned long long)kill_lost,
               (unsigned long long)pl_lost, (unsigned long long)pl_lossy,
               (unsigned long long)pl_cycles, (long long)dropped);
    if (o->wl == WL_TABLE)
        printf("%s: %llu rows in the tables at the end; every check ran "
               "verify (derive) over every index: no mismatch%s\n",
               label, (unsigned long long)rows,
               o->txn ? "; no transaction applied in part" : "");
    if (o->txn)
        printf("%s: %llu transactions found whole after their cycle's "
               "crash\n",
               label, (unsigned long long)txns);
    if (o->wl == WL_QUEUE)
        printf("%s: queue: %llu publishes and %llu outcomes acknowledged, "
               "%llu deliveries (%llu of events of earlier cycles), none "
               "after its completion; at the end %llu pending and %llu "
               "completed rows, %llu owner and id entries, all matching; "
               "%llu events done\n",
               label, (unsigned long long)qsum.published,
               (unsigned long long)qsum.completed,
               (unsigned long long)qsum.delivered,
               (unsigned long long)qsum.older,
               (unsigned long long)qlast.pending_rows,
               (unsigned long long)qlast.completed_rows,
               (unsigned long long)qlast.entries,
               (unsigned long long)qlast.done_events);
    if (o->wl == WL_COORD && c > 0)
        run_coord_drain();
    if (o->wl == WL_TABLE)
        crash_table_reset();
    if (o->wl == WL_QUEUE)
        crash_queue_reset();
    if (c == 0)
        fail("no cycle ran");
    if (o->expect_loss && pl_lost == 0)
        fail("unsynced commits under power loss lost nothing in %llu cycles: "
             "the model does not bite",
             (unsigned long long)pl_cycles);
    if (env_or("TROUPE_CRASH_KEEP", 0))
        printf("%s: directory kept: %s\n", label, base);
    else
        rmtree(base);
    return 0;
}

/* ---- the I/O-error sweep ------------------------------------------------ */

typedef struct eio_run {
    bool ready;
    int open_err;      /* 0 or the troupe_err of a failed open */
    int first_err;     /* first non-OK outcome of any kind */
    uint32_t first_ty; /* its record type */
    int bad;           /* rule violations, described on stderr */
    uint64_t ok;       /* commits completed OK */
    uint64_t unknown;  /* EUNKNOWN completions */
    uint64_t failstop; /* EFAILSTOP completions or refusals */
    uint64_t hits;
    int check; /* REC_CHECK mask, -1 when absent */
    int close_err;
    bool done;
    bool after_fail;
    /* write() fails with ENOSPC: a commit whose WAL record met it is
     * ENOSPC, not stored (docs/storage.md), and so is a flush */
    bool nospace_write;
} eio_run;

static void
on_eio(const crash_rec *r, void *arg)
{
    eio_run *x = arg;
    switch (r->type) {
    case REC_READY:
        x->ready = true;
        return;
    case REC_OPEN:
        x->open_err = r->err;
        break;
    case REC_HITS:
        x->hits = r->id;
        return;
    case REC_CHECK:
        x->check = (int)r->id;
        return;
    case REC_CLOSE:
        x->close_err = r->err;
        return;
    case REC_DONE:
        x->done = true;
        return;
    case REC_OUT:
    case REC_REFUSED:
    case REC_FLUSH:
        break;
    default:
        x->bad++;
        return;
    }
    troupe_err e = (troupe_err)r->err;
    if (e == TROUPE_OK) {
        if (x->after_fail) {
            fprintf(stderr, "%s: %s OK after a failure\n", label,
                    r->type == REC_FLUSH ? "a flush" : "a commit");
            x->bad++;
        }
        if (r->type == REC_OUT)
            x->ok++;
        return;
    }
    if (r->type == REC_OUT && e == TROUPE_EUNKNOWN)
        x->unknown++;
    if (e == TROUPE_EFAILSTOP)
        x->failstop++;
    /* ENOSPC only where the fault is a write finding no space: then it
     * says "not stored", which check_db's count holds it to. */
    bool nospace_ok = x->nospace_write && e == TROUPE_ENOSPC;
    if (!x->after_fail) {
        x->after_fail = true;
        x->first_err = e;
        x->first_ty = r->type;
        /* The first failure: a commit is outcome-unknown (never a clean
         * abort), a flush is EIO; either is ENOSPC when a write found no
         * space. */
        if ((r->type == REC_OUT && e != TROUPE_EUNKNOWN && !nospace_ok) ||
            (r->type == REC_FLUSH && e != TROUPE_EIO && !nospace_ok) ||
            r->type == REC_REFUSED) {
            fprintf(stderr, "%s: first failure is %s (record %u)\n", label,
                    troupe_err_name(e), r->type);
            x->bad++;
        }
    } else if (r->type == REC_OUT && e != TROUPE_EUNKNOWN &&
               e != TROUPE_EFAILSTOP && !nospace_ok) {
        /* ENOSPC later too: the rest of the failed group */
        fprintf(stderr, "%s: later completion %s\n", label, troupe_err_name(e));
        x->bad++;
    }
}

static int
run_eio(const char *shim, const char *sfr, long seconds)
{
    label = "crash_eio";
    uint64_t seed = (uint64_t)env_or("TROUPE_SEED", 0);
    if (seed)
        printf("%s: TROUPE_SEED ignored: the sweep is deterministic\n", label);
    make_dirs("eio");
    seconds = env_or("TROUPE_CRASH_SECONDS", seconds);
    uint64_t end = now_ms() + (uint64_t)seconds * 1000u;
    /* Injection points: the Nth matching call fails (and every later
     * one: a dead disk). A run makes about 40 syncs and 16 writes to
     * numbered files, so each list reaches past its last call. */
    static const long sync_points[] = {0, 1,  2,  3,  4,  5,  7,
                                       9, 12, 15, 19, 24, 30, 45};
    static const long write_points[] = {0, 1, 2,  3,  4,  5,  6,
                                        7, 8, 10, 12, 14, 17, 24};
    static const struct {
        const char *var;
        int errnum;
        const char *name;
    } kinds[] = {{"TROUPE_FAULT_SYNC_AFTER", 5, "sync EIO"},
                 {"TROUPE_FAULT_SYNC_AFTER", 28, "sync ENOSPC"},
                 {"TROUPE_FAULT_WRITE_AFTER", 5, "write EIO"},
                 {"TROUPE_FAULT_WRITE_AFTER", 28, "write ENOSPC"}};
    enum { NK = 4 };
    long surfaced[NK] = {0}, nofault[NK] = {0}, absorbed[NK] = {0},
         aborted[NK] = {0}, runs[NK] = {0}, unk_present = 0, unk_absent = 0,
         at_open = 0;
    uint64_t cycle = 0;
    size_t np = sizeof(sync_points) / sizeof(sync_points[0]);
    size_t pi = 0;
    for (; pi < np && now_ms() < end; pi++) {
        for (int k = 0; k < NK; k++, cycle++) {
            bool wr = strstr(kinds[k].var, "WRITE") != NULL;
            long point = wr ? write_points[pi] : sync_points[pi];
            char var[64], path[PATH_MAX + 32], err[32], cyc[24];
            snprintf(var, sizeof(var), "%s=%ld", kinds[k].var, point);
            /* Writes: only numbered files (WAL, tables), so that the points
             * fall on data rather than on info LOG lines (which troupe's
             * logger drops: tests/storage/check_faults.c covers those). */
            snprintf(path, sizeof(path), "TROUPE_FAULT_PATH=%s%s", dbdir,
                     wr ? "/0" : "");
            snprintf(err, sizeof(err), "TROUPE_FAULT_ERRNO=%d",
                     kinds[k].errnum);
            snprintf(cyc, sizeof(cyc), "%llu", (unsigned long long)cycle);
            char preload[2 * PATH_MAX + 16];
            snprintf(preload, sizeof(preload), "LD_PRELOAD=%s%s%s",
                     sfr ? sfr : "", sfr ? ":" : "", shim);
            char asan[] =
                "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0";
            char *env[] = {asan, preload, var, path, err, NULL};
            const char *args[] = {"child-eio", dbdir, cyc, "@FD", NULL};
            eio_run x = {0};
            x.check = -1;
            x.nospace_write = wr && kinds[k].errnum == ENOSPC;
            child ch = spawn(args, env);
            pump(&ch, 0, on_eio, &x);
            int st = reap(&ch);
            runs[k]++;
            const char *what = kinds[k].name;
            if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) {
                /* Debian's RocksDB asserts on some failure paths: harsher
                 * fail-stop, same recovery (docs/storage.md). */
                aborted[k]++;
            } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !x.done) {
                fail("%s at call %ld: child status 0x%x, done %d", what, point,
                     st, x.done);
            }
            if (x.bad)
                fail("%s at call %ld: %d rule violations (above)", what, point,
                     x.bad);
            if (x.open_err)
                at_open++;
            if (x.after_fail) {
                surfaced[k]++;
                if (x.ready && x.check != 0 && !WIFSIGNALED(st))
                    fail("%s at call %ld: fail-stop checks failed (mask %d: "
                         "1 flag, 2 write, 4 submit, 8 read, 16 no "
                         "completion)",
                         what, point, x.check);
            } else if (x.hits == 0 && !WIFSIGNALED(st)) {
                nofault[k]++;
            } else if (!WIFSIGNALED(st)) {
                absorbed[k]++;
            }
            /* The disk is healthy again: reopen and check. */
            uint64_t present = check_db(WL_STORAGE, cycle);
            if (present < x.ok)
                fail("%s at call %ld: %llu commits completed OK, %llu "
                     "present after reopen",
                     what, point, (unsigned long long)x.ok,
                     (unsigned long long)present);
            if (present > x.ok + x.unknown && !WIFSIGNALED(st))
                fail("%s at call %ld: %llu present, but only %llu OK and "
                     "%llu unknown: a refused, ENOSPC or EFAILSTOP commit "
                     "was written",
                     what, point, (unsigned long long)present,
                     (unsigned long long)x.ok, (unsigned long long)x.unknown);
            if (!WIFSIGNALED(st)) {
                unk_present += (long)(present - x.ok);
                unk_absent += (long)(x.ok + x.unknown - present);
            }
            if (verbose)
                printf("%s: %s at call %ld: %s%s, ok %llu, unknown %llu, "
                       "failstop %llu, hits %llu, present %llu\n",
                       label, what, point, x.open_err ? "open failed " : "",
                       x.after_fail ? troupe_err_name((troupe_err)x.first_err)
                                    : "no error",
                       (unsigned long long)x.ok, (unsigned long long)x.unknown,
                       (unsigned long long)x.failstop,
                       (unsigned long long)x.hits, (unsigned long long)present);
        }
    }
    for (int k = 0; k < NK; k++) {
        printf("%s: %-12s %ld runs: %ld surfaced an error, %ld aborted, "
               "%ld absorbed, %ld past the last call\n",
               label, kinds[k].name, runs[k], surfaced[k], aborted[k],
               absorbed[k], nofault[k]);
        if (runs[k] > 0 && surfaced[k] == 0)
            fail("%s: no injected failure ever surfaced", kinds[k].name);
    }
    printf("%s: %zu of %zu points in %ld s; %ld failed at open; EUNKNOWN "
           "commits after reopen: %ld present, %ld absent\n",
           label, pi, np, seconds, at_open, unk_present, unk_absent);
    if (env_or("TROUPE_CRASH_KEEP", 0))
        printf("%s: directory kept: %s\n", label, base);
    else
        rmtree(base);
    return 0;
}

/* ---- the model's own test ----------------------------------------------- */

static void
on_ready(const crash_rec *r, void *arg)
{
    if (r->type == REC_READY)
        *(bool *)arg = true;
}

/* Content of dir/name, or NULL when absent (static buffer). */
static const char *
slurp(const char *name)
{
    static char buf[256];
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", dbdir, name);
    FILE *f = fopen(p, "rb");
    if (f == NULL)
        return NULL;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void
expect(const char *name, const char *want, const char *when)
{
    const char *got = slurp(name);
    if ((got == NULL) != (want == NULL) ||
        (got != NULL && strcmp(got, want) != 0))
        fail("%s: %s is %s%s%s, want %s%s%s", when, name, got ? "\"" : "",
             got ? got : "absent", got ? "\"" : "", want ? "\"" : "",
             want ? want : "absent", want ? "\"" : "");
}

static void
put_file(const char *name, const char *content)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", dbdir, name);
    FILE *f = fopen(p, "wb");
    if (f == NULL || fputs(content, f) < 0 || fclose(f) != 0)
        fail("write %s", p);
}

static unsigned
count_files(void)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dbdir);
    FILE *f = popen(cmd, "r");
    unsigned n = 0;
    if (f == NULL || fscanf(f, "%u", &n) != 1)
        fail("count files");
    pclose(f);
    return n;
}

/* Runs one model phase under the shim, kills it, returns restore stats. */
static pl_restore_stats
model_phase(const char *shim, const char *phase, void (*before)(void))
{
    char preload[PATH_MAX + 16], d[PATH_MAX + 32], j[PATH_MAX + 32];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", shim);
    snprintf(d, sizeof(d), PL_ENV_DIR "=%s", dbdir);
    snprintf(j, sizeof(j), PL_ENV_JOURNAL "=%s", jdir);
    char asan[] = "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0";
    char *env[] = {asan, preload, d, j, NULL};
    const char *args[] = {"child-model", dbdir, phase, "@FD", NULL};
    bool ready = false;
    child ch = spawn(args, env);
    uint64_t lim = now_ms() + 10000;
    int eof = 0;
    while (!ready && !eof && now_ms() < lim)
        eof = pump(&ch, now_ms() + 5, on_ready, &ready);
    if (!ready)
        fail("model phase %s: the child never got ready", phase);
    kill(ch.pid, SIGKILL);
    reap(&ch);
    before();
    pl_restore_stats st;
    if (pl_restore(dbdir, jdir, &st) != 0 || !st.journal)
        fail("model phase %s: restore failed or found no journal", phase);
    return st;
}

static void
model_before1(void)
{
    /* What kill -9 alone leaves: the page cache holds everything. */
    expect("a", "synced+unsynced", "before restore");
    expect("b", "b", "before restore");
    expect("d", "c1", "before restore");
    expect("base_unlink", NULL, "before restore");
}

static void
model_before2(void)
{
}

static int
run_model(const char *shim)
{
    label = "crash_powerloss_model";
    make_dirs("model");
    put_file("base_keep", "BASE1");
    put_file("base_unlink", "BASE2");
    put_file("base_trunc", "BASE3");
    put_file("base_renamed", "BASE4");
    pl_restore_stats st = model_phase(shim, "1", model_before1);
    static const char *const want[][2] = {
        {"a", "synced"},     /* synced prefix only */
        {"e", ""},           /* name durable, data never synced */
        {"f", "0123456789"}, /* unsynced overwrite undone */
        {"g", "xYYx"},       /* synced overwrite kept, unsynced undone */
        {"h", "hello"},      /* writev + fdatasync; unsynced truncate undone */
        {"c", "c1"},         /* unsynced rename undone */
        {"d", NULL},
        {"b", NULL}, /* file synced, directory not: gone */
        {"base_keep", "BASE1"},
        {"base_unlink", "BASE2"}, /* unsynced unlink undone */
        {"base_trunc", "BASE3"},  /* unsynced O_TRUNC + write undone */
        {"base_renamed", "BASE4"},
        {"renamed2", NULL},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        expect(want[i][0], want[i][1], "after power loss");
    if (count_files() != 10)
        fail("after power loss: %u files, want 10", count_files());
    printf("%s: phase 1: restored %u files (%u changed), deleted %u; %llu "
           "-> %llu bytes\n",
           label, st.files_kept, st.files_cut, st.files_gone,
           (unsigned long long)st.bytes_before,
           (unsigned long long)st.bytes_after);
    st = model_phase(shim, "2", model_before2);
    expect("kept2", "BASE1", "after synced rename");
    expect("base_keep", NULL, "after synced rename");
    expect("base_unlink", NULL, "after synced unlink");
    expect("a", "synced", "phase 2 (baseline)");
    printf("%s: phase 2: synced rename and unlink kept; model holds\n", label);
    rmtree(base);
    return 0;
}

/* ---- main --------------------------------------------------------------- */

static void
usage(void)
{
    fprintf(stderr,
            "usage: crash_loop storage|kv|table|queue|coord [--txn] [--nosync] "
            "[--powerloss "
            "off|on|mixed] [--expect-loss]\n"
            "                  [--cycles N] [--seconds S] [--kill-ms T] "
            "[--window W] [--shim PATH]\n"
            "       crash_loop eio --fault-shim PATH [--sfr-shim PATH] "
            "[--seconds S]\n"
            "       crash_loop model --shim PATH\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    if (strcmp(argv[1], "child-storage") == 0)
        return crash_child_storage(argc - 2, argv + 2);
    if (strcmp(argv[1], "child-table-txn") == 0)
        return crash_child_table_txn(argc - 2, argv + 2);
    if (strcmp(argv[1], "child-table") == 0)
        return crash_child_table(argc - 2, argv + 2);
    if (strcmp(argv[1], "child-queue") == 0)
        return crash_child_queue(argc - 2, argv + 2);
    if (strcmp(argv[1], "child-coord") == 0)
        return crash_child_coord(argc - 2, argv + 2);
    if (strcmp(argv[1], "child-coord-drain") == 0)
        return crash_child_coord_drain(argc - 2, argv + 2);
    if (strcmp(argv[1], "child-kv") == 0)
        return crash_child_kv(argc - 2, argv + 2);
    if (strcmp(argv[1], "child-eio") == 0)
        return crash_child_eio(argc - 2, argv + 2);
    if (strcmp(argv[1], "child-model") == 0)
        return crash_child_model(argc - 2, argv + 2);
    if (realpath("/proc/self/exe", self_exe) == NULL)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    verbose = env_or("TROUPE_CRASH_VERBOSE", 0) != 0;
    loop_opts o = {.wl = WL_STORAGE,
                   .sync = true,
                   .cycles = 1000,
                   .seconds = 15,
                   .kill_ms = 250,
                   .window = 64};
    const char *fault_shim = NULL, *sfr_shim = NULL;
    bool window_set = false;
    bool eio = strcmp(argv[1], "eio") == 0;
    bool model = strcmp(argv[1], "model") == 0;
    if (strcmp(argv[1], "kv") == 0)
        o.wl = WL_KV;
    else if (strcmp(argv[1], "table") == 0)
        o.wl = WL_TABLE;
    else if (strcmp(argv[1], "queue") == 0)
        o.wl = WL_QUEUE;
    else if (strcmp(argv[1], "coord") == 0)
        o.wl = WL_COORD;
    else if (!eio && !model && strcmp(argv[1], "storage") != 0)
        usage();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--nosync") == 0) {
            o.sync = false;
        } else if (strcmp(a, "--txn") == 0 && o.wl == WL_TABLE) {
            o.txn = true;
        } else if (strcmp(a, "--expect-loss") == 0) {
            o.expect_loss = true;
        } else if (v == NULL) {
            usage();
        } else if (strcmp(a, "--powerloss") == 0) {
            o.powerloss = strcmp(v, "on") == 0      ? 1
                          : strcmp(v, "mixed") == 0 ? 2
                          : strcmp(v, "off") == 0   ? 0
                                                    : -1;
            if (o.powerloss < 0)
                usage();
            i++;
        } else if (strcmp(a, "--cycles") == 0) {
            o.cycles = atol(v), i++;
        } else if (strcmp(a, "--seconds") == 0) {
            o.seconds = atol(v), i++;
        } else if (strcmp(a, "--kill-ms") == 0) {
            o.kill_ms = atol(v), i++;
        } else if (strcmp(a, "--window") == 0) {
            o.window = atol(v), i++;
            window_set = true;
        } else if (strcmp(a, "--shim") == 0) {
            o.shim = v, i++;
        } else if (strcmp(a, "--sfr-shim") == 0) {
            sfr_shim = v, i++;
        } else if (strcmp(a, "--fault-shim") == 0) {
            fault_shim = v, i++;
        } else {
            usage();
        }
    }
    if (o.kill_ms < 1 || o.window < 1 || o.seconds < 1 || o.cycles < 1)
        usage();
    /* The queue check holds every acknowledged outcome to be there: an
     * unsynced loop under power loss would need it to count losses. */
    if ((o.wl == WL_QUEUE || o.wl == WL_COORD) && !o.sync) {
        fprintf(stderr, "crash_loop: %s runs synced only\n", argv[1]);
        usage();
    }
    /* coord: --window is the submitting threads per kind (at most 16). */
    if (o.wl == WL_COORD && !window_set)
        o.window = 2;
    if (o.wl == WL_COORD && o.window > 16)
        usage();
    if (model) {
        if (o.shim == NULL)
            usage();
        return run_model(o.shim);
    }
    if (eio) {
        if (fault_shim == NULL)
            usage();
        return run_eio(fault_shim, sfr_shim, o.seconds);
    }
    static char lbl[64];
    snprintf(lbl, sizeof(lbl), "crash_%s_%s%s",
             o.wl == WL_KV      ? "kv"
             : o.wl == WL_QUEUE ? "queue"
             : o.wl == WL_COORD ? "coord"
             : o.wl == WL_TABLE ? (o.txn ? "table_txn" : "table")
                                : "storage",
             o.sync ? "sync" : "nosync",
             o.powerloss == 1   ? "_powerloss"
             : o.powerloss == 2 ? "_mixed"
                                : "_kill");
    label = lbl;
    return run_loop(&o);
}
