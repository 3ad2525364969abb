//! The RDMA transport: the stream moves by RDMA WRITE into the receiver's
//! registered ring, with credits coming back as SENDs.
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
//!    the reason. When both ends asked for `auto`, both fall back to TCP on the same
//!    connection with a warning on stderr; when either asked for `rdma`, both fail
//!    with [`TransportError::RdmaUnavailable`] (exit 7).
//!
//! # Data path (the credit logic lives in [`RdmaSender::send_chunk`] and
//! [`RdmaReceiver::recv_chunk`])
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
//! # Completions
//! One CQ with a completion channel. Waiting follows the only correct pattern:
//! poll until empty; when empty, sleep on the channel (together with the rdma_cm
//! channel and the TCP socket); on an event, ack it, re-arm, poll until empty.
//! No busy-poll mode: spinning on the CQ made a 128 MiB transfer on Soft-RoCE about
//! 30% slower (it steals CPU from the software NIC), and a stream of 1 MiB chunks is
//! bandwidth-bound, not latency-bound.
//!
//! # Pinned memory
//! Each end pins `slots × chunk_size` (2 MiB by default) plus a page or two for
//! messages, well under the 8 MiB default `ulimit -l`. When registration fails for
//! lack of lockable memory the reason says so plainly, with the limit.

use crate::frame_io::{protocol, read_control, write_control};
use crate::handshake::{random_bytes, Negotiated};
use crate::tcp::{TcpReceiver, TcpSender};
use crate::{ChunkReceiver, ChunkSender, Received, TransportError};
use rdpipe_verbs::{
    CmEventKind, CmId, Completion, CompletionChannel, CompletionQueue, DeviceTransport,
    EventChannel, MemoryRegion, ProtectionDomain, QpCaps, QueuePair, RemoteBuf, VerbsError,
    WcOpcode,
};
use rdpipe_wire::frame::RDMA_TOKEN_LEN;
use rdpipe_wire::{Caps, Control, TransportPref, WireError};
use rustix::event::{poll, PollFd, PollFlags};
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Set to `1` on either end to force the WRITE + SEND data path (no immediate
/// data), e.g. to test the path that iWARP devices need on a RoCE device.
pub const NO_IMM_ENV: &str = "RDPIPE_RDMA_NO_IMM";

/// Bytes per message buffer (credits, End, Done, slot notices).
const MSG_SIZE: usize = 32;
/// How long rdma_cm address and route resolution may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the RDMA connection set-up may take, end to end.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest chunk the immediate-data encoding can carry (2^26 = 64 MiB).
const IMM_LEN_BITS: u32 = 26;

const WR_WRITE: u64 = 1;
const WR_SEND: u64 = 2;
const WR_RECV: u64 = 3;

fn wr_id(kind: u64, index: usize) -> u64 {
    (kind << 32) | index as u64
}

fn wr_split(id: u64) -> (u64, usize) {
    (id >> 32, (id & 0xffff_ffff) as usize)
}

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

/// Immediate data for a WRITE_WITH_IMM: slot in the top 6 bits, `len - 1` below.
fn encode_imm(slot: usize, len: usize) -> u32 {
    debug_assert!(slot < 64 && (1..=1usize << IMM_LEN_BITS).contains(&len));
    ((slot as u32) << IMM_LEN_BITS) | (len as u32 - 1)
}

fn decode_imm(imm: u32) -> (usize, usize) {
    (
        (imm >> IMM_LEN_BITS) as usize,
        (imm & ((1 << IMM_LEN_BITS) - 1)) as usize + 1,
    )
}

/// A message carried by a SEND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    /// Sender: slot `slot` holds `len` new bytes (WRITE + SEND path).
    Data { slot: u32, len: u32 },
    /// Sender: end of stream.
    End { bytes: u64, checksum: u64 },
    /// Receiver: slot `slot` is free again.
    Credit { slot: u32 },
    /// Receiver: the stream was verified and flushed.
    Done { bytes: u64, checksum: u64 },
}

