//! Tests of the sealed-chunk format: round trips, tampering with pieces and
//! tags, the single-piece format against plain AES-GCM, and parallel sealing
//! against serial.

use super::*;
use proptest::prelude::*;

const P: usize = SEAL_PIECE;
const SIZES: [usize; 9] = [0, 1, 16, P - 1, P, P + 1, 3 * P + 5, 1 << 20, 4 << 20];

fn plain(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 9) as u8 ^ seed)
        .collect()
}

/// Chunk number `c` of `n` bytes sealed with `key`, on `pool` or serially.
fn sealed(k: &[u8; 32], c: u64, n: usize, pool: Option<&ThreadPool>) -> Vec<u8> {
    let mut buf = plain(n, c as u8);
    buf.resize(sealed_len(n), 0);
    assert_eq!(seal_chunk(&key(k), c, &mut buf, n, pool), sealed_len(n));
    buf
}

fn four_threads() -> ThreadPool {
    ThreadPoolBuilder::new().num_threads(4).build().unwrap()
}

/// Opens `buf` as chunk `c`, serially and (on a copy) on four threads: both
/// must agree.
fn open_as(k: &[u8; 32], c: u64, buf: &[u8]) -> Option<Vec<u8>> {
    let mut a = buf.to_vec();
    let mut b = buf.to_vec();
    let serial = open_chunk(&key(k), c, &mut a, None);
    let parallel = open_chunk(&key(k), c, &mut b, Some(&four_threads()));
    assert_eq!(serial, parallel, "serial and parallel opening disagree");
    serial.map(|n| a[..n].to_vec())
}

#[test]
fn round_trip_in_order_at_piece_boundaries() {
    let k = [7u8; 32];
    let (mut s, mut o) = (Sealer::new(&k), Opener::new(&k));
    for (c, n) in SIZES.into_iter().enumerate() {
        let data = plain(n, c as u8);
        let mut buf = data.clone();
        buf.resize(sealed_len(n), 0);
        let len = s.seal(&mut buf, n);
        assert_eq!(len, n + 16 * seal_pieces(n), "n={n}");
        if n > 32 {
            assert_ne!(&buf[..n], &data[..], "not encrypted");
        }
        // A single-threaded sealer makes the same bytes.
        let mut again = data.clone();
        again.resize(sealed_len(n), 0);
        let mut one = Sealer::new(&k).single_threaded();
        one.next = c as u64;
        one.seal(&mut again, n);
        assert_eq!(again, buf[..len], "n={n}");
        assert_eq!(o.open(&mut buf[..len]).unwrap(), n, "n={n}");
        assert_eq!(&buf[..n], &data[..], "n={n}");
        // Both ends' opening paths agree with the sealer's.
        assert_eq!(
            open_as(&k, c as u64, &sealed(&k, c as u64, n, None)),
            Some(data)
        );
    }
}

#[test]
fn parallel_and_serial_sealing_give_the_same_bytes() {
    let k = [3u8; 32];
    let pool = four_threads();
    for n in SIZES {
        let serial = sealed(&k, 9, n, None);
        assert_eq!(sealed(&k, 9, n, Some(&pool)), serial, "n={n}");
        // And the process-wide pool, whatever this machine's core count.
        assert_eq!(sealed(&k, 9, n, pool_for(seal_pieces(n))), serial, "n={n}");
    }
}

#[test]
fn a_single_piece_chunk_is_the_format_before_pieces() {
    // Before pieces: `ciphertext || tag`, nonce = 0u32 LE || chunk number LE.
    let k = [5u8; 32];
    let ring_key = key(&k);
    for n in [0, 1, 4096, P - 16, P] {
        for c in [0u64, 1, 2, 1 << 40] {
            let mut old = plain(n, c as u8);
            let mut nonce = [0u8; 12];
            nonce[4..].copy_from_slice(&c.to_le_bytes());
            ring_key
                .seal_in_place_append_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::empty(),
                    &mut old,
                )
                .unwrap();
            assert_eq!(sealed(&k, c, n, None), old, "n={n} c={c}");
        }
    }
}

#[test]
fn any_altered_byte_in_any_piece_or_tag_breaks_the_chunk() {
    let k = [1u8; 32];
    for n in [P + 1, 3 * P + 5, 1 << 20] {
        let good = sealed(&k, 0, n, None);
        let pieces = seal_pieces(n);
        let mut spots: Vec<usize> = (0..pieces).map(|j| j * P).collect(); // each piece
        spots.push(n - 1); // the last byte of data
        spots.extend((0..pieces).map(|j| n + 16 * j + 7)); // each tag
        for at in spots {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert_eq!(open_as(&k, 0, &bad), None, "n={n}: byte {at} altered");
        }
        assert!(open_as(&k, 0, &good).is_some());
    }
}

