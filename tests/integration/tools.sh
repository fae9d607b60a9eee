#!/usr/bin/env bash
# The troupe command, as a user runs it: version, help, bad flags and bad
# URLs (exit 2, saying what was wrong), unreachable URLs (exit 1 with a
# message), a node that serves pings and stops cleanly on SIGTERM and on
# SIGINT, stats of the node's database and its tables' counters
# (read-only, also while the node runs). Loopback only; every wait polls a condition with a deadline.
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
expect 2 "node bad listen URL scheme" -- "$troupe" node --data "$tmp/d" --listen nonsense://x
grep -q "unknown URL scheme 'nonsense'" "$tmp/err" && ok "bad URL scheme is named" || bad "bad URL message"
[ ! -e "$tmp/d" ] && ok "a usage error opens nothing" || bad "node made $tmp/d"
expect 1 "node cannot listen" -- "$troupe" node --data "$tmp/d" --listen ipc:///nonexistent-dir/x.ipc
grep -q "cannot listen on ipc:///nonexistent-dir/x.ipc" "$tmp/err" && ok "listen failure is explained" ||
    bad "listen failure message"
expect 2 "ping without URL" -- "$troupe" ping
expect 2 "ping bad count" -- "$troupe" ping tcp://127.0.0.1:1 --count abc
grep -q -- "--count wants a number in 1..10000000, got 'abc'" "$tmp/err" &&
    ok "bad number shows the value" || bad "bad number message"
expect 2 "ping bad URL scheme" -- "$troupe" ping foo://x --timeout 300
grep -q "unknown URL scheme 'foo'" "$tmp/err" && ! grep -q "did not answer" "$tmp/err" &&
    ok "bad scheme is named, not a timeout" || bad "bad scheme message"
expect 2 "ping not a URL" -- "$troupe" ping localhost:7000
grep -q "wants a URL" "$tmp/err" && ok "not a URL is explained" || bad "not a URL message"
expect 2 "ping inproc" -- "$troupe" ping inproc://x
grep -q "only inside one" "$tmp/err" && ok "inproc is explained" || bad "inproc message"
expect 2 "peer bad URL scheme" -- "$troupe" node --data "$tmp/d" --listen tcp://127.0.0.1:0 --peer 2=udp://h:1
grep -q "unknown URL scheme 'udp'" "$tmp/err" && ok "bad peer scheme is named" || bad "peer scheme message"
expect 2 "ping two URLs" -- "$troupe" ping tcp://127.0.0.1:1 tcp://127.0.0.1:2
expect 1 "ping unreachable" -- "$troupe" ping tcp://127.0.0.1:1 --timeout 300
grep -q "did not answer" "$tmp/err" && ok "unreachable is explained" || bad "unreachable message"

