/*
 * LD_PRELOAD power-loss shim: records, for one directory, what a power loss
 * would leave of it, so that a crash test can SIGKILL the process and then
 * roll the directory back to exactly that (tests/crash/powerloss.h gives
 * the journal format; powerloss_restore applies it).
 *
 * Model (the strict POSIX one):
 *  - File content is durable only at a successful fsync/fdatasync of that
 *    file (or a write to an O_SYNC/O_DSYNC descriptor): the durable content
 *    is then the file's whole current content. sync_file_range is not a
 *    durability point (it flushes no metadata and no disk cache), nor is
 *    close.
 *  - A directory entry (create, rename, unlink) is durable only at a
 *    successful fsync of the directory: the durable directory is then the
 *    directory's current listing. A file whose name is durable but whose
 *    content was never synced comes back empty.
 *  - Everything else is dropped: unsynced appends, overwrites, truncations,
 *    renames and deletions.
 * Not seen: writes through mmap, stdio's own writes (glibc calls its
 * internal write, not ours: such appends are still caught at the next
 * fsync because the copy always extends to the current end of file),
 * direct I/O and io_uring submissions, link(), subdirectories.
 * RocksDB 7.8.3 as troupe opens it uses none of these for data
 * (allow_mmap_writes, use_direct_io_for_flush_and_compaction and
 * recycle_log_file_num are off by default): it writes with write/pwrite,
 * syncs with fdatasync/fsync and the directory with fsync, and renames
 * CURRENT into place.
 *
 * Implementation: correct rather than fast. One process-wide mutex covers
 * every intercepted call on a watched file, the real call included, so a
 * sync's copy never races a write to the same file. Per file we keep the
 * lowest offset written since its last sync; a sync copies from there (or
 * from the end of the previous copy, if lower) to the current end into the
 * journal, then truncates the copy to the file's size. A SIGKILL in the
 * middle of that copy leaves a partly updated copy, which a power loss in
 * the middle of a real fsync may leave too. The shim never calls an
 * intercepted function itself (only real_*), because the mutex is not
 * recursive.
 *
 * Descriptors: fd_state[fd] is 0 (not looked at yet), -1 (not a watched
 * file) or a fid. It is reset at every close we see and checked against
 * the inode at every use (a descriptor closed by fclose inside glibc is not
 * seen), so a reused descriptor number never inherits a stale file.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "powerloss.h"

#define FD_MAX 65536
#define MAX_FILES 65536
#define PATH_LEN 4096
#define NAME_PATH (PATH_LEN + 512)
#define CLEAN INT64_MAX

typedef struct plfile {
    dev_t dev;
    ino_t ino;
    int linked;      /* has a name in the live directory */
    int durable;     /* named in the durable directory */
    int64_t dirty;   /* lowest offset changed since the last sync */
    int64_t shadow;  /* size of the journal copy; -1: none */
    int sync_writes; /* opened O_SYNC/O_DSYNC: every write syncs */
} plfile;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int active;
static char dir[PATH_LEN];
static size_t dir_len;
static char journal[PATH_LEN];
static plfile files[MAX_FILES]; /* index = fid; 0 unused */
static int nfiles = 1;
static int fd_state[FD_MAX];

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*creat_fn)(const char *, mode_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef int (*fsync_fn)(int);
typedef int (*sfr_fn)(int, off_t, off_t, unsigned int);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*ftruncate_fn)(int, off_t);
typedef int (*fallocate_fn)(int, int, off_t, off_t);
typedef int (*close_fn)(int);
typedef int (*unlink_fn)(const char *);
typedef int (*unlinkat_fn)(int, const char *, int);

