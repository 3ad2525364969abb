//! Re-linking a fan-out chain around a dead relay: the resuming receiver's
//! request (how many bytes of the stream it already holds) and the upstream
//! relay's answer (resuming from there, or refusing because that offset has
//! left its bounded replay window).
//!
//! Both messages cross a connection only after its handshake authenticated
//! (SPAKE2 and key confirmation, [`crate::session`]), and each carries a tag
//! under a key of that session that only this message uses
//! ([`SessionKeys::resume_tag`]; one key per role, so a request cannot be
//! reflected as an answer or replayed into another connection). An on-path
//! attacker therefore cannot change the offset (to make the relay skip bytes
//! or send some twice) or forge a refusal; and the answer repeats the offset
//! it resumes from, which the receiver checks against the one it asked for
//! ([`ResumeReply::check`]).
//!
//! The offset alone does not prove that the receiver's first `offset` bytes
//! are the stream's: the dead relay may have mangled them before it died.
//! That is the whole-stream MAC's job: every hop of a chain keys its stream
//! MAC with one chain key ([`chain_stream_key`], domain-separated from every
//! session key), so the receiver's running MAC over the bytes it got before
//! the re-link and the resumed ones must equal the upstream relay's MAC over
//! the whole stream at End (see docs/security.md).
//!
//! Layouts (integers big-endian):
//!
//! - request, [`RESUME_LEN`] bytes: `RSRQ`, offset (u64), tag (32);
//! - hold (a reconnecting hop only), [`RESUME_LEN`] bytes: `RSHD`, eight zero
//!   bytes, tag (32) under the receiver's resume key over the body and the
//!   stream's binding: sent by the receiver's side right after a new
//!   connection's handshake, before the request, when the receiver's stream
//!   loop may be busy (its output blocked): it proves that this is the
//!   stream's other end, alive, so the sender waits for the request without a
//!   deadline ([`Resuming`]);
//! - returning (a reconnecting hop only), [`RESUME_LEN`] bytes: `RSBK`, eight
//!   zero bytes, tag (32) under the sender's resume key over the body and the
//!   stream's binding: the first thing a reconnecting hop's sender sends on
//!   every new connection, right after the handshake. A receiver that listens
//!   replaces the connection its stream still runs on only for a peer that
//!   sent it ([`Returning`]): a peer that merely holds the key (a second
//!   sender started with it) is not this stream's sender and cannot make one;
//! - answer, [`RESUME_REPLY_LEN`] bytes: `RSRP`, verdict (u8: 0 resume,
//!   1 beyond the window), offset (u64), window start (u64), window end (u64),
//!   tag (32).

use crate::session::{SessionKeys, KEY_LEN, TAG_LEN};
use crate::{Role, WireError};

/// The request's magic.
pub const REQUEST_MAGIC: [u8; 4] = *b"RSRQ";
/// The answer's magic.
pub const REPLY_MAGIC: [u8; 4] = *b"RSRP";
/// The hold's magic.
pub const HOLD_MAGIC: [u8; 4] = *b"RSHD";
/// The returning sender's magic.
pub const RETURNING_MAGIC: [u8; 4] = *b"RSBK";
/// Length of an encoded [`ResumeRequest`] (and of a hold, [`Resuming::Hold`]).
pub const RESUME_LEN: usize = 4 + 8 + TAG_LEN;
/// Length of an encoded [`ResumeReply`].
pub const RESUME_REPLY_LEN: usize = 4 + 1 + 3 * 8 + TAG_LEN;

/// The stream-MAC key every hop of a fan-out chain shares, from the chain's
/// secret (random per pipeline, handed to each sink's agent by rdpipe over
/// SSH). Its own HMAC label keeps it apart from every per-hop session key.
pub fn chain_stream_key(chain_secret: &[u8]) -> [u8; KEY_LEN] {
    crate::session::tag(chain_secret, &[b"rdma-pipe v2 chain stream mac", &[1]])
}

