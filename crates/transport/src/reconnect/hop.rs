//! The send and receive loops of a hop that reconnects: each runs the
//! stream on one connection after another, the sender resending out of its
//! replay window, the receiver writing on into the same output, one stream
//! hasher across all of them (see the module above).

use super::{answer_resume, ask_resume, lost, reset, HopState, Link, Reconnect, Rejoined};
use crate::pump::{recv_stream_with, send_stream_with};
use crate::replay::{Input, Recorded};
use crate::session::{open_or_abort, progress_of, protection, Endpoint, Options, Report};
use crate::{select, TransportError};
use rdpipe_wire::resume::stream_binding;
use rdpipe_wire::Role;
use std::io::Write;
use std::time::{Duration, Instant};

/// Tells the user (progress line, `-v`) that the hop lost its connection.
fn waiting(opts: &mut Options, peer: &str, offset: u64, e: &TransportError) {
    tracing::info!("the connection to {peer} was lost at byte {offset} ({e}); reconnecting");
    if let Some(n) = opts.notice.as_mut() {
        n(HopState::Lost { offset });
    }
}

/// Names the transport the last reconnect came back on, once it is built,
/// and tells the user the stream flows again.
fn resumed(opts: &mut Options, reconnects: &mut [Reconnect], transport: String) {
    if let Some(r) = reconnects.last_mut().filter(|r| r.transport.is_empty()) {
        r.transport = transport;
        if let Some(n) = opts.notice.as_mut() {
            n(HopState::Resumed(r.clone()));
        }
    }
}

/// The failure after `--reconnect-timeout` ran out.
fn gave_up(peer: &str, offset: u64, timeout: Duration, cause: TransportError) -> TransportError {
    TransportError::NotReconnected {
        peer: peer.to_string(),
        bytes: offset,
        secs: timeout.as_secs_f64(),
        cause: Box::new(cause),
    }
}

/// [`crate::run_send`] on a hop that reconnects (`opts.reconnect_timeout`
/// above 0): every byte read is kept in a replay window of
/// `opts.replay_window` bytes until the receiver has it.
pub(crate) fn send_reconnecting<R: Input>(
    endpoint: Endpoint,
    mut opts: Options,
    input: &mut R,
) -> Result<Report, TransportError> {
    let (mut link, stream, first) = Link::open(endpoint, &opts, Role::Sender)?;
    let binding = stream_binding(&first.keys);
    link.require_bound(Role::Sender, &binding);
    let mut input = Recorded::new(input, opts.replay_window);
    let mut hasher = protection(&first).hasher();
    let mut progress = opts.progress.take();
    let mut reconnects: Vec<Reconnect> = Vec::new();
    let start = Instant::now();
    let (mut stream, mut n) = (stream, first.clone());
    let mut replay = Vec::new();
    loop {
        link.watch(&stream);
        let guard = stream.try_clone().ok();
        // An idle input must not keep us from noticing the loss.
        input.watch(stream.try_clone().ok());
        let e = match select::sender(stream, &n, opts.slots as usize) {
            // A new connection that fails before the stream flows again is
            // one more loss; the first one's failure is the run's.
            Err(e) if !reconnects.is_empty() && lost(&e, &link, guard.as_ref()) => e,
            Err(e) => return Err(e),
            Ok(mut tx) => {
                resumed(&mut opts, &mut reconnects, tx.describe());
                let prog = progress_of(&mut progress);
                let r = send_stream_with(
                    &mut input,
                    tx.as_mut(),
                    protection(&n),
                    &mut hasher,
                    &replay,
                    n.rate_limit,
                    prog,
                );
                match r {
                    Ok(t) => {
                        let mut rep = Report::of(t, start, tx.describe(), &n);
                        rep.reconnects = reconnects;
                        return Ok(rep);
                    }
                    Err(e) if lost(&e, &link, guard.as_ref()) => e,
                    Err(e) => return Err(e),
                }
            }
        };
        // The old connection's last handles go, so that the reset leaves now.
        input.watch(None);
        link.unwatch();
        reset(guard);
        let peer = link.describe(&n.peer_addr);
        let at = hasher.bytes();
        waiting(&mut opts, &peer, at, &e);
        let lost_at = Instant::now();
        let mut deadline = lost_at + opts.reconnect_timeout;
        loop {
            let Some((mut s, n2)) = link.again(&opts, Role::Sender, deadline)? else {
                return Err(gave_up(&peer, at, opts.reconnect_timeout, e));
            };
            let timeout = opts.handshake_timeout;
            // The receiver coming back on yet another connection replaces
            // this one, also while it holds us waiting for its request.
            link.watch(&s);
            match answer_resume(&mut s, &n2, &first, &binding, &mut input, timeout)? {
                Rejoined::Yes((offset, bytes)) => {
                    tracing::info!(
                        "reconnected to {}: resending from byte {offset} ({} bytes from the \
                         replay window) after {:.3} s",
                        n2.peer_addr,
                        bytes.len(),
                        lost_at.elapsed().as_secs_f64()
                    );
                    reconnects.push(Reconnect {
                        offset,
                        downtime: lost_at.elapsed(),
                        transport: String::new(),
                    });
                    replay = bytes;
                    (stream, n) = (s, n2);
                    // Our close of the old connection for this peer is done with.
                    link.kicked();
                    break;
                }
                Rejoined::Retry(why) => {
                    tracing::info!("{}: no resume on this connection: {why}", n2.peer_addr);
                    link.unwatch();
                    // Also if another connection's arrival closed it.
                    link.kicked();
                    reset(Some(s));
                }
                Rejoined::Lapsed(why) => {
                    tracing::info!("{}: lost again while it waited: {why}", n2.peer_addr);
                    link.unwatch();
                    link.kicked();
                    reset(Some(s));
                    deadline = Instant::now() + opts.reconnect_timeout;
                }
            }
        }
    }
}

