//! The send and receive loops, the same for every transport: they own the
//! end-to-end byte count, checksum and stream MAC, `--encrypt`'s sealing and
//! opening of each chunk (in the transport's own buffer: the registered slot on
//! RDMA), the tags of End and Done, and they turn a transport's "connection lost"
//! into the user-facing "stream truncated after N bytes".
//!
//! The receiver declares a stream good (flushes its output, which publishes an
//! output file, and sends Done) only when the byte count, the checksum and the
//! End tag (over the MAC it computed itself) all match; the sender exits 0 only
//! when Done's tag proves the receiver verified exactly what it sent.

use crate::compress::{CompressStats, Packer, Source};
use crate::error::GoneCause;
use crate::pace::{piece, Pacer};
use crate::replay::ConnectionEnded;
use crate::unpack::{UnpackError, Unpacker};
use crate::Rate;
use crate::{ChunkReceiver, ChunkSender, Received, TransportError};
use rdpipe_wire::seal::{plain_room, Opener, Sealer};
use rdpipe_wire::session::EndOf;
use rdpipe_wire::{Compress, Integrity, SessionKeys, StreamEnd, StreamHasher};
use rustix::event::{poll, PollFd, PollFlags};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::time::Instant;

/// Progress callback: total bytes so far.
pub type Progress<'a> = &'a mut dyn FnMut(u64);

/// Reads into `buf` until it is full, input ends, fails, or no more input is ready
/// right now. A failure after some bytes returns those bytes; the next call fails.
/// Waiting only for the first byte keeps latency low for interactive or slow
/// producers (a pipe delivers 64 KiB at a time) while a fast producer still fills
/// whole chunks.
pub fn fill_available<R: Read + AsFd>(input: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        if n > 0 {
            let mut fds = [PollFd::new(input, PollFlags::IN)];
            match poll(&mut fds, 0) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The bytes already read go out first; the error comes back on the
            // next read (an input that fails at end of file, like an agent's
            // command output whose command failed, fails again there). Dropping
            // them would lose the last output of a command (`head -c 1000`)
            // whose end of file and failure arrive together.
            Err(_) if n > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The pipe size asked for on the sender's input and the receiver's output when
/// they are pipes: the default 64 KiB means a wake-up and a system call per 64 KiB
/// on each side of the pipe; 1 MiB (the largest an unprivileged process may set,
/// by default) lets one call move a whole buffer.
pub const PIPE_SIZE: usize = 1 << 20;

/// Grows `fd`'s pipe buffer to [`PIPE_SIZE`] if it is a smaller pipe; anything
/// else (a file, a terminal, a socket, a refusal) is left as it is.
pub fn grow_pipe<F: AsFd>(fd: &F) {
    if let Ok(size) = rustix::pipe::fcntl_getpipe_size(fd) {
        if size < PIPE_SIZE {
            let _ = rustix::pipe::fcntl_setpipe_size(fd, PIPE_SIZE);
        }
    }
}

/// Declares a regular-file input as read once from start to end
/// (`POSIX_FADV_SEQUENTIAL`), which doubles the kernel's read-ahead window for
/// it; anything else (a pipe, a socket, a terminal, a refusal) is left as it is.
///
/// The fill itself stays one large `read` straight into the page-aligned slot:
/// measured against `mmap` + copy and `O_DIRECT` (docs/performance.md, "Reading
/// a regular file"), a cold file on a virtio disk read at 2.4 GB/s without the
/// advice and 3.5 GB/s with it, as fast as `mmap` and 5× `O_DIRECT`'s one
/// synchronous request at a time; a page-cached one costs the same either way.
pub fn advise_sequential<F: AsFd>(fd: &F) {
    if rustix::fs::fstat(fd).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
    }) {
        let _ = rustix::fs::fadvise(fd, 0, 0, rustix::fs::Advice::Sequential);
    }
}

/// What a finished loop reports.
#[derive(Debug, Clone, Copy)]
pub struct Totals {
    /// Bytes moved.
    pub bytes: u64,
    /// Their xxh3-64.
    pub checksum: u64,
    /// What compression did, if the stream was compressed.
    pub compress: Option<CompressStats>,
}

