#!/usr/bin/env bash
# The flagship example (what `make run` runs): the counter must continue
# from the stored value on a second run, and the two-node ping must finish.
set -u
bin=${1:?usage: flagship.sh PATH/TO/flagship}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" --data "$dir/data" --count 3 --pings 20 >"$dir/1.out" 2>&1 || {
    echo "FAIL: first run"; cat "$dir/1.out"; exit 1; }
"$bin" --data "$dir/data" --count 2 --pings 20 >"$dir/2.out" 2>&1 || {
    echo "FAIL: second run"; cat "$dir/2.out"; exit 1; }
cat "$dir/1.out" "$dir/2.out"
grep -q "loaded visits = 0" "$dir/1.out" || { echo "FAIL: fresh count"; exit 1; }
grep -q "loaded visits = 3" "$dir/2.out" || { echo "FAIL: count not durable"; exit 1; }
grep -q "stopping at visits = 5" "$dir/2.out" || { echo "FAIL: final count"; exit 1; }
grep -q "20 round trips" "$dir/2.out" || { echo "FAIL: node ping"; exit 1; }
"$bin" --count 0 >/dev/null 2>&1 && { echo "FAIL: bad flag accepted"; exit 1; }
echo "4 passed, 0 failed"
