//! The RDMA receiving half and its ring state: slot notices (immediate data, or
//! SENDs on the WRITE + SEND path) queue up in arrival order; each slot is drained
//! straight from registered memory, then its credit goes back to the sender.

use super::conn::{wr_split, Conn, Wake, WR_RECV};
use super::RdmaError;
use crate::buf::PageBuf;
use crate::{ChunkReceiver, Received, TransportError};
use rdpipe_verbs::{Completion, WcOpcode};
use rdpipe_wire::rdma::decode_imm;
use rdpipe_wire::{RdmaMsg, StreamEnd};
use std::collections::VecDeque;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// What the sender said, in its order.
#[derive(Debug, Clone, Copy)]
pub(super) enum Note {
    /// Slot `slot` holds `len` new bytes.
    Data { slot: usize, len: usize },
    /// End of stream.
    End(StreamEnd),
}

/// The receiver's ring state: its shape and the notices not yet drained.
struct Ring {
    slots: usize,
    chunk: usize,
    /// Slot notices and End, in arrival order (which is the sender's order).
    pending: VecDeque<Note>,
}

impl Ring {
    /// Handles one completion of the receiver's own kind: a receive, carrying a
    /// slot notice (immediate data or a SEND) or End.
    fn on_completion(&mut self, conn: &mut Conn, c: Completion) -> Result<(), TransportError> {
        let (kind, i) = wr_split(c.wr_id);
        if kind != WR_RECV {
            return Err(RdmaError::UnexpectedCompletion {
                opcode: c.opcode,
                wr_id: c.wr_id,
            }
            .into());
        }
        let note = match (c.opcode, c.imm) {
            (WcOpcode::RecvRdmaWithImm, Some(imm)) => {
                let (slot, len) = decode_imm(imm);
                Ok(Note::Data {
                    slot: slot as usize,
                    len: len as usize,
                })
            }
            (WcOpcode::Recv, _) => match conn.msg_at(i) {
                Ok(RdmaMsg::Data { slot, len }) => Ok(Note::Data {
                    slot: slot as usize,
                    len: len as usize,
                }),
                Ok(RdmaMsg::End(e)) => Ok(Note::End(e)),
                Ok(m) => Err(RdmaError::UnexpectedNotice {
                    msg: Some(m),
                    opcode: c.opcode,
                }),
                Err(e) => Err(RdmaError::BadNotice(e)),
            },
            (opcode, _) => Err(RdmaError::UnexpectedNotice { msg: None, opcode }),
        };
        conn.repost(i)?;
        match note? {
            Note::Data { slot, len } if slot >= self.slots || !(1..=self.chunk).contains(&len) => {
                Err(RdmaError::NoticeOutOfRange {
                    slot,
                    len,
                    slots: self.slots,
                    chunk: self.chunk,
                }
                .into())
            }
            n => {
                self.pending.push_back(n);
                Ok(())
            }
        }
    }
}

/// A test's fault (tests/rdma-vm/suite-reconnect.sh, the stall case):
/// `RDPIPE_TEST_LOSE_CREDITS=N` in a receiving process's environment makes
/// the first connection that gives back more than N credits (counted over
/// the process) drop that one and every later one: a path that loses
/// messages without failing either queue pair. Later connections are left
/// alone.
pub const LOSE_CREDITS_ENV: &str = "RDPIPE_TEST_LOSE_CREDITS";

