# Sourced by rdma-suite.sh inside its rdpipe block (after suite-fanout.sh, whose
# "${RF[@]}" it uses):
#   rdcpbig   (only when named) one big file over RDMA, rxehost1 -> rxehost0:
#             `rdcp F host:DST` against rdpipe's `< F` -> `> DST` (the same
#             transfer without rdcp's entry stream), with the default
#             protection and with --integrity checksum; rounds interleaved,
#             the hop's own rate (its -v line: bytes and seconds, ssh set-up
#             not counted), medians. A measurement: emulated guest, compare
#             the ratio only.

if [ -n "$sshd_ok" ] && [ ${#ONLY[@]} -gt 0 ] && want rdcpbig; then
    echo "== rdcp of one big file over RDMA against the plain transfer"
    CP=$(rdma_bin rdcp) || die "rdcp not built (cargo build --release)"
    BF=$W/rdcp.big
    head -c $((96 * CHUNK + 4321)) /dev/urandom >"$BF"
    chmod 644 "$BF"
    sum=$(sha256sum <"$BF" | cut -d' ' -f1)
    # rate NAME: MB/s of the one rdma hop in NAME's -v output.
    rate() {
        sed -n 's/.*-> .*: rdma (.*, \([0-9]*\) bytes in \([0-9.]*\) s.*/\1 \2/p' "$W/$1.err" |
            awk 'NR == 1 && $2 > 0 { printf "%.1f", $1 / $2 / 1e6 }'
    }
    declare -A rates=()
    big_ok=1
    for round in 1 2 3; do
        for prot in default checksum; do
            extra=()
            [ "$prot" = checksum ] && extra=(--integrity checksum)
            for tool in rdcp rdpipe; do
                name=big-$tool-$prot-$round
                rm -f "$W/big.out"
                if [ "$tool" = rdcp ]; then
                    timeout 600 "$CP" -v -F "$S/config" --remote-bin "$BIN_DIR" --transport rdma \
                        --connect-timeout 120 "${extra[@]}" "rxehost1:$BF" "rxehost0:$W/big.out" \
                        </dev/null 2>"$W/$name.err"
                else
                    "${RF[@]}" "${extra[@]}" "rxehost1:< $BF" "rxehost0:> $W/big.out" \
                        </dev/null 2>"$W/$name.err"
                fi
                rc=$? r=$(rate "$name")
                if [ "$rc" != 0 ] || [ -z "$r" ] || [ "$(sha256sum <"$W/big.out" | cut -d' ' -f1)" != "$sum" ]; then
                    big_ok=
                    echo "    $name: exit $rc, rate '${r}'"
                    sed "s/^/    [$name] /" "$W/$name.err"
                    continue
                fi
                echo "    round $round, $prot: $tool $r MB/s"
                rates[$tool-$prot]+="$r "
            done
        done
    done
    median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    for prot in default checksum; do
        c=$(median "${rates[rdcp-$prot]:-}") p=$(median "${rates[rdpipe-$prot]:-}")
        [ -n "$c" ] && [ -n "$p" ] || { big_ok=; continue; }
        echo "rdcp big file ($prot protection): rdcp $c MB/s, plain transfer $p MB/s, ratio $(awk -v c="$c" -v p="$p" 'BEGIN { printf "%.2f", c / p }')"
    done
    if [ -n "$big_ok" ]; then
        pass "rdcpbig: measured (emulated guest: compare ratios, not absolute speed)"
    else
        fail "rdcpbig: a run failed"
    fi
    rm -f "$BF" "$W/big.out"
fi
