/* A global transaction's stored document (actors/coord/src/format.c,
 * troupe/internal/gtx.h): every mode round-trips; every broken rule of a
 * document read from the disk is ECORRUPT (a later format ENOTSUP), with
 * nothing half taken. */
#include <stdio.h>
#include <string.h>

#include "troupe/alloc.h"
#include "troupe/internal/gtx.h"
#include "troupe/pack.h"
#include "tsupport.h"

static char *
sdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = troupe_malloc(n);
    ck_assert_ptr_nonnull(d);
    memcpy(d, s, n);
    return d;
}

static void
set_call(tc_call *c, const char *target, const char *payload, tc_state st,
         uint32_t attempts, uint32_t last)
{
    c->target = sdup(target);
    c->payload_len = payload ? strlen(payload) : 0;
    c->payload = payload ? (uint8_t *)sdup(payload) : NULL;
    c->state = st;
    c->attempts = attempts;
    c->last = last;
}

/* A transaction of mode m with n steps, every op of each step set. */
static tc_gtx *
make(troupe_gtx_mode m, uint32_t n)
{
    tc_gtx *g = troupe_calloc(1, sizeof(*g));
    ck_assert_ptr_nonnull(g);
    g->mode = m;
    g->status = TC_SUBMITTED;
    g->n_steps = n;
    g->steps = n ? troupe_calloc(n, sizeof(*g->steps)) : NULL;
    for (uint32_t i = 0; i < n; i++)
        for (unsigned o = 0; troupe_gtx_op_at(m, o) != NULL; o++)
            set_call(&g->steps[i].call[o], "bank.t", i % 2 ? "{}" : NULL,
                     o == 0 ? TC_DONE : TC_TODO, o == 0 ? 2 : 0,
                     o == 0 ? TROUPE_OUTCOME_SUCCESS : 0);
    if (m == TROUPE_MODE_MSG)
        set_call(&g->query, "shop.query", NULL, TC_TODO, 0, 0);
    if (m == TROUPE_MODE_WORKFLOW) {
        set_call(&g->query, "wf.order", "{}", TC_TODO, 0, 0);
        for (uint32_t i = 0; i < n; i++) {
            g->steps[i].kind = TC_WF_STEP;
            g->steps[i].name = sdup(i % 2 ? "pay" : "reserve");
        }
    }
    g->attempts = 3;
    g->due_ms = 1700000000123;
    g->created_ms = 1700000000000;
    g->updated_ms = 1700000000100;
    g->opts = (tc_opts){.timeout_to_fail_ms = 60000,
                        .retry_limit = 5,
                        .retry_min_ms = 10000,
                        .retry_max_ms = 300000,
                        .branch_timeout_ms = 30000};
    return g;
}

/* g's document, in a buffer the caller frees. */
static uint8_t *
enc(const tc_gtx *g, size_t *len)
{
    troupe_packer p;
    troupe_pack_init(&p);
    ck_assert_ok(troupe__gtx_encode(g, &p));
    size_t n = 0;
    const void *d = troupe_pack_data(&p, &n);
    uint8_t *out = troupe_malloc(n);
    memcpy(out, d, n);
    troupe_pack_fini(&p);
    *len = n;
    return out;
}

static void
same_call(const tc_call *a, const tc_call *b)
{
    ck_assert((a->target == NULL) == (b->target == NULL));
    if (a->target == NULL)
        return;
    ck_assert_str_eq(a->target, b->target);
    ck_assert_uint_eq(a->payload_len, b->payload_len);
    if (a->payload_len)
        ck_assert(memcmp(a->payload, b->payload, a->payload_len) == 0);
    ck_assert_int_eq(a->state, b->state);
    ck_assert_uint_eq(a->attempts, b->attempts);
    ck_assert_uint_eq(a->last, b->last);
}

static void
round_trip(tc_gtx *g)
{
    size_t n = 0, n2 = 0;
    uint8_t *d = enc(g, &n);
    tc_gtx *h = NULL;
    ck_assert_ok(troupe__gtx_decode(d, n, &h));
    ck_assert_int_eq(h->mode, g->mode);
    ck_assert_int_eq(h->status, g->status);
    ck_assert_uint_eq(h->n_steps, g->n_steps);
    for (uint32_t i = 0; i < g->n_steps; i++)
        for (unsigned o = 0; o < TROUPE_GTX_OPS_MAX; o++)
            same_call(&h->steps[i].call[o], &g->steps[i].call[o]);
    same_call(&h->query, &g->query);
    ck_assert((h->reason == NULL) == (g->reason == NULL));
    if (g->reason)
        ck_assert_str_eq(h->reason, g->reason);
    ck_assert_uint_eq(h->attempts, g->attempts);
    ck_assert_int_eq(h->due_ms, g->due_ms);
    ck_assert_int_eq(h->created_ms, g->created_ms);
    ck_assert_int_eq(h->updated_ms, g->updated_ms);
    ck_assert_int_eq(h->finished_ms, g->finished_ms);
    ck_assert(memcmp(&h->opts, &g->opts, sizeof(g->opts)) == 0);
    ck_assert((h->after == NULL) == (g->after == NULL));
    for (uint32_t i = 0; g->after != NULL && i < g->n_steps; i++)
        ck_assert_uint_eq(h->after[i], g->after[i]);
    uint8_t *d2 = enc(h, &n2); /* the encoding is stable */
    ck_assert_uint_eq(n, n2);
    ck_assert(memcmp(d, d2, n) == 0);
    troupe_free(d);
    troupe_free(d2);
    troupe__gtx_free(h);
}

START_TEST(test_every_mode_round_trips)
{
    for (int m = TROUPE_MODE_SAGA; m <= TROUPE_MODE_WORKFLOW; m++) {
        tc_gtx *g = make((troupe_gtx_mode)m, (uint32_t)m);
        round_trip(g);
        g->status = TC_FAILED;
        g->finished_ms = 1700000000200;
        g->reason = sdup("branch 01 action: FAILURE");
        round_trip(g);
        troupe__gtx_free(g);
    }
    /* no steps (a tcc with no branch yet), one op of a step absent */
    tc_gtx *g = make(TROUPE_MODE_TCC, 0);
    g->status = TC_PREPARED;
    round_trip(g);
    troupe__gtx_free(g);
    g = make(TROUPE_MODE_SAGA, TROUPE_GTX_STEPS_MAX);
    troupe_free(g->steps[3].call[1].target);
    g->steps[3].call[1].target = NULL;
    round_trip(g);
    /* a concurrent saga (format 2): a chain over all 64 steps */
    g->after = troupe_calloc(TROUPE_GTX_STEPS_MAX, sizeof(*g->after));
    for (uint32_t i = 1; i < TROUPE_GTX_STEPS_MAX; i++)
        g->after[i] = (uint64_t)1 << (i - 1);
    round_trip(g);
    troupe__gtx_free(g);
}
END_TEST

/* ---- broken documents ---- */

static void
refused(const uint8_t *d, size_t n, troupe_err want, const char *what)
{
    tc_gtx *h = (tc_gtx *)1;
    troupe_err e = troupe__gtx_decode(d, n, &h);
    ck_assert_msg(e == want, "%s: %s, want %s", what, troupe_err_name(e),
                  troupe_err_name(want));
    ck_assert_ptr_null(h);
}

/* g changed by mutate, encoded, must be refused. */
static void
refused_struct(troupe_gtx_mode m, void (*mutate)(tc_gtx *), const char *what)
{
    tc_gtx *g = make(m, 2);
    mutate(g);
    size_t n = 0;
    uint8_t *d = enc(g, &n);
    refused(d, n, TROUPE_ECORRUPT, what);
    troupe_free(d);
    troupe__gtx_free(g);
}

