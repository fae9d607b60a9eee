// peer_caf_fanout: one sender actor, four receiver actors, on a CAF 0.17
// actor system with exactly two scheduler workers. Prints messages/s.
//
// Definition (mirror it exactly on the troupe side):
//  - M messages in total, M a multiple of 4; each message is one int64 (its
//    sequence number i) and goes to exactly ONE receiver, round-robin:
//    message i goes to receiver i % 4, so each receiver gets M/4.
//    (Round-robin, not broadcast: every message is one send and one
//    delivery, so messages/s = sends/s = deliveries/s.)
//  - Flow control, so the mailboxes stay bounded and the figure does not
//    depend on M: each receiver sends the sender ack(1024) after every 1024
//    messages it got; the sender keeps at most 16384 messages sent but not
//    acknowledged (across all four receivers). Acks add M/1024 messages,
//    which are not counted.
//  - The sender sends at most 1024 messages per handler invocation; if it
//    still has credit and messages left it sends itself "more" and returns
//    (yielding its worker between bursts), otherwise it waits for an ack.
//  - Each receiver counts; when it has M/4 it reports "done".
//  - Time runs from the start message to the sender until the fourth
//    "done" arrives; figure = M / time.
#include "peer_caf_common.hpp"

#include <array>

using namespace caf;

namespace {

constexpr int64_t burst = 1024;
constexpr int64_t ack_every = 1024;
constexpr int64_t window = 16384;
constexpr int nreceivers = 4;

using ack_atom = atom_constant<atom("ack")>;

struct receiver_state {
    int64_t got = 0;
};

behavior
receiver(stateful_actor<receiver_state>* self, actor report, int64_t expect)
{
    return {[=](int64_t) {
        int64_t got = ++self->state.got;
        if (got % ack_every == 0)
            self->send(actor_cast<actor>(self->current_sender()),
                       ack_atom::value, ack_every);
        if (got == expect)
            self->send(report, done_atom::value);
    }};
}

struct sender_state {
    int64_t sent = 0;
    int64_t acked = 0;
    int64_t total = 0;
    bool more_pending = false;
};

behavior
sender(stateful_actor<sender_state>* self,
       std::array<actor, nreceivers> to)
{
    auto pump = [=] {
        auto& st = self->state;
        int64_t end = std::min({st.sent + burst, st.total,
                                st.acked + window});
        for (; st.sent < end; st.sent++)
            self->send(to[st.sent % nreceivers], st.sent);
        if (st.sent < st.total && st.sent < st.acked + window) {
            st.more_pending = true;
            self->send(self, more_atom::value);
        }
    };
    return {
        [=](start_atom, int64_t total) {
            self->state.total = total;
            pump();
        },
        [=](more_atom) {
            self->state.more_pending = false;
            pump();
        },
        [=](ack_atom, int64_t k) {
            self->state.acked += k;
            if (!self->state.more_pending)
                pump();
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
    std::fprintf(stderr, "peer_caf_fanout: CAF %d.%d.%d, %zu scheduler "
                 "workers, 1 sender -> %d receivers round-robin\n",
                 CAF_MAJOR_VERSION, CAF_MINOR_VERSION, CAF_PATCH_VERSION,
                 sys.scheduler().num_workers(), nreceivers);

    auto one = [&](int64_t m) -> double {
        scoped_actor self{sys};
        std::array<actor, nreceivers> rs;
        for (auto& r : rs)
            r = sys.spawn(receiver, actor{self}, m / nreceivers);
        auto s = sys.spawn(sender, rs);
        double ok = -1, t0 = bench_now();
        self->send(s, start_atom::value, m);
        int done = 0;
        self->receive_while([&] { return done < nreceivers; })(
            [&](done_atom) { done++; },
            after(peer_timeout) >> [&] {
                std::fprintf(stderr, "peer_caf_fanout: timed out with %d of "
                             "%d receivers done\n", done, nreceivers);
                done = nreceivers + 1;
            });
        if (done == nreceivers)
            ok = bench_now() - t0;
        anon_send_exit(s, exit_reason::user_shutdown);
        for (auto& r : rs)
            anon_send_exit(r, exit_reason::user_shutdown);
        return ok;
    };
    int rc = peer_reps("peer_caf_fanout", "messages/s", 100000, nreceivers,
                       one);
    if (rc != 0)
        peer_fail_exit(rc);
    return 0;
}
