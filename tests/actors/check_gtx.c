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
m_query_payload(tc_gtx *g)
{
    g->query.payload = (uint8_t *)sdup("x");
    g->query.payload_len = 1;
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
    refused_struct(TROUPE_MODE_MSG, m_query_payload, "a query's payload");
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
        {"v", "\x02", "format 2", 1, TROUPE_ENOTSUP},
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

Suite *
gtx_suite(void)
{
    Suite *s = suite_create("gtx");
    TCase *c = tcase_create("format");
    tcase_add_test(c, test_every_mode_round_trips);
    tcase_add_test(c, test_a_document_breaking_a_rule_is_ecorrupt);
    tcase_add_test(c, test_a_malformed_document_is_ecorrupt);
    suite_add_tcase(s, c);
    return s;
}