/// How a stream is protected: the negotiated mode and the session's keys.
#[derive(Clone, Copy)]
pub struct Protection<'a> {
    /// The mode both ends use.
    pub integrity: Integrity,
    /// The session's keys.
    pub keys: &'a SessionKeys,
    /// The compression both ends use.
    pub compress: Compress,
    /// The most bytes a chunk holds (the negotiated chunk size, or a
    /// compressed stream's larger TCP frame): no chunk decompresses to more.
    pub chunk_size: usize,
    /// The peer, for messages.
    pub peer: &'a str,
}

impl Protection<'_> {
    /// A fresh stream hasher for this protection (keyed with the session's
    /// stream-MAC key under `--integrity mac`).
    pub fn hasher(&self) -> StreamHasher {
        match self.integrity {
            Integrity::Mac => StreamHasher::keyed(&self.keys.stream_mac),
            // Checksum: no MAC; Encrypt: every chunk is authenticated already.
            Integrity::Checksum | Integrity::Encrypt => StreamHasher::new(),
        }
    }

    /// The sealer under `--encrypt`. A compressed stream's chunks are sealed
    /// (and opened, [`Protection::opener`]) on the calling thread: the
    /// compression pool already spreads its work over the cores, and the seal
    /// pool's workers, woken for each chunk's pieces, spin between chunks (1
    /// MiB chunks of random bytes under `auto`, two cores: 0.1 CPU s/GB more
    /// for the receiver).
    fn sealer(&self) -> Option<Sealer> {
        let s = (self.integrity == Integrity::Encrypt).then(|| Sealer::new(&self.keys.aead))?;
        Some(if self.compress.is_on() {
            s.single_threaded()
        } else {
            s
        })
    }

    /// The opener under `--encrypt` (see [`Protection::sealer`]).
    fn opener(&self) -> Option<Opener> {
        let o = (self.integrity == Integrity::Encrypt).then(|| Opener::new(&self.keys.aead))?;
        Some(if self.compress.is_on() {
            o.single_threaded()
        } else {
            o
        })
    }
}

/// Sends all of `input`, then end of stream, and waits for the receiver's
/// confirmation. A pipe on the input is grown to [`PIPE_SIZE`] first, a regular
/// file is declared sequential ([`advise_sequential`]). With a
/// `rate_limit`, each chunk read waits for its budget before it goes on the wire
/// ([`Pacer`], its bucket sized by the transport's buffer: the RDMA slot, or the
/// TCP frame). On any failure the receiver is told (abort), so it never mistakes a
/// partial stream for a whole one.
pub fn send_stream<R: Read + AsFd>(
    input: &mut R,
    tx: &mut dyn ChunkSender,
    prot: Protection<'_>,
    rate_limit: Option<Rate>,
    progress: Progress<'_>,
) -> Result<Totals, TransportError> {
    let mut hasher = prot.hasher();
    send_stream_with(input, tx, prot, &mut hasher, &[], rate_limit, progress)
}

