//! An established RDMA connection ([`Conn`]): its verbs objects, the rdma_cm ids
//! and the TCP liveness channel, the SEND of one message, and the completion wait
//! loop both halves share: poll both CQs until empty; sleep on the CQ channel, the
//! rdma_cm channel and the TCP socket; on a CQ event ack it, re-arm that CQ if it
//! is still wanted, poll again. A peer found gone (TCP EOF or Abort, DISCONNECTED,
//! a flushed work request) is reported only once no completion is left.
//!
//! Two CQs on the one channel: the receive CQ (the peer's notices, credits, End
//! and Done arriving) is always armed; the send CQ (our own SENDs and WRITEs
//! completing) is polled at every wait but armed only for a wait that cannot go
//! on without one of them ([`Wake::OwnCompletion`]). So a receiver of a busy
//! stream wakes once per data notice, not once more for its credits' completions.

use super::RdmaError;
use crate::error::GoneCause;
use crate::frame_io::{protocol, read_control, write_control};
use crate::TransportError;
use rdpipe_verbs::{
    CmEventKind, CmId, Completion, CompletionChannel, CompletionQueue, EventChannel, MemoryRegion,
    ProtectionDomain, QueuePair, Signal,
};
use rdpipe_wire::rdma::RDMA_MSG_LEN;
use rdpipe_wire::{AbortReason, Control, RdmaMsg, WireError};
use rustix::event::{poll, PollFd, PollFlags};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Work request kinds, in the top half of a work request id.
pub(super) const WR_WRITE: u64 = 1;
pub(super) const WR_SEND: u64 = 2;
pub(super) const WR_RECV: u64 = 3;
/// A relay's WRITE from its receive ring (the index: the ring slot).
pub(super) const WR_FORWARD: u64 = 4;

/// The work request id of buffer or slot `index` for a request of `kind`.
pub(super) fn wr_id(kind: u64, index: usize) -> u64 {
    (kind << 32) | index as u64
}

/// `(kind, index)` of a work request id.
pub(super) fn wr_split(id: u64) -> (u64, usize) {
    (id >> 32, (id & 0xffff_ffff) as usize)
}

/// Registered message buffers, PD, CQs and QP: built once the device is known.
pub(super) struct Verbs {
    // Field order is drop order; the Arcs inside make any order safe anyway.
    pub(super) qp: QueuePair,
    /// Completions of our SENDs and WRITEs (armed only when waited for).
    pub(super) send_cq: CompletionQueue,
    /// Completions of receives: the peer's messages and immediate data.
    pub(super) recv_cq: CompletionQueue,
    pub(super) chan: CompletionChannel,
    pub(super) recv_msgs: MemoryRegion,
    pub(super) send_msgs: MemoryRegion,
    pub(super) data: MemoryRegion,
    pub(super) pd: ProtectionDomain,
}

/// The rdma_cm side of a connection.
pub(super) struct CmParts {
    /// The connection's id.
    pub(super) id: CmId,
    /// The receiver's listener, kept so no one else can take its port.
    pub(super) _listener: Option<CmId>,
    /// Where the connection's events arrive.
    pub(super) ec: EventChannel,
}

/// What may end a [`Conn::wait`] that finds no completion ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    /// Only something arriving from the peer (or the peer gone): our own SENDs'
    /// and WRITEs' completions are picked up by polling, whenever we wake.
    Arrival,
    /// Also a completion of our own SEND or WRITE: the caller cannot go on
    /// without one (no free message buffer, a slot the NIC still reads).
    OwnCompletion,
}

/// Handles a completion that is not a SEND of ours finishing.
pub(super) type OnCompletion<'a> =
    dyn FnMut(&mut Conn, Completion) -> Result<(), TransportError> + 'a;

