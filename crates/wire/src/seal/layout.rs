//! The lengths of a sealed chunk: how many pieces `n` plaintext bytes make,
//! how long they are sealed, how much plaintext fits a buffer, and the decoder
//! from a sealed length back to `(n, k)` that the opener trusts.
//!
//! With `P` = [`SEAL_PIECE`] and `T` = [`SEAL_TAG_LEN`], `n` bytes make
//! `k(n) = max(1, ceil(n / P))` pieces and seal to `L(n) = n + T·k(n)`.
//!
//! **`L` determines `n` (and so `k`) uniquely.** `L(n + 1) - L(n) = 1 +
//! T·(k(n + 1) - k(n)) ≥ 1`, so `L` is strictly increasing and has an inverse
//! on its image. The pieces count `k` is fixed by `L` alone: a chunk of `k`
//! pieces has `(k - 1)·P < n ≤ k·P` (`0 ≤ n ≤ P` for `k = 1`), so
//! `(k - 1)·(P + T) + T < L ≤ k·(P + T)`, i.e. `k = max(1, ceil(L / (P + T)))`;
//! then `n = L - T·k`, and `L` is possible exactly when that `n` makes `k`
//! pieces. The impossible lengths are those below `T` and, after each full
//! piece count, the `T` lengths `k·(P + T) + 1 ..= k·(P + T) + T`.

/// Plaintext bytes per sealed piece (the last piece of a chunk may be shorter).
pub const SEAL_PIECE: usize = 256 << 10;

/// Bytes each piece's tag adds (AES-GCM's 16-byte tag).
pub const SEAL_TAG_LEN: usize = 16;

/// Pieces a chunk of `n` plaintext bytes is sealed in: `ceil(n / SEAL_PIECE)`,
/// and one (empty) piece for `n = 0`.
pub fn seal_pieces(n: usize) -> usize {
    n.div_ceil(SEAL_PIECE).max(1)
}

/// Bytes sealing adds to `n` plaintext bytes: one tag per piece.
pub fn sealed_overhead(n: usize) -> usize {
    SEAL_TAG_LEN * seal_pieces(n)
}

/// The sealed length of `n` plaintext bytes.
pub fn sealed_len(n: usize) -> usize {
    n + sealed_overhead(n)
}

/// The most plaintext a buffer of `cap` bytes holds once sealed: the largest
/// `n` with `sealed_len(n) <= cap` (0 when `cap` cannot even hold one tag; a
/// caller never seals into so small a buffer: chunks are at least 4 KiB).
pub fn plain_room(cap: usize) -> usize {
    if cap < SEAL_TAG_LEN {
        return 0;
    }
    let k = cap.div_ceil(SEAL_PIECE + SEAL_TAG_LEN).max(1);
    let n = cap - SEAL_TAG_LEN * k;
    if seal_pieces(n) == k {
        n
    } else {
        // `cap` lies in the gap after `k - 1` full pieces: they are the most.
        (k - 1) * SEAL_PIECE
    }
}

/// The plaintext length and piece count `(n, k)` of a sealed chunk of `len`
/// bytes, or `None` when no plaintext seals to that length (or it would take
/// more pieces than a nonce can number).
pub fn unsealed_len(len: usize) -> Option<(usize, usize)> {
    let k = len.div_ceil(SEAL_PIECE + SEAL_TAG_LEN).max(1);
    let n = len.checked_sub(SEAL_TAG_LEN * k)?;
    (seal_pieces(n) == k && k <= super::MAX_PIECES).then_some((n, k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: usize = SEAL_PIECE;

    #[test]
    fn known_lengths() {
        assert_eq!(sealed_len(0), 16);
        assert_eq!(sealed_len(P), P + 16);
        assert_eq!(sealed_len(P + 1), P + 1 + 32);
        assert_eq!(unsealed_len(16), Some((0, 1)));
        assert_eq!(unsealed_len(P + 16), Some((P, 1)));
        for gap in P + 17..=P + 32 {
            assert_eq!(unsealed_len(gap), None, "{gap}");
        }
        assert_eq!(unsealed_len(P + 33), Some((P + 1, 2)));
        assert_eq!(unsealed_len(15), None);
        assert_eq!(unsealed_len(0), None);
        // The buffers the transports seal into.
        assert_eq!(plain_room(256 << 10), P - 16); // a TCP frame: one piece
        assert_eq!(plain_room(1 << 20), (1 << 20) - 64); // an RDMA slot: four
        assert_eq!(plain_room(4 << 20), (4 << 20) - 256);
        assert_eq!(plain_room(P + 16), P);
        assert_eq!(plain_room(P + 32), P);
        assert_eq!(plain_room(P + 33), P + 1);
        assert_eq!(plain_room(4096), 4096 - 16);
    }

    /// The slow, obviously right inverse: search near `len`.
    fn unsealed_by_search(len: usize) -> Option<(usize, usize)> {
        let lo = len.saturating_sub(SEAL_TAG_LEN * (len / P + 2));
        (lo..=len)
            .find(|&n| sealed_len(n) == len)
            .map(|n| (n, seal_pieces(n)))
    }

    fn near_boundaries() -> impl Strategy<Value = usize> {
        prop_oneof![
            0usize..(70 << 20),
            (0usize..300, 0usize..80).prop_map(|(k, d)| (k * (P + 16)).saturating_sub(40) + d),
            (0usize..300, 0usize..80).prop_map(|(k, d)| (k * P).saturating_sub(40) + d),
        ]
    }

    proptest! {
        #[test]
        fn decoder_inverts_sealed_len(n in near_boundaries()) {
            let (len, k) = (sealed_len(n), seal_pieces(n));
            prop_assert_eq!(unsealed_len(len), Some((n, k)));
            prop_assert_eq!(len, n + 16 * k);
        }

        #[test]
        fn decoder_accepts_exactly_the_possible_lengths(len in near_boundaries()) {
            prop_assert_eq!(unsealed_len(len), unsealed_by_search(len));
        }

        #[test]
        fn plain_room_is_the_most_that_fits(cap in near_boundaries()) {
            let n = plain_room(cap);
            if cap >= 16 {
                prop_assert!(sealed_len(n) <= cap);
            }
            prop_assert!(sealed_len(n + 1) > cap);
        }
    }
}
