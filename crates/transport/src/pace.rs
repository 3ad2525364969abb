//! The sender's pacing for `--rate-limit`: a token bucket, as `pv -L` and
//! `mbuffer -r` pace, applied where the send loop has read a chunk of input and
//! before it goes on the wire, so it works the same for every transport.
//!
//! [`Pacer::delay`] is pure (the caller passes the time): it says how long to
//! wait before the next `n` bytes may go. The bucket holds at most `burst` bytes
//! (one chunk, or 50 ms at the rate, whichever is larger), so a source that was
//! idle cannot make up for lost time with a flood. At low rates the send loop
//! also reads less than a whole buffer at a time ([`piece`]: 50 ms of the rate),
//! so the stream stays smooth instead of a buffer every few seconds. Accounting is exact and
//! absolute: the time the bytes sent so far are "paid for" is computed from the
//! moment the bucket last ran full (the start of the stream, or the end of an
//! idle period) and the byte count since then, so rounding and late wake-ups
//! never accumulate. [`Pacer::pace`] sleeps for that time on the monotonic
//! clock: no busy waiting.

use crate::rate::Rate;
use std::time::{Duration, Instant};

/// The least the bucket holds, in time at the rate.
pub const MIN_BURST_TIME: Duration = Duration::from_millis(50);

/// The fewest bytes the send loop reads at a time when paced (below this, the
/// per-chunk overhead would dominate).
pub const MIN_PIECE: usize = 512;

/// How many bytes of a `room`-byte buffer the send loop fills at a time at
/// `rate`: 50 ms of it, at least [`MIN_PIECE`], at most the buffer.
pub fn piece(rate: Rate, room: usize) -> usize {
    let burst = u128::from(rate.bytes_per_sec()) * MIN_BURST_TIME.as_nanos() / 1_000_000_000;
    room.min(usize::try_from(burst).unwrap_or(usize::MAX).max(MIN_PIECE))
}

/// Paces a stream to a [`Rate`].
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: u64,
    burst_time: Duration,
    /// When the bucket last ran full (`None`: nothing sent yet).
    anchor: Option<Instant>,
    /// Bytes charged since `anchor`.
    bytes: u64,
}

impl Pacer {
    /// A pacer for `rate` whose bucket holds `chunk` bytes or 50 ms of the
    /// rate, whichever is more.
    pub fn new(rate: Rate, chunk: usize) -> Pacer {
        let r = rate.bytes_per_sec();
        let chunk_time = nanos_for(chunk as u64, r);
        Pacer {
            rate: r,
            burst_time: chunk_time.max(MIN_BURST_TIME),
            anchor: None,
            bytes: 0,
        }
    }

    /// The bucket's size as time at the rate.
    pub fn burst_time(&self) -> Duration {
        self.burst_time
    }

    /// Charges `n` bytes about to be sent at `now`, and returns how long to wait
    /// before sending them (zero when the bucket holds enough).
    pub fn delay(&mut self, now: Instant, n: usize) -> Duration {
        let anchor = *self.anchor.get_or_insert(now);
        // When the bytes charged so far are paid for; if that is past, the bucket
        // is full (idle source or slow sink): start counting afresh from now.
        let paid = anchor + nanos_for(self.bytes, self.rate);
        if paid < now {
            self.anchor = Some(now);
            self.bytes = 0;
        }
        self.bytes += n as u64;
        let anchor = self.anchor.unwrap_or(now);
        let due = anchor + nanos_for(self.bytes, self.rate);
        // They may go once all but `burst_time` of them are paid for.
        due.saturating_duration_since(now + self.burst_time)
    }

    /// [`Self::delay`] on the monotonic clock, sleeping it off.
    pub fn pace(&mut self, n: usize) {
        let d = self.delay(Instant::now(), n);
        if !d.is_zero() {
            std::thread::sleep(d);
        }
    }
}

