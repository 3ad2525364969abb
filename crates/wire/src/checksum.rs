//! The end-to-end stream checksum: xxh3-64 over every byte, in order.
//!
//! It is not a security measure (the authentication is); it catches truncation,
//! reordering and corruption anywhere between the sender's input and the receiver's
//! output, including bugs in our own buffer handling, at memory speed.

use xxhash_rust::xxh3::Xxh3;

/// Incremental hash and byte count of a stream.
#[derive(Clone)]
pub struct StreamHasher {
    hasher: Xxh3,
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
            hasher: Xxh3::new(),
            bytes: 0,
        }
    }
    /// Adds the next bytes of the stream.
    pub fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
        self.bytes += data.len() as u64;
    }
    /// Bytes seen so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The checksum of everything seen so far.
    pub fn digest(&self) -> u64 {
        self.hasher.digest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut h = StreamHasher::new();
        for c in data.chunks(4097) {
            h.update(c);
        }
        assert_eq!(h.digest(), xxhash_rust::xxh3::xxh3_64(&data));
        assert_eq!(h.bytes(), data.len() as u64);
    }
}
