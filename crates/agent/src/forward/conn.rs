//! One forwarded TCP connection at one end: its socket, the bytes the peer
//! sent for it (queued for the socket), its flow-control window, and its two
//! threads.
//!
//! - The *reader* reads the socket while the window allows (the peer's
//!   credit), and queues each read as a `Data` frame; the socket's end of
//!   file becomes `Eof` (a half-close: the other direction goes on).
//! - The *writer* writes the peer's bytes to the socket and, every quarter
//!   window, credits them back; the peer's `Eof`, once everything before it
//!   is written, becomes `shutdown(SHUT_WR)` here.
//!
//! A failing socket (a reset, a write to a closed peer) resets the
//! connection: `Reset` to the peer, whose side then closes its socket with
//! `SO_LINGER` 0, which sends a TCP reset, so a reset on one side is a
//! reset on the other. The connection is over when both threads are; the
//! last one retires it ([`super::Side::retire`]).

use super::Side;
use rdpipe_control::ConnEnd;
use rdpipe_wire::mux::{data_header, Frame, ResetKind, HEADER_LEN, MAX_DATA, WINDOW};
use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
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
    /// The peer's bytes for the socket.
    queue: VecDeque<Vec<u8>>,
    /// Received and not yet credited back (at most the window).
    unacked: u32,
    /// Written and not yet credited back.
    written: u32,
    /// The peer sent `Eof`.
    peer_eof: bool,
    /// The writer holds a chunk it took from the queue: bytes that came
    /// after it must wait their turn in the queue.
    writing: bool,
    /// How much the reader may still send.
    credit: u32,
    /// Set once: how the connection ended, when not by two half-closes.
    end: Option<ConnEnd>,
    /// Threads still running (reader, writer).
    threads: u8,
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
    cv: Condvar,
}

