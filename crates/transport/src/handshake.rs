//! The handshake driver: hellos, mutual authentication and the receiver's decision,
//! over the TCP connection every transfer starts with.
//!
//! Order (both ends run the same code with their own role):
//! 1. send our hello; read the peer's magic+version first, then the rest;
//! 2. send our HMAC tag over both hellos; read and verify the peer's tag. A wrong tag
//!    is answered with an Abort frame and the connection is dropped: nothing about
//!    the data path (ports, tokens, memory) has been revealed yet;
//! 3. the receiver picks the transport, chunk size and slots and sends Accept.

use crate::error::GoneCause;
use crate::frame_io::{conn_error, protocol, read_control, write_control};
use crate::TransportError;
use rdpipe_wire::frame::{choose_transport, Chosen};
use rdpipe_wire::hello::{HELLO_PREFIX_LEN, NONCE_LEN};
use rdpipe_wire::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// What this end brings to the handshake.
#[derive(Debug, Clone)]
pub struct LocalParams {
    /// Sender or receiver.
    pub role: Role,
    /// `--transport`.
    pub transport: TransportPref,
    /// What this end can do (RDMA device present, WRITE_WITH_IMM).
    pub caps: Caps,
    /// `--chunk-size`.
    pub chunk_size: u32,
    /// `--slots`.
    pub slots: u32,
}

/// The outcome of a successful handshake.
#[derive(Debug, Clone)]
pub struct Negotiated {
    /// The transport the receiver chose.
    pub chosen: Chosen,
    /// Chunk size both ends use (the smaller of the two asked for).
    pub chunk_size: u32,
    /// Slots in the receiver's ring.
    pub slots: u32,
    /// Our hello.
    pub local: Hello,
    /// The peer's hello.
    pub peer: Hello,
    /// The peer's address, for messages.
    pub peer_addr: String,
}

/// Fresh random bytes from the OS.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], TransportError> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b).map_err(|e| TransportError::Io {
        context: "reading random bytes from the OS",
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(b)
}

fn timeout_error(peer: &str, e: TransportError, timeout: Duration) -> TransportError {
    match e {
        TransportError::PeerGone {
            cause: GoneCause::TimedOut,
            ..
        } => TransportError::HandshakeTimeout {
            peer: peer.to_string(),
            secs: timeout.as_secs(),
        },
        other => other,
    }
}

/// Runs the whole handshake on `stream`. `timeout` bounds every read, so a peer that
/// connects and says nothing cannot hold us forever.
pub fn handshake(
    stream: &mut TcpStream,
    key: &[u8],
    local: &LocalParams,
    timeout: Duration,
) -> Result<Negotiated, TransportError> {
    let peer = stream
        .peer_addr()
        .map(|a| std::net::SocketAddr::new(a.ip().to_canonical(), a.port()).to_string())
        .unwrap_or_else(|_| "peer".into());
    stream
        .set_read_timeout(Some(timeout))
        .map_err(TransportError::SocketOption)?;
    let r = run(stream, key, local, &peer).map_err(|e| timeout_error(&peer, e, timeout));
    stream
        .set_read_timeout(None)
        .map_err(TransportError::SocketOption)?;
    r
}