static void
m_saga_prepared(tc_gtx *g)
{
    g->status = TC_PREPARED;
}
static void
m_final_unfinished(tc_gtx *g)
{
    g->status = TC_SUCCEED;
}
static void
m_finished_not_final(tc_gtx *g)
{
    g->finished_ms = 5;
}
static void
m_empty_step(tc_gtx *g)
{
    for (unsigned o = 0; o < TROUPE_GTX_OPS_MAX; o++) {
        troupe_free(g->steps[1].call[o].target);
        g->steps[1].call[o].target = NULL;
    }
}
static void
m_empty_target(tc_gtx *g)
{
    g->steps[0].call[0].target[0] = '\0';
}
static void
m_state_zero(tc_gtx *g)
{
    g->steps[0].call[0].state = 0;
}
static void
m_state_high(tc_gtx *g)
{
    g->steps[0].call[0].state = TC_REFUSED + 1;
}
static void
m_last_high(tc_gtx *g)
{
    g->steps[1].call[0].last = TROUPE_OUTCOME_UNKNOWN + 1;
}
static void
m_query_lost(tc_gtx *g)
{
    troupe_free(g->query.target);
    g->query.target = NULL;
}
static void
m_query_added(tc_gtx *g)
{
    set_call(&g->query, "q", NULL, TC_TODO, 0, 0);
}
static void
m_negative_due(tc_gtx *g)
{
    g->due_ms = -1;
}
static void
m_retry_inverted(tc_gtx *g)
{
    g->opts.retry_min_ms = g->opts.retry_max_ms + 1;
}
static void
m_too_many_steps(tc_gtx *g)
{
    tc_step *s =
        troupe_realloc(g->steps, (TROUPE_GTX_STEPS_MAX + 1) * sizeof(*s));
    ck_assert_ptr_nonnull(s);
    for (uint32_t i = g->n_steps; i <= TROUPE_GTX_STEPS_MAX; i++) {
        memset(&s[i], 0, sizeof(s[i]));
        set_call(&s[i].call[0], "t", NULL, TC_TODO, 0, 0);
    }
    g->steps = s;
    g->n_steps = TROUPE_GTX_STEPS_MAX + 1;
}
static void
m_payload_too_big(tc_gtx *g)
{
    troupe_free(g->steps[0].call[0].payload);
    g->steps[0].call[0].payload = troupe_calloc(1, TROUPE_GTX_PAYLOAD_MAX + 1);
    g->steps[0].call[0].payload_len = TROUPE_GTX_PAYLOAD_MAX + 1;
}

START_TEST(test_a_document_breaking_a_rule_is_ecorrupt)
{
    refused_struct(TROUPE_MODE_SAGA, m_saga_prepared, "a prepared saga");
    refused_struct(TROUPE_MODE_SAGA, m_final_unfinished,
                   "final, no finished_ms");
    refused_struct(TROUPE_MODE_TCC, m_finished_not_final,
                   "finished_ms, not final");
    refused_struct(TROUPE_MODE_SAGA, m_empty_step, "a step with no op");
    refused_struct(TROUPE_MODE_SAGA, m_empty_target, "an empty target");
    refused_struct(TROUPE_MODE_TCC, m_state_zero, "state 0");
    refused_struct(TROUPE_MODE_TCC, m_state_high, "state 5");
    refused_struct(TROUPE_MODE_XA, m_last_high, "outcome 5");
    refused_struct(TROUPE_MODE_MSG, m_query_lost, "a message, no query");
    refused_struct(TROUPE_MODE_SAGA, m_query_added, "a saga with a query");
    refused_struct(TROUPE_MODE_SAGA, m_negative_due, "due_ms -1");
    refused_struct(TROUPE_MODE_SAGA, m_retry_inverted, "retry min > max");
    refused_struct(TROUPE_MODE_SAGA, m_too_many_steps, "65 steps");
    refused_struct(TROUPE_MODE_SAGA, m_payload_too_big, "a 64 KiB + 1 payload");
}
END_TEST

/* The good document rewritten field by field: DROP leaves the field out,
 * TWICE repeats it and leaves out the field named by raw (the count of
 * pairs stays right), RENAME calls it "zz", REPLACE gives it raw as its
 * value. */
enum rewrite { KEEP, DROP, TWICE, RENAME, REPLACE };

static uint8_t *
rewrite(const uint8_t *d, size_t n, const char *field, enum rewrite how,
        const void *raw, size_t raw_len, size_t *out_len)
{
    troupe_reader r;
    troupe_reader_init(&r, d, n);
    uint32_t pairs = 0;
    ck_assert_ok(troupe_read_map(&r, &pairs));
    troupe_packer p;
    troupe_pack_init(&p);
    uint32_t out_pairs = how == DROP ? pairs - 1 : pairs;
    troupe_pack_map(&p, out_pairs);
    for (uint32_t i = 0; i < pairs; i++) {
        const char *k = NULL;
        size_t kl = 0;
        const void *v = NULL;
        size_t vl = 0;
        ck_assert_ok(troupe_read_str(&r, 64, &k, &kl));
        ck_assert_ok(troupe_read_raw(&r, &v, &vl));
        bool hit = strlen(field) == kl && memcmp(field, k, kl) == 0;
        if (hit && how == DROP)
            continue;
        if (how == TWICE && strlen(raw) == kl && memcmp(raw, k, kl) == 0)
            continue;
        troupe_pack_str(&p, hit && how == RENAME ? "zz" : k,
                        hit && how == RENAME ? 2 : kl);
        if (hit && how == REPLACE)
            troupe_pack_raw(&p, raw, raw_len);
        else
            troupe_pack_raw(&p, v, vl);
        if (hit && how == TWICE) {
            troupe_pack_str(&p, k, kl);
            troupe_pack_raw(&p, v, vl);
        }
    }
    size_t len = 0;
    const void *b = troupe_pack_data(&p, &len);
    ck_assert_ok(p.err);
    uint8_t *out = troupe_malloc(len);
    memcpy(out, b, len);
    troupe_pack_fini(&p);
    *out_len = len;
    return out;
}

/* A concurrent saga of 3 steps whose order is after[] = {0, a1, a2}. */
static tc_gtx *
concurrent(uint64_t a1, uint64_t a2)
{
    tc_gtx *g = make(TROUPE_MODE_SAGA, 3);
    g->after = troupe_calloc(3, sizeof(*g->after));
    g->after[1] = a1;
    g->after[2] = a2;
    return g;
}

