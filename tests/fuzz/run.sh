#!/usr/bin/env bash
# Runs every fuzz target built in $1 (default build-fuzz) for FUZZ_SECONDS
# each (default 20), in the order tests/fuzz/fuzz.cmake lists them, on a
# working corpus under $1/corpus/<target> seeded from the saved corpus
# tests/fuzz/corpus/<target>. A target that crashes, leaks, times out or
# fails a property leaves its reproducer under $1/crashes/ (the path is
# printed) and makes the run fail; the other targets still run.
# FUZZ_TARGETS (space separated) picks a subset; FUZZ_JOBS > 1 runs that
# many targets at once (default 1: the machine is shared).
# Reproduce: $1/tests/fuzz/fuzz_<target> <reproducer>.
set -uo pipefail
build=${1:-build-fuzz}
secs=${FUZZ_SECONDS:-20}
src=$(cd "$(dirname "$0")" && pwd)
bin=$build/tests/fuzz
list=$(cat "$bin/targets.txt")
targets=${FUZZ_TARGETS:-$list}
mkdir -p "$build/crashes" "$build/logs"

# Targets that run a node: the per-input leak check would scan the whole
# process (RocksDB's memory included) after most inputs, since threads
# free what an input allocated later; leaks are still checked at exit.
opts_for() {
    case $1 in
    cursor | actors) echo "-detect_leaks=0 -max_len=1024" ;;
    derive) echo "-max_len=4096" ;;
    *) echo "-max_len=4096" ;;
    esac
}

run_one() {
    local t=$1 work=$build/corpus/$t seeds=$src/corpus/$t
    mkdir -p "$work"
    local args=(-max_total_time="$secs" -timeout=25 -rss_limit_mb=3072
                -artifact_prefix="$build/crashes/$t-" -print_final_stats=1)
    read -r -a extra <<<"$(opts_for "$t")"
    local dirs=("$work")
    [ -d "$seeds" ] && dirs+=("$seeds")
    local log=$build/logs/$t.log
    "$bin/fuzz_$t" "${args[@]}" "${extra[@]}" "${dirs[@]}" >"$log" 2>&1
    local rc=$?
    local runs cov
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        echo "fuzz: $t FAILED (exit $rc, ${runs:-?} runs); log $log"
        grep -E 'property failed|ERROR:|SUMMARY:' "$log" | head -5
        grep -o "Test unit written to .*" "$log" | sed 's/^/fuzz:   reproducer: /'
        return 1
    fi
    echo "fuzz: $t ok: ${runs:-?} runs in ${secs}s, $cov"
}

failed=0
jobs=${FUZZ_JOBS:-1}
if [ "$jobs" -gt 1 ]; then
    pids=()
    for t in $targets; do
        run_one "$t" & pids+=($!)
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || failed=1; done
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
else
    for t in $targets; do run_one "$t" || failed=1; done
fi
if [ $failed -ne 0 ]; then
    echo "fuzz: FAILED (reproducers in $build/crashes/)"
    exit 1
fi
echo "fuzz: every target ran clean"
