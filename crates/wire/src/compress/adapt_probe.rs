//! Probes: when a pause ends in one ([`Adapt::link_idle`]), how far ahead
//! of a probe window the sender reads ([`Adapt::probe_left`]), when a long
//! pause after probes ends early, and when compressed windows show
//! storing's rate was measured low.

use super::{
    Adapt, KEEP_MARGIN, LINK_IDLE_SHARE, PAUSE_CHECKED_AFTER, SPAN_WIRE, UNDERRATED, UNIT, WINDOW,
};

impl Adapt {
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
            && self.paced_waited * 4 >= self.paced_chunks * 3
            && !self.paced_time.is_zero()
            && self.paced_raw as f64 / self.paced_time.as_secs_f64() * KEEP_MARGIN < probe
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
    use super::super::Why;
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
        assert!(a.take_decision().is_some());
        assert_eq!(a.probe_left(), None);
        let mut stored = 0;
        while a.next_level().is_none() && stored < 100 {
            a.stored(4 * UNIT);
            a.waited(ms(2), ms(0), ms(2));
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

    /// Stores chunks of one unit until `a` gives a level, each waiting its
    /// whole 2 ms on the link or none of it; how many.
    fn store_until_probe(a: &mut Adapt, on_link: bool, most: u32) -> u32 {
        let ms = Duration::from_millis;
        let mut n = 0;
        while a.next_level().is_none() && n < most {
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
        let first = store_until_probe(&mut a, true, 1000);
        // The probe after it moves a fifth of that: slower, a pause.
        a.compressed(UNIT, UNIT / 4);
        for _ in 1..WINDOW {
            a.waited(ms(0), ms(9), ms(10));
            assert!(a.next_level().is_some());
            a.compressed(UNIT, UNIT / 4);
        }
        let d = a.take_decision().unwrap();
        assert_eq!(d.why, Why::SlowerThanStoring, "{d}");
        let pause = d.store_for;
        assert!(pause > first, "{pause} after {first}");
        // Its stored chunks never wait on the link: it goes on, as long again
        // each time (here: ten times as long, and still on).
        assert_eq!(store_until_probe(&mut a, false, 10 * pause), 10 * pause);
        assert_eq!(a.next_level(), None);
        // Once they wait on the link, the pause ends in a probe after as many
        // chunks as it was long.
        assert_eq!(store_until_probe(&mut a, true, 10 * pause), pause);
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
