//! `--compress auto`: the level of the next chunk, from what bound the sender
//! during the last few chunks, as `zstd --adapt` does, and whether
//! compressing moves the stream faster than storing at all.
//!
//! The sender tells [`Adapt`] how long it waited on the link (no free buffer:
//! the socket or the receiver's credits full, or `--rate-limit`'s pacing) and
//! how long on compression (the next chunk's worker not done yet), and how much
//! each chunk shrank. Every [`WINDOW`] compressed chunks it decides:
//!
//! - the chunks shrank by less than 3 % ([`INCOMPRESSIBLE`]): stop trying; the
//!   next chunks go stored without trying for 4 chunks, then twice as
//!   many after each failed probe (up to 1024); the level stays;
//! - compression bound above [`ADAPT_MIN`] (its waits at least [`BOUND`] of
//!   the window's time and more than the link's, and the window moved fewer
//!   bytes than the link carries at its ratio: storing's rate over the
//!   ratio; a window faster than that went into buffers, and on a 1 Gb/s
//!   link on a 16-core host such windows at 1-1.3 GB/s lowered the level
//!   to 1-2 again and again): halfway down to it (up one
//!   level at a time, down fast: a window at a level the CPU cannot keep
//!   up with costs more than one a level too low, and on a 1 Gb/s link
//!   with two busy cores `auto` spent several windows stepping down from
//!   levels 4-6 one at a time), and the level below the one that bound is
//!   the most the link raises it to, for [`CEILING_HELD`] windows at it
//!   (without that ceiling a 1 Gb/s link on a 16-core host climbed to the
//!   level compression bound at, halved, and climbed again: the windows
//!   that bound moved half what the link carried);
//! - the window, with the windows before it at its level since the last
//!   stretch (up to [`RECENT`] in all), moved fewer bytes per second than
//!   the last stretch stored without trying did (the lowest of the last
//!   few stretches), times [`KEEP_MARGIN`]; or compression bound at
//!   [`ADAPT_MIN`] before any stretch was stored: the next chunks go stored
//!   (16, then twice the last pause after each probe window that is still
//!   slower, up to 1024; a window that wins by less than [`CLEAR_WIN`]
//!   leaves them that long; where compression bound and moved less than
//!   [`FAR_SLOWER`] × storing's rate as two stretches or more measured it,
//!   at least as many as keep the next probe's loss under [`PROBE_SHARE`]
//!   of the pause: a probe at a third of storing's rate is followed by 800
//!   stored chunks, not 32; where the stream's first stretch stored faster
//!   than the first window, which compressed into empty buffers, moved, the
//!   pause goes on with no probe first, by the same rules on that one
//!   stretch ([`Adapt::first_lost`]); such a long pause ends early once
//!   [`PAUSE_CHECKED_AFTER`] of its chunks that waited on the link show it
//!   carrying stored chunks slower than the probes before it moved; a pause
//!   after a probe that lost ends in the next probe only where its stored
//!   chunks waited on the link, else it goes on: [`Adapt::link_idle`]). What
//!   looks like the link from the sender can be the receiver, decompressing
//!   slower than the link carries stored chunks: then storing is faster,
//!   whatever the level, and the next probe starts again at [`ADAPT_MIN`];
//! - otherwise compression pays: the link bound (its waits at least
//!   [`BOUND`] of the window's time and more than compression's): one level
//!   up, to at most the ceiling ([`ADAPT_MAX`] until compression bound); neither bound (the input is what the
//!   sender waits for): no change. Every so many such windows a short
//!   stretch goes stored to measure storing's rate again: after
//!   [`TRIAL_FIRST`] windows, then 4 times as many, and at once
//!   [`TRIAL_MAX`] where compressing was at least twice as fast (a slow
//!   link: the stored stretches cost it at most 1 chunk in 256).
//!
//! - the link carried the compressed chunks since the last stretch, more
//!   than [`SPAN_WIRE`] bytes of them, at more than [`UNDERRATED`] times
//!   storing's rate: that rate was measured wrong (no buffer holds that many
//!   bytes, so the link did carry them), and it is forgotten and measured
//!   again at once. A stretch at the start of a stream can measure a
//!   fraction of the link: on a 16-core host over loopback the first one
//!   measured 115-138 MB/s for a path that stores at 1.7 GB/s, compressing
//!   then seemed ten times faster, no stretch was tried again for 256
//!   windows, and `auto` moved 0.35-0.42 × what `none` did.
//!
//! The waits of a stored stretch are not counted in a window: each probe
//! window is judged on its own chunks. A stored stretch's rate counts from
//! its first chunk that waited on the link for half its time: the chunks
//! before it went into the socket's and the receiver's buffers, which the
//! compressed chunks had let drain, at memory speed (on a 1 Gb/s link a
//! whole stretch of 16 chunks measured 1.5-2.5 × the link's rate, and
//! compressing seemed not to pay). That holds only where at least
//! [`PACED_MIN`] chunks count from there, half of them waiting too (the
//! stretch goes on for up to 3 chunks to see): one chunk that waited
//! and chunks after it that did not is a stall, and the whole stretch is
//! storing's rate.
//!
//! Every count of chunks here is of 256 KiB units ([`UNIT`], each chunk
//! counted by the bytes it holds: [`units`]): a window, a pause and a
//! stretch cover the same bytes whether the transport's chunks are 256 KiB
//! (TCP) or 1 MiB (RDMA, and a compressed stream over TCP) or 4 MiB (a
//! compressed TCP stream whose link binds: [`Decision::large_chunks`]) or
//! shorter (a pipe's reads, a stored chunk read at TCP's 256 KiB), with at
//! least two chunks of the size in use to a window or a stretch's paced
//! part ([`Adapt::chunk_size`]).
//!
//! A chunk compressed at another level than the current one (on the pool
//! when the level changed: up to nine chunks ahead) is judged by no window,
//! nor are its waits ([`Adapt::compressed_at`]). Under `--rate-limit`
//! storing's rate is at most the limit from the first chunk on
//! ([`Adapt::paced`]).

