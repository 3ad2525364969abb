//! A test that cannot run here (no root, no sshd, no qemu) says so where a person
//! sees it, or fails when the run must be complete.
//!
//! libtest captures `print!`/`eprint!` of passing tests, so a skip announced
//! with `eprintln!` would pass silently. [`loud`] writes to the process's real
//! stderr (`std::io::stderr()`, which the capture does not intercept) instead.
//! With `RDPIPE_REQUIRE_ALL=1` (what `.ci/run` sets) every skip is a failure.
//!
//! Shared by the `integration` test crate and `tests/rdma_vm.rs`, so it needs
//! nothing else from `support`.

use std::io::Write;

/// The variable that turns every skip into a failure.
pub const REQUIRE_ALL: &str = "RDPIPE_REQUIRE_ALL";

/// Writes `*** msg ***` to the real stderr, past libtest's output capture.
pub fn loud(msg: &str) {
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("\n*** {msg} ***\n").as_bytes());
}

/// Whether the environment variable `var` is `1`.
pub fn env_is_1(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == "1")
}

/// Skips `test` because of `why`: a loud `SKIPPED` line, or a panic when
/// `RDPIPE_REQUIRE_ALL=1`. The caller returns from the test after it.
pub fn skip(test: &str, why: &str) {
    if env_is_1(REQUIRE_ALL) {
        panic!("{test}: {REQUIRE_ALL}=1 but this test cannot run here: {why}");
    }
    loud(&format!("SKIPPED: {test}: {why}"));
}

/// Whether we are root (network namespaces and the VM harness need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}
