/*
 * A global transaction as the coordinator stores it: one document per
 * gid in the table `troupe.gtx` (docs/coordinator.md, "Stored format"),
 * its encoder and its decoder, which checks every field: a document read
 * from the disk that breaks a rule is ECORRUPT, never half taken. For
 * the coordinator's shards, the tests and the fuzz target.
 */
#ifndef TROUPE_INTERNAL_GTX_H
#define TROUPE_INTERNAL_GTX_H

#include <stdint.h>

#include "troupe/coord.h"
#include "troupe/dispatch.h"
#include "troupe/pack.h"

#define TROUPE_GTX_TABLE "troupe.gtx"
#define TROUPE_GTX_FORMAT 1
/* Limits of one transaction (refused at submit, ECORRUPT when read). */
#define TROUPE_GTX_STEPS_MAX 64
#define TROUPE_GTX_PAYLOAD_MAX (64u * 1024u)
#define TROUPE_GTX_REASON_MAX 1024
/* The ops a step can carry: a mode's ops in troupe_gtx_op_at's order. */
#define TROUPE_GTX_OPS_MAX 3

typedef enum tc_status {
    TC_PREPARED = 1,
    TC_SUBMITTED = 2,
    TC_ABORTING = 3,
    TC_SUCCEED = 4,
    TC_FAILED = 5
} tc_status;

/* A call's progress. */
typedef enum tc_state {
    TC_TODO = 1,
    TC_DOING = 2,  /* dispatched, no outcome committed yet */
    TC_DONE = 3,   /* SUCCESS committed */
    TC_REFUSED = 4 /* FAILURE committed */
} tc_state;

/* One op of a step: where it goes and what it carries. */
typedef struct tc_call {
    char *target; /* NUL-terminated, 1..TROUPE_TARGET_NAME_MAX bytes */
    uint8_t *payload;
    size_t payload_len;
    tc_state state;
    uint32_t attempts;
    uint32_t last; /* the last outcome heard (troupe_outcome), 0: none */
} tc_call;

/* A step (saga), branch (tcc, xa) or message step (msg); its branch id is
 * its position + 1 ("01" ...). call[i] is op troupe_gtx_op_at(mode, i);
 * a NULL target marks an op the step does not have. */
typedef struct tc_step {
    tc_call call[TROUPE_GTX_OPS_MAX];
} tc_step;

typedef struct tc_opts {
    int64_t timeout_to_fail_ms; /* 0: none */
    uint32_t retry_limit;       /* 0: retry for ever */
    uint32_t retry_min_ms;      /* first backoff */
    uint32_t retry_max_ms;      /* backoff cap */
    uint32_t branch_timeout_ms; /* a branch's reply timeout */
} tc_opts;

typedef struct tc_gtx {
    troupe_gtx_mode mode;
    tc_status status;
    uint32_t n_steps;
    tc_step *steps;
    char *reason;  /* NULL: none */
    tc_call query; /* msg: the query-back target (payload empty) */
    uint32_t attempts;
    int64_t due_ms, created_ms, updated_ms;
    int64_t finished_ms; /* set once the status is final, else 0 */
    tc_opts opts;
} tc_gtx;

/* The op at position i of mode m's ops (saga and workflow: action,
 * compensate; tcc: try, confirm, cancel; msg: action; xa: action,
 * rollback), NULL past them. */
const char *
troupe_gtx_op_at(troupe_gtx_mode m, unsigned i);

const char *
troupe__gtx_status_name(tc_status s);

/* Appends g's document to p (sticky errors as troupe/pack.h). */
troupe_err
troupe__gtx_encode(const tc_gtx *g, troupe_packer *p);

/*
 * Decodes a stored document into *out (owned by the caller:
 * troupe__gtx_free). Errors: ECORRUPT (anything but a well-formed document
 * of format 1 within the limits: a missing, repeated, unknown or
 * wrong-typed field, a status the mode cannot have, a final status
 * without finished_ms or the reverse, a step with no op, an empty target,
 * a state or outcome out of range), ENOTSUP (a later format), ENOMEM.
 * *out is NULL on error.
 */
troupe_err
troupe__gtx_decode(const void *doc, size_t len, tc_gtx **out);

void
troupe__gtx_free(tc_gtx *g);

#endif
