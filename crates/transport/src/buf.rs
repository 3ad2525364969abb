//! [`PageBuf`]: a heap buffer whose first byte is page-aligned, for the data path.
//!
//! The kernel copies into and out of these buffers on every read, send and
//! receive. A `vec![0u8; 256 KiB]` comes from `malloc`'s mmap path and starts 16
//! bytes past a page boundary, and the kernel's `rep movsb` copy into a
//! destination that is not page-aligned is several times slower on some CPUs
//! (docs/performance.md has the figures). Aligning costs one page of
//! slack per buffer and no `unsafe`: the buffer is a slice of a slightly larger
//! `Vec` starting at the first page boundary in it (a `Vec`'s heap block does not
//! move when the `Vec` is moved between threads).

use std::ops::{Deref, DerefMut};

/// The alignment of a [`PageBuf`]'s first byte.
pub const ALIGN: usize = 4096;

/// A zeroed buffer of a fixed length whose first byte is [`ALIGN`]-aligned.
pub struct PageBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageBuf {
    /// A zeroed, page-aligned buffer of `len` bytes.
    pub fn new(len: usize) -> Self {
        let raw = vec![0u8; len + ALIGN];
        // align_offset may give up (usize::MAX) in theory; then run unaligned.
        let start = match raw.as_ptr().align_offset(ALIGN) {
            off if off < ALIGN => off,
            _ => 0,
        };
        PageBuf { raw, start, len }
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_of_the_asked_length_after_a_move() {
        for len in [1, 4096, 256 << 10, 1000] {
            let b = PageBuf::new(len);
            let b = std::thread::spawn(move || b).join().unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
        }
    }
}
