//! Support for the integration tests, one concern per file: scratch
//! directories, test data, processes, the rdsend/rdrecv and rdpipe runners, real
//! sshd servers (on 127.0.0.1, or in network namespaces as root), a Slurm
//! cluster on those namespaces, a passive tap on a namespace's traffic, and
//! skips.
//! Everything started is torn down by Drop guards, also when a test fails.

pub mod data;
pub mod endpoint;
pub mod netns;
pub mod procs;
pub mod rdpipe;
pub mod scratch;
pub mod skip;
pub mod slurm;
pub mod ssh;
pub mod tap;

pub use data::*;
pub use endpoint::*;
pub use netns::*;
pub use procs::*;
pub use rdpipe::*;
pub use scratch::*;
pub use skip::*;
pub use slurm::*;
pub use ssh::*;
pub use tap::*;

/// Skips the test (see [`skip::skip`]) unless sshd and ssh are installed.
macro_rules! need_ssh {
    () => {
        if !$crate::support::have_ssh() {
            $crate::support::skip(
                &$crate::support::test_name(),
                "needs openssh-server and openssh-client installed",
            );
            return;
        }
    };
}
pub(crate) use need_ssh;

/// Skips the test unless it runs as root (`$why` says what for) with sshd and
/// ssh installed.
macro_rules! need_root {
    ($why:expr) => {
        if !$crate::support::is_root() {
            $crate::support::skip(
                &$crate::support::test_name(),
                &format!("needs root ({})", $why),
            );
            return;
        }
        $crate::support::need_ssh!();
    };
}
pub(crate) use need_root;

/// Skips the test unless it runs as root with sshd, ssh, Slurm (slurmctld,
/// slurmd, slurm-client) and munge installed.
macro_rules! need_slurm {
    () => {
        $crate::support::need_root!("network namespaces and Slurm's daemons");
        if !$crate::support::have_slurm() {
            $crate::support::skip(
                &$crate::support::test_name(),
                "needs slurmctld, slurmd, slurm-client and munge installed (scripts/install-deps)",
            );
            return;
        }
    };
}
pub(crate) use need_slurm;

/// The running test's name: libtest names each test's thread after it.
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}
