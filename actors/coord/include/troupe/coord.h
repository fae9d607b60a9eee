/*
 * The coordinator's names and limits (docs/coordinator.md): what a global
 * transaction id, a branch id, a mode, an op and an abort reason may be.
 * Every call of the coordinator and of the barrier (troupe/barrier.h)
 * checks its fields with these rules and refuses (EINVAL) what breaks
 * them, never truncating. Pure functions: any thread.
 */
#ifndef TROUPE_COORD_H
#define TROUPE_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most steps (saga steps, tcc branches, message steps) of one
 * global transaction, and the most bytes of one branch op's payload. */
#define TROUPE_GTX_STEPS_MAX 64
#define TROUPE_GTX_PAYLOAD_MAX (64u * 1024u)
/* A workflow record's name (a step, an awakeable, a version marker): 1..
 * this many bytes, no NUL. A workflow's records count as its steps. */
#define TROUPE_WF_NAME_MAX 128

/* A gid: 1..TROUPE_GID_MAX bytes of [A-Za-z0-9_.:-]. */
#define TROUPE_GID_MAX 128
/* A branch id: the canonical decimal of 1..TROUPE_BRANCH_ID_MAX, at least
 * two digits ("01" .. "99", "100" .. "9999"), as DTM numbers branches;
 * "00" is the two-phase message's own (TROUPE_MSG_BRANCH_ID). */
#define TROUPE_BRANCH_ID_MAX 9999
#define TROUPE_MSG_BRANCH_ID "00"

/* The modes of a global transaction, by their names in the barrier's rows
 * and in DTM's API. */
typedef enum troupe_gtx_mode {
    TROUPE_MODE_SAGA = 1,
    TROUPE_MODE_TCC = 2,
    TROUPE_MODE_MSG = 3,
    TROUPE_MODE_XA = 4,
    TROUPE_MODE_WORKFLOW = 5
} troupe_gtx_mode;

/* The coordinator shards of a database: fixed when the database is
 * created (part of the format: a gid's shard owns its transaction). */
#define TROUPE_COORD_SHARDS_DEFAULT 8
#define TROUPE_COORD_SHARDS_MAX 1024

/*
 * The shard that owns gid: FNV-1a 64 (offset basis 0xcbf29ce484222325,
 * prime 0x100000001b3) of the gid's bytes, modulo shards (the hash of a
 * queue's partitions, docs/queue.md). Part of the format
 * (docs/coordinator.md). shards 0 is taken as 1.
 */
uint32_t
troupe_gtx_shard_of(const char *gid, size_t len, uint32_t shards);

/* gid[0..len) follows the gid rule. */
bool
troupe_gid_valid(const char *gid, size_t len);

/* An operator's abort reason (troupe_gtx_abort_wait): 1..this many bytes
 * of UTF-8 (shortest form, no surrogates) without control characters
 * (U+0000..U+001F, U+007F..U+009F). */
#define TROUPE_GTX_ABORT_REASON_MAX 256

/* s[0..len) follows the abort reason rule. */
bool
troupe_gtx_abort_reason_valid(const char *s, size_t len);

/* s (NUL-terminated) is a canonical branch id of 1..9999. */
bool
troupe_branch_id_valid(const char *s);

/* The mode named s ("saga", "tcc", "msg", "xa", "workflow"), 0 for none. */
troupe_gtx_mode
troupe_gtx_mode_of(const char *s);

/* The mode's name; NULL for a value that is not a mode. */
const char *
troupe_gtx_mode_name(troupe_gtx_mode m);

/*
 * The ops of a mode's branches: SAGA and workflow "action" and
 * "compensate"; TCC "try", "confirm" and "cancel"; a two-phase message
 * "action" (its steps) and "msg" (its local transaction, branch "00");
 * XA "action" and "rollback". True when op is one of mode m's.
 */
bool
troupe_gtx_op_valid(troupe_gtx_mode m, const char *op);

/* The op that op undoes ("compensate" undoes "action", "cancel" undoes
 * "try", "rollback" undoes "action"), NULL when op undoes nothing. */
const char *
troupe_gtx_op_undoes(troupe_gtx_mode m, const char *op);

#endif
