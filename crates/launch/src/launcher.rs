//! The seam between the conductor and the ways agents get started: one
//! [`Launcher`] trait, implemented for ssh ([`crate::ssh::SshLauncher`]),
//! srun ([`crate::srun::SrunLauncher`]) and local segments
//! ([`crate::local::LocalLauncher`]). The conductor prepares the hosts,
//! starts one agent per segment, runs the self-install probe and upload
//! through it and closes it, and never asks which one it holds.

use rdpipe_control::seal::Sealer;
use rdpipe_control::AgentArgs;
use rdpipe_plan::{Host, RemoteHost};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// A future a launcher returns (boxed: the trait is used as `dyn Launcher`).
pub type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An agent's control channel (its stdin).
pub type Writer = Box<dyn AsyncWrite + Unpin + Send>;
/// An agent's stdout or stderr.
pub type Reader = Box<dyn AsyncRead + Unpin + Send>;
/// Waits for an agent's exit: (status, description). Only awaited after its
/// stdout and stderr reached end of file: with native mux, finishing the wait
/// closes the mux session, and the master then drops whatever output it had
/// not yet passed on.
pub type WaitFuture = Boxed<'static, (Option<i32>, String)>;

/// Which launcher an error or a plan line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherKind {
    /// `--launcher ssh`.
    Ssh,
    /// `--launcher srun`.
    Srun,
    /// Local segments' agents.
    Local,
}

impl std::fmt::Display for LauncherKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LauncherKind::Ssh => "ssh",
            LauncherKind::Srun => "srun",
            LauncherKind::Local => "local",
        })
    }
}

/// How agents on other hosts are started (`--launcher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoteLauncher {
    /// One OpenSSH master per host, a session per agent.
    #[default]
    Ssh,
    /// One `srun` job step per agent, in the current Slurm allocation.
    Srun,
}

impl std::fmt::Display for RemoteLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RemoteLauncher::Ssh => "ssh",
            RemoteLauncher::Srun => "srun",
        })
    }
}

/// A started agent.
pub struct AgentHandle {
    /// Its control channel.
    pub stdin: Writer,
    /// Its control lines.
    pub stdout: Reader,
    /// Its stderr, when forwarded (remote, or local with a progress line).
    pub stderr: Option<Reader>,
    /// A local process's pid (the agent's, or its `srun`'s).
    pub pid: Option<u32>,
    /// Its exit.
    pub wait: WaitFuture,
}

/// What the conductor asks a launcher to start for one segment.
#[derive(Debug, Clone)]
pub struct AgentStart {
    /// The segment's index in the plan.
    pub seg: usize,
    /// Where it runs.
    pub host: Host,
    /// What runs as the agent.
    pub program: AgentProgram,
    /// The agent's settings (its command line is `--agent` and
    /// [`AgentArgs::to_argv`]); a launcher may add its own (srun's
    /// `--munge`).
    pub settings: AgentArgs,
    /// The environment a remote agent gets (`env K=V` on its command line).
    pub env: Vec<(String, String)>,
    /// Whether a local agent's stderr is piped to rdpipe (with a progress
    /// line) rather than inherited.
    pub pipe_stderr: bool,
}

/// What a launcher runs as an agent.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentProgram {
    /// This binary: self-install's choice, `rdrecv` from PATH, `DIR/rdrecv`
    /// (`--remote-bin`), or this executable for a local agent.
    Bin(String),
    /// Self-install's fast path ([`crate::install::start`]): the host runs
    /// the agent it already has once it checked that binary, or answers the
    /// probe instead ([`Spawned::Probed`]).
    Checked {
        /// The cache entry's name.
        entry: String,
        /// This binary's SHA-256 (lowercase hex).
        sha256: String,
        /// How long the check may take.
        limit: std::time::Duration,
    },
}

/// A started agent and how its control channel is to be used.
pub enum Spawned {
    /// The channel is ready; on a launcher whose channel is plain (srun's
    /// step I/O), every line goes through `sealer`.
    Ready {
        /// The agent.
        handle: AgentHandle,
        /// The binary the host chose to run, for [`AgentProgram::Checked`].
        ran: Option<String>,
        /// The sealer of every line to it, where the channel needs one
        /// (boxed: its cipher state is large).
        sealer: Option<Box<Sealer>>,
    },
    /// The agent runs but its channel could not be sealed: no key may go
    /// down it, and it ends when its stdin closes.
    Refused {
        /// The agent.
        handle: AgentHandle,
        /// What rdpipe found (none: the agent's own report or exit tells).
        error: Option<LaunchError>,
        /// The line the agent sent instead of its answer (its `FAIL`), to be
        /// handled as any other line of it.
        replay: Option<String>,
    },
    /// For [`AgentProgram::Checked`]: the host has no agent it could run
    /// at once, and this is its answer to the probe; nothing runs.
    Probed(ShellOutput),
}

