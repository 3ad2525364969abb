//! A fan-out chain's hops between sinks, which survive the death of a relay
//! host: when relay B of `A -> B -> C` dies, rdpipe has C listen anew and A
//! connect to it (a new hop with a new key, always over TCP); C says how many
//! bytes of the stream it already holds and A resends from there out of its
//! replay window ([`crate::replay`]), or refuses when that offset has left the
//! window, and C fails with [`TransportError::BeyondWindow`].
//!
//! The resume request and its answer ([`rdpipe_wire::resume`]) cross the new
//! connection right after its handshake authenticated, each tagged under a
//! key of that session, before the transport takes the connection over.
//!
//! Integrity across the re-link: every chain hop keys its stream MAC with the
//! chain's key ([`chain_stream_key`], from the secret rdpipe gives every sink)
//! instead of the session's. A keeps one hasher over everything it read for
//! the next hop, across both of its connections, and C one over everything it
//! wrote, across both of its own; C declares the stream good only when its
//! byte count, checksum and MAC equal those in A's End, which is tagged under
//! the new session's key. So bytes the dead relay mangled before it died, or
//! a resume at the wrong offset, fail C's check (see docs/security.md).
//!
//! A hop whose connection fails while both of its ends live (a link flap, a
//! reset) reconnects instead: for up to `--reconnect-timeout` the sender
//! dials the same sink again and the sink keeps listening on the same port
//! ([`crate::reconnect::Link`]), with the same key and the same resume
//! exchange; meanwhile both ends keep asking for a re-link, so a dead relay
//! is still re-linked around as soon as rdpipe orders it.
//! A sink blocked on its output when the hop is lost holds the returning
//! sender as a standalone receiver does (its acceptor's hold, or where it
//! dials, the thread that redials at once: [`crate::reconnect`]).

mod send;

pub use send::run_send_chain;

use crate::frame_io::{conn_error, protocol};
use crate::handshake::Negotiated;
use crate::pump::recv_stream_with;
use crate::reconnect::{read_message, HopState, Link, Reconnect};
use crate::session::{open_or_abort, progress_of, protection, Endpoint, Options, Report};
use crate::{select, TransportError};
use rdpipe_wire::resume::{
    chain_stream_key, ResumeReply, ResumeRequest, ResumeVerdict, RESUME_REPLY_LEN,
};
use rdpipe_wire::{Integrity, Role, StreamHasher, TransportPref, WireError};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// What a lost hop's end hears about a re-link when it asks.
pub enum RelinkPoll {
    /// Go on over this endpoint, under this key.
    To(Endpoint, Vec<u8>),
    /// rdpipe decided there is no re-link for this hop: it fails.
    Refused,
    /// No word yet.
    NotYet,
}

/// Asked with the stream offset at which a hop was lost and how long to
/// wait for an answer (zero: only look).
pub type Relink<'a> = &'a mut dyn FnMut(u64, Duration) -> RelinkPoll;

/// What a chain hop needs besides its [`Options`].
pub struct Chain<'a> {
    /// The chain's secret (the same on every sink): keys every chain hop's
    /// stream MAC.
    pub secret: &'a [u8],
    /// Where a lost hop re-links.
    pub relink: Relink<'a>,
    /// How long a lost hop waits for a re-link once it stopped trying to
    /// reconnect (at once with `--reconnect-timeout 0`).
    pub wait: Duration,
}

/// What a chain hop's resume messages and holds are bound to: nothing
/// beyond the connection's own keys. Each chain hop has a key of its own
/// that rdpipe made for this run and gave only to the hop's two ends (and a
/// re-link's new key only to the new pair), so a peer that authenticates is
/// the hop's other end; the stream's own binding would not carry over a
/// re-link to another peer.
const CHAIN_BINDING: &[u8] = &[];

/// How often a lost hop that is reconnecting looks for a re-link order.
const POLL: Duration = Duration::from_millis(500);

/// How a lost hop got its next connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rejoin {
    /// The same peer again, on the same link and key.
    Reconnected,
    /// Another peer (or a new listener), by rdpipe's re-link order.
    Relinked,
}

/// The stream hasher of a chain hop protected with `integrity`.
fn chain_hasher(integrity: Integrity, secret: &[u8]) -> StreamHasher {
    match integrity {
        Integrity::Mac => StreamHasher::keyed(&chain_stream_key(secret)),
        // Checksum: no MAC; Encrypt: every chunk is authenticated already.
        Integrity::Checksum | Integrity::Encrypt => StreamHasher::new(),
    }
}

