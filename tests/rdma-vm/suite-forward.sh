# Sourced by rdma-suite.sh inside its rdpipe block (sshds on rxe0's and
# rxe1's addresses, ssh config $S/config, $PIPE and $BIN_DIR):
#   forward   `rdpipe forward` over RDMA: listening on rxehost0, the target
#             on rxehost1, both hops rdma (-v): an unchanged Python client's
#             64 MiB sendall, byte-exact, answered with the server's digest
#             after the client's half-close (`--once`), then 10 concurrent
#             connections and Ctrl-C, no agent left.

if [ -n "$sshd_ok" ] && want forward; then
    echo "== forward over RDMA"
    FPY=$(cd "$(dirname "$0")/../integration/forward" && pwd)/fwd.py
    FD=$W/fwd
    mkdir -p "$FD"
    python3 "$FPY" serve sha 7700 "$FD" &
    fsrv=$!
    for _ in $(seq 100); do [ -e "$FD/ready" ] && break; sleep 0.1; done
    RF=(timeout 600 "$PIPE" forward -v -F "$S/config" --remote-bin "$BIN_DIR" --transport rdma --connect-timeout 120)
    # forward_port ERRFILE: the port from its "forwarding ADDR:PORT" line.
    forward_port() {
        local p="" i
        for i in $(seq 1200); do
            p=$(sed -n 's/.*forwarding [0-9.]*:\([0-9]*\) .*/\1/p' "$1" | head -n1)
            [ -n "$p" ] && break
            sleep 0.1
        done
        echo "$p"
    }
    "${RF[@]}" --once rxehost0:0 rxehost1:127.0.0.1:7700 2>"$W/fwd1.err" &
    fpid=$!
    port=$(forward_port "$W/fwd1.err")
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
    "${RF[@]}" rxehost0:0 rxehost1:127.0.0.1:7700 2>"$W/fwd2.err" &
    fpid=$!
    port=$(forward_port "$W/fwd2.err")
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
