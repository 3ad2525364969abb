# Sourced by rdma-suite.sh inside its rdpipe block (sshds on rxe0's and rxe1's
# addresses, ssh config $S/config, $PIPE and $BIN_DIR):
#   gather    many sources into one (`--from`) over RDMA: two sources on
#             rxehost1, the sink on rxehost0, every source's hop rdma (-v):
#             a line merge (every line of both sources once, whole, in each
#             source's order, tagged), and --each into one file per source,
#             each byte-exact.

if [ -n "$sshd_ok" ] && want gather; then
    echo "== gather (--from) over RDMA"
    RG=(timeout 600 "$PIPE" -v -F "$S/config" --remote-bin "$BIN_DIR" --transport rdma --connect-timeout 120)
    # Line merge: two sources of numbered lines, tagged by index (one host).
    "${RG[@]}" --tag --from "rxehost1:seq 1 200000" --from "rxehost1:seq 200001 400000" \
        "rxehost0:> $W/gath.out" </dev/null 2>"$W/gath.err"
    rc=$? ok=1
    [ "$rc" = 0 ] || { ok=; echo "    rdpipe exit $rc"; }
    for k in 1 2; do
        lo=$(( (k - 1) * 200000 + 1 )) hi=$(( k * 200000 ))
        got=$(grep "^rxehost1\[$k\]: " "$W/gath.out" | cut -d' ' -f2 | sha256sum | cut -d' ' -f1)
        want=$(seq "$lo" "$hi" | sha256sum | cut -d' ' -f1)
        if [ "$got" != "$want" ]; then
            ok=; echo "    source $k's lines are not all there, whole and in order"
            grep -m3 "^rxehost1\[$k\]: " "$W/gath.out" | sed 's/^/      /'
        fi
    done
    n=$(wc -l <"$W/gath.out")
    [ "$n" = 400000 ] || { ok=; echo "    $n lines, 400000 expected"; }
    r=$(grep -c -- '\] rxehost1 -> \[[0-9]\] rxehost0: rdma (' "$W/gath.err")
    [ "$r" = 2 ] || { ok=; echo "    $r of 2 source hops report rdma"; }
    if [ -n "$ok" ]; then
        pass "gather (line merge): 2 sources on rxe1 into rxe0 over rdma, 400000 lines whole, in order, tagged"
    else
        fail "gather: line merge over rdma"
        sed "s/^/    [gath] /" "$W/gath.err"
    fi
    # --each: each source's bytes into a file of its own.
    GIN=$W/gath.in
    head -c $((24 * CHUNK + 333)) /dev/urandom >"$GIN"
    chmod 644 "$GIN"
    sum=$(sha256sum <"$GIN" | cut -d' ' -f1)
    rm -f "$W"/each.*
    "${RG[@]}" --each --from "rxehost1:< $GIN" --from "rxehost1:cat $GIN" \
        "rxehost0:> $W/each.%i" </dev/null 2>"$W/each.err"
    rc=$? ok=1
    [ "$rc" = 0 ] || { ok=; echo "    rdpipe exit $rc"; }
    for k in 1 2; do
        got=$(sha256sum <"$W/each.$k" 2>/dev/null | cut -d' ' -f1) || got=missing
        [ "$got" = "$sum" ] || { ok=; echo "    each.$k: sha256 $got, source $sum"; }
    done
    r=$(grep -c '^rdpipe: source [12] .*: ok: .* over rdma' "$W/each.err")
    [ "$r" = 2 ] || { ok=; echo "    $r of 2 source lines say ok over rdma"; }
    if pgrep -f -- '--agent' >/dev/null; then ok=; echo "    agents left: $(pgrep -af -- '--agent')"; fi
    if [ -n "$ok" ]; then
        pass "gather (--each): 2 sources on rxe1 into a file each on rxe0 over rdma, byte-exact"
    else
        fail "gather: --each over rdma"
        sed "s/^/    [each] /" "$W/each.err"
    fi
fi
