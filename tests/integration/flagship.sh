#!/usr/bin/env bash
# The flagship example (what `make run` runs): the counter must continue
# from the stored value on a second run, the two-node ping must finish, and
# the shop must create its tables once, refuse a duplicate email, move
# stock in transactions, find orders by index and lose an expired row, and
# publish its order events in the order transactions, handle them, a
# scheduled reminder and a rescheduled check, on both runs.
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
check 2.out "shop: stock widget 14 gadget 18" "stock durable"
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
# it ends by saying what to read next, and each file it names exists
for f in $(sed -n '/^next: /,$p' "$dir/2.out" | grep -o '[a-z]*/[a-z_]*\.[a-z]*'); do
    [ -f "$(dirname "$0")/../../$f" ] || { echo "FAIL: next names $f, which is missing"; exit 1; }
done
check 2.out "next: docs/embedding.md" "what to read next"
"$bin" --count 0 >/dev/null 2>&1 && { echo "FAIL: bad flag accepted"; exit 1; }
pass=$((pass + 1))
echo "$pass passed, 0 failed"
