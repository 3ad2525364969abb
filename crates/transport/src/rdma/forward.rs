//! The zero-copy relay: a host that receives the stream over RDMA and sends it
//! on over RDMA on the same device forwards each chunk with an RDMA WRITE
//! straight from its receive ring (registered in the outgoing connection's PD
//! too, a [`RegionAlias`]) into the next host's ring, instead of copying it out
//! and back into a send slot.
//!
//! Per chunk: hash it for the incoming stream's check and for the outgoing
//! stream's End (each hop has its own keys), write the local copy (a sink's
//! command or file; nothing on a relay-only segment), post the forwarding
//! WRITE; the slot's credit goes back upstream only once that WRITE completed
//! (the upstream may overwrite it then). The end of stream is checked as by
//! [`crate::pump`]: the incoming stream verified whole (End against our own
//! hash, the local copy flushed, Done upstream), then End downstream and its
//! Done checked.
//!
//! Waiting: the loop sleeps on the incoming connection while the upstream still
//! has a slot to write (fewer forwarding WRITEs in flight than the ring has
//! slots: the upstream writes its slots in turn and the WRITEs complete in
//! order, so its next slot is free), and hands back the slots whose forwarding
//! completed each time it wakes (polling the outgoing connection's send CQ);
//! only with every slot in flight does it sleep on the outgoing connection for
//! a completion (arming that send CQ). One sleep per chunk, not two.

use super::{RdmaReceiver, RdmaSender};
use crate::pump::{accept_end, end_stream, receive_failed, Protection, Totals};
use crate::relay_output::RelayOutput;
use crate::{ChunkReceiver, ChunkSender, TransportError};
use rdpipe_verbs::RegionAlias;
use rdpipe_wire::Integrity;

use super::conn::Wake;
use super::receiver::Note;

/// Why the zero-copy relay cannot be used between these two connections (the
/// copying relay is used instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoForward {
    /// The two connections use different devices.
    #[error("the incoming stream arrives on {incoming}, the outgoing leaves from {outgoing}")]
    OtherDevice {
        /// The incoming connection's device.
        incoming: String,
        /// The outgoing connection's.
        outgoing: String,
    },
    /// A keyed hop (`--integrity mac` or `encrypt`, the default): the receiver
    /// verifies and writes a private copy of each chunk, never the registered
    /// slot the network can still write into (see [`super::RdmaReceiver`]), and
    /// an encrypted chunk is re-sealed under the next hop's key.
    #[error("a keyed hop (--integrity mac or encrypt) verifies a private copy of each chunk; only --integrity checksum forwards from the ring")]
    Keyed,
    /// `--compress`: each hop's receiver decompresses and its sender
    /// compresses again.
    #[error("--compress: each hop decompresses and compresses on its own")]
    Compressed,
    /// `--rate-limit`: the send loop paces.
    #[error("--rate-limit paces the outgoing stream")]
    Paced,
    /// The next ring's slots are smaller than the incoming chunks.
    #[error("the next host's slots ({outgoing} bytes) are smaller than the incoming chunks ({incoming} bytes)")]
    SmallerSlots {
        /// The incoming chunk size.
        incoming: usize,
        /// The outgoing one.
        outgoing: usize,
    },
    /// Registering the receive ring for the outgoing connection failed (locked
    /// memory, most likely).
    #[error("the receive ring cannot be registered for the outgoing connection: {0}")]
    Register(String),
}

/// The two halves, ready to forward, with the ring's alias.
pub struct Forwarder {
    rx: Box<RdmaReceiver>,
    tx: Box<RdmaSender>,
    alias: RegionAlias,
}

impl Forwarder {
    /// Checks that `rx` can forward into `tx` without copying and registers
    /// the ring for it; hands both back with the reason otherwise.
    #[allow(clippy::result_large_err)]
    pub fn new(
        rx: Box<RdmaReceiver>,
        tx: Box<RdmaSender>,
        integrity: [Integrity; 2],
        paced: bool,
        compressed: bool,
    ) -> Result<Forwarder, (Box<RdmaReceiver>, Box<RdmaSender>, NoForward)> {
        let why = if rx.conn.device != tx.conn.device {
            Some(NoForward::OtherDevice {
                incoming: rx.conn.device.clone(),
                outgoing: tx.conn.device.clone(),
            })
        } else if integrity.iter().any(|i| *i != Integrity::Checksum) {
            Some(NoForward::Keyed)
        } else if compressed {
            Some(NoForward::Compressed)
        } else if paced {
            Some(NoForward::Paced)
        } else if rx.chunk() > tx.chunk() {
            Some(NoForward::SmallerSlots {
                incoming: rx.chunk(),
                outgoing: tx.chunk(),
            })
        } else {
            None
        };
        if let Some(why) = why {
            return Err((rx, tx, why));
        }
        match tx.conn.v.pd.register_alias(&rx.conn.v.data) {
            Ok(alias) => {
                let mut tx = tx;
                tx.conn.zero_copy = true;
                Ok(Forwarder { rx, tx, alias })
            }
            Err(e) => Err((rx, tx, NoForward::Register(e.to_string()))),
        }
    }

