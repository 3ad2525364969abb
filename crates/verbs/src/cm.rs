//! rdma_cm: the event channel and connection identifiers.
//!
//! rdma_cm resolves IP addresses and routes and exchanges the connection handshake
//! for every RDMA fabric (InfiniBand, RoCE v1/v2, iWARP), which is why the transport
//! uses it instead of exchanging QP numbers by hand. Events are read with a timeout
//! (the channel's fd is polled first) and acked by an RAII guard as soon as their
//! contents are copied, so a forgotten ack can never block `rdma_destroy_id`.

use crate::device::{device_name, DeviceTransport};
use crate::{dl, errno, rc_minus_one, VerbsError};
use rdma_sys as sys;
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct EcInner {
    ch: *mut sys::rdma_event_channel,
}

// SAFETY: librdmacm's event channel is a file descriptor plus a heap struct that is
// only read (the fd) after creation; rdma_get_cm_event may be called from any thread.
unsafe impl Send for EcInner {}
// SAFETY: see above; no interior mutation from Rust.
unsafe impl Sync for EcInner {}

impl Drop for EcInner {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel; every cm id created on it
        // holds an Arc to this struct, so all of them are destroyed already.
        unsafe { (dl::cm().rdma_destroy_event_channel)(self.ch) }
    }
}

/// An rdma_cm event channel: where connection events of its ids arrive.
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<EcInner>,
}

/// What happened, from an rdma_cm event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    /// `rdma_resolve_addr` finished.
    AddrResolved,
    /// Address resolution failed.
    AddrError,
    /// `rdma_resolve_route` finished.
    RouteResolved,
    /// Route resolution failed.
    RouteError,
    /// A peer asks to connect to a listener; carries a new id.
    ConnectRequest,
    /// Connection response (only without a QP; unused here).
    ConnectResponse,
    /// Establishing the connection failed.
    ConnectError,
    /// The peer did not answer.
    Unreachable,
    /// The peer rejected the connection.
    Rejected,
    /// The connection is up.
    Established,
    /// The peer (or we) disconnected.
    Disconnected,
    /// The device went away.
    DeviceRemoval,
    /// The QP left time-wait.
    TimewaitExit,
    /// Any other event type.
    Other(u32),
}

impl CmEventKind {
    fn from_raw(t: sys::rdma_cm_event_type::Type) -> Self {
        use sys::rdma_cm_event_type::*;
        match t {
            RDMA_CM_EVENT_ADDR_RESOLVED => Self::AddrResolved,
            RDMA_CM_EVENT_ADDR_ERROR => Self::AddrError,
            RDMA_CM_EVENT_ROUTE_RESOLVED => Self::RouteResolved,
            RDMA_CM_EVENT_ROUTE_ERROR => Self::RouteError,
            RDMA_CM_EVENT_CONNECT_REQUEST => Self::ConnectRequest,
            RDMA_CM_EVENT_CONNECT_RESPONSE => Self::ConnectResponse,
            RDMA_CM_EVENT_CONNECT_ERROR => Self::ConnectError,
            RDMA_CM_EVENT_UNREACHABLE => Self::Unreachable,
            RDMA_CM_EVENT_REJECTED => Self::Rejected,
            RDMA_CM_EVENT_ESTABLISHED => Self::Established,
            RDMA_CM_EVENT_DISCONNECTED => Self::Disconnected,
            RDMA_CM_EVENT_DEVICE_REMOVAL => Self::DeviceRemoval,
            RDMA_CM_EVENT_TIMEWAIT_EXIT => Self::TimewaitExit,
            other => Self::Other(other),
        }
    }
}

/// One rdma_cm event, copied out of librdmacm's buffer (which was acked already).
#[derive(Debug)]
pub struct CmEvent {
    /// What happened.
    pub kind: CmEventKind,
    /// The event's status (a negative errno for errors, the reject reason for
    /// `Rejected`).
    pub status: i32,
    /// The peer's private data (connect request, accept), possibly padded.
    pub private_data: Vec<u8>,
    id: usize,
    new_id: Option<CmId>,
}

impl CmEvent {
    /// Whether this event concerns `id`.
    pub fn is_for(&self, id: &CmId) -> bool {
        self.id == id.inner.id as usize
    }

    /// For a `ConnectRequest`: the id of the new connection (owned by the caller
    /// from now on; dropping it destroys it, which is how a rejected request ends).
    pub fn take_new_id(&mut self) -> Option<CmId> {
        self.new_id.take()
    }
}

