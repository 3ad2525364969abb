//! RDMA set-up, up to an established [`Conn`]: queue and buffer sizes, memory
//! registration, the receiver's rdma_cm listener and its accept (with the
//! one-time token check), the sender's address and route resolution, and the
//! `RdmaDecline` either end sends when it cannot go on.

use super::conn::{wr_id, CmParts, Conn, Verbs, WR_RECV};
use super::{RdmaError, RdmaSetupError, Setup, DECIDE_GRACE, RESOLVE_TIMEOUT, SETUP_TIMEOUT};
use crate::error::rdma::{CmWaitError, Decline, DeclineReason, Decliner, ResolveStep};
use crate::frame_io::{protocol, read_control, write_control};
use crate::handshake::Negotiated;
use crate::TransportError;
use rdpipe_verbs::{
    CmEventKind, CmId, CompletionChannel, CompletionQueue, DeviceTransport, EventChannel,
    MemoryRegion, ProtectionDomain, QpCaps, QueuePair, VerbsError,
};
use rdpipe_wire::frame::RDMA_TOKEN_LEN;
use rdpipe_wire::rdma::{check_connect_data, RDMA_MSG_LEN};
use rdpipe_wire::{Control, RingInfo, WireError};
use rustix::event::{poll, PollFd, PollFlags};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Sends `RdmaDecline` with `e` and hands the TCP connection back.
pub(super) fn decline<T>(
    mut stream: TcpStream,
    n: &Negotiated,
    e: RdmaSetupError,
) -> Result<Setup<T>, TransportError> {
    write_control(
        &mut stream,
        &n.peer_addr,
        &Control::RdmaDecline(e.to_string()),
    )?;
    Ok(Setup::Declined {
        stream,
        decline: Decline {
            by: Decliner::Here(n.local.role),
            reason: DeclineReason::Local(e),
        },
    })
}

/// The queue and buffer sizes for `slots` slots.
pub(super) struct Sizes {
    pub(super) n_recv: usize,
    pub(super) n_send: usize,
    caps: QpCaps,
    /// Room of the send CQ (our SENDs and WRITEs) and the receive CQ.
    send_cqe: u32,
    recv_cqe: u32,
}

pub(super) fn sizes(slots: usize) -> Sizes {
    // At most `slots` data notices or credits are outstanding, plus End or Done.
    let n_recv = slots + 4;
    let n_send = slots + 4;
    let caps = QpCaps {
        max_send_wr: (slots + n_send + 2) as u32,
        max_recv_wr: (n_recv + 2) as u32,
    };
    Sizes {
        n_recv,
        n_send,
        caps,
        send_cqe: caps.max_send_wr + 4,
        recv_cqe: caps.max_recv_wr + 4,
    }
}

/// The data buffer and the receive and send message buffers.
type Buffers = (MemoryRegion, MemoryRegion, MemoryRegion);

/// Registers the data buffer (`data_len`, remote-writable on the receiver) and
/// the message buffers on `pd`; this is where lack of lockable memory shows.
fn register_all(
    pd: &ProtectionDomain,
    data_len: usize,
    remote_write: bool,
    s: &Sizes,
) -> Result<Buffers, RdmaSetupError> {
    let register = |len: usize, remote_write: bool| {
        pd.register(len, remote_write)
            .map_err(|e| RdmaSetupError::register(len, e))
    };
    let data = register(data_len, remote_write)?;
    let recv = register(s.n_recv * RDMA_MSG_LEN, false)?;
    let send = register(s.n_send * RDMA_MSG_LEN, false)?;
    Ok((data, recv, send))
}

/// Creates the CQs and the QP on `id` and posts every receive. The receive CQ
/// is armed from the start; the send CQ only when a wait needs one of our own
/// completions ([`Conn::wait`](super::conn::Conn::wait)).
fn build_qp(
    id: &CmId,
    pd: ProtectionDomain,
    bufs: Buffers,
    s: &Sizes,
) -> Result<Verbs, VerbsError> {
    let (data, recv_msgs, send_msgs) = bufs;
    let chan = CompletionChannel::new(id)?;
    let send_cq = CompletionQueue::new(id, &chan, s.send_cqe)?;
    let recv_cq = CompletionQueue::new(id, &chan, s.recv_cqe)?;
    if let Err(e) = id.set_ack_timeout() {
        tracing::debug!("{e}: the path's lifetime sets the ACK timeout");
    }
    let qp = QueuePair::with_cqs(id, &pd, &send_cq, &recv_cq, s.caps)?;
    for i in 0..s.n_recv {
        qp.post_recv(
            wr_id(WR_RECV, i),
            &recv_msgs,
            i * RDMA_MSG_LEN..(i + 1) * RDMA_MSG_LEN,
        )?;
    }
    recv_cq.arm()?;
    Ok(Verbs {
        qp,
        send_cq,
        recv_cq,
        chan,
        recv_msgs,
        send_msgs,
        data,
        pd,
    })
}

