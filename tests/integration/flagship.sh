#!/usr/bin/env bash
# The flagship example (what `make run` runs): the counter must continue
# from the stored value on a second run, the two-node ping must finish, and
# the shop must create its tables once, refuse a duplicate email, move
# stock in transactions, find orders by index and lose an expired row, and
# publish its order events in the order transactions, handle them, a
# scheduled reminder and a rescheduled check, on both runs; and place an
# order as a saga that succeeds (stock, credit and till move by exactly
# the order, durably) and one that fails on credit (its reservation
# compensated, step 02's compensation null, nothing moved), with a gid of
# its own each run, the paid one's submitted again driving nothing.
set -u
bin=${1:?usage: flagship.sh PATH/TO/flagship}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" --data "$dir/data" --count 3 --pings 20 >"$dir/1.out" 2>&1 || {
    echo "FAIL: first run"; cat "$dir/1.out"; exit 1; }
"$bin" --data "$dir/data" --count 2 --pings 20 >"$dir/2.out" 2>&1 || {
    echo "FAIL: second run"; cat "$dir/2.out"; exit 1; }
cat "$dir/1.out" "$dir/2.out"
pass=0
check() { # check FILE FIXED-STRING WHAT
    grep -qF -- "$2" "$dir/$1" || { echo "FAIL: $3 (no \"$2\" in run ${1%.out})"; exit 1; }
    pass=$((pass + 1))
}
check 1.out "loaded visits = 0" "fresh count"
check 2.out "loaded visits = 3" "count not durable"
check 2.out "stopping at visits = 5" "final count"
check 2.out "20 round trips" "node ping"
# shop, first run: tables and customers are new
check 1.out "shop: created table customers, unique index by_email" "create customers"
check 1.out "shop: created table orders, index by_customer" "create orders"
check 1.out "shop: created table stock" "create stock"
check 1.out "shop: customers: 4 added, 0 already there" "add customers"
check 1.out "shop: stock widget 20 gadget 20" "fresh stock"
check 1.out "shop: alice has 3 orders in all" "order count, run 1"
# shop, second run: the same tables and customers (EEXIST), stock and
# orders carried over
check 2.out "shop: reused table customers" "customers reused"
check 2.out "shop: reused table orders" "orders reused"
check 2.out "shop: reused table stock" "stock reused"
check 2.out "shop: customers: 0 added, 4 already there" "customers durable"
# gadget 16: run 1's paid saga took 2 for good; widget 14: its failed
# saga's reservation was given back
check 2.out "shop: stock widget 14 gadget 16" "stock durable"
check 2.out "shop: alice has 6 orders in all" "order count, run 2"
# events: the queue is created once; completed history accumulates
check 1.out "shop: created queue shop.events, 2 partitions" "create queue"
check 2.out "shop: queue shop.events already exists (EEXIST)" "queue reused"
check 1.out "shop: queue shop.events: 0 pending, 8 completed in all" "events, run 1"
check 2.out "shop: queue shop.events: 0 pending, 16 completed in all" "events, run 2"
# shop, both runs
for r in 1.out 2.out; do
    for i in 1 2 3 4 5; do
        n=$(grep -c "shop: worker: order placed: order $i, " "$dir/$r")
        # once each: the refused duplicate of order 1 published nothing
        [ "$n" -eq 1 ] || { echo "FAIL: order $i handled $n times in run ${r%.out}"; exit 1; }
        pass=$((pass + 1))
    done
    check $r "shop: worker: order placed: order 5, alice buys 3 widget" "order event payload"
    check $r "shop: reminder published, due in 1000 ms" "reminder scheduled"
    check $r "shop: worker: reminder for carol, scheduled 1000 ms ahead: handled when due, not before" "reminder on time"
    check $r "shop: worker: restock check: gadget still short, rescheduled 300 ms later" "reschedule"
    check $r "shop: worker: restock check again, " "rescheduled event delivered again"
    check $r "done, acknowledged" "rescheduled event acknowledged"
    check $r "shop: mallory with alice@example.com refused: ECONSTRAINT" "duplicate email"
    check $r "mallory not stored" "refused write stored nothing"
    check $r "shop: by_email carol@example.com -> carol (Carol Jones)" "unique lookup"
    check $r "shop: order 5: alice buys 3 widget" "orders placed"
    check $r "one transaction, 1 attempt" "order and stock in one transaction"
    check $r "shop: order 1 again (same id): EEXIST" "failed order refused"
    check $r "the transaction wrote nothing" "failed order wrote no stock"
    check $r "in created_at order: 3" "this run's orders by index"
    check $r "shop: customers page 1: alice bob carol (more)" "scan page 1"
    check $r "shop: customers page 2: dave (end)" "scan page 2 after cursor"
    check $r "get finds it" "row before expiry"
    check $r "get says ENOENT, the hold is gone" "row after expiry"
    n=$(grep -c "created_at run start" "$dir/$r")
    [ "$n" -eq 3 ] || { echo "FAIL: $n order rows listed in run ${r%.out}"; exit 1; }
    pass=$((pass + 1))
