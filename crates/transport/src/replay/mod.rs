//! A relay's bounded replay window: the most recent bytes of the stream it
//! read for the next hop of a fan-out chain, kept so that the chain can
//! re-link around that hop's host if it dies ([`crate::chain`]). The sink
//! after the dead one says how many bytes of the stream it already holds (its
//! resume offset, [`rdpipe_wire::resume`]); the relay resends from there when
//! that offset is still within its window ([`ReplayWindow::since`]) and
//! refuses otherwise, naming the window.
//!
//! [`Recorded`] wraps a sender's input (a relay's, or any reconnecting
//! hop's): every byte read from it (and so hashed into the outgoing stream's
//! MAC) is recorded, so the window's end is always the number of stream bytes
//! the sender has taken. A regular-file input is not copied: a resend reads
//! the file again. A pipe input is not copied either: the kernel links the
//! pipe's pages into the window's own pipes ([`pipes`]). An input that knows
//! where its bytes came from keeps its own window ([`Input::keep_window`]):
//! rdcp's packer keeps the batches it already allocated and, for the files it
//! handed over, only where in which file each stretch was read.
//!
//! Memory: at most the window's capacity per relay (rdpipe's
//! `--replay-window`, default 32 MiB), allocated as the
//! stream passes (a short stream costs only its length), plus one copy of the
//! bytes to resend while a re-link resends them. The window is ordinary
//! pageable memory, not registered for RDMA: it does not count against
//! `ulimit -l` (memlock).

mod pipes;

use pipes::PipeWindow;
use rdpipe_wire::resume::ResumeReply;
use rustix::event::{poll, PollFd, PollFlags};
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};

/// The requested offset has left the window (or was never sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfWindow {
    /// The offset asked for.
    pub offset: u64,
    /// The window's first byte.
    pub start: u64,
    /// The byte just past the last one taken.
    pub end: u64,
}

/// The last `capacity` bytes of a stream, by stream offset.
#[derive(Debug)]
pub struct ReplayWindow {
    cap: usize,
    /// `min(end, cap)` bytes; the byte at stream offset `o` (within the
    /// window) lives at `o % cap`.
    buf: Vec<u8>,
    /// Bytes pushed so far (the stream offset just past the newest byte).
    end: u64,
}

impl ReplayWindow {
    /// A window keeping the last `capacity` bytes (0: none, re-linking off).
    pub fn new(capacity: usize) -> ReplayWindow {
        ReplayWindow {
            cap: capacity,
            buf: Vec::new(),
            end: 0,
        }
    }

    /// The stream offsets it holds: `start..end`.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.end.saturating_sub(self.cap as u64)..self.end
    }

    /// Records bytes forwarded after everything pushed before.
    pub fn push(&mut self, data: &[u8]) {
        let new_end = self.end + data.len() as u64;
        if self.cap == 0 {
            self.end = new_end;
            return;
        }
        // Grow (zero-filled) to cover every position the new bytes land on.
        let want = new_end.min(self.cap as u64) as usize;
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        // Only the last `cap` bytes can stay; write them, wrapping at most once.
        let keep = data.len().min(self.cap);
        let mut data = &data[data.len() - keep..];
        let mut offset = new_end - keep as u64;
        while !data.is_empty() {
            let at = (offset % self.cap as u64) as usize;
            let n = data.len().min(self.cap - at);
            self.buf[at..at + n].copy_from_slice(&data[..n]);
            offset += n as u64;
            data = &data[n..];
        }
        self.end = new_end;
    }

    /// The bytes from stream offset `offset` to the end, as two slices (the
    /// second one empty unless they wrap), or why not.
    pub fn since(&self, offset: u64) -> Result<[&[u8]; 2], OutOfWindow> {
        let r = self.range();
        if !(r.start..=r.end).contains(&offset) {
            return Err(OutOfWindow {
                offset,
                start: r.start,
                end: r.end,
            });
        }
        if offset == self.end {
            return Ok([&[], &[]]);
        }
        let at = (offset % self.cap as u64) as usize;
        let head = (self.end % self.cap as u64) as usize;
        // Not yet full, `head` is the end of the bytes (`at` is before it).
        let head = if self.buf.len() < self.cap {
            self.buf.len()
        } else {
            head
        };
        Ok(if at < head {
            [&self.buf[at..head], &[]]
        } else {
            [&self.buf[at..], &self.buf[..head]]
        })
    }

    /// The relay's answer to a resume request for `offset`.
    pub fn answer(&self, offset: u64) -> ResumeReply {
        let r = self.range();
        ResumeReply::answer(offset, r.start, r.end)
    }
}

