//! A hop that survives the loss of its connection while both ends live: a
//! reset, a NAT or firewall that forgot the connection, an RDMA queue pair
//! in the error state after a switch reboot. The end that dialed dials again,
//! the end that listened keeps listening ([`crate::listen::Acceptor`]); the
//! new connection authenticates like the first one, then the receiver says
//! how many verified bytes it holds and the sender resends from there out of
//! its replay window ([`crate::replay`]), for up to `--reconnect-timeout`.
//!
//! One stream across connections: both ends keep the stream hasher of the
//! first connection (its MAC keyed with that connection's stream-MAC key),
//! the sender's End covers the whole stream and is tagged under the last
//! connection's keys. The resume messages are tagged under the new
//! connection's keys over a binding derived from the first connection's
//! ([`rdpipe_wire::resume::stream_binding`]), so only the other end of this
//! very stream can resume it: an attacker who resets the connection cannot
//! authenticate a new one, and old bytes replayed into a new connection fail
//! its keys (docs/security.md).
//!
//! The exchange on a new connection, each message bound to the stream: the
//! sender opens with [`Returning`], the receiver sends its hold (when its
//! side took the connection while its stream loop was busy) and its
//! request, the sender answers. The end that listens lets a newcomer replace
//! the connection its stream still runs on only once the newcomer's first
//! message verified ([`crate::listen::Proof`]), so a peer that merely holds
//! the key (a second rdsend, a second receiver) cannot end a live transfer;
//! and any answer that is not this stream's drops that connection only,
//! while the hop keeps waiting for its peer within `--reconnect-timeout`.

use crate::connect::{connect_attempts, REDIAL_ATTEMPT};
use crate::error::GoneCause;
use crate::frame_io::{conn_error, protocol};
use crate::handshake::{dial, handshake, LocalParams, Negotiated};
use crate::listen::{Acceptor, Proof};
use crate::session::{listen_announced, local_params, Endpoint, Options};
use crate::TransportError;
use rdpipe_wire::resume::{
    ResumeReply, ResumeRequest, ResumeVerdict, Resuming, Returning, HOLD_MAGIC, RESUME_LEN,
    RESUME_REPLY_LEN,
};
use rdpipe_wire::{Role, WireError};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use crate::session::{HopState, Reconnect};

/// How a hop gets its connections, again and again. [`Link::open`] is the
/// one place that dials or listens: a transfer that does not reconnect
/// takes the first connection and drops the link ([`crate::endpoint`]).
pub(crate) enum Link {
    /// Dial `host:port` (the peer listens).
    Dial { host: String, port: u16 },
    /// Keep listening; the peer dials.
    Accept(Acceptor),
}

/// How long to wait between two failed dials of a reconnect.
const REDIAL_PAUSE: Duration = Duration::from_millis(100);

impl Link {
    /// The first connection of `endpoint`, and the link to get the next ones.
    pub(crate) fn open(
        endpoint: Endpoint,
        opts: &Options,
        role: Role,
    ) -> Result<(Link, TcpStream, Negotiated), TransportError> {
        let params = local_params(opts, role);
        match endpoint {
            Endpoint::Connect {
                host,
                port,
                timeout,
            } => {
                let (s, n) = dial(
                    &host,
                    port,
                    timeout,
                    &opts.key,
                    &params,
                    opts.handshake_timeout,
                )?;
                Ok((Link::Dial { host, port }, s, n))
            }
            Endpoint::Listen {
                bind,
                port,
                announce,
            } => {
                let l = listen_announced(bind.as_deref(), port, announce)?;
                let a = Acceptor::start(l, &opts.key, &params, opts.handshake_timeout)?;
                let (s, n) = a.next(None)?.ok_or_else(|| TransportError::Io {
                    context: "accepting connections",
                    source: std::io::Error::other("the acceptor stopped"),
                })?;
                Ok((Link::Accept(a), s, n))
            }
        }
    }

    /// Who the link reaches, for messages.
    pub(crate) fn describe(&self, peer: &str) -> String {
        match self {
            Link::Dial { host, port, .. } => format!("{host}:{port}"),
            Link::Accept(_) => peer.to_string(),
        }
    }

    /// Whether our acceptor shut the connection down for a peer that came back.
    pub(crate) fn kicked(&self) -> bool {
        match self {
            Link::Accept(a) => a.take_kicked(),
            Link::Dial { .. } => false,
        }
    }

    /// A receiver's link, once its stream began: see [`Acceptor::hold_with`].
    pub(crate) fn hold_with(&self, binding: &[u8]) {
        if let Link::Accept(a) = self {
            a.hold_with(binding);
        }
    }

