//! A pipe input's replay window held in pipes, not copied: each read from the
//! input pipe first duplicates the bytes waiting there into the window with
//! `tee(2)` (the kernel links the same pages into a second pipe, no copy),
//! then reads them as usual. The window is a queue of pipes of 1 MiB each
//! (the largest an unprivileged process may ask for, by default); when the
//! newest is full a new one starts, and the oldest is closed once there are
//! enough to hold the window's capacity. A resend reads the window out and
//! writes it back (a reconnect is rare; the steady path is what must cost
//! nothing).
//!
//! A pipe holds pages: a tee of a few bytes takes a whole page slot of the
//! window. So at the start and after a small tee, each read first asks how
//! much is waiting (`FIONREAD`) and copies while that is small (`write` fills
//! pages), teeing again once 64 KiB or more wait: a writer that trickles does
//! not leave the window holding fewer bytes than its capacity, and a fast one
//! pays one `tee` per read and no copy.

use super::OutOfWindow;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::pipe::{fcntl_setpipe_size, pipe_with, tee, PipeFlags, SpliceFlags};
use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};

/// Bytes one window pipe holds at most, at full pages (a window smaller than
/// this uses pipes of its own size, rounded up to a power of two pages).
const PIPE_BYTES: usize = 1 << 20;

/// A tee smaller than this may leave partly filled pages in the window.
const SMALL: usize = 64 << 10;

/// One pipe of the window and the bytes in it.
struct Piece {
    r: OwnedFd,
    w: OwnedFd,
    bytes: usize,
}

