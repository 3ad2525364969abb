//! The error type: one variant per C call that can fail, each wrapping the errno it
//! reported, so a message names exactly which step of the RDMA set-up broke, plus
//! one for a host whose RDMA libraries cannot be loaded.

use std::io;
use std::net::SocketAddr;

/// A failed libibverbs or librdmacm call.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// libibverbs or librdmacm cannot be loaded at run time (rdma-core is not
    /// installed, or too old): this host cannot use RDMA at all.
    #[error(
        "RDMA is unavailable on this host: cannot load {lib} ({reason}); \
         install rdma-core (libibverbs, librdmacm)"
    )]
    LibraryMissing {
        /// The library's soname (`libibverbs.so.1`, `librdmacm.so.1`).
        lib: &'static str,
        /// The dynamic loader's message.
        reason: String,
    },
    /// `ibv_fork_init` failed (EINVAL: memory was registered before it ran).
    #[error("ibv_fork_init failed: {0}")]
    ForkInit(#[source] io::Error),
    /// `ibv_get_device_list` failed (no RDMA support in the kernel, typically).
    #[error("ibv_get_device_list failed: {0}")]
    GetDeviceList(#[source] io::Error),
    /// `ibv_open_device` failed.
    #[error("ibv_open_device({device}) failed: {source}")]
    OpenDevice {
        /// The device's name.
        device: String,
        /// errno.
        source: io::Error,
    },
    /// `ibv_query_device` failed.
    #[error("ibv_query_device({device}) failed: {source}")]
    QueryDevice {
        /// The device's name.
        device: String,
        /// errno.
        source: io::Error,
    },
    /// `ibv_query_port` failed.
    #[error("ibv_query_port({device}, {port}) failed: {source}")]
    QueryPort {
        /// The device's name.
        device: String,
        /// The port number.
        port: u8,
        /// errno.
        source: io::Error,
    },
    /// `rdma_create_event_channel` failed (no rdma_ucm, typically).
    #[error("rdma_create_event_channel failed: {0}")]
    CreateEventChannel(#[source] io::Error),
    /// `rdma_create_id` failed.
    #[error("rdma_create_id failed: {0}")]
    CreateId(#[source] io::Error),
    /// `rdma_bind_addr` failed (no RDMA device has that address, typically).
    #[error("rdma_bind_addr({addr}) failed: {source}")]
    BindAddr {
        /// The address.
        addr: SocketAddr,
        /// errno.
        source: io::Error,
    },
    /// `rdma_listen` failed.
    #[error("rdma_listen failed: {0}")]
    Listen(#[source] io::Error),
    /// `rdma_resolve_addr` failed.
    #[error("rdma_resolve_addr({addr}) failed: {source}")]
    ResolveAddr {
        /// The destination.
        addr: SocketAddr,
        /// errno.
        source: io::Error,
    },
    /// `rdma_resolve_route` failed.
    #[error("rdma_resolve_route failed: {0}")]
    ResolveRoute(#[source] io::Error),
    /// `rdma_connect` failed.
    #[error("rdma_connect failed: {0}")]
    Connect(#[source] io::Error),
    /// `rdma_accept` failed.
    #[error("rdma_accept failed: {0}")]
    Accept(#[source] io::Error),
    /// `rdma_reject` failed.
    #[error("rdma_reject failed: {0}")]
    Reject(#[source] io::Error),
    /// `rdma_disconnect` failed.
    #[error("rdma_disconnect failed: {0}")]
    Disconnect(#[source] io::Error),
    /// `rdma_get_cm_event` failed.
    #[error("rdma_get_cm_event failed: {0}")]
    GetCmEvent(#[source] io::Error),
    /// `poll` on an event or completion channel failed.
    #[error("poll on an RDMA channel failed: {0}")]
    Poll(#[source] io::Error),
    /// The cm id is not bound to a device yet (no address resolved or bound).
    #[error("the rdma_cm id is not bound to an RDMA device")]
    NoDevice,
    /// `ibv_alloc_pd` failed.
    #[error("ibv_alloc_pd failed: {0}")]
    AllocPd(#[source] io::Error),
    /// Allocating the page-aligned buffer to register failed.
    #[error("cannot allocate {len} bytes of page-aligned memory")]
    Alloc {
        /// Bytes asked for.
        len: usize,
    },
    /// `ibv_reg_mr` failed; ENOMEM/EPERM/EAGAIN mean the locked-memory limit.
    #[error("ibv_reg_mr({len} bytes) failed: {source}")]
    RegMr {
        /// Bytes asked for.
        len: usize,
        /// errno.
        source: io::Error,
    },
    /// `ibv_create_comp_channel` failed.
    #[error("ibv_create_comp_channel failed: {0}")]
    CreateCompChannel(#[source] io::Error),
    /// `ibv_create_cq` failed.
    #[error("ibv_create_cq({cqe} entries) failed: {source}")]
    CreateCq {
        /// Entries asked for.
        cqe: u32,
        /// errno.
        source: io::Error,
    },
    /// `ibv_req_notify_cq` failed.
    #[error("ibv_req_notify_cq failed: {0}")]
    ReqNotifyCq(#[source] io::Error),
    /// `ibv_get_cq_event` failed.
    #[error("ibv_get_cq_event failed: {0}")]
    GetCqEvent(#[source] io::Error),
    /// `ibv_poll_cq` failed.
    #[error("ibv_poll_cq failed: {0}")]
    PollCq(#[source] io::Error),
    /// `rdma_set_option` failed.
    #[error("rdma_set_option failed: {0}")]
    SetOption(#[source] io::Error),
    /// `rdma_create_qp` failed.
    #[error("rdma_create_qp failed: {0}")]
    CreateQp(#[source] io::Error),
    /// `ibv_post_send` failed.
    #[error("ibv_post_send failed: {0}")]
    PostSend(#[source] io::Error),
    /// `ibv_post_recv` failed.
    #[error("ibv_post_recv failed: {0}")]
    PostRecv(#[source] io::Error),
    /// A work request named bytes outside its memory region.
    #[error("range {start}..{end} is outside a {len}-byte memory region")]
    OutOfRange {
        /// Start of the range.
        start: usize,
        /// End of the range.
        end: usize,
        /// The region's length.
        len: usize,
    },
    /// A memory region of another protection domain was posted on this QP.
    #[error("memory region belongs to another protection domain")]
    ForeignRegion,
}

impl VerbsError {
    /// True when memory registration failed for lack of lockable memory
    /// (`RLIMIT_MEMLOCK`): the kernel says ENOMEM, EPERM or EAGAIN.
    pub fn is_memlock(&self) -> bool {
        match self {
            VerbsError::RegMr { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN)
            ),
            _ => false,
        }
    }

    /// The errno behind this error, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        std::error::Error::source(self)
            .and_then(|s| s.downcast_ref::<io::Error>())
            .and_then(io::Error::raw_os_error)
    }
}
