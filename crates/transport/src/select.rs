//! Transport selection: which capabilities this end announces, and building the
//! RDMA halves once the handshake chose RDMA (see [`crate::rdma`] for the set-up,
//! the decline and the fallback to TCP).

use crate::handshake::Negotiated;
use crate::{ChunkReceiver, ChunkSender, TransportError};
use rdpipe_wire::{Caps, TransportPref};
use std::net::TcpStream;

/// Capabilities this end announces when RDMA is allowed: `RDMA` when an active
/// RDMA device exists, `WRITE_WITH_IMM` unless `RDPIPE_RDMA_NO_IMM=1` is set or the
/// devices are iWARP.
pub fn rdma_caps() -> Caps {
    crate::rdma::local_caps()
}

/// Builds the RDMA sending half on an authenticated connection. `pref` is this
/// end's `--transport`; whether a failed set-up may fall back to TCP depends on
/// both ends' preferences, which `n` carries.
pub fn rdma_sender(
    stream: TcpStream,
    n: &Negotiated,
    pref: TransportPref,
) -> Result<Box<dyn ChunkSender>, TransportError> {
    debug_assert_eq!(pref, n.local.transport);
    crate::rdma::sender(stream, n)
}

/// Builds the RDMA receiving half on an authenticated connection.
pub fn rdma_receiver(
    stream: TcpStream,
    n: &Negotiated,
    pref: TransportPref,
) -> Result<Box<dyn ChunkReceiver>, TransportError> {
    debug_assert_eq!(pref, n.local.transport);
    crate::rdma::receiver(stream, n)
}
