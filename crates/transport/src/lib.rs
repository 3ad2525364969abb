//! rdma-pipe transports behind one interface, and the loops that drive them.
//!
//! - [`ChunkSender`] / [`ChunkReceiver`]: the interface every transport implements.
//!   It lends out buffers instead of taking slices, so the RDMA transport can have
//!   the input read straight into registered memory and the output written straight
//!   from it, while TCP uses a pool of ordinary buffers.
//! - [`handshake`]: hello, mutual authentication and negotiation, on the TCP
//!   connection that every transfer starts with (RDMA bootstraps from it).
//! - [`tcp`]: the TCP transport (double-buffered with a writer/reader thread).
//! - [`rdma`]: the RDMA transport (rdma_cm set-up, RDMA WRITE into the receiver's
//!   registered ring, credits back as SENDs), built on `rdpipe-verbs`.
//! - [`select`]: which transport carries the stream, and the fallback to TCP
//!   when an end declines RDMA.
//! - [`relay`]: a relay host's two transfers, zero-copy between two RDMA
//!   connections on one device, copying otherwise, both into one
//!   [`relay::RelayOutput`].
//! - [`pump`]: the send and receive loops: checksum, byte count, end of stream.
//! - [`rate`] and [`pace`]: `--rate-limit`, the sender's token bucket (applied in
//!   the send loop, so for every transport).
//! - [`session`]: what every transfer shares: where its connection comes
//!   from, its options, its protection, its report.
//! - [`endpoint`]: what `rdsend` and `rdrecv` run: connect or listen, handshake,
//!   pick the transport, pump, report.
//! - [`reconnect`]: a hop whose connection died while both ends live gets a
//!   new one and resumes out of the sender's replay window.
//! - [`chain`] and [`replay`]: a fan-out chain's hops between sinks, which
//!   re-link around a dead relay host (the upstream relay's bounded replay
//!   window, the resume exchange, one stream MAC across both connections).
#![deny(missing_docs)]

pub mod buf;
pub mod chain;
pub mod compress;
pub mod connect;
pub mod direct;
pub mod endpoint;
pub mod error;
pub mod frame_io;
pub mod handshake;
pub mod listen;
pub mod output;
pub mod pace;
pub mod pump;
pub mod rate;
pub mod rdma;
pub mod reconnect;
pub mod relay;
mod relay_output;
pub mod replay;
pub mod select;
pub mod session;
pub mod tcp;
mod unpack;

pub use endpoint::{run_recv, run_send};
pub use rate::Rate;
pub use session::{Endpoint, Options, Report};

/// Environment variables that tune an endpoint's data path; rdpipe hands those set
/// in its own environment to the endpoints it starts on other hosts (ssh does not
/// pass the environment on), so `RDPIPE_TCP_SEND=inline rdpipe ...` means the same
/// as for rdsend.
pub const TUNING_ENV: [&str; 3] = [tcp::SEND_MODE_ENV, rdma::NO_IMM_ENV, relay::RELAY_COPY_ENV];
pub use error::TransportError;

use rdpipe_wire::StreamEnd;
use std::io as stdio;

/// What a receiver got from [`ChunkReceiver::recv_chunk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A chunk of this many bytes was passed to the drain.
    Chunk(usize),
    /// The sender ended the stream: its byte count, checksum and End tag (checked
    /// by the receive loop, not the transport).
    End(StreamEnd),
}

/// The sending half of a transport.
///
/// Buffers are lent, not passed: [`ChunkSender::send_chunk`] hands the caller a free
/// buffer (a registered slot for RDMA) to fill, then puts it on the wire. It blocks
/// until a buffer is free, which is where the credit logic of a transport lives.
pub trait ChunkSender: Send {
    /// Calls `fill` with a free buffer of the chunk size, then sends the bytes it
    /// filled. Returns that count; 0 means `fill` found end of input and nothing was
    /// sent. An error from `fill` comes back as [`TransportError::Input`].
    fn send_chunk(
        &mut self,
        fill: &mut dyn FnMut(&mut [u8]) -> stdio::Result<usize>,
    ) -> Result<usize, TransportError>;

    /// Sends end of stream, then waits for the receiver's confirmation (Done) and
    /// returns it; the send loop checks it against what it sent.
    fn finish(&mut self, end: &StreamEnd) -> Result<StreamEnd, TransportError>;

    /// Tells the receiver, as far as still possible, that the stream is abandoned.
    fn abort(&mut self, reason: &str);

    /// Why the connection ended, after the send loop saw it hang up between
    /// chunks while its input was idle ([`replay::ConnectionEnded`]): the
    /// error a send would have met (a reset, a timeout, the peer's close or
    /// Abort), for the reconnecting hop to judge.
    fn gone(&mut self) -> TransportError;

    /// Human-readable transport description for `-v` (e.g. `tcp`, `rdma (rxe0)`).
    fn describe(&self) -> String;

    /// The bytes this transport's chunks hold without compression, where a
    /// compressed stream's buffers are larger (TCP: 256 KiB frames, 1 MiB
    /// compressed): a compressed stream's chunk that goes stored, or is
    /// sampled first, is read no larger ([`compress`]). `None`: the buffer's size.
    fn plain_chunk(&self) -> Option<usize> {
        None
    }
}

/// The receiving half of a transport.
pub trait ChunkReceiver: Send {
    /// Waits for the next chunk and passes it to `drain` (straight from the
    /// transport's buffer, which `drain` may change in place: it decrypts there
    /// under `--encrypt`), then recycles the buffer (returns the credit). A chunk
    /// is always one whole data frame or slot as the sender sent it. At the end of
    /// the stream returns what the sender claims, without calling `drain`. An
    /// error from `drain` comes back as it is.
    fn recv_chunk(
        &mut self,
        drain: &mut dyn FnMut(&mut [u8]) -> Result<(), TransportError>,
    ) -> Result<Received, TransportError>;

    /// Whether the next chunk (or End) has arrived already, so that
    /// [`ChunkReceiver::recv_chunk`] would not wait for the network. The receive
    /// loop keeps chunks on the decompression pool while it does, and writes
    /// out everything before it waits. A transport that cannot tell says no.
    fn more_ready(&mut self) -> bool {
        false
    }

    /// Confirms to the sender that the stream was verified and flushed (Done).
    fn confirm(&mut self, done: &StreamEnd) -> Result<(), TransportError>;

    /// Tells the sender, as far as still possible, that the stream is abandoned.
    fn abort(&mut self, reason: &str);

    /// Human-readable transport description for `-v`.
    fn describe(&self) -> String;
}
