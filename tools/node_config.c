/*
 * The node's config file (node_config.h): read whole (it is small), then
 * line by line; every problem is an error, never a skipped line, since a
 * typo in a key would otherwise leave a node running on a default.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "node_config.h"

#define FILE_MAX (64 << 10)
#define LINE_MAX_ 4096

typedef struct field {
    const char *key;
    size_t off, cap;
} field;

static const field fields[] = {
    {"id", offsetof(node_config, id), sizeof(((node_config *)0)->id)},
    {"listen", offsetof(node_config, listen),
     sizeof(((node_config *)0)->listen)},
    {"data", offsetof(node_config, data), sizeof(((node_config *)0)->data)},
    {"etcd", offsetof(node_config, etcd), sizeof(((node_config *)0)->etcd)},
    {"lease_ttl", offsetof(node_config, lease_ttl),
     sizeof(((node_config *)0)->lease_ttl)},
};

static bool
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* [s, e) with the spaces at both ends dropped */
static void
trim(const char **s, const char **e)
{
    while (*s < *e && is_space(**s))
        (*s)++;
    while (*e > *s && is_space((*e)[-1]))
        (*e)--;
}

static bool
line(const char *path, int no, const char *s, const char *e, node_config *out,
     char *why, size_t n)
{
    trim(&s, &e);
    if (s == e || *s == '#')
        return true;
    const char *eq = memchr(s, '=', (size_t)(e - s));
    if (eq == NULL) {
        snprintf(why, n, "%s:%d: not a `key = value` line", path, no);
        return false;
    }
    const char *ks = s, *ke = eq, *vs = eq + 1, *ve = e;
    trim(&ks, &ke);
    trim(&vs, &ve);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const field *f = &fields[i];
        if (strlen(f->key) != (size_t)(ke - ks) ||
            memcmp(f->key, ks, (size_t)(ke - ks)) != 0)
            continue;
        char *dst = (char *)out + f->off;
        if (dst[0] != 0) {
            snprintf(why, n, "%s:%d: %s is set twice", path, no, f->key);
            return false;
        }
        if (vs == ve) {
            snprintf(why, n, "%s:%d: %s has no value", path, no, f->key);
            return false;
        }
        if ((size_t)(ve - vs) >= f->cap || memchr(vs, 0, (size_t)(ve - vs))) {
            snprintf(why, n, "%s:%d: %s's value is too long or holds a NUL",
                     path, no, f->key);
            return false;
        }
        memcpy(dst, vs, (size_t)(ve - vs));
        dst[ve - vs] = 0;
        return true;
    }
    snprintf(why, n,
             "%s:%d: unknown key '%.*s' (known: id, listen, data, etcd, "
             "lease_ttl)",
             path, no, (int)(ke - ks > 64 ? 64 : ke - ks), ks);
    return false;
}

bool
node_config_read(const char *path, node_config *out, char *why, size_t n)
{
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, n, "%s: %s", path, strerror(errno));
        return false;
    }
    static char buf[FILE_MAX + 1];
    size_t len = fread(buf, 1, sizeof(buf), f);
    bool err = ferror(f) != 0;
    fclose(f);
    if (err) {
        snprintf(why, n, "%s: read error", path);
        return false;
    }
    if (len > FILE_MAX) {
        snprintf(why, n, "%s: larger than %d bytes", path, FILE_MAX);
        return false;
    }
    const char *p = buf, *end = buf + len;
    int no = 0;
    while (p < end) {
        no++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        if (e - p > LINE_MAX_) {
            snprintf(why, n, "%s:%d: longer than %d bytes", path, no,
                     LINE_MAX_);
            return false;
        }
        if (!line(path, no, p, e, out, why, n))
            return false;
        p = nl ? nl + 1 : end;
    }
    return true;
}
