//! Errors of the transport layer, one variant per thing that can fail, each naming
//! what was involved. [`TransportError::exit_code`] maps them to the documented exit
//! codes of rdsend/rdrecv.

pub mod rdma;

use rdma::{Decline, RdmaError, RequiredBy};
use rdpipe_wire::WireError;
use std::io;

/// Exit status: any other failure (local I/O, resources).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status: bad command line (clap uses 2 too).
pub const EXIT_USAGE: u8 = 2;
/// Exit status: authentication failed.
pub const EXIT_AUTH: u8 = 3;
/// Exit status: the stream is incomplete or corrupt (truncated, checksum mismatch).
pub const EXIT_INCOMPLETE: u8 = 4;
/// Exit status: the peer aborted the stream, or our output was closed.
pub const EXIT_ABORTED: u8 = 5;
/// Exit status: could not connect, bind or resolve.
pub const EXIT_CONNECT: u8 = 6;
/// Exit status: RDMA was required (`--transport rdma`) but cannot be used.
pub const EXIT_NO_RDMA: u8 = 7;
/// Exit status: the peer broke the protocol (not rdma-pipe, wrong version, garbage).
pub const EXIT_PROTOCOL: u8 = 8;
/// Exit status: the stream failed its integrity check: it was altered on the way
/// (MAC, encrypted chunk, End or Done tag).
pub const EXIT_TAMPERED: u8 = 9;

/// Everything that can go wrong moving a stream.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Name resolution failed.
    #[error("cannot resolve host {host}: {source}")]
    Resolve {
        /// The host name.
        host: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// Connecting failed (after retrying until the connect timeout).
    #[error("cannot connect to {addr}: {source} (is rdrecv running there? see --connect-timeout)")]
    Connect {
        /// `host:port`.
        addr: String,
        /// The last error seen.
        source: io::Error,
    },
    /// Binding or listening failed.
    #[error("cannot listen on port {port}: {source}")]
    Listen {
        /// The port asked for.
        port: u16,
        /// The OS error.
        source: io::Error,
    },
    /// accept() failed.
    #[error("accepting a connection failed: {0}")]
    Accept(#[source] io::Error),
    /// Writing the announcement (`PORT n`) failed.
    #[error("cannot announce the listening port: {0}")]
    Announce(#[source] io::Error),
    /// A socket option could not be set.
    #[error("cannot configure the socket: {0}")]
    SocketOption(#[source] io::Error),
    /// The peer's bytes broke the protocol.
    #[error("protocol error from {peer}: {source}")]
    Protocol {
        /// The peer's address.
        peer: String,
        /// What was wrong.
        source: WireError,
    },
    /// The handshake did not complete in time.
    #[error("handshake with {peer} timed out after {secs} s")]
    HandshakeTimeout {
        /// The peer's address.
        peer: String,
        /// The timeout.
        secs: u64,
    },
    /// The listening end closed (or reset) the connection before it sent its
    /// hello: it dropped the connection unanswered (it answers a bounded
    /// number of unauthenticated connections at once, [`crate::listen`]), or
    /// it is not rdma-pipe. A dialing end dials again within
    /// `--connect-timeout` ([`crate::handshake::dial`]).
    #[error("{peer} closed the connection before its hello ({cause}): is the port busy, or not rdma-pipe's?")]
    ClosedBeforeHello {
        /// The peer's address.
        peer: String,
        /// How it closed.
        cause: GoneCause,
    },
    /// A peer authenticated on a hop's listening port while the stream ran,
    /// but did not open with the message bound to this stream: it holds the
    /// key but is not the stream's other end (another rdsend or receiver
    /// started with the same key). It is dropped with a reset; the stream
    /// goes on on its own connection ([`crate::listen::Proof`]).
    #[error("{peer} authenticated but is not this stream's other end ({source}); dropped")]
    NotThisStream {
        /// The peer's address.
        peer: String,
        /// What it sent instead (or that it sent nothing in time).
        source: Box<TransportError>,
    },
    /// The peer failed (or we failed) mutual authentication.
    #[error("authentication failed with {peer}: the keys differ")]
    AuthFailed {
        /// The peer's address.
        peer: String,
    },
    /// Compression was asked for but the peer's build predates it.
    #[error("{peer} does not support --compress (it runs an rdma-pipe from before compression): upgrade it there, or run without --compress")]
    NoCompression {
        /// The peer's address.
        peer: String,
    },
    /// A compressed chunk did not decode.
    #[error("a compressed chunk from {peer} after byte {bytes} was refused: {source}")]
    BadChunk {
        /// The peer's address.
        peer: String,
        /// Bytes of the stream before it.
        bytes: u64,
        /// What was wrong.
        source: rdpipe_wire::compress::CompressError,
    },
    /// The two ends' transport choices cannot be reconciled.
    #[error("transport mismatch: {0}")]
    TransportMismatch(String),
    /// RDMA was required but this host cannot load libibverbs/librdmacm.
    #[error("--transport rdma: {0}")]
    RdmaLibraries(#[source] rdpipe_verbs::VerbsError),
    /// RDMA was required but one end declined it.
    #[error("RDMA unavailable: {decline} ({required})")]
    RdmaUnavailable {
        /// Who declined and why.
        #[source]
        decline: Box<Decline>,
        /// Whose `--transport rdma` forbade the fallback to TCP.
        required: RequiredBy,
    },
    /// A failure of the RDMA connection.
    #[error("RDMA: {0}")]
    Rdma(#[from] RdmaError),
    /// Reading our input failed.
    #[error("reading input failed: {0}")]
    Input(#[source] io::Error),
    /// Writing our output failed (EPIPE included).
    #[error("writing output failed: {0}")]
    Output(#[source] io::Error),
    /// The peer closed or reset the connection where the protocol did not allow it.
    #[error("connection to {peer} lost: {cause}")]
    PeerGone {
        /// The peer's address.
        peer: String,
        /// What was observed (EOF, reset, timeout).
        cause: GoneCause,
    },
    /// The stream ended without an end-of-stream frame.
    #[error("stream truncated after {bytes} bytes ({cause})")]
    Truncated {
        /// Bytes received before the loss.
        bytes: u64,
        /// What ended it.
        cause: GoneCause,
    },
    /// The end-of-stream byte count differs from what arrived.
    #[error("stream length mismatch: sender sent {sent} bytes, {received} arrived")]
    LengthMismatch {
        /// The sender's count.
        sent: u64,
        /// Ours.
        received: u64,
    },
    /// The end-of-stream checksum differs from what arrived.
    #[error("stream checksum mismatch after {bytes} bytes: sender {sent:016x}, received {received:016x}")]
    ChecksumMismatch {
        /// Bytes compared.
        bytes: u64,
        /// The sender's checksum.
        sent: u64,
        /// Ours.
        received: u64,
    },
    /// The stream, a chunk of it, or its End or Done failed the integrity check:
    /// changed on the way by someone without the session keys.
    #[error(
        "{what} failed its integrity check after {bytes} bytes: the data was altered on the \
         way; the output is not declared good"
    )]
    Tampered {
        /// What failed: the stream, an encrypted chunk, the confirmation.
        what: &'static str,
        /// Bytes received (or sent) so far.
        bytes: u64,
    },
    /// A re-linked chain sink asked to resume at a byte that has left the
    /// upstream relay's replay window ([`crate::replay`]).
    #[error(
        "cannot resume the stream at byte {offset}: the sending side's replay window \
         holds bytes {start}..{end} only (a larger --replay-window keeps more)"
    )]
    BeyondWindow {
        /// The resume offset asked for.
        offset: u64,
        /// The window's first byte.
        start: u64,
        /// The byte just past the window's last.
        end: u64,
    },
    /// A hop's connection died and no new one resumed the stream within
    /// `--reconnect-timeout`.
    #[error(
        "connection to {peer} lost after {bytes} bytes and not re-established within {secs:.0} s \
         (--reconnect-timeout): {cause}"
    )]
    NotReconnected {
        /// The peer (as dialed, or the address it came from).
        peer: String,
        /// Bytes of the stream the receiver held.
        bytes: u64,
        /// How long it tried.
        secs: f64,
        /// How the connection was lost.
        cause: Box<TransportError>,
    },
    /// The peer abandoned the stream and said why.
    #[error("peer aborted the stream: {0}")]
    PeerAborted(String),
    /// Some other I/O on the connection failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: &'static str,
        /// The error.
        source: io::Error,
    },
}