    /// Once the stream of `role`'s end began: a newcomer replaces the live
    /// connection only once it opened with the message of the stream's
    /// other end bound to `binding` (see [`Acceptor::require`]): a
    /// returning sender's [`Returning`], a returning receiver's hold or
    /// request.
    pub(crate) fn require_bound(&self, role: Role, binding: &[u8]) {
        if let Link::Accept(a) = self {
            a.require(match role {
                Role::Receiver => Proof::Sender(binding.to_vec()),
                Role::Sender => Proof::Receiver(binding.to_vec()),
            });
        }
    }

    /// The connection was given up: see [`Acceptor::unwatch`].
    pub(crate) fn unwatch(&self) {
        if let Link::Accept(a) = self {
            a.unwatch();
        }
    }

    /// While `s` carries the stream, a peer coming back replaces it.
    pub(crate) fn watch(&self, s: &TcpStream) {
        if let Link::Accept(a) = self {
            a.watch(s);
        }
    }

    /// For a receiver that dials: a thread that dials again as soon as
    /// `conn` fails, while the stream loop may be blocked on its output
    /// ([`predial`]). `None` for a link that listens (its acceptor takes the
    /// sender's dial whenever it comes).
    pub(crate) fn predial(
        &self,
        conn: &TcpStream,
        opts: &Options,
        binding: &[u8],
    ) -> Option<Predial> {
        let Link::Dial { host, port } = self else {
            return None;
        };
        let dial = predial::Dial {
            redial: Redial::to(host, *port, opts, Role::Receiver),
            reconnect_timeout: opts.reconnect_timeout,
            binding: binding.to_vec(),
        };
        Predial::start(conn, dial)
    }

    /// The next authenticated connection, by `deadline`; `None` once it passed.
    pub(crate) fn again(
        &mut self,
        opts: &Options,
        role: Role,
        deadline: Instant,
    ) -> Result<Option<(TcpStream, Negotiated)>, TransportError> {
        match self {
            Link::Accept(a) => a.next(Some(deadline)),
            Link::Dial { host, port, .. } => Redial::to(host, *port, opts, role).until(
                deadline,
                Duration::MAX,
                &AtomicBool::new(false),
            ),
        }
    }
}

/// Where a dialing end dials again, and what it authenticates with.
pub(crate) struct Redial {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) key: Vec<u8>,
    pub(crate) params: LocalParams,
    pub(crate) handshake_timeout: Duration,
}

impl Redial {
    /// Dialing `host:port` again as `role`, with `opts`' key and timeout.
    fn to(host: &str, port: u16, opts: &Options, role: Role) -> Redial {
        Redial {
            host: host.to_string(),
            port,
            key: opts.key.clone(),
            params: local_params(opts, role),
            handshake_timeout: opts.handshake_timeout,
        }
    }

    /// Dials until a connection authenticates; `Ok(None)` once `deadline`
    /// passed or `stop` was set. Each attempt retries a refused connection
    /// for up to `slice` of the time left.
    pub(crate) fn until(
        &self,
        deadline: Instant,
        slice: Duration,
        stop: &AtomicBool,
    ) -> Result<Option<(TcpStream, Negotiated)>, TransportError> {
        let (host, port) = (self.host.as_str(), self.port);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || stop.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let r =
                connect_attempts(host, port, left.min(slice), REDIAL_ATTEMPT).and_then(|mut s| {
                    handshake(&mut s, &self.key, &self.params, self.handshake_timeout)
                        .map(|n| (s, n))
                });
            match r {
                Ok(won) => return Ok(Some(won)),
                // Missing RDMA libraries do not come back; a device that
                // is down (`--transport rdma` then finds no active one on
                // an end) may, with the link: retried as any failed dial.
                Err(e @ TransportError::RdmaLibraries(_)) => return Err(e),
                Err(e) => {
                    tracing::debug!("reconnecting to {host}:{port}: {e}");
                    std::thread::sleep(REDIAL_PAUSE.min(left));
                }
            }
        }
    }
}

/// Whether a failed connection is worth reconnecting: the path to the peer
/// failed (a reset, a timeout, an RDMA completion error or disconnect). Not
/// a verdict on the stream (a mismatch, tampering, an abort), our own input
/// or output failing, or the peer closing its end of the connection (a
/// clean end of file: its process ended or was killed; a middlebox that
/// drops a connection resets it or goes silent) unless that close was ours,
/// made for a peer that came back ([`Link::kicked`]). An RDMA loss says
/// nothing of why (a dead peer's queue pair and a failed link look alike),
/// so `tcp`, the hop's TCP connection beside it, is asked: a clean close
/// there means the peer ended.
pub(crate) fn lost(e: &TransportError, link: &Link, tcp: Option<&TcpStream>) -> bool {
    let cause = match e {
        TransportError::PeerGone { cause, .. } | TransportError::Truncated { cause, .. } => cause,
        TransportError::Rdma(_) => return rdma_path_failed(link, tcp),
        _ => return false,
    };
    if rdma(cause) {
        return rdma_path_failed(link, tcp);
    }
    !closed(cause) || link.kicked()
}

