//! The handshake driver: hellos, the PAKE and key confirmation, and the
//! receiver's decision, over the TCP connection every transfer starts with.
//!
//! Order (both ends run the same code with their own role):
//! 1. send our hello; read the peer's magic+version first, then the rest (a
//!    listening end has read the dialer's hello before it sends its own:
//!    [`crate::listen`] answers only a connection that sent one, and a
//!    dialing end whose connection closes before the listener's hello dials
//!    again, [`dial`]);
//! 2. send our SPAKE2 message, read the peer's; both derive the session keys
//!    from the PAKE secret and the transcript (both hellos, both PAKE messages);
//! 3. the receiver picks the transport, chunk size and slots and sends Accept with
//!    its confirmation tag over it; the sender checks the tag and answers with its
//!    own; the receiver checks that. A wrong key (or anything tampered with on the
//!    way) fails a confirmation: nothing about the data path (ports, tokens,
//!    memory) has been revealed yet, and nothing sent lets anyone test key
//!    guesses offline (see docs/security.md).
//!
//! Before the peer is authenticated, nothing it says is trusted: an Abort, an
//! unexpected frame or end of file is "authentication failed" (or a protocol
//! error), never the text it sent. The whole handshake has one deadline
//! (`--handshake-timeout`), counted from its start, not per read, so a peer that
//! trickles bytes cannot hold an endpoint longer.

use crate::error::GoneCause;
use crate::frame_io::{conn_error, protocol, read_control, write_control};
use crate::{Rate, TransportError};
use rdpipe_wire::frame::{choose_transport, Chosen};
use rdpipe_wire::hello::{HELLO_PREFIX_LEN, NONCE_LEN};
use rdpipe_wire::*;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

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
    /// `--integrity` / `--encrypt`: the protection this end wants.
    pub integrity: Integrity,
    /// `--rate-limit`: told to the peer in the hello; the sender paces to the
    /// lower of the two ends' limits.
    pub rate_limit: Option<Rate>,
    /// `--compress`: this end's wish.
    pub compress: Compress,
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
    /// The protection both ends use (the stronger of the two wishes).
    pub integrity: Integrity,
    /// The keys this connection's handshake derived.
    pub keys: SessionKeys,
    /// The rate the sender paces the stream to: the lower of the two ends'
    /// `--rate-limit` (the peer's as its authenticated hello carries it).
    pub rate_limit: Option<Rate>,
    /// The compression both ends use: the sender's wish, or the receiver's
    /// when the sender asked for none ([`Compress::negotiate`]).
    pub compress: Compress,
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

/// A reader that gives every read only the time left until `until`: the
/// handshake's one deadline.
struct Deadline<'a> {
    stream: &'a mut TcpStream,
    until: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

impl Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// Runs the whole handshake on `stream` within `timeout` (one deadline for all
/// of it), so a peer that connects and says nothing, or trickles, cannot hold
/// us longer.
pub fn handshake(
    stream: &mut TcpStream,
    key: &[u8],
    local: &LocalParams,
    timeout: Duration,
) -> Result<Negotiated, TransportError> {
    drive(stream, key, local, timeout, Instant::now(), None)
}

/// The handshake of a listening end ([`crate::listen`]) on a connection
/// accepted at `started` whose peer's hello was read already (`hello`, its
/// prefix checked): the deadline counts from `started`.
pub fn handshake_accepted(
    stream: &mut TcpStream,
    key: &[u8],
    local: &LocalParams,
    timeout: Duration,
    started: Instant,
    hello: [u8; HELLO_LEN],
) -> Result<Negotiated, TransportError> {
    drive(stream, key, local, timeout, started, Some(hello))
}

fn drive(
    stream: &mut TcpStream,
    key: &[u8],
    local: &LocalParams,
    timeout: Duration,
    started: Instant,
    hello: Option<[u8; HELLO_LEN]>,
) -> Result<Negotiated, TransportError> {
    let peer = peer_name(stream);
    let mut d = Deadline {
        stream,
        until: started + timeout,
    };
    let r = run(&mut d, key, local, &peer, hello).map_err(|e| timeout_error(&peer, e, timeout));
    stream
        .set_read_timeout(None)
        .map_err(TransportError::SocketOption)?;
    r
}

/// The peer's address as messages show it (an IPv4 peer of an IPv6 socket
/// as plain IPv4).
pub(crate) fn peer_name(s: &TcpStream) -> String {
    s.peer_addr()
        .map(|a| std::net::SocketAddr::new(a.ip().to_canonical(), a.port()).to_string())
        .unwrap_or_else(|_| "peer".into())
}

/// How long a dialing end pauses before it dials again after the listening
/// end closed a connection before its hello, at first; it doubles up to
/// [`REDIAL_MAX_PAUSE`].
const REDIAL_FIRST_PAUSE: Duration = Duration::from_millis(20);
const REDIAL_MAX_PAUSE: Duration = Duration::from_millis(250);

