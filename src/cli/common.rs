//! What rdsend and rdrecv share: the key (positional, `--key-file` or
//! `RDPIPE_KEY`), transport tuning flags, one-line messages on stderr and the
//! mapping from errors to exit statuses.

use clap::Args;
use rdpipe_transport::error::{EXIT_FAILURE, EXIT_USAGE};
use rdpipe_transport::reconnect::HopState;
use rdpipe_transport::{Rate, TransportError};
use rdpipe_wire::{Compress, Integrity, MAX_CHUNK_SIZE, MAX_SLOTS, MIN_CHUNK_SIZE};
use std::fmt::Display;
use std::path::PathBuf;
use std::time::Duration;

/// Environment variable that may hold the key (keeps it out of `ps`).
pub const KEY_ENV: &str = "RDPIPE_KEY";

/// A failed run: its one-line messages (none for a quiet failure) and the exit
/// status.
#[derive(Debug)]
pub struct Failure {
    /// The messages, without the tool prefix, one line each.
    pub messages: Vec<String>,
    /// The exit status.
    pub code: u8,
}

/// Builds a [`Failure`] with one message.
pub fn fail(code: u8, message: impl Display) -> Failure {
    Failure {
        messages: vec![message.to_string()],
        code,
    }
}

/// The one place the three binaries end: prints a failure's messages as
/// `TOOL: error: ...` lines and maps the outcome to the exit status.
pub fn finish(tool: &str, outcome: Result<(), Failure>) -> std::process::ExitCode {
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(f) => {
            print_failure(tool, &f);
            std::process::ExitCode::from(f.code)
        }
    }
}

/// Prints a failed run's messages, one `TOOL: error: ...` line each.
pub fn print_failure(tool: &str, f: &Failure) {
    for m in &f.messages {
        rdpipe_term::error(tool, m);
    }
}

impl From<TransportError> for Failure {
    fn from(e: TransportError) -> Self {
        fail(e.exit_code(), e)
    }
}

pub use rdpipe_control::{IntegrityArg, Transport};

pub use rdpipe_control::spool::parse_bytes;

/// Parses `--reconnect-timeout`: seconds, 0 (off) up to a day.
pub fn parse_reconnect_secs(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=86400.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("{s} is not a number of seconds from 0 to 86400")),
    }
}

/// Parses `--replay-window`: [`parse_bytes`] up to 16G.
pub fn parse_window(s: &str) -> Result<usize, String> {
    let v = parse_bytes(s)?;
    match usize::try_from(v) {
        Ok(v) if v <= 16 << 30 => Ok(v),
        _ => Err(format!(
            "{s} is out of range: the replay window is at most 16G"
        )),
    }
}

/// Parses a chunk size: [`parse_bytes`] within 4K..=64M.
pub fn parse_size(s: &str) -> Result<u32, String> {
    let v = parse_bytes(s)?;
    if v < MIN_CHUNK_SIZE as u64 || v > MAX_CHUNK_SIZE as u64 {
        return Err(format!(
            "{s} is out of range: the chunk size must be between 4K and 64M"
        ));
    }
    Ok(v as u32)
}

/// Parses `--slots`: 1..=MAX_SLOTS.
pub fn parse_slots(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of slots"))?;
    if !(1..=MAX_SLOTS).contains(&n) {
        return Err(format!("{n} slots is out of range 1..={MAX_SLOTS}"));
    }
    Ok(n)
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(0.0..=86400.0).contains(&v) {
        return Err(format!("{s} seconds is out of range 0..=86400"));
    }
    Ok(Duration::from_secs_f64(v))
}

fn parse_handshake_secs(s: &str) -> Result<Duration, String> {
    let d = parse_secs(s)?;
    if d.is_zero() {
        return Err("the handshake needs some time: give more than 0 seconds".into());
    }
    Ok(d)
}

/// Keys shorter than this many bytes get a warning.
pub const SHORT_KEY: usize = 16;