START_TEST(test_a_concurrent_sagas_order_is_checked_when_read)
{
    static const struct {
        uint64_t a1, a2;
        const char *what;
    } bad[] = {{1u << 1, 0, "a step after itself"},
               {1u << 2, 1u << 1, "a cycle of two"},
               {0, 1u << 3, "a step past the last"},
               {(uint64_t)1 << 63, 0, "bit 63 of three steps"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tc_gtx *g = concurrent(bad[i].a1, bad[i].a2);
        ck_assert(!troupe__gtx_order_valid(g->after, 3));
        size_t n = 0;
        uint8_t *d = enc(g, &n);
        refused(d, n, TROUPE_ECORRUPT, bad[i].what);
        troupe_free(d);
        troupe__gtx_free(g);
    }
    uint64_t cycle3[3] = {1u << 2, 1u << 0, 1u << 1};
    ck_assert(!troupe__gtx_order_valid(cycle3, 3));
    uint64_t diamond[4] = {0, 1, 1, 6};
    ck_assert(troupe__gtx_order_valid(diamond, 4));
    /* the format must say 2 for the order to be read, and 2 needs it */
    tc_gtx *g = concurrent(1, 3);
    size_t n = 0, bl = 0;
    uint8_t *d = enc(g, &n);
    troupe__gtx_free(g);
    uint8_t *bad1 = rewrite(d, n, "v", REPLACE, "\x01", 1, &bl);
    refused(bad1, bl, TROUPE_ECORRUPT, "format 1 with an order");
    troupe_free(bad1);
    uint8_t *bad3 = rewrite(d, n, "v", REPLACE, "\x03", 1, &bl);
    refused(bad3, bl, TROUPE_ECORRUPT, "format 3 (a workflow's) with an order");
    troupe_free(bad3);
    uint8_t *bad4 = rewrite(d, n, "v", REPLACE, "\x04", 1, &bl);
    refused(bad4, bl, TROUPE_ENOTSUP, "format 4");
    troupe_free(bad4);
    uint8_t *short_ = rewrite(d, n, "after", REPLACE, "\x92\x00\x01", 3, &bl);
    refused(short_, bl, TROUPE_ECORRUPT, "an order of two for three steps");
    troupe_free(short_);
    troupe_free(d);
}
END_TEST

START_TEST(test_a_malformed_document_is_ecorrupt)
{
    static const char *const fields[] = {
        "v",          "mode",       "status",      "steps",
        "reason",     "query",      "attempts",    "due_ms",
        "created_ms", "updated_ms", "finished_ms", "opts"};
    tc_gtx *g = make(TROUPE_MODE_MSG, 2);
    size_t n = 0;
    uint8_t *good = enc(g, &n);
    troupe__gtx_free(g);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        static const enum rewrite hows[] = {DROP, TWICE, RENAME};
        for (size_t h = 0; h < 3; h++) {
            size_t bl = 0;
            const char *other = fields[(i + 1) % 12];
            uint8_t *bad = rewrite(good, n, fields[i], hows[h], other, 0, &bl);
            char what[64];
            snprintf(what, sizeof(what), "%s %s", fields[i],
                     h == 0   ? "missing"
                     : h == 1 ? "twice"
                              : "renamed");
            refused(bad, bl, TROUPE_ECORRUPT, what);
            troupe_free(bad);
        }
        /* every field with a value of the wrong type: a map */
        size_t bl = 0;
        uint8_t *bad = rewrite(good, n, fields[i], REPLACE, "\x80", 1, &bl);
        refused(bad, bl, TROUPE_ECORRUPT, fields[i]);
        troupe_free(bad);
    }
    static const struct {
        const char *field, *raw, *what;
        size_t len;
        troupe_err want;
    } vals[] = {
        {"v", "\x02", "format 2 without its order", 1, TROUPE_ECORRUPT},
        {"v", "\x03", "format 3 without its records", 1, TROUPE_ECORRUPT},
        {"v", "\x04", "format 4", 1, TROUPE_ENOTSUP},
        {"v", "\x00", "format 0", 1, TROUPE_ECORRUPT},
        {"mode", "\xa4saga", "a message with saga's mode", 5, TROUPE_ECORRUPT},
        {"mode", "\xa3sag", "mode sag", 4, TROUPE_ECORRUPT},
        {"status",
         "\xa4"
         "done",
         "status done", 5, TROUPE_ECORRUPT},
        {"steps", "\x91\x92\xc0\xc0", "a step of two ops for msg", 4,
         TROUPE_ECORRUPT},
        {"attempts", "\xcf\x00\x00\x00\x01\x00\x00\x00\x00",
         "attempts over 32 bits", 9, TROUPE_ECORRUPT},
        {"finished_ms", "\x00", "finished_ms 0", 1, TROUPE_ECORRUPT},
        {"reason", "\xa2\x61\x00", "a reason with a NUL", 3, TROUPE_ECORRUPT},
        {"opts", "\x94\x00\x00\x00\x00", "opts of four", 5, TROUPE_ECORRUPT},
    };
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        size_t bl = 0;
        uint8_t *bad = rewrite(good, n, vals[i].field, REPLACE, vals[i].raw,
                               vals[i].len, &bl);
        refused(bad, bl, vals[i].want, vals[i].what);
        troupe_free(bad);
    }
    /* trailing bytes, truncation at every length, not a map */
    uint8_t *longer = troupe_malloc(n + 1);
    memcpy(longer, good, n);
    longer[n] = 0xc0;
    refused(longer, n + 1, TROUPE_ECORRUPT, "a trailing nil");
    troupe_free(longer);
    for (size_t k = 0; k < n; k++)
        refused(good, k, TROUPE_ECORRUPT, "truncated");
    refused((const uint8_t *)"\x90", 1, TROUPE_ECORRUPT, "an array");
    tc_gtx *h = NULL;
    ck_assert_ok(troupe__gtx_decode(good, n, &h));
    troupe__gtx_free(h);
    ck_assert_err(troupe__gtx_decode(good, n, NULL), TROUPE_EINVAL);
    troupe_free(good);
}
END_TEST

/* ---- the modes' rules (machine.c), on an injected clock ---- */

/* g with retries of 10 s doubling to 300 s and no limits. */
static tc_gtx *
fresh(troupe_gtx_mode m, uint32_t n, tc_status st)
{
    tc_gtx *g = make(m, n);
    for (uint32_t i = 0; i < n; i++)
        for (unsigned o = 0; o < TROUPE_GTX_OPS_MAX; o++)
            if (g->steps[i].call[o].target != NULL) {
                g->steps[i].call[o].state = TC_TODO;
                g->steps[i].call[o].attempts = 0;
                g->steps[i].call[o].last = 0;
            }
    g->status = st;
    g->attempts = 0;
    g->due_ms = 0;
    g->created_ms = 0;
    g->opts = (tc_opts){.retry_min_ms = TROUPE_GTX_RETRY_MIN_MS,
                        .retry_max_ms = TROUPE_GTX_RETRY_MAX_MS,
                        .branch_timeout_ms = 30000};
    return g;
}

/* plan at now: the call it runs (asserted to be one). */
static tc_ref
runs(tc_gtx *g, int64_t now)
{
    tc_plan p;
    troupe__gtx_plan(g, now, &p);
    ck_assert_msg(p.n_run == 1, "not one call runs at %lld (status %d)",
                  (long long)now, g->status);
    return p.run[0];
}

static void
idle(tc_gtx *g, int64_t now)
{
    tc_plan p;
    troupe__gtx_plan(g, now, &p);
    ck_assert_msg(p.n_run == 0, "step %u op %u runs at %lld", p.run[0].step,
                  p.run[0].op, (long long)now);
}

START_TEST(test_backoff_doubles_to_its_cap)
{
    tc_opts o = {.retry_min_ms = 10000, .retry_max_ms = 300000};
    static const int64_t want[] = {10000,  10000,  20000,  40000, 80000,
                                   160000, 300000, 300000, 300000};
    for (uint32_t n = 0; n < 9; n++)
        ck_assert_int_eq(troupe__gtx_backoff(&o, n), want[n]);
    ck_assert_int_eq(troupe__gtx_backoff(&o, UINT32_MAX), 300000);
}
END_TEST

START_TEST(test_a_saga_runs_its_actions_in_order_and_succeeds)
{
    tc_gtx *g = fresh(TROUPE_MODE_SAGA, 3, TC_SUBMITTED);
    for (uint32_t i = 0; i < 3; i++) {
        tc_ref r = runs(g, 5);
        ck_assert_uint_eq(r.step, i);
        ck_assert_uint_eq(r.op, 0);
        idle(g, 5); /* one at a time */
        ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_SUCCESS, 6));
        /* an outcome heard twice changes nothing */
        ck_assert_err(troupe__gtx_apply(g, r, TROUPE_OUTCOME_FAILURE, 6),
                      TROUPE_ESTATE);
    }
    tc_plan p;
    troupe__gtx_plan(g, 7, &p);
    ck_assert(p.n_run == 0 && p.changed);
    ck_assert_int_eq(g->status, TC_SUCCEED);
    ck_assert_int_eq(g->finished_ms, 7);
    for (uint32_t i = 0; i < 3; i++)
        ck_assert_int_eq(g->steps[i].call[1].state, TC_TODO); /* none undone */
    idle(g, 8);
    troupe__gtx_free(g);
}
END_TEST

/* FAILURE of an action aborts with a reason naming the branch, and every
 * step is compensated in reverse, the failed one and those never run
 * too; a failing compensation is retried, never given up. */
START_TEST(test_a_saga_failure_compensates_every_step_in_reverse)
{
    tc_gtx *g = fresh(TROUPE_MODE_SAGA, 3, TC_SUBMITTED);
    ck_assert_ok(troupe__gtx_apply(g, runs(g, 1), TROUPE_OUTCOME_SUCCESS, 1));
    tc_ref r = runs(g, 2);
    ck_assert_uint_eq(r.step, 1);
    ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_FAILURE, 2));
    ck_assert_int_eq(g->status, TC_ABORTING);
    ck_assert_str_eq(g->reason, "branch 02 action: FAILURE");
    int64_t now = 3;
    for (int i = 2; i >= 0; i--) {
        r = runs(g, now);
        ck_assert_uint_eq(r.step, (uint32_t)i);
        ck_assert_uint_eq(r.op, 1);
        /* the middle compensation fails twice first */
        for (int k = 0; i == 1 && k < 2; k++) {
            ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_FAILURE, now));
            ck_assert_int_eq(g->status, TC_ABORTING);
            ck_assert_int_eq(g->due_ms, now + 10000 * (k + 1));
            idle(g, g->due_ms - 1);
            now = g->due_ms;
            r = runs(g, now);
            ck_assert_uint_eq(r.step, 1);
        }
        ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_SUCCESS, now));
    }
    ck_assert_int_eq(g->steps[2].call[0].state, TC_TODO); /* never ran */
    tc_plan p;
    troupe__gtx_plan(g, now, &p);
    ck_assert_int_eq(g->status, TC_FAILED);
    ck_assert_str_eq(g->reason, "branch 02 action: FAILURE");
    troupe__gtx_free(g);
}
END_TEST