/// An established connection: verbs objects, the cm ids and the TCP liveness
/// channel, and the wait loop shared by both halves.
pub(super) struct Conn {
    pub(super) v: Verbs,
    pub(super) n_send: usize,
    /// Message buffers whose SEND has completed.
    pub(super) send_free: Vec<usize>,
    /// Buffers of Credit SENDs posted unsignaled since the last signaled SEND:
    /// free once a later signaled SEND completes (see [`Conn::send_msg`]).
    quiet: Vec<usize>,
    /// For each buffer whose SEND was signaled: the quiet ones before it, freed
    /// with it.
    covers: Vec<Vec<usize>>,
    cm: CmParts,
    pub(super) tcp: TcpStream,
    tcp_closed: bool,
    pub(super) peer: String,
    pub(super) device: String,
    /// Whether slot notices travel as immediate data (else as SENDs).
    pub(super) imm: bool,
    /// A relay forwards into this connection from its receive ring (`-v` says
    /// so).
    pub(super) zero_copy: bool,
    /// A liveness failure seen while completions may still be in flight.
    dead: Option<TransportError>,
    /// The send CQ is armed and its event has not come yet.
    send_armed: bool,
    /// Since when [`Conn::wait`] has waited with no completion.
    quiet_since: Option<Instant>,
    /// When this end told the peer it waits, in this wait ([`STALL`]).
    told: Option<Instant>,
}

/// How long an end waits on its peer over RDMA before it says so on the TCP
/// connection (a `Keepalive`, which every build ignores on an RDMA hop's TCP
/// connection; once per wait), and how long it must have waited itself when
/// the peer's word comes for the two to be waiting on each other. That happens only
/// when a message was lost on the path without either queue pair failing:
/// a sender waits for a credit or its own WRITE only while the receiver holds
/// a slot, and a receiver waits for data only once it gave every slot back.
/// (Soft-RoCE after a link flap did it: both ends idle for ever.) An end
/// busy elsewhere (writing its output, reading its input) is not in
/// [`Conn::wait`] and says nothing, so a slow consumer is never taken for a
/// lost message.
pub(super) const STALL: Duration = Duration::from_secs(3);

impl Conn {
    pub(super) fn new(
        v: Verbs,
        n_send: usize,
        cm: CmParts,
        tcp: TcpStream,
        peer: String,
        device: String,
        imm: bool,
    ) -> Conn {
        Conn {
            v,
            n_send,
            send_free: (0..n_send).collect(),
            quiet: Vec::new(),
            covers: vec![Vec::new(); n_send],
            cm,
            tcp,
            tcp_closed: false,
            peer,
            device,
            imm,
            zero_copy: false,
            dead: None,
            send_armed: false,
            quiet_since: None,
            told: None,
        }
    }

    pub(super) fn describe(&self) -> String {
        let mode = if self.imm {
            "write-with-imm"
        } else {
            "write+send"
        };
        let relay = if self.zero_copy {
            ", zero-copy relay"
        } else {
            ""
        };
        format!("rdma ({}, {mode}{relay})", self.device)
    }

    /// Posts a SEND of `m`, waiting for a free message buffer if needed (the
    /// only time a SEND's completion is waited for: the completions already
    /// there are picked up at every wait).
    ///
    /// A Credit goes unsignaled unless it takes the last free buffer: one
    /// completion stands for up to `n_send` credits (fewer completions to
    /// poll). Everything else (Done, End, data notices) is signaled.
    pub(super) fn send_msg(
        &mut self,
        m: RdmaMsg,
        on: &mut OnCompletion<'_>,
    ) -> Result<(), TransportError> {
        let i = loop {
            if let Some(i) = self.send_free.pop() {
                break i;
            }
            for c in self.wait(Wake::OwnCompletion)? {
                self.dispatch(c, on)?;
            }
        };
        let range = i * RDMA_MSG_LEN..(i + 1) * RDMA_MSG_LEN;
        self.v.send_msgs.as_mut_slice()[range.clone()].copy_from_slice(&m.encode());
        let signal = match m {
            RdmaMsg::Credit { .. } if !self.send_free.is_empty() => Signal::Quiet,
            _ => Signal::Completion,
        };
        self.v
            .qp
            .post_send(wr_id(WR_SEND, i), &self.v.send_msgs, range, signal)
            .map_err(|e| TransportError::from(RdmaError::from(e)))?;
        match signal {
            Signal::Quiet => self.quiet.push(i),
            Signal::Completion => self.covers[i] = std::mem::take(&mut self.quiet),
        }
        Ok(())
    }

