/*
 * Cluster membership in etcd: a node registers itself under
 * TROUPE_MEMBER_PREFIX "<id>" (decimal, no padding) with a value that is
 * a JSON object {"id": N, "listen": "URL"} (more members may be added;
 * readers ignore the ones they do not know), put under an etcd lease of
 * ttl_s seconds that a thread of the member's own renews every ttl_s / 3
 * seconds. A node whose process dies stops renewing; etcd deletes its
 * key when the lease expires: the listing of TROUPE_MEMBER_PREFIX is the
 * set of nodes that are up (within one TTL).
 *
 * A renewal that finds the lease gone (the node was cut off from etcd
 * for longer than the TTL) registers again under a new lease; one that
 * fails otherwise is retried at the next tick (logged). Registration
 * refuses an id whose key is held by another lease (another live node
 * with the same id): EEXIST.
 */
#ifndef TROUPE_MEMBER_H
#define TROUPE_MEMBER_H

#include <stdint.h>

#include "troupe/etcd.h"

#define TROUPE_MEMBER_PREFIX "/troupe/nodes/"
#define TROUPE_MEMBER_TTL_DEFAULT 10
#define TROUPE_MEMBER_TTL_MIN 2
#define TROUPE_MEMBER_TTL_MAX 3600

typedef struct troupe_member troupe_member;

/*
 * Registers node id (1..UINT32_MAX-1) with its listen URL (UTF-8, at
 * most 1024 bytes) under a lease of ttl_s (MIN..MAX; 0: DEFAULT) and starts the
 * renewal thread. etcd is borrowed: it must outlive the member. Blocks
 * (three etcd calls); refuses troupe loop threads (EDEADLK). Errors:
 * EINVAL, EEXIST (the id is registered under another live lease), the
 * etcd client's, ESYS (no thread). On error nothing stays registered.
 */
troupe_err
troupe_member_start(troupe_etcd *etcd, uint32_t id, const char *listen,
                    uint32_t ttl_s, troupe_member **out);

/* Stops renewing and revokes the lease (the key goes at once), then
 * frees m. NULL is a no-op. Blocks for the revoke (the client's
 * timeout at most). */
void
troupe_member_stop(troupe_member *m);

/* The lease now held (it changes when a renewal registers again). */
int64_t
troupe_member_lease(troupe_member *m);

/* A member of a listing: parsed from one key and value. EPROTO when
 * either is not what troupe_member_start writes. */
typedef struct troupe_member_info {
    uint32_t id;
    char listen[1025];
    int64_t lease;
} troupe_member_info;

troupe_err
troupe_member_parse(const troupe_etcd_kv *kv, troupe_member_info *out);

#endif
