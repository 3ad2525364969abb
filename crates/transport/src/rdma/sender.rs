//! The RDMA sending half and its credit logic: slot *i* may be filled again only
//! when the receiver returned its credit *and* our own WRITE from it completed.

use super::conn::{wr_id, wr_split, Conn, Verbs, Wake, WR_FORWARD, WR_RECV, WR_WRITE};
use super::RdmaError;
use crate::error::GoneCause;
use crate::{ChunkSender, TransportError};
use rdpipe_verbs::{Completion, RegionAlias, RemoteBuf, VerbsError};
use rdpipe_wire::rdma::encode_imm;
use rdpipe_wire::{RdmaMsg, RingInfo, StreamEnd};
use std::io;

/// The sender's credit state: which remote slots may be written, which local
/// slots the NIC still reads, and the receiver's confirmation once it came.
struct Credits {
    /// Remote slot `i` may be written (its credit came back).
    credit: Vec<bool>,
    /// Local slot `i`'s WRITE has not completed yet.
    busy: Vec<bool>,
    /// The receiver's `Done`: what it verified.
    done: Option<StreamEnd>,
    /// A relay's forwarding WRITEs that completed (their receive ring slots).
    forwarded: Vec<usize>,
}

impl Credits {
    /// Whether slot `s` may be filled and written.
    fn free(&self, s: usize) -> bool {
        self.credit[s] && !self.busy[s]
    }

    /// Handles one completion of the sender's own kinds: WRITEs done, credits and
    /// Done arriving.
    fn on_completion(&mut self, conn: &mut Conn, c: Completion) -> Result<(), TransportError> {
        let (kind, i) = wr_split(c.wr_id);
        match kind {
            WR_WRITE if i < self.busy.len() => {
                self.busy[i] = false;
                Ok(())
            }
            WR_FORWARD => {
                self.forwarded.push(i);
                Ok(())
            }
            WR_RECV => {
                let m = conn.msg_at(i);
                conn.repost(i)?;
                match m.map_err(RdmaError::BadFromReceiver)? {
                    RdmaMsg::Credit { slot } if (slot as usize) < self.credit.len() => {
                        self.credit[slot as usize] = true;
                        Ok(())
                    }
                    RdmaMsg::Done(d) => {
                        self.done = Some(d);
                        Ok(())
                    }
                    m => Err(RdmaError::UnexpectedFromReceiver(m).into()),
                }
            }
            _ => Err(RdmaError::UnexpectedCompletion {
                opcode: c.opcode,
                wr_id: c.wr_id,
            }
            .into()),
        }
    }
}

/// The RDMA sending half.
pub struct RdmaSender {
    pub(super) conn: Conn,
    chunk: usize,
    slots: usize,
    ring: RingInfo,
    credits: Credits,
    next: usize,
}

impl RdmaSender {
    pub(super) fn new(conn: Conn, chunk: usize, slots: usize, ring: RingInfo) -> RdmaSender {
        RdmaSender {
            conn,
            chunk,
            slots,
            ring,
            credits: Credits {
                credit: vec![true; slots],
                busy: vec![false; slots],
                done: None,
                forwarded: Vec::new(),
            },
            next: 0,
        }
    }

    /// Waits for completions (see [`Wake`] for what may end the wait) and
    /// handles them.
    pub(super) fn step(&mut self, wake: Wake) -> Result<(), TransportError> {
        let cs = self.conn.wait(wake)?;
        self.handle(cs)
    }

    /// Handles the completions already there, without waiting.
    pub(super) fn poll_now(&mut self) -> Result<(), TransportError> {
        let cs = self.conn.poll_now()?;
        self.handle(cs)
    }

    fn handle(&mut self, cs: Vec<Completion>) -> Result<(), TransportError> {
        let credits = &mut self.credits;
        for c in cs {
            self.conn
                .dispatch(c, &mut |conn, c| credits.on_completion(conn, c))?;
        }
        Ok(())
    }

    fn send_msg(&mut self, m: RdmaMsg) -> Result<(), TransportError> {
        let credits = &mut self.credits;
        self.conn
            .send_msg(m, &mut |conn, c| credits.on_completion(conn, c))
    }
}

