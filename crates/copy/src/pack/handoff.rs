//! The packer feeding the transfer without a pipe: the packing thread walks
//! the sources and sends the stream's small pieces (headers, trailers, small
//! files it read itself) in batches over a channel; a big file it hands over
//! whole, and the transfer's own thread ([`Pulled`], its input) reads that
//! file straight into the chunk it is filling. Through a pipe each byte of a
//! big file would be copied three times (read, into the pipe, out of it);
//! here once. The packing thread waits for each handed-over file to be read (the
//! trailer it writes next carries the file's hash, which the reading side
//! computed), so the stream stays in order.
//!
//! The transfer polls its input for readiness between reads; [`Pulled`]'s
//! descriptor is an eventfd that is always readable: the next bytes are
//! always on their way (a read waits only for the packing thread).
//!
//! On a hop that reconnects, [`Pulled`] keeps its own replay window
//! ([`super::window`]): where its last bytes came from, not a copy of them.

use super::out::{read_through, DataRead, PackOut, BUF};
use super::window::{Extents, Handed};
use crate::direct::Aligned;
use rdpipe_transport::replay::{Input, OwnWindow};
use rdpipe_wire::StreamHasher;
use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

/// Files from this size on are handed to the transfer's thread; smaller
/// ones are read by the packing thread into the batch (a hand-over costs
/// two thread wake-ups).
pub const HANDOFF_MIN: u64 = 256 << 10;

/// The batch size of small pieces.
const BATCH: usize = 256 << 10;

/// Batches in flight between the threads.
const DEPTH: usize = 4;

enum Msg {
    Bytes(Vec<u8>),
    File {
        file: File,
        len: u64,
        reply: SyncSender<DataRead>,
    },
}

/// The packing thread's end: a [`PackOut`].
pub struct Handoff {
    tx: SyncSender<Msg>,
    batch: Vec<u8>,
    buf: Aligned,
}

/// The transfer's end: its input.
pub struct Pulled {
    rx: Receiver<Msg>,
    bytes: Arc<Vec<u8>>,
    at: usize,
    job: Option<Job>,
    ready: OwnedFd,
    /// The replay window, when the transfer asked for one.
    window: Option<Extents>,
}

/// A handed-over file being read into the stream.
struct Job {
    file: Arc<Handed>,
    /// The file offset of its next byte (kept for the window).
    at: u64,
    left: u64,
    hash: StreamHasher,
    short: bool,
    error: Option<io::Error>,
    reply: SyncSender<DataRead>,
}

/// A connected pair.
pub fn handoff() -> io::Result<(Handoff, Pulled)> {
    let (tx, rx) = sync_channel(DEPTH);
    let ready = rustix::event::eventfd(1, rustix::event::EventfdFlags::CLOEXEC)?;
    Ok((
        Handoff {
            tx,
            batch: Vec::with_capacity(BATCH),
            buf: Aligned::new(BUF),
        },
        Pulled {
            rx,
            bytes: Arc::new(Vec::new()),
            at: 0,
            job: None,
            ready,
            window: None,
        },
    ))
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the transfer stopped reading")
}

impl Handoff {
    fn send_batch(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let b = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.tx.send(Msg::Bytes(b)).map_err(|_| gone())
    }
}

impl PackOut for Handoff {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.batch.extend_from_slice(b);
        if self.batch.len() >= BATCH {
            self.send_batch()?;
        }
        Ok(())
    }

    fn data(&mut self, f: &File, len: u64, direct: bool) -> io::Result<DataRead> {
        // `--direct` needs aligned reads, which a chunk filled from an
        // unaligned point cannot take: those files are read here (as is one
        // whose descriptor cannot be duplicated).
        let handed = if direct || len < HANDOFF_MIN {
            None
        } else {
            f.try_clone().ok()
        };
        let Some(file) = handed else {
            let (tx, batch) = (&self.tx, &mut self.batch);
            return read_through(f, len, direct, &mut self.buf, |b| {
                batch.extend_from_slice(b);
                if batch.len() >= BATCH {
                    let full = std::mem::replace(batch, Vec::with_capacity(BATCH));
                    tx.send(Msg::Bytes(full)).map_err(|_| gone())?;
                }
                Ok(())
            });
        };
        self.send_batch()?;
        let (reply, answer) = sync_channel(1);
        self.tx
            .send(Msg::File { file, len, reply })
            .map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_batch()
    }
}

impl Read for Pulled {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.at < self.bytes.len() {
                let n = buf.len().min(self.bytes.len() - self.at);
                buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
                if let Some(w) = &mut self.window {
                    w.batch(&self.bytes, self.at, n);
                }
                self.at += n;
                return Ok(n);
            }
            if let Some(job) = &mut self.job {
                if job.left == 0 {
                    let job = self.job.take().expect("a job");
                    // The packing thread may have stopped; nothing to tell then.
                    let _ = job.reply.send(DataRead {
                        hash: job.hash.digest(),
                        short: job.short,
                        error: job.error,
                    });
                    continue;
                }
                let want = job.left.min(buf.len() as u64) as usize;
                let n = if job.short || job.error.is_some() {
                    buf[..want].fill(0);
                    if let Some(w) = &mut self.window {
                        w.zeros(want);
                    }
                    want
                } else {
                    match job.file.file().read(&mut buf[..want]) {
                        Ok(0) => {
                            job.short = true;
                            continue;
                        }
                        Ok(n) => {
                            if let Some(w) = &mut self.window {
                                w.file(&job.file, job.at, &buf[..n]);
                            }
                            job.at += n as u64;
                            n
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            job.error = Some(e);
                            continue;
                        }
                    }
                };
                job.hash.update(&buf[..n]);
                job.left -= n as u64;
                return Ok(n);
            }
            match self.rx.recv() {
                Ok(Msg::Bytes(mut b)) => {
                    // A batch cut short by a hand-over may hold a few bytes
                    // in a whole batch's allocation: the window keeps only
                    // what it holds.
                    if self.window.is_some() && b.capacity() > 2 * b.len() {
                        b.shrink_to_fit();
                    }
                    (self.bytes, self.at) = (Arc::new(b), 0)
                }
                Ok(Msg::File {
                    mut file,
                    len,
                    reply,
                }) => {
                    // Where the packer left it (after a resumed file's
                    // prefix): needed only to read it again for a resend,
                    // which a file whose offset is unknown refuses.
                    let (at, file) = match self.window.as_ref().map(|_| file.stream_position()) {
                        Some(Ok(at)) => (at, Handed::new(file)),
                        _ => (0, Handed::unstamped(file)),
                    };
                    let file = Arc::new(file);
                    self.job = Some(Job {
                        file,
                        at,
                        left: len,
                        hash: StreamHasher::new(),
                        short: false,
                        error: None,
                        reply,
                    })
                }
                // The packing thread is done: the end of the stream.
                Err(_) => return Ok(0),
            }
        }
    }
}

impl Input for Pulled {
    fn keep_window(&mut self, capacity: usize) -> bool {
        // Asked once per stream; a second call keeps the window it has.
        self.window.get_or_insert_with(|| Extents::new(capacity));
        true
    }

    fn window(&mut self) -> Option<&mut dyn OwnWindow> {
        self.window.as_mut().map(|w| w as &mut dyn OwnWindow)
    }
}

impl AsFd for Pulled {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }
}
