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
//!   next chunks go stored without trying for 16 chunks, then twice as
//!   many after each failed probe (up to 1024), and the probe starts again at
//!   [`ADAPT_MIN`];
//! - compression bound above [`ADAPT_MIN`]: one level down;
//! - the window moved fewer bytes per second than the last stretch stored
//!   without trying did, times [`KEEP_MARGIN`]; or compression bound at
//!   [`ADAPT_MIN`] before any stretch was stored: the next chunks go stored
//!   (16, then twice as many after each probe window that is still slower,
//!   up to 1024). What looks like the link from the sender can be the
//!   receiver, whose single thread decompresses slower than the link
//!   carries stored chunks: then storing is faster, whatever the level,
//!   and the next probe starts again at [`ADAPT_MIN`];
//! - otherwise compression pays: the link bound (its waits at least
//!   [`BOUND`] of the window's time and more than compression's): one level
//!   up, to at most [`ADAPT_MAX`]; neither bound (the input is what the
//!   sender waits for): no change. Every so many such windows a short
//!   stretch goes stored to measure storing's rate again: after
//!   [`TRIAL_FIRST`] windows, then 4 times as many, and at once
//!   [`TRIAL_MAX`] where compressing was at least twice as fast (a slow
//!   link: the stored stretches cost it at most 1 chunk in 256).
//!
//! The waits of a stored stretch are not counted in a window: each probe
//! window is judged on its own chunks. A stored stretch's rate counts from
//! its first chunk that waited on the link for half its time: the chunks
//! before it went into the socket's and the receiver's buffers, which the
//! compressed chunks had let drain, at memory speed (on a 1 Gb/s link a
//! whole stretch of 16 chunks measured 1.5-2.5 × the link's rate, and
//! compressing seemed not to pay).

use std::time::Duration;

/// The lowest level `auto` uses.
pub const ADAPT_MIN: i32 = 1;
/// The highest level `auto` uses.
pub const ADAPT_MAX: i32 = 12;
/// The level `auto` starts at.
pub const ADAPT_START: i32 = 1;
/// Compressed over raw above this: the data does not compress.
pub const INCOMPRESSIBLE: f64 = 0.97;
/// Compressed chunks per decision.
pub const WINDOW: u32 = 8;
/// The share of a window's time a wait must take to be what binds.
pub const BOUND: f64 = 0.10;
/// How much faster than storing a compression-bound window at the lowest
/// level must run to be kept: a probe of [`WINDOW`] chunks fits in the
/// socket and the receiver's buffers, so it looks faster than the stream
/// it would set.
pub const KEEP_MARGIN: f64 = 1.25;
/// Chunks stored without trying after the first incompressible window.
const FIRST_OFF: u32 = 16;
/// The longest such pause.
const MAX_OFF: u32 = 1024;
/// Windows compressed before the first stretch stored to compare with.
pub const TRIAL_FIRST: u32 = 4;
/// The most windows compressed between two such stretches.
pub const TRIAL_MAX: u32 = 256;

/// What bound the sender during a window, as [`Adapt`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// The link: raise the level.
    Link,
    /// Compression: lower it.
    Cpu,
    /// Neither: keep it.
    Neither,
}

