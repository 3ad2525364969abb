//! Probes and the rates they are judged by: storing's rate and the recent
//! windows' ([`Adapt::stored_rate`]), when a pause ends in a probe
//! ([`Adapt::link_idle`]) or in none at all after the first stretch
//! ([`Adapt::first_lost`]), how far ahead of a probe window the sender
//! reads ([`Adapt::probe_left`]), when a long pause after probes ends
//! early, and when compressed windows show storing's rate was measured low.

use super::{
    probe_pays_off_after, Adapt, Decision, Why, FAR_SLOWER, KEEP_MARGIN, LINK_IDLE_SHARE,
    PAUSE_CHECKED_AFTER, RECENT, SPAN_WIRE, STORED_KEPT, UNDERRATED, UNIT, WINDOW,
};
use std::time::Duration;

impl Adapt {
    /// Storing's rate: the lowest of the last [`STORED_KEPT`] stretches'
    /// (none before the first). A stretch that begins while the buffers
    /// between here and the receiver are not full (after windows that
    /// compression bound, which let them drain) measures more than the link
    /// carries, however it is timed: on a 1 Gb/s link such stretches
    /// measured 201-227 MB/s against the 104-118 of stretches after
    /// windows the link bound. The link's rate changes rarely; an error
    /// only ever raises the figure, so the lowest recent one is the best.
    /// Under `--rate-limit`, never above the limit ([`Adapt::paced`]).
    pub(super) fn stored_rate(&self) -> Option<f64> {
        let n = self.stored_count.min(STORED_KEPT);
        let measured = (n > 0).then(|| {
            self.stored_rates[..n]
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
        });
        match (measured, self.link_cap) {
            (Some(m), Some(cap)) => Some(m.min(cap)),
            (m, cap) => m.or(cap),
        }
    }

    /// Counts the window that just ended among the recent ones and gives
    /// their rate (raw bytes per second).
    pub(super) fn recent_rate(&mut self) -> f64 {
        if self.recent_level != self.level {
            (self.recent_level, self.recent_n) = (self.level, 0);
        }
        self.recent[self.recent_n % RECENT] = (self.raw, self.elapsed);
        self.recent_n += 1;
        let kept = &self.recent[..self.recent_n.min(RECENT)];
        let raw: u64 = kept.iter().map(|w| w.0).sum();
        let time: Duration = kept.iter().map(|w| w.1).sum();
        raw as f64 / time.as_secs_f64().max(1e-9)
    }

    /// A long pause (after probes that moved `probe_rate`) whose chunks,
    /// nearly all waiting on the link, show it carrying stored chunks
    /// slower than those probes: storing's rate was measured high, the
    /// pause ends. (A stall is one chunk that waits among many that do not:
    /// it ends nothing.)
    pub(super) fn pause_lost_its_bet(&self) -> bool {
        let Some(probe) = self.probe_rate else {
            return false;
        };
        self.paced_chunks >= self.least(PAUSE_CHECKED_AFTER)
            && u64::from(self.paced_waited) * 4 >= u64::from(self.paced_chunks) * 3
            && !self.paced_time.is_zero()
            && self.paced_raw as f64 / self.paced_time.as_secs_f64() * KEEP_MARGIN < probe
    }

    /// At the end of the stream's first stretch, where compression bound in
    /// the window before it ([`Why::CpuFirst`]): that window compressed into
    /// empty buffers, with nothing to wait for but the cores, so no probe
    /// moves more. Where the stretch stored faster (times [`KEEP_MARGIN`]),
    /// the pause goes on with no probe first: twice as long, and where the
    /// window moved less than [`FAR_SLOWER`] × storing's rate at least as
    /// long as keeps a probe's loss under `PROBE_SHARE` of it (on this one
    /// stretch: the window, not a probe after it, is what it is compared
    /// with); a stretch into empty buffers, faster than the link, ends it
    /// early ([`Adapt::pause_lost_its_bet`], against the first window's
    /// rate). Whether it did; call as the stretch ends. On the 2-core VM at
    /// 10 Gb/s the second probe of a stream cost as much as the first
    /// (some 1 % of a 384 MiB stream each: the receiver's decompression
    /// shares the cores) and always lost.
    pub(super) fn first_lost(&mut self) -> bool {
        let Some(first) = self.first.take() else {
            return false;
        };
        let Some(stored) = self.stored_rate() else {
            return false;
        };
        let beats = first.rate / stored;
        if beats >= KEEP_MARGIN {
            return false;
        }
        // One stretch has measured storing, against the window itself.
        self.pause_after_losing(first.rate, beats, true);
        (self.probing, self.pausing) = (false, true);
        self.decided = Some(Decision {
            stored_rate: Some(stored),
            why: Why::SlowerThanStoring,
            store_for: self.off_for,
            ..first
        });
        true
    }