/// How long an RDMA loss waits for the TCP connection beside it to show
/// the peer's clean close (its kernel closes both at once when it dies).
const CLOSE_GRACE: Duration = Duration::from_millis(300);

/// After an RDMA loss: a path failure unless the peer closed the TCP
/// connection cleanly (and not for our own acceptor's kick).
fn rdma_path_failed(link: &Link, tcp: Option<&TcpStream>) -> bool {
    if link.kicked() {
        return true;
    }
    let Some(s) = tcp else { return true };
    let clean_close =
        s.set_read_timeout(Some(CLOSE_GRACE)).is_ok() && matches!(s.peek(&mut [0u8; 1]), Ok(0));
    let _ = s.set_read_timeout(None);
    !clean_close
}

/// An RDMA cause of a loss.
fn rdma(c: &GoneCause) -> bool {
    match c {
        GoneCause::RdmaLost(_)
        | GoneCause::RdmaDisconnected
        | GoneCause::RdmaStalled(_)
        | GoneCause::RdmaDeviceRemoved
        | GoneCause::Rdma(_) => true,
        GoneCause::Unconfirmed(c) => rdma(c),
        _ => false,
    }
}

/// A clean end of file from the peer.
fn closed(c: &GoneCause) -> bool {
    match c {
        GoneCause::Closed | GoneCause::NoConfirmation => true,
        GoneCause::Unconfirmed(c) => closed(c),
        _ => false,
    }
}

/// Closes a connection given up for a new one with a reset, not a clean
/// end of file: the peer must not take it for our end ([`lost`]).
pub(crate) fn reset(guard: Option<TcpStream>) {
    if let Some(g) = guard {
        let _ = socket2::SockRef::from(&g).set_linger(Some(Duration::ZERO));
    }
}

/// Reads one resume message of `N` bytes within `timeout` (`None`: for as
/// long as the connection stands).
pub(crate) fn read_message<const N: usize>(
    s: &mut TcpStream,
    peer: &str,
    timeout: Option<Duration>,
) -> Result<[u8; N], TransportError> {
    s.set_read_timeout(timeout)
        .map_err(TransportError::SocketOption)?;
    let mut b = [0u8; N];
    let r = s.read_exact(&mut b).map_err(|e| conn_error(peer, e));
    s.set_read_timeout(None)
        .map_err(TransportError::SocketOption)?;
    r.map(|_| b)
}

/// Reads the receiver's resume request on a new connection of a
/// reconnecting hop: the first message within `timeout`, as any message of
/// the exchange. That may be a hold instead ([`Resuming::Hold`], bound to
/// this stream: only its receiver can send one): the receiver's side
/// authenticated the connection while its stream loop is busy, blocked on
/// an output whose consumer stopped reading (`zfs recv` committing), and it
/// asks once that loop gets to it. The sender then waits for the request as
/// it waits on a full connection, with no deadline, for as long as the
/// connection stands (the keepalive and user timeout every connection has,
/// [`crate::connect::tune`], end the wait when the receiver's host or the
/// path dies). `Ok((request, held))`: whether a hold came first. A fan-out
/// chain's hop reads its request the same way (`binding` empty there).
pub(crate) fn await_request(
    s: &mut TcpStream,
    n: &Negotiated,
    binding: &[u8],
    timeout: Duration,
) -> Result<(ResumeRequest, bool), (TransportError, bool)> {
    let peer = n.peer_addr.as_str();
    let decode = |b: &[u8; RESUME_LEN]| {
        Resuming::decode_bound(b, &n.keys, binding).map_err(|e| protocol(peer, e))
    };
    let first = read_message::<RESUME_LEN>(s, peer, Some(timeout)).map_err(|e| (e, false))?;
    match decode(&first).map_err(|e| (e, false))? {
        Resuming::Request(r) => Ok((r, false)),
        Resuming::Hold => {
            tracing::debug!("{peer}: held: waiting for its request");
            let b = read_message::<RESUME_LEN>(s, peer, None).map_err(|e| (e, true))?;
            match decode(&b).map_err(|e| (e, true))? {
                Resuming::Request(r) => Ok((r, true)),
                Resuming::Hold => {
                    Err((protocol(peer, WireError::BadResumeMagic(HOLD_MAGIC)), true))
                }
            }
        }
    }
}