impl RdmaSender {
    /// A relay's forwarding: RDMA-WRITEs `alias[offset..offset + len]` (its
    /// receive ring's slot `tag`, registered in our PD) into the next remote
    /// slot once its credit is back. The slot `tag` is free again only once it
    /// appears in [`RdmaSender::take_forwarded`].
    pub(super) fn forward(
        &mut self,
        alias: &RegionAlias,
        offset: usize,
        len: usize,
        tag: usize,
    ) -> Result<(), TransportError> {
        let s = self.next;
        while !self.credits.credit[s] {
            self.step(Wake::Arrival)?;
        }
        self.credits.credit[s] = false;
        self.write_slot(s, len, |v, remote, imm| {
            v.qp.post_write_alias(
                wr_id(WR_FORWARD, tag),
                alias,
                offset..offset + len,
                remote,
                imm,
            )
        })
    }

    /// Posts the WRITE of `len` bytes into remote slot `s` with `post` (from our
    /// own slot, or a relay's receive ring), announces it (the immediate data,
    /// or a Data message without WRITE_WITH_IMM) and moves on to the next slot.
    fn write_slot(
        &mut self,
        s: usize,
        len: usize,
        post: impl FnOnce(&Verbs, RemoteBuf, Option<u32>) -> Result<(), VerbsError>,
    ) -> Result<(), TransportError> {
        let remote = RemoteBuf {
            addr: self.ring.addr + (s * self.chunk) as u64,
            rkey: self.ring.rkey,
        };
        let imm = self.conn.imm.then(|| encode_imm(s as u32, len as u32));
        post(&self.conn.v, remote, imm).map_err(RdmaError::from)?;
        if !self.conn.imm {
            self.send_msg(RdmaMsg::Data {
                slot: s as u32,
                len: len as u32,
            })?;
        }
        self.next = (s + 1) % self.slots;
        Ok(())
    }

    /// The receive ring slots whose forwarding WRITE completed since last asked.
    pub(super) fn take_forwarded(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.credits.forwarded)
    }

    /// The chunk size of the remote ring.
    pub(super) fn chunk(&self) -> usize {
        self.chunk
    }
}

impl ChunkSender for RdmaSender {
    fn send_chunk(
        &mut self,
        fill: &mut dyn FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> Result<usize, TransportError> {
        let s = self.next;
        // The credit logic: remote slot `s` is free only when the receiver said so,
        // and our slot `s` only when the NIC has finished reading it. The credit
        // comes after the receiver got the WRITE, so the WRITE's completion is
        // usually there by then (found by polling); only a slot with its credit
        // back and the WRITE still in flight waits for our own completion.
        while !self.credits.free(s) {
            let wake = if self.credits.credit[s] {
                Wake::OwnCompletion
            } else {
                Wake::Arrival
            };
            self.step(wake)?;
        }
        let range = s * self.chunk..(s + 1) * self.chunk;
        let n = fill(&mut self.conn.v.data.as_mut_slice()[range.clone()])
            .map_err(TransportError::Input)?;
        if n == 0 {
            return Ok(0);
        }
        let n = n.min(self.chunk);
        self.credits.credit[s] = false;
        self.credits.busy[s] = true;
        self.write_slot(s, n, |v, remote, imm| {
            v.qp.post_write(
                wr_id(WR_WRITE, s),
                &v.data,
                range.start..range.start + n,
                remote,
                imm,
            )
        })?;
        Ok(n)
    }

    fn finish(&mut self, end: &StreamEnd) -> Result<StreamEnd, TransportError> {
        self.send_msg(RdmaMsg::End(*end))?;
        while self.credits.done.is_none() {
            if let Err(e) = self.step(Wake::Arrival) {
                let unconfirmed = |cause| GoneCause::Unconfirmed(Box::new(cause));
                return Err(match e {
                    TransportError::PeerGone { peer, cause } => TransportError::PeerGone {
                        peer,
                        cause: unconfirmed(cause),
                    },
                    TransportError::Rdma(e) => TransportError::PeerGone {
                        peer: self.conn.peer.clone(),
                        cause: unconfirmed(GoneCause::Rdma(e)),
                    },
                    e => e,
                });
            }
        }
        Ok(self.credits.done.expect("checked"))
    }

    fn abort(&mut self, reason: &str) {
        self.conn.abort(reason);
    }

    fn gone(&mut self) -> TransportError {
        self.conn.gone()
    }

    fn describe(&self) -> String {
        self.conn.describe()
    }
}