/// Acks an rdma_cm event when dropped.
struct EventGuard(*mut sys::rdma_cm_event);

impl Drop for EventGuard {
    fn drop(&mut self) {
        // SAFETY: the event came from rdma_get_cm_event and is acked exactly once;
        // nothing refers to its memory after this.
        unsafe {
            (dl::cm().rdma_ack_cm_event)(self.0);
        }
    }
}

/// Waits until `fd` is readable or `timeout` passes (None = forever). Returns
/// whether it is readable.
pub(crate) fn wait_readable(fd: i32, timeout: Option<Duration>) -> Result<bool, VerbsError> {
    let ms = match timeout {
        None => -1,
        Some(t) => t.as_millis().min(i32::MAX as u128) as i32,
    };
    loop {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd on the stack.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = errno();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(VerbsError::Poll(e));
        }
        return Ok(rc > 0);
    }
}

impl EventChannel {
    /// Creates an event channel.
    pub fn new() -> Result<Self, VerbsError> {
        // Loads the libraries (ibv_fork_init runs first: see crate::fork_init).
        crate::fork_init()?;
        // SAFETY: no arguments; the result is owned by EcInner.
        let ch = unsafe { (dl::cm().rdma_create_event_channel)() };
        if ch.is_null() {
            return Err(VerbsError::CreateEventChannel(errno()));
        }
        Ok(EventChannel {
            inner: Arc::new(EcInner { ch }),
        })
    }

    fn fd(&self) -> i32 {
        // SAFETY: `ch` is live while `self` is; `fd` is set at creation.
        unsafe { (*self.inner.ch).fd }
    }

    /// Creates a cm id for reliable connections (`RDMA_PS_TCP`) on this channel.
    pub fn create_id(&self) -> Result<CmId, VerbsError> {
        let mut id: *mut sys::rdma_cm_id = ptr::null_mut();
        // SAFETY: valid channel and out pointer; the id is owned by CmIdInner.
        let rc = unsafe {
            (dl::cm().rdma_create_id)(
                self.inner.ch,
                &mut id,
                ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        rc_minus_one(rc).map_err(VerbsError::CreateId)?;
        Ok(CmId {
            inner: Arc::new(CmIdInner {
                id,
                _ch: self.inner.clone(),
            }),
        })
    }

    /// Waits for the next event, at most `timeout` (None = forever); `Ok(None)` when
    /// the time ran out.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<CmEvent>, VerbsError> {
        if !wait_readable(self.fd(), timeout)? {
            return Ok(None);
        }
        let mut ev: *mut sys::rdma_cm_event = ptr::null_mut();
        // SAFETY: valid channel and out pointer; the fd is readable, so this does
        // not block; the event is acked by the guard below.
        let rc = unsafe { (dl::cm().rdma_get_cm_event)(self.inner.ch, &mut ev) };
        rc_minus_one(rc).map_err(VerbsError::GetCmEvent)?;
        let guard = EventGuard(ev);
        // SAFETY: `ev` is a valid event until acked (the guard is still alive).
        let e = unsafe { &*guard.0 };
        let kind = CmEventKind::from_raw(e.event);
        let private_data = match kind {
            CmEventKind::ConnectRequest
            | CmEventKind::Established
            | CmEventKind::Rejected
            | CmEventKind::ConnectResponse => {
                // SAFETY: for these events on RDMA_PS_TCP ids, `param.conn` is the
                // active union member; the private data (if any) is valid for its
                // length until the event is acked, and is copied now.
                unsafe {
                    let c = &e.param.conn;
                    if c.private_data.is_null() || c.private_data_len == 0 {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(
                            c.private_data as *const u8,
                            c.private_data_len as usize,
                        )
                        .to_vec()
                    }
                }
            }
            _ => Vec::new(),
        };
        let id = e.id;
        let status = e.status;
        // Ack before anything could destroy the new id (rdma_destroy_id waits for
        // all events of the id to be acked).
        drop(guard);
        let new_id = (kind == CmEventKind::ConnectRequest).then(|| CmId {
            inner: Arc::new(CmIdInner {
                id,
                _ch: self.inner.clone(),
            }),
        });
        Ok(Some(CmEvent {
            kind,
            status,
            private_data,
            id: id as usize,
            new_id,
        }))
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open as long as the channel, which `self` keeps alive
        // for the borrow's lifetime.
        unsafe { BorrowedFd::borrow_raw(self.fd()) }
    }
}

pub(crate) struct CmIdInner {
    pub(crate) id: *mut sys::rdma_cm_id,
    _ch: Arc<EcInner>,
}

// SAFETY: librdmacm calls on one id are safe from any thread; Rust code never
// mutates the struct behind the pointer.
unsafe impl Send for CmIdInner {}
// SAFETY: see above.
unsafe impl Sync for CmIdInner {}

impl Drop for CmIdInner {
    fn drop(&mut self) {
        // SAFETY: the id is destroyed once; its QP (which holds an Arc to us) is
        // destroyed already, and every event of it was acked in get_event.
        unsafe {
            (dl::cm().rdma_destroy_id)(self.id);
        }
    }
}

/// An rdma_cm identifier: a listener, or one end of a connection.
#[derive(Clone)]
pub struct CmId {
    pub(crate) inner: Arc<CmIdInner>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("id", &self.inner.id)
            .field("device", &self.device_name())
            .finish()
    }
}

