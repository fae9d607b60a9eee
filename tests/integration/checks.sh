# Sourced by the integration scripts (tools.sh, queue_cli.sh, security.sh,
# hostile.sh): counters and the check helpers they share. The sourcing
# script sets $tmp (a scratch directory) first, and ends by reporting
# $passes and $fails.
fails=0
passes=0
ok() { passes=$((passes + 1)); echo "ok: $*"; }
bad() { fails=$((fails + 1)); echo "FAIL: $*"; }

# expect CODE DESCRIPTION -- COMMAND...: runs it, checks the exit code;
# its output is in $tmp/out and $tmp/err.
expect() {
    local want=$1 what=$2
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then ok "$what (exit $rc)"; else
        bad "$what: exit $rc, want $want"; cat "$tmp/out" "$tmp/err"; fi
}

# says FILE PATTERN WHAT: a check that FILE holds PATTERN (grep), which
# prints FILE when it does not.
says() {
    if grep -q "$2" "$1"; then ok "$3"; else
        bad "$3"; echo "--- $1:"; cat "$1"; fi
}

# wait_for FILE PATTERN: polls up to 10 s for PATTERN in FILE.
wait_for() {
    for _ in $(seq 1 200); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
