//! Accepting until a peer authenticates, on a port that anyone who can reach
//! it may connect to, with no key: connections that say nothing, trickle,
//! send garbage or arrive by the thousand must neither keep a real peer out
//! nor cost the endpoint more than a fixed amount.
//!
//! A connection goes through two stages, each with a bounded number of
//! places, and an authenticated one through a third check:
//!
//! 1. **The hello.** One thread (the acceptor) accepts every connection at
//!    once, without answering it, and reads the peer's hello (the dialing
//!    end always speaks first, [`crate::handshake`]) from all of them with
//!    one `poll`. At most [`MAX_UNSORTED`] connections wait there; a peer
//!    must have sent its whole hello within [`HELLO_WITHIN`] of being
//!    accepted (or `--handshake-timeout`, when shorter). Garbage goes as soon as its first six bytes are not a hello's
//!    magic and version (a wrong version is answered with our hello first, so
//!    that its end reports the version). When a newcomer finds every place
//!    taken, the oldest connection of the source address holding the most
//!    places goes (read one last time: a hello that arrived meanwhile moves
//!    it on instead). So one source cannot push out another's connections
//!    while it holds more places than that one, and a real peer sharing the
//!    attacker's source is pushed out only by [`MAX_UNSORTED`] newer
//!    connections arriving before its hello, which it sends right after its
//!    connect completes. A dialing end whose connection is closed before our
//!    hello dials again within `--connect-timeout`
//!    ([`crate::handshake::dial`]), or within `--reconnect-timeout` when it
//!    reconnects.
//! 2. **The handshake.** A connection whose hello arrived gets a thread of
//!    its own for the rest of the handshake (`--handshake-timeout`, counted
//!    from its accept), at most [`MAX_HANDSHAKES`] at once. A newcomer that
//!    finds them all taken pushes out the oldest one not yet authenticated,
//!    of the source holding the most, by shutting its socket down; a
//!    connection that has not sent a hello never pushes out one that has,
//!    and an authenticated one is never pushed out.
//! 3. **The proof**, once a hop's stream runs ([`Acceptor::require`]): an
//!    authenticated newcomer must open, within [`PROOF_WITHIN`], with a
//!    message bound to this stream ([`Proof`]), which only the stream's
//!    other end can make; only then does it replace the live connection
//!    ([`Acceptor::watch`]). A peer that merely holds the key (another
//!    rdsend started with it) fails that, is reset (SO_LINGER 0) and the
//!    live transfer goes on untouched. Before a stream runs, and on a
//!    fan-out chain's hops (whose key is made for the hop and held by its
//!    two ends only), authentication is enough.
//!
//! Bounds, per listening endpoint, whatever its peers do: threads: the
//! acceptor and at most [`MAX_HANDSHAKES`] handshake threads
//! ([`HANDSHAKE_STACK`] of stack each); descriptors: the listener, at most
//! [`MAX_UNSORTED`] connections waiting for a hello and at most
//! [`MAX_HANDSHAKES`] in a handshake (two descriptors each: the thread's and
//! the one that can push it out), besides the live connection; memory: a
//! [`HELLO_LEN`]-byte buffer and some bookkeeping per waiting connection,
//! a thread per handshake, and the kernel's socket buffers of those
//! connections. Connections beyond those wait in the kernel's accept queue
//! ([`crate::connect::BACKLOG`]), costing this process nothing.
//!
//! Failed handshakes are dropped with a line at `-v` (a wrong key with a
//! warning, since it is usually a real sender with a mistyped key; a peer
//! that authenticated but is not the stream's other end with a warning too),
//! connections dropped before their hello with at most [`DROP_LINES`]
//! lines a second;
//! the endpoint goes on waiting. A failure after authentication (the two
//! ends' `--transport` cannot be reconciled) ends the endpoint like any
//! other.

