//! `--compress auto`: for each chunk, the zstd level to compress it at, or
//! none (store it without trying), from what held the sender back during
//! the last few chunks and whether compressing moves the stream faster than
//! storing does.
//!
//! # What the sender reports
//!
//! It asks [`Adapt::next_level`] once per chunk and reports the chunk:
//! compressed at a level ([`Adapt::compressed_at`]) or stored
//! ([`Adapt::stored`]), then its time ([`Adapt::waited`]): waiting on the
//! link (no free buffer: the socket or the receiver's credits full, or
//! `--rate-limit`'s pacing), waiting on compression (the chunk's worker not
//! done), and in all. Every count is of [`UNIT`]s, a chunk counting as the
//! units its bytes make ([`units`]), so that a window, a pause and a stretch
//! cover the same bytes whatever the chunk size; none is shorter than two
//! full chunks ([`Adapt::chunk_size`]).
//!
//! # Phases ([`phase::Phase`])
//!
//! - *Probing*: the stream's first window, and the first after each stored
//!   stretch. The sender reads ahead only as far as it needs
//!   ([`Adapt::probe_left`]): a probe that loses ends in a pause, and chunks
//!   compressed beyond it would be judged by no window.
//! - *Compressing*: every [`WINDOW`] units compressed at the current level,
//!   a window decides (below).
//! - *Pause due*: a window decided to store the next chunks; the next
//!   [`Adapt::next_level`] begins the pause. Chunks compressed before still
//!   count in a window, and one that ends first decides on the same pause.
//! - *Storing*: `None` until the pause's units are stored; then the stretch
//!   ends, its rate counts as storing's, and the next window is a probe.
//!
//! # What a window decides ([`decide`])
//!
//! What bound it: the *link* where its waits are more than compression's and
//! at least [`BOUND`] of the window's time; *compression* where its waits
//! are more than the link's and at least [`BOUND`], and the window moved
//! fewer bytes than the link carries at its ratio (storing's rate over the
//! ratio: a window faster than that went into buffers, and the link binds
//! once they are full); else *neither* (the sender waits for its input).
//! Then the first rule that applies ([`Why`]):
//!
//! 1. `Incompressible`: the chunks shrank by less than 3 %
//!    ([`INCOMPRESSIBLE`]). A pause of [`FIRST_INCOMPRESSIBLE_OFF`], twice
//!    as long after each such window in a row (up to [`MAX_OFF`]); the level
//!    stays, as what held before the data stopped compressing holds when it
//!    starts again.
//! 2. `StoringUnderrated`: the compressed windows since the last stretch put
//!    more than [`SPAN_WIRE`] bytes on the link at more than [`UNDERRATED`]
//!    × storing's rate. No buffer holds that many, so the link carried them
//!    and storing's rate was measured low (a stretch at the start of a
//!    stream can measure a fraction of the link): it is forgotten, a stretch
//!    of [`WINDOW`] units measures it again at once, and the trials start
//!    again from [`TRIAL_FIRST`].
//! 3. `CpuLower`: compression bound above [`ADAPT_MIN`]. The level goes
//!    halfway down to it (a level the cores cannot keep up with costs more
//!    than one a level too low), and the level below the one that bound is
//!    the ceiling: the link raises the level no higher until
//!    [`CEILING_HELD`] link-bound windows at it, then one more.
//! 4. `SlowerThanStoring`: the window, with the windows before it at its
//!    level since the last stretch (up to [`RECENT`]: one alone swings),
//!    moved fewer raw bytes per second than storing's rate × [`KEEP_MARGIN`].
//!    The level goes to [`ADAPT_MIN`], the likeliest to beat storing at the
//!    next probe, and a pause after a loss follows (below). A receiver that
//!    decompresses slower than the link carries stored chunks looks like the
//!    link from here: storing then wins whatever the level.
//! 5. `CpuFirst`: compression bound at [`ADAPT_MIN`] before storing was
//!    measured: a pause after a loss, to measure it.
//! 6. `Pays`: the link bound: one level up, to at most the ceiling
//!    ([`ADAPT_MAX`] until compression binds); neither: the level stays.
//!    After every so many such windows a trial stretch of [`WINDOW`] units
//!    goes stored to measure storing again: the first after [`TRIAL_FIRST`].
//!    The first window after a stretch sets when the next comes: after four
//!    times as many windows as the last (up to [`TRIAL_MAX`]), or
//!    [`TRIAL_MAX`] where it moved at least twice storing's rate. Where it
//!    won by [`CLEAR_WIN`] or more, the pauses after a loss start short
//!    again; a narrower win leaves them as long as they were.
//!
//! # Pauses after a loss
//!
//! [`FIRST_OFF`] units, then twice the last one, up to [`MAX_OFF`]. Where
//! compression bound, two stretches or more measured storing (one alone can
//! have gone into empty buffers) and the window moved less than
//! [`FAR_SLOWER`] × storing's rate, at least [`probe_pays_off_after`]: as
//! many as keep the next probe's loss under [`PROBE_SHARE`] of the pause.
//! Such a long pause ends early once [`PAUSE_CHECKED_AFTER`] paced units,
//! three in four of them waiting on the link, show it carrying stored chunks
//! slower than the probe moved: storing was measured high; the next pause
//! after a loss is twice what this one stored. At its end a pause after a
//! loss goes on as long again, with no probe, where fewer than
//! [`LINK_IDLE_SHARE`] of the units stored since it began waited on the link
//! for half their time: the link is not what the stream waits for, and no
//! level moves it faster.
//!
//! The stream's first window, where it ended in `CpuFirst`, compressed into
//! empty buffers with nothing to wait for but the cores, so no probe moves
//! more: where the first stretch stored faster (× [`KEEP_MARGIN`]), the pause
//! goes on with no probe, by the rules above on that one stretch, compared
//! with that window.
//!
//! # Storing's rate ([`stretch`], [`rates`])
//!
//! A stretch's rate counts from its first chunk that waited on the link for
//! half its time (its *paced* part): the chunks before went into buffers the
//! compressed chunks had let drain, faster than the link. That holds where
//! at least [`PACED_MIN`] units count from there, half of them waiting (a
//! stretch whose paced part began near its end goes on until it has them);
//! else the one chunk that waited was a stall, and the whole stretch's rate
//! counts. Storing's rate is the lowest of the last [`STORED_KEPT`]
//! stretches' (an error only ever raises it), and under `--rate-limit` at
//! most the limit from the first chunk on ([`Adapt::paced`]).
//!
//! The waits of stored chunks count in the stretch, never in a window. A
//! chunk compressed at another level than the current one (on the pool when
//! the level changed) is judged by no window, nor are its waits
//! ([`Adapt::compressed_at`]); nor is one counted during a stretch.
//!
//! # The code
//!
//! [`phase`]: the phases and every move between them; [`decide`]: the rules
//! above; [`stretch`]: what a stretch measured; [`rates`]: storing's rate,
//! the recent windows' and the wire's since the last stretch; [`level`]: the
//! level and its ceiling; [`schedule`]: the pauses' lengths and when the
//! next trial comes; [`window`]: the window under way.

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
    /// The chunk counted last: where its waits go.
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
    /// stretch has fewer than two such. Each chunk counts as the `UNIT`s
    /// it holds (256 KiB each), so that a window, a pause and a stretch cover
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
    /// extends or renews the one under way.
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
