# Sourced by rdma-suite.sh (uses its xfer helpers, $W, $SEND, $RECV, $KEY):
#   reconnect  an RDMA stream whose path fails mid-stream resumes byte-exact,
#              both ends reporting the reconnect with the transport after it:
#              drop: every RoCE packet (UDP 4791) dropped by nft for 4 s, a
#                    path that fails silently (no link event, no error from
#                    the device): the queue pairs run out of retries (ACK
#                    timeout 0.27 s x 7 tries, crates/verbs/src/cm.rs)
#              down: rxe1's netdev (v1) down for 3 s: sends fail at once.
#              stall: the receiver drops every credit after its 4th
#                    (RDPIPE_TEST_LOSE_CREDITS, a test fault in the
#                    receiving half): messages lost without either queue
#                    pair failing, both ends waiting on each other (as
#                    Soft-RoCE sometimes left them after a link flap); each
#                    says so on TCP after 3 s and the hop reconnects.
#              The link-down case runs last (after it rxe1 takes new
#              connections only slowly, see rdma-suite.sh).
#              Before them: the hop's TCP connection reset while the
#              sender's input is quiet (idle_case), or while the receiver
#              is blocked on a reader that stopped (stalled_case), and an RDMA set-up that
#              never completes falls back to TCP on both ends
#              (setup_fallback_case).

# start_recv NAME TIMEOUT ARGS...: rdrecv -v (debug log, in NAME.recv.err)
# into $W/NAME.out with ARGS, under `timeout TIMEOUT`; sets rpid, and port to
# the port it announced (empty when none). RECV_ENV: NAME=VALUE for it.
# --handshake-timeout 60 on every end: a loaded host slows the emulated guest
# a lot. Debug logs on both ends: a failure shows where each one was.
start_recv() {
    local name=$1 limit=$2 fifo=$W/$1.fifo
    shift 2
    rm -f "$fifo" "$W/$name.out"
    mkfifo -m 666 "$fifo"
    env ${RECV_ENV:-} RUST_LOG=debug timeout "$limit" "$RECV" -v --handshake-timeout 60 "$@" \
        --announce-fd 3 0 "$KEY" "$W/$name.out" 3>"$fifo" 2>"$W/$name.recv.err" &
    rpid=$!
    port=
    read -r _ port <"$fifo" || true
    rm -f "$fifo"
}

# wait_ends: waits for rdsend ($spid) and rdrecv ($rpid); clears ok unless
# both exit 0.
wait_ends() {
    local src rrc
    wait "$spid"
    src=$?
    wait "$rpid"
    rrc=$?
    [ "$rrc" = 0 ] && [ "$src" = 0 ] || { ok=; echo "    exit codes: rdrecv $rrc, rdsend $src"; }
}

# reconnect_case NAME HOW: one stream of 24 MiB at 2 MiB/s (about 12 s, so
# that it still runs when the path comes back), the path failing once the
# receiver holds 4 MiB.
reconnect_case() {
    local name=$1 how=$2 rpid spid port ok renv=
    local in=$W/in.$name out=$W/$name.out
    head -c $((24 * CHUNK)) /dev/urandom >"$in"
    chmod 644 "$in"
    [ "$how" = stall ] && renv=RDPIPE_TEST_LOSE_CREDITS=4
    RECV_ENV=$renv start_recv "$name" 300 --reconnect-timeout 60
    ok=1
    if [ -z "$port" ]; then
        ok=; echo "    rdrecv announced no port"
    else
        RUST_LOG=debug timeout 300 "$SEND" ${RC_SEND_V:--v} --rate-limit 2M --handshake-timeout 60 "$RXE_SERVER_IP" "$port" "$KEY" "$in" \
            2>"$W/$name.send.err" &
        spid=$!
        # Readiness: the receiver's temporary file holds 4 MiB.
        for _ in $(seq 1 600); do
            [ -n "$(find "$W" -maxdepth 1 -name ".$name.out.rdpipe-*" -size +4M 2>/dev/null)" ] && break
            sleep 0.1
        done
        case $how in
        stall) ;; # the receiver drops its credits after the 4th by itself
        drop)
            nft -f - <<<$'table ip rdreconnect {\n chain in {\n  type filter hook input priority 0;\n  udp dport 4791 drop\n }\n}'
            sleep "${RC_DROP_S:-4}"
            nft delete table ip rdreconnect
            ;;
        down)
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
            ;;
        esac
        wait_ends
    fi
    cmp -s "$in" "$out" || { ok=; echo "    output differs from input ($(stat -c %s "$out" 2>/dev/null) bytes)"; }
    # The loss the sender reports is the RDMA one (a failed work completion):
    # the stream started over RDMA.
    grep -q 'was lost at byte [0-9]* (.*RDMA' "$W/$name.send.err" \
        || { ok=; echo "    rdsend -v reports no lost RDMA connection"; }
    # The stall is told apart from a failed queue pair: at least one end
    # (the first to wait) names it.
    if [ "$how" = stall ]; then
        grep -q 'RDMA connection stalled: both ends waited' "$W/$name.recv.err" "$W/$name.send.err" \
            || { ok=; echo "    neither end reports the stall"; }
    fi
    for side in recv send; do
        grep -q 'reconnected at byte [0-9]* after [0-9.]* s, over ' "$W/$name.$side.err" \
            || { ok=; echo "    rd$side -v reports no reconnect"; }
    done
    if [ -n "$ok" ]; then
        pass "reconnect over rdma ($how): $(stat -c %s "$in") bytes byte-exact, $(grep -o 'lost at byte [0-9]* (.*RDMA[^)]*)' "$W/$name.send.err" | head -n1), $(grep -o 'reconnected at byte .*' "$W/$name.recv.err" | head -n1)"
    else
        fail "reconnect over rdma ($how): the path failing mid-stream"
        show "$name"
    fi
    rm -f "$in" "$out"
}