/// The adaptive level (see the module docs).
#[derive(Debug, Clone)]
pub struct Adapt {
    level: i32,
    /// Chunks left to store without trying.
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
    /// The raw bytes of the chunk counted last, if stored.
    last_raw: u64,
    /// The last chunk counted went stored: the next waits are its.
    last_stored: bool,
    /// That stretch's rate once it ended (bytes per second).
    stored_rate: Option<f64>,
    /// A stretch ended since the last decision.
    fresh: bool,
    /// Windows that compression paid since the last stored stretch, and how
    /// many before the next.
    since_trial: u32,
    trial_every: u32,
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
            off_for: 0,
            next_off: FIRST_OFF,
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
            last_raw: 0,
            last_stored: false,
            stored_rate: None,
            fresh: false,
            since_trial: 0,
            trial_every: TRIAL_FIRST,
        }
    }

    /// The level for the next chunk; `None`: store it without trying. Call
    /// once per chunk.
    pub fn next_level(&mut self) -> Option<i32> {
        if self.off_for > 0 {
            self.off_for -= 1;
            self.pausing = true;
            return None;
        }
        if std::mem::take(&mut self.pausing) {
            // The stretch stored without trying is over: its rate, for the
            // next decision (its waits are not the next window's).
            let (raw, time) = if self.paced_raw > 0 && !self.paced_time.is_zero() {
                (self.paced_raw, self.paced_time)
            } else {
                (self.paused_raw, self.paused_time)
            };
            if raw > 0 && !time.is_zero() {
                self.stored_rate = Some(raw as f64 / time.as_secs_f64());
                self.fresh = true;
            }
            self.paused_raw = 0;
            self.paused_time = Duration::ZERO;
            (self.paced_raw, self.paced_time) = (0, Duration::ZERO);
            // Chunks compressed before the stretch began and sent during
            // it are no window's.
            self.clear();
        }
        Some(self.level)
    }

    /// The level compressed chunks get now (for reports).
    pub fn level(&self) -> i32 {
        self.level
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
            if !self.paced_time.is_zero() || (!elapsed.is_zero() && link * 2 >= elapsed) {
                self.paced_raw += self.last_raw;
                self.paced_time += elapsed;
            }
        } else {
            self.link += link;
            self.cpu += cpu;
            self.elapsed += elapsed;
        }
    }

    /// A chunk of `raw` bytes stored without trying (a `None` from
    /// [`Adapt::next_level`]).
    pub fn stored(&mut self, raw: usize) {
        self.paused_raw += raw as u64;
        self.last_raw = raw as u64;
        self.last_stored = true;
    }

    /// A chunk that was compressed (at the level [`Adapt::next_level`] gave)
    /// from `raw` bytes to `packed` (`raw` if it went stored); decides at the
    /// end of a window.
    pub fn compressed(&mut self, raw: usize, packed: usize) {
        self.last_stored = false;
        if self.pausing {
            // Compressed before the stretch began: judged by no window.
            return;
        }
        self.chunks += 1;
        self.raw += raw as u64;
        self.packed += packed.min(raw) as u64;
        if self.chunks < WINDOW {
            return;
        }
        let ratio = self.packed as f64 / self.raw.max(1) as f64;
        let total = self.elapsed.as_secs_f64().max(1e-9);
        let (link, cpu) = (self.link.as_secs_f64(), self.cpu.as_secs_f64());
        let binding = if link > cpu && link >= BOUND * total {
            Binding::Link
        } else if cpu > link && cpu >= BOUND * total {
            Binding::Cpu
        } else {
            Binding::Neither
        };
        self.last = Some(binding);
        let fresh = std::mem::take(&mut self.fresh);
        if ratio > INCOMPRESSIBLE {
            self.off_for = self.next_off;
            self.next_off = (self.next_off * 2).min(MAX_OFF);
            self.level = ADAPT_MIN;
            self.clear();
            return;
        }
        self.next_off = FIRST_OFF;
        // Compressing's rate over storing's, where a stretch was stored.
        let beats = self.stored_rate.map(|s| self.raw as f64 / total / s);
        match binding {
            Binding::Cpu if self.level > ADAPT_MIN => self.level -= 1,
            _ if beats.is_some_and(|b| b < KEEP_MARGIN) => {
                // The next probe at the cheapest level: the one most likely
                // to beat storing (the link raises it again if it binds).
                self.level = ADAPT_MIN;
                self.store_for_a_while();
            }
            Binding::Cpu if beats.is_none() => self.store_for_a_while(),
            b => {
                if fresh {
                    self.next_cpu_off = FIRST_OFF;
                    self.trial_every = if beats.is_some_and(|b| b >= 2.0) {
                        TRIAL_MAX
                    } else {
                        (self.trial_every * 4).min(TRIAL_MAX)
                    };
                }
                if b == Binding::Link {
                    self.level = (self.level + 1).min(ADAPT_MAX);
                }
                self.since_trial += 1;
                if self.since_trial >= self.trial_every {
                    self.since_trial = 0;
                    self.off_for = WINDOW;
                }
            }
        }
        self.clear();
    }

    /// Stores the next chunks without trying, twice as many as last time.
    fn store_for_a_while(&mut self) {
        self.off_for = self.next_cpu_off;
        self.next_cpu_off = (self.next_cpu_off * 2).min(MAX_OFF);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds chunks until [`WINDOW`] were compressed, 1000 bytes each shrunk
    /// to `ratio`, each waiting `link_ms` on the link and `cpu_ms` on
    /// compression of its 10 ms; a chunk to be stored takes `stored_ms`.
    /// Returns how many went stored.
    fn window_with(a: &mut Adapt, ratio: f64, link_ms: u64, cpu_ms: u64, stored_ms: u64) -> u32 {
        let ms = Duration::from_millis;
        let (mut compressed, mut stored) = (0, 0);
        while compressed < WINDOW {
            match a.next_level() {
                Some(_) => {
                    a.compressed(1000, (1000.0 * ratio) as usize);
                    a.waited(ms(link_ms), ms(cpu_ms), ms(10));
                    compressed += 1;
                }
                None => {
                    a.stored(1000);
                    a.waited(ms(stored_ms), ms(0), ms(stored_ms));
                    stored += 1;
                }
            }
        }
        stored
    }

    /// A window none of whose chunks may go stored.
    fn window(a: &mut Adapt, ratio: f64, link_ms: u64, cpu_ms: u64) {
        for _ in 0..WINDOW {
            let level = a.next_level();
            assert!(level.is_some());
            a.waited(
                Duration::from_millis(link_ms),
                Duration::from_millis(cpu_ms),
                Duration::from_millis(10),
            );
            a.compressed(1000, (1000.0 * ratio) as usize);
        }
    }

    #[test]
    fn a_slow_link_raises_the_level_to_the_top_and_cpu_lowers_it() {
        // The link carries a stored chunk in 25 ms, a compressed one in 10.
        let mut a = Adapt::new();
        let stored: u32 = (0..30).map(|_| window_with(&mut a, 0.4, 8, 0, 25)).sum();
        assert_eq!(a.level(), ADAPT_MAX);
        assert_eq!(a.last_binding(), Some(Binding::Link));
        // One stretch measured storing: 2.5x slower, not tried again soon.
        assert_eq!(stored, WINDOW);
        window(&mut a, 0.4, 0, 5);
        assert_eq!(a.level(), ADAPT_MAX - 1);
        window(&mut a, 0.4, 0, 0);
        assert_eq!(a.level(), ADAPT_MAX - 1, "input-bound: kept");
    }

    #[test]
    fn a_receiver_slower_than_the_link_makes_storing_win_whatever_the_level() {
        // Compressed chunks wait on the receiver (10 ms each, seen as the
        // link); stored ones pass in 4 ms.
        let mut a = Adapt::new();
        let mut stored = Vec::new();
        for _ in 0..12 {
            stored.push(window_with(&mut a, 0.4, 8, 0, 4));
        }
        // Four windows up, the trial stretch, then stretches twice as long
        // after each probe window.
        assert_eq!(stored[..8], [0, 0, 0, 0, WINDOW, 16, 32, 64]);
        assert!(stored.iter().sum::<u32>() > 12 * WINDOW * 5);
        // Each probe at the cheapest level.
        assert_eq!(a.level(), ADAPT_MIN);
    }

    /// Stores the chunks of a pause, `ms` each; returns how many.
    fn pause(a: &mut Adapt, ms: u64) -> u32 {
        let mut n = 0;
        loop {
            a.waited(Duration::ZERO, Duration::ZERO, Duration::from_millis(ms));
            if a.next_level().is_some() {
                return n;
            }
            a.stored(1000);
            n += 1;
        }
    }

    /// The rest of a probe window after [`pause`] took its first level:
    /// chunks of 1000 bytes shrunk to 400, each `link` and `cpu` ms of 10.
    fn probe(a: &mut Adapt, link: u64, cpu: u64) {
        let ms = Duration::from_millis;
        a.compressed(1000, 400);
        for _ in 1..WINDOW {
            a.waited(ms(link), ms(cpu), ms(10));
            assert!(a.next_level().is_some());
            a.compressed(1000, 400);
        }
    }

    #[test]
    fn cpu_bound_at_the_lowest_level_stores_while_storing_is_faster() {
        let mut a = Adapt::new();
        window(&mut a, 0.4, 0, 5);
        assert_eq!(a.level(), ADAPT_MIN);
        // Storing runs at 1 ms a chunk, compressing at 10: longer pauses.
        assert_eq!(pause(&mut a, 1), 16);
        probe(&mut a, 0, 5);
        assert_eq!(pause(&mut a, 1), 32);
        probe(&mut a, 0, 5);
        assert_eq!(pause(&mut a, 1), 64);
        // Storing slower than compressing (a slow link): compression stays.
        probe(&mut a, 0, 5);
        assert_eq!(pause(&mut a, 50), 128);
        probe(&mut a, 0, 5);
        assert_eq!(pause(&mut a, 1), 0, "no pause: level 1 beat storing");
        // The link binds: up.
        probe(&mut a, 8, 0);
        assert_eq!(a.level(), ADAPT_MIN + 1);
    }

    #[test]
    fn storing_is_judged_once_the_buffers_are_full() {
        let ms = Duration::from_millis;
        let mut a = Adapt::new();
        // Compression binds at level 1 before anything was stored: a
        // stretch goes stored to compare.
        window(&mut a, 0.4, 0, 5);
        // Its first 8 chunks fill drained buffers (1 ms each), the next 8
        // wait on the link (10 ms each, 9 of them waiting): storing moves
        // 100 bytes/ms, not the 182 the whole stretch averages.
        let mut stored = 0;
        while a.next_level().is_none() {
            a.stored(1000);
            stored += 1;
            if stored <= 8 {
                a.waited(ms(0), ms(0), ms(1));
            } else {
                a.waited(ms(9), ms(0), ms(10));
            }
        }
        assert_eq!(stored, 16);
        // Compressing at 143 bytes/ms (7 ms a chunk, compression binding)
        // beats storing's 100 by more than the margin: no new stretch.
        a.compressed(1000, 400);
        for _ in 1..WINDOW {
            a.waited(ms(0), ms(5), ms(7));
            assert!(a.next_level().is_some());
            a.compressed(1000, 400);
        }
        a.waited(ms(0), ms(5), ms(7));
        assert!(a.next_level().is_some(), "compressing goes on");
    }

    #[test]
    fn incompressible_data_pauses_longer_each_time() {
        let mut a = Adapt::new();
        window(&mut a, 0.99, 8, 0);
        let pause = |a: &mut Adapt| {
            let mut n = 0;
            while a.next_level().is_none() {
                n += 1;
            }
            a.compressed(1000, 1000);
            for _ in 1..WINDOW {
                assert_eq!(a.next_level(), Some(ADAPT_MIN));
                a.compressed(1000, 995);
            }
            n
        };
        assert_eq!(pause(&mut a), 16);
        assert_eq!(pause(&mut a), 32);
        assert_eq!(pause(&mut a), 64);
    }
}
