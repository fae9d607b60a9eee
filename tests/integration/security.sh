#!/usr/bin/env bash
# Who may talk to a `troupe node`, as a user configures it: bad security
# flags (exit 2), a certificate that does not name the node (exit 1), a
# cluster secret (the right one pings, a wrong one or none is refused),
# mutual TLS with an allow-list (a listed node with its certificate pings
# over tls+tcp://, an unlisted one or one with another node's certificate
# is refused). Certificates are made here with openssl, in a temp dir.
# Loopback and ipc only; every wait polls a condition with a deadline.
set -u
troupe=${1:?usage: security.sh PATH/TO/troupe}
tmp=$(mktemp -d)
node_pid=""
cleanup() {
    [ -n "$node_pid" ] && kill -9 "$node_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/checks.sh"


# stop_node: SIGTERM, then a clean exit.
stop_node() {
    kill -TERM "$node_pid"
    wait "$node_pid"
    local rc=$?
    node_pid=""
    if [ "$rc" -eq 0 ]; then
        ok "$1: node exits 0"
    else
        bad "$1: node exit $rc"
        echo "--- the node's last lines:"; grep -v ' warn ' "$out" | tail -n 60
    fi
}

# certificates: a CA, and nodes 1, 2, 8, 9 each naming troupe-node-<id>
ca() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -nodes -keyout "$tmp/ca.key" -out "$tmp/ca.pem" -days 2 \
        -subj /CN=troupe-test-ca 2>/dev/null
}
cert() {
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$tmp/n$1.key" -out "$tmp/n$1.csr" \
        -subj "/CN=troupe-node-$1" 2>/dev/null &&
        printf 'subjectAltName=DNS:troupe-node-%s\n' "$1" >"$tmp/n$1.ext" &&
        openssl x509 -req -in "$tmp/n$1.csr" -CA "$tmp/ca.pem" \
            -CAkey "$tmp/ca.key" -CAcreateserial -out "$tmp/n$1.pem" \
            -days 2 -extfile "$tmp/n$1.ext" 2>/dev/null
}
if ! { ca && cert 1 && cert 2 && cert 8 && cert 9; }; then
    bad "openssl could not make the test certificates"
    echo "$passes passed, $fails failed"
    exit 1
fi
tls() { echo --tls-cert "$tmp/n$1.pem" --tls-key "$tmp/n$1.key" --tls-ca "$tmp/ca.pem"; }

printf 'a-cluster-secret-for-the-test\n' >"$tmp/secret"
printf 'another-secret-of-enough-length\n' >"$tmp/other"
printf 'short\n' >"$tmp/short"
d="$tmp/d"

# ---- bad flags ----
expect 2 "short secret" -- "$troupe" node --data "$d" --listen tcp://127.0.0.1:0 \
    --secret-file "$tmp/short"
grep -q "at least 16" "$tmp/err" && ok "short secret is explained" || bad "short secret message"
expect 2 "missing secret file" -- "$troupe" node --data "$d" \
    --listen tcp://127.0.0.1:0 --secret-file "$tmp/nothing"
expect 2 "TLS without a key" -- "$troupe" node --data "$d" \
    --listen tcp://127.0.0.1:0 --tls-cert "$tmp/n1.pem" --tls-ca "$tmp/ca.pem"
grep -q "go together" "$tmp/err" && ok "partial TLS is explained" || bad "partial TLS message"
expect 2 "peer id not a number" -- "$troupe" node --data "$d" \
    --listen tcp://127.0.0.1:0 --peer abc=tcp://127.0.0.1:1
expect 2 "peer id 0" -- "$troupe" node --data "$d" \
    --listen tcp://127.0.0.1:0 --peer 0=tcp://127.0.0.1:1
expect 2 "peer id without URL" -- "$troupe" node --data "$d" \
    --listen tcp://127.0.0.1:0 --peer 5=
expect 2 "allow-list with a bare peer" -- "$troupe" node --data "$d" \
    --listen tcp://127.0.0.1:0 --peer 2=tcp://127.0.0.1:1 --peer tcp://127.0.0.1:2
