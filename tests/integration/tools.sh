#!/usr/bin/env bash
# The troupe command, as a user runs it: version, bad flags (exit 2),
# unreachable URLs (exit 1 with a message), a node that serves pings and
# stops cleanly on SIGTERM and on SIGINT, stats of the node's database. Loopback only; every wait polls a
# condition with a deadline.
set -u
troupe=${1:?usage: tools.sh PATH/TO/troupe}
tmp=$(mktemp -d)
node_pid=""
cleanup() {
    [ -n "$node_pid" ] && kill -9 "$node_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/checks.sh"

expect 0 "version" -- "$troupe" version
want_version=$(sed -n 's/^project(troupe VERSION \([0-9.]*\) .*/\1/p' "$(dirname "$0")/../../CMakeLists.txt")
[ -n "$want_version" ] && [ "$(cat "$tmp/out")" = "troupe $want_version" ] &&
    ok "version prints the project's version" || { bad "version output"; cat "$tmp/out"; }
expect 0 "--version" -- "$troupe" --version
[ "$(cat "$tmp/out")" = "troupe $want_version" ] && ok "--version prints it" ||
    { bad "--version output"; cat "$tmp/out"; }
expect 2 "no command" -- "$troupe"
expect 2 "unknown command" -- "$troupe" frobnicate
expect 2 "node without flags" -- "$troupe" node
expect 2 "node unknown flag" -- "$troupe" node --data "$tmp/d" --listen tcp://127.0.0.1:0 --bogus 1
expect 2 "node bad id" -- "$troupe" node --data "$tmp/d" --listen tcp://127.0.0.1:0 --id 0
expect 1 "node bad listen URL" -- "$troupe" node --data "$tmp/d" --listen nonsense://x
grep -q "cannot listen" "$tmp/err" && ok "bad URL is explained" || bad "bad URL message"
expect 2 "ping without URL" -- "$troupe" ping
expect 2 "ping bad count" -- "$troupe" ping tcp://127.0.0.1:1 --count abc
expect 1 "ping unreachable" -- "$troupe" ping tcp://127.0.0.1:1 --timeout 300
grep -q "did not answer" "$tmp/err" && ok "unreachable is explained" || bad "unreachable message"

for sig in TERM INT; do
    # One output file per run: the background shell truncates it later
    # than this one moves on, so a shared file could show the last run's.
    out="$tmp/node-$sig.out"
    "$troupe" node --data "$tmp/data" --listen tcp://127.0.0.1:0 >"$out" 2>&1 &
    node_pid=$!
    if ! wait_for "$out" "listening on tcp://"; then
        bad "node did not start"; cat "$out"; break
    fi
    url=$(grep -o 'tcp://127\.0\.0\.1:[0-9]*' "$out" | head -n 1)
    expect 0 "ping $url" -- "$troupe" ping "$url" --count 50
    grep -q "50 round trips" "$tmp/out" && ok "ping reports round trips" || bad "ping output"
    kill -"$sig" "$node_pid"
    wait "$node_pid"
    rc=$?
    node_pid=""
    [ "$rc" -eq 0 ] && ok "node exits 0 on SIG$sig" || bad "node exit $rc on SIG$sig"
    grep -q "stopped cleanly" "$out" && ok "node stopped cleanly" || {
        bad "no clean stop"; cat "$out"; }
done

expect 2 "stats without flags" -- "$troupe" stats
expect 2 "stats unknown flag" -- "$troupe" stats --data "$tmp/data" --bogus 1
expect 2 "stats flag without value" -- "$troupe" stats --data
expect 1 "stats of a missing database" -- "$troupe" stats --data "$tmp/nothing-here"
grep -q "no database at" "$tmp/err" && ok "missing database is explained" || bad "missing database message"
[ ! -e "$tmp/nothing-here" ] && ok "stats creates nothing" || bad "stats created a database"
expect 0 "stats" -- "$troupe" stats --data "$tmp/data"
grep -q '^tables 0$' "$tmp/out" && grep -q '^txn created 0 closed 0 running 0$' "$tmp/out" &&
    grep -q '^versioned_commit ok 0 failed 0$' "$tmp/out" &&
    ok "stats prints the counters" || { bad "stats output"; cat "$tmp/out"; }

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
