//! The sealed control channel of `--launcher srun` (Slurm's step I/O is plain
//! TCP, so nothing secret may cross it readable). Before anything else on the
//! channel:
//!
//! 1. rdpipe makes an ephemeral X25519 key pair and sends `MUNGE CRED`
//!    ([`CredLine`]): a munge credential that only its own uid can decode,
//!    whose payload is an [`Offer`] (its public key and a fresh random nonce);
//! 2. the agent decodes it (munge refuses an expired or replayed credential),
//!    checks that it was made by its own uid, makes its own ephemeral key pair
//!    and answers `MUNGE CRED` ([`crate::FromAgent::Munge`]), its own
//!    uid-restricted credential whose payload is an [`Answer`]: its public key
//!    and [`Answer::binding`] of the offer (so the answer is fresh and for this
//!    offer);
//! 3. rdpipe decodes that and checks the uid and the binding; both derive
//!    [`ChannelKey`] (X25519, then HKDF-SHA256 over both public keys and the
//!    nonce), and every later rdpipe → agent line travels as `SEAL HEX`
//!    ([`Sealer`], [`Opener`]): AES-256-GCM under that key with a counter
//!    nonce, so a line cannot be read, altered, replayed, dropped unnoticed or
//!    reordered.
//!
//! An eavesdropper sees two munge credentials (public keys, under munge's own
//! encryption) and sealed lines. An active attacker on the step's I/O who is
//! not the user cannot make a credential of the user's uid, so cannot put its
//! own public key in either place. The agent's lines to rdpipe carry nothing
//! secret and stay in clear text.

use super::keys::{decode_hex, encode_hex};
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::hkdf::{Salt, HKDF_SHA256};
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// The longest munge credential a [`CredLine`] carries (rdpipe's are about
/// 250 characters).
pub const MAX_CRED: usize = 4096;

/// The longest sealed line an [`Opener`] accepts (hex digits after `SEAL `).
pub const MAX_SEALED: usize = 64 * 1024;

/// Why the channel could not be agreed or a sealed line did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// A line that is not `SEAL HEX`.
    #[error("a control line that is not sealed (SEAL HEX) on the srun channel")]
    NotSealed,
    /// The line did not open under the channel's key and next counter.
    #[error(
        "a sealed control line did not open: altered, replayed, reordered or not for this agent"
    )]
    Forged,
    /// A payload that is not what the handshake expects.
    #[error("malformed {0} in the srun channel's handshake")]
    Malformed(&'static str),
    /// The answer is not for this offer.
    #[error("the agent's answer is not for this offer (a replayed or foreign credential)")]
    Unbound,
    /// The OS random source or the key agreement failed.
    #[error("key agreement failed: {0}")]
    Crypto(&'static str),
    /// The channel's counter ran out (2^64 lines).
    #[error("the sealed channel's counter is exhausted")]
    Exhausted,
}

/// `MUNGE CRED`: the first line each way of an srun agent's channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredLine(pub String);

impl CredLine {
    /// Checks a munge credential's shape: `MUNGE:` base64 `:`, no spaces.
    pub fn new(cred: &str) -> Result<CredLine, SealError> {
        let body = cred
            .strip_prefix("MUNGE:")
            .and_then(|b| b.strip_suffix(':'))
            .ok_or(SealError::Malformed("munge credential"))?;
        let base64 = |c: char| c.is_ascii_alphanumeric() || "+/=".contains(c);
        if cred.len() > MAX_CRED || body.is_empty() || !body.chars().all(base64) {
            return Err(SealError::Malformed("munge credential"));
        }
        Ok(CredLine(cred.to_string()))
    }
}

impl fmt::Display for CredLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MUNGE {}", self.0)
    }
}

impl FromStr for CredLine {
    type Err = SealError;
    fn from_str(l: &str) -> Result<Self, SealError> {
        match l.split(' ').collect::<Vec<_>>()[..] {
            ["MUNGE", cred] => CredLine::new(cred),
            _ => Err(SealError::Malformed("MUNGE line")),
        }
    }
}

/// 32 bytes from 64 hex digits.
fn key32(hex: &str, what: &'static str) -> Result<[u8; 32], SealError> {
    decode_hex(hex)
        .and_then(|v| <[u8; 32]>::try_from(v).ok())
        .ok_or(SealError::Malformed(what))
}

