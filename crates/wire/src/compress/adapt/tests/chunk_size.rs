//! `auto`'s counts with chunks larger than the 256 KiB they were measured
//! at ([`super::Adapt::chunk_size`]).

use super::*;

/// `chunks` chunks of `size` bytes that do not shrink, each waiting half
/// its time on the link: the window ends with the last, not before.
fn incompressible_window(a: &mut Adapt, chunks: u32, size: usize) -> Decision {
    let ms = Duration::from_millis;
    for i in 0..chunks {
        assert!(
            a.take_decision().is_none(),
            "{size}: decided after {i} chunks"
        );
        assert!(a.next_level().is_some());
        a.waited(ms(5), ms(0), ms(10));
        a.compressed(size, size);
    }
    a.take_decision().expect("a window ended")
}

#[test]
fn a_mebibyte_chunk_counts_as_four_of_the_chunks_the_counts_were_measured_at() {
    let ms = Duration::from_millis;
    // The room of a sealed buffer (less a trailer and tags) rounds to its units.
    for (size, per) in [(UNIT - 100, 1), (4 * UNIT - 100, 4), (16 * UNIT, 16)] {
        let mut a = Adapt::new();
        a.chunk_size(size);
        // A window is two chunks at least, else WINDOW units.
        let window = (WINDOW / per).max(2);
        let d = incompressible_window(&mut a, window, size);
        assert_eq!(d.why, Why::Incompressible);
        // The pause covers the bytes it covers in 256 KiB chunks (a chunk at least).
        assert_eq!(d.store_for, FIRST_INCOMPRESSIBLE_OFF, "{size}");
        let pause = FIRST_INCOMPRESSIBLE_OFF.div_ceil(per);
        for _ in 0..pause {
            assert_eq!(a.next_level(), None, "{size}");
            a.stored(size);
            a.waited(ms(0), ms(0), ms(10));
        }
        assert!(a.next_level().is_some(), "{size}");
    }
}

#[test]
fn short_chunks_count_as_the_bytes_they_hold() {
    // 1 MiB chunks negotiated, 256 KiB read (a pipe's short reads; the
    // sender's reads of data that does not compress): a window and a pause
    // cover the same bytes as with full chunks, in four times the chunks.
    let ms = Duration::from_millis;
    let mut a = Adapt::new();
    a.chunk_size(4 * UNIT - 100);
    let d = incompressible_window(&mut a, WINDOW, UNIT);
    assert_eq!(d.why, Why::Incompressible);
    for i in 0..FIRST_INCOMPRESSIBLE_OFF {
        assert_eq!(a.next_level(), None, "stored chunk {i}");
        a.stored(UNIT);
        a.waited(ms(0), ms(0), ms(10));
    }
    assert!(a.next_level().is_some());
}

#[test]
fn large_chunks_from_their_level_once_the_link_binds_half_a_window() {
    let d = |level, binding, link_share| Decision {
        ratio: 0.4,
        binding,
        link_share,
        rate: 1e8,
        stored_rate: None,
        why: Why::Pays,
        level,
        store_for: 0,
    };
    let at = LARGE_FROM_LEVEL;
    assert!(d(at, Binding::Link, LARGE_LINK_SHARE).large_chunks(false));
    // The link bound, but not for half the window: as before.
    assert!(!d(at, Binding::Link, 0.2).large_chunks(false));
    assert!(d(at, Binding::Link, 0.2).large_chunks(true));
    assert!(d(at + 3, Binding::Neither, 0.0).large_chunks(true));
    // Compression bound, or a level below: short chunks.
    assert!(!d(at + 3, Binding::Cpu, 0.0).large_chunks(true));
    assert!(!d(at - 1, Binding::Link, 0.9).large_chunks(true));
}