/// [`crate::run_recv`] on a hop that reconnects: a stream cut short waits for
/// the sender to come back and goes on into the same output.
pub(crate) fn recv_reconnecting<W: Write, F: FnOnce() -> Result<W, TransportError>>(
    endpoint: Endpoint,
    mut opts: Options,
    open_output: F,
) -> Result<Report, TransportError> {
    let (mut link, stream, first) = Link::open(endpoint, &opts, Role::Receiver)?;
    let binding = stream_binding(&first.keys);
    let mut hasher = protection(&first).hasher();
    // Before the watch: no newcomer may replace this connection unproven.
    link.require_bound(Role::Receiver, &binding);
    link.watch(&stream);
    link.hold_with(&binding);
    let mut guard = stream.try_clone().ok();
    let mut predial = link.predial(&stream, &opts, &binding);
    let mut rx = select::receiver(stream, &first)?;
    let mut output = open_or_abort(rx.as_mut(), open_output)?;
    let mut progress = opts.progress.take();
    let mut reconnects: Vec<Reconnect> = Vec::new();
    let start = Instant::now();
    let mut n = first.clone();
    loop {
        let prog = progress_of(&mut progress);
        let r = recv_stream_with(rx.as_mut(), &mut output, protection(&n), &mut hasher, prog);
        let e = match r {
            Ok(t) => {
                let mut rep = Report::of(t, start, rx.describe(), &n);
                rep.reconnects = reconnects;
                return Ok(rep);
            }
            Err(e @ TransportError::Truncated { .. }) if lost(&e, &link, guard.as_ref()) => e,
            Err(e) => return Err(e),
        };
        link.unwatch();
        reset(guard.take());
        drop(rx);
        let peer = link.describe(&n.peer_addr);
        let offset = hasher.bytes();
        waiting(&mut opts, &peer, offset, &e);
        // A dialing receiver's thread may have seen the loss first and dialed
        // while the output was busy: the deadline counts from its loss.
        let (lost_at, mut kept) = match predial.take().and_then(|p| p.finish()) {
            Some((at, kept)) => (at, kept),
            None => (Instant::now(), None),
        };
        let mut deadline = lost_at + opts.reconnect_timeout;
        (rx, n) = loop {
            let from_kept = kept.is_some();
            let next = match kept.take() {
                Some(won) => Some(won),
                None => link.again(&opts, Role::Receiver, deadline)?,
            };
            let Some((mut s, n2)) = next else {
                return Err(gave_up(&peer, offset, opts.reconnect_timeout, e));
            };
            let why = match ask_resume(
                &mut s,
                &n2,
                &first,
                &binding,
                offset,
                opts.handshake_timeout,
            )? {
                Rejoined::Yes(()) => {
                    link.kicked();
                    link.watch(&s);
                    guard = s.try_clone().ok();
                    predial = link.predial(&s, &opts, &binding);
                    match select::receiver(s, &n2) {
                        Ok(rx) => break (rx, n2),
                        Err(why) if lost(&why, &link, guard.as_ref()) => {
                            link.unwatch();
                            reset(guard.take());
                            // Its thread may have dialed already: one dialer.
                            kept = predial.take().and_then(|p| p.finish()?.1);
                            why
                        }
                        Err(fatal) => return Err(fatal),
                    }
                }
                Rejoined::Retry(why) | Rejoined::Lapsed(why) => {
                    // A reset, not a close: a sender that takes this
                    // connection up later must not see our end of the stream.
                    reset(Some(s));
                    // The connection our thread kept (and held) while the
                    // output was busy failed since: a new outage.
                    if from_kept {
                        deadline = Instant::now() + opts.reconnect_timeout;
                    }
                    why
                }
            };
            tracing::info!("{}: no resume on this connection: {why}", n2.peer_addr);
        };
        tracing::info!(
            "reconnected from {}: resuming at byte {offset} after {:.3} s",
            n.peer_addr,
            lost_at.elapsed().as_secs_f64()
        );
        reconnects.push(Reconnect {
            offset,
            downtime: lost_at.elapsed(),
            transport: String::new(),
        });
        resumed(&mut opts, &mut reconnects, rx.describe());
    }
}
