/* Page cursors: tag, object id, key (troupe/internal/cursor.h). */
#include <string.h>

#include "troupe/internal/cursor.h"

void
troupe__cursor_put(uint8_t *out, uint8_t tag, uint64_t id, const void *key,
                   size_t klen)
{
    out[0] = tag;
    for (int i = 0; i < 8; i++)
        out[1 + i] = (uint8_t)(id >> (56 - 8 * i));
    memcpy(out + TROUPE_CURSOR_OVERHEAD, key, klen);
}

troupe_err
troupe__cursor_key(const void *c, size_t clen, uint8_t tag, uint64_t id,
                   const void **key, size_t *klen)
{
    if (key == NULL || klen == NULL)
        return TROUPE_EINVAL;
    const uint8_t *b = c;
    if (b == NULL || clen <= TROUPE_CURSOR_OVERHEAD ||
        clen > TROUPE_CURSOR_MAX || b[0] != tag)
        return TROUPE_ERANGE;
    uint64_t got = 0;
    for (int i = 0; i < 8; i++)
        got = (got << 8) | b[1 + i];
    if (got != id)
        return TROUPE_ERANGE;
    *key = b + TROUPE_CURSOR_OVERHEAD;
    *klen = clen - TROUPE_CURSOR_OVERHEAD;
    return TROUPE_OK;
}
