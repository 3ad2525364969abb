//! The level: up where the link binds, down where compression does, held
//! below the level compression bound at, and kept where neither binds or
//! the data stops compressing for a while.

use super::*;

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