/// The receiver's listener, PD and registered memory, ready to offer.
pub(super) struct Listening {
    ec: EventChannel,
    pub(super) listener: CmId,
    pd: ProtectionDomain,
    bufs: Buffers,
    pub(super) device: String,
    pub(super) iwarp: bool,
}

pub(super) fn listen_and_register(
    local: IpAddr,
    ring_len: usize,
    s: &Sizes,
) -> Result<Listening, RdmaSetupError> {
    let ec = EventChannel::new().map_err(RdmaSetupError::NoConnectionManager)?;
    let listener = ec.create_id().map_err(RdmaSetupError::Cm)?;
    listener
        .bind(SocketAddr::new(local, 0))
        .map_err(|source| RdmaSetupError::NoDevice {
            addr: local,
            source,
        })?;
    listener.listen(4).map_err(RdmaSetupError::Cm)?;
    let device = listener.device_name().unwrap_or_else(|| "?".into());
    let iwarp = listener.device_transport() == Some(DeviceTransport::Iwarp);
    let pd = ProtectionDomain::new(&listener).map_err(|source| RdmaSetupError::Device {
        device: device.clone(),
        source,
    })?;
    let bufs = register_all(&pd, ring_len, true, s)?;
    Ok(Listening {
        ec,
        listener,
        pd,
        bufs,
        device,
        iwarp,
    })
}

/// How the wait for the sender's connect request ended.
pub(super) enum Accepted {
    /// Established.
    Conn(Box<Conn>),
    /// The sender declined on TCP, with this reason.
    Declined(String),
}

/// Waits for the sender's connect request with the right token (rejecting any
/// other), accepts it with the ring's location, and waits until it is established.
/// The sender may decline on TCP instead, and does when the connection fails
/// or its own set-up time ([`SETUP_TIMEOUT`]) runs out: a connection that
/// fails here is not the end of the wait, the sender's word is.
pub(super) fn accept_sender(
    stream: &mut TcpStream,
    n: &Negotiated,
    l: Listening,
    token: &[u8; RDMA_TOKEN_LEN],
    s: &Sizes,
) -> Result<Accepted, TransportError> {
    let peer = n.peer_addr.clone();
    let wait = SETUP_TIMEOUT + DECIDE_GRACE;
    let deadline = Instant::now() + wait;
    let Listening {
        ec,
        listener,
        pd,
        bufs,
        device,
        ..
    } = l;
    let mut bufs = Some(bufs);
    let mut pd = Some(pd);
    // Set once accepted: (id, verbs, imm).
    let mut accepted: Option<(CmId, Verbs, bool)> = None;
    // Set when the accepted connection failed before it was established.
    let mut failed: Option<RdmaError> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(failed
                .unwrap_or(RdmaError::SenderTimeout {
                    secs: wait.as_secs(),
                })
                .into());
        }
        let (cm_ready, tcp_ready) = {
            let mut fds = [
                PollFd::new(&ec, PollFlags::IN),
                PollFd::new(&*stream, PollFlags::IN),
            ];
            match poll(&mut fds, left.as_millis().min(i32::MAX as u128) as i32) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(TransportError::Io {
                        context: "waiting for the RDMA connect request",
                        source: e.into(),
                    })
                }
            }
            (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
        };
        if tcp_ready {
            let word = match read_control(stream, &peer) {
                Ok(c) => c,
                Err(e) => return Err(failed.map_or(e, TransportError::from)),
            };
            return match word {
                // An established sender that waits on us says so (see
                // `conn::STALL`): not yet our concern.
                Control::Keepalive => continue,
                Control::RdmaDecline(reason) => Ok(Accepted::Declined(reason)),
                Control::Abort { message, .. } => Err(TransportError::PeerAborted(message)),
                other => Err(protocol(&peer, WireError::Unexpected(other.kind()))),
            };
        }
        if !cm_ready {
            continue;
        }
        let Some(mut ev) = ec
            .get_event(Some(Duration::ZERO))
            .map_err(RdmaError::from)?
        else {
            continue;
        };
        match ev.kind {
            CmEventKind::ConnectRequest => {
                let Some(id) = ev.take_new_id() else { continue };
                let imm = match check_connect_data(&ev.private_data, token) {
                    Ok(imm) if accepted.is_none() && failed.is_none() => imm,
                    _ => {
                        // Wrong or missing token, or a second connection: refuse.
                        // Nothing about our memory has been revealed to it.
                        tracing::warn!("rejected an RDMA connect request without the right token");
                        let _ = id.reject(&[]);
                        continue;
                    }
                };
                if !id.same_device(&listener) {
                    let _ = id.reject(&[]);
                    return Err(RdmaError::OtherDevice.into());
                }
                let v = build_qp(
                    &id,
                    pd.take().expect("accepted once"),
                    bufs.take().expect("accepted once"),
                    s,
                )
                .map_err(RdmaError::from)?;
                let info = RingInfo {
                    addr: v.data.addr(),
                    rkey: v.data.rkey(),
                    slots: n.slots,
                    chunk: n.chunk_size,
                };
                id.accept(&info.encode()).map_err(RdmaError::from)?;
                tracing::debug!("token accepted; sender uses write_with_imm: {imm}");
                accepted = Some((id, v, imm));
            }
            CmEventKind::Established => {
                let Some((id, v, imm)) = accepted.take() else {
                    continue;
                };
                if !ev.is_for(&id) {
                    accepted = Some((id, v, imm));
                    continue;
                }
                tracing::debug!("RDMA connection established on {device}");
                let tcp = stream.try_clone().map_err(|source| TransportError::Io {
                    context: "duplicating the TCP connection",
                    source,
                })?;
                let cm = CmParts {
                    id,
                    _listener: Some(listener),
                    ec,
                };
                let conn = Conn::new(v, s.n_send, cm, tcp, peer, device, imm);
                return Ok(Accepted::Conn(Box::new(conn)));
            }
            CmEventKind::Disconnected
            | CmEventKind::ConnectError
            | CmEventKind::Unreachable
            | CmEventKind::Rejected
                if accepted.as_ref().is_some_and(|(id, _, _)| ev.is_for(id)) =>
            {
                // The sender decides: it sees the failure too (or its own
                // set-up time runs out) and declines on TCP, and under `auto`
                // both ends go on over TCP. Its word is waited for until the
                // deadline; this failure is the error if it never comes.
                accepted = None;
                failed = Some(RdmaError::ConnectionFailed {
                    peer: peer.clone(),
                    kind: ev.kind,
                    status: ev.status,
                });
            }
            _ => {}
        }
    }
}

