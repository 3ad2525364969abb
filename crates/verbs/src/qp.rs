//! Queue pairs and posting work requests.
//!
//! The raw posting functions are `unsafe fn`: the caller must keep the memory a
//! work request names alive and registered until the request completes or the QP is
//! destroyed. The public, safe methods discharge that obligation themselves: they
//! bounds-check the range against a [`MemoryRegion`] of this QP's protection domain
//! and keep that region alive (an `Arc` in the QP) until the QP is destroyed, which
//! stops all DMA. Queue depths are always explicit ([`QpCaps`]): Soft-RoCE rejects
//! zero-sized queues that some hardware silently rounds up.

use crate::cm::{CmId, CmIdInner};
use crate::cq::{CompletionQueue, CqInner};
use crate::mem::{MemoryRegion, MrInner, PdInner, ProtectionDomain, RegionAlias};
use crate::{dl, rc_errno, VerbsError};
use rdma_sys as sys;
use std::ops::Range;
use std::ptr;
use std::sync::{Arc, Mutex};

/// Queue sizes of a QP. All must be non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth (SENDs and WRITEs outstanding at once).
    pub max_send_wr: u32,
    /// Receive queue depth (receives posted at once).
    pub max_recv_wr: u32,
}

/// Where an RDMA WRITE goes on the peer: an address inside its registered region
/// and that region's rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Virtual address on the peer.
    pub addr: u64,
    /// The peer's rkey.
    pub rkey: u32,
}

/// A reliable-connected queue pair created on a cm id.
pub struct QueuePair {
    id: Arc<CmIdInner>,
    pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    qp: *mut sys::ibv_qp,
    /// Every region a work request ever named: kept alive until the QP is gone.
    used: Mutex<Vec<Arc<MrInner>>>,
}

// SAFETY: libibverbs QPs may be posted to from any thread (the provider locks);
// Rust-side state is behind a Mutex.
unsafe impl Send for QueuePair {}
// SAFETY: see above.
unsafe impl Sync for QueuePair {}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: the QP was created by rdma_create_qp on this id and is destroyed
        // once; after this no DMA touches the regions in `used`, which are released
        // afterwards (fields drop after this body), then the CQs, PD and id.
        unsafe { (dl::cm().rdma_destroy_qp)(self.id.id) }
    }
}

/// Whether a send-queue request reports its successful completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A work completion when it is done (`IBV_SEND_SIGNALED`).
    Completion,
    /// None unless it fails (the QP's `sq_sig_all` is 0).
    Quiet,
}

impl QueuePair {
    /// Creates an RC QP on `id` (bound or resolved; for a listener's connect request
    /// use the new id) using `cq` for both queues. Every queue is sized explicitly.
    pub fn new(
        id: &CmId,
        pd: &ProtectionDomain,
        cq: &CompletionQueue,
        caps: QpCaps,
    ) -> Result<Self, VerbsError> {
        Self::with_cqs(id, pd, cq, cq, caps)
    }

