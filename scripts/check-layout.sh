#!/usr/bin/env bash
# The layout rules the compiler cannot see, checked over the source files
# git knows (tracked, or new and not ignored; every file under ROOT when
# ROOT is not a git work tree):
#
#   cross-include    an #include "../..." whose target, resolved against the
#                    including file's folder, lies in another module folder
#                    (actors/<m>, runtime, storage, protocols, tools,
#                    examples, bench, bindings/<b>, tests/<t>): a module
#                    reaches another only through its headers and the build.
#   internal-include an #include of "troupe/internal/..." outside actors/,
#                    runtime/, protocols/, bindings/c/ (the flat ABI, a
#                    module of the library: it posts the dispatch's
#                    completions), tests/ and bench/: the internal
#                    tier is for modules, not for tools, examples or users.
#   file-lines       a file under actors/ over 1,200 lines.
#   function         a function under actors/ over 100 lines (house style:
#                    the name at column 0, the body up to the first line
#                    that is "}") whose comment block directly above does
#                    not say "Long because" on one of its lines.
#
# Usage: check-layout.sh [--self-test] [ROOT]
#   ROOT defaults to the tree this script is in. --self-test first checks
#   the checker itself on a planted tree (one offender per rule, an allowed
#   offender, a stale allow-list line); with ROOT it then checks ROOT.
#
# ROOT/scripts/layout-allow.txt lists offenders that are known and on their
# way out, one per line, as the key this script prints after "allow key:"
# (`path rule [detail]`; # starts a comment). A listed line that no longer
# offends fails the check too, so the list only shrinks.
#
# Prints `file:line: reason` per offence; exits 0 when clean, 1 otherwise.
set -euo pipefail

MAX_FILE_LINES=1200
MAX_FN_LINES=100

