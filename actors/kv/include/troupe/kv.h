/*
 * The kv actor: one column family of byte keys and byte values, served by
 * messages: writes go through the commit pipeline (group commit,
 * never blocking the actor's loop), reads run on the runtime's workers.
 *
 * Requests are asks (troupe_ask / troupe_runtime_ask) whose bodies the
 * helpers below build. Each completes with exactly one reply:
 *   PUT [key: bin, value: bin, sync: bool]  reply nil, err OK
 *   GET [key: bin]                          reply bin value, err OK, or
 *                                           err ENOENT (absent)
 *   DEL [key: bin, sync: bool]              reply nil, err OK
 * or with err EPROTO (malformed body, wrong types, trailing bytes),
 * ETOOBIG (key or value over the storage limits), EFULL (pipeline queue
 * full: retry later), EUNKNOWN (the write or its sync failed: it may or may
 * not be stored; the db is fail-stop), EFAILSTOP, ENOSPC (the disk
 * is below its free-space floor: nothing written), ECORRUPT, EIO.
 * Replies are sent straight from the storage writer or worker thread, so a
 * request in flight when the kv actor stops still gets its reply.
 *
 * Lifecycle: kv is an actor, not an object. troupe_kv_spawn gives its
 * address, which is all the caller keeps; stop it with troupe_actor_stop
 * (cb), and its state (nothing outside the actor) goes with it. The kind
 * numbers below are on the wire: they never change.
 */
#ifndef TROUPE_KV_H
#define TROUPE_KV_H

#include <stdbool.h>
#include <stddef.h>

#include "troupe/actor.h"
#include "troupe/commit.h"
#include "troupe/storage.h"

enum troupe_kv_kind { TROUPE_KV_PUT = 0, TROUPE_KV_GET = 1, TROUPE_KV_DEL = 2 };

typedef struct troupe_kv_opts {
    troupe_db *db;         /* borrowed; outlives the actor */
    troupe_commit *commit; /* borrowed; a pipeline on db */
    const char *cf;        /* column family, created if missing */
} troupe_kv_opts;

/*
 * Spawns a kv actor (spawn options as troupe_actor_spawn; may be NULL).
 * Creates the column family first if needed, so this call blocks briefly
 * on the disk: call it at start-up, not from a loop thread in steady state.
 * Errors: EINVAL (NULL or bad names), the errors of troupe_db_cf_create and
 * troupe_actor_spawn.
 */
troupe_err
troupe_kv_spawn(troupe_runtime *rt, const troupe_kv_opts *o,
                const troupe_spawn_opts *so, troupe_addr *out);

/* Request builders; *out is owned by the caller until sent. Errors:
 * EINVAL (NULL, empty key), ETOOBIG, ENOMEM. */
troupe_err
troupe_kv_put_msg(const void *key, size_t klen, const void *val, size_t vlen,
                  bool sync, troupe_msg **out);
troupe_err
troupe_kv_get_msg(const void *key, size_t klen, troupe_msg **out);
troupe_err
troupe_kv_del_msg(const void *key, size_t klen, bool sync, troupe_msg **out);

#endif
