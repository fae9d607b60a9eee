#!/usr/bin/env bash
# Installs the Debian packages troupe builds and tests with, only those missing.
# Works as root on a fresh Debian 12; otherwise uses sudo if present, or says
# exactly what to install.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libuv1-dev libnng-dev libmsgpack-dev
      librocksdb-dev libjansson-dev libcurl4-openssl-dev check clang libclang-rt-14-dev clang-format)
# For the cluster tests (tests/cluster): a real etcd.
pkgs+=(etcd-server)
# For `make test`: promtool (in Debian's prometheus package) checks a scrape
# of the admin endpoint's /metrics (tests/integration/check_admin.c).
pkgs+=(prometheus)
# Extra packages for `make bench` (peers): pass --bench.
# redis-server and Node (nodejs, npm) are for the BullMQ peer
# (bench/peers/bullmq). Node and npm are checked as commands, not packages:
# a machine with another build of Node (say NodeSource's nodejs, which ships
# npm itself and conflicts with Debian's npm package) keeps it; a fresh
# Debian 12 gets its own nodejs 18 and npm 9.
if [ "${1:-}" = "--bench" ]; then
    pkgs+=(libcaf-dev g++ redis-server)
    command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
    command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: apt-get not found; this script needs Debian 12." >&2
    echo "install-deps: install these packages by hand: ${missing[*]}" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "install-deps: not root and no sudo; run as root:" >&2
        echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
