//! The TCP transport: data frames on the authenticated connection.
//!
//! Sender: double buffering. The caller fills one buffer from its input (and
//! hashes it) while a writer thread puts the previous one on the socket. Buffers
//! travel between the two threads through a pair of channels, so no more than
//! `slots` of them exist at once (memory stays flat whatever the stream length).
//!
//! Receiver: no thread. The caller reads each frame's payload straight into one
//! buffer (a frame larger than the buffer in several pieces) and drains it; the
//! kernel's socket buffer is what overlaps the network with the output. Each
//! payload read also takes the next frame's header when it is already queued
//! ([`lookahead`]), so a data frame costs one read, not two.
//!
//! Buffers are at most [`TCP_BUF`] bytes whatever the negotiated chunk size, so
//! that the data is still in the CPU cache between the copy in, the checksum and
//! the copy out (see docs/performance.md for the measurements behind this layout);
//! a compressed stream's are larger ([`LARGE_COMPRESSED_TCP_BUF`], 4 MiB, where
//! both ends take it: [`buffer_size`]), as each is a chunk compressed on its own.
//!
//! Whether the sender writes each chunk on the caller's thread or hands it to
//! the writer thread is measured, not guessed: see `tcp/chooser.rs`
//! ([`SendMode`]).

mod chooser;
mod lookahead;

pub use chooser::{
    SendMode, KEEP_PHASES, MAX_KEEP_PHASES, PHASE_CHUNKS, PHASE_MIN, SEND_MODE_ENV, SETTLE_CHUNKS,
    SETTLE_MIN, THREADED_MARGIN,
};

use crate::buf::PageBuf;
use crate::error::GoneCause;
use crate::frame_io::{conn_error, read_control_payload, read_header, write_control, write_data};
use crate::{ChunkReceiver, ChunkSender, Received, TransportError};
use chooser::Chooser;
use lookahead::Lookahead;
use rdpipe_wire::{AbortReason, Control, FrameKind, StreamEnd, WireError};
use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{channel, sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The largest buffer (and data frame) the TCP transport uses; a larger negotiated
/// chunk size only bounds what the receiver accepts from the peer.
pub const TCP_BUF: usize = 256 << 10;

/// The largest buffer of a compressed stream's TCP transport where both ends
/// take 1 MiB frames but not 4 MiB ones ([`rdpipe_wire::Caps::WIDE_COMPRESSED`]).
pub const COMPRESSED_TCP_BUF: usize = 1 << 20;

/// The buffer of a compressed stream's TCP transport where both ends take it
/// ([`rdpipe_wire::Caps::LARGE_COMPRESSED`]) and the chunk size is
/// [`COMPRESSED_TCP_BUF`] or more: each buffer is one chunk compressed on
/// its own, and a larger chunk compresses better (192 MiB of a tar of
/// /usr/share, `zstd -b -B`: at level 3 2.20 × in 1 MiB pieces, 2.27 × in 4
/// MiB, 2.31 × as one stream; at level 6 2.26 × and 2.33 ×: a chunk of 1 MiB
/// cannot match one stream at any level, one of 4 MiB can). The data passes
/// through the compression threads' buffers anyway, so the cache argument
/// for [`TCP_BUF`] does not hold for it; chunks stored without trying are
/// read at [`TCP_BUF`] ([`crate::ChunkSender::plain_chunk`]).
pub const LARGE_COMPRESSED_TCP_BUF: usize = 4 << 20;

/// Which data frames both ends of a TCP stream take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frames {
    /// Not compressed, or a peer without the larger frames: [`TCP_BUF`].
    Plain,
    /// Compressed, both ends take [`COMPRESSED_TCP_BUF`].
    Wide,
    /// Compressed, both ends take [`LARGE_COMPRESSED_TCP_BUF`].
    Large,
}

/// The buffer (and largest data frame) of a TCP stream whose chunks are at
/// most `chunk_size` bytes and whose ends take `frames`: within the chunk
/// size, except that a compressed stream with [`Frames::Large`] and a chunk
/// size of [`COMPRESSED_TCP_BUF`] or more (the default, 1 MiB, the RDMA
/// slot's size) uses [`LARGE_COMPRESSED_TCP_BUF`]; a smaller `--chunk-size`
/// (to save memory, or a test's many chunks) keeps every frame within it.
pub fn buffer_size(chunk_size: usize, frames: Frames) -> usize {
    let chunk_size = chunk_size.max(1);
    match frames {
        Frames::Plain => chunk_size.min(TCP_BUF),
        Frames::Wide => chunk_size.min(COMPRESSED_TCP_BUF),
        Frames::Large if chunk_size >= COMPRESSED_TCP_BUF => LARGE_COMPRESSED_TCP_BUF,
        Frames::Large => chunk_size,
    }
}

