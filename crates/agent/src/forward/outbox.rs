//! What one side of a forward sends, read by its outgoing transfer as its
//! input ([`OutboxInput`]): queued frames, and the connections' sockets
//! read in place. No pipe and no thread stands between the connections and
//! the hop: the transfer's own thread reads each socket that is ready
//! straight into the chunk it is filling, behind a 9-byte header.
//!
//! - **Queued frames**: `Hello`, `Open`, `Reset`, `Credit` (small, never
//!   waited for, so the demultiplexer that makes some never blocks), and a
//!   socket's frame read when the chunk had no room left for it; they go
//!   out before any socket is read again. An eventfd is readable exactly
//!   while one is queued, or the outbox has ended.
//! - **Sockets**: each connection's socket is in an epoll set while it may
//!   be read (it has flow-control credit and has not ended,
//!   [`super::conn`]); the set holds the eventfd too.
//!
//! The input's descriptor is the epoll set: it polls readable exactly while
//! a frame is queued or a socket is ready, which is what the send loop asks
//! before it adds more to a chunk (`fill_available`), so a lone 64-byte
//! request goes out at once in a chunk of its own.

use super::Side;
use rdpipe_transport::replay::Input;
use rdpipe_wire::mux::HEADER_LEN;
use rustix::event::epoll;
use rustix::event::{eventfd, EventfdFlags};
use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The epoll token of the eventfd (connections use their numbers, from 1).
const QUEUED: u64 = 0;

/// Room in the chunk below which a socket is not read into it directly.
const SMALL: usize = 4096;

#[derive(Default)]
struct Queues {
    control: VecDeque<Vec<u8>>,
    /// The frame being read out, and how far.
    cur: Vec<u8>,
    at: usize,
    /// No more frames: the stream ends after the queued ones.
    closed: bool,
    /// The stream is abandoned: the transfer fails.
    failed: Option<String>,
    /// The eventfd holds a count (polls readable).
    armed: bool,
}

/// The queues and the sockets' epoll set, shared by the connections and the
/// input.
pub struct Outbox {
    q: Mutex<Queues>,
    efd: OwnedFd,
    epoll: OwnedFd,
}

/// The outgoing transfer's input.
pub struct OutboxInput {
    side: Weak<Side>,
    outbox: Arc<Outbox>,
    /// The transfer has read before (its hop is up).
    started: bool,
}

impl Outbox {
    /// An empty outbox.
    pub fn new() -> io::Result<Arc<Outbox>> {
        let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &ep,
            &efd,
            epoll::EventData::new_u64(QUEUED),
            epoll::EventFlags::IN,
        )?;
        let o = Outbox {
            q: Mutex::default(),
            efd,
            epoll: ep,
        };
        // The first frame: the peer learns that this side's hop is up, and
        // the transfer's first wait for input ends once it is (it reads
        // only after its handshake).
        o.control(rdpipe_wire::mux::Frame::Hello.encode());
        Ok(Arc::new(o))
    }

    /// The input that reads `side`'s outbox.
    pub fn input(side: &Arc<Side>) -> OutboxInput {
        OutboxInput {
            side: Arc::downgrade(side),
            outbox: side.outbox.clone(),
            started: false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn arm(&self, q: &mut Queues) {
        if !q.armed {
            let _ = rustix::io::write(&self.efd, &1u64.to_ne_bytes());
            q.armed = true;
        }
    }

    /// Queues a control frame (never waits).
    pub fn control(&self, frame: Vec<u8>) {
        let mut q = self.lock();
        if q.closed || q.failed.is_some() {
            return;
        }
        q.control.push_back(frame);
        self.arm(&mut q);
    }

    /// Queues a frame read from a socket for a buffer with no room for
    /// it, behind everything queued (its connection's `Open` among them).
    /// Also after the close: it was read before, and belongs to the stream.
    fn put_read(&self, frame: Vec<u8>) {
        let mut q = self.lock();
        if q.failed.is_some() {
            return;
        }
        q.control.push_back(frame);
        self.arm(&mut q);
    }

    /// Reads `sock` (connection `id`) when it is ready.
    pub fn watch(&self, sock: impl AsFd, id: u32) -> io::Result<()> {
        epoll::add(
            &self.epoll,
            sock,
            epoll::EventData::new_u64(u64::from(id)),
            epoll::EventFlags::IN,
        )?;
        Ok(())
    }

    /// No longer reads `sock`.
    pub fn unwatch(&self, sock: impl AsFd) {
        let _ = epoll::delete(&self.epoll, sock);
    }

    /// No more frames: the stream ends cleanly after the queued ones.
    pub fn close(&self) {
        let mut q = self.lock();
        q.closed = true;
        self.arm(&mut q);
    }

    /// The stream is abandoned: the transfer's next read fails with `why`.
    pub fn fail(&self, why: String) {
        let mut q = self.lock();
        if q.failed.is_none() {
            q.failed = Some(why);
        }
        self.arm(&mut q);
    }
}

/// What the queues gave.
enum Queued {
    /// This many bytes (maybe 0).
    Bytes(usize),
    /// Nothing, and nothing will come: the end of the stream.
    End,
}

impl OutboxInput {
    /// Copies queued frames into `buf`.
    fn queued(&self, buf: &mut [u8]) -> io::Result<Queued> {
        let o = &*self.outbox;
        let mut q = o.lock();
        if let Some(why) = &q.failed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, why.clone()));
        }
        let mut n = 0;
        while n < buf.len() {
            if q.at == q.cur.len() {
                let Some(f) = q.control.pop_front() else {
                    break;
                };
                q.cur = f;
                q.at = 0;
            }
            let take = (q.cur.len() - q.at).min(buf.len() - n);
            let at = q.at;
            buf[n..n + take].copy_from_slice(&q.cur[at..at + take]);
            q.at += take;
            n += take;
        }
        let empty = q.at == q.cur.len() && q.control.is_empty();
        if empty && q.armed && !q.closed {
            // Nothing queued: the eventfd no longer polls readable.
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&o.efd, &mut b);
            q.armed = false;
        }
        Ok(if n == 0 && empty && q.closed {
            Queued::End
        } else {
            Queued::Bytes(n)
        })
    }
}