/* plan at now: the calls it runs, as a bit per step (all of op). */
static uint64_t
runs_set(tc_gtx *g, int64_t now, unsigned op)
{
    tc_plan p;
    troupe__gtx_plan(g, now, &p);
    uint64_t set = 0;
    for (uint32_t i = 0; i < p.n_run; i++) {
        ck_assert_uint_eq(p.run[i].op, op);
        ck_assert_int_eq(g->steps[p.run[i].step].call[op].state, TC_DOING);
        set |= (uint64_t)1 << p.run[i].step;
    }
    return set;
}

static void
answer(tc_gtx *g, uint32_t step, unsigned op, troupe_outcome o, int64_t now)
{
    ck_assert_ok(troupe__gtx_apply(g, (tc_ref){step, op}, o, now));
}

/* Concurrent steps: every action whose dependencies succeeded runs at
 * once; one waiting for two runs after both and only then; the saga
 * succeeds when all did. */
START_TEST(test_concurrent_actions_run_once_their_dependencies_succeeded)
{
    uint64_t after[4] = {0, 0, 0x3, 0x4}; /* 03 after 01, 02; 04 after 03 */
    tc_gtx *g = fresh(TROUPE_MODE_SAGA, 4, TC_SUBMITTED);
    g->after = troupe_calloc(4, sizeof(*g->after));
    memcpy(g->after, after, sizeof(after));
    ck_assert_uint_eq(runs_set(g, 1, 0), 0x3); /* 01 and 02 at once */
    ck_assert_uint_eq(runs_set(g, 1, 0), 0);   /* nothing twice */
    answer(g, 0, 0, TROUPE_OUTCOME_SUCCESS, 2);
    ck_assert_uint_eq(runs_set(g, 2, 0), 0); /* 03 still waits for 02 */
    answer(g, 1, 0, TROUPE_OUTCOME_SUCCESS, 3);
    ck_assert_uint_eq(runs_set(g, 3, 0), 0x4);
    answer(g, 2, 0, TROUPE_OUTCOME_SUCCESS, 4);
    ck_assert_uint_eq(runs_set(g, 4, 0), 0x8);
    answer(g, 3, 0, TROUPE_OUTCOME_SUCCESS, 5);
    ck_assert_int_eq(g->status, TC_SUBMITTED);
    ck_assert_uint_eq(runs_set(g, 6, 0), 0);
    ck_assert_int_eq(g->status, TC_SUCCEED);
    ck_assert_int_eq(g->finished_ms, 6);
    troupe__gtx_free(g);

    /* no order at all: every action at once */
    g = fresh(TROUPE_MODE_SAGA, 3, TC_SUBMITTED);
    g->after = troupe_calloc(3, sizeof(*g->after));
    ck_assert_uint_eq(runs_set(g, 1, 0), 0x7);
    troupe__gtx_free(g);
}
END_TEST

/* A FAILURE aborts with the branch named; going back, a step's
 * compensation waits until its own action settled and every step that
 * waits for it has been compensated; the failed one and those never run
 * are compensated too. */
START_TEST(test_concurrent_compensations_run_in_reverse_dependency_order)
{
    uint64_t after[3] = {0, 0, 0x3}; /* 03 after 01 and 02 */
    tc_gtx *g = fresh(TROUPE_MODE_SAGA, 3, TC_SUBMITTED);
    g->after = troupe_calloc(3, sizeof(*g->after));
    memcpy(g->after, after, sizeof(after));
    ck_assert_uint_eq(runs_set(g, 1, 0), 0x3);
    answer(g, 1, 0, TROUPE_OUTCOME_FAILURE, 2); /* 01 still in flight */
    ck_assert_int_eq(g->status, TC_ABORTING);
    ck_assert_str_eq(g->reason, "branch 02 action: FAILURE");
    /* 03 never ran: its compensation first; 01's waits for its action */
    ck_assert_uint_eq(runs_set(g, 2, 1), 0x4);
    ck_assert_uint_eq(runs_set(g, 2, 1), 0);
    answer(g, 2, 1, TROUPE_OUTCOME_SUCCESS, 3);
    ck_assert_uint_eq(runs_set(g, 3, 1), 0x2); /* 02's; 01 in flight */
    /* 01's action answers late: recorded; its compensation may go */
    answer(g, 0, 0, TROUPE_OUTCOME_SUCCESS, 4);
    ck_assert_int_eq(g->steps[0].call[0].state, TC_DONE);
    ck_assert_uint_eq(runs_set(g, 4, 1), 0x1);
    /* a failing compensation is retried after its backoff */
    answer(g, 0, 1, TROUPE_OUTCOME_FAILURE, 5);
    ck_assert_int_eq(g->due_ms, 5 + 10000);
    answer(g, 1, 1, TROUPE_OUTCOME_SUCCESS, 6);
    ck_assert_uint_eq(runs_set(g, 10004, 1), 0);
    ck_assert_uint_eq(runs_set(g, 10005, 1), 0x1);
    answer(g, 0, 1, TROUPE_OUTCOME_SUCCESS, 10006);
    ck_assert_uint_eq(runs_set(g, 10007, 1), 0);
    ck_assert_int_eq(g->status, TC_FAILED);
    ck_assert_int_eq(g->steps[2].call[0].state, TC_TODO); /* never ran */
    troupe__gtx_free(g);
}
END_TEST

/* Concurrent calls share the due time: a call to retry waits for the
 * earliest backoff, a call never run does not wait at all. */
START_TEST(test_concurrent_retries_share_the_earliest_due_time)
{
    uint64_t after[3] = {0, 0, 0x1}; /* 03 after 01 */
    tc_gtx *g = fresh(TROUPE_MODE_SAGA, 3, TC_SUBMITTED);
    g->after = troupe_calloc(3, sizeof(*g->after));
    memcpy(g->after, after, sizeof(after));
    ck_assert_uint_eq(runs_set(g, 100, 0), 0x3);
    answer(g, 1, 0, TROUPE_OUTCOME_UNKNOWN, 100); /* due 10100 */
    answer(g, 0, 0, TROUPE_OUTCOME_SUCCESS, 5000);
    ck_assert_uint_eq(runs_set(g, 5000, 0), 0x4);  /* 03 at once */
    ck_assert_int_eq(g->due_ms, 10100);            /* 02 still waits */
    answer(g, 2, 0, TROUPE_OUTCOME_ONGOING, 6000); /* 16000: later */
    ck_assert_int_eq(g->due_ms, 10100);
    ck_assert_uint_eq(runs_set(g, 10099, 0), 0);
    ck_assert_uint_eq(runs_set(g, 10100, 0), 0x6); /* both retried */
    ck_assert_int_eq(g->due_ms, 0);
    ck_assert_int_eq(g->status, TC_SUBMITTED); /* never compensated */
    troupe__gtx_free(g);
}
END_TEST

/* UNKNOWN and ONGOING retry the same action with backoff and never
 * compensate; a retry limit aborts with a reason. */
