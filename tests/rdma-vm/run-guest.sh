#!/usr/bin/env bash
# Run a script inside a throwaway QEMU guest (Debian kernel, pure TCG
# emulation) that has two Soft-RoCE devices, rxe0 (10.77.0.1 on veth v0) and
# rxe1 (10.77.0.2 on veth v1).  See tests/rdma-vm/README.md.
#
# usage: tests/rdma-vm/run-guest.sh GUEST_SCRIPT [ARGS...]
#
# Exit status: the guest script's exit status; 77 = SKIPPED (no qemu, not
# root, missing packages); 124 = timeout; 125 = harness failure (the guest
# never reported an exit status); 2 = usage error.
set -euo pipefail

EXIT_SKIP=77 EXIT_TIMEOUT=124 EXIT_HARNESS=125
START=$SECONDS
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$SELF_DIR/../.." && pwd -P)
TIMEOUT=${RDMA_VM_TIMEOUT:-900}
CACHE=${RDMA_VM_CACHE:-$REPO/.vmcache}
VM_SMP=${RDMA_VM_SMP:-2}
VM_MEM=${RDMA_VM_MEM:-2048}
QEMU_BIN=${RDMA_VM_QEMU:-qemu-system-x86_64}
# Modules for the initramfs (their dependencies are added automatically).
# crc32_generic must come before rdma_rxe (rxe needs the crc32 shash and the
# guest cannot autoload modules).  nf_tables: suites drop RoCE packets with nft
# to fail a path silently (suite-zfs.sh's flap).  inet_diag, tcp_diag: `ss -K`
# resets a hop's TCP connection (suite-reconnect.sh).
MODULES="virtio_pci 9pnet_virtio 9p overlay crc32_generic veth rdma_rxe ib_uverbs rdma_ucm nf_tables inet_diag tcp_diag ${RDMA_VM_EXTRA_MODULES:-}"
PACKAGES="qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest"

log() { printf 'rdma-vm: %s\n' "$*" >&2; }
die() { printf 'rdma-vm: ERROR: %s\n' "$*" >&2; exit "$EXIT_HARNESS"; }
skip() {
    printf '\n*** SKIPPED: %s ***\n' "$*" >&2
    if [ "${RDMA_VM_REQUIRE:-0}" = 1 ]; then
        printf 'rdma-vm: RDMA_VM_REQUIRE=1, so this is a failure\n' >&2
        exit 1
    fi
    printf 'rdma-vm: exiting with status %s (skipped)\n\n' "$EXIT_SKIP" >&2
    exit "$EXIT_SKIP"
}

if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
    exit 2
fi
[ -f "$1" ] || { log "guest script not found: $1"; exit 2; }
GUEST_SCRIPT=$(realpath -- "$1")
shift
case "$TIMEOUT" in '' | *[!0-9]*) log "RDMA_VM_TIMEOUT must be a number of seconds"; exit 2 ;; esac

# --- prerequisites ------------------------------------------------------------
command -v "$QEMU_BIN" >/dev/null || skip "$QEMU_BIN not found (apt-get install $PACKAGES)"
[ "$(id -u)" = 0 ] || skip "run-guest.sh must run as root (it exports / to the guest over 9p)"
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] && [[ $(LC_ALL=C ldd "$BUSYBOX" 2>&1 || true) == *"not a dynamic executable"* ]] \
    || skip "static busybox not found at $BUSYBOX (apt-get install busybox-static)"
for tool in cpio depmod modprobe ip rdma setpriv useradd timeout flock; do
    command -v "$tool" >/dev/null || skip "'$tool' not found (apt-get install $PACKAGES)"
done
compgen -G "/usr/lib/*/libibverbs/librxe-*.so" >/dev/null \
    || skip "the rxe verbs provider is missing (apt-get install ibverbs-providers)"

# --- kernel + initramfs cache ---------------------------------------------------
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd -P)
exec 9>"$CACHE/.lock"
flock 9

cached_kernel() { # newest complete kernel in the cache, if any
    (cd "$CACHE" && ls -d kernel/linux-image-*/.complete 2>/dev/null) | sort -V | tail -n1 | cut -d/ -f2
}
KPKG=${RDMA_VM_KERNEL_PKG:-}
if [ -z "$KPKG" ]; then
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null \
        | awk '$1 == "Depends:" && $2 ~ /^linux-image-.*-amd64$/ {print $2; exit}' || true)
