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
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Handshakes in progress at most; connections beyond are closed unanswered.
pub const MAX_PENDING: usize = 16;

type Outcome = (String, Result<(TcpStream, Negotiated), TransportError>);

/// Whether a handshake failure ends the endpoint: only what an authenticated
/// peer caused (the two ends cannot agree on a transport).
fn fatal(e: &TransportError) -> bool {
    matches!(
        e,
        TransportError::TransportMismatch(_) | TransportError::RdmaLibraries(_)
    )
}

/// Accepts on `l` until a peer authenticates with `key`; returns its connection
/// and what was negotiated.
pub fn accept_authenticated(
    l: Listener,
    key: &[u8],
    params: &LocalParams,
    timeout: Duration,
) -> Result<(TcpStream, Negotiated), TransportError> {
    let (tx, rx) = mpsc::channel::<Outcome>();
    let pending = Arc::new(AtomicUsize::new(0));
    let l = Arc::new(l);
    {
        // The acceptor: every connection to a handshake thread of its own.
        let (tx, pending, l) = (tx.clone(), pending.clone(), l.clone());
        let (key, params) = (key.to_vec(), params.clone());
        std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || loop {
                let mut s = match l.accept() {
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
                let (tx, pending) = (tx.clone(), pending.clone());
                let (key, params) = (key.clone(), params.clone());
                let spawned =
                    std::thread::Builder::new()
                        .name("handshake".into())
                        .spawn(move || {
                            let r = handshake(&mut s, &key, &params, timeout).map(|n| (s, n));
                            pending.fetch_sub(1, Ordering::SeqCst);
                            // Nobody listens once a peer won: the connection just closes.
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
    }
    drop(tx);
    let closer = l.clone();
    // Once a peer won (or the endpoint gives up), the port closes: the acceptor's
    // blocked accept() fails and it ends; handshakes still in progress end on
    // their own deadline and find nobody listening for their outcome.
    let close = move || {
        let _ = socket2::SockRef::from(closer.socket()).shutdown(std::net::Shutdown::Both);
    };
    loop {
        let (peer, r) = rx.recv().map_err(|_| TransportError::Io {
            context: "accepting connections",
            source: std::io::Error::other("the acceptor stopped"),
        })?;
        match r {
            Ok(won) => {
                close();
                return Ok(won);
            }
            Err(e) if fatal(&e) => {
                close();
                return Err(e);
            }
            Err(e @ TransportError::Accept(_)) => return Err(e),
            Err(e @ TransportError::AuthFailed { .. }) => {
                tracing::warn!("{e} (wrong key?); still waiting for the sender");
            }
            Err(e) => tracing::info!("{peer}: dropped: {e}; still waiting"),
        }
    }
}
