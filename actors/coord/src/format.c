/*
 * A global transaction's stored document (troupe/internal/gtx.h;
 * docs/coordinator.md, "Stored format"): encode, and decode with every
 * field checked.
 */
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/gtx.h"
#include "troupe/internal/runtime.h"

static const char *const status_names[] = {NULL,       "prepared", "submitted",
                                           "aborting", "succeed",  "failed"};
#define N_STATUS (sizeof(status_names) / sizeof(status_names[0]))

const char *
troupe__gtx_status_name(tc_status s)
{
    return (unsigned)s > 0 && (unsigned)s < N_STATUS ? status_names[s] : NULL;
}

static unsigned
n_ops(troupe_gtx_mode m)
{
    unsigned n = 0;
    while (troupe_gtx_op_at(m, n) != NULL)
        n++;
    return n;
}

/* The fields, in their stored order; each must come exactly once. */
enum {
    F_V,
    F_MODE,
    F_STATUS,
    F_STEPS,
    F_REASON,
    F_QUERY,
    F_ATTEMPTS,
    F_DUE,
    F_CREATED,
    F_UPDATED,
    F_FINISHED,
    F_OPTS,
    F_AFTER, /* format 2 only */
    F_WF,    /* format 3 only */
    N_FIELDS
};
static const char *const field_names[N_FIELDS] = {
    "v",           "mode",     "status", "steps",      "reason",
    "query",       "attempts", "due_ms", "created_ms", "updated_ms",
    "finished_ms", "opts",     "after",  "wf"};
/* The fields a format-1 document has: all but "after" and "wf"; formats
 * 2 and 3 have one more each. */
#define N_FIELDS_1 (N_FIELDS - 2)

/* ---- encode ---- */

static void
pack_call(troupe_packer *p, const tc_call *c)
{
    if (c->target == NULL) {
        troupe_pack_nil(p);
        return;
    }
    troupe_pack_array(p, 5);
    troupe_pack_cstr(p, c->target);
    troupe_pack_bin(p, c->payload, c->payload_len);
    troupe_pack_uint(p, (uint64_t)c->state);
    troupe_pack_uint(p, c->attempts);
    troupe_pack_uint(p, c->last);
}