/// A socket address in the C layout, with its length.
fn to_sockaddr(addr: std::net::SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let addr = std::net::SocketAddr::new(addr.ip().to_canonical(), addr.port());
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage, which is suitably aligned.
            unsafe { ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage, which is suitably aligned.
            unsafe { ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
        }
    }
    ss
}

/// `rdma_set_option` level and name (rdma/rdma_cma.h; not in rdma-sys's
/// bindings).
const RDMA_OPTION_ID: libc::c_int = 0;
const RDMA_OPTION_ID_ACK_TIMEOUT: libc::c_int = 3;

/// The QP's local ACK timeout, as the exponent of 4.096 us: 16 = 0.27 s per
/// try (the CM's default on RoCE is the path lifetime plus one, about a
/// second). With `retry_count` 6, a peer that acknowledges nothing for ~2 s
/// fails the QP (`IBV_WC_RETRY_EXC_ERR`), and the hop reconnects.
pub const ACK_TIMEOUT: u8 = 16;

fn conn_param(private: &[u8]) -> sys::rdma_conn_param {
    sys::rdma_conn_param {
        private_data: if private.is_empty() {
            ptr::null()
        } else {
            private.as_ptr().cast()
        },
        private_data_len: private.len().min(u8::MAX as usize) as u8,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 1,
        // 6, not 7: Soft-RoCE (rxe) takes 7 to mean "retry forever", so a
        // path that silently drops packets would never fail the queue pair;
        // hardware takes it as 7 tries. With [`ACK_TIMEOUT`] a path that
        // answers nothing fails the QP after about 7 x 0.27 s.
        retry_count: 6,
        // 7 = retry forever on "receiver not ready": a receive is always posted
        // before the peer may send, so RNR only means "a moment late".
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    }
}

impl CmId {
    pub(crate) fn raw(&self) -> *mut sys::rdma_cm_id {
        self.inner.id
    }

    /// The device context this id is bound to, if any.
    pub(crate) fn verbs(&self) -> Result<*mut sys::ibv_context, VerbsError> {
        // SAFETY: the id is live; `verbs` is set by librdmacm on bind/resolve.
        let v = unsafe { (*self.inner.id).verbs };
        if v.is_null() {
            Err(VerbsError::NoDevice)
        } else {
            Ok(v)
        }
    }

    /// Binds to a local address (port 0 = ephemeral). Fails when no RDMA device
    /// has that address.
    pub fn bind(&self, addr: std::net::SocketAddr) -> Result<(), VerbsError> {
        let mut ss = to_sockaddr(addr);
        // SAFETY: valid id and a sockaddr of the right family in a buffer large
        // enough for any family.
        let rc = unsafe {
            (dl::cm().rdma_bind_addr)(self.raw(), &mut ss as *mut _ as *mut libc::sockaddr)
        };
        rc_minus_one(rc).map_err(|source| VerbsError::BindAddr { addr, source })
    }

    /// Starts listening for connect requests.
    pub fn listen(&self, backlog: i32) -> Result<(), VerbsError> {
        // SAFETY: valid, bound id.
        let rc = unsafe { (dl::cm().rdma_listen)(self.raw(), backlog) };
        rc_minus_one(rc).map_err(VerbsError::Listen)
    }

    /// The local port (after bind or resolve).
    pub fn local_port(&self) -> u16 {
        // SAFETY: valid id; returns the port in network byte order.
        u16::from_be(unsafe { (dl::cm().rdma_get_src_port)(self.raw()) })
    }

