//! Property tests: the decoders never panic on arbitrary bytes, and every valid
//! message survives an encode/decode round trip.

use proptest::prelude::*;
use rdpipe_wire::frame::{Chosen, RDMA_TOKEN_LEN};
use rdpipe_wire::hello::NONCE_LEN;
use rdpipe_wire::*;

fn any_end() -> impl Strategy<Value = StreamEnd> {
    (any::<u64>(), any::<u64>(), any::<[u8; TAG_LEN]>()).prop_map(|(bytes, checksum, tag)| {
        StreamEnd {
            bytes,
            checksum,
            tag,
        }
    })
}

fn any_control() -> impl Strategy<Value = Control> {
    prop_oneof![
        any_end().prop_map(Control::End),
        any_end().prop_map(Control::Done),
        any::<[u8; 33]>().prop_map(Control::Pake),
        (0usize..4, "[a-zA-Z0-9 :/.-]{0,200}").prop_map(|(r, message)| Control::Abort {
            reason: [
                AbortReason::Unspecified,
                AbortReason::Stream,
                AbortReason::AuthFailed,
                AbortReason::TransportMismatch
            ][r],
            message
        }),
        "[a-zA-Z0-9 :/.-]{0,200}".prop_map(Control::RdmaDecline),
        any::<[u8; TAG_LEN]>().prop_map(Control::Confirm),
        (
            any::<bool>(),
            MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE,
            1..=MAX_SLOTS
        )
            .prop_map(|(r, chunk_size, slots)| {
                Control::Accept {
                    transport: if r { Chosen::Rdma } else { Chosen::Tcp },
                    chunk_size,
                    slots,
                }
            }),
        (any::<u16>(), any::<bool>(), any::<[u8; RDMA_TOKEN_LEN]>()).prop_map(
            |(port, write_with_imm, token)| {
                Control::RdmaOffer {
                    port,
                    write_with_imm,
                    token,
                }
            }
        ),
        Just(Control::Keepalive),
    ]
}

fn any_hello() -> impl Strategy<Value = Hello> {
    (
        any::<bool>(),
        0u8..3,
        any::<u32>(),
        MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE,
        1..=MAX_SLOTS,
        any::<[u8; NONCE_LEN]>(),
        0u8..3,
        proptest::option::of((1u64..=0xFFFF, 0u32..=48).prop_map(|(m, s)| m << s)),
        prop_oneof![
            Just(Compress::None),
            Just(Compress::Auto),
            (1..=rdpipe_wire::compress::MAX_LEVEL).prop_map(Compress::Zstd)
        ],
    )
        .prop_map(
            |(s, t, caps, chunk_size, slots, nonce, i, rate, compress)| Hello {
                version: PROTOCOL_VERSION,
                role: if s { Role::Sender } else { Role::Receiver },
                transport: [TransportPref::Auto, TransportPref::Tcp, TransportPref::Rdma]
                    [t as usize],
                // The caps bits that carry the compression wish are not caps.
                caps: Caps(caps & !0x00FF_FF00),
                chunk_size,
                slots,
                nonce,
                integrity: [Integrity::Checksum, Integrity::Mac, Integrity::Encrypt][i as usize],
                // Any rate the wire form carries exactly.
                rate_limit: rate.and_then(std::num::NonZeroU64::new),
                compress,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn hello_decoder_never_panics(b in any::<[u8; HELLO_LEN]>()) {
        let _ = Hello::decode(&b);
    }

    #[test]
    fn hello_decoder_with_valid_prefix_never_panics(rest in any::<[u8; HELLO_LEN]>()) {
        let mut b = rest;
        b[..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        let _ = Hello::decode(&b);
    }

    #[test]
    fn hello_roundtrips(h in any_hello()) {
        prop_assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn rate_limits_round_down_by_less_than_one_part_in_32768(v in 1u64..) {
        use rdpipe_wire::hello::{decode_rate, encode_rate};
        let got = decode_rate(encode_rate(std::num::NonZeroU64::new(v))).unwrap().unwrap().get();
        prop_assert!(got <= v && v - got <= v >> 15, "{} -> {}", v, got);
        if v <= 0xFFFF { prop_assert_eq!(got, v); }
    }

    #[test]
    fn rate_limit_decoder_never_panics_and_accepts_only_rates(b in any::<[u8; 3]>()) {
        use rdpipe_wire::hello::{decode_rate, encode_rate};
        if let Ok(r) = decode_rate(b) {
            // Whatever it accepts encodes back to the same value.
            prop_assert_eq!(decode_rate(encode_rate(r)).unwrap(), r);
        }
    }

    #[test]
    fn header_decoder_never_panics(b in any::<[u8; FRAME_HEADER_LEN]>(), max in any::<u32>()) {
        if let Ok(h) = FrameHeader::decode(&b, max) {
            // Whatever it accepts respects the limit it was given for data.
            if h.kind == FrameKind::Data { prop_assert!(h.len <= max && h.len > 0); }
            else { prop_assert!(h.len <= 1024); }
        }
    }

    #[test]
    fn control_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let _ = Control::decode_frame(&b);
        for kind in [FrameKind::End, FrameKind::Done, FrameKind::Abort, FrameKind::Confirm, FrameKind::Pake,
                     FrameKind::Accept, FrameKind::RdmaOffer, FrameKind::RdmaDecline,
                     FrameKind::Keepalive, FrameKind::Data] {
            let _ = Control::decode(kind, &b);
        }
    }

    #[test]
    fn control_roundtrips(c in any_control()) {
        prop_assert_eq!(Control::decode_frame(&c.encode()).unwrap(), c);
    }

    #[test]
    fn session_keys_agree_only_with_the_same_key(k1 in proptest::collection::vec(any::<u8>(), 1..40),
                                                 k2 in proptest::collection::vec(any::<u8>(), 1..40),
                                                 accept in proptest::collection::vec(any::<u8>(), 0..20)) {
        let s = Pake::start(Role::Sender, &k1);
        let r = Pake::start(Role::Receiver, &k2);
        let (ms, mr) = (*s.message(), *r.message());
        let t = [ms.as_slice(), mr.as_slice()].concat();
        let (ks, kr) = (s.finish(&mr, &t).unwrap(), r.finish(&ms, &t).unwrap());
        let tag = kr.confirm_tag(Role::Receiver, &accept);
        prop_assert_eq!(ks.verify_confirm(Role::Receiver, &accept, &tag), k1 == k2);
    }

    #[test]
    fn stream_end_decoder_never_panics_and_round_trips(b in proptest::collection::vec(any::<u8>(), 0..100),
                                                      e in any_end()) {
        let _ = StreamEnd::decode(&b);
        prop_assert_eq!(StreamEnd::decode(&e.encode()), Some(e));
    }
}