impl Msg {
    fn encode(self) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        let (tag, a, x, y) = match self {
            Msg::Data { slot, len } => (1u32, slot, len as u64, 0),
            Msg::End { bytes, checksum } => (2, 0, bytes, checksum),
            Msg::Credit { slot } => (3, slot, 0, 0),
            Msg::Done { bytes, checksum } => (4, 0, bytes, checksum),
        };
        b[0..4].copy_from_slice(&tag.to_le_bytes());
        b[4..8].copy_from_slice(&a.to_le_bytes());
        b[8..16].copy_from_slice(&x.to_le_bytes());
        b[16..24].copy_from_slice(&y.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Msg> {
        if b.len() < 24 {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(match u32_at(0) {
            1 => Msg::Data {
                slot: u32_at(4),
                len: u32::try_from(u64_at(8)).ok()?,
            },
            2 => Msg::End {
                bytes: u64_at(8),
                checksum: u64_at(16),
            },
            3 => Msg::Credit { slot: u32_at(4) },
            4 => Msg::Done {
                bytes: u64_at(8),
                checksum: u64_at(16),
            },
            _ => return None,
        })
    }
}

const RING_MAGIC: &[u8; 4] = b"RDPR";
const RING_INFO_LEN: usize = 28;

/// What the receiver's accept carries: where the ring is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RingInfo {
    addr: u64,
    rkey: u32,
    slots: u32,
    chunk: u32,
}

impl RingInfo {
    fn encode(self) -> [u8; RING_INFO_LEN] {
        let mut b = [0u8; RING_INFO_LEN];
        b[0..4].copy_from_slice(RING_MAGIC);
        b[4] = 1;
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.slots.to_le_bytes());
        b[24..28].copy_from_slice(&self.chunk.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<RingInfo> {
        if b.len() < RING_INFO_LEN || &b[0..4] != RING_MAGIC || b[4] != 1 {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Some(RingInfo {
            addr: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            rkey: u32_at(16),
            slots: u32_at(20),
            chunk: u32_at(24),
        })
    }
}

/// Connect private data: the token, then flags (bit 0: the sender uses
/// WRITE_WITH_IMM).
fn connect_data(token: &[u8; RDMA_TOKEN_LEN], imm: bool) -> [u8; RDMA_TOKEN_LEN + 1] {
    let mut b = [0u8; RDMA_TOKEN_LEN + 1];
    b[..RDMA_TOKEN_LEN].copy_from_slice(token);
    b[RDMA_TOKEN_LEN] = u8::from(imm);
    b
}

/// Checks the connect private data against the token in constant time; returns
/// whether the sender uses WRITE_WITH_IMM.
fn check_connect_data(data: &[u8], token: &[u8; RDMA_TOKEN_LEN]) -> Option<bool> {
    if data.len() < RDMA_TOKEN_LEN + 1 {
        return None;
    }
    let diff = data[..RDMA_TOKEN_LEN]
        .iter()
        .zip(token)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    (diff == 0).then_some(data[RDMA_TOKEN_LEN] & 1 == 1)
}

/// `2 MiB`, `64 KiB`, `100 bytes`.
fn human(n: u64) -> String {
    const K: u64 = 1024;
    if n >= K * K && n % (K * K) == 0 {
        format!("{} MiB", n / (K * K))
    } else if n >= K * K {
        format!("{:.1} MiB", n as f64 / (K * K) as f64)
    } else if n >= K && n % K == 0 {
        format!("{} KiB", n / K)
    } else {
        format!("{n} bytes")
    }
}

/// The plain-language reason for a failed registration.
fn register_error(len: usize, e: &VerbsError) -> String {
    if e.is_memlock() {
        let lim = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
        let lim = lim.map_or_else(|| "unlimited".to_string(), human);
        format!(
            "cannot pin {}: ulimit -l is {lim}; raise it or use --chunk-size",
            human(len as u64)
        )
    } else {
        format!("cannot register {} of memory: {e}", human(len as u64))
    }
}

fn rdma_err(e: VerbsError) -> TransportError {
    TransportError::Rdma(e.to_string())
}

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// Whether a failed set-up may fall back to TCP: only when both ends said `auto`.
fn may_fall_back(n: &Negotiated) -> bool {
    n.local.transport == TransportPref::Auto && n.peer.transport == TransportPref::Auto
}

fn warn_fallback(reason: &str) {
    tracing::warn!("RDMA unavailable ({reason}); falling back to TCP");
}

fn unavailable(n: &Negotiated, reason: &str, whose: &str) -> TransportError {
    let who = if n.local.transport == TransportPref::Rdma {
        "--transport rdma was given here"
    } else {
        "the peer requires --transport rdma"
    };
    TransportError::RdmaUnavailable(format!("{whose}: {reason} ({who})"))
}

/// The queue and buffer sizes for `slots` slots.
struct Sizes {
    n_recv: usize,
    n_send: usize,
    caps: QpCaps,
    cqe: u32,
}

fn sizes(slots: usize) -> Sizes {
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
        cqe: caps.max_send_wr + caps.max_recv_wr + 8,
    }
}

/// Registered message buffers, PD, CQ and QP: built once the device is known.
struct Verbs {
    // Field order is drop order; the Arcs inside make any order safe anyway.
    qp: QueuePair,
    cq: CompletionQueue,
    chan: CompletionChannel,
    recv_msgs: MemoryRegion,
    send_msgs: MemoryRegion,
    data: MemoryRegion,
    _pd: ProtectionDomain,
}

/// Registers the data buffer (`data_len`, remote-writable on the receiver) and
/// the message buffers on `pd`; this is where lack of lockable memory shows.
fn register_all(
    pd: &ProtectionDomain,
    data_len: usize,
    remote_write: bool,
    s: &Sizes,
) -> Result<(MemoryRegion, MemoryRegion, MemoryRegion), String> {
    let data = pd
        .register(data_len, remote_write)
        .map_err(|e| register_error(data_len, &e))?;
    let recv = pd
        .register(s.n_recv * MSG_SIZE, false)
        .map_err(|e| register_error(s.n_recv * MSG_SIZE, &e))?;
    let send = pd
        .register(s.n_send * MSG_SIZE, false)
        .map_err(|e| register_error(s.n_send * MSG_SIZE, &e))?;
    Ok((data, recv, send))
}

/// Creates CQ and QP on `id` and posts every receive.
fn build_qp(
    id: &CmId,
    pd: ProtectionDomain,
    bufs: (MemoryRegion, MemoryRegion, MemoryRegion),
    s: &Sizes,
) -> Result<Verbs, VerbsError> {
    let (data, recv_msgs, send_msgs) = bufs;
    let chan = CompletionChannel::new(id)?;
    let cq = CompletionQueue::new(id, &chan, s.cqe)?;
    let qp = QueuePair::new(id, &pd, &cq, s.caps)?;
    for i in 0..s.n_recv {
        qp.post_recv(
            wr_id(WR_RECV, i),
            &recv_msgs,
            i * MSG_SIZE..(i + 1) * MSG_SIZE,
        )?;
    }
    cq.arm()?;
    Ok(Verbs {
        qp,
        cq,
        chan,
        recv_msgs,
        send_msgs,
        data,
        _pd: pd,
    })
}

/// An established connection: verbs objects, the cm ids and the TCP liveness
/// channel, and the wait loop shared by both halves.
struct Conn {
    v: Verbs,
    n_send: usize,
    send_free: Vec<usize>,
    id: CmId,
    _listener: Option<CmId>,
    ec: EventChannel,
    tcp: TcpStream,
    tcp_closed: bool,
    peer: String,
    device: String,
    imm: bool,
    /// A liveness failure seen while completions may still be in flight.
    dead: Option<TransportError>,
}

impl Conn {
    fn describe(&self) -> String {
        let mode = if self.imm {
            "write-with-imm"
        } else {
            "write+send"
        };
        format!("rdma ({}, {mode})", self.device)
    }

