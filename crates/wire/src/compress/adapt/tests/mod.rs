//! The unit tests of `auto`'s decisions ([`super`]).

use super::*;

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

#[test]
fn a_slow_link_raises_the_level_to_the_top_and_cpu_lowers_it() {
    // The link carries a stored chunk in 25 ms, a compressed one in 10.
    let mut a = Adapt::new();
    let stored: u32 = (0..30).map(|_| window_with(&mut a, 0.4, 8, 0, 25)).sum();
    assert_eq!(a.level(), ADAPT_MAX);
    assert_eq!(a.last_binding(), Some(Binding::Link));
    // One stretch measured storing: 2.5x slower, not tried again soon.
    assert_eq!(stored, WINDOW);
    // Compression binds: halfway down (up one level at a time, down fast).
    let half = ADAPT_MIN + (ADAPT_MAX - ADAPT_MIN) / 2;
    window(&mut a, 0.4, 0, 5);
    assert_eq!(a.level(), half);
    window(&mut a, 0.4, 0, 0);
    assert_eq!(a.level(), half, "input-bound: kept");
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

#[test]
fn one_slow_window_among_faster_ones_does_not_stop_compression() {
    // Level 1 binds at 10 ms a chunk; storing takes 12.
    let mut a = Adapt::new();
    window(&mut a, 0.4, 0, 5);
    assert_eq!(pause(&mut a, 12), 16);
    probe(&mut a, 0, 5);
    assert_eq!(a.take_decision().unwrap().why, Why::Pays);
    window(&mut a, 0.4, 0, 5);
    // One window at 14 ms a chunk (the other core busy for a while):
    // slower than storing alone, not with the two before it.
    slow_window(&mut a, 14);
    assert_eq!(a.take_decision().unwrap().why, Why::Pays);
    // Two in a row: compressing is slower now.
    slow_window(&mut a, 14);
    assert_eq!(a.take_decision().unwrap().why, Why::SlowerThanStoring);
}

#[test]
fn storing_is_judged_once_the_buffers_are_full() {
    let ms = Duration::from_millis;
    let mut a = Adapt::new();
    // Compression binds at level 1 (7 ms a chunk: 143 bytes/ms) before
    // anything was stored: a stretch goes stored to compare.
    slow_window(&mut a, 7);
    // Its first 8 chunks fill drained buffers (1 ms each), the next 8
    // wait on the link (10 ms each, 9 of them waiting): storing moves
    // 100 bytes/ms, not the 182 the whole stretch averages.
    let mut stored = 0;
    while a.next_level().is_none() && stored < 100 {
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
fn a_stall_at_the_end_of_a_stretch_is_not_taken_for_the_link() {
    let us = Duration::from_micros;
    let mut a = Adapt::new();
    // Compression binds at level 1, 10 ms a chunk.
    window(&mut a, 0.3, 0, 5);
    assert_eq!(a.take_decision().unwrap().why, Why::CpuFirst);
    // Storing takes 180 µs a chunk, 35 of it on the link, but the
    // stretch's last chunk stalls 3 ms (the receiver off its core).
    let mut stored = 0;
    let d = loop {
        assert!(a.next_level().is_none() && stored < 100, "{stored}");
        if let Some(d) = a.take_decision() {
            break d;
        }
        a.stored(1000);
        stored += 1;
        if stored == 16 {
            a.waited(us(2900), us(0), us(3100));
        } else {
            a.waited(us(35), us(0), us(180));
        }
    };
    // Three more chunks to tell, and they do not wait: a stall. Storing
    // moves 19 chunks in 6.34 ms (3.0 bytes/µs), not 2 in 3.28 ms (0.6):
    // thirty times the first window.
    assert_eq!(stored, 16 + PACED_MIN - 1);
    let s = d.stored_rate.unwrap();
    assert!((2.9e6..3.1e6).contains(&s), "{d}");
    assert_eq!(d.why, Why::SlowerThanStoring, "{d}");
}

#[test]
fn a_stretch_into_drained_buffers_does_not_outvote_the_links_rate() {
    let ms = Duration::from_millis;
    // One chunk: compressed in 7 ms (143 bytes/ms, compression
    // binding), or stored taking `stored` ms, waiting `wait` of them.
    let chunk = |a: &mut Adapt, wait: u64, stored: u64| match a.next_level() {
        Some(_) => {
            a.compressed(1000, 400);
            a.waited(ms(0), ms(5), ms(7));
            false
        }
        None => {
            a.stored(1000);
            a.waited(ms(wait), ms(0), ms(stored));
            true
        }
    };
    let mut a = Adapt::new();
    // Compression binds at level 1: a stretch goes stored, every chunk
    // waiting on the link (10 ms each: 100 bytes/ms).
    let first = (0..WINDOW + 16).filter(|_| chunk(&mut a, 9, 10)).count();
    assert_eq!(first, 16);
    // Then the trial stretch starts in buffers the compressed chunks let
    // drain: each chunk waits more than half its time, yet storing seems
    // to move 200 bytes/ms. Compressing (143) beats the lowest recent
    // rate, not the trial's: no stretch but the trial.
    // (After the first stretch trials come every 4 × TRIAL_FIRST
    // windows: compressing was less than twice as fast.)
    let windows = 4 * TRIAL_FIRST + 4;
    let later = (0..windows * WINDOW + WINDOW)
        .filter(|_| chunk(&mut a, 3, 5))
        .count();
    assert_eq!(later, WINDOW as usize);
    assert_eq!(a.take_decision().map(|d| d.why), Some(Why::Pays));
}

#[test]
fn incompressible_data_pauses_longer_each_time() {
    let mut a = Adapt::new();
    window(&mut a, 0.99, 8, 0);
    let pause = |a: &mut Adapt| {
        let mut n = 0;
        while a.next_level().is_none() {
            a.stored(1000);
            let t = Duration::from_millis(8);
            a.waited(t, Duration::ZERO, t);
            n += 1;
        }
        a.compressed(1000, 1000);
        for _ in 1..WINDOW {
            assert_eq!(a.next_level(), Some(ADAPT_MIN));
            a.compressed(1000, 995);
        }
        n
    };
    assert_eq!(pause(&mut a), 4);
    assert_eq!(pause(&mut a), 8);
    assert_eq!(pause(&mut a), 16);
}

#[test]
fn data_that_stops_compressing_for_a_while_keeps_its_level() {
    let mut a = Adapt::new();
    // The link binds: the level climbs to 3.
    for _ in 0..2 {
        window(&mut a, 0.4, 8, 0);
    }
    let level = a.next_level();
    assert_eq!(level, Some(ADAPT_MIN + 2));
    // A stretch of compressed files, then compressible data again.
    window(&mut a, 0.99, 8, 0);
    let mut stored = 0;
    while a.next_level().is_none() {
        a.stored(1000);
        a.waited(
            Duration::from_millis(8),
            Duration::ZERO,
            Duration::from_millis(8),
        );
        stored += 1;
    }
    assert_eq!(stored, 4);
    assert_eq!(a.next_level(), level);
}

#[test]
fn a_stretch_measured_slow_is_measured_again_once_the_link_carried_more() {
    let us = Duration::from_micros;
    const C: usize = UNIT;
    // One 256 KiB chunk: compressed to 30 % in 0.5 ms, compression binding
    // (500 MB/s of data, 150 MB/s on the wire); stored in `stored` µs, all
    // of it waiting on the link.
    let chunk = |a: &mut Adapt, stored: u64| match a.next_level() {
        Some(_) => {
            a.compressed(C, 3 * C / 10);
            a.waited(us(0), us(375), us(500));
            None
        }
        None => {
            a.stored(C);
            a.waited(us(stored), us(0), us(stored));
            Some(stored)
        }
    };
    let mut a = Adapt::new();
    // The first stretch, at the start of the stream, measures 10 MB/s
    // (25 ms a chunk): compressing seems 50 times faster.
    let first = (0..WINDOW + 16)
        .filter_map(|_| chunk(&mut a, 25_000))
        .count();
    assert_eq!(first, 16);
    assert_eq!(a.take_decision().map(|d| d.why), Some(Why::CpuFirst));
    // The path really stores at 1 GB/s (0.25 ms a chunk). Once more than
    // SPAN_WIRE bytes went out compressed at 15 times the measured rate,
    // a stretch goes stored at once and measures it again; compressing
    // (500 MB/s) is then slower, and storing wins from there on.
    let windows_to_prove = (SPAN_WIRE as usize).div_ceil(3 * C / 10 * WINDOW as usize);
    let mut decisions = Vec::new();
    let mut stored = 0;
    for _ in 0..(windows_to_prove as u32 + 2) * WINDOW + 8 {
        stored += chunk(&mut a, 250).map_or(0, |_| 1);
        if let Some(d) = a.take_decision() {
            decisions.push(d.why);
        }
    }
    assert_eq!(decisions[windows_to_prove - 1], Why::StoringUnderrated);
    assert!(decisions[..windows_to_prove - 1]
        .iter()
        .all(|w| *w == Why::Pays));
    assert_eq!(decisions[windows_to_prove], Why::SlowerThanStoring);
    // The stretch that measured again, then the pause storing won.
    assert_eq!(stored, 2 * WINDOW);
}

#[test]
fn the_level_stays_below_the_one_compression_bound_at() {
    let ms = Duration::from_millis;
    // The link binds at every level below 9; at 9 and above compression
    // does. Storing moves 50 bytes/ms, so at a ratio of 0.3 the link
    // carries 167 bytes/ms of data: the compressed windows' 100 are below,
    // compression really binds at 9.
    let mut a = Adapt::new();
    let mut levels = Vec::new();
    for _ in 0..100_000 {
        if levels.len() >= 60 {
            break;
        }
        match a.next_level() {
            Some(l) => {
                a.compressed(1000, 300);
                let (link, cpu) = if l >= 9 { (0, 5) } else { (8, 0) };
                a.waited(ms(link), ms(cpu), ms(10));
            }
            None => {
                a.stored(1000);
                a.waited(ms(20), ms(0), ms(20));
            }
        }
        if let Some(d) = a.take_decision() {
            levels.push(d.level);
        }
    }
    assert_eq!(levels.len(), 60, "{levels:?}");
    // Up one level a window to 9, halfway down, then up to 8 and held
    // there: no window at 9 again until CEILING_HELD windows at 8.
    assert_eq!(
        levels[..12],
        [2, 3, 4, 5, 6, 7, 8, 9, 5, 6, 7, 8],
        "{levels:?}"
    );
    let held = CEILING_HELD as usize;
    assert!(levels[12..11 + held].iter().all(|l| *l == 8), "{levels:?}");
    assert_eq!(levels[11 + held], 9, "{levels:?}");
}

#[test]
fn a_window_faster_than_the_link_carries_does_not_lower_the_level() {
    let ms = Duration::from_millis;
    // Storing moves 100 bytes/ms: at a ratio of 0.3 the link carries 333
    // bytes/ms of data. Windows wait on compression but move 500: they
    // fill buffers, the level stays.
    let mut a = Adapt::new();
    window(&mut a, 0.3, 8, 0);
    window(&mut a, 0.3, 8, 0);
    let stored = (0..WINDOW * 4)
        .filter(|_| match a.next_level() {
            Some(_) => {
                a.compressed(1000, 300);
                a.waited(ms(8), ms(0), ms(10));
                false
            }
            None => {
                a.stored(1000);
                a.waited(ms(10), ms(0), ms(10));
                true
            }
        })
        .count();
    assert_eq!(stored, WINDOW as usize, "the trial stretch");
    let level = a.level();
    assert!(level > ADAPT_MIN + 1, "{level}");
    for i in 0..5 {
        for _ in 0..WINDOW {
            assert!(a.next_level().is_some());
            a.waited(ms(0), ms(1), ms(2));
            a.compressed(1000, 300);
        }
        // (The first window still has the last link-bound chunk's wait.)
        let d = a.take_decision().map(|d| d.binding);
        assert!(i == 0 || d == Some(Binding::Neither), "{d:?}");
    }
    assert_eq!(a.level(), level);
}

#[test]
fn chunks_on_the_pool_when_the_level_changed_are_judged_by_no_window() {
    let ms = Duration::from_millis;
    let mut a = Adapt::new();
    for _ in 0..30 {
        window_with(&mut a, 0.4, 8, 0, 25);
    }
    assert_eq!(a.level(), ADAPT_MAX);
    // Compression binds at the top: halfway down.
    window(&mut a, 0.4, 0, 5);
    let half = ADAPT_MIN + (ADAPT_MAX - ADAPT_MIN) / 2;
    assert_eq!(a.level(), half);
    // The nine chunks already on the pool at the top level come out
    // slower than the link carries; then the new level's chunks wait on
    // the link.
    for _ in 0..9 {
        a.compressed_at(ADAPT_MAX, 1000, 400);
        a.waited(ms(0), ms(15), ms(20));
    }
    assert_eq!(a.level(), half, "the old level's chunks decide nothing");
    for _ in 0..WINDOW {
        let level = a.next_level().expect("compressed");
        a.compressed_at(level, 1000, 400);
        a.waited(ms(8), ms(0), ms(10));
    }
    assert_eq!(a.level(), half + 1, "the link bound at the new level");
}

#[test]
fn a_rate_limit_is_storings_rate_from_the_first_chunk() {
    // The stream's first window waits on the pool (5 ms of each 10) while
    // the link's buffers take it: 100 KB/s at ratio 0.4.
    let mut a = Adapt::new();
    window(&mut a, 0.4, 0, 5);
    let d = a.take_decision().unwrap();
    assert_eq!(d.why, Why::CpuFirst, "unpaced: storing is tried at once");
    // Paced to 20 KB/s, the link carries 50 KB/s of raw bytes at that
    // ratio: the window filled buffers; compression pays.
    let mut a = Adapt::new().paced(Some(20_000.0));
    window(&mut a, 0.4, 0, 5);
    assert!(a.next_level().is_some());
    a.compressed(1000, 400);
    a.waited(
        Duration::from_millis(8),
        Duration::ZERO,
        Duration::from_millis(10),
    );
    // Then the link binds: up, and no stretch stored for a while.
    let stored: u32 = (0..2).map(|_| window_with(&mut a, 0.4, 8, 0, 50)).sum();
    assert_eq!(stored, 0);
    assert!(a.level() > ADAPT_MIN);
    // A stretch that measures storing above the limit counts as the limit:
    // the later trial stretch (into drained buffers, 1 ms a chunk) does not
    // make compressing look slower.
    let stored: u32 = (0..8).map(|_| window_with(&mut a, 0.4, 8, 0, 1)).sum();
    assert_eq!(stored, WINDOW, "one trial stretch");
    assert!(a.next_level().is_some());
}

mod chunk_size;
mod pausing;
mod probing;

/// The length a pause after a probe that lost starts again at where the
/// link idles, if the pause due or under way is one.
fn renewal(a: &Adapt) -> Option<u32> {
    match &a.phase {
        Phase::PauseDue(p) | Phase::Storing(p) => p.after_loss.map(|l| l.length),
        Phase::Probing | Phase::Compressing => None,
    }
}
