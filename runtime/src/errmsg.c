/*
 * The thread's error detail (err.h: troupe_errmsg; internal/runtime.h:
 * troupe__errf, troupe__err_named).
 *
 * Why per thread and not per object, as SQLite's is per connection: a
 * troupe object is called from many threads at once, and the detail
 * belongs to one call, which ran on one thread. Why keyed by the code:
 * a thread's buffer outlives the call that filled it, and a later call
 * that fails with another code and no detail must not show the old one;
 * troupe_errmsg(err) shows the detail only when it was left with err.
 */
#include <stdarg.h>
#include <stdio.h>

#include "troupe/internal/runtime.h"

static _Thread_local struct {
    troupe_err err;
    char text[TROUPE_ERRMSG_MAX];
} last;

troupe_err
troupe__errf(troupe_err err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last.text, sizeof(last.text), fmt, ap);
    va_end(ap);
    last.err = err;
    return err;
}

troupe_err
troupe__err_named(troupe_err err, const char *what, const char *name,
                  size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char *o = last.text, *end = last.text + sizeof(last.text);
    /* Kept free after what: "...", the closing quote and the NUL, plus
     * the widest escape (4) for the loop's check. */
    size_t room = sizeof(last.text) - 9;
    int n = snprintf(o, room + 1, "%s \"", what);
    o += n < 0 ? 0 : (size_t)n > room ? room : (size_t)n;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (end - o < 4 + 3 + 2) {
            o[0] = o[1] = o[2] = '.';
            o += 3;
            break;
        }
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        } else {
            *o++ = (char)c;
        }
    }
    *o++ = '"';
    *o = '\0';
    last.err = err;
    return err;
}

const char *
troupe_errmsg(troupe_err err)
{
    if (err != TROUPE_OK && last.err == err && last.text[0] != '\0')
        return last.text;
    return troupe_strerror(err);
}
