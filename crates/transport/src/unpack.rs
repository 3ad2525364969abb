//! The receiver's side of `--compress` ([`Unpacker`]): zstd chunks are
//! decompressed on the process's compression pool ([`crate::compress::workers`],
//! the one a sender compresses on), several at once, and written out in their
//! order.
//!
//! One thread decompressing would bound a fast path below what the sender's
//! pool compresses, and `auto` could then never beat storing. Each zstd chunk is copied out of the
//! transport's buffer (its compressed bytes: a fraction of the data) into a
//! job with its own [`Decoder`], decompressed on a worker, and hashed and
//! written by the receive loop once every chunk before it was.
//!
//! Nothing waits on the pool longer than the stream does: whenever the
//! transport has no next chunk ready ([`crate::ChunkReceiver::more_ready`]:
//! over TCP the header of a data frame or End has arrived; a keepalive is not
//! one), everything in flight is written before the receive loop waits for
//! the network, so an interactive stream's chunk comes out as soon as it
//! arrived. When the transport fails, what is in flight is written too: it
//! arrived whole, and a resumed hop goes on after it.
//!
//! Memory: at most `threads + 1` jobs, each holding one chunk's compressed
//! bytes and a buffer as large as the largest chunk it decompressed (the
//! [`Decoder`] grows it to the chunk's size, never past the largest chunk
//! the stream allows: the negotiated chunk size, or a compressed TCP
//! stream's 4 MiB frame).
//!
//! A stored chunk goes straight from the transport's buffer (after the chunks
//! before it): incompressible data costs what it does without the pool.

use crate::compress::{workers, CompressStats, Workers};
use crate::TransportError;
use rdpipe_wire::compress::{CompressError, Decoder, KIND_STORED, KIND_ZSTD};
use rdpipe_wire::Compress;
use std::collections::VecDeque;
use std::sync::mpsc::Receiver;

/// Why [`Unpacker`] stopped: a chunk it could not decode, or the output.
#[derive(Debug)]
pub(crate) enum UnpackError {
    /// The chunk after every chunk written so far is not a valid one.
    Chunk(CompressError),
    /// Writing (or hashing) a decoded chunk failed.
    Output(TransportError),
}

/// One zstd chunk on its way through a worker.
struct Job {
    wire: Vec<u8>,
    decoder: Decoder,
    result: Result<usize, CompressError>,
}

impl Job {
    fn run(&mut self) {
        self.result = self.decoder.decode(&self.wire).map(|p| p.len());
    }
}

/// The receive loop's decompression (see the module docs).
pub(crate) struct Unpacker {
    limit: usize,
    inline: Decoder,
    pool: Option<&'static Workers>,
    inflight: VecDeque<Receiver<Job>>,
    free: Vec<Job>,
    depth: usize,
    pub(crate) stats: CompressStats,
}

/// Where decoded chunks go, in order.
pub(crate) type Emit<'a> = dyn FnMut(&[u8]) -> Result<(), TransportError> + 'a;

impl Unpacker {
    /// Decompresses a stream compressed as `mode`, no chunk to more than
    /// `limit` bytes (the largest chunk the stream allows).
    pub(crate) fn new(mode: Compress, limit: usize) -> Unpacker {
        let pool = workers();
        Unpacker {
            limit,
            inline: Decoder::new(limit),
            pool,
            inflight: VecDeque::new(),
            free: Vec::new(),
            depth: pool.map_or(1, |p| p.threads + 1),
            stats: CompressStats::new(mode),
        }
    }

