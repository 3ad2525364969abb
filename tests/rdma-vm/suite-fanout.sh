# Sourced by rdma-suite.sh inside its rdpipe block (sshds on rxe0's and rxe1's
# addresses, ssh config $S/config, $PIPE and $BIN_DIR):
#   fanout    a --to chain relay over RDMA between the rxe "hosts", byte-exact
#             on every sink, -v naming rdma for every hop: with the defaults
#             (encrypted on AES CPUs, re-linking on: the relays copy), and with
#             --integrity checksum --replay-window 0, where every relayed hop is
#             a zero-copy relay; the relay-only segment (rxehost1:'< f' rxehost0:
#             rxehost1:'> g') over RDMA with --integrity checksum, zero-copy
#             (--replay-window 0: a relay that keeps a replay window copies,
#             and its hops reconnect), and again by copy (RDPIPE_RELAY_COPY=1).
#   relaycpu  (only when named) the relay host's CPU seconds per GB: the relay-only agent
#             zero-copy (--replay-window 0) and by copy (RDPIPE_RELAY_COPY=1), an agent passing the
#             stream through `cat` (agent + cat), as the agent reports them
#             (USAGE, at -v and in --json), and a standalone `rdrecv | rdsend`
#             (bash `times`), all over the same two RDMA hops
#             (rxe1 -> rxe0 -> rxe1). Emulated guest: compare ratios only.
# ("${RP[@]}" above has the default 30 s agent start-up; these use 120 s.)

# --connect-timeout 120: under TCG on a loaded host an agent can take more than
# the default 30 s to say HELLO.
RF=(timeout 600 "$PIPE" -v -F "$S/config" --remote-bin "$BIN_DIR" --transport rdma --connect-timeout 120)
# Where a relay can forward zero-copy: --integrity checksum (a keyed receiver
# checks and writes a private copy of each chunk, never the ring slot the fabric
# can still write into; and an encrypting relay re-seals for the next hop), and
# for a --to chain no replay window (it records what the relay pipe carries).
RZ=("${RF[@]}" --integrity checksum)

# check_hops NAME N: N '-> ...: rdma (' hop lines in NAME's -v, no agent left.
check_hops() {
    local name=$1 want=$2 n
    n=$(grep -c -- '-> .*: rdma (' "$W/$name.err")
    [ "$n" = "$want" ] || { echo "    $n of $want hops report rdma"; return 1; }
    if pgrep -f -- '--agent' >/dev/null; then echo "    agents left: $(pgrep -af -- '--agent')"; return 1; fi
}