/// Whether a failed hop is worth re-linking: its peer or the connection went
/// away. A verdict on the stream (a mismatch, tampering, an abort) or our own
/// input or output failing is not. A resume message on a new connection
/// that fails its tag or is not one (a replayed hold, a forged request) is
/// that connection's loss too: it is dropped and the hop goes on
/// reconnecting, as a standalone hop does.
fn lost(e: &TransportError) -> bool {
    matches!(
        e,
        TransportError::PeerGone { .. }
            | TransportError::Truncated { .. }
            | TransportError::Rdma(_)
            | TransportError::Protocol {
                source: WireError::ResumeForged | WireError::BadResumeMagic(_),
                ..
            }
    )
}

/// The transport's description, with the re-link's offset when there was one.
fn describe(transport: String, relinked: Option<u64>) -> String {
    match relinked {
        Some(at) => format!("{transport}, re-linked at byte {at}"),
        None => transport,
    }
}

/// How a lost hop looks for its next connection ([`next_hop`]).
struct Lost {
    /// The stream byte at which it was lost.
    at: u64,
    /// When: `--reconnect-timeout` counts from here.
    since: Instant,
    /// A connection to the same peer that a dialing sink's thread already
    /// authenticated (and held) while the output was busy.
    kept: Option<(TcpStream, Negotiated)>,
}

/// The next connection of a hop lost with `e`: the same peer again over
/// `link` (the kept connection first) while `--reconnect-timeout` lasts, or
/// a re-link as soon as rdpipe orders one (an order drops a kept
/// connection); after the timeout only a re-link, for up to `chain.wait`.
/// Fails with `e` when neither comes.
fn next_hop(
    link: &mut Link,
    opts: &mut Options,
    role: Role,
    chain: &mut Chain<'_>,
    lost: Lost,
    e: TransportError,
) -> Result<(TcpStream, Negotiated, Rejoin), TransportError> {
    let Lost {
        at,
        since,
        mut kept,
    } = lost;
    let deadline = since + opts.reconnect_timeout;
    if !opts.reconnect_timeout.is_zero() {
        tracing::info!("the hop was lost at byte {at} ({e}); reconnecting (or re-linking)");
        if let Some(n) = opts.notice.as_mut() {
            n(HopState::Lost { offset: at });
        }
    } else {
        tracing::info!("the hop was lost at byte {at} ({e}); waiting for a re-link");
    }
    loop {
        let now = Instant::now();
        // A kept connection is held by its peer, past any deadline.
        let reconnecting = now < deadline || kept.is_some();
        let wait = if reconnecting {
            Duration::ZERO
        } else {
            chain.wait
        };
        match (chain.relink)(at, wait) {
            RelinkPoll::To(ep, key) => {
                crate::reconnect::reset(kept.take().map(|(s, _)| s));
                opts.key = key;
                opts.transport = TransportPref::Tcp;
                let (l, s, n) = Link::open(ep, opts, role)?;
                *link = l;
                return Ok((s, n, Rejoin::Relinked));
            }
            RelinkPoll::Refused => return Err(e),
            RelinkPoll::NotYet if !reconnecting => return Err(e),
            RelinkPoll::NotYet => {}
        }
        if let Some((s, n)) = kept.take() {
            return Ok((s, n, Rejoin::Reconnected));
        }
        if let Some((s, n)) = link.again(opts, role, (now + POLL).min(deadline))? {
            return Ok((s, n, Rejoin::Reconnected));
        }
    }
}

/// Records a reconnect (not a re-link) at `offset` and tells the user the
/// stream flows again over `transport`.
fn reconnected(
    opts: &mut Options,
    reconnects: &mut Vec<Reconnect>,
    offset: u64,
    since: Instant,
    transport: String,
) {
    let r = Reconnect {
        offset,
        downtime: since.elapsed(),
        transport,
    };
    tracing::info!(
        "reconnected at byte {offset} after {:.3} s",
        r.downtime.as_secs_f64()
    );
    if let Some(n) = opts.notice.as_mut() {
        n(HopState::Resumed(r.clone()));
    }
    reconnects.push(r);
}

