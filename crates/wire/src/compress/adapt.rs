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
use std::time::Duration;

/// The adaptive level (see the module docs).
#[derive(Debug, Clone)]
pub struct Adapt {
    level: i32,
    /// The units ([`UNIT`]) a full chunk holds: a window or a stretch is
    /// two full chunks at least. Every count below is of units, not chunks,
    /// each chunk counted by its own bytes ([`units`]).
    per: u32,
    /// Units left to store without trying.
    off_for: u32,
    /// How long the next incompressible pause lasts.
    next_off: u32,
    /// How long the next pause for compression binding at the lowest level lasts.
    next_cpu_off: u32,
    chunks: u32,
    raw: u64,
    packed: u64,
    link: Duration,
    cpu: Duration,
    elapsed: Duration,
    last: Option<Binding>,
    /// A stretch stored without trying is under way, its raw bytes and
    /// the time of its chunks.
    pausing: bool,
    paused_raw: u64,
    paused_time: Duration,
    /// The stretch's bytes and time from its first chunk that waited on
    /// the link for half its time on (none yet while the time is zero): the
    /// buffers between here and the receiver were full from then on, so
    /// this is the link's rate for stored chunks (the chunks before went
    /// into buffers the compressed chunks had let drain, at memory speed).
    paced_raw: u64,
    paced_time: Duration,
    /// Chunks counted in `paced_*`, and how many of them waited on the
    /// link for half their time: where most did not, the one that started
    /// it was a stall, not full buffers.
    paced_chunks: u32,
    paced_waited: u32,
    /// Chunks the stretch was stored past its length to count
    /// [`PACED_MIN`] chunks from its first that waited.
    extended: u32,
    /// The raw bytes of the chunk counted last, if stored.
    last_raw: u64,
    /// The last chunk counted went stored: the next waits are its.
    last_stored: bool,
    /// The last chunk was compressed at a level other than the current
    /// one (on the pool when the level changed): judged by no window, nor
    /// are its waits.
    last_stale: bool,
    /// Storing's rate (bytes per second): the lowest of the last
    /// [`STORED_KEPT`] stretches' ([`Adapt::stored_rate`]).
    stored_rates: [f64; STORED_KEPT],
    stored_count: usize,
    /// The highest level the link may raise it to: one below the last level
    /// compression bound at ([`ADAPT_MAX`] before), and link-bound windows
    /// spent at it.
    ceiling: i32,
    at_ceiling: u32,
    /// A stretch ended since the last decision.
    fresh: bool,
    /// Wire bytes and time of the compressed windows since the last stretch.
    span_wire: u64,
    span_time: Duration,
    /// Windows that compression paid since the last stored stretch, and how
    /// many before the next.
    since_trial: u32,
    trial_every: u32,
    /// The last window's decision, until taken.
    decided: Option<Decision>,
    /// During a long pause: the rate of the probes it follows
    /// ([`Adapt::pause_lost_its_bet`]).
    probe_rate: Option<f64>,
    /// Raw bytes and time of the last [`RECENT`] windows since the last
    /// stored stretch, all at `recent_level` (`recent_n` of them so far).
    recent: [(u64, Duration); RECENT],
    recent_n: usize,
    recent_level: i32,
    /// The most the link carries (bytes per second), where the sender
    /// paces it (`--rate-limit`): storing is never faster.
    link_cap: Option<f64>,
    /// The window under way is a probe ([`Adapt::probe_left`]).
    probing: bool,
    /// The pause under way after a probe slower than storing (0: another
    /// kind), the units stored since it began or was renewed, and of them
    /// those that waited on the link ([`Adapt::link_idle`]).
    slower_pause: u32,
    leg_units: u32,
    leg_waited: u32,
    /// The stream's first window, where it ended in [`Why::CpuFirst`],
    /// until the first stretch ends ([`Adapt::first_lost`]).
    first: Option<Decision>,
}

impl Default for Adapt {
    fn default() -> Self {
        Adapt::new()
    }
}

