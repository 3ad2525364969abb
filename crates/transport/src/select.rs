//! Which transport carries the stream, once the handshake is done: the
//! capabilities this end announces, building the half the receiver chose, and
//! the one decision RDMA set-up leaves open: when either end declines RDMA
//! ([`crate::rdma::Setup::Declined`]), the stream goes over TCP on the same
//! connection (with a warning) if both ends asked for `auto`, and otherwise both
//! fail with [`TransportError::RdmaUnavailable`] (exit 7).

use crate::handshake::Negotiated;
use crate::rdma::{self, Decline, RequiredBy, Setup};
use crate::tcp::{self, TcpReceiver, TcpSender};
use crate::{ChunkReceiver, ChunkSender, TransportError};
use rdpipe_wire::frame::Chosen;
use rdpipe_wire::{Caps, TransportPref};
use std::net::TcpStream;

/// Capabilities this end announces for `--transport pref`: none for `tcp`;
/// otherwise `RDMA` when an active RDMA device exists, `WRITE_WITH_IMM` unless
/// `RDPIPE_RDMA_NO_IMM=1` is set or the devices are iWARP.
pub fn local_caps(pref: TransportPref) -> Caps {
    // Every build since compression reads compressed chunks.
    transport_caps(pref)
        .union(Caps::COMPRESS)
        .union(Caps::WIDE_COMPRESSED)
        .union(Caps::LARGE_COMPRESSED)
}

fn transport_caps(pref: TransportPref) -> Caps {
    if pref == TransportPref::Tcp {
        return Caps::default();
    }
    // Without loadable RDMA libraries this end announces none, and `auto` says
    // so at `-v`.
    if let Err(e) = rdpipe_verbs::load() {
        if pref == TransportPref::Auto {
            tracing::info!("--transport auto uses TCP: {e}");
        }
        return Caps::default();
    }
    rdma::local_caps()
}

/// Whether a declined RDMA set-up may fall back to TCP: only when both ends said
/// `auto`.
fn may_fall_back(n: &Negotiated) -> bool {
    n.local.transport == TransportPref::Auto && n.peer.transport == TransportPref::Auto
}

/// The fallback decision: `Ok` (go on over TCP, with a warning) or exit 7.
fn fall_back(n: &Negotiated, decline: Decline) -> Result<(), TransportError> {
    if !may_fall_back(n) {
        let required = if n.local.transport == TransportPref::Rdma {
            RequiredBy::ThisEnd
        } else {
            RequiredBy::Peer
        };
        return Err(TransportError::RdmaUnavailable {
            decline: Box::new(decline),
            required,
        });
    }
    tracing::warn!("RDMA unavailable ({}); falling back to TCP", decline.reason);
    Ok(())
}

/// The TCP transport's buffer for this stream: larger for a compressed one
/// where both ends take larger frames ([`tcp::buffer_size`]).
pub(crate) fn tcp_buffer(n: &Negotiated) -> usize {
    let both = |c| n.local.caps.contains(c) && n.peer.caps.contains(c);
    let frames = if !n.compress.is_on() {
        tcp::Frames::Plain
    } else if both(Caps::LARGE_COMPRESSED) {
        tcp::Frames::Large
    } else if both(Caps::WIDE_COMPRESSED) {
        tcp::Frames::Wide
    } else {
        tcp::Frames::Plain
    };
    tcp::buffer_size(n.chunk_size as usize, frames)
}

/// The most bytes one chunk of this stream holds on any transport: the
/// negotiated chunk size (an RDMA slot), or a compressed stream's larger TCP
/// frame. Bounds what a receiver accepts and decompresses.
pub(crate) fn largest_chunk(n: &Negotiated) -> usize {
    tcp_buffer(n).max(n.chunk_size as usize)
}

fn tcp_sender(
    stream: TcpStream,
    n: &Negotiated,
    buffers: usize,
) -> Result<Box<dyn ChunkSender>, TransportError> {
    let tx =
        TcpSender::new(stream, tcp_buffer(n), buffers, n.peer_addr.clone()).map_err(|source| {
            TransportError::Io {
                context: "starting the TCP sender",
                source,
            }
        })?;
    Ok(Box::new(tx))
}

fn tcp_receiver(stream: TcpStream, n: &Negotiated) -> Box<dyn ChunkReceiver> {
    Box::new(TcpReceiver::new(
        stream,
        tcp_buffer(n),
        largest_chunk(n),
        n.peer_addr.clone(),
    ))
}

/// A half as built: the RDMA one as itself (a relay may forward from one RDMA
/// connection to another without copying, [`crate::relay`]), any other behind
/// the common interface.
pub enum Half<R, D: ?Sized> {
    /// RDMA.
    Rdma(Box<R>),
    /// TCP (or RDMA's TCP fallback).
    Other(Box<D>),
}

/// A built sending half.
pub type SendHalf = Half<rdma::RdmaSender, dyn ChunkSender>;
/// A built receiving half.
pub type RecvHalf = Half<rdma::RdmaReceiver, dyn ChunkReceiver>;

