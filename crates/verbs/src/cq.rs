//! Completion channels and completion queues.
//!
//! The correct way to sleep on a CQ (and the one the transport uses): arm it with
//! [`CompletionQueue::arm`], poll until empty, and when nothing useful came, wait
//! for the channel's fd; then [`CompletionChannel::take_event`] (which reads the
//! one event, acks it on the CQ it names and says which of yours that was), arm
//! that CQ again if it is still wanted, and poll until empty again. A channel
//! delivers one event per *arming*, not per completion, so a loop that expects
//! one event per completion hangs as soon as two completions land together.
//! Several CQs may share one channel (a QP's send and receive CQs): only the
//! armed ones make it readable.

use crate::cm::{wait_readable, CmId, CmIdInner};
use crate::{dl, errno, rc_errno, VerbsError};
use rdma_sys as sys;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct CcInner {
    ch: *mut sys::ibv_comp_channel,
    _id: Arc<CmIdInner>,
}

// SAFETY: libibverbs objects may be used from any thread; Rust never mutates them.
unsafe impl Send for CcInner {}
// SAFETY: see above.
unsafe impl Sync for CcInner {}

impl Drop for CcInner {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once; every CQ on it holds an Arc to us.
        unsafe {
            (dl::ibv().ibv_destroy_comp_channel)(self.ch);
        }
    }
}

/// A completion channel: a file descriptor that becomes readable when an armed CQ
/// gets a completion.
#[derive(Clone)]
pub struct CompletionChannel {
    inner: Arc<CcInner>,
}

impl CompletionChannel {
    /// Creates a completion channel on `id`'s device.
    pub fn new(id: &CmId) -> Result<Self, VerbsError> {
        let ctx = id.verbs()?;
        // SAFETY: a live context (kept alive through the id).
        let ch = unsafe { (dl::ibv().ibv_create_comp_channel)(ctx) };
        if ch.is_null() {
            return Err(VerbsError::CreateCompChannel(errno()));
        }
        Ok(CompletionChannel {
            inner: Arc::new(CcInner {
                ch,
                _id: id.inner.clone(),
            }),
        })
    }

    fn fd(&self) -> i32 {
        self.inner.fd()
    }

    /// Waits up to `timeout` (None = forever) for the channel to become
    /// readable (an armed CQ on it got a completion); returns whether it did.
    /// Does not consume the event.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool, VerbsError> {
        wait_readable(self.fd(), timeout)
    }

    /// Reads the channel's pending event (blocks if there is none: check
    /// readiness first), acks it on the CQ it names (every event must be acked
    /// before that CQ can be destroyed), and returns that CQ's index in `cqs`;
    /// `None` for a CQ of this channel not listed. The CQ is disarmed now: arm
    /// it again (then poll) to hear of its next completion.
    pub fn take_event(&self, cqs: &[&CompletionQueue]) -> Result<Option<usize>, VerbsError> {
        let cq = self.inner.take_event()?;
        Ok(cqs.iter().position(|q| ptr::eq(q.inner.cq, cq)))
    }
}

impl CcInner {
    fn fd(&self) -> i32 {
        // SAFETY: live channel; `fd` is fixed at creation.
        unsafe { (*self.ch).fd }
    }

    /// Reads one event and acks it; returns the CQ it was for (only to compare).
    fn take_event(&self) -> Result<*const sys::ibv_cq, VerbsError> {
        let mut cq: *mut sys::ibv_cq = ptr::null_mut();
        let mut ctx: *mut libc::c_void = ptr::null_mut();
        // SAFETY: live channel and valid out pointers.
        let rc = unsafe { (dl::ibv().ibv_get_cq_event)(self.ch, &mut cq, &mut ctx) };
        if rc != 0 {
            return Err(VerbsError::GetCqEvent(errno()));
        }
        // SAFETY: `cq` is the CQ the event was for, one created on this channel
        // and alive until this ack: ibv_destroy_cq discards a CQ's unread events
        // and waits until those already read are acked. Each is acked here,
        // exactly once.
        unsafe { (dl::ibv().ibv_ack_cq_events)(cq, 1) };
        Ok(cq)
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open as long as the channel, kept alive by `self`.
        unsafe { BorrowedFd::borrow_raw(self.fd()) }
    }
}

pub(crate) struct CqInner {
    pub(crate) cq: *mut sys::ibv_cq,
    ch: Arc<CcInner>,
}

// SAFETY: libibverbs CQs may be polled from any thread; Rust never mutates them.
unsafe impl Send for CqInner {}
// SAFETY: see above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once; the QPs using it hold an Arc to us,
        // and every channel event was acked as it was read (CcInner::take_event).
        unsafe {
            (dl::ibv().ibv_destroy_cq)(self.cq);
        }
    }
}

/// What a completion was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND of ours finished.
    Send,
    /// An RDMA WRITE (with or without immediate) of ours finished.
    RdmaWrite,
    /// A receive consumed a SEND from the peer.
    Recv,
    /// A receive consumed the immediate data of a peer's RDMA WRITE_WITH_IMM.
    RecvRdmaWithImm,
    /// Anything else.
    Other(u32),
}

