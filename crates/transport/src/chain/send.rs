//! A chain hop's sending end: the relay's stream to the next sink, resent
//! from the replay window after a reconnect or a re-link.

use super::{chain_hasher, describe, lost, next_hop, reconnected, Chain, Rejoin, CHAIN_BINDING};
use crate::frame_io::conn_error;
use crate::handshake::Negotiated;
use crate::pump::{send_stream_with, Totals};
use crate::reconnect::{await_request, Link, Reconnect};
use crate::replay::{Input, Recorded};
use crate::session::{progress_of, protection, Endpoint, Options, Report};
use crate::{select, TransportError};
use rdpipe_wire::{Role, StreamHasher};
use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

/// Sends a relay's `input` to the next sink ([`crate::run_send`]); when that
/// hop is lost, reconnects to the same sink or goes where `chain.relink`
/// says ([`super::next_hop`]) and resends from the offset the peer asks
/// for, out of `input`'s replay window.
pub fn run_send_chain<R: Input>(
    endpoint: Endpoint,
    mut opts: Options,
    input: &mut Recorded<R>,
    mut chain: Chain<'_>,
) -> Result<Report, TransportError> {
    let start = Instant::now();
    let mut progress = opts.progress.take();
    let mut hasher: Option<StreamHasher> = None;
    let (mut link, mut stream, mut n) = Link::open(endpoint, &opts, Role::Sender)?;
    let mut relinked = None;
    let mut reconnects: Vec<Reconnect> = Vec::new();
    // Set once the hop was lost: the next connection starts with the resume
    // exchange (when, how it came back).
    let mut rejoined: Option<(Instant, Rejoin)> = None;
    loop {
        let prog = progress_of(&mut progress);
        // A sink that comes back on a new connection replaces this one,
        // also while it holds us waiting for its request.
        link.watch(&stream);
        let guard = stream.try_clone().ok();
        let view = opts_view(&opts);
        let mut on_flow = |transport: String, offset: u64| {
            if let Some((since, Rejoin::Reconnected)) = rejoined {
                reconnected(&mut opts, &mut reconnects, offset, since, transport);
            }
        };
        let r = send_hop(
            stream,
            &n,
            &view,
            input,
            &mut hasher,
            chain.secret,
            rejoined.is_some(),
            prog,
            &mut on_flow,
        );
        let e = match r {
            Ok((t, transport)) => {
                let mut rep = Report::of(t, start, describe(transport, relinked), &n);
                rep.reconnects = reconnects;
                return Ok(rep);
            }
            Err(e) if lost(&e) => e,
            Err(e) => return Err(e),
        };
        link.unwatch();
        crate::reconnect::reset(guard);
        let at = hasher.as_ref().map_or(0, StreamHasher::bytes);
        let since = match rejoined {
            // Lost again before the stream flowed: the same outage.
            Some((since, _)) => since,
            None => Instant::now(),
        };
        let lost_now = super::Lost {
            at,
            since: Instant::now(),
            kept: None,
        };
        let (s, n2, how) = next_hop(&mut link, &mut opts, Role::Sender, &mut chain, lost_now, e)?;
        if how == Rejoin::Relinked {
            relinked = Some(at);
        }
        rejoined = Some((since, how));
        (stream, n) = (s, n2);
    }
}

/// What [`send_hop`] reads of the hop's options.
struct HopOpts {
    handshake_timeout: std::time::Duration,
    slots: usize,
}

fn opts_view(o: &Options) -> HopOpts {
    HopOpts {
        handshake_timeout: o.handshake_timeout,
        slots: o.slots as usize,
    }
}

/// One connection of [`run_send_chain`]: the resume exchange when it
/// follows a loss (`resuming`), then the stream (the replayed bytes first).
/// `on_flow` hears the transport and the offset once the stream flows.
#[allow(clippy::too_many_arguments)]
fn send_hop<R: Input>(
    mut stream: TcpStream,
    n: &Negotiated,
    opts: &HopOpts,
    input: &mut Recorded<R>,
    hasher: &mut Option<StreamHasher>,
    secret: &[u8],
    resuming: bool,
    progress: &mut dyn FnMut(u64),
    on_flow: &mut dyn FnMut(String, u64),
) -> Result<(Totals, String), TransportError> {
    let h = hasher.get_or_insert_with(|| chain_hasher(n.integrity, secret));
    let mut replay = Vec::new();
    let mut offset = 0;
    if resuming {
        let peer = n.peer_addr.as_str();
        // A sink blocked on its output holds the connection first: the
        // request follows once its stream loop gets to it.
        let (req, _held) = await_request(&mut stream, n, CHAIN_BINDING, opts.handshake_timeout)
            .map_err(|(e, _)| e)?;
        let (reply, bytes) = input
            .resume_at(req.offset)
            .map_err(crate::replay::Resend::into_error)?;
        stream
            .write_all(&reply.encode_bound(&n.keys, CHAIN_BINDING))
            .map_err(|e| conn_error(peer, e))?;
        replay = bytes.map_err(crate::replay::Resend::into_error)?;
        offset = req.offset;
        tracing::info!(
            "rejoined {peer}: resending from byte {offset} ({} bytes from the replay window)",
            replay.len()
        );
    }
    let mut tx = select::sender(stream, n, opts.slots)?;
    if resuming {
        on_flow(tx.describe(), offset);
    }
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