/// Dials `host:port` and runs the handshake, as the end that connects: a
/// refused connection is retried ([`crate::connect::connect_retry`]), and so
/// is one that the listening end closes before its hello (it drops what it
/// cannot answer yet, see [`crate::listen`]), until `connect_timeout` has
/// passed.
pub fn dial(
    host: &str,
    port: u16,
    connect_timeout: Duration,
    key: &[u8],
    local: &LocalParams,
    timeout: Duration,
) -> Result<(TcpStream, Negotiated), TransportError> {
    let deadline = Instant::now() + connect_timeout;
    let mut pause = REDIAL_FIRST_PAUSE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut s = crate::connect::connect_retry(host, port, left)?;
        match handshake(&mut s, key, local, timeout) {
            Ok(n) => return Ok((s, n)),
            Err(e @ TransportError::ClosedBeforeHello { .. })
                if Instant::now() + pause < deadline =>
            {
                tracing::debug!("{e}; dialing again");
                std::thread::sleep(pause);
                pause = (pause * 2).min(REDIAL_MAX_PAUSE);
            }
            Err(e) => return Err(e),
        }
    }
}

/// A failure on a connection before the peer's hello: a close or a reset
/// is [`TransportError::ClosedBeforeHello`].
fn before_hello(peer: &str, e: io::Error) -> TransportError {
    match conn_error(peer, e) {
        TransportError::PeerGone {
            cause: cause @ (GoneCause::Closed | GoneCause::Io(_)),
            ..
        } => TransportError::ClosedBeforeHello {
            peer: peer.to_string(),
            cause,
        },
        other => other,
    }
}

/// This end's hello, with a fresh nonce.
pub(crate) fn our_hello(local: &LocalParams) -> Result<Hello, TransportError> {
    Ok(Hello {
        version: PROTOCOL_VERSION,
        role: local.role,
        transport: local.transport,
        caps: local.caps,
        chunk_size: local.chunk_size,
        slots: local.slots,
        nonce: random_bytes::<NONCE_LEN>()?,
        integrity: local.integrity,
        rate_limit: local.rate_limit.map(Rate::get),
        compress: local.compress,
    })
}

/// Reads the peer's hello: magic and version first, then the rest. A
/// connection closed or reset before any of it is
/// [`TransportError::ClosedBeforeHello`] (a listening end that dropped it).
fn read_hello(s: &mut Deadline, peer: &str) -> Result<[u8; HELLO_LEN], TransportError> {
    let mut b = [0u8; HELLO_LEN];
    s.read_exact(&mut b[..HELLO_PREFIX_LEN])
        .map_err(|e| before_hello(peer, e))?;
    let mut prefix = [0u8; HELLO_PREFIX_LEN];
    prefix.copy_from_slice(&b[..HELLO_PREFIX_LEN]);
    Hello::check_prefix(&prefix).map_err(|e| protocol(peer, e))?;
    s.read_exact(&mut b[HELLO_PREFIX_LEN..])
        .map_err(|e| conn_error(peer, e))?;
    Ok(b)
}

/// Reads the next frame from a peer not yet authenticated, expecting `want`.
/// An Abort or end of file here means the peer gave up on the authentication
/// (its text is not trusted); anything else is a protocol error.
fn read_unauthenticated(
    s: &mut Deadline,
    peer: &str,
    want: FrameKind,
) -> Result<Control, TransportError> {
    let auth_failed = || TransportError::AuthFailed {
        peer: peer.to_string(),
    };
    match read_control(s, peer) {
        Ok(c) if c.kind() == want => Ok(c),
        Ok(Control::Abort { .. }) => Err(auth_failed()),
        Ok(other) => Err(protocol(peer, WireError::Unexpected(other.kind()))),
        Err(TransportError::PeerGone {
            cause: GoneCause::Closed | GoneCause::Io(_),
            ..
        }) => Err(auth_failed()),
        Err(e) => Err(e),
    }
}