/// The time `bytes` take at `rate` bytes per second, exactly to the nanosecond
/// (rounded up).
fn nanos_for(bytes: u64, rate: u64) -> Duration {
    let ns = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(rate));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU64;

    fn rate(r: u64) -> Rate {
        Rate::new(NonZeroU64::new(r).unwrap())
    }

    const MS: Duration = Duration::from_millis(1);

    /// Sends `chunks` chunks of `chunk` bytes as fast as the pacer lets them go,
    /// each taking `work` besides the wait, and returns when the last one went.
    fn run(p: &mut Pacer, t0: Instant, chunks: usize, chunk: usize, work: Duration) -> Instant {
        let mut now = t0;
        for _ in 0..chunks {
            now += p.delay(now, chunk);
            now += work;
        }
        now
    }

    #[test]
    fn low_rates_read_50_ms_at_a_time() {
        assert_eq!(piece(rate(1000), 1 << 20), MIN_PIECE);
        assert_eq!(piece(rate(4 << 20), 256 << 10), (4 << 20) / 20);
        assert_eq!(piece(rate(16 << 20), 256 << 10), 256 << 10);
        assert_eq!(piece(rate(u64::MAX), 1 << 20), 1 << 20);
        assert_eq!(piece(rate(1000), 100), 100);
    }

    #[test]
    fn the_first_burst_goes_at_once() {
        let mut p = Pacer::new(rate(1 << 20), 64 << 10);
        let t0 = Instant::now();
        // 50 ms of 1 MiB/s is 52428 bytes; one 64 KiB chunk is more: the burst.
        assert_eq!(p.burst_time(), nanos_for(64 << 10, 1 << 20));
        assert_eq!(p.delay(t0, 64 << 10), Duration::ZERO);
        // The next chunk waits until the first is paid for.
        assert_eq!(p.delay(t0, 64 << 10), nanos_for(64 << 10, 1 << 20));
    }

    #[test]
    fn a_long_stream_runs_at_the_rate_without_drift() {
        // 16 MiB/s in 256 KiB chunks for 64 s: each wait rounds, and the caller
        // wakes 1 ms late each time; the last chunk still goes exactly when all
        // but the burst (50 ms here) is paid for, plus that one last 1 ms.
        let r = 16u64 << 20;
        let chunk = 256 << 10;
        let mut p = Pacer::new(rate(r), chunk);
        let t0 = Instant::now();
        let n = 4096;
        let mut now = t0;
        for _ in 0..n {
            now += p.delay(now, chunk) + MS;
        }
        let secs = (now - t0).as_secs_f64();
        let want = n as f64 * chunk as f64 / r as f64 - 0.050 + 0.001;
        assert!((secs - want).abs() < 1e-6, "{secs} vs {want}");
    }

    #[test]
    fn a_slow_sink_is_not_paced_further() {
        // Each chunk takes longer to send than the rate allows: no waits at all.
        let mut p = Pacer::new(rate(1 << 20), 64 << 10);
        let t0 = Instant::now();
        let end = run(&mut p, t0, 100, 64 << 10, 100 * MS);
        assert_eq!(end - t0, 100 * 100 * MS);
    }

    #[test]
    fn an_idle_source_gets_at_most_one_burst_back() {
        let r = 1u64 << 20;
        let chunk = 16 << 10;
        let mut p = Pacer::new(rate(r), chunk);
        // Burst: 50 ms of 1 MiB/s (52428 bytes) is more than a chunk.
        assert_eq!(p.burst_time(), MIN_BURST_TIME);
        let t0 = Instant::now();
        p.delay(t0, chunk);
        // Ten seconds idle, then a flood of 1 MiB: only the burst goes at once,
        // the rest at the rate.
        let t1 = t0 + Duration::from_secs(10);
        let end = run(&mut p, t1, 64, chunk, Duration::ZERO);
        let secs = (end - t1).as_secs_f64();
        let want = (64.0 * chunk as f64) / r as f64 - MIN_BURST_TIME.as_secs_f64();
        assert!((secs - want).abs() < 0.02, "{secs} vs {want}");
    }

    #[test]
    fn a_fast_source_never_exceeds_rate_times_time_plus_burst() {
        let r = 3_000_000u64;
        let mut p = Pacer::new(rate(r), 100_000);
        let t0 = Instant::now();
        let mut now = t0;
        let mut sent = 0u64;
        for i in 0..2000usize {
            let n = 1 + (i * 7919) % 100_000;
            now += p.delay(now, n);
            sent += n as u64;
            // The bucket: 50 ms at 3 MB/s (150 KB), more than a chunk.
            let allowed = r as f64 * (now - t0).as_secs_f64() + 150_000.0 + 1.0;
            assert!((sent as f64) <= allowed, "{sent} > {allowed} at {i}");
        }
        // And it is not slower either: the last byte went within a burst of the rate.
        let ideal = sent as f64 / r as f64;
        let secs = (now - t0).as_secs_f64();
        assert!(secs <= ideal && secs >= ideal - 0.1, "{secs} vs {ideal}");
    }

    #[test]
    fn pace_sleeps_on_the_real_clock() {
        // 1 MB/s, 50 ms bucket: 100 KB take about 50 ms beyond the burst.
        let mut p = Pacer::new(rate(1_000_000), 1000);
        let t = Instant::now();
        for _ in 0..100 {
            p.pace(1000);
        }
        let e = t.elapsed();
        assert!(e >= 49 * MS && e < 500 * MS, "{e:?}");
    }
}
