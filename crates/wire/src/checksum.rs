//! The end-to-end stream digest: xxh3-64 over every byte, in order, and, in the
//! default `--integrity mac` mode, a keyed BLAKE3 MAC over the same bytes.
//!
//! The checksum is not a security measure; it catches truncation, reordering and
//! corruption anywhere between the sender's input and the receiver's output,
//! including bugs in our own buffer handling, at memory speed, and it is what
//! `-v` shows (the same for every hop of a pipeline). The MAC is keyed with a
//! key derived for this connection only ([`crate::session`]): without it nobody can alter,
//! reorder, drop or add bytes and make the MAC come out right. It costs far more
//! CPU than the checksum (see docs/performance.md); `--integrity checksum` turns
//! it off on trusted fabrics.
//!
//! Both ends hash every byte, so the hash is on the hot path: `twox-hash` picks its
//! AVX2 code at run time where the CPU has it (faster than the SSE2-only
//! `xxhash-rust`: docs/performance.md), and falls
//! back to SSE2 or scalar code elsewhere. The value is XXH3-64 with seed 0, the
//! same on every CPU path; the tests check it against reference values (from the
//! C reference implementation's algorithm) around every internal boundary.

use std::hash::Hasher;
use twox_hash::XxHash3_64;

/// XXH3-64 (seed 0) of `data` in one call: the checksum of a stream that is
/// exactly `data`.
pub fn xxh3_64(data: &[u8]) -> u64 {
    XxHash3_64::oneshot(data)
}

/// Incremental checksum, optional MAC and byte count of a stream.
#[derive(Clone)]
pub struct StreamHasher {
    hasher: XxHash3_64,
    mac: Option<Box<blake3::Hasher>>,
    bytes: u64,
}

impl Default for StreamHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamHasher {
    /// A hasher for an empty stream.
    pub fn new() -> Self {
        StreamHasher {
            hasher: XxHash3_64::with_seed(0),
            mac: None,
            bytes: 0,
        }
    }
    /// A hasher that also computes the keyed MAC with `key`.
    pub fn keyed(key: &[u8; 32]) -> Self {
        StreamHasher {
            mac: Some(Box::new(blake3::Hasher::new_keyed(key))),
            ..Self::new()
        }
    }
    /// Adds the next bytes of the stream.
    pub fn update(&mut self, data: &[u8]) {
        self.hasher.write(data);
        if let Some(m) = &mut self.mac {
            m.update(data);
        }
        self.bytes += data.len() as u64;
    }
    /// The MAC of everything seen so far (all zeros without a key).
    pub fn mac(&self) -> [u8; 32] {
        self.mac
            .as_ref()
            .map(|m| *m.finalize().as_bytes())
            .unwrap_or([0; 32])
    }
    /// Bytes seen so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The checksum of everything seen so far.
    pub fn digest(&self) -> u64 {
        self.hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XXH3-64 (seed 0) of the first LEN bytes of [`sample`], as the reference
    /// implementation computes them (xxhsum -H3 and the C library agree; LEN 0
    /// is the published empty-input value): every length class of the
    /// algorithm (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer) and the stripe,
    /// block and buffer boundaries.
    const REFERENCE: [(usize, u64); 15] = [
        (0, 0x2d06800538d394c2),
        (1, 0xc44bdff4074eecdb),
        (3, 0x3698b80191e625f9),
        (4, 0x2e4ac2f1c52157fc),
        (8, 0x60e1baa91347a1f2),
        (9, 0x9c88fc32c37b56cb),
        (16, 0x8626370b70d8ac70),
        (17, 0xaa7a5f479409a664),
        (128, 0x040e97756280237a),
        (129, 0xf0f4dc98ce461dfd),
        (240, 0x8acecb90be72b9c3),
        (241, 0x82d3ebf50a3e9c42),
        (1024, 0xcbdff56b050f2c1c),
        (4097, 0xf4aea1a63dbeb88b),
        (300_000, 0x72b19f629d50046a),
    ];

    fn sample() -> Vec<u8> {
        (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn one_shot_equals_the_reference() {
        let data = sample();
        for (len, want) in REFERENCE {
            assert_eq!(xxh3_64(&data[..len]), want, "len {len}");
        }
    }

    /// Every piece size around the hash's internal block and buffer boundaries
    /// (64-byte stripes, 1 KiB blocks, 256-byte internal buffer) gives the
    /// reference value.
    #[test]
    fn incremental_equals_the_reference() {
        let data = sample();
        for piece in [1, 63, 64, 65, 240, 255, 256, 257, 1024, 4097, 65536, 262144] {
            let mut h = StreamHasher::new();
            for c in data.chunks(piece) {
                h.update(c);
            }
            assert_eq!(h.digest(), 0x72b19f629d50046a, "piece size {piece}");
            assert_eq!(h.bytes(), data.len() as u64);
        }
    }

    #[test]
    fn short_and_empty_streams_match_one_shot() {
        let data = sample();
        for len in 0..300 {
            let mut h = StreamHasher::new();
            h.update(&data[..len]);
            assert_eq!(h.digest(), xxh3_64(&data[..len]), "len {len}");
        }
        for (len, want) in REFERENCE.iter().filter(|(l, _)| *l < 300) {
            let mut h = StreamHasher::new();
            h.update(&data[..*len]);
            assert_eq!(h.digest(), *want, "len {len}");
        }
    }

    #[test]
    fn mac_is_keyed_incremental_and_independent_of_the_pieces() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 253) as u8).collect();
        let want = *blake3::keyed_hash(&[5; 32], &data).as_bytes();
        for piece in [1, 1023, 1024, 1025, 65536, 262144] {
            let mut h = StreamHasher::keyed(&[5; 32]);
            for c in data.chunks(piece) {
                h.update(c);
            }
            assert_eq!(h.mac(), want, "piece size {piece}");
            assert_eq!(h.digest(), xxh3_64(&data));
        }
        let mut other = StreamHasher::keyed(&[6; 32]);
        other.update(&data);
        assert_ne!(other.mac(), want);
        assert_eq!(StreamHasher::new().mac(), [0; 32]);
    }

    #[test]
    fn digest_does_not_consume_the_state() {
        let mut h = StreamHasher::new();
        h.update(b"hello ");
        let mid = h.digest();
        h.update(b"world");
        assert_eq!(mid, 0x6e3336eab0b541de);
        assert_eq!(h.digest(), 0xd447b1ea40e6988b);
    }
}
