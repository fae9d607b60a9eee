/*
 * What the transport reports: the one translation of nng errors into
 * troupe_err, and the node's log of what peers do, rate-limited.
 */
#include <stdarg.h>
#include <stdio.h>

#include "transport_int.h"

#define LOG_PER_SEC 20
#define SYS "transport"

/*
 * The one translation of nng errors, with the detail logged. Expected
 * outcomes of teardown and cancellation are not logged.
 */
troupe_err
troupe__nng_err(troupe_node *n, int rv, const char *what)
{
    troupe_err e;
    switch (rv) {
    case 0:
        return TROUPE_OK;
    case NNG_ENOMEM:
        e = TROUPE_ENOMEM;
        break;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP:
    case NNG_EBADTYPE:
    case NNG_ENOENT:
        e = TROUPE_EINVAL;
        break;
    case NNG_EADDRINUSE:
    case NNG_EBUSY:
        e = TROUPE_EBUSY;
        break;
    case NNG_ECLOSED:
        return TROUPE_ECLOSED;
    case NNG_ECANCELED:
        return TROUPE_ECANCELED;
    case NNG_ETIMEDOUT:
        return TROUPE_ETIMEDOUT;
    case NNG_ECONNREFUSED:
    case NNG_EUNREACHABLE:
    case NNG_ECONNRESET:
    case NNG_ECONNSHUT:
    case NNG_ECONNABORTED:
        e = TROUPE_EUNREACHABLE;
        break;
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
        e = TROUPE_EAUTH;
        break;
    case NNG_EMSGSIZE:
        e = TROUPE_ETOOBIG;
        break;
    case NNG_EPROTO:
        e = TROUPE_EPROTO;
        break;
    case NNG_EAGAIN:
        e = TROUPE_EFULL;
        break;
    case NNG_ESTATE:
        e = TROUPE_ESTATE;
        break;
    default:
        e = TROUPE_EIO;
        break;
    }
    troupe_log_field f[] = {{"node", NULL}, {"err", troupe_err_name(e)}};
    char id[16];
    if (n != NULL) {
        snprintf(id, sizeof(id), "%u", n->id);
        f[0].value = id;
    }
    troupe_log_fields(n ? n->lg : NULL, TROUPE_LOG_WARN, SYS, f, 2,
                      "nng %s: %s", what, nng_strerror(rv));
    return e;
}

/*
 * A log record about what peers do, at most LOG_PER_SEC a second: a
 * flood of strangers must not turn into a flood of log lines. The count
 * of records left out is reported with the next one (field "dropped").
 * A record the logger's level does not pass costs neither the lock nor
 * the budget.
 */
void
troupe__node_log(troupe_node *n, troupe_log_level level, const char *fmt, ...)
{
    if (!troupe_log_enabled(n->lg, level))
        return;
    int64_t sec = mono_ms() / 1000;
    uint32_t dropped = 0;
    pthread_mutex_lock(&n->log_mu);
    if (sec != n->log_sec) {
        n->log_sec = sec;
        n->log_n = 0;
    }
    bool say = n->log_n < LOG_PER_SEC;
    if (say) {
        n->log_n++;
        dropped = n->log_dropped;
        n->log_dropped = 0;
    } else {
        n->log_dropped++;
    }
    pthread_mutex_unlock(&n->log_mu);
    if (!say)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    char id[16], left[16];
    snprintf(id, sizeof(id), "%u", n->id);
    snprintf(left, sizeof(left), "%u", dropped);
    troupe_log_field f[] = {{"node", id}, {"dropped", left}};
    troupe_log_fields(n->lg, level, SYS, f, dropped > 0 ? 2 : 1, "%s", line);
}
