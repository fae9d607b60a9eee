/*
 * The admin endpoint's router and the answer helpers the routes share
 * (admin_route.h). Paths are matched segment by segment against the
 * patterns of the route tables; a captured segment is percent-decoded
 * (so a table or queue name may hold '/' or any UTF-8 as %XX), and one
 * that would decode to NUL, or a malformed escape, is 404 before any
 * route runs: no name the library accepts holds NUL.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin_route.h"

static int
hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes s[0..n) ('+' too when `plus`, as in a query); malloc'd,
 * NUL-terminated, or NULL when malformed, holding NUL, or out of memory. */
static char *
pct_decode(const char *s, size_t n, bool plus, size_t *out_len)
{
    char *d = malloc(n + 1);
    if (d == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi | lo) == 0) {
                free(d);
                return NULL;
            }
            c = (char)(hi << 4 | lo);
            i += 2;
        } else if (plus && c == '+') {
            c = ' ';
        }
        d[k++] = c;
    }
    d[k] = '\0';
    if (out_len != NULL)
        *out_len = k;
    return d;
}

typedef struct seg {
    const char *p;
    size_t n;
} seg;

/* Splits "/a/b/c" into segments; false when it does not start with '/',
 * has an empty segment (but a trailing '/'), or too many. */
static bool
split(const char *path, seg *s, size_t *n)
{
    if (path[0] != '/')
        return false;
    *n = 0;
    const char *p = path + 1;
    if (*p == '\0')
        return true;
    while (*p != '\0') {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0)
            return e != NULL && e[1] == '\0' ? true : false;
        if (*n == ADMIN_SEGS_MAX)
            return false;
        s[(*n)++] = (seg){p, len};
        if (e == NULL)
            break;
        p = e + 1;
    }
    return true;
}

/* Whether the path's segments fit pattern; fills the captures' spans. */
static bool
match(const char *pattern, const seg *s, size_t n, seg *cap, size_t *ncap)
{
    seg ps[ADMIN_SEGS_MAX];
    size_t np = 0;
    if (!split(pattern, ps, &np) || np != n)
        return false;
    *ncap = 0;
    for (size_t i = 0; i < n; i++) {
        if (ps[i].n == 2 && memcmp(ps[i].p, "{}", 2) == 0) {
            if (*ncap == ADMIN_PARAMS_MAX)
                return false;
            cap[(*ncap)++] = s[i];
        } else if (ps[i].n != s[i].n || memcmp(ps[i].p, s[i].p, s[i].n) != 0) {
            return false;
        }
    }
    return true;
}

static const admin_route *const tables[] = {
    admin_stats_routes, admin_queue_routes, admin_gtx_routes, admin_data_routes,
    admin_metrics_routes};

void
admin_dispatch(const admin_ctx *c, const char *path, admin_call *call)
{
    seg s[ADMIN_SEGS_MAX], cap[ADMIN_PARAMS_MAX];
    size_t n = 0, ncap = 0;
    if (!split(path, s, &n)) {
        admin_error(call, 404, "not_found", "no route %.200s", path);
        return;
    }
    const admin_route *hit = NULL;
    char *allow = call->allow;
    allow[0] = '\0';
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        for (const admin_route *r = tables[t]; r->method != NULL; r++) {
            size_t nc = 0;
            seg cp[ADMIN_PARAMS_MAX];
            if (!match(r->pattern, s, n, cp, &nc))
                continue;
            if (strcmp(r->method, call->method) == 0 && hit == NULL) {
                hit = r;
                memcpy(cap, cp, sizeof(cp));
                ncap = nc;
            } else if (strstr(allow, r->method) == NULL &&
                       strlen(allow) + strlen(r->method) + 3 <
                           sizeof(call->allow)) {
                if (allow[0] != '\0')
                    strcat(allow, ", ");
                strcat(allow, r->method);
            }
        }
    }
    if (hit != NULL)
        allow[0] = '\0';
    if (hit == NULL && allow[0] != '\0') {
        admin_error(call, 405, "method_not_allowed",
                    "%.200s takes %s, not %.16s", path, allow, call->method);
        return;
    }
    if (hit == NULL) {
        admin_error(call, 404, "not_found", "no route %.200s", path);
        return;
    }
    bool ok = true;
    for (size_t i = 0; i < ncap; i++) {
        call->param[i] =
            pct_decode(cap[i].p, cap[i].n, false, &call->param_len[i]);
        ok = ok && call->param[i] != NULL;
    }
    if (ok)
        hit->fn(c, call);
    else
        admin_error(call, 404, "not_found",
                    "a path segment is not percent-encoded right (or "
                    "holds %%00)");
    for (size_t i = 0; i < ncap; i++) {
        free(call->param[i]);
        call->param[i] = NULL;
    }
}