# module_of PATH: the module folder PATH (relative to the root) lies in.
module_of() {
    local p=$1
    case $p in
    actors/* | bindings/* | tests/*)
        local top=${p%%/*} rest=${p#*/}
        if [ "$rest" = "$p" ] || [ "${rest%%/*}" = "$rest" ]; then
            echo "$top" # a file directly in actors/, tests/, bindings/
        else
            echo "$top/${rest%%/*}"
        fi
        ;;
    */*) echo "${p%%/*}" ;;
    *) echo "." ;;
    esac
}

# normalize PATH: PATH with "." and "dir/.." removed; a path that climbs
# above the root keeps its leading "../".
normalize() {
    local IFS=/ part out=()
    for part in $1; do
        case $part in
        '' | .) ;;
        ..)
            if [ ${#out[@]} -gt 0 ] && [ "${out[-1]}" != .. ]; then
                unset 'out[-1]'
            else
                out+=(..)
            fi
            ;;
        *) out+=("$part") ;;
        esac
    done
    echo "${out[*]}"
}

list_files() {
    local root=$1
    if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
        [ "$(git -C "$root" rev-parse --show-toplevel)" = "$(cd "$root" && pwd -P)" ]; then
        git -C "$root" ls-files --cached --others --exclude-standard -- '*.c' '*.h' '*.cc' | sort -u
    else
        (cd "$root" && find . -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' \) \
            -not -path './build*' -not -path './.git/*' | sed 's#^\./##' | sort)
    fi
}

# offences ROOT: one line per offence, "key<TAB>file:line: reason".
offences() {
    local root=$1 f line inc target from to
    while IFS= read -r f; do
        [ -f "$root/$f" ] || continue
        # Rules 1 and 2: includes.
        while IFS=: read -r line inc; do
            inc=${inc#*\"}
            inc=${inc%%\"*}
            case $inc in
            ../*)
                target=$(normalize "$(dirname "$f")/$inc")
                from=$(module_of "$f")
                to=$(module_of "$target")
                if [ "$from" != "$to" ]; then
                    printf '%s cross-include %s\t%s:%s: #include "%s" reaches into %s from %s\n' \
                        "$f" "$inc" "$f" "$line" "$inc" "$to" "$from"
                fi
                ;;
            troupe/internal/*)
                case $f in
                actors/* | runtime/* | protocols/* | bindings/c/* | tests/* | bench/*) ;;
                *)
                    printf '%s internal-include %s\t%s:%s: #include "%s": the internal tier is for modules, tests and benches only\n' \
                        "$f" "$inc" "$f" "$line" "$inc"
                    ;;
                esac
                ;;
            esac
        done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$root/$f" || true)
        case $f in
        actors/*) ;;
        *) continue ;;
        esac
        # Rules 3 and 4: sizes under actors/.
        awk -v f="$f" -v maxf="$MAX_FILE_LINES" -v maxfn="$MAX_FN_LINES" '
            # cbuf holds the comment block that ended on the line above
            # the current declaration; it is cleared by any other line.
            function reset_comment() { cbuf = ""; incomment = 0 }
            {
                text[NR] = $0
            }
            infn {
                if ($0 ~ /^}/) {
                    n = NR - start + 1
                    if (n > maxfn && fcomment !~ /Long because/)
                        printf "%s function %s\t%s:%d: %s is %d lines (over %d) and the comment above it does not say \"Long because\"\n", f, name, f, start, name, n, maxfn
                    infn = 0
                }
                next
            }
            pending {
                if ($0 ~ /^{/) {
                    infn = 1
                    pending = 0
                    fcomment = pcomment
                    next
                }
                if ($0 ~ /;[[:space:]]*$/ || $0 ~ /^}/) {
                    pending = 0 # a prototype, or not a function
                }
                next
            }
            /^[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(/ {
                name = $0
                sub(/[[:space:]]*\(.*/, "", name)
                start = NR
                pending = 1
                # The comment block directly above: skip the return type
                # lines (non-blank, not a comment end), then take the block.
                pcomment = ""
                i = NR - 1
                while (i > 0 && text[i] !~ /^[[:space:]]*$/ && text[i] !~ /\*\/[[:space:]]*$/ &&
                       text[i] !~ /^[[:space:]]*\/\// && text[i] !~ /[;}][[:space:]]*$/)
                    i--
                if (i > 0 && text[i] ~ /\*\/[[:space:]]*$/) {
                    while (i > 0) {
                        pcomment = text[i] "\n" pcomment
                        if (text[i] ~ /\/\*/)
                            break
                        i--
                    }
                } else {
                    while (i > 0 && text[i] ~ /^[[:space:]]*\/\//) {
                        pcomment = text[i] "\n" pcomment
                        i--
                    }
                }
                next
            }
            END {
                if (NR > maxf)
                    printf "%s file-lines\t%s:%d: %d lines (over %d)\n", f, f, NR, NR, maxf
            }
        ' "$root/$f"
    done < <(list_files "$root")
}