impl Adapt {
    /// Starts at [`ADAPT_START`].
    pub fn new() -> Adapt {
        Adapt {
            level: ADAPT_START,
            per: 1,
            off_for: 0,
            next_off: FIRST_INCOMPRESSIBLE_OFF,
            next_cpu_off: FIRST_OFF,
            chunks: 0,
            raw: 0,
            packed: 0,
            link: Duration::ZERO,
            cpu: Duration::ZERO,
            elapsed: Duration::ZERO,
            last: None,
            pausing: false,
            paused_raw: 0,
            paused_time: Duration::ZERO,
            paced_raw: 0,
            paced_time: Duration::ZERO,
            paced_chunks: 0,
            paced_waited: 0,
            extended: 0,
            last_raw: 0,
            last_stored: false,
            last_stale: false,
            stored_rates: [0.0; STORED_KEPT],
            stored_count: 0,
            ceiling: ADAPT_MAX,
            at_ceiling: 0,
            fresh: false,
            span_wire: 0,
            span_time: Duration::ZERO,
            since_trial: 0,
            trial_every: TRIAL_FIRST,
            decided: None,
            probe_rate: None,
            recent: [(0, Duration::ZERO); RECENT],
            recent_n: 0,
            recent_level: ADAPT_START,
            link_cap: None,
            probing: true,
            slower_pause: 0,
            leg_units: 0,
            leg_waited: 0,
            first: None,
        }
    }

    /// The sender paces the link to `bytes_per_sec` (`--rate-limit`):
    /// storing's rate is at most that from the first chunk on, so the
    /// stream's first windows, which compress into empty buffers, are not
    /// taken for compression binding, and no stretch into those buffers
    /// (at memory speed) counts as storing's rate. On a 16-core host at
    /// 1 Gb/s the stream began with 48 chunks stored, the first 16 of
    /// them measuring 1.5-2 GB/s, which cost `auto` 7 % of a 384 MiB
    /// stream against `zstd:3`.
    pub fn paced(mut self, bytes_per_sec: Option<f64>) -> Adapt {
        self.link_cap = bytes_per_sec.filter(|r| *r > 0.0);
        self
    }

    /// Chunks of at most `bytes` (the transport's buffer): no window or
    /// stretch has fewer than two such. Each chunk counts as the [`UNIT`]s
    /// it holds ([`units`]), so that a window, a pause and a stretch cover
    /// the bytes they were measured at whatever the chunks' sizes (a 1 MiB
    /// chunk is four of the 256 KiB ones; one of 256 KiB or less, one; a
    /// pipe's short reads and the sender's 256 KiB reads of data that does
    /// not compress count as what they hold, not as full chunks).
    pub fn chunk_size(&mut self, bytes: usize) {
        self.per = units(bytes);
    }

    /// A count of `units`, but at least two chunks' worth.
    fn least(&self, units: u32) -> u32 {
        units.max(2 * self.per)
    }

    /// The level for the next chunk; `None`: store it without trying. Call
    /// once per chunk.
    pub fn next_level(&mut self) -> Option<i32> {
        if self.off_for > 0 && self.pause_lost_its_bet() {
            // Ended for the link: not renewed, and the next pause after
            // a probe that loses is twice what this one stored, not what
            // it was to be.
            self.off_for = 0;
            self.slower_pause = 0;
            self.next_cpu_off = self.leg_units.saturating_mul(2).clamp(FIRST_OFF, MAX_OFF);
        }
        if self.off_for > 0 {
            // Counted down by the chunk's units in `stored`.
            self.pausing = true;
            return None;
        }
        let paced_min = self.least(PACED_MIN);
        if self.pausing && (1..paced_min).contains(&self.paced_chunks) && self.extended < paced_min
        {
            // A chunk waited on the link near the stretch's end: a few more,
            // to tell full buffers from a stall (counted in `stored`).
            return None;
        }
        if self.pausing && self.slower_pause > 0 && self.link_idle() {
            // The same pause again, no probe ([`Adapt::link_idle`]).
            (self.off_for, self.leg_units, self.leg_waited) = (self.slower_pause, 0, 0);
            return None;
        }
        if std::mem::take(&mut self.pausing) {
            self.probing = true;
            (self.slower_pause, self.leg_units, self.leg_waited) = (0, 0, 0);
            self.probe_rate = None;
            self.recent_n = 0;
            // The stretch stored without trying is over: its rate, for the
            // next decision (its waits are not the next window's). From its
            // first chunk that waited on, where the chunks from there on
            // mostly waited too (the buffers were full); else the whole
            // stretch's (one chunk that waited was a stall: on two busy
            // cores over loopback a 3 ms stall at the end of a 16-chunk
            // stretch measured storing at 130-250 MB/s for a path that
            // stores at 1 GB/s, and the whole stream went compressed at a
            // quarter of that).
            let paced = self.paced_chunks >= paced_min
                && self.paced_waited * 2 >= self.paced_chunks
                && !self.paced_time.is_zero();
            let (raw, time) = if paced {
                (self.paced_raw, self.paced_time)
            } else {
                (self.paused_raw, self.paused_time)
            };
            if raw > 0 && !time.is_zero() {
                self.stored_rates[self.stored_count % STORED_KEPT] =
                    raw as f64 / time.as_secs_f64();
                self.stored_count += 1;
                self.fresh = true;
            }
            self.paused_raw = 0;
            self.paused_time = Duration::ZERO;
            (self.span_wire, self.span_time) = (0, Duration::ZERO);
            (self.paced_raw, self.paced_time) = (0, Duration::ZERO);
            (self.paced_chunks, self.paced_waited, self.extended) = (0, 0, 0);
            // Chunks compressed before the stretch began and sent during
            // it are no window's.
            self.clear();
            if self.first_lost() {
                return None;
            }
        }
        Some(self.level)
    }

