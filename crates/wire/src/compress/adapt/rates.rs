//! The rates windows are judged by: storing's ([`StoredRates`]), the recent
//! windows' at one level ([`Recent`]), and the wire's since the last
//! stretch ([`Span`]).

use super::super::tuning::{RECENT, SPAN_WIRE, STORED_KEPT, UNDERRATED};
use std::time::Duration;

/// Storing's rate (bytes per second): what the last stretches measured,
/// and the `--rate-limit` it cannot pass.
#[derive(Debug, Clone)]
pub(super) struct StoredRates {
    /// The last [`STORED_KEPT`] stretches' rates, `count` of them measured
    /// since the stream began or they were forgotten.
    rates: [f64; STORED_KEPT],
    count: usize,
    /// The most the link carries where the sender paces it.
    cap: Option<f64>,
    /// A stretch was measured since the last window decided.
    fresh: bool,
}

impl StoredRates {
    /// None measured, no cap.
    pub(super) fn new() -> StoredRates {
        StoredRates {
            rates: [0.0; STORED_KEPT],
            count: 0,
            cap: None,
            fresh: false,
        }
    }

    /// Storing's rate is at most `cap` bytes per second (none: as measured).
    pub(super) fn cap(&mut self, cap: Option<f64>) {
        self.cap = cap.filter(|r| *r > 0.0);
    }

    /// Storing's rate: the lowest of the last [`STORED_KEPT`] stretches'
    /// (none before the first), and never above the cap. A stretch that
    /// begins while the buffers to the receiver are not full measures more
    /// than the link carries; an error only ever raises the figure, so the
    /// lowest recent one is the best.
    pub(super) fn rate(&self) -> Option<f64> {
        let n = self.count.min(STORED_KEPT);
        let measured = (n > 0).then(|| {
            self.rates[..n]
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
        });
        match (measured, self.cap) {
            (Some(m), Some(cap)) => Some(m.min(cap)),
            (m, cap) => m.or(cap),
        }
    }

    /// Stretches measured since the stream began or the rates were
    /// forgotten.
    pub(super) fn measured(&self) -> usize {
        self.count
    }

    /// A stretch measured `rate`.
    pub(super) fn push(&mut self, rate: f64) {
        self.rates[self.count % STORED_KEPT] = rate;
        self.count += 1;
        self.fresh = true;
    }

    /// The rates were measured wrong: none is kept (the cap is).
    pub(super) fn forget(&mut self) {
        self.count = 0;
    }

    /// Whether a stretch was measured since the last call.
    pub(super) fn take_fresh(&mut self) -> bool {
        std::mem::take(&mut self.fresh)
    }
}

/// Raw bytes and time of the last [`RECENT`] windows since the last stored
/// stretch, all at one level: one window alone swings.
#[derive(Debug, Clone)]
pub(super) struct Recent {
    windows: [(u64, Duration); RECENT],
    /// Windows counted (the last [`RECENT`] kept).
    n: usize,
    level: i32,
}

impl Recent {
    /// None yet, at `level`.
    pub(super) fn new(level: i32) -> Recent {
        Recent {
            windows: [(0, Duration::ZERO); RECENT],
            n: 0,
            level,
        }
    }

    /// Counts a window of `raw` bytes in `time` at `level` (the windows
    /// before at another level no longer count) and gives the kept
    /// windows' rate (raw bytes per second).
    pub(super) fn rate(&mut self, level: i32, raw: u64, time: Duration) -> f64 {
        if self.level != level {
            (self.level, self.n) = (level, 0);
        }
        self.windows[self.n % RECENT] = (raw, time);
        self.n += 1;
        let kept = &self.windows[..self.n.min(RECENT)];
        let raw: u64 = kept.iter().map(|w| w.0).sum();
        let time: Duration = kept.iter().map(|w| w.1).sum();
        raw as f64 / time.as_secs_f64().max(1e-9)
    }

    /// A stretch ended: the windows before it count no more.
    pub(super) fn clear(&mut self) {
        self.n = 0;
    }
}

/// Wire bytes and time of the compressed windows since the last stretch.
#[derive(Debug, Clone, Default)]
pub(super) struct Span {
    wire: u64,
    time: Duration,
}

impl Span {
    /// A compressed window of `wire` bytes in `time`.
    pub(super) fn add(&mut self, wire: u64, time: Duration) {
        self.wire += wire;
        self.time += time;
    }

    /// Whether the link carried more than [`SPAN_WIRE`] bytes of them at
    /// more than [`UNDERRATED`] times `stored` (storing's measured rate): no
    /// buffer holds that many, so the link did carry them, and that rate
    /// was measured wrong.
    pub(super) fn underrates(&self, stored: Option<f64>) -> bool {
        let Some(stored) = stored else {
            return false;
        };
        let secs = self.time.as_secs_f64();
        self.wire >= SPAN_WIRE && secs > 0.0 && self.wire as f64 / secs > UNDERRATED * stored
    }
}
