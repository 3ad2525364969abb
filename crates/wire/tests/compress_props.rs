//! Property tests of the compressed-chunk format ([`rdpipe_wire::compress`]):
//! every chunk packs and decodes back to itself at any level; arbitrary bytes,
//! arbitrary bodies under a plausible trailer, and valid chunks with a byte
//! changed never panic the decoder and never give more than its limit.

use proptest::prelude::*;
use rdpipe_wire::compress::{Decoder, Encoder, KIND_ZSTD, TRAILER_LEN};

/// Data that compresses a little, a lot, or not at all.
fn data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..20_000),
        (
            proptest::collection::vec(any::<u8>(), 1..64),
            0..20_000usize
        )
            .prop_map(|(pat, n)| pat.iter().cycle().take(n).copied().collect()),
        (0..70_000usize).prop_map(|n| vec![0u8; n]),
    ]
}

fn pack(raw: &[u8], level: Option<i32>) -> Vec<u8> {
    let mut out = vec![0u8; raw.len() + TRAILER_LEN];
    let (len, _) = Encoder::new().pack(raw, level, &mut out);
    out.truncate(len);
    out
}

proptest! {
    #[test]
    fn chunks_round_trip_and_never_grow_past_the_trailer(raw in data(),
                                                        level in prop::option::of(1..=19i32)) {
        let c = pack(&raw, level);
        prop_assert!(c.len() <= raw.len() + TRAILER_LEN);
        let mut d = Decoder::new(70_000);
        prop_assert_eq!(d.decode(&c).unwrap(), &raw[..]);
    }

    #[test]
    fn arbitrary_bytes_never_panic_nor_exceed_the_limit(
        bytes in proptest::collection::vec(any::<u8>(), 0..4096),
        limit in 4096..100_000usize) {
        let mut d = Decoder::new(limit);
        if let Ok(out) = d.decode(&bytes) {
            prop_assert!(out.len() <= limit);
        }
    }

    #[test]
    fn arbitrary_zstd_bodies_never_panic_nor_exceed_the_limit(
        body in proptest::collection::vec(any::<u8>(), 0..4096),
        raw_len in 0..200_000u32,
        limit in 4096..100_000usize) {
        // zstd's magic first, so that the frame parser is exercised.
        let mut c = vec![0x28, 0xB5, 0x2F, 0xFD];
        c.extend(&body);
        c.extend(raw_len.to_le_bytes());
        c.push(KIND_ZSTD);
        let mut d = Decoder::new(limit);
        if let Ok(out) = d.decode(&c) {
            prop_assert!(out.len() <= limit && out.len() == raw_len as usize);
        }
    }

    #[test]
    fn a_changed_byte_is_refused_or_decodes_within_the_limit(raw in data(),
                                                            at in any::<prop::sample::Index>(),
                                                            x in 1..=255u8) {
        let mut c = pack(&raw, Some(3));
        let i = at.index(c.len());
        c[i] ^= x;
        let mut d = Decoder::new(70_000);
        if let Ok(out) = d.decode(&c) {
            prop_assert!(out.len() <= 70_000);
        }
    }
}
