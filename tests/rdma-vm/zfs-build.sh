#!/usr/bin/env bash
# OpenZFS for the rdma-vm guest: builds Debian's zfs-dkms (bookworm, contrib)
# against the GUEST kernel's headers, on the host, without installing anything
# (apt-get download + dpkg-deb -x into the cache), and extracts the userland
# (zfsutils-linux and its libraries) beside it.  Called by run-guest.sh when
# RDMA_VM_ZFS=1; see tests/rdma-vm/README.md.
#
# usage: tests/rdma-vm/zfs-build.sh CACHE KVER
#
# Prints the build's directory on stdout:
#   CACHE/zfs/KVER+zfs-VERSION/
#     modules/*.ko     spl, znvpair, ..., zfs (debug info stripped)
#     modules/order    load order (dependencies first)
#     root/usr/...     zfs, zpool, zdb ... and libzfs & co. (merged /usr layout)
#     root/etc/zfs/    the package's /etc/zfs
#     build.log        configure + make output
# Built once per kernel and zfs version (.complete marks a finished build).
# Exit status: 0 built or cached; 77 a prerequisite is missing (no contrib
# component in apt, no gcc-12/make, a library the userland needs); 1 the
# download or the build failed.
set -euo pipefail

EXIT_SKIP=77
log() { printf 'rdma-vm zfs: %s\n' "$*" >&2; }
missing() { log "$*"; exit "$EXIT_SKIP"; }

