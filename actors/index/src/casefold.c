/*
 * The CASEFOLD collation of string index fields: Unicode simple case
 * folding, code point by code point, of a valid UTF-8 string.
 *
 * What compares equal, exactly: two valid UTF-8 strings whose code points
 * fold (CaseFolding.txt statuses C and S, the generated table) to the same
 * sequence. Nothing is removed, inserted or reordered, so "fooBar" and
 * "foo_bar" stay apart (Tito's lower-casing collapses such names), no
 * normalization happens ("é" precomposed and "e" + U+0301 differ), and
 * full foldings that change length do not apply ("ß" is not "ss"; "ẞ"
 * folds to "ß"). Turkic dotted and dotless i keep their own code points
 * (U+0130 and U+0131 fold to themselves). A string that is not valid UTF-8
 * is left as it is: it equals only itself and never a valid one (a fold of
 * valid UTF-8 is valid UTF-8).
 *
 * The table is generated (../casefold/gen.py) and committed rather than
 * taken from a library at run time: the folded strings are stored in index
 * keys, so the mapping must not move under them with an upgrade.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "casefold_data.h"
#include "index_int.h"

static uint32_t
fold_cp(uint32_t c)
{
    if (c < 0x80)
        return c - 'A' < 26u ? c + 32 : c;
    size_t lo = 0, hi = sizeof(fold_runs) / sizeof(fold_runs[0]);
    while (lo < hi) { /* the last run starting at or below c */
        size_t mid = lo + (hi - lo) / 2;
        if (fold_runs[mid].start <= c)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return c;
    const struct fold_run *r = &fold_runs[lo - 1];
    uint32_t off = c - r->start;
    if (off % r->step != 0 || off / r->step >= r->count)
        return c;
    return (uint32_t)((int32_t)c + r->delta);
}

/* Decodes the code point at s[0..n): its length, 0 when not valid UTF-8
 * (overlong, surrogate, past U+10FFFF, truncated). NUL is valid here. */
static size_t
utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    size_t k;
    uint32_t min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        k = 1, min = 0x80, c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        k = 2, min = 0x800, c &= 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        k = 3, min = 0x10000, c &= 0x07;
    } else {
        return 0;
    }
    if (n <= k)
        return 0;
    uint32_t v = c;
    for (size_t i = 1; i <= k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return k + 1;
}

static size_t
utf8_put(uint32_t c, unsigned char *o)
{
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

size_t
troupe__index_casefold_max(size_t n)
{
    /* a fold lengthens a code point by at most one byte, and only a
     * two-byte one (U+023A -> U+2C65): 3/2 of the input */
    return n + n / 2 + 1;
}

size_t
troupe__index_casefold(const unsigned char *s, size_t n, unsigned char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_next(s + i, n - i, &cp);
        if (k == 0)
            break;
        o += utf8_put(fold_cp(cp), out + o);
        i += k;
    }
    if (i < n) { /* not UTF-8: the bytes as they are */
        for (size_t j = 0; j < n; j++)
            out[j] = s[j];
        return n;
    }
    return o;
}
