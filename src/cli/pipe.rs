//! `rdpipe`'s flags (clap derive) and its entry point. The work is done by the
//! `rdpipe-orchestrate` crate; this file only turns flags into its `Config`.

use crate::cli::common::Failure;
pub use crate::cli::run_opts::{RunOpts, DEBUG_ENV};
use clap::Parser;
use rdpipe_orchestrate::run::Config;
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

  # the output of a command run on 64 nodes, as one stream of whole lines, tagged:
  rdpipe --tag --from 'n[01-64]:uptime'

  # 8 collectors into one file each on the logger, sources not slowed by its stalls:
  rdpipe --each --spool 256M --from 'pc[1-8]:collect' pc0:'> /log/%h.dat'

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
/// Many hosts into one: `rdpipe --from HOST:CMD --from HOST:CMD ...
/// [SINK...]` sends each source's stream over a hop of its own to the
/// sink's host, its lines merged whole with the others' (or, with --each,
/// into an instance of the sink segments per source); a failing source is
/// named while the others complete.
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
#[command(group(clap::ArgGroup::new("many").args(["to", "from"]).multiple(true)))]
pub struct PipeArgs {
    /// The pipeline: HOST:CMD segments, in order.
    #[arg(value_name = "HOST:CMD", required_unless_present_any = ["to", "from", "persist_stop"])]
    pub segments: Vec<String>,

    /// Close every ssh connection that --persist kept open (this user's), and
    /// run nothing else.
    #[arg(long, conflicts_with_all = ["segments", "to", "from"])]
    pub persist_stop: bool,

    /// Fan-out: deliver the stream to this sink too (repeatable; HOST:CMD,
    /// HOST:'> FILE' or HOST:'>> FILE'). The sinks form a chain in the order
    /// given: each host feeds its command and relays the same bytes to the
    /// next, so the source sends each byte once; the chain runs at the
    /// slowest sink's speed. A failing sink command does not stop the others.
    /// The sink's command stdout goes to rdpipe's stderr, prefixed with its
    /// host. HOST may be a Slurm hostlist: --to 'n[001-064]:> /img' is 64
    /// sinks, n001 to n064, in that order.
    #[arg(long = "to", value_name = "HOST:CMD")]
    pub to: Vec<String>,

    /// Many into one: a source (repeatable; HOST:CMD or HOST:'< FILE'),
    /// whose stream goes straight to the sink's host over a hop of its own.
    /// The HOST:CMD segments (after the sources) are the sink pipeline; with
    /// none, the gathered lines come out on rdpipe's stdout. By default every
    /// source's lines are merged whole, never cut by another's, each
    /// source's in order, sources taken in turn; --each runs the sink once
    /// per source instead. HOST may be a Slurm hostlist: --from
    /// 'pc[1-8]:collect' is 8 sources. A failing source does not stop the
    /// others; its verdict says where it stopped.
    #[arg(long = "from", value_name = "HOST:CMD", conflicts_with = "to")]
    pub from: Vec<String>,

    /// With --from: run the sink segments once per source, each instance fed
    /// by exactly one source's stream, byte for byte. The command gets
    /// RDPIPE_SOURCE (the source's host) and RDPIPE_SOURCE_INDEX (1-based);
    /// in a '> FILE', %h is the source's host, %i its index, %% a '%'. The
    /// last segment's stdout goes to rdpipe's stderr, prefixed with its host.
    #[arg(long, requires = "from")]
    pub each: bool,

    /// With --from (line merge): start every line with its source's host and
    /// ': ' (HOST[INDEX]: where a host has several sources), as pdsh does.
    #[arg(long, requires = "from", conflicts_with = "each")]
    pub tag: bool,

