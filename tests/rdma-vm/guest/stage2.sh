#!/bin/bash
# Stage 2 of the rdma-vm guest, run by guest/init in the chroot (host root
# read-only + tmpfs overlay, shares mounted).  Sets up two Soft-RoCE devices
# over a veth pair, the rdtest user, then runs the guest script and writes its
# exit status to $RDMA_VM_OUT/exit-status.
set -uo pipefail

CTL=/run/rdma-vm/ctl
# shellcheck source=/dev/null
. "$CTL/env.sh"        # exports RDMA_VM_* etc., defines GUEST_CMD=( ... )

read -r T0 _ </proc/uptime
say() { echo "rdma-vm guest: $*"; }                 # -> console log
err() { echo "rdma-vm guest: $*" >&2; echo "rdma-vm guest: $*" >/dev/ttyS2; }
die() { err "ERROR: $*"; exit 1; }

# ttyS1/ttyS2 carry the script's stdout/stderr to the host: no CR/LF mangling.
for t in /dev/ttyS1 /dev/ttyS2; do
    stty -F "$t" raw -echo 115200 || die "stty $t"
done

hostname rdma-vm
printf '127.0.1.1 rdma-vm\n10.77.0.1 rxehost0\n10.77.0.2 rxehost1\n' >>/etc/hosts

# --- network + Soft-RoCE --------------------------------------------------
# (builtins and one `ip -batch` where possible: every exec costs ~0.1 s under TCG)
ip -batch - <<'IPEOF' || die "cannot create the veth pair v0/v1"
link set lo up
link add v0 type veth peer name v1
addr add 10.77.0.1/24 dev v0
addr add 10.77.0.2/24 dev v1
link set v0 up
link set v1 up
IPEOF
# Both addresses are local, so by default the kernel would route 10.77.0.1 <->
# 10.77.0.2 through lo, and rdma_cm would then put BOTH ends of a connection on
# rxe0 (rxe's loopback path).  Route locally generated traffic between the two
# addresses over the veth pair instead, so that a client on rxe1 really talks
# to a server on rxe0 (RoCEv2 packets cross v1 -> v0).  RDMA_VM_VETH_ROUTING=0
# keeps the plain setup.
if [ "${RDMA_VM_VETH_ROUTING:-1}" != 0 ]; then
    for k in all default v0 v1; do
        echo 0 >"/proc/sys/net/ipv4/conf/$k/rp_filter" || die "rp_filter $k"
        echo 1 >"/proc/sys/net/ipv4/conf/$k/accept_local" || die "accept_local $k"
    done
    read -r mac0 </sys/class/net/v0/address
    read -r mac1 </sys/class/net/v1/address
    ip -batch - <<IPEOF || die "cannot set up routing over the veth pair"
rule add pref 100 lookup local
rule del pref 0 lookup local
rule add pref 10 iif lo to 10.77.0.1 lookup 77
rule add pref 11 iif lo to 10.77.0.2 lookup 78
route add 10.77.0.1 dev v1 src 10.77.0.2 table 77
route add 10.77.0.2 dev v0 src 10.77.0.1 table 78
neigh replace 10.77.0.1 lladdr $mac0 dev v1 nud permanent
neigh replace 10.77.0.2 lladdr $mac1 dev v0 nud permanent
IPEOF
fi
rdma link add rxe0 type rxe netdev v0 || die "rdma link add rxe0 failed"
rdma link add rxe1 type rxe netdev v1 || die "rdma link add rxe1 failed"

# Readiness: both ports ACTIVE and their IPv4 RoCEv2 GID populated (bounded).
has_line() { # FILE... : some file holds a line equal to $want
    local f l
    for f in "$@"; do
        read -r l <"$f" 2>/dev/null && [ "$l" = "$want" ] && return 0
    done
    return 1
}
ready=
for ((n = 0; n < 400; n++)); do
    ok=1
    for i in 0 1; do
        p=/sys/class/infiniband/rxe$i/ports/1
        want="4: ACTIVE" has_line "$p/state" || ok=
        want="0000:0000:0000:0000:0000:ffff:0a4d:000$((i + 1))" has_line "$p"/gids/* || ok=
    done
    [ -n "$ok" ] && { ready=1; break; }
    sleep 0.05
done
[ -n "$ready" ] || { rdma link show >&2; die "rxe0/rxe1 did not become ACTIVE within 20 s"; }
chmod 0666 /dev/infiniband/* 2>/dev/null

# --- unprivileged user (root bypasses RLIMIT_MEMLOCK) ----------------------
if ! id rdtest >/dev/null 2>&1; then
    useradd -m -s /bin/bash -p '*' rdtest || die "useradd rdtest"
fi

read -r T1 _ </proc/uptime
say "ready: guest uptime ${T1}s (stage2 setup $(awk "BEGIN{print $T1 - $T0}")s)"
echo "rdma-vm: guest ready after ${T1}s of guest uptime" >/dev/ttyS2

# --- run the guest script ---------------------------------------------------
cd "$RDMA_VM_REPO" || die "cd $RDMA_VM_REPO"
export RDMA_VM=1 HOME=/root USER=root LOGNAME=root TERM=dumb
rm -f "$RDMA_VM_OUT/exit-status"
"${GUEST_CMD[@]}" </dev/null >/dev/ttyS1 2>/dev/ttyS2
rc=$?
read -r T2 _ </proc/uptime
say "guest script exited with status $rc at uptime ${T2}s"
echo "$rc" >"$RDMA_VM_OUT/exit-status.tmp" && mv "$RDMA_VM_OUT/exit-status.tmp" "$RDMA_VM_OUT/exit-status"
dmesg >"$RDMA_VM_OUT/dmesg.txt" 2>/dev/null
echo "RDMA_VM_EXIT_STATUS=$rc"
sync
exit "$rc"