/// Why a work request failed: the status code and libibverbs' description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WcError {
    /// The `ibv_wc_status` value.
    pub code: u32,
    /// `ibv_wc_status_str` of it.
    pub text: String,
}

impl WcError {
    /// Whether the status means the connection is gone (flushed after the QP went
    /// to the error state, retries or RNR retries exhausted) rather than a local
    /// programming error.
    pub fn connection_lost(&self) -> bool {
        use sys::ibv_wc_status::*;
        matches!(
            self.code,
            IBV_WC_WR_FLUSH_ERR | IBV_WC_RETRY_EXC_ERR | IBV_WC_RNR_RETRY_EXC_ERR
        )
    }
}

impl std::fmt::Display for WcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (status {})", self.text, self.code)
    }
}

/// One work completion, copied out of the CQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id, as posted.
    pub wr_id: u64,
    /// `None` on success, else the status code and its description.
    pub error: Option<WcError>,
    /// What it was. Only meaningful on success.
    pub opcode: WcOpcode,
    /// Bytes received (receives only).
    pub byte_len: u32,
    /// Immediate data in host byte order, when the completion carried some.
    pub imm: Option<u32>,
}

impl Completion {
    fn from_raw(wc: &sys::ibv_wc) -> Self {
        let error = if wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS {
            None
        } else {
            // SAFETY: returns a pointer to a static string for any status value.
            let s = unsafe { (dl::ibv().ibv_wc_status_str)(wc.status) };
            let text = if s.is_null() {
                format!("status {}", wc.status)
            } else {
                // SAFETY: non-null static NUL-terminated string.
                unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
            };
            Some(WcError {
                code: wc.status,
                text,
            })
        };
        use sys::ibv_wc_opcode::*;
        let opcode = match wc.opcode {
            IBV_WC_SEND => WcOpcode::Send,
            IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            IBV_WC_RECV => WcOpcode::Recv,
            IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            o => WcOpcode::Other(o),
        };
        let imm = if error.is_none() && wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            // SAFETY: with IBV_WC_WITH_IMM set, `imm_data` is the active member.
            Some(u32::from_be(unsafe {
                wc.imm_data_invalidated_rkey_union.imm_data
            }))
        } else {
            None
        };
        Completion {
            wr_id: wc.wr_id,
            error,
            opcode,
            byte_len: wc.byte_len,
            imm,
        }
    }
}

/// A completion queue bound to a completion channel.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl CompletionQueue {
    /// Creates a CQ with room for `cqe` completions (must cover every work request
    /// that can be outstanding at once on the QPs that use it).
    pub fn new(id: &CmId, channel: &CompletionChannel, cqe: u32) -> Result<Self, VerbsError> {
        let ctx = id.verbs()?;
        // SAFETY: live context and channel (both kept alive by the Arcs we store).
        let cq = unsafe {
            (dl::ibv().ibv_create_cq)(ctx, cqe.max(1) as i32, ptr::null_mut(), channel.inner.ch, 0)
        };
        if cq.is_null() {
            return Err(VerbsError::CreateCq {
                cqe,
                source: errno(),
            });
        }
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                cq,
                ch: channel.inner.clone(),
            }),
        })
    }

    /// Arms the CQ: the next completion makes the channel readable.
    pub fn arm(&self) -> Result<(), VerbsError> {
        // SAFETY: live CQ; the inline provider call only touches the CQ.
        let rc = unsafe { sys::ibv_req_notify_cq(self.inner.cq, 0) };
        rc_errno(rc).map_err(VerbsError::ReqNotifyCq)
    }

    /// Waits up to `timeout` (None = forever) for the CQ's channel to become
    /// readable; returns whether it did. Does not consume the event. (With
    /// several CQs on the channel, any armed one makes it readable.)
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool, VerbsError> {
        wait_readable(self.inner.ch.fd(), timeout)
    }

    /// Reads the channel's pending event (blocks if there is none: check readiness
    /// first) and acks it at once, on whichever CQ of the channel it names (for a
    /// CQ alone on its channel; else use [`CompletionChannel::take_event`]).
    /// Re-arm and poll after this.
    pub fn ack_event(&self) -> Result<(), VerbsError> {
        self.inner.ch.take_event().map(|_| ())
    }

    /// Moves every available completion (up to 32 per call) into `out`; returns how
    /// many were added.
    pub fn poll(&self, out: &mut Vec<Completion>) -> Result<usize, VerbsError> {
        const BATCH: usize = 32;
        // SAFETY: ibv_wc is plain old data; zero is valid.
        let mut wcs: [sys::ibv_wc; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: live CQ; `wcs` has room for BATCH entries.
        let n = unsafe { sys::ibv_poll_cq(self.inner.cq, BATCH as i32, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::PollCq(std::io::Error::from_raw_os_error(
                if n == -1 { libc::EIO } else { -n },
            )));
        }
        for wc in &wcs[..n as usize] {
            out.push(Completion::from_raw(wc));
        }
        Ok(n as usize)
    }
}
