//! Property tests of `rdpipe forward`'s frames ([`rdpipe_wire::mux`]): any
//! sequence of frames round-trips through the parser however the stream is
//! cut into pieces; arbitrary bytes never panic it nor make it allocate more
//! than one payload's bound.

use proptest::prelude::*;
use rdpipe_wire::mux::{Frame, Parser, ResetKind, MAX_DATA};

fn frame() -> impl Strategy<Value = Frame> {
    let id = any::<u32>();
    prop_oneof![
        id.prop_map(Frame::Open),
        (id, proptest::collection::vec(any::<u8>(), 1..2000)).prop_map(|(i, d)| Frame::Data(i, d)),
        id.prop_map(Frame::Eof),
        (
            id,
            prop_oneof![
                Just(ResetKind::Reset),
                Just(ResetKind::Refused),
                Just(ResetKind::Unreachable),
                Just(ResetKind::Stopping)
            ]
        )
            .prop_map(|(i, k)| Frame::Reset(i, k)),
        (id, any::<u32>()).prop_map(|(i, n)| Frame::Credit(i, n)),
        Just(Frame::Hello),
    ]
}

proptest! {
    #[test]
    fn frames_round_trip_in_any_pieces(frames in proptest::collection::vec(frame(), 0..40),
                                       cuts in proptest::collection::vec(1usize..700, 1..50)) {
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let mut p = Parser::new();
        let mut got = vec![];
        let mut at = 0;
        let mut i = 0;
        while at < bytes.len() {
            let n = cuts[i % cuts.len()].min(bytes.len() - at);
            p.feed(&bytes[at..at + n], &mut |f| got.push(f)).unwrap();
            at += n;
            i += 1;
        }
        prop_assert!(p.at_boundary());
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4000)) {
        let mut p = Parser::new();
        let _ = p.feed(&bytes, &mut |f| {
            if let Frame::Data(_, d) = f {
                assert!(!d.is_empty() && d.len() <= MAX_DATA as usize);
            }
        });
    }
}
