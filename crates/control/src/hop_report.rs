//! What a finished hop and a finished command report: [`HopReport`] and
//! [`CmdExit`], carried by `DONE` and `EXIT` lines.

use super::{CompressSummary, ParseError};
use rdpipe_transport::reconnect::Reconnect;
use rdpipe_wire::Integrity;
use std::fmt;
use std::str::FromStr;

/// A finished, verified transfer as an agent (or rdpipe's own end) reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct HopReport {
    /// Bytes carried.
    pub bytes: u64,
    /// The stream's checksum (xxh3-64).
    pub checksum: u64,
    /// Seconds the data phase took.
    pub secs: f64,
    /// The transport, as `-v` shows it (e.g. `tcp`, `rdma (rxe0, write-with-imm)`).
    pub transport: String,
    /// How the stream was protected.
    pub integrity: Integrity,
    /// What compression did, when the hop was compressed.
    pub compress: Option<CompressSummary>,
    /// The hop's reconnects (not on the `DONE` line: an agent reports each
    /// one as it happens, `RECONNECTED`).
    pub reconnects: Vec<Reconnect>,
}

impl HopReport {
    /// The report of a finished transfer of this process.
    pub fn of(r: &rdpipe_transport::Report) -> HopReport {
        HopReport {
            bytes: r.bytes,
            checksum: r.checksum,
            secs: r.elapsed.as_secs_f64(),
            transport: r.transport.clone(),
            integrity: r.integrity,
            compress: r.compress.as_deref().map(CompressSummary::of),
            reconnects: r.reconnects.clone(),
        }
    }

    /// As `-v` shows it: `tcp, mac` (and `, compress auto levels 1-3 2.10x`).
    pub fn describe(&self) -> String {
        let c = self.compress.map(|c| format!(", {}", c.describe()));
        format!(
            "{}, {}{}",
            self.transport,
            self.integrity.as_str(),
            c.unwrap_or_default()
        )
    }

    /// Whether two ends saw the same stream (count and checksum).
    pub fn same_stream(&self, other: &HopReport) -> bool {
        self.bytes == other.bytes && self.checksum == other.checksum
    }
}

/// How a command ended, as the agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdExit {
    /// `EXIT N`: exited with status N (a shell's 128+N for a child's signal N).
    Code(i32),
    /// `EXIT signal N`: killed by signal N.
    Signal(i32),
    /// `EXIT killed`: stopped by the agent after another failure.
    Killed,
}

impl CmdExit {
    /// The status a shell would report: the code, 128+N for signal N; none for
    /// a command stopped by the agent.
    pub fn status(self) -> Option<i32> {
        match self {
            CmdExit::Code(c) => Some(c),
            CmdExit::Signal(s) => Some(128 + s),
            CmdExit::Killed => None,
        }
    }
}

impl fmt::Display for CmdExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdExit::Code(c) => write!(f, "{c}"),
            CmdExit::Signal(s) => write!(f, "signal {s}"),
            CmdExit::Killed => f.write_str("killed"),
        }
    }
}

impl FromStr for CmdExit {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        if s == "killed" {
            return Ok(CmdExit::Killed);
        }
        if let Some(n) = s.strip_prefix("signal ") {
            return n
                .parse()
                .map(CmdExit::Signal)
                .map_err(|_| ParseError::Field("signal"));
        }
        s.parse()
            .map(CmdExit::Code)
            .map_err(|_| ParseError::Field("exit status"))
    }
}
