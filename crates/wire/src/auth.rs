//! Mutual challenge-response authentication.
//!
//! Each end sends `HMAC-SHA256(key, LABEL || role || sender_hello || receiver_hello)`.
//! Both hellos carry fresh nonces, so a tag is valid for one connection only (no
//! replay); the role byte differs between the two tags, so an attacker cannot
//! reflect a peer's own tag back to it. Verification is constant-time.

use crate::hello::{Role, HELLO_LEN};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Length of an authentication tag.
pub const AUTH_TAG_LEN: usize = 32;
const LABEL: &[u8] = b"rdma-pipe auth v1\0";

fn mac(
    key: &[u8],
    role: Role,
    sender: &[u8; HELLO_LEN],
    receiver: &[u8; HELLO_LEN],
) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so new_from_slice cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(LABEL);
    m.update(&[match role {
        Role::Sender => b'S',
        Role::Receiver => b'R',
    }]);
    m.update(sender);
    m.update(receiver);
    m
}

/// The tag the end playing `role` sends, given both encoded hellos.
pub fn auth_tag(
    key: &[u8],
    role: Role,
    sender_hello: &[u8; HELLO_LEN],
    receiver_hello: &[u8; HELLO_LEN],
) -> [u8; AUTH_TAG_LEN] {
    mac(key, role, sender_hello, receiver_hello)
        .finalize()
        .into_bytes()
        .into()
}

/// Checks, in constant time, a tag received from the end playing `role`.
pub fn verify_tag(
    key: &[u8],
    role: Role,
    sender_hello: &[u8; HELLO_LEN],
    receiver_hello: &[u8; HELLO_LEN],
    tag: &[u8; AUTH_TAG_LEN],
) -> bool {
    mac(key, role, sender_hello, receiver_hello)
        .verify_slice(tag)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_key_verifies_wrong_key_does_not() {
        let s = [1u8; HELLO_LEN];
        let r = [2u8; HELLO_LEN];
        let t = auth_tag(b"secret", Role::Sender, &s, &r);
        assert!(verify_tag(b"secret", Role::Sender, &s, &r, &t));
        assert!(!verify_tag(b"other", Role::Sender, &s, &r, &t));
        // A reflected tag (claimed by the other role) is rejected.
        assert!(!verify_tag(b"secret", Role::Receiver, &s, &r, &t));
        // A tag from another connection (other nonces) is rejected.
        let r2 = [3u8; HELLO_LEN];
        assert!(!verify_tag(b"secret", Role::Sender, &s, &r2, &t));
    }
}
