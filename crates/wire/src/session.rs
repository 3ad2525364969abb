//! The session's keys: a PAKE (SPAKE2 over Ed25519, `spake2` crate) turns the
//! shared key into a fresh secret that an eavesdropper cannot compute and that
//! an active attacker can test only one key guess against per connection (no
//! offline guessing: nothing either end sends lets anyone check a guess without
//! talking to a real endpoint again). HKDF-SHA256 over that secret, salted with
//! the hash of the whole transcript (both hellos and both PAKE messages), gives
//! every purpose its own key:
//!
//! - `confirm S` / `confirm R`: key confirmation, one tag per role over the
//!   receiver's Accept, so a tampered hello, PAKE message or Accept fails here;
//! - `stream mac`: the keyed BLAKE3 MAC of the stream ([`crate::checksum`]);
//! - `end` / `done`: the tags that authenticate End and Done;
//! - `aead`: the AES-256-GCM key of `--encrypt` ([`crate::seal`]);
//! - `resume S` / `resume R`: the tags of a chain re-link's answer and
//!   request ([`crate::resume`]).
//!
//! Every comparison of a tag is constant-time.

use crate::hello::Role;
use crate::WireError;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use spake2::{Ed25519Group, Identity, Password, Spake2};

/// Length of a SPAKE2 message.
pub const PAKE_MSG_LEN: usize = 33;
/// Length of a tag (confirmation, End, Done).
pub const TAG_LEN: usize = 32;
/// Length of every derived key.
pub const KEY_LEN: usize = 32;

const ID_SENDER: &[u8] = b"rdma-pipe sender v2";
const ID_RECEIVER: &[u8] = b"rdma-pipe receiver v2";

/// One end's half-done PAKE.
pub struct Pake {
    state: Spake2<Ed25519Group>,
    msg: [u8; PAKE_MSG_LEN],
}

impl Pake {
    /// Starts the PAKE for `role` with the shared `key` (the OS random source
    /// supplies the secret scalar).
    pub fn start(role: Role, key: &[u8]) -> Pake {
        let (pw, a, b) = (
            Password::new(key),
            Identity::new(ID_SENDER),
            Identity::new(ID_RECEIVER),
        );
        let (state, msg) = match role {
            Role::Sender => Spake2::<Ed25519Group>::start_a(&pw, &a, &b),
            Role::Receiver => Spake2::<Ed25519Group>::start_b(&pw, &a, &b),
        };
        let mut m = [0u8; PAKE_MSG_LEN];
        m.copy_from_slice(&msg);
        Pake { state, msg: m }
    }

    /// The message to send to the peer.
    pub fn message(&self) -> &[u8; PAKE_MSG_LEN] {
        &self.msg
    }

    /// Finishes with the peer's message; `transcript` is everything both ends
    /// sent so far (hellos and PAKE messages, in a fixed order). A malformed or
    /// reflected message is an error; a wrong key is not detected here but by
    /// the key confirmation.
    pub fn finish(
        self,
        peer_msg: &[u8; PAKE_MSG_LEN],
        transcript: &[u8],
    ) -> Result<SessionKeys, WireError> {
        let shared = self
            .state
            .finish(peer_msg)
            .map_err(|_| WireError::BadPake)?;
        Ok(SessionKeys::derive(&shared, transcript))
    }
}

/// Every key of one session.
#[derive(Clone)]
pub struct SessionKeys {
    confirm_sender: [u8; KEY_LEN],
    confirm_receiver: [u8; KEY_LEN],
    /// The stream MAC's key.
    pub stream_mac: [u8; KEY_LEN],
    end: [u8; KEY_LEN],
    done: [u8; KEY_LEN],
    /// The AEAD key (sender to receiver).
    pub aead: [u8; KEY_LEN],
    resume_sender: [u8; KEY_LEN],
    resume_receiver: [u8; KEY_LEN],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so new_from_slice cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    for p in parts {
        m.update(p);
    }
    m
}

pub(crate) fn tag(key: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
    hmac(key, parts).finalize().into_bytes().into()
}

fn verify(key: &[u8], parts: &[&[u8]], t: &[u8; TAG_LEN]) -> bool {
    hmac(key, parts).verify_slice(t).is_ok()
}

impl SessionKeys {
    /// HKDF-SHA256: extract with the transcript's hash as salt, expand one key
    /// per label.
    pub fn derive(shared: &[u8], transcript: &[u8]) -> SessionKeys {
        let salt = Sha256::digest(transcript);
        let prk = tag(&salt, &[shared]);
        // HKDF-Expand of one block: T(1) = HMAC(PRK, info || 0x01).
        let key = |label: &[u8]| tag(&prk, &[b"rdma-pipe v2 ", label, &[1]]);
        SessionKeys {
            confirm_sender: key(b"confirm S"),
            confirm_receiver: key(b"confirm R"),
            stream_mac: key(b"stream mac"),
            end: key(b"end"),
            done: key(b"done"),
            aead: key(b"aead s->r"),
            resume_sender: key(b"resume S"),
            resume_receiver: key(b"resume R"),
        }
    }

    fn resume_key(&self, role: Role) -> &[u8; KEY_LEN] {
        match role {
            Role::Sender => &self.resume_sender,
            Role::Receiver => &self.resume_receiver,
        }
    }