/// What a sender reads its stream from. Any reader with a descriptor is one
/// whose descriptor polls readable whenever a read would not wait (bytes
/// to give, the end, a failure): the transfer polls it for readiness
/// between reads, and a reconnecting hop waits on it beside its connection
/// ([`Recorded::watch`]). An input that can give back what it gave, without
/// a copy kept beside it, says so with [`Input::keep_window`].
pub trait Input: Read + AsFd {
    /// Asked once, before the first read, when the stream is to stay
    /// resendable for its last `capacity` bytes: true when the
    /// input keeps them itself and answers [`Input::window`] from then on.
    fn keep_window(&mut self, capacity: usize) -> bool {
        let _ = capacity;
        false
    }

    /// The window it keeps, after [`Input::keep_window`] said true.
    fn window(&mut self) -> Option<&mut dyn OwnWindow> {
        None
    }
}

/// The replay window an [`Input`] keeps itself: stream offsets count the
/// bytes its `read` gave since the first.
pub trait OwnWindow {
    /// The stream offsets it can give back (ending at the bytes read so far).
    fn range(&self) -> std::ops::Range<u64>;

    /// The bytes from stream offset `offset` to the end of what was read.
    fn since(&mut self, offset: u64) -> Result<Vec<u8>, Resend>;
}

impl Input for std::fs::File {}
impl Input for std::os::unix::net::UnixStream {}

impl<T: Input + ?Sized> Input for &mut T {
    fn keep_window(&mut self, capacity: usize) -> bool {
        (**self).keep_window(capacity)
    }

    fn window(&mut self) -> Option<&mut dyn OwnWindow> {
        (**self).window()
    }
}

impl<T: Input + ?Sized> Input for Box<T> {
    fn keep_window(&mut self, capacity: usize) -> bool {
        (**self).keep_window(capacity)
    }

    fn window(&mut self) -> Option<&mut dyn OwnWindow> {
        (**self).window()
    }
}

/// A sender's input that keeps what it read for a resend: every byte read
/// from it (and so hashed into the outgoing stream) is either copied into a
/// [`ReplayWindow`] or, when the input is a regular file, found again in the
/// file itself, so the kept range always ends at the number of stream bytes
/// the sender has taken.
pub struct Recorded<R> {
    inner: R,
    kept: Kept,
    /// The hop's connection, watched while a read waits for input
    /// ([`Recorded::watch`]).
    watch: Option<TcpStream>,
}

/// A [`Recorded`] input's read found the hop's connection hung up (reset,
/// timed out, shut down for a peer that came back) while the input had
/// nothing to give: the send loop stops waiting on its input and asks the
/// transport why ([`crate::ChunkSender::gone`]), so that an idle hop (a
/// command that prints nothing until it ends, like `zfs recv`) reconnects
/// when its connection is lost, not only once it has bytes to send.
#[derive(Debug, thiserror::Error)]
#[error("the connection ended while the input was idle")]
pub struct ConnectionEnded;

impl ConnectionEnded {
    /// Whether `e` is this (an input error made by [`Recorded`]'s watch).
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|i| i.is::<ConnectionEnded>())
    }
}

