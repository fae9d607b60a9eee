// peer_caf_pingpong: two CAF 0.17 actors exchange N round trips on an actor
// system with exactly two scheduler workers. One round trip = ping sends an
// int64 to pong, pong sends it back (CAF's own ping-pong idiom: the handler's
// return value goes back to the sender). Prints round trips/s.
//
// Mirror on the troupe side: two actors, N round trips of one small message
// each way, one in flight at a time, timed from the first send to the last
// reply.
#include "peer_caf_common.hpp"

using namespace caf;

namespace {

behavior
pong(event_based_actor*)
{
    return {[](int64_t n) { return n; }};
}

// Counts down: ping sends n to pong, gets n back, sends n-1 ... until 0
// comes back, then reports to `report`.
behavior
ping(event_based_actor* self, actor buddy, actor report)
{
    return {
        [=](start_atom, int64_t n) { self->send(buddy, n); },
        [=](int64_t n) {
            if (n == 0)
                self->send(report, done_atom::value);
            else
                self->send(buddy, n - 1);
        },
    };
}

} // namespace

int
main()
{
    actor_system_config cfg;
    peer_configure(cfg);
    actor_system sys{cfg};
    std::fprintf(stderr, "peer_caf_pingpong: CAF %d.%d.%d, %zu scheduler "
                 "workers\n", CAF_MAJOR_VERSION, CAF_MINOR_VERSION,
                 CAF_PATCH_VERSION, sys.scheduler().num_workers());

    auto one = [&](int64_t n) -> double {
        scoped_actor self{sys};
        auto po = sys.spawn(pong);
        auto pi = sys.spawn(ping, po, actor{self});
        double ok = -1, t0 = bench_now();
        self->send(pi, start_atom::value, n - 1); // n round trips: n-1 .. 0
        self->receive([&](done_atom) { ok = bench_now() - t0; },
                      after(peer_timeout) >> [&] {
                          std::fprintf(stderr, "peer_caf_pingpong: timed out "
                                       "after %lld round trips requested\n",
                                       (long long)n);
                      });
        anon_send_exit(pi, exit_reason::user_shutdown);
        anon_send_exit(po, exit_reason::user_shutdown);
        return ok;
    };
    int rc = peer_reps("peer_caf_pingpong", "round trips/s", 20000, 1, one);
    if (rc != 0)
        peer_fail_exit(rc);
    return 0;
}
