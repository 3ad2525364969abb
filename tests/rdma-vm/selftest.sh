#!/usr/bin/env bash
# Self-test of the rdma-vm harness itself (host side, ~1-2 minutes):
#   tests/rdma-vm/selftest.sh
# Checks: exit-status pass-through, argument quoting, a host-built program
# under the target dir (also with CARGO_TARGET_DIR outside the repo) runs in
# the guest, files written to RDMA_VM_OUT come back, the timeout fires.
# Exit status: 0 all ok, 77 skipped (run-guest.sh skipped), 1 a check failed.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
RUN=$HERE/run-guest.sh
fails=0
ok() { echo "selftest: ok - $*"; }
bad() { echo "selftest: FAIL - $*"; fails=$((fails + 1)); }

out=$(mktemp -d "${TMPDIR:-/tmp}/rdma-vm-selftest.XXXXXX")
trap 'rm -rf "$out"' EXIT

# 1. exit status and arguments
RDMA_VM_OUT=$out/1 "$RUN" "$HERE/selftest/exit-with.sh" 3 "two words" "" >"$out/1.stdout"
rc=$?
[ "$rc" = 77 ] && { echo "selftest: SKIPPED (run-guest.sh skipped)"; exit 77; }
[ "$rc" = 3 ] && ok "guest exit 3 -> run-guest.sh exit 3" || bad "guest exit 3 gave $rc"
printf 'arg: <3>\narg: <two words>\narg: <>\n' | cmp -s - "$out/1.stdout" &&
    ok "arguments and stdout pass through" || bad "arguments/stdout: $(cat "$out/1.stdout")"

# 2. a host-built program in the target dir, repo target and external target
command -v cc >/dev/null || echo "selftest: no cc, using a shell script as the program"
for tdir in "" "$out/ext-target"; do
    t=${tdir:-$(cd "$HERE/../.." && pwd -P)/target}
    mkdir -p "$t/rdma-vm-selftest"
    prog=$t/rdma-vm-selftest/hello
    if command -v cc >/dev/null; then
        printf '#include <stdio.h>\nint main(void){puts("hello from the share");return 0;}\n' >"$prog.c"
        cc -o "$prog" "$prog.c" || bad "cc failed"
    else
        printf '#!/bin/sh\necho "hello from the share"\n' >"$prog"
        chmod +x "$prog"
    fi
    chmod -R a+rX "$t/rdma-vm-selftest"
    CARGO_TARGET_DIR=$tdir RDMA_VM_OUT=$out/2 "$RUN" "$HERE/selftest/exec-from-share.sh" \
        "$prog" "hello from the share"
    rc=$?
    [ "$rc" = 0 ] && ok "program from $t runs in the guest" || bad "program from $t: exit $rc"
    [ "$(cat "$out/2/from-guest.txt" 2>/dev/null)" = "written in the guest" ] &&
        ok "file written to RDMA_VM_OUT came back" || bad "no file back in RDMA_VM_OUT"
    rm -rf "$t/rdma-vm-selftest" "$out/2"
done

# 3. timeout
printf '#!/bin/bash\necho sleeping; sleep 600\n' >"$out/hang.sh"
chmod +x "$out/hang.sh"
RDMA_VM_TIMEOUT=25 RDMA_VM_OUT=$out/3 "$RUN" "$out/hang.sh" >/dev/null 2>"$out/3.stderr"
rc=$?
[ "$rc" = 124 ] && grep -q TIMEOUT "$out/3.stderr" && ok "timeout -> exit 124" ||
    bad "timeout gave exit $rc"

[ "$fails" = 0 ] && echo "selftest: all ok" || echo "selftest: $fails check(s) failed"
[ "$fails" = 0 ]
