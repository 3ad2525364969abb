# shellcheck shell=bash
# Helpers for guest scripts run by tests/rdma-vm/run-guest.sh.
#
#   #!/bin/bash
#   set -euo pipefail
#   . "$(dirname "$0")/lib.sh"
#   rdma_vm_require            # exits 77 (skipped) outside the VM
#
# The guest has two Soft-RoCE devices:
#   rxe0 on veth v0, 10.77.0.1, name rxehost0  ("server" side)
#   rxe1 on veth v1, 10.77.0.2, name rxehost1  ("client" side)
# Traffic from 10.77.0.2 to 10.77.0.1 crosses the veth pair (rxe1 -> rxe0).
# Unprivileged user: rdtest (see as_user).  Results dir: $RDMA_VM_OUT.

RXE_SERVER_DEV=rxe0 RXE_SERVER_IP=10.77.0.1 RXE_SERVER_HOST=rxehost0
RXE_CLIENT_DEV=rxe1 RXE_CLIENT_IP=10.77.0.2 RXE_CLIENT_HOST=rxehost1
RDTEST_USER=rdtest
: "${RDMA_VM_OUT:=/tmp}"
CHECK_FAILS=${CHECK_FAILS:-0}

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'FATAL: %s\n' "$*" >&2; exit 1; }

# rdma_vm_require: exit 77 (skipped) unless running inside the rdma-vm guest.
rdma_vm_require() {
    if [ "${RDMA_VM:-}" != 1 ]; then
        echo "SKIPPED: $0 must run inside the VM: tests/rdma-vm/run-guest.sh $0" >&2
        exit 77
    fi
}

# check_eq EXPECTED ACTUAL MSG: print "ok - MSG" or "FAIL - MSG ..."; returns 1
# on mismatch (aborts a `set -e` script) and counts failures in CHECK_FAILS.
check_eq() {
    if [ "$1" = "$2" ]; then
        echo "ok - $3"
    else
        echo "FAIL - $3: expected '$1', got '$2'"
        CHECK_FAILS=$((CHECK_FAILS + 1))
        return 1
    fi
}

# check_files_eq FILE1 FILE2 MSG: byte-for-byte comparison (sizes shown on failure).
check_files_eq() {
    if cmp -s -- "$1" "$2"; then
        echo "ok - $3"
    else
        echo "FAIL - $3: $1 ($(stat -c %s -- "$1" 2>/dev/null || echo missing) bytes)" \
            "differs from $2 ($(stat -c %s -- "$2" 2>/dev/null || echo missing) bytes)"
        CHECK_FAILS=$((CHECK_FAILS + 1))
        return 1
    fi
}

# wait_for TIMEOUT_S CMD...: poll CMD every 50 ms until it succeeds; 1 on timeout.
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# port_listening PORT: a TCP socket or an rdma_cm id listens on PORT.
port_listening() {
    [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] ||
        rdma resource show cm_id 2>/dev/null | grep -Eq "state LISTEN .*:$1( |\$)"
}

# wait_port PORT [TIMEOUT_S=30] [PID]: wait until something listens on PORT
# (a TCP socket or an rdma_cm id, any address).  With PID, give up as soon as
# that process (the server being waited for) has exited.  1 on failure.
wait_port() {
    local port=$1 limit=${2:-30} pid=${3:-}
    local deadline=$((SECONDS + limit))
    until port_listening "$port"; do
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            echo "wait_port: process $pid exited before listening on port $port" >&2
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "wait_port: nothing listens on port $port after ${limit}s" >&2
            return 1
        fi
        sleep 0.05
    done
}

# as_user CMD...: run CMD as user rdtest with RLIMIT_MEMLOCK = AS_USER_MEMLOCK_KB
# (default 64 KiB; "unlimited" allowed).  Root bypasses RLIMIT_MEMLOCK, so this
# is the way to test the "ulimit -l too low" path.  rdtest can write /tmp but
# usually not $RDMA_VM_OUT.
as_user() {
    (
        ulimit -l "${AS_USER_MEMLOCK_KB:-64}" &&
            exec setpriv --reuid="$RDTEST_USER" --regid="$RDTEST_USER" --init-groups \
                env HOME="/home/$RDTEST_USER" USER="$RDTEST_USER" LOGNAME="$RDTEST_USER" "$@"
    )
}

