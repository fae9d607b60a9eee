/* Stored formats shared by the data layer (troupe/internal/datafmt.h). */
#include "troupe/internal/datafmt.h"

#include <stdio.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/pack.h"
#include "troupe/storage.h"

troupe_err
troupe__envelope_parse(const void *env, size_t len, int64_t *expires,
                       const void **doc, size_t *doc_len)
{
    /* Fast path, the form every write produces: 0x93 (array of 3), 0x01
     * (version 1), expires as a positive fixint (0: never; a time would be
     * larger), then the doc, a map. The envelope is walked whole, as on the
     * general path below, so that both accept the same documents: one
     * level less deep than a lone object, which is what writes accept (a
     * write's request holds the document one level down). */
    const unsigned char *b = env;
    if (len > 3 && b[0] == 0x93 && b[1] == 0x01 && b[2] <= 0x7f) {
        troupe_reader d;
        if (troupe_reader_init(&d, b, len) != TROUPE_OK ||
            !((b[3] & 0xf0) == 0x80 || b[3] == 0xde || b[3] == 0xdf))
            return TROUPE_ECORRUPT;
        *expires = b[2];
        *doc = b + 3;
        *doc_len = len - 3;
        return TROUPE_OK;
    }
    troupe_reader r;
    uint64_t ver = 0;
    troupe_reader_init(&r, env, len);
    troupe_read_array_n(&r, 3);
    troupe_read_uint(&r, &ver);
    troupe_read_int(&r, expires);
    /* One walk: troupe_reader_init checked that env is exactly one
     * well-formed object, so the doc, its last element, is the rest. */
    if (r.err != TROUPE_OK || troupe_read_peek(&r) != TROUPE_MP_MAP ||
        ver != 1 || *expires < 0)
        return TROUPE_ECORRUPT;
    *doc = r.p;
    *doc_len = (size_t)(r.end - r.p);
    return TROUPE_OK;
}

troupe_err
troupe__manifest_parse(const void *man, size_t len, const uint8_t *suffix,
                       size_t slen, mentry **out, size_t *n)
{
    troupe_reader r;
    uint64_t ver = 0;
    uint32_t cnt = 0;
    *out = NULL;
    *n = 0;
    if (suffix == NULL)
        slen = 0; /* keys must still be non-empty */
    troupe_reader_init(&r, man, len);
    troupe_read_array_n(&r, 2);
    troupe_read_uint(&r, &ver);
    troupe_read_array(&r, &cnt);
    if (r.err != TROUPE_OK || ver != 1)
        return TROUPE_ECORRUPT;
    mentry *v = cnt ? troupe_calloc(cnt, sizeof(*v)) : NULL;
    if (cnt && v == NULL)
        return TROUPE_ENOMEM;
    for (uint32_t i = 0; i < cnt; i++) {
        troupe_read_array_n(&r, 2);
        troupe_read_uint(&r, &v[i].id);
        troupe_read_bin(&r, TROUPE_KEY_MAX, &v[i].key, &v[i].len);
        if (r.err != TROUPE_OK || v[i].len <= slen ||
            (suffix != NULL &&
             memcmp((const uint8_t *)v[i].key + v[i].len - slen, suffix,
                    slen) != 0))
            goto bad;
        if (i > 0 && (v[i].id < v[i - 1].id ||
                      (v[i].id == v[i - 1].id &&
                       troupe_key_cmp(v[i - 1].key, v[i - 1].len, v[i].key,
                                      v[i].len) >= 0)))
            goto bad;
    }
    if (troupe_read_end(&r) != TROUPE_OK)
        goto bad;
    *out = v;
    *n = cnt;
    return TROUPE_OK;
bad:
    troupe_free(v);
    return TROUPE_ECORRUPT;
}

troupe_err
troupe__cf_name(char kind, uint64_t id, char *buf, size_t cap)
{
    if (buf == NULL || cap < TROUPE__CF_NAME_LEN ||
        (kind != 't' && kind != 'm' && kind != 'x' && kind != 'q'))
        return TROUPE_EINVAL;
    snprintf(buf, cap, "%c.%llu", kind, (unsigned long long)id);
    return TROUPE_OK;
}
