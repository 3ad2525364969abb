//! `rdpipe`'s flags (clap derive) and its entry point. The work is done by the
//! `rdpipe-orchestrate` crate; this file only turns flags into its `Config`.

use crate::cli::common::{parse_size, parse_slots, Failure, IntegrityArg, Transport};
use clap::Parser;
use rdpipe_orchestrate::report::write_json_atomic;
use rdpipe_orchestrate::run::{Config, LocalExe};
use std::path::PathBuf;

/// Examples for `--help` and the man page.
pub const EXAMPLES: &str = "\
Examples:
  # hello -> OLLEH, through two hosts:
  echo hello | rdpipe host1:'tr [:lower:] [:upper:]' host2:'rev'

  # ZFS replication, the snapshot stream going straight from fileserver to backup:
  rdpipe backup@fileserver:'zfs send -I tank/media@last tank/media@head' backup:'zfs recv tank-backup/media'

  # raw video to a playback host:
  ffmpeg -i in.mkv -f rawvideo -pix_fmt yuv420p - | rdpipe playback:'ffplay -f rawvideo -pixel_format yuv420p -video_size 1920x1080 -'

  # bandwidth check between two hosts (page-cached file to /dev/null):
  rdpipe -v host1:'< /scratch/zeroes' host2:'> /dev/null'

  # a file from host1, compressed on host2, stored on host3 (no stdout):
  rdpipe host1:'< /data/db.dump' host2:'zstd -T0' host3:'> /backup/db.dump.zst'

  # start and end locally, over an IPoIB address for host2's data:
  tar c dir | rdpipe --data-host host2=10.0.0.2 host2:'gzip' -:'cat > dir.tgz'

  # copy a file with a progress line, then debug a failing pipeline:
  rdpipe --progress host1:'< /data/db.dump' host2:'> /backup/db.dump'
  rdpipe -vv host1:'< /data/db.dump' host2:'zstd -T0 > /backup/db.zst'

  # one ZFS snapshot stream to two backup hosts, sent once (chain relay):
  rdpipe src:'zfs send -I tank/x@a tank/x@b' --to backup1:'zfs recv pool/x' --to backup2:'zfs recv pool/x'

  # copy an image to every node; pass if at least 3 of 4 got it:
  rdpipe --min-ok 3 -v head:'< /img/os.img' --to n1:'> /img/os.img' --to n2:'> /img/os.img' --to n3:'> /img/os.img' --to n4:'> /img/os.img'

  # show what would run:
  rdpipe -n host1:cat host2:cat";

/// rdpipe's exit statuses, for the man page.
pub const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Every command and every transfer succeeded (each hop verified by byte count and checksum)."),
    ("1..125", "The status of the failing command (the rightmost one, as with set -o pipefail), or 1 for any other failure: ssh, a transfer, a file, or a command that stopped reading its input early (head -c N: its output is delivered, the stream before it was cut short)."),
    ("2", "Bad arguments: malformed HOST:CMD (empty host or command, unbalanced quotes), out-of-range option."),
    ("127", "rdrecv was not found on a host and rdpipe could not install itself there (another architecture, an older glibc) or was told not to (--no-install, --remote-bin): install rdma-pipe there or pass --remote-bin."),
    ("130, 143", "Interrupted by SIGINT or SIGTERM; the whole pipeline was stopped."),
    ("141", "rdpipe's standard output was closed (like a shell pipeline's SIGPIPE); no message."),
];

/// Unix pipes between machines, over RDMA or TCP, set up over SSH.
///
/// Runs each HOST:CMD segment on its host and streams each command's
/// stdout straight to the next host's command. rdpipe's stdin (unless a
/// terminal) feeds the first command; the last command's stdout comes
/// back to rdpipe's stdout.
///
/// Segments:
///   HOST:CMD         CMD on HOST, run by the user's login shell as
///                    `ssh HOST CMD` runs it (user@host, ssh aliases)
///   [user@host:PORT]:CMD   with a port ([fe80::1]:CMD for IPv6)
///   -:CMD            CMD on this machine, no SSH (also localhost:CMD)
///   HOST:'< FILE'    send FILE; mid-pipeline the previous output is
///                    received, verified and discarded
///   HOST:'> FILE'    write the stream to FILE ('>>' appends);
///                    mid-pipeline an empty stream goes onward
///   HOST:            (empty command) relay only: HOST forwards the
///                    stream to the next hop, no shell, no command
///
/// One stream to many hosts: `rdpipe [SOURCE...] --to HOST:CMD --to
/// HOST:CMD ...` sends the source's output (or rdpipe's stdin) once, to
/// the first sink; each sink's host feeds its command and relays the
/// same bytes to the next sink (a chain; it runs at the slowest sink's
/// speed). Each sink's bytes, integrity check and command status are
/// summarized per host at -v and on any failure.
///
/// Only this machine needs rdma-pipe installed: on a host without a
/// usable rdrecv (not in PATH, or speaking another agent protocol) rdpipe
/// installs its own binary over SSH into ~/.cache/rdma-pipe/ and reuses
/// it later (--no-install: fail instead; --remote-bin DIR: run DIR/rdrecv).
/// `rdpipe doctor HOST...` checks hosts first (rdpipe-doctor(1)).
/// Exit status as with `set -o pipefail`; on failure one line
/// (`rdpipe: error: ...`) names the host, the command and what failed,
/// and the whole pipeline stops.
///
/// On a terminal (or with --progress) a live line on stderr shows the
/// bytes arrived so far, the rate and the elapsed time; with a `< FILE`
/// source (or a regular file on stdin) it shows that source's bytes sent,
/// rate, percentage and ETA.
#[derive(Debug, Parser)]
#[command(name = "rdpipe", version, verbatim_doc_comment, after_help = EXAMPLES)]
pub struct PipeArgs {
    /// The pipeline: HOST:CMD segments, in order.
    #[arg(value_name = "HOST:CMD", required_unless_present = "to")]
    pub segments: Vec<String>,

