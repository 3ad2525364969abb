//! What a transfer tells its user: while it runs, each loss and resume of
//! its connection ([`HopState`]); once done, the [`Report`] (`-v`, `--json`),
//! with each [`Reconnect`] it went through.

use crate::compress::CompressStats;
use crate::handshake::Negotiated;
use crate::pump::Totals;
use crate::Rate;
use rdpipe_wire::Integrity;
use std::time::{Duration, Instant};

/// What a completed transfer reports (`-v`).
#[derive(Debug, Clone)]
pub struct Report {
    /// Bytes moved, verified end to end.
    pub bytes: u64,
    /// Their xxh3-64.
    pub checksum: u64,
    /// From the end of the handshake to the confirmation.
    pub elapsed: Duration,
    /// The transport that carried the data (`tcp`, `rdma (rxe0)`).
    pub transport: String,
    /// The peer's address.
    pub peer: String,
    /// How the stream was protected.
    pub integrity: Integrity,
    /// The rate limit the sender paced to (the lower of the two ends'), if any.
    pub rate_limit: Option<Rate>,
    /// Each time the connection was lost and the stream resumed on a new one.
    pub reconnects: Vec<Reconnect>,
    /// What compression did (on the last connection), if it was on.
    pub compress: Option<Box<CompressStats>>,
}

impl Report {
    /// The report of a transfer that `n` negotiated, verified as `t`, carried by
    /// `transport`, started at `start`.
    pub(crate) fn of(t: Totals, start: Instant, transport: String, n: &Negotiated) -> Report {
        Report {
            bytes: t.bytes,
            checksum: t.checksum,
            elapsed: start.elapsed(),
            transport,
            peer: n.peer_addr.clone(),
            integrity: n.integrity,
            rate_limit: n.rate_limit,
            reconnects: Vec::new(),
            compress: t.compress.map(Box::new),
        }
    }
    /// Throughput in GB/s (10^9 bytes per second), the original tool's unit.
    pub fn gbps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / s / 1e9
        } else {
            0.0
        }
    }
}

/// One reconnect of a hop, as `-v` and `--json` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconnect {
    /// The stream offset the hop resumed at (bytes the receiver held).
    pub offset: u64,
    /// From noticing the loss to the resumed stream's first byte.
    pub downtime: Duration,
    /// The transport of the new connection.
    pub transport: String,
}

/// What a hop tells its user while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HopState {
    /// The connection was lost with the receiver holding `offset` bytes (as
    /// far as this end knows); waiting for a new one.
    Lost {
        /// Bytes this end had moved.
        offset: u64,
    },
    /// The stream flows again on a new connection.
    Resumed(Reconnect),
}
