/*
 * diskfull: fills a small real filesystem through troupe until it refuses,
 * and checks that a full disk is a clean fail-stop (docs/crash-testing.md,
 * "Full disk").
 *
 * Each run mounts a fresh filesystem (tmpfs with size=, or an ext4 image
 * on a loop device) inside a private mount namespace, so that nothing is
 * left mounted whatever happens, and puts a ballast file and a database on
 * it. A workload process then fills it in one mode:
 *
 *   direct        synced troupe_db_write batches of 64 KiB;
 *   pipeline      synced commits through the commit pipeline, 16 in
 *                 flight, each putting 32 KiB into two families at once;
 *   families      troupe_db_cf_create, then a 1 MiB put into the family;
 *   tables        troupe_tables_create (three families and a catalog entry
 *                 each), then a 2 MiB row;
 *   table_writes  troupe_table_insert_wait of 32 KiB rows with an index;
 *   queue         troupe_queue_publish_wait of 32 KiB events;
 *
 * with the free-space gate on (min_free_bytes 8 MiB, reserve 4 MiB:
 * troupe refuses first) or off (min_free_bytes 0: RocksDB itself runs out
 * of space). The workload reports every acknowledged write over a pipe
 * before it moves on, and every refused one with its error. Checked:
 *
 *  - the workload exits normally: no abort, no hang (a watchdog);
 *  - the first error is ENOSPC, and what follows is ENOSPC (gate on: the
 *    db is not fail-stop and still refuses) or ENOSPC / EFAILSTOP (gate
 *    off: fail-stop);
 *  - after the workload closed everything, the ballast is deleted (space
 *    freed) and the database reopens; every acknowledged write is there,
 *    byte for byte, every refused one (ENOSPC, EFAILSTOP: nothing written)
 *    is not;
 *  - the reopened database serves writes again.
 *
 * Needs root (mount namespace, mounts). Without it, or where mount
 * namespaces are not allowed, it says so and exits 77 (CTest: skipped).
 * ext4 needs mkfs.ext4 and a loop device; without them only tmpfs runs,
 * said so on stderr. Under ThreadSanitizer only tmpfs runs unless --fs
 * says otherwise.
 *
 *   diskfull [--passes N] [--fs tmpfs|ext4|both] [--gate on|off|both]
 *            [--mode NAME|all] [--size-mib M]
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "troupe/alloc.h"
#include "troupe/commit.h"
#include "troupe/pack.h"
#include "troupe/queue.h"
#include "troupe/storage.h"
#include "troupe/table.h"

#define MIB (1024u * 1024u)
#define BALLAST (8u * MIB)
#define GATE_MIN_FREE (8u * MIB)
#define RESERVE (4u * MIB)
#define AFTER_TRIES 4 /* attempts after the first refusal */
/* Written after the reopen; 2 writes at least. */
#define AGAIN_BYTES (2u * MIB)
#define WATCHDOG_S 240   /* a workload or check that hangs fails */
#define MAX_IDS 1000000u /* far above what fits */

typedef enum mode {
    M_DIRECT,
    M_PIPELINE,
    M_FAMILIES,
    M_TABLES,
    M_TABLE_WRITES,
    M_QUEUE,
    M_COUNT
} mode;

static const char *const mode_names[M_COUNT] = {
    "direct", "pipeline", "families", "tables", "table_writes", "queue"};

/* Bytes of data per acknowledged write, by mode. */
static const size_t mode_val[M_COUNT] = {64u << 10, 32u << 10, 1u << 20,
                                         2u << 20,  32u << 10, 32u << 10};

typedef enum fs_kind { FS_TMPFS, FS_EXT4 } fs_kind;

/* ---- reports over the pipe --------------------------------------------- */

enum rec_type {
    R_ACK = 1,     /* id acknowledged */
    R_REFUSED = 2, /* id refused with err (nothing written unless EUNKNOWN) */
    R_AFTER = 3,   /* err of an attempt after the first refusal */
    R_FAILSTOP = 4 /* id: troupe_db_failstop after the attempts */
};

typedef struct rec {
    uint32_t type;
    int32_t err;
    uint64_t id;
} rec;

static void
report(int fd, uint32_t type, troupe_err err, uint64_t id)
{
    rec r = {type, (int32_t)err, id};
    if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(3);
}

static void
die(const char *what, troupe_err e)
{
    fprintf(stderr, "diskfull: %s: %s\n", what, troupe_err_name(e));
    _exit(2);
}

/* ---- deterministic content --------------------------------------------- */

/* Incompressible bytes of (mode, id, part), so a check can recompute them
 * (RocksDB compresses table files: repeated bytes would fill nothing). */
static void
fill(uint8_t *buf, size_t n, mode m, uint64_t id, int part)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ ((uint64_t)m << 56) ^
                 ((uint64_t)part << 48) ^ (id * 0xBF58476D1CE4E5B9ull);
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
        }
        buf[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> (8 * (i & 7)));
    }
}

static int
key_of(char *k, size_t cap, char tag, uint64_t id)
{
    return snprintf(k, cap, "%c%08llu", tag, (unsigned long long)id);
}

