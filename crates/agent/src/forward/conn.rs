//! One forwarded TCP connection at one end: its socket, the bytes the peer
//! sent for it, its flow-control window, and how it ends.
//!
//! - **Reading** the socket is the outgoing transfer's work: while the
//!   connection has credit (the peer's window), its socket is in the
//!   outbox's epoll set and [`Conn::read_into`] reads it straight into the
//!   chunk being filled, as a `Data` frame; the socket's end of file becomes
//!   `Eof` (a half-close: the other direction goes on). Out of credit, the
//!   socket leaves the set until the peer's `Credit` comes.
//! - **Writing** the peer's bytes is the incoming transfer's: each `Data`
//!   goes straight to the socket when nothing is ahead of it and the socket
//!   takes it at once (the usual case); what it does not take is queued,
//!   and a writer thread, started then, drains the queue with blocking
//!   writes and ends when it is empty. The peer's `Eof`, once everything
//!   before it is written, becomes `shutdown(SHUT_WR)`. Written bytes are
//!   credited back every quarter window.
//!
//! So a connection whose socket keeps up costs no thread at all. A failing
//! socket (a reset, a write to a closed peer) resets the connection:
//! `Reset` to the peer, whose side then closes its socket with `SO_LINGER`
//! 0, which sends a TCP reset, so a reset on one side is a reset on the
//! other. The connection is over when both directions are (or it was
//! reset) and no writer runs; then it is retired ([`super::Side::retire`]),
//! exactly once.

use super::Side;
use rdpipe_control::ConnEnd;
use rdpipe_wire::mux::{data_header, Frame, ResetKind, HEADER_LEN, MAX_DATA, WINDOW};
use rustix::net::{recv, send, RecvFlags, SendFlags};
use std::collections::VecDeque;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How often a writer blocked on a full socket looks whether the
/// connection was reset meanwhile.
const WRITE_CHECK: Duration = Duration::from_millis(200);

/// Credit goes back once this many bytes were written.
const CREDIT_EVERY: u32 = WINDOW / 4;

/// Which end of the forward this connection is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The listening side: the socket is the client's.
    Client,
    /// The target side: the socket is the target's.
    Target,
}

#[derive(Default)]
struct State {
    /// The peer's bytes for the socket that it did not take at once.
    queue: VecDeque<Vec<u8>>,
    /// Received and not yet credited back (at most the window).
    unacked: u32,
    /// Written and not yet credited back.
    written: u32,
    /// The peer sent `Eof`.
    peer_eof: bool,
    /// The write side is shut down (after the peer's `Eof`).
    shut_wr: bool,
    /// A thread owns the writing: the writer draining the queue, or the
    /// target side's connecting thread. Bytes that come meanwhile queue.
    writer: bool,
    /// The socket is read (in the epoll set, or out of it for lack of
    /// credit); false once its end of file was read or it was reset.
    reading: bool,
    /// Out of the epoll set for lack of credit.
    paused: bool,
    /// How much of the socket may still be sent.
    credit: u32,
    /// Set once: how the connection ended, when not by two half-closes.
    end: Option<ConnEnd>,
    /// Handed to [`Side::retire`].
    retired: bool,
    up: u64,
    down: u64,
}

/// One connection.
pub struct Conn {
    /// Its number.
    pub id: u32,
    /// The client's address (the listening side's report).
    pub peer: String,
    /// When it was accepted or opened.
    pub since: Instant,
    at: End,
    sock: OnceLock<TcpStream>,
    st: Mutex<State>,
}