done
# sagas: the wallets table once, and the books line of each saga
check 1.out "shop: created table wallets" "create wallets"
check 1.out "shop: wallets: 3 added, 0 already there" "add wallets"
check 2.out "shop: reused table wallets" "wallets reused"
check 2.out "shop: wallets: 0 added, 3 already there" "wallets durable"
books() { # books FILE GID: stock, credit and till before and after, the row
    sed -nE "s/^shop: saga $2: stock [a-z]+ (-?[0-9]+) -> (-?[0-9]+), credit [a-z]+ (-?[0-9]+) -> (-?[0-9]+), till (-?[0-9]+) -> (-?[0-9]+) \(together -?[0-9]+ -> -?[0-9]+\), order row ([a-z]+)\$/\1 \2 \3 \4 \5 \6 \7/p" "$dir/$1"
}
gids=""
for r in 1.out 2.out; do
    run=${r%.out}
    ok=$(sed -nE 's/^shop: saga (shop-order-[0-9]+-6): dave buys 2 gadget for 30: 01 reserve stock, 02 charge$/\1/p' "$dir/$r")
    bad=$(sed -nE 's/^shop: saga (shop-order-[0-9]+-7): bob buys 3 widget for 120: 01 reserve stock, 02 charge$/\1/p' "$dir/$r")
    [ -n "$ok" ] && [ -n "$bad" ] && [ "$(echo "$ok" | wc -l)" -eq 1 ] && [ "$(echo "$bad" | wc -l)" -eq 1 ] || {
        echo "FAIL: run $run did not submit the two sagas once each"; exit 1; }
    gids="$gids $ok $bad"
    check $r "shop: saga $ok: succeed after 2 branch calls" "paid saga succeeds, run $run"
    check $r "shop: saga $bad: failed after 4 branch calls, reason: branch 02 action: FAILURE" "failed saga's reason, run $run"
    check $r "shop:   02 action: bob's credit 50 is short of 120: FAILURE, rolled back, nothing written" "charge refused, run $run"
    check $r "shop:   01 compensate: gave back 3 widget" "reservation compensated, run $run"
    n=$(grep -c "^shop:   02 compensate: null compensation" "$dir/$r")
    [ "$n" -eq 1 ] || { echo "FAIL: $n null compensations in run $run"; exit 1; }
    pass=$((pass + 1))
    # the paid saga moves exactly the order: 2 gadget, 30 credits to the till
    read -r s0 s1 c0 c1 t0 t1 row <<<"$(books $r "$ok")"
    [ -n "${row:-}" ] && [ "$s1" -eq $((s0 - 2)) ] && [ "$c1" -eq $((c0 - 30)) ] &&
        [ "$t1" -eq $((t0 + 30)) ] && [ $((c0 + t0)) -eq $((c1 + t1)) ] && [ "$row" = written ] || {
        echo "FAIL: paid saga's books do not add up in run $run: ${s0:-?} ${s1:-?} ${c0:-?} ${c1:-?} ${t0:-?} ${t1:-?} ${row:-?}"; exit 1; }
    pass=$((pass + 1))
    # the resubmitted gid: OK, nothing called, nothing moved since
    check $r "shop: saga $ok submitted again: OK, still succeed, 0 branch calls, stock gadget $s1 -> $s1, credit dave $c1 -> $c1" "resubmit drives nothing, run $run"
    paid_till=$t1
    # the failed saga moves nothing: its reservation came back
    read -r s0 s1 c0 c1 t0 t1 row <<<"$(books $r "$bad")"
    [ -n "${row:-}" ] && [ "$s1" -eq "$s0" ] && [ "$c1" -eq "$c0" ] && [ "$c0" -eq 50 ] &&
        [ "$t0" -eq "$paid_till" ] && [ "$t1" -eq "$t0" ] && [ "$row" = none ] || {
        echo "FAIL: failed saga moved something in run $run: ${s0:-?} ${s1:-?} ${c0:-?} ${c1:-?} ${t0:-?} ${t1:-?} ${row:-?}"; exit 1; }
    pass=$((pass + 1))
done
# the books go on from run to run: the credit and till run 1 left, and the
# stock its sections 3 and 5 left less run 2's section 3 orders
check 1.out "stock gadget 18 -> 16, credit dave 100 -> 70, till 0 -> 30 (together 100 -> 100), order row written" "paid saga, run 1"
check 2.out "stock gadget 14 -> 12, credit dave 70 -> 40, till 30 -> 60 (together 100 -> 100), order row written" "paid saga durable, run 2"
check 1.out "stock widget 14 -> 14, credit bob 50 -> 50, till 30 -> 30 (together 80 -> 80), order row none" "failed saga, run 1"
check 2.out "stock widget 8 -> 8, credit bob 50 -> 50, till 60 -> 60 (together 110 -> 110), order row none" "failed saga, run 2"
# four gids, all different
[ "$(echo $gids | tr ' ' '\n' | sort -u | wc -l)" -eq 4 ] || { echo "FAIL: gids repeat across runs:$gids"; exit 1; }
pass=$((pass + 1))
# it ends by saying what to read next, and each file it names exists
for f in $(sed -n '/^next: /,$p' "$dir/2.out" | grep -o '[a-z]*/[a-z_]*\.[a-z]*'); do
    [ -f "$(dirname "$0")/../../$f" ] || { echo "FAIL: next names $f, which is missing"; exit 1; }
done
check 2.out "next: docs/embedding.md" "what to read next"
"$bin" --count 0 >/dev/null 2>&1 && { echo "FAIL: bad flag accepted"; exit 1; }
pass=$((pass + 1))
echo "$pass passed, 0 failed"
