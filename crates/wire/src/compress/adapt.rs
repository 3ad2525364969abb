//! `--compress auto`: the level of the next chunk, from what bound the sender
//! during the last few chunks, as `zstd --adapt` does.
//!
//! The sender tells [`Adapt`] how long it waited on the link (no free buffer:
//! the socket or the receiver's credits full, or `--rate-limit`'s pacing) and
//! how long on compression (the next chunk's worker not done yet), and how much
//! each chunk shrank. Every [`WINDOW`] compressed chunks it decides:
//!
//! - the chunks shrank by less than 3 % ([`INCOMPRESSIBLE`]): stop trying; the
//!   next chunks go stored without compression for 16 chunks, then twice as
//!   many after each failed probe (up to 1024), and the probe starts again at
//!   [`ADAPT_MIN`];
//! - the link bound (its waits at least [`BOUND`] of the window's time and
//!   more than compression's): one level up, to at most [`ADAPT_MAX`];
//! - compression bound: one level down; below [`ADAPT_MIN`], the next
//!   [`WINDOW`] chunks go stored (on a path faster than level 1 a mix of
//!   stored and compressed chunks is the fastest);
//! - neither (the input is what the sender waits for): no change.

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
/// Chunks stored without trying after the first incompressible window.
const FIRST_OFF: u32 = 16;
/// The longest such pause.
const MAX_OFF: u32 = 1024;

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
    chunks: u32,
    raw: u64,
    packed: u64,
    link: Duration,
    cpu: Duration,
    elapsed: Duration,
    last: Option<Binding>,
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
            chunks: 0,
            raw: 0,
            packed: 0,
            link: Duration::ZERO,
            cpu: Duration::ZERO,
            elapsed: Duration::ZERO,
            last: None,
        }
    }

    /// The level for the next chunk; `None`: store it without trying. Call
    /// once per chunk.
    pub fn next_level(&mut self) -> Option<i32> {
        if self.off_for > 0 {
            self.off_for -= 1;
            None
        } else {
            Some(self.level)
        }
    }

    /// The level compressed chunks get now (for reports).
    pub fn level(&self) -> i32 {
        self.level
    }

    /// What bound the last window that decided, if any did yet.
    pub fn last_binding(&self) -> Option<Binding> {
        self.last
    }

    /// Time spent since the last call: waiting on the link, waiting on
    /// compression, and in all.
    pub fn waited(&mut self, link: Duration, cpu: Duration, elapsed: Duration) {
        self.link += link;
        self.cpu += cpu;
        self.elapsed += elapsed;
    }

    /// A chunk that was compressed (at the level [`Adapt::next_level`] gave)
    /// from `raw` bytes to `packed` (`raw` if it went stored); decides at the
    /// end of a window.
    pub fn compressed(&mut self, raw: usize, packed: usize) {
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
        if ratio > INCOMPRESSIBLE {
            self.off_for = self.next_off;
            self.next_off = (self.next_off * 2).min(MAX_OFF);
            self.level = ADAPT_MIN;
        } else {
            self.next_off = FIRST_OFF;
            match binding {
                Binding::Link => self.level = (self.level + 1).min(ADAPT_MAX),
                Binding::Cpu if self.level > ADAPT_MIN => self.level -= 1,
                Binding::Cpu => self.off_for = WINDOW,
                Binding::Neither => {}
            }
        }
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
        let mut a = Adapt::new();
        for _ in 0..30 {
            window(&mut a, 0.4, 8, 0);
        }
        assert_eq!(a.level(), ADAPT_MAX);
        assert_eq!(a.last_binding(), Some(Binding::Link));
        window(&mut a, 0.4, 0, 5);
        assert_eq!(a.level(), ADAPT_MAX - 1);
        window(&mut a, 0.4, 0, 0);
        assert_eq!(a.level(), ADAPT_MAX - 1, "input-bound: kept");
    }

    #[test]
    fn cpu_bound_at_the_lowest_level_stores_a_window() {
        let mut a = Adapt::new();
        window(&mut a, 0.4, 0, 5);
        assert_eq!(a.level(), ADAPT_MIN);
        for _ in 0..WINDOW {
            assert_eq!(a.next_level(), None);
        }
        assert_eq!(a.next_level(), Some(ADAPT_MIN));
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