use crate::connect::{tune, Listener};
use crate::frame_io::{conn_error, protocol};
use crate::handshake::{handshake_accepted, our_hello, peer_name, LocalParams, Negotiated};
use crate::TransportError;
use rdpipe_wire::hello::{Hello, HELLO_LEN, HELLO_PREFIX_LEN, MAGIC};
use rdpipe_wire::resume::{Resuming, Returning, RESUME_LEN};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections accepted whose hello has not arrived, at most.
pub const MAX_UNSORTED: usize = 128;

/// Handshakes past the hello in progress at most (one thread each).
pub const MAX_HANDSHAKES: usize = 32;

/// How long a peer has, from its accept, to send its whole hello (or
/// `--handshake-timeout` when shorter): a real dialing end sends it as soon
/// as its connect completes.
pub const HELLO_WITHIN: Duration = Duration::from_secs(3);

/// How long an authenticated newcomer has to open with its proof
/// ([`Proof`]): a reconnecting hop's end sends it right after the handshake.
pub const PROOF_WITHIN: Duration = Duration::from_secs(3);

/// The stack of a handshake thread.
pub const HANDSHAKE_STACK: usize = 512 << 10;

/// Connections accepted in a row before the waiting ones are read again.
const ACCEPT_BATCH: usize = 16;

/// How long accepting pauses after accept() failed for want of resources
/// (descriptors, memory), so that the acceptor does not spin on it.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// The longest the acceptor's poll sleeps (it also wakes for every
/// connection and every hello's deadline).
const POLL_AT_MOST: Duration = Duration::from_secs(1);

type Outcome = (String, Result<(TcpStream, Negotiated), TransportError>);

/// What an authenticated newcomer must open with, once a hop's stream runs,
/// before it may replace the live connection: a message bound to the stream
/// ([`rdpipe_wire::resume::stream_binding`]), tagged under the new
/// connection's keys.
#[derive(Debug, Clone)]
pub enum Proof {
    /// The listening end receives: a returning sender's
    /// [`Returning`] bound to this binding.
    Sender(Vec<u8>),
    /// The listening end sends: a returning receiver's hold or request
    /// ([`Resuming`]) bound to this binding.
    Receiver(Vec<u8>),
}

/// Whether a handshake failure ends the endpoint: only what an authenticated
/// peer caused (the two ends cannot agree on a transport, or on compression).
fn fatal(e: &TransportError) -> bool {
    matches!(
        e,
        TransportError::TransportMismatch(_)
            | TransportError::RdmaLibraries(_)
            | TransportError::NoCompression { .. }
    )
}

/// A handshake past the hello, as the acceptor sees it.
struct InFlight {
    id: u64,
    source: IpAddr,
    since: Instant,
    authenticated: bool,
    /// A second handle on its socket, to shut it down when it is pushed out.
    sock: TcpStream,
}

/// The handshakes in progress.
#[derive(Default)]
struct Pool {
    next_id: u64,
    v: Vec<InFlight>,
}

