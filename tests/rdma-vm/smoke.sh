#!/bin/bash
# Guest script: proves the Soft-RoCE setup of the rdma-vm harness.
#   tests/rdma-vm/run-guest.sh tests/rdma-vm/smoke.sh [SIZE [ITERS]]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
rdma_vm_require

SIZE=${1:-1048576}
ITERS=${2:-200}

echo "== kernel $(uname -r), $(nproc) vCPUs, repo $RDMA_VM_REPO"
echo "== ibv_devices"
ibv_devices
devs=$(ibv_devices | awk 'NR > 2 { print $1 }' | sort | xargs)
check_eq "rxe0 rxe1" "$devs" "ibv_devices lists rxe0 and rxe1"

echo "== ibv_devinfo"
for d in rxe0 rxe1; do
    ibv_devinfo -d "$d" | grep -E 'hca_id|transport|state|active_mtu|link_layer'
    state=$(ibv_devinfo -d "$d" | awk '$1 == "state:" { print $2; exit }')
    check_eq PORT_ACTIVE "$state" "$d port state"
done

echo "== ib_write_bw -R: client rxe1 ($RXE_CLIENT_IP) -> server rxe0 ($RXE_SERVER_IP), $SIZE B x $ITERS"
s1=$(rxe_counter rxe1 sent_pkts) r0=$(rxe_counter rxe0 rcvd_pkts)
mbs=$(ib_write_bw_mbs "$SIZE" "$ITERS")
echo "ib_write_bw MB/s: $mbs"
rxe_counters
sent=$(($(rxe_counter rxe1 sent_pkts) - s1)) rcvd=$(($(rxe_counter rxe0 rcvd_pkts) - r0))
echo "rxe1 sent $sent packets, rxe0 received $rcvd packets"
if [ "${RDMA_VM_VETH_ROUTING:-1}" != 0 ]; then
    # Each 1 KiB-MTU packet carries at most 1024 payload bytes.
    check_eq yes "$([ "$rcvd" -ge $((SIZE * ITERS / 1024)) ] && echo yes || echo no)" \
        "the payload crossed from rxe1 to rxe0"
fi

echo "== as user rdtest with ulimit -l 64 (expected to fail: memory registration needs locked memory)"
as_user bash -c 'echo "user $(id -un), ulimit -l = $(ulimit -l) KiB"'
port=$(free_port 18600)
timeout 60 ib_write_bw -R -d rxe0 -s "$SIZE" -n 5 -p "$port" >/tmp/memlock-server.log 2>&1 &
spid=$!
wait_port "$port" 30 "$spid"
rc=0
as_user timeout 60 ib_write_bw -R -d rxe1 -s "$SIZE" -n 5 -p "$port" "$RXE_SERVER_IP" \
    >/tmp/memlock-client.log 2>&1 || rc=$?
kill "$spid" 2>/dev/null || true
wait "$spid" 2>/dev/null || true
grep -iE 'couldn|fail|error|unable|memory' /tmp/memlock-client.log | head -n 5 || true
echo "memlock: ib_write_bw as rdtest with ulimit -l 64 exited with status $rc" \
    "($([ "$rc" != 0 ] && echo 'failed, as expected' || echo 'UNEXPECTEDLY succeeded'))"

echo "== as user rdtest with ulimit -l unlimited (control)"
rc=0
port=$(free_port 18600)
timeout 60 ib_write_bw -R -d rxe0 -s "$SIZE" -n 5 -p "$port" >/tmp/memlock-server2.log 2>&1 &
spid=$!
wait_port "$port" 30 "$spid"
AS_USER_MEMLOCK_KB=unlimited as_user timeout 60 ib_write_bw -R -d rxe1 -s "$SIZE" -n 5 -p "$port" \
    "$RXE_SERVER_IP" >/tmp/memlock-client2.log 2>&1 || rc=$?
wait "$spid" 2>/dev/null || true
echo "memlock control: ib_write_bw as rdtest with ulimit -l unlimited exited with status $rc"
check_eq 0 "$rc" "rdtest can use RDMA when memlock allows it"

echo "smoke: all checks passed"