    /// The level compressed chunks get now (for reports).
    pub fn level(&self) -> i32 {
        self.level
    }

    /// The decision of the window that ended last, once (for diagnostics).
    pub fn take_decision(&mut self) -> Option<Decision> {
        self.decided.take()
    }

    /// What bound the last window that decided, if any did yet.
    pub fn last_binding(&self) -> Option<Binding> {
        self.last
    }

    /// The time of the chunk counted last ([`Adapt::compressed`] or
    /// [`Adapt::stored`]): waiting on the link, waiting on compression, and
    /// in all.
    pub fn waited(&mut self, link: Duration, cpu: Duration, elapsed: Duration) {
        if self.last_stored {
            self.paused_time += elapsed;
            // Paced from the first chunk that waited half its time on.
            let waited = !elapsed.is_zero() && link * 2 >= elapsed;
            let u = units(self.last_raw as usize);
            self.leg_units = self.leg_units.saturating_add(u);
            self.leg_waited = self.leg_waited.saturating_add(u * u32::from(waited));
            if !self.paced_time.is_zero() || waited {
                self.paced_raw += self.last_raw;
                self.paced_time += elapsed;
                self.paced_chunks = self.paced_chunks.saturating_add(u);
                self.paced_waited = self.paced_waited.saturating_add(u * u32::from(waited));
            }
        } else if !self.last_stale {
            self.link += link;
            self.cpu += cpu;
            self.elapsed += elapsed;
        }
    }

    /// A chunk of `raw` bytes stored without trying (a `None` from
    /// [`Adapt::next_level`]).
    pub fn stored(&mut self, raw: usize) {
        if self.off_for > 0 {
            self.off_for = self.off_for.saturating_sub(units(raw));
        } else {
            self.extended += units(raw);
        }
        self.paused_raw += raw as u64;
        self.last_raw = raw as u64;
        self.last_stored = true;
        self.last_stale = false;
    }

    /// A chunk that was compressed at the current level from `raw` bytes
    /// to `packed` (`raw` if it went stored); decides at the end of a
    /// window.
    pub fn compressed(&mut self, raw: usize, packed: usize) {
        self.compressed_at(self.level, raw, packed);
    }

