//! Property tests of the chain re-link messages ([`rdpipe_wire::resume`]): the
//! decoders never panic and accept nothing but what a holder of the session's
//! keys encoded; every request and answer round-trips; flipping any bit of one
//! (to make a relay skip or repeat bytes) is caught.

use proptest::prelude::*;
use rdpipe_wire::resume::{stream_binding, Resuming, RESUME_LEN, RESUME_REPLY_LEN};
use rdpipe_wire::{ResumeReply, ResumeRequest, ResumeVerdict, SessionKeys, WireError};

fn keys(secret: &[u8]) -> SessionKeys {
    SessionKeys::derive(secret, b"transcript")
}

proptest! {
    #[test]
    fn holds_and_bound_requests_decode_only_from_their_stream(offset in any::<u64>(),
                                                             junk in any::<[u8; RESUME_LEN]>(),
                                                             bit in 0..RESUME_LEN * 8) {
        let (k, first, other) = (keys(b"k"), keys(b"first"), keys(b"other"));
        let (bind, wrong) = (stream_binding(&first), stream_binding(&other));
        prop_assert!(Resuming::decode_bound(&junk, &k, &bind).is_err());
        let mut h = Resuming::hold(&k, &bind);
        prop_assert_eq!(Resuming::decode_bound(&h, &k, &bind), Ok(Resuming::Hold));
        prop_assert!(Resuming::decode_bound(&h, &k, &wrong).is_err());
        // A hold is not a request, under any decoder.
        prop_assert!(ResumeRequest::decode_bound(&h, &k, &bind).is_err());
        let r = ResumeRequest { offset }.encode_bound(&k, &bind);
        prop_assert_eq!(Resuming::decode_bound(&r, &k, &bind), Ok(Resuming::Request(ResumeRequest { offset })));
        h[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(Resuming::decode_bound(&h, &k, &bind).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_decode(req in any::<[u8; RESUME_LEN]>(),
                                    rep in proptest::collection::vec(any::<u8>(), RESUME_REPLY_LEN)) {
        let k = keys(b"k");
        prop_assert!(ResumeRequest::decode(&req, &k).is_err());
        let rep: [u8; RESUME_REPLY_LEN] = rep.try_into().unwrap();
        prop_assert!(ResumeReply::decode(&rep, &k).is_err());
    }

    #[test]
    fn requests_round_trip_and_any_flipped_bit_is_caught(offset in any::<u64>(),
                                                         bit in 0..RESUME_LEN * 8) {
        let k = keys(b"k");
        let mut b = ResumeRequest { offset }.encode(&k);
        prop_assert_eq!(ResumeRequest::decode(&b, &k), Ok(ResumeRequest { offset }));
        b[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(ResumeRequest::decode(&b, &k).is_err());
    }

    #[test]
    fn answers_round_trip_and_any_flipped_bit_is_caught(offset in any::<u64>(),
                                                        start in any::<u64>(),
                                                        len in any::<u64>(),
                                                        bit in 0..RESUME_REPLY_LEN * 8) {
        let k = keys(b"k");
        let end = start.saturating_add(len);
        let a = ResumeReply::answer(offset, start, end);
        prop_assert_eq!(a.verdict == ResumeVerdict::Resume, start <= offset && offset <= end);
        let mut b = a.encode(&k);
        let got = ResumeReply::decode(&b, &k).unwrap();
        prop_assert_eq!(got, a);
        prop_assert!(got.check(offset).is_ok());
        b[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(ResumeReply::decode(&b, &k).is_err());
        // Another session's keys never pass.
        prop_assert_eq!(ResumeReply::decode(&a.encode(&keys(b"j")), &k), Err(WireError::ResumeForged));
    }

    #[test]
    fn a_reconnect_request_passes_only_with_its_own_stream_binding(offset in any::<u64>(),
                                                                   a in any::<[u8; 8]>(),
                                                                   b in any::<[u8; 8]>()) {
        let now = keys(b"now");
        let (ba, bb) = (stream_binding(&keys(&a)), stream_binding(&keys(&b)));
        let r = ResumeRequest { offset }.encode_bound(&now, &ba);
        prop_assert_eq!(ResumeRequest::decode_bound(&r, &now, &ba), Ok(ResumeRequest { offset }));
        if a != b {
            prop_assert_eq!(ResumeRequest::decode_bound(&r, &now, &bb), Err(WireError::ResumeForged));
        }
        let rep = ResumeReply::answer(offset, 0, u64::MAX).encode_bound(&now, &ba);
        prop_assert!(ResumeReply::decode_bound(&rep, &now, &ba).is_ok());
        if a != b {
            prop_assert_eq!(ResumeReply::decode_bound(&rep, &now, &bb), Err(WireError::ResumeForged));
        }
    }
}