# setup_fallback_case: every RoCE packet dropped while the RDMA connection is
# set up, so the sender's connect never completes. The sender decides: after
# its set-up time (30 s) it declines on TCP and both ends, being `auto`, go on
# over TCP, byte-exact. (The receiver waits longer than the sender for that
# word: it once gave up on its own first and failed the run while the sender
# fell back.)
setup_fallback_case() {
    local rpid spid port ok=1
    local in=$W/in.sf out=$W/sf.out
    head -c $((3 * CHUNK + 17)) /dev/urandom >"$in"
    chmod 644 "$in"
    nft -f - <<<$'table ip rdsetupdrop {\n chain in {\n  type filter hook input priority 0;\n  udp dport 4791 drop\n }\n}'
    start_recv sf 120
    if [ -z "$port" ]; then
        ok=; echo "    rdrecv announced no port"
    else
        RUST_LOG=debug timeout 120 "$SEND" -v --handshake-timeout 60 "$RXE_SERVER_IP" "$port" "$KEY" "$in" \
            2>"$W/sf.send.err" &
        spid=$!
        wait_ends
    fi
    nft delete table ip rdsetupdrop
    cmp -s "$in" "$out" || { ok=; echo "    output differs from input"; }
    for side in recv send; do
        grep -q 'falling back to TCP' "$W/sf.$side.err" \
            || { ok=; echo "    rd$side reports no fallback to TCP"; }
    done
    if [ -n "$ok" ]; then
        pass "an RDMA set-up that never completes: both ends fall back to TCP after the sender's set-up time, byte-exact"
    else
        fail "an RDMA set-up that never completes: both ends fall back to TCP"
        show sf
    fi
    rm -f "$in" "$out"
}

# idle_case: the sender's input (a fifo) goes quiet after 1 MiB of an RDMA
# stream, and the hop's TCP connection (beside the RDMA one) is reset
# (`ss -K`) while it is quiet, for longer than both ends' --reconnect-timeout
# (5 s), as the hop from `zfs recv` to rdpipe's stdout is quiet for a whole
# replication. The sender waits on its input and its connection together:
# it notices the loss at once, redials, and the stream resumes (over RDMA:
# the device is fine) and ends byte-exact once the input goes on.
idle_case() {
    local rpid spid port ok=1 tmp
    local in=$W/in.idle out=$W/idle.out feed=$W/idle.feed
    head -c $((2 * CHUNK)) /dev/urandom >"$in"
    rm -f "$feed"
    mkfifo -m 666 "$feed"
    start_recv idle 120 --reconnect-timeout 5
    if [ -z "$port" ]; then
        ok=; echo "    rdrecv announced no port"
    else
        RUST_LOG=debug timeout 120 "$SEND" -v --reconnect-timeout 5 --handshake-timeout 60 "$RXE_SERVER_IP" "$port" "$KEY" \
            <"$feed" 2>"$W/idle.send.err" &
        spid=$!
        exec 5>"$feed"
        head -c "$CHUNK" "$in" >&5
        # Readiness: the receiver's temporary file holds the first MiB.
        tmp=
        for _ in $(seq 1 600); do
            tmp=$(find "$W" -maxdepth 1 -name ".idle.out.rdpipe-*" -size +1023k 2>/dev/null | head -n1)
            [ -n "$tmp" ] && break
            sleep 0.1
        done
        [ -n "$tmp" ] || { ok=; echo "    the first MiB did not arrive"; }
        ss -K -tnH state established "( sport = :$port or dport = :$port )" >/dev/null \
            || { ok=; echo "    ss -K failed"; }
        # Quiet for longer than --reconnect-timeout.
        sleep 8
        tail -c +$((CHUNK + 1)) "$in" >&5
        exec 5>&-
        wait_ends
    fi
    cmp -s "$in" "$out" || { ok=; echo "    output differs from input ($(stat -c %s "$out" 2>/dev/null) bytes)"; }
    grep -q 'rdma' "$W/idle.recv.err" || { ok=; echo "    the stream did not run over RDMA"; }
    for side in recv send; do
        grep -q "reconnected at byte $CHUNK after [0-9.]* s, over rdma" "$W/idle.$side.err" \
            || { ok=; echo "    rd$side -v reports no reconnect at byte $CHUNK over rdma"; }
    done
    if [ -n "$ok" ]; then
        pass "reconnect over rdma (idle sender): the hop's connection reset while the input was quiet for 8 s (--reconnect-timeout 5): $(grep -o 'reconnected at byte .*' "$W/idle.send.err" | head -n1), byte-exact"
    else
        fail "reconnect over rdma (idle sender): the hop's connection reset while the input was quiet"
        show idle
    fi
    rm -f "$in" "$out" "$feed"
}

