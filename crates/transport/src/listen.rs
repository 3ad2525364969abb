//! Accepting until a peer authenticates. A listening endpoint hands every
//! connection to a handshake thread of its own (at most [`MAX_PENDING`] at
//! once; more are closed at once) and takes the first one that passes the
//! mutual authentication. Port scans, empty connections, garbage, wrong keys
//! and slow trickles are dropped with a line at `-v` (a wrong key with a
//! warning, since it is usually a real sender with a mistyped key) and the
//! endpoint goes on waiting; each handshake has its own deadline
//! (`--handshake-timeout`). A failure after authentication (the two ends'
//! `--transport` cannot be reconciled) ends the endpoint like any other.

use crate::connect::Listener;
use crate::handshake::{handshake, LocalParams, Negotiated};
use crate::TransportError;
use rdpipe_wire::resume::Resuming;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Handshakes in progress at most; connections beyond are closed unanswered.
pub const MAX_PENDING: usize = 16;

type Outcome = (String, Result<(TcpStream, Negotiated), TransportError>);

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

/// A listening endpoint's acceptor: every connection to a handshake thread of
/// its own, the authenticated ones handed out by [`Acceptor::next`]. It keeps
/// listening until dropped, so that a peer whose connection died can come
/// back ([`crate::reconnect`]): once a connection is [watched](Acceptor::watch),
/// a newly authenticated peer shuts it down (the reconnecting end noticed the
/// loss first; the old connection may still look alive here), which wakes
/// whatever waits on it.
pub struct Acceptor {
    rx: mpsc::Receiver<Outcome>,
    listener: Arc<Listener>,
    current: Arc<Mutex<Option<TcpStream>>>,
    /// Set when a newcomer shut the watched connection down.
    kicked: Arc<AtomicBool>,
    /// A reconnecting receiver's stream binding: each newly authenticated
    /// peer gets a hold bound to it at once ([`Acceptor::hold_with`]).
    hold: Arc<Mutex<Option<Vec<u8>>>>,
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
        let pending = Arc::new(AtomicUsize::new(0));
        let l = Arc::new(l);
        let current: Arc<Mutex<Option<TcpStream>>> = Arc::new(Mutex::new(None));
        let kicked = Arc::new(AtomicBool::new(false));
        let hold: Arc<Mutex<Option<Vec<u8>>>> = Arc::new(Mutex::new(None));
        let (pending, acc, kick) = (pending.clone(), l.clone(), kicked.clone());
        let holding = hold.clone();
        let (key, params, cur) = (key.to_vec(), params.clone(), current.clone());
        std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || loop {
                let mut s = match acc.accept() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(("listener".into(), Err(e)));
                        return;
                    }
                };
                let peer = s
                    .peer_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|_| "peer".into());
                if pending.load(Ordering::SeqCst) >= MAX_PENDING {
                    tracing::info!(
                        "{peer}: dropped unanswered ({MAX_PENDING} handshakes in progress)"
                    );
                    continue;
                }
                pending.fetch_add(1, Ordering::SeqCst);
                let (tx, pending, cur) = (tx.clone(), pending.clone(), cur.clone());
                let (kick, holding) = (kick.clone(), holding.clone());
                let (key, params) = (key.clone(), params.clone());
                let spawned =
                    std::thread::Builder::new()
                        .name("handshake".into())
                        .spawn(move || {
                            let r = handshake(&mut s, &key, &params, timeout).map(|n| (s, n));
                            pending.fetch_sub(1, Ordering::SeqCst);
                            if r.is_ok() {
                                // A peer of this key is back: the connection it
                                // replaces is dead to it, end it here too.
                                let old = cur.lock().map(|mut c| c.take());
                                if let Ok(Some(old)) = old {
                                    kick.store(true, Ordering::SeqCst);
                                    let _ = old.shutdown(std::net::Shutdown::Both);
                                }
                            }
                            let r = r.map(|(mut s, n)| {
                                let binding = holding.lock().ok().and_then(|h| h.clone());
                                if let Some(b) = binding {
                                    // A failed write shows in the exchange.
                                    let _ = s.write_all(&Resuming::hold(&n.keys, &b));
                                }
                                (s, n)
                            });
                            // Nobody listens once the endpoint ended: the
                            // connection just closes.
                            let _ = tx.send((peer, r));
                        });
                if spawned.is_err() {
                    tracing::info!("cannot start a handshake thread: connection dropped");
                }
            })
            .map_err(|e| TransportError::Io {
                context: "starting the acceptor thread",
                source: e,
            })?;
        Ok(Acceptor {
            rx,
            listener: l,
            current,
            kicked,
            hold,
        })
    }

    /// The next peer that authenticates, waiting until `deadline` (`None`:
    /// for ever); `Ok(None)` once the deadline passed. Failed handshakes are
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
                Err(e) => tracing::info!("{peer}: dropped: {e}; still waiting"),
            }
        }
    }

    /// Whether a newcomer shut the watched connection down since the last
    /// call (its end then looks closed here, but the peer came back).
    pub fn take_kicked(&self) -> bool {
        self.kicked.swap(false, Ordering::SeqCst)
    }

    /// A reconnecting receiver's acceptor, from its stream's first
    /// connection on: every newly authenticated peer is sent a hold bound to
    /// the stream's `binding` at once ([`rdpipe_wire::resume::Resuming`]),
    /// from the handshake's thread, so that a returning sender learns that
    /// the receiver is alive while its stream loop may be blocked on its
    /// output, and waits for the request it sends from there.
    pub fn hold_with(&self, binding: &[u8]) {
        if let Ok(mut h) = self.hold.lock() {
            *h = Some(binding.to_vec());
        }
    }

    /// Stops watching the current connection: the hop gave it up, and our
    /// handle must not keep it open (its reset would not leave).
    pub fn unwatch(&self) {
        if let Ok(mut cur) = self.current.lock() {
            cur.take();
        }
    }

    /// From now on, a newly authenticated peer shuts `s` down (a peer coming
    /// back replaces it).
    pub fn watch(&self, s: &TcpStream) {
        if let (Ok(c), Ok(mut cur)) = (s.try_clone(), self.current.lock()) {
            *cur = Some(c);
        }
    }
}

impl Drop for Acceptor {
    /// The port closes: the acceptor's blocked accept() fails and it ends;
    /// handshakes still in progress end on their own deadline and find nobody
    /// listening for their outcome.
    fn drop(&mut self) {
        let _ = socket2::SockRef::from(self.listener.socket()).shutdown(std::net::Shutdown::Both);
    }
}

/// Accepts on `l` until a peer authenticates with `key`; returns its connection
/// and what was negotiated. The port closes once a peer won.
pub fn accept_authenticated(
    l: Listener,
    key: &[u8],
    params: &LocalParams,
    timeout: Duration,
) -> Result<(TcpStream, Negotiated), TransportError> {
    let a = Acceptor::start(l, key, params, timeout)?;
    let won = a.next(None)?;
    won.ok_or_else(|| TransportError::Io {
        context: "accepting connections",
        source: std::io::Error::other("the acceptor stopped"),
    })
}