static open_fn real_open, real_open64;
static openat_fn real_openat, real_openat64;
static creat_fn real_creat, real_creat64;
static write_fn real_write;
static pwrite_fn real_pwrite, real_pwrite64;
static writev_fn real_writev;
static pwritev_fn real_pwritev, real_pwritev64;
static fsync_fn real_fsync, real_fdatasync;
static sfr_fn real_sync_file_range;
static rename_fn real_rename;
static renameat_fn real_renameat;
static ftruncate_fn real_ftruncate, real_ftruncate64;
static fallocate_fn real_fallocate, real_fallocate64;
static close_fn real_close;
static unlink_fn real_unlink;
static unlinkat_fn real_unlinkat;

static void
resolve(void)
{
#define R(name) real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)
    R(open);
    R(open64);
    R(openat);
    R(openat64);
    R(creat);
    R(creat64);
    R(write);
    R(pwrite);
    R(pwrite64);
    R(writev);
    R(pwritev);
    R(pwritev64);
    R(fsync);
    R(fdatasync);
    R(sync_file_range);
    R(rename);
    R(renameat);
    R(ftruncate);
    R(ftruncate64);
    R(fallocate);
    R(fallocate64);
    R(close);
    R(unlink);
    R(unlinkat);
#undef R
}

/* A line on stderr without stdio, then abort: the model is broken and
 * the test must not go on as if it held. */
static void
die(const char *what)
{
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "powerloss_shim: %s: %s\n", what,
                     strerror(errno));
    if (n > 0 && real_write != NULL)
        (void)real_write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : 0);
    abort();
}

static void
jpath(char *out, const char *name)
{
    snprintf(out, NAME_PATH, "%s/%s", journal, name);
}

static void
fpath(char *out, int fid)
{
    snprintf(out, NAME_PATH, "%s/f%d", journal, fid);
}

static void
write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = real_write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("journal write");
        c += w;
        n -= (size_t)w;
    }
}

/* Copies [from, end of src) into the journal copy of fid at the same
 * offsets, then cuts the copy to src's size. */
static void
copy_into_shadow(int fid, int src, int64_t from)
{
    struct stat st;
    if (fstat(src, &st) != 0)
        die("fstat source");
    char p[NAME_PATH];
    fpath(p, fid);
    int dst = real_open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (dst < 0)
        die("open journal copy");
    if (from < 0)
        from = 0;
    char buf[65536];
    int64_t off = from;
    while (off < (int64_t)st.st_size) {
        ssize_t r = pread(src, buf, sizeof(buf), off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            die("pread source");
        if (r == 0)
            break;
        ssize_t w = real_pwrite(dst, buf, (size_t)r, off);
        if (w != r)
            die("pwrite journal copy");
        off += r;
    }
    if (real_ftruncate(dst, off) != 0)
        die("truncate journal copy");
    real_close(dst);
    files[fid].shadow = off;
    files[fid].dirty = CLEAN;
}

static int
find_ino(dev_t dev, ino_t ino)
{
    for (int i = 1; i < nfiles; i++) {
        if (files[i].linked && files[i].dev == dev && files[i].ino == ino)
            return i;
    }
    return 0;
}

static int
new_file(dev_t dev, ino_t ino)
{
    if (nfiles >= MAX_FILES) {
        errno = ENFILE;
        die("too many files");
    }
    int fid = nfiles++;
    files[fid] =
        (plfile){.dev = dev, .ino = ino, .linked = 1, .dirty = 0, .shadow = -1};
    return fid;
}

static int
under_dir(const char *path)
{
    return strncmp(path, dir, dir_len) == 0 &&
           (path[dir_len] == '/' || path[dir_len] == '\0');
}

/* Whether path (or a bare name) is PL_UNTRACKED's. */
static int
untracked(const char *path)
{
    const char *slash = strrchr(path, '/');
    return strcmp(slash != NULL ? slash + 1 : path, PL_UNTRACKED) == 0;
}

static int
fd_path(int fd, char *out)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_LEN - 1);
    if (n < 0)
        return -1;
    out[n] = '\0';
    return 0;
}