    /// One opened chunk: a zstd chunk goes to the pool (or is decoded here
    /// without one), a stored one is written at once after the chunks before
    /// it; the oldest chunks are written while more than the pool's depth are
    /// in flight.
    pub(crate) fn push(&mut self, chunk: &[u8], emit: &mut Emit<'_>) -> Result<(), UnpackError> {
        let zstd = chunk.last() == Some(&KIND_ZSTD);
        let Some(pool) = self.pool.filter(|_| zstd) else {
            self.flush(emit)?;
            let stored = chunk.last() == Some(&KIND_STORED);
            let plain = self.inline.decode(chunk).map_err(UnpackError::Chunk)?;
            self.stats.received(plain.len(), chunk.len(), stored);
            return emit(plain).map_err(UnpackError::Output);
        };
        // At most `depth` chunks on the pool, this one included.
        while self.inflight.len() >= self.depth {
            self.write_oldest(emit)?;
        }
        let mut job = self.free.pop().unwrap_or_else(|| Job {
            wire: Vec::new(),
            decoder: Decoder::new(self.limit),
            result: Ok(0),
        });
        job.wire.clear();
        job.wire.extend_from_slice(chunk);
        self.inflight.push_back(pool.submit(job, Job::run));
        Ok(())
    }

    /// Writes every chunk in flight, in order.
    pub(crate) fn flush(&mut self, emit: &mut Emit<'_>) -> Result<(), UnpackError> {
        while !self.inflight.is_empty() {
            self.write_oldest(emit)?;
        }
        Ok(())
    }

    fn write_oldest(&mut self, emit: &mut Emit<'_>) -> Result<(), UnpackError> {
        let Some(rx) = self.inflight.pop_front() else {
            return Ok(());
        };
        let mut job = rx.recv().map_err(|_| {
            UnpackError::Output(TransportError::Io {
                context: "a decompression worker",
                source: std::io::Error::other("stopped"),
            })
        })?;
        let len = match std::mem::replace(&mut job.result, Ok(0)) {
            Ok(len) => len,
            Err(e) => return Err(UnpackError::Chunk(e)),
        };
        self.stats.received(len, job.wire.len(), false);
        let r = emit(job.decoder.decompressed(len));
        self.free.push(job);
        r.map_err(UnpackError::Output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdpipe_wire::compress::{Encoder, TRAILER_LEN};

    /// Chunks of 50 000 bytes: compressible ones (level 3) and, every third,
    /// random bytes that go stored.
    fn chunks(n: usize) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut enc = Encoder::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..n)
            .map(|i| {
                let raw: Vec<u8> = (0..50_000usize)
                    .map(|j| {
                        if i % 3 == 2 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x as u8
                        } else {
                            (j / 100 + i) as u8
                        }
                    })
                    .collect();
                let mut out = vec![0u8; raw.len() + TRAILER_LEN];
                let (len, _) = enc.pack(&raw, Some(3), &mut out);
                out.truncate(len);
                (raw, out)
            })
            .unzip()
    }

    #[test]
    fn chunks_come_out_in_order_whatever_the_pool_does() {
        let (raw, wire) = chunks(40);
        let mut u = Unpacker::new(Compress::Auto, 1 << 20);
        let mut got = Vec::new();
        let mut emit = |p: &[u8]| {
            got.push(p.to_vec());
            Ok(())
        };
        for (i, w) in wire.iter().enumerate() {
            u.push(w, &mut emit).unwrap();
            if i % 7 == 6 {
                u.flush(&mut emit).unwrap();
            }
        }
        u.flush(&mut emit).unwrap();
        assert_eq!(got, raw);
        assert_eq!(u.stats.chunks, 40);
        assert_eq!(u.stats.stored, 13);
    }

    #[test]
    fn a_corrupt_chunk_stops_after_every_chunk_before_it() {
        let (raw, mut wire) = chunks(12);
        // Chunk 4 is compressed: break its frame.
        assert_eq!(wire[4].last(), Some(&KIND_ZSTD));
        wire[4][6] ^= 0xff;
        wire[4][9] ^= 0xff;
        let mut u = Unpacker::new(Compress::Zstd(3), 1 << 20);
        let mut got = Vec::new();
        let mut emit = |p: &[u8]| {
            got.push(p.to_vec());
            Ok(())
        };
        let e = wire
            .iter()
            .try_for_each(|w| u.push(w, &mut emit))
            .and_then(|()| u.flush(&mut emit))
            .unwrap_err();
        assert!(matches!(e, UnpackError::Chunk(_)), "{e:?}");
        assert_eq!(got, raw[..4]);
    }
}
