#include "fuzz_support.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void
fz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "property failed at %s:%d: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void
fz_err_in(const char *file, int line, const char *what, troupe_err e,
          const troupe_err *ok, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ok[i] == e)
            return;
    fz_fail(file, line, what, "unexpected %s (%s)", troupe_err_name(e),
            troupe_strerror(e));
}

uint8_t
fz_u8(fz_in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

uint32_t
fz_u32(fz_in *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | fz_u8(in);
    return v;
}

uint64_t
fz_u64(fz_in *in)
{
    return (uint64_t)fz_u32(in) << 32 | fz_u32(in);
}

const uint8_t *
fz_take(fz_in *in, size_t n, size_t *got)
{
    if (n > in->n)
        n = in->n;
    const uint8_t *p = in->p;
    in->p += n;
    in->n -= n;
    *got = n;
    return p;
}

const uint8_t *
fz_span8(fz_in *in, size_t *got)
{
    return fz_take(in, fz_u8(in), got);
}

const uint8_t *
fz_span16(fz_in *in, size_t *got)
{
    size_t n = (size_t)fz_u8(in) << 8;
    n |= fz_u8(in);
    return fz_take(in, n, got);
}

bool
fz_same(const void *a, size_t an, const void *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* ---- temporary directories ---- */

static char *dirs[8];
static int ndirs;

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void
rm_dirs(void)
{
    for (int i = 0; i < ndirs; i++) {
        nftw(dirs[i], rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(dirs[i]);
    }
    ndirs = 0;
}

char *
fz_tempdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char *path = NULL;
    if (asprintf(&path, "%s/troupe-fuzz-%s-XXXXXX",
                 base != NULL && *base ? base : "/tmp", tag) < 0 ||
        mkdtemp(path) == NULL || ndirs == (int)(sizeof(dirs) / sizeof(*dirs)))
        fz_fail(__FILE__, __LINE__, "mkdtemp", "no temporary directory");
    if (ndirs == 0)
        atexit(rm_dirs);
    dirs[ndirs++] = path;
    return path;
}