/// How often an idle sender proves it is alive.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(5);

enum Out {
    Data(PageBuf, usize),
    End(StreamEnd),
}

enum Back {
    Done(StreamEnd),
    Aborted(String),
    Failed(TransportError),
}

/// The sending half over TCP.
pub struct TcpSender {
    peer: String,
    free: Receiver<PageBuf>,
    out: Option<SyncSender<Out>>,
    writer: Option<JoinHandle<io::Result<()>>>,
    back: Receiver<Back>,
    ctl: TcpStream,
    /// Held around every write to the socket, by the writer thread and by the
    /// caller writing inline, so frames never interleave.
    wlock: Arc<Mutex<()>>,
    /// Buffers the caller holds (all of them while it writes inline: the writer
    /// thread then has nothing queued, which keeps the frames in order).
    spare: Vec<PageBuf>,
    buffers: usize,
    chooser: Chooser,
}

impl TcpSender {
    /// Starts the writer and back-channel threads on an authenticated
    /// connection, with `slots` buffers of `buf_size` bytes ([`buffer_size`]).
    pub fn new(stream: TcpStream, buf_size: usize, slots: usize, peer: String) -> io::Result<Self> {
        let buf_size = buf_size.max(1);
        let (free_tx, free) = channel();
        for _ in 0..slots.max(2) {
            free_tx
                .send(PageBuf::new(buf_size))
                .expect("receiver is alive");
        }
        let peer_on_loopback = stream.peer_addr().is_ok_and(|a| a.ip().is_loopback());
        let (out, out_rx) = sync_channel::<Out>(slots.max(2));
        let mut wsock = stream.try_clone()?;
        let wlock = Arc::new(Mutex::new(()));
        let lock = wlock.clone();
        let writer = std::thread::Builder::new()
            .name("tcp-writer".into())
            .spawn(move || -> io::Result<()> {
                loop {
                    let msg = out_rx.recv_timeout(KEEPALIVE_EVERY);
                    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
                    match msg {
                        Ok(Out::Data(buf, n)) => {
                            write_data(&mut wsock, &buf[..n])?;
                            // The sender may have finished already; then nobody needs it.
                            let _ = free_tx.send(buf);
                        }
                        Ok(Out::End(end)) => {
                            io::Write::write_all(&mut wsock, &Control::End(end).encode())?;
                            return Ok(());
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            io::Write::write_all(&mut wsock, &Control::Keepalive.encode())?;
                        }
                        Err(RecvTimeoutError::Disconnected) => return Ok(()),
                    }
                }
            })?;
        let (back_tx, back) = channel();
        let mut rsock = stream.try_clone()?;
        let bpeer = peer.clone();
        std::thread::Builder::new()
            .name("tcp-backchannel".into())
            .spawn(move || {
                let msg = loop {
                    let h = match read_header(&mut rsock, &bpeer, 0) {
                        Ok(h) => h,
                        Err(e) => break Back::Failed(e),
                    };
                    match read_control_payload(&mut rsock, &bpeer, h) {
                        Ok(Control::Keepalive) => continue,
                        Ok(Control::Done(d)) => break Back::Done(d),
                        Ok(Control::Abort { message, .. }) => break Back::Aborted(message),
                        Ok(other) => {
                            break Back::Failed(crate::frame_io::protocol(
                                &bpeer,
                                WireError::Unexpected(other.kind()),
                            ))
                        }
                        Err(e) => break Back::Failed(e),
                    }
                };
                let _ = back_tx.send(msg);
            })?;
        Ok(TcpSender {
            peer,
            free,
            out: Some(out),
            writer: Some(writer),
            back,
            ctl: stream,
            wlock,
            spare: Vec::new(),
            buffers: slots.max(2),
            chooser: Chooser::new(
                SendMode::from_env().unwrap_or(SendMode::default_for(peer_on_loopback)),
            ),
        })
    }

    /// The writer failed or is gone: find the most telling reason. The receiver's own
    /// Abort message beats our EPIPE, so wait briefly for the back channel.
    fn failure(&mut self) -> TransportError {
        self.out = None;
        let werr = self
            .writer
            .take()
            .and_then(|w| w.join().ok())
            .and_then(|r| r.err());
        self.explain(werr)
    }

