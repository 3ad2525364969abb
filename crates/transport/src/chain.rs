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

use crate::endpoint::{
    negotiate, open_or_abort, progress_of, protection, Endpoint, Options, Report,
};
use crate::frame_io::{conn_error, protocol};
use crate::pump::{recv_stream_with, send_stream_with, Totals};
use crate::replay::Recorded;
use crate::{select, TransportError};
use rdpipe_wire::resume::{
    chain_stream_key, ResumeReply, ResumeRequest, ResumeVerdict, RESUME_LEN, RESUME_REPLY_LEN,
};
use rdpipe_wire::{Integrity, Role, StreamHasher, TransportPref};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Asked with the stream offset at which a hop was lost: the re-link's
/// endpoint and key, or `None` (no re-link: the hop fails with its error).
pub type Relink<'a> = &'a mut dyn FnMut(u64) -> Option<(Endpoint, Vec<u8>)>;

/// What a chain hop needs besides its [`Options`].
pub struct Chain<'a> {
    /// The chain's secret (the same on every sink): keys every chain hop's
    /// stream MAC.
    pub secret: &'a [u8],
    /// Where a lost hop re-links.
    pub relink: Relink<'a>,
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
/// input or output failing is not.
fn lost(e: &TransportError) -> bool {
    matches!(
        e,
        TransportError::PeerGone { .. }
            | TransportError::Truncated { .. }
            | TransportError::Rdma(_)
    )
}

/// Reads one resume message of `N` bytes within `timeout`.
fn read_message<const N: usize>(
    s: &mut TcpStream,
    peer: &str,
    timeout: Duration,
) -> Result<[u8; N], TransportError> {
    s.set_read_timeout(Some(timeout))
        .map_err(TransportError::SocketOption)?;
    let mut b = [0u8; N];
    let r = s.read_exact(&mut b).map_err(|e| conn_error(peer, e));
    s.set_read_timeout(None)
        .map_err(TransportError::SocketOption)?;
    r.map(|_| b)
}

/// The transport's description, with the re-link's offset when there was one.
fn describe(transport: String, relinked: Option<u64>) -> String {
    match relinked {
        Some(at) => format!("{transport}, re-linked at byte {at}"),
        None => transport,
    }
}

/// Sends a relay's `input` to the next sink ([`crate::run_send`]); when that
/// hop is lost, asks `chain.relink` where to go instead and resends from the
/// offset the new peer asks for, out of `input`'s replay window.
pub fn run_send_chain<R: Read + AsFd>(
    endpoint: Endpoint,
    mut opts: Options,
    input: &mut Recorded<R>,
    chain: Chain<'_>,
) -> Result<Report, TransportError> {
    let start = Instant::now();
    let mut progress = opts.progress.take();
    let mut hasher: Option<StreamHasher> = None;
    let mut endpoint = endpoint;
    let mut relinked = None;
    loop {
        let prog = progress_of(&mut progress);
        let (stream, n) = negotiate(endpoint, &opts, Role::Sender)?;
        let r = send_hop(
            stream,
            &n,
            &opts,
            input,
            &mut hasher,
            chain.secret,
            relinked,
            prog,
        );
        match r {
            Ok((t, transport)) => {
                return Ok(Report::of(t, start, describe(transport, relinked), &n))
            }
            Err(e) if lost(&e) => {
                let at = hasher.as_ref().map_or(0, StreamHasher::bytes);
                tracing::info!(
                    "the next hop was lost after {at} bytes ({e}); waiting for a re-link"
                );
                let Some((ep, key)) = (chain.relink)(at) else {
                    return Err(e);
                };
                opts.key = key;
                opts.transport = TransportPref::Tcp;
                endpoint = ep;
                relinked = Some(at);
            }
            Err(e) => return Err(e),
        }
    }
}

