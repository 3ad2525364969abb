//! Owned, safe wrappers over `rdma-sys` (libibverbs + librdmacm) for rdma-pipe.
//!
//! Why this crate exists: the RDMA transport needs raw verbs (rdma_cm connection
//! set-up, memory registration, completion queues, posting work requests), and all of
//! that is C with raw pointers. Every `unsafe` block of the project lives here, next
//! to a `// SAFETY:` comment; the rest of the workspace denies `unsafe_code`.
//!
//! Design, in the style of rust-ibverbs:
//! - one private owner struct per C handle with a `Drop` that releases it: event
//!   channel, cm id, protection domain, memory region, completion channel, completion
//!   queue, queue pair;
//! - children hold an `Arc` to their parents (an MR holds its PD, a QP holds its cm
//!   id, PD and CQ, a CQ holds its completion channel...), so a parent can never be
//!   released before its children: teardown order is right by construction;
//! - rdma_cm events are acked on every path by an RAII guard, after their contents
//!   (private data, a new connection's id) were copied out;
//! - a queue pair keeps every memory region it ever posted work on alive until the
//!   QP itself is destroyed, so the NIC can never touch freed memory.
//!
//! Fork safety: rdma-pipe spawns shell commands from processes that hold registered
//! memory. [`fork_init`] calls `ibv_fork_init()` once, before the first registration
//! (every constructor that can lead to a registration calls it first); libibverbs
//! then marks registered pages `MADV_DONTFORK`, so a child never shares (and never
//! copy-on-write breaks) pages the NIC is using. `MADV_DONTFORK` works on whole
//! pages, so [`MemoryRegion`] buffers are separate page-aligned allocations that
//! share no page with other data. Kernels that are fork-safe by themselves make
//! libibverbs report `IBV_FORK_UNNEEDED`; that is accepted as success.
#![allow(unsafe_code)]
#![deny(missing_docs)]

mod cm;
mod cq;
mod device;
mod error;
mod mem;
mod qp;

pub use cm::{CmEvent, CmEventKind, CmId, EventChannel};
pub use cq::{Completion, CompletionChannel, CompletionQueue, WcError, WcOpcode};
pub use device::{active_devices, devices, DeviceInfo, DeviceTransport};
pub use error::VerbsError;
pub use mem::{MemoryRegion, ProtectionDomain};
pub use qp::{QpCaps, QueuePair, RemoteBuf};

use std::io;
use std::sync::OnceLock;

/// Result of [`fork_init`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkSafety {
    /// `ibv_fork_init()` succeeded: registered pages are `MADV_DONTFORK`.
    Enabled,
    /// The kernel handles fork with pinned pages itself (`IBV_FORK_UNNEEDED`).
    Unneeded,
}

static FORK: OnceLock<Result<ForkSafety, i32>> = OnceLock::new();

/// Makes registered memory safe across `fork()`: calls `ibv_fork_init()` once per
/// process. It must run before any memory registration; every path of this crate
/// that registers memory calls it first. `EINVAL` (a registration happened before,
/// outside this crate) is reported as an error.
pub fn fork_init() -> Result<ForkSafety, VerbsError> {
    let r = FORK.get_or_init(|| {
        // SAFETY: both functions take no arguments and only touch libibverbs'
        // global state, which they guard themselves.
        let status = unsafe { rdma_sys::ibv_is_fork_initialized() };
        if status == rdma_sys::IBV_FORK_UNNEEDED {
            return Ok(ForkSafety::Unneeded);
        }
        // SAFETY: as above.
        let rc = unsafe { rdma_sys::ibv_fork_init() };
        match rc {
            0 => Ok(ForkSafety::Enabled),
            e => Err(e),
        }
    });
    r.map_err(|e| VerbsError::ForkInit(io::Error::from_raw_os_error(e.abs())))
}

/// The calling thread's `errno` as an [`io::Error`].
pub(crate) fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// Turns a verbs return value that *is* an errno (ibv_post_send and friends) into a
/// result.
pub(crate) fn rc_errno(rc: i32) -> Result<(), io::Error> {
    if rc == 0 {
        Ok(())
    } else if rc < 0 {
        // Some providers return -errno, some -1 with errno set.
        if rc == -1 {
            Err(errno())
        } else {
            Err(io::Error::from_raw_os_error(-rc))
        }
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Turns an rdma_cm return value (0, or -1 with errno) into a result.
pub(crate) fn rc_minus_one(rc: i32) -> Result<(), io::Error> {
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        assert!(rc_errno(0).is_ok());
        assert_eq!(rc_errno(12).unwrap_err().raw_os_error(), Some(12));
        assert_eq!(rc_errno(-22).unwrap_err().raw_os_error(), Some(22));
    }

    #[test]
    fn fork_init_is_idempotent() {
        // No device is needed; the answer must be stable across calls.
        let a = fork_init().map_err(|e| e.to_string());
        let b = fork_init().map_err(|e| e.to_string());
        assert_eq!(a, b);
    }
}