/// Where a [`Recorded`] input's bytes are kept.
enum Kept {
    /// A socket or terminal (or a pipe where pipes cannot hold the window):
    /// copied into the window as read.
    Copied(ReplayWindow),
    /// A pipe: its pages linked into the window's pipes (`tee`), no copy.
    Piped(PipeWindow),
    /// The input keeps them itself ([`Input::keep_window`]).
    Own,
    /// A regular file: read again from it (`pread`) for a resend, which costs
    /// nothing on the steady path and reaches back to the stream's start.
    /// `at` is the file offset of stream byte 0, `end` the bytes read so far.
    File {
        file: std::fs::File,
        at: u64,
        end: u64,
    },
}

impl<R: Input> Recorded<R> {
    /// Records `inner`, keeping up to `capacity` bytes; an input that keeps
    /// its own window keeps them, a regular file (with a non-zero `capacity`)
    /// keeps its bytes where they are, a pipe keeps them in pipes.
    pub fn new(mut inner: R, capacity: usize) -> Self {
        if capacity > 0 && inner.keep_window(capacity) {
            return Recorded {
                inner,
                kept: Kept::Own,
                watch: None,
            };
        }
        let kept = match Self::file_of(&inner) {
            Some((file, at)) if capacity > 0 => Kept::File { file, at, end: 0 },
            _ if capacity > 0 && Self::is_pipe(&inner) => match PipeWindow::new(capacity) {
                Ok(w) => Kept::Piped(w),
                Err(e) => {
                    tracing::debug!("the replay window copies the input pipe: {e}");
                    Kept::Copied(ReplayWindow::new(capacity))
                }
            },
            _ => Kept::Copied(ReplayWindow::new(capacity)),
        };
        Recorded {
            inner,
            kept,
            watch: None,
        }
    }

    /// From now on a read that has to wait for input also watches `conn`
    /// (a handle on the hop's connection; `None`: stop watching) and fails
    /// with [`ConnectionEnded`] once it hangs up first. Only hang-ups wake
    /// it: the peer's messages on the connection are the transport's.
    pub fn watch(&mut self, conn: Option<TcpStream>) {
        self.watch = conn;
    }

    fn is_pipe(inner: &R) -> bool {
        rustix::fs::fstat(inner.as_fd()).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo
        })
    }

    /// A second handle on `inner` and its current offset when it is a
    /// regular file.
    fn file_of(inner: &R) -> Option<(std::fs::File, u64)> {
        let fd = inner.as_fd();
        let st = rustix::fs::fstat(fd).ok()?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return None;
        }
        let at = rustix::fs::seek(fd, rustix::fs::SeekFrom::Current(0)).ok()?;
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        Some((file, at))
    }
}

impl<R: Input> Recorded<R> {
    /// The input's own window (present: [`Kept::Own`] is only chosen when
    /// the input said it keeps one).
    fn own(inner: &mut R) -> &mut dyn OwnWindow {
        inner
            .window()
            .expect("an input that keeps its window gives it")
    }

    /// The stream offsets that can be resent.
    pub fn range(&mut self) -> std::ops::Range<u64> {
        match &self.kept {
            Kept::Own => Self::own(&mut self.inner).range(),
            Kept::Copied(w) => w.range(),
            Kept::Piped(w) => w.range(),
            Kept::File { end, .. } => 0..*end,
        }
    }

    /// The answer to a request to resume at `offset`.
    pub fn answer(&mut self, offset: u64) -> ResumeReply {
        let r = self.range();
        ResumeReply::answer(offset, r.start, r.end)
    }

    /// For a request to resume at `offset`: the answer to send, and the
    /// bytes to resend after it. The bytes are gathered first, so that a
    /// window that cannot give them back (a file that changed since it was
    /// read) fails the sender here, with its reason, before the peer is told
    /// to expect them; an offset outside the window is answered as such (the
    /// peer fails naming the window) and is then the sender's error too.
    #[allow(clippy::type_complexity)]
    pub fn resume_at(
        &mut self,
        offset: u64,
    ) -> Result<(ResumeReply, Result<Vec<u8>, Resend>), Resend> {
        let reply = self.answer(offset);
        match self.since(offset) {
            Err(e @ (Resend::File(_) | Resend::Window(_))) => Err(e),
            bytes => Ok((reply, bytes)),
        }
    }