/// [`send_stream`] with the caller's `hasher`, which may already hold the
/// stream's first bytes (a re-linked chain hop, [`crate::chain`]): End then
/// covers the whole stream. `replay` goes out first, neither read from `input`
/// nor hashed again (those bytes were hashed when first read), then the rest of
/// `input`. On failure `hasher` holds every byte read from `input` so far.
pub fn send_stream_with<R: Read + AsFd>(
    input: &mut R,
    tx: &mut dyn ChunkSender,
    prot: Protection<'_>,
    hasher: &mut StreamHasher,
    replay: &[u8],
    rate_limit: Option<Rate>,
    progress: Progress<'_>,
) -> Result<Totals, TransportError> {
    let mut replay = replay;
    let mut pacer: Option<Pacer> = None;
    let mut sealer = prot.sealer();
    let mut packer = prot.compress.is_on().then(|| {
        Packer::new(prot.compress, rate_limit.map(|r| r.get().get())).plain_chunk(tx.plain_chunk())
    });
    grow_pipe(input);
    advise_sequential(input);
    loop {
        let r = tx.send_chunk(&mut |buf| {
            // Under --encrypt the tags go after the data, in the same buffer
            // (one per 256 KiB piece: rdpipe_wire::seal).
            let room = match sealer {
                Some(_) => plain_room(buf.len()),
                None => buf.len(),
            };
            // Paced: at most 50 ms of the rate at a time (smooth at low rates).
            let room = rate_limit.map_or(room, |r| piece(r, room));
            // Compressed: `n` is the chunk on the wire (paced as such).
            let n = if let Some(p) = &mut packer {
                let mut src = StreamSource {
                    input: &mut *input,
                    hasher: &mut *hasher,
                    replay: &mut replay,
                };
                p.next(&mut buf[..room], &mut src)?
            } else if replay.is_empty() {
                let n = fill_available(input, &mut buf[..room])?;
                hasher.update(&buf[..n]);
                n
            } else {
                let n = room.min(replay.len());
                buf[..n].copy_from_slice(&replay[..n]);
                replay = &replay[n..];
                n
            };
            if let (Some(r), 1..) = (rate_limit, n) {
                pacer.get_or_insert_with(|| Pacer::new(r, room)).pace(n);
            }
            Ok(match (&mut sealer, n) {
                (Some(s), 1..) => match &mut packer {
                    Some(p) => {
                        let t = Instant::now();
                        let sealed = s.seal(buf, n);
                        p.worked(t.elapsed());
                        sealed
                    }
                    None => s.seal(buf, n),
                },
                _ => n,
            })
        });
        match r {
            Ok(0) => break,
            Ok(_) => progress(hasher.bytes()),
            // The connection hung up while the input was idle: no Abort (it
            // would go nowhere), the transport says what ended it.
            Err(TransportError::Input(e)) if ConnectionEnded::is(&e) => return Err(tx.gone()),
            Err(e @ TransportError::Input(_)) => {
                tx.abort(&format!(
                    "sender's input failed after {} bytes: {e}",
                    hasher.bytes()
                ));
                return Err(e);
            }
            Err(e) => return Err(e),
        }
    }
    let t = end_stream(tx, prot, hasher)?;
    if let Some(p) = &packer {
        let st = &p.stats;
        let by_level: Vec<String> = (st.levels.iter().enumerate())
            .filter(|(_, n)| **n > 0)
            .map(|(l, n)| format!("{l}:{n}"))
            .collect();
        tracing::debug!(
            "compressed {} bytes to {} ({:.2}x), {} of {} chunks stored, chunks by level [{}], \
             level now {:?}",
            st.raw,
            st.wire,
            st.ratio(),
            st.stored,
            st.chunks,
            by_level.join(" "),
            p.level_now()
        );
    }
    Ok(Totals {
        compress: packer.map(|p| p.stats),
        ..t
    })
}

/// The send loop's input for a [`Packer`]: the replay first, then the input,
/// hashed as it is read.
struct StreamSource<'a, 'r, R> {
    input: &'a mut R,
    hasher: &'a mut StreamHasher,
    replay: &'a mut &'r [u8],
}

impl<R: Read + AsFd> Source for StreamSource<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.replay.is_empty() {
            let n = fill_available(self.input, buf)?;
            self.hasher.update(&buf[..n]);
            Ok(n)
        } else {
            let n = buf.len().min(self.replay.len());
            buf[..n].copy_from_slice(&self.replay[..n]);
            *self.replay = &self.replay[n..];
            Ok(n)
        }
    }

    fn ready(&mut self) -> bool {
        if !self.replay.is_empty() {
            return true;
        }
        let mut fds = [PollFd::new(&*self.input, PollFlags::IN)];
        matches!(poll(&mut fds, 0), Ok(1..))
    }
}

/// Sends End for what `hasher` saw and checks the receiver's Done against it.
pub(crate) fn end_stream(
    tx: &mut dyn ChunkSender,
    prot: Protection<'_>,
    hasher: &StreamHasher,
) -> Result<Totals, TransportError> {
    let (bytes, checksum, mac) = (hasher.bytes(), hasher.digest(), hasher.mac());
    let end = StreamEnd {
        bytes,
        checksum,
        tag: prot.keys.end_tag(EndOf::Sender, bytes, checksum, &mac),
    };
    let done = tx.finish(&end)?;
    // Done must be the receiver's, over exactly what we sent.
    if !prot
        .keys
        .verify_end(EndOf::Receiver, bytes, checksum, &mac, &done.tag)
    {
        return Err(if done.bytes != bytes {
            TransportError::LengthMismatch {
                sent: bytes,
                received: done.bytes,
            }
        } else if done.checksum != checksum {
            TransportError::ChecksumMismatch {
                bytes,
                sent: checksum,
                received: done.checksum,
            }
        } else {
            TransportError::Tampered {
                what: "the receiver's confirmation",
                bytes,
            }
        });
    }
    Ok(Totals {
        bytes,
        checksum,
        compress: None,
    })
}