    /// Fan-out: deliver the stream to this sink too (repeatable; HOST:CMD,
    /// HOST:'> FILE' or HOST:'>> FILE'). The sinks form a chain in the order
    /// given: each host feeds its command and relays the same bytes to the
    /// next, so the source sends each byte once; the chain runs at the
    /// slowest sink's speed. A failing sink command does not stop the others.
    /// The sink's command stdout goes to rdpipe's stderr, prefixed with its
    /// host.
    #[arg(long = "to", value_name = "HOST:CMD")]
    pub to: Vec<String>,

    /// With --to: succeed when at least N sinks succeeded (default: all).
    #[arg(long, value_name = "N", requires = "to",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub min_ok: Option<u64>,

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
    /// --replay-window; after that the run fails naming the hop. 0: off.
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
    /// sinks' `> FILE` too.
    #[arg(long)]
    pub direct: bool,
}

/// `RDPIPE_DEBUG` (set and not empty or `0`): the older spelling of `-vv`.
pub const DEBUG_ENV: &str = "RDPIPE_DEBUG";

impl PipeArgs {
    /// The `-v` count, at least 2 (`-vv`) when `RDPIPE_DEBUG` is set.
    pub fn verbosity(&self) -> u8 {
        let debug_env = std::env::var_os(DEBUG_ENV).is_some_and(|v| !v.is_empty() && v != "0");
        if debug_env {
            self.verbose.max(2)
        } else {
            self.verbose
        }
    }

    /// The orchestrator's configuration.
    pub fn config(self) -> Config {
        let verbose = self.verbosity();
        Config {
            progress: crate::cli::progress::wanted(self.progress, self.quiet),
            log: std::env::var("RUST_LOG")
                .ok()
                .filter(|f| !f.trim().is_empty()),
            quiet: self.quiet,
            segments: self.segments,
            sinks: self.to,
            min_ok: self.min_ok.map(|n| n as usize),
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
        }
    }
}

/// `-:CMD` (a local segment) looks like a short option to clap: it is spelled
/// `localhost:CMD` before parsing, which means the same.
pub fn normalize_args<I: IntoIterator<Item = std::ffi::OsString>>(
    args: I,
) -> Vec<std::ffi::OsString> {
    args.into_iter()
        .map(|a| match a.to_str() {
            Some(s) if s.starts_with("-:") => format!("localhost{}", &s[1..]).into(),
            _ => a,
        })
        .collect()
}

/// Runs rdpipe; `exe` is this program (run again for local segments' agents and
/// as the ssh master's guard).
pub fn run(args: PipeArgs, exe: PathBuf) -> Result<(), Failure> {
    let json = args.json.clone();
    if let (Some(r), true, false) = (args.rate_limit, args.verbosity() > 0, args.dry_run) {
        crate::cli::term::say("rdpipe", format!("rate limit {r} on every hop"));
    }
    let (outcome, report) = rdpipe_orchestrate::run::run_reported(args.config(), LocalExe { exe });
    let outcome = outcome.map_err(|e| Failure {
        messages: e.messages(),
        code: e.exit_code(),
    });
    match (json, report) {
        (Some(path), Some(report)) => match (write_json_atomic(&path, &report), outcome) {
            (Ok(()), outcome) => outcome,
            (Err(e), Ok(())) => Err(crate::cli::fail(1, e)),
            (Err(e), Err(mut f)) => {
                f.messages.push(e.to_string());
                Err(f)
            }
        },
        _ => outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        let a = PipeArgs::try_parse_from(normalize_args(
            [
                "rdpipe",
                "-n",
                "-o",
                "Port=2222",
                "--data-host",
                "h1=10.0.0.1",
                "-:cat",
                "h2:rev",
            ]
            .map(Into::into),
        ))
        .unwrap();
        assert!(a.dry_run);
        assert_eq!(a.verbose, 0);
        assert!(!a.quiet && !a.progress);
        assert_eq!(a.ssh_options, ["Port=2222"]);
        assert_eq!(a.segments, ["localhost:cat", "h2:rev"]);
        let a = PipeArgs::try_parse_from(["rdpipe", "--rate-limit", "500M/s", "h:cat"]).unwrap();
        assert_eq!(a.config().rate_limit, "500M".parse().ok());
        assert!(PipeArgs::try_parse_from(["rdpipe", "--rate-limit", "0", "h:cat"]).is_err());
        let a = PipeArgs::try_parse_from(["rdpipe", "-vv", "-q", "--progress", "h:cat"]).unwrap();
        assert_eq!(a.verbose, 2);
        assert!(a.quiet && a.progress);
        assert!(PipeArgs::try_parse_from(["rdpipe"]).is_err());
        assert!(PipeArgs::try_parse_from(["rdpipe", "--slots", "0", "h:cat"]).is_err());
        assert!(PipeArgs::try_parse_from(["rdpipe", "--chunk-size", "0", "h:cat"]).is_err());
    }
}