START_TEST(test_unknown_retries_with_backoff_and_never_compensates)
{
    tc_gtx *g = fresh(TROUPE_MODE_SAGA, 2, TC_SUBMITTED);
    int64_t now = 100;
    static const int64_t waits[] = {10000,  20000,  40000, 80000,
                                    160000, 300000, 300000};
    for (size_t k = 0; k < sizeof(waits) / sizeof(waits[0]); k++) {
        tc_ref r = runs(g, now);
        ck_assert_uint_eq(r.step, 0);
        ck_assert_uint_eq(r.op, 0);
        ck_assert_ok(troupe__gtx_apply(
            g, r, k % 2 ? TROUPE_OUTCOME_ONGOING : TROUPE_OUTCOME_UNKNOWN,
            now));
        ck_assert_int_eq(g->status, TC_SUBMITTED);
        ck_assert_int_eq(g->due_ms, now + waits[k]);
        idle(g, g->due_ms - 1);
        now = g->due_ms;
    }
    ck_assert_uint_eq(g->steps[0].call[0].attempts, 7);
    ck_assert_uint_eq(g->attempts, 7);
    ck_assert_int_eq(g->steps[0].call[1].state, TC_TODO);
    troupe__gtx_free(g);

    g = fresh(TROUPE_MODE_SAGA, 2, TC_SUBMITTED);
    g->opts.retry_limit = 3;
    now = 0;
    for (int k = 0; k < 3; k++) {
        tc_ref r = runs(g, now);
        ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_UNKNOWN, now));
        now = g->due_ms;
    }
    ck_assert_int_eq(g->status, TC_ABORTING);
    ck_assert_str_eq(g->reason, "branch 01 action: no answer after 3 attempts");
    ck_assert_uint_eq(runs(g, now).step, 1); /* compensations, reverse */
    troupe__gtx_free(g);
}
END_TEST

START_TEST(test_a_saga_past_its_timeout_to_fail_aborts)
{
    tc_gtx *g = fresh(TROUPE_MODE_SAGA, 2, TC_SUBMITTED);
    g->created_ms = 1000;
    g->opts.timeout_to_fail_ms = 5000;
    tc_ref r = runs(g, 1000);
    ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_UNKNOWN, 1000));
    idle(g, 5999);
    ck_assert_int_eq(g->status, TC_SUBMITTED);
    tc_plan p;
    troupe__gtx_plan(g, 6000, &p);
    ck_assert(p.changed && p.n_run > 0);
    ck_assert_int_eq(g->status, TC_ABORTING);
    ck_assert_str_eq(g->reason,
                     "submitted for longer than its timeout-to-fail");
    ck_assert_uint_eq(p.run[0].step, 1);
    ck_assert_uint_eq(p.run[0].op, 1);
    troupe__gtx_free(g);
}
END_TEST

/* An action in flight when its saga starts aborting answers late: it is
 * recorded and moves nothing; bad references are EINVAL. */
START_TEST(test_late_and_bad_outcomes_change_nothing)
{
    tc_gtx *g = fresh(TROUPE_MODE_SAGA, 2, TC_SUBMITTED);
    g->opts.timeout_to_fail_ms = 10;
    tc_ref a = runs(g, 0);
    tc_ref c = runs(g, 10); /* aborting: step 2's compensation first */
    ck_assert_uint_eq(c.step, 1);
    ck_assert_ok(troupe__gtx_apply(g, a, TROUPE_OUTCOME_FAILURE, 11));
    ck_assert_int_eq(g->status, TC_ABORTING);
    ck_assert_int_eq(g->due_ms, 0);
    ck_assert_int_eq(g->steps[1].call[1].state, TC_DOING);
    ck_assert_err(
        troupe__gtx_apply(g, (tc_ref){2, 0}, TROUPE_OUTCOME_SUCCESS, 1),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe__gtx_apply(g, (tc_ref){0, 2}, TROUPE_OUTCOME_SUCCESS, 1),
        TROUPE_EINVAL);
    ck_assert_err(
        troupe__gtx_apply(g, (tc_ref){TC_QUERY, 0}, TROUPE_OUTCOME_SUCCESS, 1),
        TROUPE_EINVAL);
    ck_assert_err(troupe__gtx_apply(g, c, 0, 1), TROUPE_EINVAL);
    ck_assert_err(troupe__gtx_apply(g, c, 5, 1), TROUPE_EINVAL);
    troupe__gtx_free(g);
}
END_TEST

/* TCC: a submitted transaction confirms in order; a confirm that fails
 * (any outcome but SUCCESS) is retried and never cancels. Every pair of
 * the two branches' try states, with every pair of first outcomes of
 * their confirms. */
START_TEST(test_a_tcc_confirm_never_cancels_over_every_state_pair)
{
    static const tc_state tries[] = {TC_TODO, TC_DOING, TC_DONE, TC_REFUSED};
    static const troupe_outcome outs[] = {
        TROUPE_OUTCOME_SUCCESS, TROUPE_OUTCOME_FAILURE, TROUPE_OUTCOME_ONGOING,
        TROUPE_OUTCOME_UNKNOWN};
    int cases = 0;
    for (size_t t0 = 0; t0 < 4; t0++)
        for (size_t t1 = 0; t1 < 4; t1++)
            for (size_t o0 = 0; o0 < 4; o0++)
                for (size_t o1 = 0; o1 < 4; o1++) {
                    tc_gtx *g = fresh(TROUPE_MODE_TCC, 2, TC_SUBMITTED);
                    g->steps[0].call[0].state = tries[t0];
                    g->steps[1].call[0].state = tries[t1];
                    troupe_outcome first[2] = {outs[o0], outs[o1]};
                    bool tried[2] = {false, false};
                    int64_t now = 0;
                    for (int guard = 0; g->status != TC_SUCCEED; guard++) {
                        ck_assert_int_lt(guard, 10);
                        ck_assert_int_eq(g->status, TC_SUBMITTED);
                        tc_plan p;
                        troupe__gtx_plan(g, now, &p);
                        if (p.n_run == 0) {
                            now = g->due_ms;
                            continue;
                        }
                        ck_assert_uint_eq(p.run[0].op, 1); /* a confirm */
                        uint32_t b = p.run[0].step;
                        troupe_outcome o =
                            tried[b] ? TROUPE_OUTCOME_SUCCESS : first[b];
                        tried[b] = true;
                        ck_assert_ok(troupe__gtx_apply(g, p.run[0], o, now));
                        ck_assert_int_ne(g->status, TC_ABORTING);
                    }
                    for (int b = 0; b < 2; b++)
                        ck_assert_int_eq(g->steps[b].call[2].state, TC_TODO);
                    ck_assert_int_eq(g->steps[0].call[0].state, tries[t0]);
                    troupe__gtx_free(g);
                    cases++;
                }
    ck_assert_int_eq(cases, 256);
}
END_TEST

/* TCC abort cancels every registered branch in reverse, those whose try
 * never ran too, retrying a failing cancel; zero branches end at once. */
START_TEST(test_a_tcc_abort_cancels_every_branch_in_reverse)
{
    tc_gtx *g = fresh(TROUPE_MODE_TCC, 3, TC_PREPARED);
    idle(g, 0); /* prepared: the application runs the tries */
    g->steps[0].call[0].state = TC_DONE;
    g->steps[1].call[0].state = TC_REFUSED;
    g->status = TC_ABORTING;
    int64_t now = 0;
    for (int i = 2; i >= 0; i--) {
        tc_ref r = runs(g, now);
        ck_assert_uint_eq(r.step, (uint32_t)i);
        ck_assert_uint_eq(r.op, 2);
        if (i == 0) {
            ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_FAILURE, now));
            ck_assert_int_eq(g->status, TC_ABORTING);
            now = g->due_ms;
            r = runs(g, now);
        }
        ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_SUCCESS, now));
    }
    idle(g, now);
    ck_assert_int_eq(g->status, TC_FAILED);
    troupe__gtx_free(g);
    for (int abort = 0; abort < 2; abort++) {
        g = fresh(TROUPE_MODE_TCC, 0, abort ? TC_ABORTING : TC_SUBMITTED);
        tc_plan p;
        troupe__gtx_plan(g, 9, &p);
        ck_assert(p.n_run == 0 && p.changed);
        ck_assert_int_eq(g->status, abort ? TC_FAILED : TC_SUCCEED);
        ck_assert_int_eq(g->finished_ms, 9);
        troupe__gtx_free(g);
    }
}
END_TEST

/* A tcc left prepared past its timeout-to-fail aborts and cancels every
 * registered branch in reverse; until then it waits, due at the timeout;
 * one submitted in time is never timed out. */