#[test]
fn swapped_pieces_fail() {
    let k = [2u8; 32];
    let n = 3 * P + 5;
    let good = sealed(&k, 0, n, None);
    // Swap pieces 0 and 1, with and without their tags.
    let mut bad = good.clone();
    let (a, b) = bad.split_at_mut(P);
    a.swap_with_slice(&mut b[..P]);
    assert_eq!(open_as(&k, 0, &bad), None);
    let (t0, t1) = (n, n + 16);
    let (x, y) = bad[t0..t1 + 16].split_at_mut(16);
    x.swap_with_slice(y);
    assert_eq!(open_as(&k, 0, &bad), None, "swapped with their tags");
}

#[test]
fn a_chunk_cut_short_fails_even_at_a_piece_boundary() {
    let k = [4u8; 32];
    for n in [3 * P + 5, 4 * P] {
        let good = sealed(&k, 0, n, None);
        let pieces = seal_pieces(n);
        // Drop the last piece and its tag: what is left is `pieces - 1` whole
        // pieces, each with its own right tag, at a possible length.
        let cut = (pieces - 1) * P;
        let mut bad = good[..cut].to_vec();
        bad.extend_from_slice(&good[n..n + 16 * (pieces - 1)]);
        assert_eq!(unsealed_len(bad.len()), Some((cut, pieces - 1)));
        assert_eq!(open_as(&k, 0, &bad), None, "n={n}: last piece dropped");
        // Drop only the last tag (an impossible or a wrong length).
        assert_eq!(open_as(&k, 0, &good[..good.len() - 16]), None);
        // A byte less of data.
        let mut short = good[..n - 1].to_vec();
        short.extend_from_slice(&good[n..]);
        assert_eq!(open_as(&k, 0, &short), None);
    }
}

#[test]
fn impossible_lengths_and_extensions_fail() {
    let k = [6u8; 32];
    let good = sealed(&k, 0, P, None);
    for extra in 1..=16 {
        // P + 16 + extra is in the gap after one full piece.
        let mut bad = good.clone();
        bad.extend(std::iter::repeat_n(0u8, extra));
        assert_eq!(unsealed_len(bad.len()), None);
        assert_eq!(open_as(&k, 0, &bad), None);
    }
    for len in 0..16 {
        assert_eq!(open_as(&k, 0, &vec![0u8; len]), None);
    }
    assert!(matches!(
        Opener::new(&k).open(&mut [0u8; 5]),
        Err(WireError::SealBroken(0))
    ));
}

#[test]
fn wrong_chunk_number_or_key_fails() {
    let k = [8u8; 32];
    for n in [100, 3 * P + 5] {
        let a = sealed(&k, 0, n, None);
        let b = sealed(&k, 1, n, None);
        // Chunk 1 where chunk 0 is expected (chunk 0 dropped), and chunk 0 twice.
        let mut o = Opener::new(&k);
        assert!(matches!(
            o.open(&mut b.clone()),
            Err(WireError::SealBroken(0))
        ));
        assert_eq!(o.open(&mut a.clone()), Ok(n));
        assert!(matches!(
            o.open(&mut a.clone()),
            Err(WireError::SealBroken(1))
        ));
        assert_eq!(o.open(&mut b.clone()), Ok(n));
        // A piece moved from chunk 1 into chunk 0.
        let mut mixed = a.clone();
        mixed[..n.min(P)].copy_from_slice(&b[..n.min(P)]);
        mixed[n..n + 16].copy_from_slice(&b[n..n + 16]); // with its tag
        assert_eq!(open_as(&k, 0, &mixed), None);
        assert_eq!(open_as(&[9u8; 32], 0, &a), None, "wrong key");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn sealed_chunks_round_trip_and_reject_any_flipped_bit(
        n in prop_oneof![0usize..2048, (P - 64)..(P + 64), (3 * P - 64)..(3 * P + 64)],
        c in any::<u64>(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let k = [11u8; 32];
        let good = sealed(&k, c, n, None);
        prop_assert_eq!(open_as(&k, c, &good), Some(plain(n, c as u8)));
        let mut bad = good.clone();
        bad[flip.index(good.len())] ^= 1 << bit;
        prop_assert_eq!(open_as(&k, c, &bad), None);
        prop_assert_eq!(open_as(&k, c.wrapping_add(1), &good), None);
    }
}