    /// Posts a SEND of `m`, waiting for a free message buffer if needed.
    fn send_msg(
        &mut self,
        m: Msg,
        on: &mut dyn FnMut(&mut Conn, Completion) -> Result<(), TransportError>,
    ) -> Result<(), TransportError> {
        let i = loop {
            if let Some(i) = self.send_free.pop() {
                break i;
            }
            for c in self.wait()? {
                self.dispatch(c, on)?;
            }
        };
        let range = i * MSG_SIZE..(i + 1) * MSG_SIZE;
        self.v.send_msgs.as_mut_slice()[range.clone()].copy_from_slice(&m.encode());
        self.v
            .qp
            .post_send(wr_id(WR_SEND, i), &self.v.send_msgs, range)
            .map_err(rdma_err)
    }

    /// Handles what is common to both halves (failed completions, our SENDs
    /// finishing) and passes the rest to `on`.
    fn dispatch(
        &mut self,
        c: Completion,
        on: &mut dyn FnMut(&mut Conn, Completion) -> Result<(), TransportError>,
    ) -> Result<(), TransportError> {
        if let Some(e) = &c.error {
            // Flushed or retried-out requests mean the peer is gone: the same error
            // as a lost TCP connection (the receiver reports truncation). Anything
            // else is an RDMA failure of its own.
            return Err(if e.connection_lost() {
                TransportError::PeerGone {
                    peer: self.peer.clone(),
                    reason: format!("RDMA connection lost: {e}"),
                }
            } else {
                TransportError::Rdma(format!("work completion failed: {e}"))
            });
        }
        let (kind, i) = wr_split(c.wr_id);
        if kind == WR_SEND {
            self.send_free.push(i);
            return Ok(());
        }
        on(self, c)
    }

    /// Reposts receive buffer `i` (after its contents were decoded).
    fn repost(&self, i: usize) -> Result<(), TransportError> {
        self.v
            .qp
            .post_recv(
                wr_id(WR_RECV, i),
                &self.v.recv_msgs,
                i * MSG_SIZE..(i + 1) * MSG_SIZE,
            )
            .map_err(rdma_err)
    }

    fn msg_at(&self, i: usize) -> Option<Msg> {
        self.v
            .recv_msgs
            .as_slice()
            .get(i * MSG_SIZE..(i + 1) * MSG_SIZE)
            .and_then(Msg::decode)
    }

    /// Returns at least one completion, sleeping on the completion channel, the
    /// rdma_cm channel and the TCP connection. A peer that is gone (TCP EOF, an
    /// Abort, DISCONNECTED) is reported only once no completion is left.
    fn wait(&mut self) -> Result<Vec<Completion>, TransportError> {
        let mut out = Vec::new();
        let mut grace = true;
        loop {
            self.v.cq.poll(&mut out).map_err(rdma_err)?;
            if !out.is_empty() {
                return Ok(out);
            }
            if self.dead.is_some() {
                // Completions already on their way get a moment to land.
                if grace
                    && self
                        .v
                        .cq
                        .wait(Some(Duration::from_millis(100)))
                        .map_err(rdma_err)?
                {
                    grace = false;
                    self.v.cq.ack_event().map_err(rdma_err)?;
                    self.v.cq.arm().map_err(rdma_err)?;
                    continue;
                }
                return Err(self.dead.take().expect("checked"));
            }
            let (cq_ready, cm_ready, tcp_ready) = {
                let mut fds = vec![
                    PollFd::new(&self.v.chan, PollFlags::IN),
                    PollFd::new(&self.ec, PollFlags::IN),
                ];
                if !self.tcp_closed {
                    fds.push(PollFd::new(&self.tcp, PollFlags::IN));
                }
                match poll(&mut fds, -1) {
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        return Err(TransportError::Io {
                            context: "waiting for RDMA completions",
                            source: e.into(),
                        })
                    }
                }
                (
                    !fds[0].revents().is_empty(),
                    !fds[1].revents().is_empty(),
                    fds.get(2).is_some_and(|f| !f.revents().is_empty()),
                )
            };
            if cq_ready {
                // One event stands for any number of completions: ack, re-arm,
                // then poll until empty (top of the loop).
                self.v.cq.ack_event().map_err(rdma_err)?;
                self.v.cq.arm().map_err(rdma_err)?;
                continue;
            }
            if cm_ready {
                self.on_cm_event()?;
            }
            if tcp_ready {
                self.on_tcp_readable();
            }
        }
    }

