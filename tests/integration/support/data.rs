//! Test data: deterministic pseudo-random bytes, the checksum `rdpipe -v` prints,
//! and a seeded generator for random fault points.

use std::time::Duration;

/// The xorshift64 step shared by [`random_bytes`] and [`Rng`].
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Deterministic pseudo-random bytes (xorshift), so failures are reproducible.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&xorshift(&mut x).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// xxh3-64, as rdpipe -v prints it.
pub fn xxh3_hex(data: &[u8]) -> String {
    format!("{:016x}", rdpipe_wire::checksum::xxh3_64(data))
}

/// xxh3-64 of a file's content (panics, naming it, when it cannot be read).
pub fn file_xxh3(path: &std::path::Path) -> String {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    xxh3_hex(&data)
}

/// A seeded xorshift generator for picking random fault points. The seed comes
/// from `RDPIPE_FAULT_SEED` when set (to replay a failure), else from the clock,
/// and is printed either way.
pub struct Rng(u64);

impl Rng {
    /// A generator for `test`, announcing its seed.
    pub fn seeded(test: &str) -> Rng {
        let seed = std::env::var("RDPIPE_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("{test}: seed {seed} (replay with RDPIPE_FAULT_SEED={seed})");
        Rng(seed | 1)
    }
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        xorshift(&mut self.0)
    }
    /// A duration in `[lo, hi)` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo).max(1))
    }
}
