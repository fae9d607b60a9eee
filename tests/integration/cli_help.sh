#!/usr/bin/env bash
# The manual cannot drift from the command: every command, subcommand and
# flag that `troupe --help` and each command's --help list (queue's and
# gtx's subcommands' too) must appear in troupe.1 as man renders it, and
# the page must render without a warning.
set -u
troupe=${1:?usage: cli_help.sh PATH/TO/troupe PATH/TO/troupe.1}
page=${2:?usage: cli_help.sh PATH/TO/troupe PATH/TO/troupe.1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/checks.sh"

# The page as a reader sees it: man -l (overstrike removed), or groff.
if command -v man >/dev/null 2>&1; then
    MANWIDTH=200 MANPAGER=cat man -l "$page" 2>"$tmp/man.err" | sed 's/.\x08//g' >"$tmp/page"
else
    groff -man -Tutf8 -P-cbou "$page" 2>"$tmp/man.err" >"$tmp/page"
fi
# man renders '-' as U+2010 in some locales: fold back to ASCII.
sed -i 's/\xe2\x80\x90/-/g; s/\xe2\x88\x92/-/g' "$tmp/page"
[ -s "$tmp/page" ] && ok "the page renders" || bad "the page rendered empty"
[ ! -s "$tmp/man.err" ] && ok "man says nothing on stderr" || { bad "man complained"; cat "$tmp/man.err"; }
if command -v groff >/dev/null 2>&1; then
    groff -man -ww -z "$page" 2>"$tmp/groff.err"
    [ ! -s "$tmp/groff.err" ] && ok "groff -ww finds nothing" || { bad "groff warnings"; cat "$tmp/groff.err"; }
fi

"$troupe" --help >"$tmp/top" || bad "troupe --help failed"
cmds=$(sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z]*\) .*/\1/p' "$tmp/top")
[ "$(echo "$cmds" | wc -w)" -ge 5 ] && ok "--help lists $(echo $cmds)" || bad "too few commands: $cmds"
"$troupe" queue --help >"$tmp/queue" || bad "troupe queue --help failed"
subs=$(sed -n '/^Subcommands:/,/^$/s/^  \([a-z][a-z]*\) .*/\1/p' "$tmp/queue")
[ "$(echo "$subs" | wc -w)" -ge 5 ] && ok "queue --help lists $(echo $subs)" || bad "too few subcommands: $subs"

helps=("$tmp/top" "$tmp/queue")
for c in $cmds; do
    grep -qE "(^|[^a-z-])troupe $c([^a-z-]|$)|^   $c\$" "$tmp/page" && ok "page has command $c" ||
        bad "command $c is not in the page"
    case $c in version | help) continue ;; esac
    "$troupe" "$c" --help >"$tmp/help-$c" || bad "troupe $c --help failed"
    helps+=("$tmp/help-$c")
done
for s in $subs; do
    grep -qE "queue $s([^a-z-]|$)" "$tmp/page" && ok "page has queue $s" || bad "queue $s is not in the page"
    "$troupe" queue "$s" --help >"$tmp/help-queue-$s" || bad "troupe queue $s --help failed"
    helps+=("$tmp/help-queue-$s")
done

"$troupe" gtx --help >"$tmp/gtx" || bad "troupe gtx --help failed"
gsubs=$(sed -n '/^Subcommands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' "$tmp/gtx")
[ "$(echo "$gsubs" | wc -w)" -eq 6 ] && ok "gtx --help lists $(echo $gsubs)" || bad "gtx subcommands: $gsubs"
for s in $gsubs; do
    grep -qE "gtx $s([^a-z-]|$)" "$tmp/page" && ok "page has gtx $s" || bad "gtx $s is not in the page"
    "$troupe" gtx "$s" --help >"$tmp/help-gtx-$s" || bad "troupe gtx $s --help failed"
    helps+=("$tmp/help-gtx-$s")
done

flags=$(grep -ohE -- '(^|[^a-z-])--[a-z][a-z0-9-]*' "${helps[@]}" | sed 's/^[^-]*//' | sort -u)
[ "$(echo "$flags" | wc -w)" -ge 15 ] && ok "the helps list $(echo "$flags" | wc -w) flags" ||
    bad "too few flags: $flags"
for f in $flags; do
    grep -qE -- "(^|[^a-z-])$f([^a-z0-9-]|$)" "$tmp/page" && ok "page has $f" || bad "flag $f is not in the page"
done
# -h too, the one short flag.
grep -qE -- "(^|[^a-z-])-h([^a-z-]|$)" "$tmp/page" && ok "page has -h" || bad "-h is not in the page"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
