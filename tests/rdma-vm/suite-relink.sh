# Sourced by rdma-suite.sh inside its rdpipe block (after suite-fanout.sh, whose
# "${RF[@]}" it uses):
#   relink    a --to chain over RDMA whose middle relay's agent is SIGKILLed
#             mid-stream: the relay before it re-links straight to the sink
#             after it (the re-linked hop over TCP), every live sink
#             byte-exact, the dead one reported, --min-ok 2 succeeds.

if [ -n "$sshd_ok" ] && want relink; then
    echo "== re-link around a dead relay (RDMA hops, the re-linked one over TCP)"
    RIN=$W/relink.in GO=$W/relink.go
    head -c $((48 * CHUNK)) /dev/urandom >"$RIN"
    chmod 644 "$RIN"
    rm -f "$GO"
    sum=$(sha256sum <"$RIN" | cut -d' ' -f1)
    # The last sink holds its input until $GO exists: the chain backs up behind it.
    "${RF[@]}" --min-ok 2 "rxehost1:< $RIN" --to "rxehost0:> $W/rlA" --to "rxehost1:> $W/rlB" \
        --to "rxehost0:while [ ! -e $GO ]; do sleep 0.05; done; cat > $W/rlC" \
        </dev/null 2>"$W/rl.err" &
    rp=$!
    # Readiness: the middle sink's temporary file holds 3 MiB (the stream is
    # mid-way: it cannot end while the last sink holds it).
    victim=
    for _ in $(seq 1 3000); do
        held=$(find "$W" -maxdepth 1 -name '.rlB*' -size +3M 2>/dev/null | head -n1)
        [ -n "$held" ] && victim=$(pgrep -f -- "--sink.*--write $W/rlB" | head -n1)
        [ -n "$victim" ] && break
        sleep 0.1
    done
    ok=1
    if [ -z "$victim" ]; then
        ok=; echo "    the middle sink never held 3 MiB"
    else
        kill -9 "$victim"
    fi
    touch "$GO"
    wait "$rp"
    rc=$?
    [ "$rc" = 0 ] || { ok=; echo "    rdpipe exit $rc"; }
    for f in rlA rlC; do
        got=$(sha256sum <"$W/$f" 2>/dev/null | cut -d' ' -f1) || got=missing
        echo "    $f: sha256 $got (source $sum)"
        [ "$got" = "$sum" ] || { ok=; echo "    $f differs from the source"; }
    done
    grep -q '^rdpipe: sink \[2\] rxehost0: ok: .*relayed to \[4\] rxehost0 (re-linked around \[3\] rxehost1)$' "$W/rl.err" \
        || { ok=; echo "    no re-linked relay line"; }
    grep -q '^rdpipe: sink \[4\] rxehost0: ok: .* over tcp, re-linked at byte [0-9]*, [a-z]* verified' "$W/rl.err" \
        || { ok=; echo "    no re-linked sink line"; }
    if pgrep -f -- '--agent' >/dev/null; then ok=; echo "    agents left: $(pgrep -af -- '--agent')"; fi
    if [ -n "$ok" ]; then
        pass "relink: $(stat -c %s "$RIN") bytes, relay killed mid-stream, $(grep -o 're-linked at byte [0-9]*' "$W/rl.err" | head -n1), both live sinks byte-exact"
    else
        fail "relink: re-link around a dead relay over rdma"
        sed "s/^/    [rl] /" "$W/rl.err"
    fi
    rm -f "$W"/rlA "$W"/rlB "$W"/.rlB* "$W"/rlC "$RIN" "$GO"
fi
