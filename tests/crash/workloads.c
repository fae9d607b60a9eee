/*
 * Child workloads of the crash harness (crash.h). The storage and kv
 * workloads commit forever, one submitting thread with a window of commits
 * in flight (so the pipeline forms groups), until the parent kills them.
 * The eio workload runs a short bounded stream under the fault shim and
 * reports every outcome, then checks fail-stop from the inside.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "crash.h"
#include "fault_shim.h"
#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/kv.h"
#include "troupe/runtime.h"

const char *const crash_storage_cfs[3] = {"a", "b", "c"};

void
crash_key(uint8_t *k, uint64_t cycle, uint64_t seq)
{
    k[0] = 'k';
    for (int i = 0; i < 8; i++) {
        k[1 + i] = (uint8_t)(cycle >> (56 - 8 * i));
        k[9 + i] = (uint8_t)(seq >> (56 - 8 * i));
    }
}

size_t
crash_val(uint8_t *v, uint64_t cycle, uint64_t seq, int fam)
{
    uint64_t x = (cycle * 0x9E3779B97F4A7C15ull) ^
                 (seq + 1) * 0xBF58476D1CE4E5B9ull ^ ((uint64_t)fam << 61);
    x |= 1;
    size_t n = 16 + (size_t)(x % 160);
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> 56);
    }
    return n;
}

void
crash_report(int fd, uint32_t type, int32_t err, uint64_t id)
{
    crash_rec r = {type, err, id};
    /* A failed report means the parent is gone: nothing left to do. */
    if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(3);
}

static void
die(const char *what, troupe_err e)
{
    fprintf(stderr, "crash child: %s: %s\n", what, troupe_err_name(e));
    _exit(2);
}

/* ---- storage: multi-family batches through the commit pipeline --------- */

typedef struct wctx {
    int fd;
    sem_t window;
} wctx;

static wctx W;

static void
storage_cb(troupe_err err, void *arg)
{
    if (err == TROUPE_OK)
        crash_report(W.fd, REC_ACK, 0, (uint64_t)(uintptr_t)arg);
    else
        die("commit completion", err);
    sem_post(&W.window);
}

static troupe_batch *
storage_batch(troupe_cf **cf, uint64_t cycle, uint64_t seq)
{
    uint8_t k[CRASH_KEY_LEN], v[CRASH_VAL_MAX];
    crash_key(k, cycle, seq);
    troupe_batch *b;
    troupe_err e = troupe_batch_create(&b);
    for (int f = 0; f < 2 && e == TROUPE_OK; f++) {
        size_t n = crash_val(v, cycle, seq, f);
        e = troupe_batch_put(b, cf[f], k, sizeof(k), v, n);
    }
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, cf[2], CRASH_LAST_KEY, strlen(CRASH_LAST_KEY),
                             k, sizeof(k));
    if (e != TROUPE_OK)
        die("batch", e);
    return b;
}

static troupe_db *
open_storage(const char *dir, bool sync, troupe_err *err)
{
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.sync = sync;
    o.cfs = crash_storage_cfs;
    o.ncfs = 3;
    troupe_db *db = NULL;
    *err = troupe_db_open(dir, &o, &db);
    return db;
}

/* argv: DIR CYCLE SYNC FD WINDOW */
int
crash_child_storage(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *dir = argv[0];
    uint64_t cycle = strtoull(argv[1], NULL, 10);
    bool sync = atoi(argv[2]) != 0;
    W.fd = atoi(argv[3]);
    sem_init(&W.window, 0, (unsigned)atoi(argv[4]));
    troupe_err e;
    troupe_db *db = open_storage(dir, sync, &e);
    if (db == NULL)
        die("open", e);
    troupe_cf *cf[3];
    for (int i = 0; i < 3; i++) {
        if ((e = troupe_db_cf(db, crash_storage_cfs[i], &cf[i])) != TROUPE_OK)
            die("cf", e);
    }
    troupe_commit *c;
    if ((e = troupe_commit_create(db, NULL, &c)) != TROUPE_OK)
        die("commit_create", e);
    crash_report(W.fd, REC_READY, 0, 0);
    troupe_sync s = sync ? TROUPE_SYNC_ON : TROUPE_SYNC_OFF;
    for (uint64_t seq = 0;; seq++) {
        sem_wait(&W.window);
        troupe_batch *b = storage_batch(cf, cycle, seq);
        e = troupe_commit_submit(c, &b, s, storage_cb, (void *)(uintptr_t)seq);
        if (e != TROUPE_OK)
            die("submit", e);
    }
}

/* ---- kv: synced puts through the runtime and the kv actor -------------- */

static void
kv_cb(troupe_runtime *rt, troupe_err err, troupe_msg *reply, void *arg)
{
    if (err == TROUPE_OK)
        crash_report(W.fd, REC_ACK, 0, (uint64_t)(uintptr_t)arg);
    else
        die("kv put reply", err);
    sem_post(&W.window);
}