fn run(
    s: &mut Deadline,
    key: &[u8],
    local: &LocalParams,
    peer: &str,
    hello: Option<[u8; HELLO_LEN]>,
) -> Result<Negotiated, TransportError> {
    let ours = our_hello(local)?;
    let our_bytes = ours.encode();
    s.write_all(&our_bytes).map_err(|e| match hello {
        None => before_hello(peer, e),
        Some(_) => conn_error(peer, e),
    })?;
    let their_bytes = match hello {
        Some(b) => b,
        None => read_hello(s, peer)?,
    };
    let theirs = Hello::decode(&their_bytes).map_err(|e| protocol(peer, e))?;
    tracing::debug!(
        "hello from {peer}: {:?}, transport {:?}, caps {:#x}, chunk {}, slots {}, {}, rate limit {:?}, compress {}",
        theirs.role,
        theirs.transport,
        theirs.caps.0,
        theirs.chunk_size,
        theirs.slots,
        theirs.integrity.as_str(),
        theirs.rate_limit,
        theirs.compress
    );
    if theirs.role == local.role {
        return Err(protocol(peer, WireError::SameRole(local.role)));
    }

    // The PAKE: each end's message, then the keys over the whole transcript.
    let pake = Pake::start(local.role, key);
    let our_msg = *pake.message();
    write_control(s, peer, &Control::Pake(our_msg))?;
    let Control::Pake(their_msg) = read_unauthenticated(s, peer, FrameKind::Pake)? else {
        unreachable!("read_unauthenticated returns the kind asked for")
    };
    let (sh, rh, sm, rm) = match local.role {
        Role::Sender => (&our_bytes, &their_bytes, &our_msg, &their_msg),
        Role::Receiver => (&their_bytes, &our_bytes, &their_msg, &our_msg),
    };
    let transcript = [&sh[..], &rh[..], &sm[..], &rm[..]].concat();
    let keys = pake
        .finish(&their_msg, &transcript)
        .map_err(|e| protocol(peer, e))?;

    // The receiver decides, then both confirm the keys over its decision.
    let both = ours.caps.contains(Caps::RDMA) && theirs.caps.contains(Caps::RDMA);
    let (sender_pref, receiver_pref) = match local.role {
        Role::Sender => (ours.transport, theirs.transport),
        Role::Receiver => (theirs.transport, ours.transport),
    };
    let auth_failed = |s: &mut Deadline| {
        let abort = Control::Abort {
            reason: AbortReason::AuthFailed,
            message: "authentication failed".into(),
        };
        let _ = write_control(s, peer, &abort);
        TransportError::AuthFailed {
            peer: peer.to_string(),
        }
    };
    let accept = match local.role {
        Role::Receiver => {
            let accept = Control::Accept {
                transport: choose_transport(sender_pref, receiver_pref, both)
                    .unwrap_or(Chosen::Refused),
                chunk_size: ours.chunk_size.min(theirs.chunk_size),
                slots: ours.slots,
            };
            let bytes = accept.encode();
            write_control(s, peer, &accept)?;
            write_control(
                s,
                peer,
                &Control::Confirm(keys.confirm_tag(Role::Receiver, &bytes)),
            )?;
            let Control::Confirm(t) = read_unauthenticated(s, peer, FrameKind::Confirm)? else {
                unreachable!("read_unauthenticated returns the kind asked for")
            };
            if !keys.verify_confirm(Role::Sender, &bytes, &t) {
                return Err(auth_failed(s));
            }
            accept
        }
        Role::Sender => {
            let accept = read_unauthenticated(s, peer, FrameKind::Accept)?;
            let Control::Confirm(t) = read_unauthenticated(s, peer, FrameKind::Confirm)? else {
                unreachable!("read_unauthenticated returns the kind asked for")
            };
            let bytes = accept.encode();
            if !keys.verify_confirm(Role::Receiver, &bytes, &t) {
                return Err(auth_failed(s));
            }
            write_control(
                s,
                peer,
                &Control::Confirm(keys.confirm_tag(Role::Sender, &bytes)),
            )?;
            accept
        }
    };
    let Control::Accept {
        transport: chosen,
        chunk_size,
        slots,
    } = accept
    else {
        unreachable!("the accept is an Accept")
    };
    // Authenticated from here on.
    if chosen == Chosen::Refused {
        return Err(TransportError::TransportMismatch(mismatch_reason(
            sender_pref,
            receiver_pref,
            both,
        )));
    }
    if chunk_size > ours.chunk_size {
        return Err(protocol(peer, WireError::BadChunkSize(chunk_size)));
    }
    let compress = match local.role {
        Role::Sender => Compress::negotiate(ours.compress, theirs.compress),
        Role::Receiver => Compress::negotiate(theirs.compress, ours.compress),
    };
    if compress.is_on() && !theirs.caps.contains(Caps::COMPRESS) {
        // An older build: it would take compressed chunks for data. Told
        // after the authentication, so that it shows our reason.
        let e = TransportError::NoCompression {
            peer: peer.to_string(),
        };
        let abort = Control::Abort {
            reason: AbortReason::Stream,
            message: format!(
                "the other end asks for --compress {compress}, which this rdma-pipe does not support: upgrade it, or run without --compress"
            ),
        };
        let _ = write_control(s, peer, &abort);
        return Err(e);
    }
    let integrity = Integrity::negotiate(ours.integrity, theirs.integrity);
    let rate_limit = Rate::lower(local.rate_limit, theirs.rate_limit.map(Rate::new));
    tracing::debug!(
        "authenticated {peer}; transport {chosen:?}, chunk {chunk_size}, slots {slots}, {}, compress {compress}",
        integrity.as_str()
    );
    Ok(Negotiated {
        chosen,
        chunk_size,
        slots,
        local: ours,
        peer: theirs,
        peer_addr: peer.to_string(),
        integrity,
        keys,
        rate_limit,
        compress,
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
