//! `--encrypt`: AES-256-GCM (ring, with AES-NI/VAES and CLMUL where the CPU has
//! them) over each data chunk, sender to receiver, sealed and opened in pieces
//! on several cores at once.
//!
//! # Format
//!
//! The key comes from the handshake ([`crate::session::SessionKeys::aead`]),
//! one per session; both ends count the chunks (`c` = 0, 1, 2, ...). A chunk
//! of `n` plaintext bytes is cut into `k` pieces of [`SEAL_PIECE`] (256 KiB)
//! plaintext bytes, the last one shorter ([`seal_pieces`]: `ceil(n / 256 KiB)`,
//! and one empty piece for `n = 0`), each sealed on its own, with empty AAD:
//!
//! ```text
//! ciphertext[0..n] || tag_0 || tag_1 || ... || tag_{k-1}      (n + 16·k bytes)
//! ```
//!
//! The ciphertext stays where the plaintext was (sealing is in place, nothing
//! moves) and the tags follow it. Piece `j` of chunk `c` has the 96-bit nonce
//!
//! ```text
//! (j | MORE) as u32 LE || c as u64 LE      MORE = 1 << 31 on every piece but the last
//! ```
//!
//! so a single-piece chunk (every uncompressed TCP frame: 256 KiB buffers hold
//! at most 256 KiB − 16 bytes of plaintext) is byte for byte the format before pieces:
//! `ciphertext || tag` under the nonce `0u32 || c`.
//!
//! **Nonces never repeat under one key.** A nonce names `(c, j, last?)`; the
//! sealer numbers its chunks 0, 1, 2, ... and seals each piece of each chunk
//! once, so two seals under one key share a nonce only if they are the same
//! piece of the same chunk. `j < 2^31` always ([`MAX_PIECES`]: a chunk is at
//! most 64 MiB, 256 pieces), so the `MORE` bit never collides with a piece
//! number. Every session has its own key, and each direction's data is sealed
//! by one sender only.
//!
//! **Pieces cannot be dropped, reordered, truncated, moved or added.** The
//! opener derives `(n, k)` from the sealed length alone ([`unsealed_len`],
//! which rejects impossible lengths), then opens piece `j` from its fixed place
//! (`[j·P, min((j+1)·P, n))`, tag at `n + 16·j`) under the nonce it expects for
//! `(c, j, j == k-1)`. GCM authenticates each piece's ciphertext, and with it
//! its length, under its nonce, so each piece that opens is exactly the piece
//! the sender sealed under that nonce: piece `j` of chunk `c`, with `MORE` set
//! iff the sender's chunk went on after it. Hence: a piece moved to another
//! place or chunk, or swapped with another, fails (wrong nonce); a chunk cut
//! short at a piece boundary fails (its new last piece was sealed with
//! `MORE`, so GCM's lengths alone would not have caught this cut); a chunk
//! cut inside a piece fails (that piece's length changed); a chunk extended
//! fails (the sender's last piece has no `MORE`, and the new pieces carry no
//! tag the attacker can make). A whole chunk dropped, repeated or moved fails
//! as before: its number is in every piece's nonce.
//!
//! # Threads
//!
//! A chunk of more than one piece is sealed and opened on a process-wide rayon
//! pool of `min(cores, 8)` threads named `rdpipe-seal-N`, built on first use
//! (never when there is only one CPU: then the pieces go one after another on
//! the calling thread, as a single-piece chunk always does). The bytes are the
//! same either way; the chunk numbering stays on the caller, in order.

mod layout;
#[cfg(test)]
mod tests;

pub use layout::{
    plain_room, seal_pieces, sealed_len, sealed_overhead, unsealed_len, SEAL_PIECE, SEAL_TAG_LEN,
};

use crate::WireError;
use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use std::sync::OnceLock;

/// Set in the nonce's piece field on every piece of a chunk but its last.
const MORE: u32 = 1 << 31;

/// The most pieces a chunk may have: piece numbers stay below [`MORE`].
pub const MAX_PIECES: usize = MORE as usize;

/// The most threads that seal or open the pieces of one chunk.
pub const MAX_SEAL_THREADS: usize = 8;

fn key(k: &[u8; 32]) -> LessSafeKey {
    // A 32-byte key is what AES-256-GCM takes: this cannot fail.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k).expect("a 32-byte AES-256 key"))
}

/// The nonce of piece `j` of the `k` pieces of chunk number `chunk`.
fn nonce(chunk: u64, j: usize, k: usize) -> Nonce {
    debug_assert!(j < k && k <= MAX_PIECES);
    let piece = j as u32 | if j + 1 < k { MORE } else { 0 };
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&piece.to_le_bytes());
    b[4..].copy_from_slice(&chunk.to_le_bytes());
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

