//! What `rdsend` and `rdrecv` run, as library calls: establish the connection
//! (connect or listen, independent of the data direction, because rdpipe needs both
//! ways round), authenticate and negotiate, build the chosen transport, pump, report.

use crate::connect::Listener;
use crate::handshake::{dial, LocalParams, Negotiated};
use crate::listen::accept_authenticated;
use crate::pump::{recv_stream, send_stream, Protection};
use crate::replay::Input;
use crate::{select, ChunkReceiver, ChunkSender, Rate, TransportError};
use rdpipe_wire::{Compress, Integrity, Role, TransportPref};
use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Called with the bound port once listening, before waiting for the peer.
pub type Announce = Box<dyn FnOnce(u16) -> io::Result<()> + Send>;

/// How the TCP connection comes about.
pub enum Endpoint {
    /// Connect to a listening peer, retrying until `timeout`.
    Connect {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
        /// How long to keep retrying a refused connection.
        timeout: Duration,
    },
    /// Listen on `port` (0 = ephemeral) and accept until a peer authenticates.
    Listen {
        /// The address to listen at (an address of this host; otherwise, and by
        /// default, all addresses).
        bind: Option<String>,
        /// The port.
        port: u16,
        /// Told the real port once listening (`--announce-fd`, rdpipe's agents).
        announce: Option<Announce>,
    },
}

/// Opens a receiver's output with `open` once the peer authenticated; when that
/// fails, tells the sender why (so it does not wait for a confirmation).
pub(crate) fn open_or_abort<W>(
    rx: &mut dyn ChunkReceiver,
    open: impl FnOnce() -> Result<W, TransportError>,
) -> Result<W, TransportError> {
    open().inspect_err(|e| rx.abort(&format!("receiver cannot open its output: {e}")))
}

/// The progress callback `p`, or one that does nothing.
pub(crate) fn progress_of(p: &mut Option<Box<dyn FnMut(u64) + Send>>) -> &mut dyn FnMut(u64) {
    p.get_or_insert_with(|| Box::new(|_| {})).as_mut()
}

/// Everything a transfer needs besides the connection and its input or output.
pub struct Options {
    /// The shared key.
    pub key: Vec<u8>,
    /// Bytes per chunk.
    pub chunk_size: u32,
    /// Buffers in flight.
    pub slots: u32,
    /// `--transport`.
    pub transport: TransportPref,
    /// The whole handshake's deadline.
    pub handshake_timeout: Duration,
    /// `--integrity` / `--encrypt`: the protection this end wants (the stronger of
    /// the two ends' wishes is used).
    pub integrity: Integrity,
    /// `--rate-limit`: the most bytes per second the stream may move (the sender
    /// paces to the lower of the two ends' limits).
    pub rate_limit: Option<Rate>,
    /// `--compress`: what this end asks for (compression is on when either
    /// end asks; the sender's wish wins).
    pub compress: Compress,
    /// Called with the running byte count after every chunk.
    pub progress: Option<Box<dyn FnMut(u64) + Send>>,
    /// `--reconnect-timeout`: how long a hop whose connection died tries to
    /// get a new one and resume ([`crate::reconnect`]); zero: it fails at once.
    pub reconnect_timeout: Duration,
    /// `--replay-window`: the bytes a reconnecting sender keeps until the
    /// receiver has them (what can be in flight on the hop).
    pub replay_window: usize,
    /// Told when the hop starts waiting for a reconnect and when the stream
    /// flows again (the progress line says "reconnecting").
    pub notice: Option<Box<dyn FnMut(crate::reconnect::HopState) + Send>>,
}