fi
if [ -z "$KPKG" ]; then
    # No apt metadata: fall back to the newest kernel already in the cache.
    KPKG=$(cached_kernel || true)
    [ -n "$KPKG" ] || skip "cannot resolve linux-image-amd64 with apt-cache and no cached kernel in $CACHE"
fi
fetch_kernel() { # PKG -> $CACHE/kernel/PKG (extracted, depmod'ed)
    local pkg=$1 tmp=$CACHE/tmp.$$ kver
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || {
        log "apt-get/dpkg-deb needed to fetch $pkg"
        return 1
    }
    log "fetching $pkg into $CACHE/kernel/$pkg (once)"
    rm -rf "$tmp" "$CACHE/kernel/$pkg"
    mkdir -p "$tmp/x" "$CACHE/kernel"
    (cd "$tmp" && apt-get -q -o APT::Sandbox::User=root download "$pkg" >&2) &&
        dpkg-deb -x "$tmp"/*.deb "$tmp/x" &&
        kver=$(ls "$tmp/x/lib/modules") &&
        depmod -b "$tmp/x" "$kver" &&
        echo "$kver" >"$tmp/x/.kver" &&
        touch "$tmp/x/.complete" &&
        mv "$tmp/x" "$CACHE/kernel/$pkg"
    local rc=$?
    rm -rf "$tmp"
    return "$rc"
}
if [ ! -e "$CACHE/kernel/$KPKG/.complete" ] && ! fetch_kernel "$KPKG"; then
    old=$(cached_kernel)
    [ -n "$old" ] || die "cannot fetch $KPKG (apt-get download / dpkg-deb / depmod failed)"
    log "WARNING: cannot fetch $KPKG, using the cached $old"
    KPKG=$old
fi
KDIR=$CACHE/kernel/$KPKG
KVER=$(cat "$KDIR/.kver")
VMLINUZ=$KDIR/boot/vmlinuz-$KVER
[ -f "$VMLINUZ" ] || die "no kernel image at $VMLINUZ (remove $KDIR and retry)"

# OpenZFS (RDMA_VM_ZFS=1): modules built for this kernel and the userland,
# cached (tests/rdma-vm/zfs-build.sh); the modules go into the initramfs, the
# userland is shared (RDMA_VM_ZFS_ROOT in the guest, installed by zfs_vm_setup).
ZDIR=
if [ "${RDMA_VM_ZFS:-0}" = 1 ]; then
    zrc=0
    ZDIR=$(bash "$SELF_DIR/zfs-build.sh" "$CACHE" "$KVER") || zrc=$?
    case "$zrc" in
    0) ;;
    "$EXIT_SKIP") skip "RDMA_VM_ZFS=1 but OpenZFS cannot be built for $KVER (see above)" ;;
    *) die "the OpenZFS build for the guest kernel $KVER failed (see above)" ;;
    esac
    MODULES="$MODULES $(cat "$ZDIR/modules/kernel-deps")"
    log "OpenZFS: $(head -n1 "$ZDIR/build-info") ($ZDIR)"
fi

# The initramfs depends on the kernel, the module list, busybox and the guest scripts.
ikey=$( { echo "$KPKG $MODULES ${ZDIR##*/}"; cat "$BUSYBOX" "$SELF_DIR/guest/init" "$SELF_DIR/guest/stage2.sh"; } \
    | sha256sum | cut -c1-16)
