//! The unit tests of `auto`'s decisions ([`super`]), a file per behaviour,
//! and the helpers they share: windows, pauses and probes fed with given
//! ratios and waits.

use super::*;

mod chunk_size;
mod levels;
mod pausing;
mod probing;
mod storing_rate;

/// Feeds chunks until [`WINDOW`] were compressed, 1000 bytes each shrunk
/// to `ratio`, each waiting `link_ms` on the link and `cpu_ms` on
/// compression of its 10 ms; a chunk to be stored takes `stored_ms`.
/// Returns how many went stored.
fn window_with(a: &mut Adapt, ratio: f64, link_ms: u64, cpu_ms: u64, stored_ms: u64) -> u32 {
    let ms = Duration::from_millis;
    let (mut compressed, mut stored) = (0, 0);
    while compressed < WINDOW {
        assert!(stored <= 2 * MAX_OFF, "no window after {stored} stored");
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

/// Stores the chunks of a pause, `ms` each, all of it waiting on the link
/// (the buffers to the receiver full); returns how many.
fn pause(a: &mut Adapt, ms: u64) -> u32 {
    let t = Duration::from_millis(ms);
    pause_timed(a, |_| (t, t))
}

/// Stores the chunks of a pause, the `n`th (from 0) waiting `timing(n).0`
/// on the link of its `timing(n).1`; returns how many.
fn pause_timed(a: &mut Adapt, timing: impl Fn(u32) -> (Duration, Duration)) -> u32 {
    let mut n = 0;
    loop {
        assert!(n <= 4 * MAX_OFF, "a pause of {n} chunks does not end");
        let (link, elapsed) = timing(n);
        a.waited(link, Duration::ZERO, elapsed);
        if a.next_level().is_some() {
            return n;
        }
        a.stored(1000);
        n += 1;
    }
}

/// Stores the stream's first stretch after [`Why::CpuFirst`], `ms` each
/// chunk, all of it waiting on the link, and returns the decision at its
/// end, which must be that the pause goes on ([`Adapt::first_lost`]).
fn first_stretch(a: &mut Adapt, ms: u64) -> Decision {
    assert_eq!(a.take_decision().map(|d| d.why), Some(Why::CpuFirst));
    let t = Duration::from_millis(ms);
    for _ in 0..FIRST_OFF {
        a.waited(t, Duration::ZERO, t);
        assert!(a.next_level().is_none());
        a.stored(1000);
    }
    a.waited(t, Duration::ZERO, t);
    assert!(a.next_level().is_none(), "the pause goes on");
    a.take_decision().expect("the first stretch decided")
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

/// A window whose chunks take `ms` each, compression binding.
fn slow_window(a: &mut Adapt, ms: u64) {
    for _ in 0..WINDOW {
        assert!(a.next_level().is_some());
        a.compressed(1000, 400);
        a.waited(
            Duration::ZERO,
            Duration::from_millis(ms / 2),
            Duration::from_millis(ms),
        );
    }
}

/// The length a pause after a probe that lost starts again at where the
/// link idles, if the pause due or under way is one.
fn renewal(a: &Adapt) -> Option<u32> {
    match &a.phase {
        Phase::PauseDue(p) | Phase::Storing(p) => p.after_loss.map(|l| l.length),
        Phase::Probing | Phase::Compressing => None,
    }
}
