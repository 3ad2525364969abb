//! rdpipe's command line (clap derive), kept apart so a man page can be generated
//! from it.

use clap::Parser;
use std::path::PathBuf;

/// Parses a byte count with an optional K/M/G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix in '{s}'")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (like 1048576 or 1M)"))?;
    let v = n.checked_mul(mul).ok_or("size too large")?;
    if v < u64::from(rdpipe_wire::MIN_CHUNK_SIZE) || v > u64::from(rdpipe_wire::MAX_CHUNK_SIZE) {
        return Err(format!(
            "chunk size must be between {} and {} bytes",
            rdpipe_wire::MIN_CHUNK_SIZE,
            rdpipe_wire::MAX_CHUNK_SIZE
        ));
    }
    Ok(v as u32)
}

fn parse_slots(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if n == 0 || n > rdpipe_wire::MAX_SLOTS {
        return Err(format!("slots must be 1 to {}", rdpipe_wire::MAX_SLOTS));
    }
    Ok(n)
}

/// Unix pipes between machines: `echo hello | rdpipe h1:'tr a-z A-Z' h2:rev`.
///
/// Runs each HOST:CMD segment on its host (over SSH; `-:CMD` or `localhost:CMD` run
/// locally) and streams each command's stdout straight to the next host's command
/// over RDMA or TCP. rdpipe's stdin (unless it is a terminal) feeds the first
/// command; the last command's stdout comes back to rdpipe's stdout.
///
/// Segments may also be `HOST:'< FILE'` (send FILE; in the middle of a pipeline the
/// previous output is discarded), `HOST:'> FILE'` or `HOST:'>> FILE'` (write or
/// append the stream to FILE; in the middle an empty stream is sent onward).
/// `[user@host:port]:CMD` gives a port; `[fe80::1]:CMD` an IPv6 address.
///
/// Exit status like `set -o pipefail`: 0 when every command and every transfer
/// succeeded; else the status of the rightmost failing command, 127 when rdrecv is
/// missing on a host, 130/143 on SIGINT/SIGTERM, 2 for bad arguments, 1 otherwise.
#[derive(Debug, Parser)]
#[command(name = "rdpipe", version, verbatim_doc_comment)]
pub struct RdpipeArgs {
    /// The pipeline: HOST:CMD segments, in order.
    #[arg(value_name = "HOST:CMD", required = true)]
    pub segments: Vec<String>,

    /// Print the plan (segments, hosts, who connects to whom) and run nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,

    /// Print each hop's transport, bytes and checksum, and the final bandwidth.
    #[arg(short, long)]
    pub verbose: bool,

    /// An ssh option for every host, as for `ssh -o` (repeatable), e.g.
    /// `-o Port=2222`.
    #[arg(short = 'o', long = "ssh-option", value_name = "OPTION")]
    pub ssh_options: Vec<String>,

    /// An ssh configuration file instead of ~/.ssh/config, as for `ssh -F`.
    #[arg(short = 'F', long = "ssh-config", value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,

    /// The address other hosts use to reach HOST's data endpoints (e.g. an IPoIB
    /// address). Default: HOST's HostName from the ssh configuration (repeatable).
    #[arg(long, value_name = "HOST=ADDR")]
    pub data_host: Vec<String>,

    /// Directory holding rdrecv on the remote hosts (default: found in PATH).
    #[arg(long, value_name = "DIR")]
    pub remote_bin: Option<String>,

    /// Transport for the data: auto (RDMA where both ends can, else TCP), tcp, rdma.
    #[arg(long, default_value = "auto", value_parser = ["auto", "tcp", "rdma"])]
    pub transport: String,

    /// Bytes per chunk (suffix K, M allowed).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub chunk_size: u32,

    /// Buffers in flight per transfer.
    #[arg(long, default_value_t = 4, value_parser = parse_slots)]
    pub slots: u32,

    /// Seconds to keep trying to connect (ssh and data connections).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub connect_timeout: u64,

    /// SSH sessions per master connection (sshd's MaxSessions, default 10); more
    /// segments on one host open more connections.
    #[arg(long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_sessions: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert!(parse_size("0").is_err());
        assert!(parse_size("1T").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn flags_parse() {
        let a = RdpipeArgs::try_parse_from([
            "rdpipe",
            "-n",
            "-o",
            "Port=2222",
            "--data-host",
            "h1=10.0.0.1",
            "h1:cat",
            "h2:rev",
        ])
        .unwrap();
        assert!(a.dry_run);
        assert_eq!(a.ssh_options, ["Port=2222"]);
        assert_eq!(a.segments, ["h1:cat", "h2:rev"]);
        assert!(RdpipeArgs::try_parse_from(["rdpipe"]).is_err());
        assert!(RdpipeArgs::try_parse_from(["rdpipe", "--slots", "0", "h:cat"]).is_err());
    }
}