/// One connection of [`run_send_chain`]: the resume exchange when it is a
/// re-link, then the stream (the replayed bytes first).
#[allow(clippy::too_many_arguments)]
fn send_hop<R: Read + AsFd>(
    mut stream: TcpStream,
    n: &crate::handshake::Negotiated,
    opts: &Options,
    input: &mut Recorded<R>,
    hasher: &mut Option<StreamHasher>,
    secret: &[u8],
    relinked: Option<u64>,
    progress: &mut dyn FnMut(u64),
) -> Result<(Totals, String), TransportError> {
    let h = hasher.get_or_insert_with(|| chain_hasher(n.integrity, secret));
    let mut replay = Vec::new();
    if relinked.is_some() {
        let peer = n.peer_addr.as_str();
        let b = read_message::<RESUME_LEN>(&mut stream, peer, opts.handshake_timeout)?;
        let req = ResumeRequest::decode(&b, &n.keys).map_err(|e| protocol(peer, e))?;
        let reply = input.answer(req.offset);
        stream
            .write_all(&reply.encode(&n.keys))
            .map_err(|e| conn_error(peer, e))?;
        replay = input
            .since(req.offset)
            .map_err(crate::replay::Resend::into_error)?;
        tracing::info!(
            "re-linked to {peer}: resending from byte {} ({} bytes from the replay window)",
            req.offset,
            replay.len()
        );
    }
    let mut tx = select::sender(stream, n, opts.slots as usize)?;
    let t = send_stream_with(
        input,
        tx.as_mut(),
        protection(n),
        h,
        &replay,
        n.rate_limit,
        progress,
    )?;
    Ok((t, tx.describe()))
}

/// Receives a chain sink's stream ([`crate::run_recv`]); when the upstream hop
/// is lost (the stream cut short), asks `chain.relink` for the re-link's
/// listening endpoint and key, asks the relay that connects there to resume
/// at the offset already written, and goes on into the same output with the
/// same hasher.
pub fn run_recv_chain<W: Write, F: FnOnce() -> Result<W, TransportError>>(
    endpoint: Endpoint,
    mut opts: Options,
    open_output: F,
    chain: Chain<'_>,
) -> Result<Report, TransportError> {
    let (stream, mut n) = negotiate(endpoint, &opts, Role::Receiver)?;
    let mut rx = select::receiver(stream, &n)?;
    let mut output = open_or_abort(rx.as_mut(), open_output)?;
    let mut hasher = chain_hasher(n.integrity, chain.secret);
    let start = Instant::now();
    let mut progress = opts.progress.take();
    let mut relinked = None;
    loop {
        let prog = progress_of(&mut progress);
        match recv_stream_with(rx.as_mut(), &mut output, protection(&n), &mut hasher, prog) {
            Ok(t) => return Ok(Report::of(t, start, describe(rx.describe(), relinked), &n)),
            Err(e @ TransportError::Truncated { .. }) => {
                let offset = hasher.bytes();
                tracing::info!("{e}; waiting for a re-link");
                let Some((ep, key)) = (chain.relink)(offset) else {
                    return Err(e);
                };
                opts.key = key;
                opts.transport = TransportPref::Tcp;
                let (stream, n2) = negotiate(ep, &opts, Role::Receiver)?;
                let stream = resume(stream, &n2, &n, offset, opts.handshake_timeout)?;
                rx = select::receiver(stream, &n2)?;
                n = n2;
                relinked = Some(offset);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The receiver's side of the resume exchange on a re-link hop `n` of a
/// stream that began as `first`: ask for the bytes from `offset` on, check
/// the answer.
fn resume(
    mut stream: TcpStream,
    n: &crate::handshake::Negotiated,
    first: &crate::handshake::Negotiated,
    offset: u64,
    timeout: Duration,
) -> Result<TcpStream, TransportError> {
    let peer = n.peer_addr.as_str();
    if n.integrity != first.integrity {
        return Err(TransportError::TransportMismatch(format!(
            "the re-link from {peer} is protected with {}, the stream began under {}",
            n.integrity.as_str(),
            first.integrity.as_str()
        )));
    }
    stream
        .write_all(&ResumeRequest { offset }.encode(&n.keys))
        .map_err(|e| conn_error(peer, e))?;
    let b = read_message::<RESUME_REPLY_LEN>(&mut stream, peer, timeout)?;
    let reply = ResumeReply::decode(&b, &n.keys)
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