if [ -n "$sshd_ok" ] && want fanout; then
    echo "== fan-out chain relay and a relay-only segment over RDMA"
    FIN=$W/fan.in
    head -c $((32 * CHUNK + 77)) /dev/urandom >"$FIN"
    chmod 644 "$FIN"
    sum=$(sha256sum <"$FIN" | cut -d' ' -f1)
    # Consecutive sinks alternate hosts, so every hop crosses rxe0 <-> rxe1.
    # The defaults (the relays copy: re-linking records the relay pipe), then
    # zero-copy relays (the two relaying sinks; the source's hop is not relayed).
    for mode in default zero-copy; do
        cmd=("${RF[@]}") want=0
        [ "$mode" = zero-copy ] && cmd=("${RZ[@]}" --replay-window 0) want=2
        rm -f "$W"/fanA "$W"/fanB "$W"/fanC
        "${cmd[@]}" "rxehost1:< $FIN" --to "rxehost0:> $W/fanA" --to "rxehost1:> $W/fanB" \
            --to "rxehost0:cat > $W/fanC" </dev/null 2>"$W/fan1.err"
        rc=$? ok=1
        [ "$rc" = 0 ] || { ok=; echo "    rdpipe exit $rc"; }
        for f in fanA fanB fanC; do
            got=$(sha256sum <"$W/$f" 2>/dev/null | cut -d' ' -f1) || got=missing
            echo "    $f: sha256 $got (source $sum)"
            [ "$got" = "$sum" ] || { ok=; echo "    $f differs from the source"; }
        done
        check_hops fan1 3 || ok=
        [ "$(grep -c '^rdpipe: sink \[[0-9]\] rxehost[01]: ok: .* over rdma' "$W/fan1.err")" = 3 ] \
            || { ok=; echo "    not every sink line says ok over rdma"; }
        zc=$(grep -c -- '-> .*: rdma ([^)]*zero-copy relay)' "$W/fan1.err")
        [ "$zc" = "$want" ] || { ok=; echo "    $zc hops say zero-copy relay, $want expected"; }
        if [ -n "$ok" ]; then
            pass "fanout ($mode): $(stat -c %s "$FIN") bytes to 3 sinks by chain relay, byte-exact, every hop rdma, $zc zero-copy relay hops"
        else
            fail "fanout: chain relay over rdma, $mode"
            sed "s/^/    [fan1 $mode] /" "$W/fan1.err"
        fi
    done
    # The relay-only segment: rxehost0 forwards, no command, both hops RDMA:
    # zero-copy (a relay forwards from its receive ring only when it keeps no
    # replay window: --replay-window 0), then by copy (reconnecting hops, the
    # default).
    for mode in zero-copy copy; do
        env=() extra=(--replay-window 0)
        [ "$mode" = copy ] && env=(env RDPIPE_RELAY_COPY=1) extra=()
        rm -f "$W/fan2.out"
        "${env[@]}" "${RZ[@]}" "${extra[@]}" "rxehost1:< $FIN" "rxehost0:" "rxehost1:> $W/fan2.out" </dev/null 2>"$W/fan2.err"
        rc=$? ok=1
        [ "$rc" = 0 ] || { ok=; echo "    rdpipe exit $rc"; }
        cmp -s "$FIN" "$W/fan2.out" || { ok=; echo "    output differs from input"; }
        check_hops fan2 2 || ok=
        grep -q "^rdpipe: \[2\] rxehost0: relay only: $(stat -c %s "$FIN") bytes from \[1\] rxehost1 forwarded to \[3\] rxehost1 (the same stream), no command" "$W/fan2.err" \
            || { ok=; echo "    no 'relay only' line"; }
        zc=$(grep -c -- '^rdpipe: \[2\] rxehost0 -> .*: rdma ([^)]*zero-copy relay)' "$W/fan2.err")
        want=1
        [ "$mode" = copy ] && want=0
        [ "$zc" = "$want" ] || { ok=; echo "    $zc hops say zero-copy relay, $want expected"; }
        if [ -n "$ok" ]; then
            pass "fanout: relay-only segment rxehost0: byte-exact over rdma both ways, $mode"
        else
            fail "fanout: relay-only segment over rdma, $mode"
            sed "s/^/    [fan2 $mode] /" "$W/fan2.err"
        fi
    done
    rm -f "$W"/fanA "$W"/fanB "$W"/fanC "$W"/fan2.out "$FIN"
fi

