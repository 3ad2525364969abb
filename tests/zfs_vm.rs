//! ZFS replication for real: boots the Soft-RoCE guest with OpenZFS
//! (`RDMA_VM_ZFS=1 tests/rdma-vm/run-guest.sh`, which builds Debian's zfs-dkms
//! for the guest kernel on the host once and caches it, `tests/rdma-vm/zfs-build.sh`)
//! and runs `tests/rdma-vm/suite-zfs.sh` in the guest: `zfs send | rdpipe | zfs recv`
//! over RDMA between two pools, full, incremental, raw encrypted, resumed with
//! `zfs send -t`, and across a link flap, against the rdpipe that cargo built.
//!
//! Needs root and `qemu-system-x86_64` like `tests/rdma_vm.rs`, plus what the module
//! build needs (Debian's contrib component for zfs-dkms, gcc-12, make: all from
//! `scripts/install-deps`). Without them the test prints a loud `SKIPPED` line and
//! passes; with `RDMA_VM_REQUIRE=1` or `RDPIPE_REQUIRE_ALL=1` (CI) a skip, a
//! missing ZFS build included, is a failure.
//!
//! A test binary of its own: cargo runs test binaries one after another, so this
//! guest never runs beside the RDMA suite's guest or the time-bounded tests.
//! Cold cache: the module build takes minutes (`RDMA_VM_TIMEOUT` defaults to
//! 2400 s here); later runs reuse `$RDMA_VM_CACHE/zfs/`.

#[path = "integration/support/skip.rs"]
mod skip;

use skip::{env_is_1, is_root, loud};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The test's name in skip lines.
const NAME: &str = "zfs_vm (ZFS send/recv through rdpipe on Soft-RoCE)";

fn skip(reason: &str) {
    if env_is_1("RDMA_VM_REQUIRE") {
        panic!("zfs_vm: RDMA_VM_REQUIRE=1 but the ZFS guest suite cannot run: {reason}");
    }
    skip::skip(NAME, reason);
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

#[test]
fn zfs_replication_in_soft_roce_vm() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin_dir: PathBuf = Path::new(env!("CARGO_BIN_EXE_rdpipe"))
        .parent()
        .expect("binary has a directory")
        .to_path_buf();
    if !is_root() {
        return skip("not running as root (the harness exports / to the guest over 9p)");
    }
    let qemu = std::env::var("RDMA_VM_QEMU").unwrap_or_else(|_| "qemu-system-x86_64".into());
    if !on_path(&qemu) && !Path::new(&qemu).is_file() {
        return skip(&format!(
            "{qemu} not found (apt-get install qemu-system-x86)"
        ));
    }
    let target = bin_dir.parent().unwrap_or(&bin_dir).to_path_buf();
    let mut cmd = Command::new("bash");
    cmd.arg(repo.join("tests/rdma-vm/run-guest.sh"))
        .arg(repo.join("tests/rdma-vm/suite-zfs.sh"))
        .env("RDMA_VM_ZFS", "1")
        .env("RDMA_PIPE_BIN_DIR", &bin_dir)
        .env("RDMA_VM_TARGET_DIR", &target)
        .env("RDMA_VM_PASS_ENV", "RDMA_PIPE_BIN_DIR");
    // Two pools on file vdevs in the guest's RAM, beside a 256 MiB ARC.
    if std::env::var_os("RDMA_VM_MEM").is_none() {
        cmd.env("RDMA_VM_MEM", "3072");
    }
    // A cold cache builds the modules first (minutes on two loaded cores).
    if std::env::var_os("RDMA_VM_TIMEOUT").is_none() {
        cmd.env("RDMA_VM_TIMEOUT", "2400");
    }
    if env_is_1(skip::REQUIRE_ALL) {
        cmd.env("RDMA_VM_REQUIRE", "1");
    }
    let status = cmd.status().expect("cannot run bash");
    match status.code() {
        Some(0) => loud("zfs_vm: ZFS replication suite passed in the Soft-RoCE guest"),
        Some(77) => skip("the VM harness skipped (see its message above)"),
        other => panic!(
            "the ZFS suite failed in the Soft-RoCE guest (exit {other:?}); see the PASS/FAIL lines above"
        ),
    }
}