# rdma_bin NAME: path of a project binary built on the host (release if
# present, else debug; RDMA_PIPE_BIN_DIR overrides).  Fails if not built.
rdma_bin() {
    local d
    for d in ${RDMA_PIPE_BIN_DIR:-} "$RDMA_VM_TARGET_DIR/release" "$RDMA_VM_TARGET_DIR/debug"; do
        if [ -x "$d/$1" ]; then
            echo "$d/$1"
            return 0
        fi
    done
    echo "rdma_bin: $1 not built under ${RDMA_PIPE_BIN_DIR:-$RDMA_VM_TARGET_DIR/{release,debug}}" >&2
    return 1
}

# rxe_counters: one line per device with its sent/received packet counters.
rxe_counters() {
    local d c=/ports/1/hw_counters
    for d in rxe0 rxe1; do
        echo "$d sent_pkts=$(cat "/sys/class/infiniband/$d$c/sent_pkts") rcvd_pkts=$(cat "/sys/class/infiniband/$d$c/rcvd_pkts")"
    done
}

# rxe_counter DEV NAME: one hw counter (e.g. rxe_counter rxe1 sent_pkts).
rxe_counter() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/$2"; }

# free_port [BASE=18515]: first port >= BASE on which nothing listens.
free_port() {
    local p=${1:-18515}
    while port_listening "$p"; do p=$((p + 1)); done
    echo "$p"
}

# ib_write_bw_mbs SIZE ITERS [EXTRA_ARGS...]: run the reference benchmark
# ib_write_bw -R (rdma_cm) with a server on rxe0/10.77.0.1 and a client on
# rxe1 (ITERS >= 5, a perftest limit; EXTRA_ARGS go to both), and echo the
# client's "BW average" in MB/s.  Full outputs go to
# $RDMA_VM_OUT/ib_write_bw-SIZE-ITERS.{server,client}.log.  Returns 1 on failure.
ib_write_bw_mbs() {
    local size=$1 iters=$2 port spid rc mbs
    shift 2
    port=$(free_port "${IB_BW_PORT:-18515}")
    local logs="$RDMA_VM_OUT/ib_write_bw-$size-$iters"
    timeout 300 ib_write_bw -R -d "$RXE_SERVER_DEV" -s "$size" -n "$iters" -p "$port" "$@" \
        >"$logs.server.log" 2>&1 &
    spid=$!
    if ! wait_port "$port" 30 "$spid"; then
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        cat "$logs.server.log" >&2
        return 1
    fi
    rc=0
    timeout 300 ib_write_bw -R -d "$RXE_CLIENT_DEV" -s "$size" -n "$iters" -p "$port" "$@" \
        "$RXE_SERVER_IP" >"$logs.client.log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        kill "$spid" 2>/dev/null || true
    fi
    wait "$spid" 2>/dev/null || true
    mbs=$(awk '/^ *#bytes/ { getline; print $4; exit }' "$logs.client.log")
    if [ "$rc" != 0 ] || [ -z "$mbs" ]; then
        echo "ib_write_bw_mbs: client failed (rc=$rc); see $logs.client.log:" >&2
        tail -n 15 "$logs.client.log" >&2
        return 1
    fi
    echo "$mbs"
}