impl Conn {
    /// A connection whose socket comes later ([`Conn::begin`]); with
    /// `connecting`, a thread is connecting it and owns its writing until
    /// it calls [`Conn::drain`].
    pub fn new(id: u32, peer: String, at: End, connecting: bool) -> Arc<Conn> {
        Arc::new(Conn {
            id,
            peer,
            since: Instant::now(),
            at,
            sock: OnceLock::new(),
            st: Mutex::new(State {
                credit: WINDOW,
                writer: connecting,
                ..State::default()
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection has its socket: it is read from now on. False (and
    /// the socket closed) when it was reset meanwhile.
    pub fn begin(&self, sock: TcpStream, side: &Side) -> bool {
        let _ = sock.set_nodelay(true);
        let _ = sock.set_write_timeout(Some(WRITE_CHECK));
        let mut st = self.lock();
        if let Some(end) = st.end {
            // Cut before it had its socket: closed as a cut one is.
            if !matches!(end, ConnEnd::Refused | ConnEnd::Unreachable) {
                let _ = rustix::net::sockopt::set_socket_linger(&sock, Some(Duration::ZERO));
            }
            return false;
        }
        let sock = self.sock.get_or_init(|| sock);
        if let Err(e) = side.outbox.watch(sock, self.id) {
            drop(st);
            tracing::warn!("connection {}: cannot watch its socket: {e}", self.id);
            self.reset(side, self.local_failure(), Some(ResetKind::Reset));
            return false;
        }
        st.reading = true;
        true
    }

    /// The thread that held the writing (the accept loop, or the target's
    /// connecting thread when it has nothing to write) lets it go: what
    /// came meanwhile gets a writer, a pending end of file its shutdown.
    pub fn release(self: &Arc<Self>, side: &Arc<Side>) {
        let mut st = self.lock();
        st.writer = false;
        if st.end.is_none() {
            if !st.queue.is_empty() {
                if self.start_writer(side, &mut st) {
                    drop(st);
                    self.reset(side, ConnEnd::Cut, Some(ResetKind::Reset));
                    return;
                }
            } else if st.peer_eof && !st.shut_wr {
                if let Some(sock) = self.sock() {
                    let _ = sock.shutdown(Shutdown::Write);
                    st.shut_wr = true;
                }
            }
        }
        self.settle(side, st);
    }

    fn sock(&self) -> Option<&TcpStream> {
        self.sock.get()
    }

    /// Whether the connection is over (and not yet retired): then it is
    /// marked retired, and the caller retires it once the lock is released.
    fn over(st: &mut State) -> bool {
        let done = st.end.is_some() || (!st.reading && st.shut_wr);
        if done && !st.writer && !st.retired {
            st.retired = true;
            return true;
        }
        false
    }

    fn settle(&self, side: &Side, mut st: MutexGuard<'_, State>) {
        let over = Self::over(&mut st);
        drop(st);
        if over {
            side.retire(self);
        }
    }

    /// How it ended (two half-closes unless said otherwise) and its byte
    /// counts (client → target, target → client).
    pub fn outcome(&self) -> (ConnEnd, u64, u64) {
        let st = self.lock();
        (st.end.unwrap_or(ConnEnd::Closed), st.up, st.down)
    }

    /// The connection ends as `end`: reading and writing stop, the socket
    /// is closed once it is retired (with a TCP reset unless the target
    /// could not be reached, which the client sees as a plain close), and
    /// `tell` goes to the peer.
    pub fn reset(&self, side: &Side, end: ConnEnd, tell: Option<ResetKind>) {
        let mut st = self.lock();
        if st.end.is_some() {
            // (Its writer may just have let go: it is over now.)
            self.settle(side, st);
            return;
        }
        st.end = Some(end);
        st.queue.clear();
        if let Some(s) = self.sock() {
            if st.reading && !st.paused {
                side.outbox.unwatch(s);
            }
            if !matches!(end, ConnEnd::Refused | ConnEnd::Unreachable) {
                let _ = rustix::net::sockopt::set_socket_linger(s, Some(Duration::ZERO));
            }
        }
        st.reading = false;
        if let Some(k) = tell {
            side.outbox.control(Frame::Reset(self.id, k).encode());
        }
        self.settle(side, st);
    }

    /// The reset this side's socket failure makes.
    fn local_failure(&self) -> ConnEnd {
        match self.at {
            End::Client => ConnEnd::ClientReset,
            End::Target => ConnEnd::TargetReset,
        }
    }

    /// Reads the socket into `buf` as a `Data` frame (or `Eof`) when it is
    /// ready and has credit; returns the frame's length (0: nothing).
    pub fn read_into(&self, side: &Side, buf: &mut [u8]) -> usize {
        if buf.len() <= HEADER_LEN {
            return 0;
        }
        let mut st = self.lock();
        let Some(sock) = self.sock() else { return 0 };
        if !st.reading || st.paused || st.end.is_some() {
            return 0;
        }
        if st.credit == 0 {
            st.paused = true;
            side.outbox.unwatch(sock);
            return 0;
        }
        let want = (st.credit.min(MAX_DATA) as usize).min(buf.len() - HEADER_LEN);
        match recv(
            sock,
            &mut buf[HEADER_LEN..HEADER_LEN + want],
            RecvFlags::DONTWAIT,
        ) {
            Ok(0) => {
                st.reading = false;
                side.outbox.unwatch(sock);
                buf[..HEADER_LEN].copy_from_slice(&Frame::Eof(self.id).encode());
                self.settle(side, st);
                HEADER_LEN
            }
            Ok(k) => {
                st.credit -= k as u32;
                match self.at {
                    End::Client => st.up += k as u64,
                    End::Target => st.down += k as u64,
                }
                buf[..HEADER_LEN].copy_from_slice(&data_header(self.id, k as u32));
                HEADER_LEN + k
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => 0,
            Err(e) => {
                drop(st);
                tracing::debug!("connection {}: read: {e}", self.id);
                self.reset(side, self.local_failure(), Some(ResetKind::Reset));
                0
            }
        }
    }

    /// The peer's frame for this connection (`Data`, `Eof`, `Credit`,
    /// `Reset`), from the demultiplexer; an error is a protocol violation.
    pub fn take(self: &Arc<Self>, side: &Arc<Side>, f: Frame) -> Result<(), String> {
        let mut st = self.lock();
        match f {
            Frame::Data(_, d) => {
                if st.end.is_some() {
                    return Ok(());
                }
                if st.peer_eof {
                    return Err(format!("data after the end of connection {}", self.id));
                }
                let n = d.len() as u32;
                if st.unacked.saturating_add(n) > WINDOW {
                    return Err(format!("connection {} overran its window", self.id));
                }
                st.unacked += n;
                let mut at = 0;
                if st.queue.is_empty() && !st.writer {
                    if let Some(sock) = self.sock() {
                        match send(sock, &d, SendFlags::NOSIGNAL | SendFlags::DONTWAIT) {
                            Ok(k) => at = k,
                            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
                            Err(e) => {
                                drop(st);
                                tracing::debug!("connection {}: write: {e}", self.id);
                                self.reset(side, self.local_failure(), Some(ResetKind::Reset));
                                return Ok(());
                            }
                        }
                    }
                }
                let credit = if at > 0 {
                    self.wrote(&mut st, at as u32)
                } else {
                    None
                };
                if at < d.len() {
                    st.queue
                        .push_back(if at == 0 { d } else { d[at..].to_vec() });
                    self.start_writer(side, &mut st);
                }
                self.settle(side, st);
                if let Some(c) = credit {
                    side.outbox.control(Frame::Credit(self.id, c).encode());
                }
            }
            Frame::Eof(_) => {
                st.peer_eof = true;
                if st.queue.is_empty() && !st.writer && st.end.is_none() {
                    if let Some(sock) = self.sock() {
                        let _ = sock.shutdown(Shutdown::Write);
                        st.shut_wr = true;
                    }
                }
                self.settle(side, st);
            }
            Frame::Credit(_, n) => {
                let c = st.credit.saturating_add(n);
                if c > WINDOW {
                    return Err(format!("connection {} credited beyond its window", self.id));
                }
                st.credit = c;
                if st.paused && st.reading && st.end.is_none() {
                    st.paused = false;
                    if let Some(sock) = self.sock() {
                        if let Err(e) = side.outbox.watch(sock, self.id) {
                            // (Not in the set: nothing to take out of it.)
                            st.paused = true;
                            drop(st);
                            tracing::warn!("connection {}: cannot watch its socket: {e}", self.id);
                            self.reset(side, self.local_failure(), Some(ResetKind::Reset));
                        }
                    }
                }
            }
            Frame::Reset(_, k) => {
                drop(st);
                let end = match (k, self.at) {
                    (ResetKind::Reset, End::Client) => ConnEnd::TargetReset,
                    (ResetKind::Reset, End::Target) => ConnEnd::ClientReset,
                    (ResetKind::Refused, _) => ConnEnd::Refused,
                    (ResetKind::Unreachable, _) => ConnEnd::Unreachable,
                    (ResetKind::Stopping, _) => ConnEnd::Cut,
                };
                self.reset(side, end, None);
            }
            Frame::Open(_) => return Err(format!("connection {} opened twice", self.id)),
            Frame::Hello => return Err("a second hello".into()),
        }
        Ok(())
    }

    /// Queued bytes wait for a writer: one is started unless one runs (or
    /// a thread holds the writing: it drains or releases after). True when
    /// no thread could be started: the caller resets the connection once
    /// it let go of the lock (without a writer the bytes cannot go).
    fn start_writer(self: &Arc<Self>, side: &Arc<Side>, st: &mut State) -> bool {
        if st.writer || self.sock().is_none() {
            return false;
        }
        st.writer = true;
        let (c, s) = (self.clone(), side.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("fwd-{}-w", self.id))
            .spawn(move || c.drain(&s));
        if spawned.is_err() {
            st.writer = false;
            return true;
        }
        false
    }

    /// The writer: writes the queue out with blocking writes (then the
    /// write side's shutdown after the peer's `Eof`), and ends when the
    /// queue is empty. The target side's connecting thread calls it too,
    /// once connected (or after failing to: it only lets go then).
    pub fn drain(&self, side: &Side) {
        loop {
            let mut st = self.lock();
            if st.end.is_some() {
                st.writer = false;
                self.settle(side, st);
                return;
            }
            let Some(chunk) = st.queue.pop_front() else {
                if st.peer_eof && !st.shut_wr {
                    if let Some(sock) = self.sock() {
                        let _ = sock.shutdown(Shutdown::Write);
                        st.shut_wr = true;
                    }
                }
                st.writer = false;
                self.settle(side, st);
                return;
            };
            drop(st);
            let Some(sock) = self.sock() else {
                return;
            };
            match self.write_all(sock, &chunk) {
                Ok(true) => {}
                // Reset meanwhile: the loop's next turn sees it.
                Ok(false) => continue,
                Err(e) => {
                    tracing::debug!("connection {}: write: {e}", self.id);
                    self.lock().writer = false;
                    self.reset(side, self.local_failure(), Some(ResetKind::Reset));
                    return;
                }
            }
            let credit = {
                let mut st = self.lock();
                self.wrote(&mut st, chunk.len() as u32)
            };
            if let Some(c) = credit {
                side.outbox.control(Frame::Credit(self.id, c).encode());
            }
        }
    }

    /// `n` more bytes of the peer's went to the socket: counted, and the
    /// credit to send back when a quarter window has gathered.
    fn wrote(&self, st: &mut State, n: u32) -> Option<u32> {
        match self.at {
            End::Client => st.down += n as u64,
            End::Target => st.up += n as u64,
        }
        st.unacked -= n;
        st.written += n;
        (st.written >= CREDIT_EVERY).then(|| std::mem::take(&mut st.written))
    }

    /// Writes `b` whole (true), looking every [`WRITE_CHECK`] whether the
    /// connection was reset meanwhile (then it gives up quietly: false).
    fn write_all(&self, sock: &TcpStream, mut b: &[u8]) -> io::Result<bool> {
        while !b.is_empty() {
            match send(sock, b, SendFlags::NOSIGNAL) {
                Ok(n) => b = &b[n..],
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    if self.lock().end.is_some() {
                        return Ok(false);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }
}
