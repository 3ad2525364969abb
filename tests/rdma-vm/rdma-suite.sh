#!/bin/bash
# Guest script: end-to-end checks of the RDMA transport on Soft-RoCE.
#   tests/rdma-vm/run-guest.sh tests/rdma-vm/rdma-suite.sh
# Uses the built rdsend/rdrecv (rdma_bin: release if built, else debug;
# RDMA_PIPE_BIN_DIR overrides). The receiver listens on rxe0's address
# (10.77.0.1), the sender's traffic leaves from rxe1 (10.77.0.2).
# Every check prints a PASS or FAIL line; the script exits 1 on any failure.
# Arguments (optional) pick sections: sizes noimm chunks wrongkey token senderkill
# epipe memlock recvkill rdpipe (with rdcp host to host and rdpipe doctor) ratelimit fabric (data-address discovery)
# fanout (a --to chain relay and a relay-only segment over RDMA; tests/rdma-vm/suite-fanout.sh)
# relink (a dead relay of an RDMA chain re-linked around; tests/rdma-vm/suite-relink.sh)
# gather (`--from`: a line merge and --each from rxe1 into rxe0; tests/rdma-vm/suite-gather.sh)
# forward (`rdpipe forward` from rxe0 to rxe1 over RDMA: Python sendall, concurrent connections; tests/rdma-vm/suite-forward.sh)
# reattach (the ssh session to an RDMA host lost mid-stream, re-attached; tests/rdma-vm/suite-reattach.sh)
# reconnect (an RDMA hop whose link goes down mid-stream resumes; tests/rdma-vm/suite-reconnect.sh)
# compress (--compress over RDMA under each protection)
# perf (default: all), and `ring`, `syscalls`, `relaycpu`, `rdcpbig` (tests/rdma-vm/suite-rdcp.sh) and `forwardperf` (tests/rdma-vm/suite-forward.sh), only when named
# (measurements, not checks: --slots 2 / 4 / 8; system calls per chunk; the relay
# host's CPU s/GB against rdrecv | rdsend).
# Readiness: rdrecv --announce-fd writes its port into a FIFO, which this
# script reads (no sleeps).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rdma_vm_require

SEND=$(rdma_bin rdsend) || die "rdsend not built (cargo build --release)"
RECV=$(rdma_bin rdrecv) || die "rdrecv not built (cargo build --release)"
CHUNK=1048576
KEY=suite-key-$$
W=$(mktemp -d /tmp/rdsuite.XXXXXX)
chmod 777 "$W"
FAILS=0 PASSES=0
ONLY=("$@")