/// What the resume exchange on a new connection came to.
pub(crate) enum Rejoined<T> {
    /// The stream goes on.
    Yes(T),
    /// Not on this connection: the peer is not this stream's other end (a
    /// message was forged, or bound to another stream), or the connection
    /// failed during the exchange. Drop it and keep waiting.
    Retry(TransportError),
    /// The stream's other end proved itself alive on this connection (its
    /// hold), and then the connection failed: a new outage, which gets a
    /// `--reconnect-timeout` of its own.
    Lapsed(TransportError),
}

/// The sender's side of the exchange on a reconnected hop: that we are this
/// stream's sender ([`Returning`]), the receiver's request (bound to this
/// stream), our answer from what `input` kept; the bytes to resend, or why
/// not.
pub(crate) fn answer_resume<R: crate::replay::Input>(
    s: &mut TcpStream,
    n: &Negotiated,
    first: &Negotiated,
    binding: &[u8],
    input: &mut crate::replay::Recorded<R>,
    timeout: Duration,
) -> Result<Rejoined<(u64, Vec<u8>)>, TransportError> {
    let peer = n.peer_addr.as_str();
    if let Some(e) = same_protection(n, first) {
        return Ok(Rejoined::Retry(e));
    }
    // First, that we are this stream's sender: a listening receiver lets
    // the connection replace its live one only then.
    if let Err(e) = s.write_all(&Returning::encode(&n.keys, binding)) {
        return Ok(Rejoined::Retry(conn_error(peer, e)));
    }
    let (req, held) = match await_request(s, n, binding, timeout) {
        Ok(r) => r,
        Err((e, false)) => return Ok(Rejoined::Retry(e)),
        Err((e, true)) => return Ok(Rejoined::Lapsed(e)),
    };
    let (reply, bytes) = input
        .resume_at(req.offset)
        .map_err(crate::replay::Resend::into_error)?;
    if let Err(e) = s.write_all(&reply.encode_bound(&n.keys, binding)) {
        let e = conn_error(peer, e);
        return Ok(if held {
            Rejoined::Lapsed(e)
        } else {
            Rejoined::Retry(e)
        });
    }
    bytes
        .map(|b| Rejoined::Yes((req.offset, b)))
        .map_err(crate::replay::Resend::into_error)
}

/// The receiver's side: ask for the stream from `offset` on, check that the
/// peer is this stream's sender ([`Returning`]) and its answer.
pub(crate) fn ask_resume(
    s: &mut TcpStream,
    n: &Negotiated,
    first: &Negotiated,
    binding: &[u8],
    offset: u64,
    timeout: Duration,
) -> Result<Rejoined<()>, TransportError> {
    let peer = n.peer_addr.as_str();
    if let Some(e) = same_protection(n, first) {
        return Ok(Rejoined::Retry(e));
    }
    if let Err(e) = s.write_all(&ResumeRequest { offset }.encode_bound(&n.keys, binding)) {
        return Ok(Rejoined::Retry(conn_error(peer, e)));
    }
    // The sender's first message, then its answer. Either one not bound to
    // this stream, or not one at all, is a peer that holds the key but is
    // not this stream's sender (a fresh rdsend sends data right away), or a
    // forgery: this connection is dropped and the hop keeps waiting.
    let returning = match read_message::<RESUME_LEN>(s, peer, Some(timeout)) {
        Ok(b) => b,
        Err(e) => return Ok(Rejoined::Retry(e)),
    };
    if let Err(e) = Returning::verify(&returning, &n.keys, binding) {
        return Ok(Rejoined::Retry(protocol(peer, e)));
    }
    let b = match read_message::<RESUME_REPLY_LEN>(s, peer, Some(timeout)) {
        Ok(b) => b,
        Err(e) => return Ok(Rejoined::Retry(e)),
    };
    let reply = match ResumeReply::decode_bound(&b, &n.keys, binding)
        .and_then(|r| r.check(offset).map(|()| r))
    {
        Ok(r) => r,
        Err(e) => return Ok(Rejoined::Retry(protocol(peer, e))),
    };
    if reply.verdict == ResumeVerdict::BeyondWindow {
        return Err(TransportError::BeyondWindow {
            offset,
            start: reply.window_start,
            end: reply.window_end,
        });
    }
    Ok(Rejoined::Yes(()))
}

/// A new connection must carry the stream under the protection it began with.
fn same_protection(n: &Negotiated, first: &Negotiated) -> Option<TransportError> {
    (n.integrity != first.integrity).then(|| {
        TransportError::TransportMismatch(format!(
            "the reconnection from {} is protected with {}, the stream began under {}",
            n.peer_addr,
            n.integrity.as_str(),
            first.integrity.as_str()
        ))
    })
}

mod hop;
mod predial;
pub(crate) use hop::{recv_reconnecting, send_reconnecting};
use predial::Predial;
