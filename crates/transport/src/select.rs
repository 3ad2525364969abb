//! Transport selection: which capabilities this end announces, and building the
//! RDMA halves once the handshake chose RDMA. Without RDMA support every RDMA
//! request ends here with a clear [`TransportError::RdmaUnavailable`].

use crate::handshake::Negotiated;
use crate::{ChunkReceiver, ChunkSender, TransportError};
use rdpipe_wire::{Caps, TransportPref};
use std::net::TcpStream;

/// Capabilities this end announces when RDMA is allowed.
pub fn rdma_caps() -> Caps {
    Caps::default()
}

/// Builds the RDMA sending half on an authenticated connection.
pub fn rdma_sender(
    _stream: TcpStream,
    _n: &Negotiated,
    _pref: TransportPref,
) -> Result<Box<dyn ChunkSender>, TransportError> {
    Err(TransportError::RdmaUnavailable(
        "this build has no RDMA transport".into(),
    ))
}

/// Builds the RDMA receiving half on an authenticated connection.
pub fn rdma_receiver(
    _stream: TcpStream,
    _n: &Negotiated,
    _pref: TransportPref,
) -> Result<Box<dyn ChunkReceiver>, TransportError> {
    Err(TransportError::RdmaUnavailable(
        "this build has no RDMA transport".into(),
    ))
}
