#!/usr/bin/env bash
# Self-check of the BullMQ peer: runs every mode once on a small workload,
# checks each prints one positive number on its last stdout line and leaves
# no redis-server or temp dir behind, then checks that SIGTERM mid-run also
# cleans up. About 15 s. Needs node_modules (npm ci) and redis-server.
#
#   bench/peers/bullmq/selfcheck.sh                      # the .mjs via node
#   bench/peers/bullmq/selfcheck.sh BUILD/bench/peers/peer_bullmq   # wrapper
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ge 1 ]; then
    peer=("$1")
else
    peer=(node "$here/peer_bullmq.mjs")
fi
export BENCH_REPS=1 BULLMQ_EVENTS=${BULLMQ_EVENTS:-2000}
tmp=${TMPDIR:-/tmp}
pass=0
fail=0

leftovers() {
    # $1: the peer's stderr, which names its redis-server's port. redis-server
    # retitles itself "redis-server 127.0.0.1:PORT".
    local dirs procs port
    dirs=$(find "$tmp" -maxdepth 1 -name 'troupe-bullmq.*' -newer "$stamp" 2>/dev/null)
    port=$(sed -n 's/.*redis-server .* on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$1" | head -1)
    if [ -z "$port" ]; then
        echo "  no redis-server port in the peer's stderr"
        return 1
    fi
    procs=$(pgrep -f -- "redis-server 127\.0\.0\.1:$port\b" 2>/dev/null || true)
    [ -z "$dirs$procs" ] || { echo "  left behind: ${dirs:-} ${procs:+pids $procs}"; return 1; }
}

check() {
    local label=$1 out last
    shift
    out=$("${peer[@]}" "$@" 2>"$tmp/peer_bullmq_selfcheck.err")
    local rc=$?
    last=$(printf '%s\n' "$out" | tail -n 1)
    if [ $rc -eq 0 ] && [[ $last =~ ^[0-9]+(\.[0-9]+)?$ ]] &&
        awk -v v="$last" 'BEGIN { exit !(v > 0) }' &&
        leftovers "$tmp/peer_bullmq_selfcheck.err"; then
        echo "ok   $label: $last"
        pass=$((pass + 1))
    else
        echo "FAIL $label: exit $rc, last line '$last'"
        sed 's/^/  | /' "$tmp/peer_bullmq_selfcheck.err"
        fail=$((fail + 1))
    fi
}

stamp=$(mktemp "$tmp/peer_bullmq_selfcheck.XXXXXX")
trap 'rm -f "$stamp" "$tmp/peer_bullmq_selfcheck.err"' EXIT

check "sync 1 (events/s)" "sync 1"
check "nosync 1 (events/s)" nosync 1
check "sync 4 (events/s)" "sync 4"
check "due 100 p50 (us)" "due 100 p50"
check "due 100 p99 (us)" due 100 p99

# Bad arguments: non-zero exit, nothing started.
if "${peer[@]}" bogus >/dev/null 2>&1; then
    echo "FAIL bad arguments accepted"
    fail=$((fail + 1))
else
    echo "ok   bad arguments rejected"
    pass=$((pass + 1))
fi

# SIGTERM in the middle of a run: exit 143, redis stopped, temp dir gone.
BULLMQ_EVENTS=200000 "${peer[@]}" sync 1 >/dev/null 2>"$tmp/peer_bullmq_selfcheck.err" &
pid=$!
sleep 3
kill -TERM "$pid"
wait "$pid"
rc=$?
sleep 0.5
if [ $rc -eq 143 ] && leftovers "$tmp/peer_bullmq_selfcheck.err"; then
    echo "ok   SIGTERM mid-run cleans up (exit $rc)"
    pass=$((pass + 1))
else
    echo "FAIL SIGTERM mid-run: exit $rc"
    fail=$((fail + 1))
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