    /// Like [`QueuePair::new`], with the completions of the send queue (our
    /// SENDs and WRITEs) on `send_cq` and those of the receive queue (the
    /// peer's SENDs and WRITE_WITH_IMMs arriving) on `recv_cq`: each can be
    /// armed on its own, so a side that only waits for arrivals is not woken by
    /// its own requests completing. (Each CQ must have room for every
    /// completion its queue can have outstanding.)
    pub fn with_cqs(
        id: &CmId,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
    ) -> Result<Self, VerbsError> {
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.inner.cq,
            recv_cq: recv_cq.inner.cq,
            srq: ptr::null_mut(),
            cap: sys::ibv_qp_cap {
                max_send_wr: caps.max_send_wr.max(1),
                max_recv_wr: caps.max_recv_wr.max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: sys::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: live id, PD and CQs (all kept alive by the Arcs stored below);
        // `attr` is fully initialised.
        let rc = unsafe { (dl::cm().rdma_create_qp)(id.raw(), pd.inner.pd, &mut attr) };
        crate::rc_minus_one(rc).map_err(VerbsError::CreateQp)?;
        // SAFETY: rdma_create_qp succeeded, so the id's qp field is set.
        let qp = unsafe { (*id.raw()).qp };
        Ok(QueuePair {
            id: id.inner.clone(),
            pd: pd.inner.clone(),
            _send_cq: send_cq.inner.clone(),
            _recv_cq: recv_cq.inner.clone(),
            qp,
            used: Mutex::new(Vec::new()),
        })
    }

    /// Checks `range` against `mr`, pins `mr` to this QP's lifetime, and returns
    /// the scatter/gather entry.
    fn sge(&self, mr: &MemoryRegion, range: &Range<usize>) -> Result<sys::ibv_sge, VerbsError> {
        self.sge_of(&mr.inner, range)
    }

    fn sge_of(&self, mr: &Arc<MrInner>, range: &Range<usize>) -> Result<sys::ibv_sge, VerbsError> {
        if range.start > range.end || range.end > mr.len || range.len() > u32::MAX as usize {
            return Err(VerbsError::OutOfRange {
                start: range.start,
                end: range.end,
                len: mr.len,
            });
        }
        if !Arc::ptr_eq(&mr.pd, &self.pd) {
            return Err(VerbsError::ForeignRegion);
        }
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if !used.iter().any(|u| Arc::ptr_eq(u, mr)) {
            used.push(mr.clone());
        }
        // SAFETY: the MR is live while `mr` (an Arc to it) is.
        let lkey = unsafe { (*mr.mr).lkey };
        Ok(sys::ibv_sge {
            addr: mr.base() as u64 + range.start as u64,
            length: range.len() as u32,
            lkey,
        })
    }

    /// Posts one receive whose data (if it is a SEND) lands in `mr[range]`.
    pub fn post_recv(
        &self,
        wr_id: u64,
        mr: &MemoryRegion,
        range: Range<usize>,
    ) -> Result<(), VerbsError> {
        let mut sge = self.sge(mr, &range)?;
        // SAFETY: `sge` names live registered memory that `self.used` keeps alive
        // until the QP is destroyed.
        unsafe { self.post_recv_raw(wr_id, &mut sge) }
    }

    /// Posts a SEND of `mr[range]`: signaled (it completes with a work
    /// completion) or not. An unsignaled SEND completes silently, known done only
    /// when a later signaled request of this QP completes (an RC send queue
    /// completes in order); a failed one still reports its error.
    pub fn post_send(
        &self,
        wr_id: u64,
        mr: &MemoryRegion,
        range: Range<usize>,
        signal: Signal,
    ) -> Result<(), VerbsError> {
        let mut sge = self.sge(mr, &range)?;
        let op = sys::ibv_wr_opcode::IBV_WR_SEND;
        // SAFETY: as in post_recv.
        unsafe { self.post_send_raw(wr_id, &mut sge, op, None, None, signal) }
    }

    /// Posts a signaled RDMA WRITE of `mr[range]` to `remote`, with immediate data
    /// (WRITE_WITH_IMM, which consumes a receive on the peer) when `imm` is given.
    pub fn post_write(
        &self,
        wr_id: u64,
        mr: &MemoryRegion,
        range: Range<usize>,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<(), VerbsError> {
        let mut sge = self.sge(mr, &range)?;
        let op = if imm.is_some() {
            sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
        } else {
            sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE
        };
        // SAFETY: as in post_recv; the remote side is protected by its rkey.
        unsafe { self.post_send_raw(wr_id, &mut sge, op, Some(remote), imm, Signal::Completion) }
    }

    /// Like [`QueuePair::post_write`], from another region's memory registered in
    /// this QP's PD ([`RegionAlias`]).
    pub fn post_write_alias(
        &self,
        wr_id: u64,
        mr: &RegionAlias,
        range: Range<usize>,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<(), VerbsError> {
        let mut sge = self.sge_of(&mr.inner, &range)?;
        let op = if imm.is_some() {
            sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
        } else {
            sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE
        };
        // SAFETY: as in post_recv (the alias keeps the original's buffer alive);
        // the remote side is protected by its rkey.
        unsafe { self.post_send_raw(wr_id, &mut sge, op, Some(remote), imm, Signal::Completion) }
    }

    /// Posts one receive WR with one SGE.
    ///
    /// # Safety
    /// `sge` must name memory registered in this QP's PD that stays alive and
    /// registered until the receive completes or the QP is destroyed.
    unsafe fn post_recv_raw(&self, wr_id: u64, sge: &mut sys::ibv_sge) -> Result<(), VerbsError> {
        let mut wr = sys::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: sge,
            num_sge: if sge.length == 0 { 0 } else { 1 },
        };
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: live QP; `wr` and `sge` are valid for the call (the provider
        // copies them); the memory obligation is the caller's.
        let rc = unsafe { sys::ibv_post_recv(self.qp, &mut wr, &mut bad) };
        rc_errno(rc).map_err(VerbsError::PostRecv)
    }

    /// Posts one send-queue WR (SEND, WRITE or WRITE_WITH_IMM).
    ///
    /// # Safety
    /// `sge` must name memory registered in this QP's PD that stays alive, and is
    /// not expected to keep a stable value unless left alone, until the request
    /// completes or the QP is destroyed.
    unsafe fn post_send_raw(
        &self,
        wr_id: u64,
        sge: &mut sys::ibv_sge,
        opcode: sys::ibv_wr_opcode::Type,
        remote: Option<RemoteBuf>,
        imm: Option<u32>,
        signal: Signal,
    ) -> Result<(), VerbsError> {
        // SAFETY: ibv_send_wr is plain old data (pointers, integers and unions of
        // those); all-zero is a valid "nothing set" value.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.next = ptr::null_mut();
        wr.sg_list = sge;
        wr.num_sge = if sge.length == 0 { 0 } else { 1 };
        wr.opcode = opcode;
        wr.send_flags = match signal {
            Signal::Completion => sys::ibv_send_flags::IBV_SEND_SIGNALED.0,
            Signal::Quiet => 0,
        };
        if let Some(imm) = imm {
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        if let Some(r) = remote {
            wr.wr.rdma = sys::rdma_t {
                remote_addr: r.addr,
                rkey: r.rkey,
            };
        }
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; `wr` and `sge` are valid for the call (the provider
        // copies them); the memory obligation is the caller's.
        let rc = unsafe { sys::ibv_post_send(self.qp, &mut wr, &mut bad) };
        rc_errno(rc).map_err(VerbsError::PostSend)
    }
}