impl Conn {
    /// A connection whose socket comes later ([`Conn::start`]).
    pub fn new(id: u32, peer: String, at: End) -> Arc<Conn> {
        Arc::new(Conn {
            id,
            peer,
            since: Instant::now(),
            at,
            sock: OnceLock::new(),
            st: Mutex::new(State {
                credit: WINDOW,
                ..State::default()
            }),
            cv: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts its reader and writer on `sock`; false (and the socket
    /// closed) when the connection was reset meanwhile.
    pub fn start(self: &Arc<Self>, sock: TcpStream, side: &Arc<Side>) -> bool {
        if !self.begin(sock) {
            return false;
        }
        self.spawn(true, side);
        self.spawn(false, side);
        true
    }

    /// [`Conn::start`] with the writer run on this thread (the target
    /// side's connecting thread: one thread fewer to start per connection).
    pub fn start_here(self: &Arc<Self>, sock: TcpStream, side: &Arc<Side>) -> bool {
        if !self.begin(sock) {
            return false;
        }
        self.spawn(true, side);
        self.write_loop(side);
        self.thread_done(side);
        true
    }

    fn begin(&self, sock: TcpStream) -> bool {
        let _ = sock.set_nodelay(true);
        let _ = sock.set_write_timeout(Some(WRITE_CHECK));
        let mut st = self.lock();
        if st.end.is_some() {
            return false;
        }
        st.threads = 2;
        let _ = self.sock.set(sock);
        true
    }

    fn spawn(self: &Arc<Self>, reader: bool, side: &Arc<Side>) {
        let (c, s) = (self.clone(), side.clone());
        let name = format!("fwd-{}-{}", self.id, if reader { "r" } else { "w" });
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            if reader {
                c.read_loop(&s)
            } else {
                c.write_loop(&s)
            }
            c.thread_done(&s);
        });
        if spawned.is_err() {
            self.reset(side, ConnEnd::Cut, Some(ResetKind::Reset));
            self.thread_done(side);
        }
    }

    fn sock(&self) -> &TcpStream {
        self.sock.get().expect("started with a socket")
    }

    fn thread_done(&self, side: &Arc<Side>) {
        let last = {
            let mut st = self.lock();
            st.threads -= 1;
            st.threads == 0
        };
        if last {
            side.retire(self);
        }
    }

    /// Whether the connection ended as it should (two half-closes), else
    /// how; and its byte counts (client → target, target → client).
    pub fn outcome(&self) -> (ConnEnd, u64, u64) {
        let st = self.lock();
        (st.end.unwrap_or(ConnEnd::Closed), st.up, st.down)
    }

    /// The connection ends as `end`: both threads stop, the socket is
    /// closed (with a TCP reset unless the target could not be reached,
    /// which the client sees as a plain close), and `tell` goes to the peer.
    pub fn reset(&self, side: &Side, end: ConnEnd, tell: Option<ResetKind>) {
        {
            let mut st = self.lock();
            if st.end.is_some() {
                return;
            }
            st.end = Some(end);
            st.queue.clear();
            self.cv.notify_all();
        }
        if let Some(k) = tell {
            side.outbox.control(Frame::Reset(self.id, k).encode());
        }
        if let Some(s) = self.sock.get() {
            if !matches!(end, ConnEnd::Refused | ConnEnd::Unreachable) {
                let _ = rustix::net::sockopt::set_socket_linger(s, Some(Duration::ZERO));
            }
            // Wakes a reader blocked in read (nothing is sent for it).
            let _ = s.shutdown(Shutdown::Read);
        }
    }

    /// The reset this side's socket failure makes.
    fn local_failure(&self) -> ConnEnd {
        match self.at {
            End::Client => ConnEnd::ClientReset,
            End::Target => ConnEnd::TargetReset,
        }
    }

    /// The peer's frame for this connection (`Data`, `Eof`, `Credit`,
    /// `Reset`), from the demultiplexer; an error is a protocol violation.
    pub fn take(&self, side: &Side, f: Frame) -> Result<(), String> {
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
                // Straight to the socket when nothing is ahead of it and the
                // socket takes it now (the usual case for requests and
                // replies: no wake-up of the writer); the rest waits for
                // the writer.
                let mut at = 0;
                if st.queue.is_empty() && !st.writing {
                    if let Some(sock) = self.sock.get() {
                        use rustix::net::{send, SendFlags};
                        if let Ok(k) = send(sock, &d, SendFlags::NOSIGNAL | SendFlags::DONTWAIT) {
                            at = k;
                        }
                    }
                }
                let credit = (at > 0).then(|| self.wrote(&mut st, at as u32)).flatten();
                if at < d.len() {
                    st.queue.push_back(if at == 0 { d } else { d[at..].to_vec() });
                    self.cv.notify_all();
                }
                drop(st);
                if let Some(c) = credit {
                    side.outbox.control(Frame::Credit(self.id, c).encode());
                }
            }
            Frame::Eof(_) => {
                st.peer_eof = true;
                self.cv.notify_all();
            }
            Frame::Credit(_, n) => {
                let c = st.credit.saturating_add(n);
                if c > WINDOW {
                    return Err(format!("connection {} credited beyond its window", self.id));
                }
                st.credit = c;
                self.cv.notify_all();
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
        }
        Ok(())
    }

    fn read_loop(&self, side: &Side) {
        let mut sock = self.sock();
        let mut buf = vec![0u8; MAX_DATA as usize];
        loop {
            let want = {
                let mut st = self.lock();
                while st.credit == 0 && st.end.is_none() {
                    st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                if st.end.is_some() {
                    return;
                }
                st.credit.min(MAX_DATA) as usize
            };
            let n = match sock.read(&mut buf[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!("connection {}: read: {e}", self.id);
                    self.reset(side, self.local_failure(), Some(ResetKind::Reset));
                    return;
                }
            };
            let mut st = self.lock();
            if st.end.is_some() {
                return;
            }
            if n == 0 {
                drop(st);
                side.outbox.data(Frame::Eof(self.id).encode());
                return;
            }
            st.credit -= n as u32;
            match self.at {
                End::Client => st.up += n as u64,
                End::Target => st.down += n as u64,
            }
            drop(st);
            let mut frame = Vec::with_capacity(HEADER_LEN + n);
            frame.extend_from_slice(&data_header(self.id, n as u32));
            frame.extend_from_slice(&buf[..n]);
            if !side.outbox.data(frame) {
                return;
            }
        }
    }

    fn write_loop(&self, side: &Side) {
        let sock = self.sock();
        loop {
            let chunk = {
                let mut st = self.lock();
                loop {
                    if st.end.is_some() {
                        return;
                    }
                    if let Some(c) = st.queue.pop_front() {
                        st.writing = true;
                        break c;
                    }
                    if st.peer_eof {
                        drop(st);
                        let _ = sock.shutdown(Shutdown::Write);
                        return;
                    }
                    st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
            };
            if let Err(e) = self.write_all(sock, &chunk) {
                tracing::debug!("connection {}: write: {e}", self.id);
                self.reset(side, self.local_failure(), Some(ResetKind::Reset));
                return;
            }
            let credit = {
                let mut st = self.lock();
                st.writing = false;
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

    /// Writes `b` whole, looking every [`WRITE_CHECK`] whether the
    /// connection was reset meanwhile (then it gives up quietly).
    fn write_all(&self, sock: &TcpStream, mut b: &[u8]) -> io::Result<()> {
        use rustix::net::{send, SendFlags};
        while !b.is_empty() {
            match send(sock, b, SendFlags::NOSIGNAL) {
                Ok(n) => b = &b[n..],
                Err(e) if e == rustix::io::Errno::INTR => {}
                Err(e) if e == rustix::io::Errno::AGAIN => {
                    if self.lock().end.is_some() {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