# The family names the last `troupe stats --data` printed, one a line.
families() { sed -n 's/^family \([^ ]*\) .*/\1/p' "$tmp/out"; }

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
    expect 0 "ping --count=N" -- "$troupe" ping --count=7 "$url" --timeout=5000
    grep -q "7 round trips" "$tmp/out" && ok "--flag=value and a flag before the URL" ||
        bad "ping --count=7 output"
    if [ "$sig" = TERM ]; then
        # Read-only while the node holds the database ...
        expect 0 "stats beside the running node" -- "$troupe" stats --data "$tmp/data"
        grep -q '^family kv keys [0-9]* ' "$tmp/out" && grep -q '^family default ' "$tmp/out" &&
            ok "stats shows the node's families" || { bad "stats output beside the node"; cat "$tmp/out"; }
        # ... the tables' counters too (read-only tables), creating no
        # family. The node's one table is its coordinator's, troupe.gtx.
        families >"$tmp/fam-before"
        expect 0 "stats --tables beside the running node" -- "$troupe" stats --data "$tmp/data" --tables
        grep -q '^tables 1$' "$tmp/out" && grep -q '^table troupe\.gtx ' "$tmp/out" &&
            grep -q '^txn created 0 closed 0 running 0$' "$tmp/out" &&
            ok "stats --tables works beside the node" || { bad "stats --tables beside the node"; cat "$tmp/out" "$tmp/err"; }
        expect 0 "stats after --tables" -- "$troupe" stats --data "$tmp/data"
        families >"$tmp/fam-after"
        cmp -s "$tmp/fam-before" "$tmp/fam-after" && grep -qx meta "$tmp/fam-after" &&
            ok "stats --tables beside the node creates no family" ||
            { bad "families changed"; diff "$tmp/fam-before" "$tmp/fam-after"; }
    fi
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
listing() { (cd "$1" && find . -type f -printf '%p %s %T@\n' | sort && cat ./* | cksum); }
listing "$tmp/data" >"$tmp/before"
expect 0 "stats" -- "$troupe" stats --data="$tmp/data"
grep -q '^families [1-9]' "$tmp/out" && grep -q '^family kv keys 0 ' "$tmp/out" &&
    ok "stats prints the families" || { bad "stats output"; cat "$tmp/out"; }
listing "$tmp/data" >"$tmp/after"
cmp -s "$tmp/before" "$tmp/after" && ok "stats writes nothing" ||
    { bad "stats changed the database"; diff "$tmp/before" "$tmp/after"; }
expect 0 "stats --tables" -- "$troupe" stats --data "$tmp/data" --tables
grep -q '^tables 1$' "$tmp/out" && grep -q '^txn created 0 closed 0 running 0$' "$tmp/out" &&
    grep -q '^versioned_commit ok 0 failed 0$' "$tmp/out" &&
    ok "stats --tables prints the counters" || { bad "stats --tables output"; cat "$tmp/out"; }
listing "$tmp/data" >"$tmp/after"
cmp -s "$tmp/before" "$tmp/after" && ok "stats --tables writes nothing" ||
    { bad "stats --tables changed the database"; diff "$tmp/before" "$tmp/after"; }
mkdir "$tmp/empty"
expect 1 "stats of a directory without a database" -- "$troupe" stats --data "$tmp/empty"
grep -q "no database at" "$tmp/err" && [ -z "$(ls -A "$tmp/empty")" ] &&
    ok "an empty directory stays empty" || bad "stats of an empty directory"
expect 2 "stats --log-level bad" -- "$troupe" stats --data "$tmp/data" --log-level loud
grep -q "got 'loud'" "$tmp/err" && ok "bad log level is named" || bad "log level message"

# Help and usage: every command has --help (exit 0, its usage line on
# stdout); usage errors exit 2, say what was wrong, then the usage line.
expect 0 "--help" -- "$troupe" --help
for c in node ping stats queue version help; do
    grep -q "^  $c " "$tmp/out" && ok "--help lists $c" || bad "--help does not list $c"
done
cp "$tmp/out" "$tmp/top-help"
expect 0 "help" -- "$troupe" help
cmp -s "$tmp/out" "$tmp/top-help" && ok "help is --help" || bad "help differs from --help"
for c in node ping stats queue "queue list" "queue stats" "queue pending" "queue completed" "queue show"; do
    # shellcheck disable=SC2086
    expect 0 "$c --help" -- "$troupe" $c --help
    grep -q "^usage: troupe $c" "$tmp/out" && ok "$c --help shows its usage" ||
        { bad "$c --help output"; cat "$tmp/out"; }
    cp "$tmp/out" "$tmp/cmd-help"
    # shellcheck disable=SC2086
    expect 0 "help $c" -- "$troupe" help $c
    cmp -s "$tmp/out" "$tmp/cmd-help" && ok "help $c is $c --help" || bad "help $c differs"
done
expect 0 "-h after flags" -- "$troupe" stats --data "$tmp/nothing-here" -h
grep -q "^usage: troupe stats" "$tmp/out" && ok "-h wins over the rest" || bad "-h output"
expect 2 "version with an argument" -- "$troupe" version now
expect 2 "help of an unknown command" -- "$troupe" help frobnicate
expect 2 "a flag before the command" -- "$troupe" --data x stats
grep -q "unknown flag --data" "$tmp/err" && ok "a flag before the command is named" || bad "flag first message"
expect 2 "unknown flag" -- "$troupe" stats --data "$tmp/data" --bogus=1
grep -q "^troupe stats: unknown flag --bogus$" "$tmp/err" && grep -q "^usage: troupe stats" "$tmp/err" &&
    ok "unknown flag is named, with the usage" || { bad "unknown flag message"; cat "$tmp/err"; }
expect 2 "missing value" -- "$troupe" node --data "$tmp/d" --listen
grep -q "^troupe node: --listen needs a value$" "$tmp/err" && ok "missing value is named" ||
    { bad "missing value message"; cat "$tmp/err"; }
expect 2 "value for a flag that takes none" -- "$troupe" stats --data "$tmp/data" --tables=yes
grep -q "tables takes no value" "$tmp/err" && ok "--tables=yes is explained" || bad "--tables=yes message"
expect 2 "stray argument" -- "$troupe" stats --data "$tmp/data" extra
grep -q "unexpected argument 'extra'" "$tmp/err" && ok "stray argument is named" || bad "stray argument message"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