/// Whether this credit is the first one [`LOSE_CREDITS_ENV`] drops.
fn lose_this_credit() -> bool {
    static AFTER: OnceLock<Option<u64>> = OnceLock::new();
    static GIVEN: AtomicU64 = AtomicU64::new(0);
    static LOST: AtomicBool = AtomicBool::new(false);
    let Some(after) = *AFTER.get_or_init(|| {
        std::env::var(LOSE_CREDITS_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
    }) else {
        return false;
    };
    GIVEN.fetch_add(1, Ordering::Relaxed) >= after && !LOST.swap(true, Ordering::Relaxed)
}

/// The RDMA receiving half.
///
/// Its ring is registered for remote writes for the whole connection: whoever
/// holds the ring's key can write a slot at any time, not only the sender after
/// a credit (an attacker on the fabric who read the key; see docs/security.md).
/// So under a keyed protection (`--integrity mac` or `encrypt`) a chunk is first
/// copied into private memory ([`RdmaReceiver::private`]) and only that copy is
/// opened, hashed and written: a write into the slot after the check cannot
/// change what reaches the output. The slot's credit goes back right after the
/// copy. Under `--integrity checksum` (no defence against an attacker, by
/// definition) the chunk is drained from the slot itself.
pub struct RdmaReceiver {
    pub(super) conn: Conn,
    ring: Ring,
    /// The private copy of the current chunk, under a keyed protection.
    private: Option<PageBuf>,
    /// Dropping every credit ([`LOSE_CREDITS_ENV`]).
    losing: bool,
}

impl RdmaReceiver {
    pub(super) fn new(conn: Conn, chunk: usize, slots: usize, keyed: bool) -> RdmaReceiver {
        RdmaReceiver {
            conn,
            ring: Ring {
                slots,
                chunk,
                pending: VecDeque::new(),
            },
            private: keyed.then(|| PageBuf::new(chunk)),
            losing: false,
        }
    }

    fn step(&mut self, wake: Wake) -> Result<(), TransportError> {
        let cs = self.conn.wait(wake)?;
        self.handle(cs)
    }

    fn handle(&mut self, cs: Vec<rdpipe_verbs::Completion>) -> Result<(), TransportError> {
        let ring = &mut self.ring;
        for c in cs {
            self.conn
                .dispatch(c, &mut |conn, c| ring.on_completion(conn, c))?;
        }
        Ok(())
    }

    /// The next notice if one has arrived, without waiting.
    pub(super) fn try_next(&mut self) -> Result<Option<Note>, TransportError> {
        if self.ring.pending.is_empty() {
            let cs = self.conn.poll_now()?;
            self.handle(cs)?;
        }
        Ok(self.ring.pending.pop_front())
    }

    /// Waits for the next notice.
    pub(super) fn next(&mut self) -> Result<Note, TransportError> {
        loop {
            if let Some(n) = self.ring.pending.pop_front() {
                return Ok(n);
            }
            self.step(Wake::Arrival)?;
        }
    }

    /// Slot `slot`'s bytes `[0, len)`.
    pub(super) fn slot_mut(&mut self, slot: usize, len: usize) -> &mut [u8] {
        let start = slot * self.ring.chunk;
        &mut self.conn.v.data.as_mut_slice()[start..start + len]
    }

    /// Slot `slot`'s offset in the ring.
    pub(super) fn slot_offset(&self, slot: usize) -> usize {
        slot * self.ring.chunk
    }

    /// The ring's slot count.
    pub(super) fn slots(&self) -> usize {
        self.ring.slots
    }

    /// The ring's chunk size.
    pub(super) fn chunk(&self) -> usize {
        self.ring.chunk
    }

    /// Gives slot `slot` back to the sender (its credit).
    pub(super) fn release(&mut self, slot: usize) -> Result<(), TransportError> {
        if self.losing || lose_this_credit() {
            self.losing = true;
            return Ok(());
        }
        self.send_msg(RdmaMsg::Credit { slot: slot as u32 })
    }

    fn send_msg(&mut self, m: RdmaMsg) -> Result<(), TransportError> {
        let ring = &mut self.ring;
        self.conn
            .send_msg(m, &mut |conn, c| ring.on_completion(conn, c))
    }
}

impl ChunkReceiver for RdmaReceiver {
    fn recv_chunk(
        &mut self,
        drain: &mut dyn FnMut(&mut [u8]) -> Result<(), TransportError>,
    ) -> Result<Received, TransportError> {
        match self.next()? {
            Note::Data { slot, len } => match self.private.take() {
                // Keyed: check and write a private copy (see the type's doc); the
                // slot is free again as soon as it is copied.
                Some(mut copy) => {
                    copy[..len].copy_from_slice(self.slot_mut(slot, len));
                    let r = self.release(slot).and_then(|()| drain(&mut copy[..len]));
                    self.private = Some(copy);
                    r.map(|()| Received::Chunk(len))
                }
                // Checksum only: straight from registered memory; the sender
                // writes this slot again only after the credit below.
                None => {
                    drain(self.slot_mut(slot, len))?;
                    self.release(slot)?;
                    Ok(Received::Chunk(len))
                }
            },
            Note::End(e) => Ok(Received::End(e)),
        }
    }

    fn more_ready(&mut self) -> bool {
        // Notices taken off the completion queue and not yet drained; one
        // still on the queue is not seen (the receive loop then writes out
        // what it holds a chunk early, which costs overlap, not order).
        !self.ring.pending.is_empty()
    }

    fn confirm(&mut self, done: &StreamEnd) -> Result<(), TransportError> {
        self.send_msg(RdmaMsg::Done(*done))?;
        // Wait until every SEND (the Done included) has been acknowledged.
        while self.conn.send_free.len() < self.conn.n_send {
            self.step(Wake::OwnCompletion)?;
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
