//! The probe windows: how far ahead the sender reads ([`Adapt::probe_left`]),
//! and when a pause ends in one.

use super::*;

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
