"""The raw ctypes peer of python_pull_batch: the loop of koffi_pull.js in
Python, against librawpull.so: batches of up to 256 task records into one
buffer, each answered SUCCESS; MODE `each` (the default, the loop
../shared/HOSTS.md measured by hand at ~240k/s) with one reply call per
task, `batch` with the answers packed into one reply_batch call.

    python3 ctypes_pull.py LIBRAWPULL [TASKS] [each|batch]

Human lines on stderr; the median tasks/s of $BENCH_REPS reps (default 5)
alone on the last stdout line (bench/peers/peer_run.h).
"""
import ctypes
import os
import struct
import sys
import time

lib = ctypes.CDLL(sys.argv[1])
lib.raw_start.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
lib.raw_start.restype = ctypes.c_int
lib.raw_finish.argtypes = []
lib.raw_finish.restype = ctypes.c_uint64
lib.raw_next_batch.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
lib.raw_next_batch.restype = ctypes.c_int
lib.raw_reply_batch.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
lib.raw_reply_batch.restype = ctypes.c_int
lib.raw_reply.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p,
                         ctypes.c_size_t]
lib.raw_reply.restype = ctypes.c_int

TASKS = int(sys.argv[2]) if len(sys.argv) > 2 else 200000
MODE = sys.argv[3] if len(sys.argv) > 3 else "each"
if MODE not in ("each", "batch"):
    raise SystemExit(f"raw ctypes: mode {MODE}: each or batch")
REPS = int(os.environ.get("BENCH_REPS", "5"))
BATCH = 256
CREDIT = 1024
FIXED = 32
buf = ctypes.create_string_buffer(1 << 20)
rbuf = ctypes.create_string_buffer(BATCH * 16)
fixed = struct.Struct("<QIHHIIq")
reply = struct.Struct("<QII")


def rep():
    if lib.raw_start(TASKS, CREDIT) != 0:
        raise SystemExit("raw ctypes: raw_start failed")
    done = 0
    view = memoryview(buf)
    t0 = time.perf_counter()
    while True:
        n = lib.raw_next_batch(buf, len(buf), BATCH)
        if n < 0:
            break
        off = roff = 0
        for _ in range(n):
            tid, _t, _k, hlen, _a, blen, _d = fixed.unpack_from(view, off)
            if MODE == "each":
                lib.raw_reply(tid, 1, None, 0)
            else:
                reply.pack_into(rbuf, roff, tid, 1, 0)
                roff += 16
            off += (FIXED + hlen + blen + 7) & ~7
        if roff:
            lib.raw_reply_batch(rbuf, roff)
        done += n
    s = time.perf_counter() - t0
    good = lib.raw_finish()
    if good != TASKS:
        raise SystemExit(f"raw ctypes: {good} good replies of {TASKS}")
    return done / s


rep()  # warm-up
rates = []
for r in range(REPS):
    v = rep()
    rates.append(v)
    print(f"raw ctypes pull ({MODE}): rep {r + 1}: {round(v)} tasks/s", file=sys.stderr)
rates.sort()
print(f"{rates[len(rates) // 2]:.1f}")