    /// Tells both ends that the stream is abandoned.
    pub fn abort(&mut self, why: &str) {
        self.rx.abort(why);
        self.tx.abort(why);
    }

    /// The incoming and the outgoing half's `-v` descriptions.
    pub fn describe(&self) -> [String; 2] {
        [self.rx.describe(), self.tx.describe()]
    }

    /// Relays the whole stream (see the module docs): the incoming transfer's
    /// outcome and the outgoing one's. A failure downstream stops the
    /// forwarding; whether the incoming stream goes on (for the local copy) is
    /// `local`'s choice ([`RelayOutput::forward_broke`]).
    pub fn run(
        mut self,
        prot: [Protection<'_>; 2],
        local: &mut dyn RelayOutput,
        progress: [&mut dyn FnMut(u64); 2],
    ) -> [Result<Totals, TransportError>; 2] {
        let [pin, pout] = prot;
        let [progress_in, progress_out] = progress;
        let mut hin = pin.hasher();
        let mut hout = pout.hasher();
        // The outgoing transfer's failure, once it failed.
        let mut out: Option<TransportError> = None;
        // Ring slots whose forwarding WRITE is in flight.
        let mut flight: Vec<usize> = Vec::new();
        let rx = &mut *self.rx;
        let tx = &mut *self.tx;
        let mut broke_told = false;
        let incoming = loop {
            if out.is_none() && !flight.is_empty() {
                if let Err(e) = tx.poll_now() {
                    out = Some(e);
                }
            }
            let done = match &out {
                None => tx.take_forwarded(),
                // Nothing goes downstream any more: every slot is free.
                Some(_) => std::mem::take(&mut flight),
            };
            if let Err(e) = release(rx, &mut flight, &done) {
                break Err(e);
            }
            if out.is_some() && !broke_told {
                broke_told = true;
                if let Err(e) = local.forward_broke() {
                    break Err(TransportError::Output(e));
                }
            }
            let note = match rx.try_next() {
                Ok(Some(n)) => n,
                // Every upstream slot is ours, the one it writes next among
                // them (it writes them in turn, and WRITEs complete in order):
                // only a completed forwarding frees one.
                Ok(None) if out.is_none() && flight.len() >= rx.slots() => {
                    if let Err(e) = tx.step(Wake::OwnCompletion) {
                        out = Some(e);
                    }
                    continue;
                }
                Ok(None) => match rx.next() {
                    Ok(n) => n,
                    Err(e) => break Err(e),
                },
                Err(e) => break Err(e),
            };
            match note {
                Note::Data { slot, len } => {
                    let offset = rx.slot_offset(slot);
                    let data = rx.slot_mut(slot, len);
                    hin.update(data);
                    if let Err(e) = local.write_all(data) {
                        break Err(TransportError::Output(e));
                    }
                    progress_in(hin.bytes());
                    if out.is_none() {
                        hout.update(data);
                        match tx.forward(&self.alias, offset, len, slot) {
                            Ok(()) => {
                                flight.push(slot);
                                progress_out(hout.bytes());
                                continue;
                            }
                            Err(e) => out = Some(e),
                        }
                    }
                    if let Err(e) = release(rx, &mut flight, &[slot]) {
                        break Err(e);
                    }
                }
                Note::End(end) => break accept_end(rx, local, pin, &hin, &end),
            }
        };
        let bytes_in = hin.bytes();
        let incoming = incoming.map_err(|e| match e {
            // accept_end and the local part's errors are final already.
            e @ (TransportError::LengthMismatch { .. }
            | TransportError::ChecksumMismatch { .. }
            | TransportError::Tampered { .. }) => e,
            e => receive_failed(rx, bytes_in, e),
        });
        let outgoing = match (out, &incoming) {
            (Some(e), _) => Err(e),
            (None, Ok(_)) => end_stream(tx, pout, &hout),
            (None, Err(e)) => {
                tx.abort(&format!(
                    "the relay's incoming stream failed after {bytes_in} bytes: {e}"
                ));
                Err(TransportError::Input(local.unverified()))
            }
        };
        [incoming, outgoing]
    }
}

/// Hands ring slots `done` back upstream (their forwarding completed, or was
/// abandoned), dropping them from `flight`.
fn release(
    rx: &mut RdmaReceiver,
    flight: &mut Vec<usize>,
    done: &[usize],
) -> Result<(), TransportError> {
    for &slot in done {
        flight.retain(|&s| s != slot);
        rx.release(slot)?;
    }
    Ok(())
}