# blocked_on_pipe PID: whether a thread of PID sleeps writing into a pipe.
blocked_on_pipe() {
    grep -qs pipe_write /proc/"$1"/task/*/wchan
}

# has_bytes FILE N: whether FILE holds N bytes or more.
has_bytes() {
    [ "$(stat -c %s "$1" 2>/dev/null || echo 0)" -ge "$2" ]
}

# stalled_case: rdrecv writes to its stdout, a pipe whose reader (`cat`) is
# stopped after 4 MiB, as `zfs recv` stops reading while it commits; once
# rdrecv is blocked writing into it, the hop's TCP connection is reset
# (`ss -K`) and the stall lasts 25 s, longer than both ends'
# --reconnect-timeout (5 s) and --handshake-timeout (15 s) together. The
# sender notices the loss at once (its RDMA connection polls the TCP one)
# and dials; rdrecv's acceptor authenticates that connection and sends the
# hold while its stream loop is blocked, so the sender waits for the
# request; once the reader goes on, rdrecv finds its RDMA connection gone,
# asks on the held connection and the stream resumes over RDMA, byte-exact.
stalled_case() {
    local rpid spid cpid rp port fifo=$W/stl.fifo pipe=$W/stl.pipe ok=1
    local in=$W/in.stl out=$W/stl.out
    head -c $((32 * CHUNK)) /dev/urandom >"$in"
    rm -f "$fifo" "$pipe" "$out"
    mkfifo -m 666 "$fifo" "$pipe"
    cat "$pipe" >"$out" &
    cpid=$!
    RUST_LOG=debug timeout 180 "$RECV" -v --reconnect-timeout 5 --handshake-timeout 15 \
        --announce-fd 3 0 "$KEY" 3>"$fifo" 2>"$W/stl.recv.err" >"$pipe" &
    rpid=$!
    port=
    read -r _ port <"$fifo" || true
    rm -f "$fifo"
    if [ -z "$port" ]; then
        ok=; echo "    rdrecv announced no port"
        kill "$cpid" 2>/dev/null
    else
        RUST_LOG=debug timeout 180 "$SEND" -v --reconnect-timeout 5 --handshake-timeout 15 \
            "$RXE_SERVER_IP" "$port" "$KEY" "$in" 2>"$W/stl.send.err" &
        spid=$!
        # Readiness: the reader has 4 MiB, then stops; rdrecv fills the pipe.
        wait_for 120 has_bytes "$out" $((4 * CHUNK)) \
            || { ok=; echo "    the first 4 MiB did not arrive"; }
        kill -STOP "$cpid"
        rp=$(pgrep -P "$rpid" | head -n1)
        wait_for 60 blocked_on_pipe "${rp:-$rpid}" || { ok=; echo "    rdrecv did not block on its output"; }
        ss -K -tnH state established "( sport = :$port or dport = :$port )" >/dev/null \
            || { ok=; echo "    ss -K failed"; }
        sleep 25
        kill -CONT "$cpid"
        wait_ends
        wait "$cpid"
    fi
    cmp -s "$in" "$out" || { ok=; echo "    output differs from input ($(stat -c %s "$out" 2>/dev/null) bytes)"; }
    grep -q 'held: waiting for its request' "$W/stl.send.err" \
        || { ok=; echo "    rdsend was not held (the loss did not come while rdrecv was blocked)"; }
    for side in recv send; do
        grep -q 'reconnected at byte [0-9]* after [0-9.]* s, over rdma' "$W/stl.$side.err" \
            || { ok=; echo "    rd$side -v reports no reconnect over rdma"; }
    done
    if [ -n "$ok" ]; then
        pass "reconnect over rdma (stalled consumer): the hop's connection reset while rdrecv was blocked on its stopped reader for 25 s (--reconnect-timeout 5): held, $(grep -o 'reconnected at byte .*' "$W/stl.send.err" | head -n1), byte-exact"
    else
        fail "reconnect over rdma (stalled consumer): the hop's connection reset while rdrecv was blocked on its output"
        show stl
    fi
    rm -f "$in" "$out" "$pipe"
}

if want reconnect; then
    echo "== reconnect: the hop's connection reset while the sender's input is quiet"
    idle_case
    echo "== reconnect: the hop's connection reset while the receiver's reader is stopped"
    stalled_case
    echo "== reconnect: the RDMA connection set-up never completes (RoCE dropped)"
    setup_fallback_case
    echo "== reconnect: credits lost without a queue pair failing (both ends wait on each other)"
    reconnect_case rcstall stall
    echo "== reconnect: every RoCE packet dropped for 4 s in the middle of an RDMA stream"
    reconnect_case rcdrop drop
    echo "== reconnect: rxe1's link down for 3 s in the middle of an RDMA stream"
    reconnect_case rc down
fi