    /// With --from: at the sink's host, hold up to SIZE bytes of each
    /// source's stream when the sink stalls (a disk flush), so that the
    /// sources are not slowed; in memory, or in a file in DIR there
    /// (unlinked at once). When a spool is full, back-pressure reaches its
    /// source; nothing is dropped. -v and --json report each source's peak
    /// backlog and the time it was held back.
    #[arg(long, value_name = "SIZE[:DIR]", requires = "from")]
    pub spool: Option<rdpipe_control::SpoolSpec>,

    /// With --to: succeed when at least N sinks succeeded (default: all);
    /// with --from, when at least N sources did.
    #[arg(long, value_name = "N", requires = "many",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub min_ok: Option<u64>,

    /// Everything but the pipeline itself (shared with rdcp).
    #[command(flatten)]
    pub run: RunOpts,
}

impl PipeArgs {
    /// The `-v` count, at least 2 (`-vv`) when `RDPIPE_DEBUG` is set.
    pub fn verbosity(&self) -> u8 {
        self.run.verbosity()
    }

    /// The orchestrator's configuration.
    pub fn config(self) -> Config {
        let mut c = self.run.config();
        c.segments = self.segments;
        c.sinks = self.to;
        c.sources = self.from;
        c.gather = if self.each {
            rdpipe_plan::GatherMode::Each
        } else {
            rdpipe_plan::GatherMode::Lines { tag: self.tag }
        };
        c.min_ok = self.min_ok.map(|n| n as usize);
        c.spool = self.spool;
        c
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
    check_optional_values(&args)?;
    if args.persist_stop {
        let n = rdpipe_launch::persist::stop_all().map_err(|e| crate::cli::fail(1, e))?;
        if args.run.verbose > 0 {
            crate::cli::term::say("rdpipe", format!("closed {n} kept ssh connection(s)"));
        }
        return Ok(());
    }
    let json = args.run.json.clone();
    if let (Some(r), true, false) = (args.run.rate_limit, args.verbosity() > 0, args.run.dry_run) {
        crate::cli::term::say("rdpipe", format!("rate limit {r} on every hop"));
    }
    crate::cli::run_opts::run_and_report(args.config(), exe, json)
}

/// A segment without `:` that is really the value of a flag whose value
/// must follow `=` (`rdpipe --compress auto h1:cat`): a usage error that
/// says what was meant, before the plan's own "not HOST:CMD".
fn check_optional_values(args: &PipeArgs) -> Result<(), Failure> {
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cmd = <PipeArgs as clap::CommandFactory>::command();
    for w in args.segments.iter().chain(&args.to).chain(&args.from) {
        if w.contains(':') {
            continue;
        }
        if let Some(meant) = crate::cli::common::meant_equals(&cmd, &argv, w) {
            return Err(crate::cli::fail(
                2,
                format!("'{w}' is not HOST:CMD (no ':'); did you mean {meant}?"),
            ));
        }
    }
    Ok(())
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
        assert!(a.run.dry_run);
        assert_eq!(a.run.verbose, 0);
        assert!(!a.run.quiet && !a.run.progress);
        assert_eq!(a.run.ssh_options, ["Port=2222"]);
        assert_eq!(a.segments, ["localhost:cat", "h2:rev"]);
        let a = PipeArgs::try_parse_from(["rdpipe", "--rate-limit", "500M/s", "h:cat"]).unwrap();
        assert_eq!(a.config().rate_limit, "500M".parse().ok());
        assert!(PipeArgs::try_parse_from(["rdpipe", "--rate-limit", "0", "h:cat"]).is_err());
        let a = PipeArgs::try_parse_from(["rdpipe", "-vv", "-q", "--progress", "h:cat"]).unwrap();
        assert_eq!(a.run.verbose, 2);
        assert!(a.run.quiet && a.run.progress);
        assert!(PipeArgs::try_parse_from(["rdpipe"]).is_err());
        assert!(PipeArgs::try_parse_from(["rdpipe", "--slots", "0", "h:cat"]).is_err());
        assert!(PipeArgs::try_parse_from(["rdpipe", "--chunk-size", "0", "h:cat"]).is_err());
    }
}