/* A table row or queue payload: {"n": id, "blob": <bytes>} as msgpack. */
static void
pack_doc(troupe_packer *p, uint8_t *blob, size_t n, mode m, uint64_t id)
{
    fill(blob, n, m, id, 0);
    troupe_pack_init(p);
    troupe_pack_map(p, 2);
    troupe_pack_cstr(p, "n");
    troupe_pack_uint(p, id);
    troupe_pack_cstr(p, "blob");
    troupe_pack_bin(p, blob, n);
    if (p->err != TROUPE_OK)
        die("pack", p->err);
}

/* ---- the troupe stack of one process ----------------------------------- */

typedef struct stack {
    troupe_runtime *rt;
    troupe_db *db;
    troupe_commit *c;
    troupe_catalog *cat;
    troupe_tables *tb;
    troupe_queues *qs;
} stack;

static const troupe_index_field n_field = {.path = "n",
                                           .type = TROUPE_FIELD_INT};
static const troupe_index_spec n_index = {
    .name = "by_n", .fields = &n_field, .n_fields = 1};

/* The options of every open: the gate on (8 MiB) or off, a 4 MiB reserve. */
static void
db_opts(troupe_db_opts *o, bool gate)
{
    troupe_db_opts_init(o);
    o->min_free_bytes = gate ? GATE_MIN_FREE : 0;
    o->reserve_bytes = RESERVE;
}

static troupe_err
stack_open(stack *s, const char *dbdir, mode m, bool gate)
{
    memset(s, 0, sizeof(*s));
    troupe_db_opts o;
    db_opts(&o, gate);
    troupe_err e = troupe_db_open(dbdir, &o, &s->db);
    if (e != TROUPE_OK)
        return e;
    if ((e = troupe_commit_create(s->db, NULL, &s->c)) != TROUPE_OK)
        return e;
    if (m < M_TABLES)
        return TROUPE_OK;
    troupe_runtime_opts ro = {.schedulers = 2, .workers = 2};
    if ((e = troupe_runtime_create(&s->rt, &ro)) != TROUPE_OK)
        return e;
    troupe_catalog_opts co = {.rt = s->rt, .db = s->db};
    if ((e = troupe_catalog_open(&co, &s->cat)) != TROUPE_OK)
        return e;
    if (m == M_QUEUE) {
        troupe_queues_opts qo = {.catalog = s->cat, .commit = s->c};
        return troupe_queues_open(&qo, &s->qs);
    }
    troupe_tables_opts to = {.catalog = s->cat, .commit = s->c};
    return troupe_tables_open(&to, &s->tb);
}

static troupe_err
stack_close(stack *s)
{
    if (s->tb != NULL) {
        troupe_tables_stop_wait(s->tb);
        troupe_tables_destroy(s->tb);
    }
    if (s->qs != NULL)
        troupe_queues_stop_wait(s->qs);
    troupe_queues_destroy(s->qs);
    if (s->cat != NULL) {
        troupe_catalog_stop_wait(s->cat);
        troupe_catalog_destroy(s->cat);
    }
    if (s->rt != NULL) {
        troupe_runtime_shutdown_wait(s->rt);
        troupe_runtime_destroy(s->rt);
    }
    troupe_commit_destroy(s->c);
    return troupe_db_close(s->db);
}

/* ---- one write per mode ------------------------------------------------ */

typedef struct pipe_slot {
    sem_t *window;
    int fd;
    uint64_t id;
    atomic_int *first_err; /* the first refused completion, 0 until then */
    atomic_int *in_flight;
} pipe_slot;

static void
pipe_done(troupe_err err, void *arg)
{
    pipe_slot *ps = arg;
    if (err == TROUPE_OK) {
        report(ps->fd, R_ACK, TROUPE_OK, ps->id);
    } else {
        report(ps->fd, R_REFUSED, err, ps->id);
        int none = 0;
        atomic_compare_exchange_strong(ps->first_err, &none, (int)err);
    }
    atomic_fetch_sub(ps->in_flight, 1);
    sem_post(ps->window);
    troupe_free(ps);
}

static troupe_err
put_one(troupe_db *db, troupe_cf *cf, const char *k, const uint8_t *v, size_t n)
{
    troupe_batch *b;
    troupe_err e = troupe_batch_create(&b);
    if (e != TROUPE_OK)
        return e;
    e = troupe_batch_put(b, cf, k, strlen(k), v, n);
    if (e == TROUPE_OK)
        e = troupe_db_write(db, b, TROUPE_SYNC_ON);
    troupe_batch_destroy(b);
    return e;
}

