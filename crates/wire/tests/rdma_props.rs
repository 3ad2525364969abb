//! Property tests of the RDMA wire formats: every decoder round-trips what its
//! encoder makes, never panics on arbitrary bytes, and rejects bad magic, short
//! buffers and out-of-range slots and lengths.

use proptest::prelude::*;
use rdpipe_wire::frame::{RDMA_TOKEN_LEN, STREAM_END_LEN};
use rdpipe_wire::rdma::{
    check_connect_data, connect_data, decode_imm, encode_imm, CONNECT_DATA_LEN, RDMA_MSG_LEN,
    RING_INFO_LEN,
};
use rdpipe_wire::*;

fn any_end() -> impl Strategy<Value = StreamEnd> {
    (any::<u64>(), any::<u64>(), any::<[u8; 32]>()).prop_map(|(bytes, checksum, tag)| StreamEnd {
        bytes,
        checksum,
        tag,
    })
}

fn any_msg() -> impl Strategy<Value = RdmaMsg> {
    prop_oneof![
        (0..MAX_SLOTS, 1..=MAX_CHUNK_SIZE).prop_map(|(slot, len)| RdmaMsg::Data { slot, len }),
        any_end().prop_map(RdmaMsg::End),
        (0..MAX_SLOTS).prop_map(|slot| RdmaMsg::Credit { slot }),
        any_end().prop_map(RdmaMsg::Done),
    ]
}

