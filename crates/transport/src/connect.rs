//! Establishing the TCP connection every transfer starts with: connecting with
//! retries (the receiver may not be up yet), or listening on a port (0 =
//! ephemeral; [`crate::listen`] accepts until a peer authenticates). Also the socket options that bound how long a
//! silently dead peer can hold us (keepalive, TCP_USER_TIMEOUT).

use crate::TransportError;
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use std::io;
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long a peer may stay silent (no ACK for sent data, no answer to keepalive
/// probes) before the kernel declares the connection dead: idle 10 s, then 4 probes
/// 5 s apart, and at most 30 s of unacknowledged data.
pub const DEAD_PEER_SECS: u64 = 30;

/// Sets the options every data connection gets: no Nagle delay (the end-of-stream
/// frame must go out at once) and dead-peer detection.
pub fn tune(stream: &TcpStream) -> Result<(), TransportError> {
    stream
        .set_nodelay(true)
        .map_err(TransportError::SocketOption)?;
    let s = SockRef::from(stream);
    let ka = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(4);
    s.set_tcp_keepalive(&ka)
        .map_err(TransportError::SocketOption)?;
    s.set_tcp_user_timeout(Some(Duration::from_secs(DEAD_PEER_SECS)))
        .map_err(TransportError::SocketOption)?;
    Ok(())
}

fn retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::TimedOut
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::AddrNotAvailable
    )
}

/// How long one connection attempt may wait for its SYN to be answered.
const ATTEMPT: Duration = Duration::from_secs(5);

/// How long one attempt of a reconnect may wait: a link that drops packets
/// while it is down leaves an attempt's SYN unanswered, and the kernel
/// would resend it only after 1, 3, 7 s; a fresh attempt every half second
/// reaches the peer within about that once the link is back.
pub(crate) const REDIAL_ATTEMPT: Duration = Duration::from_millis(500);

/// Connects to `host:port`, retrying refused or unreachable attempts until `timeout`
/// has passed, because in a pipeline the receiver may start after the sender.
pub fn connect_retry(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, TransportError> {
    connect_attempts(host, port, timeout, ATTEMPT)
}

/// [`connect_retry`] with each attempt bounded by `attempt`.
pub(crate) fn connect_attempts(
    host: &str,
    port: u16,
    timeout: Duration,
    attempt: Duration,
) -> Result<TcpStream, TransportError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|source| TransportError::Resolve {
            host: host.to_string(),
            source,
        })?
        .collect();
    let shown = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    if addrs.is_empty() {
        return Err(TransportError::Resolve {
            host: host.to_string(),
            source: io::Error::new(io::ErrorKind::NotFound, "no addresses"),
        });
    }
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        let mut last = None;
        for a in &addrs {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            match TcpStream::connect_timeout(a, left.min(attempt)) {
                Ok(s) => {
                    tracing::debug!("connected to {a}");
                    tune(&s)?;
                    return Ok(s);
                }
                Err(e) => {
                    tracing::debug!("connect to {a}: {e}");
                    last = Some(e)
                }
            }
        }
        let e = last.expect("at least one address was tried");
        if !retryable(&e) || Instant::now() + pause > deadline {
            return Err(TransportError::Connect {
                addr: shown,
                source: e,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// The kernel's accept queue of a listening socket (capped by
/// `net.core.somaxconn`): connections beyond what the acceptor holds wait
/// there ([`crate::listen`]) instead of having their SYN dropped.
pub const BACKLOG: i32 = 1024;

/// A listening socket.
pub struct Listener {
    inner: TcpListener,
    port: u16,
}

impl Listener {
    /// Listens on `port` (0 picks a free one) at `addr` when given and it is an
    /// address of this host (a name is resolved; the first local address wins),
    /// else on all addresses, IPv6 and IPv4.
    pub fn bind_at(addr: Option<&str>, port: u16) -> Result<Listener, TransportError> {
        let Some(addr) = addr else {
            return Listener::bind(port);
        };
        let candidates: Vec<SocketAddr> = (addr, port)
            .to_socket_addrs()
            .map(|a| a.collect())
            .unwrap_or_default();
        for a in candidates {
            let s = Socket::new(Domain::for_address(a), Type::STREAM, Some(Protocol::TCP))
                .and_then(|s| {
                    s.set_reuse_address(true)?;
                    s.bind(&a.into())?;
                    s.listen(BACKLOG)?;
                    Ok(s)
                });
            match s {
                Ok(s) => {
                    let inner: TcpListener = s.into();
                    let port = inner
                        .local_addr()
                        .map_err(|source| TransportError::Listen { port, source })?
                        .port();
                    tracing::debug!("listening on {a} (port {port})");
                    return Ok(Listener { inner, port });
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    return Err(TransportError::Listen { port, source: e })
                }
                Err(e) => tracing::debug!("cannot listen on {a}: {e}"),
            }
        }
        tracing::debug!("{addr} is not an address of this host: listening on all addresses");
        Listener::bind(port)
    }

    /// Listens on `port` (0 picks a free one) on all addresses, IPv6 and IPv4.
    pub fn bind(port: u16) -> Result<Listener, TransportError> {
        let err = |source| TransportError::Listen { port, source };
        let make = |domain: Domain, addr: SocketAddr| -> io::Result<TcpListener> {
            let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
            if domain == Domain::IPV6 {
                s.set_only_v6(false)?;
            }
            s.set_reuse_address(true)?;
            s.bind(&addr.into())?;
            s.listen(BACKLOG)?;
            Ok(s.into())
        };
        let inner = match make(Domain::IPV6, (Ipv6Addr::UNSPECIFIED, port).into()) {
            Ok(l) => l,
            // No IPv6 on this host: plain IPv4.
            Err(e) if e.kind() != io::ErrorKind::AddrInUse => {
                make(Domain::IPV4, ([0, 0, 0, 0], port).into()).map_err(err)?
            }
            Err(e) => return Err(err(e)),
        };
        let port = inner.local_addr().map_err(err)?.port();
        tracing::debug!("listening on port {port}");
        Ok(Listener { inner, port })
    }

    /// The listening socket.
    pub fn socket(&self) -> &TcpListener {
        &self.inner
    }

    /// The port actually bound (useful when 0 was asked for).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits for the next peer.
    pub fn accept(&self) -> Result<TcpStream, TransportError> {
        let (s, a) = self.inner.accept().map_err(TransportError::Accept)?;
        tracing::debug!("accepted a connection from {a}");
        tune(&s)?;
        Ok(s)
    }
}