/* The fid of a watched regular file open on fd, else 0. Under mu. */
static int
fd_fid(int fd)
{
    if (fd < 0 || fd >= FD_MAX)
        return 0;
    struct stat st;
    int s = fd_state[fd];
    if (s > 0) {
        if (fstat(fd, &st) == 0 && st.st_dev == files[s].dev &&
            st.st_ino == files[s].ino)
            return s;
        s = 0;
    }
    if (s < 0)
        return 0;
    char p[NAME_PATH];
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fd_path(fd, p) != 0 ||
        !under_dir(p) || untracked(p)) {
        fd_state[fd] = -1;
        return 0;
    }
    int fid = find_ino(st.st_dev, st.st_ino);
    if (fid == 0)
        fid = new_file(st.st_dev, st.st_ino);
    fd_state[fd] = fid;
    return fid;
}

static void
mark(int fid, int64_t off)
{
    if (off < files[fid].dirty)
        files[fid].dirty = off < 0 ? 0 : off;
}

/* Makes fid's current content durable (after a successful real sync). */
static void
sync_fid(int fid, int fd)
{
    int64_t from = files[fid].dirty;
    if (files[fid].shadow < from)
        from = files[fid].shadow < 0 ? 0 : files[fid].shadow;
    char p[NAME_PATH];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    int src = real_open(p, O_RDONLY | O_CLOEXEC);
    if (src < 0)
        die("reopen for copy");
    copy_into_shadow(fid, src, from);
    real_close(src);
}

/* Writes the durable directory: the live listing of dir. Under mu. */
static void
sync_dir(void)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        die("opendir");
    for (int i = 1; i < nfiles; i++)
        files[i].durable = 0;
    char tmp[NAME_PATH], final[NAME_PATH];
    jpath(tmp, PL_NAMES_TMP);
    jpath(final, PL_NAMES);
    int out = real_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0)
        die("open names.tmp");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || untracked(e->d_name))
            continue;
        int fid = find_ino(st.st_dev, st.st_ino);
        if (fid == 0)
            fid = new_file(st.st_dev, st.st_ino);
        files[fid].durable = 1;
        char line[NAME_PATH];
        int n = snprintf(line, sizeof(line), "%d %s\n", fid, e->d_name);
        write_all(out, line, (size_t)n);
    }
    closedir(d);
    real_close(out);
    if (real_rename(tmp, final) != 0)
        die("rename names");
    /* Copies nobody can name again are garbage. */
    for (int i = 1; i < nfiles; i++) {
        if (!files[i].durable && !files[i].linked && files[i].shadow >= 0) {
            char p[NAME_PATH];
            fpath(p, i);
            real_unlink(p);
            files[i].shadow = -1;
        }
    }
}

static void
mkdir_p(const char *p)
{
    char b[PATH_LEN];
    snprintf(b, sizeof(b), "%s", p);
    for (char *s = b + 1; *s != '\0'; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(b, 0755);
            *s = '/';
        }
    }
    if (mkdir(b, 0755) != 0 && errno != EEXIST)
        die("mkdir journal");
}

/* Empties the journal, takes every file in dir as durable, and writes
 * names last (powerloss.h: no names means nothing to restore). */