/// rdpipe's credential payload: `rdpipe-offer-1 PUBLIC NONCE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// rdpipe's ephemeral X25519 public key.
    pub public: [u8; 32],
    /// Fresh random bytes: the answer must bind them.
    pub nonce: [u8; 32],
}

impl fmt::Display for Offer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rdpipe-offer-1 {} {}",
            encode_hex(&self.public),
            encode_hex(&self.nonce)
        )
    }
}

impl FromStr for Offer {
    type Err = SealError;
    fn from_str(s: &str) -> Result<Self, SealError> {
        match s.split(' ').collect::<Vec<_>>()[..] {
            ["rdpipe-offer-1", p, n] => Ok(Offer {
                public: key32(p, "offer's public key")?,
                nonce: key32(n, "offer's nonce")?,
            }),
            _ => Err(SealError::Malformed("offer")),
        }
    }
}

/// The agent's credential payload: `rdpipe-answer-1 PUBLIC BINDING`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The agent's ephemeral X25519 public key.
    pub public: [u8; 32],
    /// [`Answer::binding`] of the offer answered.
    pub binding: [u8; 32],
}

impl Answer {
    /// SHA-256 of a label, the offer's public key and its nonce: what ties an
    /// answer to one offer.
    pub fn binding(offer: &Offer) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"rdpipe srun answer 1\0");
        h.update(offer.public);
        h.update(offer.nonce);
        h.finalize().into()
    }

    /// Whether this answers `offer`.
    pub fn check(&self, offer: &Offer) -> Result<(), SealError> {
        if self.binding == Answer::binding(offer) {
            Ok(())
        } else {
            Err(SealError::Unbound)
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rdpipe-answer-1 {} {}",
            encode_hex(&self.public),
            encode_hex(&self.binding)
        )
    }
}

impl FromStr for Answer {
    type Err = SealError;
    fn from_str(s: &str) -> Result<Self, SealError> {
        match s.split(' ').collect::<Vec<_>>()[..] {
            ["rdpipe-answer-1", p, b] => Ok(Answer {
                public: key32(p, "answer's public key")?,
                binding: key32(b, "answer's binding")?,
            }),
            _ => Err(SealError::Malformed("answer")),
        }
    }
}

/// Fresh random bytes (the OS random source).
pub fn random32() -> Result<[u8; 32], SealError> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b).map_err(|_| SealError::Crypto("no OS random source"))?;
    Ok(b)
}

/// One side's ephemeral X25519 key pair (used once: [`Ephemeral::agree`]
/// consumes it).
pub struct Ephemeral {
    secret: EphemeralPrivateKey,
    /// The public key, sent in the credential.
    pub public: [u8; 32],
}

impl Ephemeral {
    /// A fresh key pair.
    pub fn new() -> Result<Ephemeral, SealError> {
        let rng = ring::rand::SystemRandom::new();
        let secret = EphemeralPrivateKey::generate(&X25519, &rng)
            .map_err(|_| SealError::Crypto("cannot make an X25519 key"))?;
        let public = secret
            .compute_public_key()
            .map_err(|_| SealError::Crypto("cannot compute the X25519 public key"))?;
        let public = <[u8; 32]>::try_from(public.as_ref())
            .map_err(|_| SealError::Crypto("an X25519 public key is not 32 bytes"))?;
        Ok(Ephemeral { secret, public })
    }

    /// The channel's key, from this key pair and the peer's public key; `offer`
    /// and `answer_public` are the handshake's (the same on both sides).
    pub fn agree(
        self,
        peer: &[u8; 32],
        offer: &Offer,
        answer_public: &[u8; 32],
    ) -> Result<ChannelKey, SealError> {
        let peer = UnparsedPublicKey::new(&X25519, peer);
        // ring refuses a peer key that makes an all-zero shared secret.
        agreement::agree_ephemeral(self.secret, &peer, |shared| {
            ChannelKey::derive(shared, offer, answer_public)
        })
        .map_err(|_| SealError::Crypto("the peer's X25519 public key is unusable"))?
    }
}

/// The key that seals one agent's rdpipe → agent lines.
#[derive(Clone)]
pub struct ChannelKey([u8; 32]);

impl fmt::Debug for ChannelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChannelKey(..)")
    }
}