fn run(
    stream: &mut TcpStream,
    key: &[u8],
    local: &LocalParams,
    peer: &str,
) -> Result<Negotiated, TransportError> {
    let ours = Hello {
        version: PROTOCOL_VERSION,
        role: local.role,
        transport: local.transport,
        caps: local.caps,
        chunk_size: local.chunk_size,
        slots: local.slots,
        nonce: random_bytes::<NONCE_LEN>()?,
        integrity: Integrity::default(),
    };
    let our_bytes = ours.encode();
    stream
        .write_all(&our_bytes)
        .map_err(|e| conn_error(peer, e))?;

    let mut their_bytes = [0u8; HELLO_LEN];
    stream
        .read_exact(&mut their_bytes[..HELLO_PREFIX_LEN])
        .map_err(|e| conn_error(peer, e))?;
    let mut prefix = [0u8; HELLO_PREFIX_LEN];
    prefix.copy_from_slice(&their_bytes[..HELLO_PREFIX_LEN]);
    Hello::check_prefix(&prefix).map_err(|e| protocol(peer, e))?;
    stream
        .read_exact(&mut their_bytes[HELLO_PREFIX_LEN..])
        .map_err(|e| conn_error(peer, e))?;
    let theirs = Hello::decode(&their_bytes).map_err(|e| protocol(peer, e))?;
    tracing::debug!(
        "hello from {peer}: {:?}, transport {:?}, caps {:#x}, chunk {}, slots {}",
        theirs.role,
        theirs.transport,
        theirs.caps.0,
        theirs.chunk_size,
        theirs.slots
    );
    if theirs.role == local.role {
        return Err(protocol(peer, WireError::SameRole(local.role)));
    }

    let (s, r) = match local.role {
        Role::Sender => (&our_bytes, &their_bytes),
        Role::Receiver => (&their_bytes, &our_bytes),
    };
    let tag = auth_tag(key, local.role, s, r);
    write_control(stream, peer, &Control::Auth(tag))?;
    let auth_failed = || TransportError::AuthFailed {
        peer: peer.to_string(),
    };
    match read_control(stream, peer) {
        Ok(Control::Auth(t)) => {
            if !verify_tag(key, theirs.role, s, r, &t) {
                let abort = Control::Abort {
                    reason: AbortReason::AuthFailed,
                    message: "authentication failed".into(),
                };
                let _ = write_control(stream, peer, &abort);
                return Err(auth_failed());
            }
        }
        Ok(Control::Abort {
            reason: AbortReason::AuthFailed,
            ..
        }) => return Err(auth_failed()),
        Ok(Control::Abort { message, .. }) => return Err(TransportError::PeerAborted(message)),
        Ok(other) => return Err(protocol(peer, WireError::Unexpected(other.kind()))),
        // A peer that rejected our tag may close before we read its Abort.
        Err(TransportError::PeerGone { .. }) => return Err(auth_failed()),
        Err(e) => return Err(e),
    }

    let (chosen, chunk_size, slots) = match local.role {
        Role::Receiver => {
            let both = ours.caps.contains(Caps::RDMA) && theirs.caps.contains(Caps::RDMA);
            let chunk = ours.chunk_size.min(theirs.chunk_size);
            match choose_transport(theirs.transport, ours.transport, both) {
                Some(chosen) => {
                    write_control(
                        stream,
                        peer,
                        &Control::Accept {
                            transport: chosen,
                            chunk_size: chunk,
                            slots: ours.slots,
                        },
                    )?;
                    (chosen, chunk, ours.slots)
                }
                None => {
                    let why = mismatch_reason(theirs.transport, ours.transport, both);
                    let abort = Control::Abort {
                        reason: AbortReason::TransportMismatch,
                        message: why.clone(),
                    };
                    let _ = write_control(stream, peer, &abort);
                    return Err(TransportError::TransportMismatch(why));
                }
            }
        }
        Role::Sender => match read_control(stream, peer)? {
            Control::Accept {
                transport,
                chunk_size,
                slots,
            } => {
                if chunk_size > ours.chunk_size {
                    return Err(protocol(peer, WireError::BadChunkSize(chunk_size)));
                }
                (transport, chunk_size, slots)
            }
            Control::Abort { message, .. } => {
                return Err(TransportError::TransportMismatch(message))
            }
            other => return Err(protocol(peer, WireError::Unexpected(other.kind()))),
        },
    };
    tracing::debug!(
        "authenticated {peer}; transport {chosen:?}, chunk {chunk_size}, slots {slots}"
    );
    Ok(Negotiated {
        chosen,
        chunk_size,
        slots,
        local: ours,
        peer: theirs,
        peer_addr: peer.to_string(),
    })
}

fn mismatch_reason(sender: TransportPref, receiver: TransportPref, both_rdma: bool) -> String {
    if sender == TransportPref::Tcp || receiver == TransportPref::Tcp {
        format!("sender asks for {sender:?}, receiver for {receiver:?}").to_lowercase()
    } else if !both_rdma {
        "--transport rdma was given but the two ends do not both have an active RDMA device"
            .to_string()
    } else {
        "no common transport".to_string()
    }
}