/// The pool that seals and opens the pieces of a chunk, built on first use;
/// `None` with a single CPU (or if no thread can be started: then the calling
/// thread does all the pieces).
fn pool() -> Option<&'static ThreadPool> {
    static POOL: OnceLock<Option<ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        if cores < 2 {
            return None;
        }
        ThreadPoolBuilder::new()
            .num_threads(cores.min(MAX_SEAL_THREADS))
            .thread_name(|i| format!("rdpipe-seal-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// The pool for a chunk of `k` pieces: none for a single piece.
fn pool_for(k: usize) -> Option<&'static ThreadPool> {
    if k > 1 {
        pool()
    } else {
        None
    }
}

/// Seals `buf[..n]` as chunk number `chunk` in place and writes its tags after
/// it, on `pool` if given; returns the sealed length. `buf` must hold it.
fn seal_chunk(
    key: &LessSafeKey,
    chunk: u64,
    buf: &mut [u8],
    n: usize,
    pool: Option<&ThreadPool>,
) -> usize {
    let k = seal_pieces(n);
    assert!(k <= MAX_PIECES, "a chunk of {n} bytes has too many pieces");
    let len = n + SEAL_TAG_LEN * k;
    let (data, tags) = buf[..len].split_at_mut(n);
    let one = |(j, (piece, tag)): (usize, (&mut [u8], &mut [u8]))| {
        // Only fails beyond GCM's 64 GiB limit; a piece is 256 KiB.
        let t = key
            .seal_in_place_separate_tag(nonce(chunk, j, k), Aad::empty(), piece)
            .expect("a piece below GCM's length limit");
        tag.copy_from_slice(t.as_ref());
    };
    match pool {
        _ if n == 0 => one((0, (data, tags))),
        Some(p) => p.install(|| {
            data.par_chunks_mut(SEAL_PIECE)
                .zip(tags.par_chunks_mut(SEAL_TAG_LEN))
                .enumerate()
                .for_each(one)
        }),
        None => data
            .chunks_mut(SEAL_PIECE)
            .zip(tags.chunks_mut(SEAL_TAG_LEN))
            .enumerate()
            .for_each(one),
    }
    len
}

/// Opens the sealed chunk number `chunk` in place, on `pool` if given; returns
/// the plaintext length, or `None` if any piece (or the length) is not as
/// sealed.
fn open_chunk(
    key: &LessSafeKey,
    chunk: u64,
    sealed: &mut [u8],
    pool: Option<&ThreadPool>,
) -> Option<usize> {
    let (n, k) = unsealed_len(sealed.len())?;
    let (data, tags) = sealed.split_at_mut(n);
    let one = |(j, (piece, tag)): (usize, (&mut [u8], &[u8]))| -> Option<()> {
        let tag = Tag::try_from(tag).ok()?;
        key.open_in_place_separate_tag(nonce(chunk, j, k), Aad::empty(), tag, piece, 0..)
            .ok()
            .map(drop)
    };
    match pool {
        _ if n == 0 => one((0, (data, tags)))?,
        Some(p) => p.install(|| {
            data.par_chunks_mut(SEAL_PIECE)
                .zip(tags.par_chunks(SEAL_TAG_LEN))
                .enumerate()
                .try_for_each(one)
        })?,
        None => data
            .chunks_mut(SEAL_PIECE)
            .zip(tags.chunks(SEAL_TAG_LEN))
            .enumerate()
            .try_for_each(one)?,
    }
    Some(n)
}

/// Seals chunks in order.
pub struct Sealer {
    key: LessSafeKey,
    next: u64,
    parallel: bool,
}

impl Sealer {
    /// A sealer whose first chunk is number 0.
    pub fn new(k: &[u8; 32]) -> Sealer {
        Sealer {
            key: key(k),
            next: 0,
            parallel: true,
        }
    }

    /// This sealer with every piece sealed on the calling thread, as with a
    /// single CPU (the same bytes; for comparison, as the benchmarks do).
    pub fn single_threaded(self) -> Sealer {
        Sealer {
            parallel: false,
            ..self
        }
    }

    /// Encrypts `buf[..n]` in place and writes the pieces' tags after it;
    /// returns the sealed length [`sealed_len`]`(n)`. `buf` must hold it (a
    /// buffer of `cap` bytes holds [`plain_room`]`(cap)` plaintext bytes).
    pub fn seal(&mut self, buf: &mut [u8], n: usize) -> usize {
        let pool = pool_for(seal_pieces(n)).filter(|_| self.parallel);
        let len = seal_chunk(&self.key, self.next, buf, n, pool);
        self.next += 1;
        len
    }
}

/// Seals `data` in place as one piece under the nonce of chunk number `n`'s
/// only piece and returns its tag. Up to [`SEAL_PIECE`] bytes that is the whole
/// format of chunk `n` (`data || tag`); longer data is the raw AES-256-GCM cost
/// the benchmarks measure, not a chunk an [`Opener`] accepts. For benchmarks
/// only (hidden from the docs): the product seals through [`Sealer`].
#[doc(hidden)]
pub fn seal_at(key: &LessSafeKey, n: u64, data: &mut [u8]) -> Tag {
    key.seal_in_place_separate_tag(nonce(n, 0, 1), Aad::empty(), data)
        .expect("a piece below GCM's length limit")
}

/// The AES-256-GCM key for [`seal_at`] (benchmarks only).
#[doc(hidden)]
pub fn aead_key(k: &[u8; 32]) -> LessSafeKey {
    key(k)
}

/// Opens chunks in order.
pub struct Opener {
    key: LessSafeKey,
    next: u64,
    parallel: bool,
}

impl Opener {
    /// An opener expecting chunk number 0 first.
    pub fn new(k: &[u8; 32]) -> Opener {
        Opener {
            key: key(k),
            next: 0,
            parallel: true,
        }
    }

    /// This opener with every piece opened on the calling thread (see
    /// [`Sealer::single_threaded`]).
    pub fn single_threaded(self) -> Opener {
        Opener {
            parallel: false,
            ..self
        }
    }

    /// Decrypts a sealed chunk in place; returns the plaintext length (the
    /// plaintext is `sealed[..len]`). A chunk that was altered, forged, cut,
    /// dropped or moved, in whole or in pieces, is [`WireError::SealBroken`].
    pub fn open(&mut self, sealed: &mut [u8]) -> Result<usize, WireError> {
        let c = self.next;
        let k = unsealed_len(sealed.len()).map_or(1, |(_, k)| k);
        let pool = pool_for(k).filter(|_| self.parallel);
        let n = open_chunk(&self.key, c, sealed, pool).ok_or(WireError::SealBroken(c))?;
        self.next += 1;
        Ok(n)
    }
}