/// A fresh random key: 32 bytes from the OS, as 64 hex digits.
pub fn generate_key() -> Result<String, Failure> {
    let mut k = [0u8; 32];
    getrandom::getrandom(&mut k).map_err(|e| {
        fail(
            EXIT_FAILURE,
            format!("cannot read random bytes from the OS: {e}"),
        )
    })?;
    Ok(k.iter().map(|b| format!("{b:02x}")).collect())
}

/// The protection these flags ask for: `--encrypt` wins over `--integrity`.
pub fn integrity(arg: IntegrityArg, encrypt: bool) -> Integrity {
    arg.resolve(encrypt)
}

/// Flags both endpoints take.
#[derive(Debug, Args, Clone)]
pub struct CommonArgs {
    /// Read the key from PATH (first line) instead of the KEY argument, which `ps` shows.
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,

    /// Transport to use.
    #[arg(long, value_enum, default_value_t = Transport::Auto)]
    pub transport: Transport,

    /// Bytes per chunk (RDMA slot / data frame), e.g. 256K, 1M. Both ends use the
    /// smaller of the two sizes asked for.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
    pub chunk_size: u32,

    /// Buffers in flight (2 = double buffering). Pinned memory per process for RDMA
    /// is about chunk size × slots.
    #[arg(long, value_name = "N", default_value = "2", value_parser = parse_slots)]
    pub slots: u32,