# want SECTION: whether SECTION was asked for (all are, without arguments).
want() {
    [ ${#ONLY[@]} = 0 ] && return 0
    local o
    for o in "${ONLY[@]}"; do [ "$o" = "$1" ] && return 0; done
    return 1
}

pass() { echo "PASS: $*"; PASSES=$((PASSES + 1)); }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
# show NAME: the stderr of both tools of transfer NAME, indented.
show() { sed "s/^/    [$1 recv] /" "$W/$1.recv.err"; sed "s/^/    [$1 send] /" "$W/$1.send.err"; }

echo "== $(basename "$SEND") and $(basename "$RECV") from $(dirname "$SEND")"
ibv_devices

# xfer NAME INPUT "RECV_PREFIX" "RECV_ARGS" "SEND_PREFIX" "SEND_ARGS" [OUTPUT]
# Runs one transfer: rdrecv (output OUTPUT, default $W/NAME.out) and rdsend of
# INPUT. A prefix is a command put in front of the tool (env VAR=1, as_user).
# Sets RRC/SRC.
xfer() {
    local name=$1 input=$2 rpre=$3 rargs=$4 spre=$5 sargs=$6 out=${7:-$W/$1.out} port rpid
    rm -f "$W/$name.fifo" "$W/$name.out"
    mkfifo -m 666 "$W/$name.fifo" # rdtest reopens it through /proc/self/fd/3
    # shellcheck disable=SC2086
    $rpre timeout 300 "$RECV" -v $rargs --announce-fd 3 0 "$KEY" "$out" \
        3>"$W/$name.fifo" 2>"$W/$name.recv.err" &
    rpid=$!
    port=
    read -r _ port <"$W/$name.fifo" || true
    if [ -z "$port" ]; then
        wait "$rpid"
        RRC=$? SRC=255
        : >"$W/$name.send.err"
        echo "    rdrecv announced no port (exit $RRC)"
        return
    fi
    # shellcheck disable=SC2086
    $spre timeout 300 "$SEND" -v $sargs "$RXE_SERVER_IP" "$port" "$KEY" "$input" \
        2>"$W/$name.send.err"
    SRC=$?
    wait "$rpid"
    RRC=$?
}

# check_xfer NAME INPUT WANT_RECV_TRANSPORT WANT_SEND_TRANSPORT: exit codes 0,
# byte-exact output, and the -v lines name the expected transports.
check_xfer() {
    local name=$1 input=$2 wr=$3 ws=$4 ok=1
    [ "$RRC" = 0 ] && [ "$SRC" = 0 ] || { ok=; echo "    exit codes: rdrecv $RRC, rdsend $SRC"; }
    cmp -s "$input" "$W/$name.out" || { ok=; echo "    output differs from input ($(stat -c %s "$W/$name.out" 2>/dev/null) bytes)"; }
    grep -qF "over $wr" "$W/$name.recv.err" || { ok=; echo "    rdrecv -v does not say 'over $wr'"; }
    grep -qF "over $ws" "$W/$name.send.err" || { ok=; echo "    rdsend -v does not say 'over $ws'"; }
    if [ -n "$ok" ]; then
        pass "$name: $(stat -c %s "$input") bytes byte-exact, $(grep -o 'over [^)]*)' "$W/$name.recv.err" | head -n1)"
    else
        fail "$name"
        show "$name"
    fi
    rm -f "$W/$name.out"
}

# Whether the temporary file that rdrecv writes beside $W/NAME (published as
# NAME only once the stream verified) has data yet: the readiness signal of the
# kill tests.
tmp_has_data() {
    [ -n "$(find "$W" -maxdepth 1 -name ".$1.rdpipe-*" -size +0 2>/dev/null)" ]
}

echo "== test data"
for n in 0 1 $((CHUNK - 1)) $CHUNK $((CHUNK + 1)) $((64 * CHUNK)); do
    head -c "$n" /dev/urandom >"$W/in.$n"
done
chmod 644 "$W"/in.*

if want sizes; then
echo "== sizes, --transport rdma and auto, WRITE_WITH_IMM"
for mode in rdma auto; do
    for n in 0 1 $((CHUNK - 1)) $CHUNK $((CHUNK + 1)) $((64 * CHUNK)); do
        xfer "$mode-$n" "$W/in.$n" "" "--transport $mode" "" "--transport $mode"
        check_xfer "$mode-$n" "$W/in.$n" "rdma (rxe0, write-with-imm)" "rdma (rxe1, write-with-imm)"
    done
done

fi

if want noimm; then
echo "== forced WRITE + SEND (RDPIPE_RDMA_NO_IMM=1)"
for n in 1 $((CHUNK + 1)) $((64 * CHUNK)); do
    xfer "noimm-send-$n" "$W/in.$n" "" "--transport rdma" "env RDPIPE_RDMA_NO_IMM=1" "--transport rdma"
    check_xfer "noimm-send-$n" "$W/in.$n" "rdma (rxe0, write+send)" "rdma (rxe1, write+send)"
done
n=$((CHUNK + 1))
xfer "noimm-recv-$n" "$W/in.$n" "env RDPIPE_RDMA_NO_IMM=1" "--transport auto" "" "--transport auto"
check_xfer "noimm-recv-$n" "$W/in.$n" "rdma (rxe0, write+send)" "rdma (rxe1, write+send)"

fi

if want integrity; then
echo "== integrity modes over RDMA: --encrypt (AES-256-GCM, opened in a private copy of each slot) and checksum"
for n in 1 $((CHUNK - 1)) $((CHUNK + 1)) $((64 * CHUNK)); do
    xfer "encrypt-$n" "$W/in.$n" "" "--transport rdma --encrypt" "" "--transport rdma"
    check_xfer "encrypt-$n" "$W/in.$n" "rdma (rxe0, write-with-imm)" "rdma (rxe1, write-with-imm)"
    grep -q "integrity encrypt" "$W/encrypt-$n.recv.err" || fail "encrypt-$n: -v does not say 'integrity encrypt'"
done
n=$((CHUNK + 1))
xfer "encrypt-noimm-$n" "$W/in.$n" "" "--transport rdma --encrypt" "env RDPIPE_RDMA_NO_IMM=1" "--transport rdma --encrypt"
check_xfer "encrypt-noimm-$n" "$W/in.$n" "rdma (rxe0, write+send)" "rdma (rxe1, write+send)"
xfer "checksum-$n" "$W/in.$((64 * CHUNK))" "" "--transport rdma --integrity checksum" "" "--transport rdma --integrity checksum"
check_xfer "checksum-$n" "$W/in.$((64 * CHUNK))" "rdma (rxe0" "rdma (rxe1"
grep -q "integrity checksum" "$W/checksum-$n.recv.err" || fail "checksum-$n: -v does not say 'integrity checksum'"

fi

if want compress; then
echo "== --compress over RDMA: zstd:3, auto and zstd:1 under every protection, compressible and random stretches"
# 24 MiB: text stretches (compress) between random ones (stored), so that both
# kinds of chunk cross the RDMA ring.
CIN=$W/in.compress
for i in 1 2 3; do
    yes "rdma-pipe compress $i over rdma" | head -c $((5 * CHUNK))
    head -c $((3 * CHUNK)) /dev/urandom
done >"$CIN"
chmod 644 "$CIN"
for spec in "zstd:3 encrypt" "auto mac" "zstd:1 checksum"; do
    read -r mode prot <<<"$spec"
    name=compress-${mode/:/}-$prot
    xfer "$name" "$CIN" "" "--transport rdma --integrity $prot --compress=$mode" "" "--transport rdma --integrity $prot --compress=$mode"
    check_xfer "$name" "$CIN" "rdma (rxe0, write-with-imm)" "rdma (rxe1, write-with-imm)"
    # -v: "rdrecv: compress MODE: RAW bytes as WIRE (RATIOx; ...)": fewer on the wire.
    line=$(grep -m1 '^rdrecv: compress ' "$W/$name.recv.err" || true)
    raw=$(sed -n 's/.*: \([0-9]*\) bytes as \([0-9]*\) .*/\1/p' <<<"$line")
    wire=$(sed -n 's/.*: \([0-9]*\) bytes as \([0-9]*\) .*/\2/p' <<<"$line")
    if [ -n "$raw" ] && [ -n "$wire" ] && [ "$wire" -lt "$raw" ] && [ "$raw" = "$(stat -c %s "$CIN")" ]; then
        pass "$name: rdrecv -v: ${line#rdrecv: }"
    else
        fail "$name: rdrecv -v reports no compressed stream: '${line:-nothing}'"
    fi
done

fi

if want chunks; then
echo "== other chunk sizes and slot counts"
xfer "chunk64k-slots4" "$W/in.$((64 * CHUNK))" "" "--transport rdma --chunk-size 64K --slots 4" "" "--transport rdma --chunk-size 64K"
check_xfer "chunk64k-slots4" "$W/in.$((64 * CHUNK))" "rdma (rxe0" "rdma (rxe1"
xfer "slots1" "$W/in.$((CHUNK + 1))" "" "--transport rdma --slots 1" "" "--transport rdma"
check_xfer "slots1" "$W/in.$((CHUNK + 1))" "rdma (rxe0" "rdma (rxe1"
xfer "setup-log" "$W/in.1" "" "--transport rdma -v" "" "--transport rdma -v"
if [ "$RRC" = 0 ] && [ "$SRC" = 0 ] && grep -q "rdma_cm listener on 10.77.0.1:.* (rxe0)" "$W/setup-log.recv.err" &&
    grep -q "RDMA connection established on rxe1" "$W/setup-log.send.err"; then
    pass "-vv shows the RDMA set-up: $(grep -m1 -o 'rdma_cm listener.*' "$W/setup-log.recv.err")"
else
    fail "-vv set-up log: rdrecv $RRC, rdsend $SRC"
    show setup-log
fi

fi

if want wrongkey; then
echo "== wrong key: the sender fails (exit 3) before any RDMA connection; the receiver keeps waiting"
# Let the previous connection's teardown (rdma_cm DREQ/DREP) finish first.
counter_quiet() {
    local a
    a=$(rxe_counter rxe0 rcvd_pkts)
    sleep 0.5
    [ "$a" = "$(rxe_counter rxe0 rcvd_pkts)" ]
}
wait_for 10 counter_quiet || true
before=$(rxe_counter rxe0 rcvd_pkts)
rm -f "$W/wk.fifo"
mkfifo "$W/wk.fifo"
timeout 10 "$RECV" -vv --transport rdma --announce-fd 3 0 "$KEY" "$W/wk.out" 3>"$W/wk.fifo" 2>"$W/wk.recv.err" &
rpid=$!
read -r _ port <"$W/wk.fifo"
timeout 60 "$SEND" -v --transport rdma "$RXE_SERVER_IP" "$port" "wrong-$KEY" "$W/in.1" 2>"$W/wk.send.err"
SRC=$?
wait "$rpid"
RRC=$?
after=$(rxe_counter rxe0 rcvd_pkts)
# rdrecv drops the unauthenticated peer and goes on waiting until its timeout (124).
if [ "$RRC" = 124 ] && [ "$SRC" = 3 ] && [ "$after" = "$before" ] && [ ! -e "$W/wk.out" ] &&
    grep -q "authentication failed" "$W/wk.recv.err" &&
    ! grep -q "rdma_cm listener" "$W/wk.recv.err"; then
    pass "wrong key: rdsend exit 3, rdrecv kept waiting, no rdma_cm listener opened, rxe0 received no RDMA packet, no output file created"
else
    fail "wrong key: rdrecv $RRC, rdsend $SRC (want 124, 3); rxe0 packets $before -> $after; output $([ -e "$W/wk.out" ] && echo created || echo absent)"
    show wk
fi

fi

if want token; then
echo "== rdma_cm connect request with a wrong token: rejected"
PROBE=$(dirname "$SEND")/examples/rdma_token_probe
if [ -x "$PROBE" ]; then
    rm -f "$W/tok.fifo" "$W/tok.out"
    mkfifo "$W/tok.fifo"
    timeout 60 "$RECV" --transport rdma --announce-fd 3 0 "$KEY" "$W/tok.out" 3>"$W/tok.fifo" 2>"$W/tok.recv.err" &
    rpid=$!
    read -r _ port <"$W/tok.fifo"
    probe=$(timeout 60 "$PROBE" "$RXE_SERVER_IP" "$port" "$KEY" 2>&1)
    prc=$?
    wait "$rpid"
    RRC=$?
    if [ "$prc" = 0 ] && [ "$RRC" != 0 ] && [ ! -e "$W/tok.out" ]; then
        pass "token: ${probe#PROBE: }; rdrecv exit $RRC, no output created"
    else
        fail "token: probe exit $prc ($probe), rdrecv exit $RRC (want non-zero), output $([ -e "$W/tok.out" ] && echo created || echo absent)"
        sed 's/^/    [tok recv] /' "$W/tok.recv.err"
    fi
else
    fail "token: $PROBE not built (cargo build --release --examples)"
fi
fi

if want senderkill; then
echo "== sender killed mid-stream: receiver fails with 'truncated'"
rm -f "$W/kill.fifo" "$W/kill.out"
mkfifo "$W/kill.fifo"
# --reconnect-timeout 5: the receiver waits that long for the sender to come
# back (60 s by default) before it calls the stream truncated.
timeout 120 "$RECV" -v --transport rdma --reconnect-timeout 5 --announce-fd 3 0 "$KEY" "$W/kill.out" 3>"$W/kill.fifo" 2>"$W/kill.recv.err" &
rpid=$!
read -r _ port <"$W/kill.fifo"
{ cat "$W/in.$((CHUNK + 1))"; sleep 60; } | "$SEND" -v --transport rdma "$RXE_SERVER_IP" "$port" "$KEY" 2>"$W/kill.send.err" &
spid=$!
# Readiness: the first bytes have arrived (in the temporary file beside
# kill.out: the output file itself appears only for a verified stream).
if wait_for 60 tmp_has_data kill.out; then
    kill -9 "$spid"
fi
wait "$spid" 2>/dev/null
wait "$rpid"
RRC=$?
if [ "$RRC" != 0 ] && [ "$RRC" != 124 ] && grep -q truncated "$W/kill.recv.err" &&
    [ ! -e "$W/kill.out" ]; then
    pass "sender killed: rdrecv exit $RRC: $(grep -m1 truncated "$W/kill.recv.err"); no output file published"
else
    fail "sender killed: rdrecv exit $RRC (want non-zero with 'truncated')"
    show kill
fi

fi

if want epipe; then
echo "== receiver's output closed (EPIPE): both report the abort"
rm -f "$W/epipe.fifo"
mkfifo "$W/epipe.fifo"
{ timeout 120 "$RECV" --transport rdma --announce-fd 3 0 "$KEY" 3>"$W/epipe.fifo" 2>"$W/epipe.recv.err"; echo $? >"$W/epipe.rrc"; } | head -c 1000 >/dev/null &
ppid=$!
read -r _ port <"$W/epipe.fifo"
timeout 120 "$SEND" --transport rdma "$RXE_SERVER_IP" "$port" "$KEY" "$W/in.$((64 * CHUNK))" 2>"$W/epipe.send.err"
SRC=$?
wait "$ppid"
RRC=$(cat "$W/epipe.rrc")
if [ "$RRC" = 5 ] && [ "$SRC" = 5 ]; then
    pass "EPIPE: both exit 5; rdsend: $(head -n1 "$W/epipe.send.err")"
else
    fail "EPIPE: rdrecv $RRC, rdsend $SRC (want 5, 5)"
    show epipe
fi
fi

if want memlock; then
echo "== unprivileged rdtest, ulimit -l 64 KiB"
n=$((CHUNK + 1))
xfer "memlock-auto" "$W/in.$n" "as_user" "--transport auto" "as_user" "--transport auto"
if [ "$RRC" = 0 ] && [ "$SRC" = 0 ] && cmp -s "$W/in.$n" "$W/memlock-auto.out" &&
    grep -q "cannot pin 2 MiB: ulimit -l is 64 KiB; raise it or use --chunk-size" "$W/memlock-auto.recv.err" &&
    grep -q "falling back to TCP" "$W/memlock-auto.recv.err" &&
    grep -qF "over tcp" "$W/memlock-auto.recv.err" && grep -qF "over tcp" "$W/memlock-auto.send.err"; then
    pass "memlock, auto: $(grep -m1 -o 'warning: .*' "$W/memlock-auto.recv.err"); byte-exact over tcp"
else
    fail "memlock, auto: rdrecv $RRC, rdsend $SRC (want the clear message, TCP fallback, exit 0)"
    show memlock-auto
fi
xfer "memlock-sender" "$W/in.$n" "" "--transport auto" "as_user" "--transport auto"
if [ "$RRC" = 0 ] && [ "$SRC" = 0 ] && cmp -s "$W/in.$n" "$W/memlock-sender.out" &&
    grep -q "cannot pin 2 MiB: ulimit -l is 64 KiB" "$W/memlock-sender.send.err" &&
    grep -qF "over tcp" "$W/memlock-sender.recv.err"; then
    pass "memlock (sender only), auto: sender declines, both fall back to TCP, byte-exact"
else
    fail "memlock (sender only), auto: rdrecv $RRC, rdsend $SRC"
    show memlock-sender
fi
xfer "memlock-rdma" "$W/in.$n" "as_user" "--transport rdma" "as_user" "--transport rdma"
if [ "$RRC" = 7 ] && [ "$SRC" = 7 ] && grep -q "cannot pin 2 MiB: ulimit -l is 64 KiB" "$W/memlock-rdma.recv.err"; then
    pass "memlock, --transport rdma: both exit 7: $(grep -m1 -o 'cannot pin.*' "$W/memlock-rdma.recv.err")"
else
    fail "memlock, --transport rdma: rdrecv $RRC, rdsend $SRC (want 7, 7 and the message)"
    show memlock-rdma
fi

fi

if want recvkill; then
echo "== receiver killed mid-stream: sender fails, no success"
rm -f "$W/rkill.fifo" "$W/rkill.out"
mkfifo "$W/rkill.fifo"
# No timeout wrapper here: the pid killed must be rdrecv's own.
"$RECV" --transport rdma --announce-fd 3 0 "$KEY" "$W/rkill.out" 3>"$W/rkill.fifo" 2>"$W/rkill.recv.err" &
rpid=$!
read -r _ port <"$W/rkill.fifo"
# Endless input: the sender is waiting for credits when the receiver dies.
timeout 120 "$SEND" --transport rdma "$RXE_SERVER_IP" "$port" "$KEY" /dev/zero 2>"$W/rkill.send.err" &
spid=$!
if wait_for 60 tmp_has_data rkill.out; then
    kill -9 "$rpid"
fi
wait "$rpid" 2>/dev/null
wait "$spid"
SRC=$?
if [ "$SRC" != 0 ] && [ "$SRC" != 124 ]; then
    pass "receiver killed: rdsend exit $SRC: $(head -n1 "$W/rkill.send.err")"
else
    fail "receiver killed: rdsend exit $SRC (want non-zero, not a timeout)"
    show rkill
fi
rm -f "$W/rkill.out"

fi

if want rdpipe || want fabric || want fanout || want gather || want forward || want forwardperf || want relaycpu || want relink || want reattach || want rdcpbig; then
echo "== rdpipe over RDMA: two 'hosts' (an sshd on rxe0's and on rxe1's address)"
PIPE=$(rdma_bin rdpipe) || die "rdpipe not built (cargo build --release)"
BIN_DIR=$(dirname "$PIPE")
S=$W/ssh
mkdir -p "$S" /run/sshd
chmod 700 "$S"
ssh-keygen -q -t ed25519 -N '' -f "$S/host_key" && ssh-keygen -q -t ed25519 -N '' -f "$S/id" \
    || die "ssh-keygen failed"
cp "$S/id.pub" "$S/authorized_keys"
sshd_ok=1
SSHD_IPS=("$RXE_SERVER_IP" "$RXE_CLIENT_IP")
# fabric: a "management" address without an RDMA device (on lo, which has no rxe
# device), where ssh reaches rxehost1 as rxehost1m.
MGMT_IP=10.88.0.2
if want fabric; then
    ip addr add "$MGMT_IP/32" dev lo || die "cannot add $MGMT_IP to lo"
    SSHD_IPS+=("$MGMT_IP")
fi
for ip in "${SSHD_IPS[@]}"; do
    cat >"$S/sshd-$ip.conf" <<EOF
ListenAddress $ip
Port 2222
HostKey $S/host_key
AuthorizedKeysFile $S/authorized_keys
PidFile $S/sshd-$ip.pid
StrictModes no
UsePAM no
PermitRootLogin yes
PasswordAuthentication no
KbdInteractiveAuthentication no
EOF
    # sshd returns once it listens (it forks into the background after binding).
    /usr/sbin/sshd -f "$S/sshd-$ip.conf" -E "$S/sshd-$ip.log" \
        || { sshd_ok=; echo "    sshd on $ip failed: $(tail -n2 "$S/sshd-$ip.log")"; }
done
cat >"$S/config" <<EOF
Host rxehost0
  HostName $RXE_SERVER_IP
Host rxehost1
  HostName $RXE_CLIENT_IP
Host rxehost1m
  HostName $MGMT_IP
Host *
  Port 2222
  User root
  IdentityFile $S/id
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  BatchMode yes
  LogLevel ERROR
EOF
RP=(timeout 180 "$PIPE" -v -F "$S/config" --remote-bin "$BIN_DIR" --transport rdma)
# check_pipe NAME HOPS INPUT OUTPUT RC: exit 0, byte-exact, every hop over rdma,
# no agent left behind.
check_pipe() {
    local name=$1 hops=$2 input=$3 out=$4 rc=$5 ok=1 n
    [ "$rc" = 0 ] || { ok=; echo "    rdpipe exit $rc"; }
    cmp -s "$input" "$out" || { ok=; echo "    output differs from input ($(stat -c %s "$out" 2>/dev/null) bytes)"; }
    n=$(grep -c -- '-> .*: rdma (' "$W/$name.err")
    [ "$n" = "$hops" ] || { ok=; echo "    $n of $hops hops report rdma"; }
    if pgrep -f -- '--agent' >/dev/null; then ok=; echo "    agents left: $(pgrep -af -- '--agent')"; fi
    if [ -n "$ok" ]; then
        pass "$name: $(stat -c %s "$input") bytes byte-exact through rdpipe, every hop $(grep -o -- ': rdma ([^)]*)' "$W/$name.err" | head -n1 | sed 's/^: //')"
    else
        fail "$name: rdpipe over rdma"
        sed "s/^/    [$name] /" "$W/$name.err"
    fi
}
PIN=$W/pipe.in
head -c $((8 * CHUNK + 123)) /dev/urandom >"$PIN"
if [ -n "$sshd_ok" ] && want rdpipe; then
    # rxehost1 reads the file and sends it over RDMA to rxehost0, which writes it.
    "${RP[@]}" "rxehost1:< $PIN" "rxehost0:> $W/pipe1.out" </dev/null 2>"$W/pipe1.err"
    check_pipe pipe1 1 "$PIN" "$W/pipe1.out" $?
    # Three hops: rdpipe's stdin -> rxehost1 (cat) -> rxehost0 (cat) -> rdpipe's stdout.
    "${RP[@]}" "rxehost1:cat" "rxehost0:cat" <"$PIN" >"$W/pipe2.out" 2>"$W/pipe2.err"
    check_pipe pipe2 3 "$PIN" "$W/pipe2.out" $?
    # rdcp over RDMA, host to host: a 24 MiB file and a small tree from
    # rxehost1 to rxehost0, byte-exact, the one hop over rdma.
    CP=$(rdma_bin rdcp) || die "rdcp not built (cargo build --release)"
    mkdir -p "$W/cptree/sub" && head -c $((24 * CHUNK)) /dev/urandom >"$W/cptree/big"
    echo small >"$W/cptree/sub/small" && ln -s ../big "$W/cptree/sub/link"
    timeout 180 "$CP" -v -r -F "$S/config" --remote-bin "$BIN_DIR" --transport rdma \
        "rxehost1:$W/cptree" "rxehost0:$W/cpcopy" </dev/null 2>"$W/rdcp.err"
    crc=$?
    if [ "$crc" = 0 ] && diff -r --no-dereference "$W/cptree" "$W/cpcopy" >/dev/null \
        && [ "$(grep -c -- '-> .*: rdma (' "$W/rdcp.err")" = 1 ] && ! pgrep -f -- '--agent' >/dev/null; then
        pass "rdcp -r host to host over rdma: a 24 MiB file and a tree byte-exact, $(grep -o 'Bandwidth .*' "$W/rdcp.err")"
    else
        fail "rdcp -r over rdma (exit $crc)"
        sed 's/^/    [rdcp] /' "$W/rdcp.err"
    fi
    rm -rf "$W/cptree" "$W/cpcopy"
    # rdpipe doctor on both hosts: no problem, every port ACTIVE, and a working
    # RDMA pair (its rate beside the link rate).
    timeout 180 "$PIPE" doctor -F "$S/config" --remote-bin "$BIN_DIR" --size 32M \
        rxehost1 rxehost0 >"$W/doctor.out" 2>"$W/doctor.err"
    drc=$?
    ok=1
    [ "$drc" = 0 ] || { ok=; echo "    rdpipe doctor exit $drc"; }
    n=$(grep -c '^    port [0-9]*: ACTIVE, Ethernet' "$W/doctor.out")
    [ "$n" -ge 2 ] || { ok=; echo "    $n ACTIVE ports reported"; }
    grep -q '^host rxehost0: reachable over ssh' "$W/doctor.out" || ok=
    pair=$(grep '^pair rxehost1 -> rxehost0: ' "$W/doctor.out")
    echo "$pair" | grep -q 'tcp [0-9.]* Gb/s .*; rdma [0-9.]* Gb/s .* over rdma (rxe' || ok=
    grep -q 'FAILED' "$W/doctor.out" && ok=
    if [ -n "$ok" ]; then
        pass "rdpipe doctor: rxehost1 and rxehost0 ACTIVE, no problem; $pair"
    else
        fail "rdpipe doctor rxehost1 rxehost0"
        sed 's/^/    [doctor] /' "$W/doctor.out" "$W/doctor.err"
    fi
elif [ -z "$sshd_ok" ]; then
    fail "rdpipe: the guest's sshd did not start"
fi
if [ -n "$sshd_ok" ] && want fabric; then
    echo "== fabric address discovery: rxehost1m's ssh address $MGMT_IP has no RDMA device"
    # --connect-timeout 120: under TCG on a loaded host an agent can take more
    # than the default 30 s to say HELLO.
    RA=(timeout 300 "$PIPE" -v -F "$S/config" --remote-bin "$BIN_DIR" --transport auto
        --connect-timeout 120)
    # rxehost1m listens; its agent reports 10.77.0.x (rxe0/rxe1), rxehost0's agent
    # shares that subnet: rxehost0 must connect there, over RDMA, not to $MGMT_IP.
    "${RA[@]}" --json "$W/fab1.json" "rxehost0:< $PIN" "rxehost1m:> $W/fab1.out" \
        </dev/null 2>"$W/fab1.err"
    frc=$?
    check_pipe fab1 1 "$PIN" "$W/fab1.out" "$frc"
    if grep -q "\[2\] rxehost1m: data address 10\.77\.0\.[12] for \[1\] rxehost0 (RDMA-capable, instead of $MGMT_IP from ssh)" "$W/fab1.err" \
        && grep -Eq '"data_address_from": *"discovered"' "$W/fab1.json"; then
        pass "fabric: $(grep -o 'data address .*' "$W/fab1.err" | head -n1)"
    else
        fail "fabric: -v or --json does not say the address was discovered"
        sed "s/^/    [fab1] /" "$W/fab1.err" "$W/fab1.json"
    fi
    # The control: with --data-host the management address is used as given, and
    # auto falls back to TCP there (so the RDMA above came from discovery).
    "${RA[@]}" --data-host "rxehost1m=$MGMT_IP" "rxehost0:< $PIN" "rxehost1m:> $W/fab2.out" \
        </dev/null 2>"$W/fab2.err"
    frc=$?
    if [ "$frc" = 0 ] && cmp -s "$PIN" "$W/fab2.out" && grep -q -- '-> .*: tcp' "$W/fab2.err" \
        && ! grep -q 'RDMA-capable, instead of' "$W/fab2.err"; then
        pass "fabric: --data-host rxehost1m=$MGMT_IP is used as given: $(grep -o -- '-> .*: tcp[^,]*' "$W/fab2.err" | head -n1)"
    else
        fail "fabric: --data-host override (exit $frc)"
        sed "s/^/    [fab2] /" "$W/fab2.err"
    fi
    # rdpipe's own ends connect too: stdin -> rxehost1m discovers from this
    # machine's addresses; rxehost0's address is RDMA-capable already.
    "${RA[@]}" "rxehost1m:cat" "rxehost0:cat" <"$PIN" >"$W/fab3.out" 2>"$W/fab3.err"
    check_pipe fab3 3 "$PIN" "$W/fab3.out" $?
    grep -q "\[1\] rxehost1m: data address 10\.77\.0\.[12] for rdpipe (RDMA-capable" "$W/fab3.err" \
        || { fail "fab3: rdpipe's stdin did not discover rxehost1m's RDMA address"; sed "s/^/    [fab3] /" "$W/fab3.err"; }
fi
# fanout, relaycpu: the chain relay and the relay-only segment over RDMA.
. "$(dirname "$0")/suite-fanout.sh"
# gather: many sources into one over RDMA.
. "$(dirname "$0")/suite-gather.sh"
# forward: TCP connections over RDMA hops.
. "$(dirname "$0")/suite-forward.sh"
# relink: a dead relay of an RDMA chain.
. "$(dirname "$0")/suite-relink.sh"
# reattach: the ssh session to an RDMA host lost mid-stream.
. "$(dirname "$0")/suite-reattach.sh"
# rdcpbig: rdcp's rate for one big file against the plain transfer.
. "$(dirname "$0")/suite-rdcp.sh"
for f in "$S"/sshd-*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
rm -f "$W"/pipe*.out "$W/pipe.in"
fi

# The ring depth (whether a deeper ring than two slots helps): only
# when asked for by name. Same input and devices, alternating, best of each.
if [ ${#ONLY[@]} -gt 0 ] && want ring; then
echo "== ring depth: --slots 2 / 4 / 8 at 1 MiB chunks (best of 3, alternating)"
BIG=$W/in.big
head -c $((128 * CHUNK)) /dev/zero >"$BIG"
declare -A best=()
for round in 1 2 3; do
    for slots in 2 4 8; do
        xfer "ring$slots" "$BIG" "" "--transport rdma --slots $slots" "" "--transport rdma --slots $slots" /dev/null
        secs=$(sed -n 's/.*received \([0-9]*\) bytes .* in \([0-9.]*\) s.*/\2/p' "$W/ring$slots.recv.err")
        if [ "$RRC" != 0 ] || [ "$SRC" != 0 ] || [ -z "$secs" ]; then
            fail "ring: --slots $slots"
            show "ring$slots"
            continue
        fi
        mbs=$(awk -v s="$secs" 'BEGIN { printf "%.2f", 128 / s }')
        echo "round $round: --slots $slots: $mbs MB/s"
        best[$slots]=$(awk -v a="${best[$slots]:-0}" -v b="$mbs" 'BEGIN { print (b > a) ? b : a }')
    done
done
echo "ring best: slots 2 ${best[2]:-?} MB/s, 4 ${best[4]:-?} MB/s, 8 ${best[8]:-?} MB/s"
rm -f "$BIG"
fi

# System calls per chunk on each side of a busy RDMA stream (the goal: "no more
# than one read or write per chunk plus at most one wait per chunk"): only when
# asked for by name. A file -> /dev/null at 1 MiB chunks, each side under
# `strace -f -c`; 16 and 256 MiB, so that the difference divided by the 240 extra
# chunks is the per-chunk cost without start-up and teardown (loading the verbs
# libraries alone is hundreds of calls). The tables go to $RDMA_VM_OUT.
if [ ${#ONLY[@]} -gt 0 ] && want syscalls; then
echo "== system calls per 1 MiB chunk over rdma (strace -f -c; 256 MiB minus 16 MiB runs)"
if ! command -v strace >/dev/null; then
    fail "syscalls: strace is not installed (apt-get install strace on the host: the guest runs the host's /)"
else
for mib in 16 256; do
    head -c $((mib * CHUNK)) /dev/zero >"$W/in.sc$mib"
    chmod 644 "$W/in.sc$mib"
    xfer "sc$mib" "$W/in.sc$mib" "strace -f -c -o $W/sc$mib.recv.strace" "--transport rdma" \
        "strace -f -c -o $W/sc$mib.send.strace" "--transport rdma" /dev/null
    if [ "$RRC" != 0 ] || [ "$SRC" != 0 ]; then
        fail "syscalls: the $mib MiB transfer failed (rdrecv $RRC, rdsend $SRC)"
        show "sc$mib"
    fi
    cp "$W/sc$mib".*.strace "${RDMA_VM_OUT:-$W}/" 2>/dev/null
    rm -f "$W/in.sc$mib"
done
# per_chunk SIDE: calls per chunk of each system call (>= 0.01), and in all.
per_chunk() {
    awk -v n=240 'FNR == 1 { f++ }
        /^-/ || /% time/ || NF < 4 { next }
        { name = $NF; c = $4; if (name == "total") name = "(all)"; v[name] += (f == 1 ? -c : c) }
        END { for (k in v) if (v[k] / n >= 0.01) printf "%8.2f  %s\n", v[k] / n, k }' \
        "$W/sc16.$1.strace" "$W/sc256.$1.strace" | sort -rn
}
for side in send recv; do
    if [ -s "$W/sc16.$side.strace" ] && [ -s "$W/sc256.$side.strace" ]; then
        echo "-- rd$side: calls per chunk"
        per_chunk "$side"
    fi
done
pass "system calls per chunk measured (see above)"
fi
fi

if want ratelimit; then
echo "== --rate-limit over RDMA: the receiver's limit reaches the sender in the hello"
# 16 MiB at 4 MiB/s with 256 KiB slots (the bucket: one slot): about 4 s.
RL=$W/in.rl
head -c $((16 * CHUNK)) /dev/urandom >"$RL"
chmod 644 "$RL"
xfer "ratelimit" "$RL" "" "--transport rdma --rate-limit 4M" "" "--transport rdma --chunk-size 256K"
secs=$(sed -n 's/.*received [0-9]* bytes .* in \([0-9.]*\) s.*/\1/p' "$W/ratelimit.recv.err")
ratio=$(awk -v s="${secs:-0}" 'BEGIN { if (s > 0) printf "%.4f", 16 / 4 / s; else print 0 }')
if grep -qF "rate limit 4 MiB/s (the receiver's)" "$W/ratelimit.send.err" &&
    awk -v r="$ratio" 'BEGIN { exit !(r >= 0.95 && r <= 1.05) }'; then
    pass "rate limit over rdma: 16 MiB in $secs s, $ratio of 4 MiB/s"
else
    fail "rate limit over rdma: 16 MiB in ${secs:-?} s (ratio $ratio of 4 MiB/s, want 0.95..1.05), or rdsend -v does not name the receiver's limit"
    show ratelimit
fi
check_xfer "ratelimit" "$RL" "rdma (rxe0" "rdma (rxe1"
rm -f "$RL"

fi

if want perf; then
echo "== throughput against ib_write_bw -R (same devices, 1 MiB messages)"
# The reference and ours alternate, twice each, on an otherwise idle guest; the
# best of each counts. Ours runs under the default protection (AES-256-GCM,
# which TCG emulates in software: CPU-bound here) and under
# `--integrity checksum` (xxh3: the transfer itself). Under TCG the figures
# follow the host's load: only the ratios mean anything.
BIG=$W/in.big
head -c $((128 * CHUNK)) /dev/zero >"$BIG"
best_ref= perf_ok=1
declare -A best=([default]= [checksum]=)
for round in 1 2; do
    # The reference itself sometimes fails under emulation (seen once in CI: the
    # client exited 1 right after its header); that is not a failure of ours, so it
    # gets three tries. Our own runs must succeed every round.
    ref=
    for attempt in 1 2 3; do
        ref=$(ib_write_bw_mbs $CHUNK 200) && break
        ref=
        echo "    ib_write_bw -R failed (try $attempt of 3)"
    done
    [ -n "$ref" ] || perf_ok=
    best_ref=$(awk -v a="${best_ref:-0}" -v b="${ref:-0}" 'BEGIN { print (b > a) ? b : a }')
    for prot in default checksum; do
        flags="--transport rdma"
        [ "$prot" = checksum ] && flags="$flags --integrity checksum"
        name="perf$round$prot"
        xfer "$name" "$BIG" "" "$flags" "" "$flags" /dev/null
        secs=$(sed -n 's/.*received \([0-9]*\) bytes .* in \([0-9.]*\) s.*/\2/p' "$W/$name.recv.err")
        bytes=$(sed -n 's/.*received \([0-9]*\) bytes .*/\1/p' "$W/$name.recv.err")
        if [ "$RRC" != 0 ] || [ "$SRC" != 0 ] || [ -z "$secs" ]; then
            perf_ok=
            show "$name"
            continue
        fi
        ours=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.2f", b / s / 1048576 }')
        echo "round $round: ib_write_bw -R ${ref:-failed} MB/s; rdsend -> rdrecv ($prot) $ours MB/s ($bytes bytes in $secs s)"
        best[$prot]=$(awk -v a="${best[$prot]:-0}" -v b="$ours" 'BEGIN { print (b > a) ? b : a }')
    done
done
if [ -n "$perf_ok" ]; then
    echo "best: ib_write_bw -R $best_ref MB/s; rdsend -> rdrecv ${best[default]} MB/s (default), ${best[checksum]} MB/s (checksum)"
    for prot in default checksum; do
        echo "RDMA ratio ($prot): $(awk -v o="${best[$prot]}" -v r="$best_ref" 'BEGIN { printf "%.2f", o / r }') of ib_write_bw"
    done
    pass "throughput measured (emulated guest: compare ratios, not absolute speed)"
else
    fail "throughput: a reference or rdsend/rdrecv run failed"
fi
rm -f "$BIG"
fi

# reconnect: an RDMA hop whose link goes down mid-stream. Last: after rxe1's
# link was down, rdma_cm connections from it can fail as unreachable for a
# while (ib_write_bw -R did, right after it), so nothing after it needs RDMA.
. "$(dirname "$0")/suite-reconnect.sh"

echo "== summary: $PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]