/// Receives the stream into `output`, verifies byte count, checksum and the End
/// tag, flushes, and only then confirms. Anything short of that is an error: a
/// plain EOF is reported as truncation.
pub fn recv_stream<W: Write>(
    rx: &mut dyn ChunkReceiver,
    output: &mut W,
    prot: Protection<'_>,
    progress: Progress<'_>,
) -> Result<Totals, TransportError> {
    let mut hasher = prot.hasher();
    recv_stream_with(rx, output, prot, &mut hasher, progress)
}

/// [`recv_stream`] with the caller's `hasher`, which may already hold the
/// stream's first bytes (a re-linked chain hop, [`crate::chain`]): End must
/// then cover the whole stream. After a [`TransportError::Truncated`],
/// `hasher` holds exactly the bytes written to `output`.
pub fn recv_stream_with<W: Write>(
    rx: &mut dyn ChunkReceiver,
    output: &mut W,
    prot: Protection<'_>,
    hasher: &mut StreamHasher,
    progress: Progress<'_>,
) -> Result<Totals, TransportError> {
    let mut opener = prot.opener();
    let mut unpacker = prot
        .compress
        .is_on()
        .then(|| Unpacker::new(prot.compress, prot.chunk_size));
    // What a decoder refused after every chunk before it was written.
    let bad = |hasher: &StreamHasher, e: UnpackError| match e {
        UnpackError::Chunk(source) => TransportError::BadChunk {
            peer: prot.peer.to_string(),
            bytes: hasher.bytes(),
            source,
        },
        UnpackError::Output(e) => e,
    };
    loop {
        // Set when the error comes from this side (a chunk refused, the
        // output), not from the transport.
        let mut refused = false;
        let r = rx.recv_chunk(&mut |data| {
            refused = true;
            let n = match &mut opener {
                Some(o) => o.open(data).map_err(|_| TransportError::Tampered {
                    what: "an encrypted chunk",
                    bytes: hasher.bytes(),
                })?,
                None => data.len(),
            };
            // Opened (verified, under --encrypt) first, then decompressed:
            // nothing is written from a chunk the decoder refuses.
            match &mut unpacker {
                Some(u) => u
                    .push(&data[..n], &mut |plain| write_out(hasher, output, plain))
                    .map_err(|e| bad(hasher, e)),
                None => write_out(hasher, output, &data[..n]),
            }
            .inspect(|()| refused = false)
        });
        // Chunks still on the decompression pool are written out before the
        // next wait for the network, before End is checked, and when the
        // transport fails (they arrived whole: a resumed hop goes on after
        // them, as it would without the pool).
        let flush_now = |rx: &mut dyn ChunkReceiver| match &r {
            Ok(Received::End(_)) | Err(_) => !refused,
            Ok(Received::Chunk(_)) => !rx.more_ready(),
        };
        let r = match &mut unpacker {
            Some(u) if flush_now(rx) => u
                .flush(&mut |plain| write_out(hasher, output, plain))
                .map_err(|e| bad(hasher, e))
                .and(r),
            _ => r,
        };
        match r {
            Ok(Received::Chunk(_)) => progress(hasher.bytes()),
            Ok(Received::End(end)) => {
                let t = accept_end(rx, output, prot, hasher, &end)?;
                return Ok(Totals {
                    compress: unpacker.map(|u| u.stats),
                    ..t
                });
            }
            Err(e) => return Err(receive_failed(rx, hasher.bytes(), e)),
        }
    }
}

/// Hashes and writes out the stream's next bytes.
fn write_out<W: Write>(
    hasher: &mut StreamHasher,
    output: &mut W,
    plain: &[u8],
) -> Result<(), TransportError> {
    hasher.update(plain);
    output.write_all(plain).map_err(TransportError::Output)
}