START_TEST(test_a_prepared_tcc_past_its_timeout_cancels_its_branches)
{
    tc_gtx *g = fresh(TROUPE_MODE_TCC, 2, TC_PREPARED);
    g->created_ms = 1000;
    g->opts.timeout_to_fail_ms = 35000;
    idle(g, 1000);
    ck_assert_int_eq(g->due_ms, 36000); /* the shard's timer */
    idle(g, 35999);
    ck_assert_int_eq(g->status, TC_PREPARED);
    tc_ref r = runs(g, 36000);
    ck_assert_int_eq(g->status, TC_ABORTING);
    ck_assert_str_eq(g->reason, "prepared for longer than its timeout-to-fail");
    ck_assert_uint_eq(r.step, 1);
    ck_assert_uint_eq(r.op, 2); /* a cancel, the last branch first */
    bool changed = true;
    ck_assert_err(troupe__gtx_submit(g, &changed), TROUPE_ECONFLICT);
    troupe__gtx_free(g);

    g = fresh(TROUPE_MODE_TCC, 2, TC_PREPARED);
    g->opts.timeout_to_fail_ms = 35000;
    ck_assert_ok(troupe__gtx_submit(g, &changed));
    r = runs(g, 99000); /* long past: confirms, never a cancel */
    ck_assert_uint_eq(r.op, 1);
    ck_assert_int_eq(g->status, TC_SUBMITTED);
    troupe__gtx_free(g);

    g = fresh(TROUPE_MODE_TCC, 2, TC_PREPARED); /* 0: no timeout */
    idle(g, INT64_MAX / 2);
    ck_assert_int_eq(g->status, TC_PREPARED);
    ck_assert_int_eq(g->due_ms, 0);
    troupe__gtx_free(g);
}
END_TEST

/* A two-phase message: left prepared it is queried back once due;
 * SUCCESS drives its steps (retried, never compensated), FAILURE fails it
 * with no step called, ONGOING / UNKNOWN query again later. */
START_TEST(test_a_message_is_queried_back_then_driven_forward)
{
    tc_gtx *g = fresh(TROUPE_MODE_MSG, 2, TC_PREPARED);
    g->due_ms = 5000; /* its grace period */
    idle(g, 4999);
    tc_ref q = runs(g, 5000);
    ck_assert_uint_eq(q.step, TC_QUERY);
    ck_assert_ok(troupe__gtx_apply(g, q, TROUPE_OUTCOME_ONGOING, 5000));
    ck_assert_int_eq(g->status, TC_PREPARED);
    ck_assert_int_eq(g->due_ms, 15000);
    idle(g, 14999);
    q = runs(g, 15000);
    ck_assert_ok(troupe__gtx_apply(g, q, TROUPE_OUTCOME_SUCCESS, 15000));
    ck_assert_int_eq(g->status, TC_SUBMITTED);
    int64_t now = 15000;
    for (uint32_t i = 0; i < 2; i++) {
        tc_ref r = runs(g, now);
        ck_assert_uint_eq(r.step, i);
        ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_FAILURE, now));
        ck_assert_int_eq(g->status, TC_SUBMITTED); /* never compensated */
        now = g->due_ms;
        ck_assert_ok(
            troupe__gtx_apply(g, runs(g, now), TROUPE_OUTCOME_SUCCESS, now));
    }
    idle(g, now);
    ck_assert_int_eq(g->status, TC_SUCCEED);
    troupe__gtx_free(g);

    g = fresh(TROUPE_MODE_MSG, 2, TC_PREPARED);
    q = runs(g, 0);
    ck_assert_ok(troupe__gtx_apply(g, q, TROUPE_OUTCOME_FAILURE, 3));
    ck_assert_int_eq(g->status, TC_FAILED);
    ck_assert_int_eq(g->finished_ms, 3);
    idle(g, 4);
    for (uint32_t i = 0; i < 2; i++)
        ck_assert_uint_eq(g->steps[i].call[0].attempts, 0);
    troupe__gtx_free(g);
}
END_TEST

/* ---- workflows (wfrun.c) ---- */

/* A reply's update. */
typedef struct upd {
    uint32_t pos, kind, state;
    const char *name, *result, *ctarget;
    int32_t version;
} upd;

/* A run's reply [end, reason, updates] in a buffer the caller frees. */
static uint8_t *
reply(tc_wf_end end, const char *why, const upd *u, size_t n, size_t *len)
{
    troupe_packer p;
    troupe_pack_init(&p);
    troupe_pack_array(&p, end == TC_WF_AWAIT ? 4 : 3);
    troupe_pack_uint(&p, end);
    if (why != NULL)
        troupe_pack_cstr(&p, why);
    else
        troupe_pack_nil(&p);
    troupe_pack_array(&p, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        troupe_pack_array(&p, 7);
        troupe_pack_uint(&p, u[i].pos);
        troupe_pack_uint(&p, u[i].kind);
        troupe_pack_cstr(&p, u[i].name);
        troupe_pack_uint(&p, u[i].state);
        troupe_pack_bin(&p, u[i].result, u[i].result ? strlen(u[i].result) : 0);
        if (u[i].ctarget != NULL) {
            troupe_pack_array(&p, 2);
            troupe_pack_cstr(&p, u[i].ctarget);
            troupe_pack_bin(&p, "c", 1);
        } else {
            troupe_pack_nil(&p);
        }
        troupe_pack_int(&p, u[i].version);
    }
    if (end == TC_WF_AWAIT) /* the first awakeable is the one awaited */
        for (size_t i = 0; i < n; i++)
            if (u[i].kind == TC_WF_AWAKE) {
                troupe_pack_uint(&p, u[i].pos);
                break;
            }
    size_t l = 0;
    const void *d = troupe_pack_data(&p, &l);
    uint8_t *out = troupe_malloc(l);
    memcpy(out, d, l);
    troupe_pack_fini(&p);
    *len = l;
    return out;
}

/* Runs g at now and answers SUCCESS with the reply. */
static void
run_reply(tc_gtx *g, int64_t now, tc_wf_end end, const char *why, const upd *u,
          size_t n)
{
    tc_ref r = runs(g, now);
    ck_assert_uint_eq(r.step, TC_QUERY);
    size_t len = 0;
    uint8_t *b = reply(end, why, u, n, &len);
    ck_assert_ok(troupe__gtx_wf_apply(g, TROUPE_OUTCOME_SUCCESS, b, len, now));
    troupe_free(b);
}

static tc_gtx *
workflow(void)
{
    return fresh(TROUPE_MODE_WORKFLOW, 0, TC_SUBMITTED); /* its run set */
}

START_TEST(test_a_workflow_memoizes_registers_first_and_compensates)
{
    tc_gtx *g = workflow();
    /* run 1: step "reserve" registered with its compensation first */
    upd u1[] = {{0, TC_WF_STEP, TC_TODO, "reserve", NULL, "bank.undo", 0}};
    run_reply(g, 0, TC_WF_CONTINUE, NULL, u1, 1);
    ck_assert_uint_eq(g->n_steps, 1);
    ck_assert_int_eq(g->steps[0].call[0].state, TC_TODO);
    ck_assert_str_eq(g->steps[0].call[1].target, "bank.undo");
    /* the document holds it across a restart */
    size_t n = 0;
    uint8_t *d = enc(g, &n);
    tc_gtx *back = NULL;
    ck_assert_ok(troupe__gtx_decode(d, n, &back));
    ck_assert_str_eq(back->steps[0].name, "reserve");
    ck_assert_int_eq(back->steps[0].kind, TC_WF_STEP);
    troupe__gtx_free(back);
    troupe_free(d);
    /* run 2: its result with the next step's registration, in one
     * commit; the run goes again at once */
    upd u2[] = {{0, TC_WF_STEP, TC_DONE, "reserve", "r0", NULL, 0},
                {1, TC_WF_STEP, TC_TODO, "pay", NULL, NULL, 0}};
    run_reply(g, 1, TC_WF_CONTINUE, NULL, u2, 2);
    ck_assert_int_eq(g->steps[0].call[0].state, TC_DONE);
    ck_assert_uint_eq(g->steps[0].call[0].payload_len, 2);
    /* a reply that contradicts the records applies nothing: backoff */
    upd bad[] = {{1, TC_WF_STEP, TC_DONE, "ship", "x", NULL, 0}};
    run_reply(g, 2, TC_WF_SUCCEEDED, NULL, bad, 1);
    ck_assert_int_eq(g->status, TC_SUBMITTED);
    ck_assert_int_eq(g->steps[1].call[0].state, TC_TODO);
    ck_assert_int_eq(g->due_ms, 2 + TROUPE_GTX_RETRY_MIN_MS);
    idle(g, 3);
    /* run 3: "pay" fails, the function fails: compensations in reverse,
     * only registered ones */
    upd u3[] = {{1, TC_WF_STEP, TC_REFUSED, "pay", NULL, NULL, 0}};
    run_reply(g, g->due_ms, TC_WF_FAILED, "step 02 (pay): FAILURE", u3, 1);
    ck_assert_int_eq(g->status, TC_ABORTING);
    ck_assert_str_eq(g->reason, "step 02 (pay): FAILURE");
    tc_ref c = runs(g, 20000);
    ck_assert_uint_eq(c.step, 0);
    ck_assert_uint_eq(c.op, 1);
    ck_assert_ok(troupe__gtx_apply(g, c, TROUPE_OUTCOME_SUCCESS, 20000));
    idle(g, 20000);
    ck_assert_int_eq(g->status, TC_FAILED);
    troupe__gtx_free(g);
}
END_TEST