    /// Handles what is common to both halves (failed completions, our SENDs
    /// finishing) and passes the rest to `on`.
    pub(super) fn dispatch(
        &mut self,
        c: Completion,
        on: &mut OnCompletion<'_>,
    ) -> Result<(), TransportError> {
        if let Some(e) = &c.error {
            // Flushed or retried-out requests mean the peer is gone: the same error
            // as a lost TCP connection (the receiver reports truncation). Anything
            // else is an RDMA failure of its own.
            return Err(if e.connection_lost() {
                TransportError::PeerGone {
                    peer: self.peer.clone(),
                    cause: GoneCause::RdmaLost(e.clone()),
                }
            } else {
                RdmaError::Completion(e.clone()).into()
            });
        }
        let (kind, i) = wr_split(c.wr_id);
        if kind == WR_SEND {
            if let Some(quiet) = self.covers.get_mut(i) {
                self.send_free.append(quiet);
            }
            self.send_free.push(i);
            return Ok(());
        }
        on(self, c)
    }

    /// Reposts receive buffer `i` (after its contents were decoded).
    pub(super) fn repost(&self, i: usize) -> Result<(), TransportError> {
        self.v
            .qp
            .post_recv(
                wr_id(WR_RECV, i),
                &self.v.recv_msgs,
                i * RDMA_MSG_LEN..(i + 1) * RDMA_MSG_LEN,
            )
            .map_err(|e| RdmaError::from(e).into())
    }

    /// Decodes the message in receive buffer `i`.
    pub(super) fn msg_at(&self, i: usize) -> Result<RdmaMsg, WireError> {
        self.v
            .recv_msgs
            .as_slice()
            .get(i * RDMA_MSG_LEN..(i + 1) * RDMA_MSG_LEN)
            .map_or(Err(WireError::ShortRdmaMsg(0)), RdmaMsg::decode)
    }

    /// The completions already there on both CQs, without waiting (a relay's
    /// look at one connection before it sleeps on the other). Our own requests'
    /// come first: a failed one is the cause of the flushes that follow it.
    pub(super) fn poll_now(&mut self) -> Result<Vec<Completion>, TransportError> {
        let mut out = Vec::new();
        self.poll_into(&mut out)?;
        Ok(out)
    }

    fn poll_into(&self, out: &mut Vec<Completion>) -> Result<(), TransportError> {
        let verbs = |e| TransportError::from(RdmaError::from(e));
        self.v.send_cq.poll(out).map_err(verbs)?;
        self.v.recv_cq.poll(out).map_err(verbs)?;
        Ok(())
    }

    /// Reads the channel's event and acks it; re-arms the receive CQ if it was
    /// that one (always wanted), and notes the send CQ disarmed if it was that.
    fn take_cq_event(&mut self) -> Result<(), TransportError> {
        let verbs = |e| TransportError::from(RdmaError::from(e));
        let fired = self
            .v
            .chan
            .take_event(&[&self.v.recv_cq, &self.v.send_cq])
            .map_err(verbs)?;
        match fired {
            Some(0) => self.v.recv_cq.arm().map_err(verbs)?,
            Some(_) => self.send_armed = false,
            None => {}
        }
        Ok(())
    }

