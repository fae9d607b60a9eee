#!/usr/bin/env bash
# The `troupe queue ...` commands, as an operator runs them, on a database
# queue_seed filled with known events (see queue_seed.c): list, stats,
# pending and completed pages followed by their cursors, show by id (text
# and hex); bad flags exit 2 with the usage, failures (a missing database,
# an unknown queue or id, a foreign cursor) exit 1 with a message. The
# inspection opens the database read-only: its files are the same, byte
# for byte, after every command, and it works beside a running node that
# holds the database.
set -u
troupe=${1:?usage: queue_cli.sh PATH/TO/troupe PATH/TO/queue_seed}
seed=${2:?usage: queue_cli.sh PATH/TO/troupe PATH/TO/queue_seed}
tmp=$(mktemp -d)
node_pid=""
cleanup() {
    [ -n "$node_pid" ] && kill -9 "$node_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/checks.sh"
# has FILE PATTERN WHAT: grep -E PATTERN in FILE.
has() {
    grep -qE -- "$2" "$tmp/$1" && ok "$3" || { bad "$3 (no /$2/ in $1)"; cat "$tmp/$1"; }
}

db="$tmp/db"
"$seed" "$db" || { echo "FAIL: queue_seed"; exit 1; }
# Every file of the database: name, size, modification time, and a
# checksum of them all (the MANIFEST names the families, the WAL and the
# table files hold the rows).
listing() { (cd "$1" && find . -type f -printf '%p %s %T@\n' | sort && cat ./* | cksum); }
listing "$db" >"$tmp/before"

expect 0 "queue list" -- "$troupe" queue list --data "$db"
has out '^queues 2$' "two queues"
[ "$(sed -n 2p "$tmp/out")" = "queue audit id 2 partitions 1 retention_ms 0 max_attempts 0 paused no" ] &&
    [ "$(sed -n 3p "$tmp/out")" = "queue orders id 1 partitions 4 retention_ms 3600000 max_attempts 0 paused no" ] &&
    ok "queues by name, with id, partitions, retention" || { bad "list lines"; cat "$tmp/out"; }

expect 0 "queue stats" -- "$troupe" queue stats --data "$db" --queue orders
has out '^queue orders partitions 4 pending 5 completed 3 malformed 0 parked 0$' "counts per state"
has out '^oldest_due_ms 1000 lag_ms [0-9]+$' "oldest due time and lag"
[ "$(grep -c '^partition [0-3] pending [0-9]+ completed [0-9]+ parked [0-9]+$' -E "$tmp/out")" -eq 4 ] &&
    ok "one line per partition" || bad "partition lines"
sum=$(awk '/^partition/ {p += $4; c += $6} END {print p, c}' "$tmp/out")
[ "$sum" = "5 3" ] && ok "partitions add up" || bad "partitions add up to $sum"
expect 0 "stats of an empty queue" -- "$troupe" queue stats --data "$db" --queue audit
has out '^oldest_due_ms - lag_ms -$' "no lag when nothing is pending"

# pending, two at a time, following the cursors
ids=""
after=()
for page in 1 2 3; do
    expect 0 "pending page $page" -- "$troupe" queue pending --data "$db" --queue orders --limit 2 "${after[@]}"
    ids="$ids $(grep -oE '^pending .* id ("[^"]*"|0x[0-9a-f]+)' "$tmp/out" | awk '{print $NF}' | tr '\n' ' ')"
    cur=$(grep -oE '^page [0-9]+ more (yes|no) cursor [0-9a-f-]+' "$tmp/out" | awk '{print $6}')
    more=$(grep -oE '^page [0-9]+ more (yes|no)' "$tmp/out" | awk '{print $4}')
    after=(--after "$cur")
done
[ "$more" = "no" ] && ok "last page says no more" || bad "last page more=$more"
got=$(echo $ids | tr ' ' '\n' | sort | tr '\n' ' ')
want=$(printf '%s\n' '"o3"' '"o4"' '"o5"' '"o6"' '0x000162696e' | sort | tr '\n' ' ')
[ "$got" = "$want" ] && ok "pages cover every pending event once" || bad "pending ids: $got, want $want"

expect 0 "completed" -- "$troupe" queue completed --data "$db" --queue orders
[ "$(grep -c '^completed partition' "$tmp/out")" -eq 3 ] && ok "three completed" || bad "completed count"
has out '^completed .* processed_ms [0-9]+ id "o1" key "o1" owner "customer"/"alice" payload 6 bytes 0x81a371747902$' "completed line"
has out '^page 3 more no cursor [0-9a-f]+$' "completed page"
ccur=$(grep -oE '^page 3 more no cursor [0-9a-f]+' "$tmp/out" | awk '{print $6}')

expect 0 "show o3" -- "$troupe" queue show --data "$db" --queue orders --id o3
has out '^completed .* id "o3" .* skey [0-9a-f]+$' "o3's first invocation completed"
has out '^pending .* id "o3" .* skey [0-9a-f]+$' "o3's replacement pending"
has out '^invocations 2$' "o3 has two invocations"
expect 0 "show by hex id" -- "$troupe" queue show --data "$db" --queue orders --id-hex 000162696E
has out '^pending partition [0-3] time_ms 2000 .* id 0x000162696e ' "binary id shown as hex"

# bad input: usage errors exit 2
expect 2 "queue without subcommand" -- "$troupe" queue
expect 2 "unknown subcommand" -- "$troupe" queue frobnicate --data "$db"
expect 2 "pause is not a command" -- "$troupe" queue pause --data "$db" --queue orders
has err "the node holding the database delivers" "pause refusal explained"
expect 0 "queue parked" -- "$troupe" queue parked --data "$db" --queue orders
has out '^page 0 more no cursor -$' "no parked invocation in the seed"
expect 2 "retry-parked without --admin" -- "$troupe" queue retry-parked --data "$db" --queue orders --skey 00
expect 2 "delete-parked without --skey" -- "$troupe" queue delete-parked --admin http://127.0.0.1:1 --queue orders
expect 2 "retry-parked with a bad --skey" -- "$troupe" queue retry-parked --admin http://127.0.0.1:1 --queue orders --skey xyz
expect 2 "resume is not a command" -- "$troupe" queue resume --data "$db" --queue orders
expect 2 "list with --queue" -- "$troupe" queue list --data "$db" --queue orders
expect 2 "stats without --queue" -- "$troupe" queue stats --data "$db"
expect 2 "pending without --data" -- "$troupe" queue pending --queue orders
expect 2 "flag without value" -- "$troupe" queue pending --data "$db" --queue
expect 2 "limit 0" -- "$troupe" queue pending --data "$db" --queue orders --limit 0
expect 2 "limit too big" -- "$troupe" queue pending --data "$db" --queue orders --limit 10001
expect 2 "limit not a number" -- "$troupe" queue completed --data "$db" --queue orders --limit x
expect 2 "cursor not hex" -- "$troupe" queue pending --data "$db" --queue orders --after zz
expect 2 "cursor odd length" -- "$troupe" queue pending --data "$db" --queue orders --after abc
expect 2 "show without id" -- "$troupe" queue show --data "$db" --queue orders
expect 2 "show with both ids" -- "$troupe" queue show --data "$db" --queue orders --id o1 --id-hex 00
expect 2 "show with --limit" -- "$troupe" queue show --data "$db" --queue orders --id o1 --limit 3
grep -q "^usage:" "$tmp/err" && ok "usage printed" || bad "no usage on bad flags"
# failures exit 1
expect 1 "missing database" -- "$troupe" queue list --data "$tmp/nothing-here"
has err "no database at" "missing database explained"
[ ! -e "$tmp/nothing-here" ] && ok "nothing created" || bad "a database was created"
expect 1 "unknown queue" -- "$troupe" queue stats --data "$db" --queue nope
has err "no queue named 'nope'" "unknown queue explained"
expect 1 "unknown queue, pending" -- "$troupe" queue pending --data "$db" --queue nope
expect 1 "unknown id" -- "$troupe" queue show --data "$db" --queue orders --id o99
has err "no event with that id" "unknown id explained"
expect 1 "a completed cursor given to pending" -- "$troupe" queue pending --data "$db" --queue orders --after "$ccur"
expect 1 "a cursor outside the pending space" -- "$troupe" queue pending --data "$db" --queue orders --after 00
has err "not a pending cursor" "foreign cursor explained"

# the commands changed nothing
expect 0 "stats again" -- "$troupe" queue stats --data "$db" --queue orders
has out '^queue orders partitions 4 pending 5 completed 3 malformed 0 parked 0$' "inspection wrote no event"
listing "$db" >"$tmp/after"
cmp -s "$tmp/before" "$tmp/after" && ok "inspection wrote nothing in the database" ||
    { bad "inspection changed the database"; diff "$tmp/before" "$tmp/after"; }

# beside a running node, which holds the database (its LOCK)
"$troupe" node --data "$db" --listen tcp://127.0.0.1:0 >"$tmp/node.out" 2>&1 &
node_pid=$!
if wait_for "$tmp/node.out" "listening on tcp://"; then
    expect 0 "queue stats beside the running node" -- "$troupe" queue stats --data "$db" --queue orders
    has out '^queue orders partitions 4 pending 5 completed 3 malformed 0 parked 0$' "the node's database inspected"
    expect 0 "queue list beside the running node" -- "$troupe" queue list --data "$db"
    has out '^queues 2$' "the node's queues listed"
else
    bad "node did not start"; cat "$tmp/node.out"
fi
kill -TERM "$node_pid"
wait "$node_pid"
node_pid=""

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