/// What binds a reconnecting hop's resume messages to its stream: derived
/// from the keys of the stream's FIRST connection (their stream-MAC key,
/// under a label of its own), so both ends of that stream know it and nobody
/// else does, not even a holder of the shared key that runs another stream.
/// The messages of a reconnect carry tags under the new connection's keys
/// over their body and this binding ([`ResumeRequest::encode_bound`]).
pub fn stream_binding(first: &SessionKeys) -> [u8; KEY_LEN] {
    crate::session::tag(
        &first.stream_mac,
        &[b"rdma-pipe v3 reconnect binding", &[1]],
    )
}

/// The resuming receiver's request: it holds the stream's first `offset`
/// bytes and wants the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeRequest {
    /// Bytes of the stream the receiver already has.
    pub offset: u64,
}

impl ResumeRequest {
    fn body(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&REQUEST_MAGIC);
        b[4..].copy_from_slice(&self.offset.to_be_bytes());
        b
    }

    /// The request, tagged with the receiver's resume key of `keys`.
    pub fn encode(&self, keys: &SessionKeys) -> [u8; RESUME_LEN] {
        self.encode_bound(keys, &[])
    }

    /// The request of a reconnecting hop: its tag also covers `binding`
    /// ([`stream_binding`] of the stream's first connection), which is not
    /// sent: only an end of that same stream can produce or check it.
    pub fn encode_bound(&self, keys: &SessionKeys, binding: &[u8]) -> [u8; RESUME_LEN] {
        let body = self.body();
        let mut out = [0u8; RESUME_LEN];
        out[..12].copy_from_slice(&body);
        out[12..].copy_from_slice(&keys.resume_tag(Role::Receiver, &body, binding));
        out
    }

    /// Decodes and authenticates a request (the sender's side).
    pub fn decode(b: &[u8; RESUME_LEN], keys: &SessionKeys) -> Result<ResumeRequest, WireError> {
        Self::decode_bound(b, keys, &[])
    }

    /// Decodes a reconnecting hop's request bound to `binding`: a request
    /// for another stream (or forged) fails with [`WireError::ResumeForged`].
    pub fn decode_bound(
        b: &[u8; RESUME_LEN],
        keys: &SessionKeys,
        binding: &[u8],
    ) -> Result<ResumeRequest, WireError> {
        let magic: [u8; 4] = b[..4].try_into().expect("4 bytes");
        if magic != REQUEST_MAGIC {
            return Err(WireError::BadResumeMagic(magic));
        }
        let tag: [u8; TAG_LEN] = b[12..].try_into().expect("tag length");
        if !keys.verify_resume(Role::Receiver, &b[..12], binding, &tag) {
            return Err(WireError::ResumeForged);
        }
        Ok(ResumeRequest {
            offset: u64::from_be_bytes(b[4..12].try_into().expect("8 bytes")),
        })
    }
}

/// What a reconnecting hop's sender reads first on a new connection: the
/// request, or a hold that announces it ([`HOLD_MAGIC`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resuming {
    /// The stream's receiver is back and alive; its request follows once its
    /// stream loop gets to it.
    Hold,
    /// The request itself.
    Request(ResumeRequest),
}

impl Resuming {
    const HOLD_BODY: [u8; 12] = [b'R', b'S', b'H', b'D', 0, 0, 0, 0, 0, 0, 0, 0];

    /// A hold bound to the stream's `binding`, tagged with the receiver's
    /// resume key of the new connection's `keys`.
    pub fn hold(keys: &SessionKeys, binding: &[u8]) -> [u8; RESUME_LEN] {
        let mut out = [0u8; RESUME_LEN];
        out[..12].copy_from_slice(&Self::HOLD_BODY);
        out[12..].copy_from_slice(&keys.resume_tag(Role::Receiver, &Self::HOLD_BODY, binding));
        out
    }

    /// Decodes a hold or a request bound to `binding`; anything else, or a
    /// tag that does not verify, is refused as [`ResumeRequest::decode_bound`]
    /// refuses it.
    pub fn decode_bound(
        b: &[u8; RESUME_LEN],
        keys: &SessionKeys,
        binding: &[u8],
    ) -> Result<Resuming, WireError> {
        if b[..12] != Self::HOLD_BODY {
            return ResumeRequest::decode_bound(b, keys, binding).map(Resuming::Request);
        }
        let tag: [u8; TAG_LEN] = b[12..].try_into().expect("tag length");
        if !keys.verify_resume(Role::Receiver, &b[..12], binding, &tag) {
            return Err(WireError::ResumeForged);
        }
        Ok(Resuming::Hold)
    }
}

