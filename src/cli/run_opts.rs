//! The options rdpipe and rdcp share: how to reach the hosts, how each hop
//! moves and protects the data, what is reported. Each tool flattens
//! [`RunOpts`] into its own flags and adds what it runs.

use crate::cli::common::{parse_size, parse_slots, IntegrityArg, Transport};
use rdpipe_orchestrate::run::Config;
use std::path::PathBuf;

/// `RDPIPE_DEBUG` (set and not empty or `0`): the older spelling of `-vv`.
pub const DEBUG_ENV: &str = "RDPIPE_DEBUG";

/// The run options (see each flag).
#[derive(Debug, Clone, clap::Args)]
pub struct RunOpts {
    /// Each sending end of a hop keeps the last SIZE bytes it sent (ordinary
    /// memory, allocated as the stream passes) until its receiver has them,
    /// so that a hop whose connection dies resumes on a new one
    /// (--reconnect-timeout); with --to, each relaying sink's window also
    /// lets the chain re-link around the next sink when its host dies: the
    /// relay connects straight to the sink after it, which resumes where it
    /// was, byte-exact and verified. A receiver further behind than that
    /// fails with a message saying so. 0 turns re-linking off (the sinks
    /// after a dead one fail), lets a hop resume only when nothing was in
    /// flight, and lets relays forward zero-copy over RDMA (a relay that
    /// keeps a window copies).
    #[arg(long, value_name = "SIZE", default_value = "32M",
          value_parser = crate::cli::common::parse_window)]
    pub replay_window: usize,

    /// Print the plan (segments, hosts, who listens, who connects to whom) and run
    /// nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,

    /// Print each hop's transport, byte count and checksum, and the final
    /// `Bandwidth X.XXX GB/s`, on stderr. `-vv` adds a debug log of the set-up and
    /// teardown (ssh masters, agents, control lines; the hosts' endpoints log
    /// theirs too), `-vvv` a trace; RUST_LOG overrides both.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// No progress line (unless --progress is given) and no warnings (from any
    /// host); errors are still printed.
    #[arg(short, long)]
    pub quiet: bool,

    /// Show a live progress line on stderr: bytes arrived at the end of the
    /// pipeline, rate, elapsed time; when the source is a `< FILE` segment or a
    /// regular file on stdin, the source's bytes sent, rate, percentage and ETA.
    /// On by default when stderr is a terminal.
    #[arg(long)]
    pub progress: bool,

    /// An option for ssh, as for `ssh -o` (repeatable), e.g. `-o Port=2222`. Applies
    /// to every host; host-specific settings belong in the ssh configuration.
    #[arg(short = 'o', long = "ssh-option", value_name = "OPTION")]
    pub ssh_options: Vec<String>,

    /// An ssh configuration file instead of ~/.ssh/config, as for `ssh -F`.
    #[arg(short = 'F', long = "ssh-config", value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,

    /// The address the other hosts use to reach HOST's data endpoints, e.g. an
    /// IPoIB address (repeatable), used as given. Default: HOST's HostName in the
    /// ssh configuration, else HOST itself; when that is not one of the
    /// RDMA-capable addresses HOST's endpoint reports (netdevs of ACTIVE RDMA
    /// ports), one of those on a subnet the connecting host shares is used instead,
    /// else one the connecting host routes to over its RDMA-capable addresses and
    /// that answers (not with --transport tcp; -v says which).
    #[arg(long, value_name = "HOST=ADDR")]
    pub data_host: Vec<String>,

    /// Directory holding rdrecv on the remote hosts (default: found in PATH, else
    /// installed by rdpipe itself). rdpipe runs DIR/rdrecv and installs nothing.
    #[arg(long, value_name = "DIR")]
    pub remote_bin: Option<String>,

    /// Do not install rdpipe's own binary on hosts without a usable rdrecv: such
    /// a host fails the pipeline (exit 127 when rdrecv is missing). By default
    /// rdpipe copies itself over the SSH connection into
    /// ~/.cache/rdma-pipe/VERSION-HASH/ there (checked by checksum, reused by
    /// later runs) when rdrecv is not in PATH or speaks another agent protocol,
    /// after checking the host's architecture and glibc version.
    #[arg(long)]
    pub no_install: bool,

    /// Transport for the data.
    #[arg(long, value_enum, default_value_t = Transport::Auto)]
    pub transport: Transport,

    /// Bytes per chunk, e.g. 256K, 1M.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
    pub chunk_size: u32,

    /// Buffers in flight per transfer.
    #[arg(long, value_name = "N", default_value = "2", value_parser = parse_slots)]
    pub slots: u32,

    /// Seconds to keep trying to connect (ssh and data connections).
    #[arg(long, value_name = "SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub connect_timeout: u64,

    /// Seconds a hop whose data connection died (a reset, a NAT that forgot it,
    /// an RDMA queue pair in the error state) keeps trying to reconnect and
    /// resume the stream from where its receiver is, out of the sender's
    /// --replay-window; after that the run fails naming the hop. Also how long
    /// an agent whose ssh session died keeps its command running while rdpipe
    /// connects again and re-attaches to it (--launcher ssh). 0: off.
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(0..=86400))]
    pub reconnect_timeout: u64,

    /// Seconds the authentication handshake of each transfer may take.
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub handshake_timeout: u64,

    /// How each hop is protected (`auto`: `encrypt` where rdpipe's host has AES
    /// instructions, else `mac`; see docs/security.md).
    #[arg(long, value_enum, default_value_t = IntegrityArg::Auto)]
    pub integrity: IntegrityArg,

    /// Encrypt every hop (AES-256-GCM, keys from each hop's handshake), even
    /// where rdpipe's host has no AES instructions.
    #[arg(long)]
    pub encrypt: bool,

    /// Move at most RATE bytes per second through every hop, as `pv -L`: e.g.
    /// 500M, 1.5G/s, 64KiB/s (K, M, G, T are 1024-based; `B` and `/s` optional).
    /// Each hop's sender paces (the endpoints on the hosts and rdpipe's own).
    #[arg(long, value_name = "RATE")]
    pub rate_limit: Option<rdpipe_transport::Rate>,

    /// Compress every hop, each chunk on its own with zstd, before it is
    /// sealed: `auto` (the bare flag) adapts the level to what binds on each
    /// hop, the link or the CPU, and stops trying on data that does not
    /// compress; `zstd:LEVEL` (1-19; `zstd` is level 3) is fixed. Each hop's
    /// sender compresses and its receiver decompresses (a relay host
    /// decompresses and compresses again); the setting is the same for every
    /// hop.
    #[arg(long, value_name = "MODE", default_value = "none", num_args = 0..=1,
          require_equals = true, default_missing_value = "auto")]
    pub compress: rdpipe_wire::Compress,

    /// Write a JSON report of the run to FILE at the end, also when it fails or is
    /// interrupted: per hop the transport, bytes, checksum, seconds and rate; per
    /// segment the host, command and exit status or signal; the verdict.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// SSH sessions per master connection (sshd's MaxSessions, 10 by default); a
    /// host with more segments gets more connections.
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_sessions: u32,

    /// Write the `> FILE` and `>> FILE` segments with O_DIRECT, past the page
    /// cache (as `rdrecv --direct`): for big sequential streams to fast disks. A
    /// filesystem that refuses it is written the usual way (-v notes it); `--to`
    /// sinks' `> FILE` too. rdcp reads and writes every file of 1 MiB or more
    /// so, on both hosts.
    #[arg(long)]
    pub direct: bool,

    /// Keep the ssh connections to the hosts open for SECS after the run
    /// (OpenSSH's ControlPersist; sockets in a private directory of this user),
    /// and reuse those a run with the same ssh options left: a run to the same
    /// hosts within SECS starts without logging in again. `rdpipe
    /// --persist-stop` closes them all.
    #[arg(long, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=604800))]
    pub persist: Option<u64>,

    /// How agents on other hosts start: `ssh` (a master connection per host)
    /// or `srun` (a Slurm job step per agent in the current allocation, on
    /// the node named by HOST; for clusters where nodes are reached through
    /// the workload manager).
    #[arg(
        long,
        value_enum,
        value_name = "HOW",
        default_value = "ssh",
        env = "RDPIPE_LAUNCHER"
    )]
    pub launcher: LauncherArg,

    /// The Slurm job whose allocation `--launcher srun` runs steps in
    /// (default: SLURM_JOB_ID, set inside salloc and sbatch).
    #[arg(long, value_name = "JOB")]
    pub jobid: Option<String>,
}