# start_sshd: start an sshd on port 22 of the guest and let root and rdtest
# log in to rxehost0/rxehost1 (and localhost) with a key, no prompts.  The
# first connection to a host takes ~10 s under emulation; later ones reuse it
# (ControlMaster).  A remote command gets sshd's limits (ulimit -l 8192), not
# the caller's: set `ulimit -l` in the remote command itself.
start_sshd() {
    command -v /usr/sbin/sshd >/dev/null || die "start_sshd: openssh-server not installed"
    mkdir -p /run/sshd /etc/ssh
    ssh-keygen -A >/dev/null
    local u h
    for u in root "$RDTEST_USER"; do
        h=$(getent passwd "$u" | cut -d: -f6)
        mkdir -p "$h/.ssh"
        [ -f "$h/.ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$h/.ssh/id_ed25519"
        cat "$h/.ssh/id_ed25519.pub" >>"$h/.ssh/authorized_keys"
        # A new ssh connection costs seconds under emulation: multiplex them.
        printf '%s\n' 'Host *' '  StrictHostKeyChecking no' '  UserKnownHostsFile /dev/null' \
            '  LogLevel ERROR' '  BatchMode yes' '  GSSAPIAuthentication no' \
            '  ControlMaster auto' '  ControlPath /tmp/ssh-mux-%u-%r@%h:%p' '  ControlPersist 900' \
            >"$h/.ssh/config"
        chown -R "$u:" "$h/.ssh"
        chmod 700 "$h/.ssh"
        chmod 600 "$h/.ssh/authorized_keys" "$h/.ssh/config"
    done
    /usr/sbin/sshd -o PermitRootLogin=prohibit-password -o UsePAM=no -o UseDNS=no \
        -o "SetEnv=RDMA_VM=1" || die "start_sshd: sshd failed"
    wait_port 22 30
}

# zfs_vm_setup: OpenZFS in the guest, for a guest started with RDMA_VM_ZFS=1
# (run-guest.sh builds zfs.ko & co. for the guest kernel, tests/rdma-vm/zfs-build.sh,
# and the initramfs loads them): installs the userland (zfs, zpool, libzfs ...,
# shared read-only at $RDMA_VM_ZFS_ROOT) into the guest's writable root and caps
# the ARC at ZFS_VM_ARC_MAX_MB (default 256) MiB.  Dies without ZFS.
zfs_vm_setup() {
    [ -n "${RDMA_VM_ZFS_ROOT:-}" ] || die "zfs_vm_setup: no OpenZFS in this guest (run-guest.sh with RDMA_VM_ZFS=1)"
    [ -c /dev/zfs ] || die "zfs_vm_setup: no /dev/zfs (the zfs module is not loaded)"
    cp -a "$RDMA_VM_ZFS_ROOT/usr/." /usr/ || die "zfs_vm_setup: cannot install the userland"
    cp -a "$RDMA_VM_ZFS_ROOT/etc/." /etc/ || die "zfs_vm_setup: cannot install /etc/zfs"
    ldconfig
    echo $((${ZFS_VM_ARC_MAX_MB:-256} << 20)) >/sys/module/zfs/parameters/zfs_arc_max ||
        die "zfs_vm_setup: cannot set zfs_arc_max"
    zfs version >/dev/null || die "zfs_vm_setup: 'zfs version' fails"
}

# veth_routing: (re)apply the guest's routing between rxehost1 and rxehost0 over
# the veth pair (as guest/stage2.sh sets it up).  `ip link set v0|v1 down`
# flushes the routes and neighbour entries through that device: call this after
# bringing it up again (a link-flap test).  No-op with RDMA_VM_VETH_ROUTING=0.
veth_routing() {
    [ "${RDMA_VM_VETH_ROUTING:-1}" != 0 ] || return 0
    local mac0 mac1
    read -r mac0 </sys/class/net/v0/address
    read -r mac1 </sys/class/net/v1/address
    ip -batch - <<IPEOF
route replace 10.77.0.1 dev v1 src 10.77.0.2 table 77
route replace 10.77.0.2 dev v0 src 10.77.0.1 table 78
neigh replace 10.77.0.1 lladdr $mac0 dev v1 nud permanent
neigh replace 10.77.0.2 lladdr $mac1 dev v0 nud permanent
IPEOF
}

# rxe_ready DEV: DEV's port 1 is ACTIVE and holds its IPv4 RoCEv2 GID (rxe0:
# 10.77.0.1, rxe1: 10.77.0.2), as after guest set-up; 1 otherwise.
rxe_ready() {
    local p=/sys/class/infiniband/$1/ports/1 want g
    want="0000:0000:0000:0000:0000:ffff:0a4d:000$((${1#rxe} + 1))"
    [ "$(cat "$p/state" 2>/dev/null)" = "4: ACTIVE" ] || return 1
    for g in "$p"/gids/*; do
        [ "$(cat "$g" 2>/dev/null)" = "$want" ] && return 0
    done
    return 1
}