/// A reconnecting hop's sender, back on a new connection: the first message
/// it sends there, which proves that it is the sender of the stream bound to
/// `binding` (its tag is under the sender's resume key of the new
/// connection, over the body and the binding). A listening receiver checks
/// it before the new connection may replace the one its stream runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Returning;

impl Returning {
    const BODY: [u8; 12] = [b'R', b'S', b'B', b'K', 0, 0, 0, 0, 0, 0, 0, 0];

    /// The message, for the new connection's `keys` and the stream's
    /// `binding`.
    pub fn encode(keys: &SessionKeys, binding: &[u8]) -> [u8; RESUME_LEN] {
        let mut out = [0u8; RESUME_LEN];
        out[..12].copy_from_slice(&Self::BODY);
        out[12..].copy_from_slice(&keys.resume_tag(Role::Sender, &Self::BODY, binding));
        out
    }

    /// Checks a returning sender's message: anything else fails with
    /// [`WireError::BadResumeMagic`] (the body is not this message's), one
    /// whose tag does not verify under `keys` and `binding` (another stream's
    /// sender, or forged) with [`WireError::ResumeForged`].
    pub fn verify(
        b: &[u8; RESUME_LEN],
        keys: &SessionKeys,
        binding: &[u8],
    ) -> Result<Returning, WireError> {
        if b[..12] != Self::BODY {
            let magic: [u8; 4] = b[..4].try_into().expect("4 bytes");
            return Err(WireError::BadResumeMagic(magic));
        }
        let tag: [u8; TAG_LEN] = b[12..].try_into().expect("tag length");
        if !keys.verify_resume(Role::Sender, &b[..12], binding, &tag) {
            return Err(WireError::ResumeForged);
        }
        Ok(Returning)
    }
}

/// What the upstream relay does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeVerdict {
    /// It resends the stream from the requested offset.
    Resume,
    /// The offset is before its replay window (or past what it ever sent):
    /// the re-link fails.
    BeyondWindow,
}

/// The upstream relay's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeReply {
    /// Resume, or not.
    pub verdict: ResumeVerdict,
    /// The offset asked for (and, on resume, the first byte that follows).
    pub offset: u64,
    /// The first stream offset still in its replay window.
    pub window_start: u64,
    /// The offset just past the last byte it forwarded (the window's end).
    pub window_end: u64,
}

impl ResumeReply {
    /// The answer to a request for `offset` from a relay whose window holds
    /// `window_start..window_end`: resume when the offset lies within it
    /// (its end included: nothing to resend yet).
    pub fn answer(offset: u64, window_start: u64, window_end: u64) -> ResumeReply {
        let verdict = if (window_start..=window_end).contains(&offset) {
            ResumeVerdict::Resume
        } else {
            ResumeVerdict::BeyondWindow
        };
        ResumeReply {
            verdict,
            offset,
            window_start,
            window_end,
        }
    }

    fn body(&self) -> [u8; 29] {
        let mut b = [0u8; 29];
        b[..4].copy_from_slice(&REPLY_MAGIC);
        b[4] = match self.verdict {
            ResumeVerdict::Resume => 0,
            ResumeVerdict::BeyondWindow => 1,
        };
        b[5..13].copy_from_slice(&self.offset.to_be_bytes());
        b[13..21].copy_from_slice(&self.window_start.to_be_bytes());
        b[21..29].copy_from_slice(&self.window_end.to_be_bytes());
        b
    }

    /// The answer, tagged with the sender's resume key of `keys`.
    pub fn encode(&self, keys: &SessionKeys) -> [u8; RESUME_REPLY_LEN] {
        self.encode_bound(keys, &[])
    }