troupe_err
troupe__gtx_encode(const tc_gtx *g, troupe_packer *p)
{
    const char *mode = troupe_gtx_mode_name(g->mode);
    const char *status = troupe__gtx_status_name(g->status);
    if (mode == NULL || status == NULL)
        return troupe__errf(TROUPE_EINVAL, "gtx: no such mode or status");
    if (g->after != NULL && g->mode != TROUPE_MODE_SAGA)
        return troupe__errf(TROUPE_EINVAL, "gtx: a step order outside a saga");
    unsigned k = n_ops(g->mode);
    bool conc = g->after != NULL, wf = g->mode == TROUPE_MODE_WORKFLOW;
    troupe_pack_map(p, conc || wf ? N_FIELDS_1 + 1 : N_FIELDS_1);
    troupe_pack_cstr(p, "v");
    troupe_pack_uint(p, conc ? TROUPE_GTX_FORMAT_CONCURRENT
                        : wf ? TROUPE_GTX_FORMAT_WORKFLOW
                             : TROUPE_GTX_FORMAT);
    troupe_pack_cstr(p, "mode");
    troupe_pack_cstr(p, mode);
    troupe_pack_cstr(p, "status");
    troupe_pack_cstr(p, status);
    troupe_pack_cstr(p, "steps");
    troupe_pack_array(p, g->n_steps);
    for (uint32_t i = 0; i < g->n_steps; i++) {
        troupe_pack_array(p, k);
        for (unsigned o = 0; o < k; o++)
            pack_call(p, &g->steps[i].call[o]);
    }
    troupe_pack_cstr(p, "reason");
    if (g->reason != NULL)
        troupe_pack_cstr(p, g->reason);
    else
        troupe_pack_nil(p);
    troupe_pack_cstr(p, "query");
    pack_call(p, &g->query);
    troupe_pack_cstr(p, "attempts");
    troupe_pack_uint(p, g->attempts);
    troupe_pack_cstr(p, "due_ms");
    troupe_pack_int(p, g->due_ms);
    troupe_pack_cstr(p, "created_ms");
    troupe_pack_int(p, g->created_ms);
    troupe_pack_cstr(p, "updated_ms");
    troupe_pack_int(p, g->updated_ms);
    troupe_pack_cstr(p, "finished_ms");
    if (g->finished_ms != 0)
        troupe_pack_int(p, g->finished_ms);
    else
        troupe_pack_nil(p);
    troupe_pack_cstr(p, "opts");
    troupe_pack_array(p, 5);
    troupe_pack_int(p, g->opts.timeout_to_fail_ms);
    troupe_pack_uint(p, g->opts.retry_limit);
    troupe_pack_uint(p, g->opts.retry_min_ms);
    troupe_pack_uint(p, g->opts.retry_max_ms);
    troupe_err e = troupe_pack_uint(p, g->opts.branch_timeout_ms);
    if (wf) {
        troupe_pack_cstr(p, "wf");
        troupe_pack_array(p, 2);
        troupe_pack_uint(p, (uint64_t)g->hold);
        troupe_pack_array(p, g->n_steps);
        for (uint32_t i = 0; i < g->n_steps; i++) {
            const tc_step *st = &g->steps[i];
            troupe_pack_array(p, 3);
            troupe_pack_uint(p, (uint64_t)st->kind);
            troupe_pack_cstr(p, st->name != NULL ? st->name : "");
            e = troupe_pack_int(p, st->version);
        }
        return e;
    }
    if (!conc)
        return e;
    troupe_pack_cstr(p, "after");
    troupe_pack_array(p, g->n_steps);
    for (uint32_t i = 0; i < g->n_steps; i++)
        e = troupe_pack_uint(p, g->after[i]);
    return e;
}

/* ---- decode ---- */

void
troupe__gtx_step_fini(tc_step *s)
{
    for (unsigned o = 0; o < TROUPE_GTX_OPS_MAX; o++) {
        troupe_free(s->call[o].target);
        troupe_free(s->call[o].payload);
    }
    troupe_free(s->name);
    memset(s, 0, sizeof(*s));
}

void
troupe__gtx_free(tc_gtx *g)
{
    if (g == NULL)
        return;
    for (uint32_t i = 0; g->steps != NULL && i < g->n_steps; i++)
        troupe__gtx_step_fini(&g->steps[i]);
    troupe_free(g->steps);
    troupe_free(g->query.target);
    troupe_free(g->query.payload);
    troupe_free(g->reason);
    troupe_free(g->after);
    troupe_free(g);
}

