#!/usr/bin/env bash
# troupe as a user gets it: installed into a temporary prefix with
# `cmake --install BUILD --prefix TMP`, then used from there only.
#
#   install.sh headers BUILD SRC CC
#     Every public header of the source tree (the include/troupe folders
#     of runtime, storage, protocols and every actors/<m>) is installed
#     and named by the umbrella troupe/troupe.h; nothing else is installed
#     under include/troupe but troupe.h and the generated version.h; each
#     installed header compiles alone (and twice in one unit) under
#     -std=c11 -pedantic -Werror with no -D and no -I but the prefix's.
#   install.sh link BUILD SRC CC
#     The layout (libtroupe.so -> .so.0 -> .so.<version>, soname
#     libtroupe.so.0, libtroupe.a, troupe.pc, the CMake package, the tool
#     and its manual); then tests/install/standalone.c built with
#     pkg-config against the shared library and against the static one
#     (-std=c11 -pedantic -Werror), and examples/embed.c, the other small
#     examples and standalone.c built by tests/install/consumer with
#     find_package(troupe); each is
#     run on a fresh db dir and must print its row and exit 0. The shared
#     builds must need libtroupe.so.0, the static ones must not.
set -euo pipefail

mode=$1 build=$2 src=$3 cc=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/troupe-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"

fail() {
    echo "install.sh: $*" >&2
    exit 1
}

