#!/usr/bin/env bash
# Fetches Debian's msgpack-c 4.0.0 source package into $1 (default
# build/msgpack-src) so the fuzz target can compile msgpack-c's sources in:
# coverage-guided fuzzing sees ~10x the edges that way (docs/wire.md).
# Uses a private apt state directory, so the system's package lists are
# never touched. The mirror is the machine's own: every `deb` entry of its
# apt configuration (one-line sources.list files and deb822 .sources files)
# is turned into the matching `deb-src` entry; no host is written here.
# Prints the source directory on success.
set -euo pipefail
dest=${1:-build/msgpack-src}
if [ -f "$dest/src/unpack.c" ]; then echo "$dest"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"

# Where this machine's apt reads its sources (apt-config knows the layout).
eval "$(apt-config shell etc Dir::Etc/d list Dir::Etc::sourcelist/f \
        parts Dir::Etc::sourceparts/d)"
etc=${etc:-/etc/apt/}
list=${list:-${etc}sources.list}
parts=${parts:-${etc}sources.list.d/}

srcs="$work/src.sources"
: > "$srcs"
# One-line format: "deb [opts] URI suite comp..." -> "deb-src ...".
one_line() {
    sed -n 's/^[[:space:]]*deb\([[:space:]]\)/deb-src\1/p' "$1" >> "$work/src.list"
}
# deb822 format: copy each stanza whose Types include deb, as deb-src.
deb822() {
    awk -v out="$srcs" '
        function flush() {
            if (has_deb && uris != "" && enabled)
                printf "Types: deb-src\n%s\n\n", body >> out
            body = ""; has_deb = 0; uris = ""; enabled = 1
        }
        BEGIN { enabled = 1 }
        /^[[:space:]]*#/ { next }
        /^[[:space:]]*$/ { flush(); next }
        /^Types:/ { for (i = 2; i <= NF; i++) if ($i == "deb") has_deb = 1; next }
        /^Enabled:/ { if ($2 == "no") enabled = 0; next }
        /^URIs:/ { uris = $0 }
        { body = body (body == "" ? "" : "\n") $0 }
        END { flush() }
    ' "$1"
}
[ -f "$list" ] && one_line "$list"
for f in "$parts"*.list; do [ -f "$f" ] && one_line "$f"; done
for f in "$parts"*.sources; do [ -f "$f" ] && deb822 "$f"; done
if [ ! -s "$srcs" ] && [ ! -s "$work/src.list" ]; then
    echo "fetch-msgpack-src: no deb entries in this machine's apt sources" >&2
    exit 1
fi
touch "$work/src.list"
aptopt=(-o Dir::Etc::sourcelist="$work/src.list"
        -o Dir::Etc::sourceparts="$work/parts"
        -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
        -o APT::Sandbox::User=root)
mkdir -p "$work/parts"
[ -s "$srcs" ] && cp "$srcs" "$work/parts/src.sources"
# Entries for other repositories (a vendor's) may have no sources; only
# msgpack-c's must resolve, so a failing update of one of them is no error.
apt-get "${aptopt[@]}" update -qq >&2 || true
(cd "$work" && apt-get "${aptopt[@]}" source --download-only -qq msgpack-c >&2)
tarball=$(ls "$work"/msgpack-c_*.orig.tar.gz | head -n 1)
mkdir -p "$dest"
tar -xzf "$tarball" -C "$dest" --strip-components=1
[ -f "$dest/src/unpack.c" ] || { echo "fetch-msgpack-src: unexpected layout" >&2; exit 1; }
echo "$dest"