impl ChannelKey {
    /// HKDF-SHA256: salt the offer's nonce, input the X25519 shared secret,
    /// info a label and both public keys (rdpipe's first).
    fn derive(
        shared: &[u8],
        offer: &Offer,
        answer_public: &[u8; 32],
    ) -> Result<ChannelKey, SealError> {
        struct Len;
        impl ring::hkdf::KeyType for Len {
            fn len(&self) -> usize {
                32
            }
        }
        let prk = Salt::new(HKDF_SHA256, &offer.nonce).extract(shared);
        let info: [&[u8]; 3] = [b"rdpipe srun control 1\0", &offer.public, answer_public];
        let mut k = [0u8; 32];
        prk.expand(&info, Len)
            .and_then(|okm| okm.fill(&mut k))
            .map_err(|_| SealError::Crypto("HKDF failed"))?;
        Ok(ChannelKey(k))
    }

    fn aead(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &self.0).expect("32 bytes"))
    }
}

/// Additional data of every sealed line: its direction.
const AAD: &[u8] = b"rdpipe control rdpipe->agent";

/// The nonce of line `n` of the channel.
fn nonce(n: u64) -> Nonce {
    let mut b = [0u8; aead::NONCE_LEN];
    b[4..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(b)
}

/// rdpipe's side: seals each line, counting.
pub struct Sealer {
    key: LessSafeKey,
    next: u64,
}

impl Sealer {
    /// A sealer whose first line is number 0.
    pub fn new(k: &ChannelKey) -> Sealer {
        Sealer {
            key: k.aead(),
            next: 0,
        }
    }

    /// `line` (without its newline) as `SEAL HEX`.
    pub fn seal(&mut self, line: &str) -> Result<String, SealError> {
        let n = self.next;
        self.next = n.checked_add(1).ok_or(SealError::Exhausted)?;
        let mut buf = line.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(nonce(n), Aad::from(AAD), &mut buf)
            .map_err(|_| SealError::Exhausted)?;
        Ok(format!("SEAL {}", encode_hex(&buf)))
    }
}

/// The agent's side: opens each line, in order.
pub struct Opener {
    key: LessSafeKey,
    next: u64,
}

impl Opener {
    /// An opener expecting line number 0.
    pub fn new(k: &ChannelKey) -> Opener {
        Opener {
            key: k.aead(),
            next: 0,
        }
    }

    /// The line inside `SEAL HEX` (trailing whitespace ignored). A failure
    /// leaves the counter where it was: the channel is not to be trusted
    /// after one.
    pub fn open(&mut self, line: &str) -> Result<String, SealError> {
        let hex = line
            .trim_end()
            .strip_prefix("SEAL ")
            .filter(|h| h.len() <= MAX_SEALED)
            .ok_or(SealError::NotSealed)?;
        let mut buf = decode_hex(hex).ok_or(SealError::NotSealed)?;
        let plain = self
            .key
            .open_in_place(nonce(self.next), Aad::from(AAD), &mut buf)
            .map_err(|_| SealError::Forged)?;
        let s = std::str::from_utf8(plain).map_err(|_| SealError::Forged)?;
        if s.contains('\n') {
            return Err(SealError::Forged);
        }
        let s = s.to_string();
        self.next = self.next.checked_add(1).ok_or(SealError::Exhausted)?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Both sides of a handshake (without munge): rdpipe's sealer, the
    /// agent's opener.
    fn agreed() -> (Sealer, Opener) {
        let (r, a) = (Ephemeral::new().unwrap(), Ephemeral::new().unwrap());
        let offer = Offer {
            public: r.public,
            nonce: random32().unwrap(),
        };
        let answer = Answer {
            public: a.public,
            binding: Answer::binding(&offer),
        };
        answer.check(&offer).unwrap();
        let agent = a.agree(&offer.public, &offer, &answer.public).unwrap();
        let rdpipe = r.agree(&answer.public, &offer, &answer.public).unwrap();
        assert_eq!(agent.0, rdpipe.0);
        (Sealer::new(&rdpipe), Opener::new(&agent))
    }

    #[test]
    fn sealed_lines_open_in_order_and_hide_the_keys() {
        let (mut s, mut o) = agreed();
        let key_line = format!("{} -", "ab".repeat(32));
        let sealed = s.seal(&key_line).unwrap();
        assert!(sealed.starts_with("SEAL "));
        assert!(!sealed.contains(&"ab".repeat(32)));
        assert_eq!(o.open(&sealed).unwrap(), key_line);
        let ping = s.seal("PING").unwrap();
        assert_eq!(o.open(&format!("{ping}\n")).unwrap(), "PING");
    }

    #[test]
    fn replayed_reordered_altered_or_clear_lines_do_not_open() {
        let (mut s, mut o) = agreed();
        let first = s.seal("CONNECT in 10.0.0.1 5000").unwrap();
        let second = s.seal("PING").unwrap();
        // Out of order.
        assert_eq!(o.open(&second), Err(SealError::Forged));
        assert_eq!(o.open(&first).unwrap(), "CONNECT in 10.0.0.1 5000");
        // Replayed.
        assert_eq!(o.open(&first), Err(SealError::Forged));
        // Altered: one bit of the ciphertext.
        let mut b = decode_hex(&second[5..]).unwrap();
        b[0] ^= 1;
        assert_eq!(
            o.open(&format!("SEAL {}", encode_hex(&b))),
            Err(SealError::Forged)
        );
        assert_eq!(o.open("PING"), Err(SealError::NotSealed));
        assert_eq!(o.open(&second).unwrap(), "PING");
        // Another channel's key.
        let (mut other, _) = agreed();
        assert_eq!(o.open(&other.seal("PING").unwrap()), Err(SealError::Forged));
    }

    #[test]
    fn an_answer_binds_its_offer() {
        let offer = Offer {
            public: [1; 32],
            nonce: [2; 32],
        };
        let text = offer.to_string();
        assert_eq!(text.parse::<Offer>().unwrap(), offer);
        let answer = Answer {
            public: [3; 32],
            binding: Answer::binding(&offer),
        };
        assert_eq!(answer.to_string().parse::<Answer>().unwrap(), answer);
        answer.check(&offer).unwrap();
        let other = Offer {
            nonce: [4; 32],
            ..offer.clone()
        };
        assert_eq!(answer.check(&other), Err(SealError::Unbound));
        assert!("rdpipe-offer-1 00 11".parse::<Offer>().is_err());
        assert!(answer.to_string().parse::<Offer>().is_err());
    }

    #[test]
    fn cred_lines_carry_only_a_credential() {
        let c = "MUNGE:AwQFAADU44w+JEpES1IBaTlrQPY8uW6T=:";
        let l: CredLine = format!("MUNGE {c}").parse().unwrap();
        assert_eq!(l.0, c);
        assert_eq!(l.to_string(), format!("MUNGE {c}"));
        for bad in [
            "MUNGE",
            "MUNGE MUNGE::",
            "MUNGE MUNGE:abc",
            "MUNGE MUNGE:a b:",
            "MUNGE MUNGE:a;rm:",
            "munge MUNGE:abc:",
            "MUNGE MUNGE:abc: x",
        ] {
            assert!(bad.parse::<CredLine>().is_err(), "{bad}");
        }
        let long = format!("MUNGE MUNGE:{}:", "A".repeat(MAX_CRED));
        assert!(long.parse::<CredLine>().is_err());
    }

    #[test]
    fn a_low_order_public_key_is_refused() {
        let offer = Offer {
            public: [9; 32],
            nonce: [0; 32],
        };
        let e = Ephemeral::new().unwrap();
        assert!(e.agree(&[0; 32], &offer, &[0; 32]).is_err());
    }

    proptest! {
        #[test]
        fn hostile_lines_never_open_nor_panic(line in ".{0,300}", hex in "[0-9a-f]{0,200}") {
            let (_, mut o) = agreed();
            prop_assert!(o.open(&line).is_err());
            let sealed = format!("SEAL {hex}");
            prop_assert!(o.open(&sealed).is_err());
            let _ = line.parse::<CredLine>();
            let _ = line.parse::<Offer>();
            let _ = line.parse::<Answer>();
        }

        #[test]
        fn any_line_round_trips(lines in proptest::collection::vec("[ -~]{0,200}", 1..8)) {
            let (mut s, mut o) = agreed();
            for l in &lines {
                let sealed = s.seal(l).unwrap();
                prop_assert_eq!(&o.open(&sealed).unwrap(), l);
            }
        }
    }
}
