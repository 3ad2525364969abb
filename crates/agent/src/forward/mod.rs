//! `rdpipe forward`'s two sides, each an agent whose segment has both
//! transfers: the *listening* side (`--forward-listen`) accepts TCP
//! connections and sends them over its outgoing hop to the *target* side
//! (`--forward-target`), which connects each to the target address and
//! sends the replies back over its own outgoing hop.
//!
//! Every connection travels as `rdpipe_wire::mux` frames inside that one
//! hop pair, which is authenticated, protected and reconnecting like any
//! hop: a new connection costs an `Open` frame and a `connect` at the
//! target, no handshake. Per connection: [`conn`]. The frames go out
//! through the [`outbox`]; they come in through [`Demux`], the incoming
//! transfer's output.
//!
//! The target side connects only to its own `--forward-target` address:
//! the frames name connections, never addresses.
//!
//! The forward ends when the listening side stops (rdpipe's `STOP` on
//! Ctrl-C, or `--forward-once` after its connection): it stops accepting,
//! cuts the open connections (a TCP reset on both sides), and when none
//! is left ends its stream cleanly; the target side, at that end and once
//! its own connections are over, ends its stream too. Both hops then end
//! verified, as any pipeline's do. A failed incoming stream resets every
//! connection and fails the outgoing one.

pub mod conn;
pub mod outbox;

use super::say::Say;
use super::segment::Segment;
use super::transfers::Transfers;
use conn::{Conn, End};
use outbox::Outbox;
use rdpipe_control::{ConnEnd, ConnReport, Direction, FromAgent, Part};
use rdpipe_wire::mux::{Frame, Parser, ResetKind};
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long the target side's connections may take, once the listening
/// side's stream has ended, to write what they still hold to the target.
const LAST_WRITES: Duration = Duration::from_secs(5);

/// What this side does.
enum Role {
    /// Accepts connections; ends after the first with `once`; at most
    /// `max` open at once.
    Listen { once: bool, max: usize },
    /// Connects each connection to `to` (waiting at most `timeout`).
    Target { to: String, timeout: Duration },
}

#[derive(Default)]
struct Table {
    open: HashMap<u32, Arc<Conn>>,
    /// The highest connection number opened so far.
    last: u32,
    /// No new connections: the stream ends once none is open.
    stopping: bool,
}

/// One side's connections and outgoing frames.
pub struct Side {
    outbox: Arc<Outbox>,
    table: Mutex<Table>,
    changed: Condvar,
    role: Role,
    say: Say,
    /// The listening socket (a duplicate, to wake its accept on stop).
    listener: Option<TcpListener>,
    /// Hops not yet up: the outgoing one's transfer reads its input (the
    /// `Hello` queued first) once its handshake is done; the incoming one
    /// brings the peer's `Hello`. When both are, the listening side says
    /// `LISTENING` (rdpipe's "forwarding" line), so a client that waits for
    /// it does not wait for the hops' set-up.
    hops_down: std::sync::atomic::AtomicUsize,
}

impl Side {
    /// One of the two hops is up.
    fn hop_up(&self) {
        use std::sync::atomic::Ordering;
        if self.hops_down.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        if let Some(a) = self.listener.as_ref().and_then(|l| l.local_addr().ok()) {
            self.say.send(&FromAgent::Listening(a));
        }
    }