/* One write of mode m with id `id` (synchronous modes). */
static troupe_err
write_one(stack *s, mode m, uint64_t id, uint8_t *buf)
{
    char k[32], name[32];
    size_t n = mode_val[m];
    troupe_err e;
    switch (m) {
    case M_DIRECT: {
        troupe_cf *cf;
        if ((e = troupe_db_cf(s->db, "d", &cf)) != TROUPE_OK)
            return e;
        key_of(k, sizeof(k), 'd', id);
        fill(buf, n, m, id, 0);
        return put_one(s->db, cf, k, buf, n);
    }
    case M_FAMILIES: {
        troupe_cf *cf;
        key_of(name, sizeof(name), 'f', id);
        if ((e = troupe_db_cf_create(s->db, name, &cf)) != TROUPE_OK)
            return e;
        fill(buf, n, m, id, 0);
        return put_one(s->db, cf, "k", buf, n);
    }
    case M_TABLES:
    case M_TABLE_WRITES: {
        if (m == M_TABLES) {
            key_of(name, sizeof(name), 't', id);
            e = troupe_tables_create_wait(s->tb, name, &n_index, 1);
            if (e != TROUPE_OK)
                return e;
        } else {
            snprintf(name, sizeof(name), "w");
        }
        key_of(k, sizeof(k), 'r', id);
        troupe_packer p;
        pack_doc(&p, buf, n, m, id);
        size_t dl;
        const void *d = troupe_pack_data(&p, &dl);
        troupe_write_opts wo = {.sync = TROUPE_SYNC_ON};
        e = troupe_table_insert_wait(s->tb, name, k, strlen(k), d, dl, &wo);
        troupe_pack_fini(&p);
        return e;
    }
    case M_QUEUE: {
        key_of(k, sizeof(k), 'e', id);
        troupe_packer p;
        pack_doc(&p, buf, n, m, id);
        size_t dl;
        const void *d = troupe_pack_data(&p, &dl);
        troupe_queue_event ev = {.id = k,
                                 .id_len = strlen(k),
                                 .key = k,
                                 .key_len = strlen(k),
                                 .payload = d,
                                 .payload_len = dl,
                                 .time_ms = 1};
        e = troupe_queue_publish_wait(s->qs, "q", &ev, TROUPE_SYNC_ON);
        troupe_pack_fini(&p);
        return e;
    }
    default:
        return TROUPE_EINVAL;
    }
}

/* Submits one pipeline commit (two families, one batch). */
static troupe_err
submit_one(stack *s, uint64_t id, uint8_t *buf, troupe_commit_cb cb, void *arg)
{
    troupe_cf *a, *b2;
    troupe_err e = troupe_db_cf(s->db, "a", &a);
    if (e == TROUPE_OK)
        e = troupe_db_cf(s->db, "b", &b2);
    if (e != TROUPE_OK)
        return e;
    char k[32];
    key_of(k, sizeof(k), 'p', id);
    size_t n = mode_val[M_PIPELINE];
    troupe_batch *b;
    if ((e = troupe_commit_batch(s->c, &b)) != TROUPE_OK)
        return e;
    fill(buf, n, M_PIPELINE, id, 0);
    e = troupe_batch_put(b, a, k, strlen(k), buf, n);
    fill(buf, n, M_PIPELINE, id, 1);
    if (e == TROUPE_OK)
        e = troupe_batch_put(b, b2, k, strlen(k), buf, n);
    if (e == TROUPE_OK)
        e = troupe_commit_submit(s->c, &b, TROUPE_SYNC_ON, cb, arg);
    troupe_batch_destroy(b); /* NULL once submitted */
    return e;
}

typedef struct waiter {
    sem_t done;
    troupe_err err;
} waiter;

static void
waiter_cb(troupe_err err, void *arg)
{
    waiter *w = arg;
    w->err = err;
    sem_post(&w->done);
}

/* One pipeline commit, waiting for its completion (or its refusal). */
static troupe_err
commit_wait(stack *s, uint64_t id, uint8_t *buf)
{
    waiter w;
    sem_init(&w.done, 0, 0);
    troupe_err e = submit_one(s, id, buf, waiter_cb, &w);
    if (e == TROUPE_OK) {
        sem_wait(&w.done);
        e = w.err;
    }
    sem_destroy(&w.done);
    return e;
}

/* ---- the workload ------------------------------------------------------ */

static troupe_err
prepare(stack *s, mode m)
{
    troupe_err e = TROUPE_OK;
    switch (m) {
    case M_DIRECT:
        e = troupe_db_cf_create(s->db, "d", NULL);
        break;
    case M_PIPELINE:
        e = troupe_db_cf_create(s->db, "a", NULL);
        if (e == TROUPE_OK)
            e = troupe_db_cf_create(s->db, "b", NULL);
        break;
    case M_TABLE_WRITES:
        e = troupe_tables_create_wait(s->tb, "w", &n_index, 1);
        break;
    case M_QUEUE: {
        troupe_queue_spec spec = {
            .name = "q", .partitions = 1, .retention_ms = INT64_MAX / 4};
        e = troupe_queues_create_wait(s->qs, &spec);
        break;
    }
    default:
        break;
    }
    return e == TROUPE_EEXIST ? TROUPE_OK : e;
}

static bool
storage_mode(mode m)
{
    return m <= M_FAMILIES;
}