impl Piece {
    fn new(size: usize) -> io::Result<Piece> {
        let (r, w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        fcntl_setpipe_size(&w, size)?;
        Ok(Piece { r, w, bytes: 0 })
    }

    /// Reads everything out (the pipe is left empty).
    fn drain(&mut self, into: &mut Vec<u8>) -> io::Result<()> {
        let at = into.len();
        into.resize(at + self.bytes, 0);
        let mut got = 0;
        while got < self.bytes {
            match rustix::io::read(&self.r, &mut into[at + got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if got != self.bytes {
            return Err(io::Error::other(format!(
                "the replay window's pipe held {got} bytes, not {}",
                self.bytes
            )));
        }
        Ok(())
    }

    /// Writes as much of `data` as fits; how much did.
    fn fill(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut put = 0;
        while put < data.len() {
            match rustix::io::write(&self.w, &data[put..]) {
                Ok(k) => put += k,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => return Err(e.into()),
            }
        }
        self.bytes += put;
        Ok(put)
    }
}

/// The last `capacity` (or somewhat more) bytes read from an input pipe, by
/// stream offset, held in pipes.
pub(crate) struct PipeWindow {
    pieces: VecDeque<Piece>,
    /// The size asked for each pipe.
    piece_size: usize,
    /// Pieces kept at most: enough that dropping the oldest still leaves
    /// the capacity.
    max_pieces: usize,
    /// The stream offset just past the newest byte.
    end: u64,
    /// Bytes held (in all pieces).
    held: u64,
    /// Ask how much is waiting before a tee (at the start, and after a
    /// small tee until a large amount waits again).
    check_small: bool,
}

impl PipeWindow {
    /// A window of at least `capacity` bytes, or why pipes cannot hold it
    /// (the caller then copies: [`super::ReplayWindow`]).
    pub(crate) fn new(capacity: usize) -> io::Result<PipeWindow> {
        let piece_size = capacity.next_power_of_two().clamp(4096, PIPE_BYTES);
        let mut pieces = VecDeque::new();
        pieces.push_back(Piece::new(piece_size)?);
        Ok(PipeWindow {
            pieces,
            piece_size,
            max_pieces: capacity.div_ceil(piece_size) + 1,
            end: 0,
            held: 0,
            check_small: true,
        })
    }

    /// The stream offsets it holds.
    pub(crate) fn range(&self) -> std::ops::Range<u64> {
        self.end - self.held..self.end
    }

    fn newest(&mut self) -> &mut Piece {
        self.pieces.back_mut().expect("a window has a piece")
    }

    /// Starts a new newest piece, closing the oldest when there are enough.
    fn rotate(&mut self) -> io::Result<()> {
        let piece = Piece::new(self.piece_size)?;
        if self.pieces.len() >= self.max_pieces {
            if let Some(old) = self.pieces.pop_front() {
                self.held -= old.bytes as u64;
            }
        }
        self.pieces.push_back(piece);
        Ok(())
    }

    /// Keeps a copy of `data` (read from the input without a tee).
    fn push_copy(&mut self, mut data: &[u8]) -> io::Result<()> {
        self.end += data.len() as u64;
        self.held += data.len() as u64;
        while !data.is_empty() {
            let put = self.newest().fill(data)?;
            data = &data[put..];
            if !data.is_empty() {
                self.rotate()?;
            }
        }
        Ok(())
    }

    /// A plain read, its bytes copied into the window.
    fn read_copying<R: Read>(&mut self, input: &mut R, buf: &mut [u8]) -> io::Result<usize> {
        let n = input.read(buf)?;
        self.push_copy(&buf[..n])?;
        Ok(n)
    }

    /// Reads from `input`, a pipe, into `buf`, keeping the bytes read;
    /// while it is empty, waits on it and on `watch` ([`super::wait_readable`]).
    pub(crate) fn read<R: Read + AsFd>(
        &mut self,
        input: &mut R,
        buf: &mut [u8],
        watch: Option<&TcpStream>,
    ) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.check_small {
            let waiting = rustix::io::ioctl_fionread(input.as_fd())?;
            if waiting < SMALL as u64 {
                if waiting == 0 && watch.is_some() {
                    super::wait_readable(input.as_fd(), watch)?;
                }
                return self.read_copying(input, buf);
            }
            self.check_small = false;
        }
        loop {
            let out = &self.pieces.back().expect("a window has a piece").w;
            match tee(input.as_fd(), out, buf.len(), SpliceFlags::NONBLOCK) {
                // End of input, or nothing linked: a plain read says which.
                Ok(0) => return self.read_copying(input, buf),
                Ok(n) => {
                    // The same bytes, now read (they wait in the input pipe).
                    input.read_exact(&mut buf[..n])?;
                    let piece = self.newest();
                    piece.bytes += n;
                    self.end += n as u64;
                    self.held += n as u64;
                    self.check_small = n < SMALL;
                    return Ok(n);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    // The input is empty (wait for it) or the newest piece is
                    // full (start another).
                    let mut fds = [PollFd::new(input, PollFlags::IN)];
                    let ready = matches!(poll(&mut fds, 0), Ok(1..));
                    if !ready {
                        super::wait_readable(input.as_fd(), watch)?;
                        continue;
                    }
                    if self.newest().bytes == 0 {
                        // Input waiting, an empty piece refusing it: not a
                        // case tee has; read plainly rather than spin.
                        return self.read_copying(input, buf);
                    }
                    self.rotate()?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The bytes from stream offset `offset` to the end. The pieces are read
    /// out and written back (a resend is rare).
    pub(crate) fn since(&mut self, offset: u64) -> io::Result<Result<Vec<u8>, OutOfWindow>> {
        let r = self.range();
        if !(r.start..=r.end).contains(&offset) {
            return Ok(Err(OutOfWindow {
                offset,
                start: r.start,
                end: r.end,
            }));
        }
        let mut all = Vec::with_capacity(self.held as usize);
        for p in self.pieces.iter_mut() {
            let at = all.len();
            p.drain(&mut all)?;
            p.bytes = 0;
            // Back as it was: it fits, pages filled at least as well as before.
            let put = p.fill(&all[at..])?;
            if put != all.len() - at {
                return Err(io::Error::other(
                    "the replay window's pipe took back fewer bytes than it held",
                ));
            }
        }
        Ok(Ok(all.split_off((offset - r.start) as usize)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Recorded, Resend};
    use super::PIPE_BYTES;
    use std::io::{Read, Write};

    fn stream(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    /// `s` written into a pipe in pieces of `piece` bytes (pausing after each
    /// when `pause`), read through a [`Recorded`] of `capacity`.
    fn through_pipe(
        s: &[u8],
        piece: usize,
        pause: bool,
        capacity: usize,
    ) -> (Vec<u8>, Recorded<std::fs::File>) {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut w = std::fs::File::from(w);
        let writer = {
            let s = s.to_vec();
            std::thread::spawn(move || {
                for c in s.chunks(piece) {
                    w.write_all(c).unwrap();
                    if pause {
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                }
            })
        };
        let mut rec = Recorded::new(std::fs::File::from(r), capacity);
        assert!(
            matches!(rec.kept, super::super::Kept::Piped(_)),
            "a pipe is kept in pipes"
        );
        let mut got = Vec::new();
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = rec.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        writer.join().unwrap();
        (got, rec)
    }

    #[test]
    fn a_piped_input_keeps_at_least_its_capacity_across_pipes() {
        let s = stream(5 * PIPE_BYTES + 12345);
        let cap = 2 * PIPE_BYTES + 100;
        let (got, mut rec) = through_pipe(&s, 128 << 10, false, cap);
        assert_eq!(got, s);
        let r = rec.range();
        assert_eq!(r.end, s.len() as u64);
        assert!(
            r.end - r.start >= cap as u64,
            "holds {:?}, capacity {cap}",
            r
        );
        assert!(
            r.end - r.start <= (cap + 2 * PIPE_BYTES) as u64,
            "holds {:?}",
            r
        );
        let from = s.len() as u64 - cap as u64;
        assert_eq!(rec.since(from).unwrap(), s[from as usize..]);
        // Read back twice: a resend leaves the window as it was.
        assert_eq!(rec.since(r.start).unwrap(), s[r.start as usize..]);
        assert_eq!(rec.since(r.end).unwrap(), Vec::<u8>::new());
        assert!(matches!(
            rec.since(r.start - 1),
            Err(Resend::OutOfWindow(_))
        ));
        assert!(matches!(rec.since(r.end + 1), Err(Resend::OutOfWindow(_))));
    }

    #[test]
    fn a_small_window_keeps_little_more_than_its_capacity() {
        let s = stream(300_000);
        let (got, mut rec) = through_pipe(&s, 64 << 10, false, 4096);
        assert_eq!(got, s);
        let r = rec.range();
        assert!((4096..=8192).contains(&(r.end - r.start)), "{r:?}");
        assert_eq!(rec.since(r.start).unwrap(), s[r.start as usize..]);
        assert!(matches!(
            rec.since(r.start - 1),
            Err(Resend::OutOfWindow(_))
        ));
    }

    #[test]
    fn a_trickling_writer_still_fills_the_window_to_its_capacity() {
        // Writes of 100 bytes, each read as it comes: tees of a page each
        // would hold 256 pages of 100 bytes per pipe; the copies after a
        // small tee fill the pages.
        let s = stream(300_000);
        let cap = 200_000;
        let (got, mut rec) = through_pipe(&s, 100, true, cap);
        assert_eq!(got, s);
        let r = rec.range();
        assert_eq!(r.start, 0, "all of it fits in one pipe: {r:?}");
        assert_eq!(rec.since(1000).unwrap(), s[1000..]);
    }

    #[test]
    fn a_piped_input_mixing_large_and_small_writes_comes_back_whole() {
        let mut all = stream(3 * PIPE_BYTES);
        all.extend(stream(777));
        for (piece, pause, len) in [
            (1, false, 50_000),
            (4095, false, all.len()),
            (70_000, true, all.len()),
            (1 << 20, false, all.len()),
        ] {
            let s = &all[..len];
            let (got, mut rec) = through_pipe(s, piece, pause, 4 * PIPE_BYTES);
            assert_eq!(got, s, "piece {piece}");
            assert_eq!(rec.range(), 0..s.len() as u64, "piece {piece}");
            assert_eq!(rec.since(0).unwrap(), s, "piece {piece}");
        }
    }
}