    /// How long the whole authentication handshake of one connection may take
    /// before that peer is dropped (more than 0).
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_handshake_secs)]
    pub handshake_timeout: Duration,

    /// Seconds to keep trying to reconnect when the data connection dies
    /// mid-stream (a reset, a NAT that forgot the connection, an RDMA queue
    /// pair in the error state): rdsend dials again, rdrecv keeps listening
    /// for the same authenticated sender, and the stream resumes where the
    /// receiver is, byte-exact. 0: fail at once.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_reconnect_secs)]
    pub reconnect_timeout: Duration,

    /// The sender keeps the last SIZE bytes it sent until the receiver has
    /// them, to resume after a reconnect (at least what can be in flight:
    /// ring plus socket buffers). A regular-file input is not copied: a
    /// resend reads the file again, from any offset. A pipe's pages are kept
    /// in pipes of the sender's (tee), not copied; a socket's bytes are
    /// copied. 0: nothing to resend from a pipe.
    #[arg(long, value_name = "SIZE", default_value = "32M", value_parser = parse_window)]
    pub replay_window: usize,

    /// How the stream is protected (the stronger of the two ends' choices is
    /// used; see docs/security.md).
    #[arg(long, value_enum, default_value_t = IntegrityArg::Auto)]
    pub integrity: IntegrityArg,

    /// Encrypt the stream (AES-256-GCM, keys from the handshake), even on a CPU
    /// without AES instructions; either end asking for it is enough.
    #[arg(long)]
    pub encrypt: bool,

    /// Move at most RATE bytes per second, as `pv -L`: e.g. 500M, 1.5G/s,
    /// 64KiB/s (K, M, G, T are 1024-based; `B` and `/s` optional). The sender
    /// paces; a receiver's limit reaches the sender in the handshake, and the
    /// lower of the two ends' limits applies.
    #[arg(long, value_name = "RATE")]
    pub rate_limit: Option<Rate>,

    /// Compress the stream, each chunk on its own with zstd, before it is
    /// sealed: `auto` (the bare flag) adapts the level to what binds, the link
    /// or the CPU, and stops trying on data that does not compress;
    /// `zstd:LEVEL` (1-19; `zstd` is level 3) is fixed. Compression is on when
    /// either end asks for it (the sender's choice wins); both ends must be
    /// builds that know it.
    #[arg(long, value_name = "MODE", default_value = "none", num_args = 0..=1,
          require_equals = true, default_missing_value = "auto")]
    pub compress: Compress,

    /// Print the transport used, the byte count and `Bandwidth X.XXX GB/s` on stderr
    /// at the end.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// No progress line (unless --progress is given) and no warnings; errors are
    /// still printed.
    #[arg(short, long)]
    pub quiet: bool,

    /// Show a live progress line on stderr (bytes, rate, elapsed; percentage and ETA
    /// for a file source). On by default when stderr is a terminal.
    #[arg(long)]
    pub progress: bool,

    /// Write a JSON report of the run to FILE at the end, also when it fails: peer,
    /// transport and device, bytes, checksum, seconds, rate, exit status, error.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl CommonArgs {
    /// The transfer options these flags describe, with the resolved key.
    pub fn options(
        &self,
        key: Vec<u8>,
        tool: &'static str,
        total: Option<u64>,
    ) -> rdpipe_transport::Options {
        let (progress, notice) = self.progress(tool, total);
        rdpipe_transport::Options {
            key,
            chunk_size: self.chunk_size,
            slots: self.slots,
            transport: self.transport.into(),
            handshake_timeout: self.handshake_timeout,
            integrity: integrity(self.integrity, self.encrypt),
            rate_limit: self.rate_limit,
            compress: self.compress,
            progress,
            reconnect_timeout: self.reconnect_timeout,
            replay_window: self.replay_window,
            notice,
        }
    }

    /// The progress callback for the transfer and what tells the line that
    /// the hop is reconnecting, if progress is wanted.
    #[allow(clippy::type_complexity)]
    pub fn progress(
        &self,
        tool: &'static str,
        total: Option<u64>,
    ) -> (
        Option<Box<dyn FnMut(u64) + Send>>,
        Option<Box<dyn FnMut(HopState) + Send>>,
    ) {
        if !super::progress::wanted(self.progress, self.quiet) {
            return (None, None);
        }
        let t = std::sync::Arc::new(super::progress::Progress::new(tool, total).start());
        let t2 = t.clone();
        (
            Some(Box::new(move |bytes| t.update(bytes))),
            Some(Box::new(move |s| match s {
                HopState::Lost { .. } => t2.set_note(Some("reconnecting…")),
                HopState::Resumed(_) => t2.set_note(None),
            })),
        )
    }

    /// Resolves the key: `--key-file`, else the KEY argument (unless `-`), else
    /// `RDPIPE_KEY`.
    pub fn key(&self, tool: &str, positional: Option<&str>) -> Result<Vec<u8>, Failure> {
        let key = if let Some(path) = &self.key_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                fail(
                    EXIT_USAGE,
                    format!("cannot read key file {}: {e}", path.display()),
                )
            })?;
            text.lines().next().unwrap_or("").to_string()
        } else if let Some(k) = positional.filter(|k| *k != "-") {
            k.to_string()
        } else if let Ok(k) = std::env::var(KEY_ENV) {
            k
        } else {
            return Err(fail(
                EXIT_USAGE,
                format!("no key given: pass KEY, --key-file PATH or set {KEY_ENV}"),
            ));
        };
        if key.is_empty() {
            return Err(fail(
                EXIT_USAGE,
                "the key is empty: use a non-empty shared secret",
            ));
        }
        if key.len() < SHORT_KEY && !self.quiet {
            super::term::warn(
                tool,
                format!(
                    "the key is short ({} characters): every connection attempt can test \
                     one guess of it; `rdsend --gen-key` prints a strong one",
                    key.len()
                ),
            );
        }
        Ok(key.into_bytes())
    }
}

pub use super::term::say;

/// Prints the `-v` report: transport, byte count, the rate limit the sender paced
/// to (and whose it was, when not this end's), and the original's bandwidth line.
pub fn report(tool: &str, verb: &str, r: &rdpipe_transport::Report, ours: Option<Rate>) {
    let peer_role = if verb == "sent" { "receiver" } else { "sender" };
    let limit = match r.rate_limit {
        Some(l) if Some(l) == ours => format!(", rate limit {l}"),
        Some(l) => format!(", rate limit {l} (the {peer_role}'s)"),
        None => String::new(),
    };
    say(
        tool,
        format!(
            "{verb} {} bytes {} {} over {} in {:.3} s (xxh3 {:016x}, integrity {}{limit})",
            r.bytes,
            if verb == "sent" { "to" } else { "from" },
            r.peer,
            r.transport,
            r.elapsed.as_secs_f64(),
            r.checksum,
            r.integrity.as_str()
        ),
    );
    if let Some(c) = &r.compress {
        say(tool, compress_line(c));
    }
    for c in &r.reconnects {
        say(
            tool,
            format!(
                "reconnected at byte {} after {:.3} s, over {}",
                c.offset,
                c.downtime.as_secs_f64(),
                c.transport
            ),
        );
    }
    super::term::line(&format!("Bandwidth {:.3} GB/s\n", r.gbps()));
}