START_TEST(test_a_workflow_without_an_answer_retries_and_never_rolls_back)
{
    tc_gtx *g = workflow();
    int64_t now = 0;
    for (uint32_t i = 1; i <= 3; i++) {
        tc_ref r = runs(g, now);
        ck_assert_uint_eq(r.step, TC_QUERY);
        ck_assert_ok(
            troupe__gtx_wf_apply(g, TROUPE_OUTCOME_UNKNOWN, NULL, 0, now));
        ck_assert_int_eq(g->status, TC_SUBMITTED);
        ck_assert_int_eq(g->due_ms, now + troupe__gtx_backoff(&g->opts, i));
        now = g->due_ms;
    }
    /* a reply not in flight is refused */
    ck_assert_int_eq(
        troupe__gtx_wf_apply(g, TROUPE_OUTCOME_SUCCESS, NULL, 0, now),
        TROUPE_ESTATE);
    troupe__gtx_free(g);
}
END_TEST

START_TEST(test_a_diverged_workflow_is_held_until_a_retry)
{
    tc_gtx *g = workflow();
    upd u[] = {{0, TC_WF_STEP, TC_TODO, "deduct", NULL, NULL, 0}};
    run_reply(g, 0, TC_WF_CONTINUE, NULL, u, 1);
    run_reply(g, 1, TC_WF_DIVERGED,
              "replay diverged: step 01 was recorded as \"deduct\" but is "
              "now \"ship\"",
              NULL, 0);
    ck_assert_int_eq(g->hold, TC_HOLD_DIVERGED);
    ck_assert_int_eq(g->status, TC_SUBMITTED);
    ck_assert_ptr_nonnull(strstr(g->reason, "diverged"));
    idle(g, 1000000); /* neither runs nor compensates */
    bool changed = false;
    ck_assert_ok(troupe__gtx_retry(g, &changed));
    ck_assert(changed);
    ck_assert_uint_eq(runs(g, 1000000).step, TC_QUERY);
    troupe__gtx_free(g);
}
END_TEST

START_TEST(test_an_awakeable_holds_the_workflow_until_resolved)
{
    tc_gtx *g = workflow();
    upd u[] = {{0, TC_WF_AWAKE, TC_TODO, "payment", NULL, NULL, 0},
               {1, TC_WF_VERSION, TC_DONE, "v-pay", NULL, NULL, 2}};
    run_reply(g, 0, TC_WF_AWAIT, NULL, u, 2);
    ck_assert_int_eq(g->hold, TC_HOLD_AWAIT);
    ck_assert_int_eq(g->steps[1].version, 2);
    idle(g, 1000000);
    bool changed = false;
    ck_assert_int_eq(troupe__gtx_wf_resolve(g, 1, true, "x", 1, &changed),
                     TROUPE_ENOENT); /* a version marker */
    ck_assert_ok(troupe__gtx_wf_resolve(g, 0, true, "paid", 4, &changed));
    ck_assert(changed);
    ck_assert_int_eq(g->hold, TC_HOLD_NONE);
    ck_assert_int_eq(troupe__gtx_wf_resolve(g, 0, false, NULL, 0, &changed),
                     TROUPE_ECONFLICT); /* the first resolution wins */
    ck_assert_ok(troupe__gtx_wf_resolve(g, 0, true, "paid", 4, &changed));
    ck_assert(!changed); /* the same one again: nothing moves */
    ck_assert_int_eq(troupe__gtx_wf_resolve(g, 0, true, "late", 4, &changed),
                     TROUPE_ECONFLICT);
    ck_assert_uint_eq(runs(g, 1000000).step, TC_QUERY);
    troupe__gtx_free(g);
}
END_TEST

/* XA: submit commits the branches in order; a commit that fails is
 * retried, never rolled back (the decision is made); an abort rolls back
 * every branch in reverse; one left prepared past its timeout aborts. */
START_TEST(
    test_xa_commits_in_order_retries_a_failed_commit_rolls_back_in_reverse)
{
    tc_gtx *g = fresh(TROUPE_MODE_XA, 2, TC_PREPARED);
    idle(g, 0); /* prepared: waits for its submit */
    bool ch = false;
    ck_assert_ok(troupe__gtx_submit(g, &ch));
    tc_ref r = runs(g, 0);
    ck_assert_uint_eq(r.step, 0);
    ck_assert_uint_eq(r.op, 0); /* commit */
    ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_FAILURE, 0));
    ck_assert_int_eq(g->status, TC_SUBMITTED); /* never a rollback */
    ck_assert_int_eq(g->due_ms, TROUPE_GTX_RETRY_MIN_MS);
    idle(g, 1);
    r = runs(g, g->due_ms);
    ck_assert_uint_eq(r.step, 0);
    ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_SUCCESS, 20000));
    r = runs(g, 20000);
    ck_assert_uint_eq(r.step, 1);
    ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_SUCCESS, 20000));
    idle(g, 20000);
    ck_assert_int_eq(g->status, TC_SUCCEED);
    troupe__gtx_free(g);
    /* aborted: rollbacks in reverse, every registered branch */
    g = fresh(TROUPE_MODE_XA, 2, TC_PREPARED);
    ck_assert_ok(troupe__gtx_abort_why(g, 0, "aborted", &ch));
    r = runs(g, 0);
    ck_assert_uint_eq(r.step, 1);
    ck_assert_uint_eq(r.op, 1); /* rollback */
    ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_SUCCESS, 0));
    r = runs(g, 0);
    ck_assert_uint_eq(r.step, 0);
    ck_assert_ok(troupe__gtx_apply(g, r, TROUPE_OUTCOME_SUCCESS, 0));
    idle(g, 0);
    ck_assert_int_eq(g->status, TC_FAILED);
    troupe__gtx_free(g);
    /* left prepared past its timeout: aborts */
    g = fresh(TROUPE_MODE_XA, 1, TC_PREPARED);
    g->opts.timeout_to_fail_ms = 1000;
    idle(g, 999);
    ck_assert_int_eq(g->due_ms, 1000);
    r = runs(g, 1000);
    ck_assert_int_eq(g->status, TC_ABORTING);
    ck_assert_uint_eq(r.op, 1);
    troupe__gtx_free(g);
}
END_TEST

/* register_at: the next index appends, one below is a repeat that
 * changes nothing (the step stays the caller's), one above is ERANGE; the
 * mode and status rules come first. */
