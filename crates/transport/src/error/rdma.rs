//! The RDMA transport's errors: [`RdmaSetupError`], why one end cannot set RDMA
//! up (it declines, and the caller decides between TCP and exit 7);
//! [`Decline`], who declined and why; and [`RdmaError`], a failure of an RDMA
//! connection that was (being) established, which ends the transfer.

use rdpipe_verbs::{CmEventKind, VerbsError, WcError, WcOpcode};
use rdpipe_wire::{RdmaMsg, Role, WireError, MAX_SLOTS};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// `2 MiB`, `64 KiB`, `100 bytes`.
pub(crate) fn human(n: u64) -> String {
    const K: u64 = 1024;
    if n >= K * K && n % (K * K) == 0 {
        format!("{} MiB", n / (K * K))
    } else if n >= K * K {
        format!("{:.1} MiB", n as f64 / (K * K) as f64)
    } else if n >= K && n % K == 0 {
        format!("{} KiB", n / K)
    } else {
        format!("{n} bytes")
    }
}

/// A step of the sender's rdma_cm resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveStep {
    /// `rdma_resolve_addr`: which local device reaches the receiver.
    Address,
    /// `rdma_resolve_route`.
    Route,
}

impl fmt::Display for ResolveStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResolveStep::Address => "RDMA address resolution",
            ResolveStep::Route => "RDMA route resolution",
        })
    }
}

/// What came instead of the rdma_cm event a set-up step waited for.
#[derive(Debug, thiserror::Error)]
pub enum CmWaitError {
    /// Another event (an error event, a reject).
    #[error("failed: {kind:?} (status {status})")]
    Event {
        /// The event.
        kind: CmEventKind,
        /// Its status (a negative errno, or the reject reason).
        status: i32,
    },
    /// Nothing within the step's timeout.
    #[error("timed out")]
    TimedOut,
    /// Reading the event channel failed.
    #[error("failed: {0}")]
    Channel(#[source] VerbsError),
}

/// Why this end cannot set RDMA up. The message goes to the peer in
/// `RdmaDecline`, and into the fallback warning or the exit-7 error.
#[derive(Debug, thiserror::Error)]
pub enum RdmaSetupError {
    /// No rdma_cm event channel (no RDMA support at all).
    #[error("no RDMA connection manager: {0}")]
    NoConnectionManager(#[source] VerbsError),
    /// An rdma_cm call on the way failed.
    #[error("{0}")]
    Cm(#[source] VerbsError),
    /// The receiver's listener cannot bind the TCP connection's local address.
    #[error("no RDMA device has address {addr} ({source})")]
    NoDevice {
        /// The TCP connection's local address.
        addr: IpAddr,
        /// rdma_bind_addr's error.
        source: VerbsError,
    },
    /// The sender cannot start resolving the receiver's address.
    #[error("no RDMA route from {local} to {remote}: {source}")]
    NoRoute {
        /// The TCP connection's local address.
        local: IpAddr,
        /// The receiver's rdma_cm listener.
        remote: SocketAddr,
        /// rdma_resolve_addr's error.
        source: VerbsError,
    },
    /// Address or route resolution did not finish.
    #[error("{step} {wait}{}", if *step == ResolveStep::Address {
        format!(" (no RDMA device for {local}?)")
    } else {
        String::new()
    })]
    Resolve {
        /// Which step.
        step: ResolveStep,
        /// The TCP connection's local address.
        local: IpAddr,
        /// What came instead of the event.
        wait: CmWaitError,
    },
    /// Allocating a verbs object (PD, CQ, QP) on the device failed.
    #[error("{device}: {source}")]
    Device {
        /// The RDMA device.
        device: String,
        /// The verbs error.
        source: VerbsError,
    },
    /// Registration failed for lack of lockable memory.
    #[error("cannot pin {}: ulimit -l is {}; raise it or use --chunk-size",
        human(*len as u64), limit.map_or_else(|| "unlimited".to_string(), human))]
    Memlock {
        /// Bytes to register.
        len: usize,
        /// `ulimit -l` in bytes (`None`: unlimited).
        limit: Option<u64>,
        /// The verbs error.
        source: VerbsError,
    },
    /// Registration failed for another reason.
    #[error("cannot register {} of memory: {source}", human(*len as u64))]
    Register {
        /// Bytes to register.
        len: usize,
        /// The verbs error.
        source: VerbsError,
    },
    /// More slots than the immediate data can name.
    #[error("{0} slots are more than {MAX_SLOTS}")]
    TooManySlots(u32),
    /// `rdma_connect` failed.
    #[error("rdma_connect: {0}")]
    Connect(#[source] VerbsError),
    /// The receiver refused the connection or it failed.
    #[error("RDMA connection refused or failed: {kind:?} (status {status})")]
    Refused {
        /// The event instead of ESTABLISHED.
        kind: CmEventKind,
        /// Its status.
        status: i32,
    },
    /// No answer to the connect request in time.
    #[error("RDMA connection timed out")]
    ConnectTimeout,
}