/* Fills the filesystem; every outcome goes to fd. */
static int
workload(const char *dbdir, mode m, bool gate, int fd)
{
    alarm(WATCHDOG_S);
    stack s;
    troupe_err e = stack_open(&s, dbdir, m, gate);
    if (e != TROUPE_OK)
        die("open", e);
    if ((e = prepare(&s, m)) != TROUPE_OK)
        die("prepare", e);
    uint8_t *buf = troupe_malloc(mode_val[m]);
    if (buf == NULL)
        die("malloc", TROUPE_ENOMEM);
    uint64_t id = 0;
    if (m == M_PIPELINE) {
        sem_t window;
        sem_init(&window, 0, 16);
        atomic_int first = 0, in_flight = 0;
        for (; id < MAX_IDS && atomic_load(&first) == 0; id++) {
            sem_wait(&window);
            pipe_slot *ps = troupe_calloc(1, sizeof(*ps));
            if (ps == NULL)
                die("malloc", TROUPE_ENOMEM);
            *ps = (pipe_slot){&window, fd, id, &first, &in_flight};
            atomic_fetch_add(&in_flight, 1);
            e = submit_one(&s, id, buf, pipe_done, ps);
            if (e != TROUPE_OK) { /* refused at submit: nothing queued */
                atomic_fetch_sub(&in_flight, 1);
                troupe_free(ps);
                sem_post(&window);
                report(fd, R_REFUSED, e, id);
                int none = 0;
                atomic_compare_exchange_strong(&first, &none, (int)e);
            }
        }
        for (int i = 0; i < 16; i++) /* every completion back */
            sem_wait(&window);
        sem_destroy(&window);
        for (int i = 0; i < AFTER_TRIES; i++, id++) {
            e = commit_wait(&s, id, buf);
            report(fd, e == TROUPE_OK ? R_ACK : R_REFUSED, e, id);
            report(fd, R_AFTER, e, id);
        }
    } else {
        for (; id < MAX_IDS; id++) {
            e = write_one(&s, m, id, buf);
            if (e != TROUPE_OK)
                break;
            report(fd, R_ACK, TROUPE_OK, id);
        }
        report(fd, R_REFUSED, e, id++);
        for (int i = 0; i < AFTER_TRIES; i++, id++) {
            e = write_one(&s, m, id, buf);
            report(fd, e == TROUPE_OK ? R_ACK : R_REFUSED, e, id);
            report(fd, R_AFTER, e, id);
        }
    }
    report(fd, R_FAILSTOP, TROUPE_OK, troupe_db_failstop(s.db) ? 1 : 0);
    troupe_free(buf);
    if ((e = stack_close(&s)) != TROUPE_OK)
        die("close", e);
    return 0;
}

/* ---- the check --------------------------------------------------------- */

typedef struct outcome {
    uint8_t *state; /* by id: 0 never tried, 1 acked, 2 refused, 3 unknown */
    uint8_t *errs;  /* by id: the refusal's troupe_err */
    uint64_t n_ack, n_refused, n_unknown, max_id;
    troupe_err first;
    troupe_err after[AFTER_TRIES];
    int n_after;
    int failstop;
} outcome;

static bool
bytes_eq_doc(const troupe_rows *rows, mode m, uint64_t id, uint8_t *buf)
{
    if (rows == NULL || rows->n != 1)
        return false;
    troupe_packer p;
    pack_doc(&p, buf, mode_val[m], m, id);
    size_t dl;
    const void *d = troupe_pack_data(&p, &dl);
    bool eq =
        rows->rows[0].doc_len == dl && memcmp(rows->rows[0].doc, d, dl) == 0;
    troupe_pack_fini(&p);
    return eq;
}

/* Whether id's write is there (1), absent (0), or wrong (-1). */
static int
present(stack *s, mode m, uint64_t id, uint8_t *buf, uint8_t *got)
{
    char k[32], name[32];
    size_t n = mode_val[m];
    void *v = NULL;
    size_t vl = 0;
    troupe_err e;
    switch (m) {
    case M_DIRECT: {
        troupe_cf *cf;
        if (troupe_db_cf(s->db, "d", &cf) != TROUPE_OK)
            return -1;
        key_of(k, sizeof(k), 'd', id);
        e = troupe_db_get(s->db, cf, NULL, k, strlen(k), &v, &vl);
        if (e == TROUPE_ENOENT)
            return 0;
        fill(buf, n, m, id, 0);
        int r = e == TROUPE_OK && vl == n && memcmp(v, buf, n) == 0 ? 1 : -1;
        troupe_free(v);
        return r;
    }
    case M_PIPELINE: {
        key_of(k, sizeof(k), 'p', id);
        int seen = 0;
        for (int part = 0; part < 2; part++) {
            troupe_cf *cf;
            if (troupe_db_cf(s->db, part ? "b" : "a", &cf) != TROUPE_OK)
                return -1;
            e = troupe_db_get(s->db, cf, NULL, k, strlen(k), &v, &vl);
            if (e == TROUPE_ENOENT)
                continue;
            fill(buf, n, m, id, part);
            bool ok = e == TROUPE_OK && vl == n && memcmp(v, buf, n) == 0;
            troupe_free(v);
            if (!ok)
                return -1;
            seen++;
        }
        return seen == 2 ? 1 : seen == 0 ? 0 : -1; /* both or neither */
    }
    case M_FAMILIES: {
        troupe_cf *cf;
        key_of(name, sizeof(name), 'f', id);
        if (troupe_db_cf(s->db, name, &cf) != TROUPE_OK)
            return 0;
        e = troupe_db_get(s->db, cf, NULL, "k", 1, &v, &vl);
        if (e == TROUPE_ENOENT)
            return 0; /* the family alone is not the write */
        fill(buf, n, m, id, 0);
        int r = e == TROUPE_OK && vl == n && memcmp(v, buf, n) == 0 ? 1 : -1;
        troupe_free(v);
        return r;
    }
    case M_TABLES:
    case M_TABLE_WRITES: {
        if (m == M_TABLES)
            key_of(name, sizeof(name), 't', id);
        else
            snprintf(name, sizeof(name), "w");
        key_of(k, sizeof(k), 'r', id);
        troupe_rows *rows = NULL;
        e = troupe_table_get_wait(s->tb, name, k, strlen(k), &rows);
        if (e == TROUPE_ENOENT || (m == M_TABLES && e == TROUPE_ENOTABLE))
            return 0; /* no row, or its table's create was refused */
        int r = e == TROUPE_OK && bytes_eq_doc(rows, m, id, got) ? 1 : -1;
        troupe_rows_destroy(rows);
        return r;
    }
    case M_QUEUE: {
        key_of(k, sizeof(k), 'e', id);
        troupe_queue_page *pg = NULL;
        e = troupe_queue_lookup_wait(s->qs, "q", k, strlen(k), &pg);
        if (e != TROUPE_OK)
            return -1;
        int r = 0;
        if (pg->n == 1) {
            troupe_packer p;
            pack_doc(&p, buf, n, m, id);
            size_t dl;
            const void *d = troupe_pack_data(&p, &dl);
            r = pg->items[0].payload_len == dl &&
                        memcmp(pg->items[0].payload, d, dl) == 0
                    ? 1
                    : -1;
            troupe_pack_fini(&p);
        } else if (pg->n > 1) {
            r = -1;
        }
        troupe_queue_page_destroy(pg);
        return r;
    }
    default:
        return -1;
    }
}

