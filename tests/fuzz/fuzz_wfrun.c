/*
 * libFuzzer target: a workflow run's reply (actors/coord/src/wfrun.c), the
 * body a host's workflow function answers with (a pull host may send any
 * bytes) and the shard applies to the stored document.
 *
 * The input's first byte picks a document (records so far: none; a step
 * registered; a step done, an awakeable pending and a version marker),
 * the rest is the reply. Properties: the apply is OK (ENOMEM only when
 * out of memory); a reply that is taken leaves the document within its
 * limits (at most TROUPE_GTX_STEPS_MAX records, every record's name
 * 1..TROUPE_WF_NAME_MAX bytes, its kind and state in range, no record
 * before the reply's changed but a registered step's verdict), and the
 * document still encodes to one that decodes and encodes to the same
 * bytes, with the run no longer in flight.
 */
#include <string.h>

#include "fuzz_support.h"
#include "troupe/alloc.h"
#include "troupe/internal/gtx.h"
#include "troupe/pack.h"

static char target[] = "order";
static char undo[] = "bank.undo";
static char n_a[] = "reserve", n_b[] = "payment", n_c[] = "v-pay";
static uint8_t res[] = {'o', 'k'};

/* Document k (0..2) with its run in flight; g->steps is the caller's to
 * free (the records' strings are static). */
static void
doc(unsigned k, tc_gtx *g, tc_step *steps)
{
    memset(g, 0, sizeof(*g));
    memset(steps, 0, 3 * sizeof(*steps));
    g->mode = TROUPE_MODE_WORKFLOW;
    g->status = TC_SUBMITTED;
    g->query = (tc_call){.target = target, .state = TC_DOING, .attempts = 1};
    g->opts = (tc_opts){0, 0, 10000, 300000, 30000};
    g->created_ms = 1700000000000;
    g->steps = steps;
    if (k == 0)
        return;
    steps[0] = (tc_step){.kind = TC_WF_STEP, .name = n_a};
    steps[0].call[0] = (tc_call){.target = target, .state = TC_TODO};
    steps[0].call[1] = (tc_call){.target = undo, .state = TC_TODO};
    g->n_steps = 1;
    if (k == 1)
        return;
    steps[0].call[0].state = TC_DONE;
    steps[0].call[0].payload = res;
    steps[0].call[0].payload_len = sizeof(res);
    steps[1] = (tc_step){.kind = TC_WF_AWAKE, .name = n_b};
    steps[1].call[0] = (tc_call){.target = target, .state = TC_TODO};
    steps[2] = (tc_step){.kind = TC_WF_VERSION, .name = n_c, .version = 2};
    steps[2].call[0] = (tc_call){.target = target, .state = TC_DONE};
    g->n_steps = 3;
}

/* A deep copy through the encoder: what the shard would store. */
static tc_gtx *
stored(const tc_gtx *g)
{
    troupe_packer p;
    troupe_pack_init(&p);
    FZ_CHECK(troupe__gtx_encode(g, &p) == TROUPE_OK, "encode");
    size_t n = 0;
    const void *b = troupe_pack_data(&p, &n);
    tc_gtx *h = NULL;
    FZ_CHECK(troupe__gtx_decode(b, n, &h) == TROUPE_OK,
             "a document the reply left does not decode");
    troupe_packer q;
    troupe_pack_init(&q);
    FZ_CHECK(troupe__gtx_encode(h, &q) == TROUPE_OK, "encode again");
    size_t m = 0;
    const void *c = troupe_pack_data(&q, &m);
    FZ_CHECK(n == m && memcmp(b, c, n) == 0, "the encoding moved");
    troupe_pack_fini(&p);
    troupe_pack_fini(&q);
    return h;
}

int
LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n == 0)
        return 0;
    tc_gtx base;
    tc_step steps[3];
    doc(d[0] % 3, &base, steps);
    tc_gtx *g = stored(&base); /* ours to change */
    tc_gtx *before = stored(&base);
    troupe_err e = troupe__gtx_wf_apply(g, TROUPE_OUTCOME_SUCCESS, d + 1, n - 1,
                                        1700000001000);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ENOMEM);
    if (e == TROUPE_OK) {
        FZ_CHECK(g->n_steps <= TROUPE_GTX_STEPS_MAX, "%u records", g->n_steps);
        FZ_CHECK(g->n_steps >= before->n_steps, "records went");
        for (uint32_t i = 0; i < g->n_steps; i++) {
            const tc_step *s = &g->steps[i];
            size_t nl = s->name != NULL ? strlen(s->name) : 0;
            FZ_CHECK(nl >= 1 && nl <= TROUPE_WF_NAME_MAX, "a record's name");
            FZ_CHECK(s->kind >= TC_WF_STEP && s->kind <= TC_WF_VERSION,
                     "a record's kind");
            FZ_CHECK(s->call[0].payload_len <= TROUPE_GTX_PAYLOAD_MAX,
                     "a big result");
            if (i >= before->n_steps)
                continue;
            const tc_step *o = &before->steps[i];
            FZ_CHECK(strcmp(s->name, o->name) == 0 && s->kind == o->kind,
                     "record %u renamed", i);
            if (o->kind != TC_WF_STEP || o->call[0].state != TC_TODO)
                FZ_CHECK(s->call[0].state == o->call[0].state &&
                             s->call[0].payload_len == o->call[0].payload_len,
                         "record %u changed though not registered", i);
        }
        FZ_CHECK(g->query.state != TC_DOING, "the run still in flight");
        tc_gtx *h = stored(g);
        troupe__gtx_free(h);
    }
    troupe__gtx_free(g);
    troupe__gtx_free(before);
    return 0;
}
