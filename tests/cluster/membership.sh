#!/usr/bin/env bash
# Membership end to end (docs/cluster.md): a real etcd (etcd.sh) and
# `troupe node` processes started from config files. Both nodes register;
# a flag overrides its config's value; a second process with a live id is
# refused; a node killed with SIGKILL disappears once its lease (4 s here)
# expires while the other stays past several TTLs (its renewals work); a
# node stopped with SIGTERM is gone at once (its lease revoked). Bad
# config files and flags are usage errors that say what was wrong; an
# entry in etcd that is not a node's is reported. Every wait polls a
# condition with a deadline.
set -u
troupe=${1:?usage: membership.sh PATH/TO/troupe}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=()
. "$here/etcd.sh"
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    etcd_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
. "$here/../integration/checks.sh"

TTL=4
etcd_start "$tmp" || { echo "FAIL: etcd would not start"; exit 1; }
ok "etcd up at $ETCD_URL"

nodes() { "$troupe" cluster nodes --etcd "$ETCD_URL" 2>"$tmp/nodes.err"; }
# listed ID: node ID is in the listing now
listed() { nodes | grep -q "^$1 tcp://"; }
# until DEADLINE_S CMD...: polls CMD every 0.1 s until it succeeds
until_ok() {
    local deadline=$((SECONDS + $1))
    shift
    while [ $SECONDS -lt $deadline ]; do
        "$@" && return 0
        sleep 0.1
    done
    return 1
}
not() { ! "$@"; }

cat >"$tmp/n1.conf" <<CONF
# node one
id = 1
listen = tcp://127.0.0.1:0
data = $tmp/d1
etcd = $ETCD_URL
lease_ttl = $TTL
CONF
# node two's file names id 99: the --id flag overrides it
cat >"$tmp/n2.conf" <<CONF
id=99
  listen   =   tcp://127.0.0.1:0
data = $tmp/d2

etcd = $ETCD_URL
lease_ttl = $TTL
CONF

# ---- bad input -------------------------------------------------------------
printf 'id = 1\nbogus = 2\n' >"$tmp/bad1.conf"
expect 2 "unknown config key" -- "$troupe" node --config "$tmp/bad1.conf"
says "$tmp/err" "bad1.conf:2: unknown key 'bogus'" "the unknown key and its line are named"
printf 'id = 1\nid = 2\n' >"$tmp/bad2.conf"
expect 2 "a key set twice" -- "$troupe" node --config "$tmp/bad2.conf"
says "$tmp/err" "bad2.conf:2: id is set twice" "the repeated key is named"
printf 'listen tcp://127.0.0.1:0\n' >"$tmp/bad3.conf"
expect 2 "a line without =" -- "$troupe" node --config "$tmp/bad3.conf"
says "$tmp/err" "bad3.conf:1: not a \`key = value\` line" "the bad line is named"
printf 'id =\n' >"$tmp/bad4.conf"
expect 2 "an empty value" -- "$troupe" node --config "$tmp/bad4.conf"
printf 'id = 1\nlisten = tcp://127.0.0.1:0\ndata = %s/dx\nlease_ttl = 1\n' "$tmp" >"$tmp/bad5.conf"
expect 2 "lease_ttl out of range" -- "$troupe" node --config "$tmp/bad5.conf" --etcd "$ETCD_URL"
says "$tmp/err" "lease_ttl (in --config) wants a number in 2..3600" "the range is said"
printf 'id = 1\nlisten = nonsense://x\ndata = %s/dx\n' "$tmp" >"$tmp/bad6.conf"
expect 2 "a bad listen URL in the file" -- "$troupe" node --config "$tmp/bad6.conf"
expect 2 "a missing config file" -- "$troupe" node --config "$tmp/none.conf"
says "$tmp/err" "none.conf: No such file" "the missing file is named"
expect 2 "a bad etcd URL" -- "$troupe" node --data "$tmp/dx" --listen tcp://127.0.0.1:0 --etcd ftp://x
says "$tmp/err" "\-\-etcd wants http://HOST:PORT" "the bad etcd URL is explained"
expect 2 "--lease-ttl without --etcd" -- "$troupe" node --data "$tmp/dx" --listen tcp://127.0.0.1:0 --lease-ttl 5
[ ! -e "$tmp/dx" ] && ok "a usage error opens nothing" || bad "node made $tmp/dx"
expect 1 "a node whose etcd is unreachable" -- "$troupe" node --data "$tmp/dz" --listen tcp://127.0.0.1:0 --etcd http://127.0.0.1:1
says "$tmp/err" "register in etcd: .*EUNREACHABLE" "the unreachable etcd is said"
expect 2 "cluster without a subcommand" -- "$troupe" cluster
expect 2 "cluster nodes without --etcd" -- "$troupe" cluster nodes
expect 2 "cluster unknown subcommand" -- "$troupe" cluster frob --etcd "$ETCD_URL"
expect 1 "cluster nodes, etcd unreachable" -- "$troupe" cluster nodes --etcd http://127.0.0.1:1 --timeout 2000
expect 0 "cluster nodes, none registered" -- "$troupe" cluster nodes --etcd "$ETCD_URL"
[ ! -s "$tmp/out" ] && ok "an empty listing prints nothing" || bad "listing: $(cat "$tmp/out")"