START_TEST(test_register_at_appends_repeats_and_refuses_a_gap)
{
    bool ch = true;
    tc_gtx *g = fresh(TROUPE_MODE_TCC, 0, TC_PREPARED);
    tc_step s;
    memset(&s, 0, sizeof(s));
    set_call(&s.call[1], "c", NULL, TC_TODO, 0, 0);
    set_call(&s.call[2], "x", NULL, TC_TODO, 0, 0);
    uint32_t at = 9;
    ck_assert_err(troupe__gtx_register_at(g, TROUPE_MODE_TCC, &s, 1, &at, &ch),
                  TROUPE_ERANGE);
    ck_assert(!ch && g->n_steps == 0 && at == 9);
    ck_assert_ok(troupe__gtx_register_at(g, TROUPE_MODE_TCC, &s, 0, &at, &ch));
    ck_assert(ch && at == 0 && g->n_steps == 1);
    ck_assert_ptr_null(s.call[1].target); /* moved */
    set_call(&s.call[1], "c2", NULL, TC_TODO, 0, 0);
    set_call(&s.call[2], "x2", NULL, TC_TODO, 0, 0);
    ck_assert_ok(troupe__gtx_register_at(g, TROUPE_MODE_TCC, &s, 0, &at, &ch));
    ck_assert(!ch && at == 0 && g->n_steps == 1);
    ck_assert_ptr_nonnull(s.call[1].target); /* not taken */
    ck_assert_str_eq(g->steps[0].call[1].target, "c");
    ck_assert_err(troupe__gtx_register_at(g, TROUPE_MODE_TCC, &s, 2, &at, &ch),
                  TROUPE_ERANGE);
    ck_assert_ok(troupe__gtx_register_at(g, TROUPE_MODE_TCC, &s, 1, &at, &ch));
    ck_assert(ch && at == 1 && g->n_steps == 2);
    g->status = TC_SUBMITTED; /* a repeat once submitted: a conflict */
    ck_assert_err(troupe__gtx_register_at(g, TROUPE_MODE_TCC, &s, 0, &at, &ch),
                  TROUPE_ECONFLICT);
    ck_assert(!ch);
    troupe__gtx_free(g);
    g = fresh(TROUPE_MODE_SAGA, 1, TC_SUBMITTED);
    ck_assert_err(troupe__gtx_register_at(g, TROUPE_MODE_TCC, &s, 0, &at, &ch),
                  TROUPE_ENOENT);
    troupe__gtx_free(g);
    troupe__gtx_step_fini(&s);
}
END_TEST

/* The calls from outside: submit, abort, retry, register, in every
 * status they meet. */
START_TEST(test_submit_abort_retry_register_rules)
{
    bool ch = false;
    tc_gtx *g = fresh(TROUPE_MODE_TCC, 0, TC_PREPARED);
    tc_step s;
    memset(&s, 0, sizeof(s));
    set_call(&s.call[1], "c", NULL, TC_TODO, 0, 0);
    set_call(&s.call[2], "x", NULL, TC_TODO, 0, 0);
    uint32_t at = 9;
    ck_assert_ok(troupe__gtx_register(g, TROUPE_MODE_TCC, &s, &at));
    ck_assert_uint_eq(at, 0);
    ck_assert_ptr_null(s.call[1].target); /* moved */
    ck_assert_ok(troupe__gtx_submit(g, &ch));
    ck_assert(ch && g->status == TC_SUBMITTED);
    ck_assert_ok(troupe__gtx_submit(g, &ch));
    ck_assert(!ch);
    ck_assert_err(troupe__gtx_register(g, TROUPE_MODE_TCC, &s, &at),
                  TROUPE_ECONFLICT);
    ck_assert_ok(troupe__gtx_abort_why(g, 5, "aborted", &ch));
    ck_assert(ch && g->status == TC_ABORTING);
    ck_assert_str_eq(g->reason, "aborted");
    ck_assert_ok(troupe__gtx_abort_why(g, 5, "aborted", &ch));
    ck_assert(!ch);
    ck_assert_err(troupe__gtx_submit(g, &ch), TROUPE_ECONFLICT);
    g->due_ms = 77;
    ck_assert_ok(troupe__gtx_retry(g, &ch));
    ck_assert(ch && g->due_ms == 0);
    g->status = TC_FAILED;
    g->finished_ms = 6;
    ck_assert_err(troupe__gtx_abort_why(g, 7, "aborted", &ch),
                  TROUPE_ECONFLICT);
    ck_assert_err(troupe__gtx_retry(g, &ch), TROUPE_ECONFLICT);
    troupe__gtx_free(g);
    /* a full tcc, another mode */
    g = fresh(TROUPE_MODE_TCC, TROUPE_GTX_STEPS_MAX, TC_PREPARED);
    ck_assert_err(troupe__gtx_register(g, TROUPE_MODE_TCC, &s, &at),
                  TROUPE_EINVAL);
    troupe__gtx_free(g);
    g = fresh(TROUPE_MODE_SAGA, 1, TC_SUBMITTED);
    ck_assert_err(troupe__gtx_register(g, TROUPE_MODE_TCC, &s, &at),
                  TROUPE_ENOENT);
    ck_assert_ok(troupe__gtx_submit(g, &ch)); /* a saga is submitted */
    ck_assert(!ch);
    troupe__gtx_free(g);
    /* a message: prepared aborts to failed, submitted cannot abort */
    g = fresh(TROUPE_MODE_MSG, 1, TC_PREPARED);
    ck_assert_ok(troupe__gtx_abort_why(g, 8, "aborted", &ch));
    ck_assert_int_eq(g->status, TC_FAILED);
    ck_assert_int_eq(g->finished_ms, 8);
    troupe__gtx_free(g);
    g = fresh(TROUPE_MODE_MSG, 1, TC_SUBMITTED);
    ck_assert_err(troupe__gtx_abort_why(g, 8, "aborted", &ch),
                  TROUPE_ECONFLICT);
    ck_assert_int_eq(g->status, TC_SUBMITTED);
    troupe__gtx_free(g);
    for (unsigned o = 0; o < TROUPE_GTX_OPS_MAX; o++)
        troupe_free(s.call[o].target);
    /* force-stop: fails now whatever it was doing, not once ended */
    g = fresh(TROUPE_MODE_SAGA, 2, TC_ABORTING);
    g->reason = sdup("branch 01 action: FAILURE");
    ck_assert_ok(troupe__gtx_force_stop(g, 11));
    ck_assert_int_eq(g->status, TC_FAILED);
    ck_assert_int_eq(g->finished_ms, 11);
    ck_assert_str_eq(g->reason, "force-stopped");
    ck_assert_err(troupe__gtx_force_stop(g, 12), TROUPE_ECONFLICT);
    idle(g, 13);
    troupe__gtx_free(g);
}
END_TEST

Suite *
gtx_suite(void)
{
    Suite *s = suite_create("gtx");
    TCase *c = tcase_create("format");
    tcase_add_test(c, test_every_mode_round_trips);
    tcase_add_test(c, test_a_document_breaking_a_rule_is_ecorrupt);
    tcase_add_test(c, test_a_malformed_document_is_ecorrupt);
    tcase_add_test(c, test_a_concurrent_sagas_order_is_checked_when_read);
    suite_add_tcase(s, c);
    TCase *m = tcase_create("rules");
    tcase_add_test(m, test_backoff_doubles_to_its_cap);
    tcase_add_test(m, test_a_saga_runs_its_actions_in_order_and_succeeds);
    tcase_add_test(m, test_a_saga_failure_compensates_every_step_in_reverse);
    tcase_add_test(m, test_unknown_retries_with_backoff_and_never_compensates);
    tcase_add_test(
        m, test_concurrent_actions_run_once_their_dependencies_succeeded);
    tcase_add_test(
        m, test_concurrent_compensations_run_in_reverse_dependency_order);
    tcase_add_test(m, test_concurrent_retries_share_the_earliest_due_time);
    tcase_add_test(m, test_a_saga_past_its_timeout_to_fail_aborts);
    tcase_add_test(m, test_late_and_bad_outcomes_change_nothing);
    tcase_add_test(m, test_a_tcc_confirm_never_cancels_over_every_state_pair);
    tcase_add_test(m, test_a_tcc_abort_cancels_every_branch_in_reverse);
    tcase_add_test(m,
                   test_a_prepared_tcc_past_its_timeout_cancels_its_branches);
    tcase_add_test(m, test_a_message_is_queried_back_then_driven_forward);
    tcase_add_test(m, test_submit_abort_retry_register_rules);
    tcase_add_test(
        m,
        test_xa_commits_in_order_retries_a_failed_commit_rolls_back_in_reverse);
    tcase_add_test(m, test_register_at_appends_repeats_and_refuses_a_gap);
    tcase_add_test(m, test_a_workflow_memoizes_registers_first_and_compensates);
    tcase_add_test(
        m, test_a_workflow_without_an_answer_retries_and_never_rolls_back);
    tcase_add_test(m, test_a_diverged_workflow_is_held_until_a_retry);
    tcase_add_test(m, test_an_awakeable_holds_the_workflow_until_resolved);
    suite_add_tcase(s, m);
    return s;
}
