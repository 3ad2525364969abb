//! Owned, safe wrappers over `rdma-sys` (libibverbs + librdmacm) for rdma-pipe.
//!
//! The libraries are loaded at run time (`dlopen`, on the first RDMA use; see
//! `dl.rs`), not linked: the binaries start on hosts without rdma-core, where
//! [`load`] and every constructor here return [`VerbsError::LibraryMissing`].
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
//! memory. The loader calls `ibv_fork_init()` once, right after opening the
//! libraries and before any other verbs call ([`fork_init`] reports its result;
//! every constructor that can lead to a registration checks it first); libibverbs
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
mod dl;
mod error;
mod mem;
mod port;
mod qp;
pub mod sysfs;

pub use cm::{CmEvent, CmEventKind, CmId, EventChannel};
pub use cq::{Completion, CompletionChannel, CompletionQueue, WcError, WcOpcode};
pub use device::{active_devices, devices, DeviceInfo, DeviceTransport};
pub use error::VerbsError;
pub use mem::{MemoryRegion, ProtectionDomain, RegionAlias};
pub use port::{
    device_details, lane_gbps, lanes, mtu_bytes, DeviceDetails, LinkLayer, PortDetails, PortState,
};
pub use qp::{QpCaps, QueuePair, RemoteBuf, Signal};

use std::io;

/// Result of [`fork_init`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkSafety {
    /// `ibv_fork_init()` succeeded: registered pages are `MADV_DONTFORK`.
    Enabled,
    /// The kernel handles fork with pinned pages itself (`IBV_FORK_UNNEEDED`).
    Unneeded,
}

/// Makes registered memory safe across `fork()`: reports what `ibv_fork_init()`
/// said. The loader runs it once per process, right after opening the libraries
/// and before handing out any other verbs function (see [`load`]), so it always
/// precedes the first registration. `EINVAL` (a registration happened before,
/// outside this crate) is reported as an error, and so are missing libraries.
pub fn fork_init() -> Result<ForkSafety, VerbsError> {
    dl::api()?
        .fork
        .map_err(|e| VerbsError::ForkInit(io::Error::from_raw_os_error(e.abs())))
}

/// Loads libibverbs and librdmacm (once per process; `dlopen`, not the link: the
/// binaries start on hosts without rdma-core). `Err(`[`VerbsError::LibraryMissing`]`)`
/// when either cannot be loaded, which means this host cannot use RDMA; its message
/// says what to install. Every other entry point of this crate loads them too.
pub fn load() -> Result<(), VerbsError> {
    dl::api().map(|_| ())
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
    fn fork_init_reaches_libibverbs() {
        // Asks libibverbs itself (not our cached answer) whether fork protection is
        // on. The libraries are installed wherever this crate builds (rdma-sys
        // needs their headers and pkg-config files); no device is needed.
        let api = dl::api().expect("libibverbs and librdmacm load on a build host");
        let ours = fork_init().expect("ibv_fork_init succeeds before any registration");
        // SAFETY: no arguments; reads libibverbs' global state.
        let theirs = unsafe { (api.ibv.ibv_is_fork_initialized)() };
        let want = match ours {
            ForkSafety::Enabled => rdma_sys::IBV_FORK_ENABLED,
            ForkSafety::Unneeded => rdma_sys::IBV_FORK_UNNEEDED,
        };
        assert_eq!(theirs, want, "we report {ours:?}, libibverbs says {theirs}");
    }
}
