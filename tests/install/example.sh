#!/usr/bin/env bash
# Runs an example as a newcomer would, twice on one fresh data dir (the
# second run opens what the first left): each run must exit 0, write
# nothing to stderr and print a line holding each EXPECT.
#
#   example.sh BINARY EXPECT...
set -euo pipefail
bin=$1
shift
tmp=$(mktemp -d "${TMPDIR:-/tmp}/troupe-example.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for run in 1 2; do
    if ! out=$(timeout 60 "$bin" "$tmp/data" 2>"$tmp/err"); then
        cat "$tmp/err" >&2
        echo "example.sh: $(basename "$bin") run $run failed" >&2
        exit 1
    fi
    if [ -s "$tmp/err" ]; then
        cat "$tmp/err" >&2
        echo "example.sh: $(basename "$bin") run $run wrote to stderr" >&2
        exit 1
    fi
    for want in "$@"; do
        printf '%s\n' "$out" | grep -qF "$want" || {
            echo "example.sh: run $run printed no \"$want\": $out" >&2
            exit 1
        }
    done
done
echo "example.sh: $(basename "$bin"): $out"
