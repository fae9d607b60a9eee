/*
 * The thread's message of the last troupe_abi_ call (troupe_abi_errmsg).
 *
 * Why a copy and not troupe_errmsg itself: that detail is keyed by the
 * code and lives until the thread's next troupe call of any kind; a
 * binding reads the message after the call returned and wants exactly
 * that call's, and "" after a success.
 */
#include <string.h>

#include "node.h"
#include "troupe/internal/runtime.h"

static _Thread_local char last[TROUPE_ERRMSG_MAX];

void
abi_clear(void)
{
    last[0] = '\0';
    troupe__errf(TROUPE_OK, "%s", ""); /* no stale detail of an old call */
}

int
abi_ret(troupe_err e)
{
    if (e == TROUPE_OK) {
        last[0] = '\0';
        return 0;
    }
    const char *m = troupe_errmsg(e);
    size_t l = strlen(m);
    if (l >= sizeof(last))
        l = sizeof(last) - 1;
    memcpy(last, m, l);
    last[l] = '\0';
    return (int)e;
}

const char *
troupe_abi_errmsg(void)
{
    return last;
}

int
troupe_abi_version(void)
{
    return TROUPE_ABI_VERSION;
}