impl Pool {
    /// Makes room for one more handshake: pushes out the oldest one not yet
    /// authenticated of the source holding the most, when all places are
    /// taken. False when they all hold authenticated peers.
    fn make_room(&mut self) -> bool {
        if self.v.len() < MAX_HANDSHAKES {
            return true;
        }
        let open = self
            .v
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.authenticated)
            .map(|(i, e)| (i, e.source, e.since));
        let Some(i) = victim(open) else {
            return false;
        };
        let e = self.v.swap_remove(i);
        tracing::debug!("pushed a handshake out (all {MAX_HANDSHAKES} places taken)");
        reset(&e.sock);
        let _ = e.sock.shutdown(Shutdown::Both);
        true
    }

    fn insert(&mut self, source: IpAddr, since: Instant, sock: TcpStream) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.v.push(InFlight {
            id,
            source,
            since,
            authenticated: false,
            sock,
        });
        id
    }

    /// Removes handshake `id`; false when it was pushed out already.
    fn remove(&mut self, id: u64) -> bool {
        match self.v.iter().position(|e| e.id == id) {
            Some(i) => {
                self.v.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Marks handshake `id` authenticated (no longer pushed out); false
    /// when it was pushed out already.
    fn authenticated(&mut self, id: u64) -> bool {
        match self.v.iter_mut().find(|e| e.id == id) {
            Some(e) => {
                e.authenticated = true;
                true
            }
            None => false,
        }
    }
}

/// Which of `(index, source, since)` goes when a stage is full: the oldest
/// of the source that holds the most (of two that hold as many, the one
/// whose oldest is older).
fn victim(entries: impl Iterator<Item = (usize, IpAddr, Instant)>) -> Option<usize> {
    // Per source: how many, and its oldest (index, since).
    let mut by: HashMap<IpAddr, (usize, usize, Instant)> = HashMap::new();
    for (i, src, since) in entries {
        let e = by.entry(src).or_insert((0, i, since));
        e.0 += 1;
        if since < e.2 {
            (e.1, e.2) = (i, since);
        }
    }
    by.into_values()
        .max_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)))
        .map(|(_, i, _)| i)
}