    /// The bytes from stream offset `offset` to what was read so far.
    pub fn since(&mut self, offset: u64) -> Result<Vec<u8>, Resend> {
        match &mut self.kept {
            Kept::Own => Self::own(&mut self.inner).since(offset),
            Kept::Copied(w) => w
                .since(offset)
                .map(|[a, b]| [a, b].concat())
                .map_err(Resend::OutOfWindow),
            Kept::Piped(w) => w
                .since(offset)
                .map_err(Resend::Window)?
                .map_err(Resend::OutOfWindow),
            Kept::File { file, at, end } => {
                let (at, end) = (*at, *end);
                if offset > end {
                    return Err(Resend::OutOfWindow(OutOfWindow {
                        offset,
                        start: 0,
                        end,
                    }));
                }
                let mut b = vec![0u8; (end - offset) as usize];
                std::os::unix::fs::FileExt::read_exact_at(file, &mut b, at + offset)
                    .map_err(Resend::File)?;
                Ok(b)
            }
        }
    }
}

/// Why [`Recorded::since`] (or an [`OwnWindow`]) cannot give the bytes to
/// resend.
#[derive(Debug)]
pub enum Resend {
    /// The offset is outside what is kept.
    OutOfWindow(OutOfWindow),
    /// The input file no longer holds them (it shrank while being sent).
    File(io::Error),
    /// The window's pipes could not be read back.
    Window(io::Error),
}

impl Resend {
    /// As the hop's error.
    pub fn into_error(self) -> crate::TransportError {
        match self {
            Resend::OutOfWindow(o) => crate::TransportError::BeyondWindow {
                offset: o.offset,
                start: o.start,
                end: o.end,
            },
            Resend::File(e) => crate::TransportError::Input(io::Error::new(
                e.kind(),
                format!("cannot read the input file again to resend it: {e} (did it shrink while being sent?)"),
            )),
            Resend::Window(e) => crate::TransportError::Io {
                context: "reading the replay window back",
                source: e,
            },
        }
    }
}

/// Waits until `input` is readable (bytes, its end, a failure) or, with a
/// `watch`, until that connection hangs up first ([`ConnectionEnded`]).
pub(crate) fn wait_readable(input: BorrowedFd<'_>, watch: Option<&TcpStream>) -> io::Result<()> {
    let watched = watch.map(AsFd::as_fd);
    loop {
        // HUP and ERR are always reported; the second entry is polled only
        // with a watch.
        let mut fds = [
            PollFd::from_borrowed_fd(input, PollFlags::IN),
            PollFd::from_borrowed_fd(watched.unwrap_or(input), PollFlags::RDHUP),
        ];
        let n = if watched.is_some() { 2 } else { 1 };
        match poll(&mut fds[..n], -1) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if !fds[0].revents().is_empty() {
            return Ok(());
        }
        if n == 2 && !fds[1].revents().is_empty() {
            return Err(io::Error::other(ConnectionEnded));
        }
    }
}

impl<R: Read + AsFd> Read for Recorded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let watch = self.watch.as_ref();
        let n = match &mut self.kept {
            // It waits (watched) only where its input is empty: no system
            // call more on a busy pipe.
            Kept::Piped(w) => return w.read(&mut self.inner, buf, watch),
            // A regular file never keeps a read waiting; rdcp's packer is
            // busy reading files (and its descriptor is always readable).
            Kept::File { .. } | Kept::Own => self.inner.read(buf)?,
            Kept::Copied(_) => {
                if watch.is_some() {
                    wait_readable(self.inner.as_fd(), watch)?;
                }
                self.inner.read(buf)?
            }
        };
        match &mut self.kept {
            Kept::Own => {}
            Kept::Copied(w) => w.push(&buf[..n]),
            Kept::Piped(_) => unreachable!("read above"),
            Kept::File { end, .. } => *end += n as u64,
        }
        Ok(n)
    }
}