/// Receives a chain sink's stream ([`crate::run_recv`]); when the upstream hop
/// is lost (the stream cut short), takes the same relay's new connection
/// ([`next_hop`]) or rdpipe's re-link, asks the relay that comes to resume
/// at the offset already written, and goes on into the same output with the
/// same hasher.
pub fn run_recv_chain<W: Write, F: FnOnce() -> Result<W, TransportError>>(
    endpoint: Endpoint,
    mut opts: Options,
    open_output: F,
    mut chain: Chain<'_>,
) -> Result<Report, TransportError> {
    let (mut link, stream, mut n) = Link::open(endpoint, &opts, Role::Receiver)?;
    let integrity = n.integrity;
    link.watch(&stream);
    // While the output is busy (its consumer not reading), the sender's new
    // connection is still taken and held ([`crate::reconnect`]).
    link.hold_with(CHAIN_BINDING);
    let mut predial = link.predial(&stream, &opts, CHAIN_BINDING);
    let mut rx = select::receiver(stream, &n)?;
    let mut output = open_or_abort(rx.as_mut(), open_output)?;
    let mut hasher = chain_hasher(integrity, chain.secret);
    let start = Instant::now();
    let mut progress = opts.progress.take();
    let mut relinked = None;
    let mut reconnects = Vec::new();
    loop {
        let prog = progress_of(&mut progress);
        let mut e =
            match recv_stream_with(rx.as_mut(), &mut output, protection(&n), &mut hasher, prog) {
                Ok(t) => {
                    let mut rep = Report::of(t, start, describe(rx.describe(), relinked), &n);
                    rep.reconnects = reconnects;
                    return Ok(rep);
                }
                Err(e) if lost(&e) => e,
                Err(e) => return Err(e),
            };
        let offset = hasher.bytes();
        // A dialing sink's thread may have seen the loss first and dialed
        // the same peer again while the output was busy.
        let (since, kept) = match predial.take().and_then(|p| p.finish()) {
            Some((at, kept)) => (at, kept),
            None => (Instant::now(), None),
        };
        let mut lost_now = Lost {
            at: offset,
            since,
            kept,
        };
        loop {
            let (s, n2, how) = next_hop(
                &mut link,
                &mut opts,
                Role::Receiver,
                &mut chain,
                lost_now,
                e,
            )?;
            lost_now = Lost {
                at: offset,
                since: Instant::now(),
                kept: None,
            };
            match resume(s, &n2, integrity, offset, opts.handshake_timeout) {
                Ok(s) => {
                    link.watch(&s);
                    link.hold_with(CHAIN_BINDING);
                    predial = link.predial(&s, &opts, CHAIN_BINDING);
                    rx = select::receiver(s, &n2)?;
                    n = n2;
                    match how {
                        Rejoin::Relinked => relinked = Some(offset),
                        Rejoin::Reconnected => {
                            reconnected(&mut opts, &mut reconnects, offset, since, rx.describe())
                        }
                    }
                    break;
                }
                // The new connection failed before the stream flowed again:
                // one more loss.
                Err(e2) if lost(&e2) => e = e2,
                Err(e2) => return Err(e2),
            }
        }
    }
}

/// The receiver's side of the resume exchange on a new connection `n` of a
/// stream that began under `integrity`: ask for the bytes from `offset` on,
/// check the answer.
fn resume(
    mut stream: TcpStream,
    n: &Negotiated,
    integrity: Integrity,
    offset: u64,
    timeout: Duration,
) -> Result<TcpStream, TransportError> {
    let peer = n.peer_addr.as_str();
    if n.integrity != integrity {
        return Err(TransportError::TransportMismatch(format!(
            "the re-link from {peer} is protected with {}, the stream began under {}",
            n.integrity.as_str(),
            integrity.as_str()
        )));
    }
    stream
        .write_all(&ResumeRequest { offset }.encode_bound(&n.keys, CHAIN_BINDING))
        .map_err(|e| conn_error(peer, e))?;
    let b = read_message::<RESUME_REPLY_LEN>(&mut stream, peer, Some(timeout))?;
    let reply = ResumeReply::decode_bound(&b, &n.keys, CHAIN_BINDING)
        .and_then(|r| r.check(offset).map(|()| r))
        .map_err(|e| protocol(peer, e))?;
    if reply.verdict == ResumeVerdict::BeyondWindow {
        return Err(TransportError::BeyondWindow {
            offset,
            start: reply.window_start,
            end: reply.window_end,
        });
    }
    tracing::info!("re-linked from {peer}: resuming at byte {offset}");
    Ok(stream)
}
