// Shared by the CAF peers: actor system with exactly two worker threads,
// rep loop with a calibrated message count, and the output convention
// (human lines on stderr, the median alone on the last stdout line).
#ifndef TROUPE_PEER_CAF_COMMON_HPP
#define TROUPE_PEER_CAF_COMMON_HPP

#include <caf/all.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>

extern "C" {
#include "../bench_util.h"
}

// Seconds one rep aims for; the count is calibrated from a warm-up run so a
// rep stays near this on a fast or a slow (or busy) machine.
constexpr double peer_rep_seconds = 1.0;
// A rep that has not finished after this long is a failure, not a figure.
constexpr auto peer_timeout = std::chrono::seconds(30);

using start_atom = caf::atom_constant<caf::atom("start")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using more_atom = caf::atom_constant<caf::atom("more")>;

inline void
peer_configure(caf::actor_system_config& cfg)
{
    // Exactly two scheduler workers (the machine troupe targets has 2 cores
    // and troupe's benches run two loops).
    // Everything else stays at CAF's defaults (work-stealing scheduler).
    cfg.set("scheduler.max-threads", 2);
}

// Runs `one(count)` (returns the elapsed seconds, or < 0 on failure) once to
// warm up and calibrate, then BENCH_REPS times; prints each rate on stderr
// and the median on stdout. Returns the exit status.
inline int
peer_reps(const char* name, const char* unit, int64_t warmup_count,
          int64_t granule, const std::function<double(int64_t)>& one)
{
    double t = one(warmup_count);
    if (t <= 0) {
        std::fprintf(stderr, "%s: warm-up failed\n", name);
        return 1;
    }
    double rate = (double)warmup_count / t;
    int64_t n = (int64_t)(rate * peer_rep_seconds);
    n = std::max<int64_t>(warmup_count, std::min<int64_t>(n, 50000000));
    n -= n % granule;
    int reps = bench_reps(5);
    std::fprintf(stderr, "%s: warm-up %.0f %s, %d reps of %lld\n", name, rate,
                 unit, reps, (long long)n);
    double v[64];
    for (int i = 0; i < reps; i++) {
        t = one(n);
        if (t <= 0) {
            std::fprintf(stderr, "%s: rep %d failed\n", name, i + 1);
            return 1;
        }
        v[i] = (double)n / t;
        std::fprintf(stderr, "%s: rep %d: %.0f %s (%.3f s)\n", name, i + 1,
                     v[i], unit, t);
    }
    double med = bench_median(v, reps);
    std::fprintf(stderr, "%s: median %.0f %s\n", name, med, unit);
    std::printf("%.0f\n", med);
    std::fflush(stdout);
    return 0;
}

// After a failed rep actors may still be running or stuck: leave without
// running the actor system's destructor (which would wait for them).
[[noreturn]] inline void
peer_fail_exit(int rc)
{
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(rc);
}

#endif
