/*
 * Shared by every benchmark: timing, medians, and the one machine-readable
 * line form:
 *   bench <name> <value> <unit> peer <peer-name> <peer-value> ratio <r>
 *   bench <name> <value> <unit>
 * Figures are medians of several runs, taken side by side with the peer.
 */
#ifndef TROUPE_BENCH_UTIL_H
#define TROUPE_BENCH_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double
bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values (sorts a copy). */
static inline double
bench_median(const double *v, int n)
{
    double tmp[64];
    if (n <= 0 || n > 64)
        return 0;
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof(double), bench_cmp_double);
    return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

/* Repetitions: $BENCH_REPS or the given default. */
static inline int
bench_reps(int dflt)
{
    const char *s = getenv("BENCH_REPS");
    int n = s ? atoi(s) : dflt;
    return n < 1 ? 1 : n > 64 ? 64 : n;
}

static inline void
bench_line_peer(const char *name, double value, const char *unit,
                const char *peer, double peer_value)
{
    printf("bench %s %.6g %s peer %s %.6g ratio %.3f\n", name, value, unit,
           peer, peer_value, peer_value > 0 ? value / peer_value : 0.0);
    fflush(stdout);
}

static inline void
bench_line(const char *name, double value, const char *unit)
{
    printf("bench %s %.6g %s\n", name, value, unit);
    fflush(stdout);
}

static int
bench_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Removes the tree at dir (a bench's temporary database). */
static inline void
bench_rmtree(const char *dir)
{
    nftw(dir, bench_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