/// The sender's End against what `hasher` saw: on a match, flushes `output` and
/// confirms (Done); otherwise tells the sender why and fails.
pub(crate) fn accept_end(
    rx: &mut dyn ChunkReceiver,
    output: &mut dyn Write,
    prot: Protection<'_>,
    hasher: &StreamHasher,
    end: &StreamEnd,
) -> Result<Totals, TransportError> {
    let got = Totals {
        bytes: hasher.bytes(),
        checksum: hasher.digest(),
        compress: None,
    };
    let mac = hasher.mac();
    let bad = if end.bytes != got.bytes {
        Some(TransportError::LengthMismatch {
            sent: end.bytes,
            received: got.bytes,
        })
    } else if end.checksum != got.checksum {
        Some(TransportError::ChecksumMismatch {
            bytes: end.bytes,
            sent: end.checksum,
            received: got.checksum,
        })
    } else if !prot
        .keys
        .verify_end(EndOf::Sender, got.bytes, got.checksum, &mac, &end.tag)
    {
        Some(TransportError::Tampered {
            what: "the stream",
            bytes: got.bytes,
        })
    } else {
        None
    };
    if let Some(e) = bad {
        rx.abort(&format!("receiver rejected the stream: {e}"));
        return Err(e);
    }
    if let Err(e) = output.flush() {
        let e = TransportError::Output(e);
        rx.abort(&format!("receiver's {e}"));
        return Err(e);
    }
    let done = StreamEnd {
        bytes: got.bytes,
        checksum: got.checksum,
        tag: prot
            .keys
            .end_tag(EndOf::Receiver, got.bytes, got.checksum, &mac),
    };
    rx.confirm(&done)?;
    Ok(got)
}

/// What a receive loop's failure after `bytes` bytes means for the user (a
/// lost peer: a truncated stream), with the sender told where it still can be.
pub(crate) fn receive_failed(
    rx: &mut dyn ChunkReceiver,
    bytes: u64,
    e: TransportError,
) -> TransportError {
    match e {
        TransportError::Output(e) => {
            let what = if e.kind() == io::ErrorKind::BrokenPipe {
                "receiver's output was closed (broken pipe)".to_string()
            } else {
                format!("receiver cannot write its output: {e}")
            };
            rx.abort(&format!("{what} after {bytes} bytes"));
            TransportError::Output(e)
        }
        e @ (TransportError::Tampered { .. } | TransportError::BadChunk { .. }) => {
            rx.abort(&format!("receiver rejected the stream: {e}"));
            e
        }
        TransportError::PeerGone { cause, .. } => TransportError::Truncated { bytes, cause },
        TransportError::Rdma(e) => TransportError::Truncated {
            bytes,
            cause: GoneCause::Rdma(e),
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe whose end of file is an error (as an agent's command output is
    /// when the command failed).
    struct FailsAtEof(std::fs::File);

    impl Read for FailsAtEof {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(io::Error::other("the command failed")),
                n => Ok(n),
            }
        }
    }

    impl AsFd for FailsAtEof {
        fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.0.as_fd()
        }
    }

    #[test]
    fn bytes_before_a_failure_at_end_of_file_are_returned_first() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut w = std::fs::File::from(w);
        w.write_all(&[7u8; 1000]).unwrap();
        drop(w);
        let mut input = FailsAtEof(std::fs::File::from(r));
        let mut buf = vec![0u8; 4096];
        assert_eq!(fill_available(&mut input, &mut buf).unwrap(), 1000);
        assert!(buf[..1000].iter().all(|&b| b == 7));
        assert!(fill_available(&mut input, &mut buf).is_err());
    }

    #[test]
    fn input_pipe_grows_and_never_shrinks() {
        let (r, _w) = rustix::pipe::pipe().unwrap();
        let before = rustix::pipe::fcntl_getpipe_size(&r).unwrap();
        grow_pipe(&r);
        let after = rustix::pipe::fcntl_getpipe_size(&r).unwrap();
        // The kernel may refuse (per-user pipe limits): then nothing changed.
        assert!(after == before || after >= PIPE_SIZE, "{before} -> {after}");
        grow_pipe(&r);
        assert_eq!(rustix::pipe::fcntl_getpipe_size(&r).unwrap(), after);
        // Not a pipe: left alone, no error.
        let f = std::fs::File::open("/dev/null").unwrap();
        grow_pipe(&f);
    }
}