void
admin_ok(admin_call *call, json_t *j)
{
    if (j == NULL) {
        admin_error(call, 500, "no_memory", "out of memory");
        return;
    }
    call->status = 200;
    call->json = j;
}

static void
verror(admin_call *call, int status, const char *code, const char *terr,
       const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void
verror(admin_call *call, int status, const char *code, const char *terr,
       const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    json_decref(call->json);
    free(call->text);
    call->text = NULL;
    call->status = status;
    /* The message may quote a name that is not UTF-8: json_string would
     * refuse it, so build it byte-safe. */
    json_t *m = admin_json_bytes(msg, strlen(msg));
    if (m != NULL && !json_is_string(m)) {
        json_decref(m);
        m = json_string("(message not UTF-8)");
    }
    json_t *e = json_pack("{s:i,s:s,s:o*}", "status", status, "code", code,
                          "message", m);
    if (e != NULL && terr != NULL)
        json_object_set_new(e, "troupe_error", json_string(terr));
    call->json = e ? json_pack("{s:o}", "error", e) : NULL;
}

void
admin_error(admin_call *call, int status, const char *code, const char *fmt,
            ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(call, status, code, NULL, fmt, ap);
    va_end(ap);
}

static void
error_with(admin_call *call, int status, const char *code, const char *terr,
           const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void
error_with(admin_call *call, int status, const char *code, const char *terr,
           const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(call, status, code, terr, fmt, ap);
    va_end(ap);
}

void
admin_fail(admin_call *call, const char *what, troupe_err e)
{
    int st = 500;
    const char *code = "failed";
    switch (e) {
    case TROUPE_ENOENT:
    case TROUPE_ENOTABLE:
    case TROUPE_ENOINDEX:
    case TROUPE_ENOQUEUE:
        st = 404, code = "not_found";
        break;
    case TROUPE_EINVAL:
    case TROUPE_ERANGE:
    case TROUPE_ETOOBIG:
    case TROUPE_EPROTO:
        st = 400, code = "bad_request";
        break;
    case TROUPE_EEXIST:
    case TROUPE_EBUSY:
    case TROUPE_ESTATE:
    case TROUPE_ECONSTRAINT:
    case TROUPE_ECONFLICT:
        st = 409, code = "conflict";
        break;
    case TROUPE_ETIMEDOUT:
        st = 504, code = "timeout";
        break;
    case TROUPE_EFULL:
    case TROUPE_ECLOSED:
        st = 503, code = "unavailable";
        break;
    default:
        break;
    }
    error_with(call, st, code, troupe_err_name(e), "%s: %s", what,
               troupe_errmsg(e));
}

json_t *
admin_body_object(admin_call *call)
{
    if (call->body_len == 0) {
        admin_error(call, 400, "bad_json",
                    "this route wants a JSON object as its body");
        return NULL;
    }
    json_error_t err;
    json_t *j =
        json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, &err);
    if (j == NULL) {
        admin_error(call, 400, "bad_json",
                    "malformed JSON at line %d column %d: %s", err.line,
                    err.column, err.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        admin_error(call, 400, "bad_json", "the body must be a JSON object");
        return NULL;
    }
    return j;
}

char *
admin_query(admin_call *call, const char *name, bool *bad)
{
    *bad = false;
    size_t nl = strlen(name);
    const char *p = call->query;
    while (*p != '\0') {
        const char *e = strchr(p, '&');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > nl && p[nl] == '=' && memcmp(p, name, nl) == 0) {
            char *v = pct_decode(p + nl + 1, len - nl - 1, true, NULL);
            if (v == NULL) {
                *bad = true;
                admin_error(call, 400, "bad_query",
                            "query parameter %s is not percent-encoded "
                            "right (or holds %%00)",
                            name);
            }
            return v;
        }
        if (e == NULL)
            break;
        p = e + 1;
    }
    return NULL;
}

bool
admin_query_num(admin_call *call, const char *name, long lo, long hi, long dflt,
                long *out)
{
    bool bad;
    char *v = admin_query(call, name, &bad);
    if (bad)
        return false;
    if (v == NULL) {
        *out = dflt;
        return true;
    }
    char *end = NULL;
    long x = strtol(v, &end, 10);
    bool ok = *v != '\0' && *end == '\0' && x >= lo && x <= hi;
    if (!ok)
        admin_error(call, 400, "bad_query",
                    "query parameter %s wants a number in %ld..%ld, got "
                    "'%.64s'",
                    name, lo, hi, v);
    free(v);
    *out = x;
    return ok;
}

char *
admin_hex(const void *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char *s = malloc(2 * n + 1);
    if (s == NULL)
        return NULL;
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = digits[b[i] >> 4];
        s[2 * i + 1] = digits[b[i] & 15];
    }
    s[2 * n] = '\0';
    return s;
}