/// The `-v` line about compression: mode, levels, bytes before and after.
pub fn compress_line(c: &rdpipe_transport::compress::CompressStats) -> String {
    let levels = match c.level_range() {
        Some((lo, hi)) if lo == hi => format!(", level {lo}"),
        Some((lo, hi)) => format!(", levels {lo}-{hi}"),
        None => String::new(),
    };
    format!(
        "compress {}{levels}: {} bytes as {} ({:.2}x; {} of {} chunks stored)",
        c.mode,
        c.raw,
        c.wire,
        c.ratio(),
        c.stored,
        c.chunks
    )
}

/// Standard input as a file, so the send loop can poll it and read it without
/// going through a userspace buffer.
pub fn stdin_file() -> Result<std::fs::File, Failure> {
    use std::os::fd::AsFd;
    std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .map_err(|e| fail(EXIT_FAILURE, format!("cannot use standard input: {e}")))
}

/// For `word`, an operand of the command line `argv` that cannot be one:
/// the flag written right before it whose value must follow `=`
/// (`--compress auto` for `--compress=auto`), as `--FLAG=WORD`.
pub fn meant_equals(cmd: &clap::Command, argv: &[String], word: &str) -> Option<String> {
    let optional: Vec<&str> = cmd
        .get_arguments()
        .filter(|a| a.is_require_equals_set())
        .filter(|a| a.get_num_args().is_some_and(|n| n.min_values() == 0))
        .filter_map(|a| a.get_long())
        .collect();
    argv.windows(2).find_map(|w| {
        let flag = w[0].strip_prefix("--")?;
        (w[1] == word && optional.contains(&flag)).then(|| format!("--{flag}={word}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_after_an_optional_value_flag_is_pointed_at() {
        #[derive(clap::Parser)]
        struct T {
            #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "auto")]
            compress: Option<String>,
            #[arg(long)]
            label: Option<String>,
            rest: Vec<String>,
        }
        let cmd = <T as clap::CommandFactory>::command();
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = argv(&["rdpipe", "--compress", "auto", "h1:cat"]);
        assert_eq!(
            meant_equals(&cmd, &a, "auto").as_deref(),
            Some("--compress=auto")
        );
        assert_eq!(meant_equals(&cmd, &a, "h1:cat"), None);
        let a = argv(&["rdpipe", "--label", "x", "auto"]);
        assert_eq!(meant_equals(&cmd, &a, "auto"), None);
    }

    #[test]
    fn integrity_flags_map_to_the_protection_asked_for() {
        use IntegrityArg::*;
        assert_eq!(integrity(Auto, false), Integrity::preferred());
        assert_eq!(integrity(Checksum, false), Integrity::Checksum);
        assert_eq!(integrity(Mac, false), Integrity::Mac);
        assert_eq!(integrity(Encrypt, false), Integrity::Encrypt);
        for arg in [Auto, Checksum, Mac, Encrypt] {
            assert_eq!(integrity(arg, true), Integrity::Encrypt, "{arg:?}");
        }
        assert_eq!(IntegrityArg::default(), Auto);
    }

    #[test]
    fn replay_windows_parse_with_units_up_to_16g() {
        assert_eq!(parse_window("0"), Ok(0));
        assert_eq!(parse_window("32M"), Ok(32 << 20));
        assert_eq!(parse_window("16G"), Ok(16 << 30));
        assert!(parse_window("17G").unwrap_err().contains("at most 16G"));
        assert!(parse_window("lots").is_err());
    }
}