    /// The answer on a reconnecting hop, its tag covering `binding` too.
    pub fn encode_bound(&self, keys: &SessionKeys, binding: &[u8]) -> [u8; RESUME_REPLY_LEN] {
        let body = self.body();
        let mut out = [0u8; RESUME_REPLY_LEN];
        out[..29].copy_from_slice(&body);
        out[29..].copy_from_slice(&keys.resume_tag(Role::Sender, &body, binding));
        out
    }

    /// Decodes and authenticates an answer (the receiver's side). An answer
    /// whose verdict does not follow from its own offset and window is
    /// malformed.
    pub fn decode(
        b: &[u8; RESUME_REPLY_LEN],
        keys: &SessionKeys,
    ) -> Result<ResumeReply, WireError> {
        Self::decode_bound(b, keys, &[])
    }

    /// Decodes a reconnecting hop's answer bound to `binding`.
    pub fn decode_bound(
        b: &[u8; RESUME_REPLY_LEN],
        keys: &SessionKeys,
        binding: &[u8],
    ) -> Result<ResumeReply, WireError> {
        let magic: [u8; 4] = b[..4].try_into().expect("4 bytes");
        if magic != REPLY_MAGIC {
            return Err(WireError::BadResumeMagic(magic));
        }
        let tag: [u8; TAG_LEN] = b[29..].try_into().expect("tag length");
        if !keys.verify_resume(Role::Sender, &b[..29], binding, &tag) {
            return Err(WireError::ResumeForged);
        }
        let u = |r: std::ops::Range<usize>| u64::from_be_bytes(b[r].try_into().expect("8 bytes"));
        let verdict = match b[4] {
            0 => ResumeVerdict::Resume,
            1 => ResumeVerdict::BeyondWindow,
            v => return Err(WireError::BadResumeVerdict(v)),
        };
        let r = ResumeReply {
            verdict,
            offset: u(5..13),
            window_start: u(13..21),
            window_end: u(21..29),
        };
        if r.window_start > r.window_end
            || ResumeReply::answer(r.offset, r.window_start, r.window_end).verdict != verdict
        {
            return Err(WireError::BadResumeWindow {
                offset: r.offset,
                start: r.window_start,
                end: r.window_end,
            });
        }
        Ok(r)
    }