    /// The most telling reason for a failed write (`werr`; none when the writer
    /// just stopped): the receiver's own Abort first; then what the back channel
    /// saw, when the write only found the connection already closed (EPIPE): a
    /// socket reports its error (a timeout, a reset) once, to whichever thread
    /// asks first, and the other then sees only EPIPE.
    fn explain(&self, werr: Option<io::Error>) -> TransportError {
        let write_saw_only_closed = werr
            .as_ref()
            .is_none_or(|e| e.kind() == io::ErrorKind::BrokenPipe);
        match self.back.recv_timeout(Duration::from_secs(2)) {
            Ok(Back::Aborted(m)) => TransportError::PeerAborted(m),
            Ok(Back::Failed(e)) if write_saw_only_closed => e,
            _ => match werr {
                Some(e) => conn_error(&self.peer, e),
                None => TransportError::PeerGone {
                    peer: self.peer.clone(),
                    cause: GoneCause::WriterStopped,
                },
            },
        }
    }
}

impl ChunkSender for TcpSender {
    fn plain_chunk(&self) -> Option<usize> {
        Some(TCP_BUF)
    }

    fn send_chunk(
        &mut self,
        fill: &mut dyn FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> Result<usize, TransportError> {
        // An early Abort from the receiver (its output closed) stops us at once.
        if let Ok(b) = self.back.try_recv() {
            return Err(match b {
                Back::Aborted(m) => TransportError::PeerAborted(m),
                Back::Failed(e) => e,
                Back::Done(..) => TransportError::Protocol {
                    peer: self.peer.clone(),
                    source: WireError::Unexpected(FrameKind::Done),
                },
            });
        }
        if self.chooser.needs_drain() {
            // Everything handed to the writer goes out first.
            while self.spare.len() < self.buffers {
                match self.free.recv() {
                    Ok(b) => self.spare.push(b),
                    Err(_) => return Err(self.failure()),
                }
            }
            self.chooser.drained();
        }
        let inline = self.chooser.next_inline();
        let mut buf = match self.spare.pop() {
            Some(b) => b,
            None => match self.free.recv() {
                Ok(b) => b,
                Err(_) => return Err(self.failure()),
            },
        };
        let n = match fill(&mut buf) {
            Ok(n) => n,
            Err(e) => {
                self.spare.push(buf);
                return Err(TransportError::Input(e));
            }
        };
        if n == 0 {
            // End of input: the buffer is not needed again.
            return Ok(0);
        }
        if inline {
            let written = {
                let _held = self.wlock.lock().unwrap_or_else(|p| p.into_inner());
                write_data(&mut self.ctl, &buf[..n])
            };
            self.spare.push(buf);
            if let Err(e) = written {
                return Err(self.explain(Some(e)));
            }
        } else {
            let out = self.out.as_ref().expect("send_chunk after finish");
            if out.send(Out::Data(buf, n)).is_err() {
                return Err(self.failure());
            }
        }
        self.chooser.sent(n);
        Ok(n)
    }

    fn finish(&mut self, end: &StreamEnd) -> Result<StreamEnd, TransportError> {
        let out = self.out.take().expect("finish called once");
        if out.send(Out::End(*end)).is_err() {
            return Err(self.failure());
        }
        drop(out);
        if let Some(w) = self.writer.take() {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(self.explain(Some(e))),
                Err(_) => {
                    return Err(TransportError::Io {
                        context: "TCP writer thread",
                        source: io::Error::other("panicked"),
                    })
                }
            }
        }
        match self.back.recv() {
            Ok(Back::Done(d)) => Ok(d),
            Ok(Back::Aborted(m)) => Err(TransportError::PeerAborted(m)),
            Ok(Back::Failed(TransportError::PeerGone { peer, cause })) => {
                Err(TransportError::PeerGone {
                    peer,
                    cause: GoneCause::Unconfirmed(Box::new(cause)),
                })
            }
            Ok(Back::Failed(e)) => Err(e),
            Err(_) => Err(TransportError::PeerGone {
                peer: self.peer.clone(),
                cause: GoneCause::NoConfirmation,
            }),
        }
    }

    fn abort(&mut self, reason: &str) {
        self.out = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        let _ = write_control(
            &mut self.ctl,
            &self.peer,
            &Control::Abort {
                reason: AbortReason::Stream,
                message: reason.to_string(),
            },
        );
        let _ = self.ctl.shutdown(Shutdown::Both);
    }

    fn gone(&mut self) -> TransportError {
        // The writer stops; the back channel has read the reset, the
        // timeout, the peer's close or its Abort.
        self.failure()
    }

    fn describe(&self) -> String {
        "tcp".into()
    }
}

/// The receiving half over TCP.
pub struct TcpReceiver {
    peer: String,
    sock: Lookahead,
    buf: PageBuf,
    /// Payload bytes of the current data frame not read yet.
    left: usize,
    /// The largest data frame the peer may send (the negotiated chunk size).
    max: u32,
}

