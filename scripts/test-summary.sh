#!/usr/bin/env bash
# Prints Check's per-binary summary lines (from CTest's log) after CTest's
# own summary, so `make test` ends with both.
log="${1:-.}/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
echo
echo "Check summaries:"
grep -E '^[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$log" | sed 's/^/  /'
awk '/^[0-9]+%: Checks:/ { gsub(",", ""); c += $3; f += $5; e += $7 }
     END { printf "%d passed, %d failed\n", c - f - e, f + e }' "$log"