    /// Connection `id`, while it is open.
    fn conn(&self, id: u32) -> Option<Arc<Conn>> {
        self.table().open.get(&id).cloned()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connection `c` is over: out of the table, reported (listening
    /// side), and the stream ended when it was the last after a stop.
    fn retire(&self, c: &Conn) {
        if let Role::Listen { .. } = self.role {
            // (Said before it leaves the table: a stream that ends once the
            // table is empty has every connection's report before it.)
            let (end, up, down) = c.outcome();
            self.say.send(&FromAgent::Conn(ConnReport {
                id: c.id,
                secs: c.since.elapsed().as_secs_f64(),
                up,
                down,
                end,
                peer: c.peer.clone(),
            }));
        }
        let mut t = self.table();
        if t.open.remove(&c.id).is_none() {
            return;
        }
        if let Role::Listen { once: true, .. } = self.role {
            t.stopping = true;
        }
        self.changed.notify_all();
        self.end_if_idle(&t);
    }

    fn end_if_idle(&self, t: &Table) {
        if t.stopping && t.open.is_empty() {
            self.outbox.close();
        }
    }

    /// Stops accepting and cuts every open connection; the stream ends
    /// when they are gone.
    fn stop(&self) {
        let open: Vec<Arc<Conn>> = {
            let mut t = self.table();
            t.stopping = true;
            self.changed.notify_all();
            self.end_if_idle(&t);
            t.open.values().cloned().collect()
        };
        if let Some(l) = &self.listener {
            // Wakes the accept (Linux: EINVAL from a shut-down listener).
            let _ = rustix::net::shutdown(l.as_fd(), rustix::net::Shutdown::Read);
        }
        for c in open {
            c.reset(self, ConnEnd::Cut, Some(ResetKind::Stopping));
        }
    }

    /// The incoming stream failed: every connection is reset and the
    /// outgoing stream fails too.
    fn abandon(&self, why: &str) {
        let open: Vec<Arc<Conn>> = {
            let mut t = self.table();
            t.stopping = true;
            self.changed.notify_all();
            t.open.values().cloned().collect()
        };
        if let Some(l) = &self.listener {
            let _ = rustix::net::shutdown(l.as_fd(), rustix::net::Shutdown::Read);
        }
        for c in open {
            c.reset(self, ConnEnd::Cut, None);
        }
        self.outbox.fail(why.to_string());
    }
}

/// The incoming transfer's output: the peer's frames, each handed to its
/// connection (or, at the target side, opening one).
pub struct Demux {
    side: Arc<Side>,
    parser: Parser,
    ended: bool,
    /// The peer's `Hello` came (it comes first, once).
    greeted: bool,
}

impl Demux {
    fn frame(&mut self, f: Frame) -> Result<(), String> {
        match (f == Frame::Hello, self.greeted) {
            (true, false) => {
                self.greeted = true;
                self.side.hop_up();
                return Ok(());
            }
            (false, true) => {}
            (true, true) => return Err("a second hello".into()),
            (false, false) => return Err("a frame before the hello".into()),
        }
        let id = f.id();
        if let Frame::Open(_) = f {
            let Role::Target { to, timeout } = &self.side.role else {
                return Err("the target side opened a connection".into());
            };
            let c = {
                let mut t = self.side.table();
                if id <= t.last || t.stopping {
                    return Err(format!("connection {id} opened out of order"));
                }
                t.last = id;
                let c = Conn::new(id, String::new(), End::Target, true);
                t.open.insert(id, c.clone());
                c
            };
            let (side, to, timeout) = (self.side.clone(), to.clone(), *timeout);
            let spawned = std::thread::Builder::new()
                .name(format!("fwd-{id}-c"))
                .spawn({
                    let c = c.clone();
                    move || connect(&side, &c, &to, timeout)
                });
            if spawned.is_err() {
                c.reset(&self.side, ConnEnd::Cut, Some(ResetKind::Unreachable));
                c.drain(&self.side);
            }
            return Ok(());
        }
        let c = {
            let t = self.side.table();
            match t.open.get(&id) {
                Some(c) => c.clone(),
                // Over on this side already: its late frames mean nothing.
                None if id <= t.last && id > 0 => return Ok(()),
                None => return Err(format!("a frame for connection {id}, never opened")),
            }
        };
        c.take(&self.side, f)
    }
}

impl Write for Demux {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut frames = Vec::new();
        self.parser
            .feed(buf, &mut |f| frames.push(f))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("forward: {e}")))?;
        for f in frames {
            self.frame(f)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("forward: {e}")))?;
        }
        Ok(buf.len())
    }

    /// The peer's stream ended, verified: it has no connection left.
    fn flush(&mut self) -> io::Result<()> {
        if !self.parser.at_boundary() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "forward: the stream ended inside a frame",
            ));
        }
        self.ended = true;
        match self.side.role {
            // The target side ends its stream once its connections are over:
            // the listening side has retired all of them, so what is left
            // here is writing its last bytes to the target; one that cannot
            // within [`LAST_WRITES`] (a server that stopped reading) is cut.
            Role::Target { .. } => {
                let mut t = self.side.table();
                t.stopping = true;
                self.side.end_if_idle(&t);
                if !t.open.is_empty() {
                    drop(t);
                    let side = self.side.clone();
                    std::thread::spawn(move || {
                        let deadline = std::time::Instant::now() + LAST_WRITES;
                        let mut t = side.table();
                        while !t.open.is_empty() {
                            let left =
                                deadline.saturating_duration_since(std::time::Instant::now());
                            if left.is_zero() {
                                break;
                            }
                            t = side
                                .changed
                                .wait_timeout(t, left)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                        let open: Vec<Arc<Conn>> = t.open.values().cloned().collect();
                        drop(t);
                        for c in open {
                            c.reset(&side, ConnEnd::Cut, None);
                        }
                    });
                }
            }
            // The listening side ended first; if not, it stops now.
            Role::Listen { .. } => self.side.stop(),
        }
        Ok(())
    }
}

impl Drop for Demux {
    fn drop(&mut self) {
        if !self.ended {
            self.side
                .abandon("the other side of the forward is gone (its stream failed)");
        }
    }
}

