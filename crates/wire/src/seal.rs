//! `--encrypt`: AES-256-GCM (ring, with AES-NI/VAES and CLMUL where the CPU has
//! them) over each data chunk, sender to receiver. The key comes from the
//! handshake ([`crate::session::SessionKeys::aead`]); the nonce is the chunk's
//! number, counted by both ends, so a chunk that is dropped, repeated or moved
//! fails to open. Each sealed chunk is `ciphertext || tag` (16 bytes more than
//! the plaintext). Chunks are independent given their numbers, so a sender may
//! seal them on as many threads as it has cores.

use crate::WireError;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};

/// Bytes a sealed chunk carries beyond its plaintext.
pub const SEAL_TAG_LEN: usize = 16;

fn key(k: &[u8; 32]) -> LessSafeKey {
    // A 32-byte key is what AES-256-GCM takes: this cannot fail.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k).expect("a 32-byte AES-256 key"))
}

fn nonce(n: u64) -> Nonce {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_le_bytes());
    Nonce::assume_unique_for_key(b)
}

/// Whether this CPU runs AES-GCM in hardware (AES and carry-less multiply
/// instructions), as ring's fast paths need.
pub fn aes_in_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Seals chunks in order.
pub struct Sealer {
    key: LessSafeKey,
    next: u64,
}

impl Sealer {
    /// A sealer whose first chunk is number 0.
    pub fn new(k: &[u8; 32]) -> Sealer {
        Sealer {
            key: key(k),
            next: 0,
        }
    }

    /// Encrypts `buf[..n]` in place and writes the tag after it; returns the
    /// sealed length `n + SEAL_TAG_LEN`. `buf` must hold it.
    pub fn seal(&mut self, buf: &mut [u8], n: usize) -> usize {
        let t = seal_at(&self.key, self.next, &mut buf[..n]);
        buf[n..n + SEAL_TAG_LEN].copy_from_slice(t.as_ref());
        self.next += 1;
        n + SEAL_TAG_LEN
    }
}

/// Seals chunk number `n` (for parallel sealing; [`Sealer`] counts by itself).
pub fn seal_at(key: &LessSafeKey, n: u64, data: &mut [u8]) -> Tag {
    // Only fails for inputs beyond GCM's 64 GiB limit; chunks are at most 64 MiB.
    key.seal_in_place_separate_tag(nonce(n), Aad::empty(), data)
        .expect("a chunk below GCM's length limit")
}

/// The AES-256-GCM key for [`seal_at`].
pub fn aead_key(k: &[u8; 32]) -> LessSafeKey {
    key(k)
}

/// Opens chunks in order.
pub struct Opener {
    key: LessSafeKey,
    next: u64,
}

impl Opener {
    /// An opener expecting chunk number 0 first.
    pub fn new(k: &[u8; 32]) -> Opener {
        Opener {
            key: key(k),
            next: 0,
        }
    }

    /// Decrypts a sealed chunk in place; returns the plaintext length. A chunk
    /// that was altered, forged, dropped or moved is [`WireError::SealBroken`].
    pub fn open(&mut self, sealed: &mut [u8]) -> Result<usize, WireError> {
        if sealed.len() < SEAL_TAG_LEN {
            return Err(WireError::SealBroken(self.next));
        }
        let n = self.next;
        let plain = self
            .key
            .open_in_place(nonce(n), Aad::empty(), sealed)
            .map_err(|_| WireError::SealBroken(n))?
            .len();
        self.next += 1;
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_order() {
        let k = [7u8; 32];
        let (mut s, mut o) = (Sealer::new(&k), Opener::new(&k));
        for len in [0usize, 1, 15, 16, 4096, 100_000] {
            let plain: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut buf = plain.clone();
            buf.resize(len + SEAL_TAG_LEN, 0);
            assert_eq!(s.seal(&mut buf, len), len + SEAL_TAG_LEN);
            if len > 32 {
                assert_ne!(&buf[..len], &plain[..], "not encrypted");
            }
            assert_eq!(o.open(&mut buf).unwrap(), len);
            assert_eq!(&buf[..len], &plain[..]);
        }
    }

    #[test]
    fn altered_dropped_or_reordered_chunks_fail() {
        let k = [1u8; 32];
        let mut s = Sealer::new(&k);
        let mut a = vec![1u8; 64 + SEAL_TAG_LEN];
        let mut b = vec![2u8; 64 + SEAL_TAG_LEN];
        s.seal(&mut a, 64);
        s.seal(&mut b, 64);
        // Dropped or reordered: b first.
        assert!(Opener::new(&k).open(&mut b.clone()).is_err());
        // Altered.
        let mut bad = a.clone();
        bad[3] ^= 1;
        assert!(Opener::new(&k).open(&mut bad).is_err());
        // Wrong key.
        assert!(Opener::new(&[2u8; 32]).open(&mut a.clone()).is_err());
        // Too short to carry a tag.
        assert!(Opener::new(&k).open(&mut [0u8; 5]).is_err());
        let mut o = Opener::new(&k);
        assert_eq!(o.open(&mut a).unwrap(), 64);
        assert_eq!(o.open(&mut b).unwrap(), 64);
    }
}