# check ROOT: prints the offences not allowed and the allow-list lines that
# no longer offend; returns 1 if there is any.
check() {
    local root=$1 allow="$1/scripts/layout-allow.txt" bad=0 key msg
    local -A listed=() seen=()
    if [ -f "$allow" ]; then
        while IFS= read -r key; do
            key=${key%%#*}
            key=$(echo "$key" | sed 's/[[:space:]]*$//; s/^[[:space:]]*//; s/[[:space:]][[:space:]]*/ /g')
            [ -n "$key" ] && listed[$key]=1
        done <"$allow"
    fi
    while IFS=$'\t' read -r key msg; do
        [ -n "$key" ] || continue
        seen[$key]=1
        if [ -z "${listed[$key]:-}" ]; then
            echo "$msg"
            echo "    allow key: $key"
            bad=1
        fi
    done < <(offences "$root")
    for key in "${!listed[@]}"; do
        if [ -z "${seen[$key]:-}" ]; then
            echo "scripts/layout-allow.txt: \"$key\" no longer offends: remove the line"
            bad=1
        fi
    done
    return $bad
}

# self_test: plants one offender per rule in a scratch tree and fails unless
# each is reported, an allowed one is not, and a stale allow line is.
self_test() {
    local t out rc fails=0
    t=$(mktemp -d)
    trap 'rm -rf "$t"' RETURN
    mkdir -p "$t/scripts" "$t/actors/a/src" "$t/actors/b/src" "$t/tools" \
        "$t/tests/x" "$t/bench/peers"
    printf 'int b;\n' >"$t/actors/b/src/b_int.h"
    printf '#include "../../b/src/b_int.h"\n' >"$t/actors/a/src/cross.c"
    printf '#include "../bench_util.h"\n' >"$t/bench/peers/peer.h"
    printf 'int u;\n' >"$t/bench/bench_util.h"
    printf '#include "../../actors/b/src/b_int.h"\n' >"$t/tests/x/allowed.c"
    printf '#include "troupe/internal/tables.h"\n' >"$t/tools/tool.c"
    printf '#include "troupe/internal/tables.h"\n' >"$t/tests/x/inner.c"
    awk 'BEGIN { for (i = 0; i < 1201; i++) print "int x" i ";" }' \
        >"$t/actors/a/src/big.c"
    {
        printf 'static int\nlong_fn(void)\n{\n'
        awk 'BEGIN { for (i = 0; i < 100; i++) print "    (void)0;" }'
        printf '}\n\n/* Long because it is one table of cases. */\nstatic int\nexcused_fn(void)\n{\n'
        awk 'BEGIN { for (i = 0; i < 100; i++) print "    (void)0;" }'
        printf '}\n\nstatic int\nshort_fn(int a,\n         int b);\n'
        printf 'static int\nshort_fn(int a, int b)\n{\n    return a + b;\n}\n'
    } >"$t/actors/a/src/fns.c"
    printf '%s\n' '# planted' 'tests/x/allowed.c cross-include ../../actors/b/src/b_int.h' \
        'actors/a/src/gone.c file-lines' >"$t/scripts/layout-allow.txt"
    set +e
    out=$(check "$t")
    rc=$?
    set -e
    expect() {
        if ! grep -qF -- "$1" <<<"$out"; then
            echo "check-layout self-test: not reported: $1" >&2
            fails=1
        fi
    }
    refuse() {
        if grep -qF -- "$1" <<<"$out"; then
            echo "check-layout self-test: wrongly reported: $1" >&2
            fails=1
        fi
    }
    expect 'actors/a/src/cross.c:1: #include "../../b/src/b_int.h" reaches into actors/b from actors/a'
    expect 'tools/tool.c:1: #include "troupe/internal/tables.h"'
    expect 'actors/a/src/big.c:1201: 1201 lines (over 1200)'
    expect 'actors/a/src/fns.c:2: long_fn is 103 lines'
    expect '"actors/a/src/gone.c file-lines" no longer offends'
    refuse 'excused_fn'
    refuse 'short_fn'
    refuse 'peer.h'
    refuse 'allowed.c'
    refuse 'inner.c'
    if [ $rc -eq 0 ]; then
        echo "check-layout self-test: the planted tree passed" >&2
        fails=1
    fi
    if [ $fails -ne 0 ]; then
        echo "check-layout self-test: output was:" >&2
        echo "$out" >&2
        return 1
    fi
    echo "check-layout self-test: ok"
}

self=0
if [ "${1:-}" = "--self-test" ]; then
    self=1
    shift
fi
if [ $self -eq 1 ]; then
    self_test
    [ $# -eq 0 ] && exit 0
fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if check "$root"; then
    echo "check-layout: $root: ok"
else
    echo "check-layout: $root: layout rules broken (scripts/check-layout.sh explains them)" >&2
    exit 1
fi