/// The target side's connect for connection `c`; its failure is a `Reset`
/// that says why (refused, or unreachable).
fn connect(side: &Arc<Side>, c: &Arc<Conn>, to: &str, timeout: Duration) {
    let mut last: Option<io::Error> = None;
    let addrs: Vec<SocketAddr> = match to.to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => {
            last = Some(e);
            vec![]
        }
    };
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                // Connected: it is read from now on, and this thread
                // writes what came meanwhile, then lets the writing go.
                c.begin(s, side);
                c.drain(side);
                return;
            }
            Err(e) => last = Some(e),
        }
    }
    let refused = last
        .as_ref()
        .is_some_and(|e| e.kind() == io::ErrorKind::ConnectionRefused);
    tracing::debug!(
        "connection {}: cannot connect to {to}: {}",
        c.id,
        last.map(|e| e.to_string()).unwrap_or_default()
    );
    let (end, kind) = match refused {
        true => (ConnEnd::Refused, ResetKind::Refused),
        false => (ConnEnd::Unreachable, ResetKind::Unreachable),
    };
    c.reset(side, end, Some(kind));
    c.drain(side);
}

/// Wires `side`'s frames to the segment's two transfers.
fn start_transfers(side: &Arc<Side>, t: &mut Transfers) {
    t.spawn_send(Outbox::input(side));
    let demux = Demux {
        side: side.clone(),
        parser: Parser::new(),
        ended: false,
        greeted: false,
    };
    t.spawn_recv(Box::new(move || Ok(Box::new(demux) as _)), None);
}

/// The listening side: binds `addr` (IP:PORT or NAME:PORT), says
/// `LISTENING`, and accepts until `STOP` (on `stop`), or after one
/// connection with `once`, at most `max` open at once.
pub fn start_listen(
    addr: &str,
    once: bool,
    max: Option<usize>,
    stop: mpsc::Receiver<()>,
    seg: &mut Segment,
    t: &mut Transfers,
) {
    let bound = TcpListener::bind(addr).and_then(|l| {
        let dup = l.try_clone()?;
        let outbox = Outbox::new()?;
        Ok((l, dup, outbox))
    });
    let (listener, dup, outbox) = match bound {
        Ok(b) => b,
        Err(e) => {
            seg.drop_transfer(Direction::In);
            seg.drop_transfer(Direction::Out);
            seg.setup_failed(Part::Agent, format!("cannot listen on {addr}: {e}"));
            return;
        }
    };
    let side = Arc::new(Side {
        outbox,
        table: Mutex::default(),
        changed: Condvar::new(),
        role: Role::Listen {
            once,
            max: max.unwrap_or(usize::MAX).max(1),
        },
        say: t.say.clone(),
        listener: Some(dup),
        hops_down: 2.into(),
    });
    start_transfers(&side, t);
    {
        let side = side.clone();
        std::thread::spawn(move || {
            if stop.recv().is_ok() {
                tracing::debug!("STOP: cutting the open connections");
                side.stop();
            }
        });
    }
    std::thread::spawn(move || accept_loop(listener, &side));
}

