//! [`HopReport`]: what a `DONE` line carries.

use super::CompressSummary;
use rdpipe_transport::reconnect::Reconnect;
use rdpipe_wire::Integrity;

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
