//! Pauses: how long `auto` stores without trying after a window that lost
//! to storing or did not compress, and when such a pause ends.

use super::*;

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
fn cpu_bound_at_the_lowest_level_stores_while_storing_is_faster() {
    let mut a = Adapt::new();
    window(&mut a, 0.4, 0, 5);
    assert_eq!(a.level(), ADAPT_MIN);
    // Storing runs at 9 ms a chunk, compressing at 10. The first stretch
    // shows storing faster than the first window (compression's best): the
    // pause goes on with no probe, twice as long (a probe that loses by so
    // little costs little).
    let first = pause(&mut a, 9);
    let d = a.take_decision().unwrap();
    assert_eq!(d.why, Why::SlowerThanStoring, "{d}");
    assert_eq!(d.store_for, 2 * FIRST_OFF);
    assert_eq!(first, FIRST_OFF + d.store_for);
    // Then twice as long after each probe that loses.
    probe(&mut a, 0, 5);
    assert_eq!(pause(&mut a, 9), 2 * d.store_for);
    probe(&mut a, 0, 5);
    assert_eq!(pause(&mut a, 9), 4 * d.store_for);
    // Storing slower than compressing (a slow link): compression stays.
    probe(&mut a, 0, 5);
    assert_eq!(pause(&mut a, 50), 8 * d.store_for);
    probe(&mut a, 0, 5);
    assert_eq!(pause(&mut a, 1), 0, "no pause: level 1 beat storing");
    // The link binds: up.
    probe(&mut a, 8, 0);
    assert_eq!(a.level(), ADAPT_MIN + 1);
}

#[test]
fn a_probe_far_slower_than_storing_is_followed_by_a_pause_it_is_small_against() {
    // Compressing at level 1 binds at 10 ms a chunk; storing takes 4 ms
    // (compressing moves about 0.4 × storing's rate): a probe that loses
    // costs about 8 × 1.5 stored chunks' time, 2 % of 600 chunks.
    let mut a = Adapt::new();
    window(&mut a, 0.4, 0, 5);
    // Level 1 after a first stretch stored faster than the first window
    // (`Adapt::first_lost`): the first pause is as long.
    let d = first_stretch(&mut a, 4);
    assert_eq!(d.why, Why::SlowerThanStoring);
    let beats = d.rate / d.stored_rate.unwrap();
    assert!((0.35..0.5).contains(&beats), "{d}");
    let least = probe_pays_off_after(beats);
    assert!((400..800).contains(&least), "{least}");
    assert_eq!(pause(&mut a, 4), least);
    // A probe as slow after two stretches: the long pause again (here the
    // last one twice, which is longer).
    probe(&mut a, 0, 5);
    let d = a.take_decision().unwrap();
    assert_eq!(d.why, Why::SlowerThanStoring);
    assert_eq!(d.store_for, (2 * least).min(MAX_OFF));
    // Ten times slower: the longest pause at once.
    assert_eq!(probe_pays_off_after(0.1), MAX_OFF);
    // A link-bound probe that loses (a receiver slower on compressed
    // chunks) still doubles: a_receiver_slower_than_the_link_makes_storing_win….
    assert_eq!(probe_pays_off_after(1.0), 0);
    assert_eq!(probe_pays_off_after(0.0), MAX_OFF);
}

#[test]
fn a_first_stretch_into_empty_buffers_does_not_pause_compression_for_long() {
    let ms = Duration::from_millis;
    // Level 1 binds at 10 ms a chunk; the first stretch goes into empty
    // buffers (1 ms a chunk: ten times the link), the link then carries
    // a stored chunk in 25 ms. The first stretch seems four times faster
    // than the first window (its last chunk took 25 ms): a long pause, but
    // it ends once its chunks waiting on the link show them slower than
    // that window, and the stretch (the link's rate) shows that
    // compressing pays.
    let mut a = Adapt::new();
    window(&mut a, 0.4, 0, 5);
    let timing = |n| {
        if n < 16 {
            (ms(1), ms(1))
        } else {
            (ms(24), ms(25))
        }
    };
    assert_eq!(pause_timed(&mut a, timing), 16 + PAUSE_CHECKED_AFTER);
    // Ended for the link: the next pause, should one come, is twice what
    // this one stored, not twice the 1024 it was to be; and it was not
    // renewed for the chunks before it that did not wait.
    assert_eq!(a.lengths.lost, 2 * PAUSE_CHECKED_AFTER);
    assert_eq!(renewal(&a), None);
    probe(&mut a, 0, 5);
    // Judged against the lowest stretch: 100 bytes/ms compressing
    // against 40 storing.
    assert_eq!(a.take_decision().unwrap().why, Why::Pays);
    window(&mut a, 0.4, 0, 5);
    assert_eq!(a.take_decision().unwrap().why, Why::Pays);
}

