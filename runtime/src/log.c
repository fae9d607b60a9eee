/*
 * The log hook and the default writer (log.h).
 *
 * Why one write(2) per line, not stdio: stderr is unbuffered, so an
 * fprintf with several conversions may reach the file in several writes,
 * and lines from two threads could interleave mid-line. The line is built
 * whole in a buffer and written at once; on a pipe, lines up to PIPE_BUF
 * (4096 bytes) are atomic, and on a file opened O_APPEND each write lands
 * whole at the end.
 *
 * Why the escaping: messages carry names that come from outside (actor
 * names, directories, table names). A newline in one would start a fake
 * record; a quote would end msg early and let the rest pose as fields.
 * Quoting every message and escaping '"', '\' and every control byte
 * makes each record exactly one line whose fields parse back to what was
 * logged (the test parses lines back).
 *
 * Formatting costs nothing unless the record passes: the level check comes
 * first, and a message is formatted into a stack buffer (a heap one only
 * for messages past its size). Those use malloc, not troupe_malloc: a
 * record made on an error path must not consume the allocation fault
 * hook's countdown (alloc.h) that a test set for the call that failed.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "troupe/log.h"

#define MSG_STACK 512
#define MSG_MAX (TROUPE_LOG_LINE_MAX)

const char *
troupe_log_level_name(troupe_log_level level)
{
    switch (level) {
    case TROUPE_LOG_ERROR:
        return "error";
    case TROUPE_LOG_WARN:
        return "warn";
    case TROUPE_LOG_INFO:
        return "info";
    case TROUPE_LOG_DEBUG:
        return "debug";
    default:
        return "?";
    }
}

static troupe_log_level
threshold(const troupe_logger *lg)
{
    if (lg == NULL || lg->level == TROUPE_LOG_DEFAULT)
        return TROUPE_LOG_WARN;
    return lg->level;
}

int
troupe_log_enabled(const troupe_logger *lg, troupe_log_level level)
{
    return level >= TROUPE_LOG_ERROR && level <= TROUPE_LOG_DEBUG &&
           level <= threshold(lg);
}

/* ---- the line ------------------------------------------------------- */

typedef struct line {
    char *p;
    size_t len, cap; /* cap keeps room for "...\n" and the NUL */
    bool cut;
} line;

static void
put_raw(line *l, const char *s, size_t n)
{
    if (l->cut)
        return;
    if (n > l->cap - l->len) {
        n = l->cap - l->len;
        l->cut = true;
    }
    memcpy(l->p + l->len, s, n);
    l->len += n;
}

static void
put_str(line *l, const char *s)
{
    put_raw(l, s, strlen(s));
}

static bool
needs_quotes(const char *s, size_t n)
{
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f || c == '"' || c == '=' || c == '\\')
            return true;
    }
    return false;
}

/* Puts s quoted and escaped. An escape is never cut in half: a cut line
 * ends on a whole character. */
static void
put_quoted(line *l, const char *s, size_t n)
{
    put_raw(l, "\"", 1);
    for (size_t i = 0; i < n && !l->cut; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[5];
        size_t k;
        switch (c) {
        case '"':
        case '\\':
            esc[0] = '\\';
            esc[1] = (char)c;
            k = 2;
            break;
        case '\n':
            memcpy(esc, "\\n", 2);
            k = 2;
            break;
        case '\r':
            memcpy(esc, "\\r", 2);
            k = 2;
            break;
        case '\t':
            memcpy(esc, "\\t", 2);
            k = 2;
            break;
        default:
            if (c < 0x20 || c == 0x7f) {
                snprintf(esc, sizeof(esc), "\\x%02x", c);
                k = 4;
            } else {
                esc[0] = (char)c;
                k = 1;
            }
        }
        if (k > l->cap - l->len) {
            l->cut = true;
            break;
        }
        put_raw(l, esc, k);
    }
    if (!l->cut)
        put_raw(l, "\"", 1);
}

static void
put_value(line *l, const char *s)
{
    size_t n = strlen(s);
    if (needs_quotes(s, n))
        put_quoted(l, s, n);
    else
        put_raw(l, s, n);
}

static void
put_key(line *l, const char *k)
{
    put_raw(l, " ", 1);
    if (*k == '\0') {
        put_raw(l, "_", 1);
        return;
    }
    for (; *k != '\0'; k++) {
        char c = *k;
        bool okc = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
        put_raw(l, okc ? k : "_", 1);
    }
    put_raw(l, "=", 1);
}