static uint64_t
avail(const char *path)
{
    struct statvfs v;
    return statvfs(path, &v) == 0 ? (uint64_t)v.f_bavail * v.f_frsize : 0;
}

/* Takes every byte left on the filesystem of path (a new file). */
static int
fill_up(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    static char chunk[1u << 20];
    for (size_t sz = sizeof(chunk); sz >= 512; sz /= 8) {
        while (write(fd, chunk, sz) == (ssize_t)sz)
            ;
    }
    int e = errno;
    close(fd);
    errno = e;
    return e == ENOSPC ? 0 : -1;
}

/* fn(mnt/name); on failure the reason goes to msg. */
static int
on_file(const char *mnt, const char *name, int (*fn)(const char *), char *msg,
        size_t cap)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", mnt, name);
    if (fn(path) == 0)
        return 0;
    snprintf(msg, cap, "%s: %s", name, strerror(errno));
    return 1;
}

/* After the workload: an open on the full disk, then free the ballast,
 * reopen, check, write again.
 * Returns 0 or 1 (failed), with the reason in msg. */
static int
check(const char *mnt, const char *dbdir, mode m, bool gate, outcome *o,
      char *msg, size_t cap, uint64_t *freed_avail, troupe_err *full_open)
{
    /* First an open with not one byte left: the gate-on runs still hold
     * the reserve, which such an open releases and tries again (OK); the
     * gate-off runs released it when RocksDB ran out (ENOSPC, cleanly). */
    if (on_file(mnt, "filler", fill_up, msg, cap) != 0)
        return 1;
    troupe_db_opts fo;
    db_opts(&fo, gate);
    troupe_db *fdb = NULL;
    *full_open = troupe_db_open(dbdir, &fo, &fdb);
    if (*full_open == TROUPE_OK)
        *full_open = troupe_db_close(fdb);
    if (on_file(mnt, "filler", unlink, msg, cap) != 0)
        return 1;
    if (gate ? *full_open != TROUPE_OK
             : *full_open != TROUPE_OK && *full_open != TROUPE_ENOSPC) {
        snprintf(msg, cap, "open on the full disk: %s",
                 troupe_err_name(*full_open));
        return 1;
    }
    if (on_file(mnt, "ballast", unlink, msg, cap) != 0)
        return 1;
    *freed_avail = avail(mnt);
    stack s;
    troupe_err e = stack_open(&s, dbdir, m, gate);
    if (e != TROUPE_OK) {
        snprintf(msg, cap, "reopen after freeing space: %s",
                 troupe_err_name(e));
        return 1;
    }
    uint8_t *buf = troupe_malloc(mode_val[m]);
    uint8_t *got = troupe_malloc(mode_val[m]);
    int rc = 0;
    for (uint64_t id = 0; id <= o->max_id && rc == 0; id++) {
        if (o->state[id] == 0 || o->state[id] == 3)
            continue;
        int p = present(&s, m, id, buf, got);
        if (p < 0) {
            snprintf(msg, cap, "write %llu: wrong or torn content",
                     (unsigned long long)id);
            rc = 1;
        } else if (o->state[id] == 1 && p == 0) {
            snprintf(msg, cap, "acknowledged write %llu lost",
                     (unsigned long long)id);
            rc = 1;
        } else if (o->state[id] == 2 && p == 1) {
            snprintf(msg, cap, "refused write %llu is stored",
                     (unsigned long long)id);
            rc = 1;
        }
    }
    /* Serves writes again: new ids past everything tried. */
    if (rc == 0 && (e = prepare(&s, m)) != TROUPE_OK) {
        snprintf(msg, cap, "prepare after reopen: %s", troupe_err_name(e));
        rc = 1;
    }
    int again = (int)(AGAIN_BYTES / mode_val[m]);
    again = again < 2 ? 2 : again;
    for (int i = 0; i < again && rc == 0; i++) {
        uint64_t id = o->max_id + 1 + (uint64_t)i;
        e = m == M_PIPELINE ? commit_wait(&s, id, buf)
                            : write_one(&s, m, id, buf);
        if (e != TROUPE_OK) {
            snprintf(msg, cap, "write %d after the reopen: %s", i,
                     troupe_err_name(e));
            rc = 1;
        }
    }
    troupe_free(buf);
    troupe_free(got);
    if ((e = stack_close(&s)) != TROUPE_OK && rc == 0) {
        snprintf(msg, cap, "close after the check: %s", troupe_err_name(e));
        rc = 1;
    }
    return rc;
}

