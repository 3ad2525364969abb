# Sourced by rdma-suite.sh inside its rdpipe block (sshds on rxe0's and
# rxe1's addresses, ssh config $S/config, $PIPE and $BIN_DIR):
#   forward   `rdpipe forward` over RDMA: listening on rxehost0, the target
#             on rxehost1, both hops rdma (-v): an unchanged Python client's
#             64 MiB sendall, byte-exact, answered with the server's digest
#             after the client's half-close (`--once`), then 10 concurrent
#             connections and Ctrl-C, no agent left.

FWD_RUN=(timeout 600 "$PIPE" forward -v -F "$S/config" --remote-bin "$BIN_DIR" --transport rdma --connect-timeout 120)
# fwd_port ERRFILE: the port from its "forwarding ADDR:PORT" line.
fwd_port() {
    local p="" i
    for i in $(seq 1200); do
        p=$(sed -n 's/.*forwarding [0-9.]*:\([0-9]*\) .*/\1/p' "$1" | head -n1)
        [ -n "$p" ] && break
        sleep 0.1
    done
    echo "$p"
}

if [ -n "$sshd_ok" ] && want forward; then
    echo "== forward over RDMA"
    FPY=$(cd "$(dirname "$0")/../integration/forward" && pwd)/fwd.py
    FD=$W/fwd
    mkdir -p "$FD"
    python3 "$FPY" serve sha 7700 "$FD" &
    fsrv=$!
    for _ in $(seq 100); do [ -e "$FD/ready" ] && break; sleep 0.1; done
    "${FWD_RUN[@]}" --once rxehost0:0 rxehost1:127.0.0.1:7700 2>"$W/fwd1.err" &
    fpid=$!
    port=$(fwd_port "$W/fwd1.err")
    ok=1
    if [ -z "$port" ]; then
        ok=; echo "    no 'forwarding' line"
    else
        out=$(python3 "$FPY" sha "$port" $((64 << 20)) 2>&1) || { ok=; echo "    client: $out"; }
    fi
    wait "$fpid"; rc=$?
    [ "$rc" = 0 ] || { ok=; echo "    rdpipe forward exit $rc"; }
    r=$(grep -c -- '\] rxehost[01] -> \[[12]\] rxehost[01]: rdma (' "$W/fwd1.err")
    [ "$r" = 2 ] || { ok=; echo "    $r of 2 hops report rdma"; }
    if [ -n "$ok" ]; then
        pass "forward: a Python sendall of 64 MiB through rxe0 -> rxe1 over rdma, byte-exact, digest back after the half-close"
    else
        fail "forward: bulk over rdma"
        sed "s/^/    [fwd] /" "$W/fwd1.err"
    fi
    "${FWD_RUN[@]}" rxehost0:0 rxehost1:127.0.0.1:7700 2>"$W/fwd2.err" &
    fpid=$!
    port=$(fwd_port "$W/fwd2.err")
    ok=1
    if [ -z "$port" ]; then
        ok=; echo "    no 'forwarding' line"
    else
        out=$(python3 "$FPY" many "$port" 10 2>&1) || { ok=; echo "    clients: $out"; }
    fi
    kill -INT "$fpid"
    wait "$fpid"; rc=$?
    [ "$rc" = 0 ] || { ok=; echo "    rdpipe forward exit $rc after SIGINT"; }
    if pgrep -f -- '--agent' >/dev/null; then ok=; echo "    agents left: $(pgrep -af -- '--agent')"; fi
    if [ -n "$ok" ]; then
        pass "forward: 10 concurrent connections over rdma, each byte-exact; Ctrl-C ends it 0, no agent left"
    else
        fail "forward: concurrent connections over rdma"
        sed "s/^/    [fwd] /" "$W/fwd2.err"
    fi
    kill "$fsrv" 2>/dev/null
    wait "$fsrv" 2>/dev/null
fi

