/* The detail of a name refused by the catalog's name rule. */
#include <stdio.h>
#include <string.h>

#include "troupe/internal/names.h"
#include "troupe/internal/runtime.h"

troupe_err
troupe__name_err(const char *what, const char *name, size_t max)
{
    if (name == NULL)
        return troupe__errf(TROUPE_EINVAL, "%s is NULL", what);
    size_t n = strnlen(name, max + 1);
    if (n == 0)
        return troupe__errf(TROUPE_EINVAL, "%s is empty", what);
    if (n > max)
        return troupe__errf(TROUPE_EINVAL, "%s longer than %zu bytes", what,
                            max);
    char head[64];
    snprintf(head, sizeof(head), "%s not strict UTF-8:", what);
    return troupe__err_named(TROUPE_EINVAL, head, name, n);
}
