/*
 * Fixed-bucket histograms (troupe/hist.h). Bounds double from `base`, so a
 * value's bucket is found without a search: v <= base is bucket 0, else
 * the bucket is the bit length of (v - 1) / base, which puts every v in
 * (base << (i - 1), base << i] in bucket i.
 */
#include "troupe/hist.h"

void
troupe_hist_init(troupe_hist *h, uint64_t base, unsigned n)
{
    h->base = base ? base : 1;
    h->n = n < 1 ? 1 : n > TROUPE_HIST_MAX ? TROUPE_HIST_MAX : n;
    for (unsigned i = 0; i <= TROUPE_HIST_MAX; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum, 0);
}

void
troupe_hist_add(troupe_hist *h, uint64_t v)
{
    unsigned i = 0;
    if (v > h->base) {
        uint64_t q = (v - 1) / h->base;
        i = (unsigned)(64 - __builtin_clzll(q));
        if (i > h->n)
            i = h->n;
    }
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, v, memory_order_relaxed);
}

void
troupe_hist_read(const troupe_hist *h, troupe_hist_snapshot *out)
{
    troupe_hist *m = (troupe_hist *)h;
    out->base = h->base;
    out->n = h->n;
    out->count = 0;
    for (unsigned i = 0; i <= TROUPE_HIST_MAX; i++) {
        out->counts[i] = i <= h->n ? atomic_load_explicit(&m->counts[i],
                                                          memory_order_relaxed)
                                   : 0;
        out->count += out->counts[i];
    }
    out->sum = atomic_load_explicit(&m->sum, memory_order_relaxed);
}

uint64_t
troupe_hist_bound(const troupe_hist_snapshot *s, unsigned i)
{
    return i < 64 ? s->base << i : UINT64_MAX;
}