# ---- two nodes ---------------------------------------------------------------
"$troupe" node --config "$tmp/n1.conf" >"$tmp/n1.out" 2>&1 &
n1=$!
pids+=("$n1")
"$troupe" node --config "$tmp/n2.conf" --id 2 >"$tmp/n2.out" 2>&1 &
n2=$!
pids+=("$n2")
wait_for "$tmp/n1.out" "registered in etcd" && ok "node 1 says it registered" ||
    { bad "node 1 did not register"; cat "$tmp/n1.out"; }
wait_for "$tmp/n2.out" "registered in etcd as /troupe/nodes/2 " && ok "node 2 registered as 2 (--id over the file's 99)" ||
    { bad "node 2 did not register as 2"; cat "$tmp/n2.out"; }
nodes >"$tmp/list"
[ "$(cut -d' ' -f1 "$tmp/list" | tr '\n' ' ')" = "1 2 " ] && ok "both listed, in id order" ||
    { bad "listing"; cat "$tmp/list" "$tmp/nodes.err"; }
url1=$(sed -n 's/.*listening on \([^,]*\),.*/\1/p' "$tmp/n1.out")
grep -q "^1 $url1 lease=" "$tmp/list" && ok "node 1's entry has its real listen URL ($url1)" ||
    { bad "node 1's URL"; cat "$tmp/list"; }

expect 1 "a second process with a live id" -- "$troupe" node --data "$tmp/d3" --listen tcp://127.0.0.1:0 --id 1 --etcd "$ETCD_URL"
says "$tmp/err" "node 1 is registered in etcd under a live lease" "the live id is refused, saying why"
listed 1 && ok "node 1 is still listed after the refused duplicate" || bad "the duplicate removed node 1"

# ---- kill -9 -------------------------------------------------------------------
start=$SECONDS
kill -9 "$n2"
wait "$n2" 2>/dev/null
listed 2 && ok "node 2 is listed right after its death (its lease lives)" ||
    bad "node 2 vanished before its lease could expire"
until_ok $((TTL * 4 + 10)) not listed 2 && ok "node 2 gone after its lease expired ($((SECONDS - start)) s, ttl $TTL s)" ||
    bad "node 2 still listed"
listed 1 && ok "node 1 stayed" || bad "node 1 vanished"
# node 1 up for three TTLs since it registered: each renewal must have worked
held=1
while [ $((SECONDS - start)) -lt $((TTL * 3)) ]; do
    listed 1 || { held=0; break; }
    sleep 0.2
done
[ $held = 1 ] && listed 1 && ok "node 1 listed throughout $((TTL * 3)) s (renewals)" || bad "node 1 lost its lease"

