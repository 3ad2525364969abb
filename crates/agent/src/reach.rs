//! Probing a listening host's RDMA-capable addresses from the host that will
//! connect (an agent answering `PROBE`, or rdpipe for its own stdin/stdout
//! ends): the second rule of data-address discovery, "routed and answering".
//!
//! An address passes when the kernel's route to it leaves from one of this
//! host's RDMA-capable addresses (so a connection crosses the fabric, not the
//! management network behind a default route) and the listening port accepts a
//! TCP connection (the transfer's handshake runs over TCP before RDMA takes
//! over). The probe's connection closes at once, before any handshake; the
//! listener drops it like any unauthenticated connection (a line at its `-v`).

use rdpipe_control::{NetAddr, Reach};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

/// How long a probe waits for an address to accept a connection.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Probes every address in `addrs` (at once, each at most `timeout`) on `port`;
/// `mine` are this host's RDMA-capable addresses. The results keep the order
/// of `addrs`.
pub fn probe(
    addrs: &[IpAddr],
    port: u16,
    mine: &[NetAddr],
    timeout: Duration,
) -> Vec<(IpAddr, Reach)> {
    std::thread::scope(|s| {
        let probes: Vec<_> = addrs
            .iter()
            .map(|&ip| {
                let t = std::thread::Builder::new()
                    .name("probe".into())
                    .spawn_scoped(s, move || probe_one(ip, port, mine, timeout));
                (ip, t)
            })
            .collect();
        probes
            .into_iter()
            .map(|(ip, t)| {
                // A probe that could not start (no threads left) counts as silent.
                let r = t.ok().and_then(|h| h.join().ok());
                (ip, r.unwrap_or(Reach::Silent))
            })
            .collect()
    })
}

/// One address: its route, then a connection.
fn probe_one(ip: IpAddr, port: u16, mine: &[NetAddr], timeout: Duration) -> Reach {
    match route_source(ip) {
        Err(e) => return from_error(&e),
        Ok(src) if !mine.iter().any(|m| m.ip == src) => return Reach::OffFabric(src),
        Ok(_) => {}
    }
    match TcpStream::connect_timeout(&SocketAddr::new(ip, port), timeout) {
        Ok(_) => Reach::Answered,
        Err(e) => from_error(&e),
    }
}

/// The local address the kernel would send from to reach `ip` (a connected
/// UDP socket sends nothing; connecting it only picks the route).
fn route_source(ip: IpAddr) -> io::Result<IpAddr> {
    let any: SocketAddr = if ip.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(any)?;
    s.connect(SocketAddr::new(ip, 9))?;
    Ok(s.local_addr()?.ip())
}

/// What a failed route lookup or connection means.
fn from_error(e: &io::Error) -> Reach {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Reach::Refused,
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Reach::Silent,
        _ => Reach::Unreachable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn lo() -> Vec<NetAddr> {
        vec!["127.0.0.1/8".parse().unwrap()]
    }

    #[test]
    fn a_listening_port_answers_and_a_closed_one_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let r = probe(&[ip], port, &lo(), PROBE_TIMEOUT);
        assert_eq!(r, vec![(ip, Reach::Answered)]);
        // The closed port is the same number on another loopback address
        // while the listener still holds it: dropping the listener and
        // probing again would race other tests (and anything on the host)
        // that are handed the freed port.
        let closed: IpAddr = "127.0.0.2".parse().unwrap();
        let r = probe(&[closed], port, &lo(), PROBE_TIMEOUT);
        assert_eq!(r, vec![(closed, Reach::Refused)]);
        drop(l);
    }

    #[test]
    fn a_route_from_an_address_without_rdma_is_off_fabric() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        // This host's "RDMA-capable" addresses do not include the route's source.
        let mine = vec!["10.255.0.1/24".parse().unwrap()];
        let r = probe(&[ip], port, &mine, PROBE_TIMEOUT);
        assert_eq!(r, vec![(ip, Reach::OffFabric(ip))]);
    }

    #[test]
    fn results_keep_the_order_of_the_addresses() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.1".parse().unwrap();
        // 127.0.0.2 routes over lo too, but nothing listens there.
        let r = probe(&[a, b], port, &lo(), PROBE_TIMEOUT);
        assert_eq!(r, vec![(a, Reach::Refused), (b, Reach::Answered)]);
    }
}
