//! `rdsend`: read stdin (or FILE) and send it to an rdrecv.

use super::common::{fail, report, stdin_file, CommonArgs, Failure};
use clap::Parser;
use rdpipe_report::Role;
use rdpipe_transport::error::EXIT_FAILURE;
use rdpipe_transport::{run_send, Endpoint};
use std::io::Seek;
use std::path::PathBuf;
use std::time::Duration;

/// Examples shown after `--help`.
pub const EXAMPLES: &str = "\
Examples:
  # on host2:                         # on host1:
  rdrecv 7691 s3cret > copy.img       rdsend host2 7691 s3cret < disk.img

  # keep the key out of `ps`:
  RDPIPE_KEY=s3cret rdsend host2 7691 - disk.img
  rdsend --key-file ~/.rdpipe-key host2 7691 - disk.img";

/// Send a stream to an rdrecv over RDMA or TCP.
///
/// Reads standard input (or FILE) and sends it to the rdrecv on HOST:PORT, over RDMA
/// where both ends can, else TCP. Both ends authenticate each other with the shared
/// key before any data moves. Exits 0 only after the receiver confirmed that the
/// whole stream arrived (byte count and checksum).
#[derive(Debug, Parser)]
#[command(name = "rdsend", version, after_help = EXAMPLES)]
pub struct SendArgs {
    /// The receiving host (name or address).
    #[arg(required_unless_present = "gen_key")]
    pub host: Option<String>,
    /// The port rdrecv listens on.
    #[arg(required_unless_present = "gen_key")]
    pub port: Option<u16>,
    /// Shared secret; `-` or omitted to use --key-file or RDPIPE_KEY instead.
    pub key: Option<String>,
    /// Read this file instead of standard input.
    pub file: Option<PathBuf>,

    /// Keep retrying a refused connection this long (the receiver may start later).
    #[arg(long, value_name = "SECS", default_value = "10")]
    pub connect_timeout: f64,

    /// Print a new random key (256 bits, 64 hex digits) for rdsend and rdrecv,
    /// and exit.
    #[arg(long, exclusive = true)]
    pub gen_key: bool,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
}

const TOOL: &str = "rdsend";

/// Runs rdsend (and writes its `--json` report).
pub fn run(args: SendArgs) -> Result<(), Failure> {
    if args.gen_key {
        println!("{}", super::common::generate_key()?);
        return Ok(());
    }
    let start = std::time::Instant::now();
    let json = args.common.json.clone();
    let peer = args
        .host
        .as_ref()
        .zip(args.port)
        .map(|(h, p)| format!("{h}:{p}"));
    super::interrupt::watch(super::interrupt::Interrupted {
        tool: TOOL,
        role: Role::Sender,
        json: json.clone(),
        peer: peer.clone(),
        start,
    });
    let outcome = send(args);
    super::report_json::finish(json.as_deref(), TOOL, Role::Sender, peer, start, outcome)
        .map(|_| ())
}

fn send(args: SendArgs) -> Result<rdpipe_transport::Report, Failure> {
    let (Some(host), Some(port)) = (args.host.clone(), args.port) else {
        return Err(fail(2, "HOST and PORT are required (or --gen-key)"));
    };
    let key = args.common.key(TOOL, args.key.as_deref())?;
    if !(0.0..=86400.0).contains(&args.connect_timeout) {
        return Err(fail(
            2,
            format!(
                "--connect-timeout {} is out of range 0..=86400",
                args.connect_timeout
            ),
        ));
    }
    let mut input = match &args.file {
        Some(p) => std::fs::File::open(p)
            .map_err(|e| fail(EXIT_FAILURE, format!("cannot open {}: {e}", p.display())))?,
        None => stdin_file()?,
    };
    // A regular file (FILE, or stdin redirected from one) has a size: show % and ETA.
    // What is left of it from the current offset (a shell may hand over stdin
    // part-read) is what the stream should carry, unless the file changes meanwhile.
    let total = input
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len().saturating_sub(input.stream_position().unwrap_or(0)));
    let endpoint = Endpoint::Connect {
        host,
        port,
        timeout: Duration::from_secs_f64(args.connect_timeout),
    };
    let opts = args.common.options(key, TOOL, total);
    if let (Some(l), true) = (args.common.rate_limit, args.common.verbose > 0) {
        super::common::say(
            TOOL,
            format!("rate limit {l} (or the receiver's, if lower)"),
        );
    }
    let r = run_send(endpoint, opts, &mut input)?;
    // The stream is what was read (verified end to end); a file that grew or shrank
    // meanwhile is worth a word, since the copy is not its final content.
    if let Some(t) = total.filter(|&t| t != r.bytes && !args.common.quiet) {
        let name = args
            .file
            .as_ref()
            .map_or_else(|| "standard input".to_string(), |p| p.display().to_string());
        rdpipe_term::warn(
            TOOL,
            format!(
                "{name} changed size while it was read: sent {} bytes, it had {t} at the start",
                r.bytes
            ),
        );
    }
    if args.common.verbose > 0 {
        report(TOOL, "sent", &r, args.common.rate_limit);
    }
    Ok(r)
}
