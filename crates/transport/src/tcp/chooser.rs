//! The adaptive TCP sender's chooser: which way the next chunk is written.
//!
//! Which is faster, handing each chunk to the writer thread or writing it on the
//! caller's thread, depends on the path and the machine: where the receiving
//! stack's work lands on the writing thread (a veth pair) the thread loses;
//! where a slow copy can be overlapped it wins (docs/performance.md has the
//! figures). So the sender
//! measures instead of guessing ([`SendMode::Adaptive`]): after a warm-up phase
//! (slow start) it times the way it is using, phase by phase (at least
//! [`PHASE_CHUNKS`] chunks and [`PHASE_MIN`] each), and every [`KEEP_PHASES`]
//! phases switches to the other way, lets it settle, times one phase of it, and
//! keeps the faster. It starts inline and takes the writer thread only when that
//! is [`THREADED_MARGIN`] faster: inline costs less CPU per byte (no hand-off,
//! no futex wake-ups, the chunk stays in one core's cache), so the thread must
//! earn its keep by overlapping work on a core that would otherwise idle. To a
//! peer on loopback it writes inline (see [`SendMode::default_for`]). A
//! phase of mostly tiny chunks ([`TINY_CHUNK`]: requests and replies, an
//! interactive stream) is bound by its input, not by the way it is written:
//! its rate says nothing about either way, so it is not measured, and it is
//! written inline (no hand-off, which would add a thread wake-up to every
//! message's latency); a bulk phase starts the cycle again.
//! `RDPIPE_TCP_SEND=threaded|inline|adaptive` pins a way.

use std::time::{Duration, Instant};

/// Chunks per measured phase of the adaptive sender, at least (4 MiB at [`super::TCP_BUF`]).
pub const PHASE_CHUNKS: u32 = 16;
/// A measured phase lasts at least this long.
pub const PHASE_MIN: Duration = Duration::from_millis(30);
/// Chunks, at least, written the new way before a probe starts timing it.
pub const SETTLE_CHUNKS: u32 = 8;
/// ... and for at least this long.
pub const SETTLE_MIN: Duration = Duration::from_millis(20);
/// Phases the adaptive sender keeps the faster way before measuring again.
pub const KEEP_PHASES: u32 = 8;
/// ... doubled each time a probe loses, up to this many: a way that keeps
/// winning is probed less often (each threaded probe costs its hand-offs).
pub const MAX_KEEP_PHASES: u32 = 64;
/// A chunk this small (a page) was not held back by the socket but by its
/// input: see the module doc.
pub const TINY_CHUNK: usize = 4096;
/// Environment variable pinning the sender's way: `threaded`, `inline` or `adaptive`.
pub const SEND_MODE_ENV: &str = "RDPIPE_TCP_SEND";

/// How the TCP sender puts chunks on the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// The writer thread writes while the caller fills the next buffer.
    Threaded,
    /// The caller writes each chunk itself, right after filling it.
    Inline,
    /// Measure both in turn and use the faster (the default).
    Adaptive,
}

impl SendMode {
    /// The mode `RDPIPE_TCP_SEND` asks for (`threaded`, `inline`, `adaptive`); any
    /// other value is ignored with a warning, so a typo does not pass unnoticed.
    pub fn from_env() -> Option<SendMode> {
        match std::env::var(SEND_MODE_ENV).as_deref() {
            Ok("threaded") => Some(SendMode::Threaded),
            Ok("inline") => Some(SendMode::Inline),
            Ok("adaptive") => Some(SendMode::Adaptive),
            Ok("") | Err(_) => None,
            Ok(other) => {
                tracing::warn!(
                    "ignoring {SEND_MODE_ENV}={other:?}: expected threaded, inline or adaptive"
                );
                None
            }
        }
    }

    /// The default for a connection: inline to a peer on loopback (the same
    /// machine: with page-aligned buffers the writer thread no longer pays for
    /// itself there: the chunk migrating between two cores cost 0.25 CPU s/GB more
    /// on the sender, and under load it was slower too; see docs/performance.md),
    /// adaptive anywhere else.
    pub fn default_for(peer_on_loopback: bool) -> SendMode {
        if peer_on_loopback {
            SendMode::Inline
        } else {
            SendMode::Adaptive
        }
    }
}

/// The writer thread must beat inline by this factor to be chosen: at equal
/// rates inline costs less CPU (measured over veth on 2 cores, where both ways
/// ran at the same rate: sender 0.51 vs 0.62 CPU s/GB from a pipe; see
/// docs/performance.md), so a near tie, or a noisy probe, keeps inline.
pub const THREADED_MARGIN: f64 = 1.1;