impl RdmaSetupError {
    /// The error for a failed registration of `len` bytes: the memlock limit when
    /// that is what stopped it.
    pub fn register(len: usize, source: VerbsError) -> RdmaSetupError {
        if source.is_memlock() {
            let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
            RdmaSetupError::Memlock { len, limit, source }
        } else {
            RdmaSetupError::Register { len, source }
        }
    }
}

/// Which end declined RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decliner {
    /// This end, in this role.
    Here(Role),
    /// The peer, in this role.
    Peer(Role),
}

impl fmt::Display for Decliner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Decliner::Here(Role::Receiver) => "this end (receiver) cannot use RDMA",
            Decliner::Here(Role::Sender) => "this end (sender) cannot use RDMA",
            Decliner::Peer(Role::Sender) => "the sender cannot use RDMA",
            Decliner::Peer(Role::Receiver) => "the receiver cannot use RDMA",
        })
    }
}

/// Why RDMA was declined.
#[derive(Debug, thiserror::Error)]
pub enum DeclineReason {
    /// This end's set-up failed.
    #[error(transparent)]
    Local(#[from] RdmaSetupError),
    /// The peer's `RdmaDecline` message.
    #[error("{0}")]
    Peer(String),
}

/// One end cannot use RDMA and told the other: whether the stream goes over TCP
/// instead is the caller's decision ([`crate::select`]).
#[derive(Debug, thiserror::Error)]
#[error("{by}: {reason}")]
pub struct Decline {
    /// Who declined.
    pub by: Decliner,
    /// Why.
    #[source]
    pub reason: DeclineReason,
}

/// Which end's `--transport rdma` forbids the fallback to TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequiredBy {
    /// `--transport rdma` was given here.
    ThisEnd,
    /// The peer asked for `--transport rdma`.
    Peer,
}

impl fmt::Display for RequiredBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequiredBy::ThisEnd => "--transport rdma was given here",
            RequiredBy::Peer => "the peer requires --transport rdma",
        })
    }
}