uint8_t *
admin_unhex(const char *s, size_t *n)
{
    size_t len = strlen(s);
    if (len == 0 || len % 2 != 0)
        return NULL;
    uint8_t *b = malloc(len / 2);
    if (b == NULL)
        return NULL;
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return NULL;
        }
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    *n = len / 2;
    return b;
}

json_t *
admin_json_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    bool text = true;
    for (size_t i = 0; i < n && text; i++)
        text = b[i] >= 0x20 && b[i] != 0x7f;
    json_t *s = text ? json_stringn((const char *)p, n) : NULL;
    if (s != NULL)
        return s; /* NULL: not UTF-8 */
    char *h = admin_hex(p, n);
    json_t *o = h ? json_pack("{s:s}", "hex", h) : NULL;
    free(h);
    return o;
}

uint8_t *
admin_field_bytes(admin_call *call, json_t *obj, const char *field, size_t max,
                  size_t *len)
{
    json_t *v = json_object_get(obj, field);
    const char *hex = NULL;
    uint8_t *out = NULL;
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        if (n >= 1 && n <= max && (out = malloc(n)) != NULL) {
            memcpy(out, json_string_value(v), n);
            *len = n;
            return out;
        }
    } else if (json_is_object(v) && json_is_string(json_object_get(v, "hex"))) {
        hex = json_string_value(json_object_get(v, "hex"));
        out = admin_unhex(hex, len);
        if (out != NULL && *len <= max)
            return out;
        free(out);
        out = NULL;
    }
    admin_error(call, 400, "bad_field",
                "field \"%s\" wants 1..%zu bytes, as a string or "
                "{\"hex\": \"...\"}",
                field, max);
    return NULL;
}

json_t *
admin_json_time(int64_t ms)
{
    if (ms < 0)
        return json_null();
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    if (gmtime_r(&sec, &tm) == NULL)
        return json_null();
    char buf[40];
    size_t k = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, sizeof(buf) - k, ".%03dZ", (int)(ms % 1000));
    return json_string(buf);
}
