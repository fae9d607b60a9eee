#include "twire.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct {
    pthread_mutex_t mu;
    ts_wire_rec *r;
    size_t n, cap;
    troupe_err refuse;
} W = {.mu = PTHREAD_MUTEX_INITIALIZER};

static troupe_err
wire_send(void *ctx, troupe_msg **m)
{
    (void)ctx;
    troupe_msg *x = *m;
    *m = NULL;
    ts_wire_rec rec = {.kind = x->kind,
                       .flags = x->flags,
                       .from = x->from,
                       .to = x->to,
                       .corr = x->corr,
                       .err = x->err,
                       .len = troupe_msg_len(x)};
    if (rec.len >= sizeof(rec.v))
        memcpy(&rec.v, troupe_msg_data(x), sizeof(rec.v));
    troupe_msg_destroy(x);
    pthread_mutex_lock(&W.mu);
    troupe_err e = W.refuse;
    if (e == TROUPE_OK) {
        if (W.n == W.cap) {
            W.cap = W.cap ? 2 * W.cap : 1024;
            W.r = realloc(W.r, W.cap * sizeof(*W.r));
            ck_assert_ptr_nonnull(W.r);
        }
        W.r[W.n++] = rec;
    }
    pthread_mutex_unlock(&W.mu);
    return e;
}

static const troupe_remote_ops wire_ops = {.send = wire_send};

void
ts_wire_install(troupe_runtime *rt)
{
    ts_wire_clear();
    ts_wire_refuse(TROUPE_OK);
    troupe_runtime_set_remote(rt, &wire_ops, NULL);
}

void
ts_wire_refuse(troupe_err e)
{
    pthread_mutex_lock(&W.mu);
    W.refuse = e;
    pthread_mutex_unlock(&W.mu);
}

size_t
ts_wire_count(void)
{
    pthread_mutex_lock(&W.mu);
    size_t n = W.n;
    pthread_mutex_unlock(&W.mu);
    return n;
}

bool
ts_wire_has(void *arg)
{
    return ts_wire_count() >= *(size_t *)arg;
}

ts_wire_rec
ts_wire_at(size_t i)
{
    pthread_mutex_lock(&W.mu);
    ck_assert_uint_lt(i, W.n);
    ts_wire_rec r = W.r[i];
    pthread_mutex_unlock(&W.mu);
    return r;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

uint64_t *
ts_wire_sorted_corrs(size_t *n)
{
    pthread_mutex_lock(&W.mu);
    uint64_t *c = malloc((W.n ? W.n : 1) * sizeof(*c));
    ck_assert_ptr_nonnull(c);
    for (size_t i = 0; i < W.n; i++)
        c[i] = W.r[i].corr;
    *n = W.n;
    pthread_mutex_unlock(&W.mu);
    qsort(c, *n, sizeof(*c), cmp_u64);
    return c;
}

void
ts_wire_clear(void)
{
    pthread_mutex_lock(&W.mu);
    free(W.r);
    W.r = NULL;
    W.n = W.cap = 0;
    pthread_mutex_unlock(&W.mu);
}
