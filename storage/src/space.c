/*
 * Free space: the gate that refuses writes before the filesystem is full,
 * and the reserve file that gives RocksDB room when it fills anyway.
 *
 * Why refuse early. When RocksDB itself meets ENOSPC the db is in trouble
 * whatever we do: its WAL write fails (the db goes fail-stop), a memtable
 * flush or compaction fails (a background error: writes stop), and a
 * reopen needs room for a new MANIFEST, OPTIONS file and WAL. Refusing our
 * own writes while the filesystem still has min_free bytes keeps that room
 * for RocksDB's background work, close and reopen, costs nothing that was
 * acknowledged, and needs no reopen: writes are accepted again as soon as
 * space is freed. A refused write is ENOSPC with nothing written.
 *
 * Cheap enough for every write. statvfs costs about a microsecond, the
 * group commit writes tens of thousands of times per second, and the space
 * does not change that fast. So a check leaves a budget, half of the bytes
 * above the threshold, and a deadline (RECHECK_NS); writes deduct their
 * size from the budget and only the write that exhausts it, or the first
 * after the deadline, calls statvfs again. Half, because a batch is
 * written twice before its WAL is deleted (WAL, then the flushed table
 * file). Near the threshold the budget shrinks and checks come closer
 * together; while refusing, the verdict is kept for LOW_RECHECK_NS.
 *
 * Hysteresis. The first write that would leave less than min_free is
 * refused, and from then on every write, until min_free plus an eighth
 * of it (at least 1 MiB) is available again: a small write cannot slip
 * in after a large one was refused, and a database at the threshold does
 * not flap between refusing and accepting.
 * Other processes filling the disk between two checks are what the
 * threshold and the reserve are for.
 *
 * The reserve. A file of reserve_bytes in the db directory, allocated
 * with posix_fallocate, that nothing uses. When RocksDB reports ENOSPC
 * (the gate was off, or something else filled the disk), it is deleted,
 * so that RocksDB's flush in progress, the close and the reopen find
 * room; the db is fail-stop then, so the next open makes it again. An
 * open that fails with ENOSPC deletes it and tries once more. After a
 * successful open (RocksDB's lock held: no other process uses the
 * directory) a reserve that is not whole (a power loss may leave it empty
 * or short) is made again, but only when the filesystem has room for it
 * twice over above min_free: a reserve never takes the last of the space
 * it is meant to give back.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "storage_int.h"
#include "troupe/alloc.h"

#define RECHECK_NS (100 * 1000000LL)
#define LOW_RECHECK_NS (10 * 1000000LL)

/* a + b, or UINT64_MAX: thresholds are the caller's and may be huge. */
static uint64_t
sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static int64_t
coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

troupe_err
troupe__space_init(troupe_space *s, const troupe_logger *log, const char *dir,
                   uint64_t min_free, uint64_t reserve_bytes)
{
    memset(s, 0, sizeof(*s));
    s->log = log;
    size_t n = strlen(dir);
    s->dir = troupe_strdup(dir);
    s->reserve_path = troupe_malloc(n + sizeof("/" TROUPE_RESERVE_FILE));
    if (s->dir == NULL || s->reserve_path == NULL) {
        troupe_free(s->dir);
        troupe_free(s->reserve_path);
        return TROUPE_ENOMEM;
    }
    memcpy(s->reserve_path, dir, n);
    memcpy(s->reserve_path + n, "/" TROUPE_RESERVE_FILE,
           sizeof("/" TROUPE_RESERVE_FILE));
    s->min_free = min_free;
    s->reserve_bytes = reserve_bytes;
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->next_ns, 0);
    atomic_init(&s->budget, 0);
    atomic_init(&s->low, false);
    atomic_init(&s->have_reserve, false);
    s->ready = true;
    return TROUPE_OK;
}

void
troupe__space_fini(troupe_space *s)
{
    if (!s->ready)
        return;
    pthread_mutex_destroy(&s->mu);
    troupe_free(s->dir);
    troupe_free(s->reserve_path);
    s->ready = false;
}

/* Bytes available to unprivileged writers, or -1 when statvfs fails. */
static int64_t
avail_bytes(const troupe_space *s)
{
    struct statvfs v;
    if (statvfs(s->dir, &v) != 0)
        return -1;
    return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
}

/* Whether the reserve file is there whole: reserve_bytes long and
 * allocated (a power loss may leave it empty, or short). */
static bool
reserve_whole(const troupe_space *s)
{
    struct stat st;
    return stat(s->reserve_path, &st) == 0 && S_ISREG(st.st_mode) &&
           (uint64_t)st.st_size == s->reserve_bytes &&
           (uint64_t)st.st_blocks * 512 >= s->reserve_bytes;
}

bool
troupe__space_release_for_open(troupe_space *s)
{
    pthread_mutex_lock(&s->mu);
    bool released = unlink(s->reserve_path) == 0;
    atomic_store(&s->have_reserve, false);
    pthread_mutex_unlock(&s->mu);
    if (released)
        troupe_log_fields(s->log, TROUPE_LOG_WARN, "storage",
                          (troupe_log_field[]){{"dir", s->dir}}, 1,
                          "open %s: no space left; the reserve file is "
                          "released and the open tried again",
                          s->dir);
    return released;
}