__attribute__((constructor)) static void
shim_init(void)
{
    resolve();
    const char *d = getenv(PL_ENV_DIR);
    if (d == NULL || *d == '\0')
        return;
    if (realpath(d, dir) == NULL)
        die("realpath " PL_ENV_DIR);
    dir_len = strlen(dir);
    const char *j = getenv(PL_ENV_JOURNAL);
    if (j != NULL && *j != '\0')
        snprintf(journal, sizeof(journal), "%s", j);
    else
        snprintf(journal, sizeof(journal), "%s" PL_JOURNAL_SUFFIX, dir);
    if (strlen(journal) + 32 >= PATH_LEN || dir_len + 300 >= PATH_LEN) {
        errno = ENAMETOOLONG;
        die("journal or directory path");
    }
    mkdir_p(journal);
    char p[NAME_PATH];
    jpath(p, PL_NAMES);
    if (real_unlink(p) != 0 && errno != ENOENT)
        die("unlink names");
    DIR *jd = opendir(journal);
    if (jd == NULL)
        die("opendir journal");
    struct dirent *e;
    while ((e = readdir(jd)) != NULL) {
        if (e->d_name[0] == 'f' || strcmp(e->d_name, PL_NAMES_TMP) == 0) {
            jpath(p, e->d_name);
            real_unlink(p);
        }
    }
    closedir(jd);
    DIR *dd = opendir(dir);
    if (dd == NULL)
        die("opendir " PL_ENV_DIR);
    while ((e = readdir(dd)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(dd), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || untracked(e->d_name))
            continue;
        int fid = new_file(st.st_dev, st.st_ino);
        int src = openat(dirfd(dd), e->d_name, O_RDONLY | O_CLOEXEC);
        if (src < 0)
            die("open baseline file");
        copy_into_shadow(fid, src, 0);
        real_close(src);
    }
    closedir(dd);
    sync_dir();
    active = 1;
}

/* ---- opens -------------------------------------------------------------- */

/* After a successful open of fd: classify it, and note O_TRUNC. */
static int
opened(int fd, int flags)
{
    if (fd < 0 || !active)
        return fd;
    int saved = errno;
    pthread_mutex_lock(&mu);
    if (fd < FD_MAX)
        fd_state[fd] = 0;
    int fid = fd_fid(fd);
    if (fid > 0) {
        if (flags & O_TRUNC)
            mark(fid, 0);
        files[fid].sync_writes = (flags & (O_SYNC | O_DSYNC)) != 0;
    }
    pthread_mutex_unlock(&mu);
    errno = saved;
    return fd;
}

static mode_t
mode_arg(int flags, va_list ap)
{
    return ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
               ? (mode_t)va_arg(ap, int)
               : 0;
}

int
open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    if (real_open == NULL)
        resolve();
    return opened(real_open(path, flags, m), flags);
}

int
open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    if (real_open64 == NULL)
        resolve();
    return opened(real_open64(path, flags, m), flags);
}

int
openat(int dfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    if (real_openat == NULL)
        resolve();
    return opened(real_openat(dfd, path, flags, m), flags);
}

int
openat64(int dfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    if (real_openat64 == NULL)
        resolve();
    return opened(real_openat64(dfd, path, flags, m), flags);
}

int
creat(const char *path, mode_t m)
{
    if (real_creat == NULL)
        resolve();
    return opened(real_creat(path, m), O_CREAT | O_WRONLY | O_TRUNC);
}

int
creat64(const char *path, mode_t m)
{
    if (real_creat64 == NULL)
        resolve();
    return opened(real_creat64(path, m), O_CREAT | O_WRONLY | O_TRUNC);
}

/* ---- writes ------------------------------------------------------------- */

/* Offset a write() at the file position will land at. */
static int64_t
cur_off(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_APPEND)) {
        struct stat st;
        return fstat(fd, &st) == 0 ? (int64_t)st.st_size : 0;
    }
    off_t o = lseek(fd, 0, SEEK_CUR);
    return o < 0 ? 0 : (int64_t)o;
}

/* Runs one write under mu when fd is watched; off < 0: at the position. */
#define WATCHED_WRITE(fd, off, call)                                           \
    do {                                                                       \
        if (!active)                                                           \
            return call;                                                       \
        pthread_mutex_lock(&mu);                                               \
        int fid_ = fd_fid(fd);                                                 \
        if (fid_ == 0) {                                                       \
            pthread_mutex_unlock(&mu);                                         \
            return call;                                                       \
        }                                                                      \
        mark(fid_, (off) >= 0 ? (int64_t)(off) : cur_off(fd));                 \
        ssize_t r_ = call;                                                     \
        int e_ = errno;                                                        \
        if (r_ > 0 && files[fid_].sync_writes)                                 \
            sync_fid(fid_, fd);                                                \
        pthread_mutex_unlock(&mu);                                             \
        errno = e_;                                                            \
        return r_;                                                             \
    } while (0)