    /// Stores the next chunks without trying after a window that moved
    /// `rate`, `beats` × storing's: twice as many as the last pause, and,
    /// where `may_be_long` and the window was under [`FAR_SLOWER`] ×
    /// storing, at least as many as keep another such loss under
    /// `PROBE_SHARE` of them ([`probe_pays_off_after`]), such a long pause
    /// ending early where the link carries stored chunks slower than
    /// `rate` ([`Adapt::pause_lost_its_bet`]). It goes on while the link
    /// idles ([`Adapt::link_idle`]).
    pub(super) fn pause_after_losing(&mut self, rate: f64, beats: f64, may_be_long: bool) {
        let least = if may_be_long && beats < FAR_SLOWER {
            probe_pays_off_after(beats)
        } else {
            0
        };
        self.store_for_a_while(least);
        self.slower_pause = self.off_for;
        self.probe_rate = (least > 0).then_some(rate);
    }

    /// Whether the compressed chunks since the last stretch moved on the
    /// link at more than [`UNDERRATED`] times storing's measured rate.
    pub(super) fn storing_underrated(&self) -> bool {
        let Some(stored) = self.stored_rate() else {
            return false;
        };
        let secs = self.span_time.as_secs_f64();
        self.span_wire >= SPAN_WIRE
            && secs > 0.0
            && self.span_wire as f64 / secs > UNDERRATED * stored
    }

    /// A pause after a probe slower than storing, at its end: fewer than
    /// [`LINK_IDLE_SHARE`] of the units stored since it began (or was
    /// renewed) waited on the link for half their time. Then the link is
    /// not what the stream waits for (the sender's own CPU or its input
    /// is), no level can move it faster, and the pause goes on rather than
    /// end in a probe. A pause into buffers that an earlier probe let drain
    /// goes on only until they are full again: its stored chunks then wait.
    pub(super) fn link_idle(&self) -> bool {
        (self.leg_waited as f64) < LINK_IDLE_SHARE * self.leg_units as f64
    }