void
troupe__space_after_open(troupe_space *s)
{
    pthread_mutex_lock(&s->mu);
    bool whole = s->reserve_bytes > 0 && reserve_whole(s);
    atomic_store(&s->have_reserve, whole);
    if (whole) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    (void)unlink(s->reserve_path); /* none wanted, or a partial one */
    int64_t avail = avail_bytes(s);
    if (s->reserve_bytes == 0 || avail < 0 ||
        (uint64_t)avail <
            sat_add(s->min_free, sat_add(s->reserve_bytes, s->reserve_bytes))) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    int fd =
        open(s->reserve_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        int rc = posix_fallocate(fd, 0, (off_t)s->reserve_bytes);
        close(fd);
        if (rc == 0)
            atomic_store(&s->have_reserve, true);
        else
            (void)unlink(s->reserve_path);
    }
    pthread_mutex_unlock(&s->mu);
}

void
troupe__space_release(troupe_space *s)
{
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->have_reserve)) {
        if (unlink(s->reserve_path) == 0)
            troupe_log_fields(s->log, TROUPE_LOG_ERROR, "storage",
                              (troupe_log_field[]){{"dir", s->dir}}, 1,
                              "%s: RocksDB ran out of space; the reserve of "
                              "%llu bytes is released so that close and "
                              "reopen find room",
                              s->dir, (unsigned long long)s->reserve_bytes);
        atomic_store(&s->have_reserve, false);
    }
    pthread_mutex_unlock(&s->mu);
}

bool
troupe__space_room_for(troupe_space *s, uint64_t bytes)
{
    int64_t a = avail_bytes(s);
    return a >= 0 && (uint64_t)a >= sat_add(s->min_free, bytes);
}

/* What must be free beyond min_free to end a refusal: an eighth of it,
 * at least 1 MiB. */
static uint64_t
space_slack(const troupe_space *s)
{
    uint64_t slack = s->min_free / 8;
    return slack < (1u << 20) ? (1u << 20) : slack;
}

/* The statvfs path: one caller at a time; the others keep the verdict. */
static troupe_err
space_recheck(troupe_space *s, uint64_t bytes)
{
    if (pthread_mutex_trylock(&s->mu) != 0)
        return atomic_load(&s->low) ? TROUPE_ENOSPC : TROUPE_OK;
    int64_t avail = avail_bytes(s);
    bool was_low = atomic_load(&s->low);
    bool low;
    troupe_err e;
    if (avail < 0) {
        /* Cannot tell (the directory is gone?): do not refuse on a
         * guess; RocksDB's own errors still stop a failing disk. */
        low = false;
        e = TROUPE_OK;
        atomic_store(&s->budget, INT64_MAX / 2);
    } else {
        /* Refusing starts with the first write that does not fit above
         * min_free and lasts until min_free + slack is available: no
         * flapping between refused and accepted near the threshold, and
         * a small write cannot slip in after a large one was refused. */
        uint64_t a = (uint64_t)avail;
        uint64_t need = sat_add(s->min_free, was_low ? space_slack(s) : bytes);
        low = a < need;
        e = low ? TROUPE_ENOSPC : TROUPE_OK;
        uint64_t room = low ? 0 : a - s->min_free;
        room = room > bytes ? (room - bytes) / 2 : 0;
        atomic_store(&s->budget, room > INT64_MAX ? INT64_MAX : (int64_t)room);
    }
    atomic_store(&s->low, low);
    atomic_store(&s->next_ns,
                 coarse_ns() + (low ? LOW_RECHECK_NS : RECHECK_NS));
    /* Both edges at WARN: an operator who saw writes refused must also
     * see them accepted again. */
    if (low != was_low)
        troupe_log_fields(s->log, TROUPE_LOG_WARN, "storage",
                          (troupe_log_field[]){{"dir", s->dir}}, 1,
                          low ? "%s: %lld bytes available, at "
                                "min_free_bytes %llu: writes are refused "
                                "(ENOSPC) until space is freed"
                              : "%s: %lld bytes available again "
                                "(min_free_bytes %llu): writes are accepted",
                          s->dir, (long long)avail,
                          (unsigned long long)s->min_free);
    pthread_mutex_unlock(&s->mu);
    return e;
}

bool
troupe__space_refusing(troupe_space *s)
{
    if (!atomic_load_explicit(&s->low, memory_order_relaxed))
        return false;
    return troupe__space_admit(s, 0) == TROUPE_ENOSPC;
}

troupe_err
troupe__space_admit(troupe_space *s, uint64_t bytes)
{
    if (s->min_free == 0)
        return TROUPE_OK;
    int64_t now = coarse_ns();
    if (now < atomic_load_explicit(&s->next_ns, memory_order_relaxed)) {
        if (atomic_load_explicit(&s->low, memory_order_relaxed))
            return TROUPE_ENOSPC;
        /* Size 0 (a submit, a family creation) only asks for the
         * verdict: no read-modify-write for submitters to contend on. */
        int64_t b = (int64_t)(bytes > INT64_MAX ? INT64_MAX : bytes);
        if (b == 0 ||
            atomic_fetch_sub_explicit(&s->budget, b, memory_order_relaxed) >= b)
            return TROUPE_OK;
    }
    return space_recheck(s, bytes);
}
