"""bench_python: troupe's Python binding (bindings/python) as a host,
beside the raw ctypes peer, in one run (bench/host/CMakeLists.txt writes
the wrapper that runs it with TROUPE_LIB = libtroupe_bench.so).

    bench python_pull_batch <v> tasks/s peer ctypes_pull_each <p> ratio <r>
    bench python_pull_batch_vs_batched <v> tasks/s peer ctypes_pull_batch <p> ratio <r>
    bench python_pull_reply_batch <v> tasks/s peer ctypes_pull_batch <p> ratio <r>

python_pull_batch: TASKS (BENCH_PULL_TASKS, 200000) tasks with a 16-byte
body from the feed thread of libtroupe_bench.so (bench/host/feed.c) to a
pull target of credit 1024, pulled through the binding's own loop (its
core's pull: batches of <= 256 records parsed into Record objects) and
answered one reply call per task (the blocking form's ack()); tasks/s
from the feed's start to its last outcome. Peer: the same loop shape,
raw ctypes against librawpull.so (same credit, batch and body;
`peer_ctypes_pull TASKS each`), run after each rep with BENCH_REPS=1; the
batched-reply form of the peer is printed beside it.
python_pull_reply_batch: the same loop answering each batch with one
core.reply_batch call (as troupe.aio answers: one call per loop turn),
against the batched-reply peer.

Reps: BENCH_REPS (5) after one warm-up; figures are medians. Any failed
check exits 1.
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "bindings", "python"))
import troupe  # noqa: E402
from troupe._abi import lib  # noqa: E402

REPS = max(1, min(64, int(os.environ.get("BENCH_REPS", "5"))))
TASKS = int(os.environ.get("BENCH_PULL_TASKS", "200000"))
PEERS = os.environ.get("TROUPE_PEERS_DIR", "")

lib.troupe_bench_feed.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                  ctypes.c_uint64, ctypes.c_uint32]
lib.troupe_bench_feed.restype = ctypes.c_int
lib.troupe_bench_feed_wait.argtypes = [ctypes.c_void_p,
                                       ctypes.POINTER(ctypes.c_uint64)]
lib.troupe_bench_feed_wait.restype = ctypes.c_int


def fail(msg):
    print("bench_python: " + msg, file=sys.stderr)
    sys.exit(1)


def peer_once(mode):
    if not PEERS:
        return -1.0
    env = dict(os.environ, BENCH_REPS="1")
    r = subprocess.run([os.path.join(PEERS, "peer_ctypes_pull"), str(TASKS),
                        mode], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return -1.0
    try:
        return float(r.stdout.strip().split("\n")[-1])
    except ValueError:
        return -1.0


def median(v):
    s = sorted(v)
    return s[len(s) // 2]


def main():
    d = tempfile.mkdtemp(prefix="troupe-bench-python-")
    n = troupe.Node(d, sync=2)
    core = n._c
    core.register_pull("feed", credit=1024)

    def rep(count, batched=False):
        t0 = time.perf_counter()
        if lib.troupe_bench_feed(core.handle, b"feed", count, 16) != 0:
            fail("troupe_bench_feed failed")
        handled = 0
        while handled < count:
            recs = core.pull(50, 256)
            if batched:
                core.reply_batch([(rec.id, 1, b"") for rec in recs])
            else:
                for rec in recs:
                    core.reply(rec.id, 1)
            handled += len(recs)
        ok = ctypes.c_uint64()
        rc = lib.troupe_bench_feed_wait(core.handle, ctypes.byref(ok))
        s = time.perf_counter() - t0
        if rc != 0 or ok.value != count:
            fail(f"python_pull_batch: feed_wait {rc}, {ok.value} succeeded "
                 f"of {count}")
        return count / s

    rep(max(1, TASKS // 10))
    v, vb, pe, pb = [], [], [], []
    for r in range(1, REPS + 1):
        v.append(rep(TASKS))
        vb.append(rep(TASKS, batched=True))
        pe.append(peer_once("each"))
        pb.append(peer_once("batch"))
        print(f"python_pull_batch rep {r}: troupe {round(v[-1])} tasks/s, "
              f"raw ctypes {round(pe[-1])} tasks/s (batched replies "
              f"{round(pb[-1])})", file=sys.stderr)
    n.close()
    t = median(v)
    p = -1.0 if min(pe) < 0 else median(pe)
    ratio = f"{t / p:.3f}" if p > 0 else "-1"
    print(f"bench python_pull_batch {t:.1f} tasks/s peer ctypes_pull_each "
          f"{p:.1f} ratio {ratio}")
    if min(pb) > 0:
        print(f"bench python_pull_batch_vs_batched {t:.1f} tasks/s peer "
              f"ctypes_pull_batch {median(pb):.1f} ratio "
              f"{t / median(pb):.3f}")
        tb = median(vb)
        print(f"bench python_pull_reply_batch {tb:.1f} tasks/s peer "
              f"ctypes_pull_batch {median(pb):.1f} ratio "
              f"{tb / median(pb):.3f}")


if __name__ == "__main__":
    main()
