#!/usr/bin/env bash
# The `troupe gtx ...` commands, as an operator runs them, against a node
# started on a database gtx_seed left global transactions in (see
# gtx_seed.c: some unfinished, which the node's coordinator takes up again
# at open; saga-ok and saga-fail final). list shows them all, its filters
# and cursor work; show gives one's state, its next due time and a line
# per op of each branch (saga-fail's failed action and the compensations
# after it, a tcc's confirm not called, a message's query-back "00");
# retry runs a waiting call now (it finds no target in the node: its
# attempts grow); abort moves a submitted saga to aborting with the
# operator's reason (a bad one is refused: exit 2 here, 400 from the
# endpoint, nothing changed), force-stop fails one; the final ones refuse
# abort, retry and force-stop (409, exit 1), an unknown gid is 404 (exit
# 1), a bad one is refused (exit 2 here, 400 from the endpoint). A restart
# shows what the actions committed, and the node stops cleanly.
set -u
troupe=${1:?usage: gtx_cli.sh PATH/TO/troupe PATH/TO/gtx_seed}
seed=${2:?usage: gtx_cli.sh PATH/TO/troupe PATH/TO/gtx_seed}
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
"$seed" "$db" || { echo "FAIL: gtx_seed"; exit 1; }

start_node() {
    "$troupe" node --data "$db" --listen tcp://127.0.0.1:0 --admin 127.0.0.1:0 \
        >"$tmp/node.out" 2>&1 &
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
    [ "$rc" -eq 0 ] && ok "node stopped cleanly" || { bad "node exit $rc"; cat "$tmp/node.out"; }
    has node.out 'stopped cleanly$' "the node says it stopped cleanly"
}
# gids: the gids of a list's answer, in order, on one line.
gids() { sed -n 's/^items\.[0-9]*\.gid //p' "$tmp/out" | tr '\n' ' ' | sed 's/ $//'; }
# field GID NAME: one field of `gtx show GID`.
field() {
    "$troupe" gtx show "$1" --admin "$url" 2>/dev/null | sed -n "s/^$2 //p"
}

start_node
all="msg-1 msg-2 saga-a saga-b saga-c saga-fail saga-ok tcc-1 tcc-2"

expect 0 "gtx list" -- "$troupe" gtx list --admin "$url"
[ "$(gids)" = "$all" ] && ok "every seeded transaction, in gid order" ||
    { bad "list gids: '$(gids)', want '$all'"; cat "$tmp/out"; }
has out '^more false$' "one page holds them all"
has out '^items\.5\.status failed$' "saga-fail is listed failed"
has out '^items\.6\.status succeed$' "saga-ok is listed succeed"
has out '^items\.2\.status submitted$' "saga-a is listed submitted (reloaded)"

# filters
expect 0 "list --status succeed" -- "$troupe" gtx list --admin "$url" --status succeed
[ "$(gids)" = "saga-ok" ] && ok "status filter" || { bad "succeed: '$(gids)'"; cat "$tmp/out"; }
expect 0 "list --mode tcc" -- "$troupe" gtx list --admin "$url" --mode tcc
[ "$(gids)" = "tcc-1 tcc-2" ] && ok "mode filter" || { bad "tcc: '$(gids)'"; cat "$tmp/out"; }
expect 0 "list --status prepared --mode msg" -- \
    "$troupe" gtx list --admin "$url" --status prepared --mode msg
[ "$(gids)" = "msg-1" ] && ok "both filters" || { bad "prepared msg: '$(gids)'"; cat "$tmp/out"; }
expect 0 "list --status aborting" -- "$troupe" gtx list --admin "$url" --status aborting
[ -z "$(gids)" ] && ok "nothing aborting yet" || bad "aborting: '$(gids)'"

# the cursor pages through them all, once each
seen=()
cur=()
for page in 1 2 3 4 5; do
    expect 0 "list page $page" -- "$troupe" gtx list --admin "$url" --limit 2 "${cur[@]}"
    seen+=($(gids))
    more=$(sed -n 's/^more //p' "$tmp/out")
    c=$(sed -n 's/^cursor //p' "$tmp/out")
    [ "$more" = true ] || break
    cur=(--cursor "$c")