impl TcpReceiver {
    /// Prepares to receive on an authenticated connection, into a buffer of
    /// `buf_size` bytes ([`buffer_size`]), from a peer whose chunks are at
    /// most `chunk_size`. It takes no slot count: the socket buffer does the
    /// read-ahead.
    pub fn new(stream: TcpStream, buf_size: usize, chunk_size: usize, peer: String) -> Self {
        TcpReceiver {
            peer,
            sock: Lookahead::new(stream),
            buf: PageBuf::new(buf_size.max(1)),
            left: 0,
            max: chunk_size as u32,
        }
    }
}

impl ChunkReceiver for TcpReceiver {
    fn recv_chunk(
        &mut self,
        drain: &mut dyn FnMut(&mut [u8]) -> Result<(), TransportError>,
    ) -> Result<Received, TransportError> {
        while self.left == 0 {
            let h = read_header(&mut self.sock, &self.peer, self.max)?;
            if h.kind == FrameKind::Data {
                if h.len as usize > self.buf.len() {
                    // A chunk is always a whole frame (it may be sealed): the
                    // peer's frames are never larger than our buffer.
                    return Err(TransportError::Protocol {
                        peer: self.peer.clone(),
                        source: WireError::FrameTooLarge {
                            kind: FrameKind::Data,
                            len: h.len,
                            limit: self.buf.len() as u32,
                        },
                    });
                }
                self.left = h.len as usize;
                continue;
            }
            return match read_control_payload(&mut self.sock, &self.peer, h)? {
                Control::Keepalive => continue,
                Control::End(e) => Ok(Received::End(e)),
                Control::Abort { message, .. } => Err(TransportError::PeerAborted(message)),
                other => Err(TransportError::Protocol {
                    peer: self.peer.clone(),
                    source: WireError::Unexpected(other.kind()),
                }),
            };
        }
        let n = self.left.min(self.buf.len());
        self.sock
            .read_payload(&mut self.buf[..n])
            .map_err(|e| conn_error(&self.peer, e))?;
        self.left -= n;
        drain(&mut self.buf[..n])?;
        Ok(Received::Chunk(n))
    }

    fn more_ready(&mut self) -> bool {
        // A data frame or End whose header is here (the sender writes a frame
        // whole, so its payload follows); not a keepalive, which an idle
        // sender sends every few seconds and after which nothing may come.
        self.left > 0
            || matches!(
                self.sock.next_kind(),
                Some(FrameKind::Data | FrameKind::End)
            )
    }

    fn confirm(&mut self, done: &StreamEnd) -> Result<(), TransportError> {
        write_control(self.sock.sock(), &self.peer, &Control::Done(*done))?;
        // Wait for the sender to close: our process must not exit (and possibly
        // reset the connection) before the confirmation has reached it.
        let _ = self.sock.sock().shutdown(Shutdown::Write);
        let _ = self
            .sock
            .sock()
            .set_read_timeout(Some(Duration::from_secs(5)));
        let mut sink = [0u8; 64];
        while let Ok(n) = io::Read::read(&mut self.sock, &mut sink) {
            if n == 0 {
                break;
            }
        }
        Ok(())
    }

    fn abort(&mut self, reason: &str) {
        let _ = write_control(
            self.sock.sock(),
            &self.peer,
            &Control::Abort {
                reason: AbortReason::Stream,
                message: reason.to_string(),
            },
        );
        let _ = self.sock.sock().shutdown(Shutdown::Both);
    }

    fn describe(&self) -> String {
        "tcp".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_within_the_chunk_size_except_large_compressed_frames() {
        let mib = 1 << 20;
        assert_eq!(buffer_size(mib, Frames::Plain), TCP_BUF);
        assert_eq!(buffer_size(4096, Frames::Plain), 4096);
        assert_eq!(buffer_size(0, Frames::Plain), 1);
        assert_eq!(buffer_size(8 * mib, Frames::Wide), COMPRESSED_TCP_BUF);
        assert_eq!(buffer_size(512 << 10, Frames::Wide), 512 << 10);
        // The default chunk size and larger: 4 MiB frames; smaller: as asked.
        assert_eq!(buffer_size(mib, Frames::Large), LARGE_COMPRESSED_TCP_BUF);
        assert_eq!(
            buffer_size(16 * mib, Frames::Large),
            LARGE_COMPRESSED_TCP_BUF
        );
        assert_eq!(buffer_size(256 << 10, Frames::Large), 256 << 10);
    }
}
