/*
 * libFuzzer target: a global transaction's stored document, read from the
 * table troupe.gtx at every coordinator open (actors/coord/src/format.c).
 *
 * Properties: a refused document is ECORRUPT or ENOTSUP (ENOMEM only when
 * out of memory) and leaves nothing; an accepted one encodes again (with
 * the coordinator's encoder) to a document that decodes to one whose
 * encoding is the same bytes; its steps, payloads and reason are within
 * the limits, every op it carries is one of its mode's, and a step order
 * (a concurrent saga's, format 2) is a saga's and has no cycle.
 */
#include <string.h>

#include "fuzz_support.h"
#include "troupe/internal/gtx.h"
#include "troupe/pack.h"

int
LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    tc_gtx *g = NULL;
    troupe_err e = troupe__gtx_decode(d, n, &g);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_ECORRUPT, TROUPE_ENOTSUP, TROUPE_ENOMEM);
    if (e != TROUPE_OK) {
        FZ_CHECK(g == NULL, "a document on error");
        return 0;
    }
    FZ_CHECK(g->n_steps <= TROUPE_GTX_STEPS_MAX, "%u steps", g->n_steps);
    FZ_CHECK(g->reason == NULL || strlen(g->reason) <= TROUPE_GTX_REASON_MAX,
             "a long reason");
    for (uint32_t i = 0; i < g->n_steps; i++)
        for (unsigned o = 0; o < TROUPE_GTX_OPS_MAX; o++) {
            const tc_call *c = &g->steps[i].call[o];
            if (c->target == NULL)
                continue;
            FZ_CHECK(troupe_gtx_op_at(g->mode, o) != NULL,
                     "op %u of a mode without it", o);
            FZ_CHECK(c->payload_len <= TROUPE_GTX_PAYLOAD_MAX, "a big payload");
            FZ_CHECK(c->target[0] != '\0', "an empty target");
        }
    FZ_CHECK(g->after == NULL ||
                 (g->mode == TROUPE_MODE_SAGA &&
                  troupe__gtx_order_valid(g->after, g->n_steps)),
             "a step order outside a saga, or not an order");
    troupe_packer p1, p2;
    troupe_pack_init(&p1);
    troupe_pack_init(&p2);
    FZ_CHECK(troupe__gtx_encode(g, &p1) == TROUPE_OK, "encode");
    size_t l1 = 0, l2 = 0;
    const void *b1 = troupe_pack_data(&p1, &l1);
    tc_gtx *h = NULL;
    FZ_CHECK(troupe__gtx_decode(b1, l1, &h) == TROUPE_OK,
             "an accepted document encodes to one refused");
    FZ_CHECK(troupe__gtx_encode(h, &p2) == TROUPE_OK, "encode again");
    const void *b2 = troupe_pack_data(&p2, &l2);
    FZ_CHECK(l1 == l2 && memcmp(b1, b2, l1) == 0, "the encoding moved");
    troupe_pack_fini(&p1);
    troupe_pack_fini(&p2);
    troupe__gtx_free(g);
    troupe__gtx_free(h);
    return 0;
}