ssize_t
write(int fd, const void *buf, size_t n)
{
    if (real_write == NULL)
        resolve();
    WATCHED_WRITE(fd, -1, real_write(fd, buf, n));
}

ssize_t
pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (real_pwrite == NULL)
        resolve();
    WATCHED_WRITE(fd, off, real_pwrite(fd, buf, n, off));
}

ssize_t
pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (real_pwrite64 == NULL)
        resolve();
    WATCHED_WRITE(fd, off, real_pwrite64(fd, buf, n, off));
}

ssize_t
writev(int fd, const struct iovec *iov, int cnt)
{
    if (real_writev == NULL)
        resolve();
    WATCHED_WRITE(fd, -1, real_writev(fd, iov, cnt));
}

ssize_t
pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    if (real_pwritev == NULL)
        resolve();
    WATCHED_WRITE(fd, off, real_pwritev(fd, iov, cnt, off));
}

ssize_t
pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    if (real_pwritev64 == NULL)
        resolve();
    WATCHED_WRITE(fd, off, real_pwritev64(fd, iov, cnt, off));
}

static int
size_change(int fd, int64_t len, int (*call)(int, off_t), off_t arg)
{
    if (!active)
        return call(fd, arg);
    pthread_mutex_lock(&mu);
    int fid = fd_fid(fd);
    if (fid > 0) {
        struct stat st;
        int64_t size = fstat(fd, &st) == 0 ? (int64_t)st.st_size : 0;
        mark(fid, len < size ? len : size);
    }
    int r = call(fd, arg);
    int e = errno;
    pthread_mutex_unlock(&mu);
    errno = e;
    return r;
}

int
ftruncate(int fd, off_t len)
{
    if (real_ftruncate == NULL)
        resolve();
    return size_change(fd, len, real_ftruncate, len);
}

int
ftruncate64(int fd, off_t len)
{
    if (real_ftruncate64 == NULL)
        resolve();
    return size_change(fd, len, real_ftruncate64, len);
}

/* FALLOC_FL_KEEP_SIZE alone (RocksDB's preallocation) changes neither
 * size nor content; anything else may change both from `off` on. */
static int
do_fallocate(fallocate_fn call, int fd, int mode, off_t off, off_t len)
{
    if (!active || mode == 1 /* FALLOC_FL_KEEP_SIZE */)
        return call(fd, mode, off, len);
    pthread_mutex_lock(&mu);
    int fid = fd_fid(fd);
    if (fid > 0) {
        struct stat st;
        int64_t size = fstat(fd, &st) == 0 ? (int64_t)st.st_size : 0;
        mark(fid, off < size ? off : size);
    }
    int r = call(fd, mode, off, len);
    int e = errno;
    pthread_mutex_unlock(&mu);
    errno = e;
    return r;
}

int
fallocate(int fd, int mode, off_t off, off_t len)
{
    if (real_fallocate == NULL)
        resolve();
    return do_fallocate(real_fallocate, fd, mode, off, len);
}

int
fallocate64(int fd, int mode, off_t off, off_t len)
{
    if (real_fallocate64 == NULL)
        resolve();
    return do_fallocate(real_fallocate64, fd, mode, off, len);
}

/* ---- syncs -------------------------------------------------------------- */

static int
do_sync(fsync_fn call, int fd)
{
    if (!active)
        return call(fd);
    pthread_mutex_lock(&mu);
    int r = call(fd);
    int e = errno;
    if (r == 0) {
        struct stat st;
        char p[NAME_PATH];
        if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (fd_path(fd, p) == 0 && strcmp(p, dir) == 0)
                sync_dir();
        } else {
            int fid = fd_fid(fd);
            if (fid > 0)
                sync_fid(fid, fd);
        }
    }
    pthread_mutex_unlock(&mu);
    errno = e;
    return r;
}