    /// While the window under way is a probe (the stream's first, or the
    /// first after a stretch stored without trying): the raw bytes it
    /// still needs to decide, which is as far as the sender should read
    /// ahead and compress (`None`: as far as it likes). A probe on a path
    /// where storing is faster ends in a pause, and every chunk compressed
    /// beyond its window was compressed for nothing (judged by no window,
    /// at a cost the pause is there to avoid): on the 2-core VM over
    /// loopback, with two 1 MiB chunks to a window and three on the pool,
    /// such chunks were half of what `auto` compressed on a 1.5 GiB stream
    /// of a tar of /usr/share, and the third took a core from the two being
    /// measured. A probe that pays starts the read-ahead again once it
    /// decides: one pool's fill per probe.
    pub fn probe_left(&self) -> Option<usize> {
        self.probing.then(|| {
            let left = self.least(WINDOW).saturating_sub(self.chunks);
            left as usize * UNIT
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Why, FIRST_OFF};
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_probe_needs_its_window_and_no_more() {
        let ms = Duration::from_millis;
        let mut a = Adapt::new();
        a.chunk_size(4 * UNIT);
        // The stream's first window is a probe: two 1 MiB chunks.
        assert_eq!(a.probe_left(), Some(2 * 4 * UNIT));
        assert!(a.next_level().is_some());
        a.waited(ms(0), ms(9), ms(10));
        a.compressed(4 * UNIT, 2 * UNIT);
        assert_eq!(a.probe_left(), Some(4 * UNIT));
        assert!(a.next_level().is_some());
        a.waited(ms(0), ms(9), ms(10));
        a.compressed(4 * UNIT, 2 * UNIT);
        // Compression bound before any stretch was stored: a pause, and
        // while it lasts the sender reads as it likes (nothing compressed).
        // Its chunks are slower than the window's: a probe after it.
        assert!(a.take_decision().is_some());
        assert_eq!(a.probe_left(), None);
        let mut stored = 0;
        while a.next_level().is_none() && stored < 100 {
            a.stored(4 * UNIT);
            a.waited(ms(20), ms(0), ms(20));
            stored += 1;
            assert_eq!(a.probe_left(), None);
        }
        assert!((1..100).contains(&stored), "{stored}");
        // The chunk just given a level opens the next probe.
        assert_eq!(a.probe_left(), Some(2 * 4 * UNIT));
        // A short chunk counts by its units.
        a.waited(ms(0), ms(0), ms(1));
        a.compressed(UNIT, UNIT / 2);
        assert_eq!(a.probe_left(), Some(7 * UNIT));
    }

    /// Stores chunks of one unit until `a` gives a level or `most` were
    /// stored, each waiting its whole 2 ms on the link or none of it; how
    /// many.
    fn store_until_probe(a: &mut Adapt, on_link: bool, most: u32) -> u32 {
        let ms = Duration::from_millis;
        let mut n = 0;
        while n < most && a.next_level().is_none() {
            a.stored(UNIT);
            let link = if on_link { ms(2) } else { ms(0) };
            a.waited(link, ms(0), ms(2));
            n += 1;
        }
        n
    }

    #[test]
    fn a_pause_where_the_link_is_idle_goes_on_without_a_probe() {
        let ms = Duration::from_millis;
        let mut a = Adapt::new();
        a.chunk_size(UNIT);
        // Compression binds in the stream's first window: a pause, its
        // stored chunks on the link, 2 ms each.
        for _ in 0..WINDOW {
            assert!(a.next_level().is_some());
            a.waited(ms(0), ms(9), ms(10));
            a.compressed(UNIT, UNIT / 4);
        }
        assert_eq!(a.take_decision().unwrap().why, Why::CpuFirst);
        for _ in 0..FIRST_OFF {
            assert_eq!(a.next_level(), None);
            a.stored(UNIT);
            a.waited(ms(2), ms(0), ms(2));
        }
        // The first window moved a fifth of that: storing is faster, the
        // pause goes on ([`Adapt::first_lost`]), long: a fifth is far slower.
        assert_eq!(a.next_level(), None);
        let d = a.take_decision().unwrap();
        assert_eq!(d.why, Why::SlowerThanStoring, "{d}");
        let pause = d.store_for;
        assert!(pause > 2 * FIRST_OFF, "{pause}");
        a.stored(UNIT);
        a.waited(ms(0), ms(0), ms(2));
        // Its stored chunks never wait on the link: it goes on, as long again
        // each time (here: ten times as long, and still on).
        let left = 10 * pause - 1;
        assert_eq!(store_until_probe(&mut a, false, left), left);
        assert_eq!(a.next_level(), None);
        a.stored(UNIT);
        a.waited(ms(2), ms(0), ms(2));
        // Once they wait on the link, the pause ends in a probe after as many
        // chunks as it was long (the one above and these).
        assert_eq!(store_until_probe(&mut a, true, 10 * pause), pause - 1);
        assert_eq!(a.probe_left(), Some(WINDOW as usize * UNIT));

        // A pause for data that does not compress ends on time, link or not.
        let mut a = Adapt::new();
        a.chunk_size(UNIT);
        for _ in 0..WINDOW {
            assert!(a.next_level().is_some());
            a.waited(ms(0), ms(9), ms(10));
            a.compressed(UNIT, UNIT);
        }
        let d = a.take_decision().expect("the window decided");
        assert_eq!(d.why, Why::Incompressible);
        assert_eq!(store_until_probe(&mut a, false, 100), d.store_for);
    }
}
