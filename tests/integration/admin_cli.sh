#!/usr/bin/env bash
# The troupe command through a running node's admin endpoint: a node on a
# database queue_seed filled (see queue_seed.c) serves --admin; `troupe
# stats` and `troupe queue ...` ask it while it holds the database, the
# acting subcommands change what it shows, --json prints one JSON line,
# and a token-protected node refuses a command without the token; `troupe
# stats --data --tables` reads the tables read-only beside the node.
set -u
troupe=${1:?usage: admin_cli.sh PATH/TO/troupe PATH/TO/queue_seed}
seed=${2:?usage: admin_cli.sh PATH/TO/troupe PATH/TO/queue_seed}
tmp=$(mktemp -d)
node_pid=
cleanup() {
    [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null && wait "$node_pid"
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/checks.sh"
has() {
    grep -qE -- "$2" "$tmp/$1" && ok "$3" || { bad "$3 (no /$2/ in $1)"; cat "$tmp/$1"; }
}

db="$tmp/db"
"$seed" "$db" 3000 || { echo "FAIL: queue_seed"; exit 1; }

# start_node [FLAGS...]: a node on $db with --admin 127.0.0.1:0; sets
# $node_pid and $url.
start_node() {
    "$troupe" node --data "$db" --listen tcp://127.0.0.1:0 --admin 127.0.0.1:0 \
        "$@" >"$tmp/node.out" 2>&1 &
    node_pid=$!
    if ! wait_for "$tmp/node.out" "admin endpoint on http://"; then
        bad "node did not start"; cat "$tmp/node.out"; exit 1
    fi
    url=$(sed -n 's/.*admin endpoint on \(http:[^ ]*\)\/$/\1/p' "$tmp/node.out")
    ok "node serves its admin endpoint at $url"
}
stop_node() {
    kill -TERM "$node_pid"
    wait "$node_pid"
    local rc=$?
    node_pid=
    [ "$rc" -eq 0 ] && ok "node stopped cleanly" || bad "node exit $rc"
}

start_node

expect 0 "stats --admin while the node holds the database" -- \
    "$troupe" stats --admin "$url"
has out '^family meta keys [0-9]+ live_bytes [0-9]+ file_bytes' "the node's families, as stats prints them"
expect 0 "stats --admin --tables" -- "$troupe" stats --admin "$url" --tables
has out '^txn\.running 0$' "the node's table counters as path value lines"

# The tables read from the database itself while the node holds it
# (read-only tables): the node's table is there, no family changes.
families() { sed -n 's/^family \([^ ]*\) .*/\1/p' "$tmp/out"; }
expect 0 "stats --data beside the node" -- "$troupe" stats --data "$db"
families >"$tmp/fam-before"
expect 0 "stats --data --tables while the node holds the database" -- \
    "$troupe" stats --data "$db" --tables
has out '^tables 2$' "the node's table and its coordinator's, read-only"
has out '^table troupe\.gtx ' "the coordinator's table troupe.gtx"
has out '^table users version_records 0 ' "its counters, this process's own"
expect 0 "stats --data after --tables" -- "$troupe" stats --data "$db"
families >"$tmp/fam-after"
cmp -s "$tmp/fam-before" "$tmp/fam-after" && grep -qx meta "$tmp/fam-after" &&
    ok "stats --tables beside the node leaves the families as they were" ||
    { bad "families changed"; diff "$tmp/fam-before" "$tmp/fam-after"; }
expect 0 "queue list --admin" -- "$troupe" queue list --admin "$url"
has out '^queues\.1\.name orders$' "the queues by name"
has out '^queues\.1\.paused false$' "not paused"
expect 0 "queue stats --admin" -- "$troupe" queue stats --admin "$url" --queue orders
has out '^pending 5$' "five pending"
has out '^completed 3$' "three completed"
has out '^oldest_due 1970-01-01T00:00:01.000Z$' "the oldest due time in ISO 8601"
has out '^handler_calls\.delivered 0$' "no handler ran in this node"
has out '^handler_calls\.attempts\.1 0$' "the attempts histogram by bucket"

expect 0 "queue pause --admin" -- "$troupe" queue pause --admin "$url" --queue orders
expect 0 "queue list --admin --json" -- "$troupe" queue list --admin "$url" --json
[ "$(wc -l <"$tmp/out")" -eq 1 ] && ok "--json is one line" || bad "--json lines"
grep -q '"name":"orders","id":1,"partitions":4,"retention_ms":3600000,"max_attempts":0,"paused":true' "$tmp/out" &&
    ok "--json shows the pause" || { bad "pause not shown"; cat "$tmp/out"; }
expect 0 "queue resume --admin" -- "$troupe" queue resume --admin "$url" --queue orders
expect 0 "queue list after resume" -- "$troupe" queue list --admin "$url"
has out '^queues\.1\.paused false$' "resumed"

# ack o4 by its storage key, found through show
expect 0 "queue show --admin" -- "$troupe" queue show --admin "$url" --queue orders --id o4
has out '^items\.0\.payload\.qty 2$' "the payload as JSON"
skey=$(sed -n 's/^items\.0\.skey //p' "$tmp/out")
[ -n "$skey" ] && ok "the invocation's skey" || bad "no skey"
expect 0 "queue ack --admin" -- "$troupe" queue ack --admin "$url" --queue orders --skey "$skey"
expect 0 "stats after the ack" -- "$troupe" queue stats --admin "$url" --queue orders
has out '^pending 4$' "one fewer pending"
has out '^completed 4$' "one more completed"
expect 0 "queue retry --admin" -- bash -c \
    "'$troupe' queue show --admin '$url' --queue orders --id o5 | sed -n 's/^items\.0\.skey //p' |
     xargs -I{} '$troupe' queue retry --admin '$url' --queue orders --skey {}"
expect 0 "stats after the retry" -- "$troupe" queue stats --admin "$url" --queue orders
has out '^pending 4$' "the retried one still pending (its replacement)"
has out '^completed 5$' "its first invocation completed"
expect 0 "queue delete-owner --admin" -- "$troupe" queue delete-owner --admin "$url" \
    --queue orders --owner-kind customer --owner-id alice
has out '^deleted 2$' "alice's two invocations"
expect 0 "queue pending --admin" -- "$troupe" queue pending --admin "$url" --queue orders --limit 2
has out '^more true$' "a page of two, more to come"

# the node's kv actor, and its (absent) tables
expect 0 "kv put --admin" -- "$troupe" kv put --admin "$url" --key greeting --value hello
expect 0 "kv get --admin" -- "$troupe" kv get --admin "$url" --key greeting
has out '^value hello$' "the value put"
expect 0 "kv put with hex" -- "$troupe" kv put --admin "$url" --key-hex 00ff --value-hex 0102
expect 0 "kv get --json" -- "$troupe" kv get --admin "$url" --key-hex 00ff --json
has out '"value":\{"hex":"0102"\}' "bytes that are not text as hex"
expect 1 "kv get of an absent key" -- "$troupe" kv get --admin "$url" --key nope
has err "404 no value at that key" "the 404 is said"
expect 1 "table get of an unknown table" -- "$troupe" table get --admin "$url" --table nope --key a
has err "404" "404"
expect 1 "index state of an unknown table" -- "$troupe" index state --admin "$url" \
    --table nope --index x
# an index rebuild with its progress: lines until ready, rows growing to
# the table's 3000 (not a terminal: one line per change)
expect 0 "index rebuild --wait" -- "$troupe" index rebuild --admin "$url" \
    --table users --index by_n --wait
has out '^ready rows 3000 total 3000 elapsed_ms [0-9]+$' "ends ready with done == total"
awk '{ r = ($1 == "ready") ? $3 : $2; if (r + 0 < last + 0) exit 1; last = r }' "$tmp/out" &&
    ok "rows never go back" || { bad "rows went back"; cat "$tmp/out"; }
expect 0 "index state after the rebuild" -- "$troupe" index state --admin "$url" \
    --table users --index by_n
has out '^state ready$' "ready"
has out '^progress\.rows 3000$' "the last build's rows"
expect 1 "rebuild --wait of an unknown index" -- "$troupe" index rebuild --admin "$url" \
    --table users --index nope --wait
has err "404" "404"
expect 2 "table scan without --admin" -- "$troupe" table scan --table t
has err "--admin URL is required" "says what is missing"
expect 2 "kv get with --key and --key-hex" -- "$troupe" kv get --admin "$url" --key a --key-hex 61

# failures: unknown names exit 1 with the endpoint's message
expect 1 "unknown queue" -- "$troupe" queue stats --admin "$url" --queue nope
has err 'no queue "nope"' "the queue is named"
expect 1 "ack of a key that is not a pending one" -- \
    "$troupe" queue ack --admin "$url" --queue orders --skey 00
has err '400' "the status is shown"
# usage errors exit 2
expect 2 "--data and --admin together" -- "$troupe" queue list --data "$db" --admin "$url"
expect 2 "a non-http scheme" -- "$troupe" stats --admin tcp://127.0.0.1:1
has err "wants http://HOST:PORT" "the scheme is refused by name"
expect 2 "pause without --admin" -- "$troupe" queue pause --data "$db" --queue orders
has err "the node holding the database delivers" "why pause needs the node"
expect 2 "retry without --skey" -- "$troupe" queue retry --admin "$url" --queue orders
expect 2 "--json without --admin" -- "$troupe" stats --data "$db" --json
stop_node
expect 1 "a node that is gone" -- "$troupe" stats --admin "$url"
has err "cannot reach the admin endpoint" "unreachable, said so"

# a token: required when given, and for a host that is not loopback
printf 'a-token-of-enough-bytes\n' >"$tmp/token"
printf 'a-different-token-here\n' >"$tmp/other"
expect 1 "not loopback and no token" -- "$troupe" node --data "$tmp/db2" \
    --listen tcp://127.0.0.1:0 --admin 0.0.0.0:0
has err "give --admin-token" "the refusal says what to add"
start_node --admin-token "$tmp/token"
expect 1 "no token" -- "$troupe" queue list --admin "$url"
has err "401" "401 without the token"
expect 1 "wrong token" -- "$troupe" queue list --admin "$url" --admin-token "$tmp/other"
has err "403" "403 with another one"
expect 0 "right token" -- "$troupe" queue list --admin "$url" --admin-token "$tmp/token"
stop_node

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