/// Where the adaptive sender is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The first phase (TCP slow start), inline, not timed. A longer warm-up
    /// (64 chunks, 60 ms), to let the socket buffers fill first, was no better
    /// (veth, 18 alternating 2 GiB runs: median 3.15 vs 3.59 GB/s with one phase).
    Warming,
    /// The way just changed: not timed while the scheduler moves the threads to
    /// where they run best for the new way; then a probe, or keeping.
    Settling { probe: bool },
    /// The chosen way; every phase's rate is kept, `left` phases before a probe.
    Keeping { left: u32 },
    /// One timed phase the other way.
    Probing,
}

/// The adaptive sender's bookkeeping: which way the current phase goes, and the
/// rates measured for each way.
///
/// The cycle: keep the chosen way for [`KEEP_PHASES`] phases (twice as many after
/// each probe it wins, up to [`MAX_KEEP_PHASES`]), timing each; then
/// settle into the other way and time one phase of it (the probe); keep whichever
/// is faster, the kept way judged by the median of its phases (a steady figure,
/// where a single probe of each way was seen to swing by 2x on a busy 2-core
/// machine), threaded only when [`THREADED_MARGIN`] faster. The first cycle keeps
/// inline for one phase after the warm-up.
pub(super) struct Chooser {
    pinned: Option<bool>,
    /// Whether the current phase writes inline.
    inline: bool,
    stage: Stage,
    /// Chunks and bytes sent in the current phase, and when it started.
    chunks: u32,
    /// Chunks of the phase under [`TINY_CHUNK`].
    tiny: u32,
    bytes: u64,
    started: Option<Instant>,
    /// Rates (bytes per second) of the kept way's phases since it was chosen.
    kept: Vec<f64>,
    /// Phases to keep the chosen way before the next probe.
    keep: u32,
    /// A threaded probe starts, or just ended: the writer's queue must be empty
    /// before the next chunk, so that the probe times exactly the writing of its
    /// own chunks (a chunk handed to the writer is not on the socket yet).
    drain: bool,
    /// The threaded probe's bytes and start, until its last chunk is written.
    pending: Option<(u64, Instant)>,
}

impl Chooser {
    pub(super) fn new(mode: SendMode) -> Chooser {
        let pinned = match mode {
            SendMode::Threaded => Some(false),
            SendMode::Inline => Some(true),
            SendMode::Adaptive => None,
        };
        Chooser {
            pinned,
            inline: pinned.unwrap_or(true),
            stage: Stage::Warming,
            chunks: 0,
            tiny: 0,
            bytes: 0,
            started: None,
            kept: Vec::with_capacity(MAX_KEEP_PHASES as usize + 1),
            keep: KEEP_PHASES,
            drain: false,
            pending: None,
        }
    }

    /// Whether every buffer must be back from the writer before the next chunk:
    /// to write inline, and at the edges of a threaded probe.
    pub(super) fn needs_drain(&self) -> bool {
        self.inline || self.drain
    }

    /// Every buffer is back from the writer: a threaded probe that was waiting for
    /// its last chunks to be written is timed now, and decides.
    pub(super) fn drained(&mut self) {
        self.drain = false;
        if let Some((bytes, started)) = self.pending.take() {
            self.decide(bytes as f64 / started.elapsed().as_secs_f64().max(1e-9));
        }
    }

    /// Whether the next chunk is written inline.
    pub(super) fn next_inline(&mut self) -> bool {
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
        self.inline
    }

    /// Counts a chunk sent; at the end of a phase, moves the cycle on.
    pub(super) fn sent(&mut self, n: usize) {
        self.chunks += 1;
        self.tiny += u32::from(n < TINY_CHUNK);
        self.bytes += n as u64;
        let (min_chunks, min_time) = match self.stage {
            Stage::Settling { .. } => (SETTLE_CHUNKS, SETTLE_MIN),
            _ => (PHASE_CHUNKS, PHASE_MIN),
        };
        if self.pinned.is_some() || self.chunks < min_chunks {
            return;
        }
        let elapsed = self.started.map_or(Duration::ZERO, |t| t.elapsed());
        if elapsed < min_time {
            return;
        }
        let rate = self.bytes as f64 / elapsed.as_secs_f64().max(1e-9);
        let (bytes, started) = (self.bytes, self.started);
        let input_bound = self.tiny * 2 > self.chunks;
        self.chunks = 0;
        self.tiny = 0;
        self.bytes = 0;
        self.started = None;
        if input_bound {
            // Nothing to learn here; inline, and measure again from the
            // start once chunks fill up (the drain before the next inline
            // chunk takes back what the writer holds).
            self.inline = true;
            self.stage = Stage::Warming;
            self.kept.clear();
            self.pending = None;
            self.drain = false;
            return;
        }
        match self.stage {
            Stage::Warming => self.stage = Stage::Keeping { left: 1 },
            Stage::Settling { probe: true } => {
                self.stage = Stage::Probing;
                // A threaded probe starts from an empty queue.
                self.drain = !self.inline;
            }
            Stage::Settling { probe: false } => self.stage = Stage::Keeping { left: self.keep },
            Stage::Keeping { left } => {
                self.kept.push(rate);
                if left > 1 {
                    self.stage = Stage::Keeping { left: left - 1 };
                } else {
                    self.inline = !self.inline;
                    self.stage = Stage::Settling { probe: true };
                }
            }
            Stage::Probing if self.inline => self.decide(rate),
            Stage::Probing => {
                // Timed once its last chunk is on the socket (see `drain`).
                self.pending = started.map(|t| (bytes, t));
                self.drain = true;
            }
        }
    }