int
fsync(int fd)
{
    if (real_fsync == NULL)
        resolve();
    return do_sync(real_fsync, fd);
}

int
fdatasync(int fd)
{
    if (real_fdatasync == NULL)
        resolve();
    return do_sync(real_fdatasync, fd);
}

/* Passed through: not a durability point (see the design note). */
int
sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
    if (real_sync_file_range == NULL)
        resolve();
    return real_sync_file_range(fd, off, n, flags);
}

/* ---- names -------------------------------------------------------------- */

/* The watched file `path` names, if its last link goes away with this
 * call, stops being linked (its inode number may then be reused). */
static void
drop_name(int dfd, const char *path, struct stat *st, int have)
{
    if (!have)
        return;
    int fid = find_ino(st->st_dev, st->st_ino);
    if (fid > 0 && st->st_nlink <= 1)
        files[fid].linked = 0;
    (void)dfd;
    (void)path;
}

int
rename(const char *from, const char *to)
{
    if (real_rename == NULL)
        resolve();
    if (!active)
        return real_rename(from, to);
    pthread_mutex_lock(&mu);
    struct stat st;
    int have = lstat(to, &st) == 0 && S_ISREG(st.st_mode);
    int r = real_rename(from, to);
    int e = errno;
    if (r == 0) {
        struct stat sf;
        /* rename onto itself (same inode) unlinks nothing */
        if (!(have && lstat(to, &sf) == 0 && sf.st_ino == st.st_ino &&
              sf.st_dev == st.st_dev))
            drop_name(AT_FDCWD, to, &st, have);
    }
    pthread_mutex_unlock(&mu);
    errno = e;
    return r;
}

int
renameat(int fdf, const char *from, int fdt, const char *to)
{
    if (real_renameat == NULL)
        resolve();
    if (!active)
        return real_renameat(fdf, from, fdt, to);
    pthread_mutex_lock(&mu);
    struct stat st;
    int have =
        fstatat(fdt, to, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    int r = real_renameat(fdf, from, fdt, to);
    int e = errno;
    if (r == 0) {
        struct stat sf;
        if (!(have && fstatat(fdt, to, &sf, AT_SYMLINK_NOFOLLOW) == 0 &&
              sf.st_ino == st.st_ino && sf.st_dev == st.st_dev))
            drop_name(fdt, to, &st, have);
    }
    pthread_mutex_unlock(&mu);
    errno = e;
    return r;
}

int
unlink(const char *path)
{
    if (real_unlink == NULL)
        resolve();
    if (!active)
        return real_unlink(path);
    pthread_mutex_lock(&mu);
    struct stat st;
    int have = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
    int r = real_unlink(path);
    int e = errno;
    if (r == 0)
        drop_name(AT_FDCWD, path, &st, have);
    pthread_mutex_unlock(&mu);
    errno = e;
    return r;
}

int
unlinkat(int dfd, const char *path, int flags)
{
    if (real_unlinkat == NULL)
        resolve();
    if (!active)
        return real_unlinkat(dfd, path, flags);
    pthread_mutex_lock(&mu);
    struct stat st;
    int have = fstatat(dfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISREG(st.st_mode);
    int r = real_unlinkat(dfd, path, flags);
    int e = errno;
    if (r == 0)
        drop_name(dfd, path, &st, have);
    pthread_mutex_unlock(&mu);
    errno = e;
    return r;
}

int
close(int fd)
{
    if (real_close == NULL)
        resolve();
    if (!active)
        return real_close(fd);
    pthread_mutex_lock(&mu);
    if (fd >= 0 && fd < FD_MAX)
        fd_state[fd] = 0;
    int r = real_close(fd);
    int e = errno;
    pthread_mutex_unlock(&mu);
    errno = e;
    return r;
}
