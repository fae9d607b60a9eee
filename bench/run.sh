#!/usr/bin/env bash
# Runs every benchmark in BUILD_DIR/bench (bench_*), each after a sync(1)
# so that none inherits the previous one's disk writeback, then reprints
# all their `bench ...` lines as one summary block. The peer binaries
# (CAF, nng, the BullMQ wrapper) are in BUILD_DIR/bench/peers; benches
# find them through $TROUPE_PEERS_DIR (bench/peers/peer_run.h). If no
# bench_* exists yet, runs the peers alone.
#
#   bench/run.sh BUILD_DIR
#   BENCH_REPS=3 bench/run.sh build-bench        # fewer reps (default 5)
#   BENCH_FILTER=nng bench/run.sh build-bench    # only benches matching
#   BENCH_TIMEOUT=900 bench/run.sh build-bench   # seconds per bench (600)
#
# Exits non-zero if any bench (or, with no benches, any peer) failed.
set -uo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BUILD_DIR   (a build configured with -DTROUPE_BENCH=ON)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
benchdir=$build/bench
peers=$benchdir/peers
if [ ! -d "$benchdir" ]; then
    echo "run.sh: $benchdir does not exist; configure with -DTROUPE_BENCH=ON" >&2
    exit 2
fi
export TROUPE_PEERS_DIR=$peers
export BENCH_REPS=${BENCH_REPS:-5}
timeout_s=${BENCH_TIMEOUT:-600}
filter=${BENCH_FILTER:-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/troupe-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
echo "== troupe benchmarks"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine: $(uname -n), $(uname -sm), nproc $(nproc), ${cpu:-unknown cpu}"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
if rev=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null); then
    dirty=$(git -C "$(dirname "$0")" status --porcelain 2>/dev/null | head -1)
    echo "commit:  $rev${dirty:+ (uncommitted changes)}"
fi
echo "build:   $build"
echo "reps:    $BENCH_REPS per figure (medians); peers in $TROUPE_PEERS_DIR"
echo "note:    compare only figures taken side by side in one run"

failed=()
ran=0

# run_one LABEL CMD...: runs with a time limit; stdout is shown and kept in
# $tmp/out.<n> for the summary, stderr goes straight through.
run_one() {
    local label=$1; shift
    local out=$tmp/out.$ran rc start end
    ran=$((ran + 1))
    echo
    echo "== $label"
    # Write back what earlier benchmarks left dirty in the page cache, so
    # this one's fsyncs do not queue behind their writeback.
    sync
    start=$(date +%s)
    timeout --kill-after=10 "$timeout_s" "$@" | tee "$out"
    rc=${PIPESTATUS[0]}
    end=$(date +%s)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "== $label: TIMED OUT after ${timeout_s}s" >&2
        failed+=("$label (timed out)")
    elif [ "$rc" -ne 0 ]; then
        echo "== $label: FAILED (exit $rc)" >&2
        failed+=("$label (exit $rc)")
    else
        echo "== $label: ok ($((end - start)) s)"
    fi
    return 0
}

benches=()
for b in "$benchdir"/bench_*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    name=$(basename "$b")
    [ -z "$filter" ] || [[ $name == *"$filter"* ]] || continue
    benches+=("$b")
done

if [ ${#benches[@]} -gt 0 ]; then
    for b in "${benches[@]}"; do
        run_one "$(basename "$b")" "$b"
    done
else
    echo
    echo "run.sh: no bench_* binaries in $benchdir${filter:+ matching '$filter'};"
    echo "run.sh: running the peers standalone to show they work."
    npeers=0
    for spec in peer_caf_pingpong peer_caf_fanout "peer_nng_oneway 64" \
                "peer_nng_oneway 4096" "peer_nng_ask 64" "peer_nng_ask 4096"; do
        read -r p arg <<<"$spec"
        [ -z "$filter" ] || [[ $spec == *"$filter"* ]] || continue
        if [ ! -x "$peers/$p" ]; then
            echo "run.sh: $peers/$p not built" >&2
            failed+=("$spec (not built)")
            continue
        fi
        npeers=$((npeers + 1))
        run_one "$spec" "$peers/$p" ${arg:+"$arg"}
        # Peers print a bare number; give it the summary's line form.
        last=$(tail -n 1 "$tmp/out.$((ran - 1))")
        if [[ $last =~ ^[0-9.eE+-]+$ ]]; then
            unit="messages/s"
            [[ $p == *pingpong* || $p == *ask* ]] && unit="round-trips/s"
            echo "bench ${p#peer_}${arg:+_$arg} $last $unit" \
                >>"$tmp/out.$((ran - 1))"
        fi
    done
fi

echo
echo "== summary ($(date -u '+%H:%M:%S UTC'), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
found=0
for ((i = 0; i < ran; i++)); do
    if grep -h '^bench ' "$tmp/out.$i" 2>/dev/null; then
        found=1
    fi
done
[ "$found" -eq 1 ] || echo "(no bench lines)"
if [ ${#failed[@]} -gt 0 ]; then
    echo
    echo "FAILED: ${#failed[@]} of $ran:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
exit 0
