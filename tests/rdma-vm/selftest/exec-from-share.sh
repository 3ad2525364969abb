#!/bin/bash
# Guest script for selftest.sh: run a program built on the host under the
# target dir (seen in the guest at the same path), check its output, leave a
# file in $RDMA_VM_OUT, and check that stdout carries binary-safe bytes.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
rdma_vm_require
prog=$1 expected=$2
echo "repo $RDMA_VM_REPO (cwd $PWD), target $RDMA_VM_TARGET_DIR, out $RDMA_VM_OUT"
check_eq "$RDMA_VM_REPO" "$PWD" "cwd is the repository"
ls -l "$prog"
check_eq "$expected" "$("$prog")" "program from the share runs"
check_eq "$expected" "$(as_user "$prog")" "program runs as rdtest too"
echo "written in the guest" >"$RDMA_VM_OUT/from-guest.txt"
if [ "${BIG_STDOUT:-0}" -gt 0 ]; then
    head -c "$BIG_STDOUT" /dev/urandom | tee "$RDMA_VM_OUT/big.bin" | base64 -w 76 >&2 &&
        echo "big stdout: $BIG_STDOUT random bytes sent as base64 on stderr"
fi
