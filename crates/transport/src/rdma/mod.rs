//! The RDMA transport: the stream moves by RDMA WRITE into the receiver's
//! registered ring, with credits coming back as SENDs. This file has the entry
//! points ([`sender`], [`receiver`]); the rest lives in:
//!
//! - `setup.rs`: the rdma_cm listener, resolution, registration and the
//!   connect/accept handshake with its token check;
//! - `conn.rs`: an established connection and its completion wait loop;
//! - `sender.rs` / `receiver.rs`: each half's credit logic;
//! - `forward.rs`: the zero-copy relay, from one connection's receive ring
//!   straight into the next host's ring;
//! - its errors (why set-up was declined, and what can fail afterwards) live in
//!   `crate::error::rdma` (`src/error/rdma.rs`), beside the crate's error type.
//!
//! The formats on the wire (SEND messages, immediate data, connect and accept
//! private data) are in [`rdpipe_wire::rdma`].
//!
//! # Connection (after the TCP handshake chose RDMA)
//! 1. The receiver opens an rdma_cm listener bound to the TCP connection's local
//!    address on an ephemeral port, allocates its PD and registers its ring, then
//!    sends [`Control::RdmaOffer`] (port, one-time token, whether WRITE_WITH_IMM is
//!    welcome) over the authenticated TCP connection.
//! 2. The sender resolves the receiver's address and route with rdma_cm, registers
//!    its own slots and connects with the token (and its data-path mode) in the
//!    private data. The receiver rejects every connect request without the right
//!    token; only when it is right does it accept, and only the accept carries the
//!    ring's address and rkey. So no registered memory is revealed to anyone who
//!    has not passed the TCP path's mutual authentication.
//! 3. If either side cannot set RDMA up (no RDMA device has its address, the
//!    locked-memory limit is too low, ...), it sends [`Control::RdmaDecline`] with
//!    the reason, and both entry points return [`Setup::Declined`] with the TCP
//!    connection, untouched. Whether the stream then goes over TCP (both ends
//!    asked for `auto`) or both fail with exit 7 is decided in [`crate::select`].
//!    The sender decides when a connection that was accepted fails or never
//!    completes: it declines once it sees the failure or its set-up time runs
//!    out ([`SETUP_TIMEOUT`], 30 s from the offer), and the receiver waits
//!    [`DECIDE_GRACE`] longer than that for its word, whatever its own half of
//!    the connection did. (A device that just came back takes connections
//!    slowly; both ends then go on over TCP, rather than the receiver failing
//!    while the sender falls back.)
//!
//! # Data path (the credit logic: `sender.rs` and `receiver.rs`)
//! The receiver's ring has `slots` slots of `chunk_size` bytes; the sender has as
//! many registered slots of its own, slot *i* pairing with remote slot *i*. The
//! sender reads its input straight into its slot (the `fill` closure), RDMA-WRITEs
//! it into the receiver's slot and says which slot and how many bytes: in the
//! immediate data of a WRITE_WITH_IMM, or (when immediate data was not negotiated,
//! e.g. on iWARP, or `RDPIPE_RDMA_NO_IMM=1` is set on either end) with a SEND
//! carrying `(slot, length)` right after a plain WRITE. The receiver passes the slot
//! straight from registered memory to its output, then returns a credit (a SEND
//! naming the slot). The sender reuses a slot only when its credit came back *and*
//! its own WRITE completed. With two slots, reading the next chunk overlaps the
//! transfer of the current one on both sides.
//!
//! End of stream (`End`) and the confirmation (`Done`) are SENDs on the same QP, so
//! they are ordered after the data. The TCP connection stays open as a liveness
//! channel: `Abort` travels on it, and its EOF (like a WC error or an rdma_cm
//! DISCONNECTED event) means the peer is gone; the receive loop then reports
//! "stream truncated after N bytes", never success.
//!
//! # Completions (`conn.rs`)
//! Two CQs on one completion channel: the receive CQ (the peer's messages and
//! immediate data) and the send CQ (our SENDs and WRITEs). Waiting follows the
//! only correct pattern: poll until empty; when empty, sleep on the channel
//! (together with the rdma_cm channel and the TCP socket); on an event, ack it,
//! re-arm, poll until empty. The receive CQ is always armed; the send CQ is
//! polled at every wait but armed only when the caller cannot go on without one
//! of its own completions (no free message buffer, a slot still being read by
//! the NIC, the relay's forwarding WRITEs all in flight, the last SENDs at the
//! end), so a busy receiver wakes once per chunk, not once more for its credits.
//! No busy-poll mode: spinning on the CQ made a 128 MiB transfer on Soft-RoCE about
//! 30% slower (it steals CPU from the software NIC), and a stream of 1 MiB chunks is
//! bandwidth-bound, not latency-bound.
//!
//! # Pinned memory
//! Each end pins `slots × chunk_size` (2 MiB by default) plus a page or two for
//! messages, well under the 8 MiB default `ulimit -l`. When registration fails for
//! lack of lockable memory the reason says so plainly, with the limit.