impl Read for OutboxInput {
    /// Queued frames first, then what the ready sockets give, until `buf`
    /// is full or nothing more is ready; waits only while nothing was read.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.started {
            // The first read (of the Hello) comes once the hop is up.
            self.started = true;
            if let Some(side) = self.side.upgrade() {
                side.hop_up();
            }
        }
        // (Made here: an event list is not Send.)
        let mut events = epoll::EventVec::with_capacity(64);
        let mut n = 0;
        loop {
            match self.queued(&mut buf[n..])? {
                Queued::End if n == 0 => return Ok(0),
                Queued::End => return Ok(n),
                Queued::Bytes(k) => n += k,
            }
            if n == buf.len() {
                return Ok(n);
            }
            let timeout = if n > 0 { 0 } else { -1 };
            match epoll::wait(&self.outbox.epoll, &mut events, timeout) {
                Ok(()) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if events.is_empty() {
                if n > 0 {
                    return Ok(n);
                }
                continue;
            }
            // What was queued while this waited goes first: a connection's
            // `Open` is queued before its socket is watched, so its bytes
            // never overtake it.
            match self.queued(&mut buf[n..])? {
                Queued::Bytes(k) => n += k,
                Queued::End if n == 0 => return Ok(0),
                Queued::End => return Ok(n),
            }
            if n == buf.len() {
                return Ok(n);
            }
            let Some(side) = self.side.upgrade() else {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "forward gone"));
            };
            let before = n;
            let ids: Vec<u64> = events.iter().map(|e| e.data.u64()).collect();
            for id in ids {
                if id == QUEUED {
                    continue;
                }
                let Some(c) = side.conn(id as u32) else {
                    continue;
                };
                if buf.len() - n > SMALL {
                    n += c.read_into(&side, &mut buf[n..]);
                } else if n == 0 {
                    // Too little room for a frame worth its header (the end
                    // of a chunk), and nothing read yet: the socket's
                    // frame goes first in the queue, and what fits of it
                    // here (a socket that stays ready must be read, or the
                    // wait below would not wait).
                    let mut f = vec![0u8; SMALL + HEADER_LEN];
                    let k = c.read_into(&side, &mut f);
                    if k > 0 {
                        f.truncate(k);
                        self.outbox.put_read(f);
                        if let Queued::Bytes(q) = self.queued(buf)? {
                            n += q;
                        }
                    }
                }
            }
            // Only queued frames (or sockets with nothing after all): one
            // more look at the queues, then give what there is.
            if n == before && n > 0 {
                if let Queued::Bytes(k) = self.queued(&mut buf[n..])? {
                    n += k;
                }
                return Ok(n);
            }
        }
    }
}

impl AsFd for OutboxInput {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.outbox.epoll.as_fd()
    }
}

impl Input for OutboxInput {}