# ---- a hostile entry -------------------------------------------------------
key=$(printf '/troupe/nodes/x7' | base64)
val=$(printf 'not json' | base64)
curl -s --noproxy '*' -X POST "$ETCD_URL/v3/kv/put" -d "{\"key\":\"$key\",\"value\":\"$val\"}" >/dev/null
expect 1 "a malformed entry in /troupe/nodes/" -- "$troupe" cluster nodes --etcd "$ETCD_URL"
says "$tmp/err" "/troupe/nodes/x7 is not a node's entry" "the bad entry is named"
says "$tmp/out" "^1 tcp://" "the good entries are still printed"
curl -s --noproxy '*' -X POST "$ETCD_URL/v3/kv/deleterange" -d "{\"key\":\"$key\"}" >/dev/null

# ---- the partition map ---------------------------------------------------------
expect 0 "cluster map, none yet" -- "$troupe" cluster map --etcd "$ETCD_URL"
[ "$(cat "$tmp/out")" = "revision 0" ] && ok "no map: revision 0" || bad "map: $(cat "$tmp/out")"
expect 1 "assign to a node that is down" -- "$troupe" cluster assign table:orders:0 2 --etcd "$ETCD_URL"
says "$tmp/err" "node 2 is not registered" "the down node is named"
expect 2 "assign a bad unit" -- "$troupe" cluster assign orders 1 --etcd "$ETCD_URL"
expect 2 "assign a bad node" -- "$troupe" cluster assign coord:0 0 --etcd "$ETCD_URL"
expect 2 "assign without a node" -- "$troupe" cluster assign coord:0 --etcd "$ETCD_URL"
expect 0 "assign table:orders:0 to node 1" -- "$troupe" cluster assign table:orders:0 1 --etcd "$ETCD_URL"
rev=$(sed -n 's/.* at revision \([0-9]*\)$/\1/p' "$tmp/out")
[ -n "$rev" ] && ok "assign prints the map's revision ($rev)" || bad "no revision: $(cat "$tmp/out")"
expect 0 "cluster map" -- "$troupe" cluster map --etcd "$ETCD_URL"
[ "$(cat "$tmp/out")" = "$(printf 'revision %s\ntable:orders:0 1' "$rev")" ] &&
    ok "the map lists the unit at that revision" || bad "map: $(cat "$tmp/out")"
# two assigns from the same revision, as two processes at once: one wins
"$troupe" cluster assign coord:0 1 --etcd "$ETCD_URL" --revision "$rev" >"$tmp/a1" 2>&1 &
a1=$!
"$troupe" cluster assign coord:1 1 --etcd "$ETCD_URL" --revision "$rev" >"$tmp/a2" 2>&1 &
a2=$!
wait "$a1"; r1=$?
wait "$a2"; r2=$?
[ $((r1 + r2)) -eq 1 ] && ok "of two assigns from revision $rev one won ($r1, $r2)" ||
    { bad "both or neither won ($r1, $r2)"; cat "$tmp/a1" "$tmp/a2"; }
grep -q "no longer at revision $rev" "$tmp/a1" "$tmp/a2" && ok "the loser says the map moved on" ||
    { bad "loser's message"; cat "$tmp/a1" "$tmp/a2"; }
"$troupe" cluster map --etcd "$ETCD_URL" >"$tmp/map"
[ "$(grep -c '^coord:' "$tmp/map")" -eq 1 ] && ok "the map holds the winner's unit only" ||
    { bad "map after the race"; cat "$tmp/map"; }
expect 1 "assign from a stale revision" -- "$troupe" cluster assign coord:5 1 --etcd "$ETCD_URL" --revision "$rev"
expect 0 "assign to a down node with --force" -- "$troupe" cluster assign table:orders:1 2 --force --etcd "$ETCD_URL"

# ---- SIGTERM -----------------------------------------------------------------
kill -TERM "$n1"
wait "$n1"
rc=$?
[ $rc -eq 0 ] && ok "node 1 stopped cleanly on SIGTERM" || { bad "node 1 exit $rc"; cat "$tmp/n1.out"; }
expect 0 "cluster nodes after node 1's stop" -- "$troupe" cluster nodes --etcd "$ETCD_URL"
[ ! -s "$tmp/out" ] && ok "node 1 gone at once (lease revoked on stop)" || bad "still listed: $(cat "$tmp/out")"

echo "membership: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