/* A copy of s[0..n) with a NUL, or NULL (ENOMEM). */
static char *
dup_str(const char *s, size_t n)
{
    char *d = troupe_malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* The name at s[0..n) among names[1..count), its index, or 0. */
static unsigned
name_index(const char *const *names, unsigned count, const char *s, size_t n)
{
    for (unsigned i = 1; i < count; i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0)
            return i;
    return 0;
}

/* A call: nil (no such op) or [target, payload, state, attempts, last]. */
static troupe_err
read_call(troupe_reader *r, tc_call *c)
{
    if (troupe_read_try_nil(r))
        return TROUPE_OK;
    const char *t = NULL;
    const void *b = NULL;
    size_t tl = 0, bl = 0;
    uint32_t state = 0, last = 0;
    troupe_read_array_n(r, 5);
    troupe_read_str(r, TROUPE_TARGET_NAME_MAX, &t, &tl);
    troupe_read_bin(r, TROUPE_GTX_PAYLOAD_MAX, &b, &bl);
    troupe_read_u32(r, &state);
    troupe_read_u32(r, &c->attempts);
    if (troupe_read_u32(r, &last) != TROUPE_OK || tl == 0 ||
        memchr(t, '\0', tl) != NULL || state < TC_TODO || state > TC_REFUSED ||
        last > TROUPE_OUTCOME_UNKNOWN)
        return TROUPE_ECORRUPT;
    c->state = (tc_state)state;
    c->last = last;
    if ((c->target = dup_str(t, tl)) == NULL)
        return TROUPE_ENOMEM;
    if (bl > 0) {
        if ((c->payload = troupe_malloc(bl)) == NULL)
            return TROUPE_ENOMEM;
        memcpy(c->payload, b, bl);
    }
    c->payload_len = bl;
    return TROUPE_OK;
}

static troupe_err
read_steps(troupe_reader *r, tc_gtx *g)
{
    uint32_t n = 0;
    if (troupe_read_array(r, &n) != TROUPE_OK || n > TROUPE_GTX_STEPS_MAX)
        return TROUPE_ECORRUPT;
    if (n > 0 && (g->steps = troupe_calloc(n, sizeof(*g->steps))) == NULL)
        return TROUPE_ENOMEM;
    g->n_steps = n;
    unsigned k = n_ops(g->mode);
    for (uint32_t i = 0; i < n; i++) {
        if (troupe_read_array_n(&*r, k) != TROUPE_OK)
            return TROUPE_ECORRUPT;
        bool any = false;
        for (unsigned o = 0; o < k; o++) {
            troupe_err e = read_call(r, &g->steps[i].call[o]);
            if (e != TROUPE_OK)
                return e;
            any = any || g->steps[i].call[o].target != NULL;
        }
        if (!any)
            return TROUPE_ECORRUPT;
    }
    return TROUPE_OK;
}

static troupe_err
read_opts(troupe_reader *r, tc_opts *o)
{
    troupe_read_array_n(r, 5);
    troupe_read_int(r, &o->timeout_to_fail_ms);
    troupe_read_u32(r, &o->retry_limit);
    troupe_read_u32(r, &o->retry_min_ms);
    troupe_read_u32(r, &o->retry_max_ms);
    if (troupe_read_u32(r, &o->branch_timeout_ms) != TROUPE_OK ||
        o->timeout_to_fail_ms < 0 || o->retry_min_ms > o->retry_max_ms)
        return TROUPE_ECORRUPT;
    return TROUPE_OK;
}

/* A concurrent saga's order: one mask per step (the steps come first). */
static troupe_err
read_after(troupe_reader *r, tc_gtx *g)
{
    if (troupe_read_array_n(r, g->n_steps) != TROUPE_OK)
        return TROUPE_ECORRUPT;
    if ((g->after = troupe_calloc(g->n_steps > 0 ? g->n_steps : 1,
                                  sizeof(*g->after))) == NULL)
        return TROUPE_ENOMEM;
    for (uint32_t i = 0; i < g->n_steps; i++)
        if (troupe_read_uint(r, &g->after[i]) != TROUPE_OK)
            return TROUPE_ECORRUPT;
    return troupe__gtx_order_valid(g->after, g->n_steps) ? TROUPE_OK
                                                         : TROUPE_ECORRUPT;
}

/* A workflow's "wf": [hold, [[kind, name, version], ...]], one record per
 * step (the steps come first): a step's name 1..TROUPE_WF_NAME_MAX bytes,
 * its action present; a step alone has a compensation. */
static troupe_err
read_wf(troupe_reader *r, tc_gtx *g)
{
    uint32_t hold = 0;
    troupe_read_array_n(r, 2);
    troupe_read_u32(r, &hold);
    if (troupe_read_array_n(r, g->n_steps) != TROUPE_OK || hold > TC_HOLD_AWAIT)
        return TROUPE_ECORRUPT;
    g->hold = (tc_hold)hold;
    for (uint32_t i = 0; i < g->n_steps; i++) {
        tc_step *st = &g->steps[i];
        uint32_t kind = 0;
        int64_t ver = 0;
        const char *s = NULL;
        size_t n = 0;
        troupe_read_array_n(r, 3);
        troupe_read_u32(r, &kind);
        troupe_read_str(r, TROUPE_WF_NAME_MAX, &s, &n);
        if (troupe_read_int(r, &ver) != TROUPE_OK || kind < TC_WF_STEP ||
            kind > TC_WF_VERSION || n == 0 || memchr(s, '\0', n) != NULL ||
            ver < INT32_MIN || ver > INT32_MAX || st->call[0].target == NULL ||
            (kind != TC_WF_STEP && st->call[1].target != NULL) ||
            (kind == TC_WF_VERSION && st->call[0].state != TC_DONE))
            return TROUPE_ECORRUPT;
        st->kind = (tc_wf_kind)kind;
        st->version = (int32_t)ver;
        if ((st->name = dup_str(s, n)) == NULL)
            return TROUPE_ENOMEM;
    }
    return TROUPE_OK;
}

/* One field's value into g. "v" comes first (*format: what it said; the
 * rest is read only once it named one known); "mode" before "steps" and
 * "query"; "steps" before "after". */
static troupe_err
read_field(troupe_reader *r, int f, const bool *seen, tc_gtx *g,
           uint64_t *format)
{
    const char *s = NULL;
    size_t n = 0;
    uint64_t v = 0;
    if (f != F_V && !seen[F_V])
        return TROUPE_ECORRUPT;
    if ((f == F_STEPS || f == F_QUERY || f == F_STATUS) && !seen[F_MODE])
        return TROUPE_ECORRUPT;
    if (f == F_AFTER && (!seen[F_STEPS] || *format != 2))
        return TROUPE_ECORRUPT;
    if (f == F_WF && (!seen[F_STEPS] || *format != TROUPE_GTX_FORMAT_WORKFLOW))
        return TROUPE_ECORRUPT;
    switch (f) {
    case F_V:
        if (troupe_read_uint(r, &v) != TROUPE_OK || v == 0)
            return TROUPE_ECORRUPT;
        *format = v;
        return v == TROUPE_GTX_FORMAT || v == TROUPE_GTX_FORMAT_CONCURRENT ||
                       v == TROUPE_GTX_FORMAT_WORKFLOW
                   ? TROUPE_OK
                   : TROUPE_ENOTSUP;
    case F_AFTER:
        return read_after(r, g);
    case F_WF:
        return read_wf(r, g);
    case F_MODE:
        if (troupe_read_str(r, 16, &s, &n) != TROUPE_OK)
            return TROUPE_ECORRUPT;
        for (int m = TROUPE_MODE_SAGA; m <= TROUPE_MODE_WORKFLOW; m++) {
            const char *name = troupe_gtx_mode_name((troupe_gtx_mode)m);
            if (strlen(name) == n && memcmp(name, s, n) == 0)
                g->mode = (troupe_gtx_mode)m;
        }
        return g->mode != 0 ? TROUPE_OK : TROUPE_ECORRUPT;
    case F_STATUS:
        if (troupe_read_str(r, 16, &s, &n) != TROUPE_OK)
            return TROUPE_ECORRUPT;
        g->status = (tc_status)name_index(status_names, N_STATUS, s, n);
        return g->status != 0 ? TROUPE_OK : TROUPE_ECORRUPT;
    case F_STEPS:
        return read_steps(r, g);
    case F_REASON:
        if (troupe_read_try_nil(r))
            return TROUPE_OK;
        if (troupe_read_str(r, TROUPE_GTX_REASON_MAX, &s, &n) != TROUPE_OK ||
            memchr(s, '\0', n) != NULL)
            return TROUPE_ECORRUPT;
        return (g->reason = dup_str(s, n)) != NULL ? TROUPE_OK : TROUPE_ENOMEM;
    case F_QUERY:
        return read_call(r, &g->query);
    case F_ATTEMPTS:
        return troupe_read_u32(r, &g->attempts) == TROUPE_OK ? TROUPE_OK
                                                             : TROUPE_ECORRUPT;
    case F_DUE:
    case F_CREATED:
    case F_UPDATED: {
        int64_t *t = f == F_DUE       ? &g->due_ms
                     : f == F_CREATED ? &g->created_ms
                                      : &g->updated_ms;
        return troupe_read_int(r, t) == TROUPE_OK && *t >= 0 ? TROUPE_OK
                                                             : TROUPE_ECORRUPT;
    }
    case F_FINISHED:
        if (troupe_read_try_nil(r))
            return TROUPE_OK;
        return troupe_read_int(r, &g->finished_ms) == TROUPE_OK &&
                       g->finished_ms > 0
                   ? TROUPE_OK
                   : TROUPE_ECORRUPT;
    default:
        return read_opts(r, &g->opts);
    }
}

/* The field count format v has: 12, 13 for a concurrent saga's or a
 * workflow's. */
static uint32_t
fields_of(uint64_t v)
{
    return v == TROUPE_GTX_FORMAT ? N_FIELDS_1 : N_FIELDS_1 + 1;
}

/* The rules across fields, once all are read. */
static bool
consistent(const tc_gtx *g)
{
    if (troupe__gtx_final(g) != (g->finished_ms != 0))
        return false;
    /* only the modes with a phase before submit are ever prepared */
    if (g->status == TC_PREPARED &&
        (g->mode == TROUPE_MODE_SAGA || g->mode == TROUPE_MODE_WORKFLOW))
        return false;
    /* a message has a query-back call (with the payload its target
     * needs: an http one's url), a workflow its run (with its input), no
     * other mode has one */
    bool wf = g->mode == TROUPE_MODE_WORKFLOW;
    if ((g->mode == TROUPE_MODE_MSG || wf) != (g->query.target != NULL))
        return false;
    if (g->after != NULL && g->mode != TROUPE_MODE_SAGA)
        return false;
    return wf || g->hold == TC_HOLD_NONE;
}

troupe_err
troupe__gtx_decode(const void *doc, size_t len, tc_gtx **out)
{
    if (out == NULL)
        return TROUPE_EINVAL;
    *out = NULL;
    tc_gtx *g = troupe_calloc(1, sizeof(*g));
    if (g == NULL)
        return TROUPE_ENOMEM;
    troupe_reader r;
    troupe_reader_init(&r, doc, len);
    bool seen[N_FIELDS] = {false};
    uint32_t n = 0;
    uint64_t format = 0;
    troupe_err e = troupe_read_map(&r, &n) == TROUPE_OK &&
                           (n == N_FIELDS_1 || n == N_FIELDS_1 + 1)
                       ? TROUPE_OK
                       : TROUPE_ECORRUPT;
    for (uint32_t i = 0; e == TROUPE_OK && i < n; i++) {
        const char *k = NULL;
        size_t kl = 0;
        int f = -1;
        if (troupe_read_str(&r, 16, &k, &kl) == TROUPE_OK)
            for (int j = 0; j < N_FIELDS && f < 0; j++)
                if (strlen(field_names[j]) == kl &&
                    memcmp(field_names[j], k, kl) == 0)
                    f = j;
        if (f < 0 || seen[f]) {
            e = TROUPE_ECORRUPT;
            break;
        }
        e = read_field(&r, f, seen, g, &format);
        seen[f] = true;
        if (e == TROUPE_OK && f == F_V && fields_of(format) != n)
            e = TROUPE_ECORRUPT;
    }
    if (e == TROUPE_OK && (troupe_read_end(&r) != TROUPE_OK || !consistent(g) ||
                           (g->mode == TROUPE_MODE_WORKFLOW) !=
                               (format == TROUPE_GTX_FORMAT_WORKFLOW)))
        e = TROUPE_ECORRUPT;
    if (e != TROUPE_OK) {
        troupe__gtx_free(g);
        return e == TROUPE_ENOMEM || e == TROUPE_ENOTSUP
                   ? e
                   : troupe__errf(TROUPE_ECORRUPT,
                                  "gtx: a stored document breaks its format");
    }
    *out = g;
    return TROUPE_OK;
}
