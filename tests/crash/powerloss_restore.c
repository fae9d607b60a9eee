/*
 * The restore half of the power-loss model (powerloss.h): after the
 * process that ran under the shim is dead, make the directory exactly what
 * its journal says survived. Runs without the shim.
 *
 * Order: every durable name is first rewritten through a temporary file and
 * a rename, then the files with no durable name are deleted, then the
 * journal is emptied (names first). A restore killed half-way can be run
 * again: the names and copies it reads are only removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "powerloss.h"

#define PATH_LEN 4096
#define NAME_PATH (PATH_LEN + 512)

typedef struct entry {
    int fid;
    char *name;
} entry;

static int
fail(const char *what, const char *path)
{
    int e = errno;
    fprintf(stderr, "powerloss_restore: %s %s: %s\n", what, path, strerror(e));
    errno = e;
    return -1;
}

static int
copy_file(const char *src, const char *dst, uint64_t *size)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0 && errno != ENOENT)
        return fail("open", src);
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        if (in >= 0)
            close(in);
        return fail("create", dst);
    }
    char buf[65536];
    *size = 0;
    while (in >= 0) {
        ssize_t r = read(in, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            close(in);
            close(out);
            return fail("read", src);
        }
        if (r == 0)
            break;
        if (write(out, buf, (size_t)r) != r) {
            close(in);
            close(out);
            return fail("write", dst);
        }
        *size += (uint64_t)r;
    }
    if (in >= 0)
        close(in);
    close(out);
    return 0;
}

/* Byte-compares two files (1: equal). */
static int
same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa != NULL && fb != NULL;
    while (eq) {
        int ca = getc(fa), cb = getc(fb);
        if (ca != cb)
            eq = 0;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return eq;
}

static uint64_t
dir_bytes(const char *dir)
{
    uint64_t n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
            n += (uint64_t)st.st_size;
    }
    closedir(d);
    return n;
}

int
pl_restore(const char *dir, const char *journal, pl_restore_stats *st)
{
    pl_restore_stats local;
    if (st == NULL)
        st = &local;
    memset(st, 0, sizeof(*st));
    char jbuf[PATH_LEN], p[NAME_PATH], q[NAME_PATH], tmp[NAME_PATH];
    if (strlen(dir) + 32 >= PATH_LEN ||
        (journal != NULL && strlen(journal) + 32 >= PATH_LEN)) {
        errno = ENAMETOOLONG;
        return fail("path too long:", dir);
    }
    if (journal == NULL) {
        snprintf(jbuf, sizeof(jbuf), "%.4000s" PL_JOURNAL_SUFFIX, dir);
        journal = jbuf;
    }
    snprintf(p, sizeof(p), "%s/" PL_NAMES, journal);
    FILE *nf = fopen(p, "r");
    if (nf == NULL) {
        if (errno == ENOENT)
            return 0; /* never started: nothing was touched */
        return fail("open", p);
    }
    st->journal = 1;
    st->bytes_before = dir_bytes(dir);
    entry *v = NULL;
    size_t n = 0, cap = 0;
    char line[PATH_LEN + 32];
    int rc = 0;
    while (fgets(line, sizeof(line), nf) != NULL) {
        char *sp = strchr(line, ' ');
        size_t len = strlen(line);
        if (sp == NULL || len < 3 || line[len - 1] != '\n') {
            errno = EPROTO;
            rc = fail("malformed line in", p);
            break;
        }
        line[len - 1] = '\0';
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            v = realloc(v, cap * sizeof(*v));
            if (v == NULL)
                abort();
        }
        v[n].fid = atoi(line);
        v[n].name = strdup(sp + 1);
        n++;
    }
    fclose(nf);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        snprintf(q, sizeof(q), "%s/f%d", journal, v[i].fid);
        snprintf(p, sizeof(p), "%s/%s", dir, v[i].name);
        snprintf(tmp, sizeof(tmp), "%s/.pl-restore.tmp", dir);
        uint64_t size;
        if (copy_file(q, tmp, &size) != 0) {
            rc = -1;
            break;
        }
        st->files_kept++;
        if (!same_file(tmp, p))
            st->files_cut++;
        if (rename(tmp, p) != 0)
            rc = fail("rename onto", p);
    }
    DIR *d = rc == 0 ? opendir(dir) : NULL;
    if (rc == 0 && d == NULL)
        rc = fail("opendir", dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        struct stat s;
        if (fstatat(dirfd(d), e->d_name, &s, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(s.st_mode))
            continue;
        int named = 0;
        for (size_t i = 0; i < n && !named; i++)
            named = strcmp(v[i].name, e->d_name) == 0;
        if (!named) {
            if (unlinkat(dirfd(d), e->d_name, 0) != 0)
                rc = fail("unlink", e->d_name);
            st->files_gone++;
        }
    }
    if (d != NULL)
        closedir(d);
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
    if (rc != 0)
        return rc;
    st->bytes_after = dir_bytes(dir);
    /* Empty the journal, names first (see the header comment). */
    snprintf(p, sizeof(p), "%s/" PL_NAMES, journal);
    if (unlink(p) != 0)
        return fail("unlink", p);
    DIR *jd = opendir(journal);
    while (jd != NULL && (e = readdir(jd)) != NULL) {
        if (e->d_name[0] == 'f' || strcmp(e->d_name, PL_NAMES_TMP) == 0) {
            snprintf(p, sizeof(p), "%s/%s", journal, e->d_name);
            unlink(p);
        }
    }
    if (jd != NULL)
        closedir(jd);
    return 0;
}
