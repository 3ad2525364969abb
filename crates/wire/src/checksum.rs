//! The end-to-end stream digest: xxh3-64 over every byte, in order, and, in the
//! default `--integrity mac` mode, a keyed BLAKE3 MAC over the same bytes.
//!
//! The checksum is not a security measure; it catches truncation, reordering and
//! corruption anywhere between the sender's input and the receiver's output,
//! including bugs in our own buffer handling, at memory speed, and it is what
//! `-v` shows (the same for every hop of a pipeline). The MAC is keyed with a
//! key of this session only ([`crate::session`]): without it nobody can alter,
//! reorder, drop or add bytes and make the MAC come out right. It costs far more
//! CPU than the checksum (see docs/performance.md); `--integrity checksum` turns
//! it off on trusted fabrics.
//!
//! Both ends hash every byte, so the hash is on the hot path: `twox-hash` picks its
//! AVX2 code at run time where the CPU has it (about 1.5x the SSE2-only
//! `xxhash-rust` on the machine in docs/performance.md: 53 vs 36 GB/s), and falls
//! back to SSE2 or scalar code elsewhere. The value is the same XXH3-64 (seed 0)
//! either way, so peers built with either crate agree; the tests check it against
//! `xxhash-rust` as an independent implementation.

use std::hash::Hasher;
use twox_hash::XxHash3_64;

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

    /// Every piece size around the hash's internal block and buffer boundaries
    /// (64-byte stripes, 1 KiB blocks, 256-byte internal buffer) against the
    /// one-shot value of an independent implementation.
    #[test]
    fn incremental_equals_independent_one_shot() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for piece in [1, 63, 64, 65, 240, 255, 256, 257, 1024, 4097, 65536, 262144] {
            let mut h = StreamHasher::new();
            for c in data.chunks(piece) {
                h.update(c);
            }
            assert_eq!(
                h.digest(),
                xxhash_rust::xxh3::xxh3_64(&data),
                "piece size {piece}"
            );
            assert_eq!(h.bytes(), data.len() as u64);
        }
    }

    #[test]
    fn short_and_empty_streams_match() {
        let data: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        for len in 0..data.len() {
            let mut h = StreamHasher::new();
            h.update(&data[..len]);
            assert_eq!(
                h.digest(),
                xxhash_rust::xxh3::xxh3_64(&data[..len]),
                "len {len}"
            );
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
            assert_eq!(h.digest(), xxhash_rust::xxh3::xxh3_64(&data));
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
        assert_eq!(mid, xxhash_rust::xxh3::xxh3_64(b"hello "));
        assert_eq!(h.digest(), xxhash_rust::xxh3::xxh3_64(b"hello world"));
    }
}