impl TransportError {
    /// The documented exit status for this error.
    pub fn exit_code(&self) -> u8 {
        use TransportError::*;
        match self {
            Resolve { .. } | Connect { .. } | Listen { .. } | ClosedBeforeHello { .. } => {
                EXIT_CONNECT
            }
            AuthFailed { .. } | NotThisStream { .. } => EXIT_AUTH,
            Protocol { .. } | HandshakeTimeout { .. } | NoCompression { .. } | BadChunk { .. } => {
                EXIT_PROTOCOL
            }
            TransportMismatch(_) | RdmaLibraries(_) | RdmaUnavailable { .. } => EXIT_NO_RDMA,
            Truncated { .. }
            | LengthMismatch { .. }
            | ChecksumMismatch { .. }
            | PeerGone { .. }
            | NotReconnected { .. }
            | BeyondWindow { .. } => EXIT_INCOMPLETE,
            PeerAborted(_) | Output(_) => EXIT_ABORTED,
            Tampered { .. } => EXIT_TAMPERED,
            Accept(_) | Announce(_) | SocketOption(_) | Rdma(_) | Input(_) | Io { .. } => {
                EXIT_FAILURE
            }
        }
    }
}

/// How a peer was found gone ([`TransportError::PeerGone`]), or what cut a stream
/// short ([`TransportError::Truncated`]).
#[derive(Debug, thiserror::Error)]
pub enum GoneCause {
    /// The connection was closed (EOF where the protocol wanted more).
    #[error("connection closed by peer")]
    Closed,
    /// A read timed out (the handshake's bound, or the socket's).
    #[error("timed out waiting for the peer")]
    TimedOut,
    /// Another I/O error on the connection (a reset, for instance).
    #[error("{0}")]
    Io(#[source] io::Error),
    /// The TCP sender's writer thread stopped without saying why.
    #[error("writer stopped")]
    WriterStopped,
    /// The TCP sender's back channel closed before the confirmation.
    #[error("no confirmation from the receiver")]
    NoConfirmation,
    /// Work requests were flushed or retried out: the RDMA peer is gone.
    #[error("RDMA connection lost: {0}")]
    RdmaLost(rdpipe_verbs::WcError),
    /// rdma_cm reported DISCONNECTED.
    #[error("RDMA connection lost (peer disconnected)")]
    RdmaDisconnected,
    /// rdma_cm reported the device's removal.
    #[error("RDMA device removed")]
    RdmaDeviceRemoved,
    /// Both ends waited on each other over RDMA (each told the other on the
    /// TCP connection): a message was lost on the path without either queue
    /// pair failing.
    #[error("RDMA connection stalled: both ends waited {0} s on each other")]
    RdmaStalled(u64),
    /// The RDMA connection failed.
    #[error("{0}")]
    Rdma(#[source] RdmaError),
    /// The connection was lost after end of stream, before the confirmation.
    #[error("{0} before the receiver confirmed the stream")]
    Unconfirmed(#[source] Box<GoneCause>),
}
