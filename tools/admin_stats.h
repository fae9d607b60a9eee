/*
 * Private to tools/admin*.c: the figures the JSON routes (admin_stats.c)
 * and /metrics (admin_metrics.c) both read. Worker thread only (they
 * block, as admin.h says).
 */
#ifndef TROUPE_TOOLS_ADMIN_STATS_H
#define TROUPE_TOOLS_ADMIN_STATS_H

#include <string.h>

#include "admin_route.h"
#include "troupe/alloc.h"

/* Every scheduler's figures: *out is malloc'd (free it), *n of them.
 * Errors of troupe_runtime_sched_stats_wait, ENOMEM. */
troupe_err
admin_stats_scheds(const admin_ctx *c, troupe_sched_stats **out, unsigned *n);

typedef struct admin_family {
    const char *name;
    troupe_cf_stats st;
    char **names_; /* private: set in the first element */
} admin_family;

/* Every live column family with its figures (a family dropped meanwhile
 * is left out). Free with admin_stats_families_free. Errors of
 * troupe_db_cf_names, ENOMEM. */
troupe_err
admin_stats_families(const admin_ctx *c, admin_family **out, size_t *n);
void
admin_stats_families_free(admin_family *f);

#endif