expect 2 "ping with a bare peer" -- "$troupe" ping tcp://127.0.0.1:1 \
    --peer tcp://127.0.0.1:2
expect 1 "node 3 with node 1's certificate" -- "$troupe" node --data "$d" \
    --id 3 --listen tls+tcp://127.0.0.1:0 $(tls 1)
grep -q "not valid for node 3" "$tmp/err" && ok "wrong certificate is explained" ||
    bad "wrong certificate message"
expect 1 "tls+tcp without certificates" -- "$troupe" node --data "$d" \
    --listen tls+tcp://127.0.0.1:0

# ---- a cluster secret ----
out="$tmp/node-secret.out"
"$troupe" node --data "$d" --listen tcp://127.0.0.1:0 --secret-file "$tmp/secret" \
    >"$out" 2>&1 &
node_pid=$!
if wait_for "$out" "listening on tcp://"; then
    url=$(grep -o 'tcp://127\.0\.0\.1:[0-9]*' "$out" | head -n 1)
    grep -q "accepts any peer" "$out" && bad "secret: node warns it is open" ||
        ok "secret: node does not warn it is open"
    expect 0 "secret: ping with the secret" -- "$troupe" ping "$url" --count 20 \
        --timeout 10000 --secret-file "$tmp/secret"
    grep -q "20 round trips" "$tmp/out" && ok "secret: round trips" || bad "secret: ping output"
    expect 1 "secret: ping with another secret" -- "$troupe" ping "$url" \
        --count 5 --timeout 10000 --secret-file "$tmp/other"
    grep -q "did not prove its identity\|refused us" "$tmp/err" &&
        ok "secret: another secret is explained" || bad "secret: another secret message"
    expect 1 "secret: ping without a secret" -- "$troupe" ping "$url" \
        --count 5 --timeout 10000
    grep -q "refused us" "$tmp/err" && ok "secret: no secret is refused" ||
        bad "secret: no secret message"
    grep -q "refused node .*: no secret proof" "$out" &&
        ok "secret: node logs the refusal" || bad "secret: refusal not logged"
    stop_node secret
else
    bad "secret: node did not start"; cat "$out"
fi

# ---- mutual TLS and an allow-list ----
out="$tmp/node-tls.out"
p9="ipc://$tmp/p9.ipc"
"$troupe" node --data "$d" --listen tls+tcp://127.0.0.1:0 $(tls 1) \
    --peer "9=$p9" >"$out" 2>&1 &
node_pid=$!
if wait_for "$out" "listening on tls+tcp://"; then
    url=$(grep -o 'tls+tcp://127\.0\.0\.1:[0-9]*' "$out" | head -n 1)
    grep -q "(allow-list)" "$out" && ok "tls: node has an allow-list" || bad "tls: no allow-list"
    expect 0 "tls: listed node 9 pings over tls+tcp" -- "$troupe" ping "$url" \
        --count 20 --timeout 10000 --id 9 --listen "$p9" --peer "1=$url" $(tls 9)
    grep -q "20 round trips" "$tmp/out" && ok "tls: round trips" || bad "tls: ping output"
    expect 1 "tls: unlisted node 8 is refused" -- "$troupe" ping "$url" \
        --count 5 --timeout 10000 --id 8 --listen "ipc://$tmp/p8.ipc" \
        --peer "1=$url" $(tls 8)
    says "$tmp/err" "refused us" "tls: unlisted node is told"
    says "$out" "refused node 8: not in the allow-list" \
        "tls: node logs the unlisted node"
    expect 1 "tls: node 9 with node 2's certificate" -- "$troupe" ping "$url" \
        --count 5 --timeout 10000 --id 9 --listen "$p9" --peer "1=$url" $(tls 2)
    expect 1 "tls: ping without certificates" -- "$troupe" ping "$url" \
        --count 5 --timeout 5000
    expect 0 "tls: node 9 again" -- "$troupe" ping "$url" \
        --count 5 --timeout 10000 --id 9 --listen "$p9" --peer "1=$url" $(tls 9)
    stop_node tls
else
    bad "tls: node did not start"; cat "$out"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