    /// The tag of a re-link or reconnect message sent by the end playing
    /// `role` (the receiver's request, the sender's answer) over its encoded
    /// body and `binding` (empty for a chain re-link; the stream's
    /// [`crate::resume::stream_binding`] for a reconnect; bodies have fixed
    /// lengths, so the two cannot be confused).
    pub fn resume_tag(&self, role: Role, body: &[u8], binding: &[u8]) -> [u8; TAG_LEN] {
        tag(self.resume_key(role), &[b"resume", body, binding])
    }

    /// Checks (constant-time) the tag of a re-link message from `role`.
    pub fn verify_resume(
        &self,
        role: Role,
        body: &[u8],
        binding: &[u8],
        t: &[u8; TAG_LEN],
    ) -> bool {
        verify(self.resume_key(role), &[b"resume", body, binding], t)
    }

    fn confirm_key(&self, role: Role) -> &[u8; KEY_LEN] {
        match role {
            Role::Sender => &self.confirm_sender,
            Role::Receiver => &self.confirm_receiver,
        }
    }

    /// The key-confirmation tag of the end playing `role`, over the receiver's
    /// encoded Accept.
    pub fn confirm_tag(&self, role: Role, accept: &[u8]) -> [u8; TAG_LEN] {
        tag(self.confirm_key(role), &[b"confirm", accept])
    }

    /// Checks (constant-time) the peer's confirmation tag.
    pub fn verify_confirm(&self, role: Role, accept: &[u8], t: &[u8; TAG_LEN]) -> bool {
        verify(self.confirm_key(role), &[b"confirm", accept], t)
    }

    fn end_key(&self, end: EndOf) -> &[u8; KEY_LEN] {
        match end {
            EndOf::Sender => &self.end,
            EndOf::Receiver => &self.done,
        }
    }

    /// The tag of End (`EndOf::Sender`) or Done (`EndOf::Receiver`) over the
    /// byte count, the checksum and the stream MAC.
    pub fn end_tag(
        &self,
        end: EndOf,
        bytes: u64,
        checksum: u64,
        mac: &[u8; TAG_LEN],
    ) -> [u8; TAG_LEN] {
        stream_tag(self.end_key(end), bytes, checksum, mac)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Checks an End or Done tag (constant-time).
    pub fn verify_end(
        &self,
        end: EndOf,
        bytes: u64,
        checksum: u64,
        mac: &[u8; TAG_LEN],
        t: &[u8; TAG_LEN],
    ) -> bool {
        stream_tag(self.end_key(end), bytes, checksum, mac)
            .verify_slice(t)
            .is_ok()
    }
}

/// Whose end-of-stream message a tag is for: the sender's End or the
/// receiver's Done (each has its own key, so neither passes for the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndOf {
    /// The sender's End.
    Sender,
    /// The receiver's Done.
    Receiver,
}

/// The HMAC behind an End or Done tag (their keys differ).
fn stream_tag(key: &[u8], bytes: u64, checksum: u64, mac: &[u8; TAG_LEN]) -> Hmac<Sha256> {
    hmac(key, &[&bytes.to_le_bytes(), &checksum.to_le_bytes(), mac])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(ks: &[u8], kr: &[u8]) -> (SessionKeys, SessionKeys) {
        let s = Pake::start(Role::Sender, ks);
        let r = Pake::start(Role::Receiver, kr);
        let mut t = Vec::new();
        t.extend_from_slice(s.message());
        t.extend_from_slice(r.message());
        let (ms, mr) = (*s.message(), *r.message());
        (s.finish(&mr, &t).unwrap(), r.finish(&ms, &t).unwrap())
    }

    #[test]
    fn same_key_same_session_keys() {
        let (s, r) = pair(b"secret", b"secret");
        let t = s.confirm_tag(Role::Sender, b"accept");
        assert!(r.verify_confirm(Role::Sender, b"accept", &t));
        // Reflection: the sender's tag does not pass as the receiver's.
        assert!(!r.verify_confirm(Role::Receiver, b"accept", &t));
        // Another Accept (tampered) fails.
        assert!(!r.verify_confirm(Role::Sender, b"accepT", &t));
        assert_eq!(s.stream_mac, r.stream_mac);
        assert_eq!(s.aead, r.aead);
        let mac = [9u8; TAG_LEN];
        let e = s.end_tag(EndOf::Sender, 5, 6, &mac);
        assert!(r.verify_end(EndOf::Sender, 5, 6, &mac, &e));
        assert!(!r.verify_end(EndOf::Sender, 5, 7, &mac, &e));
        // An End echoed back does not pass as Done.
        assert!(!s.verify_end(EndOf::Receiver, 5, 6, &mac, &e));
    }

    #[test]
    fn different_keys_fail_confirmation() {
        let (s, r) = pair(b"secret", b"Secret");
        let t = s.confirm_tag(Role::Sender, b"accept");
        assert!(!r.verify_confirm(Role::Sender, b"accept", &t));
    }

    #[test]
    fn every_session_is_fresh() {
        let (a, _) = pair(b"k", b"k");
        let (b, _) = pair(b"k", b"k");
        assert_ne!(a.stream_mac, b.stream_mac);
    }

    #[test]
    fn reflected_pake_message_is_rejected() {
        let s = Pake::start(Role::Sender, b"k");
        let m = *s.message();
        assert!(matches!(s.finish(&m, b""), Err(WireError::BadPake)));
    }
}