size_t
troupe_log_format(const troupe_log_record *rec, char *buf, size_t cap)
{
    if (buf == NULL || cap < 64)
        return 0;
    /* Room for "...\n" and the NUL after a cut. */
    line l = {.p = buf, .len = 0, .cap = cap - 5, .cut = false};
    time_t sec = (time_t)(rec->time_ns / 1000000000);
    long ms = (long)((rec->time_ns % 1000000000) / 1000000);
    struct tm tm;
    char ts[96]; /* room for any int the compiler can imagine */
    if (gmtime_r(&sec, &tm) != NULL)
        snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                 tm.tm_min, tm.tm_sec, ms);
    else
        snprintf(ts, sizeof(ts), "-");
    put_str(&l, "ts=");
    put_str(&l, ts);
    put_str(&l, " level=");
    put_str(&l, troupe_log_level_name(rec->level));
    put_key(&l, "sys");
    put_value(&l, rec->sys != NULL ? rec->sys : "troupe");
    put_key(&l, "msg");
    put_quoted(&l, rec->msg != NULL ? rec->msg : "",
               rec->msg != NULL ? rec->msg_len : 0);
    for (size_t i = 0; i < rec->nfields && !l.cut; i++) {
        const troupe_log_field *f = &rec->fields[i];
        if (f->key == NULL || f->value == NULL)
            continue;
        put_key(&l, f->key);
        put_value(&l, f->value);
    }
    if (l.cut) {
        memcpy(l.p + l.len, "...", 3);
        l.len += 3;
    }
    l.p[l.len++] = '\n';
    l.p[l.len] = '\0';
    return l.len;
}

static void
write_stderr(const troupe_log_record *rec)
{
    char stack[1024];
    char *buf = stack;
    size_t cap = sizeof(stack);
    /* Most lines fit on the stack; a longer message takes the heap. */
    if (rec->msg_len + 256 > cap) {
        char *big = malloc(TROUPE_LOG_LINE_MAX);
        if (big != NULL) {
            buf = big;
            cap = TROUPE_LOG_LINE_MAX;
        }
    }
    size_t n = troupe_log_format(rec, buf, cap);
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(STDERR_FILENO, buf + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* dropped: see log.h */
        off += (size_t)w;
    }
    if (buf != stack)
        free(buf);
}

static void
emit(const troupe_logger *lg, troupe_log_level level, const char *sys,
     const troupe_log_field *fields, size_t nfields, const char *fmt,
     va_list ap)
{
    char stack[MSG_STACK];
    char *msg = stack;
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(stack, sizeof(stack), fmt, copy);
    va_end(copy);
    size_t len = n > 0 ? (size_t)n : 0;
    if (len >= sizeof(stack)) {
        size_t want = len < MSG_MAX ? len + 1 : MSG_MAX;
        char *big = malloc(want);
        if (big != NULL) {
            vsnprintf(big, want, fmt, ap);
            msg = big;
            len = want - 1 < len ? want - 1 : len;
        } else {
            len = sizeof(stack) - 1;
        }
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    troupe_log_record rec = {
        .level = level,
        .sys = sys != NULL ? sys : "troupe",
        .msg = msg,
        .msg_len = len,
        .fields = nfields > 0 ? fields : NULL,
        .nfields = fields != NULL ? nfields : 0,
        .time_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec,
    };
    if (lg != NULL && lg->fn != NULL)
        lg->fn(lg->ctx, &rec);
    else
        write_stderr(&rec);
    if (msg != stack)
        free(msg);
}

void
troupe_log(const troupe_logger *lg, troupe_log_level level, const char *sys,
           const char *fmt, ...)
{
    if (fmt == NULL || !troupe_log_enabled(lg, level))
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(lg, level, sys, NULL, 0, fmt, ap);
    va_end(ap);
}

void
troupe_log_fields(const troupe_logger *lg, troupe_log_level level,
                  const char *sys, const troupe_log_field *fields,
                  size_t nfields, const char *fmt, ...)
{
    if (fmt == NULL || !troupe_log_enabled(lg, level))
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(lg, level, sys, fields, nfields, fmt, ap);
    va_end(ap);
}