/// What a remote `sh -c SCRIPT sh ARGS...` gave.
#[derive(Debug, Clone)]
pub struct ShellOutput {
    /// Its exit status.
    pub code: Option<i32>,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

impl ShellOutput {
    /// From a finished process's output.
    pub fn of(o: std::process::Output) -> ShellOutput {
        ShellOutput {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// stderr's last line, else the exit status: for messages.
    pub fn why(&self) -> String {
        match self.stderr.lines().map(str::trim).rfind(|l| !l.is_empty()) {
            Some(l) => l.to_string(),
            None => match self.code {
                Some(c) => format!("exit status {c}"),
                None => "no exit status".to_string(),
            },
        }
    }
}

/// Why a launcher could not do what it was asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{cause}", host.as_ref().map(|h| format!("{h}: ")).unwrap_or_default())]
pub struct LaunchError {
    /// The host it concerns (as written), when one.
    pub host: Option<String>,
    /// The segment it concerns, when one.
    pub seg: Option<usize>,
    /// The launcher.
    pub launcher: LauncherKind,
    /// What went wrong.
    pub cause: LaunchCause,
}

/// What went wrong at the launcher seam.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LaunchCause {
    /// The ssh master connection could not be made.
    #[error("{0}")]
    Connect(String),
    /// A session or process for the agent or a shell line could not start.
    #[error("{0}")]
    Start(String),
    /// The Slurm allocation is missing, or this host is not one of its
    /// nodes, or munge does not work here.
    #[error("{0}")]
    Allocation(String),
    /// The agent's channel could not be sealed.
    #[error("{0}")]
    Seal(String),
    /// A shell line's session or step failed.
    #[error("{0}")]
    Shell(String),
    /// A local resource (a directory, a task) failed.
    #[error("{0}")]
    Local(String),
}

impl LaunchError {
    /// An error of `launcher` about `host` (none: this host's).
    pub fn new(launcher: LauncherKind, host: Option<&str>, cause: LaunchCause) -> LaunchError {
        LaunchError {
            host: host.map(str::to_string),
            seg: None,
            launcher,
            cause,
        }
    }

    /// The same, about segment `seg`.
    pub fn at(mut self, seg: usize) -> LaunchError {
        self.seg = Some(seg);
        self
    }
}

/// One way of starting agents and running shell lines on hosts.
///
/// Held as `Arc<dyn Launcher>`: the hosts' tasks each hold it while they
/// run, so what `prepare` makes lives behind the launcher's own lock.
pub trait Launcher: Send + Sync {
    /// Which one this is.
    fn kind(&self) -> LauncherKind;

    /// How `-n` says a segment on `host` is started (`ssh user@h port 2`,
    /// `srun job step on n1`).
    fn describe_host(&self, host: &Host) -> String;

    /// `-n`'s section on the connections (or steps) the run would open for
    /// these remote hosts and their segments; empty when there are none.
    fn describe_hosts(&self, hosts: &[(RemoteHost, Vec<usize>)]) -> String;

    /// The data address of `host` when `--data-host` does not name one
    /// (ssh's `HostName`, Slurm's `NodeAddr`).
    fn data_address(&self, host: &RemoteHost) -> String;

    /// How `-n` and `-v` name where [`Launcher::data_address`]'s addresses
    /// come from (`ssh`, `slurm`).
    fn address_origin(&self) -> &'static str;

    /// Readies the hosts (ssh masters, the allocation checked): every host
    /// that cannot be reached is one error, with the first of its segments.
    fn prepare<'a>(
        &'a self,
        hosts: &'a [(RemoteHost, Vec<usize>)],
    ) -> Boxed<'a, Result<(), Vec<LaunchError>>>;

    /// Runs `line` (a complete `sh` command line) on `host` for segment
    /// `seg`, `input` on its stdin: self-install's probe and upload.
    fn shell(
        &self,
        seg: usize,
        host: &RemoteHost,
        line: String,
        input: Option<Arc<Vec<u8>>>,
    ) -> Boxed<'static, Result<ShellOutput, LaunchError>>;

    /// Starts one segment's agent and readies its control channel.
    fn spawn_agent(&self, start: AgentStart) -> Boxed<'static, Result<Spawned, LaunchError>>;

    /// Whether an agent it started outlives a lost channel and can be
    /// reached again through [`Launcher::reattach`] (the agent is then
    /// started with `--reattach`).
    fn reattachable(&self) -> bool {
        false
    }

    /// Opens a new channel to segment `seg`'s host and runs `line` there
    /// (`rdrecv --agent-attach PATH`), first re-establishing the connection
    /// to the host if it was lost, or if it was made before `stale` (a
    /// connection that stalled without breaking), retrying with backoff
    /// until `deadline`.
    fn reattach<'a>(
        &'a self,
        seg: usize,
        host: &'a RemoteHost,
        line: String,
        deadline: std::time::Instant,
        stale: Option<std::time::Instant>,
    ) -> Boxed<'a, Result<AgentHandle, LaunchError>> {
        let _ = (line, deadline, stale);
        Box::pin(async move {
            Err(LaunchError::new(
                self.kind(),
                Some(&host.spec),
                LaunchCause::Start(format!("{} cannot re-attach to an agent", self.kind())),
            )
            .at(seg))
        })
    }

    /// Should rdpipe die without closing (SIGKILL), runs `line` on segment
    /// `seg`'s host with `input` on its stdin before the connection goes:
    /// how a re-attachable agent is told to end at once rather than wait
    /// out its re-attach time.
    fn farewell(&self, seg: usize, line: String, input: String) {
        let _ = (seg, line, input);
    }

    /// Ends what [`Launcher::prepare`] started (masters closed, leftover
    /// steps cancelled).
    fn close(&self) -> Boxed<'_, ()>;
}

/// An agent's command line: `--agent` and its settings.
pub fn agent_argv(settings: &AgentArgs) -> Vec<String> {
    std::iter::once("--agent".to_string())
        .chain(settings.to_argv())
        .collect()
}