#[test]
fn a_long_pause_ends_once_the_link_shows_storing_slower_than_the_probe() {
    let ms = Duration::from_millis;
    // Two stretches into drained buffers (1 ms a chunk) and probes at
    // 10 ms a chunk, compression binding: the long pause.
    let mut a = Adapt::new();
    window(&mut a, 0.4, 0, 5);
    let first = first_stretch(&mut a, 1).store_for;
    assert_eq!(pause(&mut a, 1), first);
    probe(&mut a, 0, 5);
    let long = a.take_decision().unwrap().store_for;
    assert!(long >= 16 * PAUSE_CHECKED_AFTER, "{long}");
    // The buffers full, each stored chunk waits 24 of its 25 ms: slower
    // than the probe's 10 ms. The pause ends after the chunks that tell.
    let stored = pause_timed(&mut a, |_| (ms(24), ms(25)));
    assert_eq!(stored, PAUSE_CHECKED_AFTER, "ended early, not after {long}");
    // And compressing pays against the stretch's rate.
    probe(&mut a, 0, 5);
    assert_eq!(a.take_decision().unwrap().why, Why::Pays);
    // Where the link takes stored chunks faster than the probe, the long
    // pause runs whole.
    let mut b = Adapt::new();
    window(&mut b, 0.4, 0, 5);
    let long = first_stretch(&mut b, 4).store_for;
    assert_eq!(pause_timed(&mut b, |_| (ms(3), ms(4))), long);
    // Nor does a stall (one chunk waiting 500 ms among chunks of which one
    // in four waits) end one.
    probe(&mut b, 0, 5);
    let long = b.take_decision().unwrap().store_for;
    assert!(long >= 4 * PAUSE_CHECKED_AFTER, "{long}");
    let stall = |n| match n {
        3 => (ms(500), ms(501)),
        n if n % 4 == 0 => (ms(3), ms(4)),
        _ => (ms(0), ms(4)),
    };
    assert_eq!(pause_timed(&mut b, stall), long);
}

#[test]
fn a_narrow_win_leaves_the_pauses_as_long_as_they_were() {
    let ms = Duration::from_millis;
    // Compressing at 10 ms a chunk, storing at 9: the first pause goes on.
    let mut a = Adapt::new();
    window(&mut a, 0.4, 0, 5);
    let first = first_stretch(&mut a, 9).store_for;
    assert_eq!(pause(&mut a, 9), first);
    // The probe moves 1.14 × storing's rate (9 ms a chunk: timing noise on
    // a fast path): compressing goes on ...
    a.compressed(1000, 400);
    for _ in 1..WINDOW {
        a.waited(ms(0), ms(5), ms(9));
        assert!(a.next_level().is_some());
        a.compressed(1000, 400);
    }
    assert_eq!(a.take_decision().unwrap().why, Why::Pays);
    // ... but the window that loses again is followed by twice the last
    // pause, not the shortest.
    a.waited(ms(0), ms(5), ms(10));
    window(&mut a, 0.4, 0, 5);
    let d = a.take_decision().unwrap();
    assert_eq!(d.why, Why::SlowerThanStoring, "{d}");
    assert_eq!(d.store_for, 2 * first);
    // A clear win (storing at 25 ms a chunk: 2.5 × slower) starts them
    // short again.
    assert_eq!(pause(&mut a, 25), 2 * first);
    assert_eq!(a.lengths.lost, 4 * first);
    probe(&mut a, 0, 5);
    assert_eq!(a.take_decision().unwrap().why, Why::Pays);
    assert_eq!(a.lengths.lost, FIRST_OFF);
}