    /// A chunk compressed at `level` (what [`Adapt::next_level`] gave when
    /// it was read) from `raw` bytes to `packed`. A chunk at another level
    /// than the current one was on the pool when the level changed: no
    /// window judges it. With nine chunks ahead on the pool and eight to a
    /// window, the window after a change was mostly the old level's, and on
    /// a 1 Gb/s link on a 16-core host a window of level-6 chunks judged
    /// level 3 as compression-bound, the ceiling fell to 2 and held there
    /// for 32 windows (0.39 GB/s against `zstd:3`'s 0.43).
    pub fn compressed_at(&mut self, level: i32, raw: usize, packed: usize) {
        self.last_stored = false;
        self.last_stale = level != self.level;
        if self.pausing || self.last_stale {
            // Compressed before the stretch began: judged by no window.
            return;
        }
        self.chunks += units(raw);
        self.raw += raw as u64;
        self.packed += packed.min(raw) as u64;
        if self.chunks < self.least(WINDOW) {
            return;
        }
        self.probing = false;
        let ratio = self.packed as f64 / self.raw.max(1) as f64;
        let total = self.elapsed.as_secs_f64().max(1e-9);
        let (link, cpu) = (self.link.as_secs_f64(), self.cpu.as_secs_f64());
        let rate = self.raw as f64 / total;
        // The raw bytes per second the link carries at this ratio, as far as
        // storing's rate tells.
        let link_carries = self.stored_rate().map(|s| s / ratio.max(0.01));
        let binding = if link > cpu && link >= BOUND * total {
            Binding::Link
        } else if cpu > link && cpu >= BOUND * total && link_carries.is_none_or(|c| rate < c) {
            Binding::Cpu
        } else {
            // Also a window that waited on compression yet moved more than
            // the link carries at its ratio: it filled buffers, and the link
            // binds once they are full.
            Binding::Neither
        };
        self.last = Some(binding);
        let fresh = std::mem::take(&mut self.fresh);
        let record = |a: &mut Adapt, why| {
            a.decided = Some(Decision {
                ratio,
                binding,
                link_share: link / total,
                rate,
                stored_rate: a.stored_rate(),
                why,
                level: a.level,
                store_for: a.off_for,
            })
        };
        if ratio > INCOMPRESSIBLE {
            // The level stays: what the link and the cores allowed before
            // the data stopped compressing still holds when it starts again.
            self.off_for = self.next_off;
            self.next_off = (self.next_off * 2).min(MAX_OFF);
            record(self, Why::Incompressible);
            self.clear();
            return;
        }
        self.next_off = FIRST_INCOMPRESSIBLE_OFF;
        self.span_wire += self.packed;
        self.span_time += self.elapsed;
        if self.storing_underrated() {
            self.stored_count = 0;
            self.trial_every = TRIAL_FIRST;
            self.since_trial = 0;
            self.off_for = WINDOW;
            record(self, Why::StoringUnderrated);
            self.clear();
            return;
        }
        // Compressing's rate over storing's, where a stretch was stored:
        // the rate of the last few windows at this level.
        let recent = self.recent_rate();
        let beats = self.stored_rate().map(|s| recent / s);
        let why = match (binding, beats) {
            (Binding::Cpu, _) if self.level > ADAPT_MIN => {
                self.ceiling = self.level - 1;
                self.at_ceiling = 0;
                self.level = ADAPT_MIN + (self.level - ADAPT_MIN) / 2;
                Why::CpuLower
            }
            (_, Some(b)) if b < KEEP_MARGIN => {
                // The next probe at the cheapest level: the one most likely
                // to beat storing (the link raises it again if it binds).
                self.level = ADAPT_MIN;
                // The long pause only on storing's rate from two stretches
                // at least: one alone can have gone into empty buffers.
                let may_be_long = binding == Binding::Cpu && self.stored_count >= 2;
                self.pause_after_losing(recent, b, may_be_long);
                Why::SlowerThanStoring
            }
            (Binding::Cpu, None) => {
                self.store_for_a_while(0);
                Why::CpuFirst
            }
            (b, _) => {
                if fresh {
                    // A narrow win leaves the pauses as long as they were.
                    if beats.is_none_or(|b| b >= CLEAR_WIN) {
                        self.next_cpu_off = FIRST_OFF;
                    }
                    self.trial_every = if beats.is_some_and(|b| b >= 2.0) {
                        TRIAL_MAX
                    } else {
                        (self.trial_every * 4).min(TRIAL_MAX)
                    };
                }
                if b == Binding::Link {
                    self.raise();
                }
                self.since_trial += 1;
                if self.since_trial >= self.trial_every {
                    self.since_trial = 0;
                    self.off_for = WINDOW;
                }
                Why::Pays
            }
        };
        record(self, why);
        if why == Why::CpuFirst {
            self.first = self.decided;
        }
        self.clear();
    }

    /// One level up, to at most the ceiling; at the ceiling for
    /// [`CEILING_HELD`] link-bound windows, the ceiling goes up one.
    fn raise(&mut self) {
        if self.level >= self.ceiling {
            self.at_ceiling += 1;
            if self.at_ceiling >= CEILING_HELD {
                self.ceiling = (self.ceiling + 1).min(ADAPT_MAX);
                self.at_ceiling = 0;
            }
        }
        self.level = (self.level + 1).min(self.ceiling);
    }

    /// Stores the next chunks without trying, twice as many as last time
    /// and at least `least` (the next time twice as many as this time).
    fn store_for_a_while(&mut self, least: u32) {
        self.off_for = self.next_cpu_off.max(least).min(MAX_OFF);
        self.next_cpu_off = (self.off_for * 2).min(MAX_OFF);
        self.since_trial = 0;
    }

    /// Starts a new window.
    fn clear(&mut self) {
        self.chunks = 0;
        self.raw = 0;
        self.packed = 0;
        self.link = Duration::ZERO;
        self.cpu = Duration::ZERO;
        self.elapsed = Duration::ZERO;
    }
}

#[path = "adapt_probe.rs"]
mod probe;

#[cfg(test)]
#[path = "adapt_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "adapt_chunk_size_tests.rs"]
mod chunk_size_tests;