if [ -n "$sshd_ok" ] && [ ${#ONLY[@]} -gt 0 ] && want relaycpu; then
    echo "== relay CPU per GB over RDMA (rxe1 -> rxe0 -> rxe1): relay-only agent, agent + cat, rdrecv | rdsend"
    CIN=$W/cpu.in
    CSIZE=$((128 * CHUNK))
    head -c "$CSIZE" /dev/zero >"$CIN"
    chmod 644 "$CIN"
    # The middle agent reports its own CPU (USAGE, shown at -v as
    # "[2] rxehost0: cpu: agent A s (...), command C s, ..."): A is the agent
    # process (transfers, relay, hashing), C its command (`cat`).
    secs_of() { awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] } printf "%.3f", s }' <<<"$1"; }
    per_gb() { awk -v s="$1" -v b="$CSIZE" 'BEGIN { printf "%.3f", s / (b / 1e9) }'; }
    cpu_ok=1
    declare -A sum=([relay]=0 [copy]=0 [cat]=0 [pipe]=0)
    add() { sum[$1]=$(awk -v a="${sum[$1]}" -v b="$2" 'BEGIN { printf "%.3f", a + b }'); }
    # Two rounds, the cases interleaved (the emulated guest's CPU figures move
    # with the host's load).
    ROUNDS=2
    for round in $(seq "$ROUNDS"); do
        for mid in "" "copy" "cat"; do
            name=cpu${mid:-relay}
            env=()
            [ "$mid" = copy ] && env=(env RDPIPE_RELAY_COPY=1)
            extra=()
            [ -z "$mid" ] && extra=(--replay-window 0)
            "${env[@]}" "${RZ[@]}" "${extra[@]}" --json "$W/$name.json" "rxehost1:< $CIN" "rxehost0:${mid/copy/}" "rxehost1:> /dev/null" </dev/null 2>"$W/$name.err"
            rc=$?
            line=$(grep '^rdpipe: \[2\] rxehost0: cpu: agent ' "$W/$name.err")
            zc=$(grep -c -- '^rdpipe: \[2\] rxehost0 -> .*zero-copy relay)' "$W/$name.err")
            want=0
            [ -z "$mid" ] && want=1
            if [ "$rc" != 0 ] || [ -z "$line" ] || [ "$zc" != "$want" ] || ! grep -q '"agent_cpu"' "$W/$name.json" || ! check_hops "$name" 2; then
                cpu_ok=
                echo "    rdpipe exit $rc; $zc hops zero-copy, $want expected"
                sed "s/^/    [$name] /" "$W/$name.err"
                continue
            fi
            a=$(sed 's/.*cpu: agent \([0-9.]*\) s.*/\1/' <<<"$line")
            c=$(sed 's/.*command \([0-9.]*\) s.*/\1/' <<<"$line")
            add "${mid:-relay}" "$(awk -v a="$a" -v c="$c" 'BEGIN { printf "%.3f", a + c }')"
            echo "    round $round, $name: agent $a s + command $c s CPU for $CSIZE bytes ($line)"
        done
        # The standalone baseline on the same hops: rdsend (rxe1) -> [rdrecv | rdsend]
        # (listening on rxe0's address) -> rdrecv (rxe1's address).
        rm -f "$W/c3.fifo" "$W/c2.fifo" "$W/c2.times"
        mkfifo "$W/c3.fifo" "$W/c2.fifo"
        timeout 300 "$RECV" -v --transport rdma --integrity checksum --announce-fd 3 0 "$KEY" \
            3>"$W/c3.fifo" 2>"$W/c3.err" >/dev/null &
        p3=$!
        read -r _ port3 <"$W/c3.fifo"
        bash -c '"$1" -v --transport rdma --integrity checksum --announce-fd 3 0 "$3" 3>"$4" 2>"$5.recv" \
            | "$2" -v --transport rdma --integrity checksum "$6" "$7" "$3" 2>"$5.send"; times >"$5.times"' \
            _ "$RECV" "$SEND" "$KEY" "$W/c2.fifo" "$W/c2" "$RXE_CLIENT_IP" "$port3" &
        p2=$!
        read -r _ port2 <"$W/c2.fifo"
        timeout 300 "$SEND" -v --transport rdma --integrity checksum "$RXE_SERVER_IP" "$port2" "$KEY" "$CIN" 2>"$W/c1.err"
        rc1=$?
        wait "$p2"
        wait "$p3"
        rc3=$?
        if [ "$rc1" = 0 ] && [ "$rc3" = 0 ] && [ -s "$W/c2.times" ] \
            && grep -q 'over rdma' "$W/c2.recv" && grep -q 'over rdma' "$W/c2.send"; then
            t=$(secs_of "$(tail -n1 "$W/c2.times")")
            add pipe "$t"
            echo "    round $round, rdrecv | rdsend: $t s CPU for $CSIZE bytes"
        else
            cpu_ok=
            echo "    standalone chain: rdsend exit $rc1, last rdrecv exit $rc3"
            for f in c1.err c2.recv c2.send c3.err; do sed "s/^/    [$f] /" "$W/$f"; done
        fi
    done
    for k in relay copy cat pipe; do
        declare "cpu_$k=$(per_gb "$(awk -v s="${sum[$k]}" -v n="$ROUNDS" 'BEGIN { printf "%.3f", s / n }')")"
    done
    if [ -n "$cpu_ok" ]; then
        ratio() { awk -v a="$1" -v b="$cpu_pipe" 'BEGIN { printf "%.2f", a / b }'; }
        echo "relay CPU: relay-only agent zero-copy ${cpu_relay} s/GB, by copy ${cpu_copy} s/GB; agent + cat ${cpu_cat} s/GB; rdrecv | rdsend ${cpu_pipe} s/GB"
        echo "relay CPU ratio to rdrecv | rdsend: relay-only zero-copy $(ratio "$cpu_relay"), by copy $(ratio "$cpu_copy"); agent + cat $(ratio "$cpu_cat")"
        pass "relaycpu measured (emulated guest: compare ratios, not absolute figures)"
    else
        fail "relaycpu: a run failed"
    fi
    rm -f "$CIN"
fi
