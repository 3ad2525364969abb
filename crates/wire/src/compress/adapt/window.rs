//! The window under way ([`Window`]) and the chunk counted last, whose
//! waits come next ([`Counted`]).

use super::super::tuning::units;
use std::time::Duration;

/// The compressed chunks of the window under way: units, raw and
/// compressed bytes, and their waits.
#[derive(Debug, Clone, Default)]
pub(super) struct Window {
    pub(super) units: u32,
    pub(super) raw: u64,
    pub(super) packed: u64,
    pub(super) link: Duration,
    pub(super) cpu: Duration,
    pub(super) elapsed: Duration,
}

impl Window {
    /// A chunk compressed from `raw` bytes to `packed` (`raw` if it went stored).
    pub(super) fn chunk(&mut self, raw: usize, packed: usize) {
        self.units += units(raw);
        self.raw += raw as u64;
        self.packed += packed.min(raw) as u64;
    }

    /// A compressed chunk's time.
    pub(super) fn waited(&mut self, link: Duration, cpu: Duration, elapsed: Duration) {
        self.link += link;
        self.cpu += cpu;
        self.elapsed += elapsed;
    }
}

/// The chunk counted last ([`Adapt::compressed_at`](super::Adapt::compressed_at)
/// or [`Adapt::stored`](super::Adapt::stored)): where its waits go.
#[derive(Debug, Clone, Copy)]
pub(super) enum Counted {
    /// Compressed at the current level: the window's.
    Compressed,
    /// Compressed at another level (on the pool when the level changed):
    /// no window's.
    Stale,
    /// Stored, this many raw bytes: the stretch's.
    Stored(u64),
}