    /// The probe of the current way measured `probe`: keep it, or go back to the
    /// way kept before.
    fn decide(&mut self, probe: f64) {
        let kept = median(&mut self.kept);
        let (t, i) = if self.inline {
            (kept, probe)
        } else {
            (probe, kept)
        };
        let want_inline = t <= i * THREADED_MARGIN;
        // The probe won (its way is taken): probe again soon; it lost: the kept
        // way has held once more, so probe half as often.
        let probe_won = want_inline == self.inline;
        self.keep = if probe_won {
            KEEP_PHASES
        } else {
            (self.keep * 2).min(MAX_KEEP_PHASES)
        };
        tracing::debug!(
            "tcp sender: threaded {:.2} GB/s{}, inline {:.2} GB/s{}: writing {} for the next {} phases",
            t / 1e9,
            if self.inline { "" } else { " (probe)" },
            i / 1e9,
            if self.inline { " (probe)" } else { "" },
            if want_inline { "inline" } else { "through the writer thread" },
            self.keep
        );
        self.kept.clear();
        if probe_won {
            self.kept.push(probe);
            self.stage = Stage::Keeping { left: self.keep };
        } else {
            self.inline = want_inline;
            self.stage = Stage::Settling { probe: false };
        }
    }
}

/// The median of `v` (0 when empty).
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::TCP_BUF;

    /// Runs one phase, as if each chunk took `per_chunk`, after the settling part
    /// that follows a change of way (not timed); returns the phase's way.
    fn phase(c: &mut Chooser, per_chunk: Duration) -> bool {
        let run = |c: &mut Chooser, chunks: u32, min: Duration| {
            if c.needs_drain() {
                c.drained();
            }
            let way = c.next_inline();
            c.started = Some(Instant::now() - (per_chunk * chunks).max(min));
            for _ in 0..chunks {
                c.sent(TCP_BUF);
            }
            way
        };
        if c.needs_drain() {
            c.drained(); // may decide, and so start settling
        }
        if let Stage::Settling { .. } = c.stage {
            let way = run(c, SETTLE_CHUNKS, SETTLE_MIN);
            assert!(!matches!(c.stage, Stage::Settling { .. }));
            assert_eq!(c.inline, way, "settling keeps the way");
        }
        run(c, PHASE_CHUNKS, PHASE_MIN)
    }

    /// The ways of `n` phases, each way taking the time `t` gives it.
    fn ways(c: &mut Chooser, n: usize, mut t: impl FnMut(bool) -> Duration) -> Vec<bool> {
        (0..n)
            .map(|_| {
                let way = c.inline;
                phase(c, t(way))
            })
            .collect()
    }

    #[test]
    fn probes_the_other_way_keeps_the_faster_and_probes_again() {
        let mut c = Chooser::new(SendMode::Adaptive);
        let fast = Duration::from_millis(2);
        let slow = Duration::from_millis(4);
        let k = KEEP_PHASES as usize;
        // Inline is faster here. Warm-up and one timed phase inline, the threaded
        // probe, which loses: inline kept twice as long, then another threaded
        // probe, which loses again (inline now kept 4k phases).
        let got = ways(&mut c, 3 + 2 * k + 1 + 2, |i| if i { fast } else { slow });
        let mut want = vec![true, true, false];
        want.extend(std::iter::repeat_n(true, 2 * k));
        want.extend([false, true, true]);
        assert_eq!(got, want);
        // Now threaded is faster: inline is kept until the next probe (4k - 2
        // phases left), which switches to threaded and keeps it for k phases; the
        // inline probe after them loses.
        let got = ways(
            &mut c,
            4 * k - 2 + 1 + k + 2,
            |i| if i { slow } else { fast },
        );
        let mut want = vec![true; 4 * k - 2];
        want.extend(std::iter::repeat_n(false, 1 + k));
        want.extend([true, false]);
        assert_eq!(got, want);
        // Probes that keep losing come every MAX_KEEP_PHASES kept phases, no rarer.
        let got = ways(&mut c, 400, |i| if i { slow } else { fast });
        let probes: Vec<usize> = (0..got.len()).filter(|&j| got[j]).collect();
        let gaps: Vec<usize> = probes.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(
            gaps.last(),
            Some(&(MAX_KEEP_PHASES as usize + 1)),
            "{gaps:?}"
        );
    }

    #[test]
    fn the_kept_way_is_judged_by_the_median_of_its_phases() {
        let mut c = Chooser::new(SendMode::Adaptive);
        let fast = Duration::from_millis(2);
        // Inline only 15% faster: a mean would let one freak phase hand it over.
        let slow = Duration::from_micros(2300);
        let k = KEEP_PHASES as usize;
        // Inline kept after the threaded probe, and its first phase run.
        ways(&mut c, 4, |i| if i { fast } else { slow });
        assert!(c.inline);
        // One freak phase of inline (8x slower) among fast ones does not hand the
        // next probe to threaded.
        let mut n = 0;
        ways(&mut c, 2 * k - 1, |_| {
            n += 1;
            if n == 3 {
                fast * 8
            } else {
                fast
            }
        });
        let got = ways(&mut c, 3, |i| if i { fast } else { slow });
        assert_eq!(got, [false, true, true], "{:?}", c.stage);
    }

    /// Drives `c` (inline kept) into a threaded probe whose phase took `took`, the
    /// writer then needing `wait` more to hand every buffer back; whether inline
    /// is chosen after it.
    fn threaded_probe(took: Duration, wait: Duration) -> bool {
        let mut c = Chooser::new(SendMode::Adaptive);
        let fast = Duration::from_millis(1);
        ways(&mut c, 2 + 2 * KEEP_PHASES as usize, |i| {
            if i {
                fast
            } else {
                fast * 4
            }
        });
        assert_eq!(c.stage, Stage::Keeping { left: 1 });
        ways(&mut c, 1, |_| fast);
        assert_eq!(c.stage, Stage::Settling { probe: true });
        assert!(!c.inline);
        // Settle, then the probe starts from an empty queue ...
        c.next_inline();
        for _ in 0..SETTLE_CHUNKS {
            c.started = Some(Instant::now() - SETTLE_MIN);
            c.sent(TCP_BUF);
        }
        assert_eq!(c.stage, Stage::Probing);
        assert!(c.needs_drain());
        c.drained();
        c.next_inline();
        c.started = Some(Instant::now() - took);
        for _ in 0..PHASE_CHUNKS {
            c.sent(TCP_BUF);
        }
        // ... and is timed only when the writer has handed every buffer back.
        assert!(c.pending.is_some() && c.needs_drain() && !c.inline);
        // Inline's kept rate: threaded is over THREADED_MARGIN faster without
        // the wait, slower with it.
        let whole = (PHASE_CHUNKS as usize * TCP_BUF) as f64;
        c.kept = vec![whole / (took + Duration::from_millis(10)).as_secs_f64()];
        std::thread::sleep(wait);
        c.drained();
        c.inline
    }

    #[test]
    fn a_threaded_probe_is_timed_once_its_chunks_are_written() {
        let took = Duration::from_millis(40);
        assert!(!threaded_probe(took, Duration::ZERO));
        assert!(threaded_probe(took, Duration::from_millis(25)));
    }

    #[test]
    fn a_phase_of_tiny_chunks_goes_inline_and_is_not_measured() {
        let mut c = Chooser::new(SendMode::Adaptive);
        c.inline = false;
        c.stage = Stage::Keeping { left: 3 };
        for _ in 0..PHASE_CHUNKS {
            c.next_inline();
            c.sent(80);
        }
        std::thread::sleep(PHASE_MIN);
        c.next_inline();
        c.sent(80);
        assert!(c.inline && c.needs_drain());
        assert!(matches!(c.stage, Stage::Warming) && c.kept.is_empty());
    }

    #[test]
    fn pinned_modes_never_switch() {
        for (mode, want) in [(SendMode::Threaded, false), (SendMode::Inline, true)] {
            let mut c = Chooser::new(mode);
            for _ in 0..(3 * KEEP_PHASES) {
                assert_eq!(phase(&mut c, Duration::from_micros(10)), want);
            }
        }
    }

    #[test]
    fn median_of_phases() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
