/*
 * Branches served by troupe actors (troupe/branch.h): the target's form,
 * the ask's body and the reply's.
 */
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/branch.h"
#include "troupe/internal/gtx.h"
#include "troupe/internal/runtime.h"
#include "troupe/pack.h"

/* A decimal u32 at s[0..n): all digits, no sign, no leading zero but "0",
 * at most max. */
static bool
dec_u32(const char *s, size_t n, uint32_t max, uint32_t *out)
{
    if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > max)
        return false;
    *out = (uint32_t)v;
    return true;
}

int
troupe__actor_target_parse(const char *s, tc_actor_target *out)
{
    static const size_t pl = sizeof(TROUPE_ACTOR_TARGET_PREFIX) - 1;
    if (strncmp(s, TROUPE_ACTOR_TARGET_PREFIX, pl) != 0)
        return 0;
    memset(out, 0, sizeof(*out));
    const char *who = s + pl, *hash = strrchr(who, '#');
    if (hash == NULL || hash == who ||
        !dec_u32(hash + 1, strlen(hash + 1), 63, &out->kind))
        return -1;
    size_t wl = (size_t)(hash - who);
    if (who[0] != '@') {
        if (wl >= sizeof(out->name))
            return -1;
        memcpy(out->name, who, wl);
        out->by_name = true;
        return 1;
    }
    /* @NODE.SLOT.GEN, each a u32, slot and gen not 0 */
    const char *p = who + 1, *end = hash;
    uint32_t v[3];
    for (int i = 0; i < 3; i++) {
        const char *dot = i < 2 ? memchr(p, '.', (size_t)(end - p)) : end;
        if (dot == NULL || !dec_u32(p, (size_t)(dot - p), UINT32_MAX, &v[i]))
            return -1;
        p = dot + 1;
    }
    if (v[1] == 0 || v[2] == 0)
        return -1;
    out->addr = (troupe_addr){v[0], v[1], v[2]};
    return 1;
}

troupe_err
troupe__branch_msg_pack(troupe_packer *p, const char *mode, const char *gid,
                        size_t gid_len, const char *branch_id, const char *op,
                        uint32_t attempt, const void *payload, size_t len)
{
    troupe_pack_array(p, 6);
    troupe_pack_cstr(p, mode);
    troupe_pack_str(p, gid, gid_len);
    troupe_pack_cstr(p, branch_id);
    troupe_pack_cstr(p, op);
    troupe_pack_uint(p, attempt);
    return troupe_pack_bin(p, payload, len);
}

/* A string of at most cap - 1 bytes with no NUL, copied with one. */
static bool
read_cstr(troupe_reader *r, char *out, size_t cap, size_t *len)
{
    const char *s = NULL;
    size_t n = 0;
    if (troupe_read_str(r, cap - 1, &s, &n) != TROUPE_OK ||
        memchr(s, '\0', n) != NULL)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    if (len != NULL)
        *len = n;
    return true;
}

troupe_err
troupe_branch_call_read(const troupe_msg *m, troupe_branch_call *out)
{
    if (m == NULL || out == NULL)
        return troupe__errf(TROUPE_EINVAL, "branch: NULL argument");
    memset(out, 0, sizeof(*out));
    troupe_reader r;
    troupe_reader_init(&r, troupe_msg_data(m), troupe_msg_len(m));
    bool ok = troupe_read_array_n(&r, 6) == TROUPE_OK &&
              read_cstr(&r, out->mode, sizeof(out->mode), NULL) &&
              read_cstr(&r, out->gid, sizeof(out->gid), &out->gid_len) &&
              read_cstr(&r, out->branch_id, sizeof(out->branch_id), NULL) &&
              read_cstr(&r, out->op, sizeof(out->op), NULL) &&
              troupe_read_u32(&r, &out->attempt) == TROUPE_OK &&
              troupe_read_bin(&r, TROUPE_GTX_PAYLOAD_MAX, &out->payload,
                              &out->payload_len) == TROUPE_OK &&
              troupe_read_end(&r) == TROUPE_OK;
    troupe_gtx_mode mode = ok ? troupe_gtx_mode_of(out->mode) : 0;
    /* "00": a message's local transaction (its query-back) */
    bool local = mode == TROUPE_MODE_MSG && strcmp(out->op, "msg") == 0 &&
                 strcmp(out->branch_id, "00") == 0;
    ok = ok && mode != 0 && troupe_gid_valid(out->gid, out->gid_len) &&
         (local || troupe_branch_id_valid(out->branch_id)) &&
         out->attempt > 0 && troupe_gtx_op_valid(mode, out->op);
    if (!ok) {
        memset(out, 0, sizeof(*out));
        return troupe__errf(TROUPE_EPROTO, "branch: a body that is no branch");
    }
    return TROUPE_OK;
}

troupe_err
troupe_branch_reply(troupe_actor *self, const troupe_msg *req, troupe_outcome o)
{
    if (self == NULL || req == NULL || o < TROUPE_OUTCOME_SUCCESS ||
        o > TROUPE_OUTCOME_UNKNOWN)
        return troupe__errf(TROUPE_EINVAL, "branch: NULL or no outcome");
    uint8_t body[1] = {(uint8_t)o}; /* a msgpack positive fixint */
    troupe_msg *m = NULL;
    troupe_err e = troupe_msg_create(&m, req->kind, body, sizeof(body));
    if (e != TROUPE_OK)
        return e;
    return troupe_reply(self, req, &m);
}

troupe_outcome
troupe__branch_reply_outcome(const troupe_msg *m)
{
    if (m->err != TROUPE_OK)
        return TROUPE_OUTCOME_UNKNOWN;
    troupe_reader r;
    troupe_reader_init(&r, troupe_msg_data(m), troupe_msg_len(m));
    uint32_t o = 0;
    if (troupe_read_u32(&r, &o) != TROUPE_OK ||
        troupe_read_end(&r) != TROUPE_OK || o < TROUPE_OUTCOME_SUCCESS ||
        o > TROUPE_OUTCOME_UNKNOWN)
        return TROUPE_OUTCOME_UNKNOWN;
    return (troupe_outcome)o;
}