pub use super::decision::{Binding, Decision, Why};
use super::tuning::*;
use level::Level;
use phase::Phase;
use rates::{Recent, Span, StoredRates};
use schedule::{Lengths, Trials};
use std::time::Duration;
use stretch::Stretch;
use window::{Counted, Window};

mod decide;
mod level;
mod phase;
mod rates;
mod schedule;
mod stretch;
mod window;

#[cfg(test)]
mod tests;

/// The adaptive level (see the module docs).
#[derive(Debug, Clone)]
pub struct Adapt {
    /// Probing, compressing, a pause due, or storing.
    phase: Phase,
    /// The level compressed chunks get, and its ceiling.
    level: Level,
    /// The window under way.
    window: Window,
    /// The chunk counted last: whose its waits are.
    last: Counted,
    /// The stored chunks since the last stretch ended.
    stretch: Stretch,
    /// Storing's rate, as the last stretches measured it.
    stored_rates: StoredRates,
    /// The windows at one level since the last stretch.
    recent: Recent,
    /// The compressed chunks on the wire since the last stretch.
    span: Span,
    /// How long the next pauses last.
    lengths: Lengths,
    /// When the next trial stretch goes stored.
    trials: Trials,
    /// The units ([`UNIT`]) a full chunk holds: a window or a stretch's
    /// paced part is two full chunks at least ([`Adapt::least`]).
    per: u32,
    /// What bound the last window that decided.
    binding: Option<Binding>,
    /// The last window's decision, until taken.
    decided: Option<Decision>,
}

impl Default for Adapt {
    fn default() -> Self {
        Adapt::new()
    }
}

impl Adapt {
    /// Starts at [`ADAPT_START`], the stream's first window a probe.
    pub fn new() -> Adapt {
        Adapt {
            phase: Phase::Probing,
            level: Level::new(),
            window: Window::default(),
            last: Counted::Compressed,
            stretch: Stretch::default(),
            stored_rates: StoredRates::new(),
            recent: Recent::new(ADAPT_START),
            span: Span::default(),
            lengths: Lengths::new(),
            trials: Trials::new(),
            per: 1,
            binding: None,
            decided: None,
        }
    }

    /// The sender paces the link to `bytes_per_sec` (`--rate-limit`):
    /// storing's rate is at most that from the first chunk on, so the
    /// stream's first windows, which compress into empty buffers, are not
    /// taken for compression binding, and no stretch into those buffers
    /// counts as storing's rate.
    pub fn paced(mut self, bytes_per_sec: Option<f64>) -> Adapt {
        self.stored_rates.cap(bytes_per_sec);
        self
    }

