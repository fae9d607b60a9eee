/*
 * The coordinator's names: gid and branch-id rules, a gid's shard, modes
 * and their ops (troupe/coord.h).
 */
#include <string.h>

#include "troupe/coord.h"
#include "troupe/internal/gtx.h"
#include "troupe/internal/hash.h"

uint32_t
troupe_gtx_shard_of(const char *gid, size_t len, uint32_t shards)
{
    return shards <= 1 ? 0 : (uint32_t)(troupe__fnv1a64(gid, len) % shards);
}

bool
troupe_gid_valid(const char *gid, size_t len)
{
    if (gid == NULL || len == 0 || len > TROUPE_GID_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = gid[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
                  c == '-';
        if (!ok)
            return false;
    }
    return true;
}

bool
troupe_branch_id_valid(const char *s)
{
    if (s == NULL)
        return false;
    size_t n = strlen(s);
    if (n < 2 || n > 4)
        return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    /* canonical: two digits below 100 ("01"), no leading zero above */
    if (v == 0 || v > TROUPE_BRANCH_ID_MAX)
        return false;
    return n == 2 ? true : s[0] != '0';
}

static const char *const mode_names[] = {NULL,  "saga", "tcc",
                                         "msg", "xa",   "workflow"};
#define N_MODES (sizeof(mode_names) / sizeof(mode_names[0]))

troupe_gtx_mode
troupe_gtx_mode_of(const char *s)
{
    for (size_t i = 1; s != NULL && i < N_MODES; i++)
        if (strcmp(s, mode_names[i]) == 0)
            return (troupe_gtx_mode)i;
    return 0;
}

const char *
troupe_gtx_mode_name(troupe_gtx_mode m)
{
    return (unsigned)m > 0 && (unsigned)m < N_MODES ? mode_names[m] : NULL;
}

/* Each mode's ops in their stored order (troupe/internal/gtx.h), what
 * each undoes (NULL: a forward op), and whether a step carries it (a
 * message's "msg" is its local transaction's, never a step's). */
struct op {
    const char *name, *undoes;
    bool step;
};
static const struct op saga_ops[] = {{"action", NULL, true},
                                     {"compensate", "action", true},
                                     {NULL, NULL, false}};
static const struct op tcc_ops[] = {{"try", NULL, true},
                                    {"confirm", NULL, true},
                                    {"cancel", "try", true},
                                    {NULL, NULL, false}};
static const struct op msg_ops[] = {
    {"action", NULL, true}, {"msg", NULL, false}, {NULL, NULL, false}};
static const struct op xa_ops[] = {
    {"action", NULL, true}, {"rollback", "action", true}, {NULL, NULL, false}};

static const struct op *
ops_of(troupe_gtx_mode m)
{
    switch (m) {
    case TROUPE_MODE_SAGA:
    case TROUPE_MODE_WORKFLOW:
        return saga_ops;
    case TROUPE_MODE_TCC:
        return tcc_ops;
    case TROUPE_MODE_MSG:
        return msg_ops;
    case TROUPE_MODE_XA:
        return xa_ops;
    default:
        return NULL;
    }
}

const char *
troupe_gtx_op_at(troupe_gtx_mode m, unsigned i)
{
    const struct op *t = ops_of(m);
    for (unsigned k = 0; t != NULL && t[k].name != NULL && t[k].step; k++)
        if (k == i)
            return t[k].name;
    return NULL;
}

static const struct op *
find_op(troupe_gtx_mode m, const char *op)
{
    for (const struct op *t = ops_of(m); op != NULL && t != NULL && t->name;
         t++)
        if (strcmp(op, t->name) == 0)
            return t;
    return NULL;
}

bool
troupe_gtx_op_valid(troupe_gtx_mode m, const char *op)
{
    return find_op(m, op) != NULL;
}

const char *
troupe_gtx_op_undoes(troupe_gtx_mode m, const char *op)
{
    const struct op *o = find_op(m, op);
    return o != NULL ? o->undoes : NULL;
}

/* The length of the UTF-8 sequence at s[0..n) in its shortest form, its
 * code point in *cp, or 0 when there is none (a stray continuation byte,
 * a truncated, overlong or surrogate sequence, past U+10FFFF). */
static size_t
utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char b = s[0];
    size_t k = b < 0x80                 ? 1
               : b >= 0xC2 && b <= 0xDF ? 2
               : b >= 0xE0 && b <= 0xEF ? 3
               : b >= 0xF0 && b <= 0xF4 ? 4
                                        : 0;
    if (k == 0 || k > n)
        return 0;
    uint32_t v = k == 1 ? b : b & (0x7F >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[k] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return k;
}

bool
troupe_gtx_abort_reason_valid(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > TROUPE_GTX_ABORT_REASON_MAX)
        return false;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t k = utf8_next(p + i, len - i, &cp);
        /* controls would break the show output's one line per field */
        if (k == 0 || cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
            return false;
        i += k;
    }
    return true;
}
