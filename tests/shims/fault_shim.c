/*
 * LD_PRELOAD shim that makes sync and write calls fail with EIO after N
 * calls (contract in fault_shim.h). It stands in for a dying disk so tests
 * can check the engine's failure semantics (EUNKNOWN, then fail-stop)
 * against the real RocksDB, which reaches these calls through libc's PLT.
 *
 * Design: pass-through unless armed. Arming writes the path prefix, then
 * publishes the mask with a release store; callers read the mask with an
 * acquire load, so a thread that sees the mask sees the prefix. Counting is
 * one atomic decrement per matching call. The shim must never call an
 * intercepted function itself (no stdio).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fault_shim.h"

#define PREFIX_MAX 1024

static _Atomic int armed_kinds;
static _Atomic long countdown;
static _Atomic long hits;
static _Atomic int fail_errno = EIO;
static char prefix[PREFIX_MAX];
static size_t prefix_len;

void
troupe_fault_arm(int kinds, long after, const char *path_prefix, int err);
void
troupe_fault_disarm(void);
long
troupe_fault_hits(void);

void
troupe_fault_arm(int kinds, long after, const char *path_prefix, int err)
{
    atomic_store(&armed_kinds, 0);
    size_t n = path_prefix != NULL ? strlen(path_prefix) : 0;
    if (n >= PREFIX_MAX)
        n = PREFIX_MAX - 1;
    memcpy(prefix, path_prefix != NULL ? path_prefix : "", n);
    prefix[n] = '\0';
    prefix_len = n;
    atomic_store(&countdown, after < 0 ? 0 : after);
    atomic_store(&hits, 0);
    atomic_store(&fail_errno, err > 0 ? err : EIO);
    atomic_store_explicit(&armed_kinds, kinds, memory_order_release);
}

void
troupe_fault_disarm(void)
{
    atomic_store(&armed_kinds, 0);
}

long
troupe_fault_hits(void)
{
    return atomic_load(&hits);
}

static long
env_long(const char *name)
{
    const char *s = getenv(name);
    return s != NULL && *s != '\0' ? strtol(s, NULL, 10) : -1;
}

__attribute__((constructor)) static void
shim_init(void)
{
    long sync_after = env_long("TROUPE_FAULT_SYNC_AFTER");
    long write_after = env_long("TROUPE_FAULT_WRITE_AFTER");
    long err = env_long("TROUPE_FAULT_ERRNO");
    int kinds = (sync_after >= 0 ? TROUPE_FAULT_SYNC : 0) |
                (write_after >= 0 ? TROUPE_FAULT_WRITE : 0);
    if (kinds == 0)
        return;
    /* One countdown serves both kinds; the smaller value wins. */
    long after = sync_after < 0                                ? write_after
                 : write_after < 0 || sync_after < write_after ? sync_after
                                                               : write_after;
    troupe_fault_arm(kinds, after, getenv("TROUPE_FAULT_PATH"),
                     err > 0 ? (int)err : EIO);
}

static int
path_matches(int fd)
{
    if (prefix_len == 0)
        return 1;
    char link[64], target[PREFIX_MAX + 1];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n < 0)
        return 0;
    target[n] = '\0';
    return strncmp(target, prefix, prefix_len) == 0;
}

/* True when this call must fail (errno is then set). */
static int
should_fail(int kind, int fd)
{
    int k = atomic_load_explicit(&armed_kinds, memory_order_acquire);
    if ((k & kind) == 0 || !path_matches(fd))
        return 0;
    long c = atomic_load(&countdown);
    while (c > 0) {
        if (atomic_compare_exchange_weak(&countdown, &c, c - 1))
            return 0;
    }
    atomic_fetch_add(&hits, 1);
    errno = atomic_load(&fail_errno);
    return 1;
}

/* The next definition of `name` (libc's), looked up once. */
#define REAL(name)                                                             \
    static name##_fn real_##name;                                              \
    if (real_##name == NULL)                                                   \
        real_##name = (name##_fn)dlsym(RTLD_NEXT, #name);

typedef int (*fsync_fn)(int);
typedef int (*fdatasync_fn)(int);
typedef int (*syncfs_fn)(int);
typedef int (*sync_file_range_fn)(int, off_t, off_t, unsigned int);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);

int
fsync(int fd)
{
    REAL(fsync)
    return should_fail(TROUPE_FAULT_SYNC, fd) ? -1 : real_fsync(fd);
}

int
fdatasync(int fd)
{
    REAL(fdatasync)
    return should_fail(TROUPE_FAULT_SYNC, fd) ? -1 : real_fdatasync(fd);
}

int
syncfs(int fd)
{
    REAL(syncfs)
    return should_fail(TROUPE_FAULT_SYNC, fd) ? -1 : real_syncfs(fd);
}

int
sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
    REAL(sync_file_range)
    return should_fail(TROUPE_FAULT_SYNC, fd)
               ? -1
               : real_sync_file_range(fd, off, n, flags);
}

ssize_t
write(int fd, const void *buf, size_t n)
{
    REAL(write)
    return should_fail(TROUPE_FAULT_WRITE, fd) ? -1 : real_write(fd, buf, n);
}

ssize_t
pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(pwrite)
    return should_fail(TROUPE_FAULT_WRITE, fd) ? -1
                                               : real_pwrite(fd, buf, n, off);
}

ssize_t
pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    REAL(pwrite64)
    return should_fail(TROUPE_FAULT_WRITE, fd) ? -1
                                               : real_pwrite64(fd, buf, n, off);
}

ssize_t
writev(int fd, const struct iovec *iov, int cnt)
{
    REAL(writev)
    return should_fail(TROUPE_FAULT_WRITE, fd) ? -1 : real_writev(fd, iov, cnt);
}

ssize_t
pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(pwritev)
    return should_fail(TROUPE_FAULT_WRITE, fd)
               ? -1
               : real_pwritev(fd, iov, cnt, off);
}