fn any_ring() -> impl Strategy<Value = RingInfo> {
    (
        any::<u64>(),
        any::<u32>(),
        1..=MAX_SLOTS,
        MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE,
    )
        .prop_map(|(addr, rkey, slots, chunk)| RingInfo {
            addr,
            rkey,
            slots,
            chunk,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn rdma_msg_roundtrips(m in any_msg(), pad in any::<[u8; RDMA_MSG_LEN]>()) {
        let mut b = m.encode();
        prop_assert_eq!(RdmaMsg::decode(&b), Ok(m));
        // The unused tail of a message buffer does not matter.
        b[8 + STREAM_END_LEN..].copy_from_slice(&pad[8 + STREAM_END_LEN..]);
        prop_assert_eq!(RdmaMsg::decode(&b), Ok(m));
    }

    #[test]
    fn rdma_msg_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(m) = RdmaMsg::decode(&b) {
            // Whatever it accepts names a slot and length an endpoint accepts.
            match m {
                RdmaMsg::Data { slot, len } => {
                    prop_assert!(slot < MAX_SLOTS && (1..=MAX_CHUNK_SIZE).contains(&len))
                }
                RdmaMsg::Credit { slot } => prop_assert!(slot < MAX_SLOTS),
                _ => {}
            }
        }
    }

    #[test]
    fn rdma_msg_rejects_short_buffers(m in any_msg(), n in 0usize..24) {
        prop_assert_eq!(RdmaMsg::decode(&m.encode()[..n]), Err(WireError::ShortRdmaMsg(n)));
    }

    #[test]
    fn rdma_msg_rejects_unknown_tags_and_bad_slots(tag in 5u32.., slot in MAX_SLOTS..) {
        let mut b = RdmaMsg::Credit { slot: 0 }.encode();
        b[0..4].copy_from_slice(&tag.to_le_bytes());
        prop_assert_eq!(RdmaMsg::decode(&b), Err(WireError::UnknownRdmaMsg(tag)));
        let mut b = RdmaMsg::Credit { slot: 0 }.encode();
        b[4..8].copy_from_slice(&slot.to_le_bytes());
        prop_assert_eq!(RdmaMsg::decode(&b), Err(WireError::BadSlot(slot)));
        let mut b = RdmaMsg::Data { slot: 0, len: 1 }.encode();
        b[4..8].copy_from_slice(&slot.to_le_bytes());
        prop_assert_eq!(RdmaMsg::decode(&b), Err(WireError::BadSlot(slot)));
    }

    #[test]
    fn rdma_msg_rejects_bad_lengths(len in prop_oneof![Just(0u64), u64::from(MAX_CHUNK_SIZE) + 1..]) {
        let mut b = RdmaMsg::Data { slot: 1, len: 1 }.encode();
        b[8..16].copy_from_slice(&len.to_le_bytes());
        prop_assert_eq!(RdmaMsg::decode(&b), Err(WireError::BadSlotLen(len)));
    }

    #[test]
    fn imm_roundtrips(slot in 0..MAX_SLOTS, len in 1..=MAX_CHUNK_SIZE) {
        prop_assert_eq!(decode_imm(encode_imm(slot, len)), (slot, len));
    }

    #[test]
    fn every_imm_decodes_in_range(imm in any::<u32>()) {
        let (slot, len) = decode_imm(imm);
        prop_assert!(slot < MAX_SLOTS && (1..=MAX_CHUNK_SIZE).contains(&len));
        prop_assert_eq!(encode_imm(slot, len), imm);
    }

    #[test]
    fn ring_info_roundtrips(r in any_ring(), pad in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut b = r.encode().to_vec();
        b.extend_from_slice(&pad);
        prop_assert_eq!(RingInfo::decode(&b), Ok(r));
    }

    #[test]
    fn ring_info_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(r) = RingInfo::decode(&b) {
            prop_assert!((1..=MAX_SLOTS).contains(&r.slots));
            prop_assert!((MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&r.chunk));
        }
    }

    #[test]
    fn ring_info_rejects_bad_magic_short_data_and_ranges(r in any_ring(), i in 0usize..5,
                                                         x in 1u8.., n in 0usize..RING_INFO_LEN,
                                                         slots in MAX_SLOTS + 1..) {
        let mut b = r.encode();
        b[i] ^= x;
        prop_assert!(matches!(RingInfo::decode(&b), Err(WireError::BadRingMagic(_))));
        prop_assert_eq!(RingInfo::decode(&r.encode()[..n]), Err(WireError::ShortRingInfo(n)));
        let mut b = r.encode();
        b[20..24].copy_from_slice(&slots.to_le_bytes());
        prop_assert_eq!(RingInfo::decode(&b), Err(WireError::BadSlots(slots)));
        b[20..24].copy_from_slice(&0u32.to_le_bytes());
        prop_assert_eq!(RingInfo::decode(&b), Err(WireError::BadSlots(0)));
    }

    #[test]
    fn connect_data_roundtrips(t in any::<[u8; RDMA_TOKEN_LEN]>(), imm in any::<bool>(),
                               pad in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut b = connect_data(&t, imm).to_vec();
        b.extend_from_slice(&pad);
        prop_assert_eq!(check_connect_data(&b, &t), Ok(imm));
    }

    #[test]
    fn connect_data_needs_the_exact_token(t in any::<[u8; RDMA_TOKEN_LEN]>(),
                                          b in proptest::collection::vec(any::<u8>(), 0..64)) {
        match check_connect_data(&b, &t) {
            Ok(_) => prop_assert!(b.len() >= CONNECT_DATA_LEN && b[..RDMA_TOKEN_LEN] == t),
            Err(WireError::ShortConnectData(n)) => prop_assert!(n < CONNECT_DATA_LEN),
            Err(e) => {
                prop_assert_eq!(e, WireError::WrongToken);
                prop_assert!(b[..RDMA_TOKEN_LEN] != t);
            }
        }
    }

    #[test]
    fn connect_data_rejects_any_flipped_token_bit(t in any::<[u8; RDMA_TOKEN_LEN]>(),
                                                  i in 0..RDMA_TOKEN_LEN, x in 1u8..) {
        let mut b = connect_data(&t, true);
        b[i] ^= x;
        prop_assert_eq!(check_connect_data(&b, &t), Err(WireError::WrongToken));
    }
}