/// A failure of an RDMA connection once set-up was under way: it ends the transfer.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// A verbs or rdma_cm call failed.
    #[error("{0}")]
    Verbs(#[from] VerbsError),
    /// A work request failed for a reason other than a lost connection.
    #[error("work completion failed: {0}")]
    Completion(WcError),
    /// A completion of a kind this half never posts.
    #[error("unexpected completion {opcode:?} for work request {wr_id:#x}")]
    UnexpectedCompletion {
        /// Its opcode.
        opcode: WcOpcode,
        /// Its work request id.
        wr_id: u64,
    },
    /// The receiver sent a message the sender cannot decode.
    #[error("bad message from the receiver: {0}")]
    BadFromReceiver(#[source] WireError),
    /// The receiver sent a message that only a sender sends, or a credit for a
    /// slot outside the ring.
    #[error("unexpected message from the receiver: {0:?}")]
    UnexpectedFromReceiver(RdmaMsg),
    /// The sender sent a message the receiver cannot decode.
    #[error("invalid notice from the sender: {0}")]
    BadNotice(#[source] WireError),
    /// The sender sent a message that only a receiver sends.
    #[error("invalid notice from the sender: {msg:?} ({opcode:?})")]
    UnexpectedNotice {
        /// What arrived (none for an immediate-data completion without data).
        msg: Option<RdmaMsg>,
        /// The completion's opcode.
        opcode: WcOpcode,
    },
    /// A slot notice outside the ring.
    #[error(
        "invalid notice from the sender: {len} bytes in slot {slot} of a ring of {slots} × {chunk}"
    )]
    NoticeOutOfRange {
        /// The slot named.
        slot: usize,
        /// The length named.
        len: usize,
        /// Slots in the ring.
        slots: usize,
        /// Bytes per slot.
        chunk: usize,
    },
    /// The authenticated sender did not connect in time.
    #[error("the sender did not complete the RDMA connection within {secs} s")]
    SenderTimeout {
        /// The set-up timeout.
        secs: u64,
    },
    /// The sender's connect request came in on another device than the listener's.
    #[error("connect request arrived on another RDMA device")]
    OtherDevice,
    /// The accepted connection failed before it was established.
    #[error("RDMA connection from {peer} failed: {kind:?} (status {status})")]
    ConnectionFailed {
        /// The peer's address.
        peer: String,
        /// The event instead of ESTABLISHED.
        kind: CmEventKind,
        /// Its status.
        status: i32,
    },
    /// The receiver's accept does not describe a ring.
    #[error("the receiver's RDMA accept carries no valid ring description ({0})")]
    BadRing(#[source] WireError),
    /// The receiver's accept describes another ring than the one negotiated.
    #[error("the receiver's RDMA accept carries no valid ring description ({slots} slots of {chunk} bytes, not the negotiated ring)")]
    RingMismatch {
        /// Its slots.
        slots: u32,
        /// Its chunk size.
        chunk: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(64 * 1024), "64 KiB");
        assert_eq!(human(2 << 20), "2 MiB");
        assert_eq!(human(100), "100 bytes");
        assert_eq!(human(3 << 19), "1.5 MiB");
    }

    #[test]
    fn memlock_message_names_size_and_limit() {
        let enomem = rustix::io::Errno::NOMEM.raw_os_error();
        let e = VerbsError::RegMr {
            len: 2 << 20,
            source: std::io::Error::from_raw_os_error(enomem),
        };
        let m = RdmaSetupError::register(2 << 20, e).to_string();
        assert!(m.starts_with("cannot pin 2 MiB: ulimit -l is "), "{m}");
        assert!(m.ends_with("; raise it or use --chunk-size"), "{m}");
        let e = RdmaSetupError::Memlock {
            len: 2 << 20,
            limit: Some(64 << 10),
            source: VerbsError::RegMr {
                len: 2 << 20,
                source: std::io::Error::from_raw_os_error(enomem),
            },
        };
        assert_eq!(
            e.to_string(),
            "cannot pin 2 MiB: ulimit -l is 64 KiB; raise it or use --chunk-size"
        );
        let other = VerbsError::RegMr {
            len: 4096,
            source: std::io::Error::from_raw_os_error(22),
        };
        assert!(RdmaSetupError::register(4096, other)
            .to_string()
            .starts_with("cannot register 4 KiB"));
    }

    #[test]
    fn resolution_messages() {
        let local: IpAddr = [10, 0, 0, 1].into();
        let e = RdmaSetupError::Resolve {
            step: ResolveStep::Address,
            local,
            wait: CmWaitError::TimedOut,
        };
        assert_eq!(
            e.to_string(),
            "RDMA address resolution timed out (no RDMA device for 10.0.0.1?)"
        );
        let e = RdmaSetupError::Resolve {
            step: ResolveStep::Route,
            local,
            wait: CmWaitError::Event {
                kind: CmEventKind::RouteError,
                status: -110,
            },
        };
        assert_eq!(
            e.to_string(),
            "RDMA route resolution failed: RouteError (status -110)"
        );
    }
}