/* ---- filesystems ------------------------------------------------------- */

static int
run_cmd(const char *const argv[])
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* In the run's private namespace: mounts a fresh filesystem at mnt. */
static int
mount_fs(fs_kind fs, const char *mnt, const char *img, unsigned size_mib)
{
    if (fs == FS_TMPFS) {
        char o[64];
        snprintf(o, sizeof(o), "size=%um,mode=0755", size_mib);
        return mount("diskfull", mnt, "tmpfs", 0, o) == 0 ? 0 : -1;
    }
    int fd = open(img, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    int r = ftruncate(fd, (off_t)size_mib * MIB);
    close(fd);
    if (r != 0)
        return -1;
    const char *mkfs[] = {"mkfs.ext4", "-q", "-F", "-m", "0", img, NULL};
    if (run_cmd(mkfs) != 0)
        return -1;
    const char *mnt_cmd[] = {"mount", "-o", "loop", img, mnt, NULL};
    return run_cmd(mnt_cmd) == 0 ? 0 : -1;
}

/* ---- one run ----------------------------------------------------------- */

typedef struct run_result {
    int failed; /* 0 passed, 1 failed, 2 could not set up (skipped) */
    bool aborted;
    uint64_t acks, refused;
    uint64_t freed;       /* bytes available after the ballast went */
    troupe_err full_open; /* the open with no byte left */
    troupe_err first;
    double secs;
} run_result;

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reads the workload's reports until EOF. */
static void
collect(int fd, outcome *o)
{
    rec r;
    for (;;) {
        ssize_t n = read(fd, &r, sizeof(r));
        if (n == 0)
            break;
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof(r))
            break;
        if (r.type == R_FAILSTOP) {
            o->failstop = (int)r.id;
            continue;
        }
        if (r.id >= MAX_IDS + 64)
            continue;
        if (r.id > o->max_id)
            o->max_id = r.id;
        if (r.type == R_ACK) {
            o->state[r.id] = 1;
            o->n_ack++;
        } else if (r.type == R_REFUSED) {
            troupe_err e = (troupe_err)r.err;
            bool unknown = e == TROUPE_EUNKNOWN;
            o->state[r.id] = unknown ? 3 : 2;
            if (unknown)
                o->n_unknown++;
            else
                o->n_refused++;
            o->errs[r.id] = (uint8_t)e;
        } else if (r.type == R_AFTER && o->n_after < AFTER_TRIES) {
            o->after[o->n_after++] = (troupe_err)r.err;
        }
    }
    /* The first refusal in submit order (the pipe's order is not: a
     * refused submit and the failed group's completions race). */
    for (uint64_t id = 0; id <= o->max_id; id++) {
        if (o->state[id] >= 2) {
            o->first = (troupe_err)o->errs[id];
            break;
        }
    }
}

/* The refusals must be ENOSPC first, then ENOSPC (gate) or ENOSPC /
 * EFAILSTOP (no gate); never OK after a refusal, never EUNKNOWN. */
static int
judge(const outcome *o, mode m, bool gate, char *msg, size_t cap)
{
    if (o->n_ack == 0) {
        snprintf(msg, cap, "nothing was acknowledged before the disk filled");
        return 1;
    }
    if (o->first != TROUPE_ENOSPC) {
        snprintf(msg, cap, "first refusal %s, want ENOSPC",
                 troupe_err_name(o->first));
        return 1;
    }
    if (o->n_unknown > 0) {
        snprintf(msg, cap, "%llu writes EUNKNOWN",
                 (unsigned long long)o->n_unknown);
        return 1;
    }
    if (o->n_after != AFTER_TRIES) {
        snprintf(msg, cap, "%d of %d later attempts reported", o->n_after,
                 AFTER_TRIES);
        return 1;
    }
    for (int i = 0; i < o->n_after; i++) {
        troupe_err e = o->after[i];
        bool ok = e == TROUPE_ENOSPC || (!gate && e == TROUPE_EFAILSTOP);
        if (!ok) {
            snprintf(msg, cap, "attempt %d after the refusal: %s", i,
                     troupe_err_name(e));
            return 1;
        }
    }
    if (storage_mode(m) && o->failstop != (gate ? 0 : 1)) {
        snprintf(msg, cap, "fail-stop is %d, want %d", o->failstop,
                 gate ? 0 : 1);
        return 1;
    }
    return 0;
}