mod conn;
mod forward;
mod receiver;
mod sender;
mod setup;

// The errors live with the crate's error type (crate::error::rdma), so that
// the dependency runs one way: this transport uses them, they use nothing here.
pub use crate::error::rdma::{
    CmWaitError, Decline, DeclineReason, Decliner, RdmaError, RdmaSetupError, RequiredBy,
    ResolveStep,
};
pub use forward::{Forwarder, NoForward};
pub use receiver::RdmaReceiver;
pub use sender::RdmaSender;

use crate::error::rdma::human;
use crate::frame_io::{protocol, read_control, write_control};
use crate::handshake::{random_bytes, Negotiated};
use crate::TransportError;
use conn::Conn;
use rdpipe_verbs::DeviceTransport;
use rdpipe_wire::frame::RDMA_TOKEN_LEN;
use rdpipe_wire::rdma::connect_data;
use rdpipe_wire::{Caps, Control, Integrity, RingInfo, Role, WireError, MAX_SLOTS};
use setup::{decline, Accepted};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Set to `1` on either end to force the WRITE + SEND data path (no immediate
/// data), e.g. to test the path that iWARP devices need on a RoCE device.
pub const NO_IMM_ENV: &str = "RDPIPE_RDMA_NO_IMM";

/// How long rdma_cm address and route resolution may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the RDMA connection set-up may take on the sender, from the
/// receiver's offer to an established connection (resolution included). When
/// it runs out, the sender declines on TCP (and, under `auto`, both ends go on
/// over TCP).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How much longer than [`SETUP_TIMEOUT`] the receiver waits for the sender's
/// connection or its decline: the sender decides, so a set-up that is slow on
/// both ends (a device that just came back takes connections slowly) ends in
/// the sender's decline and the fallback, not in the receiver giving up on
/// its own while the sender falls back to TCP.
const DECIDE_GRACE: Duration = Duration::from_secs(10);

/// Whether the WRITE + SEND path is forced by the environment.
pub fn no_imm_forced() -> bool {
    std::env::var(NO_IMM_ENV).is_ok_and(|v| v == "1")
}

/// Capabilities this end announces: RDMA when an active device exists, and
/// WRITE_WITH_IMM unless forced off or every active device is iWARP.
pub fn local_caps() -> Caps {
    let devs = rdpipe_verbs::active_devices();
    if devs.is_empty() {
        return Caps::default();
    }
    let imm = !no_imm_forced() && devs.iter().any(|d| d.transport != DeviceTransport::Iwarp);
    if imm {
        Caps::RDMA.union(Caps::WRITE_WITH_IMM)
    } else {
        Caps::RDMA
    }
}

/// How an RDMA set-up ended, short of an error that ends the transfer.
pub enum Setup<T> {
    /// The RDMA connection is up.
    Ready(Box<T>),
    /// One end cannot use RDMA and the other was told (`RdmaDecline`); the TCP
    /// connection comes back as it was, free to carry the stream instead.
    Declined {
        /// The authenticated TCP connection.
        stream: TcpStream,
        /// Who declined and why.
        decline: Decline,
    },
}

fn io_err(context: &'static str) -> impl FnOnce(std::io::Error) -> TransportError {
    move |source| TransportError::Io { context, source }
}

/// Sets up the RDMA receiving half on an authenticated connection (see the
/// module docs for the sequence).
pub fn receiver(
    mut stream: TcpStream,
    n: &Negotiated,
) -> Result<Setup<RdmaReceiver>, TransportError> {
    let slots = n.slots as usize;
    let chunk = n.chunk_size as usize;
    let s = setup::sizes(slots);
    let local = stream
        .local_addr()
        .map_err(io_err("reading the TCP connection's local address"))?
        .ip()
        .to_canonical();
    if n.slots > MAX_SLOTS {
        return decline(stream, n, RdmaSetupError::TooManySlots(n.slots));
    }
    let l = match setup::listen_and_register(local, slots * chunk, &s) {
        Ok(l) => l,
        Err(e) => return decline(stream, n, e),
    };
    let token = random_bytes::<RDMA_TOKEN_LEN>()?;
    let offer_imm = !l.iwarp
        && n.local.caps.contains(Caps::WRITE_WITH_IMM)
        && n.peer.caps.contains(Caps::WRITE_WITH_IMM);
    tracing::debug!(
        "rdma_cm listener on {local}:{} ({}), ring {} registered; offering (write_with_imm: {offer_imm})",
        l.listener.local_port(),
        l.device,
        human((slots * chunk) as u64)
    );
    write_control(
        &mut stream,
        &n.peer_addr,
        &Control::RdmaOffer {
            port: l.listener.local_port(),
            write_with_imm: offer_imm,
            token,
        },
    )?;
    match setup::accept_sender(&mut stream, n, l, &token, &s)? {
        Accepted::Conn(conn) => Ok(Setup::Ready(Box::new(RdmaReceiver::new(
            *conn,
            chunk,
            slots,
            n.integrity != Integrity::Checksum,
        )))),
        Accepted::Declined(reason) => Ok(Setup::Declined {
            stream,
            decline: Decline {
                by: Decliner::Peer(Role::Sender),
                reason: DeclineReason::Peer(reason),
            },
        }),
    }
}

/// Sets up the RDMA sending half on an authenticated connection (see the module
/// docs for the sequence).
pub fn sender(mut stream: TcpStream, n: &Negotiated) -> Result<Setup<RdmaSender>, TransportError> {
    let peer = n.peer_addr.clone();
    let slots = n.slots as usize;
    let chunk = n.chunk_size as usize;
    let s = setup::sizes(slots);
    stream
        .set_read_timeout(Some(SETUP_TIMEOUT))
        .map_err(TransportError::SocketOption)?;
    let offer = read_control(&mut stream, &peer);
    stream
        .set_read_timeout(None)
        .map_err(TransportError::SocketOption)?;
    let (port, offer_imm, token) = match offer? {
        Control::RdmaOffer {
            port,
            write_with_imm,
            token,
        } => (port, write_with_imm, token),
        Control::RdmaDecline(reason) => {
            return Ok(Setup::Declined {
                stream,
                decline: Decline {
                    by: Decliner::Peer(Role::Receiver),
                    reason: DeclineReason::Peer(reason),
                },
            })
        }
        Control::Abort { message, .. } => return Err(TransportError::PeerAborted(message)),
        other => return Err(protocol(&peer, WireError::Unexpected(other.kind()))),
    };
    let deadline = Instant::now() + SETUP_TIMEOUT;
    if n.slots > MAX_SLOTS {
        return decline(stream, n, RdmaSetupError::TooManySlots(n.slots));
    }
    let local = stream
        .local_addr()
        .map_err(io_err("reading the TCP connection's local address"))?
        .ip()
        .to_canonical();
    let remote = stream
        .peer_addr()
        .map_err(io_err("reading the TCP connection's peer address"))?;
    let remote = SocketAddr::new(remote.ip().to_canonical(), port);
    let r = match setup::resolve_and_register(local, remote, slots * chunk, &s) {
        Ok(r) => r,
        Err(e) => return decline(stream, n, e),
    };
    let imm = offer_imm && !r.iwarp && !no_imm_forced();
    tracing::debug!(
        "resolved {remote} from {local} on {}; connecting (write_with_imm: {imm})",
        r.device
    );
    if let Err(e) = r.id.connect(&connect_data(&token, imm)) {
        return decline(stream, n, RdmaSetupError::Connect(e));
    }
    let ring = match setup::expect_established(&r.ec, &r.id, deadline) {
        Ok(data) => match RingInfo::decode(&data) {
            Ok(i) if i.slots == n.slots && i.chunk == n.chunk_size => i,
            Ok(i) => {
                return Err(RdmaError::RingMismatch {
                    slots: i.slots,
                    chunk: i.chunk,
                }
                .into())
            }
            Err(e) => return Err(RdmaError::BadRing(e).into()),
        },
        Err(e) => {
            // The decline goes out before the id is destroyed: the receiver
            // then hears it before its half of the connection fails.
            let declined = decline(stream, n, e);
            drop(r);
            return declined;
        }
    };
    tracing::debug!("RDMA connection established on {}", r.device);
    let conn = Conn::new(
        r.v,
        s.n_send,
        conn::CmParts {
            id: r.id,
            _listener: None,
            ec: r.ec,
        },
        stream,
        peer,
        r.device,
        imm,
    );
    Ok(Setup::Ready(Box::new(RdmaSender::new(
        conn, chunk, slots, ring,
    ))))
}