check_headers() {
    local inc=$prefix/include/troupe h name
    [ -f "$inc/troupe.h" ] || fail "no include/troupe/troupe.h"
    local names=()
    for h in "$src"/runtime/include/troupe/*.h "$src"/storage/include/troupe/*.h \
        "$src"/protocols/include/troupe/*.h "$src"/actors/*/include/troupe/*.h \
        "$src"/bindings/*/include/troupe/*.h; do
        names+=("$(basename "$h")")
    done
    names+=(version.h)
    for name in "${names[@]}"; do
        [ -f "$inc/$name" ] || fail "public header $name is not installed"
        grep -qx "#include \"troupe/$name\"" "$inc/troupe.h" ||
            fail "troupe.h does not include troupe/$name"
    done
    for h in "$inc"/*; do
        name=$(basename "$h")
        # a here-string, not a pipe: under pipefail, grep -q leaving at
        # its first match can kill printf with SIGPIPE and fail the test
        if [ "$name" != troupe.h ] &&
            ! grep -qx -- "$name" <<<"$(printf '%s\n' "${names[@]}")"; then
            fail "include/troupe/$name is installed but is no public header"
        fi
        printf '#include <troupe/%s>\n#include <troupe/%s>\nint troupe_probe;\n' \
            "$name" "$name" >"$tmp/probe.c"
        "$cc" -std=c11 -pedantic -Werror -Wall -Wextra -fsyntax-only \
            -I"$prefix/include" "$tmp/probe.c" 2>"$tmp/probe.err" ||
            { cat "$tmp/probe.err" >&2; fail "troupe/$name does not compile alone"; }
    done
    [ -z "$(find "$prefix/include" -path '*internal*')" ] ||
        fail "an internal header is installed"
    echo "install.sh: ${#names[@]} public headers, each alone under -std=c11 -pedantic"
}

# run_prog NAME BINARY EXPECT: runs BINARY on a fresh dir; its stdout must
# hold EXPECT.
run_prog() {
    local out
    out=$(cd "$tmp" && "$2" "$tmp/db-$1") || fail "$1 exited $?"
    printf '%s\n' "$out" | grep -qF "$3" || fail "$1 printed: $out"
    echo "install.sh: $1: $out"
}

# needs BINARY yes|no: whether BINARY needs libtroupe.so.0.
needs() {
    local got=no
    if grep -q 'NEEDED.*\[libtroupe\.so\.0\]' <<<"$(readelf -d "$1")"; then
        got=yes
    fi
    [ "$got" = "$2" ] || fail "$(basename "$1"): needs libtroupe.so.0: $got, want $2"
}

check_link() {
    local lib pc version
    version=$(sed -n 's/^#define TROUPE_VERSION_STRING "\(.*\)"$/\1/p' \
        "$prefix/include/troupe/version.h")
    lib=$(dirname "$(find "$prefix" -name libtroupe.a)")
    [ -n "$lib" ] && [ -f "$lib/libtroupe.a" ] || fail "no libtroupe.a"
    [ "$(readlink "$lib/libtroupe.so")" = libtroupe.so.0 ] ||
        fail "libtroupe.so is not a link to libtroupe.so.0"
    [ "$(readlink "$lib/libtroupe.so.0")" = "libtroupe.so.$version" ] ||
        fail "libtroupe.so.0 is not a link to libtroupe.so.$version"
    grep -q 'SONAME.*\[libtroupe\.so\.0\]' <<<"$(readelf -d "$lib/libtroupe.so.$version")" ||
        fail "the soname is not libtroupe.so.0"
    [ -x "$prefix/bin/troupe" ] || fail "no bin/troupe"
    grep -qF "$version" <<<"$("$prefix/bin/troupe" --version)" ||
        fail "bin/troupe --version does not say $version"
    [ -f "$prefix/share/man/man1/troupe.1" ] || fail "no man1/troupe.1"
    [ -f "$lib/cmake/troupe/troupe-config.cmake" ] || fail "no CMake package"
    pc=$lib/pkgconfig
    [ -f "$pc/troupe.pc" ] || fail "no troupe.pc"
    export PKG_CONFIG_PATH=$pc
    [ "$(pkg-config --modversion troupe)" = "$version" ] ||
        fail "troupe.pc's version is not $version"

    local want="hello from an installed troupe" cflags libs slibs
    cflags=$(pkg-config --cflags troupe)
    libs=$(pkg-config --libs troupe)
    slibs=$(pkg-config --static --libs troupe)
    # shellcheck disable=SC2086
    "$cc" -std=c11 -pedantic -Werror -Wall -Wextra $cflags \
        "$src/tests/install/standalone.c" -o "$tmp/pc_shared" $libs \
        -Wl,-rpath,"$lib"
    needs "$tmp/pc_shared" yes
    run_prog pc_shared "$tmp/pc_shared" "$want"
    # The archive by name, then everything it needs (Libs.private and
    # Requires.private), as the shared system libraries they are.
    # shellcheck disable=SC2086
    "$cc" -std=c11 -pedantic -Werror -Wall -Wextra $cflags \
        "$src/tests/install/standalone.c" -o "$tmp/pc_static" \
        ${slibs/-ltroupe/-Wl,-Bstatic -ltroupe -Wl,-Bdynamic}
    needs "$tmp/pc_static" no
    run_prog pc_static "$tmp/pc_static" "$want"

    cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" \
        -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
        -DTROUPE_SRC="$src" -DCMAKE_C_FLAGS="-Werror -Wall" \
        >"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log" >&2; fail "find_package project: configure"; }
    cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 ||
        { cat "$tmp/consumer.log" >&2; fail "find_package project: build"; }
    needs "$tmp/consumer/embed" yes
    needs "$tmp/consumer/embed_static" no
    needs "$tmp/consumer/standalone" yes
    local embed_want="written and read on the host's loop"
    run_prog cmake_embed "$tmp/consumer/embed" "$embed_want"
    run_prog cmake_embed_static "$tmp/consumer/embed_static" "$embed_want"
    run_prog cmake_standalone "$tmp/consumer/standalone" "$want"
    run_prog cmake_actor "$tmp/consumer/actor" "counter total: 6"
    run_prog cmake_txn_retry "$tmp/consumer/txn_retry" "balance 60"
    run_prog cmake_queue_worker "$tmp/consumer/queue_worker" "all 3 jobs done"
    run_prog cmake_index "$tmp/consumer/index" "books by Ursula K. Le Guin: 2"
}

case $mode in
headers) check_headers ;;
link) check_link ;;
*) fail "mode is headers or link, not $mode" ;;
esac
