#!/usr/bin/env bash
# Fetches Debian's msgpack-c 4.0.0 source package into $1 (default
# build/msgpack-src) so the fuzz target can compile msgpack-c's sources in:
# coverage-guided fuzzing sees ~10x the edges that way (docs/fuzzing.md).
# Uses a private apt state directory, so the system's package lists are
# never touched. Prints the source directory on success.
set -euo pipefail
dest=${1:-build/msgpack-src}
if [ -f "$dest/src/unpack.c" ]; then echo "$dest"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
cat > "$work/src.sources" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
aptopt=(-o Dir::Etc::sourcelist="$work/src.sources" -o Dir::Etc::sourceparts=-
        -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
        -o APT::Sandbox::User=root)
apt-get "${aptopt[@]}" update -qq >&2
(cd "$work" && apt-get "${aptopt[@]}" source --download-only -qq msgpack-c >&2)
tarball=$(ls "$work"/msgpack-c_*.orig.tar.gz | head -n 1)
mkdir -p "$dest"
tar -xzf "$tarball" -C "$dest" --strip-components=1
[ -f "$dest/src/unpack.c" ] || { echo "fetch-msgpack-src: unexpected layout" >&2; exit 1; }
echo "$dest"
