//! What `rdsend` and `rdrecv` run, as library calls: establish the connection
//! ([`Endpoint`]: connect or listen), authenticate and negotiate, build the
//! chosen transport, pump, report; or, with a `--reconnect-timeout`, the
//! hop that reconnects ([`crate::reconnect`]).

use crate::handshake::Negotiated;
use crate::pump::{recv_stream, send_stream};
use crate::reconnect::Link;
use crate::replay::Input;
use crate::session::{explain_mismatch, open_or_abort, progress_of, protection};
use crate::{select, ChunkReceiver, ChunkSender, TransportError};
use rdpipe_wire::Role;
use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Instant;

pub use crate::session::{Announce, Endpoint, Options, Report, RECONNECT_TIMEOUT, REPLAY_WINDOW};

/// The authenticated connection of a transfer that does not reconnect: the
/// first one of a [`Link`], which is dropped at once (a listening end stops
/// listening once a peer authenticated).
pub(crate) fn negotiate(
    endpoint: Endpoint,
    opts: &Options,
    role: Role,
) -> Result<(TcpStream, Negotiated), TransportError> {
    Link::open(endpoint, opts, role)
        .map(|(_link, stream, n)| (stream, n))
        .map_err(|e| explain_mismatch(e, opts.transport))
}

/// Sends `input` to the peer. Returns only once the receiver confirmed the whole
/// stream (count and checksum). With a `reconnect_timeout`, a lost connection
/// is replaced and the stream resumed ([`crate::reconnect`]).
pub fn run_send<R: Input>(
    endpoint: Endpoint,
    mut opts: Options,
    input: &mut R,
) -> Result<Report, TransportError> {
    if !opts.reconnect_timeout.is_zero() {
        let pref = opts.transport;
        return crate::reconnect::send_reconnecting(endpoint, opts, input)
            .map_err(|e| explain_mismatch(e, pref));
    }
    let (stream, n) = negotiate(endpoint, &opts, Role::Sender)?;
    let mut tx: Box<dyn ChunkSender> = select::sender(stream, &n, opts.slots as usize)?;
    if let Some(r) = n.rate_limit {
        tracing::debug!("pacing the stream to {r}");
    }
    let start = Instant::now();
    let progress = progress_of(&mut opts.progress);
    let totals = send_stream(input, tx.as_mut(), protection(&n), n.rate_limit, progress)?;
    Ok(Report::of(totals, start, tx.describe(), &n))
}

/// Receives the stream into the output that `open_output` creates. The output is
/// opened only after the peer authenticated, so a wrong key never creates or
/// truncates a file. Returns only once the whole stream was verified and flushed.
/// With a `reconnect_timeout`, a stream cut short waits for the sender to
/// come back and resumes ([`crate::reconnect`]).
pub fn run_recv<W: Write, F: FnOnce() -> Result<W, TransportError>>(
    endpoint: Endpoint,
    mut opts: Options,
    open_output: F,
) -> Result<Report, TransportError> {
    if !opts.reconnect_timeout.is_zero() {
        let pref = opts.transport;
        return crate::reconnect::recv_reconnecting(endpoint, opts, open_output)
            .map_err(|e| explain_mismatch(e, pref));
    }
    let (stream, n) = negotiate(endpoint, &opts, Role::Receiver)?;
    let mut rx: Box<dyn ChunkReceiver> = select::receiver(stream, &n)?;
    let mut output = open_or_abort(rx.as_mut(), open_output)?;
    let start = Instant::now();
    let progress = progress_of(&mut opts.progress);
    let totals = recv_stream(rx.as_mut(), &mut output, protection(&n), progress)?;
    Ok(Report::of(totals, start, rx.describe(), &n))
}

/// Standard output as a receiver's output: unbuffered (chunks go straight to the
/// fd), and a pipe grown to [`crate::pump::PIPE_SIZE`] so that `rdrecv | consumer`
/// costs one write per buffer instead of one per 64 KiB.
pub fn stdout_output() -> Result<std::fs::File, TransportError> {
    let f = io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .map_err(TransportError::Output)?;
    crate::pump::grow_pipe(&f);
    Ok(f)
}
