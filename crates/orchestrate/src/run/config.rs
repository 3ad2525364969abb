//! What rdpipe was asked to do ([`Config`], built from the command line), the
//! programs it runs locally ([`LocalExe`]) and why a run failed ([`RunError`]).

use super::verdict::{self, Verdict};
use rdpipe_plan::PlanError;
use rdpipe_wire::{Integrity, TransportPref};
use std::path::PathBuf;
use std::time::Duration;

/// Everything rdpipe was asked to do (built from the command line by the
/// `rdma-pipe` crate's `cli::pipe`).
#[derive(Debug, Clone)]
pub struct Config {
    /// The `HOST:CMD` arguments.
    pub segments: Vec<String>,
    /// Segments built by the caller (rdcp) instead of parsed from `segments`:
    /// a chain, fed by rdpipe's stdin unless it starts by reading (a file or
    /// a tree), and ending on rdpipe's stdout unless it ends by writing.
    pub prepared: Option<Vec<rdpipe_plan::Segment>>,
    /// The `--to HOST:CMD` sinks of a fan-out (chain relay), in order.
    pub sinks: Vec<String>,
    /// The `--from HOST:CMD` sources of a gather; `segments` are then its
    /// sink pipeline.
    pub sources: Vec<String>,
    /// How the sources are gathered (`--each`, `--tag`).
    pub gather: rdpipe_plan::GatherMode,
    /// `--spool SIZE[:DIR]`: each source's stream passes through a spool
    /// at the sink's host.
    pub spool: Option<rdpipe_control::SpoolSpec>,
    /// `rdpipe forward`: what to forward (the segments are then unused).
    pub forward: Option<rdpipe_plan::ForwardSpec>,
    /// `--min-ok N`: the run succeeds when at least N sinks (or sources)
    /// succeeded (default: all of them).
    pub min_ok: Option<usize>,
    /// `--replay-window`: bytes each relaying sink keeps for a re-link (0: off).
    pub replay_window: usize,
    /// `-n`: print the plan only.
    pub dry_run: bool,
    /// `-v` count: 1 per-hop reports and the bandwidth; 2 (`-vv`) debug log, also
    /// from the agents; 3 trace.
    pub verbose: u8,
    /// `-q`: no warnings (from the agents either); errors are still printed.
    pub quiet: bool,
    /// Draw the progress line (`--progress`, or stderr is a terminal and no `-q`).
    pub progress: bool,
    /// A log filter for the agents (rdpipe's `RUST_LOG`), overriding `verbose`.
    pub log: Option<String>,
    /// `-o` options for ssh.
    pub ssh_options: Vec<String>,
    /// `-F` file for ssh.
    pub ssh_config: Option<PathBuf>,
    /// `--data-host HOST=ADDR` values.
    pub data_host: Vec<String>,
    /// `--remote-bin DIR`.
    pub remote_bin: Option<String>,
    /// Install rdpipe's own binary as the agent on hosts without a usable rdrecv
    /// (not with `--no-install`; never with `--remote-bin`).
    pub install: bool,
    /// `--transport`.
    pub transport: TransportPref,
    /// `--integrity` / `--encrypt`, for every hop.
    pub integrity: Integrity,
    /// Chunk size in bytes.
    pub chunk_size: u32,
    /// Buffers in flight.
    pub slots: u32,
    /// Seconds to keep trying to connect.
    pub connect_timeout: u64,
    /// `--reconnect-timeout`: seconds a hop whose connection died tries to
    /// reconnect and resume, and an agent whose ssh session died waits to be
    /// re-attached (0: off).
    pub reconnect_timeout: u64,
    /// Seconds the authentication handshake may take.
    pub handshake_timeout: u64,
    /// `--rate-limit`, for every hop (each hop's sender paces).
    pub rate_limit: Option<rdpipe_transport::Rate>,
    /// `--compress`, for every hop (the sender of each hop compresses).
    pub compress: rdpipe_wire::Compress,
    /// SSH sessions per master connection.
    pub max_sessions: u32,
    /// `--direct`: `> FILE` segments are written with O_DIRECT.
    pub direct: bool,
    /// `--persist`: ssh masters outlive the run by this long after their last
    /// use, and a run finds and reuses them ([`rdpipe_launch::persist`]).
    pub persist: Option<Duration>,
    /// `--launcher`: how agents on other hosts start.
    pub launcher: rdpipe_launch::RemoteLauncher,
    /// `--jobid`: the Slurm allocation for `--launcher srun` (else
    /// `SLURM_JOB_ID`).
    pub jobid: Option<String>,
    /// `-v`'s closing lines (each hop, CPU, `Bandwidth`); off where the
    /// caller sums several runs up itself (`rdcp --streams`).
    pub summary: bool,
}

/// Where rdpipe finds the programs it runs locally.
#[derive(Debug, Clone)]
pub struct LocalExe {
    /// Run as `EXE --agent ...` for local segments and `EXE --ssh-guard ...` for
    /// masters (normally rdpipe itself).
    pub exe: PathBuf,
}

/// Why rdpipe failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The arguments do not make a pipeline.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The async runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The pipeline ran and failed: the verdict's lines and status.
    #[error("{}", .0.lines.join("; "))]
    Failed(Verdict),
}

impl RunError {
    /// rdpipe's exit status.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Plan(_) => verdict::EXIT_USAGE,
            RunError::Runtime(_) => verdict::EXIT_FAILED,
            RunError::Failed(v) => v.status,
        }
    }

    /// The error lines to print (none for a quiet failure such as a closed stdout).
    pub fn messages(&self) -> Vec<String> {
        match self {
            RunError::Failed(v) => v.lines.clone(),
            other => vec![other.to_string()],
        }
    }
}

#[cfg(test)]
impl Config {
    /// A run of `segments` with every other setting at a typical value.
    pub(crate) fn for_tests(segments: Vec<String>) -> Config {
        Config {
            prepared: None,
            segments,
            sinks: vec![],
            sources: vec![],
            gather: rdpipe_plan::GatherMode::Lines { tag: false },
            spool: None,
            forward: None,
            min_ok: None,
            replay_window: 0,
            dry_run: false,
            verbose: 0,
            quiet: false,
            progress: false,
            log: None,
            ssh_options: vec![],
            ssh_config: None,
            data_host: vec![],
            remote_bin: None,
            install: true,
            transport: TransportPref::Rdma,
            integrity: rdpipe_wire::Integrity::Encrypt,
            chunk_size: 1 << 20,
            slots: 2,
            connect_timeout: 30,
            reconnect_timeout: 60,
            handshake_timeout: 10,
            rate_limit: "16M".parse().ok(),
            compress: rdpipe_wire::Compress::Zstd(5),
            max_sessions: 10,
            direct: false,
            persist: None,
            launcher: Default::default(),
            jobid: None,
            summary: true,
        }
    }
}