/* argv: DIR CYCLE SYNC FD WINDOW */
int
crash_child_kv(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *dir = argv[0];
    uint64_t cycle = strtoull(argv[1], NULL, 10);
    bool sync = atoi(argv[2]) != 0;
    W.fd = atoi(argv[3]);
    sem_init(&W.window, 0, (unsigned)atoi(argv[4]));
    troupe_runtime *rt;
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 2};
    troupe_err e = troupe_runtime_create(&rt, &ro);
    if (e != TROUPE_OK)
        die("runtime", e);
    troupe_db_opts o;
    troupe_db_opts_init(&o);
    o.sync = sync;
    troupe_db *db;
    if ((e = troupe_db_open(dir, &o, &db)) != TROUPE_OK)
        die("open", e);
    troupe_commit *c;
    if ((e = troupe_commit_create(db, NULL, &c)) != TROUPE_OK)
        die("commit_create", e);
    troupe_kv_opts ko = {.db = db, .commit = c, .cf = CRASH_KV_CF};
    troupe_addr kv;
    if ((e = troupe_kv_spawn(rt, &ko, NULL, &kv)) != TROUPE_OK)
        die("kv_spawn", e);
    crash_report(W.fd, REC_READY, 0, 0);
    uint8_t k[CRASH_KEY_LEN], v[CRASH_VAL_MAX];
    for (uint64_t seq = 0;; seq++) {
        sem_wait(&W.window);
        crash_key(k, cycle, seq);
        size_t n = crash_val(v, cycle, seq, 0);
        troupe_msg *m = NULL;
        if ((e = troupe_kv_put_msg(k, sizeof(k), v, n, sync, &m)) != TROUPE_OK)
            die("put_msg", e);
        e = troupe_runtime_ask(rt, kv, &m, 30000, kv_cb,
                               (void *)(uintptr_t)seq);
        if (e != TROUPE_OK)
            die("ask", e);
    }
}

/* ---- eio: a bounded stream under the fault shim ------------------------ */

typedef struct outcome {
    atomic_int fired;
    _Atomic troupe_err err;
} outcome;

static void
eio_cb(troupe_err err, void *arg)
{
    outcome *o = arg;
    atomic_store(&o->err, err);
    atomic_store(&o->fired, 1);
}

enum { EIO_COMMITS = 32, EIO_WINDOW = 4, EIO_FLUSH_EVERY = 12 };

/* argv: DIR CYCLE FD */
int
crash_child_eio(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    const char *dir = argv[0];
    uint64_t cycle = strtoull(argv[1], NULL, 10);
    int fd = atoi(argv[2]);
    troupe_fault_hits_fn hits =
        (troupe_fault_hits_fn)dlsym(RTLD_DEFAULT, TROUPE_FAULT_HITS_SYM);
    if (hits == NULL) {
        fprintf(stderr, "crash child: fault shim not preloaded\n");
        return 2;
    }
    troupe_err e;
    troupe_db *db = open_storage(dir, true, &e);
    if (db == NULL) {
        crash_report(fd, REC_OPEN, (int32_t)e, 0);
        crash_report(fd, REC_HITS, 0, (uint64_t)hits());
        crash_report(fd, REC_DONE, 0, 0);
        return 0;
    }
    troupe_cf *cf[3];
    for (int i = 0; i < 3; i++) {
        if ((e = troupe_db_cf(db, crash_storage_cfs[i], &cf[i])) != TROUPE_OK)
            die("cf", e);
    }
    troupe_commit *c;
    if ((e = troupe_commit_create(db, NULL, &c)) != TROUPE_OK)
        die("commit_create", e);
    crash_report(fd, REC_READY, 0, 0);
    bool failed = false;
    uint64_t seq = 0;
    int nofire = 0;
    while (!failed && seq < EIO_COMMITS) {
        outcome o[EIO_WINDOW];
        memset(o, 0, sizeof(o));
        uint64_t first = seq;
        troupe_err refused = TROUPE_OK;
        int n = 0;
        for (; n < EIO_WINDOW; n++, seq++) {
            troupe_batch *b = storage_batch(cf, cycle, seq);
            e = troupe_commit_submit(c, &b, TROUPE_SYNC_ON, eio_cb, &o[n]);
            if (e != TROUPE_OK) {
                troupe_batch_destroy(b);
                refused = e;
                failed = true;
                break;
            }
        }
        for (int i = 0; i < n; i++) {
            for (int t = 0; t < 30000 && !atomic_load(&o[i].fired); t++)
                usleep(1000);
            if (!atomic_load(&o[i].fired)) {
                nofire = 1;
                continue;
            }
            troupe_err r = atomic_load(&o[i].err);
            crash_report(fd, REC_OUT, (int32_t)r, first + (uint64_t)i);
            if (r != TROUPE_OK)
                failed = true;
        }
        /* After the outcomes it follows from. */
        if (refused != TROUPE_OK)
            crash_report(fd, REC_REFUSED, (int32_t)refused, seq);
        if (!failed && seq % EIO_FLUSH_EVERY < EIO_WINDOW) {
            e = troupe_db_flush(db);
            crash_report(fd, REC_FLUSH, (int32_t)e, seq);
            if (e != TROUPE_OK)
                failed = true;
        }
    }
    if (failed || nofire) {
        int mask = nofire ? CHK_NOFIRE : 0;
        if (!troupe_db_failstop(db))
            mask |= CHK_FLAG;
        troupe_batch *b = storage_batch(cf, cycle, 1u << 30);
        if (troupe_db_write(db, b, TROUPE_SYNC_OFF) != TROUPE_EFAILSTOP)
            mask |= CHK_WRITE;
        outcome late = {0};
        if (troupe_commit_submit(c, &b, TROUPE_SYNC_ON, eio_cb, &late) !=
            TROUPE_EFAILSTOP)
            mask |= CHK_SUBMIT;
        troupe_batch_destroy(b);
        uint8_t k[CRASH_KEY_LEN];
        crash_key(k, cycle, 0);
        void *v = NULL;
        size_t vn;
        e = troupe_db_get(db, cf[0], NULL, k, sizeof(k), &v, &vn);
        if (e != TROUPE_OK && e != TROUPE_ENOENT)
            mask |= CHK_READ;
        troupe_free(v);
        crash_report(fd, REC_CHECK, 0, (uint64_t)mask);
    }
    troupe_commit_destroy(c);
    e = troupe_db_close(db);
    crash_report(fd, REC_CLOSE, (int32_t)e, 0);
    crash_report(fd, REC_HITS, 0, (uint64_t)hits());
    crash_report(fd, REC_DONE, 0, 0);
    return 0;
}