    /// Starts resolving `dst` (from `src`, when given); completes with an
    /// `AddrResolved` or `AddrError` event.
    pub fn resolve_addr(
        &self,
        src: Option<std::net::SocketAddr>,
        dst: std::net::SocketAddr,
        timeout: Duration,
    ) -> Result<(), VerbsError> {
        let mut s = src.map(to_sockaddr);
        let mut d = to_sockaddr(dst);
        let sp = match s.as_mut() {
            Some(s) => s as *mut _ as *mut libc::sockaddr,
            None => ptr::null_mut(),
        };
        // SAFETY: valid id; the sockaddrs live on our stack for the call (librdmacm
        // copies them).
        let rc = unsafe {
            (dl::cm().rdma_resolve_addr)(
                self.raw(),
                sp,
                &mut d as *mut _ as *mut libc::sockaddr,
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        };
        rc_minus_one(rc).map_err(|source| VerbsError::ResolveAddr { addr: dst, source })
    }

    /// Starts resolving the route; completes with `RouteResolved` or `RouteError`.
    pub fn resolve_route(&self, timeout: Duration) -> Result<(), VerbsError> {
        // SAFETY: valid id with a resolved address.
        let rc = unsafe {
            (dl::cm().rdma_resolve_route)(
                self.raw(),
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        };
        rc_minus_one(rc).map_err(VerbsError::ResolveRoute)
    }

    /// The name of the device this id is bound to (`rxe0`), if bound.
    pub fn device_name(&self) -> Option<String> {
        let v = self.verbs().ok()?;
        // SAFETY: a bound id's context is live and has a device.
        Some(device_name(unsafe { (*v).device }))
    }

    /// The transport family of the bound device.
    pub fn device_transport(&self) -> Option<DeviceTransport> {
        let v = self.verbs().ok()?;
        // SAFETY: as in device_name.
        Some(DeviceTransport::from_raw(unsafe {
            (*(*v).device).transport_type
        }))
    }

    /// Whether both ids are bound to the same device context (so a PD of one can be
    /// used with the other).
    pub fn same_device(&self, other: &CmId) -> bool {
        matches!((self.verbs(), other.verbs()), (Ok(a), Ok(b)) if a == b)
    }

    /// Sets the local ACK timeout of this id's QP ([`ACK_TIMEOUT`]), before
    /// the QP is created. Kernels older than 4.17 lack the option (an
    /// error the caller may ignore: the path's lifetime then decides).
    pub fn set_ack_timeout(&self) -> Result<(), VerbsError> {
        let mut t: u8 = ACK_TIMEOUT;
        // SAFETY: valid id; `t` outlives the call, which copies the one byte.
        let rc = unsafe {
            (dl::cm().rdma_set_option)(
                self.raw(),
                RDMA_OPTION_ID,
                RDMA_OPTION_ID_ACK_TIMEOUT,
                (&mut t as *mut u8).cast(),
                1,
            )
        };
        rc_minus_one(rc).map_err(VerbsError::SetOption)
    }

    /// Connects (the QP must exist); `private` (at most 56 bytes) goes to the peer.
    pub fn connect(&self, private: &[u8]) -> Result<(), VerbsError> {
        let mut p = conn_param(private);
        // SAFETY: valid id with a QP; `private` outlives the call, which copies it.
        let rc = unsafe { (dl::cm().rdma_connect)(self.raw(), &mut p) };
        rc_minus_one(rc).map_err(VerbsError::Connect)
    }

    /// Accepts a connect request (the QP must exist); `private` goes to the peer.
    pub fn accept(&self, private: &[u8]) -> Result<(), VerbsError> {
        let mut p = conn_param(private);
        // SAFETY: valid id with a QP; `private` outlives the call, which copies it.
        let rc = unsafe { (dl::cm().rdma_accept)(self.raw(), &mut p) };
        rc_minus_one(rc).map_err(VerbsError::Accept)
    }

    /// Rejects a connect request.
    pub fn reject(&self, private: &[u8]) -> Result<(), VerbsError> {
        // SAFETY: valid id from a connect request; `private` outlives the call.
        let rc = unsafe {
            (dl::cm().rdma_reject)(
                self.raw(),
                private.as_ptr().cast(),
                private.len().min(u8::MAX as usize) as u8,
            )
        };
        rc_minus_one(rc).map_err(VerbsError::Reject)
    }

    /// Disconnects (the QP goes to the error state; the peer gets `Disconnected`).
    pub fn disconnect(&self) -> Result<(), VerbsError> {
        // SAFETY: valid id.
        let rc = unsafe { (dl::cm().rdma_disconnect)(self.raw()) };
        rc_minus_one(rc).map_err(VerbsError::Disconnect)
    }
}