    /// Returns at least one completion (of either CQ), sleeping on the
    /// completion channel, the rdma_cm channel and the TCP connection; with
    /// [`Wake::OwnCompletion`] the send CQ is armed first. A peer that is gone
    /// (TCP EOF, an Abort, DISCONNECTED) is reported only once no completion is
    /// left.
    pub(super) fn wait(&mut self, wake: Wake) -> Result<Vec<Completion>, TransportError> {
        let verbs = |e| TransportError::from(RdmaError::from(e));
        let mut out = Vec::new();
        let mut grace = true;
        loop {
            self.poll_into(&mut out)?;
            if !out.is_empty() {
                (self.quiet_since, self.told) = (None, None);
                return Ok(out);
            }
            if wake == Wake::OwnCompletion && !self.send_armed {
                // Armed, then polled again (top of the loop): a completion that
                // landed before the arming is found by that poll.
                self.v.send_cq.arm().map_err(verbs)?;
                self.send_armed = true;
                continue;
            }
            if self.dead.is_some() {
                // Completions already on their way get a moment to land.
                if grace
                    && self
                        .v
                        .chan
                        .wait(Some(Duration::from_millis(100)))
                        .map_err(verbs)?
                {
                    grace = false;
                    self.take_cq_event()?;
                    continue;
                }
                return Err(self.dead.take().expect("checked"));
            }
            let wake_in = self.tell_if_waiting();
            let (cq_ready, cm_ready, tcp_ready) = {
                let mut fds = vec![
                    PollFd::new(&self.v.chan, PollFlags::IN),
                    PollFd::new(&self.cm.ec, PollFlags::IN),
                ];
                if !self.tcp_closed {
                    fds.push(PollFd::new(&self.tcp, PollFlags::IN));
                }
                let ms = wake_in.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32 + 1);
                match poll(&mut fds, ms) {
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
                self.take_cq_event()?;
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
        let Some(mut ev) = self
            .cm
            .ec
            .get_event(Some(Duration::ZERO))
            .map_err(RdmaError::from)?
        else {
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
            CmEventKind::Disconnected | CmEventKind::DeviceRemoval if ev.is_for(&self.cm.id) => {
                // The same error as a lost TCP connection: the receive loop reports
                // "stream truncated", the sender exits with "connection lost".
                self.dead.get_or_insert(TransportError::PeerGone {
                    peer: self.peer.clone(),
                    cause: if ev.kind == CmEventKind::Disconnected {
                        GoneCause::RdmaDisconnected
                    } else {
                        GoneCause::RdmaDeviceRemoved
                    },
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// Tells the peer on TCP, once per wait, when this end has waited
    /// [`STALL`]; how long the poll may sleep (`None`: until something
    /// happens). Once is enough: of two ends that wait on each other, the
    /// one that began first has waited longer than [`STALL`] when the
    /// other's word comes. And a peer busy elsewhere for a long time (an idle
    /// input) finds at most one such word per wait of ours in its socket.
    fn tell_if_waiting(&mut self) -> Option<Duration> {
        if self.told.is_some() {
            return None;
        }
        let now = Instant::now();
        let waited = now - *self.quiet_since.get_or_insert(now);
        if waited < STALL {
            return Some(STALL - waited);
        }
        if !self.tcp_closed {
            // Best effort: a failed write shows as the peer gone on the
            // next read.
            let _ = write_control(&mut self.tcp, &self.peer, &Control::Keepalive);
        }
        self.told = Some(now);
        None
    }

    fn on_tcp_readable(&mut self) {
        let e = match read_control(&mut self.tcp, &self.peer) {
            // The peer waits on us; so do we, for as long: the path lost a
            // message ([`STALL`]). One from before our wait began is stale.
            Ok(Control::Keepalive) => {
                let waited = self.quiet_since.map_or(Duration::ZERO, |s| s.elapsed());
                if waited >= STALL {
                    tracing::debug!(
                        "{}: both ends waited {:.1} s on each other over RDMA",
                        self.peer,
                        waited.as_secs_f64()
                    );
                    self.dead.get_or_insert(TransportError::PeerGone {
                        peer: self.peer.clone(),
                        cause: GoneCause::RdmaStalled(waited.as_secs()),
                    });
                }
                return;
            }
            Ok(Control::Abort { message, .. }) => TransportError::PeerAborted(message),
            Ok(other) => protocol(&self.peer, WireError::Unexpected(other.kind())),
            Err(e) => e,
        };
        self.tcp_closed = true;
        // An Abort beats a disconnect seen a moment earlier.
        if matches!(e, TransportError::PeerAborted(_)) || self.dead.is_none() {
            self.dead = Some(e);
        }
    }

    /// Why the connection ended, once its TCP connection hung up while the
    /// send loop's input was idle (nothing was posted, so no completion
    /// tells): what that TCP connection says (a reset, a timeout, the peer's
    /// close or Abort). It has hung up, so reading it does not wait; the
    /// timeout only bounds a surprise.
    pub(super) fn gone(&mut self) -> TransportError {
        let _ = self.tcp.set_read_timeout(Some(Duration::from_secs(2)));
        while self.dead.is_none() && !self.tcp_closed {
            self.on_tcp_readable();
        }
        self.dead
            .take()
            .unwrap_or_else(|| TransportError::PeerGone {
                peer: self.peer.clone(),
                cause: GoneCause::Closed,
            })
    }

    /// Tells the peer on TCP that the stream is abandoned, and disconnects.
    pub(super) fn abort(&mut self, reason: &str) {
        let abort = Control::Abort {
            reason: AbortReason::Stream,
            message: reason.into(),
        };
        let _ = write_control(&mut self.tcp, &self.peer, &abort);
        let _ = self.tcp.shutdown(Shutdown::Both);
        let _ = self.cm.id.disconnect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids() {
        assert_eq!(wr_split(wr_id(WR_RECV, 17)), (WR_RECV, 17));
        assert_eq!(wr_split(wr_id(WR_WRITE, 0)), (WR_WRITE, 0));
    }
}