/// `--launcher`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherArg {
    /// OpenSSH.
    Ssh,
    /// Slurm's srun.
    Srun,
}

impl RunOpts {
    /// The `-v` count, at least 2 (`-vv`) when `RDPIPE_DEBUG` is set.
    pub fn verbosity(&self) -> u8 {
        let debug_env = std::env::var_os(DEBUG_ENV).is_some_and(|v| !v.is_empty() && v != "0");
        if debug_env {
            self.verbose.max(2)
        } else {
            self.verbose
        }
    }

    /// The orchestrator's configuration, with no segments yet.
    pub fn config(self) -> Config {
        let verbose = self.verbosity();
        Config {
            progress: crate::cli::progress::wanted(self.progress, self.quiet),
            log: std::env::var("RUST_LOG")
                .ok()
                .filter(|f| !f.trim().is_empty()),
            quiet: self.quiet,
            segments: vec![],
            prepared: None,
            sinks: vec![],
            sources: vec![],
            gather: rdpipe_plan::GatherMode::Lines { tag: false },
            spool: None,
            forward: None,
            min_ok: None,
            replay_window: self.replay_window,
            dry_run: self.dry_run,
            verbose,
            ssh_options: self.ssh_options,
            ssh_config: self.ssh_config,
            data_host: self.data_host,
            remote_bin: self.remote_bin,
            install: !self.no_install,
            transport: self.transport.into(),
            integrity: crate::cli::common::integrity(self.integrity, self.encrypt),
            chunk_size: self.chunk_size,
            slots: self.slots,
            connect_timeout: self.connect_timeout,
            reconnect_timeout: self.reconnect_timeout,
            handshake_timeout: self.handshake_timeout,
            rate_limit: self.rate_limit,
            compress: self.compress,
            max_sessions: self.max_sessions,
            direct: self.direct,
            persist: self.persist.map(std::time::Duration::from_secs),
            launcher: match self.launcher {
                LauncherArg::Ssh => rdpipe_launch::RemoteLauncher::Ssh,
                LauncherArg::Srun => rdpipe_launch::RemoteLauncher::Srun,
            },
            jobid: self.jobid,
            summary: true,
        }
    }
}

/// Runs `config` (rdpipe's or rdcp's) and writes the `--json` report to
/// `json` if asked, also for a failed run; the outcome as the tools end with.
pub fn run_and_report(
    config: Config,
    exe: std::path::PathBuf,
    json: Option<PathBuf>,
) -> Result<(), crate::cli::Failure> {
    let (outcome, report) =
        rdpipe_orchestrate::run::run_reported(config, rdpipe_orchestrate::run::LocalExe { exe });
    let outcome = outcome.map_err(|e| crate::cli::Failure {
        messages: e.messages(),
        code: e.exit_code(),
    });
    match (json, report) {
        (Some(path), Some(report)) => {
            match (rdpipe_report::write_json_atomic(&path, &report), outcome) {
                (Ok(()), outcome) => outcome,
                (Err(e), Ok(())) => Err(crate::cli::fail(1, e)),
                (Err(e), Err(mut f)) => {
                    f.messages.push(e.to_string());
                    Err(f)
                }
            }
        }
        _ => outcome,
    }
}