/// Waits for one event on `ec` of kind `want`, with a timeout.
fn expect_event(ec: &EventChannel, want: CmEventKind) -> Result<Vec<u8>, CmWaitError> {
    match ec.get_event(Some(RESOLVE_TIMEOUT + Duration::from_secs(1))) {
        Ok(Some(ev)) if ev.kind == want => Ok(ev.private_data),
        Ok(Some(ev)) => Err(CmWaitError::Event {
            kind: ev.kind,
            status: ev.status,
        }),
        Ok(None) => Err(CmWaitError::TimedOut),
        Err(e) => Err(CmWaitError::Channel(e)),
    }
}

/// The sender's resolved id and verbs objects, ready to connect.
pub(super) struct Resolved {
    pub(super) ec: EventChannel,
    pub(super) id: CmId,
    pub(super) v: Verbs,
    pub(super) device: String,
    pub(super) iwarp: bool,
}

pub(super) fn resolve_and_register(
    local: IpAddr,
    remote: SocketAddr,
    data_len: usize,
    s: &Sizes,
) -> Result<Resolved, RdmaSetupError> {
    let ec = EventChannel::new().map_err(RdmaSetupError::NoConnectionManager)?;
    let id = ec.create_id().map_err(RdmaSetupError::Cm)?;
    id.resolve_addr(Some(SocketAddr::new(local, 0)), remote, RESOLVE_TIMEOUT)
        .map_err(|source| RdmaSetupError::NoRoute {
            local,
            remote,
            source,
        })?;
    let resolve = |step| move |wait| RdmaSetupError::Resolve { step, local, wait };
    expect_event(&ec, CmEventKind::AddrResolved).map_err(resolve(ResolveStep::Address))?;
    id.resolve_route(RESOLVE_TIMEOUT)
        .map_err(RdmaSetupError::Cm)?;
    expect_event(&ec, CmEventKind::RouteResolved).map_err(resolve(ResolveStep::Route))?;
    let device = id.device_name().unwrap_or_else(|| "?".into());
    let iwarp = id.device_transport() == Some(DeviceTransport::Iwarp);
    let on_device = |source| RdmaSetupError::Device {
        device: device.clone(),
        source,
    };
    let pd = ProtectionDomain::new(&id).map_err(on_device)?;
    let bufs = register_all(&pd, data_len, false, s)?;
    let v = build_qp(&id, pd, bufs, s).map_err(on_device)?;
    Ok(Resolved {
        ec,
        id,
        v,
        device,
        iwarp,
    })
}

/// Waits for ESTABLISHED on `id` until `deadline`, returning the accept's
/// private data.
pub(super) fn expect_established(
    ec: &EventChannel,
    id: &CmId,
    deadline: Instant,
) -> Result<Vec<u8>, RdmaSetupError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ec.get_event(Some(left)) {
            Ok(Some(ev)) if !ev.is_for(id) => continue,
            Ok(Some(ev)) if ev.kind == CmEventKind::Established => return Ok(ev.private_data),
            Ok(Some(ev)) => {
                return Err(RdmaSetupError::Refused {
                    kind: ev.kind,
                    status: ev.status,
                })
            }
            Ok(None) => return Err(RdmaSetupError::ConnectTimeout),
            Err(e) => return Err(RdmaSetupError::Cm(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_sizes_are_never_zero() {
        let s = sizes(1);
        assert!(s.caps.max_send_wr >= 2 && s.caps.max_recv_wr as usize > s.n_recv);
        assert!(s.send_cqe >= s.caps.max_send_wr && s.recv_cqe >= s.caps.max_recv_wr);
    }
}
