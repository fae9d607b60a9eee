/* Helpers for runtime tests: an embedded runtime on a private loop. */
#ifndef RTEST_H
#define RTEST_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "troupe/actor.h"
#include "troupe/alloc.h"
#include "tsupport.h"

typedef struct rt_fixture {
    uv_loop_t loop;
    troupe_runtime *rt;
    int shutdown_fired;
} rt_fixture;

static inline void
rtf_shutdown_cb(troupe_runtime *rt, void *arg)
{
    (void)rt;
    ((rt_fixture *)arg)->shutdown_fired++;
}

/* Embedded runtime with `n` schedulers (scheduler 0 on f->loop). */
static inline void
rtf_start(rt_fixture *f, unsigned n)
{
    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(uv_loop_init(&f->loop), 0);
    troupe_runtime_opts o = {.loop = &f->loop, .schedulers = n, .workers = 2};
    ck_assert_ok(troupe_runtime_create(&f->rt, &o));
}

static inline bool
rtf_shutdown_done(void *arg)
{
    return ((rt_fixture *)arg)->shutdown_fired > 0;
}

/* Shuts down, drives the loop until the callback fired, destroys, and
 * asserts that the host's loop closes cleanly. */
static inline void
rtf_stop(rt_fixture *f)
{
    ck_assert_ok(troupe_runtime_shutdown(f->rt, rtf_shutdown_cb, f));
    ck_assert(ts_run_until(&f->loop, rtf_shutdown_done, f, 10000));
    ck_assert_int_eq(f->shutdown_fired, 1);
    troupe_runtime_destroy(f->rt);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(uv_loop_close(&f->loop), 0);
}

/* Spawns an actor of d on scheduler `sched` (-1: any). */
static inline troupe_addr
rtf_spawn_on(troupe_runtime *rt, const troupe_actor_def *d, int sched)
{
    troupe_spawn_opts o = TROUPE_SPAWN_OPTS_INIT;
    o.scheduler = sched;
    troupe_addr a;
    ck_assert_ok(troupe_actor_spawn(rt, d, &o, &a));
    return a;
}

static inline troupe_msg *
mk(uint32_t kind)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, kind, NULL, 0));
    return m;
}

static inline troupe_msg *
mkv(uint32_t kind, uint64_t v)
{
    troupe_msg *m = NULL;
    ck_assert_ok(troupe_msg_create(&m, kind, &v, sizeof(v)));
    return m;
}

static inline uint64_t
msgv(const troupe_msg *m)
{
    uint64_t v = 0;
    if (troupe_msg_len(m) == sizeof(v))
        memcpy(&v, troupe_msg_data(m), sizeof(v));
    return v;
}

/* Resident set size of this process in bytes (/proc/self/statm). Tests
 * run forked, one process each, so a delta from the test's start is what
 * the test made the runtime hold. */
static inline uint64_t
rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%lu %lu", &size, &resident), 2);
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

#endif
