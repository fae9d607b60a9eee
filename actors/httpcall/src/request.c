/*
 * DTM's call shape and verdicts (troupe/httpcall.h says what they are).
 *
 * The URL goes through libcurl's URL API (CURLU), not string pasting: it
 * finds the scheme the way the transfer will, and knows where the query
 * ends and a fragment starts, so "?" and "#" in the stored url are
 * respected. The four values are percent-encoded here (every byte outside
 * RFC 3986's unreserved set) and appended with CURLU_APPENDQUERY, which
 * adds the "&" or "?": CURLU_URLENCODE was not used because it turns a
 * space into "+" and leaves some reserved bytes alone.
 *
 * The markers are searched in the whole body as it streams past, carrying
 * the last bytes of a piece into the next, so that a body cut at
 * body_max, or a marker split between two reads, is never misread.
 */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/httpcall.h"
#include "troupe/internal/httpcall.h"
#include "troupe/pack.h"

static const char *const MARK_ONGOING = "ONGOING";
static const char *const MARK_FAILURE = "FAILURE";

/* One NUL-terminated string at *p within end; advances *p past it. */
static const char *
take_str(const uint8_t **p, const uint8_t *end)
{
    const uint8_t *nul = memchr(*p, 0, (size_t)(end - *p));
    if (nul == NULL)
        return NULL;
    const char *s = (const char *)*p;
    *p = nul + 1;
    return s;
}

troupe_err
troupe__httpcall_parse(const uint8_t *header, size_t header_len,
                       const uint8_t *body, size_t body_len, hc_branch *b,
                       const char **why)
{
    memset(b, 0, sizeof(*b));
    const uint8_t *p = header, *end = header + header_len;
    if (header_len == 0 || (b->mode = take_str(&p, end)) == NULL ||
        (b->gid = take_str(&p, end)) == NULL ||
        (b->branch_id = take_str(&p, end)) == NULL ||
        (b->op = take_str(&p, end)) == NULL || p != end) {
        *why = "httpcall: the task's header is not four strings";
        return TROUPE_EPROTO;
    }
    troupe_reader r;
    const void *url = NULL, *bin = NULL;
    troupe_reader_init(&r, body, body_len);
    troupe_read_array_n(&r, 2);
    troupe_read_str(&r, TROUPE_HTTPCALL_URL_MAX, (const char **)&url,
                    &b->url_len);
    troupe_read_bin(&r, TROUPE_TASK_BODY_MAX, &bin, &b->body_len);
    if (troupe_read_end(&r) != TROUPE_OK) {
        *why = "httpcall: the payload is not [url str, body bin]";
        return TROUPE_EPROTO;
    }
    b->url = url;
    b->body = bin;
    if (b->url_len == 0 || memchr(b->url, 0, b->url_len) != NULL) {
        *why = "httpcall: the url is empty or holds a NUL";
        return TROUPE_EPROTO;
    }
    b->get = strcmp(b->op, "msg") == 0;
    return TROUPE_OK;
}

/* "key=" and value percent-encoded, NUL-terminated, into out (room for
 * strlen(key) + 1 + 3 * strlen(v) + 1). */
static void
query_part(char *out, const char *key, const char *v)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(key);
    memcpy(out, key, n);
    out[n++] = '=';
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if ((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
            (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' || *c == '_' ||
            *c == '~') {
            out[n++] = (char)*c;
        } else {
            out[n++] = '%';
            out[n++] = hex[*c >> 4];
            out[n++] = hex[*c & 15];
        }
    }
    out[n] = 0;
}

/* Appends the four parameters to u; ENOMEM or EPROTO. */
static troupe_err
append_query(CURLU *u, const hc_branch *b, const char **why)
{
    const char *keys[4] = {"gid", "trans_type", "branch_id", "op"};
    const char *vals[4] = {b->gid, b->mode, b->branch_id, b->op};
    for (int i = 0; i < 4; i++) {
        char *part = troupe_malloc(strlen(keys[i]) + 2 + 3 * strlen(vals[i]));
        if (part == NULL)
            return TROUPE_ENOMEM;
        query_part(part, keys[i], vals[i]);
        CURLUcode rc =
            curl_url_set(u, CURLUPART_QUERY, part, CURLU_APPENDQUERY);
        troupe_free(part);
        if (rc == CURLUE_OUT_OF_MEMORY)
            return TROUPE_ENOMEM;
        if (rc != CURLUE_OK) {
            *why = "httpcall: the url's query does not take the parameters";
            return TROUPE_EPROTO;
        }
    }
    return TROUPE_OK;
}