    /// The receiver's check: the answer is for the offset it asked for.
    pub fn check(&self, requested: u64) -> Result<(), WireError> {
        if self.offset == requested {
            Ok(())
        } else {
            Err(WireError::ResumeOffsetMismatch {
                asked: requested,
                got: self.offset,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(secret: &[u8]) -> SessionKeys {
        SessionKeys::derive(secret, b"transcript")
    }

    #[test]
    fn a_request_round_trips_and_resists_tampering() {
        let k = keys(b"s");
        let mut b = ResumeRequest { offset: 12345 }.encode(&k);
        assert_eq!(
            ResumeRequest::decode(&b, &k),
            Ok(ResumeRequest { offset: 12345 })
        );
        // Another session's keys, or a changed offset: forged.
        assert_eq!(
            ResumeRequest::decode(&b, &keys(b"t")),
            Err(WireError::ResumeForged)
        );
        b[11] ^= 1;
        assert_eq!(ResumeRequest::decode(&b, &k), Err(WireError::ResumeForged));
        b[0] = b'X';
        assert!(matches!(
            ResumeRequest::decode(&b, &k),
            Err(WireError::BadResumeMagic(_))
        ));
    }

    #[test]
    fn the_answer_follows_the_window() {
        assert_eq!(
            ResumeReply::answer(10, 5, 20).verdict,
            ResumeVerdict::Resume
        );
        assert_eq!(
            ResumeReply::answer(20, 5, 20).verdict,
            ResumeVerdict::Resume
        );
        assert_eq!(
            ResumeReply::answer(4, 5, 20).verdict,
            ResumeVerdict::BeyondWindow
        );
        // More than the relay ever sent: refused too.
        assert_eq!(
            ResumeReply::answer(21, 5, 20).verdict,
            ResumeVerdict::BeyondWindow
        );
    }

    #[test]
    fn an_answer_round_trips_and_cannot_be_reflected_or_bent() {
        let k = keys(b"s");
        let a = ResumeReply::answer(7, 0, 9);
        let b = a.encode(&k);
        let got = ResumeReply::decode(&b, &k).unwrap();
        assert_eq!(got, a);
        assert!(got.check(7).is_ok());
        assert_eq!(
            got.check(8),
            Err(WireError::ResumeOffsetMismatch { asked: 8, got: 7 })
        );
        // A request's tag does not authenticate an answer's body (per-role keys).
        let body = a.body();
        let mut forged = [0u8; RESUME_REPLY_LEN];
        forged[..29].copy_from_slice(&body);
        forged[29..].copy_from_slice(&k.resume_tag(Role::Receiver, &body, &[]));
        assert_eq!(
            ResumeReply::decode(&forged, &k),
            Err(WireError::ResumeForged)
        );
        // A well-tagged answer whose verdict contradicts its window.
        let bent = ResumeReply {
            verdict: ResumeVerdict::Resume,
            ..ResumeReply::answer(1, 5, 9)
        };
        assert!(matches!(
            ResumeReply::decode(&bent.encode(&k), &k),
            Err(WireError::BadResumeWindow { .. })
        ));
    }

    #[test]
    fn a_bound_request_or_answer_passes_only_with_its_binding() {
        let (first, other, now) = (keys(b"first"), keys(b"other"), keys(b"now"));
        let (b1, b2) = (stream_binding(&first), stream_binding(&other));
        assert_ne!(b1, b2);
        let r = ResumeRequest { offset: 99 }.encode_bound(&now, &b1);
        assert_eq!(
            ResumeRequest::decode_bound(&r, &now, &b1),
            Ok(ResumeRequest { offset: 99 })
        );
        // Another stream's end (same shared key, other first connection).
        assert_eq!(
            ResumeRequest::decode_bound(&r, &now, &b2),
            Err(WireError::ResumeForged)
        );
        assert_eq!(
            ResumeRequest::decode(&r, &now),
            Err(WireError::ResumeForged)
        );
        let a = ResumeReply::answer(99, 0, 100).encode_bound(&now, &b1);
        assert!(ResumeReply::decode_bound(&a, &now, &b1).is_ok());
        assert_eq!(
            ResumeReply::decode_bound(&a, &now, &b2),
            Err(WireError::ResumeForged)
        );
    }

    #[test]
    fn a_returning_sender_proves_only_its_own_stream() {
        let (first, other, now) = (keys(b"first"), keys(b"other"), keys(b"now"));
        let (b1, b2) = (stream_binding(&first), stream_binding(&other));
        let m = Returning::encode(&now, &b1);
        assert_eq!(Returning::verify(&m, &now, &b1), Ok(Returning));
        // Another stream's sender, or another connection's keys.
        assert_eq!(
            Returning::verify(&m, &now, &b2),
            Err(WireError::ResumeForged)
        );
        assert_eq!(
            Returning::verify(&m, &first, &b1),
            Err(WireError::ResumeForged)
        );
        // A receiver's hold is not a sender's message (per-role keys).
        let mut reflected = Resuming::hold(&now, &b1);
        reflected[..4].copy_from_slice(&RETURNING_MAGIC);
        assert_eq!(
            Returning::verify(&reflected, &now, &b1),
            Err(WireError::ResumeForged)
        );
        // Data, or a request, is refused by its body.
        let r = ResumeRequest { offset: 0 }.encode_bound(&now, &b1);
        assert_eq!(
            Returning::verify(&r, &now, &b1),
            Err(WireError::BadResumeMagic(REQUEST_MAGIC))
        );
        assert!(matches!(
            Returning::verify(&[0u8; RESUME_LEN], &now, &b1),
            Err(WireError::BadResumeMagic(_))
        ));
    }

    #[test]
    fn the_chain_key_is_not_a_session_key() {
        let k = keys(b"s");
        let c = chain_stream_key(b"s");
        assert_ne!(c, k.stream_mac);
        assert_eq!(c, chain_stream_key(b"s"));
        assert_ne!(c, chain_stream_key(b"t"));
    }
}