done
[ "$more" = false ] && ok "the last page says no more" || bad "more=$more after 5 pages"
[ "${seen[*]}" = "$all" ] && ok "pages of 2 cover every transaction once" ||
    bad "paged: '${seen[*]}', want '$all'"
# the xids prepared on the node's tables: the seed's dangling one, held
# again at the node's open, with its age
expect 0 "gtx prepared" -- "$troupe" gtx prepared --admin "$url"
has out '^items\.0\.xid dangling/01$' "the dangling xid is listed"
has out '^items\.0\.age_ms [0-9]+$' "with its age"
has out '^items\.0\.prepared 20[0-9-]+T[0-9:.]+Z$' "and when it was prepared"
has out '^more false$' "one page"
expect 2 "gtx prepared --cursor bad" -- "$troupe" gtx prepared --admin "$url" --cursor 'a b'
expect 0 "list --json" -- "$troupe" gtx list --admin "$url" --limit 1 --json
[ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q '"cursor":"msg-1","more":true}$' "$tmp/out" &&
    ok "--json: one line with the cursor" || { bad "--json"; cat "$tmp/out"; }

# show
expect 0 "show saga-fail" -- "$troupe" gtx show saga-fail --admin "$url"
has out '^mode saga$' "its mode"
has out '^status failed$' "its status"
has out '^reason branch 02 action: FAILURE$' "its reason names the branch"
has out '^steps 2$' "its steps"
has out '^finished 20[0-9-]+T[0-9:.]+Z$' "its finish time"
has out '^next_due null$' "nothing due once it ended"
has out '^branch\.01\.action state=succeeded attempts=1 last=SUCCESS payload_len=2 target=svc$' \
    "branch 01's action succeeded"
has out '^branch\.02\.action state=failed attempts=1 last=FAILURE payload_len=2 target=svc$' \
    "branch 02's action failed"
has out '^branch\.02\.compensate state=succeeded attempts=1 last=SUCCESS ' "branch 02 compensated"
has out '^branch\.01\.compensate state=succeeded attempts=1 last=SUCCESS ' "branch 01 compensated"
[ "$(grep -c '^branch\.' "$tmp/out")" -eq 4 ] && ok "one line per op, four ops" ||
    { bad "op lines"; cat "$tmp/out"; }
[ "$(sed -n 's/^\(branch\.[0-9]*\.[a-z]*\) .*/\1/p' "$tmp/out" | tr '\n' ' ')" = \
    "branch.01.action branch.01.compensate branch.02.action branch.02.compensate " ] &&
    ok "branches in order, each op in its mode's order" || { bad "op order"; cat "$tmp/out"; }
expect 0 "show saga-fail --json" -- "$troupe" gtx show saga-fail --admin "$url" --json
[ "$(wc -l <"$tmp/out")" -eq 1 ] &&
    grep -q '"next_due_ms":null' "$tmp/out" &&
    grep -q '"branches":\[{"id":"01","ops":\[{"op":"action","target":"svc","payload_len":2,"state":"succeeded","attempts":1,"last":"SUCCESS"}' "$tmp/out" &&
    grep -q '{"id":"02","ops":\[{"op":"action","target":"svc","payload_len":2,"state":"failed","attempts":1,"last":"FAILURE"}' "$tmp/out" &&
    ok "--json: the branches and their ops" || { bad "show --json"; cat "$tmp/out"; }
expect 0 "show tcc-1" -- "$troupe" gtx show tcc-1 --admin "$url"
has out '^status prepared$' "a prepared tcc"
has out '^steps 1$' "with its one registered branch"
has out '^finished null$' "not finished"
has out '^next_due null$' "a prepared tcc waits for its submit, not a time"
has out '^branch\.01\.confirm state=todo attempts=0 last=none payload_len=2 target=svc$' \
    "its confirm not called"
has out '^branch\.01\.cancel state=todo attempts=0 last=none ' "nor its cancel"
grep -q '^branch\.01\.try' "$tmp/out" && bad "a try is listed" || ok "no try (the application's)"
expect 0 "show tcc-2" -- "$troupe" gtx show tcc-2 --admin "$url"
has out '^branch\.01\.confirm state=todo attempts=1 last=ONGOING ' "a submitted tcc's confirm answered ONGOING"
has out '^next_due 20[0-9-]+T[0-9:.]+Z$' "due again after its backoff"
expect 0 "show msg-1" -- "$troupe" gtx show msg-1 --admin "$url"
has out '^branch\.00\.msg state=todo attempts=0 last=none payload_len=0 target=svc$' \
    "a prepared message's query-back, branch 00, not called"
has out '^branch\.01\.action state=todo attempts=0 last=none payload_len=2 ' "nor its step"
has out '^next_due 20[0-9-]+T[0-9:.]+Z$' "due at the end of its grace"
expect 0 "show msg-2" -- "$troupe" gtx show msg-2 --admin "$url"
has out '^branch\.00\.msg state=todo attempts=0 ' "a message submitted in time is never queried back"
has out '^branch\.01\.action state=todo attempts=1 last=ONGOING ' "its step answered ONGOING"

# retry: saga-a's call waits out its 10 min backoff; retried, it runs now,
# finds no target "svc" in this node and counts one more attempt
before=$(field saga-a attempts)
expect 0 "retry saga-a" -- "$troupe" gtx retry saga-a --admin "$url"
has out '^status submitted$' "retry answers the state"
after=$before
for _ in $(seq 1 100); do
    after=$(field saga-a attempts)
    [ "$after" -gt "$before" ] 2>/dev/null && break
    sleep 0.1
done
[ "$after" -gt "$before" ] 2>/dev/null && ok "the retried call ran (attempts $before -> $after)" ||
    bad "attempts stayed $before after retry"
has node.out 'gtx saga-a: no target svc' "the node logs the missing target"

# abort and force-stop; a bad reason first, which changes nothing
expect 2 "abort with a reason of two lines" -- \
    "$troupe" gtx abort saga-b --admin "$url" --reason "$(printf 'two\nlines')"
has err 'reason wants 1\.\.256 bytes' "the reason's rule explained"
expect 2 "abort with a reason too long" -- \
    "$troupe" gtx abort saga-b --admin "$url" --reason "$(printf 'r%.0s' $(seq 1 257))"
expect 2 "abort with an empty reason" -- "$troupe" gtx abort saga-b --admin "$url" --reason ''
expect 2 "--reason on retry" -- "$troupe" gtx retry saga-b --admin "$url" --reason x
[ "$(field saga-b status)" = submitted ] && ok "saga-b untouched by the refused aborts" ||
    bad "saga-b is $(field saga-b status)"
why=$'bank down: INC-7, caf\xc3\xa9'
expect 0 "abort saga-b with a reason" -- "$troupe" gtx abort saga-b --admin "$url" --reason "$why"
has out '^status aborting$' "abort answers aborting"
has out "^reason aborted: $why\$" "abort answers its reason"
has out '^branch\.01\.action state=todo attempts=1 last=ONGOING ' "abort answers the branches"
[ "$(field saga-b status)" = aborting ] && ok "show: saga-b aborting" || bad "saga-b is $(field saga-b status)"
[ "$(field saga-b reason)" = "aborted: $why" ] && ok "show: the operator's reason" ||
    bad "saga-b reason $(field saga-b reason)"
expect 0 "abort it again, another reason" -- "$troupe" gtx abort saga-b --admin "$url" --reason later
has out '^status aborting$' "aborting already is no conflict"
has out '^reason aborted: bank down: INC-7' "and keeps its first reason"
expect 0 "force-stop saga-c" -- "$troupe" gtx force-stop saga-c --admin "$url"
has out '^status failed$' "force-stop answers failed"
[ "$(field saga-c reason)" = force-stopped ] && ok "show: force-stopped" || bad "saga-c reason $(field saga-c reason)"
[ "$(field saga-c finished)" != null ] && ok "show: finished" || bad "saga-c not finished"
expect 0 "abort a prepared message" -- "$troupe" gtx abort msg-1 --admin "$url"
has out '^status failed$' "a prepared message fails at once"
has out '^reason aborted$' "no --reason: the reason is aborted"
has out '^branch\.00\.msg state=todo attempts=0 ' "its query-back never called"

# conflicts: the final ones, a submitted message
expect 1 "abort saga-ok (succeed)" -- "$troupe" gtx abort saga-ok --admin "$url"
has err ' 409 ' "a conflict (409)"
has err 'has ended' "saying it has ended"
expect 1 "retry saga-fail (failed)" -- "$troupe" gtx retry saga-fail --admin "$url"
has err ' 409 ' "retry of a final one: 409"
expect 1 "force-stop saga-ok" -- "$troupe" gtx force-stop saga-ok --admin "$url"
has err ' 409 ' "force-stop of a final one: 409"
expect 1 "abort saga-c (force-stopped)" -- "$troupe" gtx abort saga-c --admin "$url"
has err ' 409 ' "a force-stopped one is final"
expect 1 "abort msg-2 (submitted message)" -- "$troupe" gtx abort msg-2 --admin "$url"
has err ' 409 ' "a submitted message only goes forward"
[ "$(field saga-ok status)" = succeed ] && ok "saga-ok unchanged" || bad "saga-ok is $(field saga-ok status)"

# not found, bad input
expect 1 "show an unknown gid" -- "$troupe" gtx show nope --admin "$url"
has err ' 404 ' "unknown gid: 404"
expect 1 "abort an unknown gid" -- "$troupe" gtx abort nope --admin "$url"
has err ' 404 ' "abort of an unknown gid: 404"
expect 2 "a gid breaking the rule" -- "$troupe" gtx show 'no/such gid' --admin "$url"
has err 'is not a gid' "the rule explained"
expect 2 "a gid too long" -- "$troupe" gtx retry "$(printf 'g%.0s' $(seq 1 129))" --admin "$url"
expect 2 "show without a gid" -- "$troupe" gtx show --admin "$url"
has err 'give its GID' "missing gid explained"
expect 2 "show with two gids" -- "$troupe" gtx show saga-a saga-b --admin "$url"
expect 2 "list with a gid" -- "$troupe" gtx list saga-a --admin "$url"
expect 2 "unknown status" -- "$troupe" gtx list --admin "$url" --status done
has err "status wants prepared" "unknown status explained"
expect 2 "unknown mode" -- "$troupe" gtx list --admin "$url" --mode xyz
has err "mode wants saga" "unknown mode explained"
expect 2 "limit 0" -- "$troupe" gtx list --admin "$url" --limit 0
expect 2 "limit past 1000" -- "$troupe" gtx list --admin "$url" --limit 1001
expect 2 "a cursor that is no gid" -- "$troupe" gtx list --admin "$url" --cursor 'a b'
expect 2 "--status on show" -- "$troupe" gtx show saga-a --admin "$url" --status failed
expect 2 "without --admin" -- "$troupe" gtx show saga-a
has err "--admin URL is required" "--admin required"
expect 2 "unknown subcommand" -- "$troupe" gtx frobnicate --admin "$url"
expect 2 "no subcommand" -- "$troupe" gtx
expect 0 "help gtx force-stop" -- "$troupe" help gtx force-stop
has out '^usage: troupe gtx force-stop GID' "the subcommand's help"

# the endpoint itself refuses what the command would not send
if command -v curl >/dev/null 2>&1; then
    code() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }
    [ "$(code -X POST "$url/v1/gtx/a%20b/abort")" = 400 ] && grep -q '"bad_gid"' "$tmp/body" &&
        ok "endpoint: a bad gid is 400" || { bad "endpoint bad gid"; cat "$tmp/body"; }
    [ "$(code "$url/v1/gtx?status=done")" = 400 ] && ok "endpoint: a bad status is 400" || bad "endpoint bad status"
    [ "$(code "$url/v1/gtx?mode=xyz")" = 400 ] && ok "endpoint: a bad mode is 400" || bad "endpoint bad mode"
    [ "$(code "$url/v1/gtx?after=a%20b")" = 400 ] && grep -q '"bad_cursor"' "$tmp/body" &&
        ok "endpoint: a bad cursor is 400" || { bad "endpoint bad cursor"; cat "$tmp/body"; }
    [ "$(code "$url/v1/gtx?limit=1001")" = 400 ] && ok "endpoint: a limit past 1000 is 400" || bad "endpoint limit"
    [ "$(code -X POST "$url/v1/gtx/saga-ok/retry")" = 409 ] && grep -q '"ECONFLICT"' "$tmp/body" &&
        ok "endpoint: 409 with troupe_error ECONFLICT" || { bad "endpoint 409"; cat "$tmp/body"; }
    [ "$(code "$url/v1/gtx/nope")" = 404 ] && grep -q '"ENOENT"' "$tmp/body" &&
        ok "endpoint: 404 with troupe_error ENOENT" || { bad "endpoint 404"; cat "$tmp/body"; }
    [ "$(code "$url/v1/gtx/saga-a/abort")" = 405 ] && ok "endpoint: GET on an action is 405" || bad "endpoint 405"
    # an abort's body is checked before the coordinator is asked: saga-ok
    # has ended (409 if it got that far), saga-a would abort
    post() { code -X POST -H 'Content-Type: application/json' --data-binary "$2" "$url/v1/gtx/$1/abort"; }
    [ "$(post saga-ok '{"reason":"a\u0001b"}')" = 400 ] && grep -q '"bad_reason"' "$tmp/body" &&
        ok "endpoint: a reason with a control character is 400" || { bad "endpoint control"; cat "$tmp/body"; }
    [ "$(post saga-ok '{"reason":"a\u0000b"}')" = 400 ] &&
        ok "endpoint: a reason with NUL is 400 (jansson refuses it)" || { bad "endpoint NUL"; cat "$tmp/body"; }
    [ "$(post saga-ok "{\"reason\":\"$(printf 'r%.0s' $(seq 1 257))\"}")" = 400 ] &&
        ok "endpoint: a reason past 256 bytes is 400" || { bad "endpoint long"; cat "$tmp/body"; }
    [ "$(post saga-ok '{"reason":7}')" = 400 ] && grep -q '"bad_reason"' "$tmp/body" &&
        ok "endpoint: a reason that is no string is 400" || { bad "endpoint number"; cat "$tmp/body"; }
    [ "$(post saga-a '{"reson":"x"}')" = 400 ] && grep -q '"bad_field"' "$tmp/body" &&
        ok "endpoint: another field is 400" || { bad "endpoint field"; cat "$tmp/body"; }
    [ "$(post saga-a 'nope')" = 400 ] && grep -q '"bad_json"' "$tmp/body" &&
        ok "endpoint: a body that is no JSON is 400" || { bad "endpoint json"; cat "$tmp/body"; }
    [ "$(field saga-a status)" = submitted ] && ok "endpoint: saga-a untouched" || bad "saga-a is $(field saga-a status)"
    [ "$(post saga-ok '{"reason":"ok"}')" = 409 ] && ok "endpoint: a good reason reaches the coordinator (409)" ||
        { bad "endpoint good reason"; cat "$tmp/body"; }
else
    echo "note: no curl, the endpoint's own 400s are not checked here (check_admin does not run a coordinator)"
fi

stop_node

# what the actions committed outlasts a restart
start_node
expect 0 "list after a restart" -- "$troupe" gtx list --admin "$url" --status aborting
[ "$(gids)" = "saga-b" ] && ok "saga-b still aborting" || { bad "aborting: '$(gids)'"; cat "$tmp/out"; }
expect 0 "list failed after a restart" -- "$troupe" gtx list --admin "$url" --status failed
[ "$(gids)" = "msg-1 saga-c saga-fail" ] && ok "the failed ones" || { bad "failed: '$(gids)'"; cat "$tmp/out"; }
stop_node

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