/* ---- model: plain file operations with known durable outcomes ---------- */

static int
mk(const char *dir, const char *name, int flags)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    int fd = open(p, flags | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(p);
        _exit(2);
    }
    return fd;
}

static void
put_str(int fd, const char *s)
{
    if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
        _exit(2);
}

static void
at(const char *dir, const char *name, char *out)
{
    snprintf(out, 4096, "%s/%s", dir, name);
}

static void
sync_dir(const char *dir)
{
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0 || fsync(d) != 0)
        _exit(2);
    close(d);
}

/* argv: DIR PHASE FD. Phase 1 leaves unsynced changes of every kind;
 * phase 2 makes a rename and an unlink durable. The expected outcome is
 * in crash_loop.c (run_model). */
int
crash_child_model(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    const char *dir = argv[0];
    int phase = atoi(argv[1]);
    int rfd = atoi(argv[2]);
    char p[4096], q[4096];
    if (phase == 2) {
        at(dir, "base_keep", p);
        at(dir, "kept2", q);
        if (rename(p, q) != 0)
            _exit(2);
        at(dir, "base_unlink", p);
        if (unlink(p) != 0)
            _exit(2);
        sync_dir(dir);
        crash_report(rfd, REC_READY, 0, 0);
        for (;;)
            pause();
    }
    int a = mk(dir, "a", O_WRONLY | O_CREAT | O_TRUNC);
    put_str(a, "synced");
    fsync(a);
    int e = mk(dir, "e", O_WRONLY | O_CREAT | O_TRUNC);
    int f = mk(dir, "f", O_WRONLY | O_CREAT | O_TRUNC);
    put_str(f, "0123456789");
    fsync(f);
    int g = mk(dir, "g", O_WRONLY | O_CREAT | O_TRUNC);
    put_str(g, "xxxx");
    fsync(g);
    if (pwrite(g, "YY", 2, 1) != 2 || fdatasync(g) != 0)
        _exit(2);
    int h = mk(dir, "h", O_WRONLY | O_CREAT | O_TRUNC);
    char he[] = "he", llo[] = "llo";
    struct iovec iov[2] = {{he, 2}, {llo, 3}};
    if (writev(h, iov, 2) != 5 || fdatasync(h) != 0)
        _exit(2);
    int c = mk(dir, "c", O_WRONLY | O_CREAT | O_TRUNC);
    put_str(c, "c1");
    fsync(c);
    sync_dir(dir);
    put_str(a, "+unsynced");
    put_str(e, "e");
    if (pwrite(f, "AB", 2, 2) != 2 || pwrite(g, "ZZ", 2, 0) != 2 ||
        ftruncate(h, 2) != 0)
        _exit(2);
    int b = mk(dir, "b", O_WRONLY | O_CREAT | O_TRUNC);
    put_str(b, "b");
    fsync(b);
    at(dir, "base_unlink", p);
    if (unlink(p) != 0)
        _exit(2);
    int t = mk(dir, "base_trunc", O_WRONLY | O_TRUNC);
    put_str(t, "new");
    at(dir, "base_renamed", p);
    at(dir, "renamed2", q);
    if (rename(p, q) != 0)
        _exit(2);
    at(dir, "c", p);
    at(dir, "d", q);
    if (rename(p, q) != 0)
        _exit(2);
    crash_report(rfd, REC_READY, 0, 0);
    for (;;)
        pause();
}
