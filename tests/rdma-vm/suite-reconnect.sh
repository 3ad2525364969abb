# Sourced by rdma-suite.sh (uses its xfer helpers, $W, $SEND, $RECV, $KEY):
#   reconnect  an RDMA stream whose link goes down mid-stream: rxe1's netdev
#              (v1) is down for 3 s, the sender's queue pair exhausts its
#              retries and goes to the error state, the hop reconnects (RDMA
#              again when the device is back, else TCP) and resumes at the
#              bytes the receiver holds; the output is byte-exact and both
#              ends report the reconnect with the transport after it.

if want reconnect; then
    echo "== reconnect: rxe1's link down for 3 s in the middle of an RDMA stream"
    RCIN=$W/in.reconnect
    head -c $((24 * CHUNK)) /dev/urandom >"$RCIN"
    chmod 644 "$RCIN"
    rm -f "$W/rc.fifo" "$W/rc.out"
    mkfifo -m 666 "$W/rc.fifo"
    # 24 MiB at 2 MiB/s: about 12 s, so that the stream is still running when
    # the link comes back.
    # --handshake-timeout 60: a loaded host slows the emulated guest a lot.
    timeout 300 "$RECV" -v --reconnect-timeout 60 --handshake-timeout 60 --announce-fd 3 0 "$KEY" "$W/rc.out" \
        3>"$W/rc.fifo" 2>"$W/rc.recv.err" &
    rpid=$!
    port=
    read -r _ port <"$W/rc.fifo" || true
    ok=1
    if [ -z "$port" ]; then
        ok=; echo "    rdrecv announced no port"
    else
        timeout 300 "$SEND" -v --rate-limit 2M --handshake-timeout 60 "$RXE_SERVER_IP" "$port" "$KEY" "$RCIN" \
            2>"$W/rc.send.err" &
        spid=$!
        # Readiness: the receiver's temporary file holds 4 MiB.
        for _ in $(seq 1 600); do
            [ -n "$(find "$W" -maxdepth 1 -name '.rc.out.rdpipe-*' -size +4M 2>/dev/null)" ] && break
            sleep 0.1
        done
        ip link set v1 down
        sleep 3
        ip link set v1 up
        # Taking v1 down dropped the harness's route and neighbour entries
        # through it (guest/stage2.sh); put them back.
        ip route replace 10.77.0.1 dev v1 src 10.77.0.2 table 77
        ip neigh replace 10.77.0.1 lladdr "$(cat /sys/class/net/v0/address)" dev v1 nud permanent
        # rxe1 comes back ACTIVE with its GID once the link is up.
        wait_for 30 sh -c "rdma link show rxe1/1 | grep -q 'state ACTIVE'" \
            || echo "    rxe1 did not come back ACTIVE"
        wait "$spid"
        src=$?
        wait "$rpid"
        rrc=$?
        [ "$rrc" = 0 ] && [ "$src" = 0 ] || { ok=; echo "    exit codes: rdrecv $rrc, rdsend $src"; }
    fi
    cmp -s "$RCIN" "$W/rc.out" || { ok=; echo "    output differs from input ($(stat -c %s "$W/rc.out" 2>/dev/null) bytes)"; }
    # The loss the sender reports is the RDMA one (a failed work completion):
    # the stream started over RDMA.
    grep -q 'was lost at byte [0-9]* (RDMA: ' "$W/rc.send.err" \
        || { ok=; echo "    rdsend -v reports no lost RDMA connection"; }
    for side in recv send; do
        grep -q 'reconnected at byte [0-9]* after [0-9.]* s, over ' "$W/rc.$side.err" \
            || { ok=; echo "    rd$side -v reports no reconnect"; }
    done
    if [ -n "$ok" ]; then
        pass "reconnect over rdma: $(stat -c %s "$RCIN") bytes byte-exact, $(grep -o 'lost at byte [0-9]* (RDMA: [^)]*)' "$W/rc.send.err" | head -n1), $(grep -o 'reconnected at byte .*' "$W/rc.recv.err" | head -n1)"
    else
        fail "reconnect over rdma: link down for 3 s mid-stream"
        show rc
    fi
    rm -f "$RCIN" "$W/rc.out" "$W/rc.fifo"
fi