/// The default `--reconnect-timeout`.
pub const RECONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The default `--replay-window`: more than can be in flight on a hop (two
/// rings of 2 x 1 MiB, plus socket buffers of up to 4 MiB and 6 MiB at
/// Linux's default limits), rounded up generously.
pub const REPLAY_WINDOW: usize = 32 << 20;

/// What a completed transfer reports (`-v`).
#[derive(Debug, Clone)]
pub struct Report {
    /// Bytes moved, verified end to end.
    pub bytes: u64,
    /// Their xxh3-64.
    pub checksum: u64,
    /// From the end of the handshake to the confirmation.
    pub elapsed: Duration,
    /// The transport that carried the data (`tcp`, `rdma (rxe0)`).
    pub transport: String,
    /// The peer's address.
    pub peer: String,
    /// How the stream was protected.
    pub integrity: Integrity,
    /// The rate limit the sender paced to (the lower of the two ends'), if any.
    pub rate_limit: Option<Rate>,
    /// Each time the connection was lost and the stream resumed on a new one.
    pub reconnects: Vec<crate::reconnect::Reconnect>,
    /// What compression did (on the last connection), if it was on.
    pub compress: Option<Box<crate::compress::CompressStats>>,
}

impl Report {
    /// The report of a transfer that `n` negotiated, verified as `t`, carried by
    /// `transport`, started at `start`.
    pub(crate) fn of(
        t: crate::pump::Totals,
        start: Instant,
        transport: String,
        n: &crate::handshake::Negotiated,
    ) -> Report {
        Report {
            bytes: t.bytes,
            checksum: t.checksum,
            elapsed: start.elapsed(),
            transport,
            peer: n.peer_addr.clone(),
            integrity: n.integrity,
            rate_limit: n.rate_limit,
            reconnects: Vec::new(),
            compress: t.compress.map(Box::new),
        }
    }
    /// Throughput in GB/s (10^9 bytes per second), the original tool's unit.
    pub fn gbps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / s / 1e9
        } else {
            0.0
        }
    }
}

/// A transport mismatch on a host that cannot load the RDMA libraries (while this
/// end allowed RDMA) becomes [`TransportError::RdmaLibraries`]: what to install.
pub(crate) fn explain_mismatch(e: TransportError, pref: TransportPref) -> TransportError {
    match e {
        TransportError::TransportMismatch(m) if pref != TransportPref::Tcp => {
            match rdpipe_verbs::load() {
                Err(v) => TransportError::RdmaLibraries(v),
                Ok(()) => TransportError::TransportMismatch(m),
            }
        }
        e => e,
    }
}

pub(crate) fn protection(n: &Negotiated) -> Protection<'_> {
    Protection {
        integrity: n.integrity,
        keys: &n.keys,
        compress: n.compress,
        chunk_size: crate::select::largest_chunk(n),
        peer: &n.peer_addr,
    }
}

/// This end's half of the handshake, from its options.
pub(crate) fn local_params(opts: &Options, role: Role) -> LocalParams {
    LocalParams {
        role,
        transport: opts.transport,
        caps: select::local_caps(opts.transport),
        chunk_size: opts.chunk_size,
        slots: opts.slots,
        integrity: opts.integrity,
        rate_limit: opts.rate_limit,
        compress: opts.compress,
    }
}

pub(crate) fn negotiate(
    endpoint: Endpoint,
    opts: &Options,
    role: Role,
) -> Result<(TcpStream, Negotiated), TransportError> {
    let params = local_params(opts, role);
    let r = match endpoint {
        Endpoint::Connect {
            host,
            port,
            timeout,
        } => dial(
            &host,
            port,
            timeout,
            &opts.key,
            &params,
            opts.handshake_timeout,
        ),
        Endpoint::Listen {
            bind,
            port,
            announce,
        } => {
            let l = listen_announced(bind.as_deref(), port, announce)?;
            accept_authenticated(l, &opts.key, &params, opts.handshake_timeout)
        }
    };
    r.map_err(|e| explain_mismatch(e, opts.transport))
}

/// Listens on `port` at `bind` and tells `announce` the port.
pub(crate) fn listen_announced(
    bind: Option<&str>,
    port: u16,
    announce: Option<Announce>,
) -> Result<Listener, TransportError> {
    let l = Listener::bind_at(bind, port)?;
    if let Some(a) = announce {
        a(l.port()).map_err(TransportError::Announce)?;
    }
    Ok(l)
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