INITRD=$CACHE/initramfs-$ikey.cpio
if [ ! -f "$INITRD" ]; then
    log "building initramfs $INITRD"
    tmp=$CACHE/tmp.$$
    rm -rf "$tmp"
    mkdir -p "$tmp/root/bin" "$tmp/root/modules"
    cp "$BUSYBOX" "$tmp/root/bin/busybox"
    cp "$SELF_DIR/guest/init" "$tmp/root/init"
    cp "$SELF_DIR/guest/stage2.sh" "$tmp/root/stage2.sh"
    chmod 0755 "$tmp/root/init" "$tmp/root/bin/busybox"
    n=0
    for m in $MODULES; do
        modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" >"$tmp/deps" 2>&1 \
            || die "module $m: $(cat "$tmp/deps")"
        while read -r kind ko _; do
            [ "$kind" = insmod ] || continue # builtin
            base=$(basename "$ko")
            grep -qx "[0-9]*-$base" "$tmp/root/modules/order" 2>/dev/null && continue
            n=$((n + 1))
            name=$(printf '%02d-%s' "$n" "$base")
            cp "$ko" "$tmp/root/modules/$name"
            echo "$name" >>"$tmp/root/modules/order"
        done <"$tmp/deps"
    done
    if [ -n "$ZDIR" ]; then
        while read -r base; do
            n=$((n + 1))
            name=$(printf '%02d-%s' "$n" "$base")
            cp "$ZDIR/modules/$base" "$tmp/root/modules/$name"
            echo "$name" >>"$tmp/root/modules/order"
        done <"$ZDIR/modules/order"
    fi
    (cd "$tmp/root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$tmp/initrd" \
        || die "cpio failed"
    mv "$tmp/initrd" "$INITRD"
    rm -rf "$tmp"
    # Keep only the current initramfs.
    find "$CACHE" -maxdepth 1 -name 'initramfs-*.cpio' ! -name "initramfs-$ikey.cpio" -delete
fi
flock -u 9

# --- results dir, control share, qemu command line ----------------------------
if [ -n "${RDMA_VM_OUT:-}" ]; then
    mkdir -p "$RDMA_VM_OUT"
    OUT=$(cd "$RDMA_VM_OUT" && pwd -P)
else
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/rdma-vm-out.XXXXXX")
fi
rm -f "$OUT/exit-status" "$OUT/console.log" "$OUT/dmesg.txt"
RUN=$(mktemp -d "${TMPDIR:-/tmp}/rdma-vm-run.XXXXXX")
QPID= CAT_OUT= CAT_ERR=
cleanup() {
    [ -n "$QPID" ] && kill "$QPID" 2>/dev/null
    [ -n "$CAT_OUT" ] && kill "$CAT_OUT" 2>/dev/null
    [ -n "$CAT_ERR" ] && kill "$CAT_ERR" 2>/dev/null
    rm -rf "$RUN"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP
mkdir "$RUN/ctl"

# Target dir: $CARGO_TARGET_DIR (relative = relative to the repo) or <repo>/target.
TARGET=${RDMA_VM_TARGET_DIR:-${CARGO_TARGET_DIR:-target}}
case "$TARGET" in /*) ;; *) TARGET=$REPO/$TARGET ;; esac
[ -d "$TARGET" ] && TARGET=$(cd "$TARGET" && pwd -P)

# Shares mounted in the guest at their host path.  RDMA_VM_SHARE adds
# read-only directories (colon-separated).
SHARES=() MODES=()
add_share() { # PATH MODE
    local p=$1
    [ -d "$p" ] || return 0
    p=$(cd "$p" && pwd -P)
    case "$p" in / | *$'\n'*) die "cannot share '$p'" ;; esac
    SHARES+=("$p") MODES+=("$2")
}
add_share "$OUT" rw
add_share "$REPO" ro
add_share "$TARGET" ro
add_share "$(dirname "$GUEST_SCRIPT")" ro
IFS=: read -r -a extra <<<"${RDMA_VM_SHARE:-}"
for e in "${extra[@]}"; do [ -n "$e" ] && add_share "$e" ro; done
[ -n "$ZDIR" ] && add_share "$ZDIR/root" ro
# Drop a share covered by another one of the same mode (or by a rw one), then
# order parents before children so that nested mounts stack correctly.
MOUNTS=()
for i in "${!SHARES[@]}"; do
    keep=1
    for j in "${!SHARES[@]}"; do
        [ "$i" != "$j" ] || continue
        case "${SHARES[$i]}/" in "${SHARES[$j]}"/*) ;; *) continue ;; esac
        [ "${MODES[$j]}" = rw ] || [ "${MODES[$i]}" = ro ] || continue
        # equal paths: keep the first one only
        [ "${SHARES[$i]}" = "${SHARES[$j]}" ] && [ "$i" -lt "$j" ] && continue
        keep=
    done
    [ -n "$keep" ] && MOUNTS+=("${#SHARES[$i]} ${MODES[$i]} ${SHARES[$i]}")
done
mapfile -t MOUNTS < <(printf '%s\n' "${MOUNTS[@]}" | sort -n -k1,1)

q9() { printf '%s' "${1//,/,,}"; } # qemu option escaping
QEMU=("$QEMU_BIN" -accel tcg -cpu max -smp "$VM_SMP" -m "$VM_MEM"
    -nodefaults -no-user-config -display none -monitor none -nic none -no-reboot
    -kernel "$VMLINUZ" -initrd "$INITRD"
    -append "console=ttyS0 quiet panic=-1 rdinit=/init ${RDMA_VM_KERNEL_ARGS:-}"
    -serial "file:$OUT/console.log"
    -serial "file:$RUN/stdout.fifo"
    -serial "file:$RUN/stderr.fifo"
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
    -virtfs "local,path=$(q9 "$RUN/ctl"),mount_tag=ctl,security_model=none,readonly=on")
: >"$RUN/ctl/mounts"
for i in "${!MOUNTS[@]}"; do
    read -r _ mode path <<<"${MOUNTS[$i]}"
    ro=
    [ "$mode" = ro ] && ro=,readonly=on
    QEMU+=(-virtfs "local,path=$(q9 "$path"),mount_tag=share$i,security_model=none,multidevs=remap$ro")
    printf 'share%s %s %s\n' "$i" "$mode" "$path" >>"$RUN/ctl/mounts"
done

# Environment of the guest script (sourced by guest/stage2.sh).
{
    printf 'export RDMA_VM_REPO=%q RDMA_VM_OUT=%q RDMA_VM_TARGET_DIR=%q\n' "$REPO" "$OUT" "$TARGET"
    printf 'export RDMA_VM_VETH_ROUTING=%q\n' "${RDMA_VM_VETH_ROUTING:-1}"
    [ -n "$ZDIR" ] && printf 'export RDMA_VM_ZFS_ROOT=%q RDMA_VM_ZFS_BUILD=%q\n' "$ZDIR/root" "$(head -n1 "$ZDIR/build-info")"
    printf 'export PATH=%q LANG=C.UTF-8\n' "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    [ -n "${CARGO_TARGET_DIR:-}" ] && printf 'export CARGO_TARGET_DIR=%q\n' "$TARGET"
    for v in RUST_LOG RUST_BACKTRACE ${RDMA_VM_PASS_ENV:-}; do
        [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"
    done
    if [ -x "$GUEST_SCRIPT" ]; then
        printf 'GUEST_CMD=( %q' "$GUEST_SCRIPT"
    else
        printf 'GUEST_CMD=( bash %q' "$GUEST_SCRIPT"
    fi
    for a in "$@"; do printf ' %q' "$a"; done
    printf ' )\n'
} >"$RUN/ctl/env.sh"

# --- run ----------------------------------------------------------------------
mkfifo "$RUN/stdout.fifo" "$RUN/stderr.fifo"
cat "$RUN/stdout.fifo" &
CAT_OUT=$!
cat "$RUN/stderr.fifo" >&2 &
CAT_ERR=$!

left=$((TIMEOUT - (SECONDS - START)))
[ "$left" -ge 1 ] || left=1
log "booting $KVER ($VM_SMP vCPUs, ${VM_MEM} MiB, TCG); results in $OUT; timeout ${left}s"
BOOT=$SECONDS
set +e
timeout -k 5 "$left" "${QEMU[@]}" </dev/null >"$OUT/qemu.log" 2>&1 &
QPID=$!
wait "$QPID"
qrc=$?
set -e
QPID=
# Let the output readers drain; if qemu never opened a fifo they block: kill them.
for _ in $(seq 1 50); do
    kill -0 "$CAT_OUT" 2>/dev/null || kill -0 "$CAT_ERR" 2>/dev/null || break
    sleep 0.1
done
kill "$CAT_OUT" "$CAT_ERR" 2>/dev/null || true
wait "$CAT_OUT" "$CAT_ERR" 2>/dev/null || true
CAT_OUT= CAT_ERR=

show_log() {
    log "--- last lines of $OUT/console.log ---"
    tail -n 30 "$OUT/console.log" >&2 2>/dev/null || true
    if [ -s "$OUT/qemu.log" ]; then
        log "--- $OUT/qemu.log ---"
        tail -n 20 "$OUT/qemu.log" >&2
    fi
}
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    show_log
    log "TIMEOUT: the guest did not finish within RDMA_VM_TIMEOUT=${TIMEOUT}s; qemu was killed"
    exit "$EXIT_TIMEOUT"
fi
status=$(cat "$OUT/exit-status" 2>/dev/null || true)
if [ -z "$status" ]; then
    status=$(sed -n 's/^RDMA_VM_EXIT_STATUS=\([0-9]*\).*/\1/p' "$OUT/console.log" 2>/dev/null | tail -n1)
fi
case "$status" in
'' | *[!0-9]*)
    show_log
    die "the guest reported no exit status (qemu exit $qrc): harness or guest failure"
    ;;
esac
log "guest script exit status $status; VM ran $((SECONDS - BOOT))s, total $((SECONDS - START))s"
exit "$status"