impl SendHalf {
    /// Behind the common interface.
    pub fn into_dyn(self) -> Box<dyn ChunkSender> {
        match self {
            Half::Rdma(t) => t,
            Half::Other(t) => t,
        }
    }
}

impl RecvHalf {
    /// Behind the common interface.
    pub fn into_dyn(self) -> Box<dyn ChunkReceiver> {
        match self {
            Half::Rdma(r) => r,
            Half::Other(r) => r,
        }
    }
}

/// Builds the sending half the handshake chose on the authenticated connection;
/// `buffers` is this end's `--slots`, the TCP sender's buffer count.
pub fn sender(
    stream: TcpStream,
    n: &Negotiated,
    buffers: usize,
) -> Result<Box<dyn ChunkSender>, TransportError> {
    send_half(stream, n, buffers).map(SendHalf::into_dyn)
}

/// As [`sender`], the RDMA half as itself.
pub fn send_half(
    stream: TcpStream,
    n: &Negotiated,
    buffers: usize,
) -> Result<SendHalf, TransportError> {
    match n.chosen {
        Chosen::Refused => Err(refused()),
        Chosen::Tcp => tcp_sender(stream, n, buffers).map(Half::Other),
        Chosen::Rdma => match rdma::sender(stream, n)? {
            Setup::Ready(tx) => Ok(Half::Rdma(tx)),
            Setup::Declined { stream, decline } => {
                fall_back(n, decline)?;
                tcp_sender(stream, n, n.slots as usize).map(Half::Other)
            }
        },
    }
}

/// The handshake ends a refused negotiation itself; this is for completeness.
fn refused() -> TransportError {
    TransportError::TransportMismatch("no common transport".into())
}

/// Builds the receiving half the handshake chose on the authenticated connection.
pub fn receiver(
    stream: TcpStream,
    n: &Negotiated,
) -> Result<Box<dyn ChunkReceiver>, TransportError> {
    recv_half(stream, n).map(RecvHalf::into_dyn)
}

/// As [`receiver`], the RDMA half as itself.
pub fn recv_half(stream: TcpStream, n: &Negotiated) -> Result<RecvHalf, TransportError> {
    match n.chosen {
        Chosen::Refused => Err(refused()),
        Chosen::Tcp => Ok(Half::Other(tcp_receiver(stream, n))),
        Chosen::Rdma => match rdma::receiver(stream, n)? {
            Setup::Ready(rx) => Ok(Half::Rdma(rx)),
            Setup::Declined { stream, decline } => {
                fall_back(n, decline)?;
                Ok(Half::Other(tcp_receiver(stream, n)))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::{DeclineReason, Decliner, RdmaSetupError};
    use rdpipe_wire::Role;

    fn negotiated(local: TransportPref, peer: TransportPref) -> Negotiated {
        let hello = |role, transport| rdpipe_wire::Hello {
            version: rdpipe_wire::PROTOCOL_VERSION,
            role,
            transport,
            caps: Caps::RDMA,
            chunk_size: 1 << 20,
            slots: 2,
            nonce: [0; rdpipe_wire::hello::NONCE_LEN],
            integrity: rdpipe_wire::Integrity::Mac,
            rate_limit: None,
            compress: rdpipe_wire::Compress::None,
        };
        Negotiated {
            chosen: Chosen::Rdma,
            chunk_size: 1 << 20,
            slots: 2,
            local: hello(Role::Receiver, local),
            peer: hello(Role::Sender, peer),
            peer_addr: "peer".into(),
            integrity: rdpipe_wire::Integrity::Mac,
            keys: rdpipe_wire::SessionKeys::derive(b"test", b""),
            rate_limit: None,
            compress: rdpipe_wire::Compress::None,
        }
    }

    fn declined_here() -> Decline {
        Decline {
            by: Decliner::Here(Role::Receiver),
            reason: DeclineReason::Local(RdmaSetupError::TooManySlots(65)),
        }
    }

    #[test]
    fn fallback_only_when_both_ends_said_auto() {
        use TransportPref::*;
        assert!(may_fall_back(&negotiated(Auto, Auto)));
        assert!(!may_fall_back(&negotiated(Rdma, Auto)));
        assert!(!may_fall_back(&negotiated(Auto, Rdma)));
        assert!(fall_back(&negotiated(Auto, Auto), declined_here()).is_ok());
        let e = fall_back(&negotiated(Auto, Rdma), declined_here()).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_NO_RDMA);
        assert_eq!(
            e.to_string(),
            "RDMA unavailable: this end (receiver) cannot use RDMA: 65 slots are more than 64 \
             (the peer requires --transport rdma)"
        );
        let e = fall_back(
            &negotiated(Rdma, Auto),
            Decline {
                by: Decliner::Peer(Role::Sender),
                reason: DeclineReason::Peer("x".into()),
            },
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "RDMA unavailable: the sender cannot use RDMA: x (--transport rdma was given here)"
        );
    }
}
