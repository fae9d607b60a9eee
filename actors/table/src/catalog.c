/*
 * The catalog's name rule, troupe_catalog_name_valid (troupe/table.h):
 * the one check of a table's and a queue's name, at every create, lookup
 * and load of a stored entry.
 */
#include <string.h>

#include "table_int.h"
#include "troupe/alloc.h"

bool
troupe_catalog_name_valid(const char *name, size_t *len)
{
    if (name == NULL)
        return false;
    size_t n = strnlen(name, TROUPE_TABLE_NAME_MAX + 1);
    if (n == 0 || n > TROUPE_TABLE_NAME_MAX)
        return false;
    const unsigned char *p = (const unsigned char *)name, *end = p + n;
    while (p < end) {
        unsigned c = *p++;
        if (c < 0x80)
            continue;
        int k;
        unsigned min, cp;
        if ((c & 0xE0) == 0xC0) {
            k = 1, min = 0x80, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, min = 0x800, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, min = 0x10000, cp = c & 0x07;
        } else {
            return false;
        }
        if (end - p < k)
            return false;
        for (int i = 0; i < k; i++, p++) {
            if ((*p & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (*p & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
    }
    if (len != NULL)
        *len = n;
    return true;
}