fn accept_loop(listener: TcpListener, side: &Arc<Side>) {
    let Role::Listen { once, max } = side.role else {
        return;
    };
    loop {
        {
            let mut t = side.table();
            while !t.stopping && t.open.len() >= max {
                t = side.changed.wait(t).unwrap_or_else(|e| e.into_inner());
            }
            if t.stopping {
                return;
            }
        }
        let (sock, peer) = match listener.accept() {
            Ok(a) => a,
            Err(e) => {
                if side.table().stopping {
                    return;
                }
                tracing::warn!("accept: {e}");
                // (Out of descriptors: wait for a connection to end.)
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let c = {
            let mut t = side.table();
            let Some(id) = t.last.checked_add(1).filter(|_| !t.stopping) else {
                // (Stopping, or 2^32 - 1 connections: no number is left.)
                return;
            };
            t.last = id;
            // The accept loop holds its writing until the socket is in.
            let c = Conn::new(id, peer.to_string(), End::Client, true);
            t.open.insert(id, c.clone());
            c
        };
        tracing::debug!("connection {} from {peer}", c.id);
        side.outbox.control(Frame::Open(c.id).encode());
        c.begin(sock, side);
        c.release(side);
        if once {
            // Later clients are refused: the listening socket (and its
            // duplicate) stops listening here.
            if let Some(l) = &side.listener {
                let _ = rustix::net::shutdown(l.as_fd(), rustix::net::Shutdown::Read);
            }
            return;
        }
    }
}

/// The target side: each connection the listening side opens is connected
/// to `to` (HOST:PORT as this host resolves it).
pub fn start_target(to: &str, timeout: Duration, seg: &mut Segment, t: &mut Transfers) {
    let role = Role::Target {
        to: to.to_string(),
        timeout,
    };
    let outbox = match Outbox::new() {
        Ok(o) => o,
        Err(e) => {
            seg.drop_transfer(Direction::In);
            seg.drop_transfer(Direction::Out);
            seg.setup_failed(Part::Agent, format!("cannot make an eventfd: {e}"));
            return;
        }
    };
    let side = Arc::new(Side {
        outbox,
        table: Mutex::default(),
        changed: Condvar::new(),
        role,
        say: t.say.clone(),
        listener: None,
        hops_down: 2.into(),
    });
    start_transfers(&side, t);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    fn side(role: Role) -> Arc<Side> {
        Arc::new(Side {
            outbox: Outbox::new().unwrap(),
            table: Mutex::default(),
            changed: Condvar::new(),
            role,
            say: Say::to(Box::new(io::sink())),
            listener: None,
            hops_down: 2.into(),
        })
    }

    fn demux(side: &Arc<Side>) -> Demux {
        Demux {
            side: side.clone(),
            parser: Parser::new(),
            ended: false,
            greeted: false,
        }
    }

    fn frames(fs: &[Frame]) -> Vec<u8> {
        fs.iter().flat_map(Frame::encode).collect()
    }

    /// A connected pair: (ours, the peer's end).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (b, a)
    }

    fn listening() -> Arc<Side> {
        side(Role::Listen {
            once: false,
            max: 10,
        })
    }

    #[test]
    fn hostile_frames_fail_the_stream() {
        for bad in [
            // Before the hello.
            frames(&[Frame::Eof(1)]),
            // A second hello.
            frames(&[Frame::Hello, Frame::Hello]),
            // An open from the target side.
            frames(&[Frame::Hello, Frame::Open(1)]),
            // A connection never opened.
            frames(&[Frame::Hello, Frame::Data(5, b"x".to_vec())]),
        ] {
            let s = listening();
            assert!(demux(&s).write_all(&bad).is_err());
        }
        // At the target: out of order, and beyond the window.
        let s = side(Role::Target {
            to: "127.0.0.1:1".into(),
            timeout: Duration::from_secs(1),
        });
        let mut d = demux(&s);
        assert!(d
            .write_all(&frames(&[Frame::Hello, Frame::Open(2)]))
            .is_ok());
        assert!(d.write_all(&frames(&[Frame::Open(1)])).is_err());
        let s = listening();
        let c = Conn::new(1, "p".into(), End::Client, false);
        s.table().open.insert(1, c.clone());
        s.table().last = 1;
        let mut d = demux(&s);
        d.write_all(&frames(&[Frame::Hello])).unwrap();
        let chunk = vec![0u8; rdpipe_wire::mux::MAX_DATA as usize];
        let mut sent = 0;
        let r = loop {
            let r = d.write_all(&frames(&[Frame::Data(1, chunk.clone())]));
            if r.is_err() {
                break r;
            }
            sent += chunk.len();
            assert!(sent <= rdpipe_wire::mux::WINDOW as usize);
        };
        assert!(r.unwrap_err().to_string().contains("overran its window"));
        // A credit beyond the window.
        let s = listening();
        let c = Conn::new(1, "p".into(), End::Client, false);
        s.table().open.insert(1, c.clone());
        s.table().last = 1;
        let mut d = demux(&s);
        let e = d
            .write_all(&frames(&[Frame::Hello, Frame::Credit(1, 1)]))
            .unwrap_err();
        assert!(e.to_string().contains("beyond its window"), "{e}");
    }

    #[test]
    fn a_ready_socket_is_read_even_into_a_nearly_full_chunk() {
        let s = listening();
        let mut input = Outbox::input(&s);
        let c = Conn::new(1, "p".into(), End::Client, false);
        s.table().open.insert(1, c.clone());
        let (ours, mut peer) = pair();
        assert!(c.begin(ours, &s));
        peer.write_all(b"0123456789").unwrap();
        // The hello first, then the socket's bytes, 5 at a time.
        let mut got = Vec::new();
        let mut b = [0u8; 5];
        while got.len() < 2 * HEADER + 10 {
            let n = input.read(&mut b).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&b[..n]);
        }
        let mut want = Frame::Hello.encode();
        want.extend(Frame::Data(1, b"0123456789".to_vec()).encode());
        assert_eq!(got, want);
        // The peer's end of file is an Eof frame.
        drop(peer);
        let mut b = [0u8; 64];
        let n = input.read(&mut b).unwrap();
        assert_eq!(&b[..n], &Frame::Eof(1).encode()[..]);
    }

    const HEADER: usize = rdpipe_wire::mux::HEADER_LEN;
}
