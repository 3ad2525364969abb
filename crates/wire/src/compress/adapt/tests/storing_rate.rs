//! Storing's rate: measured from a stretch's paced part, the lowest of the
//! last few stretches, capped by `--rate-limit`, measured again where the
//! link carried more; and what windows are compared with it.

use super::*;

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