    /// Chunks of at most `bytes` (the transport's buffer): no window or
    /// stretch has fewer than two such. Each chunk counts as the [`UNIT`]s
    /// it holds ([`units`]), so that a window, a pause and a stretch cover
    /// the same bytes whatever the chunks' sizes (a short chunk counts as
    /// what it holds, not as a full one).
    pub fn chunk_size(&mut self, bytes: usize) {
        self.per = units(bytes);
    }

    /// A count of `units`, but at least two chunks' worth.
    fn least(&self, units: u32) -> u32 {
        units.max(2 * self.per)
    }

    /// The level for the next chunk; `None`: store it without trying. Call
    /// once per chunk. Begins a pause that a window decided, and ends,
    /// extends or renews the one under way ([`Adapt::pause_goes_on`]).
    pub fn next_level(&mut self) -> Option<i32> {
        if self.phase.begin_pause() || self.pause_goes_on() {
            return None;
        }
        if self.phase.storing() {
            let first = self.end_stretch();
            if self.first_lost(first) {
                return None;
            }
        }
        Some(self.level.get())
    }

    /// The level compressed chunks get now (for reports).
    pub fn level(&self) -> i32 {
        self.level.get()
    }

    /// The decision of the window that ended last, once (for diagnostics).
    pub fn take_decision(&mut self) -> Option<Decision> {
        self.decided.take()
    }

    /// What bound the last window that decided, if any did yet.
    pub fn last_binding(&self) -> Option<Binding> {
        self.binding
    }

    /// The time of the chunk counted last ([`Adapt::compressed`] or
    /// [`Adapt::stored`]): waiting on the link, waiting on compression, and
    /// in all. A stored chunk's counts in the stretch, not in a window:
    /// each probe window is judged on its own chunks.
    pub fn waited(&mut self, link: Duration, cpu: Duration, elapsed: Duration) {
        match self.last {
            Counted::Stored(raw) => self.stretch.waited(raw, link, elapsed),
            Counted::Compressed => self.window.waited(link, cpu, elapsed),
            Counted::Stale => {}
        }
    }

    /// A chunk of `raw` bytes stored without trying (a `None` from
    /// [`Adapt::next_level`]).
    pub fn stored(&mut self, raw: usize) {
        let in_pause = self.phase.count_stored(units(raw));
        self.stretch.stored(raw as u64, !in_pause);
        self.last = Counted::Stored(raw as u64);
    }

    /// A chunk that was compressed at the current level from `raw` bytes
    /// to `packed` (`raw` if it went stored); decides at the end of a
    /// window.
    pub fn compressed(&mut self, raw: usize, packed: usize) {
        self.compressed_at(self.level.get(), raw, packed);
    }

    /// A chunk compressed at `level` (what [`Adapt::next_level`] gave when
    /// it was read) from `raw` bytes to `packed`. A chunk at another level
    /// than the current one was on the pool when the level changed: no
    /// window judges it, nor its waits (it would judge the new level by the
    /// old one's chunks). Nor does one compressed before a stretch began
    /// and counted during it.
    pub fn compressed_at(&mut self, level: i32, raw: usize, packed: usize) {
        let stale = level != self.level.get();
        self.last = if stale {
            Counted::Stale
        } else {
            Counted::Compressed
        };
        if self.phase.storing() || stale {
            return;
        }
        self.window.chunk(raw, packed);
        if self.window.units >= self.least(WINDOW) {
            self.decide();
        }
    }

    /// While the window under way is a probe (the stream's first, or the
    /// first after a stretch stored without trying): the raw bytes it
    /// still needs to decide, which is as far as the sender should read
    /// ahead and compress (`None`: as far as it likes). A probe on a path
    /// where storing is faster ends in a pause, and every chunk compressed
    /// beyond its window was compressed for nothing (judged by no window).
    /// A probe that pays starts the read-ahead again once it decides.
    pub fn probe_left(&self) -> Option<usize> {
        self.phase.probing().then(|| {
            let left = self.least(WINDOW).saturating_sub(self.window.units);
            left as usize * UNIT
        })
    }
}
