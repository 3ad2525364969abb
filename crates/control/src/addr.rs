//! An interface address with its prefix length (`10.0.0.2/24`, `fd00::2/64`), as
//! agents report their host's RDMA-capable addresses in the `FABRIC` line, and
//! the subnet test that rdpipe's data-address discovery uses.

use super::ParseError;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address of a network device and the length of its network prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetAddr {
    /// The address.
    pub ip: IpAddr,
    /// The prefix length (at most 32 for IPv4, 128 for IPv6).
    pub prefix: u8,
}

impl NetAddr {
    /// `ip/prefix`; `None` when the prefix is longer than the address.
    pub fn new(ip: IpAddr, prefix: u8) -> Option<NetAddr> {
        (prefix <= max_prefix(ip)).then_some(NetAddr { ip, prefix })
    }

    /// A single address (`/32`, `/128`): its own subnet only.
    pub fn host(ip: IpAddr) -> NetAddr {
        NetAddr {
            ip,
            prefix: max_prefix(ip),
        }
    }

    /// Whether `other` lies in the same subnet: same family, and equal under the
    /// shorter of the two prefixes.
    pub fn same_subnet(&self, other: &NetAddr) -> bool {
        let len = u32::from(self.prefix.min(other.prefix));
        match (self.ip, other.ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }

    /// Whether another host could connect to this address by itself (not
    /// loopback, not IPv6 link-local, which needs the peer's interface name).
    pub fn usable_by_peers(&self) -> bool {
        match self.ip {
            IpAddr::V4(a) => !a.is_loopback() && !a.is_unspecified(),
            IpAddr::V6(a) => {
                !a.is_loopback() && !a.is_unspecified() && (a.segments()[0] & 0xffc0) != 0xfe80
            }
        }
    }
}

fn max_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

impl fmt::Display for NetAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix)
    }
}

impl FromStr for NetAddr {
    type Err = ParseError;
    /// `ip/prefix`, or a bare address (a single host). `ip -o addr`'s IPv6
    /// form carries no zone, so neither does this.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let bad = ParseError::Field("address");
        match s.split_once('/') {
            Some((ip, len)) => {
                let ip: IpAddr = ip.parse().map_err(|_| bad.clone())?;
                let len: u8 = len.parse().map_err(|_| bad.clone())?;
                NetAddr::new(ip, len).ok_or(bad)
            }
            None => s.parse().map(NetAddr::host).map_err(|_| bad),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> NetAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_prints() {
        for s in [
            "10.0.0.2/24",
            "fd00::2/64",
            "192.168.1.2/32",
            "::1/128",
            "0.0.0.0/0",
        ] {
            assert_eq!(a(s).to_string(), s);
        }
        assert_eq!(a("10.0.0.2"), a("10.0.0.2/32"));
        assert_eq!(a("fd00::2"), a("fd00::2/128"));
        for bad in [
            "10.0.0.2/33",
            "fd00::2/129",
            "x/24",
            "10.0.0.2/",
            "",
            "10.0.0.2/-1",
        ] {
            assert!(bad.parse::<NetAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn subnets() {
        assert!(a("10.0.0.2/24").same_subnet(&a("10.0.0.200/24")));
        assert!(!a("10.0.0.2/24").same_subnet(&a("10.0.1.2/24")));
        // The shorter prefix decides.
        assert!(a("10.0.0.2/16").same_subnet(&a("10.0.1.2/24")));
        assert!(a("10.0.0.2/0").same_subnet(&a("192.168.1.1/24")));
        assert!(!a("10.0.0.2/32").same_subnet(&a("10.0.0.3/32")));
        assert!(a("fd00::2/64").same_subnet(&a("fd00::ffff:1/64")));
        assert!(!a("fd00::2/64").same_subnet(&a("fd00:0:0:1::2/64")));
        // Never across families, even ::ffff:10.0.0.2.
        assert!(!a("10.0.0.2/0").same_subnet(&a("::ffff:10.0.0.2/0")));
    }

    #[test]
    fn peers_cannot_use_loopback_or_link_local() {
        assert!(a("10.0.0.2/24").usable_by_peers());
        assert!(a("fd00::2/64").usable_by_peers());
        assert!(!a("127.0.0.1/8").usable_by_peers());
        assert!(!a("::1/128").usable_by_peers());
        assert!(!a("fe80::5054:ff:fe12:3456/64").usable_by_peers());
    }
}
