//! How rdpipe reaches hosts: one [`Launcher`] trait with an implementation
//! per way of starting agents, and self-install of the agent through it.
//!
//! - [`launcher`]: the trait, the agent handle, the seam's errors;
//! - [`ssh`]: `--launcher ssh`, master connections and their sessions;
//! - [`persist`]: `--persist`, masters that outlive a run;
//! - [`srun`]: `--launcher srun`, job steps of a Slurm allocation, their
//!   channels sealed through munge;
//! - [`local`]: local segments' agents;
//! - [`install`]: finding or uploading the agent binary on a host;
//! - [`command_line`]: the quoted remote command lines.
#![deny(missing_docs)]

pub mod command_line;
pub mod install;
pub mod launcher;
pub mod local;
pub mod persist;
pub mod srun;
pub mod ssh;

pub use launcher::{
    AgentHandle, AgentProgram, AgentStart, Boxed, LaunchCause, LaunchError, Launcher, LauncherKind,
    Reader, RemoteLauncher, ShellOutput, Spawned, WaitFuture, Writer,
};
pub use local::LocalLauncher;
pub use srun::SrunLauncher;
pub use ssh::{SshLauncher, MAX_PARALLEL_STARTS};

use std::path::PathBuf;

/// Where control sockets live: `$XDG_RUNTIME_DIR` when it is short, else `/tmp`.
pub fn runtime_dir() -> PathBuf {
    // sun_path is 108 bytes: keep the control sockets in a short directory.
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        let d = PathBuf::from(d);
        if d.as_os_str().len() < 40 && d.is_dir() {
            return d;
        }
    }
    PathBuf::from("/tmp")
}