troupe_err
troupe__httpcall_url(const hc_branch *b, char **out, const char **why)
{
    *out = NULL;
    char *in = troupe_malloc(b->url_len + 1);
    CURLU *u = curl_url();
    if (in == NULL || u == NULL) {
        troupe_free(in);
        curl_url_cleanup(u);
        return TROUPE_ENOMEM;
    }
    memcpy(in, b->url, b->url_len);
    in[b->url_len] = 0;
    /* Only a scheme libcurl was built with parses (else
     * CURLUE_UNSUPPORTED_SCHEME); of those, only http and https pass. */
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, in, 0);
    troupe_free(in);
    troupe_err e = TROUPE_OK;
    char *scheme = NULL;
    if (rc == CURLUE_OUT_OF_MEMORY) {
        e = TROUPE_ENOMEM;
    } else if (rc != CURLUE_OK) {
        *why = rc == CURLUE_UNSUPPORTED_SCHEME
                   ? "httpcall: only http and https urls are called"
                   : "httpcall: the url does not parse";
        e = TROUPE_EPROTO;
    } else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
               (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
        *why = "httpcall: only http and https urls are called";
        e = TROUPE_EPROTO;
    }
    curl_free(scheme);
    if (e == TROUPE_OK && curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0) !=
                              CURLUE_OK) /* a fragment is never sent */
        e = TROUPE_ENOMEM;
    if (e == TROUPE_OK)
        e = append_query(u, b, why);
    if (e == TROUPE_OK) {
        rc = curl_url_get(u, CURLUPART_URL, out, 0);
        if (rc != CURLUE_OK) {
            *out = NULL;
            e = rc == CURLUE_OUT_OF_MEMORY ? TROUPE_ENOMEM : TROUPE_EPROTO;
            *why = "httpcall: the url does not parse";
        }
    }
    curl_url_cleanup(u);
    return e;
}

void
troupe__httpcall_url_free(char *url)
{
    curl_free(url);
}

static void
scan_in(hc_scan *s, const char *d, size_t n)
{
    if (!s->ongoing && memmem(d, n, MARK_ONGOING, 7) != NULL)
        s->ongoing = true;
    if (!s->failure && memmem(d, n, MARK_FAILURE, 7) != NULL)
        s->failure = true;
}

void
troupe__httpcall_scan(hc_scan *s, const char *data, size_t len)
{
    if ((s->ongoing && s->failure) || len == 0)
        return;
    /* A marker across the seam has 1..6 bytes in carry and the rest in
     * the first 6 bytes of data. */
    char seam[12];
    size_t head = len < 6 ? len : 6;
    memcpy(seam, s->carry, s->carry_len);
    memcpy(seam + s->carry_len, data, head);
    scan_in(s, seam, s->carry_len + head);
    scan_in(s, data, len);
    if (len >= 6) {
        memcpy(s->carry, data + len - 6, 6);
        s->carry_len = 6;
    } else {
        size_t all = s->carry_len + len; /* seam holds carry + data */
        size_t keep = all < 6 ? all : 6;
        memmove(s->carry, seam + all - keep, keep);
        s->carry_len = keep;
    }
}

troupe_outcome
troupe__httpcall_verdict(long status, const hc_scan *s)
{
    if (status >= 200 && status < 300) {
        if (s->ongoing)
            return TROUPE_OUTCOME_ONGOING;
        if (s->failure)
            return TROUPE_OUTCOME_FAILURE;
        return TROUPE_OUTCOME_SUCCESS;
    }
    if (status == 409)
        return TROUPE_OUTCOME_FAILURE;
    if (status == 425)
        return TROUPE_OUTCOME_ONGOING;
    return TROUPE_OUTCOME_UNKNOWN;
}

troupe_err
troupe_httpcall_payload_pack(troupe_packer *p, const char *url,
                             const void *body, size_t len)
{
    if (p == NULL || url == NULL || (body == NULL && len > 0))
        return TROUPE_EINVAL;
    size_t n = strlen(url);
    if (n == 0 || n > TROUPE_HTTPCALL_URL_MAX)
        return TROUPE_EINVAL;
    troupe_pack_array(p, 2);
    troupe_pack_str(p, url, n);
    return troupe_pack_bin(p, body, len);
}
