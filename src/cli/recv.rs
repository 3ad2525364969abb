//! `rdrecv`: wait for one rdsend and write its stream to stdout (or FILE).

use super::common::{report, CommonArgs, Failure};
use clap::Parser;
use rdpipe_report::Role;
use rdpipe_transport::output::{Mode, OutputFile};
use rdpipe_transport::{run_recv, Endpoint, TransportError};
use std::io::Write;
use std::path::PathBuf;

/// Examples shown after `--help`.
pub const EXAMPLES: &str = "\
Examples:
  rdrecv 7691 s3cret > copy.img          # then on the sender: rdsend HOST 7691 s3cret < disk.img
  rdrecv -v 7691 s3cret /dev/null        # bandwidth check
  rdrecv --announce-fd 3 0 - 3>port.txt  # ephemeral port, written as 'PORT <n>'";

/// Receive a stream from an rdsend over RDMA or TCP.
///
/// Waits on PORT for one rdsend and writes its stream to standard output (or FILE).
/// Both ends authenticate each other with the shared key before any data moves.
/// Exits 0 only when the whole stream arrived and its byte count and checksum
/// matched; a stream cut short is always an error ("stream truncated after N bytes").
#[derive(Debug, Parser)]
#[command(name = "rdrecv", version, after_help = EXAMPLES)]
pub struct RecvArgs {
    /// Port to listen on; 0 picks a free one (see --announce-fd).
    pub port: u16,
    /// Shared secret; `-` or omitted to use --key-file or RDPIPE_KEY instead.
    pub key: Option<String>,
    /// Write to this file instead of standard output: a temporary file beside it
    /// replaces it only once the whole stream was verified (a failed stream
    /// leaves the old content).
    pub file: Option<PathBuf>,

    /// Write FILE with O_DIRECT, past the page cache: for big sequential streams to
    /// fast disks, where caching what was written only evicts other data. The tail
    /// that is not a multiple of 4 KiB goes through the page cache; on a filesystem
    /// that refuses O_DIRECT (ramfs, some network filesystems) FILE is written the
    /// usual way, which -v notes.
    #[arg(long, requires = "file")]
    pub direct: bool,

    /// Once listening, write `PORT <n>` and a newline to this file descriptor.
    #[arg(long, value_name = "FD")]
    pub announce_fd: Option<u32>,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
}

fn announce_to_fd(fd: u32) -> Box<dyn FnOnce(u16) -> std::io::Result<()> + Send> {
    Box::new(move |port| {
        // /proc/self/fd/N reopens the descriptor's file or pipe without unsafe code.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/self/fd/{fd}"))?;
        writeln!(f, "PORT {port}")?;
        f.flush()
    })
}

const TOOL: &str = "rdrecv";

/// Runs rdrecv (and writes its `--json` report).
pub fn run(args: RecvArgs) -> Result<(), Failure> {
    let start = std::time::Instant::now();
    let json = args.common.json.clone();
    super::interrupt::watch(super::interrupt::Interrupted {
        tool: TOOL,
        role: Role::Receiver,
        json: json.clone(),
        peer: None,
        start,
    });
    let outcome = recv(args);
    super::report_json::finish(json.as_deref(), TOOL, Role::Receiver, None, start, outcome)
        .map(|_| ())
}

fn recv(args: RecvArgs) -> Result<rdpipe_transport::Report, Failure> {
    let key = args.common.key(TOOL, args.key.as_deref())?;
    let endpoint = Endpoint::Listen {
        bind: None,
        port: args.port,
        announce: args.announce_fd.map(announce_to_fd),
    };
    let opts = args.common.options(key, TOOL, None);
    let file = args.file.clone();
    let (direct, verbose) = (args.direct, args.common.verbose > 0);
    // FILE is replaced only once the stream was verified (see
    // rdpipe_transport::output): a failed stream leaves the old content.
    let open = move || -> Result<Box<dyn Write + Send>, TransportError> {
        match &file {
            Some(p) => OutputFile::open(p, Mode::Replace)
                .map(|mut f| {
                    if direct {
                        if let (Err(why), true) = (f.use_direct(), verbose) {
                            super::common::say(
                                TOOL,
                                format!(
                                    "{}: writing through the page cache, not O_DIRECT: {why}",
                                    p.display()
                                ),
                            );
                        }
                    }
                    Box::new(f) as Box<dyn Write + Send>
                })
                .map_err(|e| TransportError::Io {
                    context: "cannot create the output file",
                    source: std::io::Error::new(e.kind(), format!("{}: {e}", p.display())),
                }),
            None => rdpipe_transport::endpoint::stdout_output().map(|f| Box::new(f) as _),
        }
    };
    let r = run_recv(endpoint, opts, open)?;
    if args.common.verbose > 0 {
        report(TOOL, "received", &r, args.common.rate_limit);
    }
    Ok(r)
}