# forwardperf (only when named; a measurement, not a check): one unchanged
# Python client's sendall of FWD_MIB MiB (default 128) to a Python server
# that reads and discards and answers after the half-close, four ways,
# rounds interleaved: plain TCP between rxe0's and rxe1's addresses; both
# under rsocket's preload (LD_PRELOAD=librspreload.so: RDMA between the
# same addresses); through `rdpipe forward` (listening on rxehost0, the
# target on rxehost1, hops over rdma) with the default protection and with
# --integrity checksum. Emulated RDMA: compare the ratios, not the rates.
if [ -n "$sshd_ok" ] && [ ${#ONLY[@]} -gt 0 ] && want forwardperf; then
    echo "== forwardperf: Python sendall through rdpipe forward against rsocket's preload"
    PRE=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
    FMIB=${FWD_MIB:-128}
    cat >"$W/fsrv.py" <<'PY'
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8)
while True:
    c, _ = s.accept(); n = 0
    while True:
        b = c.recv(1 << 20)
        if not b: break
        n += len(b)
    c.sendall(b"%d\n" % n); c.close()
PY
    cat >"$W/fcli.py" <<'PY'
import os, socket, sys, time
host, port, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = os.urandom(16 << 20); total = mib << 20; left = total
t = time.perf_counter(); c = socket.create_connection((host, port))
while left:
    k = min(left, len(buf)); c.sendall(memoryview(buf)[:k]); left -= k
c.shutdown(socket.SHUT_WR); r = b""
while True:
    b = c.recv(64)
    if not b: break
    r += b
dt = time.perf_counter() - t
assert int(r) == total, r
print("%.1f" % (total / dt / 1e6))
PY
    python3 "$W/fsrv.py" "$RXE_SERVER_IP" 7801 & p1=$!
    LD_PRELOAD=$PRE python3 "$W/fsrv.py" "$RXE_SERVER_IP" 7802 & p2=$!
    python3 "$W/fsrv.py" 127.0.0.1 7803 & p3=$!
    # Ready when each answers a connection (an empty one: it answers 0).
    # up HOST PORT [PRELOAD]
    up() {
        for _ in $(seq 200); do
            LD_PRELOAD=${3:-} python3 -c 'import socket, sys; c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); c.shutdown(1); c.recv(8)' "$1" "$2" 2>/dev/null && return 0
            sleep 0.05
        done
        return 1
    }
    up "$RXE_SERVER_IP" 7801; up "$RXE_SERVER_IP" 7802 "$PRE"; up 127.0.0.1 7803
    # rxe_pkts: packets the two rxe devices sent so far (whether a way's
    # bytes went over RDMA at all).
    rxe_pkts() { cat /sys/class/infiniband/rxe*/ports/1/hw_counters/sent_pkts 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
    for round in 1 2; do
        k0=$(rxe_pkts)
        tcp=$(python3 "$W/fcli.py" "$RXE_SERVER_IP" 7801 "$FMIB" 2>&1)
        k1=$(rxe_pkts)
        rs=$(LD_PRELOAD=$PRE python3 "$W/fcli.py" "$RXE_SERVER_IP" 7802 "$FMIB" 2>&1)
        k2=$(rxe_pkts)
        for integ in encrypt checksum; do
            "${FWD_RUN[@]}" --integrity "$integ" --once rxehost0:0 rxehost1:127.0.0.1:7803 2>"$W/fperf.err" &
            fp=$!
            port=$(fwd_port "$W/fperf.err")
            r=$(python3 "$W/fcli.py" 127.0.0.1 "$port" "$FMIB" 2>&1)
            wait "$fp"
            eval "fw_$integ=\$r"
            grep -q 'rdma (' "$W/fperf.err" || fw_note=" (a hop not over rdma!)"
        done
        k3=$(rxe_pkts)
        echo "    round $round, $FMIB MiB: tcp $tcp MB/s ($((k1 - k0)) rxe packets), rsocket preload $rs MB/s ($((k2 - k1)) rxe packets), rdpipe forward $fw_encrypt MB/s (encrypt), $fw_checksum MB/s (checksum; both: $((k3 - k2)) rxe packets)${fw_note:-}"
    done
    kill "$p1" "$p2" "$p3" 2>/dev/null
    wait "$p1" "$p2" "$p3" 2>/dev/null
fi
