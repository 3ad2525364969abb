# Sourced by rdma-suite.sh inside its rdpipe block (sshds on rxe0's and
# rxe1's addresses, ssh config $S/config, $PIPE, $BIN_DIR, check_pipe):
#   reattach  the ssh master to rxehost1 SIGKILLed while a 96 MiB stream
#             flows rxehost1 -> rxehost0 over RDMA: rdpipe starts a new
#             master and re-attaches to the agent, which kept its command
#             and its RDMA hop; exit 0, byte-exact, every hop rdma, one
#             re-attach, no agent left.

if [ -n "$sshd_ok" ] && want reattach; then
    echo "== reattach: the ssh session to an RDMA host lost mid-stream"
    RAIN=$W/reattach.in
    head -c $((96 << 20)) /dev/urandom >"$RAIN"
    "${RP[@]}" --rate-limit 24M "rxehost1:cat" "rxehost0:cat" <"$RAIN" >"$W/reattach.out" 2>"$W/reattach.err" &
    rapid=$!
    # Mid-stream: data has reached rdpipe's stdout.
    for _ in $(seq 1200); do
        [ "$(stat -c %s "$W/reattach.out" 2>/dev/null || echo 0)" -gt $((4 << 20)) ] && break
        sleep 0.1
    done
    ra_at=$(stat -c %s "$W/reattach.out" 2>/dev/null || echo 0)
    pkill -KILL -f -- "^ssh .* -M -S .* -- rxehost1\$"
    wait "$rapid"; rarc=$?
    check_pipe reattach 3 "$RAIN" "$W/reattach.out" "$rarc"
    if grep -q "rxehost1 \[1\] 'cat': re-attached after" "$W/reattach.err"; then
        pass "reattach: the master to rxehost1 killed at byte $ra_at; $(grep -o "re-attached after [0-9.]* s" "$W/reattach.err" | head -n1), the RDMA hop kept flowing"
    else
        fail "reattach: no re-attach reported"
        sed "s/^/    [reattach] /" "$W/reattach.err"
    fi
    rm -f "$RAIN" "$W/reattach.out"
fi