static run_result
one_run(fs_kind fs, mode m, bool gate, unsigned size_mib)
{
    run_result res = {0};
    double t0 = now_s();
    char mnt[] = "/tmp/troupe-diskfull-XXXXXX";
    if (mkdtemp(mnt) == NULL) {
        res.failed = 2;
        return res;
    }
    char img[sizeof(mnt) + 8];
    snprintf(img, sizeof(img), "%s.img", mnt);
    int rp[2];
    if (pipe(rp) != 0) {
        rmdir(mnt);
        res.failed = 2;
        return res;
    }
    fflush(NULL);
    pid_t runner = fork();
    if (runner == 0) {
        close(rp[0]);
        /* A private namespace: the mount dies with this process. */
        if (unshare(CLONE_NEWNS) != 0 ||
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
            _exit(20);
        if (mount_fs(fs, mnt, img, size_mib) != 0)
            _exit(21);
        char dbdir[sizeof(mnt) + 8], ballast[sizeof(mnt) + 16];
        snprintf(dbdir, sizeof(dbdir), "%s/db", mnt);
        snprintf(ballast, sizeof(ballast), "%s/ballast", mnt);
        int bfd = open(ballast, O_WRONLY | O_CREAT, 0600);
        if (bfd < 0 || posix_fallocate(bfd, 0, BALLAST) != 0)
            _exit(22);
        close(bfd);
        int p[2];
        if (pipe(p) != 0)
            _exit(23);
        fflush(NULL);
        pid_t w = fork();
        if (w == 0) {
            close(p[0]);
            _exit(workload(dbdir, m, gate, p[1]));
        }
        close(p[1]);
        outcome o = {0};
        o.state = calloc(MAX_IDS + 64, 1);
        o.errs = calloc(MAX_IDS + 64, 1);
        if (o.state == NULL || o.errs == NULL)
            _exit(23);
        collect(p[0], &o);
        close(p[0]);
        int st;
        waitpid(w, &st, 0);
        char msg[512] = "";
        int rc = 0;
        bool aborted = false;
        uint64_t freed = 0;
        troupe_err full_open = TROUPE_OK;
        if (WIFSIGNALED(st)) {
            aborted = true;
            snprintf(msg, sizeof(msg), "workload killed by signal %d%s",
                     WTERMSIG(st),
                     WTERMSIG(st) == SIGALRM ? " (watchdog: a hang)" : "");
            rc = 1;
        } else if (WEXITSTATUS(st) != 0) {
            snprintf(msg, sizeof(msg), "workload exited %d", WEXITSTATUS(st));
            rc = 1;
        }
        if (rc == 0)
            rc = judge(&o, m, gate, msg, sizeof(msg));
        if (rc == 0) {
            alarm(WATCHDOG_S);
            rc = check(mnt, dbdir, m, gate, &o, msg, sizeof(msg), &freed,
                       &full_open);
        }
        /* Report to the driver: rc, aborted, acks, refused, first. */
        uint64_t out[7] = {(uint64_t)rc,       aborted,           o.n_ack,
                           o.n_refused,        (uint64_t)o.first, freed,
                           (uint64_t)full_open};
        if (write(rp[1], out, sizeof(out)) != (ssize_t)sizeof(out))
            rc = 1;
        if (rc != 0)
            fprintf(stderr, "diskfull: %s %s gate=%s: FAILED: %s\n",
                    fs == FS_TMPFS ? "tmpfs" : "ext4", mode_names[m],
                    gate ? "on" : "off", msg);
        umount2(mnt, MNT_DETACH);
        _exit(rc);
    }
    close(rp[1]);
    uint64_t out[7] = {0};
    ssize_t got = runner > 0 ? read(rp[0], out, sizeof(out)) : -1;
    close(rp[0]);
    int st = 0;
    if (runner > 0)
        waitpid(runner, &st, 0);
    rmdir(mnt);
    unlink(img);
    if (got != (ssize_t)sizeof(out)) {
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        res.failed = code >= 20 && code <= 23 ? 2 : 1;
        if (res.failed == 1)
            fprintf(stderr, "diskfull: %s %s gate=%s: the run died (%d)\n",
                    fs == FS_TMPFS ? "tmpfs" : "ext4", mode_names[m],
                    gate ? "on" : "off", code);
        return res;
    }
    res.failed = out[0] != 0;
    res.aborted = out[1] != 0;
    res.acks = out[2];
    res.refused = out[3];
    res.first = (troupe_err)out[4];
    res.freed = out[5];
    res.full_open = (troupe_err)out[6];
    res.secs = now_s() - t0;
    return res;
}

/* Whether this process may make mount namespaces and mount a tmpfs. */
static bool
can_mount(fs_kind fs, unsigned size_mib, const char **why)
{
    if (geteuid() != 0) {
        *why = "needs root (a mount namespace and tmpfs / loop mounts)";
        return false;
    }
    char mnt[] = "/tmp/troupe-diskfull-probe-XXXXXX";
    if (mkdtemp(mnt) == NULL) {
        *why = "mkdtemp failed";
        return false;
    }
    char img[sizeof(mnt) + 8];
    snprintf(img, sizeof(img), "%s.img", mnt);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 ||
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
            _exit(1);
        if (mount_fs(fs, mnt, img, size_mib) != 0)
            _exit(2);
        umount2(mnt, MNT_DETACH);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    rmdir(mnt);
    unlink(img);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 3;
    *why = code == 1 ? "mount namespaces are not allowed here"
           : code == 2
               ? (fs == FS_TMPFS ? "cannot mount a tmpfs"
                                 : "cannot make and loop-mount an ext4 image "
                                   "(mkfs.ext4, /dev/loop*)")
               : "the probe failed";
    return code == 0;
}

/* ThreadSanitizer makes a pass take four times as long (about 270 s):
 * there, without --fs, tmpfs only. */
#if defined(__SANITIZE_THREAD__)
#define DEFAULT_FS_HI FS_TMPFS
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DEFAULT_FS_HI FS_TMPFS
#endif
#endif
#ifndef DEFAULT_FS_HI
#define DEFAULT_FS_HI FS_EXT4
#endif

int
main(int argc, char **argv)
{
    int passes = 1;
    int fs_lo = FS_TMPFS, fs_hi = DEFAULT_FS_HI;
    int gate_lo = 0, gate_hi = 1;
    int mode_lo = 0, mode_hi = M_COUNT - 1;
    unsigned size_mib = 48;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(a, "--passes") == 0) {
            passes = atoi(v);
            i++;
        } else if (strcmp(a, "--fs") == 0) {
            fs_lo = strcmp(v, "ext4") == 0 ? FS_EXT4 : FS_TMPFS;
            fs_hi = strcmp(v, "tmpfs") == 0 ? FS_TMPFS : FS_EXT4;
            i++;
        } else if (strcmp(a, "--gate") == 0) {
            gate_lo = strcmp(v, "on") == 0 ? 1 : 0;
            gate_hi = strcmp(v, "off") == 0 ? 0 : 1;
            i++;
        } else if (strcmp(a, "--mode") == 0) {
            if (strcmp(v, "all") != 0) {
                int k = 0;
                while (k < M_COUNT && strcmp(v, mode_names[k]) != 0)
                    k++;
                if (k == M_COUNT) {
                    fprintf(stderr, "diskfull: unknown mode %s\n", v);
                    return 2;
                }
                mode_lo = mode_hi = k;
            }
            i++;
        } else if (strcmp(a, "--size-mib") == 0) {
            size_mib = (unsigned)atoi(v);
            i++;
        } else {
            fprintf(stderr,
                    "usage: diskfull [--passes N] [--fs tmpfs|ext4|both] "
                    "[--gate on|off|both] [--mode NAME|all] [--size-mib "
                    "M]\n");
            return 2;
        }
    }
    const char *why;
    if (!can_mount(FS_TMPFS, size_mib, &why)) {
        printf("diskfull: skipped: %s; run it as root (CI does)\n", why);
        return 77;
    }
    if (fs_hi == FS_EXT4 && !can_mount(FS_EXT4, size_mib, &why)) {
        fprintf(stderr, "diskfull: ext4 skipped: %s; tmpfs only\n", why);
        fs_hi = FS_TMPFS;
        if (fs_lo == FS_EXT4) {
            printf("diskfull: skipped: %s\n", why);
            return 77;
        }
    }
    int runs = 0, failed = 0, aborted = 0;
    double t0 = now_s();
    for (int pass = 0; pass < passes; pass++) {
        for (int fs = fs_lo; fs <= fs_hi; fs++) {
            for (int g = gate_lo; g <= gate_hi; g++) {
                for (int m = mode_lo; m <= mode_hi; m++) {
                    run_result r =
                        one_run((fs_kind)fs, (mode)m, g != 0, size_mib);
                    if (r.failed == 2) {
                        fprintf(stderr, "diskfull: could not set up a run\n");
                        failed++;
                        continue;
                    }
                    runs++;
                    failed += r.failed;
                    aborted += r.aborted;
                    printf(
                        "diskfull: pass %d %-5s %-12s gate=%-3s %s: %llu "
                        "acked, %llu refused (first %s), full-disk open "
                        "%s, reopened with %.1f MiB free, %.1f s\n",
                        pass, fs == FS_TMPFS ? "tmpfs" : "ext4", mode_names[m],
                        g ? "on" : "off", r.failed ? "FAILED" : "ok",
                        (unsigned long long)r.acks,
                        (unsigned long long)r.refused, troupe_err_name(r.first),
                        troupe_err_name(r.full_open), (double)r.freed / MIB,
                        r.secs);
                    fflush(stdout);
                }
            }
        }
    }
    printf("diskfull: %d runs on %u MiB filesystems, %d failed, %d aborted, "
           "%.0f s\n",
           runs, size_mib, failed, aborted, now_s() - t0);
    return failed == 0 ? 0 : 1;
}
