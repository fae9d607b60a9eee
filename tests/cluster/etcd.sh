#!/usr/bin/env bash
# A real single-member etcd (Debian's etcd-server) for the cluster tests,
# on free loopback ports with a temporary data dir. Source it, then:
#
#   etcd_start DIR   starts etcd under DIR (DIR/etcd: data, DIR/etcd.log),
#                    waits until it answers healthy (polled, 30 s
#                    deadline), sets ETCD_URL and ETCD_PID; returns 1 and
#                    prints the log's tail when it cannot.
#   etcd_stop        kills it and waits for it (idempotent).
#
# Free ports are asked of the kernel (a bind to port 0) and can be taken
# by another process before etcd binds them: a start whose etcd exits
# early is retried with new ports, three times. The caller traps EXIT to
# call etcd_stop so that no etcd outlives a test; for a caller killed
# outright (ctest's timeout), a watchdog kills etcd once the caller's
# process is gone.
ETCD_URL=""
ETCD_PID=""
ETCD_WATCHDOG=""

etcd_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

etcd_healthy() {
    curl -s --noproxy '*' --max-time 2 "$ETCD_URL/health" 2>/dev/null |
        grep -q '"health":"true"'
}

etcd_start() {
    local dir=${1:?etcd_start DIR}
    command -v etcd >/dev/null 2>&1 || {
        echo "etcd.sh: etcd not found (Debian's etcd-server: scripts/install-deps.sh)" >&2
        return 1
    }
    local try
    for try in 1 2 3; do
        local cport pport
        cport=$(etcd_free_port) && pport=$(etcd_free_port) || return 1
        [ "$cport" = "$pport" ] && continue
        rm -rf "$dir/etcd"
        ETCD_URL="http://127.0.0.1:$cport"
        local peer="http://127.0.0.1:$pport"
        etcd --name t --data-dir "$dir/etcd" \
            --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
            --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
            --initial-cluster "t=$peer" --initial-cluster-state new \
            --log-level warn >"$dir/etcd.log" 2>&1 &
        ETCD_PID=$!
        local deadline=$((SECONDS + 30))
        while [ $SECONDS -lt $deadline ]; do
            if ! kill -0 "$ETCD_PID" 2>/dev/null; then
                wait "$ETCD_PID" 2>/dev/null
                ETCD_PID=""
                break # exited: a port taken? new ports
            fi
            if etcd_healthy; then
                local owner=$$ pid=$ETCD_PID
                (
                    while kill -0 "$owner" 2>/dev/null; do sleep 1; done
                    kill -9 "$pid" 2>/dev/null
                ) >/dev/null 2>&1 &
                ETCD_WATCHDOG=$!
                return 0
            fi
            sleep 0.1 # the poll's interval, not a wait for a condition
        done
        if [ -n "$ETCD_PID" ]; then
            echo "etcd.sh: etcd not healthy within 30 s" >&2
            tail -20 "$dir/etcd.log" >&2
            etcd_stop
            return 1
        fi
    done
    echo "etcd.sh: etcd would not start:" >&2
    tail -20 "$dir/etcd.log" >&2
    ETCD_URL=""
    return 1
}

etcd_stop() {
    if [ -n "$ETCD_WATCHDOG" ]; then
        kill -9 "$ETCD_WATCHDOG" 2>/dev/null
        wait "$ETCD_WATCHDOG" 2>/dev/null
        ETCD_WATCHDOG=""
    fi
    if [ -n "$ETCD_PID" ]; then
        kill -9 "$ETCD_PID" 2>/dev/null
        wait "$ETCD_PID" 2>/dev/null
        ETCD_PID=""
    fi
}