    fn on_cm_event(&mut self) -> Result<(), TransportError> {
        let Some(mut ev) = self.ec.get_event(Some(Duration::ZERO)).map_err(rdma_err)? else {
            return Ok(());
        };
        match ev.kind {
            CmEventKind::ConnectRequest => {
                // Nobody else may join: refuse and destroy the new id.
                if let Some(id) = ev.take_new_id() {
                    tracing::warn!("rejected an RDMA connect request during the transfer");
                    let _ = id.reject(&[]);
                }
            }
            CmEventKind::Disconnected | CmEventKind::DeviceRemoval if ev.is_for(&self.id) => {
                // The same error as a lost TCP connection: the receive loop reports
                // "stream truncated", the sender exits with "connection lost".
                self.dead.get_or_insert(TransportError::PeerGone {
                    peer: self.peer.clone(),
                    reason: if ev.kind == CmEventKind::Disconnected {
                        "RDMA connection lost (peer disconnected)".into()
                    } else {
                        "RDMA device removed".into()
                    },
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn on_tcp_readable(&mut self) {
        let e = match read_control(&mut self.tcp, &self.peer) {
            Ok(Control::Keepalive) => return,
            Ok(Control::Abort(m)) => TransportError::PeerAborted(m),
            Ok(other) => protocol(&self.peer, WireError::Unexpected(other.kind())),
            Err(e) => e,
        };
        self.tcp_closed = true;
        // An Abort beats a disconnect seen a moment earlier.
        if matches!(e, TransportError::PeerAborted(_)) || self.dead.is_none() {
            self.dead = Some(e);
        }
    }

    fn abort(&mut self, reason: &str) {
        let _ = write_control(&mut self.tcp, &self.peer, &Control::Abort(reason.into()));
        let _ = self.tcp.shutdown(Shutdown::Both);
        let _ = self.id.disconnect();
    }
}

/// Sends `Control::RdmaDecline` and either falls back (both ends `auto`) or fails.
fn decline_recv(
    mut stream: TcpStream,
    n: &Negotiated,
    reason: String,
) -> Result<Box<dyn ChunkReceiver>, TransportError> {
    write_control(
        &mut stream,
        &n.peer_addr,
        &Control::RdmaDecline(reason.clone()),
    )?;
    fall_back_recv(stream, n, &reason, "this end (receiver) cannot use RDMA")
}

fn fall_back_recv(
    stream: TcpStream,
    n: &Negotiated,
    reason: &str,
    whose: &str,
) -> Result<Box<dyn ChunkReceiver>, TransportError> {
    if !may_fall_back(n) {
        return Err(unavailable(n, reason, whose));
    }
    warn_fallback(reason);
    let rx = TcpReceiver::new(
        stream,
        n.chunk_size as usize,
        n.slots as usize,
        n.peer_addr.clone(),
    )
    .map_err(|source| TransportError::Io {
        context: "starting the TCP receiver",
        source,
    })?;
    Ok(Box::new(rx))
}

fn decline_send(
    mut stream: TcpStream,
    n: &Negotiated,
    reason: String,
) -> Result<Box<dyn ChunkSender>, TransportError> {
    write_control(
        &mut stream,
        &n.peer_addr,
        &Control::RdmaDecline(reason.clone()),
    )?;
    fall_back_send(stream, n, &reason, "this end (sender) cannot use RDMA")
}

fn fall_back_send(
    stream: TcpStream,
    n: &Negotiated,
    reason: &str,
    whose: &str,
) -> Result<Box<dyn ChunkSender>, TransportError> {
    if !may_fall_back(n) {
        return Err(unavailable(n, reason, whose));
    }
    warn_fallback(reason);
    let tx = TcpSender::new(
        stream,
        n.chunk_size as usize,
        n.slots as usize,
        n.peer_addr.clone(),
    )
    .map_err(|source| TransportError::Io {
        context: "starting the TCP sender",
        source,
    })?;
    Ok(Box::new(tx))
}

/// The receiver's listener, PD and registered memory, ready to offer.
struct Listening {
    ec: EventChannel,
    listener: CmId,
    pd: ProtectionDomain,
    bufs: (MemoryRegion, MemoryRegion, MemoryRegion),
    device: String,
    iwarp: bool,
}

fn listen_and_register(local: IpAddr, ring_len: usize, s: &Sizes) -> Result<Listening, String> {
    let ec = EventChannel::new().map_err(|e| format!("no RDMA connection manager: {e}"))?;
    let listener = ec.create_id().map_err(|e| e.to_string())?;
    listener
        .bind(SocketAddr::new(local, 0))
        .map_err(|e| format!("no RDMA device has address {local} ({e})"))?;
    listener.listen(4).map_err(|e| e.to_string())?;
    let device = listener.device_name().unwrap_or_else(|| "?".into());
    let iwarp = listener.device_transport() == Some(DeviceTransport::Iwarp);
    let pd = ProtectionDomain::new(&listener).map_err(|e| format!("{device}: {e}"))?;
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

/// Builds the RDMA receiving half (see the module docs for the sequence).
pub fn receiver(
    stream: TcpStream,
    n: &Negotiated,
) -> Result<Box<dyn ChunkReceiver>, TransportError> {
    let slots = n.slots as usize;
    let chunk = n.chunk_size as usize;
    let s = sizes(slots);
    let local = stream
        .local_addr()
        .map_err(|source| TransportError::Io {
            context: "reading the TCP connection's local address",
            source,
        })?
        .ip()
        .to_canonical();
    if slots > 64 {
        return decline_recv(stream, n, format!("{slots} slots are more than 64"));
    }
    let l = match listen_and_register(local, slots * chunk, &s) {
        Ok(l) => l,
        Err(reason) => return decline_recv(stream, n, reason),
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
    let mut stream = stream;
    write_control(
        &mut stream,
        &n.peer_addr,
        &Control::RdmaOffer {
            port: l.listener.local_port(),
            write_with_imm: offer_imm,
            token,
        },
    )?;
    match accept_sender(&mut stream, n, l, &token, &s)? {
        Accepted::Conn(conn) => Ok(Box::new(RdmaReceiver {
            conn: *conn,
            chunk,
            slots,
            pending: VecDeque::new(),
        })),
        Accepted::Declined(reason) => {
            fall_back_recv(stream, n, &reason, "the sender cannot use RDMA")
        }
    }
}

enum Accepted {
    Conn(Box<Conn>),
    Declined(String),
}

/// Waits for the sender's connect request with the right token (rejecting any
/// other), accepts it with the ring's location, and waits until it is established.
/// The sender may decline on TCP instead.
fn accept_sender(
    stream: &mut TcpStream,
    n: &Negotiated,
    l: Listening,
    token: &[u8; RDMA_TOKEN_LEN],
    s: &Sizes,
) -> Result<Accepted, TransportError> {
    let peer = n.peer_addr.clone();
    let deadline = Instant::now() + SETUP_TIMEOUT;
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
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TransportError::Rdma(format!(
                "the sender did not complete the RDMA connection within {} s",
                SETUP_TIMEOUT.as_secs()
            )));
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
            return match read_control(stream, &peer)? {
                Control::RdmaDecline(reason) => Ok(Accepted::Declined(reason)),
                Control::Abort(m) => Err(TransportError::PeerAborted(m)),
                other => Err(protocol(&peer, WireError::Unexpected(other.kind()))),
            };
        }
        if !cm_ready {
            continue;
        }
        let Some(mut ev) = ec.get_event(Some(Duration::ZERO)).map_err(rdma_err)? else {
            continue;
        };
        match ev.kind {
            CmEventKind::ConnectRequest => {
                let Some(id) = ev.take_new_id() else { continue };
                let imm = match check_connect_data(&ev.private_data, token) {
                    Some(imm) if accepted.is_none() => imm,
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
                    return Err(TransportError::Rdma(
                        "connect request arrived on another RDMA device".into(),
                    ));
                }
                let v = build_qp(
                    &id,
                    pd.take().expect("accepted once"),
                    bufs.take().expect("accepted once"),
                    s,
                )
                .map_err(rdma_err)?;
                let info = RingInfo {
                    addr: v.data.addr(),
                    rkey: v.data.rkey(),
                    slots: n.slots,
                    chunk: n.chunk_size,
                };
                id.accept(&info.encode()).map_err(rdma_err)?;
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
                let n_send = s.n_send;
                return Ok(Accepted::Conn(Box::new(Conn {
                    v,
                    n_send,
                    send_free: (0..n_send).collect(),
                    id,
                    _listener: Some(listener),
                    ec,
                    tcp: stream.try_clone().map_err(|source| TransportError::Io {
                        context: "duplicating the TCP connection",
                        source,
                    })?,
                    tcp_closed: false,
                    peer,
                    device,
                    imm,
                    dead: None,
                })));
            }
            CmEventKind::Disconnected
            | CmEventKind::ConnectError
            | CmEventKind::Unreachable
            | CmEventKind::Rejected
                if accepted.as_ref().is_some_and(|(id, _, _)| ev.is_for(id)) =>
            {
                return Err(TransportError::Rdma(format!(
                    "RDMA connection from {peer} failed: {:?} (status {})",
                    ev.kind, ev.status
                )));
            }
            _ => {}
        }
    }
}

/// Waits for one event on `ec` of kind `want`, with a timeout.
fn expect_event(ec: &EventChannel, want: CmEventKind, what: &str) -> Result<Vec<u8>, String> {
    match ec.get_event(Some(RESOLVE_TIMEOUT + Duration::from_secs(1))) {
        Ok(Some(ev)) if ev.kind == want => Ok(ev.private_data),
        Ok(Some(ev)) => Err(format!(
            "{what} failed: {:?} (status {})",
            ev.kind, ev.status
        )),
        Ok(None) => Err(format!("{what} timed out")),
        Err(e) => Err(format!("{what} failed: {e}")),
    }
}

/// The sender's resolved id and verbs objects, ready to connect.
struct Resolved {
    ec: EventChannel,
    id: CmId,
    v: Verbs,
    device: String,
    iwarp: bool,
}

fn resolve_and_register(
    local: IpAddr,
    remote: SocketAddr,
    data_len: usize,
    s: &Sizes,
) -> Result<Resolved, String> {
    let ec = EventChannel::new().map_err(|e| format!("no RDMA connection manager: {e}"))?;
    let id = ec.create_id().map_err(|e| e.to_string())?;
    id.resolve_addr(Some(SocketAddr::new(local, 0)), remote, RESOLVE_TIMEOUT)
        .map_err(|e| format!("no RDMA route from {local} to {remote}: {e}"))?;
    expect_event(&ec, CmEventKind::AddrResolved, "RDMA address resolution")
        .map_err(|e| format!("{e} (no RDMA device for {local}?)"))?;
    id.resolve_route(RESOLVE_TIMEOUT)
        .map_err(|e| e.to_string())?;
    expect_event(&ec, CmEventKind::RouteResolved, "RDMA route resolution")?;
    let device = id.device_name().unwrap_or_else(|| "?".into());
    let iwarp = id.device_transport() == Some(DeviceTransport::Iwarp);
    let pd = ProtectionDomain::new(&id).map_err(|e| format!("{device}: {e}"))?;
    let bufs = register_all(&pd, data_len, false, s)?;
    let v = build_qp(&id, pd, bufs, s).map_err(|e| format!("{device}: {e}"))?;
    Ok(Resolved {
        ec,
        id,
        v,
        device,
        iwarp,
    })
}

/// Builds the RDMA sending half (see the module docs for the sequence).
pub fn sender(
    mut stream: TcpStream,
    n: &Negotiated,
) -> Result<Box<dyn ChunkSender>, TransportError> {
    let peer = n.peer_addr.clone();
    let slots = n.slots as usize;
    let chunk = n.chunk_size as usize;
    let s = sizes(slots);
    let io_err = |context| move |source| TransportError::Io { context, source };
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
            return fall_back_send(stream, n, &reason, "the receiver cannot use RDMA")
        }
        Control::Abort(m) => return Err(TransportError::PeerAborted(m)),
        other => return Err(protocol(&peer, WireError::Unexpected(other.kind()))),
    };
    if slots > 64 {
        return decline_send(stream, n, format!("{slots} slots are more than 64"));
    }
    let local = stream
        .local_addr()
        .map_err(io_err("reading the TCP connection's local address"))?
        .ip()
        .to_canonical();
    let remote = canonical(
        stream
            .peer_addr()
            .map_err(io_err("reading the TCP connection's peer address"))?,
    );
    let remote = SocketAddr::new(remote.ip(), port);
    let r = match resolve_and_register(local, remote, slots * chunk, &s) {
        Ok(r) => r,
        Err(reason) => return decline_send(stream, n, reason),
    };
    let imm = offer_imm && !r.iwarp && !no_imm_forced();
    tracing::debug!(
        "resolved {remote} from {local} on {}; connecting (write_with_imm: {imm})",
        r.device
    );
    if let Err(e) = r.id.connect(&connect_data(&token, imm)) {
        return decline_send(stream, n, format!("rdma_connect: {e}"));
    }
    let info = match expect_event_for(&r.ec, &r.id) {
        Ok(data) => match RingInfo::decode(&data) {
            Some(i) if i.slots == n.slots && i.chunk == n.chunk_size => i,
            _ => {
                return Err(TransportError::Rdma(
                    "the receiver's RDMA accept carries no valid ring description".into(),
                ))
            }
        },
        Err(reason) => {
            drop(r);
            return decline_send(stream, n, reason);
        }
    };
    tracing::debug!("RDMA connection established on {}", r.device);
    let conn = Conn {
        v: r.v,
        n_send: s.n_send,
        send_free: (0..s.n_send).collect(),
        id: r.id,
        _listener: None,
        ec: r.ec,
        tcp: stream,
        tcp_closed: false,
        peer,
        device: r.device,
        imm,
        dead: None,
    };
    Ok(Box::new(RdmaSender {
        conn,
        chunk,
        slots,
        ring: info,
        credit: vec![true; slots],
        busy: vec![false; slots],
        next: 0,
        done: None,
    }))
}

/// Waits for ESTABLISHED (returning the accept's private data) on `id`.
fn expect_event_for(ec: &EventChannel, id: &CmId) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ec.get_event(Some(left)) {
            Ok(Some(ev)) if !ev.is_for(id) => continue,
            Ok(Some(ev)) if ev.kind == CmEventKind::Established => return Ok(ev.private_data),
            Ok(Some(ev)) => {
                return Err(format!(
                    "RDMA connection refused or failed: {:?} (status {})",
                    ev.kind, ev.status
                ))
            }
            Ok(None) => return Err("RDMA connection timed out".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The RDMA sending half.
pub struct RdmaSender {
    conn: Conn,
    chunk: usize,
    slots: usize,
    ring: RingInfo,
    /// Remote slot `i` may be written (its credit came back).
    credit: Vec<bool>,
    /// Local slot `i`'s WRITE has not completed yet.
    busy: Vec<bool>,
    next: usize,
    done: Option<(u64, u64)>,
}

impl RdmaSender {
    /// Handles one completion of the sender's own kinds: WRITEs done, credits and
    /// Done arriving.
    fn on_completion(
        credit: &mut [bool],
        busy: &mut [bool],
        done: &mut Option<(u64, u64)>,
        conn: &mut Conn,
        c: Completion,
    ) -> Result<(), TransportError> {
        let (kind, i) = wr_split(c.wr_id);
        match kind {
            WR_WRITE if i < busy.len() => {
                busy[i] = false;
                Ok(())
            }
            WR_RECV => {
                let m = conn.msg_at(i);
                conn.repost(i)?;
                match m {
                    Some(Msg::Credit { slot }) if (slot as usize) < credit.len() => {
                        credit[slot as usize] = true;
                        Ok(())
                    }
                    Some(Msg::Done { bytes, checksum }) => {
                        *done = Some((bytes, checksum));
                        Ok(())
                    }
                    m => Err(TransportError::Rdma(format!(
                        "unexpected message from the receiver: {m:?}"
                    ))),
                }
            }
            _ => Err(TransportError::Rdma(format!(
                "unexpected completion {:?} for work request {:#x}",
                c.opcode, c.wr_id
            ))),
        }
    }

    fn step(&mut self) -> Result<(), TransportError> {
        let cs = self.conn.wait()?;
        let (credit, busy, done) = (&mut self.credit, &mut self.busy, &mut self.done);
        for c in cs {
            self.conn.dispatch(c, &mut |conn, c| {
                Self::on_completion(credit, busy, done, conn, c)
            })?;
        }
        Ok(())
    }

    fn send_msg(&mut self, m: Msg) -> Result<(), TransportError> {
        let (credit, busy, done) = (&mut self.credit, &mut self.busy, &mut self.done);
        self.conn.send_msg(m, &mut |conn, c| {
            Self::on_completion(credit, busy, done, conn, c)
        })
    }
}

impl ChunkSender for RdmaSender {
    fn send_chunk(
        &mut self,
        fill: &mut dyn FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> Result<usize, TransportError> {
        let s = self.next;
        // The credit logic: remote slot `s` is free only when the receiver said so,
        // and our slot `s` only when the NIC has finished reading it.
        while !self.credit[s] || self.busy[s] {
            self.step()?;
        }
        let range = s * self.chunk..(s + 1) * self.chunk;
        let n = fill(&mut self.conn.v.data.as_mut_slice()[range.clone()])
            .map_err(TransportError::Input)?;
        if n == 0 {
            return Ok(0);
        }
        let n = n.min(self.chunk);
        self.credit[s] = false;
        self.busy[s] = true;
        let remote = RemoteBuf {
            addr: self.ring.addr + range.start as u64,
            rkey: self.ring.rkey,
        };
        let imm = self.conn.imm.then(|| encode_imm(s, n));
        self.conn
            .v
            .qp
            .post_write(
                wr_id(WR_WRITE, s),
                &self.conn.v.data,
                range.start..range.start + n,
                remote,
                imm,
            )
            .map_err(rdma_err)?;
        if !self.conn.imm {
            self.send_msg(Msg::Data {
                slot: s as u32,
                len: n as u32,
            })?;
        }
        self.next = (s + 1) % self.slots;
        Ok(n)
    }

    fn finish(&mut self, bytes: u64, checksum: u64) -> Result<(), TransportError> {
        self.send_msg(Msg::End { bytes, checksum })?;
        while self.done.is_none() {
            if let Err(e) = self.step() {
                return Err(match e {
                    TransportError::PeerGone { peer, reason } => TransportError::PeerGone {
                        peer,
                        reason: format!("{reason} before the receiver confirmed the stream"),
                    },
                    TransportError::Rdma(reason) => TransportError::PeerGone {
                        peer: self.conn.peer.clone(),
                        reason: format!("{reason} before the receiver confirmed the stream"),
                    },
                    e => e,
                });
            }
        }
        let (b, c) = self.done.expect("checked");
        if b != bytes {
            return Err(TransportError::LengthMismatch {
                sent: bytes,
                received: b,
            });
        }
        if c != checksum {
            return Err(TransportError::ChecksumMismatch {
                bytes,
                sent: checksum,
                received: c,
            });
        }
        Ok(())
    }

    fn abort(&mut self, reason: &str) {
        self.conn.abort(reason);
    }

    fn describe(&self) -> String {
        self.conn.describe()
    }
}

#[derive(Debug, Clone, Copy)]
enum Note {
    Data { slot: usize, len: usize },
    End { bytes: u64, checksum: u64 },
}

/// The RDMA receiving half.
pub struct RdmaReceiver {
    conn: Conn,
    chunk: usize,
    slots: usize,
    /// Slot notices and End, in arrival order (which is the sender's order).
    pending: VecDeque<Note>,
}

impl RdmaReceiver {
    fn on_completion(
        pending: &mut VecDeque<Note>,
        slots: usize,
        chunk: usize,
        conn: &mut Conn,
        c: Completion,
    ) -> Result<(), TransportError> {
        let (kind, i) = wr_split(c.wr_id);
        if kind != WR_RECV {
            return Err(TransportError::Rdma(format!(
                "unexpected completion {:?} for work request {:#x}",
                c.opcode, c.wr_id
            )));
        }
        let note = match (c.opcode, c.imm) {
            (WcOpcode::RecvRdmaWithImm, Some(imm)) => {
                let (slot, len) = decode_imm(imm);
                Some(Note::Data { slot, len })
            }
            (WcOpcode::Recv, _) => match conn.msg_at(i) {
                Some(Msg::Data { slot, len }) => Some(Note::Data {
                    slot: slot as usize,
                    len: len as usize,
                }),
                Some(Msg::End { bytes, checksum }) => Some(Note::End { bytes, checksum }),
                _ => None,
            },
            _ => None,
        };
        conn.repost(i)?;
        match note {
            Some(Note::Data { slot, len }) if slot < slots && (1..=chunk).contains(&len) => {
                pending.push_back(Note::Data { slot, len })
            }
            Some(n @ Note::End { .. }) => pending.push_back(n),
            other => {
                return Err(TransportError::Rdma(format!(
                    "invalid notice from the sender: {other:?} ({:?})",
                    c.opcode
                )))
            }
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), TransportError> {
        let cs = self.conn.wait()?;
        let (pending, slots, chunk) = (&mut self.pending, self.slots, self.chunk);
        for c in cs {
            self.conn.dispatch(c, &mut |conn, c| {
                Self::on_completion(pending, slots, chunk, conn, c)
            })?;
        }
        Ok(())
    }

    fn send_msg(&mut self, m: Msg) -> Result<(), TransportError> {
        let (pending, slots, chunk) = (&mut self.pending, self.slots, self.chunk);
        self.conn.send_msg(m, &mut |conn, c| {
            Self::on_completion(pending, slots, chunk, conn, c)
        })
    }
}

impl ChunkReceiver for RdmaReceiver {
    fn recv_chunk(
        &mut self,
        drain: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<Received, TransportError> {
        let note = loop {
            if let Some(n) = self.pending.pop_front() {
                break n;
            }
            self.step()?;
        };
        match note {
            Note::Data { slot, len } => {
                let start = slot * self.chunk;
                // Straight from registered memory: the sender writes this slot again
                // only after the credit below.
                drain(&self.conn.v.data.as_slice()[start..start + len])
                    .map_err(TransportError::Output)?;
                self.send_msg(Msg::Credit { slot: slot as u32 })?;
                Ok(Received::Chunk(len))
            }
            Note::End { bytes, checksum } => Ok(Received::End { bytes, checksum }),
        }
    }

    fn confirm(&mut self, bytes: u64, checksum: u64) -> Result<(), TransportError> {
        self.send_msg(Msg::Done { bytes, checksum })?;
        // Wait until every SEND (the Done included) has been acknowledged.
        while self.conn.send_free.len() < self.conn.n_send {
            self.step()?;
        }
        // Then until the sender closes: exiting first could tear the connection
        // down before the confirmation was processed there.
        let _ = self.conn.tcp.shutdown(Shutdown::Write);
        let _ = self.conn.tcp.set_read_timeout(Some(Duration::from_secs(5)));
        let mut sink = [0u8; 64];
        while let Ok(n) = io::Read::read(&mut self.conn.tcp, &mut sink) {
            if n == 0 {
                break;
            }
        }
        Ok(())
    }

    fn abort(&mut self, reason: &str) {
        self.conn.abort(reason);
    }

    fn describe(&self) -> String {
        self.conn.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imm_round_trip() {
        for (slot, len) in [(0, 1), (1, 1 << 20), (63, 1 << 26), (5, 12345)] {
            assert_eq!(decode_imm(encode_imm(slot, len)), (slot, len));
        }
    }

    #[test]
    fn msgs_round_trip() {
        for m in [
            Msg::Data { slot: 3, len: 4096 },
            Msg::End {
                bytes: u64::MAX,
                checksum: 7,
            },
            Msg::Credit { slot: 63 },
            Msg::Done {
                bytes: 0,
                checksum: u64::MAX,
            },
        ] {
            assert_eq!(Msg::decode(&m.encode()), Some(m));
        }
        assert_eq!(Msg::decode(&[0u8; MSG_SIZE]), None);
        assert_eq!(Msg::decode(&[1u8; 8]), None);
    }

    #[test]
    fn ring_info_round_trip() {
        let i = RingInfo {
            addr: 0x7fff_0000_1000,
            rkey: 0xdead_beef,
            slots: 2,
            chunk: 1 << 20,
        };
        // rdma_cm may pad private data: trailing bytes are ignored.
        let mut padded = i.encode().to_vec();
        padded.resize(196, 0);
        assert_eq!(RingInfo::decode(&padded), Some(i));
        padded[0] = b'X';
        assert_eq!(RingInfo::decode(&padded), None);
    }

    #[test]
    fn token_check() {
        let t = [7u8; RDMA_TOKEN_LEN];
        let mut d = connect_data(&t, true).to_vec();
        d.resize(56, 0);
        assert_eq!(check_connect_data(&d, &t), Some(true));
        assert_eq!(
            check_connect_data(&connect_data(&t, false), &t),
            Some(false)
        );
        d[3] ^= 1;
        assert_eq!(check_connect_data(&d, &t), None);
        assert_eq!(check_connect_data(&[], &t), None);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(64 * 1024), "64 KiB");
        assert_eq!(human(2 << 20), "2 MiB");
        assert_eq!(human(100), "100 bytes");
        assert_eq!(human(3 << 19), "1.5 MiB");
    }

    #[test]
    fn wr_ids() {
        assert_eq!(wr_split(wr_id(WR_RECV, 17)), (WR_RECV, 17));
        assert_eq!(wr_split(wr_id(WR_WRITE, 0)), (WR_WRITE, 0));
    }

    fn negotiated(local: TransportPref, peer: TransportPref) -> Negotiated {
        let hello = |role, transport| rdpipe_wire::Hello {
            version: rdpipe_wire::PROTOCOL_VERSION,
            role,
            transport,
            caps: Caps::RDMA,
            chunk_size: 1 << 20,
            slots: 2,
            nonce: [0; rdpipe_wire::hello::NONCE_LEN],
            integrity: rdpipe_wire::Integrity::default(),
        };
        Negotiated {
            chosen: rdpipe_wire::frame::Chosen::Rdma,
            chunk_size: 1 << 20,
            slots: 2,
            local: hello(rdpipe_wire::Role::Receiver, local),
            peer: hello(rdpipe_wire::Role::Sender, peer),
            peer_addr: "peer".into(),
        }
    }

    #[test]
    fn fallback_only_when_both_ends_said_auto() {
        use TransportPref::*;
        assert!(may_fall_back(&negotiated(Auto, Auto)));
        assert!(!may_fall_back(&negotiated(Rdma, Auto)));
        assert!(!may_fall_back(&negotiated(Auto, Rdma)));
        let e = unavailable(&negotiated(Auto, Rdma), "cannot pin 2 MiB", "this end");
        assert_eq!(e.exit_code(), crate::error::EXIT_NO_RDMA);
        assert!(e.to_string().contains("the peer requires --transport rdma"));
        let e = unavailable(&negotiated(Rdma, Auto), "x", "this end");
        assert!(e.to_string().contains("--transport rdma was given here"));
    }

    #[test]
    fn memlock_message_names_size_and_limit() {
        let e = VerbsError::RegMr {
            len: 2 << 20,
            source: io::Error::from_raw_os_error(libc_enomem()),
        };
        let m = register_error(2 << 20, &e);
        assert!(m.starts_with("cannot pin 2 MiB: ulimit -l is "), "{m}");
        assert!(m.ends_with("; raise it or use --chunk-size"), "{m}");
        let other = VerbsError::RegMr {
            len: 4096,
            source: io::Error::from_raw_os_error(22),
        };
        assert!(register_error(4096, &other).starts_with("cannot register 4 KiB"));
    }

    fn libc_enomem() -> i32 {
        rustix::io::Errno::NOMEM.raw_os_error()
    }

    #[test]
    fn queue_sizes_are_never_zero() {
        let s = sizes(1);
        assert!(s.caps.max_send_wr >= 2 && s.caps.max_recv_wr as usize > s.n_recv);
        assert!(s.cqe >= s.caps.max_send_wr + s.caps.max_recv_wr);
    }
}