impl<R: AsFd> AsFd for Recorded<R> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdpipe_wire::ResumeVerdict;

    /// The stream's bytes `from..to` as the window gives them back.
    fn replay(w: &ReplayWindow, from: u64) -> Vec<u8> {
        w.since(from).unwrap().concat()
    }

    fn stream(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn it_gives_back_any_suffix_within_the_window_in_any_chunking() {
        let s = stream(1000);
        for cap in [1, 7, 64, 100, 999, 1000, 4096] {
            for chunk in [1, 3, 64, 250, 1000] {
                let mut w = ReplayWindow::new(cap);
                for c in s.chunks(chunk) {
                    w.push(c);
                }
                let r = w.range();
                assert_eq!(r.end, 1000);
                assert_eq!(r.start, 1000u64.saturating_sub(cap as u64));
                for from in [r.start, r.start + (r.end - r.start) / 2, r.end] {
                    assert_eq!(
                        replay(&w, from),
                        s[from as usize..],
                        "cap {cap} chunk {chunk} from {from}"
                    );
                }
                assert!(w.since(r.end + 1).is_err());
            }
        }
    }

    #[test]
    fn an_offset_before_the_window_is_refused_with_the_window() {
        let mut w = ReplayWindow::new(100);
        w.push(&stream(350));
        assert_eq!(
            w.since(249),
            Err(OutOfWindow {
                offset: 249,
                start: 250,
                end: 350
            })
        );
        assert_eq!(w.answer(249).verdict, ResumeVerdict::BeyondWindow);
        assert_eq!(w.answer(250).verdict, ResumeVerdict::Resume);
    }

    #[test]
    fn a_recorded_socket_keeps_what_was_read() {
        let s = stream(5000);
        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        let writer = {
            let s = s.clone();
            let mut w = w;
            std::thread::spawn(move || std::io::Write::write_all(&mut w, &s).unwrap())
        };
        let mut rec = Recorded::new(r, 1000);
        let mut got = Vec::new();
        rec.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(got, s);
        assert_eq!(rec.range(), 4000..5000);
        assert_eq!(rec.since(4500).unwrap(), s[4500..]);
        assert!(matches!(rec.since(3999), Err(Resend::OutOfWindow(_))));
    }

    #[test]
    fn a_recorded_file_resends_from_the_file_from_any_offset() {
        let s = stream(5000);
        let path = std::env::temp_dir().join(format!("rdpipe-replay-{}", std::process::id()));
        std::fs::write(&path, &s).unwrap();
        let mut f = std::fs::File::open(&path).unwrap();
        // Stream byte 0 is file offset 100.
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(100)).unwrap();
        let mut rec = Recorded::new(f, 10);
        let mut got = vec![0u8; 3000];
        rec.read_exact(&mut got).unwrap();
        assert_eq!(got, s[100..3100]);
        assert_eq!(rec.range(), 0..3000);
        assert_eq!(rec.since(0).unwrap(), s[100..3100]);
        assert_eq!(rec.since(2500).unwrap(), s[2600..3100]);
        assert!(matches!(rec.since(3001), Err(Resend::OutOfWindow(_))));
        // A file that shrank cannot be resent from.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1000)
            .unwrap();
        assert!(matches!(rec.since(0), Err(Resend::File(_))));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn memory_grows_with_the_stream_up_to_the_capacity() {
        let mut w = ReplayWindow::new(32 << 20);
        w.push(&stream(10));
        assert_eq!(w.buf.len(), 10);
        assert_eq!(replay(&w, 0), stream(10));
        let mut off = ReplayWindow::new(0);
        off.push(&stream(10));
        assert_eq!(off.range(), 10..10);
        assert_eq!(off.since(10).unwrap().concat(), Vec::<u8>::new());
        assert!(off.since(9).is_err());
    }
}
