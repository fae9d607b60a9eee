#!/usr/bin/env bash
# with_etcd.sh CMD [ARG]...: runs CMD with a fresh single-member etcd
# (etcd.sh) whose client URL is in TROUPE_ETCD; stops etcd and removes its
# data dir when CMD ends, fails or is interrupted. Exits with CMD's status.
set -u
[ $# -ge 1 ] || { echo "usage: with_etcd.sh CMD [ARG]..." >&2; exit 2; }
. "$(dirname "$0")/etcd.sh"
tmp=$(mktemp -d)
trap 'etcd_stop; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
etcd_start "$tmp" || exit 1
TROUPE_ETCD=$ETCD_URL "$@"