[ $# = 2 ] || { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2; exit 2; }
CACHE=$1 KVER=$2
ZCACHE=$CACHE/zfs

cached_build() { # newest complete build for KVER, if any
    (cd "$ZCACHE" 2>/dev/null && ls -d "$KVER"+zfs-*/.complete 2>/dev/null) | sort -V | tail -n1 | cut -d/ -f1
}

ZVER=$(apt-cache policy zfs-dkms 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" {print $2; exit}' || true)
if [ -z "$ZVER" ]; then
    old=$(cached_build || true)
    if [ -n "$old" ]; then
        log "WARNING: apt knows no zfs-dkms; using the cached $old"
        echo "$ZCACHE/$old"
        exit 0
    fi
    missing "apt knows no zfs-dkms: enable Debian's contrib component and apt-get update (scripts/install-deps does both)"
fi
DIR=$ZCACHE/$KVER+zfs-$ZVER
if [ -e "$DIR/.complete" ]; then
    echo "$DIR"
    exit 0
fi

for tool in gcc-12 make apt-get dpkg-deb modinfo strip; do
    command -v "$tool" >/dev/null || missing "'$tool' not found (scripts/install-deps; the guest kernel is built with gcc-12)"
done

T0=$SECONDS
tmp=$ZCACHE/tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp/deb" "$tmp/hdr" "$tmp/out/modules" "$tmp/out/root"

# --- downloads -----------------------------------------------------------------
log "building OpenZFS $ZVER for the guest kernel $KVER into $DIR (once)"
userland=(zfsutils-linux libzfs4linux libzpool5linux libnvpair3linux libuutil3linux)
(cd "$tmp/deb" && apt-get -q -o APT::Sandbox::User=root download "zfs-dkms=$ZVER" \
    "linux-headers-$KVER" "${userland[@]}" >&2) || { log "apt-get download failed"; exit 1; }
# linux-headers-KVER needs its -common sibling and linux-kbuild-X.Y (same source
# version): take their names from its Depends.
hdeps=$(dpkg-deb -f "$tmp/deb/linux-headers-${KVER}_"*.deb Depends | tr ',' '\n' \
    | awk '{print $1}' | grep -E '^linux-(headers-.*-common|kbuild-)' || true)
[ -n "$hdeps" ] || { log "cannot read the dependencies of linux-headers-$KVER"; exit 1; }
# shellcheck disable=SC2086
(cd "$tmp/deb" && apt-get -q -o APT::Sandbox::User=root download $hdeps >&2) \
    || { log "apt-get download $hdeps failed"; exit 1; }

# --- kernel headers: extracted, their Makefile pointed at the extracted -common tree
for d in "$tmp/deb"/linux-headers-*.deb "$tmp/deb"/linux-kbuild-*.deb "$tmp/deb"/zfs-dkms_*.deb; do
    dpkg-deb -x "$d" "$tmp/hdr"
done
KOBJ=$tmp/hdr/usr/src/linux-headers-$KVER
[ -f "$KOBJ/Makefile" ] || { log "no $KOBJ/Makefile in linux-headers-$KVER"; exit 1; }
KSRC=$(sed -n 's#^include /usr/src/\(linux-headers-[^/]*\)/Makefile$#\1#p' "$KOBJ/Makefile")
[ -n "$KSRC" ] && [ -d "$tmp/hdr/usr/src/$KSRC" ] || { log "unexpected $KOBJ/Makefile: $(cat "$KOBJ/Makefile")"; exit 1; }
KSRC=$tmp/hdr/usr/src/$KSRC
sed -i "s#^include /usr/src/linux-headers-[^/]*/Makefile\$#include $KSRC/Makefile#" "$KOBJ/Makefile"
ZSRC=$(ls -d "$tmp/hdr/usr/src/zfs-"* | head -n1)
[ -x "$ZSRC/configure" ] || { log "zfs-dkms has no configure script"; exit 1; }

# --- modules -------------------------------------------------------------------
jobs=$(nproc 2>/dev/null || echo 2)
BLOG=$tmp/out/build.log
(
    cd "$ZSRC"
    ./configure --with-config=kernel --with-linux="$KSRC" --with-linux-obj="$KOBJ" &&
        make -j"$jobs" -C module
) >"$BLOG" 2>&1 || {
    log "the OpenZFS module build failed; last lines of $BLOG:"
    tail -n 40 "$BLOG" >&2
    cp "$BLOG" "$ZCACHE/build-failed-$KVER+zfs-$ZVER.log" 2>/dev/null || true
    exit 1
}
mapfile -t kos < <(find "$ZSRC/module" -name '*.ko')
[ ${#kos[@]} -gt 0 ] || { log "the build produced no .ko"; exit 1; }
for ko in "${kos[@]}"; do
    v=$(modinfo -F vermagic "$ko" | awk '{print $1}')
    [ "$v" = "$KVER" ] || { log "$ko: vermagic $v, not $KVER"; exit 1; }
    strip --strip-debug -o "$tmp/out/modules/$(basename "$ko")" "$ko"
done
# Load order: a module after everything it depends on (modinfo depends).
order=() left=()
for ko in "$tmp/out/modules"/*.ko; do left+=("$(basename "$ko" .ko)"); done
while [ ${#left[@]} -gt 0 ]; do
    progress= next=()
    for m in "${left[@]}"; do
        ok=1
        for dep in $(modinfo -F depends "$tmp/out/modules/$m.ko" | tr ',' ' '); do
            [ -f "$tmp/out/modules/$dep.ko" ] || continue # an in-kernel module
            [[ " ${order[*]} " == *" $dep "* ]] || ok=
        done
        if [ -n "$ok" ]; then order+=("$m") progress=1; else next+=("$m"); fi
    done
    [ -n "$progress" ] || { log "circular module dependencies: ${next[*]}"; exit 1; }
    left=("${next[@]}")
done
printf '%s.ko\n' "${order[@]}" >"$tmp/out/modules/order"
# Modules of the running kernel the zfs modules need (none on Debian's 6.1:
# zlib is built in), for the initramfs.
for m in "${order[@]}"; do
    for dep in $(modinfo -F depends "$tmp/out/modules/$m.ko" | tr ',' ' '); do
        [ -f "$tmp/out/modules/$dep.ko" ] || echo "$dep"
    done
done | sort -u >"$tmp/out/modules/kernel-deps"

# --- userland --------------------------------------------------------------------
u=$tmp/userland
mkdir -p "$u"
for p in "${userland[@]}"; do dpkg-deb -x "$tmp/deb/${p}_"*.deb "$u"; done
# Merged-/usr layout (/sbin and /lib are links into /usr on bookworm), only
# what the commands need: the binaries, the libraries, /etc/zfs.
# (bin/zfs is a link to /sbin/zfs.)
mkdir -p "$tmp/out/root/usr/sbin" "$tmp/out/root/usr/bin" "$tmp/out/root/usr/lib" "$tmp/out/root/etc"
for d in sbin usr/sbin bin usr/bin lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu; do
    if [ -d "$u/$d" ]; then
        mkdir -p "$tmp/out/root/usr/${d#usr/}"
        cp -a "$u/$d/." "$tmp/out/root/usr/${d#usr/}/"
    fi
done
if [ -d "$u/etc/zfs" ]; then cp -a "$u/etc/zfs" "$tmp/out/root/etc/"; fi
for b in zfs zpool; do
    [ -x "$tmp/out/root/usr/sbin/$b" ] || { log "zfsutils-linux has no $b"; exit 1; }
    nf=$(LD_LIBRARY_PATH=$tmp/out/root/usr/lib/x86_64-linux-gnu ldd "$tmp/out/root/usr/sbin/$b" | grep 'not found' || true)
    [ -z "$nf" ] || missing "$b needs libraries this host lacks (scripts/install-deps): $nf"
done
{
    echo "kernel $KVER, zfs-dkms $ZVER"
    for d in "$tmp/deb"/*.deb; do dpkg-deb -f "$d" Package Version | paste -sd' '; done
    echo "module build: $((SECONDS - T0)) s"
} >"$tmp/out/build-info"
touch "$tmp/out/.complete"
rm -rf "$DIR"
mv "$tmp/out" "$DIR"
log "OpenZFS $ZVER modules and userland ready in $DIR ($((SECONDS - T0)) s)"
echo "$DIR"