/// Closes with a reset, not a clean end of file, once the last handle goes.
fn reset(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// What the acceptor and the handshake threads share.
struct Shared {
    key: Vec<u8>,
    params: LocalParams,
    timeout: Duration,
    watch: Mutex<Watch>,
    /// Set when a newcomer shut the watched connection down.
    kicked: AtomicBool,
    /// A reconnecting receiver's stream binding: each admitted newcomer gets
    /// a hold bound to it at once ([`Acceptor::hold_with`]).
    hold: Mutex<Option<Vec<u8>>>,
    pool: Mutex<Pool>,
    /// Set when the acceptor is dropped.
    closed: AtomicBool,
}

/// The watched connection and what a newcomer must prove to replace it,
/// under one lock: a newcomer checked (or not) under one rule never replaces
/// a connection watched under another.
#[derive(Default)]
struct Watch {
    current: Option<TcpStream>,
    /// What an authenticated newcomer must prove ([`Acceptor::require`]).
    proof: Option<Proof>,
}

impl Shared {
    fn watch(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A listening endpoint's acceptor (see the module above): the authenticated
/// connections handed out by [`Acceptor::next`]. It keeps listening until
/// dropped, so that a peer whose connection died can come back
/// ([`crate::reconnect`]): once a connection is [watched](Acceptor::watch),
/// an admitted newcomer shuts it down (the reconnecting end noticed the loss
/// first; the old connection may still look alive here), which wakes
/// whatever waits on it.
pub struct Acceptor {
    rx: mpsc::Receiver<Outcome>,
    listener: Arc<Listener>,
    shared: Arc<Shared>,
}

impl Acceptor {
    /// Starts accepting on `l`, authenticating each peer with `key`.
    pub fn start(
        l: Listener,
        key: &[u8],
        params: &LocalParams,
        timeout: Duration,
    ) -> Result<Acceptor, TransportError> {
        let (tx, rx) = mpsc::channel::<Outcome>();
        l.socket()
            .set_nonblocking(true)
            .map_err(TransportError::SocketOption)?;
        let l = Arc::new(l);
        let shared = Arc::new(Shared {
            key: key.to_vec(),
            params: params.clone(),
            timeout,
            watch: Mutex::new(Watch::default()),
            kicked: AtomicBool::new(false),
            hold: Mutex::new(None),
            pool: Mutex::new(Pool::default()),
            closed: AtomicBool::new(false),
        });
        let (acc, sh) = (l.clone(), shared.clone());
        std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || Sorter::new(sh, tx).run(&acc))
            .map_err(|e| TransportError::Io {
                context: "starting the acceptor thread",
                source: e,
            })?;
        Ok(Acceptor {
            rx,
            listener: l,
            shared,
        })
    }

    /// The next peer that authenticates (and, once [`Acceptor::require`]
    /// was called, proves itself), waiting until `deadline` (`None`: for
    /// ever); `Ok(None)` once the deadline passed. Failed handshakes are
    /// dropped with a line at `-v`; a fatal one (an authenticated peer whose
    /// transport cannot be reconciled) ends the wait.
    pub fn next(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Option<(TcpStream, Negotiated)>, TransportError> {
        loop {
            let got = match deadline {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => self
                    .rx
                    .recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            let (peer, r) = match got {
                Ok(o) => o,
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(TransportError::Io {
                        context: "accepting connections",
                        source: std::io::Error::other("the acceptor stopped"),
                    })
                }
            };
            match r {
                Ok(won) => return Ok(Some(won)),
                Err(e) if fatal(&e) => return Err(e),
                Err(e @ TransportError::Accept(_)) => return Err(e),
                Err(e @ TransportError::AuthFailed { .. }) => {
                    tracing::warn!("{e} (wrong key?); still waiting for the sender");
                }
                Err(e @ TransportError::NotThisStream { .. }) => {
                    tracing::warn!("{e} (another transfer started with this key?)");
                }
                Err(e) => tracing::info!("{peer}: dropped: {e}; still waiting"),
            }
        }
    }

    /// Whether a newcomer shut the watched connection down since the last
    /// call (its end then looks closed here, but the peer came back).
    pub fn take_kicked(&self) -> bool {
        self.shared.kicked.swap(false, Ordering::SeqCst)
    }

    /// A reconnecting receiver's acceptor, from its stream's first
    /// connection on: every admitted newcomer is sent a hold bound to the
    /// stream's `binding` at once ([`rdpipe_wire::resume::Resuming`]),
    /// from the handshake's thread, so that a returning sender learns that
    /// the receiver is alive while its stream loop may be blocked on its
    /// output, and waits for the request it sends from there.
    pub fn hold_with(&self, binding: &[u8]) {
        if let Ok(mut h) = self.shared.hold.lock() {
            *h = Some(binding.to_vec());
        }
    }

    /// From now on an authenticated newcomer is admitted (handed out, and
    /// replacing the watched connection) only once it opened with `proof`
    /// within [`PROOF_WITHIN`]; else it is reset and reported as
    /// [`TransportError::NotThisStream`]. What it sent stays unread for
    /// the hop's resume exchange.
    pub fn require(&self, proof: Proof) {
        self.shared.watch().proof = Some(proof);
    }

    /// Stops watching the current connection: the hop gave it up, and our
    /// handle must not keep it open (its reset would not leave).
    pub fn unwatch(&self) {
        self.shared.watch().current.take();
    }

    /// From now on, an admitted newcomer shuts `s` down (a peer coming back
    /// replaces it).
    pub fn watch(&self, s: &TcpStream) {
        if let Ok(c) = s.try_clone() {
            self.shared.watch().current = Some(c);
        }
    }
}

impl Drop for Acceptor {
    /// The port closes: the acceptor wakes, finds it closed and ends,
    /// dropping the connections that had not sent a hello; handshakes still
    /// in progress end on their own deadline and find nobody listening for
    /// their outcome.
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        let _ = socket2::SockRef::from(self.listener.socket()).shutdown(Shutdown::Both);
    }
}

/// A connection accepted whose hello has not arrived yet.
struct Unsorted {
    s: TcpStream,
    peer: String,
    source: IpAddr,
    since: Instant,
    hello: [u8; HELLO_LEN],
    got: usize,
}

/// What reading a waiting connection came to.
enum Read1 {
    /// Its hello is not all there yet.
    Waiting,
    /// Its whole hello arrived, the prefix checked.
    Hello,
    /// Not a hello, or closed before one: why.
    Drop(String),
    /// A hello of another protocol version (why): answered with ours, so
    /// that its end reports the versions.
    OtherVersion(String),
}

impl Unsorted {
    /// Reads what the peer sent of its hello so far (the socket does not
    /// block), never past the hello.
    fn read(&mut self) -> Read1 {
        loop {
            if self.got == HELLO_LEN {
                return Read1::Hello;
            }
            match self.s.read(&mut self.hello[self.got..]) {
                Ok(0) => return Read1::Drop("connection closed before its hello".into()),
                Ok(n) => {
                    let before = self.got;
                    self.got += n;
                    if before < HELLO_PREFIX_LEN && self.got >= HELLO_PREFIX_LEN {
                        let mut p = [0u8; HELLO_PREFIX_LEN];
                        p.copy_from_slice(&self.hello[..HELLO_PREFIX_LEN]);
                        if let Err(e) = Hello::check_prefix(&p) {
                            return if p[..4] == MAGIC {
                                Read1::OtherVersion(e.to_string())
                            } else {
                                Read1::Drop(e.to_string())
                            };
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Read1::Waiting,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Read1::Drop(format!("{e} before its hello")),
            }
        }
    }
}

/// Lines at `-v` about connections dropped before their hello, at most per
/// second (the rest at `-vv`, counted in the next line): a flood must not
/// flood the log.
const DROP_LINES: u32 = 10;

/// Says that connections were dropped before their hello, at most
/// [`DROP_LINES`] lines a second at `-v`.
struct DropLog {
    since: Instant,
    lines: u32,
    held: u64,
}

impl DropLog {
    fn dropped(&mut self, peer: &str, why: &str) {
        let now = Instant::now();
        if now >= self.since + Duration::from_secs(1) {
            (self.since, self.lines) = (now, 0);
        }
        if self.lines >= DROP_LINES {
            self.held += 1;
            tracing::debug!("{peer}: dropped: {why}");
            return;
        }
        self.lines += 1;
        if self.held > 0 {
            tracing::info!(
                "{peer}: dropped: {why}; still waiting (and {} more connections dropped before \
                 their hello since the last such line)",
                self.held
            );
            self.held = 0;
        } else {
            tracing::info!("{peer}: dropped: {why}; still waiting");
        }
    }
}

/// The acceptor thread: accepts, sorts out the connections that send a
/// hello, hands those to handshake threads.
struct Sorter {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Outcome>,
    /// Oldest first.
    waiting: VecDeque<Unsorted>,
    log: DropLog,
    paused_until: Option<Instant>,
}

impl Sorter {
    fn new(shared: Arc<Shared>, tx: mpsc::Sender<Outcome>) -> Sorter {
        Sorter {
            shared,
            tx,
            waiting: VecDeque::new(),
            log: DropLog {
                since: Instant::now(),
                lines: 0,
                held: 0,
            },
            paused_until: None,
        }
    }

    fn run(mut self, l: &Listener) {
        // A shorter --handshake-timeout bounds the wait for the hello too.
        let within = HELLO_WITHIN.min(self.shared.timeout);
        loop {
            if self.shared.closed.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            while self
                .waiting
                .front()
                .is_some_and(|u| now >= u.since + within)
            {
                if let Some(u) = self.waiting.pop_front() {
                    let why = format!(
                        "timed out waiting for its hello ({} s)",
                        within.as_secs_f64()
                    );
                    self.drop_one(u, &why);
                }
            }
            if self.paused_until.is_some_and(|t| now >= t) {
                self.paused_until = None;
            }
            let accepting = self.paused_until.is_none();
            let mut wait = POLL_AT_MOST;
            if let Some(u) = self.waiting.front() {
                wait = wait.min((u.since + within).saturating_duration_since(now));
            }
            if let Some(t) = self.paused_until {
                wait = wait.min(t.saturating_duration_since(now));
            }
            let (listener_ready, ready) = {
                let mut fds = Vec::with_capacity(self.waiting.len() + 1);
                let on_listener = if accepting {
                    PollFlags::IN
                } else {
                    PollFlags::empty()
                };
                fds.push(PollFd::new(l.socket(), on_listener));
                fds.extend(
                    self.waiting
                        .iter()
                        .map(|u| PollFd::new(&u.s, PollFlags::IN)),
                );
                // Rounded up: a deadline is never polled for as zero early.
                let ms = wait.as_micros().div_ceil(1000) as i32;
                match poll(&mut fds, ms) {
                    Ok(_) => {}
                    Err(Errno::INTR) => continue,
                    Err(e) => {
                        let _ = self.tx.send((
                            "listener".into(),
                            Err(TransportError::Accept(io::Error::from(e))),
                        ));
                        return;
                    }
                }
                let ready: Vec<bool> = fds[1..].iter().map(|f| !f.revents().is_empty()).collect();
                (!fds[0].revents().is_empty(), ready)
            };
            // The hellos that came first: a connection's hello is read
            // before newer connections can push it out.
            let mut keep = VecDeque::with_capacity(self.waiting.len());
            let waiting = std::mem::take(&mut self.waiting);
            for (mut u, r) in waiting.into_iter().zip(ready) {
                if r {
                    match u.read() {
                        Read1::Waiting => keep.push_back(u),
                        other => self.settle(u, other),
                    }
                } else {
                    keep.push_back(u);
                }
            }
            self.waiting = keep;
            if listener_ready && accepting && !self.accept(l) {
                return;
            }
        }
    }

    /// Accepts up to [`ACCEPT_BATCH`] connections; false when the listener
    /// failed for good (or was closed).
    fn accept(&mut self, l: &Listener) -> bool {
        for _ in 0..ACCEPT_BATCH {
            let s = match l.socket().accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) => {
                    if self.shared.closed.load(Ordering::SeqCst) {
                        return false;
                    }
                    match Errno::from_io_error(&e) {
                        // The connection went before we took it, or a
                        // firewall refused it: the next one.
                        Some(Errno::CONNABORTED | Errno::PROTO | Errno::PERM | Errno::INTR) => {
                            continue
                        }
                        // Out of descriptors or memory: free a place, pause.
                        Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM) => {
                            tracing::info!("accepting a connection: {e}; pausing");
                            if let Some(u) = self.waiting.pop_front() {
                                self.drop_one(u, "pushed out (no descriptors left)");
                            }
                            self.paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                            return true;
                        }
                        _ => {
                            let _ = self
                                .tx
                                .send(("listener".into(), Err(TransportError::Accept(e))));
                            return false;
                        }
                    }
                }
            };
            let peer = peer_name(&s);
            let source = s
                .peer_addr()
                .map(|a| a.ip().to_canonical())
                .unwrap_or(IpAddr::from([0, 0, 0, 0]));
            if tune(&s).is_err() || s.set_nonblocking(true).is_err() {
                reset(&s);
                continue;
            }
            tracing::debug!("accepted a connection from {peer}");
            let mut u = Unsorted {
                s,
                peer,
                source,
                since: Instant::now(),
                hello: [0u8; HELLO_LEN],
                got: 0,
            };
            match u.read() {
                Read1::Waiting => self.waiting.push_back(u),
                other => {
                    self.settle(u, other);
                    continue;
                }
            }
            while self.waiting.len() > MAX_UNSORTED {
                self.push_out();
            }
        }
        true
    }

    /// Frees a place among the connections waiting for a hello: the oldest
    /// of the source that holds the most goes, unless its hello arrived.
    fn push_out(&mut self) {
        let all = self
            .waiting
            .iter()
            .enumerate()
            .map(|(i, u)| (i, u.source, u.since));
        let Some(i) = victim(all) else { return };
        let Some(mut u) = self.waiting.remove(i) else {
            return;
        };
        match u.read() {
            Read1::Waiting => self.drop_one(
                u,
                &format!("pushed out by newer connections ({MAX_UNSORTED} without a hello)"),
            ),
            other => self.settle(u, other),
        }
    }

    /// A waiting connection's fate once its read came to `r` (not
    /// [`Read1::Waiting`]).
    fn settle(&mut self, u: Unsorted, r: Read1) {
        match r {
            Read1::Hello => self.promote(u),
            Read1::Drop(why) => self.drop_one(u, &why),
            Read1::OtherVersion(why) => {
                // Our hello tells its end which version we speak; a clean
                // close, so that it reads it.
                if let Ok(h) = our_hello(&self.shared.params) {
                    let mut s = &u.s;
                    let _ = s.write_all(&h.encode());
                }
                let _ = u.s.shutdown(Shutdown::Write);
                self.log.dropped(&u.peer, &why);
            }
            Read1::Waiting => self.waiting.push_back(u),
        }
    }

    fn drop_one(&mut self, u: Unsorted, why: &str) {
        reset(&u.s);
        self.log.dropped(&u.peer, why);
    }

    /// A connection whose hello arrived: to a handshake thread of its own.
    fn promote(&mut self, u: Unsorted) {
        let other = match u.s.set_nonblocking(false).and_then(|()| u.s.try_clone()) {
            Ok(c) => c,
            Err(_) => return reset(&u.s),
        };
        let id = {
            let mut pool = self.shared.pool();
            if !pool.make_room() {
                drop(pool);
                tracing::info!(
                    "{}: dropped: {MAX_HANDSHAKES} authenticated peers are being checked",
                    u.peer
                );
                return reset(&u.s);
            }
            pool.insert(u.source, u.since, other)
        };
        let (sh, tx) = (self.shared.clone(), self.tx.clone());
        let spawned = std::thread::Builder::new()
            .name("handshake".into())
            .stack_size(HANDSHAKE_STACK)
            .spawn(move || shake(u, id, &sh, &tx));
        if spawned.is_err() {
            self.shared.pool().remove(id);
            tracing::info!("cannot start a handshake thread: connection dropped");
        }
    }
}

/// A handshake thread: the rest of the handshake, the proof when one is
/// required, then the connection to [`Acceptor::next`].
fn shake(u: Unsorted, id: u64, sh: &Shared, tx: &mpsc::Sender<Outcome>) {
    let Unsorted {
        mut s,
        peer,
        since,
        hello,
        ..
    } = u;
    let r = handshake_accepted(&mut s, &sh.key, &sh.params, sh.timeout, since, hello);
    let n = match r {
        Ok(n) => n,
        Err(e) => {
            if sh.pool().remove(id) {
                let _ = tx.send((peer, Err(e)));
            } else {
                tracing::info!("{peer}: dropped: pushed out by newer handshakes ({e})");
            }
            return;
        }
    };
    // Authenticated: no longer pushed out by peers that are not.
    if !sh.pool().authenticated(id) {
        tracing::info!("{peer}: dropped: pushed out by newer handshakes");
        return reset(&s);
    }
    let proof = sh.watch().proof.clone();
    let checked = match &proof {
        None => Ok(()),
        Some(p) => check_proof(&s, &n, p),
    };
    sh.pool().remove(id);
    if let Err(e) = checked {
        reset(&s);
        let _ = tx.send((
            peer.clone(),
            Err(TransportError::NotThisStream {
                peer,
                source: Box::new(e),
            }),
        ));
        return;
    }
    // This stream's other end is back (or, before a stream runs, a peer of
    // this key): the connection it replaces is dead to it, end it here too.
    // One that came unchecked while the stream began replaces nothing (the
    // hop's resume exchange refuses it).
    let admitted = {
        let mut w = sh.watch();
        let admitted = proof.is_some() || w.proof.is_none();
        if let Some(old) = w.current.take_if(|_| admitted) {
            sh.kicked.store(true, Ordering::SeqCst);
            let _ = old.shutdown(Shutdown::Both);
        }
        admitted
    };
    let binding = sh.hold.lock().ok().and_then(|h| h.clone());
    if let Some(b) = binding.filter(|_| admitted) {
        // A failed write shows in the exchange.
        let _ = s.write_all(&Resuming::hold(&n.keys, &b));
    }
    // Nobody listens once the endpoint ended: the connection just closes.
    let _ = tx.send((peer, Ok((s, n))));
}

/// Checks that an authenticated newcomer opened with `proof`, leaving the
/// message unread for the hop's resume exchange.
fn check_proof(s: &TcpStream, n: &Negotiated, proof: &Proof) -> Result<(), TransportError> {
    let peer = n.peer_addr.as_str();
    let b = peek_message(s, peer, Instant::now() + PROOF_WITHIN)?;
    match proof {
        Proof::Sender(binding) => Returning::verify(&b, &n.keys, binding).map(|_| ()),
        Proof::Receiver(binding) => Resuming::decode_bound(&b, &n.keys, binding).map(|_| ()),
    }
    .map_err(|e| protocol(peer, e))
}

/// The first [`RESUME_LEN`] bytes the peer sends, peeked (left in the
/// socket), by `until`.
fn peek_message(
    s: &TcpStream,
    peer: &str,
    until: Instant,
) -> Result<[u8; RESUME_LEN], TransportError> {
    let mut b = [0u8; RESUME_LEN];
    let r = loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err(conn_error(peer, io::ErrorKind::TimedOut.into()));
        }
        s.set_read_timeout(Some(left))
            .map_err(TransportError::SocketOption)?;
        match rustix::net::recv(
            s,
            &mut b,
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::WAITALL,
        ) {
            Ok(n) if n == RESUME_LEN => break Ok(b),
            Ok(0) => break Err(conn_error(peer, io::ErrorKind::UnexpectedEof.into())),
            // Part of it by the socket's timeout, or a signal: the deadline
            // decides.
            Ok(_) | Err(Errno::INTR | Errno::AGAIN) => {}
            Err(e) => break Err(conn_error(peer, io::Error::from(e))),
        }
    };
    s.set_read_timeout(None)
        .map_err(TransportError::SocketOption)?;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_holding_the_most_loses_its_oldest() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        // b's one connection is the oldest of all, but a holds more.
        let v = [(0, b, at(0)), (1, a, at(5)), (2, a, at(1)), (3, a, at(9))];
        assert_eq!(victim(v.into_iter()), Some(2));
        // As many each: the older oldest goes.
        let v = [(0, a, at(4)), (1, b, at(2)), (2, a, at(7)), (3, b, at(8))];
        assert_eq!(victim(v.into_iter()), Some(1));
        assert_eq!(victim(std::iter::empty()), None);
    }

    #[test]
    fn a_peek_waits_for_the_whole_message_and_leaves_it_there() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let msg: Vec<u8> = (0..RESUME_LEN as u8).collect();
        c.write_all(&msg[..10]).unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            c.write_all(&msg[10..]).unwrap();
            c
        });
        let until = Instant::now() + Duration::from_secs(5);
        let b = peek_message(&s, "peer", until).unwrap();
        let _c = writer.join().unwrap();
        assert_eq!(&b[..], &(0..RESUME_LEN as u8).collect::<Vec<u8>>()[..]);
        let mut again = [0u8; RESUME_LEN];
        s.read_exact(&mut again).unwrap();
        assert_eq!(again, b);
        // Nothing more comes: the deadline ends the wait.
        let e = peek_message(&s, "peer", Instant::now() + Duration::from_millis(100));
        assert!(matches!(
            e,
            Err(TransportError::PeerGone {
                cause: crate::error::GoneCause::TimedOut,
                ..
            })
        ));
    }
}
